// The memory guard: before a run allocates anything, whether each rank's
// peak fits the memory this machine has available, so an impossible
// configuration stops at once with a named error instead of allocating
// until the machine runs out (docs/fault_tolerance.md).
//
// Two checks, both against available_memory() shared by the ranks this
// machine runs (in-process ranks, or the MPI ranks of this node):
//   1. before the model's graph is built, from its config alone: the
//      parameters, gradients and optimizer state it needs even if sharded
//      over every rank (a model of 100000 layers is refused in a moment);
//   2. once the rank's Program is lowered, before the executor allocates:
//      its peak from liveness (plan/memory.h), the figure the planner
//      predicts within a few percent of the measured peak.
#pragma once

#include <string>

#include "nn/build_model.h"
#include "parallel/program.h"

namespace px {

struct AvailableMemory {
  double bytes = 0;
  std::string source;  // "MemAvailable in /proc/meminfo", "the cgroup's memory.max"
};

// What this process may still allocate: /proc/meminfo's MemAvailable, or
// the cgroup's limit less its use when that is lower.
AvailableMemory available_memory();

// The job's ranks and those of them sharing this machine's memory: in
// process every rank; under MPI the node's as the launcher tells
// (`local_ranks`; 0, unknown, counts as 1).
struct MachineRanks {
  int world = 1;
  int here = 1;
};
MachineRanks machine_ranks(bool mpi, int local_ranks, int world);

// Check 1; px::Error names the need, what is available and what to try.
void check_model_fits(const nn::ModelConfig& model, MachineRanks ranks, int optimizer_slots);

// The peak check 2 holds against the machine: the rank's Program counted
// by the memory ledger (plan::program_memory), with `state_copies` copies
// of its parameters and optimizer state held for checkpoints and restarts.
double program_peak_bytes(const parallel::Program& program, int optimizer_slots, int state_copies = 0);
// Check 2 for this rank's lowered Program (program_peak_bytes).
void check_program_fits(const parallel::Program& program, MachineRanks ranks, int optimizer_slots,
                        int state_copies = 0);

}  // namespace px
