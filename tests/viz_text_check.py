"""attn viz's texts in its outputs (a helper of tests/viz_text_test.cmake): a --title and a
checkpoint name holding control bytes and invalid UTF-8 must leave every SVG well-formed XML
(parsed here by xml.etree), the HTML page and the CSV valid UTF-8 without control characters, and
each text exactly what the rule says: invalid bytes as U+FFFD (one per maximal subpart: Python's
errors="replace" is the independent reference), C0 controls and DEL as their Control Pictures,
C1 controls as U+FFFD.

usage: viz_text_check.py ATTN WORKDIR CHECKPOINT"""
import csv
import html
import html.parser
import io
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

SVG = "{http://www.w3.org/2000/svg}"


def visible(text):
    out = []
    for ch in text:
        c = ord(ch)
        if c < 0x20:
            out.append(chr(0x2400 + c))
        elif c == 0x7F:
            out.append("\u2421")
        elif 0x80 <= c <= 0x9F or c in (0xFFFE, 0xFFFF):
            out.append("\ufffd")
        else:
            out.append(ch)
    return "".join(out)


def expected(raw):
    return visible(raw.decode("utf-8", errors="replace"))


class TitleOf(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.where, self.title, self.h1 = None, "", ""

    def handle_starttag(self, tag, attrs):
        if tag in ("title", "h1"):
            self.where = tag

    def handle_endtag(self, tag):
        self.where = None

    def handle_data(self, data):
        if self.where == "title":
            self.title += data
        elif self.where == "h1":
            self.h1 += data


failures = 0


def check(ok, what):
    global failures
    if not ok:
        failures += 1
        print("FAIL:", what)
    else:
        print("ok:", what)


def text_file(path, what):
    raw = open(path, "rb").read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        check(False, "%s is valid UTF-8 (%s)" % (what, e))
        return ""
    bad = [c for c in text if (ord(c) < 0x20 and c not in "\n") or 0x7F <= ord(c) <= 0x9F]
    check(not bad, "%s has no control characters (found %r)" % (what, bad[:5]))
    return text


def main():
    attn, work, ckpt = sys.argv[1].encode(), sys.argv[2].encode(), sys.argv[3].encode()
    # a truncated sequence, stray bytes, an overlong '/', a surrogate, past U+10FFFF, controls
    title = b"t\x01i\ttle <&>\"' \xe2\x82( \xff\xfe \xc0\xaf \xed\xa0\x80 \xf4\x90\x80\x80 \x7f\xc2\x85 \xe2\x82\xac end"
    name = b"ck\x1b[31m\xff\x0a.safetensors"
    shutil.copyfile(ckpt, os.path.join(work, name))
    runs = [
        ([b"--title", title, b"--svg", b"t.svg", b"--html", b"t.html", b"--csv", b"t.csv"], title),
        ([b"--svg", b"d.svg", b"--html", b"d.html"], b"attention of " + name),
    ]
    for args, want_raw in runs:
        cmd = [attn, b"viz", b"--checkpoint", name, b"--text", b"a\x01<b>\xff", b"--layer", b"0", b"--head", b"0"]
        r = subprocess.run(cmd + args, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        check(r.returncode == 0, "attn viz %r exits 0 (%s)" % (args[:2], r.stderr.decode("utf-8", "replace")))
        if r.returncode:
            continue
        want = expected(want_raw)
        svg = os.path.join(work, args[args.index(b"--svg") + 1])
        text_file(svg, "SVG")
        try:
            root = ET.parse(svg).getroot()
        except ET.ParseError as e:
            check(False, "SVG is well-formed XML (%s)" % e)
            continue
        t = root.find(SVG + "title").text
        check(t == want + ": layers.0.self_attn, head 0", "SVG <title> %r is the title as the rule says" % t)
        labels = [e.text for e in root.iter(SVG + "text") if e.get("class") == "row"]
        check(labels[:4] == ["a", "\\x01", "<", "b"], "SVG row labels %r" % labels)
        page = text_file(os.path.join(work, args[args.index(b"--html") + 1]), "HTML")
        p = TitleOf()
        p.feed(page)
        check(p.title == want and p.h1 == want, "HTML <title> / <h1> %r are the title as the rule says" % p.title)
        check(expected(name) in html.unescape(page), "HTML names the checkpoint as the rule says")
        if b"--csv" in args:
            rows = list(csv.reader(io.StringIO(text_file(os.path.join(work, b"t.csv"), "CSV"), newline="")))
            check(len(rows) == 1 + 6 * 6 and all(len(x) == 9 for x in rows), "CSV: a header and 36 rows of 9 fields")
            check([x[6] for x in rows[1::6]] == ["a", "\\x01", "<", "b", ">", "\\xff"], "CSV query labels")
    print("viz_text: %d failed" % failures)
    return 1 if failures else 0


sys.exit(main())
