"""Finite differences in batches of columns: check's perturbed points are evaluated
FD_BATCH_ELEMENTS at a time (a check of 8,000 inputs needed 16,000 points of 8,000 elements at
once: more than --max-elements, an error), and a search at other steps moves only the inputs
whose columns failed (n = 4,000: 15.6 s and 550 MB, now 0.9 s and 180 MB).  The estimates are
the single batch's, bit for bit.  And the guards of a batched pass (a loop's, one an iteration)
are compared with each row together, not one at a time: the same first guard per row."""
from __future__ import annotations

import numpy as np
import pytest

import gradcalc
from gradcalc import numerics
from gradcalc.session import quiet, trace_source
from rules import replace_rule

PROGRAMS = [
    ("sum(sin(x) * x^2)", {"x": np.linspace(-2, 3, 37)}),
    # (a path that changes at some perturbed points: the guards each batch finds are merged)
    ("s = 0\nfor i in range(len(x)) {\n  if x[i] > 0.5 {\n    s = s + x[i]^3\n  } else {\n    s = s - x[i]\n  }\n}\n"
     "[s, sum(x)]", {"x": np.linspace(0, 1, 21)}),
    ("M @ M", {"M": np.arange(9.0).reshape(3, 3) / 7}),
]


def _traced(src, at):
    return quiet(trace_source)(src, at, 10**8)


@pytest.mark.parametrize("src, at", PROGRAMS)
@pytest.mark.parametrize("method", ["central", "forward", "richardson", "complex"])
def test_batches_of_columns_are_one_batch_bit_for_bit(monkeypatch, src, at, method):
    if method == "complex" and "if" in src:
        return  # (the complex step refuses the comparison's path: not a question of batches)
    tr = _traced(src, at)
    (w,) = at
    out = tr.tape.output
    whole = numerics.fd_estimate(tr, [out], w, method)
    monkeypatch.setattr(numerics, "FD_BATCH_ELEMENTS", 1)  # (one column a batch)
    parts = numerics.fd_estimate(tr, [out], w, method)
    assert parts.jacobian[out].tobytes() == whole.jacobian[out].tobytes()
    assert (parts.error is None) == (whole.error is None)
    if whole.error is not None:
        assert parts.error[out].tobytes() == whole.error[out].tobytes()
    assert [(g.var, g.what) for g in parts.flipped[out]] == [(g.var, g.what) for g in whole.flipped[out]]


def test_the_path_changes_are_found_in_batches_too(monkeypatch):
    src, at = PROGRAMS[1]
    tr = _traced(src, at)
    out = tr.tape.output
    whole = numerics.fd_estimate(tr, [out], "x", "central", step=0.06)  # (steps that cross 0.5)
    monkeypatch.setattr(numerics, "FD_BATCH_ELEMENTS", 1)
    parts = numerics.fd_estimate(tr, [out], "x", "central", step=0.06)
    assert [g.what for g in whole.flipped[out]] == ["if"] * 3
    assert [(g.var, g.loc) for g in parts.flipped[out]] == [(g.var, g.loc) for g in whole.flipped[out]]
    assert parts.jacobian[out].tobytes() == whole.jacobian[out].tobytes()


def test_some_columns_are_those_of_every_column():
    src, at = PROGRAMS[0]
    tr = _traced(src, at)
    out = tr.tape.output
    whole = numerics.fd_estimate(tr, [out], "x", "central", step=1e-3)
    some = numerics.fd_estimate(tr, [out], "x", "central", step=1e-3, columns=np.array([3, 17, 30]))
    j, k = whole.jacobian[out], some.jacobian[out]
    assert k[[3, 17, 30]].tobytes() == j[[3, 17, 30]].tobytes()
    assert np.isnan(np.delete(k, [3, 17, 30])).all()  # (the others were not estimated)


