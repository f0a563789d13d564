"""`check` for CI (SPEC §5): several sources, error results, # check: lines, expectation
files, exit codes 0/1/2, JUnit errors, GitHub Actions annotations and step summary, and
--directions tolerances that scale with the problem size."""
from __future__ import annotations

import json
import math
import os
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import gradcalc
from gradcalc import numerics
from gradcalc.cli import github
from gradcalc.errors import LimitError
from gradcalc.primitives import REGISTRY, safe_mul
from gradcalc.suite import (CheckError, check_source, check_sources, file_options, result_id, row_text,
                            summary_line)

from cli_run import ok, ok_json, run, user_error
from rules import replace_rule


def write(path, text):
    path.write_text(text)
    return str(path)


@pytest.fixture
def three(tmp_path, monkeypatch):
    """good.grad, bad.grad (a syntax error) and kink.grad (abs at 0), in tmp_path (the cwd)."""
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "good.grad", "# check: --at x=0.3\nsin(x)*x\n")
    write(tmp_path / "bad.grad", "y = x +* 2\n")
    write(tmp_path / "kink.grad", "# check: --at x=[0,1,2]\nsum(abs(x))\n")
    return tmp_path


# -- one source's error does not stop the others ------------------------------

def test_an_error_in_one_source_is_an_error_result_and_junit_error(three):
    r = run("check", "good.grad", "bad.grad", "kink.grad", "--junit-xml", "r.xml")
    assert r.exit_code == 2, (r.stdout, r.stderr)
    suite = ET.parse(three / "r.xml").getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "0", "1")
    cases = {c.get("classname"): c for c in suite.findall("testcase")}
    assert set(cases) == {"gradcalc.check.good", "gradcalc.check.bad", "gradcalc.check.kink"}
    error = cases["gradcalc.check.bad"].find("error")
    assert error.get("type") == "syntax" and "bad.grad:1:8" in error.text
    assert cases["gradcalc.check.good"].find("error") is None
    assert cases["gradcalc.check.kink"].find("failure") is None
    # the error reads as every user error does, on stderr, with its caret
    assert "error: bad.grad:1:8: expected an expression" in r.stderr and "^" in r.stderr


def test_json_carries_the_error_result_with_its_position(three):
    r = run("check", "good.grad", "bad.grad", "-f", "json")
    assert r.exit_code == 2
    doc = json.loads(r.stdout)
    assert doc["ok"] is False
    err = [x for x in doc["results"] if "error" in x]
    assert err == [{"source": "bad.grad", "ok": False,
                    "error": {"kind": "syntax", "message": "expected an expression, found '*'", "line": 1,
                              "column": 8, "source": "bad.grad", "hint": None}}]
    assert [x["source"] for x in doc["results"] if "error" not in x] == ["good.grad"]
    # as every user error's JSON (SPEC §7), the document carries the (first) error too, in the same
    # keys (README, JSON: "source" is the file the error is in; it said "file" in a result)
    assert doc["error"] == err[0]["error"]
    assert list(doc["error"]) == ["kind", "message", "line", "column", "source", "hint"]
    assert "error" not in json.loads(run("check", "good.grad", "-f", "json").stdout)


def test_exit_code_2_wins_over_a_failure_and_0_when_all_pass(three, monkeypatch):
    assert run("check", "good.grad", "kink.grad").exit_code == 0
    replace_rule(monkeypatch, REGISTRY["sin"], "vjp", (lambda g, ans, x, **_: safe_mul(g, 1.01 * REGISTRY["cos"](x)),))
    assert run("check", "good.grad").exit_code == 1
    assert run("check", "good.grad", "bad.grad").exit_code == 2


def test_a_bug_met_in_one_source_is_its_error_result_and_the_others_are_checked(three, monkeypatch):
    """A bug (any exception that is no user error) while checking kink.grad: that source is an
    error result of kind "internal", the others are checked, the reports are written, exit 3."""
    def broken(x):
        raise RuntimeError("a bug")
    monkeypatch.setattr(REGISTRY["abs"], "impl", broken)
    r = run("check", "good.grad", "kink.grad", "--junit-xml", "r.xml", "-f", "json")
    assert r.exit_code == 3, (r.stdout, r.stderr)
    doc = json.loads(r.stdout)
    (bug,) = [x for x in doc["results"] if "error" in x]
    assert bug["source"] == "kink.grad" and bug["error"]["kind"] == "internal"
    assert bug["error"]["message"].startswith("internal error (RuntimeError: a bug at ")
    assert "in broken): a bug in gradcalc" in bug["error"]["message"]
    assert [x["ok"] for x in doc["results"] if "error" not in x] == [True]
    cases = {c.get("classname"): c for c in ET.parse(three / "r.xml").getroot().findall("testcase")}
    assert cases["gradcalc.check.kink"].find("error").get("type") == "internal"
    assert cases["gradcalc.check.good"].find("error") is None
    assert check_sources(["good.grad", "kink.grad"]).exit_code == 3


def test_a_source_that_runs_out_of_memory_is_its_limit_error_and_the_others_are_checked(three, monkeypatch):
    """Out of memory while checking kink.grad (the machine's limit, not a bug): that source is an
    error result of kind "limit" saying so, exit 2, where it was an internal error (exit 3)."""
    def exhausted(x):
        raise MemoryError()
    monkeypatch.setattr(REGISTRY["abs"], "impl", exhausted)
    r = run("check", "good.grad", "kink.grad", "-f", "json")
    assert r.exit_code == 2, (r.stdout, r.stderr)
    doc = json.loads(r.stdout)
    (short,) = [x for x in doc["results"] if "error" in x]
    assert short["source"] == "kink.grad" and short["error"]["kind"] == "limit"
    assert short["error"]["message"].startswith("out of memory")
    assert [x["ok"] for x in doc["results"] if "error" not in x] == [True]


def test_finite_differences_past_the_work_limit_are_refused_before_the_check_runs(monkeypatch):
    # x[50000] asks the full Jacobian's differences for 1e5 points of 5e4 elements, past 20 x
    # 1e8: refused first, where forward mode's probes (3 directions at 3 scales) ran before the
    # refusal (10 GB for x[1e8])
    monkeypatch.setattr(numerics, "_forward_probes", lambda *a: pytest.fail("the probes ran first"))
    monkeypatch.setattr(numerics, "jacobian_blocks", lambda *a: pytest.fail("reverse mode ran first"))
    with pytest.raises(LimitError, match="the finite differences of the full Jacobian with respect to 'x'"):
        gradcalc.check("input x[50000]\nsum(x)", points=1)


@pytest.mark.parametrize("make, kind, words", [
    (lambda d: str(d / "missing.grad"), "file", "does not exist"),
    (lambda d: write(d / "novalue.grad", "y = x * 2\n"), "usage", "has no value"),
    (lambda d: (d / "empty").mkdir() or str(d / "empty"), "value", "no .grad files"),
    (lambda d: write(d / "cplx.grad", "# check: --at x=1 --method complex\nabs(x)\n"), "usage", "complex"),
])
def test_sources_that_cannot_be_checked(tmp_path, make, kind, words):
    good = write(tmp_path / "good.grad", "# check: --at x=2\nx^3\n")
    r = check_sources([make(tmp_path), good])
    assert r.exit_code == 2 and not r.ok
    (bad,) = [x for x in r.results if isinstance(x, CheckError)]
    assert bad.kind == kind and words in bad.message
    (fine,) = [x for x in r.results if not isinstance(x, CheckError)]
    assert fine.ok and fine.source == good


