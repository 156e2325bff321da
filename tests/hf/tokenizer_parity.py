#!/usr/bin/env python3
"""attn's tokenizers against Hugging Face `tokenizers`, id for id.

    python3 tokenizer_parity.py ATTN_BINARY_OR_LIB OUTDIR [--seed S] [--lines N]

Trains WordPiece tokenizers with `tokenizers` on a corpus generated here (seeded), in several
configurations (added tokens matched in the raw and in the normalized text, BertNormalizer with lowercase on and off, the strip_accents variants, clean_text
and handle_chinese_chars off, a Sequence of NFD / Lowercase / StripAccents with WhitespaceSplit,
BertProcessing, left truncation, a short max_input_chars_per_word), saves each tokenizer.json in
OUTDIR, and also a model folder with vocab.txt + tokenizer_config.json. Then, for thousands of
generated lines (every Unicode general category, accents and stacked combining marks in any order,
CJK, Hangul, emoji and ZWJ sequences, whitespace runs, tabs, control characters, special tokens
typed in the text, very long words, texts past the truncation length), the same for byte-level BPE (GPT-2's ByteLevel pre-tokenizer and decoder, with and
without add_prefix_space, ignore_merges and truncation), and the tokenizers of LLMs (Llama-3: Split
with its regex, ByteLevel without regex, ignore_merges, a BOS template in a processor Sequence;
Qwen2: NFC and its regex; Llama-2 / Mistral: byte_fallback BPE with <0x00>..<0xFF>, Prepend +
Replace or Metaspace with each prepend_scheme, the Replace / ByteFallback / Fuse / Strip /
Metaspace decoders; NFKC, NFKD, NFD and NFC with Digits, Punctuation, Whitespace, Strip and each of Split's
behaviors, inverted too; single_word added tokens, raw and normalized; BPE with
continuing_subword_prefix and end_of_word_suffix and the BPEDecoder), compares the ids of
`attn tokenize --input FILE` (one process per configuration) with Tokenizer.encode, and the text
of `attn tokenize --decode` with Tokenizer.decode (with and without the special tokens).
ATTN_BINARY_OR_LIB is the attn tool, or libattn.so (then through ctypes). Ends with the line
"tokenizer parity: N passed, M failed"; exits 1 on any mismatch (the first ones printed with the
text's code points), 0 with a notice when `tokenizers` cannot be imported.
"""
import argparse
import ctypes
import json
import os
import random
import subprocess
import sys
import unicodedata

try:
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
except ImportError as e:  # the notice, and success: nothing to compare against
    print("tokenizer parity: SKIP: Hugging Face tokenizers cannot be imported (%s)" % e)
    sys.exit(0)

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
MAXCP = 0x110000


