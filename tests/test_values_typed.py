"""Values typed on the command line (SPEC §3: --at, --cotangent, --tangent take constant
expressions): one that comes out nan or inf without being written so is refused, as a values
file's 1e400 is (README, "Hostile input"), where it came out of range silently.  The premise of
each case, that float64 makes the value non-finite, is NumPy's; the values that stay allowed
are compared with NumPy's arithmetic on them."""
from __future__ import annotations

import json

import numpy as np
import pytest

from cli_run import ok, user_error

HINT_OP = ("hint: write nan or inf if that is meant: a value given on the command line holds them only "
           "as written, as a values file does")
HINT_BIG = ("hint: write inf if that is meant: a value given on the command line holds it only as "
            "written, as a values file does")

with np.errstate(all="ignore"):
    PREMISES = {  # what float64 makes of each text, by NumPy
        "1e400": np.float64(float("1e400")),
        "log(-1)": np.log(np.float64(-1)),
        "1/0": np.float64(1) / np.float64(0),
        "[1, -1e400]": -np.float64(float("1e400")),
        "ones(2)*1e308*10": np.ones(2) * 1e308 * 10,
        "sqrt(-1)": np.sqrt(np.float64(-1)),
        "min(exp(1000), 1)": np.exp(np.float64(1000)),  # (inf on the way, though min hides it)
    }


def test_the_premises_are_non_finite_in_float64():
    for text, value in PREMISES.items():
        assert not np.all(np.isfinite(value)), text


FORMS = [  # (command line, first line of the error, caret line)
    (["eval", "x*2", "--at", "x=1e400"],
     "error: --at x:1:1: the number 1e400 is beyond float64's range (about 1.8e308)", "  ^", HINT_BIG),
    (["eval", "x*2", "--at", "x=log(-1)"], "error: --at x:1:1: 'log' produced nan in this value", "  ^", HINT_OP),
    (["eval", "x*2", "--at", "x=1/0"], "error: --at x:1:2: '/' produced inf in this value", "   ^", HINT_OP),
    (["eval", "x*2", "--at", "y=1,x=[1, -1e400]"],
     "error: --at x:1:6: the number 1e400 is beyond float64's range (about 1.8e308)", "       ^", HINT_BIG),
    (["eval", "sum(x)", "--at", "x=ones(2)*1e308*10"],
     "error: --at x:1:14: '*' produced inf in this value", "               ^", HINT_OP),
    (["eval", "x*2", "--at", "x=min(exp(1000), 1)"],
     "error: --at x:1:5: 'exp' produced inf in this value", "      ^", HINT_OP),
    (["vjp", "x*2", "--at", "x=1", "--cotangent", "1e400"],
     "error: --cotangent:1:1: the number 1e400 is beyond float64's range (about 1.8e308)", "  ^", HINT_BIG),
    (["vjp", "x*2", "--at", "x=1", "--cotangent", "log(-1)"],
     "error: --cotangent:1:1: 'log' produced nan in this value", "  ^", HINT_OP),
    (["vjp", "y = x*2", "--at", "x=1", "--cotangent", "y=1/0"],
     "error: --cotangent y:1:2: '/' produced inf in this value", "   ^", HINT_OP),
    (["jvp", "x*2", "--at", "x=1", "--tangent", "x=sqrt(-1)"],
     "error: --tangent x:1:1: 'sqrt' produced nan in this value", "  ^", HINT_OP),
    (["jvp", "x*2", "--at", "x=1", "--tangent", "x=1e400"],
     "error: --tangent x:1:1: the number 1e400 is beyond float64's range (about 1.8e308)", "  ^", HINT_BIG),
]


@pytest.mark.parametrize("args, first, caret, hint", FORMS, ids=[" ".join(f[0][3:]) for f in FORMS])
def test_a_typed_value_that_comes_out_non_finite_is_refused(args, first, caret, hint):
    r = user_error(*args)
    lines = r.stderr.splitlines()
    assert lines[0] == first
    assert lines[2] == caret
    assert lines[3] == hint


def test_the_refusal_is_a_value_error_in_json():
    r = user_error("grad", "x^2", "--at", "x=log(-1)", "-f", "json")
    doc = json.loads(r.stdout)
    assert doc["error"]["kind"] == "value"
    assert doc["error"]["message"] == "'log' produced nan in this value"
    assert (doc["error"]["line"], doc["error"]["column"]) == (1, 1)


ALLOWED = {  # text -> its value, by NumPy
    "inf": np.array([np.inf]), "-inf": np.array([-np.inf]), "[nan, 1]": np.array([np.nan, 1.0]),
    "inf*0": np.array([np.nan]), "1e-400": np.array([0.0]), "[1e308, -1e308]": np.array([1e308, -1e308]),
}


@pytest.mark.parametrize("text", ALLOWED)
def test_non_finite_values_written_as_such_and_tiny_ones_stay_values(text):
    # inf and nan written out say it on purpose (as the constant inf does in a program); an
    # operation that only carries an operand's inf or nan on makes nothing new (README: warnings)
    r = ok("eval", "x*2", "--at", f"x={text}", "-f", "plain")
    with np.errstate(all="ignore"):
        expected = ALLOWED[text] * 2
    got = np.array([float(v) for v in r.stdout.split()])
    np.testing.assert_array_equal(got, expected)


# -- empty items: SPEC §3's NAME=VALUE[,NAME=VALUE...] has none -----------------------------

SEPARATE = "hint: separate NAME=VALUE items by one comma, with none at either end: {what} x=1.5,y=[1, 2]"


@pytest.mark.parametrize("args, what, item, where", [
    (["eval", "x*10 + y", "--at", "x=1,,", "--at", "y=2"], "--at", "x=1,,", "between two commas"),
    (["eval", "x*10 + y", "--at", ",x=1", "--at", "y=2"], "--at", ",x=1", "at its start"),
    (["eval", "x*10 + y", "--at", "x=1,,y=2"], "--at", "x=1,,y=2", "between two commas"),
    (["eval", "x*10 + y", "--at", "x=1,y=2,"], "--at", "x=1,y=2,", "at its end"),
    (["eval", "input x = 1; x*10 + y", "--at", " , y=2"], "--at", " , y=2", "at its start"),  # (x's default)
    (["jvp", "x*2", "--at", "x=1", "--tangent", "x=1,"], "--tangent", "x=1,", "at its end"),
    (["vjp", "a = x*2", "--at", "x=1", "--cotangent", "a=1,"], "--cotangent", "a=1,", "at its end"),
], ids=["double", "leading", "between", "trailing", "default-kept", "tangent", "cotangent"])
def test_an_empty_item_between_commas_is_a_usage_error(args, what, item, where):
    # they were skipped silently: "$A,y=2" with $A empty lost x's value, or took x's default
    r = user_error(*args)
    assert r.stderr.splitlines() == [f"error: {what} '{item}' has an empty item {where}",
                                     SEPARATE.format(what=what)]


@pytest.mark.parametrize("item", ["", "  "])
def test_an_empty_at_is_a_usage_error(item):
    r = user_error("eval", "input x = 1; x*10", "--at", item)
    assert r.stderr.splitlines() == [f"error: --at '{item}' gives no NAME=VALUE",
                                     "hint: give one (--at x=1.5,y=[1, 2]), or leave --at out"]


def test_commas_inside_brackets_and_spaces_after_commas_still_separate_as_before():
    r = ok("eval", "sum(x)*10 + y", "--at", "x=[1, 2], y=3", "-f", "plain")
    assert float(r.stdout) == float(np.sum([1.0, 2.0]) * 10 + 3)
