"""PyTorch references for attn's transformer layers, stacks and nn.Transformer (batch_first=True).

Random-initialised nn.TransformerEncoderLayer, TransformerDecoderLayer, TransformerEncoder,
TransformerDecoder and Transformer (every parameter drawn; LayerNorm weights around 1) in eval
mode, random inputs and masks, float64 outputs and gradients (autograd, random upstream gradient)
of the inputs and every parameter. Writes tests/parity/fixtures/nn_layers.safetensors (or --out DIR).

Per case N, metadata "caseN.module" names the module as `attn run` does, "caseN.config" holds its
constructor keyword arguments as `attn run`'s MODEL.json (stacks: num_layers, norm and the layer's
arguments under "encoder_layer" / "decoder_layer"), "caseN.call" the causal flags the C side sets,
named as the forward() arguments of PyTorch 2.x (is_causal / tgt_is_causal; PyTorch 1.13 has none
and gets the equivalent boolean mask instead). Tensors:
"caseN.<forward argument>" (src, tgt, memory, *_mask, *_key_padding_mask; boolean True = not
allowed), "caseN.dout", "caseN.out", "caseN.d<input>" and "caseN.p.NAME" / "caseN.g.NAME" (the
state_dict and its gradient). Masks never hide a whole row (PyTorch gives NaN there). A float
key_padding_mask comes without attn_mask: torch 1.13 treats it as boolean next to a boolean mask and
rejects it next to a float one (2.x adds them, as attn does). Runs with
/usr/bin/python3 and Debian's python3-torch."""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

D, H, F = 16, 4, 32


def layer_kwargs(norm_first=False, activation="relu", eps=1e-5):
    return {"d_model": D, "nhead": H, "dim_feedforward": F, "activation": activation,
            "layer_norm_eps": eps, "norm_first": norm_first}


def randomize(m, gen):
    for name, p in m.named_parameters():
        r = torch.randn(p.shape, generator=gen) * 0.3
        if "norm" in name and name.endswith("weight"):
            r = 1.0 + r
        p.data = r.float()
    return m.double().eval()


def bool_mask(gen, *shape):
    m = torch.rand(*shape, generator=gen) < 0.3
    m[..., 0] = False
    return m


def float_mask(gen, *shape):
    m = torch.randn(*shape, generator=gen).float()
    m[torch.rand(*shape, generator=gen) < 0.2] = float("-inf")
    m[..., 0] = 0.25
    return m


def kpm_bool(gen, B, N):
    m = torch.rand(B, N, generator=gen) < 0.3
    m[:, 0] = False
    m[0, -1] = True
    return m


def causal(n):
    return torch.ones(n, n, dtype=torch.bool).triu(1)


def run(gen, module, cfg, m, inputs, masks, call, grads):
    """inputs: name -> float32 tensor (gradients wanted); masks: name -> tensor passed as is, or
    ('causal', n) for a causal mask the C side expresses with a flag."""
    t = {}
    kw = {}
    leaves = {}
    for name, x in inputs.items():
        t[name] = x
        leaves[name] = x.double().requires_grad_()
        kw[name] = leaves[name]
    for name, mk in masks.items():
        if isinstance(mk, tuple):
            kw[name] = causal(mk[1])
            continue
        t[name] = mk
        kw[name] = mk.double() if mk.is_floating_point() else mk
    out = m(**kw)
    dout = torch.randn(*out.shape, generator=gen).float()
    out.backward(dout.double())
    t["dout"] = dout
    t["out"] = out.detach()
    for name in grads:
        t["d" + name] = leaves[name].grad
    for name, p in m.named_parameters():
        t["p." + name] = p.detach()
        t["g." + name] = p.grad
    return module, cfg, call, t


def enc_layer(gen, B, N, norm_first, act, masks_kind, eps=1e-5):
    kw = layer_kwargs(norm_first, act, eps)
    m = randomize(torch.nn.TransformerEncoderLayer(batch_first=True, **kw), gen)
    src = torch.randn(B, N, D, generator=gen).float()
    masks, call = {}, {}
    if "kpm" in masks_kind:
        masks["src_key_padding_mask"] = kpm_bool(gen, B, N)
    if "kpmf" in masks_kind:
        masks["src_key_padding_mask"] = float_mask(gen, B, N)
    if "bool" in masks_kind:
        masks["src_mask"] = bool_mask(gen, N, N)
    if "bool3" in masks_kind:
        masks["src_mask"] = bool_mask(gen, B * H, N, N)
    if "float" in masks_kind:
        masks["src_mask"] = float_mask(gen, N, N)
    if "causal" in masks_kind:
        masks["src_mask"] = ("causal", N)
        call["is_causal"] = True
    return run(gen, "transformer_encoder_layer", kw, m, {"src": src}, masks, call, ["src"])


def dec_masks(gen, B, Nt, Nm, kinds):
    masks, call = {}, {}
    if "tcausal" in kinds:
        masks["tgt_mask"] = ("causal", Nt)
        call["tgt_is_causal"] = True
    if "tfloat" in kinds:
        masks["tgt_mask"] = float_mask(gen, Nt, Nt)
    if "tkpm" in kinds:
        masks["tgt_key_padding_mask"] = kpm_bool(gen, B, Nt)
    if "mbool" in kinds:
        masks["memory_mask"] = bool_mask(gen, Nt, Nm)
    if "mkpm" in kinds:
        masks["memory_key_padding_mask"] = kpm_bool(gen, B, Nm)
    return masks, call


