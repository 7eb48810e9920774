// Parameter-server training (docs/parameter_server.md), as a job asks for
// it: the parameter_server room's part of a job. Ranks 0..servers-1 hold the
// parameters and optimizer state in contiguous shards; the other ranks are
// workers. mode "" trains data-parallel instead.
#pragma once

#include <string>

namespace px {

struct ParameterServerOptions {
  std::string mode;            // "" (off), bsp, asp or ssp
  int servers = 1;             // K shards, one per server rank
  int staleness = 0;           // ssp: bound s on how many clocks a worker may run ahead of the slowest
  int backup_workers = 0;      // bsp: b; each update takes the first W - b gradients of its clock, drops the rest
  int late_worker = -1;        // tests: server 0 takes this worker's pushes as arriving after every other's
  bool operator==(const ParameterServerOptions&) const = default;
};

// Checks the options for a job of `ranks` ranks (px::Error naming the flag).
void validate(const ParameterServerOptions& options, int ranks);

}  // namespace px
