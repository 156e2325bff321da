#!/usr/bin/env python3
"""Generate src/text/unicode_tables.c: the Unicode properties attn's tokenizers need.

    python3 scripts/gen_unicode_tables.py > src/text/unicode_tables.c   (then `make format`)

The goal is ids equal to Hugging Face `tokenizers` bit for bit, and `tokenizers` does not follow one
Unicode version: its BERT normalizer and pre-tokenizer take the general categories from the Rust
crate unicode_categories (an old Unicode: unassigned code points are NOT "other" there, and newer
punctuation / nonspacing marks are not what Unicode 14+ says), lowercase from Rust's std
(char::to_lowercase, a recent Unicode) and NFD from the unicode-normalization crate. Python's
unicodedata (whatever version this Python has) would differ from it on tens of thousands of code
points. So this script asks the installed `tokenizers` itself, one code point at a time:
  - OTHER  : BertNormalizer(clean_text) drops the char (U+0000, U+FFFD and HF's is_control);
  - WS     : the BertPreTokenizer splits "a<c>b" into 2 pieces (Rust's char::is_whitespace);
  - PUNCT  : it splits "a<c>b" into 3 pieces (ASCII punctuation or unicode_categories' P*);
  - MN     : BertNormalizer(strip_accents) of a char whose NFD is itself gives "" (is Mn there);
  - MARK   : the StripAccents normalizer of such a char gives "" (a combining mark, any M*);
  - LETTER, NUMBER, SPACE: the classes of the ByteLevel pre-tokenizer's GPT-2 regex (\\p{L}, \\p{N},
             \\s): "a<c>", "1<c>", "!<c>" are one piece for a letter, a number, anything else (not
             \\s, \\p{L}, \\p{N}); a char of none of these is \\s;
  - WORD   : an added token with single_word set is not matched after the char (the regex
             crate's \\w, which tokenizers' AddedVocabulary tests on the chars around the token);
  - OWORD  : the Whitespace pre-tokenizer's \\w (Oniguruma's): "a<c>" is one piece;
  - lower  : BertNormalizer(lowercase) of the char (char::to_lowercase, may expand);
  - NFD    : tokenizers' NFD normalizer of the char (full canonical decomposition), Hangul
             syllables excepted (the C code decomposes them algorithmically);
  - NFKD   : tokenizers' NFKD of the chars where it differs from their NFD (the full
             compatibility decomposition, one flat array of chars with an index);
  - compose: the canonical compositions NFC makes, as pairs (starter, char) -> composite: each
             char whose NFD differs and whose NFC is itself (a primary composite: exclusions and
             singletons fail this), paired from NFC of its NFD less the last char (Hangul
             excepted: the C code composes them algorithmically).
The canonical combining classes (for the canonical ordering of NFD) are probed too, as tokenizers'
NFD orders pairs of chars (its table is older than Python's: U+07FD, U+0C3C, ... have class 0
there): for each char whose NFD is itself, whether it moves across reference marks of each class
(the oldest char of each class in Python's unicodedata, whose version is printed in the header).
"""
import sys
import unicodedata

try:
    import tokenizers
    from tokenizers import normalizers, pre_tokenizers
except ImportError:
    sys.exit("gen_unicode_tables.py needs Hugging Face tokenizers (pip install tokenizers)")

OTHER, MN, PUNCT, WS, MARK, LETTER, NUMBER, SPACE, WORD, OWORD = 1, 2, 4, 8, 16, 32, 64, 128, 256, 512
MAXCP = 0x110000


def is_surrogate(c):
    return 0xD800 <= c <= 0xDFFF


def reference_marks(nfd):
    """One char of each nonzero combining class that tokenizers orders as that class: the lowest
    non-decomposable char of the class (Python's unicodedata) that orders consistently against the
    references already chosen (230, 220 and 1 first: U+0300, U+0316, U+0334); a class none of
    whose chars does is left out (tokenizers' table does not have it)."""
    cands = {}
    for c in range(MAXCP):
        if not is_surrogate(c) and unicodedata.combining(chr(c)) and unicodedata.decomposition(chr(c)) == "":
            cands.setdefault(unicodedata.combining(chr(c)), []).append(chr(c))
    refs = {}
    for k in [230, 220, 1] + sorted(set(cands) - {230, 220, 1}):
        for m in cands[k]:
            if all(swaps(nfd, m, r) and not swaps(nfd, r, m) if j < k else swaps(nfd, r, m) and not swaps(nfd, m, r)
                   for j, r in refs.items()):
                refs[k] = m
                break
    return refs


