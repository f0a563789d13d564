"""The built-ins of SPEC §2.5 written over primitives, and NumPy's spellings of them.

Each case runs through the one checker (``fdcheck.check_program``): the value against
a NumPy reference (or a closed form), and reverse mode, forward mode, their batched
passes and central differences against each other.  Primitives have their own table in
test_primitives.py; the cases here exercise the compositions.
"""
from __future__ import annotations

import math
import re
import zlib

import numpy as np
import pytest

import gradcalc
from gradcalc.builtins import FUNCTIONS

import escapes
from fdcheck import check_hessian, check_program

def _math(fn):
    loop = np.frompyfunc(fn, 1, 1)
    return lambda x: np.asarray(loop(x), dtype=np.float64)


_erf = _math(math.erf)


def _np_gelu(x):
    return x * 0.5 * (1.0 + _erf(x / math.sqrt(2.0)))


def _np_log_sigmoid(x):
    return -np.logaddexp(0.0, -x)


DOMAINS = {
    "real": lambda rng, s: rng.uniform(-2.0, 2.0, s),
    "pos": lambda rng, s: rng.uniform(0.5, 2.0, s),
    "away0": lambda rng, s: rng.choice([-1.0, 1.0], s) * rng.uniform(0.3, 2.0, s),
    "distinct": lambda rng, s: (rng.permutation(int(np.prod(s, dtype=int))) * 0.5
                                + rng.uniform(-0.1, 0.1, s).ravel()).reshape(s) - 1.0,
}

SHAPES = [(), (3,), (2, 3)]

# name: (program, NumPy reference, domain): each on every shape of SHAPES
ELEMENTWISE = {
    "square": ("square(x)", np.square, "real"),
    "reciprocal": ("reciprocal(x)", np.reciprocal, "away0"),
    "log_sigmoid": ("log_sigmoid(x)", _np_log_sigmoid, "real"),
    "gelu": ("gelu(x)", _np_gelu, "real"),
    "silu": ("silu(x)", lambda x: x / (1.0 + np.exp(-x)), "real"),
    "deg2rad": ("deg2rad(x)", np.deg2rad, "real"),
    "rad2deg": ("rad2deg(x)", np.rad2deg, "real"),
    "nan_to_num": ("nan_to_num(x)", np.nan_to_num, "real"),
    "erf": ("erf(x)", _erf, "real"),
    "erfc": ("erfc(x)", _math(math.erfc), "real"),
    "sinc": ("sinc(x)", np.sinc, "away0"),
    "trunc": ("trunc(x) * x", lambda x: np.trunc(x) * x, "away0"),
}

