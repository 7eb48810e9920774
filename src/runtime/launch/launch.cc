// train(): the ranks of a job and what watches them. One rank runs in
// this thread; in-process ranks are threads of this process; under mpirun
// this process is one rank. Each has a flight record, and a watchdog per
// process beats their heartbeats and names a silent rank
// (docs/fault_tolerance.md). A rank runs data-parallel
// (runtime/train/train_rank.h), in a parameter-server job
// (runtime/parameter_server/parameter_server.h) or as a synchronized
// replica (runtime/sync/train_sync.h); in process a failed job
// restarts from its snapshots or checkpoint.
#include "runtime/launch/launch.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <streambuf>
#include <thread>
#include <vector>

#include "comm/backends.h"
#include "core/error.h"
#include "kernels/threads.h"
#include "runtime/fault/flight_recorder.h"
#include "runtime/fault/flight_report.h"
#include "runtime/fault/watchdog.h"
#include "runtime/fault/watchdog_peers.h"
#include "runtime/parameter_server/parameter_server.h"
#include "runtime/sync/train_sync.h"
#include "runtime/train/train_rank.h"

namespace px {
namespace {

// Discards everything: the log of ranks other than 0.
class NullBuffer : public std::streambuf {
 protected:
  int overflow(int c) override { return c; }
};

}  // namespace

// validate_job, its error one every rank meets alike before any talks to
// another (reported once, without a rank).
static void validate_configuration(const JobSpec& job) {
  try {
    validate_job(job);
  } catch (const JobConfigurationError&) {
    throw;
  } catch (const Error& e) {
    throw JobConfigurationError(e.what());
  }
}

// One rank's job in the mode it asks for: data-parallel, or a parameter
// server's (a lone rank trains data-parallel).
static JobResult run_rank(const JobSpec& o, comm::Communicator* group, std::ostream& log, FlightRecorder& recorder,
                          const RankRecovery& recovery) {
  if ((o.ps.mode.empty() && o.sync.mode.empty()) || group == nullptr) {
    DataParallelResult result =
        train_rank(o.model, o.data, o.strategy, o.optimizer, o.checkpoint, o.fault, o.run,
                   {.attempt = o.launch.attempt, .mpi = o.launch.mpi, .local_ranks = o.launch.local_ranks,
                    .link_gbps = o.launch.link_gbps},
                   group, log, &recorder, recovery);
    return {.run = std::move(result.run), .data_parallel = std::move(result.data_parallel)};
  }
  if (!o.sync.mode.empty()) {
    SyncResult result = train_synced(o.model, o.data, o.strategy, o.optimizer,
                                     o.sync, o.checkpoint, o.fault, o.run, o.launch.attempt, *group, log, recorder);
    return {.run = std::move(result.run), .sync = std::move(result.sync)};
  }
  ParameterServerResult result =
      train_parameter_server(o.model, o.data, o.strategy.precision, o.optimizer, o.ps, o.checkpoint, o.fault, o.run,
                             *group, log);
  return {.run = std::move(result.run), .parameter_server = std::move(result.parameter_server)};
}

// Runs one rank's job with its flight record: the phase it ends in, and
// the error that ended it. A rank --inject-fault stopped returns quietly.
static JobResult run_recorded(const JobSpec& o, comm::Communicator* group, std::ostream& log,
                              FlightRecorder& recorder, const RankRecovery& recovery = {}) {
  try {
    JobResult result = run_rank(o, group, log, recorder, recovery);
    recorder.set_phase(RankPhase::finished);
    return result;
  } catch (const RankStopped&) {
    return {};
  } catch (const JobConfigurationError& e) {
    recorder.set_error(e.what());
    recorder.set_phase(RankPhase::failed);
    throw;
  } catch (const Error& e) {
    recorder.set_error(e.what());
    recorder.set_phase(RankPhase::failed);
    if (group == nullptr || o.launch.mpi) throw;  // the MPI path names the rank itself
    throw Error(fmt::format("rank {}: {}", group->rank(), e.what()));
  } catch (const std::exception& e) {
    recorder.set_error(e.what());
    recorder.set_phase(RankPhase::failed);
    throw;
  }
}

static JobResult train_restarting(JobSpec o, const LivenessTimeouts& timeouts, std::ostream& log);

JobResult train(JobSpec o, std::ostream& log) {
  kernels::set_threads(o.run.threads);
  // --mesh names the ranks: in-process, that many threads.
  if (!o.launch.mpi && o.strategy.mesh_ranks > 0) o.launch.ranks = o.strategy.mesh_ranks;
  NullBuffer null_buffer;
  std::ostream quiet(&null_buffer);
  // The watchdog names a silent rank after the heartbeat timeout; every
  // wait's own, longer, is the backstop. Checked here: the transports and
  // the watchdog take them before any rank validates the rest.
  const LivenessTimeouts timeouts = liveness_timeouts(o.fault);
  auto flight_file = [&](int rank) {
    return o.fault.run_dir.empty() ? std::string() : flight_path(o.fault.run_dir, rank);
  };
  const LaunchOptions& l = o.launch;
  if (l.mpi) {
    if (!comm::mpi::available())
      fail("parallax was launched by mpirun but built without MPI: rebuild with MPI (libopenmpi-dev)");
    if (l.link_gbps > 0) fail("--link-gbps limits in-process links; under mpirun the network is real");
    if (l.max_restarts > 0)
      fail("--max-restarts {} restarts in-process ranks; under mpirun, run the job under `parallax launch "
           "--max-restarts {} -- mpirun ...`",
           l.max_restarts, l.max_restarts);
    if (l.ranks != 1)
      fail("--ranks {} starts in-process ranks; under mpirun the ranks are the MPI processes (give -np to mpirun)",
           l.ranks);
    comm::mpi::init(nullptr, nullptr, {.timeout = timeouts.wait}, {.tag_bound = l.mpi_tag_bound, .pmi_fd = l.mpi_pmi_fd});
    comm::Communicator& world = comm::mpi::world();
    world.set_timeout(timeouts.wait);
    FlightRecorder recorder(flight_file(world.rank()), world.rank(), world.size());
    o.launch.ranks = world.size();
    JobResult result;
    {
      // Heartbeats and verdicts travel over MPI itself, so hosts need share
      // no filesystem; the run directory's flight files are for the doctor.
      TransportPeers peers(world);
      Watchdog watchdog({.timeout = timeouts.heartbeat,
                         .stuck =
                             [&recorder](const std::string& reason) {
                               // Blocked where no wait polls (the MPI library's own collective): end the job.
                               recorder.set_error(reason);
                               recorder.set_phase(RankPhase::failed);
                               std::cerr << fmt::format("error: rank {}: {}\n", recorder.rank(), reason);
                               comm::mpi::abort(1);
                             }},
                        {{&recorder, &world.transport()}}, world.size(), &peers);
      try {
        std::ostream& rank_log = world.rank() == 0 ? log : quiet;
        validate_configuration(o);
        result = run_recorded(o, world.size() > 1 ? &world : nullptr, rank_log, recorder);
      } catch (const JobConfigurationError& e) {
        // Every rank met it: rank 0 says it once and ends the job (the
        // others give it time to).
        if (world.rank() == 0) std::cerr << fmt::format("error: {}\n", e.what());
        else std::this_thread::sleep_for(std::chrono::seconds(1));
        comm::mpi::abort(1);
      } catch (const Error& e) {
        // The other ranks would wait for this one until their timeout: end the job now.
        std::cerr << fmt::format("error: rank {}: {}\n", world.rank(), e.what());
        comm::mpi::abort(1);
      }
    }
    comm::mpi::finalize();
    return result;
  }
  return train_restarting(o, timeouts, log);
}

// One attempt of an in-process job: its ranks as threads of this process,
// watched by one watchdog. `ended` gets each rank's final phase.
static JobResult run_attempt(const JobSpec& o, const LivenessTimeouts& timeouts, std::ostream& log,
                             const RankRecovery& recovery, std::vector<RankPhase>& ended) {
  NullBuffer null_buffer;
  std::ostream quiet(&null_buffer);
  auto flight_file = [&](int rank) {
    return o.fault.run_dir.empty() ? std::string() : flight_path(o.fault.run_dir, rank);
  };
  const int ranks = o.launch.ranks;
  std::vector<std::unique_ptr<FlightRecorder>> recorders;
  std::vector<Watchdog::Local> locals;
  for (int r = 0; r < ranks; ++r) {
    recorders.push_back(std::make_unique<FlightRecorder>(flight_file(r), r, ranks));
    locals.push_back({.recorder = recorders.back().get()});
  }
  struct Phases {  // read the ranks' final phases however the attempt ends
    std::vector<std::unique_ptr<FlightRecorder>>& recorders;
    std::vector<RankPhase>& ended;
    ~Phases() {
      ended.clear();
      for (const auto& r : recorders) ended.push_back(r->phase());
    }
  } phases{recorders, ended};
  if (ranks == 1 && o.ps.mode.empty() && o.sync.mode.empty()) {
    JobResult result = run_recorded(o, nullptr, log, *recorders[0], recovery);
    const RankPhase p = recorders[0]->phase();
    if (p == RankPhase::killed || p == RankPhase::frozen || p == RankPhase::lost)  // the only rank: the job died
      fail("rank 0 {} at {} (--inject-fault)", rank_phase_name(p),
           describe_position(o.fault.inject_fault.step, -1, ""));
    return result;
  }
  Watchdog watchdog({.timeout = timeouts.heartbeat}, locals, ranks, {});
  std::vector<JobResult> results(static_cast<size_t>(ranks));
  comm::InprocOptions inproc;
  inproc.link_gbps = o.launch.link_gbps;
  inproc.communicator.timeout = timeouts.wait;
  comm::run_inproc(
      ranks,
      [&](comm::Communicator& world) {
        const size_t rank = static_cast<size_t>(world.rank());
        // The transport ends with this thread: the watchdog lets go of it first.
        struct Attached {
          Watchdog& watchdog;
          size_t rank;
          ~Attached() { watchdog.attach(rank, nullptr); }
        } attached{watchdog, rank};
        watchdog.attach(rank, &world.transport());
        std::ostream& rank_log = rank == 0 ? log : quiet;
        results[rank] = run_recorded(o, &world, rank_log, *recorders[rank], recovery);
      },
      inproc);
  return results[0];
}

double restart_time_lost(std::vector<std::pair<double, double>> spans) {
  std::sort(spans.begin(), spans.end());
  double total = 0, end = -1e300;
  for (auto [from, to] : spans) {
    from = std::max(from, end);
    if (to > from) total += to - from;
    end = std::max(end, to);
  }
  return total;
}

// In-process ranks, restarted up to --max-restarts times: from every
// rank's in-memory snapshot (a lost rank's from its buddy), else from the
// latest checkpoint on disk, else from the start; with fewer ranks when a
// rank was lost for good (down to --min-ranks).
static JobResult train_restarting(JobSpec o, const LivenessTimeouts& timeouts, std::ostream& log) {
  validate_job(o);
  const double started = unix_seconds();
  std::optional<Checkpoint> restore;
  double restored_from = started;  // when the state the next attempt starts from was taken
  std::vector<std::pair<double, double>> lost;  // each restart: [state taken, ready again]
  LaunchOptions& l = o.launch;
  CheckpointOptions& checkpoint = o.checkpoint;
  const int first_attempt = l.attempt;  // > 0 under parallax launch's restarts
  for (int attempt = 0;; ++attempt) {
    l.attempt = first_attempt + attempt;
    std::optional<SnapshotStore> snapshots;
    if (l.max_restarts > 0 && checkpoint.save_every > 0 && o.ps.mode.empty() && o.sync.mode.empty())
      snapshots.emplace(l.ranks);
    std::atomic<double> ready_at{0};
    std::vector<RankPhase> ended;
    const RankRecovery recovery{.snapshots = snapshots ? &*snapshots : nullptr,
                                .restore = restore ? &*restore : nullptr,
                                .ready_at = &ready_at};
    try {
      JobResult result = run_attempt(o, timeouts, log, recovery, ended);
      if (attempt > 0) lost.emplace_back(restored_from, ready_at.load());
      result.restarts = attempt;
      result.lost_seconds = restart_time_lost(lost);
      if (attempt > 0)
        log << fmt::format("restarts: {}; time lost to failures: {:.2f} s (steps redone, detection and restart)\n",
                           attempt, result.lost_seconds);
      return result;
    } catch (const Error& e) {
      if (attempt > 0 && ready_at.load() > 0) lost.emplace_back(restored_from, ready_at.load());
      if (attempt >= l.max_restarts) throw;
      log << fmt::format("attempt {} failed after {:.1f} s: {}\n", attempt + 1, unix_seconds() - started, e.what());
      // The ranks that stopped took their memory with them; a lost one
      // does not come back.
      int gone = 0;
      for (size_t r = 0; r < ended.size(); ++r) {
        const RankPhase p = ended[r];
        if (p == RankPhase::killed || p == RankPhase::frozen || p == RankPhase::lost) {
          if (snapshots) snapshots->lose(static_cast<int>(r));
          log << fmt::format("  rank {} {}: its memory is gone\n", r, rank_phase_name(p));
        }
        gone += p == RankPhase::lost;
      }
      if (gone > 0) {
        std::error_code ec;
        std::filesystem::remove_all(o.fault.run_dir + "/lost", ec);  // handled here, not by a launcher
        const int floor = l.min_ranks > 0 ? l.min_ranks : l.ranks;
        if (l.ranks - gone < floor)
          fail("{} rank{} lost for good leave {} of {}; --min-ranks {} allows no fewer (the first failure: {})", gone,
               gone == 1 ? "" : "s", l.ranks - gone, l.ranks, floor, e.what());
        l.ranks -= gone;
        l.min_ranks = std::min(l.min_ranks, l.ranks);
        validate_job(o);  // the fewer ranks must still make the mesh
      }
      const std::string archived = archive_flight_records(o.fault.run_dir, attempt + 1);
      if (!archived.empty()) log << fmt::format("  flight records: parallax doctor {}\n", archived);
      restore = snapshots ? snapshots->restore() : std::nullopt;
      if (restore) {
        restored_from = restore->state.saved_at.value_or(started);
      } else if (!checkpoint.save.empty() && std::filesystem::exists(checkpoint.save + "/state.json")) {
        checkpoint.resume = checkpoint.save;  // each rank reads its runs from disk
        restored_from = load_checkpoint(checkpoint.save).state.saved_at.value_or(started);
      } else {
        checkpoint.resume.clear();
        restored_from = started;
      }
      log << fmt::format("restart {} of {}: {} ranks, from {}\n", attempt + 1, l.max_restarts, l.ranks,
                         restore ? fmt::format("step {} in {}", restore->state.step, restore->dir)
                         : checkpoint.resume.empty() ? std::string("the start (no snapshot or checkpoint yet)")
                                                     : fmt::format("checkpoint '{}'", checkpoint.resume));
    }
  }
}

}  // namespace px
