"""Batched derivative passes run eagerly: tracers that carry a whole batch of seeds.

A Jacobian or a Hessian is a derivative pass run on many seeds at once, one per row.  The
pass runs once, as an eager pass (the rules read the traced point's values as arrays), with
seeds that are tracers of a :class:`BatchedBuilder`: each primitive a rule applies to one
of them reaches that builder's :meth:`~BatchedBuilder.bind` (``Primitive.__call__`` hands a
tracer to its builder), which evaluates it on the whole batch.  Parameters are normalised
on the logical shapes, as when traced, and every primitive accepts the extra leading batch
axis, so the values are those a recorded pass re-run batched computes, bit for bit, without
recording the pass first.

A seed of a vector input taken from an identity basis runs as a band of diagonals (see
:func:`transforms._fold_identity`): the primitives with a fold keep bands as bands, and a
band is written out in full where anything else reads it.
"""
from __future__ import annotations

import math

import numpy as np

from .alloc import keep_freed_memory
from .errors import ValueError_
from .tape import (F64, F64_SCALAR, LARGE_BATCH, NO_PARAMS, Equation, Tracer, _new_equation, _scalar_or_array,
                   all_finite)
from .transforms import _FOLDS, _band_dense, basis


class _Values(dict):
    """A batched builder's values: a band is written out when first read whole."""

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
        self.values.owner = self
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
            if fold is not None and fold(_new_equation(Equation, (var, prim, ids, params or NO_PARAMS, None)),
                                         values, values, bands, self.batched, self.n):
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
