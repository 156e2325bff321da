"""Soak test of `attn train gpt`'s checkpoints: for --minutes, run a small model that writes its
checkpoint after every step, and end each run at random in one of three ways:

  kill   SIGKILL after a random delay (mid-step or mid-save, at random)
  term   SIGTERM after a random delay: the run must exit 130 within seconds, its checkpoint written
  full   a disk that fills up: the run's file size limit (RLIMIT_FSIZE, as `ulimit -f`; SIGXFSZ
         ignored so that writes fail with EFBIG) is set below the checkpoint's size, so a save
         fails; the run must exit 1 naming the checkpoint, the old checkpoint untouched

then resume (--resume). What must hold, checked after every run:
  - the checkpoint always loads: the next run says "resuming from CKPT at step N", N being the
    step the file holds (read here from its safetensors header and data);
  - nothing is lost but the step in progress: the file's step never goes down, and after a kill
    it is at least the last step the run printed, less one (the save in progress);
  - a SIGTERM exits 130 within 10 s with "interrupted after step N" and the file holds step N;
  - temporaries (CKPT.tmp-*) of killed writers are removed by the next save: at most one is ever
    left (the last kill's), and none once a run ends by itself;
  - the lock of a killed run does not block the next one.

Usage: /usr/bin/python3 bench/soak_train.py [--attn build/attn] [--minutes 10] [--seed 1]
           [--work DIR]
Prints one line per run and a summary (runs, kills, SIGTERMs, disk-full runs, steps reached,
steps lost at most); exit 1 on any violation. Not part of `make test` (it runs for minutes)."""
import argparse
import json
import os
import random
import re
import resource
import signal
import struct
import subprocess
import sys
import tempfile
import time

CKPT = "soak.safetensors"


def file_step(path):
    """The checkpoint's train.step (its I64 tensor), or None when the file is missing."""
    if not os.path.exists(path):
        return None
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        t = header["train.step"]
        a, b = t["data_offsets"]
        f.seek(8 + n + a)
        return struct.unpack("<q", f.read(b - a))[0]


def temporaries(work):
    return sorted(f for f in os.listdir(work) if f.startswith(CKPT + ".tmp-"))


def limit_fsize(nbytes):
    def pre():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # kept across exec: writes fail with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))

    return pre


def one_run(args, work, rng, action, ckpt_size):
    cmd = [args.attn, "train", "gpt", "--data", "data.txt", "--layers", "1", "--heads", "2", "--d-model", "32",
           "--context", "16", "--batch", "8", "--steps", "100000000", "--every", "1", "--log-every", "1",
           "--threads", "1", "--checkpoint", CKPT]
    if os.path.exists(os.path.join(work, CKPT)):
        cmd.append("--resume")
    pre = limit_fsize(rng.randint(1024, max(2048, ckpt_size - 1))) if action == "full" else None
    p = subprocess.Popen(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=pre)
    delay = rng.uniform(0.2, 2.5)
    t_signal = None
    try:
        out, err = p.communicate(timeout=delay)
    except subprocess.TimeoutExpired:
        t_signal = time.monotonic()
        p.send_signal(signal.SIGTERM if action == "term" else signal.SIGKILL)
        try:
            out, err = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            err += "\n(soak: still running 30 s after the signal)"
    took = time.monotonic() - t_signal if t_signal else 0.0
    return p.returncode, out, err, took


