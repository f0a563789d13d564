"""plot's marks in loops with many kinks and many changes of path (gradcalc.plots): where they
lie, checked against closed forms and against a plain-Python run of the same arithmetic, never
against gradcalc; and how the work grows: every kink of a path located in the same batched
passes, every change of path of a run refined together, one run held at a time."""
from __future__ import annotations

import gc

import numpy as np
import pytest

from gradcalc import plots
from gradcalc.plots import plot


def kink_loop(n: int) -> str:
    return (f"input w = 0.5\ns = 0\nfor i in range({n}) {{\n"
            f"  s = s + relu(1 - (2*(i%2)-1)*w*(i/{n}))\n}}\ns")


def ball(n: int) -> str:
    return (f"input h0 = 1\ny = h0\nv = 0\nfor i in range({n}) {{\n  v = v - 9.81*0.01\n"
            "  y = y + 0.01*v\n  if y < 0 {\n    y = -y\n    v = -0.9*v\n  }\n}\ny")


@pytest.mark.parametrize("n", [20, 60])
def test_every_kink_of_a_loop_is_marked_at_its_closed_form(n):
    # relu(1 - c w) has its kink at w = 1/c: c = +-i/n, every i but 0, inside -3:3
    r = plot(kink_loop(n), "w", -3, 3)
    want = sorted(1 / c for i in range(1, n) if abs(1 / (c := (2 * (i % 2) - 1) * i / n)) <= 3)
    xs = sorted(m["x"] for m in r.marks)
    assert all(m["kind"] == "kink" and "'relu'" in m["note"] for m in r.marks)
    assert xs == pytest.approx(want, abs=1e-12)


def test_every_kink_of_abs_in_a_loop_and_of_an_array_is_marked():
    n = 40
    want = [i / n for i in range(n)]  # abs(t - i/n): t = i/n
    loop = f"input t = 0.5\ns = 0\nfor i in range({n}) {{\n  s = s + abs(t - i/{n})\n}}\ns"
    for source in (loop, f"input t = 0.5\nsum(abs(t - arange({n})/{n}))"):
        xs = sorted(m["x"] for m in plot(source, "t", -0.2, 1.2).marks)
        assert xs == pytest.approx(want, abs=1e-12)
    # relu(1 - w c_k), c_k = (k + 1)/50: w = 50/(k + 1), inside -3:3 for k + 1 >= 17
    xs = sorted(m["x"] for m in plot("input w = 0.5\nsum(relu(1 - w*(arange(50)+1)/50))", "w", -3, 3).marks)
    assert xs == pytest.approx(sorted(50 / k for k in range(17, 51)), abs=1e-12)


def test_several_kinds_of_kink_and_branch_are_each_marked_once():
    r = plot("abs(x) + relu(x - 1) + (x if x < -1 else 2*x) + (x^2 if x > 0.7 else 0) + max([x, 0.3])",
             "x", -2, 2)
    got = sorted((m["kind"], m["x"]) for m in r.marks)
    assert got == [("kink", 0.0), ("kink", 0.3), ("kink", 1.0), ("path", -1.0), ("path", 0.7)]


def _decisions(h0: float, n: int) -> tuple:
    """The ball's if at every step, run in plain Python (the same float operations, in the
    same order, as the program)."""
    y, v, taken = h0, 0.0, []
    for _ in range(n):
        v = v - 9.81 * 0.01
        y = y + 0.01 * v
        taken.append(y < 0)
        if y < 0:
            y = -y
            v = -0.9 * v
    return tuple(taken)


def _leaves(lo: float, hi: float, n: int) -> float:
    """Where the decisions first differ from those at lo, between lo and hi (bisection of
    the floats between them down to neighbours): the bracket, for the mark within it."""
    start = _decisions(lo, n)
    while np.nextafter(lo, hi) < hi:
        mid = lo + (hi - lo) / 2
        if mid in (lo, hi):
            break
        lo, hi = (mid, hi) if _decisions(mid, n) == start else (lo, mid)
    return lo, hi


