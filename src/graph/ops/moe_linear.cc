// The experts' layers of a mixture of experts: every row through its own
// expert's weight. Legend: R rows (a token's k copies), E experts.
//   moe_linear:        x (R..., P), w (E, P, Q), choice (R...) i32 -> y (R..., Q) = x · w[e]
//                      attrs: trans_w=1: x (R..., Q) -> y (R..., P) = x · w[e]ᵀ
//   moe_linear_grad_w: a (R..., P), c (R..., Q), choice -> (E, P, Q): aᵀ·c per expert
//   moe_bias_add:      y (R..., Q), b (E, Q), choice -> y + b[e]
//   moe_bias_grad:     dy (R..., Q), choice -> (E, Q): dy summed per expert
// A row whose choice is negative (dropped by capacity) has no expert: its
// output is zero, the bias skips it, and it adds to no weight gradient.
//
// Dropless by grouped GEMMs: the rows are grouped by expert (a counting
// sort), each group gathered, multiplied by its expert's weight in one
// GEMM (bf16 where the node is stamped so) and scattered back, so an
// expert's cost follows the tokens it got, and no row is padded.
//
// Placement: rows split any way (data, sequence); the weights' features
// split Megatron-style (column: the first layer's output features, row: the
// second's input features, the output then partial). The expert dim only
// on the expert axis (routed signatures, graph/placement.h): there a
// routed exchange (graph/ops/moe_dispatch.cc) has brought each rank the
// rows of its experts, their choices as indices among its experts, so the
// weights are this rank's block of experts and the weight gradients come
// out split alike.
#include "graph/ops/op_util.h"
#include "kernels/moe.h"

