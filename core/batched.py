"""Batched derivative passes run eagerly: tracers that carry a whole batch of seeds.

A Jacobian or a Hessian is a derivative pass run on many seeds at once, one per row.  The
pass runs once, as an eager pass (the rules read the traced point's values as arrays), with
seeds that are tracers of a :class:`BatchedBuilder`: each primitive a rule applies to one
of them reaches that builder's :meth:`~BatchedBuilder.bind` (``Primitive.__call__`` hands a
tracer to its builder), which evaluates it on the whole batch.  Parameters are normalised
on the logical shapes, as when traced, and every primitive accepts the extra leading batch
axis, so the values are those a recorded pass re-run batched computes, bit for bit, without
recording the pass first.  A tracer's ``var`` is a :class:`_Slot` that holds its value, so
that a value goes as soon as the pass drops the tracer (as a recorded pass re-run batched
frees each value after its last use).

A seed of an input is a block of the identity basis: row b of it is the unit vector
e_(b - k) for the block's offset k (its position in the basis), so its batch is a band: one
diagonal of ones, of the input's shape (column j is the flat index: a scalar's band has one
column).  While a batched value stays a sum of such diagonals, value[b, j] =
sum_k d_k[j] [b == j + k], only the diagonals d_k are computed (the folds below):
``safe_mul`` by fixed factors scales them, ``neg`` and ``add`` combine them (a difference is
traced as the sum of a negation), a unit-step slice (``index``) or its adjoint
(``index_put``) shifts a vector's offsets.  A matrix product of a fixed matrix M with a band is a
scaled copy of M's columns (M @ d e_j = d M[:, j]) or rows.  A Hessian of a sum of neighbour
terms (Rosenbrock's) then runs on vectors of length n instead of n×n arrays, and the
Jacobian of ``tanh(A @ x)`` replaces a 500×500×500 matrix product with a 500×500 scaling.
Exact: a dense pass adds only zeros off the bands (or, where a factor holds an infinity,
makes nan of zeros, which ``safe_mul`` turns back into 0: a zero tangent contributes exactly
zero, as everywhere in gradcalc).  A band is written out in full where anything else reads
it, with +0 off its diagonals, where a dense pass would have made -0 of a negative factor
times a seed's 0: an entry no tangent reaches is +0 whatever the input's shape (a scalar
input's and a 1-element vector's Hessians agree bit for bit).
"""
from __future__ import annotations

import math
import operator
import sys

import numpy as np

from . import primitives as P
from .alloc import keep_freed_memory
from .errors import ValueError_
from .transforms import fit_to_shape
from .tape import (COUNTS_REFERENCES, F64, F64_SCALAR, LARGE_BATCH, NO_PARAMS, Tracer, _scalar_or_array, all_finite,
                   distinct_index, has_nan, squared_norm)

_new_object = object.__new__


class _Slot:
    """What a tracer of a :class:`BatchedBuilder` stands for (its ``var``): ``value``, an array
    of shape (batch,) + ``shape`` when ``batched`` (None for a band not written out yet), or
    a fixed value; ``band``, {offset k: d_k} for a band of diagonals (row b holds d_k[j] at
    column j = b - k); ``offset``, k for a block of the identity basis."""

    __slots__ = ("value", "shape", "band", "batched", "offset", "made", "loose", "zeroed")

    def __init__(self, value, shape: tuple, band=None, batched: bool = True, offset=None):
        self.value, self.shape, self.band, self.batched, self.offset = value, shape, band, batched, offset
        # made: a fold that writes in place (add_at's, index_update's) made value, nothing else
        # holds it; loose: where it may still hold a -0.0 that a sum's +0.0 would change (an
        # index; EVERYWHERE; None: nowhere), see _jvp_add_at
        self.made, self.loose = False, None
        # (record, depth, loose): value not made yet, a copy of the record's rows with zeros on
        # its selections of this depth or less (see _zeroed_later), and the loose it will have
        self.zeroed = None


class _Shapes:
    """``builder.shapes[var]`` (what Tracer.shape reads): a slot's logical shape."""

    __slots__ = ()
    # slot.shape, read in C (no Python frame: the passes read a shape per rule they run)
    __getitem__ = staticmethod(operator.attrgetter("shape"))


_SHAPES = _Shapes()


class _Values:
    """``builder.values[var]`` (what Tracer.value reads): a slot's value, a band written out
    on its first read.  It holds what a write-out needs, not the builder (a reference back
    would make a cycle, and the pass's arrays would wait for the cycle collector)."""

    __slots__ = ("n", "base", "what")

    def __init__(self, n: int, base, what: str):
        self.n, self.base, self.what = n, base, what

    def __getitem__(self, slot: _Slot):
        value = slot.value
        if value is None:
            value = slot.value = self.write_out(slot)
        return value

    def check_size(self, shape) -> None:
        """Refuse a batched value of logical shape ``shape`` over the element budget."""
        count = self.n if self.n > 1 else 1  # (the base's count: an axis of length 0 counts as 1)
        for d in shape:
            if d > 1:
                count *= d
        if count <= self.base.max_elements:
            return  # (the usual case: no message to word)
        size = math.prod(shape)
        self.base.check_size((self.n,) + tuple(shape),
                             what=f"{self.what} ({self.n} rows of {size}-element values)")

    def write_out(self, slot: _Slot):
        """A band as a dense batch (a block of the identity: the basis's own columns), or the
        rows of a slot whose zeros were left for later (see _zeroed_later)."""
        if slot.zeroed is not None:
            return _zeroed_now(slot)
        shape = slot.shape
        m = math.prod(shape)
        self.check_size(shape)
        if self.n * m >= LARGE_BATCH:
            keep_freed_memory()  # as a recorded pass re-run batched does (see alloc.py)
        k = slot.offset
        rows = np.eye(self.n)[:, k:k + m] if k is not None else _band_dense(slot.band, self.n, m)
        return rows if len(shape) == 1 else rows.reshape((self.n,) + shape)


