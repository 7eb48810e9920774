// ProgramExecutor: runs a lowered Program (parallel/program.h), one step a
// call, on this rank (data, tensor, context and pipeline parallelism, ZeRO,
// a parameter-server worker, evaluation, sampling). It walks the
// instructions in list order, each after those it lists in `after`, and
// hands each to its part: kernels here (executor_local.cc), collectives to
// their lane (collective_lanes.h: any axis' progress lane, or inline),
// sends and receives to transfers.h. The parts own the rest: buffer_pool.h,
// gradient_codecs.h, program_set.h (partial batches), flight_log.h, and the
// activations counted by the memory ledger (parallel/memory_ledger.h).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/memory.h"
#include "parallel/execution.h"
#include "parallel/memory_ledger.h"
#include "runtime/executor/collective_lanes.h"
#include "runtime/executor/flight_log.h"
#include "runtime/executor/program_set.h"
#include "runtime/executor/reshard_tensor.h"
#include "runtime/executor/step.h"
#include "runtime/state/sharded_tensors.h"

namespace px {

class ProgramExecutor {
 public:
  // `groups`: this rank's group on each axis of the program's mesh.
  // `optimizer` is used by programs with updates.
  ProgramExecutor(parallel::Program program, AxisGroups groups, OptimizerConfig optimizer = {},
                  parallel::ExecutionOptions options = {});
  ~ProgramExecutor();
  ProgramExecutor(const ProgramExecutor&) = delete;
  ProgramExecutor& operator=(const ProgramExecutor&) = delete;

  // From a whole ParamStore (identical on every rank): this rank's part of
  // each (its model-axis shard; under ZeRO-3 its blocks of that).
  void set_parameters(const ParamStore& params);
  // The whole parameters: views into the executor's storage (replicated on
  // one model shard), or gathered from every rank (collective).
  ParamStore parameters();
  // Programs without updates: read the parameters from `params` itself, no
  // copy. Call again when its tensors are replaced.
  void use_parameters(const ParamStore& params);
  // This rank's own parameter storage, flat (its stages' and shards'
  // parameters in the Program's layout), for averaging replicas in place
  // (runtime/sync/replica.h). Not under ZeRO-3 nor with use_parameters.
  std::span<float> local_parameters();

  // Another lowering of the same strategy on this rank, for a global batch
  // of other size (program_set.h).
  void add_program(parallel::Program program);
  bool has_program_for(int64_t global_rows) const { return programs_.has_for(global_rows); }

  StepResult run(const StepInput& input);
  // Runs what the last step deferred (P3's updates) and waits for the
  // collectives it left running.
  void finish();

  // Programs without updates: parameter `name`'s reduced gradient (a view until the next run).
  Tensor gradient(const std::string& name) const;

  Optimizer& optimizer() { return *optimizer_; }
  // For a checkpoint: this rank's runs of every parameter and optimizer
  // slot it writes (runtime/state/program_state.h). Local.
  std::vector<SavedRun> state_runs(bool every_copy = false) const;
  // Parameters and optimizer state from a checkpoint saved under any strategy.
  void load_state(const ShardedTensors& saved, int64_t optimizer_steps);
  // Compressed gradients' error feedback (gradient_codecs.h); gather: collective.
  NamedTensors gather_compression_state();
  void load_compression_state(const SafetensorsFile& file);
  bool compressing() const { return codecs_.compressing(); }

  ExecutorMemory memory() const;
  // The program of the last step run (the first one, before any).
  const parallel::Program& program() const { return programs_.active().program; }
  void set_tracing(bool on);
  // Where this rank is and its communication (nullptr: off; it must outlive the executor).
  void set_flight_recorder(FlightRecorder* recorder) { flight_.set_recorder(recorder); }
  // The records since the last call, named from the Program that ran: take
  // them after every step (a partial batch runs another Program).
  std::vector<TraceRecord> take_trace();