def test_check_source_never_raises_a_user_error():
    c = check_source("y = ")
    assert c.error is not None and c.error.kind == "syntax" and not c.ok
    assert c.error.as_dict()["error"]["line"] == 1


def test_expect_with_several_sources_is_refused(three):
    write(three / "e.json", json.dumps({"gradient": {"x": 1.0}}))
    r = user_error("check", "good.grad", "kink.grad", "--expect", "e.json")
    assert "--expect compares one source" in r.stderr


# -- # check: lines --------------------------------------------------------------

def test_check_lines_give_a_file_its_options(tmp_path):
    p = write(tmp_path / "f.grad", "# a model\n# check: --at 'x=[1, 2]' --rtol=1e-7\n"
                                   "# check: --wrt x --directions 2 --taylor\ny = sum(x^3) + z\n")
    options = file_options(gradcalc.errors.Source(open(p).read(), p))
    assert options["rtol"] == 1e-7 and options["wrt"] == ["x"] and options["directions"] == 2
    assert options["taylor"] is True and options["at"]["x"].tolist() == [1.0, 2.0]
    assert "z" not in options["at"]
    # "#check:" (no space) is a comment, not an options line
    options = file_options(gradcalc.errors.Source("# check: --points 3\n#check: --seed 4\nx\n", "t"))
    assert options == {"points": 3}


def test_options_after_the_first_statement_are_comments():
    src = gradcalc.errors.Source("y = x\n# check: --bogus\n", "t.grad")
    assert file_options(src) == {}


def test_the_command_line_wins_over_check_lines(tmp_path):
    p = write(tmp_path / "f.grad", "# check: --at x=1,y=2 --rtol 1e-7\nx^2 * y\n")
    c = check_source(p)
    assert c.ok and c.options["rtol"] == 1e-7 and c.options["at"]["y"] == 2.0
    c = check_source(p, overrides={"at": {"y": np.array(5.0)}, "rtol": 1e-5, "wrt": None})
    assert c.options["rtol"] == 1e-5
    assert c.options["at"]["x"] == 1.0 and c.options["at"]["y"] == 5.0  # at merges name by name
    # d(x^2 y)/dy = x^2 = 1 at the merged point, whatever y is
    res = gradcalc.check("x^2 * y", at={"x": 1.0, "y": 5.0})
    assert [r.max_abs_err for r in c.results] == [r.max_abs_err for r in res.results]


@pytest.mark.parametrize("line, col, words", [
    ("# check: --at x=1 --bogus", 19, "unknown option '--bogus'"),
    ("# check: --points many", 10, "'many' is not an integer"),
    ("# check: --rtol", 10, "--rtol needs a value"),
    ("# check: --method secant", 10, "unknown method 'secant'"),
    ("# check: --taylor=yes", 10, "--taylor takes no value"),
    ("# check: --at 'x=1", 10, "cannot split the line"),
])
def test_a_bad_check_line_is_an_error_result_at_its_line(tmp_path, line, col, words):
    p = write(tmp_path / "f.grad", f"# first\n{line}\nx^2\n")
    c = check_source(p)
    err = c.error
    assert err is not None and err.kind == "usage" and words in err.message
    assert (err.file, err.line, err.column) == (p, 2, col)


def test_a_bad_value_in_a_check_line_points_at_that_line(tmp_path):
    c = check_source(write(tmp_path / "f.grad", "# one\n# check: --rtol 1e-7 --at x=[1,\nx\n"))
    assert c.error is not None and (c.error.line, c.error.column) == (2, 27)
    assert c.error.message.startswith("# check: --at: ") and c.error.kind == "syntax"


