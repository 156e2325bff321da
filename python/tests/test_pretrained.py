"""attn.from_pretrained without transformers: a BERT folder written here (config.json, random
safetensors weights, a vocab.txt), its hidden states and mean-pooled embeddings against a float64
torch reference of BertModel, the vocab.txt tokenizer's ids, 8 threads sharing the object, and the
errors (a missing folder named, bad ids, closed objects). tests/hf/python_parity.py checks the same
API against transformers and sentence-transformers themselves."""
import json
import math
import threading

import numpy as np
import pytest
from conftest import rel, torch

import attn

H, NH, I, L, V, P, T = 16, 2, 32, 2, 12, 16, 2
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "##s", "attention", "is", "all", "need"]


def bert_weights(rng):
    w = {"embeddings.word_embeddings.weight": (V, H), "embeddings.position_embeddings.weight": (P, H),
         "embeddings.token_type_embeddings.weight": (T, H), "embeddings.LayerNorm.weight": (H,),
         "embeddings.LayerNorm.bias": (H,)}
    for n in range(L):
        pre = f"encoder.layer.{n}."
        for name in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
            w[pre + name + ".weight"], w[pre + name + ".bias"] = (H, H), (H,)
        w[pre + "intermediate.dense.weight"], w[pre + "intermediate.dense.bias"] = (I, H), (I,)
        w[pre + "output.dense.weight"], w[pre + "output.dense.bias"] = (H, I), (H,)
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            w[pre + ln + ".weight"], w[pre + ln + ".bias"] = (H,), (H,)
    out = {}
    for name, shape in w.items():
        x = 0.4 * rng.standard_normal(shape)
        out[name] = (1 + x if name.endswith("LayerNorm.weight") else x).astype(np.float32)
    return out


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("bert")
    cfg = {"model_type": "bert", "vocab_size": V, "hidden_size": H, "num_hidden_layers": L, "num_attention_heads": NH,
           "intermediate_size": I, "max_position_embeddings": P, "type_vocab_size": T, "hidden_act": "gelu",
           "layer_norm_eps": 1e-12}
    (d / "config.json").write_text(json.dumps(cfg))
    w = bert_weights(np.random.default_rng(7))
    attn.save_safetensors(d / "model.safetensors", w)
    (d / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return d, w


def ref_bert(w, ids, lengths, types=None):
    """BertModel's last_hidden_state in float64 torch (attention_mask = position < length)."""
    t = {k: torch.from_numpy(v).double() for k, v in w.items()}
    ids = torch.as_tensor(np.asarray(ids, dtype=np.int64))
    B, n = ids.shape
    types = torch.zeros_like(ids) if types is None else torch.as_tensor(np.asarray(types, dtype=np.int64))
    keep = torch.arange(n)[None, :] < torch.as_tensor(lengths)[:, None]

    def ln(x, p):
        return torch.nn.functional.layer_norm(x, (H,), t[p + ".weight"], t[p + ".bias"], 1e-12)

    def lin(x, p):
        return x @ t[p + ".weight"].T + t[p + ".bias"]
    x = ln(t["embeddings.word_embeddings.weight"][ids] + t["embeddings.position_embeddings.weight"][:n][None]
           + t["embeddings.token_type_embeddings.weight"][types], "embeddings.LayerNorm")
    d = H // NH
    for n_ in range(L):
        pre = f"encoder.layer.{n_}."
        q, k, v = (lin(x, pre + "attention.self." + s).view(B, n, NH, d).transpose(1, 2)
                   for s in ("query", "key", "value"))
        s = q @ k.transpose(-1, -2) / math.sqrt(d)
        s = s.masked_fill(~keep[:, None, None, :], float("-inf"))
        a = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, n, H)
        x = ln(x + lin(a, pre + "attention.output.dense"), pre + "attention.output.LayerNorm")
        hdn = lin(x, pre + "intermediate.dense")
        hdn = 0.5 * hdn * (1 + torch.erf(hdn / math.sqrt(2)))
        x = ln(x + lin(hdn, pre + "output.dense"), pre + "output.LayerNorm")
    return x.numpy(), keep.numpy()


