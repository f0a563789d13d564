"""The language of SPEC §2: lexer, parser, precedence, lowering.

Expected values come from closed forms, ``math`` and NumPy, never from gradcalc.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import gradcalc
from gradcalc.errors import GradcalcError, SyntaxError_
from gradcalc.syntax import (Assign, Binary, ExprStmt, InputDecl, Inputs, Name, Program, Unary,
                             parse, tokenize)


def value(src, **at):
    """The value of the program's output (its last statement)."""
    r = gradcalc.evaluate(src, at=at)
    assert len(r) == 1
    (v,) = r.values()
    return np.asarray(v)


def error(src, fn=None, **kwargs) -> GradcalcError:
    with pytest.raises(GradcalcError) as info:
        (fn or gradcalc.evaluate)(src, **kwargs)
    return info.value


# ==========================================================================
# Lexer
# ==========================================================================


def test_tokens_carry_kinds_and_positions():
    toks = tokenize("x**2 <= .5 # a comment\n(a\n+b)")
    got = [(t.kind, t.text, (t.pos.line, t.pos.col)) for t in toks]
    assert got == [
        ("name", "x", (1, 1)), ("op", "**", (1, 2)), ("num", "2", (1, 4)),
        ("op", "<=", (1, 6)), ("num", ".5", (1, 9)), ("newline", "\n", (1, 23)),
        # the newline inside ( ... ) is dropped; positions still count lines
        ("op", "(", (2, 1)), ("name", "a", (2, 2)), ("op", "+", (3, 1)), ("name", "b", (3, 2)),
        ("op", ")", (3, 3)), ("eof", "", (3, 4)),
    ]


@pytest.mark.parametrize("text, expected", [
    ("3", 3.0), (".5", 0.5), ("1.", 1.0), ("1e-3", 1e-3), ("1E+3", 1e3), ("2e3", 2000.0),
    ("0.125", 0.125), ("1.5e2", 150.0), ("007", 7.0),
])
def test_numbers(text, expected):
    assert value(text) == expected


def test_number_tokens_are_single_tokens():
    assert [t.text for t in tokenize("1e-3+1E+3-.5*1.")][:-1] == ["1e-3", "+", "1E+3", "-", ".5", "*", "1."]


def test_comments_are_ignored():
    assert value("# leading comment\n1 + 2  # trailing\n# last") == 3.0
    assert value("x = 1 # café ² 'not a string'\nx + 1") == 2.0


def test_semicolons_and_newlines_separate_statements():
    assert value("a = 1; b = a + 1\nc = b * 3;") == 6.0
    assert value(";;\n\n a = 2 ;\n\n a * a ;;\n") == 4.0


def test_crlf_and_tabs_are_whitespace():
    assert value("x = 1\r\ny = x\t+\t1\r\n") == 2.0


def test_newlines_inside_brackets_are_ignored():
    assert value("y = (1 +\n  2 +\n  3)\ny") == 6.0
    assert value("sum([1,\n 2,\n\n 3])") == 6.0
    assert value("maximum(\n 1,\n 2\n)") == 2.0


# ==========================================================================
# Precedence and associativity (SPEC §2 table), asserted numerically
# ==========================================================================

