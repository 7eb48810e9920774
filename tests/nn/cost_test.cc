// OpDef::cost on a whole GPT training step (forward + build_backward), held
// against the formula the GPT benchmarks report GFLOP/s with (flops_per_step
// in bench/gpt_bench.h, the PyTorch peer's):
//   F = 6 · (params - wpe) · tokens  +  12 · L · T · C · tokens
// Legend: B batch, T sequence (= block, as the benchmarks run), C n_embd,
// L n_layer, V vocab, tokens = B·T.
//
// What the formula covers, term by term, against the graph's nodes:
//  - 6 · weight · token for every matrix weight: 2 forward (linear, or the
//    LM head's matmul with wte), 2 for the input gradient (matmul) and 2 for
//    the weight gradient (matmul_at_b). The matrices are wte (V·C, once,
//    tied) and per block c_attn, attn.c_proj, c_fc, mlp.c_proj (12·C²).
//  - 12 · L · T · C · tokens for QK^T and AV over the full T x T: attention
//    4·B·T²·C forward, attention_grad 8·B·T²·C.
//  - But "params - wpe" also holds the vector parameters: biases (9·C a
//    block) and layer-norm gains and shifts (4·C a block, 2·C for ln_f).
//    No matmul multiplies by them, so the formula counts 6 · tokens · each
//    of them that the matmul nodes do not perform.
// So the matmul-class nodes (linear, matmul, matmul_at_b, attention,
// attention_grad) must sum to F - 6 · tokens · vector params exactly. The
// other nodes add elementwise flops the formula has no term for: bias_add
// and its bias gradient (sum_leading), one flop per element each; layer
// norm, GELU, the residual and position-embedding adds, cross-entropy (the
// embedding lookups and their gradients count none). The benchmark configs
// have no dropout.
#include <gtest/gtest.h>

#include <map>

#include "gpt_bench.h"
#include "graph/autodiff.h"
#include "nn/gpt.h"

namespace px {
namespace {

// FLOPs of every node of the training graph, summed per op.
std::map<std::string, double> flops_by_op(const bench::BenchConfig& config) {
  nn::Model m = nn::build_gpt(config.gpt, config.batch, config.gpt.block, /*training=*/true);
  Graph& g = m.graph;
  build_backward(g, m.loss, g.params());
  std::map<std::string, double> flops;
  for (const Node& node : g.nodes()) {
    if (!node.def->cost) continue;  // no cost given: no flops (op.h)
    std::vector<TensorSpec> in, out;
    for (ValueId v : node.inputs) in.push_back(g.spec(v));
    for (ValueId v : node.outputs) out.push_back(g.spec(v));
    flops[node.op()] += node.def->cost(in, out, node.attrs).flops;
  }
  return flops;
}

class GptCost : public ::testing::TestWithParam<const char*> {};

TEST_P(GptCost, MatmulFlopsAreTheBenchmarkFormulaLessItsVectorParameters) {
  const bench::BenchConfig config = bench::config_named(GetParam());
  const double B = double(config.batch), T = double(config.gpt.block), C = double(config.gpt.n_embd),
               L = double(config.gpt.n_layer), V = double(config.gpt.vocab), tokens = B * T;
  const double biases = 9 * C * L, norms = 4 * C * L + 2 * C;
  const double matrices = V * C + 12 * C * C * L;

  nn::Model m = nn::build_gpt(config.gpt, config.batch, config.gpt.block, true);
  const double formula = bench::flops_per_step(config, m.graph.param_count());
  ASSERT_EQ(double(m.graph.param_count()), matrices + T * C + biases + norms) << "the parameters counted here";

  std::map<std::string, double> f = flops_by_op(config);
  const double matmul = f["linear"] + f["matmul"] + f["matmul_at_b"] + f["attention"] + f["attention_grad"];
  const double tight = 1e-12 * formula;
  EXPECT_NEAR(matmul, formula - 6 * tokens * (biases + norms), tight);
  EXPECT_NEAR(matmul, 6 * tokens * matrices + 12 * L * T * C * tokens, tight);
  // linear alone is 2·M·N·K forward over the block matrices, with no bias in it.
  EXPECT_NEAR(f["linear"], 2 * tokens * 12 * C * C * L, tight);
  // One flop per element: the bias adds, and their gradients plus the
  // position embedding's (sum_leading over the batch, T·C per sequence).
  EXPECT_NEAR(f["bias_add"], tokens * biases, tight);
  EXPECT_NEAR(f["sum_leading"], tokens * biases + tokens * C, tight);

  double all = 0;
  for (const auto& [op, flops] : f) all += flops;
  const double elementwise = all - matmul;
  EXPECT_GT(elementwise, 0);
  // 1.3% of F for gpt-mini, 0.5% for gpt-small; the whole graph is then
  // within 0.6% and 0.2% of F.
  EXPECT_LT(elementwise, 0.03 * formula) << "elementwise work is a small part of a step's flops";
}

INSTANTIATE_TEST_SUITE_P(BenchConfigs, GptCost, ::testing::Values("A", "B"));

}  // namespace
}  // namespace px
