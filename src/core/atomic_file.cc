#include "core/atomic_file.h"

#include <algorithm>

#include <fcntl.h>
#include <stdio.h>  // renameat2
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.h"

namespace px {
namespace fs = std::filesystem;
namespace {

std::string temp_name(const std::string& path, std::string_view kind) {
  return fmt::format("{}.{}.{}", path, kind, static_cast<long>(::getpid()));
}

std::string parent_dir(const std::string& path) {
  fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

// fsync of a file or directory by path; px::Error on failure. Some
// filesystems cannot fsync directories (EINVAL); that is not an error.
void fsync_path(const std::string& path, bool directory, const std::string& target) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
  if (fd < 0)
    fail("atomic write of '{}': cannot open '{}' to fsync it: {}", target, path,
         std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0 && !(directory && (err == EINVAL || err == EROFS)))
    fail("atomic write of '{}': fsync of '{}' failed: {}", target, path, std::strerror(err));
}

void fsync_tree(const std::string& dir, const std::string& target) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (it->is_symlink(ec)) continue;
    if (it->is_directory(ec))
      fsync_path(it->path().string(), true, target);
    else if (it->is_regular_file(ec))
      fsync_path(it->path().string(), false, target);
  }
  if (ec) fail("atomic write of '{}': cannot list '{}': {}", target, dir, ec.message());
  fsync_path(dir, true, target);
}

}  // namespace

void create_parent_directories(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  std::error_code ec;  // what cannot be made, the file's own opening names
  if (!parent.empty()) fs::create_directories(parent, ec);
}

void FileSink::write(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd_, p, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("atomic write of '{}': writing '{}' failed after {} bytes: {}", target_, temp_path_,
           written_, std::strerror(errno));
    }
    p += n;
    bytes -= static_cast<size_t>(n);
    written_ += static_cast<uint64_t>(n);
  }
}

void write_file_atomically(const std::string& path, const std::function<void(FileSink&)>& write) {
  create_parent_directories(path);
  const std::string temp = temp_name(path, "tmp");
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    fail("atomic write of '{}': cannot create temporary file '{}': {}", path, temp,
         std::strerror(errno));
  try {
    FileSink sink(fd, path, temp);
    write(sink);
    if (::fsync(fd) != 0)
      fail("atomic write of '{}': fsync of '{}' failed: {}", path, temp, std::strerror(errno));
    if (::rename(temp.c_str(), path.c_str()) != 0) {
      int err = errno;
      // The temporary file's directory was swapped for new contents while
      // it was written (a checkpoint directory the run's outputs share:
      // StagedDirectory::commit). The file is still open: link it into the
      // directory now at that path (unless the commit carried it there
      // already: the name is this process's), and rename that.
      if (err == ENOENT) {
        const std::string open_file = fmt::format("/proc/self/fd/{}", fd);
        const bool linked = ::linkat(AT_FDCWD, open_file.c_str(), AT_FDCWD, temp.c_str(), AT_SYMLINK_FOLLOW) == 0;
        if ((linked || errno == EEXIST) && ::rename(temp.c_str(), path.c_str()) == 0)
          err = 0;
        else
          err = errno;
      }
      if (err != 0)
        fail("atomic write of '{}': renaming '{}' over it failed: {}", path, temp, std::strerror(err));
    }
    int rc = ::close(fd);
    fd = -1;
    if (rc != 0) fail("atomic write of '{}': closing '{}' failed: {}", path, temp, std::strerror(errno));
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(temp.c_str());
    throw;
  }
  // The new file is in place; make its directory entry durable.
  fsync_path(parent_dir(path), true, path);
}

void write_file_atomically(const std::string& path, std::string_view contents) {
  write_file_atomically(path, [&](FileSink& sink) { sink.write(contents); });
}

namespace {

std::string without_trailing_slashes(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

// The previous contents of a committed directory, now at `at`: deleted, or
// kept at `keep_at`. Either is best effort: the new contents are in place.
void set_aside(const std::string& at, const std::string& keep_at) {
  std::error_code ec;
  if (!keep_at.empty()) {
    fs::remove_all(keep_at, ec);
    if (::rename(at.c_str(), keep_at.c_str()) == 0) return;
  }
  fs::remove_all(at, ec);
}

// Hard-links `from` (a file, or a directory tree whose files are linked
// one by one) to `to`, which does not exist yet. A file that another
// writer renames or removes meanwhile is skipped (false for `from`
// itself): there is nothing left to carry, and what it was renamed to is
// carried late (carry_late).
bool link_tree(const fs::path& from, const fs::path& to, const std::string& target) {
  std::error_code ec;
  if (fs::is_directory(fs::symlink_status(from, ec))) {
    if (!fs::create_directory(to, ec) || ec)
      fail("atomic write of '{}': cannot make '{}' to carry '{}' over: {}", target, to.string(), from.string(),
           ec ? ec.message() : "it already exists");
    for (const fs::directory_entry& e : fs::directory_iterator(from, ec))
      link_tree(e.path(), to / e.path().filename(), target);
    if (ec) fail("atomic write of '{}': cannot list '{}': {}", target, from.string(), ec.message());
    return true;
  }
  // linkat without AT_SYMLINK_FOLLOW links a symbolic link itself.
  if (::linkat(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), 0) != 0) {
    if (errno == ENOENT) return false;
    fail("atomic write of '{}': cannot link '{}' to carry it over to the new contents: {} (the previous contents are "
         "left as they were)",
         target, from.string(), std::strerror(errno));
  }
  return true;
}

// The entries of `dir` that `carry` selects and `staging` lacks: linked
// into `staging`; returns their names.
std::vector<std::string> carry_into(const std::string& dir, const std::string& staging,
                                    const StagedDirectory::CarryOver& carry) {
  std::vector<std::string> carried;
  if (!carry) return carried;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    std::error_code absent;  // the staging directory's own entry of that name, if any
    if (!carry(name) || fs::exists(fs::symlink_status(fs::path(staging) / name, absent))) continue;
    if (link_tree(e.path(), fs::path(staging) / name, dir)) carried.push_back(name);
  }
  if (ec) fail("atomic write of '{}': cannot list it to carry its other files over: {}", dir, ec.message());
  return carried;
}

