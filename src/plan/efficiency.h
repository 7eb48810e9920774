// Kernel efficiency: how close a device's kernels come to its datasheet,
// so a preset predicts what a real step takes rather than what the peak
// rates allow. A plain value inside DeviceSpec (cluster.h); the presets
// (plan/presets.cc) fill it from named public measurements, a cluster
// file may give its own, and the identity (every fraction 1, no tiles, no
// launch floor) is the datasheet roofline.
//
//   GEMM        rate = peak · gemm.peak_fraction · quantisation(M, N, batch)
//               quantisation: the output's M x N is covered by tiles of
//               tile_m x tile_n that run `units` at a time (one per SM);
//               the last tile of a row/column and the last wave run partly
//               idle (NVIDIA's "Matrix Multiplication Background" guide,
//               tile and wave quantisation). Small K and small N show as
//               the GEMM's own bytes at the achievable bandwidth (the
//               roofline on its arithmetic intensity) and as tile waste.
//   memory      bytes / (memory_bandwidth · memory_fraction)
//   launch      no kernel takes less than launch_seconds (launches are
//               asynchronous: a floor, not a cost added to every kernel)
//   attention   at the forward+backward rate FlashAttention's benchmark
//               measured for the device's attention kernel
//               (attention_kernel: "flash", FlashAttention-2, no T x T
//               scores in memory; "standard", PyTorch's attention, the
//               scores written and passed over by mask, softmax and
//               dropout apart) at the node's head dimension, sequence and
//               mask (AttentionRate; interpolated between the measured
//               points). Without a table: as a GEMM whose output is the
//               T x T scores.
//   overlap     while a collective runs beside it, a GEMM has
//               units - collective_units tile slots: the collective's
//               kernels hold SMs of their own (NCCL: a thread block a
//               channel), so the GEMM's tiles run in more waves
//   links       LinkSpec::efficiency: achieved bus bandwidth / line rate
//               (nccl-tests' busbw), so a collective of n bytes costs the
//               algorithm's α-β terms with β = 1 / (bandwidth · efficiency)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace px::plan {

struct GemmEfficiency {
  // A large GEMM's achieved rate over the datasheet's, with the shape's
  // own quantisation taken out (see gemm_peak_fraction).
  double peak_fraction = 1;
  int64_t tile_m = 1, tile_n = 1;  // one thread block's output tile
  int64_t units = 1;               // tiles resident at once (SMs)
  bool operator==(const GemmEfficiency&) const = default;
};

// One measured point of a fused attention kernel, forward and backward
// together, in FlashAttention's benchmark accounting
// (benchmarks/benchmark_flash_attention.py): forward 4·B·H·T²·D FLOPs,
// halved under the causal mask; backward 2.5x forward; `flops` is that
// count over the measured time.
struct AttentionRate {
  std::string kernel = "flash";  // "flash" or "standard" (KernelEfficiency::attention_kernel)
  int64_t head_dim = 0, seq = 0;
  bool causal = true;
  double flops = 0;  // FLOP/s
  bool operator==(const AttentionRate&) const = default;
};

struct KernelEfficiency {
  GemmEfficiency gemm;
  std::vector<AttentionRate> attention;  // empty: attention costed as a GEMM
  std::string attention_kernel = "flash";  // which of the table's kernels the device runs
  double memory_fraction = 1;  // achievable / datasheet memory bandwidth
  double launch_seconds = 0;   // the least time a kernel takes
  int64_t collective_units = 0;  // GEMM units a collective running beside it holds
  bool operator==(const KernelEfficiency&) const = default;
};

// Share of the tile slots a GEMM with `batch` independent M x N outputs
// keeps busy: M·N·batch over (waves · units · tile_m · tile_n). 1 for the
// identity model.
double gemm_quantisation(const GemmEfficiency& gemm, double m, double n, double batch = 1);

// The rate of `kernel` at (head_dim, seq, causal): linear in the head
// dimension and in log2 of the sequence between the measured points of
// that kernel and mask, clamped beyond them; 0 when there are none.
double attention_rate(const std::vector<AttentionRate>& rates, const std::string& kernel, double head_dim, double seq,
                      bool causal);

// The FLOPs of an attention forward (backward: 2.5x) of B·H heads over T
// tokens of width D, as FlashAttention's benchmark counts them.
double flash_attention_forward_flops(double batch_heads, double seq, double head_dim, bool causal);

// The GEMM efficiency while a collective runs beside it: collective_units
// fewer units, each still a 1/units share of the peak.
GemmEfficiency beside_collective(const KernelEfficiency& efficiency);

// The peak fraction a published maximum-achievable GEMM rate implies:
// achieved / (peak · quantisation of the shape it was achieved at).
double gemm_peak_fraction(const GemmEfficiency& tiles, double achieved, double peak, double m, double n);

nlohmann::json to_json(const KernelEfficiency& efficiency);
// Throws px::Error naming the field, its value and what is expected.
KernelEfficiency kernel_efficiency_from_json(const nlohmann::json& json);
void validate(const KernelEfficiency& efficiency, const std::string& cluster);

}  // namespace px::plan