namespace px::ops {
namespace {

// (rows, in, out) of x and w under `trans`.
struct ExpertGemm {
  int64_t rows, experts, P, Q;
  bool trans;
  int64_t in() const { return trans ? Q : P; }
  int64_t out() const { return trans ? P : Q; }
};

ExpertGemm expert_gemm_of(const Shape& x, const Shape& w, bool trans) {
  return {rows_of(x), w[0], w[1], w[2], trans};
}

void require_choice(const TensorSpec& choice, const Shape& x) {
  require_dtype(choice, DType::i32, "choice");
  require(choice.shape.rank() + 1 == x.rank(), "choice {} must be x {} without its feature dim", choice.shape, x);
  for (int d = 0; d < choice.shape.rank(); ++d)
    require(choice.shape[d] == x[d], "choice {} and x {} disagree", choice.shape, x);
}

// The leading dims of x's rows split alike, for ops over (x-like..., choice).
void add_row_splits(std::vector<PlacementSignature>& s, int rank, std::vector<Placement> whole_middle,
                    std::vector<Placement> outputs_when_split) {
  for (int dim = 0; dim + 1 < rank; ++dim) {
    std::vector<Placement> ins{Placement::S(dim)};
    for (const Placement& p : whole_middle) ins.push_back(p.is_split() ? Placement::S(dim) : p);
    ins.push_back(Placement::S(dim));
    std::vector<Placement> outs = outputs_when_split;
    for (Placement& p : outs)
      if (p.is_split()) p = Placement::S(dim);
    s.push_back({fmt::format("split_rows_{}", dim), ins, outs});
  }
}

// On the expert axis: this rank's experts (the weight, or the weight
// gradient, S(0)), its rows whole.
PlacementSignature routed(std::vector<Placement> inputs, std::vector<Placement> outputs) {
  PlacementSignature s{"local_experts", std::move(inputs), std::move(outputs)};
  s.routed = true;
  return s;
}

// A weight gradient split by experts (the routed signature): its experts
// attribute is this rank's count.
Attrs experts_of_output(const Attrs& attrs, const std::vector<TensorSpec>&, const std::vector<TensorSpec>& out) {
  Attrs local = attrs;
  local.set("experts", out[0].shape[0]);
  return local;
}

OpDef make_moe_linear() {
  OpDef d;
  d.name = "moe_linear";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 3, 3);
    const Shape &x = in[0].shape, &w = in[1].shape;
    require(x.rank() >= 2 && w.rank() == 3, "x {} must be (rows..., features) and w {} (experts, in, out)", x, w);
    const ExpertGemm m = expert_gemm_of(x, w, a.get_int("trans_w", 0) != 0);
    require(x[-1] == m.in(), "x {} has {} features but the experts' weight {} takes {}", x, x[-1], w, m.in());
    require_choice(in[2], x);
    return std::vector<TensorSpec>{f32(with_last(x, m.out()))};
  };
  d.mixed_precision = true;
  d.bf16_gemm = true;
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const Tensor &x = *in[0], &w = *in[1];
    const ExpertGemm m = expert_gemm_of(x.shape(), w.shape(), a.get_int("trans_w", 0) != 0);
    const kernels::ExpertRows groups = kernels::group_rows_by_expert(m.rows, m.experts, in[2]->data<int32_t>());
    if (groups.in_place) {  // each expert's rows a block already: no copies
      const Tensor rows = x.reshape({m.rows, m.in()});
      for (int64_t e = 0; e < m.experts; ++e) {
        const int64_t begin = groups.offset[static_cast<size_t>(e)], end = groups.offset[static_cast<size_t>(e + 1)];
        if (begin < end)
          gemm(a, false, m.trans, end - begin, m.out(), m.in(), rows.slice_rows(begin, end), m.in(),
               w.slice_rows(e, e + 1), m.Q, out[0]->f32() + begin * m.out(), m.out());
      }
      return;
    }
    out[0]->zero();
    Tensor xs = Tensor::empty({groups.largest(), m.in()}), ys = Tensor::empty({groups.largest(), m.out()});
    for (int64_t e = 0; e < m.experts; ++e) {
      const int64_t begin = groups.offset[static_cast<size_t>(e)], end = groups.offset[static_cast<size_t>(e + 1)];
      if (begin == end) continue;
      kernels::gather_rows(groups.rows, begin, end, m.in(), x.f32(), xs.f32());
      gemm(a, false, m.trans, end - begin, m.out(), m.in(), xs, m.in(), w.slice_rows(e, e + 1), m.Q, ys.f32(),
           m.out());
      kernels::scatter_rows(groups.rows, begin, end, m.out(), ys.f32(), out[0]->f32());
    }
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    const ValueId x = n.inputs[0], w = n.inputs[1], choice = n.inputs[2], dy = dout[0];
    const bool trans = n.attrs.get_int("trans_w", 0) != 0;
    const ValueId dx =
        g.add1("moe_linear", {dy, w, choice}, {{"trans_w", int64_t{trans ? 0 : 1}}}, n.name + ".grad_x");
    const Attrs experts{{"experts", g.spec(w).shape[0]}};
    const ValueId dw = trans ? g.add1("moe_linear_grad_w", {dy, x, choice}, experts, n.name + ".grad_w")
                             : g.add1("moe_linear_grad_w", {x, dy, choice}, experts, n.name + ".grad_w");
    return std::vector<ValueId>{dx, dw, kNoValue};
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) {
    OpCost c = streaming_cost(in, out);
    c.flops = 2.0 * double(out[0].shape.numel()) * double(in[0].shape[-1]);  // every row computed once
    return c;
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    const int r = in[0].shape.rank();
    const bool trans = a.get_int("trans_w", 0) != 0;
    std::vector<PlacementSignature> s;
    add_row_splits(s, r, {Placement::B()}, {Placement::S(0)});
    // Column: the output features split; row: the input features, output partial.
    s.push_back({"column_parallel", {Placement::B(), Placement::S(trans ? 1 : 2), Placement::B()},
                 {Placement::S(r - 1)}});
    s.push_back({"row_parallel", {Placement::S(r - 1), Placement::S(trans ? 2 : 1), Placement::B()},
                 {Placement::P()}});
    s.push_back({"replicated", std::vector<Placement>(3, Placement::B()), {Placement::B()}});
    s.push_back(routed({Placement::B(), Placement::S(0), Placement::B()}, {Placement::B()}));
    return s;
  };
  d.examples = [] {
    auto some_dropped = [](std::vector<Tensor>& in, uint64_t) {
      int32_t* c = in[2].data<int32_t>();
      for (int64_t r = 0; r < in[2].numel(); r += 3) c[r] = -1 - c[r];
    };
    return std::vector<OpExample>{
        {{f32({4, 2, 5}), f32({3, 5, 6}), {Shape{4, 2}, DType::i32}}, {}, {0, 0, 3}, {}, some_dropped},
        {{f32({7, 6}), f32({4, 5, 6}), {Shape{7}, DType::i32}}, {{"trans_w", int64_t{1}}}, {0, 0, 4}}};
  };
  return d;
}

