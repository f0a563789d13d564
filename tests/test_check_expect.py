"""check's expectation files and source labels (SPEC §5, "check for CI"; §7 exit codes).

- --update-expect of a file checked at random --points (its # check: --at leaves an input
  free) writes the expectation at the first random point, recorded in "at", instead of
  failing on the free input.
- An expectation of the wrong shape (a stored grad --sum output, a hand-edited file) or of
  an unknown schema is the user's error (exit 2), not a derivative mismatch (exit 1).
- Program texts given together are labelled <expr 1>, <expr 2>...; one alone stays <expr>,
  and an error of its --expect file is labelled <expr> as well.

Expected derivatives are closed forms worked out by hand: d/dx sum(x*y) = y, d/dy = x;
d/dx x^2 = 2x.
"""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from cli_run import run

POINTS_FILE = "# check: --at x=[1,2] --points 2\ninput y[2]\nsum(x*y)\n"


def plain_rows(r) -> list[str]:
    return r.stdout.strip().splitlines()


# ==========================================================================
# 1. --update-expect of a file checked at random points
# ==========================================================================


def test_update_expect_of_a_file_checked_at_random_points_writes_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.grad").write_text(POINTS_FILE)
    r = run("check", "p.grad", "--update-expect", "-f", "plain")
    assert r.exit_code == 0, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    doc = json.loads((tmp_path / "p.expect.json").read_text())
    assert doc["schema"] == 1 and doc["command"] == "grad"
    assert doc["at"]["x"] == [1.0, 2.0]  # the file's --at value, as given
    y = doc["at"]["y"]  # drawn, and recorded: the file is self-contained
    assert len(y) == 2 and all(isinstance(v, float) for v in y)
    assert doc["gradient"]["y"] == [1.0, 2.0]  # d/dy sum(x*y) = x
    assert doc["gradient"]["x"] == y  # d/dx sum(x*y) = y
    assert any("[expectation file]" in row and row.startswith("ok ") for row in plain_rows(r))


