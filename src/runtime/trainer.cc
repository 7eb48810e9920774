#include "runtime/trainer.h"

#include <cmath>
#include <fstream>
#include <map>

#include "core/rng.h"
#include "data/sampler.h"
#include "kernels/elementwise.h"
#include "kernels/threads.h"
#include "runtime/checkpoint.h"
#include "runtime/compiled_model.h"
#include "runtime/progress.h"
#include "runtime/sampling.h"

// The kernel set OpenBLAS runs (it honours OPENBLAS_CORETYPE), for the log.
extern "C" char* openblas_get_corename(void);

namespace px {
namespace {

std::map<std::string, bool> decay_flags(const Graph& g) {
  std::map<std::string, bool> out;
  for (ValueId p : g.params()) out[g.value(p).name] = g.value(p).weight_decay;
  return out;
}

// Scales every gradient so their global L2 norm is at most `clip`; returns the norm before.
double clip_gradients(std::map<std::string, Tensor>& grads, double clip) {
  double sq = 0;
  for (auto& [name, g] : grads) sq += kernels::sum_squares(g.numel(), g.f32());
  double norm = std::sqrt(sq);
  if (clip > 0 && norm > clip) {
    float s = static_cast<float>(clip / (norm + 1e-6));
    for (auto& [name, g] : grads) kernels::scale(g.numel(), s, g.f32(), g.f32());
  }
  return norm;
}

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

TrainResult train(TrainOptions o, std::ostream& log) {
  kernels::set_threads(o.threads);
  Checkpoint resumed;
  if (!o.resume.empty()) {
    resumed = load_checkpoint(o.resume);
    apply_model_json(resumed.state.at("config"), o);
  }
  validate(o);
  std::unique_ptr<Task> task = make_task(o);
  int64_t total = o.steps > 0 ? o.steps : o.epochs * task->steps_per_epoch();
  o.schedule.total = total;

  nn::Model shape_model = task->build(1, false);
  ParamStore params = ParamStore::initialize(shape_model.graph, o.seed);
  Optimizer optimizer(o.optimizer, params, decay_flags(shape_model.graph));
  int64_t step = 0;
  if (!o.resume.empty()) {
    params.load(resumed.model);
    step = resumed.state.at("step").get<int64_t>();
    optimizer.load_state(resumed.optimizer, resumed.state.at("optimizer_steps").get<int64_t>());
    task->restore_data_state(resumed.state.at("data"));
    log << fmt::format("resumed from '{}' at step {}\n", o.resume, step);
  }
  log << fmt::format("model {} with {} parameters; {} steps of batch {}{}; threads {}; BLAS {}\n", o.model,
                     params.count(), total, o.batch,
                     o.accumulation > 1 ? fmt::format(" ({} micro-batches)", o.accumulation) : "", o.threads,
                     openblas_get_corename());

  MetricsLog metrics(o.metrics, !o.resume.empty());
  auto save = [&](int64_t at_step) {
    if (o.save.empty()) return;
    nlohmann::json state{{"step", at_step},
                         {"config", model_json(o)},
                         {"data", task->data_state()},
                         {"optimizer", o.optimizer.kind},
                         {"optimizer_steps", optimizer.steps()}};
    save_checkpoint(o.save, params, optimizer, state);
  };

  std::map<int64_t, std::unique_ptr<CompiledModel>> models;  // by micro-batch rows
  auto model_for = [&](int64_t rows) -> CompiledModel& {
    auto& m = models[rows];
    if (!m) m = std::make_unique<CompiledModel>(task->build(rows, true), true);
    return *m;
  };

  TrainResult result;
  Progress progress(total, step, task->unit(), o.progress_bar, log);
  auto evaluate = [&](int64_t at_step) {
    Evaluation e = task->evaluate(params);
    nlohmann::json line{{"step", at_step}, {"val_loss", e.loss}};
    std::string text = fmt::format("eval at step {}: val_loss {:.4f}", at_step, e.loss);
    if (e.accuracy >= 0) {
      line["val_accuracy"] = e.accuracy;
      text += fmt::format(", val_accuracy {:.2f}%", 100 * e.accuracy);
    }
    metrics.write(line);
    progress.message(text);
    return e;
  };

  const int64_t end = o.stop_after > 0 ? std::min(o.stop_after, total) : total;
  for (; step < end; ++step) {
    DataBatch batch = task->next_batch();
    const int64_t rows = batch.rows();
    std::map<std::string, Tensor> grads;
    double loss = 0;
    for (int64_t micro = 0; micro < o.accumulation; ++micro) {
      RowRange r = shard_rows(rows, static_cast<int>(micro), static_cast<int>(o.accumulation));
      if (r.size() == 0) continue;
      uint64_t seed = splitmix64(o.seed ^ splitmix64(static_cast<uint64_t>(step) * 1024 + micro));
      StepOutput out = model_for(r.size()).run(params, batch.inputs.slice_rows(r.begin, r.end),
                                               batch.targets.slice_rows(r.begin, r.end), seed);
      double weight = double(r.size()) / double(rows);
      loss += weight * out.loss;
      result.peak_tensor_bytes = std::max(result.peak_tensor_bytes, out.peak_bytes);
      for (auto& [name, g] : out.grads) {
        if (o.accumulation > 1) kernels::scale(g.numel(), static_cast<float>(weight), g.f32(), g.f32());
        auto it = grads.find(name);
        if (it == grads.end()) grads.emplace(name, g);
        else kernels::add_inplace(g.numel(), g.f32(), it->second.f32());
      }
    }
    if (!std::isfinite(loss))
      fail("training diverged at step {}: loss is {} (lower the learning rate {} or enable --grad-clip)", step + 1,
           loss, o.schedule.lr);
    double norm = clip_gradients(grads, o.grad_clip);
    double lr = o.schedule.at(step);
    optimizer.step(params, grads, lr);

    result.losses.push_back(loss);
    result.last_train_loss = loss;
    metrics.write({{"step", step + 1}, {"train_loss", loss}, {"lr", lr}, {"grad_norm", norm},
                   {"time_s", progress.elapsed_seconds()}});
    progress.update(step + 1, loss, rows * task->units_per_row());
    bool last = step + 1 == end;
    if (o.eval_every > 0 && (step + 1) % o.eval_every == 0 && !last) evaluate(step + 1);
    if (o.save_every > 0 && (step + 1) % o.save_every == 0 && !last) save(step + 1);
  }
  progress.finish();
  result.steps = step;
  result.seconds = progress.elapsed_seconds();
  result.evaluation = evaluate(step);
  save(step);
  if (!o.save.empty()) log << fmt::format("saved checkpoint to '{}'\n", o.save);
  log << fmt::format("trained {} steps in {:.1f} s; peak tensor memory {:.1f} MiB\n", result.losses.size(),
                     result.seconds, double(result.peak_tensor_bytes) / (1 << 20));
  if (o.model == "gpt" && o.sample_tokens > 0) {
    SampleOptions so{.tokens = o.sample_tokens, .temperature = 0.8, .top_k = 40, .seed = o.seed};
    log << "sample:\n" << o.prompt << sample_text(o.gpt, params, o.prompt, so) << "\n";
  }
  return result;
}

}  // namespace px
