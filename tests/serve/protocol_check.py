#!/usr/bin/env python3
"""`parallax serve`'s protocol under load, from a client written against the
SSE format with nothing but Python's http.client:

1. a stream is valid JSON chunks ending `data: [DONE]`, with the usage chunk
   stream_options.include_usage asks for, and the tokens it counts;
2. 200 connections open at once all complete, and /metrics shows at least
   32 streams running together (the server runs with --max-running 32);
3. 20 clients that leave mid-stream leave /health ok and every KV block
   free;
4. a client that stops reading its stream does not hold up the others:
   four streams started beside it finish while it still stalls.

   protocol_check.py URL
Exits non-zero naming the check that failed.
"""
import http.client
import json
import re
import socket
import sys
import threading
import time
from urllib.parse import urlparse

URL = urlparse(sys.argv[1])


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def connection(timeout=120):
    return http.client.HTTPConnection(URL.hostname, URL.port, timeout=timeout)


def get(path):
    c = connection(10)
    c.request("GET", path)
    r = c.getresponse()
    body = r.read().decode()
    c.close()
    return r.status, body


def metric(text, name):
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def stream(prompt, max_tokens, on_event=None):
    """A streamed completion; returns (events, usage). on_event(i) -> False leaves."""
    c = connection()
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        fail(f"stream of {prompt!r}: HTTP {r.status} {r.read()!r}")
    if not r.getheader("Content-Type", "").startswith("text/event-stream"):
        fail(f"stream content type {r.getheader('Content-Type')}")
    events, usage, buffer = [], None, b""
    while True:
        line = r.readline()
        if not line:
            fail(f"stream of {prompt!r} ended without data: [DONE]")
        buffer += line
        if line != b"\n":
            continue
        event, buffer = buffer.decode().strip(), b""
        if not event.startswith("data: "):
            continue  # an SSE comment (": queued")
        data = event[6:]
        if data == "[DONE]":
            break
        chunk = json.loads(data)  # raises on invalid JSON
        if chunk.get("usage"):
            usage = chunk["usage"]
            continue
        events.append(chunk)
        if on_event and on_event(len(events)) is False:
            c.sock.shutdown(socket.SHUT_RDWR)
            c.close()
            return events, None
    c.close()
    return events, usage


def check_format():
    events, usage = stream("the quick", 20)
    texts = [e["choices"][0]["text"] for e in events]
    reasons = [e["choices"][0]["finish_reason"] for e in events]
    if reasons[-1] != "length" or any(reasons[:-1]):
        fail(f"finish reasons {reasons}")
    if not usage or usage["completion_tokens"] != 20 or usage["prompt_tokens"] != 9 or usage["total_tokens"] != 29:
        fail(f"usage {usage}")
    if any(e["object"] != "text_completion" for e in events):
        fail("a chunk is not a text_completion")
    print(f"1. format: {len(events)} chunks, usage {usage}, text {''.join(texts)!r}")


def check_many_connections():
    peak, done, errors = [0], [0], []
    stop_polling = threading.Event()

    def poll():
        while not stop_polling.is_set():
            status, text = get("/metrics")
            running = metric(text, "parallax_requests_running") if status == 200 else None
            if running is not None:
                peak[0] = max(peak[0], int(running))
            time.sleep(0.02)

    def client(i):
        try:
            events, usage = stream(f"connection {i} says", 60 + i % 40)
            if usage["completion_tokens"] != 60 + i % 40:
                errors.append(f"connection {i}: usage {usage}")
            done[0] += 1
        except SystemExit:
            errors.append(f"connection {i} failed")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"connection {i}: {e!r}")

    poller = threading.Thread(target=poll)
    poller.start()
    clients = [threading.Thread(target=client, args=(i,)) for i in range(200)]
    for t in clients:
        t.start()
    for t in clients:
        t.join()
    stop_polling.set()
    poller.join()
    if errors:
        fail(f"{len(errors)} of 200 connections failed, the first: {errors[0]}")
    if peak[0] < 32:
        fail(f"at most {peak[0]} streams ran at once with 200 connections open; expected 32")
    print(f"2. 200 connections: all {done[0]} completed, at most {peak[0]} running at once")


def check_disconnects():
    def leaver(i):
        stream(f"leaver {i}", 400, on_event=lambda n: n < 3)

    threads = [threading.Thread(target=leaver, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    used = None
    for _ in range(100):
        status, text = get("/metrics")
        used = metric(text, "parallax_kv_blocks_used")
        if used == 0 and metric(text, "parallax_requests_running") == 0:
            break
        time.sleep(0.05)
    if used != 0:
        fail(f"{used} KV blocks still used after 20 clients left")
    status, health = get("/health")
    if status != 200:
        fail(f"/health after the disconnects: {status} {health}")
    cancelled = re.search(r'outcome="cancelled"\} (\S+)', text)
    print(f"3. 20 clients left mid-stream: /health ok, every KV block free "
          f"({cancelled.group(1) if cancelled else 0} choices cancelled by the server)")


def check_slow_reader():
    # A raw socket that sends a long stream's request and then never reads.
    slow = socket.create_connection((URL.hostname, URL.port))
    body = json.dumps({"prompt": "slow reader", "max_tokens": 480, "temperature": 0, "stream": True})
    slow.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
    time.sleep(0.2)
    start = time.time()
    finished = []

    def client(i):
        stream(f"beside the slow reader {i}", 100)
        finished.append(time.time() - start)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    slow.close()
    if len(finished) != 4:
        fail(f"only {len(finished)} of 4 streams beside a stalled reader finished within 30 s")
    print(f"4. beside a client that never reads, 4 streams of 100 tokens finished in {max(finished):.2f} s")


if __name__ == "__main__":
    check_format()
    check_many_connections()
    check_disconnects()
    check_slow_reader()
    print("protocol checks passed")