def _fixed(value) -> _Slot:
    """The slot of a fixed value (see BatchedBuilder.const)."""
    value = _as_kept(value)
    return _Slot(value, value.shape, None, False)


def _as_kept(value):
    """A fixed value as the tape keeps values: a float64 array with axes, or a NumPy scalar."""
    if not (value.__class__ is np.ndarray and value.dtype is F64 and value.ndim or value.__class__ is F64_SCALAR):
        value = F64_SCALAR(value) if type(value) is float else _scalar_or_array(value)
    return value


def _batched(value, shape: tuple) -> _Slot:
    """The slot of a batched value computed in full (bands are made as _Slot(None, shape, band))."""
    return _Slot(value, shape)


class BatchedBuilder:
    """Evaluates the primitives applied to its tracers on a batch of ``batch`` rows.

    Its tracers stand for batched values, bands of diagonals, or fixed values (the constants
    and traced values a rule mixes with them); see :class:`_Slot`.  ``base`` is the builder of
    the traced program: its element budget and position serve errors; ``what`` names the
    pass in a refusal.
    """

    def __init__(self, base, batch: int, what: str):
        self.base = base
        self.n = batch
        self.values = _Values(batch, base, what)
        self.shapes = _SHAPES

    def seeds(self, shapes: list) -> list:
        """Tracers for the blocks of the identity basis of the given shapes (block i: rows
        start_i ... start_i + size_i - 1 of the n×n identity), each a band of one diagonal of
        ones of the input's shape (its column j is the flat index j): an entry of a Jacobian or
        a Hessian that no tangent reaches is +0 whatever the input's shape."""
        out, start = [], 0
        for s in shapes:
            s = tuple(s)
            ones = np.empty(s)
            ones.fill(1.0)  # (np.ones, without its Python frame)
            out.append(Tracer(self, _Slot(None, s, {start: ones}, offset=start)))
            start += math.prod(s)
        return out

    def dense(self, rows: np.ndarray) -> Tracer:
        """A seed given row by row: rows has shape (batch,) + the seeded value's shape (random
        directions, the cotangents of a dot-product test)."""
        rows = np.asarray(rows, dtype=np.float64)
        return Tracer(self, _batched(rows, rows.shape[1:]))

    def const(self, value) -> Tracer:
        """A fixed operand: a rule's constant, or the traced point's value it mixes with a seed."""
        return Tracer(self, _fixed(value))

    def check_size(self, shape, what=None) -> None:
        """Refuse a batched value over the element budget before it is made (normalize calls
        this with a result's logical shape)."""
        self.values.check_size(shape)

    def bind(self, prim, args: tuple, params: dict) -> Tracer:
        n = len(args)
        plain = False
        if n == 2:  # (unrolled for one or two operands: the usual cases)
            x, y = args[0].var, args[1].var
            slots = (x, y)
            if prim.plain is not None and not params and x.shape == y.shape:
                plain = True
            elif not prim.trivial_params:
                params = prim.normalize([x.shape, y.shape], self, **params)
        elif n == 1:
            x = args[0].var
            slots = (x,)
            if not prim.trivial_params:
                params = prim.normalize([x.shape], self, **params)
        else:
            slots = tuple([a.var for a in args])
            if not prim.trivial_params:
                params = prim.normalize([s.shape for s in slots], self, **params)
        fold = _FOLDS.get(prim)
        if fold is not None:
            made = fold(self, slots, params)
            if made is not None:
                return Tracer(self, made)
        values = self.values
        if n == 2:
            xs = (values[x], values[y])
        elif n == 1:
            xs = (values[x],)
        else:
            xs = [values[s] for s in slots]
        try:
            value = prim.plain(*xs) if plain else prim.impl(*xs, **params)
        except np.linalg.LinAlgError as err:
            raise ValueError_(f"'{prim.name}': {str(err).lower()}") from None
        if value.size >= LARGE_BATCH:
            keep_freed_memory()  # as a recorded pass re-run batched does (see alloc.py)
            if value.size > self.base.max_elements:  # (a result larger than normalize checked)
                self.check_size(value.shape[1:])
        return Tracer(self, _batched(value, value.shape[1:]))

    def rows(self, t):
        """t's batch as an array of shape (batch,) + t.shape (a value that does not depend on
        the seeds: the same in every row)."""
        if type(t) is Tracer and t.var.batched:
            return self.values[t.var]
        v = t.value if type(t) is Tracer else np.asarray(t)
        return np.broadcast_to(v, (self.n,) + v.shape)

    def finite_band(self, t) -> bool:
        """True when t is a band of finite diagonals: its rows hold no nan or inf (zeros off the
        diagonals), known without a look at batch × size values."""
        band = t.var.band if type(t) is Tracer else None
        if band is None:
            return False
        # One look at every diagonal at once (all_finite's for a vector, summed): the sum of their
        # sums of squares is finite when no entry is nan or inf; each is looked at on its own only
        # when it is not (or overflowed).
        total = 0.0
        for d in band.values():
            if d.dtype is not F64 or d.ndim != 1:  # (a matrix's d.dot(d) is its product)
                return all(map(all_finite, band.values()))
            total += squared_norm(d)
        return math.isfinite(total) or all(map(all_finite, band.values()))


