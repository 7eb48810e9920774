#include "runtime/train/resume.h"

#include "runtime/tasks/model_json.h"

namespace px {

ResumePoint::ResumePoint(const std::string& resume_dir, bool if_saved, comm::Communicator* group,
                         const Checkpoint* restore)
    : from_(restore) {
  if (from_ != nullptr || resume_dir.empty()) return;
  const std::string agreed = agreed_checkpoint(resume_dir, group, if_saved);
  if (agreed.empty()) return;
  loaded_ = load_checkpoint(agreed);
  from_ = &loaded_;
}

void ResumePoint::apply_model(nn::ModelConfig& model, DataOptions& data) const {
  if (from_ != nullptr) apply_model_json(from_->state.config, model, data);
}

int64_t ResumePoint::restore_task(Task& task) const {
  if (from_ == nullptr) return 0;
  task.restore_data_state(from_->state.data);
  return from_->state.step;
}

CheckpointState run_state(const nn::ModelConfig& model, const DataOptions& data, const std::string& optimizer,
                          const Task& task, int64_t step, int64_t optimizer_steps, int ranks) {
  return {.step = step,
          .config = model_json(model, data),
          .data = task.data_state(),
          .optimizer = optimizer,
          .optimizer_steps = optimizer_steps,
          .ranks = ranks};
}

WholeModelStart start_whole_model(const ResumePoint& resume, const nn::ModelConfig& model, const DataOptions& data,
                                  Precision precision, const OptimizerOptions& optimizer, const RunOptions& run,
                                  const std::string& resume_dir, std::ostream& log) {
  WholeModelStart out{.model = model, .data = data, .optimizer = optimizer};
  resume.apply_model(out.model, out.data);
  nn::validate(out.model);
  out.task = make_task(out.model, out.data, run.seed, precision);
  out.total = run.steps > 0 ? run.steps : run.epochs * out.task->steps_per_epoch();
  out.optimizer.schedule.total = out.total;
  out.shape_model = out.task->build(1, false);
  out.params = initial_parameters(out.shape_model.graph, run.seed);
  if (const Checkpoint* resumed = resume.checkpoint()) {
    for (const std::string& name : out.params.names())
      out.params.at(name) = resumed->shards.read_whole(name, out.params.at(name).shape());
    out.start = resume.restore_task(*out.task);
    log << fmt::format("resumed from '{}' at step {}\n", resume_dir, out.start);
  }
  return out;
}

}  // namespace px
