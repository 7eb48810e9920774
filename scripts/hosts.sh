#!/usr/bin/env bash
# Separate hosts on this machine, for multi-host tests: Linux network
# namespaces joined by a bridge, each "host" with its own network stack,
# hostname and private disk, nothing shared with the others but the
# network. Root only.
#
#   scripts/hosts.sh up N [--gbps G] [--cpu HOST:PERCENT,...]
#                                      hosts <name>-0 .. <name>-(N-1) at 10.77.0.1 ..
#                                      (--gbps: each host's link shaped to G Gb/s each
#                                      way by tbf; unshaped without it. --cpu: host
#                                      HOST's processes together get PERCENT of one
#                                      core, e.g. 0:50,3:12.5; others are unlimited)
#   scripts/hosts.sh cpu HOST PERCENT  change host HOST's CPU quota now, running jobs
#                                      included (PERCENT "off": no limit)
#   scripts/hosts.sh down              remove every namespace, veth, qdisc and cgroup it made
#   scripts/hosts.sh check             exit 1 naming what `down` left behind
#   scripts/hosts.sh exec I CMD...     run CMD as host I (see below)
#   scripts/hosts.sh agent HOST CMD... OpenMPI's remote-shell agent (plm_rsh_agent)
#                                      and MPICH's (-launcher rsh -launcher-exec):
#                                      runs the shell command CMD as HOST
#   scripts/hosts.sh bytes I           host I's link counters: "tx_bytes rx_bytes"
#   scripts/hosts.sh mpirun ARGS...    OpenMPI's mpirun as host 0 with the agent,
#                                      over the hosts' links (--host <name>-0:2,...)
#   scripts/hosts.sh mpiexec ARGS...   MPICH's mpiexec.mpich the same way
#                                      (-hosts <name>-0:2,...; UCX on TCP over eth0)
#
# Every host (`exec`) sees: its namespace's network (eth0 at 10.77.0.(I+1),
# lo), hostname <name>-I in a UTS namespace of its own, an /etc/hosts
# naming every host, and in a mount namespace of its own a private
# /dev/shm and $PXH_DISK (default /mnt/pxh): directories under the state
# directory that only host I's processes see, kept between `exec`s until
# `down` (a checkpoint written there by one run is there for the next).
# The rest of the filesystem (the repository, the binaries, /tmp) is seen
# by all, as an installed program and a cluster's shared home are.
#
# The bridge lives in a namespace of its own (<name>-switch): the
# machine's own network is never touched. Names: --name P (default pxh,
# or $PXH_NAME) before the subcommand.
#
# CPU quotas (hosts of different speeds): every host's processes run in a
# cgroup of its own, parallax-hosts-<name>/<I> under the cpu controller
# (cgroup v2's cpu.max or v1's cpu.cfs_quota_us, whichever the machine
# mounts), with a 10 ms period so that a throttled host slows smoothly
# rather than in 100 ms stalls (a quota under 10% of a core takes a longer
# period: v1 grants at least 1 ms a period). Without a cpu controller the
# hosts come up unlimited, and --cpu and `cpu` are errors.
set -euo pipefail

NAME=${PXH_NAME:-pxh}
DISK=${PXH_DISK:-/mnt/pxh}
SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
die() { echo "hosts.sh: $*" >&2; exit 1; }

