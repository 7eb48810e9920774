#include "nn/onnx/binding.h"

#include <algorithm>

#include "core/error.h"

namespace px::nn {
namespace {

// An ONNX graph input as declared: element type and dims (-1: symbolic).
struct Declared {
  std::string name;
  bool is_float = false;
  std::vector<int64_t> dims;
  std::string str() const {
    std::vector<std::string> d;
    for (int64_t x : dims) d.push_back(x < 0 ? "?" : std::to_string(x));
    return fmt::format("{} [{}]", is_float ? "float" : "int", fmt::join(d, ","));
  }
};

Declared declared(const ::onnx::ValueInfoProto& info) {
  const auto& t = info.type().tensor_type();
  Declared d{.name = info.name(), .is_float = t.elem_type() == ::onnx::TensorProto::FLOAT};
  for (const auto& dim : t.shape().dim()) d.dims.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
  return d;
}

bool is_image(const Declared& d) {
  const auto tail = std::vector<int64_t>(d.dims.begin() + std::min<size_t>(1, d.dims.size()), d.dims.end());
  return d.is_float && (tail == std::vector<int64_t>{1, 28, 28} || tail == std::vector<int64_t>{784});
}

// The role of an input no --input names, by shape and dtype.
InputRole role_by_shape(const Declared& d, bool tokens_taken) {
  if (is_image(d)) return InputRole::images;
  if (!d.is_float && d.dims.size() == 2) return tokens_taken ? InputRole::targets : InputRole::tokens;
  if (!d.is_float && d.dims.size() == 1) return InputRole::labels;
  fail("input '{}' is {}: no dataset fits; parallax binds images (float [N,1,28,28] or [N,784]), tokens and "
       "targets (int [N,T]) and labels (int [N]); name its role with --input {}=ROLE", d.name, d.str(), d.name);
}

// Checks that `d` takes what `role` serves for a batch of `batch` rows.
void check_fits(const Declared& d, InputRole role, int64_t batch) {
  const bool float_role = role == InputRole::images;
  const size_t rank = role == InputRole::labels ? 1 : role == InputRole::images ? d.dims.size() : 2;
  if (d.is_float != float_role || d.dims.size() != rank || (role == InputRole::images && !is_image(d)))
    fail("input '{}' is {} but {} are {}", d.name, d.str(), input_role_name(role),
         role == InputRole::images ? "float [N,1,28,28] or [N,784]"
         : role == InputRole::labels ? "int [N]" : "int [N,T]");
  if (d.dims[0] >= 0 && d.dims[0] != batch)
    fail("input '{}' has a fixed batch dim {} but the batch has {} rows: export it with "
         "dynamic_axes={{'{}': {{0: 'batch'}}}}", d.name, d.dims[0], batch, d.name);
  if (rank == 2 && role != InputRole::images && d.dims[1] < 0)
    fail("input '{}' has a symbolic sequence length: export it with a fixed one (the window size)", d.name);
}

ValueId add_input(ImportContext& c, const Declared& d, InputRole role) {
  Graph& g = c.graph();
  const int64_t n = c.batch();
  if (role == InputRole::images) {
    ValueId x = g.input(d.name, {Shape{n, 1, 28, 28}});  // (N, 1, 28, 28), as the dataset serves it
    c.define(d.name, d.dims.size() == 2 ? g.add1("reshape", {x}, {{"shape", std::vector<int64_t>{-1, 784}}},
                                                 d.name + ".flatten")
                                        : x);
    return x;
  }
  const Shape shape = role == InputRole::labels ? Shape{n} : Shape{n, d.dims[1]};
  ValueId x = g.input(d.name, {shape, DType::i32});  // int64 in ONNX; our ops index with i32
  c.define(d.name, x);
  return x;
}

}  // namespace

void bind_inputs(ImportContext& c, const ::onnx::GraphProto& graph, const OnnxConfig& config, Model& model,
                 bool& attached_targets) {
  std::vector<std::string> initializers, names;
  for (const auto& t : graph.initializer()) initializers.push_back(t.name());
  for (const auto& info : graph.input())
    if (std::find(initializers.begin(), initializers.end(), info.name()) == initializers.end())
      names.push_back(info.name());
  for (const InputBinding& b : config.bindings)
    if (std::find(names.begin(), names.end(), b.input) == names.end())
      fail("--input {}={}: the model has no input '{}'; its inputs: {}", b.input, input_role_name(b.role), b.input,
           fmt::join(names, ", "));
  std::vector<InputRole> taken;
  for (const auto& info : graph.input()) {
    if (std::find(names.begin(), names.end(), info.name()) == names.end()) continue;
    const Declared d = declared(info);
    auto named = std::find_if(config.bindings.begin(), config.bindings.end(),
                              [&](const InputBinding& b) { return b.input == d.name; });
    const bool tokens_taken = std::find(taken.begin(), taken.end(), InputRole::tokens) != taken.end();
    const InputRole role = named != config.bindings.end() ? named->role : role_by_shape(d, tokens_taken);
    if (std::find(taken.begin(), taken.end(), role) != taken.end())
      fail("input '{}' would be fed {} too, which another input takes already; name roles with --input NAME=ROLE",
           d.name, input_role_name(role));
    taken.push_back(role);
    check_fits(d, role, c.batch());
    const ValueId id = add_input(c, d, role);
    if (role == InputRole::images || role == InputRole::tokens) model.inputs = id;
    else model.targets = id;
  }
  if (model.inputs == kNoValue)
    fail("the model has no input parallax can feed images or tokens to (inputs: {})", fmt::join(names, ", "));
  // Without labels or targets among its inputs, a loss attached later
  // reads ours: declared here, before any node, as the built-in models
  // declare theirs (lowering re-adds values in id order).
  if (model.targets == kNoValue) {
    Graph& g = c.graph();
    const Shape& x = g.spec(model.inputs).shape;
    const bool images = g.spec(model.inputs).dtype == DType::f32;
    model.targets = g.input(images ? "labels" : "targets", {images ? Shape{x[0]} : x, DType::i32});
    attached_targets = true;
  }
}

namespace {

// Attaches cross_entropy(first output, targets) with the mean over rows.
void attach_cross_entropy(ImportContext& c, ValueId logits, Model& model) {
  Graph& g = c.graph();
  const Shape s = g.spec(logits).shape;
  const bool images = g.spec(model.inputs).dtype == DType::f32;
  if (s.rank() != (images ? 2 : 3) || s[0] != c.batch())
    fail("--loss cross_entropy: the first output has shape {}; it takes {} scores", s,
         images ? "(N, classes) class" : "(N, T, vocabulary) next-token");
  if (g.spec(model.targets).shape != Shape(std::vector<int64_t>(s.dims().begin(), s.dims().end() - 1)))
    fail("--loss cross_entropy: the first output {} does not fit targets {}", s, g.spec(model.targets).shape);
  const double rows = double(s.numel(0, s.rank() - 1));
  model.loss = g.add1("cross_entropy", {logits, model.targets}, {{"scale", 1.0 / rows}}, "loss");
}

}  // namespace

void bind_loss(ImportContext& c, const ::onnx::GraphProto& graph, const OnnxConfig& config, Model& model,
               bool attached_targets) {
  Graph& g = c.graph();
  ValueId scalar = kNoValue, first = kNoValue;
  ::onnx::NodeProto graph_outputs;
  graph_outputs.set_name("(graph outputs)");
  for (const auto& out : graph.output()) {
    if (c.is_constant(out.name())) continue;
    const ValueId id = c.value(out.name(), graph_outputs);
    if (g.spec(id).shape.rank() == 0 && scalar == kNoValue) scalar = id;
    else if (g.spec(id).shape.rank() > 0 && first == kNoValue) first = id;
  }
  if (scalar != kNoValue) {
    if (!config.loss.empty())
      fail("--loss {}: the model computes its loss already (its scalar output); leave --loss out", config.loss);
    if (g.spec(scalar).dtype != DType::f32) fail("the scalar output is not a float loss");
    if (attached_targets) fail("the model's loss reads no labels or targets input");
    model.loss = scalar;
    model.logits = c.loss_scores != kNoValue ? c.loss_scores : first;
    return;
  }
  if (first == kNoValue) fail("the model has no output to attach a loss to");
  if (!config.loss.empty() && config.loss != "cross_entropy")
    fail("--loss {} is not supported; parallax attaches cross_entropy", config.loss);
  model.logits = first;
  attach_cross_entropy(c, first, model);
}

}  // namespace px::nn
