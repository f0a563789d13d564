"""Issue 16's gather, split, mask and constructor built-ins: split, array_split, one_hot,
segment_sum, any, all, full, zeros_like, ones_like, full_like and linspace.

Values against NumPy (or a loop written here), derivatives through the one checker
(``fdcheck``: reverse and forward mode, their batched passes, VJP and JVP against central
differences) and against closed forms, and every user error through the command line.
"""
from __future__ import annotations

import re
import zlib

import numpy as np
import pytest

import gradcalc
from gradcalc.builtins import FUNCTIONS

import escapes
from cli_run import ok, user_error
from fdcheck import check_hessian, check_program


def _segment_sum(data, ids, n):
    """unsorted_segment_sum by a plain loop (the reference, independent of numpy.add.at)."""
    ids = np.asarray(ids)
    out = np.zeros((n,) + data.shape[ids.ndim:])
    for pos in np.ndindex(ids.shape):
        out[int(ids[pos])] += data[pos]
    return out


def _np_split_product(x):
    a, b = np.split(x, 2)
    return a * b + a


def _rng_for(text):
    return np.random.default_rng(zlib.crc32(text.encode()))


# (program, NumPy reference, input shapes)
CASES = [
    ("a, b = split(x, 2); a * b + a", _np_split_product, {"x": (4,)}),
    ("a, b = split(x, 2, axis=1); a / (2 + b * b)",
     lambda x: np.split(x, 2, axis=1)[0] / (2 + np.split(x, 2, axis=1)[1] ** 2), {"x": (3, 4)}),
    ("a, b, c = split(x, (1, -1), axis=-1); sum(a) * c - b[..., 0:1]",
     lambda x: (lambda a, b, c: np.sum(a) * c - b[..., 0:1])(*np.split(x, (1, -1), axis=-1)), {"x": (2, 5)}),
    ("a, b, c, d = split(x, [3, 1, 9]); concat(a, c) * 2 + sum(b) + sum(d)",  # unsorted, past the end
     lambda x: (lambda a, b, c, d: np.concatenate([a, c]) * 2 + np.sum(b) + np.sum(d))(*np.split(x, [3, 1, 9])),
     {"x": (4,)}),
    ("a, = split(x, 1, axis=0); a * x", lambda x: np.split(x, 1)[0] * x, {"x": (2, 3)}),
    ("a, b, c = array_split(x, 3); concat(a * 3, b * c[0], c)",
     lambda x: (lambda a, b, c: np.concatenate([a * 3, b * c[0], c]))(*np.array_split(x, 3)), {"x": (7,)}),
    ("segment_sum(x, [2, 0, 2, 1, 2], 4)", lambda x: _segment_sum(x, [2, 0, 2, 1, 2], 4), {"x": (5,)}),
    ("segment_sum(x * x, [1, 1, 0], 2)", lambda x: _segment_sum(x * x, [1, 1, 0], 2), {"x": (3, 2)}),
    ("segment_sum(x, [[0, 2], [2, 2]], 3)", lambda x: _segment_sum(x, [[0, 2], [2, 2]], 3), {"x": (2, 2, 3)}),
    ("segment_sum(x, argmax(x, axis=1), 3)", lambda x: _segment_sum(x, np.argmax(x, axis=1), 3), {"x": (4, 3)}),
    ("x * one_hot([0, 2, 1], 3)", lambda x: x * np.eye(3)[[0, 2, 1]], {"x": (3, 3)}),
    ("sum(one_hot([[1], [0]], 2) * x, axis=-1)", lambda x: np.sum(np.eye(2)[[[1], [0]]] * x, axis=-1), {"x": (2, 2)}),
    ("linspace(a, b, 5)", lambda a, b: np.linspace(a, b, 5), {"a": (), "b": ()}),
    ("linspace(a, b, 4, endpoint=false)", lambda a, b: np.linspace(a, b, 4, endpoint=False), {"a": (), "b": ()}),
    ("linspace(a, b, 1) + linspace(b, a, 2)", lambda a, b: np.linspace(a, b, 1) + np.linspace(b, a, 2),
     {"a": (), "b": ()}),
    ("linspace(a, b, 3)", lambda a, b: np.linspace(a, b, 3), {"a": (2,), "b": (3, 1)}),
    ("linspace(a, 2.5, n=4)", lambda a: np.linspace(a, 2.5, num=4), {"a": (2, 1)}),
    ("linspace(a, b, 3, axis=-1)", lambda a, b: np.linspace(a, b, 3, axis=-1), {"a": (2,), "b": ()}),
    ("x * full_like(x, 2.5) + ones_like(x) * zeros_like(x) - full((2, 3), 1.5) * x",
     lambda x: x * 2.5 - 1.5 * x, {"x": (2, 3)}),
    ("where(any(x > 0.5, axis=0), x, -x) + all(x > -1, axis=1, keepdims=true) * x",
     lambda x: np.where(np.any(x > 0.5, axis=0), x, -x) + np.all(x > -1, axis=1, keepdims=True) * x,
     {"x": (3, 4)}),
    ("x * any(x) + x * all(x, axis=(0, 1))", lambda x: x * np.any(x) + x * np.all(x, axis=(0, 1)), {"x": (2, 2)}),
]


