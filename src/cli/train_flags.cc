#include "cli/train_flags.h"

#include <cstdio>
#include <sstream>

#include <limits>

#include "comm/collectives.h"
#include "comm/compression/spec.h"

namespace px::cli {

void add_model_flags(CLI::App& cmd, TrainFlags& flags) {
  TrainOptions& o = flags.options;
  // Unset: the model's default, filled by apply_model_defaults (see --help text).
  const double unset = std::numeric_limits<double>::quiet_NaN();
  o.steps = o.epochs = o.batch = o.schedule.warmup = o.eval_every = o.sample_tokens = kModelDefault;
  o.optimizer.kind = "";
  o.schedule.lr = o.schedule.min_ratio = o.optimizer.weight_decay = o.grad_clip = unset;
  cmd.add_option("--model", o.model, "mlp, cnn or gpt")->check(CLI::IsMember({"mlp", "cnn", "gpt"}))->capture_default_str();
  cmd.add_option("--batch", o.batch, "global batch size (default: gpt 16, mlp/cnn 64)");
  cmd.add_option("--accumulation", o.accumulation, "micro-batches per step (gradient accumulation)")->capture_default_str();
  cmd.add_option("--seed", o.seed, "seed for initialization, data order and dropout")->capture_default_str();
  cmd.add_option("--block", o.gpt.block, "gpt: context length")->capture_default_str();
  cmd.add_option("--layers", o.gpt.n_layer, "gpt: transformer blocks")->capture_default_str();
  cmd.add_option("--heads", o.gpt.n_head, "gpt: attention heads")->capture_default_str();
  cmd.add_option("--embd", o.gpt.n_embd, "gpt: embedding width")->capture_default_str();
  cmd.add_option("--vocab", o.gpt.vocab, "gpt: vocabulary size (the byte-level corpora use the first 256)")
      ->capture_default_str();
  cmd.add_option("--dropout", o.gpt.dropout, "gpt: dropout probability")->capture_default_str();
  cmd.add_option("--cnn-channels", o.cnn.channels1, "cnn: the first convolution's channels (the second's: twice)")
      ->each([&o](const std::string&) { o.cnn.channels2 = 2 * o.cnn.channels1; })
      ->capture_default_str();
  cmd.add_option("--cnn-hidden", o.cnn.hidden, "cnn: the fully-connected layer's width")->capture_default_str();
  cmd.add_option("--hidden", o.mlp.hidden, "mlp: hidden layer widths")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->capture_default_str();
}

void add_parallel_flags(CLI::App& cmd, TrainFlags& flags) {
  TrainOptions& o = flags.options;
  cmd.add_option("--ranks", o.ranks, "data-parallel ranks as threads of this process (under mpirun: leave at 1, "
                                     "the MPI processes are the ranks)")
      ->capture_default_str();
  cmd.add_option("--bucket-mb", flags.bucket_mb, "gradients are reduced in buckets of about this many MiB (0: one per tensor)")
      ->capture_default_str();
  cmd.add_option("--compress", flags.compress, "gradient compression with error feedback: none, fp16, bf16, int8, sign, "
                                               "topk:FRACTION, threshold:T, powersgd:RANK (add ,ef=off to drop error feedback)")
      ->capture_default_str();
  cmd.add_option("--p3-slice-kb", flags.p3_slice_kb, "P3: reduce each weight's gradient in slices of this many KiB, "
                                                     "first-needed layers first, updating each just before the next "
                                                     "forward reads it (0: off; needs --grad-clip 0)")
      ->capture_default_str();
  cmd.add_option("--zero", o.sync.zero_stage, "ZeRO: 1 shards optimizer state across ranks (gradients reduce-scattered, "
                                              "parameters all-gathered); 2 keeps gradients only as each rank's shard as "
                                              "well; 3 stores parameters sharded too, gathered before each use (0: off)")
      ->capture_default_str();
  cmd.add_option("--bucket-buffers", o.sync.bucket_buffers, "ZeRO-2/3: at most this many gradient bucket buffers alive "
                                                            "at once (backward waits for the oldest reduction)")
      ->capture_default_str();
  cmd.add_flag("--no-overlap", [&o](int64_t) { o.sync.overlap = false; },
               "reduce gradients inline instead of on a progress thread while backward continues");
  cmd.add_option("--allreduce", flags.allreduce, "gradient allreduce algorithm: auto (the cost model's pick), ring, "
                                                 "halving_doubling, tree, ... (see `parallax bench comm --help`)")
      ->capture_default_str();
  cmd.add_option("--tp", o.sync.tensor_parallel, "Megatron tensor parallelism: ranks per tensor-parallel group; the "
                                                 "mesh is {dp: ranks / tp, tp: tp} (GPT: tp must divide --heads)")
      ->capture_default_str();
  cmd.add_option("--mesh", flags.mesh, "the device mesh as axis=size pairs, e.g. pp=2,dp=2,tp=2 (sets --pp and "
                                       "--tp; pp x dp x tp must equal the ranks)");
  cmd.add_option("--pp", o.sync.pipeline_parallel, "pipeline stages: the graph cut into this many stages, each on "
                                                   "its own ranks (mesh {pp, dp, tp})")
      ->capture_default_str();
  cmd.add_option("--schedule", flags.schedule, "pipeline schedule: gpipe, 1f1b, interleaved (with --virtual-stages) "
                                               "or zb-h1 (zero bubble)")
      ->capture_default_str();
  cmd.add_option("--micro-batches", flags.micro_batches, "micro-batches per step (the pipeline's M; the same as "
                                                         "--accumulation)");
  cmd.add_option("--virtual-stages", o.sync.pipeline.virtual_stages, "interleaved: model chunks per pipeline rank")
      ->capture_default_str();
  cmd.add_option("--stage-cuts", flags.stage_cuts, "layers that start pipeline stages 1, 2, ..., e.g. h.2,h.4 "
                                                   "(default: balanced by the ops' costs)");
  cmd.add_option("--recompute", flags.recompute, "activation recomputation: none, selective (the attention core) or "
                                                 "full (each layer from its input, before its backward)")
      ->capture_default_str();
  cmd.add_flag("--sequence-parallel", o.sync.sequence_parallel,
               "with --tp: LayerNorm, dropout and residuals split along the sequence (reduce-scatter / all-gather "
               "pairs instead of allreduces)");
  cmd.add_option("--strategy", o.sync.strategy, "a strategy JSON file (mesh, placement seeds, ZeRO, micro-batches, "
                                                "buckets, compression; `parallax lower --print-strategy` writes one) "
                                                "instead of the flags above");
}

void apply(TrainFlags& flags) {
  TrainOptions& o = flags.options;
  apply_model_defaults(o);
  if (!(flags.bucket_mb >= 0)) fail("--bucket-mb {} must be >= 0", flags.bucket_mb);
  o.sync.bucket_bytes = static_cast<int64_t>(flags.bucket_mb * (1 << 20));
  o.sync.collective.algorithm = comm::algorithm_from_name(flags.allreduce);
  o.sync.compression = comm::compression::Spec::parse(flags.compress);
  if (!(flags.p3_slice_kb >= 0)) fail("--p3-slice-kb {} must be >= 0", flags.p3_slice_kb);
  o.sync.p3_slice_bytes = static_cast<int64_t>(flags.p3_slice_kb * 1024);
  if (flags.micro_batches != 0) {
    if (o.accumulation != 1 && o.accumulation != flags.micro_batches)
      fail("--micro-batches {} and --accumulation {} disagree (they are the same number)", flags.micro_batches,
           o.accumulation);
    o.accumulation = flags.micro_batches;
  }
  o.sync.pipeline.schedule = parallel::pipeline_kind_from_name(flags.schedule);
  o.sync.recompute = parallel::recompute_from_name(flags.recompute);
  o.sync.pipeline.stage_cuts.clear();
  std::stringstream cuts(flags.stage_cuts);
  for (std::string layer; std::getline(cuts, layer, ',');)
    if (!layer.empty()) o.sync.pipeline.stage_cuts.push_back(layer);
  if (!flags.mesh.empty()) {
    // axis=size pairs; the mesh is {pp, dp, tp} whatever the order given.
    int pp = 1, dp = 1, tp = 1;
    std::stringstream pairs(flags.mesh);
    for (std::string pair; std::getline(pairs, pair, ',');) {
      const size_t eq = pair.find('=');
      const std::string axis = pair.substr(0, eq);
      int size = 0;
      if (eq == std::string::npos || std::sscanf(pair.c_str() + eq + 1, "%d", &size) != 1 || size < 1)
        fail("--mesh '{}': '{}' is not axis=size with a size >= 1", flags.mesh, pair);
      if (axis == "dp") dp = size;
      else if (axis == "tp") tp = size;
      else if (axis == "pp") pp = size;
      else fail("--mesh '{}': axis '{}' is not one of pp, dp, tp", flags.mesh, axis);
    }
    if (o.sync.tensor_parallel != 1 && o.sync.tensor_parallel != tp)
      fail("--mesh '{}' says tp={}, --tp says {}", flags.mesh, tp, o.sync.tensor_parallel);
    if (o.sync.pipeline_parallel != 1 && o.sync.pipeline_parallel != pp)
      fail("--mesh '{}' says pp={}, --pp says {}", flags.mesh, pp, o.sync.pipeline_parallel);
    o.sync.tensor_parallel = tp;
    o.sync.pipeline_parallel = pp;
    o.sync.mesh_ranks = pp * dp * tp;
    if (o.ranks != 1 && o.ranks != pp * dp * tp)
      fail("--mesh '{}' has {} ranks, --ranks says {}", flags.mesh, pp * dp * tp, o.ranks);
  }
}

}  // namespace px::cli
