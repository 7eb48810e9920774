// Mixed precision as the graph carries it (graph/precision.h): which nodes
// are stamped, that backward inherits the stamp, and that each GEMM op's
// bf16 path matches its fp32 path within a bound derived from K.
//
// The bound. For one output C = sum_k a_k b_k of K products (alpha 1,
// beta 0), with S = sum_k |a_k b_k| and the unit roundoffs
// u = 2^-24 (fp32, 24 significant bits) and v = 2^-8 (bf16, 8 bits):
//   - the bf16 path first rounds a and b: a' = a(1+e), b' = b(1+f), |e|,|f| <= v,
//     so |sum a'b' - sum ab| <= (2v + v^2) S;
//   - it then sums the products (exact in fp32) with fp32 additions in any
//     order: |C_bf16 - sum a'b'| <= gamma(K+2) (1+v)^2 S, gamma(n) = nu/(1-nu)
//     (Higham, Accuracy and Stability of Numerical Algorithms, §3.1, §4.2);
//   - the fp32 path: |C_fp32 - sum ab| <= gamma(K+2) S.
// Together: |C_bf16 - C_fp32| <= ((2v + v^2) + gamma(K+2) ((1+v)^2 + 1)) S.
// The rounding dominates (2v ~ 0.0078 of S at any K; gamma(K+2) ~ 6e-5 at
// K = 1000). That bound alone would pass an op that never rounded, so each
// op is also held to the fp32 GEMM of the bf16-rounded inputs, within the
// two fp32 summations' 2 gamma(K+2) S: only a product of the rounded values
// is that close. S is the fp32 op run on |inputs| (every op here is a
// product), itself rounded: the 1.01 covers that.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "graph/autodiff.h"
#include "graph/executor.h"
#include "graph/graph.h"
#include "graph/op.h"
#include "graph/precision.h"
#include "graph/op_harness.h"
#include "kernels/bf16.h"
#include "kernels/cpu_features.h"
#include "kernels/kernel_test_util.h"

namespace px {
namespace {

Tensor random_tensor(const Shape& shape, uint64_t seed) {
  return Tensor::from_vector(shape, kernels::testing::random_vector(shape.numel(), seed));
}

Tensor transformed(const Tensor& t, float (*f)(float)) {
  std::vector<float> values(t.f32(), t.f32() + t.numel());
  for (float& x : values) x = f(x);
  return Tensor::from_vector(t.shape(), values);
}

float round_to_bf16(float x) { return kernels::to_float(kernels::to_bf16(x)); }
float magnitude(float x) { return std::fabs(x); }

struct OpCase {
  std::string op;
  Attrs attrs;
  std::vector<Shape> inputs;
  int64_t K;                       // the summed dimension (the largest, where outputs sum over several)
  std::vector<int> outputs = {0};  // the products among the outputs
};

double gamma(int64_t n) {
  const double u = std::ldexp(1.0, -24);
  return double(n) * u / (1.0 - double(n) * u);
}

std::vector<Tensor> each(const std::vector<Tensor>& in, float (*f)(float)) {
  std::vector<Tensor> out;
  for (const Tensor& t : in) out.push_back(transformed(t, f));
  return out;
}

::testing::AssertionResult bf16_path_matches(const OpCase& c, uint64_t seed) {
  const OpDef& def = OpRegistry::instance().get(c.op);
  Attrs bf16 = c.attrs;
  bf16.set("precision", std::string("bf16"));
  std::vector<Tensor> in;
  for (const Shape& shape : c.inputs) in.push_back(random_tensor(shape, seed++));
  const std::vector<Tensor> fast = testing::run_op(def, bf16, in);
  const std::vector<Tensor> fp32 = testing::run_op(def, c.attrs, in);
  const std::vector<Tensor> of_rounded = testing::run_op(def, c.attrs, each(in, round_to_bf16));
  const std::vector<Tensor> sums = testing::run_op(def, c.attrs, each(in, magnitude));
  const double v = std::ldexp(1.0, -8), g = gamma(c.K + 2);
  const double against_fp32 = 1.01 * ((2 * v + v * v) + g * ((1 + v) * (1 + v) + 1));
  const double against_rounded = 1.01 * 2 * g;
  for (int o : c.outputs)
    for (int64_t i = 0; i < fast[o].numel(); ++i) {
      const double s = sums[o].f32()[i], x = fast[o].f32()[i];
      if (!(std::fabs(x - fp32[o].f32()[i]) <= against_fp32 * s))
        return ::testing::AssertionFailure() << c.op << " output " << o << " [" << i << "] bf16 " << x << " vs fp32 "
                                             << fp32[o].f32()[i] << ": beyond " << against_fp32 << " * S = "
                                             << against_fp32 * s;
      if (!(std::fabs(x - of_rounded[o].f32()[i]) <= against_rounded * s))
        return ::testing::AssertionFailure() << c.op << " output " << o << " [" << i << "] bf16 " << x
                                             << " vs the rounded inputs' " << of_rounded[o].f32()[i] << ": beyond "
                                             << against_rounded * s;
    }
  return ::testing::AssertionSuccess();
}

class MixedPrecisionOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kernels::cpu_has_avx512_bf16()) GTEST_SKIP() << "no AVX512_BF16: the bf16 path refuses to run";
  }
  kernels::testing::ThreadReset reset_;
};

