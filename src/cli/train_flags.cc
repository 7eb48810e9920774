#include "cli/train_flags.h"

#include <cstdlib>
#include <charconv>
#include <filesystem>
#include <limits>
#include <optional>
#include <sstream>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "comm/collectives.h"
#include "comm/compression/spec.h"
#include "parallel/strategy.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/tasks/model_json.h"

namespace px::cli {
namespace {

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  for (size_t begin = 0;;) {
    const size_t end = text.find(separator, begin);
    parts.push_back(text.substr(begin, end == std::string_view::npos ? std::string_view::npos : end - begin));
    if (end == std::string_view::npos) return parts;
    begin = end + 1;
  }
}

// A whole non-negative decimal number that fits an int64 (sscanf's %d is
// undefined past INT_MAX and accepts trailing text).
std::optional<int64_t> parse_count(std::string_view text) {
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || value < 0) return std::nullopt;
  return value;
}

}  // namespace

int launcher_pmi_fd() {
  const char* fd = std::getenv("PMI_FD");
  return fd != nullptr ? std::atoi(fd) : -1;
}

bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr;
}

void set_parser_conventions(CLI::App& app) { app.option_defaults()->disable_flag_override(); }

void add_model_flags(CLI::App& cmd, TrainFlags& flags) {
  JobSpec& o = flags.job;
  // Unset: the model's default, filled by apply_model_defaults (see --help text).
  const double unset = std::numeric_limits<double>::quiet_NaN();
  o.run.steps = o.run.epochs = o.data.batch = o.optimizer.schedule.warmup = o.run.eval_every = o.run.sample_tokens = kModelDefault;
  o.optimizer.update.kind = "";
  o.optimizer.schedule.lr = o.optimizer.schedule.min_ratio = o.optimizer.update.weight_decay = o.optimizer.grad_clip = unset;
  cmd.add_option("--model", o.model.kind, "mlp, cnn, gpt or an ONNX file FILE.onnx (docs/onnx.md)")
      ->check([](const std::string& model) {
        const bool known = model == "mlp" || model == "cnn" || model == "gpt" || nn::is_onnx_path(model);
        return known ? std::string() : "expected mlp, cnn, gpt or a FILE.onnx, got '" + model + "'";
      })
      ->capture_default_str();
  cmd.add_option("--loss", o.model.onnx.loss, "FILE.onnx without a scalar (loss) output: the loss attached to its first "
                                        "output: cross_entropy, or mse against float targets (docs/onnx.md)")
      ->check(CLI::IsMember({"cross_entropy", "mse"}));
  cmd.add_option("--input", flags.inputs, "FILE.onnx: feed input NAME from a dataset, NAME=images|tokens|labels|"
                                          "targets (default: by shape and dtype)");
  cmd.add_option("--batch", o.data.batch, "global batch size (default: gpt 16, mlp/cnn 64)");
  cmd.add_option("--accumulation", o.strategy.micro_batches, "micro-batches per step (gradient accumulation)")->capture_default_str();
  cmd.add_option("--seed", o.run.seed, "seed for initialization, data order and dropout")->capture_default_str();
  cmd.add_option("--block", o.model.gpt.block, "gpt: context length")->capture_default_str();
  cmd.add_option("--layers", o.model.gpt.n_layer, "gpt: transformer blocks")->capture_default_str();
  cmd.add_option("--heads", o.model.gpt.n_head, "gpt: attention heads")->capture_default_str();
  cmd.add_option("--embd", o.model.gpt.n_embd, "gpt: embedding width")->capture_default_str();
  cmd.add_option("--vocab", o.model.gpt.vocab, "gpt: vocabulary size (the byte-level corpora use the first 256)")
      ->capture_default_str();
  cmd.add_option("--dropout", o.model.gpt.dropout, "gpt: dropout probability")->capture_default_str();
  cmd.add_option("--moe-experts", o.model.gpt.moe_experts,
                 "gpt: experts of a mixture-of-experts MLP (0: dense; docs/moe.md)")->capture_default_str();
  cmd.add_option("--moe-top-k", o.model.gpt.moe_top_k, "gpt: experts each token is routed to")->capture_default_str();
  cmd.add_option("--moe-every", o.model.gpt.moe_every,
                 "gpt: every n-th block's MLP is a mixture (block i when i % n == n-1)")->capture_default_str();
  cmd.add_option("--moe-width", o.model.gpt.moe_width,
                 "gpt: each expert's hidden width (0: 4 * embd / top-k, the dense MLP's active FLOPs)")
      ->capture_default_str();
  cmd.add_option("--capacity-factor", o.model.gpt.capacity_factor,
                 "gpt: each expert takes at most f * tokens * k / experts copies, the rest skip the layer "
                 "(0: dropless)")->capture_default_str();
  cmd.add_option("--moe-balance", o.model.gpt.moe_balance,
                 "gpt: balance the experts' load by Switch's loss (aux) or a per-expert bias on the router's "
                 "choice, moved against the load each step (bias, DeepSeek-V3)")
      ->check(CLI::IsMember({"aux", "bias"}))
      ->capture_default_str();
  cmd.add_option("--moe-bias-rate", o.model.gpt.moe_bias_rate,
                 "gpt: --moe-balance bias: how far each step moves an expert's bias against its load")
      ->capture_default_str();
  cmd.add_option("--moe-aux-loss", o.model.gpt.aux_loss_coef, "gpt: coefficient of Switch's load-balancing loss")
      ->capture_default_str();
  cmd.add_option("--moe-z-loss", o.model.gpt.z_loss_coef, "gpt: coefficient of the router z-loss")
      ->capture_default_str();
  cmd.add_option("--cnn-channels", o.model.cnn.channels1, "cnn: the first convolution's channels (the second's: twice)")
      ->each([&o](const std::string&) { o.model.cnn.channels2 = 2 * o.model.cnn.channels1; })
      ->capture_default_str();
  cmd.add_option("--cnn-hidden", o.model.cnn.hidden, "cnn: the fully-connected layer's width")->capture_default_str();
  cmd.add_option("--hidden", o.model.mlp.hidden, "mlp: hidden layer widths")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->capture_default_str();
}

