#!/usr/bin/env bash
# Two hosts for real (scripts/hosts.sh): network namespaces with their own
# hostnames, private /dev/shm and disk, joined by a bridge whose host
# links are shaped to 1 Gb/s. Under OpenMPI or MPICH, 2 ranks on each host,
# `parallax train` must give one rank's per-step losses (1e-5, over
# PX_TEST_STEPS, default 50) for data parallelism, ZeRO-3, dp=2 x tp=2 (tp
# inside a host), pp=2 x dp=2 (the stages on different hosts) and pp=2 x
# tp=2 (also with a flat ring allreduce), and a mixture of experts at
# ep=4 (every expert exchange across the hosts; also overlapped with two
# interleaved micro-batches) and dp=2 x ep=2 (inside a
# host) against one rank's MoE; host 0's link must carry the
# bytes a step its ranks' Programs account between hosts (within 10%:
# dp's hierarchical allreduce, the ring, tp's resharding, pp's sends),
# hierarchical about 2/3 of the ring's; and teardown must leave no
# namespace, veth or state behind.
#
# Needs root and `ip netns`: otherwise it says why and exits 77 (CTest's
# "skipped").
#
#   two_hosts_test.sh PARALLAX [openmpi|mpich]   (PARALLAX built for that MPI)
set -euo pipefail
PARALLAX=$(realpath "$1")
FLAVOR=${2:-openmpi}
case $FLAVOR in
  openmpi) LAUNCH=(mpirun --host) ;;
  mpich) LAUNCH=(mpiexec -hosts) ;;  # hosts.sh mpiexec: UCX on TCP, so the bytes cross the links
  *) echo "FAIL: MPI '$FLAVOR'; expected openmpi or mpich"; exit 1 ;;
esac
source "$(dirname "${BASH_SOURCE[0]}")/hosts_fixture.sh" pxt --gbps 1

STEPS=${PX_TEST_STEPS:-50}
GPT=(train --model gpt --layers 2 --heads 2 --embd 32 --block 32 --batch 8 --dropout 0.1
     --eval-every 0 --eval-batches 2 --sample-tokens 0 --threads 1 --progress lines --no-predict)
"$PARALLAX" "${GPT[@]}" --steps "$STEPS" --metrics "$WORK/one.jsonl" > "$WORK/one.log"

# Host 0's link: bytes sent so far.
sent_by_host0() { local tx rx; read -r tx rx < <("$HOSTS" bytes 0); echo "$tx"; }

# NAME STEPS MESH FLAGS...: a run on 2 hosts x 2 ranks, its log in
# $WORK/NAME.log, its metrics (rank 0 writes them, on host 0's private
# disk) copied to $WORK/NAME.jsonl, host 0's link counter around it in
# $WORK/NAME.sent.
run_on_two_hosts() {
  local name=$1 steps=$2 mesh=$3 before
  shift 3
  before=$(sent_by_host0)
  "$HOSTS" "${LAUNCH[@]}" "$PXH_NAME-0:2,$PXH_NAME-1:2" -np 4 "$PARALLAX" "${GPT[@]}" --steps "$steps" "$@" \
    --metrics "$PXH_DISK/$name.jsonl" > "$WORK/$name.log" 2>&1 ||
    { echo "FAIL: $name on two hosts:"; cat "$WORK/$name.log"; exit 1; }
  echo $(($(sent_by_host0) - before)) > "$WORK/$name.sent"
  grep -q "4 ranks, mesh $mesh (mpi)" "$WORK/$name.log" ||
    { echo "FAIL: $name did not run mesh $mesh on 4 MPI ranks:"; cat "$WORK/$name.log"; exit 1; }
  "$HOSTS" exec 0 cat "$PXH_DISK/$name.jsonl" > "$WORK/$name.jsonl"
  [[ ! -e $PXH_DISK/$name.jsonl ]] || { echo "FAIL: host 0's disk is visible outside it"; exit 1; }
}

# NAME MESH FLAGS...: 2 hosts x 2 ranks against one rank.
case_on_two_hosts() {
  run_on_two_hosts "$1" "$STEPS" "${@:2}"
  python3 "$(dirname "${BASH_SOURCE[0]}")/../parallel/compare_losses.py" "$WORK/one.jsonl" "$WORK/$1.jsonl" \
    "$1 on 2 hosts x 2 ranks"
}

