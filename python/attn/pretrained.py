"""Hugging Face model folders (attn/pretrained.h) and their tokenizers (attn/tokenizer.h):
``attn.from_pretrained(dir)`` opens a folder as transformers / sentence-transformers save it
(config.json, safetensors weights, tokenizer.json or vocab.txt, sentence-transformers' modules) and
computes what they compute, in float32: token ids, sentence embeddings, hidden states, a causal
LM's logits and generation (GPT-2, Llama, Mistral, Qwen2), and for a ViT folder image
classification and the image's hidden states.

Ids go in as a list of sequences (ragged, padded here) or as a 2-D integer array with ``lengths``
(row b's real tokens are its first lengths[b]; the rest is padding, not read).
"""
from __future__ import annotations

import ctypes
import os
from typing import Callable, List, NamedTuple, Optional, Sequence, Union

import numpy as np

from . import _lib
from ._lib import check, lib

__all__ = ["from_pretrained", "Pretrained", "Tokenizer", "Generation"]

PathLike = Union[str, "os.PathLike[str]"]
_WORKSPACE = 5  # ATTN_ERR_WORKSPACE: the size query of encode / decode
_POOLING = {0: "mean", 1: "cls", 2: "max"}


def _closed(what: str) -> ValueError:
    return ValueError(f"{what}: the object is closed")


class Tokenizer:
    """A folder's tokenizer (tokenizer.json, or vocab.txt with tokenizer_config.json), giving the ids
    Hugging Face ``tokenizers`` gives. Read-only after opening: any number of threads may use it
    (but not while one closes it)."""

    def __init__(self, path: PathLike):
        self._t = ctypes.c_void_p()
        check(lib.attn_tokenizer_open(_lib.c_path(path, "Tokenizer"), ctypes.byref(self._t)))
        self._lock = _lib.CallLock("Tokenizer")  # only close() takes it: encode / decode are read-only

    def _h(self):
        if not self._t:
            raise _closed("Tokenizer")
        return self._t

    def encode(self, text: str, add_special_tokens: bool = True, max_length: Optional[int] = None) -> List[int]:
        """One text's ids, as ``tokenizer(text, truncation=True)["input_ids"]``: max_length None
        truncates as the folder says (tokenizer_config.json's model_max_length), else to that many
        ids, the special tokens included."""
        if not isinstance(text, str):
            raise TypeError(f"Tokenizer: a text must be a str, got {type(text).__name__}")
        ml = 0 if max_length is None else int(max_length)
        if max_length is not None and ml < 1:
            raise ValueError(f"Tokenizer: max_length must be >= 1, got {max_length}")
        raw = text.encode("utf-8", "surrogatepass")
        cap = len(raw) + 8
        while True:
            ids = np.empty(cap, dtype=np.int32)
            n = ctypes.c_size_t()
            st = lib.attn_tokenizer_encode(self._h(), raw, len(raw), int(bool(add_special_tokens)), ml,
                                           ids.ctypes.data, cap, ctypes.byref(n))
            if st == _WORKSPACE and n.value > cap:
                cap = n.value
                continue
            check(st)
            return ids[:n.value].tolist()

    def __call__(self, texts: Union[str, Sequence[str]], add_special_tokens: bool = True,
                 max_length: Optional[int] = None) -> Union[List[int], List[List[int]]]:
        """``tokenizer(texts, truncation=True)["input_ids"]``: a str gives its ids, a list of str a
        list of them."""
        if isinstance(texts, str):
            return self.encode(texts, add_special_tokens, max_length)
        return [self.encode(t, add_special_tokens, max_length) for t in texts]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """``tokenizer.decode(ids, skip_special_tokens=...)`` (ids outside the vocabulary skipped)."""
        a = np.asarray(ids)
        if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
            raise TypeError(f"Tokenizer.decode: ids must be a sequence of ints, got shape {a.shape} dtype {a.dtype}")
        if a.size and (a.min() < -2**31 or a.max() >= 2**31):
            raise ValueError("Tokenizer.decode: an id does not fit in int32")
        a = np.ascontiguousarray(a, dtype=np.int32)
        cap = 16 * a.size + 16
        while True:
            buf = ctypes.create_string_buffer(cap)
            n = ctypes.c_size_t()
            st = lib.attn_tokenizer_decode(self._h(), a.ctypes.data, a.size, int(bool(skip_special_tokens)), buf,
                                           cap, ctypes.byref(n))
            if st == _WORKSPACE and n.value >= cap:
                cap = n.value + 1
                continue
            check(st)
            return buf.raw[:n.value].decode("utf-8")

    @property
    def vocab_size(self) -> int:
        return int(lib.attn_tokenizer_vocab_size(self._h()))

    @property
    def pad_token_id(self) -> Optional[int]:
        p = int(lib.attn_tokenizer_pad_id(self._h()))
        return None if p < 0 else p

    @property
    def model_max_length(self) -> Optional[int]:
        """The truncation max_length None applies (None: no truncation)."""
        n = int(lib.attn_tokenizer_max_length(self._h()))
        return n or None

    def token_to_id(self, token: str) -> Optional[int]:
        i = int(lib.attn_tokenizer_token_to_id(self._h(), _lib.c_name(token, "Tokenizer.token_to_id")))
        return None if i < 0 else i

    def id_to_token(self, i: int) -> Optional[str]:
        if not -2**31 <= int(i) < 2**31:
            return None
        t = lib.attn_tokenizer_id_to_token(self._h(), int(i))
        return None if t is None else t.decode("utf-8")

    def close(self) -> None:
        with self._lock:
            if self._t:
                lib.attn_tokenizer_free(self._t)
                self._t = ctypes.c_void_p()

    def __del__(self):
        t = getattr(self, "_t", None)
        if t:
            lib.attn_tokenizer_free(t)
            self._t = None


