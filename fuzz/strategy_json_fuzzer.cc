// Strategy JSON files (`parallax train --strategy`, `parallax plan --out`):
// read, validated, and written back out as a user's next file would be.
#include <nlohmann/json.hpp>

#include "fuzz/fuzz_input.h"
#include "parallel/compose.h"
#include "parallel/strategy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static px::fuzz::MemoryFile file;
  const std::string& path = file.hold(data, size);
  px::fuzz::expect_value_or_named_error([&] {
    const px::parallel::Strategy strategy = px::parallel::load_strategy(path);
    px::parallel::validate(strategy);
    px::parallel::to_json(strategy).dump();
  });
  return 0;
}
