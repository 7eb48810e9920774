#!/usr/bin/env python3
"""CI's time budget (scripts/test.sh; docs/hardening.md, "CI's time budget").

Every stage of a CI run (a build, a CTest suite, fuzzing) has a budget in
.ci/budget.json, and every CTest test its measured cost in
.ci/costs/<suite>.txt (CTest's own cost-data format: "name runs seconds" a
line), so that on a clean clone CTest starts the costliest tests first and
a test that grew is named:

  ci_budget.py machine                   times the reference compile: this machine's speed against the
                                         budgets' machine (ci-report/machine.json), which scales them
  ci_budget.py seed SUITE BUILD_DIR      CTest's cost data for BUILD_DIR from .ci/costs/SUITE.txt
  ci_budget.py stage NAME SECONDS [--suite SUITE --junit FILE]
                                         the stage's time against its budget; for a suite also its
                                         ten slowest tests, the tests that grew and the skips.
                                         Exits 1 past 1.25x the budget.
  ci_budget.py summary                   every stage, the whole run against the 40-minute budget
                                         (exit 1 past 50 minutes) and every test skipped
  ci_budget.py costs SUITE JUNIT...      rewrites .ci/costs/SUITE.txt from a run's measured times

A stage past its budget warns; only past `fail_factor` times it (or the
whole run past `fail_total_s`) does CI fail: a slow day on a shared host
must not fail a sound change. Results of the run so far are kept in
ci-report/ (stages.jsonl, skips.jsonl), which scripts/test.sh empties first.
"""
import json
import pathlib
import sys
import xml.etree.ElementTree as ET

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUDGET = ROOT / ".ci" / "budget.json"
COSTS = ROOT / ".ci" / "costs"
REPORT = ROOT / "ci-report"


def budget():
    return json.loads(BUDGET.read_text())


def machine_factor():
    """How much slower this machine is than the budgets' (ci-report/machine.json; 1 when not measured)."""
    path = REPORT / "machine.json"
    return json.loads(path.read_text())["factor"] if path.exists() else 1.0


def cmd_machine():
    import subprocess
    import time
    reference = budget()["reference"]
    best = float("inf")
    for _ in range(3):
        start = time.monotonic()
        subprocess.run(reference["command"], cwd=ROOT, check=True)
        best = min(best, time.monotonic() - start)
    factor = max(1.0, best / reference["seconds"])
    REPORT.mkdir(exist_ok=True)
    (REPORT / "machine.json").write_text(json.dumps({"seconds": best, "factor": factor}) + "\n")
    print(f"ci: the reference compile took {best:.2f} s here, {reference['seconds']} s on the budgets' machine: "
          + (f"budgets scaled by {factor:.2f}" if factor > 1 else "budgets as written"))
    return 0


def stage_budget(name):
    """The stage's budget in seconds, scaled to this machine; None for one outside the budget (setup: packages a fresh machine downloads)."""
    for stage in budget()["stages"]:
        if stage["name"] == name:
            return None if stage["budget_s"] is None else round(stage["budget_s"] * machine_factor())
    sys.exit(f"ci_budget.py: stage '{name}' has no budget in {BUDGET} (add it, within the total)")


def read_costs(suite):
    """{test: seconds} from .ci/costs/SUITE.txt (CTest's CTestCostData.txt format)."""
    path = COSTS / f"{suite}.txt"
    costs = {}
    if not path.exists():
        return costs
    for line in path.read_text().splitlines():
        if line.startswith("---"):
            break
        name, _, seconds = line.rsplit(" ", 2)
        costs[name] = float(seconds)
    return costs


def read_junit(path):
    """[(test, seconds, status, output)] from CTest's --output-junit file."""
    results = []
    for case in ET.parse(path).getroot().iter("testcase"):
        status = case.get("status", "run")
        if case.find("skipped") is not None:
            status = "skipped"
        if case.find("failure") is not None:
            status = "failed"
        out = case.find("system-out")
        # gtest's parameterized names carry "  # GetParam() = ..." in the report, not in CTest's cost data.
        name = case.get("name").split("  # ")[0]
        results.append((name, float(case.get("time") or 0), status, (out.text or "") if out is not None else ""))
    return results


def skip_reason(output):
    """The reason a skipped test gave: gtest's message after 'Skipped', else its last lines."""
    lines = [l.rstrip() for l in output.splitlines() if l.strip()]
    for i, line in enumerate(lines):
        if line.endswith("Skipped") and i + 1 < len(lines):
            return lines[i + 1].strip()
    for line in reversed(lines):
        if "SKIP" in line.upper() and "[  SKIPPED ]" not in line:
            return line.strip()
    return lines[-1].strip() if lines else "(the test printed no reason)"


def record(name, entry):
    REPORT.mkdir(exist_ok=True)
    with open(REPORT / name, "a") as f:
        f.write(json.dumps(entry) + "\n")


def read_records(name):
    path = REPORT / name
    return [json.loads(l) for l in path.read_text().splitlines()] if path.exists() else []


