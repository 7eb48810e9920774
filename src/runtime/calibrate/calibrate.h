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

// The host's rates (one rank's GEMM FLOP/s, the same GEMM's with bf16
// inputs and fp32 accumulation where the CPU has AVX512_BF16, else 0, and
// its streaming bandwidth), its cores, and the contention curves.
void measure_host(plan::HostProfile& profile, const CalibrationOptions& options, const CalibrationProgress& progress = {});

// Each lossy gradient codec's compute (HostProfile::codecs): compressed
// allreduces of 256k floats on one in-process rank and on two, one kernel
// thread each; PowerSGD is left out (its products are costed by shape).
void measure_codecs(plan::HostProfile& profile, const CalibrationOptions& options,
                    const CalibrationProgress& progress = {});

// One rank's bf16 GEMM rate: measure_host's GEMM with bf16 inputs, fp32
// accumulation and output (kernels::gemm_bf16) on one thread; 0 where the
// CPU has no AVX512_BF16.
double measure_bf16_gemm_rate(const CalibrationOptions& options);

// Times every distinct compute node of `programs` the profile lacks, alone,
// on inputs of its local shapes, with the kernels' current thread count;
// returns how many it timed.
int time_kernels(plan::HostProfile& profile, const std::vector<parallel::Program>& programs,
                 const CalibrationOptions& options, const CalibrationProgress& progress = {});

}  // namespace px
