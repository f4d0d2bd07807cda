"""embfs.torch: PyTorch embedding modules whose weights live in embfs tables.

    import embfs, embfs.torch as et
    m = embfs.Mount("/mnt/emb")
    bag = et.EmbeddingBag(m, "C1.emb", 16, mode="sum", optimizer="adagrad")
    opt = et.RowWiseAdagrad([bag], lr=0.05)
    out = bag(ids, offsets)            # gathers the batch's unique rows
    loss(out).backward()               # row gradients of those rows
    opt.step(); opt.zero_grad()        # pushes the gradients: the daemon updates the rows

A table row holds the embedding (embedding_dim values) followed by the
optimizer's state for that row (SGD: none; row-wise Adagrad: 1 value, its
sum of squared gradients; Adagrad: embedding_dim; Adam: 2 x embedding_dim),
so one gather moves both and a snapshot holds both.  step() pushes each
table's summed row gradients: the daemon applies the optimizer to the rows
in place, atomically per row, so trainer processes sharing a mount lose no
update (Table.push).  Rows never written are initialised by `init`
(deterministic per row id, see embfs.Init: the daemon computes the same
values) when first gathered; they are stored at the first optimizer step
that updates them.  With an init that is not an embfs.Init (any callable),
SGD and RowWiseAdagrad update the rows in this process and scatter them
instead (a read-modify-write: concurrent trainers can lose updates).

The modules have no torch Parameters: the tables are the state.
state_dict() carries only a description (table path and geometry, as the
module's extra state); load_state_dict() checks that it matches the table
the module was built on and copies no rows.  Checkpoint with
Mount.snapshot() (tables and optimizer state at once) and keep dense
parameters next to it; resume by building the modules over the tables
restored from the snapshot (Mount.restore, or Table.copy_from).
"""
import numpy as np
import torch
import torch.nn.functional as F

from . import BadArgument, EmbfsError, Init, Mount, Table, bf16_to_f32, f32_to_bf16
from ._arrays import _aligned
from ._wire import _F_INIT, _GATHER, _HDR, _PUSH, _SUB, MAX_COUNT, MAX_MULTI, MAX_TABLES, _init_spec

__all__ = ["Embedding", "EmbeddingBag", "Collection", "TableSpec", "SGD", "RowWiseAdagrad", "Adagrad", "Adam",
           "Prefetcher", "STATE_COLS", "state_cols"]

# A module's optimizer (the state its rows hold): "adagrad" is row-wise
# Adagrad (FBGEMM's), "exact_adagrad" torch's element-wise one.
STATE_COLS = {"sgd": 0, "adagrad": 1}
_PUSH_KIND = {"sgd": "sgd", "adagrad": "rowwise_adagrad", "exact_adagrad": "adagrad", "adam": "adam"}


def state_cols(optimizer, embedding_dim):
    """The state columns a row of optimizer keeps after its embedding."""
    if optimizer in STATE_COLS:
        return STATE_COLS[optimizer]
    if optimizer == "exact_adagrad":
        return int(embedding_dim)
    if optimizer == "adam":
        return 2 * int(embedding_dim)
    raise BadArgument(f"optimizer {optimizer!r}: one of {', '.join(_PUSH_KIND)}")


def _table(where, name, dim, dtype, create):
    if isinstance(where, Table):
        return where
    m = where if isinstance(where, Mount) else Mount(where)
    if create:
        return m.create(name, dim, dtype, exist_ok=True)
    return m.table(name)


