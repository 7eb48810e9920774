// The HTTP side of `parallax serve` (cpp-httplib, Debian's
// libcpp-httplib-dev: a small, threaded HTTP/1.1 server with chunked
// responses, which Server-Sent Events need, and no framework around it).
// Its threads parse, submit and stream; they never touch the engine's
// state (serve/engine.h). Routes:
//   POST /v1/completions  OpenAI's completions; "stream": true answers in
//                         Server-Sent Events ending `data: [DONE]`
//   GET  /v1/models       the model served
//   GET  /health          200 once serving
//   GET  /metrics         Prometheus text (serve/metrics.h)
//   GET  /                a page to type a prompt and watch it stream
// A bad request is a 400 naming the field; a full queue a 429 with
// Retry-After; a body past the limit a 413. A client that goes away
// mid-stream cancels its request, whose blocks the engine frees.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "serve/engine.h"

namespace px::serve {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;           // 0: a free one (bind() says which)
  int threads = 64;          // connections served at once (each stream holds one)
  size_t max_body_bytes = 1 << 20;
  std::string model = "parallax";  // the name /v1/models and replies give
  nlohmann::json card;             // what /v1/models says of it
};

class HttpServer {
 public:
  HttpServer(Engine& engine, HttpOptions options);
  ~HttpServer();
  // Binds the socket; returns the port (px::Error naming host and port if taken).
  int bind();
  // Serves until stop() (from any thread).
  void listen();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The page GET / serves.
const std::string& serve_page();

}  // namespace px::serve
