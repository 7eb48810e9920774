#include "serve/load_generator.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"

namespace px::serve {
namespace {

using nlohmann::json;

bool is_continuation(unsigned char byte) { return (byte & 0xC0) == 0x80; }

// Bytes of the UTF-8 sequence that `lead` begins (1 for ASCII), 0 if it begins none.
int sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// Whether text[at..] begins a well-formed sequence of `length` bytes
// (Unicode's table 3-7: no overlong forms, no surrogates, nothing past U+10FFFF).
bool well_formed(std::string_view text, size_t at, int length) {
  if (at + static_cast<size_t>(length) > text.size()) return false;
  const auto lead = static_cast<unsigned char>(text[at]);
  for (int i = 1; i < length; ++i)
    if (!is_continuation(static_cast<unsigned char>(text[at + static_cast<size_t>(i)]))) return false;
  if (length < 3) return true;
  const auto second = static_cast<unsigned char>(text[at + 1]);
  if (lead == 0xE0) return second >= 0xA0;
  if (lead == 0xED) return second <= 0x9F;
  if (lead == 0xF0) return second >= 0x90;
  if (lead == 0xF4) return second <= 0x8F;
  return true;
}

// `text` with each byte that is no part of a well-formed sequence replaced by '?'.
std::string valid_utf8(std::string_view text) {
  std::string out(text);
  for (size_t at = 0; at < out.size();) {
    const int length = sequence_length(static_cast<unsigned char>(out[at]));
    if (length > 0 && well_formed(out, at, length)) {
      at += static_cast<size_t>(length);
    } else {
      out[at] = '?';
      ++at;
    }
  }
  return out;
}

// `bytes` bytes of `corpus` (valid UTF-8) from `offset`, wrapping around;
// a character cut at the end becomes spaces.
std::string cut_prompt(std::string_view corpus, size_t offset, int64_t bytes) {
  for (int i = 0; i < 3 && is_continuation(static_cast<unsigned char>(corpus[offset])); ++i)
    offset = (offset + 1) % corpus.size();
  std::string prompt;
  prompt.reserve(static_cast<size_t>(bytes));
  while (static_cast<int64_t>(prompt.size()) < bytes) {
    const size_t take = std::min(corpus.size() - offset, static_cast<size_t>(bytes) - prompt.size());
    prompt.append(corpus.substr(offset, take));
    offset = 0;
  }
  size_t last = prompt.size() - 1;
  while (last > 0 && is_continuation(static_cast<unsigned char>(prompt[last]))) --last;
  if (last + static_cast<size_t>(sequence_length(static_cast<unsigned char>(prompt[last]))) > prompt.size())
    std::fill(prompt.begin() + static_cast<std::ptrdiff_t>(last), prompt.end(), ' ');
  return prompt;
}

std::optional<int64_t> parse_integer(std::string_view text) {
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

double ms(double seconds) { return seconds * 1e3; }

json to_json(const Distribution& d) {
  return {{"count", d.count}, {"mean_ms", ms(d.mean)}, {"p50_ms", ms(d.p50)}, {"p90_ms", ms(d.p90)},
          {"p99_ms", ms(d.p99)}};
}

}  // namespace

void validate(const Workload& w) {
  if (w.requests < 1) fail("--requests is {}, expected >= 1", w.requests);
  if (!(w.rate >= 0)) fail("--rate is {}, expected requests per second >= 0 (0 or inf: all at once)", w.rate);
  if (w.prompt_bytes.low < 1 || w.prompt_bytes.low > w.prompt_bytes.high)
    fail("--prompt-bytes is {}:{}, expected 1 <= LO <= HI", w.prompt_bytes.low, w.prompt_bytes.high);
  if (w.output_tokens.low < 1 || w.output_tokens.low > w.output_tokens.high)
    fail("--output-tokens is {}:{}, expected 1 <= LO <= HI", w.output_tokens.low, w.output_tokens.high);
  if (!(w.long_prompt_fraction >= 0 && w.long_prompt_fraction <= 1))
    fail("--long-prompt-fraction is {}, expected 0..1", w.long_prompt_fraction);
  if (w.long_prompt_bytes < 0) fail("--long-prompt-bytes is {}, expected >= 1 (0: the context less the shortest output)",
                                    w.long_prompt_bytes);
}

json to_json(const Workload& w) {
  return {{"requests", w.requests},
          {"rate", std::isinf(w.rate) ? json("inf") : json(w.rate)},
          {"seed", w.seed},
          {"prompt_bytes", {w.prompt_bytes.low, w.prompt_bytes.high}},
          {"output_tokens", {w.output_tokens.low, w.output_tokens.high}},
          {"ask_whole_context", w.ask_whole_context},
          {"long_prompt_fraction", w.long_prompt_fraction},
          {"long_prompt_bytes", w.long_prompt_bytes}};
}

UniformRange parse_range(const std::string& text, const std::string& flag, int64_t least) {
  const size_t colon = text.find(':');
  const std::optional<int64_t> low = parse_integer(std::string_view(text).substr(0, colon));
  const std::optional<int64_t> high =
      colon == std::string::npos ? low : parse_integer(std::string_view(text).substr(colon + 1));
  if (!low || !high || *low < least || *low > *high)
    fail("{} '{}' is not a range: expected LO:HI (or N), integers with {} <= LO <= HI", flag, text, least);
  return {*low, *high};
}

std::vector<double> arrival_times(int64_t count, double rate, uint64_t seed) {
  std::vector<double> times(static_cast<size_t>(std::max<int64_t>(count, 0)), 0.0);
  if (rate <= 0 || std::isinf(rate)) return times;
  Rng rng(seed);
  for (size_t i = 1; i < times.size(); ++i) times[i] = times[i - 1] - std::log1p(-rng.uniform()) / rate;
  return times;
}

std::vector<PlannedRequest> plan_requests(const Workload& w, std::string_view corpus, int64_t context) {
  validate(w);
  if (corpus.empty()) fail("bench serve: the prompt corpus is empty (give --data FILE with some text)");
  const int64_t long_bytes = w.long_prompt_bytes > 0 ? w.long_prompt_bytes : context - w.output_tokens.low;
  if (w.prompt_bytes.high >= context)
    fail("--prompt-bytes {}:{} reaches the model's context of {}; a prompt may hold at most {} bytes", w.prompt_bytes.low,
         w.prompt_bytes.high, context, context - 1);
  if (w.long_prompt_fraction > 0 && (long_bytes < 1 || long_bytes >= context))
    fail("--long-prompt-bytes is {}, expected 1..{} (the model's context is {})", long_bytes, context - 1, context);
  const std::vector<double> times = arrival_times(w.requests, w.rate, w.seed);
  Rng rng(~w.seed);  // sizes and offsets: a stream apart from the arrivals'
  auto draw = [&rng](UniformRange r) {
    return r.low + static_cast<int64_t>(rng.below(static_cast<uint64_t>(r.high - r.low + 1)));
  };
  std::vector<PlannedRequest> plan(times.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    PlannedRequest& p = plan[i];
    p.send_at = times[i];
    p.long_prompt = rng.uniform() < w.long_prompt_fraction;
    // Every draw is made for every request, so a request that is not long
    // is the same with or without long prompts in the workload.
    const int64_t output = draw(w.output_tokens);
    const int64_t short_prompt = draw(w.prompt_bytes);
    const int64_t prompt = p.long_prompt ? long_bytes : short_prompt;
    p.output_tokens = std::min(output, context - prompt);
    p.max_tokens = w.ask_whole_context ? context - prompt : p.output_tokens;
    p.prompt = cut_prompt(corpus, rng.below(corpus.size()), prompt);
  }
  return plan;
}

std::string read_corpus(const std::vector<std::string>& files) {
  std::string corpus;
  for (const std::string& path : files) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("bench serve: cannot read --data file '{}'", path);
    std::string line;
    while (std::getline(in, line))
      if (line != "%") corpus += line + '\n';
    if (in.bad()) fail("bench serve: reading --data file '{}' failed", path);
  }
  if (corpus.find_first_not_of(" \t\r\n") == std::string::npos)
    fail("bench serve: the --data files ({}) hold no text to cut prompts from", fmt::join(files, ", "));
  return valid_utf8(corpus);
}

std::vector<std::string> SseParser::feed(std::string_view bytes) {
  std::vector<std::string> events;
  for (;;) {
    const size_t newline = bytes.find('\n');
    if (newline == std::string_view::npos) {
      line_.append(bytes);
      return events;
    }
    line_.append(bytes.substr(0, newline));
    bytes.remove_prefix(newline + 1);
    if (!line_.empty() && line_.back() == '\r') line_.pop_back();
    if (line_.empty()) {  // a blank line ends the event
      if (has_data_) events.push_back(std::move(data_));
      data_.clear();
      has_data_ = false;
    } else if (line_.rfind("data:", 0) == 0) {
      std::string_view value = std::string_view(line_).substr(5);
      if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
      if (has_data_) data_ += '\n';
      data_.append(value);
      has_data_ = true;
    }  // comments (":...") and other fields carry nothing timed here
    line_.clear();
  }
}

StreamEvent parse_stream_event(std::string_view data) {
  StreamEvent event;
  if (data == "[DONE]") {
    event.done = true;
    return event;
  }
  const json chunk = json::parse(data, nullptr, false);
  if (chunk.is_discarded() || !chunk.is_object()) {
    event.error = fmt::format("a stream event is not a JSON object: '{}'", data.substr(0, 200));
    return event;
  }
  if (chunk.contains("error")) {
    const json& e = chunk["error"];
    event.error = e.is_object() && e.contains("message") && e["message"].is_string() ? e["message"].get<std::string>()
                                                                                     : e.dump();
    return event;
  }
  if (chunk.contains("choices") && chunk["choices"].is_array() && !chunk["choices"].empty()) {
    event.token = true;
    const json& choice = chunk["choices"][0];
    if (choice.contains("text") && choice["text"].is_string()) event.text = choice["text"].get<std::string>();
  }
  if (chunk.contains("usage") && chunk["usage"].is_object()) {
    const json& usage = chunk["usage"];
    if (usage.contains("prompt_tokens") && usage["prompt_tokens"].is_number_integer())
      event.prompt_tokens = usage["prompt_tokens"].get<int64_t>();
    if (usage.contains("completion_tokens") && usage["completion_tokens"].is_number_integer())
      event.completion_tokens = usage["completion_tokens"].get<int64_t>();
  }
  return event;
}

double RequestRecord::tpot() const {
  return output_tokens > 1 ? (e2e - ttft()) / static_cast<double>(output_tokens - 1) : 0.0;
}

json to_json(const RequestRecord& r) {
  json token_ms = json::array();
  for (double t : r.token_times) token_ms.push_back(ms(t));
  json j = {{"prompt_bytes", r.prompt_bytes}, {"max_tokens", r.max_tokens},     {"long_prompt", r.long_prompt},
            {"sent_at_ms", ms(r.sent_at)},    {"ok", r.ok()},                   {"prompt_tokens", r.prompt_tokens},
            {"output_tokens", r.output_tokens}, {"ttft_ms", ms(r.ttft())},      {"tpot_ms", ms(r.tpot())},
            {"e2e_ms", ms(r.e2e)},            {"token_ms", std::move(token_ms)}, {"text", r.text}};
  if (!r.ok()) j["error"] = r.error;
  return j;
}

double percentile(std::span<const double> sorted, double q) {
  if (sorted.empty()) return 0;
  const double position = q * static_cast<double>(sorted.size() - 1);
  const auto below = static_cast<size_t>(std::floor(position));
  const size_t above = std::min(below + 1, sorted.size() - 1);
  return sorted[below] + (sorted[above] - sorted[below]) * (position - static_cast<double>(below));
}

Distribution distribution_of(std::vector<double> values) {
  if (values.empty()) return {};
  std::sort(values.begin(), values.end());
  return {.count = static_cast<int64_t>(values.size()),
          .mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size()),
          .p50 = percentile(values, 0.50),
          .p90 = percentile(values, 0.90),
          .p99 = percentile(values, 0.99)};
}

