"""attn against PyTorch and ONNX Runtime on the same Hugging Face folders: embeddings, prefill, decode, images.

For each folder and thread count it runs `attn bench model --json --rounds 1` (fp32 and bf16)
and, in this process, the same computation through PyTorch 2.x transformers (fp32, and fp32
weights under torch.autocast("cpu", dtype=torch.bfloat16)) and ONNX Runtime (the model
exported once with torch.onnx.export, fp32, all graph optimisations), alternating: every round runs
every implementation once, in a rotated order, so that a shared machine's drift falls on all of
them alike. One table: per cell the median tokens/s over the rounds, [min, max], GFLOP/s (attn's
count, attn_pretrained_flops, for every implementation), the fraction of attn's measured FMA peak
(`attn bench peak` after each cell, the best of the run; bf16 rows: of the bf16 kernels' peak)
and attn's speed-up over each peer.

  embed    an encoder: B x N tokens (all real) -> last hidden state -> mean pooling, as
           attn_pretrained_embed (no tokenizer in the timing)
  prefill  a causal LM: the logits of a P-token prompt (batch 1), as attn_pretrained_logits
  decode   a causal LM, batch 1: greedy steps after a P-token prompt on the model's KV cache
           (PyTorch: past_key_values; ONNX Runtime: not run, the export has no cache); the time per
           new token between the first and the last of T
  image    a ViT (ViTForImageClassification): the logits of B random images, as
           attn_pretrained_classify (no preprocessing in the timing); the table's tokens/s
           are images/s there; ONNX Runtime is not run on it (no export)

Usage (the venv with torch, transformers, onnx, onnxruntime):
  /work/hfvenv/bin/python bench/hf_model_bench.py --make-folders /tmp/hfm
  /work/hfvenv/bin/python bench/hf_model_bench.py --folders /tmp/hfm [--attn build/attn]
      [--models bert-base,minilm,gpt2,llama] [--threads 1,2] [--rounds 5] [--batch 32] [--seq 128]
      [--prompt 128] [--new 64] [--peers torch,torch_bf16,ort] [--no-bf16] [--json]

--make-folders builds random-weight folders (initializer_range 0.02, as trained models' scale) from
configs: bert-base (12 x 768, 12 heads, 3072), minilm (6 x 384, 12 heads, 1536), gpt2 (12 x 768, 12
heads, vocab 50257, 1024 positions), llama (8 x 1024, 16 query / 4 key-value heads, SwiGLU 2816,
vocab 32000, untied), vit-s (ViT-S/16: 12 x 384, 6 heads, 1536, 224 x 224 images in patches of
16, 1000 classes; only with --models vit-s), each with model.safetensors and config.json, and model.onnx
(the exported forward) for ONNX Runtime; a BERT folder also gets a WordPiece tokenizer (tokens "w5",
"w6", ...) so that sentence-transformers can open it.

--mixed N:MEAN:MAX:SEED (or --lengths L,...): the embeddings of one batch of sentences of mixed
lengths, the same list for every implementation (printed), tokens/s counted on the real tokens:
  attn          `attn bench model --lengths ...`: right-padded ids and the lengths, through
                attn_pretrained_embed (the library decides how to run them)
  torch         BertModel on the batch padded to its longest, attention_mask, masked mean pooling
  torch_bf16    the same under torch.autocast("cpu", dtype=torch.bfloat16)
  st_bS         sentence-transformers' encode as it batches: the sentences sorted by length
  st_bf16_bS    (longest first), cut into sub-batches of S (--sub-batch; its default batch_size
                is 32), each padded to its longest and run through SentenceTransformer's own
                forward (Transformer + mean Pooling), the embeddings put back in order. The
                tokenizer is left out (as it is for attn): encode is reproduced on pre-tokenized
                features, and checked once against encode() on text that tokenizes to the same ids
  ort           ONNX Runtime on the padded batch; ort_bS: on the length-sorted sub-batches of S
                (S < N only: one sub-batch of all N is the padded batch)
Before timing, every implementation's embeddings of the same ids are compared with transformers'
fp32 ones (max over rows of |e - ref| / |ref|, printed): an fp32 one above 1e-4 stops the run.
attn's come from libattn.so (next to --attn) through the Python package in python/.
--mixed draws N lengths from a log-normal (sigma 0.6) clipped to [3, MAX], its location fitted so
that the mean is MEAN, and the longest set to MAX (the batch pads to MAX, as the issue's), with
numpy's RandomState(SEED)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = {
    "bert-base": ("bert", dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)),
    "minilm": ("bert", dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536)),
    "gpt2": ("gpt2", dict(n_embd=768, n_layer=12, n_head=12)),
    # a Llama-shaped decoder small enough for two cores: GQA 16 / 4 heads, SwiGLU, untied head
    "llama": ("llama", dict(hidden_size=1024, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=4,
                            intermediate_size=2816, tie_word_embeddings=False)),
    "vit-s": ("vit", dict(hidden_size=384, num_hidden_layers=12, num_attention_heads=6, intermediate_size=1536,
                          image_size=224, patch_size=16, num_labels=1000)),
}
CAUSAL = ("gpt2", "llama", "mistral", "qwen2")


def forward_module():
    import torch

    class Forward(torch.nn.Module):
        """The model called by keyword (its positional arguments differ between versions), one output."""

        def __init__(self, model, names, out):
            super().__init__()
            self.model, self.names, self.out = model, names, out

        def forward(self, *args):
            return getattr(self.model(**dict(zip(self.names, args))), self.out)

    return Forward


def onnx_error(model, path, names, out):
    """The exported graph's relative error against the model on another shape than the traced one."""
    import numpy as np
    import onnxruntime as ort
    import torch
    ids = torch.randint(0, 1000, (3, 40))
    feed = dict(zip(names, (ids.numpy(), np.ones((3, 40), dtype=np.int64))))
    got = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    with torch.no_grad():
        ref = getattr(model(**{k: torch.from_numpy(v) for k, v in feed.items()}), out).numpy()
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


