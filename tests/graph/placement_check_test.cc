// Generic placement check: for every registered op, each example and each
// placement signature, split the inputs as the signature says across k = 2
// and 3 shards (S: uneven contiguous chunks; Z: zigzag pairs of chunks;
// B: whole copies; P: random
// summands), run the op on each shard alone, combine the outputs
// (concatenate S, sum P, compare B) and match the unsplit result. This is
// the ground data, tensor and sequence parallelism stand on.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/block.h"
#include "op_harness.h"

namespace px {
namespace {

using testing::concat_dim;
using testing::max_relative_diff;
using testing::random_inputs;
using testing::run_op;
using testing::slice_dim;

constexpr uint64_t kPlacementCheckSeed = 99;

struct Split {
  int64_t lo, hi;
};
Split chunk(int64_t n, int k, int r) { return {n * r / k, n * (r + 1) / k}; }
// A signature bound to an axis of its own rank count (PlacementSignature::
// ranks) is cut by core/block.h's rule, as the lowering cuts it.
Split cut(const PlacementSignature& sig, int64_t n, int k, int r) {
  if (sig.ranks == 0) return chunk(n, k, r);
  const Block b = block(n, k, r);
  return {b.begin, b.begin + b.count};
}

// Splits `full` into k random summands (float only).
std::vector<Tensor> partial_parts(const Tensor& full, int k, Rng& rng) {
  std::vector<Tensor> parts;
  Tensor rest = full.clone();
  for (int r = 0; r + 1 < k; ++r) {
    Tensor p = Tensor::empty(full.shape());
    for (int64_t j = 0; j < p.numel(); ++j) {
      p.f32()[j] = static_cast<float>(rng.normal());
      rest.f32()[j] -= p.f32()[j];
    }
    parts.push_back(p);
  }
  parts.push_back(rest);
  return parts;
}

// Shard r of k of dim p.dim under a zigzag split (graph/placement.h's Z):
// its early block, then its late one.
Tensor slice_zigzag(const Tensor& t, const Placement& p, int k, int r) {
  const ZigzagBlock z = zigzag_block(t.dim(p.dim), k, r);
  return concat_dim({slice_dim(t, p.dim, z.early.begin, z.early.begin + z.early.count),
                     slice_dim(t, p.dim, z.late.begin, z.late.begin + z.late.count)},
                    p.dim);
}

// The k shards of a zigzag split put back in order: block c of 2k is shard
// c's early part for c < k, shard 2k-1-c's late part after.
Tensor concat_zigzag(const std::vector<Tensor>& parts, const Placement& p, int64_t n) {
  const int k = static_cast<int>(parts.size());
  std::vector<Tensor> blocks;
  for (int c = 0; c < 2 * k; ++c) {
    const int r = c < k ? c : 2 * k - 1 - c;
    const ZigzagBlock z = zigzag_block(n, k, r);
    blocks.push_back(c < k ? slice_dim(parts[r], p.dim, 0, z.early.count)
                           : slice_dim(parts[r], p.dim, z.early.count, z.count()));
  }
  return concat_dim(blocks, p.dim);
}

// Rows [lo, hi) of split `p` of a tensor of shape `shape`: dim p.dim seen as
// p.groups groups, each cut the same way.
Tensor slice_split(const Tensor& t, const Placement& p, Split s) {
  if (p.groups == 1) return slice_dim(t, p.dim, s.lo, s.hi);
  std::vector<int64_t> grouped = t.shape().dims();
  const int64_t n = grouped[static_cast<size_t>(p.dim)];
  grouped[static_cast<size_t>(p.dim)] = n / p.groups;
  grouped.insert(grouped.begin() + p.dim, p.groups);
  Tensor part = slice_dim(t.reshape(Shape(grouped)), p.dim + 1, s.lo, s.hi);
  std::vector<int64_t> dims = t.shape().dims();
  dims[static_cast<size_t>(p.dim)] = p.groups * (s.hi - s.lo);
  return part.reshape(Shape(dims));
}

Tensor concat_split(const std::vector<Tensor>& parts, const Placement& p) {
  if (p.groups == 1) return concat_dim(parts, p.dim);
  std::vector<Tensor> grouped;
  for (const Tensor& t : parts) {
    std::vector<int64_t> dims = t.shape().dims();
    dims[static_cast<size_t>(p.dim)] /= p.groups;
    dims.insert(dims.begin() + p.dim, p.groups);
    grouped.push_back(t.reshape(Shape(dims)));
  }
  Tensor whole = concat_dim(grouped, p.dim + 1);
  std::vector<int64_t> dims = whole.shape().dims();
  dims[static_cast<size_t>(p.dim)] *= dims[static_cast<size_t>(p.dim) + 1];
  dims.erase(dims.begin() + p.dim + 1);
  return whole.reshape(Shape(dims));
}

// The box of shard r of a tensor placed `p` (empty when whole or grouped).
ShardBox box_of(const PlacementSignature& sig, const Shape& full, const Placement& p, int k, int r) {
  if (!p.is_split() || p.groups != 1) return {};
  ShardBox box{std::vector<int64_t>(static_cast<size_t>(full.rank()), 0), full};
  if (p.zigzag) {
    const ZigzagBlock z = zigzag_block(full[p.dim], k, r);
    box.offset[static_cast<size_t>(p.dim)] = z.early.begin;
    box.fold_dim = p.dim;
    box.fold_local = z.early.count;
    box.fold_global = z.late.begin;
    return box;
  }
  box.offset[static_cast<size_t>(p.dim)] = cut(sig, full[p.dim], k, r).lo;
  return box;
}

// Returns "" when the signature holds, else a description of the mismatch.
std::string check_signature(const OpDef& def, const OpExample& ex, const PlacementSignature& sig, int k,
                            Rng& rng) {
  std::vector<Tensor> inputs = random_inputs(ex, rng);
  std::vector<Tensor> full = run_op(def, ex.attrs, inputs, {.seed = kPlacementCheckSeed});
  auto splits_evenly = [&](const Placement& p, const Shape& shape) {
    return !p.is_split() || (shape[p.dim] % p.groups == 0 && (!sig.even || (shape[p.dim] / p.groups) % k == 0));
  };
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!splits_evenly(sig.inputs[i], inputs[i].shape())) return "skip";
  for (size_t o = 0; o < full.size(); ++o)
    if (!splits_evenly(sig.outputs[o], full[o].shape())) return "skip";

