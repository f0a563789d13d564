"""check and control flow (issue 15 item 4, SPEC §5): finite differences are those of the
program as written, re-run where a step changes the path, and such points are flagged.

Expected values are computed here: finite differences of the same function written in
Python, with the step SPEC §5 documents (a power of two near eps^(1/3) max(1, |x|) for
central differences), and closed forms.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

import gradcalc
from gradcalc import numerics
from gradcalc.cli.app import app

runner = CliRunner()
EPS = np.finfo(float).eps
KINKED_IF = "if x > 1 { y = x^2 } else { y = 2*x - 1 }; y"


def central_step(x: float) -> float:
    """The central difference's step at x (SPEC §5, README: a power of two near eps^(1/3) s)."""
    return 2.0 ** round(math.log2(EPS ** (1 / 3) * max(1.0, abs(x))))


def central(f, x: float) -> float:
    h = central_step(x)
    return (f(x + h) - f(x - h)) / ((x + h) - (x - h))


def notes_of(r) -> list:
    return [n for res in r.results for n in res.notes]


# ==========================================================================
# The flag: position and wording
# ==========================================================================


def test_a_step_across_the_if_boundary_is_flagged_with_line_and_column():
    r = gradcalc.check(KINKED_IF, at={"x": 1.0000000001})
    (res,) = r.results
    assert res.notes == ["near a change of path: a finite-difference step flips the if condition 'x > 1' "
                         "(line 1, column 4); finite differences there differ from the derivative of the "
                         "path taken"]


def test_done_when_the_cli_flags_1_4():
    out = runner.invoke(app, ["check", KINKED_IF, "--at", "x=1.0000000001", "-f", "json"])
    (res,) = json.loads(out.stdout)["results"]
    assert any("line 1, column 4" in n for n in res["notes"]), res["notes"]


def test_the_differences_are_those_of_the_program_as_written():
    # x^2 above 1, 2x - 1 below: the step down lands on the other branch
    def f(x):
        return x * x if x > 1 else 2 * x - 1

    x = 1.0000000001
    (res,) = gradcalc.check(KINKED_IF, at={"x": x}).results
    assert res.max_abs_err == pytest.approx(abs(central(f, x) - 2 * x), rel=1e-6)


@pytest.mark.parametrize("x", [3.0, 0.2, -5.0, 1.01])
def test_far_from_the_boundary_there_is_no_flag(x):
    r = gradcalc.check(KINKED_IF, at={"x": x})
    assert r.ok and notes_of(r) == []


def test_a_jump_makes_the_difference_large_and_the_flag_explains_it():
    def f(x):
        return x if x > 0 else x + 1

    x = 1e-7  # within a step (2^-17) of the jump at 0
    r = gradcalc.check("x if x > 0 else x + 1", at={"x": x})
    (res,) = r.results
    assert not r.ok
    fd = central(f, x)
    assert fd < -6e4  # the jump of 1 over a difference of 2h
    assert res.max_abs_err == pytest.approx(abs(fd - 1.0), rel=1e-9)
    assert res.notes == ["near a change of path: a finite-difference step flips the condition of a "
                         "conditional expression 'x > 0' (line 1, column 6); finite differences there "
                         "differ from the derivative of the path taken"]


def test_a_change_in_a_while_loops_iteration_count_is_flagged():
    def f(x):
        y = x
        while y < 10:
            y = y * x
        return y

    x = math.sqrt(10) * (1 + 1e-12)  # y = x^2 ends the loop; a step down runs it once more (x^3)
    r = gradcalc.check("y = x\nwhile y < 10 { y = y * x }\ny", at={"x": x})
    (res,) = r.results
    assert res.max_abs_err == pytest.approx(abs(central(f, x) - 2 * x), rel=1e-9)
    assert res.notes == ["near a change of path: a finite-difference step flips the while condition 'y < 10' "
                         "(line 2, column 7), so the loop runs a different number of times; finite "
                         "differences there differ from the derivative of the path taken"]


def test_a_range_bound_from_an_input_is_a_decision_too():
    # the loop runs floor(n) times: y = x^floor(n); d/dn is 0 on the path, and a step across
    # n = 3 changes the count
    r = gradcalc.check("y = 1\nfor i in range(floor(n)) { y = y * x }\ny", at={"n": 3.0000000001, "x": 2.0},
                       wrt=["n"])
    (res,) = r.results
    assert any("(line 2, column 16)" in n and "range" in n for n in res.notes), res.notes
    # x^3 against x^2 over a central step of n: (8 - 4) / 2h
    assert res.max_abs_err == pytest.approx(4 / (2 * central_step(3.0)), rel=1e-9)


