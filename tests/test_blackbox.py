"""Black boxes (SPEC §9): the JSON protocol, finite differences of a program, and both checks."""
from __future__ import annotations

import json
import math
import os
import shlex
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import gradcalc
from gradcalc.blackbox import (EXEC_TOLERANCE, FD_METHODS, BlackBox, ExecError, check_against_source,
                               check_blackbox, fd_gradient)
from gradcalc.errors import GradcalcError, ShapeError, UsageError, ValueError_
from gradcalc.lower import trace
from gradcalc.numerics import TOLERANCES

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "samples" / "blackbox" / "model.py"
MODEL_GRAD = ROOT / "samples" / "blackbox" / "model.grad"
AT = {"x": np.array([0.5, -1.0, 2.0]), "y": np.array(1.5)}


def closed_form(x, y):
    """f, df/dx, df/dy of samples/blackbox/model.py."""
    f = y * np.sum(np.sin(x)) + np.sum(x ** 2) + math.log1p(y ** 2)
    return f, y * np.cos(x) + 2 * x, np.sum(np.sin(x)) + 2 * y / (1 + y ** 2)


def model(*flags, timeout=60.0) -> BlackBox:
    return BlackBox(shlex.join([sys.executable, str(MODEL), *flags]), timeout=timeout)


@pytest.fixture
def script(tmp_path):
    """A helper program from Python source; returns its command line."""
    def make(body: str, name: str = "box.py") -> str:
        path = tmp_path / name
        path.write_text("import json, os, sys, time\n" + textwrap.dedent(body))
        return shlex.join([sys.executable, str(path)])
    return make


def traced_model():
    program = gradcalc.parse(MODEL_GRAD.read_text(), str(MODEL_GRAD))
    return trace(program)


# -- the protocol --------------------------------------------------------------

def test_run_returns_values_and_gradients_in_order():
    box = model()
    other = {"x": np.array([0.1, 0.2, 0.3]), "y": np.array(-2.0)}
    r = box.run([AT, other])
    assert box.requests == 1 and len(r) == 2
    for res, p in zip(r, [AT, other]):
        f, gx, gy = closed_form(p["x"], float(p["y"]))
        assert res["value"].shape == () and res["value"] == pytest.approx(f, rel=1e-14)
        np.testing.assert_allclose(res["gradient"]["x"], gx, rtol=1e-14)
        assert res["gradient"]["y"].shape == () and res["gradient"]["y"] == pytest.approx(gy, rel=1e-14)


def test_no_gradient_is_none():
    (r,) = model("--no-gradient").run([AT])
    assert r["gradient"] is None


def test_the_request_and_non_finite_numbers_both_ways(script, tmp_path):
    log = tmp_path / "request.json"
    box = BlackBox(script(f"""
        req = sys.stdin.read()
        open({str(log)!r}, "w").write(req)
        n = len(json.loads(req)["points"])
        print(json.dumps({{"results": [{{"value": "nan", "gradient": {{"a": ["inf", "-inf", 1]}}}}] * n}}))
    """))
    (r,) = box.run([{"a": np.array([np.nan, np.inf, -np.inf])}])
    assert json.loads(log.read_text()) == {"schema": 1, "points": [{"a": ["nan", "inf", "-inf"]}]}
    assert np.isnan(r["value"])
    np.testing.assert_array_equal(r["gradient"]["a"], [np.inf, -np.inf, 1.0])


def test_a_list_of_arguments_is_taken_as_it_is():
    box = BlackBox([sys.executable, str(MODEL)])
    assert box.cmd.endswith("model.py") and box.run([AT])[0]["value"].shape == ()


def test_no_points_starts_nothing():
    box = BlackBox("no-such-program-gradcalc-test")
    assert box.run([]) == [] and box.requests == 0


# -- failures: user errors that quote the end of stderr ------------------------

def test_program_not_found():
    with pytest.raises(UsageError, match="program 'no-such-program-gradcalc-test' not found"):
        BlackBox("no-such-program-gradcalc-test --flag").run([AT])


