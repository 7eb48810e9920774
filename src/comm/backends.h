// Entry points that create world Communicators over each backend:
//  - inproc: ranks are threads of this process (nothing to install or launch);
//  - mpi: ranks are MPI processes started by mpirun/srun. Built only when CMake
//    finds MPI; otherwise mpi::available() is false and mpi::init throws.
#pragma once

#include <functional>

#include "comm/communicator.h"

namespace px::comm {

struct InprocOptions {
  CommunicatorOptions communicator;
  // Each rank's outgoing link as a serial pipe of this many Gb/s (0:
  // unlimited, memcpy speed): a send of b bytes finishes at
  // max(now, link free) + 8b / (link_gbps · 1e9), and its receiver sees it
  // only then, so collectives take the time a NIC of that speed would.
  // Limited worlds share no memory (shared_memory algorithms are not
  // runnable), so every byte goes through the links.
  double link_gbps = 0;
  bool operator==(const InprocOptions&) const = default;
};

// Starts one thread per rank running body(world communicator of that rank),
// joins them and rethrows the first error. A rank that throws poisons the
// world: every other rank's wait fails at once with "peer rank R failed: ...".
void run_inproc(int world_size, const std::function<void(Communicator&)>& body,
                InprocOptions options = {});

namespace mpi {

// True when parallax was built with the MPI backend.
bool available();
struct MpiOptions {
  // The tag range used: 0 takes the library's MPI_TAG_UB; else at most
  // this (at least the standard's 32767), to test the folding of sequences
  // into the smallest range a library may offer.
  int tag_bound = 0;
  // The PMI-1 socket a PMI launcher (MPICH's hydra) gave this process, its
  // PMI_FD (-1: none). A rank that leaves without MPI_Finalize (MPICH
  // across hosts) tells the launcher over it that it has finalized.
  int pmi_fd = -1;
};

// MPI_Init_thread (if not yet initialized) and the world Communicator over a
// private duplicate of MPI_COMM_WORLD.
void init(int* argc, char*** argv, CommunicatorOptions options = {}, MpiOptions mpi = {});
bool initialized();
Communicator& world();
// Every rank of the world arrives, no rank busy while it waits: a barrier
// polled every few milliseconds, with no timeout (for ranks idle while one
// works alone for minutes, e.g. calibrate's kernel timings on rank 0,
// without taking its cores).
void wait_quietly_for_all();
// Frees shared windows and communicators, then MPI_Finalize.
void finalize();
// MPI_Abort on the world: ends every rank (used when one rank fails and the
// others would otherwise wait out their timeouts).
[[noreturn]] void abort(int code);

}  // namespace mpi
}  // namespace px::comm
