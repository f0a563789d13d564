"""Finite differences and ``check``: automatic derivatives against independent estimates.

Every finite-difference estimate evaluates all of its perturbed points in one
batched pass over the forward tape (the tape accepts a leading batch axis), never
in a Python loop over elements.

Methods and their default steps (per element, from the value's scale
``s = max(1, |x|)``, rounded to a power of two so that ``x + h`` is exact):

=========== ======================= ============ =========================
method      estimate                step h        truncation / rounding
=========== ======================= ============ =========================
central     (f(x+h) - f(x-h)) / 2h  eps^(1/3) s   O(h^2) / O(eps/h)
forward     (f(x+h) - f(x)) / h     eps^(1/2) s   O(h)   / O(eps/h)
richardson  (4 D(h/2) - D(h)) / 3   eps^(1/5) s   O(h^4) / O(eps/h)
complex     Im f(x + i h) / h       1e-20 s       O(h^2), no cancellation
=========== ======================= ============ =========================
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np

from .errors import GradcalcError, UsageError, ValueError_
from .lower import Traced, trace
from .tape import DEFAULT_MAX_ELEMENTS, all_finite, eval_equations
from .transforms import largest_batched, rows_to_jacobian, seeded

EPS = np.finfo(np.float64).eps

METHODS = ("central", "forward", "richardson", "complex")

#: Default tolerances per method: an element passes when
#: |ad - fd| <= atol + rtol * |fd|.  Chosen from the errors measured on
#: samples/ (README.md, "check"), with a margin of 100 or more for other scales.
TOLERANCES = {
    "central": (1e-6, 1e-8),
    "forward": (1e-4, 1e-5),
    "richardson": (1e-8, 1e-10),
    "complex": (1e-12, 1e-14),
}
#: Reverse against forward mode: the same arithmetic in another order.
AD_TOLERANCE = (1e-10, 1e-12)
#: Automatic against sympy's closed form evaluated at the point.
SYMBOLIC_TOLERANCE = (1e-9, 1e-12)


def default_step(x: np.ndarray, method: str) -> np.ndarray:
    """The per-element step: a power of two near eps^p * max(1, |x|).  (The quotients
    divide by the step actually taken, (x + h) - x, which can differ when x is large.)"""
    power = {"central": 1 / 3, "forward": 1 / 2, "richardson": 1 / 5}.get(method)
    scale = np.maximum(1.0, np.abs(x))
    if method == "complex":
        return 1e-20 * scale
    h = EPS ** power * scale
    return np.exp2(np.round(np.log2(h)))


# ==========================================================================
# Batched evaluation of the forward tape
# ==========================================================================

def evaluate_batch(tr: Traced, var: int, batch: np.ndarray, outs: list[int]) -> list[np.ndarray]:
    """Outputs when the value of var is replaced by each row of batch (shape (B,) + shape)."""
    env = dict(tr.builder.values)  # values that do not depend on var stay as traced
    env[var] = batch
    downstream = seeded(tr.tape.equations, [var])
    largest = largest_batched(downstream, [var], tr.builder.shapes)
    tr.builder.check_size((len(batch), largest), what=f"a batch of {len(batch)} perturbed points "
                                                      f"through {largest}-element values")
    eval_equations(downstream, env, keep=set(outs), batch_elements=len(batch) * largest)
    return [np.broadcast_to(env[o], batch.shape[:1] + tr.builder.shapes[o]) for o in outs]


def _check_batch(tr: Traced, rows: int, n: int) -> None:
    """Refuse, before it is made, a batch of rows perturbed copies of an n-element input."""
    tr.builder.check_size((rows, n), what=f"a batch of {rows} perturbed copies of a {n}-element input")


# The perturbed points of each method: (multiple of h, group) per block of n rows.
_STENCILS = {"forward": (1.0,), "central": (1.0, -1.0),
             "richardson": (1.0, -1.0, 0.5, -0.5)}


def fd_jacobian(tr: Traced, of: list[str], wrt: str, method: str = "central", step=None):
    """Finite-difference Jacobians {of: array of shape of.shape + wrt.shape} and the steps used.

    Every perturbed point of the estimate is one row of a single batch.
    """
    if method not in METHODS:
        raise UsageError(f"unknown method '{method}'", hint=f"use one of: {', '.join(METHODS)}")
    names = tr.tape.names
    x = tr.value(wrt)
    n = x.size
    h = np.broadcast_to(default_step(x, method) if step is None else np.asarray(step, float), x.shape)
    hflat, xf = h.ravel(), x.ravel()
    outs = [names[o] for o in of]
    diag = (np.arange(n), np.arange(n))
    scales = _STENCILS.get(method, (1.0,))
    rows = len(scales) * n + (method == "forward")  # forward differences also need f(x)
    _check_batch(tr, rows, n)  # before the batch is made (evaluate_batch checks what flows from it)
    if method == "complex":
        batch = np.tile(xf.astype(complex), (n, 1))
        batch[diag] += 1j * hflat
        ys = evaluate_batch(tr, names[wrt], batch.reshape((n,) + x.shape), outs)
        rows = [y.imag / _col(hflat, y) for y in ys]
        return {o: rows_to_jacobian(r, tr.value(o).shape, x.shape) for o, r in zip(of, rows)}, h
    batch = np.tile(xf, (rows, 1))
    taken = []  # the step actually taken along each element: x + h may round
    for k, c in enumerate(scales):
        block = batch[k * n:(k + 1) * n]
        block[diag] += c * hflat
        taken.append(block[diag] - xf)
    ys = evaluate_batch(tr, names[wrt], batch.reshape((len(batch),) + x.shape), outs)
    rows = []
    for y in ys:
        part = [y[k * n:(k + 1) * n] for k in range(len(scales))]
        if method == "forward":
            rows.append((part[0] - y[n:n + 1]) / _col(taken[0], y[:n]))
        elif method == "central":
            rows.append((part[0] - part[1]) / _col(taken[0] - taken[1], y))
        else:  # Richardson: (4 D(h/2) - D(h)) / 3 cancels the h^2 term
            d1 = (part[0] - part[1]) / _col(taken[0] - taken[1], y)
            d2 = (part[2] - part[3]) / _col(taken[2] - taken[3], y)
            rows.append((4 * d2 - d1) / 3)
    return {o: rows_to_jacobian(r, tr.value(o).shape, x.shape) for o, r in zip(of, rows)}, h


def _col(h, y):
    return h.reshape((h.size,) + (1,) * (y.ndim - 1))


def non_analytic(tr: Traced, wrt_var: int) -> list:
    """Equations downstream of wrt_var whose primitive does not take complex input."""
    live = {wrt_var}
    bad = []
    for eq in tr.tape.equations:
        if any(a in live for a in eq.args):
            live.add(eq.out)
            if not eq.prim.analytic and eq.prim.differentiable:
                bad.append(eq)
    return bad


def _upstream(tr: Traced, var: int) -> set:
    """var and every variable it is computed from."""
    needed = {var}
    for eq in reversed(tr.tape.equations):
        if eq.out in needed:
            needed.update(eq.args)
    return needed


_SPELLED = {"gt": ">", "ge": ">=", "lt": "<", "le": "<=", "eq": "==", "ne": "!="}


def kinks_near(tr: Traced, wrt_var: int, h: np.ndarray, out_var: int | None = None) -> list[str]:
    """Kinked operations on the way from wrt to the output whose argument lies within
    two steps of the kink."""
    live = {wrt_var}
    on_path = _upstream(tr, out_var) if out_var is not None else None
    scale = float(np.max(h)) * 2 if np.size(h) else 0.0
    notes = []
    values = tr.builder.values
    for eq in tr.tape.equations:
        if not any(a in live for a in eq.args):
            continue
        live.add(eq.out)
        if on_path is not None and eq.out not in on_path:
            continue
        kink = eq.prim.kink
        if kink is None:
            continue
        with np.errstate(all="ignore"):
            d = np.abs(np.asarray(kink(values[eq.out], *[values[a] for a in eq.args], **eq.params)))
        if d.size and float(np.min(d)) <= scale:
            where = f" (line {eq.pos.line}, column {eq.pos.col})" if eq.pos else ""
            note = f"near the kink of '{_SPELLED.get(eq.prim.name, eq.prim.name)}'{where}"
            if note not in notes:
                notes.append(note)
    return notes


# ==========================================================================
# check
# ==========================================================================

@dataclass
class CheckResult:
    source: str
    point: int
    of: str
    wrt: str
    max_abs_err: float
    max_rel_err: float
    worst_index: list
    method: str
    step: float
    ok: bool
    notes: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ("source", "point", "of", "wrt", "max_abs_err",
                                           "max_rel_err", "worst_index", "method", "step", "ok",
                                           "notes")}
        d.update(self.extra)
        return d


def compare(ad: np.ndarray, ref: np.ndarray, rtol: float, atol: float):
    """(ok, max_abs_err, max_rel_err, worst_index) of ad against the reference ref.

    An element passes when |ad - ref| <= atol + rtol |ref|; a non-finite element
    fails (its errors are inf).  The relative error of an element is
    |ad - ref| / max(|ad|, |ref|) (0 when both are 0); worst_index is the
    element furthest outside its tolerance.
    """
    ad, ref = np.broadcast_arrays(np.asarray(ad, float), np.asarray(ref, float))
    shape = ad.shape
    if ad.size == 0:
        return True, 0.0, 0.0, []
    ad, ref = ad.reshape(-1), ref.reshape(-1)
    with np.errstate(all="ignore"):
        diff = np.abs(ad - ref)
        if all_finite(diff):
            badness, rel = _errors_finite(ad, ref, diff, rtol, atol)
        else:
            badness, rel = _errors_general(ad, ref, diff, rtol, atol)
    worst = int(np.argmax(badness))
    return (bool(badness[worst] <= 1.0), float(diff.max()), float(rel.max()),
            [int(i) for i in np.unravel_index(worst, shape)])


def _errors_finite(ad, ref, diff, rtol, atol):
    """Badness (> 1 fails) and relative error per element when every difference is finite:
    five passes over the Jacobian instead of the general case's fifteen."""
    aref = np.abs(ref)
    badness = np.divide(diff, atol + rtol * aref, out=np.zeros_like(diff), where=diff > 0)
    big = np.maximum(np.abs(ad), aref)
    rel = np.divide(diff, big, out=np.zeros_like(diff), where=big > 0)  # 0/0: both are 0
    return badness, rel


