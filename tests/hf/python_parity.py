#!/usr/bin/env python3
"""The Python package's attn.from_pretrained against transformers / sentence-transformers on
folders built here.

    python python_parity.py LIBATTN_SO OUTDIR

Puts the source tree's python/ first on sys.path and ATTN_LIBRARY=LIBATTN_SO. Builds a WordPiece
tokenizer, a random BertModel (initializer_range 0.3) and sentence-transformers folders around it
(mean pooling + Normalize, max_seq_length 24 so long texts are truncated; CLS pooling), and a
byte-level BPE tokenizer with a random GPT2LMHeadModel (as tests/hf/embed_parity.py and
gpt2_parity.py do), then checks:
  - .tokenizer(texts) = tokenizer(texts, truncation=True)["input_ids"], .tokenizer.decode = decode;
  - .encode(texts, batch_size=7) = SentenceTransformer(dir).encode(texts): relative error
    ||out - ref|| / ||ref|| <= 1e-5 (float32 [n, dim]; one str gives [dim]);
  - .hidden_states of a padded batch = BertModel(ids, attention_mask) in float64 over the real
    positions (<= 1e-5), padding 0;
  - .logits of a padded batch = GPT2LMHeadModel(ids).logits in float64 (<= 1e-5);
  - .generate(text) greedy = model.generate(do_sample=False), its text = tokenizer.decode, the
    callback streams the same ids and stops when it returns True; sampling reproducible per seed;
  - 8 threads sharing one object give the single-threaded results bit for bit;
  - errors: a missing folder (AttnError naming it), hidden_states on GPT-2, generate on BERT,
    a closed object, a callback's exception raised again;
  - a random ViTForImageClassification folder (32 x 32 images, 10 labels, a preprocessor_config.json):
    .image_input(file) = (x / 255 - mean) / std; .classify(arrays, top_k=None) = model(pixels).logits
    and .image_hidden_states = model.vit(pixels).last_hidden_state in float64 (<= 1e-5); top-k
    (label, probability) = softmax of the reference; file paths = their image_input arrays; errors
    (a text model, a wrong shape, top_k 0) raise ValueError naming them.
The last line is "python parity: N passed, M failed"; exit 1 on a failure, 0 otherwise (a notice
and 0 when torch, transformers, tokenizers or sentence_transformers cannot be imported)."""
import os
import random
import shutil
import subprocess
import sys
import threading

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

TOL = 1e-5
passed = failed = 0


def check(ok, what):
    global passed, failed
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if ok:
        passed += 1
    else:
        failed += 1


def rel(a, b):
    import numpy as np
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    den = float(np.linalg.norm(b))
    e = float(np.linalg.norm(a - b)) / (den if den > 0 else 1.0)
    return e if np.isfinite(a).all() else float("inf")


def bert_corpus(rng, n):
    words = ["attention", "is", "all", "you", "need", "the", "model", "learns", "café", "naïve", "résumé",
             "東京", "北京", "données", "straße", "tokens", "embedding", "vector", "query", "key", "value",
             "hello", "world", "!", "?", ",", "(", ")", "über", "señor", "Ωmega", "日本語", "emoji🙂", "x1", "42"]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(0, 40))) for _ in range(n)]


def gpt2_corpus(n):
    rng = random.Random(5)
    words = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "café", "naïve", "über", "日本語", "テキスト",
             "🙂", "Привет", "mañana", "zoë", "data", "model", "token", "x", "42", "!", "?", ","]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(3, 14))) for _ in range(n)]


