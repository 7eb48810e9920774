#include "parallel/tensor_parallel.h"

#include <cstdio>

#include "core/error.h"

namespace px::parallel {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

std::vector<PlacementSeed> megatron_seeds(const Graph& graph, const std::string& axis, bool sequence_parallel) {
  std::vector<PlacementSeed> seeds;
  auto seed = [&](const std::string& name, Placement p) { seeds.push_back({name, axis, p}); };
  int mlp_layers = 0;
  for (ValueId p : graph.params()) {
    int index = 0;
    char tail = 0;
    if (std::sscanf(graph.value(p).name.c_str(), "fc%d.weigh%c", &index, &tail) == 2 && tail == 't')
      mlp_layers = std::max(mlp_layers, index);
  }
  bool split = false;
  for (ValueId p : graph.params()) {
    const std::string& name = graph.value(p).name;
    if (name == "wte.weight") seed(name, Placement::S(0));
    else if (ends_with(name, ".c_attn.weight")) seed(name, Placement::S(1, 3));
    else if (ends_with(name, ".c_attn.bias")) seed(name, Placement::S(0, 3));
    else if (ends_with(name, ".c_fc.weight")) seed(name, Placement::S(1));
    else if (ends_with(name, ".c_fc.bias")) seed(name, Placement::S(0));
    else if (ends_with(name, ".c_proj.weight")) seed(name, Placement::S(0));
    else {
      int index = 0;
      char kind = 0;
      if (std::sscanf(name.c_str(), "fc%d.%c", &index, &kind) != 2) continue;
      const bool column = index % 2 == 1 && index < mlp_layers, row = index % 2 == 0;
      if (column) seed(name, kind == 'w' ? Placement::S(1) : Placement::S(0));
      else if (row && kind == 'w') seed(name, Placement::S(0));
      else continue;
    }
    split = true;
  }
  if (!split)
    fail("tensor parallelism: the model has no layer parallax knows how to split (GPT blocks' attn/mlp, an MLP's "
         "fc1, fc2, ...); use data parallelism");
  if (sequence_parallel) {
    bool any = false;
    for (const Value& v : graph.values()) {
      if (v.kind != Value::Kind::activation) continue;
      if (v.name == "embed" || ends_with(v.name, ".c_proj.add_bias")) {
        if (v.spec.shape.rank() < 3)
          fail("sequence parallelism splits (batch, sequence, features) activations; '{}' is {}", v.name,
               v.spec.shape);
        seed(v.name, Placement::S(1));
        any = true;
      }
    }
    if (!any) fail("sequence parallelism needs a model with a sequence dim (the GPT); this model has none");
  }
  return seeds;
}

}  // namespace px::parallel
