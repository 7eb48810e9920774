// What this CPU can run: the instruction sets the bf16 kernels need, asked
// once (cpuid, with the OS's consent to save the AVX-512 registers).
#pragma once

#include <string_view>

namespace px::kernels {

// AVX512_BF16: VDPBF16PS (bf16 pairs multiplied, accumulated in fp32) and
// VCVTNE2PS2BF16. Without it bf16 GEMMs would be emulated, slower than fp32.
bool cpu_has_avx512_bf16();

// Throws px::Error naming `requested_by` (e.g. "--precision bf16") when the
// CPU lacks AVX512_BF16, rather than running a silently slower emulation.
// `cpu_has` is this CPU's answer unless a test asks as another CPU.
void require_avx512_bf16(std::string_view requested_by, bool cpu_has = cpu_has_avx512_bf16());

}  // namespace px::kernels
