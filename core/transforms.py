"""Reverse and forward mode over a tape, and the batched passes built on them.

:func:`backward` runs one VJP rule per equation, newest first; :func:`forward`
runs one JVP rule per equation, oldest first.  Both trace their rules into the
same builder, so what they return are tracers: their values are the answer at
the traced point, and the equations they appended are a derivative program
that :func:`batched` re-runs on a whole batch of seeds (every row of a
Jacobian in one pass) or that can be differentiated again (a Hessian is the
forward mode of the backward pass).  No Jacobian of a primitive is ever built.
"""
from __future__ import annotations

import math

import numpy as np

from . import primitives as P
from .errors import GradcalcError
from .tape import Builder, Tracer, all_finite, broadcast_shapes, eval_equations


def _fit(c, shape: tuple):
    """Sum a broadcast cotangent down to shape, or broadcast a tangent up to it."""
    if c.shape == shape:
        return c
    try:
        if broadcast_shapes(c.shape, shape) == shape:
            return P.broadcast_to(c, shape=shape)
    except ValueError:
        pass
    return P.sum_to(c, shape=shape)


def depends(equations, sources) -> set:
    """Variables with a differentiable path from any of sources (the sources included)."""
    live = set(sources)
    for eq in equations:
        if eq.prim.differentiable and eq.prim.vjp is not None and any(a in live for a in eq.args):
            live.add(eq.out)
    return live


def backward(builder: Builder, equations, cotangents: dict, wrt, *, eager: bool = False,
             log: list | None = None, check: bool | None = None) -> dict:
    """Reverse mode: cotangents {var: value} of outputs -> {wrt var: value or None}.

    A wrt variable defined by an equation receives the cotangent it has when
    the pass reaches that equation (everything upstream held fixed), and the
    pass goes on through it, so inputs upstream still get total derivatives.
    None means no differentiable path.

    Traced (default): cotangents are tracers and the rules are recorded into
    builder, so the pass can be re-run batched or differentiated again.
    Eager: cotangents are arrays and the rules run directly on the traced
    values, which is all a first-order gradient needs.  ``log`` receives
    (forward equation, first, end) spans of the equations each VJP recorded.
    ``check`` (default: the builder's setting) warns about the first rule that
    turns finite values into a non-finite derivative.
    """
    wanted = set(wrt)
    live = depends(equations, wanted)
    ct = dict(cotangents)
    found = {}
    shapes = builder.shapes
    saved = builder.check_finite
    check = saved if check is None else check
    builder.check_finite = False
    for eq in reversed(equations):
        g = ct.pop(eq.out, None)
        if eq.out in wanted:
            found[eq.out] = g
        if g is None or not eq.prim.differentiable:
            continue
        builder.pos = eq.pos
        ans, args = _operands(builder, eq, eager)
        first = len(builder.equations)
        for i, a in enumerate(eq.args):
            if a not in live:
                continue
            rule = eq.prim.vjp_rule(i)
            if rule is None:
                continue
            try:
                c = _fit(rule(g, ans, *args, **eq.params), shapes[a])
            except GradcalcError as err:
                err.pos = err.pos or eq.pos
                raise
            if check:
                _note_nonfinite(builder, eq, g, c)
            ct[a] = ct[a] + c if a in ct else c
        if log is not None:
            log.append((eq, first, len(builder.equations)))
    builder.pos = None
    builder.check_finite = saved
    for v in wanted:
        if v not in found:
            found[v] = ct.get(v)
    return found