def swaps(nfd, a, b):
    """Whether tokenizers' NFD puts b before a in a + b (class(a) > class(b) > 0)."""
    return a != b and nfd.normalize_str(a + b) == b + a


def probe_ccc(nfd, ch, refs):
    """ch's canonical combining class as tokenizers' NFD orders it."""
    if not swaps(nfd, refs[230], ch) and not swaps(nfd, ch, refs[220]):
        return 0  # not in (0, 230) and not above 220: class 0 (230 itself moves across 220)
    for k in sorted(refs):
        if not swaps(nfd, ch, refs[k]) and not swaps(nfd, refs[k], ch):
            return k
    raise AssertionError("no class found for U+%04X" % ord(ch))


def main():
    clean = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False, strip_accents=False,
                                       lowercase=False)
    low = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=False,
                                     lowercase=True)
    strip = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=True,
                                       lowercase=False)
    marks = normalizers.StripAccents()
    nfd = normalizers.NFD()
    nfkd, nfc = normalizers.NFKD(), normalizers.NFC()
    pt = pre_tokenizers.BertPreTokenizer()
    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    wsp = pre_tokenizers.Whitespace()
    refs = reference_marks(nfd)
    from tokenizers import AddedToken, Tokenizer, models
    word = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    word.add_tokens([AddedToken("\u2042", single_word=True, normalized=False)])
    probe_id = word.token_to_id("\u2042")
    props = [0] * MAXCP
    lower = []
    decomp = []
    ccc = []
    compat = []
    compose = []
    for c in range(MAXCP):
        if is_surrogate(c):
            continue
        ch = chr(c)
        p = 0
        if clean.normalize_str(ch) == "":
            p |= OTHER
        pieces = len(pt.pre_tokenize_str("a" + ch + "b"))
        if pieces == 2:
            p |= WS
        elif pieces == 3:
            p |= PUNCT
        d = nfd.normalize_str(ch)
        if d == ch and strip.normalize_str(ch) == "":
            p |= MN
        if d == ch and marks.normalize_str(ch) == "":
            p |= MARK
        if probe_id not in word.encode(ch + "\u2042", add_special_tokens=False).ids:
            p |= WORD
        if [w for w, _ in wsp.pre_tokenize_str("a" + ch)] == ["a" + ch]:
            p |= OWORD
        if len(bl.pre_tokenize_str("a" + ch)) == 1:
            p |= LETTER
        elif len(bl.pre_tokenize_str("1" + ch)) == 1:
            p |= NUMBER
        elif len(bl.pre_tokenize_str("!" + ch)) != 1:
            p |= SPACE
        props[c] = p
        lo = low.normalize_str(ch)
        if lo != ch:
            lower.append((c, [ord(x) for x in lo]))
        if d != ch and not (0xAC00 <= c <= 0xD7A3):
            decomp.append((c, [ord(x) for x in d]))
            if nfc.normalize_str(ch) == ch:
                first = nfc.normalize_str(d[:-1])
                if len(first) == 1 and nfc.normalize_str(first + d[-1]) == ch:
                    compose.append((ord(first), ord(d[-1]), c))
        kd = nfkd.normalize_str(ch)
        if kd != d:
            compat.append((c, [ord(x) for x in kd]))
        if d == ch:
            k = probe_ccc(nfd, ch, refs)
            if k:
                ccc.append((c, k))
    runs = []
    for c in range(MAXCP):
        p = props[c]
        if not runs or runs[-1][1] != p:
            runs.append((c, p))
    assert max(len(v) for _, v in lower) <= 3
    assert max(len(v) for _, v in decomp) <= 4
    crun = []
    for c, k in ccc:
        if crun and crun[-1][1] == c - 1 and crun[-1][2] == k:
            crun[-1] = (crun[-1][0], c, k)
        else:
            crun.append((c, c, k))
    out = sys.stdout
    out.write("/* Generated by scripts/gen_unicode_tables.py: do not edit.\n"
              " * Properties probed from Hugging Face tokenizers %s (so that ids equal theirs), combining\n"
              " * classes included, against reference marks from Python %s's unicodedata, Unicode %s. */\n"
              % (tokenizers.__version__, sys.version.split()[0], unicodedata.unidata_version))
    out.write('#include "text/unicode.h"\n\n')
    out.write('const char attn_text_unicode_source[] = "tokenizers %s, unicodedata %s";\n\n'
              % (tokenizers.__version__, unicodedata.unidata_version))
    out.write("/* clang-format off */\n")
    out.write("/* Runs of equal properties: (first code point << 10) | flags, ascending. */\n")
    out.write("const uint32_t attn_text_prop_runs[] = {\n")
    write_list(out, ["0x%x" % ((c << 10) | p) for c, p in runs])
    out.write("};\nconst size_t attn_text_prop_nruns = %d;\n\n" % len(runs))
    out.write("/* The flags of U+0000..U+007F (the common case, without the search). */\n")
    out.write("const uint16_t attn_text_ascii_props[128] = {\n")
    write_list(out, ["0x%x" % props[c] for c in range(128)])
    out.write("};\n\n")
    out.write("/* Lowercase mappings that differ from the char: code point, then up to 3 chars (0-padded). */\n")
    out.write("const uint32_t attn_text_lower[][4] = {\n")
    write_list(out, ["{0x%x,%s}" % (c, ",".join("0x%x" % x for x in (v + [0, 0, 0])[:3])) for c, v in lower])
    out.write("};\nconst size_t attn_text_nlower = %d;\n\n" % len(lower))
    out.write("/* Full canonical decompositions (Hangul syllables excepted): code point, up to 4 chars. */\n")
    out.write("const uint32_t attn_text_decomp[][5] = {\n")
    write_list(out, ["{0x%x,%s}" % (c, ",".join("0x%x" % x for x in (v + [0, 0, 0, 0])[:4])) for c, v in decomp])
    out.write("};\nconst size_t attn_text_ndecomp = %d;\n\n" % len(decomp))
    out.write("/* Canonical combining classes: first, last, class (nonzero only). */\n")
    out.write("const uint32_t attn_text_ccc[][3] = {\n")
    write_list(out, ["{0x%x,0x%x,%d}" % r for r in crun])
    out.write("};\nconst size_t attn_text_nccc = %d;\n" % len(crun))
    out.write("\n/* Compatibility decompositions where NFKD differs from NFD: code point, (offset << 8) | length\n"
              " * into attn_text_compat_chars. */\n")
    out.write("const uint32_t attn_text_compat[][2] = {\n")
    flat, rows = [], []
    for c, v in compat:
        assert len(v) < 256
        rows.append("{0x%x,0x%x}" % (c, (len(flat) << 8) | len(v)))
        flat += v
    write_list(out, rows)
    out.write("};\nconst size_t attn_text_ncompat = %d;\n" % len(compat))
    out.write("const uint32_t attn_text_compat_chars[] = {\n")
    write_list(out, ["0x%x" % x for x in flat])
    out.write("};\n\n")
    compose.sort()
    out.write("/* Canonical compositions (Hangul excepted): starter, char, composite; sorted. */\n")
    out.write("const uint32_t attn_text_compose[][3] = {\n")
    write_list(out, ["{0x%x,0x%x,0x%x}" % r for r in compose])
    out.write("};\nconst size_t attn_text_ncompose = %d;\n" % len(compose))
    out.write("/* clang-format on */\n")


def write_list(out, items):
    line = "   "
    for it in items:
        if len(line) + len(it) + 2 > 118:
            out.write(line + "\n")
            line = "   "
        line += " " + it + ","
    out.write(line + "\n")


if __name__ == "__main__":
    main()
