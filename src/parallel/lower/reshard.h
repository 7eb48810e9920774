// The one resharding rule (DESIGN.md): where a value's placement along a
// mesh axis changes between the op that produces it (or where it is
// stored) and what its consumer needs, this collective moves it:
//
//   from -> to     collective
//   P    -> B      allreduce
//   P    -> S(d)   reduce-scatter
//   S(d) -> B      allgather
//   S(d) -> S(e)   all-to-all
//   B    -> S(d)   local slice (free)
//
// Data parallelism needs nothing else: the loss P -> B, each weight
// gradient P -> B (or P -> S where ZeRO stores gradients sharded), and
// parameters stored S -> B before use (ZeRO-3) or after a sharded update
// (ZeRO-1/2). ZeRO shards a gradient bucket as one flat tensor, so "S" of a
// gradient or parameter there is S(0) of its bucket's concatenation.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "comm/collectives.h"
#include "graph/graph.h"
#include "parallel/lower/propagate.h"
#include "parallel/strategy.h"

namespace px::parallel {

enum class Resharding { none, allreduce, reduce_scatter, allgather, all_to_all, slice };

std::string_view resharding_name(Resharding resharding);
// The rule. px::Error for transitions no collective makes (B or S to P).
Resharding resharding(Placement from, Placement to);
// The collective a resharding runs (none for `none` and `slice`).
std::optional<comm::Collective> collective_of(Resharding resharding);

// Along the data axis at ZeRO stage `zero_stage`: where the optimizer
// wants a gradient (S(0) of its bucket from stage 1 on, else B) and where
// a parameter is stored (S(0) at stage 3, else B).
Placement gradient_storage(int zero_stage);
Placement parameter_storage(int zero_stage);

// Where one data-parallel training step changes a value's placement along
// the data axis.
struct Transition {
  enum class Site {
    loss,              // the step's loss, reported whole
    gradient,          // a weight gradient, reduced for the optimizer
    parameter_use,     // a parameter, from its storage to what its consumers need
    parameter_update,  // a parameter, from the updated shard back to its storage
  };
  Site site = Site::loss;
  ValueId value = kNoValue;  // the loss, the gradient, or the parameter
  Placement from, to;
  Resharding how = Resharding::none;
};

struct ParamGrad {
  ValueId param = kNoValue;
  ValueId grad = kNoValue;
};

// Every transition of the step along the data axis (index `data_axis` of
// the mesh). Along the other axes a gradient is resharded to its
// parameter's placement inside the graph (propagate.h's targets). `grads`
// may be empty (a program without backward).
std::vector<Transition> transitions(const Graph& graph, const Propagation& placement, int data_axis, ValueId loss,
                                    const std::vector<ParamGrad>& grads, const Strategy& strategy);

}  // namespace px::parallel
