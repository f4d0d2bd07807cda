#!/usr/bin/python3
"""spilltrain: training steps on a table larger than the pool (issue 28),
against the spill device's read bound.

    PYTHONPATH=TOP/python spilltrain.py MNT --fio-iops IOPS [--table T] [--rows N]
        [--dim D] [--bags B] [--per-bag K] [--windows W] [--steps S] [--seed SEED]
        [--load] [--snap-every N]

--load first writes the table's N rows of D float32 in row order (32 MiB
pwrites, then fsync) and prints the rate (--windows 0: only that).  Then embfs.torch.EmbeddingBag
(mode "sum") + embfs.torch.SGD train on it: B bags of K ids a step, ids
numpy zipf(1.05) draws times 2654435761 modulo N (drawn before the clock),
W windows of S steps after S warm-up steps.  Per window, from the mount's
.embfs/stats around it: the device's reads (spill.read_ios), what the
device would take for them at IOPS (fio's 4 KiB random reads at queue
depth 32 on the spill file, measured by the caller in the same run), and
that bound over the window's time: 1.0 means the steps ran as fast as the
device could serve their reads.  Also the bytes the device wrote over the
bytes of the rows the window updated (distinct ids x row size), the
window's merges, and with --snap-every N a snapshot (mkdir in
.snapshots) every N steps, timed.  Each step's push (the optimizer's
step(): embfs.torch.SGD pushes the step's gradients; the daemon applies
them) is timed: its slowest per window, and over all steps and over the
steps of windows with merges, the 99th percentile and the maximum.

Output: a line per window, then
  spilltrain windows=W ... bound_min=X bound_median=Y wa=Z lookups_per_s_median=L
      push_p99_ms=P push_max_ms=M merge_push_p99_ms=P2 merge_push_max_ms=M2
(wa: the device's bytes written over the updated rows' bytes, all windows;
merge_*: the steps of windows with merges, - when none had)
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np
import torch

import embfs
import embfs.torch as et


def parse(argv):
    p = argparse.ArgumentParser(prog="spilltrain")
    p.add_argument("mnt")
    p.add_argument("--fio-iops", type=float, required=True)
    p.add_argument("--table", default="train.emb")
    p.add_argument("--rows", type=int, default=8 << 20)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--bags", type=int, default=4096)
    p.add_argument("--per-bag", type=int, default=4)
    p.add_argument("--windows", type=int, default=12)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--load", action="store_true")
    p.add_argument("--snap-every", type=int, default=0)
    return p.parse_args(argv)


def stats(mnt):
    out = {}
    with open(os.path.join(mnt, ".embfs", "stats")) as f:
        for line in f:
            k, _, v = line.partition(" ")
            try:
                out[k] = float(v)
            except ValueError:
                pass
    return out


def load(a, path):
    rs = a.dim * 4
    chunk_rows = (32 << 20) // rs
    rng = np.random.default_rng(a.seed)
    base = (rng.standard_normal((chunk_rows, a.dim)) * 0.01).astype(np.float32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    t0 = time.perf_counter()
    try:
        for r in range(0, a.rows, chunk_rows):
            k = min(chunk_rows, a.rows - r)
            buf = base[:k] + np.float32(r % 1000) * np.float32(1e-6)
            view = memoryview(buf).cast("B")
            done = 0
            while done < len(view):
                done += os.pwrite(fd, view[done:], r * rs + done)
        os.fsync(fd)
    finally:
        os.close(fd)
    secs = time.perf_counter() - t0
    print(f"loaded {a.rows} rows of {rs} bytes in {secs:.1f} s: {a.rows * rs / secs / 1e6:.1f} MB/s", flush=True)


def main(argv):
    a = parse(argv)
    torch.set_num_threads(1)
    path = os.path.join(a.mnt, a.table)
    if a.load:
        load(a, path)
    if a.windows == 0:
        return 0
    rng = np.random.default_rng(a.seed)
    nsteps = a.steps * (a.windows + 1)
    ids = [torch.from_numpy(((rng.zipf(1.05, (a.bags, a.per_bag)).astype(np.uint64) * np.uint64(2654435761))
                             % np.uint64(a.rows)).astype(np.int64)) for _ in range(nsteps)]
    m = embfs.Mount(a.mnt)
    emb = et.EmbeddingBag(m, a.table, a.dim, mode="sum", optimizer="sgd")
    opt = et.SGD([emb], lr=0.01)
    snaps, snap_secs, push_secs = 0, [], []

    def step(k):
        nonlocal snaps
        out = emb(ids[k])
        out.sum().backward()
        t0 = time.perf_counter()
        opt.step()
        push_secs.append(time.perf_counter() - t0)
        opt.zero_grad()
        if a.snap_every and (k + 1) % a.snap_every == 0:
            t0 = time.perf_counter()
            os.mkdir(os.path.join(a.mnt, ".snapshots", f"spilltrain-{k + 1}"))
            snap_secs.append(time.perf_counter() - t0)
            snaps += 1

    for k in range(a.steps):  # warm-up
        step(k)
    rs = a.dim * 4
    per_step = a.bags * a.per_bag
    res, pushes, merge_pushes = [], [], []
    for w in range(a.windows):
        k0 = a.steps * (w + 1)
        s0 = stats(a.mnt)
        t0 = time.perf_counter()
        del push_secs[:]
        for k in range(k0, k0 + a.steps):
            step(k)
        secs = time.perf_counter() - t0
        pushes += push_secs
        s1 = stats(a.mnt)
        d = {k: s1.get(k, 0) - s0.get(k, 0) for k in s1}
        reads = d.get("spill.read_ios", 0)
        bound = reads / a.fio_iops / secs
        upd = len(np.unique(torch.cat([ids[k].reshape(-1) for k in range(k0, k0 + a.steps)]).numpy()))
        wa = d.get("spill.write_bytes", 0) / (upd * rs)
        lps = a.steps * per_step / secs
        res.append((bound, wa, lps, d.get("spill.write_bytes", 0), upd * rs))
        if d.get("spill.merges", 0):
            merge_pushes += push_secs
        print(f"window {w}: {secs:.2f} s, {lps / 1e6:.3f} M lookups/s, {reads:.0f} device reads "
              f"({reads / a.steps:.0f} a step), bound {bound:.2f}, device wrote {d.get('spill.write_bytes', 0) / 1e6:.1f} MB "
              f"for {upd * rs / 1e6:.1f} MB of updated rows ({wa:.2f}x), merges {d.get('spill.merges', 0):.0f}, "
              f"evicted {d.get('spill.run_evicted', 0):.0f}, sweep parts {d.get('spill.sweep_parts', 0):.0f}; "
              f"after: {s1.get('spill.runs', 0):.0f} runs of {s1.get('spill.run_rows', 0) / 1e6:.2f} M records, "
              f"{s1.get('spill.segments_free', 0):.0f} of {s1.get('spill.segments', 0):.0f} segments free, "
              f"{s1.get('spill.segments_reserved', 0):.0f} reserved; slowest push {max(push_secs) * 1e3:.0f} ms",
              flush=True)
    bounds = [r[0] for r in res]
    snap = ""
    if snap_secs:
        snap = f" snapshots={snaps} snap_ms_median={statistics.median(snap_secs) * 1e3:.1f}"
    def pct(v, q):
        return f"{sorted(v)[min(len(v) - 1, int(q * len(v)))] * 1e3:.1f}" if v else "-"
    print(f"spilltrain windows={a.windows} steps={a.steps} rows={a.rows} dim={a.dim} bags={a.bags} "
          f"per_bag={a.per_bag} fio_iops={a.fio_iops:.0f} bound_min={min(bounds):.2f} "
          f"bound_median={statistics.median(bounds):.2f} wa={sum(r[3] for r in res) / sum(r[4] for r in res):.2f} "
          f"lookups_per_s_median={statistics.median(r[2] for r in res):.0f} push_p99_ms={pct(pushes, 0.99)} "
          f"push_max_ms={pct(pushes, 1)} merge_push_p99_ms={pct(merge_pushes, 0.99)} "
          f"merge_push_max_ms={pct(merge_pushes, 1)}{snap}")
    embfs.close_all()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
