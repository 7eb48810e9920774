// px_bench_attention: the tiled attention kernels (kernels/attention.h),
// forward and backward, at one size, beside the GEMM rate of the same
// precision measured in the same run. bench/compare_attention.sh runs it
// per sequence length next to PyTorch's explicit attention.
//
//   px_bench_attention --T 1024 [--B 8] [--H 6] [--D 64] [--precision fp32|bf16] [--threads 1] [--reps 3]
//
// Rates count only the FLOPs the causal mask lets through: per (batch,
// head) T(T+1)/2 score entries, 4D FLOPs each forward (q kᵀ, P v) and 8D
// backward (dP, dV, dQ, dK); backward's recomputed scores are not counted.
// The GEMM roof: a 1024-cube product, cblas_sgemm (fp32) or
// kernels::gemm_bf16 (bf16: oneDNN, AMX where the core has it), one call
// per thread. Memory: what the kernel keeps for backward (out and lse)
// beside the (B, H, T, T) probabilities an explicit kernel keeps, and this
// process's peak resident growth over the timed runs. Also the error
// against the reference (kernels::ref, double) on one head. One JSON line.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/blas_core_exec.h"
#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "kernels/blas_core.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "kernels/threads.h"

namespace {

using px::kernels::AttentionDims;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<float> filled(int64_t n, int seed) {
  std::vector<float> v(static_cast<size_t>(n));
  uint32_t x = 2463534242u + static_cast<uint32_t>(seed);
  for (float& e : v) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    e = static_cast<float>(x % 2001) / 1000.0f - 1.0f;
  }
  return v;
}

// Resident set now and its peak so far, MiB.
double rss_mib() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * 4096.0 / (1 << 20);
}
double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

// Best seconds of `reps` calls after a warmup.
template <typename Body>
double best_seconds(int reps, Body&& body) {
  double best = 1e30;
  for (int r = 0; r <= reps; ++r) {
    const double t0 = now_s();
    body();
    if (r > 0) best = std::min(best, now_s() - t0);
  }
  return best;
}

double gemm_roof_gflops(bool bf16, int reps) {
  const int n = 1024;
  std::vector<float> a = filled(int64_t{n} * n, 1), b = filled(int64_t{n} * n, 2), c(size_t(n) * n);
  std::vector<px::kernels::bf16> a16(a.size()), b16(b.size());
  px::kernels::to_bf16(static_cast<int64_t>(a.size()), a.data(), a16.data());
  px::kernels::to_bf16(static_cast<int64_t>(b.size()), b.data(), b16.data());
  // At least ten runs: one takes 4-15 ms, and a best of three drifted by a
  // factor of two between runs on a noisy host.
  const double s = best_seconds(std::max(reps, 10), [&] {
    if (bf16) px::kernels::gemm_bf16(false, false, n, n, n, 1.0f, a16.data(), n, b16.data(), n, 0.0f, c.data(), n);
    else px::kernels::gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  });
  return 2.0 * n * double(n) * n / s / 1e9;
}

double relative_error(const std::vector<float>& x, const std::vector<float>& y) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < y.size(); ++i) diff += (double(x[i]) - y[i]) * (double(x[i]) - y[i]), norm += double(y[i]) * y[i];
  return std::sqrt(diff / std::max(norm, 1e-300));
}

void run_forward(const AttentionDims& a, bool bf16, const std::vector<float>& qkv,
                 const std::vector<px::kernels::bf16>& qkv16, float* out, float* lse) {
  if (bf16) px::kernels::attention_bf16(a, {.rounded = qkv16.data()}, out, lse);
  else px::kernels::attention(a, qkv.data(), out, lse);
}

void run_backward(const AttentionDims& a, bool bf16, const std::vector<float>& qkv,
                  const std::vector<px::kernels::bf16>& qkv16, const float* out, const float* lse, const float* dout,
                  float* dqkv) {
  if (bf16) px::kernels::attention_backward_bf16(a, {.rounded = qkv16.data()}, {.f32 = out}, lse, dout, dqkv);
  else px::kernels::attention_backward(a, qkv.data(), out, lse, dout, dqkv);
}

