"""plot: a program's output and its derivative along one input (gradcalc.plots), and the picture
the command line draws.  Expected values come from closed forms, never from gradcalc."""
from __future__ import annotations

import json
import math
import re
import sys

import numpy as np
import pytest

from gradcalc.errors import GradcalcError
from gradcalc.plots import parse_over, plot

from gradcalc.cli.app import app

from cli_run import ok, ok_json, runner, user_error
from test_shell import in_terminal  # (a pseudo-terminal of 100 columns)

ESCAPE = re.compile(r"\x1b\[")
KINKED = "abs(x - 0.5) + (x^2 if x > 0 else 0)"


def test_values_and_derivatives_match_the_closed_form_at_every_sample():
    r = plot("x^3 - 2*x", "x", -2, 2, hessian=True)
    x = r["abscissae"]
    assert len(x) == 200 and x[0] == -2 and x[-1] == 2
    np.testing.assert_allclose(r["values"], x ** 3 - 2 * x, rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(r["derivatives"], 3 * x ** 2 - 2, rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(r["second_derivatives"], 6 * x, rtol=1e-14, atol=1e-14)
    assert r.marks == []


def test_kink_and_branch_are_marked_and_each_path_has_its_own_derivative():
    r = plot(KINKED, "x", -1, 1)
    x = r["abscissae"]
    want = np.where(x > 0.5, 1.0, -1.0) + np.where(x > 0, 2 * x, 0.0)
    np.testing.assert_allclose(r["derivatives"], want, atol=1e-14)
    np.testing.assert_allclose(r["values"], np.abs(x - 0.5) + np.where(x > 0, x * x, 0.0), atol=1e-14)
    marks = sorted(r.marks, key=lambda m: m["x"])
    assert [m["kind"] for m in marks] == ["path", "kink"]
    assert marks[0]["x"] == 0.0 and "'x > 0'" in marks[0]["note"]
    assert marks[1]["x"] == pytest.approx(0.5, abs=1e-12) and "abs" in marks[1]["note"]


def test_a_loop_that_runs_more_often_is_marked_where_its_count_changes():
    r = plot("y = 0\nfor i in range(3) { if x > i { y = y + x } }\ny", "x", -0.5, 3.5, samples=41)
    x = r["abscissae"]
    np.testing.assert_allclose(r["derivatives"], np.clip(np.ceil(x), 0, 3), atol=1e-14)
    assert [m["x"] for m in r.marks] == [0.0, 1.0, 2.0]


def test_jumps_are_marked_at_the_integers_only():
    # floor(x)'s distance from its kink, x - round(x), also jumps at half-integers: no kink there,
    # even when the samples are 0.2 apart
    r = plot("floor(x)", "x", -20, 20)
    assert [m["x"] for m in r.marks] == [float(k) for k in range(-20, 21)]
    r = plot("round(x) + abs(x)", "x", -2, 2, samples=41)
    assert sorted(m["x"] for m in r.marks) == [-1.5, -0.5, 0.0, 0.5, 1.5]


def test_a_tie_of_max_or_min_is_marked_where_the_gap_touches_zero():
    # the distance of max's and min's kink is the gap to the runner-up: never negative
    (m,) = plot("max([x, 1 - x, 0.2])", "x", -1, 1).marks
    assert m["x"] == pytest.approx(0.5, abs=1e-3) and "'max'" in m["note"]
    marks = plot("min([sin(3*x), cos(3*x)])", "x", -1, 1).marks  # sin = cos at 3x = pi/4 + k pi
    assert sorted(m["x"] for m in marks) == pytest.approx([-np.pi / 4, np.pi / 12], abs=1e-3)


def test_an_array_input_along_a_direction():
    # sum(w^3) along w0 + t v: value sum((w0 + t v)^3), derivative 3 sum((w0 + t v)^2 v),
    # second derivative 6 sum((w0 + t v) v^2)
    v = np.array([1.0, -2.0, 0.5])
    r = plot("input w[3] = [1, 2, 3]\nsum(w^3)", "w", -1, 1, direction=v, samples=7, hessian=True)
    t = r["abscissae"]
    points = np.array([1.0, 2.0, 3.0]) + t[:, None] * v
    np.testing.assert_allclose(r["values"], (points ** 3).sum(axis=1), rtol=1e-14)
    np.testing.assert_allclose(r["derivatives"], 3 * (points ** 2) @ v, rtol=1e-14)
    np.testing.assert_allclose(r["second_derivatives"], 6 * points @ (v * v), rtol=1e-14, atol=1e-14)


def test_wrt_another_input_along_the_interval():
    r = plot("x^2 * y", "x", 0, 1, wrt="y", at={"y": 3.0}, samples=5)
    np.testing.assert_allclose(r["derivatives"], r["abscissae"] ** 2)


def test_wrt_an_intermediate_value_holds_what_is_upstream_fixed():
    # d(h x)/dh = x, with h = sin(x) held fixed (as grad --wrt h)
    r = plot("h = sin(x)\nh * x", "x", 0, 1, wrt="h", samples=5)
    np.testing.assert_allclose(r["derivatives"], r["abscissae"])
    with pytest.raises(GradcalcError, match="inputs only"):
        plot("h = sin(x)\nh * x", "x", 0, 1, wrt="h", hessian=True)


def test_the_json_derivative_is_3x2_minus_2_at_every_sample():
    doc = ok_json("plot", "x^3 - 2*x", "--over", "x=-2:2")
    s = doc["samples"]
    x = np.array(s["abscissae"])
    assert len(x) == 200
    assert s["derivatives"] == pytest.approx(list(3 * x ** 2 - 2), abs=1e-13)
    assert doc["command"] == "plot" and doc["marks"] == [] and "second_derivatives" not in s


def test_json_hessian_and_marks():
    doc = ok_json("plot", KINKED, "--over", "x=-1:1", "--samples", "51", "--hessian")
    x = np.array(doc["samples"]["abscissae"])
    assert doc["samples"]["second_derivatives"] == pytest.approx(list(np.where(x > 0, 2.0, 0.0)))
    assert sorted(m["kind"] for m in doc["marks"]) == ["kink", "path"]


@pytest.mark.parametrize("args, words", [
    (["x^2", "--over", "x=1"], "NAME=LO:HI"),
    (["x^2", "--over", "x-1:1"], "NAME=LO:HI"),
    (["x^2", "--over", "z=-1:1"], "'z' is not an input"),
    (["x^2", "--over", "x=1:1"], "LO < HI"),
    (["x^2", "--over", "x=2:1"], "LO < HI"),
    (["input w[3] = [1, 2, 3]\nsum(w)", "--over", "w=0:1"], "--direction"),
    (["sin(x)", "--over", "x=-1:1", "--samples", "1"], "--samples"),
])
def test_user_errors(args, words):
    r = user_error("plot", *args)
    assert words in r.stderr


def test_parse_over_takes_constant_expressions():
    assert parse_over("x=-pi:pi/2") == ("x", -np.pi, np.pi / 2)
    with pytest.raises(GradcalcError):
        parse_over("x=[1, 2]:3")


@pytest.mark.parametrize("over", ["x=[0]:1", "x=0:[[1]]", "x=[0]:[1]"])
def test_over_refuses_a_one_element_array_as_an_end(over):
    # LO = [0] was taken as the number 0 (NumPy's float() of a 1-element array), HI = [1, 2] not
    r = user_error("plot", "sum(x^2)", "--over", over)
    assert r.stderr.splitlines() == ["error: --over: LO and HI are numbers, not arrays",
                                     "hint: for an array input, --over x=0:1 --direction V plots along x + t V, "
                                     "t from 0 to 1"]


def _axes_and_size(text: str, columns: int) -> list[str]:
    lines = text.rstrip("\n").split("\n")
    assert all(len(line) <= columns for line in lines), max(len(line) for line in lines)
    assert any(line.rstrip().endswith("-> (x)") for line in lines)  # the x axis
    assert sum(" | " in line for line in lines) >= 20  # a labelled y axis on every row
    return lines


def test_the_picture_has_its_size_axes_and_legend_and_no_escape_codes_when_piped():
    r = ok("plot", "f = x^3 - 2*x", "--over", "x=-2:2")
    assert not ESCAPE.search(r.stdout)
    lines = _axes_and_size(r.stdout, 80)
    assert lines[0] == "f along x, x from -2 to 2 (200 samples)"
    assert "⠤⠤ f" in r.stdout and "·· df/dx" in r.stdout
    # a title, 2 lines above the drawing, 20 rows, the x axis and its labels, a legend line per curve
    assert len(lines) == 1 + 2 + 20 + 2 + 2
    assert lines[-4].startswith("-----------|-") and lines[-4].endswith("-> (x)")
    ticks = [float(v) for v in lines[-3].split()[1:]]  # a label every 10 columns, from -2 to 2
    assert ticks[0] == -2 and ticks[-1] == 2 and len(ticks) == lines[-4].count("|") - 1
    np.testing.assert_allclose(np.diff(ticks), 4 / (len(ticks) - 1), atol=0.006)


def test_the_picture_fits_a_narrow_terminal():
    r = runner.invoke(app, ["plot", "x^3 - 2*x", "--over", "x=-2:2"], env={"COLUMNS": "60"})
    assert r.exit_code == 0
    _axes_and_size(r.stdout, 60)


def test_marks_are_listed_under_the_picture():
    out = ok("plot", KINKED, "--over", "x=-1:1").stdout
    assert "┊1 x = 0: change of path" in out and "┊2 x = 0.5: kink of 'abs'" in out
    many = ok("plot", "floor(x)", "--over", "x=-20:20").stdout
    assert "┊9 x = -12: kink of 'floor'" in many and "... and 32 more marks (-f json lists them all)" in many


@pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")
def test_a_terminal_gets_colour_unless_no_color():
    args = ["plot", "x^3 - 2*x", "--over", "x=-2:2"]
    coloured = in_terminal(*args)
    assert ESCAPE.search(coloured)  # (so that the next assertions can fail)
    plain = in_terminal(*args, env={"NO_COLOR": "1"})
    assert not ESCAPE.search(plain)
    assert "-> (x)" in plain
    _axes_and_size(plain.replace("\r\n", "\n"), 100)  # the terminal's width
    assert not ESCAPE.search(in_terminal(*args, env={"TERM": "dumb"}))


#: One complete escape sequence (CSI ... final byte), as a terminal reads it.
COMPLETE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


@pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")
@pytest.mark.parametrize("args", [["plot", "x^3 - 2*x", "--over", "x=-2:2"],
                                  ["check", "sin(x)*exp(x)", "--at", "x=0.7", "--sweep"]])
@pytest.mark.parametrize("columns", [None, "40", "160"])
def test_on_a_terminal_colour_codes_take_no_columns_and_are_never_cut(args, columns):
    # review HIGH 1: rows were cut counting colour codes as columns (30-73 visible columns
    # instead of 73, some ending in half an escape code)
    env = {} if columns is None else {"COLUMNS": columns}
    coloured = in_terminal(*args, env=env).replace("\r\n", "\n")
    assert ESCAPE.search(coloured)
    shown = COMPLETE.sub("", coloured)
    assert "\x1b" not in shown  # no partial sequence left
    plain = in_terminal(*args, env={**env, "NO_COLOR": "1"}).replace("\r\n", "\n")
    assert not ESCAPE.search(plain)
    assert shown == plain  # the same picture, column for column
    width = int(columns or 100)
    rows = [line for line in shown.split("\n") if re.match(r" *-?\d[\d.e+-]* \| ", line)]  # labelled rows
    assert len(rows) >= 12 and max(len(line) for line in shown.split("\n")) <= width
    assert len({len(line) for line in rows}) == 1  # every row of the drawing full width


@pytest.mark.parametrize("text, kind, where", [
    ("x if x > 0.125 else 0", "path", 0.125),              # (a sample bisection gave 0.123, 0.13)
    ("x if x^3 > 0.1 else 0", "path", 0.1 ** (1 / 3)),
    ("abs(x^3 - 0.1)", "kink", 0.1 ** (1 / 3)),             # (linear interpolation: 0.443)
    ("max([x^3, 0.1])", "kink", 0.1 ** (1 / 3)),            # (a tie; the V through samples: 0.354)
])
def test_marks_sit_where_the_kink_or_the_change_of_path_is_not_near_a_sample(text, kind, where):
    # 9 samples over -1:1 are 0.25 apart: the mark is located between them, to rounding
    (m,) = plot(text, "x", -1, 1, samples=9).marks
    assert m["kind"] == kind
    assert m["x"] == pytest.approx(where, rel=1e-12)


def test_an_interval_wider_than_a_float_spans_is_a_user_error():
    r = user_error("plot", "x", "--over", "x=-1e308:1e308", "--samples", "3")
    assert "is wider than a float can span" in r.stderr


@pytest.mark.parametrize("over, samples", [("0:5e-324", 200), ("0:1e-320", 200), ("1e20:1.00000000000001e20", 200),
                                           ("1:1.0000000000000004", 3)])
def test_an_interval_too_narrow_for_distinct_samples_is_a_user_error(over, samples):
    # 0:5e-324 drew a picture whose width in dots underflowed to 0 (an internal error, exit 3),
    # and its JSON gave 200 abscissae of 0.0; samples that round to one float are no curve
    r = user_error("plot", "sin(x)", "--over", f"x={over}", "--samples", samples)
    assert "is too narrow for" in r.stderr and "distinct samples" in r.stderr
    t = np.array(ok_json("plot", "sin(x)", "--over", "x=0:1e-300")["samples"]["abscissae"])
    assert len(t) == 200 and (np.diff(t) > 0).all()


def test_more_samples_than_the_element_budget_are_refused_before_they_are_made():
    # 2e8 samples over --max-elements 1000 took 14 s of system time making the abscissae first
    r = user_error("plot", "x^3", "--over", "x=0:2", "--samples", "200000000", "--max-elements", "1000")
    assert r.stderr.startswith("error: <expr>: --samples=200000000 asks for more samples than --max-elements=1000")


def test_a_value_given_to_over_is_labelled_by_the_flag_in_errors():
    # the label held the library's option marker (\x1f), in the JSON error and on stderr
    r = user_error("plot", "x", "--over", "x=a:1", "-f", "json")
    assert r.stderr.startswith("error: --over x:1:1: unknown name 'a'")
    assert json.loads(r.stdout)["error"]["source"] == "--over x"
    with pytest.raises(GradcalcError) as info:
        parse_over("x=a:1")
    assert str(info.value).startswith("over x:1:1: unknown name 'a'")


def test_a_huge_but_representable_interval_plots_without_warnings():
    r = ok("plot", "x", "--over", "x=-1e308:0", "--samples", "3")
    assert "Warning" not in r.stderr and "internal error" not in r.stderr


def test_a_line_records_its_own_point_in_json():
    # along x0 + t v, the point x0 is part of what the plot was made at (else it cannot be redrawn)
    doc = ok_json("plot", "sum(x^2)*y", "--over", "x=-1:1", "--direction", "[1,0]", "--at", "x=[1,2],y=3")
    assert doc["at"] == {"x": [1.0, 2.0], "y": 3.0}
    assert "x" not in ok_json("plot", "x^2*y", "--over", "x=-1:1", "--at", "y=3")["at"]


def _tick_labels(out: str, label: str = "x") -> list[str]:
    lines = out.rstrip("\n").split("\n")
    axis = next(i for i, line in enumerate(lines) if line.endswith(f"-> ({label})"))
    return lines[axis + 1].split()[1:]


@pytest.mark.parametrize("columns", ["120", "80", "60"])
@pytest.mark.parametrize("lo, hi", [(0, 1234567), (0, 0.0001234), (-1e-100, 1e-100), (-123456, -1),
                                    (-6.5e-300, 1e300)])
def test_x_tick_labels_are_whole_numbers_at_their_ticks(lo, hi, columns):
    # hunt7 F3: the last label was cut at the picture's edge (1.23e+06 as 1.23e+0, 0.000123 as
    # 0.00012) and a 10-character label (-6.67e-101) cut to 9 by the drawing library (-6.67e-10)
    r = runner.invoke(app, ["plot", "x", "--over", f"x={lo!r}:{hi!r}", "--samples", "5"],
                      env={"COLUMNS": columns})
    assert r.exit_code == 0, r.stderr
    assert max(len(line) for line in r.stdout.split("\n")) <= int(columns)
    labels = _tick_labels(r.stdout)
    want = lo + np.arange(len(labels)) * ((hi - lo) / (len(labels) - 1))  # a tick every 10 columns
    for text, tick in zip(labels, want):  # each label is its tick to the digits it shows
        assert len(text) <= 9 and abs(float(text) - tick) <= _half_unit(text) + abs(hi - lo) * 1e-9, (text, tick)
    assert float(labels[-1]) == pytest.approx(hi, rel=5e-3)


def _half_unit(text: str) -> float:
    """Half a unit in the last digit a number written as text shows (0.000123: 5e-7)."""
    mantissa, _, exponent = text.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    return 0.5 * 10.0 ** (int(exponent or 0) - decimals)


def _drawn_columns(picture: str) -> list[str]:
    """The drawing's rows, without the y axis's labels."""
    return [line.split(" | ", 1)[1] for line in picture.split("\n") if re.match(r" *-?[\d.]+(e[+-]\d+)? \| ", line)]


def test_a_curve_is_broken_where_a_sample_is_not_finite():
    # hunt7 F4: 1/x at -1, -0.5, 0, 0.5, 1: the sample at 0 is inf; the line joined -2 to 2 across it
    out = ok("plot", "1/x", "--over", "x=-1:1", "--samples", "5", "--of", "_").stdout
    rows = _drawn_columns(out)
    width = max(len(row) for row in rows)
    middle = [row[width // 4 + 1:3 * width // 4 - 1] for row in rows]  # strictly between x = -0.5 and 0.5
    assert all(set(m) <= {"⠀", " "} for m in middle), "\n".join(middle)


def _points_given(monkeypatch) -> list:
    import plotille
    given, plot_ = [], plotille.Figure.plot
    monkeypatch.setattr(plotille.Figure, "plot", lambda self, x, y, **k: (given.append(len(x)), plot_(self, x, y, **k)))
    return given


def test_many_samples_are_thinned_to_what_the_picture_shows(monkeypatch):
    # hunt7 F2: every sample went to the drawing library (10^6 samples: 98 s to draw 120 columns);
    # a spike of one sample, gaps of nan and a jump are drawn as with every sample
    from gradcalc.cli import pictures
    n = 200_001
    t = np.linspace(-1, 1, n)
    y = np.sin(5 * t) + (t > 0.3)
    y[12345] = 7.0  # a spike of one sample
    y[150_000:152_000] = np.nan  # a gap of 2,000 samples
    y[40_000] = np.nan  # and of one
    samples = {"abscissae": t, "values": y, "derivatives": 5 * np.cos(5 * t)}
    given = _points_given(monkeypatch)
    thinned = pictures.function_picture(samples, [], ["f", "df"], "x", width=100, with_colour=False)
    assert 0 < sum(given) <= 2 * 6 * 2 * 100  # (value: 6 at most a braille dot column, 2 a text column)
    monkeypatch.setattr(pictures, "_line_samples", lambda columns, y: np.arange(len(y)))
    monkeypatch.setattr(pictures, "_marker_samples", lambda columns, rows: np.flatnonzero(rows >= 0))
    assert pictures.function_picture(samples, [], ["f", "df"], "x", width=100, with_colour=False) == thinned
    assert sum(given) > 2 * n - 2_001 - 1  # (the comparison drew every finite sample)


def test_a_plot_whose_arrays_together_pass_the_budget_is_refused_before_it_runs():
    # hunt7 F1: --samples 10^8 passed the --max-elements test (10^8 is not more than 10^8) and was
    # killed holding 13 GB; a plot holds, for each sample, at least its abscissa, its point and the
    # pass's copy of it, a value and a derivative: 5 elements
    r = user_error("plot", "sin(x)", "--over", "x=0:1", "--samples", "500000", "--max-elements", "1000000")
    first = r.stderr.split("\n")[0]
    assert first.startswith("error: <expr>: --samples=500000 would hold ") and "--max-elements=1000000" in first
    held = int(re.search(r"would hold ([\d,]+) elements", first).group(1).replace(",", ""))
    assert held >= 5 * 500_000
    assert "hint: use at most " in r.stderr and "or raise --max-elements" in r.stderr
    assert len(ok_json("plot", "sin(x)", "--over", "x=0:1", "--samples", "100000", "--max-elements",
                       "1000000")["samples"]["values"]) == 100_000


def test_the_refusal_comes_before_the_samples_are_made():
    import tracemalloc
    tracemalloc.start()
    try:
        with pytest.raises(GradcalcError, match="would hold"):
            plot("sin(x)", "x", 0, 1, samples=2_000_000, max_elements=4_000_000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000  # (one array of the samples is 16 MB)


@pytest.mark.parametrize("text, samples, where", [
    ("abs(x - 1)", 200, [1]), ("abs(x + 1)", 200, [-1]),            # a kink at either end, alike
    ("relu(x + 1)", 200, [-1]), ("max([x, 1])", 200, [1]), ("max([x, -1])", 200, [-1]),
    ("floor(x)", 200, [-1, 0, 1]), ("floor(x)", 5, [-1, 0, 1]), ("floor(x)", 4, [-1, 0, 1]),
    ("round(x)", 4, [-0.5, 0.5]), ("round(x)", 200, [-0.5, 0.5]),  # (half-integers: its jumps)
    ("x % 0.5", 4, [-1, -0.5, 0, 0.5, 1]), ("x % 0.5", 200, [-1, -0.5, 0, 0.5, 1]),
    ("abs(x - x)", 20, []), ("max([x, x])", 20, []),                # a distance 0 everywhere: no one place
])
def test_kinks_are_marked_by_one_rule_at_any_number_of_samples_and_at_both_ends(text, samples, where):
    # hunt7 F6: abs(x - 1) was marked at 1 but abs(x + 1) not at -1; floor(x) at 5 samples not at 1;
    # round(x) at 4 samples not at 0.5; x % 0.5 at 4 samples at -0.25, where it has no kink
    marks = plot(text, "x", -1, 1, samples=samples).marks
    assert sorted(m["x"] for m in marks) == where and {m["kind"] for m in marks} <= {"kink"}


def test_a_mark_at_zero_is_written_0_not_minus_0():
    doc = ok_json("plot", "floor(x)", "--over", "x=-1:1", "--samples", "5")
    xs = [m["x"] for m in doc["marks"]]
    assert xs == [-1, 0, 1] and math.copysign(1.0, xs[1]) == 1.0


def test_a_sample_that_is_not_finite_warns_as_eval_and_jvp_warn_there():
    # hunt7 F4: 1/x at x = 0 (the middle of 5 samples) was "inf" with no warning
    doc = ok_json("plot", "1/x", "--over", "x=-1:1", "--samples", "5")
    assert doc["samples"]["values"][2] == "inf"
    want = ok_json("jvp", "1/x", "--at", "x=0", "--tangent", "x=1")["warnings"]
    assert ok_json("eval", "1/x", "--at", "x=0")["warnings"][0] in want
    assert doc["warnings"] == want
    assert ok_json("plot", "1/x", "--over", "x=-1:1", "--samples", "4")["warnings"] == []  # (no sample at 0)
    # each kind of non-finite: sqrt at -1 (nan, its derivative nan) and at 0 (its derivative inf)
    got = ok_json("plot", "sqrt(x)", "--over", "x=-1:1", "--samples", "201")["warnings"]
    for x in ("-1", "0"):
        for w in ok_json("jvp", "sqrt(x)", "--at", f"x={x}", "--tangent", "x=1")["warnings"]:
            assert w in got


def test_direction_needs_a_finite_vector_and_a_point():
    # hunt7 F5: --direction [nan,0] drew nothing, exit 0; a scalar input without --at ran from 0
    r = user_error("plot", "sum(v^2)", "--over", "v=0:1", "--at", "v=[1,2]", "--direction", "[nan,0]")
    assert "error: <expr>: --direction must be finite, not [nan, 0]" in r.stderr
    r = user_error("plot", "x^2", "--over", "x=0:1", "--direction", "2")
    assert "--direction runs along x + t V, through x's value; 'x' has none" in r.stderr
    assert "hint: give it with --at x=X0" in r.stderr
    doc = ok_json("plot", "x^2", "--over", "x=-1:1", "--direction", "2", "--at", "x=1", "--samples", "5")
    t = np.array(doc["samples"]["abscissae"])
    assert doc["samples"]["values"] == pytest.approx(list((1 + 2 * t) ** 2))
    assert doc["samples"]["derivatives"] == pytest.approx(list(4 * (1 + 2 * t)))


def test_an_at_value_of_the_plotted_input_is_noted_as_unused():
    # hunt7 F5: --at x=5 was ignored silently
    doc = ok_json("plot", "x^2", "--over", "x=0:1", "--at", "x=5", "--samples", "3")
    assert doc["warnings"] == ["--at x is not used: --over varies x from 0 to 1 (with --direction, the plot "
                               "runs along a line through the --at value)"]
    assert doc["samples"]["values"] == [0.0, 0.25, 1.0]


@pytest.mark.parametrize("src, over, of, names", [
    ("sum(x^2)", "x", "_", ("t", "v")),
    ("sum(v^2)", "v", "_", ("t", "u")),  # (the direction is not named as the input is)
    ("t = sum(v^2)", "v", "t", ("s", "u")),  # (nor the line's parameter as the output)
])
def test_a_direction_plots_title_names_the_line_with_names_it_does_not_show(src, over, of, names):
    r = runner.invoke(app, ["plot", src, "--over", f"{over}=0:1", "--at", f"{over}=[1,2]", "--of", of,
                            "--direction", "[1,0]", "--samples", "5"], env={"COLUMNS": "60"})
    assert r.exit_code == 0, r.output
    t, v = names
    assert r.stdout.splitlines()[0].startswith(f"{of} along {over} + {t} {v}, {v} = [1  0], {t} from 0 to 1")


def test_mark_legend_lines_wrap_within_the_columns():
    # (a legend line of 117 characters at COLUMNS=40, where the picture itself fits)
    from gradcalc.cli.pictures import function_picture
    r = plot("abs(x - 0.5) + (x^2 if x > 0 else 0)", "x", -1, 1)
    samples = {"abscissae": r["abscissae"], "values": r["values"], "derivatives": r["derivatives"]}
    for width in (40, 60, 80):
        text = function_picture(samples, r.marks, ["_", "d_/dx"], "x", width=width, with_colour=False)
        lines = text.splitlines()
        legend = lines[next(i for i, ln in enumerate(lines) if ln.startswith("  ┊1 x = ")):]
        assert max(map(len, legend)) <= width, legend
        assert " ".join(" ".join(legend).split()).count("change of path: a sample step flips the condition") == 1


def test_samples_where_an_operation_fails_have_no_value_and_the_rest_are_drawn():
    # cholesky([[1, x], [x, 1]]) is positive definite for |x| < 1 only: the batched pass over
    # the samples failed as a whole, and the plot was that error; those samples are now nan, as
    # where a run of the program fails, with the warning naming the first
    r = ok_json("plot", "x*cholesky([[1, x], [x, 1]])[1,1]", "--over", "x=0:2", "--samples", "41")
    s = r["samples"]
    x = np.array(s["abscissae"])
    values, slopes = (np.array(s[k], dtype=float) for k in ("values", "derivatives"))  # ("nan" too)
    inside = x < 1
    np.testing.assert_allclose(values[inside], x[inside] * np.sqrt(1 - x[inside] ** 2), rtol=1e-12)
    np.testing.assert_allclose(slopes[inside], np.sqrt(1 - x[inside] ** 2) - x[inside] ** 2 / np.sqrt(1 - x[inside] ** 2),
                               rtol=1e-12)
    assert np.isnan(values[~inside]).all() and np.isnan(slopes[~inside]).all()
    assert r["warnings"] == ["the program fails at the sample x = 1, which has no value: cholesky: the matrix "
                             "is not positive definite"]


def test_a_sample_where_a_matrix_is_singular_has_no_value():
    # sum(inv([[x, 1], [1, 2]])) = x / (2x - 1): singular at the sample x = 0.5, which made the
    # whole plot the error "'inv': singular matrix"; now only that sample is nan
    r = ok_json("plot", "sum(inv([[x, 1], [1, 2]]))", "--over", "x=0:1", "--samples", "201")
    x = np.array(r["samples"]["abscissae"])
    values = np.array(r["samples"]["values"], dtype=float)
    pole = x == 0.5
    assert pole.sum() == 1 and np.isnan(values[pole]).all()
    np.testing.assert_allclose(values[~pole], x[~pole] / (2 * x[~pole] - 1), rtol=1e-12)
    assert r["warnings"] == ["the program fails at the sample x = 0.5, which has no value: 'inv': singular matrix"]
