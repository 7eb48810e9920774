// `parallax serve`: a GPT checkpoint served over HTTP (serve/http_server.h)
// by the engine (serve/engine.h), until SIGINT or SIGTERM, which drain it:
// no new request is taken, the running ones finish, and it returns.
#pragma once

#include <atomic>
#include <functional>
#include <ostream>

#include "serve/serve_options.h"

namespace px::serve {

// Runs the server; `stop` (set from a signal handler) drains it. `on_listening`
// is called with the bound port once requests are taken.
void serve(const ServeOptions& options, const std::atomic<bool>& stop, std::ostream& log,
           const std::function<void(int port)>& on_listening = {});

}  // namespace px::serve
