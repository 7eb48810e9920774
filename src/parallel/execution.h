// How a rank runs a Program, nothing the Program decides: the one struct
// runtime's ProgramExecutor runs by and plan's simulator replays with.
// Which lane an instruction takes, its group, when it may start (its
// `after`, deferred or not), its priority and slices and the collective
// algorithm are all the Program's (parallel/program.h).
#pragma once

namespace px::parallel {

struct ExecutionOptions {
  // Progress-lane collectives on a progress thread while compute continues
  // (more than one rank); otherwise each runs inline where the program
  // lists it (and P3's slices and priorities change nothing).
  bool overlap = true;
  // Keep timings: the executor's compute and communication records
  // (ProgramExecutor::take_trace, for the steps run with set_tracing(true)),
  // the simulator's events.
  bool trace = false;
  bool operator==(const ExecutionOptions&) const = default;
};

}  // namespace px::parallel
