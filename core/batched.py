"""Batched derivative passes run eagerly: tracers that carry a whole batch of seeds.

A Jacobian or a Hessian is a derivative pass run on many seeds at once, one per row.  The
pass runs once, as an eager pass (the rules read the traced point's values as arrays), with
seeds that are tracers of a :class:`BatchedBuilder`: each primitive a rule applies to one
of them reaches that builder's :meth:`~BatchedBuilder.bind` (``Primitive.__call__`` hands a
tracer to its builder), which evaluates it on the whole batch.  Parameters are normalised
on the logical shapes, as when traced, and every primitive accepts the extra leading batch
axis, so the values are those a recorded pass re-run batched computes, bit for bit, without
recording the pass first.

A seed of a vector input is a block of the identity basis: row b of it is the unit vector
e_(b - k) for the block's offset k (its position in the basis), so its batch is a band: one
diagonal of ones.  While a batched vector stays a sum of such diagonals, value[b, j] =
sum_k d_k[j] [b == j + k], only the diagonals d_k are computed (the folds below):
``safe_mul`` by fixed factors scales them, ``neg`` and ``add`` combine them (a difference is
traced as the sum of a negation), a unit-step slice (``index``) or its adjoint
(``index_put``) shifts their offsets.  A matrix product of a fixed matrix M with a band is a
scaled copy of M's columns (M @ d e_j = d M[:, j]) or rows.  A Hessian of a sum of neighbour
terms (Rosenbrock's) then runs on vectors of length n instead of n×n arrays, and the
Jacobian of ``tanh(A @ x)`` replaces a 500×500×500 matrix product with a 500×500 scaling.
Exact: a dense pass adds only zeros off the bands (or, where a factor holds an infinity,
makes nan of zeros, which ``safe_mul`` turns back into 0: a zero tangent contributes exactly
zero, as everywhere in gradcalc).  A band is written out in full where anything else reads
it, with +0 off its diagonals.
"""
from __future__ import annotations

import math
import weakref

import numpy as np

from . import primitives as P
from .alloc import keep_freed_memory
from .errors import ValueError_
from .tape import F64, F64_SCALAR, LARGE_BATCH, Tracer, _scalar_or_array, all_finite
from .transforms import basis


class _Values(dict):
    """A batched builder's values: a band is written out when first read whole.  (``owner``
    is a weak proxy: a reference back would make a cycle, and the pass's arrays would wait
    for the cycle collector instead of going when the pass ends.)"""

    __slots__ = ("owner",)

    def __missing__(self, var):
        return self.owner.write_out(var)


