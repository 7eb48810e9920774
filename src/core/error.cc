#include "core/error.h"

namespace px::detail {

void check_failed(const char* file, int line, const std::string& what) {
  throw InternalError(fmt::format("{}:{}: {}", file, line, what));
}

}  // namespace px::detail
