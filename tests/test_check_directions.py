"""`check --directions` with each --method: the method along the directions is that method, at its
own step, judged by its own tolerance, and reported as such."""
from __future__ import annotations

import math

import numpy as np
import pytest

import gradcalc
from gradcalc import numerics
from gradcalc.checks import breach_text
from gradcalc.session import trace_source
from gradcalc.primitives import REGISTRY, safe_mul
from rules import replace_rule

EPS = np.finfo(float).eps


def _power_of_two_near(h: float) -> float:
    return 2.0 ** round(math.log2(h))


# The step each method takes at |x| <= 1 (SPEC §5: "chosen per element from the method and the
# value's scale, and reported"): eps^(1/3), eps^(1/2), eps^(1/5) rounded to a power of two, and
# the complex step 1e-20 (README, "check").
STEPS = {
    "central": _power_of_two_near(EPS ** (1 / 3)),
    "forward": _power_of_two_near(EPS ** (1 / 2)),
    "richardson": _power_of_two_near(EPS ** (1 / 5)),
    "complex": 1e-20,
}


@pytest.mark.parametrize("method", list(STEPS))
def test_directions_report_the_step_their_method_takes(method):
    # the complex step along a direction reported the central difference's step (7.6e-6) while
    # it took 1e-20, which the full check reports
    (r,) = gradcalc.check("exp(x)", at={"x": 1.0}, method=method, directions=1).results
    assert r.ok and r.method == f"{method} (1 direction)"
    assert r.step == STEPS[method]
    (full,) = gradcalc.check("exp(x)", at={"x": 1.0}, method=method).results
    assert full.step == r.step


SAMPLES = ["samples/force_grad.grad", "samples/least_squares.grad", "samples/pendulum_euler.grad"]


@pytest.mark.parametrize("src, at", [
    ("sum(sin(5*x))", {"x": np.array([0.3, 0.7])}),
] + [(path, None) for path in SAMPLES])
def test_richardson_along_directions_passes_right_gradients(src, at):
    # Richardson along a direction was a central difference at Richardson's step (2^-10), whose
    # truncation error (~h^2 f''' / 6 = 2e-5 for sin(5x)) Richardson's rtol of 1e-8 failed
    if src.endswith(".grad"):
        with open(src) as f:
            src = f.read()
    r = gradcalc.check(src, at=at, method="richardson", directions=2)
    assert r.ok, [(x.wrt, breach_text(x), x.notes) for x in r.results if not x.ok]
    # Richardson's own accuracy: well inside its rtol of 1e-8 (central differences at that step
    # erred by 1e-6 to 7e-6 here)
    assert max(x.max_rel_err for x in r.results) < 1e-9


def _sin_slope_times(monkeypatch, factor: float) -> None:
    rule = (lambda g, ans, x, **_: safe_mul(g, factor * REGISTRY["cos"](x)),)
    replace_rule(monkeypatch, REGISTRY["sin"], "vjp", rule)
    replace_rule(monkeypatch, REGISTRY["sin"], "jvp", rule)


@pytest.mark.parametrize("method, wrong_by, fails", [
    # sin's slope 1e-7 wrong: beyond Richardson's rtol (1e-8), within the central one (1e-6)
    ("richardson", 1e-7, True),
    ("central", 1e-7, False),
    # 1e-3 wrong: beyond the forward rtol (1e-4)
    ("forward", 1e-3, True),
])
def test_directions_judge_by_their_methods_accuracy(monkeypatch, method, wrong_by, fails):
    _sin_slope_times(monkeypatch, 1 + wrong_by)
    (r,) = gradcalc.check("sum(sin(5*x))", at={"x": np.array([0.3, 0.7])}, method=method, directions=2).results
    assert r.ok is not fails
    if fails:  # |J v| relative error: the rule's own, 1e-7 or 1e-3
        assert r.max_rel_err == pytest.approx(wrong_by, rel=0.05)


def test_a_directions_failure_names_the_direction_not_an_element(monkeypatch):
    # worst_index along directions is (direction, output element): "at [1]" read as x[1]
    _sin_slope_times(monkeypatch, 1.01)
    (r,) = gradcalc.check("sum(sin(x))", at={"x": np.array([0.3, 0.7])}, directions=2).results
    assert not r.ok and len(r.worst_index) == 1
    assert breach_text(r).startswith(f"along direction {r.worst_index[0]}: ad ")
    (r,) = gradcalc.check("sin(x)", at={"x": np.array([0.3, 0.7])}, directions=2).results
    assert not r.ok and len(r.worst_index) == 2
    k, i = r.worst_index
    assert breach_text(r).startswith(f"along direction {k}, at [{i}]: ad ")