def _errors_general(ad, ref, diff, rtol, atol):
    """As :func:`_errors_finite`, with infinities and nans: diff is set to inf where the
    two disagree about a non-finite value, 0 where they agree."""
    same = (ad == ref) | (np.isnan(ad) & np.isnan(ref))
    diff[same] = 0.0  # equal infinities (or nan against nan) agree
    aref = np.abs(ref)
    badness = diff / (atol + rtol * aref)  # nan where something is not finite
    badness[np.isnan(badness)] = np.inf
    badness[same] = 0.0
    diff[np.isnan(diff)] = np.inf
    rel = diff / np.maximum(np.abs(ad), aref)
    rel[np.isnan(rel)] = 0.0  # 0/0: both are 0
    rel[np.isinf(diff)] = np.inf
    return badness, rel


def expand_sources(sources) -> list:
    """Directories become every *.grad file inside them (sorted)."""
    if list(sources).count("-") > 1:  # the second read would find standard input empty
        raise UsageError("'-' (standard input) is given more than once", hint="give '-' once")
    out = []
    for s in sources:
        if isinstance(s, str) and "\n" not in s and os.path.isdir(s):
            found = sorted(os.path.join(d, f) for d, _, fs in os.walk(s) for f in fs if f.endswith(".grad"))
            if not found:
                raise UsageError(f"no .grad files in directory '{s}'")
            out.extend(found)
        else:
            out.append(s)
    return out


