#!/usr/bin/env python3
"""Lists the circles of calls between the C files of one folder.

File A depends on file B when A names a function that B defines and does not
keep static (a call, or a function pointer taken). The circles are the
strongly connected components of that graph with more than one file; the
script prints each with its size, largest first, and exits 1 when one is
larger than --max (default: no limit).

  tests/tools/call_cycles.py worker --max 5
"""
import argparse
import os
import re
import sys

DEF = re.compile(r"^(?!static\b)[A-Za-z_][\w \*]*?\b([A-Za-z_]\w*)\s*\([^;]*$")
IDENT = re.compile(r"\b[A-Za-z_]\w*\b")


TOKENS = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def strip(text):
    """Comments and literals out, in one pass (a "//" in a string is no comment)."""
    def blank(m):
        t = m.group(0)
        return "\"\"" if t[0] in "\"'" else ("\n" * t.count("\n") or " ")
    return TOKENS.sub(blank, text)


def definitions(text):
    names = set()
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if not line or line[0] in " \t#}{":
            continue
        m = DEF.match(line)
        if not m or m.group(1) in ("if", "while", "for", "switch", "return", "sizeof"):
            continue
        # A definition has its body's brace before the next semicolon.
        rest = "\n".join(lines[i:i + 8])
        brace, semi = rest.find("{"), rest.find(";")
        if brace >= 0 and (semi < 0 or brace < semi):
            names.add(m.group(1))
    return names


def sccs(graph):
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--max", type=int, default=0, help="fail when a circle has more files")
    ap.add_argument("--edges", action="store_true", help="print every file's dependencies")
    args = ap.parse_args()
    texts = {}
    for name in sorted(os.listdir(args.folder)):
        if name.endswith(".c"):
            with open(os.path.join(args.folder, name), encoding="utf-8", errors="replace") as f:
                texts[name] = strip(f.read())
    owner = {}
    for name, text in texts.items():
        for fn in definitions(text):
            owner[fn] = name
    graph = {name: set() for name in texts}
    for name, text in texts.items():
        for ident in set(IDENT.findall(text)):
            dep = owner.get(ident)
            if dep and dep != name:
                graph[name].add(dep)
    if args.edges:
        for name in sorted(graph):
            print(f"{name} -> {' '.join(sorted(graph[name]))}")
    circles = sorted((c for c in sccs(graph) if len(c) > 1), key=len, reverse=True)
    for c in circles:
        print(f"{len(c)} files: {' '.join(c)}")
    if not circles:
        print("no circles")
    largest = len(circles[0]) if circles else 0
    if args.max and largest > args.max:
        print(f"largest circle has {largest} files, more than {args.max}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
