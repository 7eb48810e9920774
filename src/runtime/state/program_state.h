// Where a rank's Program keeps the global parameters and their optimizer
// state: the shard-run mapping a checkpoint writes and reads through. A
// parameter's local tensor is its model-axis shard (the mesh axes but the
// data axis split it); under ZeRO, a rank holds its block of every bucket,
// so a parameter's state on it is a run [begin, end) of the local tensor.
// Pure functions of the Program: no communication.
#pragma once

#include <map>
#include <string>

#include "parallel/program.h"
#include "parallel/shard.h"

namespace px {

// The part of parameter `param` inside this rank's block of its bucket, in
// local elements [begin, end) (begin == end: none), and where `begin` sits
// in the shard buffers.
struct BucketPiece {
  int64_t begin = 0, end = 0;
  int64_t shard_offset = 0;
};
BucketPiece bucket_piece(const parallel::Program& program, const parallel::ParamLayout& param);

// Elements [begin, end) of the rank's model shard of `param`, placed in the global tensor.
parallel::ShardRun run_of(const parallel::Program& program, const parallel::ParamLayout& param, int64_t begin,
                          int64_t end);
// Whether this rank writes its copy of `param`'s run to a checkpoint: it
// sits at coordinate 0 of every axis that replicates it (`split_over_data`:
// ZeRO gives each rank of the data path, data x context or data x expert
// ranks, its own run; `every_copy`: every copy it holds,
// for a directory other hosts do not see). Pipeline stages write the
// parameters they own.
bool writes_copy(const parallel::Program& program, const parallel::ParamLayout& param, bool split_over_data,
                 bool every_copy);
// This rank's model shard of the whole tensor `whole` (px::Error naming the
// parameter when the shape differs).
Tensor local_of(const parallel::Program& program, const Tensor& whole, const parallel::ParamLayout& param);
// Whether the model axes split the parameter.
inline bool model_split(const parallel::ParamLayout& param) { return param.shape != param.global_shape; }
std::map<std::string, const parallel::ParamLayout*> layouts_by_name(const parallel::Program& program);

}  // namespace px
