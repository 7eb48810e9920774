// safetensors files (checkpoint shards, model.safetensors, imported
// weights): load_safetensors reads the whole file, SafetensorsReader its
// header and then one tensor at a time.
#include "fuzz/fuzz_input.h"
#include "runtime/state/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static px::fuzz::MemoryFile file;
  const std::string& path = file.hold(data, size);
  px::fuzz::expect_value_or_named_error([&] { px::load_safetensors(path); });
  px::fuzz::expect_value_or_named_error([&] {
    px::SafetensorsReader reader(path);
    for (const auto& entry : reader.entries()) reader.read(entry.name);
  });
  return 0;
}
