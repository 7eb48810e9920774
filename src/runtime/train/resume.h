// Where a rank's training continues from, and the state it saves for the
// next one to continue from; shared by the data-parallel trainer, the
// parameter server and the synchronized replicas. A run continues a restart's state in memory
// (snapshots.h), else --resume's checkpoint directory, else starts afresh.
#pragma once

#include <memory>
#include <ostream>
#include <string>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/optimizer/optimizer.h"
#include "runtime/tasks/task.h"
#include "runtime/train/run_options.h"

namespace px {

class ResumePoint {
 public:
  // Reads `resume_dir` (--resume) unless `restore` (a restart's state) is
  // given: collective over `group` then (nullptr: this process alone),
  // whose ranks agree on the step they continue from (agreed_checkpoint:
  // each host may have its own disk); `if_saved`: none yet starts afresh.
  ResumePoint(const std::string& resume_dir, bool if_saved, comm::Communicator* group, const Checkpoint* restore);
  ResumePoint(const ResumePoint&) = delete;
  ResumePoint& operator=(const ResumePoint&) = delete;

  // nullptr: the run starts afresh.
  const Checkpoint* checkpoint() const { return from_; }
  bool from_memory() const { return from_ != nullptr && from_ != &loaded_; }
  // The resumed run trains the checkpoint's model on its data: its config
  // replaces the job's.
  void apply_model(nn::ModelConfig& model, DataOptions& data) const;
  // Puts the task's data order where the checkpoint left it; returns the
  // step training continues after (0 afresh).
  int64_t restore_task(Task& task) const;

 private:
  Checkpoint loaded_;
  const Checkpoint* from_ = nullptr;
};

// A run whose ranks each start from the whole model (a parameter server's,
// synchronized replicas'), from the job's parts: the resumed model and data
// (else the job's), its task, the schedule's length, the initial or resumed
// parameters whole, and the step it continues after. `resume` must outlive
// it (the parameters' checkpoint is its).
struct WholeModelStart {
  nn::ModelConfig model;
  DataOptions data;
  std::unique_ptr<Task> task;
  int64_t total = 0;  // the schedule's steps
  int64_t start = 0;  // the step it continues after (0 afresh)
  OptimizerOptions optimizer;  // the schedule's total filled in
  nn::Model shape_model;       // one row's model: the parameters' names, shapes and decay flags
  ParamStore params;
};
WholeModelStart start_whole_model(const ResumePoint& resume, const nn::ModelConfig& model, const DataOptions& data,
                                  Precision precision, const OptimizerOptions& optimizer, const RunOptions& run,
                                  const std::string& resume_dir, std::ostream& log);

// What every checkpoint says of the run at `step` (the writer adds mesh,
// batches and the like): the model config, the task's data order, the
// optimizer and its update count, the rank count.
CheckpointState run_state(const nn::ModelConfig& model, const DataOptions& data, const std::string& optimizer,
                          const Task& task, int64_t step, int64_t optimizer_steps, int ranks);

}  // namespace px
