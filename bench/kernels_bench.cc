// Micro-benchmark of the kernels a GPT-2 training step runs, at the sizes the
// PyTorch comparison uses. Prints per-kernel-family milliseconds per step.
//   kernels_bench [threads]
// Legend: B batch, T time, C channels, L layers, H heads, V vocab, N = B*T rows.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "core/rng.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gemm.h"
#include "kernels/layernorm.h"
#include "kernels/optimizer.h"
#include "kernels/threads.h"

namespace {

using namespace px::kernels;
using Clock = std::chrono::steady_clock;

struct Config {
  const char* name;
  int64_t B, T, C, L, H, V;
};

std::vector<float> filled(int64_t n, uint64_t seed) {
  px::Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<float>(rng.uniform() - 0.5);
  return v;
}

class Timer {
 public:
  template <typename F>
  void time(const std::string& family, F f) {
    auto t0 = Clock::now();
    f();
    totals_[family] += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  }
  void print(int steps) const {
    double all = 0;
    for (auto& [k, v] : totals_) all += v;
    for (auto& [k, v] : totals_) std::printf("  %-12s %8.3f ms\n", k.c_str(), v / steps);
    std::printf("  %-12s %8.3f ms\n", "total", all / steps);
  }
  void reset() { totals_.clear(); }

