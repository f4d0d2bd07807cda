#!/usr/bin/env python3
"""The checks of tests/e2e/metrics.sh on a live mount (standard library only).

  metrics.py setup MNT             tables and snapshots with hard names, rows in them
  metrics.py files MNT DOC [--all]
        .embfs/stats and .embfs/metrics parse strictly (tests/tools/expfmt.py),
        show every table and snapshot under its exact name, agree with each
        other value by value, have a non-zero size in stat, and every key and
        family is in DOC's key reference (docs/operations.md) (--all: and every key there is on
        the mount: a mount with the row cache, .embfs/rows and a spill device)
  metrics.py ctl MNT EMBFSCTL VERSION_H
        embfsctl: each command, its JSON, its errors and exit codes

Exit 0 pass, 1 fail (FAIL: ... on stderr).
"""
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import expfmt  # noqa: E402

# quote, backslash, space, '=' and a newline; UTF-8; not UTF-8
TABLES = [b"a b=c.emb", b'q"\\ x=\ny.emb', "é.emb".encode(), b"raw\xff.emb", b"plain.emb"]
SNAPS = [b"s 1", b's"\\x=\nsnap', b"sn\xffap"]


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def name_str(b):
    """A name as expfmt.parse_stats gives it back."""
    return b.decode("utf-8", "surrogateescape")


def label_str(b):
    """A name as a metrics label value holds it (bytes outside UTF-8 as \\xHH)."""
    return b.decode("utf-8", "backslashreplace")


def setup(mnt):
    m = os.fsencode(mnt)
    for i, t in enumerate(TABLES):
        fd = os.open(os.path.join(m, t), os.O_CREAT | os.O_WRONLY, 0o644)
        # rows 0..i+1 of 256 bytes, then one far away
        os.pwrite(fd, bytes([i + 1]) * 256 * (i + 2), 0)
        os.pwrite(fd, b"z" * 256, 256 * 1000)
        os.close(fd)
    for s in SNAPS:
        os.mkdir(os.path.join(m, b".snapshots", s))
    fd = os.open(os.path.join(m, TABLES[0]), os.O_RDONLY)
    os.pread(fd, 256, 0)  # a cache hit
    os.close(fd)


def read(mnt, name):
    with open(os.path.join(mnt, ".embfs", name), "rb") as f:
        return f.read()


def readme_rows(readme):
    """The key reference: [(stats key, [metric families and their label], type)]."""
    text = open(readme, encoding="utf-8").read()
    start = text.index("| stats key | metric | type | unit | meaning |")
    rows = []
    for line in text[start:].split("\n")[2:]:
        if not line.startswith("|"):
            break
        cols = [c.strip() for c in line.strip("|").split("|")]
        key = re.findall(r"`([^`]+)`", cols[0])
        metrics = re.findall(r"`([^`]+)`", cols[1])
        if len(key) != 1 or not metrics or len(cols) != 5 or not cols[4]:
            fail(f"key reference: bad row {line!r}")
        fams = []
        for m in metrics:
            mm = re.fullmatch(r"([a-z_]+)(?:\{([a-z_,]+)\})?", m)
            if not mm:
                fail(f"key reference: bad metric {m!r}")
            fams.append((mm.group(1), (mm.group(2) or "").split(",") if mm.group(2) else []))
        rows.append((key[0], fams, cols[2]))
    if len(rows) < 100:
        fail(f"key reference has {len(rows)} rows")
    return rows


def entry_key(key):
    """('table', 'rows') for "table.NAME rows=", None for a plain key."""
    m = re.fullmatch(r"(table|snapshot)\.NAME ([a-z_]+)=", key)
    return (m.group(1), m.group(2)) if m else None


def close(a, b):
    return abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b)) or (abs(a - b) < 0.051 and a != int(a))


