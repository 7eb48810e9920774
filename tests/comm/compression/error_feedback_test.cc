// Error feedback over many steps (3 ranks, a 24x40 gradient with a shared
// drift plus per-rank noise, as in training): what was transmitted plus what
// the ranks still hold equals what they were given, and the residual settles
// instead of growing, so the transmitted sum tracks the true sum.
#include <gtest/gtest.h>

#include <cmath>

#include <fmt/format.h>

#include "comm/collectives.h"
#include "comm/compression/compressor.h"
#include "ranks.h"

namespace px::comm::compression {
namespace {

using testing::gradient;
using testing::on_ranks;

constexpr int kRanks = 3, kSteps = 600;
constexpr int64_t kRows = 24, kCols = 40, kCount = kRows * kCols;

struct History {
  std::vector<double> true_sum, sent_sum, residual_sum;  // over steps and ranks
  std::vector<double> residual_norm;                      // per step, over ranks
  std::vector<double> relative_error;                     // per step: |true - sent| / |true|
  float largest_residual = 0;                             // max |e| over ranks, last step
  float largest_input = 0;                                // max |g + e| seen
};

double norm(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

History simulate(const Spec& spec) {
  History h;
  h.true_sum.assign(kCount, 0.0);
  h.sent_sum.assign(kCount, 0.0);
  std::vector<std::vector<float>> residuals(kRanks), results(kRanks), inputs(kRanks);
  std::vector<GradientCompressor> compressors;
  for (int r = 0; r < kRanks; ++r) compressors.emplace_back(spec, kCount, kRows, kCols, 11);
  // Each rank writes its own slots; rank 0 keeps the books between barriers.
  on_ranks(kRanks, [&](Communicator& comm) {
    const int rank = comm.rank();
    GradientCompressor& compressor = compressors[rank];
    for (int step = 0; step < kSteps; ++step) {
      std::vector<float> g = gradient(kCount, rank, step, 5);
      std::vector<float> x = g;
      if (!compressor.residual().empty())
        for (size_t i = 0; i < x.size(); ++i) x[i] += compressor.residual()[i];
      inputs[rank] = x;
      std::vector<float> result = g;
      compressor.allreduce_sum(comm, result, step);
      residuals[rank].assign(compressor.residual().begin(), compressor.residual().end());
      results[rank] = result;
      barrier(comm);  // every rank has written its slots of this step
      if (rank == 0) {
        for (int q = 0; q < kRanks; ++q) {
          std::vector<float> gq = gradient(kCount, q, step, 5);
          for (int64_t i = 0; i < kCount; ++i) h.true_sum[i] += gq[i];
          for (float v : inputs[q]) h.largest_input = std::max(h.largest_input, std::fabs(v));
        }
        for (int64_t i = 0; i < kCount; ++i) h.sent_sum[i] += results[0][i];
        double squares = 0;
        for (int q = 0; q < kRanks; ++q)
          for (float e : residuals[q]) squares += double(e) * e;
        h.residual_norm.push_back(std::sqrt(squares));
        std::vector<double> gap(kCount);
        for (int64_t i = 0; i < kCount; ++i) gap[i] = h.true_sum[i] - h.sent_sum[i];
        h.relative_error.push_back(norm(gap) / norm(h.true_sum));
      }
      barrier(comm);  // rank 0 is done reading before anyone writes again
    }
  });
  h.residual_sum.assign(kCount, 0.0);
  for (int q = 0; q < kRanks; ++q)
    for (int64_t i = 0; i < static_cast<int64_t>(residuals[q].size()); ++i) {
      h.residual_sum[i] += residuals[q][i];
      h.largest_residual = std::max(h.largest_residual, std::fabs(residuals[q][i]));
    }
  return h;
}

double window_max(const std::vector<double>& v, int begin, int end) {
  return *std::max_element(v.begin() + begin, v.begin() + end);
}

class ErrorFeedback : public ::testing::TestWithParam<std::string> {};

TEST_P(ErrorFeedback, SentPlusResidualIsTheTrueSumAndResidualStaysBounded) {
  const Spec spec = Spec::parse(GetParam());
  const History h = simulate(spec);
  // Conservation: sum over steps of results + sum over ranks of the final
  // residual == sum over steps and ranks of the gradients. The dense half
  // methods also round partial sums on the ring (not fed back): looser.
  const bool ring_rounds = spec.method == Method::fp16 || spec.method == Method::bf16;
  const double scale = norm(h.true_sum) / std::sqrt(double(kCount));
  const double tolerance = (ring_rounds ? (spec.method == Method::fp16 ? 2e-3 : 2e-2) : 1e-4) * scale;
  double worst = 0;
  for (int64_t i = 0; i < kCount; ++i)
    worst = std::max(worst, std::fabs(h.true_sum[i] - h.sent_sum[i] - h.residual_sum[i]));
  EXPECT_LE(worst, tolerance) << "sent + residual drifts from the true sum";

  // Bounded: the residual in the last third is no larger than in the middle
  // third (a residual that is never paid back grows ~linearly with the drift).
  const double middle = window_max(h.residual_norm, kSteps / 3, 2 * kSteps / 3);
  const double last = window_max(h.residual_norm, 2 * kSteps / 3, kSteps);
  EXPECT_LE(last, 1.3 * middle) << fmt::format("residual norm {} -> {}", middle, last);
  // Tracking: the relative gap shrinks as the true sum grows. (For fp16/bf16
  // it is the ring's own rounding of partial sums, a random walk: small.)
  if (ring_rounds) {
    EXPECT_LT(h.relative_error[kSteps - 1], spec.method == Method::fp16 ? 2e-4 : 2e-3);
  } else {
    EXPECT_LT(h.relative_error[kSteps - 1], 0.6 * h.relative_error[kSteps / 2 - 1])
        << fmt::format("relative error {} at step {}, {} at the end",
                       h.relative_error[kSteps / 2 - 1], kSteps / 2, h.relative_error[kSteps - 1]);
    EXPECT_LT(h.relative_error[kSteps - 1], 0.15);
  }
  std::printf("%-16s residual norm %.4f (middle) %.4f (last), relative error %.4f -> %.4f\n",
              spec.to_string().c_str(), middle, last, h.relative_error[kSteps / 2 - 1],
              h.relative_error[kSteps - 1]);
}

INSTANTIATE_TEST_SUITE_P(Lossy, ErrorFeedback,
                         ::testing::Values("fp16", "bf16", "int8", "sign", "topk:0.01", "topk:0.1",
                                           "threshold:0.02", "powersgd:1", "powersgd:2"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace_if(name.begin(), name.end(),
                                           [](char c) { return !std::isalnum(c); }, '_');
                           return name;
                         });

TEST(ErrorFeedback, ThresholdResidualStaysBelowTheThreshold) {
  const History h = simulate(Spec::parse("threshold:0.02"));
  // Unsent elements are below it; sent ones keep only bf16 rounding (2^-9 |x|).
  EXPECT_LE(h.largest_residual, std::max(0.02f, h.largest_input / 256));
}

TEST(ErrorFeedback, HalfPrecisionResidualIsTheRoundingErrorOnly) {
  EXPECT_LE(simulate(Spec::parse("fp16")).largest_residual, 1e-5f);   // half ulp at |x| < 0.1
  EXPECT_LE(simulate(Spec::parse("bf16")).largest_residual, 2.5e-4f);
}

TEST(ErrorFeedback, WithoutItTopkLosesMostOfTheSignal) {
  // The same run without error feedback: the small coordinates never get
  // through, so the transmitted sum stays far from the true sum. (Shows the
  // tracking check above can fail.)
  const History h = simulate(Spec::parse("topk:0.01,ef=off"));
  EXPECT_GT(h.relative_error[kSteps - 1], 0.5);
}

}  // namespace
}  // namespace px::comm::compression
