// Embedding lookup of integer ids in a (V, C) table.
//   embedding:      ids (N...) i32, table (V, C) -> out (N..., C)
//   embedding_grad: ids (N...), dout (N..., C)   -> dtable (V, C)   attrs: vocab = V
// Ids outside [0, V) are a user error (bad data), checked in forward.
// Vocabulary parallelism (Megatron): a shard of the table's rows (its box
// says which) looks up the ids it holds and gives zeros for the rest, so
// the shards' outputs are summands (P); the gradient of the rows a shard
// holds needs only the ids and the whole output gradient (B -> S(0)).
#include "graph/ops/op_util.h"
#include "kernels/embedding.h"

namespace px::ops {
namespace {

void check_ids(const Tensor& ids, int64_t V) {
  const int32_t* p = ids.data<int32_t>();
  for (int64_t i = 0, n = ids.numel(); i < n; ++i)
    if (p[i] < 0 || p[i] >= V) fail("embedding: token id {} at position {} is outside the vocabulary [0, {})", p[i], i, V);
}

OpDef make_embedding() {
  OpDef d;
  d.name = "embedding";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs&) {
    require_count(in, 2, 2);
    require_dtype(in[0], DType::i32, "ids");
    require(in[1].shape.rank() == 2, "table must be (V, C), got {}", in[1].shape);
    std::vector<int64_t> dims = in[0].shape.dims();
    dims.push_back(in[1].shape[1]);
    return std::vector<TensorSpec>{f32(Shape(dims))};
  };
  d.forward = [](const OpContext& ctx, const Attrs&, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const int64_t rows = in[1]->dim(0);
    check_ids(*in[0], ctx.input_box(1).extent_of(0, rows));
    kernels::embedding(in[0]->numel(), in[1]->dim(1), in[0]->data<int32_t>(), in[1]->f32(),
                       ctx.input_box(1).offset_of(0), rows, out[0]->f32());
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    ValueId dt = g.add1("embedding_grad", {n.inputs[0], dout[0]},
                        {{"vocab", g.spec(n.inputs[1]).shape[0]}}, n.name + ".grad");
    return std::vector<ValueId>{kNoValue, dt};
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) {
    OpCost c = streaming_cost({in[0]}, out);
    c.bytes_read += c.bytes_written;  // rows gathered from the table
    return c;
  };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    int r = in[0].shape.rank();
    std::vector<PlacementSignature> s;
    for (int dim = 0; dim < r; ++dim)
      s.push_back({fmt::format("data_parallel_{}", dim), {Placement::S(dim), Placement::B()}, {Placement::S(dim)}});
    s.push_back({"embedding_dim_parallel", {Placement::B(), Placement::S(1)}, {Placement::S(r)}});
    s.push_back({"vocab_parallel", {Placement::B(), Placement::S(0)}, {Placement::P()}});
    s.push_back({"replicated", {Placement::B(), Placement::B()}, {Placement::B()}});
    return s;
  };
  d.examples = [] {
    return std::vector<OpExample>{{{{Shape{3, 5}, DType::i32}, f32({11, 4})}, {}, {11, 0}},
                                  {{{Shape{7}, DType::i32}, f32({5, 6})}, {}, {5, 0}}};
  };
  return d;
}

OpDef make_embedding_grad() {
  OpDef d;
  d.name = "embedding_grad";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 2, 2);
    require_dtype(in[0], DType::i32, "ids");
    require(in[1].shape.rank() == in[0].shape.rank() + 1, "dout {} must be ids {} plus a feature dim",
            in[1].shape, in[0].shape);
    return std::vector<TensorSpec>{f32({a.get_int("vocab"), in[1].shape[-1]})};
  };
  d.forward = [](const OpContext& ctx, const Attrs&, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    out[0]->zero();
    kernels::embedding_backward(in[0]->numel(), out[0]->dim(1), in[0]->data<int32_t>(), in[1]->f32(),
                                ctx.output_box(0).offset_of(0), out[0]->dim(0), out[0]->f32());
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out, 0); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    int r = in[0].shape.rank();
    std::vector<PlacementSignature> s;
    for (int dim = 0; dim < r; ++dim)
      s.push_back({fmt::format("reduce_split_{}", dim), {Placement::S(dim), Placement::S(dim)}, {Placement::P()}});
    s.push_back({"embedding_dim_parallel", {Placement::B(), Placement::S(r)}, {Placement::S(1)}});
    // Linear in dy: summands of dy give summands of the table gradient (the
    // position table's gradient under a batch split: ids B, dy P).
    s.push_back({"partial_grad", {Placement::B(), Placement::P()}, {Placement::P()}});
    s.push_back({"vocab_parallel", {Placement::B(), Placement::B()}, {Placement::S(0)}});
    s.push_back({"replicated", {Placement::B(), Placement::B()}, {Placement::B()}});
    return s;
  };
  d.localize = [](const Attrs& a, const std::vector<TensorSpec>&, const std::vector<TensorSpec>& out) {
    Attrs local = a;
    local.set("vocab", out[0].shape[0]);
    return local;
  };
  d.examples = [] {
    return std::vector<OpExample>{{{{Shape{3, 5}, DType::i32}, f32({3, 5, 4})}, {{"vocab", int64_t{7}}}, {7, 0}}};
  };
  return d;
}

PX_REGISTER_OP(embedding, make_embedding());
PX_REGISTER_OP(embedding_grad, make_embedding_grad());

}  // namespace
}  // namespace px::ops
