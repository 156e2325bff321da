#!/usr/bin/env python3
"""PyTorch float64 references for the optimizers, gradient clipping and the LR schedule
(tests/test_train_optim.c).

Writes DIR/train_optim.safetensors. The parameters are those of
nn.MultiheadAttention(E, H, add_bias_kv=True, batch_first=True) (names and shapes; values drawn
at random), E and H in the metadata, so the C test builds the same list with attn_mha_create.

Every parameter set is stored flat: the parameters concatenated in the order of the metadata
"param_names" (comma-separated), P elements in all.
For each optimizer case c (metadata "cases" = comma-separated names):
  {c}.init           float32 [P] initial parameters
  {c}.grads          float32 [steps, P] gradient of each step (the SUM over `accum` micro-batches)
  {c}.lr             float64 [steps] learning rate of each step (the warmup + cosine schedule)
  {c}.final          float64 [P] parameters after `steps` steps of torch.optim.{AdamW,SGD} on
                     float64 copies: per step p.grad = grad / accum, then clip_grad_norm_(max_norm)
                     when max_norm > 0, then step()
  {c}.state.{key}    float64 [P] optimizer state after the last step (exp_avg, ...)
  {c}.norms          float64 [steps] norms clip_grad_norm_ returned (max_norm > 0)
with metadata {c}.kind (adamw | sgd), {c}.steps, {c}.accum, {c}.max_norm and the hyper-parameters
{c}.beta1, .beta2, .eps, .weight_decay, .amsgrad, .maximize, .momentum, .dampening, .nesterov.

Clipping alone: clip{k}.grad float32 [P], clip{k}.max_norm (metadata), clip{k}.norm float64 [1]
and clip{k}.clipped float64 [P] (torch.nn.utils.clip_grad_norm_ on float64 copies).

Schedule: sched.lr float64 [T + 4] from the closed form below (sched.warmup, sched.total,
sched.max_lr, sched.min_lr in the metadata), and sched.torch_lr float64 [T] from PyTorch's
SequentialLR(LinearLR(1/W, total_iters=W-1), CosineAnnealingLR(T - W, min_lr), milestones=[W]),
which is the same function for steps < T.
Usage: /usr/bin/python3 tests/parity/gen_train_optim.py --out DIR --seed N
"""
import argparse
import math
import os
import sys
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

E, H, STEPS = 4, 2, 10


def lr_at(s, warmup, total, max_lr, min_lr):
    """attn_lr_warmup_cosine: linear warmup to max_lr, cosine decay to min_lr, then min_lr."""
    if s < warmup:
        return max_lr * (s + 1) / warmup
    if s < total:
        return min_lr + (max_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * (s - warmup) / (total - warmup)))
    return min_lr


