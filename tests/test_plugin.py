"""The integrations of SPEC §8 and §10: the pytest plugin (run by pytest's own pytester),
gradcalc.testing.assert_gradients, and the pre-commit hook's entry command.

Expected derivatives come from closed forms written here (d(x^2)/dx = 6 at x = 3), never
from gradcalc itself.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

import numpy
import pytest

import gradcalc.numerics
import gradcalc.suite
from gradcalc.errors import GradcalcError
from gradcalc.testing import assert_gradients

pytest_plugins = ["pytester"]
#: Loaded here, before pytester's in-process runs: each drops the modules it imported, and
#: NumPy's C core cannot load twice in one process.
PRELOADED = (numpy, gradcalc.numerics, gradcalc.suite)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

GOOD = "input x = 1.5, y = -2\nf = x*y + sin(x)\n"            # two inputs: two results
SQUARE = "input x = 3\nf = x^2\n"                               # df/dx = 6 at x = 3
WRONG_EXPECT = {"schema": 1, "command": "grad", "of": "f", "at": {"x": 3.0}, "gradient": {"x": 5.0}}
KINK = "# check: --at x=0\ninput x = 1\nf = relu(x)\n"        # differences straddle the kink


def _folder(pytester, **files):
    for name, text in files.items():
        path = pytester.path / name
        path.write_text(text if isinstance(text, str) else json.dumps(text), encoding="utf-8")


def _run(pytester, *args):
    # (hypothesis's plugin would import all of hypothesis anew in each run: seconds)
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:hypothesispytest", *args)


# ==========================================================================
# The plugin
# ==========================================================================

def test_a_correct_file_and_a_wrong_expectation_report_one_failure(pytester):
    _folder(pytester, **{"good.grad": GOOD, "square.grad": SQUARE, "square.expect.json": WRONG_EXPECT})
    result = _run(pytester)
    # good: df/dx, df/dy; square: df/dx against differences (passes), against the file (fails)
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*1 failed, 3 passed*"])


def test_items_have_readable_ids(pytester):
    _folder(pytester, **{"good.grad": GOOD, "square.grad": SQUARE, "square.expect.json": WRONG_EXPECT})
    result = _run(pytester, "--collect-only", "-q")
    ids = [line for line in result.stdout.lines if "::" in line]
    assert ids == ["good.grad::df/dx@point0", "good.grad::df/dy@point0",
                   "square.grad::df/dx@point0", "square.grad::df/dx@expect"]


def test_each_point_and_comparison_is_an_item(pytester):
    _folder(pytester, **{"points.grad": "# check: --points 2 --seed 3\ninput x = 1.5\nf = sin(x)\n",
                         "dirs.grad": "# check: --directions 2\ninput x = [1.0, 2.0]\nf = sum(sin(x))\n"})
    result = _run(pytester, "--collect-only", "-q")
    assert [line for line in result.stdout.lines if "::" in line] == [
        "dirs.grad::df/dx@point0[directions]",
        "points.grad::df/dx@point0", "points.grad::df/dx@point1", "points.grad::df/dx@point2"]


def test_verbose_lines_and_report_titles_keep_the_ids(pytester):
    _folder(pytester, **{"square.grad": SQUARE, "square.expect.json": WRONG_EXPECT, "bad.grad": "f = (x +\n"})
    result = _run(pytester, "-v")
    result.stdout.fnmatch_lines(["bad.grad::error FAILED*", "square.grad::df/dx@point0 PASSED*",
                                 "square.grad::df/dx@expect FAILED*"])
    result.stdout.fnmatch_lines(["*_ bad.grad cannot be checked _*", "*_ df/dx@expect in square.grad _*"])


def test_an_item_can_be_selected_by_its_id(pytester):
    _folder(pytester, **{"good.grad": GOOD})
    _run(pytester, "good.grad::df/dy@point0").assert_outcomes(passed=1)


def test_a_failure_reports_the_row_with_its_numbers(pytester):
    _folder(pytester, **{"square.grad": SQUARE, "square.expect.json": WRONG_EXPECT})
    result = _run(pytester)
    result.assert_outcomes(passed=1, failed=1)
    text = result.stdout.str()
    # |6 - 5| = 1, relative to max(|6|, |5|) = 1/6
    assert "df/dx at point 0 (expectation file) failed: abs err 1, rel err 0.167 (rtol 1e-06, atol 1e-08)" in text
    assert re.search(r"stored 5(\.0)?\b", text) and re.search(r"(computed|ad) 6(\.0)?\b", text)
    assert "= 1 > 5.01e-06 allowed" in text  # atol 1e-8 + rtol 1e-6 * |5|
    assert re.search(r"square\.grad\s+0\s+df/dx\s+expectation file\s+1\s+0\.167", text)
    assert "Traceback" not in text and "CheckFailed" not in text


def test_a_failure_at_a_kink_says_so_and_honours_check_lines(pytester):
    _folder(pytester, **{"kink.grad": KINK})
    result = _run(pytester)
    result.assert_outcomes(failed=1)  # at x = 0 (the # check: line), not at the default 1
    text = result.stdout.str()
    # central differences over the kink of relu: (h - 0) / 2h = 0.5, ad is 0 or 1 either side
    assert re.search(r"kink\.grad\s+0\s+df/dx\s+full Jacobian, central\s+0\.5\s+", text)
    assert re.search(r"ad [01], fd 0\.5: \|ad - fd\| = 0\.5 > ", text)
    assert "near the kink of 'relu'" in text


def test_update_expect_refreshes_the_files(pytester):
    _folder(pytester, **{"square.grad": SQUARE, "square.expect.json": WRONG_EXPECT, "good.grad": GOOD})
    _run(pytester, "--gradcalc-update-expect").assert_outcomes(passed=6)  # 3 derivatives, each twice
    stored = json.loads((pytester.path / "square.expect.json").read_text(encoding="utf-8"))
    assert stored["gradient"]["x"] == 6.0 and stored["at"]["x"] == 3.0
    made = json.loads((pytester.path / "good.expect.json").read_text(encoding="utf-8"))  # a new one
    # d(x*y + sin x)/dx = y + cos x, d/dy = x at (1.5, -2)
    assert made["gradient"]["x"] == pytest.approx(-2 + numpy.cos(1.5), rel=1e-15)
    assert made["gradient"]["y"] == 1.5
    _run(pytester).assert_outcomes(passed=6)  # and they hold afterwards


def test_update_expect_writes_only_the_files_whose_items_run(pytester):
    # the checks run as files are collected: --collect-only and -k deselection wrote files too
    _folder(pytester, **{"square.grad": SQUARE, "square.expect.json": WRONG_EXPECT, "good.grad": GOOD})
    _run(pytester, "--gradcalc-update-expect", "--collect-only", "-q")
    assert json.loads((pytester.path / "square.expect.json").read_text(encoding="utf-8")) == WRONG_EXPECT
    assert not (pytester.path / "good.expect.json").exists()
    _run(pytester, "--gradcalc-update-expect", "-k", "good").assert_outcomes(passed=4)  # good: 2 derivatives, twice
    assert json.loads((pytester.path / "square.expect.json").read_text(encoding="utf-8")) == WRONG_EXPECT
    made = json.loads((pytester.path / "good.expect.json").read_text(encoding="utf-8"))
    assert made["gradient"]["y"] == 1.5  # d(x*y + sin x)/dy = x


def test_a_file_that_cannot_be_checked_is_one_failing_item(pytester):
    _folder(pytester, **{"good.grad": GOOD, "bad.grad": "f = (x +\n", "novalue.grad": "f = x^2\n"})
    result = _run(pytester, "-rf")
    result.assert_outcomes(passed=2, failed=2)  # the good file is still checked
    result.stdout.fnmatch_lines(["*bad.grad:1:5: '(' is never closed*", "  f = (x +", "      ^",
                                 "hint: add ')'"])
    result.stdout.fnmatch_lines(["FAILED bad.grad::error - *", "FAILED novalue.grad::error - *"])
    assert "input 'x' has no value" in result.stdout.str()
    assert "Traceback" not in result.stdout.str()


def test_files_other_than_grad_are_left_alone(pytester):
    _folder(pytester, **{"notes.txt": "f = (x +\n", "square.json": "{}"})
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    _run(pytester).assert_outcomes(passed=1)


def test_the_plugin_can_be_turned_off(pytester):
    _folder(pytester, **{"bad.grad": "f = (x +\n"})
    _run(pytester, "-p", "no:gradcalc").assert_outcomes()  # nothing collected, nothing failed


def test_the_plugin_is_registered_and_imports_nothing_of_gradcalc_until_used():
    # pytest loads the plugin in every run of every project where gradcalc is installed
    code = ("import sys, pytest; import gradcalc.pytest_plugin; "
            "print(sorted(m for m in sys.modules if m.startswith('gradcalc')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['gradcalc', 'gradcalc.pytest_plugin']"
    from importlib.metadata import distributions  # (each, as pytest reads them: a stale
    points = [e.value for d in distributions() for e in d.entry_points  # gradcalc.egg-info in
              if e.group == "pytest11" and e.name == "gradcalc"]  # the working directory aside)
    assert "gradcalc.pytest_plugin" in points


# ==========================================================================
# gradcalc.testing.assert_gradients
# ==========================================================================

def test_assert_gradients_passes_a_correct_program():
    checked = assert_gradients("sum(x^2)", at={"x": [1.0, 2.0]})
    assert [r.ok for r in checked.results] == [True]


def test_assert_gradients_raises_with_the_failing_rows():
    with pytest.raises(AssertionError) as info:
        assert_gradients("relu(x) + y^2", at={"x": 0.0, "y": 1.0})
    text = str(info.value)
    assert text.startswith("gradcalc check: 1 of 2 failed (rtol 1e-06, atol 1e-08)\n")
    assert re.search(r"ad [01], fd 0\.5: \|ad - fd\| = 0\.5 > ", text)
    assert re.search(r"<expr>\s+0\s+d\S+/dx\s+full Jacobian, central\s+0\.5\s+1\s", text)
    assert "/dy" not in text  # only the failing row


def test_assert_gradients_honours_a_files_check_lines_and_expectation(tmp_path):
    (tmp_path / "kink.grad").write_text(KINK, encoding="utf-8")
    with pytest.raises(AssertionError, match="near the kink"):
        assert_gradients(str(tmp_path / "kink.grad"))
    assert_gradients(str(tmp_path / "kink.grad"), at={"x": 2.0})  # options win over the line
    (tmp_path / "square.grad").write_text(SQUARE, encoding="utf-8")
    (tmp_path / "square.expect.json").write_text(json.dumps(WRONG_EXPECT), encoding="utf-8")
    with pytest.raises(AssertionError, match=r"stored 5(\.0)?\b"):
        assert_gradients(str(tmp_path / "square.grad"))
    assert_gradients(str(tmp_path / "square.grad"), no_expect=True)


def test_assert_gradients_raises_the_error_of_a_program_it_cannot_check():
    with pytest.raises(GradcalcError, match="input 'y' has no value"):
        assert_gradients("x * y", at={"x": 1.0})


# ==========================================================================
# The pre-commit hook
# ==========================================================================

def _hooks() -> list[dict]:
    """.pre-commit-hooks.yaml read as the flat YAML list it is (no YAML library needed)."""
    hooks = []
    with open(os.path.join(ROOT, ".pre-commit-hooks.yaml"), encoding="utf-8") as f:
        for line in f:
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if line.startswith("- "):
                hooks.append({})
                line = line[2:]
            key, _, value = line.strip().partition(": ")
            hooks[-1][key] = value
    return hooks


def test_the_pre_commit_hook_runs_check_on_the_staged_grad_files(tmp_path):
    (hook,) = _hooks()
    assert hook["id"] == "gradcalc-check" and hook["language"] == "python"
    assert hook["pass_filenames"] == "true"
    staged = {"good.grad": GOOD, "square.grad": SQUARE, "README.md": "f = (x +\n"}
    for name, text in staged.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    files = [n for n in staged if re.search(hook["files"], n)]  # as pre-commit selects them
    assert files == ["good.grad", "square.grad"]
    # pre-commit runs the entry, split as a shell would, then args, with the files appended
    argv = shlex.split(hook["entry"]) + json.loads(hook["args"]) + files
    assert argv[0] == "gradcalc"
    exe = os.path.join(os.path.dirname(sys.executable), "gradcalc")
    run = subprocess.run([exe, *argv[1:]], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    (tmp_path / "square.expect.json").write_text(json.dumps(WRONG_EXPECT), encoding="utf-8")
    run = subprocess.run([exe, *argv[1:]], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 1, run.stdout  # a wrong derivative blocks the commit
    (tmp_path / "good.grad").write_text("f = (x +\n", encoding="utf-8")
    run = subprocess.run([exe, *argv[1:]], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 2 and "'(' is never closed" in run.stderr + run.stdout


def test_the_pre_commit_hook_checks_a_staged_file_whose_name_begins_with_a_dash(tmp_path):
    # without "--", -fwrong.grad was read as --format wrong.grad: exit 2 with "Invalid value for
    # '--format'", the file never checked (with a later -f plain, exit 0)
    (hook,) = _hooks()
    (tmp_path / "good.grad").write_text(GOOD, encoding="utf-8")
    # d/dx (x + x^2) = 1 + 2x = 3 at 1, the program's derivative 1: a mismatch
    (tmp_path / "-fwrong.grad").write_text("# check: --at x=1\ny = x + stop_gradient(x^2)\n", encoding="utf-8")
    argv = shlex.split(hook["entry"]) + json.loads(hook["args"]) + ["good.grad", "-fwrong.grad"]
    exe = os.path.join(os.path.dirname(sys.executable), "gradcalc")
    run = subprocess.run([exe, *argv[1:]], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "-fwrong.grad" in run.stdout


def test_a_program_with_no_inputs_is_a_skipped_item_that_says_why(pytester):
    # gradcalc check warns 'nothing to check: the program has no inputs'; the plugin yielded no
    # item at all, so the file vanished from the run
    _folder(pytester, **{"const.grad": "f = 2 + 3\n", "square.grad": SQUARE})
    result = _run(pytester, "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*nothing to check: the program has no inputs*"])
    ids = _run(pytester, "--collect-only", "-q")
    ids.stdout.fnmatch_lines(["const.grad::nothing-to-check"])


def test_errors_at_random_points_are_items_of_their_own(pytester):
    # one item per point that cannot be checked (ids ::error@pointP), beside point 0's results
    _folder(pytester, **{"mid.grad": "# check: --points 2 --seed 1\ninput v[2] = [1, 2]\ninput x = 0.01\n"
                                     "y = v[floor(abs(x)*30)] * x^2\n"})
    result = _run(pytester, "--collect-only", "-q")
    result.stdout.fnmatch_lines(["mid.grad::dy/dv@point0", "mid.grad::dy/dx@point0", "mid.grad::error@point1",
                                 "mid.grad::error@point2"])
