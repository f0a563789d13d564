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
follows), the result carries a mark: one rule for every kink (_kinks_along), looked for on
at least KINK_GRID points, so the marks do not depend on the number of samples.

The passes check nothing for nan and inf: a sample whose value or derivative is not finite
is run again as eval and jvp run it, and their warnings are the plot's.  A plot's arrays are
counted before they are made (_per_sample), the batched passes' values included, against
max_elements.  Nothing here prints: the CLI draws the picture.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .checks import kink_text
from .errors import GradcalcError, LimitError, ShapeError, UsageError, did_you_mean, option
from .lower import DEFAULT_MAX_STEPS, Traced, find_inputs, trace
from .numerics import kinked_equations, on_tape, path_notes, run_at
from .results import Result
from .session import as_arrays, parse, quiet, select_names, select_output
from .tape import DEFAULT_MAX_ELEMENTS, _frees, eval_equations
from .transforms import forward, largest_batched, seeded

DEFAULT_SAMPLES = 200
#: A mark between two samples is located by rounds of one batched pass each over this many
#: points between the two that bracket it (each round narrows the bracket 32 times), until
#: the bracket is a few units in the last place wide: the mark is placed where the kink or
#: the change of path is, not where the samples happen to fall.
BISECTIONS = 32
ROUNDS = 12
#: Kinks are looked for on at least this many evenly spaced points (the samples, when there
#: are as many): so the marks do not depend on how few samples there are (floor(x) over
#: -1:1 is marked at -1, 0 and 1 at 4 samples as at 200).
KINK_GRID = 4097


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
    at = as_arrays(at)
    line, tr = _line(program, over, lo, direction, at, dict(max_elements=max_elements, max_steps=max_steps))
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
    first = _recorded(tr, line, out, w, hessian)
    _check_memory(first, samples, max_elements)
    line = line._replace(t=np.linspace(lo, hi, samples))
    curves, marks = _sampled(tr, first, line, out, w, hessian, max_steps)
    data = {"abscissae": line.t, "values": curves[0], "derivatives": curves[1]}
    if hessian:
        data["second_derivatives"] = curves[2]
    notes = _unused_at(over, at, line, lo, hi) + _warnings(tr, line, curves, out, w, max_steps)
    return Result(data, command="plot", of=out, over=over, wrt=w,
                  direction=line.v, marks=marks, at=_point(tr, line), warnings=notes)


def _unused_at(over: str, at: dict, line: Line, lo: float, hi: float) -> list[str]:
    """A note when --at gives over a value that the plot does not use (the value varies)."""
    if line.v is not None or over not in at:
        return []
    return [f"--at {over} is not used: --over varies {over} from {lo:g} to {hi:g} (with --direction, "
            "the plot runs along a line through the --at value)"]


def _warnings(tr: Traced, line: Line, curves: list, out: str, w: str, max_steps: int) -> list[str]:
    """The warnings of the run at the first sample, and of eval's and jvp's runs at the
    first sample whose value, and the first whose derivative, is nan (inf, -inf): the batched
    passes check nothing, so such a sample is run again as eval and jvp run a point, and
    its warnings are theirs (1/x at 0: "'/' at line 1, column 2 produced inf")."""
    found = [m.message for m in tr.warnings]
    finite_point = np.isfinite(line.points().reshape(len(line.t), -1)).all(axis=1)
    kinds = [np.isnan, np.isposinf, np.isneginf]
    rows = {int(np.argmax(bad)) for c in curves for kind in kinds if (bad := finite_point & kind(c)).any()}
    for row in sorted(rows):
        for message in _warnings_at(tr, line, row, out, w, max_steps):
            if message not in found:
                found.append(message)
    return found


def _warnings_at(tr: Traced, line: Line, row: int, out: str, w: str, max_steps: int) -> list[str]:
    """The warnings of a run at sample row, and of forward mode over it (as jvp's)."""
    point = {**{n: tr.value(n) for n in tr.tape.inputs}, line.over: line.points()[row]}
    try:
        there = trace(tr.program, point, max_elements=tr.builder.max_elements, max_steps=max_steps)
    except GradcalcError:
        return []  # (the program fails there: its batched pass gave nan, as check's runs do)
    names = there.tape.names
    if out in names and w in names:
        seed = line.v if line.v is not None and w == line.over else np.ones(there.value(w).shape)
        forward(there.builder, there.tape.equations, {names[w]: seed}, eager=True, check=True)
    return [m.message for m in there.warnings]


