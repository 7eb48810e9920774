#include "cli/blas_core_exec.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "kernels/blas_core.h"

namespace px::cli {

void run_on_this_cpus_blas_core(char** argv) {
  if (const char* why = std::getenv("PX_BLAS_CORE_WHY"); why != nullptr) {  // the re-run
    kernels::set_blas_core_reason(why);
    return;
  }
  // PX_TEST_BLAS_PICKED: what a test says OpenBLAS picked, to see the
  // re-run on a CPU whose model this OpenBLAS knows.
  const char* test_picked = std::getenv("PX_TEST_BLAS_PICKED");
  const std::string picked = test_picked != nullptr ? test_picked : kernels::openblas_core();
  const kernels::BlasCoreChoice choice =
      kernels::choose_blas_core(kernels::cpu_vector_isa(), picked, std::getenv("OPENBLAS_CORETYPE"));
  if (choice.coretype.empty()) {
    kernels::set_blas_core_reason(choice.why);
    return;
  }
  setenv("OPENBLAS_CORETYPE", choice.coretype.c_str(), 1);
  setenv("PX_BLAS_CORE_WHY", choice.why.c_str(), 1);
  unsetenv("PX_TEST_BLAS_PICKED");
  execv("/proc/self/exe", argv);
  // Still here: the kernels stay what OpenBLAS picked; say so once.
  fmt::print(stderr, "warning: {}, but re-running parallax failed ({}): fp32 GEMMs run {}'s kernels\n", choice.why,
             std::strerror(errno), picked);
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv("PX_BLAS_CORE_WHY");
  kernels::set_blas_core_reason("re-running under a better core type failed");
}

}  // namespace px::cli
