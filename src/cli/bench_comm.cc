// `parallax bench comm`: per collective, algorithm and size: time, algorithm
// and bus bandwidth, and the cost model's predicted time. --tune measures
// the model on this host and saves it; later runs load it.
#include "cli/bench_comm.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/train_flags.h"
#include "comm/backends.h"
#include "comm/cost_model.h"
#include "comm/tuning/benchmark.h"
#include "core/error.h"

namespace px::cli {
namespace {

struct BenchCommOptions {
  int ranks = 2;
  std::string collective = "allreduce";
  std::string algorithm = "all";
  std::string sizes = "4,16,64,256,1K,4K,16K,64K,256K,1M,4M,16M,64M,256M";
  int iters = 0;
  bool check = false;
  bool tune = false;
  std::string tune_file;
  int servers = 0;
  int ranks_per_node = 0;
  int timeout_ms = 60000;
};

std::string default_tune_file() {
  const char* cache = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  std::string base = cache ? cache : (home ? std::string(home) + "/.cache" : ".");
  return base + "/parallax/comm_cost_model.json";
}

int64_t parse_size(const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    fail("--sizes: '{}' is not a size; expected e.g. 4, 64K, 16M", text);
  }
  std::string unit = text.substr(used);
  if (unit == "K" || unit == "k") value *= 1024;
  else if (unit == "M" || unit == "m") value *= 1 << 20;
  else if (unit == "G" || unit == "g") value *= 1 << 30;
  else if (!unit.empty()) fail("--sizes: unit '{}' in '{}' is unknown; expected K, M or G", unit, text);
  if (value < 4) fail("--sizes: {} is below one float32 (4 bytes)", text);
  return static_cast<int64_t>(value) / 4 * 4;
}

std::vector<int64_t> parse_sizes(const std::string& list) {
  std::vector<int64_t> sizes;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) sizes.push_back(parse_size(item));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return sizes;
}

std::string size_name(int64_t bytes) {
  if (bytes >= (1 << 20) && bytes % (1 << 20) == 0) return fmt::format("{}M", bytes >> 20);
  if (bytes >= 1024 && bytes % 1024 == 0) return fmt::format("{}K", bytes >> 10);
  return fmt::format("{}", bytes);
}

void run(comm::Communicator& world, const BenchCommOptions& options) {
  using namespace px::comm;
  const bool root = world.rank() == 0;
  auto say = [&](const std::string& line) {
    if (root) fmt::print("# {}\n", line);
    std::fflush(stdout);
  };
  BenchmarkOptions bench{.collective = collective_from_name(options.collective),
                         .sizes = parse_sizes(options.sizes),
                         .iterations = options.iters,
                         .check = options.check,
                         .collective_options = {.servers = options.servers,
                                                .ranks_per_node = options.ranks_per_node}};
  if (options.algorithm != "all") bench.algorithms = {algorithm_from_name(options.algorithm)};
  const std::string path = options.tune_file.empty() ? default_tune_file() : options.tune_file;
  std::vector<BenchmarkRow> rows;
  if (options.tune) {
    CostModel previous;
    bool have_previous = std::filesystem::exists(path);
    if (have_previous) previous = load_cost_model(path);
    say(fmt::format("tuning the cost model on {} ranks ({}), timing the benchmark beside it",
                    world.size(), world.backend()));
    TunedCheck tuned = tune_and_check(world, default_tuning_sizes(), bench, say);
    CostModel model = tuned.model;
    if (have_previous && previous.backend == model.backend)  // keep fits for other rank counts
      for (const auto& [key, fit] : previous.fits) model.fits.emplace(key, fit);
    if (root) {
      std::filesystem::create_directories(std::filesystem::path(path).parent_path());
      save_cost_model(model, path);
    }
    say(fmt::format("saved {}", path));
    world.set_cost_model(std::make_shared<CostModel>(model));
    rows = std::move(tuned.check);
  } else {
    if (std::filesystem::exists(path)) {
      CostModel model = load_cost_model(path);
      if (model.backend == world.backend()) {
        world.set_cost_model(std::make_shared<CostModel>(model));
        say(fmt::format("cost model: {}", path));
      } else {
        say(fmt::format("cost model {} was tuned for '{}', not '{}': using defaults", path,
                        model.backend, world.backend()));
      }
    } else {
      say("cost model: built-in defaults (run with --tune to measure this host)");
    }
    rows = run_benchmark(world, bench, {}, say);
  }

  if (root) {
    fmt::print("# {} float32, {} ranks, backend {}; time = slowest rank, median of {} rounds "
               "(passes over every size and algorithm), foreign CPU load and disturbed "
               "stretches retaken\n",
               options.collective, world.size(), world.backend(), bench.rounds);
    fmt::print("{:>6} {:>26} {:>7} {:>12} {:>10} {:>10} {:>12} {:>9} {:>7} {:>7} {:>6}\n",
               "size", "algorithm", "iters", "time_us", "algbw_GBs", "busbw_GBs", "predict_us",
               "pred/meas", "spread", "retaken", "check");
  }
  int wrong = 0, outside = 0, judged = 0;
  double worst = 0;
  std::string worst_what;
  for (const BenchmarkRow& row : rows) {
    wrong += row.checked == 0;
    const double ratio = row.predicted_seconds / row.seconds;
    if (row.bytes >= (64 << 10) && row.ranks > 1 && row.algorithm != Algorithm::automatic) {
      ++judged;
      outside += std::fabs(ratio - 1) > 0.25;
      if (std::fabs(ratio - 1) > worst) {
        worst = std::fabs(ratio - 1);
        worst_what = fmt::format("{} at {}", algorithm_name(row.algorithm), size_name(row.bytes));
      }
    }
    if (!root) continue;
    fmt::print("{:>6} {:>26} {:>7} {:>12.2f} {:>10.3f} {:>10.3f} {:>12.2f} {:>9.2f} {:>6.0f}% "
               "{:>7} {:>6}\n",
               size_name(row.bytes), algorithm_name(row.algorithm), row.iterations,
               row.seconds * 1e6, row.algbw, row.busbw, row.predicted_seconds * 1e6, ratio,
               row.spread * 100, row.retaken,
               row.checked < 0 ? "-" : row.checked ? "ok" : "WRONG");
  }
  if (root && bench.collective == Collective::allreduce && !worst_what.empty())
    fmt::print("# predicted within 25% of measured for every algorithm at >= 64 KiB: {} "
               "({} of {} outside; worst {:.0f}%: {})\n",
               outside == 0 ? "YES" : "NO", outside, judged, worst * 100, worst_what);
  if (wrong) fail("bench comm: {} results were wrong (see the check column)", wrong);
}

}  // namespace

