"""``plot``: a program's output and its derivative along one input, sampled over an interval.

The samples are rows of one batch.  The program is traced once, at the first sample,
and forward mode records the derivative along the line on the same builder (the tangent
equations read the primal values they need); one batched pass over the primal and the
tangent equations together then gives every sample's value and derivative (and, with
``hessian``, the second derivative: forward mode over that forward pass).  Forward mode,
because the derivative wanted is the one along the line, J v, which is one tangent per
sample: reverse mode would need a backward pass per sample for the same number.

Samples where the program takes another path (SPEC §2.1) are found as check finds them
(:mod:`.numerics`: every guard's variable recomputed in the batched pass): the program is
run at the first such sample, and that run's tape serves, in one batched pass, every
sample on its path; one run per path.  Where the path changes between two samples, and
where a kink of the output lies (the check's kink rule: the kinks that the output's value
follows), the result carries a mark.  Nothing here prints: the CLI draws the picture.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .checks import kink_text
from .errors import LimitError, ShapeError, UsageError, did_you_mean, option
from .lower import DEFAULT_MAX_STEPS, Traced, find_inputs, trace
from .numerics import kinked_equations, on_tape, path_notes, run_at
from .results import Result
from .session import as_arrays, parse, quiet, select_names, select_output
from .tape import DEFAULT_MAX_ELEMENTS, eval_equations
from .transforms import forward, largest_batched, seeded

DEFAULT_SAMPLES = 200
#: A mark between two samples is located by rounds of one batched pass each over this many
#: points between the two that bracket it (each round narrows the bracket 32 times), until
#: the bracket is a few units in the last place wide: the mark is placed where the kink or
#: the change of path is, not where the samples happen to fall.
BISECTIONS = 32
ROUNDS = 12


class Line(NamedTuple):
    """The inputs along the plot: ``over`` at x0 + t v for each abscissa t (a scalar with
    no direction: at t itself)."""

    over: str
    t: np.ndarray  # the abscissae
    x0: np.ndarray
    v: np.ndarray | None

    def points(self) -> np.ndarray:
        """The value of over at each abscissa, shape (len(t),) + over's shape."""
        if self.v is None:
            return self.t.reshape((-1,) + self.x0.shape)
        return self.x0 + self.t.reshape((-1,) + (1,) * self.x0.ndim) * self.v


def parse_over(text: str) -> tuple[str, float, float]:
    """``NAME=LO:HI`` (LO and HI constant expressions: -pi:pi) -> (name, lo, hi)."""
    from .values import parse_value
    name, eq, interval = text.partition("=")
    lo, colon, hi = interval.partition(":")
    if not (eq and colon and name.strip().isidentifier()):
        raise UsageError(f"{option('over')} takes NAME=LO:HI, not '{text}'", option="over",
                         hint="e.g. --over x=-2:2")
    ends = [parse_value(v, f"{option('over')} {name.strip()}") for v in (lo, hi)]
    if any(e.size != 1 for e in ends):
        raise UsageError(f"{option('over')}: LO and HI are numbers, not arrays", option="over")
    lo_, hi_ = (float(e.reshape(())) for e in ends)
    return name.strip(), lo_, hi_  # (plot checks that LO < HI)


