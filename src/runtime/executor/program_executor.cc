// The step loop and the instructions that run on the calling thread:
// compute, accumulate, norm, update, free.
#include "runtime/executor/program_executor.h"

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

void validate(const ExecutorOptions& o) {
  if (o.p3_slice_bytes < 0) fail("P3 slice size {} bytes must be >= 0", o.p3_slice_bytes);
  if (o.bucket_buffers < 1)
    fail("gradient bucket buffers {}: expected at least 1 (the bucket backward fills)", o.bucket_buffers);
  // How P3 combines with the strategy is parallel::validate's (parallel/compose.h).
  if (o.p3_slice_bytes > 0 && !o.overlap)
    fail("P3 reduces gradients on the progress thread: it cannot run with --no-overlap");
}

ProgramExecutor::ProgramExecutor(parallel::Program program, AxisGroups groups, OptimizerConfig optimizer,
                                 ExecutorOptions options)
    : program_(std::move(program)), groups_(std::move(groups)),
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
  make_pipeline_groups();
  group_ = groups_[static_cast<size_t>(program_.strategy.mesh.axis(program_.strategy.data_axis))];
  const int group_size = group_ ? group_->size() : 1;
  validate(options_);
  PX_CHECK(!program_.graphs.empty(), "a program without a local graph (rank {} has no rows)", program_.rank);
  if (group_size > 1 && options_.overlap) {
    comm::EngineOptions engine;
    engine.collective = options_.collective;
    engine.slice_bytes = options_.p3_slice_bytes;
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

  buffers_.resize(program_.buffers.size());
  written_.resize(program_.buffers.size());
  for (size_t b = 0; b < program_.buffers.size(); ++b) {
    const Buffer& buffer = program_.buffers[b];
    written_[b].assign(buffer.members.size(), false);
    if (buffer.persistent) buffers_[b] = Tensor::zeros({buffer.count}, DType::f32);
  }
  std::vector<ParamShard> shards = index_instructions();
  for (Buffer::Kind kind : {Buffer::Kind::loss})
    for (size_t b = 0; b < program_.buffers.size(); ++b)
      if (program_.buffers[b].kind == kind) written_[b].assign(1, false);
  if (!shards.empty()) optimizer_.emplace(std::move(optimizer), std::move(shards));
  job_.assign(program_.instrs.size(), -1);
  wire_.assign(program_.instrs.size(), {});
  // Compressed gradients: every gradient collective through its own
  // compressor (vectors with Method::none: dense, but counted alike).
  if (program_.strategy.lowering.compression.lossy() && group_size > 1)
    for (int id : gradient_collectives()) {
      const auto& collective = std::get<parallel::Collective>(program_.instrs[static_cast<size_t>(id)].op);
      codecs_[id] = codec_store_.emplace_back(make_codec(collective)).get();
      compressors_.push_back(codecs_[id]);
    }
}

ProgramExecutor::~ProgramExecutor() = default;

Tensor ProgramExecutor::view(const Region& r) const {
  const Tensor& buffer = buffers_.at(static_cast<size_t>(r.buffer));
  PX_CHECK(buffer.defined(), "buffer '{}' is read while not allocated", program_.buffers[static_cast<size_t>(r.buffer)].name);
  return buffer.slice_rows(r.offset, r.offset + r.count);
}

float* ProgramExecutor::data(const Region& r) const {
  Tensor buffer = buffers_.at(static_cast<size_t>(r.buffer));  // a handle: the data is not const
  PX_CHECK(buffer.defined(), "buffer '{}' is used while not allocated", program_.buffers[static_cast<size_t>(r.buffer)].name);
  return buffer.f32() + r.offset;
}

