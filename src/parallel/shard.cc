#include "parallel/shard.h"

#include <cstring>

#include "comm/buffer.h"
#include "core/error.h"

namespace px::parallel {
namespace {

// One run of a dim: `length` elements at `global` in the whole tensor, at `local` in the shard.
struct Segment {
  int64_t global = 0, local = 0, length = 0;
};

// Per dim, the segments the rank holds.
std::vector<std::vector<Segment>> segments(const Shape& global, const AxisPlacements& placement,
                                           const DeviceMesh& mesh, const std::vector<int>& coords, int skip) {
  std::vector<std::vector<Segment>> dims;
  for (int d = 0; d < global.rank(); ++d) dims.push_back({{0, 0, global[d]}});
  for (size_t a = 0; a < placement.size(); ++a) {
    const Placement& p = placement[a];
    if (static_cast<int>(a) == skip || !p.is_split()) continue;
    PX_CHECK_LT(p.dim, global.rank());
    std::vector<Segment>& segs = dims[static_cast<size_t>(p.dim)];
    const int size = mesh.axes()[a].size, coord = coords[a];
    if (p.groups == 1) {
      for (Segment& s : segs) {  // nested: this axis splits each segment's run
        PX_CHECK_EQ(segs.size(), 1u);
        const comm::Block b = comm::block(s.length, size, coord);
        s = {s.global + b.begin, 0, b.count};
      }
      continue;
    }
    if (segs.size() != 1 || segs.front().length != global[p.dim])
      fail("placement {} of dim {} nests a grouped split inside another split: not supported", p.str(), p.dim);
    if (global[p.dim] % p.groups != 0)
      fail("placement {} cuts dim {} of extent {} into {} groups: the groups must be equal", p.str(), p.dim,
           global[p.dim], p.groups);
    const int64_t group = global[p.dim] / p.groups;
    const comm::Block b = comm::block(group, size, coord);
    segs.clear();
    for (int g = 0; g < p.groups; ++g) segs.push_back({g * group + b.begin, g * b.count, b.count});
  }
  return dims;
}

}  // namespace

Shape local_shape(const Shape& global, const AxisPlacements& placement, const DeviceMesh& mesh,
                  const std::vector<int>& coords, int skip) {
  std::vector<int64_t> dims;
  for (const std::vector<Segment>& segs : segments(global, placement, mesh, coords, skip)) {
    int64_t n = 0;
    for (const Segment& s : segs) n += s.length;
    dims.push_back(n);
  }
  return Shape(dims);
}

std::vector<ShardPiece> shard_pieces(const Shape& global, const AxisPlacements& placement, const DeviceMesh& mesh,
                                     const std::vector<int>& coords, int skip) {
  const auto dims = segments(global, placement, mesh, coords, skip);
  std::vector<ShardPiece> pieces{{}};
  for (const std::vector<Segment>& segs : dims) {
    std::vector<ShardPiece> next;
    for (const ShardPiece& p : pieces)
      for (const Segment& s : segs) {
        ShardPiece q = p;
        q.global_offset.push_back(s.global);
        q.local_offset.push_back(s.local);
        q.extent.push_back(s.length);
        next.push_back(std::move(q));
      }
    pieces = std::move(next);
  }
  return pieces;
}

ShardBox shard_box(const Shape& global, const AxisPlacements& placement, const DeviceMesh& mesh,
                   const std::vector<int>& coords, int skip) {
  bool split = false;
  for (size_t a = 0; a < placement.size(); ++a) split = split || (static_cast<int>(a) != skip && placement[a].is_split());
  if (!split) return {};
  return {shard_pieces(global, placement, mesh, coords, skip).front().global_offset, global};
}

namespace {

// Copies box `piece` between a whole tensor of shape `whole` and a local one
// of shape `local`, row by row of the innermost dim.
void copy_piece(const ShardPiece& piece, const Shape& whole, const Shape& local, const char* from, char* to,
                size_t element, bool to_local) {
  const int rank = whole.rank();
  if (rank == 0) {
    std::memcpy(to, from, element);
    return;
  }
  int64_t rows = 1;
  for (int d = 0; d + 1 < rank; ++d) rows *= piece.extent[static_cast<size_t>(d)];
  const int64_t run = piece.extent.back();
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rest = r, w = 0, l = 0, w_stride = 1, l_stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t i = d == rank - 1 ? 0 : rest % piece.extent[static_cast<size_t>(d)];
      if (d != rank - 1) rest /= piece.extent[static_cast<size_t>(d)];
      w += (piece.global_offset[static_cast<size_t>(d)] + i) * w_stride;
      l += (piece.local_offset[static_cast<size_t>(d)] + i) * l_stride;
      w_stride *= whole[d];
      l_stride *= local[d];
    }
    const size_t bytes = static_cast<size_t>(run) * element;
    if (to_local) std::memcpy(to + static_cast<size_t>(l) * element, from + static_cast<size_t>(w) * element, bytes);
    else std::memcpy(to + static_cast<size_t>(w) * element, from + static_cast<size_t>(l) * element, bytes);
  }
}

}  // namespace

void copy_to_local(const Tensor& whole, const std::vector<ShardPiece>& pieces, Tensor& local) {
  PX_CHECK(whole.dtype() == local.dtype(), "copy_to_local: dtypes differ");
  for (const ShardPiece& p : pieces)
    copy_piece(p, whole.shape(), local.shape(), static_cast<const char*>(whole.raw()), static_cast<char*>(local.raw()),
               dtype_size(whole.dtype()), true);
}

void copy_to_whole(const Tensor& local, const std::vector<ShardPiece>& pieces, Tensor& whole) {
  PX_CHECK(whole.dtype() == local.dtype(), "copy_to_whole: dtypes differ");
  for (const ShardPiece& p : pieces)
    copy_piece(p, whole.shape(), local.shape(), static_cast<const char*>(local.raw()), static_cast<char*>(whole.raw()),
               dtype_size(whole.dtype()), false);
}

}  // namespace px::parallel