@quiet
def plot(source, over: str, lo: float, hi: float, *, samples: int = DEFAULT_SAMPLES, direction=None,
         hessian: bool = False, at=None, of=None, wrt=None, max_elements: int = DEFAULT_MAX_ELEMENTS,
         max_steps: int = DEFAULT_MAX_STEPS) -> Result:
    """The output of source and its derivative at ``samples`` points over [lo, hi] of the
    input ``over`` (others at their at= or default values).  An array input needs
    ``direction`` (its shape): the line x0 + t v through its at= value, t in [lo, hi].
    ``wrt`` (default: over, along the line) names a scalar value to differentiate with
    respect to instead.  Returns a Result (command "plot")."""
    program = parse(source)
    if samples < 2:
        raise UsageError(f"{option('samples')} must be at least 2, not {samples}", option="samples")
    if samples > max_elements:  # (refused before the abscissae are made: 2e8 of them took 14 s)
        raise LimitError(f"{option('samples')}={samples} asks for more samples than "
                         f"{option('max_elements')}={max_elements}", option="samples")
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise UsageError(f"{option('over')} needs finite LO < HI, got {lo:g}:{hi:g}", option="over")
    if not math.isfinite(hi - lo):  # (the samples' spacing would overflow)
        raise UsageError(f"{option('over')} {lo:g}:{hi:g} is wider than a float can span", option="over",
                         hint="make the interval narrower than about 1.8e308")
    line, tr = _line(program, over, np.linspace(lo, hi, samples), direction, as_arrays(at),
                     dict(max_elements=max_elements, max_steps=max_steps))
    out = select_output(tr, of)
    if tr.value(out).size != 1:
        raise ShapeError(f"plot draws a scalar output, but '{out}' has shape {tr.value(out).shape}",
                         tr.tape.positions.get(out), name=out, option="of",
                         hint=f"select a scalar with {option('of')}, or reduce it, e.g. sum(...)")
    (w,) = select_names(tr, [wrt or over], "wrt", ())
    if w != over and tr.value(w).size != 1:
        raise ShapeError(f"{option('wrt')} '{w}' has shape {tr.value(w).shape}: plot differentiates "
                         "with respect to a scalar", name=w, option="wrt")
    if hessian and w not in tr.tape.inputs:
        raise UsageError("plot --hessian differentiates with respect to inputs only; "
                         f"'{w}' is an intermediate value", name=w, option="wrt")
    curves, marks = _sampled(tr, line, out, w, hessian, max_steps)
    data = {"abscissae": line.t, "values": curves[0], "derivatives": curves[1]}
    if hessian:
        data["second_derivatives"] = curves[2]
    return Result(data, command="plot", of=out, over=over, wrt=w,
                  direction=line.v, marks=marks, at=_point(tr, line), warnings=[m.message for m in tr.warnings])


def _point(tr: Traced, line: Line) -> dict:
    """The inputs' values the plot was made at: the others', and the array input's own point
    x0 when the plot runs along the line x0 + t v (a scalar input's value is the abscissa)."""
    return {k: line.x0 if k == line.over else tr.value(k) for k in tr.tape.inputs
            if k != line.over or line.v is not None}


def _line(program, over: str, t: np.ndarray, direction, at: dict, limits: dict) -> tuple[Line, Traced]:
    """The line through the point, and the program traced at its first sample."""
    inputs = {i.name: i for i in find_inputs(program)}
    if over not in inputs:
        hint = did_you_mean(over, inputs) or (f"the inputs are: {', '.join(inputs)}" if inputs
                                              else "the program has no inputs")
        raise UsageError(f"{option('over')} '{over}' is not an input of the program", name=over,
                         option="over", hint=hint)
    point = dict(at)
    if over not in point and inputs[over].default is None and inputs[over].shape is None:
        point[over] = np.asarray(t[0])  # a free scalar input: it needs no value of its own
    x0 = trace(program, point, **limits).value(over)
    v = None if direction is None else np.asarray(direction, dtype=float)
    if v is None and x0.size != 1:
        raise ShapeError(f"{option('over')} '{over}' has shape {x0.shape}: a plot runs along one "
                         "line", name=over, option="over",
                         hint=f"give {option('direction')} V (of shape {x0.shape}) for the line "
                              f"{over} + t V, t in LO:HI")
    if v is not None and v.shape != x0.shape:
        raise ShapeError(f"{option('direction')} has shape {v.shape}, but '{over}' has shape {x0.shape}",
                         name=over, option="direction")
    line = Line(over, t, x0, v)
    return line, trace(program, {**point, over: line.points()[0]}, **limits)


def _sampled(tr: Traced, line: Line, out: str, w: str, hessian: bool, max_steps: int):
    """([values, derivatives(, second derivatives)], marks): every sample, one batched pass
    per path; a mark where the path changes between two samples and where a kink lies."""
    xs = line.points()
    curves = np.full((2 + hessian, len(xs)), np.nan)
    pending, traced, groups = np.arange(len(xs)), tr, []
    while pending.size:
        if traced is None:  # the program fails at this sample: no value there
            pending = pending[1:]
        else:
            _, first, _ = on_tape(traced, line.over, xs[pending], [out])
            rows = pending[first < 0]
            if rows.size:
                found, kinks = _along(traced, line, out, w, hessian, rows)
                curves[:, rows] = found
                groups.append((traced, rows, kinks))
            pending = pending[first >= 0]
        if pending.size:
            traced = run_at(tr, {**{n: tr.value(n) for n in tr.tape.inputs}, line.over: xs[pending[0]]},
                            max_steps)
    return list(curves), _path_marks(groups, line, out, max_steps) + _kink_marks(groups, line)


