// A tensor-parallel decode group: every rank runs each iteration's decode
// Program over its heads and vocabulary rows, and only the lead (group rank
// 0) schedules and samples. Each iteration the lead tells the others what
// to run, a *tick*: one broadcast of a header {kind, rows, table entries},
// then for a run the batch's tokens, positions, segments and slots. An idle
// lead sends idle ticks, so a follower waiting for the next batch never
// waits out its communicator's timeout however long no request comes; stop
// releases the followers. The ticks travel on a communicator split off the
// group's for them alone, so their tags never meet the Program's.
#pragma once

#include <cstdint>

#include "comm/communicator.h"
#include "runtime/decode/decode_batch.h"

namespace px::decode {

enum class Tick : int32_t { run = 1, idle = 2, stop = 3 };

class DecodeGroup {
 public:
  // Collective over `ranks` (the Program's tensor-parallel axis), which
  // must outlive the group.
  explicit DecodeGroup(comm::Communicator& ranks);

  comm::Communicator& ranks() { return ranks_; }
  int size() const { return ranks_.size(); }
  int rank() const { return ranks_.rank(); }
  bool lead() const { return ranks_.rank() == 0; }

  // The lead's side.
  void send_run(const DecodeBatch& batch);
  void send_idle();
  void send_stop();
  // A follower's: the next tick; `batch` holds a run's rows.
  Tick receive(DecodeBatch& batch);

 private:
  void send_header(Tick tick, int64_t rows, int64_t table_entries);

  comm::Communicator& ranks_;
  comm::Communicator ticks_;
};

}  // namespace px::decode
