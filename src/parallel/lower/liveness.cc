#include "parallel/lower/liveness.h"

#include <algorithm>

#include "core/error.h"
#include "parallel/lower/passes.h"

namespace px::parallel {
namespace {

// The buffers an instruction reads and writes (a read-modify-write, like an
// in-place allreduce or an accumulation into a shard, is both).
struct Access {
  std::vector<int> reads, writes;
};

Access access(const Program& p, const Instr& instr, const std::vector<int>& param_of) {
  Access a;
  auto read = [&](const Region& r) {
    if (r.buffer >= 0) a.reads.push_back(r.buffer);
  };
  auto write = [&](const Region& r) {
    if (r.buffer >= 0) a.writes.push_back(r.buffer);
  };
  std::visit(
      [&](const auto& op) {
        using T = std::decay_t<decltype(op)>;
        if constexpr (std::is_same_v<T, Compute>) {
          for (ValueId in : p.graph_of(instr.micro_batch).nodes()[static_cast<size_t>(op.node)].inputs)
            if (param_of[static_cast<size_t>(in)] >= 0) read(p.param_source(param_of[static_cast<size_t>(in)]));
        } else if constexpr (std::is_same_v<T, Collective>) {
          read(op.input);
          read(op.agreement);
          if (op.output.buffer < 0) write(op.input);  // in place
          else {
            write(op.output);
            if (op.accumulate) read(op.output);
          }
        } else if constexpr (std::is_same_v<T, Accumulate>) {
          write(op.into);
        } else if constexpr (std::is_same_v<T, Finite>) {
          read(op.gradient);
          write(op.into);
        } else if constexpr (std::is_same_v<T, Norm>) {
          for (const Region& r : op.gradients) read(r);
          write(op.into);
        } else if constexpr (std::is_same_v<T, Clip>) {
          for (const Region& r : op.gradients) {
            read(r);
            write(r);
          }
          read(op.norm);
        } else if constexpr (std::is_same_v<T, Update>) {
          read(op.gradient);
          read(op.storage);
          write(op.storage);
        }
      },
      instr.op);
  return a;
}

// Values: instances from a production (a node's output, a Recv) to the
// last instruction of their micro-batch that reads them (the production
// itself when none does). A value recomputed before its backward is
// produced twice: the first instance dies after its last forward read.
void value_liveness(const Program& p, size_t values, Liveness& live) {
  std::vector<bool> kept(values, false);  // never freed: the executor's or the caller's
  for (ValueId v : p.outputs) kept[static_cast<size_t>(v)] = true;
  // Open instances by value, then micro-batch + 1: the last use so far, or
  // -1. Flat, not a map (a stage at scale has 10^5-10^6 instances); a
  // value's row is allocated when the Program first touches it (a stage
  // touches a few of the whole graph's values).
  int micro_batches = 0;
  for (const Instr& instr : p.instrs) micro_batches = std::max(micro_batches, instr.micro_batch + 1);
  std::vector<std::vector<int>> open(values);
  const auto slot = [&](int micro_batch, ValueId v) -> int& {
    std::vector<int>& row = open[static_cast<size_t>(v)];
    if (row.empty()) row.assign(static_cast<size_t>(micro_batches) + 1, -1);
    return row[static_cast<size_t>(micro_batch + 1)];
  };
  auto end_instance = [&](int micro_batch, ValueId value) {
    int& last = slot(micro_batch, value);
    if (last < 0) return;
    if (!kept[static_cast<size_t>(value)] &&
        p.graph_of(micro_batch).value(value).kind == Value::Kind::activation)
      live.values[static_cast<size_t>(last)].push_back(value);
    last = -1;
  };
  auto read = [&](int micro_batch, ValueId v, int at) { slot(micro_batch, v) = at; };
  auto produce = [&](int micro_batch, ValueId v, int at) {
    end_instance(micro_batch, v);
    slot(micro_batch, v) = at;
  };
  for (const int at : step_order(p.instrs)) {
    const Instr& instr = p.instrs[static_cast<size_t>(at)];
    const int node_index = std::holds_alternative<Compute>(instr.op)   ? std::get<Compute>(instr.op).node
                           : std::holds_alternative<Reshard>(instr.op) ? std::get<Reshard>(instr.op).node
                           : std::holds_alternative<Route>(instr.op)   ? std::get<Route>(instr.op).node
                                                                       : -1;
    if (node_index >= 0) {
      const Node& node = p.graph_of(instr.micro_batch).nodes()[static_cast<size_t>(node_index)];
      for (ValueId in : node.inputs) read(instr.micro_batch, in, at);
      for (ValueId out : node.outputs) produce(instr.micro_batch, out, at);
    } else if (const auto* a = std::get_if<Accumulate>(&instr.op)) {
      read(instr.micro_batch, a->from, at);
    } else if (const auto* s = std::get_if<Send>(&instr.op)) {
      read(instr.micro_batch, s->value, at);
    } else if (const auto* r = std::get_if<Recv>(&instr.op)) {
      produce(instr.micro_batch, r->value, at);
    }
  }
  for (size_t v = 0; v < values; ++v)
    if (!open[v].empty())
      for (int micro_batch = -1; micro_batch < micro_batches; ++micro_batch) end_instance(micro_batch, static_cast<ValueId>(v));
  for (std::vector<ValueId>& dead : live.values) std::sort(dead.begin(), dead.end());

}

// Buffers: instances between a (re)first write and the last read before the next.
void buffer_liveness(const Program& p, const std::vector<int>& param_of, Liveness& live) {
  struct State {
    bool open = false;       // an instance exists
    bool read_since = false;  // read since its last write
    int last_read = -1;
  };
  std::vector<State> state(p.buffers.size());
  auto close = [&](int b) {
    State& s = state[static_cast<size_t>(b)];
    if (s.open && s.last_read >= 0) live.buffers[static_cast<size_t>(s.last_read)].push_back(b);
    s = State{};
  };
  for (const int at : step_order(p.instrs)) {
    const auto i = static_cast<size_t>(at);
    const Access a = access(p, p.instrs[i], param_of);
    for (int b : a.writes) {
      if (p.buffers[static_cast<size_t>(b)].persistent) continue;
      State& s = state[static_cast<size_t>(b)];
      // A write after a read starts a new instance, unless the same
      // instruction reads it too (a read-modify-write: clipping in place).
      const bool modifies = std::find(a.reads.begin(), a.reads.end(), b) != a.reads.end();
      if (s.open && s.read_since && !modifies) close(b);
      if (!s.open) {
        live.allocates[i].push_back(b);
        state[static_cast<size_t>(b)].open = true;
      }
      state[static_cast<size_t>(b)].read_since = false;
    }
    for (int b : a.reads) {
      if (p.buffers[static_cast<size_t>(b)].persistent) continue;
      State& s = state[static_cast<size_t>(b)];
      // Read unwritten: this rank had no rows to contribute (the executor zero-fills it).
      if (!s.open) {
        live.allocates[i].push_back(b);
        s.open = true;
      }
      s.read_since = true;
      s.last_read = at;
    }
  }
  for (size_t b = 0; b < p.buffers.size(); ++b) close(static_cast<int>(b));
}

}  // namespace

Liveness liveness(const Program& p) {
  const size_t n = p.instrs.size();
  Liveness live{.values = std::vector<std::vector<ValueId>>(n), .buffers = std::vector<std::vector<int>>(n),
                .allocates = std::vector<std::vector<int>>(n)};
  size_t values = 0;
  for (const Graph& g : p.graphs) values = std::max(values, g.values().size());
  std::vector<int> param_of(values, -1);
  for (size_t i = 0; i < p.params.size(); ++i) param_of[static_cast<size_t>(p.params[i].value)] = static_cast<int>(i);
  value_liveness(p, values, live);
  buffer_liveness(p, param_of, live);
  return live;
}

namespace passes {

void frees(Program& p) {
  const Liveness live = liveness(p);
  // Rebuild the list with a Free after each buffer's last read; ids shift,
  // so dependencies are renumbered.
  // (A deferred instruction's `after` points forward, at the previous
  // step's instance: every new id is known before any is renumbered.)
  std::vector<int> id(p.instrs.size());
  for (size_t i = 0, next = 0; i < p.instrs.size(); ++i) {
    id[i] = static_cast<int>(next);
    next += 1 + live.buffers[i].size();
  }
  std::vector<Instr> old = std::move(p.instrs);
  p.instrs.clear();
  for (size_t i = 0; i < old.size(); ++i) {
    Instr instr = std::move(old[i]);
    for (int& dep : instr.after) dep = id[static_cast<size_t>(dep)];
    PX_CHECK_EQ(emit(p, std::move(instr)), id[i]);
    // A deferred instruction's last read is freed at the same step's head.
    const Instr& last = p.instrs[static_cast<size_t>(id[i])];
    for (int b : live.buffers[i])
      emit(p, {.op = Free{b}, .micro_batch = last.micro_batch, .after = {id[i]}, .deferred = last.deferred});
  }
}

}  // namespace passes
}  // namespace px::parallel
