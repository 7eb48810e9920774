// A POST /v1/completions body in OpenAI's shape, read and checked before
// anything is queued: every bad field is a RequestError naming the field,
// the bad value and what was expected (the server answers 400 with it).
// Tokens are bytes: a prompt's UTF-8 bytes are its tokens.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace px::serve {

// A bad request: `param` is the field at fault ("" for the body itself).
class RequestError : public Error {
 public:
  RequestError(std::string param, const std::string& message) : Error(message), param_(std::move(param)) {}
  const std::string& param() const { return param_; }

 private:
  std::string param_;
};

// What the model being served allows.
struct RequestLimits {
  int64_t context = 0;  // positions (GPT's block): prompt + max_tokens must fit
  int64_t vocab = 256;  // a prompt byte must be a token id below it
  int max_n = 8;        // choices per prompt
  int max_stop = 4;     // stop sequences (OpenAI's limit)
  int max_logprobs = 5;
};

struct CompletionRequest {
  std::string model;                 // accepted, not checked: one model is served
  std::vector<std::string> prompts;  // one choice group per prompt
  int64_t max_tokens = 16;  // unasked: 16, or what the longest prompt leaves of the context
  double temperature = 1.0;  // 0: greedy
  double top_p = 1.0;        // (0, 1]
  int64_t top_k = 0;         // 0: every token
  std::vector<std::string> stop;
  std::optional<uint64_t> seed;
  int n = 1;  // choices per prompt
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::optional<int> logprobs;  // top alternatives per token, with the chosen one's
  bool echo = false;            // the prompt before each choice's text
  std::string user;
};

// Parses and checks `body` (px::serve::RequestError on anything bad).
CompletionRequest parse_completion_request(std::string_view body, const RequestLimits& limits);

// The request as JSON (what a log or a test compares).
nlohmann::json to_json(const CompletionRequest& request);

}  // namespace px::serve
