// Context parallelism against a single rank: the GPT with dropout, each
// sequence split over cp ranks through attention, by the ring (key/value
// blocks passed around) and by all-to-all (DeepSpeed-Ulysses), at cp = 2
// and 4 (4 heads) and cp = 3 (6 heads, a block of 16 tokens that 3 does not
// divide), a block of 15 at cp = 2, dp=2 x cp=2 with ZeRO-2 over the data x
// context ranks, and pp=2 x cp=2; the ring also at cp=2 x tp=2 with
// sequence parallelism; the ring balanced (zigzag blocks, the default) and
// not (cp = 4 and 3, a block of 15). Per-step losses over 50 steps within 1e-5 relative
// of one rank on the same global batch.
// Also what the lowering emits (the exchanges around attention, gradients
// reduced once over data x context ranks), the named errors, and resuming
// a checkpoint under another cp degree.
#include <gtest/gtest.h>

#include <map>
#include <sstream>

#include "core/block.h"
#include "nn/gpt.h"
#include "nn/build_model.h"
#include "parallel/compose.h"
#include "parallel/context_parallel.h"
#include "parallel/lower.h"
#include "parallel/lower/reshard.h"
#include "parallel/lower/liveness.h"
#include "parallel/strategy_equivalence.h"
#include "plan/memory.h"
#include "testing/expect_train_error.h"
#include "testing/tiny_jobs.h"

