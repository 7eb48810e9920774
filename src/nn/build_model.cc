#include "nn/build_model.h"

#include "core/error.h"

namespace px::nn {

Model build_model(const ModelConfig& c, int64_t batch, bool training) {
  if (c.kind == "gpt") return build_gpt(c.gpt, batch, c.gpt.block, training);
  if (c.kind == "mlp") return build_mlp(c.mlp, batch);
  if (c.kind == "cnn") return build_cnn(c.cnn, batch);
  if (is_onnx_path(c.kind)) {
    OnnxConfig onnx = c.onnx;
    onnx.path = c.kind;
    return import_onnx(onnx, batch, training);
  }
  fail("model '{}' is unknown: expected mlp, cnn, gpt or a FILE.onnx", c.kind);
}

void validate(const ModelConfig& c) {
  const bool onnx = is_onnx_path(c.kind);
  if (c.kind != "mlp" && c.kind != "cnn" && c.kind != "gpt" && !onnx)
    fail("model '{}' is unknown: expected mlp, cnn, gpt or a FILE.onnx", c.kind);
  if (onnx) require_onnx(fmt::format("model '{}'", c.kind));
  if (!onnx && (!c.onnx.loss.empty() || !c.onnx.bindings.empty()))
    fail("--loss and --input bind an imported model's outputs and inputs: give --model FILE.onnx");
  if (c.kind == "gpt") validate(c.gpt);
  if (c.kind == "mlp") validate(c.mlp);
  if (c.kind == "cnn") validate(c.cnn);
}

}  // namespace px::nn
