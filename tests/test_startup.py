"""Start-up of the command line (README "Performance", W1): what a one-liner loads, and the
console entry's fast exit (no interpreter teardown) keeping every byte and exit code."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = str(Path(sys.executable).with_name("gradcalc"))
ONE_LINER = ["grad", "sin(x)*y", "--at", "x=1,y=2"]
#: What only other commands or options use (check, plot, graph, --symbolic, --exec, CI output,
#: Typer's rich help): a grad one-liner loads none of it, whatever the format.
OTHER_COMMANDS_ONLY = {
    "gradcalc.checks", "gradcalc.numerics", "gradcalc.stencil", "gradcalc.suite", "gradcalc.sweep",
    "gradcalc.plots", "gradcalc.symbolic", "gradcalc.blackbox", "gradcalc.testing", "gradcalc.pytest_plugin",
    "gradcalc.cli.github", "gradcalc.cli.graphs", "gradcalc.cli.pictures", "typer.rich_utils", "sympy"}
#: Parts of rich that rich.console and rich.table do not load themselves: a table needs none.
RICH_UNUSED_BY_TABLES = {"rich.pretty", "rich.traceback", "rich.markdown", "rich.syntax", "rich.panel",
                         "rich.progress", "rich.live", "rich.status", "rich.logging"}


def imported(*args) -> tuple[set, subprocess.CompletedProcess]:
    """The modules `python -m gradcalc ARGS` imports (from -X importtime), and the run."""
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "gradcalc", *args], capture_output=True,
                       text=True, timeout=60)
    names = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    return names, r


def test_a_json_one_liner_loads_no_rich_and_no_package_metadata():
    names, r = imported(*ONE_LINER, "-f", "json")
    assert r.returncode == 0, r.stderr
    assert '"gradient": {"x": %r, "y": %r}' % (2 * math.cos(1.0), math.sin(1.0)) in r.stdout
    unwanted = {n for n in names if n.split(".")[0] in ("rich", "sympy", "pkg_resources", "importlib_metadata")
                or n.startswith("importlib.metadata")}
    assert not unwanted, sorted(unwanted)
    assert not names & OTHER_COMMANDS_ONLY, sorted(names & OTHER_COMMANDS_ONLY)
    assert "typer" in names and "numpy" in names  # (the test sees what it should)


def test_a_table_one_liner_loads_rich_but_not_its_emoji_table():
    names, r = imported(*ONE_LINER)
    assert r.returncode == 0, r.stderr
    assert "rich.table" in names
    assert not {n for n in names if n.startswith(("rich._emoji_codes", "importlib.metadata", "sympy"))}
    assert not names & OTHER_COMMANDS_ONLY, sorted(names & OTHER_COMMANDS_ONLY)
    assert not names & RICH_UNUSED_BY_TABLES, sorted(names & RICH_UNUSED_BY_TABLES)
    assert "json" not in names  # (only JSON output and JSON files need it)


def test_names_are_printed_as_written_not_as_emoji(tmp_path):
    (tmp_path / "a:x:b.grad").write_text("input x\nx^2\n")
    r = subprocess.run([SCRIPT, "check", "a:x:b.grad", "--at", "x=1"], capture_output=True, text=True,
                       timeout=60, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "a:x:b.grad" in r.stdout and "\u274c" not in r.stdout


def test_the_fast_exit_writes_everything_and_keeps_exit_codes(tmp_path):
    n = 200_000  # far more than any buffer: the exit must come after the last byte is written
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    r = subprocess.run([SCRIPT, "eval", f"linspace(0, {n - 1}, {n})", "-f", "plain"], capture_output=True,
                       text=True, timeout=60, env=buffered)
    assert r.returncode == 0 and r.stdout == " ".join(map(str, range(n))) + "\n"
    assert subprocess.run([SCRIPT, "grad", "x^2", "--at", "y=1"], capture_output=True, timeout=60).returncode == 2
    (tmp_path / "wrong.expect.json").write_text(
        '{"schema": 1, "command": "grad", "of": "_", "at": {"x": 1.0}, "value": 1.0, "gradient": {"x": 3.0}, '
        '"unconnected": [], "warnings": []}\n')
    (tmp_path / "wrong.grad").write_text("input x\nx^2\n")
    r = subprocess.run([SCRIPT, "check", "wrong.grad"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 1, (r.stdout, r.stderr)


def test_a_reader_that_goes_away_is_no_error():
    r = subprocess.run(f"'{SCRIPT}' eval 'linspace(0, 1, 300000)' -f plain | head -c 10", shell=True,
                       capture_output=True, text=True, timeout=60)
    assert r.stdout == "0 3.333344" and r.stderr == ""


def test_under_a_profiler_the_process_exits_the_ordinary_way():
    # cProfile prints its report after the program returns: the fast exit would swallow it
    r = subprocess.run([sys.executable, "-m", "cProfile", "-m", "gradcalc", *ONE_LINER, "-f", "json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "function calls" in r.stdout and '"schema": 1' in r.stdout


def test_python_i_reaches_its_prompt_with_the_cycle_collector_on():
    # a command runs with the collector off (cli.main); an interactive session after it must not
    r = subprocess.run([sys.executable, "-i", "-m", "gradcalc", "grad", "x^2", "--at", "x=3", "-f", "plain"],
                       input="import gc; print('collector', gc.isenabled())\n", capture_output=True, text=True,
                       timeout=60)
    assert r.stdout.startswith("6\n") and "collector True" in r.stdout + r.stderr, (r.stdout, r.stderr)
