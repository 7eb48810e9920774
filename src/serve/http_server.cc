#include "serve/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <ctime>

#include <fmt/format.h>

namespace px::serve {
namespace {

using nlohmann::json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json error_body(const std::string& message, const std::string& type, const std::string& param, const std::string& code) {
  return {{"error",
           {{"message", message}, {"type", type}, {"param", param.empty() ? json(nullptr) : json(param)}, {"code", code}}}};
}

void reply_error(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump(body), "application/json");
}

// How a byte token reads in logprobs: itself when ASCII, else OpenAI's "bytes:\xNN".
std::string token_text(int32_t token) {
  if (token < 0x80) return std::string(1, static_cast<char>(token));
  return fmt::format("bytes:\\x{:02x}", token);
}

json logprobs_of(const ChoiceEvent& e, int64_t offset) {
  json top = json::object();
  for (const decode::TokenLogprob& t : e.top) top[token_text(t.token)] = t.logprob;
  return {{"tokens", {token_text(*e.token)}},
          {"token_logprobs", {e.logprob}},
          {"top_logprobs", {top}},
          {"text_offset", {offset}}};
}

}  // namespace

struct HttpServer::Impl {
  Engine& engine;
  HttpOptions options;
  httplib::Server server;
  std::atomic<uint64_t> next_id{0};
  int listen_socket = -1;  // the bound socket (set_socket_options sees it before bind)

  Impl(Engine& e, HttpOptions o) : engine(e), options(std::move(o)) {}

  json reply_head(uint64_t id) const {
    return {{"id", fmt::format("cmpl-{}", id)},
            {"object", "text_completion"},
            {"created", static_cast<int64_t>(std::time(nullptr))},
            {"model", options.model}};
  }

  void completions(const httplib::Request& req, httplib::Response& res) {
    CompletionRequest request;
    try {
      request = parse_completion_request(req.body, engine.limits());
    } catch (const RequestError& e) {
      return reply_error(res, 400, error_body(e.what(), "invalid_request_error", e.param(), "invalid_value"));
    }
    std::shared_ptr<RequestStream> stream;
    try {
      stream = engine.submit(request);
    } catch (const QueueFull& e) {
      res.set_header("Retry-After", "1");
      return reply_error(res, 429, error_body(e.what(), "server_overloaded", "", "queue_full"));
    }
    const uint64_t id = next_id++;
    if (request.stream) return stream_reply(res, request, stream, id);
    whole_reply(res, request, stream, id);
  }

  // The prompt a choice continues (choices go n per prompt).
  static const std::string& prompt_of(const CompletionRequest& r, int index) {
    return r.prompts[static_cast<size_t>(index / r.n)];
  }

  void whole_reply(httplib::Response& res, const CompletionRequest& request, const std::shared_ptr<RequestStream>& stream,
                   uint64_t id) {
    const size_t choices = request.prompts.size() * static_cast<size_t>(request.n);
    std::vector<json> out(choices);
    std::vector<std::string> text(choices);
    for (size_t i = 0; i < choices; ++i) {
      if (request.echo) text[i] = to_utf8(prompt_of(request, static_cast<int>(i)), true);
      out[i] = {{"index", i}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
      if (request.logprobs)
        out[i]["logprobs"] = {{"tokens", json::array()}, {"token_logprobs", json::array()},
                              {"top_logprobs", json::array()}, {"text_offset", json::array()}};
    }
    std::string error;  // a choice ended without an answer
    for (;;) {
      const std::vector<ChoiceEvent> events = stream->take(std::chrono::milliseconds(200));
      for (const ChoiceEvent& e : events) {
        json& c = out[static_cast<size_t>(e.index)];
        if (e.token && request.logprobs) {
          const json one = logprobs_of(e, static_cast<int64_t>(text[static_cast<size_t>(e.index)].size()));
          for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) c["logprobs"][k].push_back(one[k][0]);
        }
        text[static_cast<size_t>(e.index)] += e.text;
        if (!e.finish_reason.empty()) c["finish_reason"] = e.finish_reason;
        if (!e.error.empty() && error.empty()) error = e.error;
      }
      if (!error.empty() || (events.empty() && stream->finished())) break;
    }
    if (!error.empty()) {
      stream->cancel();  // the request's other choices, if any still run
      res.set_header("Retry-After", "1");
      return reply_error(res, 503, error_body(error, "server_overloaded", "", "queue_timeout"));
    }
    json body = reply_head(id);
    for (size_t i = 0; i < choices; ++i) out[i]["text"] = text[i];
    body["choices"] = out;
    const Usage u = stream->usage();
    body["usage"] = {{"prompt_tokens", u.prompt_tokens}, {"completion_tokens", u.completion_tokens},
                     {"total_tokens", u.prompt_tokens + u.completion_tokens}};
    res.set_content(dump(body), "application/json");
  }