def category_table():
    """Code points by general category (Python's Unicode; unassigned ones are Cn)."""
    cats = {}
    for c in range(MAXCP):
        if 0xD800 <= c <= 0xDFFF or c == 0x0A:
            continue
        cats.setdefault(unicodedata.category(chr(c)), []).append(c)
    return cats


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)
        self.cats = category_table()
        self.catnames = sorted(self.cats)
        self.marks = self.cats["Mn"][:400] + [0x301, 0x300, 0x308, 0x327, 0x323, 0x31B, 0x345, 0x3099, 0x5B0, 0x93C]
        self.latin = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
        self.accented = "àáâãäåæçèéêëìíîïñòóôõöøùúûüýÿÀÁÂÃÄÅÇÈÉÊËÌÍÎÏÑÒÓÔÕÖØÙÚÛÜÝŒœŠšŽžƒİıĳǅǈǋẞßΣσςΆΈΉΊΌΎΏάέήίόύώ"
        self.greek = "αβγδεζηθικλμνξοπρστυφχψωΑΒΓΔΕΖΗΘΙΚΛΜΝΞΟΠΡΣΤΥΦΧΨΩ"
        self.cyr = "абвгдежзийклмнопрстуфхцчшщъыьэюяАБВГДЕЖЗИЙКЛМНОПРСТУФХЦЧШЩЪЫЬЭЮЯёЁ"
        self.emoji = ["😀", "👍", "👍🏽", "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷", "❤️", "✌🏿", "🤖", "🥰", "🫠", "1️⃣", "🧑🏻‍🚀"]
        self.spaces = [" ", "  ", "\t", "\r", "\x0b", "\x0c", "\u00a0", "\u3000", "\u2003", "\u2028", "\u2029",
                       "\u0085", "\u200b", "\u180e", "\u202f", " \t ", "\u1680"]
        self.controls = ["\x00", "\x01", "\x1b", "\x7f", "\u200d", "\u200e", "\ufeff", "\ufffd", "\ue000",
                         "\U000f0000", "\u0600", "\U000e0001", "\x1c", "\x1f", "\u2066"]
        self.punct = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + ["¡", "¿", "«", "»", "—", "–", "…", "、", "。",
                                                                      "「", "」", "‘", "’", "“", "”", "¶", "§",
                                                                      "·", "※", "⁂", "﹏", "＂", "＃", "$", "€"]

    def word(self):
        r = self.r
        k = r.random()
        n = r.randint(1, 9)
        if k < 0.30:
            return "".join(r.choice(self.latin) for _ in range(n))
        if k < 0.45:
            return "".join(r.choice(self.latin + self.accented) for _ in range(n))
        if k < 0.55:
            return "".join(r.choice(self.greek + self.cyr) for _ in range(n))
        if k < 0.65:
            return "".join(chr(r.randint(0x4E00, 0x4FFF)) for _ in range(min(n, 4)))
        if k < 0.70:
            return "".join(chr(r.randint(0xAC00, 0xAC00 + 600)) for _ in range(min(n, 4)))
        if k < 0.75:
            return str(r.randint(0, 10**r.randint(1, 8)))
        if k < 0.85:
            return r.choice(self.punct)
        if k < 0.90:
            return "".join(chr(r.randint(0x0600, 0x06FF)) for _ in range(n))
        return "".join(chr(r.randint(0x0900, 0x097F)) for _ in range(n))

    def corpus(self, n):
        return [" ".join(self.word() for _ in range(self.r.randint(3, 20))) for _ in range(n)]

    def piece(self):
        r = self.r
        k = r.random()
        if k < 0.35:
            return self.word()
        if k < 0.45:  # any general category, assigned or not
            cat = r.choice(self.catnames)
            return "".join(chr(r.choice(self.cats[cat])) for _ in range(r.randint(1, 3)))
        if k < 0.55:  # a base with stacked combining marks, in any order
            return r.choice(self.latin + self.greek) + "".join(chr(r.choice(self.marks)) for _ in range(r.randint(1, 4)))
        if k < 0.62:
            return r.choice(self.emoji)
        if k < 0.72:
            return r.choice(self.spaces)
        if k < 0.78:
            return r.choice(self.controls)
        if k < 0.82:
            return r.choice(SPECIALS + ["<|endoftext|>"]) if r.random() < 0.7 else r.choice(
                ["[cls]", "[SEP", "[[MASK]]", "x[UNK]y", "<|endoftext", "'s", "'ll", "'RE", "'ve'd", "''m", "it's",
                 "[NEW]", "[new]", "[N\u00e9W]", " [NEW] ", "<|IM_start|>", "<|im_start|>", " <|IM_START|>"])
        if k < 0.85:  # very long words
            return "".join(r.choice(self.latin + self.accented) for _ in range(r.randint(90, 130)))
        if k < 0.88:
            return unicodedata.normalize("NFD", self.word())
        if k < 0.93:
            return chr(r.randint(0x80, 0x2FFF))
        return chr(r.randint(0x3000, MAXCP - 1)) if r.random() < 0.5 else chr(r.randint(0x1F000, 0x1FAFF))

    def line(self):
        r = self.r
        n = r.choice([0, 1, 2, 3, 5, 8, 12, 20, 40, 90])
        sep = lambda: " " if r.random() < 0.7 else ""
        s = "".join(self.piece() + sep() for _ in range(n))
        s = "".join(ch for ch in s if ch != "\n" and not (0xD800 <= ord(ch) <= 0xDFFF))
        return s


