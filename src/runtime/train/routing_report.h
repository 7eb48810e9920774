// A mixture of experts' routing as a training step reports it: per layer,
// each expert's share of the choices (before a capacity dropped any), the
// share a capacity dropped, and the two router losses. The metrics line's
// "moe" entry; the report draws the shares as a heat map over the steps and
// `parallax doctor` names an expert that took too much of them.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "nn/model.h"
#include "runtime/executor/step.h"

namespace px {

struct LayerRouting {
  int64_t layer = 0;
  std::vector<double> load;  // (E): shares of the step's choices, summing to 1
  double dropped = 0;        // share of the choices a capacity dropped
  double aux_loss = 0;       // as added to the objective (coefficient included)
  double z_loss = 0;
};

// The step's routing from its reported outputs (each layer's
// nn::RouterValues::stats, plan::reported_values' order, the last of each
// micro-batch's outputs), summed over the micro-batches. Collective over `group` (null: one rank): a pipeline's
// layers live on their stages, so every rank contributes the layers it
// holds and all get every layer.
std::vector<LayerRouting> step_routing(const nn::Model& model, const StepResult& step, comm::Communicator* group);

nlohmann::json routing_json(const std::vector<LayerRouting>& layers);

}  // namespace px