def compare(st, fams, rows):
    """Differences between the stats and the metrics of one moment (list of strings)."""
    diffs = []
    plain = {}
    labelled = {}
    for name, fam in fams.items():
        for sname, labels, v in fam["samples"]:
            if not labels:
                plain[sname] = v
            else:
                labelled.setdefault(sname, []).append((labels, v))
    for key, mfams, _ in rows:
        ek = entry_key(key)
        fam, labs = mfams[0]
        if ek is None:
            if key not in st["keys"]:
                continue
            sv = st["keys"][key]
            if isinstance(sv, str):
                if labs and fam in labelled and labs[0] in labelled[fam][0][0]:
                    mv = labelled[fam][0][0][labs[0]]
                    if mv != sv:
                        diffs.append(f"{key} {sv!r} vs {fam}{{{labs[0]}}} {mv!r}")
                continue
            if fam not in plain:
                diffs.append(f"{key} has no sample {fam}")
            elif not close(float(sv), plain[fam]):
                diffs.append(f"{key} {sv} vs {fam} {plain[fam]}")
            continue
        kind, field = ek
        where = st["tables"] if kind == "table" else st["snapshots"]
        label = "table" if kind == "table" else "snapshot"
        for name, fields in where.items():
            if field not in fields:
                continue
            want = label_str(os.fsencode(name))
            got = [(lb, v) for lb, v in labelled.get(fam, []) if lb.get(label) == want]
            if len(got) != 1:
                diffs.append(f"{kind} {name!r}: {len(got)} samples of {fam}")
                continue
            lb, v = got[0]
            sv = fields[field]
            if isinstance(sv, str):
                if lb.get(field) != sv:
                    diffs.append(f"{kind} {name!r} {field}={sv} vs {fam} {lb}")
            elif field == "created_ns":
                if abs(sv / 1e9 - v) > 1e-3:
                    diffs.append(f"{kind} {name!r} created_ns={sv} vs {fam} {v}")
            elif not close(float(sv), v):
                diffs.append(f"{kind} {name!r} {field}={sv} vs {fam} {v}")
    return diffs


def files(mnt, readme, everything):
    rows = readme_rows(readme)
    for f in ("stats", "metrics"):
        size = os.stat(os.path.join(mnt, ".embfs", f)).st_size
        n = len(read(mnt, f))
        if size <= 0:
            fail(f"stat .embfs/{f}: size {size}")
        if abs(size - n) > n // 10:
            fail(f"stat .embfs/{f}: size {size}, but a read gave {n} bytes")
    for attempt in range(10):
        sdata, mdata = read(mnt, "stats"), read(mnt, "metrics")
        try:
            st = expfmt.parse_stats(sdata)
        except expfmt.Invalid as e:
            fail(f".embfs/stats: {e}")
        try:
            fams = expfmt.parse_metrics(mdata)
        except expfmt.Invalid as e:
            fail(f".embfs/metrics: {e}")
        diffs = compare(st, fams, rows)
        if not diffs:
            break
        time.sleep(0.2)
    else:
        fail("stats and metrics disagree (10 tries): " + "; ".join(diffs[:10]))
    # every table and snapshot by its exact name, in both files
    want_t = {name_str(t) for t in TABLES}
    want_s = {name_str(s) for s in SNAPS}
    if set(st["tables"]) != want_t:
        fail(f"stats tables {sorted(st['tables'])} want {sorted(want_t)}")
    if set(st["snapshots"]) != want_s:
        fail(f"stats snapshots {sorted(st['snapshots'])} want {sorted(want_s)}")
    for fam, f in fams.items():
        labels = [lb for _, lb, _ in f["samples"] if lb]
        for key, want in (("table", {label_str(t) for t in TABLES}), ("snapshot", {label_str(s) for s in SNAPS})):
            got = {lb[key] for lb in labels if key in lb}
            if got and got != want:
                fail(f"{fam}: {key} labels {sorted(got)} want {sorted(want)}")
    # per-row metadata is what one more cached row costs: a 24-byte entry and
    # up to 16 bytes of bucket (none while the shards' first 16 buckets
    # suffice), not the empty cache's buckets spread over few rows
    k = st["keys"]
    if "cache.rows" in k:
        if not 0 < k["cache.rows"] < 100 or not 24 <= k["cache.meta_bytes_per_row"] <= 40 \
                or not 0 < k["cache.meta_fixed_bytes"] < k["cache.meta_bytes"]:
            fail(f"row cache metadata: {k['cache.rows']} rows, meta_bytes {k.get('cache.meta_bytes')}, "
                 f"fixed {k.get('cache.meta_fixed_bytes')}, per row {k['cache.meta_bytes_per_row']}")
    if "embfs_cache_hits_total" in fams and fams["embfs_cache_hits_total"]["samples"]:
        hits = {lb["table"]: v for _, lb, v in fams["embfs_cache_hits_total"]["samples"]}
        if hits[label_str(TABLES[0])] < 1:
            fail(f"embfs_cache_hits_total: {hits}")
    # the key reference against the mount
    ref_keys, ref_fams = set(), set()
    for key, mfams, typ in rows:
        ref_keys.add(key)
        for fam, _ in mfams:
            ref_fams.add(fam)
            if fam in fams and fams[fam]["type"] != typ.split(" ")[0]:
                fail(f"the key reference says {fam} is a {typ}, .embfs/metrics a {fams[fam]['type']}")
    have_keys = set(st["keys"])
    for kind in ("table", "snapshot"):
        for fields in st[kind + "s"].values():
            have_keys |= {f"{kind}.NAME {k}=" for k in fields}
    missing = sorted(have_keys - ref_keys) + sorted(set(fams) - ref_fams)
    if missing:
        fail(f"not in the key reference: {missing}")
    if everything:
        absent = sorted(ref_keys - have_keys) + sorted(ref_fams - set(fams))
        if absent:
            fail(f"in the key reference but not on the mount: {absent}")
    print(f"  stats: {len(st['keys'])} keys, {len(st['tables'])} tables, {len(st['snapshots'])} snapshots; "
          f"metrics: {len(fams)} families, {sum(len(f['samples']) for f in fams.values())} samples; "
          f"all agree and are in the key reference")


