#!/usr/bin/python3
"""Interop test: a parallax GPT checkpoint loads into a PyTorch GPT-2-layout
model and gives the same logits (max abs diff < 1e-4) and loss.

usage: check_gpt_logits.py EXPORTER WORKDIR
EXPORTER is px_interop_gpt_export (writes WORKDIR/{model,logits}.safetensors).
Exits 77 (CTest SKIP_RETURN_CODE) when torch is not importable, 1 on mismatch.
"""
import os
import subprocess
import sys

SKIP = 77
TOLERANCE = 1e-4


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    exporter, workdir = sys.argv[1], sys.argv[2]
    try:
        import torch
    except ImportError as e:
        print(f"SKIP: torch is not importable ({e}); install python3-torch", file=sys.stderr)
        return SKIP
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from torch_gpt2 import GPT2, load_gpt2_weights, read_safetensors

    subprocess.run([exporter, workdir], check=True)
    weights, _ = read_safetensors(os.path.join(workdir, "model.safetensors"))
    ref, meta = read_safetensors(os.path.join(workdir, "logits.safetensors"))
    cfg = {k: int(meta[k]) for k in ("vocab", "block", "n_layer", "n_head", "n_embd")}
    torch.manual_seed(0)
    tokens = torch.from_numpy(ref["tokens"].astype("int64"))
    targets = torch.from_numpy(ref["targets"].astype("int64"))
    expected = torch.from_numpy(ref["logits"])

    def run(tensors):
        model = GPT2(**cfg).eval()
        load_gpt2_weights(model, tensors)
        with torch.no_grad():
            return model(tokens, targets)

    logits, loss = run(weights)
    diff = (logits - expected).abs().max().item()
    loss_diff = abs(loss.item() - float(ref["loss"][0]))
    print(f"config {cfg}, tokens {tuple(tokens.shape)}: max |logits diff| {diff:.3g} "
          f"(logits max |value| {expected.abs().max().item():.3g}), loss parallax {float(ref['loss'][0]):.6f} "
          f"torch {loss.item():.6f} (diff {loss_diff:.3g})")
    # Negative control, so that this test can fail: feeding the square attn.c_proj
    # weights without the Conv1D -> nn.Linear transpose must break the tolerance.
    wrong_weights = {n: (w.T if n.endswith("attn.c_proj.weight") else w) for n, w in weights.items()}
    wrong_diff = (run(wrong_weights)[0] - expected).abs().max().item()
    print(f"negative control (attn.c_proj not transposed): max |logits diff| {wrong_diff:.3g}")
    ok = diff < TOLERANCE and loss_diff < TOLERANCE and wrong_diff > 100 * TOLERANCE
    print("PASS" if ok else f"FAIL: tolerance {TOLERANCE}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
