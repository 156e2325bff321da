"""attn's GEMM against torch.matmul (oneDNN / MKL), measured in the same run, alternated.

For each shape, thread count and dtype it runs `attn bench gemm --json` and then torch.matmul on
the same shape in --peer-python's interpreter (same method: a warmup, samples of >= 20 ms, the
median), --rounds times in turn, and prints each side's best round and the ratio attn / torch.
fp32: attn_sgemm against torch.matmul of float32 tensors. bf16: attn_gemm_bf16 (bf16 A and B,
float C) against torch.matmul of bfloat16 tensors (bf16 C: half the result bytes attn writes).
--onednn PREFIX adds oneDNN's matmul called directly (bench/onednn_matmul.c, compiled here against
PREFIX/include and PREFIX/lib): float C from bf16 A and B as attn writes it, so the bf16 rows meet
a peer doing the same work; a sequential oneDNN build gives only the 1-thread rows.
--packed-b times attn's bf16 product with B packed once before the timing (attn_gemm_bf16_pack_b,
attn_gemm_bf16_packed: how attn's linear layers run their frozen weights) against the same
torch.matmul, which reorders B on every call: a different job, reported as such.
Usage: python3 bench/compare_gemm.py --peer-python VENV/bin/python [--attn build/attn]
       [--shapes 4096x384x384,2048x2048x2048] [--threads 1,2] [--dtype f32,bf16] [--rounds 3]
       [--onednn PREFIX] [--packed-b]
A shape is M x N x K (C is M x N, the reduction K), as `attn bench gemm --m --n --k`."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

PEER = r"""
import json, statistics, sys, time, torch
m, n, k, threads, dtype = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
torch.set_num_threads(threads)
dt = torch.bfloat16 if dtype == "bf16" else torch.float32
g = torch.Generator().manual_seed(1)
a = (torch.rand(m, k, generator=g) - 0.5).to(dt)
b = (torch.rand(k, n, generator=g) - 0.5).to(dt)
fn = lambda: torch.matmul(a, b)
t0 = time.perf_counter()
while time.perf_counter() - t0 < 0.05:
    fn()
