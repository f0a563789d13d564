"""Every kind of user error: exact message, position (line, column), kind and hint.

The library raises GradcalcError subclasses; the CLI renders them (tested in
test_cli.py).  Here each error is checked at the API, where it is made.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import gradcalc
from gradcalc.cli.errors import flag
from gradcalc.errors import (GradcalcError, LimitError, NameError_, ShapeError, SyntaxError_,
                             UsageError, ValueError_)

from cli_run import run


def raised(fn, *args, **kwargs) -> GradcalcError:
    with pytest.raises(GradcalcError) as info:
        fn(*args, **kwargs)
    return info.value


def check(err: GradcalcError, kind, message, pos, hint=...):
    """message and hint as the command line words them (an option as its flag, --at)."""
    worded, worded_hint = err.worded(flag)
    assert err.kind == kind
    assert worded == message
    if pos is None:
        assert err.pos is None
    else:
        assert err.pos is not None, "the error has no position"
        assert (err.pos.line, err.pos.col) == pos
    if hint is not ...:
        assert worded_hint == hint


# ==========================================================================
# Lexical errors
# ==========================================================================

ASCII_HINT = "programs are written in ASCII"

LEXICAL = [
    ("x.__class__", "unexpected character '.'", (1, 2), "attribute access is not part of the language"),
    ("y = x.T", "unexpected character '.'", (1, 6), "attribute access is not part of the language"),
    ('"abc + 1', "string literal is never closed", (1, 1), 'end it with " on the same line'),
    ("x = 'a\ny = 1'", "string literal is never closed", (1, 5), "end it with ' on the same line"),
    ("x = 'aé'", "unexpected character 'é' (U+00E9)", (1, 7), "a string holds printable ASCII characters only"),
    ("1 ! 2", "unexpected character '!'", (1, 3), "use 'not' for negation, '!=' for 'not equal'"),
    ("x = 1 & 2", "unexpected character '&'", (1, 7), "use 'and' (elementwise, on masks)"),
    ("x ? 2", "unexpected character '?'", (1, 3), None),
    ("{1}", "expected an expression, found '{'", (1, 1), "array literals use [ ]"),
    ("x½", "unexpected character '½' (U+00BD)", (1, 2), ASCII_HINT),
    ("a = 1\nb = a → 2", "unexpected character '→' (U+2192)", (2, 7), ASCII_HINT),
    ("é + 1", "unexpected character 'é' (U+00E9)", (1, 1), ASCII_HINT),
    ("3x", "invalid number '3x'", (1, 2), "put an operator between a number and a name, e.g. 2*x"),
]


@pytest.mark.parametrize("src, message, pos", [
    # NumPy refuses a mask whose shape is not the indexed axes'; gradcalc read its non-zero
    # positions as integers, so a short mask selected silently and a long one spoke of an
    # integer index out of range (fuzz hunt)
    ("x = [1, 2, 3, 4]\nx[[1, 0, 1] > 0]", "a mask of shape (3,) does not match the indexed axes (4,) (from axis 0)", (2, 2)),
    ("ones(3)[ones(4) > 0]", "a mask of shape (4,) does not match the indexed axes (3,) (from axis 0)", (1, 8)),
    ("y = [1, 2, 3, 4]\ny[[1, 0, 1] > 0] = 9", "a mask of shape (3,) does not match the indexed axes (4,) (from axis 0)",
     (2, 1)),
    ("M = ones((2, 3))\nM[0, [1, 1] > 0]", "a mask of shape (2,) does not match the indexed axes (3,) (from axis 1)", (2, 2)),
])
def test_a_mask_must_have_the_shape_of_the_axes_it_indexes(src, message, pos):
    check(raised(gradcalc.evaluate, src), "shape", message, pos)


def test_a_mask_of_the_right_shape_selects_as_numpy_does():
    m = np.arange(6.0).reshape(2, 3)
    r = gradcalc.evaluate("M[M > 2]", at={"M": m})["_"]
    assert np.array_equal(r, m[m > 2])
    g = gradcalc.grad("sum(M[M > 2]^2)", at={"M": m})["M"]
    assert np.array_equal(g, np.where(m > 2, 2 * m, 0.0))


@pytest.mark.parametrize("src, line, caret", [
    ("a = 1\rb = x 3", "a = 1 b = x 3", "      ^"),  # a '\r' within a line is a blank to the lexer
    ("a = 1\x0cb = x 3", "a = 1 b = x 3", "      ^"),
    ("x = 1\r\ny = x +\r\n", "y = x +", "        ^"),  # a CRLF file (its line ends past the '\r')
    ("a = 1\x1cb", "a = 1 b", "     ^"),  # a character no token starts with, shown as a blank
    ("a = 1\u2028b", "a = 1 b", "     ^"),
    ("y = x\t+ foo(1)", "y = x + foo(1)", "        ^"),
])
def test_the_line_shown_is_the_lexers_and_the_caret_is_under_its_column(src, line, caret):
    """The source line is cut at '\n' alone, as the lexer counts lines (str.splitlines cut it at
    '\r', '\f', '\v', '\x1c', '\u2028'... too, so that the caret pointed past what was shown)."""
    from gradcalc.errors import located_text
    shown = located_text(raised(gradcalc.evaluate, src, at={"x": 1.0})).split("\n")
    assert shown[1:3] == ["  " + line, "  " + caret]


@pytest.mark.parametrize("src, message, pos, hint", LEXICAL, ids=[c[0] for c in LEXICAL])
def test_lexical_errors(src, message, pos, hint):
    err = raised(gradcalc.parse, src)
    assert isinstance(err, SyntaxError_)
    check(err, "syntax", message, pos, hint)


SUPERSCRIPTS = [
    ("x²", "unexpected character '²' (U+00B2)", (1, 2)),       # str.isdigit() is True for these
    ("x = 2 * ³", "unexpected character '³' (U+00B3)", (1, 9)),
]
UNICODE_DECIMALS = [
    ("٣ + 1", "unexpected character '٣' (U+0663)", (1, 1)),     # Arabic-Indic three: matched by regex \d
    ("x = １", "unexpected character '１' (U+FF11)", (1, 5)),    # fullwidth one
    ("x[０]", "unexpected character '０' (U+FF10)", (1, 3)),
]


@pytest.mark.parametrize("src, message, pos", SUPERSCRIPTS, ids=[c[0] for c in SUPERSCRIPTS])
def test_superscripts_are_unexpected_characters(src, message, pos):
    err = raised(gradcalc.evaluate, src, at={"x": 2.0} if "x" in src else {})
    check(err, "syntax", message, pos, ASCII_HINT)


@pytest.mark.parametrize("src, message, pos", UNICODE_DECIMALS, ids=[c[0] for c in UNICODE_DECIMALS])
def test_unicode_decimal_digits_are_unexpected_characters(src, message, pos):
    err = raised(gradcalc.evaluate, src, at={"x": np.ones(2)} if "x[" in src else {})
    check(err, "syntax", message, pos, ASCII_HINT)


# ==========================================================================
# Brackets
# ==========================================================================

BRACKETS = [
    ("1)", "unmatched ')'", (1, 2), None),
    ("[1, 2]]", "unmatched ']'", (1, 7), None),
    ("(1", "'(' is never closed", (1, 1), "add ')'"),
    ("sin(x", "'(' is never closed", (1, 4), "add ')'"),
    ("[[1, 2], [3, 4]", "'[' is never closed", (1, 1), "add ']'"),
    ("a = [1,\n 2\nb = 3", "'[' is never closed", (1, 5), "add ']'"),
    ("[1)", "')' does not match '[' at 1:1", (1, 3), None),
    ("x = (1,\n 2]", "']' does not match '(' at 1:5", (2, 3), None),
]


@pytest.mark.parametrize("src, message, pos, hint", BRACKETS, ids=[c[0] for c in BRACKETS])
def test_bracket_errors(src, message, pos, hint):
    check(raised(gradcalc.parse, src), "syntax", message, pos, hint)


# ==========================================================================
# Grammar
# ==========================================================================

GRAMMAR = [
    ("2 +* 3", "expected an expression, found '*'", (1, 4), None),
    ("x =", "expected an expression, found end of input", (1, 4), None),
    ("1; 2 +", "expected an expression, found end of input", (1, 7), None),
    ("y = (\n)", "a tuple is only allowed as an argument of a built-in (a shape, an axis, an array)", (1, 5), None),
    ("2 3", "expected end of statement, found '3'", (1, 3),
     "separate statements with a newline or ';', or add an operator"),
    ("1 = 2", "expected end of statement, found '='", (1, 3), None),
    ("a < b < c", "comparisons cannot be chained", (1, 7), "combine them with 'and': a < b and b < c"),
    ("x = 1 == 1 != 0", "comparisons cannot be chained", (1, 12), "combine them with 'and': a < b and b < c"),
    ("sum([1], axis=0, axis=0)", "keyword argument 'axis' given twice", (1, 18), None),
    ("sum(axis=0, [1])", "positional argument after a keyword argument", (1, 13), None),
    ("x = 1; (x)(2)", "only named functions can be called", (1, 11), None),
    ("x = [1, 2]; x[]", "empty index", (1, 14), None),
    ("input x[2.5]", "expected an integer dimension, found '2.5'", (1, 9), "shapes are integer literals: input W[3, 4]"),
]


@pytest.mark.parametrize("src, message, pos, hint", GRAMMAR, ids=[c[0] for c in GRAMMAR])
def test_grammar_errors(src, message, pos, hint):
    err = raised(gradcalc.evaluate, src)
    check(err, "syntax", message, pos, hint)


@pytest.mark.parametrize("src", ["", "   ", "\n\n", "# only a comment", ";", " ; ;\n"])
def test_empty_program(src):
    check(raised(gradcalc.evaluate, src), "syntax", "empty program", (1, 1),
          "write an expression, e.g. sin(x)*y")


def test_deep_nesting_error_text():
    err = raised(gradcalc.evaluate, "(" * 100_000 + "1" + ")" * 100_000)
    assert err.message.startswith("expression nested deeper than ")
    assert err.hint == "split it into named intermediate statements"
    assert err.pos.line == 1


# ==========================================================================
# Names
# ==========================================================================

NAMES = [
    ("sine(x)", "unknown function 'sine'", (1, 1), "did you mean 'sin'?"),
    ("y = 1 + tanhh(x)", "unknown function 'tanhh'", (1, 9), "did you mean 'tanh'?"),
    ("a = x\nb = expp(a)", "unknown function 'expp'", (2, 5), "did you mean 'exp'?"),
    ("sofmax(x)", "unknown function 'sofmax'", (1, 1), "did you mean 'softmax'?"),
    ("__import__(1)", "unknown function '__import__'", (1, 1), None),
    ("eval(x)", "unknown function 'eval'", (1, 1), None),
    ("exec(x)", "unknown function 'exec'", (1, 1), None),
    ("open(x)", "unknown function 'open'", (1, 1), "did you mean 'append'?"),
    ("getattr(x, 1)", "unknown function 'getattr'", (1, 1), None),
    ("x * y(2)", "unknown function 'y'", (1, 5), None),
    ("z = 2; x * z(2)", "unknown function 'z'", (1, 12), "'z' is a value, not a function; use '*' to multiply"),
    ("sin + 1", "'sin' is a function; call it as sin(...)", (1, 1),
     "to use 'sin' as a value, declare it (input sin) or assign it"),
    ("y = 2 * exp", "'exp' is a function; call it as exp(...)", (1, 9),
     "to use 'exp' as a value, declare it (input exp) or assign it"),
    ("grad(sin)(x)", "grad takes a function defined with def; 'sin' is a built-in", (1, 6),
     "define one: def f(t) = sin(t), then grad(f)(x)"),
    ("y = jacobian(exp)(x)", "jacobian takes a function defined with def; 'exp' is a built-in", (1, 14),
     "define one: def f(t) = exp(t), then jacobian(f)(x)"),
    ("b = a\na = 2", "'a' has no value yet: it is assigned at line 2, column 1, which has not run", (1, 5), "give 'a' a value before this on every path"),
    ("input x\nx = 2", "cannot assign to 'x': it is an input (line 1)", (2, 1),
     "an input always means the value the program was given; assign to a new name"),
    ("input x\ny = x\nx += 1", "cannot assign to 'x': it is an input (line 1)", (3, 1),
     "an input always means the value the program was given; assign to a new name"),
    ("input x, x", "input 'x' is declared twice", (1, 10), None),
]


@pytest.mark.parametrize("src, message, pos, hint", NAMES, ids=[c[0] for c in NAMES])
def test_name_errors(src, message, pos, hint):
    err = raised(gradcalc.evaluate, src, at={"x": 1.0} if re.search(r"\bx\b", src) else {})
    assert isinstance(err, NameError_)
    check(err, "name", message, pos, hint)


def test_dunder_import_stops_at_the_unknown_function():
    # A string is a literal of the language (for built-ins that take one): the call is
    # refused by its function's name, before its arguments mean anything.
    err = raised(gradcalc.evaluate, "__import__('os')")
    check(err, "name", "unknown function '__import__'", (1, 1))


def test_dunder_import_is_refused_either_way():
    # Whatever the message, it is a user error and never reaches Python.
    err = raised(gradcalc.evaluate, "__import__('os')")
    assert err.kind in ("syntax", "name")


# ==========================================================================
# Shapes and indices
# ==========================================================================

SHAPES = [
    ("[1, 2] + [1, 2, 3]", {}, "shapes (2,) and (3,) do not broadcast", (1, 8)),
    ("a = x\nb = a + y", {"x": np.ones(2), "y": np.ones((3, 4))}, "shapes (2,) and (3, 4) do not broadcast", (2, 7)),
    ("x * y", {"x": np.ones(3), "y": np.ones(2)}, "shapes (3,) and (2,) do not broadcast", (1, 3)),
    ("ones((2, 3)) @ ones((2, 3))", {}, "matmul shapes (2, 3) and (2, 3) do not match: 3 != 2", (1, 14)),
    ("x @ y", {"x": np.ones(3), "y": np.ones(2)}, "matmul shapes (3,) and (2,) do not match: 3 != 2", (1, 3)),
    ("x[5]", {"x": np.ones(3)}, "index 5 is out of range for axis 0 with size 3", (1, 2)),
    ("x[-4]", {"x": np.ones(3)}, "index -4 is out of range for axis 0 with size 3", (1, 2)),
    ("y = x[0, 7]", {"x": np.ones((2, 3))}, "index 7 is out of range for axis 1 with size 3", (1, 6)),
    ("x[1, 2, 3]", {"x": np.ones((2, 3))}, "too many indices (3) for an array of dimension 2", (1, 2)),
    ("x[1.5]", {"x": np.ones(3)}, "an index must be an integer, got 1.5", (1, 3)),
    ("x[::0]", {"x": np.ones(3)}, "slice step cannot be zero", (1, 3)),
    ("reshape(ones(6), (4, -1))", {}, "reshape(): cannot reshape an array of shape (6,) into (4, -1)", (1, 1)),
    ("[1, [2, 3]]", {}, "ragged array literal: rows have different lengths", (1, 1)),
    ("[[1, 2], [3]]", {}, "ragged array literal: rows have different lengths", (1, 1)),
    ("[x, [x, x]]", {"x": 1.0}, "ragged array literal: element 2 has shape (2,), element 1 has shape ()", (1, 5)),
    ("input x[2] = [1, 2, 3]\nx", {}, "the default of 'x' has shape (3,), but it is declared as x[2]", (1, 7)),
    ("zeros(-1)", {}, "zeros(): negative dimension in shape (-1,)", (1, 1)),
    ("sum([1, 2], axis=5)", {}, "sum(): axis 5 is out of range for an array of dimension 1", (1, 1)),
]


@pytest.mark.parametrize("src, at, message, pos", SHAPES, ids=[c[0] for c in SHAPES])
def test_shape_errors(src, at, message, pos):
    err = raised(gradcalc.evaluate, src, at=at)
    assert isinstance(err, ShapeError)
    check(err, "shape", message, pos)


def test_value_for_declared_input_with_wrong_shape():
    err = raised(gradcalc.evaluate, "input x[3]\nsum(x)", at={"x": [1.0, 2.0]})
    assert err.kind == "shape"
    assert err.message == "the value given for 'x' has shape (2,), but it is declared as x[3]"


def test_grad_of_non_scalar_points_to_jacobian_vjp_and_sum():
    err = raised(gradcalc.grad, "y = x * x", at={"x": [1.0, 2.0]})
    check(err, "shape", "grad needs a scalar output, but 'y' has shape (2,)", (1, 1))
    for pointer in ("jacobian", "vjp", "--sum"):
        assert pointer in err.worded(flag)[1]


def test_hessian_of_non_scalar():
    err = raised(gradcalc.hessian, "x * x", at={"x": [1.0, 2.0]})
    check(err, "shape", "hessian needs a scalar output, but '_' has shape (2,)", (1, 1))


def test_max_elements_limit():
    err = raised(gradcalc.evaluate, "zeros(1000)", max_elements=10)
    assert isinstance(err, LimitError)
    check(err, "limit", "zeros(): array of shape (1000,) has 1000 elements, more than --max-elements=10", (1, 1))


def test_singular_matrix_is_a_value_error():
    err = raised(gradcalc.evaluate, "inv([[1, 2], [2, 4]])")
    assert isinstance(err, ValueError_) and err.kind == "value"
    assert "singular matrix" in err.message
    assert (err.pos.line, err.pos.col) == (1, 1)


# ==========================================================================
# Values and usage
# ==========================================================================


def test_missing_input_value_points_at_first_use():
    err = raised(gradcalc.evaluate, "a = 2\nb = a * y + y", at={})
    check(err, "usage", "input 'y' has no value", (2, 9), "give it with --at y=...")


def test_missing_declared_input_points_at_declaration():
    err = raised(gradcalc.evaluate, "input W[2, 3]\nsum(W)")
    check(err, "usage", "input 'W' has no value", (1, 7), "give it with --at W=...")


def test_missing_input_that_looks_like_a_typo():
    err = raised(gradcalc.evaluate, "input alpha = 1\nalpah * 2")
    check(err, "usage", "input 'alpah' has no value", (2, 1),
          "did you mean 'alpha' (then 'alpah' is a typo), or give it with --at alpah=...")


def test_unknown_at_name_did_you_mean():
    err = raised(gradcalc.evaluate, "x + y", at={"xx": 1.0, "y": 2.0})
    check(err, "usage", "'xx' is not an input of the program", None, "did you mean 'x'?")


def test_unknown_at_name_lists_inputs():
    err = raised(gradcalc.evaluate, "x + y", at={"zzz": 1.0})
    check(err, "usage", "'zzz' is not an input of the program", None, "the inputs are: x, y")
    err = raised(gradcalc.evaluate, "1", at={"z": 1.0})
    check(err, "usage", "'z' is not an input of the program", None, "the inputs are: none")


@pytest.mark.parametrize("fn", [gradcalc.grad, gradcalc.jacobian, gradcalc.evaluate])
def test_unknown_of(fn):
    err = raised(fn, "a = x * y; a + 1", at={"x": 1.0, "y": 2.0}, of="b" if fn is gradcalc.grad else ["b"])
    check(err, "usage", "--of 'b' is not a name in the program", None, "the named values are: x, y, a, _")


def test_a_hint_lists_twelve_names_and_counts_the_rest():
    # (a program of 2,001 names listed every one: a 20 KB hint)
    src = "\n".join(f"y{i} = x * {i}" for i in range(30))
    err = raised(gradcalc.jacobian, src, at={"x": 1.0}, of=["nope"])
    check(err, "usage", "--of 'nope' is not a name in the program", None,
          "the named values are: x, y0, y1, y2, y3, y4, y5, y6, y7, y8, y9, y10, ... (19 more)")
    src = " + ".join(f"a{i}" for i in range(13))
    err = raised(gradcalc.evaluate, src, at={"zzz": 1.0})
    check(err, "usage", "'zzz' is not an input of the program", None,
          "the inputs are: " + ", ".join(f"a{i}" for i in range(12)) + ", ... (1 more)")


def test_unknown_of_did_you_mean():
    err = raised(gradcalc.grad, "a = x * y; a + 1", at={"x": 1.0, "y": 2.0}, of="aa")
    check(err, "usage", "--of 'aa' is not a name in the program", None, "did you mean 'a'?")


@pytest.mark.parametrize("fn", [gradcalc.grad, gradcalc.jacobian, gradcalc.hessian])
def test_unknown_wrt(fn):
    err = raised(fn, "a = x * y; a + 1", at={"x": 1.0, "y": 2.0}, wrt=["xx"])
    check(err, "usage", "--wrt 'xx' is not a name in the program", None, "did you mean 'x'?")


@pytest.mark.parametrize("fn, call", [
    (gradcalc.hessian, lambda src, at: gradcalc.hessian(src, at=at, wrt=["h"])),
    (gradcalc.jvp, lambda src, at: gradcalc.jvp(src, {"h": 1.0}, at=at)),
])
def test_intermediate_values_are_refused_where_only_inputs_make_sense(fn, call):
    err = raised(call, "h = x * y; h^2", {"x": 1.0, "y": 2.0})
    name = fn.__name__
    check(err, "usage", f"{name} differentiates with respect to inputs only; 'h' is an intermediate value",
          None, "use grad, jacobian or vjp for intermediate values")


def test_unconnected_error():
    err = raised(gradcalc.grad, "x + stop_gradient(w)", at={"x": 1.0, "w": 2.0}, unconnected="error")
    check(err, "usage", "'w' has no differentiable path to '_'", None,
          "remove it from --wrt, or use --unconnected zero")


def test_wrong_number_of_arguments():
    check(raised(gradcalc.evaluate, "sin()"), "usage", "sin(): missing a required argument: 'x'", (1, 1),
          "usage: sin(x)")
    check(raised(gradcalc.evaluate, "y = cos(1, 2)"), "usage", "cos(): too many positional arguments", (1, 5),
          "usage: cos(x)")


def test_an_unknown_keyword_is_named_at_itself_before_a_missing_argument():
    # Python's Signature.bind would say 'missing a required argument: 'v'' for NumPy's spelling
    check(raised(gradcalc.evaluate, "full(3, fill_value=2)"), "usage",
          "full(): got an unexpected keyword argument 'fill_value'", (1, 9), "usage: full(shape, v)")
    check(raised(gradcalc.evaluate, "y = sum(ones(3), axes=0)"), "usage",
          "sum(): got an unexpected keyword argument 'axes'", (1, 18),
          "did you mean 'axis'? (usage: sum(x, axis=None, keepdims=False))")
    # the builder a constructor takes is no parameter of the language's
    check(raised(gradcalc.evaluate, "zeros(3, builder=1)"), "usage",
          "zeros(): got an unexpected keyword argument 'builder'", (1, 10), "usage: zeros(shape)")


def test_a_scalar_mask_is_refused_as_an_index():
    # (NumPy would add an axis of length 0 or 1; gradcalc's masks select elements)
    for src, col in (("y = x * 1; y[x < 0] = 0; sum(y)", 16), ("y = x[x > 0]; y", 9)):
        check(raised(gradcalc.evaluate, src, at={"x": 1.0}), "shape",
              "a mask index needs at least one axis, but this condition is a scalar", (1, col),
              "choose between values with where(cond, a, b)")


def test_a_singular_matrix_near_the_point_fails_the_full_check():
    # A = 1e-320 I inverts (to inf), but the finite differences' steps reach a singular matrix:
    # the whole check was this error; those points' differences are now nan, which the search
    # at smaller steps tries to mend, and here the derivative itself is not finite
    r = gradcalc.check("sum(inv(A))", at={"A": [[1e-320, 0.0], [0.0, 1e-320]]})
    (res,) = r.results
    assert not res.ok and "non-finite derivative" in res.notes


def test_an_operation_failing_near_the_point_along_directions_is_a_value_error():
    # --directions does not search at smaller steps: a step that makes a positive definite
    # matrix (least eigenvalue 1e-6) indefinite is an error, which says where, and that the
    # point given is not at fault ("the matrix is not positive definite" alone blamed it)
    err = raised(gradcalc.check, "sum(cholesky(A))", at={"A": [[1, 0.999999], [0.999999, 1]]}, directions=1)
    check(err, "value", "cholesky: the matrix is not positive definite at a point near the one given", (1, 5),
          "finite differences and plots evaluate the program at nearby points too; move the point "
          "away from where it fails")


@pytest.mark.parametrize("src, at, kind, message", [
    ('y = var(x, ddof="a")', [1.0, 2.0], "value", "var(): ddof must be a number, got 'a'"),
    ("y = std(x, 0, 0, (2, -1))", [1.0, 2.0], "value", "std(): ddof must be a number, got (2, -1)"),
    ("y = sort(x, (1, 0))", [[1.0, 2.0], [3.0, 4.0]], "shape", "sort(): axis must be an integer, not (1, 0)"),
    ("y = argsort(x, (1, 0))", [[1.0, 2.0], [3.0, 4.0]], "shape", "argsort(): axis must be an integer, not (1, 0)"),
    ("y = repeat(x, (1, (2,)))", [1.0], "shape",
     "repeat(): repeats must be a non-negative integer or a tuple of them, got (1, (2,))"),
    # worded as the call's even though the message begins with "repeat" ('repeats'), and not
    # twice where it names the call already
    ("y = repeat(x, -1)", [1.0], "shape", "repeat(): repeats must be a non-negative integer or a tuple of them, got -1"),
    ("y = repeat(x, (1, 2))", [1.0], "shape", "repeat: 2 repeats for an axis of length 1"),
])
def test_static_arguments_of_the_wrong_kind_are_errors(src, at, kind, message):
    # (each stopped with 'internal error' before: a str or tuple reached NumPy's arithmetic)
    check(raised(gradcalc.evaluate, src, at={"x": at}), kind, message, (1, 5))


@pytest.mark.parametrize("src, x", [
    ("y = max(x, axis=())", np.zeros((0, 3))),        # max's kink test on an empty array
    ("U, s, V = svd(x)\ny = s", np.zeros((0, 3))),    # svd's sign-flip test with no rows
    ("Q, R = qr(x); R", np.zeros((2, 0))),
])
def test_check_of_a_kinked_or_factorised_empty_input_passes(src, x):
    # no element to perturb: an empty Jacobian, nothing to compare (an internal error before)
    assert gradcalc.check(src, at={"x": x}).ok


def test_vjp_cotangent_shape():
    err = raised(gradcalc.vjp, "x * x", [1.0, 2.0, 3.0], at={"x": [1.0, 2.0]})
    check(err, "shape", "the cotangent for '_' has shape (3,), but '_' has shape (2,)", None,
          "a cotangent has the output's shape (or is a scalar)")


# ==========================================================================
# The error object
# ==========================================================================


def test_error_str_has_label_line_and_column():
    err = raised(gradcalc.evaluate, "a = 1\nb = sine(a)")
    assert str(err) == "<expr>:2:5: unknown function 'sine'"
    assert err.source.label == "<expr>"
    assert err.source.line(2) == "b = sine(a)"


def test_parse_label_is_kept():
    err = raised(gradcalc.parse, "(1", "model.grad")
    assert str(err) == "model.grad:1:1: '(' is never closed"


def test_error_hierarchy():
    for cls in (SyntaxError_, NameError_, ShapeError, UsageError, ValueError_, LimitError):
        assert issubclass(cls, GradcalcError)
    assert gradcalc.GradcalcError is GradcalcError


@pytest.mark.parametrize("src, message, pos, hint", [
    # grad(f) of a function that gives two values or none names it (it said 'the function')
    ("def f(a) { return a, a }\ny = grad(f)(x)", "'f' gives 2 values; take them apart with a, b = f(...)",
     (2, 10), None),
    ("def f(a) { z = a }\ny = grad(f)(x)", "'f' ended without 'return', but its value is used here", (2, 10),
     "end its body with return ..."),
    # a negative argnum is refused as such (it said 'needs at least -4 positional argument')
    ("def f(a, b) = a*b\ny = grad(f, argnum=-5)(x, 3)", "grad's argnum must not be negative, not -5", (2, 20),
     "argnum=0 is f's first parameter"),
    # an output statement calling a function that ends without return (it said 'gives 0 values
    # ('f' returns several)', with the hint 'take them apart,  = f(...)')
    ("def f(a) { z = a }\nf(x)",
     "the output statement (line 2) calls 'f', which ended without 'return', so the program has no output",
     (2, 1), "end its body with return ..., or name the value to show with --of NAME"),
    # a huge index is written as a number, not in 301 digits
    ("y = ones(3)[x * 1e300]", "index 1e+300 is out of range for axis 0 with size 3", (1, 12),
     "its indices are 0 to 2 (or -3 to -1 from the end)"),
])
def test_function_and_index_errors_are_worded_for_what_was_written(src, message, pos, hint):
    check(raised(gradcalc.evaluate, src, at={"x": 1.0}), "usage" if "index" not in message else "shape",
          message, pos, hint)


@pytest.mark.parametrize("args", [
    ["grad", "x", "--of", "\x1b[2J\x1b[31mred", "--at", "x=1"],
    ["grad", "x", "--wrt", "a\x07b", "--at", "x=1"],
    ["grad", "x", "--at", "x=1", "--save", "/nonexistent/\x1b[31mf.json"],
    ["grad", "x", "--at", "\x1b[1mq=1"],
])
def test_control_characters_typed_on_the_command_line_are_shown_escaped(args):
    # a name or path from an option, repeated in an error, wrote its raw escape codes to the
    # terminal (clearing it, colouring it); it shows them as the program's own text does, \x1b
    r = run(*args)
    assert r.exit_code == 2
    assert not any(c in r.stderr for c in "\x1b\x07") and ("\\x1b" in r.stderr or "\\x07" in r.stderr)