// Every GEMM op in every layout the graph uses it in (linear NN, matmul NN
// and NT, matmul_at_b TN), on odd sizes with K from 1 to 1000, 1 and 2 threads.
TEST_F(MixedPrecisionOps, Bf16PathOfEveryGemmOpMatchesFp32WithinTheBoundForK) {
  const Attrs nt = {{"trans_b", int64_t{1}}};
  for (int threads : kernels::testing::kThreadCounts) {
    kernels::set_threads(threads);
    uint64_t seed = 1;
    for (int64_t K : {1, 7, 33, 1000}) {
      const std::vector<OpCase> cases = {
          {"linear", {}, {Shape{3, 37, K}, Shape{K, 65}}, K},
          {"matmul", {}, {Shape{2, 33, K}, Shape{K, 17}}, K},
          {"matmul", nt, {Shape{5, 7, K}, Shape{129, K}}, K},
          // matmul_at_b sums over the rows: (K/7+1, 7, 33)^T (.., 7, 40) -> (33, 40)
          {"matmul_at_b", {}, {Shape{K / 7 + 1, 7, 33}, Shape{K / 7 + 1, 7, 40}}, (K / 7 + 1) * 7},
          // batched_matmul in its three layouts: attention's q·kᵀ (NT), p·v (NN), backward's TN
          {"batched_matmul", {}, {Shape{2, 3, 9, K}, Shape{2, 3, K, 5}}, K},
          {"batched_matmul", nt, {Shape{7, 33, K}, Shape{7, 17, K}}, K},
          {"batched_matmul", {{"trans_a", int64_t{1}}}, {Shape{5, K, 6}, Shape{5, K, 11}}, K},
      };
      for (const OpCase& c : cases)
        EXPECT_TRUE(bf16_path_matches(c, seed += 2)) << "threads=" << threads << " K=" << c.K;
    }
  }
}

// conv2d and conv2d_grad: im2col GEMMs summing over Ci*Kh*Kw (forward),
// Co*Kh*Kw (dx, with col2im's additions) and N*Ho*Wo (dw); K is the
// largest. The bias gradient is a sum of dy, fp32 in both paths: only dx
// and dw are held to the bound.
TEST_F(MixedPrecisionOps, Bf16ConvolutionMatchesFp32WithinTheBoundForK) {
  const Attrs strided = {{"stride", int64_t{2}}, {"pad", int64_t{1}}};
  for (int threads : kernels::testing::kThreadCounts) {
    kernels::set_threads(threads);
    uint64_t seed = 100;
    const std::vector<OpCase> cases = {
        {"conv2d", {}, {Shape{3, 4, 7, 6}, Shape{5, 4, 3, 3}}, 4 * 3 * 3},
        {"conv2d", strided, {Shape{2, 33, 9, 8}, Shape{7, 33, 3, 2}}, 33 * 3 * 2},
        {"conv2d", {}, {Shape{1, 1, 5, 5}, Shape{1, 1, 1, 1}}, 1},
        {"conv2d", {}, {Shape{2, 64, 12, 12}, Shape{16, 64, 5, 5}}, 64 * 5 * 5},
        {"conv2d_grad", {}, {Shape{3, 4, 7, 6}, Shape{5, 4, 3, 3}, Shape{3, 5, 5, 4}}, 3 * 5 * 4, {0, 1}},
        {"conv2d_grad", strided, {Shape{2, 33, 9, 8}, Shape{7, 33, 3, 2}, Shape{2, 7, 5, 5}}, 7 * 3 * 2 * 5, {0, 1}},
    };
    for (const OpCase& c : cases) EXPECT_TRUE(bf16_path_matches(c, seed += 3)) << "threads=" << threads << " " << c.op;
  }
}

