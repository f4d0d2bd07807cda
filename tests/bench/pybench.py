#!/usr/bin/python3
"""pybench: gatherbench's batches through the embfs Python package.

    PYTHONPATH=TOP/python pybench.py [-w] [-r ROWSIZE] [-n ROWS] [-b BATCH] [-t THREADS]
                                     [-d SECONDS] [-s SEED] [-z THETA] [-I] FILE

The same ids as `gatherbench -m batch` with the same options: per thread
2^20 ids drawn before the clock from xoshiro256** seeded with
SEED * 1000003 + thread, Zipf(THETA) over ROWS ranks by rejection-inversion
and the rank -> row bijection of tests/bench/bench.h, cycled through in
batches of BATCH (duplicates kept).  Per batch one Table.gather(ids,
out=buffer) into a reused page-aligned buffer; with -w then one byte of
each row changed and Table.scatter(ids, buffer).  Python threads, each with
its own id stream (and, by embfs, its own fd of .embfs/rows).

Output, one line in gatherbench's format:
  pybench mode=python threads=1 batch=4096 write=0 ... rows_per_s=X p50_batch_us=Y p99_batch_us=Z
-I: no batches; per thread the line gatherbench -I prints (first ids and a
digest of the 2^20): equal lines mean equal id streams.
Exit 0 on success, 1 on a failed call or bad arguments.
"""
import argparse
import math
import os
import sys
import threading
import time

import numpy as np

import embfs

RING_BITS = 20
M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
U64 = np.uint64

# ---- the id stream of bench.h, vectorized --------------------------------------


def _splitmix_seed(seed):
    """rng_seed(): the four xoshiro256** state words from seed."""
    s = []
    x = seed & M64
    for _ in range(4):
        x = (x + GOLDEN) & M64
        z = x
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        s.append(z ^ (z >> 31))
    return s


def _step_words(s0, s1, s2, s3):
    """xoshiro256**'s state update (linear over GF(2)) on Python ints."""
    t = (s1 << 17) & M64
    s2 ^= s0
    s3 ^= s1
    s1 ^= s2
    s0 ^= s3
    s2 ^= t
    s3 = ((s3 << 45) | (s3 >> 19)) & M64
    return s0, s1, s2, s3


def _bits(words):
    """4 state words -> 256 bits (word 0's bit 0 first) as float64 0/1."""
    v = words[0] | words[1] << 64 | words[2] << 128 | words[3] << 192
    return np.array([(v >> i) & 1 for i in range(256)], np.float64)


def _words(bits):
    """(L, 256) 0/1 -> (L, 4) uint64 state words."""
    b = np.ascontiguousarray(bits.astype(np.uint8))
    return np.packbits(b, axis=1, bitorder="little").view("<u8")


_JUMP = {}


def _jump(k):
    """The GF(2) matrix of k state updates (k a power of two), float64 0/1."""
    if k not in _JUMP:
        cols = []
        for i in range(256):
            w = [(1 << i >> (64 * j)) & M64 for j in range(4)]
            cols.append(_bits(_step_words(*w)))
        m = np.array(cols).T
        p = 1
        while p < k:
            m = np.mod(m @ m, 2)  # exact: sums of at most 256 ones
            p *= 2
        _JUMP[k] = m
    return _JUMP[k]


def _rotl(x, k):
    return (x << U64(k)) | (x >> U64(64 - k))


def _outputs(state, lanes, steps):
    """The next lanes * steps outputs of the xoshiro256** stream at state
    (4 ints) in order, and the state after them.  Lane j starts steps * j
    updates on (a GF(2) jump) and all lanes step together."""
    jm = _jump(steps)
    starts = np.empty((lanes, 256))
    v = _bits(state)
    for j in range(lanes):
        starts[j] = v
        v = np.mod(jm @ v, 2)
    w = _words(starts)
    s0, s1, s2, s3 = (w[:, i].copy() for i in range(4))
    out = np.empty((steps, lanes), np.uint64)
    for i in range(steps):
        out[i] = _rotl(s1 * U64(5), 7) * U64(9)
        t = s1 << U64(17)
        s2 ^= s0
        s3 ^= s1
        s1 ^= s2
        s0 ^= s3
        s2 ^= t
        s3 = _rotl(s3, 45)
    end = [int(x[-1]) for x in (s0, s1, s2, s3)]
    return out.T.reshape(-1), end


