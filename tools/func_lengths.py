#!/usr/bin/env python3
"""Function lengths of C files: `tools/func_lengths.py [-n TOP] [--max L] FILE.c...`.

Prints the TOP longest function definitions (lines from the first line of the signature to the
closing brace) as LINES FILE:LINE NAME. With --max L, exits 1 when any function is longer than L
lines. Comments, strings, character literals and preprocessor lines are skipped; a definition is
a brace at file level whose statement ends in ')' (so struct, enum and initialiser braces are not
functions)."""
import argparse
import re
import sys


def strip(text):
    """The text with comments, strings, char literals and preprocessor lines blanked (newlines kept)."""
    out, i, n = [], 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c == '#':  # a preprocessor line, with its continuations
            while i < n and text[i] != '\n':
                if text[i] == '\\' and i + 1 < n and text[i + 1] == '\n':
                    out.append('\n')
                    i += 2
                    continue
                i += 1
            continue
        if c == '/' and text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', text[i:j]))
            i = j
            continue
        if c == '/' and text.startswith('//', i):
            while i < n and text[i] != '\n':
                i += 1
            continue
        if c in '"\'':
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == '\\' else 1
            out.append(c + ' ' * max(0, j - i - 1) + c)
            i = j + 1
            continue
        if c == '\n':
            at_line_start = True
        elif not c.isspace():
            at_line_start = False
        out.append(c)
        i += 1
    return ''.join(out)


def functions(path):
    text = strip(open(path, encoding='utf-8', errors='replace').read())
    depth, stmt_start, stmt, line = 0, None, [], 1
    start = name = None
    for c in text:
        if c == '\n':
            line += 1
        if depth == 0:
            if c == '{':
                s = ''.join(stmt).strip()
                if s.endswith(')') and '=' not in s.split('(')[0]:
                    m = re.search(r'([A-Za-z_]\w*)\s*\(', s)
                    start, name = stmt_start, m.group(1) if m else '?'
                else:
                    start = None
                depth = 1
                stmt, stmt_start = [], None
                continue
            if c in ';}':
                stmt, stmt_start = [], None
                continue
            if stmt_start is None and not c.isspace():
                stmt_start = line
            stmt.append(c)
            continue
        if c == '{':
            depth += 1
        elif c == '}':
            depth -= 1
            if depth == 0 and start is not None:
                yield line - start + 1, start, name
                start = None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('-n', type=int, default=10, help='how many to list (default 10; 0: all)')
    ap.add_argument('--max', type=int, default=0, help='exit 1 when a function is longer than this')
    ap.add_argument('files', nargs='+')
    a = ap.parse_args()
    rows = [(n, f, s, name) for f in a.files for n, s, name in functions(f)]
    rows.sort(key=lambda r: (-r[0], r[1], r[2]))
    for n, f, s, name in rows[:a.n] if a.n else rows:
        print(f'{n:5d} {f}:{s} {name}')
    over = [r for r in rows if a.max and r[0] > a.max]
    if over:
        print(f'{len(over)} function(s) over {a.max} lines', file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
