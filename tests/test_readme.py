"""README.md shows real output: every `$ gradcalc ...` example in its console blocks is run
here and its output compared with the README's text.

A block line holding "..." elides output, so such an example only has to print the README's
other lines in order; any other example must print exactly the README's lines (trailing
blanks aside: rich pads its table lines).  An example is compared with what it prints on
stdout, or on stderr when stdout is empty (an error).
"""
from __future__ import annotations

import os
import re
import shlex

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
    monkeypatch.chdir(ROOT)
    stdin = None
    piped = re.match(r"echo '([^']*)' \| (.*)", command)
    if piped:
        stdin, command = piped.group(1) + "\n", piped.group(2)
    argv = shlex.split(command, comments=True)
    assert argv[0] == "gradcalc", command
    argv = [str(tmp_path / a) if a == "r.xml" else a for a in argv[1:]]  # (a report it writes)
    result = CliRunner().invoke(app, argv, input=stdin)
    printed = result.stdout if result.stdout.strip() else result.stderr
    got = [line.rstrip() for line in printed.rstrip("\n").split("\n")]
    if any("..." in line for line in expected):
        wanted = iter(got)
        for line in expected:
            if "..." not in line:
                assert any(line == g for g in wanted), f"README line not printed (in order): {line!r}"
    else:
        assert got == expected
