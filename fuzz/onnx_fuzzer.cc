// ONNX models (parallax train --model FILE.onnx): nn::import_onnx parses
// the protobuf, runs the ONNX checker, folds constants and converts every
// node; each failure must be a named px::Error.
#include "fuzz/fuzz_input.h"
#include "nn/onnx/onnx_import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static px::fuzz::MemoryFile file;
  const std::string& path = file.hold(data, size);
  px::fuzz::expect_value_or_named_error([&] { px::nn::import_onnx({.path = path}, 2, true); });
  return 0;
}
