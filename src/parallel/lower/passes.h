// The lowering passes (lower.h chains them). Each takes what the earlier
// ones decided and fills its part of the Program.
#pragma once

#include <vector>

#include "parallel/lower/propagate.h"
#include "parallel/lower/reshard.h"
#include "parallel/program.h"

namespace px::parallel::passes {

// A run of one micro-batch's nodes, or values sent to or received from
// another pipeline stage, in the order this rank runs them.
struct Phase {
  enum class Kind { compute, send, recv };
  Kind kind = Kind::compute;
  int micro = 0;
  bool backward = false;        // compute: backward nodes (ZeRO-3 gathers per phase)
  std::vector<int> nodes;       // compute: in order
  std::vector<ValueId> values;  // send / recv
  std::vector<uint32_t> tags;   // send / recv: per value
  int peer = -1;                // send / recv: the other stage's pipeline coordinate
  // compute: run interleaved with the next phase (the same nodes of the
  // next micro-batch) at its Routes, so each micro-batch's expert
  // exchanges overlap the other's compute (expert parallelism).
  bool interleaved_with_next = false;
};

// What this rank runs (lower/pipeline.cc): without a pipeline, every
// micro-batch's forward and backward (overlapping expert parallelism's
// exchanges, two micro-batches' forwards then their backwards,
// interleaved); with one, its stages' nodes in its
// schedule's order with the transfers between stages.
struct RankWork {
  std::vector<Phase> phases;
  std::vector<bool> holds;  // by value id: a parameter this rank reads
  // Values accumulated into a parameter's gradient (index into
  // Context::grads): its gradient, or, for a parameter two stages share,
  // the summands computed on this rank's stages.
  std::vector<std::pair<ValueId, int>> gradient_parts;
  // Parameters held by more than one pipeline rank: the value and the
  // Program::subgroups entry their gradients are summed over.
  std::vector<std::pair<ValueId, int>> shared;
  int pipeline_axis = -1;
  // By value id: the dtype a value crossing a cut travels in (Send::dtype);
  // empty without a pipeline.
  std::vector<DType> transfer_dtype;
};

// What every pass may read: the global graph (forward + backward, with the
// reshard nodes propagation inserted), its placements on every mesh axis
// and the transitions the rule chose along the data axis.
struct Context {
  const Graph& graph;
  const Strategy& strategy;
  std::vector<int> coords;  // this rank's, in the mesh
  // The data path's group: the data axis, joined with the context axis
  // under context parallelism (weight gradients are summands along both;
  // ZeRO shards over both), or with the expert axis under expert
  // parallelism (each expert rank's rows are its own). Rows are split
  // along the data axis, and the expert axis' ranks each take theirs.
  int data_rank = 0, data_size = 1;
  int row_rank = 0, row_ranks = 1;  // along the data (x expert) axis: whose rows
  int data_axis = 0;     // index in the mesh
  int context_axis = -1;  // index in the mesh of the context axis of more than one rank, or -1
  int joined_axis = -1;   // the axis the data path joins: the context or the expert axis, or -1
  int expert_axis = -1;   // index in the mesh of the expert axis of more than one rank, or -1
  // Whether parameter `param` is an expert weight (split along the expert
  // axis): its gradient is reduced over the data axis alone.
  bool expert_weight(ValueId param) const {
    return expert_axis >= 0 && placement.of_value[static_cast<size_t>(param)][static_cast<size_t>(expert_axis)].is_split();
  }
  int zero_stage = 0;  // the strategy's, or 0 on a data axis of one rank (nothing to shard)
  int forward_nodes = 0;  // nodes [0, forward_nodes) are forward, the rest backward
  ValueId loss = kNoValue;
  std::vector<ParamGrad> grads;  // in parameter declaration order
  const Propagation& placement;
  std::vector<Transition> transitions;
  RankWork work;
  const Transition& transition(Transition::Site site, ValueId value) const;
  const Placement& data_placement(ValueId v) const {
    return placement.of_value[static_cast<size_t>(v)][static_cast<size_t>(data_axis)];
  }
};

// Which nodes this rank runs in which order (the pipeline's stages and
// schedule, or every node per micro-batch); fills Program::pipeline and
// Program::subgroups.
RankWork plan_work(const Context& context, Program& program);

// Activation recomputation (Strategy::lowering.recompute): forward nodes
// inserted into the backward phases, before the first backward node that
// reads what they make.
void recompute(const Context& context, RankWork& work);

// Micro-batches of this rank's rows and a local graph per distinct size:
// every value cut to the rank's part (parallel/shard.h) on the model axes,
// and values split S(0) along the data axis (the batch) to the
// micro-batch's rows; B and P values whole. Also each value's box.
void localize(const Context& context, Program& program);

// Parameters laid out flat, bucket by bucket in the order backward completes
// their gradients; this rank's block of every bucket (ZeRO shards).
void buckets(const Context& context, Program& program);

// The step's instructions up to the reduced gradients.
void schedule(const Context& context, Program& program);

// Norm, Updates and (ZeRO-1/2) the gather of updated parameters.
void optimizer(const Context& context, Program& program);

// P3: each Update moved to the next step's head, before the first compute
// that reads its parameter, and marked deferred (lower/defer_updates.cc).
void defer_updates(Program& program);

// Free instructions after every non-persistent buffer's last use.
void frees(Program& program);

// ZeRO: the first write of a gradient bucket buffer waits for the
// reduction that frees the one `bucket_buffers` before it
// (lower/back_pressure.cc).
void back_pressure(Program& program, int bucket_buffers);

// How every instruction runs (program.h's table): its lane, and for what
// talks to other ranks its group, sequence number, algorithm (automatic
// resolved by the run's `menus`, LowerRequest::menus, when given) and wire
// bytes. The last pass: nothing after it moves instructions.
void facts(const Context& context, Program& program, const std::vector<comm::AlgorithmMenu>& menus);

// Appends an instruction; returns its id.
int emit(Program& program, Instr instr);
// Appends a buffer; returns its index.
int add_buffer(Program& program, Buffer buffer);

}  // namespace px::parallel::passes
