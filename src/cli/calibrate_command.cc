// `parallax calibrate`: measures this host into the `local` cluster spec
// (plan/profile.h): one rank's GEMM rates (fp32, and bf16 where the CPU
// has AVX512_BF16) and streaming rates, how kernels slow down when ranks
// share the cores, each gradient codec's compute, the in-process
// transport's α-β-γ, and the time of
// every kernel the planner's candidate strategies for a model
// run (on up to --max-ranks ranks), each at its local shapes (with
// --precision bf16, the bf16 GEMMs' own timings). Kernels already in the
// saved spec are kept, so calibrating several models adds
// them up; --fresh starts over. Under mpirun across hosts the ranks measure
// the MPI links inside a host and between hosts (cli/calibrate_hosts.h)
// and the spec has two levels: a node per host, a device per rank.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include <fmt/ranges.h>

#include "cli/calibrate_hosts.h"
#include "cli/commands.h"
#include "cli/local_cluster.h"
#include "plan/job_strategy.h"
#include "cli/train_flags.h"
#include "comm/backends.h"
#include "comm/tuning/benchmark.h"
#include "kernels/threads.h"
#include "parallel/compose.h"
#include "parallel/lower.h"
#include "runtime/calibrate/calibrate.h"
#include "plan/candidates.h"
#include "plan/cluster.h"
#include "core/atomic_file.h"
#include "runtime/train/trainer.h"

namespace px::cli {
namespace {

struct CalibrateFlags {
  std::string out;
  int max_ranks = 4;
  double kernel_ms = 1e3 * CalibrationOptions{}.batch_seconds;
  std::string comm = "quick";
  bool fresh = false;
};

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "this host's CPU";
}

double available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  while (in >> key >> kib) {
    if (key == "MemAvailable:") return kib * 1024;
    in.ignore(1 << 10, '\n');
  }
  return 8e9;  // no /proc/meminfo: a guess the user can edit in the file
}

// The in-process transport between two ranks: links only (quick) or every
// allreduce algorithm's fit too (tune, minutes).
comm::CostModel measure_comm(const std::string& how, const CalibrationProgress& say) {
  comm::CostModel model;
  comm::run_inproc(2, [&](comm::Communicator& world) {
    const auto progress = [&](const std::string& line) {
      if (world.rank() == 0) say("comm: " + line);
    };
    comm::CostModel m = how == "tune" ? comm::tune_cost_model(world, comm::default_tuning_sizes(), progress)
                                      : comm::measure_links(world, progress);
    if (world.rank() == 0) model = m;
  });
  return model;
}

plan::ClusterSpec local_spec(plan::HostProfile profile, const plan::LocalHosts& hosts = {}) {
  return plan::local_cluster_spec(std::move(profile), cpu_model(), available_memory_bytes(), hosts);
}

// The hosts a saved spec describes (--comm keep keeps them with its links).
plan::LocalHosts hosts_of(const plan::ClusterSpec& saved) {
  if (saved.nodes == 1) return {};
  plan::LocalHosts hosts{.hosts = saved.nodes, .ranks_per_host = saved.devices_per_node, .between = saved.inter_node,
                         .share_cores = saved.nodes_share_cores};
  for (int n = 0; n < saved.nodes && saved.heterogeneous(); ++n) {
    hosts.speeds.push_back(saved.device_of_node(n).flops_f32 / saved.device.flops_f32);
    hosts.quotas.push_back(saved.device_of_node(n).quota);
  }
  return hosts;
}

