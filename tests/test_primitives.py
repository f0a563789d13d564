"""Every primitive of the registry against finite differences, in both modes.

The suite is driven by ``gradcalc.primitives.REGISTRY`` (STYLE.md, principles 1
and 9): ``TABLE`` below says, for every primitive, how to reach it (a program in
the language through the public API, or a direct trace that calls the Primitive
on ``Builder`` tracers) and where to sample its inputs.  A primitive added to the
registry without an entry here fails ``test_table_covers_registry``.

Each case compares the reverse-mode Jacobian, the forward-mode Jacobian, a
central-difference Jacobian computed here from values alone, and the value
itself against a NumPy reference; tolerances are documented in ``fdcheck``.
Expected numbers in the special-value tests are closed forms derived by hand.
"""
from __future__ import annotations

import math
import re
import zlib
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest

import gradcalc
import gradcalc.lower as lower
from gradcalc import primitives as P
from gradcalc.primitives import REGISTRY
from gradcalc.tape import Builder

from fdcheck import check_hessian, check_program, check_traced
from rules import replace_rule

# ==========================================================================
# Input domains: where each primitive is differentiable and well conditioned
# ==========================================================================


def _distinct(rng, shape):
    """Values at least 0.3 apart, so no max/min ties within a finite-difference step."""
    n = int(np.prod(shape, dtype=int))
    return (rng.permutation(n) * 0.5 - 0.25 * n + rng.uniform(-0.1, 0.1, n)).reshape(shape)


DOMAINS: dict[str, Callable] = {
    "real": lambda rng, s: rng.uniform(-2.0, 2.0, s),
    "pos": lambda rng, s: rng.uniform(0.5, 2.0, s),  # log, sqrt, pow's base
    "unit": lambda rng, s: rng.uniform(-0.9, 0.9, s),  # asin, acos, atanh, tan
    "gt1": lambda rng, s: rng.uniform(1.2, 3.0, s),  # acosh
    "away0": lambda rng, s: rng.choice([-1.0, 1.0], s) * rng.uniform(0.3, 2.0, s),  # abs, sign...
    "offgrid": lambda rng, s: rng.integers(-3, 3, s) + rng.uniform(0.1, 0.4, s),  # floor, round
    "distinct": _distinct,  # max, min
    "lo": lambda rng, s: rng.uniform(-1.0, -0.2, s),  # clip bounds
    "hi": lambda rng, s: rng.uniform(0.2, 1.0, s),
    "wellcond": lambda rng, s: 2.0 * np.eye(s[-1]) + rng.uniform(-0.5, 0.5, s),  # det, inv, solve
    "mask": lambda rng, s: (rng.uniform(size=s) > 0.5).astype(np.float64),
    # nonzero is true: masks of 0 and other values (logical_and, logical_or, logical_not)
    "truthy": lambda rng, s: rng.choice([0.0, 0.0, 1.0, 2.5, -0.5], s),
    # with "offgrid" numerators (k + 0.1..0.4), a / b is at least 0.05 from an integer: a // b
    # and a % b are smooth within a finite-difference step
    "divisor": lambda rng, s: rng.choice([-2.0, -1.0, 1.0, 2.0], s),
}

# ==========================================================================
# The table
# ==========================================================================


@dataclass(frozen=True)
class Case:
    """One way to exercise a primitive.

    Exactly one of ``src`` (a program, inputs by name, through the public API)
    and ``fn`` (``fn(*tracers)`` calling primitives on ``Builder`` inputs).
    ``inputs``: (name, (shape, domain)) or (name, fixed value).  ``ref``: the
    value by NumPy, called with the inputs positionally, in order.
    """

    id: str
    src: str | None = None
    fn: Callable | None = None
    inputs: tuple = ()
    ref: Callable | None = None
    const: tuple = ()  # fn: argument indices that are not differentiated (a mask)
    zero: tuple = ()  # src: inputs whose derivative is zero by definition
    unconnected: tuple = ()  # src: the exact Result.unconnected expected
    bug: str | None = None  # a known bug: the case is a strict xfail
    hessian_bug: str | None = None  # a known bug of its second derivatives only

    def point(self) -> dict:
        rng = np.random.default_rng(zlib.crc32(self.id.encode()))
        out = {}
        for name, spec in self.inputs:
            if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], str):
                shape, domain = spec
                out[name] = np.asarray(DOMAINS[domain](rng, shape), dtype=np.float64)
            else:
                out[name] = np.asarray(spec, dtype=np.float64)
        return out


def _desc(spec) -> str:
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], str):
        return "x".join(map(str, spec[0])) or "scalar"
    return "at" + re.sub(r"\s+", "", np.array2string(np.asarray(spec, dtype=float), separator=","))


def E(src, ref=None, *, zero=(), unconnected=(), bug=None, hessian_bug=None, **inputs) -> Case:
    """A case written in the language; inputs by keyword: name=(shape, domain) or a value."""
    cid = src + " | " + " ".join(f"{k}:{_desc(v)}" for k, v in inputs.items())
    return Case(cid, src=src, inputs=tuple(inputs.items()), ref=ref, zero=tuple(zero),
                unconnected=tuple(unconnected), bug=bug, hessian_bug=hessian_bug)


def D(label, fn, *args, ref=None, const=(), bug=None) -> Case:
    """A direct trace: fn(*tracers) with args given as (shape, domain) or values."""
    cid = label + " | " + " ".join(_desc(a) for a in args)
    return Case(cid, fn=fn, inputs=tuple((f"a{i}", a) for i, a in enumerate(args)), ref=ref,
                const=tuple(const), bug=bug)


def _kw(**kwargs) -> str:
    """Keyword arguments in the language's syntax: axis=(0, 1), keepdims=true."""
    def lit(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, tuple):
            return "(" + ", ".join(map(str, v)) + ")"
        return str(v)
    return "".join(f", {k}={lit(v)}" for k, v in kwargs.items())


def np_softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def np_log_softmax(x, axis=-1):
    return np.log(np_softmax(x, axis))


def np_logsumexp(x, axis=None, keepdims=False):
    return np.log(np.sum(np.exp(x), axis=axis, keepdims=keepdims))


def np_norm(x, axis=None, keepdims=False):
    return np.sqrt(np.sum(x * x, axis=axis, keepdims=keepdims))


UNARY = {  # name: (NumPy reference, domain)
    "abs": (np.abs, "away0"), "sqrt": (np.sqrt, "pos"), "cbrt": (np.cbrt, "away0"),
    "exp": (np.exp, "real"), "expm1": (np.expm1, "real"), "exp2": (np.exp2, "real"),
    "log": (np.log, "pos"), "log1p": (np.log1p, "pos"), "log2": (np.log2, "pos"),
    "log10": (np.log10, "pos"), "sin": (np.sin, "real"), "cos": (np.cos, "real"),
    "tan": (np.tan, "unit"), "asin": (np.arcsin, "unit"), "acos": (np.arccos, "unit"),
    "atan": (np.arctan, "real"), "sinh": (np.sinh, "real"), "cosh": (np.cosh, "real"),
    "tanh": (np.tanh, "real"), "asinh": (np.arcsinh, "real"), "acosh": (np.arccosh, "gt1"),
    "atanh": (np.arctanh, "unit"), "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), "real"),
    "relu": (lambda x: np.where(x > 0, x, 0.0), "away0"),
    "softplus": (lambda x: np.log1p(np.exp(x)), "real"),
    "sign": (np.sign, "away0"), "floor": (np.floor, "offgrid"), "ceil": (np.ceil, "offgrid"),
    "round": (np.round, "offgrid"), "trunc": (np.trunc, "offgrid"),
    "erf": (np.frompyfunc(math.erf, 1, 1), "real"), "erfc": (np.frompyfunc(math.erfc, 1, 1), "real"),
    "sinc": (lambda x: np.sin(np.pi * x) / (np.pi * x), "away0"),
}

BINARY = {  # name: (program, NumPy reference, domain of x, domain of y)
    "add": ("x + y", np.add, "real", "real"),
    "mul": ("x * y", np.multiply, "real", "real"),
    "div": ("x / y", np.divide, "real", "away0"),
    "pow": ("x ^ y", np.power, "pos", "real"),
    "atan2": ("atan2(x, y)", np.arctan2, "away0", "away0"),
    "hypot": ("hypot(x, y)", np.hypot, "real", "real"),
    "maximum": ("maximum(x, y)", np.maximum, "real", "real"),
    "minimum": ("minimum(x, y)", np.minimum, "real", "real"),
    "fmax": ("fmax(x, y)", np.fmax, "real", "real"),
    "fmin": ("fmin(x, y)", np.fmin, "real", "real"),
    "logaddexp": ("logaddexp(x, y)", np.logaddexp, "real", "real"),
    "logaddexp2": ("logaddexp2(x, y)", np.logaddexp2, "real", "real"),
    "copysign": ("copysign(x, y)", np.copysign, "away0", "away0"),
}
PAIRS = [((), ()), ((3,), (3,)), ((), (3,)), ((3,), (2, 3)), ((2, 1), (1, 3)), ((2, 3), ())]

REDUCTIONS = {  # name: (NumPy reference, domain)
    "sum": (np.sum, "real"), "max": (np.max, "distinct"), "min": (np.min, "distinct"),
    "prod": (np.prod, "real"), "logsumexp": (np_logsumexp, "real"), "norm": (np_norm, "real"),
}
AXES = [((), {}), ((4,), {}), ((2, 3), {}), ((2, 3), {"axis": 0}), ((2, 3), {"axis": 1}),
        ((2, 3), {"axis": (0, 1)}), ((2, 3), {"axis": -1, "keepdims": True}),
        ((2, 3), {"axis": 0, "keepdims": True}), ((2, 3, 2), {"axis": (0, 2)})]

NEG_STEP_BUG = None  # fixed
BROADCAST_TO_BUG = None  # fixed
EMPTY_REV_BUG = None  # fixed
PROD_OTHERS_ZERO_BUG = None  # fixed


def _np_prod_others_jvp(x, t):
    """(J t)_j = sum_{i != j} t_i prod_{k != i, j} x_k, by brute force."""
    x, t = np.asarray(x, float), np.asarray(t, float)
    n = x.size
    out = np.zeros(n)
    for j in range(n):
        for i in range(n):
            if i != j:
                out[j] += t[i] * np.prod([x[k] for k in range(n) if k not in (i, j)])
    return out


def _build_table() -> dict[str, list[Case]]:
    t: dict[str, list[Case]] = {}

    def add(name, *cases):
        t.setdefault(name, []).extend(cases)

    _add_elementwise_cases(add)
    _add_cut_cases(add)
    _add_reduction_cases(add)
    _add_shape_cases(add)
    _add_integer_and_mask_cases(add)
    _add_linalg_cases(add)
    _add_scan_cases(add)
    return t


def _add_scan_cases(add):
    """Cumulative sums and products; the integer positions of argsort, argmax and argmin."""
    for name, ref, dom in [("cumsum", np.cumsum, "real"), ("cumprod", np.cumprod, "away0")]:
        for shape, kw in [((4,), {}), ((2, 3), {}), ((2, 3), {"axis": 0}), ((2, 3), {"axis": -1}),
                          ((2, 3, 2), {"axis": 1})]:
            add(name, E(f"{name}(x{_kw(**kw)})", lambda x, ref=ref, kw=kw: ref(x, **kw), x=(shape, dom)))
    # cumprod exact at zeros: one zero, two zeros (its derivatives run a recurrence, no division)
    add("cumprod", E("cumprod(x)", np.cumprod, x=[2.0, 0.0, 3.0, -1.5]),
        E("cumprod(x, axis=0)", lambda x: np.cumprod(x, axis=0), x=[[2.0, 0.0], [0.0, 3.0], [0.5, -1.0]]),
        E("cumprod(x)", np.cumprod, x=[0.0, 1.5, 0.0, 2.0]))
    for shape, axis in [((5,), -1), ((3, 4), -2), ((2, 3, 2), -2)]:
        for rev in (False, True):
            add("recurrence", D(f"recurrence(axis={axis}, reverse={rev})",
                                lambda a, b, axis=axis, rev=rev: P.recurrence(a, b, axis=axis, reverse=rev),
                                (shape, "real"), (shape, "real"),
                                ref=lambda a, b, axis=axis, rev=rev: _np_recurrence(a, b, axis, rev)))
    add("cumsum", D("cumsum(reverse)", lambda a: P.cumsum(a, axis=-2, reverse=True), ((3, 2), "real"),
                    ref=lambda a: np.cumsum(a[::-1], axis=0)[::-1]))
    for name, ref in [("argsort", lambda x, axis=-1: np.argsort(x, axis=axis)),
                      ("argmax", np.argmax), ("argmin", np.argmin)]:
        for shape, kw in [((5,), {}), ((2, 3), {"axis": 0}), ((2, 3), {})]:
            add(name, E(f"{name}(x{_kw(**kw)}) * y", lambda x, y, ref=ref, kw=kw: ref(x, **kw) * y,
                        unconnected=("x",), x=(shape, "distinct"), y=((), "real")))


def _np_recurrence(x, r, axis, reverse):
    """z_i = x_i z_(i-1) + r_i (reverse: z_i = x_(i+1) z_(i+1) + r_i), one step at a time."""
    xm, z = np.moveaxis(x, axis, -1), np.moveaxis(r, axis, -1).copy()
    n = z.shape[-1]
    for i in (range(n - 2, -1, -1) if reverse else range(1, n)):
        z[..., i] += xm[..., i + 1] * z[..., i + 1] if reverse else xm[..., i] * z[..., i - 1]
    return np.moveaxis(z, -1, axis)


