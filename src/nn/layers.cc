#include "nn/layers.h"

#include <cmath>

namespace px::nn {

namespace {

// x · w + b as two nodes, "<name>" (linear) and "<name>.add_bias"; the
// parameters "<scope>.<name>.weight" (in, out) and ".bias" (out) are added
// in that order (the runtime draws initial values in parameter order).
ValueId linear_with_bias(Graph& g, const std::string& name, ValueId x, int64_t in, int64_t out,
                         ParamInit weight_init, ParamInit bias_init) {
  std::string full = g.scoped(name);
  ValueId w = g.param(full + ".weight", {Shape{in, out}}, weight_init, true);
  ValueId b = g.param(full + ".bias", {Shape{out}}, bias_init, false);
  return g.add1("bias_add", {g.add1("linear", {x, w}, {}, name), b}, {}, name + ".add_bias");
}

}  // namespace

ValueId torch_linear(Graph& g, const std::string& name, ValueId x, int64_t in, int64_t out) {
  double bound = 1.0 / std::sqrt(static_cast<double>(in));
  return linear_with_bias(g, name, x, in, out, {ParamInit::Kind::uniform, bound},
                          {ParamInit::Kind::uniform, bound});
}

ValueId gpt_linear(Graph& g, const std::string& name, ValueId x, int64_t in, int64_t out, double std) {
  return linear_with_bias(g, name, x, in, out, {ParamInit::Kind::normal, std}, {ParamInit::Kind::zeros, 0});
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