# The folds, one per primitive: each makes the slot of the result from its operands' slots
# (a band; a matrix product: its rows, written out), or returns None when its operands are not
# what it folds.  Bands are built by loops: a dict comprehension costs a function call, as
# much as the arithmetic on a band of one diagonal.

def _fold_safe_mul(b: BatchedBuilder, args: tuple, params: dict):
    g, f = args
    if g.band is None:
        g, f = f, g
    if g.band is None or f.batched:
        return None
    c = f.value
    if not _scales(c.shape, g.shape):
        return None
    return _Slot(None, g.shape, _scaled(g.band, c))


def _scales(factor: tuple, shape: tuple) -> bool:
    """Whether a factor of this shape times a band of that shape is a band of that shape: the
    factor does not broadcast the band to a larger shape (a scalar's band times a 1-element
    vector would be a vector)."""
    return factor == shape or factor == () or factor == (1,) and shape != ()


def _scaled(band: dict, c) -> dict:
    """A band's diagonals times a fixed factor c (safe_mul's product, one diagonal at a time)."""
    made = {}
    for k, d in band.items():
        made[k] = P.safe_multiply(d, c)
    return made


def _summed(x: dict, y: dict) -> dict:
    """The diagonals of two bands of one shape added (x's, then y's, where both have one)."""
    made = dict(x)
    for k, d in y.items():
        made[k] = made[k] + d if k in made else d
    return made


def _fold_neg(b: BatchedBuilder, args: tuple, params: dict):
    x = args[0]
    if x.band is None:
        return None
    made = {}
    for k, d in x.band.items():
        made[k] = -d
    return _Slot(None, x.shape, made)


def _fold_add(b: BatchedBuilder, args: tuple, params: dict):
    x, y = args
    if x.band is None or y.band is None or params or x.shape != y.shape:
        return None  # params: operands of unequal rank broadcast; unequal length: one of length 1 does
    return _Slot(None, x.shape, _summed(x.band, y.band))


def _unit_slice(params: dict, size_param: str):
    """(start, stop) of a unit-step slice of a vector in an index's params, or None."""
    idx = params["idx"]
    if len(idx) != 1 or type(idx[0]) is not slice or len(params[size_param]) != 1:
        return None
    start, stop, step = idx[0].indices(params[size_param][0])
    return (start, max(start, stop)) if step == 1 else None


def _fold_index(b: BatchedBuilder, args: tuple, params: dict):
    x = args[0]
    if x.band is None:
        return None
    span = _unit_slice(params, "xshape")
    if span is None:
        return _fold_gather(x, params)
    start, stop = span  # column j of the slice is column start + j of the operand
    made = {}
    for k, d in x.band.items():
        made[k + start] = d[start:stop]
    return _Slot(None, (stop - start,), made)


def _fold_index_put(b: BatchedBuilder, args: tuple, params: dict):
    x = args[0]
    if x.band is None:
        return None
    span = _unit_slice(params, "shape")
    if span is None:
        return _fold_scatter(x, params)
    start, stop = span  # column j of the operand lands at column start + j
    size = params["shape"][0]
    made = {}
    for k, d in x.band.items():
        placed = np.zeros(size, dtype=d.dtype)
        placed[start:stop] = d
        made[k - start] = placed
    return _Slot(None, (size,), made)


#: The most distinct moves (see _moves) a gather or scatter of a band may make: each of a band's
#: diagonals becomes one diagonal a move.
MOST_MOVES = 4


def _moves(params: dict, size_param: str):
    """For an index of a vector by one integer array p (roll's, a shifted take's): p and, for
    each distinct move d = p[j] - j (roll by s: -s and n - s), the columns j that move so;
    None for other indices, or more than MOST_MOVES moves."""
    idx = params["idx"]
    if len(idx) != 1 or len(params[size_param]) != 1:
        return None
    p = idx[0]
    if p.__class__ is not np.ndarray or p.ndim != 1 or p.dtype.kind not in "iu" or not p.size:
        return None
    delta = p - np.arange(p.size)
    first = delta[0]
    if (delta == first).all():  # (the usual case: one move)
        return p, {int(first): None}
    found = np.unique(delta)
    if found.size > MOST_MOVES:
        return None
    return p, {int(d): delta == d for d in found}


def _placed(made: dict, k: int, diagonal, columns) -> None:
    """Diagonal k of a band made column by column: columns (a mask, or None for all) come from
    diagonal, which holds +0 elsewhere; where k has some already, their columns are others
    (a column moves once), so the two are merged, not summed (a -0.0 stays)."""
    prev = made.get(k)
    made[k] = diagonal if prev is None else np.where(columns, diagonal, prev)


def _fold_gather(x: _Slot, params: dict):
    """x[p] of a band, p an integer array that moves each column by one of a few offsets (see
    _moves): column j reads column p[j], whose diagonal k lies on row p[j] + k, diagonal
    k + p[j] - j of the result; so each diagonal splits by move, +0 on the columns that move
    otherwise.  The same values as the rules' gather of the written-out rows."""
    found = _moves(params, "xshape")
    if found is None:
        return None
    p, moves = found
    made: dict = {}
    for k, d in x.band.items():
        picked = d[p]
        for move, columns in moves.items():
            _placed(made, k + move, picked if columns is None else np.where(columns, picked, 0.0), columns)
    return _Slot(None, (p.size,), made)


