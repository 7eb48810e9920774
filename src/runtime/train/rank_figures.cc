#include "runtime/train/rank_figures.h"

#include <algorithm>

#include "comm/collectives.h"

namespace px {

std::vector<StageMeasurement> gather_stage_measurements(comm::Communicator& world,
                                                        const parallel::Strategy& strategy,
                                                        const StageMeasurement& mine) {
  // Milliseconds and KiB: floats hold them exactly enough.
  const std::vector<float> own{static_cast<float>(mine.busy_us / 1e3), static_cast<float>(mine.span_us / 1e3),
                               static_cast<float>(double(mine.activation_peak_bytes) / 1024),
                               static_cast<float>(double(mine.micro_batch_stash_bytes) / 1024)};
  std::vector<float> all(own.size() * static_cast<size_t>(world.size()));
  comm::allgather(world, own.data(), comm::Buffer(std::span<float>(all)));
  const int axis = strategy.mesh.axis(strategy.pipeline.axis);
  std::vector<StageMeasurement> stages;
  for (int r = 0; r < strategy.pipeline_ranks(); ++r) {
    std::vector<int> coords(strategy.mesh.axes().size(), 0);
    coords[static_cast<size_t>(axis)] = r;
    const float* at = all.data() + own.size() * static_cast<size_t>(strategy.mesh.rank_of(coords));
    stages.push_back({.busy_us = double(at[0]) * 1e3,
                      .span_us = double(at[1]) * 1e3,
                      .activation_peak_bytes = static_cast<int64_t>(double(at[2]) * 1024),
                      .micro_batch_stash_bytes = static_cast<int64_t>(double(at[3]) * 1024)});
  }
  return stages;
}

// In KiB on the wire: floats hold them to the KiB up to 16 GiB.
std::vector<int64_t> gather_peak_bytes(comm::Communicator& world, int64_t mine) {
  const float own = static_cast<float>(double(mine) / 1024);
  std::vector<float> all(static_cast<size_t>(world.size()));
  comm::allgather(world, &own, comm::Buffer(std::span<float>(all)));
  std::vector<int64_t> peaks;
  for (float kib : all) peaks.push_back(static_cast<int64_t>(double(kib) * 1024));
  return peaks;
}

std::vector<double> gather_bytes_between_hosts(comm::Communicator& world, const parallel::Program& mine) {
  const std::vector<int>& hosts = world.hosts();
  double sent = 0;
  for (const parallel::Instr& instr : mine.instrs)  // a receive's wire is its sender's
    if (!std::holds_alternative<parallel::Recv>(instr.op)) sent += static_cast<double>(instr.wire.inter_node);
  const float own = static_cast<float>(sent / 1024);  // KiB: a float holds a step's bytes to 2^-24
  std::vector<float> all(static_cast<size_t>(world.size()));
  comm::allgather(world, &own, comm::Buffer(std::span<float>(all)));
  std::vector<double> by_host(static_cast<size_t>(*std::max_element(hosts.begin(), hosts.end()) + 1));
  for (size_t r = 0; r < all.size(); ++r) by_host[static_cast<size_t>(hosts[r])] += double(all[r]) * 1024;
  return by_host;
}

}  // namespace px
