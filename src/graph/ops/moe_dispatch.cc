// Expert parallelism's routed exchange: a token's copies moved to the rank
// that holds their expert, and back. Legend: R rows (a token's k copies,
// token-major: (L..., k)), C features, E experts, M rows routed (R less
// the copies capacity dropped).
//   moe_dispatch:   x (L..., k, C), choice (L..., k) i32 -> xd (M, C), ed (M) i32
//                   attrs: experts (E)
//   moe_undispatch: yd (M, C'), choice (L..., k) i32 -> y (L..., k, C')
// Each is the other's adjoint. The rows go out grouped by expert, in row
// order within an expert (kernels::group_rows_by_expert); ed is each
// row's expert among the receiving rank's experts, which hold core/
// block.h's block of the E experts. undispatch puts every row back where
// dispatch took it from; a dropped copy comes back as zeros.
//
// Lowered under expert parallelism (parallel/expert_parallel.h) these run
// as Route instructions over the expert axis (parallel/program.h): the
// ranks agree on their per-expert counts, then exchange the rows by an
// all-to-all-v, so how many rows a rank receives is known only at run
// time. The shape rule gives the rows a balanced routing would bring, R
// (x's shape, and choice's for ed), which the memory ledger and the
// planner read; the executor sizes the received rows by the agreed counts
// and runs the experts' ops on them (their shape rules follow the rows).
// Run on one rank, as the kernels here do, every expert is local and no
// row needs to move: xd is x with the dropped copies zeroed, ed their
// experts (-1 where dropped), and undispatch the same masking back, so
// any split of the tokens gives the whole run's rows.
//
// Placement: any split of the tokens, each rank routing its own (along the
// expert axis its rows are its own too: B there, graph/placement.h's
// routed signatures).
#include "graph/ops/op_util.h"
#include "kernels/moe.h"

namespace px::ops {
namespace {

void require_routed_rows(const TensorSpec& choice, const Shape& x) {
  require_dtype(choice, DType::i32, "choice");
  require(x.rank() >= 2 && choice.shape.rank() + 1 == x.rank(), "choice {} must be x {} without its feature dim",
          choice.shape, x);
  for (int d = 0; d < choice.shape.rank(); ++d)
    require(choice.shape[d] == x[d], "choice {} and x {} disagree", choice.shape, x);
}

std::vector<PlacementSignature> token_splits(int choice_rank, int outputs) {
  std::vector<PlacementSignature> s;
  for (int dim = 0; dim < choice_rank; ++dim)
    s.push_back({fmt::format("split_tokens_{}", dim), {Placement::S(dim), Placement::S(dim)},
                 std::vector<Placement>(static_cast<size_t>(outputs), Placement::S(dim))});
  s.push_back({"replicated", {Placement::B(), Placement::B()},
               std::vector<Placement>(static_cast<size_t>(outputs), Placement::B())});
  return s;
}

// A row's expert, or -1 where capacity dropped it; px::Error for an expert
// that does not exist.
int32_t routed_row(int32_t choice, int64_t experts, int64_t row) {
  if (choice >= experts) fail("moe: row {} is routed to expert {}, but there are {} experts", row, choice, experts);
  return kernels::routed_expert(choice);
}

// Rows of x (R, C) copied to y, those whose copy was dropped zeroed.
void mask_dropped(int64_t R, int64_t C, const int32_t* choice, const float* x, float* y) {
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) y[r * C + c] = choice[r] >= 0 ? x[r * C + c] : 0.0f;
}

// Every third copy dropped (stored -1-e).
void drop_some(std::vector<Tensor>& in, uint64_t) {
  int32_t* c = in[1].data<int32_t>();
  for (int64_t r = 0; r < in[1].numel(); r += 3) c[r] = -1 - c[r];
}

OpDef make_moe_dispatch() {
  OpDef d;
  d.name = "moe_dispatch";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 2, 2);
    require_routed_rows(in[1], in[0].shape);
    require(a.get_int("experts") >= 1, "experts={} must be positive", a.get_int("experts"));
    return std::vector<TensorSpec>{f32(in[0].shape), {in[1].shape, DType::i32}};
  };
  d.differentiable_outputs = 1;  // ed: where the rows went
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const int64_t R = in[1]->numel(), C = in[0]->shape()[-1];
    const int32_t* choice = in[1]->data<int32_t>();
    int32_t* ed = out[1]->data<int32_t>();
    for (int64_t r = 0; r < R; ++r) ed[r] = routed_row(choice[r], a.get_int("experts"), r);
    mask_dropped(R, C, choice, in[0]->f32(), out[0]->f32());
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    const ValueId dx = g.add1("moe_undispatch", {dout[0], n.inputs[1]}, n.attrs, n.name + ".grad");
    return std::vector<ValueId>{dx, kNoValue};
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) { return token_splits(in[1].shape.rank(), 2); };
  d.examples = [] {
    return std::vector<OpExample>{
        {{f32({3, 2, 4}), {Shape{3, 2}, DType::i32}}, {{"experts", int64_t{3}}}, {0, 3}, {}, drop_some},
        {{f32({2, 3, 2, 5}), {Shape{2, 3, 2}, DType::i32}}, {{"experts", int64_t{4}}}, {0, 4}}};
  };
  return d;
}

OpDef make_moe_undispatch() {
  OpDef d;
  d.name = "moe_undispatch";  // attrs: experts
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 2, 2);
    require_dtype(in[1], DType::i32, "choice");
    require(in[0].shape.rank() >= 2, "yd {} must be (rows..., features)", in[0].shape);
    std::vector<int64_t> dims = in[1].shape.dims();
    dims.push_back(in[0].shape[-1]);
    return std::vector<TensorSpec>{f32(Shape(dims))};
  };
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const int64_t R = in[1]->numel(), C = in[0]->shape()[-1];
    const int32_t* choice = in[1]->data<int32_t>();
    for (int64_t r = 0; r < R; ++r) routed_row(choice[r], a.get_int("experts"), r);
    mask_dropped(R, C, choice, in[0]->f32(), out[0]->f32());
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    const ValueId dyd = g.add(std::string("moe_dispatch"), {dout[0], n.inputs[1]}, n.attrs, n.name + ".grad").front();
    return std::vector<ValueId>{dyd, kNoValue};
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) { return token_splits(in[1].shape.rank(), 1); };
  d.examples = [] {
    return std::vector<OpExample>{
        {{f32({3, 2, 4}), {Shape{3, 2}, DType::i32}}, {{"experts", int64_t{3}}}, {0, 3}, {}, drop_some}};
  };
  return d;
}

PX_REGISTER_OP(moe_dispatch, make_moe_dispatch());
PX_REGISTER_OP(moe_undispatch, make_moe_undispatch());

}  // namespace
}  // namespace px::ops
