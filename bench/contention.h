// Per-step detection of foreign CPU load on a shared machine: the C++ twin of
// ../shared/peers/torch/contention.py, so parallax's and PyTorch's timings
// are filtered by the same rule.
//   machine CPU  : /sys/fs/cgroup/cpuacct/cpuacct.usage (all tasks, ns)
//   own CPU      : CLOCK_PROCESS_CPUTIME_ID (all threads of this process, ns)
//   foreign frac : (machine - own) / (wall * ncpu)
//   run delay    : sum over own threads of /proc/self/task/*/schedstat field 2
// A step is clean when foreign < 3% (the benchmark uses every core) or < 10%
// (it leaves a core free), and own run delay < 2% of the step. After a dirty
// step, settle() waits (untimed) for a quiet machine.
// Unlike PyTorch's OpenMP team, a process can delay itself (more runnable
// threads than cores, e.g. a kernel pool beside BLAS's own threads), so callers
// may pass the run delay measured on a quiet machine as `own_delay`: a step is
// then clean when its run delay stays within own_delay + 2%.
// Header-only, used by bench/ programs only.
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <ctime>
#include <fstream>
#include <string>
#include <thread>

namespace px::bench {

inline constexpr double kCleanFrac = 0.03;
inline constexpr double kCleanFracSpare = 0.10;
inline constexpr double kCleanDelay = 0.02;
inline constexpr double kQuietFrac = 0.10;

inline int cpu_count() { return static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)); }

inline double clean_limit(int threads_used) {
  return threads_used >= cpu_count() ? kCleanFrac : kCleanFracSpare;
}

// -1 when the cgroup v1 counter is absent (then every step counts as clean).
inline int64_t machine_cpu_ns() {
  std::ifstream in("/sys/fs/cgroup/cpuacct/cpuacct.usage");
  int64_t v = -1;
  if (in) in >> v;
  return in ? v : -1;
}

inline int64_t own_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

inline int64_t own_run_delay_ns() {
  int64_t total = 0;
  DIR* dir = opendir("/proc/self/task");
  if (!dir) return 0;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in(std::string("/proc/self/task/") + e->d_name + "/schedstat");
    int64_t run = 0, wait = 0;
    if (in >> run >> wait) total += wait;
  }
  closedir(dir);
  return total;
}

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Foreign load: the machine's CPU time not spent by `own`, as a fraction of
// every core over `wall_s` (own and machine in ns over the same interval).
inline double foreign_frac(double wall_s, double own_ns, double machine_ns) {
  return machine_ns > own_ns ? (machine_ns - own_ns) / (wall_s * cpu_count() * 1e9) : 0.0;
}

struct Meter {
  double wall0 = 0;
  int64_t own0 = 0, machine0 = 0, delay0 = 0;
  // Results of the last stop(); the raw deltas (ns) let several processes
  // (MPI ranks) combine theirs into one verdict.
  double wall_s = 0, foreign = 0, run_delay = 0;
  int64_t own_ns = 0, machine_ns = 0, run_delay_ns = 0;

  void start() {
    delay0 = own_run_delay_ns();
    machine0 = machine_cpu_ns();
    own0 = own_cpu_ns();
    wall0 = now_s();
  }
  void stop() {
    wall_s = now_s() - wall0;
    own_ns = own_cpu_ns() - own0;
    int64_t m1 = machine_cpu_ns();
    machine_ns = (m1 < 0 || machine0 < 0) ? own_ns : m1 - machine0;
    run_delay_ns = own_run_delay_ns() - delay0;
    foreign = foreign_frac(wall_s, double(own_ns), double(machine_ns));
    run_delay = double(run_delay_ns) / (wall_s * 1e9);
  }
  bool clean(int threads_used, double own_delay = 0) const {
    return foreign < clean_limit(threads_used) && run_delay < own_delay + kCleanDelay;
  }
};

// Waits (untimed) until the whole machine has been under kQuietFrac busy for
// one 1 s window, at most max_wait seconds. Returns the seconds waited.
inline double settle(double max_wait = 30.0) {
  const double t0 = now_s();
  if (machine_cpu_ns() < 0) return 0;
  while (now_s() - t0 < max_wait) {
    int64_t m0 = machine_cpu_ns();
    double w0 = now_s();
    std::this_thread::sleep_for(std::chrono::seconds(1));
    double frac = double(machine_cpu_ns() - m0) / ((now_s() - w0) * cpu_count() * 1e9);
    if (frac < kQuietFrac) break;
  }
  return now_s() - t0;
}

}  // namespace px::bench
