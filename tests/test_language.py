"""Programs that branch, loop and call (issue 15; SPEC §2.1-§2.4, §4, §5 check, §7 limits).

Every expected value comes from outside the features under test: a closed form
derived by hand, a NumPy forward pass with a hand-written adjoint, central
finite differences computed here with NumPy, a dual-number simulation in plain
Python, or the same program unrolled by hand into straight-line text (which
gradcalc could run before control flow existed; those references are checked
against NumPy here as well).  Where the SPEC or the issue gives an exact text,
it is asserted exactly; where it leaves the wording open, the tests assert the
kind, the position and a key fragment.
"""
from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import gradcalc
from gradcalc.errors import GradcalcError

from cli_run import ok, ok_json, run, user_error
SAMPLES = Path(__file__).resolve().parent.parent / "samples"


# ==========================================================================
# Helpers
# ==========================================================================


def value(src, **at):
    """The value of the program's output (the default --of)."""
    r = gradcalc.evaluate(src, at=at)
    assert len(r) == 1
    (v,) = r.values()
    return np.asarray(v, dtype=float)


def output_name(src, **at) -> str:
    return gradcalc.evaluate(src, at=at).of[0]


def grad(src, wrt=None, **at):
    return gradcalc.grad(src, at=at, wrt=wrt)


def raised(fn, *args, **kwargs) -> GradcalcError:
    with pytest.raises(GradcalcError) as info:
        fn(*args, **kwargs)
    return info.value


def at_pos(err: GradcalcError, line: int, col: int | None = None):
    assert err.pos is not None, f"the error has no position: {err.message}"
    if col is None:
        assert err.pos.line == line, (err.pos, err.message)
    else:
        assert (err.pos.line, err.pos.col) == (line, col), (err.pos, err.message)


def words(err: GradcalcError) -> str:
    """Message and hint together, for fragments that may sit in either."""
    return f"{err.message}\n{err.hint or ''}"


def close(actual, expected, rtol=1e-13, atol=1e-14):
    np.testing.assert_allclose(np.asarray(actual, dtype=float), np.asarray(expected, dtype=float),
                               rtol=rtol, atol=atol)


def fd(f, x, h=1e-6):
    """Central finite differences of f (scalar or array valued) at x, with NumPy."""
    x = np.asarray(x, dtype=float)
    f0 = np.asarray(f(x))
    out = np.zeros(f0.shape + x.shape)
    for idx in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[idx] = h
        out[(Ellipsis,) + idx] = (np.asarray(f(x + e)) - np.asarray(f(x - e))) / (2 * h)
    return out




def mentions_line(text: str, line: int) -> bool:
    return re.search(rf"line {line}\b|\b{line}:\d+", text) is not None


def flags_at(notes, line, col) -> bool:
    """Whether a check note points at line:col (as kinks do: 'line 1, column 4')."""
    pattern = rf"line {line}, column {col}\b|\b{line}:{col}\b"
    return any(re.search(pattern, n) for n in notes)


# ==========================================================================
# The issue's "Done when" commands, with their exact outputs
# ==========================================================================


def test_done_when_untaken_branch_is_unconnected_json():
    doc = ok_json("grad", "if x > 0 { r = v0 } else { r = v1^2 }; r", "--at", "x=1,v0=2,v1=2",
                  "--unconnected", "none")
    assert doc["of"] == "_"  # (the pending test said "r": SPEC §2.2 names a bare expression `_`)
    assert doc["value"] == 2.0
    assert doc["gradient"] == {"x": None, "v0": 1.0, "v1": None}
    assert set(doc["unconnected"]) == {"x", "v1"}


def test_done_when_grad_of_a_function_inside_a_program_plain():
    # d/dt t^3 = 3 t^2 = 12 at t = 2; and the program's own gradient is 6 t = 12 too
    r = ok("grad", "def f(t) = t^3; grad(f)(x)", "--at", "x=2", "-f", "plain")
    assert r.stdout == "12\n"


def test_done_when_newton_while_loop_plain():
    r = ok("grad", "y = 1.0; while abs(y*y - a) > 1e-13 { y = (y + a/y)/2 }; y", "--at", "a=2",
           "-f", "plain")
    assert r.stdout.startswith("0.35355339059327")
    assert abs(float(r.stdout) - 1 / (2 * math.sqrt(2))) < 1e-15


def test_done_when_gather_scatters_and_adds_plain():
    # x[[0, 0, 2]] = [x0, x0, x2]; d/dx sum(.^2) = [2 x0 + 2 x0, 0, 2 x2] = [4, 0, 6]
    assert ok("grad", "sum(x[[0, 0, 2]]^2)", "--at", "x=[1,2,3]", "-f", "plain").stdout == "4 0 6\n"


def test_done_when_while_true_stops_at_max_steps_quickly():
    start = time.perf_counter()
    r = user_error("eval", "while true { }", "--max-steps", "100000")
    elapsed = time.perf_counter() - start
    assert elapsed < 60, elapsed  # (a hang guard: make bench measures speed)
    first = r.stderr.splitlines()[0]
    assert first.startswith("error: <expr>:1:")
    assert "step" in first


def test_done_when_while_true_in_a_real_process():
    start = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "gradcalc", "eval", "while true { }", "--max-steps", "100000"],
                       capture_output=True, text=True, timeout=60)
    elapsed = time.perf_counter() - start
    assert p.returncode == 2, (p.stdout, p.stderr)
    first = p.stderr.splitlines()[0]
    assert first.startswith("error: <expr>:1:") and "step" in first
    assert "Traceback" not in p.stderr
    assert elapsed < 60, elapsed  # (a hang guard: make bench measures speed)


def test_done_when_check_flags_the_branch_at_1_4():
    r = run("check", "if x > 1 { y = x^2 } else { y = 2*x - 1 }; y", "--at", "x=1.0000000001", "-f", "json")
    assert r.exit_code in (0, 1), (r.exit_code, r.stdout, r.stderr)
    doc = json.loads(r.stdout)
    (res,) = doc["results"]
    assert flags_at(res["notes"], 1, 4), res["notes"]


ISSUE_SAMPLES = ["pendulum_euler.grad", "newton_sqrt.grad", "rnn_tanh.grad", "gradient_tape_if.grad",
                 "cross_entropy_labels.grad", "force_grad.grad"]


def test_done_when_new_samples_pass_check():
    paths = [SAMPLES / name for name in ISSUE_SAMPLES]
    for p in paths:
        assert p.is_file(), p
    r = run("check", *paths, "-f", "json")
    assert r.exit_code == 0, r.stdout
    doc = json.loads(r.stdout)
    assert doc["ok"] is True
    assert {Path(x["source"]).name for x in doc["results"]} == set(ISSUE_SAMPLES)
    # defaults are far from every branch boundary and loop-count change: nothing is flagged
    flagged = [x for x in doc["results"] for n in x.get("notes", [])
               if re.search(r"line \d+, column \d+|\b\d+:\d+\b", n)]
    assert flagged == []


# ==========================================================================
# Blocks and if / elif / else (SPEC §2.2)
# ==========================================================================

IF_ONE_LINE = "if x > 0 { y = 2*x } elif x > -1 { y = x^2 } else { y = -x^3 }; y"
IF_LINES = """\
if x > 0 {
    y = 2*x
}
elif x > -1 {
    y = x^2
}
else {
    y = -x^3
}
y
"""


@pytest.mark.parametrize("src", [IF_ONE_LINE, IF_LINES], ids=["one-line", "lines"])
@pytest.mark.parametrize("x, y, dy", [
    (1.5, 3.0, 2.0),       # if:   2x,   d = 2
    (-0.5, 0.25, -1.0),    # elif: x^2,  d = 2x
    (-2.0, 8.0, -12.0),    # else: -x^3, d = -3x^2
    (0.0, 0.0, 0.0),       # x > 0 is false at 0: the elif branch, 2*0 = 0
])
def test_if_elif_else_each_branch(src, x, y, dy):
    r = grad(src, x=x)
    assert float(r.value) == y
    assert float(r["x"]) == dy
    assert r.unconnected == []


def test_if_without_else():
    src = "y = x\nif x > 1 { y = y^2 }\ny"
    assert float(grad(src, x=3.0)["x"]) == 6.0 and value(src, x=3.0) == 9.0
    assert float(grad(src, x=0.5)["x"]) == 1.0 and value(src, x=0.5) == 0.5


def test_block_statements_separated_by_newlines_and_semicolons():
    src = "if x > 0 {\n    a = x^2; b = a + 1\n    c = 3 * b\n}\nc"
    # c = 3 (x^2 + 1): at 2, 15; dc/dx = 6x = 12
    r = grad(src, x=2.0)
    assert (float(r.value), float(r["x"])) == (15.0, 12.0)


def test_empty_blocks():
    assert value("y = 2 * x\nif x > 0 { }\nfor i in range(3) { }\nwhile false { }\ny", x=1.5) == 3.0


def test_nested_if():
    src = "if x > 0 { if x > 1 { y = x^3 } else { y = x^2 } } else { y = 0 * x }\ny"
    for x, y, dy in [(2.0, 8.0, 12.0), (0.5, 0.25, 1.0), (-1.0, 0.0, 0.0)]:
        r = grad(src, x=x)
        assert (float(r.value), float(r["x"])) == (y, dy)
        assert r.unconnected == []  # 0 * x still connects


def test_condition_from_a_reduction():
    src = "if sum(x) > 0 { y = sum(x^2) } else { y = -sum(x) }\ny"
    x = np.array([1.0, 2.0, -0.5])
    r = grad(src, x=x)
    assert float(r.value) == 5.25
    close(r["x"], 2 * x)
    r = grad(src, x=-x)
    assert float(r.value) == 2.5
    close(r["x"], -np.ones(3))


@pytest.mark.parametrize("src, expected", [
    ("if true { y = x } else { y = 2*x }\ny", 1.5),
    ("if True { y = x } else { y = 2*x }\ny", 1.5),
    ("if false { y = x } else { y = 2*x }\ny", 3.0),
    ("if False { y = x } else { y = 2*x }\ny", 3.0),
])
def test_true_false_conditions(src, expected):
    assert value(src, x=1.5) == expected


@pytest.mark.parametrize("c, expected", [(0.5, 1.0), (-2.0, 1.0), (0.0, 2.0), ([[3.0]], 1.0), ([0.0], 2.0)])
def test_a_condition_is_true_when_its_one_element_is_non_zero(c, expected):
    assert value("if c { y = 1 } else { y = 2 }\ny", c=c) == expected


def test_and_in_a_condition():
    src = "if x > 0 and x < 2 { y = x } else { y = -x }\ny"
    assert value(src, x=1.0) == 1.0
    assert value(src, x=3.0) == -3.0
    assert value(src, x=-1.0) == 1.0


# ==========================================================================
# The conditional expression (SPEC §2.3)
# ==========================================================================


def test_conditional_expression_only_the_chosen_side_runs():
    r = gradcalc.grad("log(x) if x > 0 else 0", at={"x": -1.0})
    assert float(r.value) == 0.0
    assert r.warnings == []  # log(-1) never ran: no nan warning
    assert float(r["x"]) == 0.0 and r.unconnected == ["x"]
    r = gradcalc.grad("log(x) if x > 0 else 0", at={"x": 2.0})
    assert float(r.value) == math.log(2.0) and float(r["x"]) == 0.5
    assert r.warnings == []


def test_conditional_expression_gradient_follows_the_branch():
    assert float(grad("x^2 if x > 1 else 2*x", x=3.0)["x"]) == 6.0
    assert float(grad("x^2 if x > 1 else 2*x", x=0.0)["x"]) == 2.0


@pytest.mark.parametrize("x, expected", [(1.0, 10.0), (6.0, 10.0), (-1.0, 30.0)])
def test_conditional_expression_is_right_associative(x, expected):
    # right: 10 if x > 0 else (20 if x > 5 else 30); left-associative would give 30 at x = 1
    assert value("10 if x > 0 else 20 if x > 5 else 30", x=x) == expected


@pytest.mark.parametrize("x, expected", [(2.0, 3.0), (-2.0, -3.0)])
def test_conditional_expression_has_the_lowest_precedence(x, expected):
    # (x + 1) if x > 0 else (x - 1)
    assert value("x + 1 if x > 0 else x - 1", x=x) == expected


def test_conditional_expression_inside_parentheses():
    assert value("2 * (x if x > 0 else -x)", x=-3.0) == 6.0


# ==========================================================================
# and / or / not: masks (SPEC §2.3)
# ==========================================================================

MASK_X = np.array([-1.0, 0.5, 1.5, 3.0])


@pytest.mark.parametrize("src, expected", [
    ("(x > 0) and (x < 2)", [0, 1, 1, 0]),
    ("x > 0 and x < 2", [0, 1, 1, 0]),              # comparison binds tighter than and
    ("x < 0 or x > 2", [1, 0, 0, 1]),
    ("not x > 0", [1, 0, 0, 0]),                     # not (x > 0)
    ("x > 0 and x < 2 or x > 2.5", [0, 1, 1, 1]),    # (.. and ..) or ..
    ("x > 2.5 or x > 0 and x < 1", [0, 1, 0, 1]),    # .. or (.. and ..)
    ("not x > 0 or x > 2.5", [1, 0, 0, 1]),          # (not ..) or ..
    ("not not x > 0", [0, 1, 1, 1]),
])
def test_logical_operators_are_elementwise_masks(src, expected):
    np.testing.assert_array_equal(value(src, x=MASK_X), np.array(expected, dtype=float))