def train(corpus, normalizer, pre, lowercase_vocab):
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    trainer = trainers.WordPieceTrainer(vocab_size=3000, special_tokens=SPECIALS, min_frequency=1,
                                        show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    return tok


def configs(corpus):
    BN = normalizers.BertNormalizer
    out = []

    def template(tok):
        cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
        return processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                             special_tokens=[("[CLS]", cls), ("[SEP]", sep)])

    specs = [
        ("lower", BN(lowercase=True), pre_tokenizers.BertPreTokenizer(), 64, "right", 100, "template"),
        ("cased", BN(lowercase=False), pre_tokenizers.BertPreTokenizer(), 48, "right", 100, "template"),
        ("cased_strip", BN(lowercase=False, strip_accents=True), pre_tokenizers.BertPreTokenizer(), 80, "right", 100,
         "template"),
        ("lower_keep_accents_raw", BN(clean_text=False, handle_chinese_chars=False, lowercase=True,
                                      strip_accents=False), pre_tokenizers.BertPreTokenizer(), None, "right", 100,
         "template"),
        ("sequence", normalizers.Sequence([normalizers.NFD(), normalizers.Lowercase(), normalizers.StripAccents()]),
         pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit()]), 40, "left", 12, "bert"),
    ]
    for name, norm, pre, maxlen, direction, maxchars, post in specs:
        tok = train(corpus, norm, pre, True)
        tok.model = models.WordPiece(tok.get_vocab(with_added_tokens=False), unk_token="[UNK]",
                                     max_input_chars_per_word=maxchars)
        if post == "template":
            tok.post_processor = template(tok)
        else:
            tok.post_processor = processors.BertProcessing(("[SEP]", tok.token_to_id("[SEP]")),
                                                           ("[CLS]", tok.token_to_id("[CLS]")))
        tok.decoder = decoders.WordPiece(prefix="##")
        if name in ("lower", "cased"):  # matched in the normalized text
            tok.add_tokens([AddedToken("[NEW]", normalized=True, lstrip=True)])
        if maxlen:
            tok.enable_truncation(maxlen, direction=direction)
        out.append((name, tok))
    return out


def bpe_configs(corpus):
    """Byte-level BPE as GPT-2's: ByteLevel pre-tokenizer, post-processor and decoder; then with
    add_prefix_space, ignore_merges, a Lowercase normalizer, [bos] $A [eos] and left truncation."""
    out = []
    for name in ("gpt2", "gpt2_prefix_lower"):
        tok = Tokenizer(models.BPE())
        variant = name != "gpt2"
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=variant)
        if variant:
            tok.normalizer = normalizers.Lowercase()
        trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=["<|endoftext|>"], show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(corpus + ["it's we're they've I'm you'll he'd 'tis 1234 3.14"] * 20, trainer)
        tok.decoder = decoders.ByteLevel()
        tok.add_special_tokens([AddedToken("<|IM_start|>", normalized=True, special=True)])
        if variant:
            j = json.loads(tok.to_str())
            j["model"]["ignore_merges"] = True
            tok = Tokenizer.from_str(json.dumps(j))
            eot = tok.token_to_id("<|endoftext|>")
            tok.post_processor = processors.TemplateProcessing(single="<|endoftext|> $A <|endoftext|>",
                                                               special_tokens=[("<|endoftext|>", eot)])
            tok.enable_truncation(50, direction="left")
        else:
            tok.post_processor = processors.ByteLevel(trim_offsets=True)
        out.append((name, tok))
    return out


LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def llm_corpus(corpus):
    """The corpus with contractions in any case, digit runs and line breaks, for the merges to use them."""
    extra = ["it's we're they've I'm you'll he'd 'tis IT'S WE'RE THEY'VE I'M YOU'LL HE'D It'S wE'Re",
             "1234567 3.14159 2024-01-01 000 42", "a\r\nb\n\nc \r\n\t d"]
    return corpus + extra * 20


def byte_level_bpe(corpus, specials, pre, norm=None):
    tok = Tokenizer(models.BPE())
    tok.normalizer = norm
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(llm_corpus(corpus), trainer)
    return tok


def with_model(tok, **model):
    j = json.loads(tok.to_str())
    j["model"].update(model)
    return Tokenizer.from_str(json.dumps(j))


