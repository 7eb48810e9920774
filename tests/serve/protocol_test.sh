#!/usr/bin/env bash
# `parallax serve` under a real client's load (protocol_check.py): SSE
# format and usage, 200 connections with >= 32 streams running, 20 clients
# leaving mid-stream, a stalled reader beside others; then SIGTERM drains.
# The server ran with --run-dir: `parallax report` draws the serving run
# (queue, batch, KV use, latency over time), rendered in headless Chromium.
#   protocol_test.sh PARALLAX SCREENSHOT_DIR
set -euo pipefail
PARALLAX=$1 SHOTS=$2
HERE=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
server=""
trap '[ -n "$server" ] && kill -9 "$server" 2> /dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; [ -f "$work/serve.log" ] && tail -5 "$work/serve.log"; exit 1; }

for i in $(seq 1 300); do echo "the quick brown fox jumps over the lazy dog $i"; done > "$work/text.txt"
"$PARALLAX" train --data "$work/text.txt" --block 512 --layers 2 --heads 2 --embd 64 --batch 2 --threads 1 --steps 2 \
  --eval-batches 1 --sample-tokens 0 --progress lines --no-predict --save "$work/ckpt" > "$work/train.log"
source "$HERE/serve_fixture.sh"
start_server "$work/serve.log" "$PARALLAX" serve --checkpoint "$work/ckpt" --port 0 --threads 2 --max-running 32 \
  --kv-memory 64M --run-dir "$work/serving"
python3 "$HERE/protocol_check.py" "http://127.0.0.1:$port" || fail "protocol"
kill -TERM "$server"
status=0
wait "$server" || status=$?
server=""
[ "$status" = 0 ] || fail "serve exited $status on SIGTERM"

[ -s "$work/serving/serve.jsonl" ] && [ -s "$work/serving/serve.json" ] || fail "no serve.jsonl or serve.json"
"$PARALLAX" report "$work/serving" > "$work/report.txt" || fail "report: $(cat "$work/report.txt")"
cat "$work/report.txt"
grep -q "serving at tp 1 (iteration scheduling), 2.. requests" "$work/report.txt" || fail "no serving headline"
mkdir -p "$SHOTS"
python3 "$HERE/../report/check_rendered_report.py" "$work/serving/report.html" "$SHOTS/serving-report.png" \
  "$work/serving" || fail "the serving report"
