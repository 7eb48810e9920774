// Constant folding of the operators torch writes to make constants in the
// graph: a causal mask made in `forward` (torch.tril(torch.ones(T, T)))
// is a Trilu of a constant, folded at import, whose result feeds Where
// as a buffer's slice does.
#include <gtest/gtest.h>

#include <onnx/onnx_pb.h>

#include "nn/onnx/fold.h"
#include "nn/onnx/import_context.h"

namespace px {
namespace {

// Trilu(x 2x3x3 of ones, k, upper) folded.
Tensor trilu(int64_t upper, std::optional<int64_t> k) {
  const ::onnx::GraphProto proto;
  Graph graph;
  nn::ImportContext context(graph, proto, 2, true);
  Tensor ones = Tensor::empty(Shape{2, 3, 3}, DType::f32);
  for (int64_t i = 0; i < ones.numel(); ++i) ones.f32()[i] = 1;
  context.define_constant("ones", std::move(ones));
  ::onnx::NodeProto node;
  node.set_op_type("Trilu");
  node.set_name("/mask/Trilu");
  node.add_input("ones");
  if (k) {
    Tensor diagonal = Tensor::empty(Shape{}, DType::i64);
    diagonal.data<int64_t>()[0] = *k;
    context.define_constant("k", std::move(diagonal));
    node.add_input("k");
  }
  node.add_output("mask");
  auto* a = node.add_attribute();
  a->set_name("upper");
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(upper);
  std::optional<std::vector<Tensor>> out = nn::try_fold(context, node);
  EXPECT_TRUE(out.has_value());
  return out ? (*out)[0] : Tensor{};
}

// Row by row, over both matrices of the batch (which must be equal).
std::string rows_of(const Tensor& t) {
  std::string text;
  for (int64_t m = 0; m < 2; ++m) {
    for (int64_t i = 0; i < 9; ++i) text += t.f32()[m * 9 + i] != 0 ? '1' : '0';
    text += m == 0 ? "|" : "";
  }
  return text;
}

TEST(OnnxFold, TriluOfAConstantKeepsOneTriangle) {
  EXPECT_EQ(rows_of(trilu(0, std::nullopt)), "100110111|100110111");  // torch.tril: the causal mask
  EXPECT_EQ(rows_of(trilu(1, std::nullopt)), "111011001|111011001");  // torch.triu
  EXPECT_EQ(rows_of(trilu(1, 1)), "011001000|011001000");             // above the diagonal: masked_fill's mask
  EXPECT_EQ(rows_of(trilu(0, -1)), "000100110|000100110");
}

}  // namespace
}  // namespace px
