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

    def extra_repr(self):
        return f"{self.table}, {self.embedding_dim}, optimizer={self.optimizer}"

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
        cache until this thread gathers them)."""
        ids = input.detach().reshape(-1).cpu().numpy() if isinstance(input, torch.Tensor) else np.asarray(input)
        if ids.size:
            self.table.prefetch(np.unique(ids))

    def weights(self, ids):
        """The current embedding rows of ids (no gradient), for inspection."""
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
    the optimizer's state columns) if missing."""

    def __init__(self, where, name, embedding_dim, optimizer="adagrad", dtype="f32", init=None, create=True):
        super().__init__(where, name, embedding_dim, optimizer, dtype, init, create)

    def forward(self, input):
        w, idx = self._weights(input)
        return F.embedding(idx, w)


class EmbeddingBag(_TableModule):
    """torch.nn.EmbeddingBag over an embfs table: mode "sum" or "mean",
    input 2-D (bags of equal size) or 1-D with offsets (include_last_offset
    as torch's), per_sample_weights (mode "sum")."""

    def __init__(self, where, name, embedding_dim, mode="sum", optimizer="adagrad", dtype="f32", init=None,
                 create=True, include_last_offset=False):
        if mode not in ("sum", "mean"):
            raise BadArgument(f"EmbeddingBag mode {mode!r}: sum or mean")
        super().__init__(where, name, embedding_dim, optimizer, dtype, init, create)
        self.mode, self.include_last_offset = mode, include_last_offset

    def forward(self, input, offsets=None, per_sample_weights=None):
        w, idx = self._weights(input)
        return F.embedding_bag(idx, w, offsets, mode=self.mode, per_sample_weights=per_sample_weights,
                               include_last_offset=self.include_last_offset)


class TableSpec:
    """One table of a Collection: its file name, embedding_dim, init (an
    embfs.Init; default uniform(+-1/sqrt(dim)) over the weights), dtype
    and pooling mode ("sum" or "mean")."""

    def __init__(self, name, embedding_dim, init=None, dtype="f32", mode="sum"):
        self.name, self.embedding_dim, self.init, self.dtype, self.mode = name, int(embedding_dim), init, dtype, mode


