#include "nn/onnx/binding.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "core/error.h"
#include "nn/onnx/fold.h"

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

// The role of an input no --input names, by shape and dtype: a second
// image-shaped input is a regression's target (the images again).
InputRole role_by_shape(const Declared& d, const std::vector<InputRole>& taken) {
  auto has = [&](InputRole r) { return std::find(taken.begin(), taken.end(), r) != taken.end(); };
  if (is_image(d)) return has(InputRole::images) ? InputRole::targets : InputRole::images;
  if (!d.is_float && d.dims.size() == 2) return has(InputRole::tokens) ? InputRole::targets : InputRole::tokens;
  if (!d.is_float && d.dims.size() == 1) return InputRole::labels;
  fail("input '{}' is {}: no dataset fits; parallax binds images (float [N,1,28,28] or [N,784]), tokens and "
       "targets (int [N,T], or float: the images again, for mse) and labels (int [N]); name its "
       "role with --input {}=ROLE", d.name, d.str(), d.name);
}

// Checks that `d` takes what `role` serves for a batch of `batch` rows.
// Targets are next tokens (int [N,T]) or, as mse's float targets, images.
void check_fits(const Declared& d, InputRole role, int64_t batch) {
  const bool image_like = role == InputRole::images || (role == InputRole::targets && d.is_float);
  const size_t rank = role == InputRole::labels ? 1 : image_like ? d.dims.size() : 2;
  if (d.is_float != image_like || d.dims.size() != rank || (image_like && !is_image(d)))
    fail("input '{}' is {} but {} are {}", d.name, d.str(), input_role_name(role),
         role == InputRole::images ? "float [N,1,28,28] or [N,784]"
         : role == InputRole::labels ? "int [N]"
         : "int [N,T] next tokens or float [N,1,28,28] or [N,784] images");
  if (d.dims[0] >= 0 && d.dims[0] != batch)
    fail("input '{}' has a fixed batch dim {} but the batch has {} rows: export it with "
         "dynamic_axes={{'{}': {{0: 'batch'}}}}", d.name, d.dims[0], batch, d.name);
}

// The rows of the model's position table: the fewest rows of a float
// (V, C) initializer that a Gather reads at positions made by Range
// (torch.arange(T), through the shape operators that fold: Unsqueeze,
// Expand, ...); nullopt without one.
std::optional<int64_t> position_table_rows(const ::onnx::GraphProto& graph) {
  const std::vector<std::string> folding = foldable_operators();
  std::map<std::string, int64_t> tables;  // a (V, C) float initializer's name (or alias) -> V
  for (const auto& t : graph.initializer())
    if (t.data_type() == ::onnx::TensorProto::FLOAT && t.dims_size() == 2) tables[t.name()] = t.dims(0);
  std::set<std::string> positions;  // values computed from a Range
  std::optional<int64_t> rows;
  for (const auto& node : graph.node()) {
    if (node.op_type() == "Identity" && node.input_size() == 1 && tables.count(node.input(0)) != 0) {
      tables[node.output(0)] = tables[node.input(0)];
      continue;
    }
    if (node.op_type() == "Gather" && node.input_size() == 2 && tables.count(node.input(0)) != 0 &&
        positions.count(node.input(1)) != 0) {
      rows = std::min(rows.value_or(tables[node.input(0)]), tables[node.input(0)]);
      continue;  // the embeddings are values, no longer positions
    }
    const bool folds = std::find(folding.begin(), folding.end(), node.op_type()) != folding.end();
    const auto is_position = [&](const std::string& name) { return positions.count(name) != 0; };
    const bool from_range =
        node.op_type() == "Range" || std::any_of(node.input().begin(), node.input().end(), is_position);
    if (folds && from_range) positions.insert(node.output().begin(), node.output().end());
  }
  return rows;
}

