"""What a fuzz hunt found: a crash or a wrong answer each, with the input that showed it.
Expected values come from closed forms and float64's own limits, never from gradcalc."""
from __future__ import annotations

import json
import math
import subprocess
import sys
import warnings

import pytest

import gradcalc

from cli_run import ok, run, user_error

BIGGEST = sys.float_info.max  # 1.7976931348623157e308


# -- plot's picture where a curve has no finite sample (an IndexError, exit 3)

@pytest.mark.parametrize("source, over", [("nan*x", "x=0:1"), ("inf*x", "x=0:1"), ("sqrt(x)", "x=-1:0")])
def test_a_curve_without_a_finite_sample_is_said_to_be_undrawn(source, over):
    r = ok("plot", source, "--over", over)
    assert "·· d_/dx (no finite value: nothing to draw)" in r.stdout
    # sqrt(0) = 0 is the value's one finite sample over [-1, 0]: that curve is drawn
    drawn = source == "sqrt(x)"
    assert ("⠤⠤ _ (no finite value" in r.stdout) is not drawn
    assert "-> (x)" in r.stdout


# -- plot's picture where the finite values span more than float64 can (plotille: ValueError)

@pytest.mark.parametrize("source, over, top", [
    # x*1e308 on [0, 10]: finite up to sample 35 of 199 steps of 10/199 (35e309/199 < 1.797e308)
    ("x*1e308", "x=0:10", 35 * 10 / 199 * 1e308),
    # x^2 on [1e154, 1e155]: finite while x < 1.34e154, the square root of the largest float
    ("x^2", "x=1e154:1e155", None),
])
def test_values_near_the_largest_float_are_drawn_without_warnings(source, over, top):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = ok("plot", source, "--over", over)
    assert [str(w.message) for w in caught] == []
    texts = [line.split("|")[0].strip() for line in r.stdout.splitlines()[2:23]]
    # the axis ends at the largest float, labelled in 3 digits (1.8e+308, which reads back as inf)
    assert texts[0] == "1.8e+308"
    labels = [float(t) for t in texts[1:]]
    assert labels == sorted(labels, reverse=True) and all(abs(v) < BIGGEST for v in labels)
    if top is not None:  # (the largest finite sample lies in the top rows)
        assert labels[1] <= top <= BIGGEST


def test_no_runtime_warning_reaches_stderr_from_the_picture():
    main = "import sys; from gradcalc.cli import main; sys.argv[0] = 'gradcalc'; main()"
    r = subprocess.run([sys.executable, "-c", main, "plot", "x*1e308", "--over", "x=0:10"],
                       capture_output=True, text=True, timeout=120, env={"COLUMNS": "80", "PATH": ""})
    assert r.returncode == 0, r.stderr
    assert r.stderr == "warning: '*' at line 1, column 2 produced inf\n"


# -- an expectation file nested past Python's recursion limit (RecursionError, exit 3)

def _deep_expectation(depth: int) -> str:
    """A grad -f json of x^2 at x = 1 whose gradient is 2 inside depth lists."""
    return ('{"schema": 1, "command": "grad", "of": "_", "at": {"x": 1.0}, "value": 1.0, '
            '"gradient": {"x": ' + "[" * depth + "2.0" + "]" * depth + "}}")


@pytest.mark.parametrize("text", ["[" * 1500 + "]" * 1500, _deep_expectation(1500), _deep_expectation(900)])
def test_an_expectation_nested_too_deeply_is_refused_as_at_refuses_it(tmp_path, text):
    deep = tmp_path / "deep.json"
    deep.write_text(text)
    r = user_error("check", "x^2", "--at", "x=1", "--expect", deep)
    assert r.stderr.splitlines()[0] == f"error: expectation file '{deep}' is nested too deeply"
    if not text.startswith("{"):  # (the words of --at x=@FILE for the same file)
        at = user_error("eval", "x", "--at", f"x=@{deep}")
        assert at.stderr.splitlines()[0] == f"error: --at x: '{deep}' is nested too deeply"


def test_a_sibling_expectation_nested_too_deeply_is_an_error_result(tmp_path):
    (tmp_path / "f.grad").write_text("x^2\n")
    (tmp_path / "f.expect.json").write_text("[" * 1500 + "]" * 1500)
    r = run("check", tmp_path / "f.grad", "--at", "x=1")
    assert r.exit_code == 2, (r.stdout, r.stderr)
    assert f"expectation file '{tmp_path / 'f.expect.json'}' is nested too deeply" in r.stdout + r.stderr
    assert "internal error" not in r.stdout + r.stderr


