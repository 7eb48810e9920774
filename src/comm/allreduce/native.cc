// Native allreduce: hands the call to the MPI library (MPI_Allreduce on this
// group), the yardstick the other algorithms are benchmarked against.
#include "comm/algorithms.h"
#include "core/error.h"

namespace px::comm::detail {

void allreduce_native(Communicator& comm, Buffer data, Reduction op) {
  NativeCollectives* native = comm.transport().native();
  if (!native)
    fail("allreduce(native) needs the MPI transport; this communicator runs on '{}'",
         comm.backend());
  if (comm.size() == 1 || data.count == 0) return;
  native->allreduce(comm.members(), data.data, data.count, data.dtype,
                    op == Reduction::avg ? Reduction::sum : op);
}

}  // namespace px::comm::detail
