"""Shell conventions, values and output (issue 17): --version, completion, colour, values
files and pipes, --save, --wrt a,b, and the rough edges a new user hits."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from cli_run import ok, ok_json, run, user_error


def gradcalc(*args, env=None, input=None):
    """The command line in a subprocess (environment and terminals matter)."""
    full = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "gradcalc", *args], capture_output=True, text=True,
                          env=full, input=input, timeout=60)


# -- the point a grad/jacobian output was made at ---------------------------------

def test_grad_json_records_the_point_defaults_included():
    doc = ok_json("grad", "input a = 2; x^2*a", "--at", "x=3")
    assert doc["at"] == {"a": 2.0, "x": 3.0}
    assert doc["gradient"] == {"a": 9.0, "x": 12.0}  # d(a x^2)/da = x^2, d/dx = 2 a x


def test_jacobian_json_records_the_point():
    doc = ok_json("jacobian", "x*y", "--at", "x=[[1,2]],y=3")
    assert doc["at"] == {"x": [[1.0, 2.0]], "y": 3.0}


# -- the unnamed output: one name everywhere ----------------------------------------

def test_the_unnamed_output_is_underscore_in_tables_and_never_a_program_name():
    out = ok("grad", "g = x^2; f = 2*x; g", "--at", "x=3").stdout
    assert "d_/dx │ scalar │     6" in out and "df/dx" not in out  # the bare `g`: d(x^2)/dx = 6
    out = ok("grad", "f = 2*x; x^2", "--at", "x=3").stdout
    assert "gradient of _ = 9" in out and "d_/dx" in out and "df/dx" not in out


@pytest.mark.parametrize("args, text", [
    (("jacobian", "f = x; 2*x", "--at", "x=[1,2]"), "jacobian d_/dx"),
    (("hessian", "f = x; x^2*y", "--at", "x=1,y=2"), "hessian of _"),
    (("hessian", "f = x; sum(x^2)", "--at", "x=[1,2]"), "d²_/dxdx"),
    (("vjp", "f = x; 2*x", "--at", "x=[1,2]", "--cotangent", "1"), "v^T d_/dx"),
    (("jvp", "f = x; 2*x", "--at", "x=1", "--tangent", "x=1"), "│ _ "),
    (("graph", "f = x; 2*x", "--at", "x=1"), "output _"),
])
def test_the_unnamed_output_has_the_same_name_in_every_view(args, text):
    out = ok(*args).stdout
    assert text in out and "df/" not in out


def test_the_unnamed_output_is_underscore_in_json_and_errors():
    assert ok_json("grad", "x^2", "--at", "x=1")["of"] == "_"
    err = user_error("grad", "x*2", "--at", "x=[1,2]").stderr
    assert "'_' has shape (2,)" in err


def test_a_mistyped_command_is_suggested_once():
    err = user_error("gard", "x").stderr
    assert err.count("Did you mean 'grad'?") == 1
