// GradientCompressor::allreduce_sum on 1..5 in-process ranks: the result must
// equal the sum, in rank order, of each rank's contribution computed here
// independently (bitwise for the methods that decode and sum locally), be
// bitwise identical on every rank, and leave residual = x - contribution.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "comm/compression/compressor.h"
#include "comm/compression/quantize.h"
#include "comm/reduction.h"
#include "core/error.h"
#include "ranks.h"

namespace px::comm::compression {
namespace {

using testing::gradient;
using testing::on_ranks;

constexpr uint64_t kSeed = 42, kStep = 3;

struct Shape {
  int64_t rows, cols;
  int64_t count() const { return rows * cols; }
};

// What one rank saw.
struct RankRun {
  std::vector<float> input, result, residual, q_before;
};

std::vector<RankRun> run(int ranks, const Spec& spec, Shape shape) {
  std::vector<RankRun> runs(ranks);
  on_ranks(ranks, [&](Communicator& comm) {
    RankRun& mine = runs[comm.rank()];
    GradientCompressor compressor(spec, shape.count(), shape.rows, shape.cols, kSeed);
    for (const auto& [name, values] : compressor.state())
      if (name == "powersgd.q") mine.q_before = values;
    mine.input = gradient(shape.count(), comm.rank(), kStep);
    mine.result = mine.input;
    compressor.allreduce_sum(comm, mine.result, kStep);
    mine.residual.assign(compressor.residual().begin(), compressor.residual().end());
  });
  return runs;
}

float round_f16(float v) { return f16_to_f32(f32_to_f16(v)); }
float round_bf16(float v) { return bf16_to_f32(f32_to_bf16(v)); }

// Reference top-k by a full sort: magnitude descending, lower index first.
std::vector<int64_t> largest(const std::vector<float>& x, int64_t k) {
  std::vector<int64_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return std::fabs(x[a]) > std::fabs(x[b]); });
  order.resize(k);
  return order;
}

// This rank's contribution, for the methods whose contribution depends on
// its own input alone.
std::vector<float> contribution(const Spec& spec, const std::vector<float>& x, int rank) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> c(n, 0.0f);
  std::vector<uint8_t> payload;
  switch (spec.method) {
    case Method::none: return x;
    case Method::fp16: std::transform(x.begin(), x.end(), c.begin(), round_f16); break;
    case Method::bf16: std::transform(x.begin(), x.end(), c.begin(), round_bf16); break;
    case Method::topk: {
      const int64_t k = n == 0 ? 0 : std::clamp<int64_t>(std::llround(spec.topk_fraction * n), 1, n);
      for (int64_t i : largest(x, k)) c[i] = round_bf16(x[i]);
      break;
    }
    case Method::threshold:
      for (int64_t i = 0; i < n; ++i)
        if (std::fabs(x[i]) >= spec.threshold) c[i] = round_bf16(x[i]);
      break;
    case Method::int8:
      detail::encode_int8(x, detail::noise_seed(kSeed, kStep, rank), payload);
      detail::decode_int8(payload, c);
      break;
    case Method::sign:
      detail::encode_sign(x, payload);
      detail::decode_sign(payload, c);
      break;
    case Method::powersgd: ADD_FAILURE() << "see powersgd_contributions"; break;
  }
  return c;
}

// PowerSGD in double, from the shared starting Q (r, n): contributions
// P̂ (M_w^T P̂)^T with P̂ the orthonormalized sum of M_w Q.
std::vector<std::vector<double>> powersgd_contributions(const std::vector<RankRun>& runs,
                                                        Shape shape) {
  const int64_t m = shape.rows, n = shape.cols;
  const std::vector<float>& q = runs[0].q_before;
  const int r = static_cast<int>(q.size() / n);
  std::vector<double> p(m * r, 0.0);
  for (const RankRun& run : runs)
    for (int64_t i = 0; i < m; ++i)
      for (int j = 0; j < r; ++j)
        for (int64_t c = 0; c < n; ++c) p[i * r + j] += double(run.input[i * n + c]) * q[j * n + c];
  for (int j = 0; j < r; ++j) {
    for (int l = 0; l < j; ++l) {
      double dot = 0;
      for (int64_t i = 0; i < m; ++i) dot += p[i * r + j] * p[i * r + l];
      for (int64_t i = 0; i < m; ++i) p[i * r + j] -= dot * p[i * r + l];
    }
    double norm = 0;
    for (int64_t i = 0; i < m; ++i) norm += p[i * r + j] * p[i * r + j];
    for (int64_t i = 0; i < m; ++i) p[i * r + j] /= std::sqrt(norm);
  }
  std::vector<std::vector<double>> out;
  for (const RankRun& run : runs) {
    std::vector<double> own_q(r * n, 0.0), c(m * n, 0.0);
    for (int64_t i = 0; i < m; ++i)
      for (int j = 0; j < r; ++j)
        for (int64_t k = 0; k < n; ++k) own_q[j * n + k] += double(run.input[i * n + k]) * p[i * r + j];
    for (int64_t i = 0; i < m; ++i)
      for (int j = 0; j < r; ++j)
        for (int64_t k = 0; k < n; ++k) c[i * n + k] += p[i * r + j] * own_q[j * n + k];
    out.push_back(std::move(c));
  }
  return out;
}

