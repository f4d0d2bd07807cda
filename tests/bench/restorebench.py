#!/usr/bin/python3
"""restorebench: restore in place (.embfs/restore) against copying the
table through the mount with dd bs=1M, in one run (bench section restore).

    restorebench.py MNT [-n ROWS] [-d DIM] [-p PERCENT] [-r RUNS] [-s SEED]

On the mounted pool MNT: a table r.emb of ROWS rows of DIM f32 is written
(65,536 rows per scatter) and synced, and snapshot base taken.  Then RUNS
times: PERCENT % of the rows (random, distinct) are overwritten and synced,
the table is restored in place to base (timed; the daemon's own report is
printed too), and checked (a sample of rows against their original values;
the restored count must equal the changed count).  Then an incremental checkpoint: snapshot mid, PERCENT % of the rows changed
again, snapshot next, and Mount.export_delta(mid, next) written to a .npz in
DELTA_DIR (default /dev/shm), RUNS times (time and bytes); and the same
delta shipped as files, `cp -r --sparse=always MNT/.snapshots/mid/.delta/next
DELTA_DIR/...` (time; bytes read through the mount, the changed rows and the
id lists; bytes the copy takes on DELTA_DIR's blocks), checked by applying
it to a copy of mid.  Then `cp MNT/.snapshots/base/r.emb MNT/cp.emb` (a copy
out of a snapshot).  Baseline, RUNS times: `dd if=MNT/r.emb
of=MNT/copy.emb bs=1M` (the copy deleted after each).
Prints each run and one line:
    restorebench rows=N changed=C restore_ms=X dd_ms=Y ratio=X/Y
(medians).  Exit 0, or 1 on a failed check.
"""
import argparse
import os
import subprocess
import sys
import time

import numpy as np