// A small model: x -> linear -> relu -> matmul (tied, transposed) -> loss.
struct SmallGraph {
  Graph graph;
  ValueId loss = kNoValue;
  SmallGraph() {
    ValueId x = graph.input("x", {Shape{4, 6}});
    ValueId w = graph.param("w", {Shape{6, 5}}, {}, true);
    ValueId e = graph.param("e", {Shape{3, 5}}, {}, true);
    ValueId h = graph.add1("relu", {graph.add1("linear", {x, w}, {}, "fc")}, {}, "act");
    ValueId logits = graph.add1("matmul", {h, e}, {{"trans_b", int64_t{1}}}, "head");
    ValueId target = graph.input("target", {Shape{4}, DType::i32});
    loss = graph.add1("cross_entropy", {logits, target}, {{"scale", 0.25}}, "loss");
  }
};

TEST(MixedPrecision, Bf16StampsTheGemmNodesOnlyAndFp32StampsNothing) {
  SmallGraph fp32, bf16;
  set_precision(fp32.graph, Precision::fp32);
  set_precision(bf16.graph, Precision::bf16);
  for (const Node& node : fp32.graph.nodes()) EXPECT_FALSE(node.attrs.has("precision")) << node.name;
  for (const Node& node : bf16.graph.nodes()) {
    const bool gemm = node.op() == "linear" || node.op() == "matmul";
    EXPECT_EQ(precision_of(node.attrs), gemm ? Precision::bf16 : Precision::fp32) << node.name;
  }
}

TEST(MixedPrecision, BackwardGemmsInheritTheirForwardNodesPrecision) {
  SmallGraph model;
  set_precision(model.graph, Precision::bf16);
  const size_t forward = model.graph.nodes().size();
  build_backward(model.graph, model.loss, model.graph.params());
  int gemms = 0;
  for (size_t n = forward; n < model.graph.nodes().size(); ++n) {
    const Node& node = model.graph.nodes()[n];
    const bool gemm = node.def->mixed_precision;
    gemms += gemm;
    EXPECT_EQ(precision_of(node.attrs), gemm ? Precision::bf16 : Precision::fp32) << node.name << " " << node.op();
  }
  // Each GEMM's rule adds both products (fc.grad_x too, unused: x is an input).
  EXPECT_EQ(gemms, 4);
}

// x -> linear -> gelu -> linear -> loss. Under bf16, gelu's output is read
// only by the second linear (its x) and that linear's weight gradient
// (matmul_at_b's a), the first linear's output only by gelu and gelu_grad
// (their x, read at bf16 precision): both are stored in bf16, the first
// linear's output by a cast, gelu's by gelu itself (OpDef::stores_bf16).
// The loss reads the logits in fp32: they stay.
struct MlpGraph {
  Graph graph;
  ValueId loss = kNoValue, hidden = kNoValue, pre_activation = kNoValue, logits = kNoValue;
  explicit MlpGraph(Precision precision) {
    ValueId x = graph.input("x", {Shape{4, 6}});
    ValueId w1 = graph.param("w1", {Shape{6, 9}}, {ParamInit::Kind::normal, 0.5}, true);
    ValueId w2 = graph.param("w2", {Shape{9, 3}}, {ParamInit::Kind::normal, 0.5}, true);
    pre_activation = graph.add1("linear", {x, w1}, {}, "fc1");
    hidden = graph.add1("gelu", {pre_activation}, {}, "act");
    logits = graph.add1("linear", {hidden, w2}, {}, "fc2");
    ValueId target = graph.input("target", {Shape{4}, DType::i32});
    loss = graph.add1("cross_entropy", {logits, target}, {{"scale", 0.25}}, "loss");
    set_precision(graph, precision);
    build_backward(graph, loss, graph.params());
  }
};