def _add_elementwise_cases(add):
    """Elementwise primitives of one and two arguments (broadcasting)."""
    # -- elementwise, one argument ---------------------------------------------
    for name, (ref, dom) in UNARY.items():
        for shape in [(), (3,), (2, 3)]:
            add(name, E(f"{name}(x)", lambda x, ref=ref: ref(x), x=(shape, dom)))
    # sinc at and near 0, where its slope (cos(pi x) - sinc(x)) / x cancels: the series branch
    # (|pi x| < 1), both sides of its edge 1/pi, and the closed-form branch
    add("sinc", E("sinc(x)", np.sinc, x=[0.0, 1e-9, -1e-6, 0.05, -0.3, 0.3183, 0.3184, 1.2]),
        E("sinc(x)", np.sinc, x=0.0))
    add("neg", E("-x", lambda x: -x, x=((), "real")), E("-x", lambda x: -x, x=((2, 3), "real")),
        E("-x^2", lambda x: -x ** 2, x=((3,), "real")))

    # -- elementwise, two arguments (broadcasting) --------------------------------
    for name, (src, ref, dx, dy) in BINARY.items():
        for sx, sy in PAIRS:
            add(name, E(src, lambda x, y, ref=ref: ref(x, y), x=(sx, dx), y=(sy, dy)))
    add("add",
        E("x - y", lambda x, y: x - y, x=((3,), "real"), y=((2, 3), "real")),
        E("x + x * y", lambda x, y: x + x * y, x=((3,), "real"), y=((2, 1), "real")))
    add("mul",
        E("outer(x, y)", np.outer, x=((2,), "real"), y=((3,), "real")),
        E("x * (ones(3) + zeros(3) + arange(3) + linspace(0, 1, 3))",
          lambda x: x * (1 + np.arange(3) + np.linspace(0, 1, 3)), x=((3,), "real")))
    add("pow",
        E("pow(x, y)", np.power, x=((2, 3), "pos"), y=((3,), "real")),
        E("pow(x, 3)", lambda x: x ** 3, x=((4,), "real")),  # a negative base, constant exponent
        E("2 ^ x", lambda x: 2.0 ** x, x=((3,), "real")))
    add("pow_const",  # x ^ literal
        E("x ^ 3", lambda x: x ** 3, x=((4,), "real")),
        E("x ^ 2", lambda x: x ** 2, x=((2, 3), "real")),
        E("x ^ 1", lambda x: x ** 1, x=((3,), "real")),
        E("x ^ 0", lambda x: x ** 0, x=((3,), "real")),
        E("x ^ -2", lambda x: x ** -2.0, x=((3,), "away0")),
        E("x ^ 0.5", lambda x: x ** 0.5, x=((3,), "pos")),
        E("x ^ -1.5", lambda x: x ** -1.5, x=((), "pos")),
        D("pow_const(p=3)", lambda a: P.pow_const(a, p=3), ((2, 3), "real"), ref=lambda a: a ** 3))
    clip_ref = lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi)  # noqa: E731
    for name in ("maximum", "minimum"):
        add(name,
            E("clip(x, lo, hi)", clip_ref, x=[-2.0, -0.3, 0.2, 1.5, 0.9], lo=-0.5, hi=0.8),
            E("clip(x, lo, hi)", clip_ref, x=((2, 3), "real"), lo=((3,), "lo"), hi=((2, 1), "hi")))
    where_ref = lambda c, x, y: np.where(c > 0, x, y)  # noqa: E731
    for sc, sx, sy in [((3,), (3,), (3,)), ((2, 3), (), (3,)), ((), (2, 1), (1, 3))]:
        add("where", E("where(c > 0, x, y)", where_ref, unconnected=("c",),
                       c=(sc, "away0"), x=(sx, "real"), y=(sy, "real")))
    add("where", D("where(mask, a, b)", lambda c, a, b: P.where(c, a, b),
                   ((2, 3), "mask"), ((3,), "real"), ((2, 1), "real"), const=(0,),
                   ref=lambda c, a, b: np.where(c != 0, a, b)))
    for name, ref in [("safe_mul", np.multiply), ("safe_div", np.divide)]:
        prim = REGISTRY[name]
        for sx, sy in PAIRS[1:]:
            add(name, D(name, lambda a, b, prim=prim: prim(a, b), (sx, "real"),
                        (sy, "away0"), ref=ref))


def _add_cut_cases(add):
    """Primitives that cut the graph by definition, and the internal copy and zeros_like."""
    # -- cut by definition: comparisons, stop_gradient, zeros_like --------------------
    for name, op, ref in [("lt", "<", np.less), ("le", "<=", np.less_equal),
                          ("gt", ">", np.greater), ("ge", ">=", np.greater_equal),
                          ("eq", "==", np.equal), ("ne", "!=", np.not_equal)]:
        add(name, E(f"(x {op} y) * y", lambda x, y, ref=ref: ref(x, y) * y, unconnected=("x",),
                    x=((2, 3), "real"), y=((3,), "real")))
    add("eq", E("(x == x) * y", lambda x, y: y + 0 * x, unconnected=("x",),
                x=((3,), "real"), y=((3,), "real")))
    add("switch_lt", D("switch_lt(a, b) * b", lambda a, b: P.switch_lt(a, b) * b,
                       ((2, 3), "real"), ((3,), "real"), const=(0,), ref=lambda a, b: np.less(a, b) * b))
    add("stop_gradient",
        E("stop_gradient(x) * y", lambda x, y: x * y, zero=("x",), unconnected=("x",),
          x=((3,), "real"), y=((2, 3), "real")))
    add("copy",  # `a = x` names a copy of x
        D("copy(a) * sin(a)", lambda a: P.copy(a) * P.sin(a), ((), "real"), ref=lambda a: a * np.sin(a)),
        D("copy(a) * a + a", lambda a: P.copy(a) * a + a, ((2, 3), "real"), ref=lambda a: a * a + a))
    add("zeros_like", D("zeros_like(a) + b", lambda a, b: P.zeros_like(a) + b,
                        ((3,), "real"), ((2, 3), "real"), ref=lambda a, b: 0 * a + b))


def _add_reduction_cases(add):
    """Reductions and the softmax family."""
    # -- reductions ---------------------------------------------------------------
    for name, (ref, dom) in REDUCTIONS.items():
        for shape, kw in AXES:
            add(name, E(f"{name}(x{_kw(**kw)})", lambda x, ref=ref, kw=kw: ref(x, **kw),
                        x=(shape, dom)))
    add("prod",
        E("prod(x)", np.prod, hessian_bug=PROD_OTHERS_ZERO_BUG, x=[0.0, 2.0, 3.0]),
        E("prod(x)", np.prod, hessian_bug=PROD_OTHERS_ZERO_BUG, x=[0.0, 0.0, 3.0]),
        E("prod(x, axis=0)", lambda x: np.prod(x, axis=0), hessian_bug=PROD_OTHERS_ZERO_BUG,
          x=[[0.0, 2.0, 1.5], [3.0, 4.0, 0.0]]))
    for src, ref, shape in [
            ("mean(x)", np.mean, (2, 3)),
            ("mean(x, axis=1, keepdims=true)", lambda x: np.mean(x, 1, keepdims=True), (2, 3)),
            ("var(x)", np.var, (4,)),
            ("var(x, axis=0, ddof=1)", lambda x: np.var(x, 0, ddof=1), (3, 2)),
            ("std(x, ddof=1)", lambda x: np.std(x, ddof=1), (2, 3)),
            ("std(x, axis=1, keepdims=true)", lambda x: np.std(x, 1, keepdims=True), (2, 3)),
            ("std(x, axis=(0, 1), ddof=2)", lambda x: np.std(x, (0, 1), ddof=2), (2, 3))]:
        add("sum", E(src, ref, x=(shape, "real")))
    for xs in [((4,), (-1,)), ((2, 3), (-2,)), ((2, 3), (-2, -1))]:
        shape, axes = xs
        add("prod_others", D(f"prod_others(axes={axes})",
                             lambda a, axes=axes, shape=shape: P.prod_others(a, axes=axes,
                                                                             xshape=shape),
                             (shape, "real"), ref=lambda a, axes=axes: _np_prod_others(a, axes)))
    add("prod_others", D("prod_others(axes=(-1,))",
                         lambda a: P.prod_others(a, axes=(-1,), xshape=(4,)),
                         [0.0, 2.0, 3.0, 4.0], ref=lambda a: _np_prod_others(a, (-1,)),
                         bug=PROD_OTHERS_ZERO_BUG))

    for xs in [((4,), (-1,), [0.5, 2.0, -3.0, 4.0]), ((4,), (-1,), [0.0, 2.0, 3.0, 4.0])]:
        shape, axes, x0 = xs
        t0 = [0.3, -1.2, 0.7, 2.0]
        add("prod_others_jvp", D(f"prod_others_jvp(axes={axes}) at {x0}",
                                 lambda a, t, axes=axes, shape=shape: P.prod_others_jvp(
                                     a, t, axes=axes, xshape=shape),
                                 x0, t0, ref=lambda a, t: _np_prod_others_jvp(a, t),
                                 bug=None if x0[0] else "third derivatives of prod are exact only away from zeros"))

    # -- softmax family ---------------------------------------------------------------
    for name, ref in [("softmax", np_softmax), ("log_softmax", np_log_softmax)]:
        for shape, kw in [((3,), {}), ((2, 3), {}), ((2, 3), {"axis": 0}), ((2, 3), {"axis": -2})]:
            add(name, E(f"{name}(x{_kw(**kw)})", lambda x, ref=ref, kw=kw: ref(x, **kw),
                        x=(shape, "real")))


def _add_shape_cases(add):
    """Shape primitives (indexing: _add_indexing_cases)."""
    # -- shapes ---------------------------------------------------------------------
    add("reshape",
        E("reshape(x, (3, 2))", lambda x: x.reshape(3, 2), x=((2, 3), "real")),
        E("reshape(x, (2, 1, 3))", lambda x: x.reshape(2, 1, 3), x=((6,), "real")),
        E("reshape(x, (-1,))", lambda x: x.reshape(-1), x=((2, 3), "real")),
        E("reshape(x, (1, 1))", lambda x: x.reshape(1, 1), x=((), "real")),
        E("flatten(x)", lambda x: x.ravel(), x=((3, 2), "real")))
    for src, ref, shape, bug in [
            ("x[1]", lambda x: x[1], (3,), None),
            ("x[-1]", lambda x: x[-1], (4,), None),
            ("x[1:3]", lambda x: x[1:3], (5,), None),
            ("x[::2]", lambda x: x[::2], (5,), None),
            ("x[3:0:-1]", lambda x: x[3:0:-1], (5,), None),
            ("x[4:1:-2]", lambda x: x[4:1:-2], (5,), None),
            ("x[1:100]", lambda x: x[1:100], (4,), None),
            ("x[-100:2]", lambda x: x[-100:2], (4,), None),
            ("x[::-1]", lambda x: x[::-1], (5,), NEG_STEP_BUG),
            ("x[::-2]", lambda x: x[::-2], (5,), NEG_STEP_BUG),
            ("x[-2::-1]", lambda x: x[-2::-1], (5,), NEG_STEP_BUG),
            ("x[2:-100:-1]", lambda x: x[2:-100:-1], (5,), NEG_STEP_BUG),
            ("x[:, 1]", lambda x: x[:, 1], (2, 3), None),
            ("x[0, 1:]", lambda x: x[0, 1:], (2, 3), None),
            ("x[-1, -1]", lambda x: x[-1, -1], (2, 3), None),
            ("x[1, ::-1]", lambda x: x[1, ::-1], (2, 3), NEG_STEP_BUG),
            ("x[1:, 2:0:-2]", lambda x: x[1:, 2:0:-2], (3, 3), None),
            ("x[0] * x[2] + x[1:]", lambda x: x[0] * x[2] + x[1:], (4,), None),
            ("x[2:1]", lambda x: x[2:1], (4,), EMPTY_REV_BUG)]:
        add("index", E(src, ref, bug=bug, x=(shape, "real")))
    for label, idx, shape, xs, ref, bug in [
            ("index_put([1:3], (4,))", (slice(1, 3, 1),), (4,), (2,),
             lambda a: _put(a, np.s_[1:3], 4), None),
            ("index_put([1], (3,))", (1,), (3,), (), lambda a: _put(a, np.s_[1], 3), None),
            ("index_put([:, 2], (2, 3))", (slice(None), 2), (2, 3), (2,),
             lambda a: _put(a, np.s_[:, 2], (2, 3)), None),
            ("index_put([3:0:-2], (4,))", (slice(3, 0, -2),), (4,), (2,),
             lambda a: _put(a, np.s_[3:0:-2], 4), None),
            ("index_put([3::-2], (4,))", (slice(3, None, -2),), (4,), (2,),
             lambda a: _put(a, np.s_[3::-2], 4), None)]:
        add("index_put", D(label, lambda a, idx=idx, shape=shape: P.index_put(a, idx=idx, shape=shape),
                           (xs, "real"), ref=ref, bug=bug))
    for label, idx, xs, vs in [("add_at([1:3], (4,))", (slice(1, 3, 1),), (4,), (2,)),
                               ("add_at([1], (3,))", (1,), (3,), ()),
                               ("add_at([:, 2], (2, 3))", (slice(None), 2), (2, 3), (2,)),
                               ("add_at([3:0:-2], (4,))", (slice(3, 0, -2),), (4,), (2,))]:
        # (internal: the traced backward pass's acc + index_put(v), see transforms._added_at)
        add("add_at", D(label, lambda acc, v, idx=idx, xs=xs: P.add_at(acc, v, idx=idx, shape=xs),
                        (xs, "real"), (vs, "real"), ref=lambda acc, v, idx=idx, xs=xs: acc + _put(v, idx, xs)))
    _add_indexing_cases(add)
    add("concat",
        E("concat(x, y)", lambda x, y: np.concatenate([x, y]), x=((2,), "real"), y=((3,), "real")),
        E("concat(x, y, axis=1)", lambda x, y: np.concatenate([x, y], 1),
          x=((2, 1), "real"), y=((2, 3), "real")),
        E("concat(x, y, axis=-2)", lambda x, y: np.concatenate([x, y], -2),
          x=((1, 3), "real"), y=((2, 3), "real")),
        E("concat(x, y, x)", lambda x, y: np.concatenate([x, y, x]), x=((2,), "real"), y=((1,), "real")),
        E("stack(x, y)", lambda x, y: np.stack([x, y]), x=((3,), "real"), y=((3,), "real")),
        E("stack(x, y, axis=1)", lambda x, y: np.stack([x, y], 1), x=((2, 3), "real"), y=((2, 3), "real")),
        E("stack(x, y, axis=-1)", lambda x, y: np.stack([x, y], -1), x=((), "real"), y=((), "real")),
        E("[x, 2*y]", lambda x, y: np.array([x, 2 * y]), x=((2,), "real"), y=((2,), "real")),
        E("[[cos(t), -sin(t)], [sin(t), cos(t)]]",
          lambda t: np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]]), t=((), "real")))
    add("transpose",
        E("transpose(x)", lambda x: x.T, x=((2, 3), "real")),
        E("transpose(x)", lambda x: x.T, x=((3,), "real")),
        E("transpose(x, axes=(1, 2, 0))", lambda x: x.transpose(1, 2, 0), x=((2, 3, 2), "real")),
        E("transpose(x, axes=(2, 0, 1))", lambda x: x.transpose(2, 0, 1), x=((2, 3, 2), "real")))
    for label, bug, xs, to in [("broadcast_to(2, 3)", None, (3,), (2, 3)),
                              ("broadcast_to(2, 3)", None, (2, 1), (2, 3)),
                              ("broadcast_to(2, 2)", None, (), (2, 2)),
                              ("broadcast_to(2, 1, 3)", BROADCAST_TO_BUG, (1, 3), (2, 1, 3)),
                              ("broadcast_to(2, 3, 2)", BROADCAST_TO_BUG, (3, 1), (2, 3, 2))]:
        add("broadcast_to", D(label, lambda a, to=to: P.broadcast_to(a, shape=to), (xs, "real"),
                              ref=lambda a, to=to: np.broadcast_to(a, to), bug=bug))
    # the same bug through the public API: gradcalc.jvp with a tangent for x alone returns
    # shape (1, 2, 2, 3), and jacobian(mode="fwd", wrt=["x"]) raises a ValueError
    add("broadcast_to", E("x + y", np.add, bug=BROADCAST_TO_BUG, x=((1, 3), "real"),
                          y=((2, 2, 3), "real")))
    for xs, to, bug in [((2, 3), (3,), None), ((2, 3), (2, 1), None), ((2, 3), (), None),
                        ((2, 3), (1, 3), None), ((2, 3, 2), (3, 1), BROADCAST_TO_BUG)]:
        add("sum_to", D(f"sum_to{to}", lambda a, to=to: P.sum_to(a, shape=to), (xs, "real"),
                        ref=lambda a, to=to: _np_sum_to(a, to), bug=bug))


