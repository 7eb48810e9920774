// Cluster spec JSON files (`--cluster FILE`, the calibrated `local` spec):
// read, validated, and written back out.
#include <nlohmann/json.hpp>

#include "fuzz/fuzz_input.h"
#include "plan/cluster.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static px::fuzz::MemoryFile file;
  const std::string& path = file.hold(data, size);
  px::fuzz::expect_value_or_named_error([&] {
    const px::plan::ClusterSpec cluster = px::plan::load_cluster(path);
    px::plan::validate(cluster);
    px::plan::to_json(cluster).dump();
  });
  return 0;
}
