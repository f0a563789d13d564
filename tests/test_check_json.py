"""check -f json: every result says the tolerances it was held to, and a failure at a value that is
not finite says so in its bound."""
from __future__ import annotations

import json

from cli_run import run


def test_every_result_carries_its_tolerances_when_sources_differ(tmp_path):
    # with two sources of different tolerances the top level has rtol/atol null, and passing
    # results carried none: nothing said what a passing result was held to
    a = tmp_path / "a.grad"
    a.write_text("# check: --rtol 1e-3 --atol 1e-4\ninput x = 2\nx^2\n")
    b = tmp_path / "b.grad"
    b.write_text("# check: --method richardson\ninput x = 2\nx^3\n")
    doc = json.loads(run("check", a, b, "-f", "json").stdout)
    assert doc["rtol"] is None and doc["atol"] is None
    # a's from its # check: line; b's Richardson's defaults (SPEC §5: documented defaults; README)
    assert [(r["rtol"], r["atol"], r["ok"]) for r in doc["results"]] == [(1e-3, 1e-4, True), (1e-8, 1e-10, True)]


def test_an_infinite_derivative_against_nan_differences_is_bound_by_finiteness():
    # d sqrt(x)/dx at 0 is inf; sqrt(0 - h) is nan, so the central difference is nan. The
    # failure said bound "atol" with allowed nan: no tolerance was broken, a value is not finite
    r = run("check", "sqrt(x)", "--at", "x=0", "-f", "json")
    assert r.exit_code == 1
    (res,) = json.loads(r.stdout)["results"]
    assert (res["ad"], res["fd"], res["bound"], res["allowed"]) == ("inf", "nan", "finite", "nan")
    assert "non-finite derivative" in res["notes"]
