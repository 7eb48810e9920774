#include "comm/compression/powersgd.h"

#include <algorithm>
#include <cmath>

#include "comm/compression/exchange.h"
#include "core/rng.h"

namespace px::comm::compression::detail {

PowerSgd::PowerSgd(int64_t rows, int64_t cols, int rank, uint64_t seed)
    : rows_(rows), cols_(cols), rank_(static_cast<int>(std::min<int64_t>({rank, rows, cols}))),
      seed_(seed) {
  compresses_ = rows > 1 && cols > 1 && (rows + cols) * rank_ < rows * cols;
  if (!compresses_) return;
  q_.assign(rank_ * cols_, 0.0f);
  reseed_zero_columns(0);
}

// A zero direction of Q (a zero gradient, or a fresh start) would stay zero
// forever: P = M Q has no component there. Redraw it from (seed, step), which
// every rank shares, so Q stays identical across ranks.
void PowerSgd::reseed_zero_columns(uint64_t step) {
  for (int j = 0; j < rank_; ++j) {
    float* row = q_.data() + j * cols_;
    if (std::any_of(row, row + cols_, [](float v) { return v != 0.0f; })) continue;
    Rng rng(splitmix64(seed_ ^ splitmix64(step)) + static_cast<uint64_t>(j));
    for (int64_t c = 0; c < cols_; ++c) row[c] = static_cast<float>(rng.normal());
  }
}

// Modified Gram-Schmidt over P's r columns, in double. A column with almost
// no length left after removing the earlier ones (M Q was rank-deficient)
// becomes zero rather than amplified rounding noise, so P P^T stays a
// projection (and the error-feedback residual stays bounded).
void PowerSgd::orthonormalize_p() {
  const int r = rank_;
  auto column_norm = [&](int j) {
    double sum = 0.0;
    for (int64_t i = 0; i < rows_; ++i) sum += double(p_[i * r + j]) * p_[i * r + j];
    return std::sqrt(sum);
  };
  for (int j = 0; j < r; ++j) {
    const double original = column_norm(j);
    for (int l = 0; l < j; ++l) {
      double dot = 0.0;
      for (int64_t i = 0; i < rows_; ++i) dot += double(p_[i * r + j]) * p_[i * r + l];
      for (int64_t i = 0; i < rows_; ++i)
        p_[i * r + j] = static_cast<float>(p_[i * r + j] - dot * p_[i * r + l]);
    }
    const double norm = column_norm(j);
    if (!std::isfinite(norm)) continue;  // leave NaN/inf in place: they reach the result
    const double inverse = norm > 1e-30 && norm > 1e-5 * original ? 1.0 / norm : 0.0;
    for (int64_t i = 0; i < rows_; ++i) p_[i * r + j] = static_cast<float>(p_[i * r + j] * inverse);
  }
}

uint64_t PowerSgd::allreduce(Communicator& comm, std::span<float> m, std::span<float> residual,
                             uint64_t step) {
  const int r = rank_;
  const int64_t n = cols_;
  reseed_zero_columns(step);

  // P = M Q: (m, r).
  p_.assign(rows_ * r, 0.0f);
  for (int64_t i = 0; i < rows_; ++i) {
    const float* row = m.data() + i * n;
    for (int j = 0; j < r; ++j) {
      const float* q = q_.data() + j * n;
      float dot = 0.0f;
      for (int64_t c = 0; c < n; ++c) dot += row[c] * q[c];
      p_[i * r + j] = dot;
    }
  }
  uint64_t sent = ring_allreduce_sum(comm, std::span<float>(p_));
  orthonormalize_p();

  // Q_own = (M^T P)^T: (r, n), accumulated along rows of M.
  q_own_.assign(r * n, 0.0f);
  for (int64_t i = 0; i < rows_; ++i) {
    const float* row = m.data() + i * n;
    for (int j = 0; j < r; ++j) {
      const float weight = p_[i * r + j];
      float* q = q_own_.data() + j * n;
      for (int64_t c = 0; c < n; ++c) q[c] += row[c] * weight;
    }
  }
  q_ = q_own_;
  sent += ring_allreduce_sum(comm, std::span<float>(q_));

  // Row i of P Q^T = sum_j P[i,j] Q[j,:]; own contribution first (it needs M).
  std::vector<float> approx(n);
  auto expand_row = [&](int64_t i, const std::vector<float>& q, float* out) {
    std::fill(out, out + n, 0.0f);
    for (int j = 0; j < r; ++j) {
      const float weight = p_[i * r + j];
      const float* qj = q.data() + j * n;
      for (int64_t c = 0; c < n; ++c) out[c] += weight * qj[c];
    }
  };
  for (int64_t i = 0; i < rows_; ++i) {
    float* row = m.data() + i * n;
    if (!residual.empty()) {
      expand_row(i, q_own_, approx.data());
      for (int64_t c = 0; c < n; ++c) residual[i * n + c] = row[c] - approx[c];
    }
    expand_row(i, q_, row);
  }
  return sent;
}

}  // namespace px::comm::compression::detail
