// --inject-fault: a rank that dies, freezes or is lost for good, as a real
// process would; and the wall clock restarts are timed by.
#include "runtime/fault/fault_injection.h"

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "core/error.h"

namespace px {

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// --inject-fault: this rank dies or freezes now.
void inject_fault_now(const InjectedFault& fault, bool mpi, const std::string& run_dir, FlightRecorder* recorder,
                      comm::Communicator* group) {
  const bool hang = fault.mode == "hang", lost = fault.mode == "lost";
  // A rank that will not come back says so where `parallax launch` looks
  // (a real cluster's health check would).
  if (lost && !run_dir.empty()) {
    std::filesystem::create_directories(run_dir + "/lost");
    std::ofstream(fmt::format("{}/lost/rank{}", run_dir, recorder->rank()))
        << "lost at step " << fault.step << "\n";
  }
  if (mpi) {
    if (lost && run_dir.empty())
      fail("--inject-fault {}:{}:lost under mpirun needs --run-dir (or parallax launch)", fault.rank,
           fault.step);
    raise(hang ? SIGSTOP : SIGKILL);  // a real death or stop; the others' watchdogs see it
  }
  recorder->set_phase(lost ? RankPhase::lost : hang ? RankPhase::frozen : RankPhase::killed);
  if (!hang || group == nullptr) throw RankStopped{};
  // Frozen: answer nothing until the others have given up on this rank.
  while (group->transport().failure().empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  throw RankStopped{};
}

}  // namespace px
