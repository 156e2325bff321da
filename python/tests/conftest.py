"""Shared helpers: a float64 reference of attention in torch (every option attn has), PyTorch's own
SDPA where this torch has one (2.x: F.scaled_dot_product_attention; 1.13: the private
F._scaled_dot_product_attention, without scale / GQA), and seeded random inputs."""
import math
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

SEED = int(os.environ.get("ATTN_TEST_SEED", "1234")) % (2**31)


@pytest.fixture
def rng():
    return np.random.default_rng(SEED)


def randn(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def torch_sdpa(q, k, v, attn_mask=None, is_causal=False):
    """PyTorch's own SDPA (float tensors) on whichever torch is installed."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal)
    return F._scaled_dot_product_attention(q, k, v, attn_mask, 0.0, False, is_causal)[0]


def ref_sdpa(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False, window=None,
             alibi_slopes=None, softcap=0.0, weights=False):
    """attention in float64 torch, differentiable: q [..., L, E] (heads at dim -3 when rank 4)."""
    q, k, v = (torch.as_tensor(x).double() if not torch.is_tensor(x) or x.dtype != torch.float64 else x
               for x in (q, k, v))
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    if enable_gqa and q.shape[-3] != k.shape[-3]:
        rep = q.shape[-3] // k.shape[-3]
        k = k.repeat_interleave(rep, dim=-3)
        v = v.repeat_interleave(rep, dim=-3)
    s = (q @ k.transpose(-2, -1)) * (scale if scale is not None else 1 / math.sqrt(E))
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(L)[:, None]
    j = torch.arange(S)[None, :]
    off = S - L if is_causal == "bottom_right" else 0
    allowed = torch.ones(L, S, dtype=torch.bool)
    if is_causal:
        allowed &= j <= i + off
    if window is not None:
        lw, rw = (window, window) if isinstance(window, int) else window
        if lw is not None and lw >= 0:
            allowed &= j >= i + off - lw
        if rw is not None and rw >= 0:
            allowed &= j <= i + off + rw
    if alibi_slopes is not None:
        sl = torch.as_tensor(np.asarray(alibi_slopes, dtype=np.float64))
        s = s - sl[:, None, None] * (i + off - j).abs().double()
    if attn_mask is not None:
        m = torch.as_tensor(np.asarray(attn_mask)) if not torch.is_tensor(attn_mask) else attn_mask
        if m.dtype == torch.bool:
            allowed = allowed & m
        else:
            s = s + m.double()
    s = s.masked_fill(~allowed, float("-inf"))
    p = torch.softmax(s, dim=-1)
    p = torch.nan_to_num(p, nan=0.0)
    out = p @ v
    return (out, p) if weights else out


def rel(a, b):
    a = np.asarray(a.detach() if torch.is_tensor(a) else a, dtype=np.float64)
    b = np.asarray(b.detach() if torch.is_tensor(b) else b, dtype=np.float64)
    return np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30)