# NumPy's spelling: (program, NumPy reference, domain)
ALIASES = {
    "arcsin": ("arcsin(x)", np.arcsin, "unit"), "arccos": ("arccos(x)", np.arccos, "unit"),
    "arctan": ("arctan(x)", np.arctan, "real"), "arcsinh": ("arcsinh(x)", np.arcsinh, "real"),
    "arccosh": ("arccosh(x + 2)", lambda x: np.arccosh(x + 2), "pos"),
    "arctanh": ("arctanh(x)", np.arctanh, "unit"),
    "arctan2": ("arctan2(x, 2 - x)", lambda x: np.arctan2(x, 2 - x), "pos"),
    "absolute": ("absolute(x)", np.absolute, "away0"), "fabs": ("fabs(x)", np.fabs, "away0"),
    "power": ("power(x, 1.5)", lambda x: np.power(x, 1.5), "pos"),
    "radians": ("radians(x)", np.radians, "real"), "degrees": ("degrees(x)", np.degrees, "real"),
    "amax": ("amax(x)", np.amax, "distinct"), "amin": ("amin(x, axis=-1)", lambda x: np.amin(x, -1), "distinct"),
    "ravel": ("ravel(x) * 2", lambda x: np.ravel(x) * 2, "real"),
    "concatenate": ("concatenate(x, x, axis=-1)", lambda x: np.concatenate([x, x], -1), "real"),
}
# two arguments: (program, NumPy reference, domain of x, domain of y), on broadcasting pairs
BINARY = {
    "mod": ("mod(x, y)", np.mod, "offgrid", "divisor"),
    "add": ("add(x, y)", np.add, "real", "real"),
    "subtract": ("subtract(x, y)", np.subtract, "real", "real"),
    "multiply": ("multiply(x, y)", np.multiply, "real", "real"),
    "divide": ("divide(x, y)", np.divide, "real", "away0"),
    "true_divide": ("true_divide(x, y)", np.true_divide, "real", "away0"),
    "negative": ("negative(x) * y", lambda x, y: np.negative(x) * y, "real", "real"),
}
# any program: (name, program, NumPy reference, inputs as name=(shape, domain))
PROGRAMS = [
    ("diff", "diff(x)", np.diff, {"x": ((5,), "real")}),
    ("diff", "diff(x, n=2)", lambda x: np.diff(x, n=2), {"x": ((2, 5), "real")}),
    ("diff", "diff(x, axis=0)", lambda x: np.diff(x, axis=0), {"x": ((3, 2), "real")}),
    ("diff", "diff(x, 3, 1)", lambda x: np.diff(x, 3, 1), {"x": ((2, 4, 2), "real")}),
    ("sort", "sort(x)", np.sort, {"x": ((5,), "distinct")}),
    ("sort", "sort(x)", np.sort, {"x": ((2, 3), "distinct")}),
    ("sort", "sort(x, axis=0)", lambda x: np.sort(x, axis=0), {"x": ((3, 2), "distinct")}),
    ("sort", "sort(x, axis=None)", lambda x: np.sort(x, axis=None), {"x": ((2, 3), "distinct")}),
    ("sort", "sort(x, axis=1)", lambda x: np.sort(x, axis=1), {"x": ((2, 3, 2), "distinct")}),
    ("trapezoid", "trapezoid(y)", np.trapezoid, {"y": ((5,), "real")}),
    ("trapezoid", "trapezoid(y, dx=0.5)", lambda y: np.trapezoid(y, dx=0.5), {"y": ((2, 4), "real")}),
    ("trapezoid", "trapezoid(y, x)", np.trapezoid, {"y": ((4,), "real"), "x": ((4,), "real")}),
    ("trapezoid", "trapezoid(y, x, axis=0)", lambda y, x: np.trapezoid(y, x, axis=0),
     {"y": ((3, 2), "real"), "x": ((3,), "real")}),
    ("trapezoid", "trapezoid(y, x=x, axis=-1)", lambda y, x: np.trapezoid(y, x=x, axis=-1),
     {"y": ((2, 3), "real"), "x": ((2, 3), "real")}),
    ("cumsum", "cumsum(x, axis=0) * cumprod(x, axis=1)",
     lambda x: np.cumsum(x, axis=0) * np.cumprod(x, axis=1), {"x": ((2, 3), "away0")}),
    ("argsort", "x[argsort(x)]", lambda x: x[np.argsort(x)], {"x": ((4,), "distinct")}),
    ("argmax", "ravel(x)[argmax(x)] * ravel(x)[argmin(x)]", lambda x: x.max() * x.min(), {"x": ((2, 3), "distinct")}),
]
R23, R234 = {"x": ((2, 3), "real")}, {"x": ((2, 3, 4), "real")}
SHAPE_PROGRAMS = [
    ("squeeze", "squeeze(x)", np.squeeze, {"x": ((1, 3, 1), "real")}),
    ("squeeze", "squeeze(x, axis=-1)", lambda x: np.squeeze(x, axis=-1), {"x": ((1, 3, 1), "real")}),
    ("expand_dims", "expand_dims(x, 1)", lambda x: np.expand_dims(x, 1), R23),
    ("expand_dims", "expand_dims(x, (0, -1))", lambda x: np.expand_dims(x, (0, -1)), R23),
    ("moveaxis", "moveaxis(x, 0, -1)", lambda x: np.moveaxis(x, 0, -1), R234),
    ("moveaxis", "moveaxis(x, (0, 1), (2, 0))", lambda x: np.moveaxis(x, (0, 1), (2, 0)), R234),
    ("swapaxes", "swapaxes(x, 0, 2)", lambda x: np.swapaxes(x, 0, 2), R234),
    ("flip", "flip(x)", np.flip, R23),
    ("flip", "flip(x, axis=(0, 2))", lambda x: np.flip(x, axis=(0, 2)), R234),
    ("fliplr", "fliplr(x)", np.fliplr, R23),
    ("flipud", "flipud(x)", np.flipud, {"x": ((4,), "real")}),
    ("rot90", "rot90(x)", np.rot90, R23),
    ("rot90", "rot90(x, 2)", lambda x: np.rot90(x, 2), R23),
    ("rot90", "rot90(x, -1, axes=(1, 2))", lambda x: np.rot90(x, -1, axes=(1, 2)), R234),
    ("roll", "roll(x, 2)", lambda x: np.roll(x, 2), R23),
    ("roll", "roll(x, -1, axis=1)", lambda x: np.roll(x, -1, axis=1), R23),
    ("roll", "roll(x, (1, 5), axis=(0, 2))", lambda x: np.roll(x, (1, 5), axis=(0, 2)), R234),
    ("repeat", "repeat(x, 2)", lambda x: np.repeat(x, 2), R23),
    ("repeat", "repeat(x, (1, 0, 3), axis=1)", lambda x: np.repeat(x, (1, 0, 3), axis=1), R23),
    ("tile", "tile(x, 2)", lambda x: np.tile(x, 2), {"x": ((3,), "real")}),
    ("tile", "tile(x, (2, 1, 2))", lambda x: np.tile(x, (2, 1, 2)), R23),
    ("pad", "pad(x, 1)", lambda x: np.pad(x, 1), R23),
    ("pad", "pad(x, ((0, 1), (2, 0)), constant_values=-1.5)",
     lambda x: np.pad(x, ((0, 1), (2, 0)), constant_values=-1.5), R23),
    ("pad", "pad(x, (1, 2), mode='edge')", lambda x: np.pad(x, (1, 2), mode="edge"), R23),
    ("pad", "pad(x, 2, mode='reflect')", lambda x: np.pad(x, 2, mode="reflect"), {"x": ((4,), "real")}),
    ("pad", "pad(x, ((1, 1), (0, 4)), mode='wrap')", lambda x: np.pad(x, ((1, 1), (0, 4)), mode="wrap"), R23),
    ("pad", "pad(x, 1, mode='symmetric')", lambda x: np.pad(x, 1, mode="symmetric"), R23),
    ("broadcast_to", "broadcast_to(x, (2, 2, 3))", lambda x: np.broadcast_to(x, (2, 2, 3)), {"x": ((3,), "real")}),
    ("atleast_1d", "atleast_1d(x)", np.atleast_1d, {"x": ((), "real")}),
    ("atleast_2d", "atleast_2d(x)", np.atleast_2d, {"x": ((3,), "real")}),
    ("atleast_3d", "atleast_3d(x)", np.atleast_3d, {"x": ((3,), "real")}),
    ("atleast_3d", "atleast_3d(x)", np.atleast_3d, R23),
    ("vstack", "vstack(x, y)", lambda x, y: np.vstack((x, y)), {"x": ((3,), "real"), "y": ((2, 3), "real")}),
    ("hstack", "hstack(x, y)", lambda x, y: np.hstack((x, y)), {"x": ((3,), "real"), "y": ((2,), "real")}),
    ("hstack", "hstack(x, y)", lambda x, y: np.hstack((x, y)), {"x": ((2, 1), "real"), "y": ((2, 3), "real")}),
    ("column_stack", "column_stack(x, y)", lambda x, y: np.column_stack((x, y)),
     {"x": ((3,), "real"), "y": ((3, 2), "real")}),
    ("take", "take(x, [4, 0, 0])", lambda x: np.take(x, [4, 0, 0]), R23),
    ("take", "take(x, [[0, 2]], axis=1)", lambda x: np.take(x, [[0, 2]], axis=1), R23),
    ("take", "take(x, argmin(x, axis=1), axis=1)", lambda x: np.take(x, np.argmin(x, axis=1), axis=1),
     {"x": ((3, 2), "distinct")}),
    ("take_along_axis", "take_along_axis(x, [[1, 0], [2, 2]], 1)",
     lambda x: np.take_along_axis(x, np.array([[1, 0], [2, 2]]), 1), R23),
    ("take_along_axis", "take_along_axis(x, argmax(x, axis=0) + zeros((1, 3)), 0)",
     lambda x: np.max(x, axis=0, keepdims=True), {"x": ((2, 3), "distinct")}),
    ("append", "append(x, y)", lambda x, y: np.append(x, y), {"x": ((2, 3), "real"), "y": ((2,), "real")}),
    ("append", "append(x, y, axis=0)", lambda x, y: np.append(x, y, axis=0),
     {"x": ((2, 3), "real"), "y": ((1, 3), "real")}),
    ("len", "x * (len(x) + size(x) + ndim(x) + size(x, axis=1))",
     lambda x: x * (len(x) + np.size(x) + np.ndim(x) + np.size(x, 1)), R23),
    ("size", "size(x) * x", lambda x: np.size(x) * x, {"x": ((), "real")}),
    ("ndim", "ndim(x) * x", lambda x: np.ndim(x) * x, R234),
    ("trace", "trace(x)", np.trace, {"x": ((3, 3), "real")}),
    ("trace", "trace(x, offset=1)", lambda x: np.trace(x, offset=1), R23),
    ("trace", "trace(x, -1, 0, 2)", lambda x: np.trace(x, -1, 0, 2), R234),
    ("diagonal", "diagonal(x)", np.diagonal, R23),
    ("diagonal", "diagonal(x, 1, 2, 0)", lambda x: np.diagonal(x, 1, 2, 0), R234),
    ("diagonal", "diagonal(x, offset=-1)", lambda x: np.diagonal(x, offset=-1), {"x": ((3, 3), "real")}),
    ("tril", "tril(x)", np.tril, {"x": ((3, 3), "real")}),
    ("tril", "tril(x, k=-1)", lambda x: np.tril(x, k=-1), R234),
    ("triu", "triu(x, 1)", lambda x: np.triu(x, 1), R23),
]
PAIRS = [((), ()), ((3,), (3,)), ((3,), (2, 3)), ((2, 1), (1, 3))]
DOMAINS["offgrid"] = lambda rng, s: rng.integers(-3, 3, s) + rng.uniform(0.1, 0.4, s)
DOMAINS["divisor"] = lambda rng, s: rng.choice([-2.0, -1.0, 1.0, 2.0], s)
DOMAINS["unit"] = lambda rng, s: rng.uniform(-0.9, 0.9, s)


def _point(cid, inputs):
    rng = np.random.default_rng(zlib.crc32(cid.encode()))
    return {k: np.asarray(DOMAINS[d](rng, s) if isinstance(d, str) else d, dtype=np.float64)
            for k, (s, d) in inputs.items()}


