"""Closed-form derivatives (gradcalc.symbolic, behind --symbolic).

Expected numbers are closed forms derived by hand; the wide agreement test
also compares with gradcalc's automatic Jacobian.  Examples stay small: sympy
simplification is slow on large expressions.
"""
from __future__ import annotations

import math
import subprocess
import sys
import time

import numpy as np
import pytest

import gradcalc
from gradcalc import lower
from gradcalc import primitives as P
from gradcalc import symbolic as S
from gradcalc.cli.errors import flag
from gradcalc.errors import ShapeError, UsageError
from gradcalc.tape import Builder
from rules import replace_rule


def traced(src, **at):
    return lower.trace(gradcalc.parse(src), {k: np.asarray(v, dtype=np.float64) for k, v in at.items()})


# ==========================================================================
# Texts and closed forms
# ==========================================================================


def test_scalar_product_texts_and_values():
    g = S.symbolic_gradient(traced("sin(x)*y", x=1.0, y=2.0), "_", ["x", "y"])
    assert g["x"]["text"] == "y*cos(x)"
    assert g["y"]["text"] == "sin(x)"
    assert g["x"]["latex"] == r"y \cos{\left(x \right)}"
    assert str(g["x"]["expr"]) == "y*cos(x)"
    assert g["x"]["value"].shape == ()
    assert g["x"]["value"] == pytest.approx(2 * math.cos(1.0), rel=1e-14)
    assert g["y"]["value"] == pytest.approx(math.sin(1.0), rel=1e-14)
    assert g["x"]["simplified"] and g["x"]["note"] is None


@pytest.mark.parametrize("src", ["maximum(sqrt(x), 0)", "s0 = clip(sqrt(x), 0.0, 0.5); s1 = log(s0)"])
def test_closed_form_outside_the_real_domain_is_nan(src):
    # At x = -1, sqrt(x) is imaginary in sympy and nan in NumPy; Max of an imaginary number
    # cannot even be built, which used to escape as an internal error.
    tr = traced(src, x=-1.0)
    g = S.symbolic_gradient(tr, tr.tape.output, ["x"])
    assert "sqrt(x)" in g["x"]["text"] and math.isnan(g["x"]["value"])


def test_reduction_of_an_empty_matrix():
    # mean over axis 0 of a 2×0 matrix: an empty vector (its reshape used to fail on size 0).
    g = S.symbolic_gradient(traced("y = sum(mean(x, axis=0)) + z", x=np.zeros((2, 0)), z=1.0), "y", ["x", "z"])
    assert g["x"]["value"].shape == (2, 0) and g["x"]["text"] == "[[], []]"
    assert g["z"]["text"] == "1" and g["z"]["value"] == 1.0


@pytest.mark.parametrize("src", ["maximum(x, nan)", "minimum(acosh(nan), x)", "clip(x, nan, 2)",
                                 "input v[2]; max(v * nan)", "input v[2]; min([v[0], nan])"])
def test_extremes_with_a_nan_operand_are_nan(src):
    # NumPy's maximum/max propagate nan; SymPy's Max refuses to compare with nan, which used to
    # escape as an internal error.  The closed form is the constant nan, whose derivative is 0.
    at = {"v": [1.0, -2.0]} if src.startswith("input") else {"x": 1.0}
    tr = traced(src, **at)
    wrt = list(at)
    g = S.symbolic_gradient(tr, tr.tape.output, wrt)[wrt[0]]
    assert set(np.atleast_1d(np.asarray(g["value"], dtype=float)).tolist()) == {0.0}


def test_vector_sum_of_squares():
    g = S.symbolic_gradient(traced("input x[2]; sum(x^2)", x=[1.5, -2.0]), "_", ["x"])["x"]
    assert g["text"] == "[2*x[0], 2*x[1]]"
    assert g["latex"] == r"\left[\begin{matrix}2 x_{0} & 2 x_{1}\end{matrix}\right]"
    assert g["expr"].shape == (2,)
    np.testing.assert_allclose(g["value"], [3.0, -4.0], rtol=1e-14)


