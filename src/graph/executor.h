// Executor: runs a Graph on one device. It runs only the nodes needed for
// the requested values, allocates each activation when produced and frees it
// right after its last use, and reports the peak of live tensor memory.
// Parameters and inputs are bound by the caller; requested values are
// returned. It serves graph-level code and tests (the gradient harness);
// training runs lowered Programs through runtime::ProgramExecutor, which
// knows ranks, buffers and collectives.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "graph/graph.h"

namespace px {

class Executor {
 public:
  Executor(const Graph& graph, std::vector<ValueId> wanted);

  // `bound[v]` holds every param and input the schedule reads (indexed by
  // ValueId; other entries ignored). Returns tensors for `wanted`, in order.
  std::vector<Tensor> run(const std::vector<Tensor>& bound, const OpContext& context = {});

  // Peak live tensor bytes (process-wide tracker) during the last run().
  int64_t peak_bytes() const { return peak_bytes_; }
  const std::vector<int>& schedule() const { return schedule_; }

 private:
  const Graph& graph_;
  std::vector<ValueId> wanted_;
  std::vector<int> schedule_;                  // node indices, in order
  std::vector<std::vector<ValueId>> frees_;    // per schedule step: values dead after it
  std::vector<bool> keep_;                     // per value: wanted or bound, never freed
  int64_t peak_bytes_ = 0;
};

}  // namespace px