// "" when |got - want| <= tolerance everywhere, else the first miss.
template <typename Want>
std::string compare(std::span<const float> got, const std::vector<Want>& want, double tolerance) {
  if (got.size() != want.size()) return fmt::format("{} elements, expected {}", got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    if (!(std::fabs(double(got[i]) - double(want[i])) <= tolerance))
      return fmt::format("element {}: got {}, expected {}", i, got[i], double(want[i]));
  return "";
}

void check(int ranks, const Spec& spec, Shape shape) {
  SCOPED_TRACE(fmt::format("{} on {} ranks, {}x{}", spec.to_string(), ranks, shape.rows, shape.cols));
  const std::vector<RankRun> runs = run(ranks, spec, shape);
  const int64_t n = shape.count();
  for (int q = 1; q < ranks; ++q)
    ASSERT_TRUE(n == 0 || std::memcmp(runs[q].result.data(), runs[0].result.data(), n * sizeof(float)) == 0)
        << "rank " << q << " differs from rank 0";

  const bool low_rank = !runs[0].q_before.empty();
  std::vector<std::vector<double>> contributions;
  if (low_rank) {
    contributions = powersgd_contributions(runs, shape);
  } else {
    Spec dense = spec;
    if (spec.method == Method::powersgd) dense.method = Method::none;  // vectors go dense
    for (int q = 0; q < ranks; ++q) {
      std::vector<float> c = contribution(dense, runs[q].input, q);
      contributions.emplace_back(c.begin(), c.end());
    }
  }
  // Exactness: decode-and-sum methods add the same floats in the same order.
  double scale = 0;
  for (const auto& c : contributions)
    for (double v : c) scale = std::max(scale, std::fabs(v));
  const bool exact = spec.method == Method::int8 || spec.method == Method::sign ||
                     spec.method == Method::topk || spec.method == Method::threshold;
  double tolerance = 0;
  if (spec.method == Method::fp16) tolerance = ranks * scale * 1e-3;  // f16 partial sums per hop
  if (spec.method == Method::bf16) tolerance = ranks * scale * 8e-3;
  if (spec.method == Method::none || (spec.method == Method::powersgd && !low_rank))
    tolerance = ranks * scale * 1e-6;
  if (low_rank) tolerance = ranks * scale * 2e-4;

  std::vector<float> sum_f(n, 0.0f);
  std::vector<double> sum_d(n, 0.0);
  for (const auto& c : contributions)
    for (int64_t i = 0; i < n; ++i) {
      sum_f[i] += static_cast<float>(c[i]);
      sum_d[i] += c[i];
    }
  EXPECT_EQ("", exact ? compare(runs[0].result, sum_f, 0.0) : compare(runs[0].result, sum_d, tolerance));

  // Error feedback keeps exactly what was not sent.
  const bool keeps_residual = spec.method != Method::none && (spec.method != Method::powersgd || low_rank);
  for (int q = 0; q < ranks; ++q) {
    if (!keeps_residual) {
      EXPECT_TRUE(runs[q].residual.empty());
      continue;
    }
    std::vector<double> want(n);
    double magnitude = scale;  // one float rounding of x - contribution
    for (int64_t i = 0; i < n; ++i) {
      want[i] = double(runs[q].input[i]) - contributions[q][i];
      magnitude = std::max(magnitude, std::fabs(want[i]));
    }
    EXPECT_EQ("", compare(runs[q].residual, want, low_rank ? 2e-4 * scale : 1e-7 * magnitude))
        << "residual of rank " << q;
  }
}

std::vector<Shape> shapes() {
  return {{0, 0}, {1, 1}, {2, 1}, {1, 7}, {1, 97}, {25, 40}, {1, 4099}, {300, 217}};
}

class EveryMethod : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryMethod, SumsEachRanksContributionIdenticallyOnOneToFiveRanks) {
  const Spec spec = Spec::parse(GetParam());
  for (int ranks = 1; ranks <= 5; ++ranks)
    for (Shape shape : shapes()) check(ranks, spec, shape);
}

