"""Black boxes (SPEC §9): programs in any language that speak JSON on stdin and stdout.

gradcalc starts the program (the command split like a shell would, never run
through a shell) once per request and writes one request on its stdin::

    {"schema": 1, "points": [{"x": [0.5, -1.0, 2.0], "y": 1.5}, ...]}

The program answers with one JSON object on stdout, one result per point, in
order; ``"gradient"`` is optional and holds, for each input, an array of shape
``value.shape + input.shape`` (the input's shape for a scalar value)::

    {"results": [{"value": 2.31, "gradient": {"x": [...], "y": 0.58}}, ...]}

Arrays are nested lists (scalars plain numbers); non-finite numbers may be
written as the strings ``"nan"``, ``"inf"``, ``"-inf"`` both ways.

Every estimate sends all the points it needs in one request: a black box pays
for a process start (an interpreter, a model loading its data), rarely for one
more point.  A program that cannot be started is a :class:`UsageError`; one
that exits non-zero, runs past its timeout or answers something other than the
protocol is an :class:`ExecError` (a :class:`ValueError_`) whose message
quotes the end of its stderr.  Both are user errors (exit status 2).

Finite differences (``fd_gradient``, ``check_blackbox``) perturb one element
at a time, with the steps and formulas of :mod:`.stencil`, and always evaluate
the difference at two steps, ``h`` and ``h/2``, in the same request, which gives
an error estimate for free (the second table of :mod:`.stencil`).  The complex
step is not offered: it needs complex arithmetic inside the program.
"""
from __future__ import annotations

import json
import math
import os
import shlex
import signal
import subprocess
from typing import Sequence

import numpy as np

from . import stencil
from .checks import (EXEC_TOLERANCE, TOLERANCES, CheckResult, breach, check_result, compare, fail_non_finite,
                     tolerance, unmeasured_errors)
from .codec import JSONNumberError, array_from_json, array_to_json
from .errors import LimitError, ShapeError, UsageError, ValueError_, option
from .results import Result
from .session import jacobian_blocks, select_names, select_output
from .tape import DEFAULT_MAX_ELEMENTS
from .transforms import rows_to_jacobian

SCHEMA = 1
DEFAULT_TIMEOUT = 60.0
#: Finite-difference methods a black box supports (no complex step).
FD_METHODS = stencil.REAL_METHODS
#: The end of a program's stderr quoted in an error: at most this many lines and characters.
STDERR_LINES, STDERR_CHARS = 10, 1000
#: The most a program may print on stdout for one request (some ten million numbers), and the
#: end of its stderr kept: `yes` as a black box filled 24 GB before the kernel killed gradcalc.
MAX_ANSWER_BYTES = 1 << 28
STDERR_KEPT_BYTES = 1 << 16
_PROTOCOL_HINT = ('the program must print one JSON object {"results": [{"value": V, '
                  '"gradient": {NAME: G, ...}}, ...]} with one result per point; '
                  'see samples/blackbox/README.md')


class ExecError(ValueError_):
    """A black box that failed: exited non-zero, ran past its timeout or broke the protocol.

    The message ends with the end of the program's stderr; ``stderr`` holds all
    of it and ``returncode`` its exit status (None if it did not exit by itself).
    """

    def __init__(self, message: str, *, stderr: str = "", returncode: int | None = None,
                 hint: str | None = None):
        super().__init__(message + _quote_stderr(stderr), hint=hint, option="exec")
        self.stderr = stderr
        self.returncode = returncode


def _quote_stderr(stderr: str) -> str:
    text = stderr.rstrip()
    if not text.strip():
        return " (its stderr is empty)"
    lines = text.splitlines()
    tail = "\n".join(lines[-STDERR_LINES:])
    cut = len(lines) > STDERR_LINES
    if len(tail) > STDERR_CHARS:
        tail, cut = tail[-STDERR_CHARS:], True
    quoted = "\n".join("  | " + line for line in tail.splitlines())
    return "; the end of its stderr:\n" + ("  | …\n" if cut else "") + quoted


