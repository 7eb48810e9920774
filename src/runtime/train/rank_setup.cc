// Setup: one rank's training up to its first step (rank_trainer.h).
#include <filesystem>
#include <fstream>

#include "kernels/blas_core.h"
#include "parallel/lower.h"
#include "plan/job_strategy.h"
#include "runtime/fault/memory_guard.h"
#include "runtime/train/memory_report.h"
#include "runtime/train/rank_trainer.h"
#include "runtime/train/run_summary.h"

// The kernel set OpenBLAS runs (it honours OPENBLAS_CORETYPE), for the log.

namespace px {

DataParallelResult train_rank(const nn::ModelConfig& model, const DataOptions& data,
                              const parallel::StrategyRequest& strategy, const OptimizerOptions& optimizer,
                              const CheckpointOptions& checkpoint, const FaultOptions& fault, const RunOptions& run,
                              const RankLaunch& launch, comm::Communicator* group, std::ostream& log,
                              FlightRecorder* recorder, const RankRecovery& recovery) {
  return RankTrainer(model, data, strategy, optimizer, checkpoint, fault, run, launch, group, log, recorder, recovery)
      .run();
}

// A restarted attempt is ready for its first step: says so in the metrics
// and, with a run directory, in <run dir>/restarts.jsonl, whose times give
// the time the restart lost (parallax launch reads them).
static void note_restart(int attempt, const std::string& run_dir, const Checkpoint* resumed, int64_t step,
                         const RankRecovery& recovery, MetricsLog& metrics) {
  const double now = unix_seconds();
  if (recovery.ready_at != nullptr) *recovery.ready_at = now;
  if (attempt == 0) return;
  const nlohmann::json line{{"restart", attempt},
                            {"resumed_step", step},
                            {"ready_at", now},
                            {"saved_at", resumed && resumed->state.saved_at ? nlohmann::json(*resumed->state.saved_at)
                                                                           : nlohmann::json()}};
  metrics.write(line);
  if (run_dir.empty()) return;
  std::filesystem::create_directories(run_dir);
  std::ofstream(run_dir + "/restarts.jsonl", std::ios::app) << line.dump() << "\n";
}

RankTrainer::RankTrainer(nn::ModelConfig model, DataOptions data, parallel::StrategyRequest strategy,
                         OptimizerOptions optimizer, CheckpointOptions checkpoint, FaultOptions fault, RunOptions run,
                         RankLaunch launch, comm::Communicator* group, std::ostream& log, FlightRecorder* recorder,
                         const RankRecovery& recovery)
    : group_(group),
      log_(log),
      recorder_(recorder),
      recovery_(recovery),
      rank_(group ? group->rank() : 0),
      world_(group ? group->size() : 1),
      lead_(rank_ == 0),
      resume_(checkpoint.resume, checkpoint.resume_if_saved, group, recovery.restore),
      model_config_(std::move(model)),
      data_(std::move(data)),
      request_(std::move(strategy)),
      optimizer_(std::move(optimizer)),
      checkpoint_(std::move(checkpoint)),
      fault_(std::move(fault)),
      run_(std::move(run)),
      launch_(launch) {
  complete();
  task_ = make_task(model_config_, data_, run_.seed, request_.precision);
  account_.emplace(new_memory_account());
  total_ = run_.steps > 0 ? run_.steps : run_.epochs * task_->steps_per_epoch();
  optimizer_.schedule.total = total_;
  end_ = run_.stop_after > 0 ? std::min(run_.stop_after, total_) : total_;
  // The memory guard (memory_guard.h): nothing is allocated for a model
  // that cannot fit; first from its config, then from its Program.
  slots_ = static_cast<int>(optimizer_slot_names(optimizer_.update.kind).size());
  check_model_fits(model_config_, machine_ranks(launch_.mpi, launch_.local_ranks, world_), slots_);
  model_ = task_->build(data_.batch, true);
  try {
    strategy_ = plan::strategy_for(request_, model_, world_, run_use(optimizer_));
  } catch (const Error& e) {
    throw JobConfigurationError(e.what());
  }
  optimizer_.update = optimizer_for_strategy(optimizer_.update, strategy_);
  if (lead_ && !fault_.run_dir.empty()) write_run_strategy(fault_.run_dir, strategy_);
  lower_and_load();
  resume_state();
  log_start();
  const Checkpoint* resumed = resume_.checkpoint();
  bad_steps_.emplace(fault_, optimizer_.schedule.lr, resumed ? &resumed->state : nullptr, step_);
  metrics_.emplace(lead_ ? run_.metrics : std::string(), resumed != nullptr || launch_.attempt > 0);
  if (lead_) note_restart(launch_.attempt, fault_.run_dir, resumed, step_, recovery_, *metrics_);
  checkpointer_.emplace(checkpoint_.save, checkpoint_.keep_last, group_, recovery_.snapshots, strategy_);
  trace_begin_ = step_ + 1;
  trace_end_ = step_ + 4;
  progress_.emplace(total_, step_, task_->unit(), run_.progress_bar, log_);
  std::vector<int64_t> rows;  // each rank's rows of a full batch: its data (x expert) rank's
  for (int r = 0; r < world_; ++r)
    rows.push_back(strategy_.row_split().rows_of(data_.batch, strategy_.row_rank(strategy_.mesh.coords(r))).size());
  stragglers_.emplace(group_, run_.straggler_threshold, run_.rebalance, std::move(rows), data_.batch);
  partial_strategy_ = parallel::with_stage_cuts_of(strategy_, executor_->program());
}

// The parts as this rank runs them: a run directory keeps what `parallax
// report` reads (run_summary.h); a resumed run trains the checkpoint's
// model on its data, which must take the strategy's split.
void RankTrainer::complete() {
  if (!fault_.run_dir.empty()) {
    if (run_.metrics.empty()) run_.metrics = fault_.run_dir + "/metrics.jsonl";
    if (run_.trace.empty()) run_.trace = fault_.run_dir + "/trace.json";
    if (lead_) std::filesystem::create_directories(fault_.run_dir);
  }
  if (resume_.checkpoint() == nullptr) return;
  resume_.apply_model(model_config_, data_);
  try {
    nn::validate(model_config_);
    plan::validate_split(model_config_, request_, world_, data_.batch);
  } catch (const Error& e) {
    throw JobConfigurationError(fmt::format("the resumed checkpoint's model: {}", e.what()));
  }
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
  data_rank_ = strategy_.row_rank(strategy_.mesh.coords(rank_));
  data_ranks_ = strategy_.row_ranks();
  // The collective algorithm and the bucket buffers shape the Program (its
  // wire bytes, its back-pressure edges): lowering inputs, not executor options.
  parallel::LowerRequest lowering = plan::lower_request(model_, request_);
  lowering.menus = menus_;
  parallel::Program program = parallel::lower(lowering, strategy_, rank_);
  // Copies of the training state a checkpoint or a restart keeps: one
  // being written in the background (and the lead's gathered model, at
  // most as large), and with in-memory snapshots two generations of this
  // rank's own and of its buddy's.
  const int state_copies = (checkpoint_.save.empty() ? 0 : 2) + (recovery_.snapshots != nullptr ? 4 : 0);
  check_program_fits(program, machine_ranks(launch_.mpi, launch_.local_ranks, world_), slots_, state_copies);
  executor_ = std::make_unique<ProgramExecutor>(std::move(program), groups, optimizer_.update,
                                                parallel::ExecutionOptions{.overlap = run_.overlap,
                                                                           .trace = !run_.trace.empty()});
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
    executor_->set_parameters(initial_parameters(model_.graph, run_.seed));
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
  log_ << fmt::format("model {} with {} parameters; {} steps of batch {}{}; {}threads {}; BLAS {}\n", model_config_.kind,
                      parameter_count, total_, data_.batch,
                      request_.micro_batches > 1 ? fmt::format(" ({} micro-batches)", request_.micro_batches) : "",
                      world_ > 1 ? fmt::format("{} ranks, mesh {} ({}); ", world_, strategy_.mesh.str(),
                                               group_->backend())
                                 : "",
                      run_.threads, kernels::blas_description());
  result_.run.first_step = step_;
  const ExecutorMemory m = executor_->memory();
  result_.data_parallel.memory = RankMemory{.parameters = static_cast<double>(m.parameters),
                              .gradients = static_cast<double>(m.gradient_shard +
                                                               (only_shard_kept(m) ? 0 : m.gradient_buckets)),
                              .optimizer_state = static_cast<double>(m.optimizer_state)};
  // Ψ here is this rank's model shard (all of it without tensor parallelism).
  const int64_t shard_parameters = program.param_count;
  // ZeRO shards over the data path's ranks: data x context.
  const int sharing = data_ranks_ * strategy_.context_ranks();
  const int zero = sharing > 1 ? strategy_.zero_stage : 0;
  if (world_ > 1) log_ << describe_rank_memory(zero, sharing, slots_, shard_parameters, result_.data_parallel.memory) << "\n";
  if (strategy_.mesh.ranks() > sharing * strategy_.pipeline_ranks()) {
    TensorParallelShare share{.split = 0, .replicated = 0,
                              .ranks = strategy_.mesh.ranks() / sharing / strategy_.pipeline_ranks()};
    for (const parallel::ParamLayout& p : program.params)
      (p.shape == p.global_shape ? share.replicated : share.split) += p.global_shape.numel();
    log_ << describe_tensor_parallel_share(share, shard_parameters) << "\n";
  }
}

}  // namespace px
