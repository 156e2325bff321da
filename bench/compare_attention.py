"""attn's flash attention against PyTorch's CPU attention, measured in the same run.

For each shape and thread count it runs `attn bench attention --json` and then
bench/torch_attention.py on the same shape, and prints one table with attn's GFLOP/s, peak
fraction, PyTorch's GFLOP/s for softmax(QK^T)V and nn.MultiheadAttention, and the ratios.
Usage: /usr/bin/python3 bench/compare_attention.py [--attn build/attn] [--n 1024,2048] [--d 64]
       [--threads 1,2] [--causal] [--backward] [--json]"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


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
    a = ap.parse_args()
    flags = (["--causal"] if a.causal else []) + (["--backward"] if a.backward else [])
    rows = []
    for n in a.n.split(","):
        for d in a.d.split(","):
            for t in a.threads.split(","):
                shape = ["--b", a.b, "--h", a.h, "--n", n, "--d", d, "--threads", t]
                ours = run_json([a.attn, "bench", "attention", "--impl", "flash", "--json"] + shape + flags)
                theirs = run_json([sys.executable, os.path.join(HERE, "torch_attention.py")] + shape + flags)
                for o in ours:
                    peers = {p["impl"]: p for p in theirs if p["variant"] == o["variant"]}
                    row = dict(o)
                    for impl, p in peers.items():
                        row[impl + "_gflops"] = p["gflops"]
                        row["ratio_" + impl] = round(o["gflops"] / p["gflops"], 3) if p["gflops"] else None
                    rows.append(row)
                    if a.json:
                        print(json.dumps(row), flush=True)
    if a.json:
        return
    print(f"{'variant':<18} {'shape':<24} {'thr':>3} {'attn GF/s':>10} {'peak':>6} "
          f"{'torch GF/s':>10} {'x torch':>8} {'mha GF/s':>9} {'x mha':>7}")
    for r in rows:
        s = r["shape"]
        print(f"{r['variant']:<18} {'n=%d d=%d b=%d h=%d' % (s['n'], s['d'], s['b'], s['h']):<24} "
              f"{r['threads']:>3} {r['gflops']:>10.1f} {100 * r['peak_fraction']:>5.1f}% "
              f"{r.get('torch_math_gflops', float('nan')):>10.1f} {r.get('ratio_torch_math') or float('nan'):>8.2f} "
              f"{r.get('torch_mha_gflops', float('nan')):>9.1f} {r.get('ratio_torch_mha') or float('nan'):>7.2f}")


if __name__ == "__main__":
    main()
