#!/usr/bin/env python3
"""The stats keys the daemon's source prints against the key reference.

  statskeys.py SRC_DIR DOC     exit 0 when they agree, 1 (FAIL: ...) when not

SRC_DIR holds fs/stats.c, fs/batch.c and fs/pcache.c (or copies of them);
DOC is the page with the key reference table (docs/operations.md).  From the
source: every key and metric of a PUT/PUTF/STATS_PUT/P(...) call (a file's
own P macro may prefix both), every put_string key, the per-table and
per-snapshot fields of tdefs/sdefs (and dtype=), and every metric family
written by family(...).  From the page: the "| stats key | metric |" table.
Every key and family of the source must be in the table and every one in
the table must be in the source.  Standard library only.
"""
import os
import re
import sys

FILES = ("fs/stats.c", "fs/batch.c", "fs/pcache.c")


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def strip_comments(text):
    return re.sub(r"/\*.*?\*/", " ", text, flags=re.S)


def from_source(src):
    keys, fams = set(), set()
    for rel in FILES:
        path = os.path.join(src, rel)
        try:
            text = strip_comments(open(path, encoding="utf-8").read())
        except OSError as e:
            fail(f"cannot read {path}: {e}")
        # a file's P macro: STATS_PUT(o, ["prefix." ]key, ["prefix_" ]metric, ...)
        kpre = mpre = ""
        m = re.search(r'#define\s+P\(key,\s*metric[^)]*\)\s*STATS_PUT\(\s*o,\s*(?:"([^"]*)"\s*)?key,\s*'
                      r'(?:"([^"]*)"\s*)?metric', text)
        if m:
            kpre, mpre = m.group(1) or "", m.group(2) or ""
        for name, k, mt in re.findall(r'\b(PUTF?|STATS_PUT|P)\(\s*(?:o,\s*)?"([^"]+)",\s*"([^"]+)"', text):
            if name == "P":
                k, mt = kpre + k, mpre + mt
            keys.add(k)
            fams.add("embfs_" + mt)
        for k in re.findall(r'put_string\(\s*o,\s*"([^"]+)"', text):
            keys.add(k)
        for mt in re.findall(r'\bfamily\(\s*o,\s*"([^"]+)"', text):
            fams.add("embfs_" + mt)
        for arr, kind in (("tdefs", "table"), ("sdefs", "snapshot")):
            m = re.search(arr + r"\[\]\s*=\s*\{(.*?)\n\};", text, flags=re.S)
            if not m:
                continue
            for k, mt in re.findall(r'\[[A-Z_]+\]\s*=\s*\{\s*"([^"]+)",\s*"([^"]+)"', m.group(1)):
                keys.add(f"{kind}.NAME {k}=")
                fams.add("embfs_" + mt)
        for k in re.findall(r'fprintf\(f,\s*" ([a-z_]+)=%s"', text):
            keys.add(f"table.NAME {k}=")
    if len(keys) < 100:
        fail(f"only {len(keys)} stats keys found in {src}: has the source's form changed?")
    return keys, fams


def from_doc(doc):
    text = open(doc, encoding="utf-8").read()
    head = "| stats key | metric | type | unit | meaning |"
    if head not in text:
        fail(f"{doc}: no key reference table ({head})")
    keys, fams = set(), set()
    for line in text[text.index(head):].split("\n")[2:]:
        if not line.startswith("|"):
            break
        cols = [c.strip() for c in line.strip("|").split("|")]
        k = re.findall(r"`([^`]+)`", cols[0])
        if len(k) != 1:
            fail(f"{doc}: bad key cell in {line!r}")
        keys.add(k[0])
        for mt in re.findall(r"`([^`]+)`", cols[1]):
            fams.add(re.sub(r"\{.*\}$", "", mt))
    return keys, fams


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    skeys, sfams = from_source(sys.argv[1])
    dkeys, dfams = from_doc(sys.argv[2])
    bad = []
    for what, s, d in (("stats key", skeys, dkeys), ("metric family", sfams, dfams)):
        for k in sorted(s - d):
            bad.append(f"{what} {k!r} is printed by the daemon but not in the key reference")
        for k in sorted(d - s):
            bad.append(f"{what} {k!r} is in the key reference but the daemon does not print it")
    if bad:
        fail("\n  ".join([f"{sys.argv[2]} and the source disagree:"] + bad))
    print(f"{len(skeys)} stats keys and {len(sfams)} metric families: source and key reference agree")


main()
