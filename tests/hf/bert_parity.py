#!/usr/bin/env python3
"""attn_pretrained against transformers / sentence-transformers on BERT folders built here.

    python bert_parity.py LIBATTN_SO OUTDIR

Builds small BertModel folders with transformers (random weights, initializer_range 0.3), saved
as safetensors (f32; bf16 and f16; sharded) and sentence-transformers folders around them (mean
pooling + Normalize, CLS pooling, max pooling), runs libattn's attn_pretrained_hidden_states and
attn_pretrained_embed through ctypes on random ids with mixed lengths, and compares with PyTorch in
float64: relative error ||out - ref|| / ||ref|| <= 1e-5 on the real tokens' hidden states and on
the embeddings (also against SentenceTransformer(dir).encode). Hostile folders must fail with a
message naming the key or file. The last line is "bert parity: N passed, M failed"; the exit
status is 1 on a failure, 0 otherwise (a notice and 0 when torch, transformers or
sentence_transformers cannot be imported)."""
import ctypes
import json
import os

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
import shutil
import sys

TOL = 1e-5


def main():
    if len(sys.argv) != 3:
        print("usage: bert_parity.py LIBATTN_SO OUTDIR", file=sys.stderr)
        return 2
    try:
        import numpy as np
        import torch
        import transformers
        import sentence_transformers
    except Exception as e:  # noqa: BLE001 - any import failure means "skip"
        print(f"bert parity: SKIP (cannot import torch / transformers / sentence_transformers: {e})")
        return 0
    t = Tester(sys.argv[1], sys.argv[2], np, torch, transformers, sentence_transformers)
    t.run()
    print(f"bert parity: {t.passed} passed, {t.failed} failed")
    return 1 if t.failed else 0


