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

// Folds `op` over i64 constants given as (shape, values); returns the
// error text, or "" when it folds.
std::string fold_error(const std::string& op, const std::vector<std::pair<Shape, std::vector<int64_t>>>& inputs,
                       std::optional<int64_t> axis = std::nullopt) {
  const ::onnx::GraphProto proto;
  Graph graph;
  nn::ImportContext context(graph, proto, 2, true);
  ::onnx::NodeProto node;
  node.set_op_type(op);
  node.set_name("/fold/" + op);
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor t = Tensor::empty(inputs[i].first, DType::i64);
    for (int64_t j = 0; j < t.numel(); ++j) t.data<int64_t>()[j] = inputs[i].second.at(j);
    context.define_constant("in" + std::to_string(i), std::move(t));
    node.add_input("in" + std::to_string(i));
  }
  node.add_output("out");
  if (axis) {
    auto* a = node.add_attribute();
    a->set_name("axis");
    a->set_type(::onnx::AttributeProto::INT);
    a->set_i(*axis);
  }
  try {
    nn::try_fold(context, node);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Malformed shape arithmetic (what the fuzzer finds) is refused by name
// before any element is copied.
TEST(OnnxFold, MalformedInputsAreNamedErrors) {
  EXPECT_EQ(fold_error("Concat", {{Shape{2, 3}, {1, 2, 3, 4, 5, 6}}, {Shape{1, 3}, {7, 8, 9}}}, 0), "");
  const std::string concat = fold_error("Concat", {{Shape{2, 3}, {1, 2, 3, 4, 5, 6}}, {Shape{1, 9}, {1, 2, 3, 4, 5, 6, 7, 8, 9}}}, 0);
  EXPECT_NE(concat.find("/fold/Concat"), std::string::npos) << concat;
  EXPECT_NE(concat.find("input 1 is I64 [1,9]"), std::string::npos) << concat;
  const std::string slice = fold_error("Slice", {{Shape{4}, {1, 2, 3, 4}}, {Shape{2}, {0, 0}}, {Shape{1}, {2}}});
  EXPECT_NE(slice.find("2 starts, 1 ends"), std::string::npos) << slice;
  const std::string reshape = fold_error("Reshape", {{Shape{4}, {1, 2, 3, 4}}, {Shape{2}, {-1, -1}}});
  EXPECT_NE(reshape.find("two -1"), std::string::npos) << reshape;
  const std::string overflow =
      fold_error("Mul", {{Shape{1}, {int64_t{1} << 40}}, {Shape{1}, {int64_t{1} << 40}}});
  EXPECT_NE(overflow.find("overflows int64"), std::string::npos) << overflow;
  const std::string huge = fold_error("ConstantOfShape", {{Shape{2}, {int64_t{1} << 20, int64_t{1} << 20}}});
  EXPECT_NE(huge.find("more than the"), std::string::npos) << huge;
}

}  // namespace
}  // namespace px
