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
  int contention_attempts = 3;  // while it looks like a busy host's (busy_host_contention)
};

// The host's rates (one rank's GEMM FLOP/s, the same GEMM's with bf16
// inputs and fp32 accumulation where the CPU has AVX512_BF16, else 0, and
// its streaming bandwidth), its cores, and the contention curves.
void measure_host(plan::HostProfile& profile, const CalibrationOptions& options, const CalibrationProgress& progress = {});

// One rank's float32 GEMM rate now: measure_host's GEMM on one thread.
// `calibrate` takes it again at its end: a host that changed pace while
// it measured (another process on the cores) is named, not trusted.
double measure_gemm_rate(const CalibrationOptions& options);

// Whether a profile's contention is what a busy host measures: k <= cores
// ranks computing at once ran more than 1.5x slower each (on free cores
// they run side by side). The message says so, or is empty.
std::string busy_host_contention(const plan::HostProfile& profile);

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
