#include "runtime/state/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "testing/scratch_dir.h"

namespace px {
namespace {

using testing::read_file;
using testing::ScratchDir;
using testing::write_file;

// A tensor of `shape` and `dtype` whose byte i is (i * 37 + seed) % 256.
Tensor patterned(const Shape& shape, DType dtype, int seed) {
  Tensor t = Tensor::empty(shape, dtype);
  auto* bytes = static_cast<uint8_t*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<uint8_t>((i * 37 + seed) % 256);
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
}

// A file: little-endian length of `header`, `header`, then `data`.
std::string raw_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(uint64_t{header.size()} >> (8 * i));
  return out + header + data;
}

// Expects load_safetensors(path) to throw a one-line px::Error naming path
// and containing `part`.
void expect_load_error(const std::string& path, const std::string& part) {
  try {
    load_safetensors(path);
    ADD_FAILURE() << "expected px::Error containing '" << part << "'";
  } catch (const Error& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("'" + path + "'"), std::string::npos) << message;
    EXPECT_NE(message.find(part), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(Safetensors, RoundTripsEveryDtypeAndShapeInOrder) {
  ScratchDir dir;
  NamedTensors tensors = {
      {"z.weight", patterned({2, 3}, DType::f32, 1)},
      {"half", patterned({4}, DType::f16, 2)},
      {"brain", patterned({2, 2, 1}, DType::bf16, 3)},
      {"ids", patterned({5}, DType::i32, 4)},
      {"long", patterned({3, 1}, DType::i64, 5)},
      {"mask", patterned({7}, DType::u8, 6)},
      {"empty", patterned({0, 3}, DType::f32, 7)},
      {"empty_i64", patterned({2, 0}, DType::i64, 7)},
      {"scalar", patterned({}, DType::f32, 8)},
  };
  const std::string path = dir.file("model.safetensors");
  save_safetensors(path, tensors);
  SafetensorsFile file = load_safetensors(path);
  EXPECT_EQ(file.path, path);
  EXPECT_TRUE(file.metadata.empty());
  ASSERT_EQ(file.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(file.tensors[i].first, tensors[i].first);
    EXPECT_TRUE(same_bytes(file.tensors[i].second, tensors[i].second)) << tensors[i].first;
  }
  EXPECT_TRUE(file.contains("ids"));
  EXPECT_TRUE(same_bytes(file.at("long"), tensors[4].second));
  try {
    file.at("missing");
    ADD_FAILURE() << "expected px::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'missing'"), std::string::npos) << e.what();
  }
}

TEST(Safetensors, RoundTripsMetadata) {
  ScratchDir dir;
  std::map<std::string, std::string> metadata = {
      {"format", "pt"},
      {"sampler", R"({"epoch":3,"rng_state":[1,18446744073709551615]})"},
      {"note", "quotes \" backslash \\ newline \n unicode é"},
      {"empty", ""}};
  save_safetensors(dir.file("m.safetensors"), {{"w", patterned({3}, DType::f32, 0)}}, metadata);
  EXPECT_EQ(load_safetensors(dir.file("m.safetensors")).metadata, metadata);
  save_safetensors(dir.file("only_metadata.safetensors"), {}, metadata);
  SafetensorsFile file = load_safetensors(dir.file("only_metadata.safetensors"));
  EXPECT_TRUE(file.tensors.empty());
  EXPECT_EQ(file.metadata, metadata);
}

TEST(Safetensors, MatchesHandComputedByteLayout) {
  ScratchDir dir;
  const std::string path = dir.file("layout.safetensors");
  save_safetensors(path,
                   {{"a", Tensor::from_vector({2}, std::vector<float>{1.0f, -2.0f})},
                    {"b", Tensor::from_vector({3}, std::vector<int32_t>{1, 2, 3})}},
                   {{"format", "pt"}});
  // 139 bytes of JSON, padded with 5 spaces to 144 = 18 * 8.
  const std::string json = R"({"__metadata__":{"format":"pt"},)"
                           R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"I32","shape":[3],"data_offsets":[8,20]}})";
  ASSERT_EQ(json.size(), 139u);
  std::string expected("\x90\0\0\0\0\0\0\0", 8);  // 144, little-endian
  expected += json + std::string(5, ' ');
  expected += std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8);  // 1.0f, -2.0f
  expected += std::string("\x01\0\0\0\x02\0\0\0\x03\0\0\0", 12);
  EXPECT_EQ(read_file(path), expected);
}

