// The forms the autoencoder fixture brings (Div of values, ReduceMean off
// the last axis, Concat with constants, --loss mse) written other ways than
// torch wrote them, the graph inputs declared in any order, and the named
// errors of the forms parallax refuses: each case edits a fixture's
// ModelProto one way.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include <onnx/onnx_pb.h>

#include "core/error.h"
#include "core/rng.h"
#include "graph/executor.h"
#include "nn/onnx/onnx_import.h"
#include "runtime/state/safetensors.h"
#include "runtime/tasks/task.h"
#include "testing/scratch_dir.h"

namespace px {
namespace {

std::string fixture_file(const std::string& name) { return std::string(PX_ONNX_FIXTURES) + "/" + name; }

::onnx::ModelProto fixture_proto(const std::string& name) {
  ::onnx::ModelProto model;
  EXPECT_TRUE(model.ParseFromString(testing::read_file(fixture_file(name + ".onnx"))));
  return model;
}

// `name`.onnx edited by `edit`, imported with `config` for a batch of 8:
// the model, or the error's message.
struct Imported {
  nn::Model model;
  std::string error;
};

Imported import_edited(const std::string& name, const std::function<void(::onnx::ModelProto&)>& edit,
                       nn::OnnxConfig config = {}) {
  ::onnx::ModelProto proto = fixture_proto(name);
  if (edit) edit(proto);
  testing::ScratchDir dir;
  config.path = dir.file("edited.onnx");
  testing::write_file(config.path, proto.SerializeAsString());
  Imported out;
  try {
    out.model = nn::import_onnx(config, 8, true);
  } catch (const Error& e) {
    out.error = e.what();
  }
  return out;
}

// `message` is one line holding every one of `parts`.
void expect_one_line_naming(const std::string& message, const std::vector<std::string>& parts) {
  ASSERT_FALSE(message.empty()) << "no error";
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  for (const std::string& part : parts) EXPECT_NE(message.find(part), std::string::npos) << message;
}

::onnx::NodeProto& first_node(::onnx::ModelProto& model, const std::string& type) {
  for (auto& node : *model.mutable_graph()->mutable_node())
    if (node.op_type() == type) return node;
  throw std::logic_error("no " + type + " node");
}

// A Constant node holding a float tensor of `dims` filled from `values`
// (cycled), made the graph's first node.
void add_constant(::onnx::ModelProto& m, const std::string& name, const std::vector<int64_t>& dims,
                  const std::vector<float>& values) {
  auto* nodes = m.mutable_graph()->mutable_node();
  ::onnx::NodeProto* node = nodes->Add();
  node->set_op_type("Constant");
  node->set_name("/test/" + name);
  node->add_output(name);
  auto* a = node->add_attribute();
  a->set_name("value");
  a->set_type(::onnx::AttributeProto::TENSOR);
  ::onnx::TensorProto* t = a->mutable_t();
  t->set_data_type(::onnx::TensorProto::FLOAT);
  int64_t n = 1;
  for (int64_t d : dims) t->add_dims(d), n *= d;
  for (int64_t i = 0; i < n; ++i) t->add_float_data(values[static_cast<size_t>(i) % values.size()]);
  for (int i = nodes->size() - 1; i > 0; --i) nodes->SwapElements(i, i - 1);
}

// The forward loss of `model` on the autoencoder fixture's batch.
double autoencoder_loss(const nn::Model& model) {
  const SafetensorsFile batch = load_safetensors(fixture_file("autoencoder.reference.safetensors"));
  std::vector<Tensor> bound;
  initial_parameters(model.graph, 0).bind(model.graph, bound);
  bound[model.inputs] = batch.at("inputs");
  bound[model.targets] = batch.at("targets");
  return Executor(model.graph, {model.loss}).run(bound).front().f32()[0];
}

const nn::OnnxConfig kMse{.loss = "mse"};

TEST(OnnxForms, TheReciprocalWrittenAsADivisionOfAConstantGivesTheSameLoss) {
  const Imported torch_form = import_edited("autoencoder", {}, kMse);
  const Imported division = import_edited("autoencoder", [](auto& m) {
    add_constant(m, "one", {}, {1.0f});
    ::onnx::NodeProto& node = first_node(m, "Reciprocal");
    const std::string x = node.input(0);
    node.set_op_type("Div");
    node.clear_input();
    node.add_input("one");
    node.add_input(x);
  }, kMse);
  ASSERT_EQ(torch_form.error + division.error, "");
  EXPECT_EQ(autoencoder_loss(division.model), autoencoder_loss(torch_form.model));
}

TEST(OnnxForms, ADivisionByAConstantVectorIsNamed) {
  const Imported imported = import_edited("autoencoder", [](auto& m) {
    add_constant(m, "divisors", {16}, {2.0f, 3.0f});
    first_node(m, "Div").set_input(1, "divisors");
  }, kMse);
  expect_one_line_naming(imported.error, {"node '/Div'", "constant operand of shape [16]", "scalar constants"});
}

TEST(OnnxForms, ADivisionOfShapesThatDoNotBroadcastIsNamed) {
  // u / (1 + u·u) made u / h: (N, 24) by (N, 16).
  const Imported imported = import_edited("autoencoder", [](auto& m) {
    ::onnx::NodeProto& first = first_node(m, "Div");
    const std::string h = first.output(0);
    int seen = 0;
    for (auto& node : *m.mutable_graph()->mutable_node())
      if (node.op_type() == "Div" && seen++ == 1) node.set_input(1, h);
  }, kMse);
  expect_one_line_naming(imported.error, {"node '/Div_1'", "[8,24] and [8,16]", "one divisor per row"});
}

TEST(OnnxForms, AMeanOverTheBatchAxisOrEveryAxisIsNamed) {
  // The first ReduceMean is mean(h², -1) of (N, 16): its axes rewritten.
  auto over = [](std::vector<int64_t> axes) {
    return import_edited("autoencoder", [axes](auto& m) {
      ::onnx::NodeProto& mean = first_node(m, "ReduceMean");
      auto* attributes = mean.mutable_attribute();
      for (int i = 0; i < attributes->size(); ++i)
        if (attributes->Get(i).name() == "axes") attributes->DeleteSubrange(i, 1);
      if (axes.empty()) return;  // absent: every axis
      auto* a = mean.add_attribute();
      a->set_name("axes");
      a->set_type(::onnx::AttributeProto::INTS);
      for (int64_t x : axes) a->add_ints(x);
    }, kMse);
  };
  expect_one_line_naming(over({0, -1}).error, {"node '/ReduceMean'", "axes [0,-1] include the batch axis 0"});
  expect_one_line_naming(over({}).error, {"node '/ReduceMean'", "axes absent", "other than the batch axis 0"});
  expect_one_line_naming(over({-1, 1}).error, {"node '/ReduceMean'", "axes [-1,1] name an axis twice"});
  EXPECT_EQ(over({1}).error, "");  // the last axis, named from the front
}

// A constant of varying values joins as one row repeated over the batch
// (a fill_like holding that row); one whose rows differ depends on the
// batch's rows, and is named.
TEST(OnnxForms, AConcatOfAConstantWhoseRowsDifferIsNamed) {
  auto with_constant = [](std::vector<float> values) {
    return import_edited("autoencoder", [values](auto& m) {
      add_constant(m, "table", {8, 4}, values);
      ::onnx::NodeProto* concat = nullptr;
      for (auto& node : *m.mutable_graph()->mutable_node())
        if (node.op_type() == "Concat" && node.input_size() == 3) concat = &node;
      ASSERT_NE(concat, nullptr);
      concat->set_input(1, "table");
    }, kMse);
  };
  const Imported repeated = with_constant({0.0f, 1.0f, 2.0f, 3.0f});  // every row 0, 1, 2, 3
  ASSERT_EQ(repeated.error, "");
  std::vector<std::vector<double>> rows;
  for (const Node& node : repeated.model.graph.nodes())
    if (node.op() == "fill_like" && node.attrs.has("values")) rows.push_back(node.attrs.get_floats("values"));
  EXPECT_EQ(rows, (std::vector<std::vector<double>>{{0, 1, 2, 3}}));
  expect_one_line_naming(with_constant({0.0f, 1.0f, 2.0f}).error,
                         {"Concat", "input 1 is a constant [8,4] whose rows differ (row 1 is not row 0)",
                          "one row repeated over the batch"});
}

// Graph inputs listed among the initializers (keep_initializers_as_inputs)
// and in any order: the CNN fixture's y before x, after its weights.
TEST(OnnxForms, InputsDeclaredAfterInitializersAndInAnyOrderImport) {
  const Imported plain = import_edited("cnn", {});
  const Imported reordered = import_edited("cnn", [](auto& m) {
    auto* graph = m.mutable_graph();
    std::vector<::onnx::ValueInfoProto> data(graph->input().begin(), graph->input().end());
    graph->clear_input();
    for (const auto& t : graph->initializer()) {
      auto* info = graph->add_input();
      info->set_name(t.name());
      auto* type = info->mutable_type()->mutable_tensor_type();
      type->set_elem_type(t.data_type());
      for (int64_t d : t.dims()) type->mutable_shape()->add_dim()->set_dim_value(d);
    }
    for (auto it = data.rbegin(); it != data.rend(); ++it) *graph->add_input() = *it;
  });
  ASSERT_EQ(plain.error + reordered.error, "");
  EXPECT_EQ(reordered.model.graph.value(reordered.model.inputs).name, "x");
  EXPECT_EQ(reordered.model.graph.value(reordered.model.targets).name, "y");
  EXPECT_EQ(reordered.model.graph.params().size(), plain.model.graph.params().size());
  EXPECT_EQ(reordered.model.graph.nodes().size(), plain.model.graph.nodes().size());
}

TEST(OnnxForms, MseOnAnOutputThatIsNoImageIsNamed) {
  const Imported imported = import_edited("mlp", {}, kMse);
  expect_one_line_naming(imported.error, {"--loss mse", "first output [8,10]", "does not fit the targets [8,1,28,28]",
                                          "autoencoder"});
}

// An image model with one output a row regresses the labels as numbers:
// the MLP's scores averaged to (N, 1), against the labels cast to float.
TEST(OnnxForms, MseOnOneOutputARowRegressesTheLabels) {
  const Imported imported = import_edited("mlp", [](auto& m) {
    auto* graph = m.mutable_graph();
    ::onnx::NodeProto* mean = graph->add_node();
    mean->set_op_type("ReduceMean");
    mean->set_name("/test/ReduceMean");
    mean->add_input(graph->output(0).name());
    mean->add_output("score");
    auto* axes = mean->add_attribute();
    axes->set_name("axes");
    axes->set_type(::onnx::AttributeProto::INTS);
    axes->add_ints(-1);
    ::onnx::ValueInfoProto out = graph->output(0);
    out.set_name("score");
    out.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(1)->set_dim_value(1);
    graph->clear_output();
    *graph->add_output() = out;
  }, kMse);
  ASSERT_EQ(imported.error, "");
  const nn::Model& model = imported.model;
  EXPECT_EQ(model.logits, kNoValue);
  ValueId score = kNoValue;
  for (const Node& node : model.graph.nodes())
    if (node.name == "/test/ReduceMean") score = node.outputs[0];
  ASSERT_NE(score, kNoValue);
  Rng rng(5);
  std::vector<Tensor> bound;
  initial_parameters(model.graph, 0).bind(model.graph, bound);
  Tensor images = Tensor::empty(model.graph.spec(model.inputs).shape);
  for (int64_t i = 0; i < images.numel(); ++i) images.f32()[i] = static_cast<float>(rng.uniform());
  Tensor labels = Tensor::empty(model.graph.spec(model.targets).shape, model.graph.spec(model.targets).dtype);
  for (int64_t i = 0; i < labels.numel(); ++i) {
    if (labels.dtype() == DType::i32) labels.data<int32_t>()[i] = static_cast<int32_t>(i % 10);
    else labels.data<int64_t>()[i] = i % 10;
  }
  bound[model.inputs] = images;
  bound[model.targets] = labels;
  Executor executor(model.graph, {model.loss, score});
  const std::vector<Tensor> out = executor.run(bound);
  double expected = 0;
  for (int64_t i = 0; i < 8; ++i) expected += std::pow(double(out[1].f32()[i]) - double(i % 10), 2) / 8;
  EXPECT_NEAR(out[0].f32()[0], expected, 1e-5 * expected);
}

TEST(OnnxForms, MseOnATokenModelIsNamed) {
  const Imported imported = import_edited("gpt", {}, kMse);
  expect_one_line_naming(imported.error, {"--loss mse", "reads tokens", "--loss cross_entropy"});
}

TEST(OnnxForms, AnUnknownLossIsNamed) {
  const Imported imported = import_edited("mlp", {}, {.loss = "hinge"});
  expect_one_line_naming(imported.error, {"--loss hinge is unknown", "cross_entropy or mse"});
}

// A float input taking the role targets is the images again: a denoiser
// exported as model(x, clean) with the target an input of the graph. Here
// the autoencoder's x itself is bound as the targets of a second input.
TEST(OnnxForms, AFloatInputBoundAsTargetsIsTheImages) {
  auto with_second_input = [](::onnx::ModelProto& m) {
    auto* graph = m.mutable_graph();
    ::onnx::ValueInfoProto clean = graph->input(0);
    clean.set_name("clean");
    *graph->add_input() = clean;  // unread by any node: the loss reads it
  };
  // By shape: a second image-shaped input is the targets.
  const Imported by_shape = import_edited("autoencoder", with_second_input, kMse);
  ASSERT_EQ(by_shape.error, "");
  const Imported plain = import_edited("autoencoder", {}, kMse);
  EXPECT_EQ(autoencoder_loss(by_shape.model), autoencoder_loss(plain.model));
  // Named, it is the same; with cross-entropy it is refused by name.
  const Imported named = import_edited(
      "autoencoder", with_second_input,
      {.loss = "mse", .bindings = {{.input = "clean", .role = nn::InputRole::targets}}});
  ASSERT_EQ(named.error, "");
  EXPECT_EQ(autoencoder_loss(named.model), autoencoder_loss(plain.model));
  expect_one_line_naming(import_edited("autoencoder", with_second_input).error,
                         {"a float input takes the role targets", "--loss mse"});
}

}  // namespace
}  // namespace px
