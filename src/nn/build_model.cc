#include "nn/build_model.h"

#include "core/error.h"

namespace px::nn {

Model build_model(const ModelConfig& c, int64_t batch, bool training) {
  if (c.kind == "gpt") return build_gpt(c.gpt, batch, c.gpt.block, training);
  if (c.kind == "mlp") return build_mlp(c.mlp, batch);
  if (c.kind == "cnn") return build_cnn(c.cnn, batch);
  fail("model '{}' is unknown: expected mlp, cnn or gpt", c.kind);
}

}  // namespace px::nn
