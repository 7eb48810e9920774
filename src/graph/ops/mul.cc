// mul: y = a ⊙ b of two computed values, b broadcast in one of three forms:
//   same      a (R..., C), b (R..., C)   GELU's x · Φ(x) in imported graphs
//   row       a (R..., C), b (R..., 1)   a factor per row: an RMS norm's
//                                        x · rsqrt(mean(x²) + eps)
//   trailing  a (L..., S...), b (S...)   a factor per position of a's trailing
//                                        dims: the norm's weight (C)
// mul_grad: db of the row form, Σ_c dy·a along each row:
//   mul_grad: dy (R..., C), a (R..., C), b (R..., 1) -> db (R..., 1)
// Backward: da = mul(dy, b) in b's form; db = mul(dy, a) (same),
// mul_grad (row), sum_leading(mul(dy, a)) (trailing: partial under a
// batch split, like a bias's gradient).
// Linear in a, so a partial a by a whole b gives a partial y for the
// broadcast forms. (The same form keeps its split and replicated
// signatures only: its two operands come from one producer in GELU, and
// a partial a with a whole b never arises there.)
#include <algorithm>

#include "graph/ops/op_util.h"

namespace px::ops {
namespace {

enum class Form { same, row, trailing };

Form form_of(const Shape& a, const Shape& b) {
  if (a == b) return Form::same;
  if (a.rank() >= 1 && b == with_last(a, 1)) return Form::row;
  require(b.rank() >= 1 && b.rank() < a.rank() && std::equal(b.dims().begin(), b.dims().end(), a.dims().end() - b.rank()),
          "b {} must be a's shape {}, it with a last dim of 1, or a's trailing dims", b, a);
  return Form::trailing;
}

std::vector<PlacementSignature> mul_signatures(const std::vector<TensorSpec>& in) {
  const Shape &a = in[0].shape, &b = in[1].shape;
  const Form form = form_of(a, b);
  const int rank = a.rank();
  if (form == Form::same) return pointwise_signatures(rank, 2, 1, false);
  std::vector<PlacementSignature> s{{"replicated", {Placement::B(), Placement::B()}, {Placement::B()}},
                                    {"partial", {Placement::P(), Placement::B()}, {Placement::P()}}};
  const int lead = rank - b.rank();  // trailing: a's dims before b's
  for (int d = 0; d < rank; ++d) {
    Placement pb = Placement::B();  // a row's factor, or the trailing factor along a's leading dims
    if (form == Form::row && d + 1 < rank) pb = Placement::S(d);
    if (form == Form::trailing && d >= lead) pb = Placement::S(d - lead);
    s.push_back({fmt::format("split_{}", d), {Placement::S(d), pb}, {Placement::S(d)}});
  }
  return s;
}

OpDef make_mul() {
  OpDef d;
  d.name = "mul";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 2, 2);
    require_dtype(in[0], DType::f32, "a");
    require_dtype(in[1], DType::f32, "b");
    form_of(in[0].shape, in[1].shape);
    return std::vector<TensorSpec>{in[0]};
  };
  d.forward = [](const OpContext&, const Attrs&, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const Form form = form_of(in[0]->shape(), in[1]->shape());
    const int64_t n = in[0]->numel(), C = in[0]->shape().rank() ? in[0]->shape().dims().back() : 1,
                  inner = in[1]->numel();
    const float *a = in[0]->f32(), *b = in[1]->f32();
    float* y = out[0]->f32();
    switch (form) {
      case Form::same:
        for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
        break;
      case Form::row:
        for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i / C];
        break;
      case Form::trailing:
        for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i % inner];
        break;
    }
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    const ValueId a = n.inputs[0], b = n.inputs[1];
    const ValueId da = g.add1("mul", {dout[0], b}, {}, n.name + ".grad_a");
    const Form form = form_of(g.spec(a).shape, g.spec(b).shape);
    if (form == Form::same) return std::vector<ValueId>{da, g.add1("mul", {dout[0], a}, {}, n.name + ".grad_b")};
    if (form == Form::row)
      return std::vector<ValueId>{da, g.add1("mul_grad", {dout[0], a, b}, {}, n.name + ".grad_b")};
    const ValueId products = g.add1("mul", {dout[0], a}, {}, n.name + ".grad_b_terms");
    const int64_t keep = g.spec(b).shape.rank();
    return std::vector<ValueId>{da, g.add1("sum_leading", {products}, {{"keep", keep}}, n.name + ".grad_b")};
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out, 1); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) { return mul_signatures(in); };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({5, 7}), f32({5, 7})}, {}, {}},
                                  {{f32({2, 3, 13}), f32({2, 3, 13})}, {}, {}},
                                  {{f32({4, 8}), f32({4, 1})}, {}, {}},
                                  {{f32({2, 3, 6}), f32({2, 3, 1})}, {}, {}},
                                  {{f32({2, 3, 6}), f32({6})}, {}, {}},
                                  {{f32({2, 3, 6}), f32({3, 6})}, {}, {}}};
  };
  return d;
}

OpDef make_mul_grad() {
  OpDef d;
  d.name = "mul_grad";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 3, 3);
    for (const TensorSpec& s : in) require_dtype(s, DType::f32, "every input");
    require(in[0].shape == in[1].shape, "dy {} and a {} must match", in[0].shape, in[1].shape);
    require(in[1].shape.rank() >= 1 && in[2].shape == with_last(in[1].shape, 1),
            "b {} must be a's shape {} with a last dim of 1", in[2].shape, in[1].shape);
    return std::vector<TensorSpec>{in[2]};
  };
  d.forward = [](const OpContext&, const Attrs&, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const int64_t n = in[0]->numel(), C = in[0]->shape().dims().back();
    const float *dy = in[0]->f32(), *a = in[1]->f32();
    float* db = out[0]->f32();
    for (int64_t r = 0; r < n / C; ++r) {
      double sum = 0;
      for (int64_t c = 0; c < C; ++c) sum += double(dy[r * C + c]) * double(a[r * C + c]);
      db[r] = static_cast<float>(sum);
    }
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out, 2); };
  // A split row sums a part of it: partial. Linear in dy.
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    const int rank = in[0].shape.rank();
    std::vector<PlacementSignature> s{
        {"replicated", {Placement::B(), Placement::B(), Placement::B()}, {Placement::B()}},
        {"partial", {Placement::P(), Placement::B(), Placement::B()}, {Placement::P()}}};
    for (int d = 0; d + 1 < rank; ++d)
      s.push_back({fmt::format("split_{}", d), {Placement::S(d), Placement::S(d), Placement::S(d)}, {Placement::S(d)}});
    s.push_back({fmt::format("split_row_{}", rank - 1),
                 {Placement::S(rank - 1), Placement::S(rank - 1), Placement::B()},
                 {Placement::P()}});
    return s;
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({5, 7}), f32({5, 7}), f32({5, 1})}, {}, {}},
                                  {{f32({2, 3, 6}), f32({2, 3, 6}), f32({2, 3, 1})}, {}, {}}};
  };
  return d;
}

PX_REGISTER_OP(mul, make_mul());
PX_REGISTER_OP(mul_grad, make_mul_grad());

}  // namespace
}  // namespace px::ops
