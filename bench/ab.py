"""A against B on a shared machine: two `attn bench ... --json` commands (two builds, or one build
under two environments) alternated for --rounds rounds, A B then B A, and per cell the median of
the per-round ratios B / A with its quartiles, beside each side's best figure.

On a machine shared with others (a cloud guest), the speed drifts over seconds: the same binary
moved 1.3-2x between sittings on the Intel guests (docs/performance-log.md sections 12 and 13), more
than most kernel changes. Runs of A and B next to each other see nearly the same machine, so the
ratio of a round cancels the drift that separate sittings of A and of B would not; the median of
the rounds' ratios, and the quartiles around it, say whether B is faster and by how much.

Usage:
  python3 bench/ab.py --a "build-old/attn bench attention --n 2048 --d 64,128 --threads 1" \\
                      --b "build/attn bench attention --n 2048 --d 64,128 --threads 1" [--rounds 11]
  python3 bench/ab.py --a "ATTN_FLASH_ROWS=4 build/attn bench attention --n 2048" \\
                      --b "ATTN_FLASH_ROWS=6 build/attn bench attention --n 2048"

Each command is split into words as a shell would (shlex); leading NAME=VALUE words set its
environment; --json is added when missing. Cells are matched by op, variant, impl, shape, threads
and dtype / precision; the figure compared is gflops (decode: gbs; train: tokens_per_s). Exit 1
when a command fails or the two share no cell."""
import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys

FIGURES = ("gflops", "gbs", "tokens_per_s")


def parse_cmd(text):
    words = shlex.split(text)
    env = dict(os.environ)
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
        k, v = words.pop(0).split("=", 1)
        env[k] = v
    if not words:
        raise SystemExit(f"ab: no command in {text!r}")
    if "--json" not in words:
        words.append("--json")
    return words, env


def run(cmd):
    words, env = cmd
    p = subprocess.run(words, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"ab: {' '.join(words)} failed ({p.returncode}):\n{p.stderr.strip()}")
    cells = {}
    for line in p.stdout.splitlines():
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        fig = next((f for f in FIGURES if isinstance(r.get(f), (int, float)) and r[f] > 0), None)
        if fig is None:
            continue
        key = (r.get("op"), r.get("variant"), r.get("impl"), json.dumps(r.get("shape"), sort_keys=True),
               r.get("threads"), r.get("dtype"), r.get("precision"), r.get("ctx"))
        cells[key] = (fig, float(r[fig]))
    return cells


def label(key):
    op, variant, impl, shape, threads, dtype, precision, ctx = key
    parts = [op or "?"]
    if variant:
        parts.append(variant)
    if impl:
        parts.append(impl)
    if shape and shape != "null":
        parts.append(" ".join(f"{k}={v}" for k, v in json.loads(shape).items()))
    for name, v in (("ctx", ctx), ("dtype", dtype), ("precision", precision)):
        if v is not None:
            parts.append(f"{name}={v}")
    parts.append(f"t={threads}")
    return " ".join(str(p) for p in parts)


def quartiles(xs):
    xs = sorted(xs)
    if len(xs) == 1:
        return xs[0], xs[0], xs[0]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], statistics.median(xs), q[2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="the baseline command (an attn bench command line)")
    ap.add_argument("--b", required=True, help="the candidate command")
    ap.add_argument("--rounds", type=int, default=11, help="rounds of A and B, alternating A B / B A (default 11)")
    ap.add_argument("--json", action="store_true", help="one JSON object per cell")
    a = ap.parse_args()
    if not 1 <= a.rounds <= 1000:
        raise SystemExit("ab: --rounds must be in 1..1000")
    cmds = {"a": parse_cmd(a.a), "b": parse_cmd(a.b)}
    ratios, best = {}, {"a": {}, "b": {}}
    for i in range(a.rounds):
        got = {}
        for side in (("a", "b") if i % 2 == 0 else ("b", "a")):
            got[side] = run(cmds[side])
            for k, (fig, v) in got[side].items():
                best[side][k] = (fig, max(v, best[side].get(k, (fig, 0.0))[1]))
        for k in got["a"].keys() & got["b"].keys():
            ratios.setdefault(k, []).append(got["b"][k][1] / got["a"][k][1])
    if not ratios:
        raise SystemExit("ab: the two commands share no cell (op, variant, impl, shape, threads, dtype)")
    keys = [k for k in best["a"] if k in ratios]
    if a.json:
        for k in keys:
            q1, med, q3 = quartiles(ratios[k])
            print(json.dumps({"cell": label(k), "figure": best["a"][k][0], "a_best": best["a"][k][1],
                              "b_best": best["b"][k][1], "ratio_median": round(med, 4), "ratio_q1": round(q1, 4),
                              "ratio_q3": round(q3, 4), "rounds": len(ratios[k])}))
        return
    print(f"{a.rounds} rounds, A / B alternating; ratio = B / A per round (median [q1, q3])")
    width = max(len(label(k)) for k in keys)
    print(f"{'cell':<{width}}  {'figure':<12} {'A best':>9} {'B best':>9}  {'B / A':>6} {'[q1':>7} {'q3]':>6}")
    for k in keys:
        q1, med, q3 = quartiles(ratios[k])
        print(f"{label(k):<{width}}  {best['a'][k][0]:<12} {best['a'][k][1]:>9.1f} {best['b'][k][1]:>9.1f}  "
              f"{med:>6.3f} [{q1:>5.3f} {q3:>5.3f}]")


if __name__ == "__main__":
    sys.exit(main())
