#include "serve/load_client.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <regex>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace px::serve {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// `url` without a trailing slash; px::Error unless it is http://HOST[:PORT].
std::string checked_url(std::string url) {
  static const std::regex form(R"(http://[^/:\s]+(:[0-9]{1,5})?/?)");
  if (!std::regex_match(url, form))
    fail("bench serve: --url '{}' is not http://HOST:PORT (https is not built in: cpp-httplib without TLS)", url);
  if (url.back() == '/') url.pop_back();
  return url;
}

httplib::Client client_of(const std::string& url, double timeout_seconds) {
  httplib::Client client(url);
  const auto timeout = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(timeout_seconds));
  client.set_connection_timeout(timeout);
  client.set_read_timeout(timeout);
  client.set_write_timeout(timeout);
  return client;
}

// One streamed request, timed from just before it is sent.
RequestRecord send_one(const PlannedRequest& plan, const std::string& model, const std::string& url, double timeout,
                       Clock::time_point start) {
  RequestRecord r{.prompt_bytes = static_cast<int64_t>(plan.prompt.size()),
                  .max_tokens = plan.max_tokens,
                  .long_prompt = plan.long_prompt};
  const json body = {{"model", model},       {"prompt", plan.prompt},
                     {"max_tokens", plan.max_tokens}, {"temperature", 0},
                     {"stream", true},       {"stream_options", {{"include_usage", true}}}};
  httplib::Client client = client_of(url, timeout);
  httplib::Request request;
  request.method = "POST";
  request.path = "/v1/completions";
  request.set_header("Content-Type", "application/json");
  request.body = body.dump(-1, ' ', false, json::error_handler_t::replace);

  int status = 0;
  bool done = false, ended_early = false;
  std::optional<int64_t> usage_tokens;
  std::string error_body;
  SseParser events;
  Clock::time_point sent;
  request.response_handler = [&status](const httplib::Response& response) {
    status = response.status;
    return true;
  };
  // Called as each piece of the body arrives: every event it completes is
  // stamped with this arrival time.
  request.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    const double now = seconds_since(sent);
    if (status != 200) {
      if (error_body.size() < 4096) error_body.append(data, size);
      return true;
    }
    for (const std::string& payload : events.feed({data, size})) {
      const StreamEvent e = parse_stream_event(payload);
      if (!e.error.empty()) {
        if (r.error.empty()) r.error = fmt::format("an error event: {}", e.error);
        continue;
      }
      if (e.done) {
        done = true;
        r.e2e = now;
      }
      if (e.token) {
        r.token_times.push_back(now);
        r.text += e.text;
        // The answer is complete at its drawn length: leave, as a client
        // that got its end-of-text would (the server frees the sequence).
        if (plan.output_tokens < plan.max_tokens && static_cast<int64_t>(r.token_times.size()) == plan.output_tokens) {
          ended_early = true;
          r.e2e = now;
          return false;
        }
      }
      if (e.prompt_tokens) r.prompt_tokens = *e.prompt_tokens;
      if (e.completion_tokens) usage_tokens = e.completion_tokens;
    }
    return true;
  };

  httplib::Response response;
  httplib::Error error = httplib::Error::Success;
  r.sent_at = seconds_since(start);
  sent = Clock::now();
  const bool answered = client.send(request, response, error);
  if (ended_early) {
    r.output_tokens = static_cast<int64_t>(r.token_times.size());
    return r;
  }
  if (!answered)
    r.error = fmt::format("POST {}/v1/completions: {} after {:.3f} s ({})", url, httplib::to_string(error),
                          seconds_since(sent),
                          status == 0 ? "no reply" : fmt::format("HTTP {}, {} tokens streamed", status, r.token_times.size()));
  else if (status != 200)
    r.error = fmt::format("HTTP {}: {}", status, error_body.empty() ? response.body : error_body);
  else if (!done && r.error.empty())
    r.error = "the stream ended without 'data: [DONE]'";
  if (!done) r.e2e = seconds_since(sent);
  r.output_tokens = usage_tokens.value_or(static_cast<int64_t>(r.token_times.size()));
  return r;
}