def test_an_at_file_in_a_check_line_is_relative_to_the_program(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub" / "point.json", json.dumps({"x": [1.0, 2.0]}))
    p = write(tmp_path / "sub" / "f.grad", "# check: --at @point.json\nsum(x^2)\n")
    monkeypatch.chdir(tmp_path)
    c = check_source("sub/f.grad")
    assert c.ok and c.options["at"]["x"].tolist() == [1.0, 2.0], c.results
    assert p.endswith("f.grad")


# -- expectation files -----------------------------------------------------------

def test_update_expect_then_an_edit_fails_naming_the_entry(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "x.grad", "# check: --at x=[0.5,1.5]\ny = sum(sin(x) * x^2)\ny\n")
    r = ok("check", "x.grad", "--update-expect", "-f", "plain")
    assert "[expectation file]" in r.stdout and r.stderr == "wrote x.expect.json\n"
    assert (tmp_path / "x.expect.json").exists()
    ok("check", "x.grad")  # compared automatically, and equal
    write(tmp_path / "x.grad", "# check: --at x=[0.5,1.5]\ny = sum(sin(x) * x^2.01)\ny\n")
    r = run("check", "x.grad", "-f", "plain")
    assert r.exit_code == 1
    (line,) = [t for t in r.stdout.splitlines() if t.startswith("FAIL")]
    assert "[expectation file]" in line and "entry gradient['x'][1]: stored " in line
    assert "rtol bound" in line
    # the stored value is the old program's gradient, by its closed form 2x sin x + x^2 cos x
    stored = json.loads((tmp_path / "x.expect.json").read_text())["gradient"]["x"][1]
    assert stored == pytest.approx(2 * 1.5 * math.sin(1.5) + 1.5 ** 2 * math.cos(1.5), rel=1e-12)
    assert run("check", "x.grad", "--no-expect").exit_code == 0


@pytest.mark.parametrize("program, command", [("sum(sin(x) * x)", "grad"), ("sin(x) * x", "jacobian")])
def test_an_expectation_file_is_what_grad_or_jacobian_json_writes(tmp_path, program, command):
    p = write(tmp_path / "f.grad", f"# check: --at x=[0.5,1.5]\n{program}\n")
    ok("check", p, "--update-expect")
    written = (tmp_path / "f.expect.json").read_text()
    assert written == run(command, p, "--at", "x=[0.5,1.5]", "-f", "json").stdout
    assert json.loads(written)["at"] == {"x": [0.5, 1.5]}


def test_an_expectation_is_compared_at_the_point_it_records(tmp_path):
    # the issue: check cube.grad --expect cube.json said "input 'x' has no value"
    cube = write(tmp_path / "cube.grad", "x^3\n")
    stored = tmp_path / "cube.json"
    stored.write_text(run("grad", cube, "--at", "x=2", "-f", "json").stdout)
    doc = ok_json("check", cube, "--expect", str(stored))
    kinds = {x["comparison"]: x for x in doc["results"]}
    assert set(kinds) == {"jacobian", "expect"} and doc["ok"]
    # given another point on the command line, the expectation is still compared at its own
    doc = ok_json("check", cube, "--expect", str(stored), "--at", "x=3")
    assert doc["ok"] and {x["comparison"] for x in doc["results"]} == {"jacobian", "expect"}


def test_update_expect_needs_a_file(tmp_path):
    r = check_sources(["x^2"], overrides={"at": {"x": np.array(1.0)}}, update_expect=True)
    assert r.exit_code == 2 and "update_expect" in r.results[0].message


def test_an_unreadable_expectation_is_an_error_result(tmp_path):
    p = write(tmp_path / "f.grad", "# check: --at x=1\nx^2\n")
    write(tmp_path / "f.expect.json", "{not json")
    r = check_sources([p])
    assert r.exit_code == 2 and "cannot be read" in r.results[0].message
    assert check_sources([p], no_expect=True).exit_code == 0


# -- failing results carry their numbers --------------------------------------

def test_a_failure_records_ad_fd_and_the_rtol_bound(monkeypatch):
    replace_rule(monkeypatch, REGISTRY["sin"], "vjp", (lambda g, ans, x, **_: safe_mul(g, 1.01 * REGISTRY["cos"](x)),))
    (r,) = gradcalc.check("sin(x)", at={"x": 0.4}).results
    assert not r.ok and r.worst_index == []
    assert r.extra["ad"] == pytest.approx(1.01 * math.cos(0.4), rel=1e-14)
    assert r.extra["fd"] == pytest.approx(math.cos(0.4), rel=1e-9)
    assert r.extra["bound"] == "rtol" and r.extra["allowed"] == pytest.approx(1e-8 + 1e-6 * math.cos(0.4))


def test_a_failure_near_zero_breaks_the_atol_bound(monkeypatch):
    # d sin(x)/dx at pi/2 is ~6e-17: rtol |fd| is nothing, atol is the bound broken
    replace_rule(monkeypatch, REGISTRY["sin"], "vjp", (lambda g, ans, x, **_: safe_mul(g, REGISTRY["cos"](x) + 1e-6),))
    (r,) = gradcalc.check("sin(x)", at={"x": math.pi / 2}).results
    assert not r.ok and r.extra["bound"] == "atol"
    assert abs(r.extra["fd"]) < 1e-9 and r.extra["ad"] == pytest.approx(1e-6, rel=1e-6)
    assert "atol bound: atol 1e-08" in row_text(r)


def test_plain_lines_say_what_was_compared_and_keep_the_notes():
    r = ok("check", "sum(abs(x))", "--at", "x=[0,1]", "-f", "plain")
    (line, summary) = r.stdout.splitlines()
    assert line.startswith("ok <expr> point=0 d_/dx [full Jacobian, central] ")
    assert line.endswith("| near the kink of 'abs' (line 1, column 5)")
    assert summary == "check: 1 passed, 0 failed, 0 errors; full Jacobian, central; rtol 1e-06, atol 1e-08"
    r = ok("check", "sum(x^2)", "--at", "x=[0,1]", "--directions", "2", "-f", "plain")
    assert "[central (2 directions)]" in r.stdout


SUMMARY = re.compile(r"^check: \d+ passed, \d+ failed, \d+ errors?; [^;]+; (rtol \S+, atol \S+|tolerances per source)$")


@pytest.mark.parametrize("args", [
    ["sin(x)", "--at", "x=1"],
    ["sin(x)", "--at", "x=1", "--directions", "2"],
    ["sin(x)", "--at", "x=1", "--method", "complex", "--taylor"],
    ["input x[3]; sum(x)", "--points", "2"],
])
def test_the_summary_line_reads_the_same_in_every_mode(args):
    for fmt in ("table", "plain"):
        out = ok("check", *args, "-f", fmt).stdout.splitlines()
        line = out[0] if fmt == "table" else out[-1]
        assert SUMMARY.match(line), line


def test_result_ids_are_unique_and_readable(tmp_path):
    p = write(tmp_path / "mlp.grad", "# check: --at W1=[1,2] --points 1\nloss = sum(W1 * x)\n")
    ok("check", p, "--update-expect", "--at", "x=3", "--points", "0")
    r = check_sources([p])  # point 0 lacks x: the random point 1, and the expectation at its point
    ids = [result_id(x) for x in r.results]
    assert len(set(ids)) == len(ids)
    assert ids == ["mlp.grad::dloss/dW1@point1", "mlp.grad::dloss/dx@point1", "mlp.grad::dloss/dW1@expect",
                   "mlp.grad::dloss/dx@expect"]
    r = check_sources([p], overrides={"at": {"x": np.array(3.0)}, "points": 0, "directions": 2})
    assert [result_id(x) for x in r.results][:2] == ["mlp.grad::dloss/dW1@point0[directions]",
                                                     "mlp.grad::dloss/dx@point0[directions]"]


# -- GitHub Actions -------------------------------------------------------------

@pytest.fixture
def wrong(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "wrong.grad", "# check: --at x=2\n\ny = x^3\n")
    write(tmp_path / "wrong.expect.json", json.dumps({"schema": 1, "command": "grad", "of": "y",
                                                      "gradient": {"x": 12.001}}))
    return tmp_path


def test_annotations_under_github_actions(wrong, monkeypatch):
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(wrong / "summary.md"))
    r = run("check", "wrong.grad")
    assert r.exit_code == 1
    (note,) = [t for t in r.stdout.splitlines() if t.startswith("::")]
    assert note.startswith("::error file=wrong.grad,line=3,title=gradcalc check%3A dy/dx (expectation file) "
                           "failed::dy/dx at point 0: entry gradient['x']: stored 12.001, computed 12.0")
    summary = (wrong / "summary.md").read_text()
    assert "| ❌ | wrong.grad | 0 | dy/dx | expectation file |" in summary
    assert "| ✅ | wrong.grad | 0 | dy/dx | full Jacobian, central |" in summary
    assert "**check: 1 passed, 1 failed, 0 errors;" in summary
    run("check", "wrong.grad")  # appended, not overwritten
    assert (wrong / "summary.md").read_text().count("### gradcalc check") == 2


def test_no_annotations_outside_github_actions(wrong, monkeypatch):
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    r = run("check", "wrong.grad")
    assert r.exit_code == 1 and "::error" not in r.stdout + r.stderr


def test_an_error_result_is_annotated_at_its_line_and_column(three, monkeypatch):
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    r = run("check", "good.grad", "bad.grad", "-f", "json")
    assert r.exit_code == 2
    json.loads(r.stdout)  # stdout stays one JSON object: the annotations go to stderr
    assert ("::error file=bad.grad,line=1,col=8,title=gradcalc check%3A syntax error::"
            "expected an expression, found '*'") in r.stderr


def test_workflow_command_escaping():
    # GitHub's toolkit: data escapes % CR LF; properties also : and ,
    assert github.escape_data("50% a:b,c\r\nd") == "50%25 a:b,c%0D%0Ad"
    assert github.escape_property("50% a:b,c\r\nd") == "50%25 a%3Ab%2Cc%0D%0Ad"
    assert github.command("error", "m", file="a,b.grad", line=None, title="t") == "::error file=a%2Cb.grad,title=t::m"


# -- --directions at large sizes ---------------------------------------------------

def test_directions_pass_a_correct_program_at_a_million_elements():
    # the issue: at n = 20000 this failed with max_rel_err=5.96e-06, a rounding error
    r = ok("check", "sum(x^2)", "--at", "x=ones(1000000)", "--directions", "4", "-f", "plain")
    assert r.stdout.startswith("ok <expr> point=0 d_/dx [central (4 directions)]")


def _scaled_pow_rule(g, ans, x, p):  # d x^p = 1.001 p x^(p-1): a derivative 0.1% wrong
    return safe_mul(g, 1.001 * p * x ** (p - 1))


