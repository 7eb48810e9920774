#include "graph/precision.h"

#include <algorithm>
#include <string>
#include <utility>

#include "core/error.h"

namespace px {
namespace {
constexpr const char* kAttr = "precision";
constexpr const char* kStoreAttr = "store";
}

Precision parse_precision(std::string_view word) {
  if (word == "fp32") return Precision::fp32;
  if (word == "bf16") return Precision::bf16;
  fail("unknown precision '{}': expected fp32 or bf16", word);
}

std::string_view precision_name(Precision precision) {
  return precision == Precision::bf16 ? "bf16" : "fp32";
}

void set_precision(Graph& graph, Precision precision) {
  for (size_t n = 0; n < graph.nodes().size(); ++n) {
    if (!graph.nodes()[n].def->mixed_precision) continue;
    if (precision == Precision::fp32) graph.erase_attr(static_cast<int>(n), kAttr);
    else graph.set_attr(static_cast<int>(n), kAttr, std::string(precision_name(precision)));
  }
}

void inherit_precision(Graph& graph, int first, int origin) {
  const Precision precision = precision_of(graph.nodes().at(static_cast<size_t>(origin)).attrs);
  if (precision == Precision::fp32) return;
  for (size_t n = static_cast<size_t>(first); n < graph.nodes().size(); ++n)
    if (graph.nodes()[n].def->mixed_precision && !graph.nodes()[n].attrs.has(kAttr))
      graph.set_attr(static_cast<int>(n), kAttr, std::string(precision_name(precision)));
}

bool reads_at_bf16(const Node& node, size_t position) {
  const std::vector<int>& takes = node.def->bf16_inputs;
  return precision_of(node.attrs) == Precision::bf16 &&
         std::find(takes.begin(), takes.end(), static_cast<int>(position)) != takes.end();
}

std::vector<bool> read_only_at_bf16(const Graph& graph) {
  std::vector<bool> only(graph.values().size(), true), read(graph.values().size(), false);
  for (const Node& node : graph.nodes())
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const auto v = static_cast<size_t>(node.inputs[i]);
      read[v] = true;
      if (!reads_at_bf16(node, i)) only[v] = false;
    }
  for (const auto& [name, v] : graph.outputs()) only[static_cast<size_t>(v)] = false;
  for (size_t v = 0; v < only.size(); ++v) only[v] = only[v] && read[v];
  return only;
}

int store_gemm_operands_in_bf16(Graph& graph) {
  const std::vector<Node>& nodes = graph.nodes();
  // Which values qualify, decided on the graph as it stands (inserting
  // casts changes no reader's verdict: a cast reads fp32 and is read only
  // where its value was).
  std::vector<bool> bf16_only = read_only_at_bf16(graph);
  for (size_t v = 0; v < bf16_only.size(); ++v) {
    const Value& value = graph.values()[v];
    bf16_only[v] = bf16_only[v] && value.kind == Value::Kind::activation && value.spec.dtype == DType::f32 &&
                   nodes[static_cast<size_t>(value.producer)].origin < 0;
  }
  int inserted = 0;
  for (size_t v = 0; v < bf16_only.size(); ++v) {
    if (!bf16_only[v]) continue;
    const auto value = static_cast<ValueId>(v);
    const int producer = graph.value(value).producer;
    if (graph.nodes()[static_cast<size_t>(producer)].def->stores_bf16 && graph.value(value).output_index == 0) {
      // The stamp and the dtype together: the shape rule reads the stamp,
      // so re-inferring the node (a later copy of the graph) agrees.
      graph.set_attr(producer, kStoreAttr, std::string("bf16"));
      graph.set_dtype(value, DType::bf16);
      continue;
    }
    const ValueId stored = graph.insert_after(producer, "to_bf16", {value}, {}, graph.value(value).name + ".bf16")
                               .front();
    for (size_t n = static_cast<size_t>(producer) + 2; n < graph.nodes().size(); ++n)
      for (size_t i = 0; i < graph.nodes()[n].inputs.size(); ++i)
        if (graph.nodes()[n].inputs[i] == value) graph.set_input(static_cast<int>(n), i, stored);
    ++inserted;
  }
  return inserted;
}

