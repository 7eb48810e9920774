// Pipeline schedules: the order in which each pipeline rank runs the
// forward and backward passes of its stages over M micro-batches, with
// the sends and receives between stages. Generated globally, one action
// list per rank, and checked for completeness and deadlock before
// anything runs; the lowering turns a rank's list into its Program's
// instruction order.
//
// Stages: P ranks along the pipeline axis, each holding V model chunks
// (V = 1 except for the interleaved schedule). Virtual stage s = chunk·P +
// rank runs layers in order s = 0 .. V·P − 1: rank r's chunk c feeds
// virtual stage c·P + r + 1, on rank (r + 1) mod P.
//
//   gpipe        all M forwards, then all M backwards (Huang et al. 2019)
//   1f1b         P − r − 1 warm-up forwards, then one forward, one backward,
//                then the remaining backwards (PipeDream-flush, Narayanan
//                et al. 2021); at most P − r micro-batches in flight
//   interleaved  1F1B over V chunks per rank, micro-batches in groups of P
//                (Megatron-LM, Narayanan et al. 2021); needs M a multiple of P
//   zb-h1        1F1B with the backward split into its input-gradient part B
//                and its weight-gradient part W; W is deferred to fill the
//                bubbles, at most P − r − 1 of them pending, so memory stays
//                as 1F1B's (Qi et al. 2024, "Zero Bubble Pipeline
//                Parallelism", schedule H1)
#pragma once

#include <string>
#include <vector>

namespace px::parallel {

enum class PipelineOp {
  forward,
  backward,         // the whole backward of a chunk
  backward_input,   // zb-h1's B: gradients of the chunk's inputs only
  backward_weight,  // zb-h1's W: gradients of the chunk's parameters
  send_activation,  // to the next virtual stage
  recv_activation,  // from the previous one
  send_gradient,    // to the previous virtual stage
  recv_gradient,    // from the next one
  reduce_gradients  // the chunk's parameter gradients are complete: reduce them
};
std::string_view pipeline_op_name(PipelineOp op);

struct PipelineAction {
  PipelineOp op = PipelineOp::forward;
  int micro = 0;   // micro-batch (reduce_gradients: -1)
  int chunk = 0;   // model chunk on this rank, 0 .. V − 1
  int peer = -1;   // sends and receives: the other pipeline rank
  bool operator==(const PipelineAction&) const = default;
  std::string str() const;  // "F3", "B3.1" (micro 3, chunk 1), "send_act F3 -> 1", ...
};

enum class PipelineKind { gpipe, one_f_one_b, interleaved, zb_h1 };
PipelineKind pipeline_kind_from_name(std::string_view name);  // "gpipe", "1f1b", "interleaved", "zb-h1"
std::string_view pipeline_kind_name(PipelineKind kind);

struct PipelineSchedule {
  PipelineKind kind = PipelineKind::one_f_one_b;
  int stages = 1;          // P
  int micro_batches = 1;   // M
  int virtual_stages = 1;  // V (chunks per rank)
  std::vector<std::vector<PipelineAction>> ranks;  // per pipeline rank, in order

  int virtual_stage(int rank, int chunk) const { return chunk * stages + rank; }
  bool operator==(const PipelineSchedule&) const = default;
  bool splits_backward() const { return kind == PipelineKind::zb_h1; }
};

// The schedule of `kind` for P stages and M micro-batches (V chunks per
// rank for interleaved, 1 otherwise), checked (check_pipeline_schedule).
// px::Error for P, M or V below 1, V > 1 with another kind than
// interleaved, and an M interleaved cannot take (naming the nearest valid
// values).
PipelineSchedule make_pipeline_schedule(PipelineKind kind, int stages, int micro_batches, int virtual_stages = 1);

// Proves the schedule complete and free of deadlock, or throws px::Error
// saying what is wrong:
//  - complete: every rank runs the forward and the backward (B and W when
//    split) of every micro-batch of each of its chunks exactly once, a
//    backward after its forward and W after B, and reduces each chunk's
//    gradients once, after its last backward;
//  - matched: every send has exactly one receive of the same kind, micro-
//    batch and stage pair, and values cross only between adjacent stages;
//  - deadlock-free: executing the lists with sends that never block and
//    receives that wait for their send finishes every list (otherwise the
//    error lists the action each rank is stuck at).
void check_pipeline_schedule(const PipelineSchedule& schedule);

// The schedule run with unit costs (forward 1, backward 2 or B 1 + W 1,
// communication free): when each compute action starts per rank.
struct PipelineTimeline {
  struct Slot {
    int start = 0, length = 0;
    PipelineAction action;
  };
  std::vector<std::vector<Slot>> ranks;
  int makespan = 0;
  // Idle time over ranks × makespan: the schedule's analytical bubble.
  double bubble_fraction() const;
};
PipelineTimeline simulate_pipeline(const PipelineSchedule& schedule);

// The timeline as text, one row per stage, one column per unit of time,
// the way the papers draw it: "F3" forwards, "B3" backwards, "W3" weight
// gradients, "." idle; chunk shown by case (lower case: odd chunks).
std::string draw_pipeline(const PipelineSchedule& schedule);

}  // namespace px::parallel
