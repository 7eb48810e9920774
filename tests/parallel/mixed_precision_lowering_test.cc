// What bf16 mixed precision changes in a Program: ZeRO-3 gathers the
// parameters only bf16 nodes read (the GEMM weights) in bf16 buckets, the
// rest (LayerNorm, biases, the embeddings GPT ties to its head) in float32
// ones; the shards, gradients and optimizer stay float32; the stamped wire
// bytes and the simulator's memory model count the gathered buffers at
// their dtype. Pipeline stages send a value in bf16 when every reader on
// the later stages reads it at bf16 precision. Under tensor parallelism a
// bf16 GEMM's partial output is reduced in bf16, as Megatron's is: half
// the bytes of each layer's allreduces (or reduce-scatters), while the
// loss's reductions stay float32.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "graph/precision.h"
#include "nn/gpt.h"
#include "nn/mlp.h"
#include "parallel/compose.h"
#include "parallel/lower.h"
#include "plan/memory.h"
#include "plan/simulate.h"

namespace px::parallel {
namespace {

// (B=4, T=8), vocabulary 64, C=16, two layers: every op of the real model.
nn::Model two_layer_gpt() {
  const nn::GptConfig config{.vocab = 64, .block = 8, .n_layer = 2, .n_head = 2, .n_embd = 16, .dropout = 0.1};
  return nn::build_gpt(config, 4, config.block, true);
}

// ZeRO-3 over `ranks`, in `precision` (the strategy's: the lowering stamps the graph).
std::vector<Program> zero3_programs(const nn::Model& model, int ranks, Precision precision) {
  const Strategy strategy = compose({.bucket_bytes = 4096, .zero_stage = 3, .micro_batches = 2, .precision = precision},
                                    {.graph = &model.graph,
                                     .batch_inputs = batch_input_names(model),
                                     .ranks = ranks});
  return plan::lower_all({.forward = &model.graph, .loss = model.loss}, strategy);
}

bool is_gemm_weight(const std::string& name) {
  for (const char* layer : {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"})
    if (name.ends_with(layer)) return true;
  return false;
}

// Stamped wire bytes of the step's parameter gathers.
int64_t gathered_bytes(const Program& p) {
  int64_t bytes = 0;
  for (const Instr& instr : p.instrs)
    if (const auto* c = std::get_if<Collective>(&instr.op); c && c->kind == comm::Collective::allgather)
      bytes += instr.wire.total();
  return bytes;
}

TEST(MixedPrecisionLowering, Zero3GathersExactlyTheGemmWeightsInBf16) {
  const std::vector<Program> programs = zero3_programs(two_layer_gpt(), 2, Precision::bf16);
  for (const Program& p : programs) {
    int bf16_buckets = 0;
    for (const BucketLayout& bucket : p.buckets) {
      const Buffer& gathered = p.buffers[static_cast<size_t>(bucket.param_buffer)];
      bf16_buckets += gathered.dtype == DType::bf16;
      for (int m : bucket.members) {
        const std::string& name = p.params[static_cast<size_t>(m)].name;
        EXPECT_EQ(gathered.dtype == DType::bf16, is_gemm_weight(name))
            << "rank " << p.rank << ": " << name << " gathered in " << dtype_name(gathered.dtype);
      }
    }
    // Per layer at 4 KiB: the MLP's two weights a bucket each, the
    // attention's two together (3 + 1 KiB); everything else one float32 bucket.
    EXPECT_EQ(bf16_buckets, 6) << "two layers' four GEMM weights in three buckets each";
    EXPECT_EQ(p.buckets.size(), 7u);
    // The master weights, the gradients and the optimizer's shards stay float32.
    for (const Buffer& b : p.buffers)
      if (b.kind != Buffer::Kind::param_bucket) {
        EXPECT_EQ(b.dtype, DType::f32) << b.name;
      }
  }
}

// Collectives of each kind in the step.
std::map<comm::Collective, int> collective_counts(const Program& p) {
  std::map<comm::Collective, int> counts;
  for (const Instr& instr : p.instrs)
    if (const auto* c = std::get_if<Collective>(&instr.op)) ++counts[c->kind];
  return counts;
}

// Each kind bucketed apart (parallel/lower/buckets.cc): bf16 adds no
// collective to fp32's step; a bucket wherever the kind changed along the
// ready order made 60 gathers and 34 reduce-scatters of this step's 28 and 14.
TEST(MixedPrecisionLowering, Zero3InBf16RunsAsManyCollectivesAsFp32) {
  const std::vector<Program> fp32 = zero3_programs(two_layer_gpt(), 2, Precision::fp32);
  const std::vector<Program> bf16 = zero3_programs(two_layer_gpt(), 2, Precision::bf16);
  for (size_t r = 0; r < 2; ++r) {
    const std::map<comm::Collective, int> f = collective_counts(fp32[r]), h = collective_counts(bf16[r]);
    EXPECT_EQ(h.at(comm::Collective::allgather), 28) << "rank " << r << ": 7 buckets, forward and backward, 2 micro-batches";
    EXPECT_EQ(h.at(comm::Collective::reduce_scatter), 14) << "rank " << r;
    EXPECT_EQ(h, f) << "rank " << r;
    EXPECT_EQ(bf16[r].buckets.size(), fp32[r].buckets.size()) << "rank " << r;
  }
}

// The bytes stamped here are what the executor's communicators count
// (tests/plan/conformance_test.cc runs this strategy in bf16 too).
TEST(MixedPrecisionLowering, Zero3GathersGemmWeightsInHalfTheBytes) {
  constexpr int kRanks = 2;
  const std::vector<Program> fp32 = zero3_programs(two_layer_gpt(), kRanks, Precision::fp32);
  const std::vector<Program> bf16 = zero3_programs(two_layer_gpt(), kRanks, Precision::bf16);
  for (int r = 0; r < kRanks; ++r) {
    const Program& f = fp32[static_cast<size_t>(r)];
    const Program& h = bf16[static_cast<size_t>(r)];
    // Elements this rank sends for the step's gathers, by kind: with two
    // ranks the ring sends the rank's block once.
    std::map<int, const BucketLayout*> bucket_of;  // param buffer -> its bucket
    for (const BucketLayout& b : h.buckets) bucket_of[b.param_buffer] = &b;
    int64_t weights = 0, others = 0;
    for (const Instr& instr : h.instrs) {
      const auto* c = std::get_if<Collective>(&instr.op);
      if (c == nullptr || c->kind != comm::Collective::allgather) continue;
      const BucketLayout& b = *bucket_of.at(c->output.buffer);
      const bool weight = is_gemm_weight(h.params[static_cast<size_t>(b.members.front())].name);
      (weight ? weights : others) += b.block_count;
      EXPECT_EQ(instr.wire.total(), b.block_count * (weight ? 2 : 4)) << h.str(&instr - h.instrs.data());
    }
    ASSERT_GT(weights, 3 * others) << "the GEMM weights are most of what is gathered";
    EXPECT_EQ(gathered_bytes(h), 2 * weights + 4 * others) << "rank " << r;
    // Against float32's step (whose buckets, cut otherwise, a gather or
    // two more span forward and backward): the weights' half is gone.
    const double expected = 1.0 - 0.5 * static_cast<double>(weights) / static_cast<double>(weights + others);
    EXPECT_NEAR(static_cast<double>(gathered_bytes(h)) / static_cast<double>(gathered_bytes(f)), expected, 0.02)
        << "rank " << r;
  }
}

TEST(MixedPrecisionLowering, Zero3MemoryModelCountsGatheredBucketsAtTheirDtype) {
  const std::vector<Program> fp32 = zero3_programs(two_layer_gpt(), 2, Precision::fp32);
  const std::vector<Program> bf16 = zero3_programs(two_layer_gpt(), 2, Precision::bf16);
  const Program& f = fp32[1];
  const Program& h = bf16[1];
  // The persistent float32 state is the same; what is gathered is smaller.
  EXPECT_EQ(h.buffers[static_cast<size_t>(h.param_shard_buffer)].bytes(),
            f.buffers[static_cast<size_t>(f.param_shard_buffer)].bytes());
  int64_t gathered = 0, weights = 0;
  for (const BucketLayout& b : h.buckets) {
    const Buffer& buffer = h.buffers[static_cast<size_t>(b.param_buffer)];
    gathered += buffer.bytes();
    if (buffer.dtype == DType::bf16) weights += buffer.count;
  }
  EXPECT_EQ(gathered, 4 * h.param_count - 2 * weights);
  // The same program with its buckets gathered in float32: the model's
  // peak grows by the bf16 buckets alive at it, at most all of them.
  Program widened = h;
  for (Buffer& b : widened.buffers) b.dtype = DType::f32;
  const double bf16_peak = plan::program_memory(h, liveness(h), 2).peak_bytes;
  const double widened_peak = plan::program_memory(widened, liveness(widened), 2).peak_bytes;
  EXPECT_LT(bf16_peak, widened_peak);
  EXPECT_LE(widened_peak - bf16_peak, 2.0 * static_cast<double>(weights));
}

// The MLP cut before fc2: relu's output crosses. Its later readers are fc2
// and fc2's weight gradient (bf16 GEMM operands); relu_grad reads it on the
// first stage, in fp32. It is sent in bf16, its gradient comes back fp32.
std::vector<Program> mlp_pipeline(Precision precision) {
  const nn::Model model = nn::build_mlp({.inputs = 784, .hidden = {64, 32}, .classes = 10}, 8);
  const Strategy strategy = compose(
      {.pipeline_parallel = 2, .pipeline = {.stage_cuts = {"fc2"}}, .micro_batches = 2, .precision = precision},
                                    {.graph = &model.graph,
                                     .batch_inputs = batch_input_names(model),
                                     .ranks = 2});
  return plan::lower_all({.forward = &model.graph, .loss = model.loss}, strategy);
}

// Per rank: the wire bytes of its sends, in list order.
std::vector<int64_t> send_bytes(const Program& p) {
  std::vector<int64_t> bytes;
  for (const Instr& instr : p.instrs)
    if (std::holds_alternative<Send>(instr.op)) bytes.push_back(instr.wire.total());
  return bytes;
}

TEST(MixedPrecisionLowering, PipelineSendsValuesOnlyGemmsReadLaterInBf16) {
  const std::vector<Program> bf16 = mlp_pipeline(Precision::bf16);
  const std::vector<Program> fp32 = mlp_pipeline(Precision::fp32);
  for (size_t r = 0; r < bf16.size(); ++r) {
    int sends = 0, receives = 0;
    for (size_t i = 0; i < bf16[r].instrs.size(); ++i) {
      const Instr& instr = bf16[r].instrs[i];
      if (instr.micro_batch < 0) continue;
      const Graph& g = bf16[r].graph_of(instr.micro_batch);
      if (const auto* send = std::get_if<Send>(&instr.op)) {
        ++sends;
        const bool activation = g.nodes()[static_cast<size_t>(g.value(send->value).producer)].origin < 0;
        EXPECT_EQ(send->dtype, activation ? DType::bf16 : DType::f32) << bf16[r].str(i);
        EXPECT_EQ(instr.wire.total(), g.spec(send->value).shape.numel() * (activation ? 2 : 4)) << bf16[r].str(i);
      } else if (const auto* recv = std::get_if<Recv>(&instr.op)) {
        ++receives;
        EXPECT_EQ(g.spec(recv->value).dtype, recv->dtype) << "the receiver holds what arrives: " << bf16[r].str(i);
        EXPECT_EQ(recv->dtype, r == 1 ? DType::bf16 : DType::f32) << bf16[r].str(i);
      }
    }
    EXPECT_EQ(sends, 2) << "rank " << r << ": one value a micro-batch";
    EXPECT_EQ(receives, 2) << "rank " << r;
    // Against fp32's: the activations' bytes halve, the gradients' stay.
    const std::vector<int64_t> half = send_bytes(bf16[r]), whole = send_bytes(fp32[r]);
    ASSERT_EQ(half.size(), whole.size());
    for (size_t k = 0; k < half.size(); ++k) EXPECT_EQ(half[k] * (r == 0 ? 2 : 1), whole[k]) << "rank " << r;
  }
}

// Per tensor-axis reshard of a sum-partial: the GEMMs' (the blocks' and
// the tied head's input gradient) and the rest's (the vocabulary-parallel
// embedding's and the loss's statistics, made by fp32 nodes) wire bytes,
// and whether every GEMM's sums bf16 words.
struct TensorSums {
  int64_t layer_bytes = 0, other_bytes = 0;
  int layer_sums = 0, bf16_layer_sums = 0;
};
TensorSums tensor_sums(const Program& p) {
  TensorSums sums;
  const int tp = p.strategy.mesh.axis("tp");
  for (const Instr& instr : p.instrs) {
    const auto* r = std::get_if<Reshard>(&instr.op);
    if (r == nullptr || r->axis != tp || !r->from.is_partial()) continue;
    const Graph& g = p.graph_of(instr.micro_batch);
    const Node& node = g.nodes()[static_cast<size_t>(r->node)];
    const ValueId in = node.inputs.front();
    // Made by a GEMM: the blocks' (a LayerNorm's weight gradient, "h.*.grad:", is not) and the tied head's input gradient.
    const std::string& name = g.value(in).name;
    const bool layer = (name.rfind("h.", 0) == 0 && name.find(".grad:") == std::string::npos) ||
                       name.rfind("lm_head.", 0) == 0;
    (layer ? sums.layer_bytes : sums.other_bytes) += instr.wire.total();
    if (!layer) continue;
    ++sums.layer_sums;
    sums.bf16_layer_sums += g.spec(in).dtype == DType::bf16;
    // A bf16 sum is widened back for its float32 readers (the residual add).
    if (g.spec(in).dtype == DType::bf16)
      for (const Node& reader : g.nodes())
        if (std::find(reader.inputs.begin(), reader.inputs.end(), node.outputs.front()) != reader.inputs.end())
          EXPECT_EQ(reader.op(), "to_f32") << g.value(node.outputs.front()).name;
  }
  return sums;
}

TEST(MixedPrecisionLowering, TensorParallelSumsTheLayersPartialsInBf16AtHalfTheBytes) {
  const nn::Model model = two_layer_gpt();
  for (bool sp : {false, true}) {
    std::map<Precision, TensorSums> by;
    for (Precision precision : {Precision::fp32, Precision::bf16}) {
      Strategy s = tensor_parallel(model.graph, 1, 2, batch_input_names(model), sp);
      s.precision = precision;
      const Program p = lower({.forward = &model.graph, .loss = model.loss}, s, 1);
      by[precision] = tensor_sums(p);
    }
    const TensorSums& f = by[Precision::fp32];
    const TensorSums& h = by[Precision::bf16];
    // Two layers x (attention out, MLP out forward; their column layers'
    // input gradients backward), and the head's input gradient.
    EXPECT_EQ(h.layer_sums, 9) << "sequence parallel " << sp;
    EXPECT_EQ(h.layer_sums, f.layer_sums);
    EXPECT_EQ(h.bf16_layer_sums, h.layer_sums) << "sequence parallel " << sp;
    EXPECT_EQ(f.bf16_layer_sums, 0);
    EXPECT_EQ(2 * h.layer_bytes, f.layer_bytes) << "sequence parallel " << sp;
    EXPECT_GT(h.other_bytes, 0);
    EXPECT_EQ(h.other_bytes, f.other_bytes) << "the embedding and the loss's statistics are summed in float32";
  }
}

}  // namespace
}  // namespace px::parallel
