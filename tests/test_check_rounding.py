"""`check` models f's rounding from the tape (numerics.rounding_scale): an intermediate far larger than
f that cancels rounds f by eps times the intermediate, not eps |f|, and a right gradient passes
there; a wrong one is still caught where its error is above that rounding."""
from __future__ import annotations

import math

import numpy as np
import pytest

import gradcalc
from gradcalc.lower import trace
from gradcalc.numerics import TAYLOR_MIN_ORDER, rounding_scale
from gradcalc.primitives import REGISTRY, safe_mul
from gradcalc.session import parse
from rules import replace_rule


def _scale(src, at, wrt, of=None):
    tr = trace(parse(src), at)
    return rounding_scale(tr, of or tr.tape.output, wrt)


# -- the estimate against hand-computed values -------------------------------------------------
# Each rounding operation adds a term |v| |d f / d v| (an operation with inner arithmetic, such as
# sum or solve, also |a| |its VJP to a| for each operand a), and the terms combine as sqrt(sum t^2).

def test_the_scale_of_a_cancelling_sum_counts_the_intermediate():
    # x + 1e8 = 100000000.5 (exact in float64) with adjoint 1, and f = 0.5 with adjoint 1; -1e8 is a
    # constant's negation (exact, and upstream of nothing that moves with x)
    assert float(_scale("input x\ny = (x + 1e8) - 1e8", {"x": 0.5}, "x")) == pytest.approx(
        math.hypot(100000000.5, 0.5), rel=1e-15)


def test_the_scale_of_a_value_scaled_down_afterwards_is_scaled_down_too():
    # x*y = 0.91 with adjoint 1e-12, and f = 9.1e-13 with adjoint 1: sqrt(2) 9.1e-13, not 0.91
    assert float(_scale("input x, y\nz = 1e-12 * (x*y)", {"x": 0.7, "y": 1.3}, "x")) == pytest.approx(
        math.sqrt(2) * 9.1e-13, rel=1e-12)


def test_the_scale_of_a_sum_counts_its_terms():
    # sum rounds as if each term moved by eps |term|: |-1| for the result, |3| and |-4| for its operands
    # (x itself is not rounded by f's evaluation: it is the point)
    assert float(_scale("input x[2]\ny = sum(x)", {"x": [3.0, -4.0]}, "x")) == pytest.approx(math.sqrt(26), rel=1e-15)


def test_operations_upstream_of_the_input_do_not_count():
    # the finite differences in b re-evaluate only the product: a's cancellation rounds alike at every
    # point; in a, the sum 1e8 + 0.5 has adjoint b = 2, the difference 0.5 too, the product f = 1 adjoint 1
    src, at = "input a, b\nf = ((a + 1e8) - 1e8) * b", {"a": 0.5, "b": 2.0}
    assert float(_scale(src, at, "b")) == 1.0
    assert float(_scale(src, at, "a")) == pytest.approx(math.sqrt((2e8 + 1) ** 2 + 1 + 1), rel=1e-15)


def test_each_operand_of_solve_rounds_on_its_own():
    # solve(A, A) = I: X = A^-1 B with A = B = diag(2, 4).  For the seed e_ij, the operands' VJPs are
    # -A^-T e_ij X^T and A^-T e_ij, of size 1/A_ii at (i, j): times |A| there, 1 on the diagonal, 0 off
    # it; with the result's 1, the diagonal's scale is sqrt(3).  (Summed into A's cotangent, the two
    # parts cancel: d(A^-1 A)/dA = 0.)
    s = _scale("input A[2,2]\nout = solve(A, A)", {"A": np.diag([2.0, 4.0])}, "A")
    assert s == pytest.approx(np.diag([math.sqrt(3)] * 2), rel=1e-15, abs=0)


# -- right gradients with cancelling intermediates pass ----------------------------------------

REPRODUCERS = [  # (check hunt F6: each failed --taylor with orders 0.19 to 0.66, or -1)
    ("input x[3]\ny = (sum(x^2) + 1e6) - 1e6", {"x": [0.5, 1, 2]}),
    ("input x\ny = (x + 1e8) - 1e8", {"x": 0.5}),
    ("input x\ny = log(exp(x)) - x", {"x": 0.3}),
    ("input x[4]\ny = norm(x / norm(x)) - 1", {"x": [1, 2, 3, 4]}),
    ("input M[3,3], b[3]\nr = M @ solve(M, b) - b", {"M": [[4, 1, 0], [1, 3, 1], [0, 1, 2]], "b": [1, 2, 3]}),
]


@pytest.mark.parametrize("src, at", REPRODUCERS)
def test_taylor_passes_right_gradients_whose_intermediates_cancel(src, at):
    r = gradcalc.check(src, at=at, taylor=True)
    assert r.ok, [(x.wrt, x.extra.get("taylor_order"), x.notes) for x in r.results]
    assert all(x.extra["taylor_order"] >= TAYLOR_MIN_ORDER for x in r.results)


def test_taylor_passes_solve_of_a_matrix_by_itself_at_random_points():
    # 19 of 20 points failed: solve(A, A) = I rounds by eps cond(A), far above eps |I_ij| off the diagonal
    r = gradcalc.check("input A[3,3]\nout = solve(A, A)", points=20, seed=1, taylor=True)
    assert r.ok and len(r.results) == 20


@pytest.mark.parametrize("method", ["central", "richardson"])
def test_a_cancelling_sum_passes_at_random_points_with_the_rounding_explained(method):
    # check hunt F7: every one of 20 points failed, the mismatch past 4 eps |f| / h while it was
    # rounding of 1e6 + sum(x^2); now a failing default step takes the rounding route and says why
    r = gradcalc.check("input x[3]\ny = (sum(x^2) + 1e6) - 1e6", points=20, seed=3, method=method)
    assert r.ok
    notes = [n for x in r.results for n in x.notes]
    assert notes and all("larger intermediates cancel in it" in n for n in notes if "rounding limit" in n)
    assert any("rounds by about eps x 1e+06" in n for n in notes)


