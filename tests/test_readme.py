"""README.md shows real output: every `$ gradcalc ...` and `$ pytest ...` example in its
console blocks is run here and its output compared with the README's text (an example may
state its exit code, `$ gradcalc check ...  # exit 1`, and set variables, `VAR=value gradcalc
...`); the files "Using gradcalc in CI" shows are the repository's, and its workflow's
commands run.

A block line holding "..." elides output, so such an example only has to print the README's
other lines in order; any other example must print exactly the README's lines (trailing
blanks aside: rich pads its table lines).  An example is compared with what it prints on
stdout, or on stderr when stdout is empty (an error).
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from gradcalc.cli.app import app

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _examples():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    for block in re.findall(r"```console\n(.*?)```", text, re.S):
        lines = block.rstrip("\n").split("\n")
        starts = [i for i, line in enumerate(lines) if line.startswith("$ ")]
        for k, i in enumerate(starts):
            end = starts[k + 1] if k + 1 < len(starts) else len(lines)
            expected = [line.rstrip() for line in lines[i + 1:end]]
            while expected and not expected[-1]:  # (a blank line between examples)
                expected.pop()
            yield lines[i][2:], expected


EXAMPLES = list(_examples())


def test_the_readme_has_examples():
    assert len(EXAMPLES) >= 25


@pytest.mark.parametrize("command, expected", EXAMPLES, ids=[c[:60] for c, _ in EXAMPLES])
def test_readme_example_prints_what_the_readme_shows(command, expected, monkeypatch, tmp_path):
    monkeypatch.chdir(_workdir(command, tmp_path))
    for name in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "FORCE_COLOR"):  # (the suite's own CI's)
        monkeypatch.delenv(name, raising=False)
    stdin = None
    piped = re.match(r"echo '([^']*)' \| (.*)", command)
    if piped:
        stdin, command = piped.group(1) + "\n", piped.group(2)
    stated = re.search(r"#\s*exits? (\d+)\s*$", command)  # `$ gradcalc check ...  # exit 1`
    argv = shlex.split(command, comments=True)
    env = {}
    while re.match(r"[A-Z_]+=", argv[0]):  # `VAR=value gradcalc ...`
        name, _, value = argv.pop(0).partition("=")
        env[name] = value
    argv = [str(tmp_path / a) if a == "r.xml" else a for a in argv]  # (a report it writes)
    if argv[0] == "pytest":
        code, printed = _pytest(argv[1:], env)
        got, expected = _durations(_lines(printed)), _durations(expected)
    else:
        assert argv[0] == "gradcalc", command
        result = CliRunner().invoke(app, argv[1:], input=stdin, env=env)
        code, printed = result.exit_code, result.stdout if result.stdout.strip() else result.stderr
        got = _lines(printed)
    if stated:
        assert code == int(stated.group(1)), printed
    if any("..." in line for line in expected):
        wanted = iter(got)
        for line in expected:
            if "..." not in line:
                assert any(line == g for g in wanted), f"README line not printed (in order): {line!r}"
    else:
        assert got == expected


def _lines(printed: str) -> list[str]:
    return [line.rstrip() for line in printed.rstrip("\n").split("\n")]


def _workdir(command: str, tmp_path) -> str:
    """Where an example runs: the repository, or, for one that writes files beside its
    sources (--update-expect), a copy of its examples/ and samples/ folders."""
    if "--update-expect" not in command:
        return ROOT
    for folder in ("examples", "samples"):
        shutil.copytree(os.path.join(ROOT, folder), tmp_path / folder)
    return str(tmp_path)


def _pytest(args: list, env: dict) -> tuple[int, str]:
    """A `$ pytest ...` example: pytest run as the README's reader runs it, in a terminal
    80 columns wide (its rules and summary lines fit the width)."""
    run = subprocess.run([sys.executable, "-m", "pytest", *args, "-p", "no:cacheprovider"],
                         capture_output=True, text=True, env={**os.environ, "COLUMNS": "80", **env})
    return run.returncode, run.stdout


def _durations(lines: list[str]) -> list[str]:
    """pytest's summary line with its duration (`in 1.38s`) made one that never varies."""
    return [re.sub(r" in \d+\.\d+s\b", " in 0.01s", line) for line in lines]


# ==========================================================================
# "Using gradcalc in CI": the files it shows are the repository's, and their commands run
# ==========================================================================

def _blocks(language: str) -> list[str]:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        return re.findall(rf"```{language}\n(.*?)```", f.read(), re.S)


def _repository_file(*path: str) -> str:
    with open(os.path.join(ROOT, *path), encoding="utf-8") as f:
        return f.read()


def test_the_readme_workflow_is_the_example_file():
    (workflow,) = [b for b in _blocks("yaml") if "jobs:" in b]
    assert workflow == _repository_file("examples", "ci", "gradcalc-check.yml")


def test_the_readme_workflow_runs(monkeypatch, tmp_path):
    """Each `run:` step of the workflow, in a checkout whose grads/ holds the samples: pip
    installs gradcalc (not run here), gradcalc check passes and writes its JUnit file."""
    (workflow,) = [b for b in _blocks("yaml") if "jobs:" in b]
    steps = [shlex.split(step) for step in re.findall(r"^\s*- run: (.*)$", workflow, re.M)]
    assert [s[0] for s in steps] == ["pip", "gradcalc"]
    assert steps[0][:2] == ["pip", "install"] and steps[0][2].endswith("/gradcalc")
    shutil.copytree(os.path.join(ROOT, "samples"), tmp_path / "grads")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, steps[1][1:])
    assert result.exit_code == 0, result.output
    junit = steps[1][steps[1].index("--junit-xml") + 1]
    import xml.etree.ElementTree as ET
    suite = ET.parse(tmp_path / junit).getroot()
    assert suite.get("failures") == "0" and len(suite.findall("testcase")) >= 40


def test_the_readme_pre_commit_snippet_names_this_repositorys_hook():
    (snippet,) = [b for b in _blocks("yaml") if "hooks:" in b]
    hooks = re.findall(r"^- id: (\S+)$", _repository_file(".pre-commit-hooks.yaml"), re.M)
    assert re.findall(r"- id: (\S+)", snippet) == ["gradcalc-check"] and "gradcalc-check" in hooks
    (workflow,) = [b for b in _blocks("yaml") if "jobs:" in b]
    repo = re.search(r"repo: (\S+)", snippet).group(1)
    assert f"git+{repo}" in workflow  # one address for the project in both


def test_the_readme_pytest_module_is_the_example_file():
    """The module the README shows runs in its `$ pytest examples/ci/` example."""
    (module,) = [b for b in _blocks("python") if "assert_gradients" in b]
    assert module == _repository_file("examples", "ci", "test_gradients.py")
