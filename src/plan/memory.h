// What a rank's Program holds in memory at its fullest, in the executor's
// allocation order: the persistent buffers, the optimizer's state and the
// step's batch, every buffer instance from its first write to its Free,
// and every activation from its production to its last read
// (parallel/lower/liveness.h); a view shares its input's storage. The
// simulator reports it per rank, and the trainer's memory guard checks it
// against the machine before allocating anything (runtime/fault/memory_guard.h).
#pragma once

#include "core/dtype.h"
#include "parallel/lower/liveness.h"
#include "parallel/program.h"

namespace px::plan {

struct ProgramMemory {
  // Every job of a progress lane done when its instruction is: the peak of
  // a run whose collectives are inline, and the least an overlapped one has.
  double peak_bytes = 0;
  // Each job holding what it reads (a freed bucket, a gather's staged
  // input) until the main thread waits for it: the most an overlapped run
  // holds at once.
  double held_peak_bytes = 0;
  double activation_peak_bytes = 0;  // the values of the local graphs alone
  // Of them, those forward made (the executor's count: what a training
  // run reports as forward activations). A view counts its input's storage.
  double forward_activation_peak_bytes = 0;
  double stash_bytes = 0;            // activations alive when the first backward node runs
};

// `optimizer_slots`: float32 state per updated element (AdamW 2, SGD
// momentum 1). Every tensor counts in the dtype the Program gives it.
ProgramMemory program_memory(const parallel::Program& program, const parallel::Liveness& liveness,
                             int optimizer_slots);

}  // namespace px::plan
