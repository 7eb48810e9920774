#include <gtest/gtest.h>

#include <cmath>

#include "core/memory.h"
#include "graph/autodiff.h"
#include "graph/executor.h"
#include "graph/graph.h"

namespace px {
namespace {

TEST(Graph, ShapeErrorNamesTheOpNodeAndShapes) {
  Graph g;
  ValueId x = g.input("x", {Shape{4, 3}});
  ValueId w = g.param("w", {Shape{5, 2}}, {}, true);
  try {
    g.add1("linear", {x, w}, {}, "fc1");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("linear"), std::string::npos) << msg;
    EXPECT_NE(msg.find("fc1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[4,3]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[5,2]"), std::string::npos) << msg;
  }
}

TEST(Graph, UnknownOpIsAnError) {
  Graph g;
  EXPECT_THROW(g.add1("no_such_op", {}), Error);
}

TEST(Autodiff, TiedWeightGetsTheSumOfBothUses) {
  // loss = sum(x·w + x·w) over a scalar projection: d/dw = 2 * x^T·1.
  Graph g;
  ValueId x = g.input("x", {Shape{3, 2}});
  ValueId w = g.param("w", {Shape{2, 1}}, {}, true);
  ValueId y1 = g.add1("linear", {x, w});
  ValueId y2 = g.add1("linear", {x, w});
  ValueId s = g.add1("add", {y1, y2});
  ValueId r = g.add1("reshape", {s}, {{"shape", std::vector<int64_t>{-1}}});
  ValueId t = g.input("t", {Shape{3}, DType::i32});
  ValueId two = g.add1("reshape", {r}, {{"shape", std::vector<int64_t>{-1, 1}}});
  ValueId loss = g.add1("cross_entropy", {two, t}, {{"scale", 1.0}});
  Gradients grads = build_backward(g, loss, {w});
  Executor exec(g, {grads.at(w), loss});
  std::vector<Tensor> bound(g.values().size());
  bound[x] = Tensor::from_vector({3, 2}, std::vector<float>{1, 2, 3, 4, 5, 6});
  bound[w] = Tensor::from_vector({2, 1}, std::vector<float>{0.5, -0.5});
  bound[t] = Tensor::from_vector({3}, std::vector<int32_t>{0, 0, 0});
  auto out = exec.run(bound);
  // A single class: the softmax is 1 everywhere, so the loss is 0 and so is its gradient.
  EXPECT_EQ(out[1].f32()[0], 0.0f);
  EXPECT_EQ(out[0].to_vector(), (std::vector<float>{0, 0}));
}

// A zero-input, integer-valued op on the loss path (GPT's positions): the
// graph adds it, autodiff passes it by, and the executor runs it with
// nothing bound for it. loss = CE(table[arange(4)], t): row r of the table's
// gradient is softmax(table[r]) - onehot(t[r]); the unused row 4 gets none.
TEST(Autodiff, GradientFlowsPastAZeroInputIntegerOp) {
  Graph g;
  ValueId table = g.param("table", {Shape{5, 3}}, {}, true);
  ValueId t = g.input("t", {Shape{4}, DType::i32});
  ValueId positions = g.add1("arange", {}, {{"n", int64_t{4}}}, "positions");
  ValueId rows = g.add1("embedding", {positions, table});  // (4, 3)
  ValueId loss = g.add1("cross_entropy", {rows, t}, {{"scale", 1.0}});
  Gradients grads = build_backward(g, loss, {table});
  Executor exec(g, {positions, grads.at(table)});
  std::vector<Tensor> bound(g.values().size());
  std::vector<float> values{0.1f, -1, 2, 0.5f, 0.5f, 0, 3, -2, 1, -0.3f, 0.7f, 0.2f, 9, 9, 9};
  bound[table] = Tensor::from_vector({5, 3}, values);
  bound[t] = Tensor::from_vector({4}, std::vector<int32_t>{2, 0, 1, 1});
  auto out = exec.run(bound);
  auto got = out[0].span<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(got.begin(), got.end()), (std::vector<int32_t>{0, 1, 2, 3}));
  const std::vector<int> target{2, 0, 1, 1};
  for (int r = 0; r < 5; ++r) {
    double total = 0;
    for (int c = 0; c < 3; ++c) total += std::exp(double(values[r * 3 + c]));
    for (int c = 0; c < 3; ++c) {
      double want = r < 4 ? std::exp(double(values[r * 3 + c])) / total - (c == target[r]) : 0.0;
      EXPECT_NEAR(out[1].f32()[r * 3 + c], want, 1e-5) << "row " << r << " column " << c;
    }
  }
}

TEST(Executor, FreesActivationsAfterLastUse) {
  // A chain of 20 relus over 1 MiB tensors: only ~2 are alive at a time.
  Graph g;
  ValueId x = g.input("x", {Shape{256, 1024}});
  ValueId h = x;
  for (int i = 0; i < 20; ++i) h = g.add1("relu", {h});
  Executor exec(g, {h});
  std::vector<Tensor> bound(g.values().size());
  bound[x] = Tensor::full({256, 1024}, 1.0f);
  auto out = exec.run(bound);
  EXPECT_EQ(out[0].f32()[5], 1.0f);
  const int64_t mib = 1 << 20;
  EXPECT_LE(exec.peak_bytes() - memory_stats().live_bytes, 3 * mib);
  EXPECT_GE(exec.peak_bytes(), 2 * mib);
}

TEST(Executor, MissingBindingIsANamedError) {
  Graph g;
  ValueId x = g.input("tokens", {Shape{4}});
  ValueId y = g.add1("relu", {x});
  Executor exec(g, {y});
  std::vector<Tensor> bound(g.values().size());
  try {
    exec.run(bound);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokens"), std::string::npos);
  }
}

}  // namespace
}  // namespace px
