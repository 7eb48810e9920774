// Where `parallax calibrate` saves this host's cluster spec and
// `--cluster local` (and train's prediction) read it:
// $XDG_CACHE_HOME/parallax/local-cluster.json (~/.cache without it). The
// CLI is the one place that reads the environment (STYLE.md).
#pragma once

#include <cstdlib>
#include <string>

namespace px::cli {

inline std::string local_cluster_path() {
  const char* cache = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string base = cache && *cache ? cache : (home ? std::string(home) + "/.cache" : ".");
  return base + "/parallax/local-cluster.json";
}

}  // namespace px::cli
