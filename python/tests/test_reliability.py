"""The reliability issue's Python rows, each a test that failed before its fix:
#1 one Model called from 8 threads at once (aborted: heap corruption) equals the single-threaded
results; #2 NUL bytes in paths and names are a ValueError and nothing is written; #14
set_num_threads beyond the library's bound is refused (the C API too); #15 seeds outside
[0, 2**64) are refused instead of wrapped; #16 integer masks are a TypeError naming the convention;
#17 load_state_dict(strict=False) reports the missing and unexpected names."""
import os
import threading

import numpy as np
import pytest
from conftest import randn, rel, torch

import attn
from attn import _lib

ENC = {"module": "transformer_encoder_layer", "d_model": 32, "nhead": 4, "dim_feedforward": 64, "dropout": 0.0,
       "batch_first": True}


def run_threads(n, fn):
    """fn(i) in n threads started together; the first exception is raised here."""
    errors, barrier = [], threading.Barrier(n)

    def body(i):
        try:
            barrier.wait()
            fn(i)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
    ts = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]


# ---- #1 ----

@pytest.mark.parametrize("threads", [2, 8])
def test_model_shared_by_threads(rng, threads):
    m = attn.Model(ENC)
    m.reset_parameters(3)
    # different lengths per thread: each forward re-sizes the model's workspace and staged inputs
    xs = [randn(rng, 2, 5 + 3 * i, 32) for i in range(threads)]
    want = [m(src=x) for x in xs]
    got = [[None] * 6 for _ in range(threads)]

    def work(i):
        for r in range(6):
            got[i][r] = m(src=xs[i])
    run_threads(threads, work)
    for i in range(threads):
        for r in range(6):
            np.testing.assert_array_equal(got[i][r], want[i])


def test_model_backward_and_capture_shared_by_threads(rng):
    m = attn.Model({"module": "multihead_attention", "embed_dim": 16, "num_heads": 2, "batch_first": True})
    m.reset_parameters(5)
    xs = [randn(rng, 1, 3 + i, 16) for i in range(8)]
    want = []
    for x in xs:
        m(query=x, keep_for_backward=True)
        want.append(m.backward(np.ones((1, x.shape[1], 16), np.float32))["query"])
    outs = [m(query=x) for x in xs]
    shared = attn.Capture("")  # one capture shared too: its records are replaced by each forward

    def work(i):
        for _ in range(4):
            cap = attn.Capture("")
            np.testing.assert_array_equal(m(query=xs[i], capture=cap), outs[i])
            assert cap[""].shape == (1, 2, xs[i].shape[1], xs[i].shape[1])
            m(query=xs[i], capture=shared)
            assert len(shared.records()) == 1
    run_threads(8, work)
    # the object still works and gives the single-threaded gradients
    for x, w in zip(xs, want):
        m(query=x, keep_for_backward=True)
        np.testing.assert_array_equal(m.backward(np.ones((1, x.shape[1], 16), np.float32))["query"], w)


# ---- #2 ----

def test_nul_in_paths_and_names(tmp_path, rng):
    x = randn(rng, 2, 3)
    before = set(os.listdir(tmp_path))
    with pytest.raises(ValueError, match="null byte"):
        attn.save_safetensors(str(tmp_path / "notes.txt\x00.safetensors"), {"x": x})
    with pytest.raises(ValueError, match="null byte"):
        attn.save_safetensors(os.fsencode(tmp_path / "notes.txt\x00.safetensors"), {"x": x})
    with pytest.raises(ValueError, match="null byte"):
        attn.save_safetensors(tmp_path / "ok.safetensors", {"x": x, "query\x00zz": x})
    m = attn.Model(ENC)
    with pytest.raises(ValueError, match="null byte"):
        m.save(str(tmp_path / "n.txt\x00.st"))
    assert set(os.listdir(tmp_path)) == before  # nothing written, not even 'notes.txt'
    m.save(tmp_path / "w.safetensors")
    with pytest.raises(ValueError, match="null byte"):
        m.load(str(tmp_path / "w.safetensors\x00.bak"))
    with pytest.raises(ValueError, match="null byte"):
        attn.Model.from_files(str(tmp_path / "c.json\x00"))
    with pytest.raises(ValueError, match="null byte"):
        m(src=randn(rng, 1, 3, 32), **{"src_mask\x00zz": np.zeros((3, 3), bool)})
    with pytest.raises(ValueError, match="null byte"):
        m.set_option("is_causal\x00zz", True)
    with pytest.raises(ValueError, match="null byte"):
        attn.Capture("self_attn\x00zz")
    with pytest.raises(ValueError, match="null byte"):
        attn.from_pretrained(str(tmp_path / "model\x00dir"))
    mha = attn.Model({"module": "multihead_attention", "embed_dim": 8, "num_heads": 2, "batch_first": True})
    with pytest.raises(ValueError, match="null byte"):
        mha(**{"query\x00zz": randn(rng, 1, 3, 8)})
    assert mha(query=randn(rng, 1, 3, 8)).shape == (1, 3, 8)  # nothing was left staged


# ---- #14 ----

