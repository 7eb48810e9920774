// Folding a group of any size onto a power of two, for recursive doubling and
// halving-doubling (as MPICH does): with q = the largest power of two <= p
// and extra = p - q, the first 2·extra ranks pair up; each even rank hands its
// buffer to the odd rank above it (one extra step, n elements) and sits out,
// then gets the result back at the end (one more step). Participants are
// renumbered 0..q-1.
#pragma once

#include "comm/algorithms.h"
#include "comm/reduction.h"

namespace px::comm::detail {

struct PowerOfTwo {
  int q = 1;       // participants
  int extra = 0;   // p - q
  int index = -1;  // my index among participants, -1 if I sit out

  PowerOfTwo(int p, int r) {
    while (q * 2 <= p) q *= 2;
    extra = p - q;
    if (r < 2 * extra) index = r % 2 == 1 ? r / 2 : -1;
    else index = r - extra;
  }
  // Group rank of participant i.
  int rank_of(int i) const { return i < extra ? 2 * i + 1 : i + extra; }
};

// Pre-step: even ranks below 2·extra send, their odd partners reduce
// (lower rank's data first). `temp` holds n elements.
inline void fold_in(Communicator& comm, const PowerOfTwo& fold, Buffer data, Reduction op,
                    void* temp, uint32_t tag, std::string_view collective) {
  const int r = comm.rank();
  if (r >= 2 * fold.extra || data.count == 0) return;
  const Step step{collective, 0};
  if (fold.index < 0) {
    Request send = comm.isend(r + 1, tag, data.data, data.bytes());
    comm.wait(send, step);
  } else {
    Request recv = comm.irecv(r - 1, tag, temp, data.bytes());
    comm.wait(recv, step);
    const void* sources[2] = {temp, data.data};
    reduce_many(data.data, sources, 2, data.count, data.dtype, op);
  }
}

// Post-step: the odd partners return the result.
inline void fold_out(Communicator& comm, const PowerOfTwo& fold, Buffer data, uint32_t tag,
                     std::string_view collective, int step_index) {
  const int r = comm.rank();
  if (r >= 2 * fold.extra || data.count == 0) return;
  const Step step{collective, step_index};
  Request request = fold.index < 0 ? comm.irecv(r + 1, tag, data.data, data.bytes())
                                   : comm.isend(r - 1, tag, data.data, data.bytes());
  comm.wait(request, step);
}

}  // namespace px::comm::detail
