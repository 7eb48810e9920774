// Crash-safe writes of files and directories (checkpoints): a reader of the
// target sees the complete old contents or the complete new contents, never a
// partial file, even if the process or the machine dies midway.
//
// File: write `path.tmp.<pid>` in the same directory, fsync it, rename(2) it
// over `path`, fsync the directory. On any failure the temporary file is
// removed and `path` is left as it was.
//
// Directory: the caller fills a staging directory `dir.tmp.<pid>`; every file
// and directory in it is fsynced; then it is exchanged with `dir` in one
// renameat2(RENAME_EXCHANGE) (or simply renamed when `dir` does not exist yet),
// the parent is fsynced, and the previous contents, now at the staging name,
// are deleted (but for the entries the caller says are not its own, which
// carry over: StagedDirectory::commit). Until the exchange, `dir` still holds the previous good
// checkpoint. Where the filesystem lacks RENAME_EXCHANGE, `dir` is first
// renamed to `dir.old.<pid>`, then the staging directory to `dir`: a crash
// between the two renames leaves the previous checkpoint at `dir.old.<pid>`.
// Leftover `*.tmp.<pid>` files or directories are incomplete writes of a
// process that died; they are safe to delete. Both make the target's missing
// parent directories first, as every output path of the command line does.
//
// Writes to the same target from two threads of one process at once are not
// supported (they would share the temporary name).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace px {

// An open temporary file. write() writes everything or throws px::Error
// naming the target, the temporary file and the system error.
class FileSink {
 public:
  FileSink(int fd, std::string target, std::string temp_path)
      : fd_(fd), target_(std::move(target)), temp_path_(std::move(temp_path)) {}
  void write(const void* data, size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  uint64_t bytes_written() const { return written_; }
  const std::string& target() const { return target_; }

 private:
  int fd_;
  std::string target_;
  std::string temp_path_;
  uint64_t written_ = 0;
};

// Makes the directories above an output path that do not exist yet (`a/b`
// for `a/b/metrics.jsonl`; nothing for a bare name). Best effort: when one
// cannot be made (a file is in the way), opening the file fails and says so.
void create_parent_directories(const std::string& path);

// Writes `path` atomically with the bytes `write` sends to the sink. I/O
// failures throw px::Error naming `path`; an exception thrown by `write`
// itself propagates unchanged. Either way the temporary file is removed and
// `path` keeps its old contents (or stays absent).
void write_file_atomically(const std::string& path, const std::function<void(FileSink&)>& write);
void write_file_atomically(const std::string& path, std::string_view contents);

// Replaces directory `dir` atomically by the files `write` creates in the
// (empty, freshly made) staging directory whose path it is given. Failures
// and exceptions from `write` leave `dir` untouched and remove the staging
// directory, as above.
void write_directory_atomically(const std::string& dir,
                                const std::function<void(const std::string& staging_dir)>& write);

// The same, in steps, for a directory many processes fill (a checkpoint
// every rank writes its shards into): the lead process creates the staging
// directory `staging_directory(dir, id)`, where `id` is agreed among them
// (the lead's pid), the others write into it, and the lead commits.
// Destroyed without commit(), it removes the staging directory.
std::string staging_directory(const std::string& dir, long id);
class StagedDirectory {
 public:
  StagedDirectory(const std::string& dir, long id);
  ~StagedDirectory();
  StagedDirectory(const StagedDirectory&) = delete;
  StagedDirectory& operator=(const StagedDirectory&) = delete;

  const std::string& path() const { return staging_; }
  // Names the top-level entries of `dir` that the new contents do not own
  // (files other programs put there: a run's metrics, its trace).
  using CarryOver = std::function<bool(const std::string& name)>;

  // fsyncs everything in the staging directory and swaps it in for `dir`;
  // px::Error leaves `dir` as it was. The previous contents of `dir` are
  // deleted, or moved to `keep_previous_at` when that is given (an older
  // checkpoint kept: it replaces whatever was there). Entries of `dir`
  // that `carry` selects (and the staging directory lacks) survive the
  // swap: before it they are hard-linked into the staging directory (files;
  // directories are made anew and their files linked), so a file held
  // open by a writer keeps growing at the same path; after it they are
  // dropped from the previous contents. One that another writer puts in
  // `dir` while the commit runs (after the links, before the swap) is
  // moved into the new contents right after the swap. A link that cannot
  // be made is a px::Error before the swap.
  void commit(const std::string& keep_previous_at = "", const CarryOver& carry = {});

 private:
  std::string target_, staging_;
  bool committed_ = false;
};

}  // namespace px