def test_masks_are_arrays_of_one_and_zero_in_arithmetic():
    # sum(x * mask): the gradient is the mask; the mask itself has no gradient
    r = grad("sum(x * (x > 0 and x < 2))", x=MASK_X)
    assert float(r.value) == 2.0
    np.testing.assert_array_equal(r["x"], [0.0, 1.0, 1.0, 0.0])
    r = gradcalc.jacobian("m = x > 0 or x < -5", at={"x": MASK_X})
    np.testing.assert_array_equal(r["m"]["x"], np.zeros((4, 4)))
    assert r.unconnected == ["x"]


def test_and_does_not_short_circuit():
    # Both sides run (SPEC: no short-circuit), so log(-1) runs and warns
    r = gradcalc.evaluate("(x > 0) and (log(x) > 0)", at={"x": -1.0})
    assert float(next(iter(r.values()))) == 0.0
    assert any("log" in w for w in r.warnings), r.warnings


# ==========================================================================
# // and % (SPEC §2.3, §2.5)
# ==========================================================================


def test_floor_division_values():
    x = np.array([7.0, -7.0, 7.5, -0.5])
    np.testing.assert_array_equal(value("x // 2", x=x), np.floor_divide(x, 2))
    np.testing.assert_array_equal(value("x // y", x=x, y=-2.0), np.floor_divide(x, -2.0))


def test_floor_division_has_zero_derivative_and_still_connects():
    r = gradcalc.grad("x // 2", at={"x": 3.3}, unconnected="none")
    assert float(r.value) == 1.0
    assert r["x"] is not None and float(r["x"]) == 0.0
    assert r.unconnected == []


@pytest.mark.parametrize("a, b", [(7.0, 3.0), (-7.0, 3.0), (7.0, -3.0), (7.5, 2.0), (-7.5, 2.0), (-7.5, -2.0)])
def test_mod_is_numpy_mod_with_its_derivatives(a, b):
    r = grad("a % b", a=a, b=b)
    assert float(r.value) == np.mod(a, b)
    # closed form: 1 in a, -floor(a / b) in b; and finite differences of numpy.mod agree
    assert float(r["a"]) == 1.0
    assert float(r["b"]) == -math.floor(a / b)
    assert float(r["b"]) == pytest.approx(float(fd(lambda v: np.mod(a, v), b)), abs=1e-6)


@pytest.mark.parametrize("src, expected", [
    ("2 * 7 % 4", 2.0),     # (2 * 7) % 4: the multiplicative level, left to right
    ("1 + 7 % 4", 4.0),
    ("7 // 2 * 2", 6.0),    # (7 // 2) * 2
    ("-7 % 3", 2.0),        # (-7) % 3
    ("2^3 % 5", 3.0),
    ("-7 // 2", -4.0),
])
def test_floor_division_and_mod_precedence(src, expected):
    assert value(src) == expected


# ==========================================================================
# Indexing: None, ..., gathers, masks, integer-valued expressions (SPEC §2.3)
# ==========================================================================


def test_none_adds_an_axis():
    x = np.array([1.0, 2.0, 3.0])
    assert value("x[None]", x=x).shape == (1, 3)
    assert value("x[:, None]", x=x).shape == (3, 1)
    close(value("x[:, None] * x[None, :]", x=x), np.outer(x, x))
    r = grad("sum(x[:, None] * x[None, :])", x=x)  # (sum x)^2: gradient 2 sum(x)
    assert float(r.value) == 36.0
    close(r["x"], [12.0, 12.0, 12.0])


def test_ellipsis():
    X = np.array([[1.0, -2.0, 3.0], [4.0, 5.0, -6.0]])
    close(value("X[..., 0]", X=X), X[..., 0])
    close(value("X[1, ...]", X=X), X[1, ...])
    assert value("X[..., None]", X=X).shape == (2, 3, 1)
    r = grad("sum(X[..., 1:]^2)", X=X)
    expected = 2 * X
    expected[:, 0] = 0
    close(r["X"], expected)


def test_gather_with_repeated_indices_scatter_adds():
    x = np.array([1.0, 2.0, 3.0])
    close(value("x[[0, 0, 2]]", x=x), [1.0, 1.0, 3.0])
    r = grad("sum(x[[0, 0, 2]] * [1, 10, 100])", x=x)
    expected = np.zeros(3)
    np.add.at(expected, [0, 0, 2], [1.0, 10.0, 100.0])
    close(r["x"], expected)  # [11, 0, 100]


def test_gather_by_a_named_integer_array_and_negative_indices():
    x = np.array([1.0, 2.0, 3.0])
    close(value("idx = [2, 0, -1]\nx[idx]", x=x), [3.0, 1.0, 3.0])
    r = grad("idx = [2, 0, -1]\nsum(x[idx] * [1, 10, 100])", x=x)
    close(r["x"], [10.0, 0.0, 101.0])


def test_gather_2d():
    X = np.arange(12.0).reshape(3, 4) - 5
    close(value("X[[2, 0]]", X=X), X[[2, 0]])
    close(value("X[[0, 1, 1], [3, 0, 0]]", X=X), X[[0, 1, 1], [3, 0, 0]])
    close(value("X[:, [3, 3]]", X=X), X[:, [3, 3]])
    r = grad("sum(X[[0, 1, 1], [3, 0, 0]] * [1, 10, 100])", X=X)
    expected = np.zeros((3, 4))
    np.add.at(expected, ([0, 1, 1], [3, 0, 0]), [1.0, 10.0, 100.0])
    close(r["X"], expected)
    r = grad("sum(X[:, [3, 3]])", X=X)
    expected = np.zeros((3, 4))
    expected[:, 3] = 2.0
    close(r["X"], expected)


def test_gather_by_an_input_of_integer_values_is_unconnected():
    # an index never carries a derivative (SPEC §2.1)
    x = np.array([1.0, 2.0, 3.0])
    r = grad("sum(x[idx + 1] * [10, 1])", x=x, idx=[1.0, 0.0])
    assert float(r.value) == 10 * 3.0 + 2.0
    close(r["x"], [0.0, 1.0, 10.0])
    close(r["idx"], [0.0, 0.0])
    assert r.unconnected == ["idx"]


def test_mask_selection():
    x = np.array([-1.0, 2.0, 0.5, -3.0])
    close(value("x[x > 0]", x=x), [2.0, 0.5])
    close(value("x[x > 0 and x < 1]", x=x), [0.5])
    close(value("x[not x > 0]", x=x), [-1.0, -3.0])
    close(value("m = x < 0\nx[m]", x=x), [-1.0, -3.0])
    r = grad("sum(x[x > 0]^2)", x=x)
    close(r["x"], [0.0, 4.0, 1.0, 0.0])
    r = grad("sum(x[x > 10])", x=x)
    assert float(r.value) == 0.0
    close(r["x"], np.zeros(4))
    X = np.array([[1.0, -2.0], [-3.0, 4.0]])
    close(value("X[X > 0]", X=X), X[X > 0])
    close(grad("sum(X[X < 0] * [10, 100])", X=X)["X"], [[0.0, 10.0], [100.0, 0.0]])


# A value made of masks without arithmetic is a mask, as NumPy keeps a boolean array boolean:
# copies, elements, shape built-ins, stacks, where's branches (SPEC §2.3: only arithmetic makes
# an ordinary array).  Each program against NumPy on a boolean array.
_X = np.array([-1.0, 2.0, -3.0, 4.0])
_M = _X > 0


@pytest.mark.parametrize(("src", "want"), [
    ("n = m\nx[n]", _X[_M]),
    ("n = m if x[0] < 0 else m\nx[n]", _X[_M]),
    ("def f(t) {\n  return m\n}\nx[f(1)]", _X[_M]),
    ("for i in range(2) {\n  n = m\n}\nx[n]", _X[_M]),
    ("for i in range(2) {\n  n = stop_gradient(m)\n  k = m[::-1]\n}\nx[n] + x[k]", _X[_M] + _X[_M[::-1]]),
    ("x[m[::-1]]", _X[_M[::-1]]),
    ("x[:2][m[1:3]]", _X[:2][_M[1:3]]),
    ("x[reshape(reshape(m, (2, 2)), (4,))]", _X[_M]),
    ("x[flip(m)]", _X[np.flip(_M)]),
    ("x[roll(m, 1)]", _X[np.roll(_M, 1)]),
    ("x[ravel(transpose(reshape(m, (2, 2))))]", _X[np.ravel(_M.reshape(2, 2).T)]),
    ("x[stop_gradient(m)]", _X[_M]),
    ("x[sort(m)]", _X[np.sort(_M)]),
    ("x[concat(m[:2], m[2:])]", _X[_M]),
    ("x[concatenate((m[2:], m[:2]))]", _X[np.concatenate((_M[2:], _M[:2]))]),
    ("x[where(x > 1, m, not m)]", _X[np.where(_X > 1, _M, ~_M)]),
    ("x[[x[0] > 0, x[1] > 0, x[2] < 0, x[3] > 0]]", _X[[False, True, True, True]]),
    ("a, b = split(m, 2)\nx[2:][b]", _X[2:][np.split(_M, 2)[1]]),
    ("M = reshape(m, (2, 2))\nt = 0\nfor row in M {\n  t = t + sum(x[:2][row])\n}\nt",
     sum(_X[:2][row].sum() for row in _M.reshape(2, 2))),
    ("n = m\nn[0] = 1\nx[n]", _X[[True, True, False, True]]),  # NumPy stores 1 as True
    ("n = m\nn[1] = 0.0 * x[0]\nx[n]", _X[[False, False, False, True]]),
    ("n = m\nn[0] = x[0] < 0\nx[n]", _X[[True, True, False, True]]),
    # arithmetic makes an ordinary array, whose values gather
    ("x[m * 1]", _X[_M.astype(int)]),
    ("n = m\nn[2] += 1\nx[n]", _X[[0, 1, 1, 1]]),
])
def test_a_value_made_of_masks_is_a_mask(src, want):
    got = value("m = x > 0\n" + src, x=_X)
    assert got.shape == np.shape(want)
    close(got, want)


def test_the_gradient_through_a_copied_mask_selects():
    # the hunt's case: `n = m; x[n]` gathered x[0], x[1], x[0], x[1]
    r = grad("m = x > 0\nn = m\nsum(x[n]^2)", x=_X)
    close(r["x"], np.where(_M, 2 * _X, 0.0))
    r = grad("m = x > 0\nw = x\nn = m\nw[n] = 0\nsum(w * [1, 2, 3, 4])", x=_X)
    close(r["x"], np.where(_M, 0.0, [1.0, 2.0, 3.0, 4.0]))
    close(value("m = x > 0\nw = x\nn = m\nw[n] = 0\nw", x=_X), np.where(_M, 0.0, _X))


@pytest.mark.parametrize(("src", "want"), [
    ("reshape(x, (2.0, -1))", _X.reshape(2, -1)),
    ("sum(reshape(x, (2, 2)), axis=1.0)", _X.reshape(2, 2).sum(axis=1)),
    ("tile(x, 2.0)", np.tile(_X, 2)),
    ("roll(x, 1.0)", np.roll(_X, 1)),
    ("diff(x, n=2.0)", np.diff(_X, n=2)),
    ("repeat(x, 2.0)", np.repeat(_X, 2)),
    ("diag(reshape(x, (2, 2)), k=1.0)", np.diag(_X.reshape(2, 2), k=1)),
])
def test_an_integral_float_literal_is_an_integer_argument(src, want):
    # SPEC §2.3: any expression whose value is an integer; `n = 3.0` was taken, the literal 3.0 was not
    close(value(src, x=_X), want)


def test_a_tuple_is_an_array_where_a_built_in_takes_an_array():
    # NumPy takes a tuple wherever it takes an array (array-like); a tuple elsewhere is an error
    x, c = np.array([1.0, 2.0]), 3.0
    close(value("pad(x, 1, constant_values=(c, 2 * c))", x=x, c=c), np.pad(x, 1, constant_values=(c, 2 * c)))
    close(value("where(x > 1, (5, 6), x)", x=x), np.where(x > 1, (5, 6), x))
    close(value("maximum(x, ((0, 3), (4, 0)))", x=x), np.maximum(x, ((0, 3), (4, 0))))
    r = grad("sum(pad(x, 1, constant_values=(c, 2 * c)))", x=x, c=c)
    assert float(r["c"]) == 3.0  # one c before, one 2c after
    err = raised(gradcalc.evaluate, "y = (1, 2)")
    assert err.message == "a tuple is only allowed as an argument of a built-in (a shape, an axis, an array)"


def test_an_assigned_value_may_have_leading_axes_of_length_one_as_in_numpy():
    # w[0] = ones((1, 2)) was "cannot assign a value of shape (1, 2) to the selection x[index]"
    y, v = np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[5.0, 6.0]])
    want = y.copy()
    want[0] = v
    close(value("w = y * 1\nw[0] = v\nw", y=y, v=v), want)
    r = grad("w = y * 1\nw[0] = v\nsum(w * [[1, 2], [3, 4]])", y=y, v=v)
    close(r["y"], [[0.0, 0.0], [3.0, 4.0]])
    close(r["v"], [[1.0, 2.0]])  # (v's own shape)
    err = raised(gradcalc.evaluate, "w = y * 1\nw[0] = ones((2, 2))", at={"y": y})
    assert err.message == "cannot assign a value of shape (2, 2) to a selection of shape (2,)"


