#include "serve/serve_options.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "core/error.h"

namespace px::serve {

void validate(const ServeOptions& o) {
  if (o.checkpoint.empty()) fail("serve: --checkpoint DIR is required (a GPT checkpoint of `parallax train --save`)");
  if (o.port < 0 || o.port > 65535) fail("--port is {}, expected 0..65535 (0: a free one)", o.port);
  if (o.threads < 1) fail("--threads is {}, expected >= 1", o.threads);
  if (o.http_threads < 1) fail("--http-threads is {}, expected >= 1", o.http_threads);
  if (o.block_tokens < 1) fail("--block-tokens is {}, expected >= 1", o.block_tokens);
  if (o.kv_memory < 0) fail("--kv-memory is {} bytes, expected > 0", o.kv_memory);
  if (o.scheduler.max_batch_tokens < 1) fail("--max-batch-tokens is {}, expected >= 1", o.scheduler.max_batch_tokens);
  if (o.scheduler.max_running < 1) fail("--max-running is {}, expected >= 1", o.scheduler.max_running);
  if (o.max_waiting < 1) fail("--max-waiting is {}, expected >= 1", o.max_waiting);
  if (o.max_queue_ms < 0) fail("--max-queue-ms is {}, expected >= 0 (0: no bound)", o.max_queue_ms);
  if (o.tp < 1) fail("--tp is {}, expected >= 1", o.tp);
  if (o.timeout_ms < 100) fail("--timeout is {} ms, expected >= 100", o.timeout_ms);
}

int64_t parse_bytes(const std::string& text, const std::string& flag) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  std::string unit(end);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "K" || unit == "KB" || unit == "KIB") scale = 1024.0;
  else if (unit == "M" || unit == "MB" || unit == "MIB") scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "GB" || unit == "GIB") scale = 1024.0 * 1024 * 1024;
  if (end == text.c_str() || scale == 0 || !(value > 0) || !std::isfinite(value * scale))
    fail("{} '{}' is not a size (expected e.g. 512M, 2G or a number of bytes)", flag, text);
  return static_cast<int64_t>(value * scale);
}

}  // namespace px::serve