def _show(cmd: str, limit: int = 100) -> str:
    """A command in quotes that do not clash with its own, long ones shortened."""
    if len(cmd) > limit:
        cmd = cmd[:limit] + "…"
    return f'"{cmd}"' if "'" in cmd and '"' not in cmd else f"'{cmd}'"


def _snippet(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[:limit] + "…")


def _as_point(point, what: str = "a point") -> dict[str, np.ndarray]:
    if not isinstance(point, dict):
        raise UsageError(f"{what} must map input names to values, not {type(point).__name__}")
    return {str(k): np.asarray(v, dtype=np.float64) for k, v in point.items()}


# ==========================================================================
# Running the program
# ==========================================================================

class BlackBox:
    """A program that answers gradcalc's JSON protocol (SPEC §9); see the module docstring.

    ``cmd`` is split like a shell would (``shlex.split``) and run directly,
    never through a shell; a list of arguments is taken as it is.  ``timeout``
    is the limit in seconds for one request (``--exec-timeout``).  ``requests``
    counts the requests made, i.e. the times the program was started;
    ``last_stderr`` holds what it wrote on stderr the last time.
    """

    def __init__(self, cmd: str | Sequence[str], timeout: float = DEFAULT_TIMEOUT):
        if isinstance(cmd, str):
            try:
                argv = shlex.split(cmd)
            except ValueError as err:  # "No closing quotation"
                # (this message and the next are pinned by tests/test_blackbox.py, flag and all)
                raise UsageError(f"--exec: cannot split the command {cmd!r}: {err}", option="exec") from None
            self.cmd = cmd.strip()
        else:
            argv = [str(a) for a in cmd]
            self.cmd = shlex.join(argv)
        if not argv:
            raise UsageError("--exec needs a command", hint=f"for example: {option('exec')} 'python3 model.py'",
                             option="exec")
        try:
            timeout = float(timeout)
        except (TypeError, ValueError):
            raise UsageError(f"{option('exec_timeout')} must be a number of seconds, not {timeout!r}",
                             option="exec_timeout") from None
        if not timeout > 0:  # also refuses nan
            raise UsageError(f"--exec-timeout must be a positive number of seconds, not {timeout:g}",
                             option="exec_timeout")  # (pinned by tests/test_blackbox.py, flag and all)
        self.argv = argv
        self.timeout = timeout
        self.requests = 0
        self.last_stderr = ""

    def __repr__(self):
        return f"BlackBox({self.cmd!r}, timeout={self.timeout:g})"

    def run(self, points: Sequence[dict]) -> list[dict]:
        """Evaluate the program at every point with one request (one start of the program).

        ``points`` is a list of {input name: array}.  Returns one dict per point,
        in order: ``{"value": array, "gradient": {name: array} or None}``, each
        gradient array of shape ``value.shape + input.shape``.  An empty list
        of points returns [] without starting the program.
        """
        points = [_as_point(p) for p in points]
        if not points:
            return []
        request = {"schema": SCHEMA, "points": [{k: array_to_json(v) for k, v in p.items()} for p in points]}
        stdout, stderr = self._call(json.dumps(request, allow_nan=False).encode("utf-8"))
        return self._results(stdout, stderr, points)

    # -- the process ---------------------------------------------------------

    def _fail(self, what: str, stderr: str = "", **kw) -> ExecError:
        return ExecError(f"{option('exec')} {_show(self.cmd)} {what}", stderr=stderr, **kw)

    def _call(self, data: bytes) -> tuple[str, str]:
        """Start the program, write data on its stdin, return (stdout, stderr) text."""
        program = self.argv[0]
        try:
            # a session of its own: on a timeout the whole process group is killed,
            # children the program started included, so nobody keeps our pipes open
            proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=os.name == "posix")
        except FileNotFoundError:
            raise UsageError(f"{option('exec')}: program '{program}' not found", option="exec",
                             hint="check the command, or give the path to the program") from None
        except PermissionError:
            raise UsageError(f"{option('exec')}: cannot run '{program}': permission denied", option="exec",
                             hint="make it executable, or run it through its interpreter "
                                  f"(e.g. {option('exec')} 'python3 model.py')") from None
        except OSError as err:
            raise UsageError(f"{option('exec')}: cannot run '{program}': {err.strerror or err}",
                             option="exec") from None
        self.requests += 1
        try:
            try:
                out, err = _exchange(proc, data, self.timeout)
            except subprocess.TimeoutExpired as late:
                _kill(proc)
                err = (late.stderr or b"") + _drain(proc)[1]  # (what it wrote, then what the pipe held)
                self.last_stderr = _text(err[-STDERR_KEPT_BYTES:])
                # (the message and hint are pinned by tests/test_blackbox.py, flag and all)
                raise self._fail(f"ran past --exec-timeout {self.timeout:g} seconds and was stopped",
                                 self.last_stderr,
                                 hint="give it more time with --exec-timeout SECONDS") from None
            except _TooMuch as much:
                _kill(proc)
                self.last_stderr = _text(much.stderr)
                raise self._fail(f"printed more than {MAX_ANSWER_BYTES >> 20} MiB on stdout and was stopped",
                                 self.last_stderr, hint=_PROTOCOL_HINT) from None
        finally:
            if proc.poll() is None:  # interrupted (Ctrl-C) or failed: leave no process behind
                _kill(proc)
                proc.wait()
        self.last_stderr = _text(err)
        code = proc.returncode
        if code != 0:
            if code < 0:
                try:
                    how = f"was killed by signal {signal.Signals(-code).name}"
                except ValueError:
                    how = f"was killed by signal {-code}"
            else:
                how = f"exited with status {code}"
            raise self._fail(how, self.last_stderr, returncode=code)
        return _text(out), self.last_stderr

    # -- the answer ----------------------------------------------------------

    def _results(self, stdout: str, stderr: str, points: list[dict]) -> list[dict]:
        def fail(what):
            return self._fail(what, stderr, returncode=0, hint=_PROTOCOL_HINT)

        text = stdout.strip()
        if not text:
            raise fail("printed nothing on stdout")
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as err:
            raise fail(f"printed something that is not JSON ({err.msg}: line {err.lineno} column "
                       f"{err.colno}): {_snippet(text)}") from None
        except RecursionError:
            raise fail("printed JSON nested too deeply") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
            raise fail(f'printed JSON that is not an object with a "results" list: {_snippet(text)}')
        results = doc["results"]
        if len(results) != len(points):
            raise fail(f"returned {len(results)} result{'s' * (len(results) != 1)} for "
                       f"{len(points)} point{'s' * (len(points) != 1)}")
        out = []
        vshape = None
        for i, (r, point) in enumerate(zip(results, points)):
            if not isinstance(r, dict) or "value" not in r:
                raise fail(f'returned a result {i} that is not an object with a "value": {_snippet(json.dumps(r))}')
            try:
                value = array_from_json(r["value"])
            except JSONNumberError as err:
                raise fail(f'returned in result {i} a "value" that is not a number or array: {err}') from None
            if vshape is None:
                vshape = value.shape
            elif value.shape != vshape:
                raise fail(f"returned a value of shape {value.shape} in result {i}, but of shape "
                           f"{vshape} in result 0")
            out.append({"value": value, "gradient": self._gradient(r.get("gradient"), i, value,
                                                                   point, fail)})
        return out

    @staticmethod
    def _gradient(g, i, value, point, fail):
        if g is None:
            return None
        if not isinstance(g, dict):
            raise fail(f'returned in result {i} a "gradient" that is not an object {{input name: array}}')
        grad = {}
        for name, data in g.items():
            if name not in point:
                raise fail(f"returned in result {i} a gradient for '{name}', which is not an input "
                           f"(the inputs sent are: {', '.join(point) or 'none'})")
            try:
                a = array_from_json(data)
            except JSONNumberError as err:
                raise fail(f"returned in result {i} a gradient for '{name}' that is not an array of numbers: "
                           f"{err}") from None
            xshape = point[name].shape
            want = value.shape + xshape
            if a.shape != want:
                if value.size == 1 and a.shape == xshape:  # a value of shape (1,): accept x's shape
                    a = a.reshape(want)
                else:
                    of_what = f"'{name}' has shape {xshape}" + \
                        (f" and the value {value.shape}; expected value.shape + input.shape = {want}"
                         if value.ndim else "")
                    raise fail(f"returned in result {i} a gradient for '{name}' of shape {a.shape}, but "
                               f"{of_what}")
            grad[name] = a
        return grad


