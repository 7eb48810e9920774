#include "data/text_corpus.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "testing/scratch_dir.h"

namespace px {
namespace {

using testing::ScratchDir;

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected px::Error";
  return "";
}

TEST(TextCorpus, SplitsLastTenPercentForValidation) {
  std::vector<uint8_t> all(1009);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint8_t>(i);
  TextCorpus c = split_text_corpus(all, "mem", 64);
  EXPECT_EQ(c.val.size(), 100u);  // floor(1009 / 10)
  EXPECT_EQ(c.train.size(), 909u);
  std::vector<uint8_t> joined = c.train;
  joined.insert(joined.end(), c.val.begin(), c.val.end());
  EXPECT_EQ(joined, all);
  EXPECT_EQ(c.source, "mem");
}

TEST(TextCorpus, TooShortForEitherSplitIsNamed) {
  // 1000 bytes: val = 100 bytes; block 100 needs 101.
  std::string message =
      error_of([] { split_text_corpus(std::vector<uint8_t>(1000), "tiny.txt", 100); });
  EXPECT_NE(message.find("'tiny.txt' is too short"), std::string::npos) << message;
  EXPECT_NE(message.find("at least block_size+1 = 101"), std::string::npos) << message;
  EXPECT_NO_THROW(split_text_corpus(std::vector<uint8_t>(1010), "ok", 100));
  message = error_of([] { split_text_corpus({}, "empty.txt", 8); });
  EXPECT_NE(message.find("'empty.txt' is empty"), std::string::npos) << message;
}

TEST(TextCorpus, LoadsUserFileAndNamesBadPaths) {
  ScratchDir dir;
  std::string path = dir.write("mine.txt", std::string(180, 'a') + std::string(20, 'b'));
  TextCorpus c = load_text_corpus(path, 8);
  EXPECT_EQ(text(c.val), std::string(20, 'b'));
  EXPECT_EQ(c.train.size(), 180u);

  std::string message = error_of([&] { load_text_corpus(dir.file("nope.txt"), 8); });
  EXPECT_NE(message.find(dir.file("nope.txt")), std::string::npos) << message;
  EXPECT_NE(message.find("does not exist"), std::string::npos) << message;
  message = error_of([&] { load_text_corpus(dir.path(), 8); });
  EXPECT_NE(message.find("is a directory"), std::string::npos) << message;
  std::string empty = dir.write("empty.txt", std::string());
  message = error_of([&] { load_text_corpus(empty, 8); });
  EXPECT_NE(message.find(empty), std::string::npos) << message;
  EXPECT_NE(message.find("is empty"), std::string::npos) << message;
  std::string short_file = dir.write("short.txt", std::string(50, 'x'));
  message = error_of([&] { load_text_corpus(short_file, 8); });
  EXPECT_NE(message.find(short_file), std::string::npos) << message;
  EXPECT_NE(message.find("too short"), std::string::npos) << message;
}

TEST(TextCorpus, StripsFortuneSeparatorLinesLikeThePythonFormula) {
  EXPECT_EQ(text(strip_fortune_separators(bytes("a\n%\nb\n%\n"))), "a\nb\n");
  EXPECT_EQ(text(strip_fortune_separators(bytes("%\nx\n"))), "x\n");
  EXPECT_EQ(text(strip_fortune_separators(bytes("a\n%"))), "a");
  EXPECT_EQ(text(strip_fortune_separators(bytes("50%\n%%\n %\n"))), "50%\n%%\n %\n");
  EXPECT_EQ(text(strip_fortune_separators(bytes(""))), "");
  EXPECT_EQ(text(strip_fortune_separators(bytes("\n\n"))), "\n\n");
}

TEST(TextCorpus, ReadsFortuneFilesInSortedOrderSkippingIndexesAndSubdirectories) {
  ScratchDir dir;
  dir.write("b", "second\n%\n");
  dir.write("a", "first\n%\nmore\n%\n");
  dir.write("a.dat", "INDEX");
  dir.write("c.u8", "duplicate");
  std::filesystem::create_directory(dir.file("off"));
  dir.write("off/z", "offensive\n");
  EXPECT_EQ(text(read_fortunes(dir.path())), "first\nmore\nsecond\n");

  std::string message = error_of([&] { read_fortunes(dir.file("off/none")); });
  EXPECT_NE(message.find("fortunes"), std::string::npos) << message;
  EXPECT_NE(message.find("--data"), std::string::npos) << message;
}

TEST(TextCorpus, LoadsTheInstalledFortunes) {
  if (!std::filesystem::is_directory(std::string(kFortunesDefaultDir)))
    GTEST_SKIP() << "the fortunes package is not installed";
  std::vector<uint8_t> all = read_fortunes();
  EXPECT_GT(all.size(), 100000u);
  EXPECT_EQ(text(all).find("\n%\n"), std::string::npos);
  TextCorpus c = load_fortunes_corpus(256);
  EXPECT_EQ(c.val.size(), all.size() / 10);
  EXPECT_EQ(c.train.size() + c.val.size(), all.size());
}

}  // namespace
}  // namespace px
