#include "kernels/blas_core.h"

#include <cmath>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "kernels/blas.h"
#include "kernels/gemm.h"

extern "C" char* openblas_get_corename(void);

namespace px::kernels {

std::string_view isa_name(VectorIsa isa) {
  switch (isa) {
    case VectorIsa::sse3: return "SSE3";
    case VectorIsa::avx: return "AVX";
    case VectorIsa::avx2: return "AVX2";
    case VectorIsa::avx512: return "AVX-512";
    case VectorIsa::avx512_bf16: return "AVX-512 BF16";
  }
  return "?";
}

VectorIsa cpu_vector_isa() {
  // libgcc's cpuid reading also checks XCR0: "supports" means usable.
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) {
    return __builtin_cpu_supports("avx512bf16") ? VectorIsa::avx512_bf16 : VectorIsa::avx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return VectorIsa::avx2;
  if (__builtin_cpu_supports("avx")) return VectorIsa::avx;
  return VectorIsa::sse3;
}

std::optional<VectorIsa> openblas_core_isa(std::string_view core) {
  // OpenBLAS's x86-64 DYNAMIC_ARCH cores (driver/others/dynamic.c) by the
  // vector instructions their sgemm kernels use.
  for (std::string_view name : {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Opteron", "Barcelona",
                                "Bobcat", "Katmai", "Coppermine", "Northwood"})
    if (core == name) return VectorIsa::sse3;
  for (std::string_view name : {"Sandybridge", "Bulldozer", "Piledriver", "Steamroller"})
    if (core == name) return VectorIsa::avx;
  for (std::string_view name : {"Haswell", "Zen", "Excavator"})
    if (core == name) return VectorIsa::avx2;
  if (core == "SkylakeX") return VectorIsa::avx512;
  if (core == "Cooperlake" || core == "SapphireRapids") return VectorIsa::avx512_bf16;
  return std::nullopt;
}

std::string openblas_core() { return openblas_get_corename(); }

BlasCoreChoice choose_blas_core(VectorIsa cpu, std::string_view picked, const char* user_coretype) {
  if (user_coretype != nullptr && *user_coretype != '\0')
    return {.coretype = "", .why = fmt::format("OPENBLAS_CORETYPE={} set in the environment, kept", user_coretype)};
  const std::optional<VectorIsa> runs = openblas_core_isa(picked);
  if (!runs) return {.coretype = "", .why = "a core parallax does not rank, kept"};
  if (*runs >= cpu) return {.coretype = "", .why = ""};
  // The highest kernel set at or below the CPU's that Debian's OpenBLAS
  // 0.3.21 has (its SapphireRapids falls back to Cooperlake).
  const char* best = cpu == VectorIsa::avx512_bf16 ? "Cooperlake"
                     : cpu == VectorIsa::avx512    ? "SkylakeX"
                     : cpu == VectorIsa::avx2      ? "Haswell"
                                                   : "Sandybridge";
  return {.coretype = best,
          .why = fmt::format("OpenBLAS picked {} ({}) on a CPU with {}; running {}'s kernels", picked, isa_name(*runs),
                             isa_name(cpu), best)};
}

namespace {
std::string& blas_core_reason() {
  static std::string why;  // set once at start, before any thread
  return why;
}
}  // namespace

void set_blas_core_reason(std::string why) { blas_core_reason() = std::move(why); }

std::string blas_description() {
  const std::string& why = blas_core_reason();
  return why.empty() ? openblas_core() : fmt::format("{} ({})", openblas_core(), why);
}

void check_blas_against_reference() {
  // Odd sizes past every kernel's tile, both transposes.
  constexpr int64_t M = 37, N = 29, K = 83;
  std::vector<float> a(M * K), b(K * N), fast(M * N), slow(M * N);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>((i * 7919 % 201) - 100) / 64.0f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>((i * 104729 % 199) - 99) / 64.0f;
  for (const bool trans : {false, true}) {
    // trans: A read as (K, M) and B as (N, K), the same buffers.
    detail::sgemm(trans, trans, M, N, K, 1.0f, a.data(), trans ? M : K, b.data(), trans ? K : N, 0.0f, fast.data(), N);
    ref::gemm(trans, trans, M, N, K, 1.0f, a.data(), trans ? M : K, b.data(), trans ? K : N, 0.0f, slow.data(), N);
    double worst = 0;
    for (size_t i = 0; i < fast.size(); ++i) worst = std::max(worst, std::abs(double(fast[i]) - slow[i]));
    if (!(worst <= 1e-3))  // sums of 83 products of values below 2: float rounding is ~1e-5
      fail("BLAS sgemm with OpenBLAS's {} kernels differs from the reference GEMM by {} ({}transposed operands); set "
           "OPENBLAS_CORETYPE to a core this CPU computes correctly with",
           openblas_core(), worst, trans ? "" : "un");
  }
}

}  // namespace px::kernels
