"""PyTorch references for non-finite values: a NaN, +Inf, -Inf or a huge float64 value (1e300,
which becomes +Inf in float32) placed in a weight, an input or a float attn_mask of
nn.MultiheadAttention, nn.TransformerEncoderLayer and nn.TransformerDecoderLayer (batch_first,
eval mode). attn must give NaN where PyTorch gives NaN, +-Inf where it gives +-Inf and the same
finite values elsewhere.

The references are float64 evaluations of the float32 values attn reads: every tensor is first
rounded to float32 (1e300 -> Inf, as attn's F64 -> F32 conversion), then the module runs in
float64. Non-finite values sit where every query reads them: PyTorch 1.13's masked positions
(bool masks) still multiply 0 by a masked key's value and add -inf to its NaN logit, which attn,
like PyTorch's fused kernels, never reads (see tests/test_nonfinite.c); and no row is fully
masked (attn's documented output 0, PyTorch 1.13's NaN).

Per case N, metadata "caseN.module", "caseN.config", "caseN.call" as in gen_nn_layers.py, and
"caseN.what" a description; tensors "caseN.p.NAME" (the state_dict; float64 where the case's
huge value must reach attn as a float64 tensor, float32 otherwise), "caseN.<forward argument>"
and "caseN.out". Writes tests/parity/fixtures/nonfinite.safetensors (or --out DIR). Runs with
/usr/bin/python3 and Debian's python3-torch."""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402
from gen_nn_layers import randomize  # noqa: E402

D, H, F = 16, 4, 32
HUGE = 1e300


def place(t, idx, value):
    """t (float32) with value at idx; returns (tensor attn reads, tensor to store)."""
    if value == HUGE:
        t64 = t.double().clone()
        t64[idx] = HUGE
        return t64.float(), t64
    t = t.clone()
    t[idx] = value
    return t, t


def case(gen, module, cfg, call, m, inputs, where, idx, value, what):
    """where: 'p.NAME' (a parameter) or an input name; inputs: name -> float32 tensor or bool mask."""
    t = {}
    params = dict(m.named_parameters())
    for name, p in params.items():
        t["p." + name] = p.detach().float()
    for name, x in inputs.items():
        t[name] = x
    read, stored = place(t[where], idx, value)
    t[where] = stored
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(read.double() if "p." + name == where else t["p." + name].double())
    # with autograd on, as gen_nn_layers.py: PyTorch's inference fast paths stay off
    kw = {}
    for name in inputs:
        x = read if name == where else t[name]
        kw[name] = x.double() if x.is_floating_point() else x
    if module == "multihead_attention":
        out = m(kw["query"], kw["key"], kw["value"], attn_mask=kw.get("attn_mask"),
                key_padding_mask=kw.get("key_padding_mask"), need_weights=False)[0]
    else:
        out = m(**kw)
    t["out"] = out.detach().float()
    return module, cfg, call, t, f"{what}: {value!r} at {where}{list(idx)}"


def mha(gen, where, idx, value, mask=None, mixed_key_col=None):
    cfg = {"embed_dim": D, "num_heads": H}
    m = randomize(torch.nn.MultiheadAttention(D, H, batch_first=True), gen)
    inputs = {n: torch.randn(2, l, D, generator=gen).float() for n, l in (("query", 5), ("key", 6), ("value", 6))}
    if mixed_key_col is not None:
        # an infinite key-projection weight on this input column gives every key a +-inf feature;
        # keys 0 and 1 of opposite signs make every row see a +inf logit (NaN, in both libraries)
        # rather than, by chance, only -inf logits: a row whose logits are all -inf is attn's
        # documented fully-masked row (0; PyTorch >= 2.5 alike, 1.13 NaN)
        k = inputs["key"]
        k[:, 0, mixed_key_col] = k[:, 0, mixed_key_col].abs() + 0.1
        k[:, 1, mixed_key_col] = -k[:, 1, mixed_key_col].abs() - 0.1
    if mask == "float":
        am = torch.randn(5, 6, generator=gen).float()
        am[torch.rand(5, 6, generator=gen) < 0.3] = float("-inf")
        am[:, 0] = 0.5
        inputs["attn_mask"] = am
    if mask == "kpm":
        kpm = torch.rand(2, 6, generator=gen) < 0.3
        kpm[:, 0] = False
        inputs["key_padding_mask"] = kpm
    return case(gen, "multihead_attention", cfg, {}, m, inputs, where, idx, value, "multihead_attention")


