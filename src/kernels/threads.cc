#include "kernels/threads.h"

#include "core/thread_pool.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace px::kernels {

void set_threads(int threads) {
  px::set_num_threads(threads);  // validates threads >= 1
  // BLAS runs single-threaded inside parallax's own pool (kernels split large GEMMs
  // across it): two thread pools spinning on two cores slow each other down.
  openblas_set_num_threads(1);
}

int threads() { return px::num_threads(); }

}  // namespace px::kernels