def forward(builder: Builder, equations, tangents: dict, *, eager: bool = False,
            check: bool | None = None, describe=None) -> dict:
    """Forward mode: tangents {var: value} of inputs -> tangents of every reached variable.

    Traced or eager, as for :func:`backward`; ``describe(eq)`` names an equation
    in non-finite warnings (default: "the derivative of 'prim'").
    """
    tan = dict(tangents)
    shapes = builder.shapes
    saved = builder.check_finite
    check = saved if check is None else check
    builder.check_finite = False
    for eq in equations:
        if not eq.prim.differentiable:
            continue
        ts = [tan.get(a) for a in eq.args]
        if all(t is None for t in ts):
            continue
        builder.pos = eq.pos
        ans, args = _operands(builder, eq, eager)
        out = None
        for i, t in enumerate(ts):
            rule = eq.prim.jvp_rule(i) if t is not None else None
            if rule is None:
                continue
            try:
                c = rule(t, ans, *args, **eq.params)
            except GradcalcError as err:
                err.pos = err.pos or eq.pos
                raise
            out = c if out is None else out + c
        if out is not None:
            tan[eq.out] = _fit(out, shapes[eq.out])
            if check:
                _note_nonfinite(builder, eq, None, tan[eq.out], describe)
    builder.pos = None
    builder.check_finite = saved
    return tan


def _operands(builder: Builder, eq, eager: bool):
    """An equation's result and arguments, as arrays (eager) or as tracers (traced)."""
    if eager:
        values = builder.values
        return values[eq.out], [values[a] for a in eq.args]
    return Tracer(builder, eq.out), [Tracer(builder, a) for a in eq.args]


def value_of(x):
    """The array of a tracer, or the array itself."""
    return x.value if type(x) is Tracer else x


def _note_nonfinite(builder: Builder, eq, g, c, describe=None):
    """Warn when a rule turns finite input into a non-finite derivative."""
    if all_finite(value_of(c)) or (g is not None and not all_finite(value_of(g))):
        return
    what = describe(eq) if describe else f"the derivative of '{eq.prim.name}'"
    builder.note_nonfinite(what, value_of(c))


class Recording:
    """Marks where a derivative pass starts, so that it can be re-run batched."""

    def __init__(self, builder: Builder):
        self.builder = builder
        self.start = len(builder.equations)
        self._check = builder.check_finite
        builder.check_finite = False  # traced on placeholder seeds: its values mean nothing

    def seed(self, shape) -> Tracer:
        return self.builder.input(np.zeros(shape))

    def run(self, seeds: dict, outputs: list, batch: int, what: str = "a batched pass",
            identity=()) -> list:
        """Re-run the recorded equations with {seed var: array of shape (batch,) + shape}.

        ``identity`` names seeds whose batch is the identity basis (row i is the
        i-th unit vector): a matrix product of a fixed matrix with such a seed is
        that matrix's columns or rows, so it is copied instead of multiplied.
        Refused before it starts when one batched intermediate would exceed the
        builder's element budget.
        """
        b = self.builder
        b.check_finite = self._check
        keep = {t.var for t in outputs if t is not None}
        equations = seeded(needed(b.equations[self.start:], keep), seeds)
        largest = largest_batched(equations, seeds, b.shapes)
        b.check_size((batch, largest), what=f"{what} ({batch} rows of {largest}-element values)")
        env = dict(b.values)
        env.update(seeds)
        if identity:
            equations = _fold_identity(equations, env, seeds, set(identity), keep)
        eval_equations(equations, env, keep=keep, batch_elements=batch * largest)
        results = []
        for t in outputs:
            if t is None:
                results.append(None)
                continue
            v = env[t.var]
            full = (batch,) + t.shape
            results.append(v if v.shape == full else np.broadcast_to(v, full))
        return results


