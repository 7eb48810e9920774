// Heterogeneous clusters (plan/cluster.h's node_devices): the spec's per-node
// devices round-trip and are checked; the simulator runs each rank at its
// node's speed; speed_shares gives a data rank rows by its slowest rank's
// speed, and a pipeline's slower stage gets fewer layers; and the grid,
// offered both splits, predicts and picks rows by speed when one host is
// four times slower, and the even split when all are equal.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "nn/gpt.h"
#include "parallel/compose.h"
#include "parallel/lower/stages.h"
#include "plan/cluster.h"
#include "plan/replay_calls.h"
#include "plan/search.h"
#include "plan/simulate.h"
#include "plan/speed_split.h"

namespace px::plan {
namespace {

// Four one-device nodes of a CPU-like 100 GFLOP/s device on the datasheet
// roofline (no launch floor or tile waves: a step's time is then mostly
// its FLOPs, which scale with rows) on A100's links; node 3 at a quarter
// of the others' rate.
ClusterSpec four_nodes_one_slow(double slow = 0.25) {
  ClusterSpec c = cluster_named("dgx-a100");
  c.device.efficiency = {};
  c.device.flops_f32 = 100e9;
  c.device.flops_bf16 = 0;
  c.nodes = 4;
  c.devices_per_node = 1;
  c.node_devices.assign(4, c.device);
  c.node_devices[3].flops_f32 *= slow;
  c.node_devices[3].flops_bf16 *= slow;
  return c;
}

TEST(Heterogeneous, NodeDevicesRoundTripAndBadOnesAreNamed) {
  const ClusterSpec c = four_nodes_one_slow();
  EXPECT_EQ(cluster_from_json(to_json(c)), c);
  EXPECT_TRUE(c.heterogeneous());
  EXPECT_DOUBLE_EQ(c.relative_speed(0), 1.0);
  EXPECT_DOUBLE_EQ(c.relative_speed(3), 0.25);
  nlohmann::json bad = to_json(c);
  bad["node_devices"].erase(3);
  try {
    cluster_from_json(bad);
    FAIL() << "three node specs for four nodes passed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("node_devices has 3 specs for 4 nodes"), std::string::npos) << e.what();
  }
  bad = to_json(c);
  bad["node_devices"][2]["flops_f32"] = 0;
  try {
    cluster_from_json(bad);
    FAIL() << "a node without FLOP/s passed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("node_devices[2].flops_f32 0 must be > 0"), std::string::npos) << e.what();
  }
}

// A small GPT on 4 data-parallel ranks, the batch `rows`.
struct Gpt {
  nn::Model model;
  explicit Gpt(int64_t rows)
      : model(nn::build_gpt({.vocab = 256, .block = 32, .n_layer = 2, .n_head = 4, .n_embd = 64}, rows, 32, true)) {}
  parallel::Strategy data_parallel(std::vector<int64_t> shares = {}) const {
    parallel::Strategy s = parallel::data_parallel(4, batch_input_names(model));
    s.row_shares = std::move(shares);
    parallel::validate(s);
    return s;
  }
  double step(const ClusterSpec& cluster, const parallel::Strategy& s) const {
    const std::vector<parallel::Program> programs =
        lower_representatives({.forward = &model.graph, .loss = model.loss}, s, nullptr, cluster.heterogeneous());
    const RooflineEstimator roofline(cluster);
    return simulate({.programs = &programs, .cluster = &cluster, .estimator = &roofline}).step_seconds;
  }
};

TEST(Heterogeneous, TheSimulatorRunsEachRankAtItsNodesSpeed) {
  const Gpt gpt(64);
  ClusterSpec same = four_nodes_one_slow(1.0);
  same.node_devices.clear();
  const ClusterSpec slow = four_nodes_one_slow();
  const double even_same = gpt.step(same, gpt.data_parallel());
  const double even_slow = gpt.step(slow, gpt.data_parallel());
  const double by_speed = gpt.step(slow, gpt.data_parallel({4, 4, 4, 1}));
  // Even rows wait for the slow rank: its 16 rows take 4x as long.
  EXPECT_GT(even_slow, 2.5 * even_same);
  // Rows by speed, 64 as 19, 20, 20 and 5: the slow rank's 5 rows cost as
  // 20 fast ones, so all finish with the fast ranks' 20 rows, about 20/16
  // of the uniform cluster's step (compute; the allreduce is the same).
  EXPECT_LT(by_speed, 0.5 * even_slow);
  EXPECT_LT(by_speed, 1.5 * even_same);
}

// A node under a CPU quota answers each ring step late: the replay adds
// (1 - share)^2 * period / 2 per message step of every collective it is
// in, and the quota round-trips in the spec (and a bad one is named).
TEST(Heterogeneous, AQuotaNodeDelaysEachRingStep) {
  const Gpt gpt(64);
  const ClusterSpec slow = four_nodes_one_slow();
  ClusterSpec quota = slow;
  quota.node_devices[3].quota = {.cores = 0.25, .period = 0.01};
  EXPECT_EQ(cluster_from_json(to_json(quota)), quota);
  EXPECT_DOUBLE_EQ(throttle_wait(quota.node_devices[3], 1), 0.75 * 0.75 * 0.01 / 2);
  EXPECT_DOUBLE_EQ(throttle_wait(quota.node_devices[0], 1), 0);
  EXPECT_DOUBLE_EQ(message_steps(comm::Collective::allreduce, 4), 6);
  const parallel::Strategy by_speed = gpt.data_parallel({4, 4, 4, 1});
  const double plain = gpt.step(slow, by_speed), throttled = gpt.step(quota, by_speed);
  // At least one allreduce's 6 steps of 2.8 ms each, at most a step's worth per bucket.
  EXPECT_GT(throttled - plain, 6 * throttle_wait(quota.node_devices[3], 1) * 0.99);
  EXPECT_LT(throttled - plain, 64 * 6 * throttle_wait(quota.node_devices[3], 1));
  nlohmann::json bad = to_json(quota);
  bad["node_devices"][3]["cpu_quota"]["period"] = 0;
  try {
    cluster_from_json(bad);
    FAIL() << "a quota without a period passed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("node_devices[3].cpu_quota {cores 0.25, period 0}"), std::string::npos)
        << e.what();
  }
}

TEST(Heterogeneous, SpeedSharesFollowEachDataRanksSlowestRank) {
  const Gpt gpt(64);
  EXPECT_EQ(speed_shares(four_nodes_one_slow(), gpt.data_parallel()), (std::vector<int64_t>{1000, 1000, 1000, 250}));
  ClusterSpec same = four_nodes_one_slow(1.0);
  EXPECT_TRUE(speed_shares(same, gpt.data_parallel()).empty());  // equal speeds: the even split
  // Two data ranks of two tensor ranks each (mesh {dp:2, tp:2}): the replica
  // with the slow rank 3 runs at its speed.
  const parallel::Strategy dp_tp = parallel::tensor_parallel(gpt.model.graph, 2, 2, batch_input_names(gpt.model), false);
  EXPECT_EQ(speed_shares(four_nodes_one_slow(), dp_tp), (std::vector<int64_t>{1000, 250}));
  EXPECT_EQ(shares_text({1000, 250}), "1000:250");
}

TEST(Heterogeneous, AStageOnASlowerDeviceGetsLessOfTheGraph) {
  // Two stages on two nodes, the second at half the first's speed.
  const nn::Model model = nn::build_gpt({.vocab = 256, .block = 32, .n_layer = 6, .n_head = 4, .n_embd = 64}, 8, 32, true);
  ClusterSpec c = four_nodes_one_slow(1.0);
  c.nodes = 2;
  c.node_devices.resize(2);
  c.node_devices[1].flops_f32 /= 2;
  const parallel::Strategy pipeline = parallel::with_pipeline(parallel::data_parallel(1, batch_input_names(model)), 2, {});
  EXPECT_EQ(stage_speeds(c, pipeline), (std::vector<double>{1.0, 0.5}));
  const int nodes = static_cast<int>(model.graph.nodes().size());
  const std::vector<int> even = parallel::balanced_stage_starts(model.graph, nodes, 2);
  const std::optional<std::vector<std::string>> cuts = stage_cuts_by_speed(model.graph, c, pipeline);
  ASSERT_TRUE(cuts.has_value());
  ASSERT_EQ(cuts->size(), 1u);
  const std::vector<int> by_speed = parallel::stage_starts_at(model.graph, nodes, *cuts);
  EXPECT_GT(by_speed[1], even[1]) << "the cut by speed starts stage 1 at " << cuts->front();
  // About two thirds of the blocks on the fast stage: stage 1 starts at block 4 of 6.
  EXPECT_EQ(cuts->front().rfind("h.4", 0), 0u) << cuts->front();
  c.node_devices.clear();
  EXPECT_FALSE(stage_cuts_by_speed(model.graph, c, pipeline).has_value());
}

TEST(Heterogeneous, ThePlannerSplitsRowsBySpeedWhereRanksDiffer) {
  const nn::GptConfig config{.vocab = 256, .block = 32, .n_layer = 2, .n_head = 4, .n_embd = 64};
  const nn::Model model = nn::build_gpt(config, 64, config.block, true);
  auto request_on = [&](const ClusterSpec& cluster) {
    PlanRequest request{.build = [config](int64_t rows, int64_t) { return nn::build_gpt(config, rows, config.block, true); },
                        .batch_inputs = batch_input_names(model),
                        .batch = 64,
                        .ranks = 4,
                        .cluster = &cluster,
                        .budget_seconds = 60};
    request.method = "grid";
    request.space.schedules = false;
    request.space.recompute = false;
    request.space.tensor = false;
    request.space.pipeline = false;
    request.space.zero = false;
    request.space.max_micro_batches = 1;
    return request;
  };
  const ClusterSpec slow = four_nodes_one_slow();
  const PlanResult result = plan(request_on(slow));
  EXPECT_EQ(result.best().strategy.row_shares, (std::vector<int64_t>{1000, 1000, 1000, 250}))
      << result.best().description;
  EXPECT_NE(result.best().description.find("rows=1000:1000:1000:250"), std::string::npos) << result.best().description;
  // The even split of the same mesh was a candidate too, predicted slower.
  bool even_seen = false;
  for (const Candidate& c : result.ranked)
    if (c.strategy.data_ranks() == 4 && c.strategy.row_shares.empty()) {
      even_seen = true;
      EXPECT_GT(c.step_seconds, 1.5 * result.best().step_seconds);
    }
  EXPECT_TRUE(even_seen);
  ClusterSpec same = four_nodes_one_slow(1.0);
  EXPECT_TRUE(plan(request_on(same)).best().strategy.row_shares.empty());
}

}  // namespace
}  // namespace px::plan