def enc(gen, where, idx, value, norm_first, act, mask=None):
    kw = {"d_model": D, "nhead": H, "dim_feedforward": F, "activation": act, "layer_norm_eps": 1e-5,
          "norm_first": norm_first}
    m = randomize(torch.nn.TransformerEncoderLayer(batch_first=True, **kw), gen)
    inputs = {"src": torch.randn(2, 6, D, generator=gen).float()}
    if mask == "float":
        sm = torch.randn(6, 6, generator=gen).float()
        sm[torch.rand(6, 6, generator=gen) < 0.3] = float("-inf")
        sm[:, 0] = 0.25
        inputs["src_mask"] = sm
    return case(gen, "transformer_encoder_layer", kw, {}, m, inputs, where, idx, value,
                f"transformer_encoder_layer {act} norm_first={norm_first}")


def dec(gen, where, idx, value, norm_first, act):
    kw = {"d_model": D, "nhead": H, "dim_feedforward": F, "activation": act, "layer_norm_eps": 1e-5,
          "norm_first": norm_first}
    m = randomize(torch.nn.TransformerDecoderLayer(batch_first=True, **kw), gen)
    inputs = {"tgt": torch.randn(2, 5, D, generator=gen).float(), "memory": torch.randn(2, 7, D, generator=gen).float()}
    return case(gen, "transformer_decoder_layer", kw, {}, m, inputs, where, idx, value,
                f"transformer_decoder_layer {act} norm_first={norm_first}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "fixtures"))
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    gen = torch.Generator().manual_seed(a.seed)
    nan, inf = float("nan"), float("inf")
    cases = [
        # (a) weights
        mha(gen, "p.in_proj_weight", (3, 2), nan),
        mha(gen, "p.in_proj_weight", (2 * D + 5, 1), inf),
        mha(gen, "p.in_proj_weight", (D + 7, 4), HUGE, mixed_key_col=4),
        mha(gen, "p.out_proj.weight", (5, 1), inf),
        mha(gen, "p.out_proj.weight", (9, 3), HUGE),
        mha(gen, "p.out_proj.bias", (2,), -inf),
        mha(gen, "p.in_proj_bias", (2 * D + 1,), nan),
        enc(gen, "p.linear1.weight", (7, 3), nan, False, "relu"),
        enc(gen, "p.linear2.weight", (4, 9), inf, True, "relu"),
        enc(gen, "p.linear2.weight", (11, 2), HUGE, False, "gelu"),
        enc(gen, "p.linear1.bias", (5,), -inf, True, "relu"),
        enc(gen, "p.linear1.bias", (5,), -inf, True, "gelu"),
        enc(gen, "p.linear1.bias", (8,), inf, True, "relu"),
        enc(gen, "p.linear1.bias", (8,), nan, True, "relu"),
        enc(gen, "p.norm1.weight", (3,), -inf, True, "gelu"),
        enc(gen, "p.norm2.bias", (6,), inf, False, "relu"),
        enc(gen, "p.self_attn.out_proj.bias", (0,), HUGE, True, "relu"),
        dec(gen, "p.multihead_attn.in_proj_weight", (D + 2, 6), nan, False, "gelu"),
        dec(gen, "p.norm3.weight", (12,), -inf, True, "relu"),
        # (b) inputs
        mha(gen, "query", (0, 2, 3), nan),
        mha(gen, "query", (1, 4, 0), -inf),
        mha(gen, "key", (1, 4, 0), inf),
        mha(gen, "value", (0, 1, 5), -inf),
        mha(gen, "value", (1, 3, 7), HUGE),
        enc(gen, "src", (1, 2, 5), inf, False, "relu"),
        enc(gen, "src", (0, 4, 9), nan, True, "gelu"),
        dec(gen, "memory", (0, 3, 1), nan, False, "relu"),
        dec(gen, "tgt", (1, 0, 2), -inf, True, "gelu"),
        # (c) float attn_mask
        mha(gen, "attn_mask", (1, 3), nan, mask="float"),
        mha(gen, "attn_mask", (2, 4), -inf, mask="float"),
        mha(gen, "attn_mask", (4, 2), inf, mask="float"),
        enc(gen, "src_mask", (3, 1), nan, False, "relu", mask="float"),
        enc(gen, "src_mask", (5, 5), -inf, True, "gelu", mask="float"),
    ]
    tensors, meta = {}, {"cases": str(len(cases)), "seed": str(a.seed), "torch": torch.__version__}
    for ci, (module, cfg, call, t, what) in enumerate(cases):
        meta[f"case{ci}.module"] = module
        meta[f"case{ci}.config"] = json.dumps(cfg)
        meta[f"case{ci}.call"] = json.dumps(call)
        meta[f"case{ci}.what"] = what
        for key, val in t.items():
            tensors[f"case{ci}.{key}"] = val
    os.makedirs(a.out, exist_ok=True)
    st.save(os.path.join(a.out, "nonfinite.safetensors"), tensors, meta)


if __name__ == "__main__":
    main()