def _einsum_case(subscripts, **inputs) -> Case:
    names = ", ".join(inputs)
    return E(f"einsum('{subscripts}', {names})", lambda *xs: np.einsum(subscripts, *xs), **inputs)


def _add_einsum_cases(add):
    """einsum and the contractions written over it (NumPy's own functions are the reference)."""
    r = "real"
    add("einsum",
        _einsum_case("ij,j->i", A=((2, 3), r), x=((3,), r)),
        _einsum_case("ij,jk", A=((2, 3), r), B=((3, 2), r)),
        _einsum_case("ii", A=((3, 3), r)),  # a trace: the VJP ties the repeated letter by eye
        _einsum_case("ii->i", A=((3, 3), r)),
        _einsum_case("ij->", A=((2, 3), r)),  # a letter only one operand has: ones bring it back
        _einsum_case("ij->ji", A=((2, 3), r)),
        _einsum_case("i,j->ij", x=((2,), r), y=((3,), r)),
        _einsum_case("bij,bjk->bik", A=((2, 2, 3), r), B=((2, 3, 2), r)),
        _einsum_case("ij,jk,kl->il", A=((2, 3), r), B=((3, 2), r), C=((2, 2), r)),
        _einsum_case("i,i", x=((3,), r), y=((3,), r)),
        E("tensordot(A, B, axes=1)", lambda A, B: np.tensordot(A, B, 1), A=((2, 3), r), B=((3, 2), r)),
        E("tensordot(A, B)", np.tensordot, A=((2, 2, 3), r), B=((2, 3, 2), r)),
        E("tensordot(A, B, axes=((0, 1), (1, 0)))", lambda A, B: np.tensordot(A, B, ((0, 1), (1, 0))),
          A=((2, 3), r), B=((3, 2), r)),
        E("inner(A, B)", np.inner, A=((2, 3), r), B=((4, 3), r)),
        E("inner(x, y)", np.inner, x=((3,), r), y=((3,), r)),
        E("kron(A, B)", np.kron, A=((2, 3), r), B=((2, 2), r)),
        E("kron(x, B)", np.kron, x=((3,), r), B=((2, 2), r)))
    add("matmul", E("vdot(A, B)", np.vdot, A=((2, 3), r), B=((3, 2), r)))


def _add_stack_cases(add):
    """Stacks of matrices (leading axes), as numpy.linalg takes them."""
    w = "wellcond"
    add("det", E("det(A)", np.linalg.det, A=((2, 3, 3), w)), E("det(A)", np.linalg.det, A=((2, 1, 2, 2), w)))
    add("adjugate", D("adjugate 2x3x3", lambda a: P.adjugate(a), ((2, 3, 3), w),
                      ref=lambda a: np.linalg.det(a)[..., None, None] * np.linalg.inv(a)))
    add("inv", E("inv(A)", np.linalg.inv, A=((2, 3, 3), w)))
    add("solve",
        E("solve(A, b)", np.linalg.solve, A=((2, 3, 3), w), b=((3,), "real")),
        E("solve(A, b)", np.linalg.solve, A=((2, 3, 3), w), b=((3, 2), "real")),
        E("solve(A, b)", np.linalg.solve, A=((2, 3, 3), w), b=((2, 3, 2), "real")),
        E("solve(A, b)", np.linalg.solve, A=((3, 3), w), b=((2, 3, 1), "real")))


def _np_sym(a):
    return a + np.swapaxes(a, -1, -2)


def _sym(a):
    return a + P.mT(a)


def _add_spectral_cases(add):
    """slogdet, cholesky, eigh.  Their inputs are symmetric by construction where NumPy reads
    one triangle (the derivatives treat the matrix as symmetric)."""
    w, r = "wellcond", "real"
    add("logabsdet", *[D(f"logabsdet {s}", lambda a: P.logabsdet(a), (s, w),
                         ref=lambda a: np.linalg.slogdet(a)[1]) for s in [(1, 1), (3, 3), (2, 3, 3)]],
        D("logabsdet -A", lambda a: P.logabsdet(-a), ((3, 3), w), ref=lambda a: np.linalg.slogdet(-a)[1]))
    add("slogdet_sign", *[D(f"slogdet_sign {s}", lambda a: P.slogdet_sign(a), (s, w),
                            ref=lambda a: np.linalg.slogdet(a)[0]) for s in [(3, 3), (2, 3, 3)]])
    add("cholesky",
        E("cholesky(A @ transpose(A) + eye(3))", lambda A: np.linalg.cholesky(A @ A.T + np.eye(3)),
          A=((3, 3), r)),
        E("cholesky(A @ swapaxes(A, -1, -2) + eye(2))",
          lambda A: np.linalg.cholesky(A @ np.swapaxes(A, -1, -2) + np.eye(2)), A=((2, 2, 2), r)))
    add("eigh_values", *[D(f"eigh_values {s}", lambda a: P.eigh_values(_sym(a)), (s, r),
                           ref=lambda a: np.linalg.eigvalsh(_np_sym(a))) for s in [(2, 2), (3, 3), (2, 2, 2)]])
    add("eigh_vectors", *[D(f"eigh_vectors {s}", lambda a: P.eigh_vectors(_sym(a)), (s, r),
                            ref=lambda a: np.linalg.eigh(_np_sym(a))[1]) for s in [(2, 2), (3, 3), (2, 3, 3)]])
    _add_factorisation_cases(add)


def _add_factorisation_cases(add):
    """svd, qr, pinv: square, tall and wide matrices and stacks of them (random matrices have
    distinct singular values and full rank)."""
    r = "real"
    for name, ref in [("svd_s", lambda a: np.linalg.svd(a)[1]),
                      ("svd_u", lambda a: np.linalg.svd(a, full_matrices=False)[0]),
                      ("svd_vt", lambda a: np.linalg.svd(a, full_matrices=False)[2]),
                      ("pinv", np.linalg.pinv)]:
        prim = REGISTRY[name]
        add(name, *[D(f"{name} {s}", lambda a, prim=prim: prim(a), (s, r), ref=ref)
                    for s in [(3, 3), (4, 2), (2, 4), (2, 3, 3), (2, 4, 3), (2, 2, 3)]])
    for name, ref in [("qr_q", lambda a: np.linalg.qr(a)[0]), ("qr_r", lambda a: np.linalg.qr(a)[1])]:
        prim = REGISTRY[name]
        add(name, *[D(f"{name} {s}", lambda a, prim=prim: prim(a), (s, r), ref=ref)
                    for s in [(3, 3), (4, 2), (2, 3, 3), (2, 4, 3)]])
    # the same through the language (these also get their second derivatives checked)
    for s in [(3, 3), (4, 2), (2, 2, 3)]:
        add("svd_s", E("U, s, Vt = svd(A); s", lambda A: np.linalg.svd(A)[1], A=(s, r)))
        add("svd_u", E("U, s, Vt = svd(A); U", lambda A: np.linalg.svd(A, full_matrices=False)[0], A=(s, r)))
        add("svd_vt", E("U, s, Vt = svd(A); Vt", lambda A: np.linalg.svd(A, full_matrices=False)[2], A=(s, r)))
        add("pinv", E("pinv(A)", np.linalg.pinv, A=(s, r)))
    add("svd_s", E("svd(A, compute_uv=false)", lambda A: np.linalg.svd(A, compute_uv=False), A=((2, 3), r)))
    for s in [(3, 3), (4, 2), (2, 3, 2)]:
        add("qr_q", E("Q, R = qr(A); Q", lambda A: np.linalg.qr(A)[0], A=(s, r)))
        add("qr_r", E("Q, R = qr(A); R", lambda A: np.linalg.qr(A)[1], A=(s, r)))
    add("qr_r", E("qr(A, mode='r')", lambda A: np.linalg.qr(A, mode="r"), A=((3, 2), r)))
    _add_composed_linalg_cases(add)


def _add_composed_linalg_cases(add):
    """matrix_power, cross and norm's orders: compositions of primitives, keyed by the
    primitive that carries their derivative."""
    r, w = "real", "wellcond"
    add("matmul", *[E(f"matrix_power(A, {n})", lambda A, n=n: np.linalg.matrix_power(A, n), A=(s, w))
                    for n, s in [(2, (3, 3)), (3, (2, 2, 2)), (5, (3, 3)), (6, (2, 2, 2))]])
    add("inv", *[E(f"matrix_power(A, {n})", lambda A, n=n: np.linalg.matrix_power(A, n), A=(s, w))
                 for n, s in [(-1, (3, 3)), (-3, (2, 2, 2))]])
    add("index", E("cross(a, b)", np.cross, a=((3,), r), b=((2, 3), r)),
        E("cross(a, b, axisa=0, axisc=0)", lambda a, b: np.cross(a, b, axisa=0, axisc=0),
          a=((3, 2), r), b=((2, 3), r)),
        E("cross(a, b, axis=0)", lambda a, b: np.cross(a, b, axis=0), a=((3, 2), r), b=((3, 1), r)))
    norm = np.linalg.norm
    add("norm", E("norm(x, axis=(0, 1))", lambda x: norm(x, axis=(0, 1)), x=((2, 3, 2), r)),
        E("norm(x, ord='fro', axis=(2, 0), keepdims=true)",
          lambda x: norm(x, "fro", axis=(2, 0), keepdims=True), x=((2, 3, 2), r)),
        E("norm(x, ord=2)", lambda x: norm(x, 2), x=((3,), r)))
    add("abs", E("norm(x, ord=1)", lambda x: norm(x, 1), x=((4,), "away0")),
        E("norm(x, ord=1)", lambda x: norm(x, 1), x=((3, 3), "distinct")),
        E("norm(x, ord=-1, axis=(1, 0))", lambda x: norm(x, -1, axis=(1, 0)), x=((3, 3), "distinct")),
        E("norm(x, ord=inf, axis=(1, 2))", lambda x: norm(x, np.inf, axis=(1, 2)), x=((2, 3, 3), "distinct")),
        E("norm(x, ord=-inf)", lambda x: norm(x, -np.inf), x=((3, 2), "distinct")))
    add("max", E("norm(x, ord=inf)", lambda x: norm(x, np.inf), x=((4,), "distinct")))
    add("min", E("norm(x, ord=-inf, axis=0)", lambda x: norm(x, -np.inf, axis=0), x=((4, 2), "distinct")))
    add("pow_const", E("norm(x, ord=3, axis=-1)", lambda x: norm(x, 3, axis=-1), x=((2, 3), r)),
        E("norm(x, ord=0.5)", lambda x: norm(x, 0.5), x=((3,), "away0")))
    add("svd_s", E("norm(A, ord=2)", lambda A: norm(A, 2), A=((3, 2), r)),
        E("norm(A, ord='nuc')", lambda A: norm(A, "nuc"), A=((2, 3), r)),
        E("norm(A, ord=-2, axis=(0, 2))", lambda A: norm(A, -2, axis=(0, 2)), A=((3, 2, 3), r)))


def _add_linalg_cases(add):
    """Linear algebra."""
    # -- linear algebra ---------------------------------------------------------------
    # (stacks against a vector, (2, 2, 3) @ (3,) and (3,) @ (2, 3, 2): NumPy's semantics; their
    # derivatives used to fail or exit 3)
    for sx, sy in [((3,), (3,)), ((3,), (3, 2)), ((2, 3), (3,)), ((2, 3), (3, 2)), ((1, 3), (3, 1)),
                   ((2, 2, 3), (3,)), ((3,), (2, 3, 2)), ((2, 2, 3), (3, 2)), ((3, 2), (2, 2, 3))]:
        add("matmul", E("x @ y", np.matmul, x=(sx, "real"), y=(sy, "real")))
    add("matmul",
        E("matmul(x, y)", np.matmul, x=((2, 2), "real"), y=((2, 3), "real")),
        E("dot(x, y)", np.dot, x=((3,), "real"), y=((3,), "real")),
        E("x @ x", lambda x: x @ x, x=((3,), "real")),
        E("x @ A @ x", lambda x, A: x @ A @ x, x=((3,), "real"), A=((3, 3), "real")),
        E("eye(2, 3) @ x", lambda x: np.eye(2, 3) @ x, x=((3,), "real")))
    add("det", *[E("det(A)", np.linalg.det, A=((n, n), "wellcond")) for n in (1, 2, 3)])
    add("det", E("det(A)", np.linalg.det, A=[[1.0, 2.0], [2.0, 4.0]],  # singular: adj(A) still
                 hessian_bug="second derivatives of det need an invertible matrix (documented)"))
    add("adjugate", *[D(f"adjugate {n}x{n}", lambda a: P.adjugate(a), ((n, n), "wellcond"),
                        ref=lambda a: np.linalg.det(a) * np.linalg.inv(a)) for n in (1, 2, 3)])
    add("inv", *[E("inv(A)", np.linalg.inv, A=((n, n), "wellcond")) for n in (2, 3)],
        E("inv(A) @ b", lambda A, b: np.linalg.inv(A) @ b, A=((2, 2), "wellcond"), b=((2,), "real")))
    add("solve",
        E("solve(A, b)", np.linalg.solve, A=((3, 3), "wellcond"), b=((3,), "real")),
        E("solve(A, b)", np.linalg.solve, A=((3, 3), "wellcond"), b=((3, 2), "real")),
        E("solve(A, b)", np.linalg.solve, A=((2, 2), "wellcond"), b=((2, 1), "real")))
    _add_einsum_cases(add)
    _add_stack_cases(add)
    _add_spectral_cases(add)
    add("diag",
        E("diag(x)", np.diag, x=((3, 3), "real")),
        E("diag(x, k=1)", lambda x: np.diag(x, 1), x=((3, 3), "real")),
        E("diag(x, k=-1)", lambda x: np.diag(x, -1), x=((2, 3), "real")),
        E("diag(x, k=2)", lambda x: np.diag(x, 2), x=((2, 4), "real")),
        E("trace(x)", np.trace, x=((3, 3), "real")),
        E("trace(x)", np.trace, x=((2, 3), "real")))
    add("diag_embed",
        E("diag(v)", np.diag, v=((3,), "real")),
        E("diag(v, k=1)", lambda v: np.diag(v, 1), v=((2,), "real")),
        E("diag(v, k=-2)", lambda v: np.diag(v, -2), v=((2,), "real")),
        D("diag_embed(k=1, shape=(3, 4))", lambda a: P.diag_embed(a, k=1, shape=(3, 4)),
          ((3,), "real"), ref=lambda a: np.eye(3, 4, 1) * np.pad(a, (1, 0))[None, :]))


