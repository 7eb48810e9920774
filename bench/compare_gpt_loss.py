#!/usr/bin/python3
"""GPT validation loss, parallax vs PyTorch: same model, weights, data, schedule.

usage: compare_gpt_loss.py --build DIR [--steps 1000] [--eval-every 100] [--threads 2]
                           [--results DIR] [--lock /tmp/px-build.lock] [--quick]
(normally through bench/compare_gpt_loss.sh, which pins PyTorch to OpenBLAS)

Both systems train gpt-mini (vocab 256, block 128, 4 layers, 4 heads, 128 wide)
on the fortunes corpus with batch 16 and
  - the same initial weights: px_bench_gpt_init writes what `parallax train
    --seed S` starts from, and PyTorch loads it (tests/interop/torch_gpt2.py);
  - the same batches: WindowSampler(train, B, T, seed) reproduced by the Python
    twin in docs/data.md;
  - AdamW (betas 0.9/0.999, eps 1e-8), weight decay only on what parallax
    decays (wte, wpe and the c_attn/c_proj/c_fc weights; no biases, no
    layer norms), global-norm gradient clipping, linear warmup then cosine
    decay to lr * min_ratio (src/runtime/optimizer/lr_schedule.cc);
  - the same validation windows: ValidationWindows(val, B, T, eval_batches).
It prints both validation losses at every evaluation step and their relative
difference (target: within 2%), and writes RESULTS/summary.json.
"""
import argparse
import fcntl
import json
import math
import os
import subprocess
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "interop"))

# ---- docs/data.md: the generator twin (verified against parallax there) ----
M = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M
    return x ^ (x >> 31)


def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & M


class Rng:  # px::Rng: xoshiro256**, state seeded by chained splitmix64
    def __init__(self, seed):
        self.s, x = [], seed
        for _ in range(4):
            x = splitmix64(x)
            self.s.append(x)

    def next_u64(self):
        s = self.s
        result = (rotl((s[1] * 5) & M, 7) * 9) & M
        t = (s[1] << 17) & M
        s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result

    def below(self, n):
        return 0 if n == 0 else self.next_u64() % n


def fortunes(d="/usr/share/games/fortunes"):
    names = sorted(n for n in os.listdir(d)
                   if not n.endswith((".dat", ".u8")) and os.path.isfile(os.path.join(d, n)))
    strip = lambda t: b"\n".join(l for l in t.split(b"\n") if l != b"%")
    return b"".join(strip(open(os.path.join(d, n), "rb").read()) for n in names)


def window_offsets(n_train, batch, block, seed, steps):  # WindowSampler offsets, per step
    rng = Rng(seed)
    return [[rng.below(n_train - block) for _ in range(batch)] for _ in range(steps)]


def validation_batches(val, batch, block, max_batches):  # ValidationWindows
    w = (len(val) - 1) // block
    if w < batch:
        return [list(range(w))]
    nb = w // batch if max_batches <= 0 else min(max_batches, w // batch)
    return [list(range(j * batch, j * batch + batch)) for j in range(nb)]


def lr_at(step, lr, warmup, total, min_ratio):  # LrSchedule::at, kind cosine
    if warmup > 0 and step < warmup:
        return lr * (step + 1) / warmup
    span = max(1, total - warmup)
    progress = min(1.0, (step - warmup) / span)
    return lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