@pytest.mark.parametrize("n", [60, 150])
def test_every_change_of_a_bouncing_balls_path_is_marked_where_a_plain_run_changes(n):
    r = plot(ball(n), "h0", 0.5, 2, samples=60)
    t = r["abscissae"]
    paths = [_decisions(x, n) for x in t]
    want = []  # (every change between two samples: one a sample from another was dropped before)
    for i in range(len(t) - 1):
        if paths[i] != paths[i + 1]:
            want.append(_leaves(t[i], t[i + 1], n))
    marks = sorted(m["x"] for m in r.marks)
    assert all(m["kind"] == "path" and "'y < 0'" in m["note"] for m in r.marks)
    assert len(want) > 3 and len(marks) == len(want)
    for x, (lo, hi) in zip(marks, want):
        assert lo - 1e-15 <= x <= hi + 1e-15
    # and each sample's value is the plain run's
    def height(h0):
        y, v = h0, 0.0
        for _ in range(n):
            v = v - 9.81 * 0.01
            y = y + 0.01 * v
            if y < 0:
                y, v = -y, -0.9 * v
        return y
    np.testing.assert_array_equal(r["values"], [height(x) for x in t])


def _counting(monkeypatch, name: str) -> list:
    calls = []
    real = getattr(plots, name)

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)
    monkeypatch.setattr(plots, name, counted)
    return calls


def test_the_batched_passes_that_locate_kinks_do_not_grow_with_their_number(monkeypatch):
    # one pass on the grid, then one a round for every kink together (not a pass per kink)
    passes = _counting(monkeypatch, "eval_equations")
    counts = []
    for n in (10, 80):
        passes.clear()
        marks = plot(kink_loop(n), "w", -3, 3).marks
        assert len(marks) > n // 2
        counts.append(len(passes))
    assert max(counts) <= 2 + plots.ROUNDS  # (the samples' pass, the grid's, the rounds)


def test_the_changes_of_a_path_are_refined_together_and_one_run_is_held_at_a_time(monkeypatch):
    calls = _counting(monkeypatch, "on_tape")
    runs, alive = [], []
    real_run_sample = plots._run_sample

    def run_sample(tr, *args, **kwargs):
        gc.collect()  # (the runs alive as another starts: the first, and the one at hand)
        alive.append(sum(type(o) is type(tr) for o in gc.get_objects()))
        runs.append(1)
        return real_run_sample(tr, *args, **kwargs)
    monkeypatch.setattr(plots, "_run_sample", run_sample)
    # y = x*x at each step decides 'x*x > k/20' for k = 0..19: every sample of a run between
    # two changes is on one path, whose marks come from one refinement
    source = "input x = 0\ns = 0\nfor k in range(20) {\n  if x*x > k/20 { s = s + x }\n}\ns"
    r = plot(source, "x", -1, 1, samples=101)
    want = sorted({-np.sqrt(k / 20) for k in range(20)} | {np.sqrt(k / 20) for k in range(1, 20)})
    assert sorted(m["x"] for m in r.marks) == pytest.approx(want, abs=1e-12)
    paths = len(runs) + 1
    # per path: the samples' test, the notes' test and the refinement's rounds
    assert len(calls) <= paths * (2 + plots.ROUNDS)
    assert len(runs) > 10 and max(alive) <= 2  # no earlier run is kept


def test_kinks_with_no_point_in_a_pass_are_asked_nothing():
    # a 40,000-element value makes passes of 33 points; a kink whose bracket has no point in
    # one of them made a probe of no rows, whose reshape raised (an internal error, exit 3):
    # the marks are abs's at 0.3 and relu's at 0.6
    r = plot("z = sum(zeros(40000) * w)\ny = abs(w - 0.3) + relu(w - 0.6) + z", "w", 0, 1)
    assert [(m["x"], m["kind"]) for m in r.marks] == [(0.3, "kink"), (0.6, "kink")]