Slo parse_slo(const std::string& text) {
  Slo slo;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    const size_t colon = item.find(':');
    const std::string key = item.substr(0, colon);
    char* end = nullptr;
    const double value = colon == std::string::npos ? 0 : std::strtod(item.c_str() + colon + 1, &end);
    if (colon == std::string::npos || end != item.c_str() + item.size() || !(value > 0) || !std::isfinite(value) ||
        (key != "ttft" && key != "tpot" && key != "e2e"))
      fail("--slo item '{}' in '{}' is not KEY:MS with KEY ttft, tpot or e2e and MS > 0 milliseconds", item, text);
    (key == "ttft" ? slo.ttft : key == "tpot" ? slo.tpot : slo.e2e) = value / 1e3;
    start = comma + 1;
  }
  return slo;
}

bool meets(const RequestRecord& r, const Slo& slo) {
  return r.ok() && (!slo.ttft || r.ttft() <= *slo.ttft) && (!slo.tpot || r.tpot() <= *slo.tpot) &&
         (!slo.e2e || r.e2e <= *slo.e2e);
}

LoadSummary summarize(std::span<const RequestRecord> records, double duration, const Slo& slo) {
  LoadSummary s{.duration = duration};
  std::vector<double> ttft, tpot, itl, e2e;
  for (const RequestRecord& r : records) {
    if (!r.ok()) {
      if (s.failed++ == 0) s.first_error = r.error;
      continue;
    }
    ++s.succeeded;
    s.input_tokens += r.prompt_tokens;
    s.output_tokens += r.output_tokens;
    ttft.push_back(r.ttft());
    if (r.output_tokens > 1) tpot.push_back(r.tpot());
    e2e.push_back(r.e2e);
    for (size_t i = 1; i < r.token_times.size(); ++i) itl.push_back(r.token_times[i] - r.token_times[i - 1]);
    s.met_slo += !slo.empty() && meets(r, slo);
  }
  s.ttft = distribution_of(std::move(ttft));
  s.tpot = distribution_of(std::move(tpot));
  s.itl = distribution_of(std::move(itl));
  s.e2e = distribution_of(std::move(e2e));
  if (duration > 0) {
    s.request_throughput = static_cast<double>(s.succeeded) / duration;
    s.output_throughput = static_cast<double>(s.output_tokens) / duration;
    s.goodput = static_cast<double>(s.met_slo) / duration;
  }
  if (!records.empty()) s.slo_fraction = static_cast<double>(s.met_slo) / static_cast<double>(records.size());
  return s;
}

