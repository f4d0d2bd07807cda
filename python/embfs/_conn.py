"""embfs._conn: the request channel, fds of MNT/.embfs/rows.

A request and its response belong to one fd, so every thread gets its own
(_Conn, opened by Mount on first use); a process made by fork() closes its
copies of the parent's and opens its own on first use.  close_all closes
every one of the process's.  _write_request writes a request whole and
_read_response reads a response into the caller's buffers, each looping
over short transfers.
"""
import os
import threading
import weakref

from ._wire import MAX_COUNT

_all_conns = weakref.WeakSet()
# An fd is taken from its _Conn under this lock and closed once: close_all,
# Mount.close and a thread's exit (its _Conn freed, __del__ in that thread)
# may race for one, and a second os.close could hit an fd reused meanwhile.
# Reentrant: a __del__ run by the garbage collector inside close() takes it.
_close_lock = threading.RLock()


def _after_fork():
    # the child's copies of the parent's fds: closed here (the parent's
    # stay open); the child's threads open their own on first use
    for c in list(_all_conns):
        try:
            c.close()
        except OSError:
            pass


os.register_at_fork(after_in_child=_after_fork)


def close_all():
    """Close every fd of .embfs/rows this process holds, of every mount and
    thread (each reopens on its next request): before unmounting."""
    for c in list(_all_conns):
        c.close()


class _Conn:
    """One thread's fd of MNT/.embfs/rows and its scratch buffer."""
    __slots__ = ("fd", "bits", "__weakref__")

    def __init__(self, path):
        self.fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        self.bits = bytearray(MAX_COUNT // 8)
        _all_conns.add(self)

    def close(self):
        with _close_lock:
            fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self):
        try:
            self.close()
        except OSError:
            pass


def _advance(bufs, n):
    """The buffers left after the first n bytes of bufs."""
    left = []
    for b in bufs:
        if n >= len(b):
            n -= len(b)
        else:
            left.append(b[n:])
            n = 0
    return left


def _write_request(c, parts, total):
    """Write the request PARTS (total bytes) on conn c; an OSError as is."""
    done = 0
    while True:
        # a short write means "send the rest": that write gets the error
        n = os.pwritev(c.fd, parts, done)
        done += n
        if done >= total:
            return
        parts = _advance(parts, n)


def _read_response(c, bufs, need):
    """Read NEED bytes of the response on conn c into the buffers BUFS: the
    bytes read, fewer than need if the response ended short."""
    got = 0
    while got < need:
        n = os.preadv(c.fd, bufs, got)
        if n <= 0:
            return got
        got += n
        bufs = _advance(bufs, n)
    return got