namespace {

// The (node, input) pairs that read `value` at a bf16 position, in node order.
std::vector<std::pair<int, size_t>> bf16_readers_of(const Graph& graph, ValueId value) {
  std::vector<std::pair<int, size_t>> readers;
  for (size_t n = 0; n < graph.nodes().size(); ++n) {
    const Node& node = graph.nodes()[n];
    for (size_t i = 0; i < node.inputs.size(); ++i)
      if (node.inputs[i] == value && reads_at_bf16(node, i)) readers.emplace_back(static_cast<int>(n), i);
  }
  return readers;
}

}  // namespace

int round_shared_gradients_once(Graph& graph) {
  std::vector<int> read_at_bf16(graph.values().size(), 0);
  for (const Node& node : graph.nodes())
    for (size_t i = 0; i < node.inputs.size(); ++i)
      if (reads_at_bf16(node, i)) ++read_at_bf16[static_cast<size_t>(node.inputs[i])];
  std::vector<ValueId> shared;
  for (size_t v = 0; v < read_at_bf16.size(); ++v) {
    const Value& value = graph.values()[v];
    if (read_at_bf16[v] >= 2 && value.kind == Value::Kind::activation && value.spec.dtype == DType::f32 &&
        value.producer >= 0 && graph.nodes()[static_cast<size_t>(value.producer)].origin >= 0)
      shared.push_back(static_cast<ValueId>(v));
  }
  for (ValueId fp32 : shared) {
    // Found again on the graph as it now stands: earlier casts moved nodes.
    const std::vector<std::pair<int, size_t>> readers = bf16_readers_of(graph, fp32);
    const std::string name = graph.value(fp32).name + ".bf16";
    const ValueId copy = graph.insert_before(readers.front().first, "to_bf16", {fp32}, {}, name).front();
    for (const auto& [reader, input] : readers) graph.set_input(reader + 1, input, copy);
  }
  return static_cast<int>(shared.size());
}

FusedBiases fuse_bias_into_gemms(Graph& graph) {
  FusedBiases result;
  result.new_id.resize(graph.values().size());
  for (size_t v = 0; v < result.new_id.size(); ++v) result.new_id[v] = static_cast<ValueId>(v);
  // The bf16 forward linear whose output only this forward bias add reads,
  // as its x; -1 if none.
  auto fusable = [&graph](const Node& bias_add) -> int {
    if (bias_add.op() != "bias_add" || bias_add.origin >= 0) return -1;
    const ValueId y = bias_add.inputs[0];
    const int producer = graph.value(y).producer;
    if (producer < 0) return -1;
    const Node& linear = graph.nodes()[static_cast<size_t>(producer)];
    if (linear.op() != "linear" || linear.origin >= 0 || precision_of(linear.attrs) != Precision::bf16) return -1;
    for (const auto& [name, v] : graph.outputs())
      if (v == y) return -1;
    int readers = 0;
    for (const Node& node : graph.nodes())
      for (ValueId v : node.inputs) readers += v == y;
    return readers == 1 ? producer : -1;
  };
  for (size_t n = 0; n < graph.nodes().size(); ++n) {
    const int linear = fusable(graph.nodes()[n]);
    if (linear < 0) continue;
    const Node& l = graph.nodes()[static_cast<size_t>(linear)];
    Attrs attrs = l.attrs;
    if (stores_in_bf16(graph.nodes()[n].attrs)) attrs.set(kStoreAttr, std::string("bf16"));
    const std::vector<ValueId> inputs = {l.inputs[0], l.inputs[1], graph.nodes()[n].inputs[1]};
    const std::string name = l.name;
    graph.replace(static_cast<int>(n), "linear_bias", inputs, attrs, name);
    const std::vector<ValueId> moved = graph.erase(linear, static_cast<int>(n));
    for (ValueId& id : result.new_id)
      if (id != kNoValue) id = moved[static_cast<size_t>(id)];
    ++result.fused;
    --n;  // the fused node now sits one place up
  }
  return result;
}

