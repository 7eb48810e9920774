// The parameter-server layout and wire protocol shared by servers and workers
// (docs/parameter_server.md). Ranks 0..K-1 are servers, ranks K..R-1 workers
// (worker w is rank K + w). The parameters, flattened in ParamStore order to
// N floats, are cut into K contiguous shards by comm::block; server j owns
// shard j and its optimizer state.
//
// Per worker clock c (one step on its rows of global batch c), for every server j:
//   worker -> j  kWorkerHeader WorkerHeader{pull, c}
//   j -> worker  kPullHeader   PullHeader{complete clocks}     once the mode's gate allows
//   j -> worker  kPullParams   shard j of the parameters       (count_j floats)
//   worker -> j  kWorkerHeader WorkerHeader{push, c, rows, loss, staleness}
//   worker -> j  kPushGradient shard j of the weighted gradient (count_j floats)
// Everything a worker sends a server goes through one header tag, so a server
// keeps exactly one receive posted per worker and learns from the header what
// comes next: in bsp with backup workers a worker may pull a server again (it
// lagged behind the others) or stop after a pull (it fell behind to the end),
// and no receive may be left posted for a message that never comes.
// bsp with backup workers and K > 1: server 0 picks the workers whose pushes
// make each clock's update and sends servers j > 0 a kDecision.
// At the end, to rank 0: servers j > 0 send kGatherHeader + kGatherTensors
// (parameters, then each optimizer slot, of their shard); the first worker
// sends its data-order state (kDataStateSize, kDataState).
#pragma once

#include <cstddef>
#include <cstdint>

#include "comm/buffer.h"

namespace px::ps {

struct Layout {
  int servers = 1;      // K
  int workers = 1;      // W = ranks - K
  int64_t params = 0;   // N scalars, all tensors flattened in ParamStore order

  bool is_server(int rank) const { return rank < servers; }
  int worker_of(int rank) const { return rank - servers; }
  int rank_of_worker(int worker) const { return servers + worker; }
  comm::Block shard(int server) const { return comm::block(params, servers, server); }
};

// Tags inside the parameter-server communicator (its own tag space, used for
// nothing else). Messages with equal tags between a pair match in order.
enum Tag : uint32_t {
  kWorkerHeader = 1,
  kPullHeader,
  kPullParams,
  kPushGradient,
  kDecision,
  kGatherHeader,
  kGatherTensors,
  kDataStateSize,
  kDataState,
};

// A pull request (kind pull: only `clock`) or a push (then kPushGradient follows).
struct WorkerHeader {
  enum Kind : int64_t { kPull = 0, kPush = 1 };
  Kind kind = kPull;
  int64_t clock = 0;           // pull: the clock the worker wants to compute; push: the clock computed
  int64_t rows = 0;            // push: rows of the worker's shard (0: an empty shard, nothing to apply)
  int64_t global_rows = 0;     // push: rows of the global batch the shard is of (an epoch's last may be partial)
  double weighted_loss = 0;    // push: the worker's mean loss x rows / global rows
  int64_t max_staleness = 0;   // push: the largest staleness the worker has computed with so far
};

struct PullHeader {
  // Updates of clocks 0 .. complete_clocks-1 are in the parameters that
  // follow. bsp: the clocks applied (a worker computes clock complete_clocks
  // next, skipping any it fell behind on); asp/ssp: the clocks every worker
  // has pushed to this server.
  int64_t complete_clocks = 0;
};

// kDecision (bsp, backup workers B > 0, K > 1), server 0 -> server j > 0:
// (1 + W - B) int64: the clock, then the workers whose pushes make its update,
// in increasing order.
inline size_t decision_size(const Layout& layout, int backup_workers) {
  return static_cast<size_t>(1 + layout.workers - backup_workers);
}

struct GatherHeader {
  int64_t updates = 0;  // optimizer updates the server applied (optimizer steps)
};

}  // namespace px::ps
