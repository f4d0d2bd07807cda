#!/usr/bin/python3
"""trainbench: training lookups/s of embfs.torch against torch holding the
same tables in DRAM, in one process, alternating, on the same ids.

    PYTHONPATH=TOP/python trainbench.py MNT [--tables T] [--rows N] [--dim D]
        [--bags B] [--per-bag K] [--steps S] [--warm W] [--runs R]
        [--opt sgd|adagrad] [--seed SEED] [--collection] [--pipeline] [--populate] [--client-update]
        [--daemon-pid PID]

Each side: EmbeddingBag(mode="sum") per table, the loss a plain sum of the
bags, backward, then the optimizer's step: embfs.torch.EmbeddingBag +
embfs.torch.SGD (or RowWiseAdagrad) against torch.nn.EmbeddingBag(sparse=
True) + torch.optim.SGD (or row-wise Adagrad in torch ops: index_add_ of
the row means of g^2, then the row update).  torch runs on one thread.
Ids: numpy zipf(1.05) draws times 2654435761 modulo the rows, drawn before
the clock.  W warm-up steps (not timed) then R runs of S steps, embfs and
torch alternating run by run; lookups/s = steps * tables * bags * per_bag /
seconds.  With --collection the embfs side is one embfs.torch.Collection
(one request a step for all tables); --pipeline makes the modules or the
collection pipelined (pipeline=True: the next step's rows gathered and
this step's gradients pushed by a background thread while the steps
compute, the next batch announced by prefetch(), which the loop calls as
embfs.torch.Prefetcher would); a pipelined run's clock stops after it has
waited for that thread (wait()), so all its pushes are counted.  With --populate every row the run's
ids touch is written to the embfs tables first (uniform values, as torch's
tables hold a value for every row from the start) and made durable
(Mount.sync) before the clock starts, so that the daemon's write-back of
that fill does not land in some timed runs and not others; without it the tables
start empty and the steps create their rows (the daemon initialises them).
--client-update: the optimizer runs in this process, which scatters the
updated rows (embfs.torch's path before pushes, kept for an init that is
not an embfs.Init), for comparison.

CPU: the seconds of CPU this process (all its threads) and, with
--daemon-pid, the embfs daemon used during each side's timed runs, per
step.  The daemon's share during torch's runs is its flusher writing back
rows the embfs runs pushed.  On a machine of C cores a side cannot take
less than its CPU a step / C; torch's side runs on one thread.

Output: a line per run, then
  trainbench cpu embfs: client A ms/step, daemon B ms/step; torch: client C ms/step, daemon D ms/step
  trainbench tables=T ... embfs_lookups_per_s=X torch_lookups_per_s=Y ratio=Z
with the medians of the runs (ratio: the median of the per-run ratios).
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
    p = argparse.ArgumentParser(prog="trainbench")
    p.add_argument("mnt")
    p.add_argument("--tables", type=int, default=1)
    p.add_argument("--rows", type=int, default=4 << 20)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--bags", type=int, default=4096)
    p.add_argument("--per-bag", type=int, default=4)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warm", type=int, default=20)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--opt", choices=("sgd", "adagrad"), default="sgd")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--collection", action="store_true")
    p.add_argument("--pipeline", action="store_true")
    p.add_argument("--populate", action="store_true")
    p.add_argument("--client-update", action="store_true")
    p.add_argument("--daemon-pid", type=int, default=0)
    return p.parse_args(argv)


def cpu_seconds(pid):
    """utime + stime of process pid (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class TorchRowAdagrad:
    """Row-wise Adagrad in torch ops over sparse gradients (the reference)."""

    def __init__(self, params, lr, eps=1e-8):
        self.params, self.lr, self.eps = list(params), lr, eps
        self.state = [torch.zeros(p.shape[0]) for p in self.params]

    @torch.no_grad()
    def step(self):
        for p, s in zip(self.params, self.state):
            g = p.grad.coalesce()
            idx, val = g.indices()[0], g.values()
            s.index_add_(0, idx, (val * val).mean(1))
            p.index_add_(0, idx, -self.lr * val / (s[idx].sqrt() + self.eps)[:, None])

    def zero_grad(self):
        for p in self.params:
            p.grad = None


def main(argv):
    a = parse(argv)
    torch.set_num_threads(1)
    rng = np.random.default_rng(a.seed)
    m = embfs.Mount(a.mnt)
    lr = 0.01
    steps_total = a.warm + a.steps * a.runs
    # ids of every step and table, before the clock
    ids = [[torch.from_numpy(((rng.zipf(1.05, (a.bags, a.per_bag)).astype(np.uint64) * np.uint64(2654435761))
                              % np.uint64(a.rows)).astype(np.int64)) for _ in range(a.tables)]
           for _ in range(steps_total)]
    optname = "sgd" if a.opt == "sgd" else "adagrad"
    init = embfs.Init.uniform(-0.01, 0.01, seed=a.seed, cols=a.dim)
    if a.client_update:
        spec = init
        init = lambda ids, table: spec(ids, table)  # noqa: E731 (not an Init: rows updated here)
    names = [f"tb{t}.emb" for t in range(a.tables)]
    if a.collection:
        emb = et.Collection(m, [et.TableSpec(n, a.dim, init=init) for n in names], optimizer=optname,
                            pipeline=a.pipeline)
        eopt = (et.SGD if a.opt == "sgd" else et.RowWiseAdagrad)([emb], lr=lr)
    else:
        emb = [et.EmbeddingBag(m, n, a.dim, mode="sum", optimizer=optname, init=init, pipeline=a.pipeline)
               for n in names]
        eopt = (et.SGD if a.opt == "sgd" else et.RowWiseAdagrad)(emb, lr=lr)
    if a.populate:
        t0 = time.perf_counter()
        tabs = emb.bags if a.collection else emb
        n = 0
        for t, b in enumerate(tabs):
            u = np.unique(np.concatenate([ids[k][t].numpy().reshape(-1) for k in range(steps_total)]))
            rows = np.zeros((len(u), b.table.dim), np.float32)
            rows[:, :a.dim] = rng.uniform(-0.01, 0.01, (len(u), a.dim))
            b.table.scatter(u, rows.astype(b.table.dtype))
            n += len(u)
        t1 = time.perf_counter()
        m.sync()  # the fill's write-back is loading, not training: done before the clock
        print(f"populated the {n} rows the run touches in {t1 - t0:.1f} s, made durable in "
              f"{time.perf_counter() - t1:.1f} s", flush=True)
    ref = [torch.nn.EmbeddingBag(a.rows, a.dim, mode="sum", sparse=True) for _ in range(a.tables)]
    for r in ref:
        torch.nn.init.uniform_(r.weight, -0.01, 0.01)
    ropt = torch.optim.SGD([r.weight for r in ref], lr=lr) if a.opt == "sgd" else \
        TorchRowAdagrad([r.weight for r in ref], lr)

    def step_embfs(k):
        if a.pipeline and k + 1 < steps_total:
            if a.collection:
                emb.prefetch(ids[k + 1])
            else:
                for t in range(a.tables):
                    emb[t].prefetch(ids[k + 1][t])
        if a.collection:
            outs = emb([ids[k][t] for t in range(a.tables)])
        else:
            outs = [emb[t](ids[k][t]) for t in range(a.tables)]
        sum(o.sum() for o in outs).backward()
        eopt.step()
        eopt.zero_grad()

    def step_torch(k):
        outs = [ref[t](ids[k][t]) for t in range(a.tables)]
        sum(o.sum() for o in outs).backward()
        ropt.step()
        ropt.zero_grad()

    for k in range(a.warm):
        step_embfs(k)
        step_torch(k)
    per_step = a.tables * a.bags * a.per_bag
    res = []
    cpu = {"embfs": [0.0, 0.0], "torch": [0.0, 0.0]}  # side: [this process, the daemon]
    pids = [os.getpid()] + ([a.daemon_pid] if a.daemon_pid else [])
    for r in range(a.runs):
        k0 = a.warm + r * a.steps
        pair = {}
        for side, fn in (("embfs", step_embfs), ("torch", step_torch)) if r % 2 == 0 else \
                (("torch", step_torch), ("embfs", step_embfs)):
            c0 = [cpu_seconds(p) for p in pids]
            t0 = time.perf_counter()
            for k in range(k0, k0 + a.steps):
                fn(k)
            if side == "embfs" and a.pipeline:
                for e in [emb] if a.collection else emb:
                    e.wait()
            pair[side] = a.steps * per_step / (time.perf_counter() - t0)
            for i, p in enumerate(pids):
                cpu[side][i] += cpu_seconds(p) - c0[i]
        res.append(pair)
        print(f"run {r}: embfs {pair['embfs']:.0f} torch {pair['torch']:.0f} lookups/s, "
              f"ratio {pair['embfs'] / pair['torch']:.3f}", flush=True)
    ms = {side: [f"{c / (a.runs * a.steps) * 1e3:.2f}" if a.daemon_pid or i == 0 else "-"
                 for i, c in enumerate(v)] for side, v in cpu.items()}
    print(f"trainbench cpu embfs: client {ms['embfs'][0]} ms/step, daemon {ms['embfs'][1]} ms/step; "
          f"torch: client {ms['torch'][0]} ms/step, daemon {ms['torch'][1]} ms/step")
    me = statistics.median(p["embfs"] for p in res)
    mt = statistics.median(p["torch"] for p in res)
    ratio = statistics.median(p["embfs"] / p["torch"] for p in res)
    print(f"trainbench tables={a.tables} rows={a.rows} dim={a.dim} bags={a.bags} per_bag={a.per_bag} opt={a.opt} "
          f"collection={int(a.collection)} pipeline={int(a.pipeline)} populate={int(a.populate)} client_update={int(a.client_update)} embfs_lookups_per_s={me:.0f} torch_lookups_per_s={mt:.0f} "
          f"ratio={ratio:.3f}")
    embfs.close_all()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