def test_an_index_error_in_an_assignment_keeps_its_position():
    # a selection's shape, read first to drop a value's leading axes, raised it without one
    err = raised(gradcalc.evaluate, "y = x\ny[5] = 1\ny", at={"x": [1.0, -2.0, 3.0]})
    assert err.message == "index 5 is out of range for axis 0 with size 3"
    assert (err.pos.line, err.pos.col) == (2, 1)


def test_a_huge_literal_integer_argument_is_worded_as_a_float():
    with pytest.raises(GradcalcError, match=r"got 1e\+300$"):
        value("reshape(x, (1e300, -1))", x=_X)


def test_an_empty_jacobian_inside_a_program_has_its_output_and_input_axes():
    # jacobian(f)(x) has shape f(x).shape + x.shape (JAX's), also when f(x) is empty
    assert value("def g(t) = zeros(0) + t\njacobian(g)(3)").shape == (0,)
    assert value("def g(t) = t\njacobian(g)(zeros(0))").shape == (0, 0)
    assert value("def g(t) = t\njacobian(g)(zeros((2, 0)))").shape == (2, 0, 2, 0)
    assert value("def g(t) = zeros(0) * sum(t)\njacobian(g)([1, 2]) + ones(1)").shape == (0, 2)


def test_integer_valued_expressions_as_indices_and_bounds():
    x = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
    assert value("i = 1\nx[i + 1] - x[i - 1]", x=x) == 3.0
    close(value("i = 1\nn = 4\nx[i:n]", x=x), x[1:4])
    close(value("n = 2\nx[n + 1:]", x=x), x[3:])
    close(value("k = 2\nx[::k]", x=x), x[::2])
    close(value("x[len2 - 1]", x=x, len2=3.0), 4.0)
    close(value("X = [[1, 2, 3], [4, 5, 6]]\nsum(X, axis=2 - 1)"), [6.0, 15.0])
    assert value("reshape(x[0:4], (1 + 1, -1))", x=x).shape == (2, 2)


def test_an_input_used_only_as_an_index_is_unconnected():
    x = np.array([1.0, 2.0, 4.0])
    r = grad("x[k]^2", x=x, k=2.0)
    assert float(r.value) == 16.0
    close(r["x"], [0.0, 0.0, 8.0])
    assert float(r["k"]) == 0.0 and r.unconnected == ["k"]


@pytest.mark.parametrize("src, at, line", [
    ("i = 3 / 2\nx[i]", {"x": [1.0, 2.0, 3.0]}, 2),
    ("x[k]", {"x": [1.0, 2.0, 3.0], "k": 0.5}, 1),
    ("x[0:k]", {"x": [1.0, 2.0, 3.0], "k": 1.5}, 1),
    ("x[[0, 1.5]]", {"x": [1.0, 2.0, 3.0]}, 1),
    ("s = 0\nfor i in range(n) { s += 1 }\ns", {"n": 2.5}, 2),
])
def test_a_non_integral_value_where_an_integer_is_needed_is_an_error(src, at, line):
    err = raised(gradcalc.evaluate, src, at=at)
    at_pos(err, line)
    assert "integer" in err.message


def test_gather_out_of_range_is_an_error():
    err = raised(gradcalc.evaluate, "x[[0, 5]]", at={"x": [1.0, 2.0, 3.0]})
    assert err.kind == "shape"
    assert "out of range" in err.message
    at_pos(err, 1)


@pytest.mark.parametrize("src, col", [("x + 'a'", 5), ('y = "abc"', 5)])
def test_string_literals_outside_built_in_arguments_are_errors(src, col):
    err = raised(gradcalc.evaluate, src, at={"x": 1.0} if "x" in src else {})
    at_pos(err, 1, col)
    assert "string" in err.message


# ==========================================================================
# for loops (SPEC §2.2)
# ==========================================================================


def test_for_range_stop():
    src = "s = 0\nfor i in range(5) { s += x^i }\ns"
    x = 1.3
    r = grad(src, x=x)
    assert float(r.value) == pytest.approx(sum(x**i for i in range(5)), rel=1e-14)
    assert float(r["x"]) == pytest.approx(sum(i * x**(i - 1) for i in range(1, 5)), rel=1e-14)


@pytest.mark.parametrize("rng, expected", [
    ("range(4)", 123.0),          # 0, 1, 2, 3 -> digits 0 1 2 3
    ("range(2, 5)", 234.0),
    ("range(1, 10, 3)", 147.0),
    ("range(5, 0, -2)", 531.0),
    ("range(0)", 0.0),
    ("range(3, 3)", 0.0),
    ("range(0, 5, -1)", 0.0),
    ("range(2 - 1, 1 + 2)", 12.0),
])
def test_range_forms_give_integers_in_order(rng, expected):
    # s = s * 10 + i records the order of the loop variable's values
    assert value(f"s = 0\nfor i in {rng} {{ s = s * 10 + i }}\ns") == expected


@pytest.mark.parametrize("src, where", [
    ("s = e * x\ne = 2\ns", "2:1"),
    ("for i in range(2) {\n  s = e * x\n  e = 2\n}\ns", "3:3"),
    ("def f(a) {\n  return pi * a\n}\ny = f(x)\npi = 3\ny", "5:1"),
])
def test_a_constants_name_assigned_in_the_program_has_no_value_before_it(src, where):
    # SPEC 2.2: an assignment of pi, e, inf or nan hides the constant, and reading a name assigned
    # at the top level before it has a value is an error (it read the constant, and in a loop the
    # constant first and the value after: loops hunt L6); inside a function it already was
    r = user_error("eval", src, "--at", "x=1")
    line, col = where.split(":")
    assert f"has no value yet: it is assigned at line {line}, column {col}" in r.stderr
    assert "hides the constant" in r.stderr
    assert ok("eval", "e * x", "--at", "x=1", "-f", "plain").stdout == f"{math.e!r}\n"


def test_loop_variable_is_a_constant_multiplier():
    # sum over i = 2, 3, 4 of i * x = 9 x
    r = grad("s = 0\nfor i in range(2, 5) { s += i * x }\ns", x=1.5)
    assert float(r.value) == 13.5 and float(r["x"]) == 9.0


def test_empty_loop_leaves_the_value():
    r = grad("y = x\nfor i in range(0) { y = y * 2 }\ny", x=1.5)
    assert float(r.value) == 1.5 and float(r["x"]) == 1.0


def test_a_loop_bound_input_is_unconnected():
    r = grad("s = 0\nfor i in range(n) { s += x }\ns", x=1.5, n=4.0)
    assert float(r.value) == 6.0
    assert float(r["x"]) == 4.0
    assert float(r["n"]) == 0.0 and r.unconnected == ["n"]


def test_for_over_the_rows_of_a_matrix():
    X = np.array([[1.0, -2.0], [0.5, 3.0], [-1.5, 2.0]])
    r = grad("s = 0\nfor row in X { s += sum(row^2) }\ns", X=X)
    assert float(r.value) == pytest.approx(np.sum(X**2), rel=1e-14)
    close(r["X"], 2 * X)


def test_for_over_the_elements_of_a_vector():
    x = np.array([2.0, 3.0, 0.5])
    r = grad("p = 1\nfor e in x { p *= e }\np", x=x)
    assert float(r.value) == 3.0
    close(r["x"], [1.5, 1.0, 6.0])  # prod / x_i


def test_for_over_an_expression_and_over_a_3d_array():
    X = np.arange(12.0).reshape(3, 2, 2) / 10
    r = grad("s = 0\nfor M in X * 2 { s += M[0, 1] * M[1, 0] }\ns", X=X)
    assert float(r.value) == pytest.approx(sum(4 * X[k, 0, 1] * X[k, 1, 0] for k in range(3)), rel=1e-14)
    expected = np.zeros_like(X)
    expected[:, 0, 1] = 4 * X[:, 1, 0]
    expected[:, 1, 0] = 4 * X[:, 0, 1]
    close(r["X"], expected)


def test_nested_for_loops_with_index_updates_compute_a_matrix_product():
    A = np.array([[1.0, 2.0, -1.0], [0.5, -3.0, 2.0]])
    B = np.array([[2.0, 1.0], [-1.0, 0.5], [3.0, -2.0]])
    Wt = np.array([[1.0, -2.0], [0.5, 3.0]])
    src = """\
C = zeros((2, 2))
for i in range(2) {
    for j in range(2) {
        for k in range(3) {
            C[i, j] += A[i, k] * B[k, j]
        }
    }
}
loss = sum(C * Wt)
"""
    r = grad(src, A=A, B=B, Wt=Wt, wrt=["A", "B"])
    assert float(r.value) == pytest.approx(np.sum((A @ B) * Wt), rel=1e-14)
    close(r["A"], Wt @ B.T)
    close(r["B"], A.T @ Wt)
    close(gradcalc.evaluate(src, at={"A": A, "B": B, "Wt": Wt}, of=["C"])["C"], A @ B)


# ==========================================================================
# while, break, continue (SPEC §2.2)
# ==========================================================================


@pytest.mark.parametrize("x, y, dy", [
    (3.0, 243.0, 405.0),    # 3, 9, 27, 81, 243: y = x^5, dy = 5 x^4
    (11.0, 121.0, 22.0),    # y = x^2
    (200.0, 200.0, 1.0),    # the condition is false at once: y = x
])
def test_while_runs_as_often_as_its_condition_holds(x, y, dy):
    r = grad("y = x\nwhile y < 100 { y = y * x }\ny", x=x)
    assert (float(r.value), float(r["x"])) == (y, dy)


def test_while_with_a_counter():
    x = 0.7
    r = grad("n = 0\ny = x\nwhile n < 4 { y = sin(y); n += 1 }\ny", x=x)
    # chain rule by hand
    y, dy = x, 1.0
    for _ in range(4):
        y, dy = math.sin(y), math.cos(y) * dy
    assert float(r.value) == pytest.approx(y, rel=1e-14)
    assert float(r["x"]) == pytest.approx(dy, rel=1e-14)


def test_break_leaves_the_loop():
    src = "s = 0\nfor i in range(10) {\n    if i == 3 { break }\n    s += x\n}\ns"
    r = grad(src, x=1.25)
    assert (float(r.value), float(r["x"])) == (3.75, 3.0)


def test_break_in_while_true():
    # 1.5 -> 3 -> 6 -> 12: y = 8 x
    r = grad("y = x\nwhile true {\n    y = y * 2\n    if y > 10 { break }\n}\ny", x=1.5)
    assert (float(r.value), float(r["x"])) == (12.0, 8.0)


def test_continue_skips_the_rest_of_the_body():
    x = 1.1
    r = grad("s = 0\nfor i in range(6) {\n    if i % 2 == 0 { continue }\n    s += x^i\n}\ns", x=x)
    assert float(r.value) == pytest.approx(x + x**3 + x**5, rel=1e-14)
    assert float(r["x"]) == pytest.approx(1 + 3 * x**2 + 5 * x**4, rel=1e-14)


def test_continue_in_while():
    src = "n = 0\ns = 0\nwhile n < 5 {\n    n += 1\n    if n == 3 { continue }\n    s += n * x\n}\ns"
    r = grad(src, x=2.0)
    assert (float(r.value), float(r["x"])) == (24.0, 12.0)  # (1 + 2 + 4 + 5) x


def test_break_leaves_only_the_inner_loop():
    src = """\
s = 0
for i in range(3) {
    for j in range(10) {
        if j > i { break }
        s += x
    }
    s *= 2
}
s
"""
    coef = 0  # the same loops on the coefficient of x
    for i in range(3):
        for j in range(10):
            if j > i:
                break
            coef += 1
        coef *= 2
    assert coef == 22
    r = grad(src, x=0.5)
    assert (float(r.value), float(r["x"])) == (coef * 0.5, float(coef))


@pytest.mark.parametrize("src", ["break", "continue", "x = 1\nif x > 0 { break }", "return x"])
def test_break_continue_return_outside_their_place_are_errors(src):
    err = raised(gradcalc.evaluate, src, at={"x": 1.0} if src == "return x" else {})
    assert err.kind == "syntax"
    word = re.search(r"break|continue|return", src).group()
    assert word in err.message
    line = src.count("\n") + 1
    at_pos(err, line, src.splitlines()[-1].index(word) + 1)


# ==========================================================================
# Reassignment and augmented assignment (SPEC §2.2)
# ==========================================================================


def test_each_assignment_binds_a_new_value():
    r = gradcalc.jacobian("a = x\nb = a\na = a * 3\nc = [a, b]", at={"x": 2.0})
    close(r.value["c"], [6.0, 2.0])
    close(r["c"]["x"], [3.0, 1.0])


def test_the_spec_example_reassignment():
    x = 0.9
    r = grad("y = x\ny = y - 0.1 * y^3\ny = y - 0.1 * y^3\ny", x=x)
    y1 = x - 0.1 * x**3
    y2 = y1 - 0.1 * y1**3
    assert float(r.value) == pytest.approx(y2, rel=1e-14)
    assert float(r["x"]) == pytest.approx((1 - 0.3 * y1**2) * (1 - 0.3 * x**2), rel=1e-14)


