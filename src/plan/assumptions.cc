#include "plan/assumptions.h"

#include <fmt/format.h>

#include "comm/tuning/benchmark.h"
#include "graph/op.h"

namespace px::plan {
namespace {

bool is_attention(std::string_view op) {
  return op == "attention" || op == "attention_grad" || op == "block_attention" || op == "block_attention_grad";
}

// FLOP/s or bytes/s with an SI prefix: "312 TFLOP/s", "240 GB/s".
std::string rate(double value, const char* unit) {
  const char* prefixes[] = {"", "k", "M", "G", "T", "P"};
  int i = 0;
  while (value >= 1000 && i < 5) {
    value /= 1000;
    ++i;
  }
  return fmt::format("{:.3g} {}{}", value, prefixes[i], unit);
}

std::string duration(double seconds) {
  return seconds >= 1 ? fmt::format("{:.3g} s", seconds) : seconds >= 1e-3 ? fmt::format("{:.3g} ms", seconds * 1e3)
                                                                           : fmt::format("{:.3g} us", seconds * 1e6);
}

}  // namespace

void consider_compute(Assumptions& assumed, const Graph& graph, const Node& node, double flops, double seconds,
                      double peak) {
  const std::string_view op = node.op();
  const bool attention = is_attention(op);
  if (!attention && !node.def->bf16_gemm) return;
  std::optional<AssumedPiece>& held = attention ? assumed.attention : assumed.gemm;
  if (held && held->work >= flops) return;
  const GemmTiles tiles = gemm_tiles(graph, node);
  std::string shape;
  if (attention) {
    // Its first input is (B, T, ...): qkv, a block's query, the gradient.
    const Shape& first = graph.spec(node.inputs.front()).shape;
    if (first.rank() >= 2) shape = fmt::format("{} rows of {} tokens", first[0], first[1]);
  } else if (tiles.m > 0) {
    shape = fmt::format("{:.0f} x {:.0f} x {:.0f}", tiles.m, tiles.n, flops / (2 * tiles.m * tiles.n * tiles.batch));
  }
  held = AssumedPiece{.name = fmt::format("{} ({})", node.name, op), .shape = std::move(shape), .work = flops,
                      .seconds = seconds, .peak = peak};
}

void consider_collective(Assumptions& assumed, const CostEstimator& estimator, comm::Collective kind, double bytes,
                         int ranks, LinkClass link, int ranks_per_node, double link_bandwidth) {
  if (ranks <= 1) return;
  const double bus = bytes * comm::bus_factor(kind, ranks);  // nccl-tests' bus bytes
  if (assumed.collective && assumed.collective->work >= bus) return;
  assumed.collective = AssumedPiece{.name = fmt::format("{} over {} ranks", comm::collective_name(kind), ranks),
                                    .shape = fmt::format("{:.3g} MB on {}", bytes / 1e6, link_class_name(link)),
                                    .work = bus,
                                    .seconds = estimator.collective_seconds(kind, bytes, ranks, link, ranks_per_node),
                                    .peak = link_bandwidth,
                                    .collective = true};
}

std::string describe(const Assumptions& assumed, const std::string& indent) {
  std::string out;
  auto line = [&](const char* label, const std::optional<AssumedPiece>& piece) {
    if (!piece) return;
    const char* unit = piece->collective ? "B/s" : "FLOP/s";
    out += fmt::format("{}{:<10} {}, {}: {} at {}{} = {:.0f}% of the {} {}\n", indent, label, piece->name,
                       piece->shape, duration(piece->seconds), rate(piece->achieved(), unit),
                       piece->collective ? " bus bandwidth" : "", 100 * piece->fraction(), rate(piece->peak, unit),
                       piece->collective ? "link" : "peak");
  };
  line("GEMM", assumed.gemm);
  line("attention", assumed.attention);
  line("collective", assumed.collective);
  return out;
}

}  // namespace px::plan
