// Strategy composition: the one place a Strategy is put together and the
// one validate() of how its parts combine. `parallax train`'s flags (a
// StrategyRequest, parsed by the CLI), a strategy file, the planner's grid
// points (plan/candidates.h) and the golden Programs' tests all compose
// through compose(); every rule that two parts (or a part and how the run
// uses it: P3, clipping) must obey is in validate(), each a px::Error that
// names the parts, the bad value and what is expected.
//
// A request describes the mesh by its parallel degrees, {pp, dp, ep, cp, tp}
// with pp outermost and tp innermost (dp = ranks / (pp ep cp tp)), and what runs on
// it; a strategy file gives the Strategy whole instead. Either way the run
// then decides two things here, not in the trainer: P3 lowers without a
// global norm and with a bucket per tensor, and sparsified gradients under
// SGD momentum move the momentum into the ranks (DGC's correction).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/collectives.h"
#include "comm/compression/spec.h"
#include "graph/graph.h"
#include "parallel/strategy.h"

namespace px::parallel {

// What a user asks of the strategy, part by part (`parallax train`,
// `lower`, `simulate` and `plan` flags), and two inputs of its lowering
// that are not part of the Strategy (LowerRequest): ZeRO's bucket buffers
// and the collective algorithm.
struct StrategyRequest {
  int64_t bucket_bytes = kDefaultBucketBytes;  // gradients fused into buckets of about this many bytes
  int zero_stage = 0;                          // 0-3 (Strategy::zero_stage)
  comm::compression::Spec compression;         // lossy gradient compression with error feedback
  // P3: > 0 slices gradients and updates each layer before the next forward
  // reads it: lowered without a global norm, a bucket per tensor.
  int64_t p3_slice_bytes = 0;
  int tensor_parallel = 1;         // Megatron tensor parallelism: ranks per tensor-parallel group (mesh {dp, tp})
  bool sequence_parallel = false;  // and LayerNorm/dropout/residuals split along the sequence
  // Partial gradients reduced over model axes on their progress lane
  // (LoweringOptions::overlap_model_gradients).
  bool overlap_model_gradients = false;
  // Two micro-batches interleaved so expert exchanges overlap compute
  // (LoweringOptions::overlap_expert_exchanges).
  bool overlap_expert_exchanges = false;
  int pipeline_parallel = 1;       // pipeline stages (mesh {pp, dp, cp, tp}: pp outermost)
  int context_parallel = 1;        // ranks each sequence is split over (the cp axis; Strategy::context)
  int expert_parallel = 1;         // ranks each data rank's experts are spread over (the ep axis; parallel/expert_parallel.h)
  ContextMethod context_method = ContextMethod::ring;
  bool context_balance = true;     // the ring's zigzag split (ContextOptions::balance)
  PipelineOptions pipeline;        // schedule, virtual stages, stage cuts
  Recompute recompute = Recompute::none;  // activation recomputation
  // Micro-batches a step's rows are cut into (gradient accumulation; a
  // pipeline's schedule runs them). They need not divide the rows: some
  // micro-batches are one row longer, and more than rows leaves some empty.
  int micro_batches = 1;
  Precision precision = Precision::fp32;  // the run's (Strategy::precision); a file records its own
  std::vector<int64_t> row_shares;        // the data axis' rows in proportion to these (Strategy::row_shares)
  int mesh_ranks = 0;              // --mesh or a --strategy file: the ranks it names (0: neither)
  std::string strategy_file;       // a strategy JSON file; overrides the parts above
  int bucket_buffers = 4;          // ZeRO-2/3: most gradient bucket buffers alive at once (LowerRequest)
  comm::CollectiveOptions collective;  // the algorithm collectives run (LowerRequest)
  bool operator==(const StrategyRequest&) const = default;
};

// The model and the run a strategy is composed for.
struct CompositionInputs {
  const Graph* graph = nullptr;           // the forward graph (tensor parallelism's seeds come from its names)
  std::vector<std::string> batch_inputs;  // seeded S(0) along the data axis
  int ranks = 1;                          // the job's
  double grad_clip = 0;                   // the run clips the global gradient norm to this (0: off)
  double sgd_momentum = 0;                // the run's SGD momentum (0: none, or another optimizer)
};

// How the run uses a strategy, where a combination rule depends on it.
struct StrategyUse {
  double grad_clip = 0;  // global-norm clipping (0: off)
};

// The parts a request is made of, for searches that vary one of them (a
// layer's placements, a stage layout) and compose the rest by hand:
// `ranks`-way data parallelism, the named batch inputs S(0) along "dp";
Strategy data_parallel(int ranks, const std::vector<std::string>& batch_inputs);
// mesh {dp, tp} with the batch inputs split along dp and nothing placed on
// tp yet (the layer-wise searches seed each layer: plan/layer_placement.h);
Strategy data_tensor_mesh(int dp, int tp, const std::vector<std::string>& batch_inputs);
// data parallelism over `dp` ranks times Megatron tensor parallelism
// (parallel/tensor_parallel.h) over `tp` on mesh {dp, tp} (tp innermost: a
// tensor-parallel group is consecutive ranks, which under MPI share a host);
Strategy tensor_parallel(const Graph& graph, int dp, int tp, const std::vector<std::string>& batch_inputs,
                         bool sequence_parallel);
// `base` with its data axis' ranks each split `ranks` ways along the
// sequence: a context axis right after the data axis (so a context group
// is consecutive ranks, or consecutive tensor groups) and its seeds
// (parallel/context_parallel.h).
Strategy with_context(Strategy base, const Graph& graph, int ranks, ContextOptions context);
// `base` with its data axis' ranks each spreading the experts over `ranks`
// expert ranks: the expert axis right after the data axis, and the expert
// weights' seeds (parallel/expert_parallel.h).
Strategy with_experts(Strategy base, const Graph& graph, int ranks);
// `base` (over its own mesh) repeated on `stages` pipeline ranks: the
// pipeline axis goes first (outermost), so a stage's data and tensor groups
// are consecutive ranks.
Strategy with_pipeline(Strategy base, int stages, PipelineOptions pipeline);

// The validated Strategy of a request (or its strategy file) for the inputs.
// Its precision is the one the file records, else the graph's (bf16 when
// any node is stamped so, graph/precision.h).
// px::Error names the request's part or the file and what is expected.
Strategy compose(const StrategyRequest& request, const CompositionInputs& inputs);

// Every rule on how a strategy's parts combine, and with how the run uses
// it. Throws px::Error naming the field, its value and what is expected.
void validate(const Strategy& strategy, const StrategyUse& use = {});

}  // namespace px::parallel
