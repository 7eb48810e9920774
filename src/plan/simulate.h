// The simulator: replays the Programs of every rank of a mesh as discrete
// events, the way runtime::ProgramExecutor would run them, on a cluster it
// never touches: no kernel runs and no model memory is allocated.
//
// Per rank there are the lanes the Program names (parallel/program.h):
// the main thread, which walks the instruction list in order (computes,
// accumulations, the norm, clips, updates; collectives and reshards on the
// compute lane inline; sends posted without waiting; receives waiting for
// their message; every instruction first waits for its `after`), and the
// progress lane, which runs its collectives in the order the main thread
// submits them (with overlap, as the executor does; without, they run
// inline). A collective meets the other members of its group by the
// group key and sequence number the lowering stamped, starts once every
// member has reached it and ends for all of them together; a message
// arrives its transfer time after it was sent. What each piece takes comes
// from a CostEstimator (plan/estimator.h), the link from where the group's
// ranks sit on the cluster (cluster.h); the bytes each rank sends are the
// instruction's stamped wire bytes.
//
// Memory is the executor's allocation order: the persistent buffers, the
// optimizer's state and the step's batch, every buffer instance from its first write to its
// Free, and every activation from its production to its last read
// (parallel/lower/liveness.h).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "parallel/execution.h"
#include "parallel/lower.h"
#include "parallel/program.h"
#include "plan/assumptions.h"
#include "plan/cluster.h"
#include "plan/deadline.h"
#include "plan/estimator.h"

namespace px::plan {

struct SimulationRequest {
  // Every rank of the mesh in rank order, or (symmetric replay) only the
  // representatives lower_representatives() returns: ranks that differ
  // only along the data and tensor axes run the same instructions at the
  // same times, so a collective over those axes starts once the replayed
  // members of its group have reached it, and costs what the whole group's does.
  const std::vector<parallel::Program>* programs = nullptr;
  const ClusterSpec* cluster = nullptr;
  const CostEstimator* estimator = nullptr;
  // How the ranks run their Programs: the executor's own options (overlap:
  // progress-lane collectives overlap the main thread; trace: keep events).
  parallel::ExecutionOptions execution;
  int optimizer_slots = 2;   // float32 state per updated element (AdamW: 2, SGD momentum: 1)
  // Expert parallelism: the rows the busiest expert rank receives over a
  // balanced routing's (1: even). Its routed exchanges move that many
  // times the rows, and its experts' GEMMs take that many times as long:
  // every rank waits for it at the exchange back. From a run's measured
  // load (expert_imbalance()) or assumed.
  double expert_imbalance = 1.0;
  // A planner's: the replay is given up (DeadlinePassed) once it passes.
  const Deadline* deadline = nullptr;
};

// The busiest of `ranks` expert ranks' share of the choices over an even
// share, from a layer's per-expert shares (a metrics line's "moe" load;
// they sum to 1): the experts in core/block.h's blocks, as the ranks hold
// them. 1 for an even load.
double expert_imbalance(const std::vector<double>& load, int ranks);

// One timed piece of the replay; `instr` is the executor's instruction id.
struct SimulatedEvent {
  int rank = 0;
  // Where the replay ran it, named as the Program names lanes: "compute"
  // (the main thread: computes, and collectives and reshards it blocks
  // on, progress-lane ones too without overlap), "progress:<axis>",
  // "p2p:<axis>" (a receive's wait).
  std::string lane;
  std::string name;
  double start = 0, duration = 0;  // seconds from the step's start
  int instr = -1;
  int64_t sequence = -1;  // a collective's or reshard's call on its group
};

// Per-rank vectors follow `programs` (the representatives in a symmetric
// replay); bytes_sent and flops count every rank of the mesh.
struct Simulation {
  double step_seconds = 0;
  std::vector<double> peak_bytes;     // per rank
  std::vector<double> activation_peak_bytes;  // per rank: the values of the local graphs alone
  std::vector<double> forward_activation_peak_bytes;  // per rank: of them, those forward made
  // Per rank: the values alive when its first backward compute starts (one
  // micro-batch: what its forward keeps for backward).
  std::vector<double> stash_bytes;
  std::vector<double> busy_seconds;   // per rank: computing
  std::vector<double> compute_span;   // per rank: from the start to its last compute
  std::vector<double> receive_wait;   // per rank: blocked on receives (a pipeline's bubbles)
  std::vector<double> progress_busy;  // per rank: its progress lane's collectives (their own time, not waits)
  double bubble_fraction = 0;         // idle share of the compute spans, over all ranks
  std::map<LinkClass, double> bytes_sent;  // over all ranks, by the link they used
  double flops = 0;                   // executed by every rank together
  Assumptions assumed;                // the reported step's largest GEMM, attention and collective
  std::vector<SimulatedEvent> trace;  // with request.execution.trace
};

// Every rank's Program of `strategy` (parallel/lower.h), in rank order.
std::vector<parallel::Program> lower_all(const parallel::LowerRequest& request, const parallel::Strategy& strategy);
// One Program per pipeline stage and context chunk (the ring's ranks send
// to each other; the balanced ring's do the same work): the ranks at
// coordinate 0 of every other axis (the data-parallel rank 0 holds the most
// rows when they split evenly). A symmetric replay of these predicts the
// whole mesh. Data ranks that differ from each other do not stand for one
// another: with row shares (Strategy::row_shares), or on a `heterogeneous`
// cluster (ranks of different speeds), every rank is lowered. A `deadline`
// is checked before each Program (DeadlinePassed).
std::vector<parallel::Program> lower_representatives(const parallel::LowerRequest& request,
                                                     const parallel::Strategy& strategy,
                                                     const Deadline* deadline = nullptr, bool heterogeneous = false);

// On a cluster whose ranks share the host's cores (the calibrated local
// spec), a compute slows down by how many ranks use the cores at once,
// which a pipeline's bubbles lower: replays with the profiled estimator
// until the time-average number of threads using the cores settles, at
// most four times: the ranks not blocked on a receive, plus, with an
// unlimited in-process transport, the ranks' progress threads while they
// run a collective (copies, adds and codecs on the cores; a rank on its
// main thread in one counts as busy already). Other clusters: one
// replay with request.estimator (their roofline when it is null).
Simulation simulate_sharing_cores(SimulationRequest request, const ProfiledEstimator::Options& options);

// px::Error when the programs' mesh does not fit the cluster, or the
// replay cannot finish (a rank waits for a message or collective no one
// sends or joins: each stuck rank's instruction is named).
Simulation simulate(const SimulationRequest& request);

}  // namespace px::plan
