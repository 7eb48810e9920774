#include "nn/onnx/fuse.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "nn/onnx/tensors.h"

namespace px::nn {
namespace {

using ::onnx::GraphProto;
using ::onnx::NodeProto;

// Who reads each value and what a Constant node or initializer holds.
class GraphIndex {
 public:
  explicit GraphIndex(const GraphProto& graph) : graph_(graph) {
    for (int i = 0; i < graph.node_size(); ++i)
      for (const std::string& name : graph.node(i).input()) readers_[name].push_back(i);
    for (const auto& out : graph.output()) readers_[out.name()].push_back(-1);  // a graph output is read too
    for (const auto& t : graph.initializer()) initializers_[t.name()] = &t;
    for (int i = 0; i < graph.node_size(); ++i) {
      if (graph.node(i).op_type() == "Constant" && graph.node(i).output_size() == 1)
        constants_[graph.node(i).output(0)] = i;
      for (const std::string& name : graph.node(i).output()) producers_[name] = i;
    }
  }

  // The node making `value`, if it is a `type` node read only once (by the pattern).
  std::optional<int> single_use_producer(const std::string& value, const std::string& type) const {
    auto it = producers_.find(value);
    if (it == producers_.end() || graph_.node(it->second).op_type() != type) return std::nullopt;
    if (readers(value).size() != 1) return std::nullopt;
    return it->second;
  }

  // The only reader of `value`, if it has exactly one and it is a `type` node.
  std::optional<int> only_reader(const std::string& value, const std::string& type) const {
    auto it = readers_.find(value);
    if (it == readers_.end() || it->second.size() != 1 || it->second[0] < 0) return std::nullopt;
    if (graph_.node(it->second[0]).op_type() != type) return std::nullopt;
    return it->second[0];
  }
  const std::vector<int>& readers(const std::string& value) const {
    static const std::vector<int> none;
    auto it = readers_.find(value);
    return it == readers_.end() ? none : it->second;
  }

