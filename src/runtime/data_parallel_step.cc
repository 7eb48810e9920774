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
  if (sync.zero_stage < 0 || sync.zero_stage > 2)
    fail("ZeRO stage {} is not available: expected 0 (off), 1 (sharded optimizer state) or 2 (sharded optimizer "
         "state and gradients)",
         sync.zero_stage);
  if (sync.zero_stage > 0 && (sync.p3_slice_bytes > 0 || sync.compression.method != comm::compression::Method::none))
    fail("ZeRO-{} combines with neither P3 nor gradient compression yet: choose one", sync.zero_stage);
  if (sync.zero_stage >= 2 && sync.bucket_buffers < 1)
    fail("ZeRO-2 bucket buffers {}: expected at least 1 (the bucket backward fills)", sync.bucket_buffers);
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
  // ZeRO-2 has no arena: gradients live in bucket buffers, then the shard.
  if (locals_.size() == 1) {
    arena_count_ = slot->program.arena_count;
    if (!sharded_gradients()) {
      arena_ = Tensor::zeros({arena_count_}, DType::f32);
      for (const parallel::GradientSync& gs : slot->program.grads)
        grads_[gs.name] = arena_.slice_rows(gs.offset, gs.offset + gs.count).reshape(global_.graph.spec(gs.param).shape);
    }
  }
  PX_CHECK_EQ(slot->program.arena_count, arena_count_);
  // on_ready copies every gradient out; the executor need not keep them.
  std::vector<ValueId> grad_values;
  for (const parallel::GradientSync& gs : slot->program.grads) grad_values.push_back(gs.grad);
  slot->executor->release_after_ready(grad_values);
  if (sharded() && shard_blocks_.empty()) {
    int64_t at = 0;
    for (const parallel::Bucket& b : slot->program.buckets) {
      const comm::Block block = comm::block(b.count, group_->size(), group_->rank());
      shard_blocks_.push_back({.arena_offset = b.offset + block.begin, .count = block.count, .shard_offset = at});
      at += block.count;
    }
    grad_shard_ = Tensor::zeros({at}, DType::f32);
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

comm::compression::GradientCompressor::State DataParallelStep::compression_state() const {
  comm::compression::GradientCompressor::State state;
  for (size_t i = 0; i < compressors_.size(); ++i) {
    const std::string& name = layout().grads[i].name;
    for (auto& [entry, values] : compressors_[i].state()) state.emplace_back(name + "." + entry, std::move(values));
    if (!velocity_.empty()) state.emplace_back(name + ".velocity", velocity_[i]);
  }
  return state;
}

NamedTensors DataParallelStep::gather_compression_state() {
  if (locals_.empty()) local_for(1);
  if (!compressing()) return {};
  // Every rank holds the same entries (same layout and spec): one flat
  // allgather of equal-sized blocks.
  const auto state = compression_state();
  std::vector<float> mine;
  for (const auto& [name, values] : state) mine.insert(mine.end(), values.begin(), values.end());
  const int p = group_->size();
  std::vector<float> all(mine.size() * static_cast<size_t>(p));
  comm::allgather(*group_, mine.data(), comm::Buffer(std::span<float>(all)));
  NamedTensors out;
  for (int r = 0; r < p; ++r) {
    const float* at = all.data() + mine.size() * static_cast<size_t>(r);
    for (const auto& [name, values] : state) {
      Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DType::f32);
      std::memcpy(t.f32(), at, values.size() * sizeof(float));
      at += values.size();
      out.emplace_back(fmt::format("rank{}.{}", r, name), std::move(t));
    }
  }
  return out;
}