void ProgramExecutor::allocate(int b) {
  const Buffer& buffer = program_.buffers[static_cast<size_t>(b)];
  if (buffer.persistent) return;
  const int64_t bytes = buffer.count * static_cast<int64_t>(sizeof(float));
  if (buffer.kind == Buffer::Kind::grad_bucket) {
    // P3: the previous step's updates read this bucket until they ran.
    if (!deferred_.empty()) finish();
    // ZeRO-2/3: room for one more bucket buffer, waiting for the oldest reductions.
    int live = 0;
    for (size_t other = 0; other < buffers_.size(); ++other)
      live += buffers_[other].defined() && program_.buffers[other].kind == Buffer::Kind::grad_bucket &&
              !program_.buffers[other].persistent;
    for (const PendingFree& pending : pending_frees_) live += pending.kind == Buffer::Kind::grad_bucket;
    while (program_.grad_shard_buffer >= 0 && live >= options_.bucket_buffers && !pending_frees_.empty()) {
      int released = 0;
      for (const PendingFree& pending : release_finished(true)) released += pending.kind == Buffer::Kind::grad_bucket;
      live -= released;
    }
  }
  if (buffers_[static_cast<size_t>(b)].defined()) free_buffer(b, -1);
  buffers_[static_cast<size_t>(b)] = Tensor::empty({buffer.count}, DType::f32);
  written_[static_cast<size_t>(b)].assign(buffer.members.size(), false);
  if (buffer.kind == Buffer::Kind::grad_bucket) {
    grad_buffer_bytes_ += bytes;
    grad_buffer_peak_ = std::max(grad_buffer_peak_, grad_buffer_bytes_);
  } else if (buffer.kind == Buffer::Kind::param_bucket) {
    param_buffer_bytes_ += bytes;
    param_buffer_peak_ = std::max(param_buffer_peak_, param_buffer_bytes_);
  }
}

void ProgramExecutor::free_buffer(int b, int after) {
  const Buffer& buffer = program_.buffers[static_cast<size_t>(b)];
  Tensor& tensor = buffers_[static_cast<size_t>(b)];
  if (buffer.persistent || !tensor.defined()) return;
  PendingFree freed{.tensor = std::move(tensor), .kind = buffer.kind, .bytes = buffer.count * int64_t(sizeof(float))};
  tensor = Tensor();  // the buffer id is free for its next instance now
  // Its last reader still running on the engine: the memory goes once that finishes.
  if (after >= 0 && engine_ && job_[static_cast<size_t>(after)] >= 0 &&
      !engine_->finished(job_[static_cast<size_t>(after)])) {
    freed.job = job_[static_cast<size_t>(after)];
    pending_frees_.push_back(std::move(freed));
    return;
  }
  uncount(freed);
}

void ProgramExecutor::uncount(const PendingFree& freed) {
  if (freed.kind == Buffer::Kind::grad_bucket) grad_buffer_bytes_ -= freed.bytes;
  if (freed.kind == Buffer::Kind::param_bucket) param_buffer_bytes_ -= freed.bytes;
}

std::vector<ProgramExecutor::PendingFree> ProgramExecutor::release_finished(bool wait_oldest) {
  std::vector<PendingFree> released;
  if (wait_oldest && !pending_frees_.empty()) engine_->wait(pending_frees_.front().job);
  while (!pending_frees_.empty() && engine_->finished(pending_frees_.front().job)) {
    uncount(pending_frees_.front());
    released.push_back(std::move(pending_frees_.front()));
    pending_frees_.pop_front();
  }
  return released;  // their tensors go with the vector
}

void ProgramExecutor::wait_for(int id) {
  const JobId job = job_[static_cast<size_t>(id)];
  if (job < 0) return;
  try {
    engine_->wait(job);
  } catch (const Error& e) {
    if (recorder_)
      if (auto it = flight_events_.find(id); it != flight_events_.end()) recorder_->done(it->second, false);
    throw in_context(id, site_of(id), e);
  }
  if (recorder_) flight_done(id);
}

void ProgramExecutor::zero_unwritten(int b) {
  std::vector<bool>& written = written_[static_cast<size_t>(b)];
  const Buffer& buffer = program_.buffers[static_cast<size_t>(b)];
  for (size_t m = 0; m < written.size(); ++m) {
    if (written[m]) continue;
    const int64_t offset = buffer.members.empty() ? 0 : buffer.members[m].offset;
    const int64_t count = buffer.members.empty() ? buffer.count : buffer.members[m].count;
    std::memset(buffers_[static_cast<size_t>(b)].f32() + offset, 0, static_cast<size_t>(count) * sizeof(float));
    written[m] = true;
  }
}

