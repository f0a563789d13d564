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

from fdcheck import check_program

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
    return out + PROGRAMS


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
    missing = [f for f in [*ELEMENTWISE, *ALIASES, *BINARY, *(p[0] for p in PROGRAMS)] if f not in FUNCTIONS or f not in used]
    assert not missing


# ==========================================================================
# Numerics: stability and accuracy, against closed forms
# ==========================================================================

def _value(src, **at):
    return next(iter(gradcalc.evaluate(src, at=at).values()))


def _grad(src, **at):
    return gradcalc.grad(src, at=at)["x"]


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


def test_nan_to_num_replaces_and_cuts():
    x = np.array([np.nan, np.inf, -np.inf, 1.5])
    assert _value("nan_to_num(x)", x=x).tolist() == np.nan_to_num(x).tolist()
    assert _value("nan_to_num(x, nan=1, posinf=2, neginf=-3)", x=x).tolist() == [1.0, 2.0, -3.0, 1.5]
    assert _grad("sum(nan_to_num(x))", x=x).tolist() == [0.0, 0.0, 0.0, 1.0]


@pytest.mark.parametrize("fn, base", [("logaddexp", math.e), ("logaddexp2", 2.0)])
def test_logaddexp_is_stable_at_1000(fn, base):
    x, y = np.array([1000.0, -1000.0, 1000.0]), np.array([1000.0, -1000.0, -1000.0])
    log2 = math.log(2.0, base)  # log_b(2): the sum of two equal terms
    assert _value(f"{fn}(x, y)", x=x, y=y).tolist() == [1000.0 + log2, -1000.0 + log2, 1000.0]
    g = gradcalc.grad(f"sum({fn}(x, y))", at={"x": x, "y": y})
    # (b^(x - ans): ans = 1000 + log_b 2 is rounded to an ulp of 1000, 1e-13)
    assert g["x"] == pytest.approx([0.5, 0.5, 1.0], rel=1e-12, abs=0)
    assert g["y"] == pytest.approx([0.5, 0.5, 0.0], rel=1e-12, abs=0)


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


def test_argmax_values_are_numpys():
    x = np.array([[1.0, 5.0, 2.0], [7.0, 0.0, 7.0]])
    assert _value("argmax(x)", x=x) == 3
    assert _value("argmin(x, axis=1)", x=x).tolist() == [0, 1]
    assert _value("argsort(x, axis=0)", x=x).tolist() == np.argsort(x, axis=0).tolist()
