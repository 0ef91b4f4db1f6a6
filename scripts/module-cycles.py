#!/usr/bin/env python3
"""Import cycles between the modules of a crate.

    scripts/module-cycles.py pm/src proto/src bytes/src ...

For every source directory: each file is a module (`a.rs` and `a/mod.rs` are `a`, `a/b.rs`
is `a::b`); every path a file names (`use` trees expanded, and `crate::`, `super::`,
`self::` paths in code) is cut to the longest module it names; a reference from `a::x` to
`a::y::z` is an edge `x -> y` among the children of `a`, at every level. Strongly connected
components of more than one module are cycles: each is printed with the files that make
its edges, and the exit status is 1. `#[cfg(test)]` modules (`tests.rs`, `tests/`) are left
out: nothing imports them. Comments and string literals are ignored; macros are not
expanded (a path built by a macro is not seen).
"""
import os, re, sys
from collections import defaultdict

def modpath(src, f):
    rel = os.path.relpath(f, src)[:-3].split(os.sep)
    if rel in (["lib"], ["main"]): return ()
    if rel[-1] == "mod": rel = rel[:-1]
    return tuple(rel)

def strip(text):
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(\\.|[^"\\])*"', '""', text)
    return text

def expand(prefix, s):
    """expand a use tree string (no 'use', no ';')"""
    s = s.strip()
    out = []
    m = re.match(r"^([\w:]*?)(::)?\{(.*)\}$", s, re.S)
    if m:
        head = m.group(1)
        inner = m.group(3)
        parts, depth, cur = [], 0, ""
        for ch in inner:
            if ch == "{": depth += 1
            if ch == "}": depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur); cur = ""
            else: cur += ch
        parts.append(cur)
        base = prefix + ([x for x in head.split("::") if x] if head else [])
        for p in parts:
            if p.strip(): out += expand(base, p)
        return out
    s = re.sub(r"\s+as\s+\w+$", "", s)
    return [prefix + [x for x in s.split("::") if x]]

def main(src):
    files = []
    for d, _, fs in os.walk(src):
        for f in fs:
            # `#[cfg(test)] mod tests` are leaves nothing imports: not part of the structure.
            if f.endswith(".rs") and "tests" not in modpath(src, os.path.join(d, f)):
                files.append(os.path.join(d, f))
    mods = {modpath(src, f) for f in files}
    edges = defaultdict(set)
    for f in files:
        me = modpath(src, f)
        text = strip(open(f).read())
        paths = []
        for m in re.finditer(r"\buse\s+([^;]+);", text):
            paths += expand([], m.group(1))
        for m in re.finditer(r"\b((?:crate|super|self)(?:::\w+)+)", text):
            paths.append(m.group(1).split("::"))
        # a file of module me: `self` = me (for mod.rs/lib and a.rs alike)
        for p in paths:
            if not p: continue
            if p[0] == "crate": absp = list(p[1:])
            elif p[0] in ("super", "self"):
                base = list(me)
                while p and p[0] in ("super", "self"):
                    if p[0] == "super": base = base[:-1]
                    p = p[1:]
                absp = base + list(p)
            else: continue
            # longest module prefix
            k = len(absp)
            while k > 0 and tuple(absp[:k]) not in mods: k -= 1
            target = tuple(absp[:k])
            # edge between children of lowest common ancestor
            i = 0
            while i < len(me) and i < len(target) and me[i] == target[i]: i += 1
            if i < len(me) and i < len(target):
                edges[(me[:i], me[i])].add((target[i], f))
    bad = 0
    graphs = defaultdict(lambda: defaultdict(set))
    for (parent, a), bs in edges.items():
        for b, f in bs: graphs[parent][a].add(b)
    for parent, g in graphs.items():
        # tarjan
        index, low, stack, on, res, n = {}, {}, [], set(), [], [0]
        def sc(v):
            index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
            for w in g.get(v, ()):
                if w not in index: sc(w); low[v] = min(low[v], low[w])
                elif w in on: low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop(); on.discard(w); comp.append(w)
                    if w == v: break
                if len(comp) > 1: res.append(comp)
        for v in list(g): 
            if v not in index: sc(v)
        for comp in res:
            bad += 1
            print(f"{src}: cycle under {'::'.join(parent) or 'crate'}: {sorted(comp)}")
            for a in sorted(comp):
                for b, f in sorted(edges[(parent, a)]):
                    if b in comp: print(f"    {a} -> {b}  ({os.path.relpath(f, src)})")
    return bad

if __name__ == "__main__":
    sys.setrecursionlimit(10000)
    total = sum(main(s) for s in sys.argv[1:])
    sys.exit(1 if total else 0)
