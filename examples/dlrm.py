#!/usr/bin/python3
"""A DLRM-style click model whose 26 embedding tables live on embfs.

    PYTHONPATH=python /usr/bin/python3 examples/dlrm.py MNT [--steps 300] [--every 50]
    PYTHONPATH=python /usr/bin/python3 examples/dlrm.py MNT --resume step-K [--steps S]

Model (the layout of DLRM's Criteo Kaggle configuration): 13 dense features
go through a bottom MLP 13-512-256-64-16; each of the 26 sparse features
looks its id up in its own table of dim 16 (MNT/C1.emb .. MNT/C26.emb: 16
f32 weights + the row-wise Adagrad accumulator, 17 f32 per row), the 26
held by one embfs.torch.Collection; the 27 vectors interact by pairwise dot
products (351 of them), which with the bottom output (16) feed the top MLP
367-512-256-1; the loss is the logistic loss of the click.  The dense part
(the two MLPs) is trained with torch.optim.Adagrad, the tables with
embfs.torch.RowWiseAdagrad, pipelined (embfs.torch.Collection with
pipeline=True): while a batch trains, a background thread gathers the next
batch's unique rows of all 26 tables (announced by embfs.torch.Prefetcher;
new rows initialised by the daemon) and pushes the step's gradients (the
daemon applies row-wise Adagrad), gathering again in the same request the
rows of the next batch that they change: 2 requests a step, neither waited
for by the training thread unless it runs ahead of them.

Data: synthetic and Criteo-like, generated per step from (--seed, step)
only (numpy PCG64 seeded with [seed, step]), so any step's batch can be made
again: that is what makes a resumed run repeat the uninterrupted one.  Per
sample (--batch samples a step):
- dense feature j (13 of them): a count x = floor(exp(MU[j] + SIG[j] * N(0,1))),
  or 0 with probability MISS[j] (Criteo's integer features are heavy-tailed
  counts, often missing); the model's input is log(1 + x) (as DLRM's
  preprocessing).
- sparse feature f (26): a raw category value r in [0, VOCAB[f]), VOCAB being
  Criteo Kaggle's per-feature cardinalities capped at 10^6 (3 to 10^6), drawn
  from a bounded Zipf law: r = floor(X) - 1 with X the continuous power law
  of exponent ZIPF_S = 1.1 on [1, VOCAB[f] + 1) (inverse CDF of a uniform),
  so P(r = k) ~ (k + 1)^-1.1.  The value is hashed with a 64-bit mix
  (splitmix64's finalizer) of (seed, f, r) to a 63-bit id h, and h is reduced
  into the table's row-id space: row = h mod (2^48 - 1), the ids embfs
  accepts (a pool keeps 48 bits of a row id: row <= 2^48 - 2,
  Table.max_row).  No dense re-indexing of the categories: the tables are
  sparse files with rows spread over ~2.8e14 row ids (collisions: about
  n^2 / 5.6e14 for n values: ~0.002 for the largest feature's 10^6).
- the label: a click with probability sigmoid(z) of a hidden logistic model,
  z = B0 + sum_j WD[j] * (log(1 + x_j) - MU[j]) + sum_f A * e_f(r_f)
      + sum_{(f,g) in PAIRS} C * <v_f(r_f), v_g(r_g)>,
  where e_f(r) ~ N(0, 1) and v_f(r) ~ N(0, I_4 / 4) are fixed per (seed, f, r)
  by hashing (so frequent values are learnable and rare ones are noise).
  About 19% of samples click (a constant guess of that rate has loss
  0.49); the hidden model's own loss on the batches trained (~0.24: the
  floor a model can approach) is printed at the end.

Every --every steps (a snapshot): the dense model's and the dense
optimizer's state_dict plus the step and the run's settings are written with
torch.save to MNT/dense.pt (a file on the mount, like the tables), the batch
id is set to the step (Mount.set_batch; it never goes back, so a resumed
run keeps the larger one), and the snapshot MNT/.snapshots/step-N is taken:
it holds the 26 tables (rows and their Adagrad state) and dense.pt at the
same point.  The loss is printed every --log steps (it must divide --every):
the step's loss and the mean since the previous line, as Python float reprs
(exact).  At the end, medians per step of: embfs I/O (the training
thread's time inside the Mount.multi calls, measured by wrapping it, and
waiting for the pipeline's background thread, which gathers and pushes
while the training thread computes; new rows are initialised by the daemon
inside those requests), torch compute (forward + backward +
the dense optimizer step, less the embedding lookups inside the forward),
embfs.torch's own numpy work (np.unique of the ids, the row-wise Adagrad
update), making the data, and the whole step; then a sha256 of the final
state (dense parameters and optimizer state, and the rows of the last --log
batches' ids).

--resume step-K: a roll-back to snapshot step-K, then training on to --steps
(default: the run's).  Every table C*.emb is restored from
.snapshots/step-K in place with Mount.restore (.embfs/restore: only the rows
changed since are rewritten, rows the snapshot does not hold are deleted; a
table missing from the mount is made and filled with Table.copy_from),
MNT/dense.pt too; the snapshots after step-K (of the abandoned
run) are dropped; the model, the dense optimizer and the settings (seed,
batch, learning rates) come from the snapshot's dense.pt; training goes on
from step K + 1 with the same loss lines as an uninterrupted run, bit for bit:
one thread (--threads) and torch's deterministic algorithms.
--no-prefetch trains without the Prefetcher (the same numbers, bit for bit).
With OpenBLAS (Debian's libopenblas0-pthread) --threads does not bound
OpenBLAS's own threads, one per core: set OPENBLAS_NUM_THREADS=1 as well for
a run on one core (make bench does, for this example and its anchor with
the tables in DRAM, tests/bench/dlrmtorch.py).
"""
import argparse
import hashlib
import math
import os
import shutil
import statistics
import sys
import threading
import time

