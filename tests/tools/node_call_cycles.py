#!/usr/bin/env python3
"""Lists the circles of calls between the C files of a program folder.

A file calls another when it names a function (called, or passed as a
callback) that the other file defines without `static`. Files that reach
each other through such calls form a circle (a strongly connected component
of the call graph); the script prints every circle with the calls that make
it, and exits 1 when one has more files than --max allows.

Usage: tests/tools/node_call_cycles.py [--max N] [--edges] [FOLDER]   (default: node)
"""
import argparse
import os
import re
import sys

IDENT = re.compile(r"\b[A-Za-z_]\w*\b")
# A definition starts at the beginning of a line: a return type, the name,
# the parameters, and then the body's brace (on the same or the next line).
DEFINITION = re.compile(r"^(?!static\b)(?!typedef\b)(?!extern\b)[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*\([^;{]*\)\s*\{",
                        re.MULTILINE)


def strip(text):
    """The text without comments, strings and character literals."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def strongly_connected(graph):
    index, low, stack, on_stack, result = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            result.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", nargs="?", default="node")
    ap.add_argument("--max", type=int, default=5, help="largest circle allowed (files)")
    ap.add_argument("--edges", action="store_true", help="print every call between files")
    args = ap.parse_args()

    files = sorted(f for f in os.listdir(args.folder) if f.endswith(".c"))
    texts = {}
    defined = {}
    for f in files:
        with open(os.path.join(args.folder, f), encoding="utf-8") as fh:
            texts[f] = strip(fh.read())
        for m in DEFINITION.finditer(texts[f]):
            defined[m.group(1)] = f

    graph = {f: {} for f in files}
    for f in files:
        for name in set(IDENT.findall(texts[f])):
            g = defined.get(name)
            if g and g != f:
                graph[f].setdefault(g, set()).add(name)

    if args.edges:
        for f in files:
            for g in sorted(graph[f]):
                print(f"{f} -> {g}: {', '.join(sorted(graph[f][g]))}")
        print()

    worst = 0
    circles = [c for c in strongly_connected({f: set(graph[f]) for f in files}) if len(c) > 1]
    for c in sorted(circles, key=len, reverse=True):
        worst = max(worst, len(c))
        print(f"circle of {len(c)} files: {' '.join(c)}")
        for f in c:
            for g in sorted(graph[f]):
                if g in c:
                    print(f"  {f} -> {g}: {', '.join(sorted(graph[f][g]))}")
    if not circles:
        print(f"{args.folder}/: no circles of calls between its {len(files)} files")
    if worst > args.max:
        print(f"the largest circle has {worst} files; at most {args.max} are allowed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