class _TableModule(torch.nn.Module):
    def __init__(self, where, name, embedding_dim, optimizer, dtype, init, create):
        super().__init__()
        if dtype not in ("f32", "f16", "bf16"):
            raise BadArgument(f"dtype {dtype!r}: embedding modules hold f32, f16 or bf16 rows")
        self.embedding_dim, self.optimizer = int(embedding_dim), optimizer
        self.state_cols = state_cols(optimizer, self.embedding_dim)
        self.table = _table(where, name, self.embedding_dim + self.state_cols, dtype, create)
        if self.table.dim != self.embedding_dim + self.state_cols or self.table.dtype_name not in ("f32", "f16", "bf16"):
            raise EmbfsError(22, f"{self.table}: {self.table.dim} x {self.table.dtype_name}, this module needs "
                             f"{self.embedding_dim} + {self.state_cols} ({optimizer} state) columns of a float type",
                             self.table.path)
        bound = self.embedding_dim ** -0.5
        self.init = init if init is not None else Init.uniform(-bound, bound, seed=0, cols=self.embedding_dim)
        if optimizer not in STATE_COLS and not isinstance(self.init, Init):
            raise BadArgument(f"{self.table}: optimizer {optimizer!r} runs in the daemon, whose init must be an "
                              "embfs.Init", self.table.path)
        self._pending = []  # (unique ids, their full rows as float32, the weight leaf)
        self.__dict__["_pipe"] = None  # pipeline=True: a Collection of this table (not a submodule)

    def _pipeline(self, mode):
        """Serve lookups and steps through a pipelined Collection of this
        table (see Collection: pipeline=True)."""
        if not isinstance(self.init, Init):
            raise BadArgument(f"{self.table}: pipeline=True needs an embfs.Init (the daemon computes it)",
                              self.table.path)
        spec = TableSpec(self.table.name, self.embedding_dim, init=self.init, dtype=self.table.dtype_name, mode=mode)
        self.__dict__["_pipe"] = Collection(self.table.mount, [spec], optimizer=self.optimizer, create=False,
                                            pipeline=True)

    def extra_repr(self):
        return f"{self.table}, {self.embedding_dim}, optimizer={self.optimizer}" + \
            (", pipeline=True" if self._pipe is not None else "")

    def flush(self):
        """With pipeline=True, Collection.flush(); else nothing to do."""
        if self._pipe is not None:
            self._pipe.flush()

    def wait(self):
        """With pipeline=True, Collection.wait(); else nothing to do."""
        if self._pipe is not None:
            self._pipe.wait()

    # ---- rows ----
    def _rows_f32(self, ids):
        return self._to_f32(self.table.gather(ids, init=self.init))

    def _to_f32(self, raw):
        """Gathered rows of the table's dtype as float32."""
        if self.table.dtype_name == "f32":
            return raw
        if self.table.dtype_name == "bf16":
            return bf16_to_f32(raw)
        return raw.astype(np.float32)

    def _store(self, ids, rows):
        if self.table.dtype_name == "bf16":
            rows = f32_to_bf16(rows)
        elif self.table.dtype_name == "f16":
            rows = rows.astype(np.float16)
        self.table.scatter(ids, rows)

    def _weights(self, input):
        """The unique rows of input as a (u, embedding_dim) tensor, and the
        input remapped to indices into it."""
        if not isinstance(input, torch.Tensor):
            input = torch.as_tensor(input)
        if input.dtype not in (torch.int64, torch.int32):
            raise BadArgument(f"{self.table}: indices must be int64 or int32, not {input.dtype}", self.table.path)
        ids = input.detach().reshape(-1).cpu().numpy().astype(np.int64, copy=False)
        u, inv = np.unique(ids, return_inverse=True)
        rows = self._rows_f32(u)
        w = torch.from_numpy(np.ascontiguousarray(rows[:, :self.embedding_dim]))
        if self.training and torch.is_grad_enabled():
            w.requires_grad_(True)
            self._pending.append((u, rows, w))
        return w, torch.from_numpy(inv.reshape(tuple(input.shape))).to(torch.int64)

    def prefetch(self, input):
        """Announce the ids of an upcoming batch (pinned in the daemon's row
        cache until this thread gathers them; with pipeline=True, gathered
        at once by the background thread)."""
        if self._pipe is not None:
            self._pipe.prefetch([input])
            return
        ids = input.detach().reshape(-1).cpu().numpy() if isinstance(input, torch.Tensor) else np.asarray(input)
        if ids.size:
            self.table.prefetch(np.unique(ids))

    def weights(self, ids):
        """The current embedding rows of ids (no gradient), for inspection."""
        self.wait()
        return torch.from_numpy(np.ascontiguousarray(self._rows_f32(np.asarray(ids))[:, :self.embedding_dim]))

    # ---- the optimizer's side ----
    def _take_grads(self):
        """(ids, full rows, row grads) of everything looked up since the last
        step, rows merged (their gradients summed); pending cleared."""
        pend = [(u, r, w.grad) for u, r, w in self._pending if w.grad is not None]
        self._pending = []
        if not pend:
            return None
        if len(pend) == 1:
            u, r, g = pend[0]
            return u, r, g.numpy()
        ids = np.concatenate([p[0] for p in pend])
        u, first, inv = np.unique(ids, return_index=True, return_inverse=True)
        rows = np.concatenate([p[1] for p in pend])[first]
        g = torch.zeros(len(u), self.embedding_dim)
        g.index_add_(0, torch.from_numpy(inv), torch.cat([p[2] for p in pend]))
        return u, rows, g.numpy()

    def _drop_grads(self):
        self._pending = []
        if self._pipe is not None:
            self._pipe._drop_grads()

    def _step(self, opt):
        """The optimizer's step on the rows looked up since the last one."""
        if self._pipe is not None:
            self._pipe._step(opt)
            return
        got = self._take_grads()
        if got is not None:
            self._apply(opt, *got)

    def _apply(self, opt, ids, rows, g):
        """One step of opt on rows ids (their full rows as float32, as
        gathered) with summed gradients g: pushed to the daemon, or (an
        init the daemon cannot compute) updated here and scattered."""
        if isinstance(self.init, Init):
            self.table.push(ids, g, **self._push_kwargs(opt))
        else:
            opt._update(rows, g, self.embedding_dim)
            self._store(ids, rows)

    def _push_kwargs(self, opt):
        """Table.push's keyword arguments for a step of opt on this table."""
        return dict(opt._push_args(), optimizer=_PUSH_KIND[self.optimizer], init=self.init)

    # ---- state_dict: the tables are the state ----
    def get_extra_state(self):
        return {"table": self.table.name, "path": self.table.path, "dim": self.table.dim,
                "dtype": self.table.dtype_name, "embedding_dim": self.embedding_dim,
                "optimizer": self.optimizer}

    def set_extra_state(self, state):
        mine = self.get_extra_state()
        for k in ("dim", "dtype", "embedding_dim", "optimizer"):
            if state.get(k) != mine[k]:
                raise EmbfsError(22, f"{self.table}: state_dict is for {state.get('table')} with {k} "
                                 f"{state.get(k)!r}, this module has {mine[k]!r}", self.table.path)


