#!/usr/bin/env bash
# The page at GET / in headless Chromium (check_page_streams.py): a prompt
# typed and Generate pressed, two DOM snapshots a second apart show the
# streamed text growing; after Stop no KV block is used; SIGTERM drains,
# exit 0.
#   page_test.sh PARALLAX SCREENSHOT_DIR
set -euo pipefail
PARALLAX=$1 SHOTS=$2
HERE=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
server=""
trap '[ -n "$server" ] && kill -9 "$server" 2> /dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; [ -f "$work/serve.log" ] && cat "$work/serve.log"; exit 1; }
mkdir -p "$SHOTS"

for i in $(seq 1 300); do echo "the quick brown fox jumps over the lazy dog $i"; done > "$work/text.txt"
"$PARALLAX" train --data "$work/text.txt" --block 512 --layers 1 --heads 2 --embd 16 --batch 2 --threads 1 --steps 2 \
  --eval-batches 1 --sample-tokens 0 --progress lines --no-predict --save "$work/ckpt" > "$work/train.log"
source "$HERE/serve_fixture.sh"
start_server "$work/serve.log" "$PARALLAX" serve --checkpoint "$work/ckpt" --port 0 --threads 1 --max-running 4

python3 "$HERE/check_page_streams.py" "http://127.0.0.1:$port/" "$SHOTS/serve-page.png" || fail "the page"
# Stop aborted the fetch; the request (ended or dropped) holds no block.
for _ in $(seq 1 100); do
  metrics=$(curl -s "http://127.0.0.1:$port/metrics")
  grep -q '^parallax_kv_blocks_used 0$' <<< "$metrics" && break
  sleep 0.1
done
grep -q '^parallax_kv_blocks_used 0$' <<< "$metrics" || fail "blocks still used after Stop: $metrics"
kill -TERM "$server"
status=0
wait "$server" || status=$?
server=""
[ "$status" = 0 ] || fail "serve exited $status on SIGTERM"
echo "page test passed (screenshot $SHOTS/serve-page.png)"
