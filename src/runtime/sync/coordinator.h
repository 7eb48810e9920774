// Partial reduce's coordinator (SDPipe's centralized group scheduling): a
// thread of rank 0 that keeps one receive posted per live replica on the
// control communicator, feeds each report to the GroupScheduler and the
// StragglerScores, and sends each round to its members (protocol.h). It
// writes a metrics line per round (its global step, group, staleness and
// the members' loss) and names stragglers, leavers and recoveries in the
// log while the job runs.
#pragma once

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "runtime/sync/group_scheduler.h"
#include "runtime/sync/lead_output.h"
#include "runtime/sync/protocol.h"
#include "runtime/train/straggler_scores.h"

namespace px::sync {

struct CoordinatorReport {
  std::vector<double> losses;  // per round: the members' rows-weighted loss
  int64_t rounds = 0;
  int64_t max_staleness = 0;
  double mean_group = 0;       // members per round
  nlohmann::json stragglers;   // StragglerScores::summary at the end
  std::vector<std::string> left;  // "rank R at its step S: reason"
};

class Coordinator {
 public:
  // `units_per_row` counts the progress line's throughput (tokens or
  // samples); `noun` names a member in the log: "rank", or "replica" when
  // replicas span ranks (the control communicator's ranks are replicas).
  Coordinator(comm::Communicator control, const SchedulerConfig& schedule, double straggler_threshold,
              int64_t units_per_row, std::string noun, LeadOutput& out);
  ~Coordinator();  // stops and joins the thread
  // Waits for the last round to be sent; rethrows the thread's error.
  CoordinatorReport finish();

 private:
  void run();
  void receive(int rank, const ReadyMessage& message);
  void announce(const Round& round);

  comm::Communicator control_;
  std::string noun_;
  GroupScheduler scheduler_;
  StragglerScores scores_;
  int64_t units_per_row_;
  LeadOutput& out_;
  std::vector<double> loss_;  // per rank: its last step's
  std::vector<int64_t> rows_;
  std::vector<RoundMessage> sent_;  // per rank: the round last sent to it (its buffer until the send completes)
  std::vector<comm::Request> sends_;
  CoordinatorReport report_;
  int64_t members_total_ = 0;
  int64_t rows_announced_ = 0;  // the scheduler's rows at the last round (the progress line's throughput)
  std::string error_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace px::sync
