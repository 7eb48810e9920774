// Pipeline stages (parallel/lower/stages.h) on the GPT: balanced cuts fall
// where only the residual stream crosses, stages cost about the same, a
// backward node runs on its forward origin's stage, the tied wte is shared
// by the first and last stages, and named cuts start where the user says.
#include <gtest/gtest.h>

#include "core/error.h"
#include "graph/autodiff.h"
#include "nn/gpt.h"
#include "parallel/lower/stages.h"

namespace px::parallel {
namespace {

struct Gpt {
  nn::Model model;
  int forward_nodes = 0;
};

// A GPT of `layers` blocks, B=2, T=8, C=32, with its backward appended.
Gpt gpt(int layers) {
  nn::GptConfig config;
  config.n_layer = layers;
  config.n_head = 2;
  config.n_embd = 32;
  config.block = 8;
  Gpt g{nn::build_gpt(config, 2, 8, true), 0};
  g.forward_nodes = static_cast<int>(g.model.graph.nodes().size());
  build_backward(g.model.graph, g.model.loss, g.model.graph.params());
  return g;
}

TEST(Stages, BackwardNodesCarryTheirForwardOrigin) {
  const Gpt g = gpt(2);
  const Graph& graph = g.model.graph;
  for (size_t n = 0; n < graph.nodes().size(); ++n) {
    const int origin = graph.nodes()[n].origin;
    if (static_cast<int>(n) < g.forward_nodes) {
      EXPECT_EQ(origin, -1) << graph.nodes()[n].name;
    } else {
      ASSERT_GE(origin, 0) << graph.nodes()[n].name;
      EXPECT_LT(origin, g.forward_nodes) << graph.nodes()[n].name;
    }
  }
}

TEST(Stages, BalancedCutsLetOnlyTheResidualStreamCross) {
  for (int stages : {2, 3, 4}) {
    const Gpt g = gpt(4);
    const Graph& graph = g.model.graph;
    const StageAssignment a =
        assign_stages(graph, g.forward_nodes, balanced_stage_starts(graph, g.forward_nodes, stages));
    ASSERT_EQ(a.stages, stages);
    for (int s = 1; s < stages; ++s) {  // between or inside transformer blocks
      const std::string& first = graph.nodes()[static_cast<size_t>(a.first_node[static_cast<size_t>(s)])].name;
      EXPECT_EQ(first.rfind("h.", 0), 0u) << stages << " stages: stage " << s << " starts at " << first;
    }
    for (int k = 0; k + 1 < stages; ++k) {
      ASSERT_EQ(a.crossing[static_cast<size_t>(k)].size(), 1u) << stages << " stages, cut " << k;
      EXPECT_EQ(graph.spec(a.crossing[static_cast<size_t>(k)][0]).shape, (Shape{2, 8, 32}));
    }
    // Balanced: no stage costs more than the mean plus one block.
    double total = 0;
    for (double c : a.cost) total += c;
    const double block = total / 5;  // four blocks plus the embedding and the head, roughly
    for (int s = 0; s < stages; ++s) EXPECT_LE(a.cost_of_stage(s), total / stages + block) << stages << " stages";
    // Every backward node with its origin; the tied embedding on the first and last stage.
    for (size_t n = static_cast<size_t>(g.forward_nodes); n < graph.nodes().size(); ++n)
      EXPECT_EQ(a.stage_of_node[n], a.stage_of_node[static_cast<size_t>(graph.nodes()[n].origin)]);
    ASSERT_EQ(a.shared_params.size(), 1u);
    EXPECT_EQ(graph.value(a.shared_params[0].first).name, "wte.weight");
    EXPECT_EQ(a.shared_params[0].second, (std::vector<int>{0, stages - 1}));
  }
}

TEST(Stages, NamedCutsStartTheirLayers) {
  const Gpt g = gpt(4);
  const Graph& graph = g.model.graph;
  const std::vector<int> starts = stage_starts_at(graph, g.forward_nodes, {"h.1", "h.3"});
  ASSERT_EQ(starts.size(), 3u);
  EXPECT_EQ(graph.nodes()[static_cast<size_t>(starts[1])].name.rfind("h.1.", 0), 0u);
  EXPECT_EQ(graph.nodes()[static_cast<size_t>(starts[2])].name.rfind("h.3.", 0), 0u);
  EXPECT_EQ(graph.nodes()[static_cast<size_t>(starts[1]) - 1].name.rfind("h.0.", 0), 0u);
  const StageAssignment a = assign_stages(graph, g.forward_nodes, starts);
  EXPECT_EQ(a.crossing[0].size(), 1u);
  try {
    stage_starts_at(graph, g.forward_nodes, {"h.3", "h.1"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'h.1' does not come after"), std::string::npos) << e.what();
  }
  try {
    stage_starts_at(graph, g.forward_nodes, {"h.9"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no layer 'h.9'"), std::string::npos) << e.what();
  }
}

TEST(Stages, TooManyStagesForTheLayersIsANamedError) {
  const Gpt g = gpt(1);
  try {
    balanced_stage_starts(g.model.graph, g.forward_nodes, 12);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("too few for 12 stages"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace px::parallel
