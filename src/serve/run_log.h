// What `parallax serve --run-dir DIR` leaves for `parallax report`
// (docs/report.md): every `period` one line of DIR/serve.jsonl, the
// engine over that window, and DIR/serve.json when the server stops.
//
//   serve.jsonl  {time_s, waiting, running, kv_blocks_used, kv_blocks_total,
//                 iterations, batch_rows (mean rows an iteration computed),
//                 generated_tokens_per_s, prompt_tokens_per_s, preemptions,
//                 finished, cancelled, rejected (counts in the window),
//                 ttft_p50_s, ttft_p99_s, itl_p50_s, itl_p99_s (the window's
//                 exact latencies; null when none)}
//   serve.json   {kind: "serve", model, tp, scheduler, seconds, requests,
//                 prompt_tokens, generated_tokens, preemptions, and the
//                 whole run's TTFT and inter-token percentiles}
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/metrics.h"

namespace px::serve {

class ServeRunLog {
 public:
  // Creates `dir` and starts sampling `metrics` (which must outlive the log).
  // `facts` (model card, tp, scheduler) go into serve.json.
  ServeRunLog(std::string dir, const ServeMetrics& metrics, nlohmann::json facts,
              std::chrono::milliseconds period = std::chrono::milliseconds(500));
  // Writes the last window and serve.json.
  ~ServeRunLog();

 private:
  struct Counters {
    uint64_t iterations, rows, generated, prompt, preemptions, finished, cancelled, rejected;
  };
  Counters counters() const;
  void sample();
  void loop();

  std::string dir_;
  const ServeMetrics& metrics_;
  nlohmann::json facts_;
  std::chrono::milliseconds period_;
  std::chrono::steady_clock::time_point start_, last_;
  Counters previous_{};
  std::vector<double> ttft_, itl_;  // the whole run's
  std::ofstream lines_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace px::serve
