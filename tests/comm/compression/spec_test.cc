// Spec::parse / to_string: every method, round trips, and one clear error per
// kind of bad text.
#include <gtest/gtest.h>

#include "comm/compression/spec.h"
#include "core/error.h"

namespace px::comm::compression {
namespace {

TEST(CompressionSpec, ParsesEveryMethodAndRoundTrips) {
  struct Row {
    std::string text;
    Spec spec;
  };
  const std::vector<Row> rows = {
      {"none", {.method = Method::none}},
      {"fp16", {.method = Method::fp16}},
      {"bf16", {.method = Method::bf16}},
      {"int8", {.method = Method::int8}},
      {"sign", {.method = Method::sign}},
      {"topk:0.01", {.method = Method::topk, .topk_fraction = 0.01}},
      {"topk:1", {.method = Method::topk, .topk_fraction = 1.0}},
      {"threshold:0.001", {.method = Method::threshold, .threshold = 1e-3f}},
      {"threshold:2.5e-05", {.method = Method::threshold, .threshold = 2.5e-5f}},
      {"powersgd:2", {.method = Method::powersgd, .rank = 2}},
      {"powersgd:4,ef=off", {.method = Method::powersgd, .rank = 4, .error_feedback = false}},
      {"sign,ef=off", {.method = Method::sign, .error_feedback = false}},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.text);
    const Spec parsed = Spec::parse(row.text);
    EXPECT_EQ(parsed, row.spec);
    EXPECT_EQ(Spec::parse(parsed.to_string()), parsed);
  }
  EXPECT_EQ(Spec::parse("threshold:1e-3").to_string(), "threshold:0.001");
  EXPECT_EQ(Spec::parse("topk:0.01,ef=on"), Spec::parse("topk:0.01"));
}

TEST(CompressionSpec, BadTextNamesTheValueAndWhatWasExpected) {
  struct Row {
    std::string text, must_mention;
  };
  const std::vector<Row> rows = {
      {"", "unknown method ''"},
      {"zip", "unknown method 'zip'"},
      {"topk", "top-k fraction ''"},
      {"topk:abc", "top-k fraction 'abc' is not a number in (0, 1]"},
      {"topk:0", "top-k fraction '0'"},
      {"topk:1.5", "top-k fraction '1.5'"},
      {"topk:0.01x", "top-k fraction '0.01x'"},
      {"threshold:-1", "threshold '-1' is not a finite number > 0"},
      {"threshold:inf", "threshold 'inf'"},
      {"powersgd:0", "PowerSGD rank '0' is not an integer >= 1"},
      {"powersgd:2.5", "PowerSGD rank '2.5'"},
      {"fp16:3", "fp16 takes no parameter"},
      {"topk:0.01,ef=maybe", "unknown option 'ef=maybe'"},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.text);
    try {
      Spec::parse(row.text);
      ADD_FAILURE() << "parsed without an error";
    } catch (const Error& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find(row.must_mention), std::string::npos) << message;
      EXPECT_NE(message.find("'" + row.text + "'"), std::string::npos) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  }
}

}  // namespace
}  // namespace px::comm::compression
