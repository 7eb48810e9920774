#include "parallel/compose.h"

#include <fmt/ranges.h>

#include "core/error.h"
#include "graph/precision.h"
#include "parallel/context_parallel.h"
#include "parallel/expert_parallel.h"
#include "parallel/tensor_parallel.h"

namespace px::parallel {
namespace {

// The request's parts on the job's ranks: mesh {pp, dp, cp, tp}.
Strategy from_parts(const StrategyRequest& r, const CompositionInputs& in) {
  const int tp = r.tensor_parallel, pp = r.pipeline_parallel, cp = r.context_parallel, ep = r.expert_parallel;
  if (tp < 1) fail("--tp {} must be >= 1", tp);
  if (pp < 1) fail("--pp {} must be >= 1", pp);
  if (cp < 1) fail("--cp {} must be >= 1", cp);
  if (ep < 1) fail("--ep {} must be >= 1", ep);
  if (r.mesh_ranks > 0 && r.mesh_ranks != in.ranks) fail("--mesh names {} ranks; this job has {}", r.mesh_ranks, in.ranks);
  if (in.ranks % (tp * pp * cp * ep) != 0)
    fail("--pp {}{}{} x --tp {} does not divide the job's {} ranks", pp, ep > 1 ? fmt::format(" x --ep {}", ep) : "",
         cp > 1 ? fmt::format(" x --cp {}", cp) : "", tp, in.ranks);
  const int dp = in.ranks / (pp * ep * cp * tp);
  Strategy s = tp > 1 || r.sequence_parallel
                   ? tensor_parallel(*in.graph, dp, tp, in.batch_inputs, r.sequence_parallel)
                   : data_parallel(dp, in.batch_inputs);
  if (cp > 1) s = with_context(std::move(s), *in.graph, cp, {.method = r.context_method, .balance = r.context_balance});
  if (ep > 1) s = with_experts(std::move(s), *in.graph, ep);
  s.zero_stage = r.zero_stage;
  s.micro_batches = r.micro_batches;
  s.precision = r.precision;
  s.lowering.bucket_bytes = r.bucket_bytes;
  s.lowering.compression = r.compression;
  s.lowering.recompute = r.recompute;
  s.lowering.overlap_model_gradients = r.overlap_model_gradients;
  s.lowering.overlap_expert_exchanges = r.overlap_expert_exchanges;
  s.pipeline = r.pipeline;  // without stages validate names what needs them
  if (pp > 1) s = with_pipeline(std::move(s), pp, r.pipeline);
  // P3 updates each parameter as soon as its own gradient is in, and every
  // gradient is its own job with its own priority.
  if (r.p3_slice_bytes > 0) {
    s.lowering.global_norm = false;
    s.lowering.bucket_bytes = 0;
  }
  return s;
}

Strategy from_file(const StrategyRequest& r, const CompositionInputs& in) {
  bool records_precision = false;
  Strategy s = load_strategy(r.strategy_file, &records_precision);
  if (!records_precision) s.precision = r.precision;
  if (s.mesh.ranks() != in.ranks)
    fail("strategy '{}' has mesh {} of {} ranks; this job has {}", r.strategy_file, s.mesh.str(), s.mesh.ranks(), in.ranks);
  return s;
}

// The axis tensor parallelism splits values along: one that seeds place
// values on, other than the data and context axes, of more than one rank
// ("" if none).
std::string model_axis(const Strategy& s) {
  for (const PlacementSeed& seed : s.seeds)
    if (seed.axis != s.data_axis && seed.axis != s.context.axis && seed.axis != kExpertAxis &&
        s.mesh.size(seed.axis) > 1)
      return seed.axis;
  return "";
}

// Each field on its own: names, ranges.
void validate_fields(const Strategy& s) {
  s.mesh.axis(s.data_axis);  // names the mesh when the axis is missing
  for (const PlacementSeed& seed : s.seeds) {
    s.mesh.axis(seed.axis);
    if (seed.placement.kind == Placement::Kind::partial)
      fail("strategy: seed '{}' is {} on axis '{}': a value is seeded S(d) or B (partial values come out of ops)",
           seed.value, seed.placement.str(), seed.axis);
  }
  if (s.zero_stage < 0 || s.zero_stage > 3)
    fail("strategy: ZeRO stage {} is not available: expected 0 (off), 1 (optimizer state sharded), 2 (and "
         "gradients) or 3 (and parameters)",
         s.zero_stage);
  if (s.micro_batches < 1) fail("strategy: micro_batches {} must be >= 1", s.micro_batches);
  if (s.lowering.bucket_bytes < 0) fail("strategy: bucket_bytes {} must be >= 0", s.lowering.bucket_bytes);
  if (s.lowering.p3_slice_bytes < 0)
    fail("strategy: p3_slice_bytes {} must be >= 0 (0: no P3)", s.lowering.p3_slice_bytes);
  if (s.lowering.local_momentum < 0 || s.lowering.local_momentum >= 1)
    fail("strategy: local_momentum {} must be in [0, 1)", s.lowering.local_momentum);
  if (s.pipeline.virtual_stages < 1) fail("strategy: virtual_stages {} must be >= 1", s.pipeline.virtual_stages);
  check_row_shares(s.row_shares, s.row_ranks(), "strategy: row_shares");
}

// Context parallelism with the other parts.
void validate_expert_overlap(const Strategy& s) {
  if (!s.lowering.overlap_expert_exchanges) return;
  const std::string axis(kExpertAxis);
  if (s.expert_ranks() <= 1)
    fail("strategy: overlapping expert exchanges (--overlap-experts) needs expert parallelism: an expert axis '{}' of "
         "at least 2 ranks (--ep), not {}",
         axis, s.expert_ranks());
  if (s.micro_batches < 2)
    fail("strategy: overlapping expert exchanges (--overlap-experts) interleaves two micro-batches: expected "
         "--micro-batches >= 2, got {}",
         s.micro_batches);
  if (s.pipeline_ranks() > 1)
    fail("strategy: overlapping expert exchanges (--overlap-experts) does not combine with a pipeline ({} stages) "
         "yet: its schedule orders the micro-batches",
         s.pipeline_ranks());
  if (s.zero_stage >= 2 && s.data_ranks() * s.expert_ranks() > 1)
    fail("strategy: overlapping expert exchanges (--overlap-experts) and ZeRO-{} do not combine: ZeRO-2/3 reduce "
         "each micro-batch's gradients before the next one's begin (ZeRO-1 or 0 do)",
         s.zero_stage);
}

void validate_experts(const Strategy& s) {
  validate_expert_overlap(s);
  if (s.expert_ranks() <= 1) return;
  const std::string axis(kExpertAxis);
  if (s.data_axis == axis || s.pipeline.axis == axis || s.context.axis == axis)
    fail("strategy: the expert axis '{}' is also the data, pipeline or context axis", axis);
  if (s.context_ranks() > 1)
    fail("strategy: expert parallelism (axis '{}' of {} ranks) and context parallelism (axis '{}' of {} ranks) do "
         "not combine yet: choose one",
         axis, s.expert_ranks(), s.context.axis, s.context_ranks());
  if (s.lowering.compression.lossy())
    fail("strategy: gradient compression ({}) and expert parallelism (axis '{}') do not combine yet: choose one",
         s.lowering.compression.to_string(), axis);
  if (s.lowering.p3_slice_bytes > 0)
    fail("strategy: P3 and expert parallelism (axis '{}') do not combine yet: choose one", axis);
  for (const PlacementSeed& seed : s.seeds)
    if (seed.axis == axis && seed.placement != Placement::S(0))
      fail("strategy: seed '{}' is {} along the expert axis '{}'; expert weights are split S(0) there and every "
           "other value is left B",
           seed.value, seed.placement.str(), axis);
}

void validate_context(const Strategy& s) {
  if (s.context_ranks() <= 1) return;
  if (s.context.axis == s.data_axis) fail("strategy: the context axis '{}' is also the data axis", s.context.axis);
  if (s.context.axis == s.pipeline.axis)
    fail("strategy: the context axis '{}' is also the pipeline axis", s.context.axis);
  if (s.lowering.compression.lossy())
    fail("strategy: gradient compression ({}) and context parallelism (axis '{}' of {} ranks) do not combine yet: "
         "choose one",
         s.lowering.compression.to_string(), s.context.axis, s.context_ranks());
  if (s.lowering.p3_slice_bytes > 0)
    fail("strategy: P3 and context parallelism (axis '{}' of {} ranks) do not combine yet: choose one",
         s.context.axis, s.context_ranks());
  if (const std::string axis = model_axis(s); !axis.empty() && s.context.method == ContextMethod::all_to_all)
    fail("strategy: context parallelism by all-to-all (axis '{}') and tensor parallelism (axis '{}' of {} ranks) "
         "both split attention's heads and do not combine yet: choose one",
         s.context.axis, axis, s.mesh.size(axis));
}

// Pipeline stages with the other parts.
void validate_pipeline(const Strategy& s) {
  const int stages = s.pipeline_ranks();
  if (stages <= 1) {
    if (s.pipeline.virtual_stages > 1)
      fail("strategy: {} virtual stages need a pipeline axis '{}' of more than one rank in mesh {}",
           s.pipeline.virtual_stages, s.pipeline.axis, s.mesh.str());
    if (!s.pipeline.stage_cuts.empty())
      fail("strategy: stage cuts ({}) need a pipeline axis '{}' of more than one rank in mesh {}",
           fmt::join(s.pipeline.stage_cuts, ","), s.pipeline.axis, s.mesh.str());
    return;
  }
  if (s.pipeline.axis == s.data_axis) fail("strategy: the pipeline axis '{}' is also the data axis", s.pipeline.axis);
  for (const PlacementSeed& seed : s.seeds)
    if (seed.axis == s.pipeline.axis)
      fail("strategy: seed '{}' places a value along the pipeline axis '{}'; stages split the graph, not values",
           seed.value, seed.axis);
  if (s.zero_stage > 2)
    fail("strategy: ZeRO-3 does not combine with pipeline stages (it would gather every parameter once per "
         "micro-batch and chunk); use ZeRO-1 or -2 over '{}'",
         s.data_axis);
  if (s.lowering.compression.lossy())
    fail("strategy: gradient compression ({}) does not combine with pipeline stages yet",
         s.lowering.compression.to_string());
  // Names an M the schedule cannot take, with the nearest valid values.
  make_pipeline_schedule(s.pipeline.schedule, stages, s.micro_batches, s.pipeline.virtual_stages);
}

// P3 (Jayarajan et al. 2019) updates each layer as soon as its gradient is
// reduced, whole, on the data axis alone.
void validate_p3(const Strategy& s, const StrategyUse& use) {
  if (use.grad_clip > 0)
    fail("P3 updates each layer as soon as its gradient arrives; --grad-clip {} needs every gradient first "
         "(give --grad-clip 0)",
         use.grad_clip);
  if (s.lowering.global_norm)
    fail("P3 updates each layer as soon as its gradient arrives; the program computes a global gradient norm "
         "first (clipping needs every gradient): lower it without (global_norm false, --grad-clip 0)");
  if (s.zero_stage > 0)
    fail("ZeRO-{} and P3 do not combine: P3 defers whole-parameter updates to the next forward", s.zero_stage);
  if (s.lowering.compression.lossy())
    fail("P3 and gradient compression ({}) do not combine yet: choose one", s.lowering.compression.to_string());
  if (s.pipeline_ranks() > 1)
    fail("P3 and pipeline stages ('{}' of {} ranks) do not combine yet: choose one", s.pipeline.axis,
         s.pipeline_ranks());
  if (const std::string axis = model_axis(s); !axis.empty())
    fail("P3 and tensor parallelism (axis '{}' of {} ranks) do not combine yet: choose one", axis, s.mesh.size(axis));
}

}  // namespace

Strategy data_parallel(int ranks, const std::vector<std::string>& batch_inputs) {
  Strategy s;
  s.mesh = DeviceMesh::data_parallel(ranks);
  for (const std::string& name : batch_inputs) s.seeds.push_back({name, "dp", Placement::S(0)});
  return s;
}

Strategy data_tensor_mesh(int dp, int tp, const std::vector<std::string>& batch_inputs) {
  if (dp < 1 || tp < 1) fail("tensor parallelism: dp={} and tp={} must be >= 1", dp, tp);
  Strategy s;
  s.mesh = DeviceMesh({{"dp", dp}, {"tp", tp}});
  for (const std::string& name : batch_inputs) s.seeds.push_back({name, "dp", Placement::S(0)});
  return s;
}

Strategy tensor_parallel(const Graph& graph, int dp, int tp, const std::vector<std::string>& batch_inputs,
                         bool sequence_parallel) {
  Strategy s = data_tensor_mesh(dp, tp, batch_inputs);
  for (PlacementSeed& seed : megatron_seeds(graph, "tp", sequence_parallel)) s.seeds.push_back(std::move(seed));
  return s;
}

Strategy with_context(Strategy base, const Graph& graph, int ranks, ContextOptions context) {
  std::vector<MeshAxis> axes;
  for (const MeshAxis& a : base.mesh.axes()) {
    axes.push_back(a);
    if (a.name == base.data_axis) axes.push_back({context.axis, ranks});
  }
  base.mesh = DeviceMesh(std::move(axes));
  for (PlacementSeed& seed : context_parallel_seeds(graph, context, ranks)) base.seeds.push_back(std::move(seed));
  base.context = std::move(context);
  return base;
}

Strategy with_pipeline(Strategy base, int stages, PipelineOptions pipeline) {
  std::vector<MeshAxis> axes{{pipeline.axis, stages}};
  for (const MeshAxis& a : base.mesh.axes()) axes.push_back(a);
  base.mesh = DeviceMesh(std::move(axes));
  base.pipeline = std::move(pipeline);
  return base;
}

Strategy with_experts(Strategy base, const Graph& graph, int ranks) {
  std::vector<MeshAxis> axes;
  for (const MeshAxis& a : base.mesh.axes()) {
    axes.push_back(a);
    if (a.name == base.data_axis) axes.push_back({std::string(kExpertAxis), ranks});
  }
  base.mesh = DeviceMesh(std::move(axes));
  for (PlacementSeed& seed : expert_parallel_seeds(graph, ranks)) base.seeds.push_back(std::move(seed));
  return base;
}

Strategy compose(const StrategyRequest& request, const CompositionInputs& inputs) {
  PX_CHECK(inputs.graph != nullptr, "compose: no graph");
  Strategy s = request.strategy_file.empty() ? from_parts(request, inputs) : from_file(request, inputs);
  // --p3-slice-kb on a strategy file's lowering too (one that computes a
  // global norm is refused by validate, naming both).
  if (request.p3_slice_bytes > 0) s.lowering.p3_slice_bytes = request.p3_slice_bytes;
  // --row-shares on a strategy file's split too.
  if (!request.row_shares.empty()) s.row_shares = request.row_shares;
  // Sparsified gradients with SGD momentum (DGC's momentum correction, Lin
  // et al. 2018): the momentum moves into the ranks, before compression,
  // and the optimizer applies the aggregated velocity without momentum of
  // its own (the trainer zeroes it).
  using comm::compression::Method;
  const Method method = s.lowering.compression.method;
  if (s.data_ranks() > 1 && (method == Method::topk || method == Method::threshold) && inputs.sgd_momentum > 0 &&
      s.lowering.local_momentum == 0)
    s.lowering.local_momentum = inputs.sgd_momentum;
  validate(s, {.grad_clip = inputs.grad_clip});
  return s;
}

void validate(const Strategy& s, const StrategyUse& use) {
  validate_fields(s);
  if (s.zero_stage > 0 && s.lowering.compression.lossy())
    fail("strategy: ZeRO-{} and gradient compression ({}) do not combine: compression exchanges whole gradients",
         s.zero_stage, s.lowering.compression.to_string());
  if (s.zero_stage > 0 && !s.lowering.updates)
    fail("strategy: ZeRO-{} shards the optimizer; a program without updates keeps whole gradients (zero_stage 0)",
         s.zero_stage);
  if (const std::string axis = model_axis(s); !axis.empty() && s.lowering.compression.lossy())
    fail("strategy: gradient compression ({}) and tensor parallelism (axis '{}' of {} ranks) do not combine yet: "
         "choose one",
         s.lowering.compression.to_string(), axis, s.mesh.size(axis));
  validate_pipeline(s);
  validate_context(s);
  validate_experts(s);
  if (s.lowering.p3_slice_bytes > 0) validate_p3(s, use);
}

}  // namespace px::parallel
