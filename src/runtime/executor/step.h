// What a step of a ProgramExecutor takes and gives back, and the memory
// it holds between steps.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "comm/compression/compressor.h"
#include "core/tensor.h"
#include "graph/graph.h"

namespace px {

struct StepInput {
  // This rank's rows of every batch input (Program::batch_inputs), whole,
  // by its id in the forward graph (Program::batch_feeds): the executor
  // cuts the micro-batches.
  std::vector<std::pair<ValueId, Tensor>> feeds;
  // Rows of the global batch these feeds are part of: the step runs the
  // program lowered for that many (add_program). 0: the active program's.
  int64_t global_rows = 0;
  uint64_t seed = 0;  // dropout masks depend on (seed, global row)
  // Added to every micro-batch's global row (a one-rank program over a shard
  // of a larger batch, as a parameter-server worker runs).
  int64_t row_offset = 0;
  uint64_t step = 0;
  double lr = 0;
  double grad_clip = 0;  // clip the global gradient norm to this (0: off)
  // Fault injection (--inject-nan): this rank's loss and first gradient
  // become NaN, as a corrupted batch would make them.
  bool poison = false;
};

struct StepResult {
  double loss = 0;       // the global loss (summed over every rank's rows)
  double grad_norm = 0;  // before clipping (0 without a global norm)
  // The global norm was not finite (some rank's loss or gradient was NaN or
  // infinite): no parameter or optimizer state changed. Every rank sees the
  // same norm, so all skip together. Programs without a global norm (P3)
  // cannot tell before their updates and never skip.
  bool skipped = false;
  int64_t peak_bytes = 0;  // this rank's tensor bytes at most alive during the step
  // This rank's gradient bytes handed to the transport, and what a float32
  // ring allreduce of the same gradients sends (2(p-1)/p * 4n).
  comm::compression::WireStats wire;
  // Per mesh axis: bytes this rank posted to send this step, counted by the
  // axis' communicator (whatever algorithm each collective used).
  std::vector<int64_t> axis_bytes;
  std::vector<std::vector<Tensor>> outputs;  // per micro-batch: Program::outputs
  // The most bytes of forward activations (values forward nodes made or
  // this rank received from an earlier stage) alive at once: what a
  // pipeline schedule keeps for backward.
  int64_t activation_peak_bytes = 0;
  // Pipelines: from the step's start to its last compute, and how much of
  // that this rank spent computing (the rest is its bubble).
  double pipeline_span_us = 0;
  double pipeline_busy_us = 0;
  // The main thread's computes and local passes (norm, clip, updates):
  // this rank's own work, its waits left out (its straggler score's input).
  double compute_us = 0;
};

// Bytes this rank holds between steps, and the most buffer bytes alive at once.
struct ExecutorMemory {
  int64_t parameters = 0;         // whole flat parameters, or the ZeRO-3 shard
  int64_t gradient_shard = 0;     // ZeRO: this rank's reduced block of every bucket
  int64_t gradient_buckets = 0;   // every gradient bucket at once (what ZeRO-0/1's accounting keeps)
  int64_t gradient_buffer_peak = 0;  // the most bucket-buffer bytes alive at once, measured
  int64_t gathered_parameter_peak = 0;  // ZeRO-3: the most gathered parameter bytes alive at once
  int64_t optimizer_state = 0;
};

}  // namespace px
