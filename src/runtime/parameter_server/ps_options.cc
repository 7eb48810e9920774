#include "runtime/parameter_server/ps_options.h"

#include "core/error.h"

namespace px {

void validate(const ParameterServerOptions& ps, int ranks) {
  if (ps.mode.empty()) {
    if (ps.servers != 1) fail("--ps-servers {} needs a parameter-server mode: give --ps bsp, asp or ssp", ps.servers);
    if (ps.staleness != 0) fail("--staleness {} needs --ps ssp", ps.staleness);
    if (ps.backup_workers != 0) fail("--backup-workers {} needs --ps bsp", ps.backup_workers);
    return;
  }
  if (ps.mode != "bsp" && ps.mode != "asp" && ps.mode != "ssp")
    fail("parameter-server mode '{}' is unknown: expected bsp, asp or ssp", ps.mode);
  if (ps.servers < 1) fail("--ps-servers {} must be >= 1", ps.servers);
  if (ps.servers >= ranks)
    fail("--ps-servers {} leaves no worker among {} ranks: expected more ranks than servers (e.g. --ranks {})",
         ps.servers, ranks, ps.servers + 1);
  if (ps.staleness < 0) fail("--staleness {} must be >= 0", ps.staleness);
  if (ps.staleness != 0 && ps.mode != "ssp")
    fail("--staleness {} is for --ps ssp; mode '{}' does not take a bound", ps.staleness, ps.mode);
  const int workers = ranks - ps.servers;
  if (ps.backup_workers < 0) fail("--backup-workers {} must be >= 0", ps.backup_workers);
  if (ps.backup_workers != 0 && ps.mode != "bsp")
    fail("--backup-workers {} is for --ps bsp; mode '{}' applies every gradient as it arrives", ps.backup_workers,
         ps.mode);
  if (ps.backup_workers >= workers)
    fail("--backup-workers {} leaves no gradient for an update: expected fewer than the {} workers ({} ranks - {} "
         "server{})",
         ps.backup_workers, workers, ranks, ps.servers, ps.servers > 1 ? "s" : "");
  if (ps.late_worker < -1 || ps.late_worker >= workers)
    fail("late worker {} is not a worker: expected -1 (none) or 0..{}", ps.late_worker, workers - 1);
}

}  // namespace px