json to_json(const LoadSummary& s, const Slo& slo) {
  json j = {{"successful_requests", s.succeeded},
            {"failed_requests", s.failed},
            {"duration_s", s.duration},
            {"input_tokens", s.input_tokens},
            {"output_tokens", s.output_tokens},
            {"request_throughput", s.request_throughput},
            {"output_throughput", s.output_throughput},
            {"ttft", to_json(s.ttft)},
            {"tpot", to_json(s.tpot)},
            {"itl", to_json(s.itl)},
            {"e2e", to_json(s.e2e)}};
  if (!s.first_error.empty()) j["first_error"] = s.first_error;
  if (!slo.empty()) {
    json objective = json::object();
    if (slo.ttft) objective["ttft_ms"] = ms(*slo.ttft);
    if (slo.tpot) objective["tpot_ms"] = ms(*slo.tpot);
    if (slo.e2e) objective["e2e_ms"] = ms(*slo.e2e);
    j["slo"] = objective;
    j["met_slo"] = s.met_slo;
    j["goodput"] = s.goodput;
    j["slo_fraction"] = s.slo_fraction;
  }
  return j;
}

std::optional<double> prometheus_value(std::string_view text, std::string_view name) {
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = std::min(text.find('\n', at), text.size());
    const std::string_view line = text.substr(at, end - at);
    if (line.size() > name.size() && line.substr(0, name.size()) == name && line[name.size()] == ' ') {
      const std::string value(line.substr(name.size() + 1));
      char* parsed = nullptr;
      const double v = std::strtod(value.c_str(), &parsed);
      if (parsed != value.c_str()) return v;
    }
    at = end + 1;
  }
  return std::nullopt;
}

}  // namespace px::serve
