// px_bench_sgemm_rate: this machine's cblas_sgemm rate (GFLOP/s), the roof
// that bench/compare_gpt_step.sh prints beside the GPT step's achieved rate.
//
//   px_bench_sgemm_rate [--threads 1] [--sizes 256,512,768,1024] [--reps 5]
//
// Square row-major C = A * B (2 n^3 flops), best of --reps calls per size
// after one warmup call, on the OpenBLAS parallax links. Also a memory canary
// like peers/torch/contention.py's: triad z = x + 2 y over 64 MiB arrays
// (best of 10, GB/s), because this shared VM's bandwidth drifts over time.
// Prints one JSON line.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

extern "C" void openblas_set_num_threads(int num_threads);

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double sgemm_gflops(int n, int reps) {
  std::vector<float> a(size_t(n) * n), b(size_t(n) * n), c(size_t(n) * n);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = float(i % 13) * 0.01f - 0.06f;
    b[i] = float(i % 7) * 0.02f - 0.05f;
  }
  double best = 1e30;
  for (int r = 0; r <= reps; ++r) {  // r == 0 warms up
    double t0 = now_s();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
                c.data(), n);
    double dt = now_s() - t0;
    if (r > 0) best = std::min(best, dt);
  }
  return 2.0 * double(n) * n * n / best / 1e9;
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
  nlohmann::json by_size = nlohmann::json::object();
  double best = 0;
  for (int n : sizes) {
    double g = sgemm_gflops(n, reps);
    by_size[std::to_string(n)] = std::round(g * 10) / 10;
    best = std::max(best, g);
  }
  nlohmann::json res{{"bench", "sgemm_rate"},  {"threads", threads},
                     {"reps", reps},           {"gflops_by_size", by_size},
                     {"best_gflops", best},    {"triad64MiB_gbs_1t", triad_gbs()}};
  std::cout << res.dump() << std::endl;
  return 0;
}
