# Sourced by the serving test scripts (tests/serve, tests/cli/serve_test.sh,
# tests/hosts/serve_hosts_test.sh), after they define fail():
#   start_server LOG CMD...  runs CMD (`parallax serve --port 0 ...`, or
#   mpirun of it) in the background with its output in LOG, waits up to
#   30 s for the port it prints, and sets $server (its pid) and $port;
#   fails when it exits first or prints none.
start_server() {
  local log=$1
  shift
  "$@" > "$log" 2>&1 &
  server=$!
  port=""
  for _ in $(seq 1 600); do
    port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$log")
    [ -n "$port" ] && return 0
    kill -0 "$server" 2> /dev/null || fail "serve exited before listening"
    sleep 0.05
  done
  fail "serve printed no port"
}
