#include "runtime/sync/train_sync.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
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
  comm::Communicator& control;    // partial reduce: replicas <-> coordinator
  comm::Communicator& averaging;  // views of each round's members
  Task& task;
  Replica& replica;
  parallel::RowSplit split;
  std::vector<double> weights;  // per rank: its rows of a full global batch
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
  const DataBatch batch = job.task.next_batch(job.split, rank);
  const auto began = std::chrono::steady_clock::now();
  // A straggler for demonstrations (--inject-delay): its step takes longer, as on a slower host.
  if (rank == job.fault.inject_delay_rank)
    std::this_thread::sleep_for(std::chrono::milliseconds(job.fault.inject_delay_ms));
  const uint64_t seed = splitmix64(job.run.seed ^ splitmix64(static_cast<uint64_t>(steps) * 1024));
  const int64_t row_offset = job.split.rows_of(batch.global_rows, rank).begin;
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

// Rank 0, every replica holding one model: evaluates it.
Evaluation evaluate(const Job& job, int64_t at_step) {
  const Evaluation e = job.task.evaluate(job.replica.params()).mean();
  const EvaluationReport report = report_evaluation(e, at_step);
  job.out.write(report.line);
  job.out.say(report.text);
  return e;
}

// Rank 0, every replica holding one model and optimizer state: saves it.
void save(const Job& job, int64_t at_step) {
  CheckpointState state = run_state(job.model, job.data, job.optimizer.update.kind, job.task, at_step,
                                    job.replica.optimizer_steps(), job.world.size());
  state.saved_at = unix_seconds();
  NamedTensors model;
  for (const auto& [name, t] : job.replica.params().named()) model.emplace_back(name, t.clone());
  save_checkpoint(job.checkpoint.save, nullptr,
                  {.shards = job.replica.state_runs(), .model = std::move(model), .state = state});
}

// Partial reduce: step, report, join the coordinator's round, average.
// Returns rank 0's per-round losses (the coordinator's) via the report.
void run_partial_reduce(const Job& job) {
  const int rank = job.world.rank();
  int64_t steps = job.start, global_step = job.start;
  double wait_s = 0;
  for (;;) {
    const StepTaken taken = take_step(job, steps, global_step);
    ++steps;
    const auto reported = std::chrono::steady_clock::now();
    sync::ReadyMessage ready{.kind = sync::ReadyMessage::kReady, .steps = steps, .rows = taken.step.rows,
                             .compute_s = taken.seconds, .wait_s = wait_s, .loss = taken.step.loss};
    sync::RoundMessage round;
    comm::Request requests[] = {job.control.irecv(0, sync::kRoundTag, &round, sizeof(round)),
                                job.control.isend(0, sync::kReadyTag, &ready, sizeof(ready))};
    job.control.wait_all(requests, {"partial reduce: the coordinator's round", static_cast<int>(steps)});
    global_step = round.global_step;
    const std::vector<int> members = sync::members_of(round.members);
    comm::Communicator group = job.averaging.view(members, view_sequence(round.index));
    const bool full = round.flags & sync::RoundMessage::kFull;
    job.replica.average(group, job.weights[static_cast<size_t>(rank)], weight_of(job, members), full);
    if (rank == 0 && (round.flags & sync::RoundMessage::kEvaluate)) evaluate(job, global_step);
    if (rank == 0 && (round.flags & sync::RoundMessage::kSave) && !job.checkpoint.save.empty())
      save(job, global_step);
    wait_s = seconds_since(reported);
    if (round.flags & sync::RoundMessage::kStop) return;
  }
}

