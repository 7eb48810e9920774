#!/usr/bin/env bash
# The planner across hosts (scripts/hosts.sh: 2 namespaces, links shaped
# to 1 Gb/s, 2 ranks each). `parallax calibrate` under the MPI launcher
# must save a two-level `local` spec: 2 nodes of 2 devices, the link
# between them measured near its 1 Gb/s and far slower than the one
# inside a host, and the hosts known to share this machine's cores;
# `parallax plan --cluster local` on it must keep tensor parallelism inside
# a host (its tp group no wider than a host's ranks) and predict a
# cross-host tp slower than one inside a host; `train` across the hosts
# must predict from that spec; and an in-process run on the same spec
# must still predict (its ranks on one host).
#
# Needs root and `ip netns`: otherwise it says why and exits 77.
#
#   calibrate_hosts_test.sh PARALLAX [openmpi|mpich]
set -euo pipefail
PARALLAX=$(realpath "$1")
FLAVOR=${2:-openmpi}
case $FLAVOR in
  openmpi) LAUNCH=(mpirun --host) ;;
  mpich) LAUNCH=(mpiexec -hosts) ;;
  *) echo "FAIL: MPI '$FLAVOR'; expected openmpi or mpich"; exit 1 ;;
esac
source "$(dirname "${BASH_SOURCE[0]}")/hosts_fixture.sh" pxc --gbps 1
# Rank 0 reads and writes the spec here; /tmp is every host's.
export XDG_CACHE_HOME=$WORK/cache
SPEC=$XDG_CACHE_HOME/parallax/local-cluster.json
MODEL=(--model gpt --layers 2 --heads 4 --embd 32 --block 32 --batch 8)
on_two_hosts() { "$HOSTS" "${LAUNCH[@]}" "$PXH_NAME-0:2,$PXH_NAME-1:2" -np 4 "$PARALLAX" "$@"; }

on_two_hosts calibrate "${MODEL[@]}" --kernel-ms 2 > "$WORK/calibrate.log" 2>&1 ||
  { echo "FAIL: calibrate across hosts:"; cat "$WORK/calibrate.log"; exit 1; }
grep "comm" "$WORK/calibrate.log"
python3 - "$SPEC" << 'PY'
import json, sys
spec = json.load(open(sys.argv[1]))
fail = lambda why: sys.exit(f"FAIL: the spec calibrate saved across hosts: {why}")
if (spec["nodes"], spec["devices_per_node"]) != (2, 2):
    fail(f"{spec['nodes']} nodes of {spec['devices_per_node']}, expected 2 of 2")
between, inside = spec["inter_node"]["bandwidth"], spec["intra_node"]["bandwidth"]
print(f"link between hosts {between * 8 / 1e9:.3f} Gb/s (shaped to 1), inside a host {inside * 8 / 1e9:.1f} Gb/s")
if not 0.5 <= between * 8 / 1e9 <= 1.2: fail("the link between hosts is not near its 1 Gb/s")
if inside < 4 * between: fail("the link inside a host is not far faster than the one between hosts")
if not spec.get("nodes_share_cores"): fail("the namespaces were not found to share this machine's cores")
PY

# The plan keeps tp inside a host; a tp spanning the hosts predicts slower.
"$PARALLAX" plan "${MODEL[@]}" --cluster local --ranks 4 --out "$WORK/plan.json" > "$WORK/plan.log" 2>&1 ||
  { echo "FAIL: plan on the two-host spec:"; cat "$WORK/plan.log"; exit 1; }
python3 - "$WORK/plan.json" << 'PY'
import json, sys
mesh = {axis["name"]: axis["size"] for axis in json.load(open(sys.argv[1]))["mesh"]}
print(f"plan for 2 hosts x 2 ranks: mesh {mesh}")
if mesh.get("tp", 1) > 2: sys.exit(f"FAIL: the plan's tp {mesh['tp']} spans the hosts")
PY
step_of() { "$PARALLAX" simulate "${MODEL[@]}" --cluster local --mesh "$1" | sed -n 's/.*step \([0-9.e+-]*\) s.*/\1/p' | head -1; }
inside=$(step_of dp=2,tp=2) across=$(step_of tp=4)
echo "predicted step: tp=2 inside each host $inside s, tp=4 across the hosts $across s"
python3 -c "import sys; sys.exit(0 if float('$across') > float('$inside') else 1)" ||
  { echo "FAIL: a tp across the hosts is not predicted slower than one inside a host"; exit 1; }

# train across the hosts predicts from the spec; in-process too.
on_two_hosts train "${MODEL[@]}" --steps 6 --eval-every 0 --sample-tokens 0 --threads 1 --progress lines \
  > "$WORK/train.log" 2>&1 || { echo "FAIL: train across hosts:"; cat "$WORK/train.log"; exit 1; }
grep -q "predicted vs measured (from the local spec" "$WORK/train.log" ||
  { echo "FAIL: train across hosts did not predict from the local spec:"; cat "$WORK/train.log"; exit 1; }
grep "step time" "$WORK/train.log"
"$PARALLAX" train "${MODEL[@]}" --ranks 4 --steps 4 --eval-every 0 --sample-tokens 0 --progress lines \
  > "$WORK/inproc.log" 2>&1 || { echo "FAIL: in-process train on the two-host spec:"; cat "$WORK/inproc.log"; exit 1; }
grep -q "predicted vs measured (from the local spec" "$WORK/inproc.log" ||
  { echo "FAIL: in-process train did not predict from the local spec"; exit 1; }
echo PASS