class Tester:
    def __init__(self, lib, out, np, torch, transformers, st):
        self.np, self.torch, self.tf, self.st = np, torch, transformers, st
        self.out = out
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        self.passed = self.failed = 0
        L = ctypes.CDLL(lib)
        P, I64 = ctypes.c_void_p, ctypes.c_int64
        L.attn_pretrained_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(P)]
        L.attn_pretrained_open.restype = ctypes.c_int
        L.attn_pretrained_free.argtypes = [P]
        L.attn_pretrained_free.restype = None
        L.attn_last_error.argtypes = []
        L.attn_last_error.restype = ctypes.c_char_p
        L.attn_pretrained_family.argtypes = [P]
        L.attn_pretrained_family.restype = ctypes.c_char_p
        for f in ("hidden_size", "embedding_size", "max_length", "vocab_size"):
            fn = getattr(L, "attn_pretrained_" + f)
            fn.argtypes = [P]
            fn.restype = I64
        L.attn_pretrained_hidden_states.argtypes = [P, P, P, P, I64, I64, P]
        L.attn_pretrained_hidden_states.restype = ctypes.c_int
        L.attn_pretrained_embed.argtypes = [P, P, P, I64, I64, P]
        L.attn_pretrained_embed.restype = ctypes.c_int
        self.L = L

    def check(self, ok, what):
        print(("ok   " if ok else "FAIL ") + what, flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed += 1

    # ---- the library ----
    def open(self, d):
        h = ctypes.c_void_p()
        s = self.L.attn_pretrained_open(d.encode(), ctypes.byref(h))
        return s, h, self.L.attn_last_error().decode(errors="replace")

    def c_hidden(self, h, ids, types, lengths):
        np = self.np
        B, n = ids.shape
        H = self.L.attn_pretrained_hidden_size(h)
        out = np.zeros((B, n, H), np.float32)
        tp = types.ctypes.data if types is not None else None
        s = self.L.attn_pretrained_hidden_states(h, ids.ctypes.data, tp, lengths.ctypes.data, B, n, out.ctypes.data)
        return s, out

    def c_embed(self, h, ids, lengths):
        np = self.np
        B, n = ids.shape
        out = np.zeros((B, self.L.attn_pretrained_embedding_size(h)), np.float32)
        s = self.L.attn_pretrained_embed(h, ids.ctypes.data, lengths.ctypes.data, B, n, out.ctypes.data)
        return s, out

    # ---- the models ----
    def config(self, **kw):
        c = dict(vocab_size=120, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                 max_position_embeddings=64, hidden_act="gelu", initializer_range=0.3, type_vocab_size=1,
                 hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        c.update(kw)
        return self.tf.BertConfig(**c)

    def model(self, cfg, seed):
        self.torch.manual_seed(seed)
        m = self.tf.BertModel(cfg, add_pooling_layer=True).eval()
        with self.torch.no_grad():  # LayerNorms away from (1, 0), so that they are tested too
            for name, p in m.named_parameters():
                if "LayerNorm" in name:
                    p.add_(0.3 * self.torch.randn_like(p))
        return m

    def inputs(self, seed, vocab, types=1, B=5, n=17):
        np = self.np
        rng = np.random.default_rng(seed)
        lengths = np.array([n, 1, 9, n - 3, 4][:B], np.int64)
        ids = rng.integers(0, vocab, (B, n)).astype(np.int32)
        tt = rng.integers(0, types, (B, n)).astype(np.int32)
        for b in range(B):
            ids[b, lengths[b]:] = 0  # padding (not read by attn)
        return ids, tt, lengths

    def rel(self, a, b):
        np = self.np
        return float(np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(b))

    def ref_hidden(self, m, ids, tt, lengths):
        torch, np = self.torch, self.np
        B, n = ids.shape
        mask = (np.arange(n)[None, :] < lengths[:, None]).astype(np.int64)
        md = m.double()
        with torch.no_grad():
            o = md(input_ids=torch.tensor(ids, dtype=torch.long), token_type_ids=torch.tensor(tt, dtype=torch.long),
                   attention_mask=torch.tensor(mask)).last_hidden_state.numpy()
        m.float()
        return o

    def compare_hidden(self, name, d, m, ids, tt, lengths, pass_types=True):
        s, h, err = self.open(d)
        if s != 0:
            self.check(False, f"{name}: open failed: {err}")
            return
        try:
            ref = self.ref_hidden(m, ids, tt, lengths)
            s, out = self.c_hidden(h, ids, tt if pass_types else None, lengths)
            if s != 0:
                self.check(False, f"{name}: hidden_states failed: {self.L.attn_last_error().decode()}")
                return
            real = [(b, t) for b in range(ids.shape[0]) for t in range(lengths[b])]
            bi = [b for b, _ in real]
            ti = [t for _, t in real]
            e = self.rel(out[bi, ti], ref[bi, ti])
            pad_zero = all(not out[b, lengths[b]:].any() for b in range(ids.shape[0]))
            self.check(e <= TOL and pad_zero, f"{name}: last hidden state, rel err {e:.2e}, padding zero {pad_zero}")
        finally:
            self.L.attn_pretrained_free(h)

    # ---- (a), (b): BertModel folders ----
    def plain_cases(self):
        torch = self.torch
        cfg = self.config()
        m = self.model(cfg, 1)
        d = os.path.join(self.out, "bert_f32")
        m.save_pretrained(d, safe_serialization=True)
        vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(115)]
        with open(os.path.join(d, "vocab.txt"), "w") as f:
            f.write("\n".join(vocab) + "\n")
        self.tf.BertTokenizerFast(os.path.join(d, "vocab.txt")).save_pretrained(d)
        ids, tt, lengths = self.inputs(11, 120)
        self.compare_hidden("bert f32", d, m, ids, tt, lengths, pass_types=False)
        s, h, err = self.open(d)
        if s == 0:
            fam = self.L.attn_pretrained_family(h).decode()
            sizes = (self.L.attn_pretrained_hidden_size(h), self.L.attn_pretrained_embedding_size(h),
                     self.L.attn_pretrained_max_length(h), self.L.attn_pretrained_vocab_size(h))
            self.check(fam == "bert" and sizes == (64, 64, 64, 120), f"bert f32: family {fam}, sizes {sizes}")
            ref = self.ref_hidden(m, ids, tt * 0, lengths)
            mean = self.np.stack([ref[b, :lengths[b]].mean(0) for b in range(5)])
            s2, emb = self.c_embed(h, ids, lengths)
            e = self.rel(emb, mean) if s2 == 0 else float("inf")
            self.check(e <= TOL, f"bert f32: embed without sentence-transformers files = mean pooling, rel err {e:.2e}")
            bad = ids.copy()
            bad[2, 5] = 120
            s2, _ = self.c_hidden(h, bad, None, lengths)
            msg = self.L.attn_last_error().decode()
            self.check(s2 != 0 and "[2][5]" in msg, f"bert f32: id out of range refused: {msg}")
            long_ids = self.np.zeros((1, 65), self.np.int32)
            s2, _ = self.c_hidden(h, long_ids, None, self.np.array([65], self.np.int64))
            msg = self.L.attn_last_error().decode()
            self.check(s2 != 0 and "max_position_embeddings" in msg, f"bert f32: length 65 refused: {msg}")
            self.L.attn_pretrained_free(h)
        else:
            self.check(False, f"bert f32: open failed: {err}")

        cfg2 = self.config(hidden_act="gelu_new", type_vocab_size=2)
        m2 = self.model(cfg2, 2)
        ids, tt, lengths = self.inputs(12, 120, types=2)
        for dt, tdt in (("f16", torch.float16), ("bf16", torch.bfloat16)):
            d = os.path.join(self.out, "bert_gelu_new_" + dt)
            m2.to(tdt).save_pretrained(d, safe_serialization=True)
            m2.float()  # the reference: the same rounded weights, in float64
            with open(os.path.join(d, "model.safetensors"), "rb") as f:
                header = f.read(8 + int.from_bytes(f.read(8), "little"))
            self.check(dt.upper().encode() in header and b"F32" not in header, f"{dt} folder: tensors stored as {dt}")
            self.compare_hidden(f"bert gelu_new {dt}", d, m2, ids, tt, lengths)
        d = os.path.join(self.out, "bert_gelu_new_sharded")
        m2.save_pretrained(d, safe_serialization=True, max_shard_size="50KB")
        shards = [f for f in os.listdir(d) if f.endswith(".safetensors")]
        self.check(len(shards) > 1 and os.path.exists(os.path.join(d, "model.safetensors.index.json")),
                   f"sharded folder: {len(shards)} shards")
        self.compare_hidden("bert gelu_new sharded", d, m2, ids, tt, lengths)
        return m, os.path.join(self.out, "bert_f32")

    # ---- (c): sentence-transformers folders ----
    def texts(self, plain):
        """Random texts over the folder's vocabulary, tokenized by its tokenizer (mixed lengths)."""
        np = self.np
        rng = np.random.default_rng(5)
        texts = [" ".join(f"w{i}" for i in rng.integers(0, 115, k)) for k in (3, 12, 1, 25, 7)]
        tok = self.tf.AutoTokenizer.from_pretrained(plain)
        enc = tok(texts, padding=True, truncation=True, max_length=48, return_tensors="np")
        return texts, enc["input_ids"].astype(np.int32), enc["attention_mask"].sum(1).astype(np.int64)

    def st_reference(self, m, ids, lengths, mode, norm):
        np = self.np
        ref_h = self.ref_hidden(m, ids, ids * 0, lengths)
        rows = []
        for b in range(len(lengths)):
            x = ref_h[b, :lengths[b]]
            v = x.mean(0) if mode == "mean" else x[0] if mode == "cls" else x.max(0)
            rows.append(v / max(np.linalg.norm(v), 1e-12) if norm else v)
        return np.stack(rows)

    def st_check(self, name, d, m, ids, lengths, mode, norm, texts, want_len):
        s, h, err = self.open(d)
        if s != 0:
            self.check(False, f"{name}: open failed: {err}")
            return
        ml = self.L.attn_pretrained_max_length(h)
        s, out = self.c_embed(h, ids, lengths)
        self.L.attn_pretrained_free(h)
        if s != 0:
            self.check(False, f"{name}: embed failed: {self.L.attn_last_error().decode()}")
            return
        e = self.rel(out, self.st_reference(m, ids, lengths, mode, norm))
        self.check(e <= TOL and ml == want_len, f"{name}: embed rel err {e:.2e} (float64 reference), "
                   f"max_length {ml} (want {want_len})")
        ref = self.st.SentenceTransformer(d, device="cpu").encode(texts, convert_to_numpy=True, batch_size=8)
        e = self.rel(out, ref.astype(self.np.float64))
        self.check(e <= TOL, f"{name}: SentenceTransformer(dir).encode (float32) rel err {e:.2e}")

    def st_cases(self, m, plain):
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import sentence_transformers.models as stm
        texts, ids, lengths = self.texts(plain)
        for mode, norm in (("mean", True), ("cls", False), ("max", False)):
            d = os.path.join(self.out, f"st_{mode}")
            tr = stm.Transformer(plain, max_seq_length=48)
            mods = [tr, stm.Pooling(64, pooling_mode=mode)] + ([stm.Normalize()] if norm else [])
            self.st.SentenceTransformer(modules=mods, device="cpu").save(d)
            self.st_check(f"st {mode}{' + normalize' if norm else ''}", d, m, ids, lengths, mode, norm, texts, 48)
        # the files of sentence-transformers < 6: pooling_mode_*_tokens, max_seq_length
        d = os.path.join(self.out, "st_mean_v2")
        shutil.copytree(os.path.join(self.out, "st_mean"), d)
        json.dump({"word_embedding_dimension": 64, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
                   "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False},
                  open(os.path.join(d, "1_Pooling", "config.json"), "w"))
        json.dump({"max_seq_length": 40, "do_lower_case": False}, open(os.path.join(d, "sentence_bert_config.json"), "w"))
        s, h, err = self.open(d)
        if s == 0:
            ml = self.L.attn_pretrained_max_length(h)
            s, out = self.c_embed(h, ids, lengths)
            self.L.attn_pretrained_free(h)
            e = self.rel(out, self.st_reference(m, ids, lengths, "mean", True)) if s == 0 else float("inf")
            self.check(e <= TOL and ml == 40, f"st mean (v2 files): rel err {e:.2e}, max_length {ml}")
        else:
            self.check(False, f"st mean (v2 files): open failed: {err}")

    # ---- hostile folders ----
    def hostile(self, plain):
        def variant(name, edit_config=None, edit_tensors=None):
            d = os.path.join(self.out, "hostile_" + name)
            shutil.copytree(plain, d)
            if edit_config:
                p = os.path.join(d, "config.json")
                c = json.load(open(p))
                edit_config(c)
                json.dump(c, open(p, "w"))
            if edit_tensors:
                from safetensors.torch import load_file, save_file
                p = os.path.join(d, "model.safetensors")
                t = load_file(p)
                edit_tensors(t)
                save_file(t, p, metadata={"format": "pt"})
            return d

        torch = self.torch
        cases = [
            ("missing_key", lambda c: c.pop("hidden_size"), None, ["config.json", "hidden_size"]),
            ("wrong_type", lambda c: c.update(num_attention_heads="four"), None, ["config.json", "num_attention_heads"]),
            ("missing_tensor", None, lambda t: t.pop("encoder.layer.1.output.dense.bias"),
             ["missing", "encoder.layer.1.output.dense.bias"]),
            ("extra_tensor", None, lambda t: t.update({"encoder.layer.0.extra.weight": torch.zeros(3)}),
             ["unexpected", "encoder.layer.0.extra.weight"]),
            ("bad_shape", lambda c: c.update(intermediate_size=96), None, ["intermediate.dense.weight", "intermediate_size"]),
            ("layers_100000", lambda c: c.update(num_hidden_layers=100000), None, ["config.json", "num_hidden_layers"]),
            ("vocab_2_40", lambda c: c.update(vocab_size=2 ** 40), None, ["config.json", "vocab_size"]),
            ("model_type", lambda c: c.update(model_type="t5"), None, ["model_type", "t5"]),
            ("hidden_act", lambda c: c.update(hidden_act="silu"), None, ["hidden_act", "silu"]),
            ("position_type", lambda c: c.update(position_embedding_type="relative_key"), None,
             ["position_embedding_type"]),
            ("is_decoder", lambda c: c.update(is_decoder=True), None, ["is_decoder"]),
            ("int_dtype", None, lambda t: t.update({"embeddings.LayerNorm.bias": torch.zeros(64, dtype=torch.int32)}),
             ["embeddings.LayerNorm.bias", "I32"]),
        ]
        for name, ec, et, words in cases:
            d = variant(name, ec, et)
            s, h, err = self.open(d)
            if s == 0:
                self.L.attn_pretrained_free(h)
            ok = s != 0 and all(w in err for w in words)
            self.check(ok, f"hostile {name}: status {s}: {err}")
        d = os.path.join(self.out, "hostile_no_weights")
        shutil.copytree(plain, d)
        os.remove(os.path.join(d, "model.safetensors"))
        s, h, err = self.open(d)
        self.check(s != 0 and "model.safetensors" in err, f"hostile no_weights: status {s}: {err}")
        d = os.path.join(self.out, "hostile_no_config")
        shutil.copytree(plain, d)
        os.remove(os.path.join(d, "config.json"))
        s, h, err = self.open(d)
        self.check(s != 0 and "config.json" in err, f"hostile no_config: status {s}: {err}")

    def run(self):
        m, plain = self.plain_cases()
        self.st_cases(m, plain)
        self.hostile(plain)


if __name__ == "__main__":
    sys.exit(main())
