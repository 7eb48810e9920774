// Generic finite-difference gradient check: for every registered op with a
// backward rule and each of its examples, the gradient the backward graph
// computes for L = sum_i <dy_i, out_i(x)> matches central differences of L
// along random directions, input by input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "graph/executor.h"
#include "graph/graph.h"
#include "op_harness.h"

namespace px {
namespace {

using testing::random_inputs;
using testing::run_op;

constexpr uint64_t kGradientCheckSeed = 1234;

double objective(const OpDef& def, const OpExample& ex, const std::vector<Tensor>& inputs,
                 const std::vector<Tensor>& dys) {
  auto outs = run_op(def, ex.attrs, inputs, {.seed = kGradientCheckSeed});
  double total = 0;
  // An infinite output is a constant (the log-sum-exp of no scores,
  // block_attention's lse where a row sees no key): no part of the sum.
  for (size_t i = 0; i < dys.size(); ++i)
    for (int64_t j = 0; j < dys[i].numel(); ++j)
      if (std::isfinite(outs[i].f32()[j])) total += double(dys[i].f32()[j]) * outs[i].f32()[j];
  return total;
}

void check_op(const OpDef& def) {
  Rng rng(7);
  for (const OpExample& ex : def.examples()) {
    SCOPED_TRACE(def.name + " " + ex.attrs.str());
    std::vector<Tensor> inputs = random_inputs(ex, rng);

    Graph g;
    std::vector<ValueId> in_ids;
    for (size_t i = 0; i < ex.inputs.size(); ++i) in_ids.push_back(g.input(fmt::format("x{}", i), ex.inputs[i]));
    auto outs = g.add(def.name, in_ids, ex.attrs, "op");
    std::vector<ValueId> dy_ids;
    std::vector<Tensor> dys;
    for (int i = 0; i < def.differentiable_outputs; ++i) {
      dy_ids.push_back(g.input(fmt::format("dy{}", i), g.spec(outs[i])));
      Tensor dy = Tensor::empty(g.spec(outs[i]).shape);
      for (int64_t j = 0; j < dy.numel(); ++j) dy.f32()[j] = static_cast<float>(rng.normal());
      dys.push_back(dy);
    }
    Node node = g.nodes().back();
    std::vector<ValueId> grads = def.backward(g, node, dy_ids);
    ASSERT_EQ(grads.size(), in_ids.size());

    std::vector<ValueId> wanted;
    for (ValueId id : grads)
      if (id != kNoValue) wanted.push_back(id);
    ASSERT_FALSE(wanted.empty()) << "backward returned no gradients";
    std::vector<Tensor> bound(g.values().size());
    for (size_t i = 0; i < in_ids.size(); ++i) bound[in_ids[i]] = inputs[i];
    for (size_t i = 0; i < dy_ids.size(); ++i) bound[dy_ids[i]] = dys[i];
    Executor exec(g, wanted);
    std::vector<Tensor> analytic = exec.run(bound, {.seed = kGradientCheckSeed});

    size_t next = 0;
    for (size_t i = 0; i < in_ids.size(); ++i) {
      if (grads[i] == kNoValue) {
        const bool constant = std::find(def.constant_inputs.begin(), def.constant_inputs.end(),
                                        static_cast<int>(i)) != def.constant_inputs.end();
        EXPECT_TRUE(ex.inputs[i].dtype != DType::f32 || constant) << "float input " << i << " got no gradient";
        continue;
      }
      const Tensor& grad = analytic[next++];
      ASSERT_EQ(grad.shape(), inputs[i].shape());
      for (int trial = 0; trial < 3; ++trial) {
        Tensor v = Tensor::empty(inputs[i].shape());
        for (int64_t j = 0; j < v.numel(); ++j) v.f32()[j] = static_cast<float>(rng.normal());
        auto shifted = [&](float step) {
          std::vector<Tensor> x = inputs;
          x[i] = inputs[i].clone();
          for (int64_t j = 0; j < v.numel(); ++j) x[i].f32()[j] += step * v.f32()[j];
          return objective(def, ex, x, dys);
        };
        double exact = 0;
        for (int64_t j = 0; j < v.numel(); ++j) exact += double(grad.f32()[j]) * v.f32()[j];
        // Piecewise ops (relu, max-pool) have kinks: a difference that straddles one is
        // wrong, so a direction passes when any of three step sizes agrees.
        double numeric = 0;
        for (float eps : {1e-2f, 1e-3f, 1e-4f}) {
          numeric = (shifted(eps) - shifted(-eps)) / (2 * eps);
          if (std::abs(exact - numeric) <= 2e-2 * std::max(1.0, std::abs(numeric))) break;
        }
        EXPECT_NEAR(exact, numeric, 2e-2 * std::max(1.0, std::abs(numeric)))
            << "input " << i << " direction " << trial;
      }
    }
  }
}

TEST(GradientCheck, EveryDifferentiableOpMatchesFiniteDifferences) {
  int checked = 0;
  for (const auto& name : OpRegistry::instance().names()) {
    const OpDef& def = OpRegistry::instance().get(name);
    if (!def.backward) continue;
    check_op(def);
    ++checked;
  }
  // linear, matmul, add, broadcast_add, sum_leading, relu, gelu, layernorm, attention,
  // embedding, cross_entropy, conv2d, maxpool2d, dropout, reshape
  EXPECT_GE(checked, 15);
}

TEST(GradientCheck, EveryOpHasExamplesAndSignatures) {
  for (const auto& name : OpRegistry::instance().names()) {
    const OpDef& def = OpRegistry::instance().get(name);
    ASSERT_TRUE(static_cast<bool>(def.examples)) << name;
    ASSERT_TRUE(static_cast<bool>(def.signatures)) << name;
    ASSERT_FALSE(def.examples().empty()) << name;
    for (const auto& ex : def.examples()) {
      auto out_specs = def.infer(ex.inputs, ex.attrs);
      for (const auto& sig : def.signatures(ex.inputs, ex.attrs)) {
        EXPECT_EQ(sig.inputs.size(), ex.inputs.size()) << name << " " << sig.str();
        EXPECT_EQ(sig.outputs.size(), out_specs.size()) << name << " " << sig.str();
      }
    }
  }
}

}  // namespace
}  // namespace px
