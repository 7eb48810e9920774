// The schedule generators: each rank's compute order (forward, backward or
// B and W), then the sends and receives around it and one gradient
// reduction per chunk after its last backward.
#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <deque>

#include "core/error.h"

namespace px::parallel {
namespace {

using Op = PipelineOp;
using Order = std::vector<PipelineAction>;  // one rank's compute actions

Order gpipe(int M) {
  Order order;
  for (int m = 0; m < M; ++m) order.push_back({Op::forward, m, 0, -1});
  for (int m = 0; m < M; ++m) order.push_back({Op::backward, m, 0, -1});
  return order;
}

Order one_f_one_b(int P, int M, int rank) {
  const int warm = std::min(P - rank - 1, M);
  Order order;
  for (int m = 0; m < warm; ++m) order.push_back({Op::forward, m, 0, -1});
  for (int k = 0; k < M - warm; ++k) {
    order.push_back({Op::forward, warm + k, 0, -1});
    order.push_back({Op::backward, k, 0, -1});
  }
  for (int m = M - warm; m < M; ++m) order.push_back({Op::backward, m, 0, -1});
  return order;
}

// Megatron's interleaved 1F1B: the k-th forward of a rank runs chunk
// (k / P) mod V of micro-batch (k / PV)·P + k mod P, so micro-batches go
// through the chunks in groups of P; backwards take the chunks in reverse.
Order interleaved(int P, int M, int V, int rank) {
  const int total = M * V;
  auto micro = [&](int k) { return (k / (P * V)) * P + k % P; };
  auto forward = [&](int k) { return PipelineAction{Op::forward, micro(k), (k / P) % V, -1}; };
  auto backward = [&](int k) { return PipelineAction{Op::backward, micro(k), V - 1 - (k / P) % V, -1}; };
  const int warm = std::min((P - rank - 1) * 2 + (V - 1) * P, total);
  Order order;
  for (int k = 0; k < warm; ++k) order.push_back(forward(k));
  for (int k = 0; k < total - warm; ++k) {
    order.push_back(forward(warm + k));
    order.push_back(backward(k));
  }
  for (int k = total - warm; k < total; ++k) order.push_back(backward(k));
  return order;
}

// ZB-H1 by list scheduling with unit costs (F = B = W = 1): at each time a
// free rank runs, in this priority, a W when more than P − r − 1 are
// pending, a ready B, a ready F while fewer than P − r micro-batches are
// between their F and B (1F1B's bound), or a pending W.
std::vector<Order> zb_h1(int P, int M) {
  std::vector<Order> orders(static_cast<size_t>(P));
  // Finish times; -1: not run yet.
  std::vector<std::vector<int>> f_done(static_cast<size_t>(P), std::vector<int>(static_cast<size_t>(M), -1));
  std::vector<std::vector<int>> b_done = f_done;
  std::vector<int> next_f(static_cast<size_t>(P), 0), next_b(static_cast<size_t>(P), 0);
  std::vector<std::deque<int>> pending_w(static_cast<size_t>(P));
  std::vector<int> w_count(static_cast<size_t>(P), 0);
  auto done = [&](int r) { return w_count[static_cast<size_t>(r)] == M; };
  for (int t = 0;; ++t) {
    bool all = true;
    for (int r = 0; r < P; ++r) all = all && done(r);
    if (all) break;
    PX_CHECK(t < 8 * P * M + 8 * P, "zb-h1 list scheduling made no progress at P={} M={}", P, M);
    for (int r = 0; r < P; ++r) {
      const size_t i = static_cast<size_t>(r);
      auto ready = [&](int finish) { return finish >= 0 && finish <= t; };
      const int f = next_f[i], b = next_b[i];
      const bool b_ready = b < f && ready(f_done[i][static_cast<size_t>(b)]) &&
                           (r == P - 1 || ready(b_done[i + 1][static_cast<size_t>(b)]));
      const bool f_ready = f < M && f - b < P - r && (r == 0 || ready(f_done[i - 1][static_cast<size_t>(f)]));
      const int pending = static_cast<int>(pending_w[i].size());
      auto run_w = [&] {
        orders[i].push_back({Op::backward_weight, pending_w[i].front(), 0, -1});
        pending_w[i].pop_front();
        ++w_count[i];
      };
      if (pending > P - r - 1) {
        run_w();
      } else if (b_ready) {
        orders[i].push_back({Op::backward_input, b, 0, -1});
        b_done[i][static_cast<size_t>(b)] = t + 1;
        pending_w[i].push_back(b);
        ++next_b[i];
      } else if (f_ready) {
        orders[i].push_back({Op::forward, f, 0, -1});
        f_done[i][static_cast<size_t>(f)] = t + 1;
        ++next_f[i];
      } else if (pending > 0) {
        run_w();
      }
    }
  }
  return orders;
}

// Where a virtual stage runs: its rank and its chunk there.
struct Place {
  int rank = 0, chunk = 0;
};

// Adds the receive before each compute that needs a value from another
// stage, the send after each compute that produces one, and a gradient
// reduction per chunk after its last backward.
std::vector<PipelineAction> with_communication(const Order& order, int rank, int P, int V) {
  const int last = P * V - 1;
  auto place = [&](int virtual_stage) { return Place{virtual_stage % P, virtual_stage / P}; };
  std::vector<int> last_backward(static_cast<size_t>(V), -1);
  for (size_t k = 0; k < order.size(); ++k)
    if (order[k].op == Op::backward || order[k].op == Op::backward_weight)
      last_backward[static_cast<size_t>(order[k].chunk)] = static_cast<int>(k);
  std::vector<PipelineAction> out;
  for (size_t k = 0; k < order.size(); ++k) {
    const PipelineAction& a = order[k];
    const int stage = a.chunk * P + rank;
    if (a.op == Op::forward && stage > 0)
      out.push_back({Op::recv_activation, a.micro, a.chunk, place(stage - 1).rank});
    if ((a.op == Op::backward || a.op == Op::backward_input) && stage < last)
      out.push_back({Op::recv_gradient, a.micro, a.chunk, place(stage + 1).rank});
    out.push_back(a);
    if (a.op == Op::forward && stage < last) out.push_back({Op::send_activation, a.micro, a.chunk, place(stage + 1).rank});
    if ((a.op == Op::backward || a.op == Op::backward_input) && stage > 0)
      out.push_back({Op::send_gradient, a.micro, a.chunk, place(stage - 1).rank});
    if (static_cast<int>(k) == last_backward[static_cast<size_t>(a.chunk)])
      out.push_back({Op::reduce_gradients, -1, a.chunk, -1});
  }
  return out;
}

}  // namespace

std::string_view pipeline_op_name(PipelineOp op) {
  switch (op) {
    case Op::forward: return "forward";
    case Op::backward: return "backward";
    case Op::backward_input: return "backward_input";
    case Op::backward_weight: return "backward_weight";
    case Op::send_activation: return "send_activation";
    case Op::recv_activation: return "recv_activation";
    case Op::send_gradient: return "send_gradient";
    case Op::recv_gradient: return "recv_gradient";
    case Op::reduce_gradients: return "reduce_gradients";
  }
  return "?";
}

std::string PipelineAction::str() const {
  const std::string which = chunk > 0 ? fmt::format("{}.{}", micro, chunk) : std::to_string(micro);
  switch (op) {
    case Op::forward: return "F" + which;
    case Op::backward: return "B" + which;
    case Op::backward_input: return "B" + which;
    case Op::backward_weight: return "W" + which;
    case Op::send_activation: return fmt::format("send activation {} to {}", which, peer);
    case Op::recv_activation: return fmt::format("recv activation {} from {}", which, peer);
    case Op::send_gradient: return fmt::format("send gradient {} to {}", which, peer);
    case Op::recv_gradient: return fmt::format("recv gradient {} from {}", which, peer);
    case Op::reduce_gradients: return fmt::format("reduce gradients of chunk {}", chunk);
  }
  return "?";
}

PipelineKind pipeline_kind_from_name(std::string_view name) {
  for (PipelineKind k : {PipelineKind::gpipe, PipelineKind::one_f_one_b, PipelineKind::interleaved, PipelineKind::zb_h1})
    if (pipeline_kind_name(k) == name) return k;
  fail("pipeline schedule '{}' is unknown: expected gpipe, 1f1b, interleaved or zb-h1", name);
}

std::string_view pipeline_kind_name(PipelineKind kind) {
  switch (kind) {
    case PipelineKind::gpipe: return "gpipe";
    case PipelineKind::one_f_one_b: return "1f1b";
    case PipelineKind::interleaved: return "interleaved";
    case PipelineKind::zb_h1: return "zb-h1";
  }
  return "?";
}

PipelineSchedule make_pipeline_schedule(PipelineKind kind, int stages, int micro_batches, int virtual_stages) {
  const std::string_view name = pipeline_kind_name(kind);
  if (stages < 1) fail("pipeline: {} stages, expected at least 1", stages);
  if (micro_batches < 1) fail("pipeline: {} micro-batches, expected at least 1", micro_batches);
  if (virtual_stages < 1) fail("pipeline: {} virtual stages per rank, expected at least 1", virtual_stages);
  if (kind != PipelineKind::interleaved && virtual_stages != 1)
    fail("pipeline: --virtual-stages {} needs the interleaved schedule, not {}", virtual_stages, name);
  if (kind == PipelineKind::interleaved) {
    if (virtual_stages < 2)
      fail("pipeline: the interleaved schedule needs --virtual-stages of at least 2 (with 1 it is 1f1b)");
    if (micro_batches % stages != 0) {
      const int below = micro_batches / stages * stages, above = below + stages;
      fail("pipeline: the interleaved schedule runs micro-batches in groups of the {} stages, so --micro-batches {} "
           "does not fit: use {}",
           stages, micro_batches, below > 0 ? fmt::format("{} or {}", below, above) : std::to_string(above));
    }
  }
  PipelineSchedule s{.kind = kind, .stages = stages, .micro_batches = micro_batches, .virtual_stages = virtual_stages,
                     .ranks = {}};
  std::vector<Order> orders;
  if (kind == PipelineKind::zb_h1) {
    orders = zb_h1(stages, micro_batches);
  } else {
    for (int r = 0; r < stages; ++r)
      orders.push_back(kind == PipelineKind::gpipe         ? gpipe(micro_batches)
                       : kind == PipelineKind::one_f_one_b ? one_f_one_b(stages, micro_batches, r)
                                                           : interleaved(stages, micro_batches, virtual_stages, r));
  }
  for (int r = 0; r < stages; ++r)
    s.ranks.push_back(with_communication(orders[static_cast<size_t>(r)], r, stages, virtual_stages));
  check_pipeline_schedule(s);
  return s;
}

}  // namespace px::parallel