def test_augmented_assignments():
    # ((x + 2) x - 1) / 2 = 7 at 3; derivative (2x + 2)/2 = x + 1 = 4
    r = grad("y = x\ny += 2\ny *= x\ny -= 1\ny /= 2\ny", x=3.0)
    assert (float(r.value), float(r["x"])) == (7.0, 4.0)


@pytest.mark.parametrize("src, expected", [
    ("y = x\ny *= x + 1\ny", 6.0),        # x (x + 1), not x*x + 1 = 5
    ("y = 2 * x\ny -= x - 1\ny", 3.0),    # 2x - (x - 1) = x + 1, not x - 1
    ("y = x\ny /= x + 2\ny", 0.5),        # x / (x + 2)
    ("y = x\ny += x * 3\ny", 8.0),
])
def test_augmented_assignment_parenthesises_its_right_side(src, expected):
    assert value(src, x=2.0) == expected


def test_of_a_reassigned_name_is_its_last_value():
    r = gradcalc.evaluate("a = x\na = a * 2\nb = a + 1", at={"x": 1.5}, of=["a"])
    assert float(r["a"]) == 3.0
    r = gradcalc.grad("a = x\na = a * 2\nb = a + 1", at={"x": 1.5}, of="a")
    assert float(r["x"]) == 2.0


# ==========================================================================
# Functional index updates (SPEC §2.2)
# ==========================================================================


def test_index_assignment():
    r = gradcalc.jacobian("y = zeros(3)\ny[1] = x", at={"x": 2.5})
    close(r.value["y"], [0.0, 2.5, 0.0])
    close(r["y"]["x"], [0.0, 1.0, 0.0])


def test_index_assignment_leaves_the_old_value_unchanged():
    x = np.array([1.0, 2.0, 3.0])
    r = grad("a = x * 1\nb = a\na[0] = 10\nc = sum(a) + 100 * sum(b)", x=x)
    assert float(r.value) == 15.0 + 600.0
    close(r["x"], [100.0, 101.0, 101.0])


def test_index_assignment_derivatives_reach_the_old_array_and_the_new_value():
    x = np.array([1.0, 2.0, 3.0, 4.0])
    w = np.array([0.5, -1.5])
    r = grad("y = x * 2\ny[1:3] = w^2\nsum(y * [1, 10, 100, 1000])", x=x, w=w)
    assert float(r.value) == 2.0 + 10 * 0.25 + 100 * 2.25 + 8000.0
    close(r["x"], [2.0, 0.0, 0.0, 2000.0])
    close(r["w"], [10 * 2 * 0.5, 100 * 2 * -1.5])


def test_index_add_accumulates_repeated_indices_like_numpy_add_at():
    x = np.array([1.0, 2.0, 3.0])
    v = np.array([10.0, 20.0, 30.0])
    expected = x.copy()
    np.add.at(expected, [0, 0, 2], v)
    assert expected.tolist() == [31.0, 2.0, 33.0]  # (NumPy's buffered x[idx] += v gives 21 at 0)
    close(value("y = x * 1\ny[[0, 0, 2]] += v\ny", x=x, v=v), expected)
    c = np.array([1.0, 10.0, 100.0])
    r = grad("y = x * 1\ny[[0, 0, 2]] += v\nsum(y * c)", x=x, v=v, c=c, wrt=["x", "v"])
    close(r["x"], c)
    close(r["v"], c[[0, 0, 2]])


def test_index_updates_on_a_matrix():
    x = np.array([2.0, -1.0])
    r = gradcalc.jacobian("M = zeros((2, 3))\nM[:, 1] = x\nM[0, 0] += 5\nM", at={"x": x})
    # (the pending test read "M": SPEC §2.2 names the bare expression `M` at the end `_`)
    close(r.value["_"], [[5.0, 2.0, 0.0], [0.0, -1.0, 0.0]])
    expected = np.zeros((2, 3, 2))
    expected[0, 1, 0] = expected[1, 1, 1] = 1.0
    close(r["_"]["x"], expected)


def test_index_assignment_broadcasts_a_scalar():
    r = grad("y = zeros((2, 2))\ny[0] = x\nsum(y * [[1, 2], [3, 4]])", x=1.5)
    assert (float(r.value), float(r["x"])) == (4.5, 3.0)


def test_index_assignment_by_a_mask():
    x = np.array([-1.0, 2.0, -3.0, 4.0])
    r = grad("y = x * 1\ny[x < 0] = 0\nsum(y)", x=x)
    assert float(r.value) == 6.0
    close(r["x"], [0.0, 1.0, 0.0, 1.0])


def test_index_updates_in_a_loop_give_a_cumulative_sum():
    x = np.array([1.0, 2.0, 3.0, 4.0])
    src = "c = x * 0\nc[0] = x[0]\nfor i in range(1, 4) { c[i] = c[i - 1] + x[i] }\nc"
    r = gradcalc.jacobian(src, at={"x": x})
    close(r.value[r.of[0]], np.cumsum(x))
    close(r[r.of[0]]["x"], np.tril(np.ones((4, 4))))


def test_index_assignment_to_an_input_is_an_error():
    err = raised(gradcalc.evaluate, "input x[3] = [1, 2, 3]\nx[0] = 5\nx")
    at_pos(err, 2, 1)
    assert "'x'" in err.message and "input" in err.message


# ==========================================================================
# Destructuring (SPEC §2.2)
# ==========================================================================

TWO_RESULTS = "def f(t) {\n    return t^2, t^3\n}\n"


def test_destructuring_a_function_with_several_results():
    r = grad(TWO_RESULTS + "a, b = f(x)\nc = a + 10 * b", x=2.0)
    assert (float(r.value), float(r["x"])) == (84.0, 124.0)  # x^2 + 10 x^3; 2x + 30 x^2


def test_destructuring_outputs_its_last_name():
    assert output_name(TWO_RESULTS + "a, b = f(x)", x=2.0) == "b"
    assert value(TWO_RESULTS + "a, b = f(x)", x=2.0) == 8.0


def test_an_input_declared_after_the_last_assignment_is_not_the_output():
    # SPEC §2.2: the output is the last assignment or bare expression; it was the input w
    assert output_name("input x = 2\ny = x^2\ninput w = 1") == "y"
    r = grad("input x = 2\ny = x^2\ninput w = 1")
    assert (float(r["x"]), float(r["w"]), r.unconnected) == (4.0, 0.0, ["w"])
    assert output_name("input x = 2\nx^2\ninput w = 1") == "_"
    # a program that assigns nothing still outputs its last input (a choice: SPEC names none)
    assert output_name("input a = 1\ninput b = 2") == "b"


def test_destructuring_with_the_wrong_count_is_an_error():
    err = raised(gradcalc.evaluate, TWO_RESULTS + "a, b, c = f(x)", at={"x": 2.0})
    at_pos(err, 4)
    assert "2" in err.message and "3" in err.message


# ==========================================================================
# Functions (SPEC §2.2)
# ==========================================================================


def test_def_of_one_expression():
    r = grad("def sq(t) = t^2\nsq(x) + sq(2*x)", x=1.5)
    assert float(r.value) == 5 * 2.25 and float(r["x"]) == 15.0  # 5 x^2, 10 x


def test_def_with_a_body_defaults_and_keyword_arguments():
    src = "def f(t, k=2) {\n    y = t^k\n    return y + 1\n}\nf(x) + f(x, k=3) + f(k=1, t=x) + f(x, 3)"
    x = 1.5
    r = grad(src, x=x)
    assert float(r.value) == pytest.approx((x**2 + 1) + 2 * (x**3 + 1) + (x + 1), rel=1e-14)
    assert float(r["x"]) == pytest.approx(2 * x + 6 * x**2 + 1, rel=1e-14)


def test_parameters_are_not_inputs():
    r = grad("def f(t) = t^2\nf(x)", x=3.0)
    assert list(r) == ["x"] and float(r["x"]) == 6.0


def test_a_function_reads_inputs_from_the_top_level():
    r = grad("def f(t) = w * t^2\nf(x)", x=3.0, w=0.5)
    assert list(r) == ["w", "x"]  # by first appearance in the text
    assert (float(r["w"]), float(r["x"])) == (9.0, 3.0)


def test_return_in_the_middle_ends_the_call():
    src = "def f(t) {\n    if t > 0 { return t }\n    return -t\n}\nf(x)"
    assert (float(grad(src, x=2.0).value), float(grad(src, x=2.0)["x"])) == (2.0, 1.0)
    assert (float(grad(src, x=-3.0).value), float(grad(src, x=-3.0)["x"])) == (3.0, -1.0)


def test_functions_are_visible_before_their_definition():
    r = grad("y = g(x) + 1\ndef g(t) = 3 * t", x=2.0)
    assert output_name("y = g(x) + 1\ndef g(t) = 3 * t", x=2.0) == "y"
    assert (float(r.value), float(r["x"])) == (7.0, 3.0)


def test_functions_call_each_other():
    r = grad("def f(t) = 2 * g(t)\ndef g(t) = t^2\nf(x)", x=3.0)
    assert (float(r.value), float(r["x"])) == (18.0, 12.0)


def test_a_function_reads_the_top_level_value_at_the_time_of_the_call():
    src = "a = 2\ndef f(t) = a * t\nb = f(x)\na = 3\nc = f(x)\nb + c"
    r = grad(src, x=1.5)
    assert (float(r.value), float(r["x"])) == (7.5, 5.0)


def test_assigning_in_a_body_never_changes_a_top_level_name():
    src = "a = x\ndef f(t) {\n    a = 5\n    return a * t\n}\nb = f(x)\nc = a + b"
    r = grad(src, x=2.0)
    assert (float(r.value), float(r["x"])) == (12.0, 6.0)


def test_locals_do_not_leak():
    src = "def f(t) {\n    z = t^2\n    return z\n}\ny = f(x)\nw = z + y"
    # z at the top level is a name assigned nowhere there: an input
    assert value(src, x=2.0, z=10.0) == 14.0
    err = raised(gradcalc.evaluate, src, at={"x": 2.0})
    assert err.message == "input 'z' has no value"
    err = raised(gradcalc.evaluate, "def f(t) {\n    z = t^2\n    return z\n}\ny = f(x)",
                 at={"x": 2.0}, of=["z"])
    assert err.kind == "usage" and "'z'" in err.message


def test_recursion():
    src = "def p(t, n) {\n    if n == 0 { return 1 }\n    return t * p(t, n - 1)\n}\np(x, 5)"
    x = 1.2
    r = grad(src, x=x)
    assert float(r.value) == pytest.approx(x**5, rel=1e-14)
    assert float(r["x"]) == pytest.approx(5 * x**4, rel=1e-14)


def test_mutual_recursion_needs_the_conditional_expression_to_run_one_side():
    src = "def ev(n) = 1 if n == 0 else od(n - 1)\ndef od(n) = 0 if n == 0 else ev(n - 1)\nx * ev(4) + 2 * x * od(4)"
    r = grad(src, x=3.0)
    assert (float(r.value), float(r["x"])) == (3.0, 1.0)


DEPTH = "def f(t, n) {\n    if n == 0 { return t }\n    return f(t, n - 1) + t\n}\ny = f(x, N)"


def test_a_call_depth_of_100_is_allowed():
    # f(x, 99) nests 100 calls (n = 99 ... 0) and returns 100 x
    r = grad(DEPTH.replace("N", "99"), x=0.5)
    assert (float(r.value), float(r["x"])) == (50.0, 100.0)


@pytest.mark.parametrize("nesting", [1, 30, 90])
def test_a_call_depth_of_100_is_allowed_for_one_expression_bodies_nested_deep(nesting):
    # f(x, 99) nests 100 calls, each inside `nesting` negations and a conditional expression:
    # Python's 1,000 frames stopped the one-negation form at 97 calls (run.RUN_FRAMES)
    src = f"def f(t, n) = t if n == 0 else {'-' * nesting}f(t, n - 1) + t\ny = f(x, 99)"
    sign = -1.0 if nesting % 2 else 1.0  # each level: y_k = s y_(k-1) + x, y_0 = x
    value = 0.5
    for _ in range(99):
        value = sign * value + 0.5
    r = grad(src, x=0.5)
    assert float(r.value) == value
    assert float(r["x"]) == (100.0 if sign > 0 else 0.0)


def test_derivative_passes_in_a_program_are_held_to_max_steps():
    # grad(f) nested 16 deep records 2^16 times f's operations between two calls; jacobian(f)
    # nested so runs a backward pass per element of a 2^k-element value (refused before they run)
    src = "def f(x, n) = sum(sin(x)*cos(x)) if n == 0 else sum(grad(f)(x, n-1))\ny = f(ones(3), 16)"
    err = raised(gradcalc.evaluate, src, max_steps=20_000)
    assert err.kind == "limit" and "in the derivative of grad(f) at line 1" in err.message
    src = "def f(x, n) = x if n == 0 else jacobian(f)(x, n-1)\ny = f(ones(2), 16)"
    err = raised(gradcalc.evaluate, src, max_steps=20_000)
    assert err.kind == "limit" and "the derivative of jacobian(f) would run 128 backward passes" in err.message
    assert err.pos == (1, 43)


