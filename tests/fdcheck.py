"""One checker for the tests: reverse mode, forward mode and central differences must agree.

The finite differences here are computed independently of gradcalc's own
``numerics`` module, from values only (``gradcalc.evaluate`` or a fresh trace),
so that they can serve as an oracle for it.

Tolerances, and why:

- reverse vs forward mode: ``|rev - fwd| <= RTOL_MODES * (|fwd| + max(1, max|J|))``.
  Both are exact derivatives evaluated in a different order of floating-point
  operations, so they agree to a few ulps of the Jacobian's scale.
- automatic vs central differences: ``|ad - fd| <= ATOL_FD + RTOL_FD * |fd|``.
  With the step ``h = REL_STEP * max(1, |x|)`` the truncation error is about
  ``h^2 |f'''| / 6 ~ 1e-12`` and the rounding error about ``eps |f| / h ~ 1e-10 |f|``;
  1e-6 leaves three to four orders of margin for the small, well-scaled inputs
  the tests use, while any wrong rule is off by O(1).
- second derivatives (Hessian vs central differences of the gradient): 1e-5, since
  the differenced gradient carries its own rounding error.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

import gradcalc
from gradcalc import transforms as T
from gradcalc.tape import Builder, eval_equations

REL_STEP = 1e-6
RTOL_MODES = 1e-12
RTOL_FD = ATOL_FD = 1e-6
TOL_HESSIAN = 1e-5


@dataclass
class Report:
    """What a check found: ``ok`` is true when there are no problems."""

    problems: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        return "ok" if self.ok else "\n".join(self.problems)


# ==========================================================================
# Comparisons
# ==========================================================================

def compare(what: str, got, want, rtol: float, atol: float) -> str | None:
    """None if every element passes |got - want| <= atol + rtol |want|, else a description."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return f"{what}: shape {got.shape}, expected {want.shape}"
    if got.size == 0:
        return None
    if not np.isfinite(got).all():
        i = tuple(int(k) for k in np.unravel_index(np.argmin(np.isfinite(got)), got.shape))
        return f"{what}: non-finite entry {got[i]} at {i} (expected {want[i]})"
    if not np.isfinite(want).all():
        i = tuple(int(k) for k in np.unravel_index(np.argmin(np.isfinite(want)), want.shape))
        return f"{what}: the reference has a non-finite entry {want[i]} at {i}"
    err = np.abs(got - want)
    excess = err - (atol + rtol * np.abs(want))
    if (excess <= 0).all():
        return None
    i = tuple(int(k) for k in np.unravel_index(np.argmax(excess), got.shape))
    return (f"{what}: max abs err {err.max():.3g}; worst at {i}: got {got[i]!r}, "
            f"expected {want[i]!r}")


def _modes(report: Report, what: str, rev, fwd, label: str = "rev vs fwd"):
    scale = max(1.0, float(np.max(np.abs(fwd), initial=0.0)))
    p = compare(f"{what} {label}", rev, fwd, RTOL_MODES, RTOL_MODES * scale)
    if p:
        report.problems.append(p)


def _against_fd(report: Report, what: str, mode: str, ad, fd):
    p = compare(f"{what} {mode} vs central differences", ad, fd, RTOL_FD, ATOL_FD)
    if p:
        report.problems.append(p)


# ==========================================================================
# Central differences
# ==========================================================================

def steps(x) -> np.ndarray:
    return REL_STEP * np.maximum(1.0, np.abs(x))


def fd_jacobian(f: Callable, args: list, i: int) -> np.ndarray:
    """Central-difference Jacobian of f(*args) with respect to args[i].

    The block has shape f(*args).shape + args[i].shape (JAX's convention).
    The divisor is the difference of the perturbed points as represented in
    float64, not 2h, which removes the representation error of x +- h.
    """
    x = np.asarray(args[i], dtype=np.float64)
    h = steps(x).ravel()
    cols = []
    for k in range(x.size):
        plus, minus = x.copy().ravel(), x.copy().ravel()
        plus[k] += h[k]
        minus[k] -= h[k]
        a_plus, a_minus = list(args), list(args)
        a_plus[i], a_minus[i] = plus.reshape(x.shape), minus.reshape(x.shape)
        fp = np.asarray(f(*a_plus), dtype=np.float64)
        fm = np.asarray(f(*a_minus), dtype=np.float64)
        cols.append((fp - fm) / (plus[k] - minus[k]))
    y = np.asarray(f(*args))
    if not cols:
        return np.zeros(y.shape + x.shape)
    return np.moveaxis(np.array(cols), 0, -1).reshape(y.shape + x.shape)


