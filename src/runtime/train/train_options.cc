#include "runtime/train/train_options.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>

#include "kernels/cpu_features.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/fault/watchdog.h"

namespace px {

static void validate_parameter_server(const TrainOptions& o) {
  const ParameterServerOptions& ps = o.ps;
  if (ps.mode.empty()) {
    if (ps.servers != 1) fail("--ps-servers {} needs a parameter-server mode: give --ps bsp, asp or ssp", ps.servers);
    if (ps.staleness != 0) fail("--staleness {} needs --ps ssp", ps.staleness);
    if (ps.backup_workers != 0) fail("--backup-workers {} needs --ps bsp", ps.backup_workers);
    return;
  }
  if (ps.mode != "bsp" && ps.mode != "asp" && ps.mode != "ssp")
    fail("parameter-server mode '{}' is unknown: expected bsp, asp or ssp", ps.mode);
  if (ps.servers < 1) fail("--ps-servers {} must be >= 1", ps.servers);
  if (ps.servers >= o.ranks)
    fail("--ps-servers {} leaves no worker among {} ranks: expected more ranks than servers (e.g. --ranks {})",
         ps.servers, o.ranks, ps.servers + 1);
  if (ps.staleness < 0) fail("--staleness {} must be >= 0", ps.staleness);
  if (ps.staleness != 0 && ps.mode != "ssp")
    fail("--staleness {} is for --ps ssp; mode '{}' does not take a bound", ps.staleness, ps.mode);
  const int workers = o.ranks - ps.servers;
  if (ps.backup_workers < 0) fail("--backup-workers {} must be >= 0", ps.backup_workers);
  if (ps.backup_workers != 0 && ps.mode != "bsp")
    fail("--backup-workers {} is for --ps bsp; mode '{}' applies every gradient as it arrives", ps.backup_workers,
         ps.mode);
  if (ps.backup_workers >= workers)
    fail("--backup-workers {} leaves no gradient for an update: expected fewer than the {} workers ({} ranks - {} "
         "server{})",
         ps.backup_workers, workers, o.ranks, ps.servers, ps.servers > 1 ? "s" : "");
  if (ps.late_worker < -1 || ps.late_worker >= workers)
    fail("late worker {} is not a worker: expected -1 (none) or 0..{}", ps.late_worker, workers - 1);
  if (o.inject_delay_rank >= 0 && o.inject_delay_rank < ps.servers)
    fail("--inject-delay names rank {}, a parameter server (ranks 0..{}): name a worker rank, {}..{}",
         o.inject_delay_rank, ps.servers - 1, ps.servers, o.ranks - 1);
  if (o.save_every > 0)
    fail("--save-every {} is not supported with --ps {}: parameter-server runs save at the end (or --stop-after)",
         o.save_every, ps.mode);
  if (!o.inject_nan_steps.empty() || !o.skip_batches.empty())
    fail("--inject-nan and --skip-batches are not supported with --ps {}: bad steps are skipped by the data-parallel "
         "trainer (the servers apply each gradient as it arrives)",
         ps.mode);
}

// The timeouts in the milliseconds the runtime counts, unchecked (a value
// past kLongestTimeoutSeconds would overflow them: validate_liveness first).
static LivenessTimeouts timeouts_of(const TrainOptions& o) {
  auto milliseconds = [](double seconds) { return std::chrono::milliseconds(std::llround(seconds * 1000)); };
  const double wait_s = o.wait_timeout_s == 0 ? kWaitTimeoutPerTimeout * o.timeout_s : o.wait_timeout_s;
  return {.heartbeat = milliseconds(o.timeout_s), .wait = milliseconds(wait_s)};
}

// A wait's own timeout is the backstop: it must not race the watchdog's
// verdict on a silent rank (Watchdog::latest_verdict).
static void validate_liveness(const TrainOptions& o) {
  if (!(o.timeout_s > 0) || o.timeout_s > kLongestTimeoutSeconds)
    fail("--timeout {} s: expected more than 0 and at most {:g} s", o.timeout_s, kLongestTimeoutSeconds);
  if (!(o.wait_timeout_s >= 0) || o.wait_timeout_s > kLongestTimeoutSeconds)
    fail("--wait-timeout {} s: expected 0 (the default, {} x --timeout) or more than --timeout, at most {:g} s",
         o.wait_timeout_s, kWaitTimeoutPerTimeout, kLongestTimeoutSeconds);
  const LivenessTimeouts t = timeouts_of(o);
  const std::chrono::milliseconds verdict = Watchdog::latest_verdict(t.heartbeat);
  if (t.wait > verdict) return;
  const std::string given = o.wait_timeout_s == 0
                                ? fmt::format("{:g} s (the default, {} x --timeout {} s)", t.wait.count() / 1e3,
                                              kWaitTimeoutPerTimeout, o.timeout_s)
                                : fmt::format("{} s", o.wait_timeout_s);
  fail("--wait-timeout {} must be longer than {:g} s: the watchdog names a silent rank up to --timeout {} s and "
       "two of its {:g} s periods after it fell silent, and a wait's own timeout is the backstop after that verdict",
       given, verdict.count() / 1e3, o.timeout_s, Watchdog::period_for(t.heartbeat).count() / 1e3);
}

LivenessTimeouts liveness_timeouts(const TrainOptions& o) {
  validate_liveness(o);
  return timeouts_of(o);
}

void validate(const TrainOptions& o) {
  const bool onnx = nn::is_onnx_path(o.model);
  if (o.model != "mlp" && o.model != "cnn" && o.model != "gpt" && !onnx)
    fail("model '{}' is unknown: expected mlp, cnn, gpt or a FILE.onnx", o.model);
  if (onnx) nn::require_onnx(fmt::format("model '{}'", o.model));
  if (!onnx && (!o.onnx.loss.empty() || !o.onnx.bindings.empty()))
    fail("--loss and --input bind an imported model's outputs and inputs: give --model FILE.onnx");
  if (o.batch <= 0) fail("batch size {} must be positive", o.batch);
  if (parse_precision(o.precision) == Precision::bf16) kernels::require_avx512_bf16("--precision bf16");
  // Micro-batches need not divide the batch: a rank's rows are cut as evenly
  // as they go (some micro-batches one row longer; more micro-batches than
  // rows leaves some empty).
  if (o.accumulation <= 0) fail("micro-batches (gradient accumulation) {} must be >= 1", o.accumulation);
  if (o.steps < 0 || o.epochs < 0) fail("steps {} and epochs {} must be >= 0", o.steps, o.epochs);
  if (o.steps == 0 && o.epochs == 0) fail("give --steps or --epochs (both are 0)");
  if (o.epochs > 0 && o.model == "gpt") fail("--epochs is for the classifiers; give gpt --steps");
  if (o.grad_clip < 0) fail("gradient clip {} must be >= 0", o.grad_clip);
  if (o.threads < 1) fail("threads {} must be >= 1", o.threads);
  if (o.ranks < 1) fail("ranks {} must be >= 1", o.ranks);
  const int tp = o.strategy.tensor_parallel, pp = o.strategy.pipeline_parallel, cp = o.strategy.context_parallel;
  if (tp < 1) fail("--tp {} must be >= 1", tp);
  if (pp < 1) fail("--pp {} must be >= 1", pp);
  if (cp < 1) fail("--cp {} must be >= 1", cp);
  if (o.ranks % (tp * pp * cp) != 0)
    fail("--pp {} x --cp {} x --tp {} does not divide the {} ranks: the mesh is {{pp: pp, dp: ranks / (pp cp tp), "
         "cp: cp, tp: tp}}",
         pp, cp, tp, o.ranks);
  const int dp = o.ranks / (tp * pp * cp);
  if (o.batch < dp)
    fail("batch size {} is smaller than the {} data-parallel ranks: expected at least one row a rank", o.batch, dp);
  // How the strategy's parts combine is parallel::validate's (parallel/compose.h).
  if (pp > 1 && !o.ps.mode.empty()) fail("pipeline stages and parameter servers do not combine: drop --pp or --ps");
  if (tp > 1 || o.strategy.sequence_parallel) {
    if (!o.ps.mode.empty()) fail("tensor parallelism and parameter servers do not combine: drop --tp or --ps");
    if (o.model == "gpt" && o.gpt.n_head % tp != 0)
      fail("--tp {} does not divide n_head={}: each tensor-parallel rank computes whole attention heads (try --tp "
           "{} or --heads {})",
           tp, o.gpt.n_head, std::gcd(static_cast<int64_t>(tp), o.gpt.n_head), tp * ((o.gpt.n_head + tp - 1) / tp));
    if (o.strategy.sequence_parallel && o.model != "gpt" && !o.model.ends_with(".onnx"))
      fail("--sequence-parallel needs a sequence: the gpt model or a transformer imported from ONNX");
  }
  if (o.link_gbps < 0) fail("link limit {} Gb/s must be >= 0 (0: unlimited)", o.link_gbps);
  if (o.inject_delay_rank >= o.ranks)
    fail("--inject-delay names rank {}, but the job has ranks 0..{}", o.inject_delay_rank, o.ranks - 1);
  if (o.inject_delay_ms < 0) fail("injected delay {} ms must be >= 0", o.inject_delay_ms);
  if (o.strategy.bucket_bytes < 0) fail("bucket size {} bytes must be >= 0", o.strategy.bucket_bytes);
  if (o.eval_every < 0 || o.save_every < 0) fail("eval/save intervals must be >= 0");
  if (o.stop_after < 0) fail("stop-after step {} must be >= 0", o.stop_after);
  for (int64_t b : o.skip_batches)
    if (b < 1) fail("--skip-batches {}: batches are numbered from 1 in the order drawn", b);
  for (int64_t s : o.inject_nan_steps)
    if (s < 1) fail("--inject-nan {}: steps are numbered from 1", s);
  validate_liveness(o);
  if (o.inject_fault.rank >= o.ranks)
    fail("--inject-fault names rank {}, but the job has ranks 0..{}", o.inject_fault.rank, o.ranks - 1);
  if (o.inject_fault.rank >= 0 && o.inject_fault.step < 1)
    fail("--inject-fault step {}: steps are numbered from 1", o.inject_fault.step);
  if (o.inject_fault.mode != "kill" && o.inject_fault.mode != "hang" && o.inject_fault.mode != "lost")
    fail("--inject-fault mode '{}': expected kill, hang or lost", o.inject_fault.mode);
  if (o.keep_last < 1) fail("--keep-last {}: keep at least the latest checkpoint (1)", o.keep_last);
  // Before step 1, not at the first save: a save replaces its own files.
  check_not_replaced_by_saves(o.save, o.metrics, "--metrics");
  check_not_replaced_by_saves(o.save, o.trace, "--trace");
  check_not_replaced_by_saves(o.save, o.run_dir, "--run-dir", OutputKind::directory);
  if (o.max_restarts < 0) fail("--max-restarts {} must be >= 0", o.max_restarts);
  if (o.min_ranks < 0 || o.min_ranks > o.ranks)
    fail("--min-ranks {}: expected 0 (keep the rank count) up to the job's {} ranks", o.min_ranks, o.ranks);
  if (!o.inject_nan_steps.empty() && o.strategy.p3_slice_bytes > 0)
    fail("--inject-nan with P3: P3 updates each layer before the global norm is known, so a bad step cannot be "
         "skipped (drop --p3-slice-kb)");
  if (o.eval_batches <= 0) fail("eval batches {} must be positive", o.eval_batches);
  validate_parameter_server(o);
  validate(o.optimizer);
  validate(o.schedule);
  if (o.model == "gpt") nn::validate(o.gpt);
  if (o.model == "gpt" && o.gpt.vocab < 256)
    fail("--vocab {} is below the 256 byte values the text corpora are tokenized into", o.gpt.vocab);
  if (o.model == "mlp") nn::validate(o.mlp);
  if (o.model == "cnn") nn::validate(o.cnn);
}

nlohmann::json model_json(const TrainOptions& o) {
  nlohmann::json j{{"model", o.model}, {"data", o.data}};
  if (o.model == "gpt")
    j["gpt"] = {{"vocab", o.gpt.vocab},     {"block", o.gpt.block},   {"n_layer", o.gpt.n_layer},
                {"n_head", o.gpt.n_head},   {"n_embd", o.gpt.n_embd}, {"dropout", o.gpt.dropout}};
  if (o.model == "mlp") j["mlp"] = {{"inputs", o.mlp.inputs}, {"hidden", o.mlp.hidden}, {"classes", o.mlp.classes}};
  if (o.model == "cnn")
    j["cnn"] = {{"channels1", o.cnn.channels1}, {"channels2", o.cnn.channels2}, {"hidden", o.cnn.hidden},
                {"classes", o.cnn.classes}};
  if (nn::is_onnx_path(o.model)) {
    nlohmann::json inputs = nlohmann::json::object();
    for (const nn::InputBinding& b : o.onnx.bindings) inputs[b.input] = nn::input_role_name(b.role);
    j["onnx"] = {{"loss", o.onnx.loss}, {"inputs", inputs}};
  }
  return j;
}

namespace {

// The model config saved with a checkpoint, read field by field: a damaged
// or hand-edited file gets a px::Error naming the field and its value.
// Sizes are integers (a JSON 1e300 must not become an int64) and the model
// kind one parallax knows.
class ModelConfigReader {
 public:
  explicit ModelConfigReader(const nlohmann::json& config) : config_(config) {
    if (!config.is_object()) fail("checkpoint model config is {}, expected a JSON object", config.dump());
  }
  const nlohmann::json& section(const std::string& key) const {
    if (!config_.contains(key) || !config_.at(key).is_object())
      fail("checkpoint model config has no '{}' object: {}", key, config_.dump());
    return config_.at(key);
  }
  std::string string(const std::string& key, std::string fallback) const {
    if (!config_.contains(key)) return fallback;
    if (!config_.at(key).is_string())
      fail("checkpoint model config: {} is {}, expected a string", key, config_.at(key).dump());
    return config_.at(key).get<std::string>();
  }
  static int64_t size(const nlohmann::json& section, const std::string& where, const std::string& key) {
    if (!section.contains(key)) fail("checkpoint model config: {}.{} is missing, expected an integer", where, key);
    return integer(section.at(key), where + "." + key);
  }
  static int64_t integer(const nlohmann::json& v, const std::string& what) {
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)))
      fail("checkpoint model config: {} is {}, expected an integer", what, v.dump());
    return v.get<int64_t>();
  }
  static double number(const nlohmann::json& section, const std::string& where, const std::string& key) {
    if (!section.contains(key) || !section.at(key).is_number())
      fail("checkpoint model config: {}.{} is {}, expected a number", where, key,
           section.contains(key) ? section.at(key).dump() : "missing");
    return section.at(key).get<double>();
  }

 private:
  const nlohmann::json& config_;
};