class BatchedBuilder:
    """Evaluates the primitives applied to its tracers on a batch of ``batch`` rows.

    Its tracers hold a batched value, of shape (batch,) + the logical shape (``values``), a
    band of diagonals (``bands``: {offset k: d_k}, row b holding d_k[j] at column j = b - k),
    or a fixed value (a constant a rule mixed with them).  ``base`` is the builder of the
    traced program: its element budget and position serve errors; ``what`` names the pass
    in a refusal.
    """

    def __init__(self, base, batch: int, what: str):
        self.base = base
        self.n = batch
        self.what = what
        self.values = _Values()
        self.values.owner = weakref.proxy(self)
        self.shapes: dict = {}
        self.bands: dict = {}
        self.batched: set = set()  # the variables that carry the batch (bands included)
        self.identity: dict = {}  # bands that are blocks of the identity basis: their offsets
        self._next = 0

    def _new(self, shape: tuple) -> Tracer:
        var = self._next
        self.shapes[var] = shape
        return self._batched(var)

    def seeds(self, shapes: list) -> list:
        """Tracers for the blocks of the identity basis of the given shapes (as transforms.basis
        makes them): a vector's block as a band of one diagonal of ones, others written out."""
        offsets, start = [], 0
        for s in shapes:
            offsets.append(start)
            start += math.prod(s)
        blocks = None  # transforms.basis, made if some block is not a vector's
        out = []
        for i, (s, k) in enumerate(zip(shapes, offsets)):
            if len(s) == 1:
                t = self._new(tuple(s))
                self.bands[t.var] = {k: np.ones(s[0])}
                self.identity[t.var] = k
            else:
                if blocks is None:
                    blocks = basis(shapes)
                t = self._new(tuple(s))
                self.values[t.var] = blocks[i]
            out.append(t)
        return out

    def const(self, value) -> Tracer:
        """A fixed operand: a rule's constant, or the traced point's value it mixes with a seed."""
        if not (value.__class__ is np.ndarray and value.dtype is F64 and value.ndim or value.__class__ is F64_SCALAR):
            value = F64_SCALAR(value) if type(value) is float else _scalar_or_array(value)
        var = self._next
        self._next = var + 1
        self.shapes[var] = value.shape
        self.values[var] = value
        return Tracer(self, var)

    def check_size(self, shape, what=None) -> None:
        """Refuse a batched value over the element budget before it is made (normalize calls
        this with a result's logical shape)."""
        size = math.prod(shape)
        self.base.check_size((self.n,) + tuple(shape),
                             what=f"{self.what} ({self.n} rows of {size}-element values)")

    def bind(self, prim, args: tuple, params: dict) -> Tracer:
        shapes = self.shapes
        n = len(args)
        plain = False
        if n == 2:  # (unrolled for one or two operands: the usual cases)
            ids = (args[0].var, args[1].var)
            plain = prim.plain is not None and not params and shapes[ids[0]] == shapes[ids[1]]
        elif n == 1:
            ids = (args[0].var,)
        else:
            ids = tuple([a.var for a in args])
        if not plain and not prim.trivial_params:
            params = prim.normalize([shapes[v] for v in ids], self, **params)
        bands, values = self.bands, self.values
        var = self._next
        if bands and not bands.keys().isdisjoint(ids):
            fold = _FOLDS.get(prim)
            if fold is not None and fold(self, var, ids, params):
                band = bands.get(var)
                shapes[var] = (len(next(iter(band.values()))),) if band is not None else values[var].shape[1:]
                return self._batched(var)
        xs = [values[v] for v in ids]
        try:
            value = prim.plain(*xs) if plain else prim.impl(*xs, **params)
        except np.linalg.LinAlgError as err:
            raise ValueError_(f"'{prim.name}': {str(err).lower()}") from None
        if value.size >= LARGE_BATCH:
            keep_freed_memory()  # as a recorded pass re-run batched does (see alloc.py)
            if value.size > self.base.max_elements:  # (a result larger than normalize checked)
                self.check_size(value.shape[1:])
        values[var] = value
        shapes[var] = value.shape[1:]
        return self._batched(var)

    def _batched(self, var: int) -> Tracer:
        """The tracer of var, the value just made (it carries the batch)."""
        self._next = var + 1
        self.batched.add(var)
        return Tracer(self, var)

    def write_out(self, var):
        """The band of var as a dense batch (a block of the identity: the basis's own columns)."""
        band = self.bands[var]  # (a KeyError: var is neither a value nor a band)
        m = self.shapes[var][0]
        self.check_size((m,))
        k = self.identity.get(var)
        if self.n * m >= LARGE_BATCH:
            keep_freed_memory()
        value = np.eye(self.n)[:, k:k + m] if k is not None else _band_dense(band, self.n)
        self.values[var] = value
        return value

    def rows(self, t):
        """t's batch as an array of shape (batch,) + t.shape (a value that does not depend on
        the seeds: the same in every row)."""
        if type(t) is Tracer and t.var in self.batched:
            return self.values[t.var]
        v = t.value if type(t) is Tracer else np.asarray(t)
        return np.broadcast_to(v, (self.n,) + v.shape)

    def finite_band(self, t) -> bool:
        """True when t is a band of finite diagonals: its rows hold no nan or inf (zeros off the
        diagonals), known without a look at batch × size values."""
        band = self.bands.get(t.var) if type(t) is Tracer else None
        return band is not None and all(map(all_finite, band.values()))


# The folds, one per primitive: each computes the band of out from the bands of its operands
# args (a matrix product: its rows, written out) and returns True, or returns False when its
# operands are not what it folds.  Bands are built by loops: a dict comprehension costs a
# function call, as much as the arithmetic on a band of one diagonal.

def _fold_safe_mul(b: BatchedBuilder, out: int, args: tuple, params: dict) -> bool:
    g, f = args
    bands = b.bands
    if g not in bands:
        g, f = f, g
    if g not in bands or f in b.batched:
        return False
    band, c = bands[g], b.values[f]
    m = len(next(iter(band.values())))
    if c.shape not in ((), (1,), (m,)):
        return False  # the factor would broadcast the vector to a larger shape
    made = {}
    for k, d in band.items():
        made[k] = P.safe_multiply(d, c)
    bands[out] = made
    return True


