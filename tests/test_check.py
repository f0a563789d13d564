"""`check`: finite differences catch wrong rules, pass right ones, and report through every channel."""
from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from typer.testing import CliRunner

import gradcalc
from gradcalc.cli.app import app
from gradcalc.checks import breach_text
from gradcalc.numerics import METHODS, default_step, fd_jacobian
from gradcalc.lower import trace
from gradcalc.primitives import REGISTRY, safe_mul
from rules import replace_rule

runner = CliRunner()
SMOOTH = "sin(x)*exp(y) + x^2*y"
POINT = {"x": 0.7, "y": -0.3}


@pytest.mark.parametrize("method", METHODS)
def test_each_method_passes_a_correct_program(method):
    r = gradcalc.check(SMOOTH, at=POINT, method=method)
    assert r.ok and len(r.results) == 2
    assert all(x.method == method for x in r.results)


@pytest.mark.parametrize("method", METHODS)
def test_each_method_catches_a_wrong_rule(method, monkeypatch):
    # sin's derivative made cos(x) * 1.01: a 1% error
    wrong = (lambda g, ans, x, **_: safe_mul(g, 1.01 * REGISTRY["cos"](x)),)
    replace_rule(monkeypatch, REGISTRY["sin"], "vjp", wrong)
    r = gradcalc.check("sin(x)*y", at={"x": 0.4, "y": 2.0}, method=method)
    assert not r.ok
    bad = [x for x in r.results if not x.ok]
    assert [x.wrt for x in bad] == ["x"]
    # the reported error is the injected one: 0.01 * cos(0.4) * 2
    assert bad[0].max_abs_err == pytest.approx(0.02 * math.cos(0.4), rel=1e-3)


def test_reverse_against_forward_catches_a_wrong_jvp_rule(monkeypatch):
    replace_rule(monkeypatch, REGISTRY["sin"], "jvp", (lambda t, ans, x, **_: t * 0.5,))
    r = gradcalc.check("sin(x)", at={"x": 0.3})
    assert not r.ok
    assert "reverse and forward mode disagree" in r.results[0].notes


def test_complex_step_agrees_to_1e13_on_analytic_samples():
    for src in ["samples/rosenbrock.grad", "samples/softmax_cross_entropy.grad", "samples/mlp.grad",
                "samples/det_inverse.grad", "samples/least_squares.grad"]:
        with open(src) as f:
            r = gradcalc.check(f.read(), method="complex")
        assert r.ok, src
        for x in r.results:
            assert x.max_rel_err < 1e-13 or x.max_abs_err < 1e-13, (src, x)


def test_complex_step_names_a_non_analytic_primitive():
    with pytest.raises(gradcalc.GradcalcError) as e:
        gradcalc.check("x + abs(x)", at={"x": 0.5}, method="complex")
    assert e.value.message == "--method complex needs analytic operations, but 'abs' at line 1, column 5 is not"


@pytest.mark.parametrize("directions", [0, 1])
@pytest.mark.parametrize("method", METHODS)
def test_every_method_differences_values_through_stop_gradient(method, directions):
    # stop_gradient hides x^2 from the derivative, not from the values: every finite
    # difference of x + x^2 at 1.5 is 1 + 2 x = 4, so the automatic 1 fails with each method
    # (the complex step passed it: stop_gradient dropped the imaginary part of its value)
    r = gradcalc.check("x + stop_gradient(x^2)", at={"x": 1.5}, method=method, directions=directions)
    assert not r.ok
    if not directions:
        assert r.results[0].extra["fd"] == pytest.approx(4.0, rel=1e-5)
    # where stop_gradient's argument does not move with x, the derivative is right: y^2
    assert gradcalc.check("x * stop_gradient(y^2)", at={"x": 1.5, "y": 0.5}, method=method,
                          wrt=["x"], directions=directions).ok


STOPPED = "'stop_gradient' (line {}, column {}) stops the derivative of a value computed from {}: finite " \
          "differences see that value change, the derivative does not"


@pytest.mark.parametrize("directions", [0, 2])
@pytest.mark.parametrize("method", ["central", "complex"])
def test_a_failure_across_stop_gradient_names_it(method, directions):
    # the failing comparisons say which of the program's stop_gradient calls lie between the
    # input and the output, where; logsumexp's own (its shift by the maximum) is not named,
    # nor one whose argument does not come from the input compared (y's, for x)
    src = "y2 = y * stop_gradient(y * 2)\nsum(x * x) + logsumexp(x * x) + y2 + sum(stop_gradient(x^2))"
    r = gradcalc.check(src, at={"x": np.array([0.5, -1.0]), "y": 0.75}, method=method, directions=directions,
                       seed=3)
    by = {c.wrt: c for c in r.results}
    assert not by["x"].ok and not by["y"].ok
    assert [n for n in by["x"].notes if "stop_gradient" in n] == [STOPPED.format(2, 42, "x")]
    assert [n for n in by["y"].notes if "stop_gradient" in n] == [STOPPED.format(1, 10, "y")]
    # a passing comparison has no such note; an output that does not use the stopped value neither
    r = gradcalc.check("a = stop_gradient(x) * 0\nb = x^3\nb", at={"x": 0.5}, method=method, directions=directions)
    assert r.ok and not any("stop_gradient" in n for c in r.results for n in c.notes)


def test_complex_step_refuses_a_non_analytic_primitive_after_stop_gradient():
    # its complex value flows on: abs of it would drop the step, so abs must be refused
    with pytest.raises(gradcalc.GradcalcError) as e:
        gradcalc.check("abs(stop_gradient(x))", at={"x": 0.5}, method="complex")
    assert "'abs' at line 1, column 1 is not" in e.value.message


def test_richardson_beats_central_on_a_smooth_function():
    src = "exp(sin(3*x))"
    x0 = 0.37
    exact = math.exp(math.sin(3 * x0)) * math.cos(3 * x0) * 3
    tr = trace(gradcalc.parse(src), {"x": np.array(x0)})
    central, _ = fd_jacobian(tr, ["_"], "x", "central")
    rich, _ = fd_jacobian(tr, ["_"], "x", "richardson")
    err_c = abs(float(central["_"]) - exact)
    err_r = abs(float(rich["_"]) - exact)
    assert err_r < err_c / 10, (err_r, err_c)


def test_default_steps_are_powers_of_two_scaled_by_the_value():
    h = default_step(np.array([0.1, 1.0, 1000.0]), "central")
    assert np.all(np.log2(h) == np.round(np.log2(h)))
    assert h[0] == h[1] == 2.0 ** round(math.log2(np.finfo(float).eps ** (1 / 3)))
    assert h[2] / h[1] == pytest.approx(1024, rel=0.5)


def test_kink_is_flagged():
    r = gradcalc.check("abs(x)", at={"x": 0.0})
    assert r.results[0].notes == ["near the kink of 'abs' (line 1, column 1)"]
    r = gradcalc.check("abs(x)", at={"x": 1.0})
    assert r.results[0].notes == []


def test_directions_on_a_large_input():
    r = gradcalc.check("input x[400]; y = tanh(x)*x[0]", points=1, directions=4)
    assert r.ok and [x.point for x in r.results] == [1]
    assert r.results[0].extra["dot_product_abs_err"] < 1e-12


@pytest.mark.parametrize("method", ["central", "complex"])
def test_directions_on_an_empty_input(method):
    # No direction to take: nothing can be wrong (as the full check of an empty Jacobian),
    # where it used to be an internal error (the step of an empty input had no maximum).
    r = gradcalc.check("input x[0]\ny = sum(x)", points=1, directions=2, method=method)
    assert r.ok and [(x.point, x.max_abs_err, x.worst_index) for x in r.results] == [(1, 0.0, [])]
    # (every result carries the tolerances it was held to: the method's defaults here)
    assert r.results[0].extra == {"dot_product_abs_err": 0.0, "rtol": r.rtol, "atol": r.atol}


@pytest.mark.parametrize("method", ["central", "complex"])
def test_directions_on_an_empty_output(method):
    # Nothing to compare (as the full check of an empty Jacobian), where it used to be an
    # internal error (the rounding allowance of an empty output had no maximum: fuzz hunt).
    r = gradcalc.check("ones(0) * x", at={"x": 1.0}, directions=1, method=method)
    assert r.ok and [(x.max_abs_err, x.worst_index) for x in r.results] == [(0.0, [])]


def test_taylor_order_is_two():
    r = gradcalc.check(SMOOTH, at=POINT, taylor=True)
    for x in r.results:
        assert x.extra["taylor_order"] == pytest.approx(2.0, abs=0.1)


def test_plain_lines_carry_the_taylor_order():
    # a correct first derivative leaves a remainder of order h^2
    r = CliRunner().invoke(app, ["check", "sin(x)", "--at", "x=1", "--taylor", "-f", "plain"])
    first = r.stdout.splitlines()[0]
    assert r.exit_code == 0 and float(first.split("taylor_order=")[1].split()[0]) == pytest.approx(2, abs=0.1)
    plain = CliRunner().invoke(app, ["check", "sin(x)", "--at", "x=1", "-f", "plain"]).stdout
    assert "taylor_order" not in plain  # (only when asked for)


def test_non_finite_derivative_fails():
    r = gradcalc.check("sqrt(x)", at={"x": 0.0})
    assert not r.ok


def test_points_are_reproducible_with_a_seed():
    a = gradcalc.check("input v[3]; sum(sin(v))", points=2, seed=5)
    b = gradcalc.check("input v[3]; sum(sin(v))", points=2, seed=5)
    assert [x.max_abs_err for x in a.results] == [x.max_abs_err for x in b.results]
    assert [x.point for x in a.results] == [1, 2]


# -- CLI ---------------------------------------------------------------------

