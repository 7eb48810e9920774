#include "runtime/checkpoint/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "comm/collectives.h"
#include "core/atomic_file.h"

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
std::map<std::string, uint64_t> file_sizes(const std::string& dir) {
  std::map<std::string, uint64_t> files;
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files[fs::relative(e.path(), dir).generic_string()] = e.file_size();
  return files;
}

}  // namespace

std::string kept_checkpoint_path(const std::string& dir, int64_t step) {
  std::string base = dir;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  return fmt::format("{}.step-{:06d}", base, step);
}

namespace {

// The step of the checkpoint in `dir`, or -1 when there is none readable.
int64_t step_of(const std::string& dir) {
  std::ifstream in(dir + "/state.json");
  if (!in) return -1;
  try {
    return CheckpointState::from_json(nlohmann::json::parse(in), dir, false).step;
  } catch (const std::exception&) {  // not JSON, or not a checkpoint's state
    return -1;
  }
}

// Deletes all but the newest `keep` checkpoints kept beside `dir`.
void prune_kept(const std::string& dir, int keep) {
  const fs::path target = fs::path(kept_checkpoint_path(dir, 0));
  const std::string prefix = target.filename().string().substr(0, target.filename().string().size() - 6);
  std::vector<std::pair<std::string, fs::path>> kept;  // zero-padded steps sort as text
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(target.parent_path().empty() ? "." : target.parent_path(), ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0 &&
        name.find(".tmp.") == std::string::npos)
      kept.emplace_back(name.substr(prefix.size()), e.path());
  }
  std::sort(kept.begin(), kept.end());
  for (size_t i = 0; i + static_cast<size_t>(keep) < kept.size(); ++i) fs::remove_all(kept[i].second, ec);
}

std::string marker_path(const std::string& staging, int rank) { return fmt::format("{}/written/rank{}", staging, rank); }

}  // namespace

CheckpointWriter::CheckpointWriter(std::string dir, comm::Communicator* group, int keep_last)
    : dir_(std::move(dir)), group_(group), keep_last_(keep_last) {
  if (keep_last < 1) fail("--keep-last {}: keep at least the latest checkpoint (1)", keep_last);
}

CheckpointWriter::~CheckpointWriter() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void CheckpointWriter::save(CheckpointPart part) {
  finish();
  const int rank = group_ ? group_->rank() : 0;
  // The lead stages the directory, named by its pid (agreed by all).
  int64_t id = static_cast<int64_t>(::getpid());
  if (group_ != nullptr) comm::broadcast(*group_, comm::Buffer(&id, 1, DType::i64), 0);
  std::string error;
  if (rank == 0)
    error = attempt([&] {
      staged_ = std::make_unique<StagedDirectory>(dir_, static_cast<long>(id));
      fs::create_directory(staged_->path() + "/shards");
      fs::create_directory(staged_->path() + "/written");
    });
  agree(group_, error, dir_, "creating the staging directory");
  error_.clear();
  stop_ = false;
  thread_ = std::thread(&CheckpointWriter::write, this, std::move(part), staging_directory(dir_, static_cast<long>(id)));
}

void CheckpointWriter::write(CheckpointPart part, const std::string& staging) {
  const int rank = group_ ? group_->rank() : 0, world = group_ ? group_->size() : 1;
  // 1. Every rank: its runs, then its mark (with its error, if any).
  error_ = attempt([&] {
    if (part.shards.empty()) return;
    std::map<std::string, std::string> who = part.who;
    who["rank"] = std::to_string(rank);
    save_shard_file(fmt::format("{}/shards/rank{}.safetensors", staging, rank), part.shards, who);
  });
  const std::string marked = attempt([&] { write_file_atomically(marker_path(staging, rank), error_); });
  if (error_.empty()) error_ = marked;
  if (rank != 0) return;
  // 2. The lead: the model, then every rank's mark. Only once all are in
  // may a failure remove the staging directory: another rank may still be
  // writing into it, and would report the vanished directory instead of
  // the failure that caused it.
  if (error_.empty())
    error_ = attempt([&] {
      std::map<std::string, std::string> metadata{{"format", "pt"}, {"parallax", part.state.config.dump()}};
      save_safetensors(staging + "/model.safetensors", part.model, metadata);
      if (!part.compression.empty()) save_safetensors(staging + "/compression.safetensors", part.compression);
    });
  const std::string others = attempt([&] {
    std::string first_failure;
    for (int r = 1; r < world; ++r) {
      const std::string mark = marker_path(staging, r);
      for (int wait_ms = 1; !fs::exists(mark); wait_ms = std::min(wait_ms * 2, 20)) {
        if (stop_) fail("abandoned: the job stopped before rank {} wrote its shard file", r);
        std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
      }
      std::ifstream in(mark);
      const std::string failed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (!failed.empty() && first_failure.empty())
        first_failure = fmt::format("rank {} failed writing its shard file: {}", r, failed);
    }
    if (!first_failure.empty()) fail("{}", first_failure);
  });
  if (error_.empty()) error_ = others;
  if (error_.empty())
    error_ = attempt([&] {
      fs::remove_all(staging + "/written");
      CheckpointState state = part.state;
      state.files = file_sizes(staging);
      write_file_atomically(staging + "/state.json", state.to_json().dump(2) + "\n");
      const int64_t previous = keep_last_ > 1 ? step_of(dir_) : -1;
      staged_->commit(previous >= 0 ? kept_checkpoint_path(dir_, previous) : std::string());
      if (keep_last_ > 1) prune_kept(dir_, keep_last_ - 1);
    });
  staged_.reset();  // removes the staging directory unless committed
}

void CheckpointWriter::finish() {
  if (!thread_.joinable()) return;
  thread_.join();
  agree(group_, error_, dir_, "writing its part of it");
}

void save_checkpoint(const std::string& dir, comm::Communicator* group, CheckpointPart mine) {
  CheckpointWriter writer(dir, group);
  writer.save(std::move(mine));
  writer.finish();
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
  c.state = CheckpointState::from_json(read_state(dir + "/state.json"), fmt::format("checkpoint '{}'", dir), true);
  std::vector<std::string> shard_files;
  for (const auto& [name, bytes] : c.state.files) {
    const std::string path = dir + "/" + name;
    std::error_code ec;
    const uintmax_t size = fs::file_size(path, ec);
    if (ec) fail("checkpoint '{}': '{}' is missing ({}); the checkpoint is incomplete", dir, name, ec.message());
    if (size != bytes)
      fail("checkpoint '{}': '{}' has {} bytes, state.json records {}: the file is truncated or was replaced", dir,
           name, size, bytes);
    if (name.rfind("shards/", 0) == 0) shard_files.push_back(path);
  }
  c.shards = ShardedTensors(shard_files, dir);
  if (c.state.files.contains("compression.safetensors"))
    c.compression = load_safetensors(dir + "/compression.safetensors");
  return c;
}

SafetensorsFile load_model_weights(const std::string& path) {
  if (fs::is_directory(path)) return load_safetensors(path + "/model.safetensors");
  return load_safetensors(path);
}

}  // namespace px
