"""PyTorch reference for attn_sdpa_forward / attn_sdpa_backward.

Builds random inputs (float32 values), computes attention and its gradients in float64 with
autograd, and writes tests/parity/fixtures/sdpa.safetensors (or --out DIR). Semantics follow
PyTorch's scaled_dot_product_attention: boolean masks True = may attend, float masks are added,
is_causal is the top-left torch.tril alignment; the bottom-right alignment is
tril(diagonal=Nk-Nq) as in FlashAttention >= 2.1. A fully masked row gives output 0 (PyTorch's
_safe_softmax, 2.5+). Runs with /usr/bin/python3 and Debian's python3-torch."""
import argparse
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402


def attention(q, k, v, allowed, bias, scale, softcap, hq, hk):
    g = hq // hk
    k = k.repeat_interleave(g, dim=1)
    v = v.repeat_interleave(g, dim=1)
    s = torch.matmul(q, k.transpose(-2, -1)) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    s = s + bias
    s = s.masked_fill(~allowed, float("-inf"))
    row_ok = allowed.any(dim=-1, keepdim=True)
    s = torch.where(row_ok, s, torch.zeros_like(s))
    p = torch.softmax(s, dim=-1) * row_ok  # safe softmax: a fully masked row is 0
    return torch.matmul(p, v)


def make_case(gen, name, B, Hq, Hk, Nq, Nk, d, dv, causal=0, wl=-1, wr=-1, bool_mask=False,
              add_mask=False, key_mask=False, alibi=False, softcap=0.0, scale=0.0, mag=1.0,
              masked_row=False, shift=0.0):
    f32 = lambda *s: (torch.randn(*s, generator=gen) * mag).float()
    q, k = f32(B, Hq, Nq, d), f32(B, Hk, Nk, d)
    if shift:
        # logits of magnitude `shift` whose differences within a row stay O(1): component 0 of
        # every key is exactly 1 and component 0 of each query carries the shift, so the softmax
        # and its gradient stay well conditioned (a one-hot row would make the gradient ~0)
        k[..., 0] = 1.0
        q[..., 0] = (shift * math.sqrt(d) * (1 + 0.1 * torch.rand(B, Hq, Nq, generator=gen))).float()
    v = torch.randn(B, Hk, Nk, dv, generator=gen).float()
    dout = torch.randn(B, Hq, Nq, dv, generator=gen).float()
    out = {"q": q, "k": k, "v": v, "dout": dout}
    allowed = torch.ones(B, Hq, Nq, Nk, dtype=torch.bool)
    off = Nk - Nq if causal == 2 else 0
    i = torch.arange(Nq).view(-1, 1)
    j = torch.arange(Nk).view(1, -1)
    if causal:
        allowed &= (j <= i + off)
    if wl >= 0:
        allowed &= (j >= i + off - wl)
    if wr >= 0:
        allowed &= (j <= i + off + wr)
    if bool_mask:
        bm = torch.rand(B, Hq, Nq, Nk, generator=gen) < 0.75
        if masked_row:
            bm[:, :, 0, :] = False
        out["bool_mask"] = bm.to(torch.uint8)
        allowed &= bm
    if key_mask:
        km = torch.rand(B, Nk, generator=gen) < 0.7
        km[0, -1] = False
        out["key_mask"] = km.to(torch.uint8)
        allowed &= km.view(B, 1, 1, Nk)
    bias = torch.zeros(B, Hq, Nq, Nk, dtype=torch.float64)
    if add_mask:
        am = torch.randn(B, Hq, Nq, Nk, generator=gen).float()
        am[torch.rand(B, Hq, Nq, Nk, generator=gen) < 0.1] = float("-inf")
        out["add_mask"] = am
        allowed &= ~torch.isinf(am)
        bias += torch.where(torch.isinf(am), torch.zeros_like(am), am).double()
    if alibi:
        slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / Hq) for h in range(Hq)]).float()
        out["alibi"] = slopes
        bias -= slopes.double().view(1, Hq, 1, 1) * (i + off - j).abs().double()
    sc = scale if scale else 1.0 / math.sqrt(d)
    qd, kd, vd = (t.double().requires_grad_() for t in (q, k, v))
    o = attention(qd, kd, vd, allowed, bias, sc, softcap, Hq, Hk)
    o.backward(dout.double())
    out.update({"out": o.detach(), "dq": qd.grad, "dk": kd.grad, "dv": vd.grad})
    desc = (f"causal={causal} wl={wl} wr={wr} softcap={softcap} scale={scale} bool={int(bool_mask)} "
            f"add={int(add_mask)} key={int(key_mask)} alibi={int(alibi)}")
    return name, out, desc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "fixtures"))
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    gen = torch.Generator().manual_seed(a.seed)
    cases = [
        make_case(gen, "plain", 2, 2, 2, 33, 33, 16, 16),
        make_case(gen, "cross", 1, 2, 2, 17, 40, 32, 8),
        make_case(gen, "causal top-left", 1, 2, 2, 17, 40, 16, 16, causal=1),
        make_case(gen, "causal bottom-right", 1, 2, 2, 17, 40, 16, 16, causal=2),
        make_case(gen, "bool+key masks", 2, 2, 2, 12, 20, 8, 8, bool_mask=True, key_mask=True,
                  masked_row=True),
        make_case(gen, "additive mask", 2, 2, 2, 12, 20, 8, 8, add_mask=True),
        make_case(gen, "GQA 8/2 causal", 1, 8, 2, 17, 17, 8, 8, causal=1),
        make_case(gen, "MQA 4/1", 1, 4, 1, 10, 30, 16, 12),
        make_case(gen, "logits ~1e4", 1, 2, 2, 16, 16, 8, 8, shift=1e4),
        make_case(gen, "window+alibi+softcap", 1, 4, 4, 20, 20, 16, 16, causal=2, wl=5, wr=0,
                  alibi=True, softcap=5.0),
        make_case(gen, "scale 0.3 block edge", 1, 1, 1, 65, 63, 32, 32, scale=0.3),
    ]
    tensors, meta = {}, {"cases": str(len(cases)), "seed": str(a.seed),
                         "torch": torch.__version__}
    for ci, (name, t, desc) in enumerate(cases):
        meta[f"case{ci}"] = desc
        meta[f"case{ci}.name"] = name
        for key, val in t.items():
            tensors[f"case{ci}.{key}"] = val.float() if val.dtype == torch.float64 else val
    os.makedirs(a.out, exist_ok=True)
    st.save(os.path.join(a.out, "sdpa.safetensors"), tensors, meta)


if __name__ == "__main__":
    main()
