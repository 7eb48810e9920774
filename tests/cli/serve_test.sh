#!/usr/bin/env bash
# `parallax serve` as a user runs it: train a tiny checkpoint, serve it on
# a free port, ask for a completion whole and streamed (curl -N), check
# /health, /metrics and a 400, then SIGTERM: it drains and exits 0.
# `sample` at temperature 0 gives the greedy text the server gives.
# usage: serve_test.sh PATH/TO/parallax
set -euo pipefail
px="$1"
work=$(mktemp -d)
server=""
trap '[ -n "$server" ] && kill -9 "$server" 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; [ -f "$work/serve.log" ] && cat "$work/serve.log"; exit 1; }

for i in $(seq 1 300); do echo "the quick brown fox jumps over the lazy dog $i"; done > "$work/text.txt"
"$px" train --data "$work/text.txt" --block 32 --layers 1 --heads 2 --embd 16 --batch 4 --threads 1 --steps 3 \
  --eval-batches 1 --sample-tokens 0 --progress lines --no-predict --save "$work/ckpt" > "$work/train.log"

source "$(dirname "${BASH_SOURCE[0]}")/../serve/serve_fixture.sh"
start_server "$work/serve.log" "$px" serve --checkpoint "$work/ckpt" --port 0 --threads 1 --block-tokens 4 --max-running 4
grep -q "KV cache of 128 tokens (32 blocks of 4" "$work/serve.log" || fail "no KV pool line (4 running x 8 blocks of 4)"
url="http://127.0.0.1:$port"

[ "$(curl -s "$url/health")" = '{"status":"ok"}' ] || fail "/health"
whole=$(curl -s "$url/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt":"the quick","max_tokens":12,"temperature":0}')
text=$(printf '%s' "$whole" | python3 -c 'import json,sys; r=json.load(sys.stdin); assert r["choices"][0]["finish_reason"]=="length"; assert r["usage"]["completion_tokens"]==12; print(r["choices"][0]["text"], end="")') \
  || fail "whole reply: $whole"
streamed=$(curl -sN "$url/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt":"the quick","max_tokens":12,"temperature":0,"stream":true}')
joined=$(printf '%s' "$streamed" | python3 -c '
import json, sys
events = [e for e in sys.stdin.read().split("\n\n") if e]
assert events[-1] == "data: [DONE]", events[-1]
print("".join(json.loads(e[6:])["choices"][0]["text"] for e in events[:-1]), end="")') || fail "stream: $streamed"
[ "$joined" = "$text" ] || fail "streamed '$joined' is not the whole reply '$text'"

status=$(curl -s -o "$work/bad.json" -w '%{http_code}' "$url/v1/completions" -d '{"prompt":"x","max_tokens":0}')
[ "$status" = 400 ] && grep -q '"param":"max_tokens"' "$work/bad.json" || fail "bad max_tokens: $status $(cat "$work/bad.json")"
# Read whole first: with pipefail, grep -q's early exit would fail curl by SIGPIPE.
metrics=$(curl -s "$url/metrics")
grep -q '^parallax_generated_tokens_total 24$' <<< "$metrics" || fail "/metrics: $metrics"

# sample prints raw bytes, serve valid UTF-8: compare the tokens (bytes),
# which logprobs name ("bytes:\xNN" past ASCII).
"$px" sample --checkpoint "$work/ckpt" --prompt "the quick" --tokens 12 --temperature 0 --threads 1 > "$work/sampled.bin"
curl -s "$url/v1/completions" -d '{"prompt":"the quick","max_tokens":12,"temperature":0,"logprobs":0}' > "$work/tokens.json"
python3 - "$work/sampled.bin" "$work/tokens.json" <<'PY' || fail "sample and serve disagree"
import json, sys
sampled = open(sys.argv[1], "rb").read()[:-1]  # the newline sample ends with
tokens = json.load(open(sys.argv[2]))["choices"][0]["logprobs"]["tokens"]
served = b"".join(bytes([int(t[8:], 16)]) if t.startswith("bytes:\\x") else t.encode() for t in tokens)
assert sampled == b"the quick" + served, (sampled, served)
PY

kill -TERM "$server"
wait "$server" && status=0 || status=$?
server=""
[ "$status" = 0 ] || fail "serve exited $status after SIGTERM"
grep -q "drained and stopped" "$work/serve.log" || fail "no drain line"
echo "serve_test: ok"
