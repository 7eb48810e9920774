// Softmax cross-entropy in parts, so that a vocabulary split never gathers
// the logits (Megatron's vocab-parallel cross-entropy). Legend: N... rows
// (batch, time), V classes. Per row, with m any shift (the row maximum):
//
//   loss = scale · Σ_rows (m + log s − t),  s = Σ_v exp(l_v − m),  t = l_target
//
//   logits_max:         l (N..., V)             -> m (N...)     no gradient: m is a shift
//   logits_sum_exp:     l, m (N...)             -> s (N...)
//   target_logit:       l, targets (N...) i32   -> t (N...)
//   cross_entropy_loss: m, s, t                 -> loss []      attrs: scale
//
// Split along V, each shard's max is a candidate (P(max)), its s and t are
// summands (P): the rule reduces the three across the vocabulary axis and
// the loss is computed whole. Backward is local: ds = scale/s, dt = −scale,
// dl = ds·exp(l − m) + dt·onehot(target), each shard for its own classes
// (its box says which). The loss does not depend on m (m + log s is shift
// invariant), so treating m as a constant gives the exact gradient.
#include <cmath>
#include <limits>

#include "core/thread_pool.h"
#include "graph/ops/op_util.h"

namespace px::ops {
namespace {

void require_rows(const TensorSpec& row, const Shape& logits, const char* what) {
  require(row.shape.rank() + 1 == logits.rank(), "{} {} must be the logits {} without the class dim", what,
          row.shape, logits);
  for (int d = 0; d < row.shape.rank(); ++d)
    require(row.shape[d] == logits[d], "{} {} and logits {} disagree", what, row.shape, logits);
}

// Signatures of an op over (logits-shaped, row-shaped...) inputs with one
// output, row-shaped or logits-shaped: the row dims split alike, or the
// class dim split with row inputs whole (the output `vocab` placed).
std::vector<PlacementSignature> class_signatures(int logits_rank, std::vector<bool> input_is_logits,
                                                 bool output_is_logits, Placement vocab_output) {
  std::vector<PlacementSignature> s;
  const size_t n = input_is_logits.size();
  for (int d = 0; d + 1 < logits_rank; ++d)
    s.push_back({fmt::format("split_rows_{}", d), std::vector<Placement>(n, Placement::S(d)), {Placement::S(d)}});
  std::vector<Placement> vocab;
  for (bool l : input_is_logits) vocab.push_back(l ? Placement::S(logits_rank - 1) : Placement::B());
  s.push_back({"vocab_parallel", vocab, {output_is_logits ? Placement::S(logits_rank - 1) : vocab_output}});
  s.push_back({"replicated", std::vector<Placement>(n, Placement::B()), {Placement::B()}});
  return s;
}

void for_rows(int64_t rows, int64_t V, const std::function<void(int64_t)>& body) {
  px::parallel_for(0, rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(V, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) body(r);
  });
}

OpDef make_max() {
  OpDef d;
  d.name = "logits_max";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 1, 1);
    require(in[0].shape.rank() >= 1, "logits must have a class dim, got {}", in[0].shape);
    std::vector<int64_t> dims = in[0].shape.dims();
    dims.pop_back();
    return std::vector<TensorSpec>{f32(Shape(dims))};
  };
  d.forward = [](const OpContext&, const Attrs&, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const int64_t V = in[0]->shape()[-1];
    const float* l = in[0]->f32();
    float* m = out[0]->f32();
    for_rows(out[0]->numel(), V, [&](int64_t r) {
      float best = -std::numeric_limits<float>::infinity();
      for (int64_t v = 0; v < V; ++v) best = std::max(best, l[r * V + v]);
      m[r] = best;
    });
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    return class_signatures(in[0].shape.rank(), {true}, false, Placement::P(Placement::Reduce::max));
  };
  d.examples = [] { return std::vector<OpExample>{{{f32({3, 4, 7})}, {}, {}}, {{f32({5, 6})}, {}, {}}}; };
  return d;
}

