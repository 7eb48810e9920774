#include "plan/memory.h"

#include <algorithm>
#include <map>

namespace px::plan {

// What is alive before the step's first instruction: persistent buffers,
// optimizer state, the step's batch and a mixed-precision working copy.
static double bytes_before_the_step(const parallel::Program& p, int optimizer_slots, DType compute) {
  double live = 0, updated = 0;
  for (const parallel::Buffer& b : p.buffers)
    if (b.persistent) live += static_cast<double>(b.count) * sizeof(float);
  for (const parallel::Instr& instr : p.instrs)
    if (const auto* u = std::get_if<parallel::Update>(&instr.op)) updated += static_cast<double>(u->count);
  live += updated * sizeof(float) * optimizer_slots;
  // The step's batch: this rank's rows of every batch input, fed whole before the step.
  for (const parallel::MicroBatch& m : p.micro_batches)
    if (m.graph >= 0)
      for (ValueId v : p.batch_inputs)
        live += static_cast<double>(p.graphs[static_cast<size_t>(m.graph)].spec(v).bytes());
  // The working copy of the parameters beside the float32 master weights.
  if (compute != DType::f32) live += static_cast<double>(p.param_count) * static_cast<double>(dtype_size(compute));
  return live;
}

ProgramMemory program_memory(const parallel::Program& p, const parallel::Liveness& liveness, int optimizer_slots,
                             DType compute) {
  using parallel::Instr;
  // Activations are float32 in the graph; mixed precision keeps them in the compute dtype.
  const double activation_scale = static_cast<double>(dtype_size(compute)) / static_cast<double>(dtype_size(DType::f32));
  auto activation_bytes = [&](const TensorSpec& spec) {
    return spec.dtype == DType::f32 ? activation_scale * static_cast<double>(spec.bytes()) : static_cast<double>(spec.bytes());
  };
  double live = bytes_before_the_step(p, optimizer_slots, compute);
  double peak = 0, activations = 0, activation_peak = 0, stash = -1;
  double forward = 0, forward_peak = 0;  // the storage forward made
  // A value's bytes live in a storage; a view (reshape) shares its input's,
  // which stays alive until the value and all its views are dead.
  struct Storage {
    double bytes = 0;
    int refs = 0;
    bool forward = false;
  };
  std::vector<Storage> storages;
  std::map<std::pair<int, ValueId>, size_t> storage_of;  // (micro-batch, value) -> storage
  auto drop = [&](std::pair<int, ValueId> key) {
    auto it = storage_of.find(key);
    if (it == storage_of.end()) return;
    Storage& st = storages[it->second];
    if (--st.refs == 0) {
      live -= st.bytes;
      activations -= st.bytes;
      if (st.forward) forward -= st.bytes;
    }
    storage_of.erase(it);
  };
  std::vector<double> buffer_live(p.buffers.size(), 0);
  // P3: the previous step's gradient buckets are alive until the deferred
  // updates at this step's head free them.
  for (const Instr& instr : p.instrs)
    if (const auto* f = std::get_if<parallel::Free>(&instr.op); f && instr.deferred) {
      buffer_live[static_cast<size_t>(f->buffer)] = static_cast<double>(p.buffers[static_cast<size_t>(f->buffer)].count) * sizeof(float);
      live += buffer_live[static_cast<size_t>(f->buffer)];
    }
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const Instr& instr = p.instrs[i];
    for (int b : liveness.allocates[i]) {
      live -= buffer_live[static_cast<size_t>(b)];
      buffer_live[static_cast<size_t>(b)] = static_cast<double>(p.buffers[static_cast<size_t>(b)].count) * sizeof(float);
      live += buffer_live[static_cast<size_t>(b)];
    }
    const int mb = instr.micro_batch;
    auto produce = [&](ValueId v, double bytes, bool made_by_forward) {
      drop({mb, v});  // an instance made again (recomputation)
      storages.push_back({bytes, 1, made_by_forward});
      storage_of[{mb, v}] = storages.size() - 1;
      live += bytes;
      activations += bytes;
      if (made_by_forward) forward += bytes;
    };
    if (const auto* c = std::get_if<parallel::Compute>(&instr.op)) {
      const Graph& g = p.graph_of(mb);
      const Node& node = g.nodes()[static_cast<size_t>(c->node)];
      if (node.origin >= 0 && stash < 0) stash = activations;
      for (size_t o = 0; o < node.outputs.size(); ++o) {
        if (o > 0 || !node.def->output_is_view) {
          produce(node.outputs[o], activation_bytes(g.spec(node.outputs[o])), node.origin < 0);
          continue;
        }
        drop({mb, node.outputs[o]});
        auto base = storage_of.find({mb, node.inputs.front()});
        if (base == storage_of.end()) continue;  // a view of a parameter or fed input
        ++storages[base->second].refs;
        storage_of[{mb, node.outputs[o]}] = base->second;
      }
    } else if (const auto* rs = std::get_if<parallel::Reshard>(&instr.op)) {
      const Graph& g = p.graph_of(mb);
      const Node& node = g.nodes()[static_cast<size_t>(rs->node)];
      produce(node.outputs.front(), activation_bytes(g.spec(node.outputs.front())), node.origin < 0);
    } else if (const auto* recv = std::get_if<parallel::Recv>(&instr.op)) {
      const Graph& g = p.graph_of(mb);
      produce(recv->value, activation_bytes(g.spec(recv->value)),
              g.nodes()[static_cast<size_t>(g.value(recv->value).producer)].origin < 0);
    } else if (const auto* f = std::get_if<parallel::Free>(&instr.op)) {
      live -= buffer_live[static_cast<size_t>(f->buffer)];
      buffer_live[static_cast<size_t>(f->buffer)] = 0;
    }
    peak = std::max(peak, live);
    activation_peak = std::max(activation_peak, activations);
    forward_peak = std::max(forward_peak, forward);
    for (ValueId v : liveness.values[i]) drop({mb, v});
  }
  return {.peak_bytes = peak,
          .activation_peak_bytes = activation_peak,
          .forward_activation_peak_bytes = forward_peak,
          .stash_bytes = std::max(0.0, stash)};
}

}  // namespace px::plan
