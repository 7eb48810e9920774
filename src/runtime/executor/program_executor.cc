// The executor's construction and its step loop: a step's inputs cut into
// micro-batches, every instruction run in list order (each by the part
// that runs its kind, on the lane the program names), and the step's result.
#include "runtime/executor/program_executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/memory.h"

namespace px {

using parallel::Instr;

ProgramExecutor::ProgramExecutor(parallel::Program program, AxisGroups groups, OptimizerConfig optimizer,
                                 parallel::ExecutionOptions options)
    : programs_(std::move(program)),
      buffers_(prog().buffers),
      groups_(prog(), std::move(groups)),
      options_(options),
      lanes_(prog(), groups_, options_),
      codecs_(prog(), groups_.data_path_size()) {
  const parallel::Program& p = prog();
  PX_CHECK(!p.graphs.empty(), "a program without a local graph (rank {} has no rows)", p.rank);
  step_.sent_before.assign(groups_.axes(), 0);
  size_t values = 0;
  for (const Graph& g : p.graphs) values = std::max(values, g.values().size());
  params_.of_value.assign(values, -1);
  for (size_t i = 0; i < p.params.size(); ++i)
    params_.of_value[static_cast<size_t>(p.params[i].value)] = static_cast<int>(i);
  const Graph& local = p.graphs.front();
  for (ValueId v : local.params()) params_.declared.push_back(local.value(v).name);
  if (!active().shards.empty()) optimizer_.emplace(std::move(optimizer), active().shards);
}

ProgramExecutor::~ProgramExecutor() = default;

void ProgramExecutor::add_program(parallel::Program program) {
  if (codecs_.compressing() && gradient_collectives(program).size() != gradient_collectives(prog()).size())
    fail("executor: the program for a batch of {} rows differs from the one for {} rows in its gradient "
         "collectives: both must be lowerings of one strategy on one rank",
         program.global_rows, prog().global_rows);
  programs_.add(std::move(program));
}

void ProgramExecutor::use_program_for(int64_t global_rows) {
  if (!programs_.switches_for(global_rows)) return;
  // Deferred instructions and the engines' jobs name the active program's instructions.
  finish();
  flight_.forget_sites();
  programs_.activate(global_rows);
  lanes_.bind(prog(), groups_);
  codecs_.bind(prog());
}

void ProgramExecutor::begin_step(const StepInput& input) {
  const parallel::Program& p = prog();
  const size_t micro = p.micro_batches.size();
  step_.step = input.step;
  step_.poison = input.poison;
  step_.local_loss_bad = step_.poisoned = step_.skip_updates = false;
  live_.assign(micro, {});
  routes_in_flight_.clear();  // a failed step's
  ledger_.reset(parallel::ActivationLedger::values_of(p));
  for (size_t m = 0; m < micro; ++m) {
    const parallel::MicroBatch& mb = p.micro_batches[m];
    if (mb.rows == 0) continue;
    const Graph& g = p.graphs[static_cast<size_t>(mb.graph)];
    live_[m].resize(g.values().size());
    for (size_t b = 0; b < p.batch_inputs.size(); ++b) {
      const ValueId v = p.batch_inputs[b];  // the local graph's id; the feeds name the forward graph's
      const Tensor* feed = nullptr;
      for (const auto& [id, t] : input.feeds)
        if (id == p.batch_feeds[b]) feed = &t;
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
  buffers_.begin_step(p.loss_buffer, params_.external.empty() ? -1 : p.params_buffer);
  // The previous step's carried jobs stay: the deferred instructions at
  // this step's head wait for them.
  lanes_.begin_step(active().carried, step_.carry_pending);
  codecs_.begin_step();
  for (size_t a = 0; a < groups_.axes(); ++a) step_.sent_before[a] = axis_bytes_sent(a);
}

void ProgramExecutor::wait_for(int id) {
  if (!lanes_.has_job(id)) return;
  try {
    lanes_.wait(id);
  } catch (const Error& e) {
    flight_.done(id, false);
    routes_in_flight_.erase(id);
    throw in_context(prog(), step_.step, id, flight_.site_of(id), e);
  }
  flight_.done(id);
  if (auto it = routes_in_flight_.find(id); it != routes_in_flight_.end()) {
    std::shared_ptr<std::vector<Tensor>> outputs = std::move(it->second);
    routes_in_flight_.erase(it);
    routed(id, std::move(*outputs), true);
  }
}

// One instruction of the step on the calling thread (or queued on its lane).
void ProgramExecutor::execute(int id, Step& step) {
  const Instr& instr = prog().instrs[static_cast<size_t>(id)];
  // The previous step's work: none before the first step (or after finish()).
  if (instr.deferred && !step_.carry_pending) return;
  // A Free waits for nothing: a buffer whose last reader still runs on
  // an engine is freed once that job finishes (BufferPool::free), so
  // backward goes on while a bucket it filled is reduced.
  if (!std::holds_alternative<parallel::Free>(instr.op))
    for (int dep : instr.after) wait_for(dep);
  for (int b : active().liveness.allocates[static_cast<size_t>(id)]) buffers_.allocate(b, lanes_);
  std::optional<FlightSite> site;
  if (flight_.on())
    site = flight_.at(prog(), groups_.transfers(), static_cast<int64_t>(step.input.step) + 1, id);
  try {
    std::visit([&](const auto& op) { dispatch(id, op, step); }, instr.op);
  } catch (const Error& e) {
    flight_.done(id, false);
    flight_.abandon();
    throw in_context(prog(), step_.step, id, site, e);
  }
  // Inline collectives, reshards and receives are done; engine jobs and sends when they finish.
  if (site && !lanes_.has_job(id) && site->kind != FlightKind::send) flight_.done(id);
  for (ValueId v : active().liveness.values[static_cast<size_t>(id)]) {
    ledger_.drop(instr.micro_batch, v);
    live_[static_cast<size_t>(instr.micro_batch)][static_cast<size_t>(v)] = Tensor();
  }
  buffers_.release_finished(lanes_);
  lanes_.release_staging();
}

// The main thread's local passes beside its computes (which compute() traces itself).
template <typename Op>
constexpr bool kLocalPass = std::is_same_v<Op, parallel::Accumulate> || std::is_same_v<Op, parallel::Norm> ||
                            std::is_same_v<Op, parallel::Finite> || std::is_same_v<Op, parallel::Clip> ||
                            std::is_same_v<Op, parallel::Update>;

template <typename Op>
void ProgramExecutor::dispatch(int id, const Op& op, Step& step) {
  const StepInput& input = step.input;
  constexpr bool kOwnWork = kLocalPass<Op> || std::is_same_v<Op, parallel::Compute>;
  const double start = kOwnWork ? comm::now_us() : 0;
  if constexpr (std::is_same_v<Op, parallel::Compute>) {
    compute(id, op, input);
    if (step.pipelined) step.result.pipeline_busy_us += comm::now_us() - start;
    if (step.pipelined && id == active().last_compute) step.result.pipeline_span_us = comm::now_us() - step.start_us;
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
  } else if constexpr (std::is_same_v<Op, parallel::Route>) {
    route(id, op, input);
  } else if constexpr (std::is_same_v<Op, parallel::Norm>) {
    norm(op);
  } else if constexpr (std::is_same_v<Op, parallel::Finite>) {
    finite(op);
  } else if constexpr (std::is_same_v<Op, parallel::Clip>) {
    step.result.grad_norm = clip(op, input.grad_clip);
  } else if constexpr (std::is_same_v<Op, parallel::Update>) {
    // A deferred update applies the previous step's gradient at its rate.
    const bool deferred = prog().instrs[static_cast<size_t>(id)].deferred;
    if (step_.skip_updates && !deferred) return;  // a bad step: nothing changes
    if (!step.optimizer_begun) optimizer_->begin_step();
    step.optimizer_begun = true;
    update(id, op, deferred ? step_.carry_lr : input.lr);
  } else if constexpr (std::is_same_v<Op, parallel::Free>) {
    const Instr& instr = prog().instrs[static_cast<size_t>(id)];
    // Its last reader may still run on an engine: the pool holds its memory until then.
    buffers_.free(op.buffer, instr.after.empty() ? -1 : instr.after.front(), lanes_);
  }
  if constexpr (kOwnWork) step.result.compute_us += comm::now_us() - start;
  // The main thread's local work beside its computes: on the compute lane too.
  if (kLocalPass<Op> && trace_.on)
    trace_.add(TraceRecord::Lane::compute, start, 0, static_cast<int64_t>(input.step), id);
}

void ProgramExecutor::set_tracing(bool on) {
  trace_.on = on && options_.trace;
  // Room for the step's records up front: growing the vector mid-step
  // would allocate between the step's tensors (StepTrace).
  if (trace_.on) trace_.records.reserve(trace_.records.size() + 2 * prog().instrs.size());
}

std::vector<TraceRecord> ProgramExecutor::take_trace() {
  for (TraceRecord& r : trace_.records)
    if (r.name.empty() && r.instr >= 0) r.name = prog().event_name(static_cast<size_t>(r.instr));
  return std::move(trace_.records);
}

StepResult ProgramExecutor::run(const StepInput& input) {
  use_program_for(input.global_rows);
  begin_step(input);
  StepResult result;
  // This rank's tensors: its account when it has one (in-process ranks share the process).
  const MemoryStats at_start = account_ ? account_->stats() : memory_stats();
  account_ ? account_->reset_peak() : reset_peak_memory();
  const parallel::Program& p = prog();
  const bool pipelined = p.pipeline.axis >= 0;
  Step step{.input = input, .result = result, .pipelined = pipelined, .start_us = pipelined ? comm::now_us() : 0};
  for (size_t i = 0; i < p.instrs.size(); ++i) execute(static_cast<int>(i), step);
  step_.carry_pending = false;
  end_step(result, input.lr);
  result.peak_bytes = std::max((account_ ? account_->stats() : memory_stats()).peak_bytes, at_start.live_bytes);
  if (p.loss_buffer >= 0) result.loss = buffers_.storage(p.loss_buffer).f32()[0];
  result.skipped = step_.skip_updates;
  for (size_t m = 0; m < p.micro_batches.size(); ++m) {
    std::vector<Tensor> outputs;
    for (ValueId v : p.outputs) outputs.push_back(live_[m].empty() ? Tensor() : live_[m][static_cast<size_t>(v)]);
    result.outputs.push_back(std::move(outputs));
  }
  live_.clear();
  result.wire = step_wire();
  for (size_t a = 0; a < groups_.axes(); ++a)
    result.axis_bytes.push_back(static_cast<int64_t>(axis_bytes_sent(a) - step_.sent_before[a]));
  return result;
}

// After the last instruction: the sends and (but for P3's) the engines' jobs done.
void ProgramExecutor::end_step(StepResult& result, double lr) {
  try {
    groups_.transfers().finish_sends();
  } catch (const Error& e) {
    const int oldest = flight_.oldest_open([this](int id) { return lanes_.finished(id); });
    throw in_context(prog(), step_.step, oldest, flight_.site_of(oldest), e);
  }
  // What is left without a job: the sends.
  flight_.done_where([this](int id) { return !lanes_.has_job(id); });
  result.activation_peak_bytes = static_cast<int64_t>(ledger_.forward_peak());
  // The step returns once its collectives are done, but for those the
  // next step's deferred instructions wait for (P3: they run on).
  const std::vector<bool>& carried = active().carried;
  for (size_t i = 0; i < carried.size(); ++i)
    if (!carried[i]) wait_for(static_cast<int>(i));
  buffers_.release_finished(lanes_);
  collect_engine_trace();
  for (const Instr& instr : prog().instrs) step_.carry_pending = step_.carry_pending || instr.deferred;
  step_.carry_lr = lr;
}

void ProgramExecutor::finish() {
  if (step_.carry_pending) {
    const StepInput input{.lr = step_.carry_lr};
    StepResult result;
    Step step{.input = input, .result = result};
    // Not a step: the trace (of steps, in list order) leaves it out.
    const bool tracing = std::exchange(trace_.on, false);
    for (size_t i = 0; i < prog().instrs.size(); ++i)
      if (prog().instrs[i].deferred) execute(static_cast<int>(i), step);
    trace_.on = tracing;
    step_.carry_pending = false;
  }
  lanes_.wait_all();
  buffers_.release_finished(lanes_);
  collect_engine_trace();
}

}  // namespace px
