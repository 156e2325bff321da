"""attn.functional.flash_attn_varlen / _backward on packed ragged batches: each sequence against
PyTorch's SDPA on it alone and the float64 reference (forward and autograd backward), bitwise
against attn's own padded call on that sequence, and bad cu_seqlens refused."""
import numpy as np
import pytest
from conftest import randn, ref_sdpa, rel, torch, torch_sdpa

import attn
from attn import functional as F

TOL = 2e-5  # float32 kernels against a float64 reference (relative Frobenius error)


def _batch(rng, lq, lk, hq=4, hk=2, e=16, ev=8):
    cq = np.concatenate([[0], np.cumsum(lq)]).astype(np.int64)
    ck = np.concatenate([[0], np.cumsum(lk)]).astype(np.int64)
    return randn(rng, cq[-1], hq, e), randn(rng, ck[-1], hk, e), randn(rng, ck[-1], hk, ev), cq, ck


def _seq(x, cu, s):
    """Sequence s of packed x [total, H, E] as [H, n, E]."""
    return np.ascontiguousarray(x[cu[s]:cu[s + 1]].transpose(1, 0, 2))


def test_against_torch_sdpa_per_sequence(rng):
    lens = [5, 17, 1, 64, 65, 30]
    q, k, v, cq, ck = _batch(rng, lens, lens, hq=3, hk=3)
    for causal in (False, "top_left"):
        out = F.flash_attn_varlen(q, k, v, cq, ck, causal=causal)
        assert out.shape == (cq[-1], 3, 8) and out.dtype == np.float32
        for s in range(len(lens)):
            tq, tk, tv = (torch.from_numpy(_seq(x, c, s)).double() for x, c in ((q, cq), (k, ck), (v, ck)))
            want = torch_sdpa(tq, tk, tv, is_causal=bool(causal))
            assert rel(_seq(out, cq, s), want) < TOL, (causal, s)


@pytest.mark.parametrize("kw", [{}, {"causal": True}, {"causal": "top_left"}, {"window": (6, 2)},
                                {"causal": True, "alibi_slopes": [0.5, 0.25, 0.125, 0.0625]},
                                {"softcap": 3.0, "scale": 0.3}])
def test_against_float64_with_gradients(rng, kw):
    lq, lk = [3, 0, 40, 1, 70, 9], [5, 4, 40, 0, 66, 9]
    q, k, v, cq, ck = _batch(rng, lq, lk)
    go = randn(rng, cq[-1], 4, 8)
    out, lse = F.flash_attn_varlen(q, k, v, cq, ck, return_lse=True, **kw)
    dq, dk, dv = F.flash_attn_varlen_backward(go, q, k, v, cq, ck, **kw)
    assert lse.shape == (4, cq[-1])
    ref_kw = dict(kw)
    c = ref_kw.pop("causal", False)
    ref_kw["is_causal"] = "bottom_right" if c is True else c
    for s in range(len(lq)):
        tq, tk, tv = (torch.from_numpy(_seq(x, cu, s)).double().requires_grad_()
                      for x, cu in ((q, cq), (k, ck), (v, ck)))
        if lq[s] == 0 or lk[s] == 0:
            assert np.all(_seq(out, cq, s) == 0) and np.all(np.isneginf(lse[:, cq[s]:cq[s + 1]]))
            assert np.all(_seq(dq, cq, s) == 0) and np.all(_seq(dk, ck, s) == 0) and np.all(_seq(dv, ck, s) == 0)
            continue
        want = ref_sdpa(tq, tk, tv, enable_gqa=True, **ref_kw)
        got = _seq(out, cq, s)
        rows = torch.isfinite(want).all(-1)  # bottom-right rows without keys are 0 here, NaN there
        assert rel(got[rows.numpy()], want[rows]) < TOL, (kw, s)
        want.backward(torch.from_numpy(np.nan_to_num(_seq(go, cq, s) * rows.numpy()[..., None])).double())
        for g, t, cu in ((dq, tq, cq), (dk, tk, ck), (dv, tv, ck)):
            assert rel(_seq(g, cu, s), torch.nan_to_num(t.grad)) < 1e-4, (kw, s)


def test_bitwise_against_padded_call_alone(rng):
    lens = [7, 0, 64, 129, 2]
    q, k, v, cq, ck = _batch(rng, lens, lens)
    kw = {"window": (16, 0), "dropout_p": 0.1, "dropout_seed": 9}
    out, lse = F.flash_attn_varlen(q, k, v, cq, ck, causal="top_left", dropout_offset=3, return_lse=True, **kw)
    for s, n in enumerate(lens):
        if n == 0:
            continue
        o1, l1 = attn.scaled_dot_product_attention(_seq(q, cq, s)[None], _seq(k, ck, s)[None], _seq(v, ck, s)[None],
                                                   is_causal=True, enable_gqa=True, return_lse=True,
                                                   dropout_offset=3 + s, **kw)
        assert np.array_equal(o1[0], _seq(out, cq, s)) and np.array_equal(l1[0], lse[:, cq[s]:cq[s + 1]])


def test_bad_arguments(rng):
    q, k, v, cq, ck = _batch(rng, [3, 4], [3, 4])
    for bad in ([0, 4, 3], [1, 3, 7], [0, 3, 8], [0, -1, 7]):
        with pytest.raises(attn.AttnError, match="cu_seqlens_q"):
            F.flash_attn_varlen(q, k, v, np.array(bad), ck)
    with pytest.raises(attn.AttnError, match="batch"):
        F.flash_attn_varlen(q[:0], k[:0], v[:0], [0], [0])
    with pytest.raises(ValueError, match="entries"):
        F.flash_attn_varlen(q, k, v, cq, ck[:2])
    with pytest.raises(ValueError, match="integer"):
        F.flash_attn_varlen(q, k, v, cq.astype(np.float64), ck)
    with pytest.raises(ValueError, match="packed"):
        F.flash_attn_varlen(q[None], k, v, cq, ck)
