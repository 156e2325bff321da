"""PyTorch references for attn's attention capture: the weights chosen attention modules apply
during an ordinary forward, as a PyTorch user extracts them (the seed's get_attention_patterns):
each nn.MultiheadAttention's forward is wrapped to ask for need_weights=True,
average_attn_weights=False and keep what it returns, with the inputs and masks its layer passed.

- enc.*: a 2-layer nn.TransformerEncoder (batch_first, random parameters, LayerNorm weights around 1,
  float64, eval) on src with a key padding mask: layer 0's weights ("enc.layers.0") and layer 1's
  ("enc.layers.1"), [B, H, N, N].
- s2s.*: the seed's encoder-decoder (gen_nn_seq2seq.Seq2Seq: embeddings, positions, nn.Transformer,
  output projection) on token ids with padding masks and a causal target: every decoder layer's
  cross-attention ("s2s.cross.L", [B, H, T, S]) and self-attention ("s2s.self.L", [B, H, T, T]).
Writes DIR/capture.safetensors. Runs with /usr/bin/python3 and Debian's python3-torch."""
import argparse
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402
from gen_nn_layers import randomize  # noqa: E402  (float parameters, LayerNorm weights around 1; double, eval)
from gen_nn_seq2seq import Seq2Seq  # noqa: E402


def record_weights(mha, store, key):
    """Wrap mha.forward so that every call also returns its per-head weights into store[key]."""
    orig = mha.forward

    def forward(*args, **kw):
        wanted = kw.get("need_weights", True)
        kw["need_weights"] = True
        kw["average_attn_weights"] = False
        out, w = orig(*args, **kw)
        store[key] = w.detach().clone()
        return out, (w if wanted else None)

    mha.forward = forward


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "fixtures"))
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    gen = torch.Generator().manual_seed(a.seed + 1)
    tensors, meta = {}, {"seed": a.seed}

    # ---- encoder stack ----
    B, N, d, h, ff, L = 2, 9, 16, 4, 32, 2
    layer = nn.TransformerEncoderLayer(d, h, ff, dropout=0.0, batch_first=True)
    enc = randomize(nn.TransformerEncoder(layer, L, enable_nested_tensor=False), gen)
    state = {k: v.detach().float().clone() for k, v in enc.state_dict().items()}
    store = {}
    for i, lyr in enumerate(enc.layers):
        record_weights(lyr.self_attn, store, "enc.layers.%d" % i)
    src = torch.randn(B, N, d, generator=gen, dtype=torch.float64)
    kpm = torch.zeros(B, N, dtype=torch.bool)
    kpm[1, -3:] = True
    enc(src, src_key_padding_mask=kpm)  # autograd on: PyTorch's fused fast path stays off
    for k, v in state.items():
        tensors["enc.w." + k] = v.float()
    tensors["enc.src"] = src.float()
    tensors["enc.kpm"] = kpm.to(torch.uint8)
    for i in range(L):
        tensors["enc.layers.%d" % i] = store["enc.layers.%d" % i].float()
    meta.update({"enc.B": B, "enc.N": N, "enc.d_model": d, "enc.nhead": h, "enc.ff": ff, "enc.layers": L})

    # ---- encoder-decoder ----
    B, S, T, d, h, L, ff, sv, tv, max_len = 2, 7, 6, 16, 2, 2, 32, 11, 13, 32
    m = randomize(Seq2Seq(sv, tv, d, h, L, ff, max_len), gen)
    state = {k: v.detach().float().clone() for k, v in m.state_dict().items()}
    store = {}
    for i, lyr in enumerate(m.transformer.decoder.layers):
        record_weights(lyr.multihead_attn, store, "cross.%d" % i)
        record_weights(lyr.self_attn, store, "self.%d" % i)
    src_tok = torch.randint(0, sv, (B, S), generator=gen)
    tgt_tok = torch.randint(0, tv, (B, T), generator=gen)
    src_kpm = torch.zeros(B, S, dtype=torch.bool)
    src_kpm[1, -2:] = True
    tgt_kpm = torch.zeros(B, T, dtype=torch.bool)
    tgt_kpm[1, -1] = True
    m(src_tok, tgt_tok, src_kpm, tgt_kpm)
    for k, v in state.items():
        tensors["s2s.w." + k] = v.float()
    tensors["s2s.src"] = src_tok
    tensors["s2s.tgt"] = tgt_tok
    tensors["s2s.src_kpm"] = src_kpm.to(torch.uint8)
    tensors["s2s.tgt_kpm"] = tgt_kpm.to(torch.uint8)
    for i in range(L):
        tensors["s2s.cross.%d" % i] = store["cross.%d" % i].float()
        tensors["s2s.self.%d" % i] = store["self.%d" % i].float()
    meta.update({"s2s.B": B, "s2s.S": S, "s2s.T": T, "s2s.d_model": d, "s2s.nhead": h, "s2s.layers": L,
                 "s2s.ff": ff, "s2s.src_vocab": sv, "s2s.tgt_vocab": tv, "s2s.max_len": max_len})
    os.makedirs(a.out, exist_ok=True)
    st.save(os.path.join(a.out, "capture.safetensors"), tensors, meta)


if __name__ == "__main__":
    main()
