r"""attn's attention for CPU torch tensors: an ``autograd.Function`` and a drop-in replacement for
``torch.nn.functional.scaled_dot_product_attention``.

Tensors reach the kernels without a copy: ``Tensor.numpy()`` shares memory (strides included), and
results come back through ``torch.from_numpy``. The kernels compute in float32: float64 (or half)
tensors are converted to float32 on the way in and the results back to the input's dtype.

Swap it into a model that calls ``F.scaled_dot_product_attention``::

    import attn.torch
    with attn.torch.patch():          # torch.nn.functional.scaled_dot_product_attention -> attn's
        loss = model(x).sum()
        loss.backward()

Dropout (``dropout_p > 0``) draws its Philox seed from torch's default generator, so
``torch.manual_seed`` makes it reproducible; the dropped positions differ from PyTorch's own.
"""
from __future__ import annotations

import contextlib
from typing import Iterator, Optional, Sequence

import numpy as np
import torch

from . import functional as _F
from .functional import CausalArg, WindowArg

__all__ = ["ScaledDotProductAttention", "scaled_dot_product_attention", "patch"]


def _np(name: str, t: torch.Tensor) -> np.ndarray:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"attn.torch: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise ValueError(f"attn.torch: {name} is on {t.device}; attn runs on the CPU (move it with .cpu())")
    t = t.detach()
    if t.is_floating_point() and t.dtype not in (torch.float32, torch.float64):
        t = t.float()
    return t.numpy()


class ScaledDotProductAttention(torch.autograd.Function):
    r"""``out = attn.functional.scaled_dot_product_attention(q, k, v, ...)`` with its backward:
    gradients flow to query, key and value (:math:`dQ, dK, dV`, see attn.functional); the mask,
    ALiBi slopes and the other arguments get none.

    ``apply(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, window,
    alibi_slopes, softcap, dropout_seed)``
    """

    @staticmethod
    def forward(ctx, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, window,
                alibi_slopes, softcap, dropout_seed):
        mask = None if attn_mask is None else _np("attn_mask", attn_mask)
        slopes = None if alibi_slopes is None else _np("alibi_slopes", alibi_slopes) \
            if isinstance(alibi_slopes, torch.Tensor) else alibi_slopes
        kw = dict(window=window, alibi_slopes=slopes, softcap=softcap, dropout_seed=dropout_seed)
        args = (mask, dropout_p, is_causal, scale, enable_gqa)
        out, lse = _F.scaled_dot_product_attention(_np("query", query), _np("key", key), _np("value", value),
                                                   *args, return_lse=True, **kw)
        ctx.save_for_backward(query, key, value)
        ctx.attn = (args, kw, out, lse)
        return torch.from_numpy(out).to(query.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        query, key, value = ctx.saved_tensors
        args, kw, out, lse = ctx.attn
        dq, dk, dv = _F.scaled_dot_product_attention_backward(
            _np("grad_out", grad_out), _np("query", query), _np("key", key), _np("value", value), *args,
            out=out, lse=lse, **kw)
        need = ctx.needs_input_grad
        g = [torch.from_numpy(d).to(t.dtype) if n else None
             for d, t, n in ((dq, query, need[0]), (dk, key, need[1]), (dv, value, need[2]))]
        return (*g, None, None, None, None, None, None, None, None, None)


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 attn_mask: Optional[torch.Tensor] = None, dropout_p: float = 0.0,
                                 is_causal: CausalArg = False, scale: Optional[float] = None,
                                 enable_gqa: bool = False, *, window: WindowArg = None,
                                 alibi_slopes: Optional[Sequence[float]] = None,
                                 softcap: float = 0.0) -> torch.Tensor:
    r"""Drop-in for ``torch.nn.functional.scaled_dot_product_attention`` on CPU tensors, with
    gradients: :math:`\operatorname{dropout}_p(\operatorname{softmax}(\sigma QK^\top + M))V`.
    Same argument names, order and mask semantics (bool mask True = may attend, float mask added,
    broadcast to ``[..., L, S]``); ``window``, ``alibi_slopes``, ``softcap`` and
    ``is_causal="bottom_right"`` are attn's extensions (attn.functional). Query may have rank 2-4.
    """
    seed = None
    if dropout_p > 0:
        seed = int(torch.randint(0, 2**62, (1,), dtype=torch.int64).item())
    return ScaledDotProductAttention.apply(query, key, value, attn_mask, float(dropout_p), is_causal, scale,
                                           bool(enable_gqa), window, alibi_slopes, float(softcap), seed)


_MISSING = object()


@contextlib.contextmanager
def patch() -> Iterator[None]:
    """Within the block, ``torch.nn.functional.scaled_dot_product_attention`` is attn's (models that
    call it, e.g. torch 2.x's MultiheadAttention with need_weights=False, then run attn's kernels);
    the previous function (or its absence, in torch 1.13) is restored on exit."""
    F = torch.nn.functional
    prev = getattr(F, "scaled_dot_product_attention", _MISSING)
    F.scaled_dot_product_attention = scaled_dot_product_attention
    try:
        yield
    finally:
        if prev is _MISSING:
            del F.scaled_dot_product_attention
        else:
            F.scaled_dot_product_attention = prev
