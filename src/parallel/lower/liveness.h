// Liveness over a Program's instruction list: after which instruction each
// value of a micro-batch and each instance of a flat buffer is dead. The
// executor frees by it (activations right after their last read, buffers at
// their Free) and a simulator takes its memory model from it.
//
// A buffer instance starts at a write that follows a read of the previous
// instance (a gradient bucket refilled by the next micro-batch, a parameter
// bucket gathered again for backward) and ends at its last read. Persistent
// buffers never die. Instructions are taken in step_order (program.h): a
// gradient bucket a deferred update reads lives on into the next step.
#pragma once

#include <vector>

#include "parallel/program.h"

namespace px::parallel {

struct Liveness {
  // Per instruction: values of its micro-batch's local graph read (or, never
  // read, produced) last by it. Parameters, fed inputs, the loss read by the
  // executor and the program's outputs are never listed.
  std::vector<std::vector<ValueId>> values;
  // Per instruction: non-persistent buffers whose instance it reads last.
  std::vector<std::vector<int>> buffers;
  // Per instruction: the buffers it (re)allocates (the first write of an instance).
  std::vector<std::vector<int>> allocates;
};

Liveness liveness(const Program& program);

}  // namespace px::parallel