  std::vector<std::vector<Tensor>> shard_inputs(k);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Placement& p = sig.inputs[i];
    if (p.kind == Placement::Kind::split) {
      if (inputs[i].dim(p.dim) / p.groups < k) return "skip";  // a shard would be empty
      for (int r = 0; r < k; ++r)
        shard_inputs[r].push_back(p.zigzag ? slice_zigzag(inputs[i], p, k, r)
                                           : slice_split(inputs[i], p, cut(sig, inputs[i].dim(p.dim) / p.groups, k, r)));
    } else if (p.kind == Placement::Kind::partial) {
      if (p.reduce != Placement::Reduce::sum) return "skip";  // no op consumes a partial maximum
      auto parts = partial_parts(inputs[i], k, rng);
      for (int r = 0; r < k; ++r) shard_inputs[r].push_back(parts[r]);
    } else {
      for (int r = 0; r < k; ++r) shard_inputs[r].push_back(inputs[i]);
    }
  }

  std::vector<std::vector<Tensor>> shard_outputs(k);
  for (int r = 0; r < k; ++r) {
    OpContext ctx{.seed = kPlacementCheckSeed};
    std::vector<TensorSpec> local_in, local_out;
    for (size_t i = 0; i < inputs.size(); ++i) {
      ctx.inputs.push_back(box_of(sig, inputs[i].shape(), sig.inputs[i], k, r));
      local_in.push_back({shard_inputs[r][i].shape(), shard_inputs[r][i].dtype()});
    }
    for (size_t o = 0; o < full.size(); ++o) {
      const Placement& p = sig.outputs[o];
      ctx.outputs.push_back(box_of(sig, full[o].shape(), p, k, r));
      std::vector<int64_t> dims = full[o].shape().dims();
      if (p.zigzag) {
        dims[static_cast<size_t>(p.dim)] = zigzag_block(dims[static_cast<size_t>(p.dim)], k, r).count();
      } else if (p.is_split()) {
        const Split s = cut(sig, dims[static_cast<size_t>(p.dim)] / p.groups, k, r);
        dims[static_cast<size_t>(p.dim)] = p.groups * (s.hi - s.lo);
      }
      local_out.push_back({Shape(dims), full[o].dtype()});
    }
    const Attrs attrs = def.localize ? def.localize(ex.attrs, local_in, local_out) : ex.attrs;
    shard_outputs[r] = run_op(def, attrs, shard_inputs[r], ctx);
  }