TEST(MixedPrecision, StorageCastsOrStampsExactlyTheValuesOnlyBf16ReadersTakeInBf16) {
  MlpGraph fp32(Precision::fp32), bf16(Precision::bf16);
  EXPECT_EQ(store_gemm_operands_in_bf16(fp32.graph), 0);
  for (const Node& node : fp32.graph.nodes()) EXPECT_FALSE(stores_in_bf16(node.attrs)) << node.name;
  const size_t before = bf16.graph.nodes().size();
  ASSERT_EQ(store_gemm_operands_in_bf16(bf16.graph), 1);  // fc1's output; gelu stores its own
  const Graph& g = bf16.graph;
  ASSERT_EQ(g.nodes().size(), before + 1);
  std::map<ValueId, ValueId> stored;  // fp32 value -> its bf16 copy
  for (size_t n = 0; n < g.nodes().size(); ++n) {
    const Node& node = g.nodes()[n];
    EXPECT_EQ(stores_in_bf16(node.attrs), node.name == "act") << node.name;
    if (node.op() != "to_bf16") continue;
    const ValueId value = node.inputs[0];
    EXPECT_EQ(g.value(value).producer, static_cast<int>(n) - 1) << "right after its producer: " << node.name;
    EXPECT_EQ(node.origin, -1) << node.name;
    EXPECT_EQ(g.spec(node.outputs[0]).dtype, DType::bf16);
    stored[value] = node.outputs[0];
  }
  EXPECT_EQ(stored.size(), 1u);
  EXPECT_TRUE(stored.count(bf16.pre_activation));
  // The stamped node's output is BF16 in place, as its shape rule now says.
  const Node& act = g.nodes()[static_cast<size_t>(g.value(bf16.hidden).producer)];
  EXPECT_EQ(g.spec(bf16.hidden).dtype, DType::bf16);
  std::vector<TensorSpec> inputs;
  for (ValueId v : act.inputs) inputs.push_back(g.spec(v));
  EXPECT_EQ(act.def->infer(inputs, act.attrs).at(0).dtype, DType::bf16);
  std::map<ValueId, std::vector<std::string>> readers;
  for (size_t n = 0; n < g.nodes().size(); ++n) {
    const Node& node = g.nodes()[n];
    for (ValueId v : node.inputs) {
      // Still topological, producers and origins following the shift.
      if (g.value(v).producer >= 0) EXPECT_LT(g.value(v).producer, static_cast<int>(n)) << node.name;
      if (stored.count(v)) EXPECT_EQ(node.op(), "to_bf16") << node.name << " still reads the fp32 value";
      readers[v].push_back(node.op());
    }
    for (ValueId v : node.outputs) EXPECT_EQ(g.value(v).producer, static_cast<int>(n)) << node.name;
    if (node.origin >= 0) EXPECT_EQ(g.nodes()[static_cast<size_t>(node.origin)].origin, -1) << node.name;
  }
  EXPECT_EQ(readers[bf16.hidden], (std::vector<std::string>{"linear", "matmul_at_b"}));
  EXPECT_EQ(readers[stored[bf16.pre_activation]], (std::vector<std::string>{"gelu", "gelu_grad"}));
  EXPECT_EQ(g.spec(bf16.logits).dtype, DType::f32);
}

// The logits' gradient is read by fc2's input-gradient and weight-gradient
// GEMMs, gelu_grad's output by fc1's: one cast before the first of each
// pair, with its origin, feeds both (and nothing else reads the fp32
// value here: the layers have no bias).
TEST(MixedPrecision, SharedGradientsAreRoundedOnceBeforeTheirFirstGemm) {
  MlpGraph fp32(Precision::fp32), bf16(Precision::bf16);
  EXPECT_EQ(round_shared_gradients_once(fp32.graph), 0);
  store_gemm_operands_in_bf16(bf16.graph);
  const size_t before = bf16.graph.nodes().size();
  ASSERT_EQ(round_shared_gradients_once(bf16.graph), 2);
  const Graph& g = bf16.graph;
  ASSERT_EQ(g.nodes().size(), before + 2);
  std::map<std::string, std::vector<std::string>> readers_by_layer;  // origin's name -> the copy's readers
  for (size_t n = 0; n < g.nodes().size(); ++n) {
    const Node& node = g.nodes()[n];
    if (node.op() != "to_bf16" || node.origin < 0) continue;
    EXPECT_EQ(node.origin, g.nodes()[n + 1].origin) << node.name;
    std::vector<std::string>& readers = readers_by_layer[g.nodes()[static_cast<size_t>(node.origin)].name];
    for (size_t r = 0; r < g.nodes().size(); ++r)
      for (ValueId v : g.nodes()[r].inputs) {
        if (v == node.outputs[0]) readers.push_back(g.nodes()[r].name);
        if (v == node.inputs[0]) EXPECT_EQ(g.nodes()[r].op(), "to_bf16") << g.nodes()[r].name;
        if (v == node.outputs[0]) EXPECT_GT(r, n) << g.nodes()[r].name;
      }
  }
  EXPECT_EQ(readers_by_layer["fc2"], (std::vector<std::string>{"fc2.grad_x", "fc2.grad_w"}));
  EXPECT_EQ(readers_by_layer["fc1"], (std::vector<std::string>{"fc1.grad_x", "fc1.grad_w"}));
  EXPECT_EQ(readers_by_layer.size(), 2u);
}

