# Sourced by the tests/hosts/ scripts: two scripts/hosts.sh hosts of this
# test's own (names and disks with its pid, so tests never meet), taken
# down on every exit path, and a scratch directory.
#
#   source hosts_fixture.sh PREFIX [hosts.sh up's options...]
# sets HOSTS (the script), WORK; exits 77 (CTest's "skipped"), saying why,
# without root or `ip netns`; fails if `down` leaves anything behind.
HOSTS=$(realpath "$(dirname "${BASH_SOURCE[0]}")/../../scripts/hosts.sh")
if [[ $(id -u) != 0 ]] || ! ip netns list > /dev/null 2>&1; then
  echo "SKIP: network namespaces need root and iproute2's ip netns"; exit 77
fi
export PXH_NAME=$1$$ PXH_DISK=/mnt/$1$$
WORK=$(mktemp -d)
cleanup() {
  "$HOSTS" down > /dev/null 2>&1 || { echo "FAIL: hosts.sh down left something behind"; exit 1; }
  rm -rf "$WORK" "$PXH_DISK"
}
trap cleanup EXIT
"$HOSTS" up 2 "${@:2}"
