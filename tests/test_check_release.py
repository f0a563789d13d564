"""check traces freeing what no derivative rule reads, and its batched passes write in place.

check traces with ``release`` (Builder.release_unread), as grad does: a loop of index updates
writes into its array as it runs and the tape holds what the rules read.  check's other readers
of values (the batched passes of finite differences, the kink and branch tests, the rounding
estimate) ask for what they read through numerics.restored, which computes again what the trace
freed.  These tests hold check's JSON to the full tape's, character for character, on programs
whose traces free values those readers need, and hold a loop's check to O(n) elements.

eval_equations (the batched pass) writes an index update into its operand's array where the
pass made it and it dies there: the same bits as impl's copy, held here against the copy.
"""
from __future__ import annotations

import io
import tracemalloc

import numpy as np
import pytest

import gradcalc
from gradcalc import numerics, tape
from gradcalc.cli.render import dump_json
from gradcalc.session import quiet, trace_source


@pytest.fixture
def watch_every_array(monkeypatch):
    monkeypatch.setattr(tape, "WATCHED_ELEMENTS", 1)  # (these small arrays are watched here)


def _json(**kwargs) -> str:
    out = io.StringIO()
    dump_json(gradcalc.check(**kwargs).to_json(), out=out)
    return out.getvalue()


_X6 = np.array([0.3, -0.7, 1.1, 0.25, -1.9, 0.6])

#: name -> (check's keyword arguments, a variable the released trace frees that a reader needs)
_PROGRAMS = {
    "a loop of index updates": dict(
        source="input x[6]\nz = zeros(6)\nfor i in range(6) { z[i] = x[i]^2 + sin(x[i]) }\nsum(z * z)",
        at={"x": _X6}),
    "a loop writing rows, a recurrence": dict(
        source="input p[2] = [0.8, 0.3]\ny = [1.0, 0.0]\ntraj = zeros((5, 2))\n"
               "for i in range(5) { y = y + 0.1 * [p[0]*y[1], -p[1]*sin(y[0])]; traj[i] = y }\nsum(traj^2)",
        at=None),
    "guards: a step changes the path": dict(
        source="input x[5]\nz = zeros(5)\nfor i in range(5) { if x[i] > 0.3 { z[i] = x[i]^3 } else "
               "{ z[i] = -x[i] } }\nsum(z)",
        at={"x": np.array([0.1, 0.3 + 1e-9, 0.5, -0.2, 0.7])}),
    "kinks near the point": dict(
        source="input x[5]\ny = abs(x - 0.2) + maximum(x, 0.4)\nz = zeros(5)\n"
               "for i in range(5) { z[i] = y[i] * x[i] }\nsum(z)",
        at={"x": np.array([0.2 + 1e-9, 0.4, -1.0, 0.9, 0.3])}),
    "eigh and cholesky": dict(
        source="input A[3, 3]\nS = A @ transpose(A) + 3*eye(3)\nL = cholesky(S)\nw, V = eigh(S)\n"
               "sum(L) + sum(w^3) + sum(exp(w))",
        at={"A": np.array([[1.0, 0.2, -0.3], [0.4, 1.5, 0.1], [-0.2, 0.3, 0.9]])}),
    "two inputs, one's arrays read for the other": dict(
        source="input a = 0.3\ninput b = 0.7\nu = sin(linspace(0, 1, 5) * b) + a\ns = 0\n"
               "for i in range(5) { s = s + u[i]^2 }\ns",
        at=None),
    "an intermediate wrt": dict(
        source="input x[4]\ny = exp(x) + 1\nz = zeros(4)\nfor i in range(4) { z[i] = y[i] * y[i] }\nsum(z)",
        at={"x": np.array([0.1, -0.5, 0.3, 1.2])}, wrt=["y"]),
}

_OPTIONS = {
    "full Jacobian": {},
    "directions": {"directions": 2},
    "taylor": {"directions": 1, "taylor": True},
    "forward differences": {"method": "forward"},
}


@pytest.mark.parametrize("options", _OPTIONS.values(), ids=_OPTIONS.keys())
@pytest.mark.parametrize("kwargs", _PROGRAMS.values(), ids=_PROGRAMS.keys())
def test_check_with_release_gives_the_full_tapes_json(monkeypatch, watch_every_array, kwargs, options):
    released = quiet(trace_source)(kwargs["source"], kwargs["at"], 10**8, release=True).builder.values
    assert any(v is None for v in released.values())  # (the trace frees something here)
    got = _json(**kwargs, **options)
    monkeypatch.setattr(numerics, "RELEASE", False)
    assert got == _json(**kwargs, **options)


def test_the_guarded_program_changes_path_and_the_kinked_one_says_so(watch_every_array):
    """The programs above reach the readers they are there for (a re-run, a kink note)."""
    guarded = gradcalc.check(**_PROGRAMS["guards: a step changes the path"])
    assert any("path" in n for r in guarded.results for n in r.notes)
    kinked = gradcalc.check(**_PROGRAMS["kinks near the point"])
    assert any("near the" in n for r in kinked.results for n in r.notes)