t0 = time.perf_counter()
fn()
iters = max(1, int(0.02 / max(time.perf_counter() - t0, 1e-9)))
samples = []
for _ in range(7):
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    samples.append((time.perf_counter() - t0) / iters)
ms = statistics.median(samples) * 1e3
print(json.dumps({"ms": ms, "gflops": 2.0 * m * n * k / ms * 1e-6, "torch": torch.__version__}))
"""


def shapes(text):
    out = []
    for s in text.split(","):
        parts = s.lower().split("x")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise SystemExit(f"compare_gemm: shape {s!r} is not MxNxK with positive integers")
        out.append(tuple(int(p) for p in parts))
    return out


def attn_row(attn, m, n, k, threads, dtype, packed_b=False):
    packed_b = packed_b and dtype == "bf16"
    cmd = [attn, "bench", "gemm", "--m", str(m), "--n", str(n), "--k", str(k), "--threads", str(threads),
           "--dtype", dtype, "--json"] + (["--packed-b"] if packed_b else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    impl = ("attn.bf16_packed_b" if packed_b else "attn.bf16") if dtype == "bf16" else "attn"
    for r in rows:
        if r["impl"] == impl:
            return r
    raise SystemExit(f"compare_gemm: no {impl} row in the output of {' '.join(cmd)}")


def peer_row(python, m, n, k, threads, dtype):
    cmd = [python, "-c", PEER, str(m), str(n), str(k), str(threads), dtype]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def build_onednn_peer(prefix, workdir):
    lib = next((os.path.join(prefix, d) for d in ("lib", "lib64") if os.path.isdir(os.path.join(prefix, d))), None)
    if not lib or not os.path.isfile(os.path.join(prefix, "include", "oneapi", "dnnl", "dnnl.h")):
        raise SystemExit(f"compare_gemm: no oneDNN at {prefix} (want include/oneapi/dnnl/dnnl.h and lib/libdnnl.so)")
    exe = os.path.join(workdir, "onednn_matmul")
    cc = os.environ.get("CC") or shutil.which("cc") or "gcc"
    subprocess.run([cc, "-O2", "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-I", os.path.join(prefix, "include"),
                    os.path.join(HERE, "onednn_matmul.c"), "-L", lib, "-ldnnl", f"-Wl,-rpath,{lib}", "-o", exe],
                   check=True)
    return exe


def onednn_row(exe, m, n, k, threads, dtype):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([exe, str(m), str(n), str(k), str(threads), dtype], check=True, capture_output=True,
                         text=True, env=env).stdout
    r = json.loads(out.strip().splitlines()[-1])
    return None if r["sequential"] and threads > 1 else r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attn", default=os.path.join(HERE, "..", "build", "attn"))
    ap.add_argument("--peer-python", required=True, help="an interpreter with PyTorch")
    ap.add_argument("--shapes", default="4096x384x384,4096x1536x384,4096x384x1536,4096x3072x768,4096x768x3072,"
                    "2048x2048x2048")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--dtype", default="f32,bf16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--onednn", metavar="PREFIX", help="also oneDNN's matmul, float C (a oneDNN installed at PREFIX)")
    ap.add_argument("--packed-b", action="store_true",
                    help="attn's bf16 rows with B packed once before the timing (attn_gemm_bf16_packed)")
    args = ap.parse_args()
    dtypes = [d for d in args.dtype.split(",") if d]
    if not dtypes or any(d not in ("f32", "bf16") for d in dtypes):
        raise SystemExit("compare_gemm: --dtype takes f32 and/or bf16")
    threads = [int(t) for t in args.threads.split(",") if t]
    if not threads or any(t < 1 for t in threads) or args.rounds < 1:
        raise SystemExit("compare_gemm: --threads and --rounds take positive integers")
    if not args.onednn:
        return run(args, dtypes, threads, None)
    with tempfile.TemporaryDirectory(prefix="compare_gemm.") as workdir:  # the peer's executable
        return run(args, dtypes, threads, build_onednn_peer(args.onednn, workdir))


def run(args, dtypes, threads, onednn):
    if not args.json:
        print(f"{'shape (m x n x k)':<22}{'dtype':<8}{'thr':>4}{'attn GF/s':>11}{'peak':>7}{'torch GF/s':>12}"
              f"{'attn/torch':>12}" + (f"{'oneDNN GF/s':>13}{'attn/oneDNN':>13}" if onednn else ""))
    for (m, n, k) in shapes(args.shapes):
        for t in threads:
            for dt in dtypes:
                best_a, best_p, best_o, version = None, None, None, ""
                for _ in range(args.rounds):  # alternated: attn, torch (, oneDNN), attn, torch ...
                    a = attn_row(args.attn, m, n, k, t, dt, args.packed_b)
                    p = peer_row(args.peer_python, m, n, k, t, dt)
                    o = onednn_row(onednn, m, n, k, t, dt) if onednn else None
                    if best_a is None or a["gflops"] > best_a["gflops"]:
                        best_a = a
                    if best_p is None or p["gflops"] > best_p["gflops"]:
                        best_p = p
                    if o and (best_o is None or o["gflops"] > best_o["gflops"]):
                        best_o = o
                    version = p["torch"]
                ratio = best_a["gflops"] / best_p["gflops"]
                ratio_o = best_a["gflops"] / best_o["gflops"] if best_o else None
                if args.json:
                    row = {"m": m, "n": n, "k": k, "threads": t, "dtype": dt, "attn_impl": best_a["impl"],
                           "attn_gflops": best_a["gflops"],
                           "peak_fraction": best_a.get("peak_fraction"), "torch_gflops": best_p["gflops"],
                           "torch": version, "ratio": ratio}
                    if best_o:
                        row.update({"onednn_gflops": best_o["gflops"], "onednn": best_o["onednn"],
                                    "onednn_impl": best_o["impl"], "ratio_onednn": ratio_o})
                    print(json.dumps(row))
                else:
                    pf = best_a.get("peak_fraction")
                    extra = ""
                    if onednn:
                        extra = f"{best_o['gflops']:>13.0f}{ratio_o:>13.2f}" if best_o else f"{'-':>13}{'-':>13}"
                    tag = "bf16 pk" if best_a["impl"] == "attn.bf16_packed_b" else dt
                    print(f"{f'{m} x {n} x {k}':<22}{tag:<8}{t:>4}{best_a['gflops']:>11.0f}"
                          f"{(f'{100 * pf:.0f}%' if pf else '-'):>7}{best_p['gflops']:>12.0f}{ratio:>12.2f}" + extra,
                          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
