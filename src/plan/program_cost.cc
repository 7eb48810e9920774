#include "plan/program_cost.h"

#include <optional>

#include <fmt/format.h>

#include "core/error.h"
#include "parallel/lower/liveness.h"
#include "parallel/lower/reshard.h"
#include "plan/memory.h"
#include "plan/simulate.h"

namespace px::plan {
namespace {

using parallel::Instr;
using parallel::Program;

// (axis name, kind) of what instruction `i` sends, if anything.
std::optional<std::pair<std::string, std::string>> sent_by(const Program& p, const Instr& instr) {
  const auto axis_name = [&](int axis) { return p.strategy.mesh.axes()[static_cast<size_t>(axis)].name; };
  if (const auto* c = std::get_if<parallel::Collective>(&instr.op))
    return std::pair{axis_name(c->axis), std::string(comm::collective_name(c->kind))};
  if (const auto* rs = std::get_if<parallel::Reshard>(&instr.op)) {
    const std::optional<comm::Collective> kind = parallel::collective_of(parallel::resharding(rs->from, rs->to));
    if (kind) return std::pair{axis_name(rs->axis), std::string(comm::collective_name(*kind))};
  }
  if (const auto* route = std::get_if<parallel::Route>(&instr.op))
    return std::pair{axis_name(route->axis), std::string("routed all_to_all_v")};
  if (const auto* send = std::get_if<parallel::Send>(&instr.op)) return std::pair{axis_name(send->axis), std::string("send")};
  return std::nullopt;
}

}  // namespace

double instr_bytes_sent(const Program& p, size_t i) {
  // What the lowering stamped (comm::wire_bytes for Program::collective).
  return static_cast<double>(p.instrs.at(i).wire.total());
}

ProgramCost program_cost(const std::vector<Program>& programs, int rank, const ClusterSpec& cluster,
                         const CostEstimator& estimator) {
  PX_CHECK(rank >= 0 && static_cast<size_t>(rank) < programs.size(), "program_cost: rank {} of {} programs", rank,
           programs.size());
  const Program& p = programs[static_cast<size_t>(rank)];
  ProgramCost cost{.rank = p.rank, .mesh = p.strategy.mesh.str()};
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const auto key = sent_by(p, p.instrs[i]);
    if (!key) continue;
    AxisBytes& entry = cost.bytes[*key];
    entry.bytes += instr_bytes_sent(p, i);
    ++entry.instructions;
  }
  cost.peak_bytes = program_memory(p, parallel::liveness(p), 2).peak_bytes;
  cost.step_seconds = simulate({.programs = &programs, .cluster = &cluster, .estimator = &estimator}).step_seconds;
  return cost;
}

std::string cost_footer(const ProgramCost& cost, const std::string& estimator_name) {
  std::string text = fmt::format("cost: rank {} of mesh {}\n", cost.rank, cost.mesh);
  for (const auto& [key, sent] : cost.bytes)
    text += fmt::format("cost: bytes {} {} {:.0f} ({} instruction{})\n", key.first, key.second, sent.bytes,
                        sent.instructions, sent.instructions == 1 ? "" : "s");
  text += fmt::format("cost: liveness peak {:.0f} bytes\n", cost.peak_bytes);
  text += fmt::format("cost: step {:.2f} us ({})\n", cost.step_seconds * 1e6, estimator_name);
  return text;
}

std::string program_footer(const std::vector<Program>& programs, int rank) {
  PX_CHECK(!programs.empty(), "program_footer: no programs");
  FakeEstimator fake;
  fake.per_node = 1e-6;
  fake.per_byte = 1e-10;
  fake.alpha = 1e-5;
  fake.beta = 1e-9;
  ClusterSpec node{.name = "fake", .devices_per_node = programs.front().strategy.mesh.ranks()};
  return cost_footer(program_cost(programs, rank, node, fake),
                     "FakeEstimator: 1 us a node, 0.1 ns a memory byte, 10 us + 1 ns a byte a message");
}

}  // namespace px::plan
