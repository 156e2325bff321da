"""attn.scaled_dot_product_attention / _backward on NumPy arrays against PyTorch's SDPA and a
float64 reference: masks (bool, float, broadcast), GQA, causal alignments, windows, ALiBi,
soft-capping, strides, the log-sum-exp, returned weights, dropout, threads and bad arguments."""
import threading

import numpy as np
import pytest
from conftest import randn, ref_sdpa, rel, torch, torch_sdpa

import attn
from attn import _lib

TOL = 2e-5  # float32 kernels against a float64 reference (relative Frobenius error)


def test_against_torch_sdpa(rng):
    q, k, v = randn(rng, 2, 3, 17, 16), randn(rng, 2, 3, 23, 16), randn(rng, 2, 3, 23, 8)
    mask = rng.random((17, 23)) > 0.3
    mask[:, 0] = True  # no fully masked row (PyTorch 1.13 gives NaN there)
    for kw in ({}, {"is_causal": True}, {"attn_mask": mask}, {"attn_mask": rng.standard_normal((2, 1, 17, 23))}):
        tkw = {k_: (torch.from_numpy(np.asarray(x)).float() if k_ == "attn_mask" and np.asarray(x).dtype != bool
                    else torch.from_numpy(x) if k_ == "attn_mask" else x) for k_, x in kw.items()}
        want = torch_sdpa(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v), **tkw)
        got = attn.scaled_dot_product_attention(q, k, v, **kw)
        assert got.dtype == np.float32 and got.shape == (2, 3, 17, 8)
        assert rel(got, want) < 1e-5, kw


def _check(rng, qs, ks, vs, **kw):
    q, k, v = randn(rng, *qs), randn(rng, *ks), randn(rng, *vs)
    out = attn.scaled_dot_product_attention(q, k, v, **kw)
    want = ref_sdpa(q, k, v, **kw)
    assert out.shape == tuple(want.shape)
    assert rel(out, want) < TOL, kw
    # the backward against float64 autograd
    tq, tk, tv = (torch.from_numpy(x).double().requires_grad_() for x in (q, k, v))
    go = randn(rng, *out.shape)
    ref_sdpa(tq, tk, tv, **kw).backward(torch.from_numpy(go).double())
    dq, dk, dv = attn.scaled_dot_product_attention_backward(go, q, k, v, **kw)
    for g, t in ((dq, tq), (dk, tk), (dv, tv)):
        assert g.shape == tuple(t.shape)
        assert rel(g, t.grad) < 1e-4, kw


@pytest.mark.parametrize("kw", [
    {}, {"scale": 0.3}, {"is_causal": True}, {"is_causal": "top_left"}, {"is_causal": "bottom_right"},
    {"window": 3}, {"window": (4, 0)}, {"window": (None, 2)}, {"is_causal": "bottom_right", "window": (5, None)},
    {"softcap": 2.0, "scale": 1.5}, {"alibi_slopes": [0.5, 0.25, 0.125, 0.0625]},
])
def test_options_match_reference(rng, kw):
    _check(rng, (2, 4, 9, 8), (2, 4, 13, 8), (2, 4, 13, 6), **kw)


@pytest.mark.parametrize("shape", [(9, 8), (3, 9, 8)])
def test_rank_2_and_3(rng, shape):
    ks = shape[:-2] + (11, 8)
    _check(rng, shape, ks, ks, is_causal="bottom_right")


@pytest.mark.parametrize("hk", [1, 2])
def test_gqa(rng, hk):
    _check(rng, (2, 4, 7, 8), (2, hk, 10, 8), (2, hk, 10, 8), enable_gqa=True, is_causal=True)


@pytest.mark.parametrize("mshape", [(9, 13), (1, 13), (2, 1, 9, 13), (4, 9, 13), (2, 4, 9, 13), (13,)])
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_masks_broadcast(rng, mshape, kind):
    if kind == "bool":
        m = rng.random(mshape) > 0.3
        m[..., 0] = True
    else:
        m = rng.standard_normal(mshape).astype(np.float32)
    _check(rng, (2, 4, 9, 8), (2, 4, 13, 8), (2, 4, 13, 8), attn_mask=m)


