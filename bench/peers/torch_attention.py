"""PyTorch's explicit attention, the peer of px_bench_attention (bench/compare_attention.sh).

The attention core of ../shared/peers/torch/gpt_model.py's CausalSelfAttention, line for line
(torch 1.13 has no fused CPU attention): softmax(q kᵀ / sqrt(D) + causal mask) v, keeping the
(B, H, T, T) probabilities for backward. Forward and backward are timed apart, best of --reps,
fp32 or under CPU autocast bf16. Prints one JSON line with the fields compare_attention.sh reads.
This peer lives in the repository, beside the shared peers, because it is parallax's own
benchmark's peer; it imports nothing from them.

  python3 bench/peers/torch_attention.py --T 1024 [--B 8] [--H 6] [--D 64] [--precision fp32|bf16]
                                         [--threads 1] [--reps 3]
"""
import argparse
import json
import math
import resource
import time

import torch
import torch.nn.functional as F


def rss_now_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def attention(q, k, v, mask):
    """gpt_model.py's lines: q, k, v (B, H, T, D)."""
    T, hd = q.shape[-2], q.shape[-1]
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
    att = att.masked_fill(~mask[:, :, :T, :T], float("-inf"))
    att = F.softmax(att, dim=-1)
    return att @ v


def main():
    p = argparse.ArgumentParser()
    for name, default in (("--T", 1024), ("--B", 8), ("--H", 6), ("--D", 64), ("--threads", 1), ("--reps", 3)):
        p.add_argument(name, type=int, default=default)
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    shape = (a.B, a.H, a.T, a.D)
    q, k, v = (torch.randn(shape, requires_grad=True) for _ in range(3))
    dout = torch.randn(shape)
    mask = torch.tril(torch.ones(a.T, a.T, dtype=torch.bool)).view(1, 1, a.T, a.T)
    rss_before = rss_now_mib()

    def run():
        for x in (q, k, v):
            x.grad = None
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            y = attention(q, k, v, mask)
        middle = time.perf_counter()
        y.float().backward(dout)
        return middle - start, time.perf_counter() - middle

    run()  # warm-up
    times = [run() for _ in range(max(1, a.reps))]
    forward_s = min(t[0] for t in times)
    backward_s = min(t[1] for t in times)
    flops = 12.0 * a.D * a.B * a.H * a.T * (a.T + 1) / 2  # unmasked score entries, 12·D FLOPs each
    print(json.dumps({
        "peer": "torch", "torch": torch.__version__, "precision": a.precision, "threads": a.threads,
        "B": a.B, "H": a.H, "T": a.T, "D": a.D,
        "forward_ms": forward_s * 1e3, "backward_ms": backward_s * 1e3,
        "fwd_bwd_gflops": flops / (forward_s + backward_s) / 1e9,
        "peak_rss_growth_mib": peak_rss_mib() - rss_before,
    }))


if __name__ == "__main__":
    main()
