#include "runtime/train/trainer.h"
#include "runtime/train/train_rank.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <thread>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include <fmt/ranges.h>

#include "core/rng.h"
#include "data/sampler.h"
#include "kernels/elementwise.h"
#include "kernels/threads.h"
#include "comm/backends.h"
#include "comm/collectives.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/fault/flight_recorder.h"
#include "runtime/fault/watchdog.h"
#include "parallel/lower.h"
#include "parallel/tensor_parallel.h"
#include "core/memory.h"
#include "runtime/fault/memory_guard.h"
#include "runtime/train/memory_report.h"
#include "runtime/parameter_server/parameter_server.h"
#include "runtime/train/prediction.h"
#include "runtime/train/rank_figures.h"
#include "runtime/train/run_summary.h"
#include "plan/simulate.h"
#include "runtime/executor/program_executor.h"
#include "runtime/train/progress.h"
#include "runtime/tasks/sampling.h"

// The kernel set OpenBLAS runs (it honours OPENBLAS_CORETYPE), for the log.
extern "C" char* openblas_get_corename(void);

namespace px {
namespace {

class MetricsLog {
 public:
  MetricsLog(const std::string& path, bool append) {
    if (path.empty()) return;
    out_.open(path, append ? std::ios::app : std::ios::trunc);
    if (!out_) fail("cannot open metrics file '{}' for writing", path);
  }
  void write(const nlohmann::json& line) {
    if (out_.is_open()) out_ << line.dump() << "\n" << std::flush;
  }

