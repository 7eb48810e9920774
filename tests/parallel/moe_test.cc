// The mixture-of-experts GPT against one rank (strategy_equivalence.h):
// dropless routing under data, tensor and pipeline parallelism, ZeRO and
// expert parallelism (alone and with data, tensor and pipeline
// parallelism and ZeRO, whose expert shards are the data axis'; with
// micro-batches interleaved so the exchanges overlap compute), capacity routing under data and expert parallelism (every
// rank routes the whole batch, so it drops exactly the tokens one rank
// drops), a checkpoint resumed under other strategies (expert degrees
// among them), and decoding an MoE checkpoint. The
// bias balancing (DeepSeek-V3): the same under data parallelism, its sign
// rule, and a load closer to even than none.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "parallel/strategy_equivalence.h"
#include "runtime/optimizer/optimizer.h"
#include "runtime/decode/decode_runner.h"
#include "testing/gpt_reference.h"
#include "testing/tiny_jobs.h"

namespace px {
namespace {

using testing::kEquivalenceSteps;
using testing::kEquivalenceTolerance;

// 4 experts, top-2, in both blocks; dropout on.
JobSpec moe_job(double capacity_factor, const std::string& balance = "aux") {
  JobSpec o = testing::tiny_gpt(testing::shared_text());
  o.model.gpt.n_head = 4;
  o.model.gpt.n_embd = 32;
  o.model.gpt.moe_experts = 4;
  o.model.gpt.moe_top_k = 2;
  o.model.gpt.capacity_factor = capacity_factor;
  o.model.gpt.moe_balance = balance;
  o.run.steps = kEquivalenceSteps;
  o.optimizer.schedule.total = kEquivalenceSteps;
  o.data.batch = 8;
  return o;
}

struct MoeCase {
  const char* name;
  int ranks = 1, tp = 1, pp = 1, ep = 1, zero = 0, micro_batches = 1;
  double capacity_factor = 0;
  const char* balance = "aux";
  bool overlap_experts = false;  // micro-batches interleaved (LoweringOptions::overlap_expert_exchanges)
};

class GptMoe : public ::testing::TestWithParam<MoeCase> {};

// One rank with the case's micro-batches: each micro-batch's
// load-balancing loss counts its own choices, as a pipeline's must.
TEST_P(GptMoe, MatchesOneRank) {
  const MoeCase& c = GetParam();
  JobSpec o = moe_job(c.capacity_factor, c.balance);
  o.strategy.micro_batches = c.micro_batches;
  const auto& single =
      testing::reference_losses(fmt::format("moe{}_{}_{}", c.capacity_factor, c.micro_batches, c.balance), o);
  o.launch.ranks = c.ranks;
  o.strategy.tensor_parallel = c.tp;
  o.strategy.pipeline_parallel = c.pp;
  o.strategy.expert_parallel = c.ep;
  o.strategy.zero_stage = c.zero;
  o.strategy.overlap_expert_exchanges = c.overlap_experts;
  testing::expect_same_losses(single, testing::train_losses(o), kEquivalenceTolerance, c.name);
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, GptMoe,
    ::testing::Values(MoeCase{.name = "dp2", .ranks = 2}, MoeCase{.name = "dp3", .ranks = 3},
                      MoeCase{.name = "tp2", .ranks = 2, .tp = 2}, MoeCase{.name = "dp2_tp2", .ranks = 4, .tp = 2},
                      MoeCase{.name = "pp2", .ranks = 2, .pp = 2, .micro_batches = 2},
                      MoeCase{.name = "dp2_zero3", .ranks = 2, .zero = 3},
                      MoeCase{.name = "capacity_dp2", .ranks = 2, .capacity_factor = 1.0},
                      MoeCase{.name = "capacity_dp3", .ranks = 3, .capacity_factor = 1.0},
                      MoeCase{.name = "bias_dp2", .ranks = 2, .balance = "bias"},
                      MoeCase{.name = "bias_capacity_dp3", .ranks = 3, .capacity_factor = 1.0, .balance = "bias"},
                      MoeCase{.name = "ep2", .ranks = 2, .ep = 2}, MoeCase{.name = "ep4", .ranks = 4, .ep = 4},
                      MoeCase{.name = "dp2_ep2", .ranks = 4, .ep = 2},
                      MoeCase{.name = "ep2_tp2", .ranks = 4, .tp = 2, .ep = 2},
                      MoeCase{.name = "bias_ep2_pp2", .ranks = 4, .pp = 2, .ep = 2, .micro_batches = 2, .balance = "bias"},
                      MoeCase{.name = "capacity_ep2", .ranks = 2, .ep = 2, .capacity_factor = 1.0},
                      MoeCase{.name = "capacity_dp2_ep2", .ranks = 4, .ep = 2, .capacity_factor = 1.0},
                      MoeCase{.name = "ep2_zero2", .ranks = 2, .ep = 2, .zero = 2},
                      MoeCase{.name = "dp2_ep2_zero1", .ranks = 4, .ep = 2, .zero = 1},
                      MoeCase{.name = "dp2_ep2_zero3", .ranks = 4, .ep = 2, .zero = 3},
                      // Two micro-batches interleaved, their exchanges on the expert axis'
                      // engine; three leave the last one alone. Balanced by the bias: the
                      // auxiliary loss of a micro-batch spread over ranks counts other tokens
                      // than one rank's micro-batch does (as does capacity's drop).
                      MoeCase{.name = "bias_ep2_mb2", .ranks = 2, .ep = 2, .micro_batches = 2, .balance = "bias", .overlap_experts = true},
                      MoeCase{.name = "bias_ep2_tp2_mb2", .ranks = 4, .tp = 2, .ep = 2, .micro_batches = 2,
                              .balance = "bias", .overlap_experts = true},
                      MoeCase{.name = "bias_dp2_ep2_zero1_mb2", .ranks = 4, .ep = 2, .zero = 1, .micro_batches = 2,
                              .balance = "bias", .overlap_experts = true},
                      MoeCase{.name = "bias_ep2_mb3", .ranks = 2, .ep = 2, .micro_batches = 3, .balance = "bias", .overlap_experts = true}),
    [](const ::testing::TestParamInfo<MoeCase>& info) { return std::string(info.param.name); });

// Without the load-balancing loss, whose shares a micro-batch counts over
// its tokens on every data-parallel rank (so dp x micro-batches groups
// tokens unlike one rank's micro-batches): what is tested is the
// checkpoint, expert tensors resharded between strategies.
TEST(GptMoeCheckpoint, ResumesUnderOtherStrategies) {
  struct Stage {
    const char* name;
    int ranks, tp, pp, ep, zero, micro_batches;
  };
  const std::vector<Stage> chain{{"1 rank", 1, 1, 1, 1, 0, 2},
                                 {"dp=2 x tp=2", 4, 2, 1, 1, 0, 2},
                                 {"ep=2", 2, 1, 1, 2, 0, 2},
                                 {"dp=2 x ep=2, ZeRO-3", 4, 1, 1, 2, 3, 1},
                                 {"ep=4", 4, 1, 1, 4, 0, 2},
                                 {"pp=2", 2, 1, 2, 1, 0, 2}};
  constexpr int kSegment = 10;
  JobSpec base = moe_job(0);
  base.model.gpt.aux_loss_coef = 0;
  base.run.steps = kSegment * static_cast<int64_t>(chain.size());
  base.optimizer.schedule.total = base.run.steps;
  base.run.eval_every = 0;
  std::vector<testing::ResumeLink> links;
  for (const Stage& s : chain) {
    JobSpec o = base;
    o.launch.ranks = s.ranks;
    o.strategy.tensor_parallel = s.tp;
    o.strategy.pipeline_parallel = s.pp;
    o.strategy.expert_parallel = s.ep;
    o.strategy.zero_stage = s.zero;
    o.strategy.micro_batches = s.micro_batches;
    links.push_back({s.name, o});
  }
  testing::expect_resumed_segments_match(links, kSegment, kEquivalenceTolerance);
}

TEST(GptMoeDecode, EveryRowMatchesTheFullForward) {
  const nn::GptConfig config{
      .vocab = 256, .block = 32, .n_layer = 2, .n_head = 2, .n_embd = 32, .moe_experts = 4, .moe_top_k = 2};
  const ParamStore params = testing::scaled_gpt_weights(config, 2);
  std::vector<int32_t> sequence(21);
  for (size_t i = 0; i < sequence.size(); ++i) sequence[i] = static_cast<int32_t>((i * 37 + 11) % 256);
  const int64_t block_tokens = 8, entries = nn::block_table_entries(config, block_tokens);
  decode::DecodeRunner runner(config, params, {.blocks = entries, .block_tokens = block_tokens});
  std::vector<int32_t> table(static_cast<size_t>(entries));
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
  int64_t start = 0;
  double worst = 0;
  for (int64_t rows : {13, 1, 1, 6}) {
    const decode::SequenceChunk chunk{.tokens = sequence, .start = start, .rows = rows, .blocks = table};
    const Tensor logits = runner.run(decode::make_batch({&chunk, 1}, entries, block_tokens));
    for (int64_t r = 0; r < rows; ++r) {
      const std::vector<float> expected = testing::full_forward(
          config, params, std::span<const int32_t>(sequence).first(static_cast<size_t>(start + r + 1)));
      for (size_t v = 0; v < expected.size(); ++v)
        worst = std::max(worst, std::abs(double(logits.f32()[r * config.vocab + static_cast<int64_t>(v)]) - expected[v]));
    }
    start += rows;
  }
  EXPECT_LT(worst, 1e-4);
}

TEST(GptMoeBalance, ASignRateParameterMovesByTheRateAgainstItsGradientsSign) {
  Optimizer optimizer({.kind = "adamw", .weight_decay = 0.1}, {{"bias", Shape{4}, 0, 4, false, 0.25}});
  std::vector<float> bias{0, 0, 1, 1}, grad{3e-9f, -1e-9f, 0, -5};
  optimizer.begin_step();
  optimizer.update(0, bias.data(), grad.data(), /*lr=*/0.5);
  EXPECT_EQ(bias, (std::vector<float>{-0.25f, 0.25f, 1, 1.25f}));
}

// The median over the last 50 of 150 steps of the largest share any
// expert of any layer took.
double hottest_share(JobSpec o, const std::string& metrics) {
  o.run.steps = 150;
  o.optimizer.schedule.total = 150;
  o.run.metrics = metrics;
  testing::train_losses(o);
  std::ifstream in(metrics);
  std::vector<double> hottest;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (!j.contains("moe")) continue;
    double most = 0;
    for (const auto& layer : j["moe"])
      for (const auto& share : layer["load"]) most = std::max(most, share.get<double>());
    hottest.push_back(most);
  }
  std::vector<double> last(hottest.end() - 50, hottest.end());
  std::nth_element(last.begin(), last.begin() + 25, last.end());
  return last[25];
}

TEST(GptMoeBalance, TheBiasKeepsTheLoadCloserToEvenThanNoBalancing) {
  testing::ScratchDir dir;
  JobSpec none = moe_job(0);
  none.model.gpt.aux_loss_coef = 0;
  none.model.gpt.z_loss_coef = 0;
  JobSpec bias = none;
  bias.model.gpt.moe_balance = "bias";
  const double unbalanced = hottest_share(none, dir.file("none.jsonl"));
  const double balanced = hottest_share(bias, dir.file("bias.jsonl"));
  ::testing::Test::RecordProperty("hottest_share", fmt::format("{:.3f} by bias, {:.3f} unbalanced", balanced, unbalanced));
  EXPECT_LT(balanced, unbalanced - 0.02) << "top-2 of 4: an expert on every token takes 0.5, an even one 0.25";
}

}  // namespace
}  // namespace px
