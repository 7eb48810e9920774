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

bool written_by_checkpoints(const std::string& name) {
  return name == "state.json" || name == "model.safetensors" || name == "compression.safetensors" ||
         name == "shards";
}

void validate(const CheckpointOptions& o) {
  if (o.save_every < 0) fail("--save-every {} must be >= 0", o.save_every);
  if (o.keep_last < 1) fail("--keep-last {}: keep at least the latest checkpoint (1)", o.keep_last);
}

void check_not_replaced_by_saves(const std::string& dir, const std::string& path, std::string_view what,
                                 OutputKind kind) {
  if (dir.empty() || path.empty()) return;
  const fs::path checkpoint = fs::absolute(dir).lexically_normal();
  const fs::path output = fs::absolute(path).lexically_normal();
  // Trailing separators make an empty last name; compare by components.
  auto parts = [](const fs::path& p) {
    std::vector<std::string> names;
    for (const fs::path& part : p)
      if (!part.empty() && part != ".") names.push_back(part.string());
    return names;
  };
  const std::vector<std::string> c = parts(checkpoint), o = parts(output);
  if (c.size() < 2) return;  // the root: nothing is beside it
  auto refuse = [&](std::string_view why) {
    fail("{} '{}' {}: a save to --save '{}' would replace it (a checkpoint owns state.json, model.safetensors, "
         "compression.safetensors and shards/ in its directory, and '{}.step-*' and '{}.tmp.*' beside it); any other "
         "name in or beside the directory is kept",
         what, path, why, dir, c.back(), c.back());
  };
  if (o == c && kind == OutputKind::file) refuse("is the checkpoint directory itself");
  if (o.size() > c.size() && std::equal(c.begin(), c.end(), o.begin()) && written_by_checkpoints(o[c.size()]))
    refuse(fmt::format("is the checkpoint's own '{}'", o[c.size()]));
  // Beside the directory: the kept checkpoints and the staging directories.
  if (o.size() >= c.size() && std::equal(c.begin(), c.end() - 1, o.begin())) {
    const std::string& name = o[c.size() - 1];
    for (std::string_view suffix : {".step-", ".tmp."})
      if (name.starts_with(c.back() + std::string(suffix)))
        refuse(fmt::format("is under '{}', where saves keep or stage checkpoints", name));
  }
}

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

// Broadcasts rank 0's `text` to every rank of `group`.
void broadcast_text(comm::Communicator& group, std::string& text) {
  int64_t size = static_cast<int64_t>(text.size());
  comm::broadcast(group, comm::Buffer(&size, 1, DType::i64), 0);
  text.resize(static_cast<size_t>(size));
  if (size > 0) comm::broadcast(group, comm::Buffer(text.data(), size, DType::u8), 0);
}

}  // namespace

CheckpointWriter::CheckpointWriter(std::string dir, comm::Communicator* group, int keep_last)
    : dir_(std::move(dir)), group_(group), keep_last_(keep_last) {
  if (keep_last < 1) fail("--keep-last {}: keep at least the latest checkpoint (1)", keep_last);
  filesystems_ = probe_filesystems(group_, dir_);
  if (group_ != nullptr) {
    commit_.emplace(group_->split(0, group_->rank()));
    // Its waits span other ranks' writes, which may take longer than a
    // training step's timeout; a dead rank still ends them (a declared
    // failure), and so does the job's end (stop_).
    commit_->set_timeout(std::max(commit_->timeout(), std::chrono::milliseconds(600000)));
  }
  // On private disks a host may commit a step another never did (it died
  // in between): keep the one before, which every host has.
  if (!filesystems_.shared()) keep_last_ = std::max(keep_last_, 2);
}

CheckpointWriter::~CheckpointWriter() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void CheckpointWriter::save(CheckpointPart part) {
  finish();
  const int rank = group_ ? group_->rank() : 0;
  const bool lead = filesystems_.lead[static_cast<size_t>(rank)] == rank;
  // Each filesystem's lead stages the directory, named by rank 0's pid.
  int64_t id = static_cast<int64_t>(::getpid());
  if (group_ != nullptr) comm::broadcast(*group_, comm::Buffer(&id, 1, DType::i64), 0);
  if (!filesystems_.shared()) {
    // Every lead writes the commit record of its filesystem: rank 0's state.
    std::string state = rank == 0 ? part.state.to_json().dump() : std::string();
    broadcast_text(*group_, state);
    if (lead && rank != 0)
      part.state = CheckpointState::from_json(nlohmann::json::parse(state), "the lead's checkpoint state", false);
  }
  std::string error;
  if (lead)
    error = attempt([&] {
      staged_ = std::make_unique<StagedDirectory>(dir_, static_cast<long>(id));
      fs::create_directory(staged_->path() + "/shards");
    });
  agree(group_, error, dir_, "creating the staging directory");
  error_.clear();
  stop_ = false;
  thread_ = std::thread(&CheckpointWriter::write, this, std::move(part), staging_directory(dir_, static_cast<long>(id)));
}