def test_hidden_states_and_embed_vs_torch(folder):
    d, w = folder
    with attn.from_pretrained(d) as m:
        assert (m.family, m.hidden_size, m.embedding_size, m.vocab_size) == ("bert", H, H, V)
        assert m.pooling == "mean" and not m.normalize and m.max_length == P
        rows = [[2, 5, 6, 7, 3], [2, 8, 9, 10, 11, 5, 6, 3, 2, 5, 3], [2, 3]]
        lens = [len(r) for r in rows]
        got = m.hidden_states(rows)
        ids = np.zeros((3, 11), np.int64)
        for b, r in enumerate(rows):
            ids[b, :len(r)] = r
        want, keep = ref_bert(w, ids, lens)
        assert got.shape == (3, 11, H) and rel(got[keep], want[keep]) < 1e-5
        assert not got[~keep].any()
        # a 2-D array with lengths: what is past a row's length is not read
        junk = ids.copy()
        junk[~keep] = 10**9
        np.testing.assert_array_equal(m.hidden_states(junk, lengths=lens), got)
        types = (np.arange(11)[None, :] >= 3).astype(np.int64).repeat(3, 0)
        want_t, _ = ref_bert(w, ids, lens, types)
        assert rel(m.hidden_states(ids, lens, token_type_ids=types)[keep], want_t[keep]) < 1e-5
        # no modules.json: embed mean-pools the real tokens, without normalisation
        pooled = np.stack([want[b, :lens[b]].mean(0) for b in range(3)])
        assert rel(m.embed(rows), pooled) < 1e-5
        texts = ["Hello worlds!", "attention is all you need", ""]
        enc = m.encode(texts, batch_size=2)
        assert enc.dtype == np.float32 and enc.shape == (3, H)
        np.testing.assert_allclose(enc, m.embed(m.tokenizer(texts)), rtol=1e-6, atol=1e-7)
        assert m.encode(texts[0]).shape == (H,)


def test_vocab_txt_tokenizer(folder):
    d, _ = folder
    with attn.from_pretrained(d) as m:
        tok = m.tokenizer
        # BertTokenizerFast's defaults for a vocab.txt: lowercase, [CLS] A [SEP], punctuation split
        assert tok("Hello worlds!") == [2, 5, 6, 7, 1, 3]
        assert tok(["hello", "ALL you"]) == [[2, 5, 3], [2, 10, 1, 3]]
        assert tok("hello world", add_special_tokens=False) == [5, 6]
        assert tok("hello world hello world", max_length=4) == [2, 5, 6, 3]
        assert tok.decode([2, 5, 6, 7, 3]) == "[CLS] hello worlds [SEP]"
        assert tok.decode([2, 5, 6, 7, 3], skip_special_tokens=True) == "hello worlds"
        assert tok.vocab_size == V and tok.pad_token_id == 0 and tok.token_to_id("##s") == 7
        assert tok.id_to_token(8) == "attention" and tok.id_to_token(99) is None and tok.token_to_id("zz") is None
        long_text = " ".join(["hello"] * 5000)  # more ids than the first buffer guessed
        assert tok(long_text, add_special_tokens=False) == [5] * 5000
    with pytest.raises(ValueError, match="null byte"):
        attn.Tokenizer(str(d) + "\x00x")


def test_shared_by_8_threads(folder):
    d, _ = folder
    m = attn.from_pretrained(d)
    rows = [[2] + [5 + (i + j) % 7 for j in range(1 + i)] + [3] for i in range(8)]
    want = [m.hidden_states([r]) for r in rows]
    errors, barrier = [], threading.Barrier(8)

    def body(i):
        try:
            barrier.wait()
            for _ in range(20):
                np.testing.assert_array_equal(m.hidden_states([rows[i]]), want[i])
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
    ts = [threading.Thread(target=body, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[0]
    m.close()


def test_errors(folder, tmp_path):
    d, _ = folder
    with pytest.raises(attn.AttnError, match="no_such_dir"):
        attn.from_pretrained(tmp_path / "no_such_dir")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text('{"model_type": "bert",}')
    with pytest.raises(attn.AttnError, match="config.json"):
        attn.from_pretrained(tmp_path / "bad")
    m = attn.from_pretrained(d, tokenizer=False)
    assert m.tokenizer is None
    with pytest.raises(ValueError, match="no tokenizer"):
        m.encode(["hello"])
    with pytest.raises(attn.AttnError, match=r"ids\[0\]\[1\] = 12"):
        m.hidden_states([[2, 12, 3]])
    with pytest.raises(ValueError, match="row 1 has length 0"):
        m.hidden_states([[2, 3], []])
    with pytest.raises(ValueError, match="lengths"):
        m.hidden_states(np.zeros((2, 3), np.int64), lengths=[3])
    with pytest.raises(ValueError, match="row 0 has length 4"):
        m.hidden_states(np.zeros((1, 3), np.int64), lengths=[4])
    with pytest.raises(TypeError, match="ids must be integer"):
        m.hidden_states(np.zeros((1, 3), np.float32))
    with pytest.raises(attn.AttnError, match="bert"):
        m.logits([[2, 3]])
    with pytest.raises(attn.AttnError, match="bert"):
        m.generate([2, 3], max_new_tokens=2)
    with pytest.raises(ValueError, match="seed"):
        m.generate([2, 3], seed=-1)
    m.close()
    m.close()  # twice is fine
    with pytest.raises(ValueError, match="closed"):
        m.hidden_states([[2, 3]])
    with pytest.raises(ValueError, match="closed"):
        m.family
