// Strategy: how a graph is split over a device mesh. For data parallelism
// (this issue) the batch inputs are S(0) along the "dp" axis, everything
// else is seeded B, and propagation (propagate.h) derives the rest: weight
// gradients come out P, which the lowering turns into the gradient
// allreduce (P -> B) or, with sharded optimizer state, a reduce-scatter
// (P -> S). Tensor and pipeline strategies add axes and seeds to the same
// structure.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/collectives.h"
#include "comm/compression/spec.h"
#include "comm/engine/gradient_buckets.h"
#include "graph/graph.h"
#include "parallel/mesh.h"
#include "parallel/propagate.h"

namespace px::parallel {

// How the P gradients of B weights are reduced.
struct GradientSyncOptions {
  // Gradients are fused into buckets of about this many bytes, reduced as
  // soon as the bucket's last gradient is produced (0: one bucket per tensor).
  // Default: the engine benchmark's measured best (docs/comm_engine.md).
  int64_t bucket_bytes = comm::kDefaultBucketBytes;
  // Reduce buckets on a progress thread while backward continues; otherwise
  // after backward, in the same order.
  bool overlap = true;
  // 0: allreduce, every rank updates everything; 1: reduce-scatter to S,
  // each rank updates its shard of optimizer state, parameters all-gathered
  // (ZeRO-1 keeps full gradients until the step, ZeRO-2 only the rank's
  // shard: each bucket's buffer is freed once its reduce-scatter ran).
  int zero_stage = 0;
  // ZeRO-2: at most this many bucket buffers alive at once (the one backward
  // fills plus those still being reduced); backward waits for the oldest
  // reduction past that. Bounds gradient memory to the shard plus this many
  // buckets.
  int bucket_buffers = 4;
  comm::CollectiveOptions collective;
  // Lossy gradient compression with error feedback (comm/compression): each
  // weight gradient is compressed and exchanged on its own (PowerSGD needs
  // its matrix), instead of in buckets.
  comm::compression::Spec compression;
  // DGC's momentum correction (Lin et al. 2018) for sparsified gradients:
  // each rank keeps its own velocity u = m*u + g and compresses u (with
  // error feedback), zeroing u where an entry was sent; the optimizer then
  // runs without momentum. 0: off.
  double local_momentum = 0;
  // P3 (Jayarajan et al. 2019): > 0 turns it on with slices of about this
  // many bytes. Every weight gradient is its own job, prioritized by when
  // forward needs the weight (the first layer first), sliced so a more
  // urgent gradient overtakes a queued one; the step returns with the
  // reductions still in flight and each weight is updated just before the
  // next forward reads it.
  int64_t p3_slice_bytes = 0;
  bool operator==(const GradientSyncOptions&) const = default;
};

struct Strategy {
  DeviceMesh mesh;
  std::string data_axis = "dp";
  Propagation placement;  // along data_axis, for every value and node of the graph
  GradientSyncOptions sync;

  int data_ranks() const { return mesh.size(data_axis); }
};

// Batch inputs split S(0) across `ranks`, params and other inputs B.
Strategy data_parallel(const Graph& graph, const std::vector<ValueId>& batch_inputs, int ranks,
                       GradientSyncOptions sync = {});

}  // namespace px::parallel
