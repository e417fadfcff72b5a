#!/usr/bin/python3
"""The layering gate (DESIGN.md §2): every #include of include/, src/ and tools/ must follow an edge
that the table of allowed edges (tools/layers/layers.txt) lists, and there must be no cycle, neither
between files nor between layers.

Usage: check_layers.py [--root DIR] [--table FILE] [--edges]
  --root   the tree to check (default: the repository this script is in)
  --table  the table (default: tools/layers/layers.txt under the root, else beside this script)
  --edges  print the layer edges found, with a file that makes each, and exit 0

Exit 0: clean; 1: a violation (each one named with its file and line); 2: a bad table.
"""
import argparse
import os
import re
import sys
from collections import defaultdict

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def read_table(path):
    """Layers in order, each with its path patterns and the layers it may include."""
    layers, order = {}, []
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            m = re.match(r"^layer\s+(\S+)\s*:\s*(.*?)\s*(?:->\s*(.*))?$", line)
            if not m:
                sys.exit(f"{path}:{number}: expected 'layer NAME: PATH... -> LAYER...', got: {raw.strip()}")
            name, paths, uses = m.group(1), m.group(2).split(), (m.group(3) or "").split()
            if name in layers:
                sys.exit(f"{path}:{number}: layer {name} twice")
            for u in uses:
                if u not in layers:
                    sys.exit(f"{path}:{number}: {name} -> {u}: {u} is not a layer above this line "
                             "(layers are listed bottom-up, and only downward edges may be allowed)")
            layers[name] = {"paths": paths, "uses": set(uses)}
            order.append(name)
    return layers, order


def layer_of(rel, layers, order):
    """The layer of a repository path: the longest matching path pattern (a file or a folder/)."""
    best, best_len = None, -1
    for name in order:
        for p in layers[name]["paths"]:
            hit = rel == p or (p.endswith("/") and rel.startswith(p))
            if hit and len(p) > best_len:
                best, best_len = name, len(p)
    return best


def resolve(root, including, quote, target):
    """The repository path an include names, or None for one from outside (the standard library)."""
    if quote == '"':
        local = os.path.normpath(os.path.join(os.path.dirname(including), target))
        if os.path.isfile(os.path.join(root, local)):
            return local
    if target.startswith("mgm/"):
        return os.path.join("include", target)
    for base in ("tests", ""):  # a test's "tool/run_mgm.hpp"
        cand = os.path.normpath(os.path.join(base, target))
        if quote == '"' and os.path.isfile(os.path.join(root, cand)):
            return cand
    return None


def sources(root):
    for top in ("include", "src", "tools"):
        for d, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if f.endswith((".hpp", ".h", ".cpp", ".cu", ".cuh")):
                    yield os.path.relpath(os.path.join(d, f), root)


def find_cycle(graph):
    """One cycle of `graph` (node -> set of nodes) as a list, or None."""
    colour, stack = {}, []

    def visit(n):
        colour[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if colour.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if colour.get(m) is None:
                c = visit(m)
                if c:
                    return c
        stack.pop()
        colour[n] = 2
        return None

    for n in sorted(graph):
        if colour.get(n) is None:
            c = visit(n)
            if c:
                return c
    return None


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(here)))
    ap.add_argument("--table")
    ap.add_argument("--edges", action="store_true")
    a = ap.parse_args()
    table = a.table or os.path.join(a.root, "tools", "layers", "layers.txt")
    if not os.path.isfile(table):
        table = os.path.join(here, "layers.txt")
    layers, order = read_table(table)

    problems = []
    files = defaultdict(set)
    layer_edges = defaultdict(set)
    example = {}
    for rel in sources(a.root):
        mine = layer_of(rel, layers, order)
        if mine is None:
            problems.append(f"{rel}: in no layer of {os.path.relpath(table, a.root)}")
            continue
        with open(os.path.join(a.root, rel), encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = resolve(a.root, rel, m.group(1), m.group(2))
                if target is None:
                    continue
                files[rel].add(target)
                theirs = layer_of(target, layers, order)
                if theirs is None:
                    problems.append(f"{rel}:{number}: includes {target}, which is in no layer")
                    continue
                if theirs == mine:
                    continue
                layer_edges[mine].add(theirs)
                example.setdefault((mine, theirs), f"{rel}:{number}")
                if theirs not in layers[mine]["uses"]:
                    problems.append(f"{rel}:{number}: {mine} includes {target} of {theirs}, an edge the table does not allow")
    if a.edges:
        for (x, y), where in sorted(example.items()):
            print(f"{x} -> {y}   ({where})")
        return 0
    c = find_cycle(files)
    if c:
        problems.append("a cycle of includes between files: " + " -> ".join(c))
    c = find_cycle(layer_edges)
    if c:
        problems.append("a cycle between layers: " + " -> ".join(c))
    for p in problems:
        print("layering:", p)
    if problems:
        print(f"layering: {len(problems)} problem(s); the allowed edges are in {os.path.relpath(table, a.root)}")
        return 1
    print(f"layering: {sum(len(v) for v in files.values())} includes of {len(files)} files follow "
          f"{sum(len(layers[n]['uses']) for n in order)} allowed edges between {len(order)} layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
