// What the GPT step benchmarks (gpt_step.cc, dp_step.cc) share: the peer's
// configs and token batches, process facts for the JSON (RSS, BLAS), and the
// series of timed steps with its clean-step stopping rule and summary, so both
// programs filter and report steps exactly as ../shared/peers/torch does.
// Header-only, used by bench/ programs and by tests/nn/cost_test.cc, which
// checks the graph's op costs against flops_per_step.
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/rng.h"
#include "core/tensor.h"
#include "nn/gpt.h"
#include "parallel/compose.h"
#include "parallel/lower.h"
#include "runtime/tasks/task.h"

namespace px::bench {

struct BenchConfig {
  const char* name;
  px::nn::GptConfig gpt;
  int64_t batch;  // global batch
};

// The peer's CONFIGS (peers/torch/gpt_model.py).
inline BenchConfig config_named(const std::string& key) {
  if (key == "A") return {"gpt-mini", {.vocab = 256, .block = 128, .n_layer = 4, .n_head = 4, .n_embd = 128}, 16};
  if (key == "B")
    return {"gpt-small-ish", {.vocab = 256, .block = 256, .n_layer = 6, .n_head = 6, .n_embd = 384}, 8};
  std::fprintf(stderr, "error: --config '%s' is unknown: expected A (gpt-mini) or B (gpt-small)\n", key.c_str());
  std::exit(2);
}

// The trainer's program for `cfg` on `ranks` data-parallel ranks, as the
// peer trains: AdamW weight decay on every parameter, no clipping (so no
// global norm), buckets of `bucket_bytes`.
inline px::parallel::Program bench_program(const px::nn::Model& model, int ranks, int rank, int64_t bucket_bytes,
                                           bool decay_all, px::Precision precision = px::Precision::fp32) {
  px::parallel::Strategy strategy = px::parallel::data_parallel(ranks, px::nn::batch_input_names(model));
  strategy.precision = precision;  // the lowering stamps the graph it lowers (graph/precision.h)
  strategy.lowering.bucket_bytes = bucket_bytes;
  strategy.lowering.global_norm = false;
  px::parallel::Program program = px::parallel::lower({.forward = &model.graph, .loss = model.loss, .outputs = {}}, strategy, rank);
  if (decay_all)
    for (px::parallel::ParamLayout& p : program.params) p.weight_decay = true;
  return program;
}

// A pool of `count` random global batches: (inputs, next tokens), each (B, T) i32.
inline std::vector<std::pair<Tensor, Tensor>> random_token_batches(const BenchConfig& cfg, int count = 32) {
  px::Rng rng(1234);
  std::vector<std::pair<Tensor, Tensor>> batches;
  const int64_t B = cfg.batch, T = cfg.gpt.block;
  for (int k = 0; k < count; ++k) {
    std::vector<int32_t> seq(static_cast<size_t>(B * (T + 1)));
    for (auto& s : seq) s = static_cast<int32_t>(rng.below(static_cast<uint64_t>(cfg.gpt.vocab)));
    std::vector<int32_t> x, y;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        x.push_back(seq[static_cast<size_t>(b * (T + 1) + t)]);
        y.push_back(seq[static_cast<size_t>(b * (T + 1) + t + 1)]);
      }
    batches.emplace_back(Tensor::from_vector({B, T}, x), Tensor::from_vector({B, T}, y));
  }
  return batches;
}

// peers/torch/gpt_model.py flops_per_step: 6 * matmul params * tokens (wpe is
// a lookup; wte counted once, as the tied LM head) + 12 * L * T * C * tokens
// for QK^T and AV over the full T x T.
inline double flops_per_step(const BenchConfig& c, int64_t n_params) {
  const double tokens = double(c.batch * c.gpt.block);
  const double n_matmul = double(n_params - c.gpt.block * c.gpt.n_embd);
  return 6 * n_matmul * tokens + 12.0 * double(c.gpt.n_layer * c.gpt.block * c.gpt.n_embd) * tokens;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

inline double rss_now_mib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return -1;
}

inline double peak_rss_mib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;  // KiB on Linux
}

inline std::vector<std::string> blas_in_use() {
  std::ifstream in("/proc/self/maps");
  std::set<std::string> libs;
  std::string line;
  while (std::getline(in, line)) {
    auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    std::string path = line.substr(slash);
    if (path.find("blas") != std::string::npos || path.find("lapack") != std::string::npos) libs.insert(path);
  }
  return {libs.begin(), libs.end()};
}

struct TimedStep {
  double step_s = 0;                  // forward, backward, gradient reduction and optimizer: one executor run
  double foreign = 0, run_delay = 0;  // contention.h
  bool clean = false;
};

// The timed steps of one run. Timing goes on until `steps` clean steps are in,
// bounded by `max_steps` and by `max_time` seconds of timing (not counting
// settle() pauses; twice that counting them). The median is over clean steps
// when there are at least max(3, steps / 4), else over all.
class StepSeries {
 public:
  StepSeries(int steps, int max_steps, double max_time) : steps_(steps), max_steps_(max_steps), max_time_(max_time) {}

  void add(const TimedStep& s) { all_.push_back(s); }
  bool done(double elapsed_s, double paused_s) const {
    const int n = static_cast<int>(all_.size());
    if (n >= steps_ && clean_count() >= steps_) return true;
    return n >= max_steps_ || elapsed_s - paused_s > max_time_ || elapsed_s > 2 * max_time_;
  }
  int clean_count() const {
    return static_cast<int>(std::count_if(all_.begin(), all_.end(), [](const TimedStep& s) { return s.clean; }));
  }
  bool use_clean() const { return clean_count() >= std::max(3, steps_ / 4); }
  // Median of a field over the steps the summary uses (or over all of them).
  double median_of(double TimedStep::*field, bool over_all = false) const {
    std::vector<double> xs;
    for (const TimedStep& s : all_)
      if (over_all || !use_clean() || s.clean) xs.push_back(s.*field);
    return median(xs);
  }
  // The keys both programs share with the peers' JSON.
  nlohmann::json summary() const {
    double min_s = 1e30, max_s = 0, foreign_sum = 0;
    nlohmann::json per_step = nlohmann::json::array();
    for (const TimedStep& s : all_) {
      foreign_sum += s.foreign;
      if (!use_clean() || s.clean) min_s = std::min(min_s, s.step_s), max_s = std::max(max_s, s.step_s);
      per_step.push_back({std::round(s.step_s * 1e5) / 100, std::round(s.foreign * 1e4) / 1e4,
                          std::round(s.run_delay * 1e4) / 1e4, s.clean});
    }
    return {{"timed_steps", all_.size()},
            {"clean_steps", clean_count()},
            {"median_is_over", use_clean() ? "clean" : "all (too few clean steps)"},
            {"median_all_ms", median_of(&TimedStep::step_s, true) * 1e3},
            {"foreign_frac_mean", foreign_sum / double(all_.size())},
            {"median_ms", median_of(&TimedStep::step_s) * 1e3},
            {"min_ms", min_s * 1e3},
            {"max_ms", max_s * 1e3},
            {"per_step", per_step}};  // [ms, foreign frac, run delay, clean]
  }

 private:
  int steps_, max_steps_;
  double max_time_;
  std::vector<TimedStep> all_;
};

}  // namespace px::bench