def test_float_mask_with_minus_inf_and_causal(rng):
    m = np.where(rng.random((9, 13)) > 0.4, 0.0, -np.inf).astype(np.float32)
    m[:, 0] = 0
    _check(rng, (1, 2, 9, 8), (1, 2, 13, 8), (1, 2, 13, 8), attn_mask=m, is_causal=True)


def test_fully_masked_rows_are_zero(rng):
    q, k, v = randn(rng, 1, 1, 4, 8), randn(rng, 1, 1, 5, 8), randn(rng, 1, 1, 5, 8)
    m = np.ones((4, 5), dtype=bool)
    m[2] = False
    out = attn.scaled_dot_product_attention(q, k, v, attn_mask=m)
    assert np.all(out[0, 0, 2] == 0) and np.all(np.isfinite(out))
    dq, dk, dv = attn.scaled_dot_product_attention_backward(np.ones_like(out), q, k, v, attn_mask=m)
    assert np.all(dq[0, 0, 2] == 0) and np.all(np.isfinite(dk)) and np.all(np.isfinite(dv))


def test_strided_views_without_copy(rng):
    # [B, L, H, E] storage read as [B, H, L, E]: the view goes to C as is
    qs, ks = randn(rng, 2, 9, 4, 8), randn(rng, 2, 13, 4, 8)
    q, k = qs.transpose(0, 2, 1, 3), ks.transpose(0, 2, 1, 3)
    v = randn(rng, 2, 4, 26, 8)[:, :, ::2]  # every other row
    assert _lib.as_f32(q) is q and _lib.as_f32(v) is v
    out = attn.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert rel(out, ref_sdpa(q, k, v, is_causal=True)) < TOL
    got = attn.scaled_dot_product_attention_backward(np.ones_like(out), q, k, v, is_causal=True)
    want = attn.scaled_dot_product_attention_backward(np.ones_like(out), *(np.ascontiguousarray(x) for x in (q, k, v)),
                                                      is_causal=True)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_float64_inputs_are_converted(rng):
    q = rng.standard_normal((1, 2, 5, 8))
    out = attn.scaled_dot_product_attention(q, q, q)
    assert out.dtype == np.float32 and rel(out, ref_sdpa(q, q, q)) < TOL


def test_lse_and_weights(rng):
    q, k, v = randn(rng, 2, 3, 6, 8), randn(rng, 2, 3, 7, 8), randn(rng, 2, 3, 7, 8)
    out, lse = attn.scaled_dot_product_attention(q, k, v, is_causal="bottom_right", return_lse=True)
    s = torch.from_numpy(q).double() @ torch.from_numpy(k).double().transpose(-2, -1) / np.sqrt(8)
    s = s.masked_fill(~torch.ones(6, 7, dtype=torch.bool).tril(1), float("-inf"))
    assert lse.shape == (2, 3, 6) and rel(lse, torch.logsumexp(s, -1)) < 1e-6
    out2, w, lse2 = attn.scaled_dot_product_attention(q, k, v, is_causal="bottom_right", need_weights=True,
                                                      return_lse=True)
    ro, rp = ref_sdpa(q, k, v, is_causal="bottom_right", weights=True)
    assert rel(w, rp) < TOL and rel(out2, ro) < TOL and rel(lse2, lse) < 1e-6
    # backward from the forward's out and lse equals the recomputing one
    go = randn(rng, *out.shape)
    a = attn.scaled_dot_product_attention_backward(go, q, k, v, is_causal="bottom_right", out=out, lse=lse)
    b = attn.scaled_dot_product_attention_backward(go, q, k, v, is_causal="bottom_right")
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_dropout(rng):
    q, k, v = randn(rng, 1, 2, 16, 8), randn(rng, 1, 2, 16, 8), randn(rng, 1, 2, 16, 8)
    kw = dict(dropout_p=0.25, dropout_seed=7)
    out, w = attn.scaled_dot_product_attention(q, k, v, need_weights=True, **kw)
    p = ref_sdpa(q, k, v, weights=True)[1].numpy()
    kept = w != 0
    assert 0.6 < kept.mean() < 0.9
    np.testing.assert_allclose(w[kept], p[kept] / 0.75, rtol=1e-5)
    assert rel(out, w @ v) < 1e-5
    flash = attn.scaled_dot_product_attention(q, k, v, **kw)  # the flash kernel draws the same mask
    np.testing.assert_array_equal(attn.scaled_dot_product_attention(q, k, v, **kw), flash)
    assert rel(flash, out) < 1e-5
    go = randn(rng, *out.shape)
    dq, dk, dv = attn.scaled_dot_product_attention_backward(go, q, k, v, **kw)
    assert rel(dv, np.swapaxes(w, -1, -2) @ go) < 1e-5
    assert not np.array_equal(attn.scaled_dot_product_attention(q, k, v, dropout_p=0.25, dropout_seed=8), out)