class Embedding(_TableModule):
    """torch.nn.Embedding over an embfs table: forward(input) returns
    input.shape + (embedding_dim,).  `where`: a Mount, a mount path, or a
    Table (then name is ignored).  The table is made (dim embedding_dim +
    the optimizer's state columns) if missing.  pipeline=True: lookups and
    steps go through a pipelined Collection of the table (announce batches
    with prefetch(), as embfs.torch.Prefetcher does; see Collection)."""

    def __init__(self, where, name, embedding_dim, optimizer="adagrad", dtype="f32", init=None, create=True,
                 pipeline=False):
        super().__init__(where, name, embedding_dim, optimizer, dtype, init, create)
        if pipeline:
            self._pipeline("sum")

    def forward(self, input):
        if self._pipe is not None:
            inp = input if isinstance(input, torch.Tensor) else torch.as_tensor(input)
            # bags of one row: sums that are the rows themselves
            out = self._pipe.forward([inp.reshape(-1, 1)])[0]
            return out.reshape(tuple(inp.shape) + (self.embedding_dim,))
        w, idx = self._weights(input)
        return F.embedding(idx, w)


class EmbeddingBag(_TableModule):
    """torch.nn.EmbeddingBag over an embfs table: mode "sum" or "mean",
    input 2-D (bags of equal size) or 1-D with offsets (include_last_offset
    as torch's), per_sample_weights (mode "sum").  pipeline=True: as
    Embedding's (not with include_last_offset)."""

    def __init__(self, where, name, embedding_dim, mode="sum", optimizer="adagrad", dtype="f32", init=None,
                 create=True, include_last_offset=False, pipeline=False):
        if mode not in ("sum", "mean"):
            raise BadArgument(f"EmbeddingBag mode {mode!r}: sum or mean")
        super().__init__(where, name, embedding_dim, optimizer, dtype, init, create)
        self.mode, self.include_last_offset = mode, include_last_offset
        if pipeline:
            if include_last_offset:
                raise BadArgument(f"{self.table}: pipeline=True takes no include_last_offset", self.table.path)
            self._pipeline(mode)

    def forward(self, input, offsets=None, per_sample_weights=None):
        if self._pipe is not None:
            return self._pipe.forward([input], None if offsets is None else [offsets],
                                      None if per_sample_weights is None else [per_sample_weights])[0]
        w, idx = self._weights(input)
        return F.embedding_bag(idx, w, offsets, mode=self.mode, per_sample_weights=per_sample_weights,
                               include_last_offset=self.include_last_offset)


class TableSpec:
    """One table of a Collection: its file name, embedding_dim, init (an
    embfs.Init; default uniform(+-1/sqrt(dim)) over the weights), dtype
    and pooling mode ("sum" or "mean")."""

    def __init__(self, name, embedding_dim, init=None, dtype="f32", mode="sum"):
        self.name, self.embedding_dim, self.init, self.dtype, self.mode = name, int(embedding_dim), init, dtype, mode


_KEY_SHIFT = 53  # a group's lookup key: the table's slot in the group << 53 | row id
_AHEAD_MAX = 4   # batches gathered ahead and not yet looked up, at most
# A pipelined step's pushes of at least this many gradient bytes go in two
# requests, the rows the next batch shares with them first (that batch
# waits for that request only); smaller ones in one, which the daemon
# applies in about as long as a request takes (docs/benchmarks.md, Pipelines)
_SPLIT_BYTES = 1 << 20


class _GradSlice:
    """Rows lo:hi of a group's weight leaf, as a table module's pending
    lookup: its .grad once backward has run."""
    __slots__ = ("w", "lo", "hi")

    def __init__(self, w, lo, hi):
        self.w, self.lo, self.hi = w, lo, hi

    @property
    def grad(self):
        g = self.w.grad
        return None if g is None else g[self.lo:self.hi]


class _Lookup:
    """A batch's rows for a Collection, worked out once from every table's
    ids, flattened and one after another (key; sizes: how many each table
    has): each table's unique ids and where they start in its group's rows
    (lo), and per group (tables of one row layout, see Collection) the batch's
    ids as indices into the group's rows (inv), how many rows (total) and
    their keys (slot in the group << 53 | row id, ascending: the rows'
    order; None when the ids do not fit a key and the group was sorted
    table by table)."""
    __slots__ = ("uniq", "lo", "inv", "total", "keys")

    def __init__(self, coll, key, sizes):
        n = len(sizes)
        flat = np.split(key, np.cumsum(sizes)[:-1]) if n > 1 else [key]
        self.uniq, self.lo, self.inv, self.total, self.keys = [None] * n, [0] * n, [], [], []
        for tabs, slots in zip(coll._groups, coll._slots):
            cat = key if len(tabs) == n else np.concatenate([flat[i] for i in tabs])
            if cat.size and (cat.min() < 0 or cat.max() >> _KEY_SHIFT) or len(tabs) >= 1 << (63 - _KEY_SHIFT):
                inv, base = [], 0  # ids no key holds (refused by the gather): table by table
                for i in tabs:
                    u, v = np.unique(flat[i], return_inverse=True)
                    self.uniq[i], self.lo[i] = u, base
                    inv.append(v + base)
                    base += len(u)
                self.inv.append(np.concatenate(inv))
                self.total.append(base)
                self.keys.append(None)
                continue
            # one sort for the group
            keys, inv = np.unique(cat | np.repeat(slots[:-1], [sizes[i] for i in tabs]), return_inverse=True)
            bounds = np.searchsorted(keys, slots)
            for s, i in enumerate(tabs):
                self.uniq[i] = keys[bounds[s]:bounds[s + 1]] - slots[s]
                self.lo[i] = int(bounds[s])
            self.inv.append(inv.reshape(-1))
            self.total.append(len(keys))
            self.keys.append(keys)


