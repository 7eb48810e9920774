// schedule: the step's instructions up to the reduced gradients.
//
// The phases plan_work chose, in order: a compute phase's nodes of the
// local graph (a Compute each, a Reshard for a reshard node, a Route for
// an expert exchange), a transfer phase's Sends or Recvs. Two phases
// plan_work interleaved (Phase::interleaved_with_next) go in runs, one
// micro-batch's up to its next Route, then the other's: those Routes are
// overlapped (Route::overlapped), and their outputs' readers wait for them. Each gradient part is accumulated into its bucket
// as it is produced; a bucket's gradient collective (the transition's:
// allreduce P -> B, or reduce-scatter P -> S into the shard) follows its
// last gradient part of the step (ZeRO-2/3: of every micro-batch, each
// adding into the shard); compressed, after a Finite of the bucket and the
// max allreduce that agrees on it. A bucket of a parameter pipeline stages share is
// first summed over those stages, at the end of the step (every stage is
// done with its schedule by then, so the sum cannot wait on a transfer).
// ZeRO-3 gathers a parameter bucket (S -> B) before its first use in each
// phase, one bucket ahead. A micro-batch where this rank has no rows
// computes and transfers nothing but runs the same collectives (its
// gradient contribution is zero).
#include <algorithm>
#include <map>

#include "comm/collectives.h"
#include "core/error.h"
#include "parallel/lower/passes.h"

namespace px::parallel::passes {
namespace {

comm::Collective collective_for(const Transition& t) {
  const std::optional<comm::Collective> kind = collective_of(t.how);
  PX_CHECK(kind.has_value(), "transition {} -> {} of value {} runs no collective", t.from.str(), t.to.str(), t.value);
  return *kind;
}

// The next float of the program's flags buffer (made on first use).
Region next_flag(Program& p) {
  auto it = std::find_if(p.buffers.begin(), p.buffers.end(),
                         [](const Buffer& b) { return b.kind == Buffer::Kind::flags; });
  if (it == p.buffers.end()) {
    add_buffer(p, {.kind = Buffer::Kind::flags, .name = "flags", .count = 0, .persistent = true});
    it = p.buffers.end() - 1;
  }
  return {static_cast<int>(it - p.buffers.begin()), it->count++, 1};
}

// A bucket's gradient collective after `after` (its last accumulation).
// Compressed, the ranks first agree whether the gradient is finite: a
// non-finite gradient would poison the error-feedback state for good, and
// compressed sums need not carry a NaN (top-k and the threshold drop it).
// The Finite and its max allreduce go before the collective on its lane,
// so they cost what they cost in the simulator too.
void emit_gradient_reduction(const Context& c, Program& p, int b, int m, std::vector<int> waits) {
  const BucketLayout& bucket = p.buckets[static_cast<size_t>(b)];
  const ParamLayout& param = p.params[static_cast<size_t>(bucket.members.front())];
  const Transition& t = c.transition(Transition::Site::gradient, param.grad);
  Collective reduce{.kind = collective_for(t),
                    .axis = c.data_axis,
                    .input = {bucket.grad_buffer, 0, bucket.count},
                    .expert_data = bucket.experts};
  // An expert bucket is reduced over the data axis alone: on one data rank
  // there is nothing to sum (a reduce-scatter still copies into the shard).
  if (bucket.experts && c.strategy.data_ranks() == 1 && reduce.kind == comm::Collective::allreduce) return;
  if (reduce.kind == comm::Collective::reduce_scatter) {
    reduce.output = {p.grad_shard_buffer, bucket.shard_offset, bucket.block_count};
    reduce.accumulate = c.zero_stage >= 2 && m > 0;  // ZeRO-2/3 reduce every micro-batch into the shard
  }
  // Compressed: one gradient a bucket, seen as (first dim, the rest);
  // vectors (a fraction of a percent of the bytes) go uncompressed, as
  // DGC and PowerSGD do: top-k of a 10-element bias would starve it.
  const std::string name = fmt::format("grad bucket {}", b);
  // P3: sliced, the layer the next forward needs first first; otherwise in
  // the order backward completes the buckets.
  const int64_t slice_bytes = c.strategy.lowering.p3_slice_bytes;
  const int priority = slice_bytes > 0 ? bucket.priority : 0;
  reduce.slice_bytes = slice_bytes;
  if (c.strategy.lowering.compression.lossy()) {
    const bool matrix = param.shape.rank() >= 2;
    if (matrix) reduce.codec = c.strategy.lowering.compression;
    reduce.momentum = c.strategy.lowering.local_momentum;
    reduce.codec_rows = matrix ? param.shape[0] : 1;
    reduce.codec_cols = param.shape.numel() / reduce.codec_rows;
    reduce.agreement = next_flag(p);
    const int check = emit(p, {.op = Finite{.gradient = reduce.input, .into = reduce.agreement},
                               .micro_batch = m,
                               .after = waits,
                               .name = name + " finite"});
    emit(p, {.op = Collective{.kind = comm::Collective::allreduce,
                              .axis = c.data_axis,
                              .op = comm::Reduction::max,
                              .input = reduce.agreement},
             .micro_batch = m,
             .priority = priority,
             .after = {check},
             .name = name + " finite on every rank"});
  }
  emit(p, {.op = reduce, .micro_batch = m, .priority = priority, .after = waits, .name = name});
}

}  // namespace

int emit(Program& program, Instr instr) {
  program.instrs.push_back(std::move(instr));
  return static_cast<int>(program.instrs.size() - 1);
}

namespace {

// The schedule pass's state over the phases: which parameter and bucket
// each value feeds, the gradient parts still to come, what was emitted last.
class Scheduler {
 public:
  Scheduler(const Context& c, Program& p);
  void run();

