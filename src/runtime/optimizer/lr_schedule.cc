#include "runtime/optimizer/lr_schedule.h"

#include <cmath>

#include "core/error.h"

namespace px {

double LrSchedule::at(int64_t step) const {
  if (warmup > 0 && step < warmup) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (kind == "constant") return lr;
  int64_t span = std::max<int64_t>(1, total - warmup);
  double progress = std::min(1.0, static_cast<double>(step - warmup) / static_cast<double>(span));
  double cosine = 0.5 * (1 + std::cos(M_PI * progress));
  return lr * (min_ratio + (1 - min_ratio) * cosine);
}

void validate(const LrSchedule& s) {
  if (!(s.lr > 0)) fail("learning rate {} must be positive", s.lr);
  if (s.kind != "cosine" && s.kind != "constant")
    fail("lr schedule '{}' is unknown: expected cosine or constant", s.kind);
  if (s.warmup < 0) fail("warmup {} must be >= 0 steps", s.warmup);
  if (s.min_ratio < 0 || s.min_ratio > 1) fail("min lr ratio {} must be in [0, 1]", s.min_ratio);
}

}  // namespace px
