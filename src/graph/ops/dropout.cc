// Inverted dropout (see kernels/dropout.h).  attrs: p, salt (per-site stream).
//   dropout:      x -> y, mask (u8, same shape)
//   dropout_grad: mask, dy -> dx                  attrs: p
// The draw for an element depends on (step seed, salt, its index in the
// unsplit tensor), so a shard split along any dims (given its box) drops
// exactly what the single-device run drops.
#include "core/rng.h"
#include "graph/ops/op_util.h"
#include "kernels/dropout.h"

namespace px::ops {
namespace {

void require_p(const Attrs& a) {
  double p = a.get_float("p");
  require(p >= 0 && p < 1, "dropout probability p={} must be in [0, 1)", p);
}

OpDef make_dropout() {
  OpDef d;
  d.name = "dropout";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 1, 1);
    require_p(a);
    return std::vector<TensorSpec>{in[0], {in[0].shape, DType::u8}};
  };
  d.forward = [](const OpContext& ctx, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    const Tensor& x = *in[0];
    const uint64_t seed = splitmix64(ctx.seed ^ splitmix64(static_cast<uint64_t>(a.get_int("salt", 0))));
    const float p = static_cast<float>(a.get_float("p"));
    const ShardBox& box = ctx.input_box(0);
    const Shape& local = x.shape();
    // Runs of elements contiguous in both the shard and the unsplit tensor:
    // the dims after the last split one are whole, and so is the last split
    // one unless the shard holds it as two runs (a zigzag split's fold).
    int last_split = -1;
    for (int d = 0; d < local.rank(); ++d)
      if (box.offset_of(d) != 0 || box.extent_of(d, local[d]) != local[d]) last_split = d;
    const int64_t inner = local.numel(last_split + 1, local.rank());
    const bool whole_last = last_split >= 0 && box.fold_dim != last_split;
    const int64_t run = last_split < 0 ? local.numel() : whole_last ? local[last_split] * inner : inner;
    const int64_t runs = run == 0 ? 0 : local.numel() / run;
    for (int64_t r = 0; r < runs; ++r) {
      // Global index of the run's first element: its local multi-index over
      // dims [0, last_split] (the last one's 0 if the run spans it) placed
      // by the box, in the unsplit strides.
      int64_t rest = r, global = 0, stride = inner;
      for (int d = last_split; d >= 0; --d) {
        const bool spanned = d == last_split && whole_last;
        const int64_t i = spanned ? 0 : rest % local[d];
        if (!spanned) rest /= local[d];
        global += box.global_index(d, i) * stride;
        stride *= box.extent_of(d, local[d]);
      }
      kernels::dropout(run, p, seed, static_cast<uint64_t>(global), x.f32() + r * run, out[0]->f32() + r * run,
                       out[1]->data<uint8_t>() + r * run);
    }
  };
  d.backward = [](Graph& g, const Node& n, const std::vector<ValueId>& dout) {
    return std::vector<ValueId>{
        g.add1("dropout_grad", {n.outputs[1], dout[0]}, {{"p", n.attrs.get_float("p")}}, n.name + ".grad")};
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out, 2); };
  // Any split: a shard draws by its elements' global indices (its box).
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    return pointwise_signatures(in[0].shape.rank(), 1, 2, false);
  };
  d.examples = [] {
    return std::vector<OpExample>{{{f32({7, 5})}, {{"p", 0.3}, {"salt", int64_t{11}}}, {}},
                                  {{f32({3, 4, 5})}, {{"p", 0.5}}, {}}};
  };
  return d;
}

OpDef make_dropout_grad() {
  OpDef d;
  d.name = "dropout_grad";
  d.infer = [](const std::vector<TensorSpec>& in, const Attrs& a) {
    require_count(in, 2, 2);
    require_p(a);
    require_dtype(in[0], DType::u8, "mask");
    require(in[0].shape == in[1].shape, "mask {} and dy {} must match", in[0].shape, in[1].shape);
    return std::vector<TensorSpec>{in[1]};
  };
  d.forward = [](const OpContext&, const Attrs& a, const std::vector<const Tensor*>& in,
                 const std::vector<Tensor*>& out) {
    kernels::dropout_backward(in[1]->numel(), static_cast<float>(a.get_float("p")), in[0]->data<uint8_t>(),
                              in[1]->f32(), out[0]->f32());
  };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return streaming_cost(in, out, 1); };
  d.signatures = [](const std::vector<TensorSpec>& in, const Attrs&) {
    auto s = pointwise_signatures(in[1].shape.rank(), 2, 1, false);
    s.push_back({"partial_grad", {Placement::B(), Placement::P()}, {Placement::P()}});
    return s;
  };
  d.examples = [] {
    return std::vector<OpExample>{{{{Shape{7, 5}, DType::u8}, f32({7, 5})}, {{"p", 0.25}}, {2, 0}}};
  };
  return d;
}

PX_REGISTER_OP(dropout, make_dropout());
PX_REGISTER_OP(dropout_grad, make_dropout_grad());

}  // namespace
}  // namespace px::ops
