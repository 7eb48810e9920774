#include "nn/cnn.h"

#include <cmath>

#include "nn/layers.h"

namespace px::nn {

void validate(const CnnConfig& c) {
  if (c.channels1 <= 0 || c.channels2 <= 0 || c.hidden <= 0 || c.classes <= 1)
    fail("cnn: channels ({}, {}), hidden {} and classes {} must be positive (classes >= 2)", c.channels1,
         c.channels2, c.hidden, c.classes);
}

static ValueId conv(Graph& g, const std::string& name, ValueId x, int64_t in, int64_t out) {
  double bound = 1.0 / std::sqrt(static_cast<double>(in * 9));
  ValueId w = g.param(name + ".weight", {Shape{out, in, 3, 3}}, {ParamInit::Kind::uniform, bound}, true);
  ValueId b = g.param(name + ".bias", {Shape{out}}, {ParamInit::Kind::uniform, bound}, false);
  return g.add1("conv2d", {x, w, b}, {}, name);
}

Model build_cnn(const CnnConfig& c, int64_t batch) {
  validate(c);
  Model m;
  Graph& g = m.graph;
  m.inputs = g.input("images", {Shape{batch, 1, 28, 28}});  // (N, 1, 28, 28)
  m.targets = g.input("labels", {Shape{batch}, DType::i32});
  Attrs pool{{"k", int64_t{2}}};
  ValueId h = g.add1("maxpool2d", {g.add1("relu", {conv(g, "conv1", m.inputs, 1, c.channels1)})}, pool, "pool1");
  h = g.add1("maxpool2d", {g.add1("relu", {conv(g, "conv2", h, c.channels1, c.channels2)})}, pool, "pool2");
  int64_t flat = c.channels2 * 5 * 5;  // (N, c2, 5, 5)
  h = g.add1("reshape", {h}, {{"shape", std::vector<int64_t>{-1, flat}}}, "flatten");
  h = g.add1("relu", {torch_linear(g, "fc1", h, flat, c.hidden)});
  m.logits = torch_linear(g, "fc2", h, c.hidden, c.classes);
  m.loss = classification_loss(g, m.logits, m.targets, batch);
  return m;
}

}  // namespace px::nn
