// px_bench_gpt_step: times full GPT training steps (forward + backward +
// AdamW) the way ../shared/peers/torch/gpt_step.py times PyTorch's, and prints
// one JSON line with the same keys (median_ms, peak_rss_mib, achieved_gflops).
//
//   px_bench_gpt_step --config A|B --threads N [--warmup 3] [--steps 20]
//                     [--max-steps 200] [--max-time 360] [--decay all|matrices]
//                     [--seed 0] [--json FILE]
//
// Run one (config, threads) per process so peak RSS belongs to that run alone.
// As the peer: AdamW lr 3e-4, betas (0.9, 0.999), eps 1e-8, weight decay 0.01
// on every parameter (--decay all, torch.optim.AdamW(model.parameters())), no
// gradient clipping; a pool of 32 random token batches, cycled. After --warmup
// untimed steps, steps are timed until --steps of them are clean (no foreign
// CPU load, see contention.h), bounded by --max-steps and --max-time; the
// median is over clean steps when there are enough of them. parallax's own
// threads may wait for each other's cores (pool + BLAS threads), which the
// peer's run-delay rule would count as foreign load; the smallest run delay
// of the warmup steps (taken right after settle()) is that self-delay, and
// timed steps are clean while within it + 2% (reported as self_run_delay).
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "contention.h"
#include "core/rng.h"
#include "kernels/threads.h"
#include "nn/gpt.h"
#include "runtime/compiled_model.h"
#include "runtime/optimizer.h"
#include "runtime/param_store.h"

namespace {

struct BenchConfig {
  const char* name;
  px::nn::GptConfig gpt;
  int64_t batch;
};

// The peer's CONFIGS (peers/torch/gpt_model.py).
BenchConfig config_named(const std::string& key) {
  if (key == "A") return {"gpt-mini", {.vocab = 256, .block = 128, .n_layer = 4, .n_head = 4, .n_embd = 128}, 16};
  if (key == "B")
    return {"gpt-small-ish", {.vocab = 256, .block = 256, .n_layer = 6, .n_head = 6, .n_embd = 384}, 8};
  std::fprintf(stderr, "error: --config '%s' is unknown: expected A (gpt-mini) or B (gpt-small)\n", key.c_str());
  std::exit(2);
}

struct Args {
  std::string config;
  int threads = 0;
  int warmup = 3;
  int steps = 20;
  int max_steps = 200;
  double max_time = 360;
  std::string decay = "all";
  uint64_t seed = 0;
  std::string json;
};

[[noreturn]] void usage(int code) {
  std::fprintf(code ? stderr : stdout,
               "usage: px_bench_gpt_step --config A|B --threads N [--warmup 3] [--steps 20] [--max-steps 200]\n"
               "                         [--max-time 360] [--decay all|matrices] [--seed 0] [--json FILE]\n");
  std::exit(code);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "--help" || k == "-h") usage(0);
    if (i + 1 >= argc) {
      std::fprintf(stderr, "error: %s needs a value\n", k.c_str());
      usage(2);
    }
    std::string v = argv[++i];
    try {
      if (k == "--config") a.config = v;
      else if (k == "--threads") a.threads = std::stoi(v);
      else if (k == "--warmup") a.warmup = std::stoi(v);
      else if (k == "--steps") a.steps = std::stoi(v);
      else if (k == "--max-steps") a.max_steps = std::stoi(v);
      else if (k == "--max-time") a.max_time = std::stod(v);
      else if (k == "--decay") a.decay = v;
      else if (k == "--seed") a.seed = std::stoull(v);
      else if (k == "--json") a.json = v;
      else {
        std::fprintf(stderr, "error: unknown option %s\n", k.c_str());
        usage(2);
      }
    } catch (const std::exception&) {
      std::fprintf(stderr, "error: %s '%s' is not a number\n", k.c_str(), v.c_str());
      std::exit(2);
    }
  }
  if (a.config.empty() || a.threads < 1) {
    std::fprintf(stderr, "error: --config and --threads (>= 1) are required\n");
    usage(2);
  }
  if (a.decay != "all" && a.decay != "matrices") {
    std::fprintf(stderr, "error: --decay '%s' is unknown: expected all or matrices\n", a.decay.c_str());
    std::exit(2);
  }
  if (a.steps < 1 || a.warmup < 0) {
    std::fprintf(stderr, "error: --steps must be >= 1 and --warmup >= 0\n");
    std::exit(2);
  }
  return a;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double rss_now_mib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return -1;
}

