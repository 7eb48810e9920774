// px_bench_dp_step: times full data-parallel GPT training steps (forward,
// backward, gradient reduction, AdamW) the way ../shared/peers/torch/ddp.py
// times PyTorch DDP's, and prints one JSON line with the peer's keys
// (median_ms, tokens_per_s, ...). The step is the trainer's own: the
// data-parallel Program of the rank run by a ProgramExecutor (forward,
// backward, bucketed gradient reduction, AdamW update).
//
//   px_bench_dp_step --config A|B [--ranks 1] [--warmup 3] [--steps 20]
//                    [--max-steps 200] [--max-time 360] [--no-overlap]
//                    [--bucket-mb 2] [--seed 0] [--json FILE]
//   mpirun -np N px_bench_dp_step --config A|B ...   (ranks = MPI processes)
//
// --ranks N runs N in-process ranks (threads), each computing on one kernel
// thread beside its communication engine's progress thread; under mpirun each
// MPI process is one rank with one kernel thread. The global batch is the
// config's (gpt-mini 16, gpt-small 8), so every rank count does the same work
// per step and tokens_per_s compares throughput directly.
//
// As the peer: AdamW lr 3e-4, weight decay 0.01 on every parameter, no
// clipping, 32 random global batches cycled, each rank taking its rows. A
// step's time is the slowest rank's; after each step (untimed) the ranks
// combine their CPU time and run delay into one clean/dirty verdict
// (contention.h; in-process rank 0 meters the whole process, under MPI every
// process meters itself; at more than one rank only foreign CPU counts, see
// the loop), rank 0 decides whether to go on, and after a dirty step waits
// for a quiet machine while the others sleep.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "comm/backends.h"
#include "comm/collectives.h"
#include "contention.h"
#include "gpt_bench.h"
#include "kernels/threads.h"
#include "parallel/row_split.h"
#include "runtime/executor/program_executor.h"
#include "runtime/optimizer/optimizer.h"
#include "runtime/state/param_store.h"

namespace {

px::parallel::ExecutionOptions overlap_options(bool overlap) {
  px::parallel::ExecutionOptions options;
  options.overlap = overlap;
  return options;
}

using namespace px::bench;
namespace comm = px::comm;

struct Args {
  std::string config;
  int ranks = 1;
  int warmup = 3;
  int steps = 20;
  int max_steps = 200;
  double max_time = 360;
  bool overlap = true;
  double bucket_mb = double(px::parallel::kDefaultBucketBytes) / (1 << 20);  // the trainer's default
  uint64_t seed = 0;
  std::string json;
};

[[noreturn]] void usage(int code) {
  std::fprintf(code ? stderr : stdout,
               "usage: px_bench_dp_step --config A|B [--ranks 1] [--warmup 3] [--steps 20] [--max-steps 200]\n"
               "                        [--max-time 360] [--no-overlap] [--bucket-mb 0.25] [--seed 0] [--json FILE]\n"
               "       mpirun -np N px_bench_dp_step --config A|B ...   (one rank per MPI process)\n");
  std::exit(code);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "--help" || k == "-h") usage(0);
    if (k == "--no-overlap") {
      a.overlap = false;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "error: %s needs a value\n", k.c_str());
      usage(2);
    }
    std::string v = argv[++i];
    try {
      if (k == "--config") a.config = v;
      else if (k == "--ranks") a.ranks = std::stoi(v);
      else if (k == "--warmup") a.warmup = std::stoi(v);
      else if (k == "--steps") a.steps = std::stoi(v);
      else if (k == "--max-steps") a.max_steps = std::stoi(v);
      else if (k == "--max-time") a.max_time = std::stod(v);
      else if (k == "--bucket-mb") a.bucket_mb = std::stod(v);
      else if (k == "--seed") a.seed = std::stoull(v);
      else if (k == "--json") a.json = v;
      else {
        std::fprintf(stderr, "error: unknown option %s\n", k.c_str());
        usage(2);
      }
    } catch (const std::exception&) {
      std::fprintf(stderr, "error: %s '%s' is not a number\n", k.c_str(), v.c_str());
      std::exit(2);
    }
  }
  if (a.config.empty()) {
    std::fprintf(stderr, "error: --config is required\n");
    usage(2);
  }
  if (a.ranks < 1 || a.steps < 1 || a.warmup < 0 || a.bucket_mb < 0) {
    std::fprintf(stderr, "error: --ranks and --steps must be >= 1, --warmup and --bucket-mb >= 0\n");
    std::exit(2);
  }
  return a;
}

bool launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr;
}

// One step as the ranks agree on it: times are the slowest rank's, CPU time
// and run delay summed over the processes that metered.
struct StepTotals {
  double wall_s = 0;
  double own_ns = 0, machine_ns = 0, run_delay_ns = 0;
};

