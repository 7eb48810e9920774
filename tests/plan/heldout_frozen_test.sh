#!/usr/bin/env bash
# The held-out published set (bench/published_heldout.json, issue 50) is
# frozen: its runs hash to the value pinned here, so a run added, dropped
# or changed after freezing fails this test and shows in review (the pin
# is changed only with the reason in the commit). Also the set's shape:
# at least 12 runs from at least 3 sources none of which the development
# set (bench/published_runs.json) uses, at least 4 on H100, at least 4
# data-parallel/FSDP-only runs on 64 or more GPUs and at least 4 with 4 or
# more pipeline stages; every run consistent (dp x tp x pp = GPUs, the
# global batch whole micro-batches on every data rank) and its source's
# citation, quotes and mapping present; and bench/published_accuracy.sh
# --held-out-commands maps every run to a simulate command (without
# simulating it).
#
#   heldout_frozen_test.sh REPO
set -euo pipefail
python3 - "$1/bench/published_heldout.json" "$1/bench/published_runs.json" <<'PY'
import hashlib, json, sys
held, dev = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
pinned = "e989cd42c7ad81319f576ed0f5ab208b2660d3ea854860d2e40fbba450076e68"
digest = hashlib.sha256(json.dumps(held["runs"], sort_keys=True).encode()).hexdigest()
assert digest == pinned, f"the held-out runs changed after freezing: sha256 {digest}, pinned {pinned}"
runs, sources = held["runs"], held["sources"]
assert len(runs) >= 12, f"{len(runs)} runs, expected at least 12"
assert len(sources) >= 3 and not set(sources) & set(dev["sources"]), (list(sources), list(dev["sources"]))
assert sum(r["cluster"] == "dgx-h100" for r in runs) >= 4, "fewer than 4 H100 runs"
assert sum(r["tp"] * r["pp"] == 1 and r["gpus"] >= 64 for r in runs) >= 4, "fewer than 4 FSDP-only runs on >= 64 GPUs"
assert sum(r["pp"] >= 4 for r in runs) >= 4, "fewer than 4 pipeline-heavy runs"
ids = [r["id"] for r in runs]
assert len(ids) == len(set(ids)), "duplicate run ids"
for r in runs:
    assert r["source"] in sources, (r["id"], r["source"])
    assert r["dp"] * r["tp"] * r["pp"] == r["gpus"], r["id"]
    assert r["batch"] % (r["dp"] * r["micro_batch"]) == 0, r["id"]
    assert r["published"], r["id"]
for name, s in sources.items():
    assert s["citation"] and s["quotes"] and s["mapping"], name
print(f"held-out set frozen: {len(runs)} runs from {len(sources)} sources, scored: {held['frozen']['scored']}")
PY
# The mapping to `parallax simulate` commands, printed without simulating: one line a run.
lines=$(bash "$1/bench/published_accuracy.sh" --held-out-commands | grep -c "|parallax simulate --model gpt ")
runs=$(python3 -c "import json, sys; print(len(json.load(open(sys.argv[1]))['runs']))" "$1/bench/published_heldout.json")
[[ $lines -eq $runs ]] || { echo "FAIL: --held-out-commands printed $lines commands for $runs runs"; exit 1; }

