// PowerSGD (Vogels, Karimireddy, Jaggi, NeurIPS 2019): a rank-r approximation
// of the summed gradient from one step of subspace iteration, warm-started
// from the previous step's Q. Shapes (legend: m rows, n cols, r rank):
//   M  (m, n)  this rank's matrix (gradient + residual), row-major
//   P  (m, r)  = M Q, summed over ranks, then orthonormalized (Gram-Schmidt)
//   Q  (r, n)  = (M^T P)^T, summed over ranks; kept as the next warm start
// Stored transposed, Q's rows are contiguous, so M^T P and P Q^T run along
// rows of M. This rank's contribution is P Q_own^T (the projection of M on
// span P); the sum of contributions is P Q_sum^T, identical on every rank.
// Internal to comm/compression.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "comm/communicator.h"

namespace px::comm::compression::detail {

class PowerSgd {
 public:
  PowerSgd(int64_t rows, int64_t cols, int rank, uint64_t seed);

  // Low rank pays only for matrices: false for vectors and when
  // (m + n)·r >= m·n; the caller then sends the gradient uncompressed.
  bool compresses() const { return compresses_; }
  int rank() const { return rank_; }

  // m: this rank's M, replaced by P Q_sum^T. residual (empty: no error
  // feedback) receives M - P Q_own^T. Returns the bytes sent.
  uint64_t allreduce(Communicator& comm, std::span<float> m, std::span<float> residual,
                     uint64_t step);

  // Q (r, n), the warm start; identical on every rank after each call.
  std::vector<float>& q() { return q_; }

 private:
  void reseed_zero_columns(uint64_t step);
  void orthonormalize_p();

  int64_t rows_, cols_;
  int rank_;
  uint64_t seed_;
  bool compresses_;
  std::vector<float> q_, p_, q_own_;
};

}  // namespace px::comm::compression::detail
