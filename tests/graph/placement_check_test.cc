// Generic placement check: for every registered op, each example and each
// placement signature, split the inputs as the signature says across k = 2
// and 3 shards (S: uneven contiguous chunks; B: whole copies; P: random
// summands), run the op on each shard alone, combine the outputs
// (concatenate S, sum P, compare B) and match the unsplit result. This is
// the ground data, tensor and sequence parallelism stand on.
#include <gtest/gtest.h>

#include <algorithm>

#include "op_harness.h"

namespace px {
namespace {

using testing::concat_dim;
using testing::max_relative_diff;
using testing::random_inputs;
using testing::run_op;
using testing::slice_dim;

constexpr uint64_t kSeed = 99;

struct Split {
  int64_t lo, hi;
};
Split chunk(int64_t n, int k, int r) { return {n * r / k, n * (r + 1) / k}; }

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
ShardBox box_of(const Shape& full, const Placement& p, int k, int r) {
  if (!p.is_split() || p.groups != 1) return {};
  ShardBox box{std::vector<int64_t>(static_cast<size_t>(full.rank()), 0), full};
  box.offset[static_cast<size_t>(p.dim)] = chunk(full[p.dim], k, r).lo;
  return box;
}

// Returns "" when the signature holds, else a description of the mismatch.
std::string check_signature(const OpDef& def, const OpExample& ex, const PlacementSignature& sig, int k,
                            Rng& rng) {
  std::vector<Tensor> inputs = random_inputs(ex, rng);
  std::vector<Tensor> full = run_op(def, ex.attrs, inputs, {.seed = kSeed});
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
        shard_inputs[r].push_back(slice_split(inputs[i], p, chunk(inputs[i].dim(p.dim) / p.groups, k, r)));
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
    OpContext ctx{.seed = kSeed};
    std::vector<TensorSpec> local_in, local_out;
    for (size_t i = 0; i < inputs.size(); ++i) {
      ctx.inputs.push_back(box_of(inputs[i].shape(), sig.inputs[i], k, r));
      local_in.push_back({shard_inputs[r][i].shape(), shard_inputs[r][i].dtype()});
    }
    for (size_t o = 0; o < full.size(); ++o) {
      const Placement& p = sig.outputs[o];
      ctx.outputs.push_back(box_of(full[o].shape(), p, k, r));
      std::vector<int64_t> dims = full[o].shape().dims();
      if (p.is_split()) {
        const Split s = chunk(dims[static_cast<size_t>(p.dim)] / p.groups, k, r);
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
    if (p.kind == Placement::Kind::split) {
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
        for (int k : {2, 3}) {
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
