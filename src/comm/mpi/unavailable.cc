// The MPI entry points of a build without MPI (CMake did not find it).
#include "comm/backends.h"
#include "core/error.h"

namespace px::comm::mpi {
namespace {
[[noreturn]] void not_built() {
  fail("parallax was built without MPI; install an MPI (e.g. libopenmpi-dev) and reconfigure "
       "with -DPX_WITH_MPI=ON");
}
}  // namespace

bool available() { return false; }
void init(int*, char***, CommunicatorOptions, MpiOptions) { not_built(); }
bool initialized() { return false; }
Communicator& world() { not_built(); }
void wait_quietly_for_all() { not_built(); }
void finalize() {}
void abort(int code) { std::exit(code); }

}  // namespace px::comm::mpi
