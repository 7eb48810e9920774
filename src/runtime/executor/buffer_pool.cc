#include "runtime/executor/buffer_pool.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace px {

using parallel::Buffer;
using parallel::Region;

BufferPool::BufferPool(std::vector<Buffer> layouts)
    : layouts_(std::move(layouts)), tensors_(layouts_.size()), written_(layouts_.size()) {
  for (size_t b = 0; b < layouts_.size(); ++b) {
    const Buffer& buffer = layouts_[b];
    // The loss buffer has no members: one flag for its one value.
    written_[b].assign(buffer.kind == Buffer::Kind::loss ? 1 : buffer.members.size(), false);
  }
}

void BufferPool::materialize(int b) const {
  const Buffer& buffer = layouts_.at(static_cast<size_t>(b));
  Tensor& tensor = tensors_[static_cast<size_t>(b)];
  if (buffer.persistent && !tensor.defined()) tensor = Tensor::zeros({buffer.count}, DType::f32);
}

Tensor& BufferPool::storage(int b) {
  materialize(b);
  return tensors_.at(static_cast<size_t>(b));
}
const Tensor& BufferPool::storage(int b) const {
  materialize(b);
  return tensors_.at(static_cast<size_t>(b));
}

Tensor BufferPool::allocated(const Region& r, const char* use) const {
  materialize(r.buffer);
  const Tensor& buffer = tensors_.at(static_cast<size_t>(r.buffer));
  PX_CHECK(buffer.defined(), "buffer '{}' is {} while not allocated", layouts_[static_cast<size_t>(r.buffer)].name,
           use);
  return buffer;  // a handle: the data stays the pool's
}

Tensor BufferPool::view(const Region& r) const { return allocated(r, "read").slice_rows(r.offset, r.offset + r.count); }

float* BufferPool::data(const Region& r) const { return allocated(r, "used").f32() + r.offset; }

comm::Buffer BufferPool::comm_buffer(const Region& r) const {
  Tensor buffer = allocated(r, "used");
  return comm::Buffer(buffer.raw(), buffer.numel(), buffer.dtype()).slice(r.offset, r.count);
}

void BufferPool::allocate(int b, const RunningJobs& jobs) {
  const Buffer& buffer = layouts_[static_cast<size_t>(b)];
  if (buffer.persistent) return;
  const int64_t bytes = buffer.bytes();
  if (buffer.kind == Buffer::Kind::grad_bucket && !held_.empty()) release_finished(jobs);
  if (tensors_[static_cast<size_t>(b)].defined()) free(b, -1, jobs);
  tensors_[static_cast<size_t>(b)] = Tensor::empty({buffer.count}, buffer.dtype);
  written_[static_cast<size_t>(b)].assign(buffer.members.size(), false);
  if (buffer.kind == Buffer::Kind::grad_bucket) {
    bytes_.gradients += bytes;
    bytes_.gradient_peak = std::max(bytes_.gradient_peak, bytes_.gradients);
  } else if (buffer.kind == Buffer::Kind::param_bucket) {
    bytes_.parameters += bytes;
    bytes_.parameter_peak = std::max(bytes_.parameter_peak, bytes_.parameters);
  }
}

void BufferPool::free(int b, int reader, const RunningJobs& jobs) {
  const Buffer& buffer = layouts_[static_cast<size_t>(b)];
  Tensor& tensor = tensors_[static_cast<size_t>(b)];
  if (buffer.persistent || !tensor.defined()) return;
  Held freed{.tensor = std::move(tensor), .kind = buffer.kind, .bytes = buffer.bytes(), .reader = reader};
  tensor = Tensor();  // the buffer id is free for its next instance now
  if (reader >= 0 && jobs.running(reader)) {
    held_.push_back(std::move(freed));
    return;
  }
  uncount(freed.kind, freed.bytes);
}

void BufferPool::uncount(Buffer::Kind kind, int64_t bytes) {
  if (kind == Buffer::Kind::grad_bucket) bytes_.gradients -= bytes;
  if (kind == Buffer::Kind::param_bucket) bytes_.parameters -= bytes;
}

void BufferPool::release_finished(const RunningJobs& jobs) {
  while (!held_.empty() && !jobs.running(held_.front().reader)) {
    uncount(held_.front().kind, held_.front().bytes);
    held_.pop_front();
  }
}

std::vector<bool>& BufferPool::written(int b) { return written_.at(static_cast<size_t>(b)); }

void BufferPool::zero_unwritten(int b) {
  std::vector<bool>& written = written_[static_cast<size_t>(b)];
  const Buffer& buffer = layouts_[static_cast<size_t>(b)];
  for (size_t m = 0; m < written.size(); ++m) {
    if (written[m]) continue;
    const int64_t offset = buffer.members.empty() ? 0 : buffer.members[m].offset;
    const int64_t count = buffer.members.empty() ? buffer.count : buffer.members[m].count;
    std::memset(storage(b).f32() + offset, 0, static_cast<size_t>(count) * sizeof(float));
    written[m] = true;
  }
}

void BufferPool::begin_step(int loss_buffer, int external) {
  for (size_t b = 0; b < layouts_.size(); ++b)
    if (static_cast<int>(b) != external) materialize(static_cast<int>(b));
  for (size_t b = 0; b < layouts_.size(); ++b)
    if (layouts_[b].persistent && layouts_[b].kind == Buffer::Kind::grad_bucket)
      written_[b].assign(written_[b].size(), false);
  if (loss_buffer >= 0) {
    storage(loss_buffer).f32()[0] = 0;
    written_[static_cast<size_t>(loss_buffer)].assign(1, true);
  }
}

}  // namespace px
