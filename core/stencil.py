"""Finite differences: the methods, their steps, the points each evaluates, and how the values
there combine into an estimate (and an error estimate).

Two engines use this module and differ only in how they evaluate the points:
``check`` of a program (:mod:`.numerics`) runs them all in one batched pass over
the forward tape; a black box (:mod:`.blackbox`) receives them all in one request.

Steps are per element, from the value's scale ``s = max(1, |x|)``, rounded to a
power of two so that ``x + h`` is exact where it can be; the quotients divide by
the step actually taken, ``(x + h) - x``, which can differ when x is large.

=========== ======================= ============ ================ ===================
method      estimate                step h       offsets (of h)   truncation/rounding
=========== ======================= ============ ================ ===================
central     (f(x+h) - f(x-h)) / 2h  eps^(1/3) s  +1, -1           O(h^2) / O(eps/h)
forward     (f(x+h) - f(x)) / h     eps^(1/2) s  +1 (and x)       O(h)   / O(eps/h)
richardson  (4 D(h/2) - D(h)) / 3   eps^(1/5) s  +1, -1, +½, -½   O(h^4) / O(eps/h)
complex     Im f(x + i h) / h       1e-20 s      +i               O(h^2), no cancellation
=========== ======================= ============ ================ ===================

With an error estimate (a black box's, :func:`combine` ``with_error=True``), the
real methods also evaluate the same difference at h/2, in the same batch:

=========== ============================ ==================================
method      estimate                     error estimate (per element)
=========== ============================ ==================================
richardson  R = (4 D(h/2) - D(h)) / 3    |R - D(h/2)|: the error of D(h/2),
                                         a generous bound on R's
central     D(h), central difference     4/3 |D(h) - D(h/2)|: D(h)'s O(h^2)
                                         truncation error (plus rounding)
forward     D(h), one-sided difference   2 |D(h) - D(h/2)|: D(h)'s O(h)
                                         truncation error (plus rounding)
=========== ============================ ==================================

Each error estimate also adds the rounding error ``eps |f(x)| / h``, since the
two steps can agree by chance.
"""
from __future__ import annotations

import numpy as np

EPS = np.finfo(np.float64).eps

METHODS = ("central", "forward", "richardson", "complex")
#: The methods that need no complex arithmetic inside the function (a black box's).
REAL_METHODS = ("central", "forward", "richardson")

#: The step of each real method is a power of two near eps ** POWER * max(1, |x|).
_POWER = {"central": 1 / 3, "forward": 1 / 2, "richardson": 1 / 5}
#: The complex step: no difference is taken, so it can be tiny.
COMPLEX_STEP = 1e-20

#: The points each method evaluates per element, as multiples of its step, in batch order.
_OFFSETS = {"central": (1.0, -1.0), "forward": (1.0,), "richardson": (1.0, -1.0, 0.5, -0.5),
            "complex": (1j,)}
#: The same with the points at h/2 that give an error estimate (real methods only).
_OFFSETS_WITH_ERROR = {"central": (1.0, -1.0, 0.5, -0.5), "forward": (1.0, 0.5),
                       "richardson": (1.0, -1.0, 0.5, -0.5)}

#: The order of each real method's truncation error: O(h^ORDER).
ORDER = {"forward": 1, "central": 2, "richardson": 4}
#: Rounding error of each method's difference quotient, in units of eps |f| / h.
ROUNDING = {"forward": 2.0, "central": 1.0, "richardson": 3.0}


def default_step(x: np.ndarray, method: str) -> np.ndarray:
    """The per-element step of method at x: a power of two near eps^p * max(1, |x|)
    (COMPLEX_STEP * max(1, |x|) for the complex step)."""
    scale = np.maximum(1.0, np.abs(x))
    if method == "complex":
        return COMPLEX_STEP * scale
    h = EPS ** _POWER[method] * scale
    return np.exp2(np.round(np.log2(h)))


def relative_step(x: np.ndarray, method: str) -> np.ndarray:
    """default_step with |x| as the scale where 0 < |x| < 1 (max(1, |x|) elsewhere): for a function
    that changes on the scale of x itself (1/x, log x near 0), where the default step is coarse."""
    ax = np.abs(x)
    scale = np.where((ax > 0) & (ax < 1), np.maximum(ax, 1e-290), np.maximum(1.0, ax))
    if method == "complex":
        return COMPLEX_STEP * scale
    return np.exp2(np.round(np.log2(EPS ** _POWER[method] * scale)))