void ProgramExecutor::compute(int id, const parallel::Compute& op, const StepInput& input) {
  const Instr& instr = program_.instrs[static_cast<size_t>(id)];
  const int m = instr.micro_batch;
  const Graph& g = program_.graph_of(m);
  const Node& node = g.nodes()[static_cast<size_t>(op.node)];
  std::vector<Tensor>& live = live_[static_cast<size_t>(m)];
  std::vector<Tensor> params;  // views that must outlive the call
  std::vector<const Tensor*> in;
  params.reserve(node.inputs.size());
  for (ValueId v : node.inputs) {
    const int param = param_of_[static_cast<size_t>(v)];
    if (param >= 0) {
      if (!deferred_.empty()) run_deferred_updates_of(param);
      params.push_back(external_.empty() ? view(program_.param_source(param)).reshape(g.spec(v).shape)
                                         : external_[static_cast<size_t>(param)]);
      in.push_back(&params.back());
      continue;
    }
    if (!live[static_cast<size_t>(v)].defined())
      fail("executor: node '{}' ({}) reads value '{}' which was not fed or computed", node.name, node.op(),
           g.value(v).name);
    in.push_back(&live[static_cast<size_t>(v)]);
  }
  std::vector<Tensor*> out;
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    const ValueId v = node.outputs[i];
    const TensorSpec& spec = g.spec(v);
    const bool view = i == 0 && node.def->output_is_view;
    live[static_cast<size_t>(v)] = view ? in[0]->reshape(spec.shape) : Tensor::empty(spec.shape, spec.dtype);
    hold(m, v, live[static_cast<size_t>(v)], !view && node.origin < 0);  // forward nodes have no origin
    out.push_back(&live[static_cast<size_t>(v)]);
  }
  // Where the shards sit in the unsplit values: the lowering's boxes plus
  // the micro-batch's global rows on the batch dim.
  const std::vector<ShardBox>& boxes = program_.boxes[static_cast<size_t>(program_.micro_batches[static_cast<size_t>(m)].graph)];
  const int64_t rows = input.row_offset + program_.micro_batches[static_cast<size_t>(m)].row_offset;
  auto box_of = [&](ValueId v) {
    ShardBox box = boxes[static_cast<size_t>(v)];
    if (program_.batch_rows[static_cast<size_t>(v)] && !box.offset.empty()) box.offset[0] += rows;
    return box;
  };
  OpContext context{.seed = input.seed, .inputs = {}, .outputs = {}};
  for (ValueId v : node.inputs) context.inputs.push_back(box_of(v));
  for (ValueId v : node.outputs) context.outputs.push_back(box_of(v));
  const double start = tracing_ ? comm::now_us() : 0;
  node.def->forward(context, node.attrs, in, out);
  if (tracing_)
    trace_.push_back({.name = fmt::format("{} ({})", node.name, node.op()),
                      .lane = TraceRecord::Lane::compute,
                      .start_us = start,
                      .duration_us = comm::now_us() - start,
                      .bytes = 0,
                      .step = static_cast<int64_t>(input.step),
                      .instr = id});
}

void ProgramExecutor::hold(int micro, ValueId v, const Tensor& t, bool counts) {
  release(micro, v);
  if (!counts) return;
  const int64_t bytes = static_cast<int64_t>(t.nbytes());
  held_bytes_[static_cast<size_t>(micro)][static_cast<size_t>(v)] = bytes;
  activation_bytes_ += bytes;
  activation_peak_ = std::max(activation_peak_, activation_bytes_);
}

void ProgramExecutor::release(int micro, ValueId v) {
  int64_t& bytes = held_bytes_[static_cast<size_t>(micro)][static_cast<size_t>(v)];
  activation_bytes_ -= bytes;
  bytes = 0;
}

void ProgramExecutor::use_parameters(const ParamStore& store) {
  PX_CHECK(!optimizer_.has_value(), "use_parameters: this program updates its own parameters");
  external_.clear();
  for (const parallel::ParamLayout& param : program_.params) {
    const Tensor& t = store.at(param.name);
    if (t.shape() != param.shape)
      fail("parameter '{}' has shape {}, the program expects {}", param.name, t.shape(), param.shape);
    external_.push_back(t);
  }
}

