#include "comm/engine/job.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "core/error.h"

namespace px::comm {
namespace {

constexpr int64_t kFloatBytes = sizeof(float);

std::string_view kind_name(JobKind kind) {
  switch (kind) {
    case JobKind::allreduce: return "allreduce";
    case JobKind::reduce_scatter: return "reduce_scatter";
    case JobKind::allgather: return "allgather";
    case JobKind::custom: return "custom";
  }
  return "?";
}

// FNV-1a: cheap, deterministic across processes (std::hash need not be).
struct Fnv {
  uint64_t hash = 1469598103934665603ull;
  void add(const void* data, size_t bytes) {
    auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < bytes; ++i) hash = (hash ^ p[i]) * 1099511628211ull;
  }
  template <typename T>
  void add_value(T value) {
    add(&value, sizeof(value));
  }
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Elements [index·piece, (index+1)·piece) of rank q's block, clipped.
Block piece_of_block(const EngineJob& job, int ranks, int q, int index) {
  Block whole = block(job.count, ranks, q);
  int64_t offset = std::min(whole.count, index * job.piece);
  return {whole.begin + offset, std::min(job.piece, whole.count - offset)};
}

}  // namespace

std::string EngineJob::describe() const {
  if (kind == JobKind::custom)
    return fmt::format("custom job '{}' (priority {})", name, priority);
  return fmt::format("{} '{}' ({} elements, priority {})", kind_name(kind), name, count, priority);
}

SlicePlan slice_plan(JobKind kind, int64_t count, int64_t slice_bytes, int ranks) {
  const int64_t slice_elements = std::max<int64_t>(1, slice_bytes / kFloatBytes);
  int64_t slices = 1, piece = 0;
  switch (kind) {
    case JobKind::allreduce:
      piece = slice_bytes > 0 ? slice_elements : count;
      if (piece > 0) slices = std::max<int64_t>(1, ceil_div(count, piece));
      break;
    case JobKind::reduce_scatter:
    case JobKind::allgather: {
      // A slice takes `piece` elements of every rank's block: ~slice_bytes in all.
      const int64_t largest_block = block(count, ranks, 0).count;
      piece = slice_bytes > 0 ? ceil_div(slice_elements, ranks) : largest_block;
      if (piece > 0) slices = std::max<int64_t>(1, ceil_div(largest_block, piece));
      break;
    }
    case JobKind::custom: break;
  }
  if (slices > INT_MAX)
    fail("CommEngine: {} elements would need {} slices of {} bytes; use larger slices", count, slices, slice_bytes);
  return {.slices = static_cast<int>(slices), .piece = piece};
}

int announcement_rounds(const SlicePlan& plan) { return plan.slices; }

void plan_slices(EngineJob& job, int64_t slice_bytes, int ranks) {
  const SlicePlan plan = slice_plan(job.kind, job.count, slice_bytes, ranks);
  job.slices = plan.slices;
  job.piece = plan.piece;

  Fnv fnv;
  fnv.add_value(job.kind);
  fnv.add_value(job.count);
  fnv.add_value(job.op);
  fnv.add_value(job.algorithm);
  fnv.add_value(job.priority);
  fnv.add_value(slice_bytes);
  fnv.add(job.name.data(), job.name.size());
  job.signature = fnv.hash;
}

int64_t run_slice(EngineJob& job, int index, Communicator& comm,
                  const CollectiveOptions& options, std::vector<float>& staging) {
  const int p = comm.size(), rank = comm.rank();
  switch (job.kind) {
    case JobKind::allreduce: {
      const int64_t begin = index * job.piece;
      auto part = job.data.subspan(begin, std::min(job.piece, job.count - begin));
      allreduce(comm, Buffer(part), job.op, options);
      return static_cast<int64_t>(part.size_bytes());
    }
    case JobKind::reduce_scatter: {
      if (job.slices == 1) {
        reduce_scatter(comm, job.input.data(), Buffer(job.data), job.count, job.op, options);
        return static_cast<int64_t>(job.input.size_bytes());
      }
      // Gather piece `index` of every block into one contiguous input of m
      // elements; its block q is then exactly piece q (the first n mod p
      // blocks are one longer, and so are their pieces).
      int64_t m = 0;
      for (int q = 0; q < p; ++q) m += piece_of_block(job, p, q, index).count;
      staging.resize(m);
      for (int q = 0; q < p; ++q) {
        Block piece = piece_of_block(job, p, q, index);
        PX_CHECK_EQ(block(m, p, q).count, piece.count);
        std::copy_n(job.input.data() + piece.begin, piece.count,
                    staging.data() + block(m, p, q).begin);
      }
      Block mine = piece_of_block(job, p, rank, index);
      const int64_t offset = mine.begin - block(job.count, p, rank).begin;
      reduce_scatter(comm, staging.data(), Buffer(job.data.subspan(offset, mine.count)), m, job.op,
                     options);
      return m * kFloatBytes;
    }
    case JobKind::allgather: {
      if (job.slices == 1) {
        allgather(comm, job.input.data(), Buffer(job.data), options);
        return static_cast<int64_t>(job.data.size_bytes());
      }
      int64_t m = 0;
      for (int q = 0; q < p; ++q) m += piece_of_block(job, p, q, index).count;
      staging.resize(m);
      Block mine = piece_of_block(job, p, rank, index);
      const int64_t offset = mine.begin - block(job.count, p, rank).begin;
      allgather(comm, job.input.data() + offset, Buffer(staging.data(), m, DType::f32), options);
      for (int q = 0; q < p; ++q) {
        Block piece = piece_of_block(job, p, q, index);
        PX_CHECK_EQ(block(m, p, q).count, piece.count);
        std::copy_n(staging.data() + block(m, p, q).begin, piece.count,
                    job.data.data() + piece.begin);
      }
      return m * kFloatBytes;
    }
    case JobKind::custom:
      job.work(comm);
      return job.custom_bytes;
  }
  return 0;
}

}  // namespace px::comm