PRECEDENCE = [
    # power binds tighter than unary minus on its left, and takes a unary minus on its right
    ("-x^2", {"x": 3.0}, -9.0),
    ("-x**2", {"x": 3.0}, -9.0),
    ("(-x)^2", {"x": 3.0}, 9.0),
    ("-2^2", {}, -4.0),
    ("2^-1", {}, 0.5),
    ("2**-1", {}, 0.5),
    ("2^-2^2", {}, 2.0 ** -(2.0 ** 2)),
    # power is right-associative; ^ and ** are the same operator
    ("2^3^2", {}, 512.0),
    ("2**3**2", {}, 512.0),
    ("2^3**2", {}, 512.0),
    ("(2^3)^2", {}, 64.0),
    ("2**3", {}, 8.0),
    ("2^3", {}, 8.0),
    # additive and multiplicative are left-associative
    ("1-2-3", {}, -4.0),
    ("1-(2-3)", {}, 2.0),
    ("8/4/2", {}, 1.0),
    ("8/(4/2)", {}, 4.0),
    ("2*3/4", {}, 1.5),
    ("1+2*3", {}, 7.0),
    ("(1+2)*3", {}, 9.0),
    ("10-4/2", {}, 8.0),
    # unary minus versus multiplication
    ("-2*3", {}, -6.0),
    ("2*-3", {}, -6.0),
    ("3 - -3", {}, 6.0),
    ("--3", {}, 3.0),
    ("+3", {}, 3.0),
    ("-x*y", {"x": 2.0, "y": 5.0}, -10.0),
    ("-x^2*y", {"x": 2.0, "y": 5.0}, -20.0),
    ("2*x^2", {"x": 3.0}, 18.0),
    # postfix binds tightest
    ("-sin(x)^2", {"x": 0.5}, -(math.sin(0.5) ** 2)),
    ("exp(x)^2", {"x": 0.5}, math.exp(0.5) ** 2),
    # comparisons are lowest and give 1.0 / 0.0
    ("1 < 2", {}, 1.0),
    ("2 < 1", {}, 0.0),
    ("1 <= 1", {}, 1.0),
    ("1 >= 2", {}, 0.0),
    ("1 > 0", {}, 1.0),
    ("1 == 1", {}, 1.0),
    ("1 != 1", {}, 0.0),
    ("2 + 1 < 4", {}, 1.0),      # (2+1) < 4
    ("1 < 2 * 3 - 4", {}, 1.0),  # 1 < 2
    ("(1 < 2) == 1", {}, 1.0),
    ("-1 < -x^2", {"x": 0.5}, 1.0),
]


@pytest.mark.parametrize("src, at, expected", PRECEDENCE, ids=[p[0] for p in PRECEDENCE])
def test_precedence_and_associativity(src, at, expected):
    assert value(src, **at) == expected


def test_comparisons_are_masks():
    x = np.array([-1.0, 0.0, 2.0])
    np.testing.assert_array_equal(value("x > 0", x=x), (x > 0).astype(float))
    np.testing.assert_array_equal(value("x <= 0", x=x), (x <= 0).astype(float))
    np.testing.assert_array_equal(value("x != 0", x=x), (x != 0).astype(float))


def test_comparisons_have_no_gradient():
    g = gradcalc.grad("(x > 0) * 3 + x", at={"x": 1.5})
    assert g["x"] == 1.0


@pytest.mark.parametrize("src", ["a < b < c", "1 < 2 < 3", "1 < 2 == 1", "x >= y != z"])
def test_comparisons_do_not_chain(src):
    err = error(src, at={})
    assert err.kind == "syntax"
    assert err.message == "comparisons cannot be chained"


def test_matmul_is_at_the_multiplicative_level():
    v = np.array([1.0, 2.0])
    A = np.array([[1.0, 2.0], [3.0, 4.0]])
    # left-associative with '*': (v * A) @ [1, 1]
    np.testing.assert_array_equal(value("[1, 2] * [[1, 2], [3, 4]] @ [1, 1]"), (v * A) @ np.ones(2))
    # and with '/'
    np.testing.assert_array_equal(value("[[2, 4], [6, 8]] / 2 @ [1, 1]"), (2 * A / 2) @ np.ones(2))
    # tighter than '+'
    np.testing.assert_array_equal(value("[[1, 2], [3, 4]] @ [1, 1] + 1"), A @ np.ones(2) + 1)
    # looser than '^' and unary minus
    np.testing.assert_array_equal(value("-[[1, 2], [3, 4]] @ [1, 1]^2"), -A @ np.ones(2))


def test_parse_tree_of_minus_power():
    (st,) = parse("-x^2").statements
    assert isinstance(st, ExprStmt)
    u = st.value
    assert isinstance(u, Unary) and u.op == "-"
    assert isinstance(u.operand, Binary) and u.operand.op == "^"
    assert (u.operand.pos.line, u.operand.pos.col) == (1, 3)