void DataParallelStep::load_compression_state(const SafetensorsFile& file) {
  if (locals_.empty()) local_for(1);
  const int rank = group_ ? group_->rank() : 0;
  auto take = [&](const std::string& name, std::vector<float>& into) {
    const std::string key = fmt::format("rank{}.{}", rank, name);
    if (!file.contains(key))
      fail("compression state '{}' has no tensor '{}' (saved with another compression or rank count?)", file.path,
           key);
    const Tensor& saved = file.at(key);
    if (saved.numel() != static_cast<int64_t>(into.size()))
      fail("compression state '{}': '{}' has {} elements, this run needs {}", file.path, key, saved.numel(),
           into.size());
    std::memcpy(into.data(), saved.f32(), into.size() * sizeof(float));
  };
  for (size_t i = 0; i < compressors_.size(); ++i) {
    const std::string& name = layout().grads[i].name;
    auto state = compressors_[i].state();
    for (auto& [entry, values] : state) take(name + "." + entry, values);
    compressors_[i].load_state(state);
    if (!velocity_.empty()) take(name + ".velocity", velocity_[i]);
  }
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
          std::span<float>(grad_shard_.f32() + mine.shard_offset, static_cast<size_t>(mine.count)), 0,
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

float* DataParallelStep::bucket_buffer_slot(const parallel::GradientSync& gs) {
  const parallel::Bucket& b = layout().buckets[static_cast<size_t>(gs.bucket)];
  auto it = filling_.find(gs.bucket);
  if (it == filling_.end()) {
    release_finished_buffers(false);
    const size_t cap = static_cast<size_t>(strategy_.sync.bucket_buffers);
    while (filling_.size() + reducing_.size() >= cap && !reducing_.empty()) release_finished_buffers(true);
    Tensor buffer = Tensor::empty({b.count}, DType::f32);
    buffer_bytes_live_ += b.count * static_cast<int64_t>(sizeof(float));
    buffer_bytes_peak_ = std::max(buffer_bytes_peak_, buffer_bytes_live_);
    it = filling_.emplace(gs.bucket, std::move(buffer)).first;
  }
  return it->second.f32() + (gs.offset - b.offset);
}

void DataParallelStep::release_finished_buffers(bool wait_oldest) {
  if (wait_oldest && !reducing_.empty() && reducing_.front().job >= 0) engine_->wait(reducing_.front().job);
  // The engine runs these equal-priority jobs in submission order.
  while (!reducing_.empty() && (reducing_.front().job < 0 || engine_->finished(reducing_.front().job))) {
    buffer_bytes_live_ -= reducing_.front().buffer.numel() * static_cast<int64_t>(sizeof(float));
    reducing_.pop_front();
  }
}

void DataParallelStep::sharded_gradient_ready(int index, bool accumulate, uint64_t step) {
  const auto& buckets = layout().buckets;
  --missing_[static_cast<size_t>(layout().grads[static_cast<size_t>(index)].bucket)];
  while (next_bucket_ < static_cast<int>(buckets.size()) && missing_[static_cast<size_t>(next_bucket_)] == 0)
    reduce_scatter_bucket(next_bucket_++, accumulate, step);
}

void DataParallelStep::reduce_scatter_bucket(int bucket, bool accumulate, uint64_t step) {
  auto node = filling_.extract(bucket);
  PX_CHECK(!node.empty(), "ZeRO-2: bucket {} is complete but has no buffer", bucket);
  Tensor buffer = std::move(node.mapped());
  const ShardBlock& mine = shard_blocks_[static_cast<size_t>(bucket)];
  std::span<const float> input(buffer.f32(), static_cast<size_t>(buffer.numel()));
  std::span<float> shard(grad_shard_.f32() + mine.shard_offset, static_cast<size_t>(mine.count));
  const std::string name = fmt::format("grad bucket {} (reduce-scatter{})", bucket, accumulate ? ", accumulate" : "");
  const comm::CollectiveOptions collective = strategy_.sync.collective;
  // A later micro-batch adds its reduced block to the shard.
  auto reduce_and_add = [input, shard, collective](comm::Communicator& comm) {
    std::vector<float> part(shard.size());
    comm::reduce_scatter(comm, input.data(), comm::Buffer(std::span<float>(part)), static_cast<int64_t>(input.size()),
                         comm::Reduction::sum, collective);
    kernels::add_inplace(static_cast<int64_t>(part.size()), part.data(), shard.data());
  };
  if (engine_) {
    const comm::CommEngine::JobId job =
        accumulate ? engine_->submit(0, name, reduce_and_add, static_cast<int64_t>(input.size_bytes()))
                   : engine_->reduce_scatter(input, shard, 0, name);
    reducing_.push_back({std::move(buffer), job});
    return;
  }
  const double start = comm::now_us();
  if (accumulate) reduce_and_add(*group_);
  else
    comm::reduce_scatter(*group_, input.data(), comm::Buffer(shard), static_cast<int64_t>(input.size()),
                         comm::Reduction::sum, collective);
  if (tracing_)
    trace_records_.push_back({.name = name,
                              .lane = TraceRecord::Lane::comm,
                              .start_us = start,
                              .duration_us = comm::now_us() - start,
                              .bytes = static_cast<int64_t>(input.size_bytes()),
                              .step = static_cast<int64_t>(step)});
  buffer_bytes_live_ -= buffer.numel() * static_cast<int64_t>(sizeof(float));
}

DataParallelStep::GradientMemory DataParallelStep::gradient_memory() {
  if (locals_.empty()) local_for(1);
  const int64_t shard_bytes = grad_shard_.defined() ? static_cast<int64_t>(grad_shard_.nbytes()) : 0;
  return {.stored_bytes = (arena_.defined() ? arena_.numel() * static_cast<int64_t>(sizeof(float)) : 0) + shard_bytes,
          .buffer_peak_bytes = buffer_bytes_peak_,
          .elements = arena_count_};
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
  return grad_shard_.numel();
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
  // Bucket by bucket through one bucket-sized staging buffer: no full-size
  // copy of the parameters on top of the parameters themselves.
  std::vector<float> mine, bucket;
  const auto& buckets = layout().buckets;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const ShardBlock& block = shard_blocks_[b];
    mine.resize(static_cast<size_t>(block.count));
    bucket.resize(static_cast<size_t>(buckets[b].count));
    for (int member : buckets[b].members) {
      const parallel::GradientSync& gs = layout().grads[static_cast<size_t>(member)];
      const int64_t lo = std::max(block.arena_offset, gs.offset);
      const int64_t hi = std::min(block.arena_offset + block.count, gs.offset + gs.count);
      if (lo < hi)
        std::memcpy(mine.data() + (lo - block.arena_offset), params.at(gs.name).f32() + (lo - gs.offset),
                    static_cast<size_t>(hi - lo) * sizeof(float));
    }
    comm::allgather(*group_, mine.data(), comm::Buffer(std::span<float>(bucket)), strategy_.sync.collective);
    for (int member : buckets[b].members) {
      const parallel::GradientSync& gs = layout().grads[static_cast<size_t>(member)];
      std::memcpy(params.at(gs.name).f32(), bucket.data() + (gs.offset - buckets[b].offset),
                  static_cast<size_t>(gs.count) * sizeof(float));
    }
  }
}

