// Golden Programs: what a 2-layer GPT lowers to for one rank, 2-rank data
// parallelism and ZeRO-1, -2 and -3 (rank 1; two micro-batches each, where
// ZeRO-1 reduces once and ZeRO-2/3 every micro-batch), and a 1-layer GPT
// under Megatron tensor parallelism (tp=2, with and without sequence
// parallelism; dp=2 x tp=2 with ZeRO-1; in bf16 with sequence
// parallelism, its layers' partial sums reduce-scattered in bf16), two pipeline stages (1F1B's first,
// zero bubble's last, two micro-batches) and one rank recomputing every
// layer, ZeRO-3 in bf16 (GEMM weights gathered in bf16 buckets), and a
// 1-layer GPT under context parallelism (cp=2, the balanced ring's
// sends and receives and all-to-all's exchanges of heads), and a 1-layer
// mixture of experts under expert parallelism (ep=2, two micro-batches
// interleaved so each one's routed exchanges run on the expert axis'
// progress lane while the other computes),
// printed by Program::str() with plan::program_footer() — the form
// `parallax lower --cost` shows — and checked in under golden/. A change
// to the lowering shows up as a diff of these files that a reviewer reads:
// every collective, its buffers, stream and dependencies, and in the
// footer what it costs (plan/program_cost.h): bytes per axis and kind, the
// liveness peak and the step a FakeEstimator replay of every rank takes.
//
// After a deliberate change, regenerate them and read the diff:
//   PX_UPDATE_GOLDEN=1 build/tests/parallel/px_parallel_tests --gtest_filter='*GoldenProgram*'
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "graph/precision.h"
#include "nn/gpt.h"
#include "parallel/lower.h"
#include "plan/program_cost.h"
#include "plan/simulate.h"
#include "parallel/compose.h"
#include "nn/model.h"

