// The one rule's collective on a local tensor along one mesh axis
// (parallel/lower/reshard.h): what a Reshard instruction runs, and what
// turns a parameter's model-axis shard back into the whole tensor
// (checkpoints, evaluation).
#pragma once

#include "comm/collectives.h"
#include "comm/communicator.h"
#include "core/tensor.h"
#include "graph/placement.h"

namespace px {

// `in` placed `from` becomes `to`; `whole` is the value's local shape with
// this axis' split undone. Collective over `comm` (every rank of the axis
// calls it).
Tensor reshard_tensor(comm::Communicator& comm, const Tensor& in, const Placement& from, const Placement& to,
                      const Shape& whole, const comm::CollectiveOptions& options = {});

// Along the data axis a batch value's rows follow the row split
// (parallel/row_split.h: by shares, uneven counts in rank order), not the
// block rule: S(0) -> B gathers every rank's rows, the counts exchanged
// first (a rank may hold none); px::Error naming both when they do not add
// up to `whole_rows`.
Tensor gather_batch_rows(comm::Communicator& comm, const Tensor& in, int64_t whole_rows,
                         const comm::CollectiveOptions& options = {});

}  // namespace px
