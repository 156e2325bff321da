"""PyTorch references for attn_viz_rollout (attention rollout, Abnar & Zuidema 2020): each
nn.MultiheadAttention of a stack is wrapped to return its per-head weights (need_weights=True,
average_attn_weights=False, as a PyTorch user collects them with hooks), and the rollout is computed
from them in float64 with torch, as in the paper and its common implementations:
    A~_l = rownorm(A_l.mean(heads) + I),   R = A~_{L-1} @ ... @ A~_0.

Three stacks (float64, eval, random parameters with LayerNorm weights around 1), each stored with
its parameters, input, the captured weights "<case>.attn.L" [B, H, N, N] and "<case>.rollout" [B, N, N]:
- enc: a 3-layer nn.TransformerEncoder on src with a key padding mask (an encoder stack);
- causal: a 2-layer pre-norm encoder with is_causal (a GPT stack's attention pattern);
- vit: a 4-layer pre-norm encoder on 1 + 16 tokens (a ViT: the CLS token then 4 x 4 patches);
  the CLS row R[:, 0, 1:] is what the overlay shows.
Writes DIR/viz_rollout.safetensors, and the enc case as `attn run` files for the `attn viz` test:
DIR/viz_run_w.safetensors (its state_dict) and DIR/viz_run_in.safetensors (src, src_key_padding_mask). Runs with /usr/bin/python3 and Debian's python3-torch."""
import argparse
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402
from gen_nn_layers import randomize  # noqa: E402


def record_weights(mha, store, key):
    orig = mha.forward

    def forward(*args, **kw):
        kw["need_weights"] = True
        kw["average_attn_weights"] = False
        out, w = orig(*args, **kw)
        store[key] = w.detach().clone()
        return out, w

    mha.forward = forward


def rollout(ws):
    """ws: per-layer [B, H, N, N] (first layer first) -> [B, N, N], float64."""
    r = None
    for w in ws:
        w = w.double()
        a = w.mean(dim=1) + torch.eye(w.shape[-1], dtype=torch.float64)
        a = a / a.sum(dim=-1, keepdim=True)
        r = a if r is None else a @ r
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "fixtures"))
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    gen = torch.Generator().manual_seed(a.seed + 7)
    tensors, meta = {}, {"seed": a.seed}
    cases = [  # name, B, N, d, heads, ff, layers, norm_first, causal, padding
        ("enc", 2, 9, 16, 4, 32, 3, False, False, True),
        ("causal", 2, 10, 16, 2, 32, 2, True, True, False),
        ("vit", 1, 17, 16, 4, 32, 4, True, False, False),
    ]
    for name, B, N, d, h, ff, L, norm_first, causal, padding in cases:
        layer = nn.TransformerEncoderLayer(d, h, ff, dropout=0.0, batch_first=True, norm_first=norm_first)
        enc = randomize(nn.TransformerEncoder(layer, L, enable_nested_tensor=False), gen)
        state = {k: v.detach().float().clone() for k, v in enc.state_dict().items()}
        store = {}
        for i, lyr in enumerate(enc.layers):
            record_weights(lyr.self_attn, store, i)
        src = torch.randn(B, N, d, generator=gen, dtype=torch.float64)
        kpm = torch.zeros(B, N, dtype=torch.bool)
        if padding:
            kpm[1, -3:] = True
        mask = torch.triu(torch.full((N, N), float("-inf"), dtype=torch.float64), 1) if causal else None
        enc(src, mask=mask, src_key_padding_mask=kpm)  # autograd on: PyTorch's fused fast path stays off
        ws = [store[i] for i in range(L)]
        for k, v in state.items():
            tensors[name + ".w." + k] = v.float()
        tensors[name + ".src"] = src.float()
        tensors[name + ".kpm"] = kpm.to(torch.uint8)
        for i in range(L):
            tensors["%s.attn.%d" % (name, i)] = ws[i].float()
        tensors[name + ".rollout"] = rollout(ws)  # float64
        # the rollout of the float32-rounded weights the fixture stores (what the C side is fed)
        tensors[name + ".rollout32"] = rollout([w.float() for w in ws])
        if name == "enc":
            run_w = dict(state)
            run_in = {"src": src.float(), "src_key_padding_mask": kpm.to(torch.uint8)}
        meta.update({name + ".B": B, name + ".N": N, name + ".d_model": d, name + ".nhead": h, name + ".ff": ff,
                     name + ".layers": L, name + ".norm_first": int(norm_first), name + ".causal": int(causal)})
    os.makedirs(a.out, exist_ok=True)
    st.save(os.path.join(a.out, "viz_rollout.safetensors"), tensors, meta)
    st.save(os.path.join(a.out, "viz_run_w.safetensors"), run_w)
    st.save(os.path.join(a.out, "viz_run_in.safetensors"), run_in)


if __name__ == "__main__":
    main()
