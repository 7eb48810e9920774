// A build without ONNX (-DPX_ONNX=OFF, no libonnx): an ONNX model is
// refused by name, with the flag that enables it, by `train` and by the
// exporter; the parsers of its flags still work. Compiled into this build
// only (tests/runtime/CMakeLists.txt).
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "nn/onnx/onnx_import.h"
#include "testing/expect_train_error.h"

namespace px {
namespace {

const std::string kFixture = std::string(PX_ONNX_FIXTURES) + "/mlp.onnx";

TEST(OnnxDisabled, TheBuildSaysSo) {
  EXPECT_FALSE(nn::onnx_available());
  EXPECT_TRUE(nn::onnx_supported_operators().empty());
}

TEST(OnnxDisabled, TrainingAnOnnxModelNamesTheModelAndTheFlag) {
  JobSpec o;
  o.model.kind = kFixture;
  o.model.onnx.path = kFixture;
  o.run.steps = 1;
  testing::expect_train_error(o, "model '" + kFixture + "': this parallax was built without ONNX support");
  testing::expect_train_error(o, "reconfigure with -DPX_ONNX=ON");
}

TEST(OnnxDisabled, ExportNamesTheFlag) {
  try {
    nn::export_onnx(kFixture, {}, "out.onnx");
    ADD_FAILURE() << "export_onnx without ONNX did not fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("-DPX_ONNX=OFF"), std::string::npos) << e.what();
  }
}

TEST(OnnxDisabled, ItsFlagsStillParse) {
  EXPECT_TRUE(nn::is_onnx_path(kFixture));
  const nn::InputBinding b = nn::parse_input_binding("x=images");
  EXPECT_EQ(b.input, "x");
  EXPECT_EQ(b.role, nn::InputRole::images);
}

}  // namespace
}  // namespace px
