// The command line's first act (kernels/blas_core.h): when the OpenBLAS
// this process loaded picked kernels below what the CPU runs (Prescott's
// SSE3 on an AVX-512 core it does not know), run the process again, the
// same arguments and environment, with OPENBLAS_CORETYPE set to the best
// kernel set for the CPU; OpenBLAS reads it only as it loads. A core type
// the user set is kept. The re-run process finds PX_BLAS_CORE_WHY set and
// goes on; the reason is handed to kernels::set_blas_core_reason, so the
// run's log says why its BLAS runs what it runs (the library reads no
// environment).
#pragma once

namespace px::cli {

// Returns when this process already runs the right kernels (or cannot be
// re-run: a warning on stderr); otherwise does not return.
void run_on_this_cpus_blas_core(char** argv);

}  // namespace px::cli
