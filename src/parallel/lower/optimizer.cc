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
#include <map>

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

// The squared global norm after every reduction in `reduced`: each
// parameter's squares in an entry of its own (Norm), summed over the data
// axis when every rank holds a shard and over the model axes, then the clip
// that every update waits for, adding the entries in parameter order. One
// rank and a pipeline thus add the same per-parameter sums in the same
// order, and clipping keeps a pipeline equal to one rank. Returns the
// clip's instruction.
int emit_norm(const Context& c, Program& p, const std::vector<std::vector<int>>& reduced,
              const std::vector<std::vector<Piece>>& pieces, const std::vector<int>& model_axes, bool sharded) {
  // The gradients this rank holds reduced (clipped): its shard, or every bucket.
  std::vector<Region> whole;
  if (sharded) whole.push_back({p.grad_shard_buffer, 0, p.shard_count});
  else
    for (const BucketLayout& b : p.buckets) whole.push_back({b.grad_buffer, 0, b.count});
  // A parameter pipeline stages share is counted on the first of them.
  std::vector<bool> counted_elsewhere(p.params.size(), false);
  const int pipeline_coord =
      c.work.pipeline_axis >= 0 ? c.coords[static_cast<size_t>(c.work.pipeline_axis)] : 0;
  for (const auto& [value, group] : c.work.shared)
    for (size_t i = 0; i < p.params.size(); ++i)
      if (p.params[i].value == value)
        counted_elsewhere[i] = p.subgroups[static_cast<size_t>(group)].coords.front() != pipeline_coord;
  // Entries by the parameter's place in the model's declaration order
  // (Context::grads), the same on every rank of every strategy.
  std::map<ValueId, int> entry_of;
  for (size_t i = 0; i < c.grads.size(); ++i) entry_of[c.grads[i].param] = static_cast<int>(i);
  Norm squares_of{};
  for (const std::vector<Piece>& bucket : pieces)
    for (const Piece& piece : bucket) {
      if (counted_elsewhere[static_cast<size_t>(piece.param)]) continue;
      // A parameter the other model axes replicate counts once over them.
      const ParamLayout& param = p.params[static_cast<size_t>(piece.param)];
      double copies = 1;
      for (int a : model_axes)
        if (a != c.work.pipeline_axis && !param.placement[static_cast<size_t>(a)].is_split())
          copies *= c.strategy.mesh.axes()[static_cast<size_t>(a)].size;
      squares_of.gradients.push_back(piece.gradient);
      squares_of.weights.push_back(1 / copies);
      squares_of.params.push_back(entry_of.at(param.value));
    }
  if (std::all_of(squares_of.weights.begin(), squares_of.weights.end(), [](double w) { return w == 1; }))
    squares_of.weights.clear();
  std::vector<int> after;
  for (const std::vector<int>& bucket : reduced)
    for (int r : bucket) after.push_back(r);
  // One float per parameter of the model, which the executor reads after the step (metrics, clipping).
  const auto count = static_cast<int64_t>(c.grads.size());
  p.norm_buffer = add_buffer(p, {.kind = Buffer::Kind::norm, .name = "norm", .count = count, .persistent = true});
  squares_of.into = {p.norm_buffer, 0, count};
  const Region squares = squares_of.into;
  int norm = emit(p, {.op = std::move(squares_of), .after = after, .name = "gradient norm"});
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
  // Per bucket, the gradient collectives to wait for: the last one (none
  // on one rank: the gradient is complete once accumulated), and the
  // reductions of partial members over a model axis
  // (Strategy::lowering.overlap_model_gradients) it does not wait for.
  std::vector<std::vector<int>> reduced(p.buckets.size());
  std::vector<std::vector<int>> over_model_axes(p.buckets.size());
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const auto* collective = std::get_if<Collective>(&p.instrs[i].op);
    if (collective == nullptr || collective->input.buffer < 0) continue;
    const Buffer& buffer = p.buffers[static_cast<size_t>(collective->input.buffer)];
    if (buffer.kind != Buffer::Kind::grad_bucket) continue;
    const auto b = static_cast<size_t>(buffer.bucket);
    reduced[b] = {static_cast<int>(i)};
    if (collective->axis != c.data_axis && collective->subgroup < 0) over_model_axes[b].push_back(static_cast<int>(i));
  }
  for (size_t b = 0; b < p.buckets.size(); ++b) {
    if (reduced[b].empty()) continue;
    const std::vector<int>& waits = p.instrs[static_cast<size_t>(reduced[b].front())].after;
    for (int r : over_model_axes[b])
      if (r != reduced[b].front() && std::find(waits.begin(), waits.end(), r) == waits.end()) reduced[b].push_back(r);
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
  // Sharded under expert parallelism, the data path's sum of the squares
  // spans the expert ranks already: each element sits in one rank's shard
  // of the data x expert ranks (an expert bucket's in its data rank's of
  // its expert rank's experts).
  std::vector<int> norm_axes = model_axes;
  if (sharded) std::erase(norm_axes, c.expert_axis);
  const int norm = c.strategy.lowering.global_norm ? emit_norm(c, p, reduced, pieces, norm_axes, sharded) : -1;
  if (!c.strategy.lowering.updates) return;
  for (size_t b = 0; b < p.buckets.size(); ++b) {
    const BucketLayout& bucket = p.buckets[b];
    std::vector<int> after = reduced[b];
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
                              .output = {p.params_buffer, bucket.offset, bucket.count},
                              .expert_data = bucket.experts},
             .after = updates,
             .name = fmt::format("gather updated bucket {}", b)});
  }
}

}  // namespace px::parallel::passes