@pytest.mark.parametrize("cmd", ["", "   ", "'unclosed"])
def test_bad_commands(cmd):
    with pytest.raises(UsageError, match="--exec"):
        BlackBox(cmd)


def test_bad_timeout():
    with pytest.raises(UsageError, match="--exec-timeout must be a positive number"):
        BlackBox("true", timeout=0)


@pytest.mark.parametrize("timeout", [1e10, math.inf, 1e308])
def test_a_timeout_past_what_the_system_waits_at_once_is_waited_in_turns(timeout):
    # the system's poll takes at most about 2^31 ms: --exec-timeout 1e10 was an internal error
    # (OverflowError, exit 3), as were inf and 1e308
    (r,) = model(timeout=timeout).run([AT])
    f, gx, gy = closed_form(AT["x"], float(AT["y"]))
    assert r["value"] == pytest.approx(f, rel=1e-14)


def test_non_zero_exit_quotes_the_end_of_stderr(script):
    box = BlackBox(script("""
        for i in range(50):
            print(f"iteration {i}", file=sys.stderr)
        print("model diverged at step 7", file=sys.stderr)
        sys.exit(3)
    """))
    with pytest.raises(ExecError) as info:
        box.run([AT])
    err = info.value
    assert isinstance(err, ValueError_) and isinstance(err, GradcalcError)
    assert err.returncode == 3
    assert "exited with status 3; the end of its stderr:\n" in err.message
    assert err.message.endswith("  | iteration 49\n  | model diverged at step 7")
    assert "iteration 41" in err.message and "iteration 40" not in err.message  # the last 10 lines
    assert "  | …\n" in err.message
    assert "iteration 0" in err.stderr  # all of it is kept on the error


def test_long_stderr_lines_are_cut_to_1000_characters(script):
    box = BlackBox(script("""
        sys.stderr.write("x" * 5000 + "END")
        sys.exit(1)
    """))
    with pytest.raises(ExecError) as info:
        box.run([AT])
    quoted = info.value.message.split("the end of its stderr:\n", 1)[1]
    assert quoted.endswith("xxEND") and len(quoted) < 1100


def test_killed_by_a_signal(script):
    box = BlackBox(script("""
        import signal
        os.kill(os.getpid(), signal.SIGKILL)
    """))
    with pytest.raises(ExecError, match="was killed by signal SIGKILL"):
        box.run([AT])


@pytest.mark.parametrize("body, message", [
    ('print("hello, world")', "printed something that is not JSON"),
    ("pass", "printed nothing on stdout"),
    ("print(json.dumps([1, 2]))", 'not an object with a "results" list'),
    ('print(json.dumps({"values": []}))', 'not an object with a "results" list'),
    ('print(json.dumps({"results": [{"value": 1.0}]}))', "returned 1 result for 2 points"),
    ('print(json.dumps({"results": [1.0, 2.0]}))', 'returned a result 0 that is not an object with a "value"'),
    ('print(json.dumps({"results": [{"value": "one"}, {"value": 2}]}))', 'returned in result 0 a "value" that is not a number or array: "one" is not a number'),
    ('print(json.dumps({"results": [{"value": [[1, 2], [3]]}, {"value": 2}]}))', "ragged"),
    ('print(json.dumps({"results": [{"value": 1.0}, {"value": [1.0, 2.0]}]}))',
     r"returned a value of shape \(2,\) in result 1, but of shape \(\) in result 0"),
    ('print(json.dumps({"results": [{"value": 1.0, "gradient": {"x": [1, 2]}}, {"value": 2}]}))',
     r"returned in result 0 a gradient for 'x' of shape \(2,\), but 'x' has shape \(3,\);"),
    ('print(json.dumps({"results": [{"value": [1.0, 2.0], "gradient": {"x": [1, 2, 3]}}, '
     '{"value": [1.0, 2.0]}]}))', r"expected value.shape \+ input.shape = \(2, 3\)"),
    ('print(json.dumps({"results": [{"value": 1.0, "gradient": {"z": 1}}, {"value": 2}]}))',
     r"returned in result 0 a gradient for 'z', which is not an input \(the inputs sent are: x, y\)"),
    ('print(json.dumps({"results": [{"value": 1.0, "gradient": [1]}, {"value": 2}]}))',
     'returned in result 0 a "gradient" that is not an object'),
])
def test_protocol_violations(script, body, message):
    box = BlackBox(script('sys.stdin.read(); print("some diagnostics", file=sys.stderr)\n' + body))
    with pytest.raises(ExecError, match=message) as info:
        box.run([AT, AT])
    assert info.value.message.endswith("the end of its stderr:\n  | some diagnostics")
    assert "samples/blackbox/README.md" in info.value.hint