void add_bench_comm_command(CLI::App& bench) {
  auto options = std::make_shared<BenchCommOptions>();
  CLI::App* command = bench.add_subcommand(
      "comm", "Benchmark collectives (in-process, or under mpirun) and tune the cost model");
  // A flag given twice takes its last value, as in train: scripts append overrides.
  command->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  command->add_option("--ranks", options->ranks, "in-process ranks (ignored under mpirun)")
      ->capture_default_str()->check(CLI::Range(1, 256));
  command->add_option("--collective", options->collective,
                      "allreduce, reduce_scatter, allgather, broadcast, reduce, all_to_all, barrier")
      ->capture_default_str();
  command->add_option("--algorithm", options->algorithm,
                      "all, auto, or one of: naive, parameter_server, sharded_parameter_server, "
                      "ring, recursive_doubling, halving_doubling, tree, hierarchical, "
                      "shared_memory, pairwise, dissemination, native")
      ->capture_default_str();
  command->add_option("--sizes", options->sizes, "bytes per call, comma separated (K, M, G)")
      ->capture_default_str();
  command->add_option("--iters", options->iters, "calls per timed batch (0: about 20 ms worth)")
      ->capture_default_str();
  command->add_flag("--check", options->check, "verify every result");
  command->add_flag("--tune", options->tune, "measure the cost model on this host and save it");
  command->add_option("--tune-file", options->tune_file,
                      "cost model JSON (default: $XDG_CACHE_HOME or ~/.cache, "
                      "parallax/comm_cost_model.json)");
  command->add_option("--servers", options->servers,
                      "sharded_parameter_server: shard count (0: one per rank)")
      ->capture_default_str();
  command->add_option("--ranks-per-node", options->ranks_per_node,
                      "hierarchical: ranks per node (0: ranks sharing a host)")
      ->capture_default_str();
  command->add_option("--timeout-ms", options->timeout_ms, "timeout of every wait")
      ->capture_default_str();
  command->callback([options] {
    comm::CommunicatorOptions communicator{.timeout = std::chrono::milliseconds(options->timeout_ms)};
    // Launched by mpirun (OpenMPI, or a PMI launcher): use the MPI transport.
    if (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE")) {
      comm::mpi::init(nullptr, nullptr, communicator, {.pmi_fd = launcher_pmi_fd()});
      try {
        run(comm::mpi::world(), *options);
      } catch (const std::exception& error) {
        // The other ranks would wait out their timeouts: end them all now.
        fmt::print(stderr, "error: rank {}: {}\n", comm::mpi::world().rank(), error.what());
        comm::mpi::abort(1);
      }
      comm::mpi::finalize();
      return;
    }
    comm::run_inproc(options->ranks, [&](comm::Communicator& world) { run(world, *options); },
                     {.communicator = communicator});
  });
}

}  // namespace px::cli
