// ProgramExecutor: runs a lowered Program (parallel/program.h), one step a
// call, on this rank. It is the only executor there is: data, tensor and
// pipeline parallelism with ZeRO-1/2/3, a parameter-server worker's
// gradients, and evaluation and sampling (one-rank forward programs) all
// run through it.
//
// Compute instructions run their node's kernel on the calling thread (the
// kernels thread through kernels/threads.h); collectives run inline, or with
// overlap on the rank's progress engine (comm/engine) while compute goes on;
// a pipeline stage's sends are posted without waiting and its receives wait
// (executor_pipeline.cc); an instruction waits for the instructions it lists
// in `after`. Values are
// freed right after their last use and buffers at their Free (liveness);
// trace records carry the instruction id.
//
// How it runs is parallel::ExecutionOptions (overlap, traces), shared with
// the simulator. Where and when an instruction runs is the program's: its
// lane, its group, its `after` edges (ZeRO's bucket-buffer back-pressure
// among them), its priority and slices, whether it is deferred to the next
// step's head (P3's updates), the collective algorithm.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/compression/compressor.h"
#include "comm/engine/comm_engine.h"
#include "core/memory.h"
#include "parallel/execution.h"
#include "parallel/lower/liveness.h"
#include "parallel/program.h"
#include "runtime/optimizer/optimizer.h"
#include "runtime/state/param_store.h"
#include "runtime/state/safetensors.h"
#include "runtime/state/sharded_tensors.h"
#include "runtime/fault/flight_recorder.h"
#include "runtime/executor/buffer_pool.h"
#include "runtime/executor/flight_log.h"
#include "runtime/executor/trace.h"
#include "runtime/executor/transfers.h"

namespace px {

struct StepInput {
  // This rank's rows of every batch input (Program::batch_inputs), whole,
  // by its id in the forward graph (Program::batch_feeds): the executor
  // cuts the micro-batches.
  std::vector<std::pair<ValueId, Tensor>> feeds;
  // Rows of the global batch these feeds are part of: the step runs the
  // program lowered for that many (add_program). 0: the active program's.
  int64_t global_rows = 0;
  uint64_t seed = 0;  // dropout masks depend on (seed, global row)
  // Added to every micro-batch's global row (a one-rank program over a shard
  // of a larger batch, as a parameter-server worker runs).
  int64_t row_offset = 0;
  uint64_t step = 0;
  double lr = 0;
  double grad_clip = 0;  // clip the global gradient norm to this (0: off)
  // Fault injection (--inject-nan): this rank's loss and first gradient
  // become NaN, as a corrupted batch would make them.
  bool poison = false;
};

struct StepResult {
  double loss = 0;       // the global loss (summed over every rank's rows)
  double grad_norm = 0;  // before clipping (0 without a global norm)
  // The global norm was not finite (some rank's loss or gradient was NaN or
  // infinite): no parameter or optimizer state changed. Every rank sees the
  // same norm, so all skip together. Programs without a global norm (P3)
  // cannot tell before their updates and never skip.
  bool skipped = false;
  int64_t peak_bytes = 0;  // this rank's tensor bytes at most alive during the step
  // This rank's gradient bytes handed to the transport, and what a float32
  // ring allreduce of the same gradients sends (2(p-1)/p * 4n).
  comm::compression::WireStats wire;
  // Per mesh axis: bytes this rank posted to send this step, counted by the
  // axis' communicator (whatever algorithm each collective used).
  std::vector<int64_t> axis_bytes;
  std::vector<std::vector<Tensor>> outputs;  // per micro-batch: Program::outputs
  // The most bytes of forward activations (values forward nodes made or
  // this rank received from an earlier stage) alive at once: what a
  // pipeline schedule keeps for backward.
  int64_t activation_peak_bytes = 0;
  // Pipelines: from the step's start to its last compute, and how much of
  // that this rank spent computing (the rest is its bubble).
  double pipeline_span_us = 0;
  double pipeline_busy_us = 0;
};

// Bytes this rank holds between steps, and the most buffer bytes alive at once.
struct ExecutorMemory {
  int64_t parameters = 0;         // whole flat parameters, or the ZeRO-3 shard
  int64_t gradient_shard = 0;     // ZeRO: this rank's reduced block of every bucket
  int64_t gradient_buckets = 0;   // every gradient bucket at once (what ZeRO-0/1's accounting keeps)
  int64_t gradient_buffer_peak = 0;  // the most bucket-buffer bytes alive at once, measured
  int64_t gathered_parameter_peak = 0;  // ZeRO-3: the most gathered parameter bytes alive at once
  int64_t optimizer_state = 0;
};

// The one rule's collective on a local tensor along one axis: `in` placed
// `from` becomes `to`; `whole` is the value's local shape with this axis'
// split undone. Collective over `comm` (every rank of the axis calls it).
Tensor reshard_tensor(comm::Communicator& comm, const Tensor& in, const Placement& from, const Placement& to,
                      const Shape& whole, const comm::CollectiveOptions& options = {});

// This rank's communicators: one on each mesh axis, by axis index (nullptr:
// the axis has one rank; empty: one rank everywhere), and under context
// parallelism the data path's, over data x context ranks
// (parallel::MeshGroups::data).
struct AxisGroups {
  std::vector<comm::Communicator*> axis;
  comm::Communicator* data = nullptr;
};
// Pointers into `mesh`, which must outlive the executor.
AxisGroups axis_groups(parallel::MeshGroups& mesh);

class ProgramExecutor {
 public:
  // `groups`: this rank's group on each axis of the program's mesh.
  // `optimizer` is used by programs with updates.
  ProgramExecutor(parallel::Program program, AxisGroups groups, OptimizerConfig optimizer = {},
                  parallel::ExecutionOptions options = {});
  ~ProgramExecutor();
  ProgramExecutor(const ProgramExecutor&) = delete;
  ProgramExecutor& operator=(const ProgramExecutor&) = delete;