def offsets(method: str, with_error: bool = False) -> tuple:
    """The multiples of the step that method evaluates along each element, in batch order."""
    return (_OFFSETS_WITH_ERROR if with_error else _OFFSETS)[method]


def needs_centre(method: str) -> bool:
    """Whether method also needs f(x) itself (the one-sided difference does)."""
    return method == "forward"


def perturb(x: np.ndarray, h: np.ndarray, scales, centre: bool = False, columns=None):
    """(batch, taken): a row of x per element and scale, that element moved by scale * h.

    ``x`` and ``h`` are flat; batch has len(scales) blocks of m rows, one per element of
    ``columns`` (indices into x; every element when None), block k moving element columns[i]
    of row i by scales[k] * h[columns[i]]; and one more row, x itself, when ``centre``.
    taken[k] is the step actually taken along each of those elements in block k,
    ``(x + scales[k] h) - x``: x + h may round.  Complex scales make a complex batch.
    """
    cols = np.arange(x.size) if columns is None else np.asarray(columns, dtype=np.intp)
    m = cols.size
    complex_ = any(isinstance(c, complex) for c in scales)
    batch = np.tile(x.astype(complex) if complex_ else x, (len(scales) * m + centre, 1))
    diag = (np.arange(m), cols)
    taken = []
    for k, c in enumerate(scales):
        block = batch[k * m:(k + 1) * m]
        block[diag] += c * h[cols]
        taken.append(block[diag] - x[cols])
    return batch, taken


def along_direction(x: np.ndarray, method: str, relative: bool = False) -> tuple[str, float]:
    """(the method, the step) of a directional difference for method at x.

    Directions are unit vectors, so one scalar step serves every element: the
    complex step as it is (COMPLEX_STEP); any other method is itself along the
    direction (Richardson's extrapolation, the one-sided difference), at its
    largest step at x; with ``relative``, its smallest step relative to |x|
    (:func:`relative_step`), which moves no element by more than its own.  Each
    method keeps its own step, as its tolerance assumes: a central difference
    at Richardson's step (eps^(1/5)) leaves a truncation error of ~1e-6, which
    Richardson's rtol of 1e-8 fails.
    """
    if method == "complex":
        return "complex", COMPLEX_STEP
    steps = relative_step(x, method) if relative else default_step(x, method)
    return method, float(np.min(steps) if relative else np.max(steps))


def combine(method: str, ys: list, taken: list, centre=None, with_error: bool = False):
    """The estimate from the values ys[k] at the offsets of :func:`offsets` (method, with_error).

    ``ys[k]`` has shape (n,) + f's shape (row i: element i moved) and ``taken[k]``
    shape (n,), the steps taken (see :func:`perturb`); ``centre`` is f(x), which
    the one-sided difference and the error estimate need.  Returns the rows of
    the estimate, shape (n,) + f's shape; with ``with_error``, (estimate, error
    estimate) as in the module's second table.
    """
    col = [t.reshape((t.size,) + (1,) * (ys[0].ndim - 1)) for t in taken]
    if method == "complex":  # (the step taken is i h exactly: x's real part does not move)
        return ys[0].imag / col[0].imag
    if method == "forward":
        d1 = (ys[0] - centre) / col[0]
        if not with_error:
            return d1
        d2 = (ys[1] - centre) / col[1]
        estimate, error = d1, 2 * np.abs(d1 - d2)
    else:
        d1 = (ys[0] - ys[1]) / (col[0] - col[1])
        if method == "central" and not with_error:
            return d1
        d2 = (ys[2] - ys[3]) / (col[2] - col[3])
        if method == "richardson":  # (4 D(h/2) - D(h)) / 3 cancels the h^2 term
            estimate = (4 * d2 - d1) / 3
            if not with_error:
                return estimate
            error = np.abs(estimate - d2)
        else:
            estimate, error = d1, 4 / 3 * np.abs(d1 - d2)
    # the two steps can agree by chance: never claim less than the rounding error
    return estimate, error + EPS * np.abs(centre) / np.abs(col[0])