NEW_BUILTINS = ["split", "array_split", "one_hot", "segment_sum", "any", "all", "full", "zeros_like",
                "ones_like", "full_like", "linspace"]


def test_every_builtin_of_this_file_is_a_case():
    used = {name for src, _, _ in CASES for name in re.findall(r"\b([a-z_0-9]+)\(", src)}
    assert set(NEW_BUILTINS) <= set(FUNCTIONS) and set(NEW_BUILTINS) <= used


def _at(src, shapes):
    rng = _rng_for(src)
    return {k: rng.uniform(-2.0, 2.0, s) for k, s in shapes.items()}


@pytest.mark.parametrize("src, ref, shapes", CASES, ids=[c[0] for c in CASES])
def test_values_and_derivatives(src, ref, shapes):
    report = check_program(src, _at(src, shapes), ref=ref)
    assert report.ok, f"{src}\n{report}"


@pytest.mark.parametrize("src, shapes", [
    ("a, b = split(x, 2); sum(sin(a * b))", {"x": (4,)}),
    ("sum(sin(segment_sum(x * x, [1, 0, 1], 2)))", {"x": (3, 2)}),
    ("sum(sin(linspace(a, b, 4) * b))", {"a": (), "b": ()}),
])
def test_second_derivatives(src, shapes):
    report = check_hessian(src, _at(src, shapes))
    assert report.ok, f"{src}\n{report}"


# ==========================================================================
# Closed forms
# ==========================================================================

def _jacobian(src, at, mode):
    res = gradcalc.jacobian(src, at=at, mode=mode)
    return res[res.of[0]]


@pytest.mark.parametrize("mode", ["rev", "fwd"])
def test_linspace_jacobian_is_its_weights(mode):
    # y_i = a + i (b - a) / (n - 1): dy_i/da = 1 - i / (n - 1), dy_i/db = i / (n - 1)
    jac = _jacobian("linspace(a, b, 5)", {"a": -1.0, "b": 3.0}, mode)
    assert jac["a"].tolist() == [1.0, 0.75, 0.5, 0.25, 0.0]
    assert jac["b"].tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]


@pytest.mark.parametrize("mode", ["rev", "fwd"])
def test_segment_sum_jacobian_is_the_membership(mode):
    ids = [2, 0, 2, 1]
    jac = _jacobian(f"segment_sum(x, {ids}, 3)", {"x": np.arange(4.0)}, mode)["x"]
    assert jac.tolist() == [[float(i == k) for i in ids] for k in range(3)]


def test_segment_sum_gradient_is_the_gather_of_the_cotangent():
    # d/d data of sum(w * segment_sum(data, ids, 3)) is w[ids] (row by row)
    w = np.array([[1.0, -2.0], [3.0, 4.0], [5.0, 0.5]])
    g = gradcalc.grad(f"sum({w.tolist()} * segment_sum(d, [2, 0, 2], 3))", at={"d": np.ones((3, 2))})["d"]
    assert g.tolist() == w[[2, 0, 2]].tolist()


def test_segment_sum_of_an_empty_segment_and_of_no_rows():
    assert gradcalc.evaluate("segment_sum(x, [0, 0], 3)", at={"x": [1.5, 2.0]})["_"].tolist() == [3.5, 0.0, 0.0]
    assert gradcalc.evaluate("segment_sum(zeros((0, 2)), zeros(0), 2)")["_"].tolist() == [[0.0, 0.0]] * 2


