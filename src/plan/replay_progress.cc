// The replay's progress lanes and the groups' meetings (plan/replay_state.h).
#include <algorithm>

#include "plan/replay_state.h"

namespace px::plan::replaying {

// Joins rank's position to its collective's meeting (slice `slice`) at
// `ready`; its finish once every member has.
std::optional<double> Replay::join(int rank, size_t pos, int slice, double ready) {
  RankState& s = state_[static_cast<size_t>(rank)];
  const CollectiveCall& call = *s.calls[pos % s.n];
  Rendezvous& rv = rendezvous_[{call.group->key, s.step_of(pos), call.sequence, slice}];
  if (s.posted_slice[pos] == slice) return rv.finish;
  s.posted_slice[pos] = slice;
  rv.posted.push_back({rank, static_cast<int>(pos)});
  rv.ready = std::max(rv.ready, ready);
  size_t members = 0;
  for (int m : call.group->ranks) members += replayed_.count(m);
  if (rv.posted.size() == members) complete(call, rv);
  return rv.finish;
}

// Every replayed member has posted: the collective's (slice's) time, links and bytes.
void Replay::complete(const CollectiveCall& call, Rendezvous& rv) {
  const LinkClass link = link_of(call.group->ranks);
  const int p = static_cast<int>(call.group->ranks.size());
  const int per_node = cluster_.fewest_ranks_on_a_node(call.group->ranks);
  double seconds = slice_seconds(estimator_, call, p, link, per_node);
  // Members on nodes under a CPU quota answer each message step late.
  double throttled = 0;
  for (const int m : call.group->ranks)
    if (m < cluster_.devices()) throttled = std::max(throttled, throttle_wait(cluster_.device_of(m), cluster_.devices_per_node));
  if (throttled > 0) seconds += throttled * message_steps(call.kind, p);
  const auto& [first_member, first_pos] = *rv.posted.begin();
  const RankState& first = state_[static_cast<size_t>(first_member)];
  if (!call.codec.lossy() && first.step_of(static_cast<size_t>(first_pos)) == first.steps - 1)
    consider_collective(out_.assumed, estimator_, call.kind, call.bytes / call.slices, p, link, per_node,
                        cluster_.line_rate(link, per_node));
  double begin = rv.ready;
  for (const auto& [member, pos] : rv.posted) begin = std::max(begin, free_from(member, link));
  rv.finish = begin + seconds;
  const std::string lane =
      call.engine ? parallel::lane_name(programs_.front(), {.kind = parallel::Lane::Kind::progress, .axis = call.axis})
                  : "compute";
  for (const auto& [member, pos] : rv.posted) {
    RankState& m = state_[static_cast<size_t>(member)];
    link_free_[{member, link}] = *rv.finish;
    if (m.step_of(static_cast<size_t>(pos)) == m.steps - 1) {
      count_wire(out_.bytes_sent, m.calls[static_cast<size_t>(pos) % m.n]->wire, link, weight_ / call.slices);
      if (call.engine) m.progress_busy += seconds;
    }
    if (call.engine) {
      m.collective_from = begin;
      m.collective_until = *rv.finish;
    }
    event(member, static_cast<size_t>(pos), lane, begin, *rv.finish - begin, call.sequence);
  }
}

// When every replayed member of the call's group has submitted it (the
// engine's agreement); nullopt while one has not.
std::optional<double> Replay::agreed_at(const CollectiveCall& call, int step) const {
  auto it = submissions_.find({call.group->key, step, call.sequence});
  if (it == submissions_.end()) return std::nullopt;
  size_t members = 0;
  for (int m : call.group->ranks) members += replayed_.count(m);
  if (it->second.first < members) return std::nullopt;
  return it->second.second;
}

// The progress lane's next job, as the engine picks it: of the jobs every
// member has submitted, the most urgent (then the first submitted) when
// the lane is free; none agreed yet, the first to be. With priorities a
// job still to be submitted before that time may overtake: the lane then
// idles up to the member's main thread instead (true: its clock moved).
bool Replay::choose_job(int rank) {
  RankState& s = state_[static_cast<size_t>(rank)];
  if (!s.prioritized) {
    // One priority: in submission order, each once this rank reached it
    // (its meeting waits for the others).
    const int pos = s.engine[s.engine_first];
    if (s.submitted[static_cast<size_t>(pos)] < 0) return false;
    s.current = pos;
    s.current_ready = std::max(s.engine_t, s.submitted[static_cast<size_t>(pos)]);
    return true;
  }
  int best = -1;
  std::tuple<double, int, int> best_key{};
  for (size_t k = s.engine_first; k < s.engine.size(); ++k) {
    const int pos = s.engine[k];
    if (s.submitted[static_cast<size_t>(pos)] < 0) break;  // submitted in list order
    if (s.finish[static_cast<size_t>(pos)] >= 0) continue;
    const CollectiveCall& call = *s.calls[static_cast<size_t>(pos) % s.n];
    const std::optional<double> agreed = agreed_at(call, s.step_of(static_cast<size_t>(pos)));
    if (!agreed) continue;
    const std::tuple<double, int, int> key{std::max(s.engine_t, *agreed), call.priority, pos};
    if (best < 0 || key < best_key) best = pos, best_key = key;
  }
  if (best < 0) return false;
  const double start = std::get<0>(best_key);
  if (start > s.engine_t) {
    double idle_to = start;
    for (int m : s.calls[static_cast<size_t>(best) % s.n]->group->ranks) {
      auto it = replayed_.find(m);
      if (it == replayed_.end()) continue;
      const RankState& member = state_[static_cast<size_t>(it->second)];
      if (member.pc < member.n * static_cast<size_t>(member.steps) && member.t > s.engine_t)
        idle_to = std::min(idle_to, member.t);
    }
    if (idle_to < start) {
      s.engine_t = idle_to;
      return true;
    }
  }
  s.current = best;
  s.current_ready = start;
  return true;
}

bool Replay::advance_engine(int rank) {
  RankState& s = state_[static_cast<size_t>(rank)];
  if (s.current < 0) return choose_job(rank);
  const auto pos = static_cast<size_t>(s.current);
  const std::optional<double> done = join(rank, pos, s.slices_done[pos], s.current_ready);
  if (!done) return false;
  s.engine_t = *done;
  if (++s.slices_done[pos] == s.calls[pos % s.n]->slices) {
    s.finish[pos] = *done;
    while (s.engine_first < s.engine.size() && s.finish[static_cast<size_t>(s.engine[s.engine_first])] >= 0)
      ++s.engine_first;
  }
  s.current = -1;
  return true;
}

}  // namespace px::plan::replaying
