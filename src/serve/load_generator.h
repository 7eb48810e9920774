// The pure half of `parallax bench serve` (vLLM's benchmark_serving, open
// loop): a workload becomes a plan of requests (Poisson arrival times,
// prompts cut from a corpus, output lengths), a stream's Server-Sent
// Events become timed token chunks, and the timed requests become a
// summary (throughput, TTFT, TPOT, inter-token and end-to-end latency
// percentiles, goodput under an SLO). No sockets here: load_client.h sends
// the plan and records what comes back.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace px::serve {

// Inclusive bounds of a uniform draw: "LO:HI" on the command line.
struct UniformRange {
  int64_t low = 0;
  int64_t high = 0;
  bool operator==(const UniformRange&) const = default;
};

// What is sent: how many requests, when, and of what sizes.
struct Workload {
  int64_t requests = 100;
  double rate = 0;  // requests/s, Poisson arrivals; 0 or infinity: all at once
  uint64_t seed = 0;
  UniformRange prompt_bytes{16, 200};   // tokens are bytes: a prompt's bytes are its tokens
  UniformRange output_tokens{8, 200};   // max_tokens, cut to what the prompt leaves of the context
  double long_prompt_fraction = 0;      // of requests, whose prompt is long_prompt_bytes instead
  int64_t long_prompt_bytes = 0;        // 0: the context less output_tokens.low
  // Each request asks for the rest of the context (max_tokens = context -
  // prompt, as a client that cannot know the answer's length does) and its
  // client ends the stream once the drawn output length has arrived: a
  // byte model has no end-of-text token, so this is how an answer shorter
  // than what was asked ends. What a --reserve-max-tokens server reserves.
  bool ask_whole_context = false;
  bool operator==(const Workload&) const = default;
};

// px::Error naming the bad field.
void validate(const Workload& workload);
nlohmann::json to_json(const Workload& workload);

// "LO:HI" (or "N" for N:N) into a range of integers >= `least`; px::Error
// naming `flag`, the text and the form expected.
UniformRange parse_range(const std::string& text, const std::string& flag, int64_t least);

// Seconds from the start at which each of `count` requests is sent: the
// first at 0, then gaps drawn from the exponential distribution of mean
// 1/rate (a Poisson process), the same for the same seed. Rate 0 or
// infinity: every request at 0.
std::vector<double> arrival_times(int64_t count, double rate, uint64_t seed);

// One request of the plan.
struct PlannedRequest {
  double send_at = 0;  // seconds from the run's start
  std::string prompt;  // valid UTF-8 of the drawn length in bytes
  int64_t max_tokens = 0;     // asked
  int64_t output_tokens = 0;  // the client ends the stream after this many (<= max_tokens)
  bool long_prompt = false;
};

// The requests `workload` sends to a model of `context` positions: prompts
// are cut from `corpus` at seeded offsets (wrapping around its end), each
// the drawn number of bytes and valid UTF-8 (a character the cut splits
// becomes spaces); output_tokens is the drawn output length, cut so that
// prompt + output fits the context, and max_tokens is it too, or with
// ask_whole_context the rest of the context. px::Error when a prompt of the
// workload cannot leave room for one token, or the corpus is empty.
std::vector<PlannedRequest> plan_requests(const Workload& workload, std::string_view corpus, int64_t context);

// The text of `files` joined by newlines, as valid UTF-8 of the same length
// (a byte that is no part of a valid sequence becomes '?'); a line that is
// only "%" (fortune's separator) is dropped. px::Error naming a file that
// cannot be read, or all of them when they hold nothing.
std::string read_corpus(const std::vector<std::string>& files);

// Server-Sent Events as they arrive, in pieces cut anywhere: feed() returns
// the data of every event the bytes so far complete (its `data:` lines
// joined by newlines; comments and other fields ignored; "\r\n" accepted).
class SseParser {
 public:
  std::vector<std::string> feed(std::string_view bytes);

 private:
  std::string line_;   // the incomplete line
  std::string data_;   // the current event's data so far
  bool has_data_ = false;
};

// One event of a completion stream, read.
struct StreamEvent {
  bool done = false;                // "[DONE]"
  bool token = false;               // a chunk with a choice: one generated token (its text may be empty)
  std::string text;                 // the choice's text
  std::optional<int64_t> prompt_tokens, completion_tokens;  // the usage chunk's
  std::string error;                // an error object's message, or why the event is not a chunk
};
StreamEvent parse_stream_event(std::string_view data);

// A request as timed by the client. Times are seconds.
struct RequestRecord {
  int64_t prompt_bytes = 0;
  int64_t max_tokens = 0;
  bool long_prompt = false;
  double sent_at = 0;               // from the run's start
  std::string error;                // "" when it succeeded
  std::vector<double> token_times;  // from the send to each token chunk's arrival
  double e2e = 0;                   // from the send to the stream's end
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;  // usage.completion_tokens, or the token chunks without a usage chunk
  std::string text;
  bool ok() const { return error.empty(); }
  double ttft() const { return token_times.empty() ? e2e : token_times.front(); }
  // (e2e - ttft) / (tokens - 1); 0 for a single token.
  double tpot() const;
};
nlohmann::json to_json(const RequestRecord& record);

// Mean and percentiles of a set of durations, in seconds.
struct Distribution {
  int64_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0;
};
// Percentiles by linear interpolation between the closest ranks (numpy's
// default, as benchmark_serving reports them); all zero for no values.
Distribution distribution_of(std::vector<double> values);
double percentile(std::span<const double> sorted, double q);

// Service-level objectives a good request meets, each optional, in seconds.
struct Slo {
  std::optional<double> ttft, tpot, e2e;
  bool empty() const { return !ttft && !tpot && !e2e; }
  bool operator==(const Slo&) const = default;
};
// "ttft:200,tpot:50" (milliseconds; keys ttft, tpot, e2e); px::Error naming
// the bad item and the form expected.
Slo parse_slo(const std::string& text);
bool meets(const RequestRecord& record, const Slo& slo);

// benchmark_serving's numbers over the records of one run that took
// `duration` seconds (first send to last reply).
struct LoadSummary {
  int64_t succeeded = 0, failed = 0;
  std::string first_error;  // of the first failed request in plan order
  double duration = 0;
  int64_t input_tokens = 0, output_tokens = 0;
  double request_throughput = 0, output_throughput = 0;  // per second of `duration`
  Distribution ttft, tpot, itl, e2e;  // over successful requests; itl over every gap between token chunks
  // Under a non-empty SLO: successful requests meeting all of it, per
  // second (goodput), and as a fraction of every request sent.
  int64_t met_slo = 0;
  double goodput = 0, slo_fraction = 0;
};
LoadSummary summarize(std::span<const RequestRecord> records, double duration, const Slo& slo);
nlohmann::json to_json(const LoadSummary& summary, const Slo& slo);

// The value of the unlabelled sample `name` in Prometheus' text format.
std::optional<double> prometheus_value(std::string_view text, std::string_view name);

}  // namespace px::serve