// After the swap: the entries `carry` selects that reached the previous
// contents (now at `at`) after carry_into listed them, a file another
// writer renamed into `dir` in between, moved into `dir` when it lacks one
// of that name. Each is a rename within one filesystem: atomic.
void carry_late(const std::string& at, const std::string& dir, const std::vector<std::string>& carried,
                const StagedDirectory::CarryOver& carry) {
  if (!carry) return;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(at, ec)) {
    const std::string name = e.path().filename().string();
    std::error_code absent;
    if (!carry(name) || std::find(carried.begin(), carried.end(), name) != carried.end() ||
        fs::exists(fs::symlink_status(fs::path(dir) / name, absent)))
      continue;
    ::rename(e.path().c_str(), (fs::path(dir) / name).c_str());  // lost only if it cannot move: as before
  }
}

// Drops what was carried over from the previous contents, now at `at`.
void drop_carried(const std::string& at, const std::vector<std::string>& carried) {
  std::error_code ec;
  for (const std::string& name : carried) fs::remove_all(fs::path(at) / name, ec);
}

}  // namespace

std::string staging_directory(const std::string& dir, long id) {
  return fmt::format("{}.tmp.{}", without_trailing_slashes(dir), id);
}

StagedDirectory::StagedDirectory(const std::string& dir, long id)
    : target_(without_trailing_slashes(dir)), staging_(staging_directory(dir, id)) {
  create_parent_directories(target_);
  std::error_code ec;
  fs::remove_all(staging_, ec);  // a leftover of a dead process with the same id
  if (!fs::create_directory(staging_, ec) || ec)
    fail("atomic write of '{}': cannot create staging directory '{}': {}", target_, staging_,
         ec ? ec.message() : "it already exists");
}

StagedDirectory::~StagedDirectory() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(staging_, ec);
}

void StagedDirectory::commit(const std::string& keep_previous_at, const CarryOver& carry) {
  PX_CHECK(!committed_, "staging directory '{}' committed twice", staging_);
  const std::string& target = target_;
  std::error_code ec;
  const bool replacing = fs::exists(fs::symlink_status(target, ec));
  const std::vector<std::string> carried = replacing ? carry_into(target, staging_, carry) : std::vector<std::string>();
  fsync_tree(staging_, target);
  if (!replacing) {
    if (::rename(staging_.c_str(), target.c_str()) != 0)
      fail("atomic write of '{}': renaming '{}' to it failed: {}", target, staging_, std::strerror(errno));
    committed_ = true;
    fsync_path(parent_dir(target), true, target);
    return;
  }
  if (::renameat2(AT_FDCWD, staging_.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) != 0) {
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
      fail("atomic write of '{}': exchanging it with '{}' failed: {}", target, staging_, std::strerror(errno));
    // No RENAME_EXCHANGE here: two renames, the old contents parked aside.
    const std::string old = temp_name(target, "old");
    fs::remove_all(old, ec);
    if (::rename(target.c_str(), old.c_str()) != 0)
      fail("atomic write of '{}': moving it aside to '{}' failed: {}", target, old, std::strerror(errno));
    if (::rename(staging_.c_str(), target.c_str()) != 0) {
      int err = errno;
      ::rename(old.c_str(), target.c_str());  // put the previous checkpoint back
      fail("atomic write of '{}': renaming '{}' to it failed: {}", target, staging_, std::strerror(err));
    }
    committed_ = true;
    carry_late(old, target, carried, carry);
    fsync_path(parent_dir(target), true, target);
    drop_carried(old, carried);
    set_aside(old, keep_previous_at);
    return;
  }
  committed_ = true;
  // After an exchange the previous contents sit at the staging name.
  carry_late(staging_, target, carried, carry);
  fsync_path(parent_dir(target), true, target);
  drop_carried(staging_, carried);
  set_aside(staging_, keep_previous_at);
}

void write_directory_atomically(const std::string& dir,
                                const std::function<void(const std::string& staging_dir)>& write) {
  StagedDirectory staged(dir, static_cast<long>(::getpid()));
  write(staged.path());
  staged.commit();
}

}  // namespace px