def test_the_kinks_of_broadcasting_elementwise_operations_are_marked_at_their_closed_forms():
    # an element's distance is computed from its operands' elements alone (each kept at its
    # rank: a binary kink aligns its operands by it; passing them flat broadcast them against
    # each other and moved every mod mark): mod(3 a_k + w, 0.7) jumps at w = 0.7 m - 3 a_k,
    # minimum(a_k, w) and sign(a_k - w) bend at w = a_k, maximum(w c_j, d_ij) at w = d_ij / c_j
    a = np.linspace(-1, 1, 7)
    src = "input a = linspace(-1, 1, 7)\nsum(mod(a * 3 + w, 0.7)) + sum(minimum(a, w)) + sum(sign(a - w))"
    by_note = {}
    for m in plot(src, "w", -1, 1).marks:
        by_note.setdefault(m["note"].split("'")[1], []).append(m["x"])
    jumps = sorted({round(0.7 * m - 3 * ak, 12) for ak in a for m in range(-10, 11) if -1 <= 0.7 * m - 3 * ak <= 1})
    assert sorted(by_note["mod"]) == pytest.approx(jumps, abs=1e-9)
    assert sorted(by_note["minimum"]) == pytest.approx(a, abs=1e-9)
    assert sorted(by_note["sign"]) == pytest.approx(a, abs=1e-9)
    d = np.array([[0.1, 0.5, 0.9], [0.3, 0.2, 0.7]])
    xs = sorted(m["x"] for m in plot("sum(maximum(w * [1, 2, 3], [[0.1, 0.5, 0.9], [0.3, 0.2, 0.7]]))",
                                     "w", -1, 1).marks)
    assert xs == pytest.approx(sorted(set(np.round(d / [1, 2, 3], 12).reshape(-1))), abs=1e-9)  # (ties: one mark)


def test_the_derivatives_of_a_loop_filling_an_array_are_their_closed_form():
    # z[i] = sin(a i), sum(z^2): d/da = sum(2 sin(a i) cos(a i) i) = sum(i sin(2 a i)); and the
    # second derivative sum(2 i^2 cos(2 a i)), on the plot's samples
    n = 300
    src = f"input a = 0.5\nz = zeros({n})\nfor i in range({n}) {{\n  z[i] = sin(a*i)\n}}\nsum(z^2)"
    r = plot(src, "a", 0, 1, samples=33)
    a, i = r["abscissae"][:, None], np.arange(n)
    np.testing.assert_allclose(r["derivatives"], np.sum(i * np.sin(2 * a * i), axis=1), rtol=1e-10, atol=1e-9)


def _recorded_tangents(src: str, over: str, at: dict, rows: np.ndarray, rules: bool):
    """A plot's recording of the tangent (and its tangent) of src's output along over, as
    plots._recorded makes it, with the recording folds or by the rules alone (fold={}), then
    evaluated at the abscissae rows as plots._evaluated evaluates it (index updates of what the
    pass made written in place)."""
    from gradcalc.session import quiet, trace_source
    from gradcalc.tape import eval_equations
    from gradcalc.transforms import forward, seeded
    with np.errstate(all="ignore"):
        tr = quiet(trace_source)(src, at, 10**8)
        b, names = tr.builder, tr.tape.names
        start = len(b.equations)
        seed = b.input(np.ones(tr.value(over).shape))
        fold = {} if rules else None
        tangent = forward(b, tr.tape.equations, {names[over]: seed}, check=False, fold=fold)[names[tr.tape.output]]
        seed2 = b.input(np.ones(tr.value(over).shape))
        second = forward(b, list(tr.tape.equations) + b.equations[start:], {names[over]: seed2}, check=False,
                         fold=fold)[tangent.var]
        equations = seeded(list(tr.tape.equations) + b.equations[start:], [names[over]])
        env = dict(b.values)
        env[names[over]] = rows
        wanted = {names[tr.tape.output], tangent.var, second.var}
        eval_equations(equations, env, keep=wanted)
        return [np.array(b.values[tangent.var]), np.array(b.values[second.var])] + [env[v] for v in sorted(wanted)]