@pytest.mark.parametrize("src", [DEPTH.replace("N", "100"), DEPTH.replace("N", "5000"), "def f(t) = f(t)\nf(x)"])
def test_deeper_recursion_is_a_limit_error_naming_the_call(src):
    err = raised(gradcalc.evaluate, src, at={"x": 0.5})
    assert err.kind == "limit"
    assert "'f'" in err.message or "f(" in err.message
    assert "100" in words(err)
    assert err.pos is not None


@pytest.mark.parametrize("src, kind, pos, fragment", [
    ("def sin(t) = t\nsin(x)", "name", (1, 5), "'sin'"),            # the name of a built-in
    ("def pi(t) = t\npi(x)", "name", (1, 5), "'pi'"),                # a constant
    ("def f(t) = t\ndef f(t) = 2 * t\nf(x)", "name", (2, 5), "'f'"),  # another function
    ("if x > 0 { def f(t) = t }\nx", "syntax", (1, 12), "def"),      # top level only
    ("def f(t) = t\nf(x, 2)", "usage", (2, 1), "f"),                 # too many arguments
    ("def f(t) = t\nf(x, k=2)", "usage", (2, 1), "'k'"),             # no such parameter
    ("def f(t, k) = t * k\nf(x)", "usage", (2, 1), "'k'"),           # a missing argument
    ("def f(t) = t\ny = f + 1", "name", (2, 5), "'f'"),              # a function as a value
])
def test_function_errors(src, kind, pos, fragment):
    err = raised(gradcalc.evaluate, src, at={"x": 1.0})
    assert err.kind == kind, err.message
    at_pos(err, *pos)
    assert fragment in err.message


def test_a_call_that_ends_without_return_is_an_error_when_its_value_is_used():
    err = raised(gradcalc.evaluate, "def f(t) {\n    y = t\n}\nz = f(x) + 1", at={"x": 1.0})
    at_pos(err, 4)
    assert "return" in words(err)


# ==========================================================================
# The default output (SPEC §2.2)
# ==========================================================================


@pytest.mark.parametrize("x, expected", [(2.0, 2.0), (-3.0, 3.0)])
def test_if_else_assigning_r_in_both_branches_outputs_r(x, expected):
    src = "if x > 0 {\n    r = x\n} else {\n    r = -x\n}"
    assert output_name(src, x=x) == "r"
    assert value(src, x=x) == expected


def test_the_last_assignment_inside_a_loop_is_the_output():
    src = "s = 0\nfor i in range(3) {\n    s = s + x\n}"
    assert output_name(src, x=1.5) == "s" and value(src, x=1.5) == 4.5


def test_a_bare_expression_in_a_loop_outputs_the_value_it_had_when_it_last_ran():
    src = "for i in range(3) {\n    x * i\n}"
    assert output_name(src, x=1.5) == "_" and value(src, x=1.5) == 3.0
    assert float(grad(src, x=1.5)["x"]) == 2.0


def test_an_output_statement_that_never_ran_requires_of():
    src = "if x > 0 {\n    a = x^2\n} else {\n    b = -x\n}"
    assert output_name(src, x=-1.0) == "b" and value(src, x=-1.0) == 1.0
    err = raised(gradcalc.evaluate, src, at={"x": 1.0})
    assert err.kind == "usage"
    assert re.search(r"\bof\b", words(err)), words(err)
    assert float(gradcalc.evaluate(src, at={"x": 1.0}, of=["a"])["a"]) == 1.0
    r = user_error("eval", src, "--at", "x=1")
    assert "--of" in r.stderr


def test_function_bodies_are_not_candidates_for_the_output():
    src = "y = x^2\ndef f(t) {\n    z = t\n    return z\n}"
    assert output_name(src, x=3.0) == "y" and value(src, x=3.0) == 9.0


@pytest.mark.parametrize("src, name, expected", [
    ("y = x\ny += 1", "y", 3.0),                        # augmented assignment
    ("y = zeros(2)\ny[0] = x", "y", [2.0, 0.0]),        # index update
    (TWO_RESULTS + "p, q = f(x)", "q", 8.0),            # destructuring: the last name
])
def test_every_form_of_assignment_can_be_the_output(src, name, expected):
    assert output_name(src, x=2.0) == name
    close(value(src, x=2.0), expected)


# ==========================================================================
# Unconnected inputs of untaken branches (SPEC §2.1, §4)
# ==========================================================================


def test_untaken_branch_inputs_are_unconnected():
    src = "if x > 0 { r = v0 } else { r = v1^2 }; r"
    r = gradcalc.grad(src, at={"x": 1.0, "v0": 2.0, "v1": 2.0}, unconnected="none")
    assert r["v0"] == 1.0 and r["v1"] is None and r["x"] is None
    assert set(r.unconnected) == {"x", "v1"}
    r = gradcalc.grad(src, at={"x": -1.0, "v0": 2.0, "v1": 2.0})
    assert float(r.value) == 4.0
    assert (float(r["v0"]), float(r["v1"]), float(r["x"])) == (0.0, 4.0, 0.0)
    assert set(r.unconnected) == {"x", "v0"}


def test_unconnected_error_names_the_untaken_input():
    err = raised(gradcalc.grad, "if x > 0 { r = v0 } else { r = v1^2 }; r",
                 at={"x": 1.0, "v0": 2.0, "v1": 2.0}, wrt=["v1"], unconnected="error")
    # (the pending test said 'r': SPEC §2.2 names the bare expression `r` at the end `_`)
    assert err.message == "'v1' has no differentiable path to '_'"


# ==========================================================================
# Name errors of programs with control flow (SPEC §2.2)
# ==========================================================================


def test_reading_a_name_before_it_has_a_value_names_where_it_is_assigned():
    src = "if x > 0 {\n    y = x\n}\nz = y * 2"
    assert value(src, x=1.5) == 3.0
    err = raised(gradcalc.evaluate, src, at={"x": -1.0})
    at_pos(err, 4, 5)
    assert "'y'" in err.message
    assert mentions_line(words(err), 2), words(err)


@pytest.mark.parametrize("src, at, name, pos, assigned", [
    ("y = x + 1\nx = 2", {}, "x", (1, 5), 2),      # x is assigned at the top level: never an input
    ("z += 1\nz", {}, "z", (1, 1), 1),
    ("for i in range(3) {\n    s = s + x\n}\ns", {"x": 1.0}, "s", (2, 9), 2),
])
def test_reading_before_assignment(src, at, name, pos, assigned):
    err = raised(gradcalc.evaluate, src, at=at)
    at_pos(err, *pos)
    assert f"'{name}'" in err.message
    assert mentions_line(words(err), assigned), words(err)


@pytest.mark.parametrize("src, at, line", [
    ("input x = 1\nx = x * 2", {}, 2),
    ("input x = 1\nx += 1", {}, 2),
    ("input x\ny = 2 * x\nx = y", {"x": 1.0}, 3),
])
def test_assigning_to_an_input_is_an_error_with_a_hint(src, at, line):
    err = raised(gradcalc.evaluate, src, at=at)
    at_pos(err, line, 1)
    assert err.message.startswith("cannot assign to 'x'")
    assert "input" in err.message
    assert err.hint and "new name" in err.hint


RESERVED = ["if", "elif", "else", "for", "in", "while", "break", "continue", "def", "return",
            "and", "or", "not", "None"]


@pytest.mark.parametrize("word", RESERVED)
def test_reserved_words_cannot_be_assigned(word):
    err = raised(gradcalc.evaluate, f"{word} = 3")
    assert err.kind in ("syntax", "name")
    at_pos(err, 1, 1)
    assert f"'{word}'" in err.message
    assert err.hint
    assert "reserved" in words(err) or "keyword" in words(err)


@pytest.mark.parametrize("src, pos, word", [
    ("def f(if) = 1\nf(2)", (1, 7), "if"),
    ("def while(t) = t\nwhile(2)", (1, 5), "while"),
    ("for return in range(3) { }", (1, 5), "return"),
    ("input def", (1, 7), "def"),
    ("a, or = f(1)\ndef f(t) {\n    return t, t\n}", (1, 4), "or"),
])
def test_reserved_words_as_other_names(src, pos, word):
    err = raised(gradcalc.evaluate, src)
    at_pos(err, *pos)
    assert f"'{word}'" in err.message
    assert err.hint
    assert "reserved" in words(err) or "keyword" in words(err)


# ==========================================================================
# Conditions (SPEC §2.2): exactly one element, never nan
# ==========================================================================


@pytest.mark.parametrize("src, pos", [
    ("if x > 0 { y = 1 } else { y = 2 }\ny", (1, 4)),
    ("y = 0\nwhile x > y { y = y + 1 }\ny", (2, 7)),
    ("1 if x > 0 else 2", (1, 6)),
    ("if x > 0 { y = 1 } elif x < 0 { y = 2 } else { y = 3 }\ny", (1, 4)),
])
def test_a_condition_with_several_elements_is_an_error_naming_any_all_where(src, pos):
    err = raised(gradcalc.evaluate, src, at={"x": [1.0, 2.0]})
    at_pos(err, *pos)
    for name in ("any(", "all(", "where("):
        assert name in err.hint, err.hint


def test_a_condition_with_no_element_is_an_error():
    err = raised(gradcalc.evaluate, "if x > 0 { y = 1 } else { y = 2 }\ny", at={"x": np.zeros(0)})
    at_pos(err, 1, 4)


@pytest.mark.parametrize("src, pos", [
    ("if x { y = 1 } else { y = 2 }\ny", (1, 4)),
    ("n = 0\nwhile x - n { n = n + 1 }\nn", (2, 7)),
    ("1 if x * 2 else 2", (1, 6)),
])
def test_a_nan_condition_is_an_error(src, pos):
    err = raised(gradcalc.evaluate, src, at={"x": float("nan")})
    at_pos(err, *pos)
    assert "nan" in err.message


# ==========================================================================
# grad(f) and jacobian(f) inside programs (SPEC §2.4)
# ==========================================================================


def test_grad_of_a_function_is_a_value_and_is_differentiable_again():
    src = "def f(t) = t^3\ngrad(f)(x)"
    r = grad(src, x=2.0)
    assert (float(r.value), float(r["x"])) == (12.0, 12.0)  # 3 x^2, 6 x
    h = gradcalc.hessian(src, at={"x": 2.0})
    assert float(h["x"]["x"]) == 6.0  # the third derivative of t^3


def test_third_and_fourth_derivatives_through_nested_grad():
    x = 0.7
    src = "def f(t) = sin(t)\ngrad(f)(x)"
    assert value(src, x=x) == pytest.approx(math.cos(x), rel=1e-14)
    h = gradcalc.hessian(src, at={"x": x})
    assert float(h["x"]["x"]) == pytest.approx(-math.cos(x), rel=1e-14)  # sin''' = -cos
    src = "def f(t) = sin(t)\ndef df(t) = grad(f)(t)\ngrad(df)(x)"
    assert value(src, x=x) == pytest.approx(-math.sin(x), rel=1e-14)
    h = gradcalc.hessian(src, at={"x": x})
    assert float(h["x"]["x"]) == pytest.approx(math.sin(x), rel=1e-14)  # sin'''' = sin


def test_grad_argnum():
    x, y = 1.5, -0.5
    src = "def f(a, b) = a^2 * b^3\ngrad(f, argnum=1)(x, y)"
    r = grad(src, x=x, y=y)
    assert float(r.value) == pytest.approx(3 * x**2 * y**2, rel=1e-14)
    assert float(r["x"]) == pytest.approx(6 * x * y**2, rel=1e-14)
    assert float(r["y"]) == pytest.approx(6 * x**2 * y, rel=1e-14)
    assert value("def f(a, b) = a^2 * b^3\ngrad(f, argnum=0)(x, y)", x=x, y=y) == pytest.approx(2 * x * y**3)


def test_a_closure_is_held_fixed_for_the_inner_derivative_and_stays_differentiable():
    # F = -d/dt (k t^2 / 2) at t = q = -k q; dF/dk = -q, dF/dq = -k
    # (the pending test named the function `e`, a constant's name, which SPEC §2.2 refuses)
    r = grad("def energy(t) = k * t^2 / 2\nF = -grad(energy)(q)", q=2.0, k=3.0)
    assert r.of == "F" and float(r.value) == -6.0
    assert (float(r["q"]), float(r["k"])) == (-3.0, -2.0)


def test_a_top_level_value_that_depends_on_the_argument_is_still_held_fixed():
    # a = x^2 is fixed inside grad(f): grad(f)(x) = a = x^2 (not d/dx (x^2 x) = 3 x^2)
    r = grad("a = x^2\ndef f(t) = a * t\ngrad(f)(x)", x=2.0)
    assert (float(r.value), float(r["x"])) == (4.0, 4.0)


def test_no_perturbation_confusion():
    # Siskind and Pearlmutter: d/dx [x * d/dy (x + y)] = d/dx [x * 1] = 1
    r = grad("def plus_x(y) = x + y\nx * grad(plus_x)(1)", x=1.0)
    assert (float(r.value), float(r["x"])) == (1.0, 1.0)


def test_a_force_from_an_energy():
    q = np.array([0.5, -1.0, 2.0])
    r = gradcalc.jacobian("def energy(r) = 0.5 * sum(r^2) + sum(r^4) / 4\nF = -grad(energy)(q)", at={"q": q})
    close(r.value["F"], -(q + q**3))
    close(r["F"]["q"], -np.diag(1 + 3 * q**2))