def llm_configs(corpus):
    """Llama-3 (Split with its regex, ByteLevel without regex, ignore_merges, <|begin_of_text|> $A),
    Qwen2 (NFC, its regex, <|im_start|> added), Llama-2 / Mistral (byte_fallback BPE with <0x00>..<0xFF>,
    Prepend + Replace normalizers or the Metaspace pre-tokenizer, their decoders), NFKC / NFKD with
    Digits, Punctuation, Strip and Split's behaviors."""
    out = []
    split = lambda rx: pre_tokenizers.Split(Regex(rx), behavior="isolated", invert=False)
    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok = byte_level_bpe(corpus, ["<|begin_of_text|>", "<|end_of_text|>"], pre_tokenizers.Sequence([split(LLAMA3), bl]))
    tok = with_model(tok, ignore_merges=True)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([processors.ByteLevel(trim_offsets=False), processors.TemplateProcessing(
        single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
        special_tokens=[("<|begin_of_text|>", bos)])])
    tok.add_special_tokens([AddedToken("<|reserved_special_token_0|>", normalized=False, special=True)])
    tok.enable_truncation(60)
    out.append(("llama3", tok))
    tok = byte_level_bpe(corpus, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                         pre_tokenizers.Sequence([split(QWEN2), bl]), normalizers.NFC())
    out.append(("qwen2", tok))
    for name, rx in (("gpt2_split", GPT2), ("llama3_regex_only", LLAMA3)):
        t2 = Tokenizer.from_str(tok.to_str())
        t2.normalizer = None
        t2.pre_tokenizer = pre_tokenizers.Sequence([split(rx), pre_tokenizers.ByteLevel(add_prefix_space=True,
                                                                                          use_regex=False)])
        t2.add_tokens([AddedToken("new", single_word=True, normalized=False),  # not inside a word
                       AddedToken("ab", single_word=True, normalized=True)])
        out.append((name, t2))
    # SentencePiece-style BPE: trained on Metaspace words, then the byte tokens added to the vocabulary
    sp = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
    sp.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
    sp.train_from_iterator(llm_corpus(corpus), trainers.BpeTrainer(vocab_size=2500, special_tokens=["<unk>", "<s>", "</s>"],
                                                                   show_progress=False))
    j = json.loads(sp.to_str())
    vocab = j["model"]["vocab"]
    for b in range(256):
        vocab.setdefault("<0x%02X>" % b, len(vocab))
    j["model"].update(byte_fallback=True, fuse_unk=True, unk_token="<unk>")
    base = json.dumps(j)
    sp_dec = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                decoders.Strip(" ", 1, 0)])
    bos = vocab["<s>"]
    template = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s>:1 $B:1", special_tokens=[("<s>", bos)])
    t = Tokenizer.from_str(base)
    t.pre_tokenizer = None
    t.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    t.decoder, t.post_processor = sp_dec, template
    t.enable_truncation(40, direction="left")
    t.add_tokens([AddedToken("es", single_word=True, normalized=True, lstrip=True)])
    out.append(("llama2_normalizer", t))
    for scheme, dec in (("first", decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace("\u2581", "first")])),
                        ("always", sp_dec), ("never", decoders.Sequence([decoders.ByteFallback(), decoders.Fuse(),
                                                                          decoders.Metaspace("\u2581", "never")]))):
        t = Tokenizer.from_str(base)
        t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme=scheme, split=scheme != "always")
        t.decoder, t.post_processor = dec, template
        t.add_tokens([AddedToken("[NEW]", normalized=False, lstrip=True, rstrip=True)])
        out.append(("mistral_metaspace_" + scheme, t))
    # BPE with continuing_subword_prefix and end_of_word_suffix (CLIP-like), the BPEDecoder
    t = Tokenizer(models.BPE(unk_token="[UNK]", continuing_subword_prefix="##", end_of_word_suffix="</w>"))
    t.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Lowercase()])
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    t.train_from_iterator(llm_corpus(corpus), trainers.BpeTrainer(
        vocab_size=3000, special_tokens=["[UNK]", "<|startoftext|>"], continuing_subword_prefix="##",
        end_of_word_suffix="</w>", limit_alphabet=200, show_progress=False))
    t.decoder = decoders.BPEDecoder(suffix="</w>")
    out.append(("bpe_prefix_suffix", t))
    variants = [
        ("nfkc_digits_punct", normalizers.Sequence([normalizers.NFKC(), normalizers.Strip(), normalizers.Lowercase()]),
         pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Digits(individual_digits=True),
                                  pre_tokenizers.Punctuation()])),
        ("nfkd_digits_runs", normalizers.Sequence([normalizers.NFKD(), normalizers.Strip(left=False, right=True)]),
         pre_tokenizers.Sequence([pre_tokenizers.Split(" ", behavior="merged_with_next"),
                                  pre_tokenizers.Digits(individual_digits=False),
                                  pre_tokenizers.Punctuation(behavior="merged_with_previous")])),
        ("nfd_split_behaviors", normalizers.NFD(),
         pre_tokenizers.Sequence([pre_tokenizers.Split(" ", behavior="contiguous"),
                                  pre_tokenizers.Split("e", behavior="removed", invert=True),
                                  pre_tokenizers.Punctuation(behavior="contiguous"),
                                  pre_tokenizers.Split("a", behavior="merged_with_previous")])),
        ("whitespace_lower", normalizers.Lowercase(),
         pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=False)])),
        ("nfc_metaspace_never", normalizers.NFC(),
         pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3), behavior="merged_with_next", invert=True),
                                  pre_tokenizers.Metaspace(prepend_scheme="never", split=False)])),
    ]
    for name, norm, pre in variants:
        t = Tokenizer.from_str(base)
        t.normalizer, t.pre_tokenizer = norm, pre
        t.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse(), decoders.Replace("\u2581", "_")])
        out.append((name, t))
    return out