def test_parse_tree_power_is_right_associative_and_star_star_is_caret():
    (st,) = parse("a**b^c").statements
    b = st.value
    assert b.op == "^" and isinstance(b.left, Name) and b.left.id == "a"
    assert b.right.op == "^" and b.right.left.id == "b" and b.right.right.id == "c"


def test_parse_tree_matmul_then_times_left_associative():
    (st,) = parse("a@b*c").statements
    b = st.value
    assert b.op == "*" and b.left.op == "@" and b.right.id == "c"


def test_parse_returns_a_program_and_accepts_one():
    p = gradcalc.parse("x = 1; x + 1")
    assert isinstance(p, Program)
    assert [type(s) for s in p.statements] == [Assign, ExprStmt]
    assert gradcalc.parse(p) is p
    assert gradcalc.evaluate(p)["_"] == 2.0


# ==========================================================================
# Statements: input, assignment, bare expressions
# ==========================================================================


def test_input_declarations_shape_and_default():
    (st, _) = parse("input x[4] = [0.5, -1.0, 2.0, 0.1]\nsum(x)").statements
    assert isinstance(st, Inputs)
    (d,) = st.decls
    assert isinstance(d, InputDecl) and d.name == "x" and d.shape == (4,)
    assert value("input x[4] = [0.5, -1.0, 2.0, 0.1]\nsum(x)") == 0.5 - 1.0 + 2.0 + 0.1


@pytest.mark.parametrize("decl, at, expected", [
    ("input t\nt*2", {"t": 1.5}, 3.0),
    ("input t = 0.5\nt*2", {}, 1.0),
    ("input v[3]\nsum(v)", {"v": [1.0, 2.0, 3.0]}, 6.0),
    ("input W[2, 3]\nsum(W)", {"W": np.ones((2, 3))}, 6.0),
    ("input t = 0.5\nt*2", {"t": 4.0}, 8.0),  # --at overrides the default
    ("input t = pi/4\nt", {}, math.pi / 4),     # defaults are constant expressions
])
def test_input_forms(decl, at, expected):
    assert value(decl, **at) == expected


def test_several_inputs_on_one_line():
    src = "input a, b[2] = [1, 2], c = 0.5\na * sum(b) * c"
    (st, _) = parse(src).statements
    assert [(d.name, d.shape) for d in st.decls] == [("a", None), ("b", (2,)), ("c", None)]
    assert value(src, a=3.0) == 3.0 * 3.0 * 0.5
    g = gradcalc.grad(src, at={"a": 3.0})
    assert list(g) == ["a", "b", "c"]
    assert g["a"] == 3.0 * 0.5
    np.testing.assert_array_equal(g["b"], [3.0 * 0.5, 3.0 * 0.5])
    assert g["c"] == 3.0 * 3.0


def test_input_statement_as_the_last_statement_is_the_output():
    assert value("input x = 2") == 2.0


def test_bare_expressions_are_named_underscore_underscore2():
    r = gradcalc.evaluate("1; 2; x = 3; x + 1", all=True)
    assert list(r) == ["_", "_2", "x", "_3"]
    assert [float(v) for v in r.values()] == [1.0, 2.0, 3.0, 4.0]
    assert gradcalc.evaluate("1; 2; 3", of="_2")["_2"] == 2.0


def test_bare_expressions_skip_the_names_of_declared_inputs():
    # A bare value named as an input replaced it: d(_^2)/d_ came out 1 at _ = 3, and the
    # Hessian of _^3 came out 0 (found by a bug hunt). Closed forms: 2*3 = 6, 6*3 = 18, 3*2^2 = 12.
    g = gradcalc.grad("input _; _^2", at={"_": 3.0})
    assert g.of == "_2" and float(g["_"]) == 6.0 and float(g.at["_"]) == 3.0
    assert float(gradcalc.hessian("input _; _^3", at={"_": 3.0})["_"]["_"]) == 18.0
    g = gradcalc.grad("input _2; x^2; _2^3", at={"_2": 2.0, "x": 1.0})
    assert g.of == "_3" and float(g["_2"]) == 12.0
    r = gradcalc.evaluate("input _ = 2; _ + 1; _2 * 10", all=True)
    assert list(r) == ["_", "_2", "_3"] and [float(v) for v in r.values()] == [2.0, 3.0, 30.0]


