"""embfs.mount: Mount, an embfs mount seen from Python: its tables (made,
listed, removed, opened as Table), its snapshots, restore, rollback and
deltas, the batch id, sync and stats; and each thread's request channel to
it (Mount._conn, an fd of .embfs/rows, see _conn).
"""
import errno as _errno
import os
import threading
import weakref

import numpy as np

from ._arrays import DTYPES
from ._conn import _Conn
from ._wire import _DELTA_HDR, _restore_report
from .errors import BadArgument, EmbfsError, _oserror


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
        from .table import Table  # here, not at the top: table.py imports Mount from this module
        return Table(self, name, snapshot=snapshot)

    __getitem__ = table

    def create(self, name, dim, dtype="f32", exist_ok=False, mode=0o644):
        """Make table NAME of DIM x DTYPE; with exist_ok, an existing table of
        that geometry is fine (another geometry is an error)."""
        from .table import Table  # here, not at the top: table.py imports Mount from this module
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
