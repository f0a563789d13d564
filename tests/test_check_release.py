"""eval_equations (the batched pass of check's finite differences) writes an index update into
its operand's array where the pass made it and it dies there: the same bits as impl's copy, held
here against the copy, and one batched array held at a time instead of two.
"""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from gradcalc import numerics, tape
from gradcalc.session import quiet, trace_source


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