  // Takes the parameters from a whole ParamStore (identical on every rank):
  // copies this rank's part of each (its model-axis shard; under ZeRO-3 its
  // blocks of that) into its storage.
  void set_parameters(const ParamStore& params);
  // The whole parameters. Replicated storage on one model shard: views into
  // the executor's (they change with every step). Split along a model axis
  // or ZeRO-3: gathered from every rank into new tensors, so every rank
  // must call it (collective).
  ParamStore parameters();

  // Programs without updates (evaluation, sampling, a parameter-server
  // worker): read the parameters from `params` itself, no copy. Call again
  // when its tensors are replaced.
  void use_parameters(const ParamStore& params);

  // Another lowering of the same strategy on this rank, for a global batch
  // of other size (an epoch's partial last batch: Program::global_rows).
  // It shares every layout with the first (parameters, buckets, buffers,
  // optimizer shards, gradient collectives: a named error otherwise), so
  // one set of parameters, optimizer and error-feedback state serves both;
  // its local graphs, micro-batches and instructions are its own.
  void add_program(parallel::Program program);
  bool has_program_for(int64_t global_rows) const;

  StepResult run(const StepInput& input);
  // Runs what the last step deferred (P3's updates: before anything else
  // reads the parameters) and waits for the collectives it left running.
  void finish();

  // Programs without updates: the reduced gradient of parameter `name` (a
  // view, valid until the next run).
  Tensor gradient(const std::string& name) const;

  Optimizer& optimizer() { return *optimizer_; }
  // For a checkpoint: this rank's runs of every parameter ("<param>") and
  // optimizer slot ("<param>.<slot>") with their global boxes, leaving out
  // copies another rank writes (this rank writes a copy when it sits at
  // coordinate 0 of every mesh axis that replicates it; `every_copy`: this
  // rank writes every copy it holds, for a checkpoint directory other
  // hosts do not see). Local: no communication.
  std::vector<SavedRun> state_runs(bool every_copy = false) const;
  // Parameters and optimizer state from a checkpoint saved under any
  // strategy: this rank reads the runs it holds.
  void load_state(const ShardedTensors& saved, int64_t optimizer_steps);

  // Compressed gradients: every rank's error-feedback state (residuals,
  // PowerSGD's Q, DGC velocities) as "rank<r>.<param>.<entry>" (collective).
  NamedTensors gather_compression_state();
  // This rank's entries of a state saved at the same rank count with the
  // same compression; px::Error names a missing or mis-sized entry.
  void load_compression_state(const SafetensorsFile& file);
  bool compressing() const { return !compressors_.empty(); }

  ExecutorMemory memory() const;
  // Bytes of one micro-batch's activations this rank keeps from its
  // forward for its backward (values made in forward, or received from an
  // earlier stage, that a backward node reads last), from the program.
  int64_t stashed_bytes_per_micro_batch() const;
  // The program of the last step run (or the first one given, before any).
  const parallel::Program& program() const { return program_; }
  void set_tracing(bool on);
  // Record where this rank is and its communication into `recorder`
  // (runtime/fault/flight_recorder.h; nullptr: off). It must outlive the executor.
  void set_flight_recorder(FlightRecorder* recorder) { flight_.set_recorder(recorder); }
  // The records since the last call, each named from its instruction.
  // Take them after every step: the names come from the Program that ran
  // (a partial batch runs another). A record's name is made here, not
  // while the step runs: small allocations between the step's tensors
  // fragmented the heap and made a traced GPT step 1.5-2.4x slower (26k
  // more page faults over three steps).
  std::vector<TraceRecord> take_trace();

