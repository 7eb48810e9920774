#include "plan/simulate.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <optional>

#include "core/error.h"
#include "graph/op.h"
#include "parallel/lower/liveness.h"
#include "plan/memory.h"
#include "parallel/lower/reshard.h"

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

}  // namespace

std::vector<parallel::Program> lower_all(const parallel::LowerRequest& request, const parallel::Strategy& strategy) {
  std::vector<parallel::Program> programs;
  for (int r = 0; r < strategy.mesh.ranks(); ++r) programs.push_back(parallel::lower(request, strategy, r));
  return programs;
}

std::vector<parallel::Program> lower_representatives(const parallel::LowerRequest& request,
                                                     const parallel::Strategy& strategy, const Deadline* deadline) {
  std::vector<parallel::Program> programs;
  const parallel::DeviceMesh& mesh = strategy.mesh;
  const int pipeline_axis = strategy.pipeline_ranks() > 1 ? mesh.axis(strategy.pipeline.axis) : -1;
  for (int stage = 0; stage < strategy.pipeline_ranks(); ++stage) {
    if (deadline) deadline->check();
    std::vector<int> coords(mesh.axes().size(), 0);
    if (pipeline_axis >= 0) coords[static_cast<size_t>(pipeline_axis)] = stage;
    programs.push_back(parallel::lower(request, strategy, mesh.rank_of(coords)));
  }
  return programs;
}

Simulation simulate_sharing_cores(SimulationRequest request, const ProfiledEstimator::Options& options) {
  const ClusterSpec& cluster = *request.cluster;
  if (!cluster.profile) {
    if (request.estimator) return simulate(request);
    const RooflineEstimator roofline(cluster, request.compute);
    request.estimator = &roofline;
    return simulate(request);
  }
  const int mesh_ranks = request.programs->front().strategy.mesh.ranks();
  const double weight = static_cast<double>(mesh_ranks) / static_cast<double>(request.programs->size());
  ProfiledEstimator::Options sharing = options;
  sharing.ranks = mesh_ranks;
  Simulation sim;
  for (int round = 0; round < 4; ++round) {
    const ProfiledEstimator estimator(cluster, sharing);
    request.estimator = &estimator;
    sim = simulate(request);
    double waiting = 0;
    for (double w : sim.receive_wait) waiting += weight * w;
    const double computing =
        sim.step_seconds > 0 ? std::clamp(mesh_ranks - waiting / sim.step_seconds, 1.0, static_cast<double>(mesh_ranks))
                             : 1;
    if (std::abs(computing - sharing.ranks) < 0.02) break;
    sharing.ranks = computing;
  }
  return sim;
}