def test_split_gradient_lands_in_each_part():
    # out = 2 sum(a) + 3 sum(b) + 5 sum(c) over the parts [0:1], [1:4], [4:6]
    g = gradcalc.grad("a, b, c = split(x, (1, 4)); 2 * sum(a) + 3 * sum(b) + 5 * sum(c)",
                      at={"x": np.zeros(6)})["x"]
    assert g.tolist() == [2.0, 3.0, 3.0, 3.0, 5.0, 5.0]


def test_constants_and_masks_are_unconnected():
    values = {"x": np.array([1.0, -2.0]), "y": np.array([0.0, 1.0])}
    for src in ["one_hot(y, 2) * 1", "zeros_like(x) + ones_like(y) + full_like(x, 3)",
                "any(x > 0) + all(y, axis=0) * 1", "segment_sum(ones(2), y, 2)"]:
        at = {k: v for k, v in values.items() if k in src}
        res = gradcalc.jacobian(src, at=at)
        assert sorted(res.unconnected) == sorted(at), src


def test_any_and_all_follow_numpy_on_nan_and_empty():
    x = np.array([np.nan, 0.0])
    assert gradcalc.evaluate("[any(x), all(x), any(x[1:]), all(x[:1])]", at={"x": x})["_"].tolist() == \
        [1.0, 0.0, 0.0, 1.0]
    assert gradcalc.evaluate("[any(zeros(0)), all(zeros(0))]")["_"].tolist() == [0.0, 1.0]


def test_any_and_all_serve_conditions_and_masks():
    src = "if any(x > 2) { y = x[all(x > 0) and (x > 1)] } else { y = -x }\ny"
    assert gradcalc.evaluate(src, at={"x": [1.0, 3.0, 1.5]})["_"].tolist() == [3.0, 1.5]
    assert gradcalc.evaluate(src, at={"x": [1.0, 2.0]})["_"].tolist() == [-1.0, -2.0]


def test_one_hot_values():
    got = gradcalc.evaluate("one_hot(y, 4)", at={"y": [[3.0, 0.0], [1.0, 1.0]]})["_"]
    assert got.shape == (2, 2, 4)
    assert got.tolist() == np.eye(4)[[[3, 0], [1, 1]]].tolist()


def test_linspace_keeps_numpy_values_and_constant_use():
    for args in [(0.0, 1.0, 7), (-3.0, 1e-3, 11), (2.0, 2.0, 3), (0.1, 0.7, 2)]:
        got = gradcalc.evaluate(f"linspace({args[0]!r}, {args[1]!r}, {args[2]})")["_"]
        assert got.tolist() == np.linspace(*args).tolist()
    assert ok("eval", "x", "--at", "x=linspace(0, 1, 3)", "-f", "plain").stdout.split() == ["0", "0.5", "1"]


def test_full_values():
    assert gradcalc.evaluate("full((2, 1), -1.5)")["_"].tolist() == [[-1.5], [-1.5]]
    assert gradcalc.evaluate("full(3, pi)")["_"].tolist() == [np.pi] * 3


# ==========================================================================
# User errors: exit 2, a message, no traceback
# ==========================================================================

