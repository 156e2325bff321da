"""PyTorch's CPU attention, timed like `attn bench attention` and printed as the same JSON lines.

impl "torch_math": softmax(Q K^T * scale [+ causal mask]) V with torch.matmul / torch.softmax
(Debian's python3-torch 1.13 has no scaled_dot_product_attention); its flops are counted as attn
counts them (4 B H N^2 d, half when causal; 2.5x that backward).
impl "torch_sdpa" / "torch_sdpa.bf16": F.scaled_dot_product_attention (PyTorch 2.x only: its CPU
flash kernel) on fp32 / bf16 tensors; skipped with a notice on stderr under 1.13.
impl "ort_mha" / "ort_mha.bf16": ONNX Runtime's com.microsoft.MultiHeadAttention contrib op (its CPU
flash kernel; `unidirectional` for causal) as a one-node model built with `onnx`, Q/K/V as
[B, N, H*d], forward only; skipped with a notice when onnxruntime/onnx are not importable. ORT's
CPU kernel takes fp32 only, so "ort_mha.bf16" is not offered.
impl "torch_mha": torch.nn.MultiheadAttention (embed_dim = H d, batch_first, need_weights=False)
on the same shapes; its flops add the four projections (8 B N E^2) so its GFLOP/s is its own.
Run it with a PyTorch 2.x interpreter (a venv with PyPI's torch, onnx and onnxruntime) for the
SDPA and ONNX Runtime peers; compare_attention.py --peer-python PATH does that.
Usage: /usr/bin/python3 bench/torch_attention.py --b 1 --h 8 --n 1024,2048 --d 64 [--causal]
       [--backward] [--threads 1,2] [--repeats 7]"""
import argparse
import json
import statistics
import time

import sys

import torch
import torch.nn.functional as F


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


def ort_session(B, H, n, d, causal, threads):
    """A one-node ONNX model: com.microsoft.MultiHeadAttention over [B, n, H*d] Q, K, V."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper
    E = H * d
    ins = [helper.make_tensor_value_info(nm, TensorProto.FLOAT, [B, n, E]) for nm in ("q", "k", "v")]
    out = helper.make_tensor_value_info("o", TensorProto.FLOAT, [B, n, E])
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["o"], domain="com.microsoft",
                            num_heads=H, unidirectional=1 if causal else 0)
    graph = helper.make_graph([node], "mha", ins, [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {nm: rng.standard_normal((B, n, E), dtype=np.float32) for nm in ("q", "k", "v")}
    return lambda: sess.run(None, feeds)


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
    ap.add_argument("--impl", default="torch_math,torch_mha",
                    help="torch_math, torch_mha, torch_sdpa, torch_sdpa.bf16, ort_mha")
    a = ap.parse_args()
    torch.manual_seed(0)
    impls = a.impl.split(",")
    has_sdpa = hasattr(F, "scaled_dot_product_attention")
    if not has_sdpa and any(i.startswith("torch_sdpa") for i in impls):
        print(f"torch_attention: torch {torch.__version__} has no scaled_dot_product_attention; "
              "torch_sdpa skipped", file=sys.stderr)
    if "ort_mha" in impls:
        try:
            import onnx  # noqa: F401
            import onnxruntime  # noqa: F401
        except ImportError as e:
            print(f"torch_attention: ort_mha skipped ({e})", file=sys.stderr)
            impls.remove("ort_mha")
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

                qb, kb, vb = (t_.detach().bfloat16().requires_grad_(a.backward) for t_ in (q, k, v))

                def sdpa_fwd():
                    return F.scaled_dot_product_attention(q, k, v, is_causal=a.causal)

                def sdpa_bf16_fwd():
                    return F.scaled_dot_product_attention(qb, kb, vb, is_causal=a.causal)

                cands = [("torch_math", math_fwd, flops), ("torch_mha", mha_fwd, flops + 8.0 * B * n * E * E)]
                if has_sdpa:
                    cands += [("torch_sdpa", sdpa_fwd, flops), ("torch_sdpa.bf16", sdpa_bf16_fwd, flops)]
                if "ort_mha" in impls:
                    cands.append(("ort_mha", ort_session(B, H, n, d, a.causal, t), flops))
                for impl, fwd, fl in cands:
                    if impl not in impls:
                        continue
                    passes = [("forward", fwd, fl)]
                    if a.backward and impl != "ort_mha":
                        out = fwd()
                        g = torch.randn_like(out)
                        passes.append(("backward", lambda: torch.autograd.grad(fwd(), [p for p in (q, k, v, x) if p.requires_grad], g, allow_unused=True), 3.5 * fl))
                        grads_of = {"torch_sdpa.bf16": [qb, kb, vb]}.get(impl)
                        if grads_of is not None:
                            passes[-1] = ("backward", lambda: torch.autograd.grad(fwd(), grads_of, g.bfloat16()), 3.5 * fl)
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