def test_empty_stderr_is_said(script):
    with pytest.raises(ExecError, match=r"printed nothing on stdout \(its stderr is empty\)$"):
        BlackBox(script("pass")).run([AT])


def test_timeout_kills_the_program_and_its_children(script, tmp_path):
    pids = tmp_path / "pids"
    box = BlackBox(script(f"""
        import subprocess
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{child.pid}}")
        print("starting the slow solve", file=sys.stderr, flush=True)
        child.wait()
    """), timeout=1)
    start = time.monotonic()
    with pytest.raises(ExecError) as info:
        box.run([AT])
    assert time.monotonic() - start < 25  # (killed at its timeout: its child sleeps 30 s)
    err = info.value
    assert "ran past --exec-timeout 1 seconds and was stopped" in err.message
    assert err.message.endswith("  | starting the slow solve")
    assert err.returncode is None and "--exec-timeout" in err.hint
    time.sleep(0.1)
    for pid in map(int, pids.read_text().split()):
        assert not _alive(pid), pid


def test_a_program_that_prints_without_end_is_stopped_at_the_answers_bound(script, monkeypatch):
    # (`yes` as a black box filled 24 GB before the kernel killed gradcalc)
    import gradcalc.blackbox as bb
    monkeypatch.setattr(bb, "MAX_ANSWER_BYTES", 1 << 20)
    box = BlackBox(script("""
        print("writing", file=sys.stderr, flush=True)
        while True:
            sys.stdout.write("y" * 65536)
    """), timeout=30)
    start = time.monotonic()
    with pytest.raises(ExecError) as info:
        box.run([AT])
    assert time.monotonic() - start < 60  # (a hang guard: it filled memory before)
    assert "printed more than 1 MiB on stdout and was stopped" in info.value.message
    assert info.value.message.endswith("  | writing")


def test_a_program_that_floods_stderr_keeps_its_end_alone(script):
    box = BlackBox(script("""
        for i in range(10 ** 9):
            print(f"line {i}", file=sys.stderr)
    """), timeout=1)
    with pytest.raises(ExecError) as info:
        box.run([AT])
    assert "ran past --exec-timeout 1 seconds" in info.value.message
    assert len(box.last_stderr) <= 1 << 16 and box.last_stderr.rstrip().split("\n")[-1].startswith("line ")


