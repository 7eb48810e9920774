// What `GET /metrics` reports, in Prometheus' text format: counters,
// gauges and fixed-bucket histograms the engine updates and HTTP threads
// read (each metric is atomic or under the registry's lock).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace px::serve {

// A histogram of seconds over fixed upper bounds (Prometheus' `le`).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double seconds);
  // The quantile q (0..1) by linear interpolation inside its bucket.
  double quantile(double q) const;
  // `name`'s _bucket, _sum and _count lines.
  std::string text(const std::string& name, const std::string& help) const;

 private:
  mutable std::mutex mutex_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bound, then +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// Exact latencies since their reader last took them, kept only while a
// reader is attached (the run log, serve/run_log.h): a window's
// percentiles, finer than a histogram's buckets.
class LatencySamples {
 public:
  void add(double seconds);
  void attach(bool on);
  std::vector<double> take();

 private:
  std::mutex mutex_;
  bool attached_ = false;
  std::vector<double> samples_;
};

struct ServeMetrics {
  // Counters.
  std::atomic<uint64_t> finished_length{0}, finished_stop{0}, cancelled{0}, rejected{0}, failed{0};
  std::atomic<uint64_t> prompt_tokens{0}, generated_tokens{0}, preemptions{0}, iterations{0}, iteration_rows{0};
  // Gauges, set each iteration.
  std::atomic<int64_t> running{0}, waiting{0}, kv_blocks_total{0}, kv_blocks_used{0}, programs{0};
  std::atomic<double> tokens_per_second{0};  // generated, over the last few seconds
  Histogram time_to_first_token{{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}};
  Histogram inter_token_latency{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}};
  Histogram request_seconds{{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}};
  Histogram iteration_seconds{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}};
  mutable LatencySamples recent_ttft, recent_itl;  // the same observations, for the run log (a reader takes them)

  std::string prometheus() const;
};

}  // namespace px::serve