class AttnCli:
    def __init__(self, path):
        self.path = path

    def encode(self, model, infile):
        r = subprocess.run([self.path, "tokenize", "--model", model, "--input", infile], capture_output=True)
        if r.returncode:
            raise RuntimeError("attn tokenize failed: %s" % r.stderr.decode("utf-8", "replace"))
        return [[int(x) for x in l.split()] for l in r.stdout.decode().split("\n")[:-1]]

    def decode(self, model, infile, skip):
        args = [self.path, "tokenize", "--model", model, "--input", infile, "--decode"] + (["--no-special"] if skip else [])
        r = subprocess.run(args, capture_output=True)
        if r.returncode:
            raise RuntimeError("attn tokenize --decode failed: %s" % r.stderr.decode("utf-8", "replace"))
        return r.stdout.decode("utf-8").split("\n")[:-1]


    def encode_one(self, model, text):  # --text: line breaks allowed
        r = subprocess.run([self.path, "tokenize", "--model", model, "--text", text], capture_output=True)
        if r.returncode:
            raise RuntimeError("attn tokenize failed: %s" % r.stderr.decode("utf-8", "replace"))
        return [int(x) for x in r.stdout.split()]

    def decode_one(self, model, ids, skip):
        r = subprocess.run([self.path, "tokenize", "--model", model, "--decode", "--text", " ".join(map(str, ids))] +
                           (["--no-special"] if skip else []), capture_output=True)
        if r.returncode:
            raise RuntimeError("attn tokenize --decode failed: %s" % r.stderr.decode("utf-8", "replace"))
        return r.stdout.decode("utf-8")[:-1]


