"""The Python API speaks its own words: errors name keyword arguments, never command-line
flags, and results carry the same JSON payload the command line writes."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

import gradcalc
from gradcalc.codec import to_json
from gradcalc.errors import GradcalcError

FLAG = re.compile(r"(?<![\w-])--[a-z]")

# Each call fails on an option given a wrong value; the CLI names these options by their flags.
MISUSES = [
    (lambda: gradcalc.grad("x*y", at={"x": 1.0, "y": 2.0}, wrt=["q"]), "wrt 'q' is not a name in the program", "q"),
    (lambda: gradcalc.grad("x*y", at={"x": 1.0, "y": 2.0}, of="q"), "of 'q' is not a name in the program", "q"),
    (lambda: gradcalc.grad("x*y", at={"x": 1.0, "y": 2.0}, unconnected="bogus"),
     "unconnected must be one of zero, none, error, not 'bogus'", None),
    (lambda: gradcalc.grad("a = x*y\nb = z", at={"x": 1.0, "y": 2.0, "z": 3.0}, of="a", unconnected="error"),
     "'z' has no differentiable path to 'a'", "z"),
    (lambda: gradcalc.grad("x*[1, 2]", at={"x": 1.0}), "grad needs a scalar output", "_"),
    (lambda: gradcalc.grad("x*[1, 2]", at={"x": 1.0}, sum=True, symbolic=True),
     "symbolic differentiates a scalar output; with sum, write sum(...)", None),
    (lambda: gradcalc.jacobian("x*2", at={"x": 1.0}, mode="bogus"), "mode must be auto, rev or fwd, not 'bogus'", None),
    (lambda: gradcalc.jacobian("a = x*2\nb = a*3", at={"x": 1.0}, wrt=["a"], mode="fwd"),
     "jacobian mode fwd differentiates with respect to inputs only; 'a' is an intermediate value", "a"),
    (lambda: gradcalc.vjp("a = x*2\nb = x*3", {"a": 1.0}, at={"x": 1.0}, of=["a", "b"]), "no cotangent for output 'b'", "b"),
    (lambda: gradcalc.vjp("h = x^2\nz = h*3", {"h": 1.0}, at={"x": 2.0}),  # (z is the output: SPEC §5)
     "cotangent 'h' is not an output: the output is 'z'", "h"),
    (lambda: gradcalc.vjp("a = x*2\nb = x*3", 1.0, at={"x": 1.0}, of=["a", "b"]),
     "with several of, give one cotangent NAME=VALUE for each", None),
    (lambda: gradcalc.evaluate("a = x*2\na + 1", at={"x": 1.0}, all=True, of=["a"]),
     "all shows every named value and of some of them: give one of the two", None),
    (lambda: gradcalc.jvp("x*y", {"q": 1.0}, at={"x": 1.0, "y": 2.0}), "tangent 'q' is not a name in the program", "q"),
    (lambda: gradcalc.vjp("x*2", 1j, at={"x": 1.0}), "the cotangent for '_' is not a number or a (rectangular) array", None),
    (lambda: gradcalc.vjp("y = x*[1, 2]", {"y": [1, [2]]}, at={"x": 1.0}),
     "the cotangent for 'y' is not a number or a (rectangular) array", None),
    (lambda: gradcalc.jvp("x*2", {"x": "abc"}, at={"x": 1.0}), "the tangent for 'x' is not a number or a (rectangular) array", None),
    (lambda: gradcalc.grad("x*2", at={"x": 1j}), "the value given for 'x' is not a number or a (rectangular) array", None),
    (lambda: gradcalc.hessian("x*[1, 2]", at={"x": 1.0}), "hessian needs a scalar output", "_"),
    (lambda: gradcalc.hessian("a = x*2\nb = a*a", at={"x": 1.0}, wrt=["a"]),
     "hessian differentiates with respect to inputs only", "a"),
]


@pytest.mark.parametrize("call, words, name", MISUSES)
def test_an_api_user_never_reads_a_flag(call, words, name):
    with pytest.raises(GradcalcError) as info:
        call()
    err = info.value
    for text in (str(err), err.message, err.hint or ""):
        assert not FLAG.search(text), text
    assert words in err.message
    assert err.name == name


def test_the_command_line_words_the_same_error_with_flags():
    from gradcalc.cli.errors import error_text
    with pytest.raises(GradcalcError) as info:
        gradcalc.grad("x*y", at={"x": 1.0, "y": 2.0}, wrt=["q"])
    assert info.value.message == "wrt 'q' is not a name in the program"
    assert "error: <expr>: --wrt 'q' is not a name in the program" in error_text(info.value)
    assert info.value.option == "wrt"


def test_results_carry_the_json_payload_of_their_command():
    r = gradcalc.grad("x^2*y", at={"x": 3.0, "y": 2.0})
    assert r.command == "grad"
    payload = r.to_json()
    assert list(payload) == ["command", "of", "at", "value", "gradient", "unconnected", "warnings"]
    assert json.loads(json.dumps(to_json(payload))) == {
        "command": "grad", "of": "_", "at": {"x": 3.0, "y": 2.0}, "value": 18.0, "gradient": {"x": 12.0, "y": 9.0},
        "unconnected": [], "warnings": []}
    jac = gradcalc.jacobian("y = [x*2, x^2]", at={"x": 3.0})
    assert jac.to_json()["jacobian"]["y"]["x"].tolist() == [2.0, 6.0]
    assert isinstance(gradcalc.evaluate("x", at={"x": np.ones(2)}).to_json()["values"]["_"], np.ndarray)


def test_gradients_are_arrays_of_their_own():
    # A rule may hand a cotangent on as it is; what the API returns must still be the caller's
    # to keep and to write into, as NumPy's functions return.
    r = gradcalc.grad("sum(x + y)", at={"x": np.ones(3), "y": np.ones(3)})
    assert not np.shares_memory(r["x"], r["y"])
    r["x"][0] = 5.0
    assert r["y"].tolist() == [1.0, 1.0, 1.0]  # d sum(x + y)/dy = 1
    r = gradcalc.grad("sum(x)", at={"x": np.ones(3)})  # (the seed of ones, broadcast)
    r["x"] += 1.0
    assert r["x"].tolist() == [2.0, 2.0, 2.0]
    ct = np.array([1.0, 2.0])
    r = gradcalc.vjp("b = x; b", ct, at={"x": np.zeros(2)})
    assert not np.shares_memory(r["x"], ct) and r["x"].tolist() == [1.0, 2.0]
    r["x"][:] = 0.0
    assert ct.tolist() == [1.0, 2.0]


def test_a_jvp_is_an_array_of_its_own():
    t = np.array([1.0, 2.0])
    r = gradcalc.jvp("b = x; b", {"x": t}, at={"x": np.zeros(2)})
    assert not np.shares_memory(r["_"], t) and r["_"].tolist() == [1.0, 2.0]
    r["_"][:] = 0.0
    assert t.tolist() == [1.0, 2.0]


@pytest.mark.parametrize("call", [lambda of: gradcalc.grad("u = x^2; v = x^3", at={"x": 1.0}, of=of),
                                  lambda of: gradcalc.hessian("u = x^2; v = x^3", at={"x": 1.0}, of=of),
                                  lambda of: gradcalc.jvp("u = x^2; v = x^3", {"x": 1.0}, at={"x": 1.0}, of=of)])
def test_one_output_asked_as_a_list_of_several_is_a_usage_error(call):
    with pytest.raises(gradcalc.GradcalcError, match="of names one output here, got 2"):
        call(["u", "v"])
    assert call(["v"]).of == "v"  # (a list of one is one output)


@pytest.mark.parametrize("call, message", [
    (lambda: gradcalc.evaluate("x + 1", at=[1, 2]), "at= is a dict of input name -> value, not [1, 2]"),
    (lambda: gradcalc.evaluate("x + 1", at="x=1"), "at= is a dict of input name -> value, not 'x=1'"),
    (lambda: gradcalc.evaluate("x + 1", at={1: 2}), "at= is a dict of input name -> value, not {1: 2}"),
    (lambda: gradcalc.grad("x * y", at={"x": 1, "y": 2}, wrt=5), "takes a name or a list of names, not 5"),
    (lambda: gradcalc.evaluate("x * y", at={"x": 1, "y": 2}, of=5), "takes a name or a list of names, not 5"),
    (lambda: gradcalc.evaluate(None), "a program is text (a str) or a parsed Program, not NoneType"),
    (lambda: gradcalc.parse(b"x"), "a program is text (a str) or a parsed Program, not bytes"),
])
def test_api_arguments_of_the_wrong_type_are_usage_errors(call, message):
    # (AttributeError and TypeError from deep inside before: a bug hunt's finds)
    with pytest.raises(gradcalc.errors.UsageError) as info:
        call()
    assert message in str(info.value)


_AT = {"x": 1.0}


@pytest.mark.parametrize("call, message", [
    (lambda: gradcalc.check("x^2", at=_AT, seed=1.5), "seed takes an integer, not 1.5"),
    (lambda: gradcalc.check("x^2", at=_AT, directions=1.5), "directions takes an integer, not 1.5"),
    (lambda: gradcalc.check("x^2", at=_AT, points=-0.0), "points takes an integer, not -0.0"),
    (lambda: gradcalc.check("x^2", at=_AT, directions=float("inf")), "directions takes an integer, not inf"),
    (lambda: gradcalc.check("x^2", at=_AT, points=np.array([1])), "points takes an integer, not array([1])"),
    (lambda: gradcalc.check("x^2", at=_AT, rtol="1"), "rtol takes a number, not '1'"),
    (lambda: gradcalc.check("x^2", at=_AT, atol=np.array([1e-3])), "atol takes a number, not array([0.001])"),
    (lambda: gradcalc.check("x^2", at=_AT, method=np.array(["central"])), "unknown method"),
    (lambda: gradcalc.check("x^2", at=_AT, label=np.array(["a"])), "label takes a text, not array(['a']"),
    (lambda: gradcalc.check("x^2", at=_AT, expect=1), "expect takes a grad or jacobian result's JSON object"),
    (lambda: gradcalc.jacobian("x^2", at=_AT, mode=np.array(["rev"])), "mode must be auto, rev or fwd"),
    (lambda: gradcalc.grad("x^2", at=_AT, unconnected=np.array(["zero"])), "unconnected must be one of"),
])
def test_api_options_of_the_wrong_type_are_usage_errors(call, message):
    # (TypeError, ValueError 'truth value ... ambiguous', OverflowError or AttributeError before: a bug hunt's finds)
    with pytest.raises(gradcalc.errors.UsageError) as info:
        call()
    assert message in str(info.value)


@pytest.mark.parametrize("call, message", [
    # the API hunt's finds: IndexError, TypeError, or accepted (max_steps=1.5, -5) before
    (lambda: gradcalc.vjp("x*2", {}, at=_AT), "cotangent names no output"),
    (lambda: gradcalc.vjp("x*2", 1.0, of=3, at=_AT), "of takes a name or a list of names, not 3"),
    (lambda: gradcalc.vjp("x*2", 1.0, of=[], at=_AT), "of names no output"),
    (lambda: gradcalc.jvp("x*2", None, at=_AT), "tangent is a dict of input name -> value, not None"),
    (lambda: gradcalc.jvp("x*2", "x", at=_AT), "tangent is a dict of input name -> value, not 'x'"),
    (lambda: gradcalc.jvp("x*2", [1, 1], at=_AT), "tangent is a dict of input name -> value, not [1, 1]"),
    (lambda: gradcalc.grad("x*2", at=_AT, max_steps=None), "max_steps must be a positive integer, not None"),
    (lambda: gradcalc.grad("x*2", at=_AT, max_steps=1.5), "max_steps must be a positive integer, not 1.5"),
    (lambda: gradcalc.grad("x*2", at=_AT, max_steps=-5), "max_steps must be a positive integer, not -5"),
    (lambda: gradcalc.evaluate("x*2", at=_AT, max_elements="10"), "max_elements must be a positive integer, not '10'"),
    # the fuzz hunt's: a bare TypeError or OverflowError from check and graph before
    (lambda: gradcalc.check("x*2", at=_AT, max_steps="a"), "max_steps must be a positive integer, not 'a'"),
    (lambda: gradcalc.check("x*2", at=_AT, max_elements="a"), "max_elements must be a positive integer, not 'a'"),
    (lambda: gradcalc.graph("x*2", at=_AT, max_steps="a"), "max_steps must be a positive integer, not 'a'"),
    (lambda: gradcalc.graph("x*2", at=_AT, max_elements=0), "max_elements must be a positive integer, not 0"),
    (lambda: gradcalc.check("x*2", at=_AT, rtol=10 ** 400), "rtol must be a finite non-negative number, not 1000"),
    (lambda: gradcalc.check("x*2", at=_AT, atol=-10 ** 400), "atol must be a finite non-negative number, not -1000"),
    (lambda: gradcalc.grad("if x > 5 { h = x*2 }\nz = x^2", at={"x": 2.0}, wrt="h"),
     "wrt 'h' has no value: it is assigned at line 1, column 12, which did not run at this point"),
])
def test_api_arguments_and_limits_of_the_wrong_kind_are_usage_errors(call, message):
    with pytest.raises(gradcalc.errors.UsageError) as info:
        call()
    assert message in str(info.value)


def test_at_values_are_held_to_max_elements_as_on_the_command_line():
    with pytest.raises(gradcalc.errors.LimitError, match="the value given for 'x' has shape .11,., 11 elements, "
                                                         "more than max_elements=10"):
        gradcalc.evaluate("x", at={"x": np.zeros(11)}, max_elements=10)
    assert gradcalc.evaluate("x", at={"x": np.zeros(10)}, max_elements=10)["_"].shape == (10,)


@pytest.mark.parametrize(("src", "mode", "at"), [
    ("sum(x)", "rev", {"x": np.arange(3.0)}),  # its rows of ones were a read-only broadcast view
    ("mean(x)", "rev", {"x": np.arange(3.0)}),
    ("stop_gradient(x) + y", "fwd", {"x": np.arange(3.0), "y": 1.0}),
])
def test_jacobian_blocks_are_the_callers_own_writable_arrays(src, mode, at):
    blocks = gradcalc.jacobian(src, at=at, mode=mode)["_"]
    for block in blocks.values():
        block[...] = 7.0  # (raised "assignment destination is read-only")
        assert (block == 7.0).all()


@pytest.mark.parametrize("value", [10**400, [1, 10**400], "1", ["1", "2"], np.array([1 + 2j]), None, [None, 1]])
def test_at_values_that_are_not_real_numbers_are_value_errors(value):
    # (OverflowError; strings read as numbers; complex arrays losing their imaginary part with a
    # ComplexWarning; None as nan: before)
    with pytest.raises(gradcalc.errors.ValueError_, match="is not a number or a .rectangular. array of numbers"):
        gradcalc.grad("sum(x*x)", at={"x": value})


def test_at_values_that_are_numbers_of_any_kind_are_float64():
    # a Python int past int64's range (an object array to NumPy), bools, NumPy scalars of other widths
    for value, want in (([1, 2**70], [1.0, 2.0**70]), ([True, 2], [1.0, 2.0]), (np.float32(2), 2.0), (3, 3.0)):
        got = gradcalc.evaluate("y = x * 1", at={"x": value})["y"]
        assert got.dtype == np.float64 and np.array_equal(got, want)


def _nested(depth: int) -> list:
    v = [1.0]
    for _ in range(depth):
        v = [v]
    return v


@pytest.mark.parametrize("value, shown", [
    (_nested(5000), "[[[[...]]]]"),  # (its full repr raised RecursionError)
    ([[1.0, 2.0]] * 10**5 + [[1.0]], "[[1.0, 2.0], [1.0, 2.0], [1.0, 2.0], [1.0, 2.0], ...]"),
])
def test_a_bad_value_is_shown_cut_short(value, shown):
    """The error quotes the first levels and elements of a bad value, made without its whole repr."""
    with pytest.raises(gradcalc.errors.ValueError_) as err:
        gradcalc.grad("sum(x)", at={"x": value})
    assert str(err.value).endswith(f"is not a number or a (rectangular) array of numbers: {shown}")
