#include "cli/calibrate_hosts.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "comm/backends.h"
#include "comm/tuning/benchmark.h"
#include "core/error.h"

namespace px::cli {
namespace {

// The running kernel's boot id, hashed (FNV-1a): equal on every network
// namespace of one machine, different across machines.
uint64_t machine_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  const std::string id{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : id) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

// Every member's `mine` by group rank, on member 0 (the others get only
// their own back, the rest `mine` too).
template <typename T>
std::vector<T> gather_on_first(comm::Communicator& group, T mine, const char* what) {
  std::vector<T> all(static_cast<size_t>(group.size()), mine);
  const uint32_t tag = group.next_tag();
  std::vector<comm::Request> requests;
  if (group.rank() == 0) {
    for (int peer = 1; peer < group.size(); ++peer)
      requests.push_back(group.irecv(peer, tag, &all[static_cast<size_t>(peer)], sizeof(T)));
  } else {
    requests.push_back(group.isend(0, tag, &mine, sizeof(T)));
  }
  group.wait_all(requests, comm::Step{what, 0});
  return all;
}

// This process's CPU limit in cores and its period, from its cgroup's
// quota (v2's cpu.max, v1's cpu.cfs_quota_us over cpu.cfs_period_us;
// scripts/hosts.sh --cpu sets them); none when it has none or none can be
// read. The cgroup's path is /proc/self/cgroup's, under a cgroup mount
// /proc/self/mountinfo lists.
plan::CpuQuota cgroup_cpu_limit() {
  struct Mount {
    std::string root, point;
    bool v2 = false;
  };
  std::vector<Mount> mounts;
  std::ifstream info("/proc/self/mountinfo");
  for (std::string line; std::getline(info, line);) {
    std::istringstream fields(line);
    std::string id, parent, device, root, point, word;
    fields >> id >> parent >> device >> root >> point;
    while (fields >> word && word != "-") {
    }
    std::string type, source, options;
    fields >> type >> source >> options;
    const bool cpu = ("," + options + ",").find(",cpu,") != std::string::npos;
    if (type == "cgroup2" || (type == "cgroup" && cpu)) mounts.push_back({root, point, type == "cgroup2"});
  }
  auto read_limit = [](const Mount& m, const std::string& path) -> plan::CpuQuota {
    const std::string rel = m.root == "/" ? path : path.rfind(m.root, 0) == 0 ? path.substr(m.root.size()) : "";
    if (rel.empty() && path != m.root) return {};
    const std::string dir = m.point + rel;
    if (m.v2) {
      std::ifstream max(dir + "/cpu.max");
      std::string quota;
      double period = 0;
      if (!(max >> quota >> period) || quota == "max" || !(period > 0)) return {};
      return {.cores = std::stod(quota) / period, .period = period / 1e6};
    }
    std::ifstream quota_file(dir + "/cpu.cfs_quota_us"), period_file(dir + "/cpu.cfs_period_us");
    double quota = 0, period = 0;
    if (!(quota_file >> quota && period_file >> period) || !(quota > 0 && period > 0)) return {};
    return {.cores = quota / period, .period = period / 1e6};
  };
  std::ifstream groups("/proc/self/cgroup");
  for (std::string line; std::getline(groups, line);) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    const bool v2 = controllers.empty();
    if (!v2 && ("," + controllers + ",").find(",cpu,") == std::string::npos) continue;
    for (const Mount& m : mounts)
      if (m.v2 == v2)
        if (const plan::CpuQuota limit = read_limit(m, path); limit.cores > 0) return limit;
  }
  return {};
}

// On the leaders' group: whether every leader runs on leader 0's machine
// (answered on leader 0).
bool one_machine(comm::Communicator& leaders) {
  const std::vector<uint64_t> ids = gather_on_first(leaders, machine_id(), "calibrate machine ids");
  return std::ranges::all_of(ids, [&](uint64_t id) { return id == ids.front(); });
}

// Ranks per host, when every host holds one block of consecutive ranks of
// the same size; px::Error naming the first host that does not otherwise.
int ranks_per_host(const std::vector<int>& hosts) {
  const int count = static_cast<int>(std::ranges::count(hosts, 0));
  for (size_t r = 0; r < hosts.size(); ++r)
    if (hosts[r] != static_cast<int>(r) / count)
      fail("calibrate under mpirun: rank {} is on host {}, but the local spec maps rank r to host r / {} (host 0 "
           "has {} ranks): start the same number of ranks on every host, in blocks (mpirun --host a:{},b:{})",
           r, hosts[r], count, count, count, count);
  return count;
}

// On the leaders' group: each leader's GEMM rate (FLOP/s), measured one
// leader at a time while the others wait without polling (answered on
// leader 0).
std::vector<double> host_rates(comm::Communicator& leaders, double seconds, const CalibrationProgress& say) {
  double mine = 0;
  for (int host = 0; host < leaders.size(); ++host) {
    comm::mpi::wait_quietly_for_all();  // the other hosts' ranks idle meanwhile
    if (leaders.rank() == host) mine = measure_gemm_rate({.batch_seconds = seconds});
  }
  const std::vector<double> rates = gather_on_first(leaders, mine, "calibrate host speeds");
  for (size_t h = 0; h < rates.size() && leaders.rank() == 0; ++h)
    say(fmt::format("host {}: GEMM {:.1f} GFLOP/s, {:.0f}% of host 0's", h, rates[h] / 1e9, 100 * rates[h] / rates[0]));
  return rates;
}

}  // namespace

