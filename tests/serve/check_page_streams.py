#!/usr/bin/env python3
"""The page `parallax serve` answers at GET / as a person uses it, in headless
Chromium driven over the DevTools protocol: type a prompt, press Generate,
and watch the text stream in. The page's network is throttled (DevTools'
network emulation, a few KB/s) so a stream of a few hundred tokens lasts
seconds; two DOM snapshots a second apart must show the generated text
growing, the later one extending the earlier; a screenshot is kept.

   check_page_streams.py URL SCREENSHOT.png

Standard library only: the WebSocket client below speaks just what the
DevTools endpoint needs (RFC 6455 text frames, client-masked). Exits
non-zero naming the check that failed.
"""
import base64
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request


class WebSocket:
    def __init__(self, url):
        m = re.match(r"ws://([^:/]+):(\d+)(/.*)", url)
        self.sock = socket.create_connection((m.group(1), int(m.group(2))), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {m.group(3)} HTTP/1.1\r\nHost: {m.group(1)}:{m.group(2)}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.sock.recv(1)
        if b" 101 " not in head.split(b"\r\n")[0]:
            sys.exit(f"FAIL: DevTools refused the WebSocket: {head!r}")

    def send(self, text):
        data, mask = text.encode(), os.urandom(4)
        n = len(data)
        header = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else
                                  bytes([0x80 | 126]) + struct.pack(">H", n) if n < 65536 else
                                  bytes([0x80 | 127]) + struct.pack(">Q", n))
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _exact(self, n):
        out = b""
        while len(out) < n:
            part = self.sock.recv(n - len(out))
            if not part:
                sys.exit("FAIL: DevTools closed the WebSocket")
            out += part
        return out

    def receive(self):
        message = b""
        while True:
            b0, b1 = self._exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._exact(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._exact(8))[0]
            message += self._exact(n)
            if b0 & 0x80:
                return message.decode()


class DevTools:
    def __init__(self, ws):
        self.ws, self.next_id = ws, 0

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            reply = json.loads(self.ws.receive())
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    sys.exit(f"FAIL: {method}: {reply['error']}")
                return reply.get("result", {})

    def evaluate(self, expression):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            sys.exit(f"FAIL: the page threw on {expression!r}: {result['exceptionDetails']}")
        return result["result"].get("value")


def main():
    url, screenshot = sys.argv[1], sys.argv[2]
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        sys.exit("FAIL: no chromium on PATH (scripts/setup.sh installs it)")
    profile = tempfile.mkdtemp()
    browser = subprocess.Popen([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                                f"--user-data-dir={profile}", "--remote-debugging-port=0", "about:blank"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        endpoint = None
        deadline = time.time() + 60
        while endpoint is None and time.time() < deadline:
            line = browser.stderr.readline()
            if not line and browser.poll() is not None:
                sys.exit("FAIL: chromium exited before DevTools listened")
            m = re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line)
            if m:
                endpoint = f"http://127.0.0.1:{m.group(1)}"
        if endpoint is None:
            sys.exit("FAIL: chromium printed no DevTools endpoint in 60 s")
        pages = [t for t in json.load(urllib.request.urlopen(endpoint + "/json/list")) if t["type"] == "page"]
        tools = DevTools(WebSocket(pages[0]["webSocketDebuggerUrl"]))
        tools.call("Network.enable")
        tools.call("Page.enable")
        tools.call("Page.navigate", url=url)
        for _ in range(200):
            if tools.evaluate("document.readyState") == "complete" and tools.evaluate("!!document.getElementById('go')"):
                break
            time.sleep(0.05)
        else:
            sys.exit(f"FAIL: {url} did not load a page with a Generate button")
        # A person's slow link: each streamed event is ~200 bytes, so ~15 tokens a second.
        tools.call("Network.emulateNetworkConditions", offline=False, latency=20, downloadThroughput=3000,
                   uploadThroughput=-1)
        tools.evaluate("document.getElementById('prompt').value = 'the quick brown fox';"
                       "document.getElementById('max_tokens').value = 400;"
                       "document.getElementById('temperature').value = 0;"
                       "document.getElementById('go').click(); true")
        generated = "(document.getElementById('generated') || {}).textContent || ''"
        for _ in range(200):  # the first tokens
            if tools.evaluate(generated):
                break
            time.sleep(0.05)
        first = tools.evaluate(generated)
        time.sleep(1.0)
        second = tools.evaluate(generated)
        shot = tools.call("Page.captureScreenshot", format="png")["data"]
        with open(screenshot, "wb") as f:
            f.write(base64.b64decode(shot))
        print(f"snapshot 1: {len(first)} characters; 1 s later: {len(second)} characters")
        if not first:
            sys.exit("FAIL: no generated text appeared within 10 s of Generate")
        if len(second) <= len(first) or not second.startswith(first):
            sys.exit(f"FAIL: the text did not grow in a second: {first!r} then {second!r}")
        if tools.evaluate("document.getElementById('stop').disabled"):
            sys.exit("FAIL: Stop is disabled while the text streams")
        tools.evaluate("document.getElementById('stop').click(); true")  # the server sees the disconnect
        print(f"the page streams: screenshot {screenshot}")
    finally:
        browser.kill()
        browser.wait()
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    main()
