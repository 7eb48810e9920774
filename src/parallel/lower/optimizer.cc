// optimizer: the squared global gradient norm once every gradient is
// reduced (summed over the data axis when gradients are sharded, and over
// the model and pipeline axes, where a replicated parameter counts once,
// as does one two pipeline stages share) and the
// clip to it (clipping and the metrics need it before any update), then an
// Update per parameter (or, sharded, per piece of a parameter inside this
// rank's block of a bucket) as soon as its bucket's gradient is complete,
// and, where the parameters are stored whole but updated as shards
// (ZeRO-1/2), the transition back: the bucket's parameters all-gathered.
#include <algorithm>

#include "core/error.h"
#include "parallel/lower/passes.h"

namespace px::parallel::passes {

namespace {

// One Update's worth: a run of one parameter's elements, its gradient and its storage.
struct Piece {
  int param = -1;
  int64_t offset = 0, count = 0;
  Region gradient, storage;
};

// Per bucket, the pieces this rank updates: whole parameters, or (sharded)
// the part of each inside the rank's block of the bucket.
std::vector<std::vector<Piece>> pieces_of(const Program& p, bool sharded) {
  std::vector<std::vector<Piece>> out(p.buckets.size());
  for (size_t b = 0; b < p.buckets.size(); ++b) {
    const BucketLayout& bucket = p.buckets[b];
    for (int i : bucket.members) {
      const ParamLayout& param = p.params[static_cast<size_t>(i)];
      const int64_t in_bucket = param.offset - bucket.offset, count = param.shape.numel();
      if (!sharded) {
        out[b].push_back({i, 0, count, {bucket.grad_buffer, in_bucket, count}, {p.params_buffer, param.offset, count}});
        continue;
      }
      const int64_t lo = std::max(in_bucket, bucket.block_begin);
      const int64_t hi = std::min(in_bucket + count, bucket.block_begin + bucket.block_count);
      if (lo >= hi) continue;
      const Region gradient{p.grad_shard_buffer, bucket.shard_offset + (lo - bucket.block_begin), hi - lo};
      const Region storage = p.param_shard_buffer >= 0 ? Region{p.param_shard_buffer, gradient.offset, hi - lo}
                                                       : Region{p.params_buffer, bucket.offset + lo, hi - lo};
      out[b].push_back({i, lo - in_bucket, hi - lo, gradient, storage});
    }
  }
  return out;
}

// The squared global norm after every reduction in `reduced`: squares
// summed locally, summed over the data axis when every rank holds a shard
// and over the model axes, then the clip that every update waits for.
// Returns the clip's instruction.
int emit_norm(const Context& c, Program& p, const std::vector<int>& reduced,
              const std::vector<std::vector<Piece>>& pieces, const std::vector<int>& model_axes, bool sharded) {
  // The gradients this rank holds reduced: its shard, or every bucket.
  std::vector<Region> whole;
  if (sharded) whole.push_back({p.grad_shard_buffer, 0, p.shard_count});
  else
    for (const BucketLayout& b : p.buckets) whole.push_back({b.grad_buffer, 0, b.count});
  // Pipeline stages hold different parameters, a shared one on each of its stages.
  std::vector<int> holders(p.params.size(), 1);
  for (const auto& [value, group] : c.work.shared)
    for (size_t i = 0; i < p.params.size(); ++i)
      if (p.params[i].value == value) holders[i] = static_cast<int>(p.subgroups[static_cast<size_t>(group)].coords.size());
  std::vector<Region> gradients = whole;
  std::vector<double> weights;
  if (!model_axes.empty()) {
    gradients.clear();
    // Per piece: a parameter the model axes replicate counts once over them.
    for (const std::vector<Piece>& bucket : pieces)
      for (const Piece& piece : bucket) {
        const ParamLayout& param = p.params[static_cast<size_t>(piece.param)];
        double copies = 1;
        for (int a : model_axes)
          if (a == c.work.pipeline_axis) copies *= holders[static_cast<size_t>(piece.param)];
          else if (!param.placement[static_cast<size_t>(a)].is_split())
            copies *= c.strategy.mesh.axes()[static_cast<size_t>(a)].size;
        gradients.push_back(piece.gradient);
        weights.push_back(1 / copies);
      }
  }
  std::vector<int> after;
  for (int r : reduced)
    if (r >= 0) after.push_back(r);
  // One float the executor reads after the step (metrics, clipping).
  p.norm_buffer = add_buffer(p, {.kind = Buffer::Kind::norm, .name = "norm", .count = 1, .persistent = true});
  const Region squares{p.norm_buffer, 0, 1};
  int norm = emit(p, {.op = Norm{.gradients = gradients, .weights = weights, .into = squares},
                  .after = after,
                  .name = "gradient norm"});
  std::vector<int> sum_over = model_axes;
  if (sharded) sum_over.insert(sum_over.begin(), c.data_axis);
  for (int axis : sum_over)
    norm = emit(p, {.op = Collective{.kind = comm::Collective::allreduce, .axis = axis, .input = squares},
                    .after = {norm},
                    .name = "gradient norm"});
  norm = emit(p, {.op = Clip{.gradients = whole, .norm = squares},
                  .after = {norm},
                  .name = "clip"});
  return norm;
}

}  // namespace

void optimizer(const Context& c, Program& p) {
  // Without updates (a parameter-server worker) the norm and clip still
  // run: the gradients leave the rank clipped.
  if (!p.training) return;
  const bool sharded = c.zero_stage >= 1 && c.data_size > 1;
  // The last gradient collective per bucket (none on one rank: the gradient is complete once accumulated).
  std::vector<int> reduced(p.buckets.size(), -1);
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const auto* collective = std::get_if<Collective>(&p.instrs[i].op);
    if (collective == nullptr || collective->input.buffer < 0) continue;
    const Buffer& buffer = p.buffers[static_cast<size_t>(collective->input.buffer)];
    if (buffer.kind == Buffer::Kind::grad_bucket) reduced[static_cast<size_t>(buffer.bucket)] = static_cast<int>(i);
  }
  const std::vector<std::vector<Piece>> pieces = pieces_of(p, sharded);
  // Model axes (not the data axis, nor the context axis, whose ranks hold
  // the gradients the data path reduced with it) of more than one rank:
  // parameters split along them hold different elements on each rank,
  // replicated ones the same.
  std::vector<int> model_axes;
  for (size_t a = 0; a < c.strategy.mesh.axes().size(); ++a)
    if (static_cast<int>(a) != c.data_axis && static_cast<int>(a) != c.context_axis &&
        c.strategy.mesh.axes()[a].size > 1)
      model_axes.push_back(static_cast<int>(a));
  const int norm = c.strategy.lowering.global_norm ? emit_norm(c, p, reduced, pieces, model_axes, sharded) : -1;
  if (!c.strategy.lowering.updates) return;
  for (size_t b = 0; b < p.buckets.size(); ++b) {
    const BucketLayout& bucket = p.buckets[b];
    std::vector<int> after;
    if (reduced[b] >= 0) after.push_back(reduced[b]);
    if (norm >= 0) after.push_back(norm);
    std::vector<int> updates;
    for (const Piece& piece : pieces[b])
      updates.push_back(emit(p, {.op = Update{.param = piece.param, .offset = piece.offset, .count = piece.count,
                                              .gradient = piece.gradient, .storage = piece.storage},
                                 .after = after}));
    if (!sharded || p.params_buffer < 0) continue;
    const Transition& t = c.transition(Transition::Site::parameter_update,
                                       p.params[static_cast<size_t>(bucket.members.front())].value);
    PX_CHECK(t.how == Resharding::allgather, "a sharded update of whole parameters needs an allgather, the rule says {}",
             resharding_name(t.how));
    emit(p, {.op = Collective{.kind = comm::Collective::allgather,
                              .axis = c.data_axis,
                              .input = {p.params_buffer, bucket.offset + bucket.block_begin, bucket.block_count},
                              .output = {p.params_buffer, bucket.offset, bucket.count}},
             .after = updates,
             .name = fmt::format("gather updated bucket {}", b)});
  }
}

}  // namespace px::parallel::passes