def test_directions_fail_a_derivative_wrong_by_1e3_at_a_million_elements(monkeypatch):
    # the rule wrong the same way in both modes: the dot-product test cannot see it, only the
    # directional differences can, and their rounding allowance must not hide it
    replace_rule(monkeypatch, REGISTRY["pow_const"], "vjp", (_scaled_pow_rule,))
    replace_rule(monkeypatch, REGISTRY["pow_const"], "jvp", (_scaled_pow_rule,))
    (r,) = gradcalc.check("sum(x^2)", at={"x": np.ones(10 ** 6)}, directions=4).results
    assert not r.ok and r.extra["bound"] in ("rtol", "rounding")
    assert r.extra["ad"] == pytest.approx(1.001 * r.extra["fd"], rel=1e-4)


def test_directions_fail_one_wrong_direction_at_a_million_elements(monkeypatch):
    # J v off by 1e-3 (relative) along one of the four directions only
    tangents = numerics._tangents

    def one_off(tr, w, outs, v):
        jv = tangents(tr, w, outs, v)
        jv[0][1] = jv[0][1] * (1 + 1e-3)
        return jv
    monkeypatch.setattr(numerics, "_tangents", one_off)
    (r,) = gradcalc.check("sum(x^2)", at={"x": np.ones(10 ** 6)}, directions=4).results
    assert not r.ok and r.worst_index == [1] and "bound" in r.extra
    assert r.extra["ad"] == pytest.approx((1 + 1e-3) * r.extra["fd"], rel=1e-4)


def test_rounding_allowance_follows_its_formula():
    # sum(x^2) at ones(n): |f| = n at the points evaluated, sum_i |J_i v_i| = 2 sum |v_i|
    from gradcalc.stencil import EPS
    size = np.full((1,), 1e6)
    spread = np.array([1600.0])
    slack = numerics.directional_slack("central", 2.0 ** -17, size, spread, 10 ** 6)
    expected = numerics.ROUNDING_MARGIN * EPS * 1e6 / 2.0 ** -17 + 1e6 * EPS / (1 - 1e6 * EPS) * 1600
    assert slack == pytest.approx([expected], rel=1e-12)
    assert numerics.directional_slack("complex", 1e-20, size, spread, 10 ** 6) == pytest.approx(
        [1e6 * EPS / (1 - 1e6 * EPS) * 1600], rel=1e-12)
    assert numerics.gamma(10 ** 20) == math.inf


def test_summary_of_a_suite_names_tolerances_per_source(tmp_path):
    a = write(tmp_path / "a.grad", "# check: --at x=1 --rtol 1e-7\nx^2\n")
    b = write(tmp_path / "b.grad", "# check: --at x=1\nx^2\n")
    r = check_sources([a, b])
    assert r.rtol is None and summary_line(r).endswith("; tolerances per source")
    r = check_sources([a])
    assert summary_line(r).endswith("; rtol 1e-07, atol 1e-08")


def test_an_expect_file_named_on_the_command_line_must_exist(three):
    r = run("check", "good.grad", "--expect", "nothere.json", "-f", "plain")
    assert r.exit_code == 2 and "expectation file 'nothere.json' cannot be read" in r.stdout


def test_update_expect_writes_the_named_file_for_program_text(tmp_path):
    path = tmp_path / "e.json"
    ok("check", "x^2", "--at", "x=1", "--update-expect", "--expect", str(path))
    assert json.loads(path.read_text())["gradient"] == {"x": 2.0}
    r = run("check", "x^2", "--at", "x=1", "--update-expect")
    assert r.exit_code == 2 and "--update-expect writes NAME.expect.json" in r.stderr


def test_update_expect_and_no_expect_contradict(three):
    r = user_error("check", "good.grad", "--update-expect", "--no-expect")
    assert "--update-expect writes the expectation files that --no-expect skips" in r.stderr


def test_expect_and_no_expect_contradict(tmp_path):
    # --expect F --no-expect silently compared with F (README: two options that ask for
    # different things are an error, not a silent choice)
    path = tmp_path / "e.json"
    ok("check", "x^2", "--at", "x=1", "--update-expect", "--expect", str(path))
    r = user_error("check", "x^2", "--at", "x=1", "--expect", str(path), "--no-expect")
    assert "--expect names the expectation file that --no-expect skips" in r.stderr


def test_a_long_step_summary_lists_failures_first_within_its_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(github, "SUMMARY_ROWS", 3)
    p = write(tmp_path / "f.grad", "# check: --at 'x=[1,2]' --points 4\ny = sum(x * z)\n")
    write(tmp_path / "f.expect.json", json.dumps({"gradient": {"x": [0.0, 0.0]}, "of": "y", "at": {"z": [3, 4]}}))
    r = check_sources([p])
    assert sum(not x.ok for x in r.results) == 1 and len(r.results) == 9  # 4 points x 2 inputs, 1 stored
    text = github.summary_markdown(r, str)
    rows = [line for line in text.splitlines() if line.startswith("| ✅") or line.startswith("| ❌")]
    assert len(rows) == 3 and sum(row.startswith("| ❌") for row in rows) == 1
    assert "(6 more passing results are in the log and the JUnit file)" in text


def test_an_unwritable_step_summary_is_a_warning(wrong, monkeypatch):
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(wrong / "no" / "such" / "dir.md"))
    r = run("check", "wrong.grad")
    assert r.exit_code == 1 and "warning: GITHUB_STEP_SUMMARY: cannot append" in r.stderr


def test_json_words_an_error_result_as_the_command_line_does():
    r = run("check", "x^2", "--at", "x=1", "--update-expect", "-f", "json")
    (entry,) = json.loads(r.stdout)["results"]
    assert entry["error"]["message"].startswith("--update-expect writes NAME.expect.json")
    assert entry["error"]["hint"] == "give the file with --expect FILE"
    # the library words the option as its keyword
    (err,) = check_sources(["x^2"], overrides={"at": {"x": np.array(1.0)}}, update_expect=True).results
    assert err.as_dict()["error"]["message"].startswith("update_expect writes")


def test_directions_allow_for_rounding_that_accumulates(monkeypatch):
    # a cumulative sum rounds each partial sum: at n = 2e5 its differences carry ~2e-7 of
    # rounding, several times eps |f| / h; measured on the differences themselves, it is allowed
    (x,) = gradcalc.check("input x[200000]; cumsum(x)", points=1, directions=4).results
    assert x.ok
    monkeypatch.setattr(numerics, "NOISE_MARGIN", 0.0)  # the formula alone is not enough
    (x,) = gradcalc.check("input x[200000]; cumsum(x)", points=1, directions=4).results
    assert not x.ok and x.extra["bound"] == "rounding"


def test_directions_still_fail_a_wrong_cumsum_rule(monkeypatch):
    for rule in ("vjp", "jvp"):  # both modes 0.1% wrong: only the directional differences can see it
        (orig,) = getattr(REGISTRY["cumsum"], rule)
        replace_rule(monkeypatch, REGISTRY["cumsum"], rule,
                            (lambda g, ans, x, _orig=orig, **kw: _orig(safe_mul(g, 1.001), ans, x, **kw),))
    (x,) = gradcalc.check("input x[200000]; cumsum(x)", points=1, directions=4).results
    assert not x.ok and "bound" in x.extra
    assert x.extra["ad"] == pytest.approx(1.001 * x.extra["fd"], rel=1e-4)