void ProgramExecutor::accumulate(int id, const parallel::Accumulate& op) {
  const Instr& instr = program_.instrs[static_cast<size_t>(id)];
  const Tensor& from = live_[static_cast<size_t>(instr.micro_batch)][static_cast<size_t>(op.from)];
  PX_CHECK(from.defined() && from.numel() == op.into.count, "accumulate #{}: value {} has {} elements, region {}", id,
           op.from, from.defined() ? from.numel() : -1, op.into.count);
  const int member = member_of_[static_cast<size_t>(id)];
  PX_CHECK_GE(member, 0);
  std::vector<bool>& written = written_[static_cast<size_t>(op.into.buffer)];
  float* into = data(op.into);
  if (!written[static_cast<size_t>(member)]) {
    std::memcpy(into, from.f32(), static_cast<size_t>(op.into.count) * sizeof(float));
    written[static_cast<size_t>(member)] = true;
  } else {
    kernels::add_inplace(op.into.count, from.f32(), into);
  }
  if (op.into.buffer == program_.loss_buffer) {
    if (poison_) into[0] = std::numeric_limits<float>::quiet_NaN();
    // The loss is reduced on the comm stream, maybe while the norm is
    // summed: the norm learns of a bad summand from this flag, not by
    // reading the buffer.
    if (!std::isfinite(from.f32()[0]) || poison_) local_loss_bad_ = true;
  } else if (poison_ && !poisoned_) {
    into[0] = std::numeric_limits<float>::quiet_NaN();  // reduced to every rank like any gradient
    poisoned_ = true;
  }
}

void ProgramExecutor::norm(const parallel::Norm& op) {
  double squares = 0;
  for (size_t i = 0; i < op.gradients.size(); ++i) {
    const Region& r = op.gradients[i];
    zero_unwritten(r.buffer);
    squares += kernels::sum_squares(r.count, data(r)) * (i < op.weights.size() ? op.weights[i] : 1.0);
  }
  // A non-finite loss summand makes the global norm NaN on every rank (the
  // norm is summed over every axis), so all ranks skip the step together.
  if (local_loss_bad_) squares = std::numeric_limits<double>::quiet_NaN();
  *data(op.into) = static_cast<float>(squares);
}

double ProgramExecutor::clip(const parallel::Clip& op, double clip) {
  const double norm = std::sqrt(static_cast<double>(*data(op.norm)));
  if (!std::isfinite(norm)) {
    skip_updates_ = true;
    // Error feedback as if the step never ran (its reductions are done: the norm waited for them).
    for (Codec* codec : compressors_) {
      if (!codec->state_before.empty()) codec->compressor.load_state(codec->state_before);
      codec->velocity = codec->velocity_before;
    }
    return norm;
  }
  if (clip > 0 && norm > clip) {
    const float scale = static_cast<float>(clip / (norm + 1e-6));
    for (const Region& r : op.gradients) kernels::scale(r.count, scale, data(r), data(r));
  }
  return norm;
}

void ProgramExecutor::update(int id, const parallel::Update& op, double lr) {
  zero_unwritten(op.gradient.buffer);
  optimizer_->update(static_cast<size_t>(shard_of_update_[static_cast<size_t>(id)]), data(op.storage),
                     data(op.gradient), lr);
}

void ProgramExecutor::run_deferred_updates_of(int param) {
  auto it = deferred_.find(param);
  if (it == deferred_.end()) return;
  const std::vector<int> ids = std::move(it->second);
  deferred_.erase(it);
  for (int id : ids) {
    const Instr& instr = program_.instrs[static_cast<size_t>(id)];
    for (int dep : instr.after) wait_for(dep);
    update(id, std::get<parallel::Update>(instr.op), deferred_lr_);
  }
  if (deferred_.empty()) {
    for (int id : deferred_frees_) free_buffer(std::get<parallel::Free>(program_.instrs[static_cast<size_t>(id)].op).buffer, -1);
    deferred_frees_.clear();
  }
}

