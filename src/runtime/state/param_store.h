// ParamStore: the model's parameters by name (GPT-2 checkpoint names), in
// the order the graph declares them. Graphs of any batch size bind the same
// tensors by name.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"
#include "graph/graph.h"
#include "runtime/state/safetensors.h"

namespace px {

class ParamStore {
 public:
  // Draws every parameter of `graph` from its ParamInit with one Rng(seed),
  // in declaration order.
  static ParamStore initialize(const Graph& graph, uint64_t seed);
  // A store over existing tensors (views or not), in the given order.
  static ParamStore of(NamedTensors tensors);

  bool has(const std::string& name) const;
  Tensor& at(const std::string& name);
  const Tensor& at(const std::string& name) const;
  const std::vector<std::string>& names() const { return names_; }
  int64_t count() const;  // number of scalars

  // bound[id] = tensor for each param of `graph` (px::Error if one is missing).
  void bind(const Graph& graph, std::vector<Tensor>& bound) const;
  NamedTensors named() const;
  // Replaces values from a checkpoint. Every parameter must be present with
  // this store's shape; errors name the tensor, both shapes and the source.
  void load(const SafetensorsFile& file);

 private:
  std::vector<std::string> names_;
  std::vector<Tensor> tensors_;
};

}  // namespace px
