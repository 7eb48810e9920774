// serve() (serve/serve.h) on a thread of this process, for `parallax bench
// serve --checkpoint` and the tests: construction returns once the server
// takes requests, or rethrows why it could not start; stop() drains it.
#pragma once

#include <atomic>
#include <exception>
#include <ostream>
#include <string>
#include <thread>

#include "serve/serve_options.h"

namespace px::serve {

class ServeThread {
 public:
  // `options.port` 0 binds a free port (port() says which); `log` takes
  // the server's lines and must outlive it.
  ServeThread(const ServeOptions& options, std::ostream& log);
  // Drains it if stop() was not called; an error it ended with is lost.
  ~ServeThread();
  ServeThread(const ServeThread&) = delete;
  ServeThread& operator=(const ServeThread&) = delete;

  int port() const { return port_; }
  std::string url() const;
  // Drains the server (no new request; the running ones finish) and
  // rethrows an error it ended with.
  void stop();

 private:
  std::string host_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::exception_ptr error_;  // set by the thread before it ends
};

}  // namespace px::serve
