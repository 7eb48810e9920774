#!/usr/bin/env python3
"""Renders a `parallax report` page in headless Chromium and checks what a
reader would see: the script finished without errors, every logged loss is
plotted, and a screenshot of the whole page is not blank.

   check_rendered_report.py REPORT.html SCREENSHOT.png RUN_DIR [RUN_DIR...]

The page's side of the contract is in src/report/assets/report.js: body
data-report-status is "ok" or "errors"; errors are listed in
<pre id="script-errors">; each line-chart series is <path class="px-series"
data-chart data-run data-series data-points=N> whose d has N vertices. A serving run's directory (serve.jsonl,
`parallax serve --run-dir`) must have every window in its queue and KV
charts instead of losses. Exits
non-zero naming every check that failed. Standard library only.
"""
import json
import math
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import zlib
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

WIDTH = 1400
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--virtual-time-budget=10000", "--run-all-compositor-stages-before-draw", "--hide-scrollbars",
                  "--enable-logging=stderr", "--v=0"]
# A console message as Chromium logs it to stderr, old and new formats (the
# message may span lines):
#   [..:INFO:CONSOLE(12)] "Uncaught TypeError: ...", source: file:///x.html (12)
#   [..:INFO:CONSOLE:12] "Uncaught TypeError: ...", source: file:///x.html (12)
CONSOLE_MESSAGE = re.compile(r':CONSOLE(?:\(\d+\)|:\d+)?\] "(.*?)", source: (\S*)', re.S)


def chromium():
    for candidate in ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if candidate and os.path.exists(candidate):
            return candidate
    sys.exit("FAIL: no chromium (apt-get install -y --no-install-recommends chromium)")


# Headless Chromium now and then never exits after a screenshot (seen once
# in CI: a 9126-px tall page, 180 s, under load; the same load passes in
# seconds otherwise). A load that outlives its time is killed with every
# process it started and tried again, up to ATTEMPTS times, saying so.
ATTEMPTS, ATTEMPT_TIMEOUT_S = 3, 90


def run_chromium(url, extra):
    """Chromium's stdout and stderr for one headless load of url, with a fresh profile."""
    for attempt in range(1, ATTEMPTS + 1):
        with tempfile.TemporaryDirectory(prefix="px-chromium-") as profile:
            process = subprocess.Popen([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *extra, url],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                       start_new_session=True)
            try:
                stdout, stderr = process.communicate(timeout=ATTEMPT_TIMEOUT_S)
                return stdout, stderr
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate()
                print(f"chromium did not exit within {ATTEMPT_TIMEOUT_S} s loading {url} (attempt {attempt} of "
                      f"{ATTEMPTS}){'; trying again' if attempt < ATTEMPTS else ''}", flush=True)
    sys.exit(f"FAIL: chromium did not exit within {ATTEMPT_TIMEOUT_S} s in {ATTEMPTS} attempts loading {url}")


class Page(HTMLParser):
    """The parts of the rendered DOM the checks look at."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.body = {}
        self.series = []      # attributes of every path.px-series
        self.charts = []      # attributes of every svg.px-chart
        self.errors_text = None
        self._in_errors = False
        self.text = []        # every text node, in order

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "body":
            self.body = a
        elif tag == "path" and "px-series" in classes:
            self.series.append(a)
        elif tag == "svg" and "px-chart" in classes:
            self.charts.append(a)
        elif a.get("id") == "script-errors":
            self._in_errors = True
            self.errors_text = ""

    def handle_endtag(self, tag):
        if tag == "pre":
            self._in_errors = False

    def handle_data(self, data):
        self.text.append(data)
        if self._in_errors:
            self.errors_text += data


def vertices(d):
    """The number of points a path's d visits: one per M or L command, and nothing else allowed."""
    commands = re.findall(r"[A-Za-z]", d or "")
    if any(c not in "ML" for c in commands):
        return -1
    numbers = re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", d or "")
    return len(commands) if len(numbers) == 2 * len(commands) else -1


def logged_points(run_dir):
    """Lines of metrics.jsonl that the loss chart must plot: train losses (not skipped batches), val losses."""
    train = val = 0
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                m = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"FAIL: {run_dir}/metrics.jsonl line {number} is not JSON: {e}")
            finite = lambda key: isinstance(m.get(key), (int, float)) and not isinstance(m.get(key), bool) \
                and math.isfinite(m[key])
            if finite("train_loss") and "skipped_batch" not in m:
                train += 1
            if finite("val_loss"):
                val += 1
    return {"train_loss": train, "val_loss": val}


def moe_layers(run_dir):
    """The mixture-of-experts layers the run's metrics report (train's "moe" entries)."""
    layers = set()
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            for layer in m.get("moe", []) if isinstance(m, dict) else []:
                layers.add(layer["layer"])
    return sorted(layers)


def checked_runs(run_dir):
    """The published runs a GPU-preset plan.json names (plan --explain's checked_runs), or []."""
    path = Path(run_dir) / "plan.json"
    return (json.loads(path.read_text()).get("checked_runs") or []) if path.exists() else []


def serving_run(run_dir):
    return os.path.exists(os.path.join(run_dir, "serve.jsonl")) and not os.path.exists(
        os.path.join(run_dir, "metrics.jsonl"))


def serving_windows(run_dir):
    """Lines of a serving run's serve.jsonl (parallax serve --run-dir): one point of each gauge a line."""
    with open(os.path.join(run_dir, "serve.jsonl")) as f:
        return sum(1 for line in f if line.strip())