def check(source, at=None, of=None, wrt=None, *, points: int = 0, seed: int = 0,
          method: str = "central", rtol: float | None = None, atol: float | None = None,
          directions: int = 0, taylor: bool = False, expect: dict | None = None,
          symbolic: bool = False, max_elements: int = DEFAULT_MAX_ELEMENTS, label: str | None = None):
    """Compare reverse mode with finite differences and with forward mode.

    Returns a Result whose ``results`` is a list of CheckResult and whose
    ``ok`` is True when all pass.  ``expect`` is a stored grad/jacobian JSON
    object to compare reverse mode with as well; ``symbolic`` adds sympy's
    closed form, evaluated at the point, as a third oracle.
    """
    from .results import Result
    from .session import as_arrays, parse, quiet, select_names, select_output

    @quiet
    def run():
        if method not in METHODS:
            raise UsageError(f"unknown method '{method}'", hint=f"use one of: {', '.join(METHODS)}")
        if points < 0 or directions < 0:
            raise UsageError("--points and --directions must not be negative")
        if seed < 0:
            raise UsageError(f"--seed must be a non-negative integer, not {seed}")
        for opt, v in (("--rtol", rtol), ("--atol", atol)):
            if v is not None and not (v >= 0 and math.isfinite(v)):
                raise UsageError(f"{opt} must be a finite non-negative number, not {v}")
        rt, at_ = TOLERANCES[method]
        tol = (rt if rtol is None else rtol, at_ if atol is None else atol)
        program = parse(source)
        name = label or program.source.label
        values = as_arrays(at)
        if points:
            from .lower import find_inputs
            inputs = [i.name for i in find_inputs(program)]
            if inputs and all(i in values for i in inputs):
                raise UsageError("--points draws random values for the inputs --at does not fix, "
                                 "and --at fixes every input", hint="leave some inputs out of --at")
        rng = np.random.default_rng(seed)
        results = []
        traced = []
        try:
            traced.append((0, trace(program, values, max_elements=max_elements)))
        except GradcalcError as err:
            if points == 0 or "has no value" not in err.message:
                raise  # without --points, every input needs a value
        if points:
            # the inputs' shapes, with any missing value sampled
            shapes = trace(program, values, max_elements=max_elements,
                           sample=lambda n, shape: rng.standard_normal(shape))
        for p in range(1, points + 1):
            traced.append((p, _random_point(program, values, shapes, rng, max_elements)))
        for p, tr in traced:
            outs = [select_output(tr, None)] if of is None else select_names(tr, of, "--of", ())
            wrts = select_names(tr, wrt, "--wrt", tr.tape.inputs)
            try:
                results += _check_point(tr, name, p, outs, wrts, method, tol, directions, taylor, rng,
                                        symbolic)
            except GradcalcError as err:  # (a batch over --max-elements, say): name the program
                raise err.located(program.source)
            if expect is not None and p == 0:
                results += _check_expect(tr, name, outs, wrts, expect, tol)
        return Result({}, ok=all(r.ok for r in results), results=results, rtol=tol[0], atol=tol[1])

    return run()