def _cases():
    out = []
    for name, (src, ref, dom) in ELEMENTWISE.items():
        for shape in SHAPES:
            out.append((name, src, ref, {"x": (shape, dom)}))
    for name, (src, ref, dom) in ALIASES.items():
        shapes = [s for s in SHAPES if s] if name in ("amin", "concatenate") else SHAPES
        for shape in shapes:
            out.append((name, src, ref, {"x": (shape, dom)}))
    for name, (src, ref, dx, dy) in BINARY.items():
        for sx, sy in PAIRS:
            out.append((name, src, ref, {"x": (sx, dx), "y": (sy, dy)}))
    return out + PROGRAMS + SHAPE_PROGRAMS


CASES = _cases()


@pytest.mark.parametrize("name, src, ref, inputs", CASES,
                         ids=[f"{c[1]} | " + " ".join("x".join(map(str, s)) or "scalar" for s, _ in c[3].values())
                              for c in CASES])
def test_builtin_derivatives(name, src, ref, inputs):
    at = _point(src + repr(inputs), inputs)
    report = check_program(src, at, ref=ref)
    assert report.ok, f"{src}\n{report}"


def test_every_new_builtin_is_exercised():
    used = {m for c in CASES for m in re.findall(r"\b([a-z_0-9]+)\(", c[1])}
    missing = [f for f in [*ELEMENTWISE, *ALIASES, *BINARY, *(p[0] for p in PROGRAMS + SHAPE_PROGRAMS)] if f not in FUNCTIONS or f not in used]
    assert not missing


# ==========================================================================
# Numerics: stability and accuracy, against closed forms
# ==========================================================================

def _value(src, **at):
    return next(iter(gradcalc.evaluate(src, at=at).values()))


def _grad(src, **at):
    return gradcalc.grad(src, at=at)["x"]


def _error(src, **at) -> str:
    """The text of the user error evaluating src raises."""
    with pytest.raises(gradcalc.GradcalcError) as err:
        gradcalc.evaluate(src, at=at)
    return str(err.value)


def test_log_sigmoid_is_stable_at_1000():
    x = np.array([-1000.0, 1000.0])
    assert _value("log_sigmoid(x)", x=x).tolist() == [-1000.0, 0.0]  # -log(1 + e^-1000) is -0.0
    assert _grad("sum(log_sigmoid(x))", x=x).tolist() == [1.0, 0.0]  # sigmoid(-x)


def test_erf_matches_the_math_module_to_the_bit():
    x = np.linspace(-6.0, 6.0, 97)
    assert _value("erf(x)", x=x).tolist() == [math.erf(v) for v in x]
    assert _value("erfc(x)", x=x).tolist() == [math.erfc(v) for v in x]
    # closed forms: erf(0.5) and erfc(5) to 16 digits (Abramowitz and Stegun, table 7.1)
    assert _value("erf(x)", x=0.5) == pytest.approx(0.5204998778130465, rel=4e-16)
    assert _value("erfc(x)", x=5.0) == pytest.approx(1.5374597944280349e-12, rel=4e-16)


def test_erf_derivative_is_the_gaussian():
    assert _grad("erf(x)", x=0.0) == pytest.approx(2 / math.sqrt(math.pi), rel=1e-15)
    assert _grad("erfc(x)", x=1.0) == pytest.approx(-2 / math.sqrt(math.pi) * math.exp(-1), rel=1e-15)


def test_gelu_keeps_its_relative_accuracy_in_the_left_tail():
    # gelu(-10) = -10 Phi(-10) = -5 erfc(10 / sqrt 2)
    assert _value("gelu(x)", x=-10.0) == pytest.approx(-5 * math.erfc(10 / math.sqrt(2)), rel=1e-14)


def test_sinc_at_zero():
    assert _value("sinc(x)", x=0.0) == 1.0
    assert _grad("sinc(x)", x=0.0) == 0.0


def _sinc_derivatives_by_series(x):
    # sinc(x) = 1 - (pi x)^2/6 + (pi x)^4/120 - ...: f' = -pi^2 x/3 + pi^4 x^3/30 and
    # f'' = -pi^2/3 + pi^4 x^2/10, with the next terms below 1e-24 relative for |x| <= 1e-6
    p2 = math.pi ** 2
    return -p2 * x / 3 + p2 * p2 * x ** 3 / 30, -p2 / 3 + p2 * p2 * x * x / 10


def _sinc_derivatives_by_formula(x):
    # (pi x cos(pi x) - sin(pi x)) / (pi x^2) and its derivative: no cancellation to fear for
    # |pi x| >= 1/4 (relative error about eps / (pi x)^2)
    y = math.pi * x
    d1 = (y * math.cos(y) - math.sin(y)) / (math.pi * x * x)
    d2 = math.pi * ((2 - y * y) * math.sin(y) - 2 * y * math.cos(y)) / (y ** 3) * math.pi
    return d1, d2


@pytest.mark.parametrize("x", [0.0, 1e-9, -1e-9, 1e-6, -1e-6, 0.25, -0.3, 1 / math.pi, 0.3184, 1.7])
def test_sinc_first_and_second_derivatives_near_zero(x):
    small = abs(x) <= 1e-6
    d1, d2 = _sinc_derivatives_by_series(x) if small else _sinc_derivatives_by_formula(x)
    rev = float(_grad("sinc(x)", x=x))
    fwd = float(gradcalc.jacobian("sinc(x)", at={"x": x}, mode="fwd")["_"]["x"])
    assert rev == fwd  # one rule serves both modes
    assert rev == pytest.approx(d1, rel=1e-14, abs=1e-300)
    hess = float(gradcalc.hessian("sinc(x)", at={"x": x})["x"]["x"])
    assert hess == pytest.approx(d2, rel=1e-13)


def test_nan_to_num_replaces_and_cuts():
    x = np.array([np.nan, np.inf, -np.inf, 1.5])
    assert _value("nan_to_num(x)", x=x).tolist() == np.nan_to_num(x).tolist()
    assert _value("nan_to_num(x, nan=1, posinf=2, neginf=-3)", x=x).tolist() == [1.0, 2.0, -3.0, 1.5]
    assert _grad("sum(nan_to_num(x))", x=x).tolist() == [0.0, 0.0, 0.0, 1.0]


# values taken as arguments that are not integers (trapezoid's dx, pad's constant_values,
# nan_to_num's nan, posinf and neginf) are differentiable, scalars or arrays as NumPy broadcasts them
_NAN = np.nan
VALUE_ARGUMENTS = [
    ("trapezoid(y, dx=h)", lambda y, h: np.trapezoid(y, dx=h), {"y": [1.0, 2.0, 4.0], "h": 0.5}),
    ("trapezoid(y, dx=h)", lambda y, h: np.trapezoid(y, dx=h),
     {"y": [[1.0, -2.0, 0.5, 3.0], [0.25, 1.5, -1.0, 2.0]], "h": [[0.5], [2.0]]}),
    ("pad(x, 1, constant_values=c)", lambda x, c: np.pad(x, 1, constant_values=c), {"x": [1.0, 2.0], "c": 0.5}),
    ("pad(x, (0, 2), constant_values=c)", lambda x, c: np.pad(x, (0, 2), constant_values=c),
     {"x": [1.0, 2.0, -1.0], "c": [-0.75]}),
    ("pad(x, 1, constant_values=c)", lambda x, c: np.pad(x, 1, constant_values=c),
     {"x": [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], "c": [0.5, -1.5]}),
    ("pad(x, ((1, 0), (2, 1)), constant_values=c)", lambda x, c: np.pad(x, ((1, 0), (2, 1)), constant_values=c),
     {"x": [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], "c": [[0.5, -1.5], [2.5, 3.5]]}),
    ("pad(x, 1, constant_values=c)", lambda x, c: np.pad(x, 1, constant_values=c),
     {"x": [[1.0, 2.0], [4.0, 5.0]], "c": [[0.5], [-1.5]]}),
    # (x at nan or inf has no central differences: the non-finite entries are constants here)
    ("nan_to_num([nan, x, inf], nan=c, posinf=d)",
     lambda x, c, d: np.nan_to_num(np.array([_NAN, x, np.inf]), nan=c, posinf=d), {"x": 1.5, "c": 0.5, "d": -2.0}),
    ("nan_to_num(x * [[nan, 1], [nan, -inf]], nan=c, neginf=c)",
     lambda x, c: np.nan_to_num(x * np.array([[_NAN, 1.0], [_NAN, -np.inf]]), nan=c, neginf=c),
     {"x": 1.5, "c": [[0.5], [-3.0]]}),
]