// The small MLP's graph `g` run once on fixed parameters (seeded), rows x
// (4 x 6) and targets i % 3: the `wanted` values.
std::vector<Tensor> run_on_fixed_batch(const Graph& g, const std::vector<ValueId>& wanted) {
  std::vector<Tensor> bound(g.values().size());
  uint64_t seed = 7;
  for (ValueId p : g.params()) bound[static_cast<size_t>(p)] = random_tensor(g.spec(p).shape, seed += 2);
  bound[static_cast<size_t>(g.find("x"))] = random_tensor(Shape{4, 6}, 3);
  Tensor target = Tensor::empty(Shape{4}, DType::i32);
  for (int i = 0; i < 4; ++i) target.data<int32_t>()[i] = i % 3;
  bound[static_cast<size_t>(g.find("target"))] = target;
  return Executor(g, wanted).run(bound);
}

TEST_F(MixedPrecisionOps, StoringGemmOperandsInBf16ChangesNoResult) {
  auto run = [](bool stored) {
    MlpGraph model(Precision::bf16);
    if (stored) {
      EXPECT_EQ(store_gemm_operands_in_bf16(model.graph), 1);
      EXPECT_EQ(round_shared_gradients_once(model.graph), 2);
    }
    const Graph& g = model.graph;
    std::vector<ValueId> wanted = {model.loss};
    for (const char* name : {"fc1.grad_w", "fc2.grad_w"})
      for (const Node& node : g.nodes())
        if (node.name == name) wanted.push_back(node.outputs[0]);
    return run_on_fixed_batch(g, wanted);
  };
  const std::vector<Tensor> rounded = run(false), stored = run(true);
  ASSERT_EQ(rounded.size(), 3u);
  for (size_t i = 0; i < rounded.size(); ++i)
    for (int64_t j = 0; j < rounded[i].numel(); ++j)
      EXPECT_EQ(stored[i].f32()[j], rounded[i].f32()[j]) << "output " << i << " [" << j << "]";
}

// x -> linear -> bias_add -> gelu -> linear -> bias_add -> loss: the MLP
// above with the biases, as nn::linear builds them (two nodes a layer).
struct BiasMlpGraph {
  Graph graph;
  ValueId loss = kNoValue;
  // `extra_layers` more hidden layers (9 -> 9, "fc1_<i>" and "act_<i>") after the first.
  explicit BiasMlpGraph(Precision precision, bool pre_bias_is_an_output = false, int extra_layers = 0) {
    ValueId x = graph.input("x", {Shape{4, 6}});
    ValueId w1 = graph.param("w1", {Shape{6, 9}}, {ParamInit::Kind::normal, 0.5}, true);
    ValueId b1 = graph.param("b1", {Shape{9}}, {ParamInit::Kind::normal, 0.5}, false);
    ValueId w2 = graph.param("w2", {Shape{9, 3}}, {ParamInit::Kind::normal, 0.5}, true);
    ValueId b2 = graph.param("b2", {Shape{3}}, {ParamInit::Kind::normal, 0.5}, false);
    ValueId pre = graph.add1("linear", {x, w1}, {}, "fc1");
    if (pre_bias_is_an_output) graph.mark_output(pre, "pre_bias");
    ValueId hidden = graph.add1("gelu", {graph.add1("bias_add", {pre, b1}, {}, "fc1.add_bias")}, {}, "act");
    for (int i = 1; i <= extra_layers; ++i) {
      const std::string layer = "fc1_" + std::to_string(i);
      ValueId w = graph.param("w1_" + std::to_string(i), {Shape{9, 9}}, {ParamInit::Kind::normal, 0.5}, true);
      ValueId b = graph.param("b1_" + std::to_string(i), {Shape{9}}, {ParamInit::Kind::normal, 0.5}, false);
      ValueId y = graph.add1("bias_add", {graph.add1("linear", {hidden, w}, {}, layer), b}, {}, layer + ".add_bias");
      hidden = graph.add1("gelu", {y}, {}, "act_" + std::to_string(i));
    }
    ValueId logits = graph.add1("bias_add", {graph.add1("linear", {hidden, w2}, {}, "fc2"), b2}, {}, "fc2.add_bias");
    ValueId target = graph.input("target", {Shape{4}, DType::i32});
    loss = graph.add1("cross_entropy", {logits, target}, {{"scale", 0.25}}, "loss");
    set_precision(graph, precision);
    build_backward(graph, loss, graph.params());
  }
};