# NAME MESH FLAGS...: the bytes host 0's link carried per step match what
# the run says its Programs send between hosts (within 10%). The case runs
# again for 2 steps; the difference of the two runs' counters over the
# difference of steps leaves out what every run sends once (MPI's wire-up,
# the final evaluation).
traffic_matches_accounting() {
  local name=$1 mesh=$2
  shift 2
  run_on_two_hosts "$name-short" 2 "$mesh" "$@"
  python3 - "$WORK/$name" "$WORK/$name-short" "$STEPS" << 'PY'
import re, sys
full, short, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
sent = lambda run: int(open(run + ".sent").read())
line = re.search(r"between hosts per step, as the Programs account them: host 0 ([0-9.]+) MB", open(full + ".log").read())
if not line: sys.exit(f"FAIL: {full}.log does not say what host 0 sends between hosts")
accounted = float(line.group(1)) * 1e6
measured = (sent(full) - sent(short)) / (steps - 2)
name = full.rsplit("/", 1)[1]
print(f"{name}: host 0's link carried {measured / 1e6:.3f} MB a step, the Programs account {accounted / 1e6:.3f} MB "
      f"({measured / accounted - 1:+.1%})")
if abs(measured / accounted - 1) > 0.10: sys.exit(f"FAIL: {name}: the link's bytes are not the accounted ones")
PY
}

(( STEPS > 2 )) || { echo "FAIL: PX_TEST_STEPS=$STEPS: the traffic check needs more than 2 steps"; exit 1; }
case_on_two_hosts dp "{dp:4}"
traffic_matches_accounting dp "{dp:4}"
case_on_two_hosts ring "{dp:4}" --allreduce ring
traffic_matches_accounting ring "{dp:4}" --allreduce ring
case_on_two_hosts zero3 "{dp:4}" --zero 3
case_on_two_hosts tp "{dp:2, tp:2}" --mesh dp=2,tp=2
traffic_matches_accounting tp "{dp:2, tp:2}" --mesh dp=2,tp=2
case_on_two_hosts pp "{pp:2, dp:2}" --mesh pp=2,dp=2 --micro-batches 2
traffic_matches_accounting pp "{pp:2, dp:2}" --mesh pp=2,dp=2 --micro-batches 2
case_on_two_hosts pptp "{pp:2, dp:1, tp:2}" --mesh pp=2,tp=2 --micro-batches 2

# Expert parallelism: the routed exchanges' counts agreed and their rows
# moved across the 1 Gb/s links, against one rank's dropless MoE.
MOE=(--moe-experts 4 --moe-top-k 2)
"$PARALLAX" "${GPT[@]}" "${MOE[@]}" --steps "$STEPS" --metrics "$WORK/moe-one.jsonl" > "$WORK/moe-one.log"
for ep in "ep4|{dp:1, ep:4}|--ep 4" "dp2ep2|{dp:2, ep:2}|--mesh dp=2,ep=2"; do
  IFS='|' read -r name mesh flags <<< "$ep"
  # shellcheck disable=SC2086  # the flags split into words
  run_on_two_hosts "$name" "$STEPS" "$mesh" "${MOE[@]}" $flags
  python3 "$(dirname "${BASH_SOURCE[0]}")/../parallel/compare_losses.py" "$WORK/moe-one.jsonl" "$WORK/$name.jsonl" \
    "an MoE at $mesh on 2 hosts x 2 ranks"
done
# Two micro-batches interleaved, their exchanges on the expert axis'
# progress thread while the other computes (bias balancing: see moe_test.cc).
OVERLAP=("${MOE[@]}" --moe-balance bias --micro-batches 2)
"$PARALLAX" "${GPT[@]}" "${OVERLAP[@]}" --steps "$STEPS" --metrics "$WORK/moe-one2.jsonl" > "$WORK/moe-one2.log"
run_on_two_hosts ep4overlap "$STEPS" "{dp:1, ep:4}" "${OVERLAP[@]}" --ep 4 --overlap-experts
python3 "$(dirname "${BASH_SOURCE[0]}")/../parallel/compare_losses.py" "$WORK/moe-one2.jsonl" "$WORK/ep4overlap.jsonl" \
  "an MoE at {dp:1, ep:4}, exchanges overlapped, on 2 hosts x 2 ranks"

# Hierarchical (automatic's pick across two hosts) sends 2(L-1)/L n = n
# between the L = 2 hosts from each host's leader; a flat ring 2(p-1)/p n
# = 1.5 n from the one rank of each host whose successor is on the other.
python3 - "$WORK" << 'PY'
import sys
work = sys.argv[1]
sent = lambda run: int(open(f"{work}/{run}.sent").read()) - int(open(f"{work}/{run}-short.sent").read())
ratio = sent("dp") / sent("ring")
print(f"host 0's link per step: hierarchical (automatic) / ring = {ratio:.3f} (2/3 by the formulas)")
if not 0.6 <= ratio <= 0.73: sys.exit("FAIL: hierarchical did not send about 2/3 of the ring's bytes between hosts")
PY

# Each host sees its own hostname, and nothing one host writes is seen by the other.
[[ $("$HOSTS" exec 1 hostname) == "$PXH_NAME-1" ]] || { echo "FAIL: host 1's hostname"; exit 1; }
"$HOSTS" exec 0 touch "$PXH_DISK/only-on-0" /dev/shm/only-on-0
"$HOSTS" exec 1 bash -c "[[ ! -e $PXH_DISK/only-on-0 && ! -e /dev/shm/only-on-0 ]]" ||
  { echo "FAIL: host 1 sees a file host 0 wrote"; exit 1; }

echo PASS
