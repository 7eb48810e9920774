#include "runtime/sync/train_sync.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <optional>
#include <thread>

#include <fmt/ranges.h>

#include "core/rng.h"
#include "parallel/row_split.h"
#include "runtime/fault/fault_injection.h"
#include "runtime/sync/coordinator.h"
#include "runtime/sync/lead_output.h"
#include "runtime/sync/protocol.h"
#include "runtime/sync/replica.h"
#include "runtime/train/resume.h"

namespace px {
namespace {

using sync::Replica;

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Views' tag sequences: a round or step uses up to kViewTags collectives.
constexpr uint32_t kViewTags = 4;
uint32_t view_sequence(int64_t index, uint32_t part = 0) {
  return static_cast<uint32_t>((index * kViewTags + part) & ((1u << 21) - 1));
}

// Gossip's partner of `rank` at step `step`: a random perfect matching of
// the ranks (one sits out when they are odd) every rank draws alike; -1: none.
int gossip_partner(uint64_t seed, int64_t step, int ranks, int rank) {
  std::vector<int> order(static_cast<size_t>(ranks));
  std::iota(order.begin(), order.end(), 0);
  uint64_t state = splitmix64(seed ^ splitmix64(static_cast<uint64_t>(step) * 7919 + 17));
  for (int i = ranks - 1; i > 0; --i) {
    state = splitmix64(state);
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(state % static_cast<uint64_t>(i + 1))]);
  }
  const auto at = static_cast<int>(std::find(order.begin(), order.end(), rank) - order.begin());
  const int pair = at ^ 1;
  return pair < ranks ? order[static_cast<size_t>(pair)] : -1;
}

// Where a rank sits: replica-major, so a replica's ranks are consecutive
// (under MPI they share a host when they fit on one); rank 0 is replica
// 0's first rank, the coordinator's.
struct Layout {
  int per_replica = 1;  // ranks of one replica (its pipeline stages x tensor-parallel ranks)
  int replicas = 1;
  int replica = 0;      // this rank's
  int local = 0;        // its rank within its replica

  Layout(int world, int rank, int per_replica)
      : per_replica(per_replica), replicas(world / per_replica), replica(rank / per_replica),
        local(rank % per_replica) {}
  // The ranks of like place (this one's local rank) in `members` (replicas).
  std::vector<int> like_ranks(const std::vector<int>& members) const {
    std::vector<int> ranks;
    for (const int m : members) ranks.push_back(m * per_replica + local);
    return ranks;
  }
};

// One synchronized-replicas job as every rank sees it once set up.
struct Job {
  const nn::ModelConfig& model;
  const DataOptions& data;
  const OptimizerOptions& optimizer;
  const SyncOptions& sync;
  const CheckpointOptions& checkpoint;
  const FaultOptions& fault;
  const RunOptions& run;
  comm::Communicator& world;
  comm::Communicator& control;    // partial reduce: replicas' first ranks <-> coordinator
  comm::Communicator& averaging;  // views of each round's members
  comm::Communicator& replica_ranks;  // this replica's
  Layout layout;
  Task& task;
  Replica& replica;
  parallel::RowSplit split;     // of a global batch over the replicas
  std::vector<double> weights;  // per replica: its rows of a full global batch
  int64_t start = 0, end = 0, total = 0;
  bool resumed = false;
  int attempt = 0;  // a restart's (> 0) injects no fault
  sync::LeadOutput& out;
  FlightRecorder& recorder;
};

// One rank's step: its batch, forward, backward and update. `steps` is its
// own count of steps done, `global_step` the job's (the lr's index).
struct StepTaken {
  sync::ReplicaStep step;
  double seconds = 0;
};
StepTaken take_step(const Job& job, int64_t steps, int64_t global_step) {
  const int rank = job.world.rank();
  job.recorder.at(steps + 1, -1, "");  // between steps, for the doctor
  if (rank == job.fault.inject_fault.rank && steps + 1 == job.fault.inject_fault.step && job.attempt == 0)
    inject_fault_now(job.fault.inject_fault, job.world.transport().name() == "mpi", job.fault.run_dir, &job.recorder,
                     &job.world);
  const DataBatch batch = job.task.next_batch(job.split, job.layout.replica);
  const auto began = std::chrono::steady_clock::now();
  // A straggler for demonstrations (--inject-delay): its step takes longer, as on a slower host.
  if (rank == job.fault.inject_delay_rank)
    std::this_thread::sleep_for(std::chrono::milliseconds(job.fault.inject_delay_ms));
  const uint64_t seed = splitmix64(job.run.seed ^ splitmix64(static_cast<uint64_t>(steps) * 1024));
  const int64_t row_offset = job.split.rows_of(batch.global_rows, job.layout.replica).begin;
  const sync::ReplicaStep step =
      job.replica.step(batch, seed, row_offset, job.optimizer.schedule.at(std::min(global_step, job.total - 1)),
                       job.optimizer.grad_clip);
  if (!std::isfinite(step.loss))
    fail("training diverged at rank {}'s step {}: loss is {} (lower the learning rate {})", rank, steps + 1,
         step.loss, job.optimizer.schedule.lr);
  return {.step = step, .seconds = seconds_since(began)};
}