def _point(tr: Traced, line: Line) -> dict:
    """The inputs' values the plot was made at: the others', and the array input's own point
    x0 when the plot runs along the line x0 + t v (a scalar input's value is the abscissa)."""
    return {k: line.x0 if k == line.over else tr.value(k) for k in tr.tape.inputs
            if k != line.over or line.v is not None}


def _line(program, over: str, lo: float, direction, at: dict, limits: dict) -> tuple[Line, Traced]:
    """The line through the point (its abscissae: lo alone, for now), and the program
    traced at its first sample."""
    inputs = {i.name: i for i in find_inputs(program)}
    if over not in inputs:
        hint = did_you_mean(over, inputs) or (f"the inputs are: {', '.join(inputs)}" if inputs
                                              else "the program has no inputs")
        raise UsageError(f"{option('over')} '{over}' is not an input of the program", name=over,
                         option="over", hint=hint)
    point = dict(at)
    v = None if direction is None else np.asarray(direction, dtype=float)
    free = over not in point and inputs[over].default is None
    if v is not None and free:  # (an array input without a value fails the same way in trace)
        raise UsageError(f"{option('direction')} runs along {over} + t V, through {over}'s value; "
                         f"'{over}' has none", name=over, option="direction",
                         hint=f"give it with {option('at')} {over}=X0")
    if v is not None and not np.isfinite(v).all():
        raise UsageError(f"{option('direction')} must be finite, not {_shown(v)}", option="direction")
    if free and inputs[over].shape is None:
        point[over] = np.asarray(lo)  # a free scalar input: it needs no value of its own
    x0 = trace(program, point, **limits).value(over)
    if v is None and x0.size != 1:
        raise ShapeError(f"{option('over')} '{over}' has shape {x0.shape}: a plot runs along one "
                         "line", name=over, option="over",
                         hint=f"give {option('direction')} V (of shape {x0.shape}) for the line "
                              f"{over} + t V, t in LO:HI")
    if v is not None and v.shape != x0.shape:
        raise ShapeError(f"{option('direction')} has shape {v.shape}, but '{over}' has shape {x0.shape}",
                         name=over, option="direction")
    line = Line(over, np.array([float(lo)]), x0, v)
    return line, trace(program, {**point, over: line.points()[0]}, **limits)


def _shown(v: np.ndarray) -> str:
    """A direction in a message: its first entries."""
    flat = v.reshape(-1)
    return "[" + ", ".join(f"{x:g}" for x in flat[:4]) + (", ..." if flat.size > 4 else "") + "]"


class Pass(NamedTuple):
    """The batched pass of one path: its equations (primal and tangent, those that depend on
    the line's input), the variables of the curves (None: a zero derivative), what it keeps,
    the kinked equations, and the elements it holds for each sample."""

    equations: list
    wanted: list
    keep: set
    kinked: list
    per_sample: int


def _recorded(tr: Traced, line: Line, out: str, w: str, hessian: bool) -> Pass:
    """The pass that gives the value, derivative (and second derivative) of the samples on
    tr's path: forward mode (over forward mode) recorded on tr's builder."""
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
    per_sample = _per_sample(tr, equations, keep, over, names[out], len(wanted), kinked)
    return Pass(equations, wanted, keep, kinked, per_sample)


def _per_sample(tr: Traced, equations, keep: set, over: int, out: int, curves: int, kinked: list) -> int:
    """The elements a plot holds at once for each sample: its abscissa, point (twice: the
    line's points, and a pass's copy of those it runs), curves and kink distances, and the
    most that one batched pass has alive at a time: the pass of values and derivatives, or
    the pass that finds each sample's path (its guards, and the number of the first that
    changes)."""
    size = {v: math.prod(shape) for v, shape in tr.builder.shapes.items()}
    held = 1 + 2 * size[over] + curves + sum(max(size[v] for v in (eq.out, *eq.args)) for eq in kinked)
    primal = seeded(tr.tape.equations, [over])
    guards = {g.var for g in tr.tape.guards} | {out}
    return held + max(_peak(equations, keep, size), _peak(primal, guards, size) + 1)


def _peak(equations, keep: set, size: dict) -> int:
    """The most elements (a sample's share) alive at once in a batched pass over equations:
    eval_equations drops each value after its last use (tape._frees), except what is kept."""
    alive = peak = 0
    for eq, dropped in zip(equations, _frees(equations, keep)):
        alive += size[eq.out]
        peak = max(peak, alive)
        alive -= sum(size[v] for v in dropped)
    return peak


