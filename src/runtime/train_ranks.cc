// train(): the ranks of a job and what watches them. One rank runs in
// this thread; in-process ranks are threads of this process; under mpirun
// this process is one rank. Each has a flight record, and a watchdog per
// process beats their heartbeats and names a silent rank
// (docs/fault_tolerance.md).
#include <chrono>
#include <iostream>
#include <memory>
#include <streambuf>
#include <vector>

#include "comm/backends.h"
#include "core/error.h"
#include "kernels/threads.h"
#include "runtime/flight_recorder.h"
#include "runtime/parameter_server.h"
#include "runtime/train_rank.h"
#include "runtime/trainer.h"
#include "runtime/watchdog.h"

namespace px {
namespace {

// Discards everything: the log of ranks other than 0.
class NullBuffer : public std::streambuf {
 protected:
  int overflow(int c) override { return c; }
};

}  // namespace

// Runs one rank's job with its flight record: the phase it ends in, and
// the error that ended it. A rank --inject-fault stopped returns quietly.
static TrainResult run_recorded(const TrainOptions& o, comm::Communicator* group, std::ostream& log,
                                FlightRecorder& recorder) {
  try {
    TrainResult result = o.ps.mode.empty() || group == nullptr ? train_rank(o, group, log, &recorder)
                                                               : train_parameter_server(o, *group, log);
    recorder.set_phase(RankPhase::finished);
    return result;
  } catch (const RankStopped&) {
    return {};
  } catch (const Error& e) {
    recorder.set_error(e.what());
    recorder.set_phase(RankPhase::failed);
    if (group == nullptr || o.mpi) throw;  // the MPI path names the rank itself
    throw Error(fmt::format("rank {}: {}", group->rank(), e.what()));
  } catch (const std::exception& e) {
    recorder.set_error(e.what());
    recorder.set_phase(RankPhase::failed);
    throw;
  }
}

TrainResult train(TrainOptions o, std::ostream& log) {
  kernels::set_threads(o.threads);
  // --mesh names the ranks: in-process, that many threads.
  if (!o.mpi && o.sync.mesh_ranks > 0) o.ranks = o.sync.mesh_ranks;
  NullBuffer null_buffer;
  std::ostream quiet(&null_buffer);
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  auto flight_file = [&](int rank) { return o.run_dir.empty() ? std::string() : flight_path(o.run_dir, rank); };
  if (o.mpi) {
    if (!comm::mpi::available())
      fail("parallax was launched by mpirun but built without MPI: rebuild with MPI (libopenmpi-dev)");
    if (o.link_gbps > 0) fail("--link-gbps limits in-process links; under mpirun the network is real");
    if (o.ranks != 1)
      fail("--ranks {} starts in-process ranks; under mpirun the ranks are the MPI processes (give -np to mpirun)",
           o.ranks);
    comm::mpi::init(nullptr, nullptr, {.timeout = timeout});
    comm::Communicator& world = comm::mpi::world();
    world.set_timeout(timeout);
    FlightRecorder recorder(flight_file(world.rank()), world.rank(), world.size());
    // The peers' heartbeats are read from their flight files; without a
    // run directory only the waits' timeouts detect a silent rank.
    Watchdog watchdog({.timeout = timeout,
                       .stuck =
                           [&recorder](const std::string& reason) {
                             // Blocked where no wait polls (the MPI library's own collective): end the job.
                             recorder.set_error(reason);
                             recorder.set_phase(RankPhase::failed);
                             std::cerr << fmt::format("error: rank {}: {}\n", recorder.rank(), reason);
                             comm::mpi::abort(1);
                           }},
                      {{&recorder, &world.transport()}}, world.size(),
                      o.run_dir.empty() ? Watchdog::PulseReader() : pulses_from_files(o.run_dir));
    TrainResult result;
    try {
      std::ostream& rank_log = world.rank() == 0 ? log : quiet;
      result = run_recorded(o, world.size() > 1 ? &world : nullptr, rank_log, recorder);
    } catch (const Error& e) {
      // The other ranks would wait for this one until their timeout: end the job now.
      std::cerr << fmt::format("error: rank {}: {}\n", world.rank(), e.what());
      comm::mpi::abort(1);
    }
    comm::mpi::finalize();
    return result;
  }
  if (o.ranks == 1 && o.ps.mode.empty()) {
    FlightRecorder recorder(flight_file(0), 0, 1);
    return run_recorded(o, nullptr, log, recorder);
  }
  std::vector<std::unique_ptr<FlightRecorder>> recorders;
  std::vector<Watchdog::Local> locals;
  for (int r = 0; r < o.ranks; ++r) {
    recorders.push_back(std::make_unique<FlightRecorder>(flight_file(r), r, o.ranks));
    locals.push_back({.recorder = recorders.back().get()});
  }
  Watchdog watchdog({.timeout = timeout}, locals, o.ranks, {});
  std::vector<TrainResult> results(static_cast<size_t>(o.ranks));
  comm::InprocOptions inproc;
  inproc.link_gbps = o.link_gbps;
  inproc.communicator.timeout = timeout;
  comm::run_inproc(
      o.ranks,
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
        results[rank] = run_recorded(o, &world, rank_log, *recorders[rank]);
      },
      inproc);
  return results[0];
}

}  // namespace px