import numpy as np
import torch
import torch.nn.functional as F

import embfs
import embfs.torch as et

DENSE, SPARSE, DIM = 13, 26, 16
ROW_COLS = DIM + et.STATE_COLS["adagrad"]          # 16 weights + the Adagrad accumulator
NROWS = min((1 << 48) - 1, ((1 << 63) - 1) // (ROW_COLS * 4))  # row ids 0 .. NROWS - 1 (Table.max_row + 1)
VOCAB = np.minimum(np.array([1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
                             27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572],
                            np.int64), 1_000_000)
ZIPF_S = 1.1
MU = np.array([1.0, 2.5, 1.5, 2.0, 8.0, 3.0, 1.5, 2.5, 4.0, 0.5, 1.5, 0.5, 2.0])
SIG = np.array([1.0, 1.5, 1.2, 1.0, 2.0, 1.5, 1.2, 1.0, 1.2, 0.6, 1.0, 0.8, 1.2])
MISS = np.array([0.45, 0.0, 0.2, 0.2, 0.03, 0.22, 0.04, 0.0, 0.04, 0.45, 0.04, 0.77, 0.2])
WD = np.array([0.6, -0.5, 0.4, 0.2, -0.3, 0.5, 0.1, -0.4, 0.3, 0.6, -0.5, 0.5, 0.2])
B0, A, C = -1.6, 0.45, 1.5
PAIRS = [(0, 1), (2, 3), (4, 7), (9, 12), (14, 23), (10, 25)]
PAIRED = sorted({f for p in PAIRS for f in p})
BOTTOM, TOP = [DENSE, 512, 256, 64, DIM], [512, 256, 1]


# ---- data ----------------------------------------------------------------------

def mix64(x):
    """splitmix64's finalizer over uint64 (wrapping)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def u01(h):
    """uint64 hashes -> uniform (0, 1) doubles."""
    return ((h >> np.uint64(11)).astype(np.float64) + 0.5) * (1.0 / (1 << 53))


def gauss(h, k):
    """k N(0, 1) values per hash in h (Box-Muller over further mixes)."""
    j = np.arange(1, 2 * k + 1, dtype=np.uint64) * np.uint64(0xD1B54A32D192ED03)
    u = u01(mix64(h[..., None] + j))
    return np.sqrt(-2.0 * np.log(u[..., :k])) * np.cos(2.0 * np.pi * u[..., k:])


class Data:
    """The synthetic Criteo-like stream of a seed: batch(step) is a function
    of (seed, step) only."""

    def __init__(self, seed, batch):
        self.seed, self.batch_size = seed, batch
        with np.errstate(over="ignore"):
            self.salt = mix64(np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)
                              + np.arange(1, SPARSE + 1, dtype=np.uint64) * np.uint64(0xA24BAED4963EE407))

    def batch(self, step):
        """(dense log1p counts (B, 13) f32, row ids (B, 26) int64, clicks (B,)
        f32, the hidden model's loss on this batch)."""
        return self.sample(step)[:4]

    def sample(self, step):
        """batch(step), then the raw category values (B, 26) int64 that the
        row ids hash (r < VOCAB[f]: what a model whose tables are dense
        arrays of VOCAB[f] rows looks up, tests/bench/dlrmtorch.py)."""
        rng = np.random.Generator(np.random.PCG64([self.seed, step]))
        n = self.batch_size
        x = np.floor(np.exp(MU + SIG * rng.standard_normal((n, DENSE))))
        x[rng.random((n, DENSE)) < MISS] = 0.0
        dense = np.log1p(x)
        a = 1.0 - ZIPF_S
        u = rng.random((n, SPARSE))
        r = np.floor((((VOCAB + 1.0) ** a - 1.0) * u + 1.0) ** (1.0 / a)).astype(np.int64) - 1
        r = np.clip(r, 0, VOCAB - 1).astype(np.uint64)
        with np.errstate(over="ignore"):
            h = mix64(r * np.uint64(0x9E3779B97F4A7C15) + self.salt) >> np.uint64(1)   # 63-bit ids
            hid = mix64(h ^ np.uint64(0x5851F42D4C957F2D))                             # the hidden model's
        ids = (h % np.uint64(NROWS)).astype(np.int64)
        z = B0 + (dense - MU) @ WD + A * gauss(hid, 1)[..., 0].sum(1)
        v = gauss(hid[:, PAIRED], 4) * 0.5  # only the features PAIRS uses (the same values)
        for f, g in PAIRS:
            z += C * np.einsum("nk,nk->n", v[:, PAIRED.index(f)], v[:, PAIRED.index(g)])
        p = 1.0 / (1.0 + np.exp(-z))
        y = (rng.random(n) < p).astype(np.float32)
        ideal = -np.mean(y * np.log(p) + (1 - y) * np.log1p(-p))
        return (torch.from_numpy(dense.astype(np.float32)), torch.from_numpy(ids), torch.from_numpy(y), ideal,
                torch.from_numpy(r.astype(np.int64)))


# ---- model ---------------------------------------------------------------------

def mlp(sizes, last_relu):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or last_relu:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


class DLRM(torch.nn.Module):
    def __init__(self, mount, seed):
        super().__init__()
        self.bottom = mlp(BOTTOM, True)
        self.emb = et.Collection(mount, [
            et.TableSpec(f"C{f + 1}.emb", DIM,
                         init=embfs.Init.uniform(-DIM ** -0.5, DIM ** -0.5, seed=seed * SPARSE + f, cols=DIM))
            for f in range(SPARSE)], optimizer="adagrad", pipeline=True)
        n = SPARSE + 1
        li, lj = torch.tril_indices(n, n, -1)
        self.register_buffer("li", li, persistent=False)
        self.register_buffer("lj", lj, persistent=False)
        self.top = mlp([DIM + n * (n - 1) // 2] + TOP, False)

    def forward(self, dense, ids):
        x = self.bottom(dense)
        t = torch.stack([x] + self.emb([ids[:, f:f + 1] for f in range(SPARSE)]), dim=1)
        z = torch.bmm(t, t.transpose(1, 2))[:, self.li, self.lj]
        return self.top(torch.cat([x, z], dim=1)).squeeze(1)


# ---- time accounting -----------------------------------------------------------

class Clock:
    """Seconds this thread spent inside wrapped calls (the wrapped methods
    behave as before; calls from other threads are not counted)."""

    def __init__(self):
        self.t = 0.0
        self.thread = threading.get_ident()

    def wrap(self, obj, name):
        f = getattr(obj, name)

        def timed(*a, **k):
            if threading.get_ident() != self.thread:
                return f(*a, **k)
            t0 = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                self.t += time.perf_counter() - t0
        setattr(obj, name, timed)


# ---- snapshots -----------------------------------------------------------------

def step_of(name):
    if not name.startswith("step-") or not name[5:].isdigit():
        return None
    return int(name[5:])


def save_dense(mnt, model, opt, step, cfg):
    torch.save({"step": step, "config": cfg, "model": model.state_dict(), "opt": opt.state_dict()},
               os.path.join(mnt, "dense.pt"))


def restore(m, name):
    """Roll the mount back to snapshot NAME: the tables and dense.pt; the
    later snapshots are dropped.  Returns the checkpoint of dense.pt."""
    snap = os.path.join(m.path, ".snapshots", name)
    if not os.path.isdir(snap):
        sys.exit(f"{snap}: no such snapshot (have: {' '.join(m.snapshots()) or 'none'})")
    ck = torch.load(os.path.join(snap, "dense.pt"))
    k = ck["step"]
    t0 = time.perf_counter()
    rows = 0
    for f in range(SPARSE):
        tname = f"C{f + 1}.emb"
        if tname in m.tables():
            # in place: only the rows changed since the snapshot are written
            r = m.restore(name, tname)
            rows += r["rows_rewritten"] + r["rows_deleted"]
        else:
            src = m.table(tname, snapshot=name)
            rows += m.create(tname, ROW_COLS, "f32").copy_from(src)
    shutil.copyfile(os.path.join(snap, "dense.pt"), os.path.join(m.path, "dense.pt"))
    dt = time.perf_counter() - t0
    print(f"restored {SPARSE} tables ({rows} rows written or deleted) and dense.pt from {name} "
          f"in {dt:.2f} s ({dt / max(rows, 1) * 1e6:.0f} us/row)")
    later = [s for s in m.snapshots() if (step_of(s) or -1) > k]
    for s in later:
        m.drop(s)
    if later:
        print(f"dropped the snapshots after {name} (the abandoned run's): {' '.join(later)}")
    return ck


# ---- training ------------------------------------------------------------------

def state_digest(model, opt, data, steps, log):
    """sha256 of the dense parameters, the dense optimizer's state and the
    rows (weights and Adagrad state) of the last `log` batches' ids."""
    h = hashlib.sha256()
    for v in model.state_dict().values():
        if isinstance(v, torch.Tensor):
            h.update(v.numpy().tobytes())
    for st in opt.state_dict()["state"].values():
        for v in st.values():
            h.update(v.numpy().tobytes() if isinstance(v, torch.Tensor) else repr(v).encode())
    ids = np.concatenate([data.batch(s)[1].numpy() for s in range(max(1, steps - log + 1), steps + 1)])
    for f, e in enumerate(model.emb.bags):
        u = np.unique(ids[:, f])
        h.update(e.table.gather(u).tobytes())
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mnt", help="an embfs mount")
    ap.add_argument("--steps", type=int, help="train up to this step (default 300; resumed: the run's)")
    ap.add_argument("--every", type=int, default=50, help="snapshot every N steps (default 50; 0: never)")
    ap.add_argument("--log", type=int, default=10, help="print the loss every N steps (default 10)")
    ap.add_argument("--batch", type=int, default=128, help="samples per step (default 128, as DLRM's Kaggle run)")
    ap.add_argument("--seed", type=int, default=1, help="data and initial values (default 1)")
    ap.add_argument("--lr", type=float, default=0.01, help="dense Adagrad learning rate (default 0.01)")
    ap.add_argument("--sparse-lr", type=float, default=0.1, help="row-wise Adagrad learning rate (default 0.1)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1; fixed for bit-exact runs)")
    ap.add_argument("--no-prefetch", action="store_true", help="do not announce the next batch's ids")
    ap.add_argument("--resume", metavar="step-K", help="roll back to this snapshot and train on from it")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    m = embfs.Mount(args.mnt)
    ck = None
    if args.resume:
        ck = restore(m, args.resume)
        cfg = dict(ck["config"])
        if args.steps is not None:
            cfg["steps"] = args.steps
        start = ck["step"] + 1
    else:
        cfg = {"steps": 300 if args.steps is None else args.steps, "every": args.every, "log": args.log,
               "batch": args.batch, "seed": args.seed, "lr": args.lr, "sparse_lr": args.sparse_lr,
               "threads": args.threads}
        start = 1
    if cfg["every"] and cfg["every"] % cfg["log"]:
        sys.exit(f"--log {cfg['log']} must divide --every {cfg['every']}")
    if cfg["threads"] != args.threads:
        sys.exit(f"the run used --threads {cfg['threads']}: a resume with another count is not bit-exact")
    steps, every, log = cfg["steps"], cfg["every"], cfg["log"]

    torch.manual_seed(cfg["seed"])
    data = Data(cfg["seed"], cfg["batch"])
    model = DLRM(m, cfg["seed"])
    assert model.emb.bags[0].table.max_row + 1 == NROWS
    dense = [p for p in model.parameters()]
    opt = torch.optim.Adagrad(dense, lr=cfg["lr"])
    sparse = et.RowWiseAdagrad([model.emb], lr=cfg["sparse_lr"])
    if ck is not None:
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
    print(f"{'resume from ' + args.resume + ':' if ck else 'DLRM:'} steps {start}..{steps}, batch {cfg['batch']}, "
          f"{SPARSE} embfs tables of {DIM} + 1 f32 ({sum(p.numel() for p in dense)} dense parameters), "
          f"seed {cfg['seed']}, snapshot every {every}, torch {torch.__version__} on {args.threads} thread(s)")

    # embfs I/O: this thread's time inside the tables' calls and waiting
    # for the collection's background thread (the requests it makes while
    # this thread computes are not counted); lookup: inside the modules'
    # lookups and prefetches (their numpy work around the table calls, plus
    # those calls)
    io, init, lookup = Clock(), Clock(), Clock()  # init: 0 (the daemon's, inside io)
    io.wrap(m, "multi")
    lookup.wrap(model.emb, "forward")
    lookup.wrap(model.emb, "prefetch")

    gen = [0.0]
    ideal = []

    def batches():
        for s in range(start, steps + 1):
            t0 = time.perf_counter()
            b = data.batch(s)
            gen[0] += time.perf_counter() - t0
            ideal.append(b[3])
            yield s, b

    rec = {k: [] for k in ("io", "init", "compute", "glue", "data", "wall")}
    snap_t = []
    losses = []
    st = m.stats()
    writes0 = st["batch.write_requests"] + st["batch.read_requests"]

    def io_t():
        return io.t + model.emb.waited

    t_start = w0 = time.perf_counter()
    mark = (io_t(), init.t, lookup.t)  # at the end of the previous step: the next batch's prefetch counts
    feed = batches() if args.no_prefetch else \
        et.Prefetcher(batches(), lambda sb: [(model.emb, [sb[1][1][:, f] for f in range(SPARSE)])])
    for step, (xd, ids, y, _) in feed:
        lk0 = lookup.t
        t0 = time.perf_counter()
        loss = F.binary_cross_entropy_with_logits(model(xd, ids), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        t1 = time.perf_counter()
        lk1 = lookup.t
        sparse.step()
        t2 = time.perf_counter()
        d_io, d_init, d_lk = io_t() - mark[0], init.t - mark[1], lookup.t - mark[2]
        mark = (io_t(), init.t, lookup.t)
        rec["io"].append(d_io)
        rec["init"].append(d_init)
        rec["compute"].append((t1 - t0) - (lk1 - lk0))
        rec["glue"].append(d_lk + (t2 - t1) - d_io)
        losses.append(loss.item())
        if step % log == 0:
            print(f"step {step} loss {losses[-1]!r} mean {math.fsum(losses) / len(losses)!r}", flush=True)
            losses = []
        w1 = time.perf_counter()
        if every and step % every == 0:
            model.emb.flush()  # the snapshot holds this step's rows
            save_dense(m.path, model, opt, step, cfg)
            m.set_batch(max(step, m.batch))
            m.snapshot(f"step-{step}")
            snap_t.append(time.perf_counter() - w1)
        rec["data"].append(gen[0])
        gen[0] = 0.0
        rec["wall"].append(w1 - w0)
        w0 = time.perf_counter()
    model.emb.flush()
    total = time.perf_counter() - t_start

    med = {k: statistics.median(v) * 1e3 for k, v in rec.items() if v}
    st = m.stats()
    requests_per_step = (st["batch.write_requests"] + st["batch.read_requests"] - writes0) / max(1, steps - start + 1)
    if med:
        print(f"per step (medians of {len(rec['io'])} steps, ms): embfs I/O {med['io']:.1f} "
              f"({requests_per_step:.1f} FUSE requests on .embfs/rows), torch compute {med['compute']:.1f}; "
              f"embfs.torch's numpy work {med['glue']:.1f}, data {med['data']:.1f}, whole step {med['wall']:.1f}; "
              f"I/O / compute = {med['io'] / med['compute']:.2f}")
    if snap_t:
        print(f"snapshots: {len(snap_t)}, median {statistics.median(snap_t) * 1e3:.1f} ms "
              f"(torch.save of dense.pt + set_batch + mkdir)")
    print(f"{steps - start + 1} steps in {total:.1f} s; the hidden model's own loss over them: "
          f"{statistics.fmean(ideal) if ideal else float('nan'):.4f}")
    print(f"final state sha256 {state_digest(model, opt, data, steps, log)}")
    embfs.close_all()


if __name__ == "__main__":
    main()