OpDef make_sum_exp() {
  OpDef d;
  d.name = "logits_sum_exp";
  d.constant_inputs = {1};  // m
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 2, 2);
    require_rows(in[1], in[0].shape, "the shift m");
    return std::vector<TensorSpec>{in[1]};
  };
  d.forward = [](const OpContext&, const Attrs&, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const int64_t V = in[0]->shape()[-1];
    const float *l = in[0]->f32(), *m = in[1]->f32();
    float* s = out[0]->f32();
    for_rows(out[0]->numel(), V, [&](int64_t r) {
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(l[r * V + v] - m[r]));
      s[r] = static_cast<float>(sum);
    });
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    return std::vector<ValueId>{
        g.add1("logits_sum_exp_grad", {n.inputs[0], n.inputs[1], dout[0]}, {}, n.name + ".grad"), kNoValue};
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out, 0); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    return class_signatures(in[0].shape.rank(), {true, false}, false, Placement::P());
  };
  d.examples = [] { return std::vector<OpExample>{{{f32({3, 4, 7}), f32({3, 4})}, {}, {}}}; };
  return d;
}

OpDef make_sum_exp_grad() {
  OpDef d;
  d.name = "logits_sum_exp_grad";  // dl = ds · exp(l − m)
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 3, 3);
    require_rows(in[1], in[0].shape, "the shift m");
    require_rows(in[2], in[0].shape, "ds");
    return std::vector<TensorSpec>{in[0]};
  };
  d.forward = [](const OpContext&, const Attrs&, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const int64_t V = in[0]->shape()[-1];
    const float *l = in[0]->f32(), *m = in[1]->f32(), *ds = in[2]->f32();
    float* dl = out[0]->f32();
    for_rows(in[1]->numel(), V, [&](int64_t r) {
      for (int64_t v = 0; v < V; ++v) dl[r * V + v] = ds[r] * std::exp(l[r * V + v] - m[r]);
    });
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out, 0); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    return class_signatures(in[0].shape.rank(), {true, false, false}, true, {});
  };
  d.examples = [] { return std::vector<OpExample>{{{f32({3, 4, 7}), f32({3, 4}), f32({3, 4})}, {}, {}}}; };
  return d;
}

// The class index `target` within a shard holding classes [first, first + V).
OpDef make_target_logit() {
  OpDef d;
  d.name = "target_logit";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 2, 2);
    require_dtype(in[1], DType::i32, "targets");
    require_rows(in[1], in[0].shape, "targets");
    return std::vector<TensorSpec>{f32(in[1].shape)};
  };
  d.forward = [](const OpContext& ctx, const Attrs&, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const int64_t V = in[0]->shape()[-1];
    const int last = in[0]->rank() - 1;
    const int64_t first = ctx.input_box(0).offset_of(last), classes = ctx.input_box(0).extent_of(last, V);
    const float* l = in[0]->f32();
    const int32_t* target = in[1]->data<int32_t>();
    float* t = out[0]->f32();
    for (int64_t r = 0, rows = out[0]->numel(); r < rows; ++r) {
      if (target[r] < 0 || target[r] >= classes)
        fail("cross-entropy: target {} at position {} is outside the {} classes [0, {})", target[r], r, classes,
             classes);
      const int64_t v = target[r] - first;
      t[r] = v >= 0 && v < V ? l[r * V + v] : 0.0f;
    }
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    const int64_t V = g.spec(n.inputs[0]).shape[-1];
    return std::vector<ValueId>{
        g.add1("target_logit_grad", {n.inputs[1], dout[0]}, {{"classes", V}}, n.name + ".grad"), kNoValue};
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost({in[1]}, out, 0); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    return class_signatures(in[0].shape.rank(), {true, false}, false, Placement::P());
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({3, 4, 7}), {Shape{3, 4}, DType::i32}}, {}, {0, 7}}};
  };
  return d;
}

