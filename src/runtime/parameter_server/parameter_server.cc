#include "runtime/parameter_server/parameter_server.h"

#include <cstring>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/parameter_server/poll.h"
#include "runtime/parameter_server/server.h"
#include "runtime/parameter_server/server_slice.h"
#include "runtime/parameter_server/worker.h"
#include "runtime/train/metrics.h"
#include "runtime/train/progress.h"
#include "runtime/train/resume.h"

namespace px {
namespace {

using ps::Layout;

// The slice's parameters, then each optimizer slot: (1 + slots) x count floats.
std::vector<float> flatten(const ps::ServerSlice& shard) {
  std::vector<float> values(shard.params().begin(), shard.params().end());
  for (size_t k = 0; k < shard.slot_count(); ++k) {
    const std::vector<float> slot = shard.slot(k);
    values.insert(values.end(), slot.begin(), slot.end());
  }
  return values;
}

// Server j > 0 sends its slice to rank 0: a GatherHeader, then one message
// of (1 + slots) x count floats.
void send_shard(comm::Communicator& comm, const ps::ServerSlice& shard) {
  ps::GatherHeader header{.updates = shard.updates()};
  std::vector<float> values = flatten(shard);
  comm::Request requests[] = {comm.isend(0, ps::kGatherHeader, &header, sizeof(header)),
                              comm.isend(0, ps::kGatherTensors, values.data(), values.size() * sizeof(float))};
  for (comm::Request& request : requests) ps::await(comm, request, "rank 0 to gather the final parameters");
}

// Rank 0: every server's shard into flat (N) parameters and (slots, N) optimizer state.
struct Gathered {
  std::vector<float> params;
  std::vector<std::vector<float>> slots;
  int64_t updates = 0;
};

Gathered gather_shards(comm::Communicator& comm, const Layout& layout, const ps::ServerSlice& own) {
  const size_t slot_count = own.slot_count();
  Gathered out{.params = std::vector<float>(static_cast<size_t>(layout.params)),
               .slots = std::vector<std::vector<float>>(slot_count, std::vector<float>(static_cast<size_t>(layout.params))),
               .updates = own.updates()};
  auto place = [&](comm::Block shard, const float* values) {
    const size_t count = static_cast<size_t>(shard.count);
    std::memcpy(out.params.data() + shard.begin, values, count * sizeof(float));
    for (size_t s = 0; s < slot_count; ++s)
      std::memcpy(out.slots[s].data() + shard.begin, values + (s + 1) * count, count * sizeof(float));
  };
  place(own.slice(), flatten(own).data());
  for (int j = 1; j < layout.servers; ++j) {
    const comm::Block shard = layout.shard(j);
    ps::GatherHeader header;
    std::vector<float> values(static_cast<size_t>(shard.count) * (1 + slot_count));
    comm::Request requests[] = {comm.irecv(j, ps::kGatherHeader, &header, sizeof(header)),
                                comm.irecv(j, ps::kGatherTensors, values.data(), values.size() * sizeof(float))};
    for (comm::Request& request : requests)
      ps::await(comm, request, fmt::format("server rank {}'s final shard", j));
    PX_CHECK_EQ(header.updates, out.updates);  // every server applies every push
    place(shard, values.data());
  }
  return out;
}

// Writes the gathered flat state back into a ParamStore; returns every
// parameter and optimizer slot "<param>.<slot>" whole, for a checkpoint.
std::vector<SavedRun> unflatten(const Gathered& gathered, ParamStore& params, const std::string& optimizer) {
  std::vector<int64_t> offsets = ps::flat_offsets(params);
  const std::vector<std::string> slot_names = optimizer_slot_names(optimizer);
  PX_CHECK_EQ(slot_names.size(), gathered.slots.size());
  std::vector<SavedRun> runs;
  for (size_t t = 0; t < offsets.size(); ++t) {
    const std::string& name = params.names()[t];
    Tensor& value = params.at(name);
    const size_t bytes = static_cast<size_t>(value.numel()) * sizeof(float);
    std::memcpy(value.f32(), gathered.params.data() + offsets[t], bytes);
    const parallel::ShardRun whole = parallel::ShardRun::whole(value.shape());
    runs.push_back({name, whole, value.clone().reshape(Shape{value.numel()})});
    for (size_t s = 0; s < slot_names.size(); ++s) {
      Tensor slot = Tensor::empty(Shape{value.numel()});
      std::memcpy(slot.f32(), gathered.slots[s].data() + offsets[t], bytes);
      runs.push_back({name + "." + slot_names[s], whole, slot});
    }
  }
  return runs;
}

void send_data_state(comm::Communicator& comm, const nlohmann::json& state) {
  const std::string text = state.dump();
  const int64_t size = static_cast<int64_t>(text.size());
  comm::Request requests[] = {comm.isend(0, ps::kDataStateSize, &size, sizeof(size)),
                              comm.isend(0, ps::kDataState, text.data(), text.size())};
  for (comm::Request& request : requests) ps::await(comm, request, "rank 0 to take the data-order state");
}

nlohmann::json receive_data_state(comm::Communicator& comm, int from) {
  int64_t size = 0;
  comm::Request request = comm.irecv(from, ps::kDataStateSize, &size, sizeof(size));
  ps::await(comm, request, "the first worker's data-order state");
  std::string text(static_cast<size_t>(size), '\0');
  request = comm.irecv(from, ps::kDataState, text.data(), text.size());
  ps::await(comm, request, "the first worker's data-order state");
  return nlohmann::json::parse(text);
}

// One parameter-server job as every rank sees it once set up: the job's
// parts (the resumed model and data, the schedule's length) and its state.
struct Job {
  const nn::ModelConfig& model;
  const DataOptions& data;
  Precision precision;
  const OptimizerOptions& optimizer;
  const ParameterServerOptions& ps;
  const CheckpointOptions& checkpoint;
  const FaultOptions& fault;
  const RunOptions& run;
  comm::Communicator& comm;
  Task& task;
  ParamStore& params;  // the initial or resumed parameters, whole
  const std::map<std::string, ParamRule>& rules;
  Layout layout;
  const Checkpoint* resumed;  // nullptr: from the start
  int64_t start = 0, end = 0, total = 0;
  std::ostream& log;
};

void log_job(const Job& job) {
  const ParameterServerOptions& ps = job.ps;
  job.log << fmt::format(
      "model {} with {} parameters; {} steps of global batch {}; parameter server ({}{}{}): {} server{}, {} workers "
      "({}); threads {}\n",
      job.model.kind, job.params.count(), job.total, job.data.batch, ps.mode,
      ps.mode == "ssp" ? fmt::format(", staleness {}", ps.staleness) : "",
      ps.backup_workers > 0 ? fmt::format(", {} backup worker{}", ps.backup_workers, ps.backup_workers > 1 ? "s" : "")
                            : "",
      job.layout.servers, job.layout.servers > 1 ? "s" : "", job.layout.workers, job.comm.backend(), job.run.threads);
}

ParameterServerResult run_worker(const Job& job) {
  const int rank = job.comm.rank();
  ps::Worker runner(job.comm, job.layout, job.task, job.params,
                    {.start_clock = job.start, .end_clock = job.end, .grad_clip = job.optimizer.grad_clip,
                     .seed = job.run.seed, .bsp = job.ps.mode == "bsp",
                     .delay_ms = rank == job.fault.inject_delay_rank ? job.fault.inject_delay_ms : 0,
                     .precision = job.precision});
  ps::WorkerStats stats = runner.run();
  if (job.layout.worker_of(rank) == 0) send_data_state(job.comm, job.task.data_state());
  ParameterServerResult result;
  result.run.steps = job.end;
  result.run.peak_tensor_bytes = stats.peak_tensor_bytes;
  result.parameter_server.max_staleness = stats.max_staleness;
  return result;
}

// Rank 0 once every clock is applied: the servers' shards gathered, the
// model evaluated and the checkpoint saved (whole tensors, one shard
// file: any rank count and strategy resumes it).
void finish_lead(const Job& job, const ps::ServerSlice& shard, MetricsLog& metrics, ParameterServerResult& out) {
  RunReport& result = out.run;
  const ParameterServerReport& figures = out.parameter_server;
  const Gathered gathered = gather_shards(job.comm, job.layout, shard);
  std::vector<SavedRun> state_runs = unflatten(gathered, job.params, job.optimizer.update.kind);
  job.task.restore_data_state(receive_data_state(job.comm, job.layout.rank_of_worker(0)));
  result.evaluation = job.task.evaluate(job.params).mean();
  const EvaluationReport report = report_evaluation(result.evaluation, job.end);
  metrics.write(report.line);
  job.log << report.text << "\n";
  const std::string& save = job.checkpoint.save;
  if (!save.empty()) {
    CheckpointState state = run_state(job.model, job.data, job.optimizer.update.kind, job.task, job.end,
                                      gathered.updates, job.comm.size());
    state.parameter_server = job.ps.mode;
    save_checkpoint(save, nullptr, {.shards = std::move(state_runs), .model = job.params.named(), .state = state});
    job.log << fmt::format("saved checkpoint to '{}'\n", save);
  }
  job.log << fmt::format("trained {} steps in {:.1f} s; largest staleness a worker computed with: {}\n",
                         result.losses.size(), result.seconds, figures.max_staleness);
  if (job.ps.backup_workers > 0)
    job.log << fmt::format(
        "{} backup worker{}: gradients dropped per worker (too late for their step's update): [{}]\n",
        job.ps.backup_workers, job.ps.backup_workers > 1 ? "s" : "", fmt::join(figures.dropped_pushes, ", "));
}

ParameterServerResult run_server(const Job& job) {
  const int rank = job.comm.rank();
  const bool lead = rank == 0;
  const ParameterServerOptions& ps = job.ps;
  ps::ServerSlice shard(job.optimizer.update, job.params, job.rules, job.layout.shard(rank),
                        job.resumed ? &job.resumed->shards : nullptr,
                        job.resumed ? job.resumed->state.optimizer_steps : 0);
  ps::Server server(job.comm, job.layout, shard,
                    {.mode = ps.mode, .staleness = ps.staleness, .backup_workers = ps.backup_workers,
                     .late_worker = ps.late_worker, .start_clock = job.start, .end_clock = job.end,
                     .schedule = job.optimizer.schedule});
  MetricsLog metrics(lead ? job.run.metrics : std::string(), job.resumed != nullptr);
  Progress progress(job.total, job.start, job.task.unit(), job.run.progress_bar, job.log);
  ParameterServerResult result;
  server.run([&](int64_t clock, double loss) {
    if (!lead) return;
    if (!std::isfinite(loss)) fail("training diverged at step {}: loss is {}", clock + 1, loss);
    result.run.losses.push_back(loss);
    result.run.last_train_loss = loss;
    metrics.write({{"step", clock + 1}, {"train_loss", loss}, {"lr", job.optimizer.schedule.at(clock)},
                   {"time_s", progress.elapsed_seconds()}});
    progress.update(clock + 1, loss, job.data.batch * job.task.units_per_row());
  });
  progress.finish();
  result.run.steps = job.end;
  result.run.seconds = progress.elapsed_seconds();
  result.parameter_server.max_staleness = server.max_staleness();
  if (ps.mode == "bsp") {
    result.parameter_server.dropped_pushes = server.dropped_pushes();
    result.parameter_server.gradients_per_update = server.gradients_per_update();
  }
  if (lead) finish_lead(job, shard, metrics, result);
  else send_shard(job.comm, shard);
  return result;
}

}  // namespace

ParameterServerResult train_parameter_server(const nn::ModelConfig& model_config, const DataOptions& data_options,
                                             Precision precision, const OptimizerOptions& optimizer_options,
                                             const ParameterServerOptions& ps, const CheckpointOptions& checkpoint,
                                             const FaultOptions& fault, const RunOptions& run,
                                             comm::Communicator& world, std::ostream& log) {
  // A private tag space: the protocol's fixed tags never meet another user's.
  comm::Communicator comm = world.split(0, world.rank());
  const ResumePoint resume(checkpoint.resume, checkpoint.resume_if_saved, nullptr, nullptr);
  // A resumed run trains the checkpoint's model on its data.
  WholeModelStart run_start = start_whole_model(resume, model_config, data_options, precision, optimizer_options, run,
                                                checkpoint.resume, log);
  const nn::ModelConfig& model = run_start.model;
  const DataOptions& data = run_start.data;
  const OptimizerOptions& optimizer = run_start.optimizer;
  Task* task = run_start.task.get();
  ParamStore& params = run_start.params;
  const int64_t total = run_start.total, start = run_start.start;
  const std::map<std::string, ParamRule> rules = param_rules(run_start.shape_model.graph);
  const Checkpoint* resumed = resume.checkpoint();
  const Job job{.model = model, .data = data, .precision = precision, .optimizer = optimizer, .ps = ps, .checkpoint = checkpoint,
                .fault = fault, .run = run, .comm = comm, .task = *task, .params = params, .rules = rules,
                .layout = {.servers = ps.servers, .workers = comm.size() - ps.servers, .params = params.count()},
                .resumed = resumed, .start = start,
                .end = run.stop_after > 0 ? std::min(run.stop_after, total) : total, .total = total, .log = log};
  log_job(job);
  return job.layout.is_server(comm.rank()) ? run_server(job) : run_worker(job);
}

}  // namespace px
