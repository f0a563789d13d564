"""The test suite's way of running the command line in-process: run, ok, ok_json, user_error."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from gradcalc.cli.app import app

runner = CliRunner()


def run(*args, input=None):
    """Invoke the CLI; returns the click Result (stdout and stderr kept apart)."""
    return runner.invoke(app, [str(a) for a in args], input=input)


def ok(*args, input=None):
    r = run(*args, input=input)
    assert r.exit_code == 0, (r.exit_code, r.stdout, r.stderr, r.exception)
    return r


def ok_json(*args, input=None) -> dict:
    r = ok(*args, "-f", "json", input=input)
    doc = json.loads(r.stdout)
    assert doc["schema"] == 1
    return doc


def user_error(*args, input=None):
    r = run(*args, input=input)
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr, r.exception)
    assert "Traceback" not in r.stderr
    return r