void add_parallel_flags(CLI::App& cmd, TrainFlags& flags) {
  JobSpec& o = flags.job;
  flags.ranks_flag =
      cmd.add_option("--ranks", o.launch.ranks, "ranks as threads of this process (1 unless --mesh or a --strategy file "
                                         "names more; under mpirun leave it: the MPI processes are the ranks)")
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
  cmd.add_option("--zero", o.strategy.zero_stage, "ZeRO: 1 shards optimizer state across ranks (gradients reduce-scattered, "
                                              "parameters all-gathered); 2 keeps gradients only as each rank's shard as "
                                              "well; 3 stores parameters sharded too, gathered before each use (0: off)")
      ->capture_default_str();
  cmd.add_option("--bucket-buffers", o.strategy.bucket_buffers, "ZeRO-2/3: at most this many gradient bucket buffers alive "
                                                            "at once (backward waits for the oldest reduction)")
      ->capture_default_str();
  cmd.add_flag("--no-overlap", [&o](int64_t) { o.run.overlap = false; },
               "reduce gradients inline instead of on a progress thread while backward continues");
  cmd.add_option("--allreduce", flags.allreduce, "gradient allreduce algorithm: auto (the cost model's pick), ring, "
                                                 "halving_doubling, tree, ... (see `parallax bench comm --help`)")
      ->capture_default_str();
  cmd.add_option("--tp", o.strategy.tensor_parallel, "Megatron tensor parallelism: ranks per tensor-parallel group; the "
                                                 "mesh is {dp: ranks / tp, tp: tp} (GPT: tp must divide --heads)")
      ->capture_default_str();
  cmd.add_option("--mesh", flags.mesh, "the device mesh as axis=size pairs, e.g. pp=2,dp=2,cp=2,tp=2 (sets --pp, "
                                       "--ep, --cp and --tp; pp x dp x ep x cp x tp must equal the ranks)");
  cmd.add_option("--ep", o.strategy.expert_parallel, "expert parallelism: each data rank's tokens and a mixture of "
                                                  "experts' experts spread over this many ranks, the tokens routed "
                                                  "to their experts' ranks and back (mesh {pp, dp, ep, cp, tp}; "
                                                  "needs --moe-experts, at least --ep experts)")
      ->capture_default_str();
  cmd.add_option("--cp", o.strategy.context_parallel, "context parallelism: ranks each sequence is split over, through "
                                                  "attention too (mesh {pp, dp, cp, tp}; see --cp-method)")
      ->capture_default_str();
  cmd.add_option("--cp-method", flags.cp_method, "how attention sees the whole sequence under --cp: ring (each "
                                                 "rank keeps its queries, key/value blocks passed around) or "
                                                 "all-to-all (DeepSpeed-Ulysses: heads scattered, tokens gathered; "
                                                 "--cp must divide --heads)")
      ->capture_default_str();
  cmd.add_option("--cp-balance", flags.cp_balance, "the ring's causal balance: on (rank r of n holds zigzag blocks r "
                                                   "and 2n-1-r of the sequence, so every rank's attention is as "
                                                   "large) or off (contiguous chunks, to compare)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  cmd.add_option("--pp", o.strategy.pipeline_parallel, "pipeline stages: the graph cut into this many stages, each on "
                                                   "its own ranks (mesh {pp, dp, tp})")
      ->capture_default_str();
  cmd.add_option("--schedule", flags.schedule, "pipeline schedule: gpipe, 1f1b, interleaved (with --virtual-stages) "
                                               "or zb-h1 (zero bubble)")
      ->capture_default_str();
  cmd.add_option("--micro-batches", flags.micro_batches, "micro-batches per step (the pipeline's M; the same as "
                                                         "--accumulation)");
  cmd.add_option("--virtual-stages", o.strategy.pipeline.virtual_stages, "interleaved: model chunks per pipeline rank")
      ->capture_default_str();
  cmd.add_option("--stage-cuts", flags.stage_cuts, "layers that start pipeline stages 1, 2, ..., e.g. h.2,h.4 "
                                                   "(default: balanced by the ops' costs)");
  cmd.add_option("--row-shares", flags.row_shares, "the data-parallel ranks' rows of each batch in proportion to "
                                                   "these positive integers, one per data rank, e.g. 4,4,4,1 for a "
                                                   "host at a quarter of the others' speed (default: even)");
  cmd.add_option("--recompute", flags.recompute, "activation recomputation: none, selective (the attention core) or "
                                                 "full (each layer from its input, before its backward)")
      ->capture_default_str();
  cmd.add_flag("--sequence-parallel", o.strategy.sequence_parallel,
               "with --tp: LayerNorm, dropout and residuals split along the sequence (reduce-scatter / all-gather "
               "pairs instead of allreduces)");
  cmd.add_flag("--overlap-model-grads", o.strategy.overlap_model_gradients,
               "gradients a model axis sums (--sequence-parallel's LayerNorms) reduced over it on a progress thread "
               "once backward completes their bucket, while backward continues, instead of inline as each is made");
  cmd.add_flag("--overlap-experts", o.strategy.overlap_expert_exchanges,
               "with --ep and --micro-batches >= 2: two micro-batches run interleaved, each one's routed exchanges on "
               "a progress thread while the other computes (both micro-batches' activations alive at once; not with "
               "--pp or ZeRO-2/3)");
  cmd.add_option("--strategy", o.strategy.strategy_file, "a strategy JSON file (mesh, placement seeds, ZeRO, micro-batches, "
                                                "buckets, compression; `parallax lower --print-strategy` writes one) "
                                                "instead of the flags above");
}