 private:
  void transfers(const Phase& phase);
  // ZeRO-3: the gathers a node's parameters need before it (one bucket ahead).
  struct Gathers {
    std::vector<int> gathered;  // per bucket: this phase's gather instruction
    std::vector<bool> used;     // per bucket: read by a node of this phase yet
    size_t next = 0;
  };
  // A compute phase being emitted: whole, or in runs that end at its
  // Routes when it is interleaved with another micro-batch's phase.
  struct PhaseRun {
    const Phase& phase;
    bool interleaved = false;
    Gathers gathers;
    size_t next = 0;  // its next node
  };
  PhaseRun start(const Phase& phase, bool interleaved);
  // Emits the phase's nodes up to the next Route (interleaved) or its end.
  void emit_nodes(PhaseRun& run);
  void end(const PhaseRun& run);
  // Two micro-batches' phases of the same nodes, a run of one then a run of
  // the other: a micro-batch's Route is in flight while the other computes.
  void interleaved_phases(const Phase& a, const Phase& b);
  bool routes(const Node& node) const {
    return c_.expert_axis >= 0 && (node.op() == "moe_dispatch" || node.op() == "moe_undispatch");
  }
  void gather_for(const Node& node, const Phase& phase, Gathers& g, Instr& compute);
  int emit_gather(int b, const Phase& phase, Gathers& g);
  void produced(ValueId out, int m, bool computes);
  void accumulate_part(ValueId out, int m, int param, bool computes);
  // Bucket b's gradient complete for micro-batch m (or the step): the
  // reductions over model axes its partial members need, then the data path's.
  void bucket_complete(int b, int m, int after);
  // Strategy::lowering.overlap_model_gradients: reshard nodes P -> B of a
  // gradient part along a model axis, left out; their partial input is
  // accumulated instead and reduced over the axis on its progress lane.
  void defer_model_reductions();
  std::vector<int> model_axis_reductions(int b, int m, int after);
  // A ring_shift split along an axis (context parallelism's ring): the
  // send of its input to the next rank as soon as that input is made
  // (backward's order would otherwise put it after the next block's
  // gradient), the receive of its output from the previous one before its
  // first reader, so what runs between overlaps the transfer.
  // exchange_axis: the axis, or -1 when none splits it (a local rotation).
  int exchange_axis(const Node& node) const;
  void exchange_blocks(const Node& node, int axis, int m);
  void send_when_made(ValueId value, int m);
  void receive_inputs(const Node& node, int m);
  void finish();