def build_bert(outdir, rng):
    import tokenizers
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertConfig, BertModel, BertTokenizerFast

    base = os.path.join(outdir, "bert")
    os.makedirs(base)
    tok = tokenizers.BertWordPieceTokenizer(lowercase=True)
    tok.train_from_iterator(bert_corpus(rng, 2000), vocab_size=400, min_frequency=1)
    # the trained tokenizer itself (transformers 5 ignores BertTokenizerFast(vocab_file=...): a
    # 5-token vocabulary would make every text [UNK])
    fast = BertTokenizerFast(tokenizer_object=tok._tokenizer, do_lower_case=True, unk_token="[UNK]",
                             sep_token="[SEP]", pad_token="[PAD]", cls_token="[CLS]", mask_token="[MASK]")
    assert len(fast) > 100, len(fast)
    fast.save_pretrained(base)
    torch.manual_seed(rng.randint(0, 2**31))
    cfg = BertConfig(vocab_size=len(fast), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=128, max_position_embeddings=64, initializer_range=0.3)
    model = BertModel(cfg).eval()
    model.save_pretrained(base, safe_serialization=True)
    folders = {}
    for name, mode, norm in (("mean_norm", "mean", True), ("cls", "cls", False)):
        word = models.Transformer(base, max_seq_length=24)
        dim_of = getattr(word, "get_embedding_dimension", None) or word.get_word_embedding_dimension
        mods = [word, models.Pooling(dim_of(), mode)]
        if norm:
            mods.append(models.Normalize())
        d = os.path.join(outdir, name)
        SentenceTransformer(modules=mods, device="cpu").save(d)
        folders[name] = d
    return base, model, fast, folders


def build_gpt2(outdir):
    import tokenizers
    import torch
    import transformers as tf
    d = os.path.join(outdir, "gpt2")
    os.makedirs(d)
    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator(gpt2_corpus(2000), vocab_size=300, min_frequency=2, special_tokens=["<|endoftext|>"])
    tok = tf.GPT2TokenizerFast(tokenizer_object=bpe._tokenizer, eos_token="<|endoftext|>", bos_token="<|endoftext|>",
                               unk_token="<|endoftext|>")
    tok.save_pretrained(d)
    eos = tok.convert_tokens_to_ids("<|endoftext|>")
    cfg = tf.GPT2Config(vocab_size=len(tok), n_embd=64, n_layer=2, n_head=4, n_positions=64, initializer_range=0.3,
                        eos_token_id=eos, bos_token_id=eos, pad_token_id=eos, resid_pdrop=0.0, embd_pdrop=0.0,
                        attn_pdrop=0.0)
    torch.manual_seed(0)
    model = tf.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():  # LayerNorms away from (1, 0), biases nonzero: every tensor matters
        for name, p in model.named_parameters():
            if name.endswith("bias") or ".ln_" in name:
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(d, safe_serialization=True)
    return d, model, tok, eos