 private:
  // A compressed gradient's compressor and, with DGC's momentum correction,
  // this rank's velocity.
  struct Codec {
    std::string param;  // the one parameter whose gradient it exchanges
    comm::compression::GradientCompressor compressor;
    std::vector<float> velocity;  // empty without local momentum
    // The state before this step's call, put back if the step is skipped.
    comm::compression::GradientCompressor::State state_before;
    std::vector<float> velocity_before;
  };
  using JobId = comm::CommEngine::JobId;

  // A program and the per-instruction facts the step loop reads of it.
  // The active one lives in the members below (program_, liveness_, ...);
  // the others wait here and are swapped in by use_program_for.
  struct Lowering {
    parallel::Program program;
    parallel::Liveness liveness;
    std::vector<int> member_of, shard_of_update;
    std::vector<bool> carried;
    int last_compute = -1;
    std::map<int, Codec*> codecs;
  };
  // Indexes program_'s instructions (liveness, accumulate members, update
  // shards, the last compute) and returns the optimizer shards its updates
  // name, in order.
  std::vector<ParamShard> index_instructions();
  std::vector<int> gradient_collectives() const;  // instruction ids, in order
  void swap_active(Lowering& other);
  void use_program_for(int64_t global_rows);

  // program_executor.cc: the step loop. A step's state beside the members.
  struct Step {
    const StepInput& input;
    StepResult& result;
    bool pipelined = false;
    double start_us = 0;  // pipelines: when the step began
    bool optimizer_begun = false;
  };
  void begin_step(const StepInput& input);  // feeds cut into micro-batches, buffers reset
  void execute(int id, Step& step);
  // dispatch, with a trace record for the local instructions compute() does not record.
  template <typename Op>
  void dispatch_traced(int id, const Op& op, Step& step);
  template <typename Op>
  void dispatch(int id, const Op& op, Step& step);
  void end_step(StepResult& result, double lr);

  // executor_local.cc: the instructions that talk to no other rank.
  void compute(int id, const parallel::Compute& op, const StepInput& input);
  // executor_reshard.cc
  void reshard(int id, const parallel::Reshard& op, const StepInput& input);
  void accumulate(int id, const parallel::Accumulate& op);
  void norm(const parallel::Norm& op);
  void finite(const parallel::Finite& op);
  double clip(const parallel::Clip& op, double clip);  // returns the global norm
  void update(int id, const parallel::Update& op, double lr);
  // Waits for instruction `id`'s engine job, if it has one this step.
  void wait_for(int id);

  // executor_pipeline.cc: Send and Recv (their communication: Transfers).
  void send(int id, const parallel::Send& op);
  void recv(int id, const parallel::Recv& op, uint64_t step);
  // The gathered parameters of every pipeline stage (collective over the pipeline axis).
  NamedTensors gather_stages(NamedTensors mine);

  // executor_collectives.cc: collectives inline or on the engine.
  void collective(int id, const parallel::Collective& op, uint64_t step);
  static std::function<void(comm::Communicator&)> compressed_exchange(Codec* codec, std::span<float> input,
                                                                     const float* agreed, uint64_t step,
                                                                     double momentum,
                                                                     comm::compression::WireStats* wire);
  JobId dense(const parallel::Collective& op, const parallel::Instr& instr, std::span<float> input,
              comm::Buffer output, int priority, comm::Communicator& group);
  // The collective options an instruction runs with: the program's, with
  // the algorithm the lowering resolved for it.
  comm::CollectiveOptions options_of(const parallel::Instr& instr) const;
  void collect_engine_trace();
  std::unique_ptr<Codec> make_codec(const parallel::Collective& op) const;
  // The communicator of the group an instruction names (nullptr: one rank).
  comm::Communicator* communicator_of(const parallel::Instr& instr);
  // Bytes this rank sent for the step's gradient and parameter collectives.
  comm::compression::WireStats step_wire() const;

