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
#include <string>
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
// The box ops read (graph/op.h): the first piece's offset, the global shape
// and a zigzag split's second run (its fold).
ShardBox shard_box(const Shape& global, const AxisPlacements& placement, const DeviceMesh& mesh,
                   const std::vector<int>& coords, int skip = -1);

// Copies the pieces between a whole tensor and a local one (same dtype).
void copy_to_local(const Tensor& whole, const std::vector<ShardPiece>& pieces, Tensor& local);
void copy_to_whole(const Tensor& local, const std::vector<ShardPiece>& pieces, Tensor& whole);

// A flat run of a rank's local tensor, placed in the global tensor: the
// elements [begin, end) (row-major) of a local tensor of shape `local` that
// is made of `pieces` of the global tensor of shape `global`. A whole tensor
// is one piece and the run [0, numel); a ZeRO rank's share of a parameter is
// the run of its block inside its model shard. Checkpoints save runs and
// each rank asks for the runs it holds (runtime/state/sharded_tensors.h).
struct ShardRun {
  Shape global, local;
  std::vector<ShardPiece> pieces;
  int64_t begin = 0, end = 0;

  static ShardRun whole(const Shape& shape);
  // The run [begin, end) of the local tensor made of `pieces`.
  static ShardRun of(const Shape& global, const Shape& local, std::vector<ShardPiece> pieces, int64_t begin,
                     int64_t end);
  int64_t count() const { return end - begin; }
  // What is inconsistent (a run outside the local tensor, a piece outside
  // either shape, pieces that do not tile the local tensor), or empty.
  std::string problem() const;
};

// Whether the boxes of `a` and `b` meet (their flat ranges aside): a cheap
// test before reading a saved run.
bool boxes_meet(const ShardRun& a, const ShardRun& b);
// Copies every element `from` and `to` share, from `source` (from.count()
// elements of `element` bytes) into `target` (to.count() elements), and
// sets written[i] for every target element i it copies when `written` is
// given (to.count() entries). Returns the number of elements copied.
int64_t copy_overlap(const ShardRun& from, const void* source, const ShardRun& to, void* target, size_t element,
                     std::vector<uint8_t>* written = nullptr);

}  // namespace px::parallel