CLI::Option* add_precision_option(CLI::App& cmd, std::string& precision, const std::string& auto_help) {
  std::string help =
      "fp32, or bf16: mixed precision (GEMM inputs rounded to bf16, fp32 accumulation; weights, optimizer and "
      "checkpoints fp32; needs AVX512_BF16)";
  std::vector<std::string> words{"fp32", "bf16"};
  if (!auto_help.empty()) {
    words.push_back("auto");
    help += "; auto: " + auto_help;
  }
  return cmd.add_option("--precision", precision, help)->check(CLI::IsMember(words))->capture_default_str();
}

void add_train_flags(CLI::App& cmd, TrainFlags& flags) {
  JobSpec& o = flags.job;
  add_model_flags(cmd, flags);
  cmd.add_option("--data", o.data.path,
                  "gpt: a text file (default: the fortunes corpus); mlp/cnn: the Fashion-MNIST IDX directory "
                  "(default /usr/share/datasets/fashion-mnist)");
  cmd.add_option("--steps", o.run.steps, "optimizer steps (default: gpt 3500, about five minutes on 2 cores)");
  cmd.add_option("--epochs", o.run.epochs, "epochs over the training set, mlp/cnn (default 2); overrides --steps");
  cmd.add_flag("--drop-last", o.data.drop_last,
               "mlp/cnn: leave out each epoch's last batch when --batch does not divide the training set (by "
               "default it trains, its loss the mean over the rows it has)");
  cmd.add_option("--optimizer", o.optimizer.update.kind, "sgd or adamw (default: gpt adamw, mlp/cnn sgd)");
  cmd.add_option("--lr", o.optimizer.schedule.lr, "peak learning rate (default: gpt 1e-3, mlp/cnn 0.05 x min(batch, 64)/64)");
  cmd.add_option("--lr-schedule", o.optimizer.schedule.kind, "learning-rate schedule: cosine (decays to --min-lr-ratio) or constant")->capture_default_str();
  cmd.add_option("--warmup", o.optimizer.schedule.warmup, "linear warmup steps (default: gpt 100, mlp/cnn 0)");
  cmd.add_option("--min-lr-ratio", o.optimizer.schedule.min_ratio, "cosine floor as a fraction of --lr (default: gpt 0.1, mlp/cnn 0)");
  cmd.add_option("--weight-decay", o.optimizer.update.weight_decay, "decay of weight matrices (default: gpt 0.1, cnn 5e-4, mlp 0)");
  cmd.add_option("--momentum", o.optimizer.update.momentum, "sgd momentum")->capture_default_str();
  cmd.add_option("--beta1", o.optimizer.update.beta1, "adamw beta1")->capture_default_str();
  cmd.add_option("--beta2", o.optimizer.update.beta2, "adamw beta2")->capture_default_str();
  cmd.add_option("--grad-clip", o.optimizer.grad_clip, "clip the global gradient norm, 0 = off (default: gpt 1, mlp/cnn 0)");
  cmd.add_option("--eval-every", o.run.eval_every, "evaluate every N steps, 0 = at the end (default: gpt 500, mlp/cnn 0)");
  cmd.add_option("--eval-batches", o.data.eval_batches,
                 "validation batches per evaluation (gpt: of the training batch; mlp/cnn: of 1000 test images, "
                 "all 10 by default)")
      ->capture_default_str();
  cmd.add_option("--threads", o.run.threads, "threads for kernels and BLAS (per MPI rank; in-process ranks use 1 each)")
      ->capture_default_str();
  flags.precision_flag = add_precision_option(cmd, flags.precision);
  add_parallel_flags(cmd, flags);
  cmd.add_option("--link-gbps", o.launch.link_gbps, "in-process ranks: limit each rank's link to X Gb/s (0: unlimited)")
      ->capture_default_str();
  cmd.add_option("--inject-delay", flags.inject_delay, "RANK:MS - that rank's steps take MS milliseconds longer (a straggler; in data parallelism MS per even share of rows it holds, as a slower host's would)");
  cmd.add_option("--inject-fault", flags.inject_fault,
                  "RANK:STEP[:kill|hang|lost|moe-capacity|moe-expert] - that rank dies (kill, the default), freezes "
                  "(hang) or dies for good (lost: a restart continues without it) at the start of step STEP, or "
                  "from then on routes its mixture of experts' tokens by another capacity factor than the other "
                  "expert ranks (moe-capacity) or to an expert that does not exist (moe-expert, under --ep); on "
                  "the first attempt only; for demonstrations and tests of failure detection and restarts");
  cmd.add_option("--timeout", o.fault.timeout_s,
                  "seconds: a rank whose heartbeat stops this long (dead, stopped or frozen) is named by every "
                  "other, at most two watchdog periods (timeout/10, 20 ms to 1 s) later")
      ->capture_default_str();
  cmd.add_option("--wait-timeout", o.fault.wait_timeout_s,
                  fmt::format("seconds: a single wait fails by itself after this long, the backstop for what no "
                              "heartbeat shows (a live peer that never sends); must be longer than --timeout "
                              "and two watchdog periods (0: {} x --timeout)",
                              kWaitTimeoutPerTimeout))
      ->capture_default_str();
  cmd.add_option("--run-dir", o.fault.run_dir,
                  "directory for the run's flight records (flight/rank<R>), which `parallax doctor` reads after a "
                  "failure (default under parallax launch: its run directory)")
      ->capture_default_str();
  cmd.add_option("--inject-nan", o.fault.inject_nan_steps,
                  "STEP[,STEP...] - the batch each of these steps draws first is made non-finite, every time it "
                  "runs (a bad record: the step is skipped, retried once, then the batch is skipped for good)")
      ->delimiter(',');
  cmd.add_option("--skip-batches", o.fault.skip_batches,
                  "N[,N...] - never train on these batches (numbered from 1 in the order drawn; a checkpoint "
                  "remembers the ones that failed twice)")
      ->delimiter(',');
  cmd.add_option("--ps", o.ps.mode, "parameter-server training instead of data parallelism: bsp (synchronous), "
                                     "asp (asynchronous) or ssp (stale-synchronous, see --staleness); ranks "
                                     "0..K-1 serve, the rest are workers")
      ->check(CLI::IsMember({"bsp", "asp", "ssp"}));
  cmd.add_option("--ps-servers", o.ps.servers, "--ps: K server ranks, each holding 1/K of the parameters")
      ->capture_default_str();
  cmd.add_option("--staleness", o.ps.staleness, "--ps ssp: a worker may run at most this many steps ahead of the "
                                                 "slowest")
      ->capture_default_str();
  cmd.add_option("--backup-workers", o.ps.backup_workers, "--ps bsp: each step's update takes the first W-B "
                                                          "of the W workers' gradients to arrive and drops the rest "
                                                          "(stragglers)")
      ->capture_default_str();
  cmd.add_option("--sync", o.sync.mode, "how data-parallel replicas synchronize instead of a gradient allreduce every "
                                       "step: partial-reduce (a coordinator on rank 0 groups the ready replicas, who "
                                       "average their parameters) or gossip (a random partner every step)")
      ->check(CLI::IsMember({"partial-reduce", "gossip"}));
  cmd.add_option("--sync-group", o.sync.min_group, "--sync partial-reduce: the fewest ready replicas a group takes")
      ->capture_default_str();
  cmd.add_option("--sync-staleness", o.sync.staleness, "--sync partial-reduce: a replica more than this many steps "
                                                       "ahead of the slowest waits for it")
      ->capture_default_str();
  cmd.add_option("--sync-full-every", o.sync.full_every, "--sync partial-reduce: every N global steps all replicas "
                                                         "average together (0: only to evaluate, save and at the end)")
      ->capture_default_str();
  cmd.add_option("--straggler-threshold", o.run.straggler_threshold,
                 "a rank whose recent step compute is this many times the fastest rank's, 5 steps in a row, is "
                 "named a straggler while the job runs")
      ->capture_default_str();
  cmd.add_option("--metrics", o.run.metrics, "write JSON lines (step, train_loss, val_loss, val_accuracy) here");
  cmd.add_option("--trace", o.run.trace, "write a Chrome trace (Perfetto) of steps 2-4: compute and communication per rank");
  cmd.add_option("--save", o.checkpoint.save, "checkpoint directory (written atomically)");
  cmd.add_option("--save-every", o.checkpoint.save_every,
                  "checkpoint every N steps, written in the background (0: only at the end); with --max-restarts "
                  "also an in-memory snapshot, copied to a buddy rank")
      ->capture_default_str();
  cmd.add_option("--keep-last", o.checkpoint.keep_last,
                  "checkpoints to keep: the latest in --save, the older ones beside it as <save>.step-<S>")
      ->capture_default_str();
  cmd.add_option("--max-restarts", o.launch.max_restarts,
                  "in-process ranks: restart a failed job up to N times, from the in-memory snapshots (a lost "
                  "rank's from its buddy), else the latest checkpoint (under mpirun use parallax launch)")
      ->capture_default_str();
  cmd.add_option("--min-ranks", o.launch.min_ranks,
                  "with --max-restarts: continue with fewer ranks, down to K, when a rank is lost for good (0: "
                  "never fewer)")
      ->capture_default_str();
  cmd.add_option("--resume", o.checkpoint.resume, "continue from this checkpoint directory (repeat the other flags)");
  cmd.add_option("--stop-after", o.run.stop_after, "end and save after this step, as if preempted (0: off)");
  cmd.add_option("--sample-tokens", o.run.sample_tokens, "gpt: bytes of text to generate at the end (default 300)");
  cmd.add_option("--prompt", o.run.prompt, "gpt: text the sample continues (default: a newline)");
  cmd.add_flag("--no-predict", [&o](int64_t) { o.run.local_cluster.clear(); },
                "skip the predicted vs measured step time and memory printed at the end");
  cmd.add_option("--progress", flags.progress, "auto (a bar on a terminal), bar or lines")
      ->check(CLI::IsMember({"auto", "bar", "lines"}))
      ->capture_default_str();
}

