// What `--precision` means to `parallax simulate` and `plan` on a cluster,
// so that one word means one thing everywhere: the strategy's precision
// (parallel/strategy.h), which the lowering stamps on the graph, so the
// Program simulated is the one `parallax train --precision` runs, its
// buffers and specs in their real dtypes (bf16 GEMMs and attention with
// fp32 accumulation; the values only they read stored, sent and gathered
// in bf16; parameters, gradients and optimizer state fp32), costed at the
// device's bf16 rate where a node computes in bf16.
//
//   a calibrated host (a spec with a profile: `--cluster local`): bf16
//     needs the profile's bf16 rate and a CPU with AVX512_BF16. auto: fp32,
//     unless the caller compares both (plan does) and both can run.
//   any other cluster (the GPU presets, a cluster file without a profile):
//     bf16 needs the device's bf16 rate. auto: bf16 where it has one.
#pragma once

#include <string>
#include <vector>

#include "graph/precision.h"
#include "plan/cluster.h"

namespace px::cli {

// The precisions to model for `word` (auto, fp32 or bf16) on `cluster`:
// one, or fp32 and bf16 when `compare` and auto on a host that has both.
// px::Error when bf16 is asked of a cluster without a bf16 rate or a host
// whose CPU has no AVX512_BF16.
std::vector<Precision> precisions_to_model(const std::string& word, const plan::ClusterSpec& cluster, bool compare);

}  // namespace px::cli