void CheckpointWriter::write(CheckpointPart part, const std::string& staging) {
  const int rank = group_ ? group_->rank() : 0;
  const bool lead = filesystems_.lead[static_cast<size_t>(rank)] == rank;
  // 1. Every rank: its runs; rank 0 also the model and the compression state.
  ShardReport mine;
  mine.error = attempt([&] {
    if (part.shards.empty()) return;
    std::map<std::string, std::string> who = part.who;
    who["rank"] = std::to_string(rank);
    const std::string path = fmt::format("{}/shards/rank{}.safetensors", staging, rank);
    save_shard_file(path, part.shards, who);
    mine.bytes = fs::file_size(path);
    mine.checksum = file_checksum(path);
  });
  if (rank == 0 && mine.error.empty())
    mine.error = attempt([&] {
      std::map<std::string, std::string> metadata{{"format", "pt"}, {"parallax", part.state.config.dump()}};
      save_safetensors(staging + "/model.safetensors", part.model, metadata);
      if (!part.compression.empty()) save_safetensors(staging + "/compression.safetensors", part.compression);
    });
  // 2. Rank 0 learns every rank's report over the transport and decides.
  // Only then may a failure remove a staging directory: another rank may
  // still be writing into it, and would report the vanished directory
  // instead of the failure that caused it.
  CommitVerdict verdict{.commit = mine.error.empty(), .error = mine.error, .shards = {mine}};
  const std::string agreed = commit_ ? attempt([&] { verdict = agree_on_commit(*commit_, mine, stop_); }) : "";
  error_ = !mine.error.empty() ? mine.error : !agreed.empty() ? agreed : verdict.commit ? "" : verdict.error;
  // 3. Each filesystem's lead: the commit record of its ranks' files, and the swap.
  if (lead && error_.empty())
    error_ = attempt([&] {
      CheckpointState state = part.state;
      state.files = file_sizes(staging);
      for (int r : filesystems_.members(rank)) {
        const std::string name = fmt::format("shards/rank{}.safetensors", r);
        if (state.files.contains(name)) state.checksums[name] = verdict.shards[static_cast<size_t>(r)].checksum;
      }
      write_file_atomically(staging + "/state.json", state.to_json().dump(2) + "\n");
      const int64_t previous = keep_last_ > 1 ? step_of(dir_) : -1;
      staged_->commit(previous >= 0 ? kept_checkpoint_path(dir_, previous) : std::string(),
                      [](const std::string& name) { return !written_by_checkpoints(name); });
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

CheckpointState read_checkpoint_state(const std::string& dir) {
  if (!fs::is_directory(dir))
    fail("checkpoint directory '{}' does not exist (expected a directory written by parallax train --save)", dir);
  return CheckpointState::from_json(read_state(dir + "/state.json"), fmt::format("checkpoint '{}'", dir), true);
}

Checkpoint load_checkpoint(const std::string& dir) {
  Checkpoint c;
  c.dir = dir;
  c.state = read_checkpoint_state(dir);
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
    if (auto sum = c.state.checksums.find(name); sum != c.state.checksums.end() && file_checksum(path) != sum->second)
      fail("checkpoint '{}': '{}' does not have the checksum its rank reported when writing it: the file is "
           "corrupt or was replaced",
           dir, name);
  }
  c.shards = ShardedTensors(shard_files, dir);
  if (c.state.files.contains("compression.safetensors"))
    c.compression = load_safetensors(dir + "/compression.safetensors");
  return c;
}

std::string agreed_checkpoint(const std::string& dir, comm::Communicator* group, bool if_any) {
  // The step this rank last committed: the one in `dir` (kept ones beside
  // it may be older runs' with higher steps, and are no evidence).
  const int64_t newest = step_of(dir);
  // The lowest over the ranks (hosts commit one after the other: one may
  // be a checkpoint ahead, and keeps the one before), and whose it is.
  const int rank = group ? group->rank() : 0;
  std::vector<float> least{static_cast<float>(newest), static_cast<float>(rank)};  // exact to 2^24
  if (group != nullptr) {
    std::vector<float> all(static_cast<size_t>(2 * group->size()), 0.0f);
    all[static_cast<size_t>(2 * rank)] = least[0];
    all[static_cast<size_t>(2 * rank + 1)] = least[1];
    comm::allreduce(*group, std::span<float>(all), comm::Reduction::sum);
    for (int r = 0; r < group->size(); ++r)
      if (all[static_cast<size_t>(2 * r)] < least[0]) least = {all[static_cast<size_t>(2 * r)], static_cast<float>(r)};
  }
  const int64_t step = static_cast<int64_t>(least[0]);
  if (step < 0) {
    if (if_any) return {};
    fail("checkpoint directory '{}' holds no checkpoint on rank {} (expected a directory written by parallax train "
         "--save; without a shared filesystem each host resumes from its own disk)",
         dir, static_cast<int>(least[1]));
  }
  if (step_of(dir) == step) return dir;
  const std::string older = kept_checkpoint_path(dir, step);
  if (step_of(older) == step) return older;
  fail("checkpoint '{}': rank {} has only step {} there, and this rank has neither it in '{}' nor '{}' (the hosts' "
       "checkpoints are more than one save apart)",
       dir, static_cast<int>(least[1]), step, dir, older);
}

SafetensorsFile load_model_weights(const std::string& path) {
  if (fs::is_directory(path)) return load_safetensors(path + "/model.safetensors");
  return load_safetensors(path);
}

}  // namespace px