def same_in_threads(fn, n=8, reps=3):
    """fn() in n threads at once, reps times each: every result equal (bitwise) to a single-threaded
    call's."""
    import numpy as np
    want = fn()
    results, errors = [], []
    barrier = threading.Barrier(n)

    def body():
        try:
            barrier.wait()
            for _ in range(reps):
                results.append(fn())
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
    ts = [threading.Thread(target=body) for _ in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return not errors and len(results) == n * reps and all(np.array_equal(r, want) for r in results), errors


def check_bert(attn, base, model, fast, folders, texts):
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    from transformers import AutoTokenizer
    st_tok = AutoTokenizer.from_pretrained(folders["mean_norm"])  # model_max_length 24, as the folder says
    with attn.from_pretrained(folders["mean_norm"]) as m:
        check(m.family == "bert" and m.hidden_size == 64 and m.embedding_size == 64 and m.max_length == 24
              and m.pooling == "mean" and m.normalize and m.vocab_size == len(fast),
              f"bert properties: {m!r}, max_length {m.max_length}, pooling {m.pooling}, normalize {m.normalize}")
        want = st_tok(texts, truncation=True)["input_ids"]
        got = m.tokenizer(texts)
        unk = sum(t == fast.unk_token_id for w in want for t in w) / sum(map(len, want))
        check(got == want and unk < 0.2 and max(map(len, want)) == 24,
              f"tokenizer(texts) = tokenizer(texts, truncation=True)['input_ids'] on {len(texts)} texts "
              f"(truncated at 24, {unk:.0%} [UNK])")
        full = fast(texts)["input_ids"]
        check(m.tokenizer(texts, max_length=10**6) == full and max(map(len, full)) > 24,
              "tokenizer(texts, max_length=10**6) = the untruncated ids")
        check(m.tokenizer(texts[3]) == want[3], "tokenizer(str) = its ids")
        dec_ok = all(m.tokenizer.decode(ids) == fast.decode(ids) for ids in want[:60])
        dec_skip = all(m.tokenizer.decode(ids, skip_special_tokens=True) == fast.decode(ids, skip_special_tokens=True)
                       for ids in want[:60])
        check(dec_ok and dec_skip, "tokenizer.decode (with and without special tokens) = decode")
    for name, d in folders.items():
        ref = SentenceTransformer(d, device="cpu").encode(texts, batch_size=16, convert_to_numpy=True)
        with attn.from_pretrained(d) as m:
            got = m.encode(texts, batch_size=7)
            one = m.encode(texts[5])
            e = rel(got, ref)
            worst = max(rel(got[i], ref[i]) for i in range(len(texts)))
            check(got.dtype == np.float32 and got.shape == ref.shape and e <= TOL and worst <= 10 * TOL,
                  f"{name}: encode(texts, batch_size=7) = SentenceTransformer.encode: rel err {e:.2e} "
                  f"(worst row {worst:.2e}), shape {got.shape}")
            check(one.shape == (64,) and rel(one, ref[5]) <= 10 * TOL, f"{name}: encode(str) is one row [dim]")
            ok, errs = same_in_threads(lambda: m.encode(texts[:40], batch_size=5))
            check(ok, f"{name}: encode from 8 threads = single-threaded {errs[:1]}")
    # hidden states of a padded batch against BertModel in float64
    ref64 = model.double().eval()
    rows = [fast(t)["input_ids"] for t in texts[:6]]
    with attn.from_pretrained(base) as m:
        hs = m.hidden_states(rows)
        n = max(map(len, rows))
        ids = torch.zeros(len(rows), n, dtype=torch.long)
        mask = torch.zeros(len(rows), n, dtype=torch.long)
        for b, r in enumerate(rows):
            ids[b, :len(r)] = torch.tensor(r)
            mask[b, :len(r)] = 1
        tt = torch.zeros_like(ids)
        tt[:, 2:] = 1
        with torch.no_grad():
            want = ref64(ids, attention_mask=mask).last_hidden_state.numpy()
            want_tt = ref64(ids, attention_mask=mask, token_type_ids=tt).last_hidden_state.numpy()
        real = mask.numpy().astype(bool)
        lens = [len(r) for r in rows]
        e = rel(hs[real], want[real])
        e_tt = rel(m.hidden_states(ids.numpy(), lens, token_type_ids=tt.numpy())[real], want_tt[real])
        check(e <= TOL and e_tt <= TOL and not hs[~real].any(),
              f"hidden_states of a padded batch (lengths {lens}) = BertModel float64: rel err {e:.2e}, with "
              f"token types {e_tt:.2e}")
        ok, errs = same_in_threads(lambda: m.hidden_states(rows))
        check(ok, f"hidden_states from 8 threads = single-threaded {errs[:1]}")
        try:
            m.generate([1, 2, 3], max_new_tokens=2)
            msg = "accepted"
        except attn.AttnError as ex:
            msg = ex.message
        check("bert" in msg, f"generate on bert: AttnError: {msg}")
        try:
            m.hidden_states([[1, 2, 10**6]])
            msg = "accepted"
        except attn.AttnError as ex:
            msg = ex.message
        check("ids[0][2]" in msg and "vocab_size" in msg, f"an id past the vocabulary: AttnError: {msg}")


def check_gpt2(attn, d, model, tok, eos):
    import copy

    import numpy as np
    import torch
    ref = copy.deepcopy(model).to(torch.float64).eval()
    m = attn.from_pretrained(d)
    check(m.family == "gpt2" and m.vocab_size == len(tok) and m.eos_token_id == eos and m.hidden_size == 64,
          f"gpt2 properties: {m!r}, vocab {m.vocab_size}, eos {m.eos_token_id}")
    texts = gpt2_corpus(30)
    want = tok(texts, truncation=True)["input_ids"]
    check(m.tokenizer(texts) == want, "gpt2 tokenizer(texts) = GPT2TokenizerFast(texts)")
    check(all(m.tokenizer.decode(w) == tok.decode(w) for w in want), "gpt2 tokenizer.decode = decode")
    rng = random.Random(1)
    rows = [[rng.randrange(len(tok)) for _ in range(n)] for n in (64, 17, 40, 1)]
    lg = m.logits(rows)
    num = den = 0.0
    pad_zero = lg.shape == (4, 64, len(tok))
    for b, r in enumerate(rows):
        with torch.no_grad():
            w = ref(torch.tensor([r])).logits[0].numpy()
        g = lg[b, :len(r)].astype(np.float64)
        num += float(((g - w) ** 2).sum())
        den += float((w ** 2).sum())
        pad_zero = pad_zero and not lg[b, len(r):].any()
    e = (num / den) ** 0.5 if np.isfinite(lg).all() else float("inf")
    check(e <= TOL and pad_zero, f"logits of a padded batch (lengths 64, 17, 40, 1) = GPT2LMHeadModel float64: "
          f"rel err {e:.2e}")
    ok, errs = same_in_threads(lambda: m.logits(rows[1:]))
    check(ok, f"logits from 8 threads = single-threaded {errs[:1]}")
    # greedy generation from text
    prompt = "the cat sat on café 日本語"
    pids = tok(prompt)["input_ids"]
    with torch.no_grad():
        hf = ref.generate(torch.tensor([pids]), do_sample=False, max_new_tokens=32, pad_token_id=eos,
                          attention_mask=torch.ones(1, len(pids), dtype=torch.long))[0, len(pids):].tolist()
    streamed = []
    g = m.generate(prompt, max_new_tokens=32, callback=streamed.append)
    check(g.ids == hf and streamed == hf, f"generate(text) greedy = model.generate ({len(hf)} ids), streamed the same"
          + ("" if g.ids == hf else f": attn {g.ids}, transformers {hf}"))
    check(g.text == tok.decode(hf), f"generate's text = tokenizer.decode(ids) ({len(g.text or '')} chars)")
    check(m.generate(pids, max_new_tokens=32).ids == hf, "generate(ids) = generate(text)")
    stop = []
    g5 = m.generate(prompt, max_new_tokens=32, callback=lambda i: (stop.append(i), len(stop) == 5)[1])
    check(g5.ids == hf[:5] and stop == hf[:5], f"a callback returning True stops: {len(g5.ids)} ids")
    kw = dict(max_new_tokens=30, temperature=1.5, top_k=200, top_p=0.95, eos_token_id=None)
    a, b, c = (m.generate("zoë ran", seed=s, **kw).ids for s in (7, 7, 8))
    check(a == b and a != c and len(a) == 30, f"sampling: seed 7 twice the same {len(a)} ids, seed 8 differs")
    # the options reach the C struct as `attn generate` sets them: the same sampled ids
    cli = os.path.join(os.path.dirname(attn.library_path()), "attn")
    if os.path.exists(cli):
        same, total, why = True, 0, ""
        for seed in range(1, 7):
            p = subprocess.run([cli, "generate", "--model", d, "--prompt", "zoë ran", "--ids", "--tokens", "30",
                                "--temperature", "1.5", "--top-k", "200", "--top-p", "0.95", "--seed", str(seed)],
                               capture_output=True)
            out = p.stdout.rstrip(b"\n").rsplit(b"\n", 1)[-1]
            cli_ids = [int(x) for x in out.split()] if p.returncode == 0 else None
            mine = m.generate("zoë ran", seed=seed, max_new_tokens=30, temperature=1.5, top_k=200, top_p=0.95).ids
            total += len(mine)
            if cli_ids != mine:
                same, why = False, f" (seed {seed}: {p.stderr.decode(errors='replace')} {cli_ids} vs {mine})"
        check(same and total > 30, f"sampled generate (seeds 1-6) = attn generate --ids: {total} ids{why}")
    check(m.generate("zoë ran", max_new_tokens=20, temperature=0.7, top_k=1, seed=3).ids
          == m.generate("zoë ran", max_new_tokens=20).ids, "sampling: top_k 1 = greedy")
    ok, errs = same_in_threads(lambda: np.array(m.generate("zoë ran", seed=11, **kw).ids))
    check(ok, f"sampled generate from 8 threads = single-threaded {errs[:1]}")

    class Boom(Exception):
        pass

    def boom(i):
        raise Boom(i)
    try:
        m.generate(prompt, callback=boom)
        raised = False
    except Boom:
        raised = True
    reentrant = []

    def again(i):
        try:
            m.logits([[1, 2]])
        except RuntimeError as ex:
            reentrant.append(str(ex))
        return True
    m.generate(prompt, callback=again)
    check(raised and reentrant and "called again" in reentrant[0],
          f"a callback's exception is raised by generate; a call back into the model is refused: {reentrant[:1]}")
    try:
        m.hidden_states([[1, 2]])
        msg = "accepted"
    except attn.AttnError as ex:
        msg = ex.message
    check("gpt2" in msg, f"hidden_states on gpt2: AttnError: {msg}")
    # precision: bf16 through the property and from_pretrained (its accuracy: bf16_decoder_parity.py)
    check(m.precision == "fp32", f"gpt2 precision by default: {m.precision}")
    m.precision = "bf16"
    lb = m.logits(rows)
    eb = float(np.linalg.norm(lb - lg) / np.linalg.norm(lg))
    check(m.precision == "bf16" and np.isfinite(lb).all() and 0 < eb < 5e-2,
          f"gpt2 precision bf16: logits within 5e-2 of fp32's and not equal ({eb:.2e})")
    m.precision = "fp32"
    check(np.array_equal(m.logits(rows), lg), "gpt2 back to fp32: the fp32 logits again")
    try:
        m.precision = "fp16"
        msg = "accepted"
    except ValueError as ex:
        msg = str(ex)
    check("fp16" in msg, f"precision 'fp16': ValueError: {msg}")
    with attn.from_pretrained(d, precision="bf16") as mb:
        check(mb.precision == "bf16" and np.array_equal(mb.logits(rows), lb),
              "from_pretrained(precision='bf16') = setting the property")
    m.close()
    try:
        m.logits([[1]])
        msg = "accepted"
    except ValueError as ex:
        msg = str(ex)
    check("closed" in msg, f"a closed object: ValueError: {msg}")


def check_errors(attn, outdir):
    missing = os.path.join(outdir, "no_such_model")
    try:
        attn.from_pretrained(missing)
        msg = "accepted"
    except attn.AttnError as ex:
        msg = ex.message
    check("no_such_model" in msg, f"a missing folder: AttnError naming it: {msg}")


VIT_MEAN, VIT_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def build_vit(outdir):
    import json
    import numpy as np
    import torch
    import transformers as tf
    cfg = tf.ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                       intermediate_size=48, initializer_range=0.3, layer_norm_eps=1e-6,
                       id2label={i: f"label {i}" for i in range(10)}, attn_implementation="eager")
    torch.manual_seed(41)
    m = tf.ViTForImageClassification(cfg)
    with torch.no_grad():  # LayerNorms away from (1, 0), biases, CLS and positions nonzero
        for name, p in m.named_parameters():
            if name.endswith("bias") or "layernorm" in name or "token" in name or "position" in name:
                p.add_(0.3 * torch.randn_like(p))
    m.eval()
    d = os.path.join(outdir, "vit")
    m.save_pretrained(d, safe_serialization=True)
    with open(os.path.join(d, "preprocessor_config.json"), "w") as f:
        json.dump(dict(image_processor_type="ViTImageProcessor", do_resize=True, size={"height": 32, "width": 32},
                       resample=2, do_rescale=True, rescale_factor=1 / 255, do_normalize=True, image_mean=VIT_MEAN,
                       image_std=VIT_STD, do_convert_rgb=True), f)
    rng = np.random.default_rng(5)
    paths, raw = [], []
    for i in range(3):  # the model's size: the resize is a copy
        a = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
        path = os.path.join(outdir, f"im{i}.ppm")
        with open(path, "wb") as f:
            f.write(b"P6\n32 32\n255\n" + a.tobytes())
        paths.append(path)
        raw.append(a)
    return d, m.to(torch.float64), paths, raw


