#include "plan/speed_split.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "parallel/lower/stages.h"

namespace px::plan {

std::vector<int64_t> speed_shares(const ClusterSpec& cluster, const parallel::Strategy& strategy) {
  const parallel::DeviceMesh& mesh = strategy.mesh;
  const int data_axis = mesh.axis(strategy.data_axis), data_ranks = strategy.data_ranks();
  if (data_ranks <= 1 || !cluster.heterogeneous()) return {};
  std::vector<double> speed(static_cast<size_t>(data_ranks), HUGE_VAL);
  for (int rank = 0; rank < std::min(mesh.ranks(), cluster.devices()); ++rank) {
    const int d = mesh.coords(rank)[static_cast<size_t>(data_axis)];
    speed[static_cast<size_t>(d)] = std::min(speed[static_cast<size_t>(d)], cluster.relative_speed(rank));
  }
  const double fastest = *std::max_element(speed.begin(), speed.end());
  std::vector<int64_t> shares;
  for (double s : speed) shares.push_back(std::max<int64_t>(1, std::llround(1000 * s / fastest)));
  if (std::all_of(shares.begin(), shares.end(), [&](int64_t s) { return s == shares.front(); })) return {};
  return shares;
}

std::vector<double> stage_speeds(const ClusterSpec& cluster, const parallel::Strategy& strategy) {
  const int stages = strategy.pipeline_ranks();
  if (stages <= 1 || !cluster.heterogeneous()) return {};
  const parallel::DeviceMesh& mesh = strategy.mesh;
  const int axis = mesh.axis(strategy.pipeline.axis);
  std::vector<double> speed(static_cast<size_t>(stages), HUGE_VAL);
  for (int rank = 0; rank < std::min(mesh.ranks(), cluster.devices()); ++rank) {
    const int s = mesh.coords(rank)[static_cast<size_t>(axis)];
    speed[static_cast<size_t>(s)] = std::min(speed[static_cast<size_t>(s)], cluster.relative_speed(rank));
  }
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
