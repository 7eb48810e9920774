// `parallax lower`, `simulate` and `plan` build and lower a job from its
// model config and strategy request without the runtime: this program links
// px_plan alone (tests/plan/CMakeLists.txt), so a runtime symbol the path
// needs fails its link, and the configure step refuses a px_plan whose link
// closure names a runtime room.
#include <gtest/gtest.h>

#include "plan/cluster.h"
#include "plan/job_strategy.h"
#include "plan/simulate.h"

namespace px::plan {
namespace {

TEST(PlanLinks, WithoutTheRuntime) {
  nn::ModelConfig config;
  config.kind = "gpt";
  config.gpt = {.vocab = 256, .block = 16, .n_layer = 2, .n_head = 2, .n_embd = 32, .dropout = 0.0};
  const parallel::StrategyRequest request{.tensor_parallel = 2, .sequence_parallel = true, .micro_batches = 2};
  nn::validate(config);
  validate_split(config, request, 4, 8);
  const nn::Model model = nn::build_model(config, 8, true);
  const parallel::Strategy strategy = strategy_for(request, model, 4, {.grad_clip = 1.0});
  EXPECT_EQ(strategy.mesh.str(), "{dp:2, tp:2}");
  EXPECT_EQ(strategy.micro_batches, 2);
  const std::vector<parallel::Program> programs = lower_all(lower_request(model, request), strategy);
  ASSERT_EQ(programs.size(), 4u);
  const ClusterSpec cluster = cluster_named("dgx-a100", "");
  const Simulation sim = simulate_sharing_cores({.programs = &programs, .cluster = &cluster, .optimizer_slots = 2}, {});
  EXPECT_GT(sim.step_seconds, 0);
  // The split's rules hold here too: 3 ranks of tp 2, and heads tp does not divide.
  EXPECT_THROW(validate_split(config, request, 3, 8), Error);
  EXPECT_THROW(validate_split(config, {.tensor_parallel = 4}, 4, 8), Error);
}

}  // namespace
}  // namespace px::plan