  const Context& c_;
  Program& p_;
  const bool multi_;                  // more than one data rank
  const bool reduce_every_micro_batch_;  // ZeRO-2/3: each micro-batch's buckets
  std::vector<int> param_of_, part_of_;  // per value: its program param / the param its gradient part feeds
  std::vector<int> shared_group_;        // per program param: the pipeline subgroup summing it
  std::vector<bool> deferred_node_;      // per graph node: a gradient reshard left out
  std::vector<int> partial_axis_;        // per program param: the model axis its gradient is a partial sum over (-1)
  std::vector<std::vector<int>> gather_order_;  // ZeRO-3, per kind of phase: buckets by first use
  // Gradient parts still to come per bucket: this step's, and per micro-batch.
  std::vector<int> missing_, last_accumulate_;
  std::vector<std::vector<int>> missing_of_micro_;
  std::vector<int> deferred_;  // shared buckets: reduced at the end of the step
  // Per micro-batch and program param: its gradient parts not made yet;
  // parts made but not accumulated (an earlier micro-batch's are to come).
  std::vector<std::vector<int>> parts_to_come_;
  struct HeldPart {
    ValueId value;
    int micro, param;
    bool computes;
  };
  std::vector<HeldPart> held_;
  int last_loss_ = -1;
  std::map<ValueId, Instr> pending_receives_;  // ring_shift outputs not read yet
  std::map<ValueId, const Node*> waiting_shifts_;  // this phase's ring_shifts, by their input, not sent yet
  std::map<int, uint32_t> shift_index_;         // ring_shift node -> its place among them (tags)
  // (micro-batch, value) -> the overlapped Route that makes it: its readers wait for it.
  std::map<std::pair<int, ValueId>, int> routed_;
};

Scheduler::Scheduler(const Context& c, Program& p)
    : c_(c),
      p_(p),
      multi_(c.data_size > 1),
      reduce_every_micro_batch_(c.zero_stage >= 2),
      param_of_(c.graph.values().size(), -1),
      part_of_(c.graph.values().size(), -1),
      shared_group_(p.params.size(), -1),
      deferred_node_(c.graph.nodes().size(), false),
      partial_axis_(p.params.size(), -1),
      gather_order_(2),
      missing_(p.buckets.size()),
      last_accumulate_(p.buckets.size(), -1) {
  for (size_t i = 0; i < p.params.size(); ++i) param_of_[static_cast<size_t>(p.params[i].value)] = static_cast<int>(i);
  for (const auto& [value, group] : c.work.shared)
    shared_group_[static_cast<size_t>(param_of_[static_cast<size_t>(value)])] = group;
  // Per bucket: gradient parts per micro-batch (all equal: the same nodes run).
  std::vector<int> parts_per_micro(p.buckets.size(), 0);
  for (const auto& [value, grad] : c.work.gradient_parts) {
    const int i = param_of_[static_cast<size_t>(c.grads[static_cast<size_t>(grad)].param)];
    PX_CHECK_GE(i, 0);
    part_of_[static_cast<size_t>(value)] = i;
    ++parts_per_micro[static_cast<size_t>(p.params[static_cast<size_t>(i)].bucket)];
  }
  if (c.strategy.lowering.overlap_model_gradients) defer_model_reductions();
  const size_t micro = p.micro_batches.size();
  std::vector<int> parts_per_param(p.params.size(), 0);
  for (int i : part_of_)
    if (i >= 0) ++parts_per_param[static_cast<size_t>(i)];
  parts_to_come_.assign(micro, parts_per_param);
  missing_of_micro_.assign(micro, parts_per_micro);
  for (size_t b = 0; b < p.buckets.size(); ++b) missing_[b] = parts_per_micro[b] * static_cast<int>(micro);
  if (p.param_shard_buffer < 0) return;
  for (const Phase& phase : c.work.phases)
    for (int n : phase.nodes) {
      std::vector<int>& order = gather_order_[phase.backward ? 1 : 0];
      for (ValueId in : c.graph.nodes()[static_cast<size_t>(n)].inputs)
        if (param_of_[static_cast<size_t>(in)] >= 0) {
          const int b = p.params[static_cast<size_t>(param_of_[static_cast<size_t>(in)])].bucket;
          if (std::find(order.begin(), order.end(), b) == order.end()) order.push_back(b);
        }
    }
}

void Scheduler::run() {
  const std::vector<Phase>& phases = c_.work.phases;
  for (size_t i = 0; i < phases.size(); ++i) {
    const Phase& phase = phases[i];
    if (phase.kind != Phase::Kind::compute) {
      transfers(phase);
    } else if (phase.interleaved_with_next) {
      PX_CHECK(i + 1 < phases.size() && phases[i + 1].nodes == phase.nodes, "phase {} interleaves with no twin", i);
      interleaved_phases(phase, phases[++i]);
    } else {
      PhaseRun whole = start(phase, false);
      emit_nodes(whole);
      end(whole);
    }
  }
  finish();
}

void Scheduler::transfers(const Phase& phase) {
  const int m = phase.micro;
  if (p_.micro_batches[static_cast<size_t>(m)].rows == 0) return;  // no rows: every stage skips the micro-batch alike
  const int axis = c_.work.pipeline_axis;
  for (size_t i = 0; i < phase.values.size(); ++i) {
    const ValueId v = phase.values[i];
    const DType dtype = c_.work.transfer_dtype[static_cast<size_t>(v)];
    const Operation op =
        phase.kind == Phase::Kind::send
            ? Operation{Send{.value = v, .axis = axis, .peer = phase.peer, .tag = phase.tags[i], .dtype = dtype}}
            : Operation{Recv{.value = v, .axis = axis, .peer = phase.peer, .tag = phase.tags[i], .dtype = dtype}};
    emit(p_, {.op = op, .micro_batch = m});
  }
}

Scheduler::PhaseRun Scheduler::start(const Phase& phase, bool interleaved) {
  waiting_shifts_.clear();
  for (int n : phase.nodes) {
    const Node& node = c_.graph.nodes()[static_cast<size_t>(n)];
    if (node.op() == "ring_shift" && exchange_axis(node) >= 0) waiting_shifts_[node.inputs.front()] = &node;
  }
  PX_CHECK(!interleaved || waiting_shifts_.empty(), "a context-parallel ring in interleaved micro-batches");
  return {.phase = phase,
          .interleaved = interleaved,
          .gathers = {.gathered = std::vector<int>(p_.buckets.size(), -1),
                      .used = std::vector<bool>(p_.buckets.size(), false)}};
}

void Scheduler::emit_nodes(PhaseRun& run) {
  const Phase& phase = run.phase;
  const int m = phase.micro;
  const bool computes = p_.micro_batches[static_cast<size_t>(m)].rows > 0;
  while (run.next < phase.nodes.size()) {
    const int n = phase.nodes[run.next++];
    const Node& node = c_.graph.nodes()[static_cast<size_t>(n)];
    if (computes) receive_inputs(node, m);
    if (const int axis = node.op() == "ring_shift" ? exchange_axis(node) : -1; axis >= 0) {
      send_when_made(node.inputs.front(), m);  // made before this phase: sent here
      for (ValueId out : node.outputs) produced(out, m, computes);
      continue;
    }
    if (deferred_node_[static_cast<size_t>(n)]) continue;  // its input was accumulated instead
    Instr compute{.op = Compute{n}, .micro_batch = m};
    if (routes(node))  // rows to their experts' ranks, or back
      compute.op = Route{.node = n, .axis = c_.expert_axis, .overlapped = run.interleaved};
    if (node.op() == "reshard") {
      // A placement change propagation inserted: the rule's collective on the value.
      compute.op = Reshard{.node = n,
                           .axis = static_cast<int>(node.attrs.get_int("axis")),
                           .from = placement_from_string(node.attrs.get_string("from")),
                           .to = placement_from_string(node.attrs.get_string("to"))};
    }
    if (p_.param_shard_buffer >= 0) gather_for(node, phase, run.gathers, compute);
    // What an overlapped Route makes is there once its job is done.
    for (ValueId in : node.inputs)
      if (auto it = routed_.find({m, in}); it != routed_.end()) compute.after.push_back(it->second);
    std::sort(compute.after.begin(), compute.after.end());
    compute.after.erase(std::unique(compute.after.begin(), compute.after.end()), compute.after.end());
    const bool overlapped = computes && run.interleaved && routes(node);
    const int id = computes ? emit(p_, std::move(compute)) : -1;
    if (overlapped)
      for (ValueId out : node.outputs) routed_[{m, out}] = id;
    for (ValueId out : node.outputs) {
      produced(out, m, computes);
      send_when_made(out, m);
    }
    if (run.interleaved && routes(node)) return;  // the other micro-batch's turn
  }
}

void Scheduler::end(const PhaseRun& run) {
  const int m = run.phase.micro;
  // A block no node of the phase read still arrives: the sender posted it.
  for (auto it = pending_receives_.begin(); it != pending_receives_.end();)
    if (it->second.micro_batch == m) {
      emit(p_, std::move(it->second));
      it = pending_receives_.erase(it);
    } else {
      ++it;
    }
}

void Scheduler::interleaved_phases(const Phase& a, const Phase& b) {
  PhaseRun first = start(a, true), second = start(b, true);
  while (first.next < a.nodes.size() || second.next < b.nodes.size()) {
    emit_nodes(first);
    emit_nodes(second);
  }
  end(first);
  end(second);
}

int Scheduler::exchange_axis(const Node& node) const {
  const AxisPlacements& placed = c_.placement.of_value[static_cast<size_t>(node.inputs.front())];
  for (size_t a = 0; a < placed.size(); ++a)
    if (placed[a] == Placement::S(1) && c_.strategy.mesh.axes()[a].size > 1) return static_cast<int>(a);
  return -1;
}

void Scheduler::send_when_made(ValueId value, int m) {
  auto it = waiting_shifts_.find(value);
  if (it == waiting_shifts_.end()) return;
  const Node& node = *it->second;
  waiting_shifts_.erase(it);
  exchange_blocks(node, exchange_axis(node), m);
}

void Scheduler::exchange_blocks(const Node& node, int axis, int m) {
  const ValueId in = node.inputs.front(), out = node.outputs.front();
  if (p_.micro_batches[static_cast<size_t>(m)].rows == 0) return;  // every rank of the axis skips it alike
  const int ranks = c_.strategy.mesh.axes()[static_cast<size_t>(axis)].size;
  const int me = c_.coords[static_cast<size_t>(axis)];
  const int step = static_cast<int>(node.attrs.get_int("step"));
  const int to = ((me + step) % ranks + ranks) % ranks, from = ((me - step) % ranks + ranks) % ranks;
  // Unique per micro-batch and shift: the axis' transfers take no other tags.
  const int shift = static_cast<int>(&node - c_.graph.nodes().data());
  auto [it, fresh] = shift_index_.emplace(shift, static_cast<uint32_t>(shift_index_.size()));
  const uint64_t tag = static_cast<uint64_t>(m) * (1u << 12) + it->second;
  if (it->second >= (1u << 12) || tag >= (1u << 20))
    fail("context parallelism: {} ring exchanges in {} micro-batches need more message tags than the {} available",
         shift_index_.size(), p_.micro_batches.size(), 1u << 20);
  emit(p_, {.op = Send{.value = in, .axis = axis, .peer = to, .tag = static_cast<uint32_t>(tag)}, .micro_batch = m,
            .name = node.name});
  pending_receives_[out] = {.op = Recv{.value = out, .axis = axis, .peer = from, .tag = static_cast<uint32_t>(tag)},
                            .micro_batch = m,
                            .name = node.name};
}

void Scheduler::receive_inputs(const Node& node, int m) {
  for (ValueId in : node.inputs) {
    auto it = pending_receives_.find(in);
    if (it == pending_receives_.end() || it->second.micro_batch != m) continue;
    emit(p_, std::move(it->second));
    pending_receives_.erase(it);
    send_when_made(in, m);  // received: passed on at once
  }
}

void Scheduler::gather_for(const Node& node, const Phase& phase, Gathers& g, Instr& compute) {
  const std::vector<int>& order = gather_order_[phase.backward ? 1 : 0];
  bool first_use = false;
  for (ValueId in : node.inputs) {
    if (param_of_[static_cast<size_t>(in)] < 0) continue;
    const int b = p_.params[static_cast<size_t>(param_of_[static_cast<size_t>(in)])].bucket;
    while (g.gathered[static_cast<size_t>(b)] < 0) emit_gather(order[g.next++], phase, g);
    first_use = first_use || !g.used[static_cast<size_t>(b)];
    g.used[static_cast<size_t>(b)] = true;
    compute.after.push_back(g.gathered[static_cast<size_t>(b)]);
  }
  // Entering a bucket, gather the next one: it arrives while this one is used.
  if (first_use && g.next < order.size()) emit_gather(order[g.next++], phase, g);
  std::sort(compute.after.begin(), compute.after.end());
  compute.after.erase(std::unique(compute.after.begin(), compute.after.end()), compute.after.end());
}

int Scheduler::emit_gather(int b, const Phase& phase, Gathers& g) {
  const BucketLayout& bucket = p_.buckets[static_cast<size_t>(b)];
  const Transition& t =
      c_.transition(Transition::Site::parameter_use, p_.params[static_cast<size_t>(bucket.members.front())].value);
  return g.gathered[static_cast<size_t>(b)] =
             emit(p_, {.op = Collective{.kind = collective_for(t),
                                        .axis = c_.data_axis,
                                        .input = {p_.param_shard_buffer, bucket.shard_offset, bucket.block_count},
                                        .output = {bucket.param_buffer, 0, bucket.count},
                                        .expert_data = bucket.experts},
                       .micro_batch = phase.micro,
                       .name = fmt::format("gather bucket {} ({})", b, phase.backward ? "backward" : "forward")});
}

// A value a node made: the loss or a gradient part accumulated, and a
// bucket's reduction once its last part of the step (or micro-batch) is in.
// A parameter's parts are added in micro-batch order, as one rank adds
// them, whatever the interleaving (a float sum depends on its order): a
// part of a micro-batch waits while an earlier one's parts of the same
// parameter are still to come (interleaved micro-batches, lower/pipeline.cc).
void Scheduler::produced(ValueId out, int m, bool computes) {
  if (out == c_.loss && computes)
    last_loss_ = emit(p_, {.op = Accumulate{out, {p_.loss_buffer, 0, 1}}, .micro_batch = m});
  const int i = part_of_[static_cast<size_t>(out)];
  if (i < 0) return;
  --parts_to_come_[static_cast<size_t>(m)][static_cast<size_t>(i)];
  held_.push_back({.value = out, .micro = m, .param = i, .computes = computes});
  // Every held part whose earlier micro-batches are done with its parameter,
  // in the order they were made (accumulating one readies no other).
  std::erase_if(held_, [this](const HeldPart& part) {
    for (int e = 0; e < part.micro; ++e)
      if (parts_to_come_[static_cast<size_t>(e)][static_cast<size_t>(part.param)] > 0) return false;
    accumulate_part(part.value, part.micro, part.param, part.computes);
    return true;
  });
}

void Scheduler::accumulate_part(ValueId out, int m, int i, bool computes) {
  const ParamLayout& param = p_.params[static_cast<size_t>(i)];
  const int b = param.bucket;
  const BucketLayout& bucket = p_.buckets[static_cast<size_t>(b)];
  if (computes)
    last_accumulate_[static_cast<size_t>(b)] =
        emit(p_, {.op = Accumulate{out, {bucket.grad_buffer, param.offset - bucket.offset, param.shape.numel()}},
                  .micro_batch = m});
  --missing_[static_cast<size_t>(b)];
  const bool complete = reduce_every_micro_batch_
                            ? --missing_of_micro_[static_cast<size_t>(m)][static_cast<size_t>(b)] == 0
                            : missing_[static_cast<size_t>(b)] == 0;
  if (!complete) return;
  if (shared_group_[static_cast<size_t>(i)] >= 0) {
    deferred_.push_back(b);
    return;
  }
  bucket_complete(b, m, last_accumulate_[static_cast<size_t>(b)]);
}

void Scheduler::bucket_complete(int b, int m, int after) {
  std::vector<int> waits = model_axis_reductions(b, m, after);
  if (waits.empty() && after >= 0) waits.push_back(after);
  if (multi_) emit_gradient_reduction(c_, p_, b, m, std::move(waits));
}

void Scheduler::defer_model_reductions() {
  const Graph& g = c_.graph;
  std::vector<int> readers(g.values().size(), 0), parts(p_.params.size(), 0);
  for (const Node& node : g.nodes())
    for (ValueId in : node.inputs) ++readers[static_cast<size_t>(in)];
  for (int param : part_of_)
    if (param >= 0) ++parts[static_cast<size_t>(param)];
  // Per parameter: the reshards of its gradient parts that may be left out, and their axis.
  std::map<int, std::vector<size_t>> candidates;
  std::map<int, int> axis_of;
  for (size_t n = 0; n < g.nodes().size(); ++n) {
    const Node& node = g.nodes()[n];
    if (node.op() != "reshard") continue;
    const ValueId in = node.inputs.front(), out = node.outputs.front();
    const int param = part_of_[static_cast<size_t>(out)];
    const int axis = static_cast<int>(node.attrs.get_int("axis"));
    const Placement from = placement_from_string(node.attrs.get_string("from"));
    const Placement to = placement_from_string(node.attrs.get_string("to"));
    // A gradient part summed over a model axis, which only this reshard reads.
    if (param < 0 || axis == c_.data_axis || axis == c_.context_axis || !from.is_partial() ||
        from.reduce != Placement::Reduce::sum || !(to == Placement::B()) || readers[static_cast<size_t>(in)] != 1 ||
        readers[static_cast<size_t>(out)] != 0 || part_of_[static_cast<size_t>(in)] >= 0)
      continue;
    auto [it, fresh] = axis_of.try_emplace(param, axis);
    if (!fresh && it->second != axis) it->second = -1;  // two axes: left inline
    candidates[param].push_back(n);
  }
  // Every part of the parameter partial along one axis: a part already whole
  // would be summed again by the reduction of the bucket region.
  for (const auto& [param, nodes] : candidates) {
    if (axis_of[param] < 0 || static_cast<int>(nodes.size()) != parts[static_cast<size_t>(param)]) continue;
    for (size_t n : nodes) {
      const Node& node = g.nodes()[n];
      deferred_node_[n] = true;
      part_of_[static_cast<size_t>(node.inputs.front())] = param;
      part_of_[static_cast<size_t>(node.outputs.front())] = -1;
    }
    partial_axis_[static_cast<size_t>(param)] = axis_of[param];
  }
}

// Each partial member of bucket b summed over its model axis, in place in
// the bucket, on the axis' progress lane (the lane is facts' to stamp).
std::vector<int> Scheduler::model_axis_reductions(int b, int m, int after) {
  std::vector<int> ids;
  const BucketLayout& bucket = p_.buckets[static_cast<size_t>(b)];
  for (int i : bucket.members) {
    const int axis = partial_axis_[static_cast<size_t>(i)];
    if (axis < 0) continue;
    const ParamLayout& param = p_.params[static_cast<size_t>(i)];
    ids.push_back(emit(p_, {.op = Collective{.kind = comm::Collective::allreduce,
                                             .axis = axis,
                                             .input = {bucket.grad_buffer, param.offset - bucket.offset,
                                                       param.shape.numel()}},
                            .micro_batch = m,
                            .after = after >= 0 ? std::vector<int>{after} : std::vector<int>{},
                            .name = fmt::format("grad {} over {}", param.name,
                                                c_.strategy.mesh.axes()[static_cast<size_t>(axis)].name)}));
  }
  return ids;
}

// Shared buckets' sums over their stages, the loss's collectives.
void Scheduler::finish() {
  PX_CHECK(held_.empty(), "{} gradient parts never accumulated", held_.size());
  const int axis = c_.work.pipeline_axis;
  // Parameters pipeline stages share: their gradient summed over those
  // stages, then reduced over the data axis like any other.
  for (int b : deferred_) {
    const BucketLayout& bucket = p_.buckets[static_cast<size_t>(b)];
    const int last = last_accumulate_[static_cast<size_t>(b)];
    const int sum = emit(p_, {.op = Collective{.kind = comm::Collective::allreduce,
                                               .axis = axis,
                                               .input = {bucket.grad_buffer, 0, bucket.count},
                                               .subgroup = shared_group_[static_cast<size_t>(bucket.members.front())]},
                              .after = last >= 0 ? std::vector<int>{last} : std::vector<int>{},
                              .name = fmt::format("grad bucket {} over the stages sharing it", b)});
    bucket_complete(b, static_cast<int>(p_.micro_batches.size()) - 1, sum);
  }
  if (c_.loss == kNoValue) return;  // a forward-only Program: nothing to report
  if (multi_) {
    const Transition& t = c_.transition(Transition::Site::loss, c_.loss);
    last_loss_ = emit(p_, {.op = Collective{.kind = collective_for(t), .axis = c_.data_axis,
                                            .input = {p_.loss_buffer, 0, 1}},
                           .after = last_loss_ >= 0 ? std::vector<int>{last_loss_} : std::vector<int>{},
                           .name = "loss"});
  }
  // The last stage computed the loss; every stage reports it.
  if (axis >= 0)
    emit(p_, {.op = Collective{.kind = comm::Collective::allreduce, .axis = axis, .input = {p_.loss_buffer, 0, 1}},
              .after = last_loss_ >= 0 ? std::vector<int>{last_loss_} : std::vector<int>{},
              .name = "loss over the stages"});
}

}  // namespace

void schedule(const Context& c, Program& p) { Scheduler(c, p).run(); }

}  // namespace px::parallel::passes
