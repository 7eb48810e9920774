#include "nn/mlp.h"

#include <cmath>

#include "nn/layers.h"

namespace px::nn {

void validate(const MlpConfig& config) {
  if (config.inputs <= 0 || config.classes <= 1)
    fail("mlp: inputs={} and classes={} must be positive (classes >= 2)", config.inputs, config.classes);
  for (int64_t h : config.hidden)
    if (h <= 0) fail("mlp: hidden layer width {} must be positive", h);
}

Model build_mlp(const MlpConfig& config, int64_t batch) {
  validate(config);
  Model m;
  Graph& g = m.graph;
  m.inputs = g.input("images", {Shape{batch, 1, 28, 28}});
  m.targets = g.input("labels", {Shape{batch}, DType::i32});
  ValueId h = g.add1("reshape", {m.inputs}, {{"shape", std::vector<int64_t>{-1, config.inputs}}}, "flatten");
  int64_t width = config.inputs;
  int index = 1;
  for (int64_t next : config.hidden) {
    h = g.add1("relu", {torch_linear(g, fmt::format("fc{}", index++), h, width, next)});
    width = next;
  }
  m.logits = torch_linear(g, fmt::format("fc{}", index), h, width, config.classes);
  m.loss = classification_loss(g, m.logits, m.targets, batch);
  return m;
}

}  // namespace px::nn