double weight_of(const Job& job, const std::vector<int>& members) {
  double total = 0;
  for (const int r : members) total += job.weights[static_cast<size_t>(r)];
  return total;
}

// Gossip's average, rows-weighted: this rank with its like in each member replica.
void average(const Job& job, const std::vector<int>& members, uint32_t sequence, bool state) {
  comm::Communicator group = job.averaging.view(job.layout.like_ranks(members), sequence);
  job.replica.average(group, job.weights[static_cast<size_t>(job.layout.replica)], weight_of(job, members), state);
}

// Every rank of replica 0, every replica holding one model: rank 0
// evaluates it (the others give their parts).
std::optional<Evaluation> evaluate(const Job& job, int64_t at_step) {
  const ParamStore params = job.replica.whole_parameters();
  if (job.world.rank() != 0) return std::nullopt;
  const Evaluation e = job.task.evaluate(params).mean();
  const EvaluationReport report = report_evaluation(e, at_step);
  job.out.write(report.line);
  job.out.say(report.text);
  return e;
}

// Every rank of replica 0, every replica holding one model and optimizer
// state: each writes its runs, rank 0 the whole model and the run's state.
void save(const Job& job, int64_t at_step) {
  const ParamStore params = job.replica.whole_parameters();
  CheckpointPart part = job.replica.checkpoint_part();
  if (job.world.rank() == 0) {
    part.state = run_state(job.model, job.data, job.optimizer.update.kind, job.task, at_step,
                           job.replica.optimizer_steps(), job.world.size());
    part.state.saved_at = unix_seconds();
    part.state.mesh = fmt::format("{} replicas of {}", job.layout.replicas, job.replica.strategy().mesh.str());
    for (const auto& [name, t] : params.named()) part.model.emplace_back(name, t.clone());
  }
  save_checkpoint(job.checkpoint.save, job.layout.per_replica > 1 ? &job.replica_ranks : nullptr, std::move(part));
}

// Partial reduce: step; a replica's first rank reports to the coordinator
// and tells its other ranks the round; all average with their like in the
// round's members.
void run_partial_reduce(const Job& job) {
  const bool first = job.layout.local == 0;
  const bool replica0 = job.layout.replica == 0;
  int64_t steps = job.start, global_step = job.start;
  double wait_s = 0;
  for (;;) {
    const StepTaken taken = take_step(job, steps, global_step);
    ++steps;
    const auto reported = std::chrono::steady_clock::now();
    sync::RoundMessage round;
    if (first) {
      sync::ReadyMessage ready{.kind = sync::ReadyMessage::kReady, .steps = steps, .rows = taken.step.rows,
                               .compute_s = taken.seconds, .wait_s = wait_s, .loss = taken.step.loss};
      comm::Request requests[] = {job.control.irecv(0, sync::kRoundTag, &round, sizeof(round)),
                                  job.control.isend(0, sync::kReadyTag, &ready, sizeof(ready))};
      job.control.wait_all(requests, {"partial reduce: the coordinator's round", static_cast<int>(steps)});
    }
    if (job.layout.per_replica > 1)
      comm::broadcast(job.replica_ranks, comm::Buffer(&round, sizeof(round), DType::u8), 0);
    global_step = round.global_step;
    comm::Communicator group =
        job.averaging.view(job.layout.like_ranks(sync::members_of(round.members)), view_sequence(round.index));
    job.replica.average(group, round.weight, round.total, round.flags & sync::RoundMessage::kFull);
    if (replica0 && (round.flags & sync::RoundMessage::kEvaluate)) evaluate(job, global_step);
    if (replica0 && (round.flags & sync::RoundMessage::kSave) && !job.checkpoint.save.empty()) save(job, global_step);
    wait_s = seconds_since(reported);
    if (round.flags & sync::RoundMessage::kStop) return;
  }
}

