"""embfs.mount: Mount and Table.  Mount, an embfs mount seen from Python:
its tables (made, listed, removed, opened as Table), its snapshots, restore,
rollback and deltas, the batch id, sync and stats; and each thread's request
channel to it (Mount._conn, an fd of .embfs/rows, see _conn).  Table, one
table of a mount (live, or a snapshot's: read-only): its geometry from the
xattrs; gather, scatter and prefetch over the mount's request channel, in
requests within the wire limits, retried once when the table's inode went
stale; the file calls on the table itself (memmap, SEEK_DATA walks,
truncate, punch, copy, deltas, fsync).

The two are one module because each needs the other: a mount hands out its
tables, and a table opened by path (Table("MNT/NAME")) opens its mount.
"""
import ctypes
import errno as _errno
import os
import stat as _stat
import threading
import weakref

import numpy as np

from ._arrays import DTYPES, _aligned, _bytes_view, _is_tensor, _torch, _torch_dtype
from ._conn import _Conn, _read_response, _write_request
from ._wire import (MAX_BYTES, MAX_COUNT, MAX_MULTI, MAX_TABLES, OPTIMIZERS, _DELTA_HDR, _F_INIT, _F_PRESENT,
                    _GATHER, _HDR, _MULTI, _OFF_MAX, _PREFETCH, _PUSH, _ROW_ID_MAX, _SCATTER, _SUB, _init_spec, _present,
                    _present_len, _push_params, _request, _restore_report, _state_cols)
from .errors import BadArgument, BadType, EmbfsError, _oserror
from .init import Init


