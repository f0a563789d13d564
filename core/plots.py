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
follows), the result carries a mark: one rule for every kink (_kink_brackets), looked for on
at least KINK_GRID points, so the marks do not depend on the number of samples.  The marks
are located by bisection (_located), every bracket of a run together: one batched pass a
round gives the distances of all its kinks (probes in the pass: _Probe), one on_tape a round
tests all its changes of path; and a path's run is dropped once its marks are found.

The passes check nothing for nan and inf: a sample whose value or derivative is not finite
is run again as eval and jvp run it, and their warnings are the plot's.  A plot's arrays are
counted before they are made (_per_sample), the batched passes' values included, against
max_elements.  Nothing here prints: the CLI draws the picture.
"""
from __future__ import annotations

import bisect
import math
from typing import NamedTuple

import numpy as np

from .checks import kink_text
from .errors import GradcalcError, LimitError, ShapeError, UsageError, did_you_mean, listed, option
from .lower import DEFAULT_MAX_STEPS, Traced, find_inputs, trace
from .numerics import by_halves, kinked_equations, on_tape, path_notes
from .results import Result
from .session import as_arrays, parse, quiet, select_names, select_output
from .tape import DEFAULT_MAX_ELEMENTS, Equation, _frees, eval_equations
from .transforms import forward, largest_batched, seeded

DEFAULT_SAMPLES = 200
#: A mark between two samples is located by rounds of one batched pass each over this many
#: points between the two that bracket it (each round narrows the bracket 32 times), until
#: the bracket is a few units in the last place wide: the mark is placed where the kink or
#: the change of path is, not where the samples happen to fall.
BISECTIONS = 32
ROUNDS = 12
#: A round takes more points (up to KINK_GRID) while its batched pass holds at most this many
#: elements a value (points times the pass's mean elements a value): so few cost about what
#: one point costs (each equation's overhead), and each point narrows the brackets further
#: (a path's change on a tape of 3,000 scalar equations: 5 rounds instead of 10).
ROUND_ELEMENTS = 512
#: A batched pass of the marks' search takes at most so many points that its largest value
#: holds about this many elements (8 MB): more points a pass would not cost less a point.
PASS_ELEMENTS = 2**20
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
    if any(e.ndim for e in ends):  # (a 1-element array too: NumPy's float() of it is deprecated)
        raise UsageError(f"{option('over')}: LO and HI are numbers, not arrays", option="over",
                         hint=f"for an array input, --over {name.strip()}=0:1 --direction V plots along "
                              f"{name.strip()} + t V, t from 0 to 1")
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
    spacing = (hi - lo) / (samples - 1)
    if spacing < 2 * np.spacing(max(abs(lo), abs(hi))) or spacing < np.finfo(float).tiny:
        # (samples that round to one float, or a spacing below the normal floats, whose picture
        # divides by a width that underflows to 0: 0:5e-324 was an internal error)
        raise UsageError(f"{option('over')} {lo!r}:{hi!r} is too narrow for {samples} distinct samples "
                         "(they would be closer than the floats there, or than the smallest normal float)",
                         option="over", hint=f"widen the interval, or lower {option('samples')}")
    at = as_arrays(at)
    limits = dict(max_elements=max_elements, max_steps=max_steps)
    line, point = _line(program, over, lo, direction, at, limits)
    tr, start = _first_run(program, line, point, limits, hi, samples)
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
    curves, marks = _sampled(tr, first, line, out, w, hessian, max_steps, start)
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
    except GradcalcError as err:  # (its batched pass gave nan, as check's runs do: say why)
        t = float(line.t[row])
        where = f"{line.over} = {t:.6g}" if line.v is None else f"t = {t:.6g}"
        return [f"the program fails at the sample {where}, which has no value: {err.message}"]
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


def _line(program, over: str, lo: float, direction, at: dict, limits: dict) -> tuple[Line, dict]:
    """The line through the point (its abscissae: lo alone, for now), and the point: the
    inputs' values the plot is made at."""
    inputs = {i.name: i for i in find_inputs(program)}
    if over not in inputs:
        hint = did_you_mean(over, inputs) or (f"the inputs are: {listed(inputs)}" if inputs
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
    if free and inputs[over].shape is None:  # a free scalar input: it needs no value of its own (nor
        x0 = np.asarray(float(lo))           # a run at lo, where the program may fail: _first_run)
    else:
        x0 = trace(program, point, **limits).value(over)
    if v is None and x0.size != 1:
        raise ShapeError(f"{option('over')} '{over}' has shape {x0.shape}: a plot runs along one "
                         "line", name=over, option="over",
                         hint=f"give {option('direction')} V (of shape {x0.shape}) for the line "
                              f"{over} + t V, t in LO:HI")
    if v is not None and v.shape != x0.shape:
        raise ShapeError(f"{option('direction')} has shape {v.shape}, but '{over}' has shape {x0.shape}",
                         name=over, option="direction")
    return Line(over, np.array([float(lo)]), x0, v), point


def _first_run(program, line: Line, point: dict, limits: dict, hi: float, samples: int) -> tuple[Traced, int]:
    """The program traced at the first of the samples (line's lo to hi) where it runs, and that
    sample's number: where it fails, a sample has no value (nan), the first one as any other;
    where it fails at every sample, the first one's error.  A run past a limit is the plot's
    error, naming the sample.  (The samples are made only when the first one fails: a plot of
    too many is refused before they are, see _check_memory.)"""
    first_error = None
    for i in range(samples):
        if i == 1:
            line = line._replace(t=np.linspace(line.t[0], hi, samples))
        try:
            return trace(program, {**point, line.over: line.points()[i]}, **limits), i
        except LimitError as err:
            raise _at_sample(err, line, i, samples)
        except GradcalcError as err:
            first_error = first_error or err
    raise first_error


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


def _sampled(tr: Traced, first: Pass, line: Line, out: str, w: str, hessian: bool, max_steps: int,
             start: int = 0):
    """([values, derivatives(, second derivatives)], marks): every sample from start on (tr's,
    the first where the program runs), one batched pass per path; a mark where the path
    changes between two samples and where a kink lies.  Each path's marks are located while its
    run is at hand (_path_changes, _kinks_of_path), so one run is held at a time, not every path's."""
    xs = line.points()
    curves = np.full((2 + hessian, len(xs)), np.nan)
    owner = np.full(len(xs), -1)
    pending, traced, paths = np.arange(start, len(xs)), tr, 0
    changes, kinks = {}, []  # sample i -> (x, note) where the path leaves i's; (x, note) of kinks
    while pending.size:
        if traced is None:  # the program fails at this sample: no value there
            pending = pending[1:]
        else:
            first_change, _ = _first_changes(traced, line, xs[pending], out)
            rows = pending[first_change == ON_PATH]
            if rows.size:
                recorded = first if traced is tr else _recorded(traced, line, out, w, hessian)
                curves[:, rows] = _evaluated(traced, recorded, line, rows)
                owner[rows], paths = paths, paths + 1
                rows_per_pass = _rows_per_pass(traced, recorded)
                changes.update(_path_changes(traced, line, rows, out, rows_per_pass))
                kinks += _kinks_of_path(traced, recorded.kinked, line, rows, rows_per_pass)
            pending = pending[first_change >= 0]  # (where an operation fails: no value, FAILS)
        if pending.size:
            traced = _run_sample(tr, line, pending[0], max_steps)
    t, marks, placed = line.t, [], {}
    for i in sorted(changes):  # (a sample next to one where the program fails has no mark)
        if owner[i + 1] >= 0:  # each change between two samples its own mark: one a sample apart from
            _add_mark(marks, placed, changes[i][0], "path", changes[i][1], 0.0)  # another was dropped
    grid = _kink_grid(t)
    for x, text in kinks:
        _add_mark(marks, placed, x, "kink", text, grid[1] - grid[0])
    return list(curves), marks


#: _first_changes' answer for a sample on the path of the run, and for one where an operation
#: fails (a cholesky past where its matrix stays positive definite); others are the number of
#: the first guard that changes (on_tape's).
ON_PATH, FAILS = -1, -2
#: The most passes a plot spends finding the samples where an operation fails (see by_halves):
#: a failing stretch of m samples costs about 2m; past them, the failure is the plot's error.
FAILING_SAMPLE_PASSES = 4096


def _first_changes(tr: Traced, line: Line, points: np.ndarray, out: str) -> tuple:
    """(on_tape's first change of path at each of points, FAILS where an operation fails there,
    and the guards they number): such a sample has no value, as where a run of the program
    fails, where the whole batched pass failed and the plot with it."""
    def run(part):
        _, first, guards = on_tape(tr, line.over, part, [out])
        return first, guards
    return by_halves(run, points, lambda part: (np.array([FAILS]), None),
                     lambda a, b: (np.concatenate([a[0], b[0]]), a[1] if a[1] is not None else b[1]),
                     [FAILING_SAMPLE_PASSES])


def _run_sample(tr: Traced, line: Line, i: int, max_steps: int) -> Traced | None:
    """The program run at sample i, within --max-steps as at the first sample (a sample may lie
    far from it, where a loop runs many more times: check's runs a step away, whose loops rarely
    run longer, have a budget of their own, and a plot of 26,000 iterations at x = 26 took it for
    a failure); None where the program fails there (its value is nan), but a run past a limit
    is the plot's error, naming the sample."""
    point = {**{n: tr.value(n) for n in tr.tape.inputs}, line.over: line.points()[i]}
    try:
        return trace(tr.program, point, max_elements=tr.builder.max_elements, max_steps=max_steps,
                     check_finite=False)
    except LimitError as err:
        raise _at_sample(err, line, i, len(line.t))
    except GradcalcError:
        return None


def _at_sample(err: LimitError, line: Line, i: int, samples: int) -> LimitError:
    """A limit that a run at sample i (of samples) reached, worded with that sample (where it
    lies, and how to leave it out or allow it)."""
    t = float(line.t[i])
    where = f"{line.over} = {t:.6g}" if line.v is None else f"t = {t:.6g} on the line {line.over} + t V"
    err.message = f"at the sample {where} ({i + 1} of {samples}), {err._message}"
    err.hint = (f"plot an interval where the program stays within the limit ({option('over')} "
                f"{line.over}=LO:HI), or raise {option(err.option)}" if err.option else err.hint)
    return err


def _rows_per_pass(tr: Traced, recorded: Pass) -> int:
    """How many points one batched pass of the marks' search takes at once: as many as the
    samples a plot may have on this path (max_elements over its elements per sample), and no
    more than keep each value within PASS_ELEMENTS (a value of 10^4 elements: a hundred points
    a pass, not thousands, whose values would each take 160 MB and run at the speed of memory
    rather than of the cache), and at least one round of one bracket."""
    largest = max((math.prod(tr.builder.shapes[eq.out]) for eq in recorded.equations), default=1)
    return max(BISECTIONS + 1, min(tr.builder.max_elements // max(recorded.per_sample, 1),
                                   PASS_ELEMENTS // max(largest, 1)))


def _evaluated(tr: Traced, recorded: Pass, line: Line, rows: np.ndarray):
    """The curves at the samples rows, all on tr's path, by one batched pass over the
    primal and tangent equations."""
    b, over = tr.builder, tr.tape.names[line.over]
    largest = largest_batched(recorded.equations, [over], b.shapes)
    b.check_size((len(rows), largest), what=f"a batch of {len(rows)} samples through {largest}-element values")
    env = dict(b.values)
    env[over] = line.points()[rows]
    keep = {v for v in recorded.wanted if v is not None}
    eval_equations(recorded.equations, env, keep=keep, batch_elements=len(rows) * largest)
    shape = (len(rows),)
    return [np.zeros(shape) if v is None else np.broadcast_to(env[v], shape + b.shapes[v]).reshape(shape)
            for v in recorded.wanted]


def _kink_distances(eq, args: list, shapes: dict, n: int) -> np.ndarray:
    """The signed distance from eq's kink at n points, shape (n, elements), given its operands'
    values there (out, *args: batched or not): one call (a primitive's parameters address axes
    from the end)."""
    args = [np.broadcast_to(a, (n,) + shapes[v]) for a, v in zip(args, (eq.out, *eq.args))]
    with np.errstate(all="ignore"):
        d = np.asarray(eq.prim.kink(*args, **eq.params), dtype=float)
    return np.broadcast_to(d, (n,) + d.shape[1:]).reshape(n, -1)


class _Probe:
    """The primitive of an equation put into a batched pass right after a kinked one: it reads
    the kinked equation's operands as soon as they are computed, hands on the distance from
    its kink (at the rows asked for), and returns nothing; its operands are then dropped at
    their last use as any other (eval_equations), so a pass keeps no kink's values."""

    write_into = None

    def __init__(self, eq, rows, elements, shapes: dict, n: int, found: list):
        self.name, self.eq, self.rows, self.elements = f"kink of {eq.prim.name}", eq, rows, elements
        self.shapes, self.n, self.found = shapes, n, found

    def impl(self, *values):
        eq, rows = self.eq, self.rows
        if rows is None:  # every row, every element
            self.found.append(_kink_distances(eq, values, self.shapes, self.n))
            return None
        operands = (eq.out, *eq.args)
        if eq.prim.elementwise:  # (an element's distance needs its operands' elements alone)
            picked = [self._element(a, v) for a, v in zip(values, operands)]
            ones = {v: (1,) * len(self.shapes[v]) for v in operands}  # (each keeps its rank: a
            self.found.append(_kink_distances(eq, picked, ones, len(rows))[:, 0])  # kink aligns by it)
            return None
        picked = [a[rows] if np.ndim(a) > len(self.shapes[v]) else a for a, v in zip(values, operands)]
        d = _kink_distances(eq, picked, self.shapes, len(rows))
        self.found.append(d[np.arange(len(rows)), self.elements])
        return None

    def _element(self, a, v):
        """Operand v's element under each asked element of the kinked value, at its row, as an
        array of v's rank with axes of length 1: the value's multi-index, broadcast (NumPy's
        rule: axes aligned at the end, an axis of length 1 read at 0), so that a 40,000-element
        row is not copied to keep one element."""
        out, own = self.shapes[self.eq.out], self.shapes[v]
        at = np.unravel_index(self.elements, out) if out else ()
        skip = len(out) - len(own)
        index = tuple(np.zeros_like(self.rows) if d == 1 else at[skip + k] for k, d in enumerate(own))
        picked = a[(self.rows,) + index] if np.ndim(a) > len(own) else np.asarray(a)[index]
        return picked.reshape(np.shape(picked) + (1,) * len(own))  # (rows, then v's axes, each of 1)


def _distances(tr: Traced, line: Line, ts: np.ndarray, asked: dict, rows_per_pass: int) -> dict:
    """{j: distances} for the kinked equations asked ({j: (eq, rows, elements)}: rows None for
    the distance at every point and element, shape (len(ts), elements); else the element
    elements[k] at the point rows[k], shape (len(rows),)), at the points of the line at ts:
    batched passes over tr's tape (no tangents) of at most rows_per_pass points, each computing
    every asked kink's distance together (a probe after each kinked equation: _Probe).  The rows
    of each request ascend, so that a pass takes a slice of them; a pass asks nothing of a kink
    with no row among its points."""
    b, over = tr.builder, tr.tape.names[line.over]
    equations = seeded(tr.tape.equations, [over])
    largest = largest_batched(equations, [over], b.shapes)
    found = {j: [] for j in asked}
    for lo in range(0, len(ts), rows_per_pass):
        part = ts[lo:lo + rows_per_pass]
        probes = {}
        for j, (eq, rows, elements) in asked.items():
            if rows is not None:
                first, last = np.searchsorted(rows, (lo, lo + len(part)))
                if first == last:
                    continue
                rows, elements = rows[first:last] - lo, elements[first:last]
            probes[id(eq)] = Equation(-1 - j, _Probe(eq, rows, elements, b.shapes, len(part), found[j]),
                                      (eq.out, *eq.args), {}, eq.loc)
        if not probes:
            continue
        probed = [e for eq in equations for e in ((eq, probes[id(eq)]) if id(eq) in probes else (eq,))]
        env = dict(b.values)
        env[over] = line._replace(t=part).points()
        eval_equations(probed, env, keep=set(), batch_elements=len(part) * largest)
    return {j: np.concatenate(d) if d else np.zeros((0,)) for j, d in found.items()}


def _width(tr: Traced, line: Line) -> float:
    """The mean elements a value of a batched pass over tr's tape holds for one point."""
    b, over = tr.builder, tr.tape.names[line.over]
    sizes = [math.prod(b.shapes[eq.out]) for eq in seeded(tr.tape.equations, [over])]
    return max(sum(sizes) / max(len(sizes), 1), 1.0)


def _kink_grid(t: np.ndarray) -> np.ndarray:
    """The points kinks are looked for on: the samples, or KINK_GRID points if there are fewer."""
    return t if len(t) >= KINK_GRID else np.linspace(t[0], t[-1], KINK_GRID)


def _kinks_of_path(tr: Traced, kinked: list, line: Line, rows: np.ndarray, rows_per_pass: int) -> list:
    """[(x, note)]: the kinks of a path (tr's, on which the samples rows are), looked for on
    the kink grid's points between its consecutive samples (see _kink_brackets for the rule),
    in the order of its runs of samples, its kinked equations, then x.  One batched pass at
    every such point gives every kinked equation's distance; then all the brackets found,
    of every kink, are narrowed together (_located: one batched pass a round)."""
    if not kinked:
        return []
    t = line.t
    grid = _kink_grid(t)
    runs = []
    for a, b in _consecutive_runs(rows):
        lo, hi = t[rows[a]], t[rows[b]]
        runs.append(grid[(grid >= lo) & (grid <= hi)] if grid is not t else t[rows[a]:rows[b] + 1])
    ts = np.concatenate(runs)
    ends = np.cumsum([0] + [len(r) for r in runs])
    d = _distances(tr, line, ts, {j: (eq, None, None) for j, eq in enumerate(kinked)}, rows_per_pass)
    found, brackets = {}, []  # (run, j) -> xs; (run, j, rule, lo, hi, element)
    for r, run in enumerate(runs):
        for j in range(len(kinked)):
            zeros, more = _kink_brackets(run, d[j][ends[r]:ends[r + 1]])
            found[r, j] = zeros
            brackets += [(r, j, *m) for m in more]
    located = _located(brackets, lambda q, ts: _kink_values(tr, line, kinked, brackets, q, ts, rows_per_pass),
                       _width(tr, line))
    for (r, j, *_), x in zip(brackets, located):
        if x is not None:
            found[r, j].append(x)
    return [(x, kink_text(tr.builder, kinked[j])) for r in range(len(runs)) for j in range(len(kinked))
            for x in sorted(found[r, j])]


def _kink_values(tr: Traced, line: Line, kinked: list, brackets: list, q: np.ndarray, ts: np.ndarray,
                 rows_per_pass: int) -> np.ndarray:
    """The distances of the brackets q (positions in brackets) at their points ts (one row
    each), each from its kink at its element: one batched pass at all the points."""
    points = ts.shape[1]
    asked = {}
    for k, bracket in enumerate(q.tolist()):
        asked.setdefault(brackets[bracket][1], []).append((k, brackets[bracket][5]))
    order, request = [], {}
    for j, items in asked.items():
        ks = np.array([k for k, _ in items])
        rows = (ks[:, None] * points + np.arange(points)).reshape(-1)
        elements = np.repeat([e for _, e in items], points)
        request[j] = (kinked[j], rows, elements)
        order.append((j, rows))
    d = _distances(tr, line, ts.reshape(-1), request, rows_per_pass)
    values = np.empty(ts.size)
    for j, rows in order:
        values[rows] = d[j]
    return values.reshape(ts.shape)


def _consecutive_runs(rows: np.ndarray) -> list:
    """(first, last) positions in rows of each run of consecutive sample numbers."""
    breaks = np.flatnonzero(np.diff(rows) != 1)
    starts = np.insert(breaks + 1, 0, 0)
    ends = np.append(breaks, len(rows) - 1)
    return list(zip(starts.tolist(), ends.tolist()))


def _kink_brackets(ts: np.ndarray, d: np.ndarray) -> tuple[list, list]:
    """Where a kink lies along ts, given its distance d (shape (len(ts), elements)), one rule
    at every point, the interval's ends included: (xs, brackets).  xs: where an element is
    exactly 0 at a point (and not at both its neighbours: a distance 0 everywhere marks
    nothing).  brackets, (rule, lo, hi, element), for _located: "zero" where a signed one
    changes sign between two points by at most twice its typical change between points (a
    bigger change is a jump: x - round(x), floor's distance, jumps at half-integers); "bottom"
    where one that is never negative (a gap: max's tie) dips to a V whose bottom is within a
    typical change of 0."""
    if not d.size:  # (no points, or a distance with no elements)
        return [], []
    if len(ts) < 2:
        return ([float(ts[0])] if (d[0] == 0).any() else []), []
    step = np.abs(np.diff(d, axis=0))
    typical = np.median(step, axis=0)
    signed = ~(d >= 0).all(axis=0)
    zero = d == 0
    flat = np.zeros(d.shape, dtype=bool)  # a zero whose neighbours are zeros too
    flat[1:-1] = zero[:-2] & zero[2:]
    flat[0], flat[-1] = zero[1], zero[-2]
    found = [float(ts[i]) for i in np.flatnonzero((zero & ~flat).any(axis=1))]
    cross = signed & (d[:-1] * d[1:] < 0) & (step <= 2 * typical)
    rows = np.flatnonzero(cross.any(axis=1))
    brackets = [("zero", ts[i], ts[i + 1], e) for i, e in zip(rows.tolist(), np.argmax(cross[rows], axis=1).tolist())]
    here = d[1:-1]
    vertex = ~signed & ~zero[1:-1] & (d[:-2] > here) & (d[2:] > here) & (here <= typical)
    rows = np.flatnonzero(vertex.any(axis=1))
    brackets += [("bottom", ts[i], ts[i + 2], e) for i, e in zip(rows.tolist(), np.argmax(vertex[rows], axis=1).tolist())]
    return found, brackets


def _located(brackets: list, values, width: float) -> list:
    """For each bracket (..., rule, lo, hi, element: the last four), the place found in it, or
    None, by rounds of at least BISECTIONS points between each bracket's ends (more while a
    round's pass holds at most ROUND_ELEMENTS a value, width being its mean elements a value
    at one point: _width), every bracket still open
    in one call values(q, ts) (q: the brackets' positions, ts: their points, one row each ->
    their values, one row each), until a bracket stops narrowing, or after ROUNDS; then the
    simplest number in it (0.125 rather than 0.12500000000000003).  The rules, per bracket:
    "zero", where a distance that changes sign between lo and hi crosses 0: each round keeps
    the first two points between which it changes sign by at most twice the round's typical
    change (a jump is not a crossing: None if only jumps change its sign), a point where it is
    0 is the place; "bottom", where a V has its bottom: the two spacings around the smallest
    value; "past", where a test (False at lo, True at hi) turns True: the two points around
    the first True (lo, if it is True at lo)."""
    n = len(brackets)
    rule = np.array([b[-4] for b in brackets], dtype=object)
    lo = np.array([b[-3] for b in brackets], dtype=float)
    hi = np.array([b[-2] for b in brackets], dtype=float)
    result: list = [None] * n
    narrowing = np.ones(n, dtype=bool)  # (brackets whose place is not yet known)
    settled = np.zeros(n, dtype=bool)  # (brackets whose place is the simplest number in them)
    for _ in range(ROUNDS):
        q = np.flatnonzero(narrowing)
        if not q.size:
            break
        spans = BISECTIONS
        while 2 * spans < KINK_GRID and 2 * spans * len(q) * width <= ROUND_ELEMENTS:
            spans *= 2
        ts = np.linspace(lo[q], hi[q], spans + 1, axis=1)
        v = values(q, ts)
        new_lo, new_hi, done = lo[q].copy(), hi[q].copy(), np.zeros(len(q), dtype=bool)
        row = np.arange(len(q))
        for kind in ("zero", "bottom", "past"):
            m = np.flatnonzero(rule[q] == kind)
            if not m.size:
                continue
            t_, d = ts[m], v[m]
            if kind == "zero":
                with np.errstate(invalid="ignore"):
                    step = np.abs(np.diff(d, axis=1))
                    typical = np.median(step, axis=1)[:, None]
                    crossing = (np.sign(d[:, :-1]) != np.sign(d[:, 1:])) & ((step <= 2 * typical) | (typical == 0))
                at_zero = (d == 0).any(axis=1)
                for i in np.flatnonzero(at_zero).tolist():
                    result[q[m[i]]] = float(t_[i, np.argmax(d[i] == 0)]) + 0.0
                none = ~at_zero & ~crossing.any(axis=1)
                done[m[at_zero | none]] = True
                k = np.argmax(crossing, axis=1)
                new_lo[m], new_hi[m] = t_[row[:len(m)], k], t_[row[:len(m)], k + 1]
            elif kind == "bottom":
                k = np.argmin(d, axis=1)
                new_lo[m] = t_[row[:len(m)], np.maximum(k - 1, 0)]
                new_hi[m] = t_[row[:len(m)], np.minimum(k + 1, spans)]
            else:
                reached = d.astype(bool)
                at_lo = reached[:, 0]
                for i in np.flatnonzero(at_lo).tolist():
                    result[q[m[i]]] = float(lo[q[m[i]]])
                done[m[at_lo]] = True
                k = np.where(reached.any(axis=1), np.argmax(reached, axis=1), spans)
                k = np.maximum(k, 1)
                new_lo[m], new_hi[m] = t_[row[:len(m)], k - 1], t_[row[:len(m)], k]
        still = (new_lo != lo[q]) | (new_hi != hi[q])
        lo[q[~done]], hi[q[~done]] = new_lo[~done], new_hi[~done]
        narrowing[q[done | ~still]] = False
        settled[q[~done & ~still]] = True
    settled |= narrowing  # (after ROUNDS)
    for i in np.flatnonzero(settled).tolist():
        result[i] = _simplest(lo[i], hi[i])
    return result


def _path_changes(tr: Traced, line: Line, rows: np.ndarray, out: str, rows_per_pass: int) -> dict:
    """{i: (x, note)} for each sample i of rows (tr's path) whose next sample is on another:
    the decision that changes (check's path notes) and where the path leaves tr's between
    them (_located, all of them together: one on_tape a round)."""
    t = line.t
    leaving = rows[(rows + 1 < len(t)) & ~np.isin(rows + 1, rows)]
    if not leaving.size:
        return {}
    first, guards = _first_changes(tr, line, line._replace(t=t[leaving + 1]).points(), out)
    texts = []
    for f in first.tolist():
        notes = path_notes(tr, [guards[f]], "sample") if f >= 0 else []
        texts.append(notes[0].split("; ")[0].removeprefix("near a ") if notes else "change of path")

    def past(q, ts):
        flat = ts.reshape(-1)
        left = np.concatenate([_first_changes(tr, line, line._replace(t=flat[a:a + rows_per_pass]).points(), out)[0]
                               for a in range(0, len(flat), rows_per_pass)])
        return (left != ON_PATH).reshape(ts.shape)
    located = _located([("past", t[i], t[i + 1], 0) for i in leaving.tolist()], past, _width(tr, line))
    return {i: (x, text) for i, x, text in zip(leaving.tolist(), located, texts)}


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


def _add_mark(marks: list, placed: dict, x: float, kind: str, text: str, spacing: float) -> None:
    """Add a mark, unless the same one lies within spacing of it (one point of the grid the
    kinks are looked for on, a sample for a change of path).  placed: the xs of the marks so
    far by kind and note, sorted, so that the look is at the two nearest (4,000 marks of one
    kink of an array looked at every mark before: 8 M comparisons)."""
    xs = placed.setdefault((kind, text), [])
    k = bisect.bisect_left(xs, x)
    if any(abs(xs[j] - x) <= spacing for j in (k - 1, k) if 0 <= j < len(xs)):
        return
    xs.insert(k, x)
    marks.append({"x": float(x) + 0.0, "kind": kind, "note": text})
