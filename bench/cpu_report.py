"""One report of where attn stands on the CPU it runs on, against issue #14's targets.

The machines this project runs on change (AMD Zen 4, Zen 5, Intel Xeon with AVX-512, AVX512-BF16
and AMX have all been seen); each new one should be measured the same way. This script runs the
`attn bench` commands behind every target with --json, in one sitting, and writes a Markdown
report: the CPU model and `attn info`, then one table per target with the measured cells and
whether each meets its aim, and the raw JSON lines at the end.

Usage: python3 bench/cpu_report.py [--attn build/attn] [--out report.md] [--threads 1,2]
       [--sittings N] [--peer-python VENV/bin/python] [--quick] [--force]

  --threads       thread counts (default 1 and the machine's CPU count when larger)
  --sittings N    run every attn measurement N times, one whole round after another, and report
                  per cell the best round (each round's figures are medians already): on a
                  shared machine a neighbour only ever slows a run down, so the best of a few
                  rounds is the capability. Fractions and ratios are recomputed from the best
                  figures (a cell's GFLOP/s over the best peak; decode's GB/s over the best
                  streaming rate). Default 1.
  --peer-python   an interpreter with PyTorch 2.x: adds bench/torch_train.py's training ratio
                  (the attention peers, PyTorch's SDPA and ONNX Runtime, are bench/compare_attention.py's)
  --quick         tiny shapes and few repeats: checks that the report runs (tests use it), its
                  numbers mean nothing
  --force         replace --out even when it holds something other than an earlier report
                  (an earlier report is replaced; a link or a non-regular file never is)

Aims (#14): flash forward/backward and SGEMM >= 75% of the FMA peak at N >= 1024; bf16 flash
>= 1.7x fp32 (>= 4x with AMX); decode >= 70% of the measured memory bandwidth; training and
attention >= 1.3x / 2x the peers. Run it on a quiet machine: the figures are medians, but a busy
machine still moves them (--sittings 3 there).

ATTN_ISA=avx2 in the environment measures the AVX2 tier (the kernels of CPUs without AVX-512) on
an AVX-512 machine: every attn command runs its AVX2 kernels and `attn bench peak` its AVX2 loop,
so the fractions are of the AVX2 peak."""
import argparse
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"cpu_report: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr.strip()}")
    return p.stdout


def run_json(cmd):
    return [json.loads(line) for line in run(cmd).splitlines() if line.startswith("{")]


def try_json(cmd, missing):
    """run_json, or [] with the reason added to missing (a CPU without a feature the command needs)."""
    try:
        return run_json(cmd)
    except SystemExit as e:
        missing.append(str(e).splitlines()[-1])
        return []


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def pct(x):
    return f"{100.0 * x:.1f}%"


def mark(ok):
    return "yes" if ok else "**no**"


TITLE = "# attn on this CPU"


def check_out(path, force):
    """Refuse, before measuring anything, to write through a link or over a file that is not an
    earlier report (unless --force): a user's file is never replaced by accident."""
    if path == "-" or not os.path.lexists(path):
        return
    if os.path.islink(path) or not os.path.isfile(path):
        raise SystemExit(f"cpu_report: --out {path} is not a regular file: refusing to write through it")
    with open(path, errors="replace") as f:
        first = f.readline().rstrip("\n")
    if first != TITLE and not force:
        raise SystemExit(f"cpu_report: --out {path} exists and is not an earlier report: "
                         "give another path, or --force to replace it")


def best_of(rows, key, value):
    """Per key(row), the row with the largest row[value] (first seen on ties), in first-seen order."""
    out = {}
    for r in rows:
        k = key(r)
        if k not in out or r[value] > out[k][value]:
            out[k] = r
    return list(out.values())


def shape_key(r):
    return (r["op"], r.get("variant"), r.get("impl"), r.get("dtype"), json.dumps(r.get("shape"), sort_keys=True),
            r.get("ctx"), r.get("precision"), r["threads"])


def bf16_emulated(info):
    """Do the bf16 kernels `attn info` names emulate vdpbf16ps by FMAs?"""
    return "emulated" in info.split("bf16 kernels:", 1)[-1].split("\n", 1)[0]


