// The one rule's collective on a local tensor (runtime/executor/
// reshard_tensor.h) against a plain sum, on odd and even rank counts and
// shapes the ranks do not divide: a float32 partial sum made whole or
// split, and a bf16 one (a bf16 GEMM's term under tensor parallelism,
// parallel/lower/propagate.h) within the rounding of its steps; a bf16
// split gathered bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "comm/backends.h"
#include "kernels/bf16.h"
#include "parallel/mesh.h"
#include "parallel/shard.h"
#include "runtime/executor/reshard_tensor.h"

namespace px {
namespace {

const Shape kWhole({5, 7});  // neither dim divides by 2, 3 or 4

// Rank r's term of element i: the sum over ranks is known in closed form.
float term(int rank, int64_t i) { return 0.25f * static_cast<float>((rank + 1) * (i % 11)) - 1.5f + 0.01f * float(i); }

Tensor terms_of(int rank, DType dtype) {
  Tensor t = Tensor::empty(kWhole, DType::f32);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = term(rank, i);
  if (dtype == DType::f32) return t;
  Tensor h = Tensor::empty(kWhole, DType::bf16);
  kernels::to_bf16(t.numel(), t.f32(), static_cast<kernels::bf16*>(h.raw()));
  return h;
}

// The plain sum of every rank's term (each rounded to bf16 first, as the
// GEMM stored it, when the terms are bf16).
std::vector<float> plain_sum(int ranks, DType dtype) {
  std::vector<float> sum(static_cast<size_t>(kWhole.numel()), 0.0f);
  for (int r = 0; r < ranks; ++r)
    for (int64_t i = 0; i < kWhole.numel(); ++i)
      sum[static_cast<size_t>(i)] += dtype == DType::f32 ? term(r, i) : kernels::to_float(kernels::to_bf16(term(r, i)));
  return sum;
}

std::vector<float> as_floats(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::f32) std::copy(t.f32(), t.f32() + t.numel(), out.begin());
  else kernels::to_float(t.numel(), static_cast<const kernels::bf16*>(t.raw()), out.data());
  return out;
}

// Each step of a bf16 reduction rounds its partial sum to bf16 (relative
// 2^-9), so p terms are off by at most (p - 1) roundings of values no
// larger than the sum of the terms' magnitudes.
float tolerance(int ranks, DType dtype, int64_t i) {
  if (dtype == DType::f32) return 1e-5f;
  float magnitude = 0;
  for (int r = 0; r < ranks; ++r) magnitude += std::fabs(term(r, i));
  return static_cast<float>(ranks) * magnitude * 0.00390625f;
}

TEST(ReshardTensor, PartialSumsMadeWholeOrSplitEqualThePlainSumOnOneToFourRanks) {
  for (DType dtype : {DType::f32, DType::bf16})
    for (int ranks = 1; ranks <= 4; ++ranks)
      for (const Placement to : {Placement::B(), Placement::S(0), Placement::S(1)})
        comm::run_inproc(ranks, [&](comm::Communicator& comm) {
          const int r = comm.rank();
          const Tensor out = reshard_tensor(comm, terms_of(r, dtype), Placement::P(), to, kWhole);
          ASSERT_EQ(out.dtype(), dtype) << "the sum keeps its terms' dtype";
          const std::vector<float> sum = plain_sum(ranks, dtype), got = as_floats(out);
          // The plain sum and each element's tolerance, whole, then this rank's block of them by the split rule.
          Tensor expected = Tensor::empty(kWhole, DType::f32), bound = Tensor::empty(kWhole, DType::f32);
          for (int64_t i = 0; i < kWhole.numel(); ++i) {
            expected.f32()[i] = sum[static_cast<size_t>(i)];
            bound.f32()[i] = tolerance(ranks, dtype, i) + 1e-6f;
          }
          const parallel::DeviceMesh mesh({{"axis", ranks}});
          const Shape mine = to.is_split() ? parallel::local_shape(kWhole, {to}, mesh, {r}) : kWhole;
          ASSERT_EQ(out.shape(), mine) << ranks << " ranks to " << to.str();
          auto local = [&](const Tensor& whole) {
            if (!to.is_split()) return whole;
            Tensor part = Tensor::empty(mine, DType::f32);
            parallel::copy_to_local(whole, parallel::shard_pieces(kWhole, {to}, mesh, {r}), part);
            return part;
          };
          const Tensor want = local(expected), within = local(bound);
          for (int64_t i = 0; i < want.numel(); ++i)
            EXPECT_NEAR(got[static_cast<size_t>(i)], want.f32()[i], within.f32()[i])
                << dtype_name(dtype) << ", " << ranks << " ranks to " << to.str() << ", element " << i << " of the block";
        });
}

TEST(ReshardTensor, ABf16SplitIsGatheredBitForBit) {
  for (int ranks = 1; ranks <= 4; ++ranks)
    comm::run_inproc(ranks, [&](comm::Communicator& comm) {
      const int r = comm.rank();
      const parallel::DeviceMesh mesh({{"axis", ranks}});
      const Tensor whole = terms_of(0, DType::bf16);
      Tensor mine = Tensor::empty(parallel::local_shape(kWhole, {Placement::S(1)}, mesh, {r}), DType::bf16);
      parallel::copy_to_local(whole, parallel::shard_pieces(kWhole, {Placement::S(1)}, mesh, {r}), mine);
      const Tensor out = reshard_tensor(comm, mine, Placement::S(1), Placement::B(), kWhole);
      ASSERT_EQ(out.dtype(), DType::bf16);
      ASSERT_EQ(out.nbytes(), whole.nbytes());
      EXPECT_EQ(std::memcmp(out.raw(), whole.raw(), whole.nbytes()), 0) << ranks << " ranks";
    });
}

}  // namespace
}  // namespace px
