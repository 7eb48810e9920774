// `parallax train`: parses TrainOptions from flags and runs the trainer.
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "comm/collectives.h"
#include "comm/compression/spec.h"
#include "comm/engine/gradient_buckets.h"
#include "runtime/progress.h"
#include "runtime/trainer.h"

namespace px::cli {

void add_train_command(CLI::App& app) {
  auto options = std::make_shared<TrainOptions>();
  auto progress = std::make_shared<std::string>("auto");
  auto bucket_mb = std::make_shared<double>(double(comm::kDefaultBucketBytes) / (1 << 20));
  auto allreduce = std::make_shared<std::string>("auto");
  auto compress = std::make_shared<std::string>("none");
  auto inject_delay = std::make_shared<std::string>();
  auto p3_slice_kb = std::make_shared<double>(0.0);
  TrainOptions& o = *options;
  // Unset: the model's default, filled by apply_model_defaults (see --help text).
  const double unset = std::numeric_limits<double>::quiet_NaN();
  o.steps = o.epochs = o.batch = o.schedule.warmup = o.eval_every = o.sample_tokens = kModelDefault;
  o.optimizer.kind = "";
  o.schedule.lr = o.schedule.min_ratio = o.optimizer.weight_decay = o.grad_clip = unset;
  o.threads = 2;
  CLI::App* cmd = app.add_subcommand("train", "train a model (gpt on text, mlp/cnn on Fashion-MNIST)");
  // A flag given twice takes its last value, so scripts can append overrides.
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  cmd->add_option("--model", o.model, "mlp, cnn or gpt")->check(CLI::IsMember({"mlp", "cnn", "gpt"}))->capture_default_str();
  cmd->add_option("--data", o.data,
                  "gpt: a text file (default: the fortunes corpus); mlp/cnn: the Fashion-MNIST IDX directory "
                  "(default /usr/share/datasets/fashion-mnist)");
  cmd->add_option("--steps", o.steps, "optimizer steps (default: gpt 3500, about five minutes on 2 cores)");
  cmd->add_option("--epochs", o.epochs, "epochs over the training set, mlp/cnn (default 2); overrides --steps");
  cmd->add_option("--batch", o.batch, "global batch size (default: gpt 16, mlp/cnn 64)");
  cmd->add_option("--accumulation", o.accumulation, "micro-batches per step (gradient accumulation)")->capture_default_str();
  cmd->add_option("--optimizer", o.optimizer.kind, "sgd or adamw (default: gpt adamw, mlp/cnn sgd)");
  cmd->add_option("--lr", o.schedule.lr, "peak learning rate (default: gpt 1e-3, mlp/cnn 0.05)");
  cmd->add_option("--schedule", o.schedule.kind, "cosine (decays to --min-lr-ratio) or constant")->capture_default_str();
  cmd->add_option("--warmup", o.schedule.warmup, "linear warmup steps (default: gpt 100, mlp/cnn 0)");
  cmd->add_option("--min-lr-ratio", o.schedule.min_ratio, "cosine floor as a fraction of --lr (default: gpt 0.1, mlp/cnn 0)");
  cmd->add_option("--weight-decay", o.optimizer.weight_decay, "decay of weight matrices (default: gpt 0.1, cnn 5e-4, mlp 0)");
  cmd->add_option("--momentum", o.optimizer.momentum, "sgd momentum")->capture_default_str();
  cmd->add_option("--beta1", o.optimizer.beta1, "adamw beta1")->capture_default_str();
  cmd->add_option("--beta2", o.optimizer.beta2, "adamw beta2")->capture_default_str();
  cmd->add_option("--grad-clip", o.grad_clip, "clip the global gradient norm, 0 = off (default: gpt 1, mlp/cnn 0)");
  cmd->add_option("--eval-every", o.eval_every, "evaluate every N steps, 0 = at the end (default: gpt 500, mlp/cnn 0)");
  cmd->add_option("--eval-batches", o.eval_batches, "gpt: validation batches per evaluation")->capture_default_str();
  cmd->add_option("--seed", o.seed, "seed for initialization, data order and dropout")->capture_default_str();
  cmd->add_option("--threads", o.threads, "threads for kernels and BLAS (per MPI rank; in-process ranks use 1 each)")
      ->capture_default_str();
  cmd->add_option("--ranks", o.ranks, "data-parallel ranks as threads of this process (under mpirun: leave at 1, "
                                      "the MPI processes are the ranks)")
      ->capture_default_str();
  cmd->add_option("--bucket-mb", *bucket_mb, "gradients are reduced in buckets of about this many MiB (0: one per tensor)")
      ->capture_default_str();
  cmd->add_option("--compress", *compress, "gradient compression with error feedback: none, fp16, bf16, int8, sign, "
                                           "topk:FRACTION, threshold:T, powersgd:RANK (add ,ef=off to drop error feedback)")
      ->capture_default_str();
  cmd->add_option("--link-gbps", o.link_gbps, "in-process ranks: limit each rank's link to X Gb/s (0: unlimited)")
      ->capture_default_str();
  cmd->add_option("--inject-delay", *inject_delay, "RANK:MS - that rank sleeps MS milliseconds before every step (a straggler)");
  cmd->add_option("--p3-slice-kb", *p3_slice_kb, "P3: reduce each weight's gradient in slices of this many KiB, "
                                                 "first-needed layers first, updating each just before the next forward "
                                                 "reads it (0: off; needs --grad-clip 0)")
      ->capture_default_str();
  cmd->add_option("--zero", o.sync.zero_stage, "1: ZeRO-1, gradients reduce-scattered and optimizer state sharded "
                                               "across ranks, parameters all-gathered; 2: ZeRO-2, gradients kept "
                                               "only as each rank's shard as well (0: off)")
      ->capture_default_str();
  cmd->add_flag("--no-overlap", [options](int64_t) { options->sync.overlap = false; },
                "reduce gradients after backward instead of on a progress thread during it");
  cmd->add_option("--allreduce", *allreduce, "gradient allreduce algorithm: auto (the cost model's pick), ring, "
                                             "halving_doubling, tree, ... (see `parallax bench comm --help`)")
      ->capture_default_str();
  cmd->add_option("--ps", o.ps.mode, "parameter-server training instead of data parallelism: bsp (synchronous), "
                                     "asp (asynchronous) or ssp (stale-synchronous, see --staleness); ranks "
                                     "0..K-1 serve, the rest are workers")
      ->check(CLI::IsMember({"bsp", "asp", "ssp"}));
  cmd->add_option("--ps-servers", o.ps.servers, "--ps: K server ranks, each holding 1/K of the parameters")
      ->capture_default_str();
  cmd->add_option("--staleness", o.ps.staleness, "--ps ssp: a worker may run at most this many steps ahead of the "
                                                 "slowest")
      ->capture_default_str();
  cmd->add_option("--backup-workers", o.ps.backup_workers, "--ps bsp: each step's update takes the first W-B "
                                                          "of the W workers' gradients to arrive and drops the rest "
                                                          "(stragglers)")
      ->capture_default_str();
  cmd->add_option("--metrics", o.metrics, "write JSON lines (step, train_loss, val_loss, val_accuracy) here");
  cmd->add_option("--trace", o.trace, "write a Chrome trace (Perfetto) of steps 2-4: compute and communication per rank");
  cmd->add_option("--save", o.save, "checkpoint directory (written atomically)");
  cmd->add_option("--save-every", o.save_every, "checkpoint every N steps (0: only at the end)")->capture_default_str();
  cmd->add_option("--resume", o.resume, "continue from this checkpoint directory (repeat the other flags)");
  cmd->add_option("--stop-after", o.stop_after, "end and save after this step, as if preempted (0: off)");
  cmd->add_option("--sample-tokens", o.sample_tokens, "gpt: bytes of text to generate at the end (default 300)");
  cmd->add_option("--prompt", o.prompt, "gpt: text the sample continues (default: a newline)");
  cmd->add_option("--block", o.gpt.block, "gpt: context length")->capture_default_str();
  cmd->add_option("--layers", o.gpt.n_layer, "gpt: transformer blocks")->capture_default_str();
  cmd->add_option("--heads", o.gpt.n_head, "gpt: attention heads")->capture_default_str();
  cmd->add_option("--embd", o.gpt.n_embd, "gpt: embedding width")->capture_default_str();
  cmd->add_option("--dropout", o.gpt.dropout, "gpt: dropout probability")->capture_default_str();
  cmd->add_option("--hidden", o.mlp.hidden, "mlp: hidden layer widths")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->capture_default_str();
  cmd->add_option("--progress", *progress, "auto (a bar on a terminal), bar or lines")
      ->check(CLI::IsMember({"auto", "bar", "lines"}))
      ->capture_default_str();
  cmd->callback([options, progress, bucket_mb, allreduce, compress, inject_delay, p3_slice_kb] {
    TrainOptions o = *options;
    apply_model_defaults(o);
    if (!(*bucket_mb >= 0)) fail("--bucket-mb {} must be >= 0", *bucket_mb);
    o.sync.bucket_bytes = static_cast<int64_t>(*bucket_mb * (1 << 20));
    o.sync.collective.algorithm = comm::algorithm_from_name(*allreduce);
    o.sync.compression = comm::compression::Spec::parse(*compress);
    if (!(*p3_slice_kb >= 0)) fail("--p3-slice-kb {} must be >= 0", *p3_slice_kb);
    o.sync.p3_slice_bytes = static_cast<int64_t>(*p3_slice_kb * 1024);
    if (!inject_delay->empty()) {
      int rank = -1;
      long long ms = -1;
      char tail = 0;
      if (std::sscanf(inject_delay->c_str(), "%d:%lld%c", &rank, &ms, &tail) != 2 || rank < 0 || ms < 0)
        fail("--inject-delay '{}' is not RANK:MS (e.g. 1:200)", *inject_delay);
      o.inject_delay_rank = rank;
      o.inject_delay_ms = ms;
    }
    // In-process ranks are the parallelism: each runs its kernels on its own thread.
    if (o.ranks > 1) o.threads = 1;
    o.progress_bar = *progress == "bar" || (*progress == "auto" && stdout_is_terminal());
    train(o, std::cout);
  });
}

}  // namespace px::cli
