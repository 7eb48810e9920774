// The pure half of `parallax bench serve` (serve/load_generator.h): the
// Poisson schedule, the plan's sizes and prompts, percentiles and goodput
// on hand-made records, and Server-Sent Events cut at every byte.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"
#include "serve/load_generator.h"

namespace px::serve {
namespace {

// Whether `text` is well-formed UTF-8 (Python's strict decoder would take it).
bool is_utf8(const std::string& text) {
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > text.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

TEST(ArrivalTimes, GapsAverageOneOverTheRateAndRepeatForASeed) {
  const std::vector<double> times = arrival_times(20001, 40.0, 7);
  ASSERT_EQ(times.size(), 20001u);
  EXPECT_EQ(times.front(), 0.0);
  std::vector<double> gaps;
  for (size_t i = 1; i < times.size(); ++i) gaps.push_back(times[i] - times[i - 1]);
  const double mean = std::accumulate(gaps.begin(), gaps.end(), 0.0) / static_cast<double>(gaps.size());
  double variance = 0;
  for (double g : gaps) variance += (g - mean) * (g - mean);
  variance /= static_cast<double>(gaps.size());
  EXPECT_NEAR(mean, 1.0 / 40, 0.03 / 40);  // 20000 exponential gaps: the mean's sd is 0.7% of it
  EXPECT_NEAR(std::sqrt(variance), 1.0 / 40, 0.05 / 40);  // an exponential's sd equals its mean (±1% here)
  for (double g : gaps) ASSERT_GE(g, 0.0);
  EXPECT_EQ(arrival_times(100, 40.0, 7), std::vector<double>(times.begin(), times.begin() + 100));
  EXPECT_NE(arrival_times(100, 40.0, 8), std::vector<double>(times.begin(), times.begin() + 100));
  EXPECT_EQ(arrival_times(5, 0, 7), std::vector<double>(5, 0.0));
  EXPECT_EQ(arrival_times(5, INFINITY, 7), std::vector<double>(5, 0.0));
}

TEST(PlanRequests, SizesStayInTheirRangesAndPromptsAreValidUtf8OfTheDrawnLength) {
  // Multi-byte characters everywhere, so cuts land inside them.
  const std::string corpus = "naïve café — ünïcødé 😀 text\nsecond line ÷ ≤ ≥\n";
  const Workload workload{.requests = 400, .rate = 10, .seed = 3, .prompt_bytes = {5, 30}, .output_tokens = {4, 40},
                          .long_prompt_fraction = 0.25};
  const int64_t context = 48;
  const std::vector<PlannedRequest> plan = plan_requests(workload, corpus, context);
  ASSERT_EQ(plan.size(), 400u);
  int longs = 0, cut = 0;
  for (const PlannedRequest& p : plan) {
    const auto bytes = static_cast<int64_t>(p.prompt.size());
    ASSERT_TRUE(is_utf8(p.prompt)) << p.prompt;
    if (p.long_prompt) {
      ++longs;
      EXPECT_EQ(bytes, context - 4);  // the context less the shortest output
    } else {
      EXPECT_GE(bytes, 5);
      EXPECT_LE(bytes, 30);
    }
    EXPECT_GE(p.max_tokens, 1);
    EXPECT_LE(p.max_tokens, 40);
    EXPECT_LE(bytes + p.max_tokens, context);
    cut += !p.long_prompt && p.max_tokens < 4;
  }
  EXPECT_NEAR(longs, 100, 30);
  EXPECT_EQ(cut, 0);  // 30 + 4 fits: only outputs above 18 are cut, never below the shortest
  const std::vector<PlannedRequest> again = plan_requests(workload, corpus, context);
  for (size_t i = 0; i < plan.size(); ++i) {
    EXPECT_EQ(again[i].prompt, plan[i].prompt);
    EXPECT_EQ(again[i].send_at, plan[i].send_at);
  }
}

TEST(PlanRequests, LongPromptsLeaveEveryOtherRequestAsItWas) {
  const std::string corpus = "a corpus of plain text to cut prompts from, long enough to vary\n";
  const Workload plain{.requests = 50, .rate = 5, .seed = 9};
  Workload with_long = plain;
  with_long.long_prompt_fraction = 0.2;
  const std::vector<PlannedRequest> a = plan_requests(plain, corpus, 256), b = plan_requests(with_long, corpus, 256);
  int longs = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].send_at, b[i].send_at);
    if (b[i].long_prompt) {
      ++longs;
      EXPECT_EQ(b[i].prompt.size(), 248u);  // 256 less the shortest output, 8
      continue;
    }
    EXPECT_EQ(a[i].prompt, b[i].prompt) << i;
    EXPECT_EQ(a[i].max_tokens, b[i].max_tokens) << i;
  }
  EXPECT_GT(longs, 0);
}

