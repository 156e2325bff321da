"""PyTorch's own bf16 attention error, the yardstick of attn's bf16 flash attention.

For each case: random bf16 inputs (q, k, v stored as I16 tensors holding the bf16 bit patterns), the float64 attention of those inputs (the reference), and the relative RMS error
||o - ref|| / ||ref|| of PyTorch's bf16 math attention on the same inputs: Q K^T, the scale, the
soft cap, the biases, the softmax and P V all on bf16 tensors (torch 1.13 has no fused SDPA; this
is its math path). test_flash_bf16 requires attn's bf16 error within 2x of it, for every mask
kind. Writes tests/parity/fixtures/flash_bf16.safetensors (or --out DIR). Runs with
/usr/bin/python3 and Debian's python3-torch."""
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
    s = s + bias.to(s.dtype)
    s = s.masked_fill(~allowed, float("-inf"))
    row_ok = allowed.any(dim=-1, keepdim=True)
    s = torch.where(row_ok, s, torch.zeros_like(s))
    p = torch.softmax(s, dim=-1) * row_ok  # a fully masked row is 0
    return torch.matmul(p, v)


def rel_rms(x, ref):
    return float(torch.linalg.norm((x - ref).flatten()) / torch.linalg.norm(ref.flatten()))


def make_case(gen, name, B, Hq, Hk, Nq, Nk, d, dv, causal=0, wl=-1, wr=-1, bool_mask=False,
              add_mask=False, key_mask=False, alibi=False, softcap=0.0, masked_row=False):
    bf = lambda *s: torch.randn(*s, generator=gen).bfloat16().float()
    q, k, v = bf(B, Hq, Nq, d), bf(B, Hk, Nk, d), bf(B, Hk, Nk, dv)
    out = {"q": q, "k": k, "v": v}
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
    sc = 1.0 / math.sqrt(d)
    ref = attention(q.double(), k.double(), v.double(), allowed, bias, sc, softcap, Hq, Hk)
    o16 = attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), allowed, bias, sc, softcap, Hq, Hk)
    out["out"] = ref
    out["torch_err"] = torch.tensor([rel_rms(o16.double(), ref)], dtype=torch.float64)
    desc = (f"B={B} Hq={Hq} Hk={Hk} Nq={Nq} Nk={Nk} d={d} dv={dv} causal={causal} wl={wl} wr={wr} "
            f"softcap={softcap} bool={int(bool_mask)} add={int(add_mask)} key={int(key_mask)} "
            f"alibi={int(alibi)}")
    return name, out, desc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "fixtures"))
    ap.add_argument("--seed", type=int, default=4321)
    a = ap.parse_args()
    gen = torch.Generator().manual_seed(a.seed)
    cases = [
        make_case(gen, "plain", 1, 1, 1, 80, 80, 64, 64),
        make_case(gen, "causal top-left", 1, 1, 1, 70, 100, 64, 64, causal=1),
        make_case(gen, "causal bottom-right", 1, 2, 2, 70, 100, 32, 32, causal=2),
        make_case(gen, "causal window 20", 1, 2, 2, 100, 100, 32, 32, causal=1, wl=20),
        make_case(gen, "window 15/10", 1, 2, 2, 100, 100, 16, 16, wl=15, wr=10),
        make_case(gen, "bool + key masks, a masked row", 1, 2, 2, 70, 80, 32, 32, bool_mask=True,
                  key_mask=True, masked_row=True),
        make_case(gen, "additive mask", 1, 2, 2, 70, 80, 32, 32, add_mask=True),
        make_case(gen, "alibi causal", 1, 4, 4, 80, 80, 16, 16, causal=1, alibi=True),
        make_case(gen, "softcap", 1, 2, 2, 80, 80, 32, 32, softcap=5.0),
        make_case(gen, "MQA 2/1 causal d=128", 1, 2, 1, 66, 66, 128, 128, causal=1),
        make_case(gen, "d=7 dv=5 odd", 1, 2, 1, 67, 67, 7, 5),
        # several 128-key softmax steps: a step that starts on its second tile (the window's first
        # key past 64), later steps' V blocks, a last step of 64 + 13 keys
        make_case(gen, "causal window 90, steps", 1, 1, 1, 300, 300, 32, 32, causal=1, wl=90),
        make_case(gen, "three key steps, odd tail", 1, 1, 1, 70, 333, 64, 64),
    ]
    tensors, meta = {}, {"cases": str(len(cases)), "seed": str(a.seed), "torch": torch.__version__}
    for ci, (name, t, desc) in enumerate(cases):
        meta[f"case{ci}"] = desc
        meta[f"case{ci}.name"] = name
        for key, val in t.items():
            if key == "out":
                val = val.float()
            elif key in ("q", "k", "v"):  # the bf16 bit patterns
                val = val.bfloat16().view(torch.int16)
            tensors[f"case{ci}.{key}"] = val
        print(f"{name}: torch bf16 rel err {float(t['torch_err'][0]):.3e}")
    os.makedirs(a.out, exist_ok=True)
    st.save(os.path.join(a.out, "flash_bf16.safetensors"), tensors, meta)


if __name__ == "__main__":
    main()
