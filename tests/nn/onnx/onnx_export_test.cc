// Export writes the original graph with trained initializers: importing the
// written file gives back every parameter's trained values, including the
// ones torch had shared through Identity (every LayerNorm's ones), which
// training made differ.
#include <gtest/gtest.h>

#include "core/error.h"
#include "nn/onnx/onnx_import.h"
#include "runtime/tasks/task.h"
#include "testing/scratch_dir.h"

namespace px {
namespace {

const std::string kGpt = std::string(PX_ONNX_FIXTURES) + "/gpt.onnx";

// The fixture's parameters, each moved by its own amount (as training would).
std::map<std::string, Tensor> trained_parameters(const nn::Model& model) {
  std::map<std::string, Tensor> out;
  const ParamStore initial = initial_parameters(model.graph, 0);
  float shift = 0.5f;
  for (const std::string& name : initial.names()) {
    Tensor t = initial.at(name).clone();
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] += shift + 1e-3f * float(i % 7);
    out.emplace(name, t);
    shift += 0.25f;
  }
  return out;
}

TEST(OnnxExport, ReimportingTheWrittenModelGivesTheTrainedParameters) {
  const nn::Model model = nn::import_onnx({.path = kGpt}, 2, false);
  const std::map<std::string, Tensor> trained = trained_parameters(model);
  testing::ScratchDir dir;
  const std::string out = dir.file("trained.onnx");
  nn::export_onnx(kGpt, trained, out);
  const nn::Model back = nn::import_onnx({.path = out}, 2, false);
  const ParamStore loaded = initial_parameters(back.graph, 0);
  ASSERT_EQ(loaded.names().size(), trained.size());
  for (const auto& [name, values] : trained) {
    ASSERT_TRUE(loaded.has(name)) << name;
    const Tensor& got = loaded.at(name);
    ASSERT_EQ(got.shape(), values.shape()) << name;
    for (int64_t i = 0; i < got.numel(); ++i) ASSERT_EQ(got.f32()[i], values.f32()[i]) << name << " [" << i << "]";
  }
  // h.1.ln_1.weight was Identity(h.0.ln_1.weight) in the fixture.
  EXPECT_NE(loaded.at("h.1.ln_1.weight").f32()[0], loaded.at("h.0.ln_1.weight").f32()[0]);
}

TEST(OnnxExport, AParameterTheModelDoesNotHoldIsNamed) {
  testing::ScratchDir dir;
  std::map<std::string, Tensor> parameters{{"fc9.weight", Tensor::zeros(Shape{2, 2})}};
  try {
    nn::export_onnx(kGpt, parameters, dir.file("out.onnx"));
    FAIL() << "exported a parameter the model lacks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parameter 'fc9.weight' is not an initializer"), std::string::npos) << e.what();
  }
}

TEST(OnnxExport, AShapeOtherThanTheInitializersIsNamed) {
  testing::ScratchDir dir;
  std::map<std::string, Tensor> parameters{{"wpe", Tensor::zeros(Shape{3, 3})}};
  try {
    nn::export_onnx(kGpt, parameters, dir.file("out.onnx"));
    FAIL() << "exported a mis-shaped parameter";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'wpe' has shape [3,3]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace px
