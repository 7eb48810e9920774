// Failure behaviour under mpirun: one rank (the victim, rank 1) is killed
// (SIGKILL) or frozen (stops in a signal handler) in the middle of a run of
// allreduces; every other rank must fail within the timeout with an error
// naming a peer rank, the collective and the step, print it and exit
// non-zero. A launch is one case; mpi_failure_test.cmake runs the cases and
// checks what the survivors printed.
//   mpirun --oversubscribe -np 3 px_comm_mpi_failure_test kill|freeze <algorithm> <timeout_ms>
// OpenMPI 4.1's mpirun does not end the job when the victim dies by a
// signal, but does once a survivor exits non-zero: so each survivor waits
// (two timeouts and a second) after printing, letting the others print theirs.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "comm/backends.h"
#include "comm/collectives.h"
#include "core/error.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kVictim = 1;
constexpr int kFreezeSeconds = 8;  // well past the survivors' timeout

// The frozen rank stops answering in the middle of whatever it was doing,
// then leaves without MPI_Finalize (the others have given up by then).
void freeze(int) {
  sleep(kFreezeSeconds);  // async-signal-safe
  _exit(0);
}

// Stops the victim 300 ms in, while its main thread is inside allreduce.
void arm_victim(bool kill) {
  signal(SIGUSR1, freeze);
  const pthread_t main_thread = pthread_self();
  std::thread([kill, main_thread] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    if (kill) raise(SIGKILL);
    pthread_kill(main_thread, SIGUSR1);
  }).detach();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 || (std::string(argv[1]) != "kill" && std::string(argv[1]) != "freeze")) {
    std::fprintf(stderr, "usage: %s kill|freeze <algorithm> <timeout_ms>\n", argv[0]);
    return 2;
  }
  using namespace px::comm;
  const bool kill = std::string(argv[1]) == "kill";
  const Algorithm algorithm = algorithm_from_name(argv[2]);
  const auto timeout = std::chrono::milliseconds(std::atoi(argv[3]));
  mpi::init(&argc, &argv, {.timeout = timeout});
  Communicator& world = mpi::world();
  const int rank = world.rank();
  std::vector<float> data((4 << 20) / 4, 1.0f);
  allreduce(world, data, Reduction::sum, {.algorithm = algorithm});  // a first call works
  barrier(world);
  if (rank == kVictim) arm_victim(kill);
  const auto start = Clock::now();
  try {
    for (int i = 0; i < 1000000; ++i)
      allreduce(world, data, Reduction::sum, {.algorithm = algorithm});
  } catch (const px::Error& error) {
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::printf("survivor rank %d failed after %.2f s: %s\n", rank, seconds, error.what());
    std::fflush(stdout);
    // Grace for the other survivors: one may be waiting on this rank (a ring
    // neighbour) and only time out a full timeout after this rank stopped
    // answering, later still on a loaded machine.
    std::this_thread::sleep_for(2 * timeout + std::chrono::seconds(1));
    std::_Exit(3);  // no MPI_Finalize: a peer is gone
  }
  std::printf("rank %d finished every allreduce: the victim was not missed\n", rank);
  mpi::finalize();
  return 1;
}