class _Ahead:
    """A batch gathered ahead by a Collection's background thread: its ids
    (key, sizes, as _Lookup's), its _Lookup and rows (one array per group;
    made by that thread, or by prefetch() when the thread is behind; filled
    by the thread), and the thread's last request that writes them (the
    gather, then the pushes handed over after it, which gather again the
    rows they change; a split step's requests that change none of its rows
    are not its last: see Collection._push_ahead)."""
    __slots__ = ("key", "sizes", "lookup", "rows", "last", "gathered")

    def __init__(self, key, sizes):
        self.key, self.sizes, self.lookup, self.rows, self.last = key, sizes, None, None, None
        self.gathered = False  # set by the thread once its gather succeeded


def _split_pushes(pushes, gathers):
    """(the pushes' rows that gathers ask for, the other rows): two lists of
    pushes as Collection._send takes them, each table's ids still
    ascending.  gathers: (table index, ids, rows) of a patch, its ids a
    subset of that table's pushed ids, a table once."""
    common = {i: c for i, c, _ in gathers}
    shared, rest = [], []
    for i, u, g, params, kw in pushes:
        c = common.get(i)
        if c is None or not len(c):
            rest.append((i, u, g, params, kw))
            continue
        pos = np.searchsorted(u, c)
        shared.append((i, u[pos], g[pos], params, kw))
        if len(pos) < len(u):
            keep = np.ones(len(u), bool)
            keep[pos] = False
            rest.append((i, u[keep], g[keep], params, kw))
    return shared, rest