def _add_integer_and_mask_cases(add):
    """// and % (numerators off the grid of the divisor: no jump within a step), and the
    logical masks (nonzero is true; no gradient)."""
    for name, ref in [("logical_and", np.logical_and), ("logical_or", np.logical_or)]:
        prim = REGISTRY[name]
        for sm, sn in [((3,), (3,)), ((2, 3), (3,)), ((), (2, 1))]:
            add(name, D(f"{name}(m, n) * y", lambda m, n, y, prim=prim: prim(m, n) * y,
                        (sm, "truthy"), (sn, "truthy"), ((2, 3), "real"), const=(0, 1),
                        ref=lambda m, n, y, ref=ref: ref(m != 0, n != 0) * y))
    for shape in [(), (4,), (2, 3)]:
        add("logical_not", D("logical_not(m) * y", lambda m, y: P.logical_not(m) * y,
                             (shape, "truthy"), (shape, "real"), const=(0,),
                             ref=lambda m, y: (m == 0) * y))
    for sa, sb in PAIRS:
        add("floor_divide", D("floor_divide(a, b)", lambda a, b: P.floor_divide(a, b),
                              (sa, "offgrid"), (sb, "divisor"), ref=np.floor_divide))
        add("mod", D("mod(a, b)", lambda a, b: P.mod(a, b), (sa, "offgrid"), (sb, "divisor"),
                     ref=np.mod))
    add("floor_divide", D("floor_divide(a, b) * a", lambda a, b: P.floor_divide(a, b) * a,
                          ((3,), "offgrid"), ((2, 1), "divisor"), ref=lambda a, b: np.floor_divide(a, b) * a))
    add("mod", D("mod(a, b) * b", lambda a, b: P.mod(a, b) * b, ((2, 3), "offgrid"), ((3,), "divisor"),
                 ref=lambda a, b: np.mod(a, b) * b))


def _add_indexing_cases(add):
    """Gathers, index_put's scatter-add, index_update and index_add, traced directly (the
    language reaches them once it has integer-array indexing): repeated, negative, 2-D,
    non-adjacent advanced indices, None and '...', masks.  check_traced also runs each
    derivative pass with a leading batch axis."""
    rep = np.array([0, 0, 2, -1])
    for label, idx, shape in [
            ("x[[0, 0, 2, -1]]", (rep,), (4,)),
            ("x[[[1, 0], [1, 1]]]", (np.array([[1, 0], [1, 1]]),), (3,)),
            ("x[[0, 0, 2, -1], 1:]", (rep, slice(1, None)), (4, 3)),
            ("x[:, [2, 2, 0]]", (slice(None), np.array([2, 2, 0])), (2, 3)),
            ("x[[1, 0, 1], [2, 2, 0]]", (np.array([1, 0, 1]), np.array([2, 2, 0])), (2, 3)),
            ("x[[1, 0, 1], :, [2, 2, 0]]", (np.array([1, 0, 1]), slice(None), np.array([2, 2, 0])), (2, 3, 4)),
            ("x[0, :, [1, 1]]", (0, slice(None), np.array([1, 1])), (2, 3, 4)),
            ("x[[0, 1], None, [1, 1]]", (np.array([0, 1]), None, np.array([1, 1])), (2, 3)),
            ("x[None, ..., [1, -1]]", (None, Ellipsis, np.array([1, -1])), (2, 3)),
            ("x[..., None, 1]", (Ellipsis, None, 1), (2, 3)),
            ("x[mask]", (np.array([[True, False, True], [False, False, True]]),), (2, 3)),
            ("x[[]]", (np.array([], dtype=np.intp),), (3,))]:
        add("index", D(label, lambda a, idx=idx: P.index(a, idx=idx), (shape, "real"),
                       ref=lambda a, idx=idx: a[idx]))
    add("index_put", D("index_put([[0, 0, 2, -1]], (4,))",
                       lambda a: P.index_put(a, idx=(rep,), shape=(4,)), ((4,), "real"),
                       ref=lambda a: _np_add_at(np.zeros(4), (rep,), a)))
    for label, idx, xs, vs in [
            ("[[0, 0, 2, -1]]", (rep,), (5,), (4,)),
            ("[[0, 0, 2, -1]], v scalar", (rep,), (5,), ()),
            ("[[1, 1], :, [0, 0]]", (np.array([1, 1]), slice(None), np.array([0, 0])), (2, 3, 4), (3,)),
            ("[[1, 0], :, [0, 3]]", (np.array([1, 0]), slice(None), np.array([0, 3])), (2, 3, 4), (2, 3)),
            ("[:, [2, 0, 2]]", (slice(None), np.array([2, 0, 2])), (2, 3), (2, 1)),
            ("[1:3]", (slice(1, 3),), (4, 2), (2,)),
            ("[None, 1]", (None, 1), (3,), (1,)),
            ("[mask]", (np.array([True, False, True, True]),), (4,), (3,))]:
        for name, ref in [("index_update", _np_set), ("index_add", _np_add_at)]:
            prim = REGISTRY[name]
            add(name, D(f"{name}{label}", lambda x, v, idx=idx, prim=prim: prim(x, v, idx=idx),
                        (xs, "real"), (vs, "real"),
                        ref=lambda x, v, idx=idx, ref=ref: ref(x.copy(), idx, v)))


def _np_set(x, idx, v):
    x[idx] = v
    return x


def _np_add_at(x, idx, v):
    np.add.at(x, idx, v)
    return x


def _put(a, idx, shape):
    out = np.zeros(shape)
    out[idx] = a
    return out


def _np_sum_to(a, shape):
    lead = a.ndim - len(shape)
    a = a.sum(axis=tuple(range(lead))) if lead else a
    keep = tuple(i for i, d in enumerate(shape) if d == 1 and a.shape[i] != 1)
    return a.sum(axis=keep, keepdims=True) if keep else a


def _np_prod_others(a, axes):
    """For each element, the product of the others along axes, by brute force."""
    a = np.asarray(a)
    out = np.empty_like(a)
    for i in np.ndindex(a.shape):
        b = a.copy()
        b[i] = 1.0
        out[i] = np.prod(b, axis=axes, keepdims=True)[tuple(
            0 if (k - a.ndim) in axes else i[k] for k in range(a.ndim))]
    return out


TABLE = _build_table()
NONDIFF_ARGS = {"where": {0}}  # arguments that may have no rule (where's condition)


def _case_params():
    return [pytest.param(name, c, id=f"{name}: {c.id}",
                         marks=[pytest.mark.xfail(strict=True, reason=c.bug)] if c.bug else [])
            for name, cs in TABLE.items() for c in cs]


CASES = _case_params()


def _equations(case: Case):
    """The forward equations one case records."""
    at = case.point()
    if case.src is not None:
        return lower.trace(gradcalc.parse(case.src), at).tape.equations
    b = Builder()
    case.fn(*[b.input(v) for v in at.values()])
    return b.equations


def run(case: Case):
    at = case.point()
    if case.src is not None:
        return check_program(case.src, at, ref=case.ref, zero=case.zero,
                             unconnected=case.unconnected)
    args = list(at.values())
    return check_traced(case.fn, args, [i for i in range(len(args)) if i not in case.const],
                        ref=case.ref)


# ==========================================================================
# 1. The registry and the table
# ==========================================================================

N_COVERED = sum(1 for name in REGISTRY if TABLE.get(name))


@pytest.mark.parametrize("count", [N_COVERED], ids=[f"{N_COVERED}-of-{len(REGISTRY)}-primitives"])
def test_table_covers_registry(count, capsys):
    missing = [name for name in REGISTRY if not TABLE.get(name)]
    stale = [name for name in TABLE if name not in REGISTRY]
    with capsys.disabled():
        print(f"\n[test_primitives] {count} of {len(REGISTRY)} registry primitives covered, "
              f"{len(CASES)} derivative cases")
    assert not missing, f"primitives with no entry in TABLE (add cases for them): {missing}"
    assert not stale, f"TABLE entries for primitives not in the registry: {stale}"


@pytest.mark.parametrize("name", list(REGISTRY))
def test_cases_reach_their_primitive(name):
    """Each table entry records its primitive at least once (the table does not lie)."""
    prim = REGISTRY[name]
    assert TABLE.get(name), f"no cases for {name}"
    reached = [c.id for c in TABLE[name] if not c.bug and any(eq.prim is prim for eq in _equations(c))]
    assert reached, f"no case of {name!r} records the primitive"


@pytest.mark.parametrize("name", list(REGISTRY))
def test_rules_present(name):
    """A differentiable primitive has a VJP and a JVP rule for each argument."""
    prim = REGISTRY[name]
    if not prim.differentiable:
        return
    assert prim.vjp is not None and prim.jvp is not None, f"{name} lacks a vjp or jvp rule"
    if prim.variadic:
        assert callable(prim.vjp) and callable(prim.jvp)
        return
    arities = {len(eq.args) for c in TABLE[name] if not c.bug
               for eq in _equations(c) if eq.prim is prim}
    assert len(arities) == 1, f"{name} recorded with {arities} arguments"
    (n,) = arities
    for kind, rules in [("vjp", prim.vjp), ("jvp", prim.jvp)]:
        assert isinstance(rules, tuple), f"{name}.{kind} is not a tuple of rules"
        assert len(rules) == n, f"{name}.{kind} has {len(rules)} rules for {n} arguments"
        for i, rule in enumerate(rules):
            if rule is None:
                assert i in NONDIFF_ARGS.get(name, ()), f"{name}.{kind}[{i}] is None"
            else:
                assert callable(rule)


SPEC_FUNCTIONS = """
abs sign sqrt cbrt exp expm1 exp2 log log1p log2 log10 sin cos tan asin acos atan sinh cosh
tanh asinh acosh atanh sigmoid relu softplus floor ceil round
atan2 hypot maximum minimum pow where clip
sum mean prod max min norm var std logsumexp
matmul dot outer trace diag det inv solve transpose einsum tensordot inner vdot kron
cholesky svd qr pinv matrix_power cross
reshape flatten concat stack
softmax log_softmax
zeros ones eye arange linspace
stop_gradient
""".split()


def test_spec_functions_are_builtins():
    missing = [f for f in SPEC_FUNCTIONS if f not in lower.FUNCTIONS]
    assert not missing, f"SPEC §2 functions missing from gradcalc.lower.FUNCTIONS: {missing}"


def test_every_builtin_is_exercised():
    """Each built-in function appears in some derivative case's program."""
    used = {m for cs in TABLE.values() for c in cs if c.src
            for m in re.findall(r"\b([a-z_0-9]+)\(", c.src)}
    assert not [f for f in SPEC_FUNCTIONS if f not in used]


# ==========================================================================
# 2. Every differentiable primitive: rev vs fwd vs central differences
# ==========================================================================


@pytest.mark.parametrize("name, case", CASES)
def test_derivatives(name, case):
    report = run(case)
    assert report.ok, f"{case.id}\n{report}"


# Second order, every case in the language: the rules are traced, so each derivative
# pass is itself differentiated (the Hessian is forward over reverse).  sin() makes the
# second derivatives of linear primitives non-trivial.
def _sum_sin(src: str) -> str:
    """sum(sin(...)) of a case's output: its last statement (U, s, Vt = svd(A); U)."""
    head, _, last = src.rpartition(";")
    return f"{head}; sum(sin({last.strip()}))" if head else f"sum(sin({src}))"


HESSIAN_CASES = [
    pytest.param(name, c, id=f"{name}: {_sum_sin(c.src)} | {c.id.split(' | ')[1]}",
                 marks=[pytest.mark.xfail(strict=True, reason=c.hessian_bug)] if c.hessian_bug else [])
    for name, cs in TABLE.items() if REGISTRY[name].differentiable
    for c in cs if c.src and not c.bug and not c.zero]


@pytest.mark.parametrize("name, case", HESSIAN_CASES)
def test_second_derivatives(name, case):
    report = check_hessian(_sum_sin(case.src), case.point())
    assert report.ok, f"{case.id}\n{report}"


# ==========================================================================
# 3. Higher order: Hessians against closed forms and differences of grad
# ==========================================================================


def _hess_matrix(res, names, sizes):
    return np.block([[res[a][b].reshape(sizes[a], sizes[b]) for b in names] for a in names])


def test_hessian_sin_exp():
    x = np.array([0.3, -1.1, 2.0])
    src = "sum(sin(x) * exp(x))"
    h = gradcalc.hessian(src, at={"x": x})["x"]["x"]
    # d/dx e^x sin x = e^x (sin x + cos x); d2 = 2 e^x cos x, diagonal
    np.testing.assert_allclose(h, np.diag(2 * np.exp(x) * np.cos(x)), rtol=1e-13, atol=1e-13)
    assert check_hessian(src, {"x": x}).ok


def test_hessian_quadratic_form_nonsymmetric():
    A = np.array([[1.0, 2.0, 0.0], [-1.0, 3.0, 5.0], [4.0, 0.0, 2.0]])
    x = np.array([0.5, -1.0, 2.0])
    src = "A = [[1, 2, 0], [-1, 3, 5], [4, 0, 2]]\nx @ A @ x"
    h = gradcalc.hessian(src, at={"x": x})["x"]["x"]
    np.testing.assert_allclose(h, A + A.T, rtol=0, atol=1e-14)
    # with A as an input: d2/dx_m dA_kl = delta_mk x_l + x_k delta_ml, d2/dA2 = 0
    res = gradcalc.hessian("x @ A @ x", at={"x": x, "A": A})
    eye = np.eye(3)
    hxa = np.einsum("mk,l->mkl", eye, x) + np.einsum("k,ml->mkl", x, eye)
    np.testing.assert_allclose(res["x"]["x"], A + A.T, atol=1e-14)
    np.testing.assert_allclose(res["x"]["A"], hxa, atol=1e-14)
    np.testing.assert_allclose(res["A"]["x"], np.moveaxis(hxa, 0, -1), atol=1e-14)
    np.testing.assert_allclose(res["A"]["A"], np.zeros((3, 3, 3, 3)), atol=0)
    assert check_hessian("x @ A @ x", {"x": x, "A": A}).ok