def test_cli_samples_pass_with_junit(tmp_path):
    xml = tmp_path / "r.xml"
    res = runner.invoke(app, ["check", "samples/", "--junit-xml", str(xml), "-f", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["schema"] == 1 and doc["ok"] is True
    suite = ET.parse(xml).getroot()
    cases = suite.findall("testcase")
    assert len(cases) == len(doc["results"]) and suite.get("failures") == "0"
    assert not suite.findall(".//failure")


def test_cli_complex_step_json():
    res = runner.invoke(app, ["check", "sin(x)*exp(y)", "--at", "x=0.7,y=-0.3", "--method",
                              "complex", "-f", "json"])
    assert res.exit_code == 0
    doc = json.loads(res.stdout)
    assert all(r["max_rel_err"] < 1e-12 for r in doc["results"])
    assert {r["wrt"] for r in doc["results"]} == {"x", "y"}
    assert set(doc["results"][0]) >= {"source", "point", "of", "wrt", "max_abs_err", "max_rel_err",
                                      "worst_index", "method", "step", "ok"}


def test_cli_failure_exits_1_and_junit_carries_the_numbers(tmp_path, monkeypatch):
    replace_rule(monkeypatch, REGISTRY["sin"], "vjp", (lambda g, ans, x, **_: g * ans,))
    xml = tmp_path / "r.xml"
    res = runner.invoke(app, ["check", "sin(x)", "--at", "x=1", "--junit-xml", str(xml)])
    assert res.exit_code == 1
    failure = ET.parse(xml).getroot().find("testcase/failure")
    assert failure is not None and "max_abs_err=" in failure.text


def test_cli_expect_names_the_altered_entry(tmp_path):
    res = runner.invoke(app, ["grad", "samples/mlp.grad", "-f", "json"])
    stored = json.loads(res.stdout)
    stored["gradient"]["W1"][1][2] *= 1.001  # one entry off by 0.1%
    path = tmp_path / "expect.json"
    path.write_text(json.dumps(stored))
    res = runner.invoke(app, ["check", "samples/mlp.grad", "--expect", str(path), "-f", "json"])
    assert res.exit_code == 1
    failed = [r for r in json.loads(res.stdout)["results"] if not r["ok"]]
    assert len(failed) == 1 and failed[0]["wrt"] == "W1" and failed[0]["method"] == "expect"
    assert failed[0]["worst_index"] == [1, 2]
    assert failed[0]["notes"][0].startswith("entry gradient['W1'][1][2]: stored ")


def test_cli_expect_unaltered_passes(tmp_path):
    res = runner.invoke(app, ["jacobian", "samples/least_squares.grad", "-f", "json"])
    path = tmp_path / "expect.json"
    path.write_text(res.stdout)
    res = runner.invoke(app, ["check", "samples/least_squares.grad", "--expect", str(path)])
    assert res.exit_code == 0, res.output


def test_cli_user_errors_exit_2():
    assert runner.invoke(app, ["check", "x+", "--at", "x=1"]).exit_code == 2
    assert runner.invoke(app, ["check", "x", "--points", "-1"]).exit_code == 2
    assert runner.invoke(app, ["check", "abs(x)", "--at", "x=1", "--method", "complex"]).exit_code == 2


@pytest.mark.parametrize("rtol,atol", [(1e-6, 1e-8), (1e-6, 0.0), (0.0, 0.0), (0.5, 0.0)])
def test_compare_fast_path_agrees_with_the_general_one(rtol, atol):
    # Finite differences take the five-pass path; the general one handles inf and nan.
    # On finite input they must agree element for element.
    from gradcalc.checks import _errors_finite, _errors_general
    rng = np.random.default_rng(7)
    values = np.array([0.0, -0.0, 1.0, -1.0, 1e-9, 2.5, -3e-7, 1e300])
    for _ in range(200):
        k = int(rng.integers(1, 8))
        ad = rng.choice(values, k) * rng.choice([1.0, 1.0000001, 0.9, -1.0], k)
        ref = rng.choice(values, k)
        diff = np.abs(ad - ref)
        with np.errstate(all="ignore"):  # as compare() runs them: 0/0 and overflow are expected
            b1, r1 = _errors_finite(ad, ref, diff.copy(), rtol, atol)
            b2, r2 = _errors_general(ad, ref, diff.copy(), rtol, atol)
        np.testing.assert_array_equal(b1, b2)
        np.testing.assert_array_equal(r1, r2)


def test_directional_check_fails_a_non_finite_derivative():
    # As the full check does ("check counts a non-finite derivative as a failure"); nan against
    # nan used to agree along every direction.
    r = gradcalc.check("sum(x*[nan, 1])", at={"x": [1.0, 1.0]}, directions=3)
    assert not r.ok and "non-finite derivative" in r.results[0].notes
    assert gradcalc.check("sum(x*[2, 1])", at={"x": [1.0, 1.0]}, directions=3).ok


@pytest.mark.parametrize("scale", [1.0, 1e160, 1e200, 1e300])
def test_taylor_order_of_a_correct_gradient_at_large_values(scale):
    # The remainder was a Euclidean norm, whose squares overflow past 1e154: order nan, a failure.
    r = gradcalc.check(f"x^2*{scale!r}", at={"x": 1.5}, taylor=True)
    assert r.ok and abs(r.results[0].extra["taylor_order"] - 2.0) < 0.01


BIG_INT = "1" + "0" * 400  # no float holds it


@pytest.mark.parametrize("stored, message", [
    ('{"gradient": {"x": "abc"}}', "--expect: the stored gradient of 'x' is not a number or a nested list of numbers"),
    ('{"gradient": {"x": [1, [2]]}}', "--expect: the stored gradient of 'x' is not a number or a nested list of numbers"),
    ('{"gradient": {"x": {"a": 1}}}', "--expect: the stored gradient of 'x' is not a number or a nested list of numbers"),
    ('{"gradient": {"x": true}}', "--expect: the stored gradient of 'x' is not a number or a nested list of numbers"),
    ('{"gradient": {"x": %s}}' % BIG_INT, "--expect: the stored gradient of 'x' is not a number or a nested list of numbers"),
    ('{"gradient": [1]}', "--expect: 'gradient' must map names to values, as gradcalc grad -f json writes it"),
    ('{"jacobian": {"_": [1]}}', "--expect: 'jacobian' must map names to values, as gradcalc jacobian -f json writes it"),
])
def test_cli_expect_refuses_malformed_files(tmp_path, stored, message):
    # These were internal errors (exit 3), or ignored: {"gradient": [1]} passed as if checked.
    path = tmp_path / "expect.json"
    path.write_text(stored)
    res = runner.invoke(app, ["check", "x*x", "--at", "x=1", "--expect", str(path)])
    assert res.exit_code == 2, (res.exit_code, res.output)
    # (the message names the file: a sibling NAME.expect.json is compared without any --expect)
    assert res.stderr.splitlines()[0] == "error: " + message.replace("--expect", f"expectation file '{path}'")


def test_integers_beyond_float_range_are_user_errors(tmp_path):
    path = tmp_path / "big.json"
    path.write_text(BIG_INT)
    res = runner.invoke(app, ["vjp", "x*2", "--at", "x=1", "--cotangent", f"@{path}"])
    assert res.exit_code == 2 and "holds an integer too large for a float" in res.stderr
    res = runner.invoke(app, ["eval", f"zeros({BIG_INT})"])
    assert res.exit_code == 2
    assert res.stderr.splitlines()[0] == ("error: <expr>:1:1: zeros(): array of shape (1e+400,) has 1e+400 elements, "
                                          "more than --max-elements=100000000")


def test_a_mismatch_within_the_rounding_of_finite_differences_is_explained(monkeypatch):
    # sum(x^3) + 1e17: each difference of f is a multiple of 16 (the spacing of floats near 1e17)
    # over a step of about 1e-5, so the difference quotients are off by ~1e6, and at larger steps
    # the truncation error h^2 of x^3 grows before rounding falls below the tolerance: no step
    # decides, and the check fails with a note that says why, while the gradient 3 x^2 is exact
    r = gradcalc.check("sum(x^3) + 1e17", at={"x": [1.5, 2.0]})
    assert not r.ok and r.results[0].notes[-1].startswith("finite differences are at their rounding limit")
    assert "at larger steps they do not converge" in r.results[0].notes[-1]
    assert gradcalc.check("sum(x^3) + 1e17", at={"x": [1.5, 2.0]}, method="complex").ok
    # a wrong rule is not explained away
    import gradcalc.primitives as P
    replace_rule(monkeypatch, P.sin, "vjp", (lambda g, ans, x, **_: P.safe_mul(g, P.cos(x) * 1.01),))
    r = gradcalc.check("sum(sin(x))", at={"x": [1.5, 2.0]})
    assert not r.ok and not any("rounding limit" in n for x in r.results for n in x.notes)


def test_a_program_with_nothing_to_check_passes_with_a_warning(tmp_path):
    # check '3' passed in silence, with no results: a CI job should hear that nothing was compared
    p = tmp_path / "noinputs.grad"
    p.write_text("y = 2\n")
    res = runner.invoke(app, ["check", str(p), "samples/rosenbrock.grad", "-f", "plain"])
    assert res.exit_code == 0
    assert res.stderr == f"warning: {p}: nothing to check: the program has no inputs\n"
    assert res.stdout.count("ok samples/rosenbrock.grad") == 2


def test_sweep_is_refused_with_directions():
    # attach follows the full Jacobian's worst element: with directions it would be silently absent
    with pytest.raises(gradcalc.GradcalcError, match="sweep follows one input element"):
        gradcalc.check("sin(x)", at={"x": 1.0}, directions=2, sweep=True)


def test_results_say_what_they_compared_and_where_their_output_is(tmp_path):
    p = tmp_path / "f.grad"
    p.write_text("# two lines of comment\n\ny = sin(x)\nz = y * x\n")
    doc = json.loads(runner.invoke(app, ["check", str(p), "--at", "x=0.3", "--of", "y", "--of", "z",
                                         "-f", "json"]).stdout)
    assert [(r["of"], r["comparison"], r["line"]) for r in doc["results"]] == [("y", "jacobian", 3),
                                                                                ("z", "jacobian", 4)]
    doc = json.loads(runner.invoke(app, ["check", str(p), "--at", "x=0.3", "--directions", "2",
                                         "-f", "json"]).stdout)
    assert [r["comparison"] for r in doc["results"]] == ["directions"]
    assert doc["results"][0]["rounding_allowance"] > 0


def test_directions_failure_carries_ad_and_fd(monkeypatch):
    # sin's derivative 1% wrong in both modes: only the directional difference sees it
    wrong = (lambda g, ans, x, **_: safe_mul(g, 1.01 * REGISTRY["cos"](x)),)
    replace_rule(monkeypatch, REGISTRY["sin"], "vjp", wrong)
    replace_rule(monkeypatch, REGISTRY["sin"], "jvp", wrong)
    (r,) = gradcalc.check("sum(sin(x))", at={"x": [0.1, 0.2, 0.3]}, directions=3).results
    assert not r.ok and r.comparison == "directions" and "<u, J v> != <J^T u, v>" not in r.notes
    assert r.extra["ad"] == pytest.approx(1.01 * r.extra["fd"], rel=1e-6) and r.extra["bound"] == "rtol"


def test_directions_form_no_jacobian():
    # a 20000 x 20000 Jacobian (4e8 elements) is over this element limit: only J v and J^T u are formed
    r = gradcalc.check("input x[20000]; y = sin(x) * x", points=1, directions=2, max_elements=10 ** 6)
    assert r.ok and [x.comparison for x in r.results] == ["directions"]


def test_an_input_with_no_elements_has_nothing_to_compare():
    # x = [[], []]: no element to perturb, so no perturbed point reaches sort's guard (the
    # batch of rows is empty); the check passes with an empty Jacobian and says so at exit 0
    r = gradcalc.check("sort(x)", at={"x": np.zeros((2, 0))})
    assert r.ok
    result = CliRunner().invoke(app, ["check", "sort(x)", "--at", "x=[[],[]]", "-f", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["ok"] is True


@pytest.mark.parametrize("src, at, worst", [
    ("sqrt(x)", {"x": -0.7}, []),                       # sqrt's slope and its differences: nan both
    ("y = x^0.5 * ones(2); y", {"x": -2.0}, [0]),
])
def test_a_nan_derivative_that_the_differences_share_still_records_its_breach(src, at, worst):
    # nan against nan compares equal, so the failure (a non-finite derivative, SPEC §5) recorded
    # max errors of 0 and no ad, fd or bound before: now its first non-finite element's
    (r,) = gradcalc.check(src, at=at).results
    assert not r.ok and "non-finite derivative" in r.notes and r.worst_index == worst
    assert np.isnan(r.extra["ad"]) and np.isnan(r.extra["fd"]) and r.extra["bound"] == "finite"
    assert breach_text(r) == ("at [0]: " if worst else "") + "ad nan, fd nan: not finite"


# -- the Taylor test on random programs -----------------------------------------

#: Smooth one-argument functions, in gradcalc's spelling and NumPy's (for the test's own
#: finite differences, which decide whether a wrong derivative is detectable at the point).
UNARY = [("sin({})", np.sin), ("cos({})", np.cos), ("tanh({})", np.tanh), ("atan({})", np.arctan),
         ("exp({}/2)", lambda a: np.exp(a / 2)), ("log1p({}^2)", lambda a: np.log1p(a * a)),
         ("({})^3", lambda a: a ** 3), ("sqrt(1 + ({})^2)", lambda a: np.sqrt(1 + a * a))]


def _leaf():
    from hypothesis import strategies as st
    return st.sampled_from([("x", lambda x, y: x), ("y", lambda x, y: y),
                            ("(x*y)", lambda x, y: x * y), ("0.7", lambda x, y: 0.7 + 0 * x)])


def _expression():
    from hypothesis import strategies as st

    def grow(inner):
        unary = st.tuples(st.sampled_from(UNARY), inner).map(
            lambda t: (t[0][0].format(t[1][0]), lambda x, y, f=t[0][1], g=t[1][1]: f(g(x, y))))
        binary = st.tuples(inner, st.sampled_from(["+", "*"]), inner).map(
            lambda t: (f"({t[0][0]} {t[1]} {t[2][0]})",
                       (lambda x, y, a=t[0][1], b=t[2][1]: a(x, y) + b(x, y)) if t[1] == "+" else
                       (lambda x, y, a=t[0][1], b=t[2][1]: a(x, y) * b(x, y))))
        return unary | binary
    return st.recursive(_leaf(), grow, max_leaves=5)


def _taylor_orders(src, at):
    r = gradcalc.check(src, at=at, taylor=True)
    return {x.wrt: x.extra["taylor_order"] for x in r.results}


def _coordinates():
    from hypothesis import strategies as st
    return st.floats(-2, 2, allow_nan=False).map(lambda a: float(np.round(a, 6)))


def test_taylor_passes_right_and_fails_wrong_derivatives_of_random_programs():
    # a right derivative leaves a remainder of order 2 (3 near an inflection point, where
    # the h^2 and h^3 terms cancelled over the old steps: sin at -1e-3 gave 1.76); one that
    # misses 1% of the slope (stop_gradient hides it) leaves order 1, at any output scale
    from hypothesis import HealthCheck, assume, given, settings

    @settings(derandomize=True, max_examples=150, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(_expression(), _coordinates(), _coordinates(), st_scale())
    def run(expr, x, y, scale):
        src, f = expr
        assume(re.search(r"\bx\b", src) and re.search(r"\by\b", src))
        with np.errstate(all="ignore"):
            value = scale * f(x, y)
            h = 1e-5  # the test's own central differences: is 1% of each slope detectable?
            slopes = [scale * (f(x + h, y) - f(x - h, y)) / (2 * h), scale * (f(x, y + h) - f(x, y - h)) / (2 * h)]
        assume(np.isfinite(value) and np.all(np.isfinite(slopes)))
        right = _taylor_orders(f"{scale!r} * {src}", {"x": x, "y": y})
        assert all(o >= 1.8 for o in right.values()), (src, x, y, right)
        assume(all(abs(s) > 1e-2 * abs(value) and abs(s) > 1e-6 * scale for s in slopes))
        wrong = _taylor_orders(f"{scale!r} * ({src} + stop_gradient(0.01 * {src}))", {"x": x, "y": y})
        assert all(o < 1.8 for o in wrong.values()), (src, x, y, wrong)
    run()


def st_scale():
    from hypothesis import strategies as st
    return st.sampled_from([1.0, 1e-12, 1e-200, 1e12])


@pytest.mark.parametrize("src, at", [("sin(x)", -1e-3), ("sin(x)", -3e-3), ("sin(x)", -1e-4), ("1/x", 1e-3),
                                     ("1e-12 * x^2", 1.5), ("sin(x)", 0.0)])
def test_taylor_order_of_right_derivatives_near_an_inflection_or_at_small_scale(src, at):
    # sin'' = -sin x vanishes at 0: near it the h^3 term of the remainder outweighs the h^2
    # term at the old steps (1e-2 to 3e-4), and their signs can cancel (order 1.76 at -1e-3)
    (r,) = gradcalc.check(src, at={"x": at}, taylor=True).results
    assert r.ok and r.extra["taylor_order"] >= 1.9, r.extra


@pytest.mark.parametrize("scale", [1.0, 1e-9, 1e-12, 1e-200])
def test_taylor_fails_a_wrong_derivative_at_any_output_scale(scale):
    # d/dx of x + x^2 is 4 at 1.5, the automatic 1: the remainder is 3 h (order 1) times scale;
    # the old floor of 1e-13 (absolute below |f| = 1) called it rounding at 1e-12
    (r,) = gradcalc.check(f"{scale!r} * (x + stop_gradient(x^2))", at={"x": 1.5}, taylor=True,
                          atol=0.0).results
    assert not r.ok and r.extra["taylor_order"] == pytest.approx(1.0, abs=0.1)


# -- --directions near 0: steps relative to |x|, as the full check ----------------

@pytest.mark.parametrize("src, at, slope", [
    ("1/x", 1e-3, lambda x: -1 / x ** 2),             # failed: 58 > 31 allowed
    ("sqrt(x)", 1e-7, lambda x: 0.5 / np.sqrt(x)),    # failed: the step 7.6e-6 reached x < 0, fd nan
    ("sum(log(x))", [1e-4, 0.5, 3.0], lambda x: 1 / x),
])
def test_directions_compare_again_at_steps_relative_to_x(src, at, slope):
    x = np.asarray(at, float)
    for directions in (1, 3):
        (r,) = gradcalc.check(src, at={"x": x}, directions=directions).results
        assert r.ok, r.notes
        assert any("compared at steps relative to |x| instead" in n for n in r.notes)
        assert r.max_rel_err < 1e-6 and r.extra["default_step"] == float(np.max(default_step(x, "central")))
    # a slope 1% off still fails there: the comparison again disagrees too
    (r,) = gradcalc.check(f"{src} + stop_gradient(0.01 * {src})", at={"x": x}, directions=2).results
    assert not r.ok and any("at steps relative to |x| they disagree too" in n for n in r.notes)
    # (the full check, for reference: its own retry, and d/dx from the closed form)
    (full,) = gradcalc.check(src, at={"x": x}).results
    assert full.ok
    np.testing.assert_allclose(gradcalc.grad(src, at={"x": x})["x"], slope(x), rtol=1e-12)


def test_directions_pass_newton_sqrt_where_the_step_is_coarse():
    with open("samples/newton_sqrt.grad") as f:
        r = gradcalc.check(f.read(), points=2, seed=7, directions=2)
    assert r.ok, [x.notes for x in r.results]


def test_a_kink_within_the_default_step_is_named_and_compared_again_clear_of_it():
    # abs at 1e-9: the default step crosses the kink; steps relative to |x| do not, and there
    # the slope is abs's, 1 (a right gradient failed before); at 0 no step is clear of it
    for directions in (0, 1):
        (r,) = gradcalc.check("abs(x)", at={"x": 1e-9}, directions=directions).results
        assert r.ok and r.notes[0] == "near the kink of 'abs' (line 1, column 1)"
        assert "compared at steps relative to |x| instead" in r.notes[1]
        (r,) = gradcalc.check("abs(x) + stop_gradient(1e-3 * abs(x))", at={"x": 1e-9}, directions=directions).results
        assert not r.ok and r.notes[0] == "near the kink of 'abs' (line 1, column 1)"


def test_a_failure_near_0_names_the_element_that_still_disagrees_at_relative_steps():
    # x[1]'s slope misses 3e-5 of 2 x[1] (stop_gradient); x[0] = 1e-3 only needs a finer step.
    # The note blamed x[0] alone ("near 0, like 1/x"); it now says where the mismatch stays
    (r,) = gradcalc.check("1/x[0] + x[1]^2 + stop_gradient(3e-5*x[1]^2)", at={"x": [1e-3, 5.0]}).results
    assert not r.ok
    assert any("at steps relative to |x| they disagree too (rel err 3e-05, worst at [1])" in n for n in r.notes)


@pytest.mark.parametrize(("src", "x", "op"), [("ceil(x)", 0.9995, "ceil"), ("mod(x, 0.5) + x", 0.4999, "mod")])
def test_a_taylor_failure_names_a_jump_within_its_steps_reach(src, x, op):
    # The Taylor steps start at 1e-2 max(1, |x|), far past the finite differences' step: a jump
    # a thousandth away leaves a remainder that does not shrink (order 0).  The failure stands,
    # as a finite difference's beside a kink does, and says what explains it (it said nothing)
    (r,) = gradcalc.check(src, at={"x": x}, taylor=True).results
    assert not r.ok and r.extra["taylor_order"] < 1
    reach = [n for n in r.notes if "within the Taylor steps' reach" in n]
    assert len(reach) == 1 and reach[0].startswith(f"near the kink of '{op}' (line 1, column 1)")
    (far,) = gradcalc.check(src, at={"x": x - 0.25}, taylor=True).results  # (no jump within reach)
    assert far.ok and not any("reach" in n for n in far.notes)


def test_taylor_order_of_a_linear_function_whose_larger_steps_leave_its_domain():
    # sqrt(x)^2 = x for x >= 0; at 1e-3 along -1 the steps from 1e-2 down to 1e-3 give nan
    # (sqrt of x < 0), the smaller ones a remainder at rounding level: linear, not nan
    from gradcalc.numerics import taylor_order

    class Backwards:  # (an rng whose direction is -1)
        def standard_normal(self, shape):
            return -np.ones(shape)

    def order(src):
        tr = trace(gradcalc.parse(src), {"x": 1e-3})
        return taylor_order(tr, tr.tape.output, "x", Backwards()).order

    assert order("sqrt(x)^2") == math.inf
    assert order("sqrt(x)*2") == pytest.approx(2.0, abs=0.01)  # 2 sqrt(x): curvature -x^(-3/2) / 2
    assert order("sqrt(x)^2 + stop_gradient(0.01*x)") == pytest.approx(1.0, abs=0.01)


@pytest.mark.parametrize("src, at", [
    ("input x, y\nsin(x) * y + exp(0.1 * x * y)", {"x": 0.3, "y": -1.2}),
    ("input x\ny = x\nfor i in range(50) { y = y + 0.01 * sin(y) * x }\ny", {"x": 0.7}),
    ("input x\ny = x\nwhile y < 3 { y = y * 1.5 + 0.01 }\ny", {"x": 1.0}),  # (a step changes the count)
    ("input x\nabs(x - 0.2) + x^2", {"x": 0.2}),  # (a kink within the steps: an order short of 2)
    ("input x\nsum(tanh(x * [1, 2, 3]))", {"x": -0.4}),
    ("input x\nsqrt(x)^2 + stop_gradient(0.01*x)", {"x": 1e-3}),  # (wrong: order 1; larger steps nan)
])
def test_taylor_steps_in_one_pass_give_the_orders_of_the_passes_by_chunks(src, at, monkeypatch):
    # where the widest value is small, every step rides in one batch and the chunks are cut
    # from its rows: the order, and the guards the steps changed, are the chunked passes'
    import gradcalc.numerics as numerics
    tr = trace(gradcalc.parse(src), at)

    def taylor(one_pass: int):
        monkeypatch.setattr(numerics, "TAYLOR_ONE_PASS_ELEMENTS", one_pass)
        calls = []
        evaluate = numerics.evaluate_batch
        monkeypatch.setattr(numerics, "evaluate_batch", lambda *a, **k: calls.append(1) or evaluate(*a, **k))
        found = numerics.taylor_order(tr, tr.tape.output, "x", np.random.default_rng(3))
        monkeypatch.setattr(numerics, "evaluate_batch", evaluate)
        return found, len(calls)

    budget = numerics.TAYLOR_ONE_PASS_ELEMENTS
    (chunked, passes), (together, one) = taylor(0), taylor(budget)
    assert one <= 2 and passes >= one  # (one pass an attempt: steps that follow |x| are a second)
    assert together.order == chunked.order or (math.isnan(together.order) and math.isnan(chunked.order))
    assert together.reach == chunked.reach and set(together.flipped) >= set(chunked.flipped)


def test_directions_do_not_pass_a_wrong_slope_on_the_rounding_of_a_tiny_relative_step():
    # one step serves every element, so x_i = 1.4e-7 sets the step of the comparison again
    # (9e-13), whose rounding allowance (~5e-4 here) could hide the 1% error (~5e-3 of J v,
    # d/dx exp(-1/x) = exp(-1/x) / x^2 ~ 0.54 at 0.53 and 0.47): it may not decide then
    wrong = "sum(exp(-1/x)) + stop_gradient(0.01*sum(exp(-1/x)))"
    for seed, x in [(0, [0.5327584213791909, 0.4679657112379884, 0.03895702197041625, 1.4034358543344177e-07]),
                    (12, [1.0655666920828535e-06, 2.208816459375246, 0.10843078224409902, 5.2821662419148126e-08,
                          0.3736789210295958])]:
        (r,) = gradcalc.check(wrong, at={"x": x}, directions=2, seed=seed).results
        assert not r.ok, r.notes
        (r,) = gradcalc.check("sum(exp(-1/x))", at={"x": x}).results  # the full check: element by element
        assert r.ok


# -- large |x|: the default step follows max(1, |x|), too coarse for a unit-scale function ------

#: (program text in u, closed form of d/du at u, a) for functions that vary on the scale 1/a
_UNIT_SCALE_TERMS = [
    (lambda a: f"sin({a!r} * u)", lambda a, u: a * np.cos(a * u)),
    (lambda a: f"cos({a!r} * u)", lambda a, u: -a * np.sin(a * u)),
    (lambda a: f"exp(-({a!r} * u)^2)", lambda a, u: -2 * a * a * u * np.exp(-(a * u) ** 2)),
    (lambda a: f"tanh({a!r} * u)", lambda a, u: a / np.cosh(a * u) ** 2),
    (lambda a: f"sigmoid({a!r} * u)", lambda a, u: a * np.exp(-a * u) / (1 + np.exp(-a * u)) ** 2),
]


@pytest.mark.parametrize("src, at, slope", [
    ("sin(2*pi*t)", 100.1, 2 * math.pi * math.cos(2 * math.pi * 100.1)),
    ("sigmoid(t - 1000)", 1000.5, math.exp(-0.5) / (1 + math.exp(-0.5)) ** 2),
    ("exp(-(t-500)^2)", 500.3, -2 * (500.3 - 500) * math.exp(-(500.3 - 500) ** 2)),
    ("sin(t)", 1000.0, math.cos(1000.0)),
    ("sin(t)", 1e4, math.cos(1e4)),
])
@pytest.mark.parametrize("method", ["central", "richardson"])
def test_a_right_derivative_far_from_0_passes_at_smaller_steps(src, at, slope, method):
    # (each failed at the default step c max(1, |x|): central's truncation error grows with x^2)
    r = gradcalc.check(src, at={"t": at}, method=method).results[0]
    assert r.ok, r
    assert r.max_abs_err <= 1e-6 * abs(slope) + 1e-8
    if r.notes:  # (richardson's default step suffices at some of them)
        assert "differences converge" in r.notes[0] and "to the automatic derivative" in r.notes[0]


@pytest.mark.parametrize("src, at, slope", [
    ("sin(t)", 1000.0, math.cos(1000.0)),
    ("sin(2*pi*t)", 100.1, 2 * math.pi * math.cos(2 * math.pi * 100.1)),
    ("exp(-(t-500)^2)", 500.3, -2 * (500.3 - 500) * math.exp(-(500.3 - 500) ** 2)),
])
@pytest.mark.parametrize("times", [3, 100])
def test_a_wrong_derivative_far_from_0_still_fails_at_smaller_steps(src, at, slope, times):
    # stop_gradient hides a slope of wrong_by: times the tolerance (atol + rtol |slope|)
    wrong_by = times * (1e-8 + 1e-6 * abs(slope))
    r = gradcalc.check(f"{src} + stop_gradient({wrong_by!r} * (t - {at!r}))", at={"t": at}).results[0]
    assert not r.ok
    assert r.extra["fd"] - r.extra["ad"] == pytest.approx(wrong_by, rel=0.05)
    assert any("converge" in n and "still disagree" in n for n in r.notes)


def test_random_unit_scale_programs_far_from_0_pass_right_and_fail_wrong_derivatives():
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    term = st.tuples(st.sampled_from(_UNIT_SCALE_TERMS), st.floats(0.5, 3.0).map(lambda a: round(a, 3)),
                     st.floats(-2, 2).map(lambda c: round(c, 3)))

    @settings(derandomize=True, max_examples=60, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(term, min_size=1, max_size=3), st.floats(2, 4), st.floats(-1.5, 1.5))
    def run(terms, decades, offset):
        centre = float(round(10 ** decades, 2))
        t = centre + offset
        u = t - centre  # (exact: Sterbenz)
        body = " + ".join(f"{c!r} * {text(a)}" for (text, _), a, c in terms)
        slope = float(sum(c * d(a, u) for (_, d), a, c in terms))
        src = f"u = t - {centre!r}; {body}"
        right = gradcalc.check(src, at={"t": t}).results[0]
        assert right.ok, (src, t, right)
        wrong_by = 4 * (1e-8 + 1e-6 * abs(slope))  # four times the tolerance
        wrong = gradcalc.check(f"{src} + stop_gradient({wrong_by!r} * u)", at={"t": t}).results[0]
        assert not wrong.ok, (src, t, wrong)
    run()


# -- reverse against forward mode: the rounding of terms that cancel ----------------------------

_CANCELLING = ("sum(sin(x)/x)", {"x": np.array([1.65505346e-04, 1.20483984e-04, 8.58913524e-07, 2.57223400e-01])})


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("directions", [0, 3])
def test_reverse_and_forward_mode_allow_for_the_rounding_of_terms_that_cancel(seed, directions):
    # d/dx sin(x)/x = cos(x)/x - sin(x)/x^2: two terms of ~1e6 at x = 8.6e-7 that cancel to -x/3,
    # so each mode rounds by ~1e-10, far beyond AD_TOLERANCE's atol 1e-12 ("disagree" before)
    src, at = _CANCELLING
    at = {"x": at["x"] * (1.0 if directions == 0 else np.array([1, 1, 2.6e-7 / 8.58913524e-07, 1]))}
    r = gradcalc.check(src, at=at, seed=seed, directions=directions).results[0]
    assert r.ok, r


@pytest.mark.parametrize("rule", ["jvp", "vjp"])
@pytest.mark.parametrize("directions", [0, 3])
def test_a_rule_wrong_by_1e_8_still_disagrees_where_terms_cancel(rule, directions, monkeypatch):
    # the allowance is measured rounding (the same pass at other scales), which a wrong rule does
    # not widen: sin's rule 1e-8 too large moves J v by ~1e-8 / x, beyond it
    if rule == "jvp":
        replace_rule(monkeypatch, REGISTRY["sin"], "jvp", (lambda t, ans, x, **_: safe_mul(t, (1 + 1e-8) * REGISTRY["cos"](x)),))
    else:
        replace_rule(monkeypatch, REGISTRY["sin"], "vjp", (lambda g, ans, x, **_: safe_mul(g, (1 + 1e-8) * REGISTRY["cos"](x)),))
    src, at = _CANCELLING
    r = gradcalc.check(src, at=at, directions=directions).results[0]
    assert not r.ok
    expected = "<u, J v> != <J^T u, v>" if directions else "reverse and forward mode disagree"
    assert expected in r.notes


# -- eigh and cholesky read one triangle; their derivative is the symmetric one ------------------

def _symmetric_slopes(f, a, h=1e-6):
    """The test's own central differences of f along E_ij + E_ji (E_ii on the diagonal)."""
    n = len(a)
    out = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            e = np.zeros((n, n))
            e[i, j] = e[j, i] = 1.0
            out[i, j] = (f(a + h * e) - f(a - h * e)) / (2 * h)
    return out


_EIGH = ("w, V = eigh(a); s = sum(w * [1, 2])", [[2.0, 1.0], [1.0, 3.0]],
         lambda a: float(np.linalg.eigh(a)[0] @ [1, 2]))
_CHOLESKY = ("sum(cholesky(a) * [[1,2],[3,4]])", [[4.0, 1.0], [1.0, 3.0]],
             lambda a: float(np.sum(np.linalg.cholesky(a) * [[1, 2], [3, 4]])))


@pytest.mark.parametrize("src, at, f", [_EIGH, _CHOLESKY])
def test_eigh_and_cholesky_are_compared_along_symmetric_directions(src, at, f):
    # finite differences of a[0, 1] were 0 (NumPy reads the lower triangle) against a symmetric
    # gradient: a right one failed with no note
    a = np.array(at)
    r = gradcalc.check(src, at={"a": a}).results[0]
    assert r.ok, r
    assert any("compared along symmetric directions (E_ij + E_ji)" in n for n in r.notes)
    grad = gradcalc.grad(src, at={"a": a})
    g = np.asarray(grad["a"])
    along = np.where(np.eye(2, dtype=bool), g, g + g.T)  # the gradient along E_ij + E_ji
    assert np.allclose(along, _symmetric_slopes(f, a), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("src, at, f", [_EIGH, _CHOLESKY])
@pytest.mark.parametrize("where", ["[0, 1]", "[1, 0]", "[0, 0]"])
def test_a_gradient_wrong_in_its_symmetric_part_still_fails(src, at, f, where):
    # (stop_gradient hides 1e-4 of a's slope at one element: 1e-4 along E_ij + E_ji)
    wrong = f"{src}; s + stop_gradient(1e-4 * a{where})" if ";" in src else f"{src} + stop_gradient(1e-4 * a{where})"
    r = gradcalc.check(wrong, at={"a": np.array(at)}).results[0]
    assert not r.ok
    assert abs(r.extra["fd"] - r.extra["ad"]) == pytest.approx(1e-4, rel=1e-3)


def test_directions_keep_an_element_that_agreed_at_the_default_step_as_it_agreed():
    # Elements that disagreed at the default step were compared again at smaller steps, and so,
    # with the smaller steps' allowance, was every element that had agreed and kept its estimate
    # (never refined): a right J v failed (check hunt F4; its directional differences, taken
    # in the hunt down to 1.2e-7 and checked with mpmath, converge to J v)
    a = [[1.97184714, -0.53083235, 0.33678321], [0.25795, -0.65397141, 0.55183838],
         [-0.63200077, -1.3811657, 1.30623399]]
    r = gradcalc.check("input A[3,3]\nout = sinc(pinv(A))", at={"A": a}, directions=2)
    assert r.ok, r.results


@pytest.mark.parametrize("src, at, f", [_EIGH, _CHOLESKY])
@pytest.mark.parametrize("mode", [{"directions": 2}, {"directions": 3, "method": "forward"}, {"taylor": True}])
def test_directions_and_taylor_take_symmetric_directions_for_eigh_and_cholesky(src, at, f, mode):
    # random directions were not symmetric, so the differences (of one triangle) and J v (of
    # the symmetric derivative) saw different perturbations: a right gradient always failed
    # (taylor: order 1; check hunt F1, F2)
    r = gradcalc.check(src, at={"a": np.array(at)}, **mode).results[0]
    assert r.ok, r
    assert any("compared along symmetric directions (E_ij + E_ji)" in n for n in r.notes)


@pytest.mark.parametrize("src, at, f", [_EIGH, _CHOLESKY])
@pytest.mark.parametrize("where", ["[0, 1]", "[1, 0]", "[0, 0]"])
@pytest.mark.parametrize("mode", [{"directions": 4}, {"taylor": True}])
def test_directions_and_taylor_still_fail_a_wrong_symmetric_part(src, at, f, where, mode):
    wrong = f"{src}; s + stop_gradient(0.1 * a{where})" if ";" in src else f"{src} + stop_gradient(0.1 * a{where})"
    assert not gradcalc.check(wrong, at={"a": np.array(at)}, seed=3, **mode).results[0].ok


# -- a kink the default step straddles, which steps relative to |x| do not reach ----------------

@pytest.mark.parametrize("src, at, slope", [
    ("norm(x)", [1e-200, 3e-200], np.array([1, 3]) / math.sqrt(10)),  # x / |x|
    ("abs(x)", [1e-9], np.array([1.0])),
])
def test_a_kink_only_the_default_step_reaches_is_compared_at_steps_relative_to_x(src, at, slope):
    # norm's kink at 0 lies within the default step 7.6e-6 of x = [1e-200, 3e-200] (noted, and a
    # right gradient failed); steps relative to |x| stay clear of it, as std's case already was
    r = gradcalc.check(src, at={"x": np.array(at)}).results[0]
    assert r.ok, r
    assert any("compared at steps relative to |x| instead" in n for n in r.notes)
    assert np.allclose(np.asarray(gradcalc.grad(src, at={"x": np.array(at)})["x"]).ravel(), slope, rtol=1e-12)


def test_a_wrong_slope_beside_a_kink_still_fails_at_steps_relative_to_x():
    r = gradcalc.check("norm(x) + stop_gradient(1e-3 * norm(x))", at={"x": np.array([1e-200, 3e-200])}).results[0]
    assert not r.ok
    assert any("at steps relative to |x| they disagree too" in n for n in r.notes)


@pytest.mark.parametrize("wrong_by", [0.0, 1e-5])
def test_directions_far_from_0_compare_again_at_halved_steps(wrong_by):
    # one step along unit directions, c max |x_i| = 0.0156 at x ~ 3000: central's truncation
    # (|d^3 f / dv^3| h^2 / 6 ~ 4e-5) failed a right sum(sin(x)); a slope 1e-5 wrong still fails
    x = np.array([1000, 2000.5, 3000.25])
    src = f"sum(sin(x)) + stop_gradient({wrong_by!r} * sum(x - {x.tolist()!r}))"
    r = gradcalc.check(src, at={"x": x}, directions=2).results[0]
    assert r.ok == (wrong_by == 0.0), r
    measured = [n for n in r.notes if not n.startswith("'stop_gradient'")]  # (the wrong slope's, when it fails)
    assert "converge" in measured[-1]


@pytest.mark.parametrize(("src", "x"), [("x", 1e160), ("2*x", [1.0, 1e200]), ("softplus(x)", 1e308)])
def test_a_huge_input_does_not_overflow_the_choice_of_steps(src, x):
    # h^p overflowed where check decides whether to difference at h/2 too: exit 3 (the review's find)
    assert gradcalc.check(src, at={"x": x}).ok


@pytest.mark.parametrize(("src", "x", "what"), [
    ("x[argmax(x)] + 0", [0.0, 0.0, 0.0], "changes the position chosen by 'argmax(x)' (line 1, column 3)"),
    ("sum(sort(x) * [1, 2])", [1.0, 1.0], "changes the sort order "),
])
def test_a_change_of_chosen_positions_is_worded_as_such(src, x, what):
    # "the integer argument 'argmax' 'argmax(x)'" and "the integer argument 'sort order'" before
    (result,) = [r for r in gradcalc.check(src, at={"x": x}).results if r.notes]
    assert any(what in note for note in result.notes), result.notes


# The rounding error of a difference quotient is about eps |f| / h, and |f| is the whole output:
# over a sum of n terms it grows with n while each term's derivative does not.  Where the default
# step fails at that limit, larger steps decide (the truncation error of central differences of
# a quadratic is 0, of a cubic h^2): the gradients are closed forms, 2a and 3a^2.
SUM_POINT = {"a": np.arange(2000) * 0.001}


def test_a_sum_of_many_squares_passes_at_larger_steps():
    # failed before: rel err 2.0e-6 at [5] (ad 0.01, fd 0.0100000203), |f| = 2.67e3 over h = 7.6e-6
    r = gradcalc.check("sum(a*a)", at=SUM_POINT)
    res = r.results[0]
    assert r.ok, res.notes
    assert res.extra["default_step"] == 2.0 ** -16 and res.step > res.extra["default_step"]
    assert "at steps up to" in res.notes[0] and "converge" in res.notes[0]
    for n in (10, 100, 1000, 5000):  # (every size, and other scales: arange(n) * c)
        for c in (1e-3, 1.0, 10.0):
            assert gradcalc.check("sum(a*a)", at={"a": np.arange(n) * c}).ok, (n, c)


@pytest.mark.parametrize("wrong", ["1e-7*sum(stop_gradient(a))", "1e-3*sum(stop_gradient(a))",
                                   "sum(stop_gradient(a)^2)*1e-6"])
def test_a_wrong_gradient_of_a_sum_of_many_squares_still_fails(wrong):
    # the derivative is off by 1e-7 (ten times atol), 1e-3, or 2e-6 a (twice rtol): the
    # differences at larger steps converge to 2a + that, and disagree with 2a
    r = gradcalc.check(f"sum(a*a) + {wrong}", at=SUM_POINT)
    assert not r.ok
    res = r.results[0]
    i = tuple(res.worst_index)
    assert res.extra["ad"] == pytest.approx(2 * SUM_POINT["a"][i], abs=1e-12)


def test_a_sum_of_cubes_passes_within_what_the_differences_resolve():
    # 3a^2 at a = 0 within atol 1e-8 needs h^2 + eps |f| / h <= 1e-8, |f| = sum(a^3) = 4.0e3:
    # its least value is 1.8e-8, so no step decides; the differences' spread at their best step
    # (about 3e-8) is then allowed, and reported; the same sum with an error of 1e-5 fails
    r = gradcalc.check("sum(a^3)", at=SUM_POINT)
    res = r.results[0]
    assert r.ok, res.notes
    assert 1e-8 < res.extra["rounding_allowance"] < 1e-6
    assert "compared allowing that spread: the automatic derivative lies within it" in res.notes[0]
    r = gradcalc.check("sum(a^3) + 1e-5*sum(stop_gradient(a))", at=SUM_POINT)
    assert not r.ok


# Many scalar inputs: check's finite differences and forward-mode probes run one batched pass
# for all of them, where they ran a pass per input over the tape (a0*a0 + ... + a1999*a1999:
# 52 s before); every row must hold the bits the input's own pass gives.
SCALAR_PROGRAMS = [
    ("y = sin(a)*exp(b) + log(c)*a; z = y*b + tanh(c); w = [a, b, c] * y; sum(w) + z", ["y", "z", "w"]),
    ("M = [[a, b], [c, a*b]]; v = M @ [sin(a), cos(c)]; s = sum(v*v) + det(M); s", ["v", "s"]),
    ("y = sin(a)*b + exp(c)*a; z = y*y*c + log1p(b*b); sum([y, z, a*c])", ["y", "z"]),
]


@pytest.mark.parametrize("src,outs", SCALAR_PROGRAMS)
@pytest.mark.parametrize("method", ["central", "forward", "richardson"])
@pytest.mark.parametrize("scale", [0.3, 100.0])  # (past |x| = 50 central differences also estimate their error)
def test_scalar_inputs_in_one_pass_give_each_inputs_own_estimate_bit_for_bit(src, outs, method, scale):
    from gradcalc.numerics import facts_on_tape, fd_estimate, scalar_estimates
    tr = trace(gradcalc.parse(src), {"a": 0.3 * scale, "b": -1.2 * scale, "c": 2.5 * scale})
    together = scalar_estimates(tr, outs, ["a", "b", "c"], method, facts_on_tape(tr))
    assert set(together) == {"a", "b", "c"}
    for w, est in together.items():
        own = fd_estimate(tr, outs, w, method)
        for o in outs:
            assert own.jacobian[o].tobytes() == est.jacobian[o].tobytes(), (w, o)
            assert (own.error is None) == (est.error is None)
            if own.error is not None:
                assert own.error[o].tobytes() == est.error[o].tobytes()
        assert own.step.tobytes() == est.step.tobytes() and own.flipped == est.flipped


def test_check_of_many_scalar_inputs_makes_one_pass_for_them(monkeypatch):
    # failed before: 200 passes of each kind (one per input); the results are those of the passes
    # per input (the test above), and the gradient is the closed form 2 a_i
    from gradcalc import numerics
    calls = {"seeded": 0, "forward": 0}
    for name in calls:
        real = getattr(numerics, name)
        monkeypatch.setattr(numerics, name, lambda *a, _real=real, _name=name, **k: (
            calls.__setitem__(_name, calls[_name] + 1), _real(*a, **k))[1])
    n = 200
    src = " + ".join(f"a{i}*a{i}" for i in range(n))
    r = gradcalc.check(src, at={f"a{i}": i / 1000 for i in range(n)})
    assert r.ok and len(r.results) == n
    assert calls["seeded"] <= 2 and calls["forward"] <= 2, calls
    assert all(r.extra["rev_fwd_max_abs_err"] <= 1e-15 for r in r.results)
    # + 1e5: eps |f| / h = 2.9e-6 fails the small terms at the default step (112 of 200); the
    # larger steps each searches are one batched pass per step for all of them (1,347 passes
    # before, a pass per input and step; 15 now)
    calls["seeded"] = 0
    r = gradcalc.check(src + " + 1e5", at={f"a{i}": i / 1000 for i in range(n)})
    searched = [r for r in r.results if "at steps up to" in " ".join(r.notes)]
    assert r.ok and len(searched) >= 10
    assert calls["seeded"] <= 1 + 40, calls


@pytest.mark.parametrize("src", ["sum(x) + 1e17 + 0.5*sum(stop_gradient(x))", "sum(x) + 1e17"])
def test_directions_do_not_pass_what_their_rounding_allowance_cannot_resolve(src):
    # |f| = 1e17 over a step of 1.5e-5: the allowance eps |f| / h (1.2e7 per direction) passed
    # a derivative 50% wrong (J v ~ 1, error ~ 0.5); the comparison cannot decide there, and says so
    r = gradcalc.check(src, at={"x": np.ones(10)}, directions=2)
    res = r.results[0]
    assert not r.ok and res.extra["rounding_allowance"] > 1e6
    assert any(n.startswith("rounding of the directional differences could hide an error of") and
               "more than J v itself" in n for n in res.notes)
    assert "bound" not in res.extra  # (no mismatch beyond the allowance to report)
    # the full check decides: its larger steps resolve the derivative (1 right, 1.5 wrong)
    assert gradcalc.check(src, at={"x": np.ones(10)}).ok == ("0.5" not in src)


@pytest.mark.parametrize("src, x", [("100 + 0*x", 1.0), ("relu(x) + 100", -1.0), ("sum(relu(x)) + 1000", [-1.0, -2.0, 3.0]),
                                    ("sum(x * 0) + 1e17", [1.0, 2.0])])
def test_directions_pass_a_zero_derivative_their_differences_find_exactly(src, x):
    """Where J v and the directional differences agree without any rounding allowance (a derivative
    exactly 0, differences exactly 0), the allowance decides nothing and is not needed: a pass
    (the bare 'allowance past |J v|' rule failed these right derivatives: differential review)."""
    r = gradcalc.check(src, at={"x": x}, directions=2)
    assert r.ok, [res.notes for res in r.results]


# -- the retry at steps relative to |x| sees the Jacobian as the default step's comparison does ----

_SMALL_SPD = np.array([[1e-3, 2e-4], [2e-4, 3e-3]])


@pytest.mark.parametrize("src", ["L = cholesky(S); sum(log(diagonal(L)))",  # log det(S) / 2
                                 "w, V = eigh(S); 0.5 * sum(log(w))"])
def test_a_small_spd_input_passes_at_steps_relative_to_x(src):
    # the retry compared the symmetrised derivative with plain differences (those of the upper
    # triangle are 0): 'at steps relative to |x| they disagree too (rel err 1)' for any S ~ 1e-3
    r = gradcalc.check(src, at={"S": _SMALL_SPD}).results[0]
    assert r.ok, r.notes
    assert any("compared at steps relative to |x| instead" in n for n in r.notes)
    g = np.asarray(gradcalc.grad(src, at={"S": _SMALL_SPD})["S"])
    assert np.allclose(g, 0.5 * np.linalg.inv(_SMALL_SPD), rtol=1e-10)  # d log det(S) / 2 = S^-1 / 2


@pytest.mark.parametrize("where", ["[0, 1]", "[1, 0]", "[0, 0]"])
def test_a_small_spd_input_still_fails_a_wrong_symmetric_part_at_relative_steps(where):
    # (stop_gradient hides a slope of 0.1 at one element: 1.5e-3 of the derivative along E_01 + E_10)
    src = f"L = cholesky(S); sum(log(diagonal(L))) + stop_gradient(0.1 * S{where})"
    r = gradcalc.check(src, at={"S": _SMALL_SPD}).results[0]
    assert not r.ok


# -- richardson's halving search: differences exactly 0 at every step have converged -------------

_NEAR_POLE = ("input y[2]; out = (1.5 + y)^-3", {"y": np.array([0.5, -1.48])})


def test_richardson_passes_an_elementwise_map_whose_cross_differences_are_exactly_0():
    # the cross terms d out[1] / d y[0] are exactly 0 at every step, but the search added
    # eps |f| / h (|f| = 1.25e5) to their spread, so they never 'converged': exit 1 with
    # 'at [1, 1]: ad -18750000, fd -18750000: |ad - fd| = 5.7e-07 > 0.188 allowed'
    src, at = _NEAR_POLE
    r = gradcalc.check(src, at=at, method="richardson").results[0]
    assert r.ok, (r.notes, breach_text(r))
    j = np.asarray(gradcalc.jacobian(src, at=at)["out"]["y"])
    assert np.allclose(j, np.diag(-3 * (1.5 + at["y"]) ** -4), rtol=1e-12, atol=0)  # closed form
    res = runner.invoke(app, ["check", "input y[2]; out = (1.5 + y)^-3", "--at", "y=[0.5,-1.48]",
                              "--method", "richardson", "-f", "plain"])
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize("wrong", ["stop_gradient(10 * y)", "stop_gradient(1e-6 * y[0])"])
def test_richardson_still_fails_a_wrong_diagonal_or_cross_term_near_the_pole(wrong):
    # 10 along the diagonal: 5e-7 of -1.9e7; 1e-6 on the cross term d out[1] / d y[0], which is no
    # longer exactly 0 in the differences
    src, at = _NEAR_POLE
    assert not gradcalc.check(f"{src} + {wrong}", at=at, method="richardson").ok


# -- the rounding route is decided per element, not by the block's largest mismatch -------------

def _tanh_loss(seed):
    rng = np.random.default_rng(seed)
    return ("input x[1000], w[1000]\nloss = sum((tanh(x*w) - 0.3)^2)",
            {"x": 10 * rng.standard_normal(1000), "w": 0.1 * rng.standard_normal(1000)})


def _mlp_loss(seed):
    rng = np.random.default_rng(seed)
    return ("input x[40], W1[4,40], b1[4], W2[4]\nhid = tanh(W1 @ x + b1)\npred = W2 @ hid\n"
            "loss = 1e7*0.5*(pred - 1)^2",
            {"x": 10 * rng.standard_normal(40), "W1": rng.standard_normal((4, 40)) / np.sqrt(40),
             "b1": rng.standard_normal(4), "W2": rng.standard_normal(4)})


def _mlp_closed_form(at):
    hid = np.tanh(at["W1"] @ at["x"] + at["b1"])
    back = 1e7 * (at["W2"] @ hid - 1) * at["W2"] * (1 - hid ** 2)
    return {"W1": np.outer(back, at["x"]), "x": at["W1"].T @ back, "b1": back}


@pytest.mark.parametrize("case", [(_tanh_loss, 2), (_tanh_loss, 4), (_mlp_loss, 1), (_mlp_loss, 4)])
@pytest.mark.parametrize("method", ["central", "forward"])
def test_an_element_at_the_rounding_limit_passes_beside_others_with_truncation_error(case, method):
    # a large element's truncation error kept the whole block off the rounding route, and the
    # smaller steps then made the small elements' rounding worse: 'do not converge (spread 0.0033)'
    # at an MLP's loss of 1e7 (CI hunt seeds 300067, 300397, 300400), a right gradient failing
    make, seed = case
    src, at = make(seed)
    r = gradcalc.check(src, at=at, method=method)
    assert r.ok, [(c.wrt, breach_text(c), c.notes) for c in r.results if not c.ok]
    g = gradcalc.grad(src, at=at)
    if make is _mlp_loss:
        for k, want in _mlp_closed_form(at).items():
            assert np.allclose(np.asarray(g[k]), want, rtol=1e-9, atol=1e-9 * np.max(np.abs(want)))
    else:
        t = np.tanh(at["x"] * at["w"])
        assert np.allclose(np.asarray(g["w"]), 2 * (t - 0.3) * (1 - t ** 2) * at["x"], rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("case", [(_tanh_loss, 2), (_mlp_loss, 1)])
@pytest.mark.parametrize("times", [1 + 1e-5, -1.0])
def test_a_wrong_tanh_rule_still_fails_where_some_elements_are_at_the_rounding_limit(case, times, monkeypatch):
    make, seed = case
    src, at = make(seed)
    wrong = lambda g, ans, x, **_: safe_mul(g, times * (1 - ans * ans))  # noqa: E731
    replace_rule(monkeypatch, REGISTRY["tanh"], "vjp", (wrong,))
    replace_rule(monkeypatch, REGISTRY["tanh"], "jvp", (wrong,))
    assert not gradcalc.check(src, at=at).ok


# -- misses of --directions and of inputs reaching eigh/cholesky (check hunt M1, M2, F7) ----------

def _scaled_rule(monkeypatch, name, slope):
    """name's VJP and JVP rules made slope(x, ans) (so that only the differences can tell)."""
    rule = (lambda g, ans, x, **_: safe_mul(g, slope(x, ans)),)
    replace_rule(monkeypatch, REGISTRY[name], "vjp", rule)
    replace_rule(monkeypatch, REGISTRY[name], "jvp", rule)


LSE_AT = 0.01 * np.random.default_rng(1).standard_normal(50)  # (its smallest |x_i| is 8.1e-5)


def test_directions_fail_a_rule_1e4_wrong_beside_a_small_element(monkeypatch):
    # log(sum(exp(x))) with exp's rules 1e-4 wrong: d/dx_i = (1 + 1e-4) softmax(x)_i, 100 times
    # rtol.  An x_i of 8.1e-5 makes the default step coarse, and at steps relative to |x| (4.7e-10)
    # the rounding allowed, 9.3e-6 (eps |f| / h, up to 1e-3 |J v| was taken), passed it ("where the
    # differences agree"); the steps from the default one down to there converge, and disagree
    src = "input x[50]\ny = log(sum(exp(x)))"
    softmax = np.exp(LSE_AT) / np.sum(np.exp(LSE_AT))
    np.testing.assert_allclose(gradcalc.grad(src, at={"x": LSE_AT})["x"], softmax, rtol=1e-13)
    for directions in (1, 2, 8):
        assert gradcalc.check(src, at={"x": LSE_AT}, directions=directions).ok
    _scaled_rule(monkeypatch, "exp", lambda x, ans: REGISTRY["mul"](1.0001, ans))
    np.testing.assert_allclose(gradcalc.grad(src, at={"x": LSE_AT})["x"], 1.0001 * softmax, rtol=1e-13)
    for directions in (1, 2, 8):
        (r,) = gradcalc.check(src, at={"x": LSE_AT}, directions=directions).results
        assert not r.ok, r.notes
        assert r.max_rel_err == pytest.approx(1e-4 / 1.0001, rel=1e-3)  # (J v is 1.0001 times the truth)
        assert any("converge" in n and "still disagree" in n for n in r.notes), r.notes
    assert not gradcalc.check(src, at={"x": LSE_AT}).ok  # (the full check, as before)


def test_directions_do_not_allow_a_truncation_error_as_measured_noise(monkeypatch):
    # [sin(x), log(x)] at 1000: sin's central difference at the default step (2^-7) is off by
    # cos(x) h^2 / 6 = 5.6e-6, and |D(h) - D(17h/16)| (0.13 of that) times 4 was allowed to every
    # element as 'measured noise' (2.9e-6): log's rule 1e-3 wrong, an error of 1e-6 in 1/x = 1e-3
    # against a tolerance of 1.1e-8, passed
    src = "input x\ny = [sin(x), log(x)]"
    for directions in (1, 2):
        assert gradcalc.check(src, at={"x": 1000.0}, directions=directions).ok
    _scaled_rule(monkeypatch, "log", lambda x, ans: REGISTRY["div"](1.001, x))
    assert gradcalc.jacobian(src, at={"x": 1000.0})["y"]["x"][1] == pytest.approx(1.001e-3, rel=1e-14)
    for directions in (1, 2):
        (r,) = gradcalc.check(src, at={"x": 1000.0}, directions=directions).results
        assert not r.ok and r.max_rel_err == pytest.approx(1e-3 / 1.001, rel=1e-3), r.notes


@pytest.mark.parametrize("method, src, h, truncation", [
    # x^3 along v = 1 at x = 1, h = 2^-7: the central D(h) = 3 x^2 + h^2 exactly, so |D(h) -
    # D(17h/16)| is (289/256 - 1) h^2 of truncation (7.9e-6, rounding 3e-14)
    ("central", "input x\ny = x^3", 2.0 ** -7, lambda h: (289 / 256 - 1) * h * h),
    # x^2: the forward D(h) = 2 x + h exactly, so (17/16 - 1) h
    ("forward", "input x\ny = x^2", 2.0 ** -7, lambda h: h / 16),
    # x^5: D(h) = 5 + 10 h^2 + h^4, so Richardson's (4 D(h/2) - D(h)) / 3 = 5 - h^4 / 4, and
    # |R(h) - R(17h/16)| = ((17/16)^4 - 1) h^4 / 4
    ("richardson", "input x\ny = x^5", 2.0 ** -2, lambda h: ((17 / 16) ** 4 - 1) * h ** 4 / 4),
])
def test_directional_rounding_noise_holds_no_truncation(method, src, h, truncation):
    # D(17h/16) - 2 D(h) + D(FAR h) cancels the h^p term (FAR^p = 2 - (17/16)^p, p the method's
    # order), which is all the truncation these polynomials have
    from gradcalc import numerics
    tr = trace(gradcalc.parse(src), {"x": 1.0})
    v = np.ones(1)
    found = numerics.Directional._make(next(zip(*numerics._directional_differences(tr, "x", ["y"], v, method, h))))
    assert found.noise[0] == pytest.approx(truncation(h), rel=1e-3)
    assert numerics._rounding_noise(tr, "x", "y", v, h, found, method)[0] < 1e-8 * truncation(h)


def _sin_as_its_default_difference(x, ans):
    # cos(x) sin(h) / h, h the central default step at x: what the central difference of sin
    # at that step gives, so that the default step cannot tell; wrong by h^2 / 6 = 1e-5 (10 rtol)
    h = default_step(np.asarray(x, float), "central")
    return REGISTRY["mul"](REGISTRY["cos"](x), np.sin(h) / h)


@pytest.mark.parametrize("src", ["input S[2,2]\nout = sum(sin(S)) + sum(diagonal(cholesky(S)))",
                                 "input S[2,2]\nw, V = eigh(S)\nout = sum(sin(S)) + sum(w)"])
def test_an_input_reaching_cholesky_or_eigh_is_checked_at_half_its_step(src, monkeypatch):
    # The symmetric note turned the smaller steps' search off: at |S| ~ 1000 the default step is
    # 2^-7, a right gradient failed (truncation 1e-5 relative) and a wrong one whose error
    # truncation cancelled passed.  d/dS of sum(sin(S)) is cos(S); of sum(diagonal(cholesky(S)))
    # and of sum(eigenvalues) = trace(S): smooth at that scale (trace's is the identity)
    S = np.array([[1000.0, 600.0], [600.0, 1000.0]])
    (r,) = gradcalc.check(src, at={"S": S}).results
    assert r.ok, r.notes
    assert any("converge" in n and "to the automatic derivative" in n for n in r.notes)
    _scaled_rule(monkeypatch, "sin", _sin_as_its_default_difference)
    g = gradcalc.grad("input S[2,2]\nout = sum(sin(S))", at={"S": S})["S"]
    h = default_step(S, "central")  # (2^-7 at 1000, 2^-8 at 600)
    np.testing.assert_allclose(g, np.cos(S) * np.sin(h) / h, rtol=1e-12)
    (r,) = gradcalc.check(src, at={"S": S}).results
    assert not r.ok and any("still disagree" in n for n in r.notes), r.notes


@pytest.mark.parametrize("src, at, options", [
    ("s*2", {"s": math.inf}, {"directions": 1}),
    ("s*2", {"s": -math.inf}, {"directions": 2, "taylor": True}),
    ("x", {"x": [1.0, math.inf]}, {"rtol": 0.0, "atol": 0.0}),
])
def test_an_infinite_input_fails_its_check_as_a_point_that_is_not_finite(src, at, options):
    # (the search over smaller steps took log2 of the largest |x|: int(inf) raised, an internal error)
    r = gradcalc.check(src, at=at, **options)
    assert not r.ok and any("not finite" in " ".join(x.notes) for x in r.results)


def test_a_full_check_too_large_to_finish_is_refused_before_it_starts_and_points_to_directions():
    # 90,000 inputs: 180,000 points through 90,000-element values (1.6e10 numbers) took hours
    import time
    start = time.monotonic()
    src = "input x[300, 300]\ny = sum(sin(x))"
    with pytest.raises(gradcalc.errors.LimitError) as info:
        gradcalc.check(src, points=1)
    assert time.monotonic() - start < 60  # (a hang guard: it ran for hours)
    assert "would evaluate the program at 180,000 points" in info.value.message
    assert "directions K" in info.value.hint  # (the API words options as keywords; the CLI as --directions)
    assert gradcalc.check(src, points=1, directions=2).ok  # (the way it points to)


@pytest.mark.parametrize("src, x", [("asin(x)", 0.9999999), ("log1p(x)", -0.999999), ("atanh(x)", 0.9999999),
                                    ("acosh(x)", 1.0000001), ("log(x - 1)", 1.000001),
                                    ("asin(x)", 0.99999999999),
                                    ("sum(asin(x))", [0.9999999, 0.5, -0.99999999])])
def test_a_right_derivative_a_step_from_a_domain_edge_passes(src, x):
    # (a JAX-oracle hunt) the default step 7.6e-6 reaches past the edge, so the differences are
    # nan where the derivative is not: such elements now take the smaller steps' search, as a
    # failing finite one does, and the closed form (1 / sqrt(1 - x^2) for asin...) is what passes
    r = gradcalc.check(src, at={"x": x})
    (res,) = r.results
    assert res.ok, res.notes
    assert "converge" in res.notes[-1] and "to the automatic derivative" in res.notes[-1]


def test_differences_that_cannot_resolve_a_domain_edge_say_so():
    # sqrt(1 - x^2) at 0.9999999 rounds by eps / sqrt(1 - x^2) ~ 2e-13 an evaluation: no step
    # is both below the edge's distance and above that rounding at rtol 1e-6.  It said "fd nan:
    # not finite"; now the search says what the differences can do
    (res,) = gradcalc.check("sqrt(1 - x^2)", at={"x": 0.9999999}).results
    assert not res.ok and "do not converge within the tolerance" in res.notes[0], res.notes


def test_a_wrong_rule_a_step_from_a_domain_edge_still_fails(monkeypatch):
    asin = REGISTRY["asin"]
    wrong = lambda g, ans, x: (1 + 1e-4) * g / np.sqrt(1 - x * x)  # noqa: E731 - both modes alike
    replace_rule(monkeypatch, asin, "vjp", (wrong,))
    replace_rule(monkeypatch, asin, "jvp", (wrong,))
    for x in [0.9999999, [0.9999999, 0.5]]:
        (res,) = gradcalc.check("sum(asin(x))", at={"x": x}).results
        assert not res.ok and "still disagree" in " ".join(res.notes), res.notes


@pytest.mark.parametrize("n", [2, 4])
def test_cholesky_of_a_matrix_a_step_from_indefinite_is_checked_not_an_error(n):
    # (a JAX-oracle hunt) the default step 7.6e-6 made a positive definite matrix whose least
    # eigenvalue is 1e-6 indefinite, and the whole check was the error "cholesky: the matrix is
    # not positive definite" (exit 2); those points' differences are now nan, and the search at
    # smaller steps, which stay inside, compares them
    rng = np.random.default_rng(n)
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    a = (q * np.r_[1e-6, np.linspace(1, 2, n - 1)]) @ q.T
    r = runner.invoke(app, ["check", "sum(cholesky(A))", "--at", f"A={json.dumps(a.tolist())}", "-f", "json"])
    assert r.exit_code == 0, r.output
    (res,) = json.loads(r.stdout)["results"]
    assert res["ok"] and any("converge" in n and "to the automatic derivative" in n for n in res["notes"])


@pytest.mark.parametrize("src, x", [("atanh(x)", 1 - 2.0 ** -17), ("log1p(x)", -1 + 2.0 ** -17)])
def test_differences_that_are_inf_a_step_away_are_searched_too(src, x):
    # exactly one default step from the edge the difference is inf, and the search stopped at
    # once (inf <= inf), saying "converge (within inf) and still disagree"
    (res,) = gradcalc.check(src, at={"x": x}).results
    assert res.ok, res.notes
    assert "reaches where the differences are not finite" in res.notes[-1]


def test_an_inf_input_is_not_searched_at_smaller_steps():
    # its step is inf, and halving it stays inf: the note said "smaller than the default step inf"
    r = gradcalc.check("sum(solve(A, b))", at={"A": [[2.0, 1.0], [1.0, 3.0]], "b": [1.0, np.inf]})
    (res,) = [x for x in r.results if x.wrt == "b"]
    assert not res.ok and not any("smaller than" in n for n in res.notes), res.notes


def test_many_points_failing_a_step_away_stay_the_checks_error(monkeypatch):
    # a matrix whose least eigenvalue is 1e-9: about half of the 1,600 perturbed points are
    # indefinite, and finding each by halving took 6 s at n = 40, 71 s at 80 (a verifier);
    # past FAILING_ROW_PASSES the failure is the error it was
    import gradcalc.numerics as N
    calls = []
    real = N.evaluate_batch
    monkeypatch.setattr(N, "evaluate_batch", lambda *a, **k: calls.append(1) or real(*a, **k))
    n = 40
    rng = np.random.default_rng(n)
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    a = (q * np.r_[1e-9, np.linspace(1, 2, n - 1)]) @ q.T
    with pytest.raises(gradcalc.GradcalcError, match="not positive definite at a point near the one given"):
        gradcalc.check("sum(cholesky(A))", at={"A": (a + a.T) / 2})
    assert len(calls) <= N.FAILING_ROW_PASSES + 2


@pytest.mark.parametrize("directions", [0, 2])
def test_check_compares_the_scalar_rules_grad_runs(directions, monkeypatch):
    # grad runs the commonest scalar rules inline (transforms._SCALAR_OPS); the check of a scalar
    # output runs the same pass, so a slip in an inline rule alone fails it, as it would show in
    # grad (d(x/y)/dy made 1% too large: -1.01 x / y^2)
    from gradcalc import transforms
    right = transforms._div_rule
    monkeypatch.setattr(transforms, "_div_rule", lambda g, ans, y: (lambda ca, cb: (ca, 1.01 * cb))(*right(g, ans, y)))
    g = gradcalc.grad("input x, y\nx / y", at={"x": 3.0, "y": 2.0})
    gx, gy = g["x"], g["y"]
    assert gx == pytest.approx(0.5) and gy == pytest.approx(-1.01 * 3 / 4)  # (what grad now says)
    r = gradcalc.check("input x, y\nx / y", at={"x": 3.0, "y": 2.0}, directions=directions)
    dx, dy = r.results
    assert dx.ok and not dy.ok
    if not directions:  # (along directions a result records J v and its difference, not entries)
        assert dy.extra["fd"] == pytest.approx(-0.75, rel=1e-6)


def test_taylor_test_of_the_full_check_measures_the_reverse_jacobian_it_compared(monkeypatch):
    # the full check holds reverse mode's Jacobian, and the Taylor remainder uses it (J p as one
    # product, no tangent pass): sin's reverse rule 1% wrong leaves order 1 in d/dx, while its
    # forward rule, right, would have left order 2; d/dy = sin(x) exp(y) is right, order 2
    replace_rule(monkeypatch, REGISTRY["sin"], "vjp", (lambda g, ans, x, **_: safe_mul(g, 1.01 * REGISTRY["cos"](x)),))
    from gradcalc import numerics
    monkeypatch.setattr(numerics, "_tangents", lambda *a: pytest.fail("a tangent pass for the Taylor test"))
    monkeypatch.setattr(numerics, "_forward_probes", lambda *a: {})  # (the probes' own tangent pass)
    dx, dy = gradcalc.check("input x, y\nsin(x) * exp(y)", at={"x": 0.4, "y": 0.5}, taylor=True).results
    assert not dx.ok and dx.extra["taylor_order"] == pytest.approx(1.0, abs=0.1)
    assert dy.ok and dy.extra["taylor_order"] == pytest.approx(2.0, abs=0.1)


@pytest.mark.parametrize("directions", [0, 2])
def test_check_compares_the_plain_matrix_products_grad_runs(directions, monkeypatch):
    # grad's backward pass takes matmul's plain rules (matrix products that skip the look for
    # 0 * inf); check of a scalar output runs that pass too, in full and along directions, so
    # a slip there alone fails it (dA = g B, not g B^T: a mutation hunt's finding, which passed
    # every mode of check while grad was wrong by 2.6)
    mm = REGISTRY["matmul"]
    right_a, right_b = mm.plain_vjp
    monkeypatch.setattr(mm, "plain_vjp", (lambda g, ans, a, b, **kw: right_a(g, ans, a, np.swapaxes(b, -1, -2), **kw),
                                          right_b))
    at = {"A": np.array([[1.0, 2, 3], [4, 5, 6], [7, 8, 10]]), "B": np.array([[1.0, 0, 2], [0, 1, 1], [3, 1, 0]])}
    src = "input A[3,3], B[3,3]\nsum(sin(A @ B))"
    g = gradcalc.grad(src, at=at)
    assert not np.allclose(g["A"], np.cos(at["A"] @ at["B"]) @ at["B"].T)  # (grad is wrong: the slip is on its path)
    r = gradcalc.check(src, at=at, directions=directions)
    da, db = r.results
    assert not da.ok and db.ok


@pytest.mark.parametrize("x", [1e-8, 1e-10, 1e-30])
def test_taylor_steps_follow_x_where_they_pass_it(x):
    # the Taylor steps run from 1e-2 max(1, |x|) down 19 halvings, to about 2e-8: beside x = 1e-8
    # they leave the domain of log and the scale it changes on (order 1.42, a false failure);
    # steps that follow |x| there give a right derivative order 2, with a note, and a wrong one
    # (0.1% off) order 1 at both
    (right,) = gradcalc.check("input x\nlog(x)", at={"x": x}, taylor=True).results
    assert right.ok and right.extra["taylor_order"] == pytest.approx(2.0, abs=0.1)
    assert any(n.startswith("the Taylor steps (from 1e-2·max(1, |x|)) are not small beside |x| = ") for n in right.notes)
    (wrong,) = gradcalc.check("input x\nlog(x) + stop_gradient(1e-3*log(x))", at={"x": x}, taylor=True).results
    assert not wrong.ok and wrong.extra["taylor_order"] < 1.8
    assert not any("Taylor steps" in n for n in wrong.notes)


@pytest.mark.parametrize("src, x", [("exp(x) + stop_gradient(1e-2*exp(x))", 1e-9),
                                    ("tanh(x) + 3 + stop_gradient(1e-3*(tanh(x) + 3))", 1e-9),
                                    ("sum(sin(x)) + stop_gradient(1e-3*sum(sin(x)))", np.array([1e-4, 0.5, 2.0]))])
def test_taylor_steps_that_follow_x_do_not_pass_a_wrong_slope(src, x):
    # the retry at smaller steps measured order inf (every remainder at rounding level: nothing
    # measured) and passed these slopes 1% and 0.1% wrong; steps scaled element by element by
    # |x_i| shrank the small elements' share of a wrong slope, and passed the third (a verifier's
    # findings). A finite order is asked, and the steps shrink alike along the same direction
    (r,) = gradcalc.check(("input x[3]\n" if np.ndim(x) else "input x\n") + src, at={"x": x}, taylor=True).results
    assert not r.ok and r.extra["taylor_order"] < 1.8 and not any("Taylor steps" in n for n in r.notes)


def test_directions_of_a_one_element_output_take_grads_pass_a_few_times_whatever_the_directions(monkeypatch):
    # J^T u_k = u_k J^T 1: one pass of grad's own (eager_backward) and one for each rounding
    # scale serve every direction (a pass a direction and scale: 30 passes for ten directions,
    # 4.7 s where the batched pass took 1 s); J^T u_k is u_k times the gradient of sum(x^2), 2 x
    from gradcalc import numerics
    calls = []
    real = numerics.eager_backward
    monkeypatch.setattr(numerics, "eager_backward", lambda *a, **k: calls.append(1) or real(*a, **k))
    x = np.linspace(0.1, 2.0, 64)
    (r,) = gradcalc.check("input x[64]\nsum(x^2)", at={"x": x}, directions=10).results
    assert r.ok and len(calls) == 1 + len(numerics.ROUNDING_SCALES)
    rows, noise = numerics._one_element_cotangents(trace(gradcalc.parse("input x[64]\nsum(x^2)"), {"x": x}),
                                                   "_", "x", np.array([[0.5], [-2.0]]).reshape(2))
    assert rows == pytest.approx(np.stack([0.5 * 2 * x, -2.0 * 2 * x]), rel=1e-15)