def _check_memory(first: Pass, samples: int, max_elements: int) -> None:
    """Refuse, before the samples are made, a plot whose arrays together would hold more
    than max_elements elements (10^8 samples of sin(x) held 13 GB and were killed)."""
    if samples * first.per_sample > max_elements:
        raise LimitError(f"{option('samples')}={samples} would hold {samples * first.per_sample:,} elements at "
                         f"once ({first.per_sample} for each sample: its point, curves and the batched "
                         f"pass's values), more than {option('max_elements')}={max_elements}",
                         option="samples", hint=f"use at most {max(max_elements // first.per_sample, 1):,} "
                                                f"{option('samples')} (a picture shows about 200), or raise "
                                                f"{option('max_elements')}")


def _sampled(tr: Traced, first: Pass, line: Line, out: str, w: str, hessian: bool, max_steps: int):
    """([values, derivatives(, second derivatives)], marks): every sample, one batched pass
    per path; a mark where the path changes between two samples and where a kink lies."""
    xs = line.points()
    curves = np.full((2 + hessian, len(xs)), np.nan)
    pending, traced, groups = np.arange(len(xs)), tr, []
    while pending.size:
        if traced is None:  # the program fails at this sample: no value there
            pending = pending[1:]
        else:
            _, first_change, _ = on_tape(traced, line.over, xs[pending], [out])
            rows = pending[first_change < 0]
            if rows.size:
                recorded = first if traced is tr else _recorded(traced, line, out, w, hessian)
                found, kinks = _evaluated(traced, recorded, line, rows)
                curves[:, rows] = found
                groups.append((traced, rows, kinks))
            pending = pending[first_change >= 0]
        if pending.size:
            traced = run_at(tr, {**{n: tr.value(n) for n in tr.tape.inputs}, line.over: xs[pending[0]]},
                            max_steps)
    return list(curves), _path_marks(groups, line, out, max_steps) + _kink_marks(groups, line)


def _evaluated(tr: Traced, recorded: Pass, line: Line, rows: np.ndarray):
    """The curves at the samples rows, all on tr's path, by one batched pass over the
    primal and tangent equations; and the kinks' distances at those samples."""
    b, over = tr.builder, tr.tape.names[line.over]
    largest = largest_batched(recorded.equations, [over], b.shapes)
    b.check_size((len(rows), largest), what=f"a batch of {len(rows)} samples through {largest}-element values")
    env = dict(b.values)
    env[over] = line.points()[rows]
    eval_equations(recorded.equations, env, keep=recorded.keep, batch_elements=len(rows) * largest)
    shape = (len(rows),)
    found = [np.zeros(shape) if v is None else np.broadcast_to(env[v], shape + b.shapes[v]).reshape(shape)
             for v in recorded.wanted]
    return found, [(eq, _kink_distances(eq, env, b.shapes, len(rows))) for eq in recorded.kinked]


def _kink_distances(eq, env: dict, shapes: dict, n: int) -> np.ndarray:
    """The signed distance from eq's kink at each sample, shape (n, elements): one call on
    the batched values (a primitive's parameters address axes from the end)."""
    args = [np.broadcast_to(env[v], (n,) + shapes[v]) for v in (eq.out, *eq.args)]
    with np.errstate(all="ignore"):
        d = np.asarray(eq.prim.kink(*args, **eq.params), dtype=float)
    return np.broadcast_to(d, (n,) + d.shape[1:]).reshape(n, -1)


def _kink_marks(groups: list, line: Line) -> list:
    """The kinks of each path, looked for on KINK_GRID points at least (the samples, when
    there are as many) between its consecutive samples; see _kinks_along for the rule."""
    t, marks = line.t, []
    grid = t if len(t) >= KINK_GRID else np.linspace(t[0], t[-1], KINK_GRID)
    for traced, rows, kinks in groups:
        for a, b in _consecutive_runs(rows):
            lo, hi = t[rows[a]], t[rows[b]]
            ts = grid[(grid >= lo) & (grid <= hi)] if grid is not t else t[rows[a]:rows[b] + 1]
            for eq, d in kinks:
                distance = _distance_along(traced, line, eq)
                found = d[a:b + 1] if grid is t else distance(ts)
                for x in _kinks_along(ts, found, distance):
                    _add_mark(marks, x, "kink", kink_text(traced.builder, eq), grid[1] - grid[0])
    return marks