def test_hessian_rosenbrock():
    res = gradcalc.hessian("(1 - x)^2 + 100 * (y - x^2)^2", at={"x": 1.0, "y": 1.0})
    np.testing.assert_allclose(_hess_matrix(res, ["x", "y"], {"x": 1, "y": 1}),
                               [[802, -400], [-400, 200]], rtol=0, atol=1e-12)
    vec = "sum(100 * (v[1:] - v[:-1]^2)^2 + (1 - v[:-1])^2)"
    np.testing.assert_allclose(gradcalc.hessian(vec, at={"v": [1.0, 1.0]})["v"]["v"],
                               [[802, -400], [-400, 200]], rtol=0, atol=1e-12)
    assert check_hessian(vec, {"v": np.array([0.3, -0.7, 1.2, 0.9])}).ok


def test_hessian_mixed_blocks():
    res = gradcalc.hessian("x^2 * y", at={"x": 3.0, "y": 2.0})
    np.testing.assert_allclose(_hess_matrix(res, ["x", "y"], {"x": 1, "y": 1}),
                               [[4.0, 6.0], [6.0, 0.0]], rtol=0, atol=1e-13)


def test_hessian_logsumexp_closed_form():
    x = np.array([0.2, -1.0, 1.5])
    s = np.exp(x) / np.exp(x).sum()
    h = gradcalc.hessian("logsumexp(x)", at={"x": x})["x"]["x"]
    np.testing.assert_allclose(h, np.diag(s) - np.outer(s, s), rtol=1e-12, atol=1e-14)


def test_hessian_prod_with_a_zero():
    h = gradcalc.hessian("prod(x)", at={"x": [0.0, 2.0, 3.0]})["x"]["x"]
    # d2/dx_i dx_j prod = prod of the others (i != j), 0 on the diagonal
    np.testing.assert_allclose(h, [[0, 3, 2], [3, 0, 0], [2, 0, 0]], rtol=0, atol=1e-14)


@pytest.mark.parametrize("x, y", [(3.0, 0.0), (0.5, 0.0), (3.0, 1.0), (2.0, 2.0), (0.7, -1.5), (3.0, 0.5)])
def test_hessian_of_pow_is_its_closed_form_at_y_zero_too(x, y):
    # The rule pinned d/dx = 0 at y = 0 with a where, whose y-derivative is 0: the mixed second
    # derivative at y = 0 came out 0 (d/dy d/dx) and 1/x (d/dx d/dy), where both are
    # x^(y-1) (1 + y log x) = 1/x (a JAX-oracle hunt; mpmath agrees)
    h = gradcalc.hessian("x^y", at={"x": x, "y": y})
    lx = math.log(x)
    want = [[y * (y - 1) * x ** (y - 2), x ** (y - 1) * (1 + y * lx)],
            [x ** (y - 1) * (1 + y * lx), x ** y * lx * lx]]
    got = [[h["x"]["x"], h["x"]["y"]], [h["y"]["x"], h["y"]["y"]]]
    np.testing.assert_allclose(np.array(got, dtype=float), want, rtol=1e-13, atol=0)
    inner = gradcalc.jacobian("def f(a) = a^y\ngrad(f)(x)", at={"x": x, "y": y})["_"]
    np.testing.assert_allclose([inner["x"], inner["y"]], want[0], rtol=1e-13, atol=0)


@pytest.mark.parametrize("x, y, want", [(0.0, 0.0, [[0.0, 0.0], [0.0, 0.0]]),
                                         (0.5, np.inf, [[np.nan, 0.0], [np.nan, 0.0]])])
def test_hessian_of_pow_where_it_has_no_derivative_stays_as_it_was(x, y, want):
    # x = y = 0: both mixed derivatives pinned to 0 (a safe product of y made one of them inf
    # and the other 0); y = inf: y x^(y-1) is inf * 0, nan with its warning, as in JAX
    h = gradcalc.hessian("x^y", at={"x": x, "y": y})
    got = [[h["x"]["x"], h["x"]["y"]], [h["y"]["x"], h["y"]["y"]]]
    np.testing.assert_array_equal(np.array(got, dtype=float), want)


def test_hessian_prod_away_from_zero():
    x = np.array([2.0, -3.0, 0.5])
    h = gradcalc.hessian("prod(x)", at={"x": x})["x"]["x"]
    want = np.array([[0, x[2], x[1]], [x[2], 0, x[0]], [x[1], x[0], 0]])
    np.testing.assert_allclose(h, want, rtol=1e-14, atol=1e-14)


# ==========================================================================
# 4. The checker catches a wrong rule
# ==========================================================================

AT = {"x": np.array([0.3, -1.2, 2.0])}


def _problems(report, text):
    return [p for p in report.problems if text in p]


def test_checker_passes_the_real_rules():
    assert check_program("sin(x)", AT).ok
    assert check_traced(lambda x: P.sin(x), [AT["x"]]).ok
    assert check_hessian("sum(sin(x))", AT).ok


def test_checker_catches_wrong_vjp(monkeypatch):
    # sin' = sin instead of cos
    replace_rule(monkeypatch, REGISTRY["sin"], "vjp", (lambda g, ans, x, **_: P.safe_mul(g, P.sin(x)),))
    report = check_program("sin(x)", AT)
    assert not report.ok
    assert _problems(report, "rev vs central differences")
    assert _problems(report, "rev vs fwd")
    assert not _problems(report, "fwd vs central differences")  # forward mode is still right
    assert not check_traced(lambda x: P.sin(x), [AT["x"]]).ok


def test_checker_catches_wrong_jvp(monkeypatch):
    replace_rule(monkeypatch, REGISTRY["sin"], "jvp", (lambda t, ans, x, **_: P.safe_mul(t, P.sin(x)),))
    report = check_program("sin(x)", AT)
    assert not report.ok
    assert _problems(report, "fwd vs central differences")
    assert _problems(report, "rev vs fwd")
    assert not _problems(report, "rev vs central differences")
    assert not check_traced(lambda x: P.sin(x), [AT["x"]]).ok


def test_checker_catches_wrong_broadcasting_rule(monkeypatch):
    # mul's rule for y returns g * y instead of g * x: wrong, and of the wrong shape before summing
    mul = REGISTRY["mul"]
    wrong = (mul.vjp[0], lambda g, ans, x, y, **_: P.safe_mul(g, y))
    replace_rule(monkeypatch, mul, "vjp", wrong)
    report = check_program("x * y", {"x": np.array([0.5, -1.0, 2.0]),
                                     "y": np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 0.25]])})
    assert not report.ok and _problems(report, "d/dy rev")


def test_hessian_checker_catches_wrong_second_order_rule(monkeypatch):
    # cos's JVP is used only when sin's derivative pass is differentiated again
    replace_rule(monkeypatch, REGISTRY["cos"], "jvp", (lambda t, ans, x, **_: P.safe_mul(t, P.sin(x)),))
    assert check_program("sum(sin(x))", AT).ok
    assert not check_hessian("sum(sin(x))", AT).ok


# ==========================================================================
# 5. Special values (SPEC §2), with closed forms
# ==========================================================================

E1 = np.e
FWD_ZERO_FACTOR_BUG = None  # fixed


def S(src, at, want, unconnected=(), fwd_bug=None):
    return (src, at, want, list(unconnected), fwd_bug)


SPECIAL = [  # program, point, {input: gradient (closed form)}, unconnected
    S("abs(x)", {"x": 0.0}, {"x": 0.0}),
    S("sum(abs(x))", {"x": [0.0, -1.0, 2.0]}, {"x": [0.0, -1.0, 1.0]}),
    S("relu(x)", {"x": 0.0}, {"x": 0.0}),
    S("sum(relu(x))", {"x": [0.0, -1.0, 2.0]}, {"x": [0.0, 0.0, 1.0]}),
    S("maximum(x, y)", {"x": 1.5, "y": 1.5}, {"x": 0.5, "y": 0.5}),
    S("minimum(x, y)", {"x": -1.5, "y": -1.5}, {"x": 0.5, "y": 0.5}),
    S("max(x)", {"x": [1.0, 3.0, 3.0]}, {"x": [0.0, 0.5, 0.5]}),
    S("min(x)", {"x": [2.0, 1.0, 1.0]}, {"x": [0.0, 0.5, 0.5]}),
    S("sum(max(x, axis=0))", {"x": [[1.0, 2.0], [1.0, 0.0]]}, {"x": [[0.5, 1.0], [0.5, 0.0]]}),
    S("norm(x)", {"x": [0.0, 0.0]}, {"x": [0.0, 0.0]}),
    S("norm(x)", {"x": [3.0, 4.0]}, {"x": [0.6, 0.8]}),
    S("where(x > 0, sqrt(x), 0)", {"x": 0.0}, {"x": 0.0}),
    S("sum(where(x > 0, sqrt(x), 0))", {"x": [0.0, 4.0]}, {"x": [0.0, 0.25]}),
    S("0 * sqrt(x)", {"x": 0.0}, {"x": 0.0}, fwd_bug=FWD_ZERO_FACTOR_BUG),
    S("x ^ y", {"x": 0.0, "y": 2.0}, {"x": 0.0, "y": 0.0}),
    S("x ^ 2", {"x": 0.0}, {"x": 0.0}),
    S("x ^ 0", {"x": 0.0}, {"x": 0.0}),
    S("x ^ 1", {"x": 0.0}, {"x": 1.0}),
    S("prod(x)", {"x": [0.0, 2.0, 3.0]}, {"x": [6.0, 0.0, 0.0]}),
    S("prod(x)", {"x": [0.0, 0.0, 3.0]}, {"x": [0.0, 0.0, 0.0]}),
    S("prod(x)", {"x": [2.0, 3.0, 4.0]}, {"x": [12.0, 8.0, 6.0]}),
    S("sum(clip(x, lo, hi))", {"x": [-2.0, 0.0, 2.0], "lo": -1.0, "hi": 1.0},
      {"x": [0.0, 1.0, 0.0], "lo": 1.0, "hi": 1.0}),
    S("clip(x, lo, hi)", {"x": -1.0, "lo": -1.0, "hi": 1.0}, {"x": 0.5, "lo": 0.5, "hi": 0.0}),
    S("sign(x) + floor(x) + ceil(x) + round(x)", {"x": 1.3}, {"x": 0.0}),
    S("floor(x) * y", {"x": 1.3, "y": 2.0}, {"x": 0.0, "y": 1.0}),
    S("stop_gradient(x) * y", {"x": 2.0, "y": 3.0}, {"x": 0.0, "y": 2.0}, ["x"]),
    S("stop_gradient(x)", {"x": 2.0}, {"x": 0.0}, ["x"]),
    S("(x > 0) * y", {"x": 2.0, "y": 3.0}, {"x": 0.0, "y": 1.0}, ["x"]),
    S("logsumexp(x)", {"x": [1000.0, 1001.0]}, {"x": [1 / (1 + E1), E1 / (1 + E1)]}),
]
# Exact zeros must come out exactly zero (never nan): atol is 0.  Otherwise 1e-12
# relative: logsumexp([1000, 1001]) loses a few digits to exp(x - 1001.31...).
SPECIAL_RTOL = 1e-12


@pytest.mark.parametrize("src, at, want, unconnected, fwd_bug", SPECIAL,
                         ids=[f"{s} at {a}" for s, a, *_ in SPECIAL])
def test_special_values_rev(src, at, want, unconnected, fwd_bug):
    res = gradcalc.grad(src, at=at)
    assert sorted(res.unconnected) == sorted(unconnected)
    for name, g in want.items():
        np.testing.assert_allclose(res[name], np.asarray(g, dtype=np.float64), rtol=SPECIAL_RTOL,
                                   atol=0, err_msg=f"rev d/d{name}")


@pytest.mark.parametrize("src, at, want, unconnected, fwd_bug", [
    pytest.param(*s, marks=[pytest.mark.xfail(strict=True, reason=s[4])] if s[4] else [])
    for s in SPECIAL], ids=[f"{s} at {a}" for s, a, *_ in SPECIAL])
def test_special_values_fwd(src, at, want, unconnected, fwd_bug):
    fwd = gradcalc.jacobian(src, at=at, mode="fwd")
    for name, g in want.items():
        np.testing.assert_allclose(fwd[fwd.of[0]][name], np.asarray(g, dtype=np.float64),
                                   rtol=SPECIAL_RTOL, atol=0, err_msg=f"fwd d/d{name}")


SECOND_ORDER_NAN_TRAP = None  # fixed


@pytest.mark.parametrize("x", [-1.0, 0.0])
def test_where_nan_trap_second_order(x):
    h = gradcalc.hessian("where(x > 0, sqrt(x), 0)", at={"x": x})["x"]["x"]
    np.testing.assert_array_equal(h, 0.0)


def test_where_nan_trap_first_order_unselected_nan():
    # the unselected branch is nan (sqrt(-1)); the gradient is still exactly 0, both modes
    assert gradcalc.grad("where(x > 0, sqrt(x), 0)", at={"x": -1.0})["x"] == 0.0
    fwd = gradcalc.jacobian("where(x > 0, sqrt(x), 0)", at={"x": -1.0}, mode="fwd")
    assert fwd["_"]["x"] == 0.0


def test_log_softmax_large_inputs():
    x = np.array([1000.0, 1001.0])
    s = np.array([1 / (1 + E1), E1 / (1 + E1)])
    value = gradcalc.evaluate("log_softmax(x)", at={"x": x})["_"]
    np.testing.assert_allclose(value, [-np.log1p(E1), -np.log1p(1 / E1)], rtol=1e-14)
    for mode in ("rev", "fwd"):
        res = gradcalc.jacobian("log_softmax(x)", at={"x": x}, mode=mode)
        assert not res.warnings
        # d log_softmax_i / d x_j = delta_ij - softmax_j
        np.testing.assert_allclose(res["_"]["x"], np.eye(2) - s[None, :], rtol=1e-14, atol=1e-16)
        sm = gradcalc.jacobian("softmax(x)", at={"x": x}, mode=mode)["_"]["x"]
        np.testing.assert_allclose(sm, np.diag(s) - np.outer(s, s), rtol=1e-13, atol=1e-16)


def test_round_half_to_even():
    value = gradcalc.evaluate("round(x)", at={"x": [0.5, 1.5, 2.5, -0.5, -1.5]})["_"]
    np.testing.assert_array_equal(value, [0.0, 2.0, 2.0, -0.0, -2.0])


