// One rank's training (train_rank, train_rank.h) in stages, each in its own
// file:
//   setup     (rank_setup.cc)  completes the options, makes the task, lowers
//                              the strategy to this rank's Program and
//                              resumes where the checkpoint or restart left off;
//   steps     (rank_steps.cc)  draws each step's batch past the bad ones
//                              (bad_steps.h), runs it, evaluates and keeps the
//                              state (checkpointer.h) at their intervals;
//   report    (rank_report.cc) the trace, the final evaluation and checkpoint,
//                              the log's totals, the run directory's summary
//                              and the prediction beside the measurement.
// Members are the state the stages share; train_rank builds one and runs it.
#pragma once

#include <memory>
#include <optional>
#include <ostream>
#include <vector>

#include "comm/communicator.h"
#include "core/memory.h"
#include "parallel/mesh.h"
#include "parallel/strategy.h"
#include "runtime/executor/program_executor.h"
#include "runtime/executor/trace.h"
#include "runtime/fault/flight_recorder.h"
#include "runtime/tasks/task.h"
#include "runtime/train/bad_steps.h"
#include "runtime/train/checkpointer.h"
#include "runtime/train/metrics.h"
#include "runtime/train/progress.h"
#include "runtime/train/resume.h"
#include "runtime/train/straggler_watch.h"
#include "runtime/train/train_rank.h"
#include "runtime/train/trainer.h"

namespace px {

class RankTrainer {
 public:
  // Setup: everything up to the first step (rank_setup.cc), from the
  // job's parts this rank trains with (train_rank's).
  RankTrainer(nn::ModelConfig model, DataOptions data, parallel::StrategyRequest strategy,
              OptimizerOptions optimizer, CheckpointOptions checkpoint, FaultOptions fault, RunOptions run,
              RankLaunch launch, comm::Communicator* group, std::ostream& log, FlightRecorder* recorder,
              const RankRecovery& recovery);
  RankTrainer(const RankTrainer&) = delete;
  RankTrainer& operator=(const RankTrainer&) = delete;
  // The steps, then the report.
  DataParallelResult run();

 private:
  // Setup (rank_setup.cc).
  void complete();
  void lower_and_load();
  void resume_state();
  void log_start();
  // Steps (rank_steps.cc).
  void run_step();
  StepResult run_batch(DataBatch& batch, uint64_t seed, double lr);
  void record_step(const StepResult& out, const DataBatch& batch, double lr);
  void add_program_for(const DataBatch& batch);
  void report_stragglers(const StragglerWindow& window);
  Evaluation evaluate(int64_t at_step);
  CheckpointState state_now(int64_t at_step) const;
  // Report (rank_report.cc).
  void report();
  void log_totals();
  void measure_step_seconds();
  void summarize_and_predict();
  // ZeRO's accounting (Rajbhandari et al.): ZeRO-0/1 keep every gradient
  // bucket through backward; ZeRO-2/3 keep only the shard, their buckets in
  // flight being the measured peak.
  bool only_shard_kept(const ExecutorMemory& memory) const {
    return strategy_.zero_stage >= 2 && memory.gradient_shard > 0;
  }

  comm::Communicator* group_;
  std::ostream& log_;
  FlightRecorder* recorder_;
  const RankRecovery& recovery_;
  const int rank_, world_;
  const bool lead_;
  ResumePoint resume_;  // the state this rank continues from, if any
  // The job's parts, completed (complete()): the resumed model and data,
  // the run directory's outputs, the schedule's length.
  nn::ModelConfig model_config_;
  DataOptions data_;
  parallel::StrategyRequest request_;
  OptimizerOptions optimizer_;
  CheckpointOptions checkpoint_;
  FaultOptions fault_;
  RunOptions run_;
  RankLaunch launch_;
  std::unique_ptr<Task> task_;
  // This rank's tensors from here on (its dataset is not a step's memory),
  // apart from the other in-process ranks'.
  std::optional<MemoryAccountScope> account_;
  int64_t total_ = 0, end_ = 0;  // the schedule's steps; the step this call stops after (--stop-after)
  int slots_ = 0;                // optimizer slots per parameter
  nn::Model model_;
  parallel::Strategy strategy_;
  parallel::MeshGroups mesh_groups_;  // this rank's group on every mesh axis (the executor's)
  // Per mesh axis, what its communicator's automatic algorithm chooses
  // among: the lowering stamps the algorithm each collective will run.
  std::vector<comm::AlgorithmMenu> menus_;
  std::unique_ptr<ProgramExecutor> executor_;
  int data_rank_ = 0, data_ranks_ = 1;  // among the ranks the rows are split over (Strategy::row_rank)
  int64_t step_ = 0;  // steps done
  DataParallelResult result_;
  std::optional<MetricsLog> metrics_;
  std::optional<BadSteps> bad_steps_;
  std::optional<Checkpointer> checkpointer_;
  std::optional<Progress> progress_;
  std::optional<StragglerWatch> stragglers_;
  // An epoch's partial last batch runs this strategy lowered for its rows.
  std::optional<parallel::Strategy> partial_strategy_;
  // --trace: steps trace_begin_..trace_end_ - 1 of this run (the first one warms caches and pools up).
  int64_t trace_begin_ = 0, trace_end_ = 0;
  std::vector<TraceRecord> trace_;
  comm::compression::WireStats wire_;  // summed over the steps run
  StageMeasurement stage_;             // this rank's pipeline measurements
  std::vector<double> step_seconds_;   // each step's executor run (what the simulator predicts; loading the batch apart)
};

}  // namespace px
