// Strategy: how a model's graph is split over a device mesh, as a plain
// value (JSON round trip: `parallax train --strategy FILE`, `parallax lower
// ... --print-strategy`). It says *what* runs where; how fast the executor
// runs it (overlap, P3 slices, bucket buffers, the collective algorithm) is
// the executor's business (runtime/executor/program_executor.h).
//
// Data parallelism seeds the batch inputs S(0) along the data axis and
// everything else B; propagation (lower/propagate.h) derives that every
// weight gradient and the loss come out P, and the one resharding rule
// (lower/reshard.h) turns those into the collectives. ZeRO moves where
// optimizer state, gradients and parameters are stored: S along the data
// axis instead of B. Tensor parallelism seeds parameters (and, for sequence
// parallelism, activations) on a model axis (parallel/tensor_parallel.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "comm/compression/spec.h"
#include "graph/placement.h"
#include "graph/precision.h"
#include "parallel/mesh.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/row_split.h"

namespace px::parallel {

// Default gradient bucket size: bench/sweep_buckets.sh times 2-rank GPT
// steps on the trainer's own code path (the lowered Program in the
// ProgramExecutor) at several sizes against it (docs/data_parallel.md).
constexpr int64_t kDefaultBucketBytes = 256 << 10;

// A graph input or parameter, by name, placed on one mesh axis. Inputs and
// parameters without a seed are B on every axis.
struct PlacementSeed {
  std::string value;
  std::string axis;
  Placement placement;
  bool operator==(const PlacementSeed&) const = default;
};

// Activation recomputation (lower/recompute.h): none keeps every forward
// value backward reads; full keeps only each layer's input (a layer is a
// node scope "h.<i>") and recomputes the layer before its backward;
// selective recomputes the attention core only (Megatron's choice for
// kernels that keep the T x T probabilities; ours keeps out and lse, so it
// drops only the lse, kernels/attention.h).
enum class Recompute { none, selective, full };
Recompute recompute_from_name(std::string_view name);  // px::Error naming the choices
std::string_view recompute_name(Recompute recompute);

// Pipeline parallelism: the graph cut into stages that run along a mesh
// axis, in the order a schedule gives (parallel/pipeline_schedule.h). Off
// unless the mesh has the axis with more than one rank. The micro-batches
// are Strategy::micro_batches.
struct PipelineOptions {
  std::string axis = "pp";
  PipelineKind schedule = PipelineKind::one_f_one_b;
  int virtual_stages = 1;               // model chunks per rank (interleaved)
  std::vector<std::string> stage_cuts;  // layers that start stages 1, 2, ... (empty: balanced by cost)
  bool operator==(const PipelineOptions&) const = default;
};

// Context parallelism (LightSeq's DistAttn, Li et al. 2023; DeepSpeed-
// Ulysses): the tokens of every sequence split into chunks along a mesh
// axis, through attention too. Every op but attention runs on its chunk
// (the residual stream is seeded S(1) there: parallel/context_parallel.h);
// attention gets the whole sequence by the method's exchange. Weights are
// whole on the axis and their gradients come out P: they are reduced with
// the data axis' in one group of data x context ranks, which ZeRO shards
// over too. Off unless the mesh has the axis with more than one rank.
enum class ContextMethod {
  // LightSeq's DistAttn / ring attention: each rank keeps its queries and
  // passes key/value blocks around the axis, merging the partial results
  // by their log-sum-exps (parallel/context_parallel.h's rewrite).
  ring,
  // DeepSpeed-Ulysses: q, k and v all-to-all from sequence chunks to head
  // groups before attention, the output back after; the heads must divide
  // by the axis' ranks.
  all_to_all,
};
ContextMethod context_method_from_name(std::string_view name);  // px::Error naming the choices
std::string_view context_method_name(ContextMethod method);

struct ContextOptions {
  std::string axis = "cp";
  ContextMethod method = ContextMethod::ring;
  // The ring's causal balance: the sequence split in zigzag blocks (rank r
  // of n holds blocks r and 2n-1-r of 2n, graph/placement.h's Z), so every
  // rank's attention sees as many keys. Off: plain contiguous chunks, the
  // last rank's attention the whole sequence's. All-to-all needs none.
  bool balance = true;
  bool operator==(const ContextOptions&) const = default;
};

// Expert parallelism (parallel/expert_parallel.h): the mesh axis of this
// name, right after the data axis, spreads every mixture-of-experts
// layer's experts over its ranks, which route their own rows. Off unless
// the mesh has the axis with more than one rank.
inline constexpr std::string_view kExpertAxis = "ep";

struct LoweringOptions {
  // Gradients are fused into buckets in the order backward produces them; a
  // bucket closes once it holds at least this many bytes (0: one per tensor).
  int64_t bucket_bytes = kDefaultBucketBytes;
  // The squared global gradient norm is computed before any update (for
  // clipping and the metrics). Off, every update may run as soon as its own
  // gradient is reduced (P3).
  bool global_norm = true;
  // The program applies the optimizer. Off, it ends with the reduced
  // gradients (a parameter-server worker pushes them instead).
  bool updates = true;
  // Lossy gradient compression with error feedback: every weight gradient
  // is its own collective with this codec (PowerSGD needs the matrix);
  // vectors (biases, norm scales) go uncompressed, as DGC and PowerSGD do.
  comm::compression::Spec compression;
  // DGC's momentum correction (Lin et al. 2018) for sparsified gradients:
  // each rank keeps its own velocity u = m*u + g and compresses u; the
  // optimizer then runs without momentum. 0: off.
  double local_momentum = 0;
  Recompute recompute = Recompute::none;
  // P3 (Jayarajan et al. 2019). > 0: every gradient is reduced in slices of
  // about this many bytes, the layer forward needs first first (a more
  // urgent gradient overtakes a queued one at a slice boundary), and each
  // parameter's update is deferred to the next step, just before its
  // forward reads it (Instr::deferred). Needs one bucket per tensor and no
  // global norm (compose() lowers it so). 0: off.
  int64_t p3_slice_bytes = 0;
  // Gradients of parameters a model axis replicates but whose gradient is a
  // partial sum along it (sequence parallelism's LayerNorms: Megatron-LM's
  // allreduce of layernorm grads) are accumulated partial and reduced over
  // that axis on its progress lane once backward completes their bucket,
  // while backward goes on; off, each is reduced inline as it is made.
  bool overlap_model_gradients = false;
  // Expert parallelism with two or more micro-batches (and no pipeline,
  // ZeRO-2/3): two micro-batches' forwards, then their backwards, run
  // interleaved at their routed exchanges, each exchange a job of the
  // expert axis' progress lane while the other micro-batch computes
  // (Route::overlapped). Two micro-batches' activations are alive at once,
  // as with one micro-batch of both: off, they run one after the other.
  bool overlap_expert_exchanges = false;
  bool operator==(const LoweringOptions&) const = default;
};

struct Strategy {
  DeviceMesh mesh = DeviceMesh::data_parallel(1);
  std::string data_axis = "dp";
  std::vector<PlacementSeed> seeds;
  // 0: every rank stores parameters, gradients and optimizer state whole.
  // 1: optimizer state S along the data axis (gradients reduce-scattered to
  //    the shard, updated parameters all-gathered);
  // 2: gradients too (each micro-batch's buckets reduce-scattered and freed);
  // 3: parameters too (all-gathered before each use, freed after).
  int zero_stage = 0;
  int micro_batches = 1;  // gradient accumulation (and the pipeline's M): the rank's rows in this many parts
  LoweringOptions lowering;
  PipelineOptions pipeline;
  ContextOptions context;
  // The run's precision, one value from the flag to the Program: the
  // lowering stamps the graph it lowers with it (graph/precision.h: bf16
  // GEMMs and attention with fp32 accumulation, the values only they read
  // stored, sent and gathered in bf16), so the Program's buffers and specs
  // carry their real dtypes, and the executor, the replay, the memory
  // ledger and the planner read those. A file records it, so one `parallax
  // plan` writes runs in the precision it was planned for.
  Precision precision = Precision::fp32;
  // How the data axis splits a batch's rows (parallel/row_split.h): empty,
  // evenly; else one positive integer per data rank, rows in proportion
  // (ranks of different speeds: the planner sets them from the ranks'
  // rates). Exact either way: the loss is scaled by the global batch.
  // Under expert parallelism one per data x expert rank (row_ranks()).
  std::vector<int64_t> row_shares;

