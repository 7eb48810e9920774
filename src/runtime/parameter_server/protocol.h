// The parameter-server layout and wire protocol shared by servers and workers
// (docs/parameter_server.md). Ranks 0..K-1 are servers, ranks K..R-1 workers
// (worker w is rank K + w). The parameters, flattened in ParamStore order to
// N floats, are cut into K contiguous shards by comm::block; server j owns
// shard j and its optimizer state.
//
// Per worker clock c (one step on its rows of global batch c), for every server j:
//   worker -> j  kPullRequest  PullRequest{c}
//   j -> worker  kPullHeader   PullHeader{complete clocks}     once the mode's gate allows
//   j -> worker  kPullParams   shard j of the parameters       (count_j floats)
//   worker -> j  kPushHeader   PushHeader{c, rows, loss, staleness}
//   worker -> j  kPushGradient shard j of the weighted gradient (count_j floats)
// At the end, to rank 0: servers j > 0 send kGatherHeader + kGatherTensors
// (parameters, then each optimizer slot, of their shard); the first worker
// sends its data-order state (kDataStateSize, kDataState).
#pragma once

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
  kPullRequest = 1,
  kPullHeader,
  kPullParams,
  kPushHeader,
  kPushGradient,
  kGatherHeader,
  kGatherTensors,
  kDataStateSize,
  kDataState,
};

struct PullRequest {
  int64_t clock = 0;
};

struct PullHeader {
  // Clocks every worker has pushed to this server (updates of clocks
  // 0 .. complete_clocks-1 are in the parameters that follow).
  int64_t complete_clocks = 0;
};

struct PushHeader {
  int64_t clock = 0;
  int64_t rows = 0;            // rows of the worker's shard (0: an empty shard, nothing to apply)
  double weighted_loss = 0;    // the worker's mean loss x rows / global batch
  int64_t max_staleness = 0;   // the largest staleness the worker has computed with so far
};

struct GatherHeader {
  int64_t updates = 0;  // optimizer updates the server applied (optimizer steps)
};

}  // namespace px::ps
