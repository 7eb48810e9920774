// A build without ONNX (-DPX_ONNX=OFF, no libonnx): an ONNX model is
// refused by name, with what to do about it.
#include "core/error.h"
#include "nn/onnx/onnx_import.h"

namespace px::nn {

bool onnx_available() { return false; }

void require_onnx(const std::string& what) {
  fail("{}: this parallax was built without ONNX support (-DPX_ONNX=OFF); reconfigure with -DPX_ONNX=ON, "
       "which needs libonnx-dev, libprotobuf-dev and protobuf-compiler (scripts/setup.sh installs them)",
       what);
}

std::vector<std::string> onnx_supported_operators() { return {}; }

Model import_onnx(const OnnxConfig& config, int64_t, bool) {
  require_onnx(fmt::format("model '{}'", config.path));
  return {};
}

void export_onnx(const std::string& model_path, const std::map<std::string, Tensor>&, const std::string& out_path) {
  require_onnx(fmt::format("exporting '{}' to '{}'", model_path, out_path));
}

}  // namespace px::nn
