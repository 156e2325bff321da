#!/usr/bin/env python3
"""attn_pretrained's Llama family (model_type llama, mistral, qwen2) against transformers.

    python llama_parity.py LIBATTN_SO OUTDIR

Builds random LlamaForCausalLM / MistralForCausalLM / Qwen2ForCausalLM folders from small configs
(initializer_range 0.3, RMSNorm weights and biases perturbed so that every tensor matters), saved
as safetensors:
  llama3    GQA (4 query heads, 2 key/value heads), untied lm_head, rope_scaling llama3 whose three
            frequency bands are all populated, eos_token_id a list; a byte-level BPE tokenizer.json
  linear    rope_scaling linear written the old way (top-level rope_theta + rope_scaling {"type"}),
            attention_bias and mlp_bias, an explicit head_dim different from hidden / heads
  tied      tie_word_embeddings, multi-query (1 key/value head)
  mistral   sliding_window 8, shorter than the sequences; max_position_embeddings 512 (the cache grows)
  qwen2     q/k/v biases, use_sliding_window with max_window_layers 1 (layer 1 slides, layer 0 not),
            and a copy without layer_types (max_window_layers decides)
  bf16      llama3's weights saved in bfloat16
and checks, against the model loaded by transformers from the same folder in float64 (eager):
  - attn_pretrained_logits of a right-padded batch (lengths 40, 17, 33, 1): relative error
    ||out - ref|| / ||ref|| <= 1e-5 over the real positions, padded rows 0;
  - greedy generation of 32 tokens after a short and a 70-token prompt (two cache chunks) identical
    to model.generate(do_sample=False); a 250-token prompt on mistral (the cache regrown);
  - eos_token_id as a list: generation stops at the first id of the list produced, as transformers';
  - `attn generate --ids` on llama3 (tokenizer.json in the folder) = model.generate;
  - attn_pretrained_capture (every layer "layers.N.self_attn", every head) = output_attentions of
    the eager model within 1e-5: GQA (llama3), multi-query (tied), sliding windows (mistral, qwen2),
    and a head / row subset; `attn viz --model` on llama3 --text writing its CSV (= the same weights),
    HTML and SVG;
  - hostile configs (rope_type yarn, hidden_act gelu, heads not a multiple of key/value heads, a
    missing tensor) refused naming the key or tensor.
The last line is "llama parity: N passed, M failed"; exit status 1 on a failure (0 and a notice when
torch, transformers or tokenizers cannot be imported)."""
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


def main():
    if len(sys.argv) != 3:
        print("usage: llama_parity.py LIBATTN_SO OUTDIR", file=sys.stderr)
        return 2
    try:
        import numpy as np
        import torch
        import transformers
        import tokenizers
    except Exception as e:  # noqa: BLE001 - any import failure means "skip"
        print(f"llama parity: SKIP (cannot import torch / transformers / tokenizers: {e})")
        return 0
    t = Tester(sys.argv[1], sys.argv[2], np, torch, transformers, tokenizers)
    t.run()
    print(f"llama parity: {t.passed} passed, {t.failed} failed")
    return 1 if t.failed else 0