def _random_point(program, values, shapes: Traced, rng, max_elements) -> Traced:
    """A random point: every input not fixed by --at drawn from a standard normal."""
    point = dict(values)
    for info in shapes.inputs:
        if info.name not in point:
            point[info.name] = rng.standard_normal(shapes.value(info.name).shape)
    return trace(program, point, max_elements=max_elements)


def _check_point(tr: Traced, name, p, outs, wrts, method, tol, directions, taylor, rng,
                 symbolic=False):
    from .session import jacobian_blocks

    results = []
    closed = None
    if symbolic and not directions:
        from .symbolic import symbolic_jacobian
        closed = symbolic_jacobian(tr, outs, wrts, simplify=False)
    names = tr.tape.names
    intermediate = [w for w in wrts if w not in tr.tape.inputs]
    rev = jacobian_blocks(tr, outs, wrts, "rev")
    fwd = None if directions else _forward_probes(tr, outs, [w for w in wrts if w not in intermediate], rng)
    for w in wrts:
        if method == "complex":
            bad = non_analytic(tr, names[w])
            if bad:
                eq = bad[0]
                where = f" at line {eq.pos.line}, column {eq.pos.col}" if eq.pos else ""
                raise UsageError(f"--method complex needs analytic operations, but "
                                 f"'{tr.builder.op_name(eq.prim, eq.loc)}'"
                                 f"{where} is not", eq.pos,
                                 hint="use --method central or richardson").located(tr.program.source)
        if directions:
            found = _check_directions(tr, name, p, outs, w, method, tol, directions, rng)
            if taylor:
                for r in found:
                    _taylor(tr, r, rng)
            results += found
            continue
        fd, h = fd_jacobian(tr, outs, w, method)
        for o in outs:
            notes = kinks_near(tr, names[w], h, names[o])
            ad = rev[o][w]
            shape = tr.value(o).shape + tr.value(w).shape
            ad = np.zeros(shape) if ad is None else ad
            ok, mabs, mrel, worst = compare(ad, fd[o], *tol)
            if not ok:
                notes += _rounding_note(tr.value(o), h, method, mabs)
            extra = {}
            if fwd is not None and w in fwd:
                v, jv = fwd[w]
                nw = tr.value(w).ndim
                rev_v = np.tensordot(v, ad, axes=(tuple(range(1, nw + 1)),
                                                   tuple(range(ad.ndim - nw, ad.ndim))))
                jv_o = np.zeros(rev_v.shape) if jv[o] is None else jv[o]
                ok2, fabs, _, _ = compare(rev_v, jv_o, *AD_TOLERANCE)
                extra["rev_fwd_max_abs_err"] = fabs
                if not ok2:
                    ok = False
                    notes.append("reverse and forward mode disagree")
            if closed is not None:
                sv = np.asarray(closed[o][w]["value"], dtype=float).reshape(shape)
                finite = np.isfinite(sv)
                ok3, sabs, _, _ = compare(np.where(finite, ad, 0.0), np.where(finite, sv, 0.0),
                                          *SYMBOLIC_TOLERANCE)
                extra["symbolic_max_abs_err"] = sabs
                if not finite.all():
                    notes.append("the closed form is singular here (gradcalc pins a value)")
                if not ok3:
                    ok = False
                    notes.append("automatic and symbolic derivatives disagree")
            if not np.isfinite(ad).all():
                ok = False
                notes.append("non-finite derivative")
            elif not np.isfinite(fd[o]).all():
                notes.append("finite differences are not finite here (nan or inf near the point)")
            result = CheckResult(name, p, o, w, mabs, mrel, worst, method,
                                 float(np.max(h)) if h.size else 0.0, ok, notes, extra)
            if taylor:
                _taylor(tr, result, rng)
            results.append(result)
    return results


