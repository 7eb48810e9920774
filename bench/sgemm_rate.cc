// px_bench_sgemm_rate: this machine's cblas_sgemm rate (GFLOP/s), the roof
// that bench/compare_gpt_step.sh prints beside the GPT step's achieved rate,
// and beside it the bf16 GEMM rate (bf16 inputs, fp32 accumulation) on the
// same shapes: the roof of a mixed-precision step.
//
//   px_bench_sgemm_rate [--threads 1] [--sizes 256,512,768,1024] [--reps 5]
//
// Square row-major C = A * B (2 n^3 flops), best of --reps calls per size
// after one warmup call:
//  - gflops_by_size: cblas_sgemm on the OpenBLAS parallax links, --threads
//    OpenBLAS threads;
//  - px_gemm_gflops_by_size: kernels::gemm (fp32), as training calls it:
//    split across --threads px pool threads, BLAS one thread per part;
//  - bf16_gflops_by_layout: kernels::gemm_bf16 the same way (oneDNN one
//    thread per part), in the graph's three layouts NN, NT and TN, and
//    bf16_kernel: the oneDNN kernel a single-threaded NN call of the
//    largest size runs (AMX or AVX512-BF16);
//  - instruction_roofs_1t: one core's issue rate of the AVX512-BF16 dot
//    product and of the fp32 FMA (instruction_roofs() says why).
// Also a memory canary like peers/torch/contention.py's: triad z = x + 2 y
// over 64 MiB arrays (best of 10, GB/s), because this shared VM's bandwidth
// drifts over time. Prints one JSON line.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <immintrin.h>

#include <nlohmann/json.hpp>

#include "cli/blas_core_exec.h"
#include "kernels/bf16.h"
#include "kernels/blas_core.h"
#include "kernels/cpu_features.h"
#include "kernels/dnnl_matmul.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "kernels/threads.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best rate of `reps` timed calls of `product` (2 n^3 flops) after a warmup.
template <typename Product>
double best_gflops(int n, int reps, Product&& product) {
  double best = 1e30;
  for (int r = 0; r <= reps; ++r) {  // r == 0 warms up
    double t0 = now_s();
    product();
    double dt = now_s() - t0;
    if (r > 0) best = std::min(best, dt);
  }
  return 2.0 * double(n) * n * n / best / 1e9;
}

std::vector<float> operand(int n, int period, float step, float offset) {
  std::vector<float> v(size_t(n) * n);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i % period) * step - offset;
  return v;
}

double sgemm_gflops(int n, int reps) {
  std::vector<float> a = operand(n, 13, 0.01f, 0.06f), b = operand(n, 7, 0.02f, 0.05f), c(size_t(n) * n);
  return best_gflops(n, reps, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
                c.data(), n);
  });
}

double px_gemm_gflops(int n, int reps) {
  std::vector<float> a = operand(n, 13, 0.01f, 0.06f), b = operand(n, 7, 0.02f, 0.05f), c(size_t(n) * n);
  return best_gflops(n, reps, [&] {
    px::kernels::gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  });
}

// Square operands, so every layout has the same leading dimension n.
double bf16_gflops(int n, int reps, bool trans_a, bool trans_b) {
  using px::kernels::bf16;
  const std::vector<float> a = operand(n, 13, 0.01f, 0.06f), b = operand(n, 7, 0.02f, 0.05f);
  std::vector<bf16> a16(a.size()), b16(b.size());
  px::kernels::to_bf16(int64_t(a.size()), a.data(), a16.data());
  px::kernels::to_bf16(int64_t(b.size()), b.data(), b16.data());
  std::vector<float> c(size_t(n) * n);
  return best_gflops(n, reps, [&] {
    px::kernels::gemm_bf16(trans_a, trans_b, n, n, n, 1.0f, a16.data(), n, b16.data(), n, 0.0f, c.data(), n);
  });
}

double rounded(double gflops) { return std::round(gflops * 10) / 10; }

// The roofs of the two instructions a GEMM kernel of our own would use, on
// one core: VDPBF16PS (AVX512-BF16: 16 lanes x 2 bf16 products summed in
// fp32, 64 flops) and VFMADD231PS (fp32 FMA, 32 flops), each in 12
// independent chains on registers, so only issue throughput limits them.
// A bf16 kernel without AMX can do no better than the first.
// Twelve named accumulators, not an array: GCC kept an array in memory,
// and the store-to-load latency capped both rates at half their roof.
// The AVX-512 code's target, named on every function and lambda that runs
// it: neither GCC nor Clang gives a lambda its enclosing function's target,
// and a host without AVX-512 (-march=native) enables none by default.
#define PX_ROOF_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))

template <typename Step>
PX_ROOF_TARGET __attribute__((always_inline)) inline double chains_gflops(double flops_per_step, Step step, float& keep) {
  constexpr long kIterations = 20'000'000;
  double best = 1e30;
  for (int r = 0; r < 3; ++r) {
    // Distinct starts: identical chains would be computed once.
    auto start = [](int k) PX_ROOF_TARGET { return _mm512_set1_ps(float(k)); };
    __m512 a0 = start(0), a1 = start(1), a2 = start(2), a3 = start(3), a4 = start(4), a5 = start(5),
           a6 = start(6), a7 = start(7), a8 = start(8), a9 = start(9), a10 = start(10), a11 = start(11);
    const double t0 = now_s();
    for (long i = 0; i < kIterations; ++i) {
      a0 = step(a0), a1 = step(a1), a2 = step(a2), a3 = step(a3), a4 = step(a4), a5 = step(a5);
      a6 = step(a6), a7 = step(a7), a8 = step(a8), a9 = step(a9), a10 = step(a10), a11 = step(a11);
    }
    best = std::min(best, now_s() - t0);
    float lanes[16];
    _mm512_storeu_ps(lanes, _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                                          _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7))));
    keep += lanes[0];
    _mm512_storeu_ps(lanes, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
    keep += lanes[0];
  }
  return flops_per_step * 12.0 * kIterations / best / 1e9;
}

