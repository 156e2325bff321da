#!/usr/bin/env python3
"""Lengths of the C functions in src/ and tools/ (signature line to closing brace), longest first.

    .ci/function_lengths.py [--top N] [--max L] [paths...]

With --max, exits 1 naming every function over L lines (CI holds src/ and tools/ to 150). A
function is a top-level brace block whose opening line ends a declarator with ')' or ') {'; the
count is from the first line of the signature to the closing brace, both included."""
import argparse
import os
import re
import sys


def strip(text):
    # comments, strings and character literals out, newlines kept (so line numbers hold)
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(''.join(ch if ch == '\n' else ' ' for ch in text[i:j]))
            i = j
        elif text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i))
            i = j
        elif c in '"\'':
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == '\\' else 1
            out.append(c + ' ' * (min(j, n - 1) - i - 1) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return ''.join(out)


def functions(path):
    text = strip(open(path, encoding='utf-8', errors='replace').read())
    lines = text.split('\n')
    depth, start, name, res = 0, None, None, []
    for ln, line in enumerate(lines):
        for ch in line:
            if ch == '{':
                if depth == 0:
                    # the signature: back from this line to the line after the last ';', '}' or '#'
                    k = ln
                    head = line[:line.index('{')]
                    while k > 0 and not re.search(r'[;}]\s*$|^\s*#', lines[k - 1]) and lines[k - 1].strip():
                        k -= 1
                        head = lines[k] + ' ' + head
                    m = re.search(r'(\w+)\s*\([^;]*\)\s*$', head)
                    if m and not re.match(r'\s*(struct|enum|union|typedef)\b', head) and '=' not in head.split('(')[0]:
                        start, name = k, m.group(1)
                    else:
                        start, name = None, None
                depth += 1
            elif ch == '}':
                depth -= 1
                if depth == 0 and start is not None:
                    res.append((ln - start + 1, path, start + 1, name))
                    start = None
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--top', type=int, default=15)
    ap.add_argument('--max', type=int, default=0)
    ap.add_argument('paths', nargs='*', default=['src', 'tools'])
    a = ap.parse_args()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
    found = []
    for p in a.paths:
        p = p if os.path.isabs(p) or os.path.exists(p) else os.path.join(root, p)
        files = [p] if os.path.isfile(p) else [os.path.join(d, f) for d, _, fs in os.walk(p) for f in fs if f.endswith('.c')]
        for f in sorted(files):
            found += functions(f)
    found.sort(reverse=True)
    if a.max:
        over = [f for f in found if f[0] > a.max]
        for n, f, l, name in over:
            print(f'{os.path.relpath(f)}:{l}: {name} is {n} lines (over {a.max})')
        print(f'function lengths: {len(found)} functions, {len(over)} over {a.max} lines')
        return 1 if over else 0
    for n, f, l, name in found[:a.top]:
        print(f'{n:5d}  {name}  {os.path.relpath(f)}:{l}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