def test_jacobian_of_a_function_with_jax_shapes():
    x = np.array([0.5, 2.0])
    src = "def f(v) = [v[0] * v[1], sin(v[0]), v[1]^2]\nJ = jacobian(f)(x)"
    expected = np.array([[x[1], x[0]], [math.cos(x[0]), 0.0], [0.0, 2 * x[1]]])
    r = gradcalc.jacobian(src, at={"x": x})
    close(r.value["J"], expected)
    second = np.zeros((3, 2, 2))  # d J[i, j] / d x[k]
    second[0] = [[0.0, 1.0], [1.0, 0.0]]
    second[1, 0, 0] = -math.sin(x[0])
    second[2, 1, 1] = 2.0
    close(r["J"]["x"], second)


def test_jacobian_of_a_matrix_function():
    A = np.array([[1.0, 2.0], [-0.5, 3.0]])
    J = value("def f(M) = M @ M\njacobian(f)(A)", A=A)
    assert J.shape == (2, 2, 2, 2)
    expected = np.einsum("ik,lj->ijkl", np.eye(2), A) + np.einsum("ik,jl->ijkl", A, np.eye(2))
    close(J, expected)
    close(J, fd(lambda M: M @ M, A), rtol=1e-7, atol=1e-8)


def test_a_newton_step_with_jacobian_and_solve():
    x = np.array([1.5, 1.0])

    def r_np(v):
        return np.array([v[0]**2 + v[1]**2 - 4, v[0] - v[1]**3])

    def step_np(v):
        J = np.array([[2 * v[0], 2 * v[1]], [1.0, -3 * v[1]**2]])
        return v - np.linalg.solve(J, r_np(v))

    src = "def r(v) = [v[0]^2 + v[1]^2 - 4, v[0] - v[1]^3]\nx1 = x - solve(jacobian(r)(x), r(x))"
    res = gradcalc.jacobian(src, at={"x": x})
    close(res.value["x1"], step_np(x), rtol=1e-14)
    close(res["x1"]["x"], fd(step_np, x), rtol=1e-6, atol=1e-8)


def test_gradient_descent_through_grad_in_a_loop():
    # w <- w - 0.1 * 2 (w - 3): w_20 = 3 + (w0 - 3) 0.8^20; dw_20/dw0 = 0.8^20
    src = "def L(w) = (w - 3)^2\nw = w0\nfor i in range(20) { w = w - 0.1 * grad(L)(w) }\nw"
    r = grad(src, w0=1.0)
    assert float(r.value) == pytest.approx(3 - 2 * 0.8**20, rel=1e-14)
    assert float(r["w0"]) == pytest.approx(0.8**20, rel=1e-12)


def test_grad_of_a_function_with_several_elements_is_an_error():
    err = raised(gradcalc.evaluate, "def f(v) = v^2\ny = grad(f)(x)", at={"x": [1.0, 2.0]})
    at_pos(err, 2)
    assert "one element" in err.message or "scalar" in err.message


def test_grad_of_an_unknown_function_is_an_error():
    err = raised(gradcalc.evaluate, "grad(nope)(x)", at={"x": 1.0})
    assert "'nope'" in err.message
    at_pos(err, 1)


# ==========================================================================
# check and control flow (SPEC §5)
# ==========================================================================

KINKED_IF = "if x > 1 { y = x^2 } else { y = 2*x - 1 }; y"


def test_check_flags_a_point_within_a_step_of_a_branch_boundary():
    r = gradcalc.check(KINKED_IF, at={"x": 1.0000000001})
    notes = [n for x in r.results for n in x.notes]
    assert flags_at(notes, 1, 4), notes


@pytest.mark.parametrize("x", [3.0, 0.2, -5.0])
def test_check_far_from_a_boundary_passes_without_a_flag(x):
    r = gradcalc.check(KINKED_IF, at={"x": x})
    assert r.ok
    assert all(res.notes == [] for res in r.results), [res.notes for res in r.results]


def test_check_differences_are_those_of_the_program_as_written():
    # a jump at the boundary: re-running the program on the other path sees it, the tape alone would not
    r = gradcalc.check("if x > 1 { y = x^2 } else { y = 5*x }\ny", at={"x": 1.0000000001})
    assert not r.ok
    (res,) = r.results
    assert res.max_abs_err > 1e3
    assert flags_at(res.notes, 1, 4), res.notes


def test_check_flags_a_change_in_a_loops_iteration_count():
    # x just above sqrt(10): y = x^2 ends the loop; a step down makes it run once more (y = x^3)
    x = math.sqrt(10) * (1 + 1e-12)
    assert x * x >= 10 and (x - 1e-6) ** 2 < 10
    r = gradcalc.check("y = x\nwhile y < 10 { y = y * x }\ny", at={"x": x})
    notes = [n for res in r.results for n in res.notes]
    assert flags_at(notes, 2, 7), notes


def test_check_flags_a_conditional_expression():
    r = gradcalc.check("x^2 if x > 1 else 2*x - 1", at={"x": 1.0000000001})
    notes = [n for res in r.results for n in res.notes]
    assert flags_at(notes, 1, 8), notes


def test_check_points_each_take_their_own_path():
    r = gradcalc.check("input x = 0.7\nif x > 0 { y = x^2 } else { y = -x^3 }\ny", points=8, seed=3)
    assert r.ok
    assert sorted({res.point for res in r.results}) == list(range(9))


def test_check_passes_through_loops_and_calls():
    src = "def cell(h, u) = tanh(w * h + u)\nh = 0\nfor t in range(4) { h = cell(h, xs[t]) }\nh"
    r = gradcalc.check(src, at={"w": 0.8, "xs": [0.5, -0.3, 0.9, 0.1]})
    assert r.ok and {res.wrt for res in r.results} == {"w", "xs"}


def test_symbolic_is_the_closed_form_of_the_path_taken_and_says_so():
    import sympy
    r = gradcalc.grad("if x > 0 { y = x^2 } else { y = -x }\ny", at={"x": 2.0}, symbolic=True)
    entry = r.symbolic["x"]
    assert sympy.simplify(sympy.sympify(entry["text"]) - 2 * sympy.Symbol("x")) == 0
    assert entry["note"] and "path" in entry["note"]


# ==========================================================================
# Limits (SPEC §7)
# ==========================================================================


def test_max_steps_ends_an_endless_loop_naming_it():
    err = raised(gradcalc.evaluate, "y = 1\nwhile true { }\ny", max_steps=1000)
    assert err.kind == "limit"
    at_pos(err, 2)
    assert "step" in err.message


def test_max_steps_names_the_loop_that_was_running():
    src = "s = x\nfor i in range(100000) {\n    s = s + 1\n}\ns"
    err = raised(gradcalc.evaluate, src, at={"x": 1.0}, max_steps=1000)
    assert err.kind == "limit" and "step" in err.message
    at_pos(err, 2)


def test_a_loop_within_max_steps_runs():
    assert value("s = x\nfor i in range(200) { s = s + 1 }\ns", x=1.0) == 201.0
    r = gradcalc.evaluate("s = x\nfor i in range(200) { s = s + 1 }\ns", at={"x": 1.0}, max_steps=10_000)
    assert float(next(iter(r.values()))) == 201.0


def test_max_steps_counts_the_operations_of_straight_line_code_too():
    # SPEC §7: operations recorded plus loop iterations; only loops and calls were counted
    src = " + ".join(["x"] * 200)  # 199 additions
    err = raised(gradcalc.evaluate, src, at={"x": 1.0}, max_steps=198)
    assert err.kind == "limit" and err.pos == (1, 1)  # (the statement that went past: the fuzz hunt's 5)
    assert err.message == ("the program ran more than max_steps=198 steps (operations recorded plus loop "
                           "iterations) in the statement at line 1, column 1")
    assert value(src, x=1.0) == 200.0
    assert float(next(iter(gradcalc.evaluate(src, at={"x": 1.0}, max_steps=199).values()))) == 200.0


def test_max_steps_on_the_command_line_names_the_loop():
    r = user_error("eval", "s = 0\nwhile s < 1 {\n    s = s * 1\n}\ns", "--max-steps", "500")
    first = r.stderr.splitlines()[0]
    assert first.startswith("error: <expr>:2:") and "step" in first


# ==========================================================================
# graph (issue 15, item 5)
# ==========================================================================


def test_graph_names_the_function_an_equation_came_from():
    doc = ok_json("graph", "def sq(t) = t^2\ny = sq(x) + 1", "--at", "x=2")
    inside = [n for n in doc["nodes"] if n["op"] not in ("input", "const") and "sq" in json.dumps(n)]
    assert inside, doc["nodes"]


def test_graph_of_a_long_loop_is_summarised():
    r = ok("graph", "y = x\nfor i in range(3000) { y = y * 1.0001 }\ny", "--at", "x=2", "-f", "plain")
    lines = r.stdout.splitlines()
    assert len(lines) < 200
    assert any(int(n) >= 3000 for n in re.findall(r"\d+", r.stdout))


# ==========================================================================
# Differential tests: loops against the same program unrolled by hand
# ==========================================================================
#
# Each case is (loop program, unrolled program, point, NumPy oracle).  The
# unrolled text is generated here and uses no control flow, so gradcalc ran
# it before this issue; test_unrolled_reference_matches_numpy checks it
# against the oracle, test_loop_matches_unrolled the loop against it.


def euler_oracle(n, x0, v0, k, c, dt=0.05):
    xs, vs = [x0], [v0]
    for _ in range(n):
        a = -k * xs[-1] - c * vs[-1]
        xs.append(xs[-1] + dt * vs[-1])
        vs.append(vs[-1] + dt * a)
    E = 0.5 * vs[-1] ** 2 + 0.5 * k * xs[-1] ** 2
    xb, vb, kb, cb = k * xs[-1], vs[-1], 0.5 * xs[-1] ** 2, 0.0
    for i in reversed(range(n)):
        ab = vb * dt
        xb, vb = xb - k * ab, vb + dt * xb - c * ab
        kb -= ab * xs[i]
        cb -= ab * vs[i]
    return E, {"x0": xb, "v0": vb, "k": kb, "c": cb}


EULER_HEAD = "input x0, v0, k, c\ndt = 0.05\n"
EULER_POINT = {"x0": 0.8, "v0": -0.3, "k": 2.5, "c": 0.1}


def euler_loop(n):
    return EULER_HEAD + f"""\
x = x0
v = v0
for i in range({n}) {{
    a = -k * x - c * v
    x = x + dt * v
    v = v + dt * a
}}
E = 0.5 * v^2 + 0.5 * k * x^2
"""


def euler_function(n):
    return EULER_HEAD + f"""\
def step(p, q) {{
    a = -k * p - c * q
    return p + dt * q, q + dt * a
}}
x = x0
v = v0
for i in range({n}) {{
    x, v = step(x, v)
}}
E = 0.5 * v^2 + 0.5 * k * x^2
"""


def euler_while(n):
    return EULER_HEAD + f"""\
x = x0
v = v0
n = 0
while n < {n} {{
    a = -k * x - c * v
    x = x + dt * v
    v = v + dt * a
    n += 1
}}
E = 0.5 * v^2 + 0.5 * k * x^2
"""


def euler_unrolled(n):
    lines = [EULER_HEAD + "p0 = x0", "q0 = v0"]
    for i in range(n):
        lines += [f"a{i} = -k * p{i} - c * q{i}", f"p{i + 1} = p{i} + dt * q{i}", f"q{i + 1} = q{i} + dt * a{i}"]
    lines.append(f"E = 0.5 * q{n}^2 + 0.5 * k * p{n}^2")
    return "\n".join(lines)


def recurrence_oracle(n, y0, r):
    ys = [y0]
    for _ in range(n):
        ys.append(ys[-1] - r * ys[-1] ** 3)
    yb, rb = 1.0, 0.0
    for y in reversed(ys[:-1]):
        rb -= yb * y**3
        yb *= 1 - 3 * r * y**2
    return ys[-1], {"y0": yb, "r": rb}


def recurrence_loop(n):
    return f"input y0, r\ny = y0\nfor i in range({n}) {{ y = y - r * y^3 }}\ny"


def recurrence_unrolled(n):
    return "input y0, r\nz0 = y0\n" + "".join(f"z{i + 1} = z{i} - r * z{i}^3\n" for i in range(n)) + f"z{n}"


RNN_HEAD = "input xs[{T}, 2], W[3, 3], U[3, 2], b[3]\n"


def rnn_point(T):
    rng = np.random.default_rng(15 + T)
    return {"xs": rng.normal(size=(T, 2)), "W": 0.5 * rng.normal(size=(3, 3)),
            "U": rng.normal(size=(3, 2)), "b": 0.1 * rng.normal(size=3)}


def rnn_oracle(T, xs, W, U, b):
    hs = [np.zeros(3)]
    for t in range(T):
        hs.append(np.tanh(W @ hs[-1] + U @ xs[t] + b))
    loss = np.sum(hs[-1] ** 2)
    g = {"xs": np.zeros_like(xs), "W": np.zeros_like(W), "U": np.zeros_like(U), "b": np.zeros_like(b)}
    hb = 2 * hs[-1]
    for t in reversed(range(T)):
        zb = hb * (1 - hs[t + 1] ** 2)
        g["W"] += np.outer(zb, hs[t])
        g["U"] += np.outer(zb, xs[t])
        g["b"] += zb
        g["xs"][t] = U.T @ zb
        hb = W.T @ zb
    return loss, g