def _along(tr: Traced, line: Line, out: str, w: str, hessian: bool, rows: np.ndarray):
    """The value, derivative (and second derivative) at the samples rows, all on tr's path:
    forward mode (over forward mode) recorded on tr's builder, then one batched pass over
    the primal and tangent equations; and the kinks' distances at those samples."""
    b, names = tr.builder, tr.tape.names
    saved, b.check_finite = b.check_finite, False  # traced at one point: its values mean nothing
    start = len(b.equations)
    var = names[w]
    seed = b.input(line.v if line.v is not None and w == line.over else np.ones(tr.value(w).shape))
    tangent = forward(b, tr.tape.equations, {var: seed}, check=False).get(names[out])
    wanted = [names[out], tangent]
    if hessian:
        seed2 = b.input(np.asarray(seed.value))
        second = forward(b, list(tr.tape.equations) + b.equations[start:], {var: seed2}, check=False)
        wanted.append(None if tangent is None else second.get(tangent.var))
    b.check_finite = saved
    wanted = [t if t is None or isinstance(t, int) else t.var for t in wanted]
    kinked = kinked_equations(tr, names[line.over], names[out])
    keep = {v for v in wanted if v is not None} | {v for eq in kinked for v in (eq.out, *eq.args)}
    over = names[line.over]
    equations = seeded(list(tr.tape.equations) + b.equations[start:], [over])
    largest = largest_batched(equations, [over], b.shapes)
    b.check_size((len(rows), largest), what=f"a batch of {len(rows)} samples through {largest}-element values")
    env = dict(b.values)
    env[over] = line.points()[rows]
    eval_equations(equations, env, keep=keep, batch_elements=len(rows) * largest)
    shape = (len(rows),)
    found = [np.zeros(shape) if v is None else np.broadcast_to(env[v], shape + b.shapes[v]).reshape(shape)
             for v in wanted]
    return found, [(eq, _kink_distances(eq, env, b.shapes, len(rows))) for eq in kinked]


def _kink_distances(eq, env: dict, shapes: dict, n: int) -> np.ndarray:
    """The signed distance from eq's kink at each sample, shape (n, elements): one call on
    the batched values (a primitive's parameters address axes from the end)."""
    args = [np.broadcast_to(env[v], (n,) + shapes[v]) for v in (eq.out, *eq.args)]
    with np.errstate(all="ignore"):
        d = np.asarray(eq.prim.kink(*args, **eq.params), dtype=float)
    return np.broadcast_to(d, (n,) + d.shape[1:]).reshape(n, -1)


def _kink_marks(groups: list, line: Line) -> list:
    """A mark where a kink lies between consecutive samples of one path: where its signed
    distance changes sign (or is zero), or where an unsigned one (a gap: max's tie) dips
    to a V whose bottom is within a typical change between samples of zero."""
    t, marks = line.t, []
    for traced, rows, kinks in groups:
        for eq, d in kinks:
            typical = np.median(np.abs(np.diff(d, axis=0)), axis=0) if len(d) > 1 else np.zeros(d.shape[1])
            gap = (d >= 0).all(axis=0)  # the elements whose distance never goes negative
            distance = _distance_along(traced, line, eq)
            for i in range(len(rows) - 1):
                if rows[i + 1] != rows[i] + 1:
                    continue
                e = _crossing(d[i], d[i + 1], typical, ~gap)
                if e is not None:
                    x = _refined(t[rows[i]], t[rows[i + 1]], lambda ts: _past(distance(ts)[:, e], d[i, e]))
                elif 0 < i and rows[i - 1] == rows[i] - 1:
                    e = _vertex(d[i - 1:i + 2], typical, gap)
                    x = None if e is None else _bottom(t[rows[i - 1]], t[rows[i + 1]],
                                                       lambda ts: distance(ts)[:, e])
                if e is not None:
                    _add_mark(marks, x, "kink", kink_text(traced.builder, eq), t[1] - t[0])
    return marks


def _crossing(a, c, typical, signed) -> int | None:
    """The element of a signed distance that crosses zero between two samples (a, then c),
    if one does, changing there by at most twice its typical change between samples
    (x - round(x), floor's distance, jumps at half-integers: no kink there)."""
    cross = signed & ((a == 0) | (c == 0) | (np.sign(a) * np.sign(c) < 0)) & (abs(a - c) <= 2 * typical)
    return int(np.argmax(cross)) if cross.any() else None