# libm's functions, element by element: the C sampler's results to the bit
# (numpy's SIMD exp/log may differ from glibc's in the last place); C's
# inf where Python's math raises


def _cexp(x):
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _cexpm1(x):
    try:
        return math.expm1(x)
    except OverflowError:
        return math.inf


def _clog1p(x):
    return math.log1p(x) if x > -1 else -math.inf


_log = np.frompyfunc(math.log, 1, 1)
_exp = np.frompyfunc(_cexp, 1, 1)
_log1p = np.frompyfunc(_clog1p, 1, 1)
_expm1 = np.frompyfunc(_cexpm1, 1, 1)


def _f(a):
    return np.asarray(a, np.float64)


def _helper1(x):
    with np.errstate(divide="ignore", invalid="ignore"):
        big = _f(_log1p(x)) / x
    return np.where(np.abs(x) > 1e-8, big, 1 - x * (0.5 - x * (1.0 / 3 - 0.25 * x)))


def _helper2(x):
    with np.errstate(divide="ignore", invalid="ignore"):
        big = _f(_expm1(x)) / x
    return np.where(np.abs(x) > 1e-8, big, 1 + x * 0.5 * (1 + x * (1.0 / 3) * (1 + 0.25 * x)))


class Zipf:
    """bench.h's zipf_*: ranks 1..n with P(k) ~ k^-theta."""

    def __init__(self, n, theta):
        self.n, self.theta = float(n), float(theta)
        self.hx1 = self._H1(1.5) - 1
        self.hn = self._H1(self.n + 0.5)
        self.s = 2 - self._Hinv1(self._H1(2.5) - self._h1(2.0))

    # scalar versions (zipf_init)
    def _H1(self, x):
        lx = math.log(x)
        y = (1 - self.theta) * lx
        return (_cexpm1(y) / y if abs(y) > 1e-8 else 1 + y * 0.5 * (1 + y * (1.0 / 3) * (1 + 0.25 * y))) * lx

    def _h1(self, x):
        return _cexp(-self.theta * math.log(x))

    def _Hinv1(self, x):
        t = max(x * (1 - self.theta), -1.0)
        h = _clog1p(t) / t if abs(t) > 1e-8 else 1 - t * (0.5 - t * (1.0 / 3 - 0.25 * t))
        return _cexp(h * x)

    def ranks(self, out):
        """The ranks zipf_next() returns when its rng yields the outputs
        out (uint64) in turn: one candidate per output, the accepted ones."""
        unit = (out >> U64(11)).astype(np.float64) * 2.0 ** -53
        u = self.hn + unit * (self.hx1 - self.hn)
        t = u * (1 - self.theta)
        t = np.where(t < -1, -1.0, t)
        x = _f(_exp(_helper1(t) * u))
        k = np.floor(x + 0.5)
        k = np.where(k < 1, 1.0, np.where(k > self.n, self.n, k))
        ok = k - x <= self.s
        rest = np.flatnonzero(~ok)
        if rest.size:
            kr = k[rest]
            lx = _f(_log(kr + 0.5))
            big_h = _helper2((1 - self.theta) * lx) * lx
            small_h = _f(_exp(-self.theta * _f(_log(kr))))
            ok[rest] = u[rest] >= big_h - small_h
        return k[ok].astype(np.uint64)


_PERM_K = ((0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9), (0x94D049BB133111EB, 0xD6E8FEB86659FD93),
           (0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9), (0x27D4EB2F165667C5, 0xFF51AFD7ED558CCD))


