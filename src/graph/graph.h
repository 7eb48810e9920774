// Graph: a static dataflow graph of op nodes over typed values. Nodes are
// kept in the order they were added, which is a topological order (a node
// can only consume values that already exist). Values are graph inputs
// (fed per step: token ids, images, labels), parameters (owned by the
// runtime, named like GPT-2 checkpoints: "h.0.attn.c_attn.weight"), or
// node outputs.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "graph/op.h"

namespace px {

// How a parameter is initialized: the runtime draws the numbers, unless
// the model brings its own (an imported ONNX initializer), which then win.
struct ParamInit {
  enum class Kind { normal, zeros, ones, uniform } kind = Kind::zeros;
  double scale = 0;  // normal: std; uniform: bound (values in [-scale, scale])
  std::shared_ptr<const Tensor> values;  // set: the parameter's initial values (its shape)
  bool operator==(const ParamInit&) const = default;
};

struct Value {
  enum class Kind { input, param, activation };
  Kind kind = Kind::activation;
  TensorSpec spec;
  std::string name;
  int producer = -1;  // node index for activations
  int output_index = 0;
  ParamInit init;     // params only
  bool weight_decay = false;  // params only: does AdamW decay it (matrices yes, biases/norms no)
  // params only: > 0, the optimizer moves it by this rate against its
  // gradient's sign, with no decay and no state, instead of its own rule
  // (DeepSeek-V3's balancing bias, whose gradient is the load's excess:
  // graph/ops/moe_losses.cc's moe_bias_balance).
  double sign_rate = 0;
};

struct Node {
  const OpDef* def = nullptr;
  Attrs attrs;
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  std::string name;  // scope-qualified, e.g. "h.0.attn.c_attn"
  // A backward node: the forward node whose backward rule (or gradient
  // sum) added it; -1 for forward nodes. Pipeline stages and recomputation
  // place a backward node with its origin.
  int origin = -1;
  const std::string& op() const { return def->name; }
};

class Graph {
 public:
  ValueId input(const std::string& name, const TensorSpec& spec);
  ValueId param(const std::string& name, const TensorSpec& spec, ParamInit init, bool weight_decay,
                double sign_rate = 0);
  // Adds a node; runs the op's shape rule, which throws px::Error naming the
  // node and the input shapes when they do not fit.
  std::vector<ValueId> add(const std::string& op, const std::vector<ValueId>& inputs,
                           const Attrs& attrs = {}, const std::string& name = "");
  // add() for ops with one result (saved-for-backward outputs are dropped from the return).
  ValueId add1(const std::string& op, const std::vector<ValueId>& inputs, const Attrs& attrs = {},
               const std::string& name = "");

  const Value& value(ValueId id) const { return values_.at(static_cast<size_t>(id)); }
  const TensorSpec& spec(ValueId id) const { return value(id).spec; }
  const std::vector<Value>& values() const { return values_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<ValueId>& params() const { return params_; }
  const std::vector<ValueId>& inputs() const { return inputs_; }
  // The param or input with this name; throws px::Error if none.
  ValueId find(const std::string& name) const;
  // Marks a value as a graph output (kept alive by the executor, returned).
  void mark_output(ValueId id, const std::string& name);
  const std::vector<std::pair<std::string, ValueId>>& outputs() const { return outputs_; }
  ValueId output(const std::string& name) const;

  // Name scope for nodes added while it is pushed: "h.0" + "attn" -> "h.0.attn".
  void push_scope(const std::string& scope) { scopes_.push_back(scope); }
  void pop_scope() { scopes_.pop_back(); }
  std::string scoped(const std::string& name) const;

  // add(), but the node goes right after node `after` (a later node of the
  // graph may then read its outputs): the nodes behind it move up one
  // index, and producers and origins follow them. It takes `after`'s origin.
  std::vector<ValueId> insert_after(int after, const std::string& op, const std::vector<ValueId>& inputs,
                                    const Attrs& attrs, const std::string& name);
  // Many at once, in one pass (a pass inserting a cast behind each of many
  // nodes would otherwise move every later node each time): each goes right
  // after its `after` (an index before any insertion; several after one
  // node keep their order here), reading values made no later than it,
  // and taking the origin of `origin_of` (-1: of `after`). Returns each
  // insertion's outputs.
  struct Insertion {
    int after = -1;
    std::string op;
    std::vector<ValueId> inputs;
    Attrs attrs;
    std::string name;
    int origin_of = -1;
  };
  std::vector<std::vector<ValueId>> insert_after(const std::vector<Insertion>& insertions);
  // The same, the node going right before node `before` (which it may
  // feed) and taking `before`'s origin: a backward node's helper stays with
  // the backward of the forward node it serves.
  std::vector<ValueId> insert_before(int before, const std::string& op, const std::vector<ValueId>& inputs,
                                     const Attrs& attrs, const std::string& name);
  // Node `node` runs `op` on `inputs` with `attrs`, named `name`, instead:
  // a rewrite merging nodes (graph/precision.h's fusions). The op's shape
  // rule must give the node's outputs the specs they have; the node keeps
  // them, so their readers are unchanged. Outputs beyond those are new
  // values, at the end of the values, named by `extra_names` (as add()
  // names them where none is given). Returns all the node's outputs.
  std::vector<ValueId> replace(int node, const std::string& op, const std::vector<ValueId>& inputs,
                               const Attrs& attrs, const std::string& name,
                               const std::vector<std::string>& extra_names = {});
  // Removes each erasure's node and its outputs, which nothing kept may
  // read or output, in one pass (a fusion pass collects its erasures and
  // removes them together: removing them one by one moves every later
  // node and value each time). Backward nodes whose origin an erased node
  // was take its `heir` (an index before the removal, a node that stays)
  // as theirs; -1: there must be none. Later nodes and values move up;
  // returns every old value id's new one (kNoValue for the removed), so
  // that ids held outside the graph can follow.
  struct Erasure {
    int node = -1;
    int heir = -1;
  };
  std::vector<ValueId> erase(const std::vector<Erasure>& erasures);
  // Node `node` reads `value` as its input `index` instead. The op's shape
  // rule must give the same output shapes (their dtypes follow the rule).
  void set_input(int node, size_t index, ValueId value);

  // Stamps nodes [first, end) as backward nodes of forward node `origin`.
  void set_origin(int first, int origin);
  // The dtype this graph holds `value` in where it differs from what its
  // producer makes: a pipeline stage's bf16 copy of a value another stage
  // makes and sends (parallel/lower/pipeline.cc), or the output of a node
  // stamped to store it in bf16 (graph/precision.h). Nothing is inferred
  // again.
  void set_dtype(ValueId value, DType dtype);
  // Sets one attribute of node `node`. Only for attributes the shape rule
  // does not read (graph/precision.h's), or with set_dtype giving the
  // outputs what the rule would (precision.h's storage stamp): the outputs
  // are not inferred again.
  void set_attr(int node, const std::string& name, AttrValue value);
  void erase_attr(int node, const std::string& name);

  int64_t param_count() const;
  std::string str() const;  // one line per node, for debugging

 private:
  ValueId new_value(Value v);
  std::vector<TensorSpec> infer(const Node& node) const;  // the op's shape rule, its errors naming the node
  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<ValueId> params_, inputs_;
  std::vector<std::pair<std::string, ValueId>> outputs_;
  std::vector<std::string> scopes_;
};

// RAII name scope.
class Scope {
 public:
  Scope(Graph& g, const std::string& name) : g_(g) { g_.push_scope(name); }
  ~Scope() { g_.pop_scope(); }

 private:
  Graph& g_;
};

}  // namespace px