  for (size_t o = 0; o < full.size(); ++o) {
    const Placement& p = sig.outputs[o];
    std::vector<Tensor> parts;
    for (int r = 0; r < k; ++r) parts.push_back(shard_outputs[r][o]);
    Tensor combined;
    if (p.zigzag) {
      combined = concat_zigzag(parts, p, full[o].dim(p.dim));
    } else if (p.kind == Placement::Kind::split) {
      combined = concat_split(parts, p);
    } else if (p.kind == Placement::Kind::partial) {
      combined = parts[0].clone();
      const bool max = p.reduce == Placement::Reduce::max;
      for (int r = 1; r < k; ++r)
        for (int64_t j = 0; j < combined.numel(); ++j)
          combined.f32()[j] = max ? std::max(combined.f32()[j], parts[r].f32()[j])
                                  : combined.f32()[j] + parts[r].f32()[j];
    } else {
      for (int r = 1; r < k; ++r)
        if (max_relative_diff(parts[r], full[o]) > 1e-4) return fmt::format("output {} differs on shard {}", o, r);
      combined = parts[0];
    }
    if (combined.shape() != full[o].shape())
      return fmt::format("output {} combines to {} but the unsplit op gives {}", o, combined.shape(),
                         full[o].shape());
    double diff = max_relative_diff(combined, full[o]);
    if (diff > 1e-4) return fmt::format("output {} differs by {}", o, diff);
  }
  return "";
}

