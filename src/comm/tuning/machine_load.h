// MachineLoad: how much of this host's CPU went to work that is not the
// benchmark's own over a timed interval, so timings contaminated by another
// process can be retaken. The same rule as ../shared/peers/torch/contention.py:
//   foreign = (machine CPU time - the ranks' own CPU time) / (wall · cores)
// Machine CPU comes from the cgroup's cpuacct.usage (else /proc/stat); a
// rank's own CPU is its thread's (in-process ranks are threads) or its
// process's (MPI ranks are processes). The ranks' CPU is summed against rank
// 0's host, so across hosts the fraction is underestimated (often 0).
// Other tenants of the hardware (other VMs) are invisible to these counters;
// find_disturbed (benchmark.h) finds their slow spells in the timings.
#pragma once

#include <cstdint>

namespace px::comm {

class Communicator;

// CPU nanoseconds spent by every task of this host (or cgroup) so far; -1
// when neither counter can be read.
int64_t machine_cpu_ns();
int online_cpus();

// Brackets an interval on every rank of comm; finish() is collective and
// returns the same foreign fraction on every rank.
class LoadMeter {
 public:
  explicit LoadMeter(Communicator& comm);
  void start();
  // Collective: the share of the machine's CPU capacity (0..1) used by
  // others during [start, finish).
  double finish();

 private:
  Communicator& comm_;
  bool per_thread_;
  int64_t machine0_ = 0, own0_ = 0;
  double wall0_ = 0;
};

// Sleeps until the machine has been less than `busy` loaded (by anyone) for
// `window_seconds`, or `max_seconds` passed; returns the seconds waited.
// Used between timings while nothing of ours runs. Not collective.
double wait_for_quiet_machine(double busy, double window_seconds, double max_seconds);

}  // namespace px::comm
