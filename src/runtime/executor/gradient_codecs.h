// Compressed gradients (parallel::Collective::codec): one codec per gradient
// collective of the program, in instruction order, with its error feedback
// (the compressor's residual, PowerSGD's Q) and, with DGC's momentum
// correction, this rank's velocity. Every program a run switches between
// has the same gradient collectives, so one set of codecs serves them all.
// A step whose norm is not finite puts every codec back as it was before.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/compression/compressor.h"
#include "parallel/program.h"
#include "runtime/state/param_store.h"
#include "runtime/state/safetensors.h"

namespace px {

class GradientCodecs {
 public:
  // None unless a gradient collective is lossy and the data path has more
  // than one rank.
  GradientCodecs(const parallel::Program& program, int data_path_ranks);
  // Another program of the run is active (px::Error when its gradient
  // collectives differ in number).
  void bind(const parallel::Program& program);
  bool compressing() const { return !codecs_.empty(); }

  // The exchange of instruction `id`'s gradient through its codec, as a job
  // for either lane; nullptr: the instruction has no codec. `agreed` is the
  // flag the ranks agreed on before it on its lane (the program's Finite
  // and its max allreduce): set, the gradient must not enter the
  // error-feedback state, and NaN goes on to the norm, so every rank skips
  // the step (rollback).
  std::function<void(comm::Communicator&)> exchange(int id, std::span<float> input, const float* agreed,
                                                    uint64_t step, double momentum);
  // A bad step: every codec as before its exchange.
  void rollback();
  // Bytes this step's exchanges handed to the transport.
  uint64_t bytes_sent() const;
  void begin_step();

  // Every rank's state as "rank<r>.<param>.<entry>" (collective over `data_path`).
  NamedTensors gather_state(comm::Communicator& data_path) const;
  // This rank's entries of a state saved at the same rank count with the
  // same compression; px::Error names a missing or mis-sized entry.
  void load_state(const SafetensorsFile& file, int rank);

 private:
  struct Codec {
    std::string param;  // the one parameter whose gradient it exchanges
    comm::compression::GradientCompressor compressor;
    std::vector<float> velocity;  // empty without local momentum
    // The state before this step's call, put back if the step is skipped.
    comm::compression::GradientCompressor::State state_before;
    std::vector<float> velocity_before;
    comm::compression::WireStats wire;  // this step's
  };
  std::vector<std::unique_ptr<Codec>> codecs_;  // one per gradient collective, in order
  std::vector<int> codec_of_;                   // per instruction of the active program (-1: none)
};

// Instruction ids of the program's gradient collectives (a gradient bucket's input), in order.
std::vector<int> gradient_collectives(const parallel::Program& program);

}  // namespace px