namespace px {
namespace {

using testing::kEquivalenceSteps;
using testing::kEquivalenceTolerance;

JobSpec gpt_job(int heads, int64_t block) {
  JobSpec o = testing::tiny_gpt(testing::shared_text());
  o.model.gpt.n_head = heads;
  o.model.gpt.n_embd = 8 * heads;
  o.model.gpt.block = block;
  o.run.steps = kEquivalenceSteps;
  o.optimizer.schedule.total = kEquivalenceSteps;
  o.data.batch = 8;
  return o;
}

struct CpCase {
  parallel::ContextMethod method = parallel::ContextMethod::ring;
  int heads = 4;
  int64_t block = 16;
  int ranks = 2, cp = 2, pp = 1, tp = 1;
  int zero_stage = 0;
  int micro_batches = 1;
  bool sequence_parallel = false;
  bool balance = true;  // the ring's zigzag split (ContextOptions::balance)
};

std::string case_name(const CpCase& c) {
  const bool ring = c.method == parallel::ContextMethod::ring;
  return fmt::format("{}_heads{}_block{}_pp{}_dp{}_cp{}{}{}{}",
                     ring ? (c.balance ? "ring" : "ring_plain") : "alltoall", c.heads, c.block, c.pp,
                     c.ranks / (c.pp * c.cp * c.tp), c.cp, c.tp > 1 ? fmt::format("_tp{}", c.tp) : "",
                     c.sequence_parallel ? "_sp" : "", c.zero_stage ? fmt::format("_zero{}", c.zero_stage) : "");
}

constexpr auto kRing = parallel::ContextMethod::ring;
constexpr auto kAllToAll = parallel::ContextMethod::all_to_all;

class GptContextParallel : public ::testing::TestWithParam<CpCase> {};

TEST_P(GptContextParallel, MatchesOneRank) {
  const CpCase& c = GetParam();
  JobSpec o = gpt_job(c.heads, c.block);
  o.strategy.micro_batches = c.micro_batches;
  const auto& single =
      testing::reference_losses(fmt::format("gpt{}_{}_{}", c.heads, c.block, c.micro_batches), o);
  o.launch.ranks = c.ranks;
  o.strategy.context_parallel = c.cp;
  o.strategy.context_method = c.method;
  o.strategy.context_balance = c.balance;
  o.strategy.pipeline_parallel = c.pp;
  o.strategy.tensor_parallel = c.tp;
  o.strategy.sequence_parallel = c.sequence_parallel;
  o.strategy.zero_stage = c.zero_stage;
  testing::expect_same_losses(single, testing::train_losses(o), kEquivalenceTolerance, case_name(c));
}

INSTANTIATE_TEST_SUITE_P(
    Meshes, GptContextParallel,
    ::testing::Values(CpCase{}, CpCase{.ranks = 4, .cp = 4}, CpCase{.heads = 6, .ranks = 3, .cp = 3},
                      CpCase{.block = 15}, CpCase{.ranks = 4, .cp = 2, .zero_stage = 2},
                      CpCase{.ranks = 4, .cp = 2, .pp = 2, .micro_batches = 2},
                      CpCase{.ranks = 4, .cp = 2, .tp = 2, .sequence_parallel = true},
                      CpCase{.ranks = 4, .cp = 4, .balance = false}, CpCase{.block = 15, .balance = false},
                      CpCase{.heads = 6, .ranks = 3, .cp = 3, .balance = false},
                      CpCase{.method = kAllToAll}, CpCase{.method = kAllToAll, .ranks = 4, .cp = 4},
                      CpCase{.method = kAllToAll, .heads = 6, .ranks = 3, .cp = 3},
                      CpCase{.method = kAllToAll, .block = 15},
                      CpCase{.method = kAllToAll, .ranks = 4, .cp = 2, .zero_stage = 2},
                      CpCase{.method = kAllToAll, .ranks = 4, .cp = 2, .pp = 2, .micro_batches = 2}),
    [](const ::testing::TestParamInfo<CpCase>& info) { return case_name(info.param); });

// Rank 0's program of the tiny GPT at dp x cp.
parallel::Program lowered(int heads, int dp, int cp, int zero_stage = 0,
                          parallel::ContextMethod method = kAllToAll) {
  const nn::Model model = nn::build_model(gpt_job(heads, 16).model, 8, true);
  parallel::StrategyRequest request{.zero_stage = zero_stage, .context_parallel = cp, .context_method = method};
  const parallel::Strategy s =
      parallel::compose(request, {.graph = &model.graph, .batch_inputs = {"tokens", "targets"}, .ranks = dp * cp});
  return parallel::lower({.forward = &model.graph, .loss = model.loss}, s, 0);
}

TEST(ContextParallelLowering, ExchangesHeadsAroundAttentionAndReducesGradientsOnceOverDataAndContextRanks) {
  const parallel::Program p = lowered(4, 2, 2);
  EXPECT_EQ(p.strategy.mesh.str(), "{dp:2, cp:2}");
  int all_to_all = 0, gathers = 0, bucket_reductions = 0;
  for (const parallel::Instr& instr : p.instrs) {
    if (const auto* r = std::get_if<parallel::Reshard>(&instr.op)) {
      const parallel::Resharding how = parallel::resharding(r->from, r->to);
      all_to_all += how == parallel::Resharding::all_to_all;
      gathers += how == parallel::Resharding::allgather;
    }
    if (const auto* c = std::get_if<parallel::Collective>(&instr.op)) {
      const parallel::CommGroup& group = p.groups[static_cast<size_t>(instr.group)];
      if (p.buffers[static_cast<size_t>(c->input.buffer)].kind != parallel::Buffer::Kind::grad_bucket) continue;
      ++bucket_reductions;
      EXPECT_EQ(group.ranks.size(), 4u) << p.str(static_cast<size_t>(&instr - p.instrs.data()));
      EXPECT_EQ(instr.lane.kind, parallel::Lane::Kind::progress);
    }
  }
  // Per layer: q|k|v to heads and the heads back, forward and backward.
  EXPECT_EQ(all_to_all, 2 * 2 * 2) << p.str();
  EXPECT_EQ(gathers, 0) << "nothing is gathered whole along cp:\n" << p.str();
  EXPECT_GE(bucket_reductions, 1);
}

// The ring: key/value blocks (and backward their gradients) sent and
// received on the cp axis' p2p lane, one block's attention computed
// between each send and the receive of the block after it; no collective
// along cp.
TEST(ContextParallelLowering, RingPassesBlocksOnThePointToPointLaneWhileAttentionComputes) {
  const parallel::Program p = lowered(4, 1, 4, 0, kRing);
  const int cp = p.strategy.mesh.axis("cp");
  int sends = 0, receives = 0;
  std::map<uint32_t, size_t> sent_at;
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const parallel::Instr& instr = p.instrs[i];
    if (const auto* r = std::get_if<parallel::Reshard>(&instr.op))
      EXPECT_TRUE(r->axis != cp || parallel::resharding(r->from, r->to) == parallel::Resharding::slice)
          << "a collective along cp: " << p.str(i);
    if (const auto* send = std::get_if<parallel::Send>(&instr.op)) {
      ++sends;
      EXPECT_EQ(send->axis, cp);
      EXPECT_EQ(instr.lane.kind, parallel::Lane::Kind::p2p);
      sent_at[send->tag] = i;
    }
    if (const auto* recv = std::get_if<parallel::Recv>(&instr.op)) {
      ++receives;
      ASSERT_TRUE(sent_at.count(recv->tag)) << p.str(i);
      bool computed = false;
      for (size_t k = sent_at[recv->tag] + 1; k < i; ++k)
        computed = computed || std::holds_alternative<parallel::Compute>(p.instrs[k].op);
      EXPECT_TRUE(computed) << "nothing overlaps the transfer received by " << p.str(i);
    }
  }
  // Per layer: 3 blocks passed on forward, 3 gradients passed back.
  EXPECT_EQ(sends, 2 * 2 * 3) << p.str();
  EXPECT_EQ(receives, sends);
}

TEST(ContextParallelLowering, ZeroShardsOverDataAndContextRanks) {
  const parallel::Program p = lowered(4, 2, 2, 1);
  ASSERT_GT(p.param_count, 0);
  // Four ranks share the buckets: this rank's shard is about a quarter.
  EXPECT_LE(p.shard_count, p.param_count / 4 + static_cast<int64_t>(p.buckets.size()));
}

// The bytes rank 0 sends along cp in a step, counted by its communicator,
// equal the all-to-all's formula (docs/collectives.md) summed over the
// program's exchanges: (p-1)/p of the local value, 4 bytes an element;
// nothing else moves along cp (the gradients go with the data path's).
// Rank 0's forward activations at their peak (the planner's figure, which
// the end-of-run report checks against the executor's count) for gpt-mini's
// width (4 layers, 4 heads, 128 wide) at `block` tokens, batch 2.
double forward_activation_peak(int64_t block, int cp, parallel::ContextMethod method, parallel::Recompute recompute =
                                                                                         parallel::Recompute::none) {
  JobSpec o = gpt_job(4, block);
  o.model.gpt.n_embd = 128;
  o.model.gpt.n_layer = 4;
  const nn::Model model = nn::build_model(o.model, 2, true);
  parallel::StrategyRequest request{.context_parallel = cp, .context_method = method, .recompute = recompute};
  const parallel::Strategy s =
      parallel::compose(request, {.graph = &model.graph, .batch_inputs = {"tokens", "targets"}, .ranks = cp});
  const parallel::Program p = parallel::lower({.forward = &model.graph, .loss = model.loss}, s, 0);
  return plan::program_memory(p, parallel::liveness(p), 2).forward_activation_peak_bytes;
}

// At block 2048 a rank of cp = 4 keeps a quarter of one rank's activations
// (attention keeps no T x T matrix either way: kernels/attention.h), plus
// what the ring adds per layer: the cp - 1 key/value blocks it was passed
// (2·B·T·C·(cp-1)/cp floats) and each key block's partial output for the
// merge (B·T·C over the cp of them); all-to-all adds nothing that stays.
// Within 10%: the rest (lse, the blocked layout's padding) is small.
TEST(ContextParallelMemory, AtBlock2048FourRanksKeepAQuarterOfOnesActivationsAndTheRingsBlocks) {
  const int64_t B = 2, T = 2048, C = 128, layers = 4, cp = 4;
  const double one = forward_activation_peak(T, 1, kRing);
  const double unit = 4.0 * B * T * C;  // bytes of one (B, T, C) fp32 activation
  const double ring_blocks = layers * (2.0 * (cp - 1) / cp + 1.0) * unit;
  for (const auto method : {kRing, kAllToAll}) {
    const double four = forward_activation_peak(T, cp, method);
    const double bound = 1.1 * (one / cp + (method == kRing ? ring_blocks : 0.0));
    EXPECT_LE(four, bound) << parallel::context_method_name(method) << ": " << four / (1 << 20) << " MiB vs "
                           << one / (1 << 20) << " MiB for one rank";
  }
  // Recompute keeps the ring's attention core and drops the rest of a layer.
  const double full = forward_activation_peak(T, cp, kRing, parallel::Recompute::full);
  EXPECT_LT(full, forward_activation_peak(T, cp, kRing));
}

// The ring's blocks are causal by position: an attention that is not
// (attr causal 0) is refused by name, never computed causally.
TEST(ContextParallelLowering, RingRefusesAttentionThatIsNotCausal) {
  Graph g;
  const ValueId qkv = g.input("qkv", {Shape{2, 8, 3, 2, 4}});
  g.add("attention", {qkv}, {{"causal", int64_t{0}}}, "encoder.attention");
  try {
    parallel::ring_attention(g, 2, true);
    FAIL() << "a non-causal attention went into the ring";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'encoder.attention' is not causal"), std::string::npos) << e.what();
  }
}

TEST(ContextParallelBytes, CountedBytesEqualTheAllToAllFormula) {
  JobSpec o = gpt_job(4, 16);
  o.run.steps = o.optimizer.schedule.total = 2;
  o.launch.ranks = 2;
  o.strategy.context_parallel = 2;
  o.strategy.context_method = kAllToAll;
  std::ostringstream log;
  const JobResult result = train(o, log);
  const parallel::Program p = lowered(4, 1, 2);
  const int cp = p.strategy.mesh.axis("cp");
  const double pass = 1.0 / 2;
  double expected = 0;
  for (const parallel::Instr& instr : p.instrs) {
    const auto* r = std::get_if<parallel::Reshard>(&instr.op);
    if (r == nullptr || r->axis != cp || parallel::resharding(r->from, r->to) == parallel::Resharding::slice) continue;
    ASSERT_EQ(parallel::resharding(r->from, r->to), parallel::Resharding::all_to_all) << p.str();
    const Graph& g = p.graph_of(instr.micro_batch);
    expected += pass * 4 * static_cast<double>(g.spec(g.nodes()[static_cast<size_t>(r->node)].inputs.front()).shape.numel());
  }
  EXPECT_GT(expected, 0);
  EXPECT_EQ(static_cast<double>(result.data_parallel->bytes_per_axis.at("cp")), expected);
}

// The ring: per layer and step, P-1 key/value blocks passed on forward and
// P-1 of their gradients passed back, each a rank's (B, 1, L, 2, H, D)
// floats (L the padded block length); nothing else moves along cp.
TEST(ContextParallelBytes, CountedBytesEqualTheRingFormula) {
  for (int cp : {2, 3}) {
    JobSpec o = gpt_job(4, 16);
    o.run.steps = o.optimizer.schedule.total = 2;
    o.launch.ranks = cp;
    o.strategy.context_parallel = cp;
    std::ostringstream log;
    const JobResult result = train(o, log);
    const double L = static_cast<double>(block(o.model.gpt.block, cp, 0).count);
    const double expected = static_cast<double>(o.model.gpt.n_layer) * 2 * (cp - 1) * static_cast<double>(o.data.batch) * L * 2 *
                            static_cast<double>(o.model.gpt.n_embd) * 4;
    EXPECT_EQ(static_cast<double>(result.data_parallel->bytes_per_axis.at("cp")), expected) << "cp=" << cp;
  }
}

TEST(ContextParallelErrors, AllToAllNeedsHeadsTheRanksDivide) {
  JobSpec o = gpt_job(4, 16);
  o.launch.ranks = 3;
  o.strategy.context_parallel = 3;
  o.strategy.context_method = kAllToAll;
  testing::expect_train_error(o, "has 4 heads, which 3 does not divide");
}

TEST(ContextParallelErrors, AllToAllWithTensorParallelismIsNamed) {
  JobSpec o = gpt_job(4, 16);
  o.launch.ranks = 4;
  o.strategy.context_parallel = 2;
  o.strategy.context_method = kAllToAll;
  o.strategy.tensor_parallel = 2;
  testing::expect_train_error(o, "both split attention's heads and do not combine yet");
}

TEST(ContextParallelErrors, ASequenceShorterThanTheRanksIsNamed) {
  JobSpec o = gpt_job(4, 2);
  o.launch.ranks = 4;
  o.strategy.context_parallel = 4;
  testing::expect_train_error(o, "the sequence has 2 tokens, fewer than the ranks");
}

TEST(ContextParallelResume, CheckpointsMoveBetweenContextDegrees) {
  JobSpec base = gpt_job(4, 16);
  base.run.steps = base.optimizer.schedule.total = 12;
  JobSpec cp2 = base, cp4 = base;
  cp2.launch.ranks = 2, cp2.strategy.context_parallel = 2;
  cp4.launch.ranks = 4, cp4.strategy.context_parallel = 4;
  testing::expect_resumed_segments_match({{"cp=2", cp2}, {"one rank", base}, {"cp=4", cp4}}, 4,
                                         kEquivalenceTolerance);
}

}  // namespace
}  // namespace px
