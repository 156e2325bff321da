#!/usr/bin/env python3
"""attn_pretrained's GPT-2 family and `attn generate` against transformers on folders built here.

    python gpt2_parity.py LIBATTN_SO OUTDIR

Trains a byte-level BPE tokenizer (tokenizers' ByteLevelBPETokenizer, ~300 ids) on a generated
corpus with multi-byte UTF-8, builds a random GPT2LMHeadModel (n_embd 64, n_layer 2, n_head 4,
n_positions 64, initializer_range 0.3) saved as safetensors in f32 and bf16 (and its GPT2Model
body, whose names have no "transformer." prefix), and checks:
  - attn_pretrained_logits through ctypes against the model in float64 on a right-padded batch:
    relative error ||out - ref|| / ||ref|| <= 1e-5 over the real positions;
  - greedy generation of 32 tokens (ctypes attn_pretrained_generate and `attn generate --ids`)
    identical to model.generate(do_sample=False, max_new_tokens=32), the streamed text equal to
    the tokenizer's decode of the ids;
  - sampling (temperature, top-k, top-p) reproducible for a seed, different for another seed;
  - hostile folders (a missing tensor, an unsupported activation, n_layer 100000, the options attn
    does not run, an untied lm_head) fail with a message naming the key or tensor; embed on GPT-2
    and generate on BERT answer ATTN_ERR_UNSUPPORTED.
The last line is "gpt2 parity: N passed, M failed"; the exit status is 1 on a failure, 0 otherwise
(a notice and 0 when torch, transformers or tokenizers cannot be imported)."""
import ctypes
import json
import os

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
import random
import shutil
import subprocess
import sys

from decoder_ctypes import declare_generate, generate

TOL = 1e-5
UNSUPPORTED = 7


def main():
    if len(sys.argv) != 3:
        print("usage: gpt2_parity.py LIBATTN_SO OUTDIR", file=sys.stderr)
        return 2
    try:
        import numpy as np
        import torch
        import transformers
        import tokenizers
    except Exception as e:  # noqa: BLE001 - any import failure means "skip"
        print(f"gpt2 parity: SKIP (cannot import torch / transformers / tokenizers: {e})")
        return 0
    t = Tester(sys.argv[1], sys.argv[2], np, torch, transformers, tokenizers)
    t.run()
    print(f"gpt2 parity: {t.passed} passed, {t.failed} failed")
    return 1 if t.failed else 0


def corpus(n):
    rng = random.Random(5)
    words = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "café", "naïve", "über", "日本語", "テキスト",
             "🙂", "Привет", "mañana", "zoë", "data", "model", "token", "x", "42", "!", "?", ","]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(3, 14))) for _ in range(n)]