def rnn_range(T):
    return RNN_HEAD.format(T=T) + f"h = zeros(3)\nfor t in range({T}) {{\n    h = tanh(W @ h + U @ xs[t] + b)\n}}\nloss = sum(h^2)"


def rnn_rows(T):
    return RNN_HEAD.format(T=T) + "h = zeros(3)\nfor row in xs {\n    h = tanh(W @ h + U @ row + b)\n}\nloss = sum(h^2)"


def rnn_call(T):
    return (RNN_HEAD.format(T=T) + "def cell(h, u) = tanh(W @ h + U @ u + b)\n"
            + f"h = zeros(3)\nfor t in range({T}) {{ h = cell(h, xs[t]) }}\nloss = sum(h^2)")


def rnn_unrolled(T):
    return (RNN_HEAD.format(T=T) + "h0 = zeros(3)\n"
            + "".join(f"h{t + 1} = tanh(W @ h{t} + U @ xs[{t}] + b)\n" for t in range(T)) + f"loss = sum(h{T}^2)")


def while_oracle(x, limit):
    """y = x; while y < limit: y = y x + 1, with its derivative carried along (dual numbers)."""
    y, dy, count = x, 1.0, 0
    while y < limit:
        y, dy = y * x + 1, dy * x + y
        count += 1
    return y, {"x": dy}, count


def while_loop(limit):
    return f"input x\ny = x\nwhile y < {limit} {{ y = y * x + 1 }}\ny"


def while_unrolled(x, limit):
    count = while_oracle(x, limit)[2]
    return "input x\ny0 = x\n" + "".join(f"y{i + 1} = y{i} * x + 1\n" for i in range(count)) + f"y{count}"


def jumps_oracle(n, x, lim=20.0):
    """The break/continue program simulated in Python with dual numbers; also its executed updates."""
    s, ds, updates = x, 1.0, []
    for i in range(n):
        if i % 3 == 1:
            continue
        if s > lim:
            break
        s, ds = s * x + i, ds * x + s
        updates.append(i)
    return s, {"x": ds}, updates


def jumps_loop(n):
    return f"""\
input x
s = x
for i in range({n}) {{
    if i % 3 == 1 {{ continue }}
    if s > 20 {{ break }}
    s = s * x + i
}}
s
"""


def jumps_unrolled(n, x):
    updates = jumps_oracle(n, x)[2]
    lines = ["input x", "s0 = x"] + [f"s{j + 1} = s{j} * x + {i}" for j, i in enumerate(updates)]
    return "\n".join(lines + [f"s{len(updates)}"])


def matpow_oracle(n, A, C):
    P = [np.linalg.matrix_power(A, j) for j in range(n + 1)]
    return np.sum(C * P[n]), {"A": sum(P[j].T @ C @ P[n - 1 - j].T for j in range(n))}


MATPOW_HEAD = "input A[2, 2]\nC = [[1.0, -2.0], [0.5, 3.0]]\n"
MATPOW_C = np.array([[1.0, -2.0], [0.5, 3.0]])


def matpow_loop(n):
    return MATPOW_HEAD + f"P = A * 1\nfor i in range({n - 1}) {{ P = P @ A }}\nloss = sum(C * P)"


def matpow_unrolled(n):
    return (MATPOW_HEAD + "P1 = A * 1\n" + "".join(f"P{j + 1} = P{j} @ A\n" for j in range(1, n))
            + f"loss = sum(C * P{n})")


def cumsum_weights(n):
    return np.linspace(1.0, 2.0, n) ** 2


def cumsum_oracle(n, x):
    w = cumsum_weights(n)
    return np.sum(np.cumsum(x) * w), {"x": np.cumsum(w[::-1])[::-1]}


def cumsum_loop(n):
    w = ", ".join(repr(float(v)) for v in cumsum_weights(n))
    return (f"input x[{n}]\nw = [{w}]\nc = x * 0\nc[0] = x[0]\n"
            f"for i in range(1, {n}) {{ c[i] = c[i - 1] + x[i] }}\nloss = sum(c * w)")


def cumsum_unrolled(n):
    w = ", ".join(repr(float(v)) for v in cumsum_weights(n))
    lines = [f"input x[{n}]", f"w = [{w}]", "c0 = x[0]"] + [f"c{i} = c{i - 1} + x[{i}]" for i in range(1, n)]
    return "\n".join(lines + [f"c = stack({', '.join(f'c{i}' for i in range(n))})", "loss = sum(c * w)"])


def _cases():
    cases = []
    for n in (1, 3, 10, 40):
        oracle = euler_oracle(n, **EULER_POINT)
        for form, make in (("loop", euler_loop), ("function", euler_function), ("while", euler_while)):
            cases.append(pytest.param(make(n), euler_unrolled(n), EULER_POINT, oracle, id=f"euler-{form}-{n}"))
    for n in (1, 4, 25):
        point = {"y0": 1.3, "r": 0.1}
        cases.append(pytest.param(recurrence_loop(n), recurrence_unrolled(n), point,
                                  recurrence_oracle(n, **point), id=f"recurrence-{n}"))
    for T in (1, 3, 6):
        point = rnn_point(T)
        oracle = rnn_oracle(T, **point)
        for form, make in (("range", rnn_range), ("rows", rnn_rows), ("call", rnn_call)):
            cases.append(pytest.param(make(T), rnn_unrolled(T), point, oracle, id=f"rnn-{form}-{T}"))
    for x, limit in ((1.3, 50), (2.0, 1000), (60.0, 50)):
        y, g, count = while_oracle(x, limit)
        cases.append(pytest.param(while_loop(limit), while_unrolled(x, limit), {"x": x}, (y, g),
                                  id=f"while-{x}-{limit}-{count}"))
    for n in (4, 10, 30):
        x = 1.7
        s, g, _ = jumps_oracle(n, x)
        cases.append(pytest.param(jumps_loop(n), jumps_unrolled(n, x), {"x": x}, (s, g), id=f"break-continue-{n}"))
    A = np.array([[0.9, -0.4], [0.3, 1.1]])
    for n in (1, 2, 5):
        cases.append(pytest.param(matpow_loop(n), matpow_unrolled(n), {"A": A}, matpow_oracle(n, A, MATPOW_C),
                                  id=f"matpow-{n}"))
    for n in (1, 2, 6):
        x = np.sin(np.arange(1.0, n + 1))
        cases.append(pytest.param(cumsum_loop(n), cumsum_unrolled(n), {"x": x}, cumsum_oracle(n, x),
                                  id=f"index-update-{n}"))
    return cases


CASES = _cases()
# the unrolled texts are shared by several loop forms: check each once against NumPy
REFERENCES = list({p.values[1]: p for p in CASES}.values())