def _fold_scatter(x: _Slot, params: dict):
    """index_put(g, idx=(p,)) of a band (a gather's adjoint), p distinct positions in a vector of
    params["shape"] that move by a few offsets (see _moves): column j of g lands at column p[j],
    its diagonal k on row j + k, diagonal k - (p[j] - j) of the result.  The same values as the
    rules' scatter of the written-out rows (no position is written twice)."""
    found = _moves(params, "shape")
    if found is None or not distinct_index(params["idx"]):
        return None
    p, moves = found
    size = params["shape"][0]
    made: dict = {}
    for k, d in x.band.items():
        for move, columns in moves.items():
            placed = np.zeros(size, dtype=d.dtype)
            if columns is None:
                placed[p] = d
                _placed(made, k - move, placed, None)
            else:
                placed[p[columns]] = d[columns]
                landed = np.zeros(size, dtype=bool)
                landed[p[columns]] = True
                _placed(made, k - move, placed, landed)
    return _Slot(None, (size,), made)


def _fold_matmul(b: BatchedBuilder, args: tuple, params: dict):
    x, y = args
    nda, ndb = params["nda"], params["ndb"]
    if y.band is not None and nda == 2 and ndb == 1 and not x.batched and x.value.ndim == 2:
        m, band = x.value.T, y.band  # row r: sum_k d_k[r - k] M[:, r - k]
    elif x.band is not None and nda == 1 and ndb == 2 and not y.batched and y.value.ndim == 2:
        m, band = y.value, x.band  # row r: sum_k d_k[r - k] M[r - k, :]
    else:
        return None
    value = _band_rows(band, m, b.n)
    return _batched(value, value.shape[1:])


def _fold_copy(b: BatchedBuilder, args: tuple, params: dict):
    x = args[0]
    return None if x.band is None else _Slot(None, x.shape, x.band)


_FOLDS = {P.safe_mul: _fold_safe_mul, P.neg: _fold_neg, P.add: _fold_add, P.copy: _fold_copy,
          P.index: _fold_index, P.index_put: _fold_index_put, P.matmul: _fold_matmul}


# Equations whose JVP rules, on bands, come down to the folds above (JVP_FOLDS,
# handed to transforms.forward as its fold=): each entry takes the operands' tangents ts (None
# for an operand without one), the equation's parameters (normalised when traced, as the
# rules' calls would normalise them again), its operands' variables and the tape's values, and
# makes what the rules' calls make (the same folds, in the same order, on the same operands)
# where each tangent is a band, without the rule, the primitive's call and a constant's tracer;
# None otherwise, and the rules run.  tests/test_batched.py checks each against the rules.

def _is_band(t) -> bool:
    """Whether t is a tracer of a BatchedBuilder whose value is a band."""
    return t.__class__ is Tracer and t.var.__class__ is _Slot and t.var.band is not None


def _tracer(b: BatchedBuilder, slot: _Slot) -> Tracer:
    """Tracer(b, slot), without a call of its __init__."""
    r = _new_object(Tracer)
    r.builder, r.var = b, slot
    return r


def _jvp_of(fold):
    """neg, index, index_put: the rule applies the primitive to the tangent with the equation's
    own parameters."""
    def jvp(ts, params, args, values, dying=()):
        t = ts[0]
        if _is_band(t):
            made = fold(t.builder, (t.var,), params)
            if made is not None:
                return _tracer(t.builder, made)
        return None
    return jvp


def _jvp_copy(ts, params, args, values, dying=()):
    t = ts[0]  # (the rule returns the tangent itself)
    return t if _is_band(t) else None


def _jvp_add(ts, params, args, values, dying=()):
    t0, t1 = ts
    if t0 is None or t1 is None:  # (each rule returns its tangent itself; forward fits it)
        return _jvp_copy((t1 if t0 is None else t0,), params, args, values)
    if t0.__class__ is not Tracer or t1.__class__ is not Tracer or params:
        return None  # (params: operands of unequal rank, whose tangents broadcast)
    b = t0.builder
    made = _fold_add(b, (t0.var, t1.var), params) if t0.var.__class__ is t1.var.__class__ is _Slot else None
    return None if made is None else _tracer(b, made)


def _jvp_product(ts, params, args, values, dying=()):
    """mul, safe_mul: each tangent times the other operand's value (safe_mul(t, factor)), summed
    (safe_mul's fold, then add's, on the diagonals)."""
    t0, t1 = ts
    for t in ts:
        if t is not None and not _is_band(t):
            return None
    b = (t1 if t0 is None else t0).builder
    total = shape = None
    for t, other in ((t0, args[1]), (t1, args[0])):
        if t is None:
            continue
        g = t.var
        c = _as_kept(values[other])
        if c.shape != g.shape:
            if not _scales(c.shape, g.shape):
                return None
            b.check_size(g.shape)  # (what the rule's call checks, normalising its parameters)
        if total is None:
            total, shape = _scaled(g.band, c), g.shape
        elif g.shape == shape:
            total = _summed(total, _scaled(g.band, c))
        else:
            return None  # (add's fold: tangents that broadcast against each other)
    return _tracer(b, _Slot(None, shape, total))


def _jvp_pow_const(ts, params, args, values, dying=()):
    """x^p for a constant p: the rule's safe_mul(t, x + x if p == 2 else p * pow_const(x, p=p - 1)),
    its factor computed as the rule computes it on the operand's value (p = 1: the tangent itself;
    p = 0: the rule, whose zeros are no band)."""
    t = ts[0]
    p = params["p"]
    if p == 0 or not _is_band(t):
        return None
    if p == 1:
        return t
    x = values[args[0]]
    g = t.var
    c = _as_kept(x + x if p == 2 else p * P.pow_const(x, p=p - 1))
    if not _scales(c.shape, g.shape):
        return None
    return _tracer(t.builder, _Slot(None, g.shape, _scaled(g.band, c)))


