// A byte-level text corpus for language models: vocabulary 256, token = byte.
// The default text is the Debian `fortunes` package; a user can pass any file.
// The split is fixed (not seeded): the last 10% of the bytes validate, the
// first 90% train, so every run and every system sees the same split.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace px {

inline constexpr std::string_view kFortunesDefaultDir = "/usr/share/games/fortunes";
inline constexpr int kByteVocabSize = 256;

struct TextCorpus {
  std::string source;          // where the text came from, for messages and logs
  std::vector<uint8_t> train;  // bytes [0, n - n / 10) of the text
  std::vector<uint8_t> val;    // bytes [n - n / 10, n): the last floor(n / 10) bytes
};

// Splits `text` (n bytes) into train = first n - floor(n/10) bytes and
// val = last floor(n/10) bytes. Both must hold at least block_size + 1 bytes
// (one window of inputs plus the shifted target), else px::Error naming
// `source`, the sizes and the minimum.
TextCorpus split_text_corpus(std::vector<uint8_t> text, std::string source, int64_t block_size);

// The user's own text file, as raw bytes (no decoding, no stripping).
TextCorpus load_text_corpus(const std::string& path, int64_t block_size);

// The fortunes text: see read_fortunes.
TextCorpus load_fortunes_corpus(int64_t block_size,
                                const std::string& dir = std::string(kFortunesDefaultDir));

// Concatenation, in sorted (byte-wise) filename order, of every regular file
// in `dir` (symlinks followed; subdirectories such as off/ skipped) whose name
// does not end in ".dat" (strfile indexes) or ".u8" (UTF-8 duplicates), each
// with its '%' separator lines removed by strip_fortune_separators.
std::vector<uint8_t> read_fortunes(const std::string& dir = std::string(kFortunesDefaultDir));

// Removes the lines that are exactly "%", as the Python expression
//   b"\n".join(line for line in text.split(b"\n") if line != b"%")
// does: "a\n%\nb\n%\n" -> "a\nb\n".
std::vector<uint8_t> strip_fortune_separators(const std::vector<uint8_t>& text);

}  // namespace px
