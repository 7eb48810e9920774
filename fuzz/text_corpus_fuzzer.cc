// Text corpora (`--data FILE`, the fortune files): the first byte picks a
// block size, the rest is the file; read, split into train and validation,
// and stripped of fortune separators.
#include "data/text_corpus.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static px::fuzz::MemoryFile file;
  const int64_t block = static_cast<int64_t>(data[0]) - 1;  // -1 .. 254: the invalid 0 and -1 included
  const std::string& path = file.hold(data + 1, size - 1);
  px::fuzz::expect_value_or_named_error([&] { px::load_text_corpus(path, block); });
  px::strip_fortune_separators(std::vector<uint8_t>(data + 1, data + size));
  return 0;
}