void ProgramExecutor::finish() {
  while (!deferred_.empty()) run_deferred_updates_of(deferred_.begin()->first);
  if (!engine_) return;
  engine_->wait_all();
  release_finished(false);
  collect_engine_trace();
}

StepResult ProgramExecutor::run(const StepInput& input) {
  use_program_for(input.global_rows);
  const size_t micro = program_.micro_batches.size();
  step_ = input.step;
  poison_ = input.poison;
  local_loss_bad_ = poisoned_ = skip_updates_ = false;
  live_.assign(micro, {});
  held_bytes_.assign(micro, {});
  activation_bytes_ = activation_peak_ = 0;
  for (size_t m = 0; m < micro; ++m) {
    const parallel::MicroBatch& mb = program_.micro_batches[m];
    if (mb.rows == 0) continue;
    live_[m].resize(program_.graphs[static_cast<size_t>(mb.graph)].values().size());
    held_bytes_[m].assign(live_[m].size(), 0);
    for (ValueId v : program_.batch_inputs) {
      const Tensor* feed = nullptr;
      for (const auto& [id, t] : input.feeds)
        if (id == v) feed = &t;
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
  // Gradient buckets kept for the caller (programs without updates) are refilled every step.
  for (size_t b = 0; b < program_.buffers.size(); ++b)
    if (program_.buffers[b].persistent && program_.buffers[b].kind == Buffer::Kind::grad_bucket)
      written_[b].assign(written_[b].size(), false);
  // The loss buffer sums the micro-batches' summands.
  if (program_.loss_buffer >= 0) {
    buffers_[static_cast<size_t>(program_.loss_buffer)].f32()[0] = 0;
    written_[static_cast<size_t>(program_.loss_buffer)].assign(1, true);
  }
  // Engine jobs of the previous step stay referenced by deferred updates (resolved there).
  if (deferred_.empty()) job_.assign(program_.instrs.size(), -1);
  wire_.assign(program_.instrs.size(), {});
  for (size_t a = 0; a < groups_.size(); ++a) sent_before_[a] = axis_bytes_sent(a);
  StepResult result;
  // This rank's tensors: its account when it has one (in-process ranks share the process).
  const MemoryStats at_start = account_ ? account_->stats() : memory_stats();
  account_ ? account_->reset_peak() : reset_peak_memory();
  bool begun = false;
  const bool pipelined = program_.pipeline.axis >= 0;
  const double step_start = pipelined ? comm::now_us() : 0;
  for (size_t i = 0; i < program_.instrs.size(); ++i) {
    const Instr& instr = program_.instrs[i];
    const int id = static_cast<int>(i);
    const bool defer_update = deferred_updates() && std::holds_alternative<parallel::Update>(instr.op);
    // A Free waits for nothing: a buffer whose last reader still runs on
    // the engine is freed once that job finishes (free_buffer), so backward
    // goes on while a bucket it filled is reduced.
    const bool is_free = std::holds_alternative<parallel::Free>(instr.op);
    if (!defer_update && !is_free)
      for (int dep : instr.after) wait_for(dep);
    for (int b : liveness_.allocates[i]) allocate(b);
    std::optional<FlightSite> site;
    if (recorder_) {
      recorder_->at(static_cast<int64_t>(input.step) + 1, id, instr.name);
      site = flight_site(id);
      if (site) flight_sites_[id] = *site;
      if (site)
        flight_events_[id] = recorder_->post(site->kind, site->axis, site->sequence,
                                             static_cast<int64_t>(input.step) + 1, id,
                                             site->what + (instr.name.empty() ? "" : " " + instr.name), site->bytes,
                                             site->peer);
    }
    try {
    std::visit(
        [&](const auto& op) {
          using T = std::decay_t<decltype(op)>;
          if constexpr (std::is_same_v<T, parallel::Compute>) {
            const double start = pipelined ? comm::now_us() : 0;
            compute(id, op, input);
            if (pipelined) result.pipeline_busy_us += comm::now_us() - start;
            if (pipelined && id == last_compute_) result.pipeline_span_us = comm::now_us() - step_start;
          } else if constexpr (std::is_same_v<T, parallel::Send>) {
            send(id, op);
          } else if constexpr (std::is_same_v<T, parallel::Recv>) {
            recv(id, op, input.step);
          } else if constexpr (std::is_same_v<T, parallel::Accumulate>) {
            accumulate(id, op);
          } else if constexpr (std::is_same_v<T, parallel::Collective>) {
            collective(id, op, input.step);
          } else if constexpr (std::is_same_v<T, parallel::Reshard>) {
            reshard(id, op, input);
          } else if constexpr (std::is_same_v<T, parallel::Norm>) {
            norm(op);
          } else if constexpr (std::is_same_v<T, parallel::Clip>) {
            result.grad_norm = clip(op, input.grad_clip);
          } else if constexpr (std::is_same_v<T, parallel::Update>) {
            if (defer_update) {
              deferred_[op.param].push_back(id);
              return;
            }
            if (skip_updates_) return;  // a bad step: nothing changes
            if (!begun) optimizer_->begin_step();
            begun = true;
            update(id, op, input.lr);
          } else if constexpr (std::is_same_v<T, parallel::Free>) {
            if (deferred_updates() && program_.buffers[static_cast<size_t>(op.buffer)].kind == Buffer::Kind::grad_bucket)
              deferred_frees_.push_back(id);
            else
              free_buffer(op.buffer, instr.after.empty() ? -1 : instr.after.front());
          }
        },
        instr.op);
    } catch (const Error& e) {
      if (recorder_) {
        if (auto it = flight_events_.find(id); it != flight_events_.end()) recorder_->done(it->second, false);
        flight_events_.clear();
      }
      throw in_context(id, site, e);
    }
    // Inline collectives, reshards and receives are done; engine jobs and sends when they finish.
    if (site && (job_.empty() || job_[i] < 0) && site->kind != FlightKind::send) flight_done(id);
    for (ValueId v : liveness_.values[i]) {
      release(instr.micro_batch, v);
      live_[static_cast<size_t>(instr.micro_batch)][static_cast<size_t>(v)] = Tensor();
    }
    if (engine_ && !pending_frees_.empty()) release_finished(false);
  }
  try {
    finish_sends();
  } catch (const Error& e) {
    throw in_context(oldest_pending_event(), site_of(oldest_pending_event()), e);
  }
  if (recorder_) {  // what is left without a job: the sends
    for (auto it = flight_events_.begin(); it != flight_events_.end();) {
      if (job_[static_cast<size_t>(it->first)] < 0) {
        recorder_->done(it->second);
        it = flight_events_.erase(it);
      } else {
        ++it;
      }
    }
  }
  result.activation_peak_bytes = activation_peak_;
  if (deferred_updates()) {
    // P3: the gradient reductions run on; each update happens before the
    // next forward reads its parameter. The loss is needed now.
    for (size_t i = 0; i < program_.instrs.size(); ++i) {
      const auto* c = std::get_if<parallel::Collective>(&program_.instrs[i].op);
      if (c != nullptr && program_.buffers[static_cast<size_t>(c->input.buffer)].kind == Buffer::Kind::loss)
        wait_for(static_cast<int>(i));
    }
    optimizer_->begin_step();
    deferred_lr_ = input.lr;
  } else if (engine_) {
    try {
      engine_->wait_all();
    } catch (const Error& e) {
      throw in_context(oldest_pending_event(), site_of(oldest_pending_event()), e);
    }
    release_finished(false);
  }
  if (engine_) collect_engine_trace();
  result.peak_bytes = std::max((account_ ? account_->stats() : memory_stats()).peak_bytes, at_start.live_bytes);
  if (program_.loss_buffer >= 0) result.loss = buffers_[static_cast<size_t>(program_.loss_buffer)].f32()[0];
  result.skipped = skip_updates_;
  for (size_t m = 0; m < micro; ++m) {
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

uint64_t ProgramExecutor::axis_bytes_sent(size_t axis) const {
  const comm::Communicator* group = groups_[axis];
  if (group == nullptr) return 0;
  // The data axis' collectives run on the progress engine's own split of
  // its group (whatever a step leaves in flight counts in the next).
  return group->bytes_sent() + (group == group_ && engine_ ? engine_->bytes_sent() : 0);
}

}  // namespace px
