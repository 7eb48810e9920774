// Report: the end of one rank's training (rank_trainer.h): the trace, the
// final evaluation and checkpoint, the log's totals, and on the lead the
// run directory's summary and the prediction beside the measurement.
#include <algorithm>

#include <fmt/ranges.h>

#include "plan/job_strategy.h"
#include "plan/simulate.h"
#include "runtime/tasks/sampling.h"
#include "parallel/memory_ledger.h"
#include "runtime/train/prediction.h"
#include "runtime/train/rank_figures.h"
#include "runtime/train/rank_trainer.h"
#include "runtime/train/run_summary.h"

namespace px {

void RankTrainer::report() {
  if (!run_.trace.empty()) {
    write_chrome_trace(run_.trace, group_, trace_);
    log_ << fmt::format("wrote a trace of steps {}-{} to '{}' (open it in https://ui.perfetto.dev)\n",
                        trace_begin_ + 1, std::min(trace_end_, end_), run_.trace);
  }
  result_.run.steps = step_;
  result_.run.seconds = progress_->elapsed_seconds();
  result_.data_parallel.skipped_runs = bad_steps_->skipped_runs();
  result_.data_parallel.bad_batches = bad_steps_->bad_batches();
  result_.data_parallel.stragglers = stragglers_->summary();
  if (lead_ && world_ > 1 && !result_.data_parallel.stragglers.empty()) {
    std::string scores;
    for (const auto& [rank, s] : result_.data_parallel.stragglers.items())
      scores += fmt::format("{}rank {} {:.2f}{}", scores.empty() ? "" : ", ", rank, s["score"].get<double>(),
                            s["straggling"].get<bool>() ? " (straggling)" : "");
    log_ << fmt::format("straggler scores (recent step compute against the fastest rank's): {}\n", scores);
  }
  if (result_.data_parallel.skipped_runs > 0)
    log_ << fmt::format("bad steps: {} step run{} not applied (non-finite loss or gradients); batches skipped for "
                        "good: {}\n",
                        result_.data_parallel.skipped_runs, result_.data_parallel.skipped_runs == 1 ? "" : "s",
                        fmt::join(result_.data_parallel.bad_batches, ", "));
  if (strategy_.pipeline_ranks() > 1) {
    stage_.activation_peak_bytes = result_.data_parallel.activation_peak_bytes;
    stage_.micro_batch_stash_bytes =
        parallel::micro_batch_stash_bytes(executor_->program(), parallel::liveness(executor_->program()));
    result_.data_parallel.pipeline_stages = gather_stage_measurements(*group_, strategy_, stage_);
    log_ << describe_measured_pipeline(executor_->program().pipeline, result_.data_parallel.pipeline_stages);
  }
  result_.run.evaluation = evaluate(step_);
  checkpointer_->save(*executor_, state_now(step_), true);
  if (!checkpoint_.save.empty() && lead_) log_ << fmt::format("saved checkpoint to '{}'\n", checkpoint_.save);
  if (checkpointer_->peak_bytes() > 0)
    log_ << fmt::format("checkpoint copies held beside training: at most {:.1f} MiB ({})\n",
                        double(checkpointer_->peak_bytes()) / (1 << 20),
                        recovery_.snapshots != nullptr ? "snapshots in memory, the buddy's copy and background writes"
                                                       : "background writes");
  log_totals();
  measure_step_seconds();
  summarize_and_predict();
  if (model_config_.kind == "gpt" && run_.sample_tokens > 0) {
    const ParamStore params = executor_->parameters();
    SampleOptions so{.tokens = run_.sample_tokens, .seed = run_.seed,
                     .precision = strategy_.precision};
    if (lead_) log_ << "sample:\n" << run_.prompt << sample_text(model_config_.gpt, params, run_.prompt, so) << "\n";
  }
}

// Steps, time, memory and the bytes on the wire.
void RankTrainer::log_totals() {
  log_ << fmt::format("trained {} steps in {:.1f} s; peak tensor memory {:.1f} MiB, of it forward activations {:.1f} "
                      "MiB{}\n",
                      result_.run.losses.size(), result_.run.seconds, double(result_.run.peak_tensor_bytes) / (1 << 20),
                      double(result_.data_parallel.activation_peak_bytes) / (1 << 20),
                      strategy_.lowering.recompute == parallel::Recompute::none
                          ? ""
                          : fmt::format(" (recompute {})", parallel::recompute_name(strategy_.lowering.recompute)));
  const ExecutorMemory memory = executor_->memory();
  result_.data_parallel.gradient_buffer_peak_bytes = only_shard_kept(memory) ? memory.gradient_buffer_peak : 0;
  result_.data_parallel.gathered_parameter_peak_bytes = memory.gathered_parameter_peak;
  const int zero = data_ranks_ * strategy_.context_ranks() > 1 ? strategy_.zero_stage : 0;
  if (zero >= 2)
    log_ << fmt::format("ZeRO-{} bucket buffers: at most {:.2f} MiB alive at once (up to {} buckets of ~{:.2f} MiB)\n",
                        zero, double(result_.data_parallel.gradient_buffer_peak_bytes) / (1 << 20), request_.bucket_buffers,
                        double(strategy_.lowering.bucket_bytes) / (1 << 20));
  if (zero >= 3)
    log_ << fmt::format("ZeRO-3 gathered parameters: at most {:.2f} MiB alive at once beside the {:.2f} MiB shard\n",
                        double(result_.data_parallel.gathered_parameter_peak_bytes) / (1 << 20),
                        result_.data_parallel.memory.parameters / (1 << 20));
  if (world_ > 1 && !result_.run.losses.empty()) {
    const double n = static_cast<double>(result_.run.losses.size());
    const double sent = double(wire_.bytes_sent) / n / 1e6, ring = double(wire_.dense_bytes) / n / 1e6;
    // Uncompressed, what differs from a ring is the algorithm: shared
    // memory (in-process ranks on one host) puts nothing on a wire, a tree
    // or a naive exchange more than a ring.
    const bool compressed = strategy_.lowering.compression.method != comm::compression::Method::none;
    const std::string versus =
        compressed      ? fmt::format("{:.1f}x fewer with {}", wire_.reduction(), strategy_.lowering.compression.to_string())
        : sent == 0     ? std::string("none on a wire: the collectives ran through shared memory")
        : sent == ring  ? std::string("uncompressed, by ring")
                        : fmt::format("uncompressed; the algorithms chosen send {:.2f}x a ring's", sent / ring);
    log_ << fmt::format("gradient bytes on the wire per step (rank 0): {:.3f} MB; a float32 ring allreduce sends "
                        "{:.3f} MB ({})\n",
                        sent, ring, versus);
  }
  if (world_ > 1 && group_ != nullptr) {
    // What each host's ranks send to the others, by their Programs: a
    // host's network counters should show it (docs/multi_host.md).
    result_.data_parallel.bytes_between_hosts = gather_bytes_between_hosts(*group_, executor_->program());
    if (result_.data_parallel.bytes_between_hosts.size() > 1) {
      std::vector<std::string> hosts;
      for (size_t h = 0; h < result_.data_parallel.bytes_between_hosts.size(); ++h)
        hosts.push_back(fmt::format("host {} {:.3f} MB", h, result_.data_parallel.bytes_between_hosts[h] / 1e6));
      log_ << fmt::format("bytes sent between hosts per step, as the Programs account them: {} ({} hosts by "
                          "hostname; host 0 is rank 0's)\n",
                          fmt::join(hosts, ", "), result_.data_parallel.bytes_between_hosts.size());
    }
  }
}

// The first step warms caches and pools up; the median of the rest.
void RankTrainer::measure_step_seconds() {
  std::vector<double> seconds = step_seconds_;
  if (seconds.size() > 1) seconds.erase(seconds.begin());
  if (seconds.empty()) return;
  std::nth_element(seconds.begin(), seconds.begin() + static_cast<long>(seconds.size() / 2), seconds.end());
  result_.data_parallel.measured_step_seconds = seconds[seconds.size() / 2];
}

// The lead: the simulator's prediction beside the measurement
// (--local-cluster), and the run directory's summary.
void RankTrainer::summarize_and_predict() {
  // Every rank's peak, for the run directory's summary (collective).
  std::vector<int64_t> peaks{result_.run.peak_tensor_bytes};
  if (!fault_.run_dir.empty() && group_ != nullptr) peaks = gather_peak_bytes(*group_, result_.run.peak_tensor_bytes);
  const bool predicting = !run_.local_cluster.empty();
  if (!lead_ || (!predicting && fault_.run_dir.empty())) return;
  const std::vector<parallel::Program> programs =
      plan::lower_all(plan::lower_request(model_, request_), strategy_);
  std::optional<RunPrediction> predicted;
  if (predicting) {
    predicted = predict_run({.local_cluster = run_.local_cluster,
                             .mpi = launch_.mpi,
                             .bf16 = strategy_.precision == Precision::bf16,
                             .overlap = run_.overlap,
                             .threads = run_.threads,
                             .link_gbps = launch_.link_gbps,
                             .collective = request_.collective,
                             .optimizer_slots = slots_},
                            programs);
    result_.data_parallel.predicted_step_seconds = predicted->step_seconds;
    result_.data_parallel.predicted_peak_bytes = predicted->peak_bytes;
    result_.data_parallel.predicted_activation_peak_bytes = predicted->activation_peak_bytes;
    log_ << describe_prediction(*predicted, result_.data_parallel.measured_step_seconds, double(result_.run.peak_tensor_bytes),
                                 double(result_.data_parallel.activation_peak_bytes));
    metrics_->write({{"predicted_step_s", predicted->step_seconds},
                     {"measured_step_s", result_.data_parallel.measured_step_seconds},
                     {"predicted_peak_bytes", predicted->peak_bytes},
                     {"measured_peak_bytes", result_.run.peak_tensor_bytes},
                     {"predicted_activation_peak_bytes", predicted->activation_peak_bytes},
                     {"measured_activation_peak_bytes", result_.data_parallel.activation_peak_bytes},
                     {"prediction_calibrated", predicted->calibrated}});
  }
  if (fault_.run_dir.empty()) return;
  write_run_summary(fault_.run_dir, run_summary(model_config_, data_, strategy_, programs, result_,
                                                {.unit = task_->unit(),
                                                 .units_per_step = data_.batch * task_->units_per_row(),
                                                 .threads = run_.threads,
                                                 .measured_peak_bytes = peaks,
                                                 .prediction = predicted ? &*predicted : nullptr}));
  log_ << fmt::format("the run's metrics, trace and summary are in '{}' (parallax report {} draws them)\n",
                      fault_.run_dir, fault_.run_dir);
}

}  // namespace px
