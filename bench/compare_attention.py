"""attn's flash attention against PyTorch's CPU attention, measured in the same run.

For each shape and thread count it runs `attn bench attention --json` and then
bench/torch_attention.py on the same shape, and prints one table with attn's GFLOP/s, peak
fraction, PyTorch's GFLOP/s for softmax(QK^T)V and nn.MultiheadAttention, and the ratios.
Usage: /usr/bin/python3 bench/compare_attention.py [--attn build/attn] [--n 1024,2048] [--d 64]
       [--threads 1,2] [--causal] [--backward] [--dtype f32,bf16] [--peer-python VENV/bin/python]
       [--peers torch_sdpa,torch_sdpa.bf16,ort_mha,...] [--rounds R] [--json]

The peers: PyTorch 2.x F.scaled_dot_product_attention (fp32 and bf16, its CPU flash kernel) and
ONNX Runtime's com.microsoft.MultiHeadAttention (fp32) when --peer-python's interpreter has them
(python3 -m venv V && V/bin/pip install torch onnx onnxruntime), plus softmax(QK^T)V by
torch.matmul and nn.MultiheadAttention under any PyTorch. Each cell's ratio is attn's GFLOP/s
over the peer's, same shape, pass, dtype and thread count, measured in the same run.

--python: attn through the Python package (python/attn; `pip install ./python`, or ATTN_LIBRARY
pointing at build/libattn.so) against PyTorch's own SDPA on the same torch tensors, in this
process: attn.torch.scaled_dot_product_attention (tensors shared with NumPy, no copy) and
attn.scaled_dot_product_attention on the NumPy views, next to the C kernel alone (`attn bench
attention`, same shape and threads). The binding overhead is the package's time minus the
kernel's. PyTorch's SDPA is F.scaled_dot_product_attention (torch 2.x) or 1.13's private
F._scaled_dot_product_attention; --backward times forward + backward through autograd."""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def best_rows(best, rows):
    """Per (variant, impl), the row of the larger GFLOP/s of best and rows (rows' order)."""
    old = {(r["variant"], r["impl"]): r for r in best}
    out = []
    for r in rows:
        o = old.get((r["variant"], r["impl"]))
        out.append(o if o and o["gflops"] >= r["gflops"] else r)
    return out


def measure(fn, repeats=7):
    """Median seconds per call of fn (batches of calls lasting about 20 ms)."""
    import statistics
    import time
    fn()
    t0 = time.perf_counter()
    fn()
    once = time.perf_counter() - t0
    iters = max(1, int(0.02 / max(once, 1e-9)))
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        samples.append((time.perf_counter() - t0) / iters)
    return statistics.median(samples)