Simulation simulate(const SimulationRequest& request) {
  PX_CHECK(request.programs && request.cluster && request.estimator, "simulate: incomplete request");
  const std::vector<Program>& programs = *request.programs;
  const ClusterSpec& cluster = *request.cluster;
  const CostEstimator& estimator = *request.estimator;
  const int ranks = static_cast<int>(programs.size());  // replayed
  PX_CHECK_GE(ranks, 1);
  const int mesh_ranks = programs.front().strategy.mesh.ranks();
  if (mesh_ranks > cluster.devices())
    fail("simulate: mesh {} has {} ranks, cluster '{}' has {} devices ({} nodes x {})",
         programs.front().strategy.mesh.str(), mesh_ranks, cluster.name, cluster.devices(), cluster.nodes,
         cluster.devices_per_node);
  // Replayed rank -> its state; a symmetric replay stands for mesh_ranks / ranks ranks each.
  std::map<int, int> replayed;
  for (int i = 0; i < ranks; ++i) replayed[programs[static_cast<size_t>(i)].rank] = i;
  const double weight = static_cast<double>(mesh_ranks) / ranks;
  auto link_of = [&](const std::vector<int>& members) {
    for (int r : members)
      if (cluster.node_of(r) != cluster.node_of(members.front())) return LinkClass::inter_node;
    return LinkClass::intra_node;
  };

  // Activations are float32 in the graph; mixed precision keeps them in the compute dtype.
  const double activation_scale =
      static_cast<double>(dtype_size(request.compute)) / static_cast<double>(dtype_size(DType::f32));
  auto activation_bytes = [&](const TensorSpec& spec) {
    return spec.dtype == DType::f32 ? activation_scale * static_cast<double>(spec.bytes()) : static_cast<double>(spec.bytes());
  };

  Simulation out;
  std::vector<RankState> state(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    if (request.deadline) request.deadline->check();
    RankState& s = state[static_cast<size_t>(r)];
    const Program& p = programs[static_cast<size_t>(r)];
    s.program = &p;
    s.live = parallel::liveness(p);
    const size_t n = p.instrs.size();
    s.calls.resize(n);
    s.finish.assign(n, -1);
    s.submitted.assign(n, -1);
    s.posted.assign(n, false);
    for (size_t i = 0; i < n; ++i) {
      const Instr& instr = p.instrs[i];
      if (instr.group < 0) continue;
      CollectiveCall call{.group = &p.groups[static_cast<size_t>(instr.group)],
                          .wire = instr.wire,
                          .sequence = instr.sequence,
                          .engine = request.overlap && instr.lane.kind == parallel::Lane::Kind::progress};
      if (const auto* c = std::get_if<parallel::Collective>(&instr.op)) {
        call.kind = c->kind;
        call.codec = c->codec;
        call.rows = static_cast<double>(c->codec_rows);
        call.cols = static_cast<double>(c->codec_cols);
        call.bytes = region_bytes(c->kind == comm::Collective::allgather ? c->output : c->input);
        call.axis = c->axis;
      } else if (const auto* rs = std::get_if<parallel::Reshard>(&instr.op)) {
        const Graph& g = p.graph_of(instr.micro_batch);
        const Node& node = g.nodes()[static_cast<size_t>(rs->node)];
        call.kind = *parallel::collective_of(parallel::resharding(rs->from, rs->to));
        call.bytes = std::max(activation_bytes(g.spec(node.inputs.front())), activation_bytes(g.spec(node.outputs.front())));
        // Mixed precision moves the activations at the compute dtype's width.
        call.wire.intra_node = std::llround(activation_scale * static_cast<double>(call.wire.intra_node));
        call.wire.inter_node = std::llround(activation_scale * static_cast<double>(call.wire.inter_node));
        call.axis = rs->axis;
      } else {
        continue;
      }
      if (call.engine) s.engine.push_back(static_cast<int>(i));
      s.calls[i] = std::move(call);
    }
  }

  // Links are shared: a collective holds each member's link of its class
  // from start to finish and waits until it is free; a message goes out at
  // once and holds its sender's link for its time.
  std::map<std::pair<int, LinkClass>, double> link_free;  // (replayed rank, link class) -> free from
  auto free_from = [&](int rank, LinkClass link) {
    auto it = link_free.find({rank, link});
    return it == link_free.end() ? 0.0 : it->second;
  };
  std::map<std::pair<std::string, int64_t>, Rendezvous> rendezvous;
  std::map<std::tuple<int, int, uint32_t>, double> arrivals;  // (from, to, tag) -> arrival
  auto event = [&](int rank, int instr, const std::string& lane, double start, double duration,
                   int64_t sequence = -1) {
    if (!request.trace) return;
    const Program& p = programs[static_cast<size_t>(rank)];
    const Instr& in = p.instrs[static_cast<size_t>(instr)];
    std::string name = in.name;
    if (const auto* c = std::get_if<parallel::Compute>(&in.op)) {
      const Node& node = p.graph_of(in.micro_batch).nodes()[static_cast<size_t>(c->node)];
      name = fmt::format("{} ({})", node.name, node.op());
    }
    if (name.empty()) name = p.str(static_cast<size_t>(instr)).substr(0, 60);
    out.trace.push_back({p.rank, lane, std::move(name), start, duration, instr, sequence});
  };
  // Joins rank's instruction to its collective at `ready`; its finish once every member has.
  auto join = [&](int rank, int i, double ready) -> std::optional<double> {
    RankState& s = state[static_cast<size_t>(rank)];
    const CollectiveCall& call = *s.calls[static_cast<size_t>(i)];
    Rendezvous& rv = rendezvous[{call.group->key, call.sequence}];
    if (!s.posted[static_cast<size_t>(i)]) {
      s.posted[static_cast<size_t>(i)] = true;
      rv.posted.push_back({rank, i});
      rv.ready = std::max(rv.ready, ready);
      size_t members = 0;
      for (int m : call.group->ranks) members += replayed.count(m);
      if (rv.posted.size() == members) {
        const LinkClass link = link_of(call.group->ranks);
        const int p = static_cast<int>(call.group->ranks.size());
        const double seconds = call.codec.lossy() ? compressed_allreduce_seconds(estimator, call, p, link)
                                                  : estimator.collective_seconds(call.kind, call.bytes, p, link);
        double begin = rv.ready;
        for (const auto& [member, instr] : rv.posted) begin = std::max(begin, free_from(member, link));
        rv.finish = begin + seconds;
        for (const auto& [member, instr] : rv.posted) link_free[{member, link}] = *rv.finish;
        for (const auto& [member, instr] : rv.posted)
          count_wire(out.bytes_sent, state[static_cast<size_t>(member)].calls[static_cast<size_t>(instr)]->wire, link,
                     weight);
        const Program& first = programs.front();
        const std::string lane =
            call.engine ? parallel::lane_name(first, {.kind = parallel::Lane::Kind::progress, .axis = call.axis})
                        : "compute";
        for (const auto& [member, instr] : rv.posted)
          event(member, instr, lane, begin, *rv.finish - begin, call.sequence);
      }
    }
    return rv.finish;
  };

  // Runs the main thread of `rank` one instruction on; true if it moved.
  auto advance_main = [&](int rank) {
    RankState& s = state[static_cast<size_t>(rank)];
    const Program& p = *s.program;
    bool moved = false;
    while (s.pc < p.instrs.size() && !moved) {
      const int i = static_cast<int>(s.pc);
      const Instr& instr = p.instrs[s.pc];
      double start = s.t;
      const bool waits = !std::holds_alternative<parallel::Free>(instr.op);
      for (int dep : instr.after) {
        if (!waits) break;
        if (s.finish[static_cast<size_t>(dep)] < 0) return moved;
        start = std::max(start, s.finish[static_cast<size_t>(dep)]);
      }
      double end = start;
      const int slots = request.optimizer_slots;
      if (const auto* c = std::get_if<parallel::Compute>(&instr.op)) {
        const Graph& g = p.graph_of(instr.micro_batch);
        const Node& node = g.nodes()[static_cast<size_t>(c->node)];
        end = start + estimator.compute_seconds(g, node);
        std::vector<TensorSpec> in, o;
        for (ValueId v : node.inputs) in.push_back(g.spec(v));
        for (ValueId v : node.outputs) o.push_back(g.spec(v));
        out.flops += weight * (node.def->cost ? node.def->cost(in, o, node.attrs).flops : 0);
        s.busy += end - start;
        s.last_compute = end;
        event(rank, i, "compute", start, end - start);
      } else if (const auto* a = std::get_if<parallel::Accumulate>(&instr.op)) {
        end = start + estimator.memory_seconds(3 * region_bytes(a->into));
      } else if (const auto* nm = std::get_if<parallel::Norm>(&instr.op)) {
        double bytes = 0;
        for (const parallel::Region& r : nm->gradients) bytes += region_bytes(r);
        end = start + estimator.memory_seconds(bytes);
      } else if (const auto* cl = std::get_if<parallel::Clip>(&instr.op)) {
        double bytes = 0;
        for (const parallel::Region& r : cl->gradients) bytes += region_bytes(r);
        end = start + estimator.memory_seconds(2 * bytes);
      } else if (const auto* u = std::get_if<parallel::Update>(&instr.op)) {
        // Read the gradient, the parameter and each state slot; write the parameter and the slots.
        end = start + estimator.memory_seconds((3 + 2.0 * slots) * region_bytes(u->gradient));
      } else if (const auto* send = std::get_if<parallel::Send>(&instr.op)) {
        std::vector<int> coords = p.coords;
        coords[static_cast<size_t>(send->axis)] = send->peer;
        const int to = p.strategy.mesh.rank_of(coords);
        // The stamped bytes, at the compute dtype's width (mixed precision).
        const TensorSpec& spec = p.graph_of(instr.micro_batch).spec(send->value);
        const double bytes = (spec.dtype == DType::f32 ? activation_scale : 1.0) * static_cast<double>(instr.wire.total());
        const LinkClass link = cluster.link_between(p.rank, to);
        // A message goes out at once (small, latency-bound, it cuts in) and
        // holds the link for its time: a collective after it starts later.
        const double seconds = estimator.transfer_seconds(bytes, link);
        arrivals[{p.rank, to, send->tag}] = start + seconds;
        link_free[{rank, link}] = std::max(free_from(rank, link), start) + seconds;
        out.bytes_sent[link] += weight * bytes;
      } else if (const auto* recv = std::get_if<parallel::Recv>(&instr.op)) {
        std::vector<int> coords = p.coords;
        coords[static_cast<size_t>(recv->axis)] = recv->peer;
        auto it = arrivals.find({p.strategy.mesh.rank_of(coords), p.rank, recv->tag});
        if (it == arrivals.end()) return moved;
        end = std::max(start, it->second);
        s.receive_wait += end - start;
        event(rank, i, parallel::lane_name(p, instr.lane), start, end - start);
      } else if (s.calls[s.pc]) {
        if (s.calls[s.pc]->engine) {
          s.submitted[s.pc] = start;  // queued on the progress stream; the main thread goes on
          s.t = start;
          ++s.pc;
          moved = true;
          continue;
        }
        const std::optional<double> done = join(rank, i, start);
        if (!done) return moved;
        end = *done;
      }
      s.finish[s.pc] = end;
      s.t = end;
      ++s.pc;
      moved = true;
    }
    return moved;
  };
  auto advance_engine = [&](int rank) {
    RankState& s = state[static_cast<size_t>(rank)];
    bool moved = false;
    while (s.engine_next < s.engine.size() && !moved) {
      const int i = s.engine[s.engine_next];
      if (s.submitted[static_cast<size_t>(i)] < 0) return moved;
      const std::optional<double> done = join(rank, i, std::max(s.engine_t, s.submitted[static_cast<size_t>(i)]));
      if (!done) return moved;
      s.engine_t = *done;
      s.finish[static_cast<size_t>(i)] = *done;
      ++s.engine_next;
      moved = true;
    }
    return moved;
  };

  // Streams move in the order of their clocks, one instruction at a time,
  // so what holds a link is decided in time order: 2r is rank r's main
  // thread, 2r + 1 its progress stream.
  std::vector<std::pair<double, int>> order;
  int64_t moves = 0;
  for (bool moved = true; moved; ++moves) {
    if (request.deadline && moves % 4096 == 0) request.deadline->check();
    moved = false;
    order.clear();
    for (int r = 0; r < ranks; ++r) {
      const RankState& s = state[static_cast<size_t>(r)];
      if (s.pc < s.program->instrs.size()) order.push_back({s.t, 2 * r});
      if (s.engine_next < s.engine.size()) order.push_back({s.engine_t, 2 * r + 1});
    }
    std::sort(order.begin(), order.end());
    for (const auto& [clock, stream] : order)
      if ((stream % 2 ? advance_engine(stream / 2) : advance_main(stream / 2))) {
        moved = true;
        break;
      }
  }
  std::string stuck;
  for (int r = 0; r < ranks; ++r) {
    const RankState& s = state[static_cast<size_t>(r)];
    if (s.pc < s.program->instrs.size())
      stuck += fmt::format("\n  rank {} at {}", r, s.program->str(s.pc));
    else if (s.engine_next < s.engine.size())
      stuck += fmt::format("\n  rank {}'s progress stream at {}", r,
                           s.program->str(static_cast<size_t>(s.engine[s.engine_next])));
  }
  if (!stuck.empty()) fail("simulate: the step cannot finish; waiting forever:{}", stuck);

  // The bubble: every rank's idle time until the last compute of the step, over ranks x that span.
  double busy = 0, span = 0;
  for (int r = 0; r < ranks; ++r) {
    const RankState& s = state[static_cast<size_t>(r)];
    out.step_seconds = std::max({out.step_seconds, s.t, s.engine_t});
    out.busy_seconds.push_back(s.busy);
    out.compute_span.push_back(s.last_compute);
    out.receive_wait.push_back(s.receive_wait);
    busy += s.busy;
    span = std::max(span, s.last_compute);
  }
  out.bubble_fraction = span > 0 ? 1 - busy / (span * ranks) : 0;

  // Memory, in the executor's allocation order (plan/memory.h).
  for (int r = 0; r < ranks; ++r) {
    const RankState& s = state[static_cast<size_t>(r)];
    const ProgramMemory m = program_memory(*s.program, s.live, request.optimizer_slots, request.compute);
    out.peak_bytes.push_back(m.peak_bytes);
    out.activation_peak_bytes.push_back(m.activation_peak_bytes);
    out.stash_bytes.push_back(m.stash_bytes);
  }
  return out;
}

}  // namespace px::plan
