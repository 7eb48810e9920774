// optimizer: the squared global gradient norm once every gradient is
// reduced (summed over the data axis when gradients are sharded) and the
// clip to it (clipping and the metrics need it before any update), then an
// Update per parameter (or, sharded, per piece of a parameter inside this
// rank's block of a bucket) as soon as its bucket's gradient is complete,
// and, where the parameters are stored whole but updated as shards
// (ZeRO-1/2), the transition back: the bucket's parameters all-gathered.
#include <algorithm>

#include "core/error.h"
#include "parallel/lower/passes.h"

namespace px::parallel::passes {

void optimizer(const Context& c, Program& p) {
  if (!p.training || !c.strategy.lowering.updates) return;
  const bool sharded = c.zero_stage >= 1 && c.data_size > 1;
  // The last gradient collective per bucket (none on one rank: the gradient is complete once accumulated).
  std::vector<int> reduced(p.buckets.size(), -1);
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const auto* collective = std::get_if<Collective>(&p.instrs[i].op);
    if (collective == nullptr || collective->input.buffer < 0) continue;
    const Buffer& buffer = p.buffers[static_cast<size_t>(collective->input.buffer)];
    if (buffer.kind == Buffer::Kind::grad_bucket) reduced[static_cast<size_t>(buffer.bucket)] = static_cast<int>(i);
  }
  // The norm: squares summed locally, summed over the data axis when every
  // rank holds a shard, then the clip that every update waits for.
  int norm = -1;
  if (c.strategy.lowering.global_norm) {
    std::vector<Region> gradients;
    if (sharded) gradients.push_back({p.grad_shard_buffer, 0, p.shard_count});
    else
      for (const BucketLayout& b : p.buckets) gradients.push_back({b.grad_buffer, 0, b.count});
    std::vector<int> after;
    for (int r : reduced)
      if (r >= 0) after.push_back(r);
    // One float the executor reads after the step (metrics, clipping).
    p.norm_buffer = add_buffer(p, {.kind = Buffer::Kind::norm, .name = "norm", .count = 1, .persistent = true});
    const Region squares{p.norm_buffer, 0, 1};
    norm = emit(p, {.op = Norm{.gradients = gradients, .into = squares},
                    .stream = kComputeStream,
                    .after = after,
                    .name = "gradient norm"});
    if (sharded)
      norm = emit(p, {.op = Collective{.kind = comm::Collective::allreduce, .axis = c.data_axis, .input = squares},
                      .stream = comm_stream(c.data_axis),
                      .after = {norm},
                      .name = "gradient norm"});
    norm = emit(p, {.op = Clip{.gradients = gradients, .norm = squares},
                    .stream = kComputeStream,
                    .after = {norm},
                    .name = "clip"});
  }
  for (size_t b = 0; b < p.buckets.size(); ++b) {
    const BucketLayout& bucket = p.buckets[b];
    std::vector<int> after;
    if (reduced[b] >= 0) after.push_back(reduced[b]);
    if (norm >= 0) after.push_back(norm);
    std::vector<int> updates;
    for (int i : bucket.members) {
      const ParamLayout& param = p.params[static_cast<size_t>(i)];
      const int64_t in_bucket = param.offset - bucket.offset, count = param.shape.numel();
      if (!sharded) {
        updates.push_back(emit(p, {.op = Update{.param = i,
                                                .offset = 0,
                                                .count = count,
                                                .gradient = {bucket.grad_buffer, in_bucket, count},
                                                .storage = {p.params_buffer, param.offset, count}},
                                   .stream = kComputeStream,
                                   .after = after}));
        continue;
      }
      // The part of this parameter inside the rank's block of the bucket.
      const int64_t lo = std::max(in_bucket, bucket.block_begin);
      const int64_t hi = std::min(in_bucket + count, bucket.block_begin + bucket.block_count);
      if (lo >= hi) continue;
      const Region gradient{p.grad_shard_buffer, bucket.shard_offset + (lo - bucket.block_begin), hi - lo};
      const Region storage = p.param_shard_buffer >= 0
                                 ? Region{p.param_shard_buffer, gradient.offset, hi - lo}
                                 : Region{p.params_buffer, bucket.offset + lo, hi - lo};
      updates.push_back(emit(p, {.op = Update{.param = i, .offset = lo - in_bucket, .count = hi - lo,
                                              .gradient = gradient, .storage = storage},
                                 .stream = kComputeStream,
                                 .after = after}));
    }
    if (!sharded || p.params_buffer < 0) continue;
    const Transition& t = c.transition(Transition::Site::parameter_update,
                                       p.params[static_cast<size_t>(bucket.members.front())].value);
    PX_CHECK(t.how == Resharding::allgather, "a sharded update of whole parameters needs an allgather, the rule says {}",
             resharding_name(t.how));
    emit(p, {.op = Collective{.kind = comm::Collective::allgather,
                              .axis = c.data_axis,
                              .input = {p.params_buffer, bucket.offset + bucket.block_begin, bucket.block_count},
                              .output = {p.params_buffer, bucket.offset, bucket.count}},
             .stream = comm_stream(c.data_axis),
             .after = updates,
             .name = fmt::format("gather updated bucket {}", b)});
  }
}

}  // namespace px::parallel::passes