def _text(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", errors="replace")


def _kill(proc: subprocess.Popen) -> None:
    """Kill the program and everything it started (its process group); it must not be reaped yet."""
    try:
        if os.name == "posix":
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    except (ProcessLookupError, PermissionError):
        pass  # already gone


def _drain(proc: subprocess.Popen) -> tuple[bytes, bytes]:
    """What a killed program wrote before it died (what is left in the pipes, within the same
    bounds); reaps it."""
    try:
        return _exchange(proc, b"", 5.0)
    except (subprocess.TimeoutExpired, _TooMuch):  # a process outside the group holds the pipes
        for f in (proc.stdin, proc.stdout, proc.stderr):
            if f and not f.closed:
                f.close()
        proc.wait()
        return b"", b""


class _TooMuch(Exception):
    """A program printed more than MAX_ANSWER_BYTES on stdout; ``stderr``: the end of its stderr."""

    def __init__(self, stderr: bytes):
        super().__init__()
        self.stderr = stderr


#: The longest one wait for the black box's pipes lasts, in seconds: the system's poll takes at most
#: about 2^31 ms, so a longer --exec-timeout (1e10, inf) waits in turns of this (it overflowed).
_LONGEST_WAIT = 3600.0


def _exchange(proc: subprocess.Popen, data: bytes, timeout: float) -> tuple[bytes, bytes]:
    """proc.communicate(data, timeout), within bounds: stdout up to MAX_ANSWER_BYTES (past it,
    _TooMuch), the last STDERR_KEPT_BYTES of stderr, and the time: TimeoutExpired past it,
    whether the program is still writing or has closed its pipes and not exited.  One loop over
    the three pipes (as communicate's), so that neither side waits on a full pipe."""
    import select
    import selectors
    import time
    piece = getattr(select, "PIPE_BUF", 512)  # (what a write to a pipe select calls writable takes whole)
    deadline = time.monotonic() + timeout
    out, err, sent = bytearray(), bytearray(), 0
    with selectors.DefaultSelector() as pipes:
        if proc.stdin and not proc.stdin.closed:
            if data:
                pipes.register(proc.stdin, selectors.EVENT_WRITE)
            else:
                proc.stdin.close()
        for f in (proc.stdout, proc.stderr):
            if f and not f.closed:
                pipes.register(f, selectors.EVENT_READ)
        while pipes.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(proc.args, timeout, bytes(out), bytes(err[-STDERR_KEPT_BYTES:]))
            for key, _ in pipes.select(min(left, _LONGEST_WAIT)):
                f = key.fileobj
                if f is proc.stdin:
                    try:
                        sent += os.write(f.fileno(), data[sent:sent + piece])
                    except BrokenPipeError:  # (it stopped reading: its answer says why)
                        sent = len(data)
                    if sent >= len(data):
                        pipes.unregister(f)
                        f.close()
                    continue
                chunk = os.read(f.fileno(), 1 << 16)
                if not chunk:
                    pipes.unregister(f)
                    f.close()
                elif f is proc.stdout:
                    out += chunk
                    if len(out) > MAX_ANSWER_BYTES:
                        raise _TooMuch(bytes(err))
                else:
                    err += chunk
                    if len(err) > 2 * STDERR_KEPT_BYTES:
                        del err[:-STDERR_KEPT_BYTES]
    try:
        proc.wait(max(deadline - time.monotonic(), 0.0))
    except subprocess.TimeoutExpired as late:  # (its pipes closed, but it has not exited)
        late.stderr = bytes(err[-STDERR_KEPT_BYTES:])
        raise
    return bytes(out), bytes(err[-STDERR_KEPT_BYTES:])


# ==========================================================================
# Finite differences of a black box
# ==========================================================================

def _check_method(method: str) -> None:
    if method not in FD_METHODS:
        hint = ("the complex step needs complex arithmetic inside the program; "
                if method == "complex" else "") + f"use one of: {', '.join(FD_METHODS)}"
        raise UsageError(f"{option('exec')}: unknown or unsupported finite-difference method '{method}'",
                         hint=hint, option="method")


def _wrt(point: dict, wrt) -> list[str]:
    if wrt is None:
        return list(point)
    names = [wrt] if isinstance(wrt, str) else list(wrt)
    out = []
    for w in names:
        if w not in point:
            # (the message is pinned word for word by tests/test_blackbox.py, flag and all)
            raise UsageError(f"--wrt '{w}' is not one of the inputs given to the program",
                             hint=f"the inputs are: {', '.join(point) or 'none'}", name=w, option="wrt")
        if w not in out:
            out.append(w)
    return out


def _refuse_a_large_request(points: list[dict], wrts: list[list[str]], method: str, max_elements: int) -> None:
    """Refuse, before it is built, a request of more than max_elements numbers: each point goes
    with len(offsets) perturbed copies of itself per element of each wrt input (see _Stencil),
    so an input of n elements sends some 4 n^2 numbers (n = 20,000: 1.6e9)."""
    total = 0
    for at, wrt in zip(points, wrts):
        copies = 1 + len(stencil.offsets(method, with_error=True)) * sum(at[w].size for w in wrt)
        total += copies * max(1, sum(v.size for v in at.values()))
    if total > max_elements:
        raise LimitError(f"{option('exec')}: the request for the finite differences would hold {float(total):.3g} "
                         f"numbers ({len(stencil.offsets(method, with_error=True))} perturbed copies of the point "
                         f"per element differenced), more than {option('max_elements')}={max_elements}",
                         hint=f"differentiate fewer inputs ({option('wrt')}) or raise {option('max_elements')}",
                         option="max_elements")


class _Stencil:
    """The perturbed points of one finite-difference estimate at one point, for every wrt input:
    the point itself first, then stencil.offsets(method, with_error=True) for each input."""

    def __init__(self, at: dict, wrt: list[str], method: str, requests: list):
        self.at, self.wrt, self.method = at, wrt, method
        self.base = len(requests)
        requests.append(at)
        self.parts = {}  # w -> (step h, [actual offsets per scale], first request index)
        for w in wrt:
            x = at[w]
            h = np.broadcast_to(stencil.default_step(x, method), x.shape)
            start = len(requests)
            batch, taken = stencil.perturb(x.ravel(), h.ravel(), stencil.offsets(method, with_error=True))
            requests.extend({**at, w: r.reshape(x.shape)} for r in batch)
            self.parts[w] = (h, taken, start)

    def solve(self, results: list[dict]):
        """(value, {w: estimate}, {w: error estimate}, {w: step}); estimates of shape
        value.shape + w.shape."""
        value = results[self.base]["value"]
        est, err, steps = {}, {}, {}
        with np.errstate(all="ignore"):
            for w in self.wrt:
                h, taken, start = self.parts[w]
                x = self.at[w]
                n = x.size
                blocks = [np.stack([results[start + k * n + i]["value"] for i in range(n)])
                          if n else np.zeros((0,) + value.shape) for k in range(len(taken))]
                e, r = stencil.combine(self.method, blocks, taken, value, with_error=True)
                est[w] = rows_to_jacobian(e, value.shape, x.shape)
                err[w] = rows_to_jacobian(r, value.shape, x.shape)
                steps[w] = np.array(h)
        return value, est, err, steps


def fd_gradient(box: BlackBox, at: dict, method: str = "richardson", wrt=None, *,
                label: str | None = None, max_elements: int = DEFAULT_MAX_ELEMENTS) -> Result:
    """The finite-difference gradient of a black box's scalar value (``grad --exec``).

    ``at`` is the point {input name: array} (every input the program needs);
    ``wrt`` a name or list of names among them (default: all, in order).  All
    the perturbed points go to the program in one request.  Returns a Result:
    {name: array of the input's shape}, with ``command`` "grad", ``of``
    "value", ``at`` (the point), ``value`` (the value at ``at``), ``error_estimate`` ({name: array},
    per element, see :mod:`.stencil`), ``method``, ``exec`` (``label``, by
    default the command), ``requests`` (the box's count so far), ``unconnected``
    (empty) and ``warnings`` (a value or estimate that is not finite).  A value
    that is not a scalar is a ShapeError; a request of more than ``max_elements``
    numbers is refused (LimitError) before it is built.
    """
    _check_method(method)
    at = _as_point(at, f"the point ({option('at')})")
    wrt = _wrt(at, wrt)
    _refuse_a_large_request([at], [wrt], method, max_elements)
    requests: list = []
    estimate = _Stencil(at, wrt, method, requests)
    results = box.run(requests)
    value = results[0]["value"]
    if value.size != 1:
        raise ShapeError(f"grad {option('exec')} needs a scalar output, but the program's value has shape "
                         f"{value.shape}",
                         hint="use 'gradcalc check --exec' to check the Jacobian it reports", option="exec")
    _, est, err, _ = estimate.solve(results)
    shape = {w: at[w].shape for w in wrt}
    return Result({w: est[w].reshape(shape[w]) for w in wrt}, command="grad", of="value", at=at,
                  value=value, error_estimate={w: err[w].reshape(shape[w]) for w in wrt}, method=method,
                  exec=box.cmd if label is None else label, requests=box.requests, unconnected=[],
                  warnings=_non_finite_warnings(value, est))


def _non_finite_warnings(value: np.ndarray, est: dict) -> list[str]:
    """The warnings of grad --exec, as evaluation's (SPEC §7): a value or an estimate that is
    nan or inf, named (a black box's operations are not ours to name)."""
    def kind(a):
        return "nan" if np.isnan(a).any() else "inf"

    found = [] if np.isfinite(value).all() else [f"the program's value at the point is {kind(value)}"]
    return found + [f"the finite-difference derivative with respect to '{w}' is {kind(e)}: the program's "
                    "values near the point are not finite" for w, e in est.items() if not np.isfinite(e).all()]


def check_blackbox(box: BlackBox, at, method: str = "richardson", rtol: float | None = None,
                   atol: float | None = None, label: str | None = None, *, wrt=None,
                   of: str = "value", max_elements: int = DEFAULT_MAX_ELEMENTS) -> Result:
    """The gradient a black box reports against finite differences of the values it reports.

    ``at`` is one point {name: array} or a list of points (numbered 0, 1, ...
    in the results); one request carries every point with all its perturbed
    points, and the program's answer at each point itself supplies the
    reported gradient.  Returns what ``check`` returns: a Result whose
    ``results`` hold one CheckResult per point and ``wrt`` input (default: all
    inputs), with ``of`` as the output's name and ``label`` (default: the
    command) as the source, whose ``ok`` says whether all pass, and whose
    ``rtol`` and ``atol`` are the tolerances applied.  A value that is not a
    scalar is checked as a Jacobian of shape value.shape + input.shape.

    Richardson by default, unlike ``check`` of a program: one request costs
    the same whatever the number of points, and its far smaller error (about
    1e-12 against 1e-10 for central differences on smooth float64 programs)
    allows the tight default tolerance checks.TOLERANCES["richardson"].
    Tolerances default per method from checks.TOLERANCES.  A result fails
    when the program reports no gradient for the input, or a non-finite one.
    When a result fails and the finite differences' own error estimate is
    larger than the tolerance, a note says so (noisy or imprecisely printed
    values); the estimate is in ``extra["fd_error_estimate"]``.  A request of more
    than ``max_elements`` numbers is refused (LimitError) before it is built.
    """
    _check_method(method)
    pts = [at] if isinstance(at, dict) else list(at)
    pts = [_as_point(p, f"the point ({option('at')})") for p in pts]
    tol = tolerance(TOLERANCES[method], rtol, atol)
    label = box.cmd if label is None else label
    wrts = [_wrt(p, wrt) for p in pts]
    _refuse_a_large_request(pts, wrts, method, max_elements)
    requests: list = []
    stencils = [_Stencil(p, w, method, requests) for p, w in zip(pts, wrts)]
    results = box.run(requests)
    out = []
    for p, st in enumerate(stencils):
        value, est, err, steps = st.solve(results)
        reported = results[st.base]["gradient"]
        for w in st.wrt:
            step = float(np.max(steps[w])) if steps[w].size else 0.0
            if reported is None or w not in reported:
                why = ("the program reports no gradient" if reported is None else
                       f"the program reports no gradient for '{w}'")
                out.append(CheckResult(label, p, of, w, math.inf, math.inf, [], method, step, False,
                                       [why]))
                continue
            out.append(_against_differences(label, p, of, w, reported[w], est[w], err[w], method, step, tol))
    return check_result(out, tol, "exec")


def _against_differences(label, p, of, w, ad, fd, e, method, step, tol) -> CheckResult:
    """The reported gradient ad against the finite differences fd, whose error estimate is e."""
    ok, mabs, mrel, worst = compare(ad, fd, *tol)
    notes, extra = [], {}
    ok, worst = fail_non_finite(ad, fd, ok, worst, tol, notes, extra)
    mabs, mrel = unmeasured_errors(ad, fd, mabs, mrel)
    if not np.isfinite(fd).all():
        notes.append("non-finite finite differences: the program's values are not "
                     "finite near the point")
    if not ok and np.isfinite(fd).all() and np.isfinite(ad).all():
        # say so when the estimate's own error could explain the mismatch
        i = tuple(worst)
        uncertain, fdi = float(e[i]), float(fd[i])
        if uncertain > tol[1] + tol[0] * abs(fdi) and uncertain >= 0.1 * abs(float(ad[i]) - fdi):
            notes.append(f"the finite differences are themselves uncertain by up to ~{uncertain:.2g} here (a "
                         "bound), as much as the mismatch, so they cannot tell it from their own error: the bound "
                         "is wide where the program's values are noisy or printed with too few digits")
    fd_err = float(np.max(e)) if e.size else 0.0
    extra = {"fd_error_estimate": fd_err} | (extra or ({} if ok else breach(ad, fd, worst, *tol)))
    return CheckResult(label, p, of, w, mabs, mrel, worst, method, step, ok, notes, extra)


# ==========================================================================
# A black box against gradcalc's own derivatives of a program
# ==========================================================================

def check_against_source(box: BlackBox, traced, at=None, rtol: float | None = None,
                         atol: float | None = None, label: str | None = None, *, of=None,
                         wrt=None) -> Result:
    """A black box's value and gradient against gradcalc's evaluation and reverse mode of a program.

    ``traced`` is a gradcalc.lower.Traced (or a list of them, one per point,
    numbered 0, 1, ... in the results; all sent in one request).  The program
    receives every input of the traced program at its traced value (defaults
    included); ``at`` (a dict, or a list matching ``traced``) may restate some
    of them, and must then agree with the traced values.  ``of`` names the
    output (default: the program's last statement), ``wrt`` the inputs to
    compare gradients for (default: all).

    Returns what ``check`` returns: a Result whose ``results`` hold, per
    point, one CheckResult with method "exec value" (the program's value
    against the output's, ``wrt`` empty) and one with method "exec gradient"
    per input; whose ``ok`` says whether all pass; and whose ``rtol`` and
    ``atol`` are the tolerances applied (by default checks.EXEC_TOLERANCE: two
    float64 implementations of one function).  A missing gradient fails.
    """
    tr_list = [traced] if not isinstance(traced, (list, tuple)) else list(traced)
    at_list = [at] * len(tr_list) if at is None or isinstance(at, dict) else list(at)
    if len(at_list) != len(tr_list):
        raise UsageError(f"check_against_source: {len(at_list)} points for {len(tr_list)} traced programs")
    tol = tolerance(EXEC_TOLERANCE, rtol, atol)
    plans = [_plan(tr, given, of, wrt) for tr, given in zip(tr_list, at_list)]
    results = box.run([point for point, _ in plans])
    name = label if label is not None else tr_list[0].program.source.label
    extra = {"exec": box.cmd}
    checks = []
    with np.errstate(all="ignore"):
        for p, ((_, (tr, out, ws)), res) in enumerate(zip(plans, results)):
            ref = tr.value(out)
            if res["value"].shape != ref.shape:  # (SPEC §9: wrong shapes are the user's error, exit 2)
                raise box._fail(f"returned in result {p} a value of shape {res['value'].shape}, but the "
                                f"program's '{out}' has shape {ref.shape}", box.last_stderr, returncode=0,
                                hint=f"the black box answers for the output of the program ({option('of')})")
            checks.append(_against(name, p, out, "", res["value"], ref, "exec value", tol, extra, "value"))
            blocks = jacobian_blocks(tr, [out], ws, "rev")[out]
            for w in ws:
                ref_g = blocks[w]
                ref_g = np.zeros(ref.shape + tr.value(w).shape) if ref_g is None else ref_g
                g = res["gradient"]
                if g is None or w not in g:
                    why = ("the program reports no gradient" if g is None else
                           f"the program reports no gradient for '{w}'")
                    checks.append(CheckResult(name, p, out, w, math.inf, math.inf, [], "exec gradient",
                                              0.0, False, [why], dict(extra)))
                    continue
                checks.append(_against(name, p, out, w, g[w], ref_g, "exec gradient", tol, extra,
                                       "gradient"))
    return check_result(checks, tol, "exec")


def _plan(tr, given, of, wrt):
    """(the point sent to the program, (tr, the output, the inputs to compare gradients for)):
    every input of tr at its traced value, which given (a dict or None) may restate."""
    point = {info.name: tr.value(info.name) for info in tr.inputs}
    for name, v in _as_point(given or {}, f"the point ({option('at')})").items():
        if name not in point:
            raise UsageError(f"'{name}' is not an input of the program", name=name)
        if v.shape != point[name].shape or not np.array_equal(v, point[name], equal_nan=True):
            raise UsageError(f"the value given for '{name}' is not the one the program was traced at",
                             name=name)
    out = select_output(tr, of)
    ws = select_names(tr, wrt, option("wrt"), tr.tape.inputs)
    for w in ws:
        if w not in tr.tape.inputs:
            raise UsageError(f"{option('exec')} compares gradients with respect to inputs, and '{w}' is an "
                             "intermediate value", hint="the program only sees the inputs", name=w,
                             option="wrt")
    return point, (tr, out, ws)


def _against(name, p, out, w, got, ref, method, tol, extra, what) -> CheckResult:
    if got.shape != ref.shape:
        return CheckResult(name, p, out, w, math.inf, math.inf, [], method, 0.0, False,
                           [f"the program's {what} has shape {got.shape}, gradcalc's {ref.shape}"],
                           dict(extra))
    ok, mabs, mrel, worst = compare(got, ref, *tol)
    notes = []
    if what == "gradient":  # (as gradcalc's own check: a non-finite derivative fails, nan against nan too)
        ok, worst = fail_non_finite(got, ref, ok, worst, tol, notes)
        mabs, mrel = unmeasured_errors(got, ref, mabs, mrel)
    if not ok and ref.size:
        idx = "".join(f"[{i}]" for i in worst)
        entry = f"{what}['{w}']{idx}" if w else f"{what}{idx}"
        notes.append(f"{entry}: program {float(got[tuple(worst)])!r}, gradcalc {float(ref[tuple(worst)])!r}")
    return CheckResult(name, p, out, w, mabs, mrel, worst, method, 0.0, ok, notes, dict(extra))
