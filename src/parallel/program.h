// Program: what one rank runs for one training (or evaluation) step. It is
// the rank's local graph(s) plus a list of typed instructions; the runtime's
// ProgramExecutor runs it and plan::simulate replays the very same list.
//
//   Compute{node}                    run one node of the micro-batch's local graph
//   Collective{kind, axis, op, in, out, codec}   over the mesh axis' group
//   Reshard{node, axis, from, to}    a local value's placement changed along an axis
//   Route{node, axis}                a mixture of experts' rows to their experts' ranks, or back
//   Send / Recv{value, peer}         a value to / from another pipeline stage
//   Accumulate{value -> buffer}      a gradient into its bucket (copy, then add)
//   Norm{gradients -> norm}          this rank's squares of each parameter's gradient
//   Finite{gradient -> flag}         1 in the flag if the gradient has a non-finite element
//   Clip{gradients, norm}            the global norm read; gradients scaled to the clip
//   Update{param shard}              the optimizer on a shard of parameters
//   Free{buffer}                     a program buffer's last use
//
// A deferred instruction (P3's updates) belongs to the previous step: it
// runs at this step's head, after the previous step's instructions it
// names in `after` (parallel/lower/defer_updates.cc).
//
// Every instruction has a lane, a micro-batch (-1: once per step), a
// priority (lower is more urgent), dependencies (`after`: instruction
// indices; an instruction also follows everything before it on its lane)
// and a readable name. How it runs is stamped once, by lower/facts.cc, and
// read by the executor, the simulator and the flight recorder alike:
//   lane      compute: the rank's main thread, in list order (computes,
//             accumulations, updates, and collectives and reshards that
//             block it); progress:<axis>: the axis' progress thread, in
//             list order, while the main thread goes on (an axis whose
//             collectives overlap compute: the data path, a model axis'
//             partial gradients); p2p:<axis>:
//             pipeline transfers (a send is posted, a receive waited for)
//   group     communicating instructions: index into Program::groups
//   sequence  its place among this step's calls on that group (every
//             member runs them in the same order, so it names one call)
//   algorithm the collective algorithm it runs (Program::collective's,
//             automatic resolved where the lowering knew the run's menus)
//   wire      bytes this rank sends, per link class (comm/wire_bytes.h),
//             for that algorithm; a receive's, the bytes it receives
//   job       on a progress lane: the engine job it runs as
//             (comm/engine/job.h) and its slices (comm::slice_plan; more
//             than one under P3): a codec's exchange, an accumulating
//             reduce-scatter and a bf16 gather are custom jobs, whole
//   rounds    on a progress lane: the announcement rounds the engine runs
//             for it (comm::announcement_rounds: one before each slice);
//             0 inline (a run without overlap, ExecutionOptions, runs
//             its progress lanes inline too, and so none)
//
// Values of a local graph are addressed by ValueId; every local graph has
// the global graph's ids (parallel/lower.h), so one id names a value in
// every micro-batch. Flat float buffers (gradient buckets, parameter and
// gradient shards, gathered parameters, the loss) are addressed by Region:
// a buffer index and an element range. Buffers are float32 but for one
// case: under bf16 mixed precision, ZeRO-3 gathers the parameters only
// bf16 nodes read (GEMM weights) into bf16 buckets (Buffer::dtype).
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "comm/compression/spec.h"
#include "comm/collectives.h"
#include "comm/engine/job.h"
#include "comm/wire_bytes.h"
#include "comm/transport.h"
#include "graph/graph.h"
#include "parallel/lower/propagate.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/strategy.h"