# ==========================================================================
# Programs in the language, through the public API
# ==========================================================================

def _eval(program, names, *values):
    res = gradcalc.evaluate(program, at=dict(zip(names, values)))
    return next(iter(res.values()))


def check_program(source: str, at: dict, *, ref=None, zero=(), unconnected=None) -> Report:
    """Check a program's reverse- and forward-mode Jacobians against central differences.

    ``ref(*at.values())``: an independent NumPy value of the output, compared too.
    ``zero``: inputs whose derivative is zero by definition (``stop_gradient``), for
    which finite differences are no oracle.  ``unconnected``: if given, the exact
    list ``Result.unconnected`` must equal.
    """
    report = Report()
    program = gradcalc.parse(source)
    names = list(at)
    values = [np.asarray(at[n], dtype=np.float64) for n in names]
    value = _eval(program, names, *values)
    if ref is not None:
        p = compare("value vs NumPy reference", value, ref(*values), 1e-10, 1e-12)
        if p:
            report.problems.append(p)
    try:
        _check_program_derivatives(report, program, at, names, values, value, zero, unconnected,
                                   len(source))
    except Exception as err:  # a crash is a finding too; report it after the value check
        report.problems.append(f"{type(err).__name__}: {err}")
    return report


def _check_program_derivatives(report, program, at, names, values, value, zero, unconnected,
                               seed):
    rev = gradcalc.jacobian(program, at=at, mode="rev")
    fwd = gradcalc.jacobian(program, at=at, mode="fwd")
    (out,) = rev.of
    if unconnected is not None and sorted(rev.unconnected) != sorted(unconnected):
        report.problems.append(f"unconnected is {rev.unconnected}, expected {list(unconnected)}")
    # one unbatched vjp (a random cotangent) and one jvp per input (a random tangent for
    # that input alone): the paths gradcalc.vjp / gradcalc.jvp take
    rng = np.random.default_rng(seed)
    u = rng.standard_normal(value.shape)
    pulled = gradcalc.vjp(program, u, at=at)
    for i, name in enumerate(names):
        j_rev, j_fwd = rev[out][name], fwd[out][name]
        if name in zero:
            j_fd = np.zeros(value.shape + values[i].shape)
        else:
            j_fd = fd_jacobian(lambda *v: _eval(program, names, *v), values, i)
        _modes(report, f"d/d{name}", j_rev, j_fwd)
        _against_fd(report, f"d/d{name}", "rev", j_rev, j_fd)
        _against_fd(report, f"d/d{name}", "fwd", j_fwd, j_fd)
        v = rng.standard_normal(values[i].shape)
        pushed = gradcalc.jvp(program, {name: v}, at=at)[out]
        for what, got, want, weight in [
                ("vjp", pulled[name], np.tensordot(u, j_fd, axes=u.ndim), np.abs(u).sum()),
                ("jvp", pushed, np.tensordot(j_fd, v, axes=v.ndim), np.abs(v).sum())]:
            p = compare(f"d/d{name} {what} vs central differences", got, want, RTOL_FD,
                        ATOL_FD * max(1.0, weight))
            if p:
                report.problems.append(p)


def check_hessian(source: str, at: dict) -> Report:
    """gradcalc.hessian against central differences of gradcalc.grad (every block)."""
    report = Report()
    program = gradcalc.parse(source)
    names = list(at)
    values = [np.asarray(at[n], dtype=np.float64) for n in names]
    hess = gradcalc.hessian(program, at=at)
    for j, wj in enumerate(names):
        for wi in names:
            def g(*v, wi=wi):
                return gradcalc.grad(program, at=dict(zip(names, v)))[wi]
            h_fd = fd_jacobian(g, values, j)  # shape wi.shape + wj.shape
            p = compare(f"d2/d{wi}d{wj} vs central differences of the gradient",
                        hess[wi][wj], h_fd, TOL_HESSIAN, TOL_HESSIAN)
            if p:
                report.problems.append(p)
    return report


# ==========================================================================
# Direct traces: primitives called on Builder tracers
# ==========================================================================

def _trace(fn, args):
    b = Builder()
    tracers = [b.input(a) for a in args]
    return b, tracers, fn(*tracers)


def _value(t):
    return None if t is None else np.asarray(t.value)