def check_run(action, rc, out, err, took, before, after, ntmp):
    """The violations of one run (a list of strings)."""
    bad = []
    m = re.search(r"resuming from \S+ at step (\d+)", out)
    early = rc in (-signal.SIGKILL, -signal.SIGTERM) and not re.search(r"^step ", out, re.M)  # before training
    if before is not None and not m and not early:
        bad.append("the checkpoint (step %d) did not load: %s" % (before, err.strip()[-300:]))
    if m and before is not None and int(m.group(1)) != before:
        bad.append("resumed at step %s, the file held %d" % (m.group(1), before))
    if before is not None and (after is None or after < before):
        bad.append("the checkpoint went from step %s to %s" % (before, after))
    printed = [int(s) for s in re.findall(r"^step +(\d+)/", out, re.M)]
    if action == "term" and not early:
        mi = re.search(r"interrupted after step (\d+)", out)
        if rc != 130 or not mi or took > 10:
            bad.append("SIGTERM: exit %s after %.1f s (want 130 within 10 s): %s" % (rc, took, err.strip()[-300:]))
        elif after != int(mi.group(1)):
            bad.append("SIGTERM: interrupted after step %s, the file holds %s" % (mi.group(1), after))
    if action == "kill" and printed and (after is None or after < printed[-1] - 1):
        bad.append("SIGKILL: the run printed step %d, the file holds %s" % (printed[-1], after))
    if action == "full" and rc not in (1, -signal.SIGKILL):
        bad.append("disk full: exit %s (want 1, or killed before a save failed)" % rc)
    if action == "full" and rc == 1 and "cannot write checkpoint" not in err and "lock" not in err:
        bad.append("disk full: exit 1 without a message naming the checkpoint: %s" % err.strip()[-300:])
    if ntmp > 1:
        bad.append("%d temporaries left (at most the last kill's)" % ntmp)
    lost = printed[-1] - after if printed and after is not None else 0
    return bad, max(lost, 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--attn", default="build/attn")
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work", default=None, help="folder for the run (default: a new temporary one)")
    args = ap.parse_args()
    args.attn = os.path.abspath(args.attn)
    work = args.work or tempfile.mkdtemp(prefix="attn_soak.")
    os.makedirs(work, exist_ok=True)
    rng = random.Random(args.seed)
    with open(os.path.join(work, "data.txt"), "w") as f:
        for i in range(400):
            f.write("line %d: the quick brown fox jumps over the lazy dog %d\n" % (i, i * i % 97))
    counts = {"kill": 0, "term": 0, "full": 0}
    runs, violations, lost_max, max_tmp = 0, [], 0, 0
    ckpt_size = 0
    end = time.monotonic() + 60 * args.minutes
    path = os.path.join(work, CKPT)
    while time.monotonic() < end:
        action = rng.choice(["kill", "kill", "term", "full"]) if ckpt_size else "term"
        before = file_step(path)
        rc, out, err, took = one_run(args, work, rng, action, ckpt_size)
        try:
            after = file_step(path)
        except (ValueError, KeyError, struct.error, OSError) as e:
            after = None
            violations.append("run %d: the checkpoint is unreadable: %s" % (runs + 1, e))
        if os.path.exists(path):
            ckpt_size = os.path.getsize(path)
        tmps = temporaries(work)
        max_tmp = max(max_tmp, len(tmps))
        bad, lost = check_run(action, rc, out, err, took, before, after, len(tmps))
        runs += 1
        counts[action] += 1
        lost_max = max(lost_max, lost)
        print("run %4d  %-4s  exit %4s  step %6s -> %6s  lost %d  temporaries %d%s" %
              (runs, action, rc, before, after, lost, len(tmps), ("  VIOLATION: " + "; ".join(bad)) if bad else ""))
        sys.stdout.flush()
        violations += ["run %d (%s): %s" % (runs, action, b) for b in bad]
    # a clean end: one run that stops by itself loads the last checkpoint and leaves no temporary
    final = file_step(path)
    p = subprocess.run([args.attn, "train", "gpt", "--data", "data.txt", "--checkpoint", CKPT, "--resume",
                        "--stop-at", str((final or 0) + 1), "--log-every", "1"], cwd=work, capture_output=True,
                       text=True)
    if p.returncode != 0 or temporaries(work) or os.path.exists(path + ".lock"):
        violations.append("final run: exit %d, temporaries %s, lock file %s: %s" %
                          (p.returncode, temporaries(work), os.path.exists(path + ".lock"), p.stderr.strip()))
    print("soak: %.1f minutes, %d runs (%d SIGKILL, %d SIGTERM, %d disk full), step %s reached, at most %d step(s) "
          "lost by a run, at most %d temporaries at once, %d violation(s); folder %s" %
          (args.minutes, runs, counts["kill"], counts["term"], counts["full"], final, lost_max, max_tmp,
           len(violations), work))
    for v in violations[:20]:
        print("  " + v)
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
