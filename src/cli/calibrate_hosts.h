// `parallax calibrate` under mpirun: the links a job's MPI ranks talk
// over, inside a host and between hosts, for the two-level `local` spec
// (plan/cluster.h's LocalHosts).
#pragma once

#include <string>

#include "comm/communicator.h"
#include "comm/cost_model.h"
#include "plan/cluster.h"
#include "runtime/calibrate/calibrate.h"

namespace px::cli {

struct HostLinks {
  comm::CostModel inside;  // the transport among host 0's ranks ("quick" or "tune", as in-process)
  plan::LocalHosts hosts;  // how many, ranks on each, the link between them (speeds: see host_rates)
  // Each host's GEMM rate (FLOP/s, one rank over many quota periods). The
  // spec's speeds are these over the profile's rate, which its kernels
  // were timed at (calibrate sets them): a quota host 0 runs below it.
  std::vector<double> host_rates;
};

// Collective over `world` (every rank calls it; rank 0 gets the result,
// the others an empty one). The hosts are the ranks' hostnames (each
// holding a block of consecutive ranks, the same count on each: the spec
// maps rank r to host r / ranks_per_host, as mpirun's --host a:2,b:2
// places them). Measured one link at a time while the other ranks wait
// without polling: host 0's ranks among themselves, then host 0's first
// rank with host 1's by ping-pong. Whether the hosts are namespaces of
// one machine (their ranks then share its cores) is read from the
// kernel's boot id. Then each host's rate (host_rates), a host at a time:
// its first rank's GEMM rate over `rate_seconds` (many periods of a CPU
// quota: a burst within one measures the unthrottled rate).
HostLinks measure_host_links(comm::Communicator& world, const std::string& how, const CalibrationProgress& say,
                             double rate_seconds = 0.5);

}  // namespace px::cli
