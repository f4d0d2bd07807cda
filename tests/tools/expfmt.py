#!/usr/bin/env python3
"""Strict parsers of embfs's two counter files (tests only; standard library).

  expfmt.py metrics FILE   FILE in the Prometheus text exposition format 0.0.4:
                           prints its families as JSON
  expfmt.py stats FILE     FILE in the .embfs/stats format: prints it as JSON
  expfmt.py selftest       each parser takes good texts and refuses each bad one

Exit status 0 valid, 1 invalid (the first error on stderr, with its line).
As a module: parse_metrics(bytes) and parse_stats(bytes) raise Invalid.

metrics: every line is a HELP, a TYPE or a sample (no blank lines, no other
comments); names and label names valid, label values with only the escapes
\\\\, \\" and \\n; the value a float as Go's ParseFloat reads it (decimal, NaN,
+Inf, -Inf), an optional integer timestamp; a family's HELP and TYPE before
its first sample, once each, and every line of a family together; no series
twice; every sample belongs to a declared family; counters are named
*_total and are neither negative nor NaN; the text ends in a newline.

stats: "KEY VALUE" lines, KEY without spaces, VALUE a number (or text for
the few string keys); "snapshot.NAME k=v ..." and "table.NAME k=v ..."
lines whose NAME has no space, '=', backslash or control character except
as \\xHH escapes (undone here), k=v words with numbers (dtype: a word); no
key twice.
"""
import json
import re
import sys

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?Inf|NaN")
TIMESTAMP = re.compile(r"-?[0-9]+")
TYPES = ("counter", "gauge", "histogram", "summary", "untyped")
STRING_KEYS = ("pool.path", "pool.label", "pool.media", "pool.state", "spill.path")


class Invalid(Exception):
    pass


def _family_of(name, families):
    """The declared family a sample name belongs to (None if none)."""
    if name in families and families[name]["type"] in ("counter", "gauge", "untyped", "summary"):
        return name
    for suffix, kinds in (("_bucket", ("histogram",)), ("_sum", ("histogram", "summary")),
                          ("_count", ("histogram", "summary"))):
        if name.endswith(suffix):
            base = name[: -len(suffix)]
            if base in families and families[base]["type"] in kinds:
                return base
    return None


def _unescape_help(s, lineno):
    """A HELP text with its escapes (only \\\\ and \\n) undone."""
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\":
            e = s[i + 1: i + 2]
            if e not in ("\\", "n"):
                raise Invalid(f"line {lineno}: bad escape \\{e} in HELP")
            out.append("\n" if e == "n" else "\\")
            i += 2
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def _labels(s, pos, lineno):
    """Parse {a="x",b="y"} at s[pos] == '{': (dict, position after '}')."""
    labels = {}
    pos += 1
    while True:
        if s.startswith("}", pos):
            return labels, pos + 1
        m = LABEL.match(s, pos)
        if not m:
            raise Invalid(f"line {lineno}: bad label name at column {pos + 1}")
        lname = m.group(0)
        if lname.startswith("__"):
            raise Invalid(f"line {lineno}: label name {lname} is reserved")
        if lname in labels:
            raise Invalid(f"line {lineno}: label {lname} twice")
        pos = m.end()
        if not s.startswith('="', pos):
            raise Invalid(f"line {lineno}: no =\" after label {lname}")
        pos += 2
        val = []
        while True:
            if pos >= len(s):
                raise Invalid(f"line {lineno}: label value of {lname} not closed")
            c = s[pos]
            if c == '"':
                pos += 1
                break
            if c == "\\":
                e = s[pos + 1: pos + 2]
                if e not in ("\\", '"', "n"):
                    raise Invalid(f"line {lineno}: bad escape \\{e} in label {lname}")
                val.append("\n" if e == "n" else e)
                pos += 2
                continue
            val.append(c)
            pos += 1
        labels[lname] = "".join(val)
        if s.startswith(",", pos):
            pos += 1
        elif not s.startswith("}", pos):
            raise Invalid(f"line {lineno}: expected , or }} after label {lname}")