def write_tokenizer(d, vocab_size):
    """A WordPiece tokenizer for a random BERT folder: [PAD] [UNK] [CLS] [SEP] [MASK], then "w5", "w6", ...
    (one token per word), so that the text "w7 w8" is the ids [CLS] 7 8 [SEP]: sentence-transformers
    can open the folder, and a list of ids can be written as text that tokenizes back to it."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(5, vocab_size)]
    tk = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]"))
    tk.normalizer = normalizers.BertNormalizer(lowercase=True)
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tk.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                      special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                            sep_token="[SEP]", mask_token="[MASK]", model_max_length=512).save_pretrained(d)


def make_folders(root, names):
    import torch
    from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
    Forward = forward_module()
    torch.manual_seed(0)
    for name in names:
        if name not in SHAPES:
            raise SystemExit(f"hf_model_bench: unknown model {name!r} (known: {', '.join(SHAPES)})")
        family, kw = SHAPES[name]
        d = os.path.join(root, name)
        os.makedirs(d, exist_ok=True)
        if family == "vit":  # no ONNX export: ONNX Runtime is not a peer of the image rows
            from transformers import ViTConfig, ViTForImageClassification
            ViTForImageClassification(ViTConfig(**kw)).eval().save_pretrained(d, safe_serialization=True)
            print(f"{d}: {family}, {kw}")
            continue
        if family == "bert":
            m = BertModel(BertConfig(vocab_size=30522, max_position_embeddings=512, **kw), add_pooling_layer=False)
            write_tokenizer(d, 30522)
            ids = torch.zeros(2, 16, dtype=torch.long)
            args, names = (ids, torch.ones_like(ids)), ["input_ids", "attention_mask"]
            outs = ["last_hidden_state"]
        else:
            if family == "gpt2":
                m = GPT2LMHeadModel(GPT2Config(vocab_size=50257, n_positions=1024, **kw))
            else:
                m = LlamaForCausalLM(LlamaConfig(vocab_size=32000, max_position_embeddings=2048, **kw))
            ids = torch.zeros(2, 16, dtype=torch.long)
            args, names, outs = (ids, torch.ones_like(ids)), ["input_ids", "attention_mask"], ["logits"]
        m.eval().save_pretrained(d, safe_serialization=True)
        # the TorchScript exporter (the dynamo one needs onnxscript) traces the eager attention
        # correctly; transformers 5's SDPA mask path comes out wrong at other shapes
        m = type(m).from_pretrained(d, attn_implementation="eager").eval()
        if family in CAUSAL:
            m.config.use_cache = False
        dyn = {n: {0: "batch", 1: "seq"} for n in names + outs}
        path = os.path.join(d, "model.onnx")
        try:
            with torch.no_grad():
                torch.onnx.export(Forward(m, names, outs[0]).eval(), args, path, input_names=names, output_names=outs,
                                  dynamic_axes=dyn, opset_version=17, dynamo=False)
            err = onnx_error(m, path, names, outs[0])
        except Exception as e:  # noqa: BLE001 - any exporter failure only drops ONNX Runtime for this folder
            err = f"{type(e).__name__}: {str(e)[:160]}"
        if not isinstance(err, float) or err > 1e-4:
            if os.path.exists(path):
                os.remove(path)
            print(f"{d}: no model.onnx (ONNX Runtime is not run on it): export {err}")
        print(f"{d}: {family}, {kw}")


class Peers:
    """The PyTorch and ONNX Runtime sides of one folder; each call returns seconds per unit."""

    def __init__(self, folder, a):
        import numpy as np
        import torch
        from transformers import AutoConfig, AutoModel, AutoModelForCausalLM
        self.a, self.torch, self.np = a, torch, np
        cfg = AutoConfig.from_pretrained(folder)
        self.causal = cfg.model_type in CAUSAL
        self.image = cfg.model_type == "vit"
        if self.image:  # B random images of the configured size, the classifier's logits
            from transformers import ViTForImageClassification
            self.model = ViTForImageClassification.from_pretrained(folder).eval()
            self.batch, self.seq = a.batch, None
            g = torch.Generator().manual_seed(1)
            self.pixels = torch.randn(a.batch, 3, cfg.image_size, cfg.image_size, generator=g)
            self.onnx, self.sessions = os.path.join(folder, "model.onnx"), {}
            return
        # the encoder as attn runs it: no pooler (BertModel's pooler is not part of the embeddings)
        kw = {} if self.causal else {"add_pooling_layer": False}
        self.model = (AutoModelForCausalLM if self.causal else AutoModel).from_pretrained(folder, **kw).eval()
        g = torch.Generator().manual_seed(1)
        # a causal LM's prefill is a prompt's: batch 1 x --prompt tokens
        self.batch, self.seq = (1, a.prompt) if self.causal else (a.batch, a.seq)
        self.ids = torch.randint(0, cfg.vocab_size, (self.batch, self.seq), generator=g)
        self.prompt = torch.randint(0, cfg.vocab_size, (1, a.prompt), generator=g)
        self.mask = torch.ones_like(self.ids)
        self.onnx = os.path.join(folder, "model.onnx")
        self.sessions = {}

    def _embed(self):
        h = self.model(input_ids=self.ids, attention_mask=self.mask).last_hidden_state
        m = self.mask.unsqueeze(-1).to(h.dtype)
        return (h * m).sum(1) / m.sum(1)

    def run(self, impl, threads):
        torch = self.torch
        torch.set_num_threads(threads)
        if impl == "ort":
            return self._ort(threads)
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if impl == "torch_bf16" else torch.autocast("cpu",
                                                                                                     enabled=False)
        with torch.inference_mode(), ctx:
            t0 = time.perf_counter()
            if self.image:
                self.model(pixel_values=self.pixels).logits
            elif not self.causal:
                self._embed()
            elif self.op == "prefill":
                self.model(input_ids=self.ids).logits
            else:
                return self._decode()
            return time.perf_counter() - t0

    def _decode(self):
        out = self.model(input_ids=self.prompt, use_cache=True)
        past, tok = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
        t0 = time.perf_counter()
        for _ in range(self.a.new - 1):
            out = self.model(input_ids=tok, past_key_values=past, use_cache=True)
            past, tok = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
        return (time.perf_counter() - t0) / (self.a.new - 1)

    def _ort(self, threads):
        import onnxruntime as ort
        if self.op in ("decode", "image") or not os.path.exists(self.onnx):
            return None
        s = self.sessions.get(threads)
        if s is None:
            o = ort.SessionOptions()
            o.intra_op_num_threads = threads
            o.inter_op_num_threads = 1
            o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            s = self.sessions[threads] = ort.InferenceSession(self.onnx, o, providers=["CPUExecutionProvider"])
        feed = {"input_ids": self.ids.numpy(), "attention_mask": self.mask.numpy()}
        t0 = time.perf_counter()
        h = s.run(None, feed)[0]
        if not self.causal:
            h.mean(1)  # every token is real: the masked mean is the mean
        return time.perf_counter() - t0


def draw_lengths(spec):
    """--mixed N:MEAN:MAX:SEED -> N lengths (see the module's help)."""
    import math

    import numpy as np
    try:
        n, mean, top, seed = (int(x) for x in spec.split(":"))
    except ValueError:
        raise SystemExit(f"hf_model_bench: --mixed wants N:MEAN:MAX:SEED (integers), got {spec!r}")
    if not (1 <= n <= 4096 and 3 <= mean <= top and top <= 4096):
        raise SystemExit(f"hf_model_bench: --mixed {spec}: wants 1 <= N <= 4096 and 3 <= MEAN <= MAX <= 4096")
    z = np.random.RandomState(seed).standard_normal(n)

    def lengths(mu):
        v = np.clip(np.rint(np.exp(mu + 0.6 * z)), 3, top).astype(int)
        v[np.argmax(v)] = top
        return v

    lo, hi = 0.0, math.log(top) + 6  # the mean grows with mu: bisect for MEAN
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if lengths(mid).mean() < mean else (lo, mid)
    best = min((lengths(lo), lengths(hi)), key=lambda v: abs(v.mean() - mean))
    return [int(x) for x in best]


class Mixed:
    """The peers of one mixed-length batch (--mixed): ids [B, max] right-padded, each call returns
    the seconds of one batch; embeddings(impl) the [B, H] result, for the check."""

    def __init__(self, folder, a, lengths):
        import numpy as np
        import torch
        from transformers import AutoModel, AutoTokenizer
        self.a, self.np, self.torch, self.lengths, self.folder = a, np, torch, lengths, folder
        self.model = AutoModel.from_pretrained(folder, add_pooling_layer=False).eval()
        if self.model.config.model_type in CAUSAL:
            raise SystemExit(f"hf_model_bench: --mixed is for encoders; {folder} is a causal LM")
        B, N = len(lengths), max(lengths)
        self.tok = None
        try:
            self.tok = AutoTokenizer.from_pretrained(folder)
        except Exception as e:  # noqa: BLE001 - no tokenizer only drops sentence-transformers' text check
            print(f"{folder}: no tokenizer ({type(e).__name__}): sentence-transformers is not run")
        V = self.model.config.vocab_size
        special = set(self.tok.all_special_ids) if self.tok else set()
        pool = np.array([i for i in range(V) if i not in special])
        rng = np.random.RandomState(1)
        ids = np.zeros((B, N), dtype=np.int64)
        for b, n in enumerate(lengths):
            ids[b, :n] = pool[rng.randint(0, len(pool), n)]
            if self.tok is not None and self.tok.cls_token_id is not None and n >= 2:
                ids[b, 0], ids[b, n - 1] = self.tok.cls_token_id, self.tok.sep_token_id
        self.ids = ids
        self.mask = (np.arange(N)[None, :] < np.array(lengths)[:, None]).astype(np.int64)
        # sentence-transformers' order: longest first (np.argsort of minus the lengths, as encode)
        self.order = np.argsort([-n for n in lengths])
        self.unorder = np.argsort(self.order)
        self.st = self._sentence_transformer() if self.tok is not None else None
        self.onnx = os.path.join(folder, "model.onnx")
        self.sessions = {}

    def _sentence_transformer(self):
        import logging
        from sentence_transformers import SentenceTransformer
        logging.getLogger("sentence_transformers").setLevel(logging.ERROR)  # "creating mean pooling"
        return SentenceTransformer(self.folder, device="cpu")

    def sub_batches(self, S):
        """The length-sorted sub-batches of S rows, each cut to its longest: (ids, mask) arrays."""
        out = []
        for i in range(0, len(self.order), S):
            rows = self.order[i:i + S]
            n = max(self.lengths[r] for r in rows)
            out.append((self.ids[rows, :n], self.mask[rows, :n]))
        return out

    def impls(self):
        names = []
        for p in self.a.peers:
            if p in ("torch", "torch_bf16"):
                names.append(p)
            elif p in ("st", "st_bf16") and self.st is not None:
                names += [f"{p}_b{S}" for S in self.a.sub_batch]
            elif p == "ort" and os.path.exists(self.onnx):
                names += ["ort"] + [f"ort_b{S}" for S in self.a.sub_batch if S < len(self.lengths)]
        return names

    def embeddings(self, impl, threads):
        """impl's [B, H] float64 embeddings of the batch (not timed)."""
        self.torch.set_num_threads(threads)
        if impl.startswith("ort"):
            return self._ort(impl, threads)
        bf16 = "bf16" in impl
        ctx = self.torch.autocast("cpu", dtype=self.torch.bfloat16, enabled=bf16)
        with self.torch.inference_mode(), ctx:
            if impl.startswith("st"):
                S = int(impl.rsplit("_b", 1)[1])
                parts = []
                for ids, mask in self.sub_batches(S):  # SentenceTransformer's forward, as encode calls it
                    f = {"input_ids": self.torch.from_numpy(ids), "attention_mask": self.torch.from_numpy(mask)}
                    parts.append(self.st(f)["sentence_embedding"])
                e = self.torch.cat(parts)[self.torch.from_numpy(self.unorder)]
            else:
                ids, mask = self.torch.from_numpy(self.ids), self.torch.from_numpy(self.mask)
                h = self.model(input_ids=ids, attention_mask=mask).last_hidden_state
                m = mask.unsqueeze(-1).to(h.dtype)
                e = (h * m).sum(1) / m.sum(1)
        return e.float().numpy().astype(self.np.float64)

    def run(self, impl, threads):
        t0 = time.perf_counter()
        self.embeddings(impl, threads)
        return time.perf_counter() - t0

    def _ort(self, impl, threads):
        import onnxruntime as ort
        np = self.np
        s = self.sessions.get(threads)
        if s is None:
            o = ort.SessionOptions()
            o.intra_op_num_threads = threads
            o.inter_op_num_threads = 1
            o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            s = self.sessions[threads] = ort.InferenceSession(self.onnx, o, providers=["CPUExecutionProvider"])
        parts = [(self.ids, self.mask)] if impl == "ort" else self.sub_batches(int(impl.rsplit("_b", 1)[1]))
        out = []
        for ids, mask in parts:
            h = s.run(None, {"input_ids": ids, "attention_mask": mask})[0]
            m = mask[:, :, None].astype(h.dtype)
            out.append((h * m).sum(1) / m.sum(1))
        e = np.concatenate(out)
        return (e if impl == "ort" else e[self.unorder]).astype(np.float64)

    def check_encode(self):
        """sentence-transformers' encode() on text that tokenizes to these ids against the
        sub-batch reproduction: max |difference| (None when the tokenizer does not give the ids back)."""
        np = self.np
        texts = [self.tok.convert_tokens_to_string(self.tok.convert_ids_to_tokens(self.ids[b, 1:n - 1].tolist()))
                 for b, n in enumerate(self.lengths)]
        back = self.tok(texts)["input_ids"]
        if any(list(back[b]) != self.ids[b, :n].tolist() for b, n in enumerate(self.lengths)):
            return None
        S = self.a.sub_batch[0]
        got = self.st.encode(texts, batch_size=S, convert_to_numpy=True).astype(np.float64)
        return float(np.abs(got - self.embeddings(f"st_b{S}", 1)).max())


def attn_embeddings(a, m, precision):
    """attn's embeddings of m's batch through libattn.so next to --attn (the Python package)."""

    import numpy as np
    lib_path = os.path.join(os.path.dirname(os.path.abspath(a.attn)), "libattn.so")
    if not os.path.exists(lib_path):
        raise SystemExit(f"hf_model_bench: the check needs {lib_path} (build the shared library)")
    os.environ["ATTN_LIBRARY"] = lib_path
    sys.path.insert(0, os.path.join(HERE, "..", "python"))
    import attn
    model = attn.from_pretrained(m.folder)
    if attn._lib.lib.attn_pretrained_set_precision(model._h(), 1 if precision == "bf16" else 0):
        raise SystemExit(f"hf_model_bench: attn_pretrained_set_precision {precision} failed")
    return model.embed(m.ids.astype(np.int32), np.array(m.lengths, dtype=np.int64)).astype(np.float64)


def check_mixed(a, m, impls):
    """Every implementation's embeddings against transformers' fp32 (float32) on the same ids."""
    np = m.np
    t = a.threads[0]
    ref = m.embeddings("torch", t)

    def err(e):
        return float(np.max(np.linalg.norm(e - ref, axis=1) / np.linalg.norm(ref, axis=1)))

    errs = {}
    for impl in impls:
        if impl.startswith("attn"):
            e = attn_embeddings(a, m, "bf16" if impl == "attn_bf16" else "fp32")
        else:
            e = m.embeddings(impl, t)
        errs[impl] = err(e) if np.all(np.isfinite(e)) else float("nan")
    print("check against transformers fp32 (max over rows of |e - ref| / |ref|): " +
          ", ".join(f"{k} {v:.2e}" for k, v in errs.items()))
    if m.st is not None:
        d = m.check_encode()
        print("sentence-transformers encode() on text against its reproduction here: " +
              ("not checked (the tokenizer does not give the ids back)" if d is None else f"max |diff| {d:.2e}"))
        if d is not None and not d <= 1e-5:
            raise SystemExit("hf_model_bench: the sub-batch reproduction of encode() is not encode()")
    bad = [k for k, v in errs.items() if "bf16" not in k and not v <= 1e-4]
    if bad:
        raise SystemExit(f"hf_model_bench: fp32 embeddings off transformers' by more than 1e-4: {bad}")


def bench_mixed(a, name, folder, lengths, results):
    m = Mixed(folder, a, lengths)
    impls = ["attn"] + (["attn_bf16"] if a.bf16 else []) + m.impls()
    check_mixed(a, m, impls)
    cmd_lengths = ",".join(str(n) for n in lengths)
    for t in a.threads:
        cells = {i: [] for i in impls}
        tokens = flops = None
        for impl in impls:
            if not impl.startswith("attn"):
                m.run(impl, t)
        for rnd in range(a.rounds):
            order = impls[rnd % len(impls):] + impls[:rnd % len(impls)]
            for impl in order:
                if impl.startswith("attn"):
                    s, row = attn_cmd(a, None, folder, "embed", t, "bf16" if impl == "attn_bf16" else "fp32",
                                      cmd_lengths)
                    if row.get("lengths") != lengths:
                        raise SystemExit(f"hf_model_bench: attn ran lengths {row.get('lengths')}, not {lengths}")
                    flops, tokens = row["gflops"] * 1e9 * s, row["tokens_per_s"] * s
                else:
                    s = m.run(impl, t)
                cells[impl].append(s)
        f32_peak, bf16_peak = peak(a, t, True)
        for impl in impls:
            med = statistics.median(cells[impl])
            bf = "bf16" in impl
            results.append(dict(model=name, op="mixed", impl=impl, threads=t, rounds=len(cells[impl]),
                                tokens_per_s=tokens / med, tokens_per_s_min=tokens / max(cells[impl]),
                                tokens_per_s_max=tokens / min(cells[impl]), gflops=flops / med * 1e-9,
                                peak_fraction=flops / med * 1e-9 / (bf16_peak if bf else f32_peak)))
            if a.json:
                print(json.dumps(results[-1]), flush=True)


def attn_cmd(a, peers, folder, op, threads, precision, lengths=None):
    cmd = [a.attn, "bench", "model", "--model", folder, "--threads", str(threads), "--rounds", "1", "--json",
           "--precision", precision]
    if op == "image":  # an image model refuses the text options
        cmd += ["--batch", str(peers.batch)]
    else:
        cmd += ["--prompt", str(a.prompt), "--new", str(a.new)]
        cmd += ["--lengths", lengths] if lengths else ["--batch", str(peers.batch), "--seq", str(peers.seq)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"hf_model_bench: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr.strip()}")
    rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    r = next(r for r in rows if r["op"] == "model_" + op)
    return r["ms"] * 1e-3, r


PEAKS = {}


def peak(a, threads, bf16):
    """The FMA and bf16 peaks with this many threads: the best measured so far in this run (a
    neighbour only lowers a peak loop's speed, so the best sitting is the capability)."""
    cmd = [a.attn, "bench", "peak", "--threads", str(threads), "--json"] + (["--dtype", "f32,bf16"] if bf16 else [])
    rows = [json.loads(line) for line in subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            .splitlines() if line.startswith("{")]
    f32 = next(r["gflops"] for r in rows if r["op"] == "fma_peak")
    b16 = [r["gflops"] for r in rows if r["op"] in ("amx_peak", "bf16_peak")]
    old = PEAKS.get(threads, (0.0, 0.0))
    PEAKS[threads] = (max(old[0], f32), max(old[1], b16[-1] if b16 else f32))
    return PEAKS[threads]


def bench_folder(a, name, folder, results):
    peers = Peers(folder, a)
    ops = ["image"] if peers.image else ["prefill", "decode"] if peers.causal else ["embed"]
    impls = ["attn"] + (["attn_bf16"] if a.bf16 else []) + a.peers
    for op in ops:
        peers.op = op
        for t in a.threads:
            cells = {i: [] for i in impls}
            flops, tokens = None, None
            for impl in impls:  # warm-up: weights paged in, workspaces grown, ORT session built
                if not impl.startswith("attn"):
                    peers.run(impl, t)
            for rnd in range(a.rounds):
                order = impls[rnd % len(impls):] + impls[:rnd % len(impls)]
                for impl in order:
                    if impl.startswith("attn"):
                        s, row = attn_cmd(a, peers, folder, op, t, "bf16" if impl == "attn_bf16" else "fp32")
                        flops = row["gflops"] * 1e9 * s
                        tokens = row.get("tokens_per_s", row.get("images_per_s")) * s
                    else:
                        s = peers.run(impl, t)
                    if s is not None:
                        cells[impl].append(s)
            f32_peak, bf16_peak = peak(a, t, a.bf16 or "torch_bf16" in a.peers)
            for impl in impls:
                if not cells[impl]:
                    continue
                med = statistics.median(cells[impl])
                bf = impl.endswith("bf16")
                results.append(dict(model=name, op=op, impl=impl, threads=t, rounds=len(cells[impl]),
                                    tokens_per_s=tokens / med, tokens_per_s_min=tokens / max(cells[impl]),
                                    tokens_per_s_max=tokens / min(cells[impl]), gflops=flops / med * 1e-9,
                                    peak_fraction=flops / med * 1e-9 / (bf16_peak if bf else f32_peak)))
                if a.json:
                    print(json.dumps(results[-1]), flush=True)


def print_table(results):
    for r in results:  # every row against the best peak of the whole run
        r["peak_fraction"] = r["gflops"] / PEAKS[r["threads"]][1 if "bf16" in r["impl"] else 0]
    print(f"{'model':<10} {'op':<8} {'impl':<13} {'thr':>3} {'tokens/s':>10} {'[min':>10} {'max]':>9} "
          f"{'GFLOP/s':>8} {'peak':>6} {'attn /':>8}")

    def cell(r, impl):
        return next((x for x in results if (x["model"], x["op"], x["threads"]) == (r["model"], r["op"], r["threads"])
                     and x["impl"] == impl), None)

    for r in results:  # a bf16 peer against attn bf16 where attn ran it, else against attn fp32
        base = ("bf16" in r["impl"] and cell(r, "attn_bf16")) or cell(r, "attn")
        ratio = base["tokens_per_s"] / r["tokens_per_s"]
        print(f"{r['model']:<10} {r['op']:<8} {r['impl']:<13} {r['threads']:>3} {r['tokens_per_s']:>10.1f} "
              f"{r['tokens_per_s_min']:>10.1f} {r['tokens_per_s_max']:>9.1f} {r['gflops']:>8.1f} "
              f"{100 * r['peak_fraction']:>5.1f}% {ratio:>7.2f}x")
    for r in results:  # per cell: attn over the fastest peer, fp32 and bf16 (medians)
        if r["impl"] not in ("attn", "attn_bf16"):
            continue
        bf = r["impl"] == "attn_bf16"
        peers = [x for x in results if (x["model"], x["op"], x["threads"]) == (r["model"], r["op"], r["threads"])
                 and not x["impl"].startswith("attn") and ("bf16" in x["impl"]) == bf]
        if peers:
            best = max(peers, key=lambda x: x["tokens_per_s"])
            print(f"{r['model']} {r['op']} {r['threads']} thr: {r['impl']} / best {'bf16' if bf else 'fp32'} peer "
                  f"({best['impl']}) = {r['tokens_per_s'] / best['tokens_per_s']:.2f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--make-folders", metavar="DIR", help="build the random-weight folders in DIR and exit")
    ap.add_argument("--folders", metavar="DIR", help="the folders --make-folders built")
    ap.add_argument("--attn", default=os.path.join(HERE, "..", "build", "attn"))
    ap.add_argument("--models", default="bert-base,minilm,gpt2,llama")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--peers", default=None, help="torch,torch_bf16,ort (--mixed: and st,st_bf16)")
    ap.add_argument("--mixed", metavar="N:MEAN:MAX:SEED", help="one mixed-length embeddings batch (e.g. 32:40:128:0)")
    ap.add_argument("--lengths", metavar="L,...", help="the mixed batch's lengths given, instead of --mixed")
    ap.add_argument("--sub-batch", default="32,8", help="--mixed: sub-batch sizes of the length-sorted peers")
    ap.add_argument("--no-bf16", dest="bf16", action="store_false", help="no attn bf16 rows")
    ap.add_argument("--json", action="store_true", help="one JSON object per cell as it is measured")
    a = ap.parse_args()
    if a.make_folders:
        make_folders(a.make_folders, a.models.split(","))
        return 0
    if not a.folders:
        raise SystemExit("hf_model_bench: --folders DIR (or --make-folders DIR) is required")
    a.threads = [int(t) for t in a.threads.split(",")]
    mixed = a.mixed or a.lengths
    a.peers = [p for p in (a.peers or ("torch,torch_bf16,st,st_bf16,ort" if mixed else "torch,torch_bf16,ort"))
               .split(",") if p]
    unknown = set(a.peers) - {"torch", "torch_bf16", "ort"} - ({"st", "st_bf16"} if mixed else set())
    if unknown or not 1 <= a.rounds <= 1000 or a.new < 2:
        raise SystemExit(f"hf_model_bench: bad --peers {sorted(unknown)}, --rounds or --new")
    results = []
    if mixed:
        try:
            lengths = draw_lengths(a.mixed) if a.mixed else [int(x) for x in a.lengths.split(",")]
            a.sub_batch = [int(x) for x in a.sub_batch.split(",")]
        except ValueError:
            raise SystemExit(f"hf_model_bench: --lengths / --sub-batch want integers: {a.lengths!r}, {a.sub_batch!r}")
        if not lengths or min(lengths) < 1 or not a.sub_batch or min(a.sub_batch) < 1:
            raise SystemExit("hf_model_bench: --lengths and --sub-batch want integers >= 1")
        print(f"lengths ({len(lengths)} sentences, {sum(lengths)} tokens, mean {sum(lengths) / len(lengths):.2f}, "
              f"max {max(lengths)}): {','.join(map(str, lengths))}", flush=True)
        for name in a.models.split(","):
            if SHAPES.get(name, ("",))[0] == "vit":
                raise SystemExit(f"hf_model_bench: --mixed / --lengths are for text encoders, not {name}")
            bench_mixed(a, name, os.path.join(a.folders, name), lengths, results)
    else:
        for name in a.models.split(","):
            bench_folder(a, name, os.path.join(a.folders, name), results)
    if mixed and not a.json:
        print(f"{a.rounds} rounds alternated; one batch of {len(lengths)} mixed lengths; tokens/s of real tokens")
        print_table(results)
    elif not a.json:
        print(f"{a.rounds} rounds alternated; batch {a.batch} x seq {a.seq}; decode: prompt {a.prompt}, "
              f"{a.new} new tokens, batch 1; image: {a.batch} images, images/s in the tokens/s column")
        print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