HostLinks measure_host_links(comm::Communicator& world, const std::string& how, const CalibrationProgress& say,
                             double rate_seconds) {
  const std::vector<int> hosts = world.hosts();
  const int per_host = ranks_per_host(hosts);
  const int host_count = hosts.back() + 1;
  auto [node, leaders] = world.node_groups(0);
  const bool on_host0 = hosts[static_cast<size_t>(world.rank())] == 0;
  const auto progress = [&](const std::string& line) {
    if (world.rank() == 0) say(line);
  };
  HostLinks out;
  out.inside = comm::default_cost_model(world.backend());
  if (on_host0 && node->size() > 1) {
    progress(fmt::format("comm inside a host ({} ranks of host 0, {}):", node->size(), world.backend()));
    out.inside = how == "tune"
                     ? comm::tune_cost_model(*node, comm::default_tuning_sizes(),
                                             [&](const std::string& l) { progress("comm: " + l); })
                     : comm::measure_links(*node, [&](const std::string& l) { progress("comm: " + l); });
  }
  comm::mpi::wait_quietly_for_all();
  if (host_count > 1 && leaders != nullptr) {
    progress(fmt::format("comm between hosts (the first ranks of hosts 0 and 1, of {} hosts):", host_count));
    const comm::CostModel between = comm::measure_links(*leaders, [&](const std::string& l) { progress("comm: " + l); });
    const bool shared = one_machine(*leaders);
    out.hosts = {.hosts = host_count,
                 .ranks_per_host = per_host,
                 .between = plan::LinkSpec{.name = fmt::format("{} between hosts", world.backend()),
                                           .bandwidth = 1 / between.transport.beta,
                                           .latency = between.transport.alpha},
                 .share_cores = shared};
    // Every leader takes part; leader 0 decides (it alone knows `shared`).
    const plan::CpuQuota quota = cgroup_cpu_limit();
    const std::vector<double> limits = gather_on_first(*leaders, quota.cores, "calibrate CPU limits");
    const std::vector<double> periods = gather_on_first(*leaders, quota.period, "calibrate CPU quota periods");
    for (size_t h = 0; h < limits.size(); ++h) out.hosts.quotas.push_back({.cores = limits[h], .period = periods[h]});
    if (shared) {
      // Hosts whose CPU quotas fit the machine's cores together each get
      // their quota, measured in their speeds: they do not contend.
      double cores = 0;
      for (const double l : limits) cores = l > 0 && cores >= 0 ? cores + l : -1;
      const int machine = static_cast<int>(std::thread::hardware_concurrency());
      if (cores > 0 && cores <= machine + 1e-9) {
        out.hosts.share_cores = false;
        progress(fmt::format("the hosts are namespaces of one machine whose CPU quotas ({:g} cores in all) fit its {} "
                             "cores: each host's ranks compute on its own quota",
                             cores, machine));
      } else {
        progress("the hosts are namespaces of one machine: their ranks share its cores");
      }
    }
  }
  comm::mpi::wait_quietly_for_all();
  if (host_count > 1) {
    // Every rank takes part in the waits; only the leaders measure.
    if (leaders != nullptr) {
      progress(fmt::format("each host's speed, one host at a time ({:g} s each):", rate_seconds));
      out.host_rates = host_rates(*leaders, rate_seconds, progress);
    } else {
      for (int host = 0; host < host_count; ++host) comm::mpi::wait_quietly_for_all();
    }
  }
  comm::mpi::wait_quietly_for_all();
  if (world.rank() != 0) return {};
  return out;
}

}  // namespace px::cli
