// An op is one unit, registered once (see ops/*.cc): its shape rule, its
// forward kernel, its backward rule (which adds gradient nodes to the graph),
// its cost, its placement signatures, and examples the generic test harnesses
// (finite-difference gradients, placement check) run it on.
//
// Outputs: the first `differentiable_outputs` outputs are the op's results;
// any further outputs are values saved for backward (layernorm's mean/rstd,
// attention's probabilities, dropout's mask) and get no gradient.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "graph/attrs.h"
#include "graph/placement.h"
#include "graph/tensor_spec.h"

namespace px {

class Graph;
struct Node;
using ValueId = int;
constexpr ValueId kNoValue = -1;

struct OpCost {
  double flops = 0;
  double bytes_read = 0;
  double bytes_written = 0;
};

// Where a local tensor sits in the unsplit one: its first element's index
// along every dim and the unsplit shape. Empty (offset {}): the tensor is
// whole. Ops that need global positions read it: dropout draws by the
// element's global index, the vocab-parallel embedding and cross-entropy
// find which vocabulary rows or columns this shard holds.
struct ShardBox {
  std::vector<int64_t> offset;
  Shape global;
  // A dim the shard holds as two runs (a zigzag split, graph/placement.h):
  // from local index `fold_local` on it holds the run at `fold_global`.
  int fold_dim = -1;
  int64_t fold_local = 0, fold_global = 0;
  bool whole() const { return offset.empty(); }
  int64_t offset_of(int dim) const { return offset.empty() ? 0 : offset[static_cast<size_t>(dim)]; }
  // The global index of local index `i` along `dim`, and back (`global`
  // must be one the shard holds).
  int64_t global_index(int dim, int64_t i) const {
    return dim == fold_dim && i >= fold_local ? fold_global + (i - fold_local) : offset_of(dim) + i;
  }
  int64_t local_index(int dim, int64_t global) const {
    return dim == fold_dim && global >= fold_global ? fold_local + (global - fold_global) : global - offset_of(dim);
  }
  // The unsplit extent of `dim`, given the local one.
  int64_t extent_of(int dim, int64_t local) const { return offset.empty() ? local : global[dim]; }
  bool operator==(const ShardBox&) const = default;
};

// Per-call facts that are not attributes: the step's seed (dropout) and the
// boxes of the inputs and outputs (empty on one rank), so that a shard draws
// the same random numbers and addresses the same rows as the unsplit run.
struct OpContext {
  uint64_t seed = 0;
  std::vector<ShardBox> inputs, outputs;  // empty, or one per input / output
  const ShardBox& input_box(size_t i) const;
  const ShardBox& output_box(size_t i) const;
};

struct OpExample {
  std::vector<TensorSpec> inputs;
  Attrs attrs;
  // For integer inputs: values are drawn from [0, int_upper[i]). Empty or 0 for floats.
  std::vector<int64_t> int_upper;
  // Float inputs marked here are drawn from [0.5, 1.5) (a logarithm's argument).
  std::vector<bool> positive;
  // Inputs whose values must agree with each other (paged attention's
  // segment table): the harnesses draw these from this, given the inputs
  // drawn as above, instead. Empty: every input is drawn independently.
  std::function<void(std::vector<Tensor>& inputs, uint64_t seed)> draw;
};

using InferFn = std::function<std::vector<TensorSpec>(const std::vector<TensorSpec>&, const Attrs&)>;
using ForwardFn = std::function<void(const OpContext&, const Attrs&, const std::vector<const Tensor*>&,
                                     const std::vector<Tensor*>&)>;
// Given the node and the gradients of its outputs (kNoValue where none),
// adds nodes to `graph` and returns one gradient per input (kNoValue where
// the input is not differentiable).
using BackwardFn = std::function<std::vector<ValueId>(Graph& graph, const Node& node,
                                                      const std::vector<ValueId>& output_grads)>;
using CostFn = std::function<OpCost(const std::vector<TensorSpec>& inputs,
                                    const std::vector<TensorSpec>& outputs, const Attrs&)>;
using SignaturesFn = std::function<std::vector<PlacementSignature>(const std::vector<TensorSpec>&,
                                                                   const Attrs&)>;
// Attributes for a shard: given the local input and output specs, the
// attributes that make the shape rule produce those outputs (reshape's
// target shape, embedding_grad's vocabulary). Most ops need none: their
// attributes are shard-invariant.
using LocalizeFn = std::function<Attrs(const Attrs&, const std::vector<TensorSpec>& inputs,
                                       const std::vector<TensorSpec>& outputs)>;

struct OpDef {
  std::string name;
  InferFn infer;
  ForwardFn forward;
  BackwardFn backward;  // empty: not differentiable
  CostFn cost;          // empty: bytes of inputs/outputs, no flops
  SignaturesFn signatures;
  LocalizeFn localize;  // empty: attributes are the same on every shard
  // Signatures name grouped splits S(d,g) themselves (reshape); otherwise
  // propagation carries the inputs' groups to the outputs.
  bool signatures_see_groups = false;
  std::function<std::vector<OpExample>()> examples;
  int differentiable_outputs = 1;
  // Float inputs backward treats as constants: a shift the composite it is
  // part of does not depend on (cross-entropy's row maximum). The
  // finite-difference check skips them.
  std::vector<int> constant_inputs;
  // The first output is a view of the first input (reshape): the executor
  // does not allocate it; forward receives it already bound.
  bool output_is_view = false;
  // Forward has a bf16 path (GEMM inputs rounded to bf16, fp32 accumulation)
  // taken when the node's attribute precision="bf16" (graph/precision.h).
  bool mixed_precision = false;
  // Inputs such a node also takes stored in bf16 (a GEMM operand): where a
  // forward value is read only at these positions of bf16 nodes, the
  // lowering stores it in bf16 (graph/precision.h).
  std::vector<int> bf16_inputs;
  // Under bf16 its flops run at the bf16 GEMM rate (a GEMM op). The
  // planner costs the other bf16 ops, untimed, as their fp32 twins.
  bool bf16_gemm = false;
  // It can store its output 0 in bf16, rounded as a to_bf16 after it would
  // round it: the storage rewrite then stamps the node (graph/precision.h,
  // stores_in_bf16) instead of inserting a cast, and its shape rule and
  // forward read the stamp. One pass over the value instead of two.
  bool stores_bf16 = false;
  // It is an attention core: its first input packs q|k|v along one dim, so
  // the GEMM that makes it is split by tensor parallelism in three groups
  // (each rank its heads of q, k and v: parallel/split_units.h).
  bool attention_core = false;
};

// The registry. Ops register themselves from static initializers in
// graph/ops/*.cc (the library is linked whole-archive so none is dropped).
class OpRegistry {
 public:
  static OpRegistry& instance();
  void add(OpDef def);
  // Throws px::Error naming the unknown op.
  const OpDef& get(const std::string& name) const;
  bool has(const std::string& name) const;
  std::vector<std::string> names() const;

 private:
  std::vector<std::unique_ptr<OpDef>> defs_;
};

struct OpRegistrar {
  explicit OpRegistrar(OpDef def) { OpRegistry::instance().add(std::move(def)); }
};

// Cost of streaming inputs and outputs once: the default for memory-bound ops.
OpCost streaming_cost(const std::vector<TensorSpec>& inputs, const std::vector<TensorSpec>& outputs,
                      double flops_per_output_element = 0);

}  // namespace px

#define PX_REGISTER_OP(ident, ...) \
  static ::px::OpRegistrar px_op_registrar_##ident(__VA_ARGS__)
