#include "runtime/checkpoint.h"

#include <filesystem>
#include <fstream>

#include "runtime/atomic_file.h"

namespace px {

void save_checkpoint(const std::string& dir, const ParamStore& params, const NamedTensors& optimizer_state,
                     const nlohmann::json& state, const NamedTensors& compression_state) {
  std::map<std::string, std::string> metadata{{"format", "pt"}, {"parallax", state.at("config").dump()}};
  write_directory_atomically(dir, [&](const std::string& staging) {
    save_safetensors(staging + "/model.safetensors", params.named(), metadata);
    save_safetensors(staging + "/optimizer.safetensors", optimizer_state);
    if (!compression_state.empty()) save_safetensors(staging + "/compression.safetensors", compression_state);
    write_file_atomically(staging + "/state.json", state.dump(2) + "\n");
  });
}

static nlohmann::json read_state(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("checkpoint state '{}' cannot be opened: expected a directory written by parallax train --save", path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint state '{}' is not valid JSON: {}", path, e.what());
  }
}

Checkpoint load_checkpoint(const std::string& dir) {
  if (!std::filesystem::is_directory(dir))
    fail("checkpoint directory '{}' does not exist (expected a directory written by parallax train --save)", dir);
  Checkpoint c;
  c.state = read_state(dir + "/state.json");
  c.model = load_safetensors(dir + "/model.safetensors");
  c.optimizer = load_safetensors(dir + "/optimizer.safetensors");
  if (std::filesystem::exists(dir + "/compression.safetensors"))
    c.compression = load_safetensors(dir + "/compression.safetensors");
  return c;
}

SafetensorsFile load_model_weights(const std::string& path) {
  if (std::filesystem::is_directory(path)) return load_safetensors(path + "/model.safetensors");
  return load_safetensors(path);
}

}  // namespace px