class Tester:
    def __init__(self, lib, out, np, torch, transformers, tokenizers):
        self.np, self.torch, self.tf, self.tk = np, torch, transformers, tokenizers
        self.out = out
        self.attn = os.path.join(os.path.dirname(os.path.abspath(lib)), "attn")
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
        L.attn_pretrained_vocab_size.argtypes = [P]
        L.attn_pretrained_vocab_size.restype = I64
        L.attn_pretrained_eos_id.argtypes = [P]
        L.attn_pretrained_eos_id.restype = ctypes.c_int32
        L.attn_pretrained_logits.argtypes = [P, P, P, I64, I64, P]
        L.attn_pretrained_logits.restype = ctypes.c_int
        L.attn_pretrained_embed.argtypes = [P, P, P, I64, I64, P]
        L.attn_pretrained_embed.restype = ctypes.c_int
        declare_generate(L)
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
        st = self.L.attn_pretrained_open(d.encode(), ctypes.byref(h))
        if st:
            return None, st, self.L.attn_last_error().decode(errors="replace")
        return h, 0, ""

    def logits(self, h, rows):
        np = self.np
        B, n = len(rows), max(len(r) for r in rows)
        V = self.L.attn_pretrained_vocab_size(h)
        ids = np.zeros((B, n), dtype=np.int32)
        for b, r in enumerate(rows):
            ids[b, :len(r)] = r
        lengths = np.array([len(r) for r in rows], dtype=np.int64)
        out = np.zeros((B, n, V), dtype=np.float32)
        st = self.L.attn_pretrained_logits(h, ids.ctypes.data, lengths.ctypes.data, B, n, out.ctypes.data)
        if st:
            raise RuntimeError(self.L.attn_last_error().decode())
        return out

    def generate(self, h, prompt, **kw):
        st, got = generate(self.L, h, prompt, **kw)
        if st:
            raise RuntimeError(self.L.attn_last_error().decode())
        return got

    def cli(self, d, prompt, *extra):
        p = subprocess.run([self.attn, "generate", "--model", d, "--prompt", prompt, "--ids", *extra],
                           capture_output=True)
        if p.returncode != 0:
            return None, None, p.stderr.decode(errors="replace")
        body = p.stdout
        assert body.endswith(b"\n"), body
        body = body[:-1]
        cut = body.rfind(b"\n")
        ids = [int(x) for x in body[cut + 1:].split()]
        return body[:cut].decode("utf-8"), ids, ""

    # ---- the folders ----
    def tokenizer(self, d):
        tk = self.tk
        bpe = tk.ByteLevelBPETokenizer()
        bpe.train_from_iterator(corpus(2000), vocab_size=300, min_frequency=2, special_tokens=["<|endoftext|>"])
        tok = self.tf.GPT2TokenizerFast(tokenizer_object=bpe._tokenizer, eos_token="<|endoftext|>",
                                        bos_token="<|endoftext|>", unk_token="<|endoftext|>")
        tok.save_pretrained(d)
        return tok

    def build(self):
        torch, tf = self.torch, self.tf
        d32 = os.path.join(self.out, "gpt2_f32")
        os.makedirs(d32)
        self.tok = self.tokenizer(d32)
        eos = self.tok.convert_tokens_to_ids("<|endoftext|>")
        cfg = tf.GPT2Config(vocab_size=len(self.tok), n_embd=64, n_layer=2, n_head=4, n_positions=64,
                            initializer_range=0.3, eos_token_id=eos, bos_token_id=eos, pad_token_id=eos,
                            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        torch.manual_seed(0)
        model = tf.GPT2LMHeadModel(cfg).eval()
        with torch.no_grad():  # LayerNorms away from (1, 0), biases nonzero: every tensor matters
            for name, p in model.named_parameters():
                if name.endswith("bias") or ".ln_" in name:
                    p.add_(0.1 * torch.randn_like(p))
        model.save_pretrained(d32, safe_serialization=True)
        self.model, self.eos = model, eos
        dbf = os.path.join(self.out, "gpt2_bf16")
        shutil.copytree(d32, dbf)
        os.remove(os.path.join(dbf, "model.safetensors"))
        import copy
        mb = copy.deepcopy(model).to(torch.bfloat16)
        mb.save_pretrained(dbf, safe_serialization=True)
        dbody = os.path.join(self.out, "gpt2_body")
        shutil.copytree(d32, dbody)
        os.remove(os.path.join(dbody, "model.safetensors"))
        model.transformer.save_pretrained(dbody, safe_serialization=True)
        return {"f32": (d32, model), "bf16": (dbf, mb), "GPT2Model": (dbody, model)}

    def ref64(self, model):
        import copy
        return copy.deepcopy(model).to(self.torch.float64).eval()

    # ---- the checks ----
    def check_logits(self, name, d, model):
        torch, np = self.torch, self.np
        ref = self.ref64(model)
        h, st, msg = self.open(d)
        if not h:
            self.check(False, f"{name}: open: {msg}")
            return
        fam = self.L.attn_pretrained_family(h).decode()
        rng = random.Random(1)
        V = len(self.tok)
        rows = [[rng.randrange(V) for _ in range(n)] for n in (64, 17, 40, 1)]
        out = self.logits(h, rows)
        num = den = 0.0
        pad_zero = True
        for b, r in enumerate(rows):
            with torch.no_grad():
                want = ref(torch.tensor([r])).logits[0].numpy()
            got = out[b, :len(r)].astype(np.float64)
            num += float(((got - want) ** 2).sum())
            den += float((want ** 2).sum())
            pad_zero = pad_zero and not out[b, len(r):].any()
        err = (num / den) ** 0.5
        self.check(fam == "gpt2" and err <= TOL and pad_zero,
                   f"{name}: logits of a padded batch (lengths 64, 17, 40, 1) vs float64: rel err {err:.2e}")
        self.L.attn_pretrained_free(h)

    def check_greedy(self, name, d, model):
        torch = self.torch
        ref = self.ref64(model)
        prompt_text = "the cat sat on café 日本語"
        prompt = self.tok(prompt_text)["input_ids"]
        with torch.no_grad():
            hf = ref.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=32, pad_token_id=self.eos,
                              attention_mask=torch.ones(1, len(prompt), dtype=torch.long))[0, len(prompt):].tolist()
        h, st, msg = self.open(d)
        lib = self.generate(h, prompt, max_new_tokens=32, eos_id=self.L.attn_pretrained_eos_id(h)) if h else None
        self.check(lib == hf, f"{name}: greedy 32 tokens (ctypes) = model.generate: {len(hf)} ids"
                   + ("" if lib == hf else f" (attn {lib}, transformers {hf})"))
        long = self.tok(" ".join(corpus(12)))["input_ids"][:45]  # through the cache in two chunks
        with torch.no_grad():
            hf_long = ref.generate(torch.tensor([long]), do_sample=False, max_new_tokens=19, pad_token_id=self.eos,
                                   attention_mask=torch.ones(1, len(long), dtype=torch.long))[0, len(long):].tolist()
        lib = self.generate(h, long, max_new_tokens=19, eos_id=self.eos) if h else None
        self.check(len(long) == 45 and lib == hf_long, f"{name}: greedy after a 45-token prompt = model.generate")
        text, ids, err = self.cli(d, prompt_text, "--tokens", "32")
        self.check(ids == hf, f"{name}: attn generate --ids = model.generate" + (f" ({err or ids})" if ids != hf else ""))
        if ids is not None:
            want = self.tok.decode(ids)
            self.check(text == want, f"{name}: streamed text = tokenizer.decode(ids) ({len(text)} chars)"
                       + ("" if text == want else f": {text!r} vs {want!r}"))
        if h:  # --precision bf16 is the library's bf16 generation (its accuracy: bf16_decoder_parity.py)
            self.L.attn_pretrained_set_precision.argtypes = [ctypes.c_void_p, ctypes.c_int]
            self.check(self.L.attn_pretrained_set_precision(h, 1) == 0, f"{name}: set_precision bf16")
            lib = self.generate(h, prompt, max_new_tokens=32, eos_id=self.L.attn_pretrained_eos_id(h))
            _, ids, err = self.cli(d, prompt_text, "--tokens", "32", "--precision", "bf16")
            self.check(ids == lib, f"{name}: attn generate --precision bf16 --ids = the library's bf16 generation"
                       + ("" if ids == lib else f" ({err or ids} vs {lib})"))
            p = subprocess.run([self.attn, "generate", "--model", d, "--prompt", "x", "--precision", "fp16"],
                               capture_output=True, text=True)
            self.check(p.returncode == 2 and "fp16" in p.stderr, f"{name}: --precision fp16 is a usage error")
            self.L.attn_pretrained_free(h)

    def check_sampling(self, d):
        args = ["--tokens", "40", "--temperature", "1.5", "--top-k", "200", "--top-p", "0.95"]
        runs = [self.cli(d, "zoë ran", *args, "--seed", s) for s in ("7", "7", "8")]
        a, b, c = (r[1] for r in runs)
        self.check(a is not None and a == b, f"sampling: seed 7 twice gives the same {len(a or [])} ids")
        self.check(a is not None and a != c, "sampling: seeds 7 and 8 differ")
        more = [self.cli(d, "日本語 zoë", "--tokens", "30", "--temperature", "1.5", "--seed", s) for s in "1234"]
        same = all(r[1] is not None and r[0] == self.tok.decode(r[1]) for r in runs + more)
        multi = sum(any(ord(ch) > 127 and ch != "\ufffd" for ch in r[0] or "") for r in runs + more)
        self.check(same and multi > 0, "sampling: streamed text = tokenizer.decode(ids) in 7 runs "
                   f"({multi} with multi-byte characters, invalid bytes as U+FFFD)")
        h, st, msg = self.open(d)
        prompt = self.tok("zoë ran")["input_ids"]
        x = self.generate(h, prompt, max_new_tokens=40, temperature=1.5, top_k=200, top_p=0.95, seed=7,
                          eos_id=self.eos)
        self.check(x == a, "sampling: ctypes generate with seed 7 = attn generate's ids")
        y = self.generate(h, prompt, max_new_tokens=20, temperature=0.7, top_k=1, seed=3)
        z = self.generate(h, prompt, max_new_tokens=20)
        self.check(y == z, "sampling: top_k 1 = greedy")
        self.L.attn_pretrained_free(h)

    def hostile(self, d, label, edit_cfg=None, edit_weights=None, want=()):
        from safetensors.torch import load_file, save_file
        hd = os.path.join(self.out, "hostile_" + label.replace(" ", "_"))
        shutil.copytree(d, hd)
        if edit_cfg:
            p = os.path.join(hd, "config.json")
            with open(p) as f:
                cfg = json.load(f)
            edit_cfg(cfg)
            with open(p, "w") as f:
                json.dump(cfg, f)
        if edit_weights:
            p = os.path.join(hd, "model.safetensors")
            w = load_file(p)
            edit_weights(w)
            save_file(w, p, metadata={"format": "pt"})
        h, st, msg = self.open(hd)
        ok = h is None and all(s in msg for s in want)
        self.check(ok, f"hostile {label}: refused naming {', '.join(want)}: {msg}")
        if h:
            self.L.attn_pretrained_free(h)

    def check_hostile(self, d):
        torch = self.torch

        def drop(w):
            del w["transformer.h.1.mlp.c_fc.bias"]

        def with_head(w):
            w["lm_head.weight"] = w["transformer.wte.weight"].clone()

        def bad_head(w):
            w["lm_head.weight"] = w["transformer.wte.weight"] + 1

        self.hostile(d, "missing tensor", edit_weights=drop, want=("missing", "transformer.h.1.mlp.c_fc.bias"))
        self.hostile(d, "activation relu", edit_cfg=lambda c: c.update(activation_function="relu"),
                     want=("activation_function", "relu"))
        self.hostile(d, "n_layer 100000", edit_cfg=lambda c: c.update(n_layer=100000), want=("n_layer",))
        for key in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention"):
            self.hostile(d, key, edit_cfg=lambda c, k=key: c.update({k: True}), want=(key,))
        self.hostile(d, "untied lm_head", edit_weights=bad_head, want=("lm_head.weight", "tie_word_embeddings"))
        self.hostile(d, "shape", edit_cfg=lambda c: c.update(n_inner=100), want=("n_inner", "c_fc"))
        hd = os.path.join(self.out, "tied_head")
        shutil.copytree(d, hd)
        from safetensors.torch import load_file, save_file
        w = load_file(os.path.join(hd, "model.safetensors"))
        with_head(w)
        w["transformer.h.0.attn.bias"] = torch.ones(1, 1, 64, 64)
        save_file(w, os.path.join(hd, "model.safetensors"), metadata={"format": "pt"})
        h, st, msg = self.open(hd)
        self.check(h is not None, f"lm_head.weight equal to wte and an old attn.bias buffer are accepted {msg}")
        if h:
            self.L.attn_pretrained_free(h)

    def check_unsupported(self, d):
        np, tf = self.np, self.tf
        h, st, msg = self.open(d)
        ids = np.zeros((1, 4), dtype=np.int32)
        lengths = np.array([4], dtype=np.int64)
        out = np.zeros((1, 64), dtype=np.float32)
        st = self.L.attn_pretrained_embed(h, ids.ctypes.data, lengths.ctypes.data, 1, 4, out.ctypes.data)
        msg = self.L.attn_last_error().decode()
        self.check(st == UNSUPPORTED and "gpt2" in msg, f"embed on gpt2: unsupported: {msg}")
        self.L.attn_pretrained_free(h)
        bd = os.path.join(self.out, "bert")
        bert = tf.BertModel(tf.BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                          intermediate_size=64, max_position_embeddings=16))
        bert.save_pretrained(bd, safe_serialization=True)
        h, st, msg = self.open(bd)
        try:
            self.generate(h, [1, 2, 3], max_new_tokens=2)
            msg = "accepted"
        except RuntimeError as e:
            msg = str(e)
        self.check("bert" in msg and "generation" in msg, f"generate on bert: unsupported: {msg}")
        self.L.attn_pretrained_free(h)

    def run(self):
        folders = self.build()
        for name, (d, model) in folders.items():
            self.check_logits(name, d, model)
        for name in ("f32", "bf16"):
            self.check_greedy(name, *folders[name])
        self.check_sampling(folders["f32"][0])
        self.check_hostile(folders["f32"][0])
        self.check_unsupported(folders["f32"][0])


if __name__ == "__main__":
    sys.exit(main())