def test_bare_expressions_can_be_read_by_later_statements():
    assert value("x^2\n_ + 1", x=3.0) == 10.0


def test_input_order_declared_first_then_free_names_by_first_appearance():
    src = "input q\nz = y*x + q*w\ny + z + b"
    at = dict(x=1.0, y=2.0, q=3.0, w=4.0, b=5.0)
    g = gradcalc.grad(src, at=at)
    assert list(g) == ["q", "y", "x", "w", "b"]
    # x*y + q*w + y + b: closed-form partials
    assert [float(g[k]) for k in g] == [4.0, 1.0 + 1.0, 2.0, 3.0, 1.0]


def test_names_read_before_assignment_in_later_statements_are_inputs():
    g = gradcalc.grad("a = x * 2\nb = a + y\nb * x", at={"x": 3.0, "y": 1.0})
    assert list(g) == ["x", "y"]
    # (2x + y) x -> 4x + y
    assert g["x"] == 4 * 3.0 + 1.0 and g["y"] == 3.0


def test_jacobian_defaults_to_inputs_in_order():
    r = gradcalc.jacobian("input b\n[a, b, c]", at={"a": 1.0, "b": 2.0, "c": 3.0})
    assert list(r["_"]) == ["b", "a", "c"]


# ==========================================================================
# Constants, true/false, keyword arguments
# ==========================================================================


@pytest.mark.parametrize("src, expected", [
    ("pi", math.pi), ("e", math.e), ("inf", math.inf), ("-inf", -math.inf),
    ("2*pi", 2 * math.pi), ("e^2", math.e ** 2),
])
def test_constants(src, expected):
    assert value(src) == expected


def test_nan_constant():
    assert math.isnan(value("nan"))


def test_constants_are_not_inputs():
    g = gradcalc.grad("pi * x + e", at={"x": 1.0})
    assert list(g) == ["x"] and g["x"] == math.pi


@pytest.mark.parametrize("src, at, expected", [
    ("pi = 3; pi", {}, 3.0),
    ("e = 3; e * 2", {}, 6.0),
    ("inf = 1; inf", {}, 1.0),
    ("input e = 2; e", {}, 2.0),
    ("input pi\npi * 2", {"pi": 1.0}, 2.0),
])
def test_constants_are_shadowed_by_inputs_and_assignments(src, at, expected):
    assert value(src, **at) == expected


def test_shadowing_input_is_differentiable():
    g = gradcalc.grad("input pi\npi^2", at={"pi": 3.0})
    assert list(g) == ["pi"] and g["pi"] == 6.0


@pytest.mark.parametrize("src, expected", [
    ("true", 1.0), ("false", 0.0), ("True", 1.0), ("False", 0.0),
])
def test_true_false(src, expected):
    assert value(src) == expected


A23 = np.array([[1.0, -2.0, 3.0], [4.0, 5.0, -6.0]])


@pytest.mark.parametrize("src, expected", [
    ("sum(A, axis=0)", A23.sum(axis=0)),
    ("sum(A, axis=1)", A23.sum(axis=1)),
    ("sum(A, axis=-1, keepdims=true)", A23.sum(axis=-1, keepdims=True)),
    ("sum(A, axis=0, keepdims=True)", A23.sum(axis=0, keepdims=True)),
    ("sum(A, axis=(0, 1))", A23.sum(axis=(0, 1))),
    ("sum(A, keepdims=false)", A23.sum()),
    ("mean(A, axis=1)", A23.mean(axis=1)),
    ("max(A, axis=0)", A23.max(axis=0)),
    ("var(A, ddof=1)", A23.var(ddof=1)),
    ("std(A, axis=0, ddof=1)", A23.std(axis=0, ddof=1)),
    ("transpose(A, axes=(1, 0))", A23.T),
    ("diag([1, 2], k=1)", np.diag([1.0, 2.0], k=1)),
    ("eye(2, m=3)", np.eye(2, 3)),
    ("concat(A, A, axis=1)", np.concatenate([A23, A23], axis=1)),
    ("stack(A, A, axis=-1)", np.stack([A23, A23], axis=-1)),
])
def test_keyword_arguments(src, expected):
    got = value(src, **({"A": A23} if "A" in src else {}))
    assert got.shape == np.shape(expected)
    np.testing.assert_allclose(got, expected, rtol=1e-15, atol=0)


