#!/usr/bin/python3
"""maps.py ROOT: the tree's maps tell the truth.

- Every path of the tree that a comment, a doc page or a man page names
  (store/..., fs/..., docs/..., include/... ending in .c .h .py .sh .md or a
  man section) exists.
- The file maps list every file: store/store_int.h every store/*.c,
  store/tier/tier.h and store/tier/run.c every file of store/tier/, fs/fs.h
  every fs/*.c, the cache's headers every cache/*.c.
- No file of the core store (store/*) includes a tier header but
  tier/tier.h.
- The files store_int.h's map puts below the tier include no tier header.
- fs/ calls no store_* function and includes no store header: it reaches
  the store through the cache layer (embfs/front.h).
- No C file of the programs is over 1,200 lines.
- No file cites DESIGN.md (the design card is not in the tree: docs/design.md
  is).
Prints each problem and exits 1 if there is one."""
import os
import re
import sys

root = sys.argv[1]
bad = []
TOPS = "store|fs|cache|mkfs|util|embfsctl|tests|examples|python|docs|man|include"
PATH = re.compile(r"(?<![\w/.$-])((?:%s)/[\w./-]*?\.(?:c|h|py|sh|md|[58]))(?![\w/])" % TOPS)
SCAN = (".c", ".h", ".py", ".sh", ".md", ".5", ".8")


def files():
    for d, dirs, fs in os.walk(root):
        rel = os.path.relpath(d, root)
        dirs[:] = [x for x in dirs if not x.startswith(".") and not x.startswith("build") and x != "__pycache__"]
        for f in fs:
            if f.endswith(SCAN) or f == "Makefile":
                yield os.path.normpath(os.path.join(rel, f))


for f in sorted(files()):
    text = open(os.path.join(root, f), errors="replace").read()
    for n, line in enumerate(text.splitlines(), 1):
        for m in PATH.finditer(line):
            p = m.group(1)
            if "*" in p or "%" in p or "X" == os.path.basename(p)[:1]:
                continue  # a pattern, not a file
            if not os.path.exists(os.path.join(root, p)):
                bad.append(f"{f}:{n}: names {p}, which does not exist")
        if "DESIGN.md" in line and f != "tests/tools/maps.py":
            bad.append(f"{f}:{n}: cites DESIGN.md, which is not in the tree (docs/design.md is)")


def listed(maps, folder, ext=".c"):
    text = "".join(open(os.path.join(root, m)).read() for m in maps if os.path.exists(os.path.join(root, m)))
    for f in sorted(os.listdir(os.path.join(root, folder))):
        if f.endswith(ext) and not re.search(r"(?<![\w/])(?:%s/)?%s\b" % (re.escape(folder), re.escape(f)), text):
            bad.append(f"{folder}/{f} is missing from the file map ({', '.join(maps)})")


listed(["store/store_int.h"], "store")
listed(["store/tier/tier.h", "store/tier/run.c"], "store/tier")
listed(["fs/fs.h"], "fs")
cache_h = [os.path.join("cache", f) for f in os.listdir(os.path.join(root, "cache")) if f.endswith(".h")]
listed(cache_h + ["include/embfs/cache.h", "include/embfs/front.h"], "cache")

# fs/ calls the cache layer only: no store_* call, no store header
for f in sorted(os.listdir(os.path.join(root, "fs"))):
    if f.endswith((".c", ".h")):
        for n, line in enumerate(open(os.path.join(root, "fs", f)), 1):
            code = line.split("/*")[0].split("//")[0]
            if re.search(r"\bstore_\w+\s*\(", code) or re.match(r'\s*#\s*include\s+"(embfs/store\.h|.*store_int\.h)"', line):
                bad.append(f"fs/{f}:{n}: fs/ reaches past the cache layer: {line.strip()}")

# the core store sees the tier through tier/tier.h only
for f in sorted(os.listdir(os.path.join(root, "store"))):
    if f.endswith((".c", ".h")):
        for n, line in enumerate(open(os.path.join(root, "store", f)), 1):
            if re.match(r'\s*#\s*include\s+"tier/(?!tier\.h")', line):
                bad.append(f"store/{f}:{n}: the core store includes a private header of the tier: {line.strip()}")

# the files store_int.h's file map puts below the tier (after its "tier/"
# line) do not include it: the tier calls them, they never call the tier
below, seen = [], False
for line in open(os.path.join(root, "store", "store_int.h")):
    m = re.match(r"\s\*\s+(tier/|\w+\.c)\s", line)
    if m and m.group(1) == "tier/":
        seen = True
    elif m and seen:
        below.append(m.group(1))
    elif seen and below and not m and not re.match(r"\s\*\s{5,}\S", line):
        break
if not seen or not below:
    bad.append("store/store_int.h: its file map has no tier/ line with files below it")
for f in below:
    p = os.path.join(root, "store", f)
    if not os.path.exists(p):
        continue  # the path check above names it
    for n, line in enumerate(open(p), 1):
        if re.match(r'\s*#\s*include\s+"tier/', line):
            bad.append(f"store/{f}:{n}: a file below the tier (store_int.h's map) includes it: {line.strip()}")

# no C file over 1,200 lines: a file that grows past it holds more than one job
for d in ("fs", "cache", "store", "store/tier", "mkfs", "embfsctl", "util"):
    for f in sorted(os.listdir(os.path.join(root, d))):
        if f.endswith(".c"):
            n = sum(1 for _ in open(os.path.join(root, d, f), errors="replace"))
            if n > 1200:
                bad.append(f"{d}/{f}: {n} lines, over 1,200: split it by job")

for b in bad:
    print(b, file=sys.stderr)
sys.exit(1 if bad else 0)
