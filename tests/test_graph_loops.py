"""graph on programs with loops and calls (issue 15 item 5): equations recorded inside a call
name the function, a long tape is summarised in tables and listings (not in JSON) unless
--full, and a loop's graph is that of the same program unrolled by hand."""
from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

import gradcalc
from gradcalc.cli.app import app

runner = CliRunner()
LOOP = "y = x\nfor i in range(3000) { y = y * 1.0001 }\ny"
# the equations of LOOP: y = x (a copy), 3000 products, the output (a copy)
LOOP_EQUATIONS = 3002


def ok(*args) -> str:
    r = runner.invoke(app, list(args), env={"COLUMNS": "120", "NO_COLOR": "1"})
    assert r.exit_code == 0, (r.stdout, r.stderr)
    return r.stdout


def equation_lines(listing: str) -> list:
    return [line for line in listing.splitlines() if re.match(r"v\d+ = ", line) and "= input" not in line
            and "= const" not in line]


# ==========================================================================
# Equations recorded inside a call name the function
# ==========================================================================


SQUARE = "def sq(t) = t^2\ny = sq(x) + 1"


def test_json_names_the_function_of_each_equation_inside_a_call():
    doc = json.loads(ok("graph", SQUARE, "--at", "x=2", "-f", "json"))
    by_op = {n["op"]: n for n in doc["nodes"]}
    assert by_op["pow_const"]["function"] == "sq"
    assert (by_op["pow_const"]["line"], by_op["pow_const"]["column"]) == (1, 14)
    assert "function" not in by_op["add"] and "function" not in by_op["input"]


def test_plain_and_table_say_in_which_function():
    plain = ok("graph", SQUARE, "--at", "x=2", "-f", "plain")
    assert "v1 = pow_const(v0, p=2.0)                 # 1:14 in sq, scalar" in plain.splitlines()
    assert "v3 = add(v1, v2)                          # y, 2:11, scalar" in plain.splitlines()
    assert "1:14 in sq" in ok("graph", SQUARE, "--at", "x=2")


def test_the_innermost_function_is_named_and_every_call_of_it():
    src = ("def f(t) {\n  s = 0\n  for i in range(2) { s = s + t * i }\n  return s\n}\n"
           "def g(a) = f(a) * 3\ny = g(x) + f(x)")
    nodes = json.loads(ok("graph", src, "--at", "x=2", "-f", "json"))["nodes"]
    named = [(n["op"], n.get("function")) for n in nodes if n["op"] not in ("input", "const")]
    # g calls f (its loop: a mul and an add twice), then multiplies by 3; then f again; then y's add
    assert named == [("mul", "f"), ("add", "f")] * 2 + [("mul", "g")] + [("mul", "f"), ("add", "f")] * 2 + \
        [("add", None)]


def test_the_backward_tape_names_the_function_too():
    plain = ok("graph", SQUARE, "--at", "x=2", "-f", "plain", "--backward")
    vjps = [line for line in plain.splitlines() if "vjp of v1" in line]
    assert vjps and all("1:14 in sq" in line for line in vjps)


def test_dot_labels_say_in_which_function():
    assert 'v1 [label="v1 = pow_const\\np=2.0\\nin sq", shape=box];' in ok("graph", SQUARE, "--at", "x=2",
                                                                            "-f", "dot")


def test_a_program_without_functions_is_shown_as_before():
    plain = ok("graph", "y = sin(x) * x", "--at", "x=2", "-f", "plain")
    assert plain == ("v0 = input x                              # x, 1:9, scalar\n"
                     "v1 = sin(v0)                              # 1:5, scalar\n"
                     "v2 = mul(v1, v0)                          # y, 1:12, scalar\n")


# ==========================================================================
# A long tape is summarised, unless --full
# ==========================================================================


