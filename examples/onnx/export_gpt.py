#!/usr/bin/python3
"""Exports gpt.onnx, the model of examples/README.md's section 4, as a
PyTorch user would export their own: a GPT-2 style transformer (2 blocks,
width 32, 4 heads, context 16, byte vocabulary) with `torch.onnx.export`.

    /usr/bin/python3 examples/onnx/export_gpt.py     # writes examples/onnx/gpt.onnx

Its flags export other sizes (bench/compare_onnx_gpt.sh exports one of
gpt-mini's size: --block 128 --embd 128 --layers 4 --gelu tanh --opset 13).

What parallax needs of an export (docs/onnx.md): a symbolic batch dim
(dynamic_axes), the weights inside the file, and, for a transformer,
do_constant_folding=False, which keeps each Linear's weight under its
PyTorch name. The loss is not exported: parallax attaches cross-entropy to
the logits (N, T, V) against the next bytes of its text corpus.
"""
import argparse
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

V, T, C, H, LAYERS, GELU = 256, 16, 32, 4, 2, "none"


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.register_buffer("mask", torch.tril(torch.ones(T, T)).view(1, 1, T, T))

    def forward(self, x):
        B, Tn, _ = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (z.view(B, Tn, H, C // H).transpose(1, 2) for z in (q, k, v))  # (B, H, T, D)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
        att = att.masked_fill(self.mask[:, :, :Tn, :Tn] == 0, float("-inf"))
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).contiguous().view(B, Tn, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate=GELU))


class Gpt(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Parameter(torch.randn(T, C) * 0.02)
        self.h = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(C)
        self.lm_head = nn.Linear(C, V, bias=False)

    def forward(self, tokens):
        x = self.wte(tokens) + self.wpe
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def main():
    global T, C, H, LAYERS, GELU
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description="export a GPT-2 style model with torch.onnx.export")
    parser.add_argument("--out", default=os.path.join(here, "gpt.onnx"))
    parser.add_argument("--block", type=int, default=T, help="context (positions)")
    parser.add_argument("--embd", type=int, default=C, help="width")
    parser.add_argument("--heads", type=int, default=H)
    parser.add_argument("--layers", type=int, default=LAYERS)
    parser.add_argument("--gelu", default=GELU, choices=["none", "tanh"], help="exact (erf) or tanh form")
    parser.add_argument("--opset", type=int, default=17, help="13 writes LayerNorm out of small operators")
    args = parser.parse_args()
    T, C, H, LAYERS, GELU = args.block, args.embd, args.heads, args.layers, args.gelu
    torch.manual_seed(0)
    tokens = torch.randint(0, V, (2, T))
    torch.onnx.export(Gpt(), (tokens,), args.out, input_names=["tokens"], output_names=["logits"],
                      dynamic_axes={"tokens": {0: "batch"}, "logits": {0: "batch"}}, opset_version=args.opset,
                      do_constant_folding=False)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
