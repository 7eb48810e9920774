#!/usr/bin/env python3
"""Per-step train losses of two metrics files (JSON lines) within 1e-5 relative.

   compare_losses.py REFERENCE CANDIDATE WHAT
"""
import json
import sys


def losses(path):
    return [json.loads(line)["train_loss"] for line in open(path) if "train_loss" in json.loads(line)]


ref, got, what = losses(sys.argv[1]), losses(sys.argv[2]), sys.argv[3]
if len(ref) != len(got) or not ref:
    sys.exit(f"FAIL {what}: {len(got)} steps vs {len(ref)} on one rank")
worst = max(abs(a - b) / abs(a) for a, b in zip(ref, got))
print(f"{what}: {len(ref)} steps, worst relative difference {worst:.2e}")
if worst > 1e-5:
    sys.exit(f"FAIL {what}: losses differ from one rank by {worst:.2e} > 1e-5")