def _consecutive_runs(rows: np.ndarray) -> list:
    """(first, last) positions in rows of each run of consecutive sample numbers."""
    breaks = np.flatnonzero(np.diff(rows) != 1)
    starts = np.insert(breaks + 1, 0, 0)
    ends = np.append(breaks, len(rows) - 1)
    return list(zip(starts.tolist(), ends.tolist()))


def _kinks_along(ts: np.ndarray, d: np.ndarray, distance) -> list:
    """Where a kink lies along ts, given its distance d (shape (len(ts), elements)), one rule
    at every point, the interval's ends included: where an element is exactly 0 at a point
    (and not at both its neighbours: a distance 0 everywhere marks nothing); where a signed
    one changes sign between two points by at most twice its typical change between points
    (a bigger change is a jump: x - round(x), floor's distance, jumps at half-integers),
    located by _zero; and where one that is never negative (a gap: max's tie) dips to a V
    whose bottom is within a typical change of 0, located by _bottom."""
    if len(ts) < 2:
        return [float(ts[0])] if len(ts) and (d[0] == 0).any() else []
    step = np.abs(np.diff(d, axis=0))
    typical = np.median(step, axis=0)
    signed = ~(d >= 0).all(axis=0)
    zero = d == 0
    flat = np.zeros(d.shape, dtype=bool)  # a zero whose neighbours are zeros too
    flat[1:-1] = zero[:-2] & zero[2:]
    flat[0], flat[-1] = zero[1], zero[-2]
    found = [float(ts[i]) for i in np.flatnonzero((zero & ~flat).any(axis=1))]
    cross = signed & (d[:-1] * d[1:] < 0) & (step <= 2 * typical)
    for i in np.flatnonzero(cross.any(axis=1)):
        e = int(np.argmax(cross[i]))
        x = _zero(ts[i], ts[i + 1], lambda u: distance(u)[:, e])
        if x is not None:
            found.append(x)
    here = d[1:-1]
    vertex = ~signed & ~zero[1:-1] & (d[:-2] > here) & (d[2:] > here) & (here <= typical)
    for i in np.flatnonzero(vertex.any(axis=1)):
        e = int(np.argmax(vertex[i]))
        found.append(_bottom(ts[i], ts[i + 2], lambda u: distance(u)[:, e]))
    return sorted(found)


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


def _zero(lo: float, hi: float, distance) -> float | None:
    """Where a distance (ts -> values) that changes sign between lo and hi crosses 0: rounds
    of BISECTIONS points, each keeping the first two between which it changes sign by at
    most twice the round's typical change (a jump is not a crossing: None if only jumps
    change its sign), until the bracket stops narrowing; then the simplest number in it."""
    for _ in range(ROUNDS):
        ts = np.linspace(lo, hi, BISECTIONS + 1)
        d = distance(ts)
        if (d == 0).any():
            return float(ts[np.argmax(d == 0)]) + 0.0
        step = np.abs(np.diff(d))
        typical = np.median(step)
        crossing = (np.sign(d[:-1]) != np.sign(d[1:])) & ((step <= 2 * typical) | (typical == 0))
        if not crossing.any():
            return None
        k = int(np.argmax(crossing))
        lo, hi, before = ts[k], ts[k + 1], (lo, hi)
        if (lo, hi) == before:
            break
    return _simplest(lo, hi)


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
    t, marks = line.t, []
    owner = np.full(len(t), -1)
    for k, (_, rows, _) in enumerate(groups):
        owner[rows] = k
    changes = np.flatnonzero((owner[:-1] >= 0) & (owner[1:] >= 0) & (owner[:-1] != owner[1:]))
    for i in changes.tolist():
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
    0.000157, when all that is known is that it changes between -5e-17 and 0.0003); 0, not
    -0.0 (a mark's place is a number, not a side)."""
    mid = (a + b) / 2
    for decimals in range(17):
        r = round(mid, decimals)
        if a <= r <= b:
            return r + 0.0
    return mid + 0.0


def _add_mark(marks: list, x: float, kind: str, text: str, spacing: float) -> None:
    """Add a mark, unless the same one lies within spacing of it (one point of the grid the
    kinks are looked for on, a sample for a change of path)."""
    if not any(m["kind"] == kind and m["note"] == text and abs(m["x"] - x) <= spacing for m in marks):
        marks.append({"x": float(x) + 0.0, "kind": kind, "note": text})
