// Steps: one rank's training loop (rank_trainer.h). Each step draws its
// batch past the bad ones, runs it (once more, or with another batch, when
// its loss or gradients were not finite), records what it measured, and at
// their intervals evaluates and keeps the state.
#include <array>
#include <cmath>
#include <thread>

#include <fmt/ranges.h>

#include "comm/collectives.h"
#include "core/atomic_file.h"
#include "core/rng.h"
#include "parallel/lower.h"
#include "plan/job_strategy.h"
#include "runtime/train/rank_trainer.h"
#include "runtime/train/routing_report.h"

namespace px {

DataParallelResult RankTrainer::run() {
  for (; step_ < end_; ++step_) {
    run_step();
    const bool last = step_ + 1 == end_;
    const bool eval_now = run_.eval_every > 0 && (step_ + 1) % run_.eval_every == 0 && !last;
    const bool save_now = checkpoint_.save_every > 0 && (step_ + 1) % checkpoint_.save_every == 0 && !last;
    if (eval_now || save_now) executor_->finish();
    if (eval_now) evaluate(step_ + 1);
    if (save_now) checkpointer_->save(*executor_, state_now(step_ + 1), false);
  }
  executor_->finish();
  progress_->finish();
  report();
  return std::move(result_);
}

void RankTrainer::run_step() {
  DataBatch batch = bad_steps_->draw(*task_, strategy_.row_split(), data_rank_);
  add_program_for(batch);
  bad_steps_->poison_if_named(step_);
  const uint64_t seed = splitmix64(run_.seed ^ splitmix64(static_cast<uint64_t>(step_) * 1024));
  recorder_->at(step_ + 1, -1, "");  // between steps
  if (rank_ == fault_.inject_fault.rank && step_ + 1 == fault_.inject_fault.step && launch_.attempt == 0) {
    if (routing_fault(fault_.inject_fault))
      executor_->inject_routing_fault({.capacity_shift = fault_.inject_fault.mode == "moe-capacity" ? 0.25 : 0.0,
                                       .missing_expert = fault_.inject_fault.mode == "moe-expert"});
    else
      inject_fault_now(fault_.inject_fault, launch_.mpi, fault_.run_dir, recorder_, group_);
  }
  // A straggler, for demonstrations (--inject-delay): its step takes MS
  // longer per even share of rows it holds, as a slower host's would.
  double delay_s = 0;
  if (rank_ == fault_.inject_delay_rank) {
    const parallel::RowSplit split = strategy_.row_split();
    const double even = double(data_.batch) / split.world;
    delay_s = fault_.inject_delay_ms / 1e3 * double(split.rows_of(data_.batch, data_rank_).size()) / even;
    std::this_thread::sleep_for(std::chrono::duration<double>(delay_s));
  }
  executor_->set_tracing(step_ >= trace_begin_ && step_ < trace_end_);
  const double lr = optimizer_.schedule.at(step_);
  const StepResult out = run_batch(batch, seed, lr);
  record_step(out, batch, lr);
  if (std::optional<StragglerWindow> window = stragglers_->step_done(out.compute_us / 1e6 + delay_s))
    report_stragglers(*window);
}

// A window of straggler scores (every rank has the same): the lead writes
// them and names a change; a rebalance ends the run after this step.
void RankTrainer::report_stragglers(const StragglerWindow& window) {
  if (window.rebalance) {
    result_.data_parallel.rebalance = window.rebalance;
    end_ = step_ + 1;
  }
  if (!lead_) return;
  metrics_->write({{"step", step_ + 1}, {"compute_s", window.compute_s}, {"scores", window.scores}});
  for (const StragglerChange& c : window.changes) {
    progress_->message(
        c.straggling ? fmt::format("straggler: rank {} computes {:.2f}x as long as the fastest rank ({:.2f}x its own "
                                   "best) over its last {} steps, at step {}",
                                   c.rank, c.score, c.vs_best, kRecentSteps, step_ + 1)
                     : fmt::format("straggler: rank {} recovered ({:.2f}x the fastest rank) at step {}", c.rank,
                                   c.score, step_ + 1));
    metrics_->write({{"step", step_ + 1}, {"straggler", c.rank}, {"straggling", c.straggling}, {"score", c.score},
                     {"vs_best", c.vs_best}});
  }
  if (!window.rebalance) return;
  const nlohmann::json rebalance{{"step", step_ + 1}, {"compute_s", window.compute_s},
                                 {"row_shares", *window.rebalance}};
  progress_->message(fmt::format("rebalance: the scores stayed skewed; ending at step {} for a restart with rows "
                                 "{} (the measured rates)",
                                 step_ + 1, fmt::join(*window.rebalance, ":")));
  metrics_->write(rebalance);
  if (!fault_.run_dir.empty()) write_file_atomically(fault_.run_dir + "/rebalance.json", rebalance.dump() + "\n");
}

// Runs `batch` until a run is applied: a run that is not runs once more,
// then with the next batch (BadSteps).
StepResult RankTrainer::run_batch(DataBatch& batch, uint64_t seed, double lr) {
  for (int attempt = 1;; ++attempt) {
    const double step_start = progress_->elapsed_seconds();
    StepResult out = executor_->run({.feeds = feeds_of(model_, batch),
                                     .global_rows = batch.global_rows,
                                     .seed = seed,
                                     .step = static_cast<uint64_t>(step_),
                                     .lr = lr,
                                     .grad_clip = optimizer_.grad_clip,
                                     .poison = bad_steps_->poisoned()});
    step_seconds_.push_back(progress_->elapsed_seconds() - step_start);
    if (!out.skipped) {
      bad_steps_->applied();
      return out;
    }
    if (!bad_steps_->not_applied(out, step_, attempt, *metrics_, *progress_)) continue;
    batch = bad_steps_->draw(*task_, strategy_.row_split(), data_rank_);
    add_program_for(batch);
    attempt = 0;
  }
}

// An applied step: its loss, its measurements and its metrics line.
void RankTrainer::record_step(const StepResult& out, const DataBatch& batch, double lr) {
  wire_ += out.wire;
  for (TraceRecord& r : executor_->take_trace()) trace_.push_back(std::move(r));
  result_.run.peak_tensor_bytes = std::max(result_.run.peak_tensor_bytes, out.peak_bytes);
  result_.data_parallel.activation_peak_bytes = std::max(result_.data_parallel.activation_peak_bytes, out.activation_peak_bytes);
  if (step_ > trace_begin_ - 1) {  // the first step of a run warms caches and pools up
    stage_.busy_us += out.pipeline_busy_us;
    stage_.span_us += out.pipeline_span_us;
  }
  const double loss = out.loss;
  if (!std::isfinite(loss))  // only a program without a global norm gets here (P3)
    fail("training diverged at step {}: loss is {} (lower the learning rate {}{})", step_ + 1, loss, optimizer_.schedule.lr,
         strategy_.lowering.global_norm ? "" : "; P3 updates before the global norm is known, so it cannot skip bad steps");
  result_.run.losses.push_back(loss);
  result_.run.last_train_loss = loss;
  nlohmann::json line{{"step", step_ + 1}, {"train_loss", loss}, {"lr", lr}, {"grad_norm", out.grad_norm},
                      {"time_s", progress_->elapsed_seconds()}, {"step_s", step_seconds_.back()}};
  if (world_ > 1) {
    line["wire_bytes"] = out.wire.bytes_sent;
    for (size_t a = 0; a < out.axis_bytes.size(); ++a) {
      const std::string& axis = strategy_.mesh.axes()[a].name;
      line["bytes_sent"][axis] = out.axis_bytes[a];
      result_.data_parallel.bytes_per_axis[axis] = out.axis_bytes[a];
    }
  }
  if (!model_.routers.empty()) line["moe"] = routing_json(step_routing(model_, out, group_));
  metrics_->write(line);
  progress_->update(step_ + 1, loss, batch.global_rows * task_->units_per_row());
}

// An epoch's partial last batch (classifiers, without --drop-last) runs
// the same strategy lowered for its rows: the loss is the mean over the
// rows there are, so every strategy equals one rank on them. Lowered the
// first time one comes, with the main program's stage cuts.
void RankTrainer::add_program_for(const DataBatch& batch) {
  if (executor_->has_program_for(batch.global_rows)) return;
  const nn::Model partial = task_->build(batch.global_rows, true);
  parallel::LowerRequest lowering = plan::lower_request(partial, request_);
  lowering.menus = menus_;
  executor_->add_program(parallel::lower(lowering, *partial_strategy_, rank_));
}

// Every rank evaluates a part of the validation batches and the parts'
// sums are added up: no rank waits in a collective while another evaluates
// alone (a wait that could outlast --wait-timeout), and the whole set takes
// 1/world of the time.
Evaluation RankTrainer::evaluate(int64_t at_step) {
  const ParamStore params = executor_->parameters();  // collective: every rank gets the whole
  // Plain data parallelism splits the batches as it splits rows (by speed
  // when the ranks differ); other meshes evenly over every rank.
  const bool data_only = data_ranks_ == world_;
  const EvaluationSums part = data_only ? task_->evaluate(params, strategy_.row_split(), data_rank_)
                                        : task_->evaluate(params, parallel::RowSplit{.world = world_}, rank_);
  EvaluationSums sums = part;
  if (group_ != nullptr && world_ > 1) {
    std::array<float, 3> summed{float(part.loss), float(part.weight), float(part.correct < 0 ? 0 : part.correct)};
    comm::allreduce(*group_, std::span<float>(summed), comm::Reduction::sum);
    sums = {.loss = summed[0], .weight = summed[1], .correct = part.correct < 0 ? -1 : double(summed[2])};
  }
  const Evaluation e = sums.mean();
  if (!lead_) return e;
  EvaluationReport report = report_evaluation(e, at_step);
  report.line["time_s"] = progress_->elapsed_seconds();
  metrics_->write(report.line);
  progress_->message(report.text);
  return e;
}

// The run's state after `at_step` steps, for a checkpoint or a snapshot.
CheckpointState RankTrainer::state_now(int64_t at_step) const {
  CheckpointState state = run_state(model_config_, data_, optimizer_.update.kind, *task_, at_step, executor_->optimizer().steps(), world_);
  state.mesh = strategy_.mesh.str();
  state.batches = bad_steps_->batches_drawn();
  state.bad_batches = bad_steps_->bad_batches();
  state.saved_at = unix_seconds();
  return state;
}

}  // namespace px