# A sequential sum of 32,000 terms (cumsum's last element: a loop's order of summation) rounds
# by far more than eps |f|: its rounding along a direction is measured from the differences.
NOISY = "input x[32000]\ncumsum(x^2*sin(x))[31999]\n"


def _noisy_point(seed: int) -> dict:
    return {"x": np.random.default_rng(seed).uniform(1.0, 3.0, 32000)}


@pytest.mark.parametrize("directions", [1, 2])
def test_directions_pass_a_right_gradient_whose_rounding_one_pair_understates(directions):
    # One pair of differences, D(h) and D(17/16 h), measured that rounding per direction: where
    # the two happened to agree, a right gradient failed (seeds 0-39: 3 of 40 with one direction,
    # 4 with two; a loop summing them, 2 of 18 points and seeds)
    failed = [seed for seed in range(40)
              if not gradcalc.check(NOISY, at=_noisy_point(seed), directions=directions, seed=seed).ok]
    assert failed == []


def test_directions_still_fail_a_wrong_gradient_beyond_that_rounding(monkeypatch):
    # central differences round by about 1e-6 of |J v| here: sin's slope 1e-3 wrong moves J v by
    # 8e-4 to 1.3e-2 of it (its terms partly cancel), far out of that.  (Forward differences
    # round by up to 7% of |J v| at this size: they cannot see it, with or without the fit.)
    _sin_slope_times(monkeypatch, 1 + 1e-3)
    for seed in range(10):
        (r,) = gradcalc.check(NOISY, at=_noisy_point(seed), directions=2, seed=seed).results
        assert not r.ok and r.max_rel_err > 5e-4, seed


def test_the_fitted_rounding_leaves_the_truncation_out():
    # exp(10 x) along a direction: central differences at h = 2^-16 err by h^2 f''' / 6 (2.2e-5)
    # and round by about eps |f| / h (1.6e-8); D(h) - D(17/16 h) holds 0.13 of the truncation,
    # which the fit of a + b c^2 takes out
    x = np.array([0.3, 0.7])
    tr = trace_source("input x\nsum(exp(10*x))", {"x": x}, 10 ** 8)
    v = np.array([[0.6, 0.8]])
    kind, step = "central", 2.0 ** -16
    (found,) = map(numerics.Directional._make, zip(*numerics._directional_differences(tr, "x", ["_"], v, kind, step)))
    fitted = numerics._fitted_noise(tr, "x", "_", v, step, found, kind)
    truncation = step ** 2 * 1000 * np.sum(np.exp(10 * x) * v[0] ** 3) / 6
    assert abs(found.values[0] - found.near[0]) == pytest.approx(((17 / 16) ** 2 - 1) * truncation, rel=0.05)
    rounding = numerics.stencil.EPS * np.sum(np.exp(10 * x)) / step
    assert fitted[0] < 10 * rounding < 1e-2 * truncation


def test_directions_retry_relative_steps_where_the_default_one_leaves_the_domain_undecided():
    # Newton's square root of a = 2e-7: the default step 7.6e-6 takes a below 0, where the
    # iteration gives finite values of a huge |f|, whose rounding allowance eps |f| / h decided
    # nothing ("they cannot decide": a false failure the full check passes at steps relative to
    # |a|). The retry at those steps now comes first; d sqrt(a) / da = 1 / (2 sqrt(a)) passes there,
    # and a slope 1e-4 wrong fails
    a = 2.0677916110896603e-07
    src = "input a\ny = a\nfor i in range(60) { y = 0.5*(y + a/y) }\ny"
    assert gradcalc.grad(src, at={"a": a})["a"] == pytest.approx(0.5 / np.sqrt(a), rel=1e-12)
    (r,) = gradcalc.check(src, at={"a": a}, directions=3).results
    assert r.ok and any("compared at steps relative to |x| instead" in n for n in r.notes)
    (w,) = gradcalc.check(src + " + stop_gradient(1e-4*y)", at={"a": a}, directions=3).results
    assert not w.ok and any("they disagree too (rel err 0.0001)" in n for n in w.notes)