def test_a_lone_source_that_cannot_be_checked_reads_as_any_command_error(tmp_path):
    r = user_error("check", "y = ")
    assert r.stdout == "" and r.stderr.startswith("error: <expr>:1:5: expected an expression")
    xml = tmp_path / "r.xml"
    r = user_error("check", "y = ", "--junit-xml", str(xml), "-f", "plain")
    assert r.stdout.startswith("ERROR <expr>:1:5: syntax error: ")  # plain: a line per result, always
    assert ET.parse(xml).getroot().find("testcase/error").get("type") == "syntax"


# -- a shared parameter file (SPEC §3), a missing file, one path rule ------------------

@pytest.fixture
def params(tmp_path, monkeypatch):
    """params.json in the cwd (x and two names no program here takes) and sub/params.json."""
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "params.json", json.dumps({"x": 3.0, "lr": 0.1, "momentum": 0.9}))
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub" / "params.json", json.dumps({"x": [1.0, 2.0], "lr": 0.5}))
    return tmp_path


def test_check_ignores_the_unused_names_of_a_parameter_file_with_a_note(params):
    r = ok("check", "x^2", "--at", "@params.json", "-f", "plain")
    assert r.stdout.startswith("ok <expr> point=0 d_/dx")
    # the note grad gives, naming the source (check has several)
    assert ok("grad", "x^2", "--at", "@params.json").stderr == \
        "note: --at @params.json: 'lr', 'momentum' are not inputs of the program; ignored\n"
    assert r.stderr == "note: <expr>: --at @params.json: 'lr', 'momentum' are not inputs of the program; ignored\n"
    r = user_error("check", "x^2", "--at", "@params.json", "--at", "lr=1", "-f", "plain")  # typed: an error
    assert "'lr' is not an input of the program" in r.stdout and "note:" not in r.stderr
    c = check_source("x^2", overrides={"at": {"x": np.array(3.0), "lr": np.array(1.0)}})  # the API's: typed
    assert c.error is not None and "'lr' is not an input" in c.error.message


def test_a_check_line_s_parameter_file_is_read_beside_the_program(params):
    p = write(params / "sub" / "f.grad", "# check: --at @params.json\nsum(x^2)\n")
    c = check_source("sub/f.grad")
    assert c.ok and c.options["at"]["x"].tolist() == [1.0, 2.0] and "lr" not in c.options["at"]
    assert c.ignored == [f"--at @{os.path.join('sub', 'params.json')}: 'lr' is not an input of the program; ignored"]
    r = ok("check", p, "--at", "@params.json", "-f", "plain")  # the command line's file wins over the line's
    assert "max_abs_err" in r.stdout and "'lr', 'momentum' are not inputs" in r.stderr
    assert check_sources([p], overrides={"at": gradcalc.values.parse_assignments(["@params.json"])}).ok


def test_a_missing_file_is_reported_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for fmt in ("table", "plain", "json"):
        r = user_error("check", "missing.grad", "-f", fmt)
        assert r.stderr == ("error: the file 'missing.grad' does not exist\n"
                            "hint: SOURCE is a file, - for stdin, or program text\n"), fmt
    r = user_error("check", "missing.grad", "x^2", "--at", "x=1", "-f", "plain")
    assert r.stderr.count("error:") == 1 and r.stdout.startswith("ERROR missing.grad: file error: ")


def test_check_reads_a_missing_file_by_the_command_line_s_rule(monkeypatch):
    # one rule (values.parse_source) for every command: changing it changes check's reading too
    assert check_source("dir/model.grad").error.kind == "file"
    assert check_source("x +* 2").error.kind == "syntax"
    monkeypatch.setattr(gradcalc.values, "_looks_like_a_path", lambda text: True)
    assert check_source("x +* 2").error.message == "the file 'x +* 2' does not exist"


def test_the_step_summary_shows_its_cells_as_written(monkeypatch, tmp_path):
    # rendered by a CommonMark parser with GFM tables (markdown-it, which rich depends on), every
    # cell reads as the text it holds: <expr> is no HTML tag, * and _ no emphasis, | no cell end
    from markdown_it import MarkdownIt
    p = write(tmp_path / "f.grad", "# check: --at x=2\ny = x^3\n")
    write(tmp_path / "f.expect.json", json.dumps({"schema": 1, "command": "grad", "of": "y", "gradient": {"x": 1}}))
    r = check_sources(["y = x +* 2", p, "input x = 1; input x_y_ = 2; x * x_y_ + x_y_", "a|b"])
    html = MarkdownIt("commonmark").enable("table").render(github.summary_markdown(r, str))
    cells = [re.sub("<[^>]+>", "", c) for c in re.findall(r"<td>(.*?)</td>", html)]
    assert "&lt;expr 1&gt;:1:8" in cells and "expected an expression, found '*'" in cells
    assert "d_/dx_y_" in cells and "unexpected character '|'" in cells and cells.count("&lt;expr 2&gt;") == 2
    assert any(c.startswith("entry gradient['x']: stored 1.0, computed 12.0 (|computed - stored| = 11 &gt; ")
               for c in cells)
    assert "<em>" not in html and "<code>" not in html and html.count("<tr>") == 1 + len(r.results)


def test_an_edit_that_removes_a_recorded_name_fails_the_entry_not_the_source(tmp_path, monkeypatch):
    # an expectation is a record of the program's derivatives: an input or output that an edit
    # removed is a mismatch to review (exit 1, naming the entry), and the rest is still compared
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "two.grad", "# check: --at x=[0.5,1.5],y=2\nu = sum(sin(x) * y)\nv = x * y^2\n")
    ok("check", "two.grad", "--update-expect")  # v's Jacobian in x and y (v is the output)
    ok("check", "two.grad", "--of", "u", "--expect", "u.json", "--update-expect")
    write(tmp_path / "two.grad", "# check: --at x=[0.5,1.5]\nu = sum(sin(x) * 2)\nv = x * 4\n")  # y is gone
    r = run("check", "two.grad", "-f", "plain")
    assert r.exit_code == 1, (r.stdout, r.stderr)
    lines = [t for t in r.stdout.splitlines() if "[expectation file]" in t]
    assert lines[0].startswith("ok two.grad point=0 dv/dx [expectation file]")  # 4I, as x * 2^2 gave
    assert lines[1].startswith("FAIL two.grad point=0 dv/dy [expectation file]") and lines[1].endswith(
        "| two.expect.json records dv/dy, and 'y' is no longer an input of the program: review the change, "
        "then refresh the file with --update-expect")
    write(tmp_path / "two.grad", "# check: --at x=[0.5,1.5],y=2\nw = sum(sin(x) * y)\nv = x * y^2\n")  # u is w
    r = run("check", "two.grad", "--expect", "u.json", "-f", "plain")
    assert r.exit_code == 1, (r.stdout, r.stderr)
    fails = [t for t in r.stdout.splitlines() if t.startswith("FAIL")]
    assert [t.split(" [")[0] for t in fails] == ["FAIL two.grad point=0 du/dx", "FAIL two.grad point=0 du/dy"]
    assert all("u.json records du/d" in t and "'u' is no longer a name of the program" in t for t in fails)
    assert ok("check", "two.grad", "--update-expect").exit_code == 0  # refreshed: all pass again