class Lock:
    """Holds the shared build/benchmark lock (flock) while a run uses the CPU."""

    def __init__(self, path):
        self.path, self.f = path, None

    def __enter__(self):
        if self.path:
            self.f = open(self.path, "a")
            fcntl.flock(self.f, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        if self.f:
            fcntl.flock(self.f, fcntl.LOCK_UN)
            self.f.close()


def run_parallax(a, cfg, init_path):
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}  # parallax uses its own BLAS
    subprocess.run([os.path.join(a.build, "bench", "px_bench_gpt_init"), "--out", init_path,
                    "--vocab", "256", "--block", str(cfg["block"]), "--layers", str(cfg["n_layer"]),
                    "--heads", str(cfg["n_head"]), "--embd", str(cfg["n_embd"]), "--seed", str(a.seed)],
                   check=True, env=env)
    metrics = os.path.join(a.results, "parallax_metrics.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [os.path.join(a.build, "src", "cli", "parallax"), "train", "--model", "gpt",
           "--block", str(cfg["block"]), "--layers", str(cfg["n_layer"]), "--heads", str(cfg["n_head"]),
           "--embd", str(cfg["n_embd"]), "--dropout", "0", "--steps", str(a.steps), "--batch", str(a.batch),
           "--optimizer", "adamw", "--lr", str(a.lr), "--lr-schedule", "cosine", "--warmup", str(a.warmup),
           "--min-lr-ratio", str(a.min_lr_ratio), "--weight-decay", str(a.weight_decay),
           "--grad-clip", str(a.grad_clip), "--eval-every", str(a.eval_every), "--eval-batches",
           str(a.eval_batches), "--seed", str(a.seed), "--threads", str(a.threads), "--sample-tokens", "0",
           "--progress", "lines", "--metrics", metrics]
    print("parallax:", " ".join(cmd), file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    with Lock(a.lock), open(os.path.join(a.results, "parallax.log"), "w") as log:
        subprocess.run(cmd, check=True, env=env, stdout=log, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - t0
    lines = [json.loads(l) for l in open(metrics) if l.strip()]
    val = {l["step"]: l["val_loss"] for l in lines if "val_loss" in l}
    train = {l["step"]: l["train_loss"] for l in lines if "train_loss" in l}
    return val, train, seconds


def run_torch(a, cfg, init_path):
    import torch
    from torch_gpt2 import GPT2, load_gpt2_weights, read_safetensors

    torch.set_num_threads(a.threads)
    text = fortunes()
    n_val = len(text) // 10
    train = np.frombuffer(text[:len(text) - n_val], dtype=np.uint8).astype(np.int64)
    val = np.frombuffer(text[len(text) - n_val:], dtype=np.uint8).astype(np.int64)
    T, B = cfg["block"], a.batch
    offsets = window_offsets(len(train), B, T, a.seed, a.steps)
    idx = np.arange(T)
    vb = validation_batches(val, B, T, a.eval_batches)
    vx = [torch.from_numpy(val[np.array(ws)[:, None] * T + idx]) for ws in vb]
    vy = [torch.from_numpy(val[np.array(ws)[:, None] * T + idx + 1]) for ws in vb]

    model = GPT2(vocab=256, **cfg)
    weights, _ = read_safetensors(init_path)
    load_gpt2_weights(model, weights)
    decay_names = {"wte.weight", "wpe.weight"}
    decay_names |= {n for n, _ in model.named_parameters()
                    if n.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight"))}
    params = dict(model.named_parameters())
    groups = [{"params": [p for n, p in params.items() if n in decay_names], "weight_decay": a.weight_decay},
              {"params": [p for n, p in params.items() if n not in decay_names], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.999), eps=1e-8)

    def evaluate():
        model.eval()
        with torch.no_grad():
            losses = [model(x, y)[1].item() for x, y in zip(vx, vy)]
        model.train()
        return sum(losses) / len(losses)

    val_loss, train_loss = {}, {}
    t0 = time.perf_counter()
    with Lock(a.lock):
        model.train()
        for step in range(a.steps):
            o = np.array(offsets[step])[:, None]
            x, y = torch.from_numpy(train[o + idx]), torch.from_numpy(train[o + idx + 1])
            lr = lr_at(step, a.lr, a.warmup, a.steps, a.min_lr_ratio)
            for g in opt.param_groups:
                g["lr"] = lr
            opt.zero_grad(set_to_none=True)
            _, loss = model(x, y)
            loss.backward()
            if a.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
            opt.step()
            train_loss[step + 1] = loss.item()
            if (step + 1) % a.eval_every == 0 or step + 1 == a.steps:
                val_loss[step + 1] = evaluate()
                print(f"torch step {step + 1}: train {train_loss[step + 1]:.4f} val {val_loss[step + 1]:.4f} "
                      f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    return val_loss, train_loss, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(REPO, "build-bench"))
    ap.add_argument("--results", default=None)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--eval-batches", type=int, default=20)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lock", default="/tmp/px-build.lock", help="shared lock held during each run ('' = none)")
    ap.add_argument("--quick", action="store_true", help="200 steps, evaluation every 50")
    a = ap.parse_args()
    if a.quick:
        a.steps, a.eval_every, a.warmup = 200, 50, 20
    a.build = os.path.abspath(a.build)
    a.results = a.results or os.path.join(a.build, "bench-results", "gpt_loss-" + time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(a.results, exist_ok=True)
    print(f"results in {a.results}", file=sys.stderr)
    cfg = {"block": 128, "n_layer": 4, "n_head": 4, "n_embd": 128}
    init_path = os.path.join(a.results, "init.safetensors")

    px_val, px_train, px_s = run_parallax(a, cfg, init_path)
    pt_val, pt_train, pt_s = run_torch(a, cfg, init_path)

    rows, worst = [], 0.0
    print(f"gpt-mini {cfg}, batch {a.batch}, {a.steps} steps, lr {a.lr} warmup {a.warmup} cosine to "
          f"{a.min_lr_ratio}, wd {a.weight_decay}, clip {a.grad_clip}, seed {a.seed}, threads {a.threads}")
    print(f"{'step':>6}{'px train':>10}{'pt train':>10}{'px val':>9}{'pt val':>9}{'rel diff':>12}")
    for step in sorted(set(px_val) & set(pt_val)):
        rel = (px_val[step] - pt_val[step]) / pt_val[step]
        worst = max(worst, abs(rel))
        rows.append({"step": step, "parallax_val": px_val[step], "torch_val": pt_val[step], "rel_diff": rel,
                     "parallax_train": px_train.get(step), "torch_train": pt_train.get(step)})
        print(f"{step:>6}{px_train.get(step, float('nan')):>10.4f}{pt_train.get(step, float('nan')):>10.4f}"
              f"{px_val[step]:>9.4f}{pt_val[step]:>9.4f}{100 * rel:>+11.2e}%")
    ok = bool(rows) and worst <= 0.02
    print(f"max |relative difference| {100 * worst:.2e}% (target <= 2%): {'ok' if ok else 'NOT met'}; "
          f"wall time parallax {px_s:.0f} s, torch {pt_s:.0f} s")
    with open(os.path.join(a.results, "summary.json"), "w") as f:
        json.dump({"config": cfg, "args": vars(a), "rows": rows, "max_abs_rel_diff": worst,
                   "parallax_s": px_s, "torch_s": pt_s}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