// Measures and saves the spec. `links`: what the MPI ranks measured
// (rank 0 calls this under mpirun, with the world's size); nullopt: one
// host, its in-process transport.
void calibrate(JobSpec& o, const CalibrateFlags& cal, const std::optional<HostLinks>& links, int world_ranks = 1) {
  const int lone_threads = o.run.threads;
  const std::string path = cal.out.empty() ? local_cluster_path() : cal.out;
  auto say = [](const std::string& line) { std::cout << line << std::endl; };

  std::optional<plan::ClusterSpec> saved;
  if (!cal.fresh && std::filesystem::exists(path)) saved = plan::load_cluster(path);
  plan::HostProfile profile = saved && saved->profile ? *saved->profile : plan::HostProfile{};
  const CalibrationOptions options{.batch_seconds = cal.kernel_ms / 1e3,
                                   .max_ranks = std::max({cal.max_ranks, o.launch.ranks, world_ranks})};
  measure_host(profile, options, say);
  const double gemm_rate_at_start = profile.flops;
  measure_codecs(profile, options, say);
  if (cal.comm == "keep" && !(saved && saved->profile)) fail("--comm keep: '{}' holds no profile to keep", path);
  if (cal.comm != "keep") profile.comm = links ? links->inside : measure_comm(cal.comm, say);
  plan::LocalHosts hosts = links ? links->hosts : cal.comm == "keep" ? hosts_of(*saved) : plan::LocalHosts{};
  if (links && !links->host_rates.empty()) {
    // Speeds against the rate the profile's kernels were timed at (host 0's
    // in short bursts): under a CPU quota host 0 itself runs below it.
    hosts.speeds.clear();
    for (const double rate : links->host_rates) hosts.speeds.push_back(rate / profile.flops);
    std::vector<std::string> shown;
    for (const double s : hosts.speeds) shown.push_back(fmt::format("{:.0f}%", 100 * s));
    say(fmt::format("host speeds against the profile's GEMM rate ({:.1f} GFLOP/s, host 0 in {:g} ms bursts): {}",
                    profile.flops / 1e9, cal.kernel_ms, fmt::join(shown, ", ")));
  }

  // The kernels of every candidate on 1 .. max ranks, and of the strategy the flags give.
  const nn::Model model = nn::build_model(o.model, o.data.batch, true);
  std::vector<parallel::Strategy> strategies{plan::strategy_for(o.strategy, model, o.launch.ranks, run_use(o.optimizer))};
  for (int r = 1; r <= options.max_ranks; ++r)
    for (parallel::Strategy& s : plan::grid(model.graph, {.ranks = r,
                                                          .batch = o.data.batch,
                                                          .batch_inputs = batch_input_names(model),
                                                          .zero = false,
                                                          .recompute = false,
                                                          .schedules = false,
                                                          .precision = o.strategy.precision}))
      strategies.push_back(std::move(s));
  // In-process ranks run one kernel thread each; a lone rank runs --threads (train's default: 2).
  std::vector<parallel::Program> alone, shared;
  for (const parallel::Strategy& s : strategies)
    for (int r = 0; r < s.mesh.ranks(); ++r) {
      try {
        (s.mesh.ranks() == 1 ? alone : shared)
            .push_back(parallel::lower({.forward = &model.graph, .loss = model.loss}, s, r));
      } catch (const Error&) {
        break;  // a candidate this model cannot take (e.g. more stages than cut points)
      }
    }
  int timed = 0;
  kernels::set_threads(lone_threads);
  timed += time_kernels(profile, alone, options, say);
  kernels::set_threads(1);
  timed += time_kernels(profile, shared, options, say);
  say(fmt::format("{} strategies, {} programs: timed {} new kernels ({} in the profile)", strategies.size(),
                  alone.size() + shared.size(), timed, profile.kernels.size()));
  // The same GEMM as at the start: a host that changed pace meanwhile
  // (another process on the cores for a while) timed some kernels slow,
  // and the spec would predict from them.
  const double gemm_rate_at_end = measure_gemm_rate(options);
  if (std::abs(gemm_rate_at_end / gemm_rate_at_start - 1) > 0.2)
    say(fmt::format("warning: the host's GEMM rate moved from {:.1f} to {:.1f} GFLOP/s while it was measured: the "
                    "cores were busy for a while; calibrate again on an idle host for predictions to trust",
                    gemm_rate_at_start / 1e9, gemm_rate_at_end / 1e9));

  const plan::ClusterSpec local = local_spec(std::move(profile), hosts);
  plan::validate(local);
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  write_file_atomically(path, plan::to_json(local).dump(1) + "\n");
  say(fmt::format("saved the local cluster spec to '{}' (use it with --cluster local)", path));
}

}  // namespace

void add_calibrate_command(CLI::App& app) {
  auto flags = std::make_shared<TrainFlags>();
  auto cal = std::make_shared<CalibrateFlags>();
  CLI::App* cmd = app.add_subcommand("calibrate", "measure this host into the 'local' cluster spec the planner uses");
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_model_flags(*cmd, *flags);
  add_parallel_flags(*cmd, *flags);
  cmd->add_option("--out", cal->out, "where to save the spec (default: what --cluster local reads, " +
                                         local_cluster_path() + ")");
  cmd->add_option("--max-ranks", cal->max_ranks, "time the kernels of the candidate strategies on 1 .. this many ranks")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--kernel-ms", cal->kernel_ms,
                  "each kernel (and each side of a contention ratio) runs at least this long per timed batch, the "
                  "median of 3 batches kept: shorter is quicker and rougher")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--comm", cal->comm,
                  "the transport's cost model: quick (links by ping-pong, seconds), tune (every algorithm fitted, "
                  "minutes) or keep (the saved spec's)")
      ->check(CLI::IsMember({"quick", "tune", "keep"}))
      ->capture_default_str();
  cmd->add_flag("--fresh", cal->fresh, "start a new profile instead of adding to the saved one");
  flags->precision_flag = add_precision_option(*cmd, flags->precision);
  flags->job.run.threads = 2;  // train's default for a lone rank
  cmd->add_option("--threads", flags->job.run.threads, "kernel threads of a lone rank (in-process ranks use 1 each)")
      ->capture_default_str();
  cmd->callback([flags, cal] {
    apply(*flags);
    JobSpec& o = flags->job;
    if (o.strategy.mesh_ranks > 0) o.launch.ranks = o.strategy.mesh_ranks;
    validate_job(o);
    if (!launched_by_mpi()) return calibrate(o, *cal, std::nullopt);
    // Under mpirun: every rank helps measure the links; rank 0 alone then
    // times the kernels while the others wait without polling.
    comm::mpi::init(nullptr, nullptr, {.timeout = std::chrono::minutes(5)}, {.pmi_fd = launcher_pmi_fd()});
    comm::Communicator& world = comm::mpi::world();
    try {
      std::optional<HostLinks> links;
      if (world.size() > 1 && cal->comm != "keep")
        links = measure_host_links(world, cal->comm, [](const std::string& line) { std::cout << line << std::endl; });
      if (world.rank() == 0) calibrate(o, *cal, links, world.size());
    } catch (const Error& e) {
      // Every rank met it (the hosts' layout), or rank 0 alone: rank 0 says it once.
      if (world.rank() == 0) std::cerr << fmt::format("error: {}\n", e.what());
      else std::this_thread::sleep_for(std::chrono::seconds(1));
      comm::mpi::abort(1);
    }
    comm::mpi::wait_quietly_for_all();
    comm::mpi::finalize();
  });
}

}  // namespace px::cli