def parse_metrics(data):
    """{family: {"type", "help", "samples": [(name, labels, value)]}} of a text."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Invalid(f"not UTF-8: {e}") from None
    if not text:
        raise Invalid("empty")
    if not text.endswith("\n"):
        raise Invalid("no newline at the end")
    families = {}
    closed = set()
    current = None
    series = set()

    def enter(fam, lineno):
        nonlocal current
        if fam != current:
            if fam in closed:
                raise Invalid(f"line {lineno}: family {fam} continues after other families' lines")
            if current is not None:
                closed.add(current)
            current = fam

    for lineno, line in enumerate(text[:-1].split("\n"), 1):
        if line.startswith("#"):
            m = re.fullmatch(r"# (HELP|TYPE) (\S+) (.*)", line)
            if not m:
                raise Invalid(f"line {lineno}: a comment that is neither HELP nor TYPE: {line!r}")
            kind, name, rest = m.groups()
            if not NAME.fullmatch(name):
                raise Invalid(f"line {lineno}: bad metric name {name!r}")
            enter(name, lineno)
            fam = families.setdefault(name, {"type": None, "help": None, "samples": []})
            if fam["samples"]:
                raise Invalid(f"line {lineno}: {kind} of {name} after its samples")
            if kind == "HELP":
                if fam["help"] is not None:
                    raise Invalid(f"line {lineno}: second HELP of {name}")
                fam["help"] = _unescape_help(rest, lineno)
            else:
                if fam["type"] is not None:
                    raise Invalid(f"line {lineno}: second TYPE of {name}")
                if rest not in TYPES:
                    raise Invalid(f"line {lineno}: bad type {rest!r} of {name}")
                if rest == "counter" and not name.endswith("_total"):
                    raise Invalid(f"line {lineno}: counter {name} not named *_total")
                fam["type"] = rest
            continue
        m = NAME.match(line)
        if not m:
            raise Invalid(f"line {lineno}: not a sample: {line!r}")
        name, pos = m.group(0), m.end()
        labels = {}
        if line.startswith("{", pos):
            labels, pos = _labels(line, pos, lineno)
        rest = line[pos:]
        m = re.fullmatch(r"[ \t]+(\S+)(?:[ \t]+(\S+))?", rest)
        if not m:
            raise Invalid(f"line {lineno}: bad value part {rest!r}")
        value, ts = m.groups()
        if not FLOAT.fullmatch(value):
            raise Invalid(f"line {lineno}: bad value {value!r}")
        if ts is not None and not TIMESTAMP.fullmatch(ts):
            raise Invalid(f"line {lineno}: bad timestamp {ts!r}")
        fam = _family_of(name, families)
        if fam is None or families[fam]["type"] is None:
            raise Invalid(f"line {lineno}: sample {name} before (or without) its family's TYPE")
        if families[fam]["help"] is None:
            raise Invalid(f"line {lineno}: sample {name} without a HELP of {fam}")
        enter(fam, lineno)
        key = (name, frozenset(labels.items()))
        if key in series:
            raise Invalid(f"line {lineno}: series {name}{labels} twice")
        series.add(key)
        v = float(value.replace("Inf", "inf").replace("NaN", "nan"))
        if families[fam]["type"] == "counter" and not v >= 0:
            raise Invalid(f"line {lineno}: counter {name} is {value}")
        families[fam]["samples"].append((name, labels, v))
    for name, fam in families.items():
        if fam["type"] is None or fam["help"] is None:
            raise Invalid(f"family {name} lacks its {'TYPE' if fam['type'] is None else 'HELP'}")
    return families


NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")


def _unescape_name(s, lineno):
    """A stats NAME with its \\xHH escapes undone (str; bytes outside UTF-8 as surrogates)."""
    if re.search(r"[\x00-\x20=\x7f]", s):
        raise Invalid(f"line {lineno}: name {s!r} has a raw space, '=' or control character")
    if re.search(r"\\(?!x[0-9a-f]{2})", s):
        raise Invalid(f"line {lineno}: name {s!r} has a backslash that is no \\xHH escape")
    raw = re.sub(rb"\\x([0-9a-f]{2})", lambda m: bytes([int(m.group(1), 16)]), s.encode("utf-8"))
    return raw.decode("utf-8", "surrogateescape")


def parse_stats(data):
    """{"keys": {key: value}, "snapshots": {name: {k: v}}, "tables": {name: {k: v}}}."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Invalid(f"not UTF-8: {e}") from None
    if not text.endswith("\n"):
        raise Invalid("no newline at the end")
    out = {"keys": {}, "snapshots": {}, "tables": {}}
    seen = set()
    for lineno, line in enumerate(text[:-1].split("\n"), 1):
        m = re.fullmatch(r"([^ ]+) (.*)", line)
        if not m:
            raise Invalid(f"line {lineno}: not KEY VALUE: {line!r}")
        key, rest = m.groups()
        if key in seen:
            raise Invalid(f"line {lineno}: key {key!r} twice")
        seen.add(key)
        if re.search(r"[\x00-\x1f\x7f]", rest):
            raise Invalid(f"line {lineno}: control character in the value")
        for prefix, where in (("snapshot.", "snapshots"), ("table.", "tables")):
            if key.startswith(prefix):
                name = _unescape_name(key[len(prefix):], lineno)
                if not name:
                    raise Invalid(f"line {lineno}: empty name")
                fields = {}
                for w in rest.split(" "):
                    fm = re.fullmatch(r"([a-z_]+)=(\S+)", w)
                    if not fm or fm.group(1) in fields:
                        raise Invalid(f"line {lineno}: bad or repeated field {w!r}")
                    k, v = fm.groups()
                    if k == "dtype":
                        if not re.fullmatch(r"[a-z0-9]+", v):
                            raise Invalid(f"line {lineno}: bad dtype {v!r}")
                    elif NUMBER.fullmatch(v):
                        v = float(v) if "." in v else int(v)
                    else:
                        raise Invalid(f"line {lineno}: field {k} is not a number: {v!r}")
                    fields[k] = v
                if name in out[where]:
                    raise Invalid(f"line {lineno}: {prefix}{name!r} twice (after unescaping)")
                out[where][name] = fields
                break
        else:
            if not re.fullmatch(r"[a-z][a-z0-9_.]*", key):
                raise Invalid(f"line {lineno}: bad key {key!r}")
            if key in STRING_KEYS:
                if re.search(r"\\(?!x[0-9a-f]{2})", rest):
                    raise Invalid(f"line {lineno}: backslash that is no \\xHH escape in {key}")
                out["keys"][key] = rest
            elif NUMBER.fullmatch(rest):
                out["keys"][key] = float(rest) if "." in rest else int(rest)
            else:
                raise Invalid(f"line {lineno}: {key} is not a number: {rest!r}")
    return out