@pytest.mark.parametrize("src, message", [
    ("a, b = split(x, 4)", "split(): an axis of length 6 does not split into 4 equal sections"),
    ("a, b = split(x, 0)", "split(): the number of sections must be positive, got 0"),
    ("a, b = array_split(x, 10001)", "array_split(): 10001 sections are more than the 10000 a split gives"),
    ("a, b = split(x, 1.5)", "split(): the number of sections must be an integer, not 1.5"),
    ("a, b = split(x, (1, 2.5))", "split(): a split index must be an integer, not 2.5"),
    ("a, b = split(x, 2, axis=1)", "split(): axis 1 is out of range for an array of dimension 1"),
    ("a, b = split(x, 3)", "'split' gives 3 values, but 2 names are assigned"),
    ("split(x, 2) + 1", "'split' gives 2 values; take them apart with a, b = split(...)"),
    ("one_hot(x, 6)", "one_hot(): labels must hold integers"),
    ("one_hot(floor(x), 2)", "one_hot(): labels holds 3, out of range for n=2 (ids go from 0 to n - 1)"),
    ("one_hot(floor(x) - 1, 5)", "one_hot(): labels holds -1, out of range for n=5 (ids go from 0 to n - 1)"),
    ("one_hot(x * 1e300, 2)", "one_hot(): labels holds 3.5e+300, out of range for n=2 (ids go from 0 to n - 1)"),
    ("one_hot(floor(x), -1)", "one_hot(): n must be a non-negative integer, got -1"),
    ("segment_sum(x, [0, 1], 2)", "segment_sum(): segment_ids of shape (2,) must have the shape of data's "
     "leading axes (6,): one id per row of data"),
    ("segment_sum(x, 1, 2)", "segment_sum(): segment_ids of shape () must have the shape of data's "
     "leading axes (6,): one id per row of data"),
    ("segment_sum(x, x, 9)", "segment_sum(): segment_ids must hold integers"),
    ("segment_sum(x, floor(x), 3)", "segment_sum(): segment_ids holds 3, out of range for n=3 "
     "(ids go from 0 to n - 1)"),
    ("segment_sum(x, floor(x), 2.5)", "segment_sum(): n must be a non-negative integer, got 2.5"),
    ("linspace(0, 1, -2)", "linspace(): n must be a non-negative integer, got -2"),
    ("linspace(0, 1, 2.5)", "linspace(): n must be a non-negative integer, got 2.5"),
    ("linspace(x, [1, 2], 3)", "linspace(): shapes (6,) and (2,) do not broadcast"),
    ("linspace(0, x, 3, axis=2)", "linspace(): axis 2 is out of range for an array of dimension 2"),
    ("linspace(0, 1, 3, axis=1)", "linspace(): axis 1 is out of range for an array of dimension 1"),
    ("linspace(0, 1, 3, endpoint=2)", "linspace(): endpoint must be true or false, not 2"),
    ("any(x, axis=2)", "any(): axis 2 is out of range for an array of dimension 1"),
    ("full((2, -1), 1)", "full(): negative dimension in shape (2, -1)"),
    ("full(2, x)", "full(): 'v' must be a number, got an array of shape (6,)"),
    ("full_like(x, x)", "full_like(): 'v' must be a number, got an array of shape (6,)"),
    ("x[x * 1e300]", "index 5e+299 is out of range"),  # (not the value a cast to int64 wraps it to)
    ("x[[1, -1e19]]", "index -1e+19 is out of range"),
])
def test_user_errors(src, message):
    r = user_error("eval", src, *(["--at", "x=[0.5, 1.5, 2.5, 3.5, 0, 1]"] if re.search(r"\bx\b", src) else []))
    first = r.stderr.splitlines()[0]
    assert first.startswith("error: <expr>:1:") and first.split(": ", 2)[2].startswith(message), first


def test_unequal_split_hints_array_split():
    r = user_error("eval", "a, b = split(x, 4)", "--at", "x=ones(6)")
    assert "hint: array_split allows unequal ones" in r.stderr


# ==========================================================================
# The samples of this issue, against closed forms computed here with NumPy
# ==========================================================================

SAMPLES = __import__("pathlib").Path(__file__).resolve().parent.parent / "samples"


def _sample(name):
    return (SAMPLES / name).read_text()


def test_sample_gaussian_loglik():
    x, mu, s, c = np.array([1.0, 2.0]), np.array([0.5, 1.0]), 2.0, 0.6
    sigma = np.array([[s, c], [c, 1.0]])
    si = np.linalg.inv(sigma)
    r = x - mu
    ll = -0.5 * r @ si @ r - 0.5 * np.log(np.linalg.det(sigma)) - np.log(2 * np.pi)
    g = 0.5 * (np.outer(si @ r, si @ r) - si)  # d ll/d Sigma
    res = gradcalc.grad(_sample("gaussian_loglik.grad"))
    assert res.of == "ll"
    assert res.value == pytest.approx(ll, rel=1e-13)
    assert res["mu"] == pytest.approx(si @ r, rel=1e-13)
    assert res["s"] == pytest.approx(g[0, 0], rel=1e-12)
    assert res["c"] == pytest.approx(g[0, 1] + g[1, 0], rel=1e-12)


def test_sample_einsum_bilinear():
    x, y = np.array([1.0, -2.0]), np.array([2.0, 1.0, -1.0])
    a = np.array([[1.0, 2.0, 0.0], [-1.0, 3.0, 1.0]])
    res = gradcalc.grad(_sample("einsum_bilinear.grad"))
    assert res.value == x @ a @ y == 4.0
    assert res["x"].tolist() == (a @ y).tolist() and res["y"].tolist() == (a.T @ x).tolist()
    assert res["A"].tolist() == np.outer(x, y).tolist()


