#include <gtest/gtest.h>

#include <string>

#include "serve/completion_request.h"

namespace px::serve {
namespace {

const RequestLimits kLimits{.context = 64, .vocab = 256};

// The request's error: its field and a fragment of its message.
void expect_bad(const std::string& body, const std::string& param, const std::string& fragment) {
  try {
    parse_completion_request(body, kLimits);
    ADD_FAILURE() << "accepted: " << body;
  } catch (const RequestError& e) {
    EXPECT_EQ(e.param(), param) << body << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << body << ": " << e.what();
  }
}

TEST(CompletionRequest, ReadsEveryField) {
  const CompletionRequest r = parse_completion_request(
      R"({"model":"m","prompt":["ab","c"],"max_tokens":5,"temperature":0,"top_p":0.9,"top_k":3,
          "stop":["\n\n","x"],"seed":7,"n":2,"stream":true,"stream_options":{"include_usage":true},
          "logprobs":2,"echo":true,"user":"u"})",
      kLimits);
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompts, (std::vector<std::string>{"ab", "c"}));
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_EQ(r.temperature, 0);
  EXPECT_DOUBLE_EQ(r.top_p, 0.9);
  EXPECT_EQ(r.top_k, 3);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n\n", "x"}));
  EXPECT_EQ(r.seed, 7u);
  EXPECT_EQ(r.n, 2);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.logprobs, 2);
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.user, "u");
}

TEST(CompletionRequest, DefaultsAreOpenAIsAndStopAtTheContext) {
  const CompletionRequest r = parse_completion_request(R"({"prompt":"hello"})", kLimits);
  EXPECT_EQ(r.max_tokens, 16);
  EXPECT_EQ(r.temperature, 1.0);
  EXPECT_EQ(r.top_p, 1.0);
  EXPECT_EQ(r.n, 1);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.seed.has_value());
  // 60 bytes of a 64-token context leave 4: the default shrinks to them.
  const CompletionRequest near = parse_completion_request(R"({"prompt":")" + std::string(60, 'a') + R"("})", kLimits);
  EXPECT_EQ(near.max_tokens, 4);
}

TEST(CompletionRequest, EachBadFieldIsNamed) {
  expect_bad("{", "", "not JSON");
  expect_bad("[1]", "", "must be a JSON object");
  expect_bad(R"({"max_tokens":3})", "prompt", "'prompt' is missing");
  expect_bad(R"({"prompt":""})", "prompt", "'prompt' is empty");
  expect_bad(R"({"prompt":[]})", "prompt", "empty list");
  expect_bad(R"({"prompt":["a",""]})", "prompt[1]", "'prompt[1]' is empty");
  expect_bad(R"({"prompt":7})", "prompt", "a string or a list of strings, not number");
  expect_bad(R"({"prompt":["a",7]})", "prompt[1]", "must be a string");
  expect_bad(R"({"prompt":")" + std::string(64, 'a') + R"("})", "prompt", "at most 63");
  expect_bad(R"({"prompt":"a","max_tokens":0})", "max_tokens", "expected 1..");
  expect_bad(R"({"prompt":"a","max_tokens":-3})", "max_tokens", "'max_tokens' is -3");
  expect_bad(R"({"prompt":"a","max_tokens":"9"})", "max_tokens", "must be an integer, not string");
  expect_bad(R"({"prompt":"a","max_tokens":1.5})", "max_tokens", "must be an integer");
  expect_bad(R"({"prompt":"abc","max_tokens":62})", "max_tokens", "at most 61");
  expect_bad(R"({"prompt":"a","max_tokens":18446744073709551615})", "max_tokens", "expected 1..");
  expect_bad(R"({"prompt":"a","temperature":-0.5})", "temperature", "expected a finite number >= 0");
  expect_bad(R"({"prompt":"a","temperature":"hot"})", "temperature", "must be a number");
  expect_bad(R"({"prompt":"a","top_p":0})", "top_p", "in (0, 1]");
  expect_bad(R"({"prompt":"a","top_p":1.5})", "top_p", "in (0, 1]");
  expect_bad(R"({"prompt":"a","top_k":-1})", "top_k", "expected 0..");
  expect_bad(R"({"prompt":"a","stop":["a","b","c","d","e"]})", "stop", "at most 4");
  expect_bad(R"({"prompt":"a","stop":[""]})", "stop", "'stop[0]' is empty");
  expect_bad(R"({"prompt":"a","n":9})", "n", "expected 1..8");
  expect_bad(R"({"prompt":"a","best_of":3})", "best_of", "must equal 'n'");
  expect_bad(R"({"prompt":"a","stream":"yes"})", "stream", "must be true or false");
  expect_bad(R"({"prompt":"a","stream_options":{"include_usage":true}})", "stream_options", "only allowed with");
  expect_bad(R"({"prompt":"a","stream":true,"stream_options":{"x":1}})", "stream_options.x", "unknown field");
  expect_bad(R"({"prompt":"a","logprobs":6})", "logprobs", "expected 0..5");
  expect_bad(R"({"prompt":"a","suffix":"z"})", "suffix", "not supported");
  expect_bad(R"({"prompt":"a","presence_penalty":0.5})", "presence_penalty", "not supported");
  expect_bad(R"({"prompt":"a","promt":"b"})", "promt", "unknown field 'promt'");
  expect_bad(R"({"prompt":"a","seed":"1"})", "seed", "must be an integer");
}

TEST(CompletionRequest, AByteOutsideASmallVocabularyIsNamed) {
  try {
    parse_completion_request(R"({"prompt":"ab\u00e9"})", {.context = 64, .vocab = 128});
    FAIL();
  } catch (const RequestError& e) {
    EXPECT_EQ(e.param(), "prompt");
    EXPECT_NE(std::string(e.what()).find("byte 2 is 195, past the model's vocabulary of 128"), std::string::npos)
        << e.what();
  }
}

TEST(CompletionRequest, ItsJsonReadsBackTheSame) {
  const CompletionRequest r = parse_completion_request(
      R"({"prompt":"xy","max_tokens":3,"stop":"\n","seed":5,"stream":true,"logprobs":1})", kLimits);
  const CompletionRequest again = parse_completion_request(to_json(r).dump(), kLimits);
  EXPECT_EQ(to_json(again), to_json(r));
}

}  // namespace
}  // namespace px::serve
