#include "runtime/data_parallel_step.h"

#include <cstring>

#include "comm/collectives.h"
#include "data/sampler.h"
#include "graph/autodiff.h"
#include "kernels/elementwise.h"

namespace px {

struct DataParallelStep::Local {
  parallel::Program program;
  std::unique_ptr<Executor> executor;
  std::map<ValueId, int> grad_index;  // gradient value -> index in program.grads
};

namespace {

// comm::now_us() of a steady_clock time point (the trace's one clock).
double to_trace_us(std::chrono::steady_clock::time_point t) {
  const double now = comm::now_us();
  return now - std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

DataParallelStep::DataParallelStep(nn::Model global, int64_t global_rows, comm::Communicator* group,
                                   parallel::GradientSyncOptions sync, bool trace)
    : global_(std::move(global)), group_(group), trace_(trace) {
  Graph& g = global_.graph;
  Gradients grads = build_backward(g, global_.loss, g.params());
  for (ValueId p : g.params()) param_grads_.emplace_back(p, grads.at(p));
  std::vector<ValueId> batch_inputs{global_.inputs, global_.targets};
  const int ranks = group_ ? group_->size() : 1;
  if (global_rows < ranks)
    fail("the global batch of {} rows cannot be split over {} data-parallel ranks: expected at least one row a rank",
         global_rows, ranks);
  if (sync.zero_stage < 0 || sync.zero_stage > 1)
    fail("ZeRO stage {} is not available: expected 0 (off) or 1 (sharded optimizer state; stage 2 is not built yet)",
         sync.zero_stage);
  if (sync.zero_stage > 0 && (sync.p3_slice_bytes > 0 || sync.compression.method != comm::compression::Method::none))
    fail("ZeRO-1 combines with neither P3 nor gradient compression yet: choose one");
  if (sync.p3_slice_bytes > 0) {
    if (!sync.overlap) fail("P3 reduces gradients on the progress thread: it cannot run with --no-overlap");
    if (sync.compression.method != comm::compression::Method::none)
      fail("P3 and gradient compression ({}) do not combine yet: choose one", sync.compression.to_string());
    sync.bucket_bytes = 0;  // every weight its own job, with its own priority
  }
  strategy_ = parallel::data_parallel(g, batch_inputs, ranks, sync);
  if (ranks > 1 && sync.overlap) {
    comm::EngineOptions engine;
    engine.collective = sync.collective;
    engine.slice_bytes = sync.p3_slice_bytes;
    engine.trace = trace;
    engine_ = std::make_unique<comm::CommEngine>(*group_, engine);
  }
  if (global_.positions != kNoValue) {
    int64_t T = g.spec(global_.positions).shape[0];
    positions_ = Tensor::empty({T}, DType::i32);
    for (int64_t t = 0; t < T; ++t) positions_.data<int32_t>()[t] = static_cast<int32_t>(t);
  }
}

DataParallelStep::~DataParallelStep() = default;

DataParallelStep::Local& DataParallelStep::local_for(int64_t rows) {
  auto& slot = locals_[rows];
  if (slot) return *slot;
  slot = std::make_unique<Local>();
  const int rank = group_ ? group_->rank() : 0;
  slot->program = parallel::lower(global_.graph, global_.loss, param_grads_, strategy_, rank, rows);
  slot->executor = std::make_unique<Executor>(slot->program.local, slot->program.wanted());
  for (size_t i = 0; i < slot->program.grads.size(); ++i) slot->grad_index[slot->program.grads[i].grad] = static_cast<int>(i);
  // Every local program shares one arena layout (lowering is deterministic).
  if (!arena_.defined()) {
    arena_ = Tensor::zeros({slot->program.arena_count}, DType::f32);
    for (const parallel::GradientSync& gs : slot->program.grads)
      grads_[gs.name] = arena_.slice_rows(gs.offset, gs.offset + gs.count).reshape(global_.graph.spec(gs.param).shape);
  }
  PX_CHECK_EQ(slot->program.arena_count, arena_.numel());
  if (sharded() && shard_blocks_.empty()) {
    int64_t at = 0;
    for (const parallel::Bucket& b : slot->program.buckets) {
      const comm::Block block = comm::block(b.count, group_->size(), group_->rank());
      shard_blocks_.push_back({.arena_offset = b.offset + block.begin, .count = block.count, .shard_offset = at});
      at += block.count;
    }
    grad_shard_.assign(static_cast<size_t>(at), 0.0f);
  }
  if (group_ && group_->size() > 1 && strategy_.sync.compression.method != comm::compression::Method::none &&
      compressors_.empty()) {
    // A weight's matrix view: rows = its first dim (conv (out, in, kh, kw) ->
    // (out, in*kh*kw)). Vectors (biases, norm scales: a fraction of a percent
    // of the bytes) go uncompressed, as DGC and PowerSGD do: top-k of a
    // 10-element bias would starve it.
    for (const parallel::GradientSync& gs : slot->program.grads) {
      const Shape& shape = global_.graph.spec(gs.param).shape;
      const int64_t rows = shape.rank() >= 2 ? shape[0] : 1;
      comm::compression::Spec spec = strategy_.sync.compression;
      if (shape.rank() < 2) spec = comm::compression::Spec{};
      compressors_.emplace_back(spec, gs.count, rows, gs.count / rows, 0x9e3779b9u);
    }
    wire_.resize(compressors_.size());
    if (strategy_.sync.local_momentum > 0)
      for (const parallel::GradientSync& gs : slot->program.grads)
        velocity_.emplace_back(static_cast<size_t>(gs.count), 0.0f);
  }
  return *slot;
}

const parallel::Program& DataParallelStep::layout() const { return locals_.begin()->second->program; }

std::span<float> DataParallelStep::bucket_span(int bucket) {
  const parallel::Bucket& b = layout().buckets[static_cast<size_t>(bucket)];
  return {arena_.f32() + b.offset, static_cast<size_t>(b.count)};
}

void DataParallelStep::compress_and_reduce(int index, uint64_t step) {
  const parallel::GradientSync& gs = layout().grads[static_cast<size_t>(index)];
  std::span<float> grad(arena_.f32() + gs.offset, static_cast<size_t>(gs.count));
  auto work = [this, index, grad, step](comm::Communicator& comm) {
    auto& compressor = compressors_[static_cast<size_t>(index)];
    if (velocity_.empty()) {
      wire_[static_cast<size_t>(index)] = compressor.allreduce_sum(comm, grad, step);
      return;
    }
    // Momentum correction: send the velocity; an entry was sent exactly when
    // the residual after the call differs from (velocity + residual before),
    // which unsent entries keep bitwise; their momentum is then cleared.
    std::vector<float>& u = velocity_[static_cast<size_t>(index)];
    const float m = static_cast<float>(strategy_.sync.local_momentum);
    std::span<const float> residual = compressor.residual();
    std::vector<float> kept(grad.size());
    for (size_t i = 0; i < grad.size(); ++i) {
      u[i] = m * u[i] + grad[i];
      grad[i] = u[i];
      kept[i] = residual.empty() ? u[i] : u[i] + residual[i];
    }
    wire_[static_cast<size_t>(index)] = compressor.allreduce_sum(comm, grad, step);
    residual = compressor.residual();
    if (residual.size() == u.size())
      for (size_t i = 0; i < u.size(); ++i)
        if (residual[i] != kept[i]) u[i] = 0.0f;
  };
  if (engine_) engine_->submit(0, fmt::format("compressed {}", gs.name), work, gs.count * 4);
  else work(*group_);
}

void DataParallelStep::gradient_ready(int index) {
  const auto& buckets = layout().buckets;
  --missing_[static_cast<size_t>(layout().grads[static_cast<size_t>(index)].bucket)];
  while (next_bucket_ < static_cast<int>(buckets.size()) && missing_[static_cast<size_t>(next_bucket_)] == 0) {
    // Plain bucketed overlap runs buckets first come, first served (equal priorities).
    const parallel::Bucket& b = buckets[static_cast<size_t>(next_bucket_)];
    const bool p3 = strategy_.sync.p3_slice_bytes > 0;
    if (sharded()) {
      const ShardBlock& mine = shard_blocks_[static_cast<size_t>(next_bucket_)];
      jobs_[static_cast<size_t>(next_bucket_)] = engine_->reduce_scatter(
          bucket_span(next_bucket_),
          std::span<float>(grad_shard_.data() + mine.shard_offset, static_cast<size_t>(mine.count)), 0,
          fmt::format("grad bucket {} (reduce-scatter)", next_bucket_));
      ++next_bucket_;
      continue;
    }
    jobs_[static_cast<size_t>(next_bucket_)] = engine_->allreduce(
        bucket_span(next_bucket_), p3 ? b.priority : 0,
        p3 ? layout().grads[static_cast<size_t>(b.members.front())].name : fmt::format("grad bucket {}", next_bucket_));
    ++next_bucket_;
  }
}

void DataParallelStep::collect_engine_trace(uint64_t step) {
  std::vector<comm::TraceEvent> events = engine_->take_trace();
  if (!tracing_ && !trace_deferred_) return;
  for (const comm::TraceEvent& e : events)
    trace_records_.push_back({.name = e.slices > 1 ? fmt::format("{} [{}/{}]", e.name, e.slice + 1, e.slices) : e.name,
                              .lane = TraceRecord::Lane::comm,
                              .start_us = e.start_us,
                              .duration_us = e.duration_us,
                              .bytes = e.bytes,
                              .step = static_cast<int64_t>(step)});
}

bool DataParallelStep::sharded() const {
  return strategy_.sync.zero_stage > 0 && group_ != nullptr && group_->size() > 1;
}

int64_t DataParallelStep::shard_count() {
  if (locals_.empty()) local_for(1);
  return static_cast<int64_t>(grad_shard_.size());
}

std::vector<ShardPiece> DataParallelStep::shard_pieces(const std::map<std::string, bool>& decay) {
  if (locals_.empty()) local_for(1);
  std::vector<ShardPiece> pieces;
  for (const ShardBlock& block : shard_blocks_) {
    const int64_t begin = block.arena_offset, end = block.arena_offset + block.count;
    for (const parallel::GradientSync& gs : layout().grads) {
      const int64_t lo = std::max(begin, gs.offset), hi = std::min(end, gs.offset + gs.count);
      if (lo >= hi) continue;
      pieces.push_back({.name = gs.name,
                        .param_offset = lo - gs.offset,
                        .count = hi - lo,
                        .shard_offset = block.shard_offset + (lo - begin),
                        .arena_offset = lo,
                        .decay = decay.at(gs.name)});
    }
  }
  return pieces;
}

void DataParallelStep::allgather_arena(std::vector<float>& arena) {
  const auto& buckets = layout().buckets;
  std::vector<float> mine;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const ShardBlock& block = shard_blocks_[b];
    mine.assign(arena.begin() + block.arena_offset, arena.begin() + block.arena_offset + block.count);
    comm::allgather(*group_, mine.data(),
                    comm::Buffer(std::span<float>(arena.data() + buckets[b].offset, static_cast<size_t>(buckets[b].count))),
                    strategy_.sync.collective);
  }
}

void DataParallelStep::gather_params(ParamStore& params) {
  std::vector<float> arena(static_cast<size_t>(arena_.numel()));
  for (const parallel::GradientSync& gs : layout().grads) {
    const float* p = params.at(gs.name).f32();
    for (const ShardBlock& block : shard_blocks_) {
      const int64_t lo = std::max(block.arena_offset, gs.offset);
      const int64_t hi = std::min(block.arena_offset + block.count, gs.offset + gs.count);
      if (lo < hi) std::memcpy(arena.data() + lo, p + (lo - gs.offset), static_cast<size_t>(hi - lo) * sizeof(float));
    }
  }
  allgather_arena(arena);
  for (const parallel::GradientSync& gs : layout().grads)
    std::memcpy(params.at(gs.name).f32(), arena.data() + gs.offset, static_cast<size_t>(gs.count) * sizeof(float));
}

NamedTensors DataParallelStep::gather_state(const ShardedOptimizer& optimizer,
                                            const std::vector<std::string>& slot_names) {
  NamedTensors out;
  std::vector<std::vector<float>> full(optimizer.slot_count());
  for (size_t i = 0; i < optimizer.slot_count(); ++i) {
    full[i].assign(static_cast<size_t>(arena_.numel()), 0.0f);
    std::span<const float> slot = optimizer.slot(i);
    for (const ShardBlock& block : shard_blocks_)
      std::memcpy(full[i].data() + block.arena_offset, slot.data() + block.shard_offset,
                  static_cast<size_t>(block.count) * sizeof(float));
    allgather_arena(full[i]);
  }
  // Per parameter, its slots (the names a single-rank Optimizer saves).
  for (const parallel::GradientSync& gs : layout().grads)
    for (size_t i = 0; i < full.size(); ++i) {
      Tensor t = Tensor::empty(global_.graph.spec(gs.param).shape, DType::f32);
      std::memcpy(t.f32(), full[i].data() + gs.offset, static_cast<size_t>(gs.count) * sizeof(float));
      out.emplace_back(gs.name + "." + slot_names[i], t);
    }
  return out;
}

void DataParallelStep::wait_gradient(const std::string& name) {
  if (!engine_) return;
  auto bit = bucket_of_.find(name);
  PX_CHECK(bit != bucket_of_.end(), "no gradient bucket for parameter {} ({} known)", name, bucket_of_.size());
  PX_CHECK_LT(static_cast<size_t>(bit->second), jobs_.size());
  const comm::CommEngine::JobId job = jobs_[static_cast<size_t>(bit->second)];
  if (job >= 0) engine_->wait(job);
}

void DataParallelStep::finish() {
  if (!engine_) return;
  engine_->wait_all();
  if (in_flight_) {
    collect_engine_trace(trace_step_);
    trace_deferred_ = false;
    in_flight_ = false;
    jobs_.assign(jobs_.size(), -1);
  }
}

StepResult DataParallelStep::run(const ParamStore& params, const DataBatch& rows, int64_t row_offset,
                                 int accumulation, uint64_t seed, uint64_t step,
                                 const std::function<void(const std::string&)>& before_param_read) {
  StepResult result;
  const int64_t n = rows.rows();
  // Micro-batches that have rows; the first overwrites the arena, later ones add.
  std::vector<RowRange> micro;
  for (int m = 0; m < accumulation; ++m) {
    RowRange r = shard_rows(n, m, accumulation);
    if (r.size() > 0) micro.push_back(r);
  }
  double loss = 0;
  local_for(micro.empty() ? std::max<int64_t>(n, 1) : micro.back().size());
  missing_.clear();
  for (const parallel::Bucket& b : layout().buckets) missing_.push_back(static_cast<int>(b.members.size()));
  next_bucket_ = 0;
  if (!in_flight_) jobs_.assign(layout().buckets.size(), -1);
  if (bucket_of_.empty())
    for (const parallel::GradientSync& gs : layout().grads) bucket_of_[gs.name] = gs.bucket;
  if (micro.empty()) {  // no rows here: contribute zeros to every reduction
    std::memset(arena_.f32(), 0, static_cast<size_t>(arena_.numel()) * sizeof(float));
    for (size_t i = 0; i < layout().grads.size(); ++i) {
      if (compressing()) compress_and_reduce(static_cast<int>(i), step);
      else if (engine_) gradient_ready(static_cast<int>(i));
    }
  }
  for (size_t m = 0; m < micro.size(); ++m) {
    const RowRange r = micro[m];
    Local& local = local_for(r.size());
    const Graph& g = local.program.local;
    std::vector<Tensor> bound;
    params.bind(g, bound);
    bound[global_.inputs] = rows.inputs.slice_rows(r.begin, r.end);
    bound[global_.targets] = rows.targets.slice_rows(r.begin, r.end);
    if (global_.positions != kNoValue) bound[global_.positions] = positions_;
    const bool first = m == 0, last = m + 1 == micro.size();
    auto on_ready = [&](ValueId v, const Tensor& t) {
      auto it = local.grad_index.find(v);
      if (it == local.grad_index.end()) return;
      if (in_flight_) finish();  // P3: the previous step's reductions, before the arena is rewritten
      const parallel::GradientSync& gs = local.program.grads[static_cast<size_t>(it->second)];
      float* dst = arena_.f32() + gs.offset;
      if (first) std::memcpy(dst, t.f32(), static_cast<size_t>(gs.count) * sizeof(float));
      else kernels::add_inplace(gs.count, t.f32(), dst);
      if (!last) return;
      if (compressing() && engine_) compress_and_reduce(it->second, step);
      else if (engine_) gradient_ready(it->second);
    };
    timings_.clear();
    local.executor->record_timings(tracing_ ? &timings_ : nullptr);
    Executor::BeforeFn before;
    if (before_param_read)
      before = [&](const Node& node) {
        for (ValueId in : node.inputs)
          if (g.value(in).kind == Value::Kind::param) before_param_read(g.value(in).name);
      };
    std::vector<Tensor> out =
        local.executor->run(bound, {.seed = seed, .row_offset = row_offset + r.begin}, on_ready, before);
    for (const Executor::NodeTiming& t : timings_) {
      const Node& node = g.nodes()[static_cast<size_t>(t.node)];
      trace_records_.push_back({.name = fmt::format("{} ({})", node.name, node.op()),
                                .lane = TraceRecord::Lane::compute,
                                .start_us = to_trace_us(t.start),
                                .duration_us = std::chrono::duration<double, std::micro>(t.end - t.start).count(),
                                .bytes = 0,
                                .step = static_cast<int64_t>(step)});
    }
    loss += static_cast<double>(out[0].f32()[0]);
    result.peak_bytes = std::max(result.peak_bytes, local.executor->peak_bytes());
  }
  if (compressing() && !engine_ && !micro.empty()) {
    for (size_t i = 0; i < layout().grads.size(); ++i) compress_and_reduce(static_cast<int>(i), step);
  }
  if (engine_ && !deferred()) {
    finish();
    collect_engine_trace(step);
  } else if (deferred()) {
    trace_step_ = step;  // the in-flight reductions are traced when they are waited for
    trace_deferred_ = tracing_;
    in_flight_ = true;
  } else if (group_ && group_->size() > 1 && !compressing()) {
    for (size_t b = 0; b < layout().buckets.size(); ++b) {
      const double start = comm::now_us();
      std::span<float> span = bucket_span(static_cast<int>(b));
      if (sharded()) {
        const ShardBlock& mine = shard_blocks_[b];
        comm::reduce_scatter(*group_, span.data(),
                             comm::Buffer(std::span<float>(grad_shard_.data() + mine.shard_offset,
                                                           static_cast<size_t>(mine.count))),
                             static_cast<int64_t>(span.size()), comm::Reduction::sum, strategy_.sync.collective);
      } else {
        comm::allreduce(*group_, span, comm::Reduction::sum, strategy_.sync.collective);
      }
      if (tracing_)
        trace_records_.push_back({.name = fmt::format("grad bucket {}", b),
                                  .lane = TraceRecord::Lane::comm,
                                  .start_us = start,
                                  .duration_us = comm::now_us() - start,
                                  .bytes = static_cast<int64_t>(span.size() * sizeof(float)),
                                  .step = static_cast<int64_t>(step)});
    }
  }
  if (group_ && group_->size() > 1) {
    float total = static_cast<float>(loss);
    comm::allreduce(*group_, std::span<float>(&total, 1), comm::Reduction::sum);
    loss = total;
  }
  result.loss = loss;
  const int p = group_ ? group_->size() : 1;
  if (compressing()) {
    for (const auto& w : wire_) result.wire += w;
  } else if (p > 1) {  // every bucket by the float32 allreduce
    const uint64_t dense = static_cast<uint64_t>(2.0 * (p - 1) / p * 4.0 * static_cast<double>(arena_.numel()));
    result.wire = {.bytes_sent = dense, .dense_bytes = dense};
  }
  return result;
}

}  // namespace px