StepTotals combine(comm::Communicator* group, double wall_s, const Meter* meter) {
  // float32 is the collectives' reduction type: ns deltas of one step keep
  // 7 significant digits, plenty for a percentage.
  std::vector<float> slowest{float(wall_s)};
  std::vector<float> sums{meter ? float(meter->own_ns) : 0.f, meter ? float(meter->machine_ns) : 0.f,
                          meter ? float(meter->run_delay_ns) : 0.f};
  if (group && group->rank() != 0) sums[1] = 0;  // the machine counter is one for all processes
  if (group) {
    comm::allreduce(*group, std::span<float>(slowest), comm::Reduction::max);
    comm::allreduce(*group, std::span<float>(sums), comm::Reduction::sum);
  }
  return {slowest[0], sums[0], sums[1], sums[2]};
}

// Rank 0's `decision` for everyone. The others wait polling with sleeps, not
// in a spinning collective, so that rank 0's settle() sees a quiet machine.
int share_decision(comm::Communicator* group, int decision) {
  if (!group || group->size() == 1) return decision;
  const uint32_t tag = group->next_tag();
  if (group->rank() == 0) {
    for (int peer = 1; peer < group->size(); ++peer) {
      comm::Request send = group->isend(peer, tag, &decision, sizeof decision);
      group->wait(send, {"share_decision", 0});
    }
    return decision;
  }
  comm::Request recv = group->irecv(0, tag, &decision, sizeof decision);
  while (!group->transport().test(recv)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  recv.done = true;
  return decision;
}

// One rank's run; the JSON result on rank 0 (empty elsewhere). `meters` says
// whether this rank meters its process (contention.h).
nlohmann::json run_rank(const Args& args, comm::Communicator* group, bool meters) {
  const int rank = group ? group->rank() : 0, world = group ? group->size() : 1;
  const BenchConfig cfg = config_named(args.config);
  const int64_t B = cfg.batch, T = cfg.gpt.block;
  const double rss_start = rss_now_mib();

  px::nn::Model model = px::nn::build_gpt(cfg.gpt, B, T, /*training=*/true);
  // Every parameter decays, like torch.optim.AdamW(model.parameters()).
  px::ParamStore params = px::ParamStore::initialize(model.graph, args.seed);  // same on every rank
  const int64_t n_params = params.count();
  px::ProgramExecutor runner(
      bench_program(model, world, rank, static_cast<int64_t>(args.bucket_mb * (1 << 20)), /*decay_all=*/true), px::AxisGroups{.axis = {group}},
      {.kind = "adamw", .weight_decay = 0.01}, overlap_options(args.overlap));
  runner.set_parameters(params);
  const px::parallel::RowRange mine = px::parallel::shard_rows(B, rank, world);
  std::vector<px::DataBatch> batches;  // this rank's rows of each global batch
  for (auto& [x, y] : random_token_batches(cfg))
    batches.push_back({x.slice_rows(mine.begin, mine.end), y.slice_rows(mine.begin, mine.end)});
  const double rss_build = rss_now_mib();

  StepSeries steps(args.steps, args.max_steps, args.max_time);
  std::vector<double> losses;
  int64_t peak_tensor_bytes = 0;
  double paused_s = 0, t_begin = -1, self_delay = 1e30;
  Meter meter;
  if (rank == 0) settle();
  share_decision(group, 0);
  for (int i = 0;; ++i) {
    if (group) comm::barrier(*group);
    if (meters) meter.start();
    const double t0 = now_s();
    px::StepResult out = runner.run({.feeds = px::feeds_of(model, batches[static_cast<size_t>(i) % batches.size()]),
                                     .seed = args.seed + static_cast<uint64_t>(i),
                                     .step = static_cast<uint64_t>(i),
                                     .lr = 3e-4});
    const double t1 = now_s();
    if (meters) meter.stop();
    losses.push_back(out.loss);
    peak_tensor_bytes = std::max(peak_tensor_bytes, out.peak_bytes);
    const StepTotals s = combine(group, t1 - t0, meters ? &meter : nullptr);
    const double foreign = foreign_frac(s.wall_s, s.own_ns, s.machine_ns);
    const double run_delay = s.run_delay_ns / (s.wall_s * 1e9);
    int stop = 0;
    if (i < args.warmup) {
      self_delay = std::min(self_delay, run_delay);
    } else {
      if (t_begin < 0) t_begin = t0;
      if (args.warmup == 0) self_delay = 0;
      // One kernel thread per rank: the ranks use every core at 2 ranks.
      // Run delay judges only single-rank runs: beside each rank's compute
      // thread its engine's progress thread polls with sched_yield while a
      // collective waits, so its runnable-but-waiting time is the ranks' own
      // and varies 15-60% of a step with no foreign load at all (measured
      // under mpirun -np 2); foreign CPU still shows in the cgroup counter.
      const bool delay_ok = world > 1 || run_delay < self_delay + kCleanDelay;
      const bool ok = foreign < clean_limit(world) && delay_ok;
      steps.add({s.wall_s, foreign, run_delay, ok});
      if (rank == 0) {
        if (!ok) paused_s += settle();
        stop = steps.done(now_s() - t_begin, paused_s);
      }
    }
    if (share_decision(group, stop)) break;
  }

  float peak_rss = static_cast<float>(peak_rss_mib());
  if (group) comm::allreduce(*group, std::span<float>(&peak_rss, 1), comm::Reduction::max);
  if (rank != 0) return {};
  const double med_s = steps.median_of(&TimedStep::step_s);
  const double flops = flops_per_step(cfg, n_params);
  nlohmann::json res{
      {"bench", "dp_step"}, {"system", "parallax"}, {"config", args.config}, {"name", cfg.name},
      {"vocab", cfg.gpt.vocab}, {"block", cfg.gpt.block}, {"n_layer", cfg.gpt.n_layer},
      {"n_head", cfg.gpt.n_head}, {"n_embd", cfg.gpt.n_embd}, {"global_batch", B},
      {"local_batch", mine.size()}, {"world", world}, {"threads_per_rank", 1},
      {"backend", group ? std::string(group->backend()) : std::string("none")}, {"overlap", args.overlap},
      {"bucket_mb", args.bucket_mb}, {"grad_bytes", n_params * 4}, {"warmup", args.warmup}, {"steps", args.steps},
      {"paused_s_rank0", paused_s}, {"self_run_delay", self_delay}, {"weight_decay", 0.01}, {"params", n_params},
      {"tokens_per_s", double(B * T) / med_s}, {"approx_gflop_per_step", flops / 1e9},
      {"achieved_gflops", flops / med_s / 1e9}, {"loss_first", losses.front()}, {"loss_last", losses.back()},
      {"rss_start_mib", rss_start}, {"rss_after_build_mib", rss_build}, {"peak_rss_mib_max_rank", peak_rss},
      // In-process ranks share one process: its peak RSS holds every rank.
      {"peak_rss_of", group && group->backend() == "inproc" ? "the process (all ranks)" : "one rank"},
      {"peak_tensor_mib", double(peak_tensor_bytes) / (1 << 20)}, {"blas_libs", blas_in_use()}};
  res.update(steps.summary());
  return res;
}

void report(const Args& args, const nlohmann::json& res) {
  std::cout << res.dump() << std::endl;
  std::fprintf(stderr,
               "[px_bench_dp_step] config %s (%s) %d rank(s) (%s%s) median %.1f ms/step, %.0f tok/s, loss %.3f->%.3f, "
               "peak RSS of %s %.0f MiB, clean steps %d/%d (median all %.1f)\n",
               args.config.c_str(), res["name"].get<std::string>().c_str(), res["world"].get<int>(),
               res["backend"].get<std::string>().c_str(), args.overlap ? "" : ", no overlap",
               res["median_ms"].get<double>(), res["tokens_per_s"].get<double>(),
               res["loss_first"].get<double>(), res["loss_last"].get<double>(),
               res["peak_rss_of"].get<std::string>().c_str(), res["peak_rss_mib_max_rank"].get<double>(), res["clean_steps"].get<int>(),
               res["timed_steps"].get<int>(), res["median_all_ms"].get<double>());
  if (!args.json.empty()) std::ofstream(args.json, std::ios::app) << res.dump() << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  px::kernels::set_threads(1);  // one kernel thread per rank, like the peer's 1 intra-op thread
  try {
    if (launched_by_mpirun()) {
      if (!comm::mpi::available()) throw px::Error("launched by mpirun but built without MPI (libopenmpi-dev)");
      if (args.ranks != 1) throw px::Error("--ranks starts in-process ranks; under mpirun give -np to mpirun");
      comm::mpi::init(&argc, &argv);
      comm::Communicator& world = comm::mpi::world();
      nlohmann::json res = run_rank(args, world.size() > 1 ? &world : nullptr, /*meters=*/true);
      if (world.rank() == 0) report(args, res);
      comm::mpi::finalize();
      return 0;
    }
    if (args.ranks == 1) {
      report(args, run_rank(args, nullptr, true));
      return 0;
    }
    nlohmann::json res;
    comm::run_inproc(args.ranks, [&](comm::Communicator& world) {
      nlohmann::json mine = run_rank(args, &world, /*meters=*/world.rank() == 0);
      if (world.rank() == 0) res = std::move(mine);
    });
    report(args, res);
  } catch (const px::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