#: Rounding error of a difference quotient, in units of eps |f| / h, by method.
_ROUNDING = {"forward": 2.0, "central": 1.0, "richardson": 3.0}


def _rounding_note(y, h, method: str, mismatch: float) -> list:
    """A note when a mismatch is no larger than the rounding error of the finite differences
    themselves (about eps |f| / h: sum(x) + 1e17 leaves differences of 16 over a step of 1e-5):
    then they cannot tell a right derivative from a wrong one."""
    if method not in _ROUNDING or not np.size(y) or not np.size(h):
        return []
    size = float(np.max(np.abs(y)))
    step = float(np.min(h))
    if not (math.isfinite(size) and step > 0 and math.isfinite(mismatch)):
        return []
    noise = _ROUNDING[method] * np.finfo(np.float64).eps * size / step
    if mismatch > 4 * noise:
        return []
    return [f"finite differences are at their rounding limit here: |f| up to {size:.3g} over a step of "
            f"{step:.3g} leaves about {noise:.2g} of rounding error in each difference quotient, as much "
            "as the mismatch (try --method complex for analytic programs)"]


#: Random directions along which forward mode is compared with the reverse-mode Jacobian.
FORWARD_PROBES = 2


def _forward_probes(tr: Traced, outs, wrts, rng) -> dict:
    """{wrt: (V, {of: J V})}: forward mode along FORWARD_PROBES random unit directions.

    Reverse mode's full Jacobian times the same directions must agree.  A wrong
    forward rule shows up in a random projection with probability 1, at the
    cost of a few tangent passes instead of a column per input element.
    """
    from .transforms import Recording, forward

    names, b = tr.tape.names, tr.builder
    out = {}
    for w in wrts:
        x = tr.value(w)
        k = FORWARD_PROBES
        v = rng.standard_normal((k,) + x.shape)
        v /= np.maximum(np.sqrt(np.sum(v * v, axis=tuple(range(1, v.ndim)), keepdims=True)), 1e-300)
        rec = Recording(b)
        seed = rec.seed(x.shape)
        tan = forward(b, tr.tape.equations, {names[w]: seed})
        jv = rec.run({seed.var: v}, [tan.get(names[o]) for o in outs], k)
        out[w] = (v, dict(zip(outs, jv)))
    return out