def _past(d: np.ndarray, start: float) -> np.ndarray:
    """Whether a signed distance has reached zero, or the other side, from its value start."""
    return (d == 0) | (np.sign(d) != np.sign(start)) if start != 0 else np.ones(d.shape, dtype=bool)


def _vertex(d, typical, gap) -> int | None:
    """The element of an unsigned distance (three samples d) that has the bottom of a V near
    zero: falling then rising, the middle within a typical change of zero."""
    before, here, after = d
    v = gap & (before > here) & (after > here) & (here <= typical)
    return int(np.argmax(v)) if v.any() else None


def _distance_along(tr: Traced, line: Line, eq):
    """ts -> the signed distance from eq's kink at the points of the line at ts, shape
    (len(ts), elements): one batched pass over tr's tape (no tangents) per call."""
    b, over = tr.builder, tr.tape.names[line.over]
    equations = seeded(tr.tape.equations, [over])

    def distance(ts: np.ndarray) -> np.ndarray:
        env = dict(b.values)
        env[over] = line._replace(t=ts).points()
        eval_equations(equations, env, keep={eq.out, *eq.args})
        return _kink_distances(eq, env, b.shapes, len(ts))
    return distance


def _refined(lo: float, hi: float, past) -> float:
    """Where past (ts -> bools, False at lo, True at hi) turns True: rounds of BISECTIONS
    points between the bracket's ends, each keeping the two around the first True, until the
    bracket stops narrowing; then the simplest number in it (0.125 rather than 0.12500000000000003)."""
    for _ in range(ROUNDS):
        ts = np.linspace(lo, hi, BISECTIONS + 1)
        reached = past(ts)
        if reached[0]:
            return lo
        k = int(np.argmax(reached)) if reached.any() else BISECTIONS
        lo, hi, before = ts[k - 1], ts[k], (lo, hi)
        if (lo, hi) == before:
            break
    return _simplest(lo, hi)


def _bottom(lo: float, hi: float, gap) -> float:
    """Where a V (gap: ts -> its values) has its bottom between lo and hi: rounds of
    BISECTIONS points, each keeping the two spacings around the smallest value."""
    for _ in range(ROUNDS):
        ts = np.linspace(lo, hi, BISECTIONS + 1)
        k = int(np.argmin(gap(ts)))
        lo, hi, before = ts[max(k - 1, 0)], ts[min(k + 1, BISECTIONS)], (lo, hi)
        if (lo, hi) == before:
            break
    return _simplest(lo, hi)




def _path_marks(groups: list, line: Line, out: str, max_steps: int) -> list:
    """A mark between two consecutive samples on different paths, naming the decision that
    changes (check's path notes), placed where the path changes (_refined: batched passes
    over points between them)."""
    owner = {}
    for k, (traced, rows, _) in enumerate(groups):
        owner.update(dict.fromkeys(rows.tolist(), k))
    t, marks = line.t, []
    for i in range(len(t) - 1):
        if i in owner and i + 1 in owner and owner[i] != owner[i + 1]:
            traced = groups[owner[i]][0]
            _, first, guards = on_tape(traced, line.over, line._replace(t=t[i + 1:i + 2]).points(), [out])
            notes = path_notes(traced, [guards[first[0]]], "sample") if first[0] >= 0 else []
            text = notes[0].split("; ")[0].removeprefix("near a ") if notes else "change of path"
            x = _refined(t[i], t[i + 1], lambda ts: on_tape(traced, line.over, line._replace(t=ts).points(),
                                                            [out])[1] >= 0)
            _add_mark(marks, x, "path", text, t[1] - t[0])
    return marks


def _simplest(a: float, b: float) -> float:
    """The number with the fewest decimals in [a, b] (where a path changes: 0 rather than
    0.000157, when all that is known is that it changes between -5e-17 and 0.0003)."""
    mid = (a + b) / 2
    for decimals in range(17):
        r = round(mid, decimals)
        if a <= r <= b:
            return r
    return mid


def _add_mark(marks: list, x: float, kind: str, text: str, spacing: float) -> None:
    """Add a mark, unless the same one lies within a sample of it."""
    if not any(m["kind"] == kind and m["note"] == text and abs(m["x"] - x) <= spacing for m in marks):
        marks.append({"x": float(x), "kind": kind, "note": text})
