// Imported ONNX models against PyTorch (tests/fixtures/onnx, written by
// make_fixtures.py): on the fixture's batch, the forward loss within 1e-5
// relative, every parameter's gradient within 1e-4 of its largest element,
// and the losses of 50 AdamW steps within 1e-4 relative.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "graph/autodiff.h"
#include "graph/executor.h"
#include "nn/onnx/onnx_import.h"
#include "parallel/compose.h"
#include "parallel/lower.h"
#include "parallel/strategy.h"
#include "runtime/state/safetensors.h"
#include "runtime/executor/program_executor.h"
#include "runtime/tasks/task.h"

namespace px {
namespace {

constexpr double kLossTolerance = 1e-5;
constexpr double kGradientTolerance = 1e-4;
constexpr double kStepsTolerance = 1e-4;

// A fixture: the model file, its batch and PyTorch's numbers.
struct Fixture {
  std::string name;
  nn::OnnxConfig config;
  SafetensorsFile tensors;  // inputs, targets, grad.<param>
  nlohmann::json reference; // loss, adamw, losses
  int64_t batch() const { return reference.at("batch").get<int64_t>(); }
};

Fixture load_fixture(const std::string& name) {
  const std::string base = std::string(PX_ONNX_FIXTURES) + "/" + name;
  Fixture f{.name = name, .config = {.path = base + ".onnx"}, .tensors = load_safetensors(base + ".reference.safetensors")};
  std::ifstream in(base + ".reference.json");
  f.reference = nlohmann::json::parse(in);
  f.config.loss = f.reference.value("attached_loss", "");  // --loss for a graph without one
  return f;
}

// Every parameter and the batch bound by value id, for graph::Executor.
std::vector<Tensor> bind(const nn::Model& model, const Fixture& f) {
  std::vector<Tensor> bound;
  initial_parameters(model.graph, 0).bind(model.graph, bound);
  bound[model.inputs] = f.tensors.at("inputs");
  bound[model.targets] = f.tensors.at("targets");
  return bound;
}

class OnnxReference : public ::testing::TestWithParam<std::string> {};

TEST_P(OnnxReference, ForwardLossMatchesPyTorch) {
  const Fixture f = load_fixture(GetParam());
  const nn::Model model = nn::import_onnx(f.config, f.batch(), true);
  Executor executor(model.graph, {model.loss});
  const double loss = executor.run(bind(model, f)).front().f32()[0];
  const double torch_loss = f.reference.at("loss").get<double>();
  const double relative = std::abs(loss - torch_loss) / std::abs(torch_loss);
  EXPECT_LE(relative, kLossTolerance) << loss << " vs " << torch_loss;
  RecordProperty("relative_difference", fmt::format("{:.3g}", relative));
}

TEST_P(OnnxReference, EveryParameterGradientMatchesPyTorch) {
  const Fixture f = load_fixture(GetParam());
  nn::Model model = nn::import_onnx(f.config, f.batch(), true);
  const std::vector<ValueId> params = model.graph.params();
  const Gradients grads = build_backward(model.graph, model.loss, params);
  std::vector<ValueId> wanted;
  for (ValueId p : params) wanted.push_back(grads.at(p));
  Executor executor(model.graph, wanted);
  const std::vector<Tensor> ours = executor.run(bind(model, f));
  size_t checked = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string& name = model.graph.value(params[i]).name;
    const Tensor& torch_grad = f.tensors.at("grad." + name);
    ASSERT_EQ(ours[i].shape(), torch_grad.shape()) << name;
    double worst = 0, largest = 0;
    for (int64_t j = 0; j < torch_grad.numel(); ++j) {
      worst = std::max(worst, double(std::abs(ours[i].f32()[j] - torch_grad.f32()[j])));
      largest = std::max(largest, double(std::abs(torch_grad.f32()[j])));
    }
    EXPECT_LE(worst / largest, kGradientTolerance) << name << ": largest difference " << worst << " of " << largest;
    ++checked;
  }
  // Every tensor PyTorch differentiated is a parameter here, and back.
  EXPECT_EQ(checked + 2, f.tensors.tensors.size());
}

TEST_P(OnnxReference, FiftyAdamwStepsMatchPyTorch) {
  const Fixture f = load_fixture(GetParam());
  const nn::Model model = nn::import_onnx(f.config, f.batch(), true);
  const nlohmann::json& adamw = f.reference.at("adamw");
  const OptimizerConfig optimizer{.kind = "adamw",
                                  .beta1 = adamw.at("beta1").get<double>(),
                                  .beta2 = adamw.at("beta2").get<double>(),
                                  .eps = adamw.at("eps").get<double>(),
                                  .weight_decay = adamw.at("weight_decay").get<double>()};
  const parallel::Strategy strategy = parallel::data_parallel(1, batch_input_names(model));
  ProgramExecutor executor(parallel::lower({.forward = &model.graph, .loss = model.loss}, strategy, 0), AxisGroups{},
                           optimizer);
  executor.set_parameters(initial_parameters(model.graph, 0));
  const std::vector<double> torch_losses = f.reference.at("losses").get<std::vector<double>>();
  double worst = 0;
  for (size_t step = 0; step < torch_losses.size(); ++step) {
    const StepResult out = executor.run({.feeds = {{model.inputs, f.tensors.at("inputs")},
                                                   {model.targets, f.tensors.at("targets")}},
                                         .step = step,
                                         .lr = adamw.at("lr").get<double>()});
    const double relative = std::abs(out.loss - torch_losses[step]) / std::abs(torch_losses[step]);
    EXPECT_LE(relative, kStepsTolerance) << "step " << step + 1 << ": " << out.loss << " vs PyTorch's "
                                         << torch_losses[step];
    worst = std::max(worst, relative);
    if (step + 1 == 20) RecordProperty("worst_relative_difference_20_steps", fmt::format("{:.3g}", worst));
  }
  RecordProperty("worst_relative_difference", fmt::format("{:.3g}", worst));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, OnnxReference, ::testing::Values("mlp", "cnn", "gpt", "gpt_opset13", "mlp_ops",
                                                                           "autoencoder", "regression", "gpt_dynamic"));

// gpt_dynamic was exported with dynamic_axes on the batch and the sequence:
// its positions (torch.arange) and causal mask are shape arithmetic on the
// input's length, folded for the length bound at import. By default that
// is the position table's 8 rows (the reference tests above); bound to 5,
// it gives PyTorch's loss on the first 5 positions of the batch.
Tensor first_columns(const Tensor& t, int64_t n) {  // (B, T) i32 -> (B, n)
  const int64_t rows = t.shape()[0], columns = t.shape()[1];
  Tensor out = Tensor::empty(Shape{rows, n}, t.dtype());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) out.data<int32_t>()[r * n + j] = t.data<int32_t>()[r * columns + j];
  return out;
}