def _jvp_add_at(ts, params, args, values, dying=()):
    """add_at(acc, v): the rules' t_acc + index_put(t_v) (dense rows), written into t_acc's rows
    where this fold made them and nothing reads them after (a cotangent summed over the reads
    of a loop: O(batch x selection) a read, not O(batch x size)).

    Bit for bit: that sum adds +0.0 off the selection, which makes -0.0 +0.0 and leaves all
    else (a nan's bits included), so each array the fold makes holds the sum exactly, and
    ``loose`` records where it may still hold a -0.0 the next sum's +0.0 would change: the
    selection just written (everywhere else it was added +0.0 already: the copy, A + 0.0, that
    starts each array, or an earlier sum).  As transforms._scatter, on the eager backward pass.
    Where both the selection and t_v hold a nan, which nan a sum keeps depends on where NumPy's
    vector loop meets them: the rules run."""
    t_acc, t_v = ts
    if t_acc is None or t_v is None or t_acc.__class__ is not Tracer or t_v.__class__ is not Tracer:
        return None
    acc = t_acc.var
    if acc.__class__ is not _Slot:
        return None
    b = t_acc.builder
    if acc.band is not None:  # (what the rules make of bands: index_put's fold, then add's)
        put = _fold_index_put(b, (t_v.var,), params) if _is_band(t_v) else None
        made = None if put is None else _fold_add(b, (acc, put), NO_PARAMS)
        return None if made is None else _tracer(b, made)
    if not acc.batched:
        return None
    rows, v = b.values[acc], b.rows(t_v)  # (rows: a slot's whose zeros were left for later, made now)
    if rows.dtype is not F64 or v.dtype is not F64:
        return None
    site = (slice(None),) + params["idx"]
    region = rows[site]
    v = P.put_value(v, params["idx"])
    if has_nan(v) and has_nan(region):
        return None
    total = region + v  # (before the +0.0 below: on the selection the sum adds v alone)
    del region, rows  # (a view of the rows, and a name for them: see _writable)
    rows = _summed_rows(ts, args[0], dying)
    rows[site] = total
    return _made(b, rows, acc.shape, params["idx"])


def _jvp_index_update(ts, params, args, values, dying=()):
    """index_update(x, v) at integers and slices (`z[i] = e` in a loop, and its backward pass's
    g with the selection zeroed): the rules' index_update(t_x, 0.0) + index_update(zeros, t_v)
    (dense rows), written into t_x's rows where this fold or add_at's made them and nothing
    reads them after: a loop writing z[i] cost O(batch x size) a step.

    Bit for bit: with t_v, the rules' sum adds +0.0 off the selection (see _jvp_add_at) and
    0.0 + t_v on it; without, t_x with zeros on the selection is a copy, nothing added."""
    t_x, t_v = ts
    idx = params["idx"]
    if t_x is None:
        return _jvp_update_of_zeros(t_v, params) if t_v.__class__ is Tracer and distinct_index(idx) else None
    if t_x.__class__ is not Tracer or t_v is not None and t_v.__class__ is not Tracer:
        return None
    x = t_x.var
    if x.__class__ is not _Slot or x.band is not None or not x.batched or not distinct_index(idx):
        return None
    b = t_x.builder
    key = _selection_key(idx, x.shape) if t_v is None else None  # (an element, a row, a column zeroed: see _Zeros)
    if key is not None and x.zeroed is not None:  # (zeros left for later, one selection more)
        return _zeroed_later(b, x, key)
    if b.values[x].dtype is not F64:  # (rows of zeros left for later are made now)
        return None
    site = (slice(None),) + idx
    if t_v is None:
        if _writable(ts, args[0], dying):
            rows = x.value
            rows[site] = 0.0
            return _made(b, rows, x.shape, x.loose)
        if key is not None:
            return _zeroed_later(b, x, key)
        rows = x.value.copy()  # (a slice: a read of the rows could not tell what it overlaps)
        rows[site] = 0.0
        return _made(b, rows, x.shape, x.loose if x.made else EVERYWHERE)
    v = b.rows(t_v)
    if v.dtype is not F64:
        return None
    rows = _summed_rows(ts, args[0], dying)
    rows[site] = 0.0 + _aligned(v, rows[site].ndim - 1, params["nd"])
    return _made(b, rows, x.shape, None)


def _jvp_index_add(ts, params, args, values, dying=()):
    """index_add(x, v) at integers and slices (`z[i] += e` in a loop): the rules' t_x +
    index_add(zeros, t_v) (dense rows), written into t_x's rows where a fold made them and
    nothing reads them after, as _jvp_add_at writes a read's: O(batch x selection) a step.

    Bit for bit: the rules add 0.0 + t_v on the selection (never -0.0) and +0.0 off it; where
    the selection and t_v both hold a nan, the rules run (see _jvp_add_at).  Without t_v the rules
    hand t_x on as it is."""
    t_x, t_v = ts
    idx = params["idx"]
    if t_v is None or t_v.__class__ is not Tracer or t_x is not None and t_x.__class__ is not Tracer \
            or not distinct_index(idx):
        return None
    b = t_v.builder
    v = b.rows(t_v)
    if v.dtype is not F64:
        return None
    site = (slice(None),) + idx
    if t_x is None:
        shape = params["xshape"]
        b.check_size(shape)  # (what the rule's call checks)
        rows = np.zeros((b.n,) + shape)
        rows[site] += _aligned(v, rows[site].ndim - 1, params["nd"])
        return _made(b, rows, shape, None)
    x = t_x.var
    if x.__class__ is not _Slot or x.band is not None or not x.batched or b.values[x].dtype is not F64:
        return None
    region = x.value[site]
    added = 0.0 + _aligned(v, region.ndim - 1, params["nd"])
    if has_nan(added) and has_nan(region):
        return None
    total = region + added
    del region  # (a view of the rows: see _writable)
    rows = _summed_rows(ts, args[0], dying)
    rows[site] = total
    return _made(b, rows, x.shape, None)