def test_an_output_the_change_of_path_does_not_reach_is_not_flagged():
    src = "a = x^3\nif x > 1 { y = x^2 } else { y = 2*x - 1 }\ny"
    r = gradcalc.check(src, at={"x": 1.0000000001}, of=["a", "y"])
    by_of = {res.of: res.notes for res in r.results}
    assert by_of["a"] == []
    assert len(by_of["y"]) == 1 and "line 2, column 4" in by_of["y"][0]


def _program_as_written(a: float) -> float:
    """The test's own run of 'a = 2*x; if a > 2 { y = a^2 } else { y = 2*a - 1 }; y' from a on."""
    return a * a if a > 2 else 2 * a - 1


@pytest.mark.parametrize("src", ["a = 2*x\nif a > 2 { y = a^2 } else { y = 2*a - 1 }\ny",
                                 "a = 2*x\ny = 2*a - 1\nwhile a > 2 and y < 4 { y = a^2 }\ny"])
def test_an_intermediate_value_is_re_run_on_the_new_path_as_an_input_is(src):
    # SPEC §5: the finite differences are those of the program as written, re-run on the new
    # path; --wrt a kept the tape's path (ok, max_abs_err 0) while --wrt x, at the same change
    # of path, failed: now a step of a re-runs the program from a's assignment, as one of x does
    x = 1.0000000001
    r = gradcalc.check(src, at={"x": x}, wrt=["a", "x"])
    da, dx = r.results
    a = 2 * x
    s = da.step  # (the run's own step: a power of two near eps^(1/3) a)
    assert not da.ok and not dx.ok
    assert da.extra["fd"] == pytest.approx((_program_as_written(a + s) - _program_as_written(a - s)) / (2 * s),
                                           rel=1e-6)
    assert dx.extra["fd"] == pytest.approx(2 * da.extra["fd"], rel=1e-3)  # (x's step moves a by twice as much)
    for res in (da, dx):
        assert any("near a change of path" in n and "line " in n for n in res.notes), res.notes


def test_an_intermediate_value_away_from_a_change_of_path_passes():
    r = gradcalc.check("a = 2*x\nif a > 2 { y = a^2 } else { y = 2*a - 1 }\ny", at={"x": 1.5}, wrt=["a"])
    assert r.ok and r.results[0].notes == []


# ==========================================================================
# One mechanism for every engine
# ==========================================================================


@pytest.mark.parametrize("method", ["central", "richardson"])
def test_each_real_method_sees_the_change_of_path(method):
    r = gradcalc.check("x if x > 0 else x + 1", at={"x": 1e-7}, method=method)
    assert not r.ok and any("line 1, column 6" in n for n in notes_of(r))


def test_the_one_sided_difference_up_does_not_cross_a_boundary_below():
    r = gradcalc.check(KINKED_IF, at={"x": 1.0000000001}, method="forward")
    assert r.ok and notes_of(r) == []


def test_directions_see_the_change_of_path():
    r = gradcalc.check("x if x > 0 else x + 1", at={"x": 1e-7}, directions=2)
    assert not r.ok
    assert all(any("line 1, column 6" in n for n in res.notes) for res in r.results)


def test_the_taylor_test_names_the_change_of_path_that_breaks_it():
    # Taylor steps (1e-2 down to 3e-4 along a random direction) leave |x| < 1e-3 either way
    r = gradcalc.check("if abs(x) < 1e-3 { y = x } else { y = x + 1 }\ny", at={"x": 0.0}, taylor=True)
    (res,) = r.results
    assert res.extra["taylor_order"] < 1.8
    assert "near a change of path: a Taylor step flips the if condition 'abs(x) < 1e-3' (line 1, column 4); " \
           "finite differences there differ from the derivative of the path taken" in res.notes, res.notes


def test_rows_on_the_same_new_path_share_one_run(monkeypatch):
    # sum(x) = 1 - 1e-10: each of the 20 steps up crosses 1, onto one and the same path
    n = 20
    x = np.full(n, (1 - 1e-10) / n)
    runs = []
    real = numerics.trace

    def counting(*args, **kwargs):
        runs.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(numerics, "trace", counting)
    src = "if sum(x) > 1 { y = sum(x^2) } else { y = 5*sum(x) }\ny"
    r = gradcalc.check(src, at={"x": x})
    assert len(runs) == 2  # the point itself, and one run for the 20 rows on the other path
    (res,) = r.results

    def f(v):
        return np.sum(v ** 2) if np.sum(v) > 1 else 5 * np.sum(v)

    h = central_step(x[0])
    up, down = x.copy(), x.copy()
    up[0] += h
    down[0] -= h
    fd = (f(up) - f(down)) / (up[0] - down[0])  # every element's difference is this one's
    assert res.max_abs_err == pytest.approx(abs(fd - 5), rel=1e-9)


