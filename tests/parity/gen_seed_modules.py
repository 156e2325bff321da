"""PyTorch references for the reference sketch's (the seed's) attention modules, corrected:
MultiHeadAttention (nn.Linear W_q, W_k, W_v, W_o; boolean mask True = not allowed, as PyTorch),
SparseAttention (causal sliding window: query i sees keys i - window_size .. i) and
LocalGlobalAttention (projection(global_attn(x) + local_attn(x)), local_attn over |i - j| <=
local_window). The sketch's own masks are inconsistent (SparseAttention builds an additive 0/-inf
mask that its attention reads as "== 0 means masked", LocalGlobalAttention a 1/0 keep-mask); here
every mask is one boolean convention.

float64 modules with random weights (every parameter, biases included), eval mode (dropout off),
random inputs; outputs and autograd gradients (random upstream gradient) of the inputs and every
parameter. Writes tests/parity/fixtures/seed_modules.safetensors (or --out DIR).

Per case N, metadata "caseN.module" is attn's module name and "caseN.config" its configuration
(JSON, the format of `attn run`), "caseN.call" the forward options; tensors "caseN.x" (or
query/key/value/attn_mask for MultiHeadAttention), "caseN.dout", "caseN.p.NAME" the state_dict
under the seed's names (W_q.weight, attn.W_q.weight, local_attn.W_q.weight, ...), "caseN.out",
"caseN.dx" (dquery, dkey, dvalue) and "caseN.g.NAME" the references. Runs with /usr/bin/python3
and Debian's python3-torch."""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402


def sdpa(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v; mask boolean, True = not allowed (PyTorch's convention)."""
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(mask, float("-inf"))
    return F.softmax(s, dim=-1) @ v


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, dropout=0.1):
        super().__init__()
        assert d_model % num_heads == 0
        self.num_heads, self.d_k = num_heads, d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)
        self.W_o = nn.Linear(d_model, d_model)
        self.dropout = dropout  # on the weights in training; these references run in eval

    def split_heads(self, x):
        b, n, _ = x.shape
        return x.view(b, n, self.num_heads, self.d_k).permute(0, 2, 1, 3)

    def forward(self, Q, K, V, mask=None):
        b = Q.size(0)
        o = sdpa(self.split_heads(self.W_q(Q)), self.split_heads(self.W_k(K)), self.split_heads(self.W_v(V)), mask)
        return self.W_o(o.permute(0, 2, 1, 3).reshape(b, -1, self.num_heads * self.d_k))


def band(n, left, right):
    """Boolean [n, n], True = not allowed: key j allowed for query i when i - left <= j <= i + right."""
    i = torch.arange(n).unsqueeze(1)
    j = torch.arange(n).unsqueeze(0)
    return (j < i - left) | (j > i + right)


class SparseAttention(nn.Module):
    def __init__(self, d_model, num_heads, window_size=128, dropout=0.1):
        super().__init__()
        self.window_size = window_size
        self.attn = MultiHeadAttention(d_model, num_heads, dropout)

    def forward(self, x):
        return self.attn(x, x, x, band(x.size(1), self.window_size, 0))


class LocalGlobalAttention(nn.Module):
    def __init__(self, d_model, num_heads, local_window=128, dropout=0.1):
        super().__init__()
        self.local_window = local_window
        self.local_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.global_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.projection = nn.Linear(d_model, d_model)

    def forward(self, x):
        w = self.local_window
        return self.projection(self.global_attn(x, x, x) + self.local_attn(x, x, x, band(x.size(1), w, w)))


def randomize(gen, m):
    for p in m.parameters():
        p.data = (torch.randn(p.shape, generator=gen) * 0.3).float()
    return m.double().eval()


def finish(gen, m, t, out, leaves):
    dout = torch.randn(*out.shape, generator=gen).float()
    t["dout"] = dout
    out.backward(dout.double())
    t["out"] = out.detach()
    for name, leaf in leaves:
        t[name] = leaf.grad
    for name, p in m.named_parameters():
        t["p." + name] = p.detach()
        t["g." + name] = p.grad
    return t


def seed_module_case(gen, module, cls, cfg, B, N):
    m = randomize(gen, cls(**cfg))
    t = {"x": torch.randn(B, N, cfg["d_model"], generator=gen).float()}
    x = t["x"].double().requires_grad_()
    return module, cfg, {}, finish(gen, m, t, m(x), [("dx", x)])


def mha_case(gen, E, H, B, Nq, Nk, causal):
    """The seed's MultiHeadAttention as attn's multihead_attention with separate projections."""
    m = randomize(gen, MultiHeadAttention(E, H))
    t = {n: torch.randn(B, l, E, generator=gen).float() for n, l in (("query", Nq), ("key", Nk), ("value", Nk))}
    am = torch.rand(Nq, Nk, generator=gen) < 0.3
    am[:, 0] = False  # never a fully masked row
    t["attn_mask"] = am
    mask = am | torch.ones(Nq, Nk, dtype=torch.bool).triu(1) if causal else am
    q, k, v = (t[n].double().requires_grad_() for n in ("query", "key", "value"))
    cfg = {"embed_dim": E, "num_heads": H, "separate_projections": True}
    return ("multihead_attention", cfg, {"is_causal": causal},
            finish(gen, m, t, m(q, k, v, mask), [("dquery", q), ("dkey", k), ("dvalue", v)]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "fixtures"))
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    gen = torch.Generator().manual_seed(a.seed)
    cases = [
        mha_case(gen, 16, 4, 2, 5, 7, False),
        mha_case(gen, 12, 3, 2, 6, 6, True),
        seed_module_case(gen, "sparse_attention", SparseAttention,
                         {"d_model": 16, "num_heads": 4, "window_size": 3}, 2, 11),
        seed_module_case(gen, "sparse_attention", SparseAttention,
                         {"d_model": 8, "num_heads": 2, "window_size": 0, "dropout": 0.2}, 1, 5),
        seed_module_case(gen, "local_global_attention", LocalGlobalAttention,
                         {"d_model": 16, "num_heads": 4, "local_window": 2}, 2, 9),
        seed_module_case(gen, "local_global_attention", LocalGlobalAttention,
                         {"d_model": 12, "num_heads": 2, "local_window": 20}, 1, 7),
    ]
    tensors, meta = {}, {"cases": str(len(cases)), "seed": str(a.seed), "torch": torch.__version__}
    for ci, (module, cfg, call, t) in enumerate(cases):
        meta[f"case{ci}.module"] = module
        meta[f"case{ci}.config"] = json.dumps(cfg)
        meta[f"case{ci}.call"] = json.dumps(call)
        for key, val in t.items():
            tensors[f"case{ci}.{key}"] = val.float() if val.dtype == torch.float64 else val
    os.makedirs(a.out, exist_ok=True)
    st.save(os.path.join(a.out, "seed_modules.safetensors"), tensors, meta)


if __name__ == "__main__":
    main()