TEST(PlanRequests, APromptThatLeavesNoRoomIsNamed) {
  try {
    plan_requests({.requests = 1, .prompt_bytes = {16, 200}}, "text", 128);
    ADD_FAILURE() << "planned prompts of up to 200 bytes for a context of 128";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--prompt-bytes 16:200 reaches the model's context of 128"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(plan_requests({.requests = 1, .prompt_bytes = {1, 4}}, "", 128), Error);
}

TEST(ParseFlags, RangesAndSlosNameTheBadText) {
  EXPECT_EQ(parse_range("16:200", "--prompt-bytes", 1), (UniformRange{16, 200}));
  EXPECT_EQ(parse_range("8", "--output-tokens", 1), (UniformRange{8, 8}));
  for (const char* bad : {"200:16", "0:5", "a:b", "5:", ":5", "1:2:3"}) {
    try {
      parse_range(bad, "--prompt-bytes", 1);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fmt::format("--prompt-bytes '{}' is not a range", bad)), std::string::npos)
          << e.what();
    }
  }
  const Slo slo = parse_slo("ttft:250,tpot:40");
  EXPECT_DOUBLE_EQ(*slo.ttft, 0.25);
  EXPECT_DOUBLE_EQ(*slo.tpot, 0.04);
  EXPECT_FALSE(slo.e2e);
  for (const char* bad : {"ttft", "ttft:-1", "latency:5", "ttft:5,", "tpot:5ms"}) EXPECT_THROW(parse_slo(bad), Error) << bad;
}

TEST(Percentile, InterpolatesBetweenClosestRanksAsNumpy) {
  const std::vector<double> sorted{1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(percentile(sorted, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(percentile(sorted, 0.9), 3.7);
  EXPECT_DOUBLE_EQ(percentile(sorted, 0.99), 3.97);
  EXPECT_DOUBLE_EQ(percentile(sorted, 0), 1);
  EXPECT_DOUBLE_EQ(percentile(sorted, 1), 4);
  const Distribution d = distribution_of({4, 1, 3, 2});
  EXPECT_EQ(d.count, 4);
  EXPECT_DOUBLE_EQ(d.mean, 2.5);
  EXPECT_DOUBLE_EQ(d.p90, 3.7);
  EXPECT_EQ(distribution_of({}).count, 0);
}

TEST(Summarize, CountsLatenciesAndGoodputOfHandMadeRecords) {
  // Token arrivals (s from the send); e2e is the stream's end.
  auto record = [](std::vector<double> tokens, double e2e, int64_t output) {
    return RequestRecord{.prompt_bytes = 10, .max_tokens = output, .token_times = std::move(tokens), .e2e = e2e,
                         .prompt_tokens = 10, .output_tokens = output};
  };
  std::vector<RequestRecord> records{
      record({0.1, 0.2, 0.3}, 0.3, 3),   // ttft 0.1, tpot 0.1
      record({0.5, 0.6, 0.9}, 0.9, 3),   // ttft 0.5, tpot 0.2
      record({0.2}, 0.2, 1),             // ttft 0.2, no tpot
  };
  RequestRecord failed{.prompt_bytes = 10, .max_tokens = 5, .error = "HTTP 429: queue full"};
  records.insert(records.begin() + 1, failed);
  const LoadSummary s = summarize(records, 2.0, parse_slo("ttft:300,tpot:150"));
  EXPECT_EQ(s.succeeded, 3);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.first_error, "HTTP 429: queue full");
  EXPECT_EQ(s.input_tokens, 30);
  EXPECT_EQ(s.output_tokens, 7);
  EXPECT_DOUBLE_EQ(s.request_throughput, 1.5);
  EXPECT_DOUBLE_EQ(s.output_throughput, 3.5);
  EXPECT_NEAR(s.ttft.mean, (0.1 + 0.5 + 0.2) / 3, 1e-12);
  EXPECT_NEAR(s.ttft.p50, 0.2, 1e-12);
  EXPECT_EQ(s.tpot.count, 2);  // a one-token reply has no time per output token
  EXPECT_NEAR(s.tpot.mean, 0.15, 1e-12);
  EXPECT_EQ(s.itl.count, 4);  // every gap: 0.1 0.1 | 0.1 0.3
  EXPECT_NEAR(s.itl.p50, 0.1, 1e-12);
  EXPECT_NEAR(s.itl.p99, 0.1 + 0.2 * 0.97, 1e-12);
  EXPECT_NEAR(s.e2e.mean, (0.3 + 0.9 + 0.2) / 3, 1e-12);
  // The first and third meet TTFT <= 300 ms and TPOT <= 150 ms; the second's
  // TTFT is 500 ms; the failed one meets nothing.
  EXPECT_EQ(s.met_slo, 2);
  EXPECT_DOUBLE_EQ(s.goodput, 1.0);
  EXPECT_DOUBLE_EQ(s.slo_fraction, 0.5);
  EXPECT_EQ(summarize(records, 2.0, {}).met_slo, 0);
}

// A stream as parallax sends it: token chunks, the usage chunk, [DONE].
const std::string kStream =
    "data: {\"choices\":[{\"index\":0,\"text\":\"he\",\"finish_reason\":null}]}\n\n"
    ": a comment\n\n"
    "data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":null}]}\r\n\r\n"
    "data: {\"choices\":[{\"index\":0,\"text\":\"\\u00e9\",\"finish_reason\":\"length\"}]}\n\n"
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":3,\"total_tokens\":7}}\n\n"
    "data: [DONE]\n\n";

