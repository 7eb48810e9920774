#include "plan/simulate.h"

#include <algorithm>
#include <cmath>

#include "core/block.h"
#include "core/error.h"
#include "plan/replay.h"

namespace px::plan {

using parallel::Program;

std::vector<parallel::Program> lower_all(const parallel::LowerRequest& request, const parallel::Strategy& strategy) {
  std::vector<parallel::Program> programs;
  for (int r = 0; r < strategy.mesh.ranks(); ++r) programs.push_back(parallel::lower(request, strategy, r));
  return programs;
}

std::vector<parallel::Program> lower_representatives(const parallel::LowerRequest& request,
                                                     const parallel::Strategy& strategy, const Deadline* deadline,
                                                     bool heterogeneous) {
  std::vector<parallel::Program> programs;
  if (heterogeneous || !strategy.row_shares.empty()) {
    for (int r = 0; r < strategy.mesh.ranks(); ++r) {
      if (deadline) deadline->check();
      programs.push_back(parallel::lower(request, strategy, r));
    }
    return programs;
  }
  const parallel::DeviceMesh& mesh = strategy.mesh;
  const int pipeline_axis = strategy.pipeline_ranks() > 1 ? mesh.axis(strategy.pipeline.axis) : -1;
  const int context_axis = strategy.context_ranks() > 1 ? mesh.axis(strategy.context.axis) : -1;
  for (int stage = 0; stage < strategy.pipeline_ranks(); ++stage)
    for (int chunk = 0; chunk < strategy.context_ranks(); ++chunk) {  // the ring's partners send to each other
      if (deadline) deadline->check();
      std::vector<int> coords(mesh.axes().size(), 0);
      if (pipeline_axis >= 0) coords[static_cast<size_t>(pipeline_axis)] = stage;
      if (context_axis >= 0) coords[static_cast<size_t>(context_axis)] = chunk;
      programs.push_back(parallel::lower(request, strategy, mesh.rank_of(coords)));
    }
  return programs;
}

Simulation simulate_sharing_cores(SimulationRequest request, const ProfiledEstimator::Options& options) {
  const ClusterSpec& cluster = *request.cluster;
  if (!cluster.profile) {
    if (request.estimator) return simulate(request);
    const RooflineEstimator roofline(cluster);
    request.estimator = &roofline;
    return simulate(request);
  }
  const int mesh_ranks = request.programs->front().strategy.mesh.ranks();
  const double weight = static_cast<double>(mesh_ranks) / static_cast<double>(request.programs->size());
  // The ranks that share one machine's cores: all of them, unless the
  // spec's hosts are machines of their own.
  const int sharing_cores = cluster.nodes_share_cores ? mesh_ranks : cluster.ranks_per_node_of(mesh_ranks);
  ProfiledEstimator::Options sharing = options;
  sharing.ranks = sharing_cores;
  Simulation sim;
  for (int round = 0; round < 4; ++round) {
    const ProfiledEstimator estimator(cluster, sharing);
    request.estimator = &estimator;
    sim = simulate(request);
    double waiting = 0, progressing = 0;
    for (double w : sim.receive_wait) waiting += weight * w;
    // A limited link's collective mostly waits on the wire, not the cores.
    if (options.link_gbps <= 0)
      for (double b : sim.progress_busy) progressing += weight * b;
    const double per_rank = static_cast<double>(sharing_cores) / mesh_ranks / std::max(sim.step_seconds, 1e-12);
    const double computing =
        sim.step_seconds > 0
            ? std::clamp(sharing_cores + per_rank * (progressing - waiting), 1.0, 2.0 * sharing_cores)
            : 1;
    if (std::abs(computing - sharing.ranks) < 0.02) break;
    sharing.ranks = computing;
  }
  // The spec's FLOP/s are one kernel thread's; a lone rank's kernels run
  // on `threads` cores, so the peak its GEMM is a share of is theirs.
  const double cores = mesh_ranks == 1 ? std::clamp(options.threads, 1, cluster.profile->cores) : 1;
  for (std::optional<AssumedPiece>* piece : {&sim.assumed.gemm, &sim.assumed.attention})
    if (*piece) (*piece)->peak *= cores;
  return sim;
}

double expert_imbalance(const std::vector<double>& load, int ranks) {
  PX_CHECK(ranks >= 1 && static_cast<int>(load.size()) >= ranks, "expert_imbalance: {} experts over {} ranks",
           load.size(), ranks);
  double total = 0, busiest = 0;
  for (double share : load) total += share;
  if (total <= 0) return 1.0;
  for (int r = 0; r < ranks; ++r) {
    const Block b = block(static_cast<int64_t>(load.size()), ranks, r);
    double held = 0;
    for (int64_t e = b.begin; e < b.begin + b.count; ++e) held += load[static_cast<size_t>(e)];
    // Against the rank's even share: its experts' fraction of all of them.
    busiest = std::max(busiest, held / total / (static_cast<double>(b.count) / static_cast<double>(load.size())));
  }
  return busiest;
}

Simulation simulate(const SimulationRequest& request) {
  PX_CHECK(request.programs && request.cluster && request.estimator, "simulate: incomplete request");
  const std::vector<Program>& programs = *request.programs;
  const ClusterSpec& cluster = *request.cluster;
  PX_CHECK_GE(programs.size(), 1u);
  const int mesh_ranks = programs.front().strategy.mesh.ranks();
  if (mesh_ranks > cluster.devices())
    fail("simulate: mesh {} has {} ranks, cluster '{}' has {} devices ({} nodes x {})",
         programs.front().strategy.mesh.str(), mesh_ranks, cluster.name, cluster.devices(), cluster.nodes,
         cluster.devices_per_node);
  return replay(request);
}

}  // namespace px::plan