TEST(OnnxDynamicSequence, ASymbolicSequenceBindsToThePositionTableOrTheLengthAsked) {
  const Fixture f = load_fixture("gpt_dynamic");
  const nn::Model whole = nn::import_onnx(f.config, f.batch(), true);
  EXPECT_EQ(whole.graph.spec(whole.inputs).shape, Shape({f.batch(), 8}));
  nn::OnnxConfig config = f.config;
  config.sequence = f.reference.at("short_sequence").get<int64_t>();
  const nn::Model model = nn::import_onnx(config, f.batch(), true);
  EXPECT_EQ(model.graph.spec(model.inputs).shape, Shape({f.batch(), config.sequence}));
  std::vector<Tensor> bound;
  initial_parameters(model.graph, 0).bind(model.graph, bound);
  bound[model.inputs] = first_columns(f.tensors.at("inputs"), config.sequence);
  bound[model.targets] = first_columns(f.tensors.at("targets"), config.sequence);
  Executor executor(model.graph, {model.loss});
  const double loss = executor.run(bound).front().f32()[0];
  const double torch_loss = f.reference.at("short_loss").get<double>();
  EXPECT_LE(std::abs(loss - torch_loss) / std::abs(torch_loss), kLossTolerance) << loss << " vs " << torch_loss;
}

// Folded, the shape arithmetic leaves nothing behind: the positions are an
// arange looked up once (broadcast over the batch by the Add), and the
// mask made in forward is causal, so both blocks' attention fuses.
TEST(OnnxDynamicSequence, PositionsAndTheMaskFoldAndTheAttentionFuses) {
  const nn::Model model = nn::import_onnx({.path = std::string(PX_ONNX_FIXTURES) + "/gpt_dynamic.onnx"}, 2, true);
  std::map<std::string, int> ops;
  for (const Node& node : model.graph.nodes()) {
    ++ops[node.op()];
    if (node.op() == "arange") {
      EXPECT_EQ(node.attrs.get_int("n", 0), 8);
    }
  }
  EXPECT_EQ(ops["arange"], 1);
  EXPECT_EQ(ops["embedding"], 2);  // the tokens' and the positions'
  EXPECT_EQ(ops["attention"], 2);
  EXPECT_EQ(ops["layernorm"], 5);
  EXPECT_EQ(ops["causal_fill"] + ops["softmax"] + ops["batched_matmul"], 0);
}

