// How a compressed allreduce moves a gradient (docs/compression.md's
// table), as the collectives it runs: fp16/bf16 ring-reduce half-width
// values; PowerSGD allreduces its factors P (rows x r) and Q (cols x r) as
// rings; int8, sign, top-k and threshold allgather every rank's payload
// and each rank decodes all p. The one account both the wire bytes the
// lowering stamps (comm/wire_bytes.h) and the simulator's times
// (plan/replay_calls.cc) are read from; the codec's own compute is the
// cost estimator's.
#pragma once

#include <vector>

#include "comm/collectives.h"
#include "comm/compression/spec.h"

namespace px::comm::compression {

struct CodecStep {
  Collective collective = Collective::allreduce;
  double bytes = 0;  // the collective's n (an allgather's: its output, every rank's payload)
  // Runs as a ring whatever the group's algorithm (PowerSGD's factors).
  bool ring = false;
  // Each rank's payload to every other, partners changing step by step:
  // its bytes count on the group's links (between hosts once it spans them).
  bool gathered = false;
};

// The steps of a compressed allreduce of a (rows x cols) gradient of
// `floats` values over `ranks` ranks; Method::none: the dense allreduce.
std::vector<CodecStep> codec_recipe(const Spec& codec, double floats, int64_t rows, int64_t cols, int ranks);

// One rank's payload for a compressed gradient of n floats that the
// methods allgather (int8, sign, top-k, threshold; threshold's density is
// taken as top-k's default 1%); 0 for the others.
double gathered_payload_bytes(const Spec& codec, double floats);

}  // namespace px::comm::compression
