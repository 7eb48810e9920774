// What `parallax serve` is told: the checkpoint, where to listen, and the
// engine's sizes (its KV pool, an iteration's token budget, how many run
// and wait at once), with the check that names a bad one.
#pragma once

#include <cstdint>
#include <string>

#include "graph/precision.h"
#include "serve/scheduler.h"

namespace px::serve {

struct ServeOptions {
  std::string checkpoint;
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: a free one, printed
  Precision precision = Precision::fp32;
  int threads = 2;            // kernels and BLAS
  int http_threads = 256;     // connections served at once (a stream holds one for its life)
  int64_t block_tokens = 16;  // KV block size
  int64_t kv_memory = 0;      // bytes of KV cache; 0: room for max_running sequences of the whole context
  SchedulerLimits scheduler;
  int64_t max_waiting = 256;
  int64_t max_queue_ms = 120000;  // a choice not started this long after arriving ends with an error; 0: no bound
  // Tensor-parallel ranks (Megatron's splits; in process, or the MPI world
  // that launched the server). --kv-memory is each rank's: a rank caches
  // its heads' k and v, so tp ranks hold tp times the tokens.
  int tp = 1;
  std::string run_dir;  // serve.jsonl and serve.json for `parallax report` (serve/run_log.h); "": none
  int64_t timeout_ms = 60000;  // every wait between ranks (an idle server sends ticks well inside it)
  bool operator==(const ServeOptions&) const = default;
};

// px::Error naming the bad option.
void validate(const ServeOptions& options);

// "256M", "1.5GiB", "4096": bytes (K, M, G in powers of 1024; with or
// without "iB" or "B"); px::Error naming `flag` and the text otherwise.
int64_t parse_bytes(const std::string& text, const std::string& flag);

}  // namespace px::serve