def check_series(page, chart, run, expected, failures):
    for name, count in expected.items():
        paths = [p for p in page.series
                 if p.get("data-chart") == chart and p.get("data-run") == run and p.get("data-series") == name]
        if count == 0:
            if any(p.get("data-points") not in (None, "0") for p in paths):
                failures.append(f"{chart}/{run}/{name}: metrics have no such points but the chart plots some")
            continue
        if len(paths) != 1:
            failures.append(f"{chart}/{run}/{name}: expected one series with {count} points, found {len(paths)} paths")
            continue
        shown, drawn = paths[0].get("data-points"), vertices(paths[0].get("d"))
        if shown != str(count) or drawn != count:
            failures.append(f"{chart}/{run}/{name}: metrics.jsonl has {count} points, the chart says "
                            f"data-points={shown} and its path has {drawn} vertices")


def png_facts(path):
    """(width, height, distinct byte values in the image data) of a PNG, or a reason it is not one."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return "not a PNG file"
    width, height = struct.unpack(">II", data[16:24])
    idat, at = bytearray(), 8
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        if kind == b"IDAT":
            idat += data[at + 8:at + 8 + length]
        at += 12 + length
    pixels = zlib.decompress(bytes(idat))
    return width, height, len(set(pixels[:: max(1, len(pixels) // 2_000_000)]))


def main():
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    report, screenshot, run_dirs = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), sys.argv[3:]
    if not os.path.isfile(report):
        sys.exit(f"FAIL: no report at {report}")
    url = Path(report).as_uri()
    failures = []

    # 1. The DOM after the script ran, and the page's console messages.
    dom, log = run_chromium(url, [f"--window-size={WIDTH},1000", "--dump-dom"])
    page = Page()
    page.feed(dom)

    def console_problems(log, when):
        # Only the page's own messages: Chromium's other log lines are noise here.
        for message, source in CONSOLE_MESSAGE.findall(log):
            if unquote(source).startswith(unquote(url)) and re.search(r"Uncaught|Error", message):
                failures.append(f"console ({when}): {message.splitlines()[0]}")

    console_problems(log, "loading")
    status = page.body.get("data-report-status")
    if status != "ok":
        failures.append(f'body data-report-status is {status!r}, expected "ok" (the script did not finish cleanly)')
    if page.errors_text and page.errors_text.strip():
        failures.append("#script-errors says: " + page.errors_text.strip().replace("\n", " | ")[:2000])
    for svg in page.charts:
        if not svg.get("data-chart"):
            failures.append("an svg.px-chart has no data-chart")
    for p in page.series:
        if p.get("data-points") != str(vertices(p.get("d"))):
            failures.append(f'{p.get("data-chart")}/{p.get("data-run")}/{p.get("data-series")}: data-points='
                            f'{p.get("data-points")} but the path has {vertices(p.get("d"))} vertices')

    # 2. Every logged loss is plotted, per run and, with several runs, in the comparison.
    checked = 0
    for run_dir in run_dirs:
        run = os.path.basename(os.path.normpath(run_dir))
        if serving_run(run_dir):  # every window of serve.jsonl in the queue and KV charts
            windows = serving_windows(run_dir)
            check_series(page, "serve-queue", run, {"running": windows, "waiting": windows}, failures)
            check_series(page, "serve-kv", run, {"kv_blocks_used": windows}, failures)
            checked += windows
            continue
        expected = logged_points(run_dir)
        check_series(page, "loss-step", run, expected, failures)
        charts = {svg.get("data-chart") for svg in page.charts}
        # A plan on a GPU preset: each published run it names, with its error, in a table.
        cells = set(t.strip() for t in page.text)
        for r in checked_runs(run_dir):
            error = f"{'+' if r['error'] >= 0 else ''}{100 * r['error']:.1f}%"
            if r["id"] not in cells or error not in cells:
                failures.append(f"{run}: the plan's checked run {r['id']} ({error}) is not in the page")
        for layer in moe_layers(run_dir):  # an expert-load heat map per mixture layer
            if f"expert-load-{layer}" not in charts:
                failures.append(f"{run}: no expert-load heat map for layer {layer}")
        if len(run_dirs) > 1:
            check_series(page, "compare-loss", run, expected, failures)
        checked += sum(expected.values())

    # 3. A screenshot of the whole page (the page reports its height at this width).
    height = int(page.body.get("data-page-height") or 8000)
    height = min(max(height + 40, 1000), 30000)
    if os.path.exists(screenshot):
        os.remove(screenshot)
    os.makedirs(os.path.dirname(screenshot) or ".", exist_ok=True)
    _, log = run_chromium(url, [f"--window-size={WIDTH},{height}", f"--screenshot={screenshot}"])
    console_problems(log, "screenshot")
    if not os.path.exists(screenshot):
        failures.append(f"chromium wrote no screenshot to {screenshot}")
    else:
        facts = png_facts(screenshot)
        size = os.path.getsize(screenshot)
        if isinstance(facts, str):
            failures.append(f"screenshot {screenshot}: {facts}")
        elif facts[:2] != (WIDTH, height) or size < 50_000 or facts[2] < 16:
            failures.append(f"screenshot {screenshot} looks blank or wrong: {facts[0]}x{facts[1]} "
                            f"(expected {WIDTH}x{height}), {size} bytes, {facts[2]} distinct byte values")

    if failures:
        print(f"FAIL: {report}:", file=sys.stderr)
        for f in failures:
            print("  - " + f, file=sys.stderr)
        sys.exit(1)
    print(f"ok: {os.path.basename(report)} rendered without script errors; {len(page.charts)} charts, "
          f"{len(page.series)} series; {checked} logged points (losses, serving windows) of {len(run_dirs)} run(s) all plotted; "
          f"screenshot {screenshot} ({WIDTH}x{height})")


if __name__ == "__main__":
    main()
