#include "parallel/shard.h"

#include <algorithm>
#include <cstring>

#include <fmt/ranges.h>

#include "comm/buffer.h"
#include "core/error.h"

namespace px::parallel {
namespace {

// One run of a dim: `length` elements at `global` in the whole tensor, at `local` in the shard.
struct Segment {
  int64_t global = 0, local = 0, length = 0;
};

// Block `coord` of `size` of the run that `segs` make in the shard (their
// local order), as the segments it meets: an axis nested inside a zigzag
// split cuts the rank's two blocks as one run.
std::vector<Segment> nested_block(const std::vector<Segment>& segs, int size, int coord) {
  int64_t total = 0;
  for (const Segment& s : segs) total += s.length;
  const Block b = block(total, size, coord);
  std::vector<Segment> out;
  int64_t at = 0;  // the start of `s` in the run
  for (const Segment& s : segs) {
    const int64_t lo = std::max(b.begin, at), hi = std::min(b.begin + b.count, at + s.length);
    if (hi > lo || (b.count == 0 && out.empty())) out.push_back({s.global + (lo - at), lo - b.begin, std::max<int64_t>(hi - lo, 0)});
    at += s.length;
  }
  return out;
}

// Dim `n` cut into zigzag blocks: the rank's two runs (graph/placement.h's Z).
std::vector<Segment> zigzag_blocks(int64_t n, int size, int coord) {
  const ZigzagBlock z = zigzag_block(n, size, coord);
  return {{z.early.begin, 0, z.early.count}, {z.late.begin, z.early.count, z.late.count}};
}

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
    const bool whole = segs.size() == 1 && segs.front().length == global[p.dim];
    if (p.groups == 1 && !p.zigzag) {
      segs = nested_block(segs, size, coord);  // nested: this axis splits the run the earlier ones left
      continue;
    }
    if (!whole)
      fail("placement {} of dim {} nests a {} split inside another split: not supported", p.str(), p.dim,
           p.zigzag ? "zigzag" : "grouped");
    if (p.zigzag) {
      segs = zigzag_blocks(global[p.dim], size, coord);
      continue;
    }
    if (global[p.dim] % p.groups != 0)
      fail("placement {} cuts dim {} of extent {} into {} groups: the groups must be equal", p.str(), p.dim,
           global[p.dim], p.groups);
    const int64_t group = global[p.dim] / p.groups;
    const Block b = block(group, size, coord);
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
  const auto dims = segments(global, placement, mesh, coords, skip);
  ShardBox box;
  box.global = global;
  for (size_t d = 0; d < dims.size(); ++d) {
    box.offset.push_back(dims[d].front().global);
    if (dims[d].size() == 2 && dims[d][1].global != dims[d][0].global + dims[d][0].length) {
      PX_CHECK(box.fold_dim < 0, "a shard box folds dims {} and {}: one at most", box.fold_dim, d);
      box.fold_dim = static_cast<int>(d);
      box.fold_local = dims[d][1].local;
      box.fold_global = dims[d][1].global;
    }
  }
  return box;
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

namespace px::parallel {

ShardRun ShardRun::whole(const Shape& shape) {
  const std::vector<int64_t> zeros(static_cast<size_t>(shape.rank()), 0);
  return {shape, shape, {{zeros, zeros, shape.dims()}}, 0, shape.numel()};
}

ShardRun ShardRun::of(const Shape& global, const Shape& local, std::vector<ShardPiece> pieces, int64_t begin,
                      int64_t end) {
  ShardRun run{global, local, std::move(pieces), begin, end};
  const std::string problem = run.problem();
  PX_CHECK(problem.empty(), "{}", problem);
  return run;
}

std::string ShardRun::problem() const {
  if (begin < 0 || end < begin || end > local.numel())
    return fmt::format("run [{}, {}) is not inside a local tensor of {} elements", begin, end, local.numel());
  if (global.rank() != local.rank())
    return fmt::format("global shape {} and local shape {} differ in rank", global, local);
  int64_t covered = 0;
  for (const ShardPiece& p : pieces) {
    const size_t n = static_cast<size_t>(global.rank());
    if (p.global_offset.size() != n || p.local_offset.size() != n || p.extent.size() != n)
      return fmt::format("a piece has {} / {} / {} dims, the tensor {}", p.global_offset.size(),
                         p.local_offset.size(), p.extent.size(), n);
    int64_t elements = 1;
    for (size_t d = 0; d < n; ++d) {
      const int dim = static_cast<int>(d);
      if (p.extent[d] < 0 || p.global_offset[d] < 0 || p.local_offset[d] < 0 ||
          p.global_offset[d] + p.extent[d] > global[dim] || p.local_offset[d] + p.extent[d] > local[dim])
        return fmt::format("piece at global [{}] local [{}] of extent [{}] is outside global {} or local {}",
                           fmt::join(p.global_offset, ","), fmt::join(p.local_offset, ","),
                           fmt::join(p.extent, ","), global, local);
      elements *= p.extent[d];
    }
    covered += elements;
  }
  if (covered != local.numel())
    return fmt::format("pieces cover {} elements of a local tensor of {} ({})", covered, local.numel(), local);
  return {};
}

namespace {

// Row-major strides of `shape`.
std::vector<int64_t> strides_of(const Shape& shape) {
  std::vector<int64_t> strides(static_cast<size_t>(shape.rank()), 1);
  for (int d = shape.rank() - 2; d >= 0; --d)
    strides[static_cast<size_t>(d)] = strides[static_cast<size_t>(d) + 1] * shape[d + 1];
  return strides;
}

// The box two pieces share, in global coordinates: lo and hi per dim; empty
// when they do not meet.
bool intersect(const ShardPiece& a, const ShardPiece& b, std::vector<int64_t>& lo, std::vector<int64_t>& hi) {
  const size_t n = a.extent.size();
  lo.resize(n);
  hi.resize(n);
  for (size_t d = 0; d < n; ++d) {
    lo[d] = std::max(a.global_offset[d], b.global_offset[d]);
    hi[d] = std::min(a.global_offset[d] + a.extent[d], b.global_offset[d] + b.extent[d]);
    if (lo[d] >= hi[d]) return false;
  }
  return true;
}

}  // namespace

bool boxes_meet(const ShardRun& a, const ShardRun& b) {
  std::vector<int64_t> lo, hi;
  for (const ShardPiece& p : a.pieces)
    for (const ShardPiece& q : b.pieces)
      if (intersect(p, q, lo, hi)) return true;
  return false;
}

int64_t copy_overlap(const ShardRun& from, const void* source, const ShardRun& to, void* target, size_t element,
                     std::vector<uint8_t>* written) {
  PX_CHECK(from.global == to.global, "copy_overlap: global shapes {} and {} differ", from.global, to.global);
  const auto* src = static_cast<const char*>(source);
  auto* dst = static_cast<char*>(target);
  const std::vector<int64_t> from_strides = strides_of(from.local), to_strides = strides_of(to.local);
  const int n = from.global.rank();
  int64_t copied = 0;
  std::vector<int64_t> lo, hi;
  for (const ShardPiece& fp : from.pieces)
    for (const ShardPiece& tp : to.pieces) {
      if (!intersect(fp, tp, lo, hi)) continue;
      // Runs along the innermost dim, contiguous on both sides.
      int64_t rows = 1;
      for (int d = 0; d + 1 < n; ++d) rows *= hi[static_cast<size_t>(d)] - lo[static_cast<size_t>(d)];
      const int64_t length = n == 0 ? 1 : hi.back() - lo.back();
      for (int64_t r = 0; r < rows; ++r) {
        int64_t rest = r, f = 0, t = 0;
        for (int d = n - 1; d >= 0; --d) {
          const size_t k = static_cast<size_t>(d);
          int64_t g = lo[k];
          if (d != n - 1) {
            const int64_t extent = hi[k] - lo[k];
            g += rest % extent;
            rest /= extent;
          }
          f += (fp.local_offset[k] + g - fp.global_offset[k]) * from_strides[k];
          t += (tp.local_offset[k] + g - tp.global_offset[k]) * to_strides[k];
        }
        // Offsets k in [0, length) with f + k in from's run and t + k in to's.
        const int64_t first = std::max({int64_t{0}, from.begin - f, to.begin - t});
        const int64_t last = std::min({length, from.end - f, to.end - t});
        if (first >= last) continue;
        const int64_t at = t + first - to.begin;
        std::memcpy(dst + static_cast<size_t>(at) * element, src + static_cast<size_t>(f + first - from.begin) * element,
                    static_cast<size_t>(last - first) * element);
        if (written != nullptr)
          std::fill(written->begin() + at, written->begin() + at + (last - first), uint8_t{1});
        copied += last - first;
      }
    }
  return copied;
}

}  // namespace px::parallel