def _fold_identity(equations, env: dict, seeds, identity: set, keep: set) -> list:
    """Run the start of a pass seeded with identity bases on the seeds' structure.

    Row i of an identity seed is the unit vector e_i.  While a value is d * I
    (row i is d_i e_i: the seed, times fixed vectors through ``safe_mul``, or
    negated), only d is computed; a matrix product of a fixed matrix M with it
    is then a scaled copy of M's columns (M @ d_i e_i = d_i M[:, i]) or rows
    (d_i e_i @ M = d_i M[i, :]).  For a Jacobian of ``tanh(A @ x)`` that replaces
    a 500×500×500 matrix product with a 500×500 scaling.  Exact: the product
    would add only zeros, or, where M holds an infinity, make nan of zeros (a
    zero tangent contributes exactly zero, as everywhere in gradcalc).  Values
    left as d * I that later equations or the outputs read are written out in
    full; returns the equations still to run.  ``equations`` all depend on the
    seeds (as :func:`seeded` returns them), so what they compute carries the batch axis.
    """
    identity = {v for v in identity if env[v].ndim == 2 and env[v].shape[0] == env[v].shape[1]}
    batched = set(seeds).union(eq.out for eq in equations)
    scale = dict.fromkeys(identity)  # var -> d (None: d = 1), for values d * I of a vector
    rest = [eq for eq in equations if _fold_one(eq, env, scale, batched) is None]
    read = set(keep).union(*(eq.args for eq in rest))
    for v, d in scale.items():
        if v in read and v not in identity:
            env[v] = np.diag(d)
    return rest


def _fold_one(eq, env: dict, scale: dict, batched: set):
    """Fold one equation on a d * I operand (see :func:`_fold_identity`); None if it cannot."""
    prim, args = eq.prim, eq.args
    if prim is P.safe_mul and not eq.params:
        g, f = args if args[0] in scale else args[::-1]
        if g not in scale:
            return None
        n = env[g].shape[-1] if scale[g] is None else scale[g].shape[0]
        if f not in batched and env[f].shape in ((n,), (1,)):
            d = scale[g]
            scale[eq.out] = np.broadcast_to(env[f], (n,)) if d is None else P._safe_mul(d, env[f])
            return True
    elif prim is P.neg and args[0] in scale:
        d = scale[args[0]]
        scale[eq.out] = -np.ones(env[args[0]].shape[-1]) if d is None else -d
        return True
    elif prim is P.matmul:
        a, c = args
        nda, ndb = eq.params["nda"], eq.params["ndb"]
        if c in scale and nda == 2 and ndb == 1 and a not in batched and env[a].ndim == 2:
            m, d = env[a].T, scale[c]  # row i: d_i M[:, i]
        elif a in scale and nda == 1 and ndb == 2 and c not in batched and env[c].ndim == 2:
            m, d = env[c], scale[a]  # row i: d_i M[i, :]
        else:
            return None
        env[eq.out] = m.copy() if d is None else P._safe_mul(m, d[:, None])
        return True
    return None


def needed(equations, outputs) -> list:
    """The equations that outputs depend on, in order: a recorded pass also computes
    values nobody reads (the tangent of the forward output, in a Hessian), which a
    batched re-run would pay for many times over."""
    live = set(outputs)
    kept = []
    for eq in reversed(equations):
        if eq.out in live:
            kept.append(eq)
            live.update(eq.args)
    kept.reverse()
    return kept


def seeded(equations, seeds) -> list:
    """The equations that depend on the seeds, in order.  The others need not run again in
    a batched pass: their values, computed when they were traced, are already the answer."""
    live = set(seeds)
    out = []
    for eq in equations:
        if any(a in live for a in eq.args):
            live.add(eq.out)
            out.append(eq)
    return out


def largest_batched(equations, seeds, shapes) -> int:
    """The largest logical size among the seeds and the values the equations compute (for
    equations that all depend on the seeds, as :func:`seeded` returns them: the values that
    carry the batch axis)."""
    sizes = [math.prod(shapes[v]) for v in seeds]
    sizes += [math.prod(shapes[eq.out]) for eq in equations]
    return max(sizes, default=1)


def basis(shapes: list, dtype=np.float64) -> list:
    """Identity seeds for blocks of the given shapes: block i gets (n, *shape_i), n = total size."""
    sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
    n = sum(sizes)
    eye = np.eye(n, dtype=dtype)
    out, start = [], 0
    for s, k in zip(shapes, sizes):
        out.append(eye[:, start:start + k].reshape((n,) + tuple(s)))
        start += k
    return out