while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --name) NAME=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
[[ $# -gt 0 ]] || usage 1
COMMAND=$1; shift
STATE=/run/parallax-hosts/$NAME
SWITCH=$NAME-switch

require_root() {
  [[ $(id -u) == 0 ]] || die "needs root (network and mount namespaces)"
  command -v ip > /dev/null || die "needs iproute2's ip"
}

hosts() { cat "$STATE/count" 2> /dev/null || echo 0; }

# The cpu controller's version, mount and (v1) the controllers mounted with
# it: "2 /sys/fs/cgroup -" or "1 <mount> cpu[,cpuacct]"; empty without one.
# (/sys/fs/cgroup can be a plain tmpfs holding v1's mounts, so the file
# system type decides, not the path.)
cpu_controller() {
  if [[ $(stat -fc %T /sys/fs/cgroup 2> /dev/null) == cgroup2fs ]] &&
     grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2> /dev/null; then
    echo "2 /sys/fs/cgroup -"
    return
  fi
  awk '$3 == "cgroup" && $4 ~ /(^|,)cpu(,|$)/ {
    n = split($4, o, ","); c = ""
    for (k = 1; k <= n; ++k) if (o[k] == "cpu" || o[k] == "cpuacct") c = c (c == "" ? "" : ",") o[k]
    print "1 " $2 " " c; exit }' /proc/mounts
}

# cgroup I: host I's directory (after up made it).
cgroup_of() { echo "$(cat "$STATE/cgroup")/$1"; }

# set_quota I PERCENT: host I's processes together get PERCENT of a core
# ("off": unlimited).
set_quota() {
  local i=$1 percent=$2 version dir period quota
  [[ -s $STATE/cgroup ]] || die "cpu: no cpu cgroup controller on this machine (hosts '$NAME' run unlimited)"
  [[ $percent == off || $percent =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "cpu: PERCENT is '$percent'; expected a number or 'off'"
  dir=$(cgroup_of "$i")
  version=$(cat "$STATE/cgroup_version")
  if [[ $percent == off ]]; then
    if [[ $version == 2 ]]; then echo "max 10000" > "$dir/cpu.max"; else echo -1 > "$dir/cpu.cfs_quota_us"; fi
    return
  fi
  # quota = PERCENT% of the period, at least 1 ms (v1's floor): a longer period below 10%.
  read -r period quota < <(awk -v p="$percent" 'BEGIN {
    if (p <= 0) exit 1
    period = 10000; if (p / 100 * period < 1000) period = int(1000 * 100 / p + 0.5)
    printf "%d %d\n", period, int(p / 100 * period + 0.5) }') || die "cpu: PERCENT is '$percent'; expected > 0"
  if [[ $version == 2 ]]; then
    echo "$quota $period" > "$dir/cpu.max"
  else
    # v1 checks quota against the period it holds: lift the quota first.
    echo -1 > "$dir/cpu.cfs_quota_us"
    echo "$period" > "$dir/cpu.cfs_period_us"
    echo "$quota" > "$dir/cpu.cfs_quota_us"
  fi
}

# A host index of the hosts that are up.
check_host() {
  [[ $1 =~ ^[0-9]+$ && $1 -lt $(hosts) ]] || die "$2: host '$1' is not one of 0 .. $(($(hosts) - 1))"
}
address() { echo "10.77.0.$(($1 + 1))"; }

up() {
  local n=$1 gbps="" cpu=""
  shift
  while [[ $# -gt 0 ]]; do
    case $1 in
      --gbps) gbps=$2; shift 2 ;;
      --cpu) cpu=$2; shift 2 ;;
      *) die "up: unknown option '$1'" ;;
    esac
  done
  [[ $n =~ ^[0-9]+$ && $n -ge 1 && $n -le 200 ]] || die "up: N is '$n'; expected 1 to 200 hosts"
  [[ -z $gbps || $gbps =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "up: --gbps is '$gbps'; expected a rate in Gb/s"
  require_root
  [[ ! -e $STATE ]] || die "hosts '$NAME' are up already ($STATE); run 'hosts.sh down' first"
  mkdir -p "$STATE"
  # A failure part-way leaves nothing behind.
  trap 'down > /dev/null 2>&1 || true' ERR
  echo "$n" > "$STATE/count"
  # MPICH's launcher takes one executable as its remote shell, no arguments.
  printf '#!/bin/sh\nPXH_DISK=%q exec %q --name %q agent "$@"\n' "$DISK" "$SELF" "$NAME" > "$STATE/agent"
  chmod +x "$STATE/agent"
  ip netns add "$SWITCH"
  ip -n "$SWITCH" link add br0 type bridge
  ip -n "$SWITCH" link set br0 up
  : > "$STATE/hosts"
  printf '127.0.0.1 localhost\n' >> "$STATE/hosts"
  for ((i = 0; i < n; ++i)); do printf '%s %s\n' "$(address "$i")" "$NAME-$i" >> "$STATE/hosts"; done
  for ((i = 0; i < n; ++i)); do
    local ns=$NAME-$i
    ip netns add "$ns"
    ip link add "$ns-eth" type veth peer name "$ns-sw"
    ip link set "$ns-eth" netns "$ns"
    ip link set "$ns-sw" netns "$SWITCH"
    ip -n "$SWITCH" link set "$ns-sw" master br0
    ip -n "$SWITCH" link set "$ns-sw" up
    ip -n "$ns" link set "$ns-eth" name eth0
    ip -n "$ns" addr add "$(address "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    if [[ -n $gbps ]]; then
      # Token bucket both ways: out of the host on its eth0, into it on
      # the switch's end of its veth.
      local rate
      rate=$(awk -v g="$gbps" 'BEGIN { printf "%dmbit", g * 1000 }')
      tc -n "$ns" qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 100ms
      tc -n "$SWITCH" qdisc add dev "$ns-sw" root tbf rate "$rate" burst 256kb latency 100ms
    fi
    mkdir -p "$STATE/$i/shm" "$STATE/$i/disk"
    chmod 1777 "$STATE/$i/shm"
  done
  local controller
  controller=$(cpu_controller)
  if [[ -n $controller ]]; then
    local version root options
    read -r version root options <<< "$controller"
    if [[ $version == 2 ]]; then echo +cpu > "$root/cgroup.subtree_control" 2> /dev/null || true; fi
    mkdir -p "$root/parallax-hosts-$NAME"
    if [[ $version == 2 ]]; then echo +cpu > "$root/parallax-hosts-$NAME/cgroup.subtree_control"; fi
    echo "$root/parallax-hosts-$NAME" > "$STATE/cgroup"
    echo "$version" > "$STATE/cgroup_version"
    echo "$options" > "$STATE/cgroup_options"
    mkdir -p "$STATE/cgroup-mount"
    for ((i = 0; i < n; ++i)); do mkdir -p "$root/parallax-hosts-$NAME/$i"; done
  elif [[ -n $cpu ]]; then
    die "up: --cpu needs the cpu cgroup controller (cgroup v2 cpu.max or v1 cpu.cfs_quota_us); this machine mounts neither"
  fi
  local item
  for item in ${cpu//,/ }; do
    [[ $item == *:* ]] || die "up: --cpu item '$item' is not HOST:PERCENT"
    check_host "${item%%:*}" "up --cpu"
    set_quota "${item%%:*}" "${item#*:}"
  done
  trap - ERR
  echo "hosts.sh: $n hosts up: $NAME-0 .. $NAME-$((n - 1)) at $(address 0) .. $(address $((n - 1)))${gbps:+, links at $gbps Gb/s}${cpu:+, CPU quotas $cpu (% of a core)}"
}

down() {
  require_root
  local n
  n=$(hosts)
  for ((i = 0; i < n; ++i)); do ip netns del "$NAME-$i" 2> /dev/null || true; done
  # Namespaces from a failed `up` whose count was not written yet.
  for ns in $(ip netns list | awk '{print $1}'); do
    [[ $ns == "$NAME"-[0-9]* || $ns == "$SWITCH" ]] && ip netns del "$ns" 2> /dev/null
  done
  # A cgroup goes once it holds no process: any left (a job still running)
  # move to the controller's root, unlimited, rather than be killed.
  local parent
  parent=$(cat "$STATE/cgroup" 2> /dev/null || true)
  if [[ -n $parent && -d $parent ]]; then
    local root
    root=$(dirname "$parent")
    for dir in "$parent"/*/; do
      [[ -d $dir ]] || continue
      for pid in $(cat "$dir/cgroup.procs" 2> /dev/null); do echo "$pid" > "$root/cgroup.procs" 2> /dev/null || true; done
      rmdir "$dir" 2> /dev/null || true
    done
    rmdir "$parent" 2> /dev/null || true
  fi
  rm -rf "$STATE"
  check
}

check() {
  local left
  left=$(ip netns list | awk '{print $1}' | grep -E "^$NAME-([0-9]+|switch)$" || true)
  left+=$(ip -o link show | awk -F': ' '{print $2}' | grep -E "^$NAME-" || true)
  [[ -e $STATE ]] && left+=" $STATE"
  local controller
  controller=$(cpu_controller)
  local root
  root=$(awk '{ print $2 }' <<< "$controller")
  [[ -n $root && -d $root/parallax-hosts-$NAME ]] && left+=" $root/parallax-hosts-$NAME"
  if [[ -n ${left// /} ]]; then
    echo "hosts.sh: left behind: $(echo $left)" >&2
    return 1
  fi
}

# exec I CMD...: CMD as host I (network, hostname, /etc/hosts, private dirs).
host_exec() {
  local i=$1
  shift
  [[ -e $STATE/count ]] || die "hosts '$NAME' are not up (hosts.sh up N)"
  [[ $i =~ ^[0-9]+$ && $i -lt $(hosts) ]] || die "exec: host '$i' is not one of 0 .. $(($(hosts) - 1))"
  [[ $# -gt 0 ]] || die "exec: no command"
  # The host's CPU quota holds for the command and everything it starts:
  # it joins host I's cgroup from inside its mount namespace, through a
  # mount of the cpu hierarchy of its own (`ip netns exec` hides
  # /sys/fs/cgroup, and an agent runs inside another host's namespaces).
  local version="" options="" group=""
  if [[ -s $STATE/cgroup ]]; then
    version=$(cat "$STATE/cgroup_version")
    options=$(cat "$STATE/cgroup_options")
    group=$(basename "$(cat "$STATE/cgroup")")/$i
  fi
  # The mount namespace's changes stay in it (rprivate); the private
  # directories are bound over the shared paths.
  exec ip netns exec "$NAME-$i" unshare --uts --mount -- bash -c '
    set -e
    hostname "$1"
    mount --make-rprivate /
    mount --bind "$2/hosts" /etc/hosts
    mount --bind "$2/$3/shm" /dev/shm
    mkdir -p "$4" && mount --bind "$2/$3/disk" "$4"
    if [ -n "$5" ]; then
      # Started from another host (an agent): that host'"'"'s mount came along; this one replaces it.
      if mountpoint -q "$2/cgroup-mount"; then umount "$2/cgroup-mount"; fi
      if [ "$5" = 2 ]; then mount -t cgroup2 none "$2/cgroup-mount"; else mount -t cgroup -o "$6" none "$2/cgroup-mount"; fi
      echo $$ > "$2/cgroup-mount/$7/cgroup.procs"
      # Left mounted (in this mount namespace alone): a process reads its
      # own quota through it (/proc/self/cgroup under /proc/self/mountinfo),
      # as `parallax calibrate` does to know the hosts do not contend.
    fi
    shift 7
    exec "$@"' host-exec "$NAME-$i" "$STATE" "$i" "$DISK" "$version" "$options" "$group" "$@"
}

# agent [ssh-style options] HOST CMD...: the command line is for a remote
# shell (OpenMPI writes "PATH=...; export PATH; orted ..."), so it runs in one.
agent() {
  while [[ $# -gt 0 && $1 == -* ]]; do shift; done
  local host=$1
  shift
  local i=${host##"$NAME"-}
  [[ $host == "$NAME-$i" && $i =~ ^[0-9]+$ ]] || die "agent: '$host' is not a host of '$NAME' ($NAME-0 ..)"
  host_exec "$i" sh -c "$*"
}

bytes() {
  local i=$1
  echo "$(ip netns exec "$NAME-$i" cat /sys/class/net/eth0/statistics/tx_bytes) $(ip netns exec "$NAME-$i" cat /sys/class/net/eth0/statistics/rx_bytes)"
}

case $COMMAND in
  up) [[ $# -ge 1 ]] || die "up: how many hosts?"; up "$@" ;;
  down) down ;;
  check) check ;;
  exec) [[ $# -ge 1 ]] || die "exec: which host?"; require_root; host_exec "$@" ;;
  agent) agent "$@" ;;
  bytes) [[ $# -eq 1 ]] || die "bytes: which host?"; bytes "$1" ;;
  cpu)
    [[ $# -eq 2 ]] || die "cpu: expected HOST PERCENT"
    require_root
    [[ -e $STATE/count ]] || die "hosts '$NAME' are not up (hosts.sh up N)"
    check_host "$1" cpu
    set_quota "$1" "$2" ;;
  mpirun)
    require_root
    host_exec 0 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PXH_NAME="$NAME" PXH_DISK="$DISK" \
      mpirun --mca plm_rsh_agent "$SELF agent" --mca oob_tcp_if_include eth0 --mca btl_tcp_if_include eth0 \
      --mca btl tcp,vader,self "$@" ;;
  mpiexec)
    # UCX (MPICH's transport) would move data over shared memory across
    # the namespaces: only TCP over eth0 crosses the hosts' links.
    require_root
    host_exec 0 env PXH_NAME="$NAME" PXH_DISK="$DISK" UCX_TLS=tcp,self UCX_NET_DEVICES=eth0 \
      mpiexec.mpich -launcher rsh -launcher-exec "$STATE/agent" -iface eth0 \
      -genv UCX_TLS tcp,self -genv UCX_NET_DEVICES eth0 "$@" ;;
  *) die "unknown command '$COMMAND' (see --help)" ;;
esac