// A length past the position table, or one a fixed export does not have,
// is refused by name.
TEST(OnnxDynamicSequence, ALengthThePositionsOrTheExportCannotTakeIsNamed) {
  auto error = [](const std::string& fixture, int64_t sequence) {
    try {
      nn::import_onnx({.path = std::string(PX_ONNX_FIXTURES) + "/" + fixture + ".onnx", .sequence = sequence}, 2, true);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string longer = error("gpt_dynamic", 9);
  EXPECT_NE(longer.find("node '/wpe/Gather' (Gather): positions 0..8 index a table 'wpe.weight' of 8 rows"),
            std::string::npos) << longer;
  const std::string fixed = error("gpt", 5);
  EXPECT_NE(fixed.find("input 'tokens' has a fixed sequence length 8, not the 5 asked for"), std::string::npos)
      << fixed;
}

// The opset-13 export spells LayerNorm, GELU and attention out of small
// operators; the fusion pass gives the graph the fused ops back (the
// reference tests above check the numbers).
TEST(OnnxFusion, Opset13LayerNormsGelusAndAttentionBecomeTheFusedOps) {
  const nn::Model model = nn::import_onnx({.path = std::string(PX_ONNX_FIXTURES) + "/gpt_opset13.onnx"}, 2, true);
  std::map<std::string, int> ops;
  for (const Node& node : model.graph.nodes()) ++ops[node.op()];
  EXPECT_EQ(ops["layernorm"], 5);  // 2 blocks x 2, and the final one
  EXPECT_EQ(ops["gelu"], 2);
  EXPECT_EQ(ops["tanh"], 0);
  EXPECT_EQ(ops["mul"], 0);  // GELU's x·x·x and x·(1 + tanh) are gone
  EXPECT_EQ(ops["attention"], 2);
  EXPECT_EQ(ops["batched_matmul"] + ops["softmax"] + ops["causal_fill"] + ops["narrow"], 0);
}

// The autoencoder's forms each import as the op made for it (the
// reference tests above check their numbers against PyTorch).
TEST(OnnxForms, TheAutoencodersDivisionsConcatAndMeansImportAsTheirOps) {
  const nn::Model model = nn::import_onnx(
      {.path = std::string(PX_ONNX_FIXTURES) + "/autoencoder.onnx", .loss = "mse"}, 4, true);
  std::map<std::string, int> ops;
  std::vector<int64_t> mean_dims;
  for (const Node& node : model.graph.nodes()) {
    ++ops[node.op()];
    if (node.op() == "reduce_mean") mean_dims.push_back(node.attrs.get_int("dim", -1));
  }
  EXPECT_EQ(ops["div"], 2);        // h / sqrt(...) by rows, u / (1 + u·u) of equal shapes
  EXPECT_EQ(ops["pow"], 2);        // h², and torch's Reciprocal of 1 + u·u (a power -1)
  EXPECT_EQ(ops["fill_like"], 2);  // the zeros and the 0.5s
  EXPECT_EQ(ops["concat"], 1);
  EXPECT_EQ(ops["mse"], 1);
  // mean(h², -1) over the last dim; mean over dims (1, 2) of (N, 2, 2, 6) one dim at a time.
  EXPECT_EQ(mean_dims, (std::vector<int64_t>{-1, 1, 2}));
  EXPECT_EQ(model.logits, kNoValue);  // a regression: no class scores
}

// The regression's RMS norm multiplies by a factor per row and by its
// weight along the last dim, its Concat joins a repeated row of constants,
// and its labels are cast to float for the mean over every element the
// graph writes as its loss.
TEST(OnnxForms, TheRegressionsNormConstantsCastAndMeanImportAsTheirOps) {
  const nn::Model model = nn::import_onnx({.path = std::string(PX_ONNX_FIXTURES) + "/regression.onnx"}, 4, true);
  std::map<std::string, int> ops;
  std::vector<Shape> factors;
  for (const Node& node : model.graph.nodes()) {
    ++ops[node.op()];
    if (node.op() == "mul") factors.push_back(model.graph.spec(node.inputs[1]).shape);
    if (node.op() == "fill_like") {
      EXPECT_EQ(node.attrs.get_floats("values"), (std::vector<double>{0.25, -0.5, 1, 2}));
    }
  }
  EXPECT_EQ(factors, (std::vector<Shape>{Shape({4, 1}), Shape({32})}));
  EXPECT_EQ(ops["fill_like"], 1);
  EXPECT_EQ(ops["to_f32"], 1);
  EXPECT_EQ(ops["sum_leading"], 1);  // the mean over every element, the loss
  EXPECT_EQ(model.graph.spec(model.loss).shape, Shape({}));
}

}  // namespace
}  // namespace px
