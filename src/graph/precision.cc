#include "graph/precision.h"

#include "core/error.h"

namespace px {
namespace {
constexpr const char* kAttr = "precision";
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
  if (precision == Precision::fp32) return;
  for (size_t n = 0; n < graph.nodes().size(); ++n)
    if (graph.nodes()[n].def->mixed_precision)
      graph.set_attr(static_cast<int>(n), kAttr, std::string(precision_name(precision)));
}

void inherit_precision(Graph& graph, int first, int origin) {
  const Precision precision = precision_of(graph.nodes().at(static_cast<size_t>(origin)).attrs);
  if (precision == Precision::fp32) return;
  for (size_t n = static_cast<size_t>(first); n < graph.nodes().size(); ++n)
    if (graph.nodes()[n].def->mixed_precision && !graph.nodes()[n].attrs.has(kAttr))
      graph.set_attr(static_cast<int>(n), kAttr, std::string(precision_name(precision)));
}

Precision precision_of(const Attrs& attrs) {
  return attrs.has(kAttr) ? parse_precision(attrs.get_string(kAttr)) : Precision::fp32;
}

}  // namespace px
