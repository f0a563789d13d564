"""What every check reports: derivatives against a reference, within tolerances chosen here.

``check`` of a program (:mod:`.numerics`) and of a black box (:mod:`.blackbox`)
compare with :func:`compare`, report one :class:`CheckResult` per (point, of,
wrt) and return them in one Result (:func:`check_result`), whose ``rtol`` and
``atol`` are the tolerances actually applied: the defaults below unless given.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .errors import UsageError, option
from .results import Result
from .tape import all_finite

#: Default tolerances per finite-difference method: an element passes when
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
#: A black box against gradcalc's derivatives of the same program (``check SOURCE --exec``):
#: two float64 implementations of one function agree to ~1e-13 unless they use different
#: formulas (log(1 + x) against log1p(x)); 1e-8 leaves room for that and still catches any
#: real mistake.
EXEC_TOLERANCE = (1e-8, 1e-10)


def kink_text(builder, eq) -> str:
    """A kink as notes name it: "kink of 'clip' (line 1, column 1)", the operation the program
    wrote there (clip, //, >, a built-in's name), not the primitive recorded (maximum,
    floor_divide, gt): see tape.Builder.op_name."""
    pos = eq.pos
    where = f" (line {pos.line}, column {pos.col})" if pos else ""
    return f"kink of '{builder.op_name(eq.prim, eq.loc)}'{where}"


def tolerance(default: tuple, rtol: float | None, atol: float | None) -> tuple[float, float]:
    """(rtol, atol): each the one given, or default's.  A given one must be a finite non-negative
    number (a negative or nan tolerance would pass anything): every check, of a program or of
    a black box, refuses it alike."""
    for opt, v in (("rtol", rtol), ("atol", atol)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating))):
            raise UsageError(f"{option(opt)} takes a number, not {v!r:.60}", option=opt)
        if v is not None and not (v >= 0 and _finite(v)):
            raise UsageError(f"{option(opt)} must be a finite non-negative number, not {v!s:.60}", option=opt)
    # (+ 0.0: a tolerance of -0 is 0, and is echoed so)
    return (default[0] if rtol is None else float(rtol) + 0.0, default[1] if atol is None else float(atol) + 0.0)


def _finite(v) -> bool:
    try:
        return math.isfinite(v)
    except OverflowError:  # (an int past the largest float: 10**400)
        return False


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
    #: what was compared: "jacobian" (full, against finite differences), "directions"
    #: (--directions), "expect" (a stored result), "exec" (a black box)
    comparison: str = "jacobian"
    #: the line of the program that defines the output ``of`` (where CI annotates a failure)
    line: int | None = None

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ("source", "point", "of", "wrt", "comparison", "line", "max_abs_err",
                                           "max_rel_err", "worst_index", "method", "step", "ok",
                                           "notes")}
        d.update(self.extra)
        return d


def check_result(results: list, tol: tuple, comparison: str | None = None) -> Result:
    """What a check returns: its results, whether all pass, and the tolerances applied
    (and, given, what every result compared: see CheckResult.comparison)."""
    for r in results if comparison else ():
        r.comparison = comparison
    for r in results:  # (every result says what it was held to: a suite's sources can differ)
        if isinstance(r, CheckResult):
            r.extra.setdefault("rtol", tol[0])
            r.extra.setdefault("atol", tol[1])
    return Result({}, command="check", ok=all(r.ok for r in results), results=results,
                  rtol=tol[0], atol=tol[1])


def compare(ad: np.ndarray, ref: np.ndarray, rtol: float, atol: float, slack=None):
    """(ok, max_abs_err, max_rel_err, worst_index) of ad against the reference ref.

    An element passes when |ad - ref| <= atol + rtol |ref| (+ slack, an allowance per
    element for rounding, broadcast to ad's shape); a non-finite element fails (its
    errors are inf).  The relative error of an element is |ad - ref| / max(|ad|, |ref|)
    (0 when both are 0); worst_index is the element furthest outside its tolerance.
    """
    ad, ref = np.broadcast_arrays(np.asarray(ad, float), np.asarray(ref, float))
    shape = ad.shape
    if ad.size == 0:
        return True, 0.0, 0.0, []
    ad, ref = ad.reshape(-1), ref.reshape(-1)
    if slack is not None:
        atol = atol + np.broadcast_to(slack, shape).reshape(-1)
    with np.errstate(all="ignore"):
        diff = np.abs(ad - ref)
        if all_finite(diff):
            badness, rel = _errors_finite(ad, ref, diff, rtol, atol)
        else:
            badness, rel = _errors_general(ad, ref, diff, rtol, atol)
    worst = int(np.argmax(badness))
    return (bool(badness[worst] <= 1.0), float(diff.max()), float(rel.max()),
            [int(i) for i in np.unravel_index(worst, shape)])


def breach(ad, ref, worst: list, rtol: float, atol: float, slack=None, ref_name: str = "fd") -> dict:
    """What a failing comparison records at its worst element (SPEC §5): ``ad`` and the
    reference there (``ref_name``: ``fd``, or ``stored``), ``allowed`` (atol + rtol |ref|,
    plus any rounding slack) and ``bound``, the term of the tolerance that was the largest:
    "rtol" when rtol |ref| >= atol (the relative error is too large), else "atol" (the
    absolute error is), or "rounding" when the rounding slack outweighed both; "finite" when ad
    or the reference is not finite (allowed is then what the formula gives: nan for a nan
    reference, inf for an infinite one; no tolerance decides there)."""
    ad, ref = np.broadcast_arrays(np.asarray(ad, float), np.asarray(ref, float))
    at = tuple(worst)
    a, r = float(ad[at]), float(ref[at])
    extra = 0.0 if slack is None else float(np.broadcast_to(slack, ad.shape)[at])
    terms = {"rtol": rtol * abs(r), "atol": atol, "rounding": extra}
    bound = max(terms, key=lambda k: terms[k] if math.isfinite(terms[k]) else -1.0)
    if not (math.isfinite(a) and math.isfinite(r)):  # (no tolerance weighs an inf or a nan: sqrt at 0,
        bound = "finite"                           # ad inf against fd nan, said 'atol' and allowed nan)
    return {"ad": a, ref_name: r, "allowed": atol + rtol * abs(r) + extra, "bound": bound,
            "rtol": rtol, "atol": atol}


def fail_non_finite(ad, ref, ok: bool, worst: list, tol: tuple, notes: list, extra: dict | None = None):
    """(ok, worst) once a non-finite derivative counts as a failure (SPEC §7), even where the
    reference is as non-finite (compare lets nan meet nan, or inf the same inf).  Given extra,
    a failure the comparison did not already record is recorded there, at the first element
    that is not finite (bound "finite")."""
    finite = np.isfinite(ad)
    if finite.all():
        return ok, worst
    notes.append("non-finite derivative")
    if extra is not None and "bound" not in extra:
        worst = [int(i) for i in np.unravel_index(int(np.argmin(finite)), np.shape(ad))]
        extra.update(breach(ad, ref, worst, *tol), bound="finite")
    return False, worst


def unmeasured_errors(ad, ref, max_abs: float, max_rel: float) -> tuple[float, float]:
    """The errors a result reports: where its derivative is not finite, nan when |ad - ref| has
    a nan (a nan, or an infinity met by the same infinity), as NumPy's max of it has.  compare
    counts such a meeting as agreement, an error of 0, which a row that fails for its non-finite
    derivative must not show: it read 'FAIL ... max_abs_err=0'."""
    if np.isfinite(ad).all():
        return max_abs, max_rel
    with np.errstate(invalid="ignore"):
        unknown = np.isnan(np.abs(np.asarray(ad, float) - np.asarray(ref, float))).any()
    return (math.nan, math.nan) if unknown else (max_abs, max_rel)


def directions_label(method: str, k: int) -> str:
    """What a --directions result compared: 'central (4 directions)', 'central (1 direction)'."""
    return f"{method} ({k} direction{'' if k == 1 else 's'})"


def breach_text(result) -> str | None:
    """A failing result's numbers in words (None when it has none):
    ``at [3]: ad 2.5, fd 2.4: |ad - fd| = 0.1 > 2.4e-06 allowed (rtol bound: rtol 1e-06 x |fd|)``."""
    x = result.extra
    if "bound" not in x or result.comparison == "expect":  # (an expectation's note says it: entry ...)
        return None
    ref = "stored" if "stored" in x else "fd"
    a, r = x["ad"], x[ref]
    why = {"rtol": f"rtol {x['rtol']:g} x |{ref}|", "atol": f"atol {x['atol']:g}",
           "rounding": "rounding allowance", "finite": "a derivative must be finite"}[x["bound"]]
    where = _where(result)
    if not (math.isfinite(a) and math.isfinite(r)):  # (no difference to weigh: say which is not finite)
        return f"{where}ad {a:.10g}, {ref} {r:.10g}: not finite"
    return (f"{where}ad {a:.10g}, {ref} {r:.10g}: |ad - {ref}| = {abs(a - r):.3g} > "
            f"{x['allowed']:.3g} allowed ({x['bound']} bound: {why})")


def _where(result) -> str:
    """Where a failing result's worst element is, in breach_text's words: 'at [1, 2]: ' for a
    Jacobian's element; along directions, whose index is (direction, output element), the
    direction by its number ('along direction 1: ', 'along direction 0, at [2]: '), so that it
    is not read as an element of the input."""
    index = list(result.worst_index)
    if result.comparison == "directions" and index:
        at = f", at [{', '.join(map(str, index[1:]))}]" if index[1:] else ""
        return f"along direction {index[0]}{at}: "
    return "at [" + ", ".join(map(str, index)) + "]: " if index else ""


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
