// The GPU presets: datasheet rates, and how close real kernels and
// collectives come to them (plan/efficiency.h). Every figure names its
// public source beside it; none is fitted to the published runs the
// presets are scored on (bench/published_runs.json, docs/planner.md,
// "Published scale"). One node each; cluster_named sets the node count.
#include "plan/cluster.h"

namespace px::plan {
namespace {

// NVIDIA, "Matrix Multiplication Background User's Guide" (DU-09799-001,
// sections 2.3 and 3): cuBLAS's most efficient large tile is 256x128, and
// one tile runs per SM, so the output is computed in waves of #SM tiles.
constexpr int64_t kTileM = 256, kTileN = 128;

// Stas Bekman, "Machine Learning Engineering", compute/accelerator
// (github.com/stas00/ml-engineering), "Maximum Achievable Matmul FLOPS":
// the best bf16 torch.matmul found by mamf-finder.py, as (TFLOP/s, the
// shape M x K x N it was found at). The peak fraction takes that shape's
// own quantisation out, so the model reproduces the figure at that shape.
struct Mamf {
  double flops;
  double m, n;
};
constexpr Mamf kA100Mamf{.flops = 267.9e12, .m = 6912, .n = 16384};  // CUDA 12.1, 6912x2048x16384
constexpr Mamf kH100Mamf{.flops = 792.1e12, .m = 6144, .n = 17920};  // CUDA 12.1, 6144x2816x17920

// Attention, forward + backward, 16-bit: FlashAttention's benchmark on an
// A100 80GB SXM4 and an H100 80GB SXM5 (Dao-AILab/flash-attention,
// assets/flash2_a100_fwd_bwd_benchmark.png and
// flash2_h100_fwd_bwd_benchmark.png, the README's figures, at 0251105a;
// benchmarks/benchmark_flash_attention.py: batch x sequence = 16k tokens,
// 2048 wide, its FLOP accounting is plan/efficiency.h AttentionRate's).
// Bar labels in TFLOP/s at sequence 512 to 16k for two kernels:
//   flash     FlashAttention-2, the kernel llm-foundry's and most PyTorch
//             runs use (cuDNN's and FlashAttention-3 are faster on H100).
//             Labels the legend hides (A100 without the mask at 1k, and
//             at 512 for head dimension 128) are left out.
//   standard  the benchmark's "Pytorch": the T x T scores written, then
//             the mask, softmax and dropout passes over them apart, as
//             Megatron-LM ran attention before fused kernels (its 2021-22
//             runs, BLOOM's Megatron-DeepSpeed). At 16k it ran out of
//             memory: clamped at 8k.
// The preset runs flash; simulate and plan take --attention-kernel.
constexpr int64_t kSeqs[] = {512, 1024, 2048, 4096, 8192, 16384};
struct AttentionRow {
  const char* kernel;
  int64_t head_dim;
  bool causal;
  double tflops[6];  // at kSeqs; 0: not read
};
std::vector<AttentionRate> attention_rates(std::initializer_list<AttentionRow> rows) {
  std::vector<AttentionRate> out;
  for (const AttentionRow& row : rows)
    for (int i = 0; i < 6; ++i)
      if (row.tflops[i] > 0)
        out.push_back({.kernel = row.kernel, .head_dim = row.head_dim, .seq = kSeqs[i], .causal = row.causal,
                       .flops = row.tflops[i] * 1e12});
  return out;
}
const std::vector<AttentionRate> kA100Attention = attention_rates({
    {"flash", 64, true, {88, 119, 140, 156, 165, 171}},
    {"flash", 128, true, {99, 133, 155, 173, 182, 189}},
    {"flash", 64, false, {132, 0, 162, 171, 175, 176}},
    {"flash", 128, false, {0, 0, 187, 196, 201, 203}},
    {"standard", 64, true, {15, 16, 17, 18, 18, 0}},
    {"standard", 128, true, {23, 28, 32, 32, 34, 0}},
    {"standard", 64, false, {36, 40, 43, 45, 46, 0}},
    {"standard", 128, false, {53, 67, 76, 79, 86, 0}},
});
const std::vector<AttentionRate> kH100Attention = attention_rates({
    {"flash", 64, true, {141, 192, 232, 257, 273, 284}},
    {"flash", 128, true, {163, 221, 265, 294, 308, 328}},
    {"flash", 64, false, {215, 254, 274, 288, 294, 296}},
    {"flash", 128, false, {248, 294, 320, 326, 335, 338}},
    {"standard", 64, true, {26, 29, 31, 32, 32, 0}},
    {"standard", 128, true, {40, 50, 57, 61, 63, 0}},
    {"standard", 64, false, {62, 72, 81, 86, 87, 0}},
    {"standard", 128, false, {93, 120, 145, 160, 167, 0}},
});

// Sustained HBM bandwidth over the datasheet's: STREAM-class copy and triad
// kernels reach about 90% on A100 and H100 (BabelStream-style
// measurements; H100 SXM: 3.0-3.1 of 3.35 TB/s). The least precisely
// sourced constant here: docs/planner.md says so.
constexpr double kHbmFraction = 0.90;

// NVIDIA developer blog, "Getting Started with CUDA Graphs" (A. Gray,
// 2019): a stream of tiny kernels launched back to back runs at 3.8 us a
// kernel (launch overhead overlapped with execution).
constexpr double kLaunchSeconds = 3.8e-6;

// A collective beside a GEMM holds SMs: an ncclAllGather overlapped with
// a 132-block GEMM on an H100 launched 24 thread blocks, one an SM, and
// pushed the GEMM's last blocks into a second wave (its time nearly
// doubled; NVIDIA developer forums, "Compute-Communication Overlap Causes
// Severe GEMM Performance Degradation because of Tail Effect", 2025).
// NCCL sizes its channels by the topology, not the SM count, so the A100
// preset assumes the same 24 over NVSwitch.
constexpr int64_t kNcclUnits = 24;

// NCCL's achieved bus bandwidth over the line rate. NVLink: "450GB/s is
// the line rate. With the protocol overhead (~20%) NCCL can get an
// effective NVLink bandwidth of 370GB/s" (S. Jeaugey, NVIDIA, nccl-tests
// issue #212); the same protocol runs over NVLink 3. InfiniBand: 96 GB/s
// peak all_reduce busbw against 100 GB/s of HDR line rate (3 nodes of 8
// A100, 4 HDR ports each; nccl-tests issue #119).
constexpr double kNvlink4Efficiency = 370.0 / 450.0;
// NVLink SHARP (NVLS): on H100's NVSwitch the switch reduces, and NCCL's
// all_reduce reaches "~480GB/s" busbw (S. Jeaugey, nccl-tests issue #212;
// 476 GB/s measured on 8 H100 and confirmed "in the expected range" by
// NVIDIA, nccl-tests issue #290). A100's NVSwitch has no SHARP.
constexpr double kNvlink4AllReduceEfficiency = 480.0 / 450.0;
constexpr double kNvlink3Efficiency = kNvlink4Efficiency;
constexpr double kInfinibandEfficiency = 96.0 / 100.0;

// All-to-all (expert parallelism's exchanges) runs as point-to-point
// pairs. NVLink 4: alltoall_perf on 4 H100 SXM of one node, 500 MB, busbw
// 334.90 GB/s of the 450 GB/s line rate (NVIDIA/nccl issue #2169, 2025).
// No public A100 figure was found: the same protocol over NVLink 3 is
// assumed to reach the same fraction. InfiniBand: an all-to-all cannot
// aggregate a node's NICs, so each GPU gets its own NIC's rate, 48-49 of
// 50 GB/s on NDR (S. Jeaugey and A. Laddy, NVIDIA, nccl-tests issue #267,
// 2024-2025; busbw = algbw x (n-1)/n, nccl-tests issue #130); HDR taken at
// the same fraction.
constexpr double kNvlinkAllToAllEfficiency = 334.90 / 450.0;
constexpr double kInfinibandAllToAllEfficiency = 48.5 / 50.0;

// Datasheets give no latencies: 3 us (NVLink) and 6 us (InfiniBand) are
// typical per-message software latencies of NCCL-class libraries,
// estimates rather than vendor figures.
constexpr double kNvlinkLatency = 3e-6, kInfinibandLatency = 6e-6;

// NVIDIA A100 Tensor Core GPU datasheet (80 GB SXM column); the A100
// whitepaper (108 SMs); NVIDIA DGX A100 datasheet (eight single-port
// ConnectX-6 200 Gb/s HDR adapters for the compute fabric, two AMD EPYC
// 7742; NVLink 3: 600 GB/s bidirectional a GPU).
ClusterSpec dgx_a100() {
  const GemmEfficiency tiles{.tile_m = kTileM, .tile_n = kTileN, .units = 108};
  GemmEfficiency gemm = tiles;
  gemm.peak_fraction = gemm_peak_fraction(tiles, kA100Mamf.flops, 312e12, kA100Mamf.m, kA100Mamf.n);
  return {.name = "dgx-a100",
          .nodes = 1,
          .devices_per_node = 8,
          .device = {.name = "A100-SXM4-80GB",
                     .flops_f32 = 19.5e12,
                     .flops_bf16 = 312e12,
                     .memory_bytes = 80e9,
                     .memory_bandwidth = 2039e9,
                     .efficiency = {.gemm = gemm,
                                    .attention = kA100Attention,
                                    .memory_fraction = kHbmFraction,
                                    .launch_seconds = kLaunchSeconds,
                                    .collective_units = kNcclUnits}},
          .intra_node = {.name = "NVLink 3 / NVSwitch", .bandwidth = 300e9, .latency = kNvlinkLatency,
                         .efficiency = kNvlink3Efficiency, .all_to_all_efficiency = kNvlinkAllToAllEfficiency},
          .inter_node = {.name = "8x HDR InfiniBand 200 Gb/s", .bandwidth = 25e9, .latency = kInfinibandLatency,
                         .efficiency = kInfinibandEfficiency, .all_to_all_efficiency = kInfinibandAllToAllEfficiency},
          .host = "2x AMD EPYC 7742"};
}

// NVIDIA H100 Tensor Core GPU datasheet (SXM column, dense: half the
// sparsity figures); the H100 whitepaper (132 SMs on SXM5); NVIDIA DGX
// H100 datasheet (eight ConnectX-7 400 Gb/s ports, two Intel Xeon
// Platinum 8480C; NVLink 4: 900 GB/s bidirectional a GPU).
ClusterSpec dgx_h100() {
  const GemmEfficiency tiles{.tile_m = kTileM, .tile_n = kTileN, .units = 132};
  GemmEfficiency gemm = tiles;
  gemm.peak_fraction = gemm_peak_fraction(tiles, kH100Mamf.flops, 989e12, kH100Mamf.m, kH100Mamf.n);
  return {.name = "dgx-h100",
          .nodes = 1,
          .devices_per_node = 8,
          .device = {.name = "H100-SXM5-80GB",
                     .flops_f32 = 67e12,
                     .flops_bf16 = 989e12,
                     .memory_bytes = 80e9,
                     .memory_bandwidth = 3350e9,
                     .efficiency = {.gemm = gemm,
                                    .attention = kH100Attention,
                                    .memory_fraction = kHbmFraction,
                                    .launch_seconds = kLaunchSeconds,
                                    .collective_units = kNcclUnits}},
          .intra_node = {.name = "NVLink 4 / NVSwitch", .bandwidth = 450e9, .latency = kNvlinkLatency,
                         .efficiency = kNvlink4Efficiency, .all_to_all_efficiency = kNvlinkAllToAllEfficiency,
                         .all_reduce_efficiency = kNvlink4AllReduceEfficiency},
          .inter_node = {.name = "8x NDR InfiniBand 400 Gb/s", .bandwidth = 50e9, .latency = kInfinibandLatency,
                         .efficiency = kInfinibandEfficiency, .all_to_all_efficiency = kInfinibandAllToAllEfficiency},
          .host = "2x Intel Xeon Platinum 8480C"};
}

}  // namespace

std::optional<ClusterSpec> preset_cluster(const std::string& name) {
  if (name == "dgx-a100") return dgx_a100();
  if (name == "dgx-h100") return dgx_h100();
  return std::nullopt;
}

}  // namespace px::plan