def _alive(pid: int) -> bool:
    """True if pid runs (a zombie left to init, whose parent we are not, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


# -- finite differences -----------------------------------------------------------

@pytest.mark.parametrize("method, rtol", [("richardson", 1e-10), ("central", 1e-8), ("forward", 1e-6)])
def test_fd_gradient_matches_the_closed_form_in_one_request(method, rtol):
    box = model()
    grad = fd_gradient(box, AT, method)
    err, value = grad.error_estimate, grad.value
    assert box.requests == 1
    f, gx, gy = closed_form(AT["x"], 1.5)
    assert value == pytest.approx(f, rel=1e-14)
    assert grad["x"].shape == (3,) and grad["y"].shape == () and err["x"].shape == (3,)
    np.testing.assert_allclose(grad["x"], gx, rtol=rtol)
    assert grad["y"] == pytest.approx(gy, rel=rtol)
    # the error estimate bounds the actual error
    assert np.all(np.abs(grad["x"] - gx) <= err["x"]) and abs(grad["y"] - gy) <= err["y"]


def test_fd_gradient_is_richardson_by_default_and_sends_every_point_at_once(script, tmp_path):
    log = tmp_path / "request.json"
    box = BlackBox(script(f"""
        req = sys.stdin.read()
        open({str(log)!r}, "w").write(req)
        pts = json.loads(req)["points"]
        # f(a, b) = 3 sum(a) + b^2 (exact for the stencils: linear in a, quadratic in b)
        val = lambda p: 3 * sum(p["a"]) + p["b"] ** 2
        print(json.dumps({{"results": [{{"value": val(p)}} for p in pts]}}))
    """))
    grad = fd_gradient(box, {"a": [1.0, 2.0], "b": 0.75}, wrt=["a", "b"])
    value = grad.value
    assert box.requests == 1
    pts = json.loads(log.read_text())["points"]
    assert len(pts) == 1 + 4 * (2 + 1)  # the point, then x ± h, x ± h/2 for each element
    assert pts[0] == {"a": [1.0, 2.0], "b": 0.75}
    np.testing.assert_allclose(grad["a"], [3.0, 3.0], rtol=1e-12)
    assert grad["b"] == pytest.approx(1.5, rel=1e-12) and value == 3 * 3.0 + 0.5625


def test_fd_gradient_wrt_a_subset():
    box = model()
    grad = fd_gradient(box, AT, wrt="y")
    err = grad.error_estimate
    assert list(grad) == ["y"] and list(err) == ["y"]
    with pytest.raises(UsageError, match="--wrt 'z' is not one of the inputs"):
        fd_gradient(box, AT, wrt=["z"])


def test_fd_gradient_needs_a_scalar_value(script):
    box = BlackBox(script("""
        pts = json.load(sys.stdin)["points"]
        print(json.dumps({"results": [{"value": [p["t"], 2 * p["t"]]} for p in pts]}))
    """))
    with pytest.raises(ShapeError, match=r"needs a scalar output, but the program's value has shape \(2,\)"):
        fd_gradient(box, {"t": 1.0})


@pytest.mark.parametrize("method", ["complex", "backward"])
def test_unsupported_methods(method):
    with pytest.raises(UsageError, match=f"method '{method}'"):
        fd_gradient(model(), AT, method)
    with pytest.raises(UsageError, match=f"method '{method}'"):
        check_blackbox(model(), AT, method)


# -- check --exec: reported gradient against finite differences ----------------------

@pytest.mark.parametrize("method", FD_METHODS)
def test_check_blackbox_passes_a_correct_program(method):
    box = model()
    results = check_blackbox(box, AT, method).results
    assert box.requests == 1
    assert [(r.wrt, r.ok, r.method, r.of, r.point) for r in results] == \
        [("x", True, method, "value", 0), ("y", True, method, "value", 0)]
    assert all(r.max_rel_err < TOLERANCES[method][0] / 10 for r in results)


def test_check_blackbox_default_is_richardson_and_tight():
    results = check_blackbox(model(), AT).results
    assert all(r.method == "richardson" and r.ok for r in results)
    assert max(r.max_rel_err for r in results) < 1e-10
    assert results[0].source.endswith("model.py") and results[0].step == 2 ** -9  # 2 * eps^(1/5)


@pytest.mark.parametrize("method", FD_METHODS)
def test_check_blackbox_catches_a_gradient_1_percent_off(method):
    results = check_blackbox(model("--wrong-gradient"), AT, method, label="model").results
    assert [r.ok for r in results] == [False, False]
    f, gx, gy = closed_form(AT["x"], 1.5)
    # relative error |1.01 g - g| / |1.01 g| = 0.01 / 1.01, the worst entry the largest one
    for r in results:
        assert r.max_rel_err == pytest.approx(0.01 / 1.01, rel=1e-3)
        assert r.source == "model" and not any("uncertain" in n for n in r.notes)
    assert results[0].max_abs_err == pytest.approx(0.01 * np.max(np.abs(gx)), rel=1e-3)
    assert results[0].worst_index == [2]
    assert results[1].max_abs_err == pytest.approx(0.01 * gy, rel=1e-3)


def test_check_blackbox_without_a_gradient_fails():
    results = check_blackbox(model("--no-gradient"), AT).results
    assert [r.ok for r in results] == [False, False]
    assert results[0].notes == ["the program reports no gradient"]


def test_check_blackbox_several_points_in_one_request():
    box = model()
    pts = [AT, {"x": np.array([1.0, 2.0, 3.0]), "y": np.array(-0.5)}]
    results = check_blackbox(box, pts).results
    assert box.requests == 1
    assert [(r.point, r.wrt, r.ok) for r in results] == [(0, "x", True), (0, "y", True),
                                                         (1, "x", True), (1, "y", True)]


def test_check_blackbox_notes_noisy_values(script):
    # values printed with 7 significant digits: the finite differences cannot be trusted
    box = script("""
        import math
        pts = json.load(sys.stdin)["points"]
        print(json.dumps({"results": [{"value": float(f"{math.sin(p['t']):.7g}"),
                                       "gradient": {"t": math.cos(p["t"])}} for p in pts]}))
    """)
    (r,) = check_blackbox(BlackBox(box), {"t": 0.3}).results
    assert not r.ok
    assert any("uncertain" in n and "too few digits" in n for n in r.notes)
    assert r.extra["fd_error_estimate"] > 1e-6


SQRT_BOX = """
    import math
    def sqrt(x):
        return math.sqrt(x) if x >= 0 else float("nan")
    xs = [float(p["x"]) for p in json.load(sys.stdin)["points"]]  # (nan comes as "nan")
    print(json.dumps({"results": [{"value": sqrt(x), "gradient": {"x": 0.5 / sqrt(x) if x > 0 else float("nan")}}
                                  for x in xs]}))
