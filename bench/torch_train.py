"""The training step of `attn bench train`, in PyTorch (Debian's python3-torch), with the same
options and JSON keys: a decoder-only stack of pre-norm nn.TransformerEncoderLayer (GELU, dropout 0,
batch_first) under a causal mask, token + learned position embeddings, a final LayerNorm and a
bias-free lm head over 256 bytes (PyTorch 2.x is told the mask is causal, so that its attention
skips the masked half as attn's does); one step = forward, cross-entropy, backward, clip_grad_norm_(1)
and AdamW. --precision bf16: forward and loss under torch.autocast("cpu", torch.bfloat16) (bf16
matmuls and attention, fp32 master weights and AdamW), against `attn bench train --precision bf16`.
One warmup step, then --steps timed steps; the median is reported.

    /usr/bin/python3 bench/torch_train.py --layers 2 --context 1024 --threads 2 --json
    /usr/bin/python3 bench/torch_train.py --attn build/attn --threads 1     # both, and the ratio

With --attn PATH, `PATH bench train` runs first with the same options in the same run, its lines
are printed, then PyTorch's, then attn's tokens/s over PyTorch's per thread count.
"""
import argparse
import inspect
import json
import statistics
import subprocess
import sys
import time

import torch
import torch.nn as nn


CAUSAL_HINT = "is_causal" in inspect.signature(nn.TransformerEncoderLayer.forward).parameters


class GPT(nn.Module):
    def __init__(self, vocab, context, d, heads, layers):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, d)
        self.pos_emb = nn.Embedding(context, d)
        self.layers = nn.ModuleList([
            nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, activation="gelu", batch_first=True,
                                       norm_first=True) for _ in range(layers)])
        self.norm = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.register_buffer("mask", torch.triu(torch.full((context, context), float("-inf")), 1), persistent=False)

    def forward(self, x):
        n = x.shape[1]
        h = self.tok_emb(x) + self.pos_emb(torch.arange(n))
        for layer in self.layers:
            # the hint lets PyTorch 2.x take its causal attention kernel (which skips the masked
            # half) instead of applying the mask to every block; 1.13's layer has no such argument
            if CAUSAL_HINT:
                h = layer(h, src_mask=self.mask[:n, :n], is_causal=True)
            else:
                h = layer(h, src_mask=self.mask[:n, :n])
        return self.lm_head(self.norm(h))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", default=str(torch.get_num_threads()))
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--attn", help="the attn binary: run `attn bench train` with the same options first")
    a = ap.parse_args()
    attn_tps = {}
    if a.attn:
        cmd = [a.attn, "bench", "train", "--layers", str(a.layers), "--context", str(a.context), "--batch",
               str(a.batch), "--d-model", str(a.d_model), "--heads", str(a.heads), "--steps", str(a.steps),
               "--threads", a.threads, "--json"] + (["--precision", a.precision] if a.precision != "fp32" else [])
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        for line in out.splitlines():
            r = json.loads(line)
            attn_tps[r["threads"]] = r["tokens_per_s"]
            print(line if a.json else f"attn  threads {r['threads']}: {r['ms']:.1f} ms/step, "
                  f"{r['tokens_per_s']:.1f} tokens/s, {r['gflops']:.2f} GFLOP/s")
        sys.stdout.flush()
    L, C, B, D, H, V = a.layers, a.context, a.batch, a.d_model, a.heads, 256
    torch.manual_seed(1)
    m = GPT(V, C, D, H, L).train()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    x = torch.randint(0, V, (B, C))
    y = torch.randint(0, V, (B, C))
    matrix_params = L * 12.0 * D * D + D * V
    flops = B * C * (6.0 * matrix_params + 6.0 * L * C * D)
    if not a.json:
        print(f"train step (PyTorch {torch.__version__}, {a.precision}): {L} layers, d_model {D}, {H} heads, context {C}, "
              f"batch {B}, vocab {V} ({sum(p.numel() for p in m.parameters())} parameters)")
        print(f"{'threads':>8} {'ms/step':>12} {'tokens/s':>14} {'GFLOP/s':>10}")
    for t in [int(s) for s in a.threads.split(",")]:
        torch.set_num_threads(t)
        times = []
        for s in range(a.steps + 1):
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
                loss = nn.functional.cross_entropy(m(x).reshape(-1, V), y.reshape(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opt.step()
            if s > 0:
                times.append((time.perf_counter() - t0) * 1e3)
        ms = statistics.median(times)
        tps, gf = B * C / (ms * 1e-3), flops / (ms * 1e6)
        if a.json:
            print(json.dumps({"op": "train", "impl": "torch", "precision": a.precision, "shape": {"layers": L, "d_model": D, "heads": H,
                                                                       "context": C, "batch": B, "vocab": V},
                              "threads": t, "ms": round(ms, 3), "tokens_per_s": round(tps, 1),
                              "gflops": round(gf, 2)}))
        else:
            print(f"{t:>8} {ms:>12.1f} {tps:>14.1f} {gf:>10.2f}")
        if t in attn_tps:
            print(json.dumps({"op": "train", "threads": t, "ratio": round(attn_tps[t] / tps, 3), "peer": "torch"})
                  if a.json else f"threads {t}: attn / torch tokens/s = {attn_tps[t] / tps:.2f}")


if __name__ == "__main__":
    main()
