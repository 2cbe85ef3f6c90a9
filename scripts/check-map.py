#!/usr/bin/env python3
"""Checks the map of lock-runtime/src that docs/architecture.md carries.

The document's ```layers block lists the layers, top first, one a line:
`name: entries`; a line without a colon goes on with the layer above, and
`#` starts a comment. An entry is a file or a folder (ending in `/`) of the
crate's src/. A file belongs to the most specific entry that names it (a
file named by itself beats its folder).

Checks, for every `.rs` file: it is placed exactly once; it imports no file
of a layer above its own; no files import each other in a circle. An import
is a path that starts with `crate::`, `super::` or `self::`, in a `use` or
anywhere in the code (comments and strings aside); a module's own `mod`
declarations and the paths through them are its structure, not imports.
Prints one line per problem, then a summary line; exits 0 only when clean.

Usage: scripts/check-map.py [SRC [DOC]]
       (defaults: lock-runtime/src docs/architecture.md)
"""
import os
import re
import sys

src = sys.argv[1] if len(sys.argv) > 1 else "lock-runtime/src"
doc = sys.argv[2] if len(sys.argv) > 2 else "docs/architecture.md"

# The crate's files, by module path: ("route", "cluster") for route/cluster/mod.rs.
files = {}
for root, _, names in os.walk(src):
    for name in names:
        if name.endswith(".rs"):
            rel = os.path.relpath(os.path.join(root, name), src)
            parts = tuple(rel[:-3].split(os.sep))
            if parts[-1] in ("mod", "lib", "main"):
                parts = parts[:-1]
            files[parts] = rel


def code_of(text):
    """The text without comments, strings and char literals."""
    pattern = r'//[^\n]*|/\*.*?\*/|r(#*)".*?"\1|b?"(?:\\.|[^"\\])*"|b?\'(?:\\.|[^\\\'])\''
    return re.sub(pattern, '""', text, flags=re.S)


def expand(tree):
    """The paths a `use` tree names: `a::{b, c::{d, self}}` -> a::b, a::c::d, a::c."""
    tree = re.sub(r"\s+as\s+\w+", "", tree)
    tree = re.sub(r"\s+", "", tree)
    if "{" not in tree:
        return [tree.split("::")]
    start = tree.index("{")
    prefix = [s for s in tree[:start].split("::") if s]
    inner, depth, part, paths = tree[start + 1 : -1], 0, "", []
    for ch in inner + ",":
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            for path in expand(part) if part else []:
                paths.append(prefix + [s for s in path if s != "self"])
            part = ""
        else:
            part += ch
    return paths


def resolve(module, path):
    """The file that `path`, written in `module`, leads to (None: not this crate's)."""
    if path[0] == "crate":
        at, path = [], path[1:]
    elif path[0] in ("super", "self"):
        at = list(module)
        while path and path[0] in ("super", "self"):
            if path[0] == "super":
                at = at[:-1]
            path = path[1:]
    else:
        return None
    full = at + path
    for i in range(len(full), -1, -1):
        if tuple(full[:i]) in files:
            return tuple(full[:i])
    return None


def imports(module, text):
    """The files that the code `text` of `module` imports, with the modules
    written inline in it (`mod tests { ... }`) read as theirs."""
    found = set()
    for inline in re.finditer(r"\bmod\s+(\w+)\s*\{", text):
        if text[inline.start()] == " ":  # inside an inline module already read
            continue
        depth, i = 1, inline.end()
        while depth and i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        found |= imports(module + (inline.group(1),), text[inline.end() : i - 1])
        text = text[: inline.start()] + " " * (i - inline.start()) + text[i:]
    paths = []
    for use in re.finditer(r"\buse\s+([^;]+);", text):
        paths += expand(use.group(1))
    text = re.sub(r"\buse\s+[^;]+;", "", text)
    paths += [m.group(0).split("::") for m in re.finditer(r"\b(?:crate|super|self)(?:::\w+)+", text)]
    for path in paths:
        target = resolve(module, [s for s in path if s])
        if target is not None:
            found.add(target)
    return found


edges = {}
for module, rel in files.items():
    with open(os.path.join(src, rel), encoding="utf-8") as f:
        edges[module] = imports(module, code_of(f.read())) - {module}

# The map.
problems = []
with open(doc, encoding="utf-8") as f:
    block = re.search(r"^```layers[ \t]*\n(.*?)^```", f.read(), re.S | re.M)
if not block:
    sys.exit(f"check-map: {doc} has no ```layers block")
layers = []
for line in block.group(1).splitlines():
    line = line.split("#")[0].strip()
    if ":" in line:
        name, rest = line.split(":", 1)
        layers.append((name.strip(), rest.split()))
    elif line and layers:
        layers[-1][1].extend(line.split())

placed = {}  # file -> (depth, layer name, entry)
twice = set()
for depth, (name, entries) in enumerate(layers):
    for entry in entries:
        hits = [m for m, rel in files.items() if (rel.startswith(entry) if entry.endswith("/") else rel == entry)]
        if not hits:
            problems.append(f"map names {entry} ({name}), which is not in {src}")
        for m in hits:
            if m in placed and len(placed[m][2]) == len(entry):
                twice.add(m)
                problems.append(f"placed twice: {files[m]} ({placed[m][1]} and {name})")
            elif m not in placed or len(placed[m][2]) < len(entry):
                placed[m] = (depth, name, entry)

unplaced = sorted(files[m] for m in files if m not in placed)
problems += [f"unplaced: {rel}" for rel in unplaced]
up = 0
for a in sorted(files, key=files.get):
    for b in sorted(edges[a], key=files.get):
        if a in placed and b in placed and placed[b][0] < placed[a][0]:
            up += 1
            problems.append(f"runs up: {files[a]} ({placed[a][1]}) imports {files[b]} ({placed[b][1]})")

# Import cycles: the strongly connected sets of two files or more (Tarjan).
index, low, stack, on_stack, cycles = {}, {}, [], set(), []


def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in edges[v]:
        if w not in index:
            visit(w)
            low[v] = min(low[v], low[w])
        elif w in on_stack:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        group = []
        while True:
            w = stack.pop()
            on_stack.discard(w)
            group.append(files[w])
            if w == v:
                break
        if len(group) > 1:
            cycles.append(sorted(group))


sys.setrecursionlimit(10000)
for v in sorted(files):
    if v not in index:
        visit(v)
problems += [f"import cycle: {' '.join(group)}" for group in sorted(cycles)]

for problem in problems:
    print(problem)
print(
    f"check-map: {up} imports run up, {len(unplaced) + len(twice)} files unplaced or placed twice, "
    f"{len(cycles)} import cycles, {len(problems)} problems in all"
)
sys.exit(1 if problems else 0)
