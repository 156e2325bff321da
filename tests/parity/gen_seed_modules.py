"""PyTorch references for the reference sketch's (the seed's) attention modules, corrected:
MultiHeadAttention (nn.Linear W_q, W_k, W_v, W_o; boolean mask True = not allowed, as PyTorch),
SparseAttention (causal sliding window: query i sees keys i - window_size .. i) and
LocalGlobalAttention (projection(global_attn(x) + local_attn(x)), local_attn over |i - j| <=
local_window), LinearAttention and PerformerAttention (their published math: phi = elu + 1, and
FAVOR+ over the buffer R; see the classes). The sketch's own masks are inconsistent (SparseAttention builds an additive 0/-inf
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


def elu1(x):
    return F.elu(x) + 1


def kernel_attention(qf, kf, v, causal, eps):
    """out_i = qf_i^T S_i / (qf_i^T z_i + eps), S_i = sum_j kf_j v_j^T, z_i = sum_j kf_j over every key
    j (causal: j <= i, by cumulative sums). qf, kf [b, h, n, p], v [b, h, n, dv]."""
    if causal:
        S = torch.cumsum(torch.einsum("bhjp,bhjv->bhjpv", kf, v), dim=2)
        z = torch.cumsum(kf, dim=2)
        num = torch.einsum("bhip,bhipv->bhiv", qf, S)
        den = torch.einsum("bhip,bhip->bhi", qf, z)
    else:
        S = torch.einsum("bhjp,bhjv->bhpv", kf, v)
        z = kf.sum(dim=2)
        num = torch.einsum("bhip,bhpv->bhiv", qf, S)
        den = torch.einsum("bhip,bhp->bhi", qf, z)
    return num / (den.unsqueeze(-1) + eps)


class LinearAttention(nn.Module):
    """The sketch's LinearAttention with the published math (Katharopoulos et al. 2020): phi = elu + 1
    on Q and K (the sketch maps K only and its einsums index heads wrongly), no 1/sqrt(d) scale,
    eps = 1e-6; causal (not in the sketch) by prefix sums."""

    def __init__(self, d_model, num_heads, causal=False):
        super().__init__()
        self.num_heads, self.d_k, self.causal = num_heads, d_model // num_heads, causal
        self.query_projection = nn.Linear(d_model, d_model)
        self.key_projection = nn.Linear(d_model, d_model)
        self.value_projection = nn.Linear(d_model, d_model)
        self.output_projection = nn.Linear(d_model, d_model)

    def forward(self, x):
        b, n, d = x.shape
        split = lambda t: t.view(b, n, self.num_heads, self.d_k).transpose(1, 2)  # noqa: E731
        Q = elu1(split(self.query_projection(x)))
        K = elu1(split(self.key_projection(x)))
        V = split(self.value_projection(x))
        o = kernel_attention(Q, K, V, self.causal, 1e-6)
        return self.output_projection(o.transpose(1, 2).reshape(b, n, d))


class PerformerAttention(nn.Module):
    """The sketch's PerformerAttention with the published FAVOR+ math (Choromanski et al. 2021):
    each head h has the projection R[h] [d_k, m] (the buffer; its columns are the random features
    w_r), x' = x d_k^(-1/4), phi(x) = exp(R^T x' - |x'|^2 / 2 - stabiliser) / sqrt(m) on Q and K
    (the sketch applies relu to K only and never maps Q), no epsilon. The stabilisers (a per-row
    maximum for queries, one maximum over all keys of each batch and head) cancel in the ratio;
    they are constants (detached). Dropout is unused in eval; causal (not in the sketch) by prefix
    sums."""

    def __init__(self, d_model, num_heads, num_features=256, dropout=0.1, causal=False):
        super().__init__()
        self.num_heads, self.d_k, self.num_features, self.causal = num_heads, d_model // num_heads, num_features, causal
        self.register_buffer("R", torch.randn(num_heads, self.d_k, num_features))
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)
        self.W_o = nn.Linear(d_model, d_model)
        self.dropout = dropout  # unused: the sketch's forward never applies it

    def features(self, x, is_query):
        xs = x * self.d_k ** -0.25
        logits = torch.einsum("bhnd,hdm->bhnm", xs, self.R) - (xs * xs).sum(-1, keepdim=True) / 2
        stab = logits.amax(dim=-1, keepdim=True) if is_query else logits.amax(dim=(-2, -1), keepdim=True)
        return torch.exp(logits - stab.detach()) / math.sqrt(self.num_features)

    def forward(self, x):
        b, n, d = x.shape
        split = lambda t: t.view(b, n, self.num_heads, self.d_k).transpose(1, 2)  # noqa: E731
        Q = self.features(split(self.W_q(x)), True)
        K = self.features(split(self.W_k(x)), False)
        V = split(self.W_v(x))
        o = kernel_attention(Q, K, V, self.causal, 0.0)
        return self.W_o(o.transpose(1, 2).reshape(b, n, d))


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
    for name, b in m.named_buffers():  # the state_dict's buffers (PerformerAttention.R): no gradient
        t["p." + name] = b
    return t


def seed_module_case(gen, module, cls, cfg, B, N):
    m = randomize(gen, cls(**cfg))
    for b in m.buffers():  # float32-representable Gaussians from gen, as the parameters
        b.copy_(torch.randn(b.shape, generator=gen).float().double())
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
        seed_module_case(gen, "linear_attention", LinearAttention, {"d_model": 16, "num_heads": 4}, 2, 9),
        seed_module_case(gen, "linear_attention", LinearAttention,
                         {"d_model": 12, "num_heads": 3, "causal": True}, 2, 7),
        seed_module_case(gen, "performer_attention", PerformerAttention,
                         {"d_model": 16, "num_heads": 4, "num_features": 8}, 2, 10),
        seed_module_case(gen, "performer_attention", PerformerAttention,
                         {"d_model": 12, "num_heads": 2, "num_features": 12, "dropout": 0.2, "causal": True}, 1, 9),
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
