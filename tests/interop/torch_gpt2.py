"""A GPT-2-layout model in PyTorch and a dependency-free safetensors reader.

Used by tests/interop/check_gpt_logits.py and bench/compare_gpt_loss.py to
load parallax GPT checkpoints into PyTorch. The model follows GPT-2 (and
../shared/peers/torch/gpt_model.py): learned wte/wpe, pre-LayerNorm blocks
(eps 1e-5) with a fused c_attn projection and causal softmax attention scaled
by 1/sqrt(head_dim), a 4x MLP with tanh-approximated GELU, ln_f, and an LM head
tied to wte. nn.Linear stores weights (out, in): the transpose of the Conv1D
(in, out) layout of GPT-2 checkpoints, which parallax uses.
"""
import json
import math
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_DTYPES = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I64": np.int64, "U8": np.uint8}


def read_safetensors(path):
    """Returns (tensors: dict name -> numpy array, metadata: dict)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = memoryview(raw)[8 + n:]
    meta = header.pop("__metadata__", {})
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dtype = _DTYPES[info["dtype"]]
        out[name] = np.frombuffer(data[begin:end], dtype=dtype).reshape(info["shape"]).copy()
    return out, meta


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block):
        super().__init__()
        self.n_head, self.n_embd = n_head, n_embd
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        mask = torch.tril(torch.ones(block, block, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, block, block), persistent=False)

    def forward(self, x):  # (B, T, C)
        B, T, C = x.shape
        hd = C // self.n_head
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q = q.view(B, T, self.n_head, hd).transpose(1, 2)  # (B, H, T, D)
        k = k.view(B, T, self.n_head, hd).transpose(1, 2)
        v = v.view(B, T, self.n_head, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    def __init__(self, vocab, block, n_layer, n_head, n_embd):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head, block) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied

    def forward(self, idx, targets=None):  # idx (B, T) int64
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, dtype=torch.long))
        for blk in self.h:
            x = blk(x)
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss


def is_conv1d(name):
    """GPT-2 Conv1D weights, stored (in, out); nn.Linear wants (out, in)."""
    return name.endswith(".weight") and any(k in name for k in ("c_attn", "c_proj", "c_fc"))


def load_gpt2_weights(model, tensors):
    """Copies GPT-2-layout tensors (name -> numpy array) into `model`. Every
    parameter of the model must be given, and nothing else; the LM head comes
    with wte."""
    params = dict(model.named_parameters())  # lm_head.weight is deduplicated as wte.weight
    missing = sorted(set(params) - set(tensors))
    extra = sorted(set(tensors) - set(params))
    if missing or extra:
        raise ValueError(f"checkpoint does not match the model: missing {missing}, unexpected {extra}")
    with torch.no_grad():
        for name, arr in tensors.items():
            t = torch.from_numpy(np.ascontiguousarray(arr))
            if is_conv1d(name):
                t = t.t()
            if tuple(t.shape) != tuple(params[name].shape):
                raise ValueError(f"{name}: checkpoint shape {tuple(arr.shape)}, model expects "
                                 f"{tuple(params[name].shape)} (after the Conv1D transpose)")
            params[name].copy_(t)


def gpt2_state(model):
    """The model's parameters as GPT-2-layout numpy arrays (Conv1D weights (in, out))."""
    out = {}
    for name, p in model.named_parameters():
        t = p.detach()
        out[name] = (t.t() if is_conv1d(name) else t).contiguous().numpy().copy()
    return out