def corpus(n):
    rng = random.Random(5)
    words = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "café", "naïve", "日本語", "data", "model", "x", "42"]
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
        L.attn_pretrained_eos_ids.argtypes = [P, P, ctypes.c_size_t]
        L.attn_pretrained_eos_ids.restype = ctypes.c_size_t
        L.attn_pretrained_logits.argtypes = [P, P, P, I64, I64, P]
        L.attn_pretrained_logits.restype = ctypes.c_int
        declare_generate(L)
        L.attn_pretrained_capture.argtypes = [P, P, I64, P, I64, I64, P]
        L.attn_pretrained_capture.restype = ctypes.c_int
        L.attn_capture_create.argtypes = [ctypes.POINTER(P)]
        L.attn_capture_free.argtypes = [P]
        L.attn_capture_free.restype = None
        L.attn_capture_add.argtypes = [P, ctypes.c_char_p, I64, I64, I64, I64]
        L.attn_capture_find.argtypes = [P, ctypes.c_char_p, P]
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
            return None, self.L.attn_last_error().decode(errors="replace")
        return h, ""

    def logits(self, h, rows):
        np = self.np
        B, n = len(rows), max(len(r) for r in rows)
        V = self.L.attn_pretrained_vocab_size(h)
        ids = np.zeros((B, n), dtype=np.int32)
        for b, r in enumerate(rows):
            ids[b, :len(r)] = r
        lengths = np.array([len(r) for r in rows], dtype=np.int64)
        out = np.full((B, n, V), 7.0, dtype=np.float32)
        st = self.L.attn_pretrained_logits(h, ids.ctypes.data, lengths.ctypes.data, B, n, out.ctypes.data)
        if st:
            raise RuntimeError(self.L.attn_last_error().decode())
        return out

    def generate(self, h, prompt, **kw):
        st, got = generate(self.L, h, prompt, **kw)
        if st:
            raise RuntimeError(self.L.attn_last_error().decode())
        return got

    # ---- the folders ----
    def tokenizer(self, d):
        bpe = self.tk.ByteLevelBPETokenizer()
        bpe.train_from_iterator(corpus(1500), vocab_size=300, min_frequency=2, special_tokens=["<|endoftext|>"])
        tok = self.tf.GPT2TokenizerFast(tokenizer_object=bpe._tokenizer, eos_token="<|endoftext|>",
                                        bos_token="<|endoftext|>", unk_token="<|endoftext|>")
        tok.save_pretrained(d)
        return tok

    def save(self, name, cls, cfg, seed, edit_config=None):
        torch = self.torch
        d = os.path.join(self.out, name)
        os.makedirs(d, exist_ok=True)
        torch.manual_seed(seed)
        model = cls(cfg).eval()
        with torch.no_grad():  # norms away from 1, biases nonzero: every tensor matters
            for pname, p in model.named_parameters():
                if pname.endswith("bias") or "norm" in pname:
                    p.add_(0.1 * torch.randn_like(p))
        model.save_pretrained(d, safe_serialization=True)
        if edit_config:
            p = os.path.join(d, "config.json")
            with open(p) as f:
                c = json.load(f)
            edit_config(c)
            with open(p, "w") as f:
                json.dump(c, f, indent=1)
        return d, model

    def ref(self, d):
        """The reference: transformers' own reading of the folder, in float64."""
        m = self.tf.AutoModelForCausalLM.from_pretrained(d, attn_implementation="eager")
        return m.to(self.torch.float64).eval()

    def build(self):
        tf, torch = self.tf, self.torch
        base = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                    initializer_range=0.3, rms_norm_eps=1e-5)
        folders = {}
        d = os.path.join(self.out, "llama3")
        os.makedirs(d)
        self.tok = self.tokenizer(d)
        self.eos = self.tok.convert_tokens_to_ids("<|endoftext|>")
        cfg = tf.LlamaConfig(**base, tie_word_embeddings=False, eos_token_id=[self.eos, 299], bos_token_id=self.eos,
                             rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                           "high_freq_factor": 4.0, "original_max_position_embeddings": 32,
                                           "rope_theta": 10000.0})
        folders["llama3"] = self.save("llama3", tf.LlamaForCausalLM, cfg, 0)

        def old_style(c):  # transformers 4's keys, as most published checkpoints have them
            rp = c.pop("rope_parameters", None) or {}  # transformers 4 saved rope_theta at the top
            c["rope_theta"] = rp.get("rope_theta", c.get("rope_theta", 500.0))
            c["rope_scaling"] = {"type": "linear", "factor": 2.0}
        cfg = tf.LlamaConfig(**dict(base, num_key_value_heads=4), head_dim=24, attention_bias=True, mlp_bias=True,
                             rope_scaling={"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0})
        folders["linear"] = self.save("linear", tf.LlamaForCausalLM, cfg, 1, old_style)
        cfg = tf.LlamaConfig(**dict(base, num_key_value_heads=1), tie_word_embeddings=True)
        folders["tied"] = self.save("tied", tf.LlamaForCausalLM, cfg, 2)
        cfg = tf.MistralConfig(**dict(base, max_position_embeddings=512), sliding_window=8)
        folders["mistral"] = self.save("mistral", tf.MistralForCausalLM, cfg, 3)
        cfg = tf.Qwen2Config(**base, use_sliding_window=True, sliding_window=6, max_window_layers=1)
        folders["qwen2"] = self.save("qwen2", tf.Qwen2ForCausalLM, cfg, 4)
        dmw = os.path.join(self.out, "qwen2_mwl")  # without layer_types: max_window_layers decides
        shutil.copytree(folders["qwen2"][0], dmw)
        with open(os.path.join(dmw, "config.json")) as f:
            c = json.load(f)
        c.pop("layer_types", None)
        with open(os.path.join(dmw, "config.json"), "w") as f:
            json.dump(c, f)
        folders["qwen2_mwl"] = (dmw, None)
        dbf = os.path.join(self.out, "bf16")
        shutil.copytree(folders["llama3"][0], dbf)
        os.remove(os.path.join(dbf, "model.safetensors"))
        import copy
        copy.deepcopy(folders["llama3"][1]).to(torch.bfloat16).save_pretrained(dbf, safe_serialization=True)
        folders["bf16"] = (dbf, None)
        return folders

    # ---- the checks ----
    def check_logits(self, name, d):
        torch, np = self.torch, self.np
        ref = self.ref(d)
        h, msg = self.open(d)
        if not h:
            self.check(False, f"{name}: open: {msg}")
            return
        fam = self.L.attn_pretrained_family(h).decode()
        rng = random.Random(1)
        rows = [[rng.randrange(300) for _ in range(n)] for n in (40, 17, 33, 1)]
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
        want_fam = name.split("_")[0] if name.startswith(("mistral", "qwen2")) else "llama"
        self.check(fam == want_fam and err <= TOL and pad_zero,
                   f"{name}: logits of a padded batch (lengths 40, 17, 33, 1) vs float64: rel err {err:.2e} ({fam})")
        self.L.attn_pretrained_free(h)

    def hf_generate(self, ref, prompt, n, eos=None):
        torch = self.torch
        kw = {} if eos is None else {"eos_token_id": eos}
        with torch.no_grad():
            out = ref.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=n, min_new_tokens=0,
                               pad_token_id=0, attention_mask=torch.ones(1, len(prompt), dtype=torch.long), **kw)
        return out[0, len(prompt):].tolist()

    def check_greedy(self, name, d, prompt_lens=(9, 70)):
        ref = self.ref(d)
        h, msg = self.open(d)
        if not h:
            self.check(False, f"{name}: open: {msg}")
            return
        rng = random.Random(len(name))
        for n in prompt_lens:
            prompt = [rng.randrange(300) for _ in range(n)]
            hf = self.hf_generate(ref, prompt, 32)
            lib = self.generate(h, prompt, max_new_tokens=32, eos_id=self.L.attn_pretrained_eos_id(h))
            self.check(lib == hf, f"{name}: greedy after a {n}-token prompt = model.generate ({len(hf)} ids)"
                       + ("" if lib == hf else f": attn {lib}, transformers {hf}"))
        self.L.attn_pretrained_free(h)

    def check_eos_list(self, d):
        """A copy whose eos_token_id lists a token greedy generation produces: both stop there."""
        ref = self.ref(d)
        prompt = [5, 17, 99, 3, 250, 41]
        ref.generation_config.eos_token_id = None  # no stop: the tokens an eos list will cut
        free = self.hf_generate(ref, prompt, 32)
        stop = free[6]
        ed = os.path.join(self.out, "eos_list")
        shutil.copytree(d, ed)
        p = os.path.join(ed, "config.json")
        with open(p) as f:
            c = json.load(f)
        c["eos_token_id"] = [298, stop, 297]
        with open(p, "w") as f:
            json.dump(c, f)
        gp = os.path.join(ed, "generation_config.json")
        if os.path.exists(gp):
            os.remove(gp)
        hf = self.hf_generate(self.ref(ed), prompt, 32)
        h, msg = self.open(ed)
        ids = (ctypes.c_int32 * 4)()
        count = self.L.attn_pretrained_eos_ids(h, ids, 4) if h else 0
        first = self.L.attn_pretrained_eos_id(h) if h else None
        lib = self.generate(h, prompt, max_new_tokens=32, eos_id=first) if h else None
        cut = min(i for i, t in enumerate(free) if t in (298, stop, 297))
        want = free[:cut + 1]
        self.check(count == 3 and list(ids)[:3] == [298, stop, 297] and first == 298,
                   f"eos list: attn_pretrained_eos_ids = {list(ids)[:count]}, eos_id {first}")
        self.check(lib == hf == want and len(want) < 32,
                   f"eos list: generation stops at {stop}, the list's second id, after {len(want)} tokens as "
                   f"model.generate ({lib} / {hf})")
        if h:
            self.L.attn_pretrained_free(h)
        return ed

    def check_cli(self, d):
        ref = self.ref(d)
        text = "the cat sat on café 日本語"
        prompt = self.tok(text)["input_ids"]
        hf = self.hf_generate(ref, prompt, 32)
        p = subprocess.run([self.attn, "generate", "--model", d, "--prompt", text, "--tokens", "32", "--ids"],
                           capture_output=True)
        ids = None
        if p.returncode == 0:
            ids = [int(x) for x in p.stdout.rstrip(b"\n").rsplit(b"\n", 1)[-1].split()]
        self.check(ids == hf, f"attn generate --ids on llama3 = model.generate ({len(hf)} ids)"
                   + ("" if ids == hf else f": {ids} / {hf} {p.stderr.decode(errors='replace')}"))

    def hostile(self, d, label, edit_cfg=None, drop=None, want=()):
        hd = os.path.join(self.out, "hostile_" + label.replace(" ", "_"))
        shutil.copytree(d, hd)
        if edit_cfg:
            p = os.path.join(hd, "config.json")
            with open(p) as f:
                cfg = json.load(f)
            edit_cfg(cfg)
            with open(p, "w") as f:
                json.dump(cfg, f)
        if drop:
            from safetensors.torch import load_file, save_file
            p = os.path.join(hd, "model.safetensors")
            w = load_file(p)
            del w[drop]
            save_file(w, p, metadata={"format": "pt"})
        h, msg = self.open(hd)
        self.check(h is None and all(s in msg for s in want), f"hostile {label}: refused naming {', '.join(want)}: "
                   + msg)
        if h:
            self.L.attn_pretrained_free(h)

    def check_hostile(self, d):
        def yarn(c):
            c["rope_parameters"] = {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0}
        self.hostile(d, "rope yarn", yarn, want=("rope_parameters.rope_type", "yarn"))
        self.hostile(d, "gelu", lambda c: c.update(hidden_act="gelu"), want=("hidden_act", "gelu"))
        self.hostile(d, "kv heads 3", lambda c: c.update(num_key_value_heads=3), want=("num_key_value_heads",))
        self.hostile(d, "missing tensor", drop="model.layers.1.self_attn.k_proj.weight",
                     want=("missing", "model.layers.1.self_attn.k_proj.weight"))

    # ---- attention capture ----
    def capture(self, h, ids, pattern=b"*", heads=(0, 0), rows=(0, 0), layers=2):
        np = self.np

        class Rec(ctypes.Structure):
            _fields_ = [("module", ctypes.c_char_p)] + [(k, ctypes.c_int64) for k in (
                "batch", "heads", "rows", "nk", "head0", "row0", "num_heads", "nq")] + [
                ("weights", ctypes.POINTER(ctypes.c_float))]
        cap = ctypes.c_void_p()
        self.L.attn_capture_create(ctypes.byref(cap))
        self.L.attn_capture_add(cap, pattern, heads[0], heads[1], rows[0], rows[1])
        try:
            a = np.ascontiguousarray(ids, np.int32)
            if self.L.attn_pretrained_capture(h, a.ctypes.data, len(a), None, 0, 0, cap):
                return None, self.L.attn_last_error().decode()
            out = []
            for layer in range(layers):
                r = Rec()
                if self.L.attn_capture_find(cap, f"layers.{layer}.self_attn".encode(), ctypes.byref(r)):
                    return None, self.L.attn_last_error().decode()
                n = r.batch * r.heads * r.rows * r.nk
                out.append(np.ctypeslib.as_array(r.weights, (n,)).reshape(r.heads, r.rows, r.nk).copy())
            return out, ""
        finally:
            self.L.attn_capture_free(cap)

    def rel(self, a, b):
        np = self.np
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        if a.shape != b.shape or not np.isfinite(a).all():
            return float("inf")
        return float(np.linalg.norm(a - b) / np.linalg.norm(b))

    def ref_attentions(self, d, ids):
        with self.torch.no_grad():
            out = self.ref(d)(self.torch.tensor([ids]), output_attentions=True)
        return [a[0].numpy() for a in out.attentions]

    def check_capture(self, name, d, n=20):
        h, msg = self.open(d)
        if not h:
            self.check(False, f"{name}: open: {msg}")
            return
        try:
            rng = random.Random(7)
            ids = [rng.randrange(300) for _ in range(n)]
            ref = self.ref_attentions(d, ids)
            recs, msg = self.capture(h, ids)
            errs = [self.rel(a, b) for a, b in zip(recs, ref)] if recs else [float("inf")]
            ok = recs is not None and len(recs) == len(ref) and all(e <= TOL for e in errs)
            self.check(ok, f"{name}: capture of every layer and head ({n} tokens) = output_attentions, rel errs "
                       f"{['%.1e' % e for e in errs]} {msg}")
            # layer 0 is not asked for: its find must fail
            sub, msg = self.capture(h, ids, b"layers.1.*", layers=2)
            self.check(sub is None and "layers.0.self_attn" in msg, f"{name}: capture of layers.1 only: {msg}")
            cap1, msg = self.capture(h, ids, b"layers.*.self_attn", heads=(1, 2), rows=(5, 9), layers=1)
            e = self.rel(cap1[0], ref[0][1:3, 5:14]) if cap1 else float("inf")
            self.check(e <= TOL, f"{name}: capture of heads 1-2, rows 5-13: rel err {e:.1e} {msg}")
            bad, msg = self.capture(h, ids, b"*", heads=(3, 5), layers=1)
            self.check(bad is None and "heads" in msg, f"{name}: capture past the heads refused: {msg}")
        finally:
            self.L.attn_pretrained_free(h)

    def check_viz(self, d):
        import csv
        text = "the cat sat on café 日本語"
        ids = self.tok(text)["input_ids"]
        ref = self.ref_attentions(d, ids)
        base = os.path.join(self.out, "viz_llama3")
        p = subprocess.run([self.attn, "viz", "--model", d, "--text", text, "--csv", base + ".csv", "--html",
                            base + ".html", "--svg", base + ".svg"], capture_output=True, text=True)
        self.check(p.returncode == 0, f"viz --model llama3: exit {p.returncode}: {p.stderr.strip()}")
        written = [q for q in (base + ".csv", base + ".html", base + "-L0-h0.svg")
                   if os.path.isfile(q) and os.path.getsize(q) > 0]
        self.check(len(written) == 3, f"viz --model llama3: outputs written: {written}")
        got = [self.np.zeros_like(r) for r in ref]
        seen = [self.np.zeros(r.shape, bool) for r in ref]
        if os.path.isfile(base + ".csv"):
            with open(base + ".csv") as f:
                for row in csv.DictReader(f):
                    if not row["head"].isdigit() or not row["layer"].lstrip("-").isdigit() or int(row["layer"]) < 0:
                        continue
                    L, hd, q, k = int(row["layer"]), int(row["head"]), int(row["query"]), int(row["key"])
                    got[L][hd, q, k] = float(row["weight"])
                    seen[L][hd, q, k] = True
        errs = [self.rel(a, b) for a, b in zip(got, ref)]
        self.check(all(s.all() for s in seen) and all(e <= TOL for e in errs),
                   f"viz --model llama3 ({len(ids)} tokens): CSV = output_attentions, rel errs "
                   f"{['%.1e' % e for e in errs]}")

    def run(self):
        folders = self.build()
        for name, (d, _) in folders.items():
            self.check_logits(name, d)
        for name in ("llama3", "linear", "tied", "mistral", "qwen2", "bf16"):
            self.check_greedy(name, folders[name][0])
        self.check_greedy("mistral", folders["mistral"][0], prompt_lens=(250,))
        self.check_eos_list(folders["llama3"][0])
        self.check_cli(folders["llama3"][0])
        self.check_hostile(folders["llama3"][0])
        for name in ("llama3", "tied", "mistral", "qwen2"):
            self.check_capture(name, folders[name][0])
        self.check_viz(folders["llama3"][0])


if __name__ == "__main__":
    sys.exit(main())
