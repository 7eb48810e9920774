// The units the layer-wise and MCMC searches place on the tensor axis
// (parallel::split_units: lone layers and transformer blocks), each with
// its computes, parameters and activations in the model lowered data-
// parallel: one table both searches cost (plan/layer_search.h,
// plan/mcmc_search.h).
#pragma once

#include <string>
#include <vector>

#include "nn/model.h"
#include "parallel/program.h"
#include "parallel/split_units.h"
#include "plan/layer_placement.h"

namespace px::plan {

struct LayerUnit {
  parallel::SplitUnit split;
  // Its computes of micro-batch 0, in list order: nodes of the table's graph.
  std::vector<int> forward, backward;
  double params = 0;        // its parameters' elements
  double input_bytes = 0;   // lone: its input activation (this rank's rows); block: its output, reduced whole
  double output_bytes = 0;  // its output activation (this rank's rows)
  bool block() const { return split.block(); }
  const std::string& name() const { return split.name; }
};

struct UnitTable {
  parallel::Program program;  // the model lowered data-parallel over dp ranks
  std::vector<LayerUnit> units;  // in forward order
  // What no unit owns: computes (pooling, norms, the loss) and parameter elements.
  std::vector<int> rest_forward, rest_backward;
  double rest_params = 0;
  const Graph& graph() const { return program.graphs.front(); }
};

// The units of `model` on one data rank of `dp` (batch split by
// `batch_inputs`), their GEMMs costed in `precision` (the plan's).
UnitTable unit_table(const nn::Model& model, int dp, const std::vector<std::string>& batch_inputs,
                     Precision precision = Precision::fp32);

// One placement of the units on mesh {dp, tp} in `precision`: each unit's seeds (seed_layer).
parallel::Strategy placement_strategy(const std::vector<std::string>& batch_inputs, Precision precision, int dp, int tp,
                                      const std::vector<LayerUnit>& units,
                                      const std::vector<LayerPlacement>& placements);

}  // namespace px::plan
