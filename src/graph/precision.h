// The precision a graph's GEMMs run in, carried by the graph itself: every
// node of an op with a bf16 path (OpDef::mixed_precision) is stamped with
// the attribute precision="bf16", and its forward reads it. A node without
// the attribute runs fp32, so an fp32 graph is exactly the graph of before.
//
// bf16 is mixed precision's usual recipe: the GEMM's fp32 operands are
// rounded to bf16 and multiplied with fp32 accumulation into an fp32
// output; parameters, gradients, optimizer state and every other op stay
// fp32. Being an attribute, the choice survives every copy of the graph
// (autodiff, propagation, localization) and reaches the kernel through the
// node, with no global setting and nothing added to the executors.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "graph/graph.h"

namespace px {

enum class Precision { fp32, bf16 };

// "fp32" or "bf16"; px::Error naming the word and the choices otherwise.
Precision parse_precision(std::string_view word);
std::string_view precision_name(Precision precision);

// Stamps every node whose op has a bf16 path with `precision` (fp32 clears
// the stamps: the graph is exactly an fp32 graph again). Backward nodes
// added later inherit their origin's precision (inherit_precision). A
// run's precision is its Strategy's (parallel/strategy.h): the lowering
// stamps the graph it lowers; models are built fp32.
void set_precision(Graph& graph, Precision precision);

// Nodes [first, end) added by node `origin`'s backward rule take its
// precision where their op has a bf16 path (autodiff calls this).
void inherit_precision(Graph& graph, int first, int origin);

// Whether `node` reads its input at `position` at bf16 precision: the node
// is stamped bf16 and its op takes that position in bf16
// (OpDef::bf16_inputs). The one test behind storage, ZeRO-3's bf16 gathers
// and pipeline transfers in bf16.
bool reads_at_bf16(const Node& node, size_t position);

// Per value: whether it is read, and read only by bf16 nodes, each at a
// position its op takes at bf16 precision (OpDef::bf16_inputs: GEMM and
// attention operands, gelu's input). Such a value can be stored, sent or
// gathered in bf16 with no change to any result: its readers round it to
// bf16 anyway. Graph outputs are not. Parameters count like any value (a
// GEMM's weight qualifies; a LayerNorm's scale or a bias does not).
std::vector<bool> read_only_at_bf16(const Graph& graph);

// Storage: every forward activation that only bf16 nodes read, each at a
// position its op takes in bf16 (OpDef::bf16_inputs: GEMM and attention
// operands, gelu's input, all read at bf16 precision anyway), gets
// a to_bf16 node right after its producer, and its readers read that
// instead. The fp32 value then dies at once; what backward keeps (the GEMMs'
// saved inputs, for the weight gradients) and what resharding moves is half
// the bytes. Results do not change: the GEMMs round the same values the
// cast does. Runs on a differentiated graph (the lowering calls it), so
// backward readers count and the casts need no backward. Graph outputs stay
// fp32. Where the producer can store the value in bf16 itself
// (OpDef::stores_bf16: a bias add, GELU), its node is stamped
// store="bf16" and its output becomes BF16 instead: the same rounding
// without a second pass. Returns the number of casts inserted (none in an
// fp32 graph).
int store_gemm_operands_in_bf16(Graph& graph);

// Backward's counterpart: a gradient (a value made by a backward node) that
// two or more bf16 nodes read at bf16 positions (a linear's dy, read by its
// input-gradient and weight-gradient GEMMs) gets a to_bf16 right before
// its first such reader, and those readers read the copy: the GEMMs rounded
// it once each before. Other readers (the bias gradient's sum) keep the
// fp32 value, so nothing is reduced or accumulated in bf16, and results do
// not change. The cast takes its first reader's origin, so it runs on that
// reader's pipeline stage. Returns the number of casts inserted (all after
// the forward nodes).
int round_shared_gradients_once(Graph& graph);

// The bias of a bf16 linear layer added in its GEMM's epilogue: each
// forward `linear` stamped bf16 whose output only a `bias_add` reads
// becomes, with it, one `linear_bias` node (the linear's name, at the bias
// add's place, the bias add's output and storage stamp), which oneDNN runs
// as one matmul adding the bias and rounding to bf16 as it stores: the
// bias add's pass over the output is gone, and results do not change (the
// same fp32 sum, + bias in fp32, one rounding: kernels/gemm_bf16.h). The
// linear's backward nodes take the fused node as their origin. Runs on a
// differentiated graph after the storage rewrite (the lowering calls it)
// and only where the strategy keeps every linear's output whole-featured
// or batch-split: linear_bias has no row-parallel signature. Removing
// nodes renumbers values; the result maps each old value id to its new
// one.
struct FusedBiases {
  int fused = 0;                // nodes removed
  std::vector<ValueId> new_id;  // by old value id; kNoValue for a removed value no other replaces
};
FusedBiases fuse_bias_into_gemms(Graph& graph);

// Backward's counterpart for the MLP: a bf16 gelu_grad whose output only
// round_shared_gradients_once's cast and a bias gradient's sum (sum_leading
// keep=1, over every leading dim) read becomes one gelu_grad_bias node
// that stores the bf16 copy itself and sums the fp32 values as it goes:
// one pass over the gradient instead of three, the same bits (the kernel
// sums each column over the rows in order, as sum_leading does). The cast's
// readers read its dx, the sum's its second output, which takes the sum's
// name here (a copy that re-adds the node, as propagation does, names it
// "<node>:1"). Runs after round_shared_gradients_once; removing nodes
// renumbers values (the sum's output, a bias gradient, maps to the new
// output).
FusedBiases fuse_bias_gradients_into_gelu_grad(Graph& graph);

// Whether a node with these attributes stores its output 0 in bf16 (the
// stamp above). Shape rules of OpDef::stores_bf16 ops read it, so a copy of
// the graph that re-infers the node gets the same dtype.
bool stores_in_bf16(const Attrs& attrs);

// The precision a node with these attributes runs in (fp32 when unset).
Precision precision_of(const Attrs& attrs);

}  // namespace px