def test_the_listing_of_a_3000_iteration_loop_is_summarised():
    plain = ok("graph", LOOP, "--at", "x=2", "-f", "plain")
    lines = plain.splitlines()
    assert len(lines) < 60
    assert len(equation_lines(plain)) == 40  # the first and the last 20
    (summary,) = [line for line in lines if line.startswith("# ...")]
    count = int(re.search(r"(\d+) more equations", summary).group(1))
    assert count == LOOP_EQUATIONS - 40
    assert "--full" in summary
    # the last equation shown is the output, the first the copy y = x
    assert equation_lines(plain)[-1].startswith("v") and "# _, 3:1" in equation_lines(plain)[-1]
    assert "copy(v0)" in equation_lines(plain)[0]


def test_the_table_of_a_long_loop_counts_every_equation_and_shows_few():
    table = ok("graph", LOOP, "--at", "x=2")
    assert f"forward tape: {LOOP_EQUATIONS} equations" in table
    assert f"{LOOP_EQUATIONS - 40} more equations" in table
    assert len(table.splitlines()) < 80


def test_full_shows_every_equation():
    plain = ok("graph", LOOP, "--at", "x=2", "-f", "plain", "--full")
    assert len(equation_lines(plain)) == LOOP_EQUATIONS
    assert "more equations" not in plain


def test_json_holds_every_node_summarised_or_not():
    doc = json.loads(ok("graph", LOOP, "--at", "x=2", "-f", "json"))
    equations = [n for n in doc["nodes"] if n["op"] not in ("input", "const")]
    assert len(equations) == LOOP_EQUATIONS
    assert not any(n["op"] == "omitted" for n in doc["nodes"])


def test_the_backward_tape_is_summarised_too():
    plain = ok("graph", LOOP, "--at", "x=2", "-f", "plain", "--backward")
    summaries = [line for line in plain.splitlines() if line.startswith("# ...")]
    assert len(summaries) == 2
    assert len(plain.splitlines()) < 120
    assert plain.splitlines()[-1].startswith("# d_/dx = v")


def test_a_tape_under_the_limit_is_shown_whole():
    src = "y = x\nfor i in range(150) { y = y * 1.0001 }\ny"
    assert len(equation_lines(ok("graph", src, "--at", "x=2", "-f", "plain"))) == 152


# ==========================================================================
# A loop's graph is the same program's unrolled by hand
# ==========================================================================


def ops(source: str) -> list:
    r = gradcalc.graph(source, at={"x": 1.5})
    return [(n["op"], n.get("params")) for n in r.nodes if n["op"] not in ("input", "const")]


@pytest.mark.parametrize("n", [1, 3, 7])
def test_a_for_loop_records_the_unrolled_program(n):
    loop = f"y = x\nfor i in range({n}) {{ y = sin(y) * x }}\ny"
    unrolled = "y = x\n" + "y = sin(y) * x\n" * n + "y"
    assert ops(loop) == ops(unrolled)
    assert len(ops(loop)) == 2 * n + 2


def test_a_call_records_its_body_where_it_is_called():
    with_call = "def cell(h) = tanh(h * w)\ny = cell(cell(x))"
    by_hand = "y = tanh(tanh(x * w) * w)"
    assert [op for op, _ in ops_at(with_call)] == [op for op, _ in ops_at(by_hand)]


def ops_at(source: str) -> list:
    r = gradcalc.graph(source, at={"x": 0.5, "w": 0.3})
    return [(n["op"], n.get("function")) for n in r.nodes if n["op"] not in ("input", "const")]


def test_a_backward_graph_lists_each_node_once():
    """graph --back adds each constant a VJP rule records once: its nodes' ids are kept in a set
    (looking each one up in the list made an 8,000-term sum take 20 s). Each id appears once, and
    the backward pass of x*3 + x*3 + sin(x) reads its constants and the seed."""
    nodes = gradcalc.graph("y = x*3 + x*3 + sin(x)", at={"x": 0.5}, backward_pass=True).nodes
    ids = [n["id"] for n in nodes]
    assert len(ids) == len(set(ids))
    back = [n for n in nodes if n["phase"] == "backward"]
    assert any(n["op"] == "const" for n in back) and any(n["op"] == "gradient" for n in back)
