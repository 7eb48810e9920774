#include "serve/serve_thread.h"

#include <future>
#include <memory>

#include <fmt/format.h>

#include "core/error.h"
#include "serve/serve.h"

namespace px::serve {

ServeThread::ServeThread(const ServeOptions& options, std::ostream& log) : host_(options.host) {
  // Shared: the thread may still be inside set_value() when the constructor returns.
  auto listening = std::make_shared<std::promise<int>>();
  std::future<int> port = listening->get_future();
  thread_ = std::thread([this, options, &log, listening] {
    bool told = false;  // the constructor waits on `listening` until told, and no longer
    try {
      serve(options, stop_, log, [&](int bound) {
        told = true;
        listening->set_value(bound);
      });
      if (!told) throw Error("serve: returned before it took requests");
    } catch (...) {
      if (told) error_ = std::current_exception();
      else listening->set_exception(std::current_exception());
    }
  });
  try {
    port_ = port.get();
  } catch (...) {
    thread_.join();
    throw;
  }
}

ServeThread::~ServeThread() {
  if (thread_.joinable()) {
    stop_ = true;
    thread_.join();
  }
}

std::string ServeThread::url() const { return fmt::format("http://{}:{}", host_, port_); }

void ServeThread::stop() {
  if (!thread_.joinable()) return;
  stop_ = true;
  thread_.join();
  if (error_) std::rethrow_exception(error_);
}

}  // namespace px::serve