def merge_sittings(peaks, gemm, flash, bf, dec, train, emulated):
    """The best round per cell, with fractions and ratios recomputed from the best figures."""
    peaks = best_of(peaks, shape_key, "gflops")
    peak = {(r["op"], r["threads"]): r["gflops"] for r in peaks}
    # bf16 rows are fractions of the peak of the kernels that ran: AMX tiles' where they ran,
    # the FMA peak where vdpbf16ps was emulated by FMAs
    for (op, t), g in list(peak.items()):
        if op == "amx_peak" or (op == "fma_peak" and emulated):
            peak[("bf16_peak", t)] = g
    gemm = [dict(r) for r in best_of(gemm, shape_key, "gflops")]
    by = {(json.dumps(r["shape"], sort_keys=True), r["threads"], r["impl"]): r for r in gemm}
    for r in gemm:
        p = peak.get(("bf16_peak" if r["impl"].endswith(".bf16") else "fma_peak", r["threads"]))
        if p:
            r["peak_fraction"] = r["gflops"] / p
        if "peer" in r:
            o = by.get((json.dumps(r["shape"], sort_keys=True), r["threads"], r["peer"]))
            if o:
                r["ratio"] = r["gflops"] / o["gflops"]
    def rescale(rows):
        rows = [dict(r) for r in best_of(rows, shape_key, "gflops")]
        f32 = {(r["variant"], json.dumps(r["shape"], sort_keys=True), r["threads"]): r for r in rows
               if r["impl"] == "flash"}
        for r in rows:
            bf16 = r["impl"] == "flash.bf16"
            p = peak.get(("bf16_peak" if bf16 else "fma_peak", r["threads"]))
            if p:
                r["peak_fraction"] = r["gflops"] / p
            o = f32.get((r["variant"], json.dumps(r["shape"], sort_keys=True), r["threads"]))
            if bf16 and o:
                r["ratio"] = r["gflops"] / o["gflops"]
        return rows
    flash, bf = rescale(flash), rescale(bf)
    dec_best = []
    for r in best_of(dec, shape_key, "gbs"):
        r = dict(r)
        mem = max(x["mem_gbs"] for x in dec if x["threads"] == r["threads"])
        r["mem_gbs"], r["mem_fraction"] = mem, r["gbs"] / mem
        dec_best.append(r)
    return peaks, gemm, flash, bf, dec_best, best_of(train, shape_key, "tokens_per_s")