GOOD_METRICS = [
    b'# HELP a_total A.\n# TYPE a_total counter\na_total 1\n',
    b'# HELP g G \\\\ x\\n.\n# TYPE g gauge\ng{t="a b=c",u="q\\"\\\\\\n"} -1.5e3\ng{t="x"} NaN\ng 2 1700000000000\n',
    b'# TYPE g gauge\n# HELP g G\ng{t="\xc3\xa9",} +Inf\n# HELP e E, no samples\n# TYPE e gauge\n',
]
BAD_METRICS = [
    (b'', "empty"),
    (b'# HELP a A\n# TYPE a gauge\na 1', "no final newline"),
    (b'# HELP a A\n# TYPE a gauge\n\na 1\n', "blank line"),
    (b'# HELP a A\n# TYPE a gauge\n# other\na 1\n', "other comment"),
    (b'# HELP a A\n# TYPE a gauge\na 1\n# HELP b B\n# TYPE b gauge\nb 1\na 2\n', "family split"),
    (b'# HELP a A\n# TYPE a gauge\na 1\na 2\n', "duplicate series"),
    (b'# HELP a A\n# TYPE a gauge\na{x="1",y="2"} 1\na{y="2",x="1"} 2\n', "duplicate series, labels reordered"),
    (b'# HELP a A\na 1\n', "no TYPE"),
    (b'# TYPE a gauge\na 1\n', "no HELP"),
    (b'a 1\n', "no family"),
    (b'# HELP a A\n# TYPE a gauge\n# TYPE a gauge\na 1\n', "TYPE twice"),
    (b'# HELP a A\n# TYPE a gauge\na 1\n# HELP a A\n', "HELP after samples"),
    (b'# HELP a A\n# TYPE a frob\na 1\n', "bad type"),
    (b'# HELP a A\n# TYPE a counter\na 1\n', "counter without _total"),
    (b'# HELP a_total A\n# TYPE a_total counter\na_total -1\n', "negative counter"),
    (b'# HELP 1a A\n# TYPE 1a gauge\n1a 1\n', "bad metric name"),
    (b'# HELP a A\n# TYPE a gauge\na{1x="1"} 1\n', "bad label name"),
    (b'# HELP a A\n# TYPE a gauge\na{__x="1"} 1\n', "reserved label name"),
    (b'# HELP a A\n# TYPE a gauge\na{x="1",x="2"} 1\n', "label twice"),
    (b'# HELP a A\n# TYPE a gauge\na{x="a\\tb"} 1\n', "bad escape"),
    (b'# HELP a A\n# TYPE a gauge\na{x="a"b"} 1\n', "raw quote"),
    (b'# HELP a A\n# TYPE a gauge\na{x="a} 1\n', "label value not closed"),
    (b'# HELP a A\n# TYPE a gauge\na{x=a} 1\n', "unquoted label value"),
    (b'# HELP a A\n# TYPE a gauge\na 1,5\n', "bad value"),
    (b'# HELP a A\n# TYPE a gauge\na 0x10\n', "hex value"),
    (b'# HELP a A\n# TYPE a gauge\na\n', "no value"),
    (b'# HELP a A\n# TYPE a gauge\na 1 2 3\n', "extra field"),
    (b'# HELP a A\n# TYPE a gauge\na 1 1.5\n', "bad timestamp"),
    (b'# HELP a A \\x\n# TYPE a gauge\na 1\n', "bad escape in HELP"),
    (b'# HELP a A\n# TYPE a gauge\na{x="\xff"} 1\n', "not UTF-8"),
]
GOOD_STATS = [
    b'pool.path /p\\x5cq\npool.state ok\nrows 3\ncache.meta_bytes_per_row 28.0\n'
    b'snapshot.s\\x201 batch=1 durable=0\ntable.a\\x20b\\x3dc.emb rows=1 dtype=f32\n'
    b'table.q"\\x5c\\x0a.emb rows=2\n',
]
BAD_STATS = [
    (b'rows 3', "no final newline"),
    (b'rows\n', "no value"),
    (b'rows 3\nrows 4\n', "key twice"),
    (b'rows three\n', "not a number"),
    (b'table.a b=c.emb rows=1\n', "raw space in a name"),
    (b'table.a=b rows=1\n', "raw = in a name"),
    (b'table.a\\b rows=1\n', "raw backslash in a name"),
    (b'table.a\\x2 rows=1\n', "short escape"),
    (b'table.a rows=1 rows=2\n', "field twice"),
    (b'table.a rows=x\n', "field not a number"),
    (b'table.a rows\n', "field without ="),
    (b'table.a rows=1\ntable.a rows=2\n', "table twice"),
    (b'table.a\\x20 rows=1\ntable.a\\x20 rows=2\n', "escaped table twice"),
    (b'pool.state ok\x01\n', "control character"),
    (b'Rows 3\n', "bad key"),
    (b'table. rows=1\n', "empty name"),
]


