"""``check --sweep``: the finite-difference error over a range of steps.

The error of a difference quotient falls with the step while truncation dominates
(as h^2 for central differences, h for forward ones, h^4 for Richardson's) until
rounding, about eps |f| / h, takes over and it rises again: the V-shaped curve every
numerical-methods course draws.  Drawn against the automatic derivative, it tells a
wrong derivative (no V reaches down: the error never falls below a small fraction of
the derivative's scale) from a badly chosen step (the V is there, and the step used
sits on one of its sides).

The steps follow the check's (per element, relative to ``max(1, |x|)``: see
:mod:`.stencil`) from 1e-1 down to 1e-13 of that scale in half decades, and are reported
as taken, absolute, as the check reports its own step: at x = 1000 they run from 100 down
to 1e-10, and the check's step is 0.0078, in the sweep as in the check's row.  Every point of every step
is one row of a single batch through :func:`.numerics.evaluate_rows`, so the
differences are those of the program as written (a step that changes its path re-runs
it there, and says so; one where an operation fails, cholesky past the edge of its domain,
has no difference, as at a pole).  Nothing here prints: the CLI draws the curve.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from . import stencil
from .lower import DEFAULT_MAX_STEPS, Traced
from .numerics import RESOLVED_FRACTION, evaluate_rows, first_changes, kinks_near, path_notes
from .session import jacobian_blocks

#: The sweep's steps, relative to max(1, |x|): 1e-1 down to 1e-13 in half decades.
STEPS = 10.0 ** (-np.arange(2, 27) / 2)
#: A derivative is "wrong" when, at every step, the error exceeds atol plus this
#: fraction of the derivative's scale.  A right one comes within about 1e-10 of its
#: scale with central differences, 1e-8 with forward ones, and within 1e-6 even where
#: |f| is a million times |f'| x (cancellation); a wrong one is usually off by its own
#: size.
WRONG_FRACTION = RESOLVED_FRACTION  # (1e-5: the largest spread check allows, the same)
#: The truncation side of the V, for the fitted slope: the steps above the best one
#: whose error is at least this many times the smallest.
TRUNCATION_MARGIN = 10.0
#: ... and whose error is below this fraction of the derivative's scale: where a difference
#: is off by more, the step reaches past where the function is smooth (1/x at 1.5e-3 for
#: steps above it, log(x) at 1e-4: errors of 11% to 99%), and the error no longer follows
#: the method's order.
NEAR_FRACTION = 0.1

#: The order of each method's truncation error: the slope its V should have on that side.
ORDER = {"central": 2, "forward": 1, "richardson": 4, "complex": 2}

WRONG = "wrong derivative"
BAD_STEP = "step too small or too large"
OK = "ok"
NOT_FINITE = "finite differences are not finite here"
#: A point at a kink or a branch of the program (relu at 0), or within the smallest step of one
#: (abs at 1e-14): differences disagree with the derivative taken there at every step, which is
#: no sign of a wrong rule.
AT_KINK = "a kink within every step"
#: A point whose element x is small but not 0 (0 < |x| < 1, where the sweep's steps are not
#: scaled: STEPS times 1), and where every usable step is more than COARSE_FRACTION of |x|:
#: log(x) at 1e-12 has finite differences at its two smallest steps alone, 10-30% of x, so no
#: step of the sweep measures the derivative (check's own compares at steps relative to |x|).
COARSE = "steps not small beside x"
COARSE_FRACTION = 0.01


class Sweep(NamedTuple):
    """The error of the finite differences of d of / d wrt[element] at each step."""

    element: list  # the input element moved (wrt's index; [] for a scalar)
    steps: np.ndarray  # the steps taken: STEPS times max(1, |x|) (step_scale), as check's own
    errors: np.ndarray  # max over the output's elements of |fd - ad| at each step
    scale: float  # the derivative's scale: max |ad|, |fd| at the check's own step
    default_step: float  # the check's own step for that element (absolute, as the result's step)
    best_step: float
    best_error: float
    slope: float | None  # fitted on the truncation side (None: too few points there)
    expected_slope: int  # the method's order (ORDER)
    verdict: str
    side: str | None  # where the check's own step sits: "truncation", "rounding", None
    notes: list
    usable: np.ndarray  # per step: False where left out (see _usable), True elsewhere
    step_scale: float = 1.0  # max(1, |x|) of the element moved: steps / step_scale are STEPS

    def as_dict(self) -> dict:
        d = self._asdict()
        d["usable"] = [bool(u) for u in self.usable]  # (flags: JSON true/false, not 1.0/0.0)
        return d


def sweep(tr: Traced, of: str, wrt: str, method: str = "central", *, element=None, ad=None,
          tol: tuple = (0.0, 0.0), passed: bool | None = None,
          max_steps: int = DEFAULT_MAX_STEPS) -> Sweep:
    """The sweep of d of / d wrt along one element of wrt (default: its first).

    ``ad`` is the automatic derivative to measure against, shape of.shape + wrt.shape
    (default: reverse mode's, as check compares); ``tol`` the check's (rtol, atol);
    ``passed`` whether the check passed at its own step (None: judged from the sweep).
    """
    x = tr.value(wrt)
    y = tr.value(of)
    j = _flat_element(element, x.shape)
    if ad is None:
        ad = jacobian_blocks(tr, [of], [wrt], "rev")[of][wrt]
        ad = np.zeros(y.shape + x.shape) if ad is None else ad
    column = np.asarray(ad, dtype=float).reshape(y.size, x.size)[:, j]
    scale_x = max(1.0, abs(float(x.ravel()[j].real))) if x.size else 1.0
    default = float(stencil.default_step(x.ravel()[j:j + 1], method)[0]) if x.size else 0.0
    steps = STEPS * scale_x  # (absolute, as the check's steps: reported so)
    # the check's own step rides in the same batch
    estimates, flipped, changed = _differences(tr, of, wrt, j, method, np.append(steps, default), max_steps)
    with np.errstate(invalid="ignore"):
        errors = np.max(np.abs(estimates - column), axis=1, initial=0.0)
    at_default = errors[-1]
    errors, estimates = errors[:-1], estimates[:-1]
    scale = max(float(np.max(np.abs(column), initial=0.0)),
                float(np.max(np.abs(estimates[_nearest(steps, default)]), initial=0.0)))
    notes = (kinks_near(tr, tr.tape.names[wrt], np.array([steps[0]]), tr.tape.names[of])
             + path_notes(tr, flipped, "sweep"))
    # the rounding error of each step's difference quotient, about eps |f| / h
    noise = stencil.ROUNDING.get(method, 0.0) * stencil.EPS * float(np.max(np.abs(y), initial=0.0)) / steps
    usable, left_out = _usable(steps, errors, changed[:-1])
    found = _judged(steps, errors, usable, scale, default, at_default, tol, passed)
    if found.verdict == WRONG and _at_a_branch(tr, wrt, of, steps[-1], changed[:-1] & usable, usable):
        found = found._replace(verdict=AT_KINK)
    elif found.verdict == WRONG and x.size and _coarse_beside(float(abs(x.ravel()[j])), steps[usable]):
        found = found._replace(verdict=COARSE)
    return found._replace(element=[int(i) for i in np.unravel_index(j, x.shape)] if x.ndim else [],
                          slope=_truncation_slope(steps, errors, usable, scale,
                                                  np.maximum(noise, stencil.EPS * scale)),
                          expected_slope=ORDER[method], notes=notes + left_out, step_scale=scale_x)


def _at_a_branch(tr: Traced, wrt: str, of: str, smallest: float, changed, usable) -> bool:
    """Whether the point sits on a kink or a decision of the program: every usable step takes
    another path, or a kink the output follows lies within the smallest step."""
    return bool(usable.any() and changed[usable].all()) or bool(
        kinks_near(tr, tr.tape.names[wrt], np.array([smallest]), tr.tape.names[of]))


def _coarse_beside(x: float, usable_steps: np.ndarray) -> bool:
    """Whether no usable step is small beside the element's |x| (see COARSE)."""
    return 0.0 < x < 1.0 and bool(usable_steps.size) and float(usable_steps.min()) > COARSE_FRACTION * x


def _flat_element(element, shape) -> int:
    if element is None or not shape:
        return 0
    return int(np.ravel_multi_index(tuple(int(i) for i in element), shape))


def _nearest(steps: np.ndarray, step: float) -> int:
    return int(np.argmin(np.abs(np.log(steps) - math.log(step)))) if step > 0 else len(steps) - 1


def _differences(tr: Traced, of: str, wrt: str, j: int, method: str, hs: np.ndarray,
                 max_steps: int) -> tuple[np.ndarray, tuple, np.ndarray]:
    """(estimates, flipped, changed): method's estimate of d of / d x_j at each step of hs,
    shape (len(hs), of.size), all steps' points in one batch (see evaluate_batch); the
    guards some step changed; and per step whether one of its points takes another path."""
    x = tr.value(wrt)
    scales = stencil.offsets(method)
    centre = stencil.needs_centre(method)
    complex_ = any(isinstance(c, complex) for c in scales)
    base = x.astype(complex) if complex_ else x
    flat = np.tile(base.ravel(), (len(scales) * len(hs) + centre, 1))
    taken = []
    for k, c in enumerate(scales):
        block = flat[k * len(hs):(k + 1) * len(hs)]
        block[:, j] += c * hs
        taken.append(block[:, j] - base.ravel()[j])  # x + h may round: divide by the step taken
    tr.builder.check_size((len(flat), x.size), what=f"a sweep of {len(flat)} perturbed copies of a "
                                                    f"{x.size}-element input")
    batch = flat.reshape((len(flat),) + x.shape)
    # (a step whose points leave the domain of an operation that fails there, cholesky's say,
    # has nan differences, left out as a pole's are: see _usable)
    (ys,), (flipped,) = evaluate_rows(tr, wrt, batch, [of], max_steps)
    changed = np.zeros(len(hs), dtype=bool)
    if flipped:  # (which steps: one more pass over the tape, only when some step changes the path)
        first = first_changes(tr, wrt, batch, [of])[:len(scales) * len(hs)]
        changed = (first.reshape(len(scales), len(hs)) >= 0).any(axis=0)
    ys = ys.reshape(len(flat), -1)
    blocks = [ys[k * len(hs):(k + 1) * len(hs)] for k in range(len(scales))]
    estimates = stencil.combine(method, blocks, taken, ys[-1:] if centre else None)
    return np.real(estimates), flipped, changed


def _usable(steps, errors, changed) -> tuple[np.ndarray, list]:
    """(usable, notes): the steps the best step and the slope are taken from, and a note
    for the steps left out.  Left out: a step whose difference is not finite, and every
    larger one (a larger stencil spans the point where the program is not finite or not
    defined: 1/x at x = 1e-3 is infinite at the step 1e-3, and the larger steps jump over
    the pole, their differences finite but meaningless); and a step whose points take
    another path than the point's (its difference mixes two formulas), unless every
    usable step does (at the decision itself: then nothing else is there to measure)."""
    finite = np.isfinite(errors)
    spans = np.zeros(len(steps), dtype=bool)
    if not finite.all():
        spans[:int(np.flatnonzero(~finite).max()) + 1] = True  # (steps run from the largest down)
    usable, notes = ~spans, []
    if spans.any() and finite.any():
        notes.append(f"steps {_range(steps[spans])} left out: a difference there is not finite, or its "
                     "stencil spans one that is (a pole or the edge of the domain within the step)")
    if (usable & changed).any() and (usable & ~changed).any():
        usable = usable & ~changed
        notes.append(f"steps {_range(steps[changed & ~spans])} left out: their points take another path "
                     "than the point's (see the note on the change of path)")
    return usable, notes


def _range(steps) -> str:
    return f"{steps.max():.2g}" if len(steps) == 1 else f"{steps.max():.2g} to {steps.min():.2g}"


def _judged(steps, errors, usable, scale, default, at_default, tol, passed) -> Sweep:
    """The sweep's best step and verdict (see the module's docstring); its element, slope
    and notes are the caller's to fill in."""
    element, notes = [], []
    rtol, atol = tol
    if not usable.any():
        return Sweep(element, steps, errors, scale, default, math.nan, math.nan, None, 0, NOT_FINITE,
                     None, notes, usable)
    best, floor = _bottom(errors, usable)
    if floor > atol + WRONG_FRACTION * scale:
        verdict = WRONG
    elif passed if passed is not None else at_default <= atol + rtol * scale:
        verdict = OK
    else:
        verdict = BAD_STEP
    side = None
    if verdict != WRONG and not at_default <= TRUNCATION_MARGIN * max(floor, stencil.EPS * scale):
        side = "truncation" if default > steps[best] else "rounding"
    return Sweep(element, steps, errors, scale, default, float(steps[best]), float(errors[best]), None, 0,
                 verdict, side, notes, usable)


def _bottom(errors, usable) -> tuple[int, float]:
    """(best, floor): the bottom of the V among the usable steps, and its level.

    Not the single smallest error: in the rounding region a difference quotient is noise,
    and noise can land on the derivative by chance (x^2 + 1e-4 stop_gradient(x) at x = 100:
    error 0 at the step 1e-13, 0.025 at 3.2e-13, 1e-4 at every larger step).  So each step
    counts by the largest error among it and its usable neighbours, a half decade either
    side (a smoothing by a running maximum), and the best step is the one where that is
    smallest.  A lucky dip is outvoted by its neighbours; at the true bottom the neighbours
    differ from it by a small factor (10^(order/2) on the truncation side), so the bottom
    moves by at most one step.  The floor (what the verdict compares) is that smoothed
    level, so a wrong derivative cannot pass for a right one by one lucky step either."""
    e = np.where(usable, errors, -np.inf)
    padded = np.concatenate(([-np.inf], e, [-np.inf]))
    smoothed = np.maximum.reduce([padded[:-2], padded[1:-1], padded[2:]])
    smoothed = np.where(usable, smoothed, np.inf)
    best = int(np.lexsort((errors, smoothed))[0])  # (ties: the smaller error of its own)
    return best, float(smoothed[best])

def _truncation_slope(steps, errors, usable, scale, noise) -> float | None:
    """The slope of log(error) against log(step) on the truncation side: the run of steps,
    from the largest usable one whose difference is near the derivative (error below
    NEAR_FRACTION of its scale) down, whose error
    stands clear (TRUNCATION_MARGIN times) of the floor and of the rounding error at that
    step (noise).  None when fewer than two do: where the method is exact (central
    differences of a quadratic), the error is rounding alone."""
    if not usable.any():
        return None
    floor = np.min(np.where(usable, errors, np.inf))
    clear = usable & (errors >= TRUNCATION_MARGIN * np.maximum(floor, noise))
    near = usable & (errors < NEAR_FRACTION * scale)
    start = int(np.argmax(near)) if near.any() else len(steps)
    run = start + (int(np.argmin(clear[start:])) if not clear[start:].all() else len(steps) - start)
    if run - start < 2:
        return None
    return float(np.polyfit(np.log10(steps[start:run]), np.log10(errors[start:run]), 1)[0])


def attach(tr: Traced, result, method: str, tol: tuple, max_steps: int = DEFAULT_MAX_STEPS, *,
           ad) -> None:
    """Add the sweep of a check result (one of full Jacobian's) to its extra["sweep"]: along
    the input element where the check found its worst error.  ad: the reverse-mode block the
    check compared (None where nothing reaches the output), which the sweep would otherwise
    compute again: a backward pass over the tape per result."""
    if tr.value(result.wrt).size == 0 or tr.value(result.of).size == 0:
        return  # an empty Jacobian: no element to move, nothing to measure
    xshape = tr.value(result.wrt).shape
    rank = tr.value(result.of).ndim + len(xshape)
    worst = result.worst_index
    element = worst[len(worst) - len(xshape):] if len(worst) == rank else None
    if ad is None:  # (no path to the output: the zero block sweep would compute)
        ad = np.zeros(tr.value(result.of).shape + xshape)
    result.extra["sweep"] = sweep(tr, result.of, result.wrt, method, element=element, ad=ad, tol=tol,
                                  passed=result.ok, max_steps=max_steps).as_dict()
