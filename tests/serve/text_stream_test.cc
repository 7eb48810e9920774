#include <gtest/gtest.h>

#include <random>
#include <string>

#include "serve/text_stream.h"

namespace px::serve {
namespace {

// Pushes every byte; returns the chunks joined, and checks each is valid UTF-8.
std::string streamed(TextStream& stream, const std::string& bytes, std::vector<std::string>* chunks = nullptr) {
  std::string text;
  for (char b : bytes) {
    if (stream.stopped()) break;
    const std::string chunk = stream.push(b);
    EXPECT_TRUE(is_valid_utf8(chunk)) << chunk;
    if (chunks && !chunk.empty()) chunks->push_back(chunk);
    text += chunk;
  }
  const std::string rest = stream.finish();
  EXPECT_TRUE(is_valid_utf8(rest));
  if (chunks && !rest.empty()) chunks->push_back(rest);
  return text + rest;
}

TEST(Utf8, InvalidBytesBecomeReplacementCharacters) {
  EXPECT_EQ(to_utf8("abc", true), "abc");
  EXPECT_EQ(to_utf8("\xC3\xA9", true), "\xC3\xA9");                          // é
  EXPECT_EQ(to_utf8("a\xFF" "b", true), "a\xEF\xBF\xBD" "b");                // a byte never in UTF-8
  EXPECT_EQ(to_utf8("\xC0\xAF", true), "\xEF\xBF\xBD\xEF\xBF\xBD");          // overlong: two subparts
  EXPECT_EQ(to_utf8("\xED\xA0\x80", true), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
  EXPECT_EQ(to_utf8("\xE2\x82" "x", true), "\xEF\xBF\xBD" "x");              // truncated: one subpart
  size_t used = 0;
  EXPECT_EQ(to_utf8("a\xF0\x9F\x98", false, &used), "a");  // an emoji's first three bytes wait
  EXPECT_EQ(used, 1u);
  EXPECT_EQ(to_utf8("a\xF0\x9F\x98", true), "a\xEF\xBF\xBD");
  EXPECT_TRUE(is_valid_utf8("\xF0\x9F\x98\x80"));
  EXPECT_FALSE(is_valid_utf8("\xF0\x9F\x98"));
}

TEST(TextStream, NeverSplitsACharacterAndJoinsToTheWholeText) {
  const std::string text = "h\xC3\xA9llo \xF0\x9F\x98\x80 w\xE2\x82\xACrld";
  TextStream stream;
  std::vector<std::string> chunks;
  EXPECT_EQ(streamed(stream, text, &chunks), text);
  EXPECT_GT(chunks.size(), 5u);
  EXPECT_EQ(stream.bytes(), text);
}

TEST(TextStream, EndsAtAStopSequenceAndLeavesItOut) {
  TextStream stream({"\n\n", "END"});
  EXPECT_EQ(streamed(stream, "one\ntwo\n\nthree"), "one\ntwo");
  EXPECT_TRUE(stream.stopped());
  EXPECT_EQ(stream.bytes(), "one\ntwo");
  TextStream other({"END"});
  EXPECT_EQ(streamed(other, "xxENxEND yy"), "xxENx");
}

TEST(TextStream, HoldsBackATailThatMayBecomeAStop) {
  TextStream stream({"abc"});
  EXPECT_EQ(stream.push('x'), "x");
  EXPECT_EQ(stream.push('a'), "");
  EXPECT_EQ(stream.push('b'), "");
  EXPECT_EQ(stream.push('x'), "abx");  // not the stop after all
  EXPECT_EQ(stream.push('a'), "");
  EXPECT_EQ(stream.finish(), "a");    // generation ended: the tail is text
  EXPECT_FALSE(stream.stopped());
}

TEST(TextStream, AnyBytesGiveValidTextEqualToTheWholeConversion) {
  std::mt19937 rng(5);
  for (int round = 0; round < 300; ++round) {
    std::string bytes(static_cast<size_t>(rng() % 40), '\0');
    for (char& b : bytes) b = static_cast<char>(rng() % 4 == 0 ? rng() % 256 : 0x80 + rng() % 0x40);
    TextStream stream;
    EXPECT_EQ(streamed(stream, bytes), to_utf8(bytes, true)) << round;
  }
}

}  // namespace
}  // namespace px::serve