def test_softmax_axis_keyword():
    got = value("softmax(A, axis=0)", A=A23)
    ex = np.exp(A23 - A23.max(axis=0)) / np.exp(A23 - A23.max(axis=0)).sum(axis=0)
    np.testing.assert_allclose(got, ex, rtol=1e-14)


# ==========================================================================
# Indexing and slicing follow NumPy
# ==========================================================================

X10 = np.arange(10.0) * 1.5 - 4.0
M34 = np.arange(12.0).reshape(3, 4) - 5.0

INDEX_1D = [
    ("x[0]", X10[0]), ("x[-1]", X10[-1]), ("x[3]", X10[3]), ("x[-10]", X10[-10]),
    ("x[2:5]", X10[2:5]), ("x[::2]", X10[::2]), ("x[1::3]", X10[1::3]), ("x[-3:]", X10[-3:]),
    ("x[:-2]", X10[:-2]), ("x[1:-1:3]", X10[1:-1:3]), ("x[8:2:-2]", X10[8:2:-2]),
    ("x[7:0:-3]", X10[7:0:-3]), ("x[-2:-8:-1]", X10[-2:-8:-1]),
    ("x[-100:100]", X10[-100:100]), ("x[2:2]", X10[2:2]), ("x[5:100:2]", X10[5:100:2]),
    ("x[:3:-2]", X10[:3:-2]),
]
INDEX_NEG_STEP_OPEN = [
    ("x[::-1]", X10[::-1]), ("x[::-3]", X10[::-3]), ("x[:-11:-1]", X10[:-11:-1]),
    ("x[5::-1]", X10[5::-1]),
]
INDEX_2D = [
    ("x[1]", M34[1]), ("x[-1, -2]", M34[-1, -2]), ("x[:, 1]", M34[:, 1]), ("x[1, 1:3]", M34[1, 1:3]),
    ("x[0:2, ::2]", M34[0:2, ::2]), ("x[-2:, -1]", M34[-2:, -1]), ("x[2:0:-1, 3:1:-1]", M34[2:0:-1, 3:1:-1]),
]
INDEX_2D_NEG_STEP_OPEN = [
    ("x[1, ::-1]", M34[1, ::-1]), ("x[::-2, 1:3]", M34[::-2, 1:3]), ("x[::-1, ::-1]", M34[::-1, ::-1]),
]

def _check_index(src, arr, expected):
    got = value(src, x=arr)
    assert got.shape == np.shape(expected)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("src, expected", INDEX_1D, ids=[i[0] for i in INDEX_1D])
def test_indexing_1d_matches_numpy(src, expected):
    _check_index(src, X10, expected)


@pytest.mark.parametrize("src, expected", INDEX_2D, ids=[i[0] for i in INDEX_2D])
def test_indexing_2d_matches_numpy(src, expected):
    _check_index(src, M34, expected)


@pytest.mark.parametrize("src, expected", INDEX_NEG_STEP_OPEN, ids=[i[0] for i in INDEX_NEG_STEP_OPEN])
def test_negative_step_with_open_bounds_1d(src, expected):
    _check_index(src, X10, expected)


@pytest.mark.parametrize("src, expected", INDEX_2D_NEG_STEP_OPEN, ids=[i[0] for i in INDEX_2D_NEG_STEP_OPEN])
def test_negative_step_with_open_bounds_2d(src, expected):
    _check_index(src, M34, expected)


def _index_grad_expected(arr, idx, w):
    g = np.zeros_like(arr)
    g[idx] += w  # basic slices never repeat an element
    return g