def _fold_neg(b: BatchedBuilder, out: int, args: tuple, params: dict) -> bool:
    band = b.bands.get(args[0])
    if band is None:
        return False
    made = {}
    for k, d in band.items():
        made[k] = -d
    b.bands[out] = made
    return True


def _fold_add(b: BatchedBuilder, out: int, args: tuple, params: dict) -> bool:
    x, y = args
    bands = b.bands
    if x not in bands or y not in bands or params:
        return False  # params: operands of unequal rank broadcast
    if len(next(iter(bands[x].values()))) != len(next(iter(bands[y].values()))):
        return False  # equal rank, unequal length: a length-1 vector broadcasts, not a band
    made = dict(bands[x])
    for k, d in bands[y].items():
        made[k] = made[k] + d if k in made else d
    bands[out] = made
    return True


def _unit_slice(params: dict, size_param: str):
    """(start, stop) of a one-axis, unit-step slice in an index's params, or None."""
    idx = params["idx"]
    if len(idx) != 1 or type(idx[0]) is not slice:
        return None
    start, stop, step = idx[0].indices(params[size_param][0])
    return (start, max(start, stop)) if step == 1 else None


def _fold_index(b: BatchedBuilder, out: int, args: tuple, params: dict) -> bool:
    band = b.bands.get(args[0])
    span = None if band is None else _unit_slice(params, "xshape")
    if span is None:
        return False
    start, stop = span  # column j of the slice is column start + j of the operand
    made = {}
    for k, d in band.items():
        made[k + start] = d[start:stop]
    b.bands[out] = made
    return True


def _fold_index_put(b: BatchedBuilder, out: int, args: tuple, params: dict) -> bool:
    band = b.bands.get(args[0])
    span = None if band is None else _unit_slice(params, "shape")
    if span is None:
        return False
    start, stop = span  # column j of the operand lands at column start + j
    size = params["shape"][0]
    made = {}
    for k, d in band.items():
        placed = np.zeros(size, dtype=d.dtype)
        placed[start:stop] = d
        made[k - start] = placed
    b.bands[out] = made
    return True


def _fold_matmul(b: BatchedBuilder, out: int, args: tuple, params: dict) -> bool:
    x, y = args
    nda, ndb = params["nda"], params["ndb"]
    bands, values, batched = b.bands, b.values, b.batched
    if y in bands and nda == 2 and ndb == 1 and x not in batched and values[x].ndim == 2:
        m, band = values[x].T, bands[y]  # row r: sum_k d_k[r - k] M[:, r - k]
    elif x in bands and nda == 1 and ndb == 2 and y not in batched and values[y].ndim == 2:
        m, band = values[y], bands[x]  # row r: sum_k d_k[r - k] M[r - k, :]
    else:
        return False
    values[out] = _band_rows(band, m, b.n)
    return True


def _fold_copy(b: BatchedBuilder, out: int, args: tuple, params: dict) -> bool:
    band = b.bands.get(args[0])
    if band is None:
        return False
    b.bands[out] = band
    return True


_FOLDS = {P.safe_mul: _fold_safe_mul, P.neg: _fold_neg, P.add: _fold_add, P.copy: _fold_copy,
          P.index: _fold_index, P.index_put: _fold_index_put, P.matmul: _fold_matmul}


def _band_dense(band: dict, n: int):
    """The (n, m) array whose rows r hold d_k[j] at column j = r - k, for each diagonal k."""
    m = len(next(iter(band.values())))
    out = np.zeros((n, m), dtype=np.result_type(*band.values()))
    flat = out.reshape(-1)
    for k, d in band.items():
        lo, hi = max(0, -k), min(m, n - k)  # columns j with a row r = j + k in range
        if lo < hi:
            first = (lo + k) * m + lo
            flat[first:first + (hi - lo - 1) * (m + 1) + 1:m + 1] = d[lo:hi]
    return out


def _band_rows(band: dict, m, n: int):
    """Rows r = sum_k d_k[r - k] m[r - k]: a band's rows times the rows of m."""
    if len(band) == 1 and 0 in band and m.shape[0] == n:
        return P.safe_multiply(m, band[0][:, None])
    out = np.zeros((n, m.shape[1]), dtype=np.result_type(m, *band.values()))
    for k, d in band.items():
        lo, hi = max(0, -k), min(m.shape[0], n - k)
        if lo < hi:
            out[lo + k:hi + k] += P.safe_multiply(m[lo:hi], d[lo:hi, None])
    return out