PX_ROOF_TARGET nlohmann::json instruction_roofs() {
  const __m512bh one_bf16 = (__m512bh)_mm512_set1_epi16(0x3f80);
  const __m512 tiny = _mm512_set1_ps(1e-9f);
  float keep = 0;  // the chains' results, so the loops are not removed
  const double dot = chains_gflops(64, [&](__m512 a) PX_ROOF_TARGET { return _mm512_dpbf16_ps(a, one_bf16, one_bf16); }, keep);
  const double fma = chains_gflops(32, [&](__m512 a) PX_ROOF_TARGET { return _mm512_fmadd_ps(a, tiny, tiny); }, keep);
  return {{"vdpbf16ps_gflops", rounded(dot)}, {"vfmadd_ps_gflops", rounded(fma)}, {"checksum", keep != 0}};
}

double triad_gbs() {
  const size_t n = size_t{16} << 20;  // 64 MiB of float per array
  std::vector<float> x(n, 1.0f), y(n, 1.0f), z(n, 0.0f);
  double best = 1e30;
  for (int r = 0; r <= 10; ++r) {
    double t0 = now_s();
    float* zp = z.data();
    const float* xp = x.data();
    const float* yp = y.data();
    for (size_t i = 0; i < n; ++i) zp[i] = xp[i] + 2.0f * yp[i];
    double dt = now_s() - t0;
    if (r > 0) best = std::min(best, dt);
  }
  if (z[n / 2] != 3.0f) std::fprintf(stderr, "triad check failed\n");
  return 3.0 * 4.0 * double(n) / best / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  px::cli::run_on_this_cpus_blas_core(argv);  // the kernels `parallax train` runs
  int threads = 1, reps = 5;
  std::vector<int> sizes{256, 512, 768, 1024};
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "--help" || k == "-h") {
      std::printf("usage: px_bench_sgemm_rate [--threads 1] [--sizes 256,512,768,1024] [--reps 5]\n");
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "error: %s needs a value\n", k.c_str());
      return 2;
    }
    std::string v = argv[++i];
    if (k == "--threads") threads = std::atoi(v.c_str());
    else if (k == "--reps") reps = std::atoi(v.c_str());
    else if (k == "--sizes") {
      sizes.clear();
      std::stringstream ss(v);
      for (std::string s; std::getline(ss, s, ',');) sizes.push_back(std::atoi(s.c_str()));
    } else {
      std::fprintf(stderr, "error: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (threads < 1 || reps < 1 || sizes.empty() || *std::min_element(sizes.begin(), sizes.end()) < 1) {
    std::fprintf(stderr, "error: --threads, --reps and every --sizes entry must be >= 1\n");
    return 2;
  }
  openblas_set_num_threads(threads);
  nlohmann::json by_size = nlohmann::json::object(), px_by_size = nlohmann::json::object();
  double best = 0;
  for (int n : sizes) {
    double g = sgemm_gflops(n, reps);
    by_size[std::to_string(n)] = rounded(g);
    best = std::max(best, g);
  }
  px::kernels::set_threads(threads);  // the px pool; BLAS back to one thread per call
  for (int n : sizes) px_by_size[std::to_string(n)] = rounded(px_gemm_gflops(n, reps));
  nlohmann::json res{{"bench", "sgemm_rate"},  {"threads", threads},
                     {"reps", reps},           {"gflops_by_size", by_size},
                     {"best_gflops", best},    {"px_gemm_gflops_by_size", px_by_size},
                     // The OpenBLAS kernel set these ran (after the command line's choice) and why.
                     {"blas_core", px::kernels::openblas_core()}, {"blas", px::kernels::blas_description()}};
  if (px::kernels::cpu_has_avx512_bf16()) {
    nlohmann::json by_layout = nlohmann::json::object();
    double best_bf16 = 0;
    for (auto [name, trans_a, trans_b] : {std::tuple{"NN", false, false}, {"NT", false, true}, {"TN", true, false}}) {
      for (int n : sizes) {
        const double g = bf16_gflops(n, reps, trans_a, trans_b);
        by_layout[name][std::to_string(n)] = rounded(g);
        best_bf16 = std::max(best_bf16, g);
      }
    }
    const int largest = *std::max_element(sizes.begin(), sizes.end());
    res["bf16_gflops_by_layout"] = by_layout;
    res["bf16_best_gflops"] = rounded(best_bf16);
    res["bf16_kernel"] = px::kernels::detail::matmul_bf16_implementation(false, false, largest, largest, largest);
    res["instruction_roofs_1t"] = instruction_roofs();
  } else {
    res["bf16_gflops_by_layout"] = "no AVX512_BF16 on this CPU";
  }
  res["triad64MiB_gbs_1t"] = triad_gbs();
  std::cout << res.dump() << std::endl;
  return 0;
}