class _Image(ctypes.Structure):
    """attn_image (attn/image.h)."""
    _fields_ = [("width", ctypes.c_int64), ("height", ctypes.c_int64), ("channels", ctypes.c_int),
                ("pixels", ctypes.c_void_p)]


def _declare():
    """The image calls' signatures (declared here, beside their only user)."""
    P, I64 = ctypes.c_void_p, ctypes.c_int64
    sigs = {
        "attn_pretrained_num_labels": (I64, [P]),
        "attn_pretrained_label": (ctypes.c_char_p, [P, I64]),
        "attn_pretrained_image_size": (None, [P, P, P, P]),
        "attn_pretrained_image_tokens": (I64, [P]),
        "attn_pretrained_image_input": (ctypes.c_int, [P, ctypes.POINTER(_Image), P]),
        "attn_pretrained_classify": (ctypes.c_int, [P, P, I64, I64, I64, P]),
        "attn_pretrained_image_hidden_states": (ctypes.c_int, [P, P, I64, I64, I64, P]),
        "attn_image_load": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_Image)]),
        "attn_image_free": (None, [ctypes.POINTER(_Image)]),
    }
    for name, (res, args) in sigs.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args


_declare()


class Generation(NamedTuple):
    """What :meth:`Pretrained.generate` produced: the new ids (the eos id included when it stopped
    there) and their text (None without a tokenizer)."""
    ids: List[int]
    text: Optional[str]


def _rows(ids, lengths, what: str):
    """(ids [B, n] int32 C-contiguous, lengths [B] int64) from a list of sequences or a 2-D array
    (a 1-D sequence is one row)."""
    if lengths is None and not isinstance(ids, np.ndarray) and len(ids) and not np.isscalar(ids[0]):
        rows = [np.asarray(r) for r in ids]
        for b, r in enumerate(rows):
            if r.ndim != 1 or (r.size and r.dtype.kind not in "iu"):
                raise TypeError(f"{what}: row {b} is not a sequence of ints (shape {r.shape}, dtype {r.dtype})")
        lens = np.array([r.size for r in rows], dtype=np.int64)
        a = np.zeros((len(rows), max(int(lens.max()), 1)), dtype=np.int64)
        for b, r in enumerate(rows):
            a[b, :r.size] = r
    else:
        a = np.asarray(ids)
        if a.ndim == 1:
            a = a[None]
        if a.ndim != 2 or (a.size and a.dtype.kind not in "iu"):
            raise TypeError(f"{what}: ids must be integer [batch, seq] (or a list of sequences), got shape "
                            f"{a.shape} dtype {a.dtype}")
        if lengths is None:
            lens = np.full(a.shape[0], a.shape[1], dtype=np.int64)
        else:
            lens = np.asarray(lengths)
            if lens.shape != (a.shape[0],) or (lens.size and lens.dtype.kind not in "iu"):
                raise ValueError(f"{what}: lengths must be {a.shape[0]} ints (one per row of ids {a.shape}), got "
                                 f"shape {lens.shape}")
            lens = lens.astype(np.int64)
    B, n = a.shape
    if B < 1 or n < 1:
        raise ValueError(f"{what}: empty batch (ids of shape {a.shape})")
    for b in range(B):
        if not 1 <= lens[b] <= n:
            raise ValueError(f"{what}: row {b} has length {lens[b]} (each row needs 1 to {n} tokens)")
    real = np.arange(n)[None, :] < lens[:, None]
    if a[real].size and (a[real].min() < -2**31 or a[real].max() >= 2**31):
        raise ValueError(f"{what}: an id does not fit in int32")
    a = np.where(real, a, 0)  # padding is never read; zeros keep it in range
    return np.ascontiguousarray(a, dtype=np.int32), np.ascontiguousarray(lens, dtype=np.int64)


