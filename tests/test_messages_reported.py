"""Error messages a tester found wrong or unhelpful: kron's size limit named the shape of an
intermediate, tensordot's negative axes count asked for "at least -1 axes", grad(grad) said an
input 'grad' had no value, and x[[true, false]] gathered [x[1], x[0]] where NumPy selects x[0].
Shapes and values expected come from NumPy."""
from __future__ import annotations

import numpy as np
import pytest

import gradcalc
from gradcalc.cli.errors import flag
from gradcalc.errors import GradcalcError

from cli_run import user_error


def raised(fn, *args, **kwargs) -> GradcalcError:
    with pytest.raises(GradcalcError) as info:
        fn(*args, **kwargs)
    return info.value


def worded(err: GradcalcError):
    message, hint = err.worded(flag)
    return err.kind, message, (err.pos.line, err.pos.col), hint


# -- kron over --max-elements names the product's shape --------------------------------

@pytest.mark.parametrize("a, b, limit", [
    (np.ones(3), np.ones(2), 5),
    (np.ones((3, 1)), np.ones((2, 2)), 11),
    (np.ones((2, 3)), np.ones(4), 23),  # (b's one axis lines up with a's last)
])
def test_kron_over_the_limit_names_the_shape_it_would_make(a, b, limit):
    shape = np.kron(a, b).shape
    err = raised(gradcalc.evaluate, "kron(a, b)", at={"a": a, "b": b}, max_elements=limit)
    dims = "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"
    assert worded(err)[:3] == ("limit", f"kron(): array of shape {dims} has {int(np.prod(shape))} elements, "
                                        f"more than --max-elements={limit}", (1, 1))


def test_kron_within_the_limit_is_numpys():
    a, b = np.array([1.0, 2.0, 3.0]), np.array([[1.0, -1.0], [0.5, 2.0]])
    got = gradcalc.evaluate("kron(a, b)", at={"a": a, "b": b}, max_elements=12)
    np.testing.assert_array_equal(next(iter(got.values())), np.kron(a, b))


# -- tensordot's axes count -------------------------------------------------------------

@pytest.mark.parametrize("axes", [-1, -3])
def test_a_negative_tensordot_axes_count_is_refused_in_its_own_words(axes):
    err = raised(gradcalc.evaluate, f"tensordot(x, x, axes={axes})", at={"x": np.ones(3)})
    assert worded(err) == (
        "shape", f"tensordot(): axes={axes} is a negative number of axes: an integer axes is how many axes are "
                 f"summed (a's last with b's first)", (1, 1),
        "axes=0 is the outer product; to name the axes summed, give two tuples: axes=((-1,), (0,))")


def test_tensordot_axes_past_the_arrays_axes_keeps_its_message():
    err = raised(gradcalc.evaluate, "tensordot(x, x, axes=2)", at={"x": np.ones(3)})
    assert worded(err)[1] == "tensordot(): axes=2 needs both arrays to have at least 2 axes"


@pytest.mark.parametrize("axes", [0, 1])
def test_tensordot_counts_zero_and_more_as_numpy_does(axes):
    x = np.array([1.0, 2.0, 3.0])
    got = gradcalc.evaluate(f"tensordot(x, x, axes={axes})", at={"x": x})
    np.testing.assert_array_equal(next(iter(got.values())), np.tensordot(x, x, axes=axes))


# -- grad(grad): a derivative takes a function of the program --------------------------

@pytest.mark.parametrize("src, pos, message, hint", [
    ("def f(x) = x^2; grad(grad)(x)", (1, 22), "grad takes a function defined with def, not 'grad' itself",
     "for a second derivative, define the first: def df(t) = grad(f)(t), then grad(df)(x)"),
    ("grad(grad)(x)", (1, 6), "grad takes a function defined with def, not 'grad' itself",
     "for a second derivative, define the first: def df(t) = grad(f)(t), then grad(df)(x)"),
    ("def energy(q) = q^4; jacobian(grad)(x)", (1, 31), "jacobian takes a function defined with def, not "
     "'grad' itself", "for a second derivative, define the first: def denergy(t) = grad(energy)(t), then "
     "jacobian(denergy)(x)"),
    ("def fun(t) = t^3; grad(fn)(x)", (1, 24), "grad takes a function defined with def; 'fn' is not a function "
     "of the program", "did you mean 'fun'?"),
])
def test_grad_of_what_is_not_a_function_of_the_program_says_so(src, pos, message, hint):
    # these read the name as an input, and said "input 'grad' has no value"
    err = raised(gradcalc.evaluate, src, at={"x": 1.0})
    assert worded(err) == ("name", message, pos, hint)


