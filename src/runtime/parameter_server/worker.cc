#include "runtime/parameter_server/worker.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "core/rng.h"
#include "parallel/row_split.h"
#include "kernels/elementwise.h"
#include "runtime/parameter_server/poll.h"
#include "parallel/lower.h"
#include "runtime/parameter_server/server_slice.h"

namespace px::ps {

Worker::Worker(comm::Communicator& comm, const Layout& layout, Task& task, ParamStore& params, WorkerConfig config)
    : comm_(comm),
      layout_(layout),
      worker_(layout.worker_of(comm.rank())),
      task_(task),
      params_(params),
      config_(config),
      offsets_(flat_offsets(params)) {
  arena_ = Tensor::zeros({layout_.params});
  for (size_t t = 0; t < offsets_.size(); ++t) {
    Tensor& tensor = params_.at(params_.names()[t]);
    Tensor view = arena_.slice_rows(offsets_[t], offsets_[t] + tensor.numel()).reshape(tensor.shape());
    view.copy_from(tensor);
    tensor = view;
  }
  gradient_.resize(static_cast<size_t>(layout_.params));
}

Worker::Gradients& Worker::gradients_for(int64_t rows) {
  Gradients& g = programs_[rows];
  if (!g.executor) {
    g.model = task_.build(rows, true);
    g.executor = std::make_unique<ProgramExecutor>(
        parallel::lower_single(g.model.graph, g.model.loss, {}, batch_input_names(g.model), true, config_.precision),
        AxisGroups{});
    g.executor->use_parameters(params_);  // views into the arena pulls land in
  }
  return g;
}

void Worker::pull_from(const std::vector<int>& servers, int64_t clock, std::vector<int64_t>& complete) {
  std::vector<WorkerHeader> requests(servers.size(), WorkerHeader{.kind = WorkerHeader::kPull, .clock = clock});
  std::vector<PullHeader> headers(servers.size());
  std::vector<comm::Request> pending;
  for (size_t i = 0; i < servers.size(); ++i) {
    const int j = servers[i];
    const comm::Block shard = layout_.shard(j);
    pending.push_back(comm_.isend(j, kWorkerHeader, &requests[i], sizeof(WorkerHeader)));
    pending.push_back(comm_.irecv(j, kPullHeader, &headers[i], sizeof(PullHeader)));
    pending.push_back(comm_.irecv(j, kPullParams, arena_.f32() + shard.begin,
                                  static_cast<size_t>(shard.count) * sizeof(float)));
  }
  for (comm::Request& request : pending)
    await(comm_, request, fmt::format("server rank {}'s parameters for clock {}", request.peer, clock));
  for (size_t i = 0; i < servers.size(); ++i) complete[static_cast<size_t>(servers[i])] = headers[i].complete_clocks;
}

int64_t Worker::pull(int64_t clock) {
  std::vector<int> servers(static_cast<size_t>(layout_.servers));
  for (int j = 0; j < layout_.servers; ++j) servers[static_cast<size_t>(j)] = j;
  std::vector<int64_t> complete(servers.size());
  pull_from(servers, clock, complete);
  if (config_.bsp) {
    // Servers apply a clock one after another, so their replies may stand a
    // clock apart (with backup workers the clocks may also have moved past
    // `clock`): pull the ones behind again until every shard has the same
    // clocks applied, and compute the clock after those.
    for (;;) {
      const int64_t newest = *std::max_element(complete.begin(), complete.end());
      std::vector<int> behind;
      for (int j = 0; j < layout_.servers; ++j)
        if (complete[static_cast<size_t>(j)] < newest) behind.push_back(j);
      if (behind.empty()) {
        clock = newest;
        break;
      }
      pull_from(behind, newest, complete);
    }
  }
  const int64_t stalest = *std::min_element(complete.begin(), complete.end());
  stats_.max_staleness = std::max(stats_.max_staleness, clock - stalest);
  return clock;
}

void Worker::skip_batches_until(int64_t clock) {
  for (; next_batch_clock_ < clock; ++next_batch_clock_) task_.next_batch({.world = layout_.workers}, worker_);
}

void Worker::compute_and_push(int64_t clock) {
  PX_CHECK_EQ(next_batch_clock_, clock);
  DataBatch batch = task_.next_batch({.world = layout_.workers}, worker_);
  ++next_batch_clock_;
  const int64_t rows = batch.rows();
  // The previous push reads gradient_ and push_header_ until its sends are done.
  for (comm::Request& request : push_sends_) await(comm_, request, "a server to take a pushed gradient");
  push_sends_.clear();
  double weighted_loss = 0;
  if (rows == 0) {
    std::fill(gradient_.begin(), gradient_.end(), 0.0f);
  } else {
    const uint64_t seed = splitmix64(config_.seed ^ splitmix64(static_cast<uint64_t>(clock) * 1024));
    const int64_t row_offset = parallel::shard_rows(batch.global_rows, worker_, layout_.workers).begin;
    Gradients& program = gradients_for(rows);
    // The Program's Norm and Clip clip the worker's mean gradient (--grad-clip).
    StepResult out = program.executor->run({.feeds = feeds_of(program.model, batch),
                                            .seed = seed,
                                            .row_offset = row_offset,
                                            .grad_clip = config_.grad_clip});
    stats_.peak_tensor_bytes = std::max(stats_.peak_tensor_bytes, out.peak_bytes);
    if (!std::isfinite(out.loss))
      fail("training diverged at step {} on worker {}: loss is {} (lower the learning rate or enable --grad-clip)",
           clock + 1, worker_, out.loss);
    // This worker's share of the global batch (an epoch's last may be partial).
    const double share = double(rows) / double(batch.global_rows);
    for (size_t t = 0; t < offsets_.size(); ++t) {
      const Tensor g = program.executor->gradient(params_.names()[t]);
      kernels::scale(g.numel(), static_cast<float>(share), g.f32(), gradient_.data() + offsets_[t]);
    }
    weighted_loss = double(out.loss) * share;
  }
  push_header_ = {.kind = WorkerHeader::kPush, .clock = clock, .rows = rows, .global_rows = batch.global_rows,
                  .weighted_loss = weighted_loss,
                  .max_staleness = stats_.max_staleness};
  for (int j = 0; j < layout_.servers; ++j) {
    const comm::Block shard = layout_.shard(j);
    push_sends_.push_back(comm_.isend(j, kWorkerHeader, &push_header_, sizeof(WorkerHeader)));
    push_sends_.push_back(comm_.isend(j, kPushGradient, gradient_.data() + shard.begin,
                                      static_cast<size_t>(shard.count) * sizeof(float)));
  }
}

WorkerStats Worker::run() {
  next_batch_clock_ = config_.start_clock;
  for (int64_t clock = config_.start_clock; clock < config_.end_clock; ++clock) {
    clock = pull(clock);
    skip_batches_until(std::min(clock, config_.end_clock));
    if (clock >= config_.end_clock) break;  // bsp: every clock was applied while this worker fell behind
    if (config_.delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(config_.delay_ms));
    compute_and_push(clock);
  }
  for (comm::Request& request : push_sends_) await(comm_, request, "a server to take the last pushed gradient");
  push_sends_.clear();
  return stats_;
}

}  // namespace px::ps
