#include "parallel/memory_ledger.h"

#include <algorithm>
#include <utility>

namespace px::parallel {

void ActivationLedger::reset(const std::vector<size_t>& values) {
  micro_.resize(values.size());
  for (size_t m = 0; m < values.size(); ++m) {
    Micro& micro = micro_[m];
    micro.storage.assign(values[m], kNoValue);
    micro.bytes.assign(values[m], 0);
    micro.holders.assign(values[m], 0);
    micro.forward.assign(values[m], false);
  }
  bytes_ = forward_ = peak_ = forward_peak_ = 0;
}

std::vector<size_t> ActivationLedger::values_of(const Program& program) {
  std::vector<size_t> values;
  for (const MicroBatch& mb : program.micro_batches)
    values.push_back(mb.rows == 0 ? 0 : program.graphs[static_cast<size_t>(mb.graph)].values().size());
  return values;
}

void ActivationLedger::change(double bytes, bool forward) {
  bytes_ += bytes;
  if (forward) forward_ += bytes;
  peak_ = std::max(peak_, bytes_);
  forward_peak_ = std::max(forward_peak_, forward_);
}

void ActivationLedger::produce(int micro, ValueId v, double bytes, bool forward) {
  drop(micro, v);
  Micro& m = micro_[static_cast<size_t>(micro)];
  const auto i = static_cast<size_t>(v);
  m.storage[i] = v;
  m.bytes[i] = bytes;
  m.holders[i] = 1;
  m.forward[i] = forward;
  change(bytes, forward);
}

void ActivationLedger::alias(int micro, ValueId view, ValueId base) {
  drop(micro, view);
  Micro& m = micro_[static_cast<size_t>(micro)];
  const ValueId storage = m.storage[static_cast<size_t>(base)];
  if (storage == kNoValue) return;
  m.storage[static_cast<size_t>(view)] = storage;
  ++m.holders[static_cast<size_t>(storage)];
}

double ActivationLedger::drop(int micro, ValueId v) {
  Micro& m = micro_[static_cast<size_t>(micro)];
  ValueId& held = m.storage[static_cast<size_t>(v)];
  if (held == kNoValue) return 0;
  const auto s = static_cast<size_t>(std::exchange(held, kNoValue));
  if (--m.holders[s] > 0) return 0;
  const double freed = m.bytes[s];
  change(-freed, m.forward[s]);
  m.bytes[s] = 0;
  return freed;
}

int64_t micro_batch_stash_bytes(const Program& program, const Liveness& liveness) {
  int micro = -1;
  for (size_t m = 0; m < program.micro_batches.size() && micro < 0; ++m)
    if (program.micro_batches[m].rows > 0) micro = static_cast<int>(m);
  if (micro < 0) return 0;
  const Graph& g = program.graph_of(micro);
  // Made by forward into storage of its own (not a view).
  auto stored = [&](ValueId v) {
    const Value& value = g.value(v);
    if (value.producer < 0) return false;
    const Node& node = g.nodes()[static_cast<size_t>(value.producer)];
    return node.origin < 0 && !(value.output_index == 0 && node.def->output_is_view);
  };
  std::vector<size_t> values(program.micro_batches.size(), 0);
  values[static_cast<size_t>(micro)] = g.values().size();
  ActivationLedger ledger;
  ledger.reset(values);
  bool backward = false;
  double stash = 0;
  for (size_t i = 0; i < program.instrs.size(); ++i) {
    const Instr& instr = program.instrs[i];
    if (instr.micro_batch != micro) continue;
    const Node* node = nullptr;
    if (const auto* c = std::get_if<Compute>(&instr.op)) node = &g.nodes()[static_cast<size_t>(c->node)];
    if (const auto* r = std::get_if<Reshard>(&instr.op)) node = &g.nodes()[static_cast<size_t>(r->node)];
    if (node == nullptr) {
      if (const auto* r = std::get_if<Recv>(&instr.op); r && !backward && stored(r->value))
        ledger.produce(micro, r->value, static_cast<double>(g.spec(r->value).bytes()), true);
      continue;
    }
    backward = backward || node->origin >= 0;
    for (size_t o = 0; o < node->outputs.size() && !backward; ++o) {
      const ValueId v = node->outputs[o];
      if (stored(v)) ledger.produce(micro, v, static_cast<double>(g.spec(v).bytes()), true);
      else if (o == 0 && node->def->output_is_view) ledger.alias(micro, v, node->inputs.front());
    }
    for (ValueId v : liveness.values[i]) {
      const double freed = ledger.drop(micro, v);
      if (node->origin >= 0) stash += freed;
    }
  }
  return static_cast<int64_t>(stash);
}

int64_t gather_staging_bytes(const Program& program, const Collective& gather) {
  if (gather.kind != comm::Collective::allgather) return 0;
  const DType out = program.buffers[static_cast<size_t>(gather.output.buffer)].dtype;
  if (out == DType::f32 && gather.input.buffer != gather.output.buffer) return 0;
  return gather.input.count * static_cast<int64_t>(dtype_size(out));
}

StateBytes state_bytes(double parameters, int zero_stage, int data_ranks, int optimizer_slots) {
  const double psi = parameters, p = std::max(1, data_ranks), k = optimizer_slots;
  const int stage = data_ranks > 1 ? zero_stage : 0;
  StateBytes s{.parameters = 4 * psi / (stage >= 3 ? p : 1),
               .gradients = stage == 0 ? 4 * psi : stage == 1 ? 4 * psi + 4 * psi / p : 4 * psi / p,
               .optimizer_state = 4 * k * psi / (stage >= 1 ? p : 1)};
  return s;
}

}  // namespace px::parallel
