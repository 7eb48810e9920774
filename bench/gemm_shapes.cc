// px_bench_gemm_shapes: the GEMMs of one GPT training step, each timed in
// fp32 (kernels::gemm) and in bf16 (kernels::gemm_bf16, plus the fp32 ->
// bf16 conversions mixed precision adds), at the benchmark configs of
// docs/benchmarks.md. What a bf16 step can gain on its GEMMs, layer by layer.
//
//   px_bench_gemm_shapes [--config A|B] [--threads 1] [--reps 10]
//
// Legend: N = batch x block rows, C width, V vocab, L layers.
// Per linear Y[N,out] = X[N,in] W[in,out]: forward NN (N, out, in), input
// gradient dX = dY W^T NT (N, in, out), weight gradient dW = X^T dY TN
// (in, out, N); the LM head is the tied embedding, logits = X wte^T. A
// linear's conversions in bf16: X, W and dY once each (the backward
// products reuse the forward's bf16 X and W). The attention kernel's own
// per-head products (kernels/attention.cc) are not among them. Best of
// --reps per GEMM; prints one line per GEMM and a JSON line with the
// step's totals.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/bf16.h"
#include "kernels/cpu_features.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "kernels/threads.h"

namespace {

using px::kernels::bf16;

struct Config {
  const char* name;
  int64_t rows, C, V, L;  // rows = batch x block
};

struct Gemm {
  std::string name;
  bool trans_a, trans_b;
  int64_t M, N, K;
  int64_t per_step;       // how many times a step runs it (L for a block's layers)
  int64_t converted = 0;  // floats narrowed to bf16 for it, per run
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

template <typename Run>
double best_seconds(int reps, Run&& run) {
  double best = 1e30;
  for (int r = 0; r <= reps; ++r) {  // r == 0 warms up (and builds oneDNN's primitive)
    const double t0 = now_s();
    run();
    if (r > 0) best = std::min(best, now_s() - t0);
  }
  return best;
}

// A linear [in -> out] of a block: its three products; the forward one
// carries the conversions of X, W and dY.
void add_linear(std::vector<Gemm>& out, const std::string& name, int64_t rows, int64_t in, int64_t width, int64_t L) {
  out.push_back({name + " fwd", false, false, rows, width, in, L, rows * in + in * width + rows * width});
  out.push_back({name + " dX", false, true, rows, in, width, L});
  out.push_back({name + " dW", true, false, in, width, rows, L});
}

std::vector<Gemm> step_gemms(const Config& c) {
  std::vector<Gemm> g;
  add_linear(g, "c_attn", c.rows, c.C, 3 * c.C, c.L);
  add_linear(g, "attn.c_proj", c.rows, c.C, c.C, c.L);
  add_linear(g, "c_fc", c.rows, c.C, 4 * c.C, c.L);
  add_linear(g, "mlp.c_proj", c.rows, 4 * c.C, c.C, c.L);
  g.push_back({"lm_head fwd", false, true, c.rows, c.V, c.C, 1, c.rows * c.C + c.V * c.C + c.rows * c.V});
  g.push_back({"lm_head dX", false, false, c.rows, c.C, c.V, 1});
  g.push_back({"lm_head dW", true, false, c.V, c.C, c.rows, 1});
  return g;
}

struct Timing {
  double fp32, bf16, convert;  // seconds per run
};

Timing time_gemm(const Gemm& g, int reps) {
  const int64_t lda = g.trans_a ? g.M : g.K, ldb = g.trans_b ? g.K : g.N;
  std::vector<float> a(size_t(g.M * g.K)), b(size_t(g.K * g.N)), c(size_t(g.M * g.N));
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(i % 13) * 0.01f - 0.06f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = float(i % 7) * 0.02f - 0.05f;
  std::vector<bf16> a16(a.size()), b16(b.size());
  px::kernels::to_bf16(int64_t(a.size()), a.data(), a16.data());
  px::kernels::to_bf16(int64_t(b.size()), b.data(), b16.data());
  Timing t{};
  t.fp32 = best_seconds(reps, [&] {
    px::kernels::gemm(g.trans_a, g.trans_b, g.M, g.N, g.K, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), g.N);
  });
  t.bf16 = best_seconds(reps, [&] {
    px::kernels::gemm_bf16(g.trans_a, g.trans_b, g.M, g.N, g.K, 1.0f, a16.data(), lda, b16.data(), ldb, 0.0f,
                           c.data(), g.N);
  });
  if (g.converted > 0) {
    std::vector<float> from(size_t(g.converted), 0.5f);
    std::vector<bf16> to(from.size());
    t.convert = best_seconds(reps, [&] { px::kernels::to_bf16(g.converted, from.data(), to.data()); });
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  std::string config = "B";
  int threads = 1, reps = 10;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--help" || k == "-h") {
      std::printf("usage: px_bench_gemm_shapes [--config A|B] [--threads 1] [--reps 10]\n");
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "error: %s needs a value\n", k.c_str());
      return 2;
    }
    const std::string v = argv[++i];
    if (k == "--config") config = v;
    else if (k == "--threads") threads = std::atoi(v.c_str());
    else if (k == "--reps") reps = std::atoi(v.c_str());
    else {
      std::fprintf(stderr, "error: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if ((config != "A" && config != "B") || threads < 1 || reps < 1) {
    std::fprintf(stderr, "error: --config must be A or B, --threads and --reps >= 1\n");
    return 2;
  }
  if (!px::kernels::cpu_has_avx512_bf16()) {
    std::fprintf(stderr, "error: this CPU has no AVX512_BF16: no bf16 GEMM to compare\n");
    return 1;
  }
  // The configs of bench/gpt_step.cc: A gpt-mini (batch 16, block 128), B gpt-small (batch 8, block 256).
  const Config c = config == "A" ? Config{"gpt-mini", 16 * 128, 128, 256, 4} : Config{"gpt-small", 8 * 256, 384, 256, 6};
  px::kernels::set_threads(threads);
  double fp32 = 0, bf16 = 0, convert = 0, flops = 0;
  std::printf("%-18s %-6s %18s %9s %9s %9s %8s\n", "gemm", "layout", "M x N x K", "fp32 us", "bf16 us", "conv us",
              "bf16 x");
  for (const Gemm& g : step_gemms(c)) {
    const Timing t = time_gemm(g, reps);
    const std::string layout = std::string(g.trans_a ? "T" : "N") + (g.trans_b ? "T" : "N");
    const std::string shape = std::to_string(g.M) + "x" + std::to_string(g.N) + "x" + std::to_string(g.K);
    std::printf("%-18s %-6s %18s %9.1f %9.1f %9.1f %8.2f\n", g.name.c_str(), layout.c_str(), shape.c_str(),
                1e6 * t.fp32, 1e6 * t.bf16, 1e6 * t.convert, t.fp32 / t.bf16);
    fp32 += double(g.per_step) * t.fp32;
    bf16 += double(g.per_step) * t.bf16;
    convert += double(g.per_step) * t.convert;
    flops += double(g.per_step) * 2.0 * double(g.M) * double(g.N) * double(g.K);
  }
  const nlohmann::json res{{"bench", "gemm_shapes"},
                           {"config", c.name},
                           {"threads", threads},
                           {"step_gemm_ms_fp32", fp32 * 1e3},
                           {"step_gemm_ms_bf16", bf16 * 1e3},
                           {"step_convert_ms_bf16", convert * 1e3},
                           {"gflops_fp32", flops / fp32 / 1e9},
                           {"gflops_bf16", flops / bf16 / 1e9},
                           {"bf16_with_conversions_over_fp32", (bf16 + convert) / fp32}};
  std::cout << res.dump() << std::endl;
  return 0;
}
