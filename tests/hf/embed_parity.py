#!/usr/bin/env python3
"""`attn embed` against SentenceTransformer(dir).encode on a folder built here.

    python embed_parity.py LIBATTN_SO OUTDIR

Trains a WordPiece tokenizer with Hugging Face tokenizers on a generated corpus, wraps it as a
BertTokenizerFast, builds a random BertModel (initializer_range 0.3) and sentence-transformers
folders around them (mean pooling + Normalize, max_seq_length 24 so long lines are truncated; CLS
pooling without Normalize), then runs the `attn` next to LIBATTN_SO on a file of mixed texts
(accents, CJK, punctuation, empty lines, lines past the maximum length) and compares each
output format (.npy, .safetensors, .jsonl) with encode: relative error ||out - ref|| / ||ref||
<= 1e-5 over all rows and per row. Also checks the refusals (an output that is the input, an
unknown extension). The last line is "embed parity: N passed, M failed"; exit 1 on a failure, 0
otherwise (a notice and 0 when torch, transformers, tokenizers or sentence_transformers cannot be
imported)."""
import json
import os
import random
import shutil
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

TOL = 1e-5
passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"FAIL: {what}")


def corpus(rng, n):
    words = ["attention", "is", "all", "you", "need", "the", "model", "learns", "café", "naïve", "résumé",
             "東京", "北京", "données", "straße", "tokens", "embedding", "vector", "query", "key", "value",
             "hello", "world", "!", "?", ",", "(", ")", "über", "señor", "Ωmega", "日本語", "emoji🙂", "x1", "42"]
    lines = []
    for _ in range(n):
        k = rng.randint(0, 40)
        lines.append(" ".join(rng.choice(words) for _ in range(k)))
    return lines


def rel(a, b):
    import numpy as np
    den = float(np.linalg.norm(b))
    return float(np.linalg.norm(a - b)) / (den if den > 0 else 1.0)


def build(outdir, rng):
    import tokenizers
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertConfig, BertModel, BertTokenizerFast

    base = os.path.join(outdir, "bert")
    os.makedirs(base, exist_ok=True)
    tok = tokenizers.BertWordPieceTokenizer(lowercase=True)
    tok.train_from_iterator(corpus(rng, 2000), vocab_size=400, min_frequency=1)
    tok.save_model(base)
    # The trained tokenizer object itself: transformers 5 ignores BertTokenizerFast(vocab_file=...)
    # and would save a five-token vocabulary, every text becoming [UNK].
    fast = BertTokenizerFast(tokenizer_object=tok._tokenizer, do_lower_case=True, unk_token="[UNK]",
                             sep_token="[SEP]", pad_token="[PAD]", cls_token="[CLS]", mask_token="[MASK]")
    if len(fast) < 100:
        raise RuntimeError(f"the saved tokenizer has {len(fast)} tokens: the trained vocabulary was not kept")
    fast.save_pretrained(base)
    torch.manual_seed(rng.randint(0, 2**31))
    cfg = BertConfig(vocab_size=len(fast), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=128, max_position_embeddings=64, initializer_range=0.3)
    BertModel(cfg).eval().save_pretrained(base, safe_serialization=True)
    folders = {}
    for name, mode, norm in (("mean_norm", "mean", True), ("cls", "cls", False)):
        word = models.Transformer(base, max_seq_length=24)
        dim_of = getattr(word, "get_embedding_dimension", None) or word.get_word_embedding_dimension
        mods = [word, models.Pooling(dim_of(), mode)]
        if norm:
            mods.append(models.Normalize())
        st = SentenceTransformer(modules=mods, device="cpu")
        d = os.path.join(outdir, name)
        st.save(d)
        folders[name] = d
    return folders


def load(path):
    import numpy as np
    if path.endswith(".npy"):
        return np.load(path)
    if path.endswith(".jsonl"):
        with open(path) as f:
            return np.array([json.loads(line) for line in f], dtype=np.float32)
    from safetensors.numpy import load_file
    return load_file(path)["embeddings"]


def main():
    if len(sys.argv) != 3:
        print("usage: embed_parity.py LIBATTN_SO OUTDIR", file=sys.stderr)
        return 2
    try:
        import numpy as np
        import sentence_transformers  # noqa: F401
        import tokenizers  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
        from sentence_transformers import SentenceTransformer
    except ImportError as e:
        print(f"embed parity: SKIP (cannot import {e.name}: needs torch, transformers, tokenizers, "
              "sentence_transformers)")
        return 0
    attn = os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])), "attn")
    outdir = sys.argv[2]
    shutil.rmtree(outdir, ignore_errors=True)
    os.makedirs(outdir)
    seed = int(os.environ.get("ATTN_TEST_SEED", "20261203"))
    rng = random.Random(seed)
    print(f"embed parity: seed {seed}")
    folders = build(outdir, rng)
    texts = corpus(rng, 300) + ["", "   ", "A", "Ünïcödé ÀÉÎ", "東京タワー！", "a" * 300, "tab\tand  spaces",
                                 " ".join(["long"] * 100)]
    inp = os.path.join(outdir, "texts.txt")
    with open(inp, "w", encoding="utf-8") as f:
        f.write("\n".join(texts) + "\n")
    for name, d in folders.items():
        ref = SentenceTransformer(d, device="cpu").encode(texts, batch_size=16, convert_to_numpy=True)
        outs = {}
        for ext in (".npy", ".safetensors", ".jsonl"):
            out = os.path.join(outdir, f"{name}{ext}")
            p = subprocess.run([attn, "embed", "--model", d, "--input", inp, "--out", out, "--batch", "7"],
                               capture_output=True, text=True)
            check(p.returncode == 0, f"{name}{ext}: attn embed exit {p.returncode}: {p.stderr.strip()}")
            if p.returncode != 0:
                continue
            got = load(out)
            outs[ext] = got
            check(got.shape == ref.shape, f"{name}{ext}: shape {got.shape}, want {ref.shape}")
            if got.shape != ref.shape:
                continue
            e = rel(got.astype(np.float64), ref.astype(np.float64))
            worst = max(rel(got[i].astype(np.float64), ref[i].astype(np.float64)) for i in range(len(texts)))
            print(f"  {name}{ext}: rel err {e:.2e} (worst row {worst:.2e})")
            check(e <= TOL and worst <= 10 * TOL and np.isfinite(got).all(), f"{name}{ext}: rel err {e:.3g}, worst row {worst:.3g}")
        if len(outs) == 3:
            check(np.array_equal(outs[".npy"], outs[".safetensors"]) and np.array_equal(outs[".npy"], outs[".jsonl"]),
                  f"{name}: the three formats differ")
    # refusals: the input as the output, an unknown extension
    d = folders["mean_norm"]
    same = os.path.join(outdir, "same.jsonl")
    shutil.copy(inp, same)
    p = subprocess.run([attn, "embed", "--model", d, "--input", same, "--out", same], capture_output=True, text=True)
    with open(same, encoding="utf-8") as f:
        kept = f.read() == "\n".join(texts) + "\n"
    check(p.returncode != 0 and "input" in p.stderr and kept, f"output = input: exit {p.returncode}, {p.stderr.strip()}")
    p = subprocess.run([attn, "embed", "--model", d, "--input", inp, "--out", os.path.join(outdir, "x.txt")],
                       capture_output=True, text=True)
    check(p.returncode == 2 and ".npy" in p.stderr, f"unknown extension: exit {p.returncode}, {p.stderr.strip()}")
    print(f"embed parity: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
