// The trainer's parts (trainer.cc and train_ranks.cc): one rank's whole
// job, and how an injected fault stops an in-process rank.
#pragma once

#include <ostream>

#include "comm/communicator.h"
#include "runtime/flight_recorder.h"
#include "runtime/trainer.h"

namespace px {

// An in-process rank that --inject-fault stopped: its thread ends quietly
// (a dead process tells nobody), and the others must notice its silence.
struct RankStopped {};

// One rank's whole job. `group` is the world (nullptr: one rank); only
// rank 0 writes logs, metrics and checkpoints (`log` is a null stream
// elsewhere). The executor records into `recorder`.
TrainResult train_rank(TrainOptions o, comm::Communicator* group, std::ostream& log, FlightRecorder* recorder);

}  // namespace px
