"""PyTorch reference for bf16 mixed-precision GPT training (attn_gpt_config.precision = bf16).

One training step's loss (cross-entropy, mean) and every parameter gradient of gen_nn_gpt's
RefGPT (pre-norm TransformerEncoderLayer blocks, causal), evaluated in float64 twice:
  exact:   no rounding (the float32 path's reference);
  bf16:    the library's rounding emulated: every linear layer takes bf16-rounded x and W in the
           forward and bf16-rounded dY (with the same rounded W and x) in the backward; attention
           takes rounded Q, K, V, rounds the unnormalised probabilities exp(S - rowmax) for P V and,
           in the backward, rounds dO, P (for dV) and dS (for dQ, dK), with dsum = rowsum(dO O)
           from the rounded dO — FlashAttention's bf16 scheme, one key tile per row (N <= 64).
           Layernorm, softmax statistics, GELU, residuals, embeddings and the loss are unrounded.
Rounding is torch's .bfloat16() (round to nearest even) of the float32 value. The written-out
model with rounding switched off is first checked against RefGPT itself.

Writes tests/parity/fixtures/train_bf16.safetensors (or --out DIR): per case N, metadata
"caseN.config" (gen_nn_gpt's JSON), tensors "caseN.tokens", "caseN.targets" (I64), "caseN.p.NAME"
(parameters), "caseN.g.NAME" (bf16-emulated gradients), "caseN.f.NAME" (exact gradients),
"caseN.loss" [2] = (bf16-emulated, exact). Runs with /usr/bin/python3 and Debian's python3-torch."""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402
from gen_nn_gpt import RefGPT  # noqa: E402

# Parameters N(0, SCALE^2) (norm weights 1 + that): about PyTorch's default init at these widths.
SCALE = 0.1



def bf16(t):
    return t.float().bfloat16().double()


def ident(t):
    return t


class Linear(torch.autograd.Function):
    """y = r(x) r(W)^T + b; dx = r(dy) r(W), dW = r(dy)^T r(x), db = sum dy."""

    @staticmethod
    def forward(ctx, x, w, b, r):
        ctx.save_for_backward(x, w)
        ctx.r, ctx.has_bias = r, b is not None
        y = r(x) @ r(w).t()
        return y + b if b is not None else y

    @staticmethod
    def backward(ctx, gy):
        x, w = ctx.saved_tensors
        r = ctx.r
        g = r(gy)
        gx = g @ r(w)
        gw = g.reshape(-1, g.shape[-1]).t() @ r(x).reshape(-1, x.shape[-1])
        gb = gy.reshape(-1, gy.shape[-1]).sum(0) if ctx.has_bias else None
        return gx, gw, gb, None


class Attention(torch.autograd.Function):
    """Causal softmax attention of q, k, v [B, H, N, hd] with the flash kernel's bf16 rounding."""

    @staticmethod
    def forward(ctx, q, k, v, r):
        N, hd = q.shape[-2], q.shape[-1]
        scale = 1.0 / math.sqrt(hd)
        qr, kr, vr = r(q), r(k), r(v)
        s = (qr @ kr.transpose(-2, -1)) * scale
        s = s.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), float("-inf"))
        m = s.amax(-1, keepdim=True)
        pt = torch.exp(s - m)
        l = pt.sum(-1, keepdim=True)
        o = (r(pt) @ vr) / l
        ctx.save_for_backward(qr, kr, vr, o, s, m + torch.log(l))
        ctx.r, ctx.scale = r, scale
        return o

    @staticmethod
    def backward(ctx, do):
        qr, kr, vr, o, s, lse = ctx.saved_tensors
        r, scale = ctx.r, ctx.scale
        dor = r(do)
        p = torch.exp(s - lse)
        dp = dor @ vr.transpose(-2, -1)
        dsum = (dor * o).sum(-1, keepdim=True)
        ds = r(p * (dp - dsum) * scale)
        return ds @ kr, ds.transpose(-2, -1) @ qr, r(p).transpose(-2, -1) @ dor, None


