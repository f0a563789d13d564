"""check --points: a random point that cannot be checked is an error result of its own, naming
the point and the values drawn there, and the other points are still checked."""
from __future__ import annotations

import json
import math
import re

from cli_run import run

MIDPOINT = """# check: --points 6 --seed 1
input v[2] = [1, 2]
input x = 0.01
y = v[floor(abs(x)*30)] * x^2
"""

DRAWN = re.compile(r"; at random point (\d) \(--points 6 --seed 1\), where v = \[(\S+), (\S+)\], x = (\S+)$")


def test_an_error_at_a_random_point_names_it_and_the_others_are_checked(tmp_path):
    # point 0 (x = 0.01: v[0]) is fine; a random x from a standard normal with |x| >= 2/30
    # indexes v out of range. The check reported one error, no point, no values, and lost
    # point 0's results
    path = tmp_path / "midpoint.grad"
    path.write_text(MIDPOINT)
    r = run("check", path, "-f", "json")
    assert r.exit_code == 2
    results = json.loads(r.stdout)["results"]
    checked = [x for x in results if "error" not in x]
    assert [(x["point"], x["wrt"], x["ok"]) for x in checked] == [(0, "v", True), (0, "x", True)]
    errors = [x for x in results if "error" in x]
    assert errors and all(e["error"]["kind"] == "shape" for e in errors)
    for e in errors:
        found = DRAWN.search(e["error"]["message"])
        assert found, e["error"]["message"]
        assert int(found.group(1)) == e["point"]
        x = float(found.group(4))
        # the index the message gives is floor(|x| 30), from the value it names
        index = int(re.search(r"index (\d+) is out of range", e["error"]["message"]).group(1))
        assert index == math.floor(abs(x) * 30) >= 2
        # and --at those values reproduces it
        again = run("check", path, "--at", f"v=[{found.group(2)}, {found.group(3)}],x={x!r}", "--points", "0",
                    "-f", "plain")
        assert again.exit_code == 2 and f"index {index} is out of range" in again.stdout


def test_point_errors_are_rows_of_their_own_in_every_report(tmp_path):
    path = tmp_path / "midpoint.grad"
    path.write_text(MIDPOINT)
    plain = run("check", path, "-f", "plain").stdout.splitlines()
    assert plain[0].startswith("ok ") and plain[1].startswith("ok ")
    assert all(line.startswith("ERROR ") and "at random point" in line for line in plain[2:-1])
    assert plain[-1].startswith("check: 2 passed, 0 failed, ") and "rtol 1e-06, atol 1e-08" in plain[-1]
    xml = tmp_path / "r.xml"
    run("check", path, "--junit-xml", xml)
    text = xml.read_text()
    assert text.count("<error ") == len(plain) - 3 and "at random point 1 (" in text


def test_the_shapes_run_of_points_names_its_values():
    # the run that finds the inputs' shapes for --points draws random values too
    r = run("check", "input x[10]; y = sum(x) + x[floor(x[0]*100)]", "--points", "1", "-f", "plain")
    assert r.exit_code == 2
    assert "while finding the shapes of the inputs --points draws, by a run at random values (x = [" in r.stdout
    assert "(shape (10,))" in r.stdout