class Mount:
    """An embfs mount: its tables, snapshots, batch id and sync point."""

    def __init__(self, path):
        self.path = os.path.abspath(os.fspath(path))
        self._rows = os.path.join(self.path, ".embfs", "rows")
        if not os.path.exists(self._rows):
            raise EmbfsError(_errno.ENOTDIR, f"{self.path}: not an embfs mount (no .embfs/rows)", self.path)
        self._local = threading.local()
        self._conns = weakref.WeakSet()
        self._lock = threading.Lock()

    def __repr__(self):
        return f"embfs.Mount({self.path!r})"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Close every thread's fd of .embfs/rows (they reopen on next use)."""
        with self._lock:
            for c in list(self._conns):
                c.close()
        self._local = threading.local()

    def _conn(self):
        c = getattr(self._local, "c", None)
        if c is None or c.fd < 0:
            try:
                c = _Conn(self._rows)
            except OSError as e:
                raise _oserror(e, f"{self._rows}: open", self._rows) from None
            self._local.c = c
            with self._lock:
                self._conns.add(c)
        return c

    # ---- tables ----
    def tables(self):
        """Names of the live tables."""
        return sorted(e.name for e in os.scandir(self.path) if e.is_file(follow_symlinks=False))

    def table(self, name, snapshot=None):
        """The table NAME (live, or as of snapshot SNAPSHOT: read-only)."""
        return Table(self, name, snapshot=snapshot)

    __getitem__ = table

    def create(self, name, dim, dtype="f32", exist_ok=False, mode=0o644):
        """Make table NAME of DIM x DTYPE; with exist_ok, an existing table of
        that geometry is fine (another geometry is an error)."""
        path = self._tpath(name)
        if dtype not in DTYPES:
            raise BadArgument(f"table {name}: dtype {dtype!r} is not one of {' '.join(DTYPES)}", path)
        if not isinstance(dim, (int, np.integer)) or dim < 1:
            raise BadArgument(f"table {name}: dim {dim!r} must be a positive integer", path)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_CLOEXEC, mode)
        except FileExistsError:
            if not exist_ok:
                raise EmbfsError(_errno.EEXIST, f"table {name} exists", path) from None
            t = Table(self, name)
            if t.dim != dim or t.dtype_name != dtype:
                raise EmbfsError(_errno.EEXIST, f"table {name} exists as {t.dim} x {t.dtype_name}, "
                                 f"not {dim} x {dtype}", path) from None
            return t
        except OSError as e:
            raise _oserror(e, f"table {name}: create", path) from None
        try:
            os.setxattr(fd, "user.embfs.dtype", dtype.encode())
            os.setxattr(fd, "user.embfs.dim", str(int(dim)).encode())
        except OSError as e:
            os.close(fd)
            os.unlink(path)
            raise _oserror(e, f"table {name}: geometry {dim} x {dtype}", path) from None
        os.close(fd)
        return Table(self, name)

    def remove(self, name):
        """Delete live table NAME (snapshots keep theirs)."""
        try:
            os.unlink(self._tpath(name))
        except OSError as e:
            raise _oserror(e, f"table {name}: remove", self._tpath(name)) from None

    def _tpath(self, name, snapshot=None):
        if not name or "/" in name or name in (".", ".."):
            raise BadArgument(f"{name!r} is not a table name")
        if snapshot is None:
            return os.path.join(self.path, name)
        return os.path.join(self._snapdir(snapshot), name)

    # ---- snapshots and batches ----
    def _snapdir(self, name):
        if not name or "/" in name or name in (".", ".."):
            raise BadArgument(f"{name!r} is not a snapshot name")
        return os.path.join(self.path, ".snapshots", name)

    def snapshot(self, name):
        """Take snapshot NAME of every table (mkdir .snapshots/NAME)."""
        d = self._snapdir(name)
        try:
            os.mkdir(d)
        except OSError as e:
            raise _oserror(e, f"snapshot {name}", d) from None

    def snapshots(self):
        """Names of the snapshots, oldest first."""
        d = os.path.join(self.path, ".snapshots")
        try:
            ents = [(e.stat().st_mtime_ns, e.name) for e in os.scandir(d)]
        except OSError as e:
            raise _oserror(e, "snapshots", d) from None
        return [n for _, n in sorted(ents)]

    def drop(self, name):
        """Drop snapshot NAME (rmdir): the rows only it held are freed."""
        d = self._snapdir(name)
        try:
            os.rmdir(d)
        except OSError as e:
            raise _oserror(e, f"snapshot {name}: drop", d) from None

    def restore(self, snapshot, name):
        """Put live table NAME back to its state in SNAPSHOT, in place: only
        rows that differ are written (README "Restore in place").  Returns
        the daemon's report, a dict: rows_examined, rows_rewritten,
        rows_deleted, ms, walk ("since": the rows changed since the
        snapshot, found in the live index; "both": every row either side
        stores, for a table with rows in spill runs).  All or nothing
        across a crash, as rollback; readers see rows change while it
        runs."""
        self._tpath(name)
        return self._restore_req(snapshot, name)

    def _restore_req(self, snapshot, name):
        p = os.path.join(self.path, ".embfs", "restore")
        self._snapdir(snapshot)
        what = f"restore of table {name}" if name else "rollback"
        try:
            fd = os.open(p, os.O_RDWR | os.O_CLOEXEC)
            try:
                os.write(fd, (f"{snapshot} {name}\n" if name else f"{snapshot}\n").encode())
                line = os.pread(fd, 4096, 0).decode()
            finally:
                os.close(fd)
        except OSError as e:
            raise EmbfsError(e.errno, f"{what} from snapshot {snapshot}: {os.strerror(e.errno)}", p) from None
        return _restore_report(line)

    def rollback(self, snapshot):
        """Roll the whole mount back to SNAPSHOT: live tables it does not
        have are unlinked, its tables missing from the mount made again, and
        every one of its tables restored in place.  All or nothing across a
        crash: a daemon killed at any point leaves, once the pool is mounted
        again, the mount wholly as before the call or wholly rolled back
        (a pending rollback is finished at mount), and rolled back whenever
        the call returned.  Not atomic to other readers while it runs: they
        see tables unlinked and made one at a time and rows change 4096 at
        a time; changes meanwhile fail with EBUSY.  Once it returns, reads
        (through the page cache too) see the snapshot's rows (README
        "Restore in place").  Returns the daemon's report (see restore;
        also tables, created, unlinked)."""
        return self._restore_req(snapshot, None)

    def delta(self, a, b, name):
        """The rows of table NAME that changed between snapshot A and a later
        snapshot B (None: the live table): (changed, deleted, size) -- int64
        arrays of row ids, ascending (changed: B stores them and A does not,
        or another version; deleted: A stores them, B does not) and B's file
        size.  From .embfs/delta (README "Deltas")."""
        p = os.path.join(self.path, ".embfs", "delta")
        self._snapdir(a)
        if b is not None:
            self._snapdir(b)
        self._tpath(name)
        try:
            fd = os.open(p, os.O_RDWR | os.O_CLOEXEC)
            try:
                os.write(fd, f"{a} {b or '-'} {name}\n".encode())
                hdr = os.pread(fd, _DELTA_HDR.size, 0)
                magic, rs, ba, size, nch, ndel = _DELTA_HDR.unpack(hdr)
                if magic != b"EMBD":
                    raise EmbfsError(_errno.EIO, f"delta of table {name}: bad answer", p)
                want = 8 * (nch + ndel)
                body = bytearray(want)
                got = 0
                while got < want:
                    k = os.preadv(fd, [memoryview(body)[got:]], _DELTA_HDR.size + got)
                    if k <= 0:
                        raise EmbfsError(_errno.EIO, f"delta of table {name}: short answer", p)
                    got += k
            finally:
                os.close(fd)
        except EmbfsError:
            raise
        except OSError as e:
            raise EmbfsError(e.errno, f"delta of table {name} from snapshot {a} to "
                             f"{b or 'the live table'}: {os.strerror(e.errno)}", p) from None
        ids = np.frombuffer(bytes(body), "<u8").astype(np.int64)
        return ids[:nch], ids[nch:], size

    def export_delta(self, a, b, name, path):
        """Write what changed in table NAME from snapshot A to B (None: live)
        to PATH (numpy .npz: ids, rows, deleted, size, dim, dtype): an
        incremental checkpoint.  Returns (rows changed, rows deleted)."""
        changed, deleted, size = self.delta(a, b, name)
        src = self.table(name, snapshot=b)
        rows = src.gather(changed) if len(changed) else np.zeros((0, src.dim), src.dtype)
        with open(path, "wb") as f:
            np.savez(f, ids=changed, rows=rows, deleted=deleted, size=np.int64(size),
                     dim=np.int64(src.dim), dtype=np.array(src.dtype_name))
        return len(changed), len(deleted)

    def delta_path(self, a, b=None):
        """The directory of the deltas from snapshot A to the later snapshot
        B (None: the live tables): NAME holds table NAME's changed rows at
        their offsets (a sparse file), .changed/NAME and .deleted/NAME the
        ids (little-endian uint64).  cp -r --sparse=always of it ships an
        incremental checkpoint; Table.apply_delta applies it."""
        return os.path.join(self.path, ".snapshots", a, ".delta", ".live" if b is None else b)

    @property
    def batch(self):
        """The current batch id (stamped on every row version written)."""
        with open(os.path.join(self.path, ".embfs", "batch"), "rb") as f:
            return int(f.read())

    def set_batch(self, step):
        """Make STEP the batch id of the writes from now on.  It never goes
        back: a smaller one than the current raises EINVAL (a snapshot moves
        it past its own); the same one is a no-op."""
        p = os.path.join(self.path, ".embfs", "batch")
        step = int(step)
        if step == self.batch:
            return
        try:
            fd = os.open(p, os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, b"%d\n" % step)
            finally:
                os.close(fd)
        except OSError as e:
            cur = self.batch
            raise EmbfsError(e.errno, f"batch id {step}: {os.strerror(e.errno)}"
                             + (f" (it is {cur} and never goes back)" if step < cur else ""), p) from None

    def sync(self):
        """Make every table's writes durable (fsync of the mount's root)."""
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        except OSError as e:
            raise _oserror(e, f"{self.path}: sync", self.path) from None
        finally:
            os.close(fd)

    def multi(self, pushes=(), gathers=(), prefetches=(), present=True):
        """Many tables in one round trip (one MULTI request on .embfs/rows):
        every push is applied first, in order, then every gather answered,
        so a gather sees the pushes of the same call.
          pushes:     (table, ids, grads, kwargs), kwargs as Table.push's
                      (optimizer, lr, eps, betas, weight_decay, step, init)
          gathers:    (table, ids, init) or (table, ids, init, out), init an
                      embfs.Init or None (zeros), out a C-contiguous array
                      of shape (len(ids), dim) and the table's dtype that
                      the rows land in (else one is made)
          prefetches: (table, ids)
        A table may appear once in each.  Returns [(rows, present), ...],
        one per gather: numpy arrays of shape (len(ids), dim) of the
        table's dtype and (len(ids),) bool (None with present=False: the
        daemon then sends no bitmaps).  The whole call is checked
        before anything runs.  Beyond one request's limits (1024 parts,
        65536 ids a part, 256 MiB) it runs as single-table requests, in
        the same order."""
        pushes, gathers, prefetches = list(pushes), list(gathers), list(prefetches)
        for item in pushes + gathers + prefetches:
            if not isinstance(item[0], Table) or item[0].mount.path != self.path:
                raise BadArgument(f"{self.path}: {item[0]!r} is not a table of this mount")
        parts, body, bufs, outs = [], [], [], []
        fits = len(pushes) + len(gathers) + len(prefetches) <= MAX_TABLES
        size = resp = 0
        for t, ids, grads, kw in pushes:
            a, g, params = t._push_args(ids, grads, **kw)
            if not len(a):
                continue
            fits = fits and len(a) <= MAX_COUNT and g.nbytes <= MAX_BYTES
            parts.append(_SUB.pack(t.ino, _PUSH, len(a), 0, 0))
            body += [params, memoryview(a).cast("B"), _bytes_view(g)]
        for t, ids in prefetches:
            a = t._ids(ids)
            if not len(a):
                continue
            fits = fits and len(a) <= MAX_COUNT
            parts.append(_SUB.pack(t.ino, _PREFETCH, len(a), 0, 0))
            body.append(memoryview(a).cast("B"))
        for t, ids, init, *out in gathers:
            a = t._ids(ids)
            n = len(a)
            spec = _init_spec(init) if t._daemon_init(init) else None
            rows = _gather_out(t, n, out[0]) if out else _aligned(n * t.row_size).view(t.dtype).reshape(n, t.dim)
            # the bitmap: asked for, or needed to fill holes with a client's init
            bits = bytearray(_present_len(n)) if present or init is not None and spec is None else None
            outs.append((t, a, init, spec, rows, bits))
            if not n:
                continue
            fits = fits and n <= MAX_COUNT and n * t.row_size <= MAX_BYTES
            parts.append(_SUB.pack(t.ino, _GATHER, n, (_F_PRESENT if bits is not None else 0) |
                                   (_F_INIT if spec else 0), 0))
            body += ([spec] if spec else []) + [memoryview(a).cast("B")]
            bufs.append(_bytes_view(rows))
            resp += n * t.row_size
            if bits is not None:
                bufs.append(memoryview(bits))
                resp += len(bits)
        size = _HDR.size + sum(len(p) for p in parts) + sum(len(b) for b in body)
        if not parts:
            return [(rows, np.zeros(0, bool) if present else None) for _, _, _, _, rows, _ in outs]
        if not fits or size > MAX_MULTI or resp > MAX_MULTI:
            return self._multi_apart(pushes, gathers, prefetches, present)
        self._multi_send(parts, body, size, bufs, resp)
        res = []
        for t, a, init, spec, rows, bits in outs:
            pres = None if bits is None else _present(bytes(bits), len(a)) if len(a) else np.zeros(0, bool)
            if init is not None and spec is None and not pres.all():
                rows[~pres] = np.asarray(init(a[~pres].view(np.int64), t), dtype=t.dtype)
            res.append((rows, pres if present else None))
        return res

    def _multi_send(self, parts, body, size, bufs, resp):
        """Send a MULTI request of parts (_SUB bytes each) and body (the
        parts' bytes, in order; size: the request's bytes with the
        header) and read its resp bytes into bufs."""
        hdr = _HDR.pack(b"EMBB", _MULTI, 0, len(parts), 0, size)
        c = self._conn()
        try:
            _write_request(c, [hdr, b"".join(parts)] + body, size)
            got = _read_response(c, bufs, resp) if resp else 0
        except OSError as e:
            raise _oserror(e, f"{self.path}: request over {len(parts)} tables", self.path) from None
        if got < resp:
            raise EmbfsError(_errno.EIO, f"{self.path}: short response ({got} of {resp} bytes)", self.path)

    def _multi_apart(self, pushes, gathers, prefetches, present):
        """multi() as single-table requests, in the same order."""
        for t, ids, grads, kw in pushes:
            t.push(ids, grads, **kw)
        for t, ids in prefetches:
            t.prefetch(ids)
        res = []
        for t, ids, init, *out in gathers:
            rows, pres = t.gather(ids, present=True, init=init)
            if out:
                _gather_out(t, len(rows), out[0])[...] = rows
                rows = out[0]
            res.append((rows, pres if present else None))
        return res

    def stats(self):
        """The counters of .embfs/stats as a dict of ints (floats, strings)."""
        out = {}
        with open(os.path.join(self.path, ".embfs", "stats")) as f:
            for line in f:
                k, _, v = line.strip().partition(" ")
                if not k:
                    continue
                for conv in (int, float):
                    try:
                        out[k] = conv(v)
                        break
                    except ValueError:
                        pass
                else:
                    out[k] = v
        return out


