// Setup: one rank's training up to its first step (rank_trainer.h).
#include <filesystem>
#include <fstream>

#include "parallel/lower.h"
#include "runtime/fault/memory_guard.h"
#include "runtime/train/memory_report.h"
#include "runtime/train/rank_trainer.h"
#include "runtime/train/run_summary.h"

// The kernel set OpenBLAS runs (it honours OPENBLAS_CORETYPE), for the log.
extern "C" char* openblas_get_corename(void);

namespace px {

TrainResult train_rank(TrainOptions o, comm::Communicator* group, std::ostream& log, FlightRecorder* recorder,
                       const RankRecovery& recovery) {
  return RankTrainer(std::move(o), group, log, recorder, recovery).run();
}

// A restarted attempt is ready for its first step: says so in the metrics
// and, with a run directory, in <run dir>/restarts.jsonl, whose times give
// the time the restart lost (parallax launch reads them).
static void note_restart(const TrainOptions& o, const Checkpoint* resumed, int64_t step,
                         const RankRecovery& recovery, MetricsLog& metrics) {
  const double now = unix_seconds();
  if (recovery.ready_at != nullptr) *recovery.ready_at = now;
  if (o.attempt == 0) return;
  const nlohmann::json line{{"restart", o.attempt},
                            {"resumed_step", step},
                            {"ready_at", now},
                            {"saved_at", resumed && resumed->state.saved_at ? nlohmann::json(*resumed->state.saved_at)
                                                                           : nlohmann::json()}};
  metrics.write(line);
  if (o.run_dir.empty()) return;
  std::filesystem::create_directories(o.run_dir);
  std::ofstream(o.run_dir + "/restarts.jsonl", std::ios::app) << line.dump() << "\n";
}

RankTrainer::RankTrainer(TrainOptions o, comm::Communicator* group, std::ostream& log, FlightRecorder* recorder,
                         const RankRecovery& recovery)
    : group_(group),
      log_(log),
      recorder_(recorder),
      recovery_(recovery),
      rank_(group ? group->rank() : 0),
      world_(group ? group->size() : 1),
      lead_(rank_ == 0),
      resume_(o.resume, o.resume_if_saved, group, recovery.restore),
      o_(completed(std::move(o), resume_, world_, lead_)),
      task_(make_task(o_.task_options())),
      account_(new_memory_account()) {
  total_ = o_.steps > 0 ? o_.steps : o_.epochs * task_->steps_per_epoch();
  o_.schedule.total = total_;
  end_ = o_.stop_after > 0 ? std::min(o_.stop_after, total_) : total_;
  // The memory guard (memory_guard.h): nothing is allocated for a model
  // that cannot fit; first from its config, then from its Program.
  slots_ = static_cast<int>(optimizer_slot_names(o_.optimizer.kind).size());
  check_model_fits(o_.model_config(), machine_ranks(o_.mpi, o_.local_ranks, world_), slots_);
  model_ = task_->build(o_.batch, true);
  try {
    strategy_ = strategy_for(o_, model_, world_);
  } catch (const Error& e) {
    throw JobConfigurationError(e.what());
  }
  o_.optimizer = optimizer_for_strategy(o_.optimizer, strategy_);
  if (lead_ && !o_.run_dir.empty()) write_run_strategy(o_.run_dir, strategy_);
  lower_and_load();
  resume_state();
  log_start();
  const Checkpoint* resumed = resume_.checkpoint();
  bad_steps_.emplace(o_, resumed ? &resumed->state : nullptr, step_);
  metrics_.emplace(lead_ ? o_.metrics : std::string(), resumed != nullptr || o_.attempt > 0);
  if (lead_) note_restart(o_, resumed, step_, recovery_, *metrics_);
  checkpointer_.emplace(o_.save, o_.keep_last, group_, recovery_.snapshots, strategy_);
  trace_begin_ = step_ + 1;
  trace_end_ = step_ + 4;
  progress_.emplace(total_, step_, task_->unit(), o_.progress_bar, log_);
  partial_strategy_ = parallel::with_stage_cuts_of(strategy_, executor_->program());
}

// The options as this rank runs them: a run directory keeps what `parallax
// report` reads (run_summary.h); a resumed run trains the checkpoint's model.
TrainOptions RankTrainer::completed(TrainOptions o, const ResumePoint& resume, int world, bool lead) {
  if (!o.run_dir.empty()) {
    if (o.metrics.empty()) o.metrics = o.run_dir + "/metrics.jsonl";
    if (o.trace.empty()) o.trace = o.run_dir + "/trace.json";
    if (lead) std::filesystem::create_directories(o.run_dir);
  }
  resume.apply_model(o);
  o.ranks = world;
  validate(o);
  return o;
}

// This rank's Program and the executor that runs it, once the memory guard
// has seen it.
void RankTrainer::lower_and_load() {
  // This rank's group on every mesh axis (tp innermost: consecutive ranks).
  AxisGroups groups;
  if (group_ != nullptr) {
    mesh_groups_ = parallel::make_strategy_groups(*group_, strategy_);
    groups = axis_groups(mesh_groups_);
    menus_ = parallel::algorithm_menus(mesh_groups_);
  }
  const int data_axis = strategy_.mesh.axis(strategy_.data_axis);
  data_rank_ = strategy_.mesh.coords(rank_)[static_cast<size_t>(data_axis)];
  data_ranks_ = strategy_.data_ranks();
  // The collective algorithm and the bucket buffers shape the Program (its
  // wire bytes, its back-pressure edges): lowering inputs, not executor options.
  parallel::Program program = parallel::lower({.forward = &model_.graph, .loss = model_.loss,
                                               .collective = o_.strategy.collective,
                                               .menus = menus_,
                                               .bucket_buffers = o_.strategy.bucket_buffers},
                                              strategy_, rank_);
  // Copies of the training state a checkpoint or a restart keeps: one
  // being written in the background (and the lead's gathered model, at
  // most as large), and with in-memory snapshots two generations of this
  // rank's own and of its buddy's.
  const int state_copies = (o_.save.empty() ? 0 : 2) + (recovery_.snapshots != nullptr ? 4 : 0);
  check_program_fits(program, machine_ranks(o_.mpi, o_.local_ranks, world_), slots_, state_copies);
  executor_ = std::make_unique<ProgramExecutor>(std::move(program), groups, o_.optimizer,
                                                parallel::ExecutionOptions{.overlap = o_.overlap,
                                                                           .trace = !o_.trace.empty()});
  executor_->set_flight_recorder(recorder_);
  recorder_->set_phase(RankPhase::running);
}

// Compressed training resumed: each rank takes its own error-feedback state
// back when the checkpoint was saved at this rank count with this
// compression; otherwise the residuals start at zero (said in the log).
static void restore_compression_state(const Checkpoint& resumed, ProgramExecutor& executor, int world,
                                      std::ostream& log) {
  const std::string spec = executor.program().strategy.lowering.compression.to_string();
  const std::string& saved_spec = resumed.state.compression;
  const int saved_ranks = resumed.state.ranks;
  std::string why;
  if (!resumed.compression) why = "the checkpoint has none";
  else if (saved_spec != spec) why = fmt::format("it was saved with --compress {}", saved_spec.empty() ? "none" : saved_spec);
  else if (saved_ranks != world) why = fmt::format("it holds {} ranks' residuals, this run has {}", saved_ranks, world);
  if (!why.empty()) {
    log << fmt::format("compression state not restored ({}): error-feedback residuals start at zero\n", why);
    return;
  }
  executor.load_compression_state(*resumed.compression);
  log << fmt::format("restored the error-feedback state of {} ranks ({})\n", world, spec);
}

// The parameters and optimizer state to start from: the resumed ones, else
// the initial draw.
void RankTrainer::resume_state() {
  const Checkpoint* resumed = resume_.checkpoint();
  if (resumed == nullptr) {
    // Every rank draws the same initial parameters; the executor keeps its
    // storage of them (its model shard, or its ZeRO-3 block) and these go.
    executor_->set_parameters(initial_parameters(model_.graph, o_.seed));
    return;
  }
  step_ = resume_.restore_task(*task_);
  executor_->load_state(resumed->shards, resumed->state.optimizer_steps);
  if (executor_->compressing()) restore_compression_state(*resumed, *executor_, world_, log_);
  const auto ranks = [](int n) { return fmt::format("{} rank{}", n, n == 1 ? "" : "s"); };
  log_ << fmt::format("resumed from {} at step {} (saved at {}, mesh {}; continuing at {}, mesh {})\n",
                      resume_.from_memory() ? resumed->dir : fmt::format("'{}'", resumed->dir), step_,
                      ranks(resumed->state.ranks), resumed->state.mesh.empty() ? "?" : resumed->state.mesh,
                      ranks(world_), strategy_.mesh.str());
}

// What trains: the model, its steps, the ranks, and what each rank holds.
void RankTrainer::log_start() {
  const parallel::Program& program = executor_->program();
  int64_t parameter_count = 0;
  for (const parallel::ParamLayout& p : program.params) parameter_count += p.global_shape.numel();
  if (!program.pipeline.params.empty()) {  // every stage's
    parameter_count = 0;
    for (const auto& p : program.pipeline.params) parameter_count += p.shape.numel();
  }
  log_ << fmt::format("model {} with {} parameters; {} steps of batch {}{}; {}threads {}; BLAS {}\n", o_.model,
                      parameter_count, total_, o_.batch,
                      o_.accumulation > 1 ? fmt::format(" ({} micro-batches)", o_.accumulation) : "",
                      world_ > 1 ? fmt::format("{} ranks, mesh {} ({}); ", world_, strategy_.mesh.str(),
                                               group_->backend())
                                 : "",
                      o_.threads, openblas_get_corename());
  result_.first_step = step_;
  const ExecutorMemory m = executor_->memory();
  result_.memory = RankMemory{.parameters = static_cast<double>(m.parameters),
                              .gradients = static_cast<double>(m.gradient_shard +
                                                               (only_shard_kept(m) ? 0 : m.gradient_buckets)),
                              .optimizer_state = static_cast<double>(m.optimizer_state)};
  // Ψ here is this rank's model shard (all of it without tensor parallelism).
  const int64_t shard_parameters = program.param_count;
  // ZeRO shards over the data path's ranks: data x context.
  const int sharing = data_ranks_ * strategy_.context_ranks();
  const int zero = sharing > 1 ? strategy_.zero_stage : 0;
  if (world_ > 1) log_ << describe_rank_memory(zero, sharing, slots_, shard_parameters, result_.memory) << "\n";
  if (strategy_.mesh.ranks() > sharing * strategy_.pipeline_ranks()) {
    TensorParallelShare share{.split = 0, .replicated = 0,
                              .ranks = strategy_.mesh.ranks() / sharing / strategy_.pipeline_ranks()};
    for (const parallel::ParamLayout& p : program.params)
      (p.shape == p.global_shape ? share.replicated : share.split) += p.global_shape.numel();
    log_ << describe_tensor_parallel_share(share, shard_parameters) << "\n";
  }
}

}  // namespace px
