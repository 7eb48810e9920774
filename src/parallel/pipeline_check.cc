// Checking a pipeline schedule (completeness, matching, deadlock), running
// it with unit costs, and drawing the result.
#include <algorithm>
#include <tuple>

#include "core/error.h"
#include "parallel/pipeline_schedule.h"

namespace px::parallel {
namespace {

using Op = PipelineOp;

bool is_compute(Op op) {
  return op == Op::forward || op == Op::backward || op == Op::backward_input || op == Op::backward_weight;
}
int unit_cost(Op op) { return op == Op::backward ? 2 : 1; }

std::string describe(const PipelineSchedule& s) {
  return fmt::format("pipeline {} (P={}, M={}{})", pipeline_kind_name(s.kind), s.stages, s.micro_batches,
                     s.virtual_stages > 1 ? fmt::format(", V={}", s.virtual_stages) : "");
}

// A message between virtual stages: (gradient?, micro-batch, from, to).
using Message = std::tuple<bool, int, int, int>;

// Where a send or receive action's message goes, from its rank's view.
Message message_of(const PipelineSchedule& s, int rank, const PipelineAction& a) {
  const int stage = s.virtual_stage(rank, a.chunk);
  switch (a.op) {
    case Op::send_activation: return {false, a.micro, stage, stage + 1};
    case Op::recv_activation: return {false, a.micro, stage - 1, stage};
    case Op::send_gradient: return {true, a.micro, stage, stage - 1};
    case Op::recv_gradient: return {true, a.micro, stage + 1, stage};
    default: PX_CHECK(false, "not a send or receive: {}", a.str());
  }
  return {};
}

// Messages by a dense index, (gradient?, micro-batch, sending virtual
// stage): the receiver follows from the direction. Valid once check_rank
// has passed every rank (stages and micro-batches in range), so the
// checks and runs of schedules with thousands of micro-batches index
// arrays instead of growing maps.
size_t message_slots(const PipelineSchedule& s) {
  return 2 * static_cast<size_t>(s.micro_batches) * static_cast<size_t>(s.stages * s.virtual_stages);
}
size_t message_slot(const PipelineSchedule& s, const Message& message) {
  const auto& [gradient, micro, from, to] = message;
  return (static_cast<size_t>(gradient ? 1 : 0) * static_cast<size_t>(s.micro_batches) + static_cast<size_t>(micro)) *
             static_cast<size_t>(s.stages * s.virtual_stages) +
         static_cast<size_t>(from);
}

// Runs every rank's list with sends that never block and receives that
// wait for their send. Returns the timeline; `stuck` gets each unfinished
// rank's position when no rank can go on.
PipelineTimeline execute(const PipelineSchedule& s, std::vector<size_t>& position) {
  const size_t P = static_cast<size_t>(s.stages);
  PipelineTimeline timeline;
  timeline.ranks.resize(P);
  position.assign(P, 0);
  std::vector<int> clock(P, 0), ready(P, 0);
  std::vector<int> sent(message_slots(s), -1);  // message slot -> when it is available (-1: not yet sent)
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t r = 0; r < P; ++r) {
      const std::vector<PipelineAction>& list = s.ranks[r];
      for (; position[r] < list.size(); ++position[r], progress = true) {
        const PipelineAction& a = list[position[r]];
        if (a.op == Op::send_activation || a.op == Op::send_gradient) {
          int& at = sent[message_slot(s, message_of(s, static_cast<int>(r), a))];
          if (at < 0) at = clock[r];
        } else if (a.op == Op::recv_activation || a.op == Op::recv_gradient) {
          const int at = sent[message_slot(s, message_of(s, static_cast<int>(r), a))];
          if (at < 0) break;  // waits for its send
          ready[r] = std::max(ready[r], at);
        } else if (is_compute(a.op)) {
          const int start = std::max(clock[r], ready[r]);
          timeline.ranks[r].push_back({start, unit_cost(a.op), a});
          clock[r] = start + unit_cost(a.op);
          ready[r] = 0;
        }
      }
    }
  }
  for (size_t r = 0; r < P; ++r) timeline.makespan = std::max(timeline.makespan, clock[r]);
  return timeline;
}

