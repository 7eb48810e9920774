#!/usr/bin/env bash
# Hierarchical against a flat ring allreduce between two hosts (root:
# scripts/hosts.sh network namespaces, each host's link shaped to --gbps
# Gb/s each way). Data-parallel GPT training on 2 hosts x 2 OpenMPI
# ranks, `--allreduce ring` and `--allreduce hierarchical` alternating
# (the order flipped every repetition), each run under the lock. Prints
# per run the median step (after the first) and the bytes host 0's link
# sent a step beside what the Programs account, then the medians'
# ratio hierarchical / ring for both. docs/collectives.md quotes it.
#
#   bench/compare_hosts_allreduce.sh [--reps N] [--steps S] [--gbps G]
#                                    [--build DIR] [--lock FILE]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
REPS=3 STEPS=20 GBPS=1
while [[ $# -gt 0 ]]; do
  case $1 in
    --reps) REPS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --gbps) GBPS=$2; shift 2 ;;
    --build) BUILD=$(realpath "$2"); shift 2 ;;
    --lock) LOCK=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "error: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ $(id -u) == 0 ]] || { echo "error: network namespaces need root" >&2; exit 1; }
require_parallax
make_results hosts-allreduce
HOSTS=$REPO/scripts/hosts.sh
export PXH_NAME=pxb$$ PXH_DISK=/mnt/pxb$$
trap '"$HOSTS" down > /dev/null; rm -rf "$PXH_DISK"' EXIT
"$HOSTS" up 2 --gbps "$GBPS" >&2

# 4 layers of 256: 3.2M parameters, a 12.9 MB gradient; a small batch so
# the link, not the two shared cores, sets the step.
GPT=(train --model gpt --layers 4 --heads 4 --embd 256 --block 32 --batch 4 --steps "$STEPS" --eval-every 0
     --eval-batches 1 --sample-tokens 0 --threads 1 --progress lines --no-predict)
run() {  # ALGORITHM REP: one run; appends a JSON line to $RESULTS/runs.jsonl
  local algorithm=$1 rep=$2 before after
  read -r before _ < <("$HOSTS" bytes 0)
  locked "$HOSTS" mpirun --host "$PXH_NAME-0:2,$PXH_NAME-1:2" -np 4 "$PX" "${GPT[@]}" --allreduce "$algorithm" \
    --metrics "$PXH_DISK/$algorithm-$rep.jsonl" > "$RESULTS/$algorithm-$rep.log" 2>&1
  read -r after _ < <("$HOSTS" bytes 0)
  "$HOSTS" exec 0 cat "$PXH_DISK/$algorithm-$rep.jsonl" > "$RESULTS/$algorithm-$rep.jsonl"
  python3 - "$RESULTS" "$algorithm" "$rep" "$((after - before))" "$STEPS" << 'PY'
import json, re, statistics, sys
results, algorithm, rep, sent, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
steps_s = [json.loads(l)["step_s"] for l in open(f"{results}/{algorithm}-{rep}.jsonl") if '"step_s"' in l]
log = open(f"{results}/{algorithm}-{rep}.log").read()
accounted = float(re.search(r"as the Programs account them: host 0 ([0-9.]+) MB", log).group(1)) * 1e6
run = {"algorithm": algorithm, "rep": int(rep), "step_s": statistics.median(steps_s[1:]),
       "link_bytes_per_step": sent / steps, "accounted_bytes_per_step": accounted}
print(f"{algorithm:12s} rep {rep}: step {run['step_s'] * 1e3:7.1f} ms; host 0's link {sent / steps / 1e6:6.2f} MB a step "
      f"(whole run over its steps), accounted {accounted / 1e6:6.2f} MB")
open(f"{results}/runs.jsonl", "a").write(json.dumps(run) + "\n")
PY
}
for rep in $(seq 1 "$REPS"); do
  if (( rep % 2 )); then order=(ring hierarchical); else order=(hierarchical ring); fi
  for algorithm in "${order[@]}"; do run "$algorithm" "$rep"; done
done
python3 - "$RESULTS" "$GBPS" << 'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(f"{sys.argv[1]}/runs.jsonl")]
med = lambda a, k: statistics.median(r[k] for r in runs if r["algorithm"] == a)
for k, what in (("step_s", "step time"), ("accounted_bytes_per_step", "bytes between hosts (accounted)"),
                ("link_bytes_per_step", "bytes on host 0's link")):
    print(f"hierarchical / ring at {sys.argv[2]} Gb/s, {what}: {med('hierarchical', k) / med('ring', k):.3f}")
PY