TEST(SseParser, EventsAreTheSameWhereverTheBytesAreCut) {
  SseParser whole;
  const std::vector<std::string> expected = whole.feed(kStream);
  ASSERT_EQ(expected.size(), 5u);
  EXPECT_EQ(expected.back(), "[DONE]");
  for (size_t cut = 0; cut <= kStream.size(); ++cut) {
    SseParser parser;
    std::vector<std::string> events = parser.feed(std::string_view(kStream).substr(0, cut));
    for (std::string& e : parser.feed(std::string_view(kStream).substr(cut))) events.push_back(std::move(e));
    ASSERT_EQ(events, expected) << "cut at " << cut;
  }
  SseParser bytewise;
  std::vector<std::string> events;
  for (char c : kStream)
    for (std::string& e : bytewise.feed(std::string_view(&c, 1))) events.push_back(std::move(e));
  EXPECT_EQ(events, expected);
  SseParser multiline;
  EXPECT_EQ(multiline.feed("data: a\ndata:b\n\n"), std::vector<std::string>{"a\nb"});
}

TEST(StreamEvent, ReadsTokensUsageDoneAndErrors) {
  SseParser parser;
  const std::vector<std::string> events = parser.feed(kStream);
  std::string text;
  int tokens = 0;
  for (size_t i = 0; i < 3; ++i) {
    const StreamEvent e = parse_stream_event(events[i]);
    EXPECT_TRUE(e.token);
    EXPECT_TRUE(e.error.empty());
    text += e.text;
    ++tokens;
  }
  EXPECT_EQ(text, "he\xc3\xa9");
  EXPECT_EQ(tokens, 3);  // the empty chunk is a token held back (UTF-8), still counted
  const StreamEvent usage = parse_stream_event(events[3]);
  EXPECT_FALSE(usage.token);
  EXPECT_EQ(usage.prompt_tokens, 4);
  EXPECT_EQ(usage.completion_tokens, 3);
  EXPECT_TRUE(parse_stream_event(events[4]).done);
  EXPECT_EQ(parse_stream_event(R"({"error":{"message":"boom","type":"x"}})").error, "boom");
  EXPECT_NE(parse_stream_event("{not json").error.find("not a JSON object"), std::string::npos);
}

TEST(PrometheusValue, ReadsAnUnlabelledSample) {
  const std::string text =
      "# HELP parallax_requests_running Sequences running.\n# TYPE parallax_requests_running gauge\n"
      "parallax_requests_running 7\nparallax_requests_running_total 9\n"
      "parallax_requests_total{outcome=\"length\"} 3\nparallax_tokens_per_second 12.5\n";
  EXPECT_EQ(prometheus_value(text, "parallax_requests_running"), 7.0);
  EXPECT_EQ(prometheus_value(text, "parallax_tokens_per_second"), 12.5);
  EXPECT_FALSE(prometheus_value(text, "parallax_requests_waiting"));
  EXPECT_FALSE(prometheus_value(text, "parallax_requests_total"));
}

}  // namespace
}  // namespace px::serve
