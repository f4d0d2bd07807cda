"""embfs.init: Init, the deterministic initial values of rows never
written (a gather's init=, embfs.torch's modules), a function of (seed, row
id, column) only, by a splitmix64 hash (_mix).
"""
import numpy as np

from ._arrays import DTYPES, f32_to_bf16
from .errors import BadArgument


def _mix(x):
    """splitmix64 finalizer over a uint64 array (wraps mod 2^64)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


class Init:
    """Deterministic initial values of rows never written: a function of
    (seed, row id, column) only, so any process, order or batch gives the
    same row.  Init.uniform(a, b, seed) or Init.normal(mean, std, seed);
    `cols` (default: all) limits it to the first cols columns, the rest
    are zero (e.g. optimizer state)."""

    def __init__(self, kind, p, q, seed=0, cols=None, fill=0.0):
        if kind not in ("uniform", "normal", "constant"):
            raise BadArgument(f"init kind {kind!r}: uniform, normal or constant")
        self.kind, self.p, self.q, self.seed, self.cols, self.fill = kind, float(p), float(q), int(seed), cols, fill

    @classmethod
    def uniform(cls, a=-0.05, b=0.05, seed=0, cols=None, fill=0.0):
        return cls("uniform", a, b, seed, cols, fill)

    @classmethod
    def normal(cls, mean=0.0, std=0.01, seed=0, cols=None, fill=0.0):
        return cls("normal", mean, std, seed, cols, fill)

    @classmethod
    def constant(cls, value=0.0, cols=None, fill=0.0):
        return cls("constant", value, 0, 0, cols, fill)

    def __repr__(self):
        return f"Init({self.kind}, {self.p}, {self.q}, seed={self.seed}, cols={self.cols})"

    def _u01(self, ids, cols, salt):
        with np.errstate(over="ignore"):
            base = _mix(ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
                        + np.uint64((self.seed * 2 + salt) & 0xFFFFFFFFFFFFFFFF))
            x = _mix(base[:, None] + np.arange(1, cols + 1, dtype=np.uint64)[None, :]
                     * np.uint64(0xD1B54A32D192ED03))
        return ((x >> np.uint64(11)).astype(np.float64) + 0.5) * (1.0 / (1 << 53))

    def values(self, ids, dim, dtype=np.float32):
        """Rows for ids (int array) of dim columns."""
        ids = np.asarray(ids, np.int64).reshape(-1)
        k = dim if self.cols is None else min(self.cols, dim)
        out = np.full((len(ids), dim), self.fill, np.float64)
        if self.kind == "uniform":
            out[:, :k] = self.p + (self.q - self.p) * self._u01(ids, k, 0)
        elif self.kind == "normal":
            u1, u2 = self._u01(ids, k, 0), self._u01(ids, k, 1)
            out[:, :k] = self.p + self.q * np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)
        else:
            out[:, :k] = self.p
        if np.dtype(dtype) == DTYPES["bf16"]:
            return f32_to_bf16(out.astype(np.float32))
        return out.astype(dtype)

    def __call__(self, ids, table):
        return self.values(ids, table.dim, table.dtype if table.dtype_name != "bf16" else DTYPES["bf16"])