def _jvp_update_of_zeros(t_v: Tracer, params: dict, put: bool = False):
    """index_update(x, v) where only v has a tangent (the first write into zeros(n)): the rule's
    index_update(zeros_like(x), t_v), zeros with t_v's rows on the selection, as a fold's own rows,
    so that the loop's later writes go into them; a -0.0 of t_v may stay on the selection.  With
    put, index_put(t_v) instead (what it places: P.put_value)."""
    b = t_v.builder
    v = b.rows(t_v)
    if v.dtype is not F64:
        return None
    if put:
        v = P.put_value(v, params["idx"])
    shape = params["xshape"]
    b.check_size(shape)  # (what the rule's call checks)
    rows = np.zeros((b.n,) + shape)
    site = (slice(None),) + params["idx"]
    rows[site] = _aligned(v, rows[site].ndim - 1, params["nd"])
    return _made(b, rows, shape, params["idx"])


def _aligned(v, rank: int, nd: int):
    """v's rows with v's logical rank nd lined up with a selection's rank (as primitives._align)."""
    return v.reshape(v.shape[:1] + (1,) * (rank - nd) + v.shape[1:])


EVERYWHERE = (Ellipsis,)  # (a slot's loose: an array that was copied, not summed)


class _Zeros:
    """Rows left to copy with zeros on some selections (see _zeroed_later): the rows, and the
    selections zeroed so far by their keys (_selection_key: integers, unit-step slices and whole
    axes: x[i], x[i, :], x[:, i], x[2*i:2*i + 2]), each with the depth of the zeroing that added it,
    and the deepest; ``pattern``, the kinds of their items while every key has the same ones
    (then two keys select the same elements or none, see _pattern: a read of a selection no zero
    covers reads the rows as they are), else None."""

    __slots__ = ("rows", "at", "top", "pattern")

    def __init__(self, rows, at: dict, top: int, pattern):
        self.rows, self.at, self.top, self.pattern = rows, at, top, pattern

    def add(self, key: tuple, depth: int) -> int:
        """Zeros on the selection key for the slots deeper than depth, the deepest; the depth of
        the slot."""
        if key in self.at:
            return depth
        if not self.at:
            self.pattern = _pattern(key)
        elif self.pattern != _pattern(key):
            self.pattern = None
        self.at[key] = self.top = depth + 1
        return depth + 1

    def upto(self, depth: int) -> "_Zeros":
        """A record of the selections of depth d or less alone."""
        return _Zeros(self.rows, {k: d for k, d in self.at.items() if d <= depth}, depth, self.pattern)

    def zero(self, rows, depth: int) -> None:
        """Write the zeros of a slot of depth d into rows, in one assignment where the keys have
        one pattern: an integer array for each axis a key picks (the selections are distinct: no
        order to keep)."""
        at = [k for k, d in self.at.items() if d <= depth]
        if not at:
            return
        if self.pattern is None:  # (keys of several patterns: one at a time)
            for k in at:
                rows[(slice(None),) + _index_of(k)] = 0.0
            return
        starts = np.array([[i if type(i) is int else i[0] for i in k if i is not None] for k in at],
                          dtype=np.intp).T
        rows[(slice(None),) + _lattice_picks(self.pattern, starts)] = 0.0


def _lattice_picks(pattern: tuple, starts) -> tuple:
    """The index that selects every key of one pattern at once: for each axis a key picks, an
    integer array over (key, then the width of each picked axis) holding its starts (its
    integers) plus the offsets 0 .. width - 1 on that axis's own dimension; a whole axis whole."""
    picked = [p for p in pattern if p != 2]
    m = len(picked)
    index, columns = [], iter(range(m))
    for p in pattern:
        if p == 2:
            index.append(_ALL)
            continue
        a = next(columns)
        pick = starts[a].reshape((-1,) + (1,) * m)
        if p != 0 and p[0] > 1:
            pick = pick + np.arange(p[0]).reshape((1,) * (a + 1) + (-1,) + (1,) * (m - a - 1))
        index.append(pick)
    return tuple(index)


_ALL = slice(None)


def _selection_key(idx: tuple, shape: tuple):
    """A selection of integers, unit-step slices and whole axes of an array of shape as a key of a
    record of zeros (an integer as itself, a slice start:stop within its axis as (start, stop), a
    whole axis as None, the whole axes at the end dropped: x[i] and x[i, :] have one key), else
    None."""
    n = len(idx)
    while n and type(idx[n - 1]) is slice and idx[n - 1] == _ALL:
        n -= 1
    key = []
    for i, size in zip(idx[:n], shape):
        if type(i) is int:
            key.append(i)
        elif type(i) is not slice:
            return None
        elif i == _ALL:
            key.append(None)
        elif type(i.start) is int and type(i.stop) is int and 0 <= i.start < i.stop <= size and i.step in (None, 1):
            key.append((i.start, i.stop))
        else:
            return None
    return tuple(key)


