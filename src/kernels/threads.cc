#include "kernels/threads.h"

#include "core/thread_pool.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace px::kernels {

void set_threads(int threads) {
  px::set_num_threads(threads);  // validates threads >= 1
  openblas_set_num_threads(threads);
}

int threads() { return px::num_threads(); }

}  // namespace px::kernels
