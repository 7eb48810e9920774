// HostProfile: what `parallax calibrate` measured on this host, so the
// `local` cluster spec predicts what `parallax train` will take here.
//
//   kernels     every distinct node (op, attributes, local input shapes) of
//               the programs it was asked about, timed alone on one rank:
//               the measured seconds beside the host's roofline for it. A
//               node not timed gets its op's timings interpolated: the
//               measured / roofline ratio at the nearest roofline times
//               (in log space), the ratio held beyond the ends; an op never
//               timed gets the roofline. Timings are per kernel thread count
//               (in-process ranks run one thread each, a lone rank more)
//               and per precision: a GEMM stamped bf16 without bf16
//               timings of its op is its fp32 twin scaled by the rates.
//   contention  in-process ranks are threads sharing the host's cores: a
//               kernel's time when k ranks compute at once over its time
//               alone, for compute-bound (GEMM) and memory-bound (streaming)
//               kernels, k = 1 .. measured; beyond, it grows as k / cores.
//   codecs      each lossy gradient codec's compute (comm/compression):
//               encoding a rank's gradient and decoding one payload, per
//               element on one thread; a compressed allreduce is its
//               exchange plus encode + ranks x decode
//   comm        the in-process transport's α-β-γ cost model
//               (comm/cost_model.h): quickly measured links, or the fits
//               `parallax bench comm --tune` saved.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "comm/cost_model.h"
#include "graph/graph.h"
#include "graph/precision.h"

namespace px::plan {

struct KernelTiming {
  std::string op;
  int threads = 1;      // kernel threads it ran with
  double roofline = 0;  // seconds at the host's peak rates (flops / FLOP/s, bytes / bandwidth)
  double seconds = 0;   // measured: one rank alone, median of batches
  bool operator==(const KernelTiming&) const = default;
};

// A gradient codec's compute on one kernel thread, seconds per element of
// the gradient: the encode (error feedback's add, the quantizing or the
// selection, the new residual) and the decode and add of one rank's payload.
struct CodecTiming {
  double encode = 0;
  double decode = 0;
  bool operator==(const CodecTiming&) const = default;
};

struct HostProfile {
  int cores = 1;                  // online CPUs
  double flops = 0;               // FLOP/s of one rank's large GEMM
  double flops_bf16 = 0;          // the same GEMM with bf16 inputs, fp32 accumulation (0: not measured, no bf16)
  double memory_bandwidth = 0;    // bytes/s one rank streams (read + write) past the caches
  double cache_bandwidth = 0;     // the same over a working set the last-level cache holds (0: not measured)
  double cache_bytes = 0;         // the last-level cache
  // A pass over `bytes` (read and written): at the cache's bandwidth when they fit in it.
  double pass_seconds(double bytes) const;
  std::vector<double> contention_compute;  // [k-1]: time with k ranks at once / alone
  std::vector<double> contention_memory;
  comm::CostModel comm;
  std::map<std::string, KernelTiming> kernels;  // kernel_key@threads -> timing
  // By method name (comm::compression::method_name: "int8", "topk", ...),
  // each measured at the method's default parameter (topk: 1%). PowerSGD,
  // whose cost is its products' shapes, is not here.
  std::map<std::string, CodecTiming> codecs;
  bool operator==(const HostProfile&) const = default;
};

// A node's identity in the profile, run with `threads` kernel threads:
// "op{attrs}(F32[8,64],F32[64,64])@1".
std::string kernel_key(const Graph& graph, const Node& node, int threads);
// The node's cost by its op's cost function (streaming its tensors when it has none).
OpCost node_cost(const Graph& graph, const Node& node);
double roofline_seconds(const HostProfile& profile, const OpCost& cost);
// One rank alone with `threads` kernel threads: the node's timing, else
// its op's timings of the same precision at those threads interpolated,
// else (a GEMM stamped bf16 whose op has no bf16 timings)
// bf16_gemm_seconds, else the roofline.
double kernel_seconds(const HostProfile& profile, const Graph& graph, const Node& node, int threads);
// A GEMM node stamped bf16 (graph/precision.h) from its fp32 twin's time:
// the same node without the stamp, timed or interpolated as above, times
// flops / flops_bf16 (the profile's two rates on the same GEMM), plus the
// pass that rounds its fp32 operands to bf16 copies (4 bytes read and 2
// written an element, at memory_bandwidth). The rates are a large GEMM's;
// a small GEMM's fp32 time carries its own inefficiency, which the scaling
// keeps. Calibrating the model in bf16 (timings of its own) is closer.
double bf16_gemm_seconds(const HostProfile& profile, const Graph& graph, const Node& node, int threads);
// The slowdown of a kernel when `ranks` ranks compute at once (>= 1; a
// fraction is the time-average of a pipeline's busy ranks, interpolated).
double contention(const HostProfile& profile, double ranks, bool memory_bound);

nlohmann::json to_json(const HostProfile& profile);
// Throws px::Error naming the field, its value and what is expected.
HostProfile profile_from_json(const nlohmann::json& json);

}  // namespace px::plan