def test_softmax_and_logsumexp():
    x = np.array([0.5, -1.0, 2.0])
    tr = traced("input x[3]; s = softmax(x); l = logsumexp(x)", x=x)
    j = S.symbolic_jacobian(tr, ["s", "l"], ["x"])
    s = np.exp(x) / np.exp(x).sum()
    np.testing.assert_allclose(j["s"]["x"]["value"], np.diag(s) - np.outer(s, s), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(j["l"]["x"]["value"], s, rtol=1e-13)
    assert j["l"]["x"]["text"] == ("[exp(x[0])/(exp(x[0]) + exp(x[1]) + exp(x[2])), "
                                   "exp(x[1])/(exp(x[0]) + exp(x[1]) + exp(x[2])), "
                                   "exp(x[2])/(exp(x[0]) + exp(x[1]) + exp(x[2]))]")
    assert j["s"]["x"]["value"].shape == (3, 3)


def test_matmul_with_a_matrix_input():
    W, v = np.array([[1.0, 2.0], [3.0, -4.0]]), np.array([0.5, 2.0])
    j = S.symbolic_jacobian(traced("input W[2, 2]; input v[2]; y = W @ v", W=W, v=v), ["y"], ["W", "v"])
    assert j["y"]["v"]["text"] == "[[W[0, 0], W[0, 1]], [W[1, 0], W[1, 1]]]"
    assert j["y"]["v"]["latex"] == (r"\left[\begin{matrix}W_{0,0} & W_{0,1}\\W_{1,0} & W_{1,1}"
                                    r"\end{matrix}\right]")
    np.testing.assert_array_equal(j["y"]["v"]["value"], W)
    expected = np.einsum("ij,k->ijk", np.eye(2), v)  # dy_i/dW_jk = delta_ij v_k
    assert j["y"]["W"]["value"].shape == (2, 2, 2)
    np.testing.assert_array_equal(j["y"]["W"]["value"], expected)
    assert j["y"]["W"]["text"] == "[[[v[0], v[1]], [0, 0]], [[0, 0], [v[0], v[1]]]]"


def test_det_of_a_2x2():
    W = np.array([[2.0, 1.0], [-1.0, 3.0]])
    g = S.symbolic_gradient(traced("input W[2, 2]; det(W)", W=W), "_", ["W"])["W"]
    assert g["text"] == "[[W[1, 1], -W[1, 0]], [-W[0, 1], W[0, 0]]]"
    np.testing.assert_allclose(g["value"], [[3.0, 1.0], [-1.0, 2.0]], rtol=1e-15)


def test_intermediate_wrt_holds_upstream_fixed_and_substitutes():
    g = S.symbolic_gradient(traced("h = x^2; y = sin(h) + h*x", x=0.7), "y", ["x", "h"])
    assert g["h"]["text"] == "x + cos(x**2)"
    assert g["h"]["value"] == pytest.approx(0.7 + math.cos(0.49), rel=1e-14)
    assert g["x"]["value"] == pytest.approx(2 * 0.7 * math.cos(0.49) + 3 * 0.49, rel=1e-14)


def test_size_one_output_of_rank_one():
    g = S.symbolic_gradient(traced("input x[2]; sum(x^3, keepdims=true)", x=[1.0, 2.0]), "_", ["x"])
    assert g["x"]["text"] == "[3*x[0]**2, 3*x[1]**2]"
    np.testing.assert_allclose(g["x"]["value"], [3.0, 12.0])


# ==========================================================================
# Conventions at kinks (SPEC §2: JAX's)
# ==========================================================================


@pytest.mark.parametrize("src, at, expected", [
    ("abs(x)", {"x": 0.0}, 0.0),
    ("relu(x)", {"x": 0.0}, 0.0),
    ("relu(x)", {"x": 2.0}, 1.0),
    ("maximum(x, y)", {"x": 1.0, "y": 1.0}, 0.5),
    ("max([x, y, 0])", {"x": 1.0, "y": -1.0}, 1.0),
    ("floor(x)*x + sign(x) + round(x) + ceil(x)", {"x": 2.5}, 2.0),
    ("x*stop_gradient(x^2)", {"x": 3.0}, 9.0),
    ("where(x > 0, sqrt(x), 0)", {"x": 0.0}, 0.0),
    ("(x > 1) * x^2", {"x": 2.0}, 4.0),
])
def test_conventions(src, at, expected):
    g = S.symbolic_gradient(traced(src, **at), "_", ["x"], simplify=False)
    assert g["x"]["value"] == pytest.approx(expected, rel=1e-14, abs=0)


def test_stop_gradient_stays_in_the_text():
    g = S.symbolic_gradient(traced("x*stop_gradient(x^2)", x=3.0), "_", ["x"])
    assert g["x"]["text"] == "stop_gradient(x**2)"


# ==========================================================================
# Every user-facing primitive: values against automatic differentiation
# ==========================================================================

PROGRAMS = [
    ("abs(x)+sign(x)+sqrt(x)+cbrt(-x)+exp(x)+expm1(x)+exp2(x)+log(x)+log1p(x)+log2(x)+log10(x)",
     {"x": 0.7}),
    ("sin(x)+cos(x)+tan(x)+asin(x)+acos(x)+atan(x)+sinh(x)+cosh(x)+tanh(x)+asinh(x)+acosh(x+1)"
     "+atanh(x)", {"x": 0.3}),
    ("sigmoid(x)*relu(x)+softplus(x)+floor(x)*x+ceil(x)*x+round(x)*x+relu(-x)", {"x": 1.3}),
    ("atan2(y, x) + hypot(x, y) + maximum(x, y) + minimum(x, y) + pow(x, y) + x^y + x^0.5",
     {"x": 1.5, "y": 0.5}),
    ("where(x > y, x^2, y^3) + (x <= y)*x + clip(x, -1, y) + (x == y) + (x != y) + (x >= y)",
     {"x": 0.5, "y": 0.7}),
    ("input A[2,3]; s = sum(A, axis=1); m = max(A, axis=0, keepdims=true); n = min(A); "
     "p = prod(A, axis=-1); l = logsumexp(A, axis=0); r = norm(A, axis=(0,1)); mu = mean(A); "
     "v = var(A, axis=1, ddof=1); sd = std(A)", {"A": [[1, 2, 3.5], [-1, 0.5, 2]]}),
    ("input A[2,3]; s = softmax(A, axis=0); l = log_softmax(A)", {"A": [[1, 2, 3.5], [-1, 0.5, 2]]}),
    ("input A[2,2]; input v[2]; input u[2]; a = v @ u; b = A @ v; c = v @ A; d = A @ A; "
     "f = outer(u, v); g = trace(A); h = diag(A); k = diag(v, k=1); t = transpose(A, axes=(1, 0)); "
     "r = reshape(A, (4,)); cc = concat(u, v); st = stack(u, v, axis=1); ix = cc[::-2]; "
     "ix2 = A[1, :]; lit = [v[0]*u[1], 3]", {"A": [[1, 2], [3, -4]], "v": [0.5, 2], "u": [-1, 3]}),
    ("input A[2,2]; input b[2]; input B[2,2]; d = det(A); i = inv(A); s = solve(A, b); "
     "S = solve(A, B)", {"A": [[1, 2], [3, -4]], "b": [0.5, 2], "B": [[1, 0], [2, 3]]}),
    ("input x[3]; y = x - mean(x) + 0.1*x + pi*x[0] + e^x[1] + x/3", {"x": [1, 2, 3]}),
]


@pytest.mark.parametrize("src, at", PROGRAMS, ids=[p[0][:30] for p in PROGRAMS])
def test_values_agree_with_autodiff(src, at):
    tr = traced(src, **at)
    outs = [n for n in tr.tape.names if n not in tr.tape.inputs]
    wrt = list(tr.tape.inputs)
    sym = S.symbolic_jacobian(tr, outs, wrt, simplify=False)
    ref = gradcalc.jacobian(src, at=at, of=outs, wrt=wrt)
    for o in outs:
        for w in wrt:
            np.testing.assert_allclose(sym[o][w]["value"], ref[o][w], rtol=1e-10, atol=1e-13,
                                       err_msg=f"d{o}/d{w}: {sym[o][w]['text']}")


def test_to_sympy_covers_every_var_and_keeps_constants_exact():
    import sympy

    tr = traced("y = 0.5*x + pi + 3*x^2", x=1.0)
    env = S.to_sympy(tr)
    assert set(env) == {*tr.tape.inputs.values(), *tr.tape.consts, *(eq.out for eq in tr.tape.equations)}
    assert {env[v][()] for v in tr.tape.consts} == {sympy.Rational(1, 2), sympy.pi, 3}
    assert str(env[tr.tape.names["y"]][()]) == "3*x**2 + x/2 + pi"


# ==========================================================================
# Limits and errors
# ==========================================================================


def test_size_limit_names_the_value():
    with pytest.raises(UsageError) as err:
        S.symbolic_gradient(traced("input W[10, 10]; sum(W)", W=np.ones((10, 10))), "_", ["W"])
    assert err.value.worded(flag)[0] == ("--symbolic supports programs with at most 64 elements per value; "
                                         "'W' has shape (10, 10) (100 elements)")


def test_size_limit_on_an_intermediate():
    with pytest.raises(UsageError) as err:
        S.to_sympy(traced("input x[8]; input y[9]; sum(outer(x, y))", x=np.ones(8), y=np.ones(9)))
    assert err.value.worded(flag)[0].startswith("--symbolic supports programs with at most 64 elements per value; "
                                                "the result of 'outer' at line 1, column 29 has shape (8, 9)")
    assert err.value.message.endswith("has shape (8, 9) (72 elements)")


def test_total_size_limit():
    src = "input x[64]\n" + "\n".join(f"a{i} = x + {i}" for i in range(70))
    with pytest.raises(UsageError, match=r"at most 4096 scalar elements in all; this one has \d+"):
        S.to_sympy(traced(src, x=np.zeros(64)))


def test_expression_blow_up_is_refused_quickly():
    # Each line doubles the expression tree: 2^20 nodes when printed.
    src = "a0 = x\n" + "\n".join(f"a{i} = a{i - 1}*a{i - 1} + a{i - 1}" for i in range(1, 21))
    start = time.monotonic()
    with pytest.raises(UsageError, match=r"the closed form of 'a\d+' grows past 20000 terms"):
        S.symbolic_gradient(traced(src, x=0.1), "a20", ["x"])
    assert time.monotonic() - start < 60  # (a hang guard: make bench measures speed)


def test_a_hessians_first_derivative_is_held_to_the_values_limit():
    # Only the values were held to EXPR_LIMIT: nine steps of s = sin(s)*x + s*y (a value of
    # 4,602 nodes, a first derivative of 39,429) made a Hessian of about 370,000 nodes, 8 s;
    # eleven steps, 49 s.  grad's first derivative is the answer, and may be larger.
    src = "s = x*y; for i in range(9) { s = sin(s)*x + s*y }; s"
    from cli_run import user_error
    r = user_error("hessian", src, "--symbolic", "--at", "x=0.3,y=0.2")
    assert r.stderr.splitlines() == [
        "error: <expr>: --symbolic: the closed form of the derivative of '_' with respect to 'x', which a Hessian "
        "differentiates again, grows past 20000 terms",
        "hint: the program is too large for a closed form; drop --symbolic"]
    g = S.symbolic_gradient(traced(src, x=0.3, y=0.2), "_", ["x", "y"], simplify=False)
    fd = [(gradcalc.evaluate(src, at={"x": 0.3 + h * dx, "y": 0.2 + h * dy})["_"]
           - gradcalc.evaluate(src, at={"x": 0.3 - h * dx, "y": 0.2 - h * dy})["_"]) / (2 * h)
          for h, dx, dy in [(1e-6, 1, 0), (1e-6, 0, 1)]]
    np.testing.assert_allclose([float(g["x"]["value"]), float(g["y"]["value"])], fd, rtol=1e-7)


def test_a_derivative_past_its_limit_is_refused(monkeypatch):
    monkeypatch.setattr(S, "DERIVATIVE_LIMIT", 10)
    with pytest.raises(UsageError, match=r"the closed form of the derivative of '_' with respect to 'x' grows past "
                                         r"10 terms"):
        S.symbolic_gradient(traced("sin(x)*exp(x)*y", x=1.0, y=2.0), "_", ["x"])


def test_large_derivative_is_shown_unsimplified(monkeypatch):
    monkeypatch.setattr(S, "SIMPLIFY_LIMIT", 3)
    g = S.symbolic_gradient(traced("sin(x)*exp(x)*y", x=1.0, y=2.0), "_", ["x"])["x"]
    assert not g["simplified"]
    assert g["note"] == "1 of 1 entries shown unsimplified (larger than 3 nodes)"
    assert g["value"] == pytest.approx(2 * math.e * (math.sin(1) + math.cos(1)), rel=1e-14)


def test_det_of_a_large_matrix_is_refused():
    with pytest.raises(UsageError, match=r"det of matrices up to 4×4; 'det' at line 1, column \d+ has a 5×5"):
        S.to_sympy(traced("input A[5, 5]; det(A)", A=np.eye(5)))


def test_unconvertible_primitive_is_named():
    b = Builder()
    x = b.input(np.array([1.0, 2.0]))
    y = P.prod_others(x, axes=(-1,), xshape=(2,))
    tr = lower.Traced(None, b.tape({"x": x.var}, {"x": x.var, "y": y.var}, "y"), b, [])
    with pytest.raises(UsageError) as err:
        S.to_sympy(tr)
    assert err.value.worded(flag)[0] == "--symbolic cannot convert the primitive 'prod_others' to sympy"


def test_gradient_needs_a_scalar_output():
    with pytest.raises(ShapeError, match=r"grad needs a scalar output, but 'y' has shape \(2,\)"):
        S.symbolic_gradient(traced("input x[2]; y = x^2", x=[1.0, 2.0]), "y", ["x"])


def test_unknown_name():
    with pytest.raises(UsageError) as err:
        S.symbolic_gradient(traced("sin(x)", x=1.0), "_", ["z"])
    assert "--wrt 'z' is not a name in the program" in err.value.worded(flag)[0]


def test_sympy_is_imported_lazily():
    code = ("import sys, gradcalc, gradcalc.cli.app, gradcalc.symbolic\n"
            "gradcalc.grad('x^2', at={'x': 1.0})\n"
            "print('sympy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def _lines_in_subprocess(code: str, timeout: float) -> list[str]:
    """What code prints, run in a child Python: a regression that never ends fails the test at
    timeout instead of hanging the suite."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_powers_of_huge_constants_end():
    # Exact, 2^(10^15) has 10^15 bits, and SymPy would compute every one (these did not end).
    # Past EXACT_POWER_BITS a power of two numbers is taken in floating point.  In a
    # subprocess, so that a regression fails instead of hanging the suite.
    code = ("import gradcalc\n"
            "for src in ['exp2(1e15)*x', '2^1000000000*x', '(1000^100000)^100000*x', 'x^1e15', '1e300^2*x']:\n"
            "    r = gradcalc.grad(src, at={'x': 2.0}, symbolic=True)\n"
            "    print(r.symbolic['x']['text'][:40])\n"
            "print(gradcalc.grad('2^10*x + (1/2)^3*x', at={'x': 2.0}, symbolic=True).symbolic['x']['text'])")
    lines = _lines_in_subprocess(code, timeout=120)
    assert lines[0].startswith("1.5675223395448") and lines[0].endswith("e+301029995663981")
    assert lines[3] == "1000000000000000*x**999999999999999"
    assert lines[-1] == "8193/8"  # small powers stay exact: 2^10 + 1/8


def test_huge_powers_are_shown_unsimplified():
    # sympy's trigonometric simplification expands sin(x)^n into n terms: sin(x)^1e10 ran out of
    # memory at once (reported as "out of memory: use smaller inputs"), cos(x)^300000000 took
    # 12 s and 4.7 GB.  In a subprocess, so that a regression fails instead of hanging.
    code = ("import gradcalc\n"
            "for src in ['sin(x)^1e10', 'sin(x)*cos(x)^300000000']:\n"
            "    g = gradcalc.grad(src, at={'x': 1.0}, symbolic=True).symbolic['x']\n"
            "    print(g['note'])\n"
            "print(gradcalc.grad('sin(x)^1e10', at={'x': 1.0}, symbolic=True).symbolic['x']['text'])")
    lines = _lines_in_subprocess(code, timeout=60)
    assert lines[:2] == ["1 of 1 entries shown unsimplified (a power past 100 is not simplified)"] * 2
    assert lines[2] == "10000000000*sin(x)**9999999999*cos(x)"


def test_slow_simplification_is_cut_short(monkeypatch):
    from sympy.core.cache import clear_cache
    clear_cache()  # an earlier test may have simplified the same expression: no cached answers
    monkeypatch.setattr(S, "SIMPLIFY_EACH_SECONDS", 0.001)
    g = S.symbolic_gradient(traced("sin(x)*tan(x) + cosh(x)/sinh(x)", x=0.5), "_", ["x"])["x"]
    assert g["note"] == "1 of 1 entries shown unsimplified (simplifying took more than 0.001 s)"
    closed = (math.cos(0.5) * math.tan(0.5) + math.sin(0.5) / math.cos(0.5) ** 2
              + 1 - (math.cosh(0.5) / math.sinh(0.5)) ** 2)
    assert g["value"] == pytest.approx(closed, rel=1e-13)


def test_huge_closed_form_is_evaluated_but_not_printed(monkeypatch):
    monkeypatch.setattr(S, "PRINT_LIMIT", 5)
    g = S.symbolic_gradient(traced("input x[2]; sum(x^3)", x=[1.0, 2.0]), "_", ["x"])["x"]
    assert g["text"] is None and g["latex"] is None
    assert g["note"] == "the closed form has 10 nodes, more than 5: not printed"
    np.testing.assert_allclose(g["value"], [3.0, 12.0])


# -- through the CLI -----------------------------------------------------------

def test_cli_grad_symbolic_prints_the_closed_forms():
    import json as _json

    from typer.testing import CliRunner

    from gradcalc.cli.app import app
    runner = CliRunner()
    res = runner.invoke(app, ["grad", "sin(x)*y", "--at", "x=1,y=2", "--symbolic"])
    assert res.exit_code == 0
    assert "d_/dx = y*cos(x)" in res.stdout and "d_/dy = sin(x)" in res.stdout
    res = runner.invoke(app, ["grad", "sin(x)*y", "--at", "x=1,y=2", "--symbolic", "-f", "json"])
    doc = _json.loads(res.stdout)
    assert doc["symbolic"]["x"]["text"] == "y*cos(x)" and doc["symbolic"]["y"]["text"] == "sin(x)"
    assert doc["symbolic"]["x"]["latex"] == r"y \cos{\left(x \right)}"


def test_cli_check_symbolic_is_a_third_oracle(monkeypatch):
    from typer.testing import CliRunner

    from gradcalc.cli.app import app
    from gradcalc.primitives import REGISTRY
    runner = CliRunner()
    assert runner.invoke(app, ["check", "samples/rosenbrock.grad", "--symbolic"]).exit_code == 0
    # a wrong rule disagrees with sympy as well as with finite differences
    replace_rule(monkeypatch, REGISTRY["sin"], "vjp", (lambda g, ans, x, **_: g * ans,))
    res = runner.invoke(app, ["check", "sin(x)", "--at", "x=1", "--symbolic", "-f", "json"])
    assert res.exit_code == 1
    assert "automatic and symbolic derivatives disagree" in res.stdout


# ==========================================================================
# Without --at: the closed form alone (SPEC §5)
# ==========================================================================

def test_grad_symbolic_without_a_point_gives_the_closed_form_alone():
    r = gradcalc.grad("x^2 * y", symbolic=True)
    assert dict(r) == {} and r.value is None and r.at == {}
    assert {w: e["text"] for w, e in r.symbolic.items()} == {"x": "2*x*y", "y": "x**2"}
    assert r.to_json()["symbolic"]["x"] == {"text": "2*x*y", "latex": "2 x y", "note": None}
    j = gradcalc.jacobian("sin(x) * y", symbolic=True)
    assert dict(j) == {} and j.symbolic["_"]["x"]["text"] == "y*cos(x)"
    # an input given a value, another not: still the closed form alone, in both
    r = gradcalc.grad("x^2 * y", at={"y": 3.0}, symbolic=True)
    assert r.value is None and r.symbolic["y"]["text"] == "x**2"


def test_symbolic_without_a_point_on_the_command_line():
    from cli_run import ok, user_error
    out = ok("grad", "x^2", "--symbolic").stdout
    assert "d_/dx = 2*x" in out and "gradient of" not in out and "value" not in out
    assert ok("grad", "x^2", "--symbolic", "-f", "plain").stdout == "2*x\n"
    assert ok("jacobian", "sin(x) * y", "--symbolic", "-f", "plain").stdout == "y*cos(x)\nsin(x)\n"
    # a path decided by values needs them
    r = user_error("grad", "if x > 0 { y = x } else { y = -x }\ny", "--symbolic")
    assert "--symbolic without a value for 'x'" in r.stderr and "hint: give the point with --at" in r.stderr


@pytest.mark.parametrize("src", ["input x[3]\nx[n]", "min(x, y)", "s = 0\nfor i in range(n) { s = s + x }\ns"])
def test_a_program_that_cannot_run_on_stand_ins_asks_for_at(src):
    # the stand-in 0.5 leaked into the error ("an index must be an integer, got 0.5"), with no word of --at
    from cli_run import user_error
    r = user_error("grad", src, "--symbolic")
    assert "--symbolic without a value for" in r.stderr and "does not run on stand-in values" in r.stderr
    assert r.stderr.splitlines()[-1] == "hint: give the point with --at"


def test_a_closed_form_at_complex_infinity_has_no_sign():
    # sympy's log(0) is zoo, which was read as +inf, where the numbers give -inf (log(x) + 1 at 0)
    r = gradcalc.grad("log(x)*x", at={"x": 0.0}, symbolic=True)
    assert r["x"] == -np.inf and np.isnan(r.symbolic["x"]["value"])


def test_a_guessed_shape_is_named_in_the_note():
    r = gradcalc.grad("x[2] * y", symbolic=True)
    assert r.symbolic["y"]["text"] == "x[2]"
    assert r.symbolic["y"]["note"] == "'x' taken as shape (4,) (give its value for another shape)"


def test_a_sort_order_is_not_called_a_branch():
    r = gradcalc.grad("sum(sort(x) * [1, 2])", at={"x": [3.0, 1.0]}, symbolic=True)
    assert r.symbolic["x"]["text"] == "[2, 1]"
    note = r.symbolic["x"]["note"]
    assert "sort order" in note and "branches" not in note and "does not branch" in note
    r = gradcalc.grad("if x > 0 { y = x^3 } else { y = -x }\ny", at={"x": 2.0}, symbolic=True)
    assert "this program branches or loops" in r.symbolic["x"]["note"]


@pytest.mark.parametrize(("src", "at", "text", "chosen"), [
    # argmax, argmin and argsort used as values: the closed form holds for the positions the point
    # chose (derivative [argmax(x), 0, 0] = [2, 0, 0] at [0, 1, 5]); it was [0, 0, 0] without --at
    # and with no note at one (the API hunt's find)
    ("argmax(x) * x[0]", [0.0, 1.0, 5.0], "[2, 0, 0]", "argmax"),
    ("x[0] * argmin(x)", [3.0, 1.0, 5.0], "[1, 0, 0]", "argmin"),
    ("sum(x * argsort(x))", [3.0, 1.0, 2.0], "[1, 2, 0]", "argsort"),
])
def test_positions_chosen_at_the_point_are_named_in_the_note(src, at, text, chosen):
    from cli_run import user_error
    r = gradcalc.grad(src, at={"x": at}, symbolic=True)
    assert r.symbolic["x"]["text"] == text
    assert r.symbolic["x"]["note"] == (f"the closed form for the {chosen} found at this point (the program does "
                                       f"not branch, but another point may give another {chosen})")
    r = user_error("grad", "input x[3]\n" + src, "--symbolic")
    assert f"the path the program takes ({chosen}) depends on the values" in r.stderr


@pytest.mark.parametrize("x", [1e-9, 1e-6, -1e-7])
def test_closed_forms_are_evaluated_without_cancellation(x):
    # sinc's closed-form slope cos(pi x)/x - sin(pi x)/(pi x^2) cancels near 0: at 15 digits its
    # value was -5.7e-8 at x = 1e-9; the series -pi^2 x/3 + pi^4 x^3/30 is exact here
    want = -math.pi ** 2 * x / 3 + math.pi ** 4 * x ** 3 / 30
    r = gradcalc.grad("sinc(x)", at={"x": x}, symbolic=True)
    assert r.symbolic["x"]["value"] == pytest.approx(want, rel=1e-14)
    from cli_run import ok
    assert ok("check", "sinc(x)", "--at", f"x={x}", "--symbolic", "-f", "plain").stdout.startswith("ok ")


# ==========================================================================
# hessian --symbolic (SPEC §5)
# ==========================================================================

def test_hessian_of_a_product_closed_forms_and_values():
    # x^2 y by hand: d2/dx2 = 2y, d2/dxdy = d2/dydx = 2x, d2/dy2 = 0; at (3, 2): [[4, 6], [6, 0]]
    r = gradcalc.hessian("x^2 * y", at={"x": 3.0, "y": 2.0}, symbolic=True)
    texts = {(a, b): e["text"] for a, row in r.symbolic.items() for b, e in row.items()}
    assert texts == {("x", "x"): "2*y", ("x", "y"): "2*x", ("y", "x"): "2*x", ("y", "y"): "0"}
    want = {("x", "x"): 4.0, ("x", "y"): 6.0, ("y", "x"): 6.0, ("y", "y"): 0.0}
    for (a, b), v in want.items():
        assert r.symbolic[a][b]["value"] == v and r[a][b] == v
        assert r.symbolic[a][b]["note"] is None
    assert r.to_json()["symbolic"]["x"]["y"] == {"text": "2*x", "latex": "2 x", "note": None}
    assert gradcalc.hessian("x^2 * y", at={"x": 3.0, "y": 2.0}).symbolic is None


def test_hessian_of_a_vector_input_is_diagonal():
    # sum(x^3) by hand: d2/dx_i dx_j = 6 x_i when i == j, else 0
    x = np.array([1.0, -2.0, 0.5])
    r = gradcalc.hessian("sum(x^3)", at={"x": x}, symbolic=True)
    e = r.symbolic["x"]["x"]
    assert e["text"] == "[[6*x[0], 0, 0], [0, 6*x[1], 0], [0, 0, 6*x[2]]]"
    np.testing.assert_array_equal(e["value"], np.diag(6 * x))
    np.testing.assert_array_equal(r["x"]["x"], np.diag(6 * x))


def test_hessian_symbolic_blocks_have_the_shapes_of_both_inputs():
    # x . y by hand: d2/dx dy = identity, d2/dx2 = 0, as arrays of shape (2,) + (2,)
    r = gradcalc.hessian("sum(x * y)", at={"x": [1.0, 2.0], "y": [3.0, 4.0]}, symbolic=True)
    np.testing.assert_array_equal(r.symbolic["x"]["y"]["value"], np.eye(2))
    np.testing.assert_array_equal(r.symbolic["x"]["x"]["value"], np.zeros((2, 2)))


def test_hessian_symbolic_without_a_point_gives_the_closed_form_alone():
    r = gradcalc.hessian("x^2 * y", symbolic=True)
    assert dict(r) == {} and r.value is None
    assert r.symbolic["x"]["x"]["text"] == "2*y" and r.symbolic["y"]["y"]["text"] == "0"
    from cli_run import ok
    out = ok("hessian", "x^2*y", "--symbolic").stdout
    assert "d²_/dxdy = 2*x" in out and "hessian of" not in out
    assert ok("hessian", "x^2*y", "--symbolic", "-f", "plain").stdout == "2*y\n2*x\n2*x\n0\n"


def test_hessian_symbolic_on_the_command_line():
    import json as _json

    from cli_run import ok
    out = ok("hessian", "x^2*y", "--at", "x=3,y=2", "--symbolic").stdout
    assert "hessian of _" in out and "closed form (sympy)" in out
    assert "d²_/dxdx = 2*y" in out and "d²_/dydx = 2*x" in out and "d²_/dydy = 0" in out
    assert ok("hessian", "x^2*y", "--at", "x=3,y=2", "--symbolic", "-f", "plain").stdout == "4\n6\n6\n0\n"
    doc = _json.loads(ok("hessian", "x^2*y", "--at", "x=3,y=2", "--symbolic", "-f", "json").stdout)
    assert doc["hessian"] == {"x": {"x": 4.0, "y": 6.0}, "y": {"x": 6.0, "y": 0.0}}
    assert doc["symbolic"]["y"]["x"]["text"] == "2*x" and doc["symbolic"]["x"]["x"]["latex"] == "2 y"
    assert "symbolic" not in _json.loads(ok("hessian", "x^2*y", "--at", "x=3,y=2", "-f", "json").stdout)


def test_hessian_symbolic_of_a_branch_notes_the_path():
    # x > 0 takes x^3: second derivative 6x, 12 at x = 2
    r = gradcalc.hessian("if x > 0 { y = x^3 } else { y = -x }\ny", at={"x": 2.0}, symbolic=True)
    e = r.symbolic["x"]["x"]
    assert e["text"] == "6*x" and e["value"] == 12.0
    assert e["note"] == S.PATH_NOTE


def test_hessian_symbolic_refuses_what_hessian_refuses():
    with pytest.raises(ShapeError, match="scalar output"):
        S.symbolic_hessian(traced("x * [1, 2]", x=1.0), "_", ["x"])
    with pytest.raises(UsageError, match="'h' is not one"):
        S.symbolic_hessian(traced("h = x^2\nh * x", x=1.0), "_", ["h"])


# ==========================================================================
# Fuzz findings H5-H7 (einsum to a scalar, copysign by a nan, masks of many elements)
# ==========================================================================

def _real(name):
    import sympy as sp
    return sp.Symbol(name, real=True)


def _same(got, expected):
    """got (an object array or expression) equals expected (nested lists of sympy) exactly."""
    import sympy as sp
    got, expected = np.asarray(got, dtype=object), np.asarray(expected, dtype=object)
    assert got.shape == expected.shape
    for g, e in zip(got.flat, expected.flat):
        assert g == e or sp.simplify(g - e) == 0, (g, e)


def test_einsum_to_a_scalar_dot_product():
    # einsum(..., '->') on object arrays gives one expression, not an array: the forward function's
    # r.ndim failed on it (an internal error).  d/dx of x.x is 2x.
    tr = traced("input x[2]; einsum('i,i->', x, x)", x=[1.0, 2.0])
    g = S.symbolic_gradient(tr, tr.tape.output, ["x"])["x"]
    x0, x1 = _real("x[0]"), _real("x[1]")
    _same(g["expr"], [2 * x0, 2 * x1])
    np.testing.assert_array_equal(g["value"], [2.0, 4.0])
    _same(S.to_sympy(tr)[tr.tape.names[tr.tape.output]], x0 ** 2 + x1 ** 2)


def test_einsum_quadratic_form_gradient_is_a_plus_a_transpose_times_x():
    A = np.array([[1.0, 2.0], [-3.0, 4.0]])
    tr = traced("input x[2]; input A[2, 2]; einsum('i,ij,j->', x, A, x)", x=[0.5, -1.0], A=A)
    g = S.symbolic_gradient(tr, tr.tape.output, ["x", "A"])
    xs = [_real("x[0]"), _real("x[1]")]
    As = [[_real(f"A[{i}, {j}]") for j in range(2)] for i in range(2)]
    _same(g["x"]["expr"], [sum((As[i][j] + As[j][i]) * xs[j] for j in range(2)) for i in range(2)])
    _same(g["A"]["expr"], [[xs[i] * xs[j] for j in range(2)] for i in range(2)])
    np.testing.assert_allclose(g["x"]["value"], (A + A.T) @ [0.5, -1.0], rtol=1e-15)


def test_einsum_bilinear_sample_under_symbolic():
    # The shipped sample (expected values in its comments: A y, outer(x, y), A^T x).
    from pathlib import Path
    src = (Path(__file__).resolve().parent.parent / "samples" / "einsum_bilinear.grad").read_text()
    tr = lower.trace(gradcalc.parse(src), {})
    g = S.symbolic_gradient(tr, "f", ["x", "A", "y"])
    xs, ys = [_real(f"x[{i}]") for i in range(2)], [_real(f"y[{j}]") for j in range(3)]
    As = [[_real(f"A[{i}, {j}]") for j in range(3)] for i in range(2)]
    _same(g["x"]["expr"], [sum(As[i][j] * ys[j] for j in range(3)) for i in range(2)])
    _same(g["y"]["expr"], [sum(As[i][j] * xs[i] for i in range(2)) for j in range(3)])
    _same(g["A"]["expr"], [[xs[i] * ys[j] for j in range(3)] for i in range(2)])
    np.testing.assert_array_equal(g["x"]["value"], [4.0, 0.0])
    np.testing.assert_array_equal(g["y"]["value"], [3.0, -4.0, -2.0])
    np.testing.assert_array_equal(g["A"]["value"], [[2.0, 1.0, -1.0], [-4.0, -2.0, 2.0]])


def test_cli_einsum_bilinear_sample_grad_and_check_symbolic():
    from typer.testing import CliRunner

    from gradcalc.cli.app import app
    runner = CliRunner()
    for cmd in ("grad", "check"):
        res = runner.invoke(app, [cmd, "samples/einsum_bilinear.grad", "--symbolic"])
        assert res.exit_code == 0, res.output


@pytest.mark.parametrize(("src", "sign"), [
    ("copysign(x, nan)", 1),     # NumPy: the sign bit of the nan (a positive nan: |x|)
    ("copysign(x, -nan)", -1),   # -nan has its sign bit set: -|x|
    ("copysign(x, -0.0)", -1),   # -0.0 too (the closed form was |x|, whose value disagreed)
    ("copysign(x, 0.0)", 1),
    ("copysign(x, -inf)", -1),
    ("copysign(x, -2)", -1),
])
def test_copysign_by_a_constant_takes_its_sign_bit(src, sign):
    import sympy as sp
    tr = traced(src, x=1.5)
    g = S.symbolic_gradient(tr, tr.tape.output, ["x"])["x"]
    x = _real("x")
    assert sp.simplify(g["expr"] - sign * sp.sign(x)) == 0
    assert g["value"] == sign == np.sign(np.copysign(1.0, np.asarray(tr.value(tr.tape.output))))
    _same(S.to_sympy(tr)[tr.tape.names[tr.tape.output]], sign * sp.Abs(x))


def test_copysign_by_an_expression_stays_a_piecewise():
    import sympy as sp
    tr = traced("copysign(x, y)", x=2.0, y=-1.0)
    x, y = _real("x"), _real("y")
    _same(S.to_sympy(tr)[tr.tape.names[tr.tape.output]],
          sp.Piecewise((sp.Abs(x), y >= 0), (-sp.Abs(x), True)))


def _timed_convert(src, x, seconds=60.0):  # (a hang guard: make bench measures speed)
    tr = traced(src, x=x)
    S._sympy()  # (importing sympy is not the work measured)
    t = time.perf_counter()
    env = S.to_sympy(tr)
    took = time.perf_counter() - t
    assert took < seconds, f"{src}: {took:.2f} s"
    return tr, env[tr.tape.names[tr.tape.output]]


@pytest.mark.parametrize("n", [8, 64])
def test_any_and_all_of_many_elements_are_flat_and_quick(n):
    # any(x) is logical_or(sum(logical_or(x, 0)), 0): the mask of a sum of masks, whose
    # condition sympy folded into 2^n cases (x[8]: 26 s).  Read as one Or (all: one And).
    import sympy as sp
    x = np.arange(n) / 10
    xs = [_real(f"x[{i}]") for i in range(n)]
    _, out = _timed_convert(f"input x[{n}]; any(x)", x)
    _same(out, sp.Piecewise((1, sp.Or(*[sp.Ne(s, 0) for s in xs])), (0, True)))
    _, out = _timed_convert(f"input x[{n}]; all(x)", x)
    _same(out, sp.Piecewise((1, sp.And(*[sp.Ne(s, 0) for s in xs])), (0, True)))
    tr = traced(f"input x[{n}]; any(x) + all(x > 0.05) + x[1]", x=x)
    t = time.perf_counter()
    g = S.symbolic_gradient(tr, tr.tape.output, ["x"])["x"]
    assert time.perf_counter() - t < 60  # (a hang guard: make bench measures speed)
    np.testing.assert_array_equal(g["value"], [1.0 if i == 1 else 0.0 for i in range(n)])


def test_mask_chains_and_wide_wheres_are_quick():
    import sympy as sp
    x = np.linspace(-1, 1, 64)
    xs = [_real(f"x[{i}]") for i in range(64)]
    _, out = _timed_convert("input x[64]; where(x > 0, x, -x)", x)
    _same(out, [sp.Piecewise((s, s > 0), (-s, True)) for s in xs])
    _, out = _timed_convert("input x[64]; sum(where((x > 0) and not (x > 0.5) or x < -0.9, x, 0))", x)
    _, out = _timed_convert("input x[64]; not any(x > 0.5) or all(x < 2) and any(not (x > -2))", x)
    for at in (x, x / 10, x * 3):
        expected = (not np.any(at > 0.5)) or (np.all(at < 2) and np.any(~(at > -2)))
        assert out[()].xreplace(dict(zip(xs, at))) == int(expected)


def test_a_condition_of_too_many_cases_is_refused_quickly():
    # sum(x > 0) > 3 compares a count of masks: sympy's closed form lists 2^n cases.  Refused,
    # saying why, rather than left to run.
    t = time.perf_counter()
    with pytest.raises(UsageError, match="cases"):
        S.to_sympy(traced("input x[64]; y = sum(x > 0) > 3", x=np.linspace(-1, 1, 64)))
    assert time.perf_counter() - t < 60  # (a hang guard: 2^64 cases would never end)
    # with few, it still has its closed form
    tr = traced("input x[2]; y = sum(x > 0) > 1", x=[1.0, 2.0])
    out = S.to_sympy(tr)[tr.tape.names["y"]][()]
    x0, x1 = _real("x[0]"), _real("x[1]")
    for p, v in [((1, 2), 1), ((1, -2), 0), ((-1, -2), 0)]:
        assert out.xreplace({x0: p[0], x1: p[1]}) == v


def test_cli_any_symbolic_ends():
    code = ("import gradcalc, time\n"
            "t = time.perf_counter()\n"
            "r = gradcalc.grad('input x[10] = arange(10)/10\\nany(x)', symbolic=True)\n"
            "print(r.symbolic['x']['text'])\n")
    assert _lines_in_subprocess(code, timeout=30) == ["[" + ", ".join(["0"] * 10) + "]"]


def test_a_product_of_masks_is_one_and():
    # prod(x > 0) is nonzero iff every mask is 1: one And (it would fold into 2^64 cases)
    import sympy as sp
    x = np.linspace(0.5, 1, 64)
    xs = [_real(f"x[{i}]") for i in range(64)]
    _, out = _timed_convert("input x[64]; s = sum(x); where(prod(x > 0), s, -s)", x)
    _same(out, sp.Piecewise((sp.Add(*xs), sp.And(*[s > 0 for s in xs])), (-sp.Add(*xs), True)))


def test_the_derivatives_of_a_closed_form_are_bounded_in_all(monkeypatch):
    # each second derivative of sum(cumprod(x)) is small, but there are n^2 of them: the Hessian of
    # 64 elements ran for minutes within every per-entry limit; the nodes of all the derivatives
    # together, and sympy's time over them, are bounded too, with the per-entry limit's words
    import gradcalc.symbolic as symbolic
    src, at = "input x[12]\nsum(cumprod(x))", {"x": np.ones(12)}
    monkeypatch.setattr(symbolic, "ALL_DERIVATIVES_LIMIT", 500)
    with pytest.raises(UsageError, match=r"symbolic: the closed forms of the derivatives grow past 500 terms in all"):
        gradcalc.hessian(src, at=at, symbolic=True)
    monkeypatch.setattr(symbolic, "ALL_DERIVATIVES_LIMIT", 10 ** 9)
    monkeypatch.setattr(symbolic, "SYMBOLIC_SECONDS", 0.05)
    t = time.monotonic()
    with pytest.raises(UsageError, match=r"symbolic: sympy takes more than 0.05 s over the closed forms"):
        gradcalc.hessian("input x[40]\nsum(cumprod(x))", at={"x": np.ones(40)}, symbolic=True)
    assert time.monotonic() - t < 30  # (it took minutes: the time limit interrupts sympy itself)
    r = gradcalc.hessian("input x[3]\nsum(cumprod(x))", at={"x": np.array([1.0, 2.0, 3.0])}, symbolic=False)
    assert np.allclose(r["x"]["x"], [[0, 1 + 3, 2], [1 + 3, 0, 1], [2, 1, 0]])  # (x0 + x0 x1 + x0 x1 x2)