def test_update_expect_at_random_points_is_the_same_file_twice(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.grad").write_text(POINTS_FILE)
    assert run("check", "p.grad", "--update-expect").exit_code == 0
    first = (tmp_path / "p.expect.json").read_text()
    assert run("check", "p.grad", "--update-expect").exit_code == 0
    assert (tmp_path / "p.expect.json").read_text() == first  # (--seed 0: the same draw)


def test_the_expectation_made_at_a_random_point_is_compared_there_later(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.grad").write_text(POINTS_FILE)
    assert run("check", "p.grad", "--update-expect").exit_code == 0
    r = run("check", "p.grad", "-f", "json")
    assert r.exit_code == 0, r.stdout
    kinds = [res["comparison"] for res in json.loads(r.stdout)["results"]]
    assert kinds.count("expect") == 2 and kinds.count("jacobian") == 4  # 2 points x 2 inputs
    # an edit that changes the derivative: d/dy (sum(x*y) + sum(y)) = x + 1 = [2, 3]
    (tmp_path / "p.grad").write_text(POINTS_FILE.replace("sum(x*y)", "sum(x*y) + sum(y)"))
    r = run("check", "p.grad", "-f", "plain")
    assert r.exit_code == 1, r.stdout
    (row,) = [row for row in plain_rows(r) if row.startswith("FAIL")]
    assert "entry gradient['y']" in row and "stored 1.0, computed 2.0" in row or \
        "stored 2.0, computed 3.0" in row, row


def test_update_expect_over_a_folder_with_a_random_points_file_exits_0(tmp_path):
    (tmp_path / "p.grad").write_text(POINTS_FILE)
    (tmp_path / "q.grad").write_text("# check: --at x=3\nx^2\n")
    r = run("check", str(tmp_path), "--update-expect", "-f", "plain")
    assert r.exit_code == 0, (r.stdout, r.stderr)
    assert json.loads((tmp_path / "q.expect.json").read_text())["gradient"] == {"x": 6.0}  # 2x at 3
    assert json.loads((tmp_path / "p.expect.json").read_text())["gradient"]["y"] == [1.0, 2.0]


# ==========================================================================
# 2. An expectation that does not fit: the user's error, not a mismatch
# ==========================================================================


def _error_result(tmp_path, doc: dict) -> tuple[dict, str]:
    """check 'x^2' against the expectation doc: an error (exit 2, no traceback); its result and
    what went to stderr."""
    path = tmp_path / "e.json"
    path.write_text(json.dumps(doc))
    r = run("check", "x^2", "--expect", path, "-f", "json")
    assert r.exit_code == 2, r.stdout
    assert "Traceback" not in r.stderr
    (res,) = [x for x in json.loads(r.stdout)["results"] if "error" in x]
    return res, r.stderr


def test_a_stored_grad_sum_output_is_an_error_that_says_so(tmp_path):
    # what `gradcalc grad 'x^2' --at x=[1,2] --sum -f json` writes: d/dx sum(x^2) = 2x
    doc = {"schema": 1, "command": "grad", "of": "_", "at": {"x": [1.0, 2.0]}, "value": 5.0,
           "gradient": {"x": [2.0, 4.0]}, "unconnected": [], "warnings": []}
    res, stderr = _error_result(tmp_path, doc)
    err = res["error"]
    assert res["source"] == "<expr>" and err["source"] == "<expr>"
    assert "grad --sum" in err["message"] and "(2,)" in err["message"] and "(2, 2)" in err["message"]
    assert "jacobian" in err["hint"]
    assert "error: expectation file" in stderr and "hint:" in stderr


def test_a_stored_number_too_large_for_a_float_is_refused_as_a_values_file_refuses_it(tmp_path):
    # (1e400 read as inf: check ran at x = inf and reported two failures, exit 1)
    path = tmp_path / "e.json"
    path.write_text('{"schema": 1, "command": "grad", "of": "_", "at": {"x": 1e400}, "gradient": {"x": 2}}')
    r = run("check", "x^2", "--expect", path, "-f", "json")
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert "cannot be read: it holds a number too large for a float: 1e400" in r.stderr


def test_a_hand_edited_expectation_of_the_wrong_shape_names_the_shapes(tmp_path):
    doc = {"schema": 1, "command": "jacobian", "of": ["_"], "at": {"x": [1.0, 2.0]},
           "jacobian": {"_": {"x": [[2.0, 0.0, 0.0], [0.0, 4.0, 0.0]]}}}
    path = tmp_path / "j.json"
    path.write_text(json.dumps(doc))
    r = run("check", "x^2", "--expect", path, "-f", "plain")
    assert r.exit_code == 2, r.stdout
    assert "Traceback" not in r.stderr
    (row,) = [row for row in plain_rows(r) if row.startswith("ERROR")]
    assert "jacobian['_']['x']" in row and "(2, 3)" in row and "(2, 2)" in row, row


def test_the_right_shape_still_compares_and_a_changed_value_is_a_mismatch(tmp_path):
    # d/dx x^2 at [1, 2] is diag(2, 4); a stored 5 where 4 belongs fails (exit 1)
    doc = {"schema": 1, "command": "jacobian", "of": ["_"], "at": {"x": [1.0, 2.0]},
           "jacobian": {"_": {"x": [[2.0, 0.0], [0.0, 5.0]]}}}
    path = tmp_path / "j.json"
    path.write_text(json.dumps(doc))
    assert run("check", "x^2", "--expect", path).exit_code == 1
    doc["jacobian"]["_"]["x"][1][1] = 4.0
    path.write_text(json.dumps(doc))
    assert run("check", "x^2", "--expect", path).exit_code == 0


def test_an_expectation_of_an_unknown_schema_is_an_error(tmp_path):
    doc = {"schema": 2, "command": "grad", "of": "_", "at": {"x": 3.0}, "gradient": {"x": 6.0}}
    res, _ = _error_result(tmp_path, doc)
    assert "schema 2" in res["error"]["message"] and res["error"]["hint"]


def test_a_sibling_expectation_of_the_wrong_shape_is_an_error_the_others_still_checked(tmp_path):
    (tmp_path / "a.grad").write_text("# check: --at x=[1,2]\nx^2\n")
    (tmp_path / "a.expect.json").write_text(json.dumps(
        {"schema": 1, "command": "grad", "of": "_", "at": {"x": [1.0, 2.0]}, "gradient": {"x": [2.0, 4.0]}}))
    (tmp_path / "b.grad").write_text("# check: --at x=3\nx^2\n")
    r = run("check", str(tmp_path), "-f", "plain")
    assert r.exit_code == 2, r.stdout
    rows = plain_rows(r)
    assert rows[0].startswith("ERROR ") and "a.expect.json" in rows[0]
    assert any(row.startswith("ok ") and "b.grad" in row for row in rows)


# ==========================================================================
# 3. Labels of program text
# ==========================================================================


def test_several_program_texts_are_numbered_in_json_and_junit(tmp_path):
    xml = tmp_path / "r.xml"
    r = run("check", "sin(x)", "cos(x)", "--at", "x=1", "--junit-xml", xml, "-f", "json")
    assert r.exit_code == 0, r.stdout
    sources = [res["source"] for res in json.loads(r.stdout)["results"]]
    assert sources == ["<expr 1>", "<expr 2>"]
    files = [case.get("file") for case in ET.parse(xml).getroot().iter("testcase")]
    assert files == ["<expr 1>", "<expr 2>"]


def test_one_program_text_keeps_its_label():
    r = run("check", "sin(x)", "--at", "x=1", "-f", "json")
    assert [res["source"] for res in json.loads(r.stdout)["results"]] == ["<expr>"]


def test_numbered_labels_reach_the_errors_and_files_keep_their_names(tmp_path):
    good = tmp_path / "good.grad"
    good.write_text("# check: --at x=2\nx^3\n")
    r = run("check", good, "sin(x", "cos(x)", "nosuch.grad", "--at", "x=1", "-f", "json")
    assert r.exit_code == 2
    assert "Traceback" not in r.stderr
    results = json.loads(r.stdout)["results"]
    assert [res["source"] for res in results] == [str(good), "<expr 1>", "<expr 2>", "nosuch.grad"]
    assert results[1]["error"]["kind"] == "syntax" and results[1]["error"]["source"] == "<expr 1>"
    assert results[3]["error"]["kind"] == "file"
    assert "error: <expr 1>:1:" in r.stderr


def test_a_missing_expect_file_is_labelled_as_its_program_text(tmp_path):
    r = run("check", "x^2", "--expect", tmp_path / "nofile.json", "--at", "x=1", "-f", "json")
    assert r.exit_code == 2
    doc = json.loads(r.stdout)
    (res,) = doc["results"]
    assert res["source"] == "<expr>" and res["error"]["source"] == "<expr>"
    assert res["error"]["kind"] == "file"
    assert doc["error"] == res["error"]  # (the document's error said "source": null)
