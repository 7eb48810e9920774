// `parallax serve`: a GPT checkpoint served over HTTP (serve/http_server.h)
// by the engine (serve/engine.h), until SIGINT or SIGTERM, which drain it:
// no new request is taken, the running ones finish, and it returns. With
// tensor parallelism rank 0 serves HTTP and runs the engine, and the other
// ranks run each iteration it announces (runtime/decode/decode_group.h).
#pragma once

#include <atomic>
#include <functional>
#include <ostream>

#include "comm/communicator.h"
#include "serve/serve_options.h"

namespace px::serve {

// Runs the server; `stop` (set from a signal handler) drains it. `on_listening`
// is called with the bound port once requests are taken. `world`: this
// process is one rank of an already launched group (mpirun), whose size is
// the tensor-parallel degree; nullptr: options.tp ranks run in this process.
void serve(const ServeOptions& options, const std::atomic<bool>& stop, std::ostream& log,
           const std::function<void(int port)>& on_listening = {}, comm::Communicator* world = nullptr);

}  // namespace px::serve