// Each rank's own list: every (micro, chunk) forward and backward exactly
// once and in order, receives before the compute they feed, sends after
// the compute that produces them, one reduction per chunk after its last
// backward; peers are the neighbouring stages'.
// Action k of a rank's list on its own: its chunk and micro-batch exist,
// and a message's peer holds the stage it names.
void check_action(const PipelineSchedule& s, int rank, const std::string& where, size_t k, const PipelineAction& a) {
  const int last = s.stages * s.virtual_stages - 1;
  if (a.chunk < 0 || a.chunk >= s.virtual_stages)
    fail("{}: action {} '{}' names chunk {} of {}", where, k, a.str(), a.chunk, s.virtual_stages);
  if (a.op != Op::reduce_gradients && (a.micro < 0 || a.micro >= s.micro_batches))
    fail("{}: action {} '{}' names micro-batch {} of {}", where, k, a.str(), a.micro, s.micro_batches);
  if (!is_compute(a.op) && a.op != Op::reduce_gradients) {
    const auto [gradient, micro, from, to] = message_of(s, rank, a);
    const int other = a.op == Op::send_activation || a.op == Op::send_gradient ? to : from;
    if (other < 0 || other > last) fail("{}: action {} '{}' reaches past the ends of the pipeline", where, k, a.str());
    if (a.peer != other % s.stages)
      fail("{}: action {} '{}' names peer {}, but stage {} is on rank {}", where, k, a.str(), a.peer, other,
           other % s.stages);
  }
  if (a.op == Op::reduce_gradients && a.micro != -1)
    fail("{}: action {} '{}' names micro-batch {}; a reduction covers them all (-1)", where, k, a.str(), a.micro);
}

void check_rank(const PipelineSchedule& s, int rank) {
  const std::string where = fmt::format("{}: rank {}", describe(s), rank);
  const int last = s.stages * s.virtual_stages - 1;
  const std::vector<PipelineAction>& list = s.ranks[static_cast<size_t>(rank)];
  // Where each kind of action by (micro, chunk) first sits, and how often
  // it occurs; reduce_gradients' micro-batch -1 is slot 0.
  const size_t micro_slots = static_cast<size_t>(s.micro_batches) + 1, chunks = static_cast<size_t>(s.virtual_stages);
  auto slot = [&](Op op, int micro, int chunk) {
    return (static_cast<size_t>(op) * micro_slots + static_cast<size_t>(micro + 1)) * chunks + static_cast<size_t>(chunk);
  };
  const size_t slots = (static_cast<size_t>(Op::reduce_gradients) + 1) * micro_slots * chunks;
  std::vector<int> first(slots, -1), count(slots, 0);
  for (size_t k = 0; k < list.size(); ++k) {
    const PipelineAction& a = list[k];
    check_action(s, rank, where, k, a);
    const size_t at = slot(a.op, a.micro, a.chunk);
    if (count[at]++ == 0) first[at] = static_cast<int>(k);
  }
  auto once = [&](Op op, int micro, int chunk) {
    const size_t at = slot(op, micro, chunk);
    if (count[at] != 1)
      fail("{}: {} of micro-batch {} chunk {} runs {} times, expected once", where, pipeline_op_name(op), micro, chunk,
           count[at]);
    return first[at];
  };
  auto absent = [&](Op op, int micro, int chunk) {
    if (count[slot(op, micro, chunk)] > 0)
      fail("{}: {} of micro-batch {} chunk {} does not belong in a {} schedule", where, pipeline_op_name(op), micro,
           chunk, pipeline_kind_name(s.kind));
  };
  // The message is formatted only when the order is wrong: a schedule of
  // P stages and M micro-batches passes this about 6 P M times.
  auto before = [&]<typename... Args>(int a, int b, fmt::format_string<Args...> what, Args&&... args) {
    if (a >= b) fail("{}: {} (actions {} and {})", where, fmt::format(what, std::forward<Args>(args)...), a, b);
  };
  for (int c = 0; c < s.virtual_stages; ++c) {
    const int stage = s.virtual_stage(rank, c);
    int last_backward = -1;
    for (int m = 0; m < s.micro_batches; ++m) {
      const int f = once(Op::forward, m, c);
      int b = 0, w = 0;
      if (s.splits_backward()) {
        absent(Op::backward, m, c);
        b = once(Op::backward_input, m, c);
        w = once(Op::backward_weight, m, c);
        before(b, w, "W{} runs before its B", m);
      } else {
        absent(Op::backward_input, m, c);
        absent(Op::backward_weight, m, c);
        b = w = once(Op::backward, m, c);
      }
      before(f, b, "the backward of micro-batch {} chunk {} runs before its forward", m, c);
      last_backward = std::max(last_backward, w);
      if (stage > 0) {
        before(once(Op::recv_activation, m, c), f, "forward {} runs before its activation arrives", m);
        before(b, once(Op::send_gradient, m, c), "the input gradient of {} is sent before it exists", m);
      } else {
        absent(Op::recv_activation, m, c);
        absent(Op::send_gradient, m, c);
      }
      if (stage < last) {
        before(f, once(Op::send_activation, m, c), "activation {} is sent before its forward", m);
        before(once(Op::recv_gradient, m, c), b, "backward {} runs before its gradient arrives", m);
      } else {
        absent(Op::send_activation, m, c);
        absent(Op::recv_gradient, m, c);
      }
    }
    before(last_backward, once(Op::reduce_gradients, -1, c), "chunk {}'s gradients are reduced before its last backward",
           c);
  }
}

}  // namespace

