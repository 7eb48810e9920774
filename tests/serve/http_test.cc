// The HTTP side against a real socket: a tiny GPT served on 127.0.0.1 at
// a free port, its engine on a thread, cpp-httplib's client as the user.
#include <gtest/gtest.h>

#include <httplib.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/engine.h"
#include "serve/http_server.h"
#include "testing/gpt_reference.h"

namespace px::serve {
namespace {

using nlohmann::json;

const nn::GptConfig kHttpConfig{.vocab = 256, .block = 64, .n_layer = 2, .n_head = 2, .n_embd = 16};

// An engine and its server, running until the fixture ends.
class Served {
 public:
  explicit Served(EngineOptions options = {.cache = {.blocks = 64, .block_tokens = 4}},
                  const nn::GptConfig& config = kHttpConfig)
      : weights_(testing::scaled_gpt_weights(config, 7)), engine_(config, weights_, options),
        http_(engine_, {.host = "127.0.0.1", .port = 0, .threads = 16}) {
    port_ = http_.bind();
    listener_ = std::thread([this] { http_.listen(); });
    engine_thread_ = std::thread([this] { engine_.run(std::chrono::milliseconds(20)); });
  }
  ~Served() {
    engine_.stop();
    engine_thread_.join();
    http_.stop();
    listener_.join();
  }
  Engine& engine() { return engine_; }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(30, 0);
    return c;
  }

 private:
  ParamStore weights_;
  Engine engine_;
  HttpServer http_;
  int port_ = 0;
  std::thread listener_, engine_thread_;
};

// Every `data: ` payload of a Server-Sent Events body, in order.
std::vector<std::string> events_of(const std::string& body) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < body.size()) {
    const size_t end = body.find("\n\n", at);
    if (end == std::string::npos) break;
    const std::string event = body.substr(at, end - at);
    EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
    out.push_back(event.substr(6));
    at = end + 2;
  }
  EXPECT_EQ(at, body.size()) << "a partial event at the end";
  return out;
}

