// Figures every rank measured, gathered so that rank 0 can report them
// all: each pipeline stage's bubble and activation memory, each rank's
// peak tensor memory. Collective over the world: every rank calls them.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "parallel/program.h"
#include "parallel/strategy.h"
#include "runtime/train/pipeline_report.h"

namespace px {

// Every pipeline rank's measurements, as its rank at data and tensor
// coordinate 0 took them.
std::vector<StageMeasurement> gather_stage_measurements(comm::Communicator& world,
                                                        const parallel::Strategy& strategy,
                                                        const StageMeasurement& mine);

// Every rank's peak tensor bytes, in rank order.
std::vector<int64_t> gather_peak_bytes(comm::Communicator& world, int64_t mine);

// The bytes each host's ranks send to other hosts in a step, as their
// Programs account them (comm/wire_bytes.h), by host (Communicator::hosts);
// one entry on one host.
std::vector<double> gather_bytes_between_hosts(comm::Communicator& world, const parallel::Program& mine);

}  // namespace px