@pytest.mark.parametrize("src, ref, at", VALUE_ARGUMENTS, ids=[f"{c[0]} {np.shape(list(c[2].values())[1])}"
                                                            for c in VALUE_ARGUMENTS])
def test_value_arguments_are_differentiable(src, ref, at):
    report = check_program(src, at, ref=ref, unconnected=[])
    assert report.ok, f"{src}\n{report}"


def test_value_arguments_have_their_closed_form_derivatives_in_both_modes():
    cases = [  # d/dh trapezoid(y, dx=h) = trapezoid(y); d/dc of a constant pad counts the border
        ("trapezoid(y, dx=h)", {"y": np.array([1.0, 2.0, 4.0]), "h": 0.5}, "h", 4.5),
        ("sum(pad(x, 1, constant_values=c))", {"x": np.array([1.0, 2.0]), "c": 0.5}, "c", 2.0),
        ("sum(pad(x, ((1, 2), (0, 1)), constant_values=c))", {"x": np.ones((2, 2)), "c": 0.5}, "c", 5 * 3 - 4),
        ("sum(nan_to_num(x, nan=c))", {"x": np.array([np.nan, 1.0]), "c": 0.5}, "c", 1.0),
        ("sum(nan_to_num(x, posinf=c))", {"x": np.array([np.inf, np.inf, -np.inf, 1.0]), "c": 0.5}, "c", 2.0),
        ("sum(nan_to_num(x, neginf=c))", {"x": np.array([np.inf, np.inf, -np.inf, 1.0]), "c": 0.5}, "c", 1.0),
    ]
    for src, at, name, want in cases:
        for mode in ("rev", "fwd"):
            jac = gradcalc.jacobian(src, at=at, mode=mode)
            assert float(jac["_"][name]) == want, (src, mode)
            assert name not in jac.unconnected, (src, mode)


@pytest.mark.parametrize("src, message", [
    ("nan_to_num(x, nan=[1, 2, 3])", "nan_to_num(): nan= of shape (3,) does not fit x's shape (2,)"),
    ("nan_to_num(x, posinf=[[1], [2]])", "nan_to_num(): posinf= of shape (2, 1) does not fit x's shape (2,)"),
    ("pad(x, 1, constant_values=[1, 2, 3])", "pad(): constant_values of shape (3,) give no (before, after) "
     "pair for each of the 1 axes"),
    ("pad(x, 1, mode='edge', constant_values=2)", "pad: mode 'edge' takes no constant_values"),
])
def test_value_arguments_of_the_wrong_shape_are_errors(src, message):
    assert message in _error(src, x=np.array([1.0, 2.0]))


# NumPy's own options and edge cases of the built-ins (SPEC §2.5: arguments, defaults and N-D
# behaviour are NumPy's): values against NumPy, derivatives against central differences
_DISTINCT = [[0.5, -1.25, 2.0], [1.75, 0.25, -0.5]]
NUMPY_OPTIONS = [
    ("x * argmax(x, axis=1, keepdims=true)", lambda x: x * np.argmax(x, axis=1, keepdims=True), {"x": _DISTINCT}),
    ("x * argmin(x, keepdims=true)", lambda x: x * np.argmin(x, keepdims=True), {"x": _DISTINCT}),
    ("x * argmax(x, axis=0, keepdims=false)", lambda x: x * np.argmax(x, axis=0), {"x": _DISTINCT}),
    ("eye(3, 4, k=1) @ x", lambda x: np.eye(3, 4, k=1) @ x, {"x": [1.0, -2.0, 0.5, 3.0]}),
    ("eye(3, k=-1) * x", lambda x: np.eye(3, k=-1) * x, {"x": [1.0, -2.0, 0.5]}),
    ("eye(2, 3, 5) + x", lambda x: np.eye(2, 3, 5) + x, {"x": 1.5}),
    ("round(x, 2) * x", lambda x: np.round(x, 2) * x, {"x": [0.1234, -2.71828, 3.14159]}),
    ("round(x, decimals=-1) + x", lambda x: np.round(x, decimals=-1) + x, {"x": [12.3, -47.0, 151.0]}),
    ("diff(x, prepend=p, append=q)", lambda x, p, q: np.diff(x, prepend=p, append=q),
     {"x": [1.0, 2.5, -1.0, 4.0], "p": 0.5, "q": [2.0, -3.0]}),
    ("diff(x, n=2, axis=0, prepend=p)", lambda x, p: np.diff(x, n=2, axis=0, prepend=p),
     {"x": [[1.0, 2.5, -1.0], [4.0, 0.5, 2.0]], "p": [[3.0, -1.0, 0.25]]}),
    ("diff(x, axis=0, append=q)", lambda x, q: np.diff(x, axis=0, append=q),
     {"x": [[1.0, 2.5, -1.0], [4.0, 0.5, 2.0]], "q": -0.75}),
    ("tril(x)", np.tril, {"x": [1.0, -2.0, 0.5]}),
    ("triu(x, 1) * x", lambda x: np.triu(x, 1) * x, {"x": [1.0, -2.0, 0.5, 3.0]}),
    ("x * argsort(x)", lambda x: x * np.argsort(x), {"x": 2.5}),
    ("x * argsort(x, axis=0)", lambda x: x * np.argsort(x, axis=0), {"x": 2.5}),
]


@pytest.mark.parametrize("src, ref, at", NUMPY_OPTIONS, ids=[c[0] for c in NUMPY_OPTIONS])
def test_numpy_options_match_numpy(src, ref, at):
    report = check_program(src, at, ref=ref)
    assert report.ok, f"{src}\n{report}"


@pytest.mark.parametrize("src, at", [
    ("sin(trapezoid(y, dx=h)) * h", {"y": [1.0, 2.0, 4.0], "h": 0.5}),
    ("sum(sin(pad(x, 1, constant_values=c) * x[0]))", {"x": [1.0, 2.0], "c": [0.5, -1.0]}),
    ("sum(sin(nan_to_num([nan, x, inf], nan=c, posinf=c * x)))", {"x": 1.5, "c": 0.5}),
    ("sum(sin(diff(x, prepend=p, append=p * x[0])))", {"x": [1.0, 2.5, -1.0], "p": 0.3}),
    ("sum(sin(tril(x) @ x))", {"x": [1.0, 2.0, 4.0]}),
    ("sum(sin(dot(a, b)))", {"a": [[[1.0, -0.5, 2.0]], [[0.25, 1.5, -1.0]]], "b": [[[1.0, 2.0], [-0.5, 0.75], [0.3, -1.2]]]}),
])
def test_second_derivatives_through_value_arguments_and_numpy_options(src, at):
    report = check_hessian(src, at)
    assert report.ok, f"{src}\n{report}"


