#include "serve/completion_request.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace px::serve {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& param, const std::string& message) { throw RequestError(param, message); }

// A JSON value in a message: short, and never invalid UTF-8 (the body may hold any bytes).
std::string shown(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

std::string type_of(const json& value) { return value.type_name(); }

int64_t integer(const json& body, const std::string& field, int64_t lo, int64_t hi) {
  const json& v = body.at(field);
  if (!v.is_number_integer())
    bad(field, fmt::format("'{}' must be an integer, not {} {}", field, type_of(v), shown(v)));
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    bad(field, fmt::format("'{}' is {}, expected {}..{}", field, shown(v), lo, hi));
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) bad(field, fmt::format("'{}' is {}, expected {}..{}", field, x, lo, hi));
  return x;
}

double number(const json& body, const std::string& field) {
  const json& v = body.at(field);
  if (!v.is_number()) bad(field, fmt::format("'{}' must be a number, not {} {}", field, type_of(v), shown(v)));
  return v.get<double>();
}

bool boolean(const json& body, const std::string& field) {
  const json& v = body.at(field);
  if (!v.is_boolean()) bad(field, fmt::format("'{}' must be true or false, not {} {}", field, type_of(v), shown(v)));
  return v.get<bool>();
}

// A string field's bytes (nlohmann has checked they are UTF-8).
std::string text(const json& v, const std::string& field) {
  if (!v.is_string()) bad(field, fmt::format("'{}' must be a string, not {} {}", field, type_of(v), shown(v)));
  return v.get<std::string>();
}

// A string or a list of strings.
std::vector<std::string> texts(const json& body, const std::string& field) {
  const json& v = body.at(field);
  if (v.is_string()) return {v.get<std::string>()};
  if (!v.is_array())
    bad(field, fmt::format("'{}' must be a string or a list of strings, not {} {}", field, type_of(v), shown(v)));
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) out.push_back(text(v[i], fmt::format("{}[{}]", field, i)));
  return out;
}

const std::vector<std::string>& known_fields() {
  static const std::vector<std::string> fields = {
      "model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "stop", "seed", "n", "stream",
      "stream_options", "logprobs", "echo", "user", "best_of", "suffix", "presence_penalty", "frequency_penalty",
      "logit_bias"};
  return fields;
}

}  // namespace