@pytest.mark.parametrize("src, idx", [
    ("x[8:2:-2]", np.s_[8:2:-2]), ("x[1:-1:3]", np.s_[1:-1:3]), ("x[-3:]", np.s_[-3:]),
    ("x[-4]", np.s_[-4]), ("x[::2]", np.s_[::2]), ("x[-100:100]", np.s_[-100:100]),
    pytest.param("x[::-1]", np.s_[::-1]),
])
def test_gradient_of_indexing_scatters_back(src, idx):
    # d/dx sum(w * x[idx]) = w scattered into the indexed positions
    w = np.arange(1.0, 1.0 + np.asarray(X10[idx]).size).reshape(np.shape(X10[idx]))
    g = gradcalc.grad(f"sum(w * {src})", at={"x": X10, "w": w}, wrt=["x"])
    np.testing.assert_array_equal(g["x"], _index_grad_expected(X10, idx, w))


def test_gradient_of_2d_indexing():
    idx = np.s_[2:0:-1, 1:3]
    w = np.array([[1.0, 2.0], [3.0, 4.0]])
    g = gradcalc.grad("sum(w * x[2:0:-1, 1:3])", at={"x": M34, "w": w}, wrt=["x"])
    np.testing.assert_array_equal(g["x"], _index_grad_expected(M34, idx, w))


def test_index_of_expression_and_of_call():
    assert value("(x * 2)[-1]", x=X10) == X10[-1] * 2
    np.testing.assert_array_equal(value("arange(10)[3:7]"), np.arange(10.0)[3:7])
    np.testing.assert_array_equal(value("[[1, 2], [3, 4]][1]"), [3.0, 4.0])


# ==========================================================================
# Array literals
# ==========================================================================


def test_nested_number_literal():
    np.testing.assert_array_equal(value("[[1, 2], [3, 4]]"), np.array([[1.0, 2.0], [3.0, 4.0]]))
    np.testing.assert_array_equal(value("[1, 2,]"), [1.0, 2.0])
    np.testing.assert_array_equal(value("[-1, +2, 3e0]"), [-1.0, 2.0, 3.0])


def test_literal_of_expressions_and_its_jacobian():
    r = gradcalc.jacobian("[x, 2*y, x*y]", at={"x": 3.0, "y": 5.0})
    np.testing.assert_array_equal(r.value["_"], [3.0, 10.0, 15.0])
    np.testing.assert_array_equal(r["_"]["x"], [1.0, 0.0, 5.0])
    np.testing.assert_array_equal(r["_"]["y"], [0.0, 2.0, 3.0])


def test_rotation_matrix_literal_and_its_derivative():
    t = 0.3
    src = "input t\nR = [[cos(t), -sin(t)], [sin(t), cos(t)]]"
    R = value(src, t=t)
    np.testing.assert_array_equal(R, [[math.cos(t), -math.sin(t)], [math.sin(t), math.cos(t)]])
    J = gradcalc.jacobian(src, at={"t": t})["R"]["t"]
    np.testing.assert_allclose(J, [[-math.sin(t), -math.cos(t)], [math.cos(t), -math.sin(t)]],
                               rtol=1e-15, atol=0)


def test_rotation_applied_to_a_vector_gradient():
    # f(t) = sum(R(t) @ [1, 2]) = (cos t - 2 sin t) + (sin t + 2 cos t)
    t = 0.7
    g = gradcalc.grad("sum([[cos(t), -sin(t)], [sin(t), cos(t)]] @ [1, 2])", at={"t": t})
    expected = -math.sin(t) - 2 * math.cos(t) + math.cos(t) - 2 * math.sin(t)
    assert g["t"] == pytest.approx(expected, rel=1e-14)


def test_literal_of_vectors_stacks_rows():
    x, y = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    np.testing.assert_array_equal(value("[x, y]", x=x, y=y), np.stack([x, y]))
    g = gradcalc.grad("sum([x, y] * [[1, 2], [3, 4]])", at={"x": x, "y": y})
    np.testing.assert_array_equal(g["x"], [1.0, 2.0])
    np.testing.assert_array_equal(g["y"], [3.0, 4.0])