// Gossip: step, average with this step's partner replica; every replica
// at once at evaluations, saves and the end.
std::vector<double> run_gossip(const Job& job) {
  const int replicas = job.layout.replicas, replica = job.layout.replica;
  std::vector<int> everyone(static_cast<size_t>(replicas));
  std::iota(everyone.begin(), everyone.end(), 0);
  std::vector<double> losses;
  for (int64_t steps = job.start; steps < job.end;) {
    const StepTaken taken = take_step(job, steps, steps);
    ++steps;
    const int partner = gossip_partner(job.run.seed, steps, replicas, replica);
    if (partner >= 0) average(job, {std::min(replica, partner), std::max(replica, partner)}, view_sequence(steps), false);
    const bool last = steps == job.end;
    const bool evaluate_now = job.run.eval_every > 0 && steps % job.run.eval_every == 0 && !last;
    const bool save_now = job.checkpoint.save_every > 0 && steps % job.checkpoint.save_every == 0 && !last;
    if (evaluate_now || save_now || last) average(job, everyone, view_sequence(steps, 2), save_now || last);
    if (replica != 0) continue;
    if (job.world.rank() == 0) {
      losses.push_back(taken.step.loss);
      job.out.write({{"step", steps}, {"train_loss", taken.step.loss}, {"partner", partner}});
      job.out.progress(steps, taken.step.loss, job.data.batch * job.task.units_per_row());
    }
    if (evaluate_now) evaluate(job, steps);
    if (save_now && !job.checkpoint.save.empty()) save(job, steps);
  }
  return losses;
}

// A rank other than 0 that dies in process under partial reduce tells the
// coordinator and ends quietly: the others go on without it.
void leave(const Job& job, int64_t steps, const std::string& reason) {
  sync::ReadyMessage message{.kind = sync::ReadyMessage::kLeave, .steps = steps};
  std::strncpy(message.reason, reason.c_str(), sizeof(message.reason) - 1);
  comm::Request request = job.control.isend(0, sync::kReadyTag, &message, sizeof(message));
  job.control.wait(request, {"partial reduce: leaving", static_cast<int>(steps)});
  job.recorder.set_error(fmt::format("left partial reduce: {}", reason));
  job.recorder.set_phase(RankPhase::failed);  // not silent: the watchdog lets it go
}

void log_job(const Job& job, int64_t parameters, Precision precision, std::ostream& log) {
  const SyncOptions& s = job.sync;
  const Layout& l = job.layout;
  log << fmt::format(
      "model {} with {} parameters; {} steps of global batch {}; {} replicas ({}){}{}, {}; threads {}; precision {}\n",
      job.model.kind, parameters, job.total, job.data.batch, l.replicas, job.world.backend(),
      l.per_replica > 1 ? fmt::format(" of {} ranks each (mesh {})", l.per_replica, job.replica.strategy().mesh.str())
                        : "",
      job.split.shares.empty() ? "" : fmt::format(", rows {}", fmt::join(job.split.shares, ":")),
      s.mode == "gossip"
          ? std::string("gossip (a random partner every step)")
          : fmt::format("partial reduce (groups of at least {}, staleness {}{})", s.min_group, s.staleness,
                        s.full_every > 0 ? fmt::format(", all every {} steps", s.full_every) : ""),
      job.run.threads, precision_name(precision));
}

int ranks_per_replica(const parallel::StrategyRequest& strategy) {
  return strategy.pipeline_parallel * strategy.tensor_parallel;
}

}  // namespace

