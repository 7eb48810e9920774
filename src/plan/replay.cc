// The replay behind simulate(): per replayed rank a main thread walking
// the instruction list and a progress lane running the collectives the
// Program puts there (parallel/program.h), collectives meeting their group
// by the stamped key and sequence number, messages arriving their transfer
// time after they were sent, links held while used.
#include "plan/replay.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "core/error.h"
#include "graph/op.h"
#include "graph/precision.h"
#include "parallel/lower/reshard.h"
#include "plan/memory.h"
#include "plan/replay_state.h"

namespace px::plan {
namespace replaying {

namespace {

// A compute of `alone` seconds from `start` while the progress lane runs
// a collective over [from, until): the part beside it at the pace of
// `beside` seconds for the whole node. (A collective that the replay
// schedules after this compute began does not slow it: an optimistic
// edge.)
double seconds_beside_collective(double start, double alone, double beside, double from, double until) {
  if (until <= start || beside <= alone) return alone;
  const double before = std::min(alone, std::max(0.0, from - start));
  if (before >= alone) return alone;
  const double pace = alone / beside;  // the node's work done a second beside the collective
  const double during = std::min(until - std::max(start, from), (alone - before) / pace);
  return before + during + (alone - before - during * pace);
}

}  // namespace

Replay::Replay(const SimulationRequest& request)
    : request_(request),
      programs_(*request.programs),
      cluster_(*request.cluster),
      estimator_(*request.estimator),
      ranks_(static_cast<int>(request.programs->size())) {
  // A symmetric replay stands for mesh_ranks / ranks ranks each.
  weight_ = static_cast<double>(programs_.front().strategy.mesh.ranks()) / ranks_;
  for (int i = 0; i < ranks_; ++i) replayed_[programs_[static_cast<size_t>(i)].rank] = i;
  state_.resize(static_cast<size_t>(ranks_));
  for (int r = 0; r < ranks_; ++r) prepare(r);
}

void Replay::prepare(int rank) {
  if (request_.deadline) request_.deadline->check();
  RankState& s = state_[static_cast<size_t>(rank)];
  const Program& p = programs_[static_cast<size_t>(rank)];
  s.program = &p;
  s.live = parallel::liveness(p);
  s.n = p.instrs.size();
  s.carried = parallel::carried_instructions(p.instrs);
  if (std::any_of(p.instrs.begin(), p.instrs.end(), [](const Instr& instr) { return instr.deferred; })) s.steps = 2;
  s.calls.resize(s.n);
  const size_t positions = s.n * static_cast<size_t>(s.steps);
  s.finish.assign(positions, -1);
  s.submitted.assign(positions, -1);
  s.slices_done.assign(positions, 0);
  s.posted_slice.assign(positions, -1);
  s.step_end.assign(static_cast<size_t>(s.steps), -1);
  for (size_t i = 0; i < s.n; ++i) s.calls[i] = call_of(p, p.instrs[i]);
  for (size_t pos = 0; pos < positions; ++pos) {
    const std::optional<CollectiveCall>& call = s.calls[pos % s.n];
    if (!call || !call->engine) continue;
    s.engine.push_back(static_cast<int>(pos));
    s.prioritized = s.prioritized || call->priority != s.calls[static_cast<size_t>(s.engine.front()) % s.n]->priority;
  }
}

std::optional<CollectiveCall> Replay::call_of(const Program& p, const Instr& instr) const {
  if (instr.group < 0) return std::nullopt;
  CollectiveCall call{.group = &p.groups[static_cast<size_t>(instr.group)],
                      .wire = instr.wire,
                      .sequence = instr.sequence,
                      .engine = request_.execution.overlap && instr.lane.kind == parallel::Lane::Kind::progress,
                      .priority = instr.priority};
  if (const auto* c = std::get_if<parallel::Collective>(&instr.op)) {
    call.kind = c->kind;
    call.codec = c->codec;
    call.rows = static_cast<double>(c->codec_rows);
    call.cols = static_cast<double>(c->codec_cols);
    const parallel::Region& whole = c->kind == comm::Collective::allgather ? c->output : c->input;
    call.bytes = region_bytes(p, whole);
    call.axis = c->axis;
    // On the engine, in the slices the lowering stamped (Instr::slices).
    if (call.engine) call.slices = instr.slices;
    // The engine's agreement rounds the lowering stamped, costed where they
    // add up: a job of several (P3's slices, hundreds a step), and on the
    // calibrated local spec, where parallax's own engine is what runs (a
    // compressed step's per-tensor jobs and flags); a preset's collectives
    // are a library's, whose single round per job the replay leaves out.
    if (call.engine && (instr.announcement_rounds > 1 || cluster_.profile.has_value()))
      call.announcement_rounds = instr.announcement_rounds;
    return call;
  }
  if (const auto* route = std::get_if<parallel::Route>(&instr.op)) {
    // The rows a balanced routing moves (the spec's, graph/ops/moe_dispatch.cc),
    // as an all-to-all of the rank's rows; the counts' allgather before it
    // is a message's latency.
    const Graph& g = p.graph_of(instr.micro_batch);
    const Node& node = g.nodes()[static_cast<size_t>(route->node)];
    call.kind = comm::Collective::all_to_all;
    call.bytes = static_cast<double>(g.spec(node.inputs.front()).bytes()) * request_.expert_imbalance;
    call.axis = route->axis;
    return call;
  }
  const auto* rs = std::get_if<parallel::Reshard>(&instr.op);
  if (rs == nullptr) return std::nullopt;
  const Graph& g = p.graph_of(instr.micro_batch);
  const Node& node = g.nodes()[static_cast<size_t>(rs->node)];
  call.kind = *parallel::collective_of(parallel::resharding(rs->from, rs->to));
  call.bytes = static_cast<double>(std::max(g.spec(node.inputs.front()).bytes(), g.spec(node.outputs.front()).bytes()));
  call.axis = rs->axis;
  return call;
}

LinkClass Replay::link_of(const std::vector<int>& members) const {
  for (int r : members)
    if (cluster_.node_of(r) != cluster_.node_of(members.front())) return LinkClass::inter_node;
  return LinkClass::intra_node;
}

double Replay::free_from(int rank, LinkClass link) const {
  auto it = link_free_.find({rank, link});
  return it == link_free_.end() ? 0.0 : it->second;
}

void Replay::event(int rank, size_t pos, const std::string& lane, double start, double duration, int64_t sequence) {
  const RankState& s = state_[static_cast<size_t>(rank)];
  // Only the step whose time is reported.
  if (!request_.execution.trace || s.step_of(pos) != s.steps - 1) return;
  const Program& p = *s.program;
  const size_t instr = pos % s.n;
  events_.push_back({{p.rank, lane, p.event_name(instr), start, duration, static_cast<int>(instr), sequence}, pos});
}

// When the executor's run() of `step` returns: its list done and its
// progress-lane jobs but the carried ones (nullopt-like -1 while not).
double Replay::returned_at(const RankState& s, int step) const {
  double end = s.t;
  for (int pos : s.engine) {
    if (s.step_of(static_cast<size_t>(pos)) != step || s.carried[static_cast<size_t>(pos) % s.n]) continue;
    if (s.finish[static_cast<size_t>(pos)] < 0) return -1;
    end = std::max(end, s.finish[static_cast<size_t>(pos)]);
  }
  return end;
}

// The main thread at the head of `step` > 0: the previous step must have returned.
bool Replay::begin_step(RankState& s, int step) {
  if (s.step_end[static_cast<size_t>(step - 1)] >= 0) return true;
  const double end = returned_at(s, step - 1);
  if (end < 0) return false;
  s.step_end[static_cast<size_t>(step - 1)] = end;
  s.t = end;
  return true;
}

// Runs the main thread of `rank` one instruction on; true if it moved.
bool Replay::advance_main(int rank) {
  RankState& s = state_[static_cast<size_t>(rank)];
  const Program& p = *s.program;
  if (s.pc >= s.n * static_cast<size_t>(s.steps)) return false;
  const size_t pos = s.pc;
  const int step = s.step_of(pos);
  const Instr& instr = s.instr_at(pos);
  if (pos % s.n == 0 && step > 0 && !begin_step(s, step)) return false;
  if (instr.deferred && step == 0) {  // nothing before the first step to run on
    s.finish[pos] = s.t;
    ++s.pc;
    return true;
  }
  double start = s.t;
  if (!std::holds_alternative<parallel::Free>(instr.op))
    for (int dep : instr.after) {
      // A deferred instruction waits for the previous step's instructions (and its fellow deferred ones).
      const bool previous = instr.deferred && !p.instrs[static_cast<size_t>(dep)].deferred;
      const size_t at = static_cast<size_t>(step - (previous ? 1 : 0)) * s.n + static_cast<size_t>(dep);
      if (s.finish[at] < 0) return false;
      start = std::max(start, s.finish[at]);
    }
  const std::optional<CollectiveCall>& call = s.calls[pos % s.n];
  if (call && call->engine) {
    s.submitted[pos] = start;  // queued on the progress lane; the main thread goes on
    auto& [members, latest] = submissions_[{call->group->key, step, call->sequence}];
    ++members;
    latest = std::max(latest, start);
    s.t = start;
    ++s.pc;
    return true;
  }
  const std::optional<double> end = main_instruction(rank, pos, start);
  if (!end) return false;
  s.finish[pos] = *end;
  s.t = *end;
  ++s.pc;
  return true;
}

std::optional<double> Replay::main_instruction(int rank, size_t pos, double start) {
  RankState& s = state_[static_cast<size_t>(rank)];
  const Program& p = *s.program;
  const Instr& instr = s.instr_at(pos);
  const bool counted = s.step_of(pos) == s.steps - 1;  // the reported step
  auto bytes_of = [&p](const std::vector<parallel::Region>& regions) {
    double bytes = 0;
    for (const parallel::Region& r : regions) bytes += region_bytes(p, r);
    return bytes;
  };
  // A rank of a heterogeneous cluster does its own work at its speed.
  const double speed = p.rank < cluster_.devices() ? cluster_.relative_speed(p.rank) : 1.0;
  if (const auto* c = std::get_if<parallel::Compute>(&instr.op)) {
    const Graph& g = p.graph_of(instr.micro_batch);
    const Node& node = g.nodes()[static_cast<size_t>(c->node)];
    // The busiest expert rank's experts hold everyone up (SimulationRequest::expert_imbalance).
    const bool expert_work = p.strategy.expert_ranks() > 1 && node.op().rfind("moe_linear", 0) == 0;
    const double alone = estimator_.compute_seconds(g, node) / speed * (expert_work ? request_.expert_imbalance : 1.0);
    const double end =
        start + (s.collective_until > start
                     ? seconds_beside_collective(start, alone, estimator_.compute_seconds_beside_collective(g, node) / speed,
                                                 s.collective_from, s.collective_until)
                     : alone);
    if (counted) {
      std::vector<TensorSpec> in, o;
      for (ValueId v : node.inputs) in.push_back(g.spec(v));
      for (ValueId v : node.outputs) o.push_back(g.spec(v));
      const double flops = node.def->cost ? node.def->cost(in, o, node.attrs).flops : 0;
      out_.flops += weight_ * flops;
      const DType precision = precision_of(node.attrs) == Precision::bf16 ? DType::bf16 : DType::f32;
      consider_compute(out_.assumed, g, node, flops, end - start, cluster_.device.flops(precision));
      s.busy += end - start;
      s.last_compute = end;
    }
    event(rank, pos, "compute", start, end - start);
    return end;
  }
  // The local passes: on the compute lane, as the executor traces them.
  auto pass = [&](double seconds) {
    seconds /= speed;
    event(rank, pos, "compute", start, seconds);
    return start + seconds;
  };
  if (const auto* a = std::get_if<parallel::Accumulate>(&instr.op))
    return pass(estimator_.memory_seconds(3 * region_bytes(p, a->into)));
  if (const auto* nm = std::get_if<parallel::Norm>(&instr.op))
    return pass(estimator_.memory_seconds(bytes_of(nm->gradients)));
  if (const auto* f = std::get_if<parallel::Finite>(&instr.op))
    return pass(estimator_.memory_seconds(region_bytes(p, f->gradient)));
  if (const auto* cl = std::get_if<parallel::Clip>(&instr.op))
    return pass(estimator_.memory_seconds(2 * bytes_of(cl->gradients)));
  if (const auto* u = std::get_if<parallel::Update>(&instr.op))  // read the gradient, the parameter and each
    // state slot; write the parameter and the slots
    return pass(estimator_.update_seconds((3 + 2.0 * request_.optimizer_slots) * region_bytes(p, u->gradient)));
  if (const auto* sent = std::get_if<parallel::Send>(&instr.op)) {
    send(rank, pos, *sent, start);
    return start;
  }
  if (const auto* recv = std::get_if<parallel::Recv>(&instr.op)) {
    std::vector<int> coords = p.coords;
    coords[static_cast<size_t>(recv->axis)] = recv->peer;
    auto it = arrivals_.find({p.strategy.mesh.rank_of(coords), p.rank, recv->tag, s.step_of(pos)});
    if (it == arrivals_.end()) return std::nullopt;
    const double end = std::max(start, it->second);
    if (counted) s.receive_wait += end - start;
    event(rank, pos, parallel::lane_name(p, instr.lane), start, end - start);
    return end;
  }
  if (s.calls[pos % s.n]) return join(rank, pos, 0, start);
  return start;
}

// A message goes out at once (small, latency-bound, it cuts in) and holds
// the link for its time: a collective after it starts later.
void Replay::send(int rank, size_t pos, const parallel::Send& send, double start) {
  const RankState& s = state_[static_cast<size_t>(rank)];
  const Program& p = *s.program;
  const Instr& instr = s.instr_at(pos);
  std::vector<int> coords = p.coords;
  coords[static_cast<size_t>(send.axis)] = send.peer;
  const int to = p.strategy.mesh.rank_of(coords);
  // The stamped bytes (in the dtype the value travels in).
  const double bytes = static_cast<double>(instr.wire.total());
  const LinkClass link = cluster_.link_between(p.rank, to);
  const double seconds = estimator_.transfer_seconds(bytes, link);
  arrivals_[{p.rank, to, send.tag, s.step_of(pos)}] = start + seconds;
  link_free_[{rank, link}] = std::max(free_from(rank, link), start) + seconds;
  if (s.step_of(pos) == s.steps - 1) out_.bytes_sent[link] += weight_ * bytes;
}

Simulation Replay::run() {
  // Lanes move in the order of their clocks, one instruction at a time,
  // so what holds a link is decided in time order: 2r is rank r's main
  // thread, 2r + 1 its progress lane. A move changes few clocks, so the
  // order is kept from move to move and re-sorted by insertion (about
  // linear on a nearly sorted order; a full sort each move was a tenth of
  // a 3072-GPU replay). Keys (clock, lane) are unique: the order is the
  // same as a full sort's.
  // Ordered by (clock, kind, lane): at equal clocks every main thread
  // moves before any progress lane chooses, so a lane choosing its next
  // job at time t knows every job its members submit at t (the engine's
  // agreement round sees them all too); else, with ties (zero costs), one
  // rank's lane could commit to a job while another's chose a more urgent
  // one submitted at the same time, and the two would wait for each other.
  std::vector<std::pair<double, int>> order;
  for (int lane = 0; lane < 2 * ranks_; ++lane) order.push_back({0.0, lane});
  const auto key = [](const std::pair<double, int>& e) { return std::tuple(e.first, e.second % 2, e.second); };
  const auto active = [&](int lane) {
    const RankState& s = state_[static_cast<size_t>(lane / 2)];
    return lane % 2 ? s.engine_first < s.engine.size() : s.pc < s.n * static_cast<size_t>(s.steps);
  };
  int64_t moves = 0;
  for (bool moved = true; moved; ++moves) {
    if (request_.deadline && moves % 4096 == 0) request_.deadline->check();
    moved = false;
    for (auto& [clock, lane] : order) {
      const RankState& s = state_[static_cast<size_t>(lane / 2)];
      clock = lane % 2 ? s.engine_t : s.t;
    }
    for (size_t i = 1; i < order.size(); ++i)
      for (size_t j = i; j > 0 && key(order[j]) < key(order[j - 1]); --j) std::swap(order[j], order[j - 1]);
    for (const auto& [clock, lane] : order)
      if (active(lane) && (lane % 2 ? advance_engine(lane / 2) : advance_main(lane / 2))) {
        moved = true;
        break;
      }
  }
  check_finished();
  summarize();
  return std::move(out_);
}

void Replay::check_finished() const {
  std::string stuck;
  for (int r = 0; r < ranks_; ++r) {
    const RankState& s = state_[static_cast<size_t>(r)];
    if (s.pc < s.n * static_cast<size_t>(s.steps)) {
      stuck += fmt::format("\n  rank {} at {}", r, s.program->str(s.pc % s.n));
      continue;
    }
    for (int pos : s.engine)
      if (s.finish[static_cast<size_t>(pos)] < 0) {
        stuck += fmt::format("\n  rank {}'s progress lane at {}", r, s.program->str(static_cast<size_t>(pos) % s.n));
        break;
      }
  }
  if (!stuck.empty()) fail("simulate: the step cannot finish; waiting forever:{}", stuck);
}

void Replay::summarize() {
  // The reported step: from the previous step's return (two-step replays) to its own.
  double origin = std::numeric_limits<double>::max();
  for (RankState& s : state_) {
    const double begin = s.steps > 1 ? s.step_end[static_cast<size_t>(s.steps - 2)] : 0;
    origin = std::min(origin, begin);
    const double end = std::max(returned_at(s, s.steps - 1), s.steps > 1 ? 0.0 : s.engine_t);
    out_.step_seconds = std::max(out_.step_seconds, end - begin);
    s.last_compute = std::max(0.0, s.last_compute - begin);
  }
  // The bubble: every rank's idle time until the last compute of the step, over ranks x that span.
  double busy = 0, span = 0;
  for (const RankState& s : state_) {
    out_.busy_seconds.push_back(s.busy);
    out_.compute_span.push_back(s.last_compute);
    out_.receive_wait.push_back(s.receive_wait);
    out_.progress_busy.push_back(s.progress_busy);
    busy += s.busy;
    span = std::max(span, s.last_compute);
  }
  out_.bubble_fraction = span > 0 ? 1 - busy / (span * ranks_) : 0;
  for (Event& e : events_) {
    e.event.start -= origin;
    out_.trace.push_back(std::move(e.event));
  }
  // Memory, in the executor's allocation order (plan/memory.h).
  for (const RankState& s : state_) {
    const ProgramMemory m = program_memory(*s.program, s.live, request_.optimizer_slots);
    out_.peak_bytes.push_back(m.peak_bytes);
    out_.activation_peak_bytes.push_back(m.activation_peak_bytes);
    out_.forward_activation_peak_bytes.push_back(m.forward_activation_peak_bytes);
    out_.stash_bytes.push_back(m.stash_bytes);
  }
}

}  // namespace replaying

Simulation replay(const SimulationRequest& request) { return replaying::Replay(request).run(); }

}  // namespace px::plan