def selftest():
    bad = 0
    for text in GOOD_METRICS:
        try:
            parse_metrics(text)
        except Invalid as e:
            print(f"selftest: refused a good metrics text: {e}: {text!r}", file=sys.stderr)
            bad += 1
    fams = parse_metrics(GOOD_METRICS[1])
    if fams["g"]["samples"][0][1] != {"t": "a b=c", "u": 'q"\\\n'} or fams["g"]["help"] != "G \\ x\n.":
        print(f"selftest: wrong labels or help: {fams['g']}", file=sys.stderr)
        bad += 1
    for text, why in BAD_METRICS:
        try:
            parse_metrics(text)
            print(f"selftest: took a bad metrics text ({why}): {text!r}", file=sys.stderr)
            bad += 1
        except Invalid:
            pass
    for text in GOOD_STATS:
        try:
            st = parse_stats(text)
            if set(st["tables"]) != {"a b=c.emb", 'q"\\\n.emb'} or st["keys"]["pool.path"] != "/p\\x5cq" \
                    or list(st["snapshots"]) != ["s 1"]:
                print(f"selftest: wrong stats parse: {st}", file=sys.stderr)
                bad += 1
        except Invalid as e:
            print(f"selftest: refused a good stats text: {e}", file=sys.stderr)
            bad += 1
    for text, why in BAD_STATS:
        try:
            parse_stats(text)
            print(f"selftest: took a bad stats text ({why}): {text!r}", file=sys.stderr)
            bad += 1
        except Invalid:
            pass
    n = len(GOOD_METRICS) + len(BAD_METRICS) + len(GOOD_STATS) + len(BAD_STATS)
    print(f"selftest: {n - bad} of {n} cases right")
    return 1 if bad else 0


def main(argv):
    if len(argv) == 2 and argv[1] == "selftest":
        return selftest()
    if len(argv) != 3 or argv[1] not in ("metrics", "stats"):
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[2], "rb") as f:
        data = f.read()
    try:
        if argv[1] == "metrics":
            fams = parse_metrics(data)
            out = {k: {"type": v["type"], "help": v["help"],
                       "samples": [{"name": n, "labels": lb, "value": val} for n, lb, val in v["samples"]]}
                   for k, v in fams.items()}
        else:
            out = parse_stats(data)
    except Invalid as e:
        print(f"{argv[2]}: {e}", file=sys.stderr)
        return 1
    json.dump(out, sys.stdout, indent=1, allow_nan=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