def forward(m, tokens, r):
    """RefGPT's logits, written out with every product through Linear / Attention."""
    B, N = tokens.shape
    x = m.tok_emb(tokens) + m.pos_emb(torch.arange(N))[None]
    for layer in m.layers:
        sa = layer.self_attn
        E, H = x.shape[-1], sa.num_heads
        hd = E // H
        qkv = Linear.apply(layer.norm1(x), sa.in_proj_weight, sa.in_proj_bias, r)
        q, k, v = (t.reshape(B, N, H, hd).transpose(1, 2) for t in qkv.chunk(3, dim=-1))
        o = Attention.apply(q, k, v, r).transpose(1, 2).reshape(B, N, E)
        x = x + Linear.apply(o, sa.out_proj.weight, sa.out_proj.bias, r)
        h = layer.activation(Linear.apply(layer.norm2(x), layer.linear1.weight, layer.linear1.bias, r))
        x = x + Linear.apply(h, layer.linear2.weight, layer.linear2.bias, r)
    return Linear.apply(m.norm(x), m.lm_head.weight, None, r)


def loss_and_grads(m, tokens, targets, r):
    m.zero_grad()
    V = m.c["vocab_size"]
    loss = F.cross_entropy(forward(m, tokens, r).reshape(-1, V), targets.reshape(-1))
    loss.backward()
    return loss.detach(), {n: p.grad.detach().clone() for n, p in m.named_parameters()}


def make_case(gen, c, B, N):
    m = RefGPT(c)
    for name, p in m.named_parameters():
        r = torch.randn(p.shape, generator=gen) * SCALE
        if "norm" in name and name.endswith("weight"):
            r = 1.0 + r
        p.data = r.float()
    m = m.double().train()
    V = c["vocab_size"]
    tokens = torch.randint(0, V, (B, N), generator=gen)
    targets = torch.randint(0, V, (B, N), generator=gen)
    with torch.no_grad():  # the written-out model, rounding off, is RefGPT
        ref = m(tokens)
        man = forward(m, tokens, ident)
        assert torch.allclose(ref, man, rtol=1e-10, atol=1e-10), (ref - man).abs().max()
    lb, gb = loss_and_grads(m, tokens, targets, bf16)
    le, ge = loss_and_grads(m, tokens, targets, ident)
    t = {"tokens": tokens, "targets": targets, "loss": torch.stack([lb, le])}
    for name, p in m.named_parameters():
        t["p." + name] = p.detach()
        t["g." + name] = gb[name]
        t["f." + name] = ge[name]
    return c, t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "fixtures"))
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    gen = torch.Generator().manual_seed(a.seed)
    # head_dim 16: the softmax scale 1/4 is a power of two, so scaling dS before or after its
    # rounding is the same
    base = lambda **kw: dict({"vocab_size": 40, "max_positions": 32, "d_model": 32, "nhead": 2,
                              "dim_feedforward": 64, "activation": "gelu", "num_layers": 2,
                              "layer_norm_eps": 1e-5, "positions": "learned",
                              "tie_embeddings": False}, **kw)
    cases = [
        make_case(gen, base(), 2, 16),
        make_case(gen, base(tie_embeddings=True, activation="relu", d_model=16, nhead=1, dim_feedforward=32), 3, 29),
    ]
    tensors, meta = {}, {"cases": str(len(cases)), "seed": str(a.seed), "torch": torch.__version__}
    for ci, (c, t) in enumerate(cases):
        meta[f"case{ci}.config"] = json.dumps(c)
        for key, val in t.items():
            tensors[f"case{ci}.{key}"] = val.float() if val.dtype == torch.float64 else val
    os.makedirs(a.out, exist_ok=True)
    st.save(os.path.join(a.out, "train_bf16.safetensors"), tensors, meta)


if __name__ == "__main__":
    main()
