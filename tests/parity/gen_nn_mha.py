"""PyTorch reference for attn_mha_* (torch.nn.MultiheadAttention, batch_first=True).

Random-initialised modules (every parameter drawn, biases included) in eval mode, random inputs,
float64 outputs and gradients (autograd, for a random upstream gradient) of the inputs and every
parameter. Writes tests/parity/fixtures/nn_mha.safetensors (or --out DIR).

Per case N, metadata "caseN.config" holds the constructor's keyword arguments as JSON (the format
of `attn run`), "caseN.call" the call options (self_attention, is_causal, need_weights,
average_attn_weights); tensors "caseN.query|key|value|attn_mask|key_padding_mask|dout" are the
inputs (boolean masks True = not allowed, as PyTorch), "caseN.p.NAME" the state_dict,
"caseN.out|weights|dquery|dkey|dvalue" and "caseN.g.NAME" the references. is_causal cases pass
PyTorch the equivalent boolean attn_mask (torch 1.13 has no is_causal argument); masks never mask
a whole row (PyTorch gives NaN there, attn gives 0). Runs with /usr/bin/python3 and Debian's
python3-torch."""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402


def make_case(gen, cfg, B, Nq, Nk, self_attn=False, attn_mask=None, mask_3d=False, kpm=None,
              is_causal=False, need_weights=False, average=True):
    E, H = cfg["embed_dim"], cfg["num_heads"]
    kdim = cfg.get("kdim") or E
    vdim = cfg.get("vdim") or E
    m = torch.nn.MultiheadAttention(batch_first=True, **cfg)
    for p in m.parameters():
        p.data = (torch.randn(p.shape, generator=gen) * 0.3).float()
    m = m.double().eval()
    t = {}
    f32 = lambda *s: torch.randn(*s, generator=gen).float()
    if self_attn:
        assert Nq == Nk
        x = f32(B, Nq, E)
        t["query"] = x
        q = k = v = x.double().requires_grad_()
        leaves = [("dquery", q)]
    else:
        t["query"], t["key"], t["value"] = f32(B, Nq, E), f32(B, Nk, kdim), f32(B, Nk, vdim)
        q, k, v = (t[n].double().requires_grad_() for n in ("query", "key", "value"))
        leaves = [("dquery", q), ("dkey", k), ("dvalue", v)]
    am = None
    shape = (B * H, Nq, Nk) if mask_3d else (Nq, Nk)
    if attn_mask == "bool":
        bm = torch.rand(*shape, generator=gen) < 0.3
        bm[..., 0] = False  # never a fully masked row
        t["attn_mask"] = bm
        am = bm
    elif attn_mask == "float":
        fm = torch.randn(*shape, generator=gen).float()
        fm[torch.rand(*shape, generator=gen) < 0.2] = float("-inf")
        fm[..., 0] = 0.5
        t["attn_mask"] = fm
        am = fm.double()
    if is_causal:
        causal = torch.ones(Nq, Nk, dtype=torch.bool).triu(1)
        if am is None:
            am = causal
        elif am.dtype == torch.bool:
            am = am | causal
        else:
            am = am.masked_fill(causal, float("-inf"))
    kp = None
    if kpm == "bool":
        kb = torch.rand(B, Nk, generator=gen) < 0.3
        kb[:, 0] = False
        kb[0, -1] = True
        t["key_padding_mask"] = kb
        kp = kb
    elif kpm == "float":
        kf = torch.randn(B, Nk, generator=gen).float()
        kf[0, -1] = float("-inf")
        t["key_padding_mask"] = kf
        kp = kf.double()
    out, w = m(q, k, v, key_padding_mask=kp, need_weights=need_weights, attn_mask=am,
               average_attn_weights=average)
    dout = f32(*out.shape)
    t["dout"] = dout
    out.backward(dout.double())
    t["out"] = out.detach()
    if need_weights:
        t["weights"] = w.detach()
    for name, leaf in leaves:
        t[name] = leaf.grad
    for name, p in m.named_parameters():
        t["p." + name] = p.detach()
        t["g." + name] = p.grad
    call = {"self_attention": self_attn, "is_causal": is_causal, "need_weights": need_weights,
            "average_attn_weights": average}
    return cfg, call, t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "fixtures"))
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    gen = torch.Generator().manual_seed(a.seed)
    base = lambda **kw: dict({"embed_dim": 16, "num_heads": 4}, **kw)
    cases = [
        make_case(gen, base(), 2, 6, 6, self_attn=True, need_weights=True),
        make_case(gen, base(), 2, 7, 7, self_attn=True, kpm="bool", is_causal=True),
        make_case(gen, base(embed_dim=12, num_heads=3, kdim=10, vdim=7), 2, 5, 9,
                  attn_mask="bool", need_weights=True, average=False),
        make_case(gen, base(), 2, 6, 8, attn_mask="float", mask_3d=True, need_weights=True),
        make_case(gen, base(num_heads=2), 2, 5, 6, kpm="float"),
        make_case(gen, base(add_bias_kv=True, add_zero_attn=True), 2, 5, 7, attn_mask="bool",
                  kpm="bool", need_weights=True, average=False),
        make_case(gen, base(add_bias_kv=True, bias=False), 2, 6, 6, attn_mask="float",
                  need_weights=True),
        make_case(gen, base(add_zero_attn=True, kdim=8, vdim=8), 2, 6, 6, is_causal=True,
                  need_weights=True),
        make_case(gen, base(bias=False), 3, 4, 5, attn_mask="bool", mask_3d=True, kpm="bool"),
        make_case(gen, base(embed_dim=8, num_heads=1), 1, 9, 9, self_attn=True, is_causal=True,
                  attn_mask="float", need_weights=True),
    ]
    tensors, meta = {}, {"cases": str(len(cases)), "seed": str(a.seed), "torch": torch.__version__}
    for ci, (cfg, call, t) in enumerate(cases):
        meta[f"case{ci}.config"] = json.dumps(cfg)
        meta[f"case{ci}.call"] = json.dumps(call)
        for key, val in t.items():
            tensors[f"case{ci}.{key}"] = val.float() if val.dtype == torch.float64 else val
    os.makedirs(a.out, exist_ok=True)
    st.save(os.path.join(a.out, "nn_mha.safetensors"), tensors, meta)


if __name__ == "__main__":
    main()