// Gossip: step, average with this step's partner; every replica at once
// at evaluations, saves and the end.
std::vector<double> run_gossip(const Job& job) {
  const int rank = job.world.rank(), ranks = job.world.size();
  std::vector<int> everyone(static_cast<size_t>(ranks));
  std::iota(everyone.begin(), everyone.end(), 0);
  std::vector<double> losses;
  for (int64_t steps = job.start; steps < job.end;) {
    const StepTaken taken = take_step(job, steps, steps);
    ++steps;
    const int partner = gossip_partner(job.run.seed, steps, ranks, rank);
    if (partner >= 0) {
      const std::vector<int> pair{std::min(rank, partner), std::max(rank, partner)};
      comm::Communicator group = job.averaging.view(pair, view_sequence(steps));
      job.replica.average(group, job.weights[static_cast<size_t>(rank)], weight_of(job, pair), false);
    }
    const bool last = steps == job.end;
    const bool evaluate_now = job.run.eval_every > 0 && steps % job.run.eval_every == 0 && !last;
    const bool save_now = job.checkpoint.save_every > 0 && steps % job.checkpoint.save_every == 0 && !last;
    if (evaluate_now || save_now || last) {
      comm::Communicator all = job.averaging.view(everyone, view_sequence(steps, 2));
      job.replica.average(all, job.weights[static_cast<size_t>(rank)], weight_of(job, everyone), save_now || last);
    }
    if (rank != 0) continue;
    losses.push_back(taken.step.loss);
    job.out.write({{"step", steps}, {"train_loss", taken.step.loss}, {"partner", partner}});
    job.out.progress(steps, taken.step.loss, taken.step.rows * ranks * job.task.units_per_row());
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

void log_job(const Job& job, Precision precision, std::ostream& log) {
  const SyncOptions& s = job.sync;
  log << fmt::format(
      "model {} with {} parameters; {} steps of global batch {}; {} replicas ({}){}, {}; threads {}; precision {}\n",
      job.model.kind, job.replica.params().count(), job.total, job.data.batch, job.world.size(), job.world.backend(),
      job.split.shares.empty() ? "" : fmt::format(", rows {}", fmt::join(job.split.shares, ":")),
      s.mode == "gossip"
          ? std::string("gossip (a random partner every step)")
          : fmt::format("partial reduce (groups of at least {}, staleness {}{})", s.min_group, s.staleness,
                        s.full_every > 0 ? fmt::format(", all every {} steps", s.full_every) : ""),
      job.run.threads, precision_name(precision));
}

}  // namespace

SyncResult train_synced(const nn::ModelConfig& model_config, const DataOptions& data_options, Precision precision,
                        const std::vector<int64_t>& row_shares, const OptimizerOptions& optimizer_options,
                        const SyncOptions& sync, const CheckpointOptions& checkpoint, const FaultOptions& fault,
                        const RunOptions& run, int attempt, comm::Communicator& world, std::ostream& log,
                        FlightRecorder& recorder) {
  // Private tag spaces: the coordinator's fixed tags, and the averaging
  // views' sequences, never meet another user's.
  comm::Communicator control = world.split(0, world.rank());
  comm::Communicator averaging = world.split(0, world.rank());
  const ResumePoint resume(checkpoint.resume, checkpoint.resume_if_saved, nullptr, nullptr);
  // A resumed run trains the checkpoint's model on its data.
  WholeModelStart run_start = start_whole_model(resume, model_config, data_options, precision, optimizer_options, run,
                                                checkpoint.resume, log);
  const nn::ModelConfig& model = run_start.model;
  const DataOptions& data = run_start.data;
  const OptimizerOptions& optimizer = run_start.optimizer;
  Task* task = run_start.task.get();
  const int64_t total = run_start.total, start = run_start.start;
  const Checkpoint* resumed = resume.checkpoint();
  Replica replica(*task, run_start.params, optimizer.update, precision, resumed);
  const parallel::RowSplit split{.world = world.size(), .shares = row_shares};
  std::vector<double> weights;
  for (int r = 0; r < world.size(); ++r)
    weights.push_back(static_cast<double>(split.rows_of(data.batch, r).size()));
  const bool lead = world.rank() == 0;
  sync::LeadOutput out(lead ? run.metrics : std::string(), resumed != nullptr, total, start, task->unit(),
                       run.progress_bar, log);
  const Job job{.model = model, .data = data, .optimizer = optimizer, .sync = sync, .checkpoint = checkpoint,
                .fault = fault, .run = run, .world = world, .control = control, .averaging = averaging,
                .task = *task, .replica = replica, .split = split, .weights = weights, .start = start,
                .end = run.stop_after > 0 ? std::min(run.stop_after, total) : total, .total = total,
                .resumed = resumed != nullptr, .attempt = attempt, .out = out, .recorder = recorder};
  log_job(job, precision, log);
  recorder.set_phase(RankPhase::running);

  SyncResult result;
  result.sync.mode = sync.mode;
  if (sync.mode == "gossip") {
    result.run.losses = run_gossip(job);
  } else {
    std::optional<sync::Coordinator> coordinator;
    if (lead)
      coordinator.emplace(control,
                          sync::SchedulerConfig{.ranks = world.size(), .min_group = sync.min_group,
                                                .staleness = sync.staleness, .batch_rows = data.batch,
                                                .start_step = start, .end_step = job.end,
                                                .full_every = sync.full_every, .eval_every = run.eval_every,
                                                .save_every = checkpoint.save_every},
                          run.straggler_threshold, task->units_per_row(), out);
    try {
      run_partial_reduce(job);
    } catch (const RankStopped&) {
      if (lead) throw;  // the coordinator's rank: the job ends (a restart resumes it)
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
  if (!lead) return result;
  result.run.evaluation = evaluate(job, job.end);
  if (!checkpoint.save.empty()) {
    save(job, job.end);
    log << fmt::format("saved checkpoint to '{}'\n", checkpoint.save);
  }
  log << fmt::format("trained {} steps in {:.1f} s ({})", job.end - start, result.run.seconds, sync.mode);
  if (sync.mode == "partial-reduce")
    log << fmt::format(": {} rounds, {:.2f} replicas per round, largest staleness {}", result.sync.rounds,
                       result.sync.mean_group, result.sync.max_staleness);
  log << "\n";
  for (const auto& [r, s] : result.sync.stragglers.items())
    log << fmt::format("  rank {}: {} steps, compute {:.2f} s, waiting {:.2f} s, straggler score {:.2f}{}\n", r,
                       s["steps"].get<int64_t>(), s["compute_s"].get<double>(), s["wait_s"].get<double>(),
                       s["score"].get<double>(), s["straggling"].get<bool>() ? " (straggling)" : "");
  for (const std::string& left : result.sync.left) log << fmt::format("  left: {}\n", left);
  return result;
}

}  // namespace px
