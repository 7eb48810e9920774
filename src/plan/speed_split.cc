#include "plan/speed_split.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "parallel/lower/stages.h"

namespace px::plan {

namespace {

// Per coordinate along mesh axis `axis`: the slowest speed of the ranks
// there (those of the cluster's devices the mesh covers).
std::vector<double> slowest_along(const ClusterSpec& cluster, const parallel::DeviceMesh& mesh, int axis) {
  std::vector<double> speed(static_cast<size_t>(mesh.axes()[static_cast<size_t>(axis)].size), HUGE_VAL);
  for (int rank = 0; rank < std::min(mesh.ranks(), cluster.devices()); ++rank) {
    const size_t at = static_cast<size_t>(mesh.coords(rank)[static_cast<size_t>(axis)]);
    speed[at] = std::min(speed[at], cluster.relative_speed(rank));
  }
  return speed;
}

}  // namespace

std::vector<int64_t> speed_shares(const ClusterSpec& cluster, const parallel::Strategy& strategy) {
  if (strategy.data_ranks() <= 1 || !cluster.heterogeneous()) return {};
  const std::vector<double> speed = slowest_along(cluster, strategy.mesh, strategy.mesh.axis(strategy.data_axis));
  const double fastest = *std::max_element(speed.begin(), speed.end());
  std::vector<int64_t> shares;
  for (double s : speed) shares.push_back(std::max<int64_t>(1, std::llround(1000 * s / fastest)));
  if (std::all_of(shares.begin(), shares.end(), [&](int64_t s) { return s == shares.front(); })) return {};
  return shares;
}

std::vector<double> stage_speeds(const ClusterSpec& cluster, const parallel::Strategy& strategy) {
  if (strategy.pipeline_ranks() <= 1 || !cluster.heterogeneous()) return {};
  const std::vector<double> speed = slowest_along(cluster, strategy.mesh, strategy.mesh.axis(strategy.pipeline.axis));
  if (std::all_of(speed.begin(), speed.end(), [&](double s) { return std::abs(s / speed.front() - 1) < 0.01; }))
    return {};
  return speed;
}

std::optional<std::vector<std::string>> stage_cuts_by_speed(const Graph& forward, const ClusterSpec& cluster,
                                                            const parallel::Strategy& strategy) {
  const std::vector<double> speeds = stage_speeds(cluster, strategy);
  if (speeds.empty() || strategy.pipeline.virtual_stages > 1) return std::nullopt;
  const int nodes = static_cast<int>(forward.nodes().size());
  try {
    const std::vector<int> starts =
        parallel::balanced_stage_starts(forward, nodes, strategy.pipeline_ranks(), speeds);
    std::vector<std::string> names;
    for (size_t s = 1; s < starts.size(); ++s) names.push_back(forward.nodes()[static_cast<size_t>(starts[s])].name);
    // Named as --stage-cuts names them, they must find the same nodes again.
    if (parallel::stage_starts_at(forward, nodes, names) != starts) return std::nullopt;
    return names;
  } catch (const Error&) {
    return std::nullopt;
  }
}

std::string shares_text(const std::vector<int64_t>& shares) { return fmt::format("{}", fmt::join(shares, ":")); }

}  // namespace px::plan