// --resume of a checkpoint directory: the run trains the checkpoint's model
// on its data with its optimizer (unless --optimizer says otherwise), so
// the model's defaults are that model's.
static void take_resumed_model(JobSpec& o) {
  const std::string& dir = o.checkpoint.resume;
  if (dir.empty() || !std::filesystem::exists(std::filesystem::path(dir) / "state.json")) return;
  const CheckpointState state = read_checkpoint_state(dir);
  apply_model_json(state.config, o.model, o.data);
  if (o.optimizer.update.kind.empty()) o.optimizer.update.kind = state.optimizer;
}

namespace {

// `amount` units of `unit` bytes as bytes: px::Error naming `flag` when it
// is negative, not a number, or past a pebibyte (no buffer is that large,
// and the product must fit an int64).
int64_t size_in_bytes(double amount, double unit, const char* flag) {
  constexpr double kMostBytes = 1125899906842624.0;  // 2^50
  if (!(amount >= 0) || !(amount * unit <= kMostBytes))
    fail("{} {} must be >= 0 and at most {} (1 PiB)", flag, amount, kMostBytes / unit);
  return static_cast<int64_t>(amount * unit);
}

}  // namespace

void apply(TrainFlags& flags) {
  JobSpec& o = flags.job;
  take_resumed_model(o);
  apply_model_defaults(o);
  o.model.onnx.bindings.clear();
  for (const std::string& text : flags.inputs) o.model.onnx.bindings.push_back(nn::parse_input_binding(text));
  o.strategy.bucket_bytes = size_in_bytes(flags.bucket_mb, 1 << 20, "--bucket-mb");
  o.strategy.collective.algorithm = comm::algorithm_from_name(flags.allreduce);
  o.strategy.compression = comm::compression::Spec::parse(flags.compress);
  o.strategy.p3_slice_bytes = size_in_bytes(flags.p3_slice_kb, 1024, "--p3-slice-kb");
  if (flags.micro_batches != 0) {
    if (o.strategy.micro_batches != 1 && o.strategy.micro_batches != flags.micro_batches)
      fail("--micro-batches {} and --accumulation {} disagree (they are the same number)", flags.micro_batches,
           o.strategy.micro_batches);
    o.strategy.micro_batches = flags.micro_batches;
  }
  o.strategy.pipeline.schedule = parallel::pipeline_kind_from_name(flags.schedule);
  o.strategy.context_method = parallel::context_method_from_name(flags.cp_method);
  o.strategy.context_balance = flags.cp_balance == "on";
  o.strategy.recompute = parallel::recompute_from_name(flags.recompute);
  o.strategy.pipeline.stage_cuts.clear();
  std::stringstream cuts(flags.stage_cuts);
  for (std::string layer; std::getline(cuts, layer, ',');)
    if (!layer.empty()) o.strategy.pipeline.stage_cuts.push_back(layer);
  o.strategy.row_shares.clear();
  std::stringstream shares(flags.row_shares);
  for (std::string share; std::getline(shares, share, ',');) {
    const auto parsed = parse_count(share);
    if (!parsed || *parsed < 1)
      fail("--row-shares '{}': '{}' is not a positive integer (one share per data-parallel rank)", flags.row_shares,
           share);
    o.strategy.row_shares.push_back(*parsed);
  }
  if (!flags.mesh.empty()) {
    // axis=size pairs; the mesh is {pp, dp, ep, cp, tp} whatever the order given.
    int pp = 1, dp = 1, ep = 1, cp = 1, tp = 1;
    std::stringstream pairs(flags.mesh);
    for (std::string pair; std::getline(pairs, pair, ',');) {
      const size_t eq = pair.find('=');
      const std::string axis = pair.substr(0, eq);
      const auto parsed = eq == std::string::npos ? std::nullopt : parse_count(std::string_view(pair).substr(eq + 1));
      if (!parsed || *parsed < 1 || *parsed > (1 << 20))
        fail("--mesh '{}': '{}' is not axis=size with a size from 1 to 2^20", flags.mesh, pair);
      const int size = static_cast<int>(*parsed);
      if (axis == "dp") dp = size;
      else if (axis == "tp") tp = size;
      else if (axis == "pp") pp = size;
      else if (axis == "cp") cp = size;
      else if (axis == "ep") ep = size;
      else fail("--mesh '{}': axis '{}' is not one of pp, dp, ep, cp, tp", flags.mesh, axis);
    }
    if (o.strategy.tensor_parallel != 1 && o.strategy.tensor_parallel != tp)
      fail("--mesh '{}' says tp={}, --tp says {}", flags.mesh, tp, o.strategy.tensor_parallel);
    if (o.strategy.pipeline_parallel != 1 && o.strategy.pipeline_parallel != pp)
      fail("--mesh '{}' says pp={}, --pp says {}", flags.mesh, pp, o.strategy.pipeline_parallel);
    if (o.strategy.context_parallel != 1 && o.strategy.context_parallel != cp)
      fail("--mesh '{}' says cp={}, --cp says {}", flags.mesh, cp, o.strategy.context_parallel);
    if (o.strategy.expert_parallel != 1 && o.strategy.expert_parallel != ep)
      fail("--mesh '{}' says ep={}, --ep says {}", flags.mesh, ep, o.strategy.expert_parallel);
    const int64_t mesh_ranks = int64_t{pp} * dp * ep * cp * tp;
    if (mesh_ranks > (1 << 20)) fail("--mesh '{}' has {} ranks, expected at most 2^20", flags.mesh, mesh_ranks);
    o.strategy.tensor_parallel = tp;
    o.strategy.pipeline_parallel = pp;
    o.strategy.context_parallel = cp;
    o.strategy.expert_parallel = ep;
    o.strategy.mesh_ranks = static_cast<int>(mesh_ranks);
    if (o.launch.ranks != 1 && o.launch.ranks != mesh_ranks)
      fail("--mesh '{}' has {} ranks, --ranks says {}", flags.mesh, mesh_ranks, o.launch.ranks);
  }
  // A strategy file names its ranks, as --mesh does: without --ranks they
  // are the job's (in-process, that many threads; under mpirun the
  // processes must be as many, which the strategy's check says).
  if (!o.strategy.strategy_file.empty()) {
    bool records_precision = false;
    const parallel::Strategy file = parallel::load_strategy(o.strategy.strategy_file, &records_precision);
    if (flags.mesh.empty() && flags.ranks_flag != nullptr && flags.ranks_flag->count() == 0)
      o.strategy.mesh_ranks = file.mesh.ranks();
    // The file's precision is the run's: the one it was planned (or written) for.
    if (records_precision) {
      const std::string recorded(precision_name(file.precision));
      const bool given = flags.precision_flag != nullptr && flags.precision_flag->count() > 0 && flags.precision != "auto";
      if (given && flags.precision != recorded)
        fail("--precision {} and strategy '{}' (precision {}) disagree: drop --precision to run the file's {}, or "
             "write the strategy again for {}",
             flags.precision, o.strategy.strategy_file, recorded, recorded, flags.precision);
      flags.precision = recorded;
    }
  }
  // "auto" is for the commands that resolve it against a cluster (cli/precision_choice.h).
  if (flags.precision != "auto") o.strategy.precision = parse_precision(flags.precision);
  if (!flags.inject_delay.empty()) {
    const std::vector<std::string_view> parts = split(flags.inject_delay, ':');
    const auto rank = parts.size() == 2 ? parse_count(parts[0]) : std::nullopt;
    const auto ms = parts.size() == 2 ? parse_count(parts[1]) : std::nullopt;
    if (!rank || !ms || *rank > std::numeric_limits<int>::max())
      fail("--inject-delay '{}' is not RANK:MS (e.g. 1:200)", flags.inject_delay);
    o.fault.inject_delay_rank = static_cast<int>(*rank);
    o.fault.inject_delay_ms = *ms;
  }
  if (!flags.inject_fault.empty()) {
    const std::vector<std::string_view> parts = split(flags.inject_fault, ':');
    const bool shaped = parts.size() == 2 || parts.size() == 3;
    const auto rank = shaped ? parse_count(parts[0]) : std::nullopt;
    const auto step = shaped ? parse_count(parts[1]) : std::nullopt;
    if (!rank || !step || *step < 1 || *rank > std::numeric_limits<int>::max())
      fail("--inject-fault '{}' is not RANK:STEP[:kill|hang|lost|moe-capacity|moe-expert] (e.g. 2:37:kill)",
           flags.inject_fault);
    o.fault.inject_fault.rank = static_cast<int>(*rank);
    o.fault.inject_fault.step = *step;
    o.fault.inject_fault.mode = parts.size() == 3 ? std::string(parts[2]) : "kill";
  }
}

}  // namespace px::cli
