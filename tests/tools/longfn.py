#!/usr/bin/python3
"""longfn.py ROOT: no C function of the programs is over 80 lines.

A function's length is the number of lines between its opening brace and
its closing brace (its body; the brace lines themselves are not counted).  The folders checked are fs/,
cache/, store/, store/tier/ and mkfs/.  A function of EXCEPT may be longer:
a flat printer or an option table, which reads top to bottom and says
nothing more split in two.  Prints each function over the limit and exits 1
if one is not an exception; -v lists every function over the limit,
exceptions included, with its length."""
import os
import re
import sys

LIMIT = 80
DIRS = ("fs", "cache", "store", "store/tier", "mkfs")
# "dir/file.c:function": why it may be longer than LIMIT (none today)
EXCEPT = {
}


def strip(text):
    """text with its comments, strings and character constants blanked
    (newlines kept, so that line numbers hold)"""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j - 1]) + c)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(path):
    """(name, first line, last line) of each function defined in path"""
    text = strip(open(path, errors="replace").read())
    # preprocessor lines are no code of a function's head
    text = re.sub(r"(?m)^[ \t]*#.*(?:\\\n.*)*$", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    depth, start, head = 0, None, []
    line = 1
    for i, c in enumerate(text):
        if c == "\n":
            line += 1
        if c == "{":
            if depth == 0:
                # a function's body follows "name(...)" (and perhaps attributes)
                before = "".join(head).rstrip()
                m = re.search(r"(\w+)\s*\((?:[^()]|\([^()]*\))*\)\s*(?:__attribute__\s*\(\(.*?\)\)\s*)*$", before, re.S)
                start = (m.group(1), line) if m and not re.search(r"=\s*$", before) else None
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                if start:
                    yield start[0], start[1], line
                start, head = None, []
        elif depth == 0:
            if c == ";":
                head = []
            else:
                head.append(c)


def main(argv):
    verbose = "-v" in argv
    args = [a for a in argv if a != "-v"]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    bad = []
    for d in DIRS:
        for f in sorted(os.listdir(os.path.join(root, d))):
            if not f.endswith(".c"):
                continue
            rel = f"{d}/{f}"
            for name, first, last in functions(os.path.join(root, d, f)):
                n = last - first - 1
                if n <= LIMIT:
                    continue
                why = EXCEPT.get(f"{rel}:{name}")
                if verbose:
                    print(f"{rel}:{first}: {name}: {n} lines" + (f" (exception: {why})" if why else ""))
                if not why:
                    bad.append(f"{rel}:{first}: {name} is {n} lines, over {LIMIT}: split it into steps")
    for b in bad:
        print(b, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
