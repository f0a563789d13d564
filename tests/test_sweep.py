"""check --sweep: the finite-difference error over steps 1e-1..1e-13 (gradcalc.sweep), and how
the command line shows it.  Expected derivatives come from closed forms, never from gradcalc."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

from gradcalc.lower import trace
from gradcalc.session import parse
from gradcalc.sweep import BAD_STEP, OK, STEPS, WRONG, sweep

from cli_run import ok_json, run

ESCAPE = re.compile(r"\x1b\[")


def _traced(text, **at):
    return trace(parse(text), {k: np.asarray(v, dtype=float) for k, v in at.items()})


def _sin_exp(method="central", ad=None):
    tr = _traced("sin(x)*exp(x)", x=0.7)
    return sweep(tr, tr.tape.output, "x", method, ad=ad, tol=(1e-6, 1e-8))


def test_sweep_steps_run_from_1e_1_to_1e_13_in_half_decades():
    assert STEPS[0] == pytest.approx(1e-1) and STEPS[-1] == pytest.approx(1e-13)
    assert np.allclose(np.diff(np.log10(STEPS)), -0.5)


def test_the_v_of_central_differences_has_its_floor_inside_and_high_ends():
    s = _sin_exp()
    best = int(np.argmin(s.errors))
    assert 1e-9 <= STEPS[best] <= 1e-2
    assert s.best_step == STEPS[best] and s.best_error == s.errors[best]
    assert s.errors[0] >= 100 * s.best_error and s.errors[-1] >= 100 * s.best_error
    assert s.verdict == OK


@pytest.mark.parametrize("method, slope, within", [("central", 2, 0.3), ("forward", 1, 0.3),
                                                    ("richardson", 4, 0.6)])
def test_truncation_slope_is_the_order_of_the_method(method, slope, within):
    assert abs(_sin_exp(method).slope - slope) <= within


def test_the_error_is_measured_against_the_closed_form():
    # at the largest step, central differences err by about h^2 |f'''| / 6
    x, h = 0.7, 0.1
    f3 = 2 * math.exp(x) * (math.cos(x) - math.sin(x))  # (sin x e^x)''' = 2 e^x (cos x - sin x)
    assert _sin_exp().errors[0] == pytest.approx(h * h * abs(f3) / 6, rel=0.05)


def test_a_wrong_derivative_never_reaches_the_floor():
    right = math.exp(0.7) * (math.sin(0.7) + math.cos(0.7))
    s = _sin_exp(ad=np.array(right * 1.001))
    assert s.verdict == WRONG
    assert s.best_error >= 1e-3 * right * 0.5


def test_a_right_derivative_with_a_bad_default_step_is_the_steps_fault():
    # x^3 + 1e7 at x = 0.7: the default central step (7.6e-6) leaves a rounding error of about
    # eps 1e7 / 7.6e-6 ~ 3e-4 (the check fails at rtol 1e-6), while larger steps, where the
    # truncation error h^2 is still small, come within the tolerance of f' = 3 x^2 = 1.47
    tr = _traced("x^3 + 1e7", x=0.7)
    s = sweep(tr, tr.tape.output, "x", tol=(1e-6, 1e-8), passed=False)
    assert s.verdict == BAD_STEP and s.side == "rounding"
    assert s.scale == pytest.approx(1.47)
    assert s.best_error < 1e-6 * 1.47 and s.best_step > s.default_step


def test_sweep_follows_the_worst_element_of_an_array_input():
    tr = _traced("sum(sin(x))", x=[0.1, 0.2, 0.3])
    s = sweep(tr, tr.tape.output, "x", element=[2], tol=(1e-6, 1e-8))
    assert s.element == [2]
    assert s.scale == pytest.approx(math.cos(0.3))


def test_check_sweep_json_carries_the_data_per_result():
    doc = ok_json("check", "sin(x)*exp(x)", "--at", "x=0.7", "--sweep")
    (r,) = doc["results"]
    sw = r["sweep"]
    assert len(sw["steps"]) == len(sw["errors"]) == len(STEPS)
    assert sw["verdict"] == OK and abs(sw["slope"] - 2) <= 0.3
    assert 1e-9 <= sw["best_step"] <= 1e-2


def test_check_sweep_names_a_bad_step_from_the_command_line():
    r = run("check", "x^3 + 1e7", "--at", "x=0.7", "--sweep", "-f", "json")
    assert r.exit_code == 1
    import json
    (res,) = json.loads(r.stdout)["results"]
    assert res["sweep"]["verdict"] == BAD_STEP


def test_check_sweep_table_draws_the_v_without_escape_codes_when_piped():
    r = run("check", "sin(x)*exp(x)", "--at", "x=0.7", "--sweep")
    assert r.exit_code == 0, r.stderr
    out = r.stdout
    assert not ESCAPE.search(out)
    assert "best step" in out and "slope" in out and "-> (h)" in out and "(error)" in out


def test_check_sweep_is_refused_with_exec():
    r = run("check", "--exec", "true", "--at", "x=1", "--sweep")
    assert r.exit_code == 2 and "--sweep" in r.stderr


def test_check_sweep_is_refused_with_directions():
    # the sweep follows one element of the full Jacobian, which --directions does not form
    r = run("check", "sum(x^3)", "--at", "x=[1,2]", "--directions", "2", "--sweep")
    assert r.exit_code == 2 and "--sweep follows one input element" in r.stderr