class AttnLib:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        L = self.lib
        L.attn_tokenizer_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
        L.attn_tokenizer_encode.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int,
                                            ctypes.c_int64, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t,
                                            ctypes.POINTER(ctypes.c_size_t)]
        L.attn_tokenizer_decode.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t,
                                            ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t,
                                            ctypes.POINTER(ctypes.c_size_t)]
        L.attn_tokenizer_free.argtypes = [ctypes.c_void_p]
        L.attn_last_error.restype = ctypes.c_char_p

    def _open(self, model):
        t = ctypes.c_void_p()
        if self.lib.attn_tokenizer_open(model.encode(), ctypes.byref(t)):
            raise RuntimeError(self.lib.attn_last_error().decode())
        return t

    def encode(self, model, infile):
        t = self._open(model)
        out = []
        for line in open(infile, "rb").read().split(b"\n")[:-1]:
            n = ctypes.c_size_t()
            ids = (ctypes.c_int32 * (4 * len(line) + 16))()
            if self.lib.attn_tokenizer_encode(t, line, len(line), 1, 0, ids, len(ids), ctypes.byref(n)):
                raise RuntimeError(self.lib.attn_last_error().decode())
            out.append(list(ids[: n.value]))
        self.lib.attn_tokenizer_free(t)
        return out

    def encode_one(self, model, text):
        t = self._open(model)
        line = text.encode()
        n = ctypes.c_size_t()
        ids = (ctypes.c_int32 * (4 * len(line) + 16))()
        if self.lib.attn_tokenizer_encode(t, line, len(line), 1, 0, ids, len(ids), ctypes.byref(n)):
            raise RuntimeError(self.lib.attn_last_error().decode())
        self.lib.attn_tokenizer_free(t)
        return list(ids[: n.value])

    def decode_one(self, model, ids, skip):
        infile = model + ".one"
        with open(infile, "w") as f:
            f.write(" ".join(map(str, ids)) + "\n")
        return self.decode(model, infile, skip)[0]

    def decode(self, model, infile, skip):
        t = self._open(model)
        out = []
        for line in open(infile).read().split("\n")[:-1]:
            v = [int(x) for x in line.split()]
            ids = (ctypes.c_int32 * max(1, len(v)))(*v)
            buf = ctypes.create_string_buffer(64 * len(v) + 64)
            n = ctypes.c_size_t()
            if self.lib.attn_tokenizer_decode(t, ids, len(v), int(skip), buf, len(buf), ctypes.byref(n)):
                raise RuntimeError(self.lib.attn_last_error().decode())
            out.append(buf.raw[: n.value].decode("utf-8"))
        self.lib.attn_tokenizer_free(t)
        return out


def nfd_order_case(g, n):
    """NFD's canonical ordering, seen through ids: lines of a letter and 1-4 random marks (every
    char with a combining class, every M*, some unassigned), a WordPiece vocabulary holding each
    char alone and after "##", so that the ids spell the chars in the order NFD put them."""
    r = g.r
    marks = [chr(c) for c in range(0x300, MAXCP) if not 0xD800 <= c <= 0xDFFF and
             (unicodedata.combining(chr(c)) or unicodedata.category(chr(c)) in ("Mn", "Mc"))]
    marks += [chr(c) for c in r.sample(g.cats["Cn"], 500)]
    lines = [r.choice("abcxyz") + "".join(r.choice(marks) for _ in range(r.randint(1, 4))) for _ in range(n)]
    nfd = normalizers.NFD()
    chars = sorted(set("".join(nfd.normalize_str(l) for l in lines)) | set("".join(lines)))
    vocab = {"[UNK]": 0}
    for ch in chars:
        vocab.setdefault(ch, len(vocab))
        vocab.setdefault("##" + ch, len(vocab))
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=1000))
    tok.normalizer = normalizers.NFD()
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tok, lines