@pytest.mark.parametrize("loop, unrolled, point, oracle", REFERENCES)
def test_unrolled_reference_matches_numpy(loop, unrolled, point, oracle):
    expected_value, expected_grad = oracle
    r = gradcalc.grad(unrolled, at=point)
    close(r.value, expected_value, rtol=1e-12)
    assert set(r) == set(expected_grad)
    for name, g in expected_grad.items():
        close(r[name], g, rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("y", [0.047, 0.3, -1.7])
def test_a_call_that_renames_a_value_is_its_body_written_inline_bit_for_bit(y):
    # `c = y` in a body records a copy, as at the top level, so that the terms of c's derivative
    # are summed in the order the inline statements sum them (it aliased y, and the gradient
    # differed in its last bit: loops hunt L5); the oracle is the text written out by hand
    call = "input y\ndef f(a) {\n  c = y\n  return sin(c) * a + c * c\n}\nz = f(0.1) + f(0.7)\nz"
    inline = "input y\nc = y\nr1 = sin(c)*0.1 + c*c\nc = y\nr2 = sin(c)*0.7 + c*c\nz = r1 + r2\nz"
    g1, g2 = gradcalc.grad(call, at={"y": y}), gradcalc.grad(inline, at={"y": y})
    assert float(g1["y"]).hex() == float(g2["y"]).hex()
    h1, h2 = gradcalc.hessian(call, at={"y": y}), gradcalc.hessian(inline, at={"y": y})
    assert float(h1["y"]["y"]).hex() == float(h2["y"]["y"]).hex()
    # (z = sin(y) (0.1 + 0.7) + 2 y^2, by hand: dz/dy = 0.8 cos(y) + 4 y)
    assert float(g1["y"]) == pytest.approx(0.8 * math.cos(y) + 4 * y, rel=1e-14)


@pytest.mark.parametrize("loop, unrolled, point, oracle", CASES)
def test_loop_matches_unrolled(loop, unrolled, point, oracle):
    a = gradcalc.grad(loop, at=point)
    b = gradcalc.grad(unrolled, at=point)
    close(a.value, b.value, rtol=1e-14, atol=0)
    assert list(a) == list(b)
    for name in b:
        close(a[name], b[name], rtol=1e-13, atol=1e-15)
    assert a.unconnected == b.unconnected
    assert a.warnings == b.warnings == []


@pytest.mark.parametrize("loop, unrolled, point, oracle",
                         [p for p in CASES if p.id.startswith(("euler-loop", "rnn-range", "index-update"))])
def test_forward_mode_through_loops_matches_reverse_mode_of_the_unrolled_program(loop, unrolled, point, oracle):
    ja = gradcalc.jacobian(loop, at=point, mode="fwd")
    jb = gradcalc.jacobian(unrolled, at=point, mode="rev")
    (oa,), (ob,) = ja.of, jb.of
    assert list(ja[oa]) == list(jb[ob])
    for name in jb[ob]:
        close(ja[oa][name], jb[ob][name], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("n", [1, 3, 10])
def test_hessian_through_a_loop_matches_the_unrolled_program(n):
    ha = gradcalc.hessian(euler_loop(n), at=EULER_POINT)
    hb = gradcalc.hessian(euler_unrolled(n), at=EULER_POINT)
    assert list(ha) == list(hb) == list(EULER_POINT)
    for wi in hb:
        for wj in hb[wi]:
            close(ha[wi][wj], hb[wi][wj], rtol=1e-12, atol=1e-14)
    # and the Hessian is symmetric, as a second derivative is
    H = np.array([[float(ha[wi][wj]) for wj in EULER_POINT] for wi in EULER_POINT])
    close(H, H.T, rtol=1e-12, atol=1e-14)


# ==========================================================================
# The samples of issue 15: their defaults against NumPy oracles
# ==========================================================================


def read_sample(name):
    return (SAMPLES / name).read_text()


def pendulum_oracle(theta0, omega0, L, g, dt=0.01, steps=1000):
    th, om, ths = theta0, omega0, []
    for _ in range(steps):
        ths.append(th)
        a = -(g / L) * math.sin(th)
        th, om = th + dt * om, om + dt * a
    E = 0.5 * L**2 * om**2 + g * L * (1 - math.cos(th))
    thb, omb = g * L * math.sin(th), L**2 * om
    Lb, gb = L * om**2 + g * (1 - math.cos(th)), L * (1 - math.cos(th))
    for t in reversed(ths):
        thb, omb, Lb, gb = (thb - omb * dt * (g / L) * math.cos(t), omb + thb * dt,
                            Lb + omb * dt * (g / L**2) * math.sin(t), gb - omb * dt * math.sin(t) / L)
    return E, {"theta0": thb, "omega0": omb, "L": Lb, "g": gb}


def test_sample_pendulum_euler():
    point = {"theta0": 0.6, "omega0": 0.3, "L": 1.2, "g": 9.81}
    E, expected = pendulum_oracle(**point)
    # the oracle's reverse sweep against its own finite differences
    for name in point:
        num = fd(lambda v, name=name: pendulum_oracle(**{**point, name: float(v)})[0], point[name], h=1e-5)
        assert expected[name] == pytest.approx(float(num), rel=1e-6)
    r = gradcalc.grad(read_sample("pendulum_euler.grad"))
    assert r.of == "E"
    close(r.value, E, rtol=1e-12)
    assert list(r) == ["theta0", "omega0", "L", "g"]
    for name, g in expected.items():
        close(r[name], g, rtol=1e-10)
    assert float(r.value) == pytest.approx(4.484413, abs=5e-7)  # the number in the comments


def test_sample_newton_sqrt():
    r = gradcalc.grad(read_sample("newton_sqrt.grad"))
    assert r.of == "root"
    assert float(r.value) == pytest.approx(math.sqrt(2), rel=1e-14)
    assert float(r["a"]) == pytest.approx(1 / (2 * math.sqrt(2)), rel=1e-14)
    r = gradcalc.grad(read_sample("newton_sqrt.grad"), at={"a": 9.0})
    assert float(r.value) == pytest.approx(3.0, rel=1e-14)
    assert float(r["a"]) == pytest.approx(1 / 6, rel=1e-14)


RNN_SAMPLE = {
    "xs": np.array([[0.5, -0.2], [0.1, 0.4], [-0.3, 0.8], [0.9, -0.5], [0.2, 0.1]]),
    "W": np.array([[0.3, -0.2, 0.1], [0.05, 0.4, -0.3], [-0.25, 0.1, 0.2]]),
    "U": np.array([[0.6, -0.4], [0.2, 0.5], [-0.3, 0.1]]),
    "b": np.array([0.1, -0.1, 0.05]),
    "v": np.array([1.0, -0.5, 0.8]),
    "target": 1.0,
}


def test_sample_rnn_tanh():
    p = RNN_SAMPLE
    hs = [np.zeros(3)]
    for t in range(5):
        hs.append(np.tanh(p["W"] @ hs[-1] + p["U"] @ p["xs"][t] + p["b"]))
    e = p["v"] @ hs[-1] - p["target"]
    expected = {"xs": np.zeros((5, 2)), "W": np.zeros((3, 3)), "U": np.zeros((3, 2)), "b": np.zeros(3),
                "v": e * hs[-1], "target": -e}
    hb = e * p["v"]
    for t in reversed(range(5)):
        zb = hb * (1 - hs[t + 1] ** 2)
        expected["W"] += np.outer(zb, hs[t])
        expected["U"] += np.outer(zb, p["xs"][t])
        expected["b"] += zb
        expected["xs"][t] = p["U"].T @ zb
        hb = p["W"].T @ zb
    r = gradcalc.grad(read_sample("rnn_tanh.grad"))
    assert r.of == "loss"
    close(r.value, 0.5 * e**2, rtol=1e-13)
    assert list(r) == ["xs", "W", "U", "b", "v", "target"]
    for name, g in expected.items():
        close(r[name], g, rtol=1e-11, atol=1e-14)


def test_sample_gradient_tape_if():
    r = gradcalc.grad(read_sample("gradient_tape_if.grad"), unconnected="none")
    assert r.of == "result" and float(r.value) == 2.0
    assert r["v0"] == 1.0 and r["v1"] is None and r["x"] is None
    r = gradcalc.grad(read_sample("gradient_tape_if.grad"), at={"x": -1.0})
    assert float(r.value) == 4.0 and float(r["v1"]) == 4.0 and set(r.unconnected) == {"x", "v0"}


def test_sample_cross_entropy_labels():
    logits = np.array([[1.0, 2.0, 0.5, -1.0], [0.3, -0.2, 1.5, 0.0], [2.2, 0.1, -0.7, 1.1]])
    labels = [2, 0, 3]
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    r = gradcalc.grad(read_sample("cross_entropy_labels.grad"))
    assert r.of == "loss" and list(r) == ["logits"]
    close(r.value, -np.mean(np.log(p[[0, 1, 2], labels])), rtol=1e-13)
    close(r["logits"], (p - np.eye(4)[labels]) / 3, rtol=1e-12, atol=1e-15)


def test_sample_force_grad():
    q, k, L0, mg = np.array([0.9, -1.2]), 20.0, 1.2, 0.5 * 9.81
    n = np.linalg.norm(q)
    r = gradcalc.jacobian(read_sample("force_grad.grad"))
    assert r.of == ["F"]
    close(r.value["F"], -k * (n - L0) * q / n - np.array([0.0, mg]), rtol=1e-13)
    close(r.value["F"], [-3.6, -0.105], rtol=1e-12)
    close(r["F"]["q"], -k * ((1 - L0 / n) * np.eye(2) + L0 * np.outer(q, q) / n**3), rtol=1e-12)
    close(r["F"]["q"], [[-9.76, 7.68], [7.68, -14.24]], rtol=1e-12)
    close(r["F"]["k"], [-0.18, 0.24], rtol=1e-12)
    close(r["F"]["L0"], [12.0, -16.0], rtol=1e-12)


def test_a_value_for_a_name_the_program_assigns_says_where_and_what_to_do():
    """PyTorch's "replaced a variable" pitfall: a name the program assigns is never an input."""
    with pytest.raises(gradcalc.GradcalcError) as info:
        gradcalc.grad("w = w - 0.1; w", at={"w": 1.0})
    err = info.value
    assert err.kind == "usage" and err.name == "w"
    assert err.message == "'w' is not an input of the program: it is assigned at line 1, column 1"
    assert "reads and never assigns" in err.hint and "w0" in err.hint


def test_a_value_for_the_name_of_a_bare_expression_says_it_names_that_value():
    # it said "it is assigned at line 1, column 1", though nothing is assigned there
    err = raised(gradcalc.grad, "x^2", at={"_": 3.0})
    assert err.message == "'_' is not an input of the program: it names the value of the expression at line 1, column 1"
    assert err.hint == "the inputs are: x"
    err = raised(gradcalc.grad, "x^2\nx + 1", at={"_2": 3.0})
    assert err.message.endswith("names the value of the expression at line 2, column 1")


def test_a_tangent_for_a_program_without_inputs_says_it_has_none():
    err = raised(gradcalc.jvp, "3 * 4", tangent={"x": 1.0})
    assert err.hint == "the program has no inputs"


# ==========================================================================
# Values may take a built-in's name (issue 16): diff, size, sort, take, mod...
# ==========================================================================
# A value shadows a built-in as it shadows a constant; a call name(...) still calls the
# built-in.  References: the same programs with the value renamed, and closed forms.

SHADOWING = [
    # (program, program with the value renamed, x)
    ("diff = x^2; diff * 3", "d = x^2; d * 3", 3.0),
    ("input size = 2\nsize * x", "input s = 2\ns * x", 3.0),
    ("sort = 1; sort + x^2", "s = 1; s + x^2", 3.0),
    ("for mod in range(3) { y = x * mod }\ny", "for m in range(3) { y = x * m }\ny", 2.0),
    ("take, size = split(x * [1, 2], 2); sum(take * size)", "a, b = split(x * [1, 2], 2); sum(a * b)", 1.5),
    ("def f(sum) = sum * 2\nf(x^2)", "def f(s) = s * 2\nf(x^2)", 3.0),
    ("def f(y) { len = y * 2; return len }\nf(x)", "def f(y) { n = y * 2; return n }\nf(x)", 3.0),
    # the built-in is still called by name while a value has its name
    ("diff = x^2; d = diff([1, 4, 9]); sum(d) * diff", "v = x^2; d = [3, 5]; sum(d) * v", 3.0),
]


@pytest.mark.parametrize("src, renamed, x", SHADOWING, ids=[s for s, _, _ in SHADOWING])
def test_a_value_may_take_a_builtins_name(src, renamed, x):
    if "split(" in src and "split" not in gradcalc.builtins.FUNCTIONS:
        pytest.skip("split is not a built-in yet")
    got = gradcalc.grad(src, at={"x": x})["x"]
    want = gradcalc.grad(renamed, at={"x": x})["x"]
    assert np.array_equal(got, want)


def test_a_shadowing_value_has_the_closed_form_gradient():
    # sum(diff([1, 4, 9])) = 3 + 5 = 8, so d/dx (8 x^2) = 16 x
    assert gradcalc.grad("diff = x^2; d = diff([1, 4, 9]); sum(d) * diff", at={"x": 3.0})["x"] == 48.0


def test_a_builtin_read_as_a_value_without_an_assignment_is_still_an_error():
    r = user_error("grad", "size * x", "--at", "x=3")
    assert "'size' is a function; call it as size(...)" in r.stderr
    assert "declare it (input size) or assign it" in r.stderr


def test_a_function_still_may_not_take_a_builtins_name():
    r = user_error("eval", "def diff(a) = a\ndiff(1)")
    assert "a function cannot be named 'diff': it is a built-in function" in r.stderr


# ==========================================================================
# concatenate((a, b), axis=0): the arrays as one tuple or list, as NumPy takes them
# ==========================================================================

SEQUENCES = [
    ("concatenate((a, b), axis=0)", lambda a, b: np.concatenate((a, b), axis=0)),
    ("concat([a, b])", lambda a, b: np.concatenate([a, b])),
    ("stack((a, b), axis=1)", lambda a, b: np.stack((a, b), axis=1)),
    ("stack([a, b, a])", lambda a, b: np.stack([a, b, a])),
    ("vstack((a, b))", lambda a, b: np.vstack((a, b))),
    ("hstack([a, b])", lambda a, b: np.hstack([a, b])),
    ("column_stack((a, b))", lambda a, b: np.column_stack((a, b))),
    ("concatenate((a,))", lambda a, b: np.concatenate((a,))),
]


@pytest.mark.parametrize("src, numpy_fn", SEQUENCES, ids=[s for s, _ in SEQUENCES])
def test_sequence_builtins_take_one_tuple_as_numpy_does(src, numpy_fn):
    a, b = np.array([1.0, -2.0, 0.5]), np.array([3.0, 4.0, -1.0])
    got = gradcalc.evaluate(src, at={"a": a, "b": b} if "b" in src else {"a": a})
    (value,) = got.values()
    assert np.array_equal(value, numpy_fn(a, b))


def test_the_tuple_form_differentiates_as_the_separate_arguments():
    # d/da, d/db of sum(concatenate((a, 2 b))^2) = 2 a, 8 b
    a, b = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    g = gradcalc.grad("sum(concatenate((a, 2*b), axis=0)^2)", at={"a": a, "b": b})
    assert np.array_equal(g["a"], 2 * a) and np.array_equal(g["b"], 8 * b)


# ==========================================================================
# A call giving several values as the output statement
# ==========================================================================

def test_several_values_as_the_output_says_so():
    r = user_error("grad", "eigh(S)", "--at", "S=[[2,1],[1,3]]")
    assert "the output statement (line 1) gives 2 values ('eigh' returns several)" in r.stderr
    assert "a, b = eigh(...)" in r.stderr
    r = user_error("eval", "def f(x) { return x, 2*x }\nf(S)", "--at", "S=1")
    assert "gives 2 values ('f' returns several)" in r.stderr


def test_several_values_in_a_bare_statement_are_fine_when_another_output_is_named():
    got = ok_json("eval", "w, V = eigh(S)\neigh(S)", "--at", "S=[[2,1],[1,3]]", "--of", "w")
    assert np.allclose(got["values"]["w"], np.linalg.eigvalsh([[2, 1], [1, 3]]))


@pytest.mark.parametrize("src, numpy_fn", [
    ("concatenate((a, b), 0)", lambda a, b, c: np.concatenate((a, b), 0)),
    ("stack((a, b), 1)", lambda a, b, c: np.stack((a, b), 1)),
    ("concatenate([a, b], axis=None)", lambda a, b, c: np.concatenate([a, b], axis=None)),
    ("concatenate((a, c), None)", lambda a, b, c: np.concatenate((a, c), None)),
    ("concatenate(a, c, axis=None)", lambda a, b, c: np.concatenate((a, c), axis=None)),
])
def test_the_tuple_form_takes_numpys_positional_axis_and_axis_none(src, numpy_fn):
    a, b, c = np.array([1.0, 2.0]), np.array([3.0, 4.0]), np.array([[5.0, 6.0], [7.0, 8.0]])
    at = {k: v for k, v in {"a": a, "b": b, "c": c}.items() if re.search(rf"\b{k}\b", src)}
    (value,) = gradcalc.evaluate(src, at=at).values()
    assert np.array_equal(value, numpy_fn(a, b, c))


def test_concatenate_axis_none_differentiates_through_the_flattening():
    # d/dc sum(concatenate((a, c), None)^2) = 2 c, in c's own shape
    c = np.array([[5.0, 6.0], [7.0, 8.0]])
    g = gradcalc.grad("sum(concatenate((a, c), None)^2)", at={"a": np.ones(2), "c": c})
    assert np.array_equal(g["c"], 2 * c)


def test_a_list_literal_followed_by_arrays_is_an_array_of_its_own():
    # concat([0], x, [6]): separate arguments, the first a literal array (samples/spring_chain)
    (value,) = gradcalc.evaluate("concat([0.0], x, [6.0])", at={"x": np.array([1.0, 2.0])}).values()
    assert np.array_equal(value, [0.0, 1.0, 2.0, 6.0])


def test_a_tuple_of_arrays_and_more_arrays_is_an_error():
    r = user_error("eval", "vstack((a, b), 0)", "--at", "a=[1,2],b=[3,4]")
    assert "vstack() takes its arrays as one tuple or as separate arguments, not both" in r.stderr
    assert "1:16" in r.stderr


def test_return_of_a_call_passes_on_every_value_it_gives():
    # `return r(...)` of a function giving two values was an error ("'r' gives 2 values; take
    # them apart"); Python and JAX pass them on
    two = "def two(u) { return u, 2*u }\ndef f(u) { return two(u) }\na, b = f(x)\na*b"
    assert gradcalc.grad(two, at={"x": 1.5})["x"] == 4 * 1.5  # d(2 x^2)/dx
    passed_on = ("def r(u, v, d=3) {\n if d <= 0 { return u, v }\n return r(u*v + 0.1, sin(v) + u, d - 1)\n}\n"
                 "a, b = r(x, s)\nL = sum(a*b)")
    taken_apart = passed_on.replace(" return r(u*v + 0.1, sin(v) + u, d - 1)",
                                    " p, q = r(u*v + 0.1, sin(v) + u, d - 1)\n return p, q")
    at = {"x": np.array([0.3, -1.2, 0.8, 2.1]), "s": 0.7}
    got, want = gradcalc.grad(passed_on, at=at), gradcalc.grad(taken_apart, at=at)
    assert got.value == want.value
    for k in ("x", "s"):
        assert np.array_equal(got[k], want[k])
