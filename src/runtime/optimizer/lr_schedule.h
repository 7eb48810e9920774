// Learning-rate schedule: linear warmup from 0 over `warmup` steps, then
// cosine decay to lr * min_ratio at `total` steps ("cosine"), or constant.
#pragma once

#include <cstdint>
#include <string>

namespace px {

struct LrSchedule {
  std::string kind = "cosine";  // "cosine" or "constant"
  double lr = 3e-4;
  int64_t warmup = 0;
  int64_t total = 1;
  double min_ratio = 0.1;
  // Learning rate for step (0-based).
  double at(int64_t step) const;
  bool operator==(const LrSchedule&) const = default;
};

void validate(const LrSchedule& schedule);

}  // namespace px