// ||tiled - ref|| / ||ref|| of out and dqkv on one head of T tokens.
std::pair<double, double> error_on_one_head(int64_t T, int64_t D, bool bf16) {
  const AttentionDims a{.B = 1, .T = T, .H = 1, .D = D};
  std::vector<float> qkv = filled(T * 3 * D, 7), dout = filled(T * D, 8);
  std::vector<px::kernels::bf16> qkv16(qkv.size());
  px::kernels::to_bf16(static_cast<int64_t>(qkv.size()), qkv.data(), qkv16.data());
  if (bf16) px::kernels::to_float(static_cast<int64_t>(qkv.size()), qkv16.data(), qkv.data());
  std::vector<float> out(T * D), lse(T), dqkv(qkv.size()), out_ref(out.size()), lse_ref(T), dqkv_ref(qkv.size());
  run_forward(a, bf16, qkv, qkv16, out.data(), lse.data());
  run_backward(a, bf16, qkv, qkv16, out.data(), lse.data(), dout.data(), dqkv.data());
  px::kernels::ref::attention(a, qkv.data(), out_ref.data(), lse_ref.data());
  px::kernels::ref::attention_backward(a, qkv.data(), dout.data(), dqkv_ref.data());
  return {relative_error(out, out_ref), relative_error(dqkv, dqkv_ref)};
}

}  // namespace

int main(int argc, char** argv) {
  px::cli::run_on_this_cpus_blas_core(argv);  // the kernels `parallax train` runs
  int64_t B = 8, T = 1024, H = 6, D = 64;
  int threads = 1, reps = 3;
  std::string precision = "fp32";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--B") B = std::stoll(value);
    else if (flag == "--T") T = std::stoll(value);
    else if (flag == "--H") H = std::stoll(value);
    else if (flag == "--D") D = std::stoll(value);
    else if (flag == "--threads") threads = std::stoi(value);
    else if (flag == "--reps") reps = std::stoi(value);
    else if (flag == "--precision") precision = value;
    else {
      std::cerr << "px_bench_attention: unknown flag " << flag << "\n";
      return 2;
    }
  }
  if (precision != "fp32" && precision != "bf16") {
    std::cerr << "px_bench_attention: --precision " << precision << ": expected fp32 or bf16\n";
    return 2;
  }
  const bool bf16 = precision == "bf16";
  px::kernels::set_threads(threads);
  const AttentionDims a{.B = B, .T = T, .H = H, .D = D};
  const std::vector<float> qkv = filled(B * T * 3 * H * D, 1), dout = filled(B * T * H * D, 2);
  std::vector<px::kernels::bf16> qkv16(bf16 ? qkv.size() : 0);
  if (bf16) px::kernels::to_bf16(static_cast<int64_t>(qkv.size()), qkv.data(), qkv16.data());
  const double rss_before = rss_mib();  // the outputs and gradients count, as PyTorch's do
  std::vector<float> out(static_cast<size_t>(B * T * H * D)), lse(static_cast<size_t>(B * H * T)), dqkv(qkv.size());
  const double forward_s = best_seconds(reps, [&] { run_forward(a, bf16, qkv, qkv16, out.data(), lse.data()); });
  const double backward_s = best_seconds(
      reps, [&] { run_backward(a, bf16, qkv, qkv16, out.data(), lse.data(), dout.data(), dqkv.data()); });
  const double peak_growth = peak_rss_mib() - rss_before;
  const double entries = double(B * H) * double(T) * double(T + 1) / 2;
  const double gemm = gemm_roof_gflops(bf16, reps);
  const auto [out_error, grad_error] = error_on_one_head(std::min<int64_t>(T, 1024), D, bf16);
  const double forward_gflops = 4 * D * entries / forward_s / 1e9;
  const double total_gflops = 12 * D * entries / (forward_s + backward_s) / 1e9;
  nlohmann::json j{{"T", T},
                   {"B", B},
                   {"H", H},
                   {"D", D},
                   {"precision", precision},
                   {"threads", threads},
                   {"forward_ms", forward_s * 1e3},
                   {"backward_ms", backward_s * 1e3},
                   {"forward_gflops", forward_gflops},
                   {"fwd_bwd_gflops", total_gflops},
                   {"gemm_gflops", gemm},
                   {"fwd_bwd_of_gemm", total_gflops / gemm},
                   {"kept_for_backward_mib", double(B * H * T) * 4 / (1 << 20)},
                   {"explicit_probs_mib", double(B * H) * double(T * T) * 4 / (1 << 20)},
                   {"peak_rss_growth_mib", peak_growth},
                   {"out_rel_error", out_error},
                   {"grad_rel_error", grad_error},
                   {"blas_core", px::kernels::openblas_core()}};
  std::cout << j.dump() << std::endl;
  return 0;
}