  // executor_state.cc: parameters, optimizer and compression state.
  void gather_buckets(std::vector<float>& flat);  // every rank's blocks into `flat` (param layout)
  // A parameter-shaped tensor of this rank's model shard -> the whole one
  // (collective over the model axes that split it), and back.
  Tensor whole_of(const Tensor& local, const parallel::ParamLayout& param);
  Tensor local_of(const Tensor& whole, const parallel::ParamLayout& param) const;
  // A run of the rank's model shard of `param`: its elements [begin, end).
  parallel::ShardRun run_of(const parallel::ParamLayout& param, int64_t begin, int64_t end) const;
  // Whether this rank writes its copy of `param`'s run to a checkpoint;
  // `split_over_data`: ZeRO gives each data rank its own run.
  bool writes_copy(const parallel::ParamLayout& param, bool split_over_data, bool every_copy) const;

  parallel::Program program_;  // the active program
  BufferPool buffers_;         // program_'s buffers (every program's: they share them)
  parallel::Liveness liveness_;
  std::vector<Lowering> programs_;  // the others (add_program)
  std::vector<comm::Communicator*> groups_;  // by mesh axis (AxisGroups::axis)
  comm::Communicator* data_group_ = nullptr;  // AxisGroups::data: data x context ranks
  comm::Communicator* group_;  // the progress lane's: the data path's
  std::vector<uint64_t> sent_before_;  // per mesh axis: axis_bytes_sent() when the step began
  uint64_t axis_bytes_sent(size_t axis) const;  // this rank's bytes sent so far on a mesh axis
  parallel::ExecutionOptions options_;
  std::unique_ptr<comm::CommEngine> engine_;
  std::optional<Optimizer> optimizer_;
  std::vector<int> shard_of_update_;  // per instruction: its optimizer shard (-1)
  std::vector<std::string> declared_;  // parameter names in declaration order

  std::vector<int> member_of_;           // per instruction: Accumulate's member index
  // Per instruction: a deferred instruction waits for it, so the step
  // returns with it still running (P3's gradient reductions).
  std::vector<bool> carried_;
  std::vector<std::vector<Tensor>> live_;  // per micro-batch, by value id
  std::vector<JobId> job_;               // per instruction: its engine job this step (-1)
  std::vector<int> param_of_;            // per value id: index into program params (-1)
  std::vector<Tensor> external_;         // per program param: the caller's tensor (use_parameters)
  std::vector<std::unique_ptr<Codec>> codec_store_;  // one per gradient collective, in order
  std::map<int, Codec*> codecs_;                   // by the active program's instruction id
  std::map<JobId, Tensor> staging_;               // allgather inputs copied out of their output
  std::map<JobId, int> instr_of_job_;             // for the trace
  std::vector<Codec*> compressors_;               // in instruction order
  std::vector<comm::compression::WireStats> wire_;  // per instruction, this step

  // Deferred instructions (P3) the last step left for the next one's head
  // (or finish()), and that step's learning rate they run with.
  struct Carry {
    bool pending = false;
    double lr = 0;
  } carry_;

  std::optional<Transfers> transfers_;  // made once groups_ is checked
  int last_compute_ = -1;  // the last Compute instruction (where a pipeline's span ends)
  // Forward activations alive and their peak this step, counted by storage
  // as plan/memory.cc counts them: a view (reshape) shares its input's
  // storage, which is counted until the last value sharing it is released.
  // Per micro-batch and value: the value whose storage it holds (kNoValue:
  // none counted), and for a storage's own value its bytes and sharers.
  struct Activations {
    std::vector<std::vector<ValueId>> storage;
    std::vector<std::vector<int64_t>> bytes_of;
    std::vector<std::vector<int>> sharers;
    int64_t bytes = 0, peak = 0;
  } activations_;
  // The account of the thread that made the executor: this rank's tensors
  // (nullptr: the process's, which is this rank's when it is alone).
  MemoryAccount* account_ = current_memory_account();
  // `v` now holds `t`: counted when `counts`, or sharing `view_of`'s storage.
  void hold(int micro, ValueId v, const Tensor& t, bool counts, ValueId view_of = kNoValue);
  void release(int micro, ValueId v);

  // Whether instruction `id`'s engine job this step finished (false without one).
  bool job_finished(int id) const;
  FlightLog flight_;  // this rank's flight record of the step

  bool tracing_ = false;
  uint64_t step_ = 0;
  // This step: this rank's loss summand was not finite (folded into the
  // norm), a gradient was poisoned (--inject-nan), the norm said skip.
  bool poison_ = false, local_loss_bad_ = false, poisoned_ = false, skip_updates_ = false;
  std::vector<TraceRecord> trace_;
};

}  // namespace px