TEST_P(EveryMethod, SumsAMillionElementsOnThreeAndFourRanks) {
  const Spec spec = Spec::parse(GetParam());
  for (int ranks : {3, 4}) check(ranks, spec, {1024, 1024});
}

INSTANTIATE_TEST_SUITE_P(Methods, EveryMethod,
                         ::testing::Values("none", "fp16", "bf16", "int8", "sign", "topk:0.01",
                                           "topk:0.3", "threshold:0.01", "powersgd:1",
                                           "powersgd:2", "powersgd:4"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace_if(name.begin(), name.end(),
                                           [](char c) { return !std::isalnum(c); }, '_');
                           return name;
                         });

TEST(PowerSgd, SmallMatricesAndVectorsGoDense) {
  const Spec spec = Spec::parse("powersgd:2");
  EXPECT_FALSE(GradientCompressor(spec, 15, 3, 5, 1).low_rank());   // (3+5)·2 >= 15
  EXPECT_TRUE(GradientCompressor(spec, 42, 6, 7, 1).low_rank());    // (6+7)·2 < 42
  EXPECT_FALSE(GradientCompressor(spec, 100, 1, 100, 1).low_rank());
  EXPECT_FALSE(GradientCompressor(spec, 100, 100, 1, 1).low_rank());
  check(3, spec, {3, 5});
  check(3, spec, {6, 7});
}

TEST(PowerSgd, RecoversALowRankSumExactly) {
  // When every rank's matrix lies in one rank-2 column space, P spans it
  // after one step and P P^T M = M: the sum comes through without loss.
  const int64_t m = 40, n = 30;
  std::vector<float> sum(m * n, 0.0f);
  std::vector<std::vector<float>> results(3);
  auto matrix = [&](int rank) {
    std::vector<float> x(m * n);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t c = 0; c < n; ++c)
        x[i * n + c] = std::sin(0.1f * i) * (rank + 1) * std::cos(0.2f * c) +
                       std::cos(0.3f * i) * std::sin(0.05f * c * (rank + 2));
    return x;
  };
  on_ranks(3, [&](Communicator& comm) {
    GradientCompressor compressor(Spec::parse("powersgd:2"), m * n, m, n, 9);
    results[comm.rank()] = matrix(comm.rank());
    compressor.allreduce_sum(comm, results[comm.rank()], 0);
  });
  for (int rank = 0; rank < 3; ++rank) {
    std::vector<float> x = matrix(rank);
    for (int64_t i = 0; i < m * n; ++i) sum[i] += x[i];
  }
  for (int64_t i = 0; i < m * n; ++i) EXPECT_NEAR(results[0][i], sum[i], 1e-4) << i;
}

TEST(HalfPrecision, Fp16SaturatesAndSendsTheExcessLater) {
  on_ranks(1, [](Communicator& comm) {
    GradientCompressor compressor(Spec::parse("fp16"), 2, 1);
    std::vector<float> g = {1e5f, -3.0f};
    compressor.allreduce_sum(comm, g, 0);
    EXPECT_EQ(g, (std::vector<float>{65504.0f, -3.0f}));
    EXPECT_EQ(compressor.residual()[0], 1e5f - 65504.0f);
    g = {0.0f, 0.0f};
    compressor.allreduce_sum(comm, g, 1);
    EXPECT_EQ(g[0], 34496.0f);  // 1e5 - 65504, exact in fp16
    EXPECT_EQ(compressor.residual()[0], 0.0f);
  });
}