def test_a_missing_expectation_file_is_a_file_error(three):
    r = run("check", "good.grad", "--expect", "nothere.json", "-f", "json")
    assert r.exit_code == 2
    assert json.loads(r.stdout)["results"][0]["error"] == {
        "kind": "file", "message": "expectation file 'nothere.json' cannot be read: the file does not exist",
        "hint": "make it with --update-expect", "source": "good.grad", "line": None, "column": None}


def test_a_folder_s_files_are_named_without_dot_slash(three):
    r = run("check", ".", "--junit-xml", "r.xml", "-f", "plain")
    assert r.exit_code == 2 and r.stdout.splitlines()[0].startswith("ERROR bad.grad:1:8: ")
    names = [c.get("classname") for c in ET.parse(three / "r.xml").getroot().findall("testcase")]
    assert names == ["gradcalc.check.bad", "gradcalc.check.good", "gradcalc.check.kink"]
    assert [c.source for c in check_sources(["./"]).sources] == ["bad.grad", "good.grad", "kink.grad"]


def test_a_folder_s_hidden_folders_are_skipped(three):
    (three / ".venv" / "lib").mkdir(parents=True)
    write(three / ".venv" / "lib" / "vendored.grad", "x +* 1\n")  # (an error, if it were read)
    (three / "models").mkdir()
    write(three / "models" / "m.grad", "# check: --at x=2\nx^3\n")
    assert [c.source for c in check_sources(["."]).sources] == ["bad.grad", "good.grad", "kink.grad",
                                                                 os.path.join("models", "m.grad")]
    hidden = check_sources([".venv"]).sources  # (a hidden folder named on purpose is read)
    assert [c.source for c in hidden] == [os.path.join(".venv", "lib", "vendored.grad")]


def test_update_expect_writes_no_file_that_records_no_derivative(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "const.grad", "x = 1\n")  # no inputs: nothing to record, ever
    write(tmp_path / "cube.grad", "# check: --at x=2\nx^3\n")
    r = ok("check", ".", "--update-expect", "-f", "plain")
    assert sorted(p.name for p in tmp_path.glob("*.expect.json")) == ["cube.expect.json"]
    assert "wrote cube.expect.json\n" in r.stderr and "const.expect.json" not in r.stderr
    write(tmp_path / "inter.grad", "h = 3\ny = h^2\n")  # no inputs, but a derivative by an intermediate
    ok("check", "inter.grad", "--wrt", "h", "--update-expect")
    assert json.loads((tmp_path / "inter.expect.json").read_text())["gradient"] == {"h": 6.0}  # 2h at h = 3


def test_check_line_wrt_a_comma_b_is_two_wrt_options_as_on_the_command_line(tmp_path):
    c = check_source(write(tmp_path / "w.grad", "# check: --at x=1,y=2 --wrt y,x\nx * y\n"))
    assert c.ok and [(r.wrt, r.ok) for r in c.results] == [("y", True), ("x", True)]
    assert file_options(gradcalc.values.read_source(str(tmp_path / "w.grad")))["wrt"] == ["y", "x"]


@pytest.mark.parametrize("lines, at, words", [
    ("# check: --at x=[1,2,3]\n# check: --rtol 1e-5 --of nosuch\n", (2, 22), "'nosuch' is not a name in the program"),
    ("# check: --at x=[1,2,3] --wrt x,zz\n", (1, 25), "'zz' is not a name in the program"),
    ("# check: --rtol 1e-6 --at x=[1,2,3],zz=2\n", (1, 22), "'zz' is not an input of the program"),
    ("# check: --at x=[1,2,3]\n# check: --at x=[1,2]\n", (2, 10), "has shape (2,), but it is declared as x[3]"),
])
def test_an_option_value_the_program_refuses_is_an_error_at_its_check_line(tmp_path, lines, at, words):
    p = write(tmp_path / "f.grad", lines + "input x[3]\nsum(x^2)\n")
    err = check_source(p).error
    assert err is not None and words in err.message and (err.file, err.line, err.column) == (p, *at)
    r = user_error("check", p)  # with its caret under the option, as any user error
    line = lines.splitlines()[at[0] - 1]
    assert f"error: {p}:{at[0]}:{at[1]}: " in r.stderr and f"  {line}\n  {' ' * (at[1] - 1)}^\n" in r.stderr


def test_a_value_the_caller_gave_is_not_placed_at_a_check_line(tmp_path):
    p = write(tmp_path / "f.grad", "# check: --at x=[1,2,3] --of y\ninput x[3]\ny = sum(x^2)\n")
    err = check_source(p, overrides={"at": {"x": np.ones(2)}}).error
    assert "has shape (2,)" in err.message and err.line is None
    err = check_source(p, overrides={"of": ["nosuch"]}).error
    assert "'nosuch' is not a name" in err.message and err.line is None
    err = check_source(write(tmp_path / "g.grad", "# check: --at @nothere.json\nx\n")).error
    assert err.message == "# check: --at: cannot read '" + str(tmp_path / "nothere.json") + \
        "': the file does not exist" and err.kind == "file"


# -- an expectation compares something, nulls and the point it records -----------

@pytest.mark.parametrize("stored", [{"gradient": {}}, {"jacobian": {"_": {}}}, {"jacobian": {}},
                                    {"gradient": {"q": 1.0}, "of": "_"}])
def test_an_expectation_that_compares_nothing_does_not_pass(tmp_path, stored):
    # review HIGH 3: an empty table (or only a name the program lacks) passed with the FD rows alone
    p = write(tmp_path / "a.grad", "# check: --at x=2,y=1\nx^2 + 3*y\n")
    e = write(tmp_path / "e.json", json.dumps({"schema": 1, **stored}))
    r = run("check", p, "--expect", e, "-f", "plain")
    if "q" in json.dumps(stored):  # a name the program does not have: that entry fails (exit 1), named
        assert r.exit_code == 1 and f"FAIL {p} point=0 d_/dq [expectation file]" in r.stdout
        assert f"{e} records d_/dq, and 'q' is no longer a name of the program" in r.stdout
    else:  # nothing at all to compare: the file is no expectation, an error naming it (exit 2)
        assert r.exit_code == 2 and r.stdout.startswith(
            f"ERROR {p}: usage error: expectation file '{e}' records no derivative of the program: "
            "it compares nothing")
        assert "hint: refresh it with --update-expect" in r.stderr
    with pytest.raises(gradcalc.GradcalcError, match="expect records no derivative"):  # the library too
        gradcalc.check("x^2 + 3*y", at={"x": 2.0, "y": 1.0}, expect=stored)


@pytest.mark.parametrize("command,program", [("grad", "t = y\nx^2\n"), ("jacobian", "t = y\n[x, 2*x]\n")])
def test_a_null_of_unconnected_none_compares_as_no_path(tmp_path, command, program):
    # review HIGH 5: grad --unconnected none stores null for y; it was compared as nan and always failed
    p = write(tmp_path / "u.grad", program)
    e = tmp_path / "u.json"
    e.write_text(run(command, p, "--at", "x=2", "--at", "y=1", "--unconnected", "none", "-f", "json").stdout)
    assert "null" in e.read_text()
    doc = ok_json("check", p, "--expect", str(e))
    assert [x["wrt"] for x in doc["results"] if x["comparison"] == "expect" and x["ok"]] == ["y", "x"]
    write(tmp_path / "u.grad", program.replace("x^2", "x^2 + y").replace("2*x]", "2*x + y]"))  # now a path
    r = run("check", p, "--expect", str(e), "-f", "plain")
    assert r.exit_code == 1 and "stored null (no path to the output: 0), computed 1.0" in r.stdout