TEST(PlacementCheck, EverySignatureOfEveryOpReproducesTheUnsplitResult) {
  Rng rng(5);
  int checked = 0;
  for (const auto& name : OpRegistry::instance().names()) {
    const OpDef& def = OpRegistry::instance().get(name);
    for (const OpExample& ex : def.examples()) {
      for (const auto& sig : def.signatures(ex.inputs, ex.attrs)) {
        // Blocks exchanged between ranks are the lowering's transfers
        // (tests/parallel/context_parallel_test.cc holds them); a routed
        // signature holds on rows a routed exchange brought, as local
        // expert indices (tests/parallel/moe_test.cc's expert cases).
        if (sig.exchanges || sig.routed) continue;
        const std::vector<int> counts = sig.ranks > 0 ? std::vector<int>{sig.ranks} : std::vector<int>{2, 3};
        for (int k : counts) {
          std::string problem = check_signature(def, ex, sig, k, rng);
          if (problem == "skip") continue;
          EXPECT_EQ(problem, "") << name << " " << ex.attrs.str() << " " << sig.str() << " k=" << k;
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 100);
}

// One level of splitting: `parts[r]` of `whole` placed `p` over 2 shards,
// with each part's offset along every dim added to `offset`.
struct Split2 {
  std::vector<Tensor> parts;
  std::vector<std::vector<int64_t>> offsets;
};

Split2 split_two(const Tensor& whole, const Placement& p, const std::vector<int64_t>& offset, Rng& rng) {
  Split2 out;
  if (p.is_partial()) {
    out.parts = partial_parts(whole, 2, rng);
    out.offsets = {offset, offset};
    return out;
  }
  for (int r = 0; r < 2; ++r) {
    std::vector<int64_t> o = offset;
    if (p.is_split()) {
      const Split s = chunk(whole.dim(p.dim), 2, r);
      out.parts.push_back(slice_dim(whole, p.dim, s.lo, s.hi));
      o[static_cast<size_t>(p.dim)] += s.lo;
    } else {
      out.parts.push_back(whole);
    }
    out.offsets.push_back(o);
  }
  return out;
}

Tensor combine_two(const std::vector<Tensor>& parts, const Placement& p, std::string& problem) {
  if (p.is_split()) return concat_dim(parts, p.dim);
  if (p.is_partial()) {
    Tensor sum = parts[0].clone();
    for (int64_t j = 0; j < sum.numel(); ++j)
      sum.f32()[j] = p.reduce == Placement::Reduce::max ? std::max(sum.f32()[j], parts[1].f32()[j])
                                                        : sum.f32()[j] + parts[1].f32()[j];
    return sum;
  }
  if (max_relative_diff(parts[0], parts[1]) > 1e-4 && problem.empty()) problem = "a B output differs between shards";
  return parts[0];
}

// Signatures compose across two mesh axes: the inputs split by `outer`
// over 2 ranks, each part split by `inner` over 2 more (nested blocks where
// both split one dim), the op run on the 4 shards with their boxes, and the
// outputs combined inner then outer match the unsplit result.
std::string check_two_axes(const OpDef& def, const OpExample& ex, const PlacementSignature& outer,
                           const PlacementSignature& inner, Rng& rng) {
  for (const PlacementSignature* s : {&outer, &inner}) {
    if (s->even || s->ranks > 0 || s->exchanges) return "skip";
    for (const Placement& p : s->inputs)
      if ((p.is_split() && p.groups != 1) || (p.is_partial() && p.reduce != Placement::Reduce::sum)) return "skip";
    for (const Placement& p : s->outputs)
      if (p.is_split() && p.groups != 1) return "skip";
  }
  std::vector<Tensor> inputs = random_inputs(ex, rng);
  const std::vector<Tensor> full = run_op(def, ex.attrs, inputs, {.seed = kPlacementCheckSeed});
  for (size_t i = 0; i < inputs.size(); ++i)
    for (const PlacementSignature* s : {&outer, &inner})
      if (s->inputs[i].is_split() && inputs[i].dim(s->inputs[i].dim) < 4) return "skip";
  for (size_t o = 0; o < full.size(); ++o)
    for (const PlacementSignature* s : {&outer, &inner})
      if (s->outputs[o].is_split() && full[o].dim(s->outputs[o].dim) < 4) return "skip";

  // shard[a][b]: inputs and their offsets.
  std::vector<std::vector<std::vector<Tensor>>> shard(2, std::vector<std::vector<Tensor>>(2));
  std::vector<std::vector<std::vector<ShardBox>>> boxes(2, std::vector<std::vector<ShardBox>>(2));
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<int64_t> zero(static_cast<size_t>(inputs[i].rank()), 0);
    const Split2 first = split_two(inputs[i], outer.inputs[i], zero, rng);
    for (int a = 0; a < 2; ++a) {
      const Split2 second = split_two(first.parts[a], inner.inputs[i], first.offsets[a], rng);
      for (int b = 0; b < 2; ++b) {
        shard[a][b].push_back(second.parts[b]);
        boxes[a][b].push_back({second.offsets[b], inputs[i].shape()});
      }
    }
  }
  // Outputs: the same nesting gives each shard's output box and local shape.
  std::vector<std::vector<std::vector<ShardBox>>> out_boxes(2, std::vector<std::vector<ShardBox>>(2));
  std::vector<std::vector<std::vector<TensorSpec>>> out_specs(2, std::vector<std::vector<TensorSpec>>(2));
  for (size_t o = 0; o < full.size(); ++o)
    for (int a = 0; a < 2; ++a)
      for (int b = 0; b < 2; ++b) {
        std::vector<int64_t> offset(static_cast<size_t>(full[o].rank()), 0), dims = full[o].shape().dims();
        for (auto [p, r] : {std::pair{outer.outputs[o], a}, std::pair{inner.outputs[o], b}})
          if (p.is_split()) {
            const Split s = chunk(dims[static_cast<size_t>(p.dim)], 2, r);
            offset[static_cast<size_t>(p.dim)] += s.lo;
            dims[static_cast<size_t>(p.dim)] = s.hi - s.lo;
          }
        out_boxes[a][b].push_back({offset, full[o].shape()});
        out_specs[a][b].push_back({Shape(dims), full[o].dtype()});
      }
  std::vector<std::vector<std::vector<Tensor>>> outs(2, std::vector<std::vector<Tensor>>(2));
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b) {
      std::vector<TensorSpec> local_in;
      for (const Tensor& t : shard[a][b]) local_in.push_back({t.shape(), t.dtype()});
      const Attrs attrs = def.localize ? def.localize(ex.attrs, local_in, out_specs[a][b]) : ex.attrs;
      outs[a][b] = run_op(def, attrs, shard[a][b], {.seed = kPlacementCheckSeed, .inputs = boxes[a][b], .outputs = out_boxes[a][b]});
    }
  std::string problem;
  for (size_t o = 0; o < full.size(); ++o) {
    std::vector<Tensor> per_outer;
    for (int a = 0; a < 2; ++a) per_outer.push_back(combine_two({outs[a][0][o], outs[a][1][o]}, inner.outputs[o], problem));
    const Tensor combined = combine_two(per_outer, outer.outputs[o], problem);
    if (!problem.empty()) return fmt::format("output {}: {}", o, problem);
    if (combined.shape() != full[o].shape())
      return fmt::format("output {} combines to {} but the unsplit op gives {}", o, combined.shape(), full[o].shape());
    const double diff = max_relative_diff(combined, full[o]);
    if (diff > 1e-4) return fmt::format("output {} differs by {}", o, diff);
  }
  return "";
}

TEST(PlacementCheck, EveryPairOfSignaturesComposesOnATwoAxisMesh) {
  Rng rng(17);
  int checked = 0;
  for (const auto& name : OpRegistry::instance().names()) {
    const OpDef& def = OpRegistry::instance().get(name);
    for (const OpExample& ex : def.examples())
      for (const auto& outer : def.signatures(ex.inputs, ex.attrs))
        for (const auto& inner : def.signatures(ex.inputs, ex.attrs)) {
          if (outer.routed || inner.routed) continue;  // on rows a routed exchange brought (above)
          const std::string problem = check_two_axes(def, ex, outer, inner, rng);
          if (problem == "skip") continue;
          EXPECT_EQ(problem, "") << name << " " << ex.attrs.str() << " outer " << outer.str() << ", inner "
                                 << inner.str();
          ++checked;
        }
  }
  EXPECT_GT(checked, 300);
}

TEST(PlacementCheck, MatMulOffersDataColumnAndRowParallelism) {
  const OpDef& def = OpRegistry::instance().get("matmul");
  std::vector<TensorSpec> in{{Shape{8, 4}, DType::f32}, {Shape{4, 6}, DType::f32}};
  std::vector<std::string> names;
  for (const auto& s : def.signatures(in, {})) names.push_back(s.str());
  auto has = [&](const std::string& want) { return std::find(names.begin(), names.end(), want) != names.end(); };
  EXPECT_TRUE(has("data_parallel_0: (S(0), B) -> (S(0))"));
  EXPECT_TRUE(has("column_parallel: (B, S(1)) -> (S(1))"));
  EXPECT_TRUE(has("row_parallel: (S(1), S(0)) -> (P)"));
}

// A bias is a parameter, stored whole (B) or split with the features, never
// partial. bias_add must not take a partial x with a whole bias: each rank
// would add all of b to its summand, so the sum would hold b k times, which
// the harness catches. Row-parallel linear (P out) therefore has no bias.
TEST(PlacementCheck, BiasAddTakesNoPartialInputWithAWholeBias) {
  const OpDef& def = OpRegistry::instance().get("bias_add");
  OpExample ex{{{Shape{6, 5}, DType::f32}, {Shape{5}, DType::f32}}, {}, {}};
  for (const auto& sig : def.signatures(ex.inputs, ex.attrs))
    EXPECT_FALSE(sig.inputs[0] == Placement::P() && sig.inputs[1] == Placement::B()) << sig.str();
  PlacementSignature unsound{"partial", {Placement::P(), Placement::B()}, {Placement::P()}};
  Rng rng(3);
  EXPECT_NE(check_signature(def, ex, unsound, 2, rng), "");

  std::vector<TensorSpec> x_w{{Shape{6, 5}, DType::f32}, {Shape{5, 4}, DType::f32}};
  std::vector<std::string> linear;
  for (const auto& sig : OpRegistry::instance().get("linear").signatures(x_w, {})) linear.push_back(sig.str());
  EXPECT_NE(std::find(linear.begin(), linear.end(), "row_parallel: (S(1), S(0)) -> (P)"), linear.end());
}

TEST(PlacementCheck, AWrongSignatureIsCaught) {
  // The harness must be able to fail: claim matmul's row split gives a split output.
  const OpDef& def = OpRegistry::instance().get("matmul");
  OpExample ex{{{Shape{6, 5}, DType::f32}, {Shape{5, 4}, DType::f32}}, {}, {}};
  PlacementSignature wrong{"wrong", {Placement::S(1), Placement::S(0)}, {Placement::S(1)}};
  Rng rng(3);
  EXPECT_NE(check_signature(def, ex, wrong, 2, rng), "");
}

}  // namespace
}  // namespace px
