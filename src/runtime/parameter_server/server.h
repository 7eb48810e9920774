// A parameter-server rank: serves its shard's pulls and applies the workers'
// pushed gradients with its ServerSlice, by mode:
//   bsp  a clock's update sums the first W - B of its W gradients to arrive
//        (B = backup workers, 0 by default: all W), in worker order, and is
//        applied once; later pushes of that clock are dropped. A pull for
//        clock c waits until clock c-1 is applied;
//   ssp  each gradient is applied as it arrives; a pull for clock c waits
//        until every worker pushed clock c-s-1 (complete clocks >= c - s);
//   asp  each gradient is applied as it arrives; pulls never wait.
// Gradients arrive weighted by the pushing worker's share of the global
// batch (rows / B), so a clock's W pushes sum to the global-batch gradient;
// a bsp update of fewer pushes is rescaled to the mean over their rows.
//
// With B > 0 and several servers, every server must sum the same workers'
// gradients for a clock (or the shards of one update would come from
// different gradients): server 0 picks them in the order their pushes reach
// it and sends the others a kDecision; they follow it.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "runtime/optimizer/lr_schedule.h"
#include "runtime/parameter_server/protocol.h"
#include "runtime/parameter_server/server_slice.h"

namespace px::ps {

struct ServerConfig {
  std::string mode;          // bsp | asp | ssp
  int staleness = 0;         // ssp bound s
  int backup_workers = 0;    // bsp: B; each update takes the first W - B pushes of its clock
  int late_worker = -1;      // tests: server 0 takes this worker's pushes as arriving after every other's
  int64_t start_clock = 0;   // first clock of this run (the resumed step)
  int64_t end_clock = 0;     // one past the last clock
  LrSchedule schedule;       // lr for clock c: schedule.at(c)
};

class Server {
 public:
  Server(comm::Communicator& comm, const Layout& layout, ServerSlice& slice, ServerConfig config);
  ~Server();

  // Serves until every worker has sent its last message (its last push, or in
  // bsp a pull answered with the final parameters), every clock is applied
  // and every reply is sent. `on_clock(c, loss)` runs in clock order: bsp
  // when clock c's update is applied, loss being the mean over the rows it
  // summed; asp/ssp once every worker has pushed clock c, loss being the
  // global batch's (the rows-weighted sum).
  void run(const std::function<void(int64_t clock, double loss)>& on_clock);

  // The largest staleness any worker reported in its pushes.
  int64_t max_staleness() const { return max_staleness_; }
  // bsp: per worker, pushes left out of their clock's update (they arrived
  // after it was decided). Every server drops the same pushes.
  std::vector<int64_t> dropped_pushes() const;
  // bsp: per applied clock, how many workers' gradients its update summed.
  const std::vector<int>& gradients_per_update() const { return gradients_per_update_; }

 private:
  struct Peer;
  struct DecisionSend {
    std::vector<int64_t> message;  // (1 + W - B) kDecision
    std::vector<comm::Request> sends;
  };
  bool bsp() const { return config_.mode == "bsp"; }
  int64_t complete_clocks() const;
  bool may_answer(int64_t clock) const;
  void listen(int worker);
  void post_decision();
  void receive_header(int worker);
  void receive_push(int worker, const std::function<void(int64_t, double)>& on_clock);
  bool try_update(const std::function<void(int64_t, double)>& on_clock);
  std::vector<int> chosen_workers();
  void update(const std::vector<int>& chosen, const std::function<void(int64_t, double)>& on_clock);
  void answer_pull(int worker);
  bool finished() const;

  comm::Communicator& comm_;
  Layout layout_;
  ServerSlice& slice_;
  ServerConfig config_;
  std::vector<Peer> peers_;
  // bsp
  bool follows_ = false;                 // server j > 0 with backup workers: takes server 0's decisions
  int64_t next_clock_ = 0;               // the clock being collected; clocks before it are applied
  std::vector<float> sum_;               // (count) a clock's summed gradient
  std::vector<int> arrived_;             // workers whose push of next_clock_ arrived, in arrival order (late worker aside)
  bool late_arrived_ = false;            // tests: the late worker's push of next_clock_ arrived
  std::vector<int64_t> decision_;        // follows_: the posted kDecision receive
  comm::Request decision_recv_;
  std::deque<DecisionSend> decision_sends_;  // server 0: decisions until their sends complete
  std::vector<int> gradients_per_update_;
  // asp/ssp
  std::map<int64_t, std::pair<double, int>> clock_losses_;  // clock -> (loss sum, reports)
  int64_t max_staleness_ = 0;
};

}  // namespace px::ps