  // The value of a one-element float constant (Constant node or initializer).
  std::optional<float> scalar(const std::string& name) const {
    const ::onnx::TensorProto* t = nullptr;
    if (auto it = constants_.find(name); it != constants_.end()) {
      const auto* a = find_attribute(graph_.node(it->second), "value");
      if (a != nullptr) t = &a->t();
    } else if (auto init = initializers_.find(name); init != initializers_.end()) {
      t = init->second;
    }
    if (t == nullptr || t->data_type() != ::onnx::TensorProto::FLOAT) return std::nullopt;
    try {
      const Tensor v = to_tensor(*t);
      if (v.numel() != 1) return std::nullopt;
      return v.f32()[0];
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }

  const NodeProto& node(int i) const { return graph_.node(i); }

 private:
  const GraphProto& graph_;
  std::map<std::string, std::vector<int>> readers_;
  std::map<std::string, const ::onnx::TensorProto*> initializers_;
  std::map<std::string, int> constants_;
  std::map<std::string, int> producers_;
};

bool reduces_last_axis(const NodeProto& node) {
  const auto axes = attr_ints(node, "axes");
  return node.input_size() == 1 && axes && *axes == std::vector<int64_t>{-1} && attr_int(node, "keepdims", 1) == 1;
}

// The other input of a two-input node, given one of them.
std::optional<std::string> other_input(const NodeProto& node, const std::string& one) {
  if (node.input_size() != 2) return std::nullopt;
  if (node.input(0) == one) return node.input(1);
  if (node.input(1) == one) return node.input(0);
  return std::nullopt;
}

// A LayerNorm rooted at ReduceMean node `r1`: the fused node and the nodes it replaces.
struct Match {
  NodeProto fused;
  std::vector<int> nodes;
};

std::optional<Match> match_layer_norm(const GraphIndex& ix, int r1) {
  const NodeProto& mean = ix.node(r1);
  if (mean.op_type() != "ReduceMean" || !reduces_last_axis(mean)) return std::nullopt;
  const std::string x = mean.input(0);
  const auto sub = ix.only_reader(mean.output(0), "Sub");
  if (!sub || ix.node(*sub).input(0) != x || ix.node(*sub).input(1) != mean.output(0)) return std::nullopt;
  const std::string d = ix.node(*sub).output(0);
  // d is read twice: squared for the variance, divided for the result.
  std::optional<int> pow, div;
  for (int reader : ix.readers(d)) {
    if (reader >= 0 && ix.node(reader).op_type() == "Pow" && ix.node(reader).input(0) == d) pow = reader;
    else if (reader >= 0 && ix.node(reader).op_type() == "Div" && ix.node(reader).input(0) == d) div = reader;
    else return std::nullopt;
  }
  if (!pow || !div || ix.readers(d).size() != 2 || ix.scalar(ix.node(*pow).input(1)) != 2.0f) return std::nullopt;
  const auto r2 = ix.only_reader(ix.node(*pow).output(0), "ReduceMean");
  if (!r2 || !reduces_last_axis(ix.node(*r2))) return std::nullopt;
  const auto add_eps = ix.only_reader(ix.node(*r2).output(0), "Add");
  if (!add_eps) return std::nullopt;
  const auto eps_name = other_input(ix.node(*add_eps), ix.node(*r2).output(0));
  const std::optional<float> eps = eps_name ? ix.scalar(*eps_name) : std::nullopt;
  const auto sqrt = ix.only_reader(ix.node(*add_eps).output(0), "Sqrt");
  if (!eps || !sqrt || ix.node(*div).input(1) != ix.node(*sqrt).output(0) || ix.readers(ix.node(*sqrt).output(0)).size() != 1)
    return std::nullopt;
  const auto mul = ix.only_reader(ix.node(*div).output(0), "Mul");
  const auto weight = mul ? other_input(ix.node(*mul), ix.node(*div).output(0)) : std::nullopt;
  const auto add = mul ? ix.only_reader(ix.node(*mul).output(0), "Add") : std::nullopt;
  const auto bias = add ? other_input(ix.node(*add), ix.node(*mul).output(0)) : std::nullopt;
  if (!weight || !bias) return std::nullopt;
  Match m;
  m.nodes = {r1, *sub, *pow, *r2, *add_eps, *sqrt, *div, *mul, *add};
  m.fused.set_op_type("LayerNormalization");
  m.fused.set_name(ix.node(*add).name().empty() ? ix.node(*add).output(0) : ix.node(*add).name() + ".layer_norm");
  for (const std::string& in : {x, *weight, *bias}) m.fused.add_input(in);
  m.fused.add_output(ix.node(*add).output(0));
  auto* epsilon = m.fused.add_attribute();
  epsilon->set_name("epsilon");
  epsilon->set_type(::onnx::AttributeProto::FLOAT);
  epsilon->set_f(*eps);
  auto* axis = m.fused.add_attribute();
  axis->set_name("axis");
  axis->set_type(::onnx::AttributeProto::INT);
  axis->set_i(-1);
  return m;
}

bool near(std::optional<float> value, double expected) {
  return value && std::abs(double(*value) - expected) <= 1e-6 * std::abs(expected);
}

// For a two-input node: the input that is not the scalar constant `k`.
std::optional<std::string> times_constant(const GraphIndex& ix, const NodeProto& node, double k) {
  if (node.input_size() != 2) return std::nullopt;
  if (near(ix.scalar(node.input(0)), k)) return node.input(1);
  if (near(ix.scalar(node.input(1)), k)) return node.input(0);
  return std::nullopt;
}

// GELU's tanh form as torch writes it, rooted at its Tanh node `t`:
//   0.5 · (x · (1 + tanh(sqrt(2/pi) · (x + 0.044715 · (x · (x · x))))))
// -> Gelu(x, approximate="tanh") (the ONNX opset-20 operator).
std::optional<Match> match_tanh_gelu(const GraphIndex& ix, int t) {
  if (ix.node(t).op_type() != "Tanh") return std::nullopt;
  const auto m4 = ix.single_use_producer(ix.node(t).input(0), "Mul");
  const auto a1_name = m4 ? times_constant(ix, ix.node(*m4), std::sqrt(2.0 / M_PI)) : std::nullopt;
  const auto a1 = a1_name ? ix.single_use_producer(*a1_name, "Add") : std::nullopt;
  if (!a1) return std::nullopt;
  for (int x_side = 0; x_side < 2; ++x_side) {
    const std::string x = ix.node(*a1).input(x_side);
    const auto m3 = ix.single_use_producer(ix.node(*a1).input(1 - x_side), "Mul");
    const auto m2_name = m3 ? times_constant(ix, ix.node(*m3), 0.044715) : std::nullopt;
    const auto m2 = m2_name ? ix.single_use_producer(*m2_name, "Mul") : std::nullopt;
    const auto m1_name = m2 ? other_input(ix.node(*m2), x) : std::nullopt;
    const auto m1 = m1_name ? ix.single_use_producer(*m1_name, "Mul") : std::nullopt;
    if (!m1 || ix.node(*m1).input(0) != x || ix.node(*m1).input(1) != x) continue;
    const auto a2 = ix.only_reader(ix.node(t).output(0), "Add");
    if (!a2 || !times_constant(ix, ix.node(*a2), 1.0)) return std::nullopt;
    const auto m5 = ix.only_reader(ix.node(*a2).output(0), "Mul");
    if (!m5 || other_input(ix.node(*m5), ix.node(*a2).output(0)) != x) return std::nullopt;
    const auto m6 = ix.only_reader(ix.node(*m5).output(0), "Mul");
    if (!m6 || !times_constant(ix, ix.node(*m6), 0.5)) return std::nullopt;
    Match m;
    m.nodes = {*m1, *m2, *m3, *a1, *m4, t, *a2, *m5, *m6};
    std::sort(m.nodes.begin(), m.nodes.end());
    m.fused.set_op_type("Gelu");
    m.fused.set_name(ix.node(*m6).name().empty() ? ix.node(*m6).output(0) : ix.node(*m6).name() + ".gelu");
    m.fused.add_input(x);
    m.fused.add_output(ix.node(*m6).output(0));
    auto* approximate = m.fused.add_attribute();
    approximate->set_name("approximate");
    approximate->set_type(::onnx::AttributeProto::STRING);
    approximate->set_s("tanh");
    return m;
  }
  return std::nullopt;
}

// The reader of `value` if it is its only one, a `type` node, and (for a
// Transpose) permutes by `perm`.
std::optional<int> only_transpose(const GraphIndex& ix, const std::string& value, const std::vector<int64_t>& perm) {
  const auto t = ix.only_reader(value, "Transpose");
  if (!t || attr_ints(ix.node(*t), "perm") != perm) return std::nullopt;
  return t;
}

// Causal self-attention on a fused q|k|v, rooted at its Split node `s`:
//   q, k, v = Split(qkv (B, T, 3C), axis 2); each Reshape (B, T, H, D) and
//   Transpose to (B, H, T, D) (k to (B, H, D, T)); Softmax(Where(mask, -inf,
//   MatMul(q, k) · scale)) · v, transposed back to (B, T, H, D)
// -> parallax.CausalSelfAttention(qkv, sizes, q/k/v shapes, scale, mask,
//   fill). The shapes and the mask are folded only at import, so the
//   converter checks them (H·D = C, scale = 1/sqrt(D), a causal mask).
std::optional<Match> match_attention(const GraphIndex& ix, int s) {
  const NodeProto& split = ix.node(s);
  if (split.op_type() != "Split" || split.output_size() != 3 || split.input_size() != 2 ||
      (attr_int(split, "axis", 0) != 2 && attr_int(split, "axis", 0) != -1))
    return std::nullopt;
  std::vector<int> reshapes, transposes;
  const std::vector<std::vector<int64_t>> perms{{0, 2, 1, 3}, {0, 2, 3, 1}, {0, 2, 1, 3}};
  for (int i = 0; i < 3; ++i) {
    const auto r = ix.only_reader(split.output(i), "Reshape");
    const auto t = r ? only_transpose(ix, ix.node(*r).output(0), perms[static_cast<size_t>(i)]) : std::nullopt;
    if (!t || ix.node(*r).input(0) != split.output(i)) return std::nullopt;
    reshapes.push_back(*r);
    transposes.push_back(*t);
  }
  const auto scores = ix.only_reader(ix.node(transposes[0]).output(0), "MatMul");
  if (!scores || ix.node(*scores).input(1) != ix.node(transposes[1]).output(0) ||
      ix.readers(ix.node(transposes[1]).output(0)).size() != 1)
    return std::nullopt;
  const auto scaled = ix.only_reader(ix.node(*scores).output(0), "Mul");
  const auto scale = scaled ? other_input(ix.node(*scaled), ix.node(*scores).output(0)) : std::nullopt;
  const auto where = scaled ? ix.only_reader(ix.node(*scaled).output(0), "Where") : std::nullopt;
  if (!scale || !ix.scalar(*scale) || !where || ix.node(*where).input(2) != ix.node(*scaled).output(0)) return std::nullopt;
  const std::optional<float> fill = ix.scalar(ix.node(*where).input(1));
  if (!fill || !std::isinf(*fill) || *fill > 0) return std::nullopt;
  const auto softmax = ix.only_reader(ix.node(*where).output(0), "Softmax");
  if (!softmax || attr_int(ix.node(*softmax), "axis", -1) != -1) return std::nullopt;
  const auto mixed = ix.only_reader(ix.node(*softmax).output(0), "MatMul");
  if (!mixed || ix.node(*mixed).input(1) != ix.node(transposes[2]).output(0) ||
      ix.readers(ix.node(transposes[2]).output(0)).size() != 1)
    return std::nullopt;
  const auto back = only_transpose(ix, ix.node(*mixed).output(0), {0, 2, 1, 3});
  if (!back) return std::nullopt;
  Match m;
  m.nodes = {s, *scores, *scaled, *where, *softmax, *mixed, *back};
  m.nodes.insert(m.nodes.end(), reshapes.begin(), reshapes.end());
  m.nodes.insert(m.nodes.end(), transposes.begin(), transposes.end());
  std::sort(m.nodes.begin(), m.nodes.end());
  if (m.nodes.back() != *back) return std::nullopt;  // the output comes last
  m.fused.set_op_type("CausalSelfAttention");
  m.fused.set_domain(kFusedDomain);
  m.fused.set_name(ix.node(*back).name().empty() ? ix.node(*back).output(0) : ix.node(*back).name() + ".attention");
  for (const std::string& in : {split.input(0), split.input(1), ix.node(reshapes[0]).input(1),
                                ix.node(reshapes[1]).input(1), ix.node(reshapes[2]).input(1), *scale,
                                ix.node(*where).input(0), ix.node(*where).input(1)})
    m.fused.add_input(in);
  m.fused.add_output(ix.node(*back).output(0));
  return m;
}

using Matcher = std::optional<Match> (*)(const GraphIndex&, int);

// Every non-overlapping match of `matcher`, the fused node in the place of
// the pattern's last node (so its inputs are defined before it).
int fuse(GraphProto& graph, Matcher matcher) {
  std::vector<Match> matches;
  {
    const GraphIndex ix(graph);
    std::set<int> taken;
    for (int i = 0; i < graph.node_size(); ++i) {
      auto m = matcher(ix, i);
      if (!m) continue;
      bool overlaps = false;
      for (int n : m->nodes) overlaps = overlaps || taken.count(n) != 0;
      if (overlaps) continue;
      taken.insert(m->nodes.begin(), m->nodes.end());
      matches.push_back(std::move(*m));
    }
  }
  if (matches.empty()) return 0;
  std::map<int, const NodeProto*> replaced_by;
  std::set<int> dropped;
  for (const Match& m : matches) {
    replaced_by[m.nodes.back()] = &m.fused;
    dropped.insert(m.nodes.begin(), m.nodes.end() - 1);
  }
  google::protobuf::RepeatedPtrField<NodeProto> nodes;
  for (int i = 0; i < graph.node_size(); ++i) {
    if (dropped.count(i) != 0) continue;
    auto it = replaced_by.find(i);
    *nodes.Add() = it != replaced_by.end() ? *it->second : graph.node(i);
  }
  graph.mutable_node()->Swap(&nodes);
  return static_cast<int>(matches.size());
}

}  // namespace

int fuse_subgraphs(GraphProto& graph) {
  return fuse(graph, match_layer_norm) + fuse(graph, match_tanh_gelu) + fuse(graph, match_attention);
}

}  // namespace px::nn
