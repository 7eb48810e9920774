// A split's blocks are not contiguous in memory unless it splits dim 0, and
// uneven splits give ranks different counts: each rank's block is packed
// into a chunk of the largest block's size, the flat collective runs over
// the equal chunks, and the result is unpacked.
#include "runtime/executor/reshard_tensor.h"

#include <algorithm>
#include <cstring>

#include "comm/collectives.h"
#include "parallel/shard.h"

namespace px {

namespace {

// The boxes of block `q` of `p` of a tensor of `shape` split `split`.
std::vector<parallel::ShardPiece> block_pieces(const Shape& shape, const Placement& split, int p, int q) {
  return parallel::shard_pieces(shape, {split}, parallel::DeviceMesh({{"axis", p}}), {q});
}

Shape block_shape(const Shape& shape, const Placement& split, int p, int q) {
  return parallel::local_shape(shape, {split}, parallel::DeviceMesh({{"axis", p}}), {q});
}

int64_t largest_block(const Shape& shape, const Placement& split, int p) {
  int64_t most = 0;
  for (int q = 0; q < p; ++q) most = std::max(most, block_shape(shape, split, p, q).numel());
  return most;
}

comm::Reduction reduction_of(const Placement& partial) {
  return partial.reduce == Placement::Reduce::max ? comm::Reduction::max : comm::Reduction::sum;
}

}  // namespace

Tensor reshard_tensor(comm::Communicator& comm, const Tensor& in, const Placement& from, const Placement& to,
                      const Shape& whole, const comm::CollectiveOptions& options) {
  const int p = comm.size(), me = comm.rank();
  if (p == 1 || from == to) return in;
  // `whole`: the value's shape with this axis undone (the other axes' splits kept).
  if (!from.is_split() && !from.is_partial()) {  // B -> S: this rank's block, no communication (any dtype)
    Tensor out = Tensor::empty(block_shape(whole, to, p, me), in.dtype());
    parallel::copy_to_local(in, block_pieces(whole, to, p, me), out);
    return out;
  }
  // Sums are of float32 or bf16 (a bf16 GEMM's term under tensor
  // parallelism: parallel/lower/propagate.h), accumulated in float32 at
  // each step; gathers and all-to-alls move bytes (a bf16 value travels in
  // the float collectives' words, two elements a word).
  if (from.is_partial() && in.dtype() != DType::f32 && in.dtype() != DType::bf16)
    fail("resharding {} -> {} sums float32 or bf16 values; this one is {}", from.str(), to.str(),
         dtype_name(in.dtype()));
  const size_t element = dtype_size(in.dtype());
  auto words = [element](int64_t elements) { return static_cast<size_t>((elements * static_cast<int64_t>(element) + 3) / 4); };
  // The packed exchanges below size their buffers by `whole`: the input must be this rank's block of it.
  const Shape expected = from.is_split() ? block_shape(whole, from, p, me) : whole;
  PX_CHECK(in.shape() == expected, "resharding {} -> {}: this rank holds {}, its block of {} is {}", from.str(),
           to.str(), in.shape(), whole, expected);
  if (from.is_partial() && !to.is_split()) {  // P -> B: allreduce
    Tensor out = in.clone();
    comm::allreduce(comm, comm::Buffer(out.raw(), out.numel(), out.dtype()), reduction_of(from), options);
    return out;
  }
  if (from.is_partial()) {  // P -> S: reduce-scatter of packed blocks (zeros pad the short ones)
    const int64_t chunk = largest_block(whole, to, p);
    std::vector<char> packed(static_cast<size_t>(chunk * p) * element, 0);
    for (int q = 0; q < p; ++q) {
      Tensor block = Tensor::empty(block_shape(whole, to, p, q), in.dtype());
      parallel::copy_to_local(in, block_pieces(whole, to, p, q), block);
      comm::copy_bytes(packed.data() + static_cast<size_t>(q * chunk) * element, block.raw(), block.nbytes());
    }
    Tensor out = Tensor::empty(block_shape(whole, to, p, me), in.dtype());
    std::vector<char> mine(static_cast<size_t>(chunk) * element);
    comm::reduce_scatter(comm, packed.data(), comm::Buffer(mine.data(), chunk, in.dtype()), chunk * p,
                         reduction_of(from), options);
    comm::copy_bytes(out.raw(), mine.data(), out.nbytes());
    return out;
  }
  if (from.is_split() && !to.is_split()) {  // S -> B: allgather of packed blocks
    const size_t chunk = words(largest_block(whole, from, p));
    std::vector<float> mine(chunk, 0.0f), all(chunk * static_cast<size_t>(p));
    std::memcpy(mine.data(), in.raw(), in.nbytes());
    comm::allgather(comm, mine.data(), comm::Buffer(std::span<float>(all)), options);
    Tensor out = Tensor::empty(whole, in.dtype());
    for (int q = 0; q < p; ++q) {
      Tensor block = Tensor::empty(block_shape(whole, from, p, q), in.dtype());
      std::memcpy(block.raw(), all.data() + static_cast<size_t>(q) * chunk, block.nbytes());
      parallel::copy_to_whole(block, block_pieces(whole, from, p, q), out);
    }
    return out;
  }
  // S(d) -> S(e): all-to-all. Rank r holds block r along d; it sends rank q
  // the part of its block that is q's along e.
  const Shape mine_shape = in.shape();  // block `me` along d
  int64_t largest = 0;
  for (int r = 0; r < p; ++r)
    for (int q = 0; q < p; ++q)
      largest = std::max(largest, block_shape(block_shape(whole, from, p, r), to, p, q).numel());
  const size_t chunk = words(largest);
  std::vector<float> send(chunk * static_cast<size_t>(p), 0.0f), received(chunk * static_cast<size_t>(p));
  for (int q = 0; q < p; ++q) {
    Tensor part = Tensor::empty(block_shape(mine_shape, to, p, q), in.dtype());
    parallel::copy_to_local(in, block_pieces(mine_shape, to, p, q), part);
    std::memcpy(send.data() + static_cast<size_t>(q) * chunk, part.raw(), part.nbytes());
  }
  comm::all_to_all(comm, send.data(), comm::Buffer(std::span<float>(received)), options);
  const Shape out_shape = block_shape(whole, to, p, me);
  Tensor out = Tensor::empty(out_shape, in.dtype());
  for (int r = 0; r < p; ++r) {
    // From rank r: its block along d, cut to my block along e.
    Tensor part = Tensor::empty(block_shape(block_shape(whole, from, p, r), to, p, me), in.dtype());
    std::memcpy(part.raw(), received.data() + static_cast<size_t>(r) * chunk, part.nbytes());
    parallel::copy_to_whole(part, block_pieces(out_shape, from, p, r), out);
  }
  return out;
}

Tensor gather_batch_rows(comm::Communicator& comm, const Tensor& in, int64_t whole_rows,
                         const comm::CollectiveOptions& options) {
  const int p = comm.size();
  std::vector<float> mine{static_cast<float>(in.dim(0))}, counts(static_cast<size_t>(p));
  comm::allgather(comm, mine.data(), comm::Buffer(std::span<float>(counts)), options);
  int64_t total = 0, most = 0;
  for (float c : counts) total += static_cast<int64_t>(c), most = std::max(most, static_cast<int64_t>(c));
  if (total != whole_rows)
    fail("gathering a batch value along the data axis: the ranks hold {} rows in all, the program expects {}", total,
         whole_rows);
  std::vector<int64_t> dims = in.shape().dims();
  dims[0] = whole_rows;
  Tensor out = Tensor::empty(Shape(dims), in.dtype());
  const int64_t bytes_per_row = whole_rows == 0 ? 0 : static_cast<int64_t>(out.nbytes()) / whole_rows;
  // Each rank's rows in whole words (a bf16 value's rows may end mid-word).
  const size_t chunk = static_cast<size_t>((most * bytes_per_row + 3) / 4);
  std::vector<float> send(chunk, 0.0f), all(chunk * static_cast<size_t>(p));
  std::memcpy(send.data(), in.raw(), in.nbytes());
  comm::allgather(comm, send.data(), comm::Buffer(std::span<float>(all)), options);
  char* dst = static_cast<char*>(out.raw());
  for (int q = 0; q < p; ++q) {
    const size_t bytes = static_cast<size_t>(static_cast<int64_t>(counts[static_cast<size_t>(q)]) * bytes_per_row);
    std::memcpy(dst, all.data() + static_cast<size_t>(q) * chunk, bytes);
    dst += bytes;
  }
  return out;
}

}  // namespace px
