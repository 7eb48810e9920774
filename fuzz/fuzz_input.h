// Shared by the libFuzzer harnesses (fuzz/*_fuzzer.cc): the readers under
// test take paths, so an input is handed over as a file held in memory, and
// a harness states once which outcomes are acceptable.
//
// The contract every harness checks: a reader given any bytes either
// returns a value or throws px::Error (one line naming the file, the thing
// and what was expected; docs/errors.md). Anything else - a crash, a
// sanitizer report, a leak, a hang, px::InternalError or another exception
// type escaping (nlohmann's type_error, std::out_of_range, ...) - is a bug
// the fuzzer reports, since a user would see it as a crash or an unnamed
// error.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "core/error.h"

namespace px::fuzz {

// A file with no name on disk (memfd_create), reopened by its
// /proc/self/fd path; rewritten for every input.
class MemoryFile {
 public:
  MemoryFile() : fd_(::memfd_create("parallax-fuzz", MFD_CLOEXEC)) {
    if (fd_ < 0) {
      std::fprintf(stderr, "memfd_create failed: %s\n", std::strerror(errno));
      std::abort();
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemoryFile() { ::close(fd_); }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;

  // Replaces the contents; returns the path to open.
  const std::string& hold(const uint8_t* data, size_t size) {
    if (::ftruncate(fd_, 0) != 0 || (size > 0 && ::pwrite(fd_, data, size, 0) != static_cast<ssize_t>(size))) {
      std::fprintf(stderr, "writing the memory file failed: %s\n", std::strerror(errno));
      std::abort();
    }
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

// Runs `read`; px::Error is the reader refusing the input by name, which
// is fine. Every other exception escapes to libFuzzer, which reports it
// with the input that caused it.
template <typename Read>
void expect_value_or_named_error(Read&& read) {
  try {
    read();
  } catch (const px::Error&) {
  }
}

}  // namespace px::fuzz
