#!/usr/bin/env python3
"""PyTorch float64 references for the row-wise / elementwise ops (tests/test_ops.c).

Writes DIR/ops.safetensors with, for each case i (a [rows, n] shape):
  case{i}.softmax.{x, dy}          float32 inputs
  case{i}.softmax.{y, dx}          float64: F.softmax(x, -1) and the gradient of sum(dy * y)
  case{i}.layernorm.{x, weight, bias, dy}               float32 inputs
  case{i}.layernorm.{y, dx, dweight, dbias}             float64: F.layer_norm over the last dim
                                                        (eps from the metadata) and autograd of
                                                        sum(dy * y)
  case{i}.gelu.{x, dy}             float32 inputs
  case{i}.gelu_none.{y, dx}, case{i}.gelu_tanh.{y, dx}  float64: F.gelu(approximate=...) and grads
  case{i}.relu.{x, dy}             float32 inputs (x has exact zeros)
  case{i}.relu.{y, dx}             float64: F.relu and its gradient (0 at x == 0)
The references are computed in float64 from the float32 inputs (x.double()).
Usage: /usr/bin/python3 tests/parity/gen_ops.py --out DIR --seed N
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

SHAPES = [(4, 33), (3, 256)]
EPS = 1e-5


def grad_of(fn, inputs, dy):
    """float64 forward of fn on float32 inputs, and the gradients of sum(dy * fn(...))."""
    leaves = [t.double().requires_grad_(True) for t in inputs]
    y = fn(*leaves)
    grads = torch.autograd.grad((y * dy.double()).sum(), leaves)
    return y.detach(), [g.detach() for g in grads]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    g = torch.Generator().manual_seed(args.seed)

    def randn(*shape, scale=1.0, shift=0.0):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale + shift).float()

    tensors = {}
    for i, (rows, n) in enumerate(SHAPES):
        p = f"case{i}."
        # softmax (logits of scale 2: peaked rows make the gradient ill-conditioned)
        x, dy = randn(rows, n, scale=2.0), randn(rows, n)
        y, (dx,) = grad_of(lambda a: F.softmax(a, dim=-1), [x], dy)
        tensors.update({p + "softmax.x": x, p + "softmax.dy": dy, p + "softmax.y": y,
                        p + "softmax.dx": dx})
        # layer_norm with weight and bias
        x, dy = randn(rows, n, scale=2.0, shift=0.5), randn(rows, n)
        w, b = randn(n, scale=0.5, shift=1.0), randn(n, scale=0.5)
        y, (dx, dw, db) = grad_of(lambda a, ww, bb: F.layer_norm(a, (n,), ww, bb, EPS),
                                  [x, w, b], dy)
        tensors.update({p + "layernorm.x": x, p + "layernorm.weight": w, p + "layernorm.bias": b,
                        p + "layernorm.dy": dy, p + "layernorm.y": y, p + "layernorm.dx": dx,
                        p + "layernorm.dweight": dw, p + "layernorm.dbias": db})
        # gelu, both forms
        x, dy = randn(rows, n, scale=3.0), randn(rows, n)
        tensors.update({p + "gelu.x": x, p + "gelu.dy": dy})
        for approx in ("none", "tanh"):
            y, (dx,) = grad_of(lambda a: F.gelu(a, approximate=approx), [x], dy)
            tensors.update({p + f"gelu_{approx}.y": y, p + f"gelu_{approx}.dx": dx})
        # relu, with exact zeros (gradient 0 there, as torch's threshold_backward)
        x, dy = randn(rows, n), randn(rows, n)
        x.view(-1)[::7] = 0.0
        y, (dx,) = grad_of(F.relu, [x], dy)
        tensors.update({p + "relu.x": x, p + "relu.dy": dy, p + "relu.y": y, p + "relu.dx": dx})

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "ops.safetensors")
    st.save(path, tensors, metadata={"generator": "tests/parity/gen_ops.py", "seed": args.seed,
                                     "torch": torch.__version__, "eps": EPS,
                                     "cases": len(SHAPES)})
    print(f"wrote {path} ({os.path.getsize(path)} bytes, {len(tensors)} tensors)")


if __name__ == "__main__":
    main()