  void stream_reply(httplib::Response& res, const CompletionRequest& request, const std::shared_ptr<RequestStream>& stream,
                    uint64_t id) {
    struct State {
      std::vector<bool> started;
      std::vector<int64_t> offset;
      bool done = false;
    };
    auto state = std::make_shared<State>();
    const size_t choices = request.prompts.size() * static_cast<size_t>(request.n);
    state->started.assign(choices, false);
    state->offset.assign(choices, 0);
    const json head = reply_head(id);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [request, stream, state, head](size_t, httplib::DataSink& sink) {
          if (state->done) return false;
          if (!sink.is_writable()) {  // the client went away
            stream->cancel();
            return false;
          }
          const std::vector<ChoiceEvent> events = stream->take(std::chrono::milliseconds(100));
          for (const ChoiceEvent& e : events) {
            if (e.finish_reason == "cancelled") continue;
            if (!e.error.empty()) {  // OpenAI's shape for an error mid-stream: an event holding it
              const std::string line =
                  "data: " + dump(error_body(e.error, "server_overloaded", "", "queue_timeout")) + "\n\n";
              if (!sink.write(line.data(), line.size())) {
                stream->cancel();
                return false;
              }
              continue;
            }
            const auto i = static_cast<size_t>(e.index);
            std::string text = e.text;
            if (!state->started[i] && request.echo) text = to_utf8(prompt_of(request, e.index), true) + text;
            state->started[i] = true;
            json chunk = head;
            json choice = {{"index", e.index}, {"text", text}, {"logprobs", nullptr},
                           {"finish_reason", e.finish_reason.empty() ? json(nullptr) : json(e.finish_reason)}};
            if (request.logprobs && e.token) choice["logprobs"] = logprobs_of(e, state->offset[i]);
            state->offset[i] += static_cast<int64_t>(text.size());
            chunk["choices"] = json::array({choice});
            const std::string line = "data: " + dump(chunk) + "\n\n";
            if (!sink.write(line.data(), line.size())) {
              stream->cancel();
              return false;
            }
          }
          if (events.empty() && stream->finished()) {
            if (request.include_usage) {
              json chunk = head;
              chunk["choices"] = json::array();
              const Usage u = stream->usage();
              chunk["usage"] = {{"prompt_tokens", u.prompt_tokens}, {"completion_tokens", u.completion_tokens},
                                {"total_tokens", u.prompt_tokens + u.completion_tokens}};
              const std::string line = "data: " + dump(chunk) + "\n\n";
              sink.write(line.data(), line.size());
            }
            const std::string done = "data: [DONE]\n\n";
            sink.write(done.data(), done.size());
            state->done = true;
            sink.done();
          }
          return true;
        },
        [stream](bool success) {
          if (!success) stream->cancel();
        });
  }

  void routes() {
    server.set_payload_max_length(options.max_body_bytes);
    server.set_socket_options([this](socket_t socket) {
      httplib::default_socket_options(socket);
      listen_socket = socket;
    });
    server.new_task_queue = [threads = options.threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    server.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { completions(req, res); });
    server.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      json model = {{"id", options.model}, {"object", "model"}, {"owned_by", "parallax"}};
      if (!options.card.is_null()) model["parallax"] = options.card;
      res.set_content(dump({{"object", "list"}, {"data", json::array({model})}}), "application/json");
    });
    server.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"status":"ok"})", "application/json");
    });
    server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(engine.metrics().prometheus(), "text/plain; version=0.0.4");
    });
    server.Get("/", [](const httplib::Request&, httplib::Response& res) { res.set_content(serve_page(), "text/html"); });
    server.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (res.status == 413)
        return reply_error(res, 413, error_body("the body is over the size limit", "invalid_request_error", "", "too_large"));
      if (res.body.empty())
        reply_error(res, res.status, error_body(fmt::format("HTTP {}", res.status), "invalid_request_error", "", "not_found"));
    });
  }
};

HttpServer::HttpServer(Engine& engine, HttpOptions options) : impl_(std::make_unique<Impl>(engine, std::move(options))) {
  impl_->routes();
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  const HttpOptions& o = impl_->options;
  const int port = o.port == 0 ? impl_->server.bind_to_any_port(o.host)
                               : (impl_->server.bind_to_port(o.host, o.port) ? o.port : -1);
  if (port < 0) fail("serve: cannot listen on {}:{} (taken, or not an address of this host)", o.host, o.port);
  // cpp-httplib 0.11 listens with a backlog of 5: a burst of clients
  // connecting at once (a load generator's "all at once") overflows it while
  // the accept thread waits for a core, and the kernel drops their
  // handshakes (ListenOverflows). Listening again only raises the backlog.
  ::listen(impl_->listen_socket, SOMAXCONN);
  return port;
}

void HttpServer::listen() { impl_->server.listen_after_bind(); }

void HttpServer::stop() { impl_->server.stop(); }

}  // namespace px::serve
