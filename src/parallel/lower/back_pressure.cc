// back_pressure: with gradients sharded (ZeRO), at most LowerRequest::
// bucket_buffers gradient bucket buffers are alive at once: the ones
// backward fills and those still being reduced. The first write of each
// further instance waits (an `after` edge) for the reduction that reads
// the instance `bucket_buffers` before it last, so by then that one is
// freed. An instance not yet freed where the list reaches the new one
// (ZeRO-1's buckets, reduced once at the end of the step) is no reason to
// wait: the edge would point forward.
//
// It is Program structure, not an executor rule, so the simulator waits
// where the executor does.
#include <algorithm>

#include "core/error.h"
#include "parallel/lower/liveness.h"
#include "parallel/lower/passes.h"

namespace px::parallel::passes {

void back_pressure(Program& p, int bucket_buffers) {
  if (bucket_buffers < 1)
    fail("gradient bucket buffers {}: expected at least 1 (the bucket backward fills)", bucket_buffers);
  if (p.grad_shard_buffer < 0) return;
  auto is_bucket = [&](int b) {
    const Buffer& buffer = p.buffers[static_cast<size_t>(b)];
    return buffer.kind == Buffer::Kind::grad_bucket && !buffer.persistent;
  };
  const Liveness live = liveness(p);
  // Per instance in allocation order: its last reader once freed (-1 before).
  std::vector<int> last_reader;
  std::vector<int> open(p.buffers.size(), -1);  // buffer -> its instance
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    Instr& instr = p.instrs[i];
    if (const auto* free = std::get_if<Free>(&instr.op); free && is_bucket(free->buffer)) {
      PX_CHECK(!instr.after.empty() && open[static_cast<size_t>(free->buffer)] >= 0, "free #{} of no instance", i);
      last_reader[static_cast<size_t>(open[static_cast<size_t>(free->buffer)])] = instr.after.front();
      continue;
    }
    for (int b : live.allocates[i]) {
      if (!is_bucket(b)) continue;
      const int instance = static_cast<int>(last_reader.size());
      open[static_cast<size_t>(b)] = instance;
      last_reader.push_back(-1);
      const int oldest = instance - bucket_buffers;
      if (oldest < 0 || last_reader[static_cast<size_t>(oldest)] < 0) continue;
      instr.after.push_back(last_reader[static_cast<size_t>(oldest)]);
      std::sort(instr.after.begin(), instr.after.end());
      instr.after.erase(std::unique(instr.after.begin(), instr.after.end()), instr.after.end());
    }
  }
}

}  // namespace px::parallel::passes
