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
  std::vector<Graph::Insertion> casts;
  std::vector<ValueId> cast_of;  // by insertion: the value it stores
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
    casts.push_back({.after = producer, .op = "to_bf16", .inputs = {value}, .name = graph.value(value).name + ".bf16"});
    cast_of.push_back(value);
  }
  const std::vector<std::vector<ValueId>> stored = graph.insert_after(casts);
  // Every reader but the cast reads the copy (all come after it: it sits right behind the producer).
  std::vector<ValueId> copy(graph.values().size(), kNoValue);
  for (size_t k = 0; k < casts.size(); ++k) copy[static_cast<size_t>(cast_of[k])] = stored[k].front();
  for (size_t n = 0; n < graph.nodes().size(); ++n) {
    const Node& node = graph.nodes()[n];
    if (node.op() == "to_bf16" && copy[static_cast<size_t>(node.inputs[0])] == node.outputs[0]) continue;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const ValueId to = copy[static_cast<size_t>(graph.nodes()[n].inputs[i])];
      if (to != kNoValue) graph.set_input(static_cast<int>(n), i, to);
    }
  }
  return static_cast<int>(casts.size());
}

int round_shared_gradients_once(Graph& graph) {
  // Each value's readers at bf16 positions, in node order.
  std::vector<std::vector<std::pair<int, size_t>>> readers(graph.values().size());
  for (size_t n = 0; n < graph.nodes().size(); ++n) {
    const Node& node = graph.nodes()[n];
    for (size_t i = 0; i < node.inputs.size(); ++i)
      if (reads_at_bf16(node, i)) readers[static_cast<size_t>(node.inputs[i])].emplace_back(static_cast<int>(n), i);
  }
  std::vector<Graph::Insertion> casts;
  std::vector<ValueId> shared;  // by cast: the gradient it rounds
  for (size_t v = 0; v < readers.size(); ++v) {
    const Value& value = graph.values()[v];
    if (readers[v].size() >= 2 && value.kind == Value::Kind::activation && value.spec.dtype == DType::f32 &&
        value.producer >= 0 && graph.nodes()[static_cast<size_t>(value.producer)].origin >= 0) {
      const int first = readers[v].front().first;
      casts.push_back({.after = first - 1,
                       .op = "to_bf16",
                       .inputs = {static_cast<ValueId>(v)},
                       .name = value.name + ".bf16",
                       .origin_of = first});
      shared.push_back(static_cast<ValueId>(v));
    }
  }
  const std::vector<std::vector<ValueId>> copies = graph.insert_after(casts);
  // The readers moved down by the casts inserted before them; find them again by their inputs.
  std::vector<ValueId> copy_of(graph.values().size(), kNoValue);
  for (size_t k = 0; k < casts.size(); ++k) copy_of[static_cast<size_t>(shared[k])] = copies[k].front();
  for (size_t n = 0; n < graph.nodes().size(); ++n) {
    const Node& node = graph.nodes()[n];
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const ValueId copy = copy_of[static_cast<size_t>(node.inputs[i])];
      if (copy != kNoValue && reads_at_bf16(node, i)) graph.set_input(static_cast<int>(n), i, copy);
    }
  }
  return static_cast<int>(casts.size());
}

FusedBiases fuse_bias_into_gemms(Graph& graph) {
  // Readers of each value, counted once: a fusion leaves every count but
  // the linear's output's as it was (linear_bias reads what the linear and
  // the bias add read; the linear goes), and that output is gone.
  std::vector<int> readers(graph.values().size(), 0);
  for (const Node& node : graph.nodes())
    for (ValueId v : node.inputs) ++readers[static_cast<size_t>(v)];
  for (const auto& [name, v] : graph.outputs()) ++readers[static_cast<size_t>(v)];
  // The bf16 forward linear whose output only this forward bias add reads,
  // as its x; -1 if none.
  auto fusable = [&graph, &readers](const Node& bias_add) -> int {
    if (bias_add.op() != "bias_add" || bias_add.origin >= 0) return -1;
    const ValueId y = bias_add.inputs[0];
    const int producer = graph.value(y).producer;
    if (producer < 0 || readers[static_cast<size_t>(y)] != 1) return -1;
    const Node& linear = graph.nodes()[static_cast<size_t>(producer)];
    if (linear.op() != "linear" || linear.origin >= 0 || precision_of(linear.attrs) != Precision::bf16) return -1;
    return producer;
  };
  // Each bias add becomes linear_bias in place; the linears go together.
  std::vector<Graph::Erasure> linears;
  for (size_t n = 0; n < graph.nodes().size(); ++n) {
    const int linear = fusable(graph.nodes()[n]);
    if (linear < 0) continue;
    const Node& l = graph.nodes()[static_cast<size_t>(linear)];
    Attrs attrs = l.attrs;
    if (stores_in_bf16(graph.nodes()[n].attrs)) attrs.set(kStoreAttr, std::string("bf16"));
    const std::vector<ValueId> inputs = {l.inputs[0], l.inputs[1], graph.nodes()[n].inputs[1]};
    const std::string name = l.name;
    graph.replace(static_cast<int>(n), "linear_bias", inputs, attrs, name);
    linears.push_back({.node = linear, .heir = static_cast<int>(n)});
  }
  return {.fused = static_cast<int>(linears.size()), .new_id = graph.erase(linears)};
}

FusedBiases fuse_bias_gradients_into_gelu_grad(Graph& graph) {
  const size_t value_count = graph.values().size();
  std::vector<ValueId> successor(value_count);  // what replaces each value before the erasure renumbers
  for (size_t v = 0; v < value_count; ++v) successor[v] = static_cast<ValueId>(v);
  std::vector<Graph::Erasure> erased;  // the casts and sums, removed together at the end
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
    successor[static_cast<size_t>(db)] = outputs[1];
    successor[static_cast<size_t>(copy)] = dx;
    erased.push_back({.node = cast});
    erased.push_back({.node = sum});
  }
  const std::vector<ValueId> renumbered = graph.erase(erased);
  FusedBiases result{.fused = static_cast<int>(erased.size())};
  for (ValueId v : successor) result.new_id.push_back(renumbered[static_cast<size_t>(v)]);
  return result;
}

bool stores_in_bf16(const Attrs& attrs) {
  return attrs.has(kStoreAttr) && attrs.get_string(kStoreAttr) == "bf16";
}

Precision precision_of(const Attrs& attrs) {
  return attrs.has(kAttr) ? parse_precision(attrs.get_string(kAttr)) : Precision::fp32;
}

}  // namespace px