def dec_layer(gen, B, Nt, Nm, norm_first, act, kinds):
    kw = layer_kwargs(norm_first, act)
    m = randomize(torch.nn.TransformerDecoderLayer(batch_first=True, **kw), gen)
    tgt = torch.randn(B, Nt, D, generator=gen).float()
    mem = torch.randn(B, Nm, D, generator=gen).float()
    masks, call = dec_masks(gen, B, Nt, Nm, kinds)
    return run(gen, "transformer_decoder_layer", kw, m, {"tgt": tgt, "memory": mem}, masks, call,
               ["tgt", "memory"])


def enc_stack(gen, B, N, L, norm, norm_first, act, masks_kind):
    kw = layer_kwargs(norm_first, act)
    layer = torch.nn.TransformerEncoderLayer(batch_first=True, **kw)
    m = torch.nn.TransformerEncoder(layer, L, norm=torch.nn.LayerNorm(D) if norm else None,
                                    enable_nested_tensor=False)
    m = randomize(m, gen)
    src = torch.randn(B, N, D, generator=gen).float()
    masks, call = {}, {}
    if "kpm" in masks_kind:
        masks["src_key_padding_mask"] = kpm_bool(gen, B, N)
    if "causal" in masks_kind:
        masks["mask"] = ("causal", N)
        call["is_causal"] = True
    cfg = {"num_layers": L, "norm": norm, "encoder_layer": kw}
    module, cfg, call, t = run(gen, "transformer_encoder", cfg, m, {"src": src}, masks, call, ["src"])
    return module, cfg, call, t


def dec_stack(gen, B, Nt, Nm, L, norm, norm_first, act, kinds):
    kw = layer_kwargs(norm_first, act)
    layer = torch.nn.TransformerDecoderLayer(batch_first=True, **kw)
    m = torch.nn.TransformerDecoder(layer, L, norm=torch.nn.LayerNorm(D) if norm else None)
    m = randomize(m, gen)
    tgt = torch.randn(B, Nt, D, generator=gen).float()
    mem = torch.randn(B, Nm, D, generator=gen).float()
    masks, call = dec_masks(gen, B, Nt, Nm, kinds)
    cfg = {"num_layers": L, "norm": norm, "decoder_layer": kw}
    return run(gen, "transformer_decoder", cfg, m, {"tgt": tgt, "memory": mem}, masks, call,
               ["tgt", "memory"])


def transformer(gen, B, Ns, Nt, Le, Ld, norm_first, act, eps, kinds):
    kw = layer_kwargs(norm_first, act, eps)
    kw.update({"num_encoder_layers": Le, "num_decoder_layers": Ld})
    m = randomize(torch.nn.Transformer(batch_first=True, **kw), gen)
    src = torch.randn(B, Ns, D, generator=gen).float()
    tgt = torch.randn(B, Nt, D, generator=gen).float()
    masks, call = dec_masks(gen, B, Nt, Ns, kinds)
    if "skpm" in kinds:
        masks["src_key_padding_mask"] = kpm_bool(gen, B, Ns)
    if "sfloat" in kinds:
        masks["src_mask"] = float_mask(gen, Ns, Ns)
    return run(gen, "transformer", kw, m, {"src": src, "tgt": tgt}, masks, call, ["src", "tgt"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "fixtures"))
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    gen = torch.Generator().manual_seed(a.seed)
    cases = [
        enc_layer(gen, 2, 6, False, "relu", ["kpm", "causal"]),
        enc_layer(gen, 2, 5, True, "gelu", ["float"]),
        enc_layer(gen, 2, 6, False, "gelu", ["bool3", "kpm"], eps=1e-3),
        enc_layer(gen, 2, 7, True, "relu", ["kpmf"]),
        dec_layer(gen, 2, 5, 7, False, "relu", ["tcausal", "mkpm"]),
        dec_layer(gen, 2, 6, 4, True, "gelu", ["tfloat", "mbool", "tkpm"]),
        enc_stack(gen, 2, 6, 2, True, False, "relu", ["kpm"]),
        enc_stack(gen, 1, 7, 2, False, True, "gelu", ["causal"]),
        dec_stack(gen, 2, 5, 6, 2, True, True, "relu", ["tcausal", "mkpm"]),
        dec_stack(gen, 2, 4, 5, 2, False, False, "gelu", ["tkpm", "mbool"]),
        transformer(gen, 2, 6, 5, 2, 2, False, "relu", 1e-5, ["skpm", "tcausal", "mkpm"]),
        transformer(gen, 1, 5, 6, 1, 2, True, "gelu", 1e-4, ["sfloat", "tfloat"]),
    ]
    tensors, meta = {}, {"cases": str(len(cases)), "seed": str(a.seed), "torch": torch.__version__}
    for ci, (module, cfg, call, t) in enumerate(cases):
        meta[f"case{ci}.module"] = module
        meta[f"case{ci}.config"] = json.dumps(cfg)
        meta[f"case{ci}.call"] = json.dumps(call)
        for key, val in t.items():
            tensors[f"case{ci}.{key}"] = val.float() if val.dtype == torch.float64 else val
    os.makedirs(a.out, exist_ok=True)
    st.save(os.path.join(a.out, "nn_layers.safetensors"), tensors, meta)


if __name__ == "__main__":
    main()