def _taylor(tr: Traced, result: "CheckResult", rng) -> None:
    """Add the Taylor remainder's observed order to a result; below 1.8 it fails."""
    order = taylor_order(tr, result.of, result.wrt, rng)
    result.extra["taylor_order"] = order
    if not order >= 1.8:
        result.ok = False
        result.notes.append(f"Taylor remainder order {order:.2f}, expected 2")


def _check_directions(tr: Traced, name, p, outs, w, method, tol, k, rng):
    """J v against a directional difference along k random directions; and <u, J v> = <J^T u, v>."""
    from .transforms import Recording, backward, forward

    names, b = tr.tape.names, tr.builder
    x = tr.value(w)
    if x.size == 0:  # no direction to take: as the full check of an empty Jacobian, nothing is wrong
        return [CheckResult(name, p, o, w, 0.0, 0.0, [], f"{method} ({k} directions)", 0.0, True, [],
                            {"dot_product_abs_err": 0.0}) for o in outs]
    _check_batch(tr, k if method == "complex" else 2 * k, x.size)
    v = rng.standard_normal((k,) + x.shape)
    v /= np.sqrt(np.sum(v * v, axis=tuple(range(1, v.ndim)), keepdims=True))
    rec = Recording(b)
    seed = rec.seed(x.shape)
    tan = forward(b, tr.tape.equations, {names[w]: seed})
    jv = rec.run({seed.var: v}, [tan.get(names[o]) for o in outs], k)
    hs = float(np.max(default_step(x, method if method != "complex" else "central")))
    if method == "complex":
        ys = evaluate_batch(tr, names[w], x + 1j * 1e-20 * v, [names[o] for o in outs])
        dd = [y.imag / 1e-20 for y in ys]
    else:
        ys = evaluate_batch(tr, names[w], np.concatenate([x + hs * v, x - hs * v]),
                            [names[o] for o in outs])
        dd = [(y[:k] - y[k:]) / (2 * hs) for y in ys]
    results = []
    for o, j, d in zip(outs, jv, dd):
        yshape = tr.value(o).shape
        j = np.zeros((k,) + yshape) if j is None else j
        ok, mabs, mrel, worst = compare(j, d, *tol)
        # the dot-product test: <u, J v> = <J^T u, v>
        u = rng.standard_normal((k,) + yshape)
        rec2 = Recording(b)
        useed = rec2.seed(yshape)
        found = backward(b, tr.tape.equations, {names[o]: useed}, [names[w]])
        (jtu,) = rec2.run({useed.var: u}, [found[names[w]]], k)
        jtu = np.zeros((k,) + x.shape) if jtu is None else jtu
        lhs = np.sum((u * j).reshape(k, -1), axis=1)
        rhs = np.sum((jtu * v).reshape(k, -1), axis=1)
        ok2, dabs, _, _ = compare(lhs, rhs, *AD_TOLERANCE)
        notes = [] if ok2 else ["<u, J v> != <J^T u, v>"]
        if not (np.isfinite(j).all() and np.isfinite(jtu).all()):  # as the full check: a failure
            ok2 = False
            notes.append("non-finite derivative")
        results.append(CheckResult(name, p, o, w, mabs, mrel, worst, f"{method} ({k} directions)",
                                   hs, ok and ok2, notes, {"dot_product_abs_err": dabs}))
    return results


