// What a pipeline did, for people: after a run the measured bubble and
// activation memory of every stage beside the schedule's analytical values
// (the schedule itself: parallel::describe_pipeline).
//
// Bubble: the stages' idle share of the pipelined span (from the step's
// start to the last compute of any stage, so a stage done early idles to
// its end): 1 − Σ busy / (P × span); with unit costs GPipe and 1F1B idle
// (P−1)/(M+P−1) of it. Activation memory: a stage keeps one micro-batch's
// stashed activations A (what its forward makes that its backward reads)
// per micro-batch in flight; GPipe has all M in flight, 1F1B at most P − r
// on stage r (P on the first); in general the most forwards whose
// backward has not finished, counted from the stage's action list.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/program.h"

namespace px {

// The most micro-batch chunks pipeline rank `rank` has run forward but not
// yet finished backward (W, under zero-bubble) at any point of its list.
int max_in_flight(const parallel::PipelineSchedule& schedule, int rank);

// One pipeline rank's measurements over the measured steps.
struct StageMeasurement {
  double busy_us = 0;  // computing
  double span_us = 0;  // the pipelined part of the steps
  int64_t activation_peak_bytes = 0;
  int64_t micro_batch_stash_bytes = 0;  // A: per micro-batch, all chunks of the rank
};

std::string describe_measured_pipeline(const parallel::PipelineLayout& pipeline,
                                       const std::vector<StageMeasurement>& stages);

}  // namespace px
