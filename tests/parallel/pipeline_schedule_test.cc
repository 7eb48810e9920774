// Pipeline schedules (parallel/pipeline_schedule.h): every generator for
// P in 1..8 and M in 1..16 gives complete, matched, deadlock-free action
// lists; the checker catches what a broken list gets wrong; the unit-cost
// bubbles are the papers' and micro-batches in flight are bounded as each
// schedule promises.
#include <gtest/gtest.h>

#include "core/error.h"
#include "parallel/pipeline_schedule.h"

namespace px::parallel {
namespace {

// The largest number of micro-batches a rank holds between a forward and
// its (input-)backward.
int peak_in_flight(const std::vector<PipelineAction>& list) {
  int now = 0, peak = 0;
  for (const PipelineAction& a : list) {
    if (a.op == PipelineOp::forward) peak = std::max(peak, ++now);
    if (a.op == PipelineOp::backward || a.op == PipelineOp::backward_input) --now;
  }
  return peak;
}

TEST(PipelineSchedule, EveryGeneratorIsCompleteAndFreeOfDeadlock) {
  int checked = 0;
  for (int P = 1; P <= 8; ++P)
    for (int M = 1; M <= 16; ++M) {
      for (PipelineKind kind : {PipelineKind::gpipe, PipelineKind::one_f_one_b, PipelineKind::zb_h1}) {
        const PipelineSchedule s = make_pipeline_schedule(kind, P, M);  // checks
        EXPECT_NO_THROW(check_pipeline_schedule(s));
        ++checked;
        for (int r = 0; r < P; ++r) {
          const int in_flight = peak_in_flight(s.ranks[static_cast<size_t>(r)]);
          const int bound = kind == PipelineKind::gpipe ? M : std::min(P - r, M);
          EXPECT_EQ(in_flight, bound) << pipeline_kind_name(kind) << " P=" << P << " M=" << M << " rank " << r;
        }
      }
      if (M % P != 0) continue;
      for (int V : {2, 3}) {
        EXPECT_NO_THROW(make_pipeline_schedule(PipelineKind::interleaved, P, M, V)) << "P=" << P << " M=" << M;
        ++checked;
      }
    }
  EXPECT_GT(checked, 3 * 8 * 16);
}

TEST(PipelineSchedule, UnitCostBubblesAreThePapers) {
  for (int P = 2; P <= 8; ++P)
    for (int M = 1; M <= 16; ++M) {
      const double formula = static_cast<double>(P - 1) / (M + P - 1);
      const double gpipe = simulate_pipeline(make_pipeline_schedule(PipelineKind::gpipe, P, M)).bubble_fraction();
      const double one_f_one_b =
          simulate_pipeline(make_pipeline_schedule(PipelineKind::one_f_one_b, P, M)).bubble_fraction();
      const double zb = simulate_pipeline(make_pipeline_schedule(PipelineKind::zb_h1, P, M)).bubble_fraction();
      EXPECT_NEAR(gpipe, formula, 1e-12) << "P=" << P << " M=" << M;
      EXPECT_NEAR(one_f_one_b, formula, 1e-12) << "P=" << P << " M=" << M;
      if (M >= P) {
        EXPECT_LT(zb, one_f_one_b) << "P=" << P << " M=" << M;
      }
      if (M % P == 0) {
        const double interleaved =
            simulate_pipeline(make_pipeline_schedule(PipelineKind::interleaved, P, M, 2)).bubble_fraction();
        EXPECT_LT(interleaved, one_f_one_b) << "P=" << P << " M=" << M;
      }
    }
}

void expect_error(const std::function<void()>& body, const std::string& needle) {
  try {
    body();
    FAIL() << "expected an error containing: " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(PipelineSchedule, TheCheckerCatchesBrokenLists) {
  const PipelineSchedule good = make_pipeline_schedule(PipelineKind::one_f_one_b, 3, 4);
  // Rank 1 waits for a gradient before sending the activation it is built from.
  PipelineSchedule s = good;
  std::vector<PipelineAction>& rank1 = s.ranks[1];
  const auto send = std::find(rank1.begin(), rank1.end(), PipelineAction{PipelineOp::send_activation, 0, 0, 2});
  const PipelineAction moved = *send;
  rank1.erase(send);
  rank1.insert(std::find(rank1.begin(), rank1.end(), PipelineAction{PipelineOp::recv_gradient, 0, 0, 2}) + 1, moved);
  expect_error([&] { check_pipeline_schedule(s); }, "pipeline 1f1b (P=3, M=4) deadlocks");
  expect_error([&] { check_pipeline_schedule(s); }, "rank 1 waits at 'recv gradient 0 from 2'");
  // A lost backward.
  s = good;
  s.ranks[2].erase(std::find(s.ranks[2].begin(), s.ranks[2].end(), PipelineAction{PipelineOp::backward, 3, 0, -1}));
  expect_error([&] { check_pipeline_schedule(s); }, "rank 2: backward of micro-batch 3 chunk 0 runs 0 times");
  // A forward before its activation arrives.
  s = good;
  std::swap(s.ranks[1][0], s.ranks[1][1]);
  expect_error([&] { check_pipeline_schedule(s); }, "forward 0 runs before its activation arrives");
  // A send to the wrong rank.
  s = good;
  std::find(s.ranks[0].begin(), s.ranks[0].end(), PipelineAction{PipelineOp::send_activation, 2, 0, 1})->peer = 2;
  expect_error([&] { check_pipeline_schedule(s); }, "names peer 2, but stage 1 is on rank 1");
}

TEST(PipelineSchedule, BadSizesAreNamedErrors) {
  expect_error([] { make_pipeline_schedule(PipelineKind::interleaved, 4, 6, 2); }, "use 4 or 8");
  expect_error([] { make_pipeline_schedule(PipelineKind::interleaved, 4, 3, 2); }, "--micro-batches 3 does not fit: use 4");
  expect_error([] { make_pipeline_schedule(PipelineKind::interleaved, 4, 8, 1); }, "at least 2");
  expect_error([] { make_pipeline_schedule(PipelineKind::one_f_one_b, 4, 8, 2); }, "needs the interleaved schedule");
  expect_error([] { make_pipeline_schedule(PipelineKind::gpipe, 2, 0); }, "0 micro-batches");
  expect_error([] { pipeline_kind_from_name("pipedream"); }, "expected gpipe, 1f1b, interleaved or zb-h1");
}

TEST(PipelineSchedule, DrawsOneRowPerStage) {
  EXPECT_EQ(draw_pipeline(make_pipeline_schedule(PipelineKind::one_f_one_b, 2, 3)),
            "pipeline 1f1b (P=2, M=3): unit costs F 1, B 2; bubble 25.0%\n"
            "stage 0 | F0 F1 .  .  B0 ~  F2 B1 ~  .  B2 ~ \n"
            "stage 1 | .  F0 B0 ~  F1 B1 ~  F2 B2 ~  .  . \n"
            "~: the backward goes on\n");
}

}  // namespace
}  // namespace px::parallel
