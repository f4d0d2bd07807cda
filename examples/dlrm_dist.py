#!/usr/bin/python3
"""examples/dlrm.py's click model trained on W ranks, its tables row-sharded
over W embfs mounts (embfs.dist), the dense part data-parallel (DDP).

    PYTHONPATH=python /usr/bin/python3 examples/dlrm_dist.py M0,M1,... --manifests DIR
        [--steps 40] [--every 10] [--batch 1024] [--tables 26] [--resume step-K]
        [--kill-at STEP --kill-rank R] [--dense-opt adagrad|sgd] [--sparse-opt adagrad|sgd]

One process per mount (torch.multiprocessing, gloo over loopback); rank r
uses mount r, which holds the rows embfs.dist.shard_of gives to r.  Step s
trains the global batch dlrm.Data(seed, batch).batch(s): rank r takes its
r-th slice of batch / W samples, so any W trains the same samples per step.
Each rank's loss is the mean over its slice; DDP averages the dense
gradients and the sharded tables average the row gradients (grad_scale
1/W), so W ranks train what one rank training the whole batch would, to
float rounding.

Every --every steps: rank 0 saves the dense model and optimizer to
DIR/step-N.dense.pt, then every rank takes the global checkpoint step-N
(embfs.dist.checkpoint: a snapshot per shard, one batch id, and a manifest
per rank only when all succeeded).  --resume step-K rolls every shard back
(embfs.dist.restore) and loads the dense state, then trains on: the same
numbers as an uninterrupted run, bit for bit (one thread per rank,
deterministic algorithms).  --kill-at S --kill-rank R: rank R SIGKILLs
itself before step S (the other ranks then fail in their next collective;
the job exits 3).

At the end each rank prints its shard's digest; rank 0 prints the losses
and the mean time per step split into all-to-all, embfs I/O and the rest.
"""
import argparse
import datetime
import faulthandler
import hashlib
import os
import signal
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dlrm  # noqa: E402  (the data and the model's layout)

import embfs  # noqa: E402
import embfs.dist as ed  # noqa: E402
import embfs.torch as et  # noqa: E402


