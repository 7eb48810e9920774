// Errors, in the two kinds docs/errors.md describes:
//  - px::Error: a user or environment error (bad config, missing file, shape
//    mismatch, a peer that stopped answering). One line naming the thing, the
//    bad value and what was expected. The CLI prints it as "error: <what()>".
//  - PX_CHECK*: a broken invariant inside parallax (a bug). Throws
//    px::InternalError with file, line and both values.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>
#include <string>

namespace px {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& message) : std::logic_error(message) {}
};

// Throws px::Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

namespace detail {
[[noreturn]] void check_failed(const char* file, int line, const std::string& what);
}  // namespace detail

}  // namespace px

#define PX_CHECK(cond, ...)                                                                \
  do {                                                                                     \
    if (!(cond))                                                                           \
      ::px::detail::check_failed(__FILE__, __LINE__,                                       \
                                 fmt::format("check failed: {} {}", #cond,                 \
                                             fmt::format("" __VA_ARGS__)));                \
  } while (0)

#define PX_CHECK_OP_(a, b, op)                                                              \
  do {                                                                                      \
    const auto& px_a_ = (a);                                                                \
    const auto& px_b_ = (b);                                                                \
    if (!(px_a_ op px_b_))                                                                  \
      ::px::detail::check_failed(__FILE__, __LINE__,                                        \
                                 fmt::format("check failed: {} {} {} ({} vs {})", #a, #op, #b, \
                                             px_a_, px_b_));                                \
  } while (0)

#define PX_CHECK_EQ(a, b) PX_CHECK_OP_(a, b, ==)
#define PX_CHECK_NE(a, b) PX_CHECK_OP_(a, b, !=)
#define PX_CHECK_LT(a, b) PX_CHECK_OP_(a, b, <)
#define PX_CHECK_LE(a, b) PX_CHECK_OP_(a, b, <=)
#define PX_CHECK_GT(a, b) PX_CHECK_OP_(a, b, >)
#define PX_CHECK_GE(a, b) PX_CHECK_OP_(a, b, >=)