def test_zero_derivative_functions_connect():
    for f in ("sign", "floor", "ceil", "round"):
        res = gradcalc.jacobian(f"{f}(x)", at={"x": [0.3, 1.7]}, mode="rev")
        assert res.unconnected == [], f
        np.testing.assert_array_equal(res["_"]["x"], np.zeros((2, 2)))


# ---------------------------------------------------------------------------
# safe_mul / safe_div: the element rule, on every path through the implementation
# ---------------------------------------------------------------------------

_SPECIAL = np.array([0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan, 1e300])


def _safe_reference(op, g, d):
    """Element by element, in plain Python: the product (quotient), except 0 where a
    zero operand (a zero g, for the quotient) meets a value that makes it nan."""
    g, d = np.broadcast_arrays(np.asarray(g, float), np.asarray(d, float))
    out = np.empty(g.shape)
    for i in np.ndindex(g.shape):
        a, b = float(g[i]), float(d[i])
        with np.errstate(all="ignore"):
            r = float(np.float64(a) * np.float64(b) if op == "mul" else np.float64(a) / np.float64(b))
        zero = (a == 0 or b == 0) if op == "mul" else a == 0
        out[i] = 0.0 if (zero and r != r) else r
    return out


@pytest.mark.parametrize("op", ["mul", "div"])
@pytest.mark.parametrize("big_shape,small_shape", [((8,), (8,)), ((40, 8), (8,)), ((8,), (40, 8)),
                                                   ((40, 8), (40, 1)), ((), ())])
def test_safe_mul_div_follow_the_element_rule(op, big_shape, small_shape):
    # Small operands of few elements take the shortcut (no look at the result) when they are
    # finite and nonzero; the draws below cover that, zeros, infinities and nans on both sides.
    impl = {"mul": P.safe_multiply, "div": P.safe_divide}[op]
    rng = np.random.default_rng(zlib.crc32(repr((op, big_shape, small_shape)).encode()))
    for trial in range(40):
        g = rng.choice(_SPECIAL, size=big_shape) if trial % 2 else rng.uniform(-3, 3, big_shape)
        d = rng.uniform(0.5, 2, small_shape) * rng.choice([-1.0, 1.0], small_shape)
        if trial % 4 >= 2:
            d = rng.choice(_SPECIAL, size=small_shape)
        for a, b in ((g, d), (d, g)):
            with np.errstate(all="ignore"):
                got = impl(np.asarray(a), np.asarray(b))
            np.testing.assert_array_equal(got, _safe_reference(op, a, b))
            np.testing.assert_array_equal(np.signbit(got), np.signbit(_safe_reference(op, a, b)))


@pytest.mark.parametrize("op", ["mul", "div"])
@pytest.mark.parametrize("shape,spread", [((40, 8), ()), ((40, 8), (8,)), ((40, 8), (40, 1)), ((8,), ())])
def test_safe_mul_div_on_broadcast_operands(op, shape, spread):
    # A broadcast operand (after a sum, the cotangent is one number spread over the summed
    # shape) counts by its distinct values: one finite nonzero number spread over the other
    # operand takes the shortcut; zeros, infinities and nans in it must not.
    impl = {"mul": P.safe_multiply, "div": P.safe_divide}[op]
    rng = np.random.default_rng(zlib.crc32(repr((op, shape, spread)).encode()))
    for trial in range(40):
        small = rng.choice(_SPECIAL, size=spread) if trial % 2 else rng.uniform(0.5, 2, spread)
        spread_out = np.broadcast_to(small, shape)
        other = rng.choice(_SPECIAL, size=shape) if trial % 4 >= 2 else rng.uniform(-3, 3, shape)
        for a, b in ((spread_out, other), (other, spread_out)):
            with np.errstate(all="ignore"):
                got = impl(a, b)
            want = _safe_reference(op, a, b)
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_primitives_that_keep_finite_values_finite_do():
    # The tracer skips its nan/inf look after these, so the fact must hold on every finite
    # float64, the extremes of the range included.
    kept = sorted(name for name, prim in REGISTRY.items() if prim.keeps_finite)
    assert {"tanh", "sin", "cos", "sigmoid", "neg", "abs"} <= set(kept)
    tiny = np.finfo(np.float64).tiny
    big = np.finfo(np.float64).max
    edges = np.array([0.0, -0.0, tiny, -tiny, 5e-324, 1.0, -1.0, 710.0, -745.0, 1e300, big, -big])
    x = np.concatenate([edges, np.random.default_rng(7).standard_normal(1000) * 10.0 ** np.arange(-5, 5).repeat(100)])
    # (those with parameters: what only rearranges its operand's elements)
    params = {"index": {"idx": (slice(3, None, 2),)}, "reshape": {"shape": (4, -1)}, "transpose": {"axes": (0,)},
              "broadcast_to": {"shape": (3, x.size)}}
    for name in kept:
        prim = REGISTRY[name]
        given = prim.normalize([x.shape], P._UNLIMITED, **params[name]) if name in params else {}
        with np.errstate(all="ignore"):
            assert np.isfinite(prim.impl(x, **given)).all(), name


@pytest.mark.parametrize("src, at, warned", [
    ("tanh(log(x))", {"x": -1.0}, "'log'"),
    ("sum(sin(exp(x)))", {"x": np.array([1.0, 1000.0])}, "'exp'"),
    ("y = sigmoid(0 * exp(x))", {"x": np.array([1.0, 1000.0])}, "'exp'"),
])
def test_only_the_first_operation_to_produce_nan_or_inf_is_warned(src, at, warned):
    tr = lower.trace(gradcalc.parse(src), at)
    assert [w.message.split(" at ")[0] for w in tr.warnings][:1] == [warned]
    assert all(not w.message.startswith(("'tanh'", "'sin'", "'sigmoid'")) for w in tr.warnings)


def test_batched_pass_runs_only_what_its_outputs_need():
    # The tangent of a Hessian's forward output is recorded but read by nobody.
    from gradcalc.transforms import needed
    x = np.array([0.3, -1.2, 2.0])
    tr = lower.trace(gradcalc.parse("y = sin(x) * x\nz = sum(y)"), {"x": x})
    eqs = tr.tape.equations
    y, z = tr.tape.names["y"], tr.tape.names["z"]
    kept = needed(eqs, {y})
    assert [e.out for e in kept] == [e.out for e in eqs if e.out != z]
    assert needed(eqs, {z}) == list(eqs)
    assert needed(eqs, set()) == []


def test_broadcast_shapes_agrees_with_numpy():
    from gradcalc.tape import broadcast_shapes
    rng = np.random.default_rng(3)
    for _ in range(3000):
        shapes = [tuple(int(d) for d in rng.choice([0, 1, 1, 2, 3], size=rng.integers(0, 4)))
                  for _ in range(rng.integers(1, 4))]
        try:
            want = np.broadcast_shapes(*shapes)
        except ValueError:
            with pytest.raises(ValueError):
                broadcast_shapes(*shapes)
            continue
        assert broadcast_shapes(*shapes) == want, shapes