  int data_ranks() const { return mesh.size(data_axis); }
  // Ranks along the expert axis (1: no expert parallelism).
  int expert_ranks() const;
  // The batch's rows are split over the data ranks, and under expert
  // parallelism over each one's expert ranks too (data outer, expert
  // inner); a rank's place among them by its mesh coordinates.
  int row_ranks() const { return data_ranks() * expert_ranks(); }
  int row_rank(const std::vector<int>& coords) const;
  RowSplit row_split() const { return {.world = row_ranks(), .shares = row_shares}; }
  // Ranks along the pipeline axis (1: no pipeline).
  int pipeline_ranks() const;
  // Ranks along the context axis (1: no context parallelism).
  int context_ranks() const;
  bool operator==(const Strategy&) const = default;
};

// This rank's groups for the strategy's mesh, with the data path's over
// data x context ranks under context parallelism, data x expert ranks
// under expert parallelism (collective: every rank of `world` calls it).
MeshGroups make_strategy_groups(comm::Communicator& world, const Strategy& strategy);
// The axis the data path joins the data axis with: the context axis, or
// the expert axis (they do not combine: validate), or -1.
int joined_axis(const Strategy& strategy);

// Strategies are built and validated in parallel/compose.h.

nlohmann::json to_json(const Strategy& strategy);
// Reads what to_json writes; unknown keys, bad values and parts that do not
// combine (validate, parallel/compose.h) are named errors.
Strategy strategy_from_json(const nlohmann::json& json);
// A strategy file; `records_precision` (when given) tells whether it names
// a precision (one written before precision was recorded does not: it runs
// at the run's, and reads as fp32).
Strategy load_strategy(const std::string& path, bool* records_precision = nullptr);


}  // namespace px::parallel