TEST(MixedPrecision, BiasFusionMergesEachBf16LinearWithItsBiasAdd) {
  BiasMlpGraph fp32(Precision::fp32), bf16(Precision::bf16), kept(Precision::bf16, true);
  EXPECT_EQ(fuse_bias_into_gemms(fp32.graph).fused, 0);
  store_gemm_operands_in_bf16(bf16.graph);
  const size_t nodes = bf16.graph.nodes().size(), values = bf16.graph.values().size();
  const FusedBiases fused = fuse_bias_into_gemms(bf16.graph);
  ASSERT_EQ(fused.fused, 2);
  const Graph& g = bf16.graph;
  EXPECT_EQ(g.nodes().size(), nodes - 2);
  EXPECT_EQ(g.values().size(), values - 2);
  std::map<std::string, int> fused_at;  // linear_bias node by name
  for (size_t n = 0; n < g.nodes().size(); ++n) {
    const Node& node = g.nodes()[n];
    EXPECT_NE(node.op(), "linear") << node.name;
    if (node.origin < 0) EXPECT_NE(node.op(), "bias_add") << node.name;
    if (node.op() == "linear_bias") fused_at[node.name] = static_cast<int>(n);
    for (ValueId v : node.inputs)
      if (g.value(v).producer >= 0) EXPECT_LT(g.value(v).producer, static_cast<int>(n)) << node.name;
    for (ValueId v : node.outputs) EXPECT_EQ(g.value(v).producer, static_cast<int>(n)) << node.name;
  }
  ASSERT_EQ(fused_at.size(), 2u);
  const Node& fc1 = g.nodes()[static_cast<size_t>(fused_at["fc1"])];
  const Node& fc2 = g.nodes()[static_cast<size_t>(fused_at["fc2"])];
  EXPECT_EQ(g.value(fc1.inputs[2]).name, "b1");
  EXPECT_TRUE(stores_in_bf16(fc1.attrs)) << "gelu reads it: stored in bf16, as its bias add was";
  EXPECT_EQ(g.spec(fc1.outputs[0]).dtype, DType::bf16);
  EXPECT_FALSE(stores_in_bf16(fc2.attrs)) << "the loss reads the logits in fp32";
  EXPECT_EQ(precision_of(fc2.attrs), Precision::bf16);
  // The linears' backward follows the fused nodes; the bias adds' already did.
  for (const Node& node : g.nodes())
    for (const char* layer : {"fc1", "fc2"})
      for (const char* grad : {".grad_x", ".grad_w", ".add_bias.grad_b"})
        if (node.name == std::string(layer) + grad) EXPECT_EQ(node.origin, fused_at[layer]) << node.name;
  // Ids held outside the graph follow it.
  EXPECT_EQ(g.nodes()[static_cast<size_t>(g.value(fused.new_id[static_cast<size_t>(bf16.loss)]).producer)].name,
            "loss");
  for (ValueId p : g.params()) EXPECT_EQ(g.value(p).kind, Value::Kind::param);
  // A linear whose output is read elsewhere too (here: a graph output) keeps its bias add.
  store_gemm_operands_in_bf16(kept.graph);
  EXPECT_EQ(fuse_bias_into_gemms(kept.graph).fused, 1);
}

