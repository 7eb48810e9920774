// Lowering: graph + strategy -> the Program one rank runs. The program's
// local graph is the global graph with every value re-specified to this
// rank's shard (S(d) dims cut, B and P whole) and the shape rules re-run;
// attributes are shard-invariant (docs/architecture.md), so every node runs
// unchanged on its shard. The communication the placements imply is listed
// beside it: each weight gradient that comes out P is reduced, fused into
// buckets in the order backward produces them.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"
#include "parallel/strategy.h"

namespace px::parallel {

// One weight gradient to reduce: where it lives in the rank's flat gradient
// arena (bucket-contiguous, in ready order) and how urgent it is.
struct GradientSync {
  ValueId param = kNoValue;
  ValueId grad = kNoValue;
  std::string name;       // the parameter's name
  int64_t count = 0;      // elements
  int64_t offset = 0;     // in the arena
  int bucket = 0;
  int forward_order = 0;  // rank of the param's first use in forward: 0 is needed first
};

struct Bucket {
  int64_t offset = 0;  // in the arena
  int64_t count = 0;
  std::vector<int> members;  // indices into Program::grads
  int priority = 0;          // the most urgent member's forward_order
};

struct Program {
  Graph local;                  // ValueIds equal the global graph's
  ValueId loss = kNoValue;      // this rank's summand (P) of the loss
  std::vector<GradientSync> grads;  // in the order backward produces them
  std::vector<Bucket> buckets;      // in ready order
  int64_t arena_count = 0;
  std::vector<ValueId> wanted() const;  // loss, then every grad in ready order
};

// Re-specifies `graph` for shard `index` of `shards`: S(d) values get
// block(n, shards, index) of dim d, except batch inputs (S(0) inputs), which
// get `batch_rows` rows (a micro-batch of the rank's shard).
Graph localize(const Graph& graph, const std::vector<Placement>& placement, int shards, int index,
               int64_t batch_rows);

// `param_grads`: (param, gradient) pairs from build_backward.
Program lower(const Graph& graph, ValueId loss, const std::vector<std::pair<ValueId, ValueId>>& param_grads,
              const Strategy& strategy, int rank, int64_t batch_rows);

}  // namespace px::parallel
