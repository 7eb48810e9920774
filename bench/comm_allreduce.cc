// parallax allreduce next to MPI_Allreduce (the "native" algorithm: the MPI
// library's own call on the same group), in one run, with ratios; or
// in-process next to single-thread memcpy.
//   mpirun --oversubscribe -np 2 px_bench_comm_allreduce [sizes...]
//   px_bench_comm_allreduce --ranks 2 [sizes...]        (in-process)
//   ... --tune [sizes...]   fit the cost model, print predicted vs measured
//                           (default sizes 64K..64M by 2x and 1.5x each, never
//                           tuned; timed in the tuning sweep's rounds, in
//                           batches of their own that the fit never sees)
//   ... --tune --dump FILE  also every batch kept (sweep and check) as JSON
// Sizes like 4K, 1M, 64M (default 4K 1M 4M 16M 64M 256M). Prints per size
// the busbw of every algorithm, MPI's, the best parallax one and best/MPI.
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/backends.h"
#include "comm/tuning/benchmark.h"
#include "core/error.h"

namespace {

int64_t parse_size(const std::string& text) {
  size_t used = 0;
  double value = -1;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = text.substr(used);
  if (used == 0 || value < 0 || unit.size() > 1 || (unit.size() == 1 && std::strchr("KkMmGg", unit[0]) == nullptr))
    px::fail("argument '{}' is not a size or an option: expected a size such as 4K, 1M or 64M, --ranks N, --tune "
             "(see --help)",
             text);
  if (unit == "K" || unit == "k") value *= 1024;
  if (unit == "M" || unit == "m") value *= 1 << 20;
  if (unit == "G" || unit == "g") value *= 1 << 30;
  return static_cast<int64_t>(value);
}

std::string size_name(int64_t bytes) {
  if (bytes >= (1 << 20) && bytes % (1 << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= 1024 && bytes % 1024 == 0) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} B", bytes);
}

// Single-thread memcpy GB/s at `bytes` (the in-process yardstick).
double memcpy_rate(int64_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 0);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    auto start = std::chrono::steady_clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, bytes / s / 1e9);
  }
  return best;
}

void run(px::comm::Communicator& comm, const std::vector<int64_t>& sizes) {
  using namespace px::comm;
  std::vector<Algorithm> algorithms;
  for (Algorithm a : {Algorithm::shared_memory, Algorithm::ring, Algorithm::halving_doubling,
                      Algorithm::recursive_doubling, Algorithm::native})
    if (runnable(comm, Collective::allreduce, a)) algorithms.push_back(a);
  const bool root = comm.rank() == 0;
  if (root) {
    fmt::print("# allreduce float32 sum, {} ranks, backend {}, busbw GB/s (median of {} rounds)\n",
               comm.size(), comm.backend(), BenchmarkOptions{}.rounds);
    fmt::print("{:>9}", "size");
    for (Algorithm a : algorithms) fmt::print(" {:>18}", algorithm_name(a));
    fmt::print(" {:>18} {:>9} {:>12} {:>12}\n", "best", "best/MPI", "best_us", "MPI_us");
  }
  BenchmarkOptions options{.algorithms = algorithms, .sizes = sizes, .target_seconds = 0.05,
                           .check = true};
  const auto all_rows = run_benchmark(comm, options);
  for (int64_t bytes : sizes) {
    std::vector<BenchmarkRow> rows;
    for (const auto& row : all_rows)
      if (row.bytes == bytes) rows.push_back(row);
    const BenchmarkRow* best = nullptr;
    const BenchmarkRow* mpi = nullptr;
    for (const auto& row : rows) {
      if (row.checked == 0 && root) fmt::print("# WRONG RESULT: {}\n", algorithm_name(row.algorithm));
      if (row.algorithm == Algorithm::native) mpi = &row;
      else if (!best || row.seconds < best->seconds) best = &row;
    }
    if (!root) continue;
    fmt::print("{:>9}", size_name(bytes));
    for (const auto& row : rows) fmt::print(" {:>18.3f}", row.busbw);
    fmt::print(" {:>18} ", algorithm_name(best->algorithm));
    if (mpi) fmt::print("{:>9.2f} {:>12.1f} {:>12.1f}\n", mpi->seconds / best->seconds,
                        best->seconds * 1e6, mpi->seconds * 1e6);
    else fmt::print("{:>9} {:>12.1f} {:>12}\n", "-", best->seconds * 1e6, "-");
    if (comm.backend() == "inproc" && bytes >= (16 << 20))
      fmt::print("{:>9}   memcpy 1 thread {:.2f} GB/s; best busbw / memcpy = {:.2f}\n", "",
                 memcpy_rate(bytes), best->busbw / memcpy_rate(bytes));
  }
}