def test_a_row_where_the_program_fails_is_nan():
    # below 1 the program reads a name never assigned there: that row has no value
    r = gradcalc.check("if x > 1 { y = x^2 }\ny", at={"x": 1.0000000001})
    (res,) = r.results
    assert not res.ok and res.max_abs_err == math.inf
    assert len(res.notes) == 2 and "(line 1, column 4)" in res.notes[0]
    assert res.notes[1] == "finite differences are not finite here (nan or inf near the point)"


# ==========================================================================
# check --points: each point runs its own path
# ==========================================================================


def test_points_each_run_their_own_path():
    src = "input x = 0.7\nif x > 0 { y = x^2 } else { y = -x^3 }\ny"
    r = gradcalc.check(src, points=12, seed=4)
    assert r.ok and sorted({res.point for res in r.results}) == list(range(13))
    assert notes_of(r) == []


def test_points_on_the_cli():
    out = runner.invoke(app, ["check", "input x = 0.7\nif x > 0 { y = x^2 } else { y = 5*x }\ny",
                              "--points", "6", "-f", "json"])
    assert out.exit_code == 0, out.stdout
    assert [res["point"] for res in json.loads(out.stdout)["results"]] == list(range(7))


# ==========================================================================
# Kinks: only those the output follows
# ==========================================================================


def test_a_kink_that_only_decides_a_condition_is_not_flagged():
    # Newton's square root stops on abs(d) > 1e-9: the last update d (about 1e-12) lies within
    # a step of abs's kink, which decides the loop and is not on the path of y
    src = "y = a\nd = 1.0\nwhile abs(d) > 1e-9 { y_new = 0.5 * (y + a / y); d = y_new - y; y = y_new }\ny"
    r = gradcalc.check(src, at={"a": 2.0})
    assert r.ok and notes_of(r) == []
    (res,) = gradcalc.grad(src, at={"a": 2.0}).values()
    assert res == pytest.approx(1 / (2 * math.sqrt(2)), rel=1e-12)


def test_a_kink_that_only_decides_a_mask_is_not_flagged():
    r = gradcalc.check("where(abs(x) > 1, x, 0)", at={"x": 1e-9})
    assert r.ok and notes_of(r) == []


def test_a_jump_the_output_follows_is_still_flagged():
    # (and compared again at steps relative to |x|, which stay clear of it: the slope there is 1)
    r = gradcalc.check("where(x > 0, x, x + 1)", at={"x": 1e-9})
    assert r.ok and notes_of(r)[0] == "near the kink of '>' (line 1, column 9)"
    r = gradcalc.check("abs(x) + 1", at={"x": 1e-9})
    assert r.ok and notes_of(r)[0] == "near the kink of 'abs' (line 1, column 1)"
    r = gradcalc.check("where(x > 0, x, x + 1)", at={"x": 0.0})
    assert not r.ok and notes_of(r) == ["near the kink of '>' (line 1, column 9)"]


# ==========================================================================
# --symbolic: the closed form of the path taken, and it says so
# ==========================================================================


def test_the_closed_form_of_a_branching_program_says_it_is_the_path_taken():
    pytest.importorskip("sympy")
    r = gradcalc.grad("if x > 0 { y = x^3 } else { y = -x }\ny", at={"x": 2.0}, symbolic=True)
    entry = r.symbolic["x"]
    assert entry["text"] == "3*x**2"
    assert entry["note"] == ("the closed form of the path taken (this program branches or loops; another "
                             "point may take another path)")


def test_the_closed_form_of_a_straight_program_has_no_path_note():
    pytest.importorskip("sympy")
    r = gradcalc.grad("y = x^3\ny", at={"x": 2.0}, symbolic=True)
    assert r.symbolic["x"]["note"] is None