def traced_jacobians(fn: Callable, args: list, diff: list) -> dict:
    """Jacobians of fn(*tracers) with respect to args[i], i in diff, four ways.

    ``rev``/``fwd``: one transforms.backward / transforms.forward call per seed;
    ``rev_batched``/``fwd_batched``: the derivative pass traced once and re-run on
    all seeds at once with a leading batch axis (as the API does).
    """
    b, ts, out = _trace(fn, args)
    eqs = tuple(b.equations)
    yshape, m = out.shape, max(out.value.size, 0)
    res = {k: {} for k in ("rev", "fwd", "rev_batched", "fwd_batched")}
    # reverse, one seed at a time
    rows = {i: [] for i in diff}
    for r in range(m):
        seed = b.const(np.eye(m)[r].reshape(yshape))
        found = T.backward(b, eqs, {out.var: seed}, [ts[i].var for i in diff])
        for i in diff:
            v = _value(found[ts[i].var])
            rows[i].append(np.zeros(ts[i].shape) if v is None else v)
    for i in diff:
        res["rev"][i] = np.array(rows[i]).reshape(yshape + ts[i].shape)
    # forward, one seed at a time
    for i in diff:
        n = ts[i].value.size
        cols = []
        for c in range(n):
            tan = T.forward(b, eqs, {ts[i].var: b.const(np.eye(n)[c].reshape(ts[i].shape))})
            v = _value(tan.get(out.var))
            cols.append(np.zeros(yshape) if v is None else v)
        res["fwd"][i] = (np.moveaxis(np.array(cols), 0, -1).reshape(yshape + ts[i].shape)
                         if cols else np.zeros(yshape + ts[i].shape))
    # reverse, batched
    start = len(b.equations)
    seed = b.input(np.zeros(yshape))
    found = T.backward(b, eqs, {out.var: seed}, [ts[i].var for i in diff])
    env = dict(b.values)
    env[seed.var] = np.eye(m).reshape((m,) + yshape)
    eval_equations(b.equations[start:], env)
    for i in diff:
        t = found[ts[i].var]
        full = (m,) + ts[i].shape
        v = np.zeros(full) if t is None else np.broadcast_to(env[t.var], full)
        res["rev_batched"][i] = v.reshape(yshape + ts[i].shape)
    # forward, batched (one pass per argument)
    for i in diff:
        n = ts[i].value.size
        start = len(b.equations)
        seed = b.input(np.zeros(ts[i].shape))
        tan = T.forward(b, eqs, {ts[i].var: seed})
        env = dict(b.values)
        env[seed.var] = np.eye(n).reshape((n,) + ts[i].shape)
        eval_equations(b.equations[start:], env)
        t = tan.get(out.var)
        v = np.zeros((n,) + yshape) if t is None else np.broadcast_to(env[t.var], (n,) + yshape)
        res["fwd_batched"][i] = np.moveaxis(v, 0, -1).reshape(yshape + ts[i].shape)
    return res


def check_traced(fn: Callable, args: list, diff=None, *, ref=None) -> Report:
    """Check fn(*tracers) (primitives called on Builder inputs) like check_program.

    ``diff``: indices of the arguments to differentiate (default all); the
    others are traced inputs too but stay fixed (a where condition, a mask).
    """
    with np.errstate(all="ignore"):  # as the API does: non-finite values are findings, not noise
        return _check_traced(fn, args, diff, ref)


def _check_traced(fn, args, diff, ref) -> Report:
    report = Report()
    args = [np.asarray(a, dtype=np.float64) for a in args]
    diff = list(range(len(args))) if diff is None else list(diff)
    _, _, out = _trace(fn, args)
    if ref is not None:
        p = compare("value vs NumPy reference", out.value, ref(*args), 1e-10, 1e-12)
        if p:
            report.problems.append(p)
    try:
        jac = traced_jacobians(fn, args, diff)
    except Exception as err:  # a crash is a finding too; report it after the value check
        report.problems.append(f"{type(err).__name__}: {err}")
        return report
    value_of = lambda *a: _trace(fn, list(a))[2].value  # noqa: E731
    for i in diff:
        j_fd = fd_jacobian(value_of, args, i)
        what = f"d/darg{i}"
        _modes(report, what, jac["rev"][i], jac["fwd"][i])
        _modes(report, what, jac["rev_batched"][i], jac["rev"][i], "batched rev vs rev")
        _modes(report, what, jac["fwd_batched"][i], jac["fwd"][i], "batched fwd vs fwd")
        _against_fd(report, what, "rev", jac["rev"][i], j_fd)
        _against_fd(report, what, "fwd", jac["fwd"][i], j_fd)
    return report
