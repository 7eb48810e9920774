#include "runtime/launch/job_spec.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/cpu_features.h"
#include "plan/job_strategy.h"

namespace px {

// Parameter servers run none of the data-parallel trainer's strategies or
// bad-step policy.
static void validate_parameter_server_job(const JobSpec& job) {
  const ParameterServerOptions& ps = job.ps;
  if (ps.mode.empty()) return;
  if (job.strategy.pipeline_parallel > 1)
    fail("pipeline stages and parameter servers do not combine: drop --pp or --ps");
  if (job.strategy.tensor_parallel > 1 || job.strategy.sequence_parallel)
    fail("tensor parallelism and parameter servers do not combine: drop --tp or --ps");
  if (!job.strategy.row_shares.empty())
    fail("--row-shares and parameter servers do not combine: workers take even rows (drop --row-shares or --ps)");
  const FaultOptions& f = job.fault;
  if (f.inject_delay_rank >= 0 && f.inject_delay_rank < ps.servers)
    fail("--inject-delay names rank {}, a parameter server (ranks 0..{}): name a worker rank, {}..{}",
         f.inject_delay_rank, ps.servers - 1, ps.servers, job.launch.ranks - 1);
  if (job.checkpoint.save_every > 0)
    fail("--save-every {} is not supported with --ps {}: parameter-server runs save at the end (or --stop-after)",
         job.checkpoint.save_every, ps.mode);
  if (!f.inject_nan_steps.empty() || !f.skip_batches.empty())
    fail("--inject-nan and --skip-batches are not supported with --ps {}: bad steps are skipped by the data-parallel "
         "trainer (the servers apply each gradient as it arrives)",
         ps.mode);
}

// Synchronized replicas each run the strategy within a replica (its
// pipeline stages and tensor-parallel ranks: runtime/sync/replica.h) over
// their rows; the replicas are the data parallelism.
static void validate_sync_job(const JobSpec& job) {
  const SyncOptions& sync = job.sync;
  if (sync.mode.empty()) return;
  const parallel::StrategyRequest& s = job.strategy;
  const std::string flag = "--sync " + sync.mode;
  if (!job.ps.mode.empty()) fail("{} and --ps {} do not combine: choose one way to synchronize", flag, job.ps.mode);
  if (s.context_parallel > 1)
    fail("{} synchronizes replicas of pipeline stages and tensor-parallel ranks: drop --cp {}", flag,
         s.context_parallel);
  if (s.zero_stage > 0) fail("{} averages each rank's parameters in place: drop --zero {}", flag, s.zero_stage);
  if (s.compression.lossy()) fail("{} averages parameters, not gradients: drop --compress", flag);
  if (s.p3_slice_bytes > 0) fail("{} and P3 do not combine: drop --p3-slice-kb", flag);
  if (!s.strategy_file.empty() || s.mesh_ranks > 0)
    fail("{} takes the split within a replica from --pp and --tp: drop --strategy / --mesh", flag);
  const FaultOptions& f = job.fault;
  if (!f.inject_nan_steps.empty() || !f.skip_batches.empty())
    fail("--inject-nan and --skip-batches are not supported with {}: bad steps are skipped by the data-parallel "
         "trainer",
         flag);
  if (job.launch.max_restarts > 0 && job.checkpoint.save.empty())
    fail("--max-restarts with {} restarts from a checkpoint: give --save DIR (and --save-every N)", flag);
}

// `parallax launch --rebalance` restarts a data-parallel job with rows by
// the measured rates, from its checkpoint.
static void validate_rebalance_job(const JobSpec& job) {
  if (!job.run.rebalance) return;
  const parallel::StrategyRequest& s = job.strategy;
  if (job.checkpoint.save.empty())
    fail("--rebalance restarts from the job's checkpoint: give the job --save DIR");
  if (!job.ps.mode.empty() || !job.sync.mode.empty())
    fail("--rebalance splits a data-parallel job's rows by the ranks' rates: drop --ps / --sync");
  if (s.pipeline_parallel > 1 || s.tensor_parallel > 1 || s.sequence_parallel || s.context_parallel > 1 ||
      !s.strategy_file.empty())
    fail("--rebalance splits rows of plain data parallelism: drop --pp, --tp, --sp, --cp and --strategy");
}

void validate_job(const JobSpec& job) {
  nn::validate(job.model);
  validate(job.data);
  if (job.strategy.precision == Precision::bf16) kernels::require_avx512_bf16("--precision bf16");
  validate(job.run);
  if (job.run.epochs > 0 && job.model.kind == "gpt") fail("--epochs is for the classifiers; give gpt --steps");
  if (job.model.kind == "gpt" && job.model.gpt.vocab < 256)
    fail("--vocab {} is below the 256 byte values the text corpora are tokenized into", job.model.gpt.vocab);
  const LaunchOptions& l = job.launch;
  if (l.link_gbps < 0) fail("link limit {} Gb/s must be >= 0 (0: unlimited)", l.link_gbps);
  if (l.max_restarts < 0) fail("--max-restarts {} must be >= 0", l.max_restarts);
  if (l.min_ranks < 0 || l.min_ranks > l.ranks)
    fail("--min-ranks {}: expected 0 (keep the rank count) up to the job's {} ranks", l.min_ranks, l.ranks);
  plan::validate_split(job.model, job.strategy, l.ranks, job.data.batch);
  validate(job.fault, l.ranks);
  validate(job.checkpoint);
  // Before step 1, not at the first save: a save replaces its own files.
  check_not_replaced_by_saves(job.checkpoint.save, job.run.metrics, "--metrics");
  check_not_replaced_by_saves(job.checkpoint.save, job.run.trace, "--trace");
  check_not_replaced_by_saves(job.checkpoint.save, job.fault.run_dir, "--run-dir", OutputKind::directory);
  if (!job.fault.inject_nan_steps.empty() && job.strategy.p3_slice_bytes > 0)
    fail("--inject-nan with P3: P3 updates each layer before the global norm is known, so a bad step cannot be "
         "skipped (drop --p3-slice-kb)");
  validate(job.ps, l.ranks);
  validate_parameter_server_job(job);
  validate_sync_job(job);
  // Synchronized replicas: the data axis' ranks (validate_split checked
  // that --pp x --tp divides the ranks).
  validate(job.sync, l.ranks / (job.strategy.pipeline_parallel * job.strategy.tensor_parallel));
  validate_rebalance_job(job);
  validate(job.optimizer);
}

void apply_model_defaults(JobSpec& job) {
  const std::string& kind = job.model.kind;
  const bool gpt = kind == "gpt";
  auto unset = [](auto value) {
    if constexpr (std::is_floating_point_v<decltype(value)>) return std::isnan(value);
    else return value == kModelDefault;
  };
  OptimizerOptions& o = job.optimizer;
  RunOptions& run = job.run;
  if (o.update.kind.empty()) o.update.kind = gpt ? "adamw" : "sgd";
  if (unset(o.update.weight_decay)) o.update.weight_decay = gpt ? 0.1 : (kind == "cnn" ? 5e-4 : 0.0);
  if (unset(o.schedule.min_ratio)) o.schedule.min_ratio = gpt ? 0.1 : 0.0;
  if (unset(o.grad_clip)) o.grad_clip = gpt ? 1.0 : 0.0;
  if (unset(o.schedule.warmup)) o.schedule.warmup = gpt ? 100 : 0;
  if (unset(job.data.batch)) job.data.batch = gpt ? 16 : 64;
  // SGD's 0.05 is tuned for batch 64; a smaller batch's noisier gradient
  // takes the lr down in proportion (Goyal et al.'s linear scaling rule;
  // at 0.05 a batch of 7 kills the MLP's ReLUs within a thousand steps).
  // Larger batches keep 0.05: scaling up needs warmup to be safe.
  if (unset(o.schedule.lr)) o.schedule.lr = gpt ? 1e-3 : 0.05 * std::min<double>(job.data.batch, 64) / 64;
  if (unset(run.epochs)) run.epochs = 0;
  if (unset(run.steps)) {
    run.steps = gpt ? 3500 : 0;
    if (!gpt && run.epochs == 0) run.epochs = 2;
  }
  if (run.epochs > 0) run.steps = 0;
  if (unset(run.eval_every)) run.eval_every = gpt ? 500 : 0;
  if (unset(run.sample_tokens)) run.sample_tokens = gpt ? 300 : 0;
}

}  // namespace px
