#include "serve/serve.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "comm/backends.h"
#include "kernels/threads.h"
#include "nn/gpt.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/tasks/model_json.h"
#include "serve/engine.h"
#include "serve/http_server.h"
#include "serve/run_log.h"

namespace px::serve {
namespace {

struct ServedModel {
  nn::GptConfig config;
  ParamStore weights;  // whole; each rank of a group cuts its shard
};

ServedModel load_model(const std::string& checkpoint) {
  nn::ModelConfig model;
  DataOptions data;
  apply_model_json(read_checkpoint_state(checkpoint).config, model, data);
  if (model.kind != "gpt") fail("serve: checkpoint '{}' holds a {} model; serve needs a gpt checkpoint", checkpoint, model.kind);
  ServedModel served{.config = model.gpt, .weights = ParamStore::initialize(nn::build_gpt(model.gpt, 1, 1, false).graph, 0)};
  served.weights.load(load_model_weights(checkpoint));
  return served;
}

// Each rank's KV blocks: --kv-memory of its heads' k and v, or room for
// max_running sequences of the whole context.
decode::KvCacheShape cache_shape(const ServeOptions& o, const nn::GptConfig& config, int tp) {
  const int64_t block_bytes = decode::kv_cache_bytes(config, {.blocks = 1, .block_tokens = o.block_tokens}) / tp;
  const int64_t blocks = o.kv_memory > 0 ? o.kv_memory / block_bytes
                                         : o.scheduler.max_running * ((config.block + o.block_tokens - 1) / o.block_tokens);
  if (blocks < 1)
    fail("--kv-memory {} bytes holds no block of {} tokens ({} bytes a rank for this model at tp {})", o.kv_memory,
         o.block_tokens, block_bytes, tp);
  return {.blocks = blocks, .block_tokens = o.block_tokens};
}

// An idle lead ticks its followers this often: well inside their timeout.
std::chrono::milliseconds idle_tick(const ServeOptions& o) {
  return std::chrono::milliseconds(std::min<int64_t>(1000, o.timeout_ms / 4));
}

// Rank 0: the engine and the HTTP server, until `stop` drains them.
void lead(const ServeOptions& o, const ServedModel& model, decode::DecodeGroup* group, const std::atomic<bool>& stop,
          std::ostream& log, const std::function<void(int port)>& on_listening) {
  const nn::GptConfig& config = model.config;
  const int tp = group ? group->size() : 1;
  const decode::KvCacheShape cache = cache_shape(o, config, tp);
  Engine engine(config, model.weights,
                {.scheduler = o.scheduler, .cache = cache, .max_waiting = o.max_waiting,
                 .max_queue_ms = o.max_queue_ms, .precision = o.precision,
                 .group = group});
  const int64_t block_bytes = decode::kv_cache_bytes(config, {.blocks = 1, .block_tokens = o.block_tokens}) / tp;
  log << fmt::format("serve: gpt (layers {}, heads {}, embd {}, context {}) from {}, {}, tensor-parallel over {} rank{}\n",
                     config.n_layer, config.n_head, config.n_embd, config.block, o.checkpoint,
                     precision_name(o.precision), tp, tp == 1 ? "" : "s");
  log << fmt::format("serve: KV cache of {} tokens ({} blocks of {}, {:.1f} MiB a rank): {} sequences of the whole "
                     "context\n",
                     engine.pool_tokens(), cache.blocks, o.block_tokens,
                     static_cast<double>(cache.blocks * block_bytes) / (1 << 20), engine.pool_tokens() / config.block);

  const nlohmann::json card = {{"layers", config.n_layer}, {"heads", config.n_head}, {"embd", config.n_embd},
                               {"context", config.block},  {"vocab", config.vocab},  {"tp", tp},
                               {"precision", precision_name(o.precision)}};
  std::optional<ServeRunLog> run_log;  // stops before the engine goes
  if (!o.run_dir.empty()) {
    nlohmann::json facts = {{"model", card},
                            {"checkpoint", o.checkpoint},
                            {"tp", tp},
                            {"scheduler", batching_name(o.scheduler.batching)},
                            {"max_batch_tokens", o.scheduler.max_batch_tokens},
                            {"max_running", o.scheduler.max_running},
                            {"kv_blocks", cache.blocks},
                            {"block_tokens", cache.block_tokens}};
    run_log.emplace(o.run_dir, engine.metrics(), std::move(facts));
  }
  const auto lowering = std::chrono::steady_clock::now();
  const int64_t programs = engine.prepare();
  log << fmt::format("serve: {} decode Programs (1 to {} rows) lowered in {:.2f} s\n", programs,
                     o.scheduler.max_batch_tokens,
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - lowering).count());
  HttpServer http(engine, {.host = o.host, .port = o.port, .threads = o.http_threads, .model = "parallax-gpt", .card = card});
  const int port = http.bind();
  std::atomic<bool> ended{false};
  std::thread listener([&] { http.listen(); });
  std::thread watcher([&] {  // a signal drains the engine, whose run() then returns
    while (!stop.load() && !ended.load()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    engine.stop();
  });
  const auto close = [&] {
    ended = true;
    http.stop();
    listener.join();
    watcher.join();
  };
  log << fmt::format("serve: listening on http://{}:{} (scheduler: {}-level batching)\n", o.host, port,
                     batching_name(o.scheduler.batching))
      << std::flush;
  try {
    if (on_listening) on_listening(port);
    engine.run(idle_tick(o));
  } catch (...) {
    close();
    throw;
  }
  // Drained: let the last streams' final chunks go out, then close.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  close();
  log << "serve: drained and stopped\n" << std::flush;
}

// Another rank: runs what the lead announces, until it stops.
void follow(const ServeOptions& o, const ServedModel& model, decode::DecodeGroup& group) {
  decode::DecodeRunner runner(model.config, model.weights, cache_shape(o, model.config, group.size()), o.precision,
                              &group);
  runner.prepare(o.scheduler.max_batch_tokens);
  runner.follow();
}

void serve_rank(comm::Communicator& ranks, const ServeOptions& o, const ServedModel& model,
                const std::atomic<bool>& stop, std::ostream& log, const std::function<void(int port)>& on_listening) {
  decode::DecodeGroup group(ranks);
  if (group.lead()) lead(o, model, &group, stop, log, on_listening);
  else follow(o, model, group);
}

}  // namespace

void serve(const ServeOptions& o, const std::atomic<bool>& stop, std::ostream& log,
           const std::function<void(int port)>& on_listening, comm::Communicator* world) {
  validate(o);
  kernels::set_threads(o.threads);
  if (world != nullptr) {
    if (o.tp != 1 && o.tp != world->size())
      fail("--tp {} differs from the {} ranks mpirun launched: under MPI the world is the tensor-parallel group",
           o.tp, world->size());
    world->set_timeout(std::chrono::milliseconds(o.timeout_ms));
    const ServedModel model = load_model(o.checkpoint);
    if (world->size() == 1) return lead(o, model, nullptr, stop, log, on_listening);
    return serve_rank(*world, o, model, stop, log, on_listening);
  }
  const ServedModel model = load_model(o.checkpoint);
  if (o.tp == 1) return lead(o, model, nullptr, stop, log, on_listening);
  comm::run_inproc(
      o.tp, [&](comm::Communicator& ranks) { serve_rank(ranks, o, model, stop, log, on_listening); },
      {.communicator = {.timeout = std::chrono::milliseconds(o.timeout_ms)}});
}

}  // namespace px::serve
