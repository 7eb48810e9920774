#include "data/text_corpus.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"

namespace px {
namespace {

constexpr std::string_view kFortunesHint =
    "install the fortunes package (apt-get install fortunes) or pass --data FILE";

std::vector<uint8_t> read_whole_file(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open file '{}': {}", what, path, std::strerror(errno));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  if (in.bad()) fail("{}: cannot read file '{}': {}", what, path, std::strerror(errno));
  return bytes;
}

}  // namespace

std::vector<uint8_t> strip_fortune_separators(const std::vector<uint8_t>& text) {
  std::vector<uint8_t> out;
  out.reserve(text.size());
  bool first = true;
  size_t begin = 0;
  // Each piece of text.split("\n") is [begin, end); there is always one more
  // piece than there are newlines.
  for (;;) {
    auto newline = std::find(text.begin() + begin, text.end(), uint8_t{'\n'});
    size_t end = static_cast<size_t>(newline - text.begin());
    bool separator = end - begin == 1 && text[begin] == '%';
    if (!separator) {
      if (!first) out.push_back('\n');
      out.insert(out.end(), text.begin() + begin, text.begin() + end);
      first = false;
    }
    if (newline == text.end()) break;
    begin = end + 1;
  }
  return out;
}

std::vector<uint8_t> read_fortunes(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    fail("text corpus: fortunes directory '{}' does not exist: {}", dir, kFortunesHint);
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (name.ends_with(".dat") || name.ends_with(".u8")) continue;
    if (!fs::is_regular_file(entry.path(), ec)) continue;  // follows symlinks
    names.push_back(name);
  }
  if (ec) fail("text corpus: cannot list directory '{}': {}", dir, ec.message());
  if (names.empty())
    fail("text corpus: directory '{}' holds no fortune files: {}", dir, kFortunesHint);
  std::sort(names.begin(), names.end());
  std::vector<uint8_t> text;
  for (const std::string& name : names) {
    std::vector<uint8_t> part =
        strip_fortune_separators(read_whole_file((fs::path(dir) / name).string(), "text corpus"));
    text.insert(text.end(), part.begin(), part.end());
  }
  return text;
}

TextCorpus split_text_corpus(std::vector<uint8_t> text, std::string source, int64_t block_size) {
  if (block_size < 1) fail("text corpus: block size {} is invalid, expected >= 1", block_size);
  const int64_t n = static_cast<int64_t>(text.size());
  if (n == 0) fail("text corpus: '{}' is empty, expected text to train on", source);
  const int64_t n_val = n / 10;
  const int64_t n_train = n - n_val;
  const int64_t need = block_size + 1;
  if (n_val < need)
    fail(
        "text corpus: '{}' is too short: {} bytes give a validation split (last 10%) of {} bytes, "
        "expected at least block_size+1 = {} (so at least {} bytes of text)",
        source, n, n_val, need, need * 10);
  PX_CHECK_GE(n_train, need);  // n_train >= 9 * n_val
  TextCorpus corpus;
  corpus.source = std::move(source);
  corpus.val.assign(text.begin() + n_train, text.end());
  text.resize(static_cast<size_t>(n_train));
  corpus.train = std::move(text);
  return corpus;
}

TextCorpus load_text_corpus(const std::string& path, int64_t block_size) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec))
    fail("text corpus: file '{}' does not exist, expected a text file for --data", path);
  if (fs::is_directory(path, ec))
    fail("text corpus: '{}' is a directory, expected a text file for --data", path);
  return split_text_corpus(read_whole_file(path, "text corpus"), path, block_size);
}

TextCorpus load_fortunes_corpus(int64_t block_size, const std::string& dir) {
  return split_text_corpus(read_fortunes(dir), dir + " (fortunes)", block_size);
}

}  // namespace px