// gelu_grad's output, read by fc1's shared-gradient cast and its bias
// gradient's sum, becomes one gelu_grad_bias storing the cast's bf16 copy
// and making the sum under its name.
TEST(MixedPrecision, GeluGradTakesOverTheCastAndTheBiasGradientSum) {
  BiasMlpGraph fp32(Precision::fp32), bf16(Precision::bf16);
  EXPECT_EQ(fuse_bias_gradients_into_gelu_grad(fp32.graph).fused, 0);
  store_gemm_operands_in_bf16(bf16.graph);
  fuse_bias_into_gemms(bf16.graph);
  ASSERT_EQ(round_shared_gradients_once(bf16.graph), 2);
  const size_t nodes = bf16.graph.nodes().size();
  const FusedBiases fused = fuse_bias_gradients_into_gelu_grad(bf16.graph);
  ASSERT_EQ(fused.fused, 2);  // fc1's cast and its bias gradient's sum
  const Graph& g = bf16.graph;
  EXPECT_EQ(g.nodes().size(), nodes - 2);
  int found = 0;
  for (size_t n = 0; n < g.nodes().size(); ++n) {
    const Node& node = g.nodes()[n];
    EXPECT_NE(node.name, "fc1.add_bias.grad_b") << "the sum is gone";
    EXPECT_NE(node.op(), "gelu_grad");
    for (ValueId v : node.inputs)
      if (g.value(v).producer >= 0) EXPECT_LT(g.value(v).producer, static_cast<int>(n)) << node.name;
    for (ValueId v : node.outputs) EXPECT_EQ(g.value(v).producer, static_cast<int>(n)) << node.name;
    if (node.op() != "gelu_grad_bias") continue;
    ++found;
    EXPECT_EQ(node.name, "act.grad");
    EXPECT_TRUE(stores_in_bf16(node.attrs));
    ASSERT_EQ(node.outputs.size(), 2u);
    EXPECT_EQ(g.spec(node.outputs[0]).dtype, DType::bf16);
    EXPECT_EQ(g.value(node.outputs[1]).name, "fc1.add_bias.grad_b");
    std::vector<std::string> readers;
    for (const Node& reader : g.nodes())
      for (ValueId v : reader.inputs)
        if (v == node.outputs[0]) readers.push_back(reader.name);
    EXPECT_EQ(readers, (std::vector<std::string>{"fc1.grad_x", "fc1.grad_w"}));
  }
  EXPECT_EQ(found, 1);
  // fc2's bias gradient still sums the logits' gradient: no gelu_grad made it.
  int sums = 0;
  for (const Node& node : g.nodes()) sums += node.op() == "sum_leading";
  EXPECT_EQ(sums, 1);
}

// Over several fusions, every value id maps to the value that now holds it:
// the same name, or for a removed cast the gradient stored in its place.
TEST(MixedPrecision, FusionsMapEveryValueIdToItsHolder) {
  BiasMlpGraph model(Precision::bf16, false, 3);
  Graph& g = model.graph;
  store_gemm_operands_in_bf16(g);
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<std::string> names;
    for (const Value& v : g.values()) names.push_back(v.name);
    if (pass == 0) {
      const FusedBiases fused = fuse_bias_into_gemms(g);
      EXPECT_EQ(fused.fused, 5);  // fc1, three fc1_<i>, fc2
      for (size_t v = 0; v < names.size(); ++v)
        if (fused.new_id[v] != kNoValue) EXPECT_EQ(g.value(fused.new_id[v]).name, names[v]);
      round_shared_gradients_once(g);
    } else {
      const FusedBiases fused = fuse_bias_gradients_into_gelu_grad(g);
      EXPECT_EQ(fused.fused, 8);  // a cast and a sum for each of the four gelus
      for (size_t v = 0; v < names.size(); ++v) {
        ASSERT_NE(fused.new_id[v], kNoValue) << names[v];
        const std::string& now = g.value(fused.new_id[v]).name;
        if (now != names[v]) EXPECT_EQ(now + ".bf16", names[v]) << "a cast's id maps to what it copied";
      }
    }
  }
}

