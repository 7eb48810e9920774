// Placement propagation over every axis of a device mesh, with the one
// resharding rule (reshard.h) applied wherever a value's placement differs
// from what its consumer needs.
//
// Inputs and parameters get their seeds (B where none is given); a node
// takes, along each axis separately, the signature of its op that is
// cheapest to feed from its inputs' placements: an exact match costs
// nothing, else each input that differs is resharded (a slice costs least,
// then allreduce and allgather, then reduce-scatter, then all-to-all; a
// parameter is never moved, being used where it is stored; no collective
// makes a partial value). Equal costs go to the signature with the smaller
// outputs, then to the op's order. An activation seeded on an axis takes a
// signature producing its seed if one can be fed, and is resharded to it
// otherwise. Gradients named as targets are resharded to their parameter's
// placement right after they are produced.
//
// This is how Megatron's operators fall out rather than being placed: a
// column-parallel layer's input gradient comes out P (its weight is split
// along the contracted dim), so the rule allreduces it before the layer
// norm's backward, which takes B; the row-parallel layer's P output is
// reduced before its bias. Seeding the residual stream S(1) turns both into
// sequence parallelism's reduce-scatter / all-gather pairs.
#pragma once

#include <optional>
#include <vector>

#include "graph/graph.h"
#include "graph/placement.h"
#include "parallel/mesh.h"

namespace px::parallel {

using AxisPlacements = std::vector<Placement>;  // one per mesh axis
std::string placements_str(const AxisPlacements& placements);  // "[S(0), B]"

struct PlacementRequest {
  const Graph* graph = nullptr;
  const DeviceMesh* mesh = nullptr;
  // By value id, by axis: inputs and parameters (nullopt: B) and activations
  // (nullopt: whatever the signatures give).
  std::vector<std::vector<std::optional<Placement>>> seeds;
  // Values resharded to these placements right after they are produced
  // (nullopt on an axis: left as produced).
  std::vector<std::pair<ValueId, std::vector<std::optional<Placement>>>> targets;
  // The last this many targets (a step's reported statistics) are only
  // resharded to: unlike a gradient's, they do not steer their producer's
  // signature, so reporting a value never changes how it is computed.
  size_t quiet_targets = 0;
  // Axes along which every value stays whole (B) and no signature is
  // chosen: a pipeline axis, whose ranks split the graph, not its values.
  // Without this, an unseeded axis would slice values for free.
  std::vector<bool> whole_axes;
  // The expert axis (Strategy::expert_ranks() > 1), the one axis where
  // routed signatures hold (graph/placement.h); -1: none.
  int expert_axis = -1;
  // Axes along which a partial sum that a bf16 node made (a row-parallel
  // linear's output, a column-parallel one's input gradient) is reduced in
  // bf16: the model axes under bf16 precision. This is Megatron's recipe,
  // whose GEMMs write bf16, so the allreduce (or, with sequence
  // parallelism, the reduce-scatter) sums 16-bit words: half the bytes of
  // an fp32 sum. The reshard is wrapped as to_bf16 (each rank's term
  // rounded), the collective over bf16 (each step accumulated in fp32 and
  // rounded again: comm/reduction.h), then to_f32 for the fp32 readers.
  // Empty: every sum in fp32.
  std::vector<bool> bf16_sum_axes;
};

struct Propagation {
  Graph graph;                           // the request's graph with reshard nodes inserted
  std::vector<ValueId> value_of;         // the request's value id -> this graph's
  std::vector<int> node_of;              // the request's node -> the first node added for it (its
                                         // inputs' reshards, then itself)
  std::vector<ValueId> target_of;        // per request target: the value that has its placement
  std::vector<AxisPlacements> of_value;  // by this graph's value id
};

// Throws px::Error naming the node, its op, its inputs' placements along
// the axis and the signatures it offers when none can be fed.
Propagation propagate(const PlacementRequest& request);

// The cost the rule puts on moving `from` to `to` along an axis (0: none),
// or nullopt when no collective makes it.
std::optional<int> resharding_cost(const Placement& from, const Placement& to);

}  // namespace px::parallel