CompletionRequest parse_completion_request(std::string_view body_text, const RequestLimits& limits) {
  json body;
  try {
    body = json::parse(body_text);
  } catch (const json::exception& e) {  // a syntax error, or a number past double's range
    bad("", fmt::format("the body is not JSON: {}", e.what()));
  }
  if (!body.is_object()) bad("", fmt::format("the body must be a JSON object, not {}", type_of(body)));
  for (const auto& [key, value] : body.items()) {
    bool known = false;
    for (const std::string& f : known_fields()) known = known || key == f;
    if (!known) bad(key, fmt::format("unknown field '{}' (a completion takes {})", key, fmt::join(known_fields(), ", ")));
  }

  CompletionRequest r;
  if (body.contains("model") && !body.at("model").is_null()) r.model = text(body.at("model"), "model");
  if (!body.contains("prompt")) bad("prompt", "'prompt' is missing (a string or a list of strings)");
  r.prompts = texts(body, "prompt");
  if (r.prompts.empty()) bad("prompt", "'prompt' is an empty list");
  const bool max_tokens_given = body.contains("max_tokens") && !body.at("max_tokens").is_null();
  if (max_tokens_given) r.max_tokens = integer(body, "max_tokens", 1, std::numeric_limits<int64_t>::max());
  if (body.contains("temperature") && !body.at("temperature").is_null()) {
    r.temperature = number(body, "temperature");
    if (!(r.temperature >= 0) || !std::isfinite(r.temperature))
      bad("temperature", fmt::format("'temperature' is {}, expected a finite number >= 0 (0: greedy)", r.temperature));
  }
  if (body.contains("top_p") && !body.at("top_p").is_null()) {
    r.top_p = number(body, "top_p");
    if (!(r.top_p > 0 && r.top_p <= 1)) bad("top_p", fmt::format("'top_p' is {}, expected a number in (0, 1]", r.top_p));
  }
  if (body.contains("top_k") && !body.at("top_k").is_null())
    r.top_k = integer(body, "top_k", 0, std::numeric_limits<int64_t>::max());
  if (body.contains("stop") && !body.at("stop").is_null()) {
    r.stop = texts(body, "stop");
    if (static_cast<int>(r.stop.size()) > limits.max_stop)
      bad("stop", fmt::format("'stop' holds {} sequences, at most {}", r.stop.size(), limits.max_stop));
    for (size_t i = 0; i < r.stop.size(); ++i)
      if (r.stop[i].empty()) bad("stop", fmt::format("'stop[{}]' is empty", i));
  }
  if (body.contains("seed") && !body.at("seed").is_null()) {
    const json& v = body.at("seed");
    if (!v.is_number_integer()) bad("seed", fmt::format("'seed' must be an integer, not {} {}", type_of(v), shown(v)));
    r.seed = v.is_number_unsigned() ? v.get<uint64_t>() : static_cast<uint64_t>(v.get<int64_t>());
  }
  if (body.contains("n") && !body.at("n").is_null()) r.n = static_cast<int>(integer(body, "n", 1, limits.max_n));
  if (body.contains("best_of") && !body.at("best_of").is_null() && integer(body, "best_of", 1, limits.max_n) != r.n)
    bad("best_of", "'best_of' must equal 'n': parallax returns every choice it draws");
  if (body.contains("suffix") && !body.at("suffix").is_null() && !text(body.at("suffix"), "suffix").empty())
    bad("suffix", "'suffix' is not supported: a GPT continues its prompt and cannot fill in before a suffix");
  for (const char* penalty : {"presence_penalty", "frequency_penalty"})
    if (body.contains(penalty) && !body.at(penalty).is_null() && number(body, penalty) != 0)
      bad(penalty, fmt::format("'{}' is not supported (only 0)", penalty));
  if (body.contains("logit_bias") && !body.at("logit_bias").is_null() &&
      !(body.at("logit_bias").is_object() && body.at("logit_bias").empty()))
    bad("logit_bias", "'logit_bias' is not supported (only {})");
  if (body.contains("stream") && !body.at("stream").is_null()) r.stream = boolean(body, "stream");
  if (body.contains("stream_options") && !body.at("stream_options").is_null()) {
    const json& o = body.at("stream_options");
    if (!o.is_object())
      bad("stream_options", fmt::format("'stream_options' must be an object, not {} {}", type_of(o), shown(o)));
    if (!r.stream) bad("stream_options", "'stream_options' is only allowed with \"stream\": true");
    for (const auto& [key, value] : o.items()) {
      if (key != "include_usage") bad("stream_options." + key, fmt::format("unknown field 'stream_options.{}'", key));
      r.include_usage = boolean(o, "include_usage");
    }
  }
  if (body.contains("logprobs") && !body.at("logprobs").is_null())
    r.logprobs = static_cast<int>(integer(body, "logprobs", 0, limits.max_logprobs));
  if (body.contains("echo") && !body.at("echo").is_null()) r.echo = boolean(body, "echo");
  if (body.contains("user") && !body.at("user").is_null()) r.user = text(body.at("user"), "user");

  // Against the model: each prompt's bytes are tokens, and the prompt and
  // the tokens asked for fit its context.
  for (size_t i = 0; i < r.prompts.size(); ++i) {
    const std::string field = r.prompts.size() == 1 ? "prompt" : fmt::format("prompt[{}]", i);
    const std::string& p = r.prompts[i];
    if (p.empty()) bad(field, fmt::format("'{}' is empty (a completion needs at least one token)", field));
    for (size_t j = 0; j < p.size(); ++j)
      if (static_cast<unsigned char>(p[j]) >= limits.vocab)
        bad(field, fmt::format("'{}' byte {} is {}, past the model's vocabulary of {}", field, j,
                               static_cast<unsigned char>(p[j]), limits.vocab));
    const auto length = static_cast<int64_t>(p.size());
    if (length >= limits.context)
      bad(field, fmt::format("'{}' is {} tokens; the model's context is {}, so a prompt may hold at most {}", field,
                             length, limits.context, limits.context - 1));
    // Unasked, the default stops at the context (finish_reason "length").
    if (!max_tokens_given) r.max_tokens = std::min(r.max_tokens, limits.context - length);
    if (length + r.max_tokens > limits.context)
      bad("max_tokens", fmt::format("'max_tokens' is {}: with the {} tokens of '{}' that passes the model's context "
                                    "of {} (at most {})",
                                    r.max_tokens, length, field, limits.context, limits.context - length));
  }
  return r;
}

nlohmann::json to_json(const CompletionRequest& r) {
  json j = {{"model", r.model},       {"prompt", r.prompts}, {"max_tokens", r.max_tokens},
            {"temperature", r.temperature}, {"top_p", r.top_p}, {"top_k", r.top_k},
            {"stop", r.stop},         {"n", r.n},            {"stream", r.stream},
            {"echo", r.echo},         {"user", r.user}};
  if (r.seed) j["seed"] = *r.seed;
  if (r.logprobs) j["logprobs"] = *r.logprobs;
  if (r.stream) j["stream_options"] = {{"include_usage", r.include_usage}};
  return j;
}

}  // namespace px::serve