// --dump FILE: every batch kept of the sweep and the check, with the links
// measured, as JSON, so fits and statistics can be studied offline.
void dump_batches(const px::comm::TunedCheck& tuned, const std::string& path) {
  using namespace px::comm;
  auto rows = [](const std::vector<BenchmarkRow>& list) {
    nlohmann::json out = nlohmann::json::array();
    for (const BenchmarkRow& row : list)
      out.push_back({{"algorithm", algorithm_name(row.algorithm)}, {"bytes", row.bytes},
                     {"ranks", row.ranks}, {"iterations", row.iterations}, {"seconds", row.seconds},
                     {"batches", row.batches}});
    return out;
  };
  nlohmann::json json{{"model", nlohmann::json::parse(cost_model_to_json(tuned.model))},
                      {"sweep", rows(tuned.sweep)},
                      {"check", rows(tuned.check)}};
  std::ofstream out(path);
  if (!out) px::fail("--dump: cannot write '{}'", path);
  out << json.dump(1) << "\n";
}

// --tune: fit the cost model on this host (at default_tuning_sizes(): the
// cache cliffs lie between 1 and 16 MiB and need points inside them),
// then print predicted vs measured for every algorithm at `sizes`, which
// should include sizes the fit never saw; the issue asks for agreement within
// 25% from 64 KiB.
void tune_and_compare(px::comm::Communicator& comm, const std::vector<int64_t>& sizes,
                      const std::string& dump_path) {
  using namespace px::comm;
  const bool root = comm.rank() == 0;
  auto say = [&](const std::string& line) {
    if (root) fmt::print("# {}\n", line);
    std::fflush(stdout);
  };
  const BenchmarkOptions options{.sizes = sizes};
  const TunedCheck tuned = tune_and_check(comm, default_tuning_sizes(), options, say);
  if (root && !dump_path.empty()) dump_batches(tuned, dump_path);
  // The sweep's own time for (algorithm, bytes): an oracle "model" that
  // predicts the tuned sizes perfectly, so sweep/measured is the noise floor.
  auto swept = [&](const BenchmarkRow& row) {
    for (const auto& s : tuned.sweep)
      if (s.algorithm == row.algorithm && s.bytes == row.bytes) return s.seconds;
    return 0.0;
  };
  if (root) {
    fmt::print("# allreduce float32 sum, {} ranks, backend {}: measured = slowest rank, median of "
               "{} rounds (batches of the sweep and of this check interleaved, never shared); "
               "tuned sizes 64K..64M by 2x, and x sqrt(2) from 512K to 16M\n",
               comm.size(), comm.backend(), options.rounds);
    fmt::print("{:>9} {:>26} {:>12} {:>12} {:>9} {:>7} {:>8} {:>11}\n", "size", "algorithm",
               "measured_us", "predicted_us", "pred/meas", "spread", "retaken", "sweep/meas");
  }
  double worst = 0, worst_floor = 0;
  int judged_rows = 0, outside = 0, dirty = 0, floor_rows = 0, floor_outside = 0;
  std::string worst_what;
  for (const BenchmarkRow& row : tuned.check) {
    const double ratio = row.predicted_seconds / row.seconds;
    const bool judged = row.bytes >= (64 << 10) && comm.size() > 1;  // 1 rank: nothing to predict
    if (judged) {
      ++judged_rows;
      outside += std::fabs(ratio - 1) > 0.25;
      dirty += row.dirty;
      if (std::fabs(ratio - 1) > worst) {
        worst = std::fabs(ratio - 1);
        worst_what = fmt::format("{} at {}", algorithm_name(row.algorithm), size_name(row.bytes));
      }
    }
    const double tuned_seconds = swept(row);
    if (tuned_seconds > 0) {
      ++floor_rows;
      floor_outside += std::fabs(tuned_seconds / row.seconds - 1) > 0.25;
      worst_floor = std::max(worst_floor, std::fabs(tuned_seconds / row.seconds - 1));
    }
    if (!root) continue;
    fmt::print("{:>9} {:>26} {:>12.1f} {:>12.1f} {:>9.2f} {:>6.0f}% {:>8} {:>11}{}\n",
               size_name(row.bytes), algorithm_name(row.algorithm), row.seconds * 1e6,
               row.predicted_seconds * 1e6, ratio, row.spread * 100, row.retaken,
               tuned_seconds > 0 ? fmt::format("{:.2f}", tuned_seconds / row.seconds) : "-",
               judged && std::fabs(ratio - 1) > 0.25 ? "  <- outside 25%" : "");
  }
  if (root)
    fmt::print("# every algorithm within 25% at >= 64 KiB: {} ({} of {} outside; worst {:.0f}%: "
               "{}; {} batches kept despite foreign load)\n",
               outside == 0 ? "YES" : "NO", outside, judged_rows, worst * 100, worst_what, dirty);
  if (root && floor_rows)
    fmt::print("# noise floor: the tuning sweep's own times vs these, at the {} tuned (size, "
               "algorithm) pairs: worst {:.0f}%, {} outside 25%\n",
               floor_rows, worst_floor * 100, floor_outside);
  if (root)
    fmt::print("# timed {} time(s); the last timing {}\n", tuned.attempts,
               tuned.unsettled.empty() ? "settled" : "still unsettled: " + tuned.unsettled);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    int ranks = 2;
    bool tune = false;
    std::string dump_path;
    std::vector<int64_t> sizes;
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg == "--help" || arg == "-h") {
        fmt::print("parallax allreduce next to MPI_Allreduce (under mpirun) or memcpy (in-process):\n"
                   "  mpirun --oversubscribe -np 2 px_bench_comm_allreduce [sizes...]\n"
                   "  px_bench_comm_allreduce --ranks N [sizes...]\n"
                   "  ... --tune [sizes...]  fit the cost model (saved for later runs), print predicted vs measured\n"
                   "  ... --tune --dump FILE  also write every batch kept (sweep and check) as JSON\n"
                   "Sizes like 4K, 1M, 64M (default 4K 1M 4M 16M 64M 256M; with --tune 64K..64M by 2x and 1.5x).\n");
        return 0;
      }
      if (arg == "--ranks") {
        if (i + 1 >= argc || std::atoi(argv[i + 1]) < 1)
          px::fail("--ranks needs a rank count >= 1, got '{}'", i + 1 < argc ? argv[i + 1] : "nothing");
        ranks = std::atoi(argv[++i]);
      } else if (arg == "--tune") tune = true;
      else if (arg == "--dump") {
        if (i + 1 >= argc) px::fail("--dump needs a file name");
        dump_path = argv[++i];
      }
      else sizes.push_back(parse_size(arg));
    }
    if (sizes.empty() && tune)  // tuned sizes and, never tuned, 1.5x each
      for (int64_t s = 64 << 10; s <= (64 << 20); s *= 2) {
        sizes.push_back(s);
        if (s < (64 << 20)) sizes.push_back(s / 2 * 3);
      }
    if (sizes.empty())
      for (int64_t s : {4 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20}) sizes.push_back(s);
    if (std::getenv("OMPI_COMM_WORLD_SIZE")) {  // launched by mpirun
      px::comm::mpi::init(&argc, &argv);
      if (tune) tune_and_compare(px::comm::mpi::world(), sizes, dump_path);
      else run(px::comm::mpi::world(), sizes);
      px::comm::mpi::finalize();
    } else {
      px::comm::run_inproc(ranks, [&](px::comm::Communicator& comm) {
        if (tune) tune_and_compare(comm, sizes, dump_path);
        else run(comm, sizes);
      });
    }
  } catch (const px::Error& error) {
    fmt::print(stderr, "error: {}\n", error.what());
    return 1;
  }
  return 0;
}
