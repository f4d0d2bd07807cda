"""embfs.dist: row-sharded embedding tables over torch.distributed.

Every rank runs one embfs mount holding its shard of every table: the rows
whose owner is that rank, at their global ids, under the same table names
and geometry.  torch.distributed (gloo on CPU, NCCL where there are GPUs)
moves ids, rows and gradients between ranks with all-to-all; embfs does the
rest with the batched path.

    import embfs, embfs.dist as ed
    m = embfs.Mount(f"/mnt/emb{rank}")          # this rank's shard
    bag = ed.ShardedEmbeddingBag(m, "C1.emb", 16, mode="sum")
    opt = embfs.torch.RowWiseAdagrad([bag], lr=0.05)
    out = bag(ids, offsets)        # ids to owners, rows back (collective)
    loss(out).backward()
    opt.step(); opt.zero_grad()    # gradients to owners, who push them to their daemons
    ed.checkpoint(m, "step-1000", step=1000, manifest_dir=DIR)
    ed.restore(m, "step-1000", manifest_dir=DIR)

The shard function (stable, documented: a change would misplace every
row): owner(table, id) = splitmix64(id XOR salt(table)) mod W, where
salt(table) = splitmix64(crc32(table name as UTF-8)) and splitmix64 is
Vigna's finaliser (add 0x9E3779B97F4A7C15, then the two xor-shift-multiply
rounds).  Hashed 63-bit ids and dense ids alike spread evenly.

Collectives: forward, prefetch, an optimizer's step, checkpoint and restore
are collective -- every rank of the group calls them in the same order (a
rank with an empty batch passes an empty one).  Gradients: each owner sums
the gradients every rank sent for a row and multiplies by grad_scale
(default 1/W, as DDP averages the dense gradients: each rank's loss is the
mean over its part of the global batch).  The sum's order is fixed (by
rank, then by position), so a run is deterministic for a given W; against
one rank training the whole batch the rows agree to float rounding with SGD
(the tests see at most 7.5e-9 and allow 1e-6).  An optimizer that
normalizes its step (Adagrad, Adam) turns the large relative rounding error
of a gradient that nearly cancels into a step difference of about lr times
it: row-wise Adagrad was seen 5e-5 apart.
"""
import json
import os
import time
import zlib

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from . import BadArgument, EmbfsError, Mount
from .torch import _TableModule

__all__ = ["shard_of", "ShardedEmbedding", "ShardedEmbeddingBag", "checkpoint", "restore", "checkpoints",
           "reshard", "SHARD_FN"]

SHARD_FN = "splitmix64-crc32-v1"
# seconds spent by this process in all-to-all ("a2a": ids, rows, gradients,
# counts) and in embfs ("embfs": gathers and scatters of the owned rows)
timers = {}


def _timed(key, t0):
    timers[key] = timers.get(key, 0.0) + time.perf_counter() - t0
_M64 = (1 << 64) - 1


def _splitmix64(x):
    """Vigna's splitmix64 finaliser of uint64 array x (wrapping arithmetic)."""
    x = (x + np.uint64(0x9E3779B97F4A7C15)) & np.uint64(_M64)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _salt(name):
    return _splitmix64(np.array([zlib.crc32(name.encode())], dtype=np.uint64))[0]