class Perm:
    """bench.h's perm_*: a fixed bijection of [0, n) (rank - 1 -> row)."""

    def __init__(self, n):
        self.bits = 1
        while self.bits < 64 and (1 << self.bits) < n:
            self.bits += 1
        self.mask = U64(M64 if self.bits == 64 else (1 << self.bits) - 1)
        self.n = U64(n)
        self.h = U64(self.bits // 2 if self.bits // 2 > 0 else 1)

    def _mix(self, x):
        for a, m in _PERM_K:
            x = ((x + U64(a)) * U64(m)) & self.mask
            x ^= x >> self.h
        return x

    def rows(self, rank0):
        x = self._mix(rank0)
        out = np.flatnonzero(x >= self.n)
        while out.size:  # cycle-walk back into [0, n)
            x[out] = self._mix(x[out])
            out = out[x[out] >= self.n]
        return x


def id_ring(seed, nrows, theta, count=1 << RING_BITS):
    """gatherbench's ring of one thread: count rows of the stream seeded with seed."""
    z, pm = Zipf(nrows, theta), Perm(nrows)
    state = _splitmix_seed(seed)
    ranks, have, steps = [], 0, 1024
    while have < count:
        lanes = max(1, min(1024, -(-(count - have) * 17 // 16 // steps)))
        out, state = _outputs(state, lanes, steps)
        r = z.ranks(out)
        ranks.append(r)
        have += r.size
    with np.errstate(over="ignore"):
        return pm.rows(np.concatenate(ranks)[:count] - U64(1))


def ids_digest(ids):
    """gatherbench.c's ids_digest."""
    with np.errstate(over="ignore"):
        z = ids ^ (np.arange(ids.size, dtype=np.uint64) * U64(GOLDEN))
        z = (z ^ (z >> U64(30))) * U64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> U64(27))) * U64(0x94D049BB133111EB)
        z ^= z >> U64(31)
    return int(z.sum(dtype=np.uint64))


# ---- latency histogram of bench.h ----------------------------------------------

HIST_SUB = 32


def _hist_idx(v):
    if v < HIST_SUB:
        return v
    e = v.bit_length() - 1
    return (e - 4) * HIST_SUB + ((v >> (e - 5)) & (HIST_SUB - 1))


def _hist_val(i):
    if i < HIST_SUB:
        return float(i)
    e = i // HIST_SUB + 4
    lo = (1 << e) | ((i % HIST_SUB) << (e - 5))
    return float(lo) + float(1 << (e - 5)) / 2


def hist_pct(lat, pct):
    """hist_pct() over the latencies lat (ns): the same bucket midpoints."""
    h = {}
    for v in lat:
        i = _hist_idx(v)
        h[i] = h.get(i, 0) + 1
    want = max(1, math.ceil(len(lat) * pct / 100.0))
    acc = 0
    for i in sorted(h):
        acc += h[i]
        if acc >= want:
            return _hist_val(i)
    return 0.0


# ---- the run -------------------------------------------------------------------

def _aligned(shape, dtype):
    """A page-aligned C-contiguous array (as gatherbench's posix_memalign)."""
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.empty(n + 4096, np.uint8)
    off = -raw.ctypes.data % 4096
    return raw[off:off + n].view(dtype).reshape(shape)


class Worker(threading.Thread):
    def __init__(self, table, ring, a, go):
        super().__init__(daemon=True)
        self.table, self.ring, self.a, self.go = table, ring, a, go
        self.batches, self.lat, self.err = 0, [], None
        self.t_start = self.t_end = 0

    def run(self):
        t, a, ring = self.table, self.a, self.ring
        bsz, n = a.b, len(ring)
        out = _aligned((bsz, t.dim), t.dtype)
        first = out.view(np.uint8).reshape(bsz, t.row_size)[:, 0]
        try:
            t.gather(ring[:1])  # this thread's fd of .embfs/rows, opened before the clock
        except OSError as e:
            self.err = f"open: {e}"
        self.go.wait()
        if self.err:
            return
        lat = self.lat
        pos = b = 0
        t0 = time.monotonic_ns()
        now, deadline = t0, t0 + int(a.d * 1e9)
        try:
            while now < deadline:
                s = pos & (n - 1)
                ids = ring[s:s + bsz] if s + bsz <= n else np.concatenate((ring[s:], ring[:s + bsz - n]))
                pos += bsz
                t.gather(ids, out=out)
                if a.w:
                    first += np.uint8(1)
                    t.scatter(ids, out)
                t1 = time.monotonic_ns()
                lat.append(t1 - now)
                now = t1
                b += 1
        except OSError as e:
            self.err = f"batch {b}: {e}"
        self.batches, self.t_start, self.t_end = b, t0 * 1e-9, now * 1e-9


def parse(argv):
    p = argparse.ArgumentParser(prog="pybench", description="gatherbench's batches through import embfs")
    p.add_argument("-w", action="store_true", help="scatter each batch back, one byte of each row changed")
    p.add_argument("-r", type=int, default=256, help="row size (must be the table's)")
    p.add_argument("-n", type=int, default=4000000, help="rows (Zipf ranks)")
    p.add_argument("-b", type=int, default=4096, help="ids per batch")
    p.add_argument("-t", type=int, default=1, help="threads")
    p.add_argument("-d", type=float, default=3.0, help="seconds")
    p.add_argument("-s", type=int, default=1, help="seed")
    p.add_argument("-z", type=float, default=0.99, help="Zipf theta")
    p.add_argument("-I", action="store_true", help="print the id streams' digests and exit")
    p.add_argument("file", help="the table (MNT/NAME)")
    a = p.parse_args(argv)
    if a.r < 1 or a.n < 1 or not 1 <= a.b <= embfs.MAX_COUNT or not 1 <= a.t <= 64 or not a.d > 0 \
            or not a.z > 0 or a.s < 0:
        p.error("bad arguments (gatherbench's limits: 1 <= -b <= 65536, 1 <= -t <= 64, -d > 0, -z > 0)")
    return a


def main(argv):
    a = parse(argv)
    ring = 1 << RING_BITS
    seeds = [(a.s * 1000003 + t) & M64 for t in range(a.t)]
    if a.I:
        for t, seed in enumerate(seeds):
            d = id_ring(seed, a.n, a.z, ring)
            print(f"ids thread={t} seed={seed} n={ring} first={d[0]},{d[1]},{d[2]},{d[3]} "
                  f"digest={ids_digest(d):016x}")
        return 0
    try:
        table = embfs.Table(a.file)
    except (OSError, ValueError) as e:
        print(f"pybench: {e}", file=sys.stderr)
        return 1
    if table.row_size != a.r:
        print(f"pybench: {a.file}: rows of {table.row_size} B, not -r {a.r}", file=sys.stderr)
        return 1
    go = threading.Barrier(a.t)
    ws = [Worker(table, id_ring(seed, a.n, a.z, ring), a, go) for seed in seeds]
    for w in ws:
        w.start()
    for w in ws:
        w.join()
    err = [w.err for w in ws if w.err]
    if err:
        print(f"pybench: {err[0]}", file=sys.stderr)
        return 1
    batches = sum(w.batches for w in ws)
    el = max(w.t_end for w in ws) - min(w.t_start for w in ws)
    lat = [v for w in ws for v in w.lat]
    print(f"pybench mode=python threads={a.t} batch={a.b} write={int(a.w)} row_size={a.r} rows={a.n} "
          f"theta={a.z:.2f} batches={batches} secs={el:.3f} "
          f"rows_per_s={batches * a.b / el if el > 0 else 0.0:.0f} "
          f"p50_batch_us={hist_pct(lat, 50) / 1e3:.1f} p99_batch_us={hist_pct(lat, 99) / 1e3:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
