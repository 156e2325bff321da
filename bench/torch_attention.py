"""PyTorch's CPU attention, timed like `attn bench attention` and printed as the same JSON lines.

impl "torch_math": softmax(Q K^T * scale [+ causal mask]) V with torch.matmul / torch.softmax
(Debian's python3-torch 1.13 has no scaled_dot_product_attention); its flops are counted as attn
counts them (4 B H N^2 d, half when causal; 2.5x that backward).
impl "torch_mha": torch.nn.MultiheadAttention (embed_dim = H d, batch_first, need_weights=False)
on the same shapes; its flops add the four projections (8 B N E^2) so its GFLOP/s is its own.
Usage: /usr/bin/python3 bench/torch_attention.py --b 1 --h 8 --n 1024,2048 --d 64 [--causal]
       [--backward] [--threads 1,2] [--repeats 7]"""
import argparse
import json
import statistics
import time

import torch


def ints(s):
    return [int(x) for x in s.split(",") if x]


def measure(fn, repeats):
    fn()
    t0 = time.perf_counter()
    fn()
    once = time.perf_counter() - t0
    iters = max(1, int(0.02 / max(once, 1e-9)))
    samples = []
    for _ in range(max(repeats, 5)):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        samples.append((time.perf_counter() - t0) / iters)
    return statistics.median(samples) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--b", type=int, default=1)
    ap.add_argument("--h", type=int, default=8)
    ap.add_argument("--n", type=ints, default=[1024])
    ap.add_argument("--d", type=ints, default=[64])
    ap.add_argument("--threads", type=ints, default=[torch.get_num_threads()])
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--backward", action="store_true")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--impl", default="torch_math,torch_mha")
    a = ap.parse_args()
    torch.manual_seed(0)
    for n in a.n:
        for d in a.d:
            for t in a.threads:
                torch.set_num_threads(t)
                B, H = a.b, a.h
                flops = 4.0 * B * H * n * n * d * (0.5 if a.causal else 1.0)
                mask = torch.triu(torch.full((n, n), float("-inf")), 1) if a.causal else None
                q, k, v = (torch.randn(B, H, n, d, requires_grad=a.backward) for _ in range(3))
                scale = d ** -0.5

                def math_fwd():
                    s = torch.matmul(q, k.transpose(-2, -1)) * scale
                    if mask is not None:
                        s = s + mask
                    return torch.matmul(torch.softmax(s, dim=-1), v)

                E = H * d
                mha = torch.nn.MultiheadAttention(E, H, batch_first=True)
                x = torch.randn(B, n, E, requires_grad=a.backward)

                def mha_fwd():
                    return mha(x, x, x, need_weights=False, attn_mask=mask)[0]

                for impl, fwd, fl in (("torch_math", math_fwd, flops),
                                      ("torch_mha", mha_fwd, flops + 8.0 * B * n * E * E)):
                    if impl not in a.impl.split(","):
                        continue
                    passes = [("forward", fwd, fl)]
                    if a.backward:
                        out = fwd()
                        g = torch.randn_like(out)
                        passes.append(("backward", lambda: torch.autograd.grad(fwd(), [p for p in (q, k, v, x) if p.requires_grad], g, allow_unused=True), 3.5 * fl))
                    for name, fn, f in passes:
                        with torch.no_grad() if name == "forward" else torch.enable_grad():
                            ms = measure(fn, a.repeats)
                        if name == "backward":  # the timed call ran the forward too
                            with torch.no_grad():
                                ms -= measure(fwd, a.repeats)
                            f = 2.5 * fl
                        print(json.dumps({"op": "attention", "variant": name + (" causal" if a.causal else ""),
                                          "impl": impl, "shape": {"b": B, "h": H, "n": n, "d": d},
                                          "threads": t, "ms": round(ms, 4), "gflops": round(f / ms / 1e6, 2)}),
                              flush=True)


if __name__ == "__main__":
    main()