def test_a_value_given_beside_an_expectation_moves_the_fd_rows_not_the_stored_comparison(tmp_path):
    # review MEDIUM 14 (SPEC §5: an expectation is self-contained): its derivatives hold at the point it
    # records, so --at x=3 moves the finite-difference rows, and the stored comparison says where it ran
    cube = write(tmp_path / "cube.grad", "x^3\n")
    stored = tmp_path / "cube.json"
    stored.write_text(run("grad", cube, "--at", "x=2", "-f", "json").stdout)
    doc = ok_json("check", cube, "--expect", str(stored), "--at", "x=3")
    fd, = [x for x in doc["results"] if x["comparison"] == "jacobian"]
    alone, = ok_json("check", cube, "--at", "x=3")["results"]  # the finite differences ran at x = 3
    assert fd == alone
    kept, = [x for x in doc["results"] if x["comparison"] == "expect"]
    assert kept["ok"] and kept["notes"] == ["compared at the point the expectation records (x as recorded, "
                                            "not as given); --update-expect records a new point"]
    doc = ok_json("check", cube, "--expect", str(stored), "--at", "x=2")  # the same value: no note
    assert all(not x["notes"] for x in doc["results"])
    wrong = json.loads(stored.read_text())
    wrong["gradient"]["x"] = 27.0  # 3 x^2 at x = 3: right at the given point, wrong at the recorded one
    stored.write_text(json.dumps(wrong))
    r = run("check", cube, "--expect", str(stored), "--at", "x=3", "-f", "plain")
    assert r.exit_code == 1 and "stored 27.0, computed 12.0" in r.stdout


def test_junit_classnames_keep_a_file_name_in_one_part(tmp_path, monkeypatch):
    # review LOW: gradcalc.check.wrong.grad read as package gradcalc.check.wrong, class grad (Jenkins
    # splits a classname at its last dot; GitLab shows it whole): folders are the package, as pytest
    # names tests/test_a.py tests.test_a, and a dot inside a name stays inside its part
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub" / "my.model.grad", "# check: --at x=0.5\nx^3\n")
    write(tmp_path / "top.grad", "# check: --at x=2\nsin(x)\n")
    run("check", ".", "x^2", "--at", "x=1", "--junit-xml", "r.xml")
    cases = ET.parse(tmp_path / "r.xml").getroot().findall("testcase")
    assert [(c.get("classname"), c.get("file")) for c in cases] == [
        ("gradcalc.check.sub.my_model", os.path.join("sub", "my.model.grad")), ("gradcalc.check.top", "top.grad"),
        ("gradcalc.check.<expr>", "<expr>")]


@pytest.mark.parametrize("program,x", [("1/x", 1e-3), ("log(x)", 1e-4), ("sqrt(x)", 1e-6), ("1/x", -1e-5)])
def test_a_correct_derivative_at_a_small_x_passes_at_steps_relative_to_x(program, x):
    # review MEDIUM 15: the default step follows max(1, |x|), and central differences of 1/x at
    # 1e-3 are off by (h/x)^2 ~ 6e-5 at it; the check compares again at steps relative to |x|
    # (eps^(1/3) |x| rounded to a power of two) and says so
    r, = gradcalc.check(program, at={"x": x}).results
    assert r.ok, r.notes
    assert r.step == 2.0 ** round(math.log2(np.finfo(float).eps ** (1 / 3) * abs(x)))
    assert r.extra["default_step"] == 2.0 ** -17
    assert r.notes == [f"the default step {2.0 ** -17:.3g} is not small beside |x| = {abs(x):.3g} (it follows "
                       f"max(1, |x|)): compared at steps relative to |x| instead (up to {r.step:.3g}), where the "
                       "differences agree"]


def test_a_vector_of_mixed_magnitudes_is_compared_at_steps_relative_to_each_element():
    r, = gradcalc.check("sum(1/x)", at={"x": np.array([1e-3, 2.0, -5e-4])}).results
    assert r.ok and r.extra["default_step"] == 2.0 ** -16  # (max(1, |x|) = 2 at the second element)


def test_a_wrong_rule_at_a_small_x_still_fails(monkeypatch):
    # log's rules off by 1e-4 (in both modes, so only the differences can tell): at the default
    # step and at steps relative to |x| alike
    wrong = (lambda g, ans, x, **_: safe_mul(g, REGISTRY["div"](1.0001, x)),)
    replace_rule(monkeypatch, REGISTRY["log"], "vjp", wrong)
    replace_rule(monkeypatch, REGISTRY["log"], "jvp", wrong)
    r, = gradcalc.check("log(x)", at={"x": 1e-4}).results
    assert not r.ok  # (its numbers are the default step's, where truncation adds 1.8e-3)
    assert any("at steps relative to |x| they disagree too (rel err 0.0001)" in n and "--sweep" in n
               for n in r.notes), r.notes
    assert not gradcalc.check("log(x)", at={"x": 1e-4}, method="complex").ok


def test_a_wrong_rule_at_a_large_x_gets_no_step_note(monkeypatch):
    replace_rule(monkeypatch, REGISTRY["sin"], "vjp", (lambda g, ans, x, **_: safe_mul(g, 1.01 * REGISTRY["cos"](x)),))
    r, = gradcalc.check("sin(x)", at={"x": 0.3}).results
    assert not r.ok and not any("not small beside" in n for n in r.notes)


@pytest.mark.parametrize("where, why", [("no/such/r.xml", "No such file or directory"), (".", "Is a directory")])
def test_an_unwritable_junit_report_is_refused_before_any_work(three, monkeypatch, where, why):
    ran = []
    monkeypatch.setattr("gradcalc.suite.check_sources", lambda *a, **k: ran.append(1))
    r = user_error("check", "good.grad", "--junit-xml", where, "-f", "json")
    error = json.loads(r.stdout)["error"]
    assert (error["kind"], error["message"]) == ("file", f"--junit-xml: cannot write '{where}': {why}")
    assert not ran
    r = user_error("grad", "x^2", "--at", "x=1", "--save", "no/such/g.npz")
    assert r.stderr.startswith("error: --save: cannot write 'no/such/g.npz': No such file or directory")


def test_a_dangling_link_or_an_empty_report_path_is_refused_before_any_work(three, monkeypatch):
    os.symlink(str(three / "no" / "such" / "r.xml"), "dangling.xml")
    ran = []
    monkeypatch.setattr("gradcalc.suite.check_sources", lambda *a, **k: ran.append(1))
    assert user_error("check", "good.grad", "--junit-xml", "dangling.xml").stderr.startswith(
        "error: --junit-xml: cannot write 'dangling.xml': No such file or directory")
    assert user_error("check", "good.grad", "--junit-xml", "").stderr.startswith(
        "error: --junit-xml: cannot write '': an empty path names no file")
    assert not ran
    assert "an empty path" in user_error("grad", "x^2", "--at", "x=1", "--save", "").stderr


