"""Right gradients that `check` failed (false alarms), and the wrong ones it must still fail.

Expected derivatives come from closed forms; a wrong rule is made by patching sin's rules
(as tests/test_check_directions.py's _sin_slope_times does)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import gradcalc
from gradcalc.checks import breach_text
from gradcalc.primitives import REGISTRY, safe_mul


def _sin_slope_times(monkeypatch, factor: float) -> None:
    rule = (lambda g, ans, x, **_: safe_mul(g, factor * REGISTRY["cos"](x)),)
    monkeypatch.setattr(REGISTRY["sin"], "vjp", rule)
    monkeypatch.setattr(REGISTRY["sin"], "jvp", rule)


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