// Polls GET /metrics from start() until finish(), keeping the gauges'
// highest values; calls `progress` about once a second.
class MetricsPoller {
 public:
  MetricsPoller(const std::string& url, double interval) : url_(url), interval_(interval) {
    poll();  // the counters' values before the run
    first_preemptions_ = last_preemptions_;
  }
  void start(std::function<void()> progress) {
    progress_ = std::move(progress);
    thread_ = std::thread([this] { loop(); });
  }
  // Stops polling after one last poll; the peaks of the whole run.
  ServerPeaks finish() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
    poll();
    peaks_.preemptions = last_preemptions_ - first_preemptions_;
    return peaks_;
  }

 private:
  void loop() {
    const auto step = std::chrono::duration<double>(interval_ > 0 ? std::min(interval_, 1.0) : 1.0);
    Clock::time_point last_progress = Clock::now();
    std::unique_lock lock(mutex_);
    while (!wake_.wait_for(lock, step, [this] { return stop_; })) {
      lock.unlock();
      poll();
      if (progress_ && seconds_since(last_progress) >= 1.0) {
        progress_();
        last_progress = Clock::now();
      }
      lock.lock();
    }
  }

  void poll() {
    if (interval_ <= 0) return;
    httplib::Client client = client_of(url_, 5);
    const httplib::Result result = client.Get("/metrics");
    if (!result || result->status != 200) return;
    const std::string& text = result->body;
    const auto running = prometheus_value(text, "parallax_requests_running");
    if (!running) return;
    peaks_.polled = true;
    auto raise = [&text](int64_t& peak, const char* name) {
      if (const auto v = prometheus_value(text, name)) peak = std::max(peak, static_cast<int64_t>(*v));
    };
    peaks_.running = std::max(peaks_.running, static_cast<int64_t>(*running));
    raise(peaks_.waiting, "parallax_requests_waiting");
    raise(peaks_.kv_blocks_used, "parallax_kv_blocks_used");
    raise(peaks_.kv_blocks_total, "parallax_kv_blocks_total");
    if (const auto v = prometheus_value(text, "parallax_preemptions_total")) last_preemptions_ = static_cast<int64_t>(*v);
  }

  std::string url_;
  double interval_;
  std::function<void()> progress_;
  ServerPeaks peaks_;  // the polling thread's, read after it joins
  int64_t first_preemptions_ = 0, last_preemptions_ = 0;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

ServerInfo query_server(const std::string& url) {
  httplib::Client client = client_of(checked_url(url), 10);
  const httplib::Result result = client.Get("/v1/models");
  if (!result) fail("bench serve: no server answers at {} ({})", url, httplib::to_string(result.error()));
  if (result->status != 200)
    fail("bench serve: GET {}/v1/models answered HTTP {}, expected 200: {}", url, result->status,
         result->body.substr(0, 300));
  const json models = json::parse(result->body, nullptr, false);
  if (models.is_discarded() || !models.contains("data") || !models["data"].is_array() || models["data"].empty() ||
      !models["data"][0].contains("id") || !models["data"][0]["id"].is_string())
    fail("bench serve: GET {}/v1/models is not OpenAI's model list (expected data[0].id): {}", url,
         result->body.substr(0, 300));
  const json& model = models["data"][0];
  ServerInfo info{.model = model["id"].get<std::string>()};
  if (model.contains("parallax") && model["parallax"].contains("context") && model["parallax"]["context"].is_number_integer())
    info.context = model["parallax"]["context"].get<int64_t>();
  return info;
}

LoadRun run_load(const std::vector<PlannedRequest>& plan, const std::string& model, const ClientOptions& options,
                 const std::function<void(const LoadProgress&)>& progress) {
  if (options.max_concurrency < 1) fail("--max-concurrency is {}, expected >= 1", options.max_concurrency);
  if (!(options.timeout_seconds > 0)) fail("--timeout is {} s, expected > 0", options.timeout_seconds);
  const std::string url = checked_url(options.url);
  LoadRun run;
  run.records.resize(plan.size());
  std::atomic<size_t> next{0};
  std::atomic<int64_t> done{0}, failed{0}, in_flight{0};
  MetricsPoller poller(url, options.metrics_interval);
  const Clock::time_point start = Clock::now();
  poller.start([&] {
    if (progress)
      progress({.total = static_cast<int64_t>(plan.size()), .done = done.load(), .failed = failed.load(),
                .in_flight = in_flight.load(), .seconds = seconds_since(start)});
  });
  // Workers take requests in plan order, each sent at its time or when its
  // worker is free, whichever is later: arrivals at the planned rate, at
  // most max_concurrency in flight.
  auto worker = [&] {
    for (size_t i = next++; i < plan.size(); i = next++) {
      std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                                std::chrono::duration<double>(plan[i].send_at)));
      ++in_flight;
      run.records[i] = send_one(plan[i], model, url, options.timeout_seconds, start);
      --in_flight;
      ++done;
      if (!run.records[i].ok()) ++failed;
    }
  };
  std::vector<std::thread> workers;
  const size_t threads = std::min(plan.size(), static_cast<size_t>(options.max_concurrency));
  for (size_t t = 0; t < threads; ++t) workers.emplace_back(worker);
  for (std::thread& t : workers) t.join();
  run.peaks = poller.finish();
  for (const RequestRecord& r : run.records) run.duration = std::max(run.duration, r.sent_at + r.e2e);
  return run;
}

}  // namespace px::serve
