#include "runtime/checkpoint.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "comm/collectives.h"
#include "runtime/atomic_file.h"

namespace px {
namespace fs = std::filesystem;
namespace {

// Ends one phase of the save: every rank learns whether any rank failed in
// it. The failing rank throws its own message, the others one naming it.
void agree(comm::Communicator* group, const std::string& error, const std::string& dir, std::string_view phase) {
  const int rank = group ? group->rank() : 0;
  float failed = error.empty() ? 0.0f : static_cast<float>(rank + 1);
  if (group != nullptr) comm::allreduce(*group, std::span<float>(&failed, 1), comm::Reduction::max);
  if (!error.empty()) fail("checkpoint '{}' not saved: {}", dir, error);
  if (failed > 0)
    fail("checkpoint '{}' not saved: rank {} failed while {} (its own error says why)", dir,
         static_cast<int>(failed) - 1, phase);
}

// Runs `body`, turning any exception into its message (a rank must reach
// the next agree() whatever happens, or the others would wait for it).
template <typename Body>
std::string attempt(Body&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

// Every regular file under `dir`, by path relative to it, with its size.
nlohmann::json file_sizes(const std::string& dir) {
  nlohmann::json files = nlohmann::json::object();
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files[fs::relative(e.path(), dir).generic_string()] = e.file_size();
  return files;
}

}  // namespace

void save_checkpoint(const std::string& dir, comm::Communicator* group, const CheckpointPart& mine) {
  const int rank = group ? group->rank() : 0;
  const bool lead = rank == 0;
  // 1. The lead makes the staging directory, named by its pid.
  int64_t id = static_cast<int64_t>(::getpid());
  if (group != nullptr) comm::broadcast(*group, comm::Buffer(&id, 1, DType::i64), 0);
  std::optional<StagedDirectory> staged;
  std::string error;
  if (lead)
    error = attempt([&] {
      staged.emplace(dir, static_cast<long>(id));
      fs::create_directory(staged->path() + "/shards");
    });
  agree(group, error, dir, "creating the staging directory");

  // 2. Every rank writes its runs.
  const std::string staging = staging_directory(dir, static_cast<long>(id));
  if (!mine.shards.empty())
    error = attempt([&] {
      std::map<std::string, std::string> who = mine.who;
      who["rank"] = std::to_string(rank);
      save_shard_file(fmt::format("{}/shards/rank{}.safetensors", staging, rank), mine.shards, who);
    });
  agree(group, error, dir, "writing its shard file");

  // 3. The lead writes the gathered model and the state, and swaps the
  // directory in.
  if (lead)
    error = attempt([&] {
      PX_CHECK(mine.model != nullptr, "the lead rank saves the gathered model");
      std::map<std::string, std::string> metadata{{"format", "pt"}, {"parallax", mine.state.at("config").dump()}};
      save_safetensors(staging + "/model.safetensors", mine.model->named(), metadata);
      if (!mine.compression.empty()) save_safetensors(staging + "/compression.safetensors", mine.compression);
      nlohmann::json state = mine.state;
      state["files"] = file_sizes(staging);
      write_file_atomically(staging + "/state.json", state.dump(2) + "\n");
      staged->commit();
    });
  agree(group, error, dir, "committing the checkpoint");
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
  if (!fs::is_directory(dir))
    fail("checkpoint directory '{}' does not exist (expected a directory written by parallax train --save)", dir);
  Checkpoint c;
  c.dir = dir;
  c.state = read_state(dir + "/state.json");
  if (!c.state.contains("files") || !c.state["files"].is_object())
    fail("checkpoint '{}': state.json lists no files (written by a parallax before sharded checkpoints?); "
         "its model.safetensors still loads for eval and sample",
         dir);
  std::vector<std::string> shard_files;
  for (const auto& [name, bytes] : c.state["files"].items()) {
    const std::string path = dir + "/" + name;
    std::error_code ec;
    const uintmax_t size = fs::file_size(path, ec);
    if (ec) fail("checkpoint '{}': '{}' is missing ({}); the checkpoint is incomplete", dir, name, ec.message());
    if (size != bytes.get<uintmax_t>())
      fail("checkpoint '{}': '{}' has {} bytes, state.json records {}: the file is truncated or was replaced", dir,
           name, size, bytes.get<uintmax_t>());
    if (name.rfind("shards/", 0) == 0) shard_files.push_back(path);
  }
  c.shards = ShardedTensors(shard_files, dir);
  if (c.state["files"].contains("compression.safetensors"))
    c.compression = load_safetensors(dir + "/compression.safetensors");
  return c;
}

SafetensorsFile load_model_weights(const std::string& path) {
  if (fs::is_directory(path)) return load_safetensors(path + "/model.safetensors");
  return load_safetensors(path);
}

}  // namespace px
