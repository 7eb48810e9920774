// WireStats against the transport: bytes_sent must be exactly the bytes each
// rank handed to isend, dense_bytes what the float32 ring allreduce sends;
// and the compression ratios the issue asks for (top-k 1% >= 50x at 4 ranks).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "comm/compression/compressor.h"
#include "counting_transport.h"
#include "ranks.h"

namespace px::comm::compression {
namespace {

using testing::CountingTransport;
using testing::gradient;
using testing::on_ranks;

struct Measured {
  std::vector<WireStats> first, second;  // per rank: first call (agreement check included), second
  std::vector<uint64_t> counted_first, counted_second;
};

Measured measure(int ranks, const Spec& spec, int64_t rows, int64_t cols) {
  Measured m;
  m.first.resize(ranks);
  m.second.resize(ranks);
  m.counted_first.resize(ranks);
  m.counted_second.resize(ranks);
  on_ranks(ranks, [&](Communicator& world) {
    CountingTransport counting(world.transport());
    Communicator comm = testing::counted_world(counting);
    const int r = comm.rank();
    GradientCompressor compressor(spec, rows * cols, rows, cols, 3);
    std::vector<float> g = gradient(rows * cols, r, 0);
    m.first[r] = compressor.allreduce_sum(comm, g, 0);
    m.counted_first[r] = counting.bytes_sent;
    g = gradient(rows * cols, r, 1);
    m.second[r] = compressor.allreduce_sum(comm, g, 1);
    m.counted_second[r] = counting.bytes_sent - m.counted_first[r];
  });
  return m;
}

TEST(WireBytes, ReportedBytesAreTheBytesTheTransportSaw) {
  for (std::string text : {"none", "fp16", "bf16", "int8", "sign", "topk:0.01", "topk:0.5",
                           "threshold:0.01", "powersgd:2", "powersgd:3"})
    for (int ranks : {1, 2, 3, 5})
      for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {1, 97}, {31, 67}, {256, 300}}) {
        SCOPED_TRACE(fmt::format("{} on {} ranks, {}x{}", text, ranks, rows, cols));
        const Measured m = measure(ranks, Spec::parse(text), rows, cols);
        for (int r = 0; r < ranks; ++r) {
          EXPECT_EQ(m.first[r].bytes_sent, m.counted_first[r]) << "rank " << r << ", first call";
          EXPECT_EQ(m.second[r].bytes_sent, m.counted_second[r]) << "rank " << r;
          EXPECT_EQ(m.first[r].dense_bytes, m.second[r].dense_bytes);
        }
      }
}

TEST(WireBytes, DenseBytesAreTheFloat32RingAllreduce) {
  for (int ranks : {1, 2, 3, 4, 5})
    for (int64_t count : {1, 7, 1000, 4099}) {
      const Measured m = measure(ranks, Spec::parse("none"), 1, count);
      for (int r = 0; r < ranks; ++r) {
        EXPECT_EQ(m.second[r].dense_bytes, m.counted_second[r]);
        EXPECT_EQ(m.second[r].bytes_sent, m.second[r].dense_bytes);
      }
      if (count == 4099 && ranks > 1) {  // 2(p-1)/p · 4n, up to uneven blocks
        const double formula = 2.0 * (ranks - 1) / ranks * 4 * count;
        EXPECT_NEAR(double(m.second[0].dense_bytes), formula, 8.0);
      }
    }
}

// Bytes of all ranks over dense bytes of all ranks, steady state (second call).
double reduction(const Measured& m) {
  WireStats total;
  for (const WireStats& s : m.second) total += s;
  return total.reduction();
}

TEST(WireBytes, TopOnePercentSendsAtLeastFiftyTimesFewerBytesOnFourRanks) {
  const Measured m = measure(4, Spec::parse("topk:0.01"), 1, 1 << 20);
  const double ratio = reduction(m);
  std::printf("topk:0.01 on 4 ranks, 1M floats: %.1fx fewer bytes than the f32 ring\n", ratio);
  EXPECT_GE(ratio, 50.0);
}

TEST(WireBytes, MethodsReachTheirFormulaRatiosOnFourRanks) {
  // Dense ring: 6n bytes per rank at p = 4. Each method's bytes per rank
  // (docs/compression.md) at n = 1M, as a ratio.
  struct Row {
    std::string text;
    double low, high;
  };
  const std::vector<Row> rows = {
      {"fp16", 1.99, 2.01},        // 3n
      {"bf16", 1.99, 2.01},        // 3n
      {"int8", 1.95, 2.0},         // 3(n + 4n/256)
      {"sign", 13.5, 14.3},        // 3(n/8 + 4n/256)
      {"powersgd:2", 230, 260},    // ring of (1024+1024)·2 floats
  };
  for (const Row& row : rows) {
    const double ratio = reduction(measure(4, Spec::parse(row.text), 1024, 1024));
    std::printf("%-12s on 4 ranks, 1024x1024: %.1fx\n", row.text.c_str(), ratio);
    EXPECT_GE(ratio, row.low) << row.text;
    EXPECT_LE(ratio, row.high) << row.text;
  }
}

}  // namespace
}  // namespace px::comm::compression
