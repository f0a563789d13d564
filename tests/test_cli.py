"""The command line (SPEC §3, §5, §6, §7) through typer's CliRunner, plus real subprocesses.

Expected numbers come from closed forms and ``math``; exact texts are those of
SPEC §6/§7.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest


from cli_run import ok, ok_json, run, user_error


def plain_numbers(text: str) -> list[list[float]]:
    return [[float(v) for v in line.split()] for line in text.splitlines()]


# ==========================================================================
# Plain output (SPEC §6)
# ==========================================================================


def test_grad_plain_is_exactly_the_numbers():
    r = ok("grad", "x^2*y", "--at", "x=3,y=2", "-f", "plain")
    assert r.stdout == "12\n9\n"
    assert r.stderr == ""


def test_grad_sum_plain():
    assert ok("grad", "x*x", "--at", "x=[1,2]", "--sum", "-f", "plain").stdout == "2 4\n"


def test_plain_follows_wrt_order():
    r = ok("grad", "x^2*y", "--at", "x=3,y=2", "--wrt", "y", "--wrt", "x", "-f", "plain")
    assert r.stdout == "9\n12\n"


def test_plain_flattens_in_c_order():
    # d/dX sum(X * W) = W, printed row by row
    r = ok("grad", "sum(X * [[1, 2, 3], [4, 5, 6]])", "--at", "X=zeros((2, 3))", "-f", "plain")
    assert r.stdout == "1 2 3 4 5 6\n"


def test_plain_shortest_round_trip_numbers():
    assert ok("eval", "1/3", "-f", "plain").stdout == repr(1 / 3) + "\n"
    assert ok("eval", "0.1", "-f", "plain").stdout == "0.1\n"
    assert ok("eval", "[log(0), -log(0), nan]", "-f", "plain").stdout == "-inf inf nan\n"


def test_jacobian_plain():
    assert ok("jacobian", "x*x", "--at", "x=[1,2]", "-f", "plain").stdout == "2 0 0 4\n"


def test_vjp_plain():
    r = ok("vjp", "x*x", "--at", "x=[1,2]", "--cotangent", "[2,3]", "-f", "plain")
    assert r.stdout == "4 12\n"


def test_vjp_negative_scalar_cotangent_with_equals():
    r = ok("vjp", "x*x", "--at", "x=[1,2]", "--cotangent=-1.5", "-f", "plain")
    assert r.stdout == "-3 -6\n"


def test_jvp_plain():
    r = ok("jvp", "x*x", "--at", "x=[1,2]", "--tangent", "x=[1,1]", "-f", "plain")
    assert r.stdout == "2 4\n"


ROSENBROCK = "(1-x)^2 + 100*(y-x^2)^2"


def rosenbrock_hessian(x, y):
    return [[2 - 400 * (y - x * x) + 800 * x * x, -400 * x], [-400 * x, 200.0]]


def test_hessian_plain():
    r = ok("hessian", ROSENBROCK, "--at", "x=1,y=1", "-f", "plain")
    flat = [v for line in plain_numbers(r.stdout) for v in line]
    assert flat == [v for row in rosenbrock_hessian(1.0, 1.0) for v in row] == [802, -400, -400, 200]


# ==========================================================================
# JSON output (SPEC §5, §6)
# ==========================================================================


def test_grad_json_fields_and_exact_floats():
    doc = ok_json("grad", "sin(x)*y", "--at", "x=1,y=2")
    assert doc["schema"] == 1
    assert doc["command"] == "grad"
    assert doc["of"] == "_"
    assert doc["value"] == math.sin(1) * 2
    assert doc["gradient"] == {"x": 2 * math.cos(1), "y": math.sin(1)}
    assert list(doc["gradient"]) == ["x", "y"]
    assert doc["unconnected"] == []
    assert doc["warnings"] == []


def test_json_flag_is_format_json():
    a = ok("grad", "x^2*y", "--at", "x=3,y=2", "--json").stdout
    b = ok("grad", "x^2*y", "--at", "x=3,y=2", "-f", "json").stdout
    c = ok("grad", "x^2*y", "--at", "x=3,y=2", "--format", "json").stdout
    assert a == b == c
    assert json.loads(a)["gradient"] == {"x": 12.0, "y": 9.0}


def test_json_is_one_object_on_stdout_only():
    r = ok("eval", "x + 1", "--at", "x=1", "-f", "json")
    assert r.stdout.count("\n") == 1 and r.stdout.endswith("}\n")
    assert r.stderr == ""


def test_json_non_finite_numbers_are_strings():
    doc = ok_json("eval", "[log(0), -log(0), nan, 1]")
    assert doc["values"]["_"] == ["-inf", "inf", "nan", 1.0]


def test_json_scalars_are_numbers_and_arrays_nested_lists():
    doc = ok_json("eval", "a = 2.5; b = [[1, 2], [3, 4]]; c = [0.1]", "--all")
    assert doc["values"] == {"a": 2.5, "b": [[1.0, 2.0], [3.0, 4.0]], "c": [0.1]}


def test_json_floats_round_trip():
    xs = [0.1, 1 / 3, math.pi, 1e-300, 2.0 ** 0.5, -7.123456789012345e22]
    doc = ok_json("eval", "x", "--at", "x=" + json.dumps(xs))
    assert doc["values"]["_"] == xs


def test_jacobian_json():
    doc = ok_json("jacobian", "x*x", "--at", "x=[1,2]")
    assert doc["command"] == "jacobian"
    assert doc["of"] == ["_"]
    assert doc["value"] == {"_": [1.0, 4.0]}
    assert doc["jacobian"] == {"_": {"x": [[2.0, 0.0], [0.0, 4.0]]}}
    assert doc["unconnected"] == [] and doc["warnings"] == []


@pytest.mark.parametrize("mode", ["rev", "fwd", "auto"])
def test_jacobian_modes_agree(mode):
    doc = ok_json("jacobian", "[x*y, sin(x)]", "--at", "x=0.5,y=3", "--mode", mode)
    jac = doc["jacobian"]["_"]
    assert jac["x"] == [3.0, math.cos(0.5)]
    assert jac["y"] == [0.5, 0.0]


def test_jacobian_shape_is_of_shape_plus_wrt_shape():
    doc = ok_json("jacobian", "A @ v", "--at", "A=[[1, 2, 3], [4, 5, 6]]", "--at", "v=[1, 1, 1]")
    # d(Av)/dA[k, l] = delta_ik v_l ; d(Av)/dv = A
    assert np.array(doc["jacobian"]["_"]["A"]).shape == (2, 2, 3)
    assert doc["jacobian"]["_"]["v"] == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]


def test_vjp_json():
    doc = ok_json("vjp", "x*x", "--at", "x=[1,2]", "--cotangent", "[2,3]")
    assert doc["command"] == "vjp"
    assert doc["of"] == "_"
    assert doc["value"] == [1.0, 4.0]
    assert doc["cotangent"] == [2.0, 3.0]
    assert doc["vjp"] == {"x": [4.0, 12.0]}
    assert doc["unconnected"] == [] and doc["warnings"] == []


def test_jvp_json():
    doc = ok_json("jvp", "x*x", "--at", "x=[1,2]", "--tangent", "x=[1,1]")
    assert doc["command"] == "jvp"
    assert doc["of"] == "_"
    assert doc["value"] == [1.0, 4.0]
    assert doc["jvp"] == [2.0, 4.0]
    assert doc["warnings"] == []


def test_hessian_json_rosenbrock():
    doc = ok_json("hessian", ROSENBROCK, "--at", "x=1,y=1")
    assert doc["command"] == "hessian"
    assert doc["of"] == "_"
    assert doc["value"] == 0.0
    (hxx, hxy), (hyx, hyy) = rosenbrock_hessian(1.0, 1.0)
    assert doc["hessian"] == {"x": {"x": hxx, "y": hxy}, "y": {"x": hyx, "y": hyy}}
    assert doc["hessian"] == {"x": {"x": 802.0, "y": -400.0}, "y": {"x": -400.0, "y": 200.0}}


def test_hessian_json_rosenbrock_elsewhere():
    doc = ok_json("hessian", ROSENBROCK, "--at", "x=-1.5,y=2")
    (hxx, hxy), (hyx, hyy) = rosenbrock_hessian(-1.5, 2.0)
    h = doc["hessian"]
    assert h["x"]["x"] == pytest.approx(hxx, rel=1e-14)
    assert h["x"]["y"] == pytest.approx(hxy, rel=1e-14)
    assert h["y"]["x"] == pytest.approx(hyx, rel=1e-14)
    assert h["y"]["y"] == pytest.approx(hyy, rel=1e-14)


def test_table_output_default():
    r = ok("grad", "x^2*y", "--at", "x=3,y=2")
    assert "12" in r.stdout and "9" in r.stdout
    assert "dx" in r.stdout and "dy" in r.stdout


def test_graph_json_equal_literals_are_one_constant():
    # y = 2*x + 2*x^2 at x = 3: one const node (2), read by both products; y = 6 + 18 = 24.
    doc = ok_json("graph", "y = 2*x + 2*x^2", "--at", "x=3")
    nodes = doc["nodes"]
    consts = [n for n in nodes if n["op"] == "const"]
    assert [c["value"] for c in consts] == [2.0]
    products = [n for n in nodes if n["op"] == "mul"]
    assert len(products) == 2 and all(consts[0]["id"] in n["args"] for n in products)
    assert [(n["value"], n["line"], n["column"]) for n in products] == [(6.0, 1, 6), (18.0, 1, 12)]
    assert [n["value"] for n in nodes if n.get("name") == "y"] == [24.0]


def test_a_name_bound_to_a_literal_is_its_own_value():
    # Equal literals share a constant, but `a = 2` names a value of its own: dy/da = x = 3 and
    # dy/db = 1 for y = a*x + b, not the sum over every 2 of the program.
    doc = ok_json("grad", "a = 2; b = 2; y = a*x + b", "--at", "x=3", "--wrt", "a", "--wrt", "b")
    assert doc["gradient"] == {"a": 3.0, "b": 1.0}
    doc = ok_json("grad", "a = 2; y = 2*x + 2", "--at", "x=3", "--wrt", "a", "--wrt", "x")
    assert doc["gradient"] == {"a": 0.0, "x": 2.0} and doc["unconnected"] == ["a"]
    doc = ok_json("jacobian", "a = +2\n2\ny = a*x", "--at", "x=3", "--of", "y", "--wrt", "a", "--wrt", "_")
    assert doc["jacobian"] == {"y": {"a": 3.0, "_": 0.0}}


# ==========================================================================
# --unconnected, --wrt intermediate values, --of, eval --all
# ==========================================================================

UNCONNECTED_SRC = "x + 0*y + stop_gradient(w) + (v > 0)"
UNCONNECTED_AT = "x=1,y=2,w=3,v=4"


def test_unconnected_zero_is_default():
    doc = ok_json("grad", UNCONNECTED_SRC, "--at", UNCONNECTED_AT)
    # y is connected (through a multiplication by zero); w and v are not
    assert doc["gradient"] == {"x": 1.0, "y": 0.0, "w": 0.0, "v": 0.0}
    assert doc["unconnected"] == ["w", "v"]


def test_unconnected_none():
    doc = ok_json("grad", UNCONNECTED_SRC, "--at", UNCONNECTED_AT, "--unconnected", "none")
    assert doc["gradient"] == {"x": 1.0, "y": 0.0, "w": None, "v": None}
    assert doc["unconnected"] == ["w", "v"]
    r = ok("grad", UNCONNECTED_SRC, "--at", UNCONNECTED_AT, "--unconnected", "none", "-f", "plain")
    assert r.stdout == "1\n0\nnull\nnull\n"


def test_unconnected_error():
    r = user_error("grad", UNCONNECTED_SRC, "--at", UNCONNECTED_AT, "--unconnected", "error")
    assert r.stderr.startswith("error: <expr>: 'w' has no differentiable path to '_'\n")
    assert "hint: remove it from --wrt, or use --unconnected zero" in r.stderr


def test_unconnected_jacobian():
    doc = ok_json("jacobian", "[x, stop_gradient(w)]", "--at", "x=1,w=2")
    assert doc["jacobian"]["_"] == {"x": [1.0, 0.0], "w": [0.0, 0.0]}
    assert doc["unconnected"] == ["w"]


def test_wrt_intermediate_value():
    # z = h^2, h = x*y: dz/dh = 2h holding x, y fixed; dz/dx = 2h*y, the total derivative
    x, y = 2.0, 3.0
    h = x * y
    doc = ok_json("grad", "h = x*y; z = h^2", "--wrt", "h", "--wrt", "x", "--at", f"x={x},y={y}")
    assert doc["of"] == "z"
    assert doc["value"] == h * h
    assert doc["gradient"] == {"h": 2 * h, "x": 2 * h * y}
    assert list(doc["gradient"]) == ["h", "x"]


def test_of_selects_an_output():
    doc = ok_json("grad", "a = x^2; b = 3*x", "--of", "a", "--at", "x=5")
    assert doc["of"] == "a" and doc["value"] == 25.0 and doc["gradient"] == {"x": 10.0}


def test_eval_all():
    doc = ok_json("eval", "a = x*2; a+1", "--at", "x=1", "--all")
    assert doc["command"] == "eval"
    assert doc["values"] == {"x": 1.0, "a": 2.0, "_": 3.0}
    assert list(doc["values"]) == ["x", "a", "_"]
    assert ok("eval", "a = x*2; a+1", "--at", "x=1", "--all", "-f", "plain").stdout == "1\n2\n3\n"


def test_eval_all_with_of_is_an_error_not_an_ignored_of():
    # --of was silently ignored (every value shown); SPEC §4 defines no precedence between them
    r = user_error("eval", "a = x*2; a+1", "--at", "x=1", "--all", "--of", "a")
    assert r.stderr == ("error: <expr>: --all shows every named value and --of some of them: give one of "
                        "the two\nhint: leave out --of for every value, or --all for those named\n")


@pytest.mark.parametrize("fmt", [("-f", "plain"), ("-fplain",), ("--format", "table")])
def test_json_flag_with_another_format_is_an_error(fmt):
    # it printed JSON, the --format given going unsaid; --json is -f json (SPEC §6)
    r = user_error("eval", "x", "--at", "x=1", "--json", *fmt)
    name = fmt[-1].removeprefix("-f")
    assert r.stderr == (f"error: --json and --format {name} ask for two formats\n"
                        "hint: --json is --format json: give one of them\n")
    assert ok("eval", "x", "--at", "x=1", "--json", "-f", "json").stdout.startswith('{"schema": 1')


def test_eval_repeated_of():
    doc = ok_json("eval", "a = x*2; b = a+1; b*b", "--at", "x=1", "--of", "b", "--of", "a")
    assert doc["values"] == {"b": 3.0, "a": 2.0}


# ==========================================================================
# Warnings for NaN / inf (SPEC §7)
# ==========================================================================


def test_nan_warning_in_json_names_operation_and_line():
    doc = ok_json("grad", "a = x + 1\nb = log(a)\nb * 2", "--at", "x=-2")
    assert doc["value"] == "nan"
    assert doc["gradient"] == {"x": -2.0}  # 2 / (x + 1)
    (w,) = doc["warnings"]
    assert "log" in w and "line 2" in w


def test_nan_warning_on_stderr():
    r = ok("eval", "log(x)", "--at", "x=-1", "-f", "plain")
    assert r.stdout == "nan\n"
    assert r.stderr == "warning: 'log' at line 1, column 1 produced nan\n"


def test_an_input_default_that_is_not_finite_is_warned_of_as_the_program_is():
    # `input x = log(-1)` read silently as nan: its default ran where no warning was kept
    doc = ok_json("eval", "input x = log(-1), y = [1, 1/0]\nx + sum(y)")
    assert doc["warnings"] == ["'log' at line 1, column 11 produced nan", "'/' at line 1, column 29 produced inf"]
    assert ok_json("eval", "input x = log(-1)\nx", "--at", "x=2")["warnings"] == []  # (not evaluated)


def test_inf_warning_on_stderr_with_table():
    r = ok("eval", "y = 1 / x", "--at", "x=0")
    (line,) = r.stderr.splitlines()
    assert line.startswith("warning: ") and "line 1, column 7" in line and line.endswith("produced inf")


@pytest.mark.parametrize(("src", "at", "warned"), [
    # a new nan or inf beside one an operand already holds is warned of (it was silent: one
    # missing value in a data array hid every later warning on it)
    ("log(x)", "x=[nan, -1]", ["warning: 'log' at line 1, column 1 produced nan"]),
    ("x * 1e300", "x=[1e10, nan]", ["warning: '*' at line 1, column 3 produced inf"]),
    ("y = x + 1\nsum(sqrt(y))", "x=[nan, -2]", ["warning: 'sqrt' at line 2, column 5 produced nan"]),
    # what only carries an operand's nan or inf on is not
    ("log(x) * 2", "x=[nan, 1]", []),
    ("x + y", "x=[nan, 1],y=[1, inf]", []),
    ("cumsum(x)", "x=[nan, 1]", []),  # (not elementwise: each element sums those before it)
])
def test_a_new_nan_beside_an_operands_own_is_warned_of(src, at, warned):
    r = ok("eval", src, "--at", at, "-f", "plain")
    assert r.stderr.splitlines() == warned


def test_a_number_past_float64s_range_is_warned_of_where_it_is_written():
    # float("1e400") is inf: a typo most likely (the constant inf says it on purpose), warned of
    # wherever it is written, a branch not taken included (it is the text's, not the run's)
    src = "y = x * 2e999\nif x > 5 { y = 1" + "0" * 400 + " }\ny + 1e300"
    r = ok("eval", src, "--at", "x=1", "-f", "plain")
    assert r.stdout == "inf\n"
    reads = "is beyond float64's range (about 1.8e308) and reads as inf; write inf if that is meant"
    assert r.stderr.splitlines() == [f"warning: the number 2e999 at line 1, column 9 {reads}",
                                     f"warning: the number 1{'0' * 400} at line 2, column 16 {reads}"]
    assert ok("eval", "inf + 1.7e308", "-f", "plain").stderr == ""  # (in range, and inf by name: no warning)
    r = ok("grad", "x * 1e400", "--at", "x=1", "-f", "json")
    assert json.loads(r.stdout)["warnings"][0].startswith("the number 1e400 at line 1, column 5 is beyond")


def test_warnings_go_to_stderr_with_json_too():
    r = ok("eval", "log(x)", "--at", "x=-1", "-f", "json")
    assert json.loads(r.stdout)["warnings"]
    assert "warning: 'log' at line 1, column 1 produced nan" in r.stderr


# ==========================================================================
# SOURCE: text, file, stdin
# ==========================================================================


def test_source_as_file(tmp_path):
    p = tmp_path / "model.grad"
    p.write_text("# a model\ninput w = 2\nloss = (w * x - 1)^2\n")
    doc = ok_json("grad", p, "--at", "x=3")
    # d/dw (w x - 1)^2 = 2 (w x - 1) x ; d/dx = 2 (w x - 1) w
    assert doc["of"] == "loss"
    assert doc["gradient"] == {"w": 2 * (6 - 1) * 3.0, "x": 2 * (6 - 1) * 2.0}


def test_missing_source_file_is_a_file_error(tmp_path):
    missing = tmp_path / "model.grad"
    r = user_error("grad", missing, "--at", "x=1")
    assert r.stderr.splitlines()[0] == f"error: the file '{missing}' does not exist"
    for source in ("model.grad", "./model.grad", "dir/model.grad"):
        r = user_error("grad", source, "-f", "json")
        error = json.loads(r.stdout)["error"]
        assert error["kind"] == "file" and error["message"] == f"the file '{source}' does not exist"


def test_text_that_parses_is_a_program_not_a_missing_file():
    assert ok_json("eval", "x/y", "--at", "x=1,y=4")["values"] == {"_": 0.25}


def test_source_from_stdin():
    r = ok("eval", "-", "--at", "x=2", "-f", "plain", input="y = x^2\ny + 1\n")
    assert r.stdout == "5\n"


# ==========================================================================
# Error rendering (SPEC §7)
# ==========================================================================


def test_error_rendering_program_text():
    r = user_error("grad", "sin(x) + sine(y)", "--at", "x=1,y=2")
    assert r.stdout == ""
    assert r.stderr == (
        "error: <expr>:1:10: unknown function 'sine'\n"
        "  sin(x) + sine(y)\n"
        "           ^\n"
        "hint: did you mean 'sin'?\n"
    )


def test_error_rendering_file(tmp_path):
    p = tmp_path / "bad.grad"
    p.write_text("a = x * y\nb = sine(a)\n")
    r = user_error("eval", p, "--at", "x=2,y=1")
    assert r.stderr == (
        f"error: {p}:2:5: unknown function 'sine'\n"
        "  b = sine(a)\n"
        "      ^\n"
        "hint: did you mean 'sin'?\n"
    )


def test_error_rendering_stdin():
    r = user_error("eval", "-", input="y = (x^2\n")
    assert r.stderr == (
        "error: <stdin>:1:5: '(' is never closed\n"
        "  y = (x^2\n"
        "      ^\n"
        "hint: add ')'\n"
    )


def test_error_rendering_without_hint():
    r = user_error("eval", "1)")
    assert r.stderr == "error: <expr>:1:2: unmatched ')'\n  1)\n   ^\n"


def test_error_rendering_caret_with_tab():
    r = user_error("eval", "\tsine(1)")
    lines = r.stderr.splitlines()
    assert lines[0] == "error: <expr>:1:2: unknown function 'sine'"
    assert lines[2].index("^") == lines[1].index("s")


def test_error_json_object():
    r = user_error("grad", "sin(x) + sine(y)", "--at", "x=1,y=2", "-f", "json")
    doc = json.loads(r.stdout)
    assert doc["schema"] == 1
    err = doc["error"]
    assert err["kind"] == "name"
    assert err["message"] == "unknown function 'sine'"
    assert err["line"] == 1 and err["column"] == 10
    # and the same error is rendered on stderr
    assert r.stderr.startswith("error: <expr>:1:10: unknown function 'sine'\n")


def test_error_json_object_without_position():
    r = user_error("eval", "x + y", "--at", "xx=1,y=2", "--json")
    err = json.loads(r.stdout)["error"]
    assert err["kind"] == "usage"
    assert err["message"] == "'xx' is not an input of the program"
    assert err["line"] is None and err["column"] is None


@pytest.mark.parametrize("args, first_line", [
    (["eval", "a < b < c", "--at", "a=1,b=2,c=3"], "error: <expr>:1:7: comparisons cannot be chained"),
    (["eval", "b = a\na = 2"], "error: <expr>:1:5: 'a' has no value yet: it is assigned at line 2, column 1, which has not run"),
    (["eval", "input x\nx = 2", "--at", "x=1"], "error: <expr>:2:1: cannot assign to 'x': it is an input (line 1)"),
    (["eval", "sin + 1"], "error: <expr>:1:1: 'sin' is a function; call it as sin(...)"),
    (["eval", "[1, 2] + [1, 2, 3]"], "error: <expr>:1:8: shapes (2,) and (3,) do not broadcast"),
    (["eval", "x[3]", "--at", "x=[1,2,3]"], "error: <expr>:1:2: index 3 is out of range for axis 0 with size 3"),
    (["eval", "x.__class__", "--at", "x=1"], "error: <expr>:1:2: unexpected character '.'"),
    (["eval", "x + y", "--at", "x=1"], "error: <expr>:1:5: input 'y' has no value"),
    (["eval", ""], "error: <expr>:1:1: empty program"),
    (["grad", "x*x", "--at", "x=[1,2]"], "error: <expr>:1:1: grad needs a scalar output, but '_' has shape (2,)"),
    (["grad", "a = x*y; a", "--at", "x=1,y=2", "--of", "aa"], "error: <expr>: --of 'aa' is not a name in the program"),
    (["grad", "a = x*y; a", "--at", "x=1,y=2", "--wrt", "xx"], "error: <expr>: --wrt 'xx' is not a name in the program"),
])
def test_user_errors_exit_2_with_located_message(args, first_line):
    r = user_error(*args)
    assert r.stderr.splitlines()[0] == first_line


def test_grad_non_scalar_hint_points_to_alternatives():
    r = user_error("grad", "x*x", "--at", "x=[1,2]")
    (hint,) = [line for line in r.stderr.splitlines() if line.startswith("hint: ")]
    assert "jacobian" in hint and "vjp" in hint and "--sum" in hint


def test_deep_nesting_exit_2():
    r = user_error("eval", "(" * 100_000 + "1" + ")" * 100_000)
    assert "nested deeper than" in r.stderr.splitlines()[0]


def test_user_error_with_debug_still_exit_2():
    r = run("eval", "sine(1)", "--debug")
    assert r.exit_code == 2
    assert "unknown function 'sine'" in r.stderr


# ==========================================================================
# Internal errors (exit 3)
# ==========================================================================


@pytest.fixture
def broken_grad(monkeypatch):
    import gradcalc.api

    def boom(*args, **kwargs):
        raise RuntimeError("kaboom")
    monkeypatch.setattr(gradcalc.api, "grad", boom)


def test_internal_error_is_one_line_exit_3(broken_grad):
    r = run("grad", "sin(x)", "--at", "x=1")
    assert r.exit_code == 3
    assert r.stdout == ""
    assert "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.endswith("\n")
    assert "internal error" in r.stderr and "RuntimeError: kaboom" in r.stderr
    assert "report" in r.stderr.lower()


def test_internal_error_with_json_format(broken_grad):
    r = run("grad", "sin(x)", "--at", "x=1", "-f", "json")
    assert r.exit_code == 3
    assert "Traceback" not in r.stderr
    # -f json prints one object on stdout whatever happens (it printed nothing before)
    doc = json.loads(r.stdout)
    assert doc["schema"] == 1 and doc["error"]["kind"] == "internal"
    assert doc["error"]["message"] == "internal error (RuntimeError: kaboom)" and "report" in doc["error"]["hint"]


def test_internal_error_traceback_with_debug(broken_grad):
    r = run("grad", "sin(x)", "--at", "x=1", "--debug")
    assert r.exit_code == 3
    assert "Traceback (most recent call last)" in r.stderr
    assert "RuntimeError: kaboom" in r.stderr


# ==========================================================================
# --at (SPEC §3)
# ==========================================================================


def test_at_comma_separated():
    assert ok("eval", "x - y", "--at", "x=1,y=2", "-f", "plain").stdout == "-1\n"


def test_at_commas_inside_brackets_do_not_split():
    assert ok("eval", "sum(x)", "--at", "x=[1, 2, 3]", "-f", "plain").stdout == "6\n"
    r = ok("eval", "x + y", "--at", "x=[1, 2], y=[[10], [20]]", "-f", "plain")
    assert r.stdout == "11 12 21 22\n"
    assert ok("eval", "sum(x)", "--at", "x=ones((2, 3))", "-f", "plain").stdout == "6\n"


def test_at_repeated():
    r = ok("eval", "x * y", "--at", "x=[1,2]", "--at", "y=3", "-f", "plain")
    assert r.stdout == "3 6\n"


def test_at_constant_expressions():
    assert ok_json("eval", "x", "--at", "x=pi/4")["values"]["_"] == math.pi / 4
    assert ok_json("eval", "x", "--at", "x=ones(3)")["values"]["_"] == [1.0, 1.0, 1.0]
    assert ok_json("eval", "x", "--at", "x=-1.5")["values"]["_"] == -1.5
    assert ok_json("eval", "x", "--at", "x=2^-1")["values"]["_"] == 0.5
    assert ok_json("eval", "x", "--at", "x=[e, -e]")["values"]["_"] == [math.e, -math.e]


def test_at_overrides_input_default():
    assert ok("eval", "input x = 5\nx * 2", "-f", "plain").stdout == "10\n"
    assert ok("eval", "input x = 5\nx * 2", "--at", "x=1", "-f", "plain").stdout == "2\n"


def test_at_file_json(tmp_path):
    (tmp_path / "v.json").write_text("[[1, 2], [3, 4.5]]")
    doc = ok_json("eval", "x", "--at", f"x=@{tmp_path / 'v.json'}")
    assert doc["values"]["_"] == [[1.0, 2.0], [3.0, 4.5]]


def test_at_file_json_scalar(tmp_path):
    (tmp_path / "s.json").write_text("2.5")
    assert ok_json("eval", "x * 2", "--at", f"x=@{tmp_path / 's.json'}")["values"]["_"] == 5.0


def test_at_file_npy(tmp_path):
    a = np.array([[0.1, 0.2, 0.3]])
    np.save(tmp_path / "v.npy", a)
    doc = ok_json("eval", "x", "--at", f"x=@{tmp_path / 'v.npy'}")
    assert doc["values"]["_"] == a.tolist()


def test_at_file_csv(tmp_path):
    (tmp_path / "v.csv").write_text("1,2,3\n4,5,6\n")
    doc = ok_json("eval", "x", "--at", f"x=@{tmp_path / 'v.csv'}")
    assert doc["values"]["_"] == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]


def test_at_file_txt(tmp_path):
    (tmp_path / "v.txt").write_text("1.5 2.5\n3.5 4.5\n")
    doc = ok_json("eval", "x", "--at", f"x=@{tmp_path / 'v.txt'}")
    assert doc["values"]["_"] == [[1.5, 2.5], [3.5, 4.5]]


def test_at_file_object_json(tmp_path):
    (tmp_path / "point.json").write_text(json.dumps({"x": [1, 2], "y": 3}))
    doc = ok_json("grad", "sum(x) * y", "--at", f"@{tmp_path / 'point.json'}")
    assert doc["gradient"] == {"x": [3.0, 3.0], "y": 3.0}


def test_at_file_npz(tmp_path):
    np.savez(tmp_path / "point.npz", x=np.array([1.0, 2.0]), y=np.array(3.0))
    doc = ok_json("grad", "sum(x) * y", "--at", f"@{tmp_path / 'point.npz'}")
    assert doc["gradient"] == {"x": [3.0, 3.0], "y": 3.0}


def test_at_file_combined_with_values(tmp_path):
    (tmp_path / "x.json").write_text("[1, 2]")
    r = ok("eval", "x * y", "--at", f"x=@{tmp_path / 'x.json'},y=10", "-f", "plain")
    assert r.stdout == "10 20\n"


@pytest.mark.parametrize("value, message", [
    ("x", "error: --at expects NAME=VALUE, got 'x'"),
    ("1x=2", "error: --at expects NAME=VALUE, got '1x=2'"),
    ("x=", "error: --at x: empty value"),
    ("x=[1,2", "error: --at x:1:1: '[' is never closed"),
    ("x=foo", "error: --at x:1:1: unknown name 'foo'"),
    ("x=1 2", "error: --at x:1:3: expected end of value, found '2'"),
    ("x=[[1,2],[3]]", "error: --at x:1:1: ragged array literal: rows have different lengths"),
    ("x=sine(1)", "error: --at x:1:1: unknown function 'sine'"),
])
def test_at_malformed_values(value, message):
    r = user_error("eval", "sum(x)", "--at", value)
    assert r.stderr.splitlines()[0] == message


def test_at_malformed_value_hint():
    r = user_error("eval", "sum(x)", "--at", "x")
    assert "hint: for example: --at x=1.5,y=[1, 2]" in r.stderr


def test_at_unknown_name_did_you_mean():
    r = user_error("eval", "x + y", "--at", "xx=1,y=2")
    assert r.stderr == "error: <expr>: 'xx' is not an input of the program\nhint: did you mean 'x'?\n"


def test_at_shape_differs_from_declared_shape():
    r = user_error("eval", "input x[3]\nsum(x)", "--at", "x=[1,2]")
    assert "the value given for 'x' has shape (2,), but it is declared as x[3]" in r.stderr.splitlines()[0]


def test_at_missing_file(tmp_path):
    missing = tmp_path / "nope.json"
    r = user_error("eval", "x", "--at", f"x=@{missing}")
    first = r.stderr.splitlines()[0]
    assert first == f"error: --at x: cannot read '{missing}': the file does not exist"
    r = user_error("eval", "x", "--at", f"x=@{missing}", "-f", "json")
    assert json.loads(r.stdout)["error"]["kind"] == "file"


def test_at_mapping_missing_file(tmp_path):
    missing = tmp_path / "nope.json"
    r = user_error("eval", "x", "--at", f"@{missing}")
    assert r.stderr.splitlines()[0].startswith(f"error: --at: cannot read '{missing}'")


@pytest.mark.parametrize("name, content, message", [
    ("bad.json", "garbage{", "cannot read"),
    ("str.json", '"text"', "must hold a number or a nested list of numbers"),
    ("ragged.json", "[[1, 2], [3]]", "ragged"),
    ("bad.csv", "abc,def\n", "cannot read"),
    ("bad.txt", "1 2\n3\n", "cannot read"),
    ("v.xyz", "abc", "cannot read"),  # (read by its content: text, a header line and no data)
])
def test_at_garbage_files(tmp_path, name, content, message):
    p = tmp_path / name
    p.write_text(content)
    r = user_error("eval", "x", "--at", f"x=@{p}")
    first = r.stderr.splitlines()[0]
    assert first.startswith("error: --at x: ")
    assert message in first


def test_at_mapping_must_be_an_object(tmp_path):
    p = tmp_path / "list.json"
    p.write_text("[1, 2]")
    r = user_error("eval", "x", "--at", f"@{p}")
    assert r.stderr.splitlines()[0] == f"error: --at: '{p}' must hold a JSON object of name: value"


def test_at_mapping_unsupported_type(tmp_path):
    p = tmp_path / "v.npy"
    np.save(p, np.ones(2))
    r = user_error("eval", "x", "--at", f"@{p}")
    assert r.stderr.splitlines()[0] == "error: --at @FILE: unsupported file type '.npy'"


def test_at_garbage_npy_message(tmp_path):
    p = tmp_path / "bad.npy"
    p.write_text("not a numpy file")
    r = user_error("eval", "x", "--at", f"x=@{p}")
    first = r.stderr.splitlines()[0]
    assert first.startswith(f"error: --at x: cannot read '{p}'")
    assert "pickle" not in r.stderr


def test_at_garbage_npy_is_a_user_error(tmp_path):
    p = tmp_path / "bad.npy"
    p.write_text("not a numpy file")
    user_error("eval", "x", "--at", f"x=@{p}")


def test_at_deeply_nested_value_exit_2():
    r = user_error("eval", "x", "--at", "x=" + "[" * 50_000 + "1" + "]" * 50_000)
    assert "nested deeper than" in r.stderr.splitlines()[0]


def test_usage_errors_from_click_exit_2():
    assert run("eval", "x", "-f", "xml").exit_code == 2
    assert run("eval", "x", "--no-such-option").exit_code == 2
    assert run("vjp", "x*x", "--at", "x=1").exit_code == 2  # --cotangent is required


# ==========================================================================
# Real subprocesses: python -m gradcalc
# ==========================================================================


def gradcalc_proc(*args, input=None):
    return subprocess.run([sys.executable, "-m", "gradcalc", *args], input=input,
                          capture_output=True, text=True, timeout=60)


def test_subprocess_grad_plain():
    p = gradcalc_proc("grad", "x^2*y", "--at", "x=3,y=2", "-f", "plain")
    assert p.returncode == 0, p.stderr
    assert p.stdout == "12\n9\n"
    assert p.stderr == ""


def test_subprocess_user_error_and_json_from_stdin():
    p = gradcalc_proc("grad", "-", "--at", "x=1", "-f", "json", input="a = x\nb = sine(a)\n")
    assert p.returncode == 2
    assert p.stderr == (
        "error: <stdin>:2:5: unknown function 'sine'\n"
        "  b = sine(a)\n"
        "      ^\n"
        "hint: did you mean 'sin'?\n"
    )
    doc = json.loads(p.stdout)
    assert doc["schema"] == 1
    assert {k: doc["error"][k] for k in ("kind", "message", "line", "column")} == {
        "kind": "name", "message": "unknown function 'sine'", "line": 2, "column": 5}


def test_subprocess_json_exact_floats():
    p = gradcalc_proc("grad", "sin(x)*y", "--at", "x=1,y=2", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["gradient"] == {"x": 2 * math.cos(1), "y": math.sin(1)}


def test_table_cells_show_nan_and_inf_arrays():
    # rich read "[nan  1]" as a style tag and printed an empty cell (and "at x=" with nothing)
    r = run("eval", "x", "--at", "x=[nan, 1]")
    assert r.exit_code == 0 and "[nan  1]" in r.stdout
    r = run("grad", "sum(x)", "--at", "x=[inf, 1]")
    assert r.exit_code == 0 and "at x=[inf  1]" in r.stdout
    r = run("check", "x*[nan, 1]", "--at", "x=[1, 1]")
    assert r.exit_code == 1 and "✗" in r.stdout and "[green]" not in r.stdout


def test_summaries_of_large_arrays_show_infinities_and_count_nans():
    # The summary used to take min, max and norm over the finite values only: "min 0  max 999"
    r = run("eval", "x", "--at", "x=concat(arange(1000), [inf, -inf, nan])")
    assert "min -inf  max inf  norm inf  (1 nan)" in r.stdout
    r = run("eval", "x", "--at", "x=arange(1000)")  # norm: sqrt(sum of k^2) = sqrt(332833500)
    assert "min 0  max 999  norm 18243.7" in r.stdout
    r = run("eval", "x", "--at", "x=arange(1000) * 1e300")  # the sum of squares would overflow
    assert "norm 1.82437e+304" in r.stdout


@pytest.mark.parametrize("src, first, guessed", [
    # zeros made inv singular: stand-ins are 0.25 + 0.5 I for square matrices, 0.5 elsewhere
    ("input A[2,2]; inv(A)", "v0 = input A                              # A, 1:7, 2×2", False),
    # x[::-1] (an indexed name: 4) against W (a vector operand of @: 2) did not fit: every
    # guessed axis is then 4 long
    ("x[::-1] @ W", "# shapes guessed for x, W (no values given; use --at)", True),
    # a declared shape is not a guess
    ("input x[2,3]; y = sum(x)", "v0 = input x                              # x, 1:7, 2×3", False),
])
def test_graph_without_values_shows_the_structure(src, first, guessed):
    r = run("graph", src, "-f", "plain")
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[0] == first
    assert ("shapes guessed" in r.stdout) == guessed
    assert "warning" not in r.stderr


def test_graph_says_when_the_shapes_in_its_error_were_guessed():
    # "matmul shapes (2, 2) and (5,)" named a shape the user never gave, without saying so
    r = user_error("graph", "x @ ones(5)")
    assert r.stderr.splitlines()[0] == "error: <expr>:1:3: matmul shapes (2, 2) and (5,) do not match: 2 != 5"
    assert r.stderr.splitlines()[-1] == ("hint: without values, the shapes were guessed (x (2, 2)): give --at "
                                         "values, or declare the inputs' shapes (input x[5])")


def test_junit_report_of_a_file_name_with_a_control_character_parses(tmp_path):
    import xml.etree.ElementTree as ET
    (tmp_path / "a\x01b.grad").write_text("x^2\n")
    xml = tmp_path / "r.xml"
    r = run("check", str(tmp_path), "--at", "x=1", "--junit-xml", str(xml))
    assert r.exit_code == 0, r.output
    (case,) = ET.parse(xml).getroot()  # raw \x01 made it "not well-formed"
    assert case.get("file").endswith("a\\x01b.grad") and case.get("classname").endswith(".a\\x01b")


def test_dot_gives_each_gradient_its_own_node():
    # x + y: both gradients are the seed's variable; one node id would merge d_/dx into d_/dy
    r = run("graph", "x + y", "--at", "x=1,y=2", "-f", "dot", "--backward")
    assert r.exit_code == 0
    ids = [line.split()[0] for line in r.stdout.splitlines() if "shape=note" in line]
    assert len(ids) == 2 and len(set(ids)) == 2


def test_the_at_line_shows_large_values_by_shape():
    r = run("grad", "sum(x)*y", "--at", "x=ones(20),y=2")
    assert r.stdout.splitlines()[-1].rstrip() == "at x=(20 values), y=2"


@pytest.mark.parametrize("args, first", [
    (["eval", "[1,2,3,4,5,6]", "--max-elements", "5"],
     "error: <expr>:1:1: array of shape (6,) has 6 elements, more than --max-elements=5"),
    (["eval", "x", "--at", "x=[1,2,3,4,5,6]", "--max-elements", "5"],
     "error: --at x:1:1: array of shape (6,) has 6 elements, more than --max-elements=5"),
    (["eval", "x", "--at", "x=@{dir}/v.json", "--max-elements", "5"],
     "error: --at x: a value of shape (6,) has 6 elements, more than --max-elements=5"),
    (["eval", "x", "--at", "@{dir}/m.json", "--max-elements", "5"],
     "error: --at x: a value of shape (6,) has 6 elements, more than --max-elements=5"),
    (["eval", "x", "--at", "@{dir}/bad.npz"], "error: --at: cannot read '{dir}/bad.npz': not a .npz file of numbers"),
    (["check", "sin(x)", "--at", "x=1", "--rtol", "inf"], "error: --rtol must be a finite non-negative number, not inf"),
])
def test_limits_and_messages_of_values(tmp_path, args, first):
    # literals and files were not held to --max-elements; a text file named .npz was said to
    # hold "pickled data" that could be loaded "unsafely"; inf is non-negative
    (tmp_path / "v.json").write_text("[1,2,3,4,5,6]")
    (tmp_path / "m.json").write_text('{"x": [1,2,3,4,5,6]}')
    (tmp_path / "bad.npz").write_text("garbage")
    r = run(*[a.replace("{dir}", str(tmp_path)) for a in args])
    assert r.exit_code == 2, r.output
    assert r.stderr.splitlines()[0] == first.replace("{dir}", str(tmp_path))


def test_forward_mode_jacobian_points_at_reverse_mode_for_intermediates():
    r = run("jacobian", "h = x*y; z = [h^2, h*x]", "--at", "x=2,y=3", "--wrt", "h", "--mode", "fwd")
    assert r.exit_code == 2 and "hint: use --mode rev for intermediate values" in r.stderr


def test_graph_backward_has_a_gradient_node_for_every_input():
    # README: one gradient node per input; an unconnected input (x reaches the output only
    # through a comparison) had none
    r = run("graph", "x*x > 1 + y", "--at", "x=[1,2],y=1", "--backward", "-f", "json")
    grads = [n for n in json.loads(r.stdout)["nodes"] if n["op"] == "gradient"]
    assert [(g["name"], g["args"], g.get("unconnected")) for g in grads] == [
        ("d_/dx", [], True), ("d_/dy", [], True)]
    r = run("graph", "x*y", "--at", "x=1,y=2", "--backward", "-f", "json")
    grads = [n for n in json.loads(r.stdout)["nodes"] if n["op"] == "gradient"]
    assert all(len(g["args"]) == 1 and "unconnected" not in g for g in grads) and len(grads) == 2


def test_sources_with_classic_mac_line_endings_and_stdin_given_twice(tmp_path):
    p = tmp_path / "cr.grad"
    p.write_bytes(b"a = x*2\rb = sine(a)\r")  # a lone CR ended no line: one long statement
    r = run("grad", str(p), "--at", "x=1")
    assert r.exit_code == 2 and r.stderr.splitlines()[0] == f"error: {p}:2:5: unknown function 'sine'"
    r = run("check", "-", "-", "--at", "x=1", input="x^2\n")
    assert r.exit_code == 2 and r.stderr.splitlines()[0] == "error: '-' (standard input) is given more than once"


# ==========================================================================
# check rows that fail for a non-finite derivative, and their labels
# ==========================================================================

@pytest.mark.parametrize("args", [("sqrt(x)", "--at", "x=-1"),  # d sqrt(x)/dx = nan at x < 0, fd nan too
                                  ("sum(x)*nan", "--at", "x=[1,2]", "--directions", "1")])
def test_a_row_failing_for_a_nan_derivative_shows_nan_errors_not_zero(args):
    # NumPy's max of |ad - fd| when both are nan is nan; the row showed max_abs_err=0 and FAIL
    with np.errstate(invalid="ignore"):
        expected = float(np.max(np.abs(np.array([np.nan]) - np.array([np.nan]))))
    r = run("check", *args, "-f", "json")
    assert r.exit_code == 1
    (row,) = json.loads(r.stdout)["results"]
    assert math.isnan(expected) and (row["max_abs_err"], row["max_rel_err"], row["ok"]) == ("nan", "nan", False)
    assert "max_abs_err=nan max_rel_err=nan" in run("check", *args, "-f", "plain").stdout


@pytest.mark.parametrize("k, label", [(1, "central (1 direction)"), (2, "central (2 directions)")])
def test_the_directions_label_agrees_with_its_number(k, label):
    out = ok("check", "sum(x^2)", "--at", "x=[1,2]", "--directions", str(k), "-f", "plain").stdout
    assert f"[{label}]" in out and out.splitlines()[-1].startswith(f"check: 1 passed, 0 failed, 0 errors; {label};")


def test_a_non_finite_directional_derivative_claims_no_convergence():
    # d sqrt(x)/dx = 1/(2 sqrt(x)) is inf at 0, and central differences there read sqrt(-h): nan.
    # No finite element disagrees, yet a note said the differences 'converge (within 0)'
    r = run("check", "sqrt(x)", "--at", "x=0", "--directions", "1", "-f", "json")
    (row,) = json.loads(r.stdout)["results"]
    assert r.exit_code == 1 and (row["ad"], row["fd"]) == ("inf", "nan")
    assert row["notes"] == ["non-finite derivative"]


def test_a_hessian_of_many_scalar_inputs_is_summarised_in_a_table():
    """More than 12 scalar inputs: the n×n matrix is summarised, as a wide derivative block is
    (a 1,000-input Hessian drew a table of a million cells for 103 s); 12 are drawn whole."""
    n = 20
    src = " + ".join(f"a{i}*a{i + 1}" for i in range(n - 1)) + " + a0^2"
    at = ",".join(f"a{i}={i}" for i in range(n))
    r = ok("hessian", src, "--at", at)
    assert f"{n} scalar inputs, rows and columns in the order a0, a1, …, a{n - 1}" in r.stdout
    assert f"{n}×{n}" in r.stdout and "min 0  max 2" in r.stdout  # (d²/da0² = 2; the others 1 or 0)
    small = ok("hessian", " + ".join(f"a{i}*a{i + 1}" for i in range(11)), "--at", ",".join(f"a{i}=1" for i in range(12)))
    assert "a11" in small.stdout.splitlines()[2] and "min" not in small.stdout  # (the header row)


@pytest.mark.parametrize("chunk", [7, 1 << 16])
def test_large_arrays_are_written_a_chunk_at_a_time_with_the_same_bytes(chunk, monkeypatch, tmp_path):
    # JSON and plain output convert STREAM_ELEMENTS numbers at a time (the gradient of 10^8
    # elements took 6.5 GB as JSON, 8 GB as plain text); the bytes are json.dumps' of the whole
    # and the numbers' shortest texts joined, as before, nan and inf included, in C order
    from gradcalc.cli import render
    monkeypatch.setattr(render, "STREAM_ELEMENTS", chunk)
    x = np.linspace(-1.0, 1.0, 70_001)
    x[[3, 40_000]] = np.nan
    x[5] = np.inf
    m = np.arange(60.0).reshape(3, 4, 5) / 7
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "m.npy", m)
    at = ["--at", f"x=@{tmp_path / 'x.npy'}", "--at", f"m=@{tmp_path / 'm.npy'}"]
    src = "input x[70001], m[3,4,5]\nsum(x * x) + sum(m * m)"
    data = json.loads(ok("eval", src, *at, "--all", "-f", "json").stdout)
    spelled = [v if math.isfinite(v) else ("nan" if math.isnan(v) else "inf") for v in x.tolist()]
    assert data["values"]["x"] == spelled and data["values"]["m"] == m.tolist()

    def shortest(v: float) -> str:
        return "nan" if math.isnan(v) else "inf" if math.isinf(v) else str(int(v)) if v.is_integer() else repr(v)
    assert ok("eval", src, *at, "--of", "x", "-f", "plain").stdout == " ".join(map(shortest, x.tolist())) + "\n"
    assert ok("eval", src, *at, "--of", "m", "-f", "plain").stdout == " ".join(map(shortest, m.ravel().tolist())) + "\n"
