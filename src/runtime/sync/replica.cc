#include "runtime/sync/replica.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "comm/collectives.h"
#include "kernels/elementwise.h"
#include "parallel/lower.h"
#include "plan/job_strategy.h"
#include "runtime/executor/rank_groups.h"
#include "runtime/train/trainer.h"

namespace px::sync {
namespace {

// The request within a replica: its own split (the replicas' row shares
// are the job's, across replicas).
parallel::StrategyRequest within_replica(parallel::StrategyRequest request) {
  request.row_shares.clear();
  return request;
}

void average_span(comm::Communicator& group, std::span<float> values, double scale) {
  kernels::scale(static_cast<int64_t>(values.size()), static_cast<float>(scale), values.data(), values.data());
  comm::allreduce(group, values, comm::Reduction::sum, {.algorithm = comm::Algorithm::ring});
}

}  // namespace

Replica::Replica(Task& task, const parallel::StrategyRequest& request, const OptimizerOptions& optimizer,
                 int64_t rows, comm::Communicator& ranks, const ParamStore& initial, const Checkpoint* resumed)
    : task_(task), request_(within_replica(request)), ranks_(ranks) {
  const nn::Model& model = models_.emplace(rows, task_.build(rows, true)).first->second;
  strategy_ = plan::strategy_for(request_, model, ranks_.size(), run_use(optimizer));
  AxisGroups groups;
  if (ranks_.size() > 1) {
    mesh_groups_ = parallel::make_strategy_groups(ranks_, strategy_);
    groups = axis_groups(mesh_groups_);
    menus_ = parallel::algorithm_menus(mesh_groups_);
  }
  parallel::LowerRequest lowering = plan::lower_request(model, request_);
  lowering.menus = menus_;
  parallel::Program program = parallel::lower(lowering, strategy_, ranks_.rank());
  strategy_ = parallel::with_stage_cuts_of(strategy_, program);
  executor_ = std::make_unique<ProgramExecutor>(std::move(program), groups,
                                                optimizer_for_strategy(optimizer.update, strategy_));
  executor_->set_parameters(initial);
  if (resumed != nullptr) executor_->load_state(resumed->shards, resumed->state.optimizer_steps);
}

ReplicaStep Replica::step(const DataBatch& batch, uint64_t seed, int64_t row_offset, double lr, double grad_clip) {
  const int64_t rows = batch.rows();
  // An epoch's partial last batch: the same strategy lowered for its rows.
  auto model = models_.find(rows);
  if (model == models_.end()) {
    model = models_.emplace(rows, task_.build(rows, true)).first;
    parallel::LowerRequest lowering = plan::lower_request(model->second, request_);
    lowering.menus = menus_;
    executor_->add_program(parallel::lower(lowering, strategy_, ranks_.rank()));
  }
  // The program's Norm and Clip clip this replica's gradient (--grad-clip).
  const StepResult out = executor_->run({.feeds = feeds_of(model->second, batch), .global_rows = rows, .seed = seed,
                                         .row_offset = row_offset, .lr = lr, .grad_clip = grad_clip});
  // A non-finite gradient norm skips the update: the replica's loss says it diverged.
  const double loss = out.skipped && std::isfinite(out.loss) ? std::nan("") : out.loss;
  return {.loss = loss, .rows = rows, .peak_bytes = out.peak_bytes};
}

void Replica::average(comm::Communicator& group, double weight, double total, bool state) {
  if (group.size() == 1) return;
  average_span(group, executor_->local_parameters(), weight / total);
  if (!state) return;
  Optimizer& optimizer = executor_->optimizer();
  for (size_t k = 0; k < optimizer.slot_count(); ++k) average_span(group, optimizer.flat_state(k), weight / total);
}

CheckpointPart Replica::checkpoint_part() const {
  return {.shards = executor_->state_runs(),
          .who = {{"mesh", strategy_.mesh.str()}, {"coords", nlohmann::json(executor_->program().coords).dump()}}};
}

}  // namespace px::sync