@pytest.mark.parametrize("src", ["[1, [2, 3]]", "[[1, 2], [3]]", "[x, [x, x]]", "[[x, x], [x]]"])
def test_ragged_literals_are_errors(src):
    err = error(src, at={"x": 1.0} if "x" in src else {})
    assert err.kind == "shape"
    assert err.message.startswith("ragged array literal")


# ==========================================================================
# Tuples as shapes
# ==========================================================================


def test_reshape_with_tuple_shape():
    x = np.arange(6.0) + 1
    np.testing.assert_array_equal(value("reshape(x, (2, -1))", x=x), x.reshape(2, -1))
    np.testing.assert_array_equal(value("reshape(x, (3, 2))", x=x), x.reshape(3, 2))
    np.testing.assert_array_equal(value("reshape(x, (-1,))", x=x), x.reshape(-1))
    np.testing.assert_array_equal(value("reshape(x, 6)", x=x), x.reshape(6))
    w = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    g = gradcalc.grad("sum(reshape(x, (2, -1)) * w)", at={"x": x, "w": w}, wrt=["x"])
    np.testing.assert_array_equal(g["x"], w.reshape(-1))


def test_tuple_shapes_for_constructors():
    np.testing.assert_array_equal(value("zeros((2, 3))"), np.zeros((2, 3)))
    np.testing.assert_array_equal(value("ones((2,))"), np.ones(2))
    np.testing.assert_array_equal(value("ones(3)"), np.ones(3))


def test_tuple_as_a_value_is_an_error():
    err = error("(1, 2)")
    assert err.kind == "syntax"
    assert err.message == "a tuple is only allowed as an argument of a built-in (a shape, an axis, an array)"


# ==========================================================================
# Lowering: the tape
# ==========================================================================


def test_lowering_names_inputs_and_output():
    from gradcalc.errors import to_pos
    from gradcalc.lower import trace
    tr = trace(parse("h = x*y; z = h^2"), {"x": 2.0, "y": 3.0})
    assert list(tr.tape.inputs) == ["x", "y"]
    assert list(tr.tape.names) == ["x", "y", "h", "z"]
    assert tr.tape.output == "z"
    assert tr.value("h") == 6.0 and tr.value("z") == 36.0
    pos = {n: to_pos(loc) for n, loc in tr.tape.positions.items()}  # (the tape keeps locations)
    assert [(pos[n].line, pos[n].col) for n in ("x", "y", "h", "z")] == [(1, 5), (1, 7), (1, 1), (1, 10)]


def test_lowering_uses_only_registered_primitives():
    from gradcalc.lower import trace
    from gradcalc.primitives import REGISTRY
    src = "a - b / c + mean([a, b]) - clip(c, 0, 1) + sum(outer([a, b], [c, c]))"
    tr = trace(parse(src), {"a": 1.0, "b": 2.0, "c": 3.0})
    names = {eq.prim.name for eq in tr.tape.equations}
    assert names and names <= set(REGISTRY)


def test_eval_all_lists_inputs_then_statements():
    r = gradcalc.evaluate("input w = 1\na = w + v\nb = a * 2\na + b", at={"v": 2.0}, all=True)
    assert list(r) == ["w", "v", "a", "b", "_"]
    assert [float(r[k]) for k in r] == [1.0, 2.0, 3.0, 6.0, 9.0]


# ==========================================================================
# Scale: long chains and deep nesting
# ==========================================================================


def test_twenty_thousand_term_sum_parses_and_differentiates():
    src = " + ".join(["x"] * 20000)
    g = gradcalc.grad(src, at={"x": 1.5})
    assert g["x"] == 20000.0
    assert g.value == 30000.0


def test_long_chain_of_statements():
    n = 5000
    src = "a0 = x\n" + "\n".join(f"a{i} = a{i - 1} * 1.0001" for i in range(1, n))
    g = gradcalc.grad(src, at={"x": 1.0})
    assert g.of == f"a{n - 1}"
    assert g["x"] == pytest.approx(1.0001 ** (n - 1), rel=1e-12)