def _gather_out(t, n, out):
    """out, checked to take n rows of table t in place."""
    if not isinstance(out, np.ndarray) or out.shape != (n, t.dim) or out.dtype != t.dtype or \
            not out.flags.c_contiguous or not out.flags.writeable:
        raise BadArgument(f"{t}: a gather's out must be a writable C-contiguous {t.dtype} array of shape "
                          f"({n}, {t.dim})", t.path)
    return out


def _data_runs(fd, end, off=0):
    """(start, end) byte ranges of data in [off, end) of fd, by SEEK_DATA
    and SEEK_HOLE."""
    while off < end:
        try:
            d = os.lseek(fd, off, os.SEEK_DATA)
        except OSError as e:
            if e.errno == _errno.ENXIO:
                return
            raise
        if d >= end:
            return
        h = min(os.lseek(fd, d, os.SEEK_HOLE), end)
        yield d, h
        off = h


_LIBC = None


def _libc():
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
        _LIBC.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    return _LIBC


class Table:
    """A table: live (read-write) or in a snapshot (read-only).

    Geometry comes from its xattrs (dim, dtype, row_size).  Row ids are
    non-negative integers up to max_row: 2^48 - 2 (a pool keeps 48 bits of
    a row id), or less when the row would not end within 2^63 - 1 bytes;
    rows never written read as zeros, and gather(present=True) tells them
    apart from stored rows."""

    def __init__(self, mount, name=None, snapshot=None):
        if not isinstance(mount, Mount):
            # a path: MNT/NAME or MNT/.snapshots/S/NAME
            p = os.path.abspath(os.fspath(mount))
            d, name = os.path.split(p)
            if os.path.basename(os.path.dirname(d)) == ".snapshots":
                snapshot, d = os.path.basename(d), os.path.dirname(os.path.dirname(d))
            mount = Mount(d)
        self.mount, self.name, self.snapshot = mount, name, snapshot
        self.path = mount._tpath(name, snapshot)
        self.read_only = snapshot is not None
        self._geometry()

    def _geometry(self):
        try:
            st = os.stat(self.path)
            if not _stat.S_ISREG(st.st_mode):
                raise EmbfsError(_errno.EINVAL, f"{self}: not a table", self.path)
            dim = int(os.getxattr(self.path, "user.embfs.dim"))
            dtype = os.getxattr(self.path, "user.embfs.dtype").decode()
            rs = int(os.getxattr(self.path, "user.embfs.row_size"))
        except FileNotFoundError:
            raise EmbfsError(_errno.ENOENT, f"{self}: no such table", self.path) from None
        except OSError as e:
            raise _oserror(e, f"{self}", self.path) from None
        if dtype not in DTYPES or DTYPES[dtype].itemsize * dim != rs:
            raise EmbfsError(_errno.EINVAL, f"{self}: geometry {dim} x {dtype} ({rs} B rows) not understood",
                             self.path)
        self.ino, self.dim, self.dtype_name, self.row_size = st.st_ino, dim, dtype, rs
        self.dtype = DTYPES[dtype]
        self.max_row = min(_ROW_ID_MAX, _OFF_MAX // rs - 1)
        self._chunk = max(1, min(MAX_COUNT, MAX_BYTES // rs))

    def __repr__(self):
        return f"table {self.name}" + (f" (snapshot {self.snapshot})" if self.snapshot else "")

    __str__ = __repr__

    @property
    def torch_dtype(self):
        return _torch_dtype(self.dtype_name)

    @property
    def nrows(self):
        """Rows up to the end of the file (stored or holes)."""
        return os.stat(self.path).st_size // self.row_size

    __len__ = lambda self: self.nrows

    # ---- arguments ----
    def _ids(self, ids):
        """ids as a C-contiguous little-endian uint64 array (flattened), checked."""
        if _is_tensor(ids):
            ids = ids.detach().cpu().numpy()
        a = np.asarray(ids)
        if a.dtype.kind not in "iu":
            if a.size == 0 and a.dtype.kind == "f":
                a = a.astype(np.int64)
            else:
                raise BadType(f"{self}: row ids must be integers, not {a.dtype}", self.path)
        a = a.reshape(-1)
        if a.size:
            lo, hi = int(a.min()), int(a.max())
            if lo < 0:
                raise BadArgument(f"{self}: negative row id {lo}", self.path)
            if hi > self.max_row:
                raise BadArgument(f"{self}: row id {hi} out of range (rows of {self.row_size} B: at most "
                                  f"{self.max_row})", self.path)
        if a.dtype != np.uint64 and a.dtype != np.int64:
            a = a.astype(np.int64)
        return np.ascontiguousarray(a).view("<u8")

    def _rows_arg(self, rows, shape):
        """rows as a C-contiguous ndarray of our dtype and shape (n, dim)."""
        if _is_tensor(rows):
            want = self.torch_dtype
            if rows.dtype != want:
                raise BadType(f"{self}: rows are {rows.dtype}, the table holds {self.dtype_name} ({want})",
                              self.path)
            t = rows.detach().cpu().contiguous()
            if self.dtype_name == "bf16":
                t = t.view(_torch().int16)
            rows = t.numpy()
        else:
            rows = np.asarray(rows)
            if rows.dtype != self.dtype:
                raise BadType(f"{self}: rows are {rows.dtype}, the table holds {self.dtype_name} "
                              f"({self.dtype})", self.path)
        if rows.shape != shape and rows.shape != (shape[0], self.dim):
            raise BadArgument(f"{self}: rows of shape {tuple(rows.shape)} for {shape[0]} ids; "
                              f"expected {(shape[0], self.dim)}", self.path)
        return np.ascontiguousarray(rows).reshape(shape[0], self.dim)

    # ---- requests ----
    def _send(self, c, op, ids, rows=None, flags=0, pre=None):
        body = ([pre] if pre is not None else []) + [memoryview(ids).cast("B")] + \
            ([_bytes_view(rows)] if rows is not None else [])
        hdr, total = _request(op, self.ino, len(ids), body, flags)
        _write_request(c, [hdr] + body, total)

    def _recv(self, c, bufs, need):
        got = _read_response(c, bufs, need)
        if got < need:
            raise EmbfsError(_errno.EIO, f"{self}: short gather response ({got} of {need} bytes)", self.path)

    def _retry(self, fn):
        """Run fn(conn); on ESTALE (or an inode the daemon no longer knows)
        re-stat the table: same geometry -> once more, else a clear error."""
        try:
            return fn(self.mount._conn())
        except OSError as e:
            if isinstance(e, EmbfsError):
                raise
            err = e.errno
            if err not in (_errno.ESTALE, _errno.EINVAL):
                raise _oserror(e, f"{self}", self.path) from None
        old = (self.ino, self.dim, self.dtype_name)
        try:
            self._geometry()
        except EmbfsError as g:
            if g.errno == _errno.ENOENT:
                raise EmbfsError(_errno.ENOENT, f"{self}: removed while in use", self.path) from None
            raise
        if (self.dim, self.dtype_name) != old[1:]:
            raise EmbfsError(_errno.ESTALE, f"{self}: geometry changed from {old[1]} x {old[2]} to "
                             f"{self.dim} x {self.dtype_name}", self.path)
        if self.ino == old[0] and err == _errno.EINVAL:
            raise EmbfsError(_errno.EINVAL, f"{self}: request refused: {os.strerror(err)}", self.path)
        try:
            return fn(self.mount._conn())
        except OSError as e:
            raise _oserror(e, f"{self}", self.path) from None

    # ---- the API ----
    def gather(self, ids, out=None, present=False, init=None):
        """Rows ids (any shape of integers, duplicates fine) as an array of
        shape ids.shape + (dim,): numpy, or torch when ids is a tensor.
        out: an array/tensor to read into (C-contiguous, our dtype, n x dim):
        no copy.  present=True: also a bool array, True where the row is
        stored (False: never written or deleted; such a row reads as zeros).
        init: an Init (or callable(ids) -> rows) that fills the rows not
        stored."""
        as_torch = _is_tensor(ids)
        shape = tuple(ids.shape) if hasattr(ids, "shape") else (len(ids),)
        a = self._ids(ids)
        n = len(a)
        if out is None:
            res = _aligned(n * self.row_size).view(self.dtype).reshape(n, self.dim)
        else:
            res = self._out(out, n)
        spec = _init_spec(init) if self._daemon_init(init) else None
        pres = np.empty(n, bool) if (present or (init is not None and spec is None)) else None
        for k in range(0, n, self._chunk):
            self._gather_chunk(a[k:k + self._chunk], res[k:k + self._chunk],
                               pres[k:k + self._chunk] if pres is not None else None, spec)
        if init is not None and spec is None and not pres.all():
            miss = ~pres
            res[miss] = np.asarray(init(a[miss].view(np.int64), self), dtype=self.dtype)
        if out is not None:
            result = out
        elif as_torch:
            torch = _torch()
            result = torch.from_numpy(res.reshape(shape + (self.dim,)))
            if self.dtype_name == "bf16":
                result = result.view(torch.bfloat16)
        else:
            result = res.reshape(shape + (self.dim,))
        if present:
            pr = pres.reshape(shape)
            return result, (_torch().from_numpy(pr) if as_torch else pr)
        return result

    def empty(self, n, torch=False):
        """A page-aligned (n, dim) array of the table's dtype (a tensor with
        torch=True) to reuse as gather's out: rows land in it with no copy,
        in whole pages (fewer FUSE reads)."""
        a = _aligned(int(n) * self.row_size).view(self.dtype).reshape(int(n), self.dim)
        if not torch:
            return a
        t = _torch().from_numpy(a)
        return t.view(_torch().bfloat16) if self.dtype_name == "bf16" else t

    def _out(self, out, n):
        if _is_tensor(out):
            if out.dtype != self.torch_dtype or not out.is_contiguous() or out.device.type != "cpu":
                raise BadType(f"{self}: out must be a contiguous CPU tensor of {self.torch_dtype}", self.path)
            arr = (out.view(_torch().int16) if self.dtype_name == "bf16" else out).detach().numpy()
        else:
            arr = out
            if not isinstance(arr, np.ndarray) or arr.dtype != self.dtype or not arr.flags.c_contiguous \
                    or not arr.flags.writeable:
                raise BadType(f"{self}: out must be a writable C-contiguous {self.dtype} array", self.path)
        if arr.size != n * self.dim:
            raise BadArgument(f"{self}: out holds {arr.size} values, {n} rows need {n * self.dim}", self.path)
        return arr.reshape(n, self.dim)

    def _daemon_init(self, init):
        """Whether the daemon can fill rows not stored with init (an
        embfs.Init over a float table)."""
        return isinstance(init, Init) and self.dtype_name in ("f32", "f16", "bf16")

    def _gather_chunk(self, ids, res, pres, spec=None):
        n = len(ids)
        flags = (_F_PRESENT if pres is not None else 0) | (_F_INIT if spec is not None else 0)

        def run(c):
            self._send(c, _GATHER, ids, flags=flags, pre=spec)
            bufs = [_bytes_view(res)]
            need = n * self.row_size
            if pres is not None:
                nb = _present_len(n)
                bufs.append(memoryview(c.bits)[:nb])
                need += nb
            self._recv(c, bufs, need)
            if pres is not None:
                pres[:] = _present(c.bits, n)
        self._retry(run)

    def present(self, ids):
        """Which of ids are stored (a bool array of ids' shape)."""
        return self.gather(ids, present=True)[1]

    def scatter(self, ids, rows):
        """Write rows (shape ids.shape + (dim,) or (len, dim), the table's
        dtype exactly) at ids; duplicates: the last wins.  Each row is atomic;
        a batch above the request limits is sent in several requests."""
        if self.read_only:
            raise EmbfsError(_errno.EROFS, f"{self}: a snapshot's table is read-only", self.path)
        shape = tuple(ids.shape) if hasattr(ids, "shape") else (len(ids),)
        a = self._ids(ids)
        r = self._rows_arg(rows, (len(a),) + tuple(shape[1:]) + (self.dim,) if len(shape) > 1 else
                           (len(a), self.dim))
        for k in range(0, len(a), self._chunk):
            ck, rk = a[k:k + self._chunk], r[k:k + self._chunk]
            self._retry(lambda c: self._send(c, _SCATTER, ck, rk))

    def push(self, ids, grads, optimizer="sgd", lr=0.01, eps=1e-10, betas=(0.9, 0.999), weight_decay=0.0,
             step=0, init=None):
        """Apply gradients to rows in the daemon, atomically per row: grads
        is float32 of shape (len(ids), d) (numpy or torch) for the first d
        columns (the weights); the optimizer's state lives in the columns
        after them ("sgd": none, "rowwise_adagrad": 1, "adagrad": d, "adam":
        2 d, which must fit in dim).  Duplicate ids have their gradients
        summed.  Rows never stored start from init (an embfs.Init; None:
        zeros).  step: Adam's step number t >= 1 (bias correction).  The
        update is in f32 and rounded to the table's dtype.  Pushes to one
        table from any number of processes lose no update; the request is
        refused whole (EmbfsError EINVAL) on a NaN or Inf gradient."""
        a, g, params = self._push_args(ids, grads, optimizer, lr, eps, betas, weight_decay, step, init)
        d = g.shape[1]
        chunk = max(1, min(MAX_COUNT, MAX_BYTES // (4 * d), self._chunk))
        if len(a) > chunk:
            # a row in two requests would be stepped twice: sum its gradients first
            u, inv = np.unique(a, return_inverse=True)
            if len(u) < len(a):
                s = np.zeros((len(u), d), np.float32)
                np.add.at(s, inv.reshape(-1), g)
                a, g = np.ascontiguousarray(u).view("<u8"), s
        for k in range(0, len(a), chunk):
            ck, gk = a[k:k + chunk], g[k:k + chunk]
            self._retry(lambda c: self._send_push(c, params, ck, gk))

    def _push_args(self, ids, grads, optimizer="sgd", lr=0.01, eps=1e-10, betas=(0.9, 0.999), weight_decay=0.0,
                   step=0, init=None):
        """A push's ids, gradients and parameter bytes, checked."""
        if self.read_only:
            raise EmbfsError(_errno.EROFS, f"{self}: a snapshot's table is read-only", self.path)
        if optimizer not in OPTIMIZERS:
            raise BadArgument(f"{self}: optimizer {optimizer!r}: one of {', '.join(OPTIMIZERS)}", self.path)
        if init is not None and not hasattr(init, "kind"):
            raise BadArgument(f"{self}: a push's init must be an embfs.Init (the daemon computes it)", self.path)
        a = self._ids(ids)
        g = self._grads_arg(grads, len(a))
        d = g.shape[1]
        if d + _state_cols(optimizer, d) > self.dim:
            raise BadArgument(f"{self}: {optimizer} over {d} weight columns needs {d + _state_cols(optimizer, d)} "
                              f"columns, the table has {self.dim}", self.path)
        if optimizer == "adam" and int(step) < 1:
            raise BadArgument(f"{self}: adam needs step >= 1 (its bias correction)", self.path)
        params = _push_params(optimizer, d, float(lr), float(eps), (float(betas[0]), float(betas[1])),
                              float(weight_decay), int(step) if optimizer == "adam" else 0, init)
        return a, g, params

    def _grads_arg(self, grads, n):
        """grads as a C-contiguous float32 ndarray of shape (n, d), d <= dim."""
        if _is_tensor(grads):
            if grads.dtype != _torch().float32:
                raise BadType(f"{self}: gradients are {grads.dtype}, a push takes float32", self.path)
            grads = grads.detach().cpu().contiguous().numpy()
        else:
            grads = np.asarray(grads)
            if grads.dtype != np.float32:
                raise BadType(f"{self}: gradients are {grads.dtype}, a push takes float32", self.path)
        if grads.ndim != 2 or grads.shape[0] != n or not 1 <= grads.shape[1] <= self.dim:
            raise BadArgument(f"{self}: gradients of shape {tuple(grads.shape)} for {n} ids; expected "
                              f"({n}, d) with 1 <= d <= {self.dim}", self.path)
        return np.ascontiguousarray(grads)

    def _send_push(self, c, params, ids, grads):
        body = [params, memoryview(ids).cast("B"), _bytes_view(grads)]
        hdr, total = _request(_PUSH, self.ino, len(ids), body)
        _write_request(c, [hdr] + body, total)

    def prefetch(self, ids):
        """Hint: these rows are read soon (the daemon pins them in its row
        cache until this thread's next gather of them)."""
        a = self._ids(ids)
        for k in range(0, len(a), self._chunk):
            ck = a[k:k + self._chunk]
            self._retry(lambda c: self._send(c, _PREFETCH, ck))

    def as_array(self, writable=False):
        """The whole table as a numpy.memmap of shape (nrows, dim) (the
        kernel's page cache: for serving and scans; torch.from_numpy() makes
        it a tensor).  bf16 tables map as int16 raw bits."""
        n = self.nrows
        if writable and self.read_only:
            raise EmbfsError(_errno.EROFS, f"{self}: a snapshot's table is read-only", self.path)
        if n == 0:
            return np.zeros((0, self.dim), self.dtype)
        if n * self.row_size > (1 << 46):
            raise EmbfsError(_errno.EFBIG, f"{self}: {n} rows ({n * self.row_size} B) are too many to map; "
                             "use gather", self.path)
        return np.memmap(self.path, dtype=self.dtype, mode="r+" if writable else "r", shape=(n, self.dim))

    def stored_ids(self, start=0, stop=None):
        """Ids of the stored rows in [start, stop), ascending (SEEK_DATA /
        SEEK_HOLE over the file: one pair of calls per run of stored rows)."""
        rs = self.row_size
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            size = os.fstat(fd).st_size
            end = size if stop is None else min(stop * rs, size)
            for lo, hi in _data_runs(fd, end, start * rs):
                yield from range(lo // rs, (hi + rs - 1) // rs)
        except OSError as e:
            raise _oserror(e, f"{self}: SEEK_DATA", self.path) from None
        finally:
            os.close(fd)

    def truncate(self, nrows=0):
        """Drop every row from nrows on (ftruncate)."""
        if self.read_only:
            raise EmbfsError(_errno.EROFS, f"{self}: a snapshot's table is read-only", self.path)
        try:
            os.truncate(self.path, int(nrows) * self.row_size)
        except OSError as e:
            raise _oserror(e, f"{self}: truncate", self.path) from None

    def copy_from(self, src, batch=65536):
        """Make this table's rows those of src (same geometry; e.g. a snapshot's
        table: a restore).  Rows src does not store become holes.  src's runs
        of stored rows are found with SEEK_DATA/SEEK_HOLE; a run of 64 rows
        or more is copied inside the daemon by copy_file_range (no row bytes
        through this process), shorter ones (a table of rows scattered over
        a huge id space is all runs of one row) are gathered and scattered
        in batches of up to `batch` rows.  Returns the number of rows copied."""
        if (src.dim, src.dtype_name) != (self.dim, self.dtype_name):
            raise BadArgument(f"{self}: cannot copy {src} ({src.dim} x {src.dtype_name}) into "
                              f"{self.dim} x {self.dtype_name}", self.path)
        self.truncate(0)
        rs, ids, copied = self.row_size, [], 0

        def flush():
            if ids:
                a = np.array(ids, np.int64)
                self.scatter(a, src.gather(a))
                ids.clear()
        try:
            fi = os.open(src.path, os.O_RDONLY | os.O_CLOEXEC)
            fo = None
            try:
                fo = os.open(self.path, os.O_WRONLY | os.O_CLOEXEC)
                size = os.fstat(fi).st_size
                for lo, hi in _data_runs(fi, size):
                    r0, r1 = lo // rs, (hi + rs - 1) // rs
                    copied += r1 - r0
                    if r1 - r0 < 64:
                        ids.extend(range(r0, r1))
                        if len(ids) >= batch:
                            flush()
                        continue
                    off = lo
                    while off < hi:
                        n = os.copy_file_range(fi, fo, hi - off, off, off)
                        if n <= 0:
                            break
                        off += n
                flush()
            finally:
                os.close(fi)
                if fo is not None:
                    os.close(fo)
            if os.stat(self.path).st_size < size:
                os.truncate(self.path, size)  # holes at the end count
        except OSError as e:
            if isinstance(e, EmbfsError):
                raise
            raise _oserror(e, f"{self}: copy from {src}", self.path) from None
        return copied

    def apply_delta(self, path, name=None):
        """Apply a delta to this table holding A's rows (a restore of A, or
        A's table): it then holds B's.  PATH is a .npz written by
        Mount.export_delta(A, B, ...), or a delta directory: the mount's
        .snapshots/A/.delta/B (Mount.delta_path) or a copy of it (cp -r
        --sparse=always), whose file NAME (default: this table's name) holds
        the rows at their offsets, .changed/NAME and .deleted/NAME their ids."""
        if self.read_only:
            raise EmbfsError(_errno.EROFS, f"{self}: a snapshot's table is read-only", self.path)
        if os.path.isdir(path):
            name = name or self.name
            view = os.path.join(path, name)
            ids = np.fromfile(os.path.join(path, ".changed", name), dtype="<u8").astype(np.int64)
            deleted = np.fromfile(os.path.join(path, ".deleted", name), dtype="<u8").astype(np.int64)
            size = os.stat(view).st_size
            rows = np.empty((len(ids), self.dim), self.dtype)
            rb = rows.view(np.uint8).reshape(len(ids), self.row_size)
            rs = self.row_size
            fd = os.open(view, os.O_RDONLY | os.O_CLOEXEC)
            try:  # one pread per run of consecutive ids
                brk = np.flatnonzero(np.diff(ids) != 1) + 1
                for lo, hi in zip(np.r_[0, brk], np.r_[brk, len(ids)]):
                    lo, hi = int(lo), int(hi)
                    got = os.preadv(fd, [_bytes_view(rb[lo:hi])], int(ids[lo]) * rs)
                    if got != (hi - lo) * rs:
                        raise EmbfsError(_errno.EIO, f"{view}: short read of rows {ids[lo]}..{ids[hi - 1]}",
                                         view)
            finally:
                os.close(fd)
            dim, dtype = self.dim, self.dtype_name
        else:
            with np.load(path) as z:
                ids, rows, deleted = z["ids"], z["rows"], z["deleted"]
                size, dim, dtype = int(z["size"]), int(z["dim"]), str(z["dtype"])
        if (dim, dtype) != (self.dim, self.dtype_name):
            raise BadArgument(f"{self}: a delta of {dim} x {dtype} rows cannot apply to "
                              f"{self.dim} x {self.dtype_name}", self.path)
        if len(ids):
            self.scatter(ids, rows)
        self.punch(deleted)
        os.truncate(self.path, size)

    def punch(self, ids):
        """Delete rows ids (fallocate PUNCH_HOLE, one call per run of ids)."""
        a = np.unique(np.asarray(ids, np.int64))
        if not len(a):
            return
        if a[0] < 0 or a[-1] > self.max_row:
            raise BadArgument(f"{self}: row id out of range in punch", self.path)
        brk = np.flatnonzero(np.diff(a) != 1) + 1
        starts = np.split(a, brk)
        fd = os.open(self.path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            for run in starts:
                off, ln = int(run[0]) * self.row_size, len(run) * self.row_size
                if _libc().fallocate(fd, 3, ctypes.c_int64(off), ctypes.c_int64(ln)):
                    e = ctypes.get_errno()
                    raise EmbfsError(e, f"{self}: punch of rows {run[0]}..{run[-1]}: {os.strerror(e)}",
                                     self.path)
        finally:
            os.close(fd)

    def fsync(self):
        """Make this table's writes durable."""
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
