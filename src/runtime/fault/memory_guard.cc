#include "runtime/fault/memory_guard.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "core/error.h"
#include "parallel/lower/liveness.h"
#include "parallel/memory_ledger.h"
#include "plan/memory.h"

namespace px {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// A number from a cgroup v2 file ("max" or missing: none).
double cgroup_value(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return -1;
  try {
    return std::stod(text);
  } catch (const std::exception&) {
    return -1;
  }
}

std::string advice() { return "try --tp, --pp, --zero or --recompute, fewer ranks on this machine, or a smaller model"; }

}  // namespace

AvailableMemory available_memory() {
  AvailableMemory out{.bytes = -1, .source = "MemAvailable in /proc/meminfo"};
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    std::istringstream fields(line);
    std::string key;
    double kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") out.bytes = kib * 1024;
  }
  const double limit = cgroup_value("/sys/fs/cgroup/memory.max");
  if (limit > 0) {
    const double used = std::max(0.0, cgroup_value("/sys/fs/cgroup/memory.current"));
    if (out.bytes < 0 || limit - used < out.bytes) out = {limit - used, "the cgroup's memory.max less its use"};
  }
  return out;
}

MachineRanks machine_ranks(bool mpi, int local_ranks, int world) {
  return {.world = world, .here = mpi ? std::max(1, local_ranks) : world};
}

void check_model_fits(const nn::ModelConfig& model, MachineRanks ranks, int optimizer_slots) {
  if (model.kind != "gpt") return;  // the classifiers' parameters are small; check 2 covers them
  const AvailableMemory available = available_memory();
  if (available.bytes < 0) return;
  const auto parameters = static_cast<double>(nn::parameter_count(model.gpt));
  // Parameters, gradients and optimizer state sharded over every rank at
  // best (ZeRO-3): this machine's ranks hold their share.
  const parallel::StateBytes state = parallel::state_bytes(parameters, 3, ranks.world, optimizer_slots);
  const double need = (state.parameters + state.gradients + state.optimizer_state) * ranks.here;
  if (need > available.bytes)
    fail("the model needs {:.1f} GiB on this machine for its {:.3g} parameters, their gradients and {} optimizer "
         "slot{} alone (even sharded over all {} ranks), and this machine has {:.1f} GiB available ({}); {}",
         need / kGiB, parameters, optimizer_slots, optimizer_slots == 1 ? "" : "s", ranks.world, available.bytes / kGiB,
         available.source, advice());
}

double program_peak_bytes(const parallel::Program& program, int optimizer_slots, int state_copies) {
  // A copy of the state: this rank's parameters and their optimizer slots
  // (whole model shards: an upper bound under ZeRO, whose copies are blocks).
  const double state = static_cast<double>(program.param_count) * sizeof(float) * (1 + optimizer_slots);
  return plan::program_memory(program, parallel::liveness(program), optimizer_slots).peak_bytes + state_copies * state;
}

void check_program_fits(const parallel::Program& program, MachineRanks ranks, int optimizer_slots, int state_copies) {
  const AvailableMemory available = available_memory();
  if (available.bytes < 0) return;
  const double peak = program_peak_bytes(program, optimizer_slots, state_copies);
  const int here = ranks.here;
  if (peak * here > available.bytes)
    fail("the run needs {:.2f} GiB per rank at its peak ({} rank{} on this machine: {:.2f} GiB), and this machine "
         "has {:.2f} GiB available ({}); {}",
         peak / kGiB, here, here == 1 ? "" : "s", peak * here / kGiB, available.bytes / kGiB, available.source,
         advice());
}

}  // namespace px
