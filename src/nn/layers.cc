#include "nn/layers.h"

#include <cmath>

namespace px::nn {

ValueId torch_linear(Graph& g, const std::string& name, ValueId x, int64_t in, int64_t out) {
  double bound = 1.0 / std::sqrt(static_cast<double>(in));
  std::string full = g.scoped(name);
  ValueId w = g.param(full + ".weight", {Shape{in, out}}, {ParamInit::Kind::uniform, bound}, true);
  ValueId b = g.param(full + ".bias", {Shape{out}}, {ParamInit::Kind::uniform, bound}, false);
  return g.add1("linear", {x, w, b}, {}, name);
}

ValueId gpt_linear(Graph& g, const std::string& name, ValueId x, int64_t in, int64_t out, double std) {
  std::string full = g.scoped(name);
  ValueId w = g.param(full + ".weight", {Shape{in, out}}, {ParamInit::Kind::normal, std}, true);
  ValueId b = g.param(full + ".bias", {Shape{out}}, {ParamInit::Kind::zeros, 0}, false);
  return g.add1("linear", {x, w, b}, {}, name);
}

ValueId layer_norm(Graph& g, const std::string& name, ValueId x, int64_t width) {
  std::string full = g.scoped(name);
  ValueId w = g.param(full + ".weight", {Shape{width}}, {ParamInit::Kind::ones, 0}, false);
  ValueId b = g.param(full + ".bias", {Shape{width}}, {ParamInit::Kind::zeros, 0}, false);
  return g.add1("layernorm", {x, w, b}, {{"eps", 1e-5}}, name);
}

ValueId classification_loss(Graph& g, ValueId logits, ValueId labels, int64_t batch) {
  return g.add1("cross_entropy", {logits, labels}, {{"scale", 1.0 / static_cast<double>(batch)}}, "loss");
}

}  // namespace px::nn