// The "onnx" section: {"loss": "", "inputs": {"x": "images", ...}}.
nn::OnnxConfig read_onnx_config(const nlohmann::json& section) {
  nn::OnnxConfig onnx;
  if (!section.contains("loss") || !section.at("loss").is_string() || !section.contains("inputs") ||
      !section.at("inputs").is_object())
    fail("checkpoint model config: onnx is {}, expected {{\"loss\": string, \"inputs\": object}}", section.dump());
  onnx.loss = section.at("loss").get<std::string>();
  for (const auto& [name, role] : section.at("inputs").items()) {
    if (!role.is_string()) fail("checkpoint model config: onnx.inputs.{} is {}, expected a role", name, role.dump());
    onnx.bindings.push_back({.input = name, .role = nn::input_role(role.get<std::string>())});
  }
  return onnx;
}

}  // namespace

void apply_model_json(const nlohmann::json& j, TrainOptions& o) {
  const ModelConfigReader config(j);
  o.model = config.string("model", "");
  const bool onnx = nn::is_onnx_path(o.model);
  if (o.model != "gpt" && o.model != "mlp" && o.model != "cnn" && !onnx)
    fail("checkpoint model config: model is '{}', expected gpt, mlp, cnn or a FILE.onnx", o.model);
  o.data = config.string("data", "");
  using R = ModelConfigReader;
  if (onnx) {
    o.onnx = read_onnx_config(config.section("onnx"));
  } else if (o.model == "gpt") {
    const auto& g = config.section("gpt");
    o.gpt = {.vocab = R::size(g, "gpt", "vocab"), .block = R::size(g, "gpt", "block"),
             .n_layer = R::size(g, "gpt", "n_layer"), .n_head = R::size(g, "gpt", "n_head"),
             .n_embd = R::size(g, "gpt", "n_embd"), .dropout = R::number(g, "gpt", "dropout")};
  } else if (o.model == "mlp") {
    const auto& m = config.section("mlp");
    if (!m.contains("hidden") || !m.at("hidden").is_array())
      fail("checkpoint model config: mlp.hidden is {}, expected an array of widths",
           m.contains("hidden") ? m.at("hidden").dump() : "missing");
    std::vector<int64_t> hidden;
    for (size_t i = 0; i < m.at("hidden").size(); ++i)
      hidden.push_back(R::integer(m.at("hidden")[i], fmt::format("mlp.hidden[{}]", i)));
    o.mlp = {.inputs = R::size(m, "mlp", "inputs"), .hidden = hidden, .classes = R::size(m, "mlp", "classes")};
  } else {
    const auto& c = config.section("cnn");
    o.cnn = {.channels1 = R::size(c, "cnn", "channels1"), .channels2 = R::size(c, "cnn", "channels2"),
             .hidden = R::size(c, "cnn", "hidden"), .classes = R::size(c, "cnn", "classes")};
  }
}

