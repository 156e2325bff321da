"""PyTorch reference for attn_seq2seq: the seed's encoder-decoder Transformer on nn.Transformer.

Token embeddings * sqrt(d_model) + sinusoidal positions (the seed's formula, evaluated in float64
and rounded once, as attn does), nn.Transformer(batch_first=True, dropout=0) with a causal target
mask and key padding masks, and the output projection. Writes the state_dict, the inputs, the
logits and the parameter gradients for a random upstream gradient (float64 autograd) to
DIR/nn_seq2seq.safetensors."""
import argparse
import math
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402


class Seq2Seq(nn.Module):
    def __init__(self, src_vocab, tgt_vocab, d_model, nhead, layers, ff, max_len, activation="relu"):
        super().__init__()
        self.d_model = d_model
        self.src_embedding = nn.Embedding(src_vocab, d_model)
        self.tgt_embedding = nn.Embedding(tgt_vocab, d_model)
        self.transformer = nn.Transformer(d_model, nhead, layers, layers, ff, dropout=0.0, batch_first=True,
                                          activation=activation)
        self.output_projection = nn.Linear(d_model, tgt_vocab)
        pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
        div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model, dtype=torch.float64)
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
        self.register_buffer("pe", pe.float(), persistent=False)

    def forward(self, src, tgt, src_kpm, tgt_kpm):
        xs = self.src_embedding(src) * math.sqrt(self.d_model) + self.pe[: src.shape[1]].to(self.src_embedding.weight.dtype)
        xt = self.tgt_embedding(tgt) * math.sqrt(self.d_model) + self.pe[: tgt.shape[1]].to(self.src_embedding.weight.dtype)
        n = tgt.shape[1]
        causal = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
        y = self.transformer(xs, xt, tgt_mask=causal, src_key_padding_mask=src_kpm,
                             tgt_key_padding_mask=tgt_kpm, memory_key_padding_mask=src_kpm)
        return self.output_projection(y)


class TokenEncoder(nn.Module):
    """The seed's TransformerEncoder with PyTorch's layers: embedding * sqrt(d) + pe, layers, norm."""

    def __init__(self, vocab, d_model, nhead, layers, ff, max_len):
        super().__init__()
        self.d_model = d_model
        self.embedding = nn.Embedding(vocab, d_model)
        self.layers = nn.ModuleList([nn.TransformerEncoderLayer(d_model, nhead, ff, dropout=0.0, batch_first=True)
                                     for _ in range(layers)])
        self.norm = nn.LayerNorm(d_model)
        pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
        div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model, dtype=torch.float64)
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
        self.register_buffer("pe", pe.float(), persistent=False)

    def forward(self, tokens, kpm):
        x = self.embedding(tokens) * math.sqrt(self.d_model) + self.pe[: tokens.shape[1]].to(self.embedding.weight.dtype)
        for layer in self.layers:
            x = layer(x, src_key_padding_mask=kpm)
        return self.norm(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "fixtures"))
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    B, S, T, d, h, L, ff, sv, tv, max_len = 2, 7, 6, 16, 2, 2, 32, 11, 13, 32
    m = Seq2Seq(sv, tv, d, h, L, ff, max_len).eval()
    src = torch.randint(0, sv, (B, S))
    tgt = torch.randint(0, tv, (B, T))
    src_kpm = torch.zeros(B, S, dtype=torch.bool)
    src_kpm[1, -2:] = True
    tgt_kpm = torch.zeros(B, T, dtype=torch.bool)
    tgt_kpm[1, -1] = True
    state = {k: v.detach().clone() for k, v in m.state_dict().items()}
    m64 = m.double()
    out = m64(src, tgt, src_kpm, tgt_kpm)
    g = torch.randn(B, T, tv, dtype=torch.float64)
    out.backward(g)
    tensors = {"in.src": src, "in.tgt": tgt, "in.src_kpm": src_kpm.to(torch.uint8),
               "in.tgt_kpm": tgt_kpm.to(torch.uint8), "out.logits": out.detach().float(), "out.dlogits": g.float()}
    for k, v in state.items():
        tensors["w." + k] = v.float()
    for k, p in m64.named_parameters():
        tensors["grad." + k] = p.grad.float()
    enc = TokenEncoder(sv, d, h, L, ff, max_len).eval()
    enc_state = {k: v.detach().clone() for k, v in enc.state_dict().items()}
    enc64 = enc.double()
    eo = enc64(src, src_kpm)
    eg = torch.randn(B, S, d, dtype=torch.float64)
    eo.backward(eg)
    tensors["enc.out"] = eo.detach().float()
    tensors["enc.dout"] = eg.float()
    for k, v in enc_state.items():
        tensors["encw." + k] = v.float()
    for k, p in enc64.named_parameters():
        tensors["encgrad." + k] = p.grad.float()
    meta = {"B": B, "S": S, "T": T, "d_model": d, "nhead": h, "layers": L, "ff": ff, "src_vocab": sv,
            "tgt_vocab": tv, "max_len": max_len, "seed": a.seed}
    os.makedirs(a.out, exist_ok=True)
    st.save(os.path.join(a.out, "nn_seq2seq.safetensors"), tensors, meta)


if __name__ == "__main__":
    main()
