#!/usr/bin/env bash
# Two hosts for real (scripts/hosts.sh): network namespaces with their own
# hostnames, private /dev/shm and disk, joined by a bridge whose host
# links are shaped to 1 Gb/s. Under OpenMPI with 2 ranks on each host,
# `parallax train` must give one rank's per-step losses (1e-5, over
# PX_TEST_STEPS, default 50) for data parallelism, ZeRO-3, dp=2 x tp=2 (tp
# inside a host), pp=2 x dp=2 (the stages on different hosts) and pp=2 x
# tp=2; the bytes host 0's link carried must match what parallax accounts
# its two ranks sent between hosts; and teardown must leave no namespace,
# veth or state behind.
#
# Needs root and `ip netns`: otherwise it says why and exits 77 (CTest's
# "skipped").
#
#   two_hosts_test.sh PARALLAX
set -euo pipefail
PARALLAX=$(realpath "$1")
HOSTS=$(realpath "$(dirname "${BASH_SOURCE[0]}")/../../scripts/hosts.sh")
if [[ $(id -u) != 0 ]] || ! ip netns list > /dev/null 2>&1; then
  echo "SKIP: network namespaces need root and iproute2's ip netns"; exit 77
fi
export PXH_NAME=pxt$$ PXH_DISK=/mnt/pxt$$
WORK=$(mktemp -d)
cleanup() {
  "$HOSTS" down > /dev/null 2>&1 || { echo "FAIL: hosts.sh down left something behind"; exit 1; }
  rm -rf "$WORK" "$PXH_DISK"
}
trap cleanup EXIT
"$HOSTS" up 2 --gbps 1

STEPS=${PX_TEST_STEPS:-50}
GPT=(train --model gpt --layers 2 --heads 2 --embd 32 --block 32 --batch 8 --steps "$STEPS" --dropout 0.1
     --eval-every 0 --eval-batches 2 --sample-tokens 0 --threads 1 --progress lines --no-predict)
"$PARALLAX" "${GPT[@]}" --metrics "$WORK/one.jsonl" > "$WORK/one.log"

# NAME MESH FLAGS...: 2 hosts x 2 ranks against one rank. The metrics go
# to host 0's private disk (rank 0 writes them), copied out after.
case_on_two_hosts() {
  local name=$1 mesh=$2
  shift 2
  "$HOSTS" mpirun --host "$PXH_NAME-0:2,$PXH_NAME-1:2" -np 4 "$PARALLAX" "${GPT[@]}" "$@" \
    --metrics "$PXH_DISK/$name.jsonl" > "$WORK/$name.log" 2>&1 ||
    { echo "FAIL: $name on two hosts:"; cat "$WORK/$name.log"; exit 1; }
  grep -q "4 ranks, mesh $mesh (mpi)" "$WORK/$name.log" ||
    { echo "FAIL: $name did not run mesh $mesh on 4 MPI ranks:"; cat "$WORK/$name.log"; exit 1; }
  "$HOSTS" exec 0 cat "$PXH_DISK/$name.jsonl" > "$WORK/$name.jsonl"
  [[ ! -e $PXH_DISK/$name.jsonl ]] || { echo "FAIL: host 0's disk is visible outside it"; exit 1; }
  python3 "$(dirname "${BASH_SOURCE[0]}")/../parallel/compare_losses.py" "$WORK/one.jsonl" "$WORK/$name.jsonl" \
    "$name on 2 hosts x 2 ranks"
}

# Data parallelism, with the bytes on host 0's link counted around it.
read -r tx0 rx0 < <("$HOSTS" bytes 0)
case_on_two_hosts dp "{dp:4}"
read -r tx1 rx1 < <("$HOSTS" bytes 0)
case_on_two_hosts zero3 "{dp:4}" --zero 3
case_on_two_hosts tp "{dp:2, tp:2}" --mesh dp=2,tp=2
case_on_two_hosts pp "{pp:2, dp:2}" --mesh pp=2,dp=2 --micro-batches 2
case_on_two_hosts pptp "{pp:2, dp:1, tp:2}" --mesh pp=2,tp=2 --micro-batches 2

# Each host sees its own hostname, and nothing one host writes is seen by the other.
[[ $("$HOSTS" exec 1 hostname) == "$PXH_NAME-1" ]] || { echo "FAIL: host 1's hostname"; exit 1; }
"$HOSTS" exec 0 touch "$PXH_DISK/only-on-0" /dev/shm/only-on-0
"$HOSTS" exec 1 bash -c "[[ ! -e $PXH_DISK/only-on-0 && ! -e /dev/shm/only-on-0 ]]" ||
  { echo "FAIL: host 1 sees a file host 0 wrote"; exit 1; }

echo "host 0's link during the dp run: sent $((tx1 - tx0)) bytes, received $((rx1 - rx0))"
echo PASS
