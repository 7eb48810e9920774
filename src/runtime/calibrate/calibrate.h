// Calibration: what `parallax calibrate` (and a run's --local-cluster
// prediction) measures on this host into a HostProfile (plan/profile.h), by
// running kernels; the planner only reads the profile. The rates are one
// thread's; the host is shared and noisy, so every figure is the median of a
// few batches.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "parallel/program.h"
#include "plan/profile.h"

namespace px {

using CalibrationProgress = std::function<void(const std::string&)>;

struct CalibrationOptions {
  double batch_seconds = 0.02;  // a kernel runs at least this long per batch
  int batches = 3;              // the median is kept
  int max_ranks = 4;            // contention measured for 1 .. max_ranks ranks at once
};

// The host's rates (one rank's GEMM FLOP/s and streaming bandwidth), its
// cores, and the contention curves.
void measure_host(plan::HostProfile& profile, const CalibrationOptions& options, const CalibrationProgress& progress = {});

// Times every distinct compute node of `programs` the profile lacks, alone,
// on inputs of its local shapes, with the kernels' current thread count;
// returns how many it timed.
int time_kernels(plan::HostProfile& profile, const std::vector<parallel::Program>& programs,
                 const CalibrationOptions& options, const CalibrationProgress& progress = {});

}  // namespace px
