"""attn.Model (attn/model.h) against torch.nn modules in float64: nn.MultiheadAttention (masks,
weights, input and parameter gradients), nn.TransformerEncoderLayer with the attention capture,
nn.Transformer; weights through safetensors files; errors carrying the C message."""
import json

import numpy as np
import pytest
from conftest import randn, rel, torch

import attn

nn = torch.nn


def _state(module):
    return {k: v.detach().float().numpy() for k, v in module.state_dict().items()}


def test_multihead_attention(rng):
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(16, 4, batch_first=True).double()
    m = attn.Model({"module": "multihead_attention", "embed_dim": 16, "num_heads": 4, "batch_first": True,
                    "need_weights": True, "average_attn_weights": False})
    assert m.name == "multihead_attention"
    m.load_state_dict(ref.state_dict())
    q, k = randn(rng, 2, 5, 16), randn(rng, 2, 7, 16)
    kpm = np.zeros((2, 7), bool)
    kpm[1, 5:] = True  # PyTorch's convention: True = ignore
    am = rng.random((5, 7)) > 0.8
    am[:, 0] = False
    out = m(query=q, key=k, value=k, key_padding_mask=kpm, attn_mask=am, keep_for_backward=True)
    tq, tk = (torch.from_numpy(x).double().requires_grad_() for x in (q, k))
    tout, tw = ref(tq, tk, tk, key_padding_mask=torch.from_numpy(kpm), attn_mask=torch.from_numpy(am),
                   need_weights=True, average_attn_weights=False)
    assert out.shape == (2, 5, 16) and rel(out, tout) < 2e-5
    assert rel(m.weights, tw) < 2e-5
    go = randn(rng, 2, 5, 16)
    m.zero_grad()
    grads = m.backward(go)
    tout.backward(torch.from_numpy(go).double())
    assert rel(grads["query"], tq.grad) < 1e-4
    assert rel(grads["key"] + grads["value"], tk.grad) < 1e-4  # key and value were the same tensor
    pg = m.gradients()
    for name, p in ref.named_parameters():
        assert rel(pg[name], p.grad) < 1e-4, name
    # parameters() are views of the model's memory
    params = m.parameters()
    params["out_proj.bias"][:] = 0
    assert np.all(m.parameters()["out_proj.bias"] == 0)


def test_encoder_layer_capture_and_files(tmp_path, rng):
    torch.manual_seed(1)
    ref = nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0, batch_first=True).double().eval()
    cfg = {"module": "transformer_encoder_layer", "d_model": 16, "nhead": 4, "dim_feedforward": 32,
           "dropout": 0.0, "batch_first": True}
    (tmp_path / "model.json").write_text(json.dumps(cfg))
    attn.save_safetensors(tmp_path / "w.safetensors", ref.state_dict())
    m = attn.Model.from_files(tmp_path / "model.json", tmp_path / "w.safetensors")
    x = randn(rng, 2, 6, 16)
    cap = attn.Capture().add("self_attn", head0=1, heads=2)
    m.set_option("is_causal", True)
    out = m.forward(src=x, capture=cap)
    mask = nn.Transformer.generate_square_subsequent_mask(6).double()
    tx = torch.from_numpy(x).double()
    assert rel(out, ref(tx, src_mask=mask)) < 2e-5
    _, tw = ref.self_attn(tx, tx, tx, attn_mask=mask, need_weights=True, average_attn_weights=False)
    w = cap["self_attn"]
    assert w.shape == (2, 2, 6, 6) and rel(w, tw[:, 1:3]) < 2e-5
    assert list(cap.records()) == ["self_attn"]
    with pytest.raises(KeyError, match="self_attn"):
        cap["multihead_attn"]
    # save -> load round trip
    m.save(tmp_path / "saved.safetensors")
    m2 = attn.Model(json.dumps(cfg))
    m2.load(tmp_path / "saved.safetensors")
    m2.set_option("is_causal", True)
    np.testing.assert_array_equal(m2(src=x), out)


def test_transformer_capture(rng):
    torch.manual_seed(2)
    ref = nn.Transformer(d_model=16, nhead=2, num_encoder_layers=2, num_decoder_layers=1, dim_feedforward=24,
                         dropout=0.0, batch_first=True).double().eval()
    m = attn.Model({"module": "transformer", "d_model": 16, "nhead": 2, "num_encoder_layers": 2,
                    "num_decoder_layers": 1, "dim_feedforward": 24, "dropout": 0.0, "batch_first": True})
    m.load_state_dict(ref.state_dict())
    src, tgt = randn(rng, 2, 7, 16), randn(rng, 2, 5, 16)
    cap = attn.Capture("encoder.layers.*.self_attn", "decoder.layers.0.multihead_attn")
    out = m(src=src, tgt=tgt, capture=cap)
    assert rel(out, ref(torch.from_numpy(src).double(), torch.from_numpy(tgt).double())) < 2e-5
    recs = cap.records()
    assert list(recs) == ["encoder.layers.0.self_attn", "encoder.layers.1.self_attn",
                          "decoder.layers.0.multihead_attn"]
    assert recs["decoder.layers.0.multihead_attn"].shape == (2, 2, 5, 7)
    np.testing.assert_allclose(recs["encoder.layers.1.self_attn"].sum(-1), 1, rtol=1e-5)


def test_errors_carry_the_c_message(rng):
    assert "transformer" in attn.known_modules()
    with pytest.raises(attn.AttnError, match="unknown module 'lstm'"):
        attn.Model({"module": "lstm"})
    with pytest.raises(attn.AttnError, match="colour"):
        attn.Model({"module": "multihead_attention", "embed_dim": 8, "num_heads": 2, "colour": 1})
    with pytest.raises(attn.AttnError, match="configuration"):
        attn.Model("{not json")
    m = attn.Model({"module": "multihead_attention", "embed_dim": 8, "num_heads": 2, "batch_first": True})
    with pytest.raises(attn.AttnError, match="querry"):
        m(query=randn(rng, 1, 3, 8), querry=randn(rng, 1, 3, 8))
    with pytest.raises(attn.AttnError, match=r"input 'query' has shape \[1, 3, 9\]"):
        m(query=randn(rng, 1, 3, 9))
    with pytest.raises(attn.AttnError, match="no option 'tgt_is_causal'"):
        m.set_option("tgt_is_causal", True)
    m(query=randn(rng, 1, 3, 8))
    with pytest.raises(attn.AttnError, match="no forward kept"):
        m.backward(np.zeros((1, 3, 8), np.float32))
    with pytest.raises(ValueError, match="grad_output"):
        m.backward(np.zeros((1, 3, 7), np.float32))
    with pytest.raises(attn.AttnError) as e:
        m.load("/nonexistent/w.safetensors")
    assert e.value.status and e.value.message
    with pytest.raises(KeyError, match="missing"):
        m.load_state_dict({})
    with pytest.raises(TypeError, match="dtype"):
        m(query=np.zeros((1, 3, 8), np.int64))


def test_failed_calls_leave_nothing_staged(rng):
    m = attn.Model({"module": "multihead_attention", "embed_dim": 8, "num_heads": 2, "batch_first": True})
    with pytest.raises(ValueError, match="rank 9"):
        m(query=randn(rng, 1, 3, 8), attn_mask=np.zeros((1,) * 9, bool))
    with pytest.raises(attn.AttnError, match="attn_mask"):
        m(query=randn(rng, 1, 3, 8), attn_mask=np.zeros((2, 2), bool))
    assert m(query=randn(rng, 1, 3, 8)).shape == (1, 3, 8)