def test_threads_bitwise_and_gil(rng):
    q = randn(rng, 2, 4, 64, 32)
    old = attn.get_num_threads()
    try:
        attn.set_num_threads(1)
        assert attn.get_num_threads() == 1
        a = attn.scaled_dot_product_attention(q, q, q, is_causal=True)
        attn.set_num_threads(2)
        b = attn.scaled_dot_product_attention(q, q, q, is_causal=True)
    finally:
        attn.set_num_threads(old)
    np.testing.assert_array_equal(a, b)
    # concurrent calls from Python threads (the GIL is released in the kernels; the workspace is
    # per thread) give the same result
    res = [None] * 4

    def work(i):
        res[i] = attn.scaled_dot_product_attention(q, q, q, is_causal=True)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for r in res:
        np.testing.assert_array_equal(r, a)


@pytest.mark.parametrize("call, err, text", [
    (lambda q: attn.scaled_dot_product_attention(q, q[0], q), ValueError, "same rank"),
    (lambda q: attn.scaled_dot_product_attention(q[0, 0, 0], q[0, 0, 0], q[0, 0, 0]), ValueError, "rank 2, 3 or 4"),
    (lambda q: attn.scaled_dot_product_attention(q, q[..., :4], q), ValueError, "last dimension"),
    (lambda q: attn.scaled_dot_product_attention(q, q[:, :1, :3], q[:, :1]), ValueError, "every dimension but"),
    (lambda q: attn.scaled_dot_product_attention(q, q[:, :2], q[:, :2]), ValueError, "enable_gqa=True"),
    (lambda q: attn.scaled_dot_product_attention(q[:, :3], q[:, :2], q[:, :2], enable_gqa=True), ValueError, "multiple"),
    (lambda q: attn.scaled_dot_product_attention(q, q, q, attn_mask=np.ones((5, 4), bool)), ValueError, "broadcast"),
    (lambda q: attn.scaled_dot_product_attention(q, q, q, attn_mask=np.ones((6, 6), np.int32)), TypeError, "bool"),
    (lambda q: attn.scaled_dot_product_attention(q.astype(np.int32), q, q), TypeError, "floating-point"),
    (lambda q: attn.scaled_dot_product_attention(q, q, q, dropout_p=0.1), ValueError, "dropout_seed"),
    (lambda q: attn.scaled_dot_product_attention(q, q, q, dropout_p=1.0, dropout_seed=1), ValueError, "[0, 1)"),
    (lambda q: attn.scaled_dot_product_attention(q, q, q, is_causal="diagonal"), ValueError, "bottom_right"),
    (lambda q: attn.scaled_dot_product_attention(q, q, q, scale=0.0), ValueError, "nonzero"),
    (lambda q: attn.scaled_dot_product_attention(q, q, q, alibi_slopes=[1.0]), ValueError, "alibi_slopes"),
    (lambda q: attn.scaled_dot_product_attention(q, q, q, softcap=-1), ValueError, "softcap"),
    (lambda q: attn.scaled_dot_product_attention(q, q, q, window=-2), ValueError, "window"),
    (lambda q: attn.scaled_dot_product_attention(q[:, :, :0], q, q), ValueError, "empty"),
    (lambda q: attn.scaled_dot_product_attention_backward(q[..., :3], q, q, q), ValueError, "grad_out"),
    (lambda q: attn.scaled_dot_product_attention_backward(q, q, q, q, out=q), ValueError, "out and lse"),
])
def test_bad_arguments(call, err, text):
    q = np.zeros((2, 4, 6, 8), np.float32)
    with pytest.raises(err, match=None) as e:
        call(q)
    assert text in str(e.value)