OpDef make_moe_linear_grad_w() {
  OpDef d;
  d.name = "moe_linear_grad_w";  // attrs: experts
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 3, 3);
    const Shape &x = in[0].shape, &c = in[1].shape;
    require(x.rank() == c.rank() && x.rank() >= 2, "a {} and c {} must have equal rank >= 2", x, c);
    for (int i = 0; i + 1 < x.rank(); ++i) require(x[i] == c[i], "leading dims differ: a {} vs c {}", x, c);
    require_choice(in[2], x);
    const int64_t E = a.get_int("experts");
    require(E >= 1, "experts={} must be positive", E);
    return std::vector<TensorSpec>{f32({E, x[-1], c[-1]})};
  };
  d.mixed_precision = true;
  d.bf16_gemm = true;
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const int64_t rows = rows_of(in[0]->shape()), P = in[0]->shape()[-1], Q = in[1]->shape()[-1];
    const int64_t E = out[0]->dim(0);
    const kernels::ExpertRows groups = kernels::group_rows_by_expert(rows, E, in[2]->data<int32_t>());
    out[0]->zero();
    if (groups.in_place) {  // each expert's rows a block already: no copies
      const Tensor a_rows = in[0]->reshape({rows, P}), c_rows = in[1]->reshape({rows, Q});
      for (int64_t e = 0; e < E; ++e) {
        const int64_t begin = groups.offset[static_cast<size_t>(e)], end = groups.offset[static_cast<size_t>(e + 1)];
        if (begin < end)
          gemm(a, true, false, P, Q, end - begin, a_rows.slice_rows(begin, end), P, c_rows.slice_rows(begin, end), Q,
               out[0]->f32() + e * P * Q, Q);
      }
      return;
    }
    Tensor as = Tensor::empty({groups.largest(), P}), cs = Tensor::empty({groups.largest(), Q});
    for (int64_t e = 0; e < E; ++e) {
      const int64_t begin = groups.offset[static_cast<size_t>(e)], end = groups.offset[static_cast<size_t>(e + 1)];
      if (begin == end) continue;
      kernels::gather_rows(groups.rows, begin, end, P, in[0]->f32(), as.f32());
      kernels::gather_rows(groups.rows, begin, end, Q, in[1]->f32(), cs.f32());
      gemm(a, true, false, P, Q, end - begin, as, P, cs, Q, out[0]->f32() + e * P * Q, Q);
    }
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) {
    OpCost c = streaming_cost(in, out);
    c.flops = 2.0 * double(rows_of(in[0].shape)) * double(in[0].shape[-1]) * double(in[1].shape[-1]);
    return c;
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    const int r = in[0].shape.rank();
    std::vector<PlacementSignature> s;
    add_row_splits(s, r, {Placement::S(0)}, {Placement::P()});
    s.push_back({"column_parallel", {Placement::B(), Placement::S(r - 1), Placement::B()}, {Placement::S(2)}});
    s.push_back({"row_parallel", {Placement::S(r - 1), Placement::B(), Placement::B()}, {Placement::S(1)}});
    s.push_back({"replicated", std::vector<Placement>(3, Placement::B()), {Placement::B()}});
    s.push_back(routed(std::vector<Placement>(3, Placement::B()), {Placement::S(0)}));
    return s;
  };
  d.localize = experts_of_output;
  d.examples = [] {
    return std::vector<OpExample>{
        {{f32({5, 2, 4}), f32({5, 2, 3}), {Shape{5, 2}, DType::i32}}, {{"experts", int64_t{3}}}, {0, 0, 3}}};
  };
  return d;
}