class Pretrained:
    """An opened Hugging Face folder (use :func:`from_pretrained`). Properties: ``family``
    ("bert", "gpt2", "llama", "mistral", "qwen2", "vit"), ``hidden_size``, ``embedding_size``,
    ``max_length``, ``vocab_size``, ``pooling``, ``normalize``, ``eos_token_id``; for "vit"
    ``image_size``, ``num_labels``, ``labels``; ``tokenizer`` (None when the folder has no
    tokenizer.json / vocab.txt).

    Thread-safe: calls on one object take turns (the model keeps its workspace in itself); the
    tokenizer is shared freely. ``close()`` (or ``with``) frees it at once."""

    def __init__(self, path: PathLike, tokenizer: Optional[bool] = None):
        cpath = _lib.c_path(path, "from_pretrained")
        self._lock = _lib.CallLock("Pretrained")
        self._m = ctypes.c_void_p()
        self.path = os.fsdecode(path)
        self.tokenizer: Optional[Tokenizer] = None
        if tokenizer is None:
            tokenizer = any(os.path.isfile(os.path.join(cpath, f)) for f in (b"tokenizer.json", b"vocab.txt"))
        if tokenizer:
            self.tokenizer = Tokenizer(path)
        st = lib.attn_pretrained_open(cpath, ctypes.byref(self._m))
        if st:
            err = _lib.error(st)
            if self.tokenizer is not None:
                self.tokenizer.close()
            raise err
        # read once: the properties then never touch the C object (a close() in another thread
        # cannot free it under them)
        h = self._m
        self._info = dict(family=lib.attn_pretrained_family(h).decode(),
                          hidden_size=int(lib.attn_pretrained_hidden_size(h)),
                          embedding_size=int(lib.attn_pretrained_embedding_size(h)),
                          max_length=int(lib.attn_pretrained_max_length(h)),
                          vocab_size=int(lib.attn_pretrained_vocab_size(h)),
                          pooling=_POOLING.get(int(lib.attn_pretrained_pooling(h)), "unknown"),
                          normalize=bool(lib.attn_pretrained_normalize(h)),
                          eos_token_id=int(lib.attn_pretrained_eos_id(h)))

    # ---- the folder ----
    def _h(self):
        if not self._m:
            raise _closed(f"Pretrained({self.path!r})")
        return self._m

    def _get(self, key):
        self._h()  # closed: ValueError
        return self._info[key]

    @property
    def family(self) -> str:
        """The family's name: "bert", "gpt2", "llama", "mistral", "qwen2" or "vit"."""
        return self._get("family")

    @property
    def hidden_size(self) -> int:
        return self._get("hidden_size")

    @property
    def embedding_size(self) -> int:
        """Width of :meth:`encode`'s rows."""
        return self._get("embedding_size")

    @property
    def max_length(self) -> int:
        """The longest input the folder allows (sentence-transformers' max_seq_length, capped by the
        model's positions): :meth:`encode` truncates to it."""
        return self._get("max_length")

    @property
    def vocab_size(self) -> int:
        return self._get("vocab_size")

    @property
    def pooling(self) -> str:
        """:meth:`encode`'s pooling: "mean", "cls" or "max"."""
        return self._get("pooling")

    @property
    def normalize(self) -> bool:
        """Whether :meth:`encode` L2-normalises (a Normalize module)."""
        return self._get("normalize")

    @property
    def eos_token_id(self) -> Optional[int]:
        """config.json's eos_token_id (None when it has none)."""
        e = self._get("eos_token_id")
        return None if e < 0 else e

    @property
    def precision(self) -> str:
        """The compute precision of the model's calls: "fp32" (default) or "bf16" (the matrix
        products of the linear layers and of attention on bf16-rounded operands with float32 sums,
        as PyTorch's CPU autocast; the weights rounded and packed once, at the first call). Every
        family runs bf16 (a generation's cached steps keep their attention float)."""
        with self._lock:
            return "bf16" if lib.attn_pretrained_precision(self._h()) == 1 else "fp32"

    @precision.setter
    def precision(self, p: str) -> None:
        if p not in ("fp32", "bf16"):
            raise ValueError(f"precision: {p!r} is not 'fp32' or 'bf16'")
        with self._lock:
            check(lib.attn_pretrained_set_precision(self._h(), 1 if p == "bf16" else 0))

    def _need_tokenizer(self, what: str) -> Tokenizer:
        if self.tokenizer is None:
            raise ValueError(f"{what}: the folder {self.path!r} has no tokenizer (tokenizer.json or vocab.txt): "
                             "pass token ids")
        return self.tokenizer

    # ---- computing ----
    def hidden_states(self, ids, lengths=None, token_type_ids=None) -> np.ndarray:
        """The last hidden state (BertModel(ids, attention_mask).last_hidden_state) [B, n, hidden];
        padded positions are 0. token_type_ids: [B, n] ints or None (zeros)."""
        a, lens = _rows(ids, lengths, "hidden_states")
        tt = None
        if token_type_ids is not None:
            t = np.asarray(token_type_ids)
            if t.ndim == 1:
                t = t[None]
            if t.shape != a.shape or (t.size and t.dtype.kind not in "iu"):
                raise ValueError(f"hidden_states: token_type_ids must be ints shaped as ids {a.shape}, got shape "
                                 f"{t.shape} dtype {t.dtype}")
            tt = np.ascontiguousarray(np.clip(t, -1, 2**31 - 1), dtype=np.int32)
        B, n = a.shape
        with self._lock:
            out = np.empty((B, n, self.hidden_size), dtype=np.float32)
            check(lib.attn_pretrained_hidden_states(self._h(), a.ctypes.data, None if tt is None else tt.ctypes.data,
                                                    lens.ctypes.data, B, n, out.ctypes.data))
        return out

    def embed(self, ids, lengths=None) -> np.ndarray:
        """Sentence embeddings of token ids [B, embedding_size] (pooling and normalisation as the
        folder's sentence-transformers modules say)."""
        a, lens = _rows(ids, lengths, "embed")
        B, n = a.shape
        with self._lock:
            out = np.empty((B, self.embedding_size), dtype=np.float32)
            check(lib.attn_pretrained_embed(self._h(), a.ctypes.data, lens.ctypes.data, B, n, out.ctypes.data))
        return out

    def encode(self, texts: Union[str, Sequence[str]], batch_size: int = 32) -> np.ndarray:
        """SentenceTransformer(dir).encode(texts): float32 [len(texts), embedding_size] ([dim] for one
        str). Texts are truncated to :attr:`max_length` tokens and run in batches of batch_size by
        decreasing length (little padding), as sentence-transformers does."""
        tok = self._need_tokenizer("encode")
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"encode: batch_size must be an int >= 1, got {batch_size!r}")
        one = isinstance(texts, str)
        seqs = tok([texts] if one else list(texts), max_length=self.max_length)
        dim = self.embedding_size
        out = np.empty((len(seqs), dim), dtype=np.float32)
        order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i]))
        pad = tok.pad_token_id or 0
        for b0 in range(0, len(seqs), batch_size):
            idx = order[b0:b0 + batch_size]
            n = max(1, len(seqs[idx[0]]))
            a = np.full((len(idx), n), pad, dtype=np.int64)
            for r, i in enumerate(idx):
                a[r, :len(seqs[i])] = seqs[i]
            out[idx] = self.embed(a, [len(seqs[i]) for i in idx])
        return out[0] if one else out

    def logits(self, ids, lengths=None) -> np.ndarray:
        """A causal LM's logits (GPT2LMHeadModel / LlamaForCausalLM(ids).logits) [B, n, vocab];
        padded positions are 0."""
        a, lens = _rows(ids, lengths, "logits")
        B, n = a.shape
        with self._lock:
            out = np.empty((B, n, self.vocab_size), dtype=np.float32)
            check(lib.attn_pretrained_logits(self._h(), a.ctypes.data, lens.ctypes.data, B, n, out.ctypes.data))
        return out

    def generate(self, prompt: Union[str, Sequence[int]], max_new_tokens: int = 32, temperature: float = 0.0,
                 top_k: int = 0, top_p: float = 1.0, seed: int = 0, eos_token_id: Optional[int] = -1,
                 callback: Optional[Callable[[int], Optional[bool]]] = None) -> Generation:
        """Continue a prompt (a str, tokenized as the folder's tokenizer does, or ids): greedy at
        temperature 0 (= model.generate(do_sample=False)), else sampled over softmax(logits / T)
        restricted by top_k then top_p, with Philox draws from ``seed`` (the same ids on every
        machine and thread count). Stops after eos_token_id (-1: the folder's; None: never).
        ``callback(id)`` is called with each new id as it is produced (streaming); a true return
        stops. Returns the new ids and their text."""
        if isinstance(prompt, str):
            pids = self._need_tokenizer("generate")(prompt)
            if not pids:
                raise ValueError(f"generate: the prompt {prompt!r} gives no tokens")
        else:
            pids = list(prompt)
        if not pids:
            raise ValueError("generate: an empty prompt (at least one id)")
        p, _ = _rows([pids], None, "generate: prompt")
        o = lib.attn_generate_options_default()
        for name, v in (("max_new_tokens", max_new_tokens), ("top_k", top_k)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= v < 2**62:
                raise ValueError(f"generate: {name} must be an int >= 0, got {v!r}")
        o.max_new_tokens, o.top_k = int(max_new_tokens), int(top_k)
        o.temperature, o.top_p = float(temperature), float(top_p)
        o.seed = _lib.u64(seed, "generate: seed")
        got: List[int] = []
        failure: List[BaseException] = []

        def on_token(i, _user):
            got.append(int(i))
            if callback is None:
                return 0
            try:
                return 1 if callback(int(i)) else 0
            except BaseException as e:  # noqa: BLE001 - raised again after the C call returns
                failure.append(e)
                return 1

        cb = _lib.GENERATE_CALLBACK(on_token)
        with self._lock:
            h = self._h()
            if eos_token_id is not None and eos_token_id == -1:
                o.eos_id = self._info["eos_token_id"]
            elif eos_token_id is None:
                o.eos_id = -1
            else:
                if not 0 <= int(eos_token_id) < 2**31:
                    raise ValueError(f"generate: eos_token_id must be an id >= 0, -1 or None, got {eos_token_id}")
                o.eos_id = int(eos_token_id)
            st = lib.attn_pretrained_generate(h, p.ctypes.data, p.shape[1], ctypes.byref(o), cb, None, None)
        if failure:
            raise failure[0]
        check(st)
        text = self.tokenizer.decode(got) if self.tokenizer is not None else None
        return Generation(got, text)

    # ---- images ("vit") ----
    @property
    def num_labels(self) -> int:
        """The classifier's rows (0: no classifier, or a text family)."""
        return int(lib.attn_pretrained_num_labels(self._h()))

    @property
    def labels(self) -> List[str]:
        """config.json's id2label in order ("LABEL_i" where it has none)."""
        h = self._h()
        return [lib.attn_pretrained_label(h, i).decode("utf-8", "replace") for i in range(self.num_labels)]

    @property
    def image_size(self) -> tuple:
        """(channels, height, width) of the model's input image ((0, 0, 0) for a text family)."""
        c, hh, w = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_int64()
        lib.attn_pretrained_image_size(self._h(), ctypes.byref(c), ctypes.byref(hh), ctypes.byref(w))
        return (c.value, hh.value, w.value)

    def image_input(self, path: PathLike) -> np.ndarray:
        """An image file (PPM / PGM, PNG when libpng was found) preprocessed as the folder's
        preprocessor_config.json says (ViTImageProcessor): float32 [channels, height, width]."""
        C, H, W = self.image_size
        if not C:
            raise ValueError(f"image_input: {self.path!r} is a {self.family!r} model, not an image model")
        img = _Image()
        check(lib.attn_image_load(_lib.c_path(path, "image_input"), ctypes.byref(img)))
        try:
            out = np.empty((C, H, W), dtype=np.float32)
            with self._lock:
                check(lib.attn_pretrained_image_input(self._h(), ctypes.byref(img), out.ctypes.data))
        finally:
            lib.attn_image_free(ctypes.byref(img))
        return out

    def _pixels(self, images, what: str):
        """(pixels [B, C, H, W] float32 C-contiguous, whether one image was given)."""
        C, H, W = self.image_size
        if not C:
            raise ValueError(f"{what}: {self.path!r} is a {self.family!r} model, not an image model")
        one = isinstance(images, (str, bytes, os.PathLike)) or (isinstance(images, np.ndarray) and images.ndim == 3)
        items = [images] if one else images
        if isinstance(items, np.ndarray):
            a = items
        else:
            items = list(items)
            if not items:
                raise ValueError(f"{what}: no images")
            a = np.stack([self.image_input(x) if isinstance(x, (str, bytes, os.PathLike)) else np.asarray(x)
                          for x in items])
        if a.ndim == 3:
            a = a[None]
        if a.ndim != 4 or a.shape[1:] != (C, H, W) or a.dtype.kind not in "fiu":
            raise ValueError(f"{what}: images must be file paths or float arrays [B, {C}, {H}, {W}] (preprocessed), "
                             f"got shape {a.shape} dtype {a.dtype}")
        return np.ascontiguousarray(a, dtype=np.float32), one

    def classify(self, images, top_k: Optional[int] = 5):
        """ViTForImageClassification: images are a file path, a float array [C, H, W], or a list of
        them, or an array [B, C, H, W] (arrays already preprocessed, as :meth:`image_input` gives).
        top_k an int: per image the top_k (label, probability) by softmax, most likely first (ties by
        lower index); top_k None: the logits, float32 [B, num_labels]. One image gives one result."""
        a, one = self._pixels(images, "classify")
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1):
            raise ValueError(f"classify: top_k must be an int >= 1 or None, got {top_k!r}")
        with self._lock:
            nl = int(lib.attn_pretrained_num_labels(self._h()))
            logits = np.empty((a.shape[0], max(nl, 1)), dtype=np.float32)
            check(lib.attn_pretrained_classify(self._h(), a.ctypes.data, a.shape[0], a.shape[2], a.shape[3],
                                               logits.ctypes.data))
        if top_k is None:
            return logits[0] if one else logits
        names = self.labels
        z = logits.astype(np.float64)
        p = np.exp(z - z.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        res = []
        for row in p:
            order = np.argsort(-row, kind="stable")[:int(top_k)]
            res.append([(names[i], float(row[i])) for i in order])
        return res[0] if one else res

    def image_hidden_states(self, images) -> np.ndarray:
        """ViTModel(pixels).last_hidden_state: float32 [B, tokens, hidden] (tokens = 1 + the
        patches; images as for :meth:`classify`; one image gives [tokens, hidden])."""
        a, one = self._pixels(images, "image_hidden_states")
        with self._lock:
            tokens = int(lib.attn_pretrained_image_tokens(self._h()))
            out = np.empty((a.shape[0], tokens, self.hidden_size), dtype=np.float32)
            check(lib.attn_pretrained_image_hidden_states(self._h(), a.ctypes.data, a.shape[0], a.shape[2],
                                                          a.shape[3], out.ctypes.data))
        return out[0] if one else out

    # ---- lifetime ----
    def close(self) -> None:
        """Free the model now (later calls raise ValueError); waits for a call in progress."""
        with self._lock:
            if self._m:
                lib.attn_pretrained_free(self._m)
                self._m = ctypes.c_void_p()
        if self.tokenizer is not None:
            self.tokenizer.close()

    def __enter__(self) -> "Pretrained":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        m = getattr(self, "_m", None)
        if m:
            lib.attn_pretrained_free(m)
            self._m = None

    def __repr__(self) -> str:
        if not self._m:
            return f"Pretrained({self.path!r}, closed)"
        return f"Pretrained({self.path!r}, family={self.family!r}, hidden_size={self.hidden_size})"


def from_pretrained(path: PathLike, tokenizer: Optional[bool] = None, precision: str = "fp32") -> Pretrained:
    """Open a Hugging Face model folder (BERT / sentence-transformers, GPT-2, Llama, Mistral, Qwen2,
    ViT; attn/pretrained.h)
    and its tokenizer (tokenizer=None: when the folder has tokenizer.json or vocab.txt; True: it must
    open; False: none), computing in ``precision`` ("fp32" or "bf16": :attr:`Pretrained.precision`).
    Errors raise AttnError carrying the library's message, which names the file and the key."""
    m = Pretrained(path, tokenizer)
    if precision != "fp32":
        try:
            m.precision = precision
        except BaseException:
            m.close()
            raise
    return m