TEST(CompressorErrors, RanksThatDisagreeGetBothDescriptions) {
  auto error_of = [](auto body) -> std::string {
    try {
      on_ranks(3, body);
    } catch (const Error& error) {
      return error.what();
    }
    return "no error";
  };
  std::string message = error_of([](Communicator& comm) {
    GradientCompressor compressor(Spec::parse(comm.rank() == 1 ? "topk:0.02" : "topk:0.01"), 100, 7);
    std::vector<float> g(100, 1.0f);
    compressor.allreduce_sum(comm, g, 0);
  });
  EXPECT_NE(message.find("topk:0.01 on 100 elements"), std::string::npos) << message;
  EXPECT_NE(message.find("topk:0.02 on 100 elements"), std::string::npos) << message;
  EXPECT_NE(message.find("every rank must create the same compressors"), std::string::npos) << message;

  // Same wire size, different meaning: fp16 vs bf16.
  message = error_of([](Communicator& comm) {
    GradientCompressor compressor(Spec::parse(comm.rank() == 2 ? "bf16" : "fp16"), 10, 7);
    std::vector<float> g(10, 1.0f);
    compressor.allreduce_sum(comm, g, 0);
  });
  EXPECT_NE(message.find("bf16 on 10 elements"), std::string::npos) << message;

  message = error_of([](Communicator& comm) {
    const int64_t count = comm.rank() == 0 ? 64 : 65;
    GradientCompressor compressor(Spec::parse("sign"), count, 7);
    std::vector<float> g(count, 1.0f);
    compressor.allreduce_sum(comm, g, 0);
  });
  EXPECT_NE(message.find("sign on 64 elements"), std::string::npos) << message;
  EXPECT_NE(message.find("sign on 65 elements"), std::string::npos) << message;

  message = error_of([](Communicator& comm) {
    GradientCompressor compressor(Spec::parse("powersgd:2"), 64, 8, 8, comm.rank() == 0 ? 1 : 2);
    std::vector<float> g(64, 1.0f);
    compressor.allreduce_sum(comm, g, 0);
  });
  EXPECT_NE(message.find("seed 1"), std::string::npos) << message;
  EXPECT_NE(message.find("seed 2"), std::string::npos) << message;
}

TEST(CompressorErrors, WrongSizesAndShapesAreNamed) {
  EXPECT_THROW(GradientCompressor(Spec::parse("powersgd:2"), 10, 3, 3, 1), Error);
  on_ranks(1, [](Communicator& comm) {
    GradientCompressor compressor(Spec::parse("topk:0.1"), 10, 1);
    std::vector<float> g(11);
    try {
      compressor.allreduce_sum(comm, g, 0);
      ADD_FAILURE() << "no error";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("gradient has 11 elements, the compressor was made for 10"),
                std::string::npos)
          << error.what();
    }
  });
}

TEST(CompressorState, SavesAndRestoresResidualAndQ) {
  const Spec spec = Spec::parse("powersgd:2");
  const int64_t m = 12, n = 10;
  // Two steps straight, versus one step, a save/load into a fresh
  // compressor, and the second step: identical bits.
  std::vector<float> straight(m * n), resumed(m * n);
  on_ranks(2, [&](Communicator& comm) {
    GradientCompressor a(spec, m * n, m, n, 5);
    std::vector<float> g = gradient(m * n, comm.rank(), 0);
    a.allreduce_sum(comm, g, 0);
    const GradientCompressor::State saved = a.state();
    ASSERT_EQ(saved.size(), 2u);
    EXPECT_EQ(saved[0].first, "residual");
    EXPECT_EQ(saved[1].first, "powersgd.q");
    EXPECT_EQ(saved[1].second.size(), size_t(2 * n));
    g = gradient(m * n, comm.rank(), 1);
    a.allreduce_sum(comm, g, 1);
    if (comm.rank() == 0) straight = g;

    GradientCompressor b(spec, m * n, m, n, 5);
    b.load_state(saved);
    g = gradient(m * n, comm.rank(), 1);
    b.allreduce_sum(comm, g, 1);
    if (comm.rank() == 0) resumed = g;
  });
  EXPECT_EQ(straight, resumed);

  GradientCompressor topk(Spec::parse("topk:0.1"), 100, 1);
  try {
    topk.load_state({{"residual", std::vector<float>(99)}});
    ADD_FAILURE() << "no error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("'residual' (99 floats)"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("expects ['residual' (100 floats)]"), std::string::npos)
        << error.what();
  }
  EXPECT_TRUE(GradientCompressor(Spec::parse("topk:0.1,ef=off"), 100, 1).state().empty());
  EXPECT_TRUE(GradientCompressor(Spec::parse("none"), 100, 1).state().empty());
}

}  // namespace
}  // namespace px::comm::compression
