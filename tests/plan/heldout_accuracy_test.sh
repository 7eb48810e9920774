#!/usr/bin/env bash
# The held-out published set (bench/published_heldout.json, issue 50) was
# scored once, on the date and at the commit its `scoring` entry names;
# from then on it is a development set too, and this test guards it only
# against regression from that score: every run replayed again by
# bench/published_accuracy.sh --set held-out (about 40 s here), each within
# 5 points of its scored |error|, the median and worst |error| within 1
# point of the scored ones. A later claim of accuracy needs another set
# frozen before scoring; the score itself is never rewritten.
#
#   heldout_accuracy_test.sh REPO BUILD
set -euo pipefail
REPO=$1 BUILD=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$REPO/bench/published_accuracy.sh" --set held-out --build "$BUILD" > "$out/table.txt" 2> "$out/stderr.txt" || {
  cat "$out/stderr.txt" "$out/table.txt" >&2
  exit 1
}
python3 - "$REPO/bench/published_heldout.json" "$out/table.txt" <<'PY'
import json, statistics, sys
held = json.load(open(sys.argv[1]))
assert held["frozen"]["scored"], "the held-out set is not scored yet: bench/published_accuracy.sh --set held-out --record-score"
scored = held["scoring"]["predicted_seconds"]
rows = {r[1]: r for r in (l.split() for l in open(sys.argv[2])) if r and r[0] == "held-out"}
assert set(rows) == set(scored), f"runs replayed {sorted(rows)} != runs scored {sorted(scored)}"
now, then, bad = [], [], []
for run_id, r in rows.items():
    published, predicted = float(r[3]), float(r[4])
    e_now, e_then = abs(predicted / published - 1), abs(scored[run_id] / published - 1)
    now.append(e_now)
    then.append(e_then)
    if e_now > e_then + 0.05:
        bad.append(f"{run_id}: |error| {100 * e_now:.1f}%, scored {100 * e_then:.1f}%")
median_now, median_then = statistics.median(now), statistics.median(then)
print(f"held-out set: median |error| {100 * median_now:.1f}% (scored {100 * median_then:.1f}% on "
      f"{held['scoring']['date']} at {held['scoring']['commit']}), worst {100 * max(now):.1f}% (scored {100 * max(then):.1f}%)")
assert not bad, "runs regressed from their score: " + "; ".join(bad)
assert median_now <= median_then + 0.01, f"median |error| {100 * median_now:.1f}% regressed from {100 * median_then:.1f}%"
assert max(now) <= max(then) + 0.01, f"worst |error| {100 * max(now):.1f}% regressed from {100 * max(then):.1f}%"
PY
