#include "core/float_env.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace px {

void flush_subnormals_to_zero() {
#if defined(__x86_64__) || defined(__i386__)
  constexpr unsigned kFlushToZero = 0x8000;     // MXCSR bit 15
  constexpr unsigned kDenormalsAreZero = 0x0040;  // MXCSR bit 6
  _mm_setcsr(_mm_getcsr() | kFlushToZero | kDenormalsAreZero);
#endif
}

}  // namespace px
