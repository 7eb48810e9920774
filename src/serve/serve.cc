#include "serve/serve.h"

#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "kernels/threads.h"
#include "nn/gpt.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/tasks/model_json.h"
#include "serve/engine.h"
#include "serve/http_server.h"

namespace px::serve {

void serve(const ServeOptions& o, const std::atomic<bool>& stop, std::ostream& log,
           const std::function<void(int port)>& on_listening) {
  validate(o);
  kernels::set_threads(o.threads);
  nn::ModelConfig model;
  DataOptions data;
  apply_model_json(read_checkpoint_state(o.checkpoint).config, model, data);
  if (model.kind != "gpt") fail("serve: checkpoint '{}' holds a {} model; serve needs a gpt checkpoint", o.checkpoint, model.kind);
  const nn::GptConfig& config = model.gpt;
  ParamStore weights = ParamStore::initialize(nn::build_gpt(config, 1, 1, false).graph, 0);
  weights.load(load_model_weights(o.checkpoint));

  // The pool: --kv-memory, or room for max_running sequences of the whole context.
  const decode::KvCacheShape one_block{.blocks = 1, .block_tokens = o.block_tokens};
  const int64_t block_bytes = decode::kv_cache_bytes(config, one_block);
  const int64_t blocks = o.kv_memory > 0 ? o.kv_memory / block_bytes
                                         : o.scheduler.max_running * ((config.block + o.block_tokens - 1) / o.block_tokens);
  if (blocks < 1)
    fail("--kv-memory {} bytes holds no block of {} tokens ({} bytes for this model)", o.kv_memory, o.block_tokens,
         block_bytes);
  Engine engine(config, weights,
                {.scheduler = o.scheduler,
                 .cache = {.blocks = blocks, .block_tokens = o.block_tokens},
                 .max_waiting = o.max_waiting,
                 .precision = o.precision});
  log << fmt::format("serve: gpt (layers {}, heads {}, embd {}, context {}) from {}, {}\n", config.n_layer,
                     config.n_head, config.n_embd, config.block, o.checkpoint, precision_name(o.precision));
  log << fmt::format("serve: KV cache of {} tokens ({} blocks of {}, {:.1f} MiB): {} sequences of the whole context\n",
                     engine.pool_tokens(), blocks, o.block_tokens, static_cast<double>(blocks * block_bytes) / (1 << 20),
                     engine.pool_tokens() / config.block);

  const nlohmann::json card = {{"layers", config.n_layer}, {"heads", config.n_head}, {"embd", config.n_embd},
                               {"context", config.block},  {"vocab", config.vocab},  {"precision", precision_name(o.precision)}};
  HttpServer http(engine, {.host = o.host, .port = o.port, .threads = o.http_threads, .model = "parallax-gpt", .card = card});
  const int port = http.bind();
  std::thread listener([&] { http.listen(); });
  std::thread watcher([&] {  // a signal drains the engine, whose run() then returns
    while (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    engine.stop();
  });
  log << fmt::format("serve: listening on http://{}:{} (scheduler: {} batching)\n", o.host, port,
                     o.scheduler.batching == Batching::iteration ? "iteration-level" : "request-level")
      << std::flush;
  if (on_listening) on_listening(port);
  engine.run(std::chrono::milliseconds(1000));
  // Drained: let the last streams' final chunks go out, then close.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  http.stop();
  listener.join();
  watcher.join();
  log << "serve: drained and stopped\n" << std::flush;
}

}  // namespace px::serve