class Collection(torch.nn.Module):
    """Many embedding-bag tables of one mount in one module, one request to
    the daemon a step for all of them (as FBGEMM's table-batched embedding
    bags and TorchRec's EmbeddingBagCollection): forward() gathers every
    table's rows in one MULTI request (rows never stored come back
    initialised by the daemon), and the optimizer's step() pushes every
    table's gradients in one more.  Tables of the same embedding_dim, dtype
    and mode share one weight array and one embedding_bag a step, with one
    sort of their ids.

    With fuse_push=True, step() keeps the pushes and sends them with the
    next forward()'s gathers, in the same request (the daemon applies them
    first, so the result is the same bit for bit): one round trip a step.
    Then call flush() before reading the tables by other means (a snapshot,
    another process, the end of training).

    pipeline=True makes no request wait in the caller's thread when the
    batches are announced: prefetch() (embfs.torch.Prefetcher calls it)
    hands the batch's gather to a background thread at once, and step()
    hands it the pushes, which also gather again the rows they change of
    the batches gathered ahead; forward() then only waits, if at all, for
    what the thread has not finished of its batch (the seconds waited add
    up in .waited).  A step's pushes of 1 MiB of gradients or more, once
    the next batch is looked up, send the rows that batch shares with them
    first, and that batch waits for those only; the rest go behind (not
    when the first request is refused).  A pipelined run equals the
    unpipelined one bit for bit; change the tables only through the
    collection's optimizer until flush(), which waits for the thread and
    forgets the batches gathered ahead (wait() waits and keeps them).  An
    error of a request the thread made (a push refused, say) is raised by
    the first forward() that waits for that request or one after it, or by
    wait() or flush(); a batch whose gather ahead failed is gathered by its
    forward() then.

        coll = et.Collection(m, [et.TableSpec(f"C{i}.emb", 16) for i in range(26)])
        opt = et.RowWiseAdagrad([coll], lr=0.05)
        pooled = coll([ids_0, ..., ids_25])            # 2-D tensors: bags of equal size
        pooled = coll.forward_jagged(keys, values, lengths)   # TorchRec's keyed jagged input
    """

    def __init__(self, where, tables, optimizer="adagrad", create=True, fuse_push=False, pipeline=False):
        super().__init__()
        self.mount = where if isinstance(where, Mount) else Mount(where)
        self.pipeline = bool(pipeline)
        self.optimizer, self.fuse_push = optimizer, bool(fuse_push) or self.pipeline
        self.waited = 0.0       # seconds forward() and flush() waited for the background thread
        self._ahead = []        # _Ahead, oldest first
        self._futures = []      # the background thread's requests not yet waited for, oldest first
        self._worker = None
        self.bags = torch.nn.ModuleList(
            EmbeddingBag(self.mount, t.name, t.embedding_dim, mode=t.mode, optimizer=optimizer, dtype=t.dtype,
                         init=t.init, create=create) for t in tables)
        for b in self.bags:
            if not isinstance(b.init, Init):
                raise BadArgument(f"{b.table}: a Collection's init must be an embfs.Init (the daemon computes it)",
                                  b.table.path)
        self.keys = [t.name for t in tables]
        self._index = {k: i for i, k in enumerate(self.keys)}
        groups = {}
        for i, b in enumerate(self.bags):
            groups.setdefault((b.embedding_dim, b.table.dim, b.table.dtype_name, b.mode), []).append(i)
        self._groups = list(groups.values())
        # per group: its tables' key slots (slot << 53), and the end of the last
        self._slots = [np.arange(len(t) + 1, dtype=np.int64) << _KEY_SHIFT for t in self._groups]
        self._bags = list(self.bags)
        self._specs = [_init_spec(b.init) for b in self._bags]
        self._params = (None, None)  # (the optimizer's arguments, every table's push parameters for them)
        self._pushes = []

    def extra_repr(self):
        return (f"{len(self.bags)} tables, optimizer={self.optimizer}, fuse_push={self.fuse_push}, "
                f"pipeline={self.pipeline}")

    # ---- the background thread ----
    def _submit(self, fn):
        """Run fn() on the background thread, after everything handed to it."""
        if self._worker is None:
            import concurrent.futures
            self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="embfs-ahead")
        f = self._worker.submit(fn)
        self._futures.append(f)
        return f

    def _behind(self):
        """Has the background thread requests still to finish?"""
        return any(not f.done() for f in self._futures)

    def _wait(self, upto=None):
        """Wait for the background thread's requests, up to upto (a future)
        or all; the first error among them is raised."""
        if not self._futures or upto is not None and upto not in self._futures:
            return  # (one waited for before: its error was raised then)
        import time
        t0 = time.perf_counter()
        try:
            while self._futures:
                f = self._futures.pop(0)
                f.result()
                if f is upto:
                    break
        finally:
            self.waited += time.perf_counter() - t0

    # ---- lookups ----
    def _ids(self, inputs):
        """(the inputs as tensors, all their ids flattened one after another
        as int64, how many each has)."""
        if len(inputs) != len(self._bags):
            raise BadArgument(f"{len(inputs)} inputs for {len(self._bags)} tables")
        tens = []
        for b, inp in zip(self._bags, inputs):
            inp = inp if isinstance(inp, torch.Tensor) else torch.as_tensor(inp)
            if inp.dtype not in (torch.int64, torch.int32):
                raise BadArgument(f"{b.table}: indices must be int64 or int32, not {inp.dtype}", b.table.path)
            tens.append(inp)
        key = torch.cat([t.detach().reshape(-1).to(torch.int64) for t in tens]).cpu().numpy()
        return tens, key, [t.numel() for t in tens]

    def _new_rows(self, lk):
        """Empty row arrays of lk, one per group."""
        out = []
        for tabs, n in zip(self._groups, lk.total):
            t = self._bags[tabs[0]].table
            out.append(_aligned(n * t.row_size).view(t.dtype).reshape(n, t.dim))
        return out

    def _gathers(self, lk, rows):
        """_send's gathers of lk's rows, landing in rows."""
        g = []
        for tabs, r in zip(self._groups, rows):
            for i in tabs:
                u, lo = lk.uniq[i], lk.lo[i]
                g.append((i, u, r[lo:lo + len(u)]))
        return g

    def _send(self, pushes=(), gathers=()):
        """One MULTI request, made here with no per-row work: pushes
        (table index, ids ascending, float32 gradients, push parameters,
        Table.push's kwargs) first, then gathers (table index, ids
        ascending, the C-contiguous rows they land in; rows never stored
        initialised by the daemon, no bitmaps).  Beyond one request's
        limits: Mount.multi, which splits it."""
        parts, body, bufs = [], [], []
        size, resp = _HDR.size, 0
        fits = len(pushes) + len(gathers) <= MAX_TABLES
        for i, a, g, params, _ in pushes:
            n = len(a)
            if n:
                t = self._bags[i].table
                fits = fits and a[0] >= 0 and a[-1] <= t.max_row and n <= MAX_COUNT
                parts.append(_SUB.pack(t.ino, _PUSH, n, 0, 0))
                body += [params, memoryview(a).cast("B"), memoryview(g).cast("B")]
                size += _SUB.size + len(params) + 8 * n + g.nbytes
        for i, a, out in gathers:
            n = len(a)
            if n:
                t, spec = self._bags[i].table, self._specs[i]
                fits = fits and a[0] >= 0 and a[-1] <= t.max_row and n <= MAX_COUNT
                parts.append(_SUB.pack(t.ino, _GATHER, n, _F_INIT, 0))
                body += [spec, memoryview(a).cast("B")]
                bufs.append(memoryview(out).cast("B"))
                size += _SUB.size + len(spec) + 8 * n
                resp += out.nbytes
        if not parts:
            return
        if not fits or size > MAX_MULTI or resp > MAX_MULTI:
            self.mount.multi(pushes=[(self._bags[i].table, a, g, kw) for i, a, g, _, kw in pushes],
                             gathers=[(self._bags[i].table, a, self._bags[i].init, out) for i, a, out in gathers],
                             present=False)
            return
        self.mount._multi_send(parts, body, size, bufs, resp)

    def _push_params(self, opt):
        """Every table's (push parameters, Table.push kwargs) for a step of
        opt, checked (made again only when opt's arguments change)."""
        args = tuple(sorted(opt._push_args().items()))
        if self._params[0] != args:
            out = []
            for b in self._bags:
                kw = b._push_kwargs(opt)
                _, _, params = b.table._push_args(np.zeros(0, np.int64), np.zeros((0, b.embedding_dim), np.float32),
                                                  **kw)
                out.append((params, kw))
            self._params = (args, out)
        return self._params[1]

    def _rows(self, key, sizes):
        """(the _Lookup of a batch's ids, its rows, one array per group):
        gathered ahead (if the batch was announced) or now, after every
        push."""
        for k, a in enumerate(self._ahead):
            if a.sizes == sizes and np.array_equal(a.key, key):
                del self._ahead[:k + 1]  # the ones before were never looked up
                self._wait(a.last)
                if a.gathered:
                    return a.lookup, a.rows
                break  # its lookup or gather failed (that error raised already): now
        self._wait()
        lk = _Lookup(self, key, sizes)
        rows = self._new_rows(lk)
        pushes, self._pushes = self._pushes, []
        self._send(pushes, self._gathers(lk, rows))
        return lk, rows

    def forward(self, inputs, offsets=None, per_sample_weights=None):
        """inputs: one per table, in order: a 2-D tensor of ids (bags of
        equal size) or a 1-D one with offsets[i] (and per_sample_weights[i]
        for mode "sum"), as torch.nn.EmbeddingBag takes them.  Returns the
        pooled (bags, embedding_dim) tensor of each table."""
        tens, key, sizes = self._ids(inputs)
        nbags = [self._bag_lengths(i, tens[i], offsets) for i in range(len(tens))]
        lk, rows = self._rows(key, sizes)
        outs = [None] * len(self._bags)
        track = self.training and torch.is_grad_enabled()
        for tabs, raw, inv in zip(self._groups, rows, lk.inv):
            b0 = self._bags[tabs[0]]
            rf = b0._to_f32(raw)
            w = torch.from_numpy(rf if rf.shape[1] == b0.embedding_dim else
                                 np.ascontiguousarray(rf[:, :b0.embedding_dim]))
            if track:
                w.requires_grad_(True)
            lens = np.concatenate([nbags[i] for i in tabs])
            offs = np.zeros(len(lens), np.int64)
            np.cumsum(lens[:-1], out=offs[1:])
            psw = None
            if per_sample_weights is not None and any(per_sample_weights[i] is not None for i in tabs):
                # a table without weights gets ones: the same sums, bit for bit
                psw = torch.cat([torch.ones(sizes[i]) if per_sample_weights[i] is None else
                                 torch.as_tensor(per_sample_weights[i]).reshape(-1) for i in tabs])
            out = F.embedding_bag(torch.from_numpy(inv), w, torch.from_numpy(offs), mode=b0.mode,
                                  per_sample_weights=psw)
            for i, o in zip(tabs, torch.split(out, [len(nbags[i]) for i in tabs])):
                outs[i] = o
                if track:
                    lo, n = lk.lo[i], len(lk.uniq[i])
                    self._bags[i]._pending.append((lk.uniq[i], rf[lo:lo + n], _GradSlice(w, lo, lo + n)))
        return outs

    def _bag_lengths(self, i, inp, offsets):
        """Table i's bag lengths (int64, one per bag) for its input inp."""
        t = self._bags[i].table
        if inp.dim() == 2:
            if offsets is not None and offsets[i] is not None:
                raise BadArgument(f"{t}: a 2-D input takes no offsets", t.path)
            return np.full(inp.shape[0], inp.shape[1], np.int64)
        if inp.dim() != 1 or offsets is None or offsets[i] is None:
            raise BadArgument(f"{t}: input must be 2-D, or 1-D with offsets", t.path)
        o = offsets[i]
        o = (o.detach().cpu().numpy() if isinstance(o, torch.Tensor) else np.asarray(o)).astype(np.int64).reshape(-1)
        lens = np.diff(o, append=inp.numel())
        if len(o) and (o[0] != 0 or (lens < 0).any()):
            raise BadArgument(f"{t}: offsets must start at 0 and ascend within the input's "
                              f"{inp.numel()} ids", t.path)
        return lens

    def forward_jagged(self, keys, values, lengths=None, offsets=None, weights=None):
        """TorchRec's keyed jagged input: keys (table names, in any order and
        subset), values (all ids, key after key), and lengths (one per key
        and bag, key-major: len(keys) * B) or offsets (their cumulative sum
        with a leading 0).  Returns {key: pooled (B, embedding_dim) tensor}.
        Tables not named get an empty batch."""
        values = values if isinstance(values, torch.Tensor) else torch.as_tensor(values)
        if lengths is None:
            if offsets is None:
                raise BadArgument("forward_jagged needs lengths or offsets")
            offsets = torch.as_tensor(offsets)
            lengths = offsets[1:] - offsets[:-1]
        lengths = torch.as_tensor(lengths).to(torch.int64)
        if len(keys) == 0 or lengths.numel() % len(keys):
            raise BadArgument(f"{lengths.numel()} lengths for {len(keys)} keys")
        B = lengths.numel() // len(keys)
        if int(lengths.sum()) != values.numel():
            raise BadArgument(f"lengths add up to {int(lengths.sum())}, values hold {values.numel()}")
        inputs = [torch.zeros(0, dtype=torch.int64)] * len(self.bags)
        offs = [torch.zeros(B, dtype=torch.int64)] * len(self.bags)
        psw = [None] * len(self.bags) if weights is not None else None
        start = 0
        for k, key in enumerate(keys):
            if key not in self._index:
                raise BadArgument(f"key {key!r} names no table of this collection")
            i = self._index[key]
            lk = lengths[k * B:(k + 1) * B]
            n = int(lk.sum())
            inputs[i] = values[start:start + n]
            offs[i] = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lk, 0)[:-1]])
            if weights is not None:
                psw[i] = weights[start:start + n]
            start += n
        outs = self.forward(inputs, offs, psw)
        return {key: outs[self._index[key]] for key in keys}

    def prefetch(self, inputs):
        """Announce an upcoming batch (one input per table, as forward
        takes them): the daemon pins those rows in its row cache until this
        thread's next forward gathers them (one request for all tables);
        with pipeline=True, the background thread gathers them at once."""
        _, key, sizes = self._ids(inputs)
        if not self.pipeline:
            lk = _Lookup(self, key, sizes)
            self.mount.multi(prefetches=[(b.table, u) for b, u in zip(self._bags, lk.uniq) if len(u)])
            return
        if len(self._ahead) >= _AHEAD_MAX:
            del self._ahead[0]
        a = _Ahead(key, sizes)
        if self._behind():
            # the thread is behind, and its requests are the step's
            # critical path: look the batch up here (docs/benchmarks.md,
            # Pipelines); it also lets the next step split its pushes
            lk = _Lookup(self, key, sizes)
            a.rows, a.lookup = self._new_rows(lk), lk

        def run():  # on the background thread
            if a.lookup is None:
                lk = _Lookup(self, key, sizes)
                a.rows = self._new_rows(lk)
                a.lookup = lk  # last: _push_ahead takes it as the sign that both are set
            self._send(gathers=self._gathers(a.lookup, a.rows))
            a.gathered = True
        a.last = self._submit(run)
        self._ahead.append(a)

    def _step(self, opt):
        """The optimizer's step: every table's summed gradients pushed in
        one request (kept for the next forward with fuse_push, handed to the
        background thread with pipeline)."""
        pushes, grads = [], {}  # grads: a group's weight gradient as an array, once
        for i, (b, (params, kw)) in enumerate(zip(self._bags, self._push_params(opt))):
            p = b._pending
            if len(p) == 1 and isinstance(p[0][2], _GradSlice):  # one forward since the last step
                b._pending = []
                u, _, gs = p[0]
                g = grads.get(id(gs.w))
                if g is None:
                    g = grads[id(gs.w)] = gs.w.grad.numpy() if gs.w.grad is not None else False
                if g is not False:
                    pushes.append((i, u, g[gs.lo:gs.hi], params, kw))
                continue
            got = b._take_grads()
            if got is not None:
                ids, _, g = got
                pushes.append((i, ids, np.ascontiguousarray(g, np.float32), params, kw))
        if self._pushes:
            self.flush()
        if self.pipeline:
            if pushes:
                self._push_ahead(pushes)
        elif self.fuse_push:
            self._pushes = pushes
        elif pushes:
            self._send(pushes)

    def _push_ahead(self, pushes):
        """Hand pushes to the background thread; it sends them with gathers
        of the rows they change in the batches gathered ahead, and patches
        those rows in.  Split (_splittable): the rows the next batch shares
        with the pushes go first, in a request of their own with that
        batch's patch, and the next forward() waits for that one only (a
        batch's last request is the last that writes its rows); the rest go
        behind it, unless the first was refused (then none of the step is
        applied, as with one request)."""
        aheads = list(self._ahead)
        later, waits, first_f = None, aheads, None  # later None: the thread works the patches out
        if self._splittable(pushes, aheads):
            patches = [self._patches(a, pushes) for a in aheads]
            if patches[0][0]:
                shared, pushes = _split_pushes(pushes, patches[0][0])
                first = patches[0]

                def run_first():  # on the background thread
                    self._send(shared, first[0])
                    for rows, pos, fresh in first[1]:
                        rows[pos] = fresh
                aheads[0].last = first_f = self._submit(run_first)
                aheads, patches = aheads[1:], patches[1:]
            later = [p for p in patches if p[0]]
            # a later ahead none of whose rows the step's pushes change waits
            # for none of them
            waits = [a for a, p in zip(aheads, patches) if p[0]]
            if not pushes and not later:
                return

        def run():  # on the background thread, after every ahead's gather
            if first_f is not None and first_f.exception() is not None:
                return  # the step was refused: its error is first_f's
            # (an ahead the thread failed to look up has no rows to patch:
            # its forward() raises that error; the pushes still go)
            todo = later if later is not None else \
                [p for p in (self._patches(a, pushes) for a in waits if a.lookup is not None) if p[0]]
            # the pushes, with the first ahead's rows again; any later one's
            # in requests of their own (a table once in a request)
            for k, (gathers, into) in enumerate(todo or [([], [])]):
                self._send(pushes if k == 0 else (), gathers)
                for rows, pos, fresh in into:
                    rows[pos] = fresh
        last = self._submit(run)
        for a in waits:
            a.last = last

    def _splittable(self, pushes, aheads):
        """May a step's pushes go in two requests (_push_ahead)?  When they
        are large (_SPLIT_BYTES), every batch ahead is looked up, and no row
        of them can be refused on its own: ids in range, gradients finite
        (a sum that overflows says no as well), so that the second request
        fails only when the first would (a full pool, the table gone)."""
        if not aheads or sum(p[2].nbytes for p in pushes) < _SPLIT_BYTES or \
                any(a.lookup is None for a in aheads):
            return False
        for i, u, g, _, _ in pushes:
            if len(u) and (u[0] < 0 or u[-1] > self._bags[i].table.max_row or not np.isfinite(g.sum())):
                return False
        return True

    def _patches(self, a, pushes):
        """(gathers, [(rows, positions, fresh rows)]): the rows of ahead a
        that pushes change, to gather again after them and patch in."""
        pushed = {i: ids for i, ids, _, _, _ in pushes}
        gathers, into = [], []
        for tabs, slots, rows, keys in zip(self._groups, self._slots, a.rows, a.lookup.keys):
            mine = [(s, i, pushed.get(i)) for s, i in enumerate(tabs)]
            mine = [(s, i, p) for s, i, p in mine if p is not None and len(p)]
            if keys is None:  # sorted table by table
                for s, i, p in mine:
                    u = a.lookup.uniq[i]
                    c = np.intersect1d(u, p, assume_unique=True)
                    if len(c):
                        fresh = np.empty((len(c), rows.shape[1]), rows.dtype)
                        gathers.append((i, c, fresh))
                        into.append((rows, a.lookup.lo[i] + np.searchsorted(u, c), fresh))
                continue
            if not mine:
                continue
            # the group's rows are in key order: one intersection
            pk = np.concatenate([p | slots[s] for s, _, p in mine])
            common, pos, _ = np.intersect1d(keys, pk, assume_unique=True, return_indices=True)
            if not len(common):
                continue
            fresh = np.empty((len(common), rows.shape[1]), rows.dtype)
            cut = np.searchsorted(common, slots)
            for s, i, _ in mine:
                if cut[s + 1] > cut[s]:
                    gathers.append((i, common[cut[s]:cut[s + 1]] - slots[s], fresh[cut[s]:cut[s + 1]]))
            into.append((rows, pos, fresh))
        return gathers, into

    def _drop_grads(self):
        for b in self.bags:
            b._drop_grads()

    def wait(self):
        """Wait for the background thread: every push handed to it applied
        (an error raised here); the batches it gathered ahead stay, patched
        by those pushes."""
        self._wait()

    def flush(self):
        """Send the pushes fuse_push kept (the last step's), if any, wait for
        the background thread and forget the batches it gathered ahead."""
        pushes, self._pushes = self._pushes, []
        self._ahead = []
        self._wait()
        if pushes:
            self._send(pushes)


