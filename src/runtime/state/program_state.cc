#include "runtime/state/program_state.h"

#include <algorithm>

#include "core/error.h"

namespace px {

BucketPiece bucket_piece(const parallel::Program& p, const parallel::ParamLayout& param) {
  const parallel::BucketLayout& b = p.buckets[static_cast<size_t>(param.bucket)];
  const int64_t in_bucket = param.offset - b.offset;
  const int64_t lo = std::max(in_bucket, b.block_begin);
  const int64_t hi = std::min(in_bucket + param.shape.numel(), b.block_begin + b.block_count);
  if (lo >= hi) return {};
  return {lo - in_bucket, hi - in_bucket, b.shard_offset + (lo - b.block_begin)};
}

std::map<std::string, const parallel::ParamLayout*> layouts_by_name(const parallel::Program& program) {
  std::map<std::string, const parallel::ParamLayout*> by_name;
  for (const parallel::ParamLayout& p : program.params) by_name[p.name] = &p;
  return by_name;
}

Tensor local_of(const parallel::Program& program, const Tensor& whole, const parallel::ParamLayout& param) {
  if (whole.shape() != param.global_shape)
    fail("parameter '{}' has shape {}, the model expects {}", param.name, whole.shape(), param.global_shape);
  if (!model_split(param)) return whole;
  Tensor local = Tensor::empty(param.shape, DType::f32);
  const int data_axis = program.strategy.mesh.axis(program.strategy.data_axis);
  parallel::copy_to_local(whole, parallel::shard_pieces(param.global_shape, param.placement, program.strategy.mesh,
                                                        program.coords, data_axis),
                          local);
  return local;
}

parallel::ShardRun run_of(const parallel::Program& program, const parallel::ParamLayout& param, int64_t begin,
                          int64_t end) {
  const int data_axis = program.strategy.mesh.axis(program.strategy.data_axis);
  return parallel::ShardRun::of(
      param.global_shape, param.shape,
      parallel::shard_pieces(param.global_shape, param.placement, program.strategy.mesh, program.coords, data_axis),
      begin, end);
}

bool writes_copy(const parallel::Program& program, const parallel::ParamLayout& param, bool split_over_data,
                 bool every_copy) {
  const int data_axis = program.strategy.mesh.axis(program.strategy.data_axis);
  // ZeRO shards over the data path, which joins the context or expert axis.
  const int joined = parallel::joined_axis(program.strategy);
  for (size_t a = 0; a < program.coords.size(); ++a) {
    if (static_cast<int>(a) == program.pipeline.axis) {
      // Stages hold different parameters; one sharing a parameter with another is not its owner.
      for (const parallel::PipelineLayout::Param& p : program.pipeline.params)
        if (p.name == param.name && p.owner != program.coords[a]) return false;
      continue;
    }
    const bool split = static_cast<int>(a) == data_axis ? split_over_data
                       : static_cast<int>(a) == joined  ? split_over_data || param.placement[a].is_split()
                                                        : param.placement[a].is_split();
    if (!split && !every_copy && program.coords[a] != 0) return false;
  }
  return true;
}

}  // namespace px
