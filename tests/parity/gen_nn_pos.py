"""PyTorch references for attn's positional encodings (tests/test_nn_pos.c).

- sinusoidal: the seed's PositionalEncoding formula, in float64:
    div = exp(arange(0, d, 2) * (-ln(10000) / d)); pe[:, 0::2] = sin(pos * div); pe[:, 1::2] = cos(pos * div)
- embedding: torch.nn.Embedding (with padding_idx) forward and weight gradient, repeated indices
- learned positions: x + Embedding(positions pos0 .. pos0 + N) and the gradients of x and the table
- RoPE: Hugging Face's rotate_half (NeoX) and GPT-J's interleaved rotation, partial rotary_dim,
  linear (position interpolation) and NTK-aware scaling (base * factor^(r / (r - 2))), float64
  autograd for the backward; inputs stored [B, N, H, head_dim]
- ALiBi: the paper's get_slopes() for several head counts, and attention with those slopes
  (bias -slope * |i - j|, causal) for a non-power-of-two head count.
Writes tests/parity/fixtures/nn_pos.safetensors (or --out DIR); each case's options are JSON in
the metadata ("rope<i>", "alibi.heads"). Runs with /usr/bin/python3 and Debian's python3-torch."""
import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402


def sinusoidal(max_len, d):
    pe = torch.zeros(max_len, d, dtype=torch.float64)
    position = torch.arange(0, max_len, dtype=torch.float64).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2, dtype=torch.float64) * (-math.log(10000.0) / d))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def get_slopes(n):
    def power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]
    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + get_slopes(2 * closest)[0::2][:n - closest]


def rope(x, pos, rd, base, layout, scaling, factor):
    """x [B, N, H, hd] float64; pos [N]."""
    if scaling == "ntk":
        base = base * factor ** (rd / (rd - 2))
    p = pos.double()
    if scaling == "linear":
        p = p / factor
    inv = base ** (-torch.arange(0, rd, 2, dtype=torch.float64) / rd)
    ang = p[:, None] * inv[None, :]            # [N, rd/2]
    cos, sin = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    xr, xp = x[..., :rd], x[..., rd:]
    if layout == "neox":
        a, b = xr[..., :rd // 2], xr[..., rd // 2:]
        out = torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)
    else:
        a, b = xr[..., 0::2], xr[..., 1::2]
        out = torch.stack([a * cos - b * sin, b * cos + a * sin], dim=-1).flatten(-2)
    return torch.cat([out, xp], dim=-1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "fixtures"))
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    gen = torch.Generator().manual_seed(a.seed)
    t, meta = {}, {"seed": str(a.seed), "torch": torch.__version__}
    f32 = lambda *s: torch.randn(*s, generator=gen).float()

    t["sin.d16"] = sinusoidal(64, 16).float()
    t["sin.d10"] = sinusoidal(300, 10).float()

    # nn.Embedding
    emb = torch.nn.Embedding(20, 8, padding_idx=3)
    emb.weight.data = f32(20, 8)
    emb = emb.double()
    idx = torch.randint(0, 20, (2, 9), generator=gen)
    idx[0, 0] = 3
    idx[1, 2] = idx[0, 1]
    out = emb(idx)
    dout = f32(*out.shape)
    out.backward(dout.double())
    t.update({"emb.weight": emb.weight.detach().float(), "emb.indices": idx, "emb.dout": dout,
              "emb.out": out.detach().float(), "emb.dweight": emb.weight.grad.float()})
    meta["emb"] = json.dumps({"num_embeddings": 20, "embedding_dim": 8, "padding_idx": 3})

    # learned positions
    pos_emb = torch.nn.Embedding(16, 8)
    pos_emb.weight.data = f32(16, 8)
    pos_emb = pos_emb.double()
    x = f32(3, 5, 8)
    xd = x.double().requires_grad_()
    pos0 = 4
    y = xd + pos_emb(torch.arange(pos0, pos0 + 5))[None]
    dy = f32(*y.shape)
    y.backward(dy.double())
    t.update({"lpos.weight": pos_emb.weight.detach().float(), "lpos.x": x, "lpos.dy": dy,
              "lpos.y": y.detach().float(), "lpos.dx": xd.grad.float(),
              "lpos.dweight": pos_emb.weight.grad.float()})
    meta["lpos"] = json.dumps({"pos0": pos0})

    # RoPE
    ropes = [
        dict(layout="neox", scaling="none", factor=1.0, rd=16, hd=16, pos0=0, base=10000.0),
        dict(layout="interleaved", scaling="none", factor=1.0, rd=16, hd=16, pos0=7, base=10000.0),
        dict(layout="neox", scaling="linear", factor=4.0, rd=8, hd=12, pos0=100, base=10000.0),
        dict(layout="interleaved", scaling="ntk", factor=8.0, rd=12, hd=16, pos0=0, base=500.0,
             explicit=True),
        dict(layout="neox", scaling="ntk", factor=2.0, rd=32, hd=32, pos0=3000, base=10000.0),
    ]
    for ri, r in enumerate(ropes):
        B, N, H = 2, 6, 3
        x = f32(B, N, H, r["hd"])
        if r.get("explicit"):
            pos = torch.randint(0, 5000, (N,), generator=gen)
            t[f"rope{ri}.positions"] = pos
        else:
            pos = torch.arange(r["pos0"], r["pos0"] + N)
        xd = x.double().requires_grad_()
        y = rope(xd, pos, r["rd"], r["base"], r["layout"], r["scaling"], r["factor"])
        dy = f32(*y.shape)
        y.backward(dy.double())
        t.update({f"rope{ri}.x": x, f"rope{ri}.y": y.detach().float(), f"rope{ri}.dy": dy,
                  f"rope{ri}.dx": xd.grad.float()})
        meta[f"rope{ri}"] = json.dumps(r)
    meta["ropes"] = str(len(ropes))

    # ALiBi slopes and attention with them (6 heads: not a power of two)
    heads = [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32]
    for h in heads:
        t[f"alibi.slopes{h}"] = torch.tensor(get_slopes(h), dtype=torch.float64).float()
    meta["alibi.heads"] = json.dumps(heads)
    H, N, d = 6, 10, 8
    q, k, v = f32(1, H, N, d), f32(1, H, N, d), f32(1, H, N, d)
    s = torch.matmul(q.double(), k.double().transpose(-2, -1)) / math.sqrt(d)
    i = torch.arange(N).view(-1, 1)
    j = torch.arange(N).view(1, -1)
    sl = torch.tensor(get_slopes(H), dtype=torch.float64).view(1, H, 1, 1)
    s = s - sl * (i - j).abs().double()
    s = s.masked_fill(j > i, float("-inf"))
    o = torch.matmul(torch.softmax(s, dim=-1), v.double())
    t.update({"alibi.q": q, "alibi.k": k, "alibi.v": v, "alibi.out": o.float()})

    os.makedirs(a.out, exist_ok=True)
    st.save(os.path.join(a.out, "nn_pos.safetensors"), t, meta)


if __name__ == "__main__":
    main()