def _pattern(key: tuple) -> tuple:
    """A key's kinds of items: 0 an integer, 2 a whole axis, and a slice's width and its start's
    remainder by it.  Slices of one pattern lie on one lattice: two select the same elements or
    none (z[2*i:2*i + 2], z[i:i + 1]; not z[i:i + 2], whose starts differ by one)."""
    return tuple(0 if type(i) is int else 2 if i is None else (i[1] - i[0], i[0] % (i[1] - i[0])) for i in key)


def _index_of(key: tuple) -> tuple:
    """The selection of a key (see _selection_key)."""
    return tuple(i if type(i) is int else _ALL if i is None else slice(*i) for i in key)


def _zeroed_later(b: BatchedBuilder, x: _Slot, key: tuple) -> Tracer:
    """x's rows with zeros on the element or row of integers key, a copy, left for later: a slot
    of depth d holds x's rows and every selection of depth d or less (x's own, if its zeros were
    left for later too), made on its first read (_Values.write_out, _zeroed_now), while a read
    of an element or row that no zero covers reads the rows as they are (_jvp_index).  The
    backward pass of a loop of index updates zeroes one element of the cotangent a step, then
    reads that element of the cotangent before the zeros (g[i], for e's), so that the rows
    cannot be written into: a copy a step cost O(batch x size).  A chain of zeroings shares one
    record of its selections (a zeroing of the deepest slot adds to it; another one copies it),
    and costs one copy, or none, when something reads the rows in full.  The same bits as a copy
    a step: a copy of the rows, then zeros."""
    if x.zeroed is None:
        zeros, depth, loose = _Zeros(x.value, {}, 0, None), 0, x.loose if x.made else EVERYWHERE
    else:
        zeros, depth, loose = x.zeroed
        if zeros.top != depth:  # (a second zeroing of x: a record of its own)
            zeros = zeros.upto(depth)
    slot = _Slot(None, x.shape)
    slot.zeroed = zeros, zeros.add(key, depth), loose
    return _tracer(b, slot)


def _zeroed_now(slot: _Slot):
    """The rows _zeroed_later left for later, made: a copy, with zeros on each selection; or the
    rows themselves, zeroed in place, where nothing else can see them: no other slot shares the
    record of the zeros or holds the rows, and no view of them is alive (a loop that reads an
    element it wrote, y[i + 1] = f(y[i]), adds each read's cotangent into the zeroed rows)."""
    zeros, depth, loose = slot.zeroed
    slot.zeroed = None
    rows = zeros.rows
    if not (COUNTS_REFERENCES and rows.base is None and rows.flags.c_contiguous and
            sys.getrefcount(zeros) == _SOLE_RECORD_REFERENCES and sys.getrefcount(rows) == _SOLE_ROWS_REFERENCES):
        rows = rows.copy()
    zeros.zero(rows, depth)
    slot.made, slot.loose = True, loose
    return rows


# A record of zeros no other slot shares: the name zeros and getrefcount's argument (the slot's
# tuple is gone); rows held by the record alone, which no view refers to (a view's base is rows,
# which owns its memory): the record's, the name rows and the argument
_SOLE_RECORD_REFERENCES = 2
_SOLE_ROWS_REFERENCES = 3


def _jvp_index(ts, params, args, values, dying=()):
    """x[idx]: index's fold on a band; of one element of batched rows, a copy of the element's
    rows (zeros where a zero left for later covers it), where the rules' view of the rows would
    keep them from being written into until the view goes: a loop's backward pass reads its
    cotangent's element i, then zeroes it (y[i + 1] = f(y[i])), or adds into it.  Of a row (a
    selection of integers that leaves axes) of rows whose zeros were left for later, that no zero
    covers: a view of the rows as they are, as the rules' view of their copy (the rows are
    C-contiguous, as a copy is: the same layout), so that a loop writing rows, Z[i] = v, makes
    no copy a step.

    An element's copy holds the view's values; where two nans meet in a later sum of its rows,
    which of them NumPy keeps depends on the layout of the operands (its vector loops take
    contiguous rows, a strided view goes element by element), so the sign of a nan may differ
    from the rules' pass (no output of gradcalc shows a nan's sign).  A row stays a view: its
    layout decides the order of a later product's sums."""
    t = ts[0]
    if t.__class__ is not Tracer or t.var.__class__ is not _Slot:
        return None
    x = t.var
    if x.band is not None:
        made = _fold_index(t.builder, (x,), params)
        return None if made is None else _tracer(t.builder, made)
    key = _selection_key(params["idx"], x.shape)
    if not x.batched or key is None:
        return None
    element = len(key) == len(x.shape) and all(type(i) is int for i in key)
    if x.zeroed is None:
        if not element:
            return None  # (the rules' view)
        rows = x.value
    else:
        zeros, depth, _ = x.zeroed
        rows = zeros.rows
        if zeros.pattern != _pattern(key) or not (element or rows.flags.c_contiguous):
            return None  # (the rows made, then the rules')
        if zeros.at.get(key, depth + 1) <= depth:
            return _tracer(t.builder, _batched(np.zeros(t.builder.n), ())) if element else None
    if rows.dtype is not F64:
        return None
    part = rows[(slice(None),) + params["idx"]]
    return _tracer(t.builder, _batched(part.copy() if element else part, part.shape[1:]))


def _summed_rows(ts: tuple, var, dying):
    """The rows of ts[0], var's tangent, plus +0.0 (a sum's, off a selection about to be written):
    the same rows, made +0.0 where the slot says a -0.0 may be, where the fold may write into
    them (see _writable), else a new array."""
    slot = ts[0].var
    if _writable(ts, var, dying):
        if slot.loose is not None:
            slot.value[(slice(None),) + slot.loose] += 0.0
        return slot.value
    return slot.value + 0.0


