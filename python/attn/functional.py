r"""Scaled dot-product attention on NumPy arrays, over attn_flash_* (and attn_sdpa_* for returned
weights).

For query :math:`Q \in \mathbb{R}^{L \times E}`, key :math:`K \in \mathbb{R}^{S \times E}` and
value :math:`V \in \mathbb{R}^{S \times E_v}` of one (batch, head):

.. math::

    S_{ij} = \sigma\, Q_i \cdot K_j,\qquad
    S_{ij} \leftarrow c \tanh(S_{ij} / c) \text{ (softcap } c > 0),\qquad
    S_{ij} \leftarrow S_{ij} + M_{ij} - m_h |i + o - j| \text{ (float mask, ALiBi)}

    S_{ij} = -\infty \text{ where the boolean mask is False, causality or the window forbids}

    P = \operatorname{softmax}_j(S),\qquad P' = \operatorname{dropout}_p(P),\qquad O = P' V,
    \qquad \mathrm{lse}_i = \log \textstyle\sum_j e^{S_{ij}}

with :math:`\sigma` = ``scale`` (default :math:`1/\sqrt{E}`) and :math:`o` = 0 (top-left causal
alignment, PyTorch's ``is_causal``) or :math:`S - L` (bottom-right). A row whose every key is masked
gets output 0, weights 0 and gradients 0 (never NaN). Gradients (``..._backward``):

.. math::

    dV = P'^\top dO,\quad dP' = dO\, V^\top,\quad
    dS_{ij} = P_{ij}\,\big(dP_{ij} - \textstyle\sum_k P_{ik}\, dP_{ik}\big),\quad
    dQ = \sigma\, dS\, K,\quad dK = \sigma\, dS^\top Q

(times the soft-cap's derivative :math:`1 - \tanh^2` when capped; with grouped-query attention
dK, dV sum over the query heads sharing a key/value head).

Layouts follow torch.nn.functional.scaled_dot_product_attention: ``q`` is ``[..., L, E]`` with up
to two leading dimensions (``[L, E]``, ``[B, L, E]`` or ``[B, H, L, E]``), ``k`` ``[..., S, E]``,
``v`` ``[..., S, Ev]``. Inputs are float32 arrays of any strides (a ``[B, L, H, E]`` array
transposed to ``[B, H, L, E]`` is read in place, without a copy); other dtypes are converted to
float32 (a copy). Results are new float32 arrays.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple, Union

import numpy as np

from . import _lib
from ._lib import check, lib

CausalArg = Union[bool, str]
WindowArg = Union[None, int, Tuple[Optional[int], Optional[int]]]

_CAUSAL = {False: 0, True: 1, "none": 0, "top_left": 1, "bottom_right": 2}


def _array(name: str, x) -> np.ndarray:
    if x is None:
        raise TypeError(f"{name} must be an array, got None")
    a = np.asarray(x)
    if a.dtype.kind != "f":
        raise TypeError(f"{name} must be a floating-point array, got dtype {a.dtype}")
    return a


def _to4(a: np.ndarray) -> np.ndarray:
    """A rank-4 view [B, H, n, d] of a rank 2-4 array (leading unit dimensions, no copy)."""
    if a.ndim == 2:
        return a[None, None]
    if a.ndim == 3:
        return a[:, None]
    return a


def _from4(a: np.ndarray, ndim: int) -> np.ndarray:
    if ndim == 2:
        return a[0, 0]
    if ndim == 3:
        return a[:, 0]
    return a


class _Call:
    """The checked arguments of one call: 4-D float32 views and the attn_sdpa_params, with every
    array the params point into kept alive."""

    def __init__(self, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, window,
                 alibi_slopes, softcap, dropout_seed, dropout_offset, fn):
        q, k, v = _array("query", query), _array("key", key), _array("value", value)
        if not 2 <= q.ndim <= 4:
            raise ValueError(f"{fn}: query must have rank 2, 3 or 4 ([L, E], [B, L, E], [B, H, L, E]), "
                             f"got shape {q.shape}")
        if k.ndim != q.ndim or v.ndim != q.ndim:
            raise ValueError(f"{fn}: query, key and value must have the same rank, got shapes {q.shape}, "
                             f"{k.shape}, {v.shape}")
        self.ndim = q.ndim
        q4, k4, v4 = (_lib.as_f32(_to4(x)) for x in (q, k, v))
        B, Hq, L, E = q4.shape
        _, Hk, S, Ek = k4.shape
        if k4.shape[0] != B or v4.shape[0] != B:
            raise ValueError(f"{fn}: batch sizes differ: query {q.shape}, key {k.shape}, value {v.shape}")
        if Ek != E:
            raise ValueError(f"{fn}: key's last dimension {Ek} differs from query's {E} "
                             f"(query {q.shape}, key {k.shape})")
        if v4.shape[1] != Hk or v4.shape[2] != S:
            raise ValueError(f"{fn}: key {k.shape} and value {v.shape} must agree in every dimension but "
                             "the last")
        if min(B, Hq, L, E, Hk, S, v4.shape[3]) < 1:
            raise ValueError(f"{fn}: empty dimension in query {q.shape}, key {k.shape} or value {v.shape}")
        if Hq != Hk:
            if not enable_gqa:
                raise ValueError(f"{fn}: query has {Hq} heads and key/value {Hk}: pass enable_gqa=True for "
                                 "grouped-query attention")
            if Hq % Hk:
                raise ValueError(f"{fn}: enable_gqa needs query heads ({Hq}) to be a multiple of key/value "
                                 f"heads ({Hk})")
        self.q, self.k, self.v = q4, k4, v4
        self.B, self.Hq, self.Hk, self.L, self.S, self.E, self.Ev = B, Hq, Hk, L, S, E, v4.shape[3]
        self.keep = []
        p = lib.attn_sdpa_params_default()
        if scale is not None:
            scale = float(scale)
            if scale == 0.0 or not math.isfinite(scale):
                raise ValueError(f"{fn}: scale must be finite and nonzero, got {scale} (None selects 1/sqrt(E))")
            p.scale = scale
        if isinstance(is_causal, (bool, np.bool_)) or is_causal in (0, 1):
            p.causal = _CAUSAL[bool(is_causal)]
        elif isinstance(is_causal, str) and is_causal in _CAUSAL:
            p.causal = _CAUSAL[is_causal]
        else:
            raise ValueError(f"{fn}: is_causal must be a bool, 'top_left' or 'bottom_right', got {is_causal!r}")
        if attn_mask is not None:
            m = np.asarray(attn_mask)
            target = q.shape[:-1] + (S,)
            if m.ndim > len(target):
                raise ValueError(f"{fn}: attn_mask of shape {m.shape} has more dimensions than the attention "
                                 f"weights {target}")
            try:
                mb = np.broadcast_to(m, target)
            except ValueError:
                raise ValueError(f"{fn}: attn_mask of shape {m.shape} does not broadcast to the attention "
                                 f"weights' shape {target}") from None
            mb = _to4(mb)
            if m.dtype == np.bool_:
                self.bmask = _lib.btensor(mb)
                self.keep.append(mb)
                p.bool_mask = _lib.ctypes.pointer(self.bmask)
            elif m.dtype.kind == "f":
                mf = np.broadcast_to(_lib.as_f32(m), target)  # converted once, before broadcasting
                mf = _to4(mf)
                self.fmask = _lib.tensor(mf)
                self.keep.append(mf)
                p.add_mask = _lib.ctypes.pointer(self.fmask)
            else:
                raise TypeError(f"{fn}: attn_mask must be bool (True = may attend, as PyTorch's SDPA) or floating "
                                f"point (added), got dtype {m.dtype} (an integer mask has no single meaning: pass "
                                "mask != 0 or mask == 0 as the convention says)")
        if window is not None:
            if isinstance(window, (int, np.integer)):
                left = right = int(window)
            else:
                try:
                    left, right = window
                except (TypeError, ValueError):
                    raise ValueError(f"{fn}: window must be an int or a (left, right) pair, got {window!r}") from None
                left = -1 if left is None else int(left)
                right = -1 if right is None else int(right)
            if (isinstance(window, (int, np.integer)) and left < 0):
                raise ValueError(f"{fn}: window must be >= 0, got {window}")
            p.window_left, p.window_right = left, right
        if alibi_slopes is not None:
            a = np.ascontiguousarray(alibi_slopes, dtype=np.float32)
            if a.shape != (Hq,):
                raise ValueError(f"{fn}: alibi_slopes must have shape ({Hq},) (one per query head), got {a.shape}")
            self.keep.append(a)
            p.alibi_slopes = a.ctypes.data_as(_lib.POINTER(_lib.c_float))
        softcap = float(softcap)
        if not (softcap >= 0.0 and math.isfinite(softcap)):
            raise ValueError(f"{fn}: softcap must be >= 0 (0 = off), got {softcap}")
        p.softcap = softcap
        dropout_p = float(dropout_p)
        if not 0.0 <= dropout_p < 1.0:
            raise ValueError(f"{fn}: dropout_p must be in [0, 1), got {dropout_p}")
        p.dropout_p = dropout_p
        # checked even when unused: a seed of 2**70 or -1 is a mistake whatever dropout_p is
        if dropout_seed is not None:
            dropout_seed = _lib.u64(dropout_seed, f"{fn}: dropout_seed")
        dropout_offset = _lib.u64(dropout_offset, f"{fn}: dropout_offset")
        if dropout_p > 0:
            if dropout_seed is None:
                raise ValueError(f"{fn}: dropout_p > 0 needs dropout_seed (the Philox stream; the backward "
                                 "must be given the same one)")
            p.dropout_seed, p.dropout_offset = int(dropout_seed), int(dropout_offset)
        self.p = p
        self.tq, self.tk, self.tv = _lib.tensor(q4), _lib.tensor(k4), _lib.tensor(v4)

    def ptr(self, t):
        return None if t is None else _lib.ctypes.byref(t)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: CausalArg = False, scale: Optional[float] = None,
                                 enable_gqa: bool = False, *, window: WindowArg = None,
                                 alibi_slopes: Optional[Sequence[float]] = None, softcap: float = 0.0,
                                 return_lse: bool = False, need_weights: bool = False,
                                 dropout_seed: Optional[int] = None, dropout_offset: int = 0):
    r"""Attention :math:`O = \operatorname{dropout}_p(\operatorname{softmax}(\sigma QK^\top + M)) V`
    (module docstring: the full formula), with PyTorch's argument names, order and semantics.

    Args:
        query, key, value: ``[..., L, E]``, ``[..., S, E]``, ``[..., S, Ev]`` float arrays, rank 2-4.
        attn_mask: bool (True = may attend) or float (added to the scaled logits, may hold -inf),
            broadcastable to ``[..., L, S]``.
        dropout_p: dropout on the weights; needs ``dropout_seed`` (attn's Philox stream, not
            PyTorch's random numbers).
        is_causal: True / ``"top_left"`` (key j allowed for query i when j <= i, PyTorch's) or
            ``"bottom_right"`` (j <= i + S - L, FlashAttention's). Combined with attn_mask when both.
        scale: :math:`\sigma`; None = :math:`1/\sqrt{E}`.
        enable_gqa: allow fewer key/value heads than query heads (query head h reads key/value
            head ``h // (Hq // Hk)``).
        window: sliding window relative to the causal diagonal: an int w for (w, w), or (left,
            right) with None for unbounded: key j allowed when i + o - left <= j <= i + o + right.
        alibi_slopes: ``[Hq]`` slopes m: logits get :math:`-m_h |i + o - j|`.
        softcap: :math:`c > 0` caps logits to :math:`c \tanh(s / c)`; 0 = off.
        return_lse: also return the log-sum-exp ``[..., L]`` of each row's logits (-inf when the
            row is fully masked), as the backward uses.
        need_weights: also return the weights ``[..., L, S]`` applied to V (computed by the exact
            N x N reference, attn_sdpa_forward, instead of the flash kernel).

    Returns:
        ``out`` ``[..., L, Ev]``; ``(out, lse)``, ``(out, weights)`` or ``(out, weights, lse)`` as
        asked.
    """
    c = _Call(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, window, alibi_slopes,
              softcap, dropout_seed, dropout_offset, "scaled_dot_product_attention")
    out = np.empty((c.B, c.Hq, c.L, c.Ev), dtype=np.float32)
    to = _lib.tensor(out)
    lse = np.empty((c.B, c.Hq, c.L), dtype=np.float32) if return_lse else None
    tl = _lib.tensor(lse) if return_lse else None
    if need_weights:
        w = np.empty((c.B, c.Hq, c.L, c.S), dtype=np.float32)
        tw = _lib.tensor(w)
        ws, wsb = _lib.workspace(lib.attn_sdpa_workspace_size(c.tq, c.tk, c.tv))
        check(lib.attn_sdpa_forward(c.tq, c.tk, c.tv, c.p, to, tw, c.ptr(tl), ws, wsb))
    else:
        ws, wsb = _lib.workspace(lib.attn_flash_workspace_size(c.tq, c.tk, c.tv))
        check(lib.attn_flash_forward(c.tq, c.tk, c.tv, c.p, to, c.ptr(tl), ws, wsb))
    res = [_from4(out, c.ndim)]
    if need_weights:
        res.append(_from4(w, c.ndim))
    if return_lse:
        res.append(_from4(lse[..., None], c.ndim)[..., 0])
    return res[0] if len(res) == 1 else tuple(res)


def scaled_dot_product_attention_backward(grad_out, query, key, value, attn_mask=None, dropout_p: float = 0.0,
                                          is_causal: CausalArg = False, scale: Optional[float] = None,
                                          enable_gqa: bool = False, *, window: WindowArg = None,
                                          alibi_slopes: Optional[Sequence[float]] = None, softcap: float = 0.0,
                                          out=None, lse=None, dropout_seed: Optional[int] = None,
                                          dropout_offset: int = 0):
    r"""Gradients :math:`(dQ, dK, dV)` of :func:`scaled_dot_product_attention` for the upstream
    gradient ``grad_out`` = :math:`dO` (shape of the output), with the forward's arguments (the
    same ``dropout_seed`` / ``dropout_offset`` when ``dropout_p > 0``). ``out`` and ``lse`` of that
    forward (``return_lse=True``) save recomputing it. The mask gets no gradient.

    Returns:
        ``(dq, dk, dv)`` shaped as query, key, value (float32).
    """
    c = _Call(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, window, alibi_slopes,
              softcap, dropout_seed, dropout_offset, "scaled_dot_product_attention_backward")
    fn = "scaled_dot_product_attention_backward"
    go = _lib.as_f32(_to4(_array("grad_out", grad_out)))
    want = (c.B, c.Hq, c.L, c.Ev)
    if np.ndim(grad_out) != c.ndim or go.shape != want:
        raise ValueError(f"{fn}: grad_out has shape {np.shape(grad_out)}, the output's is "
                         f"{_from4(np.empty(want, np.uint8), c.ndim).shape}")
    if (out is None) != (lse is None):
        raise ValueError(f"{fn}: give both out and lse of the forward, or neither")
    if out is None:
        o = np.empty(want, dtype=np.float32)
        l4 = np.empty(want[:3], dtype=np.float32)
        ws, wsb = _lib.workspace(lib.attn_flash_workspace_size(c.tq, c.tk, c.tv))
        check(lib.attn_flash_forward(c.tq, c.tk, c.tv, c.p, _lib.tensor(o), _lib.tensor(l4), ws, wsb))
    else:
        o = _lib.as_f32(_to4(_array("out", out)))
        l4 = _array("lse", lse)
        l4 = _lib.as_f32(l4[None, None] if l4.ndim == 1 else l4[:, None] if l4.ndim == 2 else l4)
        if o.shape != want or l4.shape != want[:3]:
            raise ValueError(f"{fn}: out {np.shape(out)} / lse {np.shape(lse)} are not the forward's "
                             "(out shaped as the output, lse as it without the last dimension)")
    dq = np.empty(c.q.shape, dtype=np.float32)
    dk = np.empty(c.k.shape, dtype=np.float32)
    dv = np.empty(c.v.shape, dtype=np.float32)
    to, tl, tgo = _lib.tensor(o), _lib.tensor(l4), _lib.tensor(go)
    tdq, tdk, tdv = _lib.tensor(dq), _lib.tensor(dk), _lib.tensor(dv)
    ws, wsb = _lib.workspace(lib.attn_flash_workspace_size(c.tq, c.tk, c.tv))
    check(lib.attn_flash_backward(c.tq, c.tk, c.tv, c.p, to, tgo, tl, tdq, tdk, tdv, ws, wsb))
    return _from4(dq, c.ndim), _from4(dk, c.ndim), _from4(dv, c.ndim)


# ---- variable-length (packed) batches ---------------------------------------------------------

def _cu(name: str, x, fn: str) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 1 or a.dtype.kind not in "iu":
        raise ValueError(f"{fn}: {name} must be a 1-D integer array [batch + 1], got shape {a.shape} "
                         f"dtype {a.dtype}")
    return np.ascontiguousarray(a, dtype=np.int64)


class _Varlen:
    """The checked arguments of one packed call: [total, H, E] float32 views, the int64
    cu_seqlens and the attn_sdpa_params (validated as _Call does, on one-token stand-ins)."""

    def __init__(self, q, k, v, cu_seqlens_q, cu_seqlens_k, dropout_p, scale, causal, window, alibi_slopes,
                 softcap, dropout_seed, dropout_offset, fn):
        q, k, v = (_lib.as_f32(_array(n, x)) for n, x in (("q", q), ("k", k), ("v", v)))
        for n, x in (("q", q), ("k", k), ("v", v)):
            if x.ndim != 3:
                raise ValueError(f"{fn}: {n} must be packed [total, heads, head_dim], got shape {x.shape}")
        self.cq, self.ck = _cu("cu_seqlens_q", cu_seqlens_q, fn), _cu("cu_seqlens_k", cu_seqlens_k, fn)
        if self.cq.shape != self.ck.shape:
            raise ValueError(f"{fn}: cu_seqlens_q has {self.cq.shape[0]} entries, cu_seqlens_k "
                             f"{self.ck.shape[0]} (both batch + 1)")
        self.batch = self.cq.shape[0] - 1
        if causal is True or causal is False or causal in (0, 1):
            causal = "bottom_right" if causal else "none"  # FlashAttention's flash_attn_varlen_func
        Hq, Hk, E, Ev = q.shape[1], k.shape[1], q.shape[2], v.shape[2]
        stand = _Call(np.zeros((1, max(Hq, 1), 1, max(E, 1)), np.float32),
                      np.zeros((1, max(Hk, 1), 1, max(k.shape[2], 1)), np.float32),
                      np.zeros((1, max(Hk, 1), 1, max(Ev, 1)), np.float32), None, dropout_p, causal, scale,
                      True, window, alibi_slopes, softcap, dropout_seed, dropout_offset, fn)
        self.p, self.keep = stand.p, stand.keep
        self.q, self.k, self.v = q, k, v
        self.tq, self.tk, self.tv = _lib.tensor(q), _lib.tensor(k), _lib.tensor(v)
        self.Hq, self.Ev = Hq, Ev

    def lens(self):
        return (self.tq, self.tk, self.tv, self.cq.ctypes.data, self.ck.ctypes.data, self.batch)

    def workspace(self):
        return _lib.workspace(lib.attn_flash_varlen_workspace_size(*self.lens()))

    def forward(self):
        out = np.empty((self.q.shape[0], self.Hq, self.Ev), dtype=np.float32)
        lse = np.empty((self.Hq, self.q.shape[0]), dtype=np.float32)
        ws, wsb = self.workspace()
        check(lib.attn_flash_varlen_forward(*self.lens(), self.p, _lib.tensor(out), _lib.tensor(lse), ws, wsb))
        return out, lse


def flash_attn_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, dropout_p: float = 0.0, scale: Optional[float] = None,
                      causal: CausalArg = False, *, window: WindowArg = None,
                      alibi_slopes: Optional[Sequence[float]] = None, softcap: float = 0.0, return_lse: bool = False,
                      dropout_seed: Optional[int] = None, dropout_offset: int = 0):
    r"""Attention over a packed batch of sequences of different lengths, without padding
    (FlashAttention's ``flash_attn_varlen_func``; attn_flash_varlen_forward).

    Sequence s owns query rows ``cu_seqlens_q[s] .. cu_seqlens_q[s + 1]`` of ``q`` and key rows
    ``cu_seqlens_k[s] .. cu_seqlens_k[s + 1]`` of ``k`` / ``v``, and attends only to its own keys
    (the module docstring's formula per sequence); lengths may be 0 (a sequence without keys gets
    output 0). Its output equals, bit for bit, :func:`scaled_dot_product_attention` on it alone.

    Args:
        q: ``[total_q, Hq, E]``; k: ``[total_k, Hk, E]``; v: ``[total_k, Hk, Ev]`` (Hq a multiple of Hk).
        cu_seqlens_q, cu_seqlens_k: int ``[batch + 1]``: 0 first, nondecreasing, the totals last.
        causal: True / ``"bottom_right"`` (FlashAttention's convention: the last query of a sequence
            sees its last key, j <= i + Nk - Nq) or ``"top_left"`` (PyTorch's is_causal, j <= i).
        window, alibi_slopes, softcap, scale: as :func:`scaled_dot_product_attention`, per sequence.
        dropout_p, dropout_seed, dropout_offset: sequence s draws what its run alone draws with
            offset ``dropout_offset + s``.
        return_lse: also return the log-sum-exp ``[Hq, total_q]`` (FlashAttention's layout).

    Returns:
        ``out`` ``[total_q, Hq, Ev]`` float32, or ``(out, lse)``.
    """
    c = _Varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, dropout_p, scale, causal, window, alibi_slopes, softcap,
                dropout_seed, dropout_offset, "flash_attn_varlen")
    out, lse = c.forward()
    return (out, lse) if return_lse else out


def flash_attn_varlen_backward(grad_out, q, k, v, cu_seqlens_q, cu_seqlens_k, dropout_p: float = 0.0,
                               scale: Optional[float] = None, causal: CausalArg = False, *,
                               window: WindowArg = None, alibi_slopes: Optional[Sequence[float]] = None,
                               softcap: float = 0.0, dropout_seed: Optional[int] = None, dropout_offset: int = 0):
    r"""Gradients ``(dq, dk, dv)`` (packed as q, k, v) of :func:`flash_attn_varlen` for the upstream
    gradient ``grad_out`` ``[total_q, Hq, Ev]``, with the forward's arguments."""
    fn = "flash_attn_varlen_backward"
    c = _Varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, dropout_p, scale, causal, window, alibi_slopes, softcap,
                dropout_seed, dropout_offset, fn)
    go = _lib.as_f32(_array("grad_out", grad_out))
    if go.shape != (c.q.shape[0], c.Hq, c.Ev):
        raise ValueError(f"{fn}: grad_out has shape {go.shape}, the output's is {(c.q.shape[0], c.Hq, c.Ev)}")
    out, lse = c.forward()
    dq, dk, dv = (np.empty(x.shape, dtype=np.float32) for x in (c.q, c.k, c.v))
    ws, wsb = c.workspace()
    check(lib.attn_flash_varlen_backward(*c.lens(), c.p, _lib.tensor(out), _lib.tensor(go), _lib.tensor(lse),
                                         _lib.tensor(dq), _lib.tensor(dk), _lib.tensor(dv), ws, wsb))
    return dq, dk, dv