def test_round_to_decimals_is_numpys_to_the_bit():
    x = np.random.default_rng(7).uniform(-1e3, 1e3, 200)
    x[:4] = [0.125, 2.675, -0.5, 1e300]
    for d in (-3, -1, 1, 2, 5, 400, -400):
        with np.errstate(all="ignore"):
            want = np.round(x, d)
        got = _value(f"round(x, {d})", x=x)
        assert got.tobytes() == want.tobytes(), d
    assert _grad("sum(round(x, 2))", x=x).tolist() == [0.0] * len(x)  # a step function, as round(x)


def test_logsumexp_of_nothing_is_minus_inf():
    # scipy.special.logsumexp([]) and jax's: log(0) = -inf; over an empty axis, one -inf each
    assert _value("logsumexp(x)", x=np.zeros(0)) == -np.inf
    assert _value("logsumexp(x, axis=1)", x=np.zeros((2, 0))).tolist() == [-np.inf, -np.inf]
    assert _value("logsumexp(x, axis=1, keepdims=true)", x=np.zeros((2, 0))).shape == (2, 1)
    for mode in ("rev", "fwd"):  # the derivative has no elements
        assert gradcalc.jacobian("logsumexp(x)", at={"x": np.zeros(0)}, mode=mode)["_"]["x"].shape == (0,)
        jac = gradcalc.jacobian("logsumexp(x, axis=0)", at={"x": np.zeros((0, 2))}, mode=mode)
        assert jac["_"]["x"].shape == (2, 0, 2)


@pytest.mark.parametrize("src, message", [
    ("tril(x)", "tril needs an array of at least one dimension, got shape ()"),
    ("round(x, 0.5)", "round(): decimals must be an integer, not 0.5"),
    ("argmax(x, keepdims=2)", "argmax(): keepdims must be true or false, not 2"),
    ("diff(x, prepend=[1, 2])", "concat"),
])
def test_numpy_options_errors(src, message):
    assert message in _error(src, x=2.0 if src.startswith("tril") else np.ones((2, 3)))


@pytest.mark.parametrize("fn, base", [("logaddexp", math.e), ("logaddexp2", 2.0)])
def test_logaddexp_is_stable_at_1000(fn, base):
    x, y = np.array([1000.0, -1000.0, 1000.0]), np.array([1000.0, -1000.0, -1000.0])
    log2 = math.log(2.0, base)  # log_b(2): the sum of two equal terms
    assert _value(f"{fn}(x, y)", x=x, y=y).tolist() == [1000.0 + log2, -1000.0 + log2, 1000.0]
    g = gradcalc.grad(f"sum({fn}(x, y))", at={"x": x, "y": y})
    # exactly b^x / (b^x + b^y): the share of two equal terms is 0.5, not 0.5000000000000275
    # (b^(x - ans), with ans = 1000 + log_b 2 rounded to an ulp of 1000, 1e-13)
    assert g["x"].tolist() == [0.5, 0.5, 1.0] and g["y"].tolist() == [0.5, 0.5, 0.0]
    fwd = gradcalc.jacobian(f"{fn}(x, y)", at={"x": -1000.0, "y": -1000.0}, mode="fwd")["_"]
    assert float(fwd["x"]) == float(fwd["y"]) == 0.5


@pytest.mark.parametrize("x", [[1000.0, 1000.0], [-1000.0, -1000.0], [1e300, 1e300, 1e300, 1e300]])
def test_logsumexp_of_equal_terms_shares_its_gradient_exactly(x):
    assert gradcalc.grad("logsumexp(x)", at={"x": x})["x"].tolist() == [1 / len(x)] * len(x)
    m = np.array([[1000.0, 1000.0], [3.0, 5.0]])  # along an axis: softmax of each row
    g = gradcalc.grad("sum(logsumexp(x, axis=1))", at={"x": m})["x"]
    assert g[0].tolist() == [0.5, 0.5]
    assert g[1] == pytest.approx([1 / (1 + math.exp(2)), 1 / (1 + math.exp(-2))], rel=1e-15)


@pytest.mark.parametrize("fn", ["fmax", "fmin", "maximum"])
def test_fmax_ties_share_as_maximum_does(fn):
    g = gradcalc.grad(f"sum({fn}(x, y))", at={"x": [1.0, 2.0], "y": [1.0, 0.0]})
    big = [1.0, 1.0] if fn != "fmin" else [0.5, 0.0]
    assert g["x"].tolist() == ([0.5, 1.0] if fn != "fmin" else big)


def test_fmax_passes_over_nan():
    x, y = np.array([np.nan, 1.0]), np.array([2.0, np.nan])
    assert _value("fmax(x, y)", x=x, y=y).tolist() == [2.0, 1.0]
    g = gradcalc.grad("sum(fmin(x, y))", at={"x": x, "y": y})
    assert g["x"].tolist() == [0.0, 1.0] and g["y"].tolist() == [1.0, 0.0]


def test_copysign_derivative():
    g = gradcalc.grad("sum(copysign(x, y))", at={"x": [2.0, -3.0, 0.0], "y": [-1.0, -1.0, 1.0]})
    assert g["x"].tolist() == [-1.0, 1.0, 0.0] and g["y"].tolist() == [0.0, 0.0, 0.0]


def test_cumsum_of_the_issue():
    # d/dx sum(cumsum(x)^2) = reverse cumsum of 2 cumsum(x): [2 (1+3+6), 2 (3+6), 2 * 6]
    assert _grad("sum(cumsum(x)^2)", x=[1.0, 2.0, 3.0]).tolist() == [20.0, 18.0, 12.0]


def test_sort_ties_share_the_gradient_as_max_does():
    # sorted [0, 1, 3, 3]: the two 3s share the weights 3 and 4 of their places equally
    x = np.array([3.0, 1.0, 3.0, 0.0])
    assert _value("sort(x)", x=x).tolist() == np.sort(x).tolist()
    assert _grad("sum(sort(x) * [1, 2, 3, 4])", x=x).tolist() == [3.5, 2.0, 3.5, 1.0]
    assert _grad("max(x)", x=x).tolist() == [0.5, 0.0, 0.5, 0.0]
    jac = {m: next(iter(gradcalc.jacobian("sort(x)", at={"x": x}, mode=m).values()))["x"]
           for m in ("fwd", "rev")}
    assert jac["fwd"].tolist() == jac["rev"].tolist()
    assert jac["rev"][2:, [0, 2]].tolist() == [[0.5, 0.5], [0.5, 0.5]]


def test_sort_ties_are_shared_in_time_and_memory_linear_in_the_length():
    # which elements shared a run was an n x n matrix: 12,000 values, half of them tied at 0 (a
    # relu's), were refused by max_elements (1.44e8 elements); now a segment sum and a gather
    x = np.random.default_rng(5).standard_normal(12_000)
    zeros = int((x <= 0).sum())
    want = np.zeros_like(x)  # relu'(x) = 0 where x <= 0: the tied zeros pass nothing back
    want[x > 0] = np.argsort(np.argsort(x[x > 0])) + zeros  # each other value its own place
    np.testing.assert_array_equal(_grad("sum(sort(relu(x)) * arange(len(x)))", x=x), want)
    y = np.repeat([2.0, -1.0, 5.0], 4_000)  # three runs of 4,000 ties: each shares its places' mean
    got = _grad("sum(sort(x) * arange(len(x)))", x=y)
    np.testing.assert_allclose(got, np.repeat([5_999.5, 1_999.5, 9_999.5], 4_000), rtol=1e-13)