def _made(b: BatchedBuilder, rows, shape: tuple, loose) -> Tracer:
    """A tracer of rows that a fold made, and may write into again (see _Slot)."""
    made = _batched(rows, shape)
    made.made, made.loose = True, loose
    return _tracer(b, made)


def _writable(ts: tuple, var, dying) -> bool:
    """Whether a fold may write into the rows of ts[0], var's tangent: a fold made them, var is
    read no more, no other variable's tangent is this tracer (a rule can hand a tangent on as it
    is): then its references are the pass's dict of tangents, ts, the fold's name for it and
    getrefcount's argument; and no view of the rows is held (tests/test_batched.py holds that a
    loop's reads and writes are written in place, and that the rows are the rules' bit for bit).
    Where reference counts do not count every reference (tape.COUNTS_REFERENCES), never."""
    return ts[0].var.made and var in dying and COUNTS_REFERENCES and \
        sys.getrefcount(ts[0]) == _SOLE_REFERENCES and sys.getrefcount(ts[0].var.value) == _SOLE_ARRAY_REFERENCES


_SOLE_REFERENCES = 4
# ... and no view of its rows is held (a rule's index of it, x[i] of a tangent, is a view that a
# write into the rows would change): the slot's and getrefcount's are the array's references
_SOLE_ARRAY_REFERENCES = 2


#: transforms.forward's ``fold`` for a pass on a BatchedBuilder's tracers: {primitive: fold}.
JVP_FOLDS = {P.neg: _jvp_of(_fold_neg), P.index: _jvp_index,
             P.index_put: _jvp_of(_fold_index_put), P.copy: _jvp_copy, P.add: _jvp_add,
             P.mul: _jvp_product, P.safe_mul: _jvp_product, P.pow_const: _jvp_pow_const,
             P.add_at: _jvp_add_at, P.index_update: _jvp_index_update, P.index_add: _jvp_index_add}


# The batched backward pass's folds (handed to transforms.backward as its fold=): each takes the
# pass's dict of cotangents, the equation's cotangent g, the equation, the live variables and the
# shapes, and adds the cotangents of the equation's operands into the dict as the rules would
# (the same folds as the tangent pass's: a read's rows added into the rows a fold made, an
# update's zeros left for later), returning True; or False, having done nothing, and the rules
# run.  A Jacobian in reverse mode, or check's backward pass, of a loop over n elements then
# costs O(batch) a step, not O(batch x n).

def _vjp_read(ct: dict, g, eq, live, shapes) -> bool:
    """x[idx]: x's cotangent so far plus the rules' index_put(g), as add_at's fold makes it (in
    place where the pass made those rows and nothing else holds them); the first read makes
    rows of zeros with g on idx that the next ones write into."""
    a = eq.args[0]
    idx = eq.params["idx"]
    if a not in live or g.__class__ is not Tracer or g.var.__class__ is not _Slot or not distinct_index(idx):
        return False
    shape = shapes[a]
    if ct.get(a) is None:
        if g.var.band is not None:
            return False  # (index_put's fold keeps a band a band)
        made = _jvp_update_of_zeros(g, {"xshape": shape, "idx": idx, "nd": len(g.var.shape)}, put=True)
    else:  # (ct's tracer, handed over without a name for it: see _writable's count)
        made = _jvp_add_at((ct.get(a), g), {"idx": idx, "shape": shape}, (a, None), None, (a,))
    if made is None:
        return False
    ct[a] = made
    return True


def _vjp_update(ct: dict, g, eq, live, shapes) -> bool:
    """x[idx] = v: x's cotangent, g with zeros on idx (left for later, as the tangent pass's fold
    leaves them: g is read again, for v's), and v's, g[idx] (an element's rows a copy)."""
    x, v = eq.args
    params = eq.params
    if g.__class__ is not Tracer or g.var.__class__ is not _Slot or not distinct_index(params["idx"]):
        return False
    cx = cv = None
    if x in live:
        cx = _jvp_index_update((g, None), params, eq.args, None, ())  # (never in place: see above)
        if cx is None:
            return False
    if v in live:
        cv = _jvp_index((g,), params, eq.args, None)
        if cv is None:
            cv = P.index(g, idx=params["idx"])  # (the rule's view: indices repeat nowhere here)
        if cv.shape != shapes[v]:
            cv = fit_to_shape(cv, shapes[v])
    for a, c in ((x, cx), (v, cv)):  # (the rules' order: x's, then v's)
        if c is not None:
            prev = ct.get(a)
            ct[a] = c if prev is None else prev + c
    return True


#: transforms.backward's ``fold`` for an eager pass on a BatchedBuilder's tracers.
VJP_FOLDS = {P.index: _vjp_read, P.index_update: _vjp_update}


def _band_dense(band: dict, n: int, m: int):
    """The (n, m) array whose rows r hold d_k[j] at (flat) column j = r - k, for each diagonal k."""
    out = np.zeros((n, m), dtype=np.result_type(*band.values()))
    flat = out.reshape(-1)
    for k, d in band.items():
        lo, hi = max(0, -k), min(m, n - k)  # columns j with a row r = j + k in range
        if lo < hi:
            first = (lo + k) * m + lo
            flat[first:first + (hi - lo - 1) * (m + 1) + 1:m + 1] = (d if d.ndim == 1 else d.reshape(-1))[lo:hi]
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
