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
