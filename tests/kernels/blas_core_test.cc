// The BLAS core choice (kernels/blas_core.h): OpenBLAS's pick against the
// CPU's instruction set, the user's OPENBLAS_CORETYPE kept, and the BLAS
// this process runs checked against the reference GEMM.
#include "kernels/blas_core.h"

#include <gtest/gtest.h>

namespace px::kernels {
namespace {

TEST(BlasCore, CoreNamesRankByTheirKernelsInstructions) {
  EXPECT_EQ(openblas_core_isa("Prescott"), VectorIsa::sse3);
  EXPECT_EQ(openblas_core_isa("Nehalem"), VectorIsa::sse3);
  EXPECT_EQ(openblas_core_isa("Sandybridge"), VectorIsa::avx);
  EXPECT_EQ(openblas_core_isa("Haswell"), VectorIsa::avx2);
  EXPECT_EQ(openblas_core_isa("Zen"), VectorIsa::avx2);
  EXPECT_EQ(openblas_core_isa("SkylakeX"), VectorIsa::avx512);
  EXPECT_EQ(openblas_core_isa("Cooperlake"), VectorIsa::avx512_bf16);
  EXPECT_EQ(openblas_core_isa("Neoverse"), std::nullopt);
}

TEST(BlasCore, APickBelowTheCpuRunsTheBestKernelsForIt) {
  // The Xeon of issue 47: OpenBLAS 0.3.21 does not know its model and picks Prescott.
  BlasCoreChoice c = choose_blas_core(VectorIsa::avx512_bf16, "Prescott", nullptr);
  EXPECT_EQ(c.coretype, "Cooperlake");
  EXPECT_EQ(c.why, "OpenBLAS picked Prescott (SSE3) on a CPU with AVX-512 BF16; running Cooperlake's kernels");
  EXPECT_EQ(choose_blas_core(VectorIsa::avx512, "Haswell", nullptr).coretype, "SkylakeX");
  EXPECT_EQ(choose_blas_core(VectorIsa::avx2, "Nehalem", nullptr).coretype, "Haswell");
  EXPECT_EQ(choose_blas_core(VectorIsa::avx512_bf16, "SkylakeX", "").coretype, "Cooperlake");  // empty: unset
}

TEST(BlasCore, ARightPickAnUnknownOneAndTheUsersCoreTypeAreKept) {
  EXPECT_EQ(choose_blas_core(VectorIsa::avx512_bf16, "Cooperlake", nullptr).coretype, "");
  EXPECT_EQ(choose_blas_core(VectorIsa::avx2, "SkylakeX", nullptr).coretype, "");  // higher than the CPU: its own pick
  EXPECT_EQ(choose_blas_core(VectorIsa::avx512, "Neoverse", nullptr).coretype, "");
  const BlasCoreChoice user = choose_blas_core(VectorIsa::avx512_bf16, "Prescott", "Prescott");
  EXPECT_EQ(user.coretype, "");
  EXPECT_EQ(user.why, "OPENBLAS_CORETYPE=Prescott set in the environment, kept");
}

TEST(BlasCore, ThisProcessesBlasAgreesWithTheReference) {
  EXPECT_NO_THROW(check_blas_against_reference()) << openblas_core();
  EXPECT_TRUE(openblas_core_isa(openblas_core()).has_value()) << openblas_core();
}

}  // namespace
}  // namespace px::kernels