def test_an_ill_conditioned_eigh_passes_with_the_rounding_explained():
    # check hunt F7 (seed 200209): central failed by 1.1e-6 at [1, 2, 0, 0], without a rounding note,
    # as eigh's rounding reaches out through a power with a large exponent's derivative
    at = {"A": [[-0.20323903630764617, -0.5683995478913852, -0.15527865312616515],
                [1.074794739371542, -2.603698096247804, -2.1225373276837995],
                [0.09518470268885246, 1.1624071492424501, -0.6385768677520948]], "y": 1.068780301278675}
    src = "input A[3,3], y\nw, V = eigh(A @ transpose(A) + 0.5*eye(3))\nout = (0.5 + y^2) ^ (V*V*w)"
    (r,) = gradcalc.check(src, at=at, wrt="A").results
    assert r.ok and any("at their rounding limit" in n for n in r.notes), r.notes


# -- wrong gradients are still caught ----------------------------------------------------------

def _wrong_sin(monkeypatch, factor):
    rule = lambda d, ans, x, **_: safe_mul(d, factor * REGISTRY["cos"](x))  # noqa: E731
    replace_rule(monkeypatch, REGISTRY["sin"], "vjp", (rule,))
    replace_rule(monkeypatch, REGISTRY["sin"], "jvp", (rule,))


@pytest.mark.parametrize("method", ["central", "forward", "richardson"])
@pytest.mark.parametrize("src, at", [("input x\ny = (sin(x) + 1e8) - 1e8", {"x": 0.7}),
                                     ("input x[3]\ny = (sum(sin(x)) + 1e6) - 1e6", {"x": [0.5, 1, 2]})])
def test_a_wrong_rule_beside_a_cancelling_intermediate_fails(monkeypatch, method, src, at):
    # sin 1% wrong: eps 1e8 / h is 3e-3 at the central step, 0.4% of cos(0.7); the larger steps the
    # rounding route searches see the 1% in full
    _wrong_sin(monkeypatch, 1.01)
    r = gradcalc.check(src, at=at, method=method)
    assert not r.ok


@pytest.mark.parametrize("src, at", [("input x\ny = (sin(x) + 1e4) - 1e4", {"x": 0.7}),
                                     ("input x[3]\ny = (sum(sin(x)) + 1e6) - 1e6", {"x": [0.5, 1, 2]})])
def test_taylor_fails_a_wrong_rule_whose_error_is_above_the_real_rounding(monkeypatch, src, at):
    # the remainder 0.01 cos(x) h outgrows the rounding floor (1e3 eps 1e4 = 2.2e-9) from h ~ 1e-6 up
    _wrong_sin(monkeypatch, 1.01)
    r = gradcalc.check(src, at=at, taylor=True)
    (x,) = r.results
    assert not x.ok and x.extra["taylor_order"] == pytest.approx(1.0, abs=0.1)


def test_taylor_fails_a_wrong_rule_when_f_is_scaled_down_afterwards(monkeypatch):
    # a floor at the largest intermediate's size (sin(x)*y = 0.84: 1e3 eps 0.84 = 1.9e-13) hid the
    # whole remainder 1e-14 h of 1e-12 * (sin(x)*y); weighted by its adjoint 1e-12, the intermediate
    # counts as 8.4e-13
    src, at = "input x, y\nz = 1e-12 * (sin(x)*y)", {"x": 0.7, "y": 1.3}
    assert float(_scale(src, at, "x")) < 2e-12
    _wrong_sin(monkeypatch, 1.01)
    (x, _) = gradcalc.check(src, at=at, taylor=True).results
    assert not x.ok and x.extra["taylor_order"] == pytest.approx(1.0, abs=0.1)
    assert "Taylor remainder order 1.00, expected 2" in x.notes


def test_many_outputs_at_the_rounding_limit_each_pass_on_their_own_equations():
    """y_i = x_i^2 + 1e6: at the default step the rounding of 1e6 (2.9e-5 a quotient) fails each
    output, and larger steps, where x^2's central differences are exact, pass it.  The search over
    steps for y_i runs the equations y_i is computed from (numerics._pass_from), not the program's
    4 n (a pass per step over every output's equations: 100 outputs took 34 s), and each result is
    the one its output's check alone gives."""
    from gradcalc.numerics import _pass_from
    from gradcalc.session import trace_source
    n = 60
    src = f"input x = linspace(0.5, 1, {n})\n" + "\n".join(f"y{i} = x[{i}]^2 + 1e6" for i in range(n))
    of = [f"y{i}" for i in range(n)]
    r = gradcalc.check(src, of=of)
    assert r.ok and len(r.results) == n
    x = np.linspace(0.5, 1, n)
    for i, res in enumerate(r.results):
        assert res.of == f"y{i}" and res.max_abs_err <= 1e-6 * 2 * x[i]
    searched = [res for res in r.results if res.notes]  # (the others' rounding happened to pass)
    assert len(searched) > n // 2 and all("converge (within" in res.notes[0] for res in searched)
    for i in (0, 1, 7, n - 2):
        (alone,) = gradcalc.check(src, of=[f"y{i}"]).results
        assert alone == r.results[i]
    tr = trace_source(src, None, 10**8)
    names = tr.tape.names
    found = _pass_from(tr, names["x"], (names["y7"],), None)
    assert [eq.prim.name for eq in found.equations] == ["index", "pow_const", "add"]
