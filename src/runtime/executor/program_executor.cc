// The executor's construction and its step loop: a step's inputs cut into
// micro-batches, every instruction run in list order (each on the lane the
// program names), and the step's result.
#include "runtime/executor/program_executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "comm/collectives.h"
#include "core/memory.h"
#include "kernels/elementwise.h"

namespace px {

using parallel::Buffer;
using parallel::Instr;
using parallel::Region;

namespace {

// The axis whose progress lane the engine runs (the program's lanes name at
// most one: a second overlapping axis needs an engine of its own); the
// data axis when none does.
int progress_axis(const parallel::Program& program) {
  int axis = -1;
  for (const Instr& instr : program.instrs) {
    if (instr.lane.kind != parallel::Lane::Kind::progress) continue;
    PX_CHECK(axis < 0 || axis == instr.lane.axis, "progress lanes on two axes ({} and {}): one engine runs one",
             axis, instr.lane.axis);
    axis = instr.lane.axis;
  }
  return axis >= 0 ? axis : program.strategy.mesh.axis(program.strategy.data_axis);
}

// The slice size the program's progress-lane collectives name (P3; 0:
// whole). The engine cuts every job alike, so they must agree.
int64_t slice_bytes(const parallel::Program& program) {
  int64_t bytes = 0;
  for (const Instr& instr : program.instrs) {
    const auto* c = std::get_if<parallel::Collective>(&instr.op);
    if (c == nullptr || instr.lane.kind != parallel::Lane::Kind::progress || c->slice_bytes == 0) continue;
    PX_CHECK(bytes == 0 || bytes == c->slice_bytes, "progress-lane collectives in slices of {} and {} bytes", bytes,
             c->slice_bytes);
    bytes = c->slice_bytes;
  }
  return bytes;
}

}  // namespace

ProgramExecutor::ProgramExecutor(parallel::Program program, AxisGroups groups, OptimizerConfig optimizer,
                                 parallel::ExecutionOptions options)
    : program_(std::move(program)), buffers_(program_.buffers), groups_(std::move(groups.axis)), data_group_(groups.data),
      group_(nullptr), options_(options) {
  const auto& axes = program_.strategy.mesh.axes();
  if (groups_.empty()) groups_.assign(axes.size(), nullptr);
  if (groups_.size() != axes.size())
    fail("the program's mesh {} has {} axes, the executor was given {} groups", program_.strategy.mesh.str(),
         axes.size(), groups_.size());
  for (size_t a = 0; a < axes.size(); ++a) {
    const int size = groups_[a] ? groups_[a]->size() : 1;
    if (size != axes[a].size)
      fail("the program's mesh axis '{}' has {} ranks, its communicator {}", axes[a].name, axes[a].size, size);
    if (size == 1) groups_[a] = nullptr;
  }
  sent_before_.assign(axes.size(), 0);
  transfers_.emplace(program_, groups_);
  // Under context parallelism the data path spans the context axis too.
  const bool joined = std::any_of(program_.groups.begin(), program_.groups.end(),
                                  [](const parallel::CommGroup& g) { return g.context_axis >= 0; });
  if (joined) {
    const int expected = program_.strategy.data_ranks() * program_.strategy.context_ranks();
    if (data_group_ == nullptr || data_group_->size() != expected)
      fail("the program's data path spans {} ranks (data x context axes), the executor was given a group of {}",
           expected, data_group_ ? data_group_->size() : 0);
  }
  group_ = joined ? data_group_ : groups_[static_cast<size_t>(progress_axis(program_))];
  const int group_size = group_ ? group_->size() : 1;
  PX_CHECK(!program_.graphs.empty(), "a program without a local graph (rank {} has no rows)", program_.rank);
  if (group_size > 1 && options_.overlap) {
    comm::EngineOptions engine;
    engine.collective = program_.collective;
    engine.slice_bytes = slice_bytes(program_);
    engine.trace = options_.trace;
    engine_ = std::make_unique<comm::CommEngine>(*group_, engine);
  }
  size_t values = 0;
  for (const Graph& g : program_.graphs) values = std::max(values, g.values().size());
  param_of_.assign(values, -1);
  for (size_t i = 0; i < program_.params.size(); ++i)
    param_of_[static_cast<size_t>(program_.params[i].value)] = static_cast<int>(i);
  const Graph& local = program_.graphs.front();
  for (ValueId p : local.params()) declared_.push_back(local.value(p).name);

  std::vector<ParamShard> shards = index_instructions();
  if (!shards.empty()) optimizer_.emplace(std::move(optimizer), std::move(shards));
  job_.assign(program_.instrs.size(), -1);
  wire_.assign(program_.instrs.size(), {});
  // Compressed gradients: every gradient collective through its own
  // compressor (vectors with Method::none: dense, but counted alike).
  const std::vector<int> gradients = gradient_collectives();
  const bool compressed = std::any_of(gradients.begin(), gradients.end(), [&](int id) {
    return std::get<parallel::Collective>(program_.instrs[static_cast<size_t>(id)].op).codec.lossy();
  });
  if (compressed && group_size > 1)
    for (int id : gradients) {
      const auto& collective = std::get<parallel::Collective>(program_.instrs[static_cast<size_t>(id)].op);
      codecs_[id] = codec_store_.emplace_back(make_codec(collective)).get();
      compressors_.push_back(codecs_[id]);
    }
}

ProgramExecutor::~ProgramExecutor() = default;

void ProgramExecutor::begin_step(const StepInput& input) {
  const size_t micro = program_.micro_batches.size();
  step_ = input.step;
  poison_ = input.poison;
  local_loss_bad_ = poisoned_ = skip_updates_ = false;
  live_.assign(micro, {});
  activations_.storage.assign(micro, {});
  activations_.bytes_of.assign(micro, {});
  activations_.sharers.assign(micro, {});
  activations_.bytes = activations_.peak = 0;
  for (size_t m = 0; m < micro; ++m) {
    const parallel::MicroBatch& mb = program_.micro_batches[m];
    if (mb.rows == 0) continue;
    live_[m].resize(program_.graphs[static_cast<size_t>(mb.graph)].values().size());
    activations_.storage[m].assign(live_[m].size(), kNoValue);
    activations_.bytes_of[m].assign(live_[m].size(), 0);
    activations_.sharers[m].assign(live_[m].size(), 0);
    for (size_t b = 0; b < program_.batch_inputs.size(); ++b) {
      const ValueId v = program_.batch_inputs[b];  // the local graph's id; the feeds name the forward graph's
      const Tensor* feed = nullptr;
      for (const auto& [id, t] : input.feeds)
        if (id == program_.batch_feeds[b]) feed = &t;
      const Graph& g = program_.graphs[static_cast<size_t>(mb.graph)];
      if (feed == nullptr) fail("executor: batch input '{}' was not fed", g.value(v).name);
      if (feed->dim(0) < mb.row_begin + mb.rows)
        fail("executor: batch input '{}' has {} rows, this rank's micro-batches need {}", g.value(v).name,
             feed->dim(0), mb.row_begin + mb.rows);
      Tensor rows = feed->slice_rows(mb.row_begin, mb.row_begin + mb.rows);
      if (rows.shape() != g.spec(v).shape || rows.dtype() != g.spec(v).dtype)
        fail("{} batch has shape {} {}, the model expects {}", g.value(v).name, rows.shape(), dtype_name(rows.dtype()),
             g.spec(v).str());
      live_[m][static_cast<size_t>(v)] = rows;
    }
  }
  // Gradient buckets kept for the caller (programs without updates) are
  // refilled every step; the loss buffer sums the micro-batches' summands.
  buffers_.begin_step(program_.loss_buffer);
  // The previous step's carried jobs stay: the deferred instructions at
  // this step's head wait for them.
  for (size_t i = 0; i < job_.size(); ++i)
    if (!(carry_.pending && carried_[i])) job_[i] = -1;
  wire_.assign(program_.instrs.size(), {});
  for (size_t a = 0; a < groups_.size(); ++a) sent_before_[a] = axis_bytes_sent(a);
}

void ProgramExecutor::wait_for(int id) {
  const JobId job = job_[static_cast<size_t>(id)];
  if (job < 0) return;
  try {
    engine_->wait(job);
  } catch (const Error& e) {
    flight_.done(id, false);
    throw in_context(program_, step_, id, flight_.site_of(id), e);
  }
  flight_.done(id);
}

bool ProgramExecutor::job_finished(int id) const {
  const JobId job = job_.empty() ? -1 : job_[static_cast<size_t>(id)];
  return job >= 0 && engine_ && engine_->finished(job);
}

// One instruction of the step on the calling thread (or queued on its lane).
void ProgramExecutor::execute(int id, Step& step) {
  const Instr& instr = program_.instrs[static_cast<size_t>(id)];
  // The previous step's work: none before the first step (or after finish()).
  if (instr.deferred && !carry_.pending) return;
  // A Free waits for nothing: a buffer whose last reader still runs on
  // the engine is freed once that job finishes (BufferPool::free), so backward
  // goes on while a bucket it filled is reduced.
  if (!std::holds_alternative<parallel::Free>(instr.op))
    for (int dep : instr.after) wait_for(dep);
  for (int b : liveness_.allocates[static_cast<size_t>(id)]) buffers_.allocate(b, engine_.get());
  std::optional<FlightSite> site;
  if (flight_.on()) site = flight_.at(program_, *transfers_, static_cast<int64_t>(step.input.step) + 1, id);
  try {
    std::visit([&](const auto& op) { dispatch_traced(id, op, step); }, instr.op);
  } catch (const Error& e) {
    flight_.done(id, false);
    flight_.abandon();
    throw in_context(program_, step_, id, site, e);
  }
  // Inline collectives, reshards and receives are done; engine jobs and sends when they finish.
  if (site && (job_.empty() || job_[static_cast<size_t>(id)] < 0) && site->kind != FlightKind::send) flight_.done(id);
  for (ValueId v : liveness_.values[static_cast<size_t>(id)]) {
    release(instr.micro_batch, v);
    live_[static_cast<size_t>(instr.micro_batch)][static_cast<size_t>(v)] = Tensor();
  }
  if (engine_ && buffers_.holds_memory_for_jobs()) buffers_.release_finished(*engine_);
}

// The main thread's local passes beside its computes (which compute() traces itself).
template <typename Op>
constexpr bool kLocalPass = std::is_same_v<Op, parallel::Accumulate> || std::is_same_v<Op, parallel::Norm> ||
                            std::is_same_v<Op, parallel::Finite> || std::is_same_v<Op, parallel::Clip> ||
                            std::is_same_v<Op, parallel::Update>;

template <typename Op>
void ProgramExecutor::dispatch_traced(int id, const Op& op, Step& step) {
  // The main thread's local work beside its computes: on the compute lane too.
  if constexpr (kLocalPass<Op>) {
    const double start = tracing_ ? comm::now_us() : 0;
    dispatch(id, op, step);
    if (tracing_) {
      trace_.push_back({.name = {},
                        .lane = TraceRecord::Lane::compute,
                        .start_us = start,
                        .duration_us = comm::now_us() - start,
                        .bytes = 0,
                        .step = static_cast<int64_t>(step.input.step),
                        .instr = id});
    }
  } else {
    dispatch(id, op, step);
  }
}

void ProgramExecutor::set_tracing(bool on) {
  tracing_ = on && options_.trace;
  // Room for the step's records up front: growing the vector mid-step
  // would allocate between the step's tensors (see take_trace).
  if (tracing_) trace_.reserve(trace_.size() + 2 * program_.instrs.size());
}

std::vector<TraceRecord> ProgramExecutor::take_trace() {
  for (TraceRecord& r : trace_)
    if (r.name.empty() && r.instr >= 0) r.name = program_.event_name(static_cast<size_t>(r.instr));
  return std::move(trace_);
}

template <typename Op>
void ProgramExecutor::dispatch(int id, const Op& op, Step& step) {
  const StepInput& input = step.input;
  if constexpr (std::is_same_v<Op, parallel::Compute>) {
    const double start = step.pipelined ? comm::now_us() : 0;
    compute(id, op, input);
    if (step.pipelined) step.result.pipeline_busy_us += comm::now_us() - start;
    if (step.pipelined && id == last_compute_) step.result.pipeline_span_us = comm::now_us() - step.start_us;
  } else if constexpr (std::is_same_v<Op, parallel::Send>) {
    send(id, op);
  } else if constexpr (std::is_same_v<Op, parallel::Recv>) {
    recv(id, op, input.step);
  } else if constexpr (std::is_same_v<Op, parallel::Accumulate>) {
    accumulate(id, op);
  } else if constexpr (std::is_same_v<Op, parallel::Collective>) {
    collective(id, op, input.step);
  } else if constexpr (std::is_same_v<Op, parallel::Reshard>) {
    reshard(id, op, input);
  } else if constexpr (std::is_same_v<Op, parallel::Norm>) {
    norm(op);
  } else if constexpr (std::is_same_v<Op, parallel::Finite>) {
    finite(op);
  } else if constexpr (std::is_same_v<Op, parallel::Clip>) {
    step.result.grad_norm = clip(op, input.grad_clip);
  } else if constexpr (std::is_same_v<Op, parallel::Update>) {
    // A deferred update applies the previous step's gradient at its rate.
    const bool deferred = program_.instrs[static_cast<size_t>(id)].deferred;
    if (skip_updates_ && !deferred) return;  // a bad step: nothing changes
    if (!step.optimizer_begun) optimizer_->begin_step();
    step.optimizer_begun = true;
    update(id, op, deferred ? carry_.lr : input.lr);
  } else if constexpr (std::is_same_v<Op, parallel::Free>) {
    const Instr& instr = program_.instrs[static_cast<size_t>(id)];
    // Its last reader may still run on the engine: the pool holds its memory until then.
    const int reader = instr.after.empty() ? -1 : instr.after.front();
    buffers_.free(op.buffer, reader < 0 ? -1 : job_[static_cast<size_t>(reader)], engine_.get());
  }
}

StepResult ProgramExecutor::run(const StepInput& input) {
  use_program_for(input.global_rows);
  begin_step(input);
  StepResult result;
  // This rank's tensors: its account when it has one (in-process ranks share the process).
  const MemoryStats at_start = account_ ? account_->stats() : memory_stats();
  account_ ? account_->reset_peak() : reset_peak_memory();
  const bool pipelined = program_.pipeline.axis >= 0;
  Step step{.input = input, .result = result, .pipelined = pipelined, .start_us = pipelined ? comm::now_us() : 0};
  for (size_t i = 0; i < program_.instrs.size(); ++i) execute(static_cast<int>(i), step);
  carry_.pending = false;
  end_step(result, input.lr);
  result.peak_bytes = std::max((account_ ? account_->stats() : memory_stats()).peak_bytes, at_start.live_bytes);
  if (program_.loss_buffer >= 0) result.loss = buffers_.storage(program_.loss_buffer).f32()[0];
  result.skipped = skip_updates_;
  for (size_t m = 0; m < program_.micro_batches.size(); ++m) {
    std::vector<Tensor> outputs;
    for (ValueId v : program_.outputs) outputs.push_back(live_[m].empty() ? Tensor() : live_[m][static_cast<size_t>(v)]);
    result.outputs.push_back(std::move(outputs));
  }
  live_.clear();
  result.wire = step_wire();
  for (size_t a = 0; a < groups_.size(); ++a)
    result.axis_bytes.push_back(static_cast<int64_t>(axis_bytes_sent(a) - sent_before_[a]));
  return result;
}

// After the last instruction: the sends and (but for P3's) the engine's jobs done.
void ProgramExecutor::end_step(StepResult& result, double lr) {
  try {
    transfers_->finish_sends();
  } catch (const Error& e) {
    const int oldest = flight_.oldest_open([this](int id) { return job_finished(id); });
    throw in_context(program_, step_, oldest, flight_.site_of(oldest), e);
  }
  // What is left without a job: the sends.
  flight_.done_where([this](int id) { return job_[static_cast<size_t>(id)] < 0; });
  result.activation_peak_bytes = activations_.peak;
  // The step returns once its collectives are done, but for those the
  // next step's deferred instructions wait for (P3: they run on).
  if (engine_) {
    for (size_t i = 0; i < job_.size(); ++i) {
      if (job_[i] < 0 || carried_[i]) continue;
      wait_for(static_cast<int>(i));
    }
    buffers_.release_finished(*engine_);
    collect_engine_trace();
  }
  for (const Instr& instr : program_.instrs) carry_.pending = carry_.pending || instr.deferred;
  carry_.lr = lr;
}

void ProgramExecutor::finish() {
  if (carry_.pending) {
    const StepInput input{.lr = carry_.lr};
    StepResult result;
    Step step{.input = input, .result = result};
    // Not a step: the trace (of steps, in list order) leaves it out.
    const bool tracing = std::exchange(tracing_, false);
    for (size_t i = 0; i < program_.instrs.size(); ++i)
      if (program_.instrs[i].deferred) execute(static_cast<int>(i), step);
    tracing_ = tracing;
    carry_.pending = false;
  }
  if (!engine_) return;
  engine_->wait_all();
  buffers_.release_finished(*engine_);
  collect_engine_trace();
}

AxisGroups axis_groups(parallel::MeshGroups& mesh) {
  AxisGroups groups;
  for (comm::Communicator& c : mesh.axis) groups.axis.push_back(&c);
  if (mesh.data) groups.data = &*mesh.data;
  return groups;
}

uint64_t ProgramExecutor::axis_bytes_sent(size_t axis) const {
  const comm::Communicator* group = groups_[axis];
  uint64_t sent = group != nullptr ? group->bytes_sent() : 0;
  // The data path's collectives run on the progress engine's own split of
  // its group (whatever a step leaves in flight counts in the next); under
  // context parallelism that group is its own, counted on the data axis.
  const bool data_path = static_cast<int>(axis) == program_.strategy.mesh.axis(program_.strategy.data_axis);
  if (group_ != nullptr && group_ != group && data_path) sent += group_->bytes_sent();
  if (group_ != nullptr && engine_ && (group == group_ || data_path)) sent += engine_->bytes_sent();
  return sent;
}

}  // namespace px
