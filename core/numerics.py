"""``check``: automatic derivatives against independent estimates.

Finite differences (the methods, their steps and formulas: :mod:`.stencil`)
evaluate all of their perturbed points in one batched pass over the forward
tape (the tape accepts a leading batch axis), never in a Python loop over
elements.  Reverse mode is also compared with forward mode along random
directions, and optionally with sympy's closed form and a stored result.
"""
from __future__ import annotations

import math
import os

import numpy as np

from . import stencil
from .checks import (AD_TOLERANCE, SYMBOLIC_TOLERANCE, TOLERANCES, CheckResult, check_result, compare,
                     tolerance)
from .codec import JSONNumberError, array_from_json
from .errors import GradcalcError, UsageError, ValueError_, option
from .lower import Traced, find_inputs, trace
from .session import as_arrays, jacobian_blocks, parse, quiet, select_names, select_output
from .stencil import METHODS, default_step
from .tape import DEFAULT_MAX_ELEMENTS, eval_equations
from .transforms import Recording, backward, forward, largest_batched, rows_to_jacobian, seeded


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


def _known_method(method: str) -> None:
    if method not in METHODS:
        raise UsageError(f"unknown method '{method}'", hint=f"use one of: {', '.join(METHODS)}",
                         option="method")


def fd_jacobian(tr: Traced, of: list[str], wrt: str, method: str = "central", step=None):
    """Finite-difference Jacobians {of: array of shape of.shape + wrt.shape} and the steps used.

    Every perturbed point of the estimate is one row of a single batch.
    """
    _known_method(method)
    names = tr.tape.names
    x = tr.value(wrt)
    n = x.size
    h = np.broadcast_to(default_step(x, method) if step is None else np.asarray(step, float), x.shape)
    scales = stencil.offsets(method)
    centre = stencil.needs_centre(method)  # forward differences also need f(x): one more row
    # refused before the batch is made (evaluate_batch checks what flows from it)
    _check_batch(tr, len(scales) * n + centre, n)
    batch, taken = stencil.perturb(x.ravel(), h.ravel(), scales, centre)
    ys = evaluate_batch(tr, names[wrt], batch.reshape((len(batch),) + x.shape), [names[o] for o in of])
    jac = {}
    for o, y in zip(of, ys):
        blocks = [y[k * n:(k + 1) * n] for k in range(len(scales))]
        rows = stencil.combine(method, blocks, taken, y[len(scales) * n:] if centre else None)
        jac[o] = rows_to_jacobian(rows, tr.value(o).shape, x.shape)
    return jac, h


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

    Returns a Result (``command`` "check") whose ``results`` is a list of
    CheckResult, whose ``ok`` is True when all pass, and whose ``rtol`` and
    ``atol`` are the tolerances applied (by default, the method's
    checks.TOLERANCES).  ``expect`` is a stored grad/jacobian JSON object to
    compare reverse mode with as well; ``symbolic`` adds sympy's closed form,
    evaluated at the point, as a third oracle.
    """
    @quiet
    def run():
        tol = _tolerances(method, points, directions, seed, rtol, atol)
        program = parse(source)
        name = label or program.source.label
        rng = np.random.default_rng(seed)
        results = []
        for p, tr in _points(program, as_arrays(at), points, rng, max_elements):
            outs = [select_output(tr, None)] if of is None else select_names(tr, of, option("of"), ())
            wrts = select_names(tr, wrt, option("wrt"), tr.tape.inputs)
            try:
                results += _check_point(tr, name, p, outs, wrts, method, tol, directions, taylor, rng,
                                        symbolic)
            except GradcalcError as err:  # (a batch over max_elements, say): name the program
                raise err.located(program.source)
            if expect is not None and p == 0:
                results += _check_expect(tr, name, outs, wrts, expect, tol)
        return check_result(results, tol)

    return run()


def _tolerances(method, points, directions, seed, rtol, atol) -> tuple[float, float]:
    """The tolerances check applies, once its arguments are known to be sound."""
    _known_method(method)
    if points < 0 or directions < 0:
        raise UsageError(f"{option('points')} and {option('directions')} must not be negative",
                         option="points" if points < 0 else "directions")
    if seed < 0:
        raise UsageError(f"{option('seed')} must be a non-negative integer, not {seed}", option="seed")
    for opt, v in (("rtol", rtol), ("atol", atol)):
        if v is not None and not (v >= 0 and math.isfinite(v)):
            raise UsageError(f"{option(opt)} must be a finite non-negative number, not {v}", option=opt)
    return tolerance(TOLERANCES[method], rtol, atol)


def _points(program, values: dict, points: int, rng, max_elements) -> list[tuple[int, Traced]]:
    """[(number, traced)]: the point at= gives (0; left out when it lacks a value and
    ``points`` draws the rest) and ``points`` random points (1, 2, ...)."""
    if points:
        inputs = [i.name for i in find_inputs(program)]
        if inputs and all(i in values for i in inputs):
            raise UsageError(f"{option('points')} draws random values for the inputs {option('at')} does "
                             f"not fix, and {option('at')} fixes every input",
                             hint=f"leave some inputs out of {option('at')}", option="points")
    traced = []
    try:
        traced.append((0, trace(program, values, max_elements=max_elements)))
    except GradcalcError as err:
        if points == 0 or "has no value" not in err.message:
            raise  # without points, every input needs a value
    if points:
        # the inputs' shapes, with any missing value sampled
        shapes = trace(program, values, max_elements=max_elements,
                       sample=lambda n, shape: rng.standard_normal(shape))
    for p in range(1, points + 1):
        traced.append((p, _random_point(program, values, shapes, rng, max_elements)))
    return traced


def _random_point(program, values, shapes: Traced, rng, max_elements) -> Traced:
    """A random point: every input not fixed by at= drawn from a standard normal."""
    point = dict(values)
    for info in shapes.inputs:
        if info.name not in point:
            point[info.name] = rng.standard_normal(shapes.value(info.name).shape)
    return trace(program, point, max_elements=max_elements)


def _check_point(tr: Traced, name, p, outs, wrts, method, tol, directions, taylor, rng,
                 symbolic=False):
    closed = None
    if symbolic and not directions:
        from .symbolic import symbolic_jacobian
        closed = symbolic_jacobian(tr, outs, wrts, simplify=False)
    rev = jacobian_blocks(tr, outs, wrts, "rev")
    fwd = None if directions else _forward_probes(tr, outs, [w for w in wrts if w in tr.tape.inputs], rng)
    results = []
    for w in wrts:
        if method == "complex":
            _require_analytic(tr, w)
        if directions:
            found = _check_directions(tr, name, p, outs, w, method, tol, directions, rng)
            if taylor:
                for r in found:
                    _taylor(tr, r, rng)
            results += found
            continue
        fd, h = fd_jacobian(tr, outs, w, method)
        for o in outs:
            result = _check_block(tr, name, p, o, w, rev[o][w], fd[o], h, method, tol,
                                  fwd.get(w) if fwd is not None else None,
                                  None if closed is None else closed[o][w])
            if taylor:
                _taylor(tr, result, rng)
            results.append(result)
    return results


def _require_analytic(tr: Traced, w: str) -> None:
    """Refuse the complex step when an operation between w and the output takes no complex input."""
    bad = non_analytic(tr, tr.tape.names[w])
    if bad:
        eq = bad[0]
        where = f" at line {eq.pos.line}, column {eq.pos.col}" if eq.pos else ""
        # (the message is pinned word for word by tests/test_check.py, flag and all)
        raise UsageError(f"--method complex needs analytic operations, but "
                         f"'{tr.builder.op_name(eq.prim, eq.loc)}'{where} is not", eq.pos,
                         hint=f"use {option('method')} central or richardson",
                         option="method").located(tr.program.source)


def _check_block(tr: Traced, name, p, o, w, ad, fd, h, method, tol, probes, closed) -> CheckResult:
    """The check of d o / d w: reverse mode's block ad against finite differences fd, and
    against forward mode along the random directions of probes and the closed form, if any."""
    names = tr.tape.names
    notes = kinks_near(tr, names[w], h, names[o])
    shape = tr.value(o).shape + tr.value(w).shape
    ad = np.zeros(shape) if ad is None else ad
    ok, mabs, mrel, worst = compare(ad, fd, *tol)
    if not ok:
        notes += _rounding_note(tr.value(o), h, method, mabs)
    extra = {}
    if probes is not None and not _agrees_with_forward(ad, probes, o, tr.value(w).ndim, extra):
        ok = False
        notes.append("reverse and forward mode disagree")
    if closed is not None and not _agrees_with_symbolic(ad, closed, shape, extra, notes):
        ok = False
        notes.append("automatic and symbolic derivatives disagree")
    if not np.isfinite(ad).all():
        ok = False
        notes.append("non-finite derivative")
    elif not np.isfinite(fd).all():
        notes.append("finite differences are not finite here (nan or inf near the point)")
    return CheckResult(name, p, o, w, mabs, mrel, worst, method,
                       float(np.max(h)) if h.size else 0.0, ok, notes, extra)


def _agrees_with_forward(ad, probes, o, nw: int, extra: dict) -> bool:
    """Reverse mode's block times the probes' directions against forward mode along them."""
    v, jv = probes
    rev_v = np.tensordot(v, ad, axes=(tuple(range(1, nw + 1)), tuple(range(ad.ndim - nw, ad.ndim))))
    jv_o = np.zeros(rev_v.shape) if jv[o] is None else jv[o]
    ok, fabs, _, _ = compare(rev_v, jv_o, *AD_TOLERANCE)
    extra["rev_fwd_max_abs_err"] = fabs
    return ok


def _agrees_with_symbolic(ad, closed: dict, shape, extra: dict, notes: list) -> bool:
    """Reverse mode's block against sympy's closed form, where that is finite."""
    sv = np.asarray(closed["value"], dtype=float).reshape(shape)
    finite = np.isfinite(sv)
    ok, sabs, _, _ = compare(np.where(finite, ad, 0.0), np.where(finite, sv, 0.0), *SYMBOLIC_TOLERANCE)
    extra["symbolic_max_abs_err"] = sabs
    if not finite.all():
        notes.append("the closed form is singular here (gradcalc pins a value)")
    return ok


def _rounding_note(y, h, method: str, mismatch: float) -> list:
    """A note when a mismatch is no larger than the rounding error of the finite differences
    themselves (about eps |f| / h: sum(x) + 1e17 leaves differences of 16 over a step of 1e-5):
    then they cannot tell a right derivative from a wrong one."""
    if method not in stencil.ROUNDING or not np.size(y) or not np.size(h):
        return []
    size = float(np.max(np.abs(y)))
    step = float(np.min(h))
    if not (math.isfinite(size) and step > 0 and math.isfinite(mismatch)):
        return []
    noise = stencil.ROUNDING[method] * stencil.EPS * size / step
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
    names, b = tr.tape.names, tr.builder
    x = tr.value(w)
    if x.size == 0:  # no direction to take: as the full check of an empty Jacobian, nothing is wrong
        return [CheckResult(name, p, o, w, 0.0, 0.0, [], f"{method} ({k} directions)", 0.0, True, [],
                            {"dot_product_abs_err": 0.0}) for o in outs]
    kind, step = stencil.along_direction(x, method)
    _check_batch(tr, len(stencil.offsets(kind)) * k, x.size)
    v = rng.standard_normal((k,) + x.shape)
    v /= np.sqrt(np.sum(v * v, axis=tuple(range(1, v.ndim)), keepdims=True))
    rec = Recording(b)
    seed = rec.seed(x.shape)
    tan = forward(b, tr.tape.equations, {names[w]: seed})
    jv = rec.run({seed.var: v}, [tan.get(names[o]) for o in outs], k)
    dd = _directional_differences(tr, w, outs, v, kind, step)
    # (the step reported for the complex step is the central difference's, as it always was)
    hs = float(np.max(default_step(x, method if method != "complex" else "central")))
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


def _directional_differences(tr: Traced, w: str, outs, v: np.ndarray, kind: str, step: float) -> list:
    """[(k,) + o.shape for o in outs]: the derivative of each output along each of the k
    unit directions v (shape (k,) + w.shape), by a difference of the kind and step
    stencil.along_direction chose, all in one batch."""
    names = tr.tape.names
    x, k = tr.value(w), len(v)
    scales = stencil.offsets(kind)
    ys = evaluate_batch(tr, names[w], np.concatenate([x + (c * step) * v for c in scales]),
                        [names[o] for o in outs])
    taken = [np.full(k, c * step) for c in scales]
    return [stencil.combine(kind, [y[i * k:(i + 1) * k] for i in range(len(scales))], taken) for y in ys]


def taylor_order(tr: Traced, of: str, wrt: str, rng, halvings: int = 6) -> float:
    """Observed order of |f(x + h v) - f(x) - h J v| as h halves (2 for a correct J v)."""
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
    results = []
    if "gradient" in expect:
        of = expect.get("of") or outs[0]
        stored = {of: expect["gradient"]}
    elif "jacobian" in expect:
        stored = expect["jacobian"]
    else:
        raise UsageError(f"{option('expect')}: the file holds neither a 'gradient' nor a 'jacobian'",
                         hint="store the output of gradcalc grad or jacobian with -f json", option="expect")
    kind = "gradient" if "gradient" in expect else "jacobian"
    if not isinstance(stored, dict) or not all(isinstance(row, dict) for row in stored.values()):
        command = "grad" if kind == "gradient" else "jacobian"
        raise UsageError(f"{option('expect')}: '{kind}' must map names to values, as gradcalc {command} "
                         "-f json writes it", hint="store the output of gradcalc grad or jacobian with -f json",
                         option="expect")
    for o, row in stored.items():
        if o not in tr.tape.names:
            raise UsageError(f"{option('expect')}: '{o}' is not a name in the program", name=o, option="expect")
        ws = [w for w in row if w in tr.tape.names]
        blocks = jacobian_blocks(tr, [o], ws, "rev")[o]
        for w in ws:
            try:  # (a stored null, an unconnected input of grad --unconnected none, compares as nan)
                want = np.asarray(math.nan) if row[w] is None else array_from_json(row[w])
            except JSONNumberError:
                raise ValueError_(f"{option('expect')}: the stored {kind} of '{w}' is not a number or a "
                                  "nested list of numbers", name=w, option="expect") from None
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