double peak_rss_mib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;  // KiB on Linux
}

std::vector<std::string> blas_in_use() {
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

// peers/torch/gpt_model.py flops_per_step: 6 * matmul params * tokens (wpe is
// a lookup; wte counted once, as the tied LM head) + 12 * L * T * C * tokens
// for QK^T and AV over the full T x T.
double flops_per_step(const BenchConfig& c, int64_t n_params) {
  const double tokens = double(c.batch * c.gpt.block);
  const double n_matmul = double(n_params - c.gpt.block * c.gpt.n_embd);
  return 6 * n_matmul * tokens + 12.0 * double(c.gpt.n_layer * c.gpt.block * c.gpt.n_embd) * tokens;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  const BenchConfig cfg = config_named(args.config);
  px::kernels::set_threads(args.threads);
  const double rss_start = rss_now_mib();

  px::nn::Model model = px::nn::build_gpt(cfg.gpt, cfg.batch, cfg.gpt.block, /*training=*/true);
  std::map<std::string, bool> decays;
  for (px::ValueId p : model.graph.params())
    decays[model.graph.value(p).name] = args.decay == "all" || model.graph.value(p).weight_decay;
  px::ParamStore params = px::ParamStore::initialize(model.graph, args.seed);
  const int64_t n_params = params.count();
  px::CompiledModel compiled(std::move(model), /*training=*/true);
  px::Optimizer optimizer({.kind = "adamw", .weight_decay = 0.01}, params, decays);

  // A pool of 32 random batches (B, T) of tokens and next tokens, cycled.
  px::Rng rng(1234);
  std::vector<std::pair<px::Tensor, px::Tensor>> batches;
  const int64_t B = cfg.batch, T = cfg.gpt.block;
  for (int k = 0; k < 32; ++k) {
    std::vector<int32_t> seq(static_cast<size_t>(B * (T + 1)));
    for (auto& s : seq) s = static_cast<int32_t>(rng.below(static_cast<uint64_t>(cfg.gpt.vocab)));
    std::vector<int32_t> x, y;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        x.push_back(seq[static_cast<size_t>(b * (T + 1) + t)]);
        y.push_back(seq[static_cast<size_t>(b * (T + 1) + t + 1)]);
      }
    batches.emplace_back(px::Tensor::from_vector({B, T}, x), px::Tensor::from_vector({B, T}, y));
  }
  const double rss_build = rss_now_mib();

  struct Step {
    double step_s, run_s, opt_s, foreign, run_delay;
    bool clean;
  };
  std::vector<Step> steps;
  std::vector<double> losses;
  int64_t peak_tensor_bytes = 0;
  double paused_s = 0, t_begin = -1, self_delay = 1e30;
  px::bench::Meter meter;
  px::bench::settle();
  for (int i = 0;; ++i) {
    const auto& [x, y] = batches[static_cast<size_t>(i) % batches.size()];
    meter.start();
    double t0 = px::bench::now_s();
    px::StepOutput out = compiled.run(params, x, y, static_cast<uint64_t>(i));
    double t1 = px::bench::now_s();
    optimizer.step(params, out.grads, 3e-4);
    double t2 = px::bench::now_s();
    meter.stop();
    losses.push_back(out.loss);
    peak_tensor_bytes = std::max(peak_tensor_bytes, out.peak_bytes);
    if (i < args.warmup) {
      self_delay = std::min(self_delay, meter.run_delay);
      continue;
    }
    if (t_begin < 0) t_begin = t0;
    if (args.warmup == 0) self_delay = 0;
    bool ok = meter.clean(args.threads, self_delay);
    steps.push_back({t2 - t0, t1 - t0, t2 - t1, meter.foreign, meter.run_delay, ok});
    if (!ok) paused_s += px::bench::settle();
    int n_clean = static_cast<int>(std::count_if(steps.begin(), steps.end(), [](const Step& s) { return s.clean; }));
    if (static_cast<int>(steps.size()) >= args.steps && n_clean >= args.steps) break;
    double elapsed = px::bench::now_s() - t_begin;
    if (static_cast<int>(steps.size()) >= args.max_steps || elapsed - paused_s > args.max_time ||
        elapsed > 2 * args.max_time)
      break;
  }

  std::vector<Step> clean;
  for (const Step& s : steps)
    if (s.clean) clean.push_back(s);
  const bool use_clean = static_cast<int>(clean.size()) >= std::max(3, args.steps / 4);
  const std::vector<Step>& use = use_clean ? clean : steps;
  auto med = [&](const std::vector<Step>& v, double Step::*field) {
    std::vector<double> xs;
    for (const Step& s : v) xs.push_back(s.*field);
    return median(xs);
  };
  const double med_s = med(use, &Step::step_s);
  double min_s = 1e30, max_s = 0, foreign_sum = 0;
  for (const Step& s : use) min_s = std::min(min_s, s.step_s), max_s = std::max(max_s, s.step_s);
  for (const Step& s : steps) foreign_sum += s.foreign;
  const double flops = flops_per_step(cfg, n_params);

  nlohmann::json per_step = nlohmann::json::array();
  for (const Step& s : steps)
    per_step.push_back({std::round(s.step_s * 1e5) / 100, std::round(s.foreign * 1e4) / 1e4,
                        std::round(s.run_delay * 1e4) / 1e4, s.clean});
  nlohmann::json res{
      {"bench", "gpt_step"}, {"system", "parallax"}, {"config", args.config}, {"name", cfg.name},
      {"vocab", cfg.gpt.vocab}, {"block", cfg.gpt.block}, {"n_layer", cfg.gpt.n_layer},
      {"n_head", cfg.gpt.n_head}, {"n_embd", cfg.gpt.n_embd}, {"batch", cfg.batch}, {"threads", args.threads},
      {"warmup", args.warmup}, {"steps", args.steps}, {"timed_steps", steps.size()}, {"clean_steps", clean.size()},
      {"median_is_over", use_clean ? "clean" : "all (too few clean steps)"},
      {"median_all_ms", med(steps, &Step::step_s) * 1e3},
      {"foreign_frac_mean", foreign_sum / double(steps.size())}, {"paused_s", paused_s},
      {"self_run_delay", self_delay},
      {"weight_decay", 0.01}, {"decay", args.decay}, {"params", n_params},
      {"median_ms", med_s * 1e3}, {"min_ms", min_s * 1e3}, {"max_ms", max_s * 1e3},
      {"fwd_bwd_median_ms", med(use, &Step::run_s) * 1e3}, {"opt_median_ms", med(use, &Step::opt_s) * 1e3},
      {"tokens_per_s", double(B * T) / med_s}, {"approx_gflop_per_step", flops / 1e9},
      {"achieved_gflops", flops / med_s / 1e9}, {"loss_first", losses.front()}, {"loss_last", losses.back()},
      {"rss_start_mib", rss_start}, {"rss_after_build_mib", rss_build}, {"peak_rss_mib", peak_rss_mib()},
      {"peak_tensor_mib", double(peak_tensor_bytes) / (1 << 20)}, {"per_step", per_step},
      {"blas_libs", blas_in_use()}};
  std::cout << res.dump() << std::endl;
  std::fprintf(stderr,
               "[px_bench_gpt_step] config %s (%s) threads=%d params=%lld median %.1f ms/step (fwd+bwd %.1f / "
               "opt %.1f), %.0f tok/s, ~%.1f GFLOP/s, peak RSS %.0f MiB, clean steps %zu/%zu (median all %.1f)\n",
               args.config.c_str(), cfg.name, args.threads, static_cast<long long>(n_params), med_s * 1e3,
               res["fwd_bwd_median_ms"].get<double>(), res["opt_median_ms"].get<double>(), double(B * T) / med_s,
               flops / med_s / 1e9, peak_rss_mib(), clean.size(), steps.size(),
               res["median_all_ms"].get<double>());
  if (!args.json.empty()) std::ofstream(args.json, std::ios::app) << res.dump() << "\n";
  return 0;
}
