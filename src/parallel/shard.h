// Which part of a global tensor a rank holds, from its placement on every
// mesh axis and its mesh coordinates. Along one axis, S(d) gives the rank
// comm::block(n, size, coord) of dim d (uneven blocks allowed); S(d,g) its
// block of each of the g groups; two axes splitting the same dim nest (the
// later axis splits the earlier one's block). B and P hold the whole dim.
//
// Used by lowering (local shapes, the boxes ops read), by the executor
// (a parameter's shard taken from, or put back into, the whole tensor) and
// by checkpoints (each shard saved with its global box).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "graph/op.h"
#include "parallel/lower/propagate.h"
#include "parallel/mesh.h"

namespace px::parallel {

// A box of the global tensor and where it sits in the rank's local tensor.
struct ShardPiece {
  std::vector<int64_t> global_offset, local_offset, extent;
};

// The rank's local shape. Axis `skip` (-1: none) is left whole: the data
// axis, whose batch split the micro-batches make and whose ZeRO split the
// buckets make.
Shape local_shape(const Shape& global, const AxisPlacements& placement, const DeviceMesh& mesh,
                  const std::vector<int>& coords, int skip = -1);
// The boxes that make up the rank's local tensor (one, or one per group of
// a grouped split).
std::vector<ShardPiece> shard_pieces(const Shape& global, const AxisPlacements& placement, const DeviceMesh& mesh,
                                     const std::vector<int>& coords, int skip = -1);
// The box ops read (graph/op.h): the first piece's offset and the global shape.
ShardBox shard_box(const Shape& global, const AxisPlacements& placement, const DeviceMesh& mesh,
                   const std::vector<int>& coords, int skip = -1);

// Copies the pieces between a whole tensor and a local one (same dtype).
void copy_to_local(const Tensor& whole, const std::vector<ShardPiece>& pieces, Tensor& local);
void copy_to_whole(const Tensor& local, const std::vector<ShardPiece>& pieces, Tensor& whole);

}  // namespace px::parallel