def python_mode(a):
    """attn through the package against PyTorch's SDPA on the same tensors (see the docstring)."""
    sys.path.insert(0, os.path.join(HERE, "..", "python"))  # the tree's package unless one is installed
    if not os.environ.get("ATTN_LIBRARY"):
        os.environ["ATTN_LIBRARY"] = os.path.join(HERE, "..", "build", "libattn.so")
    import torch
    import torch.nn.functional as F

    import attn
    import attn.torch as at

    if hasattr(F, "scaled_dot_product_attention"):
        torch_sdpa = lambda q, k, v, c: F.scaled_dot_product_attention(q, k, v, is_causal=c)  # noqa: E731
    else:
        torch_sdpa = lambda q, k, v, c: F._scaled_dot_product_attention(q, k, v, None, 0.0, False, c)[0]  # noqa: E731
    B, H = int(a.b), int(a.h)
    rows = []
    for n in map(int, a.n.split(",")):
        for d in map(int, a.d.split(",")):
            for t in map(int, a.threads.split(",")):
                torch.set_num_threads(t)
                attn.set_num_threads(t)
                g = torch.Generator().manual_seed(0)
                q, k, v = (torch.randn(B, H, n, d, generator=g, requires_grad=a.backward) for _ in range(3))
                qn, kn, vn = (x.detach().numpy() for x in (q, k, v))
                if a.backward:
                    go = torch.randn(B, H, n, d, generator=g)
                    run_t = lambda: torch.autograd.grad(torch_sdpa(q, k, v, a.causal), (q, k, v), go)  # noqa: E731
                    run_a = lambda: torch.autograd.grad(at.scaled_dot_product_attention(q, k, v, is_causal=a.causal),  # noqa: E731
                                                        (q, k, v), go)
                    run_n = None
                else:
                    run_t = lambda: torch_sdpa(q, k, v, a.causal)  # noqa: E731
                    run_a = lambda: at.scaled_dot_product_attention(q, k, v, is_causal=a.causal)  # noqa: E731
                    run_n = lambda: attn.scaled_dot_product_attention(qn, kn, vn, is_causal=a.causal)  # noqa: E731
                shape = ["--b", str(B), "--h", str(H), "--n", str(n), "--d", str(d), "--threads", str(t)]
                flags = (["--causal"] if a.causal else []) + (["--backward"] if a.backward else [])
                kern = run_json([a.attn, "bench", "attention", "--impl", "flash", "--json"] + shape + flags)
                want = "forward+backward" if a.backward else "forward"
                kern_ms = None
                for r in kern:  # with --backward: the forward's time plus the backward's
                    if r["variant"] in (("forward", "backward") if a.backward else ("forward",)):
                        kern_ms = (kern_ms or 0) + r["ms"]
                row = {"mode": "python", "variant": want, "shape": {"b": B, "h": H, "n": n, "d": d}, "threads": t,
                       "causal": bool(a.causal), "torch_sdpa_ms": 1e3 * measure(run_t),
                       "attn_torch_ms": 1e3 * measure(run_a),
                       "attn_numpy_ms": 1e3 * measure(run_n) if run_n else None, "attn_kernel_ms": kern_ms}
                if kern_ms is not None:
                    row["overhead_torch_us"] = 1e3 * (row["attn_torch_ms"] - kern_ms)
                    if run_n:
                        row["overhead_numpy_us"] = 1e3 * (row["attn_numpy_ms"] - kern_ms)
                rows.append(row)
                if a.json:
                    print(json.dumps(row), flush=True)
    # The binding's fixed cost alone: one query, one key, d = 8 (the kernel's share is negligible);
    # on a shared machine the difference with the separately timed kernel above is noisy.
    attn.set_num_threads(1)
    x = torch.randn(1, 1, 1, 8)
    fixed = {"mode": "python", "variant": "fixed_cost", "numpy_us": 1e6 * measure(
        lambda: attn.scaled_dot_product_attention(x.numpy(), x.numpy(), x.numpy())),
        "torch_us": 1e6 * measure(lambda: at.scaled_dot_product_attention(x, x, x)),
        "torch_sdpa_us": 1e6 * measure(lambda: torch_sdpa(x, x, x, False))}
    if a.json:
        print(json.dumps(fixed), flush=True)
        return
    nan = float("nan")
    print(f"fixed cost per call (n=1, d=8, 1 thread): attn numpy {fixed['numpy_us']:.1f} us, attn.torch "
          f"{fixed['torch_us']:.1f} us, PyTorch's SDPA {fixed['torch_sdpa_us']:.1f} us")
    print(f"{'variant':<17} {'shape':<22} {'thr':>3} {'torch ms':>9} {'attn.torch':>10} {'attn np':>8} "
          f"{'kernel':>8} {'x torch':>8} {'ovh torch us':>12} {'ovh np us':>9}")
    for r in rows:
        s = r["shape"]
        print(f"{r['variant']:<17} {'n=%d d=%d b=%d h=%d' % (s['n'], s['d'], s['b'], s['h']):<22} {r['threads']:>3} "
              f"{r['torch_sdpa_ms']:>9.3f} {r['attn_torch_ms']:>10.3f} {r['attn_numpy_ms'] or nan:>8.3f} "
              f"{r['attn_kernel_ms'] or nan:>8.3f} {r['torch_sdpa_ms'] / r['attn_torch_ms']:>8.2f} "
              f"{r.get('overhead_torch_us', nan):>12.1f} {r.get('overhead_numpy_us', nan):>9.1f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attn", default=os.path.join(HERE, "..", "build", "attn"))
    ap.add_argument("--b", default="1")
    ap.add_argument("--h", default="8")
    ap.add_argument("--n", default="1024,2048,4096")
    ap.add_argument("--d", default="64")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--backward", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--dtype", default="f32", help="f32 and/or bf16 (attn's flash.bf16 against the peers' bf16)")
    ap.add_argument("--peer-python", default=sys.executable,
                    help="the interpreter that runs bench/torch_attention.py (a venv with PyTorch 2.x, onnx and "
                         "onnxruntime for the SDPA and ONNX Runtime peers)")
    ap.add_argument("--peers", default="torch_sdpa,torch_sdpa.bf16,ort_mha,torch_math,torch_mha",
                    help="peer impls of bench/torch_attention.py; those the interpreter lacks are skipped")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=1,
                    help="alternate attn and the peers this many times per shape, each cell its best round")
    ap.add_argument("--python", action="store_true", help="attn through the Python package vs PyTorch's SDPA")
    a = ap.parse_args()
    if a.python:
        return python_mode(a)
    flags = (["--causal"] if a.causal else []) + (["--backward"] if a.backward else [])
    peers = a.peers.split(",")
    rows = []
    for n in a.n.split(","):
        for d in a.d.split(","):
            for t in a.threads.split(","):
                shape = ["--b", a.b, "--h", a.h, "--n", n, "--d", d, "--threads", t]
                # attn and the peers alternate, --rounds times, each cell keeping its best round: on a
                # shared machine whose speed drifts over seconds, one run of each apart can differ by
                # more than the kernels do
                ours, theirs = [], []
                for _ in range(a.rounds):
                    ours = best_rows(ours, run_json([a.attn, "bench", "attention", "--impl", "flash", "--dtype",
                                                     a.dtype, "--repeats", str(a.repeats), "--json"] + shape + flags))
                    theirs = best_rows(theirs, run_json([a.peer_python, os.path.join(HERE, "torch_attention.py"),
                                                         "--impl", a.peers, "--repeats", str(a.repeats)]
                                                        + shape + flags))
                for o in ours:
                    bf16 = o["impl"].endswith(".bf16")
                    row = dict(o)
                    row.pop("ratio", None)
                    row.pop("peer", None)
                    row["dtype"] = "bf16" if bf16 else "f32"
                    row["peers"] = {}
                    for p in theirs:
                        if p["variant"] != o["variant"] or p["impl"].endswith(".bf16") != bf16:
                            continue
                        row["peers"][p["impl"]] = {"gflops": p["gflops"],
                                                   "ratio": round(o["gflops"] / p["gflops"], 3) if p["gflops"] else None}
                    rows.append(row)
                    if a.json:
                        print(json.dumps(row), flush=True)
    if a.json:
        return
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    print(f"CPU: {cpu}; peers run by {a.peer_python}")
    names = [p for p in peers if any(p in r["peers"] for r in rows)]
    head = "".join(f" {p + ' GF/s':>20} {'x':>6}" for p in names)
    print(f"{'variant':<18} {'dtype':<5} {'shape':<24} {'thr':>3} {'attn GF/s':>10} {'peak':>6}" + head)
    nan = float("nan")
    for r in rows:
        s_ = r["shape"]
        cells = ""
        for p in names:
            c = r["peers"].get(p)
            cells += f" {c['gflops'] if c else nan:>20.1f} {(c['ratio'] or nan) if c else nan:>6.2f}"
        print(f"{r['variant']:<18} {r['dtype']:<5} {'n=%d d=%d b=%d h=%d' % (s_['n'], s_['d'], s_['b'], s_['h']):<24} "
              f"{r['threads']:>3} {r['gflops']:>10.1f} {100 * r['peak_fraction']:>5.1f}%" + cells)


if __name__ == "__main__":
    main()
