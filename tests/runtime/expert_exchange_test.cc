// Expert parallelism's routed exchange (runtime/executor/expert_exchange.h)
// against what it must do, computed directly: comm::all_to_all_v on odd
// and even rank counts with uneven (and zero) counts; a dispatch brings
// every rank exactly the rows its block of experts was chosen for, by
// expert, then source rank, then row, and undispatch puts each back
// (dropped rows zero), with experts that do not divide by the ranks; and a
// rank that routes to a missing expert or by another capacity is the same
// named error on every rank, not a hang.
#include <gtest/gtest.h>

#include <mutex>

#include "comm/collectives.h"
#include "comm/backends.h"
#include "core/block.h"
#include "runtime/executor/expert_exchange.h"

namespace px {
namespace {

constexpr int64_t kWidth = 3;

// Rank r's choice of row i, among E experts: every fifth dropped (-1-e).
int32_t choice_of(int rank, int64_t row, int64_t experts) {
  const auto e = static_cast<int32_t>((rank * 7 + row * 3) % experts);
  return row % 5 == 4 ? -1 - e : e;
}
float value_of(int rank, int64_t row, int64_t c) { return float(rank * 1000 + row * 10 + c); }

TEST(AllToAllV, EveryRankGetsItsPeersBytesOnOneToFiveRanks) {
  for (int ranks = 1; ranks <= 5; ++ranks)
    comm::run_inproc(ranks, [&](comm::Communicator& comm) {
      const int r = comm.rank();
      // Rank r sends (r + q) % 3 floats to rank q: some messages empty.
      auto count = [](int from, int to) { return int64_t((from + to) % 3); };
      std::vector<float> send, receive;
      std::vector<int64_t> send_bytes, receive_bytes;
      for (int q = 0; q < ranks; ++q) {
        for (int64_t i = 0; i < count(r, q); ++i) send.push_back(float(r * 100 + q * 10 + i));
        send_bytes.push_back(count(r, q) * 4);
        receive_bytes.push_back(count(q, r) * 4);
      }
      int64_t total = 0;
      for (int q = 0; q < ranks; ++q) total += count(q, r);
      receive.assign(static_cast<size_t>(total), -1);
      comm::all_to_all_v(comm, send.data(), send_bytes, receive.data(), receive_bytes);
      size_t at = 0;
      for (int q = 0; q < ranks; ++q)
        for (int64_t i = 0; i < count(q, r); ++i) EXPECT_EQ(receive[at++], float(q * 100 + r * 10 + i)) << ranks;
    });
}

TEST(RoutePlan, DispatchBringsEachRankItsExpertsRowsAndUndispatchPutsThemBack) {
  constexpr int64_t kExperts = 5, kRows = 9;
  for (int ranks : {1, 2, 3, 4})
    comm::run_inproc(ranks, [&](comm::Communicator& comm) {
      const int r = comm.rank();
      std::vector<int32_t> choice(kRows);
      Tensor x = Tensor::empty({kRows, kWidth});
      for (int64_t i = 0; i < kRows; ++i) {
        choice[static_cast<size_t>(i)] = choice_of(r, i, kExperts);
        for (int64_t c = 0; c < kWidth; ++c) x.f32()[i * kWidth + c] = value_of(r, i, c);
      }
      const RoutePlan plan(comm, {.site = 7, .experts = kExperts}, choice.data(), kRows, "layer 'test'");
      Tensor local;
      const Tensor arrived = plan.dispatch(comm, x, local);
      // Expected: by expert of this rank's block, then source, then row.
      const Block mine = block(kExperts, ranks, r);
      int64_t at = 0;
      for (int64_t e = mine.begin; e < mine.begin + mine.count; ++e)
        for (int s = 0; s < ranks; ++s)
          for (int64_t i = 0; i < kRows; ++i) {
            if (choice_of(s, i, kExperts) != e) continue;
            ASSERT_LT(at, arrived.dim(0));
            EXPECT_EQ(local.data<int32_t>()[at], e - mine.begin);
            for (int64_t c = 0; c < kWidth; ++c) EXPECT_EQ(arrived.f32()[at * kWidth + c], value_of(s, i, c));
            ++at;
          }
      EXPECT_EQ(at, arrived.dim(0));
      EXPECT_EQ(at, plan.arriving());
      // Each row back: doubled on the way, so the trip is seen.
      Tensor doubled = arrived.clone();
      for (int64_t i = 0; i < doubled.numel(); ++i) doubled.f32()[i] *= 2;
      const Tensor back = plan.undispatch(comm, doubled, Shape{kRows, kWidth});
      for (int64_t i = 0; i < kRows; ++i)
        for (int64_t c = 0; c < kWidth; ++c)
          EXPECT_EQ(back.f32()[i * kWidth + c], choice[static_cast<size_t>(i)] >= 0 ? 2 * value_of(r, i, c) : 0.0f);
    });
}

// Every rank's error agreeing on one exchange at `where`, each rank's
// header and choices from `setup` (given the rank).
std::vector<std::string> agreement_errors(int ranks, const std::string& where,
                                          const std::function<void(int, RouteHeader&, std::vector<int32_t>&)>& setup) {
  std::mutex mutex;
  std::vector<std::string> errors;
  comm::run_inproc(ranks, [&](comm::Communicator& comm) {
    RouteHeader header;
    std::vector<int32_t> choice;
    setup(comm.rank(), header, choice);
    try {
      const RoutePlan plan(comm, header, choice.data(), static_cast<int64_t>(choice.size()), where);
    } catch (const Error& e) {
      std::lock_guard lock(mutex);
      errors.push_back(e.what());
    }
  });
  return errors;
}

// Every rank's error, for one exchange where `odd` rank 1 differs.
std::vector<std::string> errors_when(int ranks, const std::function<void(RouteHeader&, std::vector<int32_t>&)>& odd) {
  return agreement_errors(ranks, "layer 'h.1.mlp.dispatch'", [&](int rank, RouteHeader& h, std::vector<int32_t>& c) {
    c = {0, 1, 2, 3};
    h = {.site = 3, .experts = 4, .capacity_factor = 1.25};
    if (rank == 1) odd(h, c);
  });
}

TEST(RoutePlan, AMissingExpertOrAnotherCapacityIsTheSameNamedErrorOnEveryRank) {
  const auto missing = errors_when(3, [](RouteHeader&, std::vector<int32_t>& c) { c[2] = 9; });
  ASSERT_EQ(missing.size(), 3u);
  for (const std::string& e : missing)
    EXPECT_NE(e.find("at layer 'h.1.mlp.dispatch' expert rank 1 routes row 2 to expert 9, but the layer has 4 "
                     "experts"),
              std::string::npos)
        << e;
  const auto capacity = errors_when(2, [](RouteHeader& h, std::vector<int32_t>&) { h.capacity_factor = 2; });
  ASSERT_EQ(capacity.size(), 2u);
  for (const std::string& e : capacity) EXPECT_NE(e.find("capacity factor"), std::string::npos) << e;
}

// Dropless routing's hot rank: every row to expert 0 (rank 0's), so rank 0
// would receive 3 ranks x 4 rows, 8 beyond its plan of 4; at 1 GiB a row
// against 2 GiB available, every rank refuses before the exchange, naming
// rank 0, expert 0 and the rows.
TEST(RoutePlan, AHotRankBeyondItsMemoryIsRefusedOnEveryRankWithTheExpertAndTheCount) {
  const std::vector<std::string> errors =
      agreement_errors(3, "layer 'h.0.mlp.dispatch.routed'", [](int, RouteHeader& h, std::vector<int32_t>& c) {
        c = {0, 0, 0, 0};
        h = {.site = 1, .experts = 3, .planned_rows = 4, .bytes_per_row = double(1 << 30),
             .available_bytes = 2.0 * (1 << 30)};
      });
  ASSERT_EQ(errors.size(), 3u);
  for (const std::string& e : errors)
    EXPECT_NE(e.find("expert rank 0 would receive 12 rows, 8 beyond the 4 its Program planned for (expert 0 alone "
                     "gets 12): 8.00 GiB more than the 2.00 GiB"),
              std::string::npos)
        << e;
}

}  // namespace
}  // namespace px