def test_the_second_derivative_the_hint_suggests_is_the_closed_form():
    # d2/dx2 of x^4 is 12 x^2
    got = gradcalc.evaluate("def energy(q) = q^4; def denergy(t) = grad(energy)(t); grad(denergy)(x)",
                            at={"x": 1.5})
    assert float(next(iter(got.values()))) == pytest.approx(12 * 1.5**2, rel=1e-15)


def test_an_input_named_grad_is_still_an_input():
    got = gradcalc.evaluate("grad * 2", at={"grad": 3.0})
    assert float(next(iter(got.values()))) == 6.0


def test_the_command_line_shows_the_grad_error_with_a_caret():
    r = user_error("grad", "def f(x) = x^2; grad(grad)(x)", "--at", "x=1")
    assert r.stderr.splitlines() == [
        "error: <expr>:1:22: grad takes a function defined with def, not 'grad' itself",
        "  def f(x) = x^2; grad(grad)(x)",
        "                       ^",
        "hint: for a second derivative, define the first: def df(t) = grad(f)(t), then grad(df)(x)",
    ]


# -- true and false in an index -----------------------------------------------------------

BOOLEAN_INDEX = ("true and false are not indices: they serve keyword arguments (keepdims=true)",
                 "select with a mask made by a comparison (x[x > 0], x[arange(len(x)) < 1]), or choose between "
                 "values with where(cond, a, b)")


@pytest.mark.parametrize("src, pos", [
    ("x[[true, false]]", (1, 3)),
    ("x[true]", (1, 3)),
    ("x[false, 0]", (1, 3)),
    ("x[0, [[false], [true]]]", (1, 6)),
    ("z = x * 1; z[[true, false]] = 5; z", (1, 14)),
    ("z = x * 1; z[[1, true]] += 5; z", (1, 14)),
    # through a name, a copy of it, and in an update (they gathered as the literal did)
    ("m = [true, false]; x[m]", (1, 22)),
    ("m = [true, false]; n = m; z = x * 1; z[n] = 5; z", (1, 40)),
    # a scalar true or false through a name (it was the constant 1 shares, and selected x[1]), a
    # copy, a loop's assignment, a call's argument, an update
    ("m = true; x[m]", (1, 13)),
    ("m = false; n = m; x[n, 0]", (1, 21)),
    ("m = 0\nfor i in range(2) {\n  m = true\n}\nx[m]", (5, 3)),
    ("def f(m) {\n  return x[m]\n}\nf(true)", (2, 12)),
    ("m = true; z = x * 1; z[m] = 5; z", (1, 24)),
])
def test_booleans_in_an_index_are_refused(src, pos):
    # NumPy would select with them as a mask (x[[True, False]] is x[:1]); they gathered x[1], x[0]
    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    err = raised(gradcalc.evaluate, src, at={"x": x})
    assert worded(err) == ("shape", BOOLEAN_INDEX[0], pos, BOOLEAN_INDEX[1])


def test_the_masks_the_hint_suggests_select_as_numpys_boolean_index():
    x = np.array([1.0, 2.0, 3.0])
    for src, mask in [("x[x > 1.5]", x > 1.5), ("x[arange(len(x)) < 1]", np.array([True, False, False]))]:
        got = gradcalc.evaluate(src, at={"x": x})
        np.testing.assert_array_equal(next(iter(got.values())), x[mask])


def test_numbers_and_arithmetic_on_booleans_still_index():
    # 1 and true are separate constants now: the number 1 still indexes, as does true + 0
    x = np.array([1.0, 2.0, 3.0])
    got = gradcalc.evaluate("a = true\nb = 1\nx[b] + x[a + 0] + x[1] + sum(x, keepdims=true)[0]", at={"x": x})
    assert list(got.values())[-1] == 2.0 + 2.0 + 2.0 + 6.0


def test_integer_array_literals_still_gather():
    x = np.array([1.0, 2.0, 3.0])
    got = gradcalc.evaluate("x[[2, 0, 0]]", at={"x": x})
    np.testing.assert_array_equal(next(iter(got.values())), x[[2, 0, 0]])
