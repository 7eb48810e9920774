// The state of one import: the Graph being built and what every ONNX name
// stands for so far — a graph value (an input, a parameter made from an
// initializer, a node's output) or a constant folded at import (shapes and
// the arithmetic on them, Constant nodes, integer initializers).
#pragma once

#include <map>
#include <set>
#include <string>

#include <onnx/onnx_pb.h>

#include "graph/graph.h"

namespace px::nn {

class ImportContext {
 public:
  ImportContext(Graph& graph, const ::onnx::GraphProto& proto, int64_t batch, bool training);

  Graph& graph() { return graph_; }
  int64_t batch() const { return batch_; }
  bool training() const { return training_; }

  // The name of input `i` of `node`; "" when absent (optional inputs).
  static std::string input(const ::onnx::NodeProto& node, int i);
  // The node's name for the graph (its output's when the node has none).
  static std::string node_name(const ::onnx::NodeProto& node);

  bool defined(const std::string& name) const;
  // Is `name` a constant: folded, or an integer initializer? (A float
  // initializer is a parameter unless a node reads it as a constant.)
  bool is_constant(const std::string& name) const;
  // `name` as a graph value: a float initializer becomes the parameter
  // "<name>" on first use. px::Error naming `node` for a constant or an
  // undefined name.
  ValueId value(const std::string& name, const ::onnx::NodeProto& node);
  // `name` as a constant (a folded value or any initializer's data).
  const Tensor& constant(const std::string& name, const ::onnx::NodeProto& node);
  // The spec of a graph value or constant.
  TensorSpec spec(const std::string& name, const ::onnx::NodeProto& node);

  // Is `name` one of the graph's outputs?
  bool is_graph_output(const std::string& name) const;

  // Is `name` an initializer (of any type), not yet turned into anything?
  bool is_initializer(const std::string& name) const;
  // `alias` names the same initializer data as `name`: torch writes
  // Identity(init) for parameters whose initial values are equal (every
  // LayerNorm's ones); each name still becomes a parameter of its own.
  void alias_initializer(const std::string& alias, const std::string& name);

  void define(const std::string& name, ValueId id);
  void define_constant(const std::string& name, Tensor value);

  // Dropout sites draw independent masks: each takes the next salt.
  int64_t next_salt() { return salt_++; }
  // The scores a SoftmaxCrossEntropyLoss node read: what evaluation's
  // accuracy ranks (kNoValue until one is converted).
  ValueId loss_scores = kNoValue;

 private:
  Graph& graph_;
  int64_t batch_;
  bool training_;
  std::map<std::string, const ::onnx::TensorProto*> initializers_;
  std::map<std::string, ValueId> values_;
  std::map<std::string, Tensor> constants_;
  std::set<std::string> outputs_;
  int64_t salt_ = 0;
};

}  // namespace px::nn
