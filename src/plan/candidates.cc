#include "plan/candidates.h"

#include <algorithm>

#include <optional>
#include <set>

#include <fmt/ranges.h>

#include "core/error.h"
#include "parallel/compose.h"
#include "parallel/tensor_parallel.h"

namespace px::plan {
namespace {

// Layers of the model: node scopes "h.<i>" (GPT blocks), else the nodes'
// first name parts (an MLP's fc<i>, a CNN's conv<i>).
int layer_count(const Graph& graph) {
  std::set<std::string> layers;
  for (const Node& n : graph.nodes()) {
    if (n.origin >= 0 || n.name.empty()) continue;
    const std::string head = n.name.substr(0, n.name.find('.'));
    if (head == "h") {
      const size_t second = n.name.find('.', 2);
      layers.insert(n.name.substr(0, second));
    } else {
      layers.insert(head);
    }
  }
  return static_cast<int>(layers.size());
}

}  // namespace

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

std::string describe(const parallel::Strategy& s) {
  const int pp = s.pipeline_ranks(), dp = s.data_ranks(), cp = s.context_ranks(), ep = s.expert_ranks();
  const int tp = s.mesh.ranks() / pp / dp / cp / ep;
  bool sp = false;
  for (const parallel::PlacementSeed& seed : s.seeds)
    sp = sp || (seed.value == "embed" && seed.axis != s.context.axis);  // sequence-parallel seeds
  const std::string context =
      cp > 1 ? fmt::format(" cp={} {}", cp, parallel::context_method_name(s.context.method)) : std::string();
  const std::string experts = ep > 1 ? fmt::format(" ep={}", ep) : std::string();
  std::string text = fmt::format("pp={} dp={}{}{} tp={}{}", pp, dp, experts, context, tp, sp ? " sp" : "");
  if (s.micro_batches > 1) text += fmt::format(" M={}", s.micro_batches);
  if (pp > 1) text += fmt::format(" {}", parallel::pipeline_kind_name(s.pipeline.schedule));
  if (s.zero_stage > 0) text += fmt::format(" zero={}", s.zero_stage);
  if (s.lowering.recompute != parallel::Recompute::none)
    text += fmt::format(" recompute={}", parallel::recompute_name(s.lowering.recompute));
  if (!s.row_shares.empty()) text += fmt::format(" rows={}", fmt::join(s.row_shares, ":"));
  return text;
}

namespace {

// What of the model the grid's options depend on, asked once.
struct ModelTraits {
  int layers = 0;
  bool attention = false;  // selective recompute and context parallelism need attention
  int64_t experts = 0;     // the fewest experts a mixture layer has (0: none): expert parallelism's most ranks
  bool blocks = false;     // full recompute reruns "h.<i>" blocks
  bool splits[2] = {false, false};  // Megatron's rules split it (without, with sequence parallelism)
};

ModelTraits traits_of(const Graph& graph) {
  ModelTraits t{.layers = layer_count(graph)};
  for (const Node& n : graph.nodes()) {
    t.attention = t.attention || n.op() == "attention";
    t.blocks = t.blocks || n.name.rfind("h.", 0) == 0;
    if (n.op() == "moe_linear") {
      const int64_t e = graph.spec(n.inputs[1]).shape[0];
      t.experts = t.experts == 0 ? e : std::min(t.experts, e);
    }
  }
  for (bool sp : {false, true}) {
    try {
      parallel::megatron_seeds(graph, "tp", sp);
      t.splits[sp ? 1 : 0] = true;
    } catch (const Error&) {
      // the model has no layers Megatron's rules split
    }
  }
  return t;
}

// The meshes pp x dp x cp x tp and how each splits: the points' mesh
// fields, the rest left at their defaults.
std::vector<GridPoint> meshes(const ModelTraits& t, const SearchSpace& space) {
  std::vector<GridPoint> out;
  for (int pp : divisors(space.ranks)) {
    if (pp > 1 && (!space.pipeline || t.layers < 2 * pp)) continue;
    for (int tp : divisors(space.ranks / pp)) {
      if (tp > 1 && !space.tensor) continue;
      for (int cp : divisors(space.ranks / pp / tp)) {
        if (cp > 1 && (!space.context || !t.attention)) continue;
        for (int ep : divisors(space.ranks / pp / tp / cp)) {
          if (ep > 1 && (!space.experts || ep > t.experts || cp > 1)) continue;
          // All-to-all scatters heads, which tensor parallelism splits already: not with tp.
          std::vector<parallel::ContextMethod> methods{parallel::ContextMethod::ring};
          if (cp > 1 && tp == 1) methods.push_back(parallel::ContextMethod::all_to_all);
          for (parallel::ContextMethod method : methods)
            for (bool sp : {false, true}) {
              if (sp && (tp == 1 || !space.tensor)) continue;
              if (tp > 1 && !t.splits[sp ? 1 : 0]) continue;
              out.push_back({.pp = pp, .tp = tp, .cp = cp, .ep = ep, .method = method, .sp = sp});
            }
        }
      }
    }
  }
  return out;
}

}  // namespace

std::vector<GridPoint> grid_points(const Graph& graph, const SearchSpace& space) {
  PX_CHECK_GE(space.ranks, 1);
  const ModelTraits t = traits_of(graph);
  std::vector<GridPoint> out;
  for (const GridPoint& mesh : meshes(t, space)) {
    const int dp = space.ranks / mesh.pp / mesh.tp / mesh.cp / mesh.ep;
    const int64_t rows = space.batch / (dp * mesh.ep);  // a data (x expert) rank's rows (the first may hold one more)
    if (rows < 1) continue;
    std::vector<parallel::PipelineKind> kinds{parallel::PipelineKind::one_f_one_b};
    if (mesh.pp > 1 && space.schedules)
      kinds = {parallel::PipelineKind::gpipe, parallel::PipelineKind::one_f_one_b, parallel::PipelineKind::zb_h1};
    for (int m = 1; m <= std::min<int64_t>(rows, space.max_micro_batches); m *= 2) {
      if (mesh.pp == 1 && m > 1) continue;  // accumulation alone only slows a step down
      for (parallel::PipelineKind kind : kinds)
        for (int zero = 0; zero <= (space.zero && dp > 1 && mesh.ep == 1 ? 3 : 0); ++zero) {
          if (zero == 3 && mesh.pp > 1) continue;  // refused with stages (docs/pipeline_parallel.md)
          for (parallel::Recompute r :
               {parallel::Recompute::none, parallel::Recompute::selective, parallel::Recompute::full}) {
            if (r != parallel::Recompute::none && !space.recompute) continue;
            if ((r == parallel::Recompute::selective && !t.attention) || (r == parallel::Recompute::full && !t.blocks))
              continue;
            GridPoint point = mesh;
            point.micro_batches = m;
            point.kind = kind;
            point.zero = zero;
            point.recompute = r;
            out.push_back(point);
          }
        }
    }
  }
  return out;
}

std::optional<parallel::Strategy> grid_strategy(const Graph& graph, const SearchSpace& space, const GridPoint& point) {
  try {
    return parallel::compose({.zero_stage = point.zero,
                              .tensor_parallel = point.tp,
                              .sequence_parallel = point.sp,
                              .pipeline_parallel = point.pp,
                              .context_parallel = point.cp,
                              .expert_parallel = point.ep,
                              .context_method = point.method,
                              .pipeline = {.schedule = point.kind},
                              .recompute = point.recompute,
                              .micro_batches = point.micro_batches,
                              .precision = space.precision},
                             {.graph = &graph, .batch_inputs = space.batch_inputs, .ranks = space.ranks});
  } catch (const Error&) {
    return std::nullopt;
  }
}

std::vector<parallel::Strategy> grid(const Graph& graph, const SearchSpace& space) {
  std::vector<parallel::Strategy> out;
  for (const GridPoint& point : grid_points(graph, space))
    if (std::optional<parallel::Strategy> s = grid_strategy(graph, space, point)) out.push_back(std::move(*s));
  return out;
}

}  // namespace px::plan