def test_set_num_threads_bound():
    before = attn.get_num_threads()
    for n in (10**6, 2**40, _lib.MAX_THREADS + 1):
        with pytest.raises(ValueError, match=r"ATTN_MAX_THREADS \(4096\)"):
            attn.set_num_threads(n)
        assert attn.get_num_threads() == before
    with pytest.raises(TypeError):
        attn.set_num_threads(2.5)
    # the C API refuses too, naming the bound, and keeps the count
    st = _lib.lib.attn_set_num_threads(10**6)
    assert st != 0 and "ATTN_MAX_THREADS (4096)" in _lib.lib.attn_last_error().decode()
    assert attn.get_num_threads() == before
    try:
        attn.set_num_threads(_lib.MAX_THREADS)
        assert attn.get_num_threads() in (_lib.MAX_THREADS, 1)  # 1: a library built without OpenMP
        attn.set_num_threads(2)
        x = np.ones((1, 4, 8), np.float32)
        assert attn.scaled_dot_product_attention(x, x, x).shape == (1, 4, 8)
        attn.set_num_threads(-(2**40))  # <= 0: the default
        assert attn.get_num_threads() == before
    finally:
        attn.set_num_threads(0)


# ---- #15 ----

def test_seeds_outside_uint64_refused(rng):
    q = randn(rng, 1, 4, 8)
    for bad in (2**70, 2**64, -1):
        with pytest.raises(ValueError, match="dropout_seed"):
            attn.scaled_dot_product_attention(q, q, q, dropout_p=0.5, dropout_seed=bad)
        with pytest.raises(ValueError, match="dropout_offset"):
            attn.scaled_dot_product_attention(q, q, q, dropout_p=0.5, dropout_seed=1, dropout_offset=bad)
        with pytest.raises(ValueError, match="dropout_seed"):
            attn.scaled_dot_product_attention_backward(q, q, q, q, dropout_p=0.5, dropout_seed=bad)
    m = attn.Model(ENC | {"dropout": 0.1})
    for bad in (2**70, -1):
        with pytest.raises(ValueError, match="seed"):
            m(src=randn(rng, 1, 3, 32), training=True, seed=bad)
        with pytest.raises(ValueError, match="offset"):
            m(src=randn(rng, 1, 3, 32), training=True, offset=bad)
        with pytest.raises(ValueError, match="seed"):
            m.reset_parameters(bad)
    # the largest seed is a seed of its own, not 2**64 - 1 reached by wrapping -1 by accident
    top = attn.scaled_dot_product_attention(q, q, q, dropout_p=0.5, dropout_seed=2**64 - 1)
    again = attn.scaled_dot_product_attention(q, q, q, dropout_p=0.5, dropout_seed=2**64 - 1)
    np.testing.assert_array_equal(top, again)


# ---- #16 ----

def test_integer_masks_refused(rng):
    m = attn.Model({"module": "multihead_attention", "embed_dim": 16, "num_heads": 2, "batch_first": True})
    m.reset_parameters(1)
    q = randn(rng, 2, 5, 16)
    hf_mask = np.ones((2, 5), np.uint8)  # Hugging Face: 1 = keep
    hf_mask[1, 3:] = 0
    for dt in (np.uint8, np.int64, np.int32):
        with pytest.raises(TypeError, match=r"bool \(True = NOT allowed.*attention_mask == 0"):
            m(query=q, key_padding_mask=hf_mask.astype(dt))
    # the conversion the message names gives PyTorch's meaning
    got = m(query=q, key_padding_mask=hf_mask == 0)
    ref = torch.nn.MultiheadAttention(16, 2, batch_first=True).double()
    ref.load_state_dict({k: torch.from_numpy(v.astype(np.float64)) for k, v in m.parameters().items()})
    tq = torch.from_numpy(q).double()
    want, _ = ref(tq, tq, tq, key_padding_mask=torch.from_numpy(hf_mask == 0))
    assert rel(got, want) < 2e-5
    with pytest.raises(TypeError, match=r"attn_mask must be bool \(True = may attend"):
        attn.scaled_dot_product_attention(q, q, q, attn_mask=np.ones((5, 5), np.uint8))
    with pytest.raises(TypeError, match="attn_mask must be bool"):
        attn.scaled_dot_product_attention(q, q, q, attn_mask=np.ones((5, 5), np.int64))
    import attn.torch as at
    tq = torch.from_numpy(q)
    with pytest.raises(TypeError, match="attn_mask must be bool"):
        at.scaled_dot_product_attention(tq, tq, tq, attn_mask=torch.ones(5, 5, dtype=torch.uint8))


# ---- #17 ----

def test_load_state_dict_reports_names(rng):
    torch.manual_seed(4)
    ref = torch.nn.MultiheadAttention(16, 2, batch_first=True)
    m = attn.Model({"module": "multihead_attention", "embed_dim": 16, "num_heads": 2, "batch_first": True})
    sd = ref.state_dict()
    partial = {k: v for k, v in sd.items() if k != "out_proj.bias"}
    partial["encoder.extra"] = torch.zeros(3)
    before = m.parameters()["out_proj.bias"].copy()
    res = m.load_state_dict(partial, strict=False)
    assert res.missing_keys == ["out_proj.bias"] and res.unexpected_keys == ["encoder.extra"]
    missing, unexpected = res  # a NamedTuple, as PyTorch's
    assert missing == ["out_proj.bias"] and unexpected == ["encoder.extra"]
    p = m.parameters()
    np.testing.assert_array_equal(p["in_proj_weight"], sd["in_proj_weight"].numpy())
    np.testing.assert_array_equal(p["out_proj.bias"], before)
    # torch's own answer to the same call
    tres = torch.nn.MultiheadAttention(16, 2, batch_first=True).load_state_dict(partial, strict=False)
    assert list(tres.missing_keys) == res.missing_keys and list(tres.unexpected_keys) == res.unexpected_keys
    with pytest.raises(KeyError, match=r"missing \['out_proj.bias'\], unexpected \['encoder.extra'\]"):
        m.load_state_dict(partial)
    assert m.load_state_dict(sd) == ([], [])