def taylor_order(tr: Traced, of: str, wrt: str, rng, halvings: int = 6) -> float:
    """Observed order of |f(x + h v) - f(x) - h J v| as h halves (2 for a correct J v)."""
    from .transforms import Recording, forward

    names, b = tr.tape.names, tr.builder
    x = tr.value(wrt)
    v = rng.standard_normal(x.shape)
    rec = Recording(b)
    seed = rec.seed(x.shape)
    tan = forward(b, tr.tape.equations, {names[wrt]: seed})
    (jv,) = rec.run({seed.var: v[None]}, [tan.get(names[of])], 1)
    jv = np.zeros(tr.value(of).shape) if jv is None else jv[0]
    h0 = 1e-2 * max(1.0, float(np.max(np.abs(x))) if x.size else 1.0)
    hs = h0 / 2.0 ** np.arange(halvings)
    (ys,) = evaluate_batch(tr, names[wrt], x + hs.reshape((-1,) + (1,) * x.ndim) * v, [names[of]])
    y0 = tr.value(of)
    # the largest remainder, not the Euclidean norm: squares of values past 1e154 overflow
    rem = np.array([np.max(np.abs(ys[i] - y0 - hs[i] * jv), initial=0.0) for i in range(halvings)])
    if np.all(rem <= 1e-13 * max(1.0, float(np.max(np.abs(y0))) if y0.size else 1.0)):
        return math.inf  # f is linear along v: the remainder is rounding alone
    orders = np.log2(rem[:-1] / rem[1:])
    orders = orders[np.isfinite(orders)]
    return float(np.median(orders)) if orders.size else math.nan


def _check_expect(tr: Traced, name, outs, wrts, expect: dict, tol):
    """Compare reverse mode with a stored `grad` or `jacobian` JSON object."""
    from .session import jacobian_blocks

    results = []
    if "gradient" in expect:
        of = expect.get("of") or outs[0]
        stored = {of: expect["gradient"]}
    elif "jacobian" in expect:
        stored = expect["jacobian"]
    else:
        raise UsageError("--expect: the file holds neither a 'gradient' nor a 'jacobian'",
                         hint="store the output of gradcalc grad or jacobian with -f json")
    kind = "gradient" if "gradient" in expect else "jacobian"
    if not isinstance(stored, dict) or not all(isinstance(row, dict) for row in stored.values()):
        command = "grad" if kind == "gradient" else "jacobian"
        raise UsageError(f"--expect: '{kind}' must map names to values, as gradcalc {command} -f json "
                         "writes it", hint="store the output of gradcalc grad or jacobian with -f json")
    for o, row in stored.items():
        if o not in tr.tape.names:
            raise UsageError(f"--expect: '{o}' is not a name in the program")
        ws = [w for w in row if w in tr.tape.names]
        blocks = jacobian_blocks(tr, [o], ws, "rev")[o]
        for w in ws:
            try:
                want = _from_json(row[w])
            except (TypeError, ValueError, OverflowError):
                raise ValueError_(f"--expect: the stored {kind} of '{w}' is not a number or a nested list "
                                  "of numbers") from None
            got = blocks[w]
            shape = tr.value(o).shape + tr.value(w).shape
            got = np.zeros(shape) if got is None else got
            if want.shape != got.shape:
                results.append(CheckResult(name, 0, o, w, math.inf, math.inf, [], "expect", 0.0, False,
                                           [f"stored shape {want.shape} != {got.shape}"]))
                continue
            ok, mabs, mrel, worst = compare(got, want, *tol)
            notes = []
            if not ok:
                idx = "".join(f"[{i}]" for i in worst)
                notes.append(f"entry {'jacobian' if 'jacobian' in expect else 'gradient'}"
                             f"['{w}']{idx}: stored {_g(want[tuple(worst)])}, computed {_g(got[tuple(worst)])}")
            results.append(CheckResult(name, 0, o, w, mabs, mrel, worst, "expect", 0.0, ok, notes))
    return results


def _g(x) -> str:
    return repr(float(x))


def _from_json(v) -> np.ndarray:
    def conv(x):
        if isinstance(x, list):
            return [conv(i) for i in x]
        if x is None:
            return math.nan
        if isinstance(x, bool) or not isinstance(x, (int, float, str)):
            raise TypeError(x)
        return float(x)  # "nan", "inf", "-inf" parse too (and other text fails)
    return np.asarray(conv(v), dtype=np.float64)