// The sequence length a tokens or targets input `d` (int [N,T]) is bound
// to: its own fixed T, or for a symbolic T (dynamic_axes on the sequence)
// config.sequence, else the rows of the model's position table (the
// longest sequence it takes, GPT's block size).
int64_t sequence_length(const Declared& d, const ::onnx::GraphProto& graph, const OnnxConfig& config) {
  if (d.dims[1] >= 0) {
    if (config.sequence > 0 && config.sequence != d.dims[1])
      fail("input '{}' has a fixed sequence length {}, not the {} asked for: export it with dynamic_axes="
           "{{'{}': {{0: 'batch', 1: 'sequence'}}}} to train other lengths", d.name, d.dims[1], config.sequence,
           d.name);
    return d.dims[1];
  }
  if (config.sequence > 0) return config.sequence;
  if (const std::optional<int64_t> rows = position_table_rows(graph)) return *rows;
  fail("input '{}' has a symbolic sequence length and no position table bounds it (a Gather of a (V, C) "
       "initializer at positions from Range, torch.arange): export it with a fixed one (the window size)", d.name);
}

// The images (N, 1, 28, 28) viewed as `d` declares them ((N, 784) or as they are).
ValueId images_as(ImportContext& c, ValueId images, const Declared& d, const std::string& name) {
  if (d.dims.size() != 2) return images;
  return c.graph().add1("reshape", {images}, {{"shape", std::vector<int64_t>{-1, 784}}}, name);
}

ValueId add_input(ImportContext& c, const Declared& d, InputRole role) {
  Graph& g = c.graph();
  const int64_t n = c.batch();
  if (role == InputRole::images) {
    ValueId x = g.input(d.name, {Shape{n, 1, 28, 28}});  // (N, 1, 28, 28), as the dataset serves it
    c.define(d.name, images_as(c, x, d, d.name + ".flatten"));
    return x;
  }
  const Shape shape = role == InputRole::labels ? Shape{n} : Shape{n, d.dims[1]};
  ValueId x = g.input(d.name, {shape, DType::i32});  // int64 in ONNX; our ops index with i32
  c.define(d.name, x);
  return x;
}

}  // namespace

