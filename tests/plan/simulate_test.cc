// The simulator on cases a person can compute by hand: with the table
// estimator, a 2-stage 1F1B pipeline of known forward and backward times
// takes exactly (M + P − 1)(F + B); data parallelism's step is its ring
// allreduces' α-β times; a receive nobody sends is named. And the
// roofline estimator's ring allreduce is the α-β-γ formula on the link.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "graph/autodiff.h"
#include "nn/gpt.h"
#include "nn/mlp.h"
#include "parallel/compose.h"
#include "parallel/lower.h"
#include "parallel/lower/liveness.h"
#include "plan/memory.h"
#include "plan/simulate.h"
#include "nn/model.h"

namespace px::plan {
namespace {

std::vector<parallel::Program> lower_all(const nn::Model& model, const parallel::Strategy& strategy) {
  return plan::lower_all({.forward = &model.graph, .loss = model.loss}, strategy);
}

// Every forward node of a stage shares F, every backward node B; nothing else costs.
struct StageTimes : CostEstimator {
  std::map<const Node*, double> cost;
  double compute_seconds(const Graph&, const Node& node) const override { return cost.at(&node); }
  double memory_seconds(double) const override { return 0; }
  double collective_seconds(comm::Collective, double, int, LinkClass, int) const override { return 0; }
  double transfer_seconds(double, LinkClass) const override { return 0; }
};

TEST(Simulate, TwoStageOneFOneBTakesTheTextbookMakespan) {
  const nn::Model model = nn::build_mlp({.hidden = {64, 64, 64}, .classes = 10}, 8);
  for (int m : {1, 4, 8}) {
    parallel::Strategy s = parallel::with_pipeline(parallel::data_parallel(1, batch_input_names(model)), 2,
                                                   {.schedule = parallel::PipelineKind::one_f_one_b});
    s.micro_batches = m;
    const std::vector<parallel::Program> programs = lower_all(model, s);
    constexpr double F = 1.0, B = 2.0;
    StageTimes times;
    for (const parallel::Program& p : programs) {
      // Nodes of one micro-batch of this stage, forward and backward.
      std::vector<const Node*> forward, backward;
      for (const parallel::Instr& instr : p.instrs)
        if (const auto* c = std::get_if<parallel::Compute>(&instr.op); c && instr.micro_batch == 0) {
          const Node& node = p.graph_of(0).nodes()[static_cast<size_t>(c->node)];
          (node.origin < 0 ? forward : backward).push_back(&node);
        }
      for (const Node* n : forward) times.cost[n] = F / static_cast<double>(forward.size());
      for (const Node* n : backward) times.cost[n] = B / static_cast<double>(backward.size());
    }
    const ClusterSpec cluster = cluster_named("dgx-a100");
    const Simulation sim = simulate({.programs = &programs, .cluster = &cluster, .estimator = &times});
    EXPECT_NEAR(sim.step_seconds, (m + 2 - 1) * (F + B), 1e-9) << "M = " << m;
    EXPECT_NEAR(sim.bubble_fraction, 1.0 / (m + 1), 1e-9) << "M = " << m;
  }
}

TEST(Simulate, DataParallelStepIsItsRingAllreduces) {
  const nn::Model model = nn::build_mlp({.hidden = {64}, .classes = 10}, 8);
  parallel::Strategy s = parallel::data_parallel(4, batch_input_names(model));
  s.lowering.bucket_bytes = 1 << 30;  // one bucket
  s.lowering.global_norm = false;
  const std::vector<parallel::Program> programs = lower_all(model, s);
  FakeEstimator fake;
  fake.alpha = 1e-5;
  fake.beta = 1e-9;
  const ClusterSpec cluster = cluster_named("dgx-a100");
  const Simulation sim = simulate({.programs = &programs, .cluster = &cluster, .estimator = &fake});
  const double n = 4.0 * static_cast<double>(programs[0].param_count);
  auto ring = [&](double bytes) { return 2 * 3 * fake.alpha + 2 * 0.75 * bytes * fake.beta; };
  // The gradient bucket, then the loss, one after the other on the progress stream.
  EXPECT_NEAR(sim.step_seconds, ring(n) + ring(4), 1e-12);
  EXPECT_NEAR(sim.bytes_sent.at(LinkClass::intra_node), 4 * 2 * 0.75 * (n + 4), 1e-6);
}

// A P3 program (sliced, prioritized reductions carried into the next
// step's deferred updates) replays to its end whatever the costs, zero
// ones included: every lane's clock then stays at 0 and ties decide.
TEST(Simulate, AP3ProgramFinishesWithZeroCosts) {
  const nn::Model model = nn::build_mlp({.hidden = {64, 64}, .classes = 10}, 8);
  parallel::Strategy s = parallel::data_parallel(2, batch_input_names(model));
  s.lowering.p3_slice_bytes = 1024;
  s.lowering.global_norm = false;
  s.lowering.bucket_bytes = 0;
  const std::vector<parallel::Program> programs = lower_all(model, s);
  FakeEstimator zero;
  const ClusterSpec cluster = cluster_named("dgx-a100");
  EXPECT_NO_THROW(simulate({.programs = &programs, .cluster = &cluster, .estimator = &zero}));
}

// The engine's agreement rounds are a stamped fact (Instr::announcement_rounds:
// one before each slice of a progress-lane job); the replay costs what is
// stamped, and nothing when the run does not overlap (every lane inline).
TEST(Simulate, CostsTheStampedAgreementRoundsOfSlicedJobs) {
  const nn::Model model = nn::build_mlp({.hidden = {64, 64}, .classes = 10}, 8);
  parallel::Strategy s = parallel::data_parallel(2, batch_input_names(model));
  s.lowering.p3_slice_bytes = 1024;
  s.lowering.global_norm = false;
  const std::vector<parallel::Program> stamped = lower_all(model, s);
  int sliced = 0;
  for (const parallel::Instr& instr : stamped[0].instrs) {
    const bool progress = instr.lane.kind == parallel::Lane::Kind::progress;
    EXPECT_EQ(instr.announcement_rounds, progress ? instr.slices : 0) << instr.name;
    sliced += progress && instr.slices > 1;
  }
  EXPECT_GT(sliced, 0);
  std::vector<parallel::Program> unstamped = stamped;
  for (parallel::Program& p : unstamped)
    for (parallel::Instr& instr : p.instrs) instr.announcement_rounds = 0;
  FakeEstimator fake;
  fake.alpha = 1e-5;
  fake.beta = 1e-9;
  const ClusterSpec cluster = cluster_named("dgx-a100");
  auto step = [&](const std::vector<parallel::Program>& programs, bool overlap) {
    return simulate({.programs = &programs, .cluster = &cluster, .estimator = &fake, .execution = {.overlap = overlap}})
        .step_seconds;
  };
  EXPECT_GT(step(stamped, true), step(unstamped, true) + 1e-5);
  EXPECT_DOUBLE_EQ(step(stamped, false), step(unstamped, false));
}

// The representatives of pp x dp x tp (one rank per stage) replay to the
// same step, bubble and link bytes as every rank: the planner's shortcut.
TEST(Simulate, SymmetricReplayOfOneRankPerStageMatchesTheWholeMesh) {
  const nn::Model model = nn::build_gpt({.vocab = 256, .block = 16, .n_layer = 4, .n_head = 4, .n_embd = 32}, 8, 16, true);
  parallel::Strategy s = parallel::with_pipeline(
      parallel::tensor_parallel(model.graph, 2, 2, batch_input_names(model), true), 2, {});
  s.micro_batches = 2;
  s.zero_stage = 1;
  const std::vector<parallel::Program> all = lower_all(model, s);
  const std::vector<parallel::Program> few =
      lower_representatives({.forward = &model.graph, .loss = model.loss}, s);
  ASSERT_EQ(few.size(), 2u);
  EXPECT_EQ(few[1].rank, 4);
  const ClusterSpec cluster = cluster_named("dgx-a100");
  const RooflineEstimator estimator(cluster);
  const Simulation whole = simulate({.programs = &all, .cluster = &cluster, .estimator = &estimator});
  const Simulation symmetric = simulate({.programs = &few, .cluster = &cluster, .estimator = &estimator});
  EXPECT_NEAR(symmetric.step_seconds, whole.step_seconds, 1e-12);
  EXPECT_NEAR(symmetric.bubble_fraction, whole.bubble_fraction, 1e-9);
  EXPECT_NEAR(symmetric.flops, whole.flops, 1e-6 * whole.flops);
  EXPECT_NEAR(symmetric.bytes_sent.at(LinkClass::intra_node), whole.bytes_sent.at(LinkClass::intra_node),
              1e-9 * whole.bytes_sent.at(LinkClass::intra_node));
  EXPECT_DOUBLE_EQ(symmetric.peak_bytes[1], whole.peak_bytes[4]);
}

// What the prediction assumed for the largest GEMM, attention and
// collective: each is the replay's own call (its time is the estimator's
// for that node or collective) and no assumed rate beats the hardware:
// a GEMM or attention at most the device's peak, a collective's bus
// bandwidth at most the link's line rate (an 8-rank allreduce once came
// out at 139% of it). The largest GEMM is one a person can check: an MLP
// layer of 32 x 512 tokens by 768 x 3072, split tp ways.
TEST(Simulate, AssumedRatesNameTheLargestPiecesAndStayWithinTheHardware) {
  const nn::Model model =
      nn::build_gpt({.vocab = 256, .block = 512, .n_layer = 2, .n_head = 12, .n_embd = 768}, 32, 512, true);
  for (int tp : {2, 8}) {
    parallel::Strategy s = parallel::tensor_parallel(model.graph, 1, tp, batch_input_names(model), true);
    s.precision = Precision::bf16;  // its GEMMs and attention at the bf16 rate
    const std::vector<parallel::Program> programs = lower_all(model, s);
    const ClusterSpec cluster = cluster_named("dgx-a100");
    const RooflineEstimator estimator(cluster);
    const Simulation sim = simulate({.programs = &programs, .cluster = &cluster, .estimator = &estimator});
    ASSERT_TRUE(sim.assumed.gemm && sim.assumed.attention && sim.assumed.collective) << "tp " << tp;
    for (const AssumedPiece* piece : {&*sim.assumed.gemm, &*sim.assumed.attention, &*sim.assumed.collective}) {
      EXPECT_GT(piece->fraction(), 0.05) << piece->name;
      EXPECT_LE(piece->fraction(), 1.0) << piece->name << ": " << describe(sim.assumed);
    }
    // The largest GEMM is an MLP's: 32 x 512 tokens by the 3072-wide hidden layer, split tp ways.
    EXPECT_NE(sim.assumed.gemm->name.find("mlp"), std::string::npos) << sim.assumed.gemm->name;
    EXPECT_DOUBLE_EQ(sim.assumed.gemm->work, 2.0 * 32 * 512 * 768 * 3072 / tp) << sim.assumed.gemm->name;
    EXPECT_EQ(sim.assumed.collective->peak, cluster.intra_node.bandwidth);
    EXPECT_NE(describe(sim.assumed).find("of the 312 TFLOP/s peak"), std::string::npos) << describe(sim.assumed);
  }
}

// A collective beside a GEMM holds units of its own (plan/efficiency.h):
// on dgx-a100, 24 of the 108. A GEMM of exactly 108 output tiles (3072 x
// 1152 in 256 x 128 tiles, flops-bound at K = 784) runs in one wave alone
// and in two beside a collective: twice the time, the tail effect NVIDIA's
// forum thread measured. A data-parallel step whose reductions overlap its
// backward is slower for it, by less than the progress lane's busy time.
TEST(Simulate, AGemmBesideACollectiveRunsOnFewerUnits) {
  const ClusterSpec cluster = cluster_named("dgx-a100");
  ASSERT_EQ(cluster.device.efficiency.collective_units, 24);
  nn::Model wide = nn::build_mlp({.hidden = {1152}, .classes = 10}, 3072);
  set_precision(wide.graph, Precision::bf16);
  const Node* fc1 = nullptr;
  for (const Node& node : wide.graph.nodes())
    if (node.op() == "linear" && !fc1) fc1 = &node;
  ASSERT_NE(fc1, nullptr);
  const RooflineEstimator estimator(cluster);
  EXPECT_NEAR(estimator.compute_seconds_beside_collective(wide.graph, *fc1),
              2 * estimator.compute_seconds(wide.graph, *fc1), 1e-15);

  const nn::Model model = nn::build_gpt({.vocab = 256, .block = 512, .n_layer = 4, .n_head = 12, .n_embd = 768}, 16, 512, true);
  parallel::Strategy dp = parallel::data_parallel(8, batch_input_names(model));
  dp.precision = Precision::bf16;
  const std::vector<parallel::Program> programs = lower_all(model, dp);
  ClusterSpec apart = cluster;
  apart.device.efficiency.collective_units = 0;
  const RooflineEstimator apart_estimator(apart);
  const Simulation beside = simulate({.programs = &programs, .cluster = &cluster, .estimator = &estimator});
  const Simulation alone = simulate({.programs = &programs, .cluster = &apart, .estimator = &apart_estimator});
  EXPECT_GT(beside.step_seconds, alone.step_seconds);
  EXPECT_LT(beside.step_seconds - alone.step_seconds, alone.progress_busy.front());
}

// Attention on a preset runs at FlashAttention-2's measured rate
// (plan/presets.cc): at a measured point exactly its figure, between
// points linear in the head dimension and in log2 of the sequence, beyond
// them clamped; forward and backward share the rate in FlashAttention's
// accounting (backward 2.5x forward's FLOPs, causal halves both). The
// table round-trips through a cluster file and a bad point is named.
TEST(Simulate, AttentionRunsAtTheMeasuredFusedRate) {
  const ClusterSpec a100 = cluster_named("dgx-a100");
  const std::vector<AttentionRate>& rates = a100.device.efficiency.attention;
  EXPECT_DOUBLE_EQ(attention_rate(rates, "flash", 128, 2048, true), 155e12);
  EXPECT_DOUBLE_EQ(attention_rate(rates, "flash", 64, 4096, true), 156e12);
  EXPECT_DOUBLE_EQ(attention_rate(rates, "flash", 96, 2048, true), (140e12 + 155e12) / 2);
  EXPECT_NEAR(attention_rate(rates, "flash", 128, std::sqrt(2048.0 * 4096.0), true), (155e12 + 173e12) / 2, 1e3);
  EXPECT_DOUBLE_EQ(attention_rate(rates, "flash", 256, 65536, true), 189e12);  // clamped at 128 and 16k
  EXPECT_DOUBLE_EQ(attention_rate(rates, "flash", 32, 128, true), 88e12);
  EXPECT_EQ(attention_rate({}, "flash", 128, 2048, true), 0);

  // GPT-2's attention at head dimension 64, T = 1024, bf16: 4·B·H·T²·D / 2
  // forward FLOPs at 119 TFLOP/s, and 2.5x that backward.
  nn::Model m = nn::build_gpt({.vocab = 256, .block = 1024, .n_layer = 1, .n_head = 12, .n_embd = 768}, 2, 1024, true);
  build_backward(m.graph, m.loss, m.graph.params());
  set_precision(m.graph, Precision::bf16);
  const RooflineEstimator estimator(a100);
  const double forward = 4.0 * 2 * 12 * 1024 * 1024 * 64 / 2;
  int seen = 0;
  for (const Node& node : m.graph.nodes()) {
    const double scale = node.op() == "attention" ? 1 : node.op() == "attention_grad" ? 2.5 : 0;
    if (scale == 0) continue;
    EXPECT_NEAR(estimator.compute_seconds(m.graph, node), scale * forward / 119e12, 1e-12) << node.op();
    ++seen;
  }
  EXPECT_EQ(seen, 2);

  ClusterSpec copy = cluster_from_json(to_json(a100));
  EXPECT_EQ(copy.device.efficiency.attention, rates);
  nlohmann::json bad = to_json(a100);
  bad["device"]["efficiency"]["attention"][0]["flops"] = -1;
  try {
    cluster_from_json(bad);
    FAIL() << "a negative attention rate was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("device.efficiency.attention[0] has head_dim 64, seq 512, flops -1"),
              std::string::npos) << e.what();
  }
}

TEST(Simulate, AReceiveNobodySendsIsNamed) {
  const nn::Model model = nn::build_mlp({.hidden = {64, 64}, .classes = 10}, 8);
  const parallel::Strategy s = parallel::with_pipeline(parallel::data_parallel(1, batch_input_names(model)), 2, {});
  std::vector<parallel::Program> programs = lower_all(model, s);
  std::erase_if(programs[0].instrs, [](const parallel::Instr& i) { return std::holds_alternative<parallel::Send>(i.op); });
  FakeEstimator fake;
  const ClusterSpec cluster = cluster_named("dgx-a100");
  try {
    simulate({.programs = &programs, .cluster = &cluster, .estimator = &fake});
    FAIL() << "expected the replay to get stuck";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 at #0 mb0 p2p:pp recv"), std::string::npos) << e.what();
  }
}

TEST(RooflineEstimator, RingAllreduceIsTheAlphaBetaGammaFormula) {
  const ClusterSpec cluster = cluster_named("dgx-a100:2");
  const RooflineEstimator roofline(cluster);
  const double n = 64e6, p = 8;
  const LinkSpec& link = cluster.inter_node;
  // At the bandwidths the preset says NCCL and the memory achieve.
  const double expected = 2 * (p - 1) * link.latency + 2 * (p - 1) / p * n / link.achieved_bandwidth() +
                          (p - 1) / p * n / (cluster.device.memory_bandwidth * cluster.device.efficiency.memory_fraction);
  EXPECT_NEAR(comm::predicted_seconds(roofline.cost_model(LinkClass::inter_node),
                                      {.collective = comm::Collective::allreduce, .algorithm = comm::Algorithm::ring,
                                       .bytes = n, .ranks = 8}),
              expected, expected * 1e-12);
  // The cheapest algorithm is never slower than the ring.
  EXPECT_LE(roofline.collective_seconds(comm::Collective::allreduce, n, 8, LinkClass::inter_node, 1),
            expected * (1 + 1e-12));
}

// Across nodes, a group with k ranks on each node drives k NICs at once,
// up to the node's own link (NCCL's rings, one a NIC): on dgx-a100, 8 ranks
// a node move 8 x 24 = 192 GB/s, the busbw nccl#812 measured; on dgx-h100
// 8 x 48 = 384 is capped at NVLink 4's 370. One rank a node is the NIC's
// rate, and an all-to-all stays at it whatever the ranks a node.
TEST(RooflineEstimator, ACollectiveAcrossNodesDrivesANicPerRankOfANode) {
  using comm::Collective;
  for (const char* name : {"dgx-a100:4", "dgx-h100:4"}) {
    const ClusterSpec cluster = cluster_named(name);
    const RooflineEstimator roofline(cluster);
    const double n = 4e10;  // an allgather (no reduction's memory passes), large: its bandwidth term dominates
    const double nic = roofline.collective_seconds(Collective::allgather, n, 32, LinkClass::inter_node, 1);
    const double rails = roofline.collective_seconds(Collective::allgather, n, 32, LinkClass::inter_node, 8);
    const double nic_rate = cluster.inter_node.achieved_bandwidth();
    const double node_rate = std::min(8 * nic_rate, cluster.intra_node.achieved_bandwidth());
    EXPECT_NEAR(nic / rails, node_rate / nic_rate, 0.01 * node_rate / nic_rate) << name;
    EXPECT_DOUBLE_EQ(roofline.collective_seconds(Collective::all_to_all, n, 32, LinkClass::inter_node, 8),
                     roofline.collective_seconds(Collective::all_to_all, n, 32, LinkClass::inter_node, 1))
        << name;
    EXPECT_EQ(cluster.line_rate(LinkClass::inter_node, 8), std::min(8 * cluster.inter_node.bandwidth,
                                                                     cluster.intra_node.bandwidth));
  }
  EXPECT_NEAR(std::min(8 * cluster_named("dgx-a100").inter_node.achieved_bandwidth(),
                       cluster_named("dgx-a100").intra_node.achieved_bandwidth()),
              192e9, 1e6);
  const ClusterSpec four = cluster_named("dgx-h100:4");
  EXPECT_EQ(four.fewest_ranks_on_a_node(32, 1), 8);   // a data-parallel group of every rank
  EXPECT_EQ(four.fewest_ranks_on_a_node(4, 8), 1);    // one rank a node (tp = 8)
  EXPECT_EQ(four.fewest_ranks_on_a_node({0, 1, 8, 9, 10}), 2);
}

// On H100's NVSwitch the switch reduces (NVLS): an allreduce inside a node
// moves at the 480 GB/s busbw NCCL measures, the other collectives at 370;
// A100's NVSwitch has no SHARP. A cluster file keeps the figure, and one
// above twice the line rate is named.
TEST(RooflineEstimator, AnAllreduceOnH100sNvswitchIsReducedInTheSwitch) {
  using comm::Collective;
  const double n = 8e9;  // the bandwidth term dominates
  const ClusterSpec h100 = cluster_named("dgx-h100");
  const RooflineEstimator on_h100(h100);
  const double allreduce = on_h100.collective_seconds(Collective::allreduce, n, 8, LinkClass::intra_node, 8);
  const double gather = on_h100.collective_seconds(Collective::allgather, n, 8, LinkClass::intra_node, 8);
  // Ring busbw: an allreduce moves 2 (p-1)/p of n per rank, an allgather (p-1)/p.
  EXPECT_NEAR(2 * 7.0 / 8 * n / allreduce / 1e9, 480, 10);
  EXPECT_NEAR(7.0 / 8 * n / gather / 1e9, 370, 5);
  const ClusterSpec a100 = cluster_named("dgx-a100");
  EXPECT_EQ(a100.intra_node.achieved_all_reduce_bandwidth(), a100.intra_node.achieved_bandwidth());

  EXPECT_EQ(cluster_from_json(to_json(h100)).intra_node.all_reduce_efficiency, 480.0 / 450.0);
  nlohmann::json bad = to_json(h100);
  bad["intra_node"]["all_reduce_efficiency"] = 2.5;
  try {
    cluster_from_json(bad);
    FAIL() << "an all_reduce_efficiency of 2.5 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("intra_node.all_reduce_efficiency 2.5 must be in (0, 2]"), std::string::npos)
        << e.what();
  }
}

// bf16 mixed precision, one value from the strategy to the Program: a
// compute-bound matmul the lowering stamps bf16 runs at the bf16 rate, and
// the replay's memory is the bf16 Program's own (the activations only
// GEMMs read stored in bf16: fewer bytes kept, with nothing rescaled; the
// fp32 master weights, gradients and optimizer state stay).
TEST(Simulate, MixedPrecisionComputesAtTheBf16RateAndKeepsTheProgramsBytes) {
  const ClusterSpec cluster = cluster_named("dgx-a100");
  Graph g;
  const ValueId x = g.input("x", {Shape{4096, 4096}, DType::f32});
  const ValueId w = g.param("w", {Shape{4096, 4096}, DType::f32}, {}, true);
  g.add1("matmul", {x, w}, {}, "big");
  const double f32 = RooflineEstimator(cluster).compute_seconds(g, g.nodes().front());
  set_precision(g, Precision::bf16);
  const double bf16 = RooflineEstimator(cluster).compute_seconds(g, g.nodes().front());
  EXPECT_NEAR(f32 / bf16, cluster.device.flops_bf16 / cluster.device.flops_f32, 1e-9);

  const nn::Model model = nn::build_mlp({.hidden = {1024, 1024}}, 512);
  parallel::Strategy strategy = parallel::data_parallel(1, batch_input_names(model));
  const std::vector<parallel::Program> fp32_programs = lower_all(model, strategy);
  strategy.precision = Precision::bf16;
  const std::vector<parallel::Program> bf16_programs = lower_all(model, strategy);
  FakeEstimator fake;
  const Simulation full = simulate({.programs = &fp32_programs, .cluster = &cluster, .estimator = &fake});
  const Simulation mixed = simulate({.programs = &bf16_programs, .cluster = &cluster, .estimator = &fake});
  EXPECT_GT(full.activation_peak_bytes[0], 0);
  EXPECT_LT(mixed.activation_peak_bytes[0], full.activation_peak_bytes[0]);
  EXPECT_LT(mixed.peak_bytes[0], full.peak_bytes[0]);
  // The replay's figure is the bf16 Program's memory model, to the byte.
  const parallel::Program& p = bf16_programs.front();
  EXPECT_DOUBLE_EQ(mixed.peak_bytes[0], program_memory(p, parallel::liveness(p), 2).peak_bytes);
}

}  // namespace
}  // namespace px::plan