def _largest_held(monkeypatch, source: str, n: int, **options) -> int:
    """The most values of n or more elements a traced point held while check checked it."""
    held = []
    check_point = numerics._check_point

    def counting(tr, *args):
        def count():
            return sum(v is not None and np.size(v) >= n for v in tr.builder.values.values())
        held.append(count())
        found = check_point(tr, *args)
        held.append(count())
        return found
    monkeypatch.setattr(numerics, "_check_point", counting)
    assert gradcalc.check(source, **options).ok
    return max(held)


@pytest.mark.parametrize("program, options", [
    ("input x[{n}] = linspace(0, 1, {n})\nz = zeros({n})\nfor i in range({n}) {{ z[i] = x[i]^2 + 1 }}\nsum(z)", {}),
    ("input x = 0.5\nz = zeros({n})\nfor i in range({n}) {{ z[i] = sin(x*i) }}\nsum(z)", {"directions": 1}),
], ids=["fill, full Jacobian", "sin(x*i), one direction"])
def test_a_fill_loops_check_holds_a_few_arrays_not_one_a_step(monkeypatch, watch_every_array, program, options):
    n = 300
    assert _largest_held(monkeypatch, program.format(n=n), n, **options) <= 4  # (n of them on a full tape)


# -- eval_equations writes an index update into the array it owns -------------------------------------

_UPDATES = {
    "an element": ("input x[7]\nz = zeros(7)\nfor i in range(7) { z[i] = x[i]^2 + 1 }\nsum(z)", "x"),
    "added to": ("input x[7]\nz = ones(7)\nfor i in range(7) { z[i] += x[i] * z[i] }\nsum(z)", "x"),
    "rows of a matrix": ("input x[3]\nZ = zeros((4, 3))\nfor i in range(4) { Z[i] = x * i + Z[i % 2] }\n"
                         "sum(Z^2)", "x"),
    "an unbatched value": ("input x[5]\nz = x * 2\nfor i in range(5) { z[i] = 1.5 }\nsum(z*z)", "x"),
    "advanced indices apart": ("input x[3]\nT = zeros((3, 4, 3))\nfor i in range(2) "
                               "{ T[[0, 2], i, [1, 2]] = x[i] * [1, 2] + T[0, i, 0] }\nsum(T)", "x"),
    "repeated indices, added": ("input x[3]\nz = x^2\nfor i in range(3) { z[[0, 1, 0]] += x[i] * [1, 2, 3] }\n"
                                "sum(z^2)", "x"),
}


@pytest.mark.parametrize("source, wrt", _UPDATES.values(), ids=_UPDATES.keys())
def test_a_batched_pass_writing_in_place_gives_the_copys_bits(monkeypatch, source, wrt):
    tr = quiet(trace_source)(source, None if "x[" not in source else {"x": np.linspace(0.2, 1.3, _size(source))},
                             10**8)
    x = tr.value(wrt)
    batch = x + np.random.default_rng(1).standard_normal((9,) + x.shape) * 1e-3
    got = numerics.evaluate_batch(tr, wrt, batch, [tr.tape.output]).values[0]
    monkeypatch.setattr(tape, "COUNTS_REFERENCES", False)  # (nothing written in place)
    want = numerics.evaluate_batch(tr, wrt, batch, [tr.tape.output]).values[0]
    assert got.tobytes() == want.tobytes()


def _size(source: str) -> int:
    return int(source.split("input x[")[1].split("]")[0])


def test_a_batched_fill_loop_holds_one_batched_array():
    """Each step of the pass wrote the whole batched array anew (impl's copy): 2 of them at once,
    and O(n^2 B) work; written in place, one, and O(n B)."""
    n, rows = 200, 400
    tr = quiet(trace_source)(f"input x[{n}]\nz = zeros({n})\nfor i in range({n}) {{ z[i] = x[i]^2 + 1 }}\nz",
                             {"x": np.linspace(0, 1, n)}, 10**8)
    batch = np.linspace(0, 1, n) + np.zeros((rows, 1))
    array = rows * n * 8
    tracemalloc.start()
    try:
        values = numerics.evaluate_batch(tr, "x", batch, ["z"]).values[0]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(values, batch ** 2 + 1)
    assert peak < 1.5 * array, (peak, array)


def test_check_along_directions_adds_a_loops_reads_in_place(monkeypatch):
    # The dot-product test's batched backward pass (an output of two elements: one of one element
    # takes grad's own pass, row by row) takes batched.VJP_FOLDS: each read x[i] adds its
    # cotangent into rows the pass made (O(batch) a read), where the rules made an index_put of x's
    # size and added it
    from gradcalc import batched
    from gradcalc.tape import COUNTS_REFERENCES
    written = []
    real = batched._writable
    monkeypatch.setattr(batched, "_writable", lambda *a: written.append(real(*a)) or written[-1])
    n = 200
    src = f"input x[{n}]\ns = 0\nfor i in range({n}) {{ s = s + x[i]^2 * sin(x[i]) }}\n[s, 2 * s]"
    r = gradcalc.check(src, at={"x": np.linspace(0.1, 1, n)}, directions=2)
    assert r.ok
    assert any(written) == COUNTS_REFERENCES