class _RowOptimizer:
    """Steps the rows the given embfs modules looked up since the last step:
    one push per table of their summed gradients, which the daemon applies
    to the rows (weights and state) in place.  Hyper-parameters are read at
    each step, so a schedule may change them (opt.lr = ...)."""
    kind = None

    def __init__(self, modules, lr):
        self.modules = list(modules)
        self.lr = float(lr)
        self.steps = 0
        for m in self.modules:
            if not isinstance(m, (_TableModule, Collection)):
                raise BadArgument(f"{m!r} is not an embfs.torch module")
            if m.optimizer != self.kind:
                raise BadArgument(f"{m}: built for optimizer {m.optimizer!r}, not {self.kind!r} "
                                  "(its rows hold that optimizer's state)")

    def zero_grad(self, set_to_none=True):
        """Forget lookups not stepped (their gradients)."""
        for m in self.modules:
            m._drop_grads()

    @torch.no_grad()
    def step(self):
        self.steps += 1
        for m in self.modules:
            m._step(self)

    def _push_args(self):
        return {"lr": self.lr}

    def state_dict(self):
        return {"kind": self.kind, "lr": self.lr, "steps": self.steps}

    def load_state_dict(self, state):
        if state.get("kind") != self.kind:
            raise BadArgument(f"optimizer state of {state.get('kind')!r}, this is {self.kind!r}")
        self.lr = float(state["lr"])
        self.steps = int(state.get("steps", 0))