def cmd_seed(suite, build_dir):
    costs = COSTS / f"{suite}.txt"
    if not costs.exists():
        return
    target = pathlib.Path(build_dir) / "Testing" / "Temporary"
    target.mkdir(parents=True, exist_ok=True)
    (target / "CTestCostData.txt").write_text(costs.read_text())


def cmd_stage(name, seconds, suite=None, junit=None):
    seconds = float(seconds)
    limit = stage_budget(name)
    factor = budget()["fail_factor"]
    if limit is None:
        print(f"ci: {name}: {seconds:.0f} s (outside the budget)")
        record("stages.jsonl", {"name": name, "seconds": seconds, "budget_s": None})
        return 0
    verdict = "within" if seconds <= limit else ("PAST (warning)" if seconds <= factor * limit else "FAR PAST")
    print(f"ci: {name}: {seconds:.0f} s of its {limit} s budget ({seconds / limit:.0%}): {verdict}")
    record("stages.jsonl", {"name": name, "seconds": seconds, "budget_s": limit})
    if junit:
        results = read_junit(junit)
        costs = read_costs(suite)
        total = sum(t for _, t, _, _ in results) or 1
        slowest = sorted(results, key=lambda r: -r[1])[:10]
        print(f"ci: {name}: the ten slowest of {len(results)} tests ({total:.0f} s of test time):")
        for test, t, status, _ in slowest:
            was = f", measured {costs[test]:.0f} s" if test in costs else ""
            print(f"ci:   {t:7.1f} s  {t / total:5.1%}  {test}{'' if status in ('run', 'passed') else ' [' + status + ']'}{was}")
        grown = [(test, t, costs[test]) for test, t, _, _ in results
                 if test in costs and t > max(factor * costs[test], costs[test] + 10)]
        new = [(test, t) for test, t, _, _ in results if test not in costs and t > 30]
        if seconds > limit:
            print(f"ci: WARNING: {name} is past its budget; the tests that grew past {factor}x their measured cost:")
            for test, t, was in sorted(grown, key=lambda g: g[2] - g[1]):
                print(f"ci:   {test}: {t:.0f} s, measured {was:.0f} s")
            for test, t in new:
                print(f"ci:   {test}: {t:.0f} s, new (no measured cost in .ci/costs/{suite}.txt)")
            if not grown and not new:
                print("ci:   none: the whole stage ran slower (a loaded host?)")
        for test, _, status, output in results:
            if status == "skipped":
                record("skips.jsonl", {"stage": name, "test": test, "reason": skip_reason(output)})
    if seconds > factor * limit:
        print(f"ci: FAIL: {name} took more than {factor}x its {limit} s budget")
        return 1
    return 0


def cmd_summary():
    b = budget()
    scale = machine_factor()
    b["total_s"] = round(b["total_s"] * scale)
    b["fail_total_s"] = round(min(b["fail_total_s"] * scale, b["hard_limit_s"]))
    stages = read_records("stages.jsonl")
    total = sum(s["seconds"] for s in stages)
    print(f"ci: {'stage':<28} {'time (s)':>9} {'budget (s)':>11}")
    for s in stages:
        print(f"ci: {s['name']:<28} {s['seconds']:9.0f} {'-' if s['budget_s'] is None else s['budget_s']:>11}")
    print(f"ci: {'whole run':<28} {total:9.0f} {b['total_s']:11}  ({total / 60:.1f} min; fails past {b['fail_total_s'] / 60:.0f})")
    skips = read_records("skips.jsonl")
    print(f"ci: {len(skips)} test(s) skipped" + (":" if skips else ""))
    for s in skips:
        print(f"ci:   [{s['stage']}] {s['test']}: {s['reason']}")
    if total > b["fail_total_s"]:
        print(f"ci: FAIL: the whole run took {total:.0f} s, past {b['fail_total_s']} s")
        return 1
    if total > b["total_s"]:
        print(f"ci: WARNING: the whole run took {total:.0f} s, past its {b['total_s']} s budget")
    return 0


def cmd_costs(suite, *junits):
    times = {}
    for junit in junits:
        for test, t, status, _ in read_junit(junit):
            if status not in ("skipped", "notrun", "disabled"):
                times[test] = t
    COSTS.mkdir(parents=True, exist_ok=True)
    lines = [f"{test} 1 {t:.2f}" for test, t in sorted(times.items())]
    (COSTS / f"{suite}.txt").write_text("\n".join(lines) + "\n---\n")
    print(f"ci_budget.py: {len(lines)} measured costs in {COSTS / (suite + '.txt')}")


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0
    verb, args = argv[1], argv[2:]
    if verb == "machine" and not args:
        return cmd_machine()
    if verb == "seed" and len(args) == 2:
        return cmd_seed(*args) or 0
    if verb == "stage" and len(args) >= 2:
        name, seconds, rest = args[0], args[1], args[2:]
        opts = dict(zip(rest[::2], rest[1::2]))
        return cmd_stage(name, seconds, opts.get("--suite"), opts.get("--junit"))
    if verb == "summary" and not args:
        return cmd_summary()
    if verb == "costs" and len(args) >= 2:
        return cmd_costs(*args) or 0
    sys.exit(f"ci_budget.py: unknown or incomplete command {argv[1:]} (see --help)")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