void check_pipeline_schedule(const PipelineSchedule& s) {
  if (static_cast<int>(s.ranks.size()) != s.stages)
    fail("{}: {} action lists, expected one per stage", describe(s), s.ranks.size());
  for (int r = 0; r < s.stages; ++r) check_rank(s, r);
  // Every message sent once and received once.
  std::vector<int> sends(message_slots(s), 0), receives(sends.size(), 0);
  std::vector<Message> messages(sends.size());
  for (int r = 0; r < s.stages; ++r)
    for (const PipelineAction& a : s.ranks[static_cast<size_t>(r)]) {
      const bool send = a.op == Op::send_activation || a.op == Op::send_gradient;
      if (!send && a.op != Op::recv_activation && a.op != Op::recv_gradient) continue;
      const Message message = message_of(s, r, a);
      const size_t at = message_slot(s, message);
      messages[at] = message;
      ++(send ? sends : receives)[at];
    }
  for (size_t at = 0; at < sends.size(); ++at) {
    if (sends[at] == 0) continue;
    const auto& [gradient, micro, from, to] = messages[at];
    if (sends[at] != 1 || receives[at] != 1)
      fail("{}: the {} of micro-batch {} from stage {} to {} is sent {} times and received {} times, expected once",
           describe(s), gradient ? "gradient" : "activation", micro, from, to, sends[at], receives[at]);
  }
  for (size_t at = 0; at < sends.size(); ++at)
    if (receives[at] > 0 && sends[at] == 0) fail("{}: a receive has no send", describe(s));
  std::vector<size_t> position;
  execute(s, position);
  std::string stuck;
  for (int r = 0; r < s.stages; ++r) {
    const size_t at = position[static_cast<size_t>(r)], n = s.ranks[static_cast<size_t>(r)].size();
    if (at < n)
      stuck += fmt::format("; rank {} waits at '{}' (action {} of {})", r,
                           s.ranks[static_cast<size_t>(r)][at].str(), at, n);
  }
  if (!stuck.empty()) fail("{} deadlocks{}", describe(s), stuck);
}

double PipelineTimeline::bubble_fraction() const {
  if (makespan == 0 || ranks.empty()) return 0;
  double busy = 0;
  for (const std::vector<Slot>& slots : ranks)
    for (const Slot& slot : slots) busy += slot.length;
  return 1.0 - busy / (static_cast<double>(makespan) * static_cast<double>(ranks.size()));
}

PipelineTimeline simulate_pipeline(const PipelineSchedule& schedule) {
  check_pipeline_schedule(schedule);
  std::vector<size_t> position;
  return execute(schedule, position);
}

std::string draw_pipeline(const PipelineSchedule& schedule) {
  const PipelineTimeline timeline = simulate_pipeline(schedule);
  const size_t width = 2 + std::to_string(std::max(0, schedule.micro_batches - 1)).size();
  std::string out = fmt::format("{}: unit costs F 1, {}; bubble {:.1f}%\n", describe(schedule),
                                schedule.splits_backward() ? "B 1, W 1" : "B 2", 100 * timeline.bubble_fraction());
  for (size_t r = 0; r < timeline.ranks.size(); ++r) {
    std::vector<std::string> cells(static_cast<size_t>(timeline.makespan), ".");
    for (const PipelineTimeline::Slot& slot : timeline.ranks[r]) {
      const char letter = slot.action.op == Op::forward ? 'F' : slot.action.op == Op::backward_weight ? 'W' : 'B';
      cells[static_cast<size_t>(slot.start)] =
          fmt::format("{}{}", slot.action.chunk % 2 ? static_cast<char>(letter - 'A' + 'a') : letter, slot.action.micro);
      for (int k = 1; k < slot.length; ++k) cells[static_cast<size_t>(slot.start + k)] = "~";
    }
    out += fmt::format("stage {} |", r);
    for (const std::string& c : cells) out += fmt::format(" {:<{}}", c, width - 1);
    out += "\n";
  }
  if (schedule.virtual_stages > 1) out += "lower case: odd chunks; ";
  out += "~: the backward goes on\n";
  return out;
}

}  // namespace px::parallel