def test_a_check_whose_batch_is_past_the_element_limit_runs_in_batches():
    # 2 x 3000 points of 3000 elements, central: 18 M elements against --max-elements 10^7,
    # once an error naming the batch; the squares' rounding at 0.01 i fails the default step
    # for some elements, which are searched at larger steps, and pass
    x = np.arange(3000) * 0.01
    r = gradcalc.check("sum(x*x)", at={"x": x}, max_elements=10**7)
    assert r.ok, [x.notes for x in r.results]
    assert [res.comparison for res in r.results] == ["jacobian"]


def test_forward_differences_count_their_centre_row_in_each_batch():
    # 2,000 points of 2,000 elements and f(x)'s row, under --max-elements 10^6: batches of 499
    # columns, not 500 (500 of them and f(x) made 1,002,000 elements: refused)
    x = np.linspace(0.1, 1, 2000)
    for method in ("forward", "central"):
        r = gradcalc.check("sum(x*x)", at={"x": x}, max_elements=10**6, method=method)
        assert r.ok, [x.notes for x in r.results]


def test_a_large_intermediate_is_checked_in_batches():
    # outer(x, x) of 300: 600 points of 90,000-element values, 54 M elements against
    # --max-elements 10^6 (an error before), in batches of 5 columns
    x = np.linspace(0.1, 1, 300)
    r = gradcalc.check("sum(outer(x, x)^2)", at={"x": x}, max_elements=10**6)
    assert r.ok, [x.notes for x in r.results]


def test_a_wrong_rule_still_fails_in_batches(monkeypatch):
    from gradcalc.primitives import REGISTRY, safe_mul
    rule = (lambda g, ans, x, **_: safe_mul(g, 1.001 * REGISTRY["cos"](x)),)
    replace_rule(monkeypatch, REGISTRY["sin"], "vjp", rule)
    monkeypatch.setattr(numerics, "FD_BATCH_ELEMENTS", 64)
    r = gradcalc.check("sum(sin(x) * x)", at={"x": np.linspace(0.5, 2, 50)})
    assert not r.ok


def _first_one_at_a_time(guards, env, shapes, n):
    """The rule guard by guard, as _on_tape applied it before: a row's first guard decided otherwise."""
    first = np.full(n, -1)
    for k, g in enumerate(guards):
        v = np.real(np.broadcast_to(env[g.var], (n,) + shapes[g.var])).reshape(n, -1)
        e = np.asarray(g.expected).reshape(1, -1)
        with np.errstate(invalid="ignore"):
            other = ((v != 0) != e) if e.dtype == bool else (v != e)
        first[(first < 0) & (other | np.isnan(v)).any(axis=1)] = k
    return first


@pytest.mark.parametrize("budget", [1, 7, 1 << 22])
def test_the_guards_are_compared_together_as_one_at_a_time(monkeypatch, budget):
    # truths, masks and integer indices, scalars and arrays, rows that flip one, several or none,
    # nan among them; in chunks of guards down to one (the budget)
    from gradcalc.tape import Guard
    rng = np.random.default_rng(3)
    n, guards, env, shapes = 40, [], {}, {}
    for k in range(60):
        shape = [(), (3,), (2, 2)][k % 3]
        kind = k % 4
        expected = (rng.random(shape) < 0.5) if kind < 2 else rng.integers(0, 4, shape)
        value = np.broadcast_to(np.asarray(expected, float), (n,) + shape).copy()
        flip = rng.random(n) < 0.05
        value[flip] = (1.0 - value[flip]) if kind < 2 else value[flip] + 1
        value[rng.random(n) < 0.01] = np.nan
        guards.append(Guard(100 + k, np.asarray(expected) if shape else expected[()], None, "if"))
        env[100 + k], shapes[100 + k] = value, shape
    monkeypatch.setattr(numerics, "GUARD_BATCH_ELEMENTS", budget)
    got = numerics._first_differing(guards, env, shapes, n)
    want = _first_one_at_a_time(guards, env, shapes, n)
    assert (got == want).all() and (want >= 0).any() and (want < 0).any()
