// The engine's greedy choices against the full-recompute forward's greedy
// continuation (tests/testing/gpt_reference.h): alone, among many
// concurrent requests of other prompts and lengths, and when the KV pool
// is so small that sequences are preempted and recomputed.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "serve/engine.h"
#include "testing/gpt_reference.h"

namespace px::serve {
namespace {

const nn::GptConfig kEngineConfig{.vocab = 256, .block = 40, .n_layer = 2, .n_head = 2, .n_embd = 16};

CompletionRequest greedy(const std::string& prompt, int64_t max_tokens) {
  return {.prompts = {prompt}, .max_tokens = max_tokens, .temperature = 0};
}

// Steps the engine until every stream has finished; returns each stream's text.
std::vector<std::string> drain(Engine& engine, const std::vector<std::shared_ptr<RequestStream>>& streams) {
  std::vector<std::string> texts(streams.size());
  std::vector<std::string> reasons(streams.size());
  for (int guard = 0; guard < 10000; ++guard) {
    engine.step();
    bool all = true;
    for (size_t i = 0; i < streams.size(); ++i) {
      for (const ChoiceEvent& e : streams[i]->take(std::chrono::milliseconds(0))) {
        texts[i] += e.text;
        if (!e.finish_reason.empty()) reasons[i] = e.finish_reason;
      }
      all = all && streams[i]->finished();
    }
    if (all) break;
  }
  for (size_t i = 0; i < streams.size(); ++i) {
    EXPECT_TRUE(streams[i]->finished()) << i;
    EXPECT_EQ(reasons[i], "length") << i;
  }
  return texts;
}

// A byte string as text the way the stream returns it (these prompts and
// continuations are compared as bytes through the same conversion).
std::string as_text(const std::string& bytes) { return to_utf8(bytes, true); }

TEST(Engine, AGreedyChoiceIsTheFullForwardsContinuation) {
  const ParamStore params = testing::scaled_gpt_weights(kEngineConfig, 1);
  Engine engine(kEngineConfig, params, {.cache = {.blocks = 16, .block_tokens = 4}});
  const auto stream = engine.submit(greedy("hello there", 20));
  EXPECT_EQ(drain(engine, {stream}).front(), as_text(testing::greedy_continuation(kEngineConfig, params, "hello there", 20)));
  EXPECT_EQ(stream->usage().prompt_tokens, 11);
  EXPECT_EQ(stream->usage().completion_tokens, 20);
  EXPECT_EQ(engine.metrics().kv_blocks_used, 0);
}

TEST(Engine, ConcurrentRequestsEachEqualTheirOwnContinuation) {
  const ParamStore params = testing::scaled_gpt_weights(kEngineConfig, 2);
  Engine engine(kEngineConfig, params, {.scheduler = {.max_batch_tokens = 24}, .cache = {.blocks = 64, .block_tokens = 4}});
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<std::string> expected;
  for (int i = 0; i < 12; ++i) {
    const std::string prompt = std::string("prompt ") + std::string(static_cast<size_t>(1 + i * 2), static_cast<char>('a' + i));
    const int64_t tokens = std::min<int64_t>(3 + (i * 7) % 15, kEngineConfig.block - static_cast<int64_t>(prompt.size()));
    streams.push_back(engine.submit(greedy(prompt, tokens)));
    expected.push_back(as_text(testing::greedy_continuation(kEngineConfig, params, prompt, tokens)));
    if (i % 3 == 2) engine.step();  // arrivals while others run
  }
  EXPECT_EQ(drain(engine, streams), expected);
  EXPECT_GT(engine.metrics().iterations, 0u);
}

TEST(Engine, PreemptedAndRecomputedChoicesStillEqualTheirContinuation) {
  const ParamStore params = testing::scaled_gpt_weights(kEngineConfig, 3);
  // 12 blocks of 4: one context (10 blocks) and little more, for 6 requests.
  Engine engine(kEngineConfig, params, {.cache = {.blocks = 12, .block_tokens = 4}});
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<std::string> expected;
  for (int i = 0; i < 6; ++i) {
    const std::string prompt = "p" + std::to_string(i * 37);
    streams.push_back(engine.submit(greedy(prompt, 24)));
    expected.push_back(as_text(testing::greedy_continuation(kEngineConfig, params, prompt, 24)));
  }
  EXPECT_EQ(drain(engine, streams), expected);
  EXPECT_GT(engine.metrics().preemptions, 0u);
  EXPECT_EQ(engine.metrics().kv_blocks_used, 0);
}

TEST(Engine, ACancelledRequestFreesItsBlocks) {
  const ParamStore params = testing::scaled_gpt_weights(kEngineConfig, 4);
  Engine engine(kEngineConfig, params, {.cache = {.blocks = 16, .block_tokens = 4}});
  const auto stream = engine.submit(greedy("cancel me", 25));
  engine.step();
  engine.step();
  EXPECT_GT(engine.metrics().kv_blocks_used, 0);
  stream->cancel();
  engine.step();
  EXPECT_EQ(engine.metrics().kv_blocks_used, 0);
  EXPECT_EQ(engine.metrics().cancelled, 1u);
  EXPECT_TRUE(stream->finished());
}

TEST(Engine, AFullQueueIsRefusedByName) {
  const ParamStore params = testing::scaled_gpt_weights(kEngineConfig, 5);
  Engine engine(kEngineConfig, params, {.cache = {.blocks = 16, .block_tokens = 4}, .max_waiting = 2});
  engine.submit(greedy("a", 2));
  engine.submit(greedy("b", 2));
  EXPECT_THROW(engine.submit(greedy("c", 2)), QueueFull);
  EXPECT_EQ(engine.metrics().rejected, 1u);
}

TEST(Engine, APoolThatCannotHoldOneContextIsRefused) {
  const ParamStore params = testing::scaled_gpt_weights(kEngineConfig, 6);
  try {
    Engine engine(kEngineConfig, params, {.cache = {.blocks = 9, .block_tokens = 4}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the KV cache holds 36 tokens"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("context of 40 needs 10 blocks"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace px::serve