 private:
  std::ofstream out_;
};

}  // namespace

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

// One rank's whole job (runtime/train/train_rank.h).
TrainResult train_rank(TrainOptions o, comm::Communicator* group, std::ostream& log, FlightRecorder* recorder,
                       const RankRecovery& recovery) {
  const int rank = group ? group->rank() : 0, world = group ? group->size() : 1;
  const bool lead = rank == 0;
  // A run directory keeps what `parallax report` reads (run_summary.h).
  if (!o.run_dir.empty()) {
    if (o.metrics.empty()) o.metrics = o.run_dir + "/metrics.jsonl";
    if (o.trace.empty()) o.trace = o.run_dir + "/trace.json";
    if (lead) std::filesystem::create_directories(o.run_dir);
  }
  // Where training continues from: a restart's state (in memory), else --resume.
  Checkpoint loaded;
  const Checkpoint* resumed = recovery.restore;
  if (resumed == nullptr && !o.resume.empty()) {
    loaded = load_checkpoint(o.resume);
    resumed = &loaded;
  }
  if (resumed != nullptr) apply_model_json(resumed->state.config, o);
  o.ranks = world;
  validate(o);
  std::unique_ptr<Task> task = make_task(o);
  // This rank's tensors from here on (its dataset is not a step's memory),
  // apart from the other in-process ranks'.
  MemoryAccountScope account(new_memory_account());
  int64_t total = o.steps > 0 ? o.steps : o.epochs * task->steps_per_epoch();
  o.schedule.total = total;

  // The memory guard (memory_guard.h): nothing is allocated for a model
  // that cannot fit; first from its config, then from its Program.
  const int slots = static_cast<int>(optimizer_slot_names(o.optimizer.kind).size());
  check_model_fits(o, world, slots);
  const nn::Model model = task->build(o.batch, true);
  const parallel::Strategy strategy = strategy_for(o, model, world);
  o.optimizer = optimizer_for_strategy(o.optimizer, strategy);
  if (lead && !o.run_dir.empty()) write_run_strategy(o.run_dir, strategy);
  ExecutorOptions run_options{.overlap = o.sync.overlap,
                              .p3_slice_bytes = o.sync.p3_slice_bytes,
                              .bucket_buffers = o.sync.bucket_buffers,
                              .collective = o.sync.collective,
                              .trace = !o.trace.empty()};
  // This rank's group on every mesh axis (tp innermost: consecutive ranks).
  parallel::MeshGroups mesh_groups;
  AxisGroups groups;
  if (group != nullptr) {
    mesh_groups = parallel::make_mesh_groups(*group, strategy.mesh);
    for (comm::Communicator& c : mesh_groups.axis) groups.push_back(&c);
  }
  const int data_axis = strategy.mesh.axis(strategy.data_axis);
  const int data_rank = strategy.mesh.coords(rank)[static_cast<size_t>(data_axis)];
  const int data_ranks = strategy.data_ranks();
  parallel::Program program = parallel::lower({.forward = &model.graph, .loss = model.loss}, strategy, rank);
  // Copies of the training state a checkpoint or a restart keeps: one
  // being written in the background (and the lead's gathered model, at
  // most as large), and with in-memory snapshots two generations of this
  // rank's own and of its buddy's.
  const int state_copies = (o.save.empty() ? 0 : 2) + (recovery.snapshots != nullptr ? 4 : 0);
  check_program_fits(program, o, world, slots, state_copies);
  ProgramExecutor executor(std::move(program), groups, o.optimizer, run_options);
  const bool compressed = executor.compressing();
  executor.set_flight_recorder(recorder);
  recorder->set_phase(RankPhase::running);
  int64_t step = 0;
  int64_t parameter_count = 0;
  for (const parallel::ParamLayout& p : executor.program().params) parameter_count += p.global_shape.numel();
  if (!executor.program().pipeline.params.empty()) {  // every stage's
    parameter_count = 0;
    for (const auto& p : executor.program().pipeline.params) parameter_count += p.shape.numel();
  }
  if (resumed == nullptr) {
    // Every rank draws the same initial parameters; the executor keeps its
    // storage of them (its model shard, or its ZeRO-3 block) and these go.
    executor.set_parameters(ParamStore::initialize(model.graph, o.seed));
  } else {
    step = resumed->state.step;
    executor.load_state(resumed->shards, resumed->state.optimizer_steps);
    task->restore_data_state(resumed->state.data);
    if (compressed) restore_compression_state(*resumed, executor, world, log);
    const auto ranks = [](int n) { return fmt::format("{} rank{}", n, n == 1 ? "" : "s"); };
    log << fmt::format("resumed from {} at step {} (saved at {}, mesh {}; continuing at {}, mesh {})\n",
                       recovery.restore ? resumed->dir : fmt::format("'{}'", resumed->dir), step,
                       ranks(resumed->state.ranks), resumed->state.mesh.empty() ? "?" : resumed->state.mesh,
                       ranks(world), strategy.mesh.str());
  }
  log << fmt::format("model {} with {} parameters; {} steps of batch {}{}; {}threads {}; BLAS {}\n", o.model,
                     parameter_count, total, o.batch,
                     o.accumulation > 1 ? fmt::format(" ({} micro-batches)", o.accumulation) : "",
                     world > 1 ? fmt::format("{} ranks, mesh {} ({}); ", world, strategy.mesh.str(), group->backend())
                               : "",
                     o.threads, openblas_get_corename());
  TrainResult result;
  result.first_step = step;
  const int zero = data_ranks > 1 ? strategy.zero_stage : 0;
  auto memory_now = [&] {
    const ExecutorMemory m = executor.memory();
    return RankMemory{.parameters = static_cast<double>(m.parameters),
                      .gradients = static_cast<double>(m.gradients),
                      .optimizer_state = static_cast<double>(m.optimizer_state)};
  };
  result.memory = memory_now();
  // Ψ here is this rank's model shard (all of it without tensor parallelism).
  const int64_t shard_parameters = executor.program().param_count;
  if (world > 1) log << describe_rank_memory(zero, data_ranks, slots, shard_parameters, result.memory) << "\n";
  if (strategy.mesh.ranks() > data_ranks * strategy.pipeline_ranks()) {
    TensorParallelShare share{.split = 0, .replicated = 0,
                              .ranks = strategy.mesh.ranks() / data_ranks / strategy.pipeline_ranks()};
    for (const parallel::ParamLayout& p : executor.program().params)
      (p.shape == p.global_shape ? share.replicated : share.split) += p.global_shape.numel();
    log << describe_tensor_parallel_share(share, shard_parameters) << "\n";
  }

  // Bad steps, MapReduce's bad-record skipping: a step whose loss or
  // gradients are not finite changes nothing (the executor skips its
  // updates on every rank); its batch runs once more (a transient fault
  // passes), and a batch that fails twice is skipped for good: recorded,
  // saved with checkpoints, and never trained on again. Batches are
  // numbered from 1 in the order drawn; every rank draws and skips alike.
  std::set<int64_t> bad_batches(o.skip_batches.begin(), o.skip_batches.end());
  int64_t batches_drawn = step;  // without skips, step s trains on batch s
  if (resumed != nullptr) {
    batches_drawn = resumed->state.batches.value_or(step);
    bad_batches.insert(resumed->state.bad_batches.begin(), resumed->state.bad_batches.end());
  }
  MetricsLog metrics(lead ? o.metrics : std::string(), resumed != nullptr || o.attempt > 0);
  if (lead) note_restart(o, resumed, step, recovery, metrics);

  // Checkpoints are written in the background (checkpoint.h); with
  // restarts in process, every rank's state is also kept in memory, and a
  // copy at its buddy rank (snapshots.h).
  std::optional<CheckpointWriter> writer;
  if (!o.save.empty()) writer.emplace(o.save, group, o.keep_last);
  // Checkpoint copies are charged to their own account: they are not the
  // step's memory (what the prediction and the memory report describe).
  MemoryAccount* checkpoint_memory = new_memory_account();
  auto save = [&](int64_t at_step, bool last) {
    if (!writer && recovery.snapshots == nullptr) return;
    MemoryAccountScope charged(checkpoint_memory);
    RankSnapshot own{.step = at_step,
                     .state = {.step = at_step,
                               .config = model_json(o),
                               .data = task->data_state(),
                               .optimizer = o.optimizer.kind,
                               .optimizer_steps = executor.optimizer().steps(),
                               .ranks = world,
                               .mesh = strategy.mesh.str(),
                               .batches = batches_drawn,
                               .bad_batches = std::vector<int64_t>(bad_batches.begin(), bad_batches.end()),
                               .saved_at = unix_seconds()},
                     .runs = executor.state_runs()};
    if (compressed) {
      own.state.compression = strategy.lowering.compression.to_string();
      own.compression = executor.gather_compression_state();  // collective: rank 0 gets every rank's
    }
    if (writer) {
      // Collective: the model is gathered whole for model.safetensors (the
      // lead copies it: training goes on while it is written).
      const ParamStore params = executor.parameters();
      CheckpointPart part{.shards = own.runs,
                          .who = {{"mesh", strategy.mesh.str()},
                                  {"coords", nlohmann::json(executor.program().coords).dump()}}};
      if (lead) {
        for (const auto& [name, t] : params.named()) part.model.emplace_back(name, t.clone());
        part.state = own.state;
        part.compression = own.compression;
      }
      writer->save(std::move(part));
      if (last) writer->finish();
    }
    if (recovery.snapshots != nullptr) {
      std::optional<RankSnapshot> copy = group ? exchange_with_buddy(*group, own) : std::nullopt;
      recovery.snapshots->keep(rank, std::move(own), std::move(copy));
    }
  };

  // --trace: steps 2..4 of this run (the first one warms caches and pools up).
  const int64_t trace_begin = step + 1, trace_end = step + 4;
  std::vector<TraceRecord> trace;
  comm::compression::WireStats wire;  // summed over the steps run
  StageMeasurement stage;  // this rank's pipeline measurements
  Progress progress(total, step, task->unit(), o.progress_bar, log);
  // Every rank evaluates a part of the validation batches and the parts'
  // sums are added up: no rank waits in a collective while another
  // evaluates alone (a wait that could outlast --timeout), and the whole
  // set takes 1/world of the time.
  auto evaluate = [&](int64_t at_step) {
    const ParamStore params = executor.parameters();  // collective: every rank gets the whole
    const EvaluationSums part = task->evaluate(params, rank, world);
    EvaluationSums sums = part;
    if (group != nullptr && world > 1) {
      std::array<float, 3> summed{float(part.loss), float(part.weight), float(part.correct < 0 ? 0 : part.correct)};
      comm::allreduce(*group, std::span<float>(summed), comm::Reduction::sum);
      sums = {.loss = summed[0], .weight = summed[1], .correct = part.correct < 0 ? -1 : double(summed[2])};
    }
    const Evaluation e = sums.mean();
    if (!lead) return e;
    nlohmann::json line{{"step", at_step}, {"val_loss", e.loss}, {"time_s", progress.elapsed_seconds()}};
    std::string text = fmt::format("eval at step {}: val_loss {:.4f}", at_step, e.loss);
    if (e.accuracy >= 0) {
      line["val_accuracy"] = e.accuracy;
      text += fmt::format(", val_accuracy {:.2f}%", 100 * e.accuracy);
    }
    metrics.write(line);
    progress.message(text);
    return e;
  };

  // An epoch's partial last batch (classifiers, without --drop-last) runs
  // the same strategy lowered for its rows: the loss is the mean over the
  // rows there are, so every strategy equals one rank on them. Lowered
  // the first time one comes, with the main program's stage cuts.
  const parallel::Strategy partial_strategy = parallel::with_stage_cuts_of(strategy, executor.program());
  auto add_program_for = [&](const DataBatch& batch) {
    if (executor.has_program_for(batch.global_rows)) return;
    const nn::Model partial = task->build(batch.global_rows, true);
    executor.add_program(
        parallel::lower({.forward = &partial.graph, .loss = partial.loss}, partial_strategy, rank));
  };

  const int64_t end = o.stop_after > 0 ? std::min(o.stop_after, total) : total;
  std::vector<double> step_seconds;  // each step's executor run (what the simulator predicts; loading the batch apart)
  std::set<int64_t> poisoned;  // --inject-nan: the batches made non-finite
  int64_t skipped_runs = 0, consecutive_bad = 0;
  const bool can_skip = strategy.lowering.global_norm && o.sync.p3_slice_bytes == 0;
  for (; step < end; ++step) {
    int64_t batch_number = 0;
    nlohmann::json batch_state;  // the data order just before the batch: where it is
    auto draw = [&] {
      do {
        batch_state = task->data_state();
        DataBatch b = task->next_batch(data_rank, data_ranks);
        batch_number = ++batches_drawn;
        if (!bad_batches.contains(batch_number)) return b;
      } while (true);
    };
    DataBatch batch = draw();
    add_program_for(batch);
    if (std::find(o.inject_nan_steps.begin(), o.inject_nan_steps.end(), step + 1) != o.inject_nan_steps.end())
      poisoned.insert(batch_number);
    const uint64_t seed = splitmix64(o.seed ^ splitmix64(static_cast<uint64_t>(step) * 1024));
    recorder->at(step + 1, -1, "");  // between steps
    if (rank == o.inject_fault_rank && step + 1 == o.inject_fault_step && o.attempt == 0)
      inject_fault(o, recorder, group);
    if (rank == o.inject_delay_rank)  // a straggler, for demonstrations (--inject-delay)
      std::this_thread::sleep_for(std::chrono::milliseconds(o.inject_delay_ms));
    executor.set_tracing(step >= trace_begin && step < trace_end);
    const double lr = o.schedule.at(step);
    StepResult out;
    for (int attempt = 1;; ++attempt) {
      const double step_start = progress.elapsed_seconds();
      out = executor.run({.feeds = feeds_of(model, batch),
                          .global_rows = batch.global_rows,
                          .seed = seed,
                          .step = static_cast<uint64_t>(step),
                          .lr = lr,
                          .grad_clip = o.grad_clip,
                          .poison = poisoned.contains(batch_number)});
      step_seconds.push_back(progress.elapsed_seconds() - step_start);
      if (!out.skipped) break;
      ++skipped_runs;
      const bool for_good = attempt == 2;
      std::string text = fmt::format("step {}: loss {}, gradient norm {}: not applied; batch {} (data state {}) {}",
                                     step + 1, out.loss, out.grad_norm, batch_number, batch_state.dump(),
                                     for_good ? "failed twice: skipped for good" : "runs once more");
      metrics.write({{"step", step + 1}, {"skipped_batch", batch_number}, {"attempt", attempt},
                     {"skipped_for_good", for_good}, {"train_loss", out.loss}, {"grad_norm", out.grad_norm},
                     {"data_state", batch_state}});
      progress.message(text);
      if (!for_good) continue;
      bad_batches.insert(batch_number);
      if (++consecutive_bad == 8)
        fail("training diverged at step {}: 8 batches in a row failed twice (the last, batch {}, with loss {} and "
             "gradient norm {}); lower the learning rate {} or enable --grad-clip",
             step + 1, batch_number, out.loss, out.grad_norm, o.schedule.lr);
      batch = draw();
      add_program_for(batch);
      attempt = 0;
    }
    consecutive_bad = 0;
    wire += out.wire;
    for (TraceRecord& r : executor.take_trace()) trace.push_back(std::move(r));
    result.peak_tensor_bytes = std::max(result.peak_tensor_bytes, out.peak_bytes);
    result.activation_peak_bytes = std::max(result.activation_peak_bytes, out.activation_peak_bytes);
    if (step > trace_begin - 1) {  // the first step of a run warms caches and pools up
      stage.busy_us += out.pipeline_busy_us;
      stage.span_us += out.pipeline_span_us;
    }
    const double loss = out.loss;
    if (!std::isfinite(loss))  // only a program without a global norm gets here (P3)
      fail("training diverged at step {}: loss is {} (lower the learning rate {}{})", step + 1, loss,
           o.schedule.lr,
           can_skip ? "" : "; P3 updates before the global norm is known, so it cannot skip bad steps");
    result.losses.push_back(loss);
    result.last_train_loss = loss;
    nlohmann::json line{{"step", step + 1}, {"train_loss", loss}, {"lr", lr}, {"grad_norm", out.grad_norm},
                        {"time_s", progress.elapsed_seconds()}, {"step_s", step_seconds.back()}};
    if (world > 1) {
      line["wire_bytes"] = out.wire.bytes_sent;
      for (size_t a = 0; a < out.axis_bytes.size(); ++a) {
        const std::string& axis = strategy.mesh.axes()[a].name;
        line["bytes_sent"][axis] = out.axis_bytes[a];
        result.bytes_per_axis[axis] = out.axis_bytes[a];
      }
    }
    metrics.write(line);
    progress.update(step + 1, loss, batch.global_rows * task->units_per_row());
    bool last = step + 1 == end;
    const bool eval_now = o.eval_every > 0 && (step + 1) % o.eval_every == 0 && !last;
    const bool save_now = o.save_every > 0 && (step + 1) % o.save_every == 0 && !last;
    if (eval_now || save_now) executor.finish();
    if (eval_now) evaluate(step + 1);
    if (save_now) save(step + 1, false);
  }
  executor.finish();
  progress.finish();
  if (!o.trace.empty()) {
    write_chrome_trace(o.trace, group, trace);
    log << fmt::format("wrote a trace of steps {}-{} to '{}' (open it in https://ui.perfetto.dev)\n", trace_begin + 1,
                       std::min(trace_end, end), o.trace);
  }
  result.steps = step;
  result.seconds = progress.elapsed_seconds();
  result.skipped_runs = skipped_runs;
  result.bad_batches.assign(bad_batches.begin(), bad_batches.end());
  if (skipped_runs > 0)
    log << fmt::format("bad steps: {} step run{} not applied (non-finite loss or gradients); batches skipped for "
                       "good: {}\n",
                       skipped_runs, skipped_runs == 1 ? "" : "s", fmt::join(result.bad_batches, ", "));
  if (strategy.pipeline_ranks() > 1) {
    stage.activation_peak_bytes = result.activation_peak_bytes;
    stage.stashed_bytes_per_micro_batch = executor.stashed_bytes_per_micro_batch();
    result.pipeline_stages = gather_stage_measurements(*group, strategy, stage);
    log << describe_measured_pipeline(executor.program().pipeline, result.pipeline_stages);
  }
  result.evaluation = evaluate(step);
  save(step, true);
  if (!o.save.empty() && lead) log << fmt::format("saved checkpoint to '{}'\n", o.save);
  if (checkpoint_memory->stats().peak_bytes > 0)
    log << fmt::format("checkpoint copies held beside training: at most {:.1f} MiB ({})\n",
                       double(checkpoint_memory->stats().peak_bytes) / (1 << 20),
                       recovery.snapshots != nullptr ? "snapshots in memory, the buddy's copy and background writes"
                                                     : "background writes");
  log << fmt::format("trained {} steps in {:.1f} s; peak tensor memory {:.1f} MiB, of it forward activations {:.1f} "
                     "MiB{}\n",
                     result.losses.size(), result.seconds, double(result.peak_tensor_bytes) / (1 << 20),
                     double(result.activation_peak_bytes) / (1 << 20),
                     strategy.lowering.recompute == parallel::Recompute::none
                         ? ""
                         : fmt::format(" (recompute {})", parallel::recompute_name(strategy.lowering.recompute)));
  const ExecutorMemory memory = executor.memory();
  result.gradient_buffer_peak_bytes = memory.gradient_buffer_peak;
  result.gathered_parameter_peak_bytes = memory.gathered_parameter_peak;
  if (zero >= 2)
    log << fmt::format("ZeRO-{} bucket buffers: at most {:.2f} MiB alive at once (up to {} buckets of ~{:.2f} MiB)\n",
                       zero, double(result.gradient_buffer_peak_bytes) / (1 << 20), o.sync.bucket_buffers,
                       double(strategy.lowering.bucket_bytes) / (1 << 20));
  if (zero >= 3)
    log << fmt::format("ZeRO-3 gathered parameters: at most {:.2f} MiB alive at once beside the {:.2f} MiB shard\n",
                       double(result.gathered_parameter_peak_bytes) / (1 << 20),
                       result.memory.parameters / (1 << 20));
  if (world > 1 && !result.losses.empty()) {
    const double n = static_cast<double>(result.losses.size());
    log << fmt::format("gradient bytes on the wire per step (rank 0): {:.3f} MB; a float32 ring allreduce sends "
                       "{:.3f} MB ({:.1f}x {})\n",
                       double(wire.bytes_sent) / n / 1e6, double(wire.dense_bytes) / n / 1e6, wire.reduction(),
                       strategy.lowering.compression.method == comm::compression::Method::none
                           ? "- uncompressed"
                           : "fewer with " + strategy.lowering.compression.to_string());
  }
  // The first step warms caches and pools up; the median of the rest.
  if (step_seconds.size() > 1) step_seconds.erase(step_seconds.begin());
  if (!step_seconds.empty()) {
    std::nth_element(step_seconds.begin(), step_seconds.begin() + static_cast<long>(step_seconds.size() / 2),
                     step_seconds.end());
    result.measured_step_seconds = step_seconds[step_seconds.size() / 2];
  }
  // Every rank's peak, for the run directory's summary (collective).
  std::vector<int64_t> peaks{result.peak_tensor_bytes};
  if (!o.run_dir.empty() && group != nullptr) peaks = gather_peak_bytes(*group, result.peak_tensor_bytes);
  const bool predicting = !o.local_cluster.empty();
  if (lead && (predicting || !o.run_dir.empty())) {
    const std::vector<parallel::Program> programs =
        plan::lower_all({.forward = &model.graph, .loss = model.loss}, strategy);
    std::optional<RunPrediction> predicted;
    if (predicting) {
      predicted = predict_run(o, programs);
      result.predicted_step_seconds = predicted->step_seconds;
      result.predicted_peak_bytes = predicted->peak_bytes;
      log << describe_prediction(*predicted, result.measured_step_seconds, double(result.peak_tensor_bytes));
      metrics.write({{"predicted_step_s", predicted->step_seconds},
                     {"measured_step_s", result.measured_step_seconds},
                     {"predicted_peak_bytes", predicted->peak_bytes},
                     {"measured_peak_bytes", result.peak_tensor_bytes},
                     {"prediction_calibrated", predicted->calibrated}});
    }
    if (!o.run_dir.empty()) {
      write_run_summary(o.run_dir, run_summary(o, strategy, programs, result,
                                               {.unit = task->unit(),
                                                .units_per_step = o.batch * task->units_per_row(),
                                                .measured_peak_bytes = peaks,
                                                .prediction = predicted ? &*predicted : nullptr}));
      log << fmt::format("the run's metrics, trace and summary are in '{}' (parallax report {} draws them)\n",
                         o.run_dir, o.run_dir);
    }
  }
  if (o.model == "gpt" && o.sample_tokens > 0) {
    const ParamStore params = executor.parameters();
    SampleOptions so{.tokens = o.sample_tokens, .temperature = 0.8, .top_k = 40, .seed = o.seed};
    if (lead) log << "sample:\n" << o.prompt << sample_text(o.gpt, params, o.prompt, so) << "\n";
  }
  return result;
}

}  // namespace px
