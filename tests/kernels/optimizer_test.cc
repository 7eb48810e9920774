#include <gtest/gtest.h>

#include <cmath>

#include "kernels/optimizer.h"
#include "kernel_test_util.h"

namespace px::kernels {
namespace {

using testing::all_close;
using testing::random_vector;

TEST(AdamW, FastMatchesReferenceOverSeveralSteps) {
  testing::ThreadReset reset;
  for (int threads : testing::kThreadCounts) {
    set_threads(threads);
    for (int64_t n : {1, 7, 31, 100003}) {
      auto p = random_vector(n, 1), m = random_vector(n, 2, 0.0f, 0.0f);
      auto v = m, p_ref = p, m_ref = m, v_ref = m;
      for (int64_t step = 1; step <= 5; ++step) {
        auto g = random_vector(n, 10 + step);
        adamw(n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step, p.data(), g.data(), m.data(), v.data());
        ref::adamw(n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step, p_ref.data(), g.data(), m_ref.data(),
                   v_ref.data());
      }
      EXPECT_TRUE(all_close(p, p_ref, 1e-6f, 1e-7f)) << "n=" << n;
      EXPECT_TRUE(all_close(m, m_ref, 1e-6f, 1e-7f)) << "n=" << n;
      EXPECT_TRUE(all_close(v, v_ref, 1e-6f, 1e-9f)) << "n=" << n;
    }
  }
}

// Two steps of torch.optim.AdamW(lr=0.1, betas=(0.9, 0.999), eps=1e-8,
// weight_decay=0.01) on one parameter, in double from the documented formulas.
TEST(AdamW, FollowsTorchFormulasWithBiasCorrection) {
  const double lr = 0.1, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01;
  const double grads[2] = {0.5, -0.25};
  double p = 1.0, m = 0.0, v = 0.0;
  float pf = 1.0f, mf = 0.0f, vf = 0.0f;
  for (int t = 1; t <= 2; ++t) {
    const double g = grads[t - 1];
    p *= 1 - lr * wd;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    p -= lr / (1 - std::pow(b1, t)) * m / (std::sqrt(v) / std::sqrt(1 - std::pow(b2, t)) + eps);
    const float gf = static_cast<float>(g);
    adamw(1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, t, &pf, &gf, &mf, &vf);
    // Bias correction makes the first step lr * sign(grad) after the decay.
    if (t == 1) {
      EXPECT_NEAR(pf, 1.0 * (1 - lr * wd) - lr, 1e-6);
    }
  }
  // float hyper-parameters (0.999f != 0.999) leave ~1e-5 relative differences.
  EXPECT_NEAR(pf, p, 1e-6);
  EXPECT_NEAR(mf, m, 1e-4 * std::fabs(m));
  EXPECT_NEAR(vf, v, 1e-4 * v);
}

TEST(SgdMomentum, FastMatchesReferenceAndTorchFormula) {
  testing::ThreadReset reset;
  for (int threads : testing::kThreadCounts) {
    set_threads(threads);
    for (int64_t n : {1, 13, 100003}) {
      auto p = random_vector(n, 1), buf = random_vector(n, 2);  // garbage before step 1
      auto p_ref = p, buf_ref = buf;
      std::vector<float> p_expected = p, buf_expected(n);
      for (int step = 0; step < 3; ++step) {
        auto g = random_vector(n, 20 + step);
        sgd_momentum(n, 0.05f, 0.9f, 1e-3f, step == 0, p.data(), g.data(), buf.data());
        ref::sgd_momentum(n, 0.05f, 0.9f, 1e-3f, step == 0, p_ref.data(), g.data(),
                          buf_ref.data());
        for (int64_t i = 0; i < n; ++i) {
          const float d = g[i] + 1e-3f * p_expected[i];
          buf_expected[i] = step == 0 ? d : 0.9f * buf_expected[i] + d;
          p_expected[i] -= 0.05f * buf_expected[i];
        }
      }
      EXPECT_TRUE(all_close(p, p_ref, 1e-6f, 1e-7f)) << "n=" << n;
      EXPECT_TRUE(all_close(buf, buf_ref, 1e-6f, 1e-7f)) << "n=" << n;
      EXPECT_TRUE(all_close(p, p_expected, 1e-6f, 1e-7f)) << "n=" << n;
    }
  }
}

TEST(SgdMomentum, ZeroMomentumIsPlainSgdWithoutBuffer) {
  std::vector<float> p = {1.0f, -2.0f}, g = {0.5f, 0.25f};
  sgd_momentum(2, 0.1f, 0.0f, 0.0f, false, p.data(), g.data(), nullptr);
  EXPECT_TRUE(all_close(p, {0.95f, -2.025f}, 1e-7f, 0.0f));
}

}  // namespace
}  // namespace px::kernels