SyncResult train_synced(const nn::ModelConfig& model_config, const DataOptions& data_options,
                        const parallel::StrategyRequest& strategy, const OptimizerOptions& optimizer_options,
                        const SyncOptions& sync, const CheckpointOptions& checkpoint, const FaultOptions& fault,
                        const RunOptions& run, int attempt, comm::Communicator& world, std::ostream& log,
                        FlightRecorder& recorder) {
  const Layout layout(world.size(), world.rank(), ranks_per_replica(strategy));
  // Private tag spaces: the coordinator's fixed tags (between the
  // replicas' first ranks), the averaging views' sequences and each
  // replica's own collectives never meet another user's.
  comm::Communicator control = world.split(layout.local == 0 ? 0 : 1, world.rank());
  comm::Communicator averaging = world.split(0, world.rank());
  comm::Communicator replica_ranks = world.split(layout.replica, layout.local);
  const ResumePoint resume(checkpoint.resume, checkpoint.resume_if_saved, nullptr, nullptr);
  // A resumed run trains the checkpoint's model on its data.
  WholeModelStart run_start = start_whole_model(resume, model_config, data_options, strategy.precision,
                                                optimizer_options, run, checkpoint.resume, log);
  const nn::ModelConfig& model = run_start.model;
  const DataOptions& data = run_start.data;
  const OptimizerOptions& optimizer = run_start.optimizer;
  Task* task = run_start.task.get();
  const int64_t total = run_start.total, start = run_start.start;
  const Checkpoint* resumed = resume.checkpoint();
  const parallel::RowSplit split{.world = layout.replicas, .shares = strategy.row_shares};
  std::vector<double> weights;
  for (int r = 0; r < layout.replicas; ++r)
    weights.push_back(static_cast<double>(split.rows_of(data.batch, r).size()));
  Replica replica(*task, strategy, optimizer, split.rows_of(data.batch, layout.replica).size(), replica_ranks,
                  run_start.params, resumed);
  const bool lead = world.rank() == 0;
  // A run directory keeps the metrics (`parallax report` draws them,
  // `parallax doctor` lists the stragglers named in them).
  std::string metrics = run.metrics;
  if (metrics.empty() && !fault.run_dir.empty()) {
    metrics = fault.run_dir + "/metrics.jsonl";
    if (lead) std::filesystem::create_directories(fault.run_dir);
  }
  sync::LeadOutput out(lead ? metrics : std::string(), resumed != nullptr || attempt > 0, total, start, task->unit(),
                       run.progress_bar, log);
  const Job job{.model = model, .data = data, .optimizer = optimizer, .sync = sync, .checkpoint = checkpoint,
                .fault = fault, .run = run, .world = world, .control = control, .averaging = averaging,
                .replica_ranks = replica_ranks, .layout = layout, .task = *task, .replica = replica,
                .split = split, .weights = weights, .start = start,
                .end = run.stop_after > 0 ? std::min(run.stop_after, total) : total, .total = total,
                .resumed = resumed != nullptr, .attempt = attempt, .out = out, .recorder = recorder};
  log_job(job, run_start.params.count(), strategy.precision, log);
  recorder.set_phase(RankPhase::running);

  SyncResult result;
  result.sync.mode = sync.mode;
  if (sync.mode == "gossip") {
    result.run.losses = run_gossip(job);
  } else {
    std::optional<sync::Coordinator> coordinator;
    if (lead)
      coordinator.emplace(control,
                          sync::SchedulerConfig{.ranks = layout.replicas, .min_group = sync.min_group,
                                                .staleness = sync.staleness, .batch_rows = data.batch,
                                                .start_step = start, .end_step = job.end,
                                                .full_every = sync.full_every, .eval_every = run.eval_every,
                                                .save_every = checkpoint.save_every},
                          run.straggler_threshold, task->units_per_row(),
                          layout.per_replica > 1 ? "replica" : "rank", out);
    try {
      run_partial_reduce(job);
    } catch (const RankStopped&) {
      // The coordinator's rank, or a rank of a replica of several (its
      // other ranks cannot go on without it): the job ends, a restart
      // resumes it.
      if (lead || layout.per_replica > 1) throw;
      leave(job, fault.inject_fault.step - 1,
            fmt::format("{} at its step {} (--inject-fault)", fault.inject_fault.mode, fault.inject_fault.step));
      throw;
    }
    if (coordinator) {
      sync::CoordinatorReport report = coordinator->finish();
      result.run.losses = std::move(report.losses);
      result.sync.rounds = report.rounds;
      result.sync.mean_group = report.mean_group;
      result.sync.max_staleness = report.max_staleness;
      result.sync.stragglers = std::move(report.stragglers);
      result.sync.left = std::move(report.left);
    }
  }
  out.finish();
  result.run.steps = job.end;
  result.run.first_step = start;
  result.run.seconds = out.elapsed_seconds();
  if (!result.run.losses.empty()) result.run.last_train_loss = result.run.losses.back();
  if (layout.replica != 0) return result;
  if (std::optional<Evaluation> e = evaluate(job, job.end)) result.run.evaluation = *e;
  if (!checkpoint.save.empty()) save(job, job.end);
  if (!lead) return result;
  if (!checkpoint.save.empty()) log << fmt::format("saved checkpoint to '{}'\n", checkpoint.save);
  log << fmt::format("trained {} steps in {:.1f} s ({})", job.end - start, result.run.seconds, sync.mode);
  if (sync.mode == "partial-reduce")
    log << fmt::format(": {} rounds, {:.2f} replicas per round, largest staleness {}", result.sync.rounds,
                       result.sync.mean_group, result.sync.max_staleness);
  log << "\n";
  const char* who = layout.per_replica > 1 ? "replica" : "rank";
  for (const auto& [r, s] : result.sync.stragglers.items())
    log << fmt::format("  {} {}: {} steps, compute {:.2f} s, waiting {:.2f} s, straggler score {:.2f}{}\n", who, r,
                       s["steps"].get<int64_t>(), s["compute_s"].get<double>(), s["wait_s"].get<double>(),
                       s["score"].get<double>(), s["straggling"].get<bool>() ? " (straggling)" : "");
  for (const std::string& left : result.sync.left) log << fmt::format("  left: {}\n", left);
  return result;
}

}  // namespace px