namespace px::parallel {
namespace {

struct Golden {
  const char* file;
  int ranks;
  int zero_stage;
  int rank;
  int micro_batches;
  int layers = 2;
  int tp = 1;
  bool sequence_parallel = false;
  int pp = 1;  // pipeline stages (ranks counts the data x tensor ranks of one stage)
  const char* schedule = "1f1b";
  Recompute recompute = Recompute::none;
  int64_t p3_slice_bytes = 0;  // P3: sliced reductions, updates deferred to the next step's head
  Precision precision = Precision::fp32;
  int cp = 1;  // context parallelism (ranks counts them too)
  ContextMethod method = ContextMethod::ring;
  int ep = 1;           // expert parallelism (ranks counts them too)
  int64_t experts = 0;  // a mixture of this many experts (top-2) in every MLP
  bool overlap_experts = false;  // two micro-batches interleaved at their expert exchanges
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class GoldenProgram : public ::testing::TestWithParam<Golden> {};

TEST_P(GoldenProgram, PrintsAsCheckedIn) {
  const Golden& g = GetParam();
  // (B=4, T=8), vocabulary 64, C=16: small shapes, every op of the real model.
  nn::GptConfig config{.vocab = 64, .block = 8, .n_layer = g.layers, .n_head = 2, .n_embd = 16, .dropout = 0.1};
  config.moe_experts = g.experts;
  config.moe_top_k = 2;
  nn::Model model = nn::build_gpt(config, 4, config.block, true);
  const Strategy strategy = compose({.bucket_bytes = 4096,  // several buckets, so their order and priorities show
                                     .zero_stage = g.zero_stage,
                                     .p3_slice_bytes = g.p3_slice_bytes,
                                     .tensor_parallel = g.tp,
                                     .sequence_parallel = g.sequence_parallel,
                                     .overlap_expert_exchanges = g.overlap_experts,
                                     .pipeline_parallel = g.pp,
                                     .context_parallel = g.cp,
                                     .expert_parallel = g.ep,
                                     .context_method = g.method,
                                     .pipeline = {.schedule = pipeline_kind_from_name(g.schedule)},
                                     .recompute = g.recompute,
                                     .micro_batches = g.micro_batches,
                                     .precision = g.precision},
                                    {.graph = &model.graph,
                                     .batch_inputs = batch_input_names(model),
                                     .ranks = g.ranks * g.pp});
  // Every rank's Program, for the footer's replay; the file pins rank g.rank's.
  const std::vector<Program> programs = plan::lower_all({.forward = &model.graph, .loss = model.loss}, strategy);
  const std::string printed = programs[static_cast<size_t>(g.rank)].str() + plan::program_footer(programs, g.rank);
  const std::string path = std::string(PX_GOLDEN_DIR) + "/" + g.file;
  const char* update = std::getenv("PX_UPDATE_GOLDEN");
  if (update != nullptr && std::string(update) == "1") {
    std::ofstream(path) << printed;
    GTEST_SKIP() << "wrote " << path;
  }
  const std::string expected = read_file(path);
  ASSERT_FALSE(expected.empty()) << path << " is missing or empty; PX_UPDATE_GOLDEN=1 writes it";
  if (printed == expected) return;
  // The first differing line, so the failure reads without a diff tool.
  std::istringstream a(expected), b(printed);
  std::string want, got;
  for (int line = 1;; ++line) {
    const bool more_a = static_cast<bool>(std::getline(a, want)), more_b = static_cast<bool>(std::getline(b, got));
    if (!more_a && !more_b) break;
    if (!more_a || !more_b || want != got) {
      ADD_FAILURE() << path << " line " << line << ":\n  checked in: " << (more_a ? want : "<end>")
                    << "\n  lowered:    " << (more_b ? got : "<end>")
                    << "\nIf the change is intended, regenerate with PX_UPDATE_GOLDEN=1 and read the diff.";
      break;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Gpt2Layers, GoldenProgram,
                         ::testing::Values(Golden{"gpt2l_1rank.program", 1, 0, 0, 1},
                                           Golden{"gpt2l_dp2_rank1.program", 2, 0, 1, 1},
                                           Golden{"gpt2l_zero1_rank1.program", 2, 1, 1, 2},
                                           Golden{"gpt2l_zero2_rank1.program", 2, 2, 1, 2},
                                           Golden{"gpt2l_zero3_rank1.program", 2, 3, 1, 2},
                                           Golden{"gpt1l_tp2_rank1.program", 2, 0, 1, 1, 1, 2, false},
                                           Golden{"gpt1l_tp2_sp_rank1.program", 2, 0, 1, 1, 1, 2, true},
                                           Golden{"gpt1l_dp2_tp2_zero1_rank3.program", 4, 1, 3, 1, 1, 2, false},
                                           Golden{"gpt1l_tp2_sp_bf16_rank1.program", 2, 0, 1, 1, 1, 2, true, 1, "1f1b",
                                                  Recompute::none, 0, Precision::bf16},
                                           Golden{"gpt2l_pp2_1f1b_rank0.program", 1, 0, 0, 2, 2, 1, false, 2},
                                           Golden{"gpt2l_pp2_zbh1_rank1.program", 1, 0, 1, 2, 2, 1, false, 2, "zb-h1"},
                                           Golden{"gpt2l_recompute_full.program", 1, 0, 0, 1, 2, 1, false, 1, "1f1b",
                                                  Recompute::full},
                                           Golden{"gpt2l_dp2_p3_rank1.program", 2, 0, 1, 1, 2, 1, false, 1, "1f1b",
                                                  Recompute::none, 1024},
                                           Golden{"gpt2l_zero3_bf16_rank1.program", 2, 3, 1, 2, 2, 1, false, 1, "1f1b",
                                                  Recompute::none, 0, Precision::bf16},
                                           Golden{"gpt1l_cp2_ring_rank1.program", 2, 0, 1, 1, 1, 1, false, 1, "1f1b",
                                                  Recompute::none, 0, Precision::fp32, 2, ContextMethod::ring},
                                           Golden{"gpt1l_cp2_alltoall_rank1.program", 2, 0, 1, 1, 1, 1, false, 1,
                                                  "1f1b", Recompute::none, 0, Precision::fp32, 2,
                                                  ContextMethod::all_to_all},
                                           Golden{.file = "gpt1l_moe_ep2_mb2_rank1.program", .ranks = 2, .zero_stage = 0,
                                                  .rank = 1, .micro_batches = 2, .layers = 1, .ep = 2, .experts = 4,
                                                  .overlap_experts = true}),
                         [](const ::testing::TestParamInfo<Golden>& info) {
                           std::string name = info.param.file;
                           return name.substr(0, name.find('.'));
                         });

}  // namespace
}  // namespace px::parallel
