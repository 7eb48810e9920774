// What one rank's Program costs, as a reader of a lowering wants it beside
// the instruction list: the bytes the rank sends per mesh axis and kind of
// collective (sends included), its liveness peak and the step time a
// replay of every rank predicts. The golden Programs end with this footer
// (tests/parallel/golden/), so a lowering change shows its cost change in
// the same diff.
//
//   cost: rank 1 of mesh {dp:2}
//   cost: bytes dp allreduce 30980 (8 instructions)
//   cost: liveness peak 148072 bytes
//   cost: step 262.24 us (FakeEstimator: 1 us a node, ...)
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "parallel/program.h"
#include "plan/cluster.h"
#include "plan/estimator.h"

namespace px::plan {

struct AxisBytes {
  double bytes = 0;  // this rank sends per step
  int instructions = 0;
  bool operator==(const AxisBytes&) const = default;
};

struct ProgramCost {
  int rank = 0;
  std::string mesh;  // "{dp:2}"
  // (axis name, collective kind or "send") -> what the rank sends.
  std::map<std::pair<std::string, std::string>, AxisBytes> bytes;
  double peak_bytes = 0;  // plan/memory.h's peak over the rank's liveness (AdamW's two state slots)
  double step_seconds = 0;
  bool operator==(const ProgramCost&) const = default;
};

// The bytes one rank sends for instruction `instr` of `program` (0 for
// what sends nothing): its stamped wire bytes (parallel/program.h).
double instr_bytes_sent(const parallel::Program& program, size_t instr);

// `programs` is every rank of the mesh in rank order (lower_all); the cost
// is rank `rank`'s, with the step replayed on `cluster` by `estimator`.
ProgramCost program_cost(const std::vector<parallel::Program>& programs, int rank, const ClusterSpec& cluster,
                         const CostEstimator& estimator);

// "cost: ..." lines, one fact a line (the form above); `estimator_name`
// says what timed the step.
std::string cost_footer(const ProgramCost& cost, const std::string& estimator_name);

// The footer the golden Programs and `parallax lower --cost` print: rank
// `rank`'s cost, the step timed by a FakeEstimator of round figures (1 us
// a node, 0.1 ns a memory byte, 10 us + 1 ns a byte a message) on one node
// of the mesh's devices, so the time moves only when the Program does.
std::string program_footer(const std::vector<parallel::Program>& programs, int rank);

}  // namespace px::plan
