# Sourced by the bench/*.sh scripts that run `parallax`: the repository,
# --help from the script's header comment, the binary, and a results
# directory per run. Each script still parses its own options (BUILD
# defaults to $REPO/build, LOCK to the shared build/benchmark lock).
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$REPO/build
LOCK=/tmp/px-build.lock

# Runs the command holding $LOCK (none when LOCK is empty), so no build or
# other benchmark shares the cores with a timed run.
locked() { if [[ -n $LOCK ]]; then flock "$LOCK" "$@"; else "$@"; fi; }

# The script's header comment (line 2 up to `set -euo`), as --help.
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }

# PX: the parallax binary of $BUILD, or an error naming it.
require_parallax() {
  PX=$BUILD/src/cli/parallax
  [[ -x $PX ]] || { echo "error: $PX not built" >&2; exit 1; }
}

# RESULTS: $BUILD/bench-results/<name>-<time>, made and announced on stderr.
make_results() {
  RESULTS=$BUILD/bench-results/$1-$(date +%Y%m%d-%H%M%S)
  mkdir -p "$RESULTS"
  echo "results in $RESULTS" >&2
}