def shard_of(name, ids, world):
    """The owner rank of rows ids of table NAME among WORLD ranks (int64 array)."""
    ids = np.asarray(ids, dtype=np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        return (_splitmix64(ids ^ _salt(name)) % np.uint64(world)).astype(np.int64)


def _group_info(group):
    if not dist.is_available() or not dist.is_initialized():
        raise BadArgument("embfs.dist: torch.distributed is not initialised (init_process_group first)")
    return dist.get_rank(group), dist.get_world_size(group)


def _a2a(send, splits_send, splits_recv, group, cols=None, dtype=None):
    """all_to_all_single of rows (1-D, or 2-D with cols columns)."""
    t0 = time.perf_counter()
    shape = (int(sum(splits_recv)),) if cols is None else (int(sum(splits_recv)), cols)
    out = torch.empty(shape, dtype=dtype if dtype is not None else send.dtype)
    dist.all_to_all_single(out, send, list(map(int, splits_recv)), list(map(int, splits_send)), group=group)
    _timed("a2a", t0)
    return out


def _exchange_counts(counts, group):
    """Each rank's counts per destination -> the counts it receives from each."""
    t0 = time.perf_counter()
    out = torch.empty_like(counts)
    dist.all_to_all_single(out, counts, group=group)
    _timed("a2a", t0)
    return out


def _agree(ok, group):
    """1 when every rank passed ok (all-reduce MIN)."""
    t = torch.tensor([1 if ok else 0], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MIN, group=group)
    return bool(t.item())


def _all_gather_obj(obj, group):
    out = [None] * dist.get_world_size(group)
    dist.all_gather_object(out, obj, group=group)
    return out


class _ShardedModule(_TableModule):
    """_TableModule whose rows live on their owner ranks (see the top)."""

    def __init__(self, where, name, embedding_dim, optimizer, dtype, init, create, group, grad_scale):
        super().__init__(where, name, embedding_dim, optimizer, dtype, init, create)
        self.group = group
        self.rank, self.world = _group_info(group)
        self.grad_scale = 1.0 / self.world if grad_scale is None else float(grad_scale)
        self._owned = []  # per forward: (ids received, their full rows) on the owner side
        self._check_peers()

    def _check_peers(self):
        """Every rank has this table with the same geometry and shard function."""
        mine = (self.table.name, self.table.dim, self.table.dtype_name, self.embedding_dim, self.optimizer,
                SHARD_FN, self.world)
        allv = _all_gather_obj(mine, self.group)
        for r, v in enumerate(allv):
            if v != mine:
                raise EmbfsError(22, f"{self.table}: rank {r} has {v}, rank {self.rank} has {mine} "
                                 "(table, dim, dtype, embedding_dim, optimizer, shard function, world)",
                                 self.table.path)

    def _route(self, u):
        """u (unique ids) sorted by owner: (order, send counts)."""
        own = shard_of(self.table.name, u, self.world)
        order = np.argsort(own, kind="stable")
        counts = np.bincount(own, minlength=self.world).astype(np.int64)
        return order, counts

    def _weights(self, input):
        if not isinstance(input, torch.Tensor):
            input = torch.as_tensor(input)
        if input.dtype not in (torch.int64, torch.int32):
            raise BadArgument(f"{self.table}: indices must be int64 or int32, not {input.dtype}", self.table.path)
        ids = input.detach().reshape(-1).cpu().numpy().astype(np.int64, copy=False)
        if ids.size and (ids.min() < 0 or ids.max() > self.table.max_row):
            raise BadArgument(f"{self.table}: row id out of range", self.table.path)
        u, inv = np.unique(ids, return_inverse=True)
        order, counts = self._route(u)
        us = u[order]
        scounts = torch.from_numpy(counts)
        rcounts = _exchange_counts(scounts, self.group)
        got = _a2a(torch.from_numpy(us), counts, rcounts.numpy(), self.group).numpy()
        t0 = time.perf_counter()
        rows = self._rows_f32(got) if len(got) else np.zeros((0, self.table.dim), np.float32)
        _timed("embfs", t0)
        emb = torch.from_numpy(np.ascontiguousarray(rows[:, :self.embedding_dim]))
        back = _a2a(emb, rcounts.numpy(), counts, self.group, cols=self.embedding_dim, dtype=torch.float32)
        w = torch.empty((len(u), self.embedding_dim), dtype=torch.float32)
        w[torch.from_numpy(order)] = back
        if self.training and torch.is_grad_enabled():
            w.requires_grad_(True)
            self._pending.append((u, order, counts, rcounts.numpy(), w))
            self._owned.append((got, rows))
        return w, torch.from_numpy(inv.reshape(tuple(input.shape))).to(torch.int64)

    def prefetch(self, input):
        """Announce an upcoming batch's ids to their owners (collective)."""
        ids = input.detach().reshape(-1).cpu().numpy() if isinstance(input, torch.Tensor) else np.asarray(input)
        u = np.unique(ids.astype(np.int64))
        order, counts = self._route(u)
        rcounts = _exchange_counts(torch.from_numpy(counts), self.group)
        got = _a2a(torch.from_numpy(u[order]), counts, rcounts.numpy(), self.group).numpy()
        if len(got):
            self.table.prefetch(np.unique(got))

    def weights(self, ids):
        """The current rows of ids (no gradient; collective)."""
        with torch.no_grad():
            was, self.training = self.training, False
            try:
                w, inv = self._weights(torch.as_tensor(np.asarray(ids, np.int64)))
            finally:
                self.training = was
        return w[inv]

    def _take_grads(self):
        """Collective: each rank's row gradients to the owners; on this rank,
        (owned ids, their full rows, summed gradients x grad_scale)."""
        pend, owned = self._pending, self._owned
        self._pending, self._owned = [], []
        ids_all, rows_all, g_all = [], [], []
        for (u, order, counts, rcounts, w), (got, rows) in zip(pend, owned):
            g = w.grad if w.grad is not None else torch.zeros_like(w)
            gs = g[torch.from_numpy(order)].contiguous()
            gr = _a2a(gs, counts, rcounts, self.group, cols=self.embedding_dim, dtype=torch.float32)
            ids_all.append(got)
            rows_all.append(rows)
            g_all.append(gr)
        if not ids_all:
            return None
        ids = np.concatenate(ids_all)
        if not len(ids):
            return None
        u, first, inv = np.unique(ids, return_index=True, return_inverse=True)
        rows = np.concatenate(rows_all)[first]
        g = torch.zeros(len(u), self.embedding_dim)
        g.index_add_(0, torch.from_numpy(inv), torch.cat(g_all))
        if self.grad_scale != 1.0:
            g.mul_(self.grad_scale)
        return u, rows, g.numpy()

    def _drop_grads(self):
        self._pending, self._owned = [], []

    def _apply(self, opt, ids, rows, g):
        t0 = time.perf_counter()
        super()._apply(opt, ids, rows, g)
        _timed("embfs", t0)


class ShardedEmbedding(_ShardedModule):
    """embfs.torch.Embedding over row-sharded tables (collective forward)."""

    def __init__(self, where, name, embedding_dim, optimizer="adagrad", dtype="f32", init=None, create=True,
                 group=None, grad_scale=None):
        super().__init__(where, name, embedding_dim, optimizer, dtype, init, create, group, grad_scale)

    def forward(self, input):
        w, idx = self._weights(input)
        return F.embedding(idx, w)


class ShardedEmbeddingBag(_ShardedModule):
    """embfs.torch.EmbeddingBag over row-sharded tables (collective forward)."""

    def __init__(self, where, name, embedding_dim, mode="sum", optimizer="adagrad", dtype="f32", init=None,
                 create=True, include_last_offset=False, group=None, grad_scale=None):
        if mode not in ("sum", "mean"):
            raise BadArgument(f"EmbeddingBag mode {mode!r}: sum or mean")
        super().__init__(where, name, embedding_dim, optimizer, dtype, init, create, group, grad_scale)
        self.mode, self.include_last_offset = mode, include_last_offset

    def forward(self, input, offsets=None, per_sample_weights=None):
        w, idx = self._weights(input)
        return F.embedding_bag(idx, w, offsets, mode=self.mode, per_sample_weights=per_sample_weights,
                               include_last_offset=self.include_last_offset)


# ---- global checkpoints ----------------------------------------------------------

def _manifest_path(manifest_dir, name, rank):
    return os.path.join(manifest_dir, f"{name}.rank{rank}.json")


def checkpoint(mount, name, step, manifest_dir, group=None, extra=None):
    """Collective: snapshot NAME on every shard with batch id STEP, then (only
    when every rank succeeded) each rank writes its manifest
    MANIFEST_DIR/NAME.rankR.json (world size, shard function, step, the
    snapshots' batch ids, EXTRA): a checkpoint without every rank's manifest
    is incomplete and restore() refuses it.  A NAME that already exists on
    some shard is an error on every rank (EEXIST), before any snapshot."""
    rank, world = _group_info(group)
    m = mount if isinstance(mount, Mount) else Mount(mount)
    exists = name in m.snapshots() or os.path.exists(_manifest_path(manifest_dir, name, rank))
    if not _agree(not exists, group):
        raise EmbfsError(17, f"checkpoint {name}: already exists on some shard (snapshot or manifest); "
                         "drop it everywhere first", m.path)
    # the same batch id on every shard: the largest of step and theirs
    t = torch.tensor([max(int(step), m.batch)], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    err = None
    try:
        m.set_batch(int(t.item()))
        batch = m.batch  # the snapshot's: it holds the rows of batches <= this
        m.snapshot(name)
    except OSError as e:
        err = e
    if not _agree(err is None, group):
        if err is None:  # another rank failed: ours would be half a checkpoint
            m.drop(name)
        raise EmbfsError(getattr(err, "errno", 5) or 5,
                         f"checkpoint {name}: failed on some rank ({err or 'another rank'}); no manifest written",
                         m.path)
    info = _all_gather_obj({"rank": rank, "batch": batch, "tables": m.tables()}, group)
    man = {"name": name, "world": world, "shard_fn": SHARD_FN, "step": int(step), "ranks": info,
           "extra": extra}
    os.makedirs(manifest_dir, exist_ok=True)
    p = _manifest_path(manifest_dir, name, rank)
    tmp = p + ".tmp"
    with open(tmp, "w") as f:
        json.dump(man, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, p)
    dist.barrier(group=group)
    return man


def checkpoints(manifest_dir, rank=0):
    """Names of the complete checkpoints rank RANK's manifest directory knows."""
    out = []
    for f in sorted(os.listdir(manifest_dir)) if os.path.isdir(manifest_dir) else []:
        suf = f".rank{rank}.json"
        if f.endswith(suf):
            out.append(f[: -len(suf)])
    return out


def restore(mount, name, manifest_dir, group=None):
    """Collective: roll every shard back to checkpoint NAME (Mount.rollback on
    each), after checking on every rank that its manifest exists, names this
    world size and shard function, and that its snapshot is there.  Returns
    the manifest (its step, extra)."""
    rank, world = _group_info(group)
    m = mount if isinstance(mount, Mount) else Mount(mount)
    why = None
    man = None
    try:
        with open(_manifest_path(manifest_dir, name, rank)) as f:
            man = json.load(f)
        if man.get("world") != world or man.get("shard_fn") != SHARD_FN:
            why = (f"checkpoint {name} is of {man.get('world')} ranks with {man.get('shard_fn')}, this job "
                   f"has {world} with {SHARD_FN} (reshard it)")
        elif name not in m.snapshots():
            why = f"checkpoint {name}: this shard has no snapshot {name}"
    except FileNotFoundError:
        why = f"checkpoint {name}: no manifest for rank {rank} (incomplete or never taken)"
    except (OSError, ValueError) as e:
        why = f"checkpoint {name}: manifest unreadable: {e}"
    whys = _all_gather_obj(why, group)
    bad = [f"rank {r}: {w}" for r, w in enumerate(whys) if w]
    if bad:
        raise EmbfsError(2, "; ".join(bad), m.path)
    m.rollback(name)
    dist.barrier(group=group)
    return man


# ---- resharding (offline) ------------------------------------------------------------

def reshard(src_mounts, name, dst_mounts, manifest_dir, out_manifest_dir=None, chunk=65536):
    """Offline (no process group): turn checkpoint NAME of len(src_mounts)
    shards into one of len(dst_mounts) shards.  dst_mounts are mounts of
    fresh pools (their tables are made); each row of each table of snapshot
    NAME is sent to its owner among the new world, the tables' sizes and
    modes kept, then snapshot NAME taken on every destination with the same
    step and the manifests written to out_manifest_dir (default:
    manifest_dir).  Returns the number of rows moved per table."""
    src = [s if isinstance(s, Mount) else Mount(s) for s in src_mounts]
    dst = [d if isinstance(d, Mount) else Mount(d) for d in dst_mounts]
    w0, w1 = len(src), len(dst)
    mans = []
    for r in range(w0):
        with open(_manifest_path(manifest_dir, name, r)) as f:
            mans.append(json.load(f))
    for r, man in enumerate(mans):
        if man.get("world") != w0 or man.get("shard_fn") != SHARD_FN:
            raise EmbfsError(22, f"checkpoint {name}: rank {r}'s manifest is of {man.get('world')} ranks "
                             f"({man.get('shard_fn')}), {w0} shards given")
        if name not in src[r].snapshots():
            raise EmbfsError(2, f"checkpoint {name}: shard {r} has no snapshot {name}", src[r].path)
    step = mans[0]["step"]
    moved = {}
    tables = sorted(set().union(*[set(_snap_tables(s, name)) for s in src]))
    for tname in tables:
        geo = None
        size = 0
        for s in src:
            if tname not in _snap_tables(s, name):
                continue
            t = s.table(tname, snapshot=name)
            g = (t.dim, t.dtype_name, os.stat(t.path).st_mode & 0o777)
            if geo is None:
                geo = g
            elif g[:2] != geo[:2]:
                raise EmbfsError(22, f"{tname}: shards disagree on geometry ({geo[:2]} vs {g[:2]})", t.path)
            size = max(size, os.stat(t.path).st_size)
        outs = [d.create(tname, geo[0], geo[1], exist_ok=True, mode=geo[2]) for d in dst]
        n = 0
        for s in src:
            if tname not in _snap_tables(s, name):
                continue
            t = s.table(tname, snapshot=name)
            ids = np.fromiter(t.stored_ids(), dtype=np.int64)
            for k in range(0, len(ids), chunk):
                part = ids[k:k + chunk]
                rows = t.gather(part)
                own = shard_of(tname, part, w1)
                for r in range(w1):
                    sel = own == r
                    if sel.any():
                        outs[r].scatter(part[sel], rows[sel])
                n += len(part)
        for o in outs:
            if os.stat(o.path).st_size < size:
                os.truncate(o.path, size)
        moved[tname] = n
    out_dir = out_manifest_dir or manifest_dir
    os.makedirs(out_dir, exist_ok=True)
    info = []
    for r, d in enumerate(dst):
        d.sync()
        if d.batch < step:
            d.set_batch(step)
        info.append({"rank": r, "batch": d.batch, "tables": d.tables()})
        d.snapshot(name)
    for r in range(w1):
        man = {"name": name, "world": w1, "shard_fn": SHARD_FN, "step": step, "ranks": info,
               "extra": mans[0].get("extra"), "resharded_from": w0}
        p = _manifest_path(out_dir, name, r)
        with open(p + ".tmp", "w") as f:
            json.dump(man, f)
            f.flush()
            os.fsync(f.fileno())
        os.rename(p + ".tmp", p)
    return moved


def _snap_tables(m, name):
    return sorted(n for n in os.listdir(os.path.join(m.path, ".snapshots", name)))
