// Buffer: `count` elements of a dtype at `data`, the unit every collective
// moves. float32 is the reduction type; f16/bf16 are payloads (compressed
// gradients) that are widened to float32 for each reduction and narrowed back.
// block(): how collectives cut n elements into p nearly equal blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "core/block.h"
#include "core/dtype.h"

namespace px::comm {

struct Buffer {
  void* data = nullptr;
  int64_t count = 0;
  DType dtype = DType::f32;

  Buffer() = default;
  Buffer(void* data, int64_t count, DType dtype) : data(data), count(count), dtype(dtype) {}
  Buffer(std::span<float> values) : data(values.data()), count(static_cast<int64_t>(values.size())) {}

  size_t element_size() const { return dtype_size(dtype); }
  size_t bytes() const { return static_cast<size_t>(count) * element_size(); }
  char* at(int64_t element) const { return static_cast<char*>(data) + element * element_size(); }
  // Elements [begin, begin + n) as a Buffer.
  Buffer slice(int64_t begin, int64_t n) const { return {at(begin), n, dtype}; }
};

// memcpy for buffers that may be empty: an empty Buffer's data may be
// null, and memcpy's pointers must not be, even for 0 bytes.
inline void copy_bytes(void* to, const void* from, size_t bytes) {
  if (bytes > 0) std::memcpy(to, from, bytes);
}

// Every algorithm cuts a buffer by core/block.h's rule, so reduce-scatter's
// output on rank r is block r whatever the algorithm.
using px::Block;
using px::block;

}  // namespace px::comm
