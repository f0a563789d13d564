"""eval keeps no tape: a long loop runs in bounded memory (issue 15 item 6, issue 18 "Memory").

A run that takes no derivative (``evaluate``) traces on a builder that keeps no tape
(``record=False``): a value lives only as long as something refers to its variable.  These
tests hold it to that (the values alive during a loop, and the address space a subprocess may
take), and hold it to the recording run's results: the same values, bit for bit, the same
warnings, errors and step counts.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gradcalc
from gradcalc import run
from gradcalc.errors import GradcalcError
from gradcalc.session import quiet, trace_source


def loop(n: int) -> str:
    return f"s = 1.0; for i in range({n}) {{ s = s*0.999 + 0.001 }}; s"


@quiet
def traced(source, at=None, record=True, max_steps=10**7):
    return trace_source(source, at, 10**8, max_steps=max_steps, record=record)


def most_alive(monkeypatch, source, at=None) -> tuple[int, int]:
    """The most values the builder held, and masks the interpreter knew, at any loop iteration
    or call of an eval run."""
    most = [0, 0]
    step = run.Interpreter.step

    def counting(self, loc, what):
        most[:] = max(most[0], len(self.b.values)), max(most[1], len(self.masks))
        return step(self, loc, what)
    monkeypatch.setattr(run.Interpreter, "step", counting)
    gradcalc.evaluate(source, at=at)
    return most[0], most[1]


# -- bounded: what stays alive ---------------------------------------------------------------------

LONG = {
    "for": loop(20000),
    "while with a comparison": "k = 0; s = 0.0; while k < 20000 { s = s + sin(k); k += 1 }; s",
    "a call per step": "def f(a, b) { t = a*b; return t + 1 }; s = 0.0; for i in range(20000) { s = f(s, 0.5) }; s",
    "arrays and masks": "v = x; for i in range(5000) { m = v > 0; v = v - 0.001*m + 0.0005 }; sum(v[v > 0])",
    "grad(f) in a loop": "def f(t) = t^3; s = 0.0; for i in range(3000) { s = s + grad(f)(x) }; s",
    "an if in a loop": "s = 0.0; for i in range(20000) { if i % 2 == 0 { s += 1 } else { s -= 0.5 } }; s",
}


@pytest.mark.parametrize("source", LONG.values(), ids=LONG.keys())
def test_values_alive_during_a_long_eval_loop_do_not_grow_with_its_steps(monkeypatch, source):
    at = {"x": np.linspace(-1, 1, 7)} if "v = x" in source else {"x": 1.5} if "(x)" in source else {}
    values, masks = most_alive(monkeypatch, source, at)
    assert values < 40 and masks <= 2 * 256 + 1


def test_after_the_run_only_the_names_values_are_kept():
    tr = traced("a = 2.0; s = a; for i in range(10000) { t = s*a; s = t/4 + 0.5 }; s", record=False)
    names = set(tr.tape.names)
    assert names == {"a", "s", "i", "t", "_"}
    assert len(tr.builder.values) <= len(names) + 1  # (a, s, i, t, _ = a copy of s; no intermediate)
    assert tr.tape.equations == () and tr.tape.guards == () and tr.tape.consts == {}
    assert {n: float(tr.value(n)) for n in names} == {"a": 2.0, "s": 1.0, "i": 9999.0, "t": 2.0, "_": 1.0}


def test_a_recording_run_keeps_every_value():
    tr = traced(loop(1000))
    assert len(tr.builder.values) > 3000 and len(tr.tape.equations) > 2000


def _address_space_script(source: str, record: bool, headroom_mb: int) -> str:
    return textwrap.dedent(f"""
        import resource
        import gradcalc
        from gradcalc.session import quiet, trace_source
        gradcalc.evaluate("s = 1.0; for i in range(3) {{ s = s + 1 }}; s")  # every import done
        size = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmSize"))
        resource.setrlimit(resource.RLIMIT_AS, (size + {headroom_mb} * 2**20, resource.RLIM_INFINITY))
        try:
            if {record}:
                quiet(trace_source)({source!r}, None, 10**8)
                print("ran")
            else:
                print("ran", gradcalc.evaluate({source!r})["_"])
        except MemoryError:
            print("MemoryError")
    """)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_eval_of_a_200000_step_loop_fits_in_40_mb_more_than_its_imports():
    """A run that records 200,000 steps needs about 200 MB more (about 1 KB a step, README),
    eval next to nothing.  (The recording run is not tried under the limit: how a process that
    runs out of address space fails is up to the allocator, and one spent minutes failing.)"""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", _address_space_script(loop(200000), False, 40)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.stdout.strip().startswith("ran "), (done.stdout, done.stderr[-500:])


# -- the same run: values, warnings, errors, steps -----------------------------------------------------

PROGRAMS = {
    "a loop": (loop(500), {}),
    "nan inside a loop": ("s = x; for i in range(5) { s = log(s - 1) }; s", {"x": 1.5}),
    "inf and nan in a while": ("y = x; k = 0; while k < 40 { y = exp(y) - y; k += 1 }; z = y - y; z", {"x": 2.0}),
    "a function, branches, masks": (
        "def f(v, c=2) { w = v*c; return w - 1 }\n"
        "v = x\n"
        "for i in range(20) { if sum(v) > 0 { v = f(v) / 3 } else { v = f(v, c=0.5) } }\n"
        "v[v > 0] = 0\n"
        "sum(v^2)", {"x": [0.3, -1.2, 2.0]}),
    "rows of an array, integer indexing": (
        "acc = 0.0; for row in X { acc = acc + row[[0, 2, 2]] @ row[[1, 1, 0]] }; acc",
        {"X": np.arange(12.0).reshape(4, 3)}),
    "grad(f) and its grad": ("def f(t) = t^3 * sin(t); def g(t) = grad(f)(t); h = grad(g)(x); h * 2", {"x": 0.7}),
    "jacobian(f)": ("def f(v) = tanh(v) * v[0]; J = jacobian(f)(x); sum(J)", {"x": [0.5, -0.25]}),
    "a division by zero": ("d = x - x; q = 1 / d; r = q * 0; r", {"x": 3.0}),
    "a mean of nan (a builtin of several primitives)": ("m = mean(sqrt(x)); m", {"x": [-1.0, 4.0]}),
}


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("source, at", PROGRAMS.values(), ids=PROGRAMS.keys())
def test_eval_values_and_warnings_are_those_of_the_recording_run(source, at):
    recorded = traced(source, at)
    result = gradcalc.evaluate(source, at=at, all=True)
    assert list(result) == list(recorded.tape.names)
    for name, value in result.items():
        assert _same(value, recorded.value(name)), name
    assert result.warnings == [w.message for w in recorded.warnings]


@pytest.mark.parametrize("source, at", PROGRAMS.values(), ids=PROGRAMS.keys())
def test_eval_output_and_warnings_are_those_of_grad(source, at):
    out = gradcalc.evaluate(source, at=at)
    g = gradcalc.grad(source, at=at)
    assert _same(list(out.values())[0], g.value)
    # grad may add warnings of its own about derivatives, after those of the run
    assert g.warnings[:len(out.warnings)] == out.warnings
    assert all(w.startswith("the derivative") for w in g.warnings[len(out.warnings):])


def test_nan_warnings_name_the_operation_and_its_place():
    source, at = PROGRAMS["nan inside a loop"]
    assert gradcalc.evaluate(source, at=at).warnings == ["'log' at line 1, column 32 produced nan"]
    source, at = PROGRAMS["inf and nan in a while"]  # (inf - inf is nan, from an operand already inf)
    assert gradcalc.evaluate(source, at=at).warnings == ["'exp' at line 1, column 34 produced inf"]


def _error(fn, *args, **kwargs) -> str:
    with pytest.raises(GradcalcError) as info:
        fn(*args, **kwargs)
    return str(info.value)


def _fewest_steps(source) -> int:
    """The smallest max_steps a recording run of source passes with (found by bisection)."""
    lo, hi = 1, 10**6
    while lo < hi:
        mid = (lo + hi) // 2
        try:
            traced(source, max_steps=mid)
            hi = mid
        except GradcalcError:
            lo = mid + 1
    return lo


@pytest.mark.parametrize("source", [loop(300), "def f(t) = t^2; s = 0.5; for i in range(50) { s = grad(f)(s) / 2 }; s",
                                    "k = 0; while k < 100 { k = k + 1 }; k"])
def test_eval_counts_max_steps_as_a_recording_run_does(source):
    need = _fewest_steps(source)
    assert need > 100
    gradcalc.evaluate(source, max_steps=need)
    eval_error = _error(gradcalc.evaluate, source, max_steps=need - 1)
    assert eval_error == _error(traced, source, max_steps=need - 1)
    assert "steps" in eval_error


def test_an_endless_eval_loop_ends_with_the_same_message():
    message = _error(gradcalc.evaluate, "while true { }", max_steps=100000)
    assert message == _error(gradcalc.grad, "while true { }; 1", max_steps=100000)
    assert "--max-steps" not in message and "max_steps=100000" in message


def test_the_output_rule_is_that_of_a_recording_run():
    source = "if x > 0 { y = 2*x }; y"
    assert _error(gradcalc.evaluate, source, at={"x": -1.0}) == _error(gradcalc.grad, source, at={"x": -1.0})
    assert float(gradcalc.evaluate(source, at={"x": 1.5})["_"]) == 3.0
    assert list(gradcalc.evaluate("a = x^2; b = a + 1", at={"x": 2.0})) == ["b"]


# -- the builder that keeps no tape, on its own ------------------------------------------------------

def test_a_value_lives_as_long_as_its_variable():
    from gradcalc import primitives as P
    from gradcalc.tape import Builder, Tracer

    b = Builder(record=False)
    x = b.input(2.0)
    y = P.sin(x)
    var = int(y.var)
    assert var in b.values and b.operations() == 1
    del y
    assert var not in b.values and var not in b.shapes
    assert b.operations() == 1  # counted, though not kept
    with b.recording():  # (what grad(f)(x) in a program runs in)
        z = P.exp(x)
        borrowed = Tracer(b, int(z.var))  # as a derivative pass makes them: it keeps nothing alive
        del z
        assert borrowed.var in b.values and len(b.equations) == 1 and b.operations() == 2
        assert not b.owns(borrowed) and b.owns(x)
    assert borrowed.var not in b.values  # freed when the block ends
    assert b.operations() == 2 and len(b.tape({}, {}, None).equations) == 0


def test_a_reverse_pass_keeps_no_cotangent_sum_past_its_equation():
    # Each step records three 64x64 arrays (W @ h, tanh, h^2); h's cotangent is a sum of two
    # contributions, summed in place on the next one.  The pass must let each sum go when h's
    # equation takes it: a sum held to the end of the pass was a fourth array a step (4.1 x
    # the tape's arrays at the peak, against 3.1).
    import tracemalloc
    src = "input W, h0\nh = h0\nloss = 0\nfor t in range(100) {\n  h = tanh(W @ h)\n  loss += sum(h^2)\n}\nloss\n"
    rng = np.random.default_rng(0)
    at = {"W": rng.standard_normal((64, 64)) / 8, "h0": rng.standard_normal((64, 64))}
    gradcalc.grad(src, at=at, wrt=["W"])
    tracemalloc.start()
    try:
        gradcalc.grad(src, at=at, wrt=["W"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak / (64 * 64 * 8 * 100) < 3.6


# -- grad and vjp: arrays no rule reads are freed while the run records ------------------------------

RNN = "input W, b, h0\nh = h0\nloss = 0\nfor t in range({n}) {{\n  h = tanh(W @ h + b)\n  loss += sum(h^2)\n}}\nloss\n"


def _rnn_at(k=16, batch=8):
    rng = np.random.default_rng(0)
    return {"W": rng.standard_normal((k, k)) / 4, "b": rng.standard_normal((k, 1)), "h0": rng.standard_normal((k, batch))}


@quiet
def _released(source, at):
    return trace_source(source, at, 10**8, release=True)


@pytest.fixture
def watch_every_array(monkeypatch):
    """Small test programs free their arrays too (below WATCHED_ELEMENTS, none is watched)."""
    from gradcalc import tape
    monkeypatch.setattr(tape, "WATCHED_ELEMENTS", 1)


def _freed(tr) -> list:
    return [eq.prim.name for eq in tr.tape.equations if tr.builder.values[eq.out] is None]


def test_grad_frees_while_recording_the_arrays_no_rule_reads():
    # One step: W @ h (add reads neither operand), W @ h + b (tanh reads its output, not its
    # operand), tanh (kept), h^2 (read by nothing: sum reads no value), its sum (a scalar: kept).
    tr = _released(RNN.format(n=1), _rnn_at(32, 32))
    assert _freed(tr) == ["matmul", "add", "pow_const"]
    assert all(tr.builder.values[v] is not None for v in tr.tape.names.values())  # the names keep theirs
    assert all(tr.builder.shapes[eq.out] == (32, 32) for eq in tr.tape.equations if tr.builder.values[eq.out] is None)
    # a run that records for anything else keeps them all
    kept = traced(RNN.format(n=1), _rnn_at(32, 32))
    assert all(v is not None for v in kept.builder.values.values())
    # arrays under WATCHED_ELEMENTS (16 x 8) are not worth watching
    assert _freed(_released(RNN.format(n=1), _rnn_at(16, 8))) == []


def test_a_mask_reads_nothing(watch_every_array):
    # greater has no rule, so v + 1 goes once its tracer does; where reads its operands
    tr = _released("input x\nv = exp(x + 1)\nm = (x * 2) > 0\nsum(where(m, v, 0))", {"x": np.linspace(-1, 1, 5)})
    assert _freed(tr) == ["add", "mul"]


def _results_alike(a, b) -> None:
    assert list(a) == list(b)
    for k in a:
        x, y = np.asarray(a[k]), np.asarray(b[k])
        assert x.shape == y.shape and x.tobytes() == y.tobytes(), k  # bit for bit, nan's included
    assert a.warnings == b.warnings
    va, vb = (r.value if isinstance(r.value, dict) else {"": r.value} for r in (a, b))
    assert list(va) == list(vb)
    assert all(np.asarray(va[k]).tobytes() == np.asarray(vb[k]).tobytes() for k in va)


_W = np.random.default_rng(1).standard_normal((4, 4)) / 2
FREED = {  # array programs whose grad frees values while recording: the same results as keeping all
    "an RNN": (RNN.format(n=5), _rnn_at(4, 3), ["W", "b", "h0"]),
    "a call per step, two results": (
        "input W, x\ndef step(h) {\n  z = W @ h\n  return tanh(z), sum(z^2)\n}\nh = x\ns = 0\n"
        "for t in range(3) {\n  h, q = step(h)\n  s = s + q\n}\ns + sum(h)\n", {"W": _W, "x": np.ones((4, 2))}, None),
    "rows of a value never named": ("input W, x\ns = 0\nfor r in W @ x { s = s + sum(exp(r)) }\ns",
                                    {"W": _W, "x": np.arange(8.0).reshape(4, 2) / 8}, None),
    "grad(f) of an array function": ("input W, x\ndef f(v) = sum(tanh(W @ v)^2)\ng = grad(f)(x)\nsum(g * g) + sum(W)",
                                     {"W": _W, "x": np.linspace(-1, 1, 4)}, None),
    "jacobian(f)": ("input W, x\ndef f(v) = tanh(W @ v * 2)\nJ = jacobian(f)(x)\nsum(J^2)",
                    {"W": _W, "x": np.linspace(-1, 1, 4)}, None),
    "an index assignment": ("input x\nv = x * 2\nv[0] = sum(v^2)\nsum(exp(v))", {"x": np.linspace(0, 1, 5)}, None),
    "a while loop": ("input W, x\nv = x\nk = 0\nwhile k < 3 { v = sin(W @ v + 1); k += 1 }\nsum(v^3)",
                     {"W": _W, "x": np.linspace(-1, 1, 4)}, None),
    "with respect to a name inside": ("input W, x\na = W @ x\nb = tanh(a)\nsum(b^2)",
                                      {"W": _W, "x": np.linspace(-1, 1, 4)}, ["a", "W"]),
    "nan and its warning": ("input x\ny = log(exp(x - 1) - 1.5) * (x @ x)\nsum(sqrt(y))", {"x": np.linspace(0.5, 3, 6)}, None),
}


@pytest.mark.parametrize("source, at, wrt", FREED.values(), ids=FREED.keys())
def test_grad_that_frees_values_gives_what_keeping_them_all_gives(monkeypatch, watch_every_array, source, at, wrt):
    from gradcalc.tape import Builder
    freed = gradcalc.grad(source, at=at, wrt=wrt)
    assert any(v is None for v in _released(source, at).builder.values.values())
    monkeypatch.setattr(Builder, "release_unread", lambda self: None)
    _results_alike(freed, gradcalc.grad(source, at=at, wrt=wrt))


def test_vjp_that_frees_values_gives_what_keeping_them_all_gives(monkeypatch, watch_every_array):
    from gradcalc.tape import Builder
    source = "input W, x\na = W @ x\nb = sin(a)\nc = exp(a) * 2\nd = c + b"
    at, cts = {"W": _W, "x": np.linspace(-1, 1, 4)}, {"b": np.arange(4.0), "c": np.ones(4)}
    freed = gradcalc.vjp(source, cts, at=at, of=["b", "c"])  # (cotangents name outputs of of: SPEC §5)
    monkeypatch.setattr(Builder, "release_unread", lambda self: None)
    _results_alike(freed, gradcalc.vjp(source, cts, at=at, of=["b", "c"]))


def test_a_long_rnns_grad_holds_what_its_backward_pass_reads():
    # 100 steps of 64x64 arrays: the pass reads each step's tanh and nothing else the step
    # makes (W @ h, the sum with b, h^2: freed as the run drops them).  Kept, they were 4.1
    # arrays a step at the peak; freed, under 2.
    import tracemalloc
    at = _rnn_at(64, 64)
    gradcalc.grad(RNN.format(n=100), at=at, wrt=["W"])
    tracemalloc.start()
    try:
        gradcalc.grad(RNN.format(n=100), at=at, wrt=["W"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak / (64 * 64 * 8 * 100) < 2.0


def test_a_released_builder_frees_an_unread_array_when_its_tracer_goes(watch_every_array):
    from gradcalc import primitives as P
    from gradcalc.tape import Builder

    b = Builder()
    b.release_unread()
    x = b.input(np.ones(3))
    y = P.exp(P.neg(x))  # exp reads its output: neg's value is never read
    z = P.sin(y)  # sin reads its operand: y is kept
    neg = b.equations[0].out
    assert b.values[neg] is None and b.values[y.var] is not None
    w = P.neg(z)
    with b.recording():  # (what grad(f)(x) in a program runs in): nothing is freed until it ends
        del w
        assert b.values[b.equations[-1].out] is not None
    assert b.values[b.equations[-1].out] is None
    v = P.neg(z)
    b.stop_freeing()  # stopped: what is left stays (the names' values)
    del v
    assert b.values[b.equations[-1].out] is not None
    assert b.shapes[neg] == (3,)
