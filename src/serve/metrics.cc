#include "serve/metrics.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

namespace px::serve {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t bucket = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), seconds) - bounds_.begin());
  ++counts_[bucket];
  sum_ += seconds;
  ++count_;
}

double Histogram::quantile(double q) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (count_ == 0) return 0;
  const double rank = q * static_cast<double>(count_);
  double below = 0;
  for (size_t b = 0; b < counts_.size(); ++b) {
    const auto here = static_cast<double>(counts_[b]);
    if (below + here >= rank && here > 0) {
      const double lo = b == 0 ? 0 : bounds_[b - 1];
      const double hi = b < bounds_.size() ? bounds_[b] : bounds_.back();
      return lo + (hi - lo) * (rank - below) / here;
    }
    below += here;
  }
  return bounds_.back();
}

void LatencySamples::add(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (attached_) samples_.push_back(seconds);
}

void LatencySamples::attach(bool on) {
  std::lock_guard<std::mutex> lock(mutex_);
  attached_ = on;
  samples_.clear();
}

std::vector<double> LatencySamples::take() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(samples_, {});
}

std::string Histogram::text(const std::string& name, const std::string& help) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out = fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  uint64_t cumulative = 0;
  for (size_t b = 0; b < bounds_.size(); ++b) {
    cumulative += counts_[b];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[b], cumulative);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count_, name, sum_, name, count_);
  return out;
}

std::string ServeMetrics::prometheus() const {
  std::string out;
  auto metric = [&out](const char* name, const char* type, const char* help, auto value) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
  };
  out += "# HELP parallax_requests_total Choices ended, by how.\n# TYPE parallax_requests_total counter\n";
  out += fmt::format("parallax_requests_total{{outcome=\"length\"}} {}\n", finished_length.load());
  out += fmt::format("parallax_requests_total{{outcome=\"stop\"}} {}\n", finished_stop.load());
  out += fmt::format("parallax_requests_total{{outcome=\"cancelled\"}} {}\n", cancelled.load());
  out += fmt::format("parallax_requests_total{{outcome=\"rejected\"}} {}\n", rejected.load());
  out += fmt::format("parallax_requests_total{{outcome=\"error\"}} {}\n", failed.load());
  metric("parallax_prompt_tokens_total", "counter", "Prompt tokens computed.", prompt_tokens.load());
  metric("parallax_generated_tokens_total", "counter", "Tokens generated.", generated_tokens.load());
  metric("parallax_preemptions_total", "counter", "Sequences preempted by recomputation.", preemptions.load());
  metric("parallax_iterations_total", "counter", "Engine iterations run.", iterations.load());
  metric("parallax_iteration_tokens_total", "counter", "Rows computed over all iterations.", iteration_rows.load());
  metric("parallax_requests_running", "gauge", "Sequences running.", running.load());
  metric("parallax_requests_waiting", "gauge", "Sequences waiting to join.", waiting.load());
  metric("parallax_kv_blocks_total", "gauge", "KV cache blocks.", kv_blocks_total.load());
  metric("parallax_kv_blocks_used", "gauge", "KV cache blocks held by sequences.", kv_blocks_used.load());
  metric("parallax_kv_blocks_free", "gauge", "KV cache blocks free.", kv_blocks_total.load() - kv_blocks_used.load());
  metric("parallax_decode_programs", "gauge", "Decode Programs lowered (one per token count).", programs.load());
  metric("parallax_tokens_per_second", "gauge", "Tokens generated per second, recently.", tokens_per_second.load());
  out += time_to_first_token.text("parallax_time_to_first_token_seconds", "From arrival to the first token.");
  out += inter_token_latency.text("parallax_inter_token_latency_seconds", "Between a choice's tokens.");
  out += request_seconds.text("parallax_request_seconds", "From arrival to the last token.");
  out += iteration_seconds.text("parallax_iteration_seconds", "One engine iteration.");
  return out;
}

}  // namespace px::serve