def test_argmax_values_are_numpys():
    x = np.array([[1.0, 5.0, 2.0], [7.0, 0.0, 7.0]])
    assert _value("argmax(x)", x=x) == 3
    assert _value("argmin(x, axis=1)", x=x).tolist() == [0, 1]
    assert _value("argsort(x, axis=0)", x=x).tolist() == np.argsort(x, axis=0).tolist()


@pytest.mark.parametrize("src, message", [
    ("pad(x, 1, mode='mean')", "pad: mode 'mean' is not supported; use one of 'constant', 'edge', "
     "'wrap', 'reflect', 'symmetric'"),
    ("pad(x, ((1, 2, 3),))", "pad: pad_width ((1, 2, 3),) does not fit an array of dimension 2"),
    ("squeeze(x, 0)", "squeeze(): cannot squeeze axis 0 of length 2 (shape (2, 3))"),
    ("repeat(x, (1, 2), axis=1)", "repeat: 2 repeats for an axis of length 3"),
    ("len(x[0, 0])", "len() of a scalar"),
    ("fliplr(x[0])", "fliplr needs an array of at least two dimensions, got shape (3,)"),
    ("take(x, 10**30)", "take(): an index array holds 1e+30, out of range for any axis"),  # (not -2^63)
    # (not einsum's "'z' has length 3 and 2 in 'az,z->a'": the user wrote no subscripts)
    ("inner(x, [1, 2])", "inner sums over the last axes, which must have one length: shapes (2, 3) "
     "and (2,) end in 3 and 2"),
])
def test_shape_argument_errors(src, message):
    with pytest.raises(gradcalc.GradcalcError) as err:
        gradcalc.evaluate(src, at={"x": np.zeros((2, 3))})
    assert err.value.message == message


def test_string_arguments_are_checked_where_no_string_is_taken():
    with pytest.raises(gradcalc.GradcalcError) as err:
        gradcalc.evaluate("roll(x, 'a')", at={"x": np.zeros(3)})
    assert "shift must be an integer" in err.value.message


# Second order: each composition's derivative pass is itself a traced program, differentiated
# again (forward over reverse) and compared with central differences of the gradient.
@pytest.mark.parametrize("name, src, ref, inputs", CASES,
                         ids=[f"sum(sin({c[1]})) | " + " ".join("x".join(map(str, s)) or "scalar"
                                                                for s, _ in c[3].values()) for c in CASES])
def test_builtin_second_derivatives(name, src, ref, inputs):
    report = check_hessian(f"sum(sin({src}))", _point(src + repr(inputs), inputs))
    assert report.ok, f"{src}\n{report}"