# -- a declaration error found while check --points looks for the inputs (no label, line, caret)

@pytest.mark.parametrize("source, error", [
    ("x = 1\ndef pi(a) = a\ny = x", ["error: <expr>:2:5: a function cannot be named 'pi': it is a constant",
                                     "  def pi(a) = a", "      ^", "hint: pick another name"]),
    ("input x = 1\nx = 2", ["error: <expr>:2:1: cannot assign to 'x': it is an input (line 1)", "  x = 2", "  ^"]),
])
@pytest.mark.parametrize("points", [[], ["--points", "1"]])
def test_a_declaration_error_points_at_its_line_with_or_without_points(source, error, points):
    r = user_error("check", source, *points)
    assert r.stderr.splitlines()[:len(error)] == error


# -- gradcalc.testing.assert_gradients of something that is no program (AttributeError)

@pytest.mark.parametrize("source", [None, 1, b"x", ["x"]])
def test_assert_gradients_refuses_what_is_no_program_as_check_does(source):
    import gradcalc
    from gradcalc.errors import UsageError
    from gradcalc.testing import assert_gradients
    with pytest.raises(UsageError) as checked:
        gradcalc.check(source, at={"x": 1.0})
    with pytest.raises(UsageError) as asserted:
        assert_gradients(source, at={"x": 1.0})
    assert str(asserted.value) == str(checked.value) == (
        f"a program is text (a str) or a parsed Program, not {type(source).__name__}")


def test_assert_gradients_still_takes_a_parsed_program():
    import gradcalc
    from gradcalc.testing import assert_gradients
    assert assert_gradients(gradcalc.parse("x^2"), at={"x": 3.0}).results[0].ok


# -- --max-steps past in straight-line code (no line, column or caret; a loop was named)

def test_max_steps_in_straight_line_code_points_at_the_statement():
    r = user_error("eval", "a = x\ny = (1 - x)^2 + 100*(x - 1)^2\ny", "--at", "x=1", "--max-steps", "5")
    assert r.stderr.splitlines()[:3] == [
        "error: <expr>:2:1: the program ran more than --max-steps=5 steps (operations recorded plus loop "
        "iterations) in the statement at line 2, column 1", "  y = (1 - x)^2 + 100*(x - 1)^2", "  ^"]
    # (line 1 is one step, a's copy, within 5; line 2 adds eight operations and its constants)
    ok("eval", "a = x\ny = (1 - x)^2 + 100*(x - 1)^2\ny", "--at", "x=1", "--max-steps", "20")


# -- a stored derivative that is not finite, met by the same computed one (passed, error 0)

@pytest.mark.parametrize("at, stored", [("nan", "nan"), ("inf", "inf")])
def test_an_expectation_of_a_non_finite_derivative_fails(tmp_path, at, stored):
    # d(x^2)/dx = 2x: nan at x = nan, inf at x = inf; SPEC §7 counts either as a failure
    path = tmp_path / "f.expect.json"
    path.write_text('{"schema": 1, "command": "grad", "of": "_", "at": {"x": "%s"}, "value": "%s", '
                    '"gradient": {"x": "%s"}}' % (at, "nan" if at == "nan" else "inf", stored))
    r = gradcalc.check("x^2", at={"x": float(at)}, expect=json.loads(path.read_text()))
    row = next(x for x in r.results if x.comparison == "expect")
    assert not row.ok and "non-finite derivative" in row.notes
    assert math.isnan(row.max_abs_err) or row.max_abs_err > 0
    cli = run("check", "x^2", "--expect", path, "-f", "json")
    assert cli.exit_code == 1


def test_max_steps_past_in_a_top_level_loop_names_the_loop_at_every_limit():
    # the loop's own count (each iteration) and the statement's (after it) name it alike
    src = "input x = 1.0\ns = 0\nfor i in range(3) {\n  s = s + x*x\n}\ns"
    for limit in ("6", "7", "8"):
        first = user_error("eval", src, "--max-steps", limit).stderr.splitlines()[0]
        assert first.endswith("in the loop at line 3, column 1"), first
