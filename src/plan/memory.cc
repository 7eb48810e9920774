#include "plan/memory.h"

#include <algorithm>
#include <functional>
#include <map>

#include "parallel/memory_ledger.h"

namespace px::plan {

// What is alive before the step's first instruction: persistent buffers,
// optimizer state and the step's batch.
static double bytes_before_the_step(const parallel::Program& p, int optimizer_slots) {
  double live = 0, updated = 0;
  for (const parallel::Buffer& b : p.buffers)
    if (b.persistent) live += static_cast<double>(b.bytes());
  for (const parallel::Instr& instr : p.instrs)
    if (const auto* u = std::get_if<parallel::Update>(&instr.op)) updated += static_cast<double>(u->count);
  live += updated * sizeof(float) * optimizer_slots;
  // The step's batch: this rank's rows of every batch input, fed whole before the step.
  for (const parallel::MicroBatch& m : p.micro_batches)
    if (m.graph >= 0)
      for (ValueId v : p.batch_inputs)
        live += static_cast<double>(p.graphs[static_cast<size_t>(m.graph)].spec(v).bytes());
  return live;
}

namespace {

// What instruction `instr` makes, in the ledger.
void record_outputs(const parallel::Program& p, const parallel::Instr& instr,
                    const std::function<double(const TensorSpec&)>& activation_bytes,
                    parallel::ActivationLedger& ledger) {
  const int mb = instr.micro_batch;
  if (const auto* c = std::get_if<parallel::Compute>(&instr.op)) {
    const Graph& g = p.graph_of(mb);
    const Node& node = g.nodes()[static_cast<size_t>(c->node)];
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      if (o > 0 || !node.def->output_is_view)
        ledger.produce(mb, node.outputs[o], activation_bytes(g.spec(node.outputs[o])), node.origin < 0);
      else
        ledger.alias(mb, node.outputs[o], node.inputs.front());
    }
  } else if (const auto* rs = std::get_if<parallel::Reshard>(&instr.op)) {
    const Graph& g = p.graph_of(mb);
    const Node& node = g.nodes()[static_cast<size_t>(rs->node)];
    ledger.produce(mb, node.outputs.front(), activation_bytes(g.spec(node.outputs.front())), node.origin < 0);
  } else if (const auto* route = std::get_if<parallel::Route>(&instr.op)) {
    // The rows a balanced routing brings (the spec's: graph/ops/moe_dispatch.cc).
    const Graph& g = p.graph_of(mb);
    const Node& node = g.nodes()[static_cast<size_t>(route->node)];
    for (ValueId out : node.outputs) ledger.produce(mb, out, activation_bytes(g.spec(out)), node.origin < 0);
  } else if (const auto* recv = std::get_if<parallel::Recv>(&instr.op)) {
    const Graph& g = p.graph_of(mb);
    ledger.produce(mb, recv->value, activation_bytes(g.spec(recv->value)),
                   g.nodes()[static_cast<size_t>(g.value(recv->value).producer)].origin < 0);
  }
}

}  // namespace

ProgramMemory program_memory(const parallel::Program& p, const parallel::Liveness& liveness, int optimizer_slots) {
  using parallel::Instr;
  // Activations in their dtypes as the Program types them (the strategy's precision).
  const auto activation_bytes = [](const TensorSpec& spec) { return static_cast<double>(spec.bytes()); };
  double live = bytes_before_the_step(p, optimizer_slots);
  double peak = 0, stash = -1;
  parallel::ActivationLedger ledger;
  ledger.reset(parallel::ActivationLedger::values_of(p));
  std::vector<double> buffer_live(p.buffers.size(), 0);
  auto set_buffer = [&](int b, double bytes) {
    live += bytes - buffer_live[static_cast<size_t>(b)];
    buffer_live[static_cast<size_t>(b)] = bytes;
  };
  auto buffer_bytes = [&](int b) { return static_cast<double>(p.buffers[static_cast<size_t>(b)].bytes()); };
  // P3: the previous step's gradient buckets are alive until the deferred
  // updates at this step's head free them.
  for (const Instr& instr : p.instrs)
    if (const auto* f = std::get_if<parallel::Free>(&instr.op); f && instr.deferred) set_buffer(f->buffer, buffer_bytes(f->buffer));
  // What a progress-lane job holds past its instruction: a freed buffer it
  // still reads (the executor's BufferPool keeps its memory) and a gather's
  // staged input, by the job's instruction. The peak takes every job as
  // done when its instruction is (as collectives run inline); the held
  // peak keeps each until the main thread waits for it (an instruction
  // lists it in `after`) or the step ends: the most an overlapped run
  // holds, which lets go of them once they are done.
  std::map<int, double> held;
  double held_bytes = 0, held_peak = 0;
  // (The lowering stamps a progress lane only on a group of several ranks.)
  auto on_progress_lane = [&](int id) {
    return p.instrs[static_cast<size_t>(id)].lane.kind == parallel::Lane::Kind::progress;
  };
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const Instr& instr = p.instrs[i];
    const auto* free = std::get_if<parallel::Free>(&instr.op);
    if (free == nullptr)
      for (int dep : instr.after)
        if (auto it = held.find(dep); it != held.end()) {
          held_bytes -= it->second;
          held.erase(it);
        }
    for (int b : liveness.allocates[i]) set_buffer(b, buffer_bytes(b));
    if (const auto* c = std::get_if<parallel::Compute>(&instr.op);
        c && p.graph_of(instr.micro_batch).nodes()[static_cast<size_t>(c->node)].origin >= 0 && stash < 0)
      stash = ledger.bytes();  // backward begins: what forward left
    record_outputs(p, instr, activation_bytes, ledger);
    double staged = 0;  // a gather's copy of its input, during its call
    if (const auto* c = std::get_if<parallel::Collective>(&instr.op))
      staged = static_cast<double>(parallel::gather_staging_bytes(p, *c));
    peak = std::max(peak, live + ledger.bytes() + staged);
    if (staged > 0 && on_progress_lane(static_cast<int>(i))) {
      held[static_cast<int>(i)] += staged;
      held_bytes += staged;
      staged = 0;
    }
    if (free != nullptr) {
      const int reader = instr.after.empty() ? -1 : instr.after.front();
      const double bytes = buffer_live[static_cast<size_t>(free->buffer)];
      set_buffer(free->buffer, 0);
      if (reader >= 0 && on_progress_lane(reader)) {
        held[reader] += bytes;
        held_bytes += bytes;
      }
    }
    held_peak = std::max(held_peak, live + held_bytes + ledger.bytes() + staged);
    for (ValueId v : liveness.values[i]) ledger.drop(instr.micro_batch, v);
  }
  return {.peak_bytes = peak,
          .held_peak_bytes = std::max(peak, held_peak),
          .activation_peak_bytes = ledger.peak(),
          .forward_activation_peak_bytes = ledger.forward_peak(),
          .stash_bytes = std::max(0.0, stash)};
}

}  // namespace px::plan
