// What names an ONNX model and binds its inputs: plain C++, built with or
// without libonnx (-DPX_ONNX=OFF keeps these and refuses the model itself:
// unavailable.cc).
#include "core/error.h"
#include "nn/onnx/onnx_import.h"

namespace px::nn {

bool is_onnx_path(const std::string& model) {
  return model.size() > 5 && model.compare(model.size() - 5, 5, ".onnx") == 0;
}

InputRole input_role(const std::string& name) {
  for (InputRole r : {InputRole::images, InputRole::tokens, InputRole::labels, InputRole::targets})
    if (name == input_role_name(r)) return r;
  fail("input role '{}' is unknown: expected images, tokens, labels or targets", name);
}

const char* input_role_name(InputRole role) {
  switch (role) {
    case InputRole::images: return "images";
    case InputRole::tokens: return "tokens";
    case InputRole::labels: return "labels";
    case InputRole::targets: return "targets";
  }
  return "?";
}

InputBinding parse_input_binding(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    fail("--input '{}': expected NAME=ROLE (ROLE: images, tokens, labels or targets)", text);
  return {.input = text.substr(0, eq), .role = input_role(text.substr(eq + 1))};
}

}  // namespace px::nn