def show(s):
    return " ".join("U+%04X" % ord(c) for c in s[:60]) + (" ..." if len(s) > 60 else "")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("attn")
    ap.add_argument("outdir")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--lines", type=int, default=2500)
    a = ap.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    attn = AttnLib(a.attn) if a.attn.endswith(".so") else AttnCli(a.attn)
    g = Gen(a.seed)
    corpus = g.corpus(3000)
    lines = [g.line() for _ in range(a.lines)]
    infile = os.path.join(a.outdir, "lines.txt")
    with open(infile, "w", encoding="utf-8", newline="\n") as f:
        f.write("".join(l + "\n" for l in lines))
    passed = failed = 0
    shown = 0

    def check(ok, what, text, got, want):
        nonlocal passed, failed, shown
        if ok:
            passed += 1
            return
        failed += 1
        if shown < 8:
            shown += 1
            print("MISMATCH %s\n  text: %s\n  attn: %s\n  hf:   %s" % (what, show(text), got, want))

    cases = configs(corpus) + bpe_configs(corpus) + llm_configs(corpus)
    folder = os.path.join(a.outdir, "bert_folder")
    os.makedirs(folder, exist_ok=True)
    lower = cases[0][1]
    vocab = sorted(lower.get_vocab(with_added_tokens=False).items(), key=lambda kv: kv[1])
    with open(os.path.join(folder, "vocab.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write("".join(tok + "\n" for tok, _ in vocab))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"do_lower_case": True, "model_max_length": 64}, f)
    runs = [(name, tok, os.path.join(a.outdir, name + ".json")) for name, tok in cases]
    j = json.loads(lower.to_str())  # the folder's reference: "lower" without its added [NEW]
    j["added_tokens"] = [t for t in j["added_tokens"] if t["content"] != "[NEW]"]
    runs.append(("vocab_txt_folder", Tokenizer.from_str(json.dumps(j)), folder))
    for name, tok, model in runs:
        if model.endswith(".json"):
            tok.save(model)
        want = [e.ids for e in tok.encode_batch(lines)]
        got = attn.encode(model, infile)
        if len(got) != len(want):
            check(False, "%s: line count" % name, "", len(got), len(want))
            continue
        for text, g_ids, w_ids in zip(lines, got, want):
            check(g_ids == w_ids, "%s: encode" % name, text, g_ids, w_ids)
        # the lines' ids, then random ids (partial UTF-8 bytes for BPE, every token for WordPiece's cleanup)
        size = tok.get_vocab_size()
        rand = [[g.r.randrange(size) for _ in range(g.r.randint(0, 12))] for _ in range(len(lines) // 5)]
        want = want + [ids for ids in rand if "\n" not in tok.decode(ids, skip_special_tokens=False)]  # one a line
        idfile = os.path.join(a.outdir, name + ".ids")
        with open(idfile, "w") as f:
            f.write("".join(" ".join(map(str, ids)) + "\n" for ids in want))
        for skip in (False, True):
            wtext = tok.decode_batch(want, skip_special_tokens=skip)
            gtext = attn.decode(model, idfile, skip)
            for ids, g_t, w_t in zip(want, gtext, wtext):
                check(g_t == w_t, "%s: decode (skip_special_tokens=%s)" % (name, skip), w_t, repr(g_t), repr(w_t))
    # texts with line breaks (\n, \r\n, runs; after punctuation and spaces): one process each, the
    # line-break cases of the Llama-3 / Qwen2 regexes and the byte tokens of \n
    breaks = ["\n", "\r\n", "\n\n", " \n ", "!\n", "\r\n\r\n", "\t\n", " \n\n  ", "?!\r\n", "\n\r", "  \n\t x"]
    multi = [g.line()[:80] + g.r.choice(breaks) + g.line()[:80] + g.r.choice(breaks) for _ in range(12)]
    multi += [b + "it's A\n" + b for b in breaks]
    multi = [m.replace("\0", "") for m in multi]  # argv has no NUL
    nmulti = 0
    for name, tok, model in runs:
        if name not in ("llama3", "qwen2", "gpt2_split", "llama2_normalizer", "mistral_metaspace_first"):
            continue
        for text in multi:
            want = tok.encode(text).ids
            got = attn.encode_one(model, text)
            check(got == want, "%s: encode with line breaks" % name, text, got, want)
            skip = len(want) % 2 == 0
            w_t, g_t = tok.decode(want, skip_special_tokens=skip), attn.decode_one(model, want, skip)
            check(g_t == w_t, "%s: decode with line breaks" % name, w_t, repr(g_t), repr(w_t))
            nmulti += 1
    tok, marks = nfd_order_case(g, a.lines)  # NFD's canonical ordering, on lines of its own
    marks_file, model = os.path.join(a.outdir, "marks.txt"), os.path.join(a.outdir, "nfd_marks.json")
    with open(marks_file, "w", encoding="utf-8", newline="\n") as f:
        f.write("".join(l + "\n" for l in marks))
    tok.save(model)
    for text, g_ids, w_ids in zip(marks, attn.encode(model, marks_file), [e.ids for e in tok.encode_batch(marks)]):
        check(g_ids == w_ids, "nfd_marks: encode", text, g_ids, w_ids)
    print("compared %d lines x %d tokenizers (encode, decode, decode skipping special tokens), %d texts with line "
          "breaks, and %d lines of stacked marks through NFD" % (len(lines), len(runs), nmulti, len(marks)))
    print("tokenizer parity: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