def test_sample_segment_mean():
    x = np.array([[1.0, 0.0], [4.0, 2.0], [2.0, -1.0], [3.0, 2.0], [0.0, 1.0], [5.0, 0.0]])
    labels = [0, 2, 1, 0, 2, 2]
    counts = np.bincount(labels)
    means = _segment_sum(x, labels, 3) / counts[:, None]
    res = gradcalc.grad(_sample("segment_mean.grad"))
    assert res.value == np.sum(means ** 2) == 20.0
    assert res["x"] == pytest.approx(2 * means[labels] / counts[labels][:, None], rel=1e-15)


def test_samples_pass_check():
    out = ok("check", *(SAMPLES / f"{n}.grad" for n in ("gaussian_loglik", "einsum_bilinear", "segment_mean")),
             "-f", "plain").stdout.splitlines()
    assert len([line for line in out if line.startswith("ok ")]) == 7, out  # 3 + 3 + 1 derivatives


def test_special_arguments_give_a_result_or_a_user_error():
    # as test_hostile's sweep of every built-in over one or two special arguments, with the
    # three arguments these take (ids, counts, sections) and destructured several results
    import itertools
    pool = ["nan", "inf", "1e300", "-1", "2", "x", "v", "M", "()"]
    at = {"x": 1.0, "v": np.array([1.0, -2.0, 0.0]), "M": np.array([[1.0, 2.0], [3.0, 4.0]])}
    escaped = []
    for name in ["split", "array_split", "segment_sum", "linspace", "one_hot"]:
        for args in itertools.product(pool, repeat=3):
            src = f"{name}({', '.join(args)})"
            point = {a: at[a] for a in args if a in at}
            for program in (src, f"a, b = {src}; sum(a) + sum(b)"):
                escaped.append(escapes.escaped(program, point))
    escaped = [e for e in escaped if e]
    assert not escaped, escaped[:10]


_Z = np.arange(24.0).reshape(2, 3, 4)


@pytest.mark.parametrize("index", ["[1, ..., [0, 2]]", "[[0, 1], ..., 2]", "[:, ..., [0, 2]]", "[[0, 1], 1, ...]",
                                   "[[0, 1], ..., 1, 2]", "[[0, 1], ..., 1, :]"])  # (no axis before: the same)
def test_a_dots_that_covers_axes_separates_index_arrays_as_numpy_does(index):
    # separated advanced indices put their axes first (NumPy's rule), through '...' too
    want = eval("_Z" + index)  # noqa: S307 (the test's own literal index, on NumPy)
    got = gradcalc.evaluate("o = z" + index, at={"z": _Z})["o"]
    assert got.shape == want.shape and np.array_equal(got, want)


@pytest.mark.parametrize("index", ["[:, 1, ..., [0, 2, 3]]", "[None, 1, ..., [0, 2], 0]", "[:, [0, 1], ..., 2]"])
def test_a_dots_that_covers_no_axes_between_index_arrays_is_refused(index):
    # it vanished from the normalised index, and NumPy's moving of the arrays' axes to the front
    # with it: z[:, 1, ..., [0, 2, 3]] had shape (2, 3), NumPy's (3, 2) (the fuzzing hunt's find)
    r = user_error("eval", "o = z" + index, "--at", "z=reshape(arange(24), (2, 3, 4))")
    assert "this '...' covers no axes but stands between index arrays" in r.stderr
    assert "hint: write the index without '...' (it covers no axes here)" in r.stderr


@pytest.mark.parametrize("k", [33, 65, 200])
def test_an_index_of_many_nones_is_refused_in_words(k):
    """Each None adds an axis: past 32 a gather's value could not be held, and NumPy itself fails
    past 64 with "invalid index to scalar variable" (which the error quoted before)."""
    nones = ", ".join(["None"] * k)
    with pytest.raises(gradcalc.errors.ShapeError, match=f"an index with {k} None would select a value with at least {k} dimensions; at most 32"):
        gradcalc.evaluate(f"x[{nones}]", at={"x": 1.0})
    if k > 64:  # (an assignment through such an index keeps x's shape: refused only past NumPy's 64)
        with pytest.raises(gradcalc.errors.ShapeError, match="at most 64 are supported"):
            gradcalc.evaluate(f"y = x; y[{nones}] = 1; y", at={"x": 1.0})
    else:
        assert float(gradcalc.evaluate(f"y = x; y[{nones}] = 1; y", at={"x": 2.0}, all=True)["y"]) == 1.0
