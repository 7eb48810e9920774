// The replay's state (internal to plan/): per replayed rank its main
// thread's and progress lane's positions, the groups' meetings. replay.cc
// moves the main threads and sums up; replay_progress.cc runs the progress
// lanes and the meetings.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "parallel/lower/liveness.h"
#include "plan/replay_calls.h"
#include "plan/simulate.h"

namespace px::plan::replaying {

using parallel::Instr;
using parallel::Program;

inline double region_bytes(const Program& p, const parallel::Region& r) { return static_cast<double>(p.bytes(r)); }

// A group's meeting for one call (one slice of it on the progress lane).
struct Rendezvous {
  std::vector<std::pair<int, int>> posted;  // (rank, position)
  double ready = 0;
  std::optional<double> finish;
};
// (group key, step, sequence, slice)
using MeetingKey = std::tuple<std::string, int, int64_t, int>;

// A program that defers instructions (P3) is replayed for two steps: the
// second step's head waits for the first's carried collectives, and the
// step time is the second step's. Positions index step * n + instruction.
struct RankState {
  const Program* program = nullptr;
  parallel::Liveness live;
  std::vector<std::optional<CollectiveCall>> calls;  // per instruction
  size_t n = 0;   // instructions a step
  int steps = 1;
  std::vector<bool> carried;     // per instruction: a deferred one of the next step waits for it
  std::vector<double> finish;    // per position (< 0: not yet)
  std::vector<double> submitted; // progress-lane positions: when the main thread reached them
  std::vector<int> slices_done;  // progress-lane positions
  std::vector<int> posted_slice; // per position: the slice it has joined (-1: none)
  std::vector<int> engine;       // progress-lane positions, in submission order
  size_t engine_first = 0;       // the first of them not finished (engine.size(): all are)
  bool prioritized = false;      // its progress lane holds more than one priority
  std::vector<double> step_end;  // per step: when the executor's run() returns
  size_t pc = 0;
  double t = 0, engine_t = 0;
  int current = -1;              // the progress lane's job whose slice it has joined
  double current_ready = 0;
  double busy = 0, last_compute = 0, receive_wait = 0;  // in the last step
  double progress_busy = 0;  // the last step's progress-lane collectives, their own time
  // The progress lane's latest collective, [from, until): computes beside it run slower.
  double collective_from = 0, collective_until = 0;
  int step_of(size_t pos) const { return static_cast<int>(pos / n); }
  const Instr& instr_at(size_t pos) const { return program->instrs[pos % n]; }
};

class Replay {
 public:
  explicit Replay(const SimulationRequest& request);
  Simulation run();

 private:
  void prepare(int rank);
  std::optional<CollectiveCall> call_of(const Program& p, const Instr& instr) const;
  LinkClass link_of(const std::vector<int>& members) const;
  double free_from(int rank, LinkClass link) const;
  void event(int rank, size_t pos, const std::string& lane, double start, double duration, int64_t sequence = -1);
  std::optional<double> join(int rank, size_t pos, int slice, double ready);
  void complete(const CollectiveCall& call, Rendezvous& rv);
  bool advance_main(int rank);
  bool begin_step(RankState& s, int step);
  // The main thread's time for one instruction from `start`; nullopt while it waits.
  std::optional<double> main_instruction(int rank, size_t pos, double start);
  void send(int rank, size_t pos, const parallel::Send& send, double start);
  bool advance_engine(int rank);
  bool choose_job(int rank);
  std::optional<double> agreed_at(const CollectiveCall& call, int step) const;
  double returned_at(const RankState& s, int step) const;
  void check_finished() const;
  void summarize();

  const SimulationRequest& request_;
  const std::vector<Program>& programs_;
  const ClusterSpec& cluster_;
  const CostEstimator& estimator_;
  const int ranks_;
  double weight_ = 1;  // mesh ranks each replayed rank stands for
  std::map<int, int> replayed_;  // mesh rank -> replayed index
  std::vector<RankState> state_;
  // Links are shared: a collective holds each member's link of its class
  // from start to finish and waits until it is free; a message goes out at
  // once and holds its sender's link for its time.
  std::map<std::pair<int, LinkClass>, double> link_free_;  // (replayed rank, link class) -> free from
  std::map<MeetingKey, Rendezvous> rendezvous_;
  // Progress-lane calls by (group key, step, sequence): members submitted, the latest time.
  std::map<std::tuple<std::string, int, int64_t>, std::pair<size_t, double>> submissions_;
  // Messages by (from, to, tag, step) -> arrival; hashed: a replay at scale
  // looks one up each time a blocked receive is tried.
  struct MessageKey {
    int from, to;
    uint32_t tag;
    int step;
    bool operator==(const MessageKey&) const = default;
  };
  struct MessageHash {
    size_t operator()(const MessageKey& k) const {
      const uint64_t ranks = (static_cast<uint64_t>(static_cast<uint32_t>(k.from)) << 32) | static_cast<uint32_t>(k.to);
      const uint64_t rest = (static_cast<uint64_t>(k.tag) << 32) | static_cast<uint32_t>(k.step);
      return std::hash<uint64_t>{}(ranks * 0x9e3779b97f4a7c15ULL ^ rest);
    }
  };
  std::unordered_map<MessageKey, double, MessageHash> arrivals_;
  struct Event {
    SimulatedEvent event;
    size_t pos = 0;
  };
  std::vector<Event> events_;
  Simulation out_;
};

}  // namespace px::plan::replaying
