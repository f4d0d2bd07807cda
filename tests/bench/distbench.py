#!/usr/bin/python3
"""distbench: the sharded gather + scatter path of embfs.dist for W ranks
(bench section dist).

    distbench.py M0[,M1,...] [-n IDS] [-i ITERS] [-d DIM] [-s SEED] [--port P]

One process per mount (gloo over loopback).  Each rank, per iteration:
ShardedEmbedding forward of IDS ids drawn uniformly from 4 M rows (ids to
their owners, rows back), a backward with unit gradients and an SGD step
(gradients to the owners, who update and scatter).  After 3 warm-up
iterations, ITERS are timed.  Prints per rank the time per iteration split
into all-to-all (embfs.dist.timers["a2a"]), embfs (gathers and scatters of
the owned rows) and the rest (numpy, torch), and one line:
    distbench world=W rows_per_s=R a2a_share=A embfs_share=E
rows_per_s counts the ids looked up and stepped per second over all ranks.
With one mount it also times the same work through embfs.torch.Embedding
(no sharding, no collectives) in the same process:
    distbench local rows_per_s=R
"""
import argparse
import datetime
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import embfs
import embfs.dist as ed
import embfs.torch as et

ROWS = 4 << 20


def work(mod, opt, ids):
    out = mod(torch.from_numpy(ids))
    out.backward(torch.ones_like(out))
    opt.step()


def rank_main(rank, world, mounts, a, q):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=a.init, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    m = embfs.Mount(mounts[rank])
    mod = ed.ShardedEmbedding(m, "bench.emb", a.d, optimizer="sgd")
    opt = et.SGD([mod], lr=0.01)
    rng = np.random.default_rng([a.s, rank])
    batches = [rng.integers(0, ROWS, a.n) for _ in range(a.i + 3)]
    for b in batches[:3]:
        work(mod, opt, b)
    dist.barrier()
    ed.timers.clear()
    t0 = time.perf_counter()
    for b in batches[3:]:
        work(mod, opt, b)
    dist.barrier()
    dt = time.perf_counter() - t0
    rows = sum(len(np.unique(b)) for b in batches[3:])
    q.put((rank, dt, rows, dict(ed.timers)))
    dist.destroy_process_group()
    embfs.close_all()


def local(mount, a):
    torch.set_num_threads(1)
    m = embfs.Mount(mount)
    mod = et.Embedding(m, "local.emb", a.d, optimizer="sgd")
    opt = et.SGD([mod], lr=0.01)
    rng = np.random.default_rng([a.s, 99])
    batches = [rng.integers(0, ROWS, a.n) for _ in range(a.i + 3)]
    for b in batches[:3]:
        work(mod, opt, b)
    t0 = time.perf_counter()
    for b in batches[3:]:
        work(mod, opt, b)
    dt = time.perf_counter() - t0
    rows = sum(len(np.unique(b)) for b in batches[3:])
    m.remove("local.emb")
    embfs.close_all()
    return rows / dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mounts")
    ap.add_argument("-n", type=int, default=16384)
    ap.add_argument("-i", type=int, default=20)
    ap.add_argument("-d", type=int, default=64)
    ap.add_argument("-s", type=int, default=1)
    a = ap.parse_args()
    # a file store, not TCP: torch 1.13's TCPStore server thread spins on a
    # closed client socket once the other ranks are gone
    rdzv = f"/dev/shm/embfs-distbench-{os.getpid()}.rdzv"
    a.init = f"file://{rdzv}"
    mounts = a.mounts.split(",")
    w = len(mounts)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    try:
        mp.spawn(rank_main, args=(w, mounts, a, q), nprocs=w, join=True)
    finally:
        if os.path.exists(rdzv):
            os.unlink(rdzv)
    res = sorted(q.get() for _ in range(w))
    tot_rows = sum(r[2] for r in res)
    wall = max(r[1] for r in res)
    a2a = sum(r[3].get("a2a", 0) for r in res) / sum(r[1] for r in res)
    emb = sum(r[3].get("embfs", 0) for r in res) / sum(r[1] for r in res)
    for rank, dt, rows, t in res:
        it = dt / a.i * 1e3
        print(f"  rank {rank}: {it:.1f} ms/iteration: all-to-all {t.get('a2a', 0) / a.i * 1e3:.1f}, "
              f"embfs {t.get('embfs', 0) / a.i * 1e3:.1f}, rest "
              f"{it - (t.get('a2a', 0) + t.get('embfs', 0)) / a.i * 1e3:.1f}; {rows} rows")
    print(f"distbench world={w} rows_per_s={tot_rows / wall:.0f} a2a_share={a2a:.3f} embfs_share={emb:.3f}")
    if w == 1:
        print(f"distbench local rows_per_s={local(mounts[0], a):.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
