// A parameter-server rank: serves its shard's pulls and applies the workers'
// pushed gradients with its ShardOptimizer, by mode:
//   bsp  a clock's W gradients are summed (in worker order) and applied once;
//        a pull for clock c waits until every worker pushed clock c-1;
//   ssp  each gradient is applied as it arrives; a pull for clock c waits
//        until every worker pushed clock c-s-1 (complete clocks >= c - s);
//   asp  each gradient is applied as it arrives; pulls never wait.
// Gradients arrive weighted by the pushing worker's share of the global
// batch (rows / B), so a clock's W pushes sum to the global-batch gradient.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "runtime/lr_schedule.h"
#include "runtime/parameter_server/protocol.h"
#include "runtime/parameter_server/shard_optimizer.h"

namespace px::ps {

struct ServerConfig {
  std::string mode;          // bsp | asp | ssp
  int staleness = 0;         // ssp bound s
  int64_t start_clock = 0;   // first clock of this run (the resumed step)
  int64_t end_clock = 0;     // one past the last clock every worker runs
  int64_t global_batch = 1;  // B
  LrSchedule schedule;       // lr for clock c: schedule.at(c)
};

class Server {
 public:
  Server(comm::Communicator& comm, const Layout& layout, ShardOptimizer& optimizer, ServerConfig config);
  ~Server();

  // Serves until every worker has pushed its last clock and every pull is
  // answered. `on_clock(c, loss)` runs, in clock order, once every worker has
  // pushed clock c; loss is the global batch's (the rows-weighted sum).
  void run(const std::function<void(int64_t clock, double loss)>& on_clock);

  // The largest staleness any worker reported in its pushes.
  int64_t max_staleness() const { return max_staleness_; }

 private:
  struct Peer;
  int64_t complete_clocks() const;
  bool may_answer(int64_t clock) const;
  void post_push(int worker);
  void post_pull(int worker);
  void receive_push(int worker, const std::function<void(int64_t, double)>& on_clock);
  void answer_pull(int worker);

  comm::Communicator& comm_;
  Layout layout_;
  ShardOptimizer& optimizer_;
  ServerConfig config_;
  std::vector<Peer> peers_;
  std::vector<float> sum_;                                 // bsp: (count) a clock's summed gradient
  int held_ = 0;                                           // bsp: pushes of the current clock held
  std::map<int64_t, std::pair<double, int>> clock_losses_;  // clock -> (loss sum, reports)
  int64_t max_staleness_ = 0;
};

}  // namespace px::ps
