// What `--precision` means to `parallax simulate` and `plan` on a cluster,
// so that one word means one thing everywhere:
//
//   a calibrated host (a spec with a profile: `--cluster local`) runs what
//     `parallax train --precision bf16` runs: the graph is built with its
//     GEMMs stamped bf16 (graph/precision.h) and the profiled estimator
//     costs those at the profile's bf16 rate; memory follows the graph, in
//     which activations and weights stay float32. bf16 needs the profile's
//     bf16 rate and a CPU with AVX512_BF16. auto: fp32, unless the caller
//     compares both (plan does) and both can run.
//   any other cluster (the GPU presets, a cluster file without a profile)
//     is modelled GPU-style: an fp32 graph costed at the device's bf16
//     FLOP/s, activations at bf16's width and a bf16 working copy of the
//     weights. auto: bf16 where the device has a bf16 rate.
#pragma once

#include <string>
#include <vector>

#include "core/dtype.h"
#include "plan/cluster.h"

namespace px::cli {

struct ModelledPrecision {
  std::string word = "fp32";     // what the strategy file records: fp32 or bf16
  std::string graph = "fp32";    // JobSpec::precision: the graph's stamp
  DType compute = DType::f32;    // plan::SimulationRequest::compute (GPU-style activations)
  DType peak = DType::f32;       // the device rate utilisation is measured against
  bool operator==(const ModelledPrecision&) const = default;
};

// The precisions to model for `word` (auto, fp32 or bf16) on `cluster`:
// one, or fp32 and bf16 when `compare` and auto on a host that has both.
// px::Error when bf16 is asked of a cluster without a bf16 rate or a host
// whose CPU has no AVX512_BF16.
std::vector<ModelledPrecision> precisions_to_model(const std::string& word, const plan::ClusterSpec& cluster,
                                                   bool compare);

}  // namespace px::cli
