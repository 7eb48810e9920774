#include "comm/tuning/machine_load.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <span>
#include <string>
#include <thread>

#include "comm/collectives.h"

namespace px::comm {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t cpu_clock_ns(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// Busy jiffies (all but idle and iowait) of the first /proc/stat line.
int64_t proc_stat_busy_ns() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  int64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (!(in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal))
    return -1;
  const int64_t ns_per_tick = 1000000000 / sysconf(_SC_CLK_TCK);
  return (user + nice + system + irq + softirq) * ns_per_tick;
}

}  // namespace

int64_t machine_cpu_ns() {
  std::ifstream in("/sys/fs/cgroup/cpuacct/cpuacct.usage");
  int64_t value = -1;
  if (in >> value) return value;
  return proc_stat_busy_ns();
}

int online_cpus() { return static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)); }

LoadMeter::LoadMeter(Communicator& comm)
    : comm_(comm), per_thread_(comm.backend() == "inproc") {}

void LoadMeter::start() {
  machine0_ = machine_cpu_ns();
  own0_ = cpu_clock_ns(per_thread_ ? CLOCK_THREAD_CPUTIME_ID : CLOCK_PROCESS_CPUTIME_ID);
  wall0_ = now_seconds();
}

double LoadMeter::finish() {
  const double wall = now_seconds() - wall0_;
  const int64_t own =
      cpu_clock_ns(per_thread_ ? CLOCK_THREAD_CPUTIME_ID : CLOCK_PROCESS_CPUTIME_ID) - own0_;
  const int64_t machine1 = machine_cpu_ns();
  // Sum of the ranks' own CPU; rank 0's view of the machine and the wall.
  const bool lead = comm_.rank() == 0;
  std::array<float, 3> totals{static_cast<float>(own * 1e-9),
                              lead && machine0_ >= 0 && machine1 >= 0
                                  ? static_cast<float>((machine1 - machine0_) * 1e-9)
                                  : 0.0f,
                              lead ? static_cast<float>(wall) : 0.0f};
  allreduce(comm_, std::span<float>(totals), Reduction::sum,
            {.algorithm = Algorithm::recursive_doubling});
  if (totals[1] <= 0 || totals[2] <= 0) return 0;
  const double foreign = (totals[1] - totals[0]) / (totals[2] * online_cpus());
  return std::max(0.0, foreign);
}

double wait_for_quiet_machine(double busy, double window_seconds, double max_seconds) {
  const double start = now_seconds();
  if (machine_cpu_ns() < 0) return 0;
  while (now_seconds() - start < max_seconds) {
    const int64_t m0 = machine_cpu_ns();
    const double w0 = now_seconds();
    std::this_thread::sleep_for(std::chrono::duration<double>(window_seconds));
    const double used = (machine_cpu_ns() - m0) * 1e-9 / ((now_seconds() - w0) * online_cpus());
    if (used < busy) break;
  }
  return now_seconds() - start;
}

}  // namespace px::comm