def table(L, title, columns, rows, first=False):
    """A Markdown section: its title, then a table of the rows (cells formatted already)."""
    L.append(("" if first else "\n") + f"## {title}\n")
    L.append("| " + " | ".join(columns) + " |\n" + "|---" * len(columns) + "|")
    L += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--attn", default=os.path.join(HERE, "..", "build", "attn"))
    ap.add_argument("--out", default="-")
    ap.add_argument("--threads", default=None)
    ap.add_argument("--peer-python", default=None)
    ap.add_argument("--sittings", type=int, default=1)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--force", action="store_true", help="replace --out even when it is not an earlier report")
    a = ap.parse_args()
    check_out(a.out, a.force)
    if a.sittings < 1 or a.sittings > 20:
        raise SystemExit(f"cpu_report: --sittings must be in 1..20, got {a.sittings}")
    attn = a.attn
    ncpu = os.cpu_count() or 1
    threads = a.threads or ("1" if ncpu == 1 else f"1,{ncpu}")
    q = a.quick
    reps = ["--repeats", "5"]
    ns = "128,256" if q else "1024,2048,4096"
    ns_bf = "128" if q else "2048,4096"
    ncausal = "256" if q else "4096"
    ds = "64,128"
    gm = "64,128" if q else "1024,2048"
    ctx = "1024,2048" if q else "1024,8192,32768"
    raw = []
    t0 = time.time()

    missing = []
    info = run([attn, "info"]).strip()
    # Without AVX2 the bf16 products are the portable emulation: correct but scalar, and its
    # flash backward alone takes many minutes at these shapes. Its cells mean nothing for the aims,
    # so they are skipped (--quick still runs them, to check the report's code). With AVX2 or
    # AVX-512 but no AVX512-BF16 they are emulated by FMAs: measured, labelled.
    native_bf16 = "bf16 kernels: ref" not in info
    if not native_bf16 and not q:
        missing.append("bf16: no AVX2 on this CPU (attn's bf16 kernels are the portable scalar emulation), "
                       "so no bf16 cell was measured")

    def bf16_json(cmd):
        return try_json(cmd, missing) if native_bf16 or q else []

    peaks, gemm, flash, bf, dec, train = [], [], [], [], [], []
    small = ["--layers", "1", "--context", "32", "--d-model", "64", "--heads", "2", "--steps", "1"] if q else []
    for sitting in range(a.sittings):
        missing_before = len(missing)
        p1 = run_json([attn, "bench", "peak", "--threads", threads, "--json"])
        p1 += bf16_json([attn, "bench", "peak", "--dtype", "bf16", "--threads", threads, "--json"])
        g1 = run_json([attn, "bench", "gemm", "--m", gm, "--threads", threads, "--json"] + reps)
        g1 += bf16_json([attn, "bench", "gemm", "--m", gm, "--dtype", "bf16", "--threads", threads, "--json"] + reps)
        f1 = run_json([attn, "bench", "attention", "--n", ns, "--d", ds, "--backward", "--threads", threads,
                       "--json"] + reps)
        f1 += run_json([attn, "bench", "attention", "--n", ncausal, "--d", ds, "--causal", "--backward",
                        "--threads", threads, "--json"] + reps)
        b1 = bf16_json([attn, "bench", "attention", "--n", ns_bf, "--d", ds, "--backward", "--threads", threads,
                        "--dtype", "f32,bf16", "--json"] + reps)
        b1 += bf16_json([attn, "bench", "attention", "--n", ncausal, "--d", ds, "--causal", "--backward",
                         "--threads", threads, "--dtype", "f32,bf16", "--json"] + reps)
        d1 = run_json([attn, "bench", "decode", "--ctx", ctx, "--threads", threads, "--dtype", "f32", "--json"])
        # a bf16 KV cache is widened to fp32 by shifts: every AVX-512 / AVX2 CPU reads it natively
        d1 += try_json([attn, "bench", "decode", "--ctx", ctx, "--threads", threads, "--dtype", "bf16", "--json"],
                       missing)
        t1 = run_json([attn, "bench", "train", "--threads", threads, "--json"] + small)
        t1 += bf16_json([attn, "bench", "train", "--precision", "bf16", "--threads", threads, "--json"] + small)
        for dst, got in ((peaks, p1), (gemm, g1), (flash, f1), (bf, b1), (dec, d1), (train, t1)):
            dst += got
            raw += got
        if sitting:  # a missing feature is said once, not once per round
            del missing[missing_before:]
    if a.sittings > 1:
        peaks, gemm, flash, bf, dec, train = merge_sittings(peaks, gemm, flash, bf, dec, train, bf16_emulated(info))
    peer_rows = []
    if a.peer_python:
        for prec in ("fp32", "bf16") if native_bf16 or q else ("fp32",):
            out = run([a.peer_python, os.path.join(HERE, "torch_train.py"), "--attn", attn, "--threads", threads,
                       "--precision", prec] + small)
            for line in out.splitlines():
                if "attn / torch tokens/s =" in line:
                    peer_rows.append((prec, line.strip()))

    L = []
    L.append(TITLE + "\n")
    L.append(f"- CPU: `{cpu_model()}` ({ncpu} logical CPUs), {platform.system()} {platform.release()}")
    L.append(f"- taken {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {time.time() - t0:.0f} s"
             + (" (--quick: tiny shapes, the numbers mean nothing)" if q else ""))
    if a.sittings > 1:
        L.append(f"- {a.sittings} sittings, each cell the best of them (fractions and ratios recomputed from the "
                 "best figures; every sitting's lines are in the raw results)")
    L.append("\n```\n$ attn info\n" + info + "\n```\n")
    for m in missing:
        L.append(f"- not measured here: {m}")

    f32p = {r["threads"]: r for r in peaks if r["op"] == "fma_peak"}
    bfp = {r["threads"]: r for r in peaks if r["op"] == "bf16_peak"}
    amxp = {r["threads"]: r for r in peaks if r["op"] == "amx_peak"}
    def amx_cells(t):
        if t not in amxp:
            return ["-", "-"] if amxp else []
        return [f"{amxp[t]['gflops']:.1f}", f"{amxp[t]['gflops'] / f32p[t]['gflops']:.2f}"]
    table(L, "Peaks (GFLOP/s; bf16 fractions below are of AMX's where the bf16 kernels run on it)",
          ["threads", "fp32 FMA", "bf16 (vdpbf16ps)", "bf16 / fp32"] + (["AMX", "AMX / fp32"] if amxp else []),
          [([t, f"{f32p[t]['gflops']:.1f}", f"{bfp[t]['gflops']:.1f}", f"{bfp[t]['gflops'] / f32p[t]['gflops']:.2f}"]
            if t in bfp else [t, f"{f32p[t]['gflops']:.1f}", "-", "-"]) + amx_cells(t) for t in sorted(f32p)],
          first=True)

    table(L, "GEMM (aim: fp32 >= 75% of the FMA peak)", ["shape", "threads", "impl", "GFLOP/s", "% of its peak", "ratio"],
          [[f"{r['shape']['m']}x{r['shape']['n']}x{r['shape']['k']}", r["threads"], r["impl"], f"{r['gflops']:.1f}",
            pct(r["peak_fraction"]), f"{r['ratio']:.2f} x {r['peer']}" if "ratio" in r else ""] for r in gemm])
    f32g = [r for r in gemm if r["impl"] == "attn" and r["shape"]["m"] >= 1024]
    if f32g:
        lo = min(r["peak_fraction"] for r in f32g)
        L.append(f"\nfp32 GEMM lowest cell {pct(lo)} of the peak: aim met: {mark(lo >= 0.75)}")

    table(L, "fp32 flash attention (aim: >= 75% of the FMA peak, N >= 1024)",
          ["pass", "shape", "threads", "GFLOP/s", "% of peak"],
          [[r["variant"], "b={b} h={h} n={n} d={d}".format(**r["shape"]), r["threads"], f"{r['gflops']:.1f}",
            pct(r["peak_fraction"])] for r in flash])
    big = [r for r in flash if r["shape"]["n"] >= 1024]
    if big:
        lo = min(big, key=lambda r: r["peak_fraction"])
        L.append(f"\nlowest cell at N >= 1024: {lo['variant']} n={lo['shape']['n']} d={lo['shape']['d']} "
                 f"{lo['threads']} threads, {pct(lo['peak_fraction'])}: aim met: {mark(lo['peak_fraction'] >= 0.75)}")

    amx = "bf16 kernels: amx" in info
    emulated = bf16_emulated(info)
    aim_bf = 4.0 if amx else 1.7
    bfr = [r for r in bf if r["impl"] == "flash.bf16"]
    title = ("bf16 flash against fp32 flash (vdpbf16ps emulated by FMAs on this CPU: no aim, at best fp32's rate)"
             if emulated else f"bf16 flash against fp32 flash (aim: >= {aim_bf}x{' with AMX' if amx else ''})")
    table(L, title, ["pass", "shape", "threads", "GFLOP/s", "% of bf16 peak", "x fp32"],
          [[r["variant"], "n={n} d={d}".format(**r["shape"]), r["threads"], f"{r['gflops']:.1f}",
            pct(r["peak_fraction"]) if r.get("peak_fraction") else "-", f"{r.get('ratio', 0):.2f}"] for r in bfr])
    if bfr:
        lo = min(r.get("ratio", 0) for r in bfr)
        L.append(f"\nlowest ratio {lo:.2f}x" + (": emulated, no aim" if emulated else f": aim met: {mark(lo >= aim_bf)}"))

    table(L, "Decode with the KV cache (aim: >= 70% of the measured memory bandwidth)",
          ["cache", "ctx", "threads", "GB/s", "memory GB/s", "fraction"],
          [[r["dtype"], r["ctx"], r["threads"], f"{r['gbs']:.1f}", f"{r['mem_gbs']:.1f}", pct(r["mem_fraction"])]
           for r in dec])
    big = [r for r in dec if r["cache_bytes"] > 32 << 20]
    if big:
        lo = min(r["mem_fraction"] for r in big)
        L.append(f"\ncaches above 32 MiB, lowest {pct(lo)}: aim met: {mark(lo >= 0.70)}")

    table(L, "Training (GPT-2-small-shaped layers, `attn bench train`)", ["precision", "threads", "tokens/s", "GFLOP/s"],
          [[r["precision"], r["threads"], f"{r['tokens_per_s']:.0f}", f"{r['gflops']:.1f}"] for r in train])
    if peer_rows:
        L.append("\nAgainst PyTorch (bench/torch_train.py, aim >= 2x):\n")
        for prec, line in peer_rows:
            L.append(f"- {prec}: {line}")
    elif not a.peer_python:
        L.append("\n(no --peer-python: the PyTorch ratios were not measured)")

    L.append("\n## Raw results (`--json` lines)\n\n```")
    L += [json.dumps(r) for r in raw]
    L.append("```\n")
    text = "\n".join(L) + "\n"
    if a.out == "-":
        sys.stdout.write(text)
    else:
        with open(a.out, "w") as f:
            f.write(text)
        print(f"cpu_report: wrote {a.out}")


if __name__ == "__main__":
    main()
