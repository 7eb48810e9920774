// The simulator's discrete-event replay (plan/simulate.h has the contract):
// the instruction lists of the replayed ranks, each main thread and
// progress lane moved one instruction at a time in the order of their
// clocks. Internal to plan/: simulate() checks the request, then replays.
#pragma once

#include "plan/simulate.h"

namespace px::plan {

Simulation replay(const SimulationRequest& request);

}  // namespace px::plan