 private:
  std::map<std::string, double> totals_;
};

// y (N, out) = x (N, in) w^T, w (out, in) as in nn.Linear; backward dx and dw.
void linear(Timer& t, int64_t N, int64_t in, int64_t out, const float* x, const float* w,
            const float* b, float* y) {
  t.time("gemm", [&] { gemm(false, true, N, out, in, 1.0f, x, in, w, in, 0.0f, y, out); });
  t.time("bias", [&] { add_bias(N, out, y, b, y); });
}
void linear_backward(Timer& t, int64_t N, int64_t in, int64_t out, const float* x,
                     const float* w, const float* dy, float* dx, float* dw, float* db) {
  t.time("gemm", [&] {
    gemm(false, false, N, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in);
    gemm(true, false, out, in, N, 1.0f, dy, out, x, in, 1.0f, dw, in);
  });
  t.time("bias", [&] { bias_grad(N, out, dy, db); });
}

void run(const Config& c, int steps) {
  const int64_t N = c.B * c.T, C = c.C, D = C / c.H;
  auto x = filled(N * C, 1), ln = filled(N * C, 2), qkv = filled(N * 3 * C, 3);
  auto att = filled(N * C, 4), att_lse = filled(c.B * c.H * c.T, 5);
  auto fc = filled(N * 4 * C, 6), act = filled(N * 4 * C, 7), logits = filled(N * c.V, 8);
  auto dx = filled(N * C, 9), dqkv = filled(N * 3 * C, 10), dfc = filled(N * 4 * C, 11);
  auto dlogits = filled(N * c.V, 12), w = filled(4 * C * C, 13), dw = filled(4 * C * C, 14);
  auto wte = filled(c.V * C, 15), dwte = filled(c.V * C, 16), g = filled(4 * C, 17);
  auto mean = filled(N, 18), rstd = filled(N, 19), lse = filled(N, 20);
  std::vector<int32_t> ids(N);
  for (int64_t i = 0; i < N; ++i) ids[i] = static_cast<int32_t>(i % c.V);
  const int64_t params = c.L * 12 * C * C + c.V * C;
  auto p = filled(params, 21), pg = filled(params, 22), m = filled(params, 23),
       v = filled(params, 24);
  for (auto& e : v) e = e * e;

  Timer t;
  for (int step = -1; step < steps; ++step) {
    if (step == 0) t.reset();  // step -1 warms up
    t.time("embedding", [&] { embedding(N, C, ids.data(), wte.data(), 0, c.V, x.data()); });
    for (int64_t l = 0; l < c.L; ++l) {
      t.time("layernorm", [&] {
        layernorm(N, C, 1e-5f, x.data(), g.data(), g.data(), ln.data(), mean.data(), rstd.data());
      });
      linear(t, N, C, 3 * C, ln.data(), w.data(), g.data(), qkv.data());
      t.time("attention", [&] { attention({c.B, c.T, c.H, D}, qkv.data(), att.data(), att_lse.data()); });
      linear(t, N, C, C, att.data(), w.data(), g.data(), ln.data());
      t.time("residual", [&] { add_inplace(N * C, ln.data(), x.data()); });
      t.time("layernorm", [&] {
        layernorm(N, C, 1e-5f, x.data(), g.data(), g.data(), ln.data(), mean.data(), rstd.data());
      });
      linear(t, N, C, 4 * C, ln.data(), w.data(), g.data(), fc.data());
      t.time("gelu", [&] { gelu(N * 4 * C, fc.data(), act.data()); });
      linear(t, N, 4 * C, C, act.data(), w.data(), g.data(), ln.data());
      t.time("residual", [&] { add_inplace(N * C, ln.data(), x.data()); });
    }
    t.time("layernorm", [&] {
      layernorm(N, C, 1e-5f, x.data(), g.data(), g.data(), ln.data(), mean.data(), rstd.data());
    });
    t.time("gemm", [&] {
      gemm(false, true, N, c.V, C, 1.0f, ln.data(), C, wte.data(), C, 0.0f, logits.data(), c.V);
    });
    t.time("xent", [&] {
      cross_entropy(N, c.V, logits.data(), ids.data(), 1.0f / N, lse.data());
      cross_entropy_backward(N, c.V, logits.data(), ids.data(), lse.data(), 1.0f / N, 1.0f,
                             dlogits.data());
    });
    t.time("gemm", [&] {
      gemm(false, false, N, C, c.V, 1.0f, dlogits.data(), c.V, wte.data(), C, 0.0f, dx.data(), C);
      gemm(true, false, c.V, C, N, 1.0f, dlogits.data(), c.V, ln.data(), C, 1.0f, dwte.data(), C);
    });
    for (int64_t l = 0; l < c.L; ++l) {
      t.time("layernorm", [&] {
        layernorm_backward(N, C, x.data(), g.data(), mean.data(), rstd.data(), dx.data(),
                           ln.data(), dw.data(), dw.data() + C);
      });
      linear_backward(t, N, 4 * C, C, act.data(), w.data(), dx.data(), dfc.data(), dw.data(),
                      g.data());
      t.time("gelu", [&] { gelu_backward(N * 4 * C, fc.data(), dfc.data(), dfc.data()); });
      linear_backward(t, N, C, 4 * C, ln.data(), w.data(), dfc.data(), ln.data(), dw.data(),
                      g.data());
      t.time("layernorm", [&] {
        layernorm_backward(N, C, x.data(), g.data(), mean.data(), rstd.data(), ln.data(),
                           dx.data(), dw.data(), dw.data() + C);
      });
      linear_backward(t, N, C, C, att.data(), w.data(), dx.data(), att.data(), dw.data(),
                      g.data());
      t.time("attention", [&] {
        attention_backward({c.B, c.T, c.H, D}, qkv.data(), att.data(), att_lse.data(), att.data(), dqkv.data());
      });
      linear_backward(t, N, C, 3 * C, ln.data(), w.data(), dqkv.data(), ln.data(), dw.data(),
                      g.data());
      t.time("residual", [&] { add_inplace(N * C, ln.data(), dx.data()); });
    }
    t.time("embedding", [&] { embedding_backward(N, C, ids.data(), dx.data(), 0, c.V, dwte.data()); });
    t.time("adamw", [&] {
      adamw(params, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step + 2, p.data(), pg.data(), m.data(),
            v.data());
    });
  }
  std::printf("%s (B%lld T%lld C%lld L%lld H%lld V%lld), threads=%d, per step:\n", c.name,
              static_cast<long long>(c.B), static_cast<long long>(c.T),
              static_cast<long long>(c.C), static_cast<long long>(c.L),
              static_cast<long long>(c.H), static_cast<long long>(c.V), threads());
  t.print(steps);
}

}  // namespace

int main(int argc, char** argv) {
  set_threads(argc > 1 ? std::atoi(argv[1]) : 2);
  const int steps = argc > 2 ? std::atoi(argv[2]) : 10;
  run({"small", 16, 128, 128, 4, 4, 256}, steps);
  run({"medium", 8, 256, 384, 6, 6, 256}, steps);
}