class Collection(torch.nn.Module):
    """Many embedding-bag tables of one mount in one module, one request to
    the daemon a step for all of them (as FBGEMM's table-batched embedding
    bags and TorchRec's EmbeddingBagCollection): forward() gathers every
    table's rows in one MULTI request (rows never stored come back
    initialised by the daemon), and the optimizer's step() pushes every
    table's gradients in one more.  With fuse_push=True, step() keeps the
    pushes and sends them with the next forward()'s gathers, in the same
    request (the daemon applies them first, so the result is the same bit
    for bit): one round trip a step.  Then call flush() before reading the
    tables by other means (a snapshot, another process, the end of
    training).  pipeline=True (implies fuse_push) also overlaps the gather
    of the next batch with this batch's compute: the ids announced by
    prefetch() (embfs.torch.Prefetcher calls it) are gathered by a
    background thread as soon as a forward's request is answered; the
    next forward then sends the pushes and gathers only the rows those
    pushes changed, after them.  A pipelined run equals the unpipelined
    one bit for bit; between forwards, change the tables only through the
    collection's optimizer (or call flush(), which also forgets the
    gathered-ahead rows).

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
        self._announced = None  # a pipeline's next batch: unique ids per table
        self._ahead = None      # (unique ids per table, future of their rows), gathered ahead
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
        self._pushes = []

    def extra_repr(self):
        return (f"{len(self.bags)} tables, optimizer={self.optimizer}, fuse_push={self.fuse_push}, "
                f"pipeline={self.pipeline}")

    def _gather_ahead(self):
        """Send the announced batch's gather to the background thread."""
        ids, self._announced = self._announced, None
        if self._worker is None:
            import concurrent.futures
            self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="embfs-ahead")
        gathers = [(b.table, u, b.init) for b, u in zip(self.bags, ids)]
        self._ahead = (ids, self._worker.submit(self.mount.multi, gathers=gathers))

    def _take_ahead(self, uniq, pushes):
        """The rows of uniq (unique ids per table) from the gather ahead,
        with the rows that pushes (the last step's, kept since: the gather
        ahead went out before them, after every earlier one) change
        gathered again after them, in one request with the pushes; None
        when the gather ahead is not of this batch."""
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return None
        ids, fut = ahead
        got = fut.result()  # waited for even if unused: its thread must be done
        if len(ids) != len(uniq) or any(not np.array_equal(a, u) for a, u in zip(ids, uniq)):
            return None
        pushed = {id(t): i for t, i, _, _ in pushes}
        again = [np.intersect1d(u, np.asarray(pushed.get(id(b.table), []), np.int64)) for b, u in zip(self.bags, uniq)]
        fresh = self.mount.multi(pushes=pushes, gathers=[(b.table, a, b.init) for b, a in zip(self.bags, again)])
        out = []
        for u, (rows, pres), a, (frows, fpres) in zip(uniq, got, again, fresh):
            if len(a):
                pos = np.searchsorted(u, a)
                rows[pos] = frows
                pres[pos] = fpres
            out.append((rows, pres))
        return out

    def forward(self, inputs, offsets=None, per_sample_weights=None):
        """inputs: one per table, in order: a 2-D tensor of ids (bags of
        equal size) or a 1-D one with offsets[i] (and per_sample_weights[i]
        for mode "sum"), as torch.nn.EmbeddingBag takes them.  Returns the
        pooled (bags, embedding_dim) tensor of each table."""
        if len(inputs) != len(self.bags):
            raise BadArgument(f"{len(inputs)} inputs for {len(self.bags)} tables")
        flat = []
        for b, inp in zip(self.bags, inputs):
            inp = inp if isinstance(inp, torch.Tensor) else torch.as_tensor(inp)
            if inp.dtype not in (torch.int64, torch.int32):
                raise BadArgument(f"{b.table}: indices must be int64 or int32, not {inp.dtype}", b.table.path)
            ids = inp.detach().reshape(-1).cpu().numpy().astype(np.int64, copy=False)
            u, inv = np.unique(ids, return_inverse=True)
            flat.append((u, torch.from_numpy(inv.reshape(tuple(inp.shape))).to(torch.int64)))
        pushes, self._pushes = self._pushes, []
        got = self._take_ahead([u for u, _ in flat], pushes) if self.pipeline else None
        if got is None:
            got = self.mount.multi(pushes=pushes,
                                   gathers=[(b.table, u, b.init) for b, (u, _) in zip(self.bags, flat)])
        if self._announced is not None:
            self._gather_ahead()
        outs = []
        track = self.training and torch.is_grad_enabled()
        for i, (b, (u, idx), (raw, _)) in enumerate(zip(self.bags, flat, got)):
            rows = b._to_f32(raw)
            w = torch.from_numpy(np.ascontiguousarray(rows[:, :b.embedding_dim]))
            if track:
                w.requires_grad_(True)
                b._pending.append((u, rows, w))
            outs.append(F.embedding_bag(idx, w, offsets[i] if offsets is not None else None, mode=b.mode,
                                        per_sample_weights=per_sample_weights[i] if per_sample_weights else None,
                                        include_last_offset=b.include_last_offset))
        return outs

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
        with pipeline=True, they are gathered ahead instead, once the
        coming forward's request is answered."""
        uniq = [np.unique(np.asarray(i.detach().cpu().numpy() if isinstance(i, torch.Tensor) else i)
                          .reshape(-1).astype(np.int64)) for i in inputs]
        if self.pipeline:
            self._announced = uniq
            return
        self.mount.multi(prefetches=[(b.table, u) for b, u in zip(self.bags, uniq) if len(u)])

    def _step(self, opt):
        """The optimizer's step: every table's summed gradients pushed in
        one request (or kept for the next forward with fuse_push)."""
        pushes = []
        for b in self.bags:
            got = b._take_grads()
            if got is not None:
                ids, _, g = got
                pushes.append((b.table, ids, g, b._push_kwargs(opt)))
        if self._pushes:
            self.flush()
        if self.fuse_push:
            self._pushes = pushes
        elif pushes:
            self.mount.multi(pushes=pushes)

    def _drop_grads(self):
        for b in self.bags:
            b._drop_grads()

    def flush(self):
        """Send the pushes fuse_push kept (the last step's), if any, and
        forget what the pipeline gathered ahead."""
        pushes, self._pushes = self._pushes, []
        if self._ahead is not None:
            self._ahead[1].result()
            self._ahead = None
        if pushes:
            self.mount.multi(pushes=pushes)


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
            if isinstance(m, Collection):
                m._step(self)
                continue
            got = m._take_grads()
            if got is None:
                continue
            ids, rows, g = got
            m._apply(self, ids, rows, g)

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
