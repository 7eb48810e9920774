// The socket half of `parallax bench serve`: sends a plan of completion
// requests (serve/load_generator.h) to an OpenAI-compatible server, each
// streamed (temperature 0, stream_options.include_usage), and times every
// Server-Sent Event as it arrives. Requests go at their planned times, at
// most `max_concurrency` in flight (a request due while all are busy goes
// when one ends), one thread per in-flight request. Meanwhile /metrics is
// polled for the server's peaks. A failure (an HTTP error status, a broken
// connection, an error event) is recorded with its text, never dropped.
// The caller ignores SIGPIPE (a server that closes mid-stream must not end
// the process); the CLI does.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "serve/load_generator.h"

namespace px::serve {

struct ClientOptions {
  std::string url;                   // http://HOST:PORT
  int max_concurrency = 256;         // requests in flight at most
  double timeout_seconds = 600;      // a request's connection and each read
  double metrics_interval = 0.1;     // seconds between /metrics polls; 0: none
  bool operator==(const ClientOptions&) const = default;
};

// What the server says of itself (GET /v1/models): the model to name in
// requests and, from a parallax server, its context.
struct ServerInfo {
  std::string model;
  int64_t context = 0;  // 0: not said
};
// px::Error naming the URL when it is not http://HOST:PORT or nothing answers.
ServerInfo query_server(const std::string& url);

// The server's gauges at their highest over the run (parallax's /metrics
// names; `polled` false when the server has none of them).
struct ServerPeaks {
  bool polled = false;
  int64_t running = 0, waiting = 0, kv_blocks_used = 0, kv_blocks_total = 0;
  int64_t preemptions = 0;  // during the run
};

struct LoadRun {
  std::vector<RequestRecord> records;  // in plan order
  double duration = 0;                 // from the start to the last reply's end
  ServerPeaks peaks;
};

// Counts while a run goes on, for a progress line.
struct LoadProgress {
  int64_t total = 0, done = 0, failed = 0, in_flight = 0;
  double seconds = 0;
};

// Sends `plan` with `model` named in each request; `progress` (if given)
// is called about once a second from another thread.
LoadRun run_load(const std::vector<PlannedRequest>& plan, const std::string& model, const ClientOptions& options,
                 const std::function<void(const LoadProgress&)>& progress = {});

}  // namespace px::serve