class DistDLRM(torch.nn.Module):
    """dlrm.DLRM with its first `tables` sparse features, over sharded tables."""

    def __init__(self, mount, seed, tables, sparse_opt="adagrad"):
        super().__init__()
        self.dense = torch.nn.ModuleDict({"bottom": dlrm.mlp(dlrm.BOTTOM, True)})
        self.emb = [ed.ShardedEmbedding(mount, f"C{f + 1}.emb", dlrm.DIM, optimizer=sparse_opt,
                                        init=embfs.Init.uniform(-dlrm.DIM ** -0.5, dlrm.DIM ** -0.5,
                                                                seed=seed * dlrm.SPARSE + f, cols=dlrm.DIM))
                    for f in range(tables)]
        n = tables + 1
        li, lj = torch.tril_indices(n, n, -1)
        self.li, self.lj = li, lj
        self.dense["top"] = dlrm.mlp([dlrm.DIM + n * (n - 1) // 2] + dlrm.TOP, False)

    def forward(self, mlps, dense, ids):
        x = mlps["bottom"](dense)
        t = torch.stack([x] + [e(ids[:, f]) for f, e in enumerate(self.emb)], dim=1)
        z = torch.bmm(t, t.transpose(1, 2))[:, self.li, self.lj]
        return mlps["top"](torch.cat([x, z], dim=1)).squeeze(1)


class Both(torch.nn.Module):
    """The dense MLPs as one module for DDP (forward runs both through f)."""

    def __init__(self, dense):
        super().__init__()
        self.module = dense

    def forward(self, f, *a):
        return f(self.module, *a)


def shard_digest(m, tables):
    h = hashlib.sha256()
    for f in range(tables):
        t = m.table(f"C{f + 1}.emb")
        ids = np.fromiter(t.stored_ids(), dtype=np.int64)
        h.update(ids.tobytes())
        h.update(t.gather(ids).tobytes())
    return h.hexdigest()


def rank_main(rank, world, mounts, a):
    # a rank stuck past the job's time limit shows where, and exits
    faulthandler.dump_traceback_later(a.limit, exit=True)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(a.seed)
    dist.init_process_group("gloo", init_method=a.init, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=a.timeout))
    m = embfs.Mount(mounts[rank])
    model = DistDLRM(m, a.seed, a.tables, a.sparse_opt)
    ddp = torch.nn.parallel.DistributedDataParallel(Both(model.dense)) if world > 1 else Both(model.dense)
    if a.dense_opt == "sgd":
        opt = torch.optim.SGD(model.dense.parameters(), lr=a.lr)
    else:
        opt = torch.optim.Adagrad(model.dense.parameters(), lr=a.lr)
    sopt = (et.SGD if a.sparse_opt == "sgd" else et.RowWiseAdagrad)(model.emb, lr=a.emb_lr)
    start = 0
    if a.resume:
        man = ed.restore(m, a.resume, a.manifests)
        ck = torch.load(os.path.join(a.manifests, f"{a.resume}.dense.pt"))
        model.dense.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        start = man["step"]
        if rank == 0:
            print(f"resumed from {a.resume} (step {start}, {man['world']} shards)", flush=True)
    data = dlrm.Data(a.seed, a.batch)
    per = a.batch // world
    losses = []
    ed.timers.clear()
    t_all = 0.0
    for step in range(start, a.steps):
        if a.kill_at is not None and step == a.kill_at and rank == a.kill_rank:
            os.kill(os.getpid(), signal.SIGKILL)
        dense, ids, y, _ = data.batch(step + 1)
        sl = slice(rank * per, (rank + 1) * per)
        t0 = time.perf_counter()
        out = ddp(model.forward, dense[sl], ids[sl, :a.tables])
        loss = F.binary_cross_entropy_with_logits(out, y[sl])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sopt.step()
        t_all += time.perf_counter() - t0
        lt = loss.detach().clone()
        dist.all_reduce(lt)
        losses.append(lt.item() / world)
        if a.every and (step + 1) % a.every == 0:
            name = f"step-{step + 1}"
            if rank == 0:
                torch.save({"model": model.dense.state_dict(), "opt": opt.state_dict()},
                           os.path.join(a.manifests, f"{name}.dense.pt"))
            dist.barrier()
            ed.checkpoint(m, name, step + 1, a.manifests)
    digest = shard_digest(m, a.tables)
    tm = dict(ed.timers)
    allr = [None] * world
    dist.all_gather_object(allr, (digest, tm, t_all))
    if rank == 0:
        steps = max(1, a.steps - start)
        for i in range(0, len(losses), a.log):
            print(f"step {start + i + 1}: loss {losses[i]!r}", flush=True)
        for r, (d, t, tt) in enumerate(allr):
            print(f"rank {r}: shard {d} step {tt / steps * 1e3:.1f} ms: all-to-all "
                  f"{t.get('a2a', 0) / steps * 1e3:.1f} ms, embfs {t.get('embfs', 0) / steps * 1e3:.1f} ms",
                  flush=True)
    # DDP's reducer goes before its process group (destroyed after, it can
    # wait forever on a group that is gone)
    dist.barrier()
    del ddp, opt, sopt, model
    dist.destroy_process_group()
    embfs.close_all()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mounts", help="comma-separated embfs mounts, one per rank")
    ap.add_argument("--manifests", required=True, help="directory for checkpoint manifests and dense state")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--log", type=int, default=10)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--tables", type=int, default=26)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--emb-lr", type=float, default=0.05)
    ap.add_argument("--dense-opt", choices=("adagrad", "sgd"), default="adagrad",
                    help="the dense part's optimizer (default adagrad)")
    ap.add_argument("--sparse-opt", choices=("adagrad", "sgd"), default="adagrad",
                    help="the tables' optimizer (default row-wise adagrad; its tables hold its state)")
    ap.add_argument("--resume")
    ap.add_argument("--kill-at", type=int)
    ap.add_argument("--kill-rank", type=int, default=0)
    ap.add_argument("--init", help="torch.distributed init_method (default: a file store in --manifests; "
                    "tcp://HOST:PORT across hosts)")
    ap.add_argument("--timeout", type=float, default=60, help="seconds a collective may wait (default 60)")
    ap.add_argument("--limit", type=float, default=3600, help="seconds a rank may run (default 3600)")
    a = ap.parse_args()
    mounts = a.mounts.split(",")
    if a.batch % len(mounts):
        sys.exit(f"--batch {a.batch}: not a multiple of the {len(mounts)} ranks")
    if not 1 <= a.tables <= dlrm.SPARSE:
        sys.exit(f"--tables {a.tables}: 1 to {dlrm.SPARSE}")
    os.makedirs(a.manifests, exist_ok=True)
    if not a.init:
        # a file store, not TCP: torch 1.13's TCPStore server thread spins
        # on a closed client socket once the other ranks are gone
        rdzv = os.path.join(os.path.abspath(a.manifests), f".rendezvous-{os.getpid()}")
        if os.path.exists(rdzv):
            os.unlink(rdzv)
        a.init = f"file://{rdzv}"
    try:
        mp.spawn(rank_main, args=(len(mounts), mounts, a), nprocs=len(mounts), join=True)
    except mp.ProcessExitedException as e:
        print(f"dlrm_dist: a rank died: {e}", file=sys.stderr)
        return 3
    except mp.ProcessRaisedException as e:
        print(f"dlrm_dist: a rank failed: {str(e).strip().splitlines()[-1]}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
