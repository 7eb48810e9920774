#include "kernels/cpu_features.h"

#include "core/error.h"

namespace px::kernels {

bool cpu_has_avx512_bf16() {
  // libgcc's cpuid reading also checks XCR0, so "supported" means usable.
  static const bool has = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
  return has;
}

void require_avx512_bf16(std::string_view requested_by, bool cpu_has) {
  if (cpu_has) return;
  fail("{} needs a CPU with AVX512_BF16 (bf16 GEMM with fp32 accumulation); this CPU does not have it "
       "(no avx512_bf16 among the flags in /proc/cpuinfo): use fp32 precision",
       requested_by);
}

}  // namespace px::kernels