TEST(Safetensors, EqualInputsGiveIdenticalBytes) {
  ScratchDir dir;
  NamedTensors tensors = {{"b", patterned({5, 5}, DType::f32, 1)},
                          {"a", patterned({3}, DType::u8, 2)}};
  save_safetensors(dir.file("1"), tensors, {{"k", "v"}, {"a", "b"}});
  save_safetensors(dir.file("2"), tensors, {{"a", "b"}, {"k", "v"}});
  EXPECT_EQ(read_file(dir.file("1")), read_file(dir.file("2")));
  EXPECT_EQ(read_file(dir.file("1")).size() % 8, (25 * 4 + 3) % 8);  // header padded to 8
}

TEST(Safetensors, RejectsBadTensorsOnSave) {
  ScratchDir dir;
  const std::string path = dir.file("bad.safetensors");
  Tensor t = Tensor::zeros({2});
  EXPECT_THROW(save_safetensors(path, {{"a", t}, {"a", t}}), Error);
  EXPECT_THROW(save_safetensors(path, {{"__metadata__", t}}), Error);
  EXPECT_THROW(save_safetensors(path, {{"", t}}), Error);
  EXPECT_THROW(save_safetensors(path, {{"a", Tensor()}}), Error);
  EXPECT_FALSE(std::filesystem::exists(path));
}

const std::string kGoodEntry = R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
const std::string kEightBytes(8, '\x01');

TEST(SafetensorsCorruption, EachProblemIsAnErrorNamingTheFile) {
  ScratchDir dir;
  struct Case {
    std::string name;
    std::string bytes;
    std::string expected_part;
  };
  std::string header_too_long = raw_file("{" + kGoodEntry + "}", kEightBytes);
  header_too_long[0] = static_cast<char>(200);
  std::string truncated_data = raw_file("{" + kGoodEntry + "}", kEightBytes);
  truncated_data.resize(truncated_data.size() - 3);
  const std::vector<Case> cases = {
      {"tiny", std::string("\x05\0\0", 3), "truncated: 3 bytes"},
      {"header_too_long", header_too_long, "header length 200 exceeds"},
      {"malformed_json", raw_file(R"({"w":{"dtype":)", ""), "malformed JSON header"},
      {"not_object", raw_file("[1,2]", ""), "expected a JSON object"},
      {"unknown_dtype",
       raw_file(R"({"w":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", kEightBytes),
       "unknown dtype 'Q7'"},
      {"unsupported_dtype",
       raw_file(R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", kEightBytes),
       "unsupported dtype 'F64'"},
      {"size_mismatch",
       raw_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", kEightBytes),
       "needs 12 bytes"},
      {"negative_dim",
       raw_file(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", kEightBytes),
       "non-negative integer dims"},
      {"missing_field", raw_file(R"({"w":{"dtype":"F32","shape":[2]}})", kEightBytes),
       "expected an object with dtype, shape and data_offsets"},
      {"bad_offsets",
       raw_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", kEightBytes),
       "expected [begin, end]"},
      {"reversed_offsets",
       raw_file(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[8,0]}})", kEightBytes),
       "end before begin"},
      {"overlap",
       raw_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                R"("v":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                kEightBytes),
       "overlap"},
      {"gap", raw_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", kEightBytes),
       "a gap of 4 bytes"},
      {"out_of_range",
       raw_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", kEightBytes),
       "run past the 8 bytes of data"},
      {"truncated_data", truncated_data, "truncated"},
      {"trailing_data", raw_file("{" + kGoodEntry + "}", kEightBytes + "xyz"),
       "3 bytes of data after"},
      {"bad_metadata", raw_file(R"({"__metadata__":{"epoch":3}})", ""), "expected a string"},
      {"huge_dims",
       raw_file(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                kEightBytes),
       "more than 2^64"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = dir.file(c.name + ".safetensors");
    write_file(path, c.bytes);
    expect_load_error(path, c.expected_part);
  }
  expect_load_error(dir.file("absent.safetensors"), "cannot open");
}

TEST(SafetensorsCorruption, GoodHandWrittenFileLoads) {
  // The corruption cases above are variations of this valid file.
  ScratchDir dir;
  write_file(dir.file("ok"), raw_file("{" + kGoodEntry + "}   ", kEightBytes));
  SafetensorsFile file = load_safetensors(dir.file("ok"));
  ASSERT_EQ(file.tensors.size(), 1u);
  EXPECT_EQ(file.at("w").shape(), (Shape{2}));
}

TEST(Safetensors, FailedSaveKeepsThePreviousFile) {
  ScratchDir dir;
  const std::string path = dir.file("model.safetensors");
  save_safetensors(path, {{"w", Tensor::full({2}, 1.5f)}});
  EXPECT_THROW(
      save_safetensors(path, {{"w", Tensor::full({2}, 9.0f)}, {"w", Tensor::full({2}, 9.0f)}}),
      Error);
  EXPECT_EQ(load_safetensors(path).at("w").to_vector(), (std::vector<float>{1.5f, 1.5f}));
}

}  // namespace
}  // namespace px
