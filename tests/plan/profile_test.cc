// The host profile behind the `local` spec: kernel lookup and
// interpolation, contention, the JSON round trip and named errors; the
// profiled estimator's compute and collective times; calibration's timing
// of a program's kernels.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "nn/gpt.h"
#include "parallel/compose.h"
#include "plan/estimator.h"
#include "plan/simulate.h"
#include "runtime/calibrate/calibrate.h"
#include "nn/model.h"

namespace px::plan {
namespace {

// A graph of two matmuls of different sizes: [8,16]x[16,16] and [64,16]x[16,16].
struct TwoMatmuls {
  Graph g;
  const Node* small = nullptr;
  const Node* large = nullptr;
  TwoMatmuls() {
    const ValueId a = g.input("a", {Shape{8, 16}, DType::f32});
    const ValueId b = g.input("b", {Shape{64, 16}, DType::f32});
    const ValueId w = g.input("w", {Shape{16, 16}, DType::f32});
    g.add1("matmul", {a, w}, {}, "small");
    g.add1("matmul", {b, w}, {}, "large");
    small = &g.nodes()[0];
    large = &g.nodes()[1];
  }
};

HostProfile rates() {
  HostProfile p;
  p.cores = 2;
  p.flops = 1e9;
  p.memory_bandwidth = 1e9;
  p.contention_compute = {1, 1, 1.5};
  p.contention_memory = {1, 1.2, 1.8};
  return p;
}

TEST(HostProfile, TimedKernelsAreLookedUpAndOthersInterpolated) {
  TwoMatmuls m;
  HostProfile p = rates();
  const double small_roof = roofline_seconds(p, node_cost(m.g, *m.small));
  const double large_roof = roofline_seconds(p, node_cost(m.g, *m.large));
  ASSERT_LT(small_roof, large_roof);
  // Untimed: the roofline.
  EXPECT_DOUBLE_EQ(kernel_seconds(p, m.g, *m.small, 1), small_roof);
  // One timing of the op: its measured / roofline ratio carries over.
  p.kernels[kernel_key(m.g, *m.small, 1)] = {.op = "matmul", .threads = 1, .roofline = small_roof, .seconds = 3 * small_roof};
  EXPECT_DOUBLE_EQ(kernel_seconds(p, m.g, *m.small, 1), 3 * small_roof);
  EXPECT_NEAR(kernel_seconds(p, m.g, *m.large, 1), 3 * large_roof, 1e-15);
  // Timings at another thread count are not used.
  EXPECT_DOUBLE_EQ(kernel_seconds(p, m.g, *m.large, 2), large_roof);
  // Two timings around it: the ratio between them, linear in log roofline time.
  p.kernels["synthetic@1"] = {.op = "matmul", .threads = 1, .roofline = 4 * large_roof, .seconds = 4 * large_roof};
  const double w = std::log(large_roof / small_roof) / std::log(4 * large_roof / small_roof);
  EXPECT_NEAR(kernel_seconds(p, m.g, *m.large, 1), large_roof * std::exp((1 - w) * std::log(3.0)), 1e-15);
}

TEST(HostProfile, ContentionGrowsWithRanksPastWhatWasMeasured) {
  const HostProfile p = rates();
  EXPECT_DOUBLE_EQ(contention(p, 1, false), 1);
  EXPECT_DOUBLE_EQ(contention(p, 3, false), 1.5);
  EXPECT_DOUBLE_EQ(contention(p, 2, true), 1.2);
  EXPECT_DOUBLE_EQ(contention(p, 6, true), 1.8 * 6 / 3);
}

TEST(HostProfile, JsonRoundTripsAndBadFieldsAreNamed) {
  HostProfile p = rates();
  p.kernels["k@1"] = {.op = "matmul", .threads = 1, .roofline = 1e-6, .seconds = 2e-6};
  p.codecs["int8"] = {.encode = 3e-9, .decode = 1e-9};
  EXPECT_EQ(profile_from_json(to_json(p)), p);
  nlohmann::json negative = to_json(p);
  negative["codecs"]["int8"]["decode"] = -1;
  EXPECT_THROW(profile_from_json(negative), Error);
  nlohmann::json bad = to_json(p);
  bad["kernels"]["k@1"]["seconds"] = 0;
  try {
    profile_from_json(bad);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("profile.kernels[\"k@1\"]"), std::string::npos) << e.what();
  }
  bad = to_json(p);
  bad["flops"] = -1;
  EXPECT_THROW(profile_from_json(bad), Error);
  bad = to_json(p);
  bad["flops_bf16"] = -1;
  EXPECT_THROW(profile_from_json(bad), Error);
}

// The bf16 GEMM rate calibrate measures is kept in the profile (older
// files without one load as 0) and is the local device's bf16 rate: the
// profiled estimator costs GEMMs stamped bf16 at it.
TEST(HostProfile, Bf16RateRoundTripsAndIsTheLocalDevicesBf16Rate) {
  HostProfile p = rates();
  nlohmann::json older = to_json(p);
  older.erase("flops_bf16");
  EXPECT_EQ(profile_from_json(older).flops_bf16, 0);
  EXPECT_EQ(local_cluster_spec(profile_from_json(older), "cpu", 1e10).device.flops_bf16, 0);
  p.flops_bf16 = 4e9;
  EXPECT_EQ(profile_from_json(to_json(p)), p);
  const ClusterSpec local = local_cluster_spec(p, "cpu", 1e10);
  EXPECT_EQ(local.profile->flops_bf16, 4e9);
  EXPECT_EQ(local.device.flops_bf16, 4e9);
  EXPECT_EQ(plan::cluster_from_json(plan::to_json(local)).profile->flops_bf16, 4e9);
}

// Two matmuls of the same shapes, [64,16]x[16,16]: the second stamped bf16
// (graph/precision.h), as build_model stamps a `--precision bf16` model.
struct Bf16Twins {
  Graph g;
  const Node* fp32 = nullptr;
  const Node* bf16 = nullptr;
  Bf16Twins() {
    const ValueId a = g.input("a", {Shape{64, 16}, DType::f32});
    const ValueId w = g.input("w", {Shape{16, 16}, DType::f32});
    g.add1("matmul", {a, w}, {}, "fp32");
    g.add1("matmul", {a, w}, {}, "bf16");
    g.set_attr(1, "precision", std::string("bf16"));
    fp32 = &g.nodes()[0];
    bf16 = &g.nodes()[1];
  }
};

TEST(HostProfile, Bf16GemmIsItsFp32TwinAtTheBf16RatePlusTheRoundingPass) {
  Bf16Twins m;
  HostProfile p = rates();
  p.flops_bf16 = 8e9;
  p.cache_bandwidth = 4e9;  // not the rounding's
  p.cache_bytes = 1e6;
  const double roof = roofline_seconds(p, node_cost(m.g, *m.fp32));
  p.kernels[kernel_key(m.g, *m.fp32, 1)] = {.op = "matmul", .threads = 1, .roofline = roof, .seconds = 5e-6};
  ASSERT_NE(kernel_key(m.g, *m.fp32, 1), kernel_key(m.g, *m.bf16, 1));
  // 64x16 + 16x16 fp32 operands read (4 bytes) and written as bf16 (2 bytes), past the cache.
  const double rounding = (64 * 16 + 16 * 16) * 6 / p.memory_bandwidth;
  EXPECT_DOUBLE_EQ(kernel_seconds(p, m.g, *m.bf16, 1), 5e-6 / 8 + rounding);
  EXPECT_DOUBLE_EQ(kernel_seconds(p, m.g, *m.fp32, 1), 5e-6);
  // Timings of the op in bf16 (calibrate --precision bf16) are the bf16 nodes' own, never the fp32 nodes'.
  const double bf16_roof = roofline_seconds(p, node_cost(m.g, *m.bf16));
  p.kernels["matmul{precision=bf16}(F32[8,16],F32[16,16])@1"] = {
      .op = "matmul", .threads = 1, .roofline = bf16_roof, .seconds = 2 * bf16_roof};
  EXPECT_DOUBLE_EQ(kernel_seconds(p, m.g, *m.bf16, 1), 2 * bf16_roof);
  EXPECT_DOUBLE_EQ(kernel_seconds(p, m.g, *m.fp32, 1), 5e-6);
  // A profile without a bf16 rate cannot cost a bf16 node.
  HostProfile without = rates();
  try {
    kernel_seconds(without, m.g, *m.bf16, 1);
    FAIL() << "no error for a bf16 node on a profile without a bf16 rate";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no bf16 GEMM rate"), std::string::npos) << e.what();
  }
}

// The optimizer's state is touched once a step: its pass runs at the
// bandwidth past the caches even when its bytes would fit in them, while
// the gradient's passes (accumulate, norm, clip) fit and run at the cache's.
TEST(ProfiledEstimator, TheUpdatePassIsPricedPastTheCaches) {
  HostProfile p = rates();
  p.cache_bytes = 8e6;
  p.cache_bandwidth = 4 * p.memory_bandwidth;
  p.comm = comm::default_cost_model("inproc");
  const ProfiledEstimator one(local_cluster_spec(p, "cpu", 1e10), {.ranks = 1, .threads = 1});
  EXPECT_DOUBLE_EQ(one.memory_seconds(1e6), 1e6 / p.cache_bandwidth);
  EXPECT_DOUBLE_EQ(one.update_seconds(1e6), 1e6 / p.memory_bandwidth);
  EXPECT_DOUBLE_EQ(one.update_seconds(1e8), one.memory_seconds(1e8));
  // Ranks streaming at once slow it as any memory-bound pass.
  const ProfiledEstimator two(local_cluster_spec(p, "cpu", 1e10), {.ranks = 2, .threads = 1});
  EXPECT_DOUBLE_EQ(two.update_seconds(1e6), 1.2 * one.update_seconds(1e6));
}

// A compressed allreduce's codec: its measured encode and a decode per
// rank's payload, slowed like any compute when ranks share the cores; a
// codec the profile has no timing of costs the passes over the gradient.
TEST(ProfiledEstimator, CodecsCostTheirMeasuredEncodeAndADecodeAPayload) {
  using comm::compression::Method;
  HostProfile p = rates();
  p.comm = comm::default_cost_model("inproc");
  p.codecs["int8"] = {.encode = 4e-9, .decode = 1e-9};
  const ClusterSpec cluster = local_cluster_spec(p, "cpu", 1e10);
  const ProfiledEstimator one(cluster, {.ranks = 1, .threads = 1});
  EXPECT_DOUBLE_EQ(one.codec_seconds(Method::int8, 1e6, 2), 1e6 * (4e-9 + 2 * 1e-9));
  EXPECT_DOUBLE_EQ(one.codec_seconds(Method::int8, 1e6, 4), 1e6 * (4e-9 + 4 * 1e-9));
  const ProfiledEstimator three(cluster, {.ranks = 3, .threads = 1});
  EXPECT_DOUBLE_EQ(three.codec_seconds(Method::int8, 1e6, 2), 1.5 * one.codec_seconds(Method::int8, 1e6, 2));
  EXPECT_DOUBLE_EQ(one.codec_seconds(Method::sign, 1e6, 2),
                   one.memory_seconds(3 * 4 * 1e6) + one.memory_seconds(2 * 2 * 4 * 1e6));
}

// A spec calibrated before the model-level factor was dropped still loads;
// the factor it holds is not used.
TEST(HostProfile, ASpecWithTheOldModelFactorStillLoads) {
  HostProfile p = rates();
  nlohmann::json old = to_json(p);
  old["in_situ_samples"] = {{"gpt batch 8 threads 2", 1.4}};
  EXPECT_EQ(profile_from_json(old), p);
}

TEST(ProfiledEstimator, Bf16GemmCostsLessThanItsFp32TwinWhereTheBf16RateIsHigher) {
  Bf16Twins m;
  HostProfile p = rates();
  p.flops_bf16 = 4 * p.flops;
  p.comm = comm::default_cost_model("inproc");
  ClusterSpec cluster = local_cluster_spec(p, "cpu", 1e10);
  for (int threads : {1, 2}) {
    const ProfiledEstimator estimator(cluster, {.ranks = 1, .threads = threads});
    EXPECT_LT(estimator.compute_seconds(m.g, *m.bf16), estimator.compute_seconds(m.g, *m.fp32)) << threads;
  }
}

ClusterSpec local_spec(HostProfile profile) {
  return {.name = "local",
          .nodes = 1,
          .devices_per_node = 8,
          .device = {.name = "cpu", .flops_f32 = profile.flops, .memory_bytes = 1e10, .memory_bandwidth = 1e9},
          .intra_node = {.name = "t", .bandwidth = 1e9, .latency = 1e-6},
          .inter_node = {.name = "t", .bandwidth = 1e9, .latency = 1e-6},
          .devices_share_memory = true,
          .profile = std::move(profile)};
}

TEST(ProfiledEstimator, SlowsKernelsByContentionAndLimitsTheLink) {
  TwoMatmuls m;
  HostProfile p = rates();
  p.comm = comm::default_cost_model("inproc");
  const ClusterSpec cluster = local_spec(p);
  const ProfiledEstimator alone(cluster, {.ranks = 1});
  const ProfiledEstimator three(cluster, {.ranks = 3});
  const double t = alone.compute_seconds(m.g, *m.large);
  const bool memory_bound = node_cost(m.g, *m.large).flops / p.flops <
                            (node_cost(m.g, *m.large).bytes_read + node_cost(m.g, *m.large).bytes_written) / p.memory_bandwidth;
  EXPECT_DOUBLE_EQ(three.compute_seconds(m.g, *m.large), t * (memory_bound ? 1.8 : 1.5));
  // A 1 Gb/s link: a 1 MB ring allreduce over 2 ranks sends 1 MB, at least 8 ms.
  const ProfiledEstimator limited(cluster, {.ranks = 2, .link_gbps = 1});
  const double unlimited = alone.collective_seconds(comm::Collective::allreduce, 1e6, 2, LinkClass::intra_node, 1);
  const double slow = limited.collective_seconds(comm::Collective::allreduce, 1e6, 2, LinkClass::intra_node, 1);
  EXPECT_GT(slow, 8e-3);
  EXPECT_LT(unlimited, 2e-3);
  EXPECT_NEAR(limited.transfer_seconds(1e6, LinkClass::intra_node), p.comm.transport.alpha + 8e-3, 1e-9);
}

// A spec calibrated under mpirun on 2 hosts of 2 ranks: a group that spans
// them pays the link between hosts, one inside a host the host's own.
TEST(ProfiledEstimator, GroupsAcrossHostsPayTheLinkBetweenThem) {
  HostProfile p = rates();
  p.comm = comm::default_cost_model("mpi");
  const LinkSpec between{.name = "mpi between hosts", .bandwidth = 125e6, .latency = 20e-6};
  const ClusterSpec two = local_cluster_spec(p, "cpu", 1e10, {.hosts = 2, .ranks_per_host = 2, .between = between});
  EXPECT_EQ(two.devices(), 4);
  EXPECT_EQ(two.inter_node, between);
  EXPECT_EQ(cluster_from_json(to_json(two)), two);
  const ProfiledEstimator estimator(two, {.ranks = 4});
  using comm::Collective;
  // A message: latency + bytes at 125 MB/s.
  EXPECT_NEAR(estimator.transfer_seconds(1e6, LinkClass::inter_node), 20e-6 + 8e-3, 1e-9);
  EXPECT_LT(estimator.transfer_seconds(1e6, LinkClass::intra_node), 1e-3);
  // Allreduce over the 4 ranks: hierarchical (the runtime's pick), whose
  // leaders' ring of 2 sends n between the hosts: at least 8 ms for 1 MB.
  const double across = estimator.collective_seconds(Collective::allreduce, 1e6, 4, LinkClass::inter_node, 1);
  EXPECT_GT(across, 8e-3);
  EXPECT_LT(across, 9e-3);
  // A ring reduce-scatter paces at its slowest hop: 3 steps of n/4 (and
  // the reductions, a few percent here).
  const double ring = 3 * (20e-6 + 0.25e6 / 125e6);
  EXPECT_NEAR(estimator.collective_seconds(Collective::reduce_scatter, 1e6, 4, LinkClass::inter_node, 1), ring,
              0.05 * ring);
  EXPECT_LT(estimator.collective_seconds(Collective::allreduce, 1e6, 2, LinkClass::intra_node, 1), 1e-3);
  // One host (the in-process spec): both classes are the host's transport.
  const ClusterSpec one = local_cluster_spec(p, "cpu", 1e10);
  const ProfiledEstimator local(one, {.ranks = 4});
  EXPECT_DOUBLE_EQ(local.collective_seconds(Collective::allreduce, 1e6, 4, LinkClass::inter_node, 1),
                   local.collective_seconds(Collective::allreduce, 1e6, 4, LinkClass::intra_node, 1));
}

TEST(Calibration, TimesEachDistinctKernelOnceAndPredictsFromThem) {
  nn::GptConfig config{.vocab = 64, .block = 16, .n_layer = 2, .n_head = 2, .n_embd = 32};
  const nn::Model model = nn::build_gpt(config, 4, 16, true);
  const parallel::Strategy one = parallel::data_parallel(1, batch_input_names(model));
  const std::vector<parallel::Program> programs = lower_all({.forward = &model.graph, .loss = model.loss}, one);
  HostProfile p;
  const CalibrationOptions fast{.batch_seconds = 0.001, .batches = 1, .max_ranks = 2};
  measure_host(p, fast);
  EXPECT_GT(p.flops, 1e8);
  EXPECT_GT(p.memory_bandwidth, 1e8);
  ASSERT_EQ(p.contention_compute.size(), 2u);
  const int timed = time_kernels(p, programs, fast);
  EXPECT_GT(timed, 10);
  EXPECT_EQ(static_cast<int>(p.kernels.size()), timed);
  // The two layers' nodes have the same shapes: fewer kernels than computes.
  int computes = 0;
  for (const parallel::Instr& i : programs[0].instrs) computes += std::holds_alternative<parallel::Compute>(i.op);
  EXPECT_LT(timed, computes);
  EXPECT_EQ(time_kernels(p, programs, fast), 0);  // all known now
  // The replay on the calibrated spec: every compute takes its timing.
  p.comm = comm::default_cost_model("inproc");
  const ClusterSpec cluster = local_spec(p);
  const ProfiledEstimator estimator(cluster, {.ranks = 1, .threads = 1});
  const Simulation sim = simulate({.programs = &programs, .cluster = &cluster, .estimator = &estimator});
  double kernels = 0;
  for (const parallel::Instr& i : programs[0].instrs)
    if (const auto* c = std::get_if<parallel::Compute>(&i.op)) {
      const Graph& g = programs[0].graph_of(i.micro_batch);
      kernels += p.kernels.at(kernel_key(g, g.nodes()[static_cast<size_t>(c->node)], 1)).seconds;
    }
  EXPECT_NEAR(sim.busy_seconds[0], kernels, 1e-9 * kernels);
  EXPECT_GT(sim.step_seconds, kernels);
}

// Contention a busy host measures is named: two ranks on two free cores
// run side by side (x1.0); x1.97 (one bench calibration's, taken while
// the shared host was busy) means they took turns on one core. Three
// ranks on two cores may take turns: nothing to say there.
TEST(Calibration, ContentionOnlyABusyHostMeasuresIsNamed) {
  HostProfile p;
  p.cores = 2;
  p.contention_compute = {1, 1.03, 2.04};
  EXPECT_EQ(busy_host_contention(p), "");
  p.contention_compute = {1, 1.97, 2.97};
  EXPECT_EQ(busy_host_contention(p),
            "2 ranks at once ran x1.97 slower each on 2 cores: the cores were not free (another process?)");
  p.contention_compute = {1};
  EXPECT_EQ(busy_host_contention(p), "");
}

TEST(Calibration, TimesEveryCodecButPowerSgd) {
  HostProfile p;
  measure_codecs(p, {.batch_seconds = 0.001, .batches = 1, .max_ranks = 2});
  for (const char* method : {"fp16", "bf16", "int8", "sign", "topk", "threshold"}) {
    ASSERT_TRUE(p.codecs.count(method)) << method;
    // The split between the two is rough under load (two ranks' time less
    // one's); their sum is one rank's whole codec.
    EXPECT_GT(p.codecs.at(method).encode + p.codecs.at(method).decode, 0) << method;
    EXPECT_GE(p.codecs.at(method).encode, 0) << method;
    EXPECT_GE(p.codecs.at(method).decode, 0) << method;
  }
  EXPECT_FALSE(p.codecs.count("powersgd"));
}

// A compressed data-parallel step on the local spec: its codec's measured
// cost lands on the progress lane, and that lane's work shares the cores
// with the ranks' computes, so a slower codec slows the step.
TEST(Calibration, ACompressedStepPaysItsCodecOnTheSharedCores) {
  nn::GptConfig config{.vocab = 64, .block = 16, .n_layer = 2, .n_head = 2, .n_embd = 32};
  const nn::Model model = nn::build_gpt(config, 4, 16, true);
  parallel::Strategy dp = parallel::data_parallel(2, batch_input_names(model));
  dp.lowering.compression = comm::compression::Spec::parse("int8");
  const std::vector<parallel::Program> programs = lower_all({.forward = &model.graph, .loss = model.loss}, dp);
  HostProfile p = rates();
  p.comm = comm::default_cost_model("inproc");
  auto step = [&](double per_element) {
    p.codecs["int8"] = {.encode = per_element, .decode = per_element};
    const ClusterSpec cluster = local_spec(p);
    return simulate_sharing_cores({.programs = &programs, .cluster = &cluster}, {.threads = 1});
  };
  const Simulation fast = step(1e-12), slow = step(1e-6);
  EXPECT_GT(slow.progress_busy[0], 100 * fast.progress_busy[0]);
  EXPECT_GT(slow.step_seconds, fast.step_seconds);
  // The same busy progress lane slows the computes: more busy threads than ranks.
  EXPECT_GT(slow.busy_seconds[0], fast.busy_seconds[0]);
}

}  // namespace
}  // namespace px::plan
