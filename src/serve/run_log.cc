#include "serve/run_log.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"

namespace px::serve {
namespace {

// The q-quantile of `v` (sorted in place), by the nearest rank; null when empty.
nlohmann::json quantile(std::vector<double>& v, double q) {
  if (v.empty()) return nullptr;
  std::sort(v.begin(), v.end());
  const auto at = static_cast<size_t>(std::min<double>(static_cast<double>(v.size()) - 1, q * static_cast<double>(v.size())));
  return v[at];
}

}  // namespace

ServeRunLog::ServeRunLog(std::string dir, const ServeMetrics& metrics, nlohmann::json facts,
                         std::chrono::milliseconds period)
    : dir_(std::move(dir)), metrics_(metrics), facts_(std::move(facts)), period_(period) {
  std::error_code error;
  std::filesystem::create_directories(dir_, error);
  lines_.open(dir_ + "/serve.jsonl");
  if (!lines_) fail("--run-dir '{}': cannot write serve.jsonl there", dir_);
  metrics_.recent_ttft.attach(true);
  metrics_.recent_itl.attach(true);
  start_ = last_ = std::chrono::steady_clock::now();
  previous_ = counters();
  thread_ = std::thread([this] { loop(); });
}

ServeRunLog::~ServeRunLog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  sample();
  metrics_.recent_ttft.attach(false);
  metrics_.recent_itl.attach(false);
  const Counters c = counters();
  nlohmann::json summary = facts_;
  summary["kind"] = "serve";
  summary["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  summary["requests"] = c.finished + c.cancelled;
  summary["rejected"] = c.rejected;
  summary["prompt_tokens"] = c.prompt;
  summary["generated_tokens"] = c.generated;
  summary["preemptions"] = c.preemptions;
  summary["iterations"] = c.iterations;
  summary["ttft_p50_s"] = quantile(ttft_, 0.5);
  summary["ttft_p99_s"] = quantile(ttft_, 0.99);
  summary["itl_p50_s"] = quantile(itl_, 0.5);
  summary["itl_p99_s"] = quantile(itl_, 0.99);
  std::ofstream out(dir_ + "/serve.json");
  out << summary.dump(2) << "\n";
}

ServeRunLog::Counters ServeRunLog::counters() const {
  const ServeMetrics& m = metrics_;
  return {.iterations = m.iterations.load(),
          .rows = m.iteration_rows.load(),
          .generated = m.generated_tokens.load(),
          .prompt = m.prompt_tokens.load(),
          .preemptions = m.preemptions.load(),
          .finished = m.finished_length.load() + m.finished_stop.load() + m.failed.load(),
          .cancelled = m.cancelled.load(),
          .rejected = m.rejected.load()};
}

void ServeRunLog::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, period_, [&] { return stopping_; })) {
    lock.unlock();
    sample();
    lock.lock();
  }
}

// One line: the gauges now, the counters' change over the window, and the
// window's latencies.
void ServeRunLog::sample() {
  const auto now = std::chrono::steady_clock::now();
  const double window = std::max(1e-6, std::chrono::duration<double>(now - last_).count());
  const Counters c = counters();
  std::vector<double> ttft = metrics_.recent_ttft.take(), itl = metrics_.recent_itl.take();
  ttft_.insert(ttft_.end(), ttft.begin(), ttft.end());
  itl_.insert(itl_.end(), itl.begin(), itl.end());
  const uint64_t iterations = c.iterations - previous_.iterations;
  const nlohmann::json line = {
      {"time_s", std::chrono::duration<double>(now - start_).count()},
      {"waiting", metrics_.waiting.load()},
      {"running", metrics_.running.load()},
      {"kv_blocks_used", metrics_.kv_blocks_used.load()},
      {"kv_blocks_total", metrics_.kv_blocks_total.load()},
      {"iterations", iterations},
      {"batch_rows", iterations ? nlohmann::json(double(c.rows - previous_.rows) / double(iterations)) : nlohmann::json()},
      {"generated_tokens_per_s", double(c.generated - previous_.generated) / window},
      {"prompt_tokens_per_s", double(c.prompt - previous_.prompt) / window},
      {"preemptions", c.preemptions - previous_.preemptions},
      {"finished", c.finished - previous_.finished},
      {"cancelled", c.cancelled - previous_.cancelled},
      {"rejected", c.rejected - previous_.rejected},
      {"ttft_p50_s", quantile(ttft, 0.5)},
      {"ttft_p99_s", quantile(ttft, 0.99)},
      {"itl_p50_s", quantile(itl, 0.5)},
      {"itl_p99_s", quantile(itl, 0.99)}};
  lines_ << line.dump() << "\n" << std::flush;
  previous_ = c;
  last_ = now;
}

}  // namespace px::serve