def test_every_builtin_is_named_in_the_readme_reference():
    # README.md's built-in reference (its table and NumPy's spellings) names each built-in
    import pathlib
    text = (pathlib.Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    reference = text[text.index("Built-in functions (each with"):text.index("Choices where the contract is silent")]
    named = set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", reference))
    assert sorted(n for n in FUNCTIONS if n not in named) == []


# ==========================================================================
# Counts, repeats, widths and offsets a user writes: any integer is a result or a user error
# ==========================================================================

def test_tile_with_negative_reps_is_a_user_error_on_the_command_line():
    from cli_run import user_error
    for reps in ("-1", "(2, -1)"):
        r = user_error("eval", f"tile(x, {reps})", "--at", "x=[1,2]")
        assert "tile(): reps must be a non-negative integer, got -1" in r.stderr.splitlines()[0]


_COUNTS = ["-1", "-10**30", "0", "10**12", "2**62", "10**30", "(2**62, 2**62)", "(1, -1)"]
_TAKING_COUNTS = ["tile(x, {})", "repeat(x, {})", "repeat(M, {}, axis=0)", "pad(x, {})",
                  "pad(x, {}, mode='edge')", "pad(x, {}, mode='wrap')", "reshape(x, {})",
                  "broadcast_to(x, {})", "a, b = split(x, {}); a", "a, b = array_split(x, {}); a",
                  "linspace(0, x[0], {})", "diff(x, n={})", "roll(x, {})", "roll(M, {}, axis=0)",
                  "diag(x, k={})", "diag(M, k={})", "diagonal(M, offset={})", "trace(M, offset={})",
                  "tril(M, {})", "triu(M, {})", "rot90(M, {})", "one_hot([0, 1], {})",
                  "expand_dims(x, {})", "take(x, {})", "matrix_power(M, {})", "eye(2, {})",
                  "zeros({}) + x[0]", "segment_sum(x, [0, 0, 1], {})"]


@pytest.mark.parametrize("template", _TAKING_COUNTS)
def test_any_count_gives_a_result_or_a_user_error_at_once(template):
    import time
    at = {"x": np.array([1.0, -2.0, 0.5]), "M": np.array([[1.0, 2.0], [3.0, 4.0]])}
    escaped = []
    for count in _COUNTS:
        src = template.format(count)
        point = {k: v for k, v in at.items() if re.search(rf"\b{k}\b", src)}
        start = time.perf_counter()
        escaped.append(escapes.escaped(src, point))
        if time.perf_counter() - start > 2.0:
            escaped.append(f"{src}: took {time.perf_counter() - start:.1f} s")
    assert not any(escaped), escaped


@pytest.mark.parametrize("src", ["tile(x, 10**12)", "tile(x, (2**62, 2**62))", "repeat(x, 2**62)",
                                 "repeat(x, (2**62, 2**62))", "pad(x, 10**12, mode='edge')"])
def test_huge_repeats_are_refused_by_size_before_allocating(src):
    # (before: "out of memory" from NumPy's allocation, or an int64 overflow as an internal error)
    with pytest.raises(gradcalc.GradcalcError) as err:
        gradcalc.evaluate(src, at={"x": np.array([1.0, 2.0])})
    assert re.search(r"result would have \S+ elements, more than \S*max_elements", err.value.message)


@pytest.mark.parametrize("src, message", [
    # a count computed past 2^53 arrives as a float and is an integer all the same (SPEC §2.3);
    # it is worded as written, not in its 301 digits (a shape's, test_language.py: as a float)
    ("tile(x, 1e300)", "tile()'s result would have 2e+300 elements, more than "),
    ("tile(x, -1e300)", "tile(): reps must be a non-negative integer, got -1e+300"),
    ("repeat(x, 1e300)", "repeat()'s result would have 2e+300 elements, more than "),  # (a count, as tile's)
    ("repeat(x, -1e300)", "repeat(): repeats must be a non-negative integer or a tuple of them, got -1e+300"),
    ("one_hot([1], -1e300)", "one_hot(): n must be a non-negative integer, got -1e+300"),
])
def test_integers_past_two_to_the_53_are_integers(src, message):
    got = _error(src, **({"x": np.array([1.0, 2.0])} if "x" in src else {}))
    assert got.startswith(f"<expr>:1:1: {message}"), got


def test_diff_with_n_beyond_the_length_is_empty_at_once():
    import time
    x = np.array([1.0, 4.0, 9.0])
    start = time.perf_counter()
    for n in (3, 4, 10**6, 10**30):
        assert _value(f"diff(x, n={n})", x=x).shape == np.diff(x, n=min(n, 10)).shape == (0,)
        assert _grad(f"sum(diff(x, n={n}))", x=x).tolist() == [0.0, 0.0, 0.0]
    m = np.arange(6.0).reshape(2, 3)
    assert _value("diff(x, n=10**6, axis=0)", x=m).shape == np.diff(m, n=5, axis=0).shape == (0, 3)
    assert time.perf_counter() - start < 60  # (a hang guard: make bench measures speed)
    assert _value("diff(x, n=2)", x=x).tolist() == np.diff(x, n=2).tolist() == [2.0]


@pytest.mark.parametrize("k", [10**18, -10**18, 10**30, -10**30])
def test_diagonal_offsets_beyond_the_matrix(k):
    m = np.array([[1.0, 2.0], [3.0, 4.0]])
    # beyond the matrix a diagonal is empty, and a triangle is all of it or nothing
    assert _value(f"diag(x, k={k})", x=m).shape == (0,)
    assert _value(f"diagonal(x, offset={k})", x=m).shape == (0,)
    assert _value(f"trace(x, offset={k})", x=m) == 0.0
    assert _value(f"tril(x, {k})", x=m).tolist() == (m if k > 0 else 0 * m).tolist()
    assert _value(f"triu(x, {k})", x=m).tolist() == (0 * m if k > 0 else m).tolist()
    assert _grad(f"trace(x, offset={k})", x=m).tolist() == [[0.0, 0.0], [0.0, 0.0]]


@pytest.mark.parametrize("shift", [10**18 + 1, -(10**18) - 1, 7, -7])
def test_roll_by_a_huge_shift_is_roll_by_its_remainder(shift):
    x = np.arange(5.0)
    assert _value(f"roll(x, {shift})", x=x).tolist() == np.roll(x, shift % 5).tolist()
    assert _value(f"roll(x, {shift}, axis=0)", x=x).tolist() == np.roll(x, shift % 5).tolist()


# ==========================================================================
# Kink notes name what the program wrote, and only kinks the value has
# ==========================================================================

def _kink_notes(src, **at):
    return [n for r in gradcalc.check(src, at=at).results for n in r.notes if "kink" in n]


@pytest.mark.parametrize("src, x, named, col", [
    ("clip(x, 0, 1)", 1e-9, "clip", 1), ("clip(x, 0, 1)", 1 - 1e-9, "clip", 1),
    ("x // 1", 1e-9, "//", 3), ("x % 1 + x", 1e-9, "%", 3), ("abs(x)", 1e-9, "abs", 1),
    ("(x > 0) * x", 1e-9, ">", 4), ("maximum(x, 0)", 1e-9, "maximum", 1), ("relu(x)", -1e-9, "relu", 1),
])
def test_kink_notes_name_the_operation_as_written(src, x, named, col):
    assert _kink_notes(src, x=x) == [f"near the kink of '{named}' (line 1, column {col})"]


@pytest.mark.parametrize("src, x", [
    ("nan_to_num(x)", 0.0), ("nan_to_num(x, nan=1, posinf=2, neginf=-3) * x", 1e-9),
    ("sinc(x)", 0.0), ("def f(t) = sinc(t); grad(f)(x)", 0.0), ("def f(t) = sinc(t); grad(f)(x)", 1e-9),
    ("def f(t) = sinc(t); grad(f)(x)", 1 / math.pi), ("def f(t) = sinc(t); grad(f)(x)", -1 / math.pi),
])
def test_no_kink_is_invented(src, x):
    # nan_to_num jumps only at inf and nan; sinc and its slope are smooth everywhere
    assert _kink_notes(src, x=x) == []


def test_plot_marks_name_the_operation_as_written():
    from gradcalc.plots import plot
    r = plot("clip(x, 0, 1)", "x", -1.0, 2.0)
    assert [(m["x"], m["note"]) for m in r.marks] == [(0.0, "kink of 'clip' (line 1, column 1)"),
                                                       (1.0, "kink of 'clip' (line 1, column 1)")]


# ==========================================================================
# Axes: one integer where NumPy takes one; a tuple where a tuple means something
# (fuzz report 4, H1 and M2: axis=() was an IndexError, an internal error)
# ==========================================================================

@pytest.mark.parametrize("src", [
    "diff(x, axis=())", "diff(x, axis=(0, 1))", "diff(x, axis=None)", "diff(x, axis=(), append=1)",
    "diff(x, axis=(), prepend=1)", "trapezoid(x, axis=())", "trapezoid(x, axis=(0, 1))",
    "take_along_axis(x, [[0]], ())", "take_along_axis(x, [[0]], (0, 1))", "moveaxis(x, None, 0)",
    "moveaxis(x, ((),), (0,))", "concat(x, x, axis=())", "concat(x, x, axis=(0,))", "append(x, x, axis=())",
    "stack(x, x, axis=())", "cross(ones((2, 3)), ones((2, 3)), axis=())", "cross(ones(3), ones(3), axisa=(0,))",
    "norm(x, ord=1, axis=((), ()))", "norm(x, ord=1, axis=((0, 1),))", "argmax(x, axis=())",
    "cumsum(x, axis=())", "sort(x, axis=(0, 1))",
])
def test_a_tuple_or_none_where_numpy_takes_one_integer_axis_is_refused(src):
    # NumPy: "'tuple' object cannot be interpreted as an integer" (diff(M, axis=(0, 1)) ran before,
    # along axis 0 alone)
    message = _error(src, **({"x": np.ones((2, 3))} if "(x," in src else {}))
    assert re.search(r"axis[abc]? must be an integer, not (\(.*\)|None)$", message), message


def test_moveaxis_of_a_scalar_with_none_is_refused():
    assert _error("moveaxis(1.0, None, 0)").endswith("axis must be an integer, not None")


def test_softmax_over_several_axes_and_over_none():
    x = np.random.default_rng(4).normal(size=(2, 3, 4))
    e = np.exp(x - x.max(axis=(0, 2), keepdims=True))
    ref = e / e.sum(axis=(0, 2), keepdims=True)  # jax.nn.softmax(x, axis=(0, 2))
    assert np.allclose(_value("softmax(x, axis=(2, 0))", x=x), ref, rtol=1e-14, atol=0)
    assert np.allclose(_value("log_softmax(x, axis=(0, -1))", x=x), np.log(ref), rtol=1e-13, atol=1e-15)
    m = np.arange(6.0).reshape(2, 3)  # over both axes: one distribution over the 6 elements
    assert np.allclose(_value("softmax(x, axis=(0, 1))", x=m), np.exp(m) / np.exp(m).sum(), rtol=1e-14)
    # over no axes (jax.nn.softmax(x, axis=())): each element its own distribution, 1 (log 0)
    # and nan at inf, as exp(inf - inf)
    assert _value("softmax(x, axis=())", x=np.array([1.0, 2.0, np.inf])).tolist()[:2] == [1.0, 1.0]
    assert np.isnan(_value("softmax(x, axis=())", x=np.array([1.0, 2.0, np.inf]))[2])
    assert _value("log_softmax(x, axis=())", x=m).tolist() == np.zeros((2, 3)).tolist()
    assert _value("softmax(x, axis=())", x=3.0) == 1.0
    # a constant: the derivative is 0 (connected, as JAX's)
    assert _grad("sum(softmax(x, axis=()) * [1, 2])", x=np.array([1.0, 2.0])).tolist() == [0.0, 0.0]
    assert _grad("sum(log_softmax(x, axis=()) * [1, 2])", x=np.array([1.0, 2.0])).tolist() == [0.0, 0.0]
    # the Jacobian of softmax over all axes, by hand: diag(p) - p p^T on the flattened elements
    p = (np.exp(m) / np.exp(m).sum()).ravel()
    for mode in ("rev", "fwd"):
        jac = gradcalc.jacobian("softmax(x, axis=(0, 1))", at={"x": m}, mode=mode)["_"]["x"]
        assert np.allclose(jac.reshape(6, 6), np.diag(p) - np.outer(p, p), rtol=1e-13, atol=1e-16)


def test_softmax_over_an_empty_axis_is_empty():
    # nothing to normalise: an empty result, as jax.nn.softmax (whose max starts at -inf)
    assert _value("softmax(x)", x=np.zeros(0)).shape == (0,)
    assert _value("log_softmax(x, axis=1)", x=np.zeros((2, 0))).shape == (2, 0)
    assert _grad("sum(softmax(x))", x=np.zeros(0)).shape == (0,)
    # and the other slices are as before: -inf and nan propagate as np.max's
    assert _value("softmax(x)", x=np.array([-np.inf, 0.0])).tolist() == [0.0, 1.0]


@pytest.mark.parametrize("src, shape, message", [
    ("max(x)", (0,), "max of an empty array (shape (0,)) has no value"),
    ("min(x)", (0,), "min of an empty array (shape (0,)) has no value"),
    ("max(x, axis=0)", (0, 3), "max over axis 0, of length 0 (shape (0, 3)), has no value"),
    ("min(x, axis=(0, 1))", (2, 0), "min of an empty array (shape (2, 0)) has no value"),
    ("argmax(x)", (0,), "argmax of an empty array (shape (0,)) has no value"),
    ("argmin(x, axis=1)", (3, 0), "argmin over axis 1, of length 0 (shape (3, 0)), has no value"),
    ("argmax(x)", (3, 0), "argmax of an empty array (shape (3, 0)) has no value"),
    ("norm(x, ord=inf)", (0,), "norm with ord=inf of an empty array (shape (0,)) has no value"),
    ("norm(x, ord=-inf)", (0,), "norm with ord=-inf of an empty array (shape (0,)) has no value"),
    ("norm(x, ord=inf)", (0, 2), "norm with ord=inf of an empty array (shape (0,)) has no value"),
])
def test_the_extreme_of_no_elements_is_a_user_error_in_the_languages_words(src, shape, message):
    # NumPy: "zero-size array to reduction operation maximum which has no identity", "attempt
    # to get argmax of an empty sequence" (before: those words, through the catch-all)
    with pytest.raises(gradcalc.GradcalcError) as err:
        gradcalc.evaluate(src, at={"x": np.zeros(shape)})
    assert err.value.message.startswith(message), err.value.message
    assert "size(x)" in err.value.hint and "identity" not in err.value.message


@pytest.mark.parametrize("src, shape, expected", [
    # NumPy's results where some element or no reduction is left: not errors
    ("max(x, axis=1)", (0, 3), np.zeros(0)),          # np.max(np.zeros((0, 3)), axis=1)
    ("min(x, axis=0)", (3, 0), np.zeros(0)),
    ("max(x, axis=())", (0, 3), np.zeros((0, 3))),
    ("argmax(x, axis=0)", (3, 0), np.zeros(0)),
    ("norm(x, ord=inf)", (2, 0), np.float64(0.0)),    # np.linalg.norm(np.zeros((2, 0)), ord=inf)
    ("norm(x, ord=1)", (0, 2), np.float64(0.0)),
])
def test_extremes_of_empty_arrays_numpy_computes_are_computed(src, shape, expected):
    got = _value(src, x=np.zeros(shape))
    assert np.shape(got) == np.shape(expected) and np.array_equal(got, expected)


# ==========================================================================
# Counts, lengths and sizes too large (fuzz report 4, H3, H4, L3)
# ==========================================================================

def test_a_huge_repeat_of_nothing_is_nothing():
    # np.repeat(np.zeros(0), 2**63) fails on its int64 cast (here an internal error before)
    assert _value("repeat(zeros(0), 2**63)").shape == (0,)
    assert _value("repeat(zeros(0), 10**30)").shape == (0,)
    assert _value("repeat(zeros((2, 0)), 2**64, axis=1)").shape == (2, 0)
    assert _value("repeat([1, 2], (0, 3))").tolist() == np.repeat([1.0, 2.0], [0, 3]).tolist()
    message = _error("repeat(zeros((0, 2)), 2**63, axis=1)")
    assert re.search(r"repeat\(\)'s result would have \S+ elements, more than \S*max_elements", message)


@pytest.mark.parametrize("src", ["arange(0, 1, 1e-320)", "arange(-1e308, 1e308, 1e-300)",
                                 "arange(1e308, -1e308, -1e-307)"])
def test_an_arange_whose_length_overflows_is_refused_as_too_long(src):
    # (stop - start) / step is inf: math.ceil(inf) was an OverflowError, an internal error
    message = _error(src)
    assert re.search(r"array of shape \(\S+,\) has \S+ elements, more than \S*max_elements=", message), message


def test_an_arange_between_numbers_whose_difference_overflows():
    # NumPy: "Maximum allowed size exceeded" (it computes stop - start = -inf); the range has
    # ceil((-1e308 - 1e308) / -1e307) = 21 numbers, counted exactly (the floats 1e308 and 1e307
    # are not 10^308 and 10^307: 20.000000000000001...), each start + i step
    from fractions import Fraction
    v = _value("arange(1e308, -1e308, -1e307)")
    n = math.ceil((Fraction(-1e308) - Fraction(1e308)) / Fraction(-1e307))
    assert n == 21 and v.shape == (21,)
    assert np.isfinite(v).all() and (np.diff(v) < 0).all() and v[0] == 1e308 and v[-1] >= -1e308
    for i in (1, 2, 5, 20):  # within a rounding of the exact start + i step
        exact = Fraction(1e308) + i * Fraction(-1e307)
        assert abs(Fraction(float(v[i])) - exact) <= 2 * abs(Fraction(np.spacing(float(exact))))


@pytest.mark.parametrize("src", ["zeros((0, 2**63-1))", "ones((2**64, 0))", "full((0, 1e300), 1)"])
def test_a_huge_integral_length_is_too_large_not_a_non_integer(src):
    # (before: "a shape holds integers, got 9.223372036854776e+18")
    message = _error(src)
    assert re.search(r"array of shape \(.*\) spans \S+ elements, more than \S*max_elements=", message), message
    assert "integers" not in message


# ==========================================================================
# plot's kink marks through a broadcast of operands of unequal rank (fuzz report 4, H9)
# ==========================================================================

@pytest.mark.parametrize("src, marks", [
    ("sum(s % zeros(0))", []), ("sum(mod(s, ones((0, 3))))", []), ("sum(s // zeros(0))", []),
    ("sum(maximum(s, zeros((2, 0))))", []),
    # s % 1 jumps at the integers -1, 0, 1 (each element alike); maximum(s, 1) bends at 1
    ("sum(s % ones(3))", [-1.0, 0.0, 1.0]), ("sum(maximum(s, ones((2, 3))))", [1.0]),
    ("sum((s > ones(3)) * s)", [1.0]),
])
def test_plot_marks_kinks_of_a_scalar_against_an_array(src, marks):
    # the kink distance got the samples' (200,) against (200, 3): a broadcast ValueError
    from cli_run import ok_json
    doc = ok_json("plot", src, "--over", "s=-1:1")
    assert [m["x"] for m in doc["marks"] if m["kind"] == "kink"] == marks