void apply_model_defaults(TrainOptions& o) {
  const bool gpt = o.model == "gpt";
  auto unset = [](auto value) {
    if constexpr (std::is_floating_point_v<decltype(value)>) return std::isnan(value);
    else return value == kModelDefault;
  };
  if (o.optimizer.kind.empty()) o.optimizer.kind = gpt ? "adamw" : "sgd";
  if (unset(o.optimizer.weight_decay)) o.optimizer.weight_decay = gpt ? 0.1 : (o.model == "cnn" ? 5e-4 : 0.0);
  if (unset(o.schedule.min_ratio)) o.schedule.min_ratio = gpt ? 0.1 : 0.0;
  if (unset(o.grad_clip)) o.grad_clip = gpt ? 1.0 : 0.0;
  if (unset(o.schedule.warmup)) o.schedule.warmup = gpt ? 100 : 0;
  if (unset(o.batch)) o.batch = gpt ? 16 : 64;
  // SGD's 0.05 is tuned for batch 64; a smaller batch's noisier gradient
  // takes the lr down in proportion (Goyal et al.'s linear scaling rule;
  // at 0.05 a batch of 7 kills the MLP's ReLUs within a thousand steps).
  // Larger batches keep 0.05: scaling up needs warmup to be safe.
  if (unset(o.schedule.lr)) o.schedule.lr = gpt ? 1e-3 : 0.05 * std::min<double>(o.batch, 64) / 64;
  if (unset(o.epochs)) o.epochs = 0;
  if (unset(o.steps)) {
    o.steps = gpt ? 3500 : 0;
    if (!gpt && o.epochs == 0) o.epochs = 2;
  }
  if (o.epochs > 0) o.steps = 0;
  if (unset(o.eval_every)) o.eval_every = gpt ? 500 : 0;
  if (unset(o.sample_tokens)) o.sample_tokens = gpt ? 300 : 0;
}

}  // namespace px
