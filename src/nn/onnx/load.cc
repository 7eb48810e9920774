#include "nn/onnx/load.h"

#include <fstream>
#include <sstream>

#include <onnx/checker.h>

#include "core/error.h"
#include "nn/onnx/convert.h"
#include "nn/onnx/fuse.h"
#include "nn/onnx/onnx_import.h"
#include "nn/onnx/tensors.h"

namespace px::nn {
namespace {

// The checker's messages span lines ("...\n\n==> Context: ..."): one line.
std::string one_line(std::string text) {
  for (char& c : text)
    if (c == '\n' || c == '\r') c = ' ';
  std::string out;
  for (char c : text)
    if (!(c == ' ' && !out.empty() && out.back() == ' ')) out += c;
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

::onnx::ModelProto parse(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("onnx: cannot open '{}': expected an .onnx file written by torch.onnx.export or alike", path);
  std::stringstream bytes;
  bytes << in.rdbuf();
  const std::string data = bytes.str();
  ::onnx::ModelProto model;
  // ParseFromString fails on a truncated or corrupt message; an empty or
  // graph-less one parses but is no model either.
  if (data.empty() || !model.ParseFromString(data) || !model.has_graph())
    fail("onnx: '{}' ({} bytes) is not a valid ONNX model: the protobuf does not parse (truncated or corrupt file?)",
         path, data.size());
  return model;
}

void check_opset(const std::string& path, const ::onnx::ModelProto& model) {
  bool found = false;
  for (const auto& opset : model.opset_import()) {
    if (opset.domain().empty() || opset.domain() == "ai.onnx") {
      found = true;
      if (opset.version() < kMinOpset || opset.version() > kMaxOpset)
        fail("onnx: '{}' uses opset {}; parallax reads opsets {} to {} (export with "
             "torch.onnx.export(..., opset_version=13))",
             path, opset.version(), kMinOpset, kMaxOpset);
    } else {
      fail("onnx: '{}' imports operator domain '{}' (version {}); parallax reads only the default domain ai.onnx",
           path, opset.domain(), opset.version());
    }
  }
  if (!found) fail("onnx: '{}' imports no ai.onnx opset", path);
}

void check_initializers(const std::string& path, const ::onnx::GraphProto& graph) {
  for (const auto& t : graph.initializer()) {
    try {
      check_tensor_data(t);
    } catch (const Error& e) {
      fail("onnx: '{}': {}", path, e.what());
    }
  }
}

void check_operators(const std::string& path, const ::onnx::GraphProto& graph) {
  const std::vector<std::string> supported = onnx_supported_operators();
  for (const auto& node : graph.node()) {
    if (node.domain() == kFusedDomain) continue;  // made by the fusion pass, converted as such
    if (const std::optional<std::string> why = refused_operator(node.op_type()); why && node.domain().empty())
      fail("onnx: '{}': node '{}' ({}) is {}", path, node.name(), node.op_type(), *why);
    const bool known = std::find(supported.begin(), supported.end(), node.op_type()) != supported.end();
    if (!known || !node.domain().empty())
      fail("onnx: '{}': operator {}{} (node '{}') is not supported; supported: {}", path,
           node.domain().empty() ? "" : node.domain() + ".", node.op_type(), node.name(),
           fmt::join(supported, ", "));
  }
}

}  // namespace

::onnx::ModelProto load_onnx(const std::string& path) {
  ::onnx::ModelProto model = parse(path);
  check_opset(path, model);
  // Sizes first: the checker reads raw data without checking it against the dims.
  check_initializers(path, model.graph());
  try {
    ::onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    fail("onnx: '{}' fails the ONNX checker: {}", path, one_line(e.what()));
  }
  // Fused before the operator check: what a fusion consumes (a LayerNorm
  // written out, GELU's tanh form, attention's parts) is checked as the
  // fused node.
  fuse_subgraphs(*model.mutable_graph());
  check_operators(path, model.graph());
  return model;
}

}  // namespace px::nn
