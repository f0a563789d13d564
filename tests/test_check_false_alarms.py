"""Right gradients that `check` failed (false alarms), and the wrong ones it must still fail.

Expected derivatives come from closed forms; a wrong rule is made by patching sin's rules
(as tests/test_check_directions.py's _sin_slope_times does)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import gradcalc
from gradcalc.checks import breach_text
from gradcalc.lower import trace
from gradcalc.primitives import REGISTRY, safe_mul
from rules import replace_rule


def _sin_slope_times(monkeypatch, factor: float) -> None:
    rule = (lambda g, ans, x, **_: safe_mul(g, factor * REGISTRY["cos"](x)),)
    replace_rule(monkeypatch, REGISTRY["sin"], "vjp", rule)
    replace_rule(monkeypatch, REGISTRY["sin"], "jvp", rule)


def _sin_kx_points(n: int):
    """(k, x): sin(k x) with k in [10, 1000], x in (0.05, 1), where Richardson's default step
    2^-10 is more than 1e-3 |x| and its steps relative to |x| are hardly smaller."""
    for s in range(n):
        r = np.random.default_rng(s)
        yield float(np.round(10 ** r.uniform(1, 3), 3)), float(r.uniform(0.05, 1))


# F1: Richardson below |x| = 1 --------------------------------------------------------------

@pytest.mark.parametrize("directions", [0, 1])
def test_richardson_passes_sin_100x_at_half(directions):
    # ad = 100 cos(50) = 96.4966..., right; Richardson at 2^-10 and at 2^-11 (relative to |x| =
    # 0.5) both err by ~1e-7 of it, past rtol 1e-8, and the coarse step's note kept the halving
    # search (which converges at 6e-5) off: it failed with "near 0, a function like 1/x ..."
    (r,) = gradcalc.check("sin(100*x)", at={"x": 0.5}, method="richardson", directions=directions).results
    assert r.ok, (breach_text(r), r.notes)
    assert "converge" in r.notes[-1] and "to the automatic derivative" in r.notes[-1]
    if not directions:
        assert float(gradcalc.grad("sin(100*x)", at={"x": 0.5})["x"]) == pytest.approx(100 * math.cos(50), rel=1e-14)


@pytest.mark.parametrize("directions", [0, 1])
def test_richardson_passes_sin_kx_below_one(directions):
    # 91 of 200 such points failed the full check, 87 of 200 one direction
    failed = [(k, x) for k, x in _sin_kx_points(40)
              if not gradcalc.check(f"sin({k}*x)", at={"x": x}, method="richardson", directions=directions,
                                    seed=1).ok]
    assert failed == []


@pytest.mark.parametrize("directions", [0, 1])
def test_richardson_still_fails_a_wrong_sin_below_one(monkeypatch, directions):
    # sin's slope 1e-7 wrong (ten times Richardson's rtol): the halved steps converge, and disagree
    _sin_slope_times(monkeypatch, 1 + 1e-7)
    for k, x in _sin_kx_points(20):
        (r,) = gradcalc.check(f"sin({k}*x)", at={"x": x}, method="richardson", directions=directions,
                              seed=1).results
        assert not r.ok, (k, x)
    (r,) = gradcalc.check("sin(100*x)", at={"x": 0.5}, method="richardson", directions=directions).results
    assert not r.ok and "still disagree" in r.notes[-1]
    assert r.max_rel_err == pytest.approx(1e-7, rel=0.05)


# F2: reverse against forward mode where terms cancel ----------------------------------------

def _sin_tangent_times(monkeypatch, factor: float) -> None:
    # forward mode alone wrong: only the comparison of reverse and forward mode can see it
    rule = (lambda g, ans, x, **_: safe_mul(g, factor * REGISTRY["cos"](x)),)
    replace_rule(monkeypatch, REGISTRY["sin"], "jvp", rule)


SINC_X = np.random.default_rng(35).uniform(-1e-3, 1e-3, 100)


def _illconditioned(seed: int) -> dict:
    r = np.random.default_rng(seed)
    return {"A": np.vander(np.linspace(1, 2, 8), 8) + r.normal(0, 1e-3, (8, 8)), "b": r.normal(0, 1, 8)}


@pytest.mark.parametrize("seed", [35, 67, 69, 272])
def test_reverse_and_forward_mode_agree_on_sinc_near_zero(seed):
    # d/dx sin(x)/x = cos(x)/x - sin(x)/x^2: terms of 1/x that cancel, and each mode rounds by eps
    # times them (2.3e-11); the two passes rescaled by 3 and 0.7 measured less at these seeds
    (r,) = gradcalc.check("sum(sin(x)/x)", at={"x": SINC_X}, seed=seed).results
    assert r.ok, r.notes
    x = SINC_X  # (the closed form's series, -x/3 + x^3/30 - x^5/840: no cancellation)
    np.testing.assert_allclose(gradcalc.grad("sum(sin(x)/x)", at={"x": x})["x"], -x / 3 + x ** 3 / 30 - x ** 5 / 840,
                               rtol=0, atol=1e-9)


@pytest.mark.parametrize("seed", [15, 64, 113, 282])
def test_reverse_and_forward_mode_agree_on_atan_over_x(seed):
    x = np.random.default_rng(seed).uniform(-1e-3, 1e-3, 100)
    assert gradcalc.check("sum(atan(x)/x)", at={"x": x}, seed=seed).ok


@pytest.mark.parametrize("seed", [22, 38])
def test_reverse_and_forward_mode_agree_on_an_illconditioned_solve(seed):
    # cond(A) ~ 1e6: each mode's solve (with A, with A^T) rounds by cond eps |x| normwise; J v
    # along one probe direction was 100 times smaller than along the other, and rev and fwd
    # differed there by 1.1e-10 of it
    r = gradcalc.check("input A[8,8], b[8]\nsum(solve(A, b)^2)", at=_illconditioned(seed), seed=seed)
    assert r.ok, [x.notes for x in r.results]


@pytest.mark.parametrize("seed", [35, 67, 69, 272])
def test_a_wrong_tangent_rule_still_fails_on_sinc_near_zero(monkeypatch, seed):
    _sin_tangent_times(monkeypatch, 1 + 1e-8)
    (r,) = gradcalc.check("sum(sin(x)/x)", at={"x": SINC_X}, seed=seed).results
    assert not r.ok and "reverse and forward mode disagree" in r.notes


def test_a_wrong_tangent_rule_still_fails_after_an_illconditioned_solve(monkeypatch):
    _sin_tangent_times(monkeypatch, 1 + 1e-8)
    for seed in range(10):
        at = _illconditioned(seed)
        at["b"] = 1e-5 * at["b"]
        (r, s) = gradcalc.check("input A[8,8], b[8]\nsum(sin(solve(A, b)))", at=at, seed=seed).results
        assert "reverse and forward mode disagree" in r.notes and "reverse and forward mode disagree" in s.notes


# F5: --directions where f's intermediates are far larger than f ------------------------------

@pytest.mark.parametrize("seed", [1, 2, 3])
def test_directions_below_the_intermediates_ulp_cannot_decide(seed):
    # J v = sum(v), right; x + 1e8 rounds to multiples of 1.5e-8, so below the default forward
    # step every difference quotient is exactly 0 (or a multiple of ulp / h): eps |f| / h called
    # them converged, and the note said they 'converge (within 2.8e-13) and still disagree'
    at = {"x": np.linspace(-1, 1, 1000)}
    (r,) = gradcalc.check("sum((x + 1e8) - 1e8)", at=at, method="forward", directions=2, seed=seed).results
    if not r.ok:
        assert not any("converge" in n for n in r.notes), r.notes
        assert any("they cannot decide" in n for n in r.notes), r.notes
    (full,) = gradcalc.check("sum((x + 1e8) - 1e8)", at=at, method="forward").results
    assert full.ok


def test_directions_still_fail_a_wrong_sin_beside_a_large_intermediate(monkeypatch):
    _sin_slope_times(monkeypatch, 1.01)
    for seed in range(10):
        x = np.random.default_rng(seed).uniform(-1, 1, 5)
        assert not gradcalc.check("(sin(x) + 1e8) - 1e8", at={"x": x}, seed=seed, directions=2).ok, seed


def test_an_allowance_past_j_v_decides_nothing_though_the_differences_are_larger():
    # stop_gradient hides half the slope from AD (J v 1.0 per unit of sum(v), the differences
    # 1.5): forward differences beside 1e8 round by more than J v, and the "cannot decide" guard
    # compared the allowance with the differences alone, so seeds 6 and 30 passed
    x = np.linspace(-1, 1, 1000)
    src = "sum((x + 1e8) - 1e8) + 0.5*sum(stop_gradient(x))"
    passed = [seed for seed in range(31)
              if gradcalc.check(src, at={"x": x}, method="forward", directions=2, seed=seed).ok]
    assert passed == []


@pytest.mark.parametrize("src, at, wrt, slope", [
    ("input x\nsin(x*1e6)", {"x": 0.0013}, "x", 1e6 * np.cos(1300.0)),
    ("input t, tau\nexp(-t/tau)", {"t": 0.0, "tau": 1e-7}, "t", -1e7),
    ("input x[3]\nsum(sin(x*1e6))", {"x": np.array([0.0013, 0.0017, 0.0019])}, "x", 1e6 * np.cos(1e6 * np.array([0.0013, 0.0017, 0.0019]))),
])
def test_functions_that_change_far_below_the_step_are_searched_until_they_converge(src, at, wrt, slope):
    # sin(1e6 x) changes on a scale of 1e-6, below the default step 7.6e-6; its differences
    # converge at 19 halvings, past the 12 (plus log2 max(1, |x|)) the search took: a false
    # failure ("fd 104045" for 814251), as exp(-t / 1e-7) at t = 0 (an RC circuit's decay).
    # The search now halves until the differences converge or rounding passes the tolerance;
    # the slope 1e-4 wrong still fails
    (r,) = gradcalc.check(src, at=at, wrt=[wrt]).results
    assert r.ok, r.notes
    assert gradcalc.grad(src, at=at, wrt=[wrt])[wrt] == pytest.approx(slope, rel=1e-12)
    (w,) = gradcalc.check(src + " + stop_gradient(1e-4 * " + src.split("\n")[1] + ")", at=at, wrt=[wrt]).results
    assert not w.ok and w.max_rel_err == pytest.approx(1e-4, rel=0.05)


def test_a_kink_is_near_in_the_units_of_its_own_argument():
    # abs(x^4) at x = 1e-3: its argument 1.2e-12 is within two steps (1.5e-5) of 0 in x's units,
    # but a step moves it by 4 x^3 h ~ 3e-14: the kink is not within reach, so the coarse step's
    # failure takes the retry at steps relative to |x| and passes (d/dx log(x^4) = 4 / x), where it
    # failed "near the kink of 'abs'"; a kink that a step does reach is still named
    x = 0.00104
    (r,) = gradcalc.check("input x\nlog(abs(x^4))", at={"x": x}).results
    assert r.ok and not any("kink" in n for n in r.notes)
    assert gradcalc.grad("input x\nlog(abs(x^4))", at={"x": x})["x"] == pytest.approx(4 / x, rel=1e-12)
    (w,) = gradcalc.check("input x\nlog(abs(x^4)) + stop_gradient(1e-4*log(abs(x^4)))", at={"x": x}).results
    assert not w.ok
    (near,) = gradcalc.check("input x[2]\nsum(abs(x^3))", at={"x": np.array([2e-6, 0.5])}).results
    assert any(n.startswith("near the kink of 'abs'") for n in near.notes)  # (3 x^2 h ~ 9e-17 > x^3 = 8e-18)
    (at_zero,) = gradcalc.check("input x\nabs(x)", at={"x": 0.0}).results
    assert any(n.startswith("near the kink of 'abs'") for n in at_zero.notes)


def test_a_kinks_tangent_pass_keeps_within_the_element_budget():
    # the pass runs from x through every value on the way to the kink (W @ x: 1,200 rows of 1,200
    # elements for W 40x30), not only through the kink's operands (40 elements): past an eighth of
    # the budget the plain test stands, where this was the error "a tangent pass for a kink's
    # distance ... would have 1440000 elements"
    W = np.full((40, 30), 0.001)
    x = np.linspace(-1, 1, 30)  # (W @ x = 0: every relu at its kink)
    dw, dx = gradcalc.check("input W[40,30], x[30]\nsum(relu(W @ x)^2)", at={"W": W, "x": x},
                            max_elements=1_000_000).results
    assert any(n.startswith("near the kink of 'relu'") for n in dw.notes + dx.notes)


def test_a_kinks_distance_moves_as_its_operands_do_a_scalar_beside_a_vector_included():
    # maximum(x, c) with c = 0.1 sum(x), a scalar beside the vector x, both moving with x: the kink's
    # distance x_i - c moves, when x_j alone moves by 2h_j, by 2h_j (e_ij - 0.1); its largest move
    # per element over j and both signs, computed here by brute force, is what _kink_moves finds
    from gradcalc import numerics
    x = np.array([0.2, 0.3, 0.5, 0.9])
    tr = trace(gradcalc.parse("input x[4]\nc = sum(x) * 0.1\nsum(maximum(x, c) * x)"), {"x": x})
    (eq,) = [e for e in tr.tape.equations if e.prim.name == "maximum"]
    h = np.array([1e-4, 1e-3, 1e-2, 1e-1])  # (a move of c by another element's step can be the largest)
    values = numerics.restored(tr, {eq.out, *eq.args})
    moves = numerics._kink_moves(tr, tr.tape.names["x"], eq, h, values)
    want = np.max([np.abs(2 * h[j] * ((np.arange(4) == j) - 0.1)) for j in range(4)], axis=0)
    assert moves == pytest.approx(want, rel=1e-9)
