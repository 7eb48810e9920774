#include "runtime/sync/replica.h"

#include <cmath>
#include <cstring>

#include "comm/collectives.h"
#include "kernels/elementwise.h"
#include "parallel/lower.h"
#include "runtime/parameter_server/server_slice.h"

namespace px::sync {
namespace {

// One shard per parameter, whole, with its weight-decay flag.
std::vector<ParamShard> whole_shards(Task& task, const ParamStore& store) {
  const nn::Model shape_model = task.build(1, false);
  std::map<std::string, bool> decays;
  for (ValueId p : shape_model.graph.params()) decays[shape_model.graph.value(p).name] = shape_model.graph.value(p).weight_decay;
  std::vector<ParamShard> shards;
  for (const std::string& name : store.names()) {
    const Tensor& value = store.at(name);
    shards.push_back({name, value.shape(), 0, value.numel(), decays.at(name)});
  }
  return shards;
}

// `store`'s tensors as views of `arena`, holding their values.
ParamStore views_of(const ParamStore& store, Tensor& arena, const std::vector<int64_t>& offsets) {
  ParamStore views = store;
  for (size_t t = 0; t < offsets.size(); ++t) {
    Tensor& tensor = views.at(store.names()[t]);
    Tensor view = arena.slice_rows(offsets[t], offsets[t] + tensor.numel()).reshape(tensor.shape());
    view.copy_from(tensor);
    tensor = view;
  }
  return views;
}

}  // namespace

Replica::Replica(Task& task, const ParamStore& initial, const OptimizerConfig& optimizer, Precision precision,
                 const Checkpoint* resumed)
    : task_(task),
      precision_(precision),
      arena_(Tensor::zeros({initial.count()})),
      offsets_(ps::flat_offsets(initial)),
      optimizer_(optimizer, whole_shards(task, initial)) {
  params_ = views_of(initial, arena_, offsets_);
  if (resumed == nullptr) return;
  optimizer_.load(
      [&](const ParamShard& s, const std::string& slot) {
        return resumed->shards.read_whole(s.name + "." + slot, s.shape).reshape(Shape{s.count});
      },
      resumed->state.optimizer_steps);
}

Replica::Program& Replica::program_for(int64_t rows) {
  Program& p = programs_[rows];
  if (!p.executor) {
    p.model = task_.build(rows, true);
    p.executor = std::make_unique<ProgramExecutor>(
        parallel::lower_single(p.model.graph, p.model.loss, {}, batch_input_names(p.model), true, precision_),
        AxisGroups{});
    p.executor->use_parameters(params_);
  }
  return p;
}

ReplicaStep Replica::step(const DataBatch& batch, uint64_t seed, int64_t row_offset, double lr, double grad_clip) {
  const int64_t rows = batch.rows();
  Program& p = program_for(rows);
  // The Program's Norm and Clip clip this replica's mean gradient (--grad-clip).
  const StepResult out = p.executor->run(
      {.feeds = feeds_of(p.model, batch), .seed = seed, .row_offset = row_offset, .grad_clip = grad_clip});
  if (!std::isfinite(out.loss)) return {.loss = out.loss, .rows = rows, .peak_bytes = out.peak_bytes};
  optimizer_.begin_step();
  for (size_t t = 0; t < offsets_.size(); ++t) {
    const Tensor g = p.executor->gradient(params_.names()[t]);
    optimizer_.update(t, arena_.f32() + offsets_[t], g.f32(), lr);
  }
  return {.loss = out.loss, .rows = rows, .peak_bytes = out.peak_bytes};
}

void Replica::average_span(comm::Communicator& group, std::span<float> values, double scale) {
  kernels::scale(static_cast<int64_t>(values.size()), static_cast<float>(scale), values.data(), values.data());
  comm::allreduce(group, values, comm::Reduction::sum, {.algorithm = comm::Algorithm::ring});
}

void Replica::average(comm::Communicator& group, double weight, double total, bool state) {
  if (group.size() == 1) return;
  average_span(group, {arena_.f32(), static_cast<size_t>(arena_.numel())}, weight / total);
  if (!state) return;
  for (size_t k = 0; k < optimizer_.slot_count(); ++k) average_span(group, optimizer_.flat_state(k), weight / total);
}

std::vector<SavedRun> Replica::state_runs() const {
  const std::vector<std::string> slot_names = optimizer_slot_names(optimizer_.config().kind);
  std::vector<SavedRun> runs;
  for (size_t t = 0; t < offsets_.size(); ++t) {
    const std::string& name = params_.names()[t];
    const Tensor& value = params_.at(name);
    const parallel::ShardRun whole = parallel::ShardRun::whole(value.shape());
    runs.push_back({name, whole, value.clone().reshape(Shape{value.numel()})});
    for (size_t s = 0; s < slot_names.size(); ++s) {
      std::span<const float> slot = optimizer_.state(s, t);
      Tensor copy = Tensor::empty(Shape{value.numel()});
      std::memcpy(copy.f32(), slot.data(), slot.size() * sizeof(float));
      runs.push_back({name + "." + slot_names[s], whole, copy});
    }
  }
  return runs;
}

}  // namespace px::sync