NamedTensors DataParallelStep::gather_state(const ShardedOptimizer& optimizer,
                                            const std::vector<std::string>& slot_names) {
  NamedTensors out;
  std::vector<std::vector<float>> full(optimizer.slot_count());
  for (size_t i = 0; i < optimizer.slot_count(); ++i) {
    full[i].assign(static_cast<size_t>(arena_count_), 0.0f);
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
  auto reset_buckets = [this] {
    missing_.clear();
    for (const parallel::Bucket& b : layout().buckets) missing_.push_back(static_cast<int>(b.members.size()));
    next_bucket_ = 0;
  };
  reset_buckets();
  if (!in_flight_) jobs_.assign(layout().buckets.size(), -1);
  if (bucket_of_.empty())
    for (const parallel::GradientSync& gs : layout().grads) bucket_of_[gs.name] = gs.bucket;
  if (micro.empty() && sharded_gradients()) {  // no rows here: contribute zeros to every reduction
    for (size_t i = 0; i < layout().grads.size(); ++i) {
      const parallel::GradientSync& gs = layout().grads[i];
      std::memset(bucket_buffer_slot(gs), 0, static_cast<size_t>(gs.count) * sizeof(float));
      sharded_gradient_ready(static_cast<int>(i), false, step);
    }
  } else if (micro.empty()) {
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
    const bool first = m == 0, last = m + 1 == micro.size();
    if (sharded_gradients()) reset_buckets();  // every micro-batch reduces its own buckets
    auto on_ready = [&](ValueId v, const Tensor& t) {
      auto it = local.grad_index.find(v);
      if (it == local.grad_index.end()) return;
      if (in_flight_) finish();  // P3: the previous step's reductions, before the arena is rewritten
      const parallel::GradientSync& gs = local.program.grads[static_cast<size_t>(it->second)];
      if (sharded_gradients()) {
        std::memcpy(bucket_buffer_slot(gs), t.f32(), static_cast<size_t>(gs.count) * sizeof(float));
        sharded_gradient_ready(it->second, !first, step);
        return;
      }
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
    if (sharded_gradients()) release_finished_buffers(false);
  } else if (deferred()) {
    trace_step_ = step;  // the in-flight reductions are traced when they are waited for
    trace_deferred_ = tracing_;
    in_flight_ = true;
  } else if (group_ && group_->size() > 1 && !compressing() && !sharded_gradients()) {
    for (size_t b = 0; b < layout().buckets.size(); ++b) {
      const double start = comm::now_us();
      std::span<float> span = bucket_span(static_cast<int>(b));
      if (sharded()) {
        const ShardBlock& mine = shard_blocks_[b];
        comm::reduce_scatter(*group_, span.data(),
                             comm::Buffer(std::span<float>(grad_shard_.f32() + mine.shard_offset,
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
  } else if (p > 1) {  // every bucket by the float32 allreduce (ZeRO: reduce-scatter + parameter allgather)
    const double pass = (p - 1.0) / p * 4.0 * static_cast<double>(arena_count_);
    // ZeRO-2 reduce-scatters every micro-batch's gradients, then gathers once.
    const double passes = sharded_gradients() ? static_cast<double>(std::max<size_t>(micro.size(), 1)) + 1 : 2;
    result.wire = {.bytes_sent = static_cast<uint64_t>(passes * pass), .dense_bytes = static_cast<uint64_t>(2 * pass)};
  }
  return result;
}

}  // namespace px
