// The replay behind simulate(): per replayed rank a main thread walking
// the instruction list and a progress lane running the collectives the
// Program puts there (parallel/program.h), collectives meeting their group
// by the stamped key and sequence number, messages arriving their transfer
// time after they were sent, links held while used.
#include "plan/replay.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <tuple>

#include "core/error.h"
#include "graph/op.h"
#include "parallel/lower/liveness.h"
#include "parallel/lower/reshard.h"
#include "plan/memory.h"

namespace px::plan {
namespace {

using parallel::Instr;
using parallel::Program;

double region_bytes(const parallel::Region& r) { return static_cast<double>(r.count) * sizeof(float); }

// What one communicating instruction is, for the replay: the lowering's
// facts (its group, sequence number and wire bytes, parallel/program.h)
// and the collective's n for the estimator's time.
struct CollectiveCall {
  const parallel::CommGroup* group = nullptr;
  comm::Collective kind = comm::Collective::allreduce;
  comm::compression::Spec codec;  // a compressed allreduce (docs/compression.md)
  double rows = 1, cols = 1;      // its gradient as a matrix (PowerSGD)
  double bytes = 0;  // the collective's n, as comm::CostQuery counts it
  comm::WireBytes wire;  // what this rank sends
  int64_t sequence = 0;
  bool engine = false;  // on its axis' progress lane
  int axis = 0;
};

// A compressed allreduce of n floats over p ranks (docs/compression.md's
// table): its time. fp16/bf16 ring-allreduce half-width values; int8,
// sign and the sparse methods allgather each rank's payload
// (comm::gathered_payload_bytes) and every rank decodes all p; PowerSGD
// ring-allreduces P (rows x r) and Q (cols x r) around two products with
// the gradient. Encoding is a few passes over the gradient.
double compressed_allreduce_seconds(const CostEstimator& estimator, const CollectiveCall& call, int p,
                                    LinkClass link) {
  using comm::compression::Method;
  const double n = call.bytes / 4;
  switch (call.codec.method) {
    case Method::fp16:
    case Method::bf16:
      return estimator.collective_seconds(comm::Collective::allreduce, 2 * n, p, link) +
             estimator.memory_seconds(3 * 4 * n);
    case Method::powersgd: {
      const double r = call.codec.rank, small = 4 * r * (call.rows + call.cols);
      // Two (rows x cols) x r products and an orthogonalization, at the memory's pace.
      const double products = estimator.memory_seconds(2 * 4 * n) + estimator.memory_seconds(3 * small);
      return estimator.collective_seconds(comm::Collective::allreduce, 4 * r * call.rows, p, link) +
             estimator.collective_seconds(comm::Collective::allreduce, 4 * r * call.cols, p, link) + products;
    }
    case Method::none: return estimator.collective_seconds(comm::Collective::allreduce, call.bytes, p, link);
    default: {
      // Encode (3 passes: add the residual, select or quantize, keep the rest), then decode and sum p payloads.
      const double payload = comm::gathered_payload_bytes(call.codec, n);
      const double passes = estimator.memory_seconds(3 * 4 * n) + estimator.memory_seconds(p * 2 * 4 * n);
      return estimator.collective_seconds(comm::Collective::allgather, p * payload, p, link) + passes;
    }
  }
}

// Bytes by link class: the stamped split, or, when the lowering knew no
// node layout (all counted within a node), the link the cluster gives the group.
void count_wire(std::map<LinkClass, double>& sent, const comm::WireBytes& wire, LinkClass link, double weight) {
  if (link == LinkClass::intra_node || wire.inter_node > 0) {
    sent[LinkClass::intra_node] += weight * static_cast<double>(wire.intra_node);
    sent[LinkClass::inter_node] += weight * static_cast<double>(wire.inter_node);
  } else {
    sent[LinkClass::inter_node] += weight * static_cast<double>(wire.total());
  }
}

struct Rendezvous {
  std::vector<std::pair<int, int>> posted;  // (rank, instruction)
  double ready = 0;
  std::optional<double> finish;
};

struct RankState {
  const Program* program = nullptr;
  parallel::Liveness live;
  std::vector<std::optional<CollectiveCall>> calls;  // per instruction
  std::vector<double> finish;                        // per instruction (< 0: not yet)
  std::vector<double> submitted;                     // engine collectives: when the main thread reached them
  std::vector<bool> posted;
  std::vector<int> engine;  // the engine's collectives, in order
  size_t pc = 0, engine_next = 0;
  double t = 0, engine_t = 0;
  double busy = 0, last_compute = 0, receive_wait = 0;
};

class Replay {
 public:
  explicit Replay(const SimulationRequest& request);
  Simulation run();

