"""PyTorch reference for attn_gpt_* (decoder-only language model).

PyTorch has no GPT module, so the reference is composed from PyTorch's own parts: nn.Embedding for
tokens (and learned positions), nn.TransformerEncoderLayer(norm_first=True) blocks under a causal
mask, a final nn.LayerNorm and a bias-free nn.Linear head (optionally tied to the token embedding).
RoPE variants use a block written out from the same layer's parameters (in_proj, out_proj, norms,
linears) with Q and K rotated as gen_nn_pos.rope does; that block is first checked against
nn.TransformerEncoderLayer with the rotation switched off. Random parameters, eval mode, float64
logits and parameter gradients (autograd, random upstream gradient).

Writes tests/parity/fixtures/nn_gpt.safetensors (or --out DIR): per case N, metadata
"caseN.config" (the attn_gpt_config as JSON), tensors "caseN.tokens" (I64), optionally
"caseN.key_padding_mask" (True = padding), "caseN.dlogits", "caseN.logits", "caseN.p.NAME" and
"caseN.g.NAME" (named_parameters(): a tied head appears once, as tok_emb.weight). Runs with
/usr/bin/python3 and Debian's python3-torch."""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402
from gen_nn_pos import rope as rotate  # noqa: E402


class RefGPT(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["d_model"]
        self.c = c
        self.tok_emb = torch.nn.Embedding(c["vocab_size"], d)
        if c["positions"] == "learned":
            self.pos_emb = torch.nn.Embedding(c["max_positions"], d)
        self.layers = torch.nn.ModuleList([
            torch.nn.TransformerEncoderLayer(d, c["nhead"], c["dim_feedforward"], dropout=0.0,
                                             activation=c["activation"], batch_first=True,
                                             norm_first=True, layer_norm_eps=c["layer_norm_eps"])
            for _ in range(c["num_layers"])])
        self.norm = torch.nn.LayerNorm(d)
        self.lm_head = torch.nn.Linear(d, c["vocab_size"], bias=False)
        if c["tie_embeddings"]:
            self.lm_head.weight = self.tok_emb.weight

    def block(self, layer, x, kpm, rope):
        """TransformerEncoderLayer(norm_first) written out, Q and K rotated when rope is given."""
        sa = layer.self_attn
        B, N, E = x.shape
        H = sa.num_heads
        hd = E // H
        h = layer.norm1(x)
        q, k, v = F.linear(h, sa.in_proj_weight, sa.in_proj_bias).chunk(3, dim=-1)
        q, k, v = (t.reshape(B, N, H, hd) for t in (q, k, v))
        if rope:
            pos = torch.arange(N)
            r = rope
            q = rotate(q, pos, r["rotary_dim"] or hd, r["base"], r["layout"], r["scaling"], r["factor"])
            k = rotate(k, pos, r["rotary_dim"] or hd, r["base"], r["layout"], r["scaling"], r["factor"])
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        s = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(hd)
        s = s.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), float("-inf"))
        if kpm is not None:
            s = s.masked_fill(kpm[:, None, None, :], float("-inf"))
        o = torch.matmul(torch.softmax(s, dim=-1), v).transpose(1, 2).reshape(B, N, E)
        x = x + F.linear(o, sa.out_proj.weight, sa.out_proj.bias)
        return x + layer.linear2(layer.activation(layer.linear1(layer.norm2(x))))

    def forward(self, tokens, kpm=None, manual=False):
        N = tokens.shape[1]
        x = self.tok_emb(tokens)
        if self.c["positions"] == "learned":
            x = x + self.pos_emb(torch.arange(N))[None]
        causal = torch.ones(N, N, dtype=torch.bool).triu(1)
        rope = self.c.get("rope") if self.c["positions"] == "rope" else None
        for layer in self.layers:
            if rope or manual:
                x = self.block(layer, x, kpm, rope)
            else:
                x = layer(x, src_mask=causal, src_key_padding_mask=kpm)
        return self.lm_head(self.norm(x))


def make_case(gen, c, B, N, kpm=False):
    m = RefGPT(c)
    for name, p in m.named_parameters():
        r = torch.randn(p.shape, generator=gen) * 0.3
        if "norm" in name and name.endswith("weight"):
            r = 1.0 + r
        p.data = r.float()
    m = m.double().eval()
    tokens = torch.randint(0, c["vocab_size"], (B, N), generator=gen)
    t = {"tokens": tokens}
    mask = None
    if kpm:
        mask = torch.zeros(B, N, dtype=torch.bool)
        mask[0, -2:] = True  # right padding: every query keeps key 0
        t["key_padding_mask"] = mask
    if c["positions"] == "learned":  # the written-out block agrees with PyTorch's layer
        ref = m(tokens, mask)
        man = m(tokens, mask, manual=True)
        assert torch.allclose(ref, man, rtol=1e-10, atol=1e-10), (ref - man).abs().max()
    logits = m(tokens, mask)
    dlogits = torch.randn(*logits.shape, generator=gen).float()
    logits.backward(dlogits.double())
    t["dlogits"] = dlogits
    t["logits"] = logits.detach()
    for name, p in m.named_parameters():
        t["p." + name] = p.detach()
        t["g." + name] = p.grad
    return c, t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "fixtures"))
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    gen = torch.Generator().manual_seed(a.seed)
    base = lambda **kw: dict({"vocab_size": 23, "max_positions": 12, "d_model": 16, "nhead": 4,
                              "dim_feedforward": 32, "activation": "gelu", "num_layers": 2,
                              "layer_norm_eps": 1e-5, "positions": "learned",
                              "tie_embeddings": False}, **kw)
    rope = lambda **kw: dict({"layout": "neox", "base": 10000.0, "scaling": "none", "factor": 1.0,
                              "rotary_dim": 0}, **kw)
    cases = [
        make_case(gen, base(), 2, 7),
        make_case(gen, base(tie_embeddings=True, activation="relu"), 2, 9, kpm=True),
        make_case(gen, base(positions="rope", rope=rope()), 2, 8),
        make_case(gen, base(positions="rope", tie_embeddings=True,
                            rope=rope(layout="interleaved", scaling="ntk", factor=4.0, base=500.0,
                                      rotary_dim=0)), 1, 11, kpm=True),
    ]
    tensors, meta = {}, {"cases": str(len(cases)), "seed": str(a.seed), "torch": torch.__version__}
    for ci, (c, t) in enumerate(cases):
        meta[f"case{ci}.config"] = json.dumps(c)
        for key, val in t.items():
            tensors[f"case{ci}.{key}"] = val.float() if val.dtype == torch.float64 else val
    os.makedirs(a.out, exist_ok=True)
    st.save(os.path.join(a.out, "nn_gpt.safetensors"), tensors, meta)


if __name__ == "__main__":
    main()
