#!/usr/bin/env bash
# --budget-s is a bound: a 128-layer, 25600-wide GPT on 3072 A100s (about
# 4 s to search whole in a release build) cut at 1 s stops its search
# within the budget by its own clock (--explain's "seconds"), returns
# with the best strategy it found and says how much it covered, on the
# terminal and in --explain. The whole command, start-up included (the
# 128-layer graph built, the strategy written), ends within the budget and
# a START_UP_MARGIN_S of wall clock. A timed check: CI runs it alone, in
# its Release stage (a `long` test), never stretched by
# PX_TEST_TIME_SCALE.
#
#   plan_budget_test.sh PARALLAX
set -euo pipefail
PX=$1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export XDG_CACHE_HOME=$WORK/cache
fail() { echo "FAIL: $*"; exit 1; }
BUDGET_S=1
START_UP_MARGIN_S=1

HUGE=(--model gpt --layers 128 --heads 160 --embd 25600 --block 2048 --vocab 51200 --batch 3072)
started=$(date +%s%N)
"$PX" plan "${HUGE[@]}" --cluster dgx-a100:384 --budget-s "$BUDGET_S" --top 3 --explain "$WORK/cut.json" \
  > "$WORK/cut.txt" 2>&1 || { cat "$WORK/cut.txt"; fail "the cut search found no strategy"; }
took_ms=$((($(date +%s%N) - started) / 1000000))
cat "$WORK/cut.txt"
grep -Eq "the search was cut at the $BUDGET_S s budget: it estimated [0-9]+ of [0-9]+ candidates \([0-9.]+%\)" \
  "$WORK/cut.txt" || fail "the cut search does not say so"
grep -q "^chose pp=" "$WORK/cut.txt" || fail "no choice from the cut search"
python3 - "$WORK/cut.json" "$BUDGET_S" <<'PY'
import json, sys
e, budget = json.load(open(sys.argv[1])), float(sys.argv[2])
assert e["cut"] is True and e["budget_s"] == budget, e
assert 0 < e["coverage"] < 1 and e["evaluated"] < e["considered"], e
assert f"cut at the {sys.argv[2]} s budget" in e["why"], e["why"]
# The search's own clock: the deadline is checked inside every replay, so
# it overshoots by one check's granularity at most.
assert e["seconds"] <= budget + 0.05, f"the search ran {e['seconds']:.3f} s on its own clock, past its {budget} s budget"
print(f"the search stopped at {e['seconds']:.3f} s of its {budget} s budget")
PY
echo "--budget-s $BUDGET_S: the command took $took_ms ms"
((took_ms <= (BUDGET_S + START_UP_MARGIN_S) * 1000)) ||
  fail "--budget-s $BUDGET_S took $took_ms ms, past the budget and the ${START_UP_MARGIN_S} s start-up margin"
echo "plan budget: ok"