 private:
  void prepare(int rank);
  std::optional<CollectiveCall> call_of(const Program& p, const Instr& instr) const;
  double activation_bytes(const TensorSpec& spec) const {
    return (spec.dtype == DType::f32 ? activation_scale_ : 1.0) * static_cast<double>(spec.bytes());
  }
  LinkClass link_of(const std::vector<int>& members) const;
  double free_from(int rank, LinkClass link) const;
  void event(int rank, int instr, const std::string& lane, double start, double duration, int64_t sequence = -1);
  std::optional<double> join(int rank, int i, double ready);
  void complete(const CollectiveCall& call, Rendezvous& rv);
  bool advance_main(int rank);
  // The main thread's time for one instruction from `start`; nullopt while it waits.
  std::optional<double> main_instruction(int rank, const Instr& instr, double start);
  void send(int rank, const Instr& instr, const parallel::Send& send, double start);
  bool advance_engine(int rank);
  void check_finished() const;
  void summarize();

  const SimulationRequest& request_;
  const std::vector<Program>& programs_;
  const ClusterSpec& cluster_;
  const CostEstimator& estimator_;
  const int ranks_;
  double weight_ = 1;  // mesh ranks each replayed rank stands for
  // Activations are float32 in the graph; mixed precision keeps them in the compute dtype.
  double activation_scale_ = 1;
  std::map<int, int> replayed_;  // mesh rank -> replayed index
  std::vector<RankState> state_;
  // Links are shared: a collective holds each member's link of its class
  // from start to finish and waits until it is free; a message goes out at
  // once and holds its sender's link for its time.
  std::map<std::pair<int, LinkClass>, double> link_free_;  // (replayed rank, link class) -> free from
  std::map<std::pair<std::string, int64_t>, Rendezvous> rendezvous_;
  std::map<std::tuple<int, int, uint32_t>, double> arrivals_;  // (from, to, tag) -> arrival
  Simulation out_;
};

Replay::Replay(const SimulationRequest& request)
    : request_(request),
      programs_(*request.programs),
      cluster_(*request.cluster),
      estimator_(*request.estimator),
      ranks_(static_cast<int>(request.programs->size())) {
  // A symmetric replay stands for mesh_ranks / ranks ranks each.
  weight_ = static_cast<double>(programs_.front().strategy.mesh.ranks()) / ranks_;
  activation_scale_ = static_cast<double>(dtype_size(request.compute)) / static_cast<double>(dtype_size(DType::f32));
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
  const size_t n = p.instrs.size();
  s.calls.resize(n);
  s.finish.assign(n, -1);
  s.submitted.assign(n, -1);
  s.posted.assign(n, false);
  for (size_t i = 0; i < n; ++i) {
    s.calls[i] = call_of(p, p.instrs[i]);
    if (s.calls[i] && s.calls[i]->engine) s.engine.push_back(static_cast<int>(i));
  }
}

std::optional<CollectiveCall> Replay::call_of(const Program& p, const Instr& instr) const {
  if (instr.group < 0) return std::nullopt;
  CollectiveCall call{.group = &p.groups[static_cast<size_t>(instr.group)],
                      .wire = instr.wire,
                      .sequence = instr.sequence,
                      .engine = request_.overlap && instr.lane.kind == parallel::Lane::Kind::progress};
  if (const auto* c = std::get_if<parallel::Collective>(&instr.op)) {
    call.kind = c->kind;
    call.codec = c->codec;
    call.rows = static_cast<double>(c->codec_rows);
    call.cols = static_cast<double>(c->codec_cols);
    call.bytes = region_bytes(c->kind == comm::Collective::allgather ? c->output : c->input);
    call.axis = c->axis;
    return call;
  }
  const auto* rs = std::get_if<parallel::Reshard>(&instr.op);
  if (rs == nullptr) return std::nullopt;
  const Graph& g = p.graph_of(instr.micro_batch);
  const Node& node = g.nodes()[static_cast<size_t>(rs->node)];
  call.kind = *parallel::collective_of(parallel::resharding(rs->from, rs->to));
  call.bytes = std::max(activation_bytes(g.spec(node.inputs.front())), activation_bytes(g.spec(node.outputs.front())));
  // Mixed precision moves the activations at the compute dtype's width.
  call.wire.intra_node = std::llround(activation_scale_ * static_cast<double>(call.wire.intra_node));
  call.wire.inter_node = std::llround(activation_scale_ * static_cast<double>(call.wire.inter_node));
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

void Replay::event(int rank, int instr, const std::string& lane, double start, double duration, int64_t sequence) {
  if (!request_.trace) return;
  const Program& p = programs_[static_cast<size_t>(rank)];
  const Instr& in = p.instrs[static_cast<size_t>(instr)];
  std::string name = in.name;
  if (const auto* c = std::get_if<parallel::Compute>(&in.op)) {
    const Node& node = p.graph_of(in.micro_batch).nodes()[static_cast<size_t>(c->node)];
    name = fmt::format("{} ({})", node.name, node.op());
  }
  if (name.empty()) name = p.str(static_cast<size_t>(instr)).substr(0, 60);
  out_.trace.push_back({p.rank, lane, std::move(name), start, duration, instr, sequence});
}

// Joins rank's instruction to its collective at `ready`; its finish once every member has.
std::optional<double> Replay::join(int rank, int i, double ready) {
  RankState& s = state_[static_cast<size_t>(rank)];
  const CollectiveCall& call = *s.calls[static_cast<size_t>(i)];
  Rendezvous& rv = rendezvous_[{call.group->key, call.sequence}];
  if (s.posted[static_cast<size_t>(i)]) return rv.finish;
  s.posted[static_cast<size_t>(i)] = true;
  rv.posted.push_back({rank, i});
  rv.ready = std::max(rv.ready, ready);
  size_t members = 0;
  for (int m : call.group->ranks) members += replayed_.count(m);
  if (rv.posted.size() == members) complete(call, rv);
  return rv.finish;
}

// Every replayed member has posted: the collective's time, links and bytes.
void Replay::complete(const CollectiveCall& call, Rendezvous& rv) {
  const LinkClass link = link_of(call.group->ranks);
  const int p = static_cast<int>(call.group->ranks.size());
  const double seconds = call.codec.lossy() ? compressed_allreduce_seconds(estimator_, call, p, link)
                                            : estimator_.collective_seconds(call.kind, call.bytes, p, link);
  double begin = rv.ready;
  for (const auto& [member, instr] : rv.posted) begin = std::max(begin, free_from(member, link));
  rv.finish = begin + seconds;
  const std::string lane =
      call.engine ? parallel::lane_name(programs_.front(), {.kind = parallel::Lane::Kind::progress, .axis = call.axis})
                  : "compute";
  for (const auto& [member, instr] : rv.posted) {
    link_free_[{member, link}] = *rv.finish;
    count_wire(out_.bytes_sent, state_[static_cast<size_t>(member)].calls[static_cast<size_t>(instr)]->wire, link,
               weight_);
    event(member, instr, lane, begin, *rv.finish - begin, call.sequence);
  }
}

// Runs the main thread of `rank` one instruction on; true if it moved.
bool Replay::advance_main(int rank) {
  RankState& s = state_[static_cast<size_t>(rank)];
  const Program& p = *s.program;
  if (s.pc >= p.instrs.size()) return false;
  const Instr& instr = p.instrs[s.pc];
  double start = s.t;
  if (!std::holds_alternative<parallel::Free>(instr.op))
    for (int dep : instr.after) {
      if (s.finish[static_cast<size_t>(dep)] < 0) return false;
      start = std::max(start, s.finish[static_cast<size_t>(dep)]);
    }
  if (s.calls[s.pc] && s.calls[s.pc]->engine) {
    s.submitted[s.pc] = start;  // queued on the progress lane; the main thread goes on
    s.t = start;
    ++s.pc;
    return true;
  }
  const std::optional<double> end = main_instruction(rank, instr, start);
  if (!end) return false;
  s.finish[s.pc] = *end;
  s.t = *end;
  ++s.pc;
  return true;
}

std::optional<double> Replay::main_instruction(int rank, const Instr& instr, double start) {
  RankState& s = state_[static_cast<size_t>(rank)];
  const Program& p = *s.program;
  const int i = static_cast<int>(s.pc);
  auto bytes_of = [](const std::vector<parallel::Region>& regions) {
    double bytes = 0;
    for (const parallel::Region& r : regions) bytes += region_bytes(r);
    return bytes;
  };
  if (const auto* c = std::get_if<parallel::Compute>(&instr.op)) {
    const Graph& g = p.graph_of(instr.micro_batch);
    const Node& node = g.nodes()[static_cast<size_t>(c->node)];
    const double end = start + estimator_.compute_seconds(g, node);
    std::vector<TensorSpec> in, o;
    for (ValueId v : node.inputs) in.push_back(g.spec(v));
    for (ValueId v : node.outputs) o.push_back(g.spec(v));
    out_.flops += weight_ * (node.def->cost ? node.def->cost(in, o, node.attrs).flops : 0);
    s.busy += end - start;
    s.last_compute = end;
    event(rank, i, "compute", start, end - start);
    return end;
  }
  if (const auto* a = std::get_if<parallel::Accumulate>(&instr.op))
    return start + estimator_.memory_seconds(3 * region_bytes(a->into));
  if (const auto* nm = std::get_if<parallel::Norm>(&instr.op))
    return start + estimator_.memory_seconds(bytes_of(nm->gradients));
  if (const auto* f = std::get_if<parallel::Finite>(&instr.op))
    return start + estimator_.memory_seconds(region_bytes(f->gradient));
  if (const auto* cl = std::get_if<parallel::Clip>(&instr.op))
    return start + estimator_.memory_seconds(2 * bytes_of(cl->gradients));
  if (const auto* u = std::get_if<parallel::Update>(&instr.op))  // read the gradient, the parameter and each
    // state slot; write the parameter and the slots
    return start + estimator_.memory_seconds((3 + 2.0 * request_.optimizer_slots) * region_bytes(u->gradient));
  if (const auto* sent = std::get_if<parallel::Send>(&instr.op)) {
    send(rank, instr, *sent, start);
    return start;
  }
  if (const auto* recv = std::get_if<parallel::Recv>(&instr.op)) {
    std::vector<int> coords = p.coords;
    coords[static_cast<size_t>(recv->axis)] = recv->peer;
    auto it = arrivals_.find({p.strategy.mesh.rank_of(coords), p.rank, recv->tag});
    if (it == arrivals_.end()) return std::nullopt;
    const double end = std::max(start, it->second);
    s.receive_wait += end - start;
    event(rank, i, parallel::lane_name(p, instr.lane), start, end - start);
    return end;
  }
  if (s.calls[s.pc]) return join(rank, i, start);
  return start;
}

// A message goes out at once (small, latency-bound, it cuts in) and holds
// the link for its time: a collective after it starts later.
void Replay::send(int rank, const Instr& instr, const parallel::Send& send, double start) {
  const Program& p = *state_[static_cast<size_t>(rank)].program;
  std::vector<int> coords = p.coords;
  coords[static_cast<size_t>(send.axis)] = send.peer;
  const int to = p.strategy.mesh.rank_of(coords);
  // The stamped bytes, at the compute dtype's width (mixed precision).
  const TensorSpec& spec = p.graph_of(instr.micro_batch).spec(send.value);
  const double bytes = (spec.dtype == DType::f32 ? activation_scale_ : 1.0) * static_cast<double>(instr.wire.total());
  const LinkClass link = cluster_.link_between(p.rank, to);
  const double seconds = estimator_.transfer_seconds(bytes, link);
  arrivals_[{p.rank, to, send.tag}] = start + seconds;
  link_free_[{rank, link}] = std::max(free_from(rank, link), start) + seconds;
  out_.bytes_sent[link] += weight_ * bytes;
}

bool Replay::advance_engine(int rank) {
  RankState& s = state_[static_cast<size_t>(rank)];
  if (s.engine_next >= s.engine.size()) return false;
  const int i = s.engine[s.engine_next];
  if (s.submitted[static_cast<size_t>(i)] < 0) return false;
  const std::optional<double> done = join(rank, i, std::max(s.engine_t, s.submitted[static_cast<size_t>(i)]));
  if (!done) return false;
  s.engine_t = *done;
  s.finish[static_cast<size_t>(i)] = *done;
  ++s.engine_next;
  return true;
}

Simulation Replay::run() {
  // Lanes move in the order of their clocks, one instruction at a time,
  // so what holds a link is decided in time order: 2r is rank r's main
  // thread, 2r + 1 its progress lane.
  std::vector<std::pair<double, int>> order;
  int64_t moves = 0;
  for (bool moved = true; moved; ++moves) {
    if (request_.deadline && moves % 4096 == 0) request_.deadline->check();
    moved = false;
    order.clear();
    for (int r = 0; r < ranks_; ++r) {
      const RankState& s = state_[static_cast<size_t>(r)];
      if (s.pc < s.program->instrs.size()) order.push_back({s.t, 2 * r});
      if (s.engine_next < s.engine.size()) order.push_back({s.engine_t, 2 * r + 1});
    }
    std::sort(order.begin(), order.end());
    for (const auto& [clock, lane] : order)
      if ((lane % 2 ? advance_engine(lane / 2) : advance_main(lane / 2))) {
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
    if (s.pc < s.program->instrs.size())
      stuck += fmt::format("\n  rank {} at {}", r, s.program->str(s.pc));
    else if (s.engine_next < s.engine.size())
      stuck += fmt::format("\n  rank {}'s progress lane at {}", r,
                           s.program->str(static_cast<size_t>(s.engine[s.engine_next])));
  }
  if (!stuck.empty()) fail("simulate: the step cannot finish; waiting forever:{}", stuck);
}

void Replay::summarize() {
  // The bubble: every rank's idle time until the last compute of the step, over ranks x that span.
  double busy = 0, span = 0;
  for (const RankState& s : state_) {
    out_.step_seconds = std::max({out_.step_seconds, s.t, s.engine_t});
    out_.busy_seconds.push_back(s.busy);
    out_.compute_span.push_back(s.last_compute);
    out_.receive_wait.push_back(s.receive_wait);
    busy += s.busy;
    span = std::max(span, s.last_compute);
  }
  out_.bubble_fraction = span > 0 ? 1 - busy / (span * ranks_) : 0;
  // Memory, in the executor's allocation order (plan/memory.h).
  for (const RankState& s : state_) {
    const ProgramMemory m = program_memory(*s.program, s.live, request_.optimizer_slots, request_.compute);
    out_.peak_bytes.push_back(m.peak_bytes);
    out_.activation_peak_bytes.push_back(m.activation_peak_bytes);
    out_.stash_bytes.push_back(m.stash_bytes);
  }
}

}  // namespace

Simulation replay(const SimulationRequest& request) { return Replay(request).run(); }

}  // namespace px::plan
