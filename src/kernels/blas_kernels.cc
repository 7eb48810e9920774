#include "kernels/blas_kernels.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

extern "C" {
char* openblas_get_corename(void);
// OpenBLAS's dynamic-architecture entry points: quit forgets the selected
// kernel table, init selects again (honouring OPENBLAS_CORETYPE).
void gotoblas_dynamic_quit(void);
void gotoblas_dynamic_init(void);
}

namespace px::kernels {
namespace {

bool cpu_runs_avx512_kernels() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}

void select_kernels() {
  std::string current = openblas_get_corename();
  bool fallback = current == "Haswell" || current == "Zen";
  if (fallback && cpu_runs_avx512_kernels() && std::getenv("OPENBLAS_CORETYPE") == nullptr) {
    setenv("OPENBLAS_CORETYPE", "SKYLAKEX", 1);
    gotoblas_dynamic_quit();
    gotoblas_dynamic_init();
    unsetenv("OPENBLAS_CORETYPE");
  }
}

}  // namespace

// Once, before the first GEMM: every GEMM passes through here, and
// call_once holds back concurrent callers until the table is swapped, so no
// GEMM runs while it changes. (Not at load time: OpenBLAS's own threads are
// still starting then and re-select the fallback behind our back.) A user's
// own OPENBLAS_CORETYPE choice is left alone.
bool blas_kernels_selected() {
  static std::once_flag once;
  std::call_once(once, select_kernels);
  return true;
}

std::string blas_kernel_name() { return openblas_get_corename(); }

}  // namespace px::kernels