import embfs


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mnt")
    ap.add_argument("-n", type=int, default=4 << 20)
    ap.add_argument("-d", type=int, default=64)
    ap.add_argument("-p", type=float, default=1.0)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("-s", type=int, default=1)
    a = ap.parse_args()
    m = embfs.Mount(a.mnt)
    t = m.create("r.emb", a.d, "f32", exist_ok=True)
    t.truncate(0)
    t0 = time.perf_counter()
    for k in range(0, a.n, 65536):
        ids = np.arange(k, min(k + 65536, a.n))
        rows = np.empty((len(ids), a.d), np.float32)
        rows[:] = ids[:, None]
        t.scatter(ids, rows)
    m.sync()
    print(f"  filled {a.n} rows of {t.row_size} B in {time.perf_counter() - t0:.1f} s", flush=True)
    if "base" in m.snapshots():
        m.drop("base")
    m.snapshot("base")
    rng = np.random.default_rng(a.s)
    nch = int(a.n * a.p / 100)
    rest, dd = [], []
    for run in range(a.r):
        ch = np.sort(rng.choice(a.n, nch, replace=False))
        t.scatter(ch, np.full((nch, a.d), -1, np.float32))
        m.sync()
        t0 = time.perf_counter()
        rep = m.restore("base", "r.emb")
        dt = (time.perf_counter() - t0) * 1e3
        rest.append(dt)
        sample = np.concatenate([ch[:: max(1, nch // 1000)], rng.integers(0, a.n, 1000)])
        got = t.gather(sample)
        if rep["rows_rewritten"] != nch or not (got == sample[:, None].astype(np.float32)).all():
            print(f"restorebench: run {run}: restored {rep['rows_rewritten']} of {nch} changed rows, "
                  "or wrong bytes", file=sys.stderr)
            return 1
        print(f"  restore run {run + 1}: {nch} rows changed, {dt:.0f} ms "
              f"(daemon: examined {rep['rows_examined']}, rewritten {rep['rows_rewritten']}, "
              f"{rep['ms']:.0f} ms)", flush=True)
    # an incremental checkpoint: the rows changed since snapshot mid (the
    # restores above made new versions of rows: mid comes after them)
    for name in ("mid", "next"):
        if name in m.snapshots():
            m.drop(name)
    m.snapshot("mid")
    ch = np.sort(rng.choice(a.n, nch, replace=False))
    t.scatter(ch, np.full((nch, a.d), -2, np.float32))
    m.sync()
    m.snapshot("next")
    dl, dlb = [], 0
    out = os.path.join(os.environ.get("DELTA_DIR", "/dev/shm"), f"embfs-delta-{os.getpid()}.npz")
    for run in range(a.r):
        t0 = time.perf_counter()
        nc, nd = m.export_delta("mid", "next", "r.emb", out)
        dt = (time.perf_counter() - t0) * 1e3
        dl.append(dt)
        dlb = os.stat(out).st_size
        os.unlink(out)
        print(f"  delta export run {run + 1}: {nc} rows changed, {nd} deleted, {dlb} bytes, {dt:.0f} ms",
              flush=True)
        if nc != nch or nd != 0:
            print("restorebench: the delta is not the changed rows", file=sys.stderr)
            return 1
    # the same delta as files: cp -r --sparse=always of the delta directory
    src = m.delta_path("mid", "next")
    cpd, cpb = [], 0
    shipped = nch * t.row_size + 8 * nch
    for run in range(a.r):
        dst = os.path.join(os.environ.get("DELTA_DIR", "/dev/shm"), f"embfs-delta-{os.getpid()}.d")
        t0 = time.perf_counter()
        subprocess.run(["cp", "-r", "--sparse=always", src, dst], check=True)
        dt = (time.perf_counter() - t0) * 1e3
        cpd.append(dt)
        cpb = sum(os.stat(os.path.join(dp, f)).st_blocks * 512 for dp, _, fs in os.walk(dst) for f in fs)
        if run == 0:  # applied to a copy of mid, it gives next
            c = m.create("applied.emb", a.d, "f32", exist_ok=True)
            c.truncate(0)
            c.copy_from(m.table("r.emb", snapshot="mid"))
            c.apply_delta(dst, "r.emb")
            smp = np.concatenate([ch[:: max(1, nch // 1000)], rng.integers(0, a.n, 1000)])
            ok = (c.gather(smp) == m.table("r.emb", snapshot="next").gather(smp)).all()
            m.remove("applied.emb")
            if not ok:
                print("restorebench: the shipped delta applied to mid is not next", file=sys.stderr)
                return 1
        subprocess.run(["rm", "-rf", dst], check=True)
        print(f"  delta cp --sparse=always run {run + 1}: {dt:.0f} ms{' (answer computed)' if run == 0 else ''}, "
              f"{shipped} bytes read, copy takes {cpb} bytes", flush=True)
    cps = []
    for run in range(a.r):
        dst = os.path.join(a.mnt, "cp.emb")
        t0 = time.perf_counter()
        subprocess.run(["cp", os.path.join(a.mnt, ".snapshots", "base", "r.emb"), dst], check=True)
        dt = (time.perf_counter() - t0) * 1e3
        cps.append(dt)
        os.unlink(dst)
        m.sync()
        print(f"  cp out of a snapshot run {run + 1}: {dt:.0f} ms", flush=True)
    for run in range(a.r):
        dst = os.path.join(a.mnt, "copy.emb")
        t0 = time.perf_counter()
        subprocess.run(["dd", f"if={t.path}", f"of={dst}", "bs=1M", "status=none"], check=True)
        dt = (time.perf_counter() - t0) * 1e3
        dd.append(dt)
        os.unlink(dst)
        m.sync()
        print(f"  dd bs=1M copy run {run + 1}: {dt:.0f} ms", flush=True)
    r, d, x = median(rest), median(dd), median(dl)
    full = a.n * t.row_size
    print(f"restorebench delta: export_ms={x:.0f} bytes={dlb} vs dd_ms={d:.0f} bytes={full}: "
          f"time {x / d:.3f} bytes {dlb / full:.4f}")
    y, z = median(cpd), median(cps)
    print(f"restorebench delta files: cp_ms={y:.0f} (first {cpd[0]:.0f}) read_bytes={shipped} "
          f"copy_bytes={cpb} vs dd_ms={d:.0f} bytes={full}: time {y / d:.3f} (first {cpd[0] / d:.3f}) "
          f"read bytes {shipped / full:.4f} copy bytes {cpb / full:.4f}")
    print(f"restorebench cp out of a snapshot: cp_ms={z:.0f} vs dd_ms={d:.0f}: {z / d:.3f}")
    print(f"restorebench rows={a.n} changed={nch} restore_ms={r:.0f} dd_ms={d:.0f} ratio={r / d:.3f}")
    embfs.close_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
