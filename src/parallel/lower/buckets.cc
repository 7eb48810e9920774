// buckets: the flat parameter layout. Parameters are ordered by when
// backward completes their gradients and fused into buckets by the one
// bucket rule (comm/engine/bucket_plan.h); a bucket is a contiguous range of
// the flat layout, for gradients and parameters alike. ZeRO cuts every
// bucket into blocks, block(count, p, rank) on this rank: the rank's shard
// is its blocks, concatenated.
//
// Under bf16 mixed precision ZeRO-3 gathers the parameters only bf16 nodes
// read (GEMM weights: graph/precision.h's read_only_at_bf16) in bf16, half
// the bytes, and the others (LayerNorm, biases, an embedding) in float32;
// the shards, the optimizer and the gradients stay float32. A bucket is
// gathered whole into one buffer of one dtype, so each kind is bucketed
// apart: the bucket rule runs over the bf16 parameters in ready order and
// over the float32 ones, and the flat layout then places the buckets in
// the order they complete. A step keeps about fp32's number of
// collectives (a bucket of biases and LayerNorm parameters spans layers)
// instead of a new bucket wherever the kind changes.
#include <algorithm>
#include <limits>

#include "comm/buffer.h"
#include "comm/engine/bucket_plan.h"
#include "core/error.h"
#include "graph/precision.h"
#include "parallel/lower/passes.h"
#include "parallel/shard.h"