OpDef make_moe_bias_add() {
  OpDef d;
  d.name = "moe_bias_add";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 3, 3);
    const Shape &y = in[0].shape, &b = in[1].shape;
    require(b.rank() == 2 && y.rank() >= 2 && b[1] == y[-1], "bias {} must be (experts, {})", b, y[-1]);
    require_choice(in[2], y);
    return std::vector<TensorSpec>{f32(y)};
  };
  d.forward = [](const OpContext&, const Attrs&, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const int64_t rows = rows_of(in[0]->shape()), Q = in[0]->shape()[-1], E = in[1]->dim(0);
    const float *y = in[0]->f32(), *b = in[1]->f32();
    const int32_t* choice = in[2]->data<int32_t>();
    float* o = out[0]->f32();
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t e = choice[r];
      if (e >= E) fail("moe_bias_add: row {} is routed to expert {}, but there are {} experts", r, e, E);
      for (int64_t q = 0; q < Q; ++q) o[r * Q + q] = y[r * Q + q] + (e >= 0 ? b[e * Q + q] : 0.0f);
    }
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    const ValueId db = g.add1("moe_bias_grad", {dout[0], n.inputs[2]}, {{"experts", g.spec(n.inputs[1]).shape[0]}},
                              n.name + ".grad_bias");
    return std::vector<ValueId>{dout[0], db, kNoValue};
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    const int r = in[0].shape.rank();
    std::vector<PlacementSignature> s;
    add_row_splits(s, r, {Placement::B()}, {Placement::S(0)});
    s.push_back({"split_features", {Placement::S(r - 1), Placement::S(1), Placement::B()}, {Placement::S(r - 1)}});
    s.push_back({"replicated", std::vector<Placement>(3, Placement::B()), {Placement::B()}});
    s.push_back(routed({Placement::B(), Placement::S(0), Placement::B()}, {Placement::B()}));
    return s;
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({4, 2, 5}), f32({3, 5}), {Shape{4, 2}, DType::i32}}, {}, {0, 0, 3}}};
  };
  return d;
}

OpDef make_moe_bias_grad() {
  OpDef d;
  d.name = "moe_bias_grad";  // attrs: experts
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 2, 2);
    require_choice(in[1], in[0].shape);
    return std::vector<TensorSpec>{f32({a.get_int("experts"), in[0].shape[-1]})};
  };
  d.forward = [](const OpContext&, const Attrs&, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const int64_t rows = rows_of(in[0]->shape()), Q = in[0]->shape()[-1], E = out[0]->dim(0);
    const float* dy = in[0]->f32();
    const int32_t* choice = in[1]->data<int32_t>();
    float* db = out[0]->f32();
    out[0]->zero();
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t e = choice[r];
      if (e < 0 || e >= E) continue;
      for (int64_t q = 0; q < Q; ++q) db[e * Q + q] += dy[r * Q + q];
    }
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    const int r = in[0].shape.rank();
    std::vector<PlacementSignature> s;
    for (int dim = 0; dim + 1 < r; ++dim)
      s.push_back({fmt::format("split_rows_{}", dim), {Placement::S(dim), Placement::S(dim)}, {Placement::P()}});
    s.push_back({"split_features", {Placement::S(r - 1), Placement::B()}, {Placement::S(1)}});
    s.push_back({"replicated", {Placement::B(), Placement::B()}, {Placement::B()}});
    s.push_back(routed({Placement::B(), Placement::B()}, {Placement::S(0)}));
    return s;
  };
  d.localize = experts_of_output;
  d.examples = [] {
    return std::vector<OpExample>{{{f32({4, 2, 5}), {Shape{4, 2}, DType::i32}}, {{"experts", int64_t{3}}}, {0, 3}}};
  };
  return d;
}

PX_REGISTER_OP(moe_linear, make_moe_linear());
PX_REGISTER_OP(moe_linear_grad_w, make_moe_linear_grad_w());
PX_REGISTER_OP(moe_bias_add, make_moe_bias_add());
PX_REGISTER_OP(moe_bias_grad, make_moe_bias_grad());

}  // namespace
}  // namespace px::ops