"""


@pytest.mark.parametrize("x", [-1.0, math.nan])
def test_a_non_finite_reported_gradient_fails_even_against_nan_differences(script, x):
    # SPEC §7: check counts a non-finite derivative as a failure; nan against nan passed
    box = BlackBox(script(SQRT_BOX))
    (r,) = check_blackbox(box, {"x": x}).results
    assert not r.ok and "non-finite derivative" in r.notes and r.extra["bound"] == "finite"
    (_, g) = check_against_source(box, trace(gradcalc.parse("sqrt(x)"), {"x": x}),
                                  wrt=["x"]).results
    assert not g.ok and "non-finite derivative" in g.notes
    # and where sqrt is defined, 1 / (2 sqrt(4)) = 0.25 passes both ways
    assert check_blackbox(box, {"x": 4.0}).ok
    assert check_against_source(box, trace(gradcalc.parse("sqrt(x)"), {"x": 4.0})).ok


def test_fd_gradient_warns_of_non_finite_values_as_evaluation_does(script):
    box = BlackBox(script(SQRT_BOX))
    r = fd_gradient(box, {"x": -1.0})
    assert math.isnan(r["x"])
    assert r.warnings == ["the program's value at the point is nan",
                          "the finite-difference derivative with respect to 'x' is nan: the program's "
                          "values near the point are not finite"]
    # at 0 the value is finite, the differences reach x < 0
    assert fd_gradient(box, {"x": 0.0}).warnings == r.warnings[1:]
    assert fd_gradient(box, {"x": 4.0}).warnings == []


def test_check_blackbox_partial_gradient(script):
    box = BlackBox(script("""
        pts = json.load(sys.stdin)["points"]
        print(json.dumps({"results": [{"value": p["a"] * p["b"], "gradient": {"a": p["b"]}} for p in pts]}))
    """))
    a, b = check_blackbox(box, {"a": 2.0, "b": 3.0}).results
    assert a.ok and not b.ok and b.notes == ["the program reports no gradient for 'b'"]


def test_check_blackbox_vector_value_is_checked_as_a_jacobian(script):
    box = BlackBox(script("""
        import math
        pts = json.load(sys.stdin)["points"]
        out = []
        for p in pts:
            t = p["t"]
            out.append({"value": [math.sin(t[0]) * t[1], t[0] + t[1]],
                        "gradient": {"t": [[math.cos(t[0]) * t[1], math.sin(t[0])], [1, 1]]}})
        print(json.dumps({"results": out}))
    """))
    (r,) = check_blackbox(box, {"t": [0.3, 2.0]}).results
    assert r.ok and r.max_rel_err < 1e-10


# -- check SOURCE --exec: program against gradcalc ----------------------------------

def test_check_against_source_passes_for_model_grad():
    box = model()
    results = check_against_source(box, traced_model()).results
    assert box.requests == 1
    assert [(r.method, r.of, r.wrt, r.ok) for r in results] == [
        ("exec value", "f", "", True), ("exec gradient", "f", "x", True),
        ("exec gradient", "f", "y", True)]
    assert all(r.max_rel_err < 1e-14 for r in results)
    assert results[0].source == str(MODEL_GRAD) and results[0].extra["exec"] == box.cmd


def test_check_against_source_catches_a_gradient_1_percent_off():
    results = check_against_source(model("--wrong-gradient"), traced_model(), label="m").results
    value, gx, gy = results
    assert value.ok and not gx.ok and not gy.ok
    assert gx.max_rel_err == pytest.approx(0.01 / 1.01, rel=1e-9)
    assert gx.worst_index == [2] and gx.notes[0].startswith("gradient['x'][2]: program 3.409")
    assert gx.source == "m"


def test_check_against_source_catches_a_wrong_value():
    # the program is missing the log1p term: values and the y-gradient differ, x-gradients agree
    program = gradcalc.parse("input x[3] = [0.5, -1, 2], y = 1.5\nf = y * sum(sin(x)) + sum(x^2)")
    value, gx, gy = check_against_source(model(), trace(program)).results
    assert not value.ok and value.max_abs_err == pytest.approx(math.log1p(1.5 ** 2), rel=1e-12)
    assert value.notes[0].startswith("value: program 7.2495")
    assert gx.ok and not gy.ok


def test_check_against_source_several_points_at_another_point():
    program = gradcalc.parse(MODEL_GRAD.read_text())
    at2 = {"x": np.array([1.0, 2.0, 3.0]), "y": np.array(-0.5)}
    box = model()
    results = check_against_source(box, [trace(program), trace(program, at2)], [None, at2]).results
    assert box.requests == 1 and len(results) == 6 and all(r.ok for r in results)
    assert [r.point for r in results] == [0, 0, 0, 1, 1, 1]


def test_check_against_source_shapes_and_missing_gradients():
    value, gx, gy = check_against_source(model("--no-gradient"), traced_model()).results
    assert value.ok and value.max_rel_err < 1e-14
    assert not gx.ok and gx.notes == ["the program reports no gradient"] and not gy.ok

def test_check_against_source_refuses_a_value_of_another_shape():
    # SPEC §9: a program that returns the wrong shapes is a user error (exit 2), whose message
    # quotes its stderr; it was a failing result (exit 1)
    vec = gradcalc.parse("input x[3] = [0.5, -1, 2], y = 1.5\nf = y * sin(x)")
    with pytest.raises(ExecError) as info:
        check_against_source(model(), trace(vec))
    assert "returned in result 0 a value of shape (), but the program's 'f' has shape (3,)" in info.value.message
    assert info.value.hint == "the black box answers for the output of the program (of)"


def test_check_against_source_refuses_a_disagreeing_point():
    with pytest.raises(UsageError, match="not the one the program was traced at"):
        check_against_source(model(), traced_model(), {"y": 2.0})
    with pytest.raises(UsageError, match="'z' is not an input"):
        check_against_source(model(), traced_model(), {"z": 2.0})


def test_exec_tolerance_is_the_default():
    assert EXEC_TOLERANCE == (1e-8, 1e-10)


# -- through the CLI -----------------------------------------------------------

def _cli(*args):
    from typer.testing import CliRunner

    from gradcalc.cli.app import app
    return CliRunner().invoke(app, list(args))


MODEL_CMD = f"{sys.executable} samples/blackbox/model.py"


def test_cli_grad_exec_gives_gradient_and_error_estimate():
    import json as _json
    res = _cli("grad", "--exec", MODEL_CMD, "--at", "x=[0.5, -1, 2],y=1.5", "-f", "json")
    assert res.exit_code == 0, res.output
    doc = _json.loads(res.stdout)
    x, y = np.array([0.5, -1.0, 2.0]), 1.5
    np.testing.assert_allclose(doc["gradient"]["x"], y * np.cos(x) + 2 * x, rtol=1e-9)
    np.testing.assert_allclose(doc["gradient"]["y"], np.sin(x).sum() + 2 * y / (1 + y * y), rtol=1e-9)
    assert doc["method"] == "richardson" and doc["requests"] == 1
    assert all(e < 1e-6 for e in doc["error_estimate"]["x"])


def test_cli_check_exec_passes_and_fails_on_a_one_percent_error():
    assert _cli("check", "--exec", MODEL_CMD, "--at", "x=[0.5, -1, 2],y=1.5").exit_code == 0
    res = _cli("check", "--exec", MODEL_CMD + " --wrong-gradient", "--at", "x=[0.5, -1, 2],y=1.5")
    assert res.exit_code == 1
    assert _cli("check", "samples/blackbox/model.grad", "--exec", MODEL_CMD).exit_code == 0
    assert _cli("check", "samples/blackbox/model.grad", "--exec",
                MODEL_CMD + " --wrong-gradient").exit_code == 1


def test_cli_exec_failure_is_a_user_error_quoting_stderr(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text("import sys\nsys.stderr.write('model exploded\\n')\nsys.exit(4)\n")
    res = _cli("grad", "--exec", f"{sys.executable} {script}", "--at", "x=1")
    assert res.exit_code == 2
    assert "exited with status 4" in res.stderr and "model exploded" in res.stderr


@pytest.mark.parametrize("flag, hint", [
    (["--points", "2"], "check --exec compares the black box's gradient with its own finite differences "
                        "at the --at point"),
    (["--method", "central", str(MODEL_GRAD)], "check SOURCE --exec compares values, so it takes no --method"),
])
def test_check_exec_refuses_flags_that_do_not_apply_with_the_right_hint(flag, hint):
    # the hint for --points used to talk about --method
    from typer.testing import CliRunner

    from gradcalc.cli.app import app
    args = ["check", *flag[2:], "--exec", shlex.join([sys.executable, str(MODEL)]),
            "--at", "x=[0.5,-1,2],y=1.5", *flag[:2]]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    assert f"hint: {hint}" in r.stderr


@pytest.mark.parametrize("tol", [{"rtol": -5.0}, {"atol": -1.0}, {"rtol": math.nan}, {"atol": math.inf}])
def test_both_exec_checks_refuse_the_tolerances_plain_check_refuses(tol):
    # a negative tolerance passed a sign-flipped gradient (exit 0); plain check refused it
    (name, v), = tol.items()
    message = f"{name} must be a finite non-negative number, not {v}"  # (the library's word: its keyword)
    for run in (lambda: check_blackbox(model("--wrong-gradient"), AT, **tol),
                lambda: check_against_source(model("--wrong-gradient"), traced_model(), **tol),
                lambda: gradcalc.check("x^2", at={"x": 1.0}, **tol)):
        with pytest.raises(UsageError) as e:
            run()
        assert e.value.message == message


def test_cli_exec_checks_refuse_a_negative_tolerance_with_exit_2():
    for source in ([], [str(MODEL_GRAD)]):
        res = _cli("check", *source, "--exec", MODEL_CMD + " --wrong-gradient", "--at", "x=[0.5, -1, 2],y=1.5",
                   "--rtol=-5")
        assert res.exit_code == 2 and "--rtol must be a finite non-negative number, not -5.0" in res.stderr


def test_a_request_over_max_elements_is_refused_before_it_is_built():
    # 1 + 4 * 2000 points of 2000 numbers: 16,002,000 > 10^6 (at n = 20,000, 1.6e9 numbers were
    # built and the process was killed); the program is never started
    from gradcalc.errors import LimitError
    box = model()
    message = ("exec: the request for the finite differences would hold 1.6e+07 numbers (4 perturbed copies "
               "of the point per element differenced), more than max_elements=1000000")  # (the library's words)
    for run in (fd_gradient, check_blackbox):
        with pytest.raises(LimitError) as e:
            run(box, {"x": np.ones(2000), "y": np.array(1.0)}, wrt="x", max_elements=10 ** 6)
        assert e.value.message == message
    assert box.requests == 0
    # AT within the limit: 1 + 4 * (3 + 1) points of 4 numbers
    assert check_blackbox(box, AT, max_elements=68).ok and box.requests == 1
    with pytest.raises(LimitError):
        check_blackbox(box, AT, max_elements=67)


def test_cli_exec_refuses_a_request_over_max_elements_with_exit_2():
    for command in ("grad", "check"):
        res = _cli(command, "--exec", MODEL_CMD, "--at", "x=ones(20000),y=1")
        assert res.exit_code == 2, res.output
        assert "would hold 1.6e+09 numbers" in res.stderr and "more than --max-elements=100000000" in res.stderr


def test_a_failing_black_box_alone_is_reported_in_junit_and_annotated(tmp_path, monkeypatch):
    # check --exec CMD (no SOURCE) wrote no --junit-xml file and no annotation when the program
    # failed: now an error result, as check SOURCE --exec reports it
    import xml.etree.ElementTree as ET
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nsys.stderr.write('model exploded\\n')\nsys.exit(4)\n")
    cmd = f"{sys.executable} {bad}"
    xml = tmp_path / "r.xml"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    res = _cli("check", "--exec", cmd, "--at", "x=1", "--junit-xml", str(xml), "-f", "plain")
    assert res.exit_code == 2
    assert "exited with status 4" in res.stderr and "model exploded" in res.stderr
    suite = ET.parse(xml).getroot()
    assert (suite.get("tests"), suite.get("errors"), suite.get("failures")) == ("1", "1", "0")
    assert "exited with status 4" in suite.find("testcase/error").get("message")
    assert "::error title=gradcalc check%3A value error::" in res.stdout
    # a black box that answers is reported as before: its results, exit 0 or 1
    assert _cli("check", "--exec", MODEL_CMD, "--at", "x=[0.5, -1, 2],y=1.5", "--junit-xml", str(xml)).exit_code == 0
    assert ET.parse(xml).getroot().get("tests") == "2"


def test_check_lines_that_exec_does_not_apply_are_ignored_with_a_note(tmp_path):
    # they were dropped silently (on the command line, the same options are refused)
    src = tmp_path / "model.grad"
    src.write_text("# check: --points 3 --taylor --method complex --rtol 1e-9\n" + MODEL_GRAD.read_text())
    res = _cli("check", str(src), "--exec", MODEL_CMD, "-f", "plain")
    assert res.exit_code == 0, res.output
    assert res.stderr == (f"note: {src}: # check: --method complex, --points 3, --taylor do not apply to "
                          "check SOURCE --exec; ignored\n")
    assert "rtol 1e-09" in res.stdout  # (what applies still does)
    assert _cli("check", str(src), "--exec", MODEL_CMD + " --wrong-gradient").exit_code == 1


@pytest.mark.parametrize("command", ["grad", "check"])
def test_of_is_refused_for_a_black_box_alone(command):
    # it was ignored: check --exec --of foo passed, grad --exec --of foo gave the value's gradient
    res = _cli(command, "--exec", MODEL_CMD, "--at", "x=[0.5, -1, 2],y=1.5", "--of", "foo")
    assert res.exit_code == 2
    assert f"error: --of does not apply to {command} --exec: a black box has one output, its value" in res.stderr
    # with a program, --of names its output: f of samples/blackbox/model.grad
    assert _cli("check", str(MODEL_GRAD), "--exec", MODEL_CMD, "--of", "f").exit_code == 0