TEST(Http, TheStreamedTextIsTheWholeReplysText) {
  Served served;
  httplib::Client client = served.client();
  const std::string request = R"({"prompt":"stream me","max_tokens":30,"temperature":0)";
  const auto whole = client.Post("/v1/completions", request + "}", "application/json");
  ASSERT_TRUE(whole);
  ASSERT_EQ(whole->status, 200) << whole->body;
  const json reply = json::parse(whole->body);
  const std::string text = reply["choices"][0]["text"];
  EXPECT_EQ(reply["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(reply["usage"]["completion_tokens"], 30);
  EXPECT_EQ(reply["usage"]["prompt_tokens"], 9);

  const auto streamed = client.Post("/v1/completions",
                                    request + R"(,"stream":true,"stream_options":{"include_usage":true}})",
                                    "application/json");
  ASSERT_TRUE(streamed);
  ASSERT_EQ(streamed->status, 200);
  EXPECT_EQ(streamed->get_header_value("Content-Type"), "text/event-stream");
  const std::vector<std::string> events = events_of(streamed->body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string joined;
  for (size_t i = 0; i + 2 < events.size(); ++i) joined += json::parse(events[i])["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(joined, text);
  const json usage = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 30);
}

TEST(Http, EachBadFieldIsA400NamingIt) {
  Served served;
  httplib::Client client = served.client();
  for (const auto& [body, param] : std::vector<std::pair<std::string, std::string>>{
           {"{", ""}, {R"({"prompt":"a","max_tokens":-1})", "max_tokens"}, {R"({"prompt":""})", "prompt"},
           {R"({"prompt":"a","temperature":-1})", "temperature"}, {R"({"prompt":"a","max_tokens":64})", "max_tokens"},
           {R"({"prompt":"a","n":"two"})", "n"}}) {
    const auto res = client.Post("/v1/completions", body, "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << body;
    const json error = json::parse(res->body)["error"];
    EXPECT_EQ(error["param"].is_null() ? "" : error["param"].get<std::string>(), param) << body;
    EXPECT_FALSE(error["message"].get<std::string>().empty());
  }
  const auto big = client.Post("/v1/completions", std::string(2 << 20, ' '), "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
}

TEST(Http, AFullQueueIs429WithRetryAfter) {
  // Without an engine thread nothing leaves the queue.
  const ParamStore weights = testing::scaled_gpt_weights(kHttpConfig, 8);
  Engine engine(kHttpConfig, weights, {.cache = {.blocks = 64, .block_tokens = 4}, .max_waiting = 1});
  HttpServer http(engine, {.host = "127.0.0.1", .port = 0});
  const int port = http.bind();
  std::thread listener([&] { http.listen(); });
  engine.submit({.prompts = {"x"}, .max_tokens = 1});
  httplib::Client client("127.0.0.1", port);
  const auto res = client.Post("/v1/completions", R"({"prompt":"y"})", "application/json");
  http.stop();
  listener.join();
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 429);
  EXPECT_EQ(res->get_header_value("Retry-After"), "1");
}

// FCFS's bound on waiting: a request that never started within
// --max-queue-ms is answered 503 whole, or with an error event streamed.
TEST(Http, ARequestWaitingPastTheQueueBoundGets503OrAnErrorEvent) {
  const ParamStore weights = testing::scaled_gpt_weights(kHttpConfig, 9);
  // Without an engine thread the test steps the engine itself, after the bound.
  Engine engine(kHttpConfig, weights, {.cache = {.blocks = 64, .block_tokens = 4}, .max_queue_ms = 20});
  HttpServer http(engine, {.host = "127.0.0.1", .port = 0});
  const int port = http.bind();
  std::thread listener([&] { http.listen(); });
  auto post = [&](const std::string& body) {
    return std::async(std::launch::async, [port, body] {
      httplib::Client client("127.0.0.1", port);
      return client.Post("/v1/completions", body, "application/json");
    });
  };
  auto whole = post(R"({"prompt":"x","max_tokens":4})");
  auto streamed = post(R"({"prompt":"y","max_tokens":4,"stream":true})");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // both queued, past the bound
  engine.step();
  const auto whole_reply = whole.get();
  const auto streamed_reply = streamed.get();
  http.stop();
  listener.join();
  ASSERT_TRUE(whole_reply);
  EXPECT_EQ(whole_reply->status, 503);
  EXPECT_NE(whole_reply->body.find("\"code\":\"queue_timeout\""), std::string::npos) << whole_reply->body;
  EXPECT_NE(whole_reply->body.find("--max-queue-ms 20"), std::string::npos) << whole_reply->body;
  ASSERT_TRUE(streamed_reply);
  const std::vector<std::string> events = events_of(streamed_reply->body);
  ASSERT_GE(events.size(), 2u) << streamed_reply->body;
  EXPECT_NE(events.front().find("queue_timeout"), std::string::npos) << events.front();
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(engine.metrics().failed.load(), 2u);
  EXPECT_EQ(engine.metrics().kv_blocks_used.load(), 0);
}

// The answer is long (1000 tokens of a 1024-token context) so that the
// client is gone well before it could end: a short one, on a fast core,
// finished before the server's next write found the connection closed.
TEST(Http, AClientThatLeavesMidStreamFreesEveryBlock) {
  nn::GptConfig long_context = kHttpConfig;
  long_context.block = 1024;
  Served served({.cache = {.blocks = 300, .block_tokens = 4}}, long_context);
  httplib::Client client = served.client();
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = R"({"prompt":"leave early","max_tokens":1000,"stream":true})";
  req.set_header("Content-Type", "application/json");
  int chunks = 0;
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 2; };  // then hang up
  httplib::Response res;
  httplib::Error error;
  client.send(req, res, error);
  // The blocks gauge is published after the step that counts the cancel: wait for both.
  for (int i = 0; i < 500 && (served.engine().metrics().cancelled.load() == 0 ||
                              served.engine().metrics().kv_blocks_used.load() != 0);
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(served.engine().metrics().cancelled.load(), 1u);
  EXPECT_EQ(served.engine().metrics().kv_blocks_used.load(), 0);
  const auto health = client.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

TEST(Http, ModelsMetricsAndThePage) {
  Served served;
  httplib::Client client = served.client();
  const auto models = client.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(json::parse(models->body)["data"][0]["object"], "model");
  const auto metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  for (const char* name : {"parallax_requests_running", "parallax_requests_waiting", "parallax_kv_blocks_used",
                           "parallax_kv_blocks_free", "parallax_preemptions_total", "parallax_tokens_per_second",
                           "parallax_time_to_first_token_seconds_bucket", "parallax_inter_token_latency_seconds_count"})
    EXPECT_NE(metrics->body.find(name), std::string::npos) << name;
  const auto page = client.Get("/");
  ASSERT_TRUE(page);
  EXPECT_NE(page->body.find("/v1/completions"), std::string::npos);
}

}  // namespace
}  // namespace px::serve