  // --inject-fault RANK:STEP:moe-capacity | moe-expert: from now on this
  // rank's routed exchanges (executor_route.cc) claim another capacity
  // factor than the other expert ranks', or route a row to an expert that
  // does not exist, as a misconfigured or buggy rank would; the exchange's
  // agreement names it on every rank.
  struct RoutingFault {
    double capacity_shift = 0;
    bool missing_expert = false;
  };
  void inject_routing_fault(const RoutingFault& fault) { routing_fault_ = fault; }

 private:
  struct Step {  // a step's state beside the members
    const StepInput& input;
    StepResult& result;
    bool pipelined = false;
    double start_us = 0;  // pipelines: when the step began
    bool optimizer_begun = false;
  };
  // This step's flags, and what the last one deferred (P3's updates, at its rate).
  struct StepState {
    uint64_t step = 0;
    // This rank's loss summand was not finite, a gradient poisoned (--inject-nan), the norm said skip.
    bool poison = false, local_loss_bad = false, poisoned = false, skip_updates = false;
    bool carry_pending = false;
    double carry_lr = 0;
    std::vector<uint64_t> sent_before;  // per mesh axis: bytes sent when the step began
  };
  struct Parameters {
    std::vector<int> of_value;          // per value id: index into the program's params (-1)
    std::vector<Tensor> external;       // per param: the caller's tensor (use_parameters)
    std::vector<std::string> declared;  // names in declaration order
  };
  const IndexedProgram& active() const { return programs_.active(); }
  const parallel::Program& prog() const { return programs_.active().program; }

  void begin_step(const StepInput& input);  // feeds cut into micro-batches
  void execute(int id, Step& step);
  template <typename Op>
  void dispatch(int id, const Op& op, Step& step);
  void end_step(StepResult& result, double lr);
  void use_program_for(int64_t global_rows);
  void wait_for(int id);  // instruction `id`'s engine job, if it has one this step
  void collect_engine_trace();

  // executor_local.cc
  void compute(int id, const parallel::Compute& op, const StepInput& input);
  void accumulate(int id, const parallel::Accumulate& op);
  void norm(const parallel::Norm& op);
  void finite(const parallel::Finite& op);
  double clip(const parallel::Clip& op, double clip);  // returns the global norm
  void update(int id, const parallel::Update& op, double lr);
  // executor_reshard.cc, executor_pipeline.cc, executor_collectives.cc
  void reshard(int id, const parallel::Reshard& op, const StepInput& input);
  // executor_route.cc: a Route's exchange, and its outputs made values of
  // its micro-batch (`late`: by an engine's job, after the loop went on).
  void route(int id, const parallel::Route& op, const StepInput& input);
  void routed(int id, std::vector<Tensor> outputs, bool late);
  void send(int id, const parallel::Send& op);
  void recv(int id, const parallel::Recv& op, uint64_t step);
  void collective(int id, const parallel::Collective& op, uint64_t step);
  comm::compression::WireStats step_wire() const;
  uint64_t axis_bytes_sent(size_t axis) const;  // this rank's, so far

  ProgramSet programs_;
  BufferPool buffers_;  // every program's (they share them)
  RankGroups groups_;
  parallel::ExecutionOptions options_;
  CollectiveLanes lanes_;
  GradientCodecs codecs_;
  std::optional<Optimizer> optimizer_;
  Parameters params_;
  std::vector<std::vector<Tensor>> live_;  // per micro-batch, by value id
  parallel::ActivationLedger ledger_;  // this step's activations (forward's peak: the result's)
  // This rank's tensors: the account of the thread that made the executor
  // (nullptr: the process's, this rank's when it is alone).
  MemoryAccount* account_ = current_memory_account();
  FlightLog flight_;
  StepTrace trace_;
  StepState step_;
  RoutingFault routing_fault_;
  // Overlapped Routes running on the expert axis' engine: per instruction,
  // where its job puts the node's outputs (routed() once it is waited for).
  std::map<int, std::shared_ptr<std::vector<Tensor>>> routes_in_flight_;
};

}  // namespace px
