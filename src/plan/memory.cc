#include "plan/memory.h"

#include <algorithm>
#include <functional>
#include <map>
#include <utility>

namespace px::plan {

// What is alive before the step's first instruction: persistent buffers,
// optimizer state, the step's batch and a mixed-precision working copy.
static double bytes_before_the_step(const parallel::Program& p, int optimizer_slots, DType compute) {
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
  // The working copy of the parameters beside the float32 master weights.
  if (compute != DType::f32) live += static_cast<double>(p.param_count) * static_cast<double>(dtype_size(compute));
  return live;
}

namespace {

// The activations alive at each point of the walk, by storage: a value's
// bytes live in a storage; a view (reshape) shares its input's, which
// stays alive until the value and all its views are dead.
class ActivationLedger {
 public:
  using Key = std::pair<int, ValueId>;  // (micro-batch, value)

  void produce(Key key, double bytes, bool made_by_forward) {
    drop(key);  // an instance made again (recomputation)
    storages_.push_back({bytes, 1, made_by_forward});
    storage_of_[key] = storages_.size() - 1;
    change(bytes, made_by_forward);
  }
  // `view` shares `base`'s storage; nothing when `base` is a parameter or fed input.
  void alias(Key view, Key base) {
    drop(view);
    auto it = storage_of_.find(base);
    if (it == storage_of_.end()) return;
    ++storages_[it->second].refs;
    storage_of_[view] = it->second;
  }
  void drop(Key key) {
    auto it = storage_of_.find(key);
    if (it == storage_of_.end()) return;
    Storage& st = storages_[it->second];
    if (--st.refs == 0) change(-st.bytes, st.forward);
    storage_of_.erase(it);
  }
  double bytes() const { return bytes_; }
  double forward_bytes() const { return forward_; }
  // The bytes each drop or produce added (the caller's running total).
  double take_delta() { return std::exchange(delta_, 0.0); }

 private:
  struct Storage {
    double bytes = 0;
    int refs = 0;
    bool forward = false;  // made by forward (not backward or recomputation)
  };
  void change(double bytes, bool forward) {
    bytes_ += bytes;
    delta_ += bytes;
    if (forward) forward_ += bytes;
  }
  std::vector<Storage> storages_;
  std::map<Key, size_t> storage_of_;
  double bytes_ = 0, forward_ = 0, delta_ = 0;
};

// What instruction `instr` makes, in the ledger.
void record_outputs(const parallel::Program& p, const parallel::Instr& instr,
                    const std::function<double(const TensorSpec&)>& activation_bytes, ActivationLedger& ledger) {
  const int mb = instr.micro_batch;
  if (const auto* c = std::get_if<parallel::Compute>(&instr.op)) {
    const Graph& g = p.graph_of(mb);
    const Node& node = g.nodes()[static_cast<size_t>(c->node)];
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      if (o > 0 || !node.def->output_is_view)
        ledger.produce({mb, node.outputs[o]}, activation_bytes(g.spec(node.outputs[o])), node.origin < 0);
      else
        ledger.alias({mb, node.outputs[o]}, {mb, node.inputs.front()});
    }
  } else if (const auto* rs = std::get_if<parallel::Reshard>(&instr.op)) {
    const Graph& g = p.graph_of(mb);
    const Node& node = g.nodes()[static_cast<size_t>(rs->node)];
    ledger.produce({mb, node.outputs.front()}, activation_bytes(g.spec(node.outputs.front())), node.origin < 0);
  } else if (const auto* recv = std::get_if<parallel::Recv>(&instr.op)) {
    const Graph& g = p.graph_of(mb);
    ledger.produce({mb, recv->value}, activation_bytes(g.spec(recv->value)),
                   g.nodes()[static_cast<size_t>(g.value(recv->value).producer)].origin < 0);
  }
}

}  // namespace

ProgramMemory program_memory(const parallel::Program& p, const parallel::Liveness& liveness, int optimizer_slots,
                             DType compute) {
  using parallel::Instr;
  // Activations are float32 in the graph; mixed precision keeps them in the compute dtype.
  const double activation_scale = static_cast<double>(dtype_size(compute)) / static_cast<double>(dtype_size(DType::f32));
  const auto activation_bytes = [&](const TensorSpec& spec) {
    return spec.dtype == DType::f32 ? activation_scale * static_cast<double>(spec.bytes()) : static_cast<double>(spec.bytes());
  };
  double live = bytes_before_the_step(p, optimizer_slots, compute);
  double peak = 0, activation_peak = 0, stash = -1, forward_peak = 0;
  ActivationLedger ledger;
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
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const Instr& instr = p.instrs[i];
    for (int b : liveness.allocates[i]) set_buffer(b, buffer_bytes(b));
    if (const auto* c = std::get_if<parallel::Compute>(&instr.op);
        c && p.graph_of(instr.micro_batch).nodes()[static_cast<size_t>(c->node)].origin >= 0 && stash < 0)
      stash = ledger.bytes();  // backward begins: what forward left
    record_outputs(p, instr, activation_bytes, ledger);
    if (const auto* f = std::get_if<parallel::Free>(&instr.op)) set_buffer(f->buffer, 0);
    live += ledger.take_delta();
    peak = std::max(peak, live);
    activation_peak = std::max(activation_peak, ledger.bytes());
    forward_peak = std::max(forward_peak, ledger.forward_bytes());
    for (ValueId v : liveness.values[i]) ledger.drop({instr.micro_batch, v});
    live += ledger.take_delta();
  }
  return {.peak_bytes = peak,
          .activation_peak_bytes = activation_peak,
          .forward_activation_peak_bytes = forward_peak,
          .stash_bytes = std::max(0.0, stash)};
}

}  // namespace px::plan