namespace px::parallel::passes {
namespace {

// Rank of each parameter's first use among the forward nodes (0 is needed first).
std::vector<int> forward_order(const Graph& graph, int forward_nodes) {
  std::vector<int> order(graph.values().size(), std::numeric_limits<int>::max());
  int next = 0;
  for (int n = 0; n < forward_nodes; ++n)
    for (ValueId in : graph.nodes()[static_cast<size_t>(n)].inputs)
      if (graph.value(in).kind == Value::Kind::param && order[static_cast<size_t>(in)] == std::numeric_limits<int>::max())
        order[static_cast<size_t>(in)] = next++;
  return order;
}

}  // namespace

int add_buffer(Program& program, Buffer buffer) {
  program.buffers.push_back(std::move(buffer));
  return static_cast<int>(program.buffers.size() - 1);
}

namespace {

// Every parameter this rank holds, in the order backward completes its
// gradient (declaration order without backward), laid out flat.
void lay_out_parameters(const Context& c, Program& program) {
  const Graph& graph = c.graph;
  const std::vector<int> first_use = forward_order(graph, c.forward_nodes);
  // When this rank's part of each gradient is complete: its last part's producer.
  std::vector<int> ready(graph.values().size(), -1);
  for (const auto& [value, grad] : c.work.gradient_parts) {
    const ValueId param = c.grads[static_cast<size_t>(grad)].param;
    ready[static_cast<size_t>(param)] = std::max(ready[static_cast<size_t>(param)], graph.value(value).producer);
  }
  for (const ParamGrad& pg : c.grads) {
    if (!c.work.holds[static_cast<size_t>(pg.param)]) continue;  // another pipeline stage's
    const Value& value = graph.value(pg.param);
    const AxisPlacements& placement = c.placement.of_value[static_cast<size_t>(pg.param)];
    program.params.push_back({.value = pg.param,
                              .grad = pg.grad,
                              .name = value.name,
                              .shape = local_shape(value.spec.shape, placement, c.strategy.mesh, c.coords, c.data_axis),
                              .global_shape = value.spec.shape,
                              .placement = placement,
                              .weight_decay = value.weight_decay,
                              .sign_rate = value.sign_rate,
                              .offset = 0,
                              .bucket = -1,
                              .forward_order = first_use[static_cast<size_t>(pg.param)]});
  }
  // Ready order: by the node completing each gradient (declaration order without backward).
  if (program.training) {
    auto producer = [&](const ParamLayout& p) { return ready[static_cast<size_t>(p.value)]; };
    std::stable_sort(program.params.begin(), program.params.end(),
                     [&](const ParamLayout& a, const ParamLayout& b) { return producer(a) < producer(b); });
  }
  for (ParamLayout& p : program.params) {
    p.offset = program.param_count;
    program.param_count += p.shape.numel();
  }
}

// Per program parameter: ZeRO-3 gathers it in bf16 (see the top).
std::vector<bool> gathers_in_bf16(const Context& c, const Program& program) {
  std::vector<bool> bf16(program.params.size(), false);
  if (c.zero_stage < 3 || c.data_size <= 1) return bf16;
  const std::vector<bool> only = read_only_at_bf16(c.graph);
  for (size_t i = 0; i < bf16.size(); ++i) {
    // An expert weight on one data rank is gathered over nobody: it stays float32.
    const ValueId v = program.params[i].value;
    bf16[i] = only[static_cast<size_t>(v)] && !(c.expert_weight(v) && c.strategy.data_ranks() == 1);
  }
  return bf16;
}

// Parameter indices per bucket by the one bucket rule, each kind (`bf16`,
// and under expert parallelism the expert weights, whose gradients reduce
// over another group) apart, the buckets in the order their last member's
// gradient is ready.
std::vector<std::vector<int>> bucket_members(const Context& c, const Program& program, const std::vector<bool>& bf16) {
  std::vector<bool> shared(c.graph.values().size(), false);
  for (const auto& [value, group] : c.work.shared) shared[static_cast<size_t>(value)] = true;
  // A compressed gradient is exchanged alone (PowerSGD needs its matrix).
  const int64_t bucket_bytes = c.strategy.lowering.compression.lossy() ? 0 : c.strategy.lowering.bucket_bytes;
  std::vector<std::vector<int>> buckets;
  auto kind_of = [&](size_t i) { return (bf16[i] ? 1 : 0) + (c.expert_weight(program.params[i].value) ? 2 : 0); };
  for (int kind = 0; kind < 4; ++kind) {
    std::vector<int> of_kind;
    for (size_t i = 0; i < program.params.size(); ++i)
      if (kind_of(i) == kind) of_kind.push_back(static_cast<int>(i));
    std::vector<int64_t> counts;
    for (int i : of_kind) counts.push_back(program.params[static_cast<size_t>(i)].shape.numel());
    // A parameter pipeline stages share is a bucket alone: the stages sum
    // just its gradient.
    std::vector<bool> starts(counts.size(), false);
    for (size_t k = 0; k < counts.size(); ++k) {
      if (!shared[static_cast<size_t>(program.params[static_cast<size_t>(of_kind[k])].value)]) continue;
      starts[k] = true;
      if (k + 1 < counts.size()) starts[k + 1] = true;
    }
    for (const comm::BucketSpan& span : comm::plan_buckets(counts, bucket_bytes, starts))
      buckets.emplace_back(of_kind.begin() + span.first, of_kind.begin() + span.last + 1);
  }
  std::stable_sort(buckets.begin(), buckets.end(),
                   [](const std::vector<int>& a, const std::vector<int>& b) { return a.back() < b.back(); });
  return buckets;
}

// The one bucket rule over the flat layout (re-laid bucket by bucket when
// the kinds are bucketed apart), and (ZeRO) this rank's block of each bucket.
void cut_buckets(const Context& c, Program& program, std::vector<bool>& bf16) {
  const std::vector<std::vector<int>> members = bucket_members(c, program, bf16);
  std::vector<ParamLayout> laid;
  std::vector<bool> laid_bf16;
  program.param_count = 0;
  for (const std::vector<int>& bucket : members)
    for (int i : bucket) {
      laid.push_back(program.params[static_cast<size_t>(i)]);
      laid.back().offset = program.param_count;
      program.param_count += laid.back().shape.numel();
      laid_bf16.push_back(bf16[static_cast<size_t>(i)]);
    }
  program.params = std::move(laid);
  bf16 = std::move(laid_bf16);
  const bool sharded = c.strategy.zero_stage >= 1 && c.data_size > 1;
  int next = 0;
  for (const std::vector<int>& bucket : members) {
    BucketLayout b{.offset = program.params[static_cast<size_t>(next)].offset, .count = 0,
                   .priority = std::numeric_limits<int>::max()};
    b.experts = c.expert_weight(program.params[static_cast<size_t>(next)].value);
    for (size_t k = 0; k < bucket.size(); ++k, ++next) {
      ParamLayout& p = program.params[static_cast<size_t>(next)];
      p.bucket = static_cast<int>(program.buckets.size());
      b.members.push_back(next);
      b.count += p.shape.numel();
      b.priority = std::min(b.priority, p.forward_order);
    }
    if (sharded) {
      // An expert bucket's shards are its expert-data group's: the data axis alone.
      const int data_coord = c.coords[static_cast<size_t>(c.data_axis)];
      const comm::Block block = b.experts ? comm::block(b.count, c.strategy.data_ranks(), data_coord)
                                          : comm::block(b.count, c.data_size, c.data_rank);
      b.block_begin = block.begin;
      b.block_count = block.count;
      b.shard_offset = program.shard_count;
      program.shard_count += block.count;
    }
    program.buckets.push_back(b);
  }
}

// Storage: whole parameters, or (ZeRO-3) this rank's blocks of them; a
// gradient buffer per bucket, the shard, the loss.
void add_storage(const Context& c, Program& program, const std::vector<bool>& bf16) {
  const bool sharded = c.strategy.zero_stage >= 1 && c.data_size > 1;
  auto members_of = [&](int64_t base, const std::vector<int>& indices) {
    std::vector<BufferMember> members;
    for (int i : indices) {
      const ParamLayout& p = program.params[static_cast<size_t>(i)];
      members.push_back({p.value, p.name, p.offset - base, p.shape.numel()});
    }
    return members;
  };
  std::vector<int> all(program.params.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  if (c.strategy.zero_stage >= 3 && c.data_size > 1)
    program.param_shard_buffer = add_buffer(
        program, {.kind = Buffer::Kind::param_shard, .name = "param.shard", .count = program.shard_count,
                  .persistent = true});
  else
    program.params_buffer = add_buffer(program, {.kind = Buffer::Kind::params, .name = "params",
                                                 .count = program.param_count, .persistent = true,
                                                 .members = members_of(0, all)});
  // Without updates the caller takes the reduced gradients after the step.
  const bool keep_gradients = !c.strategy.lowering.updates;
  for (size_t b = 0; b < program.buckets.size(); ++b) {
    BucketLayout& bucket = program.buckets[b];
    bucket.grad_buffer = add_buffer(program, {.kind = Buffer::Kind::grad_bucket,
                                              .name = fmt::format("grad.bucket{}", b),
                                              .count = bucket.count,
                                              .persistent = keep_gradients,
                                              .bucket = static_cast<int>(b),
                                              .members = members_of(bucket.offset, bucket.members)});
    if (program.param_shard_buffer >= 0)
      bucket.param_buffer = add_buffer(program, {.kind = Buffer::Kind::param_bucket,
                                                 .name = fmt::format("param.bucket{}", b),
                                                 .count = bucket.count,
                                                 .dtype = bf16[static_cast<size_t>(bucket.members.front())]
                                                              ? DType::bf16
                                                              : DType::f32,
                                                 .bucket = static_cast<int>(b),
                                                 .members = members_of(bucket.offset, bucket.members)});
  }
  if (sharded)
    program.grad_shard_buffer = add_buffer(program, {.kind = Buffer::Kind::grad_shard, .name = "grad.shard",
                                                     .count = program.shard_count, .persistent = true});
  // The executor reads the loss after the step.
  if (c.loss != kNoValue)
    program.loss_buffer = add_buffer(program, {.kind = Buffer::Kind::loss, .name = "loss", .count = 1, .persistent = true});
}

}  // namespace

void buckets(const Context& c, Program& program) {
  lay_out_parameters(c, program);
  std::vector<bool> bf16 = gathers_in_bf16(c, program);
  if (program.training) cut_buckets(c, program, bf16);
  add_storage(c, program, bf16);
}

}  // namespace px::parallel::passes