class SGD(_RowOptimizer):
    """w -= lr * g, per row looked up."""
    kind = "sgd"

    def _update(self, rows, g, e):
        rows[:, :e] -= self.lr * g


class RowWiseAdagrad(_RowOptimizer):
    """Row-wise Adagrad (as FBGEMM's): per row, s += mean(g^2) over its
    columns, w -= lr * g / (sqrt(s) + eps); s is the row's last column."""
    kind = "adagrad"

    def __init__(self, modules, lr, eps=1e-8):
        super().__init__(modules, lr)
        self.eps = float(eps)

    def _push_args(self):
        return {"lr": self.lr, "eps": self.eps}

    def _update(self, rows, g, e):
        s = rows[:, e] + np.mean(g * g, axis=1, dtype=np.float32)
        rows[:, e] = s
        rows[:, :e] -= (self.lr * g) / (np.sqrt(s) + self.eps)[:, None]

    def state_dict(self):
        return dict(super().state_dict(), eps=self.eps)

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.eps = float(state["eps"])


class Adagrad(_RowOptimizer):
    """Element-wise Adagrad, as torch.optim.Adagrad (lr_decay 0, initial
    accumulator 0): per column, s += g^2, w -= lr * g / (sqrt(s) + eps);
    s is the row's embedding_dim columns after the weights.  Modules built
    with optimizer="exact_adagrad"."""
    kind = "exact_adagrad"

    def __init__(self, modules, lr=0.01, eps=1e-10):
        super().__init__(modules, lr)
        self.eps = float(eps)

    def _push_args(self):
        return {"lr": self.lr, "eps": self.eps}

    def state_dict(self):
        return dict(super().state_dict(), eps=self.eps)

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.eps = float(state["eps"])