def test_long_left_associative_chains():
    assert value(" - ".join(["1"] * 5000)) == 1.0 - 4999.0
    assert value("*".join(["1"] * 5000)) == 1.0


@pytest.mark.parametrize("src", [
    "(" * 100_000 + "x" + ")" * 100_000,
    "[" * 50_000 + "1" + "]" * 50_000,
    "-" * 100_000 + "1",
    "2^" * 50_000 + "1",
    "sin(" * 50_000 + "x" + ")" * 50_000,
])
def test_deep_nesting_is_a_clean_error(src):
    with pytest.raises(GradcalcError) as info:  # never RecursionError
        gradcalc.evaluate(src, at={"x": 1.0})
    assert "nested deeper than" in info.value.message
    assert info.value.pos is not None and info.value.pos.line == 1


def test_moderate_nesting_is_fine():
    assert value("(" * 50 + "1" + ")" * 50) == 1.0
    np.testing.assert_array_equal(value("[" * 20 + "1" + "]" * 20), np.ones((1,) * 20))


_PIECES = ["x", "y1", "sin", "(", ")", "[", "]", "2", "1.5e3", ".5", "+", "-", "**", "^", "<=", "!=",
           ",", ":", ";", " ", "\t", "\r", "\n", "# note\n", "@", "/", "=", "  "]


@pytest.mark.parametrize("seed", range(40))
def test_every_token_sits_at_its_position(seed):
    # The lexer computes positions from lengths; check them against the text itself.
    rng = np.random.default_rng(seed)
    text = "".join(rng.choice(_PIECES, size=int(rng.integers(0, 60))))
    try:
        tokens = tokenize(text)
    except SyntaxError_ as err:  # only bracket errors can arise from these pieces
        assert "'" in str(err) and err.pos is not None
        return
    lines = text.split("\n")
    for t in tokens[:-1]:
        line = lines[t.pos.line - 1] + "\n"
        assert line[t.pos.col - 1:t.pos.col - 1 + len(t.text)] == t.text, (text, t)
    end = tokens[-1]
    assert end.kind == "eof" and end.pos == (len(lines), len(lines[-1]) + 1)
    assert [t.kind for t in tokens].count("newline") <= text.count("\n")


def test_parsing_and_grad_leave_no_cyclic_garbage():
    # Reference cycles would keep a program's tokens and trees alive until the cycle collector
    # ran, and that run (11 ms after a 3,000-line program) would land in the next call.
    import gc

    import gradcalc
    from gradcalc.syntax import parse
    src = "\n".join(["input x0 = 0.5"] + [f"x{i + 1} = sin(x{i})*1.01 + 0.1*x{i}" for i in range(50)])
    gc.collect()
    parse(src)
    gradcalc.grad(src)
    try:
        parse("x = (1 +")
    except Exception:  # noqa: BLE001 - the error path too
        pass
    assert gc.collect() == 0


def test_program_names_are_every_statements_reads_in_order():
    # Program keeps the Name nodes read as one flat tuple and, per statement, where its
    # own start (marks); reads slices them.  The oracle is walk_names on each tree.
    from gradcalc.run import find_inputs
    from gradcalc.syntax import walk_names
    text = ("input a\nb = a + c\nif b > 0 {\n  d = b * k\n} else {\n  d = 2\n}\n"
            "def f(t) = t * a\nb2 = b\nz = f(b2) + d\nz += h")
    program = gradcalc.syntax.parse(text)
    walked = tuple(tuple(walk_names(st)) for st in program.statements)
    assert program.reads == walked
    assert [n.id for n in program.names] == ["a", "c", "b", "b", "k", "t", "a", "b", "b2", "d", "z", "h"]
    assert program.marks == (0, 0, 2, 5, 7, 8, 10)
    # undeclared inputs (the slow path: c, k and h are known nowhere), by first read
    assert [(i.name, i.pos.line) for i in find_inputs(program)] == [("a", 1), ("c", 2), ("k", 4), ("h", 11)]
    # every name known: the flat tuple's one test in C finds none
    assert [i.name for i in find_inputs(gradcalc.syntax.parse("input x\ny = x\nz = y * x"))] == ["x"]