def test_a_non_finite_comparison_says_which_side_is_not_finite():
    # sqrt at 0: reverse mode gives inf (1 / (2 sqrt 0)), central differences nan (sqrt(-h))
    r, = gradcalc.check("sqrt(x)", at={"x": 0.0}).results
    assert not r.ok and row_text(r).split(" | ")[1:] == ["ad inf, fd nan: not finite", "non-finite derivative"]


def test_an_expectation_of_an_output_the_program_no_longer_has_fails(tmp_path):
    # stored when y2 was the output: d(x^2 y)/dx = 2xy = 4, d/dy = x^2 = 1 at (1, 2); then the
    # output became out = y2 + 1e-3 x, and y2, still a name, was compared and passed unnoticed
    src = write(tmp_path / "r2.grad", "# check: --at x=1,y=2\ny2 = x^2*y\nout = y2 + 1e-3*x\n")
    stored = {"schema": 1, "command": "grad", "of": "y2", "at": {"x": 1.0, "y": 2.0}, "value": 2.0,
              "gradient": {"x": 4.0, "y": 1.0}, "unconnected": [], "warnings": []}
    write(tmp_path / "r2.expect.json", json.dumps(stored))
    checked = check_sources([src])
    assert checked.exit_code == 1
    stale = [r for r in checked.results if not r.ok]
    assert [(r.of, r.wrt) for r in stale] == [("y2", "x"), ("y2", "y")]
    assert stale[0].notes == [f"{tmp_path / 'r2.expect.json'} records dy2/dx, and 'y2' is no longer the output "
                              "check compares ('out' is): review the change, then refresh the file with "
                              "--update-expect"]
    # an expectation of y2 on purpose says so: --of y2 (on the command line or a # check: line)
    assert check_sources([src], overrides={"of": ["y2"]}).exit_code == 0
    # refreshed, it records out: d/dx = 4 + 1e-3
    assert check_sources([src], update_expect=True).exit_code == 0
    doc = json.loads((tmp_path / "r2.expect.json").read_text())
    assert doc["of"] == "out" and doc["gradient"] == {"x": pytest.approx(4.001, rel=1e-12), "y": 1.0}


def test_a_global_points_checks_a_file_whose_check_line_fixes_every_input_at_its_point(tmp_path):
    # `check dir/ --points 2` was an error (exit 2) for every file whose # check: --at fixes
    # all its inputs; such a file is checked at its one point, with a note
    fixed = write(tmp_path / "fixed.grad", "# check: --at x=[0.5,-1.0,2.0]\ny = sum(sin(x)*exp(x))\n")
    write(tmp_path / "free.grad", "input x[3]\ny = sum(x^2)\n")
    checked = check_sources([str(tmp_path)], overrides={"points": 2})
    assert checked.exit_code == 0
    by_source = {c.source: c for c in checked.sources}
    assert [r.point for r in by_source[fixed].results] == [0]
    assert by_source[fixed].ignored == ["--points 2 draws the inputs --at leaves free, and the file's # check: --at "
                                        "fixes every input: checked at that point only"]
    assert [r.point for r in by_source[str(tmp_path / "free.grad")].results] == [1, 2]
    # d/dx sum(sin(x) exp(x)) = (cos x + sin x) exp(x), the check's own finite differences agree
    x = np.array([0.5, -1.0, 2.0])
    np.testing.assert_allclose(gradcalc.grad(open(fixed).read(), at={"x": x})["x"],
                               (np.cos(x) + np.sin(x)) * np.exp(x), rtol=1e-13)
    # both from the caller, or both from the file: one of the two is in vain, an error as before
    assert check_sources([fixed], overrides={"points": 2, "at": {"x": x}}).exit_code == 2
    both = write(tmp_path / "both.grad", "# check: --at x=1 --points 2\ny = x^2\n")
    assert check_sources([both]).exit_code == 2


@pytest.mark.parametrize("opt", ["--atol", "--rtol"])
def test_a_tolerance_of_minus_0_is_echoed_as_0(opt):
    r = run("check", "sin(x)", "--at", "x=1", opt, "-0", "-f", "json")
    assert "-0.0" not in r.stdout and json.loads(r.stdout)[opt[2:]] == 0.0


@pytest.mark.parametrize("args, report, what", [
    (["good.grad"], "good.grad", "the source 'good.grad'"),
    (["good.grad"], "./good.grad", "the source 'good.grad'"),
    (["."], "kink.grad", "a .grad file in the source folder '.'"),
])
def test_a_report_that_would_overwrite_a_checked_source_is_refused(three, monkeypatch, args, report, what):
    # check g2.grad --junit-xml g2.grad replaced the program with its own report
    before = {p: (three / p).read_text() for p in ("good.grad", "kink.grad")}
    ran = []
    monkeypatch.setattr("gradcalc.suite.check_sources", lambda *a, **k: ran.append(1))
    r = user_error("check", *args, "--junit-xml", report, "-f", "json")
    error = json.loads(r.stdout)["error"]
    assert (error["kind"], error["message"]) == (
        "file", f"--junit-xml: cannot write '{report}': it is {what}, which the report would overwrite")
    assert not ran and {p: (three / p).read_text() for p in before} == before


@pytest.mark.parametrize("line", ["#check: --at x=1", "# Check: --at x=1", "#  check: --at x=1",
                                  "# check --at x=1"])
def test_a_misspelt_check_line_is_pointed_out(tmp_path, monkeypatch, line):
    # '#check: --at x=1' was read as a comment, silently: the check failed for a missing value
    # (or ran at the program's own default) with no word of the line
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "m.grad", f"{line}\nx^2\n")
    r = user_error("check", "m.grad", "-f", "plain")
    note = f"line 1, '{line}', is read as a comment: a settings line begins '# check:' exactly"
    assert f"hint: {note}; give it with --at x=..." in r.stderr
    write(tmp_path / "d.grad", f"{line}\ninput x = 2\nx^2\n")
    r = ok("check", "d.grad", "-f", "plain")
    assert f"note: d.grad: {note}" in r.stderr


def test_comments_that_are_not_check_lines_are_left_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "c.grad", "# check the gradient of x^2\n# checks: none\n# check: --at x=1\nx^2\n"
                               "#check: after the first statement, a comment like any other\n")
    r = ok("check", "c.grad", "-f", "plain")
    assert "read as a comment" not in r.stderr


def test_junit_classnames_of_two_files_never_collide(tmp_path, monkeypatch):
    # a.b.grad and a_b.grad were both gradcalc.check.a_b with the same testcase names, which a CI
    # system merges into one test; a backslash, a name's character on Linux, parted folders
    monkeypatch.chdir(tmp_path)
    for name in ["a.b.grad", "a_b.grad", "a_b_2.grad", "c\\d.grad"]:
        write(tmp_path / name, "x^2\n")
    run("check", ".", "--at", "x=1", "--junit-xml", "r.xml")
    cases = ET.parse(tmp_path / "r.xml").getroot().findall("testcase")
    classes = {c.get("file"): c.get("classname") for c in cases}
    assert classes == {"a.b.grad": "gradcalc.check.a_b", "a_b.grad": "gradcalc.check.a_b_2",
                       "a_b_2.grad": "gradcalc.check.a_b_2_2", "c\\d.grad": "gradcalc.check.c\\d"}