def test_a_step_onto_a_loop_that_never_ends_costs_a_bounded_run():
    # at a <= 1 the second loop never ends; the run a step down stops at the re-run's cap
    # (numerics.RERUN_MIN_STEPS here), not at max_steps' 10^7, and that row has no value
    src = "y = 0\nwhile a > 1 and y < 5 { y = y + a }\nwhile a <= 1 { y = y + 0 }\ny"
    r = gradcalc.check(src, at={"a": 1.0000000001})
    (res,) = r.results
    assert not r.ok and res.max_abs_err == math.inf
    assert "(line 2, column 7), so the loop runs a different number of times" in res.notes[0]


# ==========================================================================
# A factorisation's sign convention (qr, svd): LAPACK's choice jumps at triangular matrices
# ==========================================================================

SIGN_NOTE = ("near a change of sign convention: '{op}' (line 1, column {col}) chooses its factors' signs "
             "otherwise within a finite-difference step (LAPACK's convention jumps there), so finite "
             "differences compare two branches; the derivative is that of the branch returned")
FACTORS = [("Q, R = qr(A); sum(Q)", "qr", 8), ("Q, R = qr(A); sum(R)", "qr", 8),
           ("U, s, Vt = svd(A); sum(U)", "svd", 12), ("U, s, Vt = svd(A); sum(Vt)", "svd", 12)]
TRIANGULAR = np.array([[3.0, 1.0], [0.0, 1.0]])


def test_numpys_qr_signs_jump_at_the_identity():
    # the premise, from NumPy alone: R[0,0] is 1 at eye(2), -1 a step below the diagonal
    h = central_step(1.0)
    assert np.linalg.qr(np.eye(2))[1][0, 0] == 1.0
    assert np.linalg.qr(np.array([[1.0, 0.0], [h, 1.0]]))[1][0, 0] < 0
    assert np.linalg.qr(np.array([[1.0, 0.0], [-h, 1.0]]))[1][0, 0] < 0


def test_qr_at_the_identity_is_flagged_with_line_and_column():
    r = gradcalc.check("Q, R = qr(A); sum(R)", at={"A": np.eye(2)})
    (res,) = r.results
    # d sum(R)/d A[1,0] of the branch returned is 1 (R = Q^T A, Q = I); the steps land on R[0,0] < 0
    h = central_step(1.0)
    steps = [np.linalg.qr(np.array([[1.0, 0.0], [d, 1.0]]))[1].sum() for d in (h, -h)]
    assert not r.ok and list(res.worst_index) == [1, 0]
    assert res.extra["ad"] == pytest.approx(1.0) and res.extra["fd"] == pytest.approx((steps[0] - steps[1]) / (2 * h))
    assert res.notes == [SIGN_NOTE.format(op="qr", col=8)]


@pytest.mark.parametrize("src, op, col", FACTORS)
@pytest.mark.parametrize("A", [np.eye(2), TRIANGULAR, np.stack([np.array([[2.0, 1.0], [1.0, 3.0]]), TRIANGULAR])],
                         ids=["eye", "triangular", "stack"])
def test_a_factor_at_a_triangular_matrix_is_flagged(src, op, col, A):
    r = gradcalc.check(src, at={"A": A})
    assert not r.ok and SIGN_NOTE.format(op=op, col=col) in notes_of(r)


@pytest.mark.parametrize("src, op, col", FACTORS + [("U, s, Vt = svd(A); sum(s)", "svd", 12)])
@pytest.mark.parametrize("shape", [(2, 2), (3, 2), (4, 3), (2, 3, 3)])
def test_a_factor_at_a_general_matrix_is_not_flagged(src, op, col, shape):
    A = np.random.default_rng(sum(shape)).normal(size=shape)
    r = gradcalc.check(src, at={"A": A})
    assert r.ok and notes_of(r) == []


def test_singular_values_carry_no_sign_and_are_not_flagged():
    r = gradcalc.check("U, s, Vt = svd(A); sum(s)", at={"A": TRIANGULAR})
    assert r.ok and notes_of(r) == []


def test_an_output_the_factorisation_does_not_reach_is_not_flagged():
    r = gradcalc.check("Q, R = qr(A); a = sum(R); b = sum(A^2)", at={"A": np.eye(2)}, of=["a", "b"])
    by_of = {res.of: res.notes for res in r.results}
    assert by_of["a"] == [SIGN_NOTE.format(op="qr", col=8)] and by_of["b"] == []


def test_directions_see_the_sign_change_too():
    r = gradcalc.check("Q, R = qr(A); sum(R)", at={"A": TRIANGULAR}, directions=3)
    assert any(SIGN_NOTE.format(op="qr", col=8) in res.notes for res in r.results)
