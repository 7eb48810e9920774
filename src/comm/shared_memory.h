// SharedMemoryGroup: the staging area through which ranks of one host reduce
// and copy without the network path. Each member owns a slot of a shared
// segment (Transport::map_shared): three flag cache lines, then kStages
// staging buffers of kStageBytes. A collective proceeds in numbered stages
// (numbers continue across calls, equal on every member):
//   write  my staging buffer s % kStages, then publish ready = s + 1;
//   read   peers' buffers once their ready >= s + 1 (reduce my part, publish
//          reduced = s + 1; others read my reduced part after that);
//   finish publish done = s + 1 when I no longer read anyone's buffer s.
// Before writing buffer s % kStages a member waits until every member's done
// >= s + 1 - kStages, so a buffer is never overwritten while being read.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "comm/communicator.h"

namespace px::comm {

class SharedMemoryGroup {
 public:
  static constexpr int kStages = 4;
  static constexpr size_t kStageBytes = 256 << 10;

  // Collective over comm; nullptr when the members do not share memory.
  static std::unique_ptr<SharedMemoryGroup> create(Communicator& comm);

  enum Flag { ready = 0, reduced = 1, done = 2 };

  char* stage(int member, uint64_t stage_number);
  // Signature of what the writer of a stage buffer is doing (collective,
  // count, dtype, op, root): readers compare it with their own, so ranks
  // that disagree get an error instead of wrong data.
  uint64_t& signature(int member, uint64_t stage_number);
  void publish(Flag flag, uint64_t value);
  // Waits until member's flag >= value (timeout and failure checked).
  void wait_for(int member, Flag flag, uint64_t value, const Step& step);
  // Waits until every member has finished with the buffer stage s reuses.
  void acquire(uint64_t stage_number, const Step& step);
  // Throws px::Error if member's signature for this stage differs from mine.
  void check_signature(int member, uint64_t stage_number, const Step& step);
  // The "every rank contributes" opening of a stage: acquire it, copy
  // `bytes` of `source` into my buffer, sign and publish it, then wait until
  // every member's buffer is ready and signed like mine.
  void stage_from_all(uint64_t stage_number, const void* source, size_t bytes, uint64_t signature,
                      const Step& step);

  // The next stage number; each collective takes its stages from here.
  uint64_t next_stage = 0;

 private:
  SharedMemoryGroup(Communicator& comm, std::shared_ptr<SharedSegment> segment)
      : comm_(comm), segment_(std::move(segment)) {}
  std::atomic<uint64_t>& flag(int member, Flag flag);

  Communicator& comm_;
  std::shared_ptr<SharedSegment> segment_;
};

// A signature for stage headers.
uint64_t stage_signature(int collective, int64_t count, int dtype, int op, int root);

}  // namespace px::comm
