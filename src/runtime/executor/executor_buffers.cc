// The program's flat float buffers: allocated at an instance's first write
// (liveness), freed at its Free (or, while an engine job still reads it,
// once that job finishes), zero-filled where this step wrote nothing, and
// the waits for engine jobs an instruction depends on.
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/elementwise.h"
#include "runtime/executor/program_executor.h"

namespace px {

using parallel::Buffer;
using parallel::Instr;
using parallel::Region;

Tensor ProgramExecutor::view(const Region& r) const {
  const Tensor& buffer = buffers_.at(static_cast<size_t>(r.buffer));
  PX_CHECK(buffer.defined(), "buffer '{}' is read while not allocated", program_.buffers[static_cast<size_t>(r.buffer)].name);
  return buffer.slice_rows(r.offset, r.offset + r.count);
}

float* ProgramExecutor::data(const Region& r) const {
  Tensor buffer = buffers_.at(static_cast<size_t>(r.buffer));  // a handle: the data is not const
  PX_CHECK(buffer.defined(), "buffer '{}' is used while not allocated", program_.buffers[static_cast<size_t>(r.buffer)].name);
  return buffer.f32() + r.offset;
}

comm::Buffer ProgramExecutor::comm_buffer(const Region& r) const {
  Tensor buffer = buffers_.at(static_cast<size_t>(r.buffer));  // a handle: the data is not const
  PX_CHECK(buffer.defined(), "buffer '{}' is used while not allocated", program_.buffers[static_cast<size_t>(r.buffer)].name);
  return comm::Buffer(buffer.raw(), buffer.numel(), buffer.dtype()).slice(r.offset, r.count);
}

void ProgramExecutor::allocate(int b) {
  const Buffer& buffer = program_.buffers[static_cast<size_t>(b)];
  if (buffer.persistent) return;
  const int64_t bytes = buffer.bytes();
  if (buffer.kind == Buffer::Kind::grad_bucket) {
    // ZeRO: the program made this write wait for the reduction that frees
    // the oldest bucket buffer (lower/back_pressure.cc); its memory goes now.
    if (engine_ && !pending_frees_.empty()) release_finished();
  }
  if (buffers_[static_cast<size_t>(b)].defined()) free_buffer(b, -1);
  buffers_[static_cast<size_t>(b)] = Tensor::empty({buffer.count}, buffer.dtype);
  written_[static_cast<size_t>(b)].assign(buffer.members.size(), false);
  if (buffer.kind == Buffer::Kind::grad_bucket) {
    buffer_bytes_.gradients += bytes;
    buffer_bytes_.gradient_peak = std::max(buffer_bytes_.gradient_peak, buffer_bytes_.gradients);
  } else if (buffer.kind == Buffer::Kind::param_bucket) {
    buffer_bytes_.parameters += bytes;
    buffer_bytes_.parameter_peak = std::max(buffer_bytes_.parameter_peak, buffer_bytes_.parameters);
  }
}

void ProgramExecutor::free_buffer(int b, int after) {
  const Buffer& buffer = program_.buffers[static_cast<size_t>(b)];
  Tensor& tensor = buffers_[static_cast<size_t>(b)];
  if (buffer.persistent || !tensor.defined()) return;
  PendingFree freed{.tensor = std::move(tensor), .kind = buffer.kind, .bytes = buffer.bytes()};
  tensor = Tensor();  // the buffer id is free for its next instance now
  // Its last reader still running on the engine: the memory goes once that finishes.
  if (after >= 0 && engine_ && job_[static_cast<size_t>(after)] >= 0 &&
      !engine_->finished(job_[static_cast<size_t>(after)])) {
    freed.job = job_[static_cast<size_t>(after)];
    pending_frees_.push_back(std::move(freed));
    return;
  }
  uncount(freed);
}

void ProgramExecutor::uncount(const PendingFree& freed) {
  if (freed.kind == Buffer::Kind::grad_bucket) buffer_bytes_.gradients -= freed.bytes;
  if (freed.kind == Buffer::Kind::param_bucket) buffer_bytes_.parameters -= freed.bytes;
}

void ProgramExecutor::release_finished() {
  while (!pending_frees_.empty() && engine_->finished(pending_frees_.front().job)) {
    uncount(pending_frees_.front());
    pending_frees_.pop_front();
  }
}

void ProgramExecutor::wait_for(int id) {
  const JobId job = job_[static_cast<size_t>(id)];
  if (job < 0) return;
  try {
    engine_->wait(job);
  } catch (const Error& e) {
    if (recorder_)
      if (auto it = flight_events_.find(id); it != flight_events_.end()) recorder_->done(it->second, false);
    throw in_context(id, site_of(id), e);
  }
  if (recorder_) flight_done(id);
}

void ProgramExecutor::zero_unwritten(int b) {
  std::vector<bool>& written = written_[static_cast<size_t>(b)];
  const Buffer& buffer = program_.buffers[static_cast<size_t>(b)];
  for (size_t m = 0; m < written.size(); ++m) {
    if (written[m]) continue;
    const int64_t offset = buffer.members.empty() ? 0 : buffer.members[m].offset;
    const int64_t count = buffer.members.empty() ? buffer.count : buffer.members[m].count;
    std::memset(buffers_[static_cast<size_t>(b)].f32() + offset, 0, static_cast<size_t>(count) * sizeof(float));
    written[m] = true;
  }
}

}  // namespace px
