#!/usr/bin/env python3
"""PyTorch float64 references for the losses (tests/test_train_loss.c).

Writes DIR/train_loss.safetensors with, for each cross-entropy case i (metadata "ce_cases"):
  ce{i}.logits   float32 [N, C]
  ce{i}.targets  int64 [N] (some equal to ignore_index)
  ce{i}.dloss    float32 upstream gradient: [1] (mean, sum) or [N] (none)
  ce{i}.loss     float64: F.cross_entropy(logits.double(), targets, ignore_index, reduction,
                 label_smoothing): [1] or [N]
  ce{i}.grad     float64 [N, C]: the gradient of sum(dloss * loss) w.r.t. the logits
and metadata ce{i}.reduction (mean | sum | none), ce{i}.label_smoothing, ce{i}.ignore_index.
For each MSE case i (metadata "mse_cases"): mse{i}.{input, target, dloss} float32,
mse{i}.{loss, dinput, dtarget} float64 (F.mse_loss and its gradients), mse{i}.reduction.
Usage: /usr/bin/python3 tests/parity/gen_train_loss.py --out DIR --seed N
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

# N, C, reduction, label_smoothing, ignore_index, logit scale, fraction of ignored rows
CE_CASES = [
    (13, 7, "mean", 0.0, -100, 3.0, 0.25),
    (16, 10, "sum", 0.1, -100, 2.0, 0.2),
    (11, 5, "none", 0.25, 2, 2.0, 0.0),    # ignore_index is a valid class: those rows are ignored
    (9, 6, "mean", 0.1, -100, 1e4, 0.2),   # logits of magnitude 1e4
    (7, 4, "none", 0.0, -100, 30.0, 0.3),  # peaked rows (p_t close to 1 or 0)
    (6, 4, "mean", 0.2, -100, 1.0, 1.0),   # every row ignored: loss NaN, gradient 0
    (40, 33, "mean", 0.05, -1, 4.0, 0.1),
]
# shape, reduction
MSE_CASES = [((5, 7), "mean"), ((23,), "sum"), ((3, 4), "none")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    g = torch.Generator().manual_seed(args.seed)

    def randn(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).float()

    tensors, meta = {}, {"generator": "tests/parity/gen_train_loss.py", "seed": args.seed,
                         "torch": torch.__version__, "ce_cases": len(CE_CASES),
                         "mse_cases": len(MSE_CASES)}
    for i, (n, c, red, ls, ign, scale, frac) in enumerate(CE_CASES):
        p = f"ce{i}."
        logits = randn(n, c, scale=scale)
        targets = torch.randint(0, c, (n,), generator=g)
        drop = torch.rand(n, generator=g, dtype=torch.float64) < frac
        if frac >= 1.0:
            drop[:] = True
        targets[drop] = ign
        if 0 <= ign < c:
            targets[::4] = ign
        dloss = randn(n if red == "none" else 1) + 1.5
        x = logits.double().requires_grad_(True)
        loss = F.cross_entropy(x, targets, ignore_index=ign, reduction=red, label_smoothing=ls)
        (grad,) = torch.autograd.grad((loss.reshape(-1) * dloss.double()).sum(), [x])
        tensors.update({p + "logits": logits, p + "targets": targets.to(torch.int64), p + "dloss": dloss,
                        p + "loss": loss.detach().reshape(-1), p + "grad": grad})
        meta.update({p + "reduction": red, p + "label_smoothing": repr(ls), p + "ignore_index": ign})
    for i, (shape, red) in enumerate(MSE_CASES):
        p = f"mse{i}."
        a, b = randn(*shape), randn(*shape)
        dloss = randn(*(shape if red == "none" else (1,))) + 1.5
        x, y = a.double().requires_grad_(True), b.double().requires_grad_(True)
        loss = F.mse_loss(x, y, reduction=red)
        dx, dy = torch.autograd.grad((loss.reshape(-1) * dloss.double().reshape(-1)).sum(), [x, y])
        tensors.update({p + "input": a, p + "target": b, p + "dloss": dloss.reshape(-1),
                        p + "loss": loss.detach().reshape(-1), p + "dinput": dx, p + "dtarget": dy})
        meta[p + "reduction"] = red

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "train_loss.safetensors")
    st.save(path, tensors, metadata=meta)
    print(f"wrote {path} ({os.path.getsize(path)} bytes, {len(tensors)} tensors)")


if __name__ == "__main__":
    main()
