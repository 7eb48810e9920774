// Constant folding of the operators torch writes to make constants in the
// graph: a causal mask made in `forward` (torch.tril(torch.ones(T, T)))
// is a Trilu of a constant, folded at import, whose result feeds Where
// as a buffer's slice does; positions torch.arange(T) are a Range of the
// input's length, expanded over the batch (Expand, with Where resolving
// expand's -1), and a mask compared from positions (Greater, ...) folds
// the same way.
#include <gtest/gtest.h>

#include <functional>
#include <optional>

#include <onnx/onnx_pb.h>

#include "core/error.h"
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

// A constant operand: i64 values, or f32 when `floats`.
struct Operand {
  Shape shape;
  std::vector<double> values;
  bool floats = false;
};

// `op` folded over `inputs` (named in0, in1, ...) with integer attributes;
// its first output.
Tensor fold(const std::string& op, const std::vector<Operand>& inputs,
            const std::vector<std::pair<std::string, int64_t>>& attributes = {}) {
  const ::onnx::GraphProto proto;
  Graph graph;
  nn::ImportContext context(graph, proto, 2, true);
  ::onnx::NodeProto node;
  node.set_op_type(op);
  node.set_name("/fold/" + op);
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor t = Tensor::empty(inputs[i].shape, inputs[i].floats ? DType::f32 : DType::i64);
    for (int64_t j = 0; j < t.numel(); ++j) {
      if (inputs[i].floats) t.f32()[j] = static_cast<float>(inputs[i].values.at(j));
      else t.data<int64_t>()[j] = static_cast<int64_t>(inputs[i].values.at(j));
    }
    context.define_constant("in" + std::to_string(i), std::move(t));
    node.add_input("in" + std::to_string(i));
  }
  node.add_output("out");
  for (const auto& [name, value] : attributes) {
    auto* a = node.add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INT);
    a->set_i(value);
  }
  std::optional<std::vector<Tensor>> out = nn::try_fold(context, node);
  if (!out) throw std::logic_error(op + " did not fold");
  return out->front();
}