def run(args, code=0, stdin=None):
    p = subprocess.run(args, capture_output=True)
    if p.returncode != code:
        fail(f"{[os.fsdecode(a) for a in args]}: exit {p.returncode}, want {code}; "
             f"stdout {p.stdout[-300:]!r} stderr {p.stderr[-300:]!r}")
    # a failure says why on stderr: one line (bad usage: with the usage after it)
    if code == 1 and (not p.stderr or p.stderr.count(b"\n") != 1):
        fail(f"{[os.fsdecode(a) for a in args]}: exit 1 without a one-line message: {p.stderr!r}")
    if code == 2 and not p.stderr:
        fail(f"{[os.fsdecode(a) for a in args]}: exit 2 without a message")
    return p


def stats_now(mnt):
    return expfmt.parse_stats(read(mnt, "stats"))


def ctl(mnt, exe, version_h):
    m = os.fsencode(mnt)
    ver = re.search(r'#define EMBFS_VERSION "([^"]+)"', open(version_h).read()).group(1)
    out = run([exe, "-V"]).stdout.decode()
    if out != f"embfsctl (embfs) {ver}\n":
        fail(f"embfsctl -V: {out!r}, want the version {ver}")
    if b"snapshot NAME" not in run([exe, "--help"]).stdout:
        fail("embfsctl --help does not list the commands")
    run([exe], 2)
    run([exe, mnt], 2)
    run([exe, mnt, "frob"], 2)
    run([exe, mnt, "stat", "--frob"], 2)
    run([exe, mnt, "snapshot"], 2)
    run([exe, mnt, "batch", "1", "2"], 2)
    run([exe, mnt, "batch", "x1"], 2)
    run([exe, mnt, "flush", "--wait", "--timeout", "0"], 2)
    # not an embfs mount
    notmnt = os.path.dirname(mnt.rstrip("/"))
    for cmd in (["stat"], ["snapshots"], ["snapshot", "x"], ["drop", "x"], ["flush"], ["batch"], ["batch", "9"]):
        p = run([exe, notmnt] + cmd, 1)
        if b"not an embfs mount" not in p.stderr:
            fail(f"embfsctl {notmnt} {cmd[0]}: {p.stderr!r}")
    run([exe, os.path.join(notmnt, "nonexistent"), "stat"], 1)
    run([exe, os.path.join(mnt, ".embfs", "stats"), "stat"], 1)

    # stat: one line per table, names last, with units
    out = run([exe, mnt, "stat"]).stdout
    lines = out.split(b"\n")
    head = [i for i, l in enumerate(lines) if l.strip().startswith(b"ROWS")]
    if len(head) != 1:
        fail(f"embfsctl stat: no table header in {out!r}")
    tlines = [l for l in lines[head[0] + 1:] if l]
    if len(tlines) != len(TABLES):
        fail(f"embfsctl stat: {len(tlines)} table lines for {len(TABLES)} tables: {tlines}")
    shown = {l.split(b"  ")[-1] for l in tlines}
    for t in TABLES:
        esc = re.sub(rb"[\x00-\x1f\x7f\\]", lambda x: b"\\x%02x" % x.group(0)[0], t).replace(b"\xff", b"\\xff")
        if esc not in shown:
            fail(f"embfsctl stat: table {t!r} not shown as {esc!r}: {shown}")
    if not re.search(rb"[0-9.]+ (B|KiB|MiB|GiB)", out) or b"hits" not in out:
        fail(f"embfsctl stat: no units or hits in {out!r}")
    # stat --json: valid, every key of the stats, every table by name
    js = run([exe, mnt, "stat", "--json"]).stdout
    p = subprocess.run([sys.executable, "-m", "json.tool"], input=js, capture_output=True)
    if p.returncode:
        fail(f"embfsctl stat --json is not valid JSON: {p.stderr!r}")
    j = json.loads(js)
    st = stats_now(mnt)
    if set(j["stats"]) != set(st["keys"]):
        fail(f"stat --json keys differ from .embfs/stats: {set(j['stats']) ^ set(st['keys'])}")
    if j["stats"]["pool.size_bytes"] != st["keys"]["pool.size_bytes"] or not isinstance(j["stats"]["rows"], int):
        fail(f"stat --json numbers: {j['stats']['pool.size_bytes']!r} {j['stats']['rows']!r}")
    if {t["name"] for t in j["tables"]} != {label_str(t) for t in TABLES}:
        fail(f"stat --json tables: {[t['name'] for t in j['tables']]}")
    if any(not isinstance(t["rows"], int) or not isinstance(t["dtype"], str) for t in j["tables"]):
        fail(f"stat --json table fields: {j['tables'][0]}")

    # snapshots
    before = time.time()
    run([exe, mnt, "snapshot", "ctl snap"])
    if not os.path.isdir(os.path.join(m, b".snapshots", b"ctl snap")):
        fail("embfsctl snapshot: no directory in .snapshots")
    p = run([exe, mnt, "snapshot", "ctl snap"], 1)
    if b"exists" not in p.stderr:
        fail(f"embfsctl snapshot of an existing name: {p.stderr!r}")
    run([exe, mnt, "snapshot", "a/b"], 2)
    js = run([exe, mnt, "snapshots", "--json"]).stdout
    if subprocess.run([sys.executable, "-m", "json.tool"], input=js, capture_output=True).returncode:
        fail("embfsctl snapshots --json is not valid JSON")
    snaps = {s["name"]: s for s in json.loads(js)["snapshots"]}
    want = {label_str(s) for s in SNAPS} | {"ctl snap"}
    if set(snaps) != want:
        fail(f"snapshots --json: {sorted(snaps)} want {sorted(want)}")
    cs = snaps["ctl snap"]
    if cs["batch"] != st["keys"]["batch"] or abs(cs["created_ns"] / 1e9 - before) > 60:
        fail(f"snapshots --json: ctl snap {cs} (batch before it {st['keys']['batch']}, time {before})")
    out = run([exe, mnt, "snapshots"]).stdout
    lines = [l for l in out.split(b"\n") if l]
    if len(lines) != len(want) + 1 or not lines[0].split()[0] == b"BATCH" or \
            not any(l.endswith(b"  ctl snap") and b"%d" % cs["batch"] in l for l in lines):
        fail(f"embfsctl snapshots: {out!r}")
    if not re.search(rb"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", out):
        fail(f"embfsctl snapshots: no creation time in {out!r}")
    p = run([exe, mnt, "drop", "no such snap"], 1)
    if b"no snapshot" not in p.stderr:
        fail(f"embfsctl drop of an unknown snapshot: {p.stderr!r}")
    run([exe, mnt, "drop", "ctl snap"])
    if os.path.exists(os.path.join(m, b".snapshots", b"ctl snap")):
        fail("embfsctl drop: the snapshot is still there")
    if "ctl snap" in stats_now(mnt)["snapshots"]:
        fail("embfsctl drop: the snapshot is still in .embfs/stats")

    # batch
    cur = int(read(mnt, "batch"))
    if run([exe, mnt, "batch"]).stdout != b"%d\n" % cur:
        fail("embfsctl batch does not print .embfs/batch")
    run([exe, mnt, "batch", str(cur + 10)])
    if int(read(mnt, "batch")) != cur + 10:
        fail("embfsctl batch N did not set the batch id")
    p = run([exe, mnt, "batch", str(cur)], 1)
    if b"never goes back" not in p.stderr:
        fail(f"embfsctl batch going back: {p.stderr!r}")

    # flush: dirty rows (the mount's dirty_age_ms is long) become durable
    fd = os.open(os.path.join(m, TABLES[4]), os.O_WRONLY)
    os.pwrite(fd, b"d" * 256 * 64, 256 * 2000)
    os.close(fd)
    s0 = stats_now(mnt)["keys"]
    if s0.get("cache.dirty", 0) < 64:
        fail(f"no dirty rows to flush: cache.dirty {s0.get('cache.dirty')}")
    run([exe, mnt, "flush"])
    s1 = stats_now(mnt)["keys"]
    if s1["cache.dirty"] != 0 or s1["store.rows_written"] < s0["store.rows_written"] + 64:
        fail(f"embfsctl flush: cache.dirty {s1['cache.dirty']}, rows written {s0['store.rows_written']} -> "
             f"{s1['store.rows_written']}")
    # flush --wait: rows written and a snapshot taken after them, both durable on return
    fd = os.open(os.path.join(m, TABLES[4]), os.O_WRONLY)
    os.pwrite(fd, b"e" * 256 * 64, 256 * 3000)
    os.close(fd)
    run([exe, mnt, "snapshot", "pending"])
    st = stats_now(mnt)
    if st["snapshots"]["pending"]["durable"] != 0:
        fail("snapshot 'pending' is durable before any flush: the --wait check below proves nothing")
    run([exe, mnt, "flush", "--wait", "--timeout", "30"])
    st = stats_now(mnt)
    if st["keys"]["cache.dirty"] != 0 or any(s["durable"] != 1 for s in st["snapshots"].values()):
        fail(f"embfsctl flush --wait: cache.dirty {st['keys']['cache.dirty']}, "
             f"durable {[(n, s['durable']) for n, s in st['snapshots'].items()]}")
    run([exe, mnt, "snapshot", "synced", "--sync"])
    if stats_now(mnt)["snapshots"]["synced"]["durable"] != 1:
        fail("embfsctl snapshot --sync: not durable")
    for s in ("pending", "synced"):
        run([exe, mnt, "drop", s])
    print("  embfsctl: -V, --help, usage errors, not a mount, stat (+json), snapshot (--sync), snapshots "
          "(+json), drop, batch, flush (--wait)")


def main(argv):
    if len(argv) == 3 and argv[1] == "setup":
        setup(argv[2])
    elif len(argv) in (4, 5) and argv[1] == "files":
        files(argv[2], argv[3], argv[4:] == ["--all"])
    elif len(argv) == 5 and argv[1] == "ctl":
        ctl(argv[2], argv[3], argv[4])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