BoundInputs bind_inputs(ImportContext& c, const ::onnx::GraphProto& graph, const OnnxConfig& config, Model& model) {
  std::vector<std::string> initializers, names;
  for (const auto& t : graph.initializer()) initializers.push_back(t.name());
  for (const auto& info : graph.input())
    if (std::find(initializers.begin(), initializers.end(), info.name()) == initializers.end())
      names.push_back(info.name());
  for (const InputBinding& b : config.bindings)
    if (std::find(names.begin(), names.end(), b.input) == names.end())
      fail("--input {}={}: the model has no input '{}'; its inputs: {}", b.input, input_role_name(b.role), b.input,
           fmt::join(names, ", "));
  // Roles first (named ones before those found by shape), then the inputs
  // in the order the data serves them: images or tokens, then the rest.
  std::vector<std::pair<Declared, InputRole>> roles;
  std::vector<InputRole> taken;
  for (const auto& info : graph.input()) {
    if (std::find(names.begin(), names.end(), info.name()) == names.end()) continue;
    const Declared d = declared(info);
    auto named = std::find_if(config.bindings.begin(), config.bindings.end(),
                              [&](const InputBinding& b) { return b.input == d.name; });
    if (named == config.bindings.end()) continue;
    roles.emplace_back(d, named->role);
    taken.push_back(named->role);
  }
  for (const auto& info : graph.input()) {
    if (std::find(names.begin(), names.end(), info.name()) == names.end()) continue;
    if (std::any_of(roles.begin(), roles.end(), [&](const auto& r) { return r.first.name == info.name(); })) continue;
    const Declared d = declared(info);
    roles.emplace_back(d, role_by_shape(d, taken));
    taken.push_back(roles.back().second);
  }
  for (size_t i = 0; i < roles.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (roles[i].second == roles[j].second)
        fail("input '{}' would be fed {} too, which input '{}' takes already; name roles with --input NAME=ROLE",
             roles[i].first.name, input_role_name(roles[i].second), roles[j].first.name);
  for (auto& [d, role] : roles) {
    check_fits(d, role, c.batch());
    if (!d.is_float && d.dims.size() == 2) d.dims[1] = sequence_length(d, graph, config);
  }
  std::stable_partition(roles.begin(), roles.end(), [](const auto& r) {
    return r.second == InputRole::images || r.second == InputRole::tokens;
  });
  BoundInputs bound;
  for (const auto& [d, role] : roles) {
    if (role == InputRole::targets && d.is_float) {
      if (model.inputs == kNoValue || c.graph().spec(model.inputs).dtype != DType::f32)
        fail("input '{}' takes float targets (the images again), but no input takes the images", d.name);
      bound.float_targets = images_as(c, model.inputs, d, d.name + ".view");
      c.define(d.name, bound.float_targets);
      continue;
    }
    const ValueId id = add_input(c, d, role);
    if (role == InputRole::images || role == InputRole::tokens) model.inputs = id;
    else model.targets = id;
  }
  if (model.inputs == kNoValue)
    fail("the model has no input parallax can feed images or tokens to (inputs: {})", fmt::join(names, ", "));
  // Without labels or targets among its inputs, a loss attached later
  // reads ours: declared here, before any node, as the built-in models
  // declare theirs. (An image model regressed by mse reads none; its
  // labels are still fed, unread.)
  if (model.targets == kNoValue) {
    Graph& g = c.graph();
    const Shape& x = g.spec(model.inputs).shape;
    const bool images = g.spec(model.inputs).dtype == DType::f32;
    model.targets = g.input(images ? "labels" : "targets", {images ? Shape{x[0]} : x, DType::i32});
    bound.attached_targets = true;
  }
  return bound;
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

// Attaches mse(first output, targets), the mean over every element: the
// targets are the float input bound as targets; else, for an output of one
// value a row, the labels read as numbers (a regression of the labels);
// else the images the model reads (an autoencoder), viewed as the output
// is shaped.
void attach_mse(ImportContext& c, ValueId output, Model& model, const BoundInputs& bound) {
  Graph& g = c.graph();
  const TensorSpec y = g.spec(output);
  if (y.dtype != DType::f32 || y.shape.rank() < 1 || y.shape[0] != c.batch())
    fail("--loss mse: the first output is {}; it takes float predictions with the batch's {} rows first", y.str(),
         c.batch());
  ValueId targets = bound.float_targets;
  const bool one_a_row = y.shape.numel() == y.shape[0];
  if (targets == kNoValue && one_a_row && model.targets != kNoValue && g.spec(model.targets).dtype != DType::f32 &&
      g.spec(model.targets).shape == Shape({y.shape[0]}))
    targets = g.add1("to_f32", {model.targets}, {}, "loss.labels");
  if (targets == kNoValue) {
    if (g.spec(model.inputs).dtype != DType::f32)
      fail("--loss mse: the model reads tokens, whose targets are integers; mse regresses to float targets (the "
           "images of an image model, or the labels as numbers): use --loss cross_entropy");
    targets = model.inputs;
  }
  const Shape t = g.spec(targets).shape;
  if (t.numel() != y.shape.numel())
    fail("--loss mse: the first output {} does not fit the targets {} (the images, {} values a row); parallax "
         "regresses to Fashion-MNIST images (an autoencoder's [N,784] or [N,1,28,28] output) or to the labels as "
         "numbers (an [N] or [N,1] output)", y.shape, t, t.numel(1, t.rank()));
  if (t != y.shape) {
    std::vector<int64_t> dims = y.shape.dims();
    dims[0] = -1;  // the rows stay batch-relative
    targets = g.add1("reshape", {targets}, {{"shape", dims}}, "loss.targets");
  }
  model.loss = g.add1("mse", {output, targets}, {{"scale", 1.0 / double(y.shape.numel())}}, "loss");
}

}  // namespace

void bind_loss(ImportContext& c, const ::onnx::GraphProto& graph, const OnnxConfig& config, Model& model,
               const BoundInputs& bound) {
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
    if (bound.attached_targets && bound.float_targets == kNoValue)
      fail("the model's loss reads no labels or targets input");
    model.loss = scalar;
    // A loss against float targets is a regression: no class scores to rank.
    model.logits = c.loss_scores != kNoValue ? c.loss_scores : bound.float_targets != kNoValue ? kNoValue : first;
    return;
  }
  if (first == kNoValue) fail("the model has no output to attach a loss to");
  if (config.loss == "mse") {
    attach_mse(c, first, model, bound);
    model.logits = kNoValue;
    return;
  }
  if (!config.loss.empty() && config.loss != "cross_entropy")
    fail("--loss {} is unknown: parallax attaches cross_entropy or mse", config.loss);
  if (bound.float_targets != kNoValue)
    fail("--loss cross_entropy: a float input takes the role targets (the images again), which only a regression "
         "reads: add --loss mse");
  model.logits = first;
  attach_cross_entropy(c, first, model);
}

}  // namespace px::nn