// The step's loss and gradients, bit for bit, with the layers apart, with
// the biases in the GEMMs, and with the bias gradient in gelu_grad too.
TEST_F(MixedPrecisionOps, FusingBiasesChangesNoResult) {
  auto run = [](int fusions) {
    BiasMlpGraph model(Precision::bf16);
    store_gemm_operands_in_bf16(model.graph);
    ValueId loss = model.loss;
    if (fusions >= 1) loss = fuse_bias_into_gemms(model.graph).new_id[static_cast<size_t>(loss)];
    round_shared_gradients_once(model.graph);
    if (fusions >= 2) loss = fuse_bias_gradients_into_gelu_grad(model.graph).new_id[static_cast<size_t>(loss)];
    const Graph& g = model.graph;
    std::vector<ValueId> wanted = {loss};
    for (const char* name : {"fc1.grad_w", "fc1.add_bias.grad_b", "fc2.grad_w", "fc2.add_bias.grad_b", "fc1.grad_x"})
      for (size_t v = 0; v < g.values().size(); ++v)
        if (g.values()[v].name == name) wanted.push_back(static_cast<ValueId>(v));
    EXPECT_EQ(wanted.size(), 6u);
    return run_on_fixed_batch(g, wanted);
  };
  const std::vector<Tensor> apart = run(0);
  ASSERT_EQ(apart.size(), 6u);
  for (int fusions : {1, 2}) {
    const std::vector<Tensor> fused = run(fusions);
    ASSERT_EQ(fused.size(), 6u);
    for (size_t i = 0; i < apart.size(); ++i)
      for (int64_t j = 0; j < apart[i].numel(); ++j)
        EXPECT_EQ(fused[i].f32()[j], apart[i].f32()[j]) << fusions << " fusions: output " << i << " [" << j << "]";
  }
}

// Every op that can store its output in bf16 (OpDef::stores_bf16), on its
// examples: stamped, it writes exactly the bits a to_bf16 after its
// unstamped run would, from an fp32 input 0 and, where it takes input 0 in
// bf16 (OpDef::bf16_inputs), from that input stored in bf16.
TEST_F(MixedPrecisionOps, StampedOpsStoreWhatACastAfterThemWould) {
  int checked = 0;
  for (const std::string& name : OpRegistry::instance().names()) {
    const OpDef& def = OpRegistry::instance().get(name);
    if (!def.stores_bf16) continue;
    for (const OpExample& example : def.examples()) {
      Attrs plain = example.attrs;
      plain.set("precision", std::string("bf16"));
      Attrs stamped = plain;
      stamped.set("store", std::string("bf16"));
      ASSERT_TRUE(stores_in_bf16(stamped));
      std::vector<Tensor> in;
      uint64_t seed = 40;
      for (const TensorSpec& spec : example.inputs) in.push_back(random_tensor(spec.shape, seed++));
      std::vector<std::vector<Tensor>> variants = {in};
      const std::vector<int>& takes = def.bf16_inputs;
      if (std::find(takes.begin(), takes.end(), 0) != takes.end()) {
        Tensor stored = Tensor::empty(in[0].shape(), DType::bf16);
        kernels::ref::to_bf16(in[0].numel(), in[0].f32(), static_cast<kernels::bf16*>(stored.raw()));
        variants.push_back(in);
        variants.back()[0] = stored;
      }
      for (const std::vector<Tensor>& inputs : variants) {
        const Tensor y = testing::run_op(def, plain, inputs).at(0);
        const Tensor narrow = testing::run_op(def, stamped, inputs).at(0);
        ASSERT_EQ(y.dtype(), DType::f32) << name;
        ASSERT_EQ(narrow.dtype(), DType::bf16) << name;
        ASSERT_EQ(narrow.shape(), y.shape()) << name;
        const auto* bits = static_cast<const kernels::bf16*>(narrow.raw());
        for (int64_t i = 0; i < y.numel(); ++i)
          ASSERT_EQ(bits[i], kernels::to_bf16(y.f32()[i])) << name << " [" << i << "] of " << y.shape().str()
                                                           << (inputs[0].dtype() == DType::bf16 ? ", x in bf16" : "");
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 10);  // bias_add's two examples; gelu's and linear_bias' two, each also from a bf16 x
}

TEST(MixedPrecision, UnknownPrecisionNamesTheWordAndTheChoices) {
  try {
    parse_precision("fp16");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'fp16'"), std::string::npos) << message;
    EXPECT_NE(message.find("fp32 or bf16"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace px