CASES = [
    # name, kind, hyper-parameters, max_norm, accum, gradient scale
    ("adamw", "adamw", dict(betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1), 0.0, 1, 1.0),
    ("adamw_ams_clip", "adamw", dict(betas=(0.8, 0.99), eps=1e-6, weight_decay=0.01, amsgrad=True), 4.0, 3, 1.0),
    ("adamw_max", "adamw", dict(betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, maximize=True), 0.0, 1, 0.3),
    ("sgd_nesterov", "sgd", dict(momentum=0.9, nesterov=True, weight_decay=0.01), 0.0, 1, 1.0),
    ("sgd_damp", "sgd", dict(momentum=0.8, dampening=0.3, weight_decay=0.05, maximize=True), 2.0, 1, 1.0),
    ("sgd_plain", "sgd", dict(), 0.0, 2, 1.0),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed)
    mha = torch.nn.MultiheadAttention(E, H, add_bias_kv=True, batch_first=True)
    shapes = [(n, tuple(p.shape)) for n, p in mha.named_parameters()]

    def randn(shape, scale=1.0):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).float()

    def flat(ts):
        return torch.cat([t.reshape(-1) for t in ts])

    tensors, meta = {}, {"generator": "tests/parity/gen_train_optim.py", "seed": args.seed,
                         "torch": torch.__version__, "embed_dim": E, "num_heads": H,
                         "param_names": ",".join(n for n, _ in shapes)}
    sched = dict(warmup=3, total=STEPS, max_lr=1e-2, min_lr=1e-3)
    lrs = [lr_at(s, sched["warmup"], sched["total"], sched["max_lr"], sched["min_lr"]) for s in range(STEPS)]

    for name, kind, hp, max_norm, accum, gscale in CASES:
        init = {n: randn(s) for n, s in shapes}
        params = [torch.nn.Parameter(init[n].double()) for n, _ in shapes]
        if kind == "adamw":
            opt = torch.optim.AdamW(params, lr=lrs[0], **hp)
        else:
            opt = torch.optim.SGD(params, lr=lrs[0], **hp)
        norms, step_grads = [], []
        for s in range(STEPS):
            # every other step much larger, so that clipping both acts and does not
            big = 6.0 if s % 2 else 0.5
            grads = {n: randn(sh, gscale * big) for n, sh in shapes}
            step_grads.append(flat([grads[n] for n, _ in shapes]))
            for (n, _), p in zip(shapes, params):
                p.grad = grads[n].double() / accum
            if max_norm > 0:
                norms.append(float(torch.nn.utils.clip_grad_norm_(params, max_norm)))
            for grp in opt.param_groups:
                grp["lr"] = lrs[s]
            opt.step()
        tensors[f"{name}.init"] = flat([init[n] for n, _ in shapes])
        tensors[f"{name}.grads"] = torch.stack(step_grads)
        tensors[f"{name}.final"] = flat([p.detach() for p in params])
        for key, val in opt.state[params[0]].items():
            if torch.is_tensor(val) and val.shape == params[0].shape:
                tensors[f"{name}.state.{key}"] = flat([opt.state[p][key] for p in params])
        tensors[f"{name}.lr"] = torch.tensor(lrs, dtype=torch.float64)
        if norms:
            tensors[f"{name}.norms"] = torch.tensor(norms, dtype=torch.float64)
        betas = hp.get("betas", (0.9, 0.999))
        meta.update({f"{name}.kind": kind, f"{name}.steps": STEPS, f"{name}.accum": accum,
                     f"{name}.max_norm": repr(max_norm), f"{name}.beta1": repr(betas[0]),
                     f"{name}.beta2": repr(betas[1]), f"{name}.eps": repr(hp.get("eps", 1e-8)),
                     f"{name}.weight_decay": repr(hp.get("weight_decay", 0.01 if kind == "adamw" else 0.0)),
                     f"{name}.amsgrad": int(hp.get("amsgrad", False)),
                     f"{name}.maximize": int(hp.get("maximize", False)),
                     f"{name}.momentum": repr(hp.get("momentum", 0.0)),
                     f"{name}.dampening": repr(hp.get("dampening", 0.0)),
                     f"{name}.nesterov": int(hp.get("nesterov", False))})
    meta["cases"] = ",".join(c[0] for c in CASES)

    # clip_grad_norm_ alone: one case that clips, one below the threshold
    for k, max_norm in enumerate([1.5, 1e3]):
        grads = {n: randn(s, 0.7) for n, s in shapes}
        params = [torch.nn.Parameter(torch.zeros(s, dtype=torch.float64)) for _, s in shapes]
        for (n, _), p in zip(shapes, params):
            p.grad = grads[n].double()
        tensors[f"clip{k}.grad"] = flat([grads[n] for n, _ in shapes])
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        tensors[f"clip{k}.norm"] = torch.tensor([float(norm)], dtype=torch.float64)
        tensors[f"clip{k}.clipped"] = flat([p.grad for p in params])
        meta[f"clip{k}.max_norm"] = repr(max_norm)

    # the schedule: closed form, and PyTorch's own schedulers where they agree (steps < total)
    W, T, mx, mn = 4, 13, 3e-3, 2e-4
    meta.update({"sched.warmup": W, "sched.total": T, "sched.max_lr": repr(mx), "sched.min_lr": repr(mn)})
    tensors["sched.lr"] = torch.tensor([lr_at(s, W, T, mx, mn) for s in range(T + 4)], dtype=torch.float64)
    p = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
    opt = torch.optim.SGD([p], lr=mx)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sch = torch.optim.lr_scheduler.SequentialLR(
            opt, [torch.optim.lr_scheduler.LinearLR(opt, start_factor=1 / W, end_factor=1.0, total_iters=W - 1),
                  torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=T - W, eta_min=mn)], milestones=[W])
        torch_lr = []
        for _ in range(T):
            torch_lr.append(opt.param_groups[0]["lr"])
            opt.step()
            sch.step()
    tensors["sched.torch_lr"] = torch.tensor(torch_lr, dtype=torch.float64)

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "train_optim.safetensors")
    st.save(path, tensors, metadata=meta)
    print(f"wrote {path} ({os.path.getsize(path)} bytes, {len(tensors)} tensors)")


if __name__ == "__main__":
    main()
