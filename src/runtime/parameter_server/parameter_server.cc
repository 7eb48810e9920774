#include "runtime/parameter_server/parameter_server.h"

#include <cstring>
#include <fstream>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/parameter_server/poll.h"
#include "runtime/parameter_server/server.h"
#include "runtime/parameter_server/server_slice.h"
#include "runtime/parameter_server/worker.h"
#include "runtime/train/progress.h"

namespace px {
namespace {

using ps::Layout;

std::map<std::string, bool> decay_flags(const Graph& g) {
  std::map<std::string, bool> out;
  for (ValueId p : g.params()) out[g.value(p).name] = g.value(p).weight_decay;
  return out;
}

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

}  // namespace

TrainResult train_parameter_server(TrainOptions o, comm::Communicator& world, std::ostream& log) {
  // A private tag space: the protocol's fixed tags never meet another user's.
  comm::Communicator comm = world.split(0, world.rank());
  const int rank = comm.rank();
  Checkpoint resumed;
  if (!o.resume.empty()) {
    resumed = load_checkpoint(o.resume);
    apply_model_json(resumed.state.config, o);
  }
  o.ranks = comm.size();
  validate(o);
  std::unique_ptr<Task> task = make_task(o);
  const int64_t total = o.steps > 0 ? o.steps : o.epochs * task->steps_per_epoch();
  o.schedule.total = total;

  nn::Model shape_model = task->build(1, false);
  const std::map<std::string, bool> decays = decay_flags(shape_model.graph);
  ParamStore params = ParamStore::initialize(shape_model.graph, o.seed);
  validate(o.optimizer);
  int64_t start = 0, optimizer_steps = 0;
  if (!o.resume.empty()) {
    for (const std::string& name : params.names())
      params.at(name) = resumed.shards.read_whole(name, params.at(name).shape());
    start = resumed.state.step;
    optimizer_steps = resumed.state.optimizer_steps;
    task->restore_data_state(resumed.state.data);
    log << fmt::format("resumed from '{}' at step {}\n", o.resume, start);
  }
  const int64_t end = o.stop_after > 0 ? std::min(o.stop_after, total) : total;
  const Layout layout{.servers = o.ps.servers, .workers = comm.size() - o.ps.servers, .params = params.count()};
  log << fmt::format(
      "model {} with {} parameters; {} steps of global batch {}; parameter server ({}{}{}): {} server{}, {} workers "
      "({}); threads {}\n",
      o.model, params.count(), total, o.batch, o.ps.mode,
      o.ps.mode == "ssp" ? fmt::format(", staleness {}", o.ps.staleness) : "",
      o.ps.backup_workers > 0 ? fmt::format(", {} backup worker{}", o.ps.backup_workers,
                                            o.ps.backup_workers > 1 ? "s" : "")
                              : "",
      layout.servers,
      layout.servers > 1 ? "s" : "", layout.workers, comm.backend(), o.threads);

  TrainResult result;
  if (!layout.is_server(rank)) {
    const int worker = layout.worker_of(rank);
    ps::Worker runner(comm, layout, *task, params,
                      {.start_clock = start, .end_clock = end, .grad_clip = o.grad_clip,
                       .seed = o.seed, .bsp = o.ps.mode == "bsp",
                       .delay_ms = rank == o.inject_delay_rank ? o.inject_delay_ms : 0});
    ps::WorkerStats stats = runner.run();
    if (worker == 0) send_data_state(comm, task->data_state());
    result.steps = end;
    result.max_staleness = stats.max_staleness;
    result.peak_tensor_bytes = stats.peak_tensor_bytes;
    return result;
  }

  ps::ServerSlice shard(o.optimizer, params, decays, layout.shard(rank), o.resume.empty() ? nullptr : &resumed.shards,
                        optimizer_steps);
  ps::Server server(comm, layout, shard,
                    {.mode = o.ps.mode, .staleness = o.ps.staleness, .backup_workers = o.ps.backup_workers,
                     .late_worker = o.ps.late_worker, .start_clock = start, .end_clock = end,
                     .schedule = o.schedule});
  const bool lead = rank == 0;
  std::ofstream metrics;
  if (lead && !o.metrics.empty()) {
    metrics.open(o.metrics, o.resume.empty() ? std::ios::trunc : std::ios::app);
    if (!metrics) fail("cannot open metrics file '{}' for writing", o.metrics);
  }
  Progress progress(total, start, task->unit(), o.progress_bar, log);
  server.run([&](int64_t clock, double loss) {
    if (!lead) return;
    if (!std::isfinite(loss)) fail("training diverged at step {}: loss is {}", clock + 1, loss);
    result.losses.push_back(loss);
    result.last_train_loss = loss;
    if (metrics.is_open())
      metrics << nlohmann::json{{"step", clock + 1}, {"train_loss", loss}, {"lr", o.schedule.at(clock)},
                                {"time_s", progress.elapsed_seconds()}}.dump()
              << "\n" << std::flush;
    progress.update(clock + 1, loss, o.batch * task->units_per_row());
  });
  progress.finish();
  result.steps = end;
  result.seconds = progress.elapsed_seconds();
  result.max_staleness = server.max_staleness();
  if (o.ps.mode == "bsp") {
    result.dropped_pushes = server.dropped_pushes();
    result.gradients_per_update = server.gradients_per_update();
  }
  if (!lead) {
    send_shard(comm, shard);
    return result;
  }

  const Gathered gathered = gather_shards(comm, layout, shard);
  std::vector<SavedRun> state_runs = unflatten(gathered, params, o.optimizer.kind);
  task->restore_data_state(receive_data_state(comm, layout.rank_of_worker(0)));
  Evaluation e = task->evaluate(params).mean();
  result.evaluation = e;
  nlohmann::json line{{"step", end}, {"val_loss", e.loss}};
  std::string text = fmt::format("eval at step {}: val_loss {:.4f}", end, e.loss);
  if (e.accuracy >= 0) {
    line["val_accuracy"] = e.accuracy;
    text += fmt::format(", val_accuracy {:.2f}%", 100 * e.accuracy);
  }
  if (metrics.is_open()) metrics << line.dump() << "\n" << std::flush;
  log << text << "\n";
  if (!o.save.empty()) {
    const CheckpointState state{.step = end,
                                .config = model_json(o),
                                .data = task->data_state(),
                                .optimizer = o.optimizer.kind,
                                .optimizer_steps = gathered.updates,
                                .ranks = comm.size(),
                                .parameter_server = o.ps.mode};
    // The lead gathered everything: one shard file of whole tensors.
    save_checkpoint(o.save, nullptr, {.shards = std::move(state_runs), .model = params.named(), .state = state});
    log << fmt::format("saved checkpoint to '{}'\n", o.save);
  }
  log << fmt::format("trained {} steps in {:.1f} s; largest staleness a worker computed with: {}\n",
                     result.losses.size(), result.seconds, result.max_staleness);
  if (o.ps.backup_workers > 0)
    log << fmt::format("{} backup worker{}: gradients dropped per worker (too late for their step's update): [{}]\n",
                       o.ps.backup_workers, o.ps.backup_workers > 1 ? "s" : "", fmt::join(result.dropped_pushes, ", "));
  return result;
}

}  // namespace px
