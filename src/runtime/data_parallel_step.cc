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

DataParallelStep::DataParallelStep(nn::Model global, int64_t global_rows, comm::Communicator* group,
                                   parallel::GradientSyncOptions sync)
    : global_(std::move(global)), group_(group) {
  Graph& g = global_.graph;
  Gradients grads = build_backward(g, global_.loss, g.params());
  for (ValueId p : g.params()) param_grads_.emplace_back(p, grads.at(p));
  std::vector<ValueId> batch_inputs{global_.inputs, global_.targets};
  const int ranks = group_ ? group_->size() : 1;
  if (global_rows < ranks)
    fail("the global batch of {} rows cannot be split over {} data-parallel ranks: expected at least one row a rank",
         global_rows, ranks);
  strategy_ = parallel::data_parallel(g, batch_inputs, ranks, sync);
  if (ranks > 1 && sync.overlap) {
    comm::EngineOptions engine;
    engine.collective = sync.collective;
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
  return *slot;
}

const parallel::Program& DataParallelStep::layout() const { return locals_.begin()->second->program; }

std::span<float> DataParallelStep::bucket_span(int bucket) {
  const parallel::Bucket& b = layout().buckets[static_cast<size_t>(bucket)];
  return {arena_.f32() + b.offset, static_cast<size_t>(b.count)};
}

void DataParallelStep::gradient_ready(int index) {
  const auto& buckets = layout().buckets;
  --missing_[static_cast<size_t>(layout().grads[static_cast<size_t>(index)].bucket)];
  while (next_bucket_ < static_cast<int>(buckets.size()) && missing_[static_cast<size_t>(next_bucket_)] == 0) {
    // Plain bucketed overlap runs buckets first come, first served (equal priorities).
    engine_->allreduce(bucket_span(next_bucket_), 0, fmt::format("grad bucket {}", next_bucket_));
    ++next_bucket_;
  }
}

StepResult DataParallelStep::run(const ParamStore& params, const DataBatch& rows, int64_t row_offset,
                                 int accumulation, uint64_t seed) {
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
  if (micro.empty()) {  // no rows here: contribute zeros to every reduction
    std::memset(arena_.f32(), 0, static_cast<size_t>(arena_.numel()) * sizeof(float));
    if (engine_)
      for (size_t i = 0; i < layout().grads.size(); ++i) gradient_ready(static_cast<int>(i));
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
      const parallel::GradientSync& gs = local.program.grads[static_cast<size_t>(it->second)];
      float* dst = arena_.f32() + gs.offset;
      if (first) std::memcpy(dst, t.f32(), static_cast<size_t>(gs.count) * sizeof(float));
      else kernels::add_inplace(gs.count, t.f32(), dst);
      if (last && engine_) gradient_ready(it->second);
    };
    std::vector<Tensor> out =
        local.executor->run(bound, {.seed = seed, .row_offset = row_offset + r.begin}, on_ready);
    loss += static_cast<double>(out[0].f32()[0]);
    result.peak_bytes = std::max(result.peak_bytes, local.executor->peak_bytes());
  }
  if (engine_) {
    engine_->wait_all();
  } else if (group_ && group_->size() > 1) {
    for (size_t b = 0; b < layout().buckets.size(); ++b)
      comm::allreduce(*group_, bucket_span(static_cast<int>(b)), comm::Reduction::sum, strategy_.sync.collective);
  }
  if (group_ && group_->size() > 1) {
    float total = static_cast<float>(loss);
    comm::allreduce(*group_, std::span<float>(&total, 1), comm::Reduction::sum);
    loss = total;
  }
  result.loss = loss;
  return result;
}

}  // namespace px
