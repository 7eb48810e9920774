#include "comm/shared_memory.h"

#include <cstring>

#include "comm/buffer.h"
#include "core/error.h"

namespace px::comm {
namespace {

// Slot layout: [3 flag lines][kStages signature lines][kStages buffers].
constexpr size_t kLine = 64;
constexpr size_t kHeaderBytes = 4096;
static_assert(3 * kLine + SharedMemoryGroup::kStages * kLine <= kHeaderBytes);

const char* flag_name(SharedMemoryGroup::Flag flag) {
  switch (flag) {
    case SharedMemoryGroup::ready: return "did not publish its input";
    case SharedMemoryGroup::reduced: return "did not publish its reduced part";
    case SharedMemoryGroup::done: return "did not release a staging buffer";
  }
  return "?";
}

}  // namespace

std::unique_ptr<SharedMemoryGroup> SharedMemoryGroup::create(Communicator& comm) {
  auto segment = comm.transport().map_shared(comm.members(), kHeaderBytes + kStages * kStageBytes,
                                             comm.next_tag());
  if (!segment) return nullptr;
  return std::unique_ptr<SharedMemoryGroup>(new SharedMemoryGroup(comm, std::move(segment)));
}

std::atomic<uint64_t>& SharedMemoryGroup::flag(int member, Flag which) {
  static_assert(sizeof(std::atomic<uint64_t>) == 8 && std::atomic<uint64_t>::is_always_lock_free);
  char* base = static_cast<char*>(segment_->slot(member));
  return *reinterpret_cast<std::atomic<uint64_t>*>(base + which * kLine);
}

char* SharedMemoryGroup::stage(int member, uint64_t stage_number) {
  return static_cast<char*>(segment_->slot(member)) + kHeaderBytes +
         (stage_number % kStages) * kStageBytes;
}

uint64_t& SharedMemoryGroup::signature(int member, uint64_t stage_number) {
  char* base = static_cast<char*>(segment_->slot(member));
  return *reinterpret_cast<uint64_t*>(base + (3 + stage_number % kStages) * kLine);
}

void SharedMemoryGroup::publish(Flag which, uint64_t value) {
  flag(comm_.rank(), which).store(value, std::memory_order_release);
}

void SharedMemoryGroup::wait_for(int member, Flag which, uint64_t value, const Step& step) {
  auto& f = flag(member, which);
  comm_.spin_until([&] { return f.load(std::memory_order_acquire) >= value; }, member, step,
                   flag_name(which));
}

void SharedMemoryGroup::acquire(uint64_t stage_number, const Step& step) {
  if (stage_number + 1 <= static_cast<uint64_t>(kStages)) return;
  for (int q = 0; q < comm_.size(); ++q) wait_for(q, done, stage_number + 1 - kStages, step);
}

void SharedMemoryGroup::check_signature(int member, uint64_t stage_number, const Step& step) {
  uint64_t theirs = signature(member, stage_number);
  uint64_t mine = signature(comm_.rank(), stage_number);
  if (theirs != mine)
    fail("{} step {} on rank {}: {} is running a different collective, size, dtype or root "
         "(signature {:016x}, this rank {:016x}); every rank must make the same call",
         step.collective, step.index, comm_.rank(), comm_.peer_name(member), theirs, mine);
}

void SharedMemoryGroup::stage_from_all(uint64_t s, const void* source, size_t bytes, uint64_t sig,
                                       const Step& step) {
  const int me = comm_.rank();
  acquire(s, step);
  copy_bytes(stage(me, s), source, bytes);
  signature(me, s) = sig;
  publish(ready, s + 1);
  for (int q = 0; q < comm_.size(); ++q) {
    wait_for(q, ready, s + 1, step);
    check_signature(q, s, step);
  }
}

uint64_t stage_signature(int collective, int64_t count, int dtype, int op, int root) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t v : {int64_t{collective}, count, int64_t{dtype}, int64_t{op}, int64_t{root}}) {
    h ^= static_cast<uint64_t>(v);
    h *= 1099511628211ull;
  }
  return h | 1;  // never 0, the value of a fresh segment
}

}  // namespace px::comm