FusedBiases fuse_bias_gradients_into_gelu_grad(Graph& graph) {
  FusedBiases result;
  result.new_id.resize(graph.values().size());
  for (size_t v = 0; v < result.new_id.size(); ++v) result.new_id[v] = static_cast<ValueId>(v);
  auto follow = [&result](const std::vector<ValueId>& moved) {
    for (ValueId& id : result.new_id)
      if (id != kNoValue) id = moved[static_cast<size_t>(id)];
  };
  for (size_t n = 0; n < graph.nodes().size(); ++n) {
    const Node& gelu_grad = graph.nodes()[n];
    if (gelu_grad.op() != "gelu_grad" || precision_of(gelu_grad.attrs) != Precision::bf16) continue;
    const ValueId dx = gelu_grad.outputs[0];
    int cast = -1, sum = -1, others = 0;
    for (size_t r = n + 1; r < graph.nodes().size(); ++r) {
      const Node& reader = graph.nodes()[r];
      for (ValueId v : reader.inputs) {
        if (v != dx) continue;
        const bool whole_sum = reader.op() == "sum_leading" && reader.attrs.has("keep") &&
                               reader.attrs.get_int("keep") == 1 &&
                               graph.spec(reader.outputs[0]).shape == Shape({graph.spec(dx).shape[-1]});
        if (reader.op() == "to_bf16" && cast < 0) cast = static_cast<int>(r);
        else if (whole_sum && sum < 0) sum = static_cast<int>(r);
        else ++others;
      }
    }
    for (const auto& [name, v] : graph.outputs()) others += v == dx;
    if (cast < 0 || sum < 0 || others > 0) continue;
    const ValueId copy = graph.nodes()[static_cast<size_t>(cast)].outputs[0];
    const ValueId db = graph.nodes()[static_cast<size_t>(sum)].outputs[0];
    Attrs attrs = gelu_grad.attrs;
    attrs.set(kStoreAttr, std::string("bf16"));
    const std::vector<ValueId> inputs = gelu_grad.inputs;
    graph.set_dtype(dx, DType::bf16);
    const std::vector<ValueId> outputs =
        graph.replace(static_cast<int>(n), "gelu_grad_bias", inputs, attrs, gelu_grad.name, {graph.value(db).name});
    for (size_t r = n + 1; r < graph.nodes().size(); ++r)
      for (size_t i = 0; i < graph.nodes()[r].inputs.size(); ++i) {
        const ValueId v = graph.nodes()[r].inputs[i];
        if (v == copy) graph.set_input(static_cast<int>(r), i, dx);
        if (v == db) graph.set_input(static_cast<int>(r), i, outputs[1]);
      }
    for (ValueId& id : result.new_id) {  // by current id: earlier fusions moved values
      if (id == db) id = outputs[1];
      if (id == copy) id = dx;
    }
    // The cast and the sum go, the later first (so the earlier keeps its index).
    const int later = std::max(cast, sum), earlier = std::min(cast, sum);
    follow(graph.erase(later, -1));
    follow(graph.erase(earlier, -1));
    result.fused += 2;
  }
  return result;
}

bool stores_in_bf16(const Attrs& attrs) {
  return attrs.has(kStoreAttr) && attrs.get_string(kStoreAttr) == "bf16";
}

Precision precision_of(const Attrs& attrs) {
  return attrs.has(kAttr) ? parse_precision(attrs.get_string(kAttr)) : Precision::fp32;
}

}  // namespace px