// Folds `op` over i64 constants given as (shape, values); returns the
// error text, or "" when it folds.
std::string fold_error(const std::string& op, const std::vector<std::pair<Shape, std::vector<int64_t>>>& inputs,
                       std::optional<int64_t> axis = std::nullopt) {
  std::vector<Operand> operands;
  for (const auto& [shape, values] : inputs) operands.push_back({shape, {values.begin(), values.end()}});
  std::vector<std::pair<std::string, int64_t>> attributes;
  if (axis) attributes.emplace_back("axis", *axis);
  try {
    fold(op, operands, attributes);
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

// The error folding gives; "" when it folds.
std::string error_of(const std::function<void()>& folding) {
  try {
    folding();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<int64_t> ints(const Tensor& t) {
  EXPECT_EQ(t.dtype(), DType::i64);
  return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.numel());
}
std::vector<float> floats(const Tensor& t) {
  EXPECT_EQ(t.dtype(), DType::f32);
  return std::vector<float>(t.f32(), t.f32() + t.numel());
}
// A 0/1 matrix row by row, "|" between rows.
std::string mask_of(const Tensor& t) {
  std::string text;
  const int64_t columns = t.shape()[-1];
  const std::vector<int64_t> values = ints(t);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (i > 0 && i % columns == 0) text += '|';
    text += values[static_cast<size_t>(i)] != 0 ? '1' : '0';
  }
  return text;
}

const Operand kOne{Shape{}, {1}};

TEST(OnnxFold, RangeCountsFromStartUpToLimitByDelta) {
  // torch.arange(T) as torch exports it: scalars, the limit the input's length.
  const Tensor positions = fold("Range", {{Shape{}, {0}}, {Shape{}, {5}}, kOne});
  EXPECT_EQ(positions.shape(), Shape({5}));
  EXPECT_EQ(ints(positions), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(ints(fold("Range", {{Shape{}, {10}}, {Shape{}, {4}}, {Shape{}, {-3}}})), (std::vector<int64_t>{10, 7}));
  EXPECT_EQ(ints(fold("Range", {{Shape{}, {10}}, {Shape{}, {3}}, {Shape{}, {-7}}})), (std::vector<int64_t>{10}));
  EXPECT_EQ(fold("Range", {{Shape{}, {3}}, {Shape{}, {3}}, kOne}).shape(), Shape({0}));
  EXPECT_EQ(fold("Range", {{Shape{}, {3}}, {Shape{}, {1}}, kOne}).shape(), Shape({0}));
  EXPECT_EQ(floats(fold("Range", {{Shape{}, {0.5}, true}, {Shape{}, {2.0}, true}, {Shape{}, {0.5}, true}})),
            (std::vector<float>{0.5f, 1.0f, 1.5f}));
  const std::string zero = error_of([] { fold("Range", {{Shape{}, {0}}, {Shape{}, {5}}, {Shape{}, {0}}}); });
  EXPECT_NE(zero.find("node '/fold/Range' (Range): delta is 0"), std::string::npos) << zero;
  const std::string vector = error_of([] { fold("Range", {{Shape{2}, {0, 1}}, {Shape{}, {5}}, kOne}); });
  EXPECT_NE(vector.find("start has shape [2]; Range takes scalars"), std::string::npos) << vector;
  const std::string huge =
      error_of([] { fold("Range", {{Shape{}, {0}}, {Shape{}, {double(int64_t{1} << 40)}}, kOne}); });
  EXPECT_NE(huge.find("more than the"), std::string::npos) << huge;
}

TEST(OnnxFold, ExpandBroadcastsPositionsOverTheBatch) {
  // arange(3).unsqueeze(0).expand(2, -1): (1, 3) to [2, 1] (expand's -1 resolved to 1).
  const Tensor rows = fold("Expand", {{Shape{1, 3}, {0, 1, 2}}, {Shape{2}, {2, 1}}});
  EXPECT_EQ(rows.shape(), Shape({2, 3}));
  EXPECT_EQ(ints(rows), (std::vector<int64_t>{0, 1, 2, 0, 1, 2}));
  // A column against a longer shape: numpy's rule, new leading dims too.
  const Tensor columns = fold("Expand", {{Shape{2, 1}, {7, 8}}, {Shape{3}, {2, 2, 3}}});
  EXPECT_EQ(columns.shape(), Shape({2, 2, 3}));
  EXPECT_EQ(ints(columns), (std::vector<int64_t>{7, 7, 7, 8, 8, 8, 7, 7, 7, 8, 8, 8}));
  const std::string clash = error_of([] { fold("Expand", {{Shape{1, 3}, {0, 1, 2}}, {Shape{2}, {2, 4}}}); });
  EXPECT_NE(clash.find("node '/fold/Expand' (Expand): shapes [1,3] and [2,4] do not broadcast"), std::string::npos)
      << clash;
  const std::string negative = error_of([] { fold("Expand", {{Shape{1}, {0}}, {Shape{1}, {-1}}}); });
  EXPECT_NE(negative.find("negative size"), std::string::npos) << negative;
}

TEST(OnnxFold, WhereChoosesByItsConditionWithBroadcasting) {
  // torch's expand(B, -1): Where(shape == -1, ones, shape) -> [B, 1].
  const Tensor is_minus_one = fold("Equal", {{Shape{2}, {4, -1}}, {Shape{}, {-1}}});
  EXPECT_EQ(ints(is_minus_one), (std::vector<int64_t>{0, 1}));
  const Tensor sizes = fold("Where", {{Shape{2}, {0, 1}}, {Shape{2}, {1, 1}}, {Shape{2}, {4, -1}}});
  EXPECT_EQ(ints(sizes), (std::vector<int64_t>{4, 1}));
  // An additive causal mask: a (2, 2) condition, scalar float branches.
  const Tensor additive = fold("Where", {{Shape{2, 2}, {1, 0, 1, 1}}, {Shape{}, {0.0}, true}, {Shape{}, {-1e9}, true}});
  EXPECT_EQ(additive.shape(), Shape({2, 2}));
  EXPECT_EQ(floats(additive), (std::vector<float>{0.0f, -1e9f, 0.0f, 0.0f}));
  const std::string clash = error_of([] { fold("Where", {{Shape{3}, {1, 0, 1}}, {Shape{2}, {1, 2}}, kOne}); });
  EXPECT_NE(clash.find("shapes [3] and [2] and [] do not broadcast"), std::string::npos) << clash;
}

TEST(OnnxFold, ComparisonsOfPositionsMakeACausalMask) {
  // i = arange(3): a row (1, 3) against a column (3, 1).
  const Operand row{Shape{1, 3}, {0, 1, 2}}, column{Shape{3, 1}, {0, 1, 2}};
  EXPECT_EQ(mask_of(fold("Greater", {row, column})), "011|001|000");  // j > i: masked_fill's mask
  EXPECT_EQ(mask_of(fold("LessOrEqual", {row, column})), "100|110|111");  // j <= i: kept
  EXPECT_EQ(mask_of(fold("Less", {row, column})), "000|100|110");
  EXPECT_EQ(mask_of(fold("GreaterOrEqual", {row, column})), "111|011|001");
  EXPECT_EQ(mask_of(fold("Equal", {row, column})), "100|010|001");
  EXPECT_EQ(mask_of(fold("Not", {{Shape{3, 3}, {0, 1, 1, 0, 0, 1, 0, 0, 0}}})), "100|110|111");  // ~(j > i)
  // A float against integers, compared in float.
  EXPECT_EQ(ints(fold("Less", {{Shape{}, {0.5}, true}, {Shape{3}, {0, 1, 2}}})), (std::vector<int64_t>{0, 1, 1}));
  const std::string clash = error_of([] { fold("Less", {{Shape{2}, {0, 1}}, {Shape{3}, {0, 1, 2}}}); });
  EXPECT_NE(clash.find("node '/fold/Less' (Less): shapes [2] and [3] do not broadcast"), std::string::npos) << clash;
}

TEST(OnnxFold, CastToBoolIsNonzeroAndToIntegersTruncates) {
  const Operand values{Shape{3}, {0.0, 0.5, -2.5}, true};
  EXPECT_EQ(ints(fold("Cast", {values}, {{"to", ::onnx::TensorProto::BOOL}})), (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ(ints(fold("Cast", {values}, {{"to", ::onnx::TensorProto::INT64}})), (std::vector<int64_t>{0, 0, -2}));
  EXPECT_EQ(floats(fold("Cast", {{Shape{2}, {3, -1}}}, {{"to", ::onnx::TensorProto::DOUBLE}})),
            (std::vector<float>{3.0f, -1.0f}));
  const std::string text = error_of([] { fold("Cast", {kOne}, {{"to", ::onnx::TensorProto::STRING}}); });
  EXPECT_NE(text.find("node '/fold/Cast' (Cast): cast to ONNX type 8"), std::string::npos) << text;
}

}  // namespace
}  // namespace px
