// `parallax serve`: a GPT checkpoint as an OpenAI-compatible completion
// server (src/serve, docs/serving.md). SIGINT and SIGTERM drain it: no
// new request, the running ones finish, exit 0.
#include <atomic>
#include <csignal>
#include <iostream>
#include <sstream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/train_flags.h"
#include "comm/backends.h"
#include "kernels/cpu_features.h"
#include "serve/serve.h"

namespace px::cli {
namespace {

std::atomic<bool> g_stop{false};

extern "C" void on_stop_signal(int) { g_stop.store(true); }

}  // namespace

void add_serve_command(CLI::App& app) {
  struct Options {
    serve::ServeOptions serve;
    std::string precision = "fp32", kv_memory, scheduler = "iteration";
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("serve", "serve a GPT checkpoint: OpenAI-compatible completions over HTTP");
  cmd->add_option("--checkpoint", o->serve.checkpoint, "checkpoint directory (`parallax train --save`)")->required();
  cmd->add_option("--host", o->serve.host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", o->serve.port, "port (0: a free one, printed)")->capture_default_str();
  add_precision_option(*cmd, o->precision);
  cmd->add_option("--threads", o->serve.threads, "threads for kernels and BLAS")->capture_default_str();
  cmd->add_option("--http-threads", o->serve.http_threads, "connections served at once (a stream holds one)")
      ->capture_default_str();
  cmd->add_option("--block-tokens", o->serve.block_tokens, "tokens per KV cache block")->capture_default_str();
  cmd->add_option("--kv-memory", o->kv_memory,
                  "KV cache size, e.g. 512M (default: --max-running sequences of the whole context)");
  cmd->add_option("--max-batch-tokens", o->serve.scheduler.max_batch_tokens,
                  "rows an iteration computes at most (long prompts are prefilled in chunks of it)")
      ->capture_default_str();
  cmd->add_option("--max-running", o->serve.scheduler.max_running, "sequences running at once")->capture_default_str();
  cmd->add_option("--max-waiting", o->serve.max_waiting, "sequences queued before new requests get 429")
      ->capture_default_str();
  cmd->add_option("--max-queue-ms", o->serve.max_queue_ms,
                  "a request not started this long after arriving gets 503 (an error event when streamed); 0: no bound")
      ->capture_default_str();
  cmd->add_option("--scheduler", o->scheduler,
                  "iteration (Orca: sequences join and leave every iteration) or request (a batch runs until its "
                  "last member ends)")
      ->capture_default_str();
  cmd->add_option("--run-dir", o->serve.run_dir,
                  "write serve.jsonl (queue, batch, KV use, latency every 0.5 s) and serve.json for `parallax report`");
  cmd->add_option("--tp", o->serve.tp,
                  "tensor-parallel ranks in this process (Megatron's splits; under mpirun the world is the group)")
      ->capture_default_str();
  cmd->add_option("--timeout", o->serve.timeout_ms, "ms every wait between ranks may take (an idle server keeps "
                                                    "its ranks well inside it)")
      ->capture_default_str();
  cmd->add_flag("--reserve-max-tokens", o->serve.scheduler.reserve_max_tokens,
                "admit a sequence only with KV blocks for its max_tokens (Orca's reservation) instead of paging");
  cmd->callback([o] {
    o->serve.precision = parse_precision(o->precision);
    if (o->serve.precision == Precision::bf16) kernels::require_avx512_bf16("--precision bf16");
    if (!o->kv_memory.empty()) o->serve.kv_memory = serve::parse_bytes(o->kv_memory, "--kv-memory");
    o->serve.scheduler.batching = serve::batching_from_name(o->scheduler);
    std::signal(SIGINT, on_stop_signal);
    std::signal(SIGTERM, on_stop_signal);
    if (!launched_by_mpi()) return serve::serve(o->serve, g_stop, std::cout);
    // Launched by mpirun: the world is the tensor-parallel group, rank 0 serves HTTP.
    comm::mpi::init(nullptr, nullptr, {.timeout = std::chrono::milliseconds(o->serve.timeout_ms)},
                    {.pmi_fd = launcher_pmi_fd()});
    comm::Communicator& world = comm::mpi::world();
    try {
      std::ostringstream quiet;  // only rank 0 speaks
      serve::serve(o->serve, g_stop, world.rank() == 0 ? static_cast<std::ostream&>(std::cout) : quiet, {}, &world);
    } catch (const std::exception& error) {
      // The other ranks would wait out their timeouts: end them all now.
      fmt::print(stderr, "error: rank {}: {}\n", world.rank(), error.what());
      comm::mpi::abort(1);
    }
    comm::mpi::finalize();
  });
}

}  // namespace px::cli