@pytest.mark.parametrize("src", [
    "z = zeros(6)\nfor i in range(6) {\n  z[i] = sin(a*i) * c[i]\n}\nz * z * c",
    # (-0.0 in x's tangent before the first update, made +0.0 off the selection; -0.0 written)
    "z = a * c * -0.0\nfor i in range(4) {\n  z[i] = a * a * -0.0 * c[i]\n}\nz",
    "z = a * c * -0.0\nz[2] = a^2\nz",
    # (a recurrence, slices, repeated indices (the last write wins), rows of a matrix)
    "y = a * c\nfor i in range(5) {\n  y[i + 1] = y[i] * a + c[i]\n}\ny * y",
    "z = zeros(8)\nfor i in range(4) {\n  z[2*i:2*i + 2] = [a * c[i] * -0.0, a^3]\n}\nz * z",
    "z = a * c\nz[[1, 3, 1]] = [a, a^2, a^3]\nz * z * c",
    "Z = zeros((3, 6))\nfor i in range(3) {\n  Z[i] = c * a^(i + 1)\n}\nZ * Z",
    # (two updates of one tangent: the second is no chain of the first)
    "z = a * c * -0.0\nu = z\nu[1] = a^2\nz[2] = a^3\nconcat(z, u)",
])
def test_a_plots_recorded_updates_are_the_rules_bit_for_bit(src):
    # plot records an index update's tangent as one update (plus t_x + 0.0 before a chain's
    # first): the tangent and second tangent, at the traced point and evaluated at a batch of
    # abscissae, are those of the rules' index_update(t_x, 0) + index_update(zeros, t_v) bit for
    # bit (zeros of both signs, nan and inf among c)
    c = np.array([0.0, 1.5, -np.inf, 2.0, np.nan, -0.0])
    rows = np.array([-1.0, -0.0, 0.0, 0.5, 2.0])
    folded = _recorded_tangents("input a\n" + src, "a", {"a": 0.75, "c": c}, rows, rules=False)
    ruled = _recorded_tangents("input a\n" + src, "a", {"a": 0.75, "c": c}, rows, rules=True)
    for f, r in zip(folded, ruled):
        f, r = np.asarray(f, dtype=float), np.asarray(r, dtype=float)
        assert f.shape == r.shape
        assert np.array_equal(f.view(np.uint64), r.view(np.uint64)), (f, r)


def test_a_sample_whose_loop_runs_far_longer_than_the_first_ones_has_its_value():
    # 52,000 iterations at the last sample (two steps each: an operation and an iteration): past the
    # 10^5 steps that check allows a run a step away, within --max-steps; that budget made it nan
    r = plot("s = 0\nfor i in range(round(x)) { s = s + x }\ns", "x", 1, 52000, samples=2)

    def run(x):
        s = 0.0
        for _ in range(round(x)):
            s = s + x
        return s
    np.testing.assert_array_equal(r["values"], [run(1.0), run(52000.0)])
    np.testing.assert_array_equal(r["derivatives"], [1.0, 52000.0])


def test_a_run_past_max_steps_at_a_sample_is_the_plots_error_naming_the_sample():
    from gradcalc.errors import LimitError
    with pytest.raises(LimitError) as info:  # (no value past 0: the loop never ends there)
        plot("y = 0\nwhile x > 0 { y = y + 1 }\ny + x", "x", -1, 1, samples=5, max_steps=10**4)
    assert str(info.value.message).startswith("at the sample x = 0.5 (4 of 5), the program ran more than ")
    assert "plot an interval where the program stays within the limit" in info.value.hint


def test_samples_where_the_program_fails_have_no_value_the_first_ones_too():
    # z[round(x)] for z of 3 elements: out of range below x = -3.5 (round half to even) and above 2.5
    r = plot("z = [1, 2, 3]\nz[round(x)] * x", "x", -5, 4, samples=10)
    t = r["abscissae"]
    inside = (t >= -3.5) & (t < 2.5)
    z = [1.0, 2.0, 3.0]
    want = [z[round(x)] * x if ok else np.nan for x, ok in zip(t, inside)]
    np.testing.assert_array_equal(r["values"], want)
    assert np.isnan(r["values"][0]) and not np.isnan(r["values"][3])
    # (a warning says why: nan with no word before)
    assert r.warnings == ["the program fails at the sample x = -5, which has no value: index -5 is out of range "
                          "for axis 0 with size 3"]
    from gradcalc.errors import GradcalcError
    with pytest.raises(GradcalcError, match="index -9 is out of range"):  # (at every sample: the first's error)
        plot("z = [1, 2, 3]\nz[round(x)] * x", "x", -9, -5, samples=4)


@pytest.mark.parametrize("source, lo, hi, samples, want", [
    # the loop runs 0, 1, ..., 5 times at the samples 0.5, ..., 5.5: a change in every interval
    ("y = x\nwhile y > 1 { y = y - 1 }\ny*y", 0.5, 5.5, 6, [1.0, 2.0, 3.0, 4.0, 5.0]),
    ("s = 0\nfor i in range(6) { if x > i + 0.5 { s = s + x } }\ns*s", 0, 6, 7, [0.5, 1.5, 2.5, 3.5, 4.5, 5.5]),
])
def test_a_change_of_path_in_every_interval_is_marked_in_every_interval(source, lo, hi, samples, want):
    # (a change a sample's spacing from one marked by the same decision was dropped: every other one)
    assert sorted(m["x"] for m in plot(source, "x", lo, hi, samples=samples).marks) == want
