// px_bench_gpt_step: times full GPT training steps (forward + backward +
// AdamW, one ProgramExecutor run) the way ../shared/peers/torch/gpt_step.py times PyTorch's, and prints
// one JSON line with the same keys (median_ms, peak_rss_mib, achieved_gflops).
//
//   px_bench_gpt_step --config A|B --threads N [--warmup 3] [--steps 20]
//                     [--max-steps 200] [--max-time 360] [--decay all|matrices]
//                     [--seed 0] [--json FILE] [--precision fp32|bf16]
//
// --precision bf16 builds the model as `parallax train --precision bf16`
// does: its GEMMs stamped bf16 (graph/precision.h), operands rounded to
// bf16 with fp32 accumulation; weights, gradients and AdamW fp32.
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
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/blas_core_exec.h"
#include "contention.h"
#include "gpt_bench.h"
#include "core/error.h"
#include "graph/precision.h"
#include "kernels/cpu_features.h"
#include "kernels/threads.h"
#include "nn/gpt.h"
#include "runtime/executor/program_executor.h"
#include "runtime/optimizer/optimizer.h"
#include "runtime/state/param_store.h"

namespace {

using px::bench::BenchConfig;

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
  std::string precision = "fp32";
};

[[noreturn]] void usage(int code) {
  std::fprintf(code ? stderr : stdout,
               "usage: px_bench_gpt_step --config A|B --threads N [--warmup 3] [--steps 20] [--max-steps 200]\n"
               "                         [--max-time 360] [--decay all|matrices] [--seed 0] [--json FILE]\n"
               "                         [--precision fp32|bf16]\n");
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
      else if (k == "--precision") a.precision = v;
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
  if (a.precision != "fp32" && a.precision != "bf16") {
    std::fprintf(stderr, "error: --precision '%s' is unknown: expected fp32 or bf16\n", a.precision.c_str());
    std::exit(2);
  }
  if (a.steps < 1 || a.warmup < 0) {
    std::fprintf(stderr, "error: --steps must be >= 1 and --warmup >= 0\n");
    std::exit(2);
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace px::bench;
  px::cli::run_on_this_cpus_blas_core(argv);  // the kernels `parallax train` runs
  const Args args = parse(argc, argv);
  const BenchConfig cfg = config_named(args.config);
  px::kernels::set_threads(args.threads);
  const double rss_start = rss_now_mib();

  const px::Precision precision = px::parse_precision(args.precision);
  if (precision == px::Precision::bf16) {
    try {
      px::kernels::require_avx512_bf16("px_bench_gpt_step --precision bf16");
    } catch (const px::Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 2;
    }
  }
  px::nn::Model model = px::nn::build_gpt(cfg.gpt, cfg.batch, cfg.gpt.block, /*training=*/true);
  px::ParamStore params = px::ParamStore::initialize(model.graph, args.seed);
  const int64_t n_params = params.count();
  px::ProgramExecutor executor(bench_program(model, 1, 0, px::parallel::kDefaultBucketBytes, args.decay == "all", precision),
                               {}, {.kind = "adamw", .weight_decay = 0.01});
  executor.set_parameters(params);
  const auto batches = random_token_batches(cfg);
  const int64_t B = cfg.batch, T = cfg.gpt.block;
  const double rss_build = rss_now_mib();

  StepSeries steps(args.steps, args.max_steps, args.max_time);
  std::vector<double> losses;
  int64_t peak_tensor_bytes = 0;
  double paused_s = 0, t_begin = -1, self_delay = 1e30;
  Meter meter;
  settle();
  for (int i = 0;; ++i) {
    const auto& [x, y] = batches[static_cast<size_t>(i) % batches.size()];
    meter.start();
    double t0 = now_s();
    px::StepResult out = executor.run({.feeds = px::feeds_of(model, {x, y}),
                                       .seed = static_cast<uint64_t>(i),
                                       .step = static_cast<uint64_t>(i),
                                       .lr = 3e-4});
    double t1 = now_s();
    meter.stop();
    losses.push_back(out.loss);
    peak_tensor_bytes = std::max(peak_tensor_bytes, out.peak_bytes);
    if (i < args.warmup) {
      self_delay = std::min(self_delay, meter.run_delay);
      continue;
    }
    if (t_begin < 0) t_begin = t0;
    if (args.warmup == 0) self_delay = 0;
    const bool ok = meter.clean(args.threads, self_delay);
    steps.add({t1 - t0, meter.foreign, meter.run_delay, ok});
    if (!ok) paused_s += settle();
    if (steps.done(now_s() - t_begin, paused_s)) break;
  }

  const double med_s = steps.median_of(&TimedStep::step_s);
  const double flops = flops_per_step(cfg, n_params);
  nlohmann::json res{
      {"bench", "gpt_step"}, {"system", "parallax"}, {"config", args.config}, {"name", cfg.name},
      {"precision", args.precision},
      {"vocab", cfg.gpt.vocab}, {"block", cfg.gpt.block}, {"n_layer", cfg.gpt.n_layer},
      {"n_head", cfg.gpt.n_head}, {"n_embd", cfg.gpt.n_embd}, {"batch", cfg.batch}, {"threads", args.threads},
      {"warmup", args.warmup}, {"steps", args.steps}, {"paused_s", paused_s}, {"self_run_delay", self_delay},
      {"weight_decay", 0.01}, {"decay", args.decay}, {"params", n_params},
      {"tokens_per_s", double(B * T) / med_s}, {"approx_gflop_per_step", flops / 1e9},
      {"achieved_gflops", flops / med_s / 1e9}, {"loss_first", losses.front()}, {"loss_last", losses.back()},
      {"rss_start_mib", rss_start}, {"rss_after_build_mib", rss_build}, {"peak_rss_mib", peak_rss_mib()},
      {"peak_tensor_mib", double(peak_tensor_bytes) / (1 << 20)}, {"blas_libs", blas_in_use()}};
  res.update(steps.summary());
  std::cout << res.dump() << std::endl;
  std::fprintf(stderr,
               "[px_bench_gpt_step] config %s (%s) %s threads=%d params=%lld median %.1f ms/step, %.0f tok/s, "
               "~%.1f GFLOP/s, peak RSS %.0f MiB, clean steps %d/%zu (median all %.1f)\n",
               args.config.c_str(), cfg.name, args.precision.c_str(), args.threads, static_cast<long long>(n_params), med_s * 1e3,
               double(B * T) / med_s,
               flops / med_s / 1e9, peak_rss_mib(), steps.clean_count(), res["timed_steps"].get<size_t>(),
               res["median_all_ms"].get<double>());
  if (!args.json.empty()) std::ofstream(args.json, std::ios::app) << res.dump() << "\n";
  return 0;
}