// dl = dt at each row's target class (when this shard holds it), else 0.
OpDef make_target_logit_grad() {
  OpDef d;
  d.name = "target_logit_grad";  // attrs: classes (this shard's)
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 2, 2);
    require_dtype(in[0], DType::i32, "targets");
    require(in[0].shape == in[1].shape, "targets {} and dt {} must match", in[0].shape, in[1].shape);
    std::vector<int64_t> dims = in[0].shape.dims();
    dims.push_back(a.get_int("classes"));
    return std::vector<TensorSpec>{f32(Shape(dims))};
  };
  d.forward = [](const OpContext& ctx, const Attrs&, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const int64_t V = out[0]->shape()[-1];
    const int64_t first = ctx.output_box(0).offset_of(out[0]->rank() - 1);
    const int32_t* target = in[0]->data<int32_t>();
    const float* dt = in[1]->f32();
    out[0]->zero();
    float* dl = out[0]->f32();
    for (int64_t r = 0, rows = in[0]->numel(); r < rows; ++r) {
      const int64_t v = target[r] - first;
      if (v >= 0 && v < V) dl[r * V + v] = dt[r];
    }
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out, 0); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    return class_signatures(in[0].shape.rank() + 1, {false, false}, true, {});
  };
  d.localize = [](const Attrs& a, const std::vector<TensorSpec>&, const std::vector<TensorSpec>& out) {
    Attrs local = a;
    local.set("classes", out[0].shape[-1]);
    return local;
  };
  d.examples = [] {
    return std::vector<OpExample>{{{{Shape{3, 4}, DType::i32}, f32({3, 4})}, {{"classes", int64_t{7}}}, {7, 0}}};
  };
  return d;
}

OpDef make_loss() {
  OpDef d;
  d.name = "cross_entropy_loss";  // attrs: scale (1 / global rows for a mean)
  d.constant_inputs = {0};          // m
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 3, 3);
    for (const TensorSpec& s : in) require(s.shape == in[0].shape, "m, s and t must match, got {}", s.shape);
    return std::vector<TensorSpec>{f32({})};
  };
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const float *m = in[0]->f32(), *s = in[1]->f32(), *t = in[2]->f32();
    double total = 0;
    for (int64_t r = 0, rows = in[0]->numel(); r < rows; ++r)
      total += static_cast<double>(m[r]) + std::log(static_cast<double>(s[r])) - t[r];
    out[0]->f32()[0] = static_cast<float>(a.get_float("scale") * total);
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    std::vector<ValueId> grads = g.add("cross_entropy_loss_grad", {n.inputs[1], dout[0]}, n.attrs, n.name + ".grad");
    return std::vector<ValueId>{kNoValue, grads[0], grads[1]};
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    std::vector<PlacementSignature> s;
    for (int d = 0; d < in[0].shape.rank(); ++d)
      s.push_back({fmt::format("data_parallel_{}", d), std::vector<Placement>(3, Placement::S(d)), {Placement::P()}});
    s.push_back({"replicated", std::vector<Placement>(3, Placement::B()), {Placement::B()}});
    return s;
  };
  d.examples = [] {
    return std::vector<OpExample>{
        {{f32({3, 4}), f32({3, 4}), f32({3, 4})}, {{"scale", 1.0 / 12}}, {}, {false, true, false}}};
  };
  return d;
}

// (s, dloss) -> ds = scale·dloss / s, dt = −scale·dloss.
OpDef make_loss_grad() {
  OpDef d;
  d.name = "cross_entropy_loss_grad";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 2, 2);
    require(in[1].shape.rank() == 0, "dloss must be a scalar, got {}", in[1].shape);
    return std::vector<TensorSpec>{in[0], in[0]};
  };
  d.differentiable_outputs = 2;
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const float g = static_cast<float>(a.get_float("scale")) * in[1]->f32()[0];
    const float* s = in[0]->f32();
    for (int64_t r = 0, rows = in[0]->numel(); r < rows; ++r) {
      out[0]->f32()[r] = g / s[r];
      out[1]->f32()[r] = -g;
    }
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    std::vector<PlacementSignature> s;
    for (int d = 0; d < in[0].shape.rank(); ++d)
      s.push_back({fmt::format("data_parallel_{}", d), {Placement::S(d), Placement::B()},
                   {Placement::S(d), Placement::S(d)}});
    s.push_back({"replicated", {Placement::B(), Placement::B()}, {Placement::B(), Placement::B()}});
    return s;
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({3, 4}), f32({})}, {{"scale", 0.5}}, {}, {true, false}}};
  };
  return d;
}

PX_REGISTER_OP(logits_max, make_max());
PX_REGISTER_OP(logits_sum_exp, make_sum_exp());
PX_REGISTER_OP(logits_sum_exp_grad, make_sum_exp_grad());
PX_REGISTER_OP(target_logit, make_target_logit());
PX_REGISTER_OP(target_logit_grad, make_target_logit_grad());
PX_REGISTER_OP(cross_entropy_loss, make_loss());
PX_REGISTER_OP(cross_entropy_loss_grad, make_loss_grad());

}  // namespace
}  // namespace px::ops