@pytest.mark.parametrize("size", [1, 5, 8192, 8193, 32768, 2048 * 40 + 7])
def test_all_finite_finds_every_nan_and_inf(size):
    # Small arrays are summed as a dot product with themselves, large ones by np.add.reduce
    # (tape.SERIAL_DOT); a nan or inf anywhere must be found, and overflow is no false alarm.
    from gradcalc.tape import all_finite, squared_norm
    assert squared_norm(np.full(size, 0.5)) == 0.25 * size  # (exact: the sum of squares of 0.5)
    rng = np.random.default_rng(size)
    x = rng.uniform(-1, 1, size)
    assert all_finite(x) and all_finite(x.reshape(1, -1)) and all_finite(x[::-1])
    for where in {0, size // 2, size - 1}:
        for bad in (np.nan, np.inf, -np.inf):
            y = x.copy()
            y[where] = bad
            assert not all_finite(y), (where, bad)
            assert not all_finite(y[::-1])  # not contiguous: the plain path
            assert not math.isfinite(squared_norm(y)) and not math.isfinite(squared_norm(y.reshape(1, -1)))
    big = np.full(size, 1e308)
    with np.errstate(over="ignore"):
        assert all_finite(big)  # its sum overflows; every element is finite


# ---------------------------------------------------------------------------
# Identity seeds: matrix products with a Jacobian's identity basis become copies
# ---------------------------------------------------------------------------

_FOLD_CASES = [  # program, inputs, closed-form Jacobian d out / d x
    ("A @ x", lambda A, x, c: A),
    ("x @ A", lambda A, x, c: A.T),
    ("tanh(A @ x)", lambda A, x, c: (1 - np.tanh(A @ x) ** 2)[:, None] * A),
    ("A @ (c * x)", lambda A, x, c: A * c),
    ("A @ -x", lambda A, x, c: -A),
    ("(c * -sin(x)) @ A", lambda A, x, c: (A * (-c * np.cos(x))[:, None]).T),
    ("sum(A @ x) * x", lambda A, x, c: np.outer(x, A.sum(axis=0)) + np.sum(A @ x) * np.eye(len(x))),
    ("c * x", lambda A, x, c: np.diag(c)),
]


@pytest.mark.parametrize("mode", ["rev", "fwd"])
@pytest.mark.parametrize("n", [1, 4])
@pytest.mark.parametrize("case", range(len(_FOLD_CASES)))
def test_jacobian_through_identity_seeds_matches_closed_form(case, n, mode):
    src, closed = _FOLD_CASES[case]
    rng = np.random.default_rng(n * 10 + case)
    A, x, c = rng.standard_normal((n, n)), rng.standard_normal(n), rng.standard_normal(n)
    at = {k: v for k, v in {"A": A, "x": x, "c": c}.items() if k in src}
    got = gradcalc.jacobian(src, at=at, wrt=["x"], mode=mode)["_"]["x"]
    np.testing.assert_allclose(got, closed(A, x, c), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("mode", ["rev", "fwd"])
def test_identity_seed_fold_keeps_a_zero_tangent_zero(mode):
    # A product with the identity would multiply A's infinity by zeros and make nan of a
    # whole row; the fold gives the Jacobian itself, A, where a zero tangent adds zero.
    A = np.array([[1.0, np.inf], [2.0, 3.0]])
    got = gradcalc.jacobian("A @ x", at={"A": A, "x": [1.0, 0.0]}, wrt=["x"], mode=mode)
    np.testing.assert_array_equal(got["_"]["x"], A)


def test_identity_seed_fold_is_skipped_for_matrix_inputs():
    # x of shape (2, 2): its basis is 4 x (2, 2), not a square identity; the product runs.
    A = np.array([[1.0, 2.0], [3.0, 4.0]])
    x = np.array([[0.5, -1.0], [2.0, 1.5]])
    got = gradcalc.jacobian("A @ x", at={"A": A, "x": x}, wrt=["x"], mode="fwd")["_"]["x"]
    want = np.einsum("ik,jl->ijkl", A, np.eye(2))  # d (A x)_ij / d x_kl = A_ik [j == l]
    np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------------------
# Band seeds: slices, sums and scalings of identity seeds run as diagonals
# ---------------------------------------------------------------------------

def _shift(m: int, k: int) -> np.ndarray:
    """The (m - |k|) × m matrix that picks x[k:] (k >= 0) or x[:k] (k < 0)."""
    return np.eye(m)[k:] if k >= 0 else np.eye(m)[:k]


_BAND_CASES = [  # program, closed-form Jacobian d out / d x (x of length m)
    ("x[1:] - x[:-1]", lambda A, B, x, c: _shift(len(x), 1) - _shift(len(x), -1)),
    ("c[1:] * x[1:] + -x[:-1]", lambda A, B, x, c: c[1:, None] * _shift(len(x), 1) - _shift(len(x), -1)),
    ("A @ (x[1:] - 2 * x[:-1])", lambda A, B, x, c: A @ (_shift(len(x), 1) - 2 * _shift(len(x), -1))),
    ("(x[1:] - x[:-1]) @ B", lambda A, B, x, c: B.T @ (_shift(len(x), 1) - _shift(len(x), -1))),
    ("x[2:] * x[:-2]", lambda A, B, x, c: x[:-2, None] * _shift(len(x), 2) + x[2:, None] * _shift(len(x), -2)),
    ("x[::2] * c[::2]", lambda A, B, x, c: c[::2, None] * np.eye(len(x))[::2]),  # step 2: no band
    ("x[1:-1] - x[1:-1] * 3", lambda A, B, x, c: -2 * np.eye(len(x))[1:-1]),
]


@pytest.mark.parametrize("mode", ["rev", "fwd"])
@pytest.mark.parametrize("m", [3, 6])
@pytest.mark.parametrize("case", range(len(_BAND_CASES)))
def test_jacobian_through_band_seeds_matches_closed_form(case, m, mode):
    src, closed = _BAND_CASES[case]
    rng = np.random.default_rng(m * 10 + case)
    x, c = rng.standard_normal(m), rng.standard_normal(m)
    A, B = rng.standard_normal((4, m - 1)), rng.standard_normal((m - 1, 4))
    at = {k: v for k, v in {"A": A, "B": B, "x": x, "c": c}.items() if k in src}
    got = gradcalc.jacobian(src, at=at, wrt=["x"], mode=mode)["_"]["x"]
    np.testing.assert_allclose(got, closed(A, B, x, c), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("n", [2, 3, 7])
def test_rosenbrock_hessian_through_bands_matches_closed_form(n):
    x = np.random.default_rng(n).standard_normal(n)
    want = np.zeros((n, n))
    for i in range(n - 1):
        want[i, i] += 1200 * x[i] ** 2 - 400 * x[i + 1] + 2
        want[i, i + 1] += -400 * x[i]
        want[i + 1, i] += -400 * x[i]
        want[i + 1, i + 1] += 200
    got = gradcalc.hessian("sum(100*(x[1:] - x[:-1]^2)^2 + (1 - x[:-1])^2)", at={"x": x})["x"]["x"]
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-12)


def test_two_vector_inputs_get_bands_at_their_offsets():
    # d2/dx_i dy_j of sum(x*y) + sum(x[1:]*y[:-1]) is [i == j] + [i == j + 1]; x and y are
    # blocks 0..2 and 3..6 of the identity basis, so their bands sit at offsets 0 and 3.
    x, y = np.array([0.3, -1.2, 2.0]), np.array([1.5, 0.2, -0.7])
    h = gradcalc.hessian("sum(x * y) + sum(x[1:] * y[:-1])", at={"x": x, "y": y})
    cross = np.eye(3) + np.eye(3, k=-1)
    np.testing.assert_array_equal(h["x"]["y"], cross)
    np.testing.assert_array_equal(h["y"]["x"], cross.T)
    np.testing.assert_array_equal(h["x"]["x"], np.zeros((3, 3)))
    np.testing.assert_array_equal(h["y"]["y"], np.zeros((3, 3)))
    j = gradcalc.jacobian("x * y[::-1]", at={"x": x, "y": y}, wrt=["x", "y"], mode="fwd")["_"]
    np.testing.assert_array_equal(j["x"], np.diag(y[::-1]))
    np.testing.assert_array_equal(j["y"], np.diag(x)[:, ::-1])


@pytest.mark.parametrize("mode", ["rev", "fwd"])
def test_band_keeps_a_zero_tangent_zero_next_to_an_infinite_factor(mode):
    # c[0] = inf scales the band entry at (0, 1) only; every other entry is an exact zero.
    c = np.array([np.inf, 2.0, -3.0])
    got = gradcalc.jacobian("c * x[1:]", at={"c": c, "x": [1.0, 2.0, 3.0, 4.0]}, wrt=["x"], mode=mode)
    want = np.zeros((3, 4))
    want[0, 1], want[1, 2], want[2, 3] = np.inf, 2.0, -3.0
    np.testing.assert_array_equal(got["_"]["x"], want)


def test_rosenbrock_hessian_runs_no_dense_batched_equation(monkeypatch):
    # Every equation of its forward-over-backward pass is a slice, scaling, sum or scatter of
    # bands, so nothing of size n×n is computed but the answer (the speed of W6 in bench/).
    # Counted: the batched values the eager band pass computes in full (batched._batched) and the
    # bands it writes out (the answer's, once); outer(x, x) shows that the count sees them.
    import gradcalc.batched as B
    made, written = [], []
    real_batched, real_write_out = B._batched, B._Values.write_out
    monkeypatch.setattr(B, "_batched", lambda value, shape: (made.append(shape), real_batched(value, shape))[1])
    monkeypatch.setattr(B._Values, "write_out", lambda self, slot: (written.append(slot.shape),
                                                                    real_write_out(self, slot))[1])
    gradcalc.hessian("sum(100*(x[1:] - x[:-1]^2)^2 + (1 - x[:-1])^2)", at={"x": np.arange(5.0)})
    assert (made, written) == ([], [(5,)])
    gradcalc.hessian("sum(outer(x, x))", at={"x": np.arange(5.0)})
    assert made


@pytest.mark.parametrize("src", ["sum(x^2)", "sum(sin(x)) * 3"])
def test_hessian_with_respect_to_an_empty_vector_is_empty(src):
    # Nothing to differentiate with respect to: a 0×0 block (it used to fail inside NumPy).
    h = gradcalc.hessian(src, at={"x": np.zeros(0)})
    assert h["x"]["x"].shape == (0, 0)
    mixed = gradcalc.hessian("sum(sin(x)) * y^2", at={"x": np.zeros(0), "y": 1.5})
    assert mixed["x"]["y"].shape == (0,) and mixed["y"]["x"].shape == (0,)
    assert mixed["y"]["y"] == 0.0  # d2/dy2 of 0 * y^2, sum over no elements


# ---------------------------------------------------------------------------
# A large matrix product's gradient: finite by its factors' norms, or looked at
# ---------------------------------------------------------------------------

def test_gradient_of_a_matrix_product_that_overflows_is_reported():
    # The forward product is finite (W is tiny) but dW = ones @ X^T sums 5 entries of 1e308:
    # inf.  The norms of the factors cannot certify it, so the gradient is looked at, and
    # the warning names the operation as the program wrote it ('@', since 329fc89).
    W, X = np.full((60, 60), 1e-300), np.full((60, 5), 1e308)
    r = gradcalc.grad("sum(W @ X)", at={"W": W, "X": X})
    assert np.isinf(r["W"]).all()
    assert r.warnings == ["the derivative of '@' at line 1, column 7 produced inf"]


def test_gradient_of_a_matrix_product_certified_finite_is_exact():
    X = np.random.default_rng(3).standard_normal((60, 5)) * 1e150  # large, but bounded
    r = gradcalc.grad("sum(W @ X)", at={"W": np.ones((60, 60)), "X": X})
    np.testing.assert_array_equal(r["W"], np.ones((60, 5)) @ X.T)  # d/dW_ij = sum_k X_jk
    assert r.warnings == []


def test_finite_product_certificate_bounds():
    from gradcalc.transforms import _finite_product
    g, o, c = np.ones((30, 4)), np.ones((30, 4)), np.ones((30, 30))
    assert _finite_product(c, g, o)
    with np.errstate(over="ignore"):  # (as inside gradcalc's calls: the squared norm overflows)
        assert not _finite_product(c, g, o * 1e300)  # norms multiply to 1.2e302: no certificate
    assert not _finite_product(c, g, np.where(np.eye(30, 4) > 0, np.nan, o))
    assert not _finite_product(c, g, np.where(np.eye(30, 4) > 0, np.inf, o))
    assert not _finite_product(np.ones((4, 4)), np.ones((4, 30)), np.ones((30, 4)))  # c small: look at it


@pytest.mark.parametrize("mode", ["rev", "fwd"])
def test_a_length_one_vector_added_to_a_band_broadcasts(mode):
    # x - x[:1]: row i is e_i - e_0, not a band: d(x_i - x_0)/dx = I with -1 down column 0.
    want = np.eye(3)
    want[:, 0] -= 1
    got = gradcalc.jacobian("x - x[:1]", at={"x": [1.0, 2.0, 3.0]}, mode=mode)["_"]["x"]
    np.testing.assert_array_equal(got, want)
    got = gradcalc.jacobian("x[0:1] + x", at={"x": [1.0, 2.0, 3.0]}, mode=mode)["_"]["x"]
    np.testing.assert_array_equal(got, np.eye(3) + np.eye(3)[[0, 0, 0]])


def test_hessians_with_a_broadcast_length_one_vector():
    # sum((x + y)^2), y of length 1: d2/dx_i dx_j = 2[i == j], d2/dx_i dy = 2, d2/dy2 = 2 len(x).
    h = gradcalc.hessian("sum((x + y)^2)", at={"x": [1.0, 2.0], "y": [3.0]})
    np.testing.assert_array_equal(h["x"]["x"], 2 * np.eye(2))
    np.testing.assert_array_equal(h["x"]["y"], [[2.0], [2.0]])
    np.testing.assert_array_equal(h["y"]["x"], [[2.0, 2.0]])
    np.testing.assert_array_equal(h["y"]["y"], [[4.0]])
    # sum((x - x_0)^2): 2(I - e_0 1^T)^T (I - e_0 1^T) restricted: the closed form below.
    h = gradcalc.hessian("sum((x - x[0:1])^2)", at={"x": [1.0, 2.0, 3.0, 4.0]})["x"]["x"]
    want = 2 * np.eye(4)
    want[0, :] = want[:, 0] = -2.0
    want[0, 0] = 6.0
    np.testing.assert_array_equal(h, want)
    h = gradcalc.hessian("sum(((x + y)[1:])^2)", at={"x": [1.0, 2.0, 3.0], "y": [1.0]})
    np.testing.assert_array_equal(h["x"]["x"], np.diag([0.0, 2.0, 2.0]))
    np.testing.assert_array_equal(h["y"]["y"], [[4.0]])


@pytest.mark.parametrize("src, shape", [("prod(x)", (0,)), ("sum(prod(x, axis=1))", (3, 0)),
                                        ("sum(prod(x, axis=0))", (0, 3))])
def test_prod_of_an_empty_array(src, shape):
    # prod of nothing is 1; its derivatives are empty or zero (the rules used to fail reshaping)
    x = np.zeros(shape)
    assert gradcalc.grad(src, at={"x": x})["x"].shape == shape
    assert gradcalc.hessian(src, at={"x": x})["x"]["x"].shape == shape + shape
    assert gradcalc.check(src, at={"x": x}).ok


def test_hessian_of_the_unselected_branch_is_zero():
    # where(x > 0, y/x, 0) at x = 0: the branch is not taken, so every second derivative is 0
    # (d/dx of the rule's y/x used 0/0 = nan, in one of the two mixed entries only)
    h = gradcalc.hessian("where(x > 0, y/x, 0)", at={"x": 0.0, "y": 1.0})
    assert [float(h[a][b]) for a in "xy" for b in "xy"] == [0.0] * 4
    # and where it is taken: d2(y/x) = [[2y/x^3, -1/x^2], [-1/x^2, 0]]
    h = gradcalc.hessian("where(x > 0, y/x, 0)", at={"x": 2.0, "y": 1.0})
    assert [float(h[a][b]) for a in "xy" for b in "xy"] == [0.25, -0.25, -0.25, 0.0]


def _safe_matmul_reference(a, b):
    """a @ b (2-D) term by term in plain Python, a term with a zero factor being 0."""
    out = np.empty((a.shape[0], b.shape[1]))
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            terms = []
            for k in range(a.shape[1]):
                x, y = float(a[i, k]), float(b[k, j])
                terms.append(0.0 if (x == 0 or y == 0) else x * y)
            if any(t != t for t in terms) or (np.inf in terms and -np.inf in terms):
                out[i, j] = np.nan
            elif np.inf in terms or -np.inf in terms:
                out[i, j] = np.inf if np.inf in terms else -np.inf
            else:
                out[i, j] = sum(terms)
    return out


@pytest.mark.parametrize("shapes", [((4, 5), (5, 3)), ((5,), (5, 3)), ((4, 5), (5,)), ((5,), (5,)),
                                    ((2, 4, 5), (5, 3))])
def test_safe_matmul_follows_the_element_rule(shapes):
    # The matrix products of derivative rules: a zero cotangent or tangent contributes zero even
    # against inf or nan in the other factor (plain BLAS makes 0 * inf = nan).
    sa, sb = shapes
    rng = np.random.default_rng(zlib.crc32(repr(shapes).encode()))
    special = np.array([0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan])
    for trial in range(60):
        a = rng.choice(special, size=sa) if trial % 3 else rng.uniform(-2, 2, sa)
        b = rng.choice(special, size=sb) if trial % 3 != 1 else rng.uniform(-2, 2, sb)
        with np.errstate(all="ignore"):
            got = np.asarray(P._matmul(a, b, len(sa), len(sb), safe=True))
        a2, b2 = a.reshape(-1, sa[-1]) if len(sa) > 1 else a[None], b if len(sb) == 2 else b[:, None]
        want = _safe_matmul_reference(a2, b2).reshape(got.shape)
        assert np.array_equal(np.isnan(got), np.isnan(want)), (a, b, got, want)
        fin = np.isfinite(want)
        assert np.array_equal(got[~fin & ~np.isnan(want)], want[~fin & ~np.isnan(want)])
        np.testing.assert_allclose(got[fin], want[fin], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cmd, extra, want", [
    ("jacobian", ["(A @ x)[0]", "--wrt", "x", "--mode", "rev"], "1 inf 2"),
    ("jacobian", ["(A @ x)[0]", "--wrt", "x", "--mode", "fwd"], "1 inf 2"),
    ("jvp", ["A @ x", "--tangent", "x=[1,0,0]"], "1 3"),
    ("vjp", ["A @ x", "--cotangent", "_=[1,0]", "--wrt", "x"], "1 inf 2"),
    ("grad", ["dot(A[1], x) * 0 + x[0]", "--wrt", "x"], "1 0 0"),
])
def test_matrix_products_of_rules_keep_zero_contributions_zero(cmd, extra, want):
    # Row 0 of A @ x is [1, inf, 2] . x; a zero cotangent on row 1 (which holds -inf) must not
    # make nan of it, in every mode alike (only forward-mode jacobian got it right before).
    from typer.testing import CliRunner

    from gradcalc.cli.app import app
    args = [cmd, extra[0], "--at", "A=[[1,inf,2],[3,4,-inf]],x=[1,2,3]", *extra[1:], "-f", "plain"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert " ".join(r.stdout.split()) == want


@pytest.mark.parametrize("src, at, wrt, want", [
    ("a = x\nz = a*x", {"x": 5.0}, ["a", "x"], [5.0, 10.0]),  # dz/da holds x fixed: x; dz/dx is total
    ("h = x*y\ng = h\nz = g*h", {"x": 5.0, "y": 1.0}, ["g", "h"], [5.0, 10.0]),
    ("a = (x)\nb = +a\nz = a*b*x", {"x": 2.0}, ["a", "b", "x"], [8.0, 4.0, 12.0]),  # z = a*a*x via b
])
def test_a_name_bound_to_another_name_is_a_value_of_its_own(src, at, wrt, want):
    # As `a = 2` is (README): --wrt a is the derivative through a alone, upstream held fixed.
    # An alias used to share x's variable, so --wrt a gave the total derivative.
    g = gradcalc.grad(src, at=at, wrt=wrt)
    assert [float(g[w]) for w in wrt] == want


# ==========================================================================
# Indexing, // and %, logical masks: against NumPy and hand-written adjoints
# ==========================================================================

def _pullback(fn, args, g):
    """The cotangents of fn(*tracers) at args for the output cotangent g (None: no path)."""
    from gradcalc.transforms import backward
    b = Builder()
    ts = [b.input(np.asarray(a, dtype=np.float64)) for a in args]
    out = fn(*ts)
    found = backward(b, tuple(b.equations), {out.var: b.const(np.asarray(g, dtype=np.float64))},
                     [t.var for t in ts])
    return [None if found[t.var] is None else np.asarray(found[t.var].value) for t in ts]


def _batched_forward(fn, args, batched: dict):
    """fn(*tracers) traced at args, its tape then evaluated with leading batch axes on the
    arguments numbered in batched (as check and the batched passes evaluate tapes)."""
    from gradcalc.tape import eval_equations
    b = Builder()
    ts = [b.input(np.asarray(a, dtype=np.float64)) for a in args]
    out = fn(*ts)
    env = dict(b.values)
    env.update({ts[i].var: v for i, v in batched.items()})
    return eval_equations(b.equations, env)[out.var]


_MASK = np.array([[True, False, True], [False, False, True]])
GATHERS = [  # (label, index as NumPy takes it, operand shape)
    ("[0, 0, 2, -1]", (np.array([0, 0, 2, -1]),), (4,)),
    ("[[1, 0], [1, 1]]", (np.array([[1, 0], [1, 1]]),), (3,)),
    ("[[0, 0, -1], 1:]", (np.array([0, 0, -1]), slice(1, None)), (4, 3)),
    ("[:, [2, 2, 0]]", (slice(None), np.array([2, 2, 0])), (2, 3)),
    ("[[1, 0, 1], [2, 2, 0]]", (np.array([1, 0, 1]), np.array([2, 2, 0])), (2, 3)),
    ("[[1, 0, 1], :, [2, 2, 0]]", (np.array([1, 0, 1]), slice(None), np.array([2, 2, 0])), (2, 3, 4)),
    ("[0, :, [1, 1]]", (0, slice(None), np.array([1, 1])), (2, 3, 4)),
    ("[[0, 1], None, [1, 1]]", (np.array([0, 1]), None, np.array([1, 1])), (2, 3)),
    ("[[[0], [1]], :, [1, 1]]", (np.array([[0], [1]]), slice(None), np.array([1, 1])), (2, 3, 2)),
    ("[None, ..., [1, -1]]", (None, Ellipsis, np.array([1, -1])), (2, 3)),
    ("[..., None, 1]", (Ellipsis, None, 1), (2, 3)),
    ("[1, ...]", (1, Ellipsis), (2, 3)),
    ("[mask]", (_MASK,), (2, 3)),
    ("[mask, None]", (_MASK, None), (2, 3)),
    ("[[]]", (np.array([], dtype=np.intp),), (3,)),
]


@pytest.mark.parametrize("label, idx, shape", GATHERS, ids=[g[0] for g in GATHERS])
def test_gather_matches_numpy_and_its_cotangent_is_numpy_add_at(label, idx, shape):
    rng = np.random.default_rng(zlib.crc32(label.encode()))
    x = rng.standard_normal(shape)
    np.testing.assert_array_equal(P.index(x, idx=idx), x[idx])
    g = rng.standard_normal(x[idx].shape)
    expected = np.zeros(shape)
    np.add.at(expected, idx, g)  # repeated places accumulate
    (got,) = _pullback(lambda t: P.index(t, idx=idx), [x], g)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-15)


@pytest.mark.parametrize("label, idx, shape", GATHERS, ids=[g[0] for g in GATHERS])
def test_indexing_on_a_batch_matches_numpy_row_by_row(label, idx, shape):
    # A recorded tape evaluated with a leading batch axis (check, jacobian, hessian): NumPy puts
    # the block of non-adjacent advanced indices first, in front of the batch axis too; each
    # row must still be the row's own x[idx], x[idx] = v and x[idx] += v.
    rng = np.random.default_rng(zlib.crc32(label.encode()) + 1)
    xs = rng.standard_normal((3,) + shape)
    vs = rng.standard_normal((3,) + xs[0][idx].shape)
    got = _batched_forward(lambda t: P.index(t, idx=idx), [xs[0]], {0: xs})
    np.testing.assert_array_equal(got, np.stack([x[idx] for x in xs]))
    for prim, put in [(P.index_update, _np_set), (P.index_add, _np_add_at)]:
        fn = lambda t, u, prim=prim: prim(t, u, idx=idx)  # noqa: E731
        for batched in [{0: xs, 1: vs}, {0: xs}, {1: vs}]:
            got = _batched_forward(fn, [xs[0], vs[0]], batched)
            want = np.stack([put((xs[k] if 0 in batched else xs[0]).copy(), idx,
                                 vs[k] if 1 in batched else vs[0]) for k in range(3)])
            np.testing.assert_array_equal(got, want, err_msg=f"{prim.name}, batched {sorted(batched)}")


def test_gather_cotangents_on_a_batch_scatter_add_row_by_row():
    # The traced backward pass re-run on a batch of cotangents at once (a Jacobian's rows)
    from gradcalc.tape import eval_equations
    from gradcalc.transforms import backward
    idx = (np.array([1, 0, 1]), slice(None), np.array([2, 2, 0]))  # non-adjacent, repeated
    x = np.arange(24.0).reshape(2, 3, 4)
    b = Builder()
    t = b.input(x)
    out = P.index(t, idx=idx)
    start = len(b.equations)
    seed = b.input(np.zeros(out.shape))
    ct = backward(b, tuple(b.equations[:start]), {out.var: seed}, [t.var])[t.var]
    gs = np.random.default_rng(3).standard_normal((5,) + out.shape)
    env = dict(b.values)
    env[seed.var] = gs
    got = eval_equations(b.equations[start:], env)[ct.var]
    for k in range(5):
        want = np.zeros(x.shape)
        np.add.at(want, idx, gs[k])
        np.testing.assert_array_equal(got[k], want)


@pytest.mark.parametrize("name, value, dx, dv, dv_scalar", [
    # y = x with y[[0, 0, 2, -1]] = v: NumPy keeps the last write to place 0, so v[0] has no
    # effect on y (its finite difference is 0) and the places written get no cotangent; a
    # scalar v is written to the three places once each: g[0] + g[2] + g[4]
    ("index_update", [20.0, 2.0, 30.0, 4.0, 40.0], [0.0, 10.0, 0.0, 1000.0, 0.0],
     [0.0, 1.0, 100.0, 10000.0], 10101.0),
    # y = x with v added at [0, 0, 2, -1] (numpy.add.at): both writes to place 0 count, and a
    # scalar is added four times: g[0] + g[0] + g[2] + g[4]
    ("index_add", [31.0, 2.0, 33.0, 4.0, 45.0], [1.0, 10.0, 100.0, 1000.0, 10000.0],
     [1.0, 1.0, 100.0, 10000.0], 10102.0),
])
def test_index_update_and_add_adjoints_by_hand(name, value, dx, dv, dv_scalar):
    prim = REGISTRY[name]
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    v = np.array([10.0, 20.0, 30.0, 40.0])
    idx = (np.array([0, 0, 2, -1]),)
    np.testing.assert_array_equal(prim(x, v, idx=idx), value)
    g = np.array([1.0, 10.0, 100.0, 1000.0, 10000.0])
    got = _pullback(lambda a, b: prim(a, b, idx=idx), [x, v], g)
    np.testing.assert_array_equal(got[0], dx)
    np.testing.assert_array_equal(got[1], dv)
    assert float(_pullback(lambda a, b: prim(a, b, idx=idx), [x, 7.0], g)[1]) == dv_scalar


def test_index_update_of_columns_by_hand():
    # columns 0 and 2 of V both go to column 2 of M, and column 2 of V is the one kept
    M, V = np.zeros((2, 3)), np.arange(6.0).reshape(2, 3)
    G = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    cols = (slice(None), np.array([2, 0, 2]))
    dM, dV = _pullback(lambda a, b: P.index_update(a, b, idx=cols), [M, V], G)
    np.testing.assert_array_equal(dM, [[0.0, 2.0, 0.0], [0.0, 5.0, 0.0]])
    np.testing.assert_array_equal(dV, [[0.0, 1.0, 3.0], [0.0, 4.0, 6.0]])


@pytest.mark.parametrize("a, b", [(7.0, 3.0), (-7.0, 3.0), (7.0, -3.0), (-7.0, -3.0), (7.5, 2.0),
                                  (-7.5, 2.0), (0.3, 0.7), (-0.3, 0.7), (5.25, -1.5)])
def test_mod_and_floor_divide_derivatives_are_the_closed_forms(a, b):
    # SPEC §2.5: d(a % b)/da = 1, d(a % b)/db = -floor(a / b); a // b has derivative 0 and
    # still connects (a zero, not None).  Central differences of NumPy's own mod agree
    # (none of these points is within a step of a jump).
    assert P.mod(np.float64(a), np.float64(b)) == np.mod(a, b)
    assert P.floor_divide(np.float64(a), np.float64(b)) == np.floor_divide(a, b)
    da, db = _pullback(P.mod, [a, b], 1.0)
    assert (float(da), float(db)) == (1.0, -math.floor(a / b))
    h = 1e-6
    assert float(db) == pytest.approx((np.mod(a, b + h) - np.mod(a, b - h)) / (2 * h), abs=1e-6)
    assert float(da) == pytest.approx((np.mod(a + h, b) - np.mod(a - h, b)) / (2 * h), abs=1e-6)
    assert [float(d) for d in _pullback(P.floor_divide, [a, b], 1.0)] == [0.0, 0.0]


def test_mod_broadcasts_and_sums_its_cotangent_over_broadcast_axes():
    a = np.array([[3.3, -2.2, 5.1], [0.4, 1.6, -4.9]])
    b = np.array([1.3, -0.7, 2.0])
    g = np.arange(1.0, 7.0).reshape(2, 3)
    da, db = _pullback(P.mod, [a, b], g)
    np.testing.assert_array_equal(da, g)
    np.testing.assert_allclose(db, -(g * np.floor(a / b)).sum(axis=0), rtol=1e-15)


def test_logical_masks_treat_nonzero_as_true_and_have_no_gradient():
    m = np.array([0.0, 1.0, -2.5, 0.0, np.nan])
    n = np.array([0.0, 0.0, 3.0, 1.0, 1.0])
    np.testing.assert_array_equal(P.logical_and(m, n), [0.0, 0.0, 1.0, 0.0, 1.0])
    np.testing.assert_array_equal(P.logical_or(m, n), [0.0, 1.0, 1.0, 1.0, 1.0])
    np.testing.assert_array_equal(P.logical_not(m), [1.0, 0.0, 0.0, 1.0, 0.0])
    assert P.logical_and(m, n).dtype == np.float64
    assert _pullback(P.logical_and, [m, n], np.ones(5)) == [None, None]
    assert _pullback(P.logical_not, [m], np.ones(5)) == [None]


@pytest.mark.parametrize("call, message", [
    (lambda x: P.index(x, idx=(5,)), "index 5 is out of range for axis 0 with size 3"),
    (lambda x: P.index(x, idx=(np.array([0, 5]),)), "index 5 is out of range for axis 0 with size 3"),
    (lambda x: P.index(x, idx=(np.array([0, -4]),)), "index -4 is out of range for axis 0 with size 3"),
    (lambda x: P.index(x, idx=(0, 1)), "too many indices (2) for an array of dimension 1"),
    (lambda x: P.index(x, idx=(Ellipsis, Ellipsis)), "an index can have only one '...'"),
    (lambda x: P.index(x, idx=(np.array([0.5]),)),
     "index arrays must hold integers, not float64 values (axis 0)"),
    (lambda x: P.index(x, idx=(np.array([True, False]),)),
     "a mask of shape (2,) does not match the indexed axes (3,) (from axis 0)"),
    (lambda x: P.index(x, idx=(0.5,)),
     "an index must be an integer, a slice, None, '...', an integer array or a mask, not 0.5"),
    (lambda x: P.index_update(x, np.ones(2), idx=(slice(None),)),
     "cannot assign a value of shape (2,) to a selection of shape (3,)"),
    (lambda x: P.index_add(x, np.ones(2), idx=(np.array([0, 1, 1]),)),
     "cannot add a value of shape (2,) to a selection of shape (3,)"),
])
def test_index_errors_say_what_is_wrong(call, message):
    from gradcalc.errors import ShapeError
    b = Builder()
    with pytest.raises(ShapeError) as err:
        call(b.input(np.array([1.0, 2.0, 3.0])))
    assert err.value.message == message


def test_index_arrays_that_do_not_broadcast_are_an_error():
    from gradcalc.errors import ShapeError
    with pytest.raises(ShapeError) as err:
        P.index(Builder().input(np.zeros((3, 3))), idx=(np.array([0, 1]), np.array([0, 1, 2])))
    assert err.value.message == "index arrays of shapes (2,) and (3,) do not broadcast"


def test_closed_forms_of_mod_floor_divide_and_masks():
    # symbolic (--symbolic): a % b = a - b floor(a / b), so d/db = -floor(a / b); values as NumPy's
    import sympy as sp
    from types import SimpleNamespace

    from gradcalc import symbolic as S
    b = Builder()
    a_, b_ = b.input(np.float64(-7.5)), b.input(np.float64(2.0))
    outs = {"m": P.mod(a_, b_), "q": P.floor_divide(a_, b_),
            "l": P.logical_or(P.logical_not(P.gt(a_, b_)), P.logical_and(a_, b_))}
    tape = b.tape({"a": a_.var, "b": b_.var}, {k: t.var for k, t in outs.items()}, "m")
    env = S.to_sympy(SimpleNamespace(tape=tape, builder=b, program=None))
    sa, sb = sp.Symbol("a", real=True), sp.Symbol("b", real=True)
    m, q, lg = (sp.sympify(env[t.var][()]) for t in outs.values())
    assert sp.diff(m, sa) == 1 and sp.diff(q, sa) == 0 and sp.diff(q, sb) == 0
    for a, bv in [(-7.5, 2.0), (7.0, -3.0), (0.5, 0.25)]:
        at = {sa: sp.Rational(str(a)), sb: sp.Rational(str(bv))}
        assert float(m.subs(at)) == np.mod(a, bv) and float(q.subs(at)) == np.floor_divide(a, bv)
        assert float(sp.diff(m, sb).subs(at)) == -math.floor(a / bv)
        assert float(lg.subs(at)) == float(not a > bv or (a != 0 and bv != 0))


def _traced_gradient(f, i):
    """fn(*tracers): the gradient of sum(sin(f(*tracers))) with respect to argument i, traced
    (a derivative pass that check_traced differentiates again: second derivatives)."""
    from gradcalc.transforms import backward

    def fn(*ts):
        b = ts[0].builder
        start = len(b.equations)
        out = P.reduce_sum(P.sin(f(*ts)), axis=None)
        found = backward(b, tuple(b.equations[start:]), {out.var: b.const(1.0)}, [ts[i].var])
        return found[ts[i].var]
    return fn


_REP = (np.array([0, 0, 2, -1]),)
_NONADJ = (np.array([1, 1]), slice(None), np.array([0, 2]))


SECOND_ORDER = [  # (label, f, argument shapes)
    ("gather", lambda x: P.index(x * x, idx=_REP), [(4,)]),
    ("gather non-adjacent", lambda x: P.index(x * x, idx=_NONADJ), [(2, 3, 3)]),
    ("index_update", lambda x, v: P.index_update(x * x, v * v * P.index(x, idx=(0,)), idx=_REP), [(5,), (4,)]),
    ("index_update non-adjacent", lambda x, v: P.index_update(x * x, v * v, idx=_NONADJ), [(2, 3, 3), (3,)]),
    ("index_add", lambda x, v: P.index_add(x * x, v * v * P.index(x, idx=(1,)), idx=_REP), [(5,), ()]),
    ("mod", lambda a, b: P.mod(a * a, b) * b, [(3,), (2, 1)]),
]


@pytest.mark.parametrize("label, f, shapes, i", [(*case, i) for case in SECOND_ORDER for i in range(len(case[2]))],
                         ids=[f"{case[0]}, d/darg{i}" for case in SECOND_ORDER for i in range(len(case[2]))])
def test_second_derivatives_of_indexing_and_mod(label, f, shapes, i):
    # the gradient with respect to argument i, differentiated again (rev, fwd, batched)
    rng = np.random.default_rng(zlib.crc32(label.encode()))
    args = [rng.uniform(0.5, 1.5, s) for s in shapes]
    if label == "mod":  # a^2 / b at least 0.05 from an integer: no jump within a step
        args = [np.array([1.2, 1.45, 1.6]), np.array([[-1.0], [2.0]])]
    report = check_traced(_traced_gradient(f, i), args)
    assert report.ok, str(report)