class Adam(_RowOptimizer):
    """Adam on the rows looked up (lazy, as torch.optim.SparseAdam and
    FBGEMM's: rows not in a batch keep their moments), the step count t
    shared by all rows (this optimizer's steps, kept in state_dict); m and v
    are the row's 2 x embedding_dim columns after the weights.  Modules
    built with optimizer="adam"."""
    kind = "adam"

    def __init__(self, modules, lr=0.001, betas=(0.9, 0.999), eps=1e-8):
        super().__init__(modules, lr)
        self.betas, self.eps = (float(betas[0]), float(betas[1])), float(eps)

    def _push_args(self):
        return {"lr": self.lr, "eps": self.eps, "betas": self.betas, "step": self.steps}

    def state_dict(self):
        return dict(super().state_dict(), eps=self.eps, betas=list(self.betas))

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.eps, self.betas = float(state["eps"]), tuple(float(b) for b in state["betas"])


class Prefetcher:
    """Iterate `loader` (a DataLoader or any iterable of batches) one batch
    ahead: before yielding batch i it announces batch i+1's ids, so their
    rows load while batch i trains.  ids_of(batch) -> [(module, ids), ...]."""

    def __init__(self, loader, ids_of):
        self.loader, self.ids_of = loader, ids_of

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        it = iter(self.loader)
        try:
            cur = next(it)
        except StopIteration:
            return
        while True:
            try:
                nxt = next(it)
            except StopIteration:
                nxt = None
            if nxt is not None:
                for mod, ids in self.ids_of(nxt):
                    mod.prefetch(ids)
            yield cur
            if nxt is None:
                return
            cur = nxt