def check_vit(attn, d, model, paths, raw, bert_dir):
    import numpy as np
    import torch
    p = attn.from_pretrained(d)
    check(p.family == "vit" and p.image_size == (3, 32, 32) and p.num_labels == 10 and p.labels[3] == "label 3",
          f"vit: family {p.family}, image_size {p.image_size}, {p.num_labels} labels {p.labels[:2]}")
    mean, std = np.array(VIT_MEAN)[:, None, None], np.array(VIT_STD)[:, None, None]
    want = np.stack([(a.transpose(2, 0, 1) / 255.0 - mean) / std for a in raw])
    got = np.stack([p.image_input(x) for x in paths])
    e = rel(got, want)
    check(got.dtype == np.float32 and e <= 1e-6, f"vit: image_input(file) = (x / 255 - mean) / std: rel err {e:.1e}")
    x = got
    with torch.no_grad():
        ref = model(torch.from_numpy(x.astype(np.float64)))
        ref_h = model.vit(torch.from_numpy(x.astype(np.float64))).last_hidden_state.numpy()
    ref_l = ref.logits.numpy()
    lg = p.classify(x, top_k=None)
    e = rel(lg, ref_l)
    check(lg.shape == (3, 10) and e <= TOL,
          f"vit: classify(arrays [3, 3, 32, 32], top_k=None) = logits: rel err {e:.1e}")
    hs = p.image_hidden_states(x)
    e = rel(hs, ref_h)
    check(hs.shape == (3, 17, 32) and e <= TOL, f"vit: image_hidden_states = last_hidden_state {hs.shape}: "
          f"rel err {e:.1e}")
    top = p.classify(list(x), top_k=3)
    probs = np.exp(ref_l - ref_l.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    ok = len(top) == 3
    for b in range(3):
        order = np.argsort(-probs[b], kind="stable")[:3]
        ok = ok and [lab for lab, _ in top[b]] == [f"label {i}" for i in order]
        ok = ok and all(abs(pr - probs[b, i]) <= 1e-5 for (_, pr), i in zip(top[b], order))
    check(ok, f"vit: classify(top_k=3) = softmax of the reference: {top[0]}")
    one = p.classify(paths[1], top_k=3)
    from_files = p.classify(paths, top_k=None)
    check(one == top[1] and np.array_equal(from_files, lg), f"vit: classify(file paths) = classify(image_input): {one}")
    errs = []
    for what, call in (("top_k", lambda: p.classify(x, top_k=0)),
                       ("got shape", lambda: p.classify(np.zeros((2, 3, 16, 16), np.float32))),
                       ("not an image model", lambda: attn.from_pretrained(bert_dir).classify(x))):
        try:
            call()
            errs.append(f"{what}: accepted")
        except ValueError as ex:
            if what not in str(ex):
                errs.append(f"{what}: {ex}")
    check(not errs, f"vit: errors raise ValueError naming them {errs}")
    p.precision = "bf16"
    lb = p.classify(x, top_k=None)
    eb = float(np.linalg.norm(lb - lg) / np.linalg.norm(lg))
    check(p.precision == "bf16" and 0 < eb < 5e-2, f"vit precision bf16: logits within 5e-2 of fp32's ({eb:.2e})")
    p.precision = "fp32"
    check(np.array_equal(p.classify(x, top_k=None), lg), "vit back to fp32: the fp32 logits again")
    p.close()


def main():
    if len(sys.argv) != 3:
        print("usage: python_parity.py LIBATTN_SO OUTDIR", file=sys.stderr)
        return 2
    try:
        import numpy  # noqa: F401
        import sentence_transformers  # noqa: F401
        import tokenizers  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        print(f"python parity: SKIP (cannot import {e.name}: needs torch, transformers, tokenizers, "
              "sentence_transformers)")
        return 0
    os.environ["ATTN_LIBRARY"] = os.path.abspath(sys.argv[1])
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    import attn
    print(f"python parity: attn from {os.path.dirname(attn.__file__)}, {attn.library_path()}")
    outdir = sys.argv[2]
    shutil.rmtree(outdir, ignore_errors=True)
    os.makedirs(outdir)
    seed = int(os.environ.get("ATTN_TEST_SEED", "20261203"))
    rng = random.Random(seed)
    print(f"python parity: seed {seed}")
    bert = build_bert(outdir, rng)
    texts = bert_corpus(rng, 120) + ["", "   ", "A", "Ünïcödé ÀÉÎ", "東京タワー！", "a" * 300,
                                      "tab\tand  spaces", " ".join(["long"] * 100)]
    check_bert(attn, *bert, texts)
    check_gpt2(attn, *build_gpt2(outdir))
    check_errors(attn, outdir)
    check_vit(attn, *build_vit(outdir), bert[0])
    print(f"python parity: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
