// Which OpenBLAS kernel set runs this process's fp32 GEMMs, and which it
// should. Debian's OpenBLAS (0.3.21, built with DYNAMIC_ARCH) picks its
// kernels from the CPU's model number; on a model it does not know it
// falls back to Prescott's SSE3 kernels, which run an AVX-512 core's sgemm
// at about a seventh of its rate (issue 47: 22 against 160 GFLOP/s). It
// reads its choice (OPENBLAS_CORETYPE) once, when it loads, so the fix is
// made at the command line's edge (cli/blas_core_exec.h): the process runs
// again with the core type set. A core type the user set is never
// overridden (some CPUs need theirs to compute correctly).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace px::kernels {

// The x86 vector instruction sets OpenBLAS's kernel sets use, lowest first.
enum class VectorIsa { sse3, avx, avx2, avx512, avx512_bf16 };
std::string_view isa_name(VectorIsa isa);

// This CPU's best (cpuid, with the OS's consent to save the registers).
VectorIsa cpu_vector_isa();

// The instruction set of an OpenBLAS x86-64 core name's kernels
// ("Prescott": sse3, "Haswell": avx2, "SkylakeX": avx512, ...); nullopt for
// a name not known here.
std::optional<VectorIsa> openblas_core_isa(std::string_view core);

// The kernel set this process's OpenBLAS runs (openblas_get_corename).
std::string openblas_core();

struct BlasCoreChoice {
  std::string coretype;  // the OPENBLAS_CORETYPE to run under; "": keep what runs
  std::string why;       // one clause for the log
};

// What to run under, given the CPU, the core OpenBLAS picked and the
// user's OPENBLAS_CORETYPE (nullptr: unset): the highest kernel set this
// CPU runs when OpenBLAS picked a lower one, else nothing.
BlasCoreChoice choose_blas_core(VectorIsa cpu, std::string_view picked, const char* user_coretype);

// Why this process runs the core it runs, as the command line decided it
// (cli/blas_core_exec.h); "" when OpenBLAS's own pick stands unremarked.
void set_blas_core_reason(std::string why);
// The BLAS line of a run's log: the core, and that reason.
std::string blas_description();

// sgemm against the reference GEMM on odd sizes, both transposes; px::Error
// naming the core and the difference when it computes wrong.
void check_blas_against_reference();

}  // namespace px::kernels
