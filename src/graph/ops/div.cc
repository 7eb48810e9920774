// div: y = a / b of two computed values — an imported Div, e.g. a norm
// written out, (x - mean) / sqrt(var + eps), which the fusion pass did not
// match. b is a's shape, or a's with its last dim 1 (one divisor per row,
// broadcast along the row).
//   div:      a (R..., C), b (R..., C) or (R..., 1) -> y (R..., C)
//   div_grad: dy (R..., C), a, b                     -> db, b's shape:
//             -dy·a/b², summed along the row when b is broadcast
// Backward: da = div(dy, b), db = div_grad(dy, a, b). Linear in a (and dy),
// so a partial a over a whole b gives a partial y. A broadcast b's row dim
// is whole: a split row takes b whole, and div_grad's row sum is partial.
#include "graph/ops/op_util.h"

namespace px::ops {
namespace {

void require_divisor(const TensorSpec& a, const TensorSpec& b) {
  require_dtype(a, DType::f32, "a");
  require_dtype(b, DType::f32, "b");
  require(a.shape.rank() >= 1 && (b.shape == a.shape || b.shape == with_last(a.shape, 1)),
          "b {} must be a's shape {} or it with a last dim of 1", b.shape, a.shape);
}

// The signatures of div (a, b) and div_grad (dy, a, b): `leading` inputs
// shaped like a, then b; `linear` in the first (partial in, partial out).
std::vector<PlacementSignature> divide_signatures(const std::vector<TensorSpec>& in, size_t leading,
                                                  bool row_sum_partial) {
  const int rank = in[0].shape.rank();
  const bool rows = in.back().shape != in[0].shape;
  auto with_b = [&](Placement a, Placement b) {
    std::vector<Placement> p(leading, a);
    p.push_back(b);
    return p;
  };
  std::vector<PlacementSignature> s{{"replicated", with_b(Placement::B(), Placement::B()), {Placement::B()}}};
  for (int d = 0; d < rank; ++d) {
    if (!rows || d + 1 < rank) {
      s.push_back({fmt::format("split_{}", d), with_b(Placement::S(d), Placement::S(d)), {Placement::S(d)}});
    } else {
      // A split row over a whole divisor: div stays split, div_grad's row sum is partial.
      s.push_back({fmt::format("split_row_{}", d), with_b(Placement::S(d), Placement::B()),
                   {row_sum_partial ? Placement::P() : Placement::S(d)}});
    }
  }
  std::vector<Placement> partial(leading + 1, Placement::B());
  partial.front() = Placement::P();
  s.push_back({"partial", partial, {Placement::P()}});
  return s;
}

OpDef make_div() {
  OpDef d;
  d.name = "div";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 2, 2);
    require_divisor(in[0], in[1]);
    return std::vector<TensorSpec>{in[0]};
  };
  d.forward = [](const OpContext&, const Attrs&, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const int64_t n = in[0]->numel(), C = in[0]->shape().dims().back();
    const bool rows = in[1]->shape() != in[0]->shape();
    const float *a = in[0]->f32(), *b = in[1]->f32();
    float* y = out[0]->f32();
    for (int64_t i = 0; i < n; ++i) y[i] = a[i] / b[rows ? i / C : i];
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    return std::vector<ValueId>{
        g.add1("div", {dout[0], n.inputs[1]}, {}, n.name + ".grad_a"),
        g.add1("div_grad", {dout[0], n.inputs[0], n.inputs[1]}, {}, n.name + ".grad_b")};
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out, 1); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) { return divide_signatures(in, 1, false); };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({5, 7}), f32({5, 7})}, {}, {}, {false, true}},
                                  {{f32({2, 3, 6}), f32({2, 3, 1})}, {}, {}, {false, true}},
                                  {{f32({4, 8}), f32({4, 1})}, {}, {}, {false, true}}};
  };
  return d;
}

OpDef make_div_grad() {
  OpDef d;
  d.name = "div_grad";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 3, 3);
    require(in[0].shape == in[1].shape, "dy {} and a {} must match", in[0].shape, in[1].shape);
    require_dtype(in[0], DType::f32, "dy");
    require_divisor(in[1], in[2]);
    return std::vector<TensorSpec>{in[2]};
  };
  d.forward = [](const OpContext&, const Attrs&, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const int64_t n = in[0]->numel(), C = in[0]->shape().dims().back();
    const bool rows = in[2]->shape() != in[1]->shape();
    const float *dy = in[0]->f32(), *a = in[1]->f32(), *b = in[2]->f32();
    float* db = out[0]->f32();
    if (!rows) {
      for (int64_t i = 0; i < n; ++i) db[i] = -dy[i] * a[i] / (b[i] * b[i]);
      return;
    }
    for (int64_t r = 0; r < n / C; ++r) {
      double sum = 0;
      for (int64_t c = 0; c < C; ++c) sum += double(dy[r * C + c]) * double(a[r * C + c]);
      db[r] = static_cast<float>(-sum / (double(b[r]) * double(b[r])));
    }
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out, 3); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) { return divide_signatures(in, 2, true); };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({5, 7}), f32({5, 7}), f32({5, 7})}, {}, {}, {false, false, true}},
                                  {{f32({2, 3, 6}), f32({2, 3, 6}), f32({2, 3, 1})}, {}, {}, {false, false, true}}};
  };
  return d;
}

PX_REGISTER_OP(div, make_div());
PX_REGISTER_OP(div_grad, make_div_grad());

}  // namespace
}  // namespace px::ops