namespace px::parallel {

// A value laid out in a flat buffer (a gradient in its bucket, a parameter
// in the flat parameter buffer).
struct BufferMember {
  ValueId value = kNoValue;  // the parameter (for gradients: the parameter whose gradient it is)
  std::string name;          // the parameter's name
  int64_t offset = 0;        // elements, in the buffer
  int64_t count = 0;
  bool operator==(const BufferMember&) const = default;
};

struct Buffer {
  enum class Kind {
    params,        // every parameter, flat in bucket layout (replicated storage)
    param_shard,   // this rank's block of every parameter bucket (ZeRO-3 storage)
    param_bucket,  // one bucket's parameters gathered whole (ZeRO-3, freed after use)
    grad_bucket,   // one bucket's gradients (summands, then reduced)
    grad_shard,    // this rank's block of every gradient bucket, reduced (ZeRO-1/2/3)
    loss,          // the step's loss (one float)
    norm,          // the step's squared gradient norm (one float)
    flags,         // per compressed gradient collective, its agreed non-finite flag (one float each)
  };
  Kind kind = Kind::grad_bucket;
  std::string name;
  int64_t count = 0;        // elements of `dtype`
  // float32, but a param_bucket whose members only bf16 nodes read
  // (graph/precision.h's read_only_at_bf16) under ZeRO-3: gathered in bf16.
  DType dtype = DType::f32;
  bool persistent = false;  // lives across steps (parameters, sharded gradients)
  int bucket = -1;          // grad_bucket / param_bucket: the bucket it holds
  std::vector<BufferMember> members;
  int64_t bytes() const { return count * static_cast<int64_t>(dtype_size(dtype)); }
  bool operator==(const Buffer&) const = default;
};

std::string_view buffer_kind_name(Buffer::Kind kind);

struct Region {
  int buffer = -1;
  int64_t offset = 0;  // elements
  int64_t count = 0;
  bool operator==(const Region&) const = default;
};

// One bucket: gradients fused in the order backward produces them, and the
// same parameters' storage (ZeRO shards are this rank's block of each bucket).
struct BucketLayout {
  int64_t offset = 0;  // elements, in the flat parameter layout
  int64_t count = 0;
  std::vector<int> members;  // indices into Program::params
  int priority = 0;          // the most urgent member's forward order (0: needed first)
  int64_t shard_offset = 0;  // this rank's block: offset in the shard buffers
  int64_t block_begin = 0;   // and where it starts within the bucket
  int64_t block_count = 0;
  int grad_buffer = -1;   // its Buffer::Kind::grad_bucket
  int param_buffer = -1;  // ZeRO-3: its Buffer::Kind::param_bucket
  // Expert weights (expert parallelism): reduced, and under ZeRO sharded
  // and gathered, over the data axis alone (the expert-data group), not
  // the data path's data x expert ranks.
  bool experts = false;
  bool operator==(const BucketLayout&) const = default;
};

// A parameter of the model and where it sits.
struct ParamLayout {
  ValueId value = kNoValue;
  ValueId grad = kNoValue;  // kNoValue in programs without backward
  std::string name;
  Shape shape;         // this rank's part (split along the model axes), or the whole
  Shape global_shape;  // the whole parameter
  AxisPlacements placement;  // per mesh axis; B on the data axis (ZeRO's shards are the buckets')
  bool weight_decay = false;
  double sign_rate = 0;  // > 0: moved by sign at this rate (graph/graph.h's Value::sign_rate)
  int64_t offset = 0;  // elements, in the flat parameter layout (bucket-contiguous)
  int bucket = -1;
  int forward_order = 0;  // rank of its first use in forward: 0 is needed first
  bool operator==(const ParamLayout&) const = default;
};

// Instructions. Indices into Program::instrs are instruction ids.
struct Compute {
  int node = -1;  // in the micro-batch's local graph
  bool operator==(const Compute&) const = default;
};

struct Collective {
  comm::Collective kind = comm::Collective::allreduce;
  int axis = 0;  // mesh axis
  comm::Reduction op = comm::Reduction::sum;
  Region input;   // allreduce: in place (input only)
  // reduce_scatter: this rank's block; allgather: the whole, in the output
  // buffer's dtype (a bf16 bucket: the float32 input rounded, half the bytes)
  Region output;
  bool accumulate = false;  // reduce_scatter: add into the output instead of overwriting it
  // Gradient compression with error feedback (one tensor, viewed as a
  // rows x cols matrix); Method::none for a plain collective.
  comm::compression::Spec codec;
  int64_t codec_rows = 1, codec_cols = 1;
  // DGC's momentum correction (LoweringOptions::local_momentum): each rank
  // compresses its own velocity u = m*u + g. 0: off.
  double momentum = 0;
  // Compressed: the flag the ranks agreed on (a Finite, then its max
  // allreduce, before this on the lane). Set, no codec state may take the
  // gradient in: the collective hands on NaN so the norm skips the step.
  Region agreement;
  // >= 0: over Program::subgroups[subgroup], some of the axis' ranks (the
  // pipeline stages sharing a parameter) instead of all of them.
  int subgroup = -1;
  // > 0 (P3): on the progress lane it runs in slices of about this many
  // bytes, and a more urgent collective (Instr::priority) queued later runs
  // before its remaining slices. 0: whole.
  int64_t slice_bytes = 0;
  // Over the data axis alone, not the data path's joined group: the
  // expert weights' gradients under expert parallelism, which each expert
  // rank holds for its own experts (parallel/expert_parallel.h). Inline
  // on the compute lane.
  bool expert_data = false;
  bool operator==(const Collective&) const = default;
};

// A value of the micro-batch's local graph placed differently along one
// mesh axis (lower/propagate.h inserted a reshard node): the one rule's
// collective over the axis' group, from the node's input into its output.
struct Reshard {
  int node = -1;  // the reshard node of the micro-batch's local graph
  int axis = 0;
  Placement from, to;
  bool operator==(const Reshard&) const = default;
};

// Expert parallelism's routed exchange (graph/ops/moe_dispatch.cc): a
// moe_dispatch node's rows to the ranks of their experts along the expert
// axis, or a moe_undispatch node's back to the ranks of their tokens. The
// ranks first agree on every rank's per-expert counts (an allgather, which
// also carries each rank's layer and expert count: a disagreement, or a
// route to an expert that does not exist, is a named error on every rank),
// then exchange the rows by an all-to-all-v sized by those counts; how
// many rows arrive is known only then (the executor sizes the value by
// it; the spec's is what a balanced routing brings). `overlapped`: the
// schedule interleaves two micro-batches, so the other one's compute runs
// while this exchange is in flight: it goes on the expert axis' progress
// lane, and its outputs' readers wait for it (`after`).
struct Route {
  int node = -1;  // the moe_dispatch or moe_undispatch node of the micro-batch's local graph
  int axis = 0;   // the expert axis
  bool overlapped = false;
  bool operator==(const Route&) const = default;
};

// Point-to-point between pipeline stages: a value of the micro-batch's
// local graph to (from) the rank at coordinate `peer` along `axis`. The
// sender does not wait (the schedule was checked for deadlock with sends
// that never block); the receiver waits for the value. `tag` is unique per
// value, micro-batch and direction within a step.
//
// `dtype` is what the value travels in: its own, or bf16 for a float32
// value that every reader on the later stages reads at bf16 precision (a
// GEMM's operand: lower/pipeline.cc). The sender rounds it as it sends;
// the receiving rank's local graphs hold it as BF16.
struct Send {
  ValueId value = kNoValue;
  int axis = 0;
  int peer = 0;
  uint32_t tag = 0;
  DType dtype = DType::f32;
  bool operator==(const Send&) const = default;
};

struct Recv {
  ValueId value = kNoValue;
  int axis = 0;
  int peer = 0;
  uint32_t tag = 0;
  DType dtype = DType::f32;
  bool operator==(const Recv&) const = default;
};

struct Accumulate {
  ValueId from = kNoValue;  // a value of the micro-batch's local graph
  Region into;
  bool operator==(const Accumulate&) const = default;
};

// Per parameter, the squares of its gradient: `into` holds one float per
// parameter of the model, in declaration order (every rank alike, whatever
// it holds), and region i's squares (times `weights[i]`; empty:
// all 1) go to entry `params[i]`; entries of parameters this rank does not
// count stay 0. An allreduce of `into` follows over each axis that shards
// the gradients or splits the parameters; a region that the ranks of a
// model axis hold alike counts 1 / (their number), and a parameter two
// pipeline stages share only on the first. Clip adds the entries in
// parameter order, so the global norm is summed in one order whatever the
// strategy: an entry one rank wrote arrives unchanged (x + 0 + .. = x).
struct Norm {
  std::vector<Region> gradients;
  std::vector<double> weights;
  std::vector<int> params;  // per region: its parameter's entry in `into`
  Region into;
  bool operator==(const Norm&) const = default;
};

// Whether a gradient may enter a codec's error-feedback state: `into`
// (one float) becomes 1 if any element of `gradient` is not finite, else 0.
// A max allreduce of it over the ranks then tells every rank alike.
struct Finite {
  Region gradient;
  Region into;
  bool operator==(const Finite&) const = default;
};

// The global gradient norm is the square root of `norm`'s entries (Norm's
// per-parameter squares) added in order; when it exceeds the step's clip
// every gradient is scaled by clip / norm (before any update reads them).
struct Clip {
  std::vector<Region> gradients;
  Region norm;
  bool operator==(const Clip&) const = default;
};

// The optimizer on parameter elements: parameter `param` of Program::params,
// elements [offset, offset + count), gradient in `gradient`, parameter
// storage in `storage`.
struct Update {
  int param = -1;
  int64_t offset = 0;
  int64_t count = 0;
  Region gradient;
  Region storage;
  bool operator==(const Update&) const = default;
};

struct Free {
  int buffer = -1;
  bool operator==(const Free&) const = default;
};

using Operation =
    std::variant<Compute, Collective, Reshard, Route, Send, Recv, Accumulate, Norm, Finite, Clip, Update, Free>;

// Where an instruction runs (the header's table).
struct Lane {
  enum class Kind : uint8_t { compute, progress, p2p };
  Kind kind = Kind::compute;
  int axis = -1;  // progress, p2p: the mesh axis
  bool operator==(const Lane&) const = default;
};

struct Instr {
  Operation op;
  Lane lane;
  int micro_batch = -1;  // -1: once per step
  // Among what waits on the progress lane, lower runs first (P3: the
  // forward order of the gradient's layer); equal ones in list order.
  int priority = 0;
  std::vector<int> after;
  // Runs on the previous step's results, at this step's head (P3's
  // updates, and the frees after them): its `after` names instructions of
  // the previous step. The first step has none to run; the executor's
  // finish() runs what the last step left. See step_order().
  bool deferred = false;
  std::string name;
  int group = -1;         // Program::groups (-1: talks to no group)
  int64_t sequence = -1;  // among this step's calls on `group`
  // The algorithm its collective (or reshard's) runs: resolved at lowering
  // from the run's menus (LowerRequest::menus), or automatic when the
  // lowering knew none (the run's cost model then chooses).
  comm::Algorithm algorithm = comm::Algorithm::automatic;
  comm::WireBytes wire;
  comm::JobKind job = comm::JobKind::custom;  // on a progress lane: the engine's job
  int slices = 1;                             // and the slices it runs in,
  int announcement_rounds = 0;                // after this many agreement rounds
  bool operator==(const Instr&) const = default;
};

// The order a step's instructions take effect in: the list without the
// deferred ones, then the deferred ones (which run at the next step's head
// on what this step made). Liveness follows it.
std::vector<int> step_order(const std::vector<Instr>& instrs);

// Per instruction: whether a deferred instruction waits for it (it runs on
// past its step's end: P3's gradient reductions). A deferred instruction's
// `after` names the previous step's instance of these.
std::vector<bool> carried_instructions(const std::vector<Instr>& instrs);

// "compute", "progress:<axis>" or "p2p:<axis>" (str() prints it).
struct Program;
std::string lane_name(const Program& program, const Lane& lane);

// The ranks a collective or reshard talks with: the ones that differ from
// this rank only along `axis` (and, for a subgroup, sit at one of its
// coordinates there; with a joined axis, along that axis too). `key` is
// equal on every member and unique to the group.
struct CommGroup {
  int axis = 0;
  int subgroup = -1;        // Program::subgroups, or -1: the whole axis
  // >= 0: the data axis' group joined with the context or the expert axis
  // (the weight gradients are summands along it too: the data path's
  // collectives run over data x context or data x expert ranks,
  // parallel::joined_axis).
  int joined_axis = -1;
  // World ranks, by coordinate along the axis (with a joined axis: by
  // data coordinate, then the joined axis' coordinate).
  std::vector<int> ranks;
  int rank = 0;             // this rank's place in `ranks`
  std::string key;
  bool operator==(const CommGroup&) const = default;
};

// One micro-batch of this rank's rows.
struct MicroBatch {
  int64_t rows = 0;        // 0: this rank has no rows in it (computes nothing, contributes zeros)
  int64_t row_begin = 0;   // within the rank's rows
  int64_t row_offset = 0;  // of its first row in the global batch (dropout masks)
  int graph = -1;          // index into Program::graphs (-1 with no rows)
  bool operator==(const MicroBatch&) const = default;
};

// Some ranks of one mesh axis, by coordinate along it: a collective's
// group smaller than the axis (Collective::subgroup). Equal on every rank
// of the axis, which splits the axis' communicator once for each.
struct Subgroup {
  int axis = 0;
  std::vector<int> coords;
  bool operator==(const Subgroup&) const = default;
};

// What pipeline parallelism decided (lower/pipeline.h); axis -1 without a
// pipeline.
struct PipelineLayout {
  int axis = -1;
  PipelineSchedule schedule;        // every pipeline rank's action list
  std::vector<int> stage_starts;    // per virtual stage: its first forward node in the lowered global graph
  std::vector<std::string> stage_layers;  // per virtual stage: its first and last node names, for people
  std::vector<double> stage_cost;   // per virtual stage: flops + bytes, forward and backward
  // Every parameter of the model, in declaration order, with its whole
  // shape and the pipeline coordinate that owns it (its first holder:
  // gathers and checkpoints take it from there).
  struct Param {
    std::string name;
    Shape shape;
    int owner = 0;
    bool operator==(const Param&) const = default;
  };
  std::vector<Param> params;
  bool operator==(const PipelineLayout&) const = default;
};

// For people (`parallax lower --print-schedule`): the stages, their layers
// and shares of the cost, the analytical bubble and the timeline.
std::string describe_pipeline(const PipelineLayout& pipeline);

struct Program {
  Strategy strategy;
  int rank = 0;
  std::vector<int> coords;  // in strategy.mesh
  // Local graphs, one per distinct micro-batch size, every one with the
  // global graph's value ids (forward and, when training, backward).
  std::vector<Graph> graphs;
  std::vector<MicroBatch> micro_batches;
  // Rows of the global batch this program was lowered for (the batch
  // inputs' dim 0): a partial last batch is another lowering with fewer.
  int64_t global_rows = 0;
  std::vector<ValueId> batch_inputs;  // split S(0) along the data axis: fed per micro-batch
  // Each batch input's id in the forward graph the Program was lowered
  // from: what StepInput::feeds names it by. Local ids differ where the
  // lowering inserted a reshard before an input declared late.
  std::vector<ValueId> batch_feeds;
  // Per local graph, per value: where the shard sits in the unsplit value
  // (ops read it: graph/op.h), without the micro-batch's rows; and per value
  // whether dim 0 is the batch split along the data axis (the executor adds
  // the micro-batch's global row offset there).
  std::vector<std::vector<ShardBox>> boxes;
  std::vector<bool> batch_rows;
  ValueId loss = kNoValue;
  std::vector<ValueId> outputs;  // returned per micro-batch (evaluation: logits)
  std::vector<ParamLayout> params;
  std::vector<BucketLayout> buckets;  // in the order backward completes them
  int64_t param_count = 0;            // elements of every parameter
  int64_t shard_count = 0;            // elements of this rank's shard (ZeRO; 0 otherwise)
  std::vector<Buffer> buffers;
  std::vector<Instr> instrs;
  int params_buffer = -1;  // Buffer::Kind::params, or
  int param_shard_buffer = -1;  // Buffer::Kind::param_shard (ZeRO-3)
  int grad_shard_buffer = -1;   // ZeRO-1/2/3
  int loss_buffer = -1;
  int norm_buffer = -1;  // with a global gradient norm
  bool training = false;
  std::vector<Subgroup> subgroups;
  std::vector<CommGroup> groups;  // every group an instruction talks with (Instr::group)
  // The collective algorithm the wire bytes are stamped for (LowerRequest::collective).
  comm::CollectiveOptions collective;
  PipelineLayout pipeline;

  // Where compute reads parameter `param` (an index into params) from: the
  // flat parameters, or (ZeRO-3) its bucket's gathered buffer.
  Region param_source(int param) const;
  // A region's bytes, in its buffer's dtype.
  int64_t bytes(const Region& region) const {
    return region.count * static_cast<int64_t>(dtype_size(buffers.at(static_cast<size_t>(region.buffer)).dtype));
  }
  const Graph& graph_of(int micro_batch) const {
    return graphs.at(static_cast<size_t>(micro_batches.at(static_cast<size_t>(micro_batch)).graph));
  }
  // One instruction a line (golden files pin this form).
  std::string str() const;
  std::string str(size_t instr) const;
  // What a trace calls instruction i, the executor's and the simulator's
  // alike: "h.0.attn.qkv (linear)" for a compute, "value (from -> to)" for
  // a reshard of that value, "update NAME" for a local pass, the name for a collective.
  std::string event_name(size_t i) const;
  bool operator==(const Program& other) const;
};

}  // namespace px::parallel
