"""``check``: automatic derivatives against independent estimates.

Finite differences (the methods, their steps and formulas: :mod:`.stencil`)
evaluate all of their perturbed points in one batched pass over the forward
tape (the tape accepts a leading batch axis), never in a Python loop over
elements.  Reverse mode is also compared with forward mode along random
directions, and optionally with sympy's closed form and a stored result.
"""
from __future__ import annotations

import itertools
import math
from typing import NamedTuple

import numpy as np

from . import stencil
from .batched import VJP_FOLDS, BatchedBuilder
from .checks import (AD_TOLERANCE, SYMBOLIC_TOLERANCE, TOLERANCES, CheckResult, breach, check_result,
                     compare, directions_label, fail_non_finite, kink_text, tolerance,
                     unmeasured_errors)
from .codec import JSONNumberError, array_from_json
from .errors import GradcalcError, LimitError, Pos, UsageError, ValueError_, option, to_pos
from .lexer import tokenize
from .lower import DEFAULT_MAX_STEPS, Traced, find_inputs, trace
from .session import (as_arrays, check_limits, eager_backward, jacobian_blocks, parse, quiet, select_names,
                      select_output, widest_value)
from .stencil import METHODS, default_step
from .tape import DEFAULT_MAX_ELEMENTS, Guard, by_row, eval_equations
from .tape import _scalar_or_array as scalar_or_array
from .transforms import fit_to_shape
from .transforms import backward, forward, largest_batched, needed, rows_to_jacobian, seeded


# ==========================================================================
# Batched evaluation of the forward tape
# ==========================================================================

class Batch(NamedTuple):
    """The outputs at the points of a batch (one row per point), and for each output the
    guards whose change of path, at some row, changed its value (see :func:`evaluate_batch`)."""

    values: list
    flipped: list  # per output: a tuple of tape.Guard, in the order the run took them


def evaluate_batch(tr: Traced, wrt: str, batch: np.ndarray, outs: list[str], *,
                   max_steps: int = DEFAULT_MAX_STEPS, facts: dict | None = None) -> Batch:
    """The outputs outs when the value of wrt is replaced by each row of batch (shape (B,) + shape).

    Finite differences are those of the program as written (SPEC §5): one batched pass over
    the recorded tape also recomputes the variable of every guard (every decision the run
    took); a row whose path differs from the one recorded takes its values from a run of the
    program at that point instead (for an intermediate value, a run where its assignment
    binds the row's value: see trace's ``replace``).  A
    factorisation on the way to an output that chooses its signs otherwise at some row (its
    primitive's ``branch``: LAPACK's qr and svd) is reported there too, as a Guard of kind
    "sign" (the tape holds there, but its value jumps: another branch of the convention).
    ``facts`` is :func:`facts_on_tape`'s answer for tr, where the caller has it.
    """
    switched = []
    tape_values, first, guards = _on_tape(tr, wrt, batch, outs, switched, facts)
    signs = [_sign_changes(tr, tr.tape.names[wrt], tr.tape.names[o], switched, first) for o in outs]
    rows = np.flatnonzero(first >= 0)
    if not rows.size:
        return Batch(tape_values, signs)
    values = tape_values
    if not np.iscomplexobj(batch):  # (a complex step moves no real part)
        values = _rerun(tr, wrt, batch, outs, tape_values, rows, max_steps)
    return Batch(values, [_flips_seen(guards, first, rows, t, v) + s
                          for t, v, s in zip(tape_values, values, signs)])


def _sign_changes(tr: Traced, wrt_var: int, out_var: int, switched: list, first: np.ndarray) -> tuple:
    """Guards of kind "sign" for the factorisations on the way to out_var (kinked_equations'
    rule) that chose otherwise at some row still on the tape's path (switched: (eq, rows)
    pairs from _on_tape); ``expected`` holds the operation's name for the note."""
    if not switched:
        return ()
    on_way = {id(eq) for eq in _equations_with(tr, wrt_var, out_var, "branch")}
    return tuple(Guard(eq.out, tr.builder.op_name(eq.prim, eq.loc), eq.loc, "sign")
                 for eq, rows in switched if id(eq) in on_way and (rows & (first < 0)).any())


def _guards_reached(tr: Traced, var: int, downstream: list) -> list:
    """The guards whose variable is var or computed by downstream (the equations that depend
    on var): the decisions a change of var can change."""
    if not tr.tape.guards:
        return []
    reached = {var} | {eq.out for eq in downstream}
    return [g for g in tr.tape.guards if g.var in reached]


def _on_tape(tr: Traced, wrt: str, batch: np.ndarray, outs: list[str],
             switched: list | None = None, facts: dict | None = None) -> tuple[list, np.ndarray, list]:
    """(values, first, guards): the outputs by one batched pass over tr's tape, the guards
    that depend on wrt, and for each row the number of the first of them whose value it
    changes (-1 if none).  Given a list switched, it gains (eq, rows): for each equation
    downstream whose primitive has a branch, the rows where it chose otherwise."""
    names, b = tr.tape.names, tr.builder
    var = names[wrt]
    out_vars = tuple(names[o] for o in outs)
    downstream, guards, branched, keep, _ = _pass_from(tr, var, out_vars, facts)
    if switched is None:
        branched = []
    largest = largest_batched(downstream, [var], b.shapes)
    b.check_size((len(batch), largest), what=f"a batch of {len(batch)} perturbed points "
                                             f"through {largest}-element values")
    # values that do not depend on var stay as traced (those the trace freed: computed again)
    env = dict(restored(tr, _operands_upstream(downstream, [var]) | {eq.out for eq in branched}))
    env[var] = batch
    eval_equations(downstream, env, keep=keep, batch_elements=len(batch) * largest)
    for eq in branched:
        rows = eq.prim.branch(b.values[eq.out], np.broadcast_to(env[eq.out], batch.shape[:1] + b.shapes[eq.out]))
        switched.append((eq, rows))
    first = _first_differing(guards, env, b.shapes, len(batch))
    return [np.broadcast_to(env[v], batch.shape[:1] + b.shapes[v]) for v in out_vars], first, guards


def _operands_upstream(downstream: list, seeds) -> set:
    """The operands of downstream (equations that depend on seeds, as seeded gives them) that
    do not: the traced values a batched pass over downstream reads."""
    made = set(seeds)
    made.update(eq.out for eq in downstream)
    return {a for eq in downstream for a in eq.args if a not in made}


def restored(tr: Traced, wanted) -> dict:
    """tr's values (tr.builder.values), each of the variables wanted among them: those a trace
    with ``release`` freed (None: no derivative rule reads them, see Builder.release_unread) are
    computed again from the tape, from the values it kept, and put back (a later reader finds
    them).  check traces with release, and its readers of values beyond the rules' reads (the
    batched passes of finite differences, the kink and branch tests, the rounding estimate) ask
    for them here: its results are those of a full tape, in the memory the rules need plus what
    each reader asks for.  The tape's primitives evaluated again on the same operands give the
    same bits (an index update written in place writes the copy's values: see eval_equations)."""
    values = tr.builder.values
    missing = {v for v in wanted if values.get(v, 0) is None}
    if not missing:
        return values
    need, cone = set(missing), []
    for eq in reversed(tr.tape.equations):  # (every variable is one equation's output)
        if eq.out in need:
            cone.append(eq)
            need.update(a for a in eq.args if values[a] is None)
    cone.reverse()
    env = {a: values[a] for eq in cone for a in eq.args if values[a] is not None}
    eval_equations(cone, env, keep=missing)
    for v in missing:
        values[v] = scalar_or_array(env[v])  # (as the trace keeps it: see Builder._bind)
    return values


def _first_differing(guards: list, env: dict, shapes: dict, n: int) -> np.ndarray:
    """For each of the n rows of a batched pass (env), the number of the first guard that it
    decides otherwise (see _differing), or -1.  The guards of one size and kind (truths or
    masks, numbers) are compared together, GUARD_BATCH_ELEMENTS numbers at a time: a loop
    records a guard an iteration, and one comparison a guard cost 14 s of a 45 s plot (a
    bouncing ball's 500 steps)."""
    first = np.full(n, len(guards))
    groups: dict = {}
    for k, g in enumerate(guards):
        expected = np.asarray(g.expected)
        groups.setdefault((math.prod(shapes[g.var]), expected.dtype == bool), []).append(k)
    for (size, truth), ks in groups.items():
        step = max(1, GUARD_BATCH_ELEMENTS // max(1, n * size))
        for start in range(0, len(ks), step):
            part = ks[start:start + step]
            found = [env[guards[k].var] for k in part]
            # (each written into its column: a value computed once, not per row, broadcasts there;
            # a broadcast_to per guard cost half the pass of a 500-step loop's plot)
            values = np.empty((n, len(part), size), dtype=np.result_type(*found))
            for j, v in enumerate(found):
                if size:  # (an empty guard has nothing to write, nor a row count to read)
                    values[:, j] = np.reshape(v, (-1, size))
            expected = np.stack([np.asarray(guards[k].expected).reshape(size) for k in part])
            changed = _differing(values, expected, truth)
            hit = changed.any(axis=1)
            first[hit] = np.minimum(first[hit], np.asarray(part)[np.argmax(changed[hit], axis=1)])
    first[first == len(guards)] = -1
    return first


#: The most numbers _first_differing compares at once (rows x guards x elements).
GUARD_BATCH_ELEMENTS = 1 << 22


def _differing(values: np.ndarray, expected: np.ndarray, truth: bool) -> np.ndarray:
    """(rows, guards): whether each row of each guard's batched variable (values: rows, guards,
    elements) decides otherwise than expected (guards, elements): a truth or a mask (booleans)
    by being non-zero, an integer or integer array by value; nan decides otherwise."""
    v = np.real(values)
    with np.errstate(invalid="ignore"):
        other = ((v != 0) != expected) if truth else (v != expected)
    return (other | np.isnan(v)).any(axis=2)


def _rerun(tr: Traced, wrt: str, batch, outs, tape_values: list, rows, max_steps: int) -> list:
    """The outputs with the rows whose path changed taken from runs of the program.

    One run at the first such row; its tape then serves, in one batched pass, every other
    row that takes the same path; the rows left over start again (one run per path taken).
    A row where the program fails, or its output has another shape, is nan."""
    values = [np.array(v) for v in tape_values]
    point = {name: tr.value(name) for name in tr.tape.inputs}
    intermediate = wrt not in tr.tape.inputs
    pending = rows
    while pending.size:
        row, pending = pending[0], pending[1:]
        if intermediate:  # (the run as far as wrt's assignment is the traced one: see trace)
            other = _run_at(tr, point, max_steps, replace=(tr.tape.names[wrt], batch[row]), release=RELEASE)
        else:
            other = _run_at(tr, {**point, wrt: batch[row]}, max_steps, release=RELEASE)
        if other is None or any(o not in other.tape.names or other.value(o).shape != v.shape[1:]
                                for o, v in zip(outs, values)):
            for v in values:
                v[row] = np.nan
            continue
        for o, v in zip(outs, values):
            v[row] = other.value(o)
        if pending.size:
            found, first, _ = _on_tape(other, wrt, batch[pending], outs)
            same = first < 0
            for v, f in zip(values, found):
                v[pending[same]] = f[same]
            pending = pending[~same]
    return values


#: A run at a point a step away from the traced one may take at most this many times the
#: traced run's equations in steps (and at least RERUN_MIN_STEPS): a step rarely changes a
#: loop's count by more than a few, and a loop that no longer ends (Newton's iteration on
#: the wrong side of a boundary) must not cost max_steps for every row.  Past it, the row
#: has no value (nan), as where the program fails.
RERUN_STEPS_FACTOR = 10
RERUN_MIN_STEPS = 10**5


def _run_at(tr: Traced, at: dict, max_steps: int, replace: tuple | None = None,
            release: bool = False) -> Traced | None:
    """The program run at the point at= (with tr's limits, and trace's replace and release), or
    None where it fails there."""
    steps = min(max_steps, max(RERUN_MIN_STEPS, RERUN_STEPS_FACTOR * len(tr.tape.equations)))
    try:
        return trace(tr.program, at, max_elements=tr.builder.max_elements, max_steps=steps,
                     check_finite=False, replace=replace, release=release)
    except GradcalcError:
        return None


#: Public names of the pieces of evaluate_batch (plot groups its samples by path with them).
on_tape = _on_tape
run_at = _run_at


def _flips_seen(guards: list, first, rows, tape, run) -> tuple:
    """The guards first changed in the rows where a run's value differs from the tape's
    (all the changed rows when nothing was run): the changes of path that matter to this
    output, in the order the run took them."""
    if run is not tape:
        t, r = tape[rows].reshape(len(rows), -1), run[rows].reshape(len(rows), -1)
        differ = ((t != r) & ~(np.isnan(t) & np.isnan(r))).any(axis=1)
        rows = rows[differ]
    return tuple(guards[k] for k in sorted(set(first[rows].tolist())))


#: How a note names each kind of decision (Guard.what): (verb, the decision, what follows).
_DECISIONS = {
    "if": ("flips", "the if condition", ""),
    "while": ("flips", "the while condition", ", so the loop runs a different number of times"),
    "conditional": ("flips", "the condition of a conditional expression", ""),
    "mask": ("changes", "the mask", ""),
    "index": ("changes", "the index", ""),
    "range": ("changes", "the range argument", ", so the loop runs a different number of times"),
    "sort order": ("changes", "the sort order", ""),
    # (the positions argmax, argmin and argsort choose: builtins._chosen)
    "argmax": ("changes", "the position chosen by", ""),
    "argmin": ("changes", "the position chosen by", ""),
    "argsort": ("changes", "the order chosen by", ""),
}


def path_notes(tr: Traced, guards, step: str = "finite-difference") -> list[str]:
    """A note for each guard that a step changes, naming the decision and where it is
    (line and column, as the kink notes do)."""
    notes = []
    for g in guards:
        if g.what == "sign":
            note = _sign_note(g, step)
            if note not in notes:
                notes.append(note)
            continue
        verb, what, then = _DECISIONS.get(g.what, ("changes", f"the integer argument '{g.what}'", ""))
        pos = to_pos(g.loc)
        text = _decision_text(tr.program.source.text, pos) if pos else ""
        where = f" (line {pos.line}, column {pos.col})" if pos else ""
        note = (f"near a change of path: a {step} step {verb} {what}{f' {text!r}' if text else ''}{where}"
                f"{then}; finite differences there differ from the derivative of the path taken")
        if note not in notes:
            notes.append(note)
    return notes


def _sign_note(g, step: str) -> str:
    """The note for a Guard of kind "sign" (see _sign_changes): g.expected is the built-in."""
    pos = to_pos(g.loc)
    where = f" (line {pos.line}, column {pos.col})" if pos else ""
    return (f"near a change of sign convention: '{g.expected}'{where} chooses its factors' signs "
            f"otherwise within a {step} step (LAPACK's convention jumps there), so finite differences "
            f"compare two branches; the derivative is that of the branch returned")


#: Tokens that end a condition, an index or an argument when no bracket is open.
_DECISION_ENDS = frozenset(("{", "}", "else", ",", ")", "]", ":", ";", "newline", "eof"))


def _decision_text(text: str, pos: Pos, longest: int = 40) -> str:
    """The text of the condition or index that starts at pos (up to the token that closes
    it: '{', 'else', ',', ']'...), on one line, shortened past ``longest`` characters."""
    tokens = [t for t in tokenize(text) if t.pos >= pos]
    depth, end = 0, None
    for t in tokens:
        key = t.kind if t.kind in ("newline", "eof") else t.text
        if depth == 0 and key in _DECISION_ENDS:
            break
        depth += (key in "([") - (key in ")]")
        end = t
    if end is None:
        return ""
    lines = text.splitlines()[pos.line - 1:end.pos.line]
    lines[-1] = lines[-1][:end.pos.col - 1 + len(end.text)]
    lines[0] = lines[0][pos.col - 1:]
    found = " ".join(" ".join(lines).split())
    return found if len(found) <= longest else found[:longest - 1] + "…"


#: The numbers a full check's finite differences of one input may compute, in all its batches,
#: as a multiple of --max-elements (of its default, at least: a lower one bounds each batch's
#: arrays, and more batches do the same work): past it (an input of 300 x 300: 180,000 points
#: through 90,000-element values, 1.6e10 numbers, hours) check refuses and points to --directions.
FD_WORK_FACTOR = 20


def _within_work(tr: Traced, wrt: str, points: int, width: int) -> None:
    """Refuse, before the first batch, finite differences of wrt at points points through values
    of width elements that would compute more than FD_WORK_FACTOR times --max-elements numbers."""
    work, limit = points * width, FD_WORK_FACTOR * max(tr.builder.max_elements, DEFAULT_MAX_ELEMENTS)
    if work > limit:
        n = tr.value(wrt).size
        raise LimitError(f"the finite differences of the full Jacobian with respect to '{wrt}' ({n:,} elements) "
                         f"would evaluate the program at {points:,} points through values of up to {width:,} "
                         f"elements: {work:.2g} numbers, more than {FD_WORK_FACTOR} x {option('max_elements')} "
                         f"({limit:.2g})",
                         name=wrt, option="max_elements",
                         hint=f"check along random directions instead, with {option('directions')} K (one "
                              f"point pair a direction), or raise {option('max_elements')}")


def _check_batch(tr: Traced, rows: int, n: int) -> None:
    """Refuse, before it is made, a batch of rows perturbed copies of an n-element input."""
    tr.builder.check_size((rows, n), what=f"a batch of {rows} perturbed copies of a {n}-element input")


def _known_method(method: str) -> None:
    if not isinstance(method, str) or method not in METHODS:
        raise UsageError(f"unknown method '{method}'", hint=f"use one of: {', '.join(METHODS)}",
                         option="method")


class FiniteDifferences(NamedTuple):
    """A finite-difference estimate: Jacobians {of: array of shape of.shape + wrt.shape}, the
    steps taken (wrt's shape) and, for each output, the guards a step changed (see Batch)."""

    jacobian: dict
    step: np.ndarray
    flipped: dict
    #: {of: an estimate of each element's error (the Jacobian's shape)}, where one was taken
    #: (see :func:`_estimates_error`), else None
    error: dict | None = None


def fd_jacobian(tr: Traced, of: list[str], wrt: str, method: str = "central", step=None):
    """Finite-difference Jacobians {of: array of shape of.shape + wrt.shape} and the steps used
    (the first two parts of :func:`fd_estimate`)."""
    return fd_estimate(tr, of, wrt, method, step)[:2]


def fd_estimate(tr: Traced, of: list[str], wrt: str, method: str = "central", step=None, *,
                max_steps: int = DEFAULT_MAX_STEPS, facts: dict | None = None, columns=None) -> FiniteDifferences:
    """The finite-difference estimate of d of / d wrt; the perturbed points are the rows of
    batches of at most FD_BATCH_ELEMENTS elements (rows on another path come from runs of the
    program: evaluate_batch, which takes facts).  With columns (indices into wrt's flat
    elements), only those elements are moved: the other columns of the Jacobian are nan (a
    search at other steps needs the columns that failed alone)."""
    _known_method(method)
    x = tr.value(wrt)
    h = np.broadcast_to(default_step(x, method) if step is None else np.asarray(step, float), x.shape)
    if step is None and _estimates_error(x, method):
        try:
            return _fd_batch(tr, of, wrt, method, h, True, max_steps, facts, columns)
        except LimitError:  # (the error estimate doubles the batch: without it, as before)
            pass
    return _fd_batch(tr, of, wrt, method, h, False, max_steps, facts, columns)


#: The most elements a batch of perturbed points holds in its largest value (64 MB): more
#: columns are taken in several batches, so that a check of 8,000 inputs (16,000 points of 8,000
#: elements, central) needs neither 1 GB a value nor more than --max-elements, nor does
#: outer(x, x) of 1,000 (2,000 points of a million).
FD_BATCH_ELEMENTS = 1 << 23


def _fd_width(tr: Traced, of: list[str], wrt: str, facts: dict | None = None) -> int:
    """A perturbed point's numbers in the largest value of the finite differences' pass."""
    largest = _pass_from(tr, tr.tape.names[wrt], tuple(tr.tape.names[o] for o in of), facts).widest
    return max(largest, tr.value(wrt).size, 1)


def _fd_within_work(tr: Traced, of: list[str], wrts: list[str], method: str, facts: dict | None = None) -> None:
    """Refuse, before anything of the check runs (forward mode's probes of a 10^8-element input
    took 10 GB before this refusal came), finite differences of the full Jacobian that
    _fd_batch would refuse (see _within_work), at their smallest: without an error estimate.
    The pass of each input is found only where the tape's widest value could pass the limit
    (finding it for each of 200 scalar inputs swept the tape 200 times)."""
    widest = widest_value(tr)
    limit = FD_WORK_FACTOR * max(tr.builder.max_elements, DEFAULT_MAX_ELEMENTS)
    for w in wrts:
        points = len(stencil.offsets(method)) * tr.value(w).size + stencil.needs_centre(method)
        if points * max(widest, tr.value(w).size) > limit:
            _within_work(tr, w, points, _fd_width(tr, of, w, facts))


def _fd_batch(tr: Traced, of: list[str], wrt: str, method: str, h: np.ndarray, with_error: bool,
              max_steps: int, facts: dict | None = None, columns=None) -> FiniteDifferences:
    """fd_estimate at the steps h, with an error estimate or not (stencil.combine's with_error),
    for the given columns (all when None), FD_BATCH_ELEMENTS at a time."""
    x = tr.value(wrt)
    n = x.size
    scales = stencil.offsets(method, with_error)
    centre = stencil.needs_centre(method)  # forward differences also need f(x): one more row
    cols = np.arange(n) if columns is None else np.asarray(columns, dtype=np.intp)
    width = _fd_width(tr, of, wrt, facts)
    _within_work(tr, wrt, len(scales) * cols.size + centre, width)
    budget = min(FD_BATCH_ELEMENTS, tr.builder.max_elements) - centre * width  # (f(x)'s row too)
    per_batch = max(1, budget // (len(scales) * width))
    rows = {o: np.full((n,) + tr.value(o).shape, np.nan) for o in of}
    errs = {o: np.full((n,) + tr.value(o).shape, np.nan) for o in of} if with_error else None
    flips = [{} for _ in of]  # (per output, its guards by decision, in the order found: a batch
    #                           makes its "sign" guards anew)
    for start in range(0, max(cols.size, 1), per_batch):
        part = cols[start:start + per_batch]
        # refused before the batch is made (evaluate_batch checks what flows from it)
        _check_batch(tr, len(scales) * part.size + centre, n)
        batch, taken = stencil.perturb(x.ravel(), h.ravel(), scales, centre, part)
        ys, flipped = evaluate_rows(tr, wrt, batch.reshape((len(batch),) + x.shape), of, max_steps, facts)
        m = part.size
        for i, (o, y) in enumerate(zip(of, ys)):
            blocks = [y[k * m:(k + 1) * m] for k in range(len(scales))]
            found = stencil.combine(method, blocks, taken, y[len(scales) * m:] if centre else tr.value(o),
                                    with_error=with_error)
            if with_error:
                found, errs[o][part] = found
            rows[o][part] = found
            flips[i].update(((g.var, g.loc, g.what), g) for g in flipped[i])
    jac = {o: rows_to_jacobian(rows[o], tr.value(o).shape, x.shape) for o in of}
    error = None if errs is None else {o: rows_to_jacobian(errs[o], tr.value(o).shape, x.shape) for o in of}
    return FiniteDifferences(jac, h, {o: _in_run_order(tr, f.values()) for o, f in zip(of, flips)}, error)


#: The most passes _evaluate_rows spends finding the points of a batch where an operation
#: fails (two a halving): a few such points take tens; where many fail (a matrix whose least
#: eigenvalue is far below the step: half of a 6,400-element input's points), finding each
#: would cost thousands of passes at every step of the search, and the failure is the check's
#: error instead, as it was for every failure.
FAILING_ROW_PASSES = 64


def evaluate_rows(tr: Traced, wrt: str, batch: np.ndarray, outs: list[str], max_steps: int,
                  facts: dict | None = None) -> Batch:
    """evaluate_batch, with nan as the outputs of the points where an operation fails: cholesky
    of a matrix that the step made indefinite, solve of one it made singular.  The traced
    point's own run succeeded, so the step is to blame, and the differences' search at smaller
    steps can mend them (see _undefined_a_step_away), where the whole check was an error (exit
    2: "the matrix is not positive definite" of a matrix that is).  See by_halves."""
    def failed(part):
        return Batch([np.full((1,) + tr.value(o).shape, np.nan) for o in outs], [() for _ in outs])

    def joined(a: Batch, b: Batch) -> Batch:
        return Batch([np.concatenate([x, y]) for x, y in zip(a.values, b.values)],
                     [x + tuple(g for g in y if g not in x) for x, y in zip(a.flipped, b.flipped)])
    return by_halves(lambda part: evaluate_batch(tr, wrt, part, outs, max_steps=max_steps, facts=facts),
                     batch, failed, joined, [FAILING_ROW_PASSES])


def first_changes(tr: Traced, wrt: str, batch: np.ndarray, outs: list[str]) -> np.ndarray:
    """on_tape's first guard each row changes (-1: none), and -1 where an operation fails at a
    row (its value is nan already: see evaluate_rows)."""
    return by_halves(lambda part: on_tape(tr, wrt, part, outs)[1], batch, lambda part: np.full(len(part), -1),
                     lambda a, b: np.concatenate([a, b]), [FAILING_ROW_PASSES])


def by_halves(run, rows: np.ndarray, failed, joined, passes: list):
    """run(rows), a batched pass, where an operation fails at some of the rows (the traced
    point's run succeeded, so the rows are to blame): each half is run on its own, down to
    single rows, which give failed(row); joined(a, b) puts two halves' answers together.  Two
    passes a halving, only on a failure; past passes[0] of them, the failure is raised.
    (check's points, plot's samples: one mechanism.)"""
    try:
        return run(rows)
    except (ValueError_, np.linalg.LinAlgError):
        if len(rows) == 1:
            return failed(rows)
        passes[0] -= 2
        if passes[0] < 0:
            raise
    half = len(rows) // 2
    return joined(by_halves(run, rows[:half], failed, joined, passes),
                  by_halves(run, rows[half:], failed, joined, passes))


def _in_run_order(tr: Traced, guards) -> tuple:
    """Guards that batches found, in the order the run took them (as evaluate_batch gives one
    batch's), the "sign" guards last."""
    order = {id(g): k for k, g in enumerate(tr.tape.guards)}
    return tuple(sorted(guards, key=lambda g: (g.what == "sign", order.get(id(g), g.var))))


#: How many scalar inputs share a batched pass (scalar_estimates, _scalar_tangents): the rows of
#: a pass grow with them, and a tangent pass holds a seed of that many rows for each.
SCALAR_CHUNK = 256


def _chunks(names: list) -> list:
    return [names[i:i + SCALAR_CHUNK] for i in range(0, len(names), SCALAR_CHUNK)]


def scalar_estimates(tr: Traced, of: list[str], wrts: list[str], method: str, facts: dict,
                     multiple: float | None = None) -> dict:
    """{w: fd_estimate(tr, of, w, method) at the default step (or, given multiple, at
    step=multiple times it)}, for the scalar inputs among wrts,
    from one batched pass over the tape instead of one per input: each input has a block of rows
    of its own (its perturbed points, the others' traced values), and a value downstream of some
    of them holds, in the rows of the others, its traced value (np.where on a mask of the blocks
    that reach it), so that every row holds the bits its input's own pass gives.  A pass per
    input swept the tape once each, and evaluated what follows it (a0*a0 + ... + a1999*a1999:
    2,000 passes over about 1,000 equations each).

    Only where no step can change the path (a tape without guards, no factorisation that chooses
    signs: facts, see facts_on_tape) and for the real methods; {} where the batch is over the
    element budget or an operation fails at a point (each input's own pass says so then)."""
    names, b = tr.tape.names, tr.builder
    wrts = [w for w in wrts if w in tr.tape.inputs and np.ndim(tr.value(w)) == 0]
    if len(wrts) < 2 or tr.tape.guards or facts["branch"] or method not in stencil.ROUNDING:
        return {}
    plans, start = [], 0
    for w in wrts:
        x = tr.value(w)
        h = np.broadcast_to(default_step(x, method) * (1.0 if multiple is None else multiple), x.shape)
        with_error = multiple is None and _estimates_error(x, method)
        scales = stencil.offsets(method, with_error)
        batch, taken = stencil.perturb(x.ravel(), h.ravel(), scales, stencil.needs_centre(method))
        plans.append((w, h, with_error, scales, taken, slice(start, start + len(batch)), batch[:, 0]))
        start += len(batch)
    rows = start
    env, reach = dict(restored(tr, _operands_upstream(seeded(tr.tape.equations, [names[w] for w in wrts]),
                                                      [names[w] for w in wrts]))), {}
    for w, *_, block, points in plans:
        column = np.full(rows, float(tr.value(w)))
        column[block] = points
        env[names[w]] = column
        mask = np.zeros(rows, bool)
        mask[block] = True
        reach[names[w]] = mask
    downstream = seeded(tr.tape.equations, list(reach))
    largest = largest_batched(downstream, list(reach), b.shapes)
    try:
        b.check_size((rows, largest), what=f"a batch of {rows} perturbed points through {largest}-element values")
        _masked_pass(downstream, env, reach, b, {names[o] for o in of})
    except (GradcalcError, np.linalg.LinAlgError, _NotKept):  # (over the budget, a singular matrix...)
        return {}
    found = {}
    for w, h, with_error, scales, taken, block, _ in plans:
        jac, error = {}, ({} if with_error else None)
        for o in of:
            y = np.broadcast_to(env[names[o]], (rows,) + b.shapes[names[o]])[block]
            estimate = stencil.combine(method, [y[k:k + 1] for k in range(len(scales))], taken,
                                       y[len(scales):] if stencil.needs_centre(method) else tr.value(o),
                                       with_error=with_error)
            if with_error:
                estimate, err = estimate
                error[o] = rows_to_jacobian(err, tr.value(o).shape, ())
            jac[o] = rows_to_jacobian(estimate, tr.value(o).shape, ())
        found[w] = FiniteDifferences(jac, h, {o: () for o in of}, error)
    return found


class _NotKept(Exception):
    """A traced value _masked_pass needs was not kept."""


def _masked_pass(equations, env: dict, reach: dict, b, keep: set) -> None:
    """Evaluate equations (all downstream of reach's variables) on the batch in env, each value
    replaced by its traced one in the rows its arguments' masks (reach: var -> rows it reaches)
    leave out; values and masks are dropped after their last use, except keep's."""
    last = {}
    for i, eq in enumerate(equations):
        for a in eq.args:
            last[a] = i
    with np.errstate(all="ignore"):
        for i, eq in enumerate(equations):
            value = eq.prim.impl(*[env[a] for a in eq.args], **eq.params)
            masks = [reach[a] for a in eq.args if a in reach]
            mask = masks[0] if len(masks) == 1 else np.logical_or.reduce(masks)
            if not mask.all():
                traced = b.values.get(eq.out)
                if traced is None:  # (a value the trace did not keep: each input's own pass then)
                    raise _NotKept
                value = np.where(mask.reshape((-1,) + (1,) * len(b.shapes[eq.out])), value, traced)
            env[eq.out], reach[eq.out] = value, mask
            for a in set(eq.args):
                if last.get(a) == i and a in reach and a not in keep:
                    del env[a], reach[a]


class _Steps:
    """A point's finite differences at the default step times 2^k, for the scalar inputs that
    scalar_estimates served: the searches of a failing comparison (_at_larger_steps,
    _at_smaller_steps) ask for one input and one k at a time, and each asked its own pass over
    the tape; the first request for a k computes it, in batched passes, for every scalar input
    whose comparison at the default step fails (the ones that search), and keeps the answers."""

    def __init__(self, tr: Traced, outs, together: dict, rev: dict, plan: "_Plan", facts: dict):
        self.tr, self.outs, self.together, self.plan, self.facts = tr, outs, together, plan, facts
        self.rev, self.found, self.failing = rev, {}, None

    def estimate(self, o: str, w: str, h: np.ndarray, k: int) -> FiniteDifferences | None:
        """The estimate of d o / d w at step h * 2^k (h: w's default step), or None where this
        point has none to give (each caller then makes its own)."""
        first = self.together.get(w)
        if first is None or not np.array_equal(first.step, h):
            return None
        if (w, k) not in self.found:
            for chunk in _chunks([v for v in self._failing() if (v, k) not in self.found] or [w]):
                for v, est in scalar_estimates(self.tr, self.outs, chunk, self.plan.method, self.facts,
                                               2.0 ** k).items():
                    self.found[v, k] = est
        est = self.found.get((w, k))
        return None if est is None else FiniteDifferences({o: est.jacobian[o]}, est.step, {o: est.flipped[o]})

    def _failing(self) -> list:
        if self.failing is None:
            rtol, atol = self.plan.tol
            self.failing = [w for w, est in self.together.items() if any(
                not compare(0.0 if self.rev[o][w] is None else self.rev[o][w], est.jacobian[o], rtol, atol)[0]
                for o in self.outs)]
        return self.failing


def _estimate_at(tr: Traced, o: str, w: str, plan: "_Plan", h: np.ndarray, k: int,
                 columns=None) -> FiniteDifferences:
    """fd_estimate(tr, [o], w, step=h * 2^k, columns=columns) (h: the default step), from the
    point's batched passes where it has them (plan.steps)."""
    found = None if plan.steps is None else plan.steps.estimate(o, w, h, k)
    if found is not None:
        return found
    return fd_estimate(tr, [o], w, plan.method, step=h * 2.0 ** k, max_steps=plan.max_steps, columns=columns)


def _failing_columns(failing: np.ndarray, w_size: int, view):
    """The elements of w (flat indices) whose columns of the Jacobian hold an element failing
    (o's axes, then w's), in view's terms (_symmetrised reads columns ij and ji); None where
    that is every one."""
    if view is _symmetrised:
        failing = failing | np.swapaxes(failing, -1, -2)
    columns = np.flatnonzero(failing.reshape(-1, w_size).any(axis=0))
    return None if columns.size == w_size else columns


def _estimates_error(x: np.ndarray, method: str) -> bool:
    """Whether the default estimate also estimates its error (the same difference at h/2, in the
    same batch: stencil's second table): where the default step, which grows with |x|, has grown
    past what a function varying on a unit scale tolerates, so that its truncation error could
    cancel a wrong derivative's error (sin at 562 wrong by 4 times the tolerance passed).  That
    is where h^p (p the method's order) passes a tenth of the method's default rtol: |x| past
    about 50 for central differences, 700 for forward ones; Richardson's own points give its
    estimate for nothing.  (Every |x| > 1 doubled the batch: W5's check, 16 -> 33 ms.)"""
    if method not in stencil.ROUNDING or not x.size:
        return False
    if method == "richardson":
        return True
    h = float(np.max(stencil.default_step(np.max(np.abs(x)), method)))
    return h > (0.1 * TOLERANCES[method][0]) ** (1 / stencil.ORDER[method])  # (h^p would overflow at 1e160)


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


def _upstream(tr: Traced, var: int) -> tuple[set, set]:
    """(every variable var is computed from, those with a differentiable path to var): the
    second follows only the arguments a derivative rule reaches, so not a condition or a
    mask (where's first argument, a comparison's operands)."""
    needed, smooth = {var}, {var}
    for eq in reversed(tr.tape.equations):
        if eq.out in needed:
            needed.update(eq.args)
        if eq.out in smooth and eq.prim.differentiable:
            smooth.update(a for i, a in enumerate(eq.args) if eq.prim.vjp_rule(i) is not None)
    return needed, smooth


def facts_on_tape(tr: Traced) -> dict:
    """{fact: whether some equation on tr's tape has it} for "kink" and "branch", and "stop":
    whether one is a stop_gradient; most programs have none (worked out once a tape: check asks
    for each of many inputs and steps)."""
    key = ("facts", len(tr.tape.equations))
    facts = tr.derived.get(key)
    if facts is None:
        facts = tr.derived[key] = {fact: any(getattr(eq.prim, fact) is not None for eq in tr.tape.equations)
                                   for fact in ("kink", "branch")}
        facts["stop"] = any(eq.prim.name == "stop_gradient" for eq in tr.tape.equations)  # (stopped_notes)
    return facts


class _Pass(NamedTuple):
    """What a batched pass from one variable to some outputs runs (see _pass_from)."""

    equations: list  # those downstream of the variable that the kept variables are computed from
    guards: list  # the guards the variable reaches (_guards_reached)
    branched: list  # the equations downstream with a branch (LAPACK's sign choices)
    keep: set  # the outputs', the guards' and the branched equations' variables
    widest: int  # the largest value downstream of the variable (largest_batched), kept or not


def _pass_from(tr: Traced, var: int, out_vars: tuple, facts: dict | None) -> _Pass:
    """The pass of finite differences from var to out_vars (_on_tape's): the equations that
    depend on var, less those that only the other outputs read (the derivative of one of a
    thousand outputs need not run the other 999).  The last one made is kept (tr.derived), and
    what it is made from, for the last var: a search over steps (_halved) estimates one block at
    twenty steps, one output after another, and the sweeps of the tape that find a pass cost
    more than the pass of a small output."""
    key = (var, out_vars, len(tr.tape.equations))
    last = tr.derived.get(_Pass)
    if last is not None and last[0] == key:
        return last[1]
    downstream, guards, branched, widest = _downstream_of(tr, var, facts)
    keep = set(out_vars) | {g.var for g in guards} | {eq.out for eq in branched}
    found = _Pass(needed(downstream, keep), guards, branched, keep, widest)
    tr.derived[_Pass] = (key, found)
    return found


def _downstream_of(tr: Traced, var: int, facts: dict | None) -> tuple:
    """(the equations that depend on var, the guards and the branched equations among them, the
    widest value they compute): _pass_from's sweeps, kept for the last var (tr.derived)."""
    key = (var, len(tr.tape.equations))
    last = tr.derived.get(_downstream_of)
    if last is not None and last[0] == key:
        return last[1]
    downstream = seeded(tr.tape.equations, [var])
    found = (downstream, _guards_reached(tr, var, downstream), _equations_with(tr, var, None, "branch", facts),
             largest_batched(downstream, [var], tr.builder.shapes))
    tr.derived[_downstream_of] = (key, found)
    return found


def kinked_equations(tr: Traced, wrt_var: int, out_var: int | None = None, facts: dict | None = None) -> list:
    """The equations with a kink on the way from wrt to the output (every output's, when
    out_var is None) where the output's value follows the kink: a kink of a differentiable
    operation (abs, relu, max) on a differentiable path to the output, a jump (a comparison)
    on any path (a mask that multiplies, where's condition).  A kink that only decides a
    condition or an index of the program is not one of the output: a change of path is
    noted by path_notes instead.  facts: see facts_on_tape."""
    return _equations_with(tr, wrt_var, out_var, "kink", facts)


def _equations_with(tr: Traced, wrt_var: int, out_var: int | None, fact: str, facts: dict | None = None) -> list:
    """The equations downstream of wrt whose primitive has fact ("kink", "branch"), on the
    way to the output as kinked_equations says (none, without a sweep, where facts, the
    answer of facts_on_tape, says the tape has none)."""
    if not (facts or facts_on_tape(tr))[fact]:
        return []
    live = {wrt_var}
    found = []
    for eq in tr.tape.equations:
        if live.isdisjoint(eq.args):
            continue
        live.add(eq.out)
        if getattr(eq.prim, fact) is not None:
            found.append(eq)
    if not found or out_var is None:
        return found
    # (only where some equation has the fact: the sweep back from the output costs as much as the
    # one above, and check asks once per input: 1,000 scalar inputs spent 8 of 23 s here)
    needed, smooth = _upstream(tr, out_var)
    return [eq for eq in found if eq.out in (smooth if eq.prim.differentiable else needed)]


def kinks_near(tr: Traced, wrt_var: int, h: np.ndarray, out_var: int | None = None,
               facts: dict | None = None, per_element: bool = False) -> list[str]:
    """Notes for the kinked operations on the way from wrt to the output (kinked_equations)
    whose argument lies within two steps of the kink.  With per_element (h: the steps of the
    elements of wrt, each moved alone, as the full check's differences move them), a kink
    that passes that test is measured again in the units of its own argument: how far two
    steps of each element move its distance, to first order (see _kink_moves), so that the
    kink of abs(x^4) at x = 1e-3, whose argument 1e-12 is within two steps of 7.6e-6 of 0 but
    moves by 3e-14 a step, is not near."""
    scale = float(np.max(h)) * 2 if np.size(h) else 0.0
    notes = []
    kinked = kinked_equations(tr, wrt_var, out_var, facts)
    values = restored(tr, {v for eq in kinked for v in (eq.out, *eq.args)})
    for eq in kinked:
        with np.errstate(all="ignore"):
            d = np.abs(np.asarray(eq.prim.kink(values[eq.out], *[values[a] for a in eq.args], **eq.params)))
        if not (d.size and float(np.min(d)) <= scale):
            continue
        moves = _kink_moves(tr, wrt_var, eq, h, values) if per_element else None
        if moves is not None and not (d <= moves).any():
            continue
        note = f"near the {kink_text(tr.builder, eq)}"
        if note not in notes:
            notes.append(note)
    return notes


def _kink_moves(tr: Traced, wrt_var: int, eq, h: np.ndarray, values: dict) -> np.ndarray | None:
    """How far eq's kink distance moves, per element, when one element of wrt moves by up to two
    of its steps h (the largest move over the elements and both signs), to first order: its
    operands' tangents from one batched tangent pass on wrt's identity basis, the kink function
    evaluated at the operands moved along them.  None where that pass is over an eighth of the
    element budget (the caller then keeps the plain test)."""
    b, x = tr.builder, restored(tr, {wrt_var})[wrt_var]
    n = int(np.size(x))
    reach = np.broadcast_to(2.0 * np.asarray(h, dtype=float), np.shape(x)).reshape(n)
    involved = (eq.out, *eq.args)
    equations = needed(seeded(tr.tape.equations, [wrt_var]), set(involved))
    widest = max(largest_batched(equations, [wrt_var], b.shapes), *(math.prod(b.shapes[v]) for v in involved))
    if n == 0 or n * widest * 2 > b.max_elements // 8:
        return None
    batch = BatchedBuilder(b, n, what="a tangent pass for a kink's distance")
    (seed,) = batch.seeds([np.shape(x)])
    tan = forward(b, equations, {wrt_var: seed}, eager=True, check=False, keep=set(involved))
    moved = []
    for sign in (1.0, -1.0):
        parts = []
        for v in involved:
            t = tan.get(v)
            base = np.asarray(values[v], dtype=float)
            if t is None:
                parts.append(np.broadcast_to(base, (n,) + base.shape))
            else:
                rows = batch.rows(t).reshape((n,) + base.shape)
                parts.append(base + sign * reach.reshape((n,) + (1,) * base.ndim) * rows)
        with np.errstate(all="ignore"):
            moved.append(np.asarray(eq.prim.kink(parts[0], *parts[1:], **eq.params)))
    with np.errstate(all="ignore"):
        here = np.asarray(eq.prim.kink(values[eq.out], *[values[a] for a in eq.args], **eq.params))
        return np.max(np.abs(np.stack(moved) - here), axis=(0, 1))


def stopped_notes(tr: Traced, w: str, o: str) -> list[str]:
    """Notes for a failed comparison: each stop_gradient the program calls on the way from w to o
    (its argument computed from w, its value used by o).  Finite differences see the value it
    passes change; the derivative stops there by design, so a comparison across it fails.  Those
    that built-ins call (logsumexp's, std's) are not the program's: op_name names the built-in."""
    names, builder = tr.tape.names, tr.builder
    if not (facts_on_tape(tr)["stop"]):  # (most programs: no sweep a failing output)
        return []
    live, stops = {names[w]}, []
    for eq in tr.tape.equations:
        if live.isdisjoint(eq.args):
            continue
        live.add(eq.out)
        if eq.prim.name == "stop_gradient" and builder.op_name(eq.prim, eq.loc) == "stop_gradient":
            stops.append(eq)
    if not stops:
        return []
    needed, _ = _upstream(tr, names[o])
    notes = []
    for eq in stops:
        if eq.out in needed:
            where = f" (line {eq.pos.line}, column {eq.pos.col})" if eq.pos else ""
            note = (f"'stop_gradient'{where} stops the derivative of a value computed from {w}: finite "
                    "differences see that value change, the derivative does not")
            if note not in notes:
                notes.append(note)
    return notes


# ==========================================================================
# How much f's evaluation rounds
# ==========================================================================

#: Operations whose result is exact: they move, select or negate elements, and no arithmetic
#: of theirs rounds (so they add nothing to f's rounding).
EXACT_OPERATIONS = frozenset((
    "neg", "copy", "reshape", "transpose", "broadcast_to", "index", "index_put", "index_update", "concat",
    "diag", "diag_embed", "max", "min", "abs", "relu", "maximum", "minimum", "fmax", "fmin", "where",
    "copysign", "sign", "floor", "ceil", "round", "trunc"))
#: Operations without the elementwise fact that round as one: their result alone.
ROUNDS_ITS_RESULT = frozenset(("pow_const",))
#: The estimate is made element by element of the output (a backward pass per element, in
#: batches) while the output's size times the elements those passes keep is at most this;
#: past it, an output keeps eps |f| (see :func:`rounding_scale`).
ROUNDING_WORK = 10**8
#: A batch of those backward passes keeps at most about this many elements at once.
ROUNDING_BATCH = 10**7


def rounding_scale(tr: Traced, of: str, wrt: str) -> np.ndarray:
    """S, of the output's shape, such that eps S estimates the rounding error of each element of
    f = of, evaluated anew as wrt moves: the first-order running error estimate (Linnainmaa;
    Iri; Higham, Accuracy and Stability of Numerical Algorithms, 3.3), never below |f|.

    Each operation on the way from wrt to f rounds: an elementwise one its result v by eps |v|
    (IEEE arithmetic and libm's functions round their result), and one with inner arithmetic
    (sum, matmul, solve, eigh...) as a backward-stable algorithm does, as if each operand a
    had moved by eps |a| too, and then its result rounded.  An error e in v reaches f_i as
    (d f_i / d v) e, so each rounding adds a term

        t = |v_k| |d f_i / d v_k|   (per element of v_k),
            |a| |(d v_k / d a)^T (d f_i / d v_k)|   (per element of each operand a of k),

    from one backward pass per element of f (all of them in batches), whose adjoints are
    every variable's cotangent; the operand terms are each operation's own VJP of its
    adjoint, operand by operand.  The terms combine as independent errors do, S_i = sqrt(sum
    of t^2) (Higham and Mary's probabilistic analysis, SIAM J. Sci. Comput. 41, 2019): their
    plain sum, the worst case, is the bound of every error aligned, and it was 37 times |f|
    for a right MLP loss of 1e7 whose differences round by less than eps |f|, so that no step
    had both its truncation and that bound below the tolerance.  Each term is at most S, so a
    single intermediate that cancels counts in full.  f itself is one of the v_k, with adjoint
    1.  Where an intermediate far larger than f cancels ((x + 1e8) - 1e8: S = 1e8 + 0.5 at
    x = 0.5; M @ solve(M, b) - b), S is far above |f|; where f is scaled down afterwards
    (1e-12 * (x * y)), the adjoint scales the intermediate down too.

    Operations upstream of wrt do not count: finite differences and the Taylor test evaluate
    only what follows wrt again (evaluate_batch), and the rest rounds alike at every point, so
    its error cancels in their differences.  Nor does wrt's own storage: f is evaluated at the
    floating-point x itself, and the steps are those actually taken, (x + h) - x.  Exact
    operations (EXACT_OPERATIONS) add nothing.  Where the passes would hold more than
    ROUNDING_WORK elements (a large output of a large tape: --directions), the estimate is
    not made and S is |f|, the model before this one: an allowance the tape cannot justify
    element by element would be a guess, and a guess too large hides wrong derivatives (the
    directional differences measure f's rounding there instead: NEAR)."""
    return _Rounding(tr).scale(of, wrt)


class _Rounding:
    """rounding_scale at one point, made when first asked (only a check whose comparison fails
    at rounding level, or the Taylor test, asks): for each output, the terms of every
    operation on the tape (one batched backward pass, whatever the inputs), and for each
    input, which operations follow it (one sweep over the tape for all of the point's inputs)."""

    def __init__(self, tr: Traced):
        self.tr = tr
        self.terms = {}  # of -> (per operation, its terms of each output element), or None
        self.bits, self.follow = {}, None  # input var -> bit; per operation, the inputs it follows
        self.counted = None  # the operations that round (made on first need: a passing check asks none)

    def scale(self, of: str, wrt: str) -> np.ndarray:
        y = np.asarray(self.tr.value(of))
        size = np.abs(y).astype(float)
        if self.counted is None:
            self.counted = [eq for eq in self.tr.tape.equations if _rounds(eq)]
        if of not in self.terms:
            self.terms[of] = _rounding_terms(self.tr, of, self.counted)
        terms = self.terms[of]
        if terms is None or not y.size:
            return size
        bit = self._bit(self.tr.tape.names[wrt])
        after = np.array([(f >> bit) & 1 for f in self.follow], dtype=bool)
        found = _root_sum_square(*(t[after] for t in terms)).reshape(y.shape)
        # (where a term is not finite, 0 * inf in an adjoint, the estimate says nothing: a nan floor
        # would leave every Taylor remainder uncounted, and the test passed whatever the derivative)
        return np.where(np.isfinite(found), np.maximum(size, found), size)

    def _bit(self, var: int) -> int:
        """var's bit in self.follow, which is made (for every input, and var) on first need."""
        if var not in self.bits:
            names = self.tr.tape.names
            for v in [names[i] for i in self.tr.tape.inputs] + [var]:
                self.bits.setdefault(v, len(self.bits))
            reach = {v: 1 << b for v, b in self.bits.items()}
            self.follow = []
            for eq in self.tr.tape.equations:  # (seeded's sweep, for all the inputs at once)
                found = 0
                for a in eq.args:
                    found |= reach.get(a, 0)
                if found:
                    reach[eq.out] = reach.get(eq.out, 0) | found
                if _rounds(eq):
                    self.follow.append(found)
        return self.bits[var]


def _rounds(eq) -> bool:
    """Whether eq counts in rounding_scale: a differentiable operation that is not exact."""
    return eq.prim.differentiable and eq.prim.name not in EXACT_OPERATIONS


def _rounding_terms(tr: Traced, of: str, counted: list) -> tuple | None:
    """For each operation in counted (the tape's, in order), its terms of rounding_scale for
    each (flat) element of the output, as (largest term, sum of (term / largest)^2): two arrays
    of shape (operations, elements) (see _root_sum_square); None where
    the passes would keep more than ROUNDING_WORK elements, or a value they read is not kept
    (check's traces keep every one)."""
    values, shapes = tr.builder.values, tr.builder.shapes
    inner = {id(eq) for eq in counted if not (eq.prim.elementwise or eq.prim.name in ROUNDS_ITS_RESULT)}
    read = {v for eq in counted for v in (eq.out, *(eq.args if id(eq) in inner else ()))}
    if not all(v in values for v in read):
        return None
    kept = sum(math.prod(shapes[eq.out]) for eq in counted) + \
        sum(math.prod(shapes[a]) for eq in counted if id(eq) in inner for a in eq.args)
    shape = np.shape(tr.value(of))
    m = math.prod(shape)
    if m * max(kept, 1) > ROUNDING_WORK:
        return None
    restored(tr, read)  # (those a trace with release freed: computed again, within the same budget)
    largest, squares = np.zeros((len(counted), m)), np.zeros((len(counted), m))
    rows = max(1, min(m, ROUNDING_BATCH // max(kept, 1)))
    with np.errstate(all="ignore"):
        for start in range(0, m, rows):
            elements = np.arange(start, min(start + rows, m))
            largest[:, elements], squares[:, elements] = _rounding_rows(tr, tr.tape.names[of], shape, counted,
                                                                        inner, elements)
    return largest, squares


def _rounding_rows(tr: Traced, out: int, shape: tuple, counted: list, inner: set, elements) -> tuple:
    """_rounding_terms for the output's flat elements given, in one batched backward pass (a row
    per element) and, for each operation with inner arithmetic, its own VJP of its adjoint."""
    values = tr.builder.values
    k = len(elements)
    seeds = np.zeros((k, math.prod(shape)))
    seeds[np.arange(k), elements] = 1.0
    batch = BatchedBuilder(tr.builder, k, what="a backward pass of f's rounding estimate")
    adjoints = backward(tr.builder, tr.tape.equations, {out: batch.dense(seeds.reshape((k,) + shape))},
                        [eq.out for eq in counted], eager=True, check=False, fold=VJP_FOLDS)
    largest, squares = np.zeros((len(counted), k)), np.zeros((len(counted), k))

    def terms(value, cotangent) -> list:
        if cotangent is None:
            return []
        return [(np.abs(np.asarray(value)) * np.abs(batch.rows(cotangent))).reshape(k, -1)]

    for i, eq in enumerate(counted):
        a = adjoints.get(eq.out)
        if a is None:
            continue
        found = terms(values[eq.out], a)
        if id(eq) in inner:  # (a backward-stable operation's operands: see rounding_scale)
            for arg, c in zip(eq.args, _operand_cotangents(tr, eq, a)):
                found += terms(values[arg], c)
        t = np.concatenate(found, axis=1)
        largest[i] = np.max(t, axis=1, initial=0.0)
        scaled = np.divide(t, largest[i][:, None], out=np.zeros(t.shape), where=largest[i][:, None] > 0)
        squares[i] = np.sum(scaled * scaled, axis=1)
    return largest, squares


def _root_sum_square(largest: np.ndarray, squares: np.ndarray) -> np.ndarray:
    """sqrt(sum of t^2) over the terms of the operations given (axis 0), from each one's largest
    term and its sum of (t / largest)^2, without overflow (terms of 1e160 square to inf)."""
    top = np.max(largest, axis=0, initial=0.0)
    with np.errstate(all="ignore"):
        ratio = np.divide(largest, top, out=np.zeros(largest.shape), where=top > 0)
        return top * np.sqrt(np.sum(ratio * ratio * squares, axis=0))


def _operand_cotangents(tr: Traced, eq, g) -> list:
    """eq's VJP of the cotangent g, operand by operand (None where its rule is None): each
    position on its own, as the backward pass would sum them (solve(A, A) reads A twice, and
    the two parts cancel in A's cotangent, while each operand rounds on its own)."""
    values, shapes = tr.builder.values, tr.builder.shapes
    head = (g, values[eq.out], *[values[a] for a in eq.args])
    found = []
    for i, a in enumerate(eq.args):
        rule = eq.prim.vjp_rule(i)
        c = None if rule is None else rule(*head, **eq.params)
        found.append(c if c is None or c.shape == shapes[a] else fit_to_shape(c, shapes[a]))
    return found


# ==========================================================================
# check
# ==========================================================================

class _Plan(NamedTuple):
    """How check checks each point: its options, once they are known to be sound."""

    method: str
    tol: tuple
    directions: int
    taylor: bool
    symbolic: bool
    max_steps: int
    sweep: bool = False
    #: the point's estimates at multiples of the default step (see _Steps), once it is traced
    steps: "_Steps | None" = None
    #: the point's estimates of f's rounding (see _Rounding), once it is traced
    rounding: "_Rounding | None" = None


#: Whether check traces with ``release`` (see :func:`restored`); its results are the same without
#: (tests/test_check_release.py compares the two).
RELEASE = True


def check(source, at=None, of=None, wrt=None, *, points: int = 0, seed: int = 0,
          method: str = "central", rtol: float | None = None, atol: float | None = None,
          directions: int = 0, taylor: bool = False, expect: dict | None = None,
          symbolic: bool = False, max_elements: int = DEFAULT_MAX_ELEMENTS,
          max_steps: int = DEFAULT_MAX_STEPS, label: str | None = None, sweep: bool = False,
          expect_name: str | None = None, point_errors: list | None = None):
    """Compare reverse mode with finite differences and with forward mode.

    Returns a Result (``command`` "check") whose ``results`` is a list of
    CheckResult, whose ``ok`` is True when all pass, and whose ``rtol`` and
    ``atol`` are the tolerances applied (by default, the method's
    checks.TOLERANCES).  ``expect`` is a stored grad/jacobian JSON object to
    compare reverse mode with as well; ``symbolic`` adds sympy's closed form,
    evaluated at the point, as a third oracle.  Each point runs the program
    (so each takes its own path); a finite-difference step that changes the
    path runs it again there (see evaluate_batch), and the result says so.
    ``expect`` is compared at the point it records ("at"), where it records one (its
    derivatives hold there only): a value given in ``at`` moves the finite-difference
    comparisons, not that one, and the result says so.  A stored null (grad
    --unconnected none) is a derivative with no path to the output: zero.  An
    expectation that compares nothing is an error; ``expect_name`` (its file) names it.
    ``sweep`` adds to each full-Jacobian result the finite-difference error over
    steps (:func:`gradcalc.sweep.attach`, in ``extra["sweep"]``).
    A user error at a random point (``points``) names the point and the values drawn
    there; given a list ``point_errors``, it is appended there as (point, error) instead
    of raised, and the other points are still checked (a usage error is raised still: it
    is no point's).
    """
    @quiet
    def run():
        tol = _tolerances(method, points, directions, seed, rtol, atol)
        check_limits(max_elements, max_steps)
        if label is not None and not isinstance(label, str):
            raise UsageError(f"{option('label')} takes a text, not {label!r:.60}", option="label")
        if expect is not None and not isinstance(expect, dict):
            raise UsageError(f"{option('expect')} takes a grad or jacobian result's JSON object (a dict), "
                             f"not {expect!r:.60}", option="expect")
        if sweep and directions:
            raise UsageError(f"{option('sweep')} follows one input element of the full Jacobian; it does not "
                             f"apply with {option('directions')}", option="sweep")
        plan = _Plan(method, tol, directions, taylor, symbolic, max_steps, sweep)
        program = parse(source)
        name = label or program.source.label
        rng = np.random.default_rng(seed)
        results = []
        # (traces free the arrays no derivative rule reads, as grad's do; check's other readers
        # of values ask for them again: see restored.  sympy reads every value.)
        limits = {"max_elements": max_elements, "max_steps": max_steps, "release": RELEASE and not symbolic}
        values = as_arrays(at)
        for p, point, tr in _points(program, values, points, rng, limits):
            try:
                tr = tr or trace(program, point, **limits)
                outs, wrts = _selected(tr, of, wrt)
                results += _lines(tr, _check_point(tr, name, p, outs, wrts, plan, rng))
            except GradcalcError as err:  # (a batch over max_elements, say): name the program
                err.located(program.source)
                if p == 0:
                    raise
                _name_the_point(err, p, point, values, points, seed)
                if point_errors is None or isinstance(err, UsageError):
                    raise
                point_errors.append((p, err))
        if expect is not None:
            recorded = expect_point(expect, expect_name)
            tr = trace(program, {**values, **recorded}, **limits)
            compared = _check_expect(tr, name, *_selected(tr, of, wrt), expect, tol, expect_name)
            for r in compared:
                r.notes += _moved_note(values, recorded)
            results += _lines(tr, compared)
        return check_result(results, tol)

    return run()


def _lines(tr: Traced, results: list) -> list:
    """The results, each with the line that defines its output."""
    for r in results:
        pos = to_pos(tr.tape.positions.get(r.of))
        r.line = pos.line if pos else None
    return results


def _selected(tr: Traced, of, wrt) -> tuple[list, list]:
    """(outs, wrts): the outputs and inputs a check compares."""
    outs = [select_output(tr, None)] if of is None else select_names(tr, of, "of", ())
    return outs, select_names(tr, wrt, "wrt", tr.tape.inputs)


def expect_words(expect_name: str | None = None) -> str:
    """How a message names an expectation: its file, else the option that gave it."""
    return f"expectation file '{expect_name}'" if expect_name else option("expect")


def _moved_note(values: dict, recorded: dict) -> list[str]:
    """A note for the expectation's results when the caller gave a value the expectation
    does not record: its derivatives hold at its own point, which is where they are compared."""
    moved = [k for k, v in values.items() if k in recorded and
             (np.shape(v) != np.shape(recorded[k]) or not np.array_equal(v, recorded[k], equal_nan=True))]
    if not moved:
        return []
    return [f"compared at the point the expectation records ({', '.join(moved)} as recorded, not as given); "
            "--update-expect records a new point"]


def expect_point(expect: dict, expect_name: str | None = None) -> dict:
    """The point a stored result was made at ("at", recorded by grad/jacobian JSON), if any."""
    at = expect.get("at", {})
    if not isinstance(at, dict):
        raise ValueError_(f"{expect_words(expect_name)}: \"at\" must map names to values, as gradcalc grad -f json "
                          "writes it", option="expect")
    try:
        return {k: array_from_json(v) for k, v in at.items()}
    except JSONNumberError:
        raise ValueError_(f"{expect_words(expect_name)}: \"at\" holds something that is not a number or a nested "
                          "list of numbers", option="expect") from None


def _tolerances(method, points, directions, seed, rtol, atol) -> tuple[float, float]:
    """The tolerances check applies, once its arguments are known to be sound."""
    _known_method(method)
    for opt, v in (("points", points), ("directions", directions), ("seed", seed)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise UsageError(f"{option(opt)} takes an integer, not {v!r:.60}", option=opt)
    if points < 0 or directions < 0:
        raise UsageError(f"{option('points')} and {option('directions')} must not be negative",
                         option="points" if points < 0 else "directions")
    if seed < 0:
        raise UsageError(f"{option('seed')} must be a non-negative integer, not {seed}", option="seed")
    return tolerance(TOLERANCES[method], rtol, atol)


def _points(program, values: dict, points: int, rng, limits: dict):
    """(number, values, traced) for the point at= gives (0, traced; left out when it lacks a
    value and ``points`` draws the rest) and ``points`` random points (1, 2, ..., traced None:
    the caller traces each, so that an error there is that point's).  Each point is traced on
    its own (each records its own path), with the limits max_elements and max_steps.  The
    random values are drawn first, as many as the points take together (at most max_elements),
    and each point is traced only when the caller asks for it: one point's tape at a time (a
    tape of a long loop can hold tens of MB)."""
    if points:
        inputs = [i.name for i in find_inputs(program)]
        if inputs and all(i in values for i in inputs):
            raise UsageError(f"{option('points')} draws random values for the inputs {option('at')} does "
                             f"not fix, and {option('at')} fixes every input",
                             hint=f"leave some inputs out of {option('at')}", option="points")
    first = []
    try:
        first.append((0, values, trace(program, values, **limits)))
    except GradcalcError as err:
        if points == 0 or "has no value" not in err.message:
            raise  # without points, every input needs a value
    drawn = _random_points(program, values, points, rng, limits) if points else []
    return itertools.chain(first, ((p, point, None) for p, point in enumerate(drawn, 1)))


def _name_the_point(err: GradcalcError, p: int, point: dict, given: dict, points: int, seed: int) -> None:
    """Add to err's message the random point it arose at and the values drawn there, so that
    it can be reproduced: '...; at random point 3 (--points 6 --seed 1), where x = -2.3'."""
    drawn = ", ".join(f"{k} = {_drawn_text(v)}" for k, v in point.items() if k not in given)
    err.message = (f"{err._message}; at random point {p} ({option('points')} {points} {option('seed')} {seed})"
                   + (f", where {drawn}" if drawn else ""))


#: A drawn array of more elements than this is shown by its first few and its size.
DRAWN_SHOWN = 4


def _drawn_text(v) -> str:
    """A drawn value as --at takes it back (full precision: repr of each float), or, when it
    is long, its first DRAWN_SHOWN elements and its shape."""
    a = np.asarray(v, float)
    if a.size > DRAWN_SHOWN:
        return f"[{', '.join(repr(float(e)) for e in a.ravel()[:DRAWN_SHOWN])}, …] (shape {a.shape})"
    return str(a.tolist())  # (Python's float repr: the shortest text that reads back the same float)


def _random_points(program, values, points: int, rng, limits: dict) -> list[dict]:
    """points random points: every input not fixed by at= drawn from a standard normal, in
    the shape a trace with sampled values finds."""
    sampled = {}

    def sample(name, shape):
        sampled[name] = rng.standard_normal(shape)
        return sampled[name]
    try:
        shapes = trace(program, values, sample=sample, **limits)
    except GradcalcError as err:  # (the trace that finds the inputs' shapes runs at random values too)
        drawn = ", ".join(f"{k} = {_drawn_text(v)}" for k, v in sampled.items())
        err.message = (f"{err._message}; while finding the shapes of the inputs {option('points')} draws, "
                       f"by a run at random values" + (f" ({drawn})" if drawn else ""))
        raise
    free = [(info.name, shapes.value(info.name).shape) for info in shapes.inputs if info.name not in values]
    drawn = points * sum(math.prod(shape) for _, shape in free)
    if drawn > limits["max_elements"]:
        raise LimitError(f"{option('points')} {points} would draw {drawn:,} random values, more than "
                         f"{option('max_elements')}={limits['max_elements']:,}", option="points",
                         hint=f"ask for fewer points, or raise {option('max_elements')}")
    return [{**values, **{name: rng.standard_normal(shape) for name, shape in free}} for _ in range(points)]


def _check_point(tr: Traced, name, p, outs, wrts, plan: _Plan, rng):
    facts = facts_on_tape(tr)
    if not plan.directions:
        _fd_within_work(tr, outs, wrts, plan.method, facts)
    closed = None
    if plan.symbolic and not plan.directions:
        from .symbolic import symbolic_jacobian
        closed = symbolic_jacobian(tr, outs, wrts, simplify=False)
    # (along directions, no Jacobian is formed: it would have out.size * in.size elements)
    rev = None if plan.directions else jacobian_blocks(tr, outs, wrts, "rev")
    fwd = None if plan.directions else _forward_probes(tr, outs, [w for w in wrts if w in tr.tape.inputs], rng)
    results = []
    together = {}
    for chunk in [] if plan.directions else _chunks(wrts):
        together.update(scalar_estimates(tr, outs, chunk, plan.method, facts))
    plan = plan._replace(rounding=_Rounding(tr))
    if together:
        plan = plan._replace(steps=_Steps(tr, outs, together, rev, plan, facts))
    for w in wrts:
        if plan.method == "complex":
            _require_analytic(tr, w)
        if plan.directions:
            found = _check_directions(tr, name, p, outs, w, plan, rng)
            if plan.taylor:
                for r in found:
                    _taylor(tr, r, rng, plan.max_steps, plan.rounding)
            results += found
            continue
        est = together.get(w) or fd_estimate(tr, outs, w, plan.method, max_steps=plan.max_steps, facts=facts)
        for o in outs:
            result = _check_block(tr, name, p, o, w, rev[o][w], est, plan,
                                  fwd.get(w) if fwd is not None else None,
                                  None if closed is None else closed[o][w], facts)
            if plan.taylor:
                _taylor(tr, result, rng, plan.max_steps, plan.rounding, _contracting(rev[o][w], tr.value(w).shape))
            if plan.sweep:  # (sweep19's: the error over steps, in extra["sweep"])
                from .sweep import attach
                attach(tr, result, plan.method, plan.tol, plan.max_steps, ad=rev[o][w])
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


def _check_block(tr: Traced, name, p, o, w, ad, est: FiniteDifferences, plan: _Plan, probes,
                 closed, facts: dict | None = None) -> CheckResult:
    """The check of d o / d w: reverse mode's block ad against the finite differences of est,
    and against forward mode along the random directions of probes and the closed form, if any
    (facts: see facts_on_tape)."""
    names = tr.tape.names
    fd, h, method, tol = est.jacobian[o], est.step, plan.method, plan.tol
    kinks, paths = kinks_near(tr, names[w], h, names[o], facts, per_element=True), path_notes(tr, est.flipped[o])
    notes = kinks + paths
    shape = tr.value(o).shape + tr.value(w).shape
    ad = np.zeros(shape) if ad is None else ad
    rev, view, told = ad, _plain, []
    symmetric = _symmetric_operand(tr, w, o)
    if symmetric is not None:  # (see _symmetrised)
        told = [_symmetric_note(tr, w, symmetric)]  # (it tells how the block is compared, explains nothing)
        notes.append(told[0])
        view = _symmetrised
        ad, fd = view(ad), view(fd)
        est = est._replace(error=est.error and {o: view(est.error[o])})
    ok, mabs, mrel, worst = compare(ad, fd, *tol)
    extra, coarse, later, slack = {}, False, None, None
    if not ok and method == "complex" and not (paths or kinks):
        slack = _complex_step_slack(tr, o, w, rev, ad, fd, h, tol, view, plan.max_steps)
        if slack is not None:
            ok, mabs, mrel, worst = compare(ad, fd, *tol, slack=slack)
            extra["rounding_allowance"] = float(np.max(slack, initial=0.0))
            notes.append(_complex_rounding_note(slack, ok))
    if not ok:
        extra.update(breach(ad, fd, worst, *tol, slack=slack))
        scale = _rounding_of(tr, o, w, plan)  # (made here, on a failure: a passing block pays nothing)
        rounding = _rounding_note(scale, tr.value(o), h, method, mabs)
        if rounding and not (paths or kinks):
            larger = _at_larger_steps(tr, o, w, ad, fd, h, plan, _doubtful(ad, fd, None, tol), view)
            if larger is not None:
                rounding = [_larger_steps_note(rounding[0], larger)]
                extra = {"default_step": float(np.max(h))}
                resolved = larger.converged or larger.allowance is not None
                if larger.allowance is not None:
                    extra["rounding_allowance"] = float(np.max(larger.allowance))
                if not larger.ok:
                    extra.update(breach(ad, larger.fd if resolved else fd, larger.worst, *tol,
                                        slack=larger.allowance))
                if resolved:  # (the estimates at the larger steps are the better reference)
                    fd, h = larger.fd, larger.step
                    ok, mabs, mrel, worst = larger.ok, larger.max_abs, larger.max_rel, larger.worst
        elif not (paths or kinks):
            # (another element's truncation error kept the block off the rounding route: each
            # element within its own rounding bound takes it alone, the others the searches below)
            split = _rounding_elements(ad, fd, scale, h, method, tol)
            if split is not None:
                settled, slack, later = split, None, None
                larger = _at_larger_steps(tr, o, w, ad, fd, h, plan, split, view)
                if larger is not None and (larger.converged or larger.allowance is not None):
                    with np.errstate(all="ignore"):
                        allowance = 0.0 if larger.allowance is None else larger.allowance
                        settled = split & (np.abs(ad - larger.fd) <= tol[1] + tol[0] * np.abs(larger.fd) + allowance)
                    if settled.any():
                        fd = np.where(settled, larger.fd, fd)  # (h stays the default step: the
                        extra = {"default_step": float(np.max(h))}  # searches below start from it)
                        if larger.allowance is not None:
                            slack = np.where(settled, larger.allowance, 0.0)
                            extra["rounding_allowance"] = float(np.max(slack))
                        ok, mabs, mrel, worst = compare(ad, fd, *tol, slack=slack)
                        if not ok:
                            extra.update(breach(ad, fd, worst, *tol, slack=slack))
                        later = _split_rounding_note(scale, tr.value(o), h, method, int(settled.sum()), larger)
        notes += rounding
        if not (ok or paths or rounding) and _coarse_step(tr.value(w), h, worst, method) and \
                not (kinks and _kinks_at_relative_steps(tr, w, o, method)):
            # (a kink, a changed path or rounding explains a failure better than a coarse step)
            again = _at_relative_steps(tr, o, w, ad, plan, view)
            searched = None
            if again is not None and not again.ok:
                # (the relative steps are hardly smaller where |x| is near 1: Richardson's 2^-10
                # is coarse from |x| < 0.98, and sin(100 x) at 0.5 failed at both steps; the steps
                # from the default one down past the relative one decide by their convergence)
                searched = _at_smaller_steps(tr, o, w, ad, fd, h, plan, _doubtful(ad, fd, None, tol), view,
                                             slack)
                searched = searched if searched is not None and searched.converged else None
            notes += _coarse_step_note(tr.value(w), h, again, worst, smaller=searched, method=method)
            if again is not None and again.ok:
                extra = {"default_step": float(np.max(h))}
                fd, h = again.fd, again.step
                ok, mabs, mrel, worst = again.ok, again.max_abs, again.max_rel, again.worst
            elif searched is not None:  # (the estimates at the smaller steps are the better reference)
                extra = {"default_step": float(np.max(h))}
                if slack is not None:
                    extra["rounding_allowance"] = float(np.max(slack))
                if not searched.ok:
                    extra.update(breach(ad, searched.fd, searched.worst, *tol, slack=slack))
                fd, h = searched.fd, searched.step
                ok, mabs, mrel, worst = searched.ok, searched.max_abs, searched.max_rel, searched.worst
            coarse = True
    # (a note that explains a mismatch, a kink, a changed path or rounding, or a coarse step keeps
    # the search off; the symmetric note does not: it left a wrong derivative that truncation
    # cancelled at the default step unchecked at half its step for every input reaching cholesky)
    explained = [n for n in notes if n not in told]
    doubtful = None
    if not (explained or coarse):
        undefined = _undefined_a_step_away(ad, fd) & _searchable(tr.value(o), h, fd.shape)
        doubtful = _doubtful(ad, fd, est.error and est.error[o], tol) | undefined
    if doubtful is not None and later is not None:  # (elements settled at larger steps stay settled)
        doubtful &= ~settled
    if doubtful is not None and doubtful.any():
        # (nothing explains a mismatch, or the estimate's own error could hide one: the step may
        # be too coarse for a function that varies on a unit scale, since it follows max(1, |x|))
        smaller = _at_smaller_steps(tr, o, w, ad, fd, h, plan, doubtful, view, slack)
        # (a pass at the default step stands unless the smaller steps converge and disagree)
        if smaller is not None and not (ok and (smaller.ok or not smaller.converged)):
            notes.append(_smaller_steps_note(h, smaller, undefined=bool((doubtful & undefined).any())))
            extra = {"default_step": float(np.max(h))}
            if slack is not None:
                extra["rounding_allowance"] = float(np.max(slack))
            if not smaller.ok:  # (the estimates at the smaller steps are the better reference)
                extra.update(breach(ad, smaller.fd, smaller.worst, *tol, slack=slack))
            fd, h = smaller.fd, smaller.step
            ok, mabs, mrel, worst = smaller.ok, smaller.max_abs, smaller.max_rel, smaller.worst
    if later is not None:
        notes.append(later)
    if probes is not None and not _agrees_with_forward(rev, probes, o, tr.value(w).ndim, extra,
                                                       lambda: _ad_noise(tr, o, w, probes[0], rev)):
        ok = False
        notes.append("reverse and forward mode disagree")
    if closed is not None and not _agrees_with_symbolic(ad, closed, shape, extra, notes):
        ok = False
        notes.append("automatic and symbolic derivatives disagree")
    if not np.isfinite(ad).all():
        ok, worst = fail_non_finite(ad, fd, ok, worst, tol, notes, extra)
        mabs, mrel = unmeasured_errors(ad, fd, mabs, mrel)
    elif not np.isfinite(fd).all():
        notes.append(NOT_FINITE_DIFFERENCES)
    if not ok:
        notes += stopped_notes(tr, w, o)
    return CheckResult(name, p, o, w, mabs, mrel, worst, method,
                       float(np.max(h)) if h.size else 0.0, ok, notes, extra)


def _complex_step_slack(tr: Traced, o: str, w: str, rev, ad, fd, h, tol, view, max_steps: int):
    """The rounding allowance of a complex-step comparison that failed, per element (None where
    the mismatch is past AD_NOISE_REACH times the tolerance at an element that fails, rev is None
    or a quotient at another step is not finite).

    The complex step's quotient has no difference's rounding, but it is computed as a derivative
    is: its imaginary part carries eps times the slopes of every intermediate, and where those
    cancel ((x + 1)^2 - x^2 at 1e5: slopes of 2e5 for a derivative of 2), or a long loop rounds
    at every step, both the automatic derivative and the quotient are that far off, beyond rtol
    1e-12 of a right derivative.  Each side's rounding is measured as the other methods measure
    theirs, by passes that differ by rounding alone: the automatic side's as _agrees_with_forward
    does (_jacobian_noise: the reverse pass on rescaled cotangents, linear in them, a wrong rule
    too), the quotient's on every other of NOISE_STEPS (it has no truncation to fit at a step of
    1e-20: the quotients differ by rounding alone, and a wrong derivative does not move them);
    NOISE_MARGIN times each is allowed.  Both are needed: reverse mode can sum a cancelling
    element's terms exactly (their slopes folded before the cotangent multiplies them), where
    the quotient rounds by 4e-13."""
    if rev is None or not _within_reach(ad, fd, tol, 0.0):
        return None
    failing = _doubtful(ad, fd, None, tol)  # (the others pass without an allowance: none measured)
    columns = _failing_columns(failing, tr.value(w).size, view)
    quotients = [fd]
    for c in NOISE_STEPS[::2]:
        est = fd_estimate(tr, [o], w, "complex", c * h, max_steps=max_steps, columns=columns)
        quotients.append(view(est.jacobian[o]))
    quotients = np.stack(quotients)
    if not np.isfinite(quotients[:, failing]).all():
        return None
    with np.errstate(all="ignore"):
        own = np.where(failing, math.sqrt(2.0) * np.std(quotients, axis=0, ddof=1), 0.0)
    slack = NOISE_MARGIN * (view(_jacobian_noise(tr, o, w, rev)) + own)
    if compare(ad, fd, *tol, slack=slack)[0]:
        return slack
    inputs = _input_rounding(tr, o, w, (ad, fd), _block_at(o, w, h, view, max_steps), max_steps)
    return slack if inputs is None else slack + NOISE_MARGIN * inputs


def _input_rounding(tr: Traced, o: str, w: str, first: tuple, sides, max_steps: int):
    """The rounding of the forward pass in the two sides of a comparison (an automatic derivative
    and the complex step's quotients, or reverse and forward mode's products), in _measured's
    units (sqrt(2) standard deviations of each side, summed): both computed again by
    sides(traced) (each an array, or None where a step takes another path) at
    INPUT_ROUNDING_DRAWS points whose inputs differ from tr's by an ulp or none, element by
    element (a fixed draw; w, and the inputs that are not integers: a count or an index stays
    as it is), first being tr's own.  None where a point takes another path, fails, or gives a
    value that is not finite.

    The rescaled seeds of _jacobian_noise measure the derivative passes' rounding, linear in
    their seeds, but not the forward pass's, which both sides share: solve(A, b) with A of
    condition 1e5 rounds A's factorisation, and with it the derivative, by cond x eps (1e-11 of
    it) in both modes and in the complex step's own factorisation, ten times rtol 1e-12.  Inputs
    an ulp apart round anew there, and move the exact derivative by no more than its condition
    allows; a wrong rule's error moves with neither."""
    rng = np.random.default_rng(INPUT_ROUNDING_SEED)
    given = {i.name: tr.value(i.name) for i in tr.inputs}
    moved = [k for k, x in given.items() if k == w or not np.array_equal(x, np.round(x))]
    path = [eq.prim for eq in tr.tape.equations]
    found = [first]
    for _ in range(INPUT_ROUNDING_DRAWS):
        at = dict(given)
        for k in moved:
            x = given[k]
            at[k] = x * (1.0 + stencil.EPS * rng.integers(-INPUT_ROUNDING_ULPS, INPUT_ROUNDING_ULPS + 1, np.shape(x)))
        again = _run_at(tr, at, max_steps)
        if again is None or o not in again.tape.names or [eq.prim for eq in again.tape.equations] != path:
            return None
        both = sides(again)
        if both is None:
            return None
        found.append(both)
    drawn = [np.stack(side) for side in zip(*found)]
    if not all(np.isfinite(side).all() for side in drawn):
        return None
    with np.errstate(all="ignore"):
        return math.sqrt(2.0) * sum(np.std(side, axis=0, ddof=1) for side in drawn)


def _block_at(o: str, w: str, h, view, max_steps: int):
    """sides for _input_rounding of a full check: reverse mode's block and the complex step's."""
    def sides(tr: Traced):
        yshape, shape = tr.value(o).shape, tr.value(o).shape + tr.value(w).shape
        r = _cotangents(tr, o, w, np.eye(max(1, tr.value(o).size)).reshape((-1,) + yshape))
        est = fd_estimate(tr, [o], w, "complex", h, max_steps=max_steps)
        if est.flipped[o]:
            return None
        return view(np.zeros(shape) if r is None else r.reshape(shape)), view(est.jacobian[o])
    return sides


def _directions_at(o: str, w: str, v: np.ndarray, step: float, max_steps: int):
    """sides for _input_rounding along directions: forward mode's J v and the complex step's."""
    def sides(tr: Traced):
        (j,) = _tangents(tr, w, [o], v)
        ((quotients, _),), flipped = _differences_at(tr, w, [o], v, "complex", [step], max_steps)
        if flipped[0]:
            return None
        return np.zeros(quotients[0].shape) if j is None else j, quotients[0]
    return sides


def _products_at(o: str, w: str, u: np.ndarray, v: np.ndarray):
    """sides for _input_rounding of the dot-product test: <u, J v> and <J^T u, v> per direction."""
    k = len(v)

    def sides(tr: Traced):
        (j,) = _tangents(tr, w, [o], v)
        jtu = _cotangents(tr, o, w, u)
        lhs = np.zeros(k) if j is None else np.sum((u * j).reshape(k, -1), axis=1)
        rhs = np.zeros(k) if jtu is None else np.sum((jtu * v).reshape(k, -1), axis=1)
        return lhs, rhs
    return sides


def _within_reach(a, b, tol, slack) -> bool:
    """Whether a and b disagree by no more than AD_NOISE_REACH times their allowance everywhere:
    a disagreement the size of rounding, worth measuring."""
    rtol, atol = tol
    with np.errstate(all="ignore"):
        gap = np.abs(a - b)
        allowed = atol + rtol * np.abs(b) + slack
        return bool(((gap <= AD_NOISE_REACH * allowed) | (gap <= allowed)).all())


#: How many points _input_rounding draws, how many ulps each input moves at most (one: the exact
#: derivative moves with them, by its condition, beside the rounding), and its seed.
INPUT_ROUNDING_DRAWS = 8
INPUT_ROUNDING_ULPS = 1
INPUT_ROUNDING_SEED = 20261127


def _complex_rounding_note(slack, ok: bool) -> str:
    verdict = "which the mismatch is within" if ok else "and the mismatch is beyond it"
    return (f"the automatic derivative and the complex step round by up to {float(np.max(slack, initial=0.0)):.2g} "
            f"here (measured: the derivative's intermediates can be far larger than it), {verdict}")


def _symmetric_operand(tr: Traced, w: str, o: str):
    """The first equation on the way from w to o whose primitive reads one triangle of a symmetric
    operand (eigh, cholesky: primitive fact symmetric_operand), when w is a square matrix (or a
    stack of them), else None."""
    x = tr.value(w)
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        return None
    needed, _ = _upstream(tr, tr.tape.names[o])
    live = {tr.tape.names[w]}
    for eq in tr.tape.equations:
        if any(a in live for a in eq.args):
            live.add(eq.out)
            if eq.prim.symmetric_operand and eq.out in needed:
                return eq
    return None


def _plain(jacobian):
    return jacobian


def _symmetrised(jacobian):
    """The Jacobian along the symmetric directions E_ij + E_ji of the input's last two axes (E_ii
    on the diagonal): J_ij + J_ji off it.  eigh and cholesky read one triangle, so finite
    differences of the other are 0, while their derivative is the symmetric one (SPEC §2.5, as
    JAX's): a symmetric perturbation is the one both define alike, and a gradient wrong in its
    symmetric part still disagrees."""
    if jacobian is None:
        return None
    n = jacobian.shape[-1]
    return np.where(np.eye(n, dtype=bool), jacobian, jacobian + np.swapaxes(jacobian, -1, -2))


def _symmetric_part(v: np.ndarray) -> np.ndarray:
    """Directions (of matrices, in the last two axes) made symmetric: eigh and cholesky read one
    triangle, and along a symmetric direction their finite differences and their (symmetric)
    derivative agree, as along the full check's E_ij + E_ji (see _symmetrised)."""
    return (v + np.swapaxes(v, -1, -2)) / 2


def _symmetric_note(tr: Traced, w: str, eq) -> str:
    pos = eq.pos
    where = f" (line {pos.line}, column {pos.col})" if pos else ""
    return (f"'{w}' reaches '{tr.builder.op_name(eq.prim, eq.loc)}'{where}, which reads one triangle of "
            "a symmetric matrix while its derivative treats the matrix as symmetric: compared along "
            "symmetric directions (E_ij + E_ji), which check the gradient's symmetric part")


def _agrees_with_forward(ad, probes, o, nw: int, extra: dict, remeasure=None) -> bool:
    """Reverse mode's block times the probes' directions against forward mode along them.
    Where they disagree by less than AD_NOISE_REACH times the allowance, remeasure() (see
    _ad_noise) measures both modes' rounding again, on more scales, and decides."""
    v, jv, noise = probes
    rev_v = _along(v, ad, nw)
    jv_o = np.zeros(rev_v.shape) if jv[o] is None else jv[o]
    # (both modes sum the same terms in other orders: where those cancel, as 1/x terms of sin(x)/x
    # near 0 do, each rounds by eps times the terms, which the measured noise shows)
    slack = 0.0 if noise[o] is None else NOISE_MARGIN * noise[o]
    ok, fabs, _, _ = compare(rev_v, jv_o, *AD_TOLERANCE, slack=slack)
    if not ok:
        # (rtol is relative to the terms of J v, sum_i |J_i v_i|, not to J v alone: a solve with
        # A of condition 1e6 rounds its result by cond eps |x| normwise, in both modes otherwise
        # (A's factorisation, A^T's), which the rescaled seeds do not show; J v along one direction
        # is 100 times smaller than along another, and its rev and fwd differed by 1e-10 of it)
        slack = slack + AD_TOLERANCE[0] * _along(np.abs(v), np.abs(ad), nw)
        ok = compare(rev_v, jv_o, *AD_TOLERANCE, slack=slack)[0]
    if not ok and jv[o] is not None and remeasure is not None:
        rtol, atol = AD_TOLERANCE
        with np.errstate(all="ignore"):
            near = np.abs(rev_v - jv_o) <= AD_NOISE_REACH * (atol + rtol * np.abs(jv_o) + slack)
        if near.all():
            slack = np.maximum(slack, NOISE_MARGIN * remeasure())
            ok = compare(rev_v, jv_o, *AD_TOLERANCE, slack=slack)[0]
    extra["rev_fwd_max_abs_err"] = fabs
    return ok


def _along(v: np.ndarray, jacobian: np.ndarray, nw: int) -> np.ndarray:
    """The Jacobian (output axes, then the input's nw axes) times each of the directions v."""
    return np.tensordot(v, jacobian, axes=(tuple(range(1, nw + 1)), tuple(range(jacobian.ndim - nw, jacobian.ndim))))


#: How far past its allowance (atol + rtol |J v| + NOISE_MARGIN times the noise of two rescaled
#: passes) reverse mode may disagree with forward mode and still have both modes' rounding
#: measured again (see _ad_noise): a rounding-sized disagreement.  A wrong rule 1e-7 off, against
#: rtol 1e-10, is often within it: it is measured too, and, linear as the noise measure is, still fails.
AD_NOISE_REACH = 1e3


def _ad_noise(tr: Traced, o: str, w: str, v: np.ndarray, rev: np.ndarray) -> np.ndarray:
    """The rounding of reverse mode's Jacobian of o in w times the directions v against forward
    mode's J v, per direction and element of o, in _measured's units (|a - b| of two draws:
    sqrt(2) standard deviations of the difference).

    _measured's two rescaled passes are one draw each, and both can fall far below the pass's
    rounding (sum(sin(x)/x) at 100 points within 1e-3 of 0, whose terms of 1/x cancel: 4 seeds of
    300 failed a right gradient, by 2.3e-11), and reverse mode's own rounding was not measured.
    Here forward mode runs on the directions scaled by each of NOISE_STEPS, reverse mode on the
    cotangents of its Jacobian scaled by every other one: each pass is linear in its seed (a
    wrong rule too), so f(c s) / c differ by rounding alone, and the standard deviation of each
    mode's results (with the first) measures its rounding; a wrong derivative does not widen it."""
    nw = tr.value(w).ndim
    forward_ = _rescaled_tangents(tr, o, w, v, NOISE_STEPS)
    reverse = [_along(v, rev, nw)] + [_along(v, r, nw) for r in _rescaled_jacobians(tr, o, w, NOISE_STEPS[::2])]
    spread = np.var(forward_, axis=0, ddof=1) + np.var(np.stack(reverse), axis=0, ddof=1)
    return math.sqrt(2.0) * np.sqrt(spread)


def _rescaled_tangents(tr: Traced, o: str, w: str, v: np.ndarray, scales) -> np.ndarray:
    """Forward mode's J v of o along the directions v scaled by each of scales, divided by it:
    shape (len(scales), k) + o.shape, one batched pass (zeros where o does not depend on w)."""
    k = len(v)
    found = _tangents(tr, w, [o], np.concatenate([c * v for c in scales]))[0]
    if found is None:
        return np.zeros((len(scales), k) + tr.value(o).shape)
    return np.stack([found[i * k:(i + 1) * k] / c for i, c in enumerate(scales)])


def _rescaled_jacobians(tr: Traced, o: str, w: str, scales):
    """Reverse mode's Jacobian of o in w (o's axes, then w's) from the cotangents of the identity
    scaled by each of scales, divided by it, yielded one at a time (zeros where o does not depend
    on w): the cotangents of as many scales as FD_BATCH_ELEMENTS allows in one backward pass (a
    pass per scale cost 16 passes over a long loop's tape: 6 s of a check of 4,000 inputs)."""
    yshape, xshape = tr.value(o).shape, tr.value(w).shape
    m = max(1, int(np.prod(yshape, dtype=int)))
    eye = np.eye(m).reshape((m,) + yshape)
    width = widest_value(tr)  # (a row's largest value)
    per_pass = max(1, FD_BATCH_ELEMENTS // (m * max(width, 1)))
    for start in range(0, len(scales), per_pass):
        group = scales[start:start + per_pass]
        r = _cotangents(tr, o, w, np.concatenate([c * eye for c in group]))
        for k, c in enumerate(group):
            yield np.zeros(yshape + xshape) if r is None else r[k * m:(k + 1) * m].reshape(yshape + xshape) / c


def _complex_directions_noise(tr: Traced, o: str, w: str, v: np.ndarray, j: np.ndarray, d: np.ndarray,
                              step: float, slack, tol, max_steps: int):
    """Per direction, the rounding of forward mode's J v of o (j) along the directions v and of
    the complex step's quotients d, in _measured's units, each the largest over o's elements
    (as Directional.noise: rounding is f's along any unit direction), summed: the standard
    deviation of j and the passes on v scaled by each of NOISE_STEPS, and of d and the quotients
    at every other of NOISE_STEPS times step (see _complex_step_slack).  None where J v and d
    disagree by more than AD_NOISE_REACH times their allowance (tol, and slack) at an element
    that fails, a quotient is not finite or a step takes another path."""
    if not _within_reach(j, d, tol, slack):
        return None
    k = len(v)
    tangents = np.concatenate([j[None], _rescaled_tangents(tr, o, w, v, NOISE_STEPS)])
    ((quotients, _),), flipped = _differences_at(tr, w, [o], v, "complex", [c * step for c in NOISE_STEPS[::2]],
                                                 max_steps)
    quotients = np.stack([d] + quotients)
    if flipped[0] or not np.isfinite(quotients).all():
        return None
    with np.errstate(all="ignore"):
        sides = [np.std(found, axis=0, ddof=1).reshape(k, -1) for found in (tangents, quotients)]
    return math.sqrt(2.0) * sum(np.max(side, axis=1, initial=0.0) for side in sides)


def _jacobian_noise(tr: Traced, o: str, w: str, rev: np.ndarray) -> np.ndarray:
    """The rounding of reverse mode's Jacobian rev of o in w, per element, in _measured's units
    (sqrt(2) standard deviations): the standard deviation of rev and of the Jacobians from its
    cotangents scaled by each of NOISE_STEPS (see _ad_noise: each pass is linear in its seed, a
    wrong rule too, so they differ by rounding alone).  Deviations from rev are accumulated, so
    that no more than two Jacobians are held besides it."""
    total = np.zeros(np.shape(rev))
    squares = np.zeros(np.shape(rev))
    for r in _rescaled_jacobians(tr, o, w, NOISE_STEPS):
        with np.errstate(all="ignore"):
            d = r - rev
        total += d
        squares += d * d
    n = len(NOISE_STEPS) + 1  # (rev itself: a deviation of 0)
    with np.errstate(all="ignore"):
        var = np.maximum(squares - total * total / n, 0.0) / (n - 1)
    return math.sqrt(2.0) * np.sqrt(var)


def _agrees_with_symbolic(ad, closed: dict, shape, extra: dict, notes: list) -> bool:
    """Reverse mode's block against sympy's closed form, where that is finite."""
    sv = np.asarray(closed["value"], dtype=float).reshape(shape)
    finite = np.isfinite(sv)
    ok, sabs, _, _ = compare(np.where(finite, ad, 0.0), np.where(finite, sv, 0.0), *SYMBOLIC_TOLERANCE)
    extra["symbolic_max_abs_err"] = sabs
    if not finite.all():
        notes.append("the closed form is singular here (gradcalc pins a value)")
    return ok


def _rounding_of(tr: Traced, o: str, w: str, plan: _Plan) -> np.ndarray:
    """f's rounding in units of eps, per element of o (see rounding_scale), from the point's
    estimates where the plan has them."""
    return rounding_scale(tr, o, w) if plan.rounding is None else plan.rounding.scale(o, w)


def _rounding_words(scale, y) -> str:
    """How a note names f's rounding scale (rounding_scale's): |f| where nothing else adds to it,
    else the scale, with |f| and whether larger intermediates cancel (a scale past twice |f|)."""
    size, value = float(np.max(scale)), float(np.max(np.abs(y)))
    if size <= value:
        return f"|f| up to {size:.3g}"
    cancel = ", and larger intermediates cancel in it" if size > 2 * value else ""
    return f"f, whose evaluation rounds by about eps x {size:.3g} (|f| up to {value:.3g}{cancel}),"


def _rounding_note(scale, y, h, method: str, mismatch: float) -> list:
    """A note when a mismatch is no larger than the rounding error of the finite differences
    themselves (about eps S / h, S f's rounding scale, rounding_scale's: |f| or more where
    larger intermediates cancel; sum(x) + 1e17 leaves differences of 16 over a step of
    1e-5): then they cannot tell a right derivative from a wrong one."""
    if method not in stencil.ROUNDING or not np.size(y) or not np.size(h):
        return []
    size = float(np.max(scale))
    step = float(np.min(h))
    if not (math.isfinite(size) and step > 0 and math.isfinite(mismatch)):
        return []
    noise = stencil.ROUNDING[method] * stencil.EPS * size / step
    if mismatch > 4 * noise:
        return []
    return [f"finite differences are at their rounding limit here: {_rounding_words(scale, y)} over a step of "
            f"{step:.3g} leaves about {noise:.2g} of rounding error in each difference quotient, as much "
            "as the mismatch (try --method complex for analytic programs)"]


def _rounding_elements(ad, fd, scale, h, method: str, tol) -> np.ndarray | None:
    """The failing elements whose own mismatch is within the rounding of the differences (the
    bound of _rounding_note, at each element's step), where the block's largest mismatch is not
    (another element's truncation error): each of them takes the rounding route alone, so that a
    large derivative's truncation does not send a small one's rounding to smaller steps, where it
    only grows (an MLP's loss of 1e7: 'do not converge (spread 0.0033)').  None where there is none.
    scale: f's rounding scale (see rounding_scale)."""
    if method not in stencil.ROUNDING or not np.size(scale) or not np.size(h):
        return None
    size = float(np.max(scale))
    if not math.isfinite(size):
        return None
    with np.errstate(all="ignore"):
        noise = stencil.ROUNDING[method] * stencil.EPS * size / np.broadcast_to(h, np.shape(fd))
        within = _doubtful(ad, fd, None, tol) & (np.abs(ad - fd) <= 4 * noise)
    return within if within.any() else None


def _split_rounding_note(scale, y, h, method: str, count: int, larger: "_Smaller") -> str:
    """What the rounding route found for the elements that took it alone (see _rounding_elements)."""
    size = float(np.max(scale))
    step = float(np.min(h))
    noise = stencil.ROUNDING[method] * stencil.EPS * size / step
    how = ("converge (within {:.2g})".format(larger.spread) if larger.allowance is None else
           f"spread by {larger.spread:.2g} at best and are compared allowing that spread")
    return (f"finite differences are at their rounding limit at {count} element{'' if count == 1 else 's'} "
            f"here ({_rounding_words(scale, y)} over a step of {step:.3g} leaves about {noise:.2g} of rounding "
            f"error in each difference quotient): at steps up to {float(np.max(larger.step)):.3g} their "
            f"differences {how} and agree with the automatic derivative")


#: A step larger than this fraction of |x| is coarse for a function that changes on the scale
#: of x (1/x, log x, sqrt x near 0): central differences err by about (h/x)^2, 1e-6 at 1e-3.
COARSE_STEP = 1e-3
#: The same for the complex step, whose error is about (h/x)^2 too, held to rtol 1e-12: its
#: step of 1e-20 is coarse only beside |x| below 1e-13 (log(x) at 1e-25 failed by 1e5x).
COMPLEX_COARSE_STEP = 1e-7


def _coarse_step(x: np.ndarray, h: np.ndarray, worst: list, method: str) -> bool:
    """Whether the step at the worst element is not small beside |x| there: the default step
    follows max(1, |x|), so below |x| = 1 it stays put while x shrinks, and a correct derivative
    of 1/x at 1e-3 fails by 6e-5 at it."""
    if not h.size:
        return False
    at = tuple(worst[len(worst) - x.ndim:]) if x.ndim else ()
    xi = abs(float(x[at]))
    # (at 0 no step is relative to |x|; from 1 up the relative step is the default one: richardson's
    # eps^(1/5) |x| can exceed 1e-3 |x| there, and the halved steps of _at_smaller_steps apply)
    return 0 < xi < 1 and float(h[at]) > (COMPLEX_COARSE_STEP if method == "complex" else COARSE_STEP) * xi


def _kinks_at_relative_steps(tr: Traced, w: str, o: str, method: str) -> bool:
    """Whether steps relative to |x| still reach a kink: the default step can straddle one that
    lies within it (norm's at 0, from x = [1e-200, 3e-200]) where steps relative to |x| do not."""
    names = tr.tape.names
    return bool(kinks_near(tr, names[w], stencil.relative_step(tr.value(w), method), names[o], per_element=True))


class _Again(NamedTuple):
    """The comparison made again at steps relative to |x| (see _at_relative_steps)."""

    ok: bool
    max_abs: float
    max_rel: float
    worst: list
    fd: np.ndarray
    step: np.ndarray


def _at_relative_steps(tr: Traced, o: str, w: str, ad, plan: _Plan, view=_plain) -> _Again | None:
    """The comparison made again with steps that follow |x| where it is below 1 (see
    stencil.relative_step), or None when a step there takes another path (the differences
    would mix two branches).  view is how a Jacobian is compared, as at the default step (see
    _symmetrised: ad is already seen through it, and the differences must be too, or an input
    that reaches cholesky always disagrees here)."""
    h = stencil.relative_step(tr.value(w), plan.method)
    est = fd_estimate(tr, [o], w, plan.method, step=h, max_steps=plan.max_steps)
    if est.flipped[o]:
        return None
    fd = view(est.jacobian[o])
    return _Again(*compare(ad, fd, *plan.tol), fd, est.step)


def _coarse_step_note(x: np.ndarray, h: np.ndarray, again: _Again | None, worst: list,
                      directions: bool = False, smaller: "_Smaller | None" = None, method: str = "central") -> list:
    """What the comparison at steps relative to |x| found, said at the default step's worst
    element (h: the default steps; along directions, at the smallest non-zero |x_i|); and, where
    they disagree too, what the halved steps that converged found (smaller: see _at_smaller_steps)."""
    at = tuple(worst[len(worst) - x.ndim:]) if x.ndim else ()
    xi, hi = abs(float(x[at])), float(h[at])
    coarse = f"the default step {hi:.3g} is not small beside |x| = {xi:.3g} (it follows max(1, |x|))"
    if again is not None and again.ok:
        return [f"{coarse}: compared at steps relative to |x| instead (up to {float(np.max(again.step)):.3g}), "
                "where the differences agree"]
    # (where the worst disagreement moved to another element, that one is named: the element
    # near 0 may agree there, and the mismatch be elsewhere)
    moved = again is not None and not directions and list(again.worst) != list(worst)
    at_worst = f", worst at [{', '.join(map(str, again.worst))}]" if moved else ""
    found = "" if again is None else f"; at steps relative to |x| they disagree too (rel err {again.max_rel:.3g}{at_worst})"
    if smaller is not None and smaller.converged:
        down = f"at steps down to {float(np.min(smaller.step)):.3g} the differences converge (within {smaller.spread:.2g})"
        return [f"{coarse}{found}; {down} " + ("to the automatic derivative" if smaller.ok else
                                               f"and still disagree (rel err {smaller.max_rel:.3g}); --sweep "
                                               "shows the error over steps")]
    sweep = "--sweep (without --directions)" if directions else "--sweep"
    complex_ = "" if method == "complex" else ", --method complex (analytic programs) takes no difference"
    return [f"{coarse}{found}: a function that changes on a scale smaller than the step (1/x or log(x) "
            f"near 0, sin(1e6 x)) leaves a large truncation error; {sweep} shows the error at smaller "
            f"steps{complex_}"]


#: How many times a failing comparison may halve the default step to see whether the finite
#: differences converge.  It stops once every element has converged well within the tolerance,
#: or rounding alone exceeds it, which bounds the search by the function, not by its input: a
#: bound of 12 halvings plus log2 max(1, |x|) failed right derivatives of functions that change
#: on a scale far below the step (sin(1e6 x) at 0.0013, exp(-t / 1e-7) at 0: 19 halvings).
REFINE_MAX_HALVINGS = 40
#: Along --directions, the halved steps decide only where the relative step is within this
#: many halvings of the default one (see _direction_result's retry).
REFINE_HALVINGS = 12


class _Smaller(NamedTuple):
    """The comparison made again at the best of the halved steps (see _at_smaller_steps)."""

    ok: bool
    max_abs: float
    max_rel: float
    worst: list
    fd: np.ndarray  # the estimate per element (the default step's where that agreed)
    step: np.ndarray  # the step of each element's estimate (the Jacobian's shape)
    spread: float  # the largest disagreement of the estimates around it (over the elements compared)
    converged: bool  # whether that spread is within the tolerance at every element compared
    #: the spread allowed besides the tolerance per element (see _resolution), else None
    allowance: np.ndarray | None = None


def _doubtful(ad, fd, error, tol) -> np.ndarray:
    """The elements the default step cannot decide: those that fail, and those whose estimated
    error (where one was taken) exceeds half the tolerance, so that it could hide a wrong
    derivative's error as large as the tolerance; among finite ones (a non-finite derivative
    or difference is reported as such: smaller steps do not mend it)."""
    rtol, atol = tol
    with np.errstate(all="ignore"):
        allowed = atol + rtol * np.abs(fd)
        failing = ~(np.abs(ad - fd) <= allowed)
        if error is not None:
            failing |= error > allowed / 2
    return failing & np.isfinite(ad) & np.isfinite(fd)


def _undefined_a_step_away(ad, fd) -> np.ndarray:
    """The elements whose finite differences are not finite where the derivative is: a step
    that leaves the function's domain (asin at 0.9999999, log(x - 1) at 1.000001: the default
    step of 7.6e-6 reaches past the edge), which smaller steps can mend."""
    return np.isfinite(ad) & ~np.isfinite(fd)


def _searchable(y, h, shape: tuple) -> np.ndarray:
    """Where, in a Jacobian block of the given shape, smaller steps can mend differences that are
    not finite: not where the output at the point is not finite, nor where the step is (an
    input of inf: its steps, inf, halve to inf)."""
    y = np.asarray(y)
    return np.isfinite(np.broadcast_to(h, shape)) & np.isfinite(y).reshape(y.shape + (1,) * (len(shape) - y.ndim))


def _at_smaller_steps(tr: Traced, o: str, w: str, ad, fd, h, plan: _Plan, failing,
                      view=_plain, slack=None) -> _Smaller | None:
    """The comparison made again, where the default step's failed, at the best of the steps
    h / 2^k, k up to REFINE_MAX_HALVINGS (see _halved), or None (the complex step, or a step
    that takes another path: the differences would mix two branches), for the elements failing
    (see _doubtful).  view is how a Jacobian is compared (see _symmetrised)."""
    if plan.method not in stencil.ROUNDING or not np.any(failing):
        return None
    size = _rounding_of(tr, o, w, plan).reshape(np.shape(tr.value(o)) + (1,) * np.ndim(h))

    columns = _failing_columns(failing, tr.value(w).size, view)  # (the others' estimates go unread)

    def at_step(k: int):
        est = _estimate_at(tr, o, w, plan, h, -k, columns)
        return None if est.flipped[o] else (view(est.jacobian[o]), np.broadcast_to(est.step, fd.shape))

    return _halved(ad, fd, np.broadcast_to(h, fd.shape), at_step,
                   lambda step: stencil.ROUNDING[plan.method] * stencil.EPS * size / step,
                   failing, plan.tol, REFINE_MAX_HALVINGS, slack=0.0 if slack is None else slack)


#: The largest spread of finite differences, as a fraction of the derivative's scale, within
#: which check still decides (see _resolution); sweep's WRONG_FRACTION: a right derivative's
#: differences come within 1e-6 of its scale even where |f| is a million times |f'| x.
RESOLVED_FRACTION = 1e-5


def _at_larger_steps(tr: Traced, o: str, w: str, ad, fd, h, plan: _Plan, failing,
                     view=_plain) -> _Smaller | None:
    """The comparison made again, where the default step's failed at the rounding limit of the
    differences (see _rounding_note), at the best of the steps h * 2^k (see _halved), for the
    elements failing; None when one of the first two larger steps takes another path.

    The rounding error of a difference quotient is about eps S / h, S f's rounding scale (|f|,
    or more where larger intermediates cancel: see rounding_scale), and S is the whole
    output's: a sum of n terms (sum(a*a) over arange(2000)*0.001, |f| = 2.7e3) carries it into the
    derivative of each term, whose own size does not grow with n, so at the default step it
    outgrows rtol |d| for the small terms.  Doubling the step halves that error while the
    truncation error grows as h^order: the estimates converge where some step has both small,
    and the tolerance stays the user's.  The steps double until rounding (ROUNDING eps S / h)
    is below a sixteenth of the smallest failing tolerance, plus two for the last estimate's
    neighbours; never more than REFINE_MAX_HALVINGS."""
    if plan.method not in stencil.ROUNDING or not failing.any():
        return None
    size = _rounding_of(tr, o, w, plan).reshape(np.shape(tr.value(o)) + (1,) * np.ndim(h))
    rounding = lambda step: stencil.ROUNDING[plan.method] * stencil.EPS * size / step  # noqa: E731
    with np.errstate(all="ignore"):
        ratio = np.broadcast_to(rounding(h), fd.shape) / (plan.tol[1] + plan.tol[0] * np.abs(fd))
    worst = 16.0 * float(np.max(ratio[failing]))
    doublings = REFINE_MAX_HALVINGS if not worst < 2.0 ** REFINE_MAX_HALVINGS else 2 + math.ceil(math.log2(max(worst, 1.0)))

    columns = _failing_columns(failing, tr.value(w).size, view)  # (the others' estimates go unread)

    def at_step(k: int):
        est = _estimate_at(tr, o, w, plan, h, k, columns)
        return None if est.flipped[o] else (view(est.jacobian[o]), np.broadcast_to(est.step, fd.shape))

    return _halved(ad, fd, np.broadcast_to(h, fd.shape), at_step, rounding, failing, plan.tol,
                   min(REFINE_MAX_HALVINGS, doublings), larger=True)


def _larger_steps_note(rounding: str, larger: _Smaller) -> str:
    """What the comparison at doubled steps found (see _at_larger_steps), after the rounding note."""
    up = f"at steps up to {float(np.max(larger.step)):.3g}"
    if larger.ok and larger.allowance is None:
        return (f"{rounding.split(' (try')[0]} at the default step; {up} the differences converge "
                f"(within {larger.spread:.2g}) to the automatic derivative")
    if larger.allowance is not None:
        return (f"{rounding.split(' (try')[0]} at the default step; {up} the differences spread by "
                f"{larger.spread:.2g} at best, more than the tolerance, and are compared allowing that "
                f"spread: " + ("the automatic derivative lies within it" if larger.ok else
                               f"they still disagree (rel err {larger.max_rel:.3g})"))
    if larger.converged:
        return (f"{rounding.split(' (try')[0]} at the default step; {up} the differences converge "
                f"(within {larger.spread:.2g}) and still disagree (rel err {larger.max_rel:.3g})")
    return (f"{rounding}; at larger steps they do not converge within the tolerance either (they "
            f"spread by {larger.spread:.2g}); --sweep shows the error over steps")


def _halved(ad, first, first_step, at_step, rounding, failing, tol, halvings: int, slack=0.0,
            larger: bool = False) -> _Smaller | None:
    """The comparison of ad with the best of the estimates D_k = at_step(k) (estimate, step per
    element; None where a step takes another path) at the default step halved k times (D_0 =
    first, at first_step), for the elements failing; rounding(step) bounds an estimate's
    rounding error per element, and slack is the comparison's own allowance (see compare).

    The estimates at successive halvings agree to within their truncation error where it
    dominates (it shrinks by 2^order with each halving) and to within their rounding where that
    does (it grows); so each element takes the estimate D_k with the smallest spread
    max(|D_(k-1) - D_k|, |D_k - D_(k+1)|) plus rounding(h_k), the bottom of the sweep's V.  That
    spread bounds D_k's error: an element passes only when the spread is within the tolerance
    (the estimates converge) and the automatic derivative is within the tolerance of D_k, so a
    wrong derivative still fails.  The other elements keep the default step's estimate.

    With larger, at_step(k) doubles the step instead (_at_larger_steps): rounding shrinks as k
    grows, and a step that takes another path ends the search with the estimates found so far
    (None when that is one of the first two)."""
    rtol, atol = tol
    estimates, steps = [first], [first_step]
    best, spread, where = np.array(first, float), np.full(first.shape, np.inf), np.array(first_step, float)
    best[failing & ~np.isfinite(best)] = np.nan  # (an inf would end the search at once: inf <= inf)
    for k in range(1, halvings + 1):
        found = at_step(k)
        if found is None and larger and k > 2:
            break
        if found is None:
            return None
        estimates.append(found[0])
        steps.append(found[1])
        if k < 2:
            continue
        before, at, after = estimates[-3:]
        with np.errstate(all="ignore"):
            round_off = np.broadcast_to(rounding(steps[-2]), first.shape)
            this = np.maximum(np.abs(before - at), np.abs(at - after)) + round_off
        better = failing & (this < spread)
        best[better], spread[better], where[better] = at[better], this[better], steps[-2][better]
        with np.errstate(all="ignore"):
            allowed = (atol + rtol * np.abs(best) + slack)[failing]
            if (spread[failing] <= allowed / 16).all() or (not larger and round_off[failing].min() > allowed.max()):
                break  # converged well below the tolerance, or rounding alone exceeds it from here on
    with np.errstate(all="ignore"):
        apart = failing & ~(spread <= atol + rtol * np.abs(best) + slack)
    converged = not apart.any()
    ok, mabs, mrel, worst = compare(ad, best, *tol, slack=slack)
    found = _Smaller(ok and converged, mabs, mrel, worst, best, where,
                     float(np.max(spread[failing], initial=0.0)), converged)
    if larger and not converged:
        return _resolution(ad, found, np.where(failing, spread, 0.0), tol)
    if not converged:
        # where no halved step has both truncation and rounding within the tolerance (the
        # differences of w[717] in sum((tanh(x*w) - 0.3)^2) with x[717] ~ 30: truncation at the
        # default step, rounding below it), or where differences exactly 0 at every step carry
        # their rounding bound eps |f| / h alone (the cross terms of (1.5 + y)^-3 near its pole,
        # |f| = 1.3e5: never 'converged' within atol 1e-10), the spread is what finite differences
        # resolve: allowed, as _resolution allows it, only where it is at most rtol times the
        # block's largest derivative (so a relative error above rtol at that scale still fails)
        allowed = _resolution(ad, found, np.where(apart, spread, 0.0) + slack, tol, fraction=rtol)
        if allowed.allowance is not None:
            return allowed._replace(converged=True)
    return found


def _resolution(ad, found: _Smaller, spread: np.ndarray, tol, fraction: float = RESOLVED_FRACTION) -> _Smaller:
    """found (doubled steps that did not converge within the tolerance) compared again allowing
    each element its estimate's spread: where no step has both rounding and truncation below
    the tolerance (sum(a^3) over arange(2000)*0.001: |f| = 4e3, and the derivative 0 at a = 0
    within atol 1e-8 needs h^2 + eps |f| / h <= 1e-8, whose least value is 1.8e-8), that spread
    is what finite differences can resolve, and a mismatch within it is one they cannot see.  Only
    where every spread is at most RESOLVED_FRACTION of the block's largest derivative, the level
    at which --sweep calls a derivative wrong; else found stands (a failure, that says it)."""
    scale = float(np.max(np.abs(found.fd), initial=0.0))
    if not (np.isfinite(spread).all() and float(np.max(spread, initial=0.0)) <= fraction * scale):
        return found
    ok, mabs, mrel, worst = compare(ad, found.fd, *tol, slack=spread)
    return found._replace(ok=ok, max_abs=mabs, max_rel=mrel, worst=worst, allowance=spread)


def _smaller_steps_note(h: np.ndarray, smaller: _Smaller, undefined: bool = False) -> str:
    """What the comparison at halved steps found (see _at_smaller_steps); undefined: whether some
    of the elements searched had differences that were not finite (see _undefined_a_step_away)."""
    default = f"the default step {float(np.max(h)):.3g} (it follows max(1, |x|))"
    down = f"steps down to {float(np.min(smaller.step)):.3g}"
    if smaller.ok:
        why = "reaches where the differences are not finite (past the edge of a domain, or an operation " \
              "failing)" if undefined else "leaves a truncation error beyond the tolerance"
        return (f"{default} {why} here; at {down} the differences "
                f"converge (within {smaller.spread:.2g}) to the automatic derivative")
    if smaller.converged:
        return (f"at {down} the differences converge (within {smaller.spread:.2g}) and still disagree "
                f"(rel err {smaller.max_rel:.3g})")
    return (f"at steps smaller than {default} the differences do not converge within the tolerance "
            f"(they spread by {smaller.spread:.2g}); --sweep shows the error over steps")


def _coarse_search_note(x: np.ndarray, step: float, smallest: list, fine_step: float, fine_slack,
                        smaller: "_Smaller | None") -> str:
    """What the steps from the default one down to the step relative to |x| found along
    directions, where the comparison at the latter agreed only within its rounding allowance
    (fine_slack), or disagreed (fine_slack is then that comparison, an _Again) and the steps
    converged (see _direction_result)."""
    xi = abs(float(x[tuple(smallest)]))
    coarse = f"the default step {step:.3g} is not small beside |x| = {xi:.3g} (it follows max(1, |x|)); "
    if isinstance(fine_slack, _Again):  # (the comparison there, which failed: see _direction_result)
        coarse += f"at steps relative to |x| they disagree too (rel err {fine_slack.max_rel:.3g}, down to {fine_step:.3g})"
    else:
        coarse += (f"at steps relative to |x| (down to {fine_step:.3g}) the differences agree only within their "
                   f"rounding allowance ({float(np.max(fine_slack, initial=0.0)):.2g}), which cannot decide")
    if smaller is None:
        return (f"{coarse}, and a smaller step takes another path; --sweep (without --directions) shows the "
                "error over steps")
    down = f"at steps down to {float(np.min(smaller.step)):.3g}"
    if smaller.ok:
        return f"{coarse}; {down} the differences converge (within {smaller.spread:.2g}) to the automatic derivative"
    if smaller.converged:
        return (f"{coarse}; {down} the differences converge (within {smaller.spread:.2g}) and still disagree "
                f"(rel err {smaller.max_rel:.3g})")
    return (f"{coarse}; at steps down to {fine_step:.3g} they do not converge within the tolerance either (they "
            f"spread by {smaller.spread:.2g}); --sweep (without --directions) shows the error over steps, "
            "--method complex (analytic programs) takes no difference")


def _directions_halved(tr: Traced, o: str, w: str, v, j, d, slack, step: float, kind: str, sizes, spread,
                       plan: _Plan, down_to: float | None = None, measured=None) -> tuple:
    """(_Smaller or None, the allowance of each element): J v (j) against directional differences
    at the default step halved (see _halved), where the default step's (d, with its allowance
    slack) disagree; there the allowance of J v itself, gamma_n sum_i |J_i v_i|, stays, and an
    element that agreed at the default step keeps its estimate with the allowance it passed by
    (it is not refined: the smaller steps' allowance would judge the default step's estimate).

    With down_to (the step relative to |x|, where the default step is coarse), the steps go
    down to it: halved as many times as it takes (divided by a larger power of two, where
    that is more than REFINE_MAX_HALVINGS times), so that the estimates' convergence, not a
    formula's allowance at the smallest step, decides.

    measured: per direction, the rounding of the differences measured at step (see
    _rounding_noise), which grows as 1/h below it: eps |f| / h alone called differences exactly
    0 at steps below the ulp of f's intermediates ((x + 1e8) - 1e8 forward: 1e-10) converged."""
    x = tr.value(w)
    halvings, ratio = REFINE_MAX_HALVINGS, 2.0
    if down_to is not None and 0 < down_to < step:
        # (two past it, and no fewer than the search below |x| = 1 takes: one halving from 2^-10
        # to Richardson's relative step at |x| = 0.5 gave no estimate with neighbours on both sides)
        needed = max(halvings, 2 + math.ceil(math.log2(step / down_to)))
        factor = math.ceil(needed / REFINE_MAX_HALVINGS)
        halvings, ratio = math.ceil(needed / factor), 2.0 ** factor
    inner = gamma(x.size) * spread.reshape((-1,) + (1,) * (j.ndim - 1))
    rtol, atol = plan.tol
    with np.errstate(all="ignore"):
        failing = ~(np.abs(j - d) <= atol + rtol * np.abs(d) + slack) & np.isfinite(j) & np.isfinite(d)
    if not failing.any():  # (only non-finite values disagree: smaller steps have nothing to settle,
        return None, inner  # and a search over no element 'converged within 0')

    def at_step(k: int):
        found = _directional_differences(tr, w, [o], v, kind, step / ratio ** k, plan.max_steps)
        return None if found.flipped[0] else (found.values[0], np.full(j.shape, step / ratio ** k))

    allowed = np.where(failing, inner, slack)
    if down_to is not None:  # (the default step can leave the domain near 0: sqrt(x) at 1e-7, sizes nan)
        sizes = np.fmax(sizes, np.abs(tr.value(o)))
    # (forward differences only: their default step eps^(1/2) leaves the second difference of
    # _rounding_noise no truncation; Richardson's 2^-10 left sin(769 x) a remainder of its h^6
    # term far past the tolerance, which stopped the search that passes it)
    seen = 0.0 if measured is None or kind != "forward" else \
        np.asarray(measured).reshape((-1,) + (1,) * (j.ndim - 1)) * step
    return _halved(j, d, np.full(j.shape, step), at_step,
                   lambda h: np.fmax(stencil.ROUNDING[kind] * stencil.EPS * sizes, seen) / h,
                   failing, plan.tol, halvings, slack=allowed), allowed


def _smallest_nonzero(x: np.ndarray) -> list | None:
    """The index of x's smallest non-zero |x_i| (the element a step is largest beside), or None."""
    ax = np.abs(x).ravel()
    nonzero = np.flatnonzero(ax > 0)
    if not nonzero.size:
        return None
    return [int(i) for i in np.unravel_index(int(nonzero[np.argmin(ax[nonzero])]), x.shape)]


#: Random directions along which forward mode is compared with the reverse-mode Jacobian.
FORWARD_PROBES = 2


def _forward_probes(tr: Traced, outs, wrts, rng) -> dict:
    """{wrt: (V, {of: J V}, {of: its rounding noise})}: forward mode along FORWARD_PROBES random
    unit directions (see :func:`_measured`).

    Reverse mode's full Jacobian times the same directions must agree.  A wrong
    forward rule shows up in a random projection with probability 1, at the
    cost of a few tangent passes instead of a column per input element.
    """
    directions = {}
    for w in wrts:
        x = tr.value(w)
        v = rng.standard_normal((FORWARD_PROBES,) + x.shape)
        v /= np.maximum(np.sqrt(np.sum(v * v, axis=tuple(range(1, v.ndim)), keepdims=True)), 1e-300)
        directions[w] = v
    scalars = [w for w in wrts if tr.value(w).ndim == 0]
    together = {}
    for chunk in _chunks(scalars):
        together.update(_scalar_tangents(tr, outs, chunk, directions) if len(chunk) > 1 else {})
    out = {}
    for w, v in directions.items():
        jv, noise = _measured(lambda d: together[w] if w in together else _tangents(tr, w, outs, d), v)
        out[w] = (v, dict(zip(outs, jv)), dict(zip(outs, noise)))
    return out


def _scalar_tangents(tr: Traced, outs, wrts, directions: dict) -> dict:
    """{w: what _tangents gives for w along _measured's batch of its directions}, for scalar
    inputs wrts, from one tangent pass whose batch holds each input's rows in a block of its own
    (zero seeds elsewhere): a pass per input swept the whole tape once each (a0*a0 + ... +
    a999*a999: 1,000 passes over 2,000 equations).  Rows are evaluated element by element, so a
    block holds the bits its own pass gives, plus zeros from the other seeds (x + 0 = x); where a
    block is not finite (a zero seed times an infinite derivative is nan), or the batch is over
    the element budget, that input is left to its own pass (absent from the result)."""
    blocks = [np.concatenate([directions[w]] + [c * directions[w] for c in ROUNDING_SCALES]) for w in wrts]
    size = len(blocks[0])
    seeds = np.zeros((len(wrts), len(wrts) * size))
    for i, block in enumerate(blocks):
        seeds[i, i * size:(i + 1) * size] = block
    names = tr.tape.names
    try:
        batch = BatchedBuilder(tr.builder, len(wrts) * size, what="a batched tangent pass")
        tan = forward(tr.builder, tr.tape.equations, {names[w]: batch.dense(seeds[i]) for i, w in enumerate(wrts)},
                      eager=True, check=False, keep={names[o] for o in outs})
    except LimitError:
        return {}
    rows = [None if tan.get(names[o]) is None else batch.rows(tan[names[o]]) for o in outs]
    found = {}
    for i, w in enumerate(wrts):
        own = [None if r is None else r[i * size:(i + 1) * size] for r in rows]
        if all(r is None or np.isfinite(r).all() for r in own):
            found[w] = own
    return found


def _taylor(tr: Traced, result: "CheckResult", rng, max_steps: int = DEFAULT_MAX_STEPS,
            rounding: _Rounding | None = None, along=None) -> None:
    """Add the Taylor remainder's observed order to a result; below TAYLOR_MIN_ORDER it fails (and what
    would explain it is noted: a step that changes the path, or a kink within the steps' reach, which
    is far larger than the finite differences' step: round(x) a hundredth away from a jump).
    rounding: the point's (see _Rounding); along: see taylor_order."""
    scale = None if rounding is None else rounding.scale(result.of, result.wrt)
    order, flipped, reach, beside = taylor_order(tr, result.of, result.wrt, rng, max_steps=max_steps, scale=scale,
                                                 along=along)
    result.extra["taylor_order"] = order
    if beside is not None:
        result.notes.append(f"the Taylor steps (from 1e-2·max(1, |x|)) are not small beside |x| = {beside:.3g}: "
                            f"taken from 1e-2·{beside:.3g} instead, where the remainder's order is {order:.2f}")
    if not order >= TAYLOR_MIN_ORDER:
        result.ok = False
        result.notes.append(f"Taylor remainder order {order:.2f}, expected 2")
        names = tr.tape.names
        kinks = kinks_near(tr, names[result.wrt], np.array([reach / 2]), names[result.of])  # (within reach)
        explained = path_notes(tr, flipped, "Taylor") + [f"{k}, within the Taylor steps' reach ({reach:.2g})"
                                                         for k in kinks]
        result.notes += [n for n in explained if n not in result.notes]


def _contracting(block, xshape: tuple):
    """p -> J p for the rows p (shape (k,) + xshape) of a Jacobian block J (of.shape + xshape;
    None: nothing reaches the output, J p is None), by one matrix product: the Taylor test's J p
    where the check holds reverse mode's Jacobian already, in place of a tangent pass over the
    tape (for each input, at each batch of steps)."""
    def along(p: np.ndarray):
        if block is None:
            return None
        n = math.prod(xshape)
        yshape = block.shape[:block.ndim - len(xshape)]
        return (p.reshape(len(p), n) @ block.reshape(-1, n).T).reshape((len(p),) + yshape)
    return along


def _check_directions(tr: Traced, name, p, outs, w, plan: _Plan, rng):
    """J v against a directional difference along k random directions; and <u, J v> = <J^T u, v>.
    Both comparisons allow for their rounding error, which grows with the size of the problem
    (see :func:`directional_slack` and :func:`dot_slack`)."""
    method, k = plan.method, plan.directions
    x = tr.value(w)
    if x.size == 0:  # no direction to take: as the full check of an empty Jacobian, nothing is wrong
        return [CheckResult(name, p, o, w, 0.0, 0.0, [], directions_label(method, k), 0.0, True, [],
                            {"dot_product_abs_err": 0.0}, "directions") for o in outs]
    kind, step = stencil.along_direction(x, method)
    _check_batch(tr, (len(stencil.offsets(kind)) + stencil.needs_centre(kind)) * k, x.size)
    v = rng.standard_normal((k,) + x.shape)
    symmetric = {o: _symmetric_operand(tr, w, o) for o in outs}
    if any(eq is not None for eq in symmetric.values()):
        v = _symmetric_part(v)  # (as the full check's directions: see _symmetrised)
    v /= np.sqrt(np.sum(v * v, axis=tuple(range(1, v.ndim)), keepdims=True))
    jv, jv_noise = _measured(lambda d: _tangents(tr, w, outs, d), v)
    dd = _directional_differences(tr, w, outs, v, kind, step, plan.max_steps)
    hs = step  # (the step taken, as the full check reports it: the complex step's too)
    again = _relative_directions(tr, w, outs, v, method, plan.max_steps)
    results = [_direction_result(tr, name, p, o, w, v, (j, jn), Directional(*found), kind, step, hs, plan, rng,
                                 lambda i=i: again()[i])
               for i, (o, j, jn, *found) in enumerate(zip(outs, jv, jv_noise, *dd))]
    for r in results:
        if symmetric[r.of] is not None:
            r.notes.append(_symmetric_note(tr, w, symmetric[r.of]))
    return results


def _relative_directions(tr: Traced, w: str, outs, v: np.ndarray, method: str, max_steps: int):
    """A function giving, once asked (and computed once for every output), the directional
    differences at method's steps relative to |x| (stencil.along_direction): [(Directional of
    each output, or None where a step takes another path), the step]."""
    found = []

    def again():
        if not found:
            kind, step = stencil.along_direction(tr.value(w), method, relative=True)
            dd = _directional_differences(tr, w, outs, v, kind, step, max_steps)
            for d in map(Directional._make, zip(*dd)):  # (a change of path: not to be compared)
                found.append((None if d.flipped else d, step))
        return found
    return again


#: Scales at which a pass linear in its seed (J v, J^T u) runs again to measure its rounding:
#: not powers of two, so that every product in it rounds otherwise.
ROUNDING_SCALES = (3.0, 0.7)


def _measured(linear, v: np.ndarray) -> tuple[list, list]:
    """([linear(v) per output], [its rounding noise per output]): linear is a batched pass linear
    in its seeds v (shape (k,) + ...), giving a list of arrays (or None); it runs on v and on
    v times each of ROUNDING_SCALES in one batch.  The results differ by rounding alone, so the
    noise, max over c of |linear(c v) / c - linear(v)| per element, measures how much the pass
    rounds: by eps times the terms it sums, which can be far larger than the result (terms of
    1/x cancel in sin(x)/x near 0), and a wrong rule, linear too, does not widen it."""
    k = len(v)
    found = linear(np.concatenate([v] + [c * v for c in ROUNDING_SCALES]))
    values, noise = [], []
    for f in found:
        values.append(None if f is None else f[:k])
        noise.append(None if f is None else
                     np.max([np.abs(f[(i + 1) * k:(i + 2) * k] / c - f[:k]) for i, c in enumerate(ROUNDING_SCALES)],
                            axis=0))
    return values, noise


def _tangents(tr: Traced, w: str, outs, v: np.ndarray) -> list:
    """Forward mode: J v for each output along each of the directions v (shape (k,) + w.shape),
    in one eager tangent pass on the batch of directions (see batched.py); None for an output
    that does not depend on w."""
    names = tr.tape.names
    batch = BatchedBuilder(tr.builder, len(v), what="a batched tangent pass")
    tan = forward(tr.builder, tr.tape.equations, {names[w]: batch.dense(v)}, eager=True, check=False,
                  keep={names[o] for o in outs})
    return [None if tan.get(names[o]) is None else batch.rows(tan[names[o]]) for o in outs]


def _cotangents(tr: Traced, o: str, w: str, u: np.ndarray):
    """Reverse mode: J^T u for each of the cotangents u (shape (k,) + o.shape), or None, in one
    eager backward pass on the batch of cotangents."""
    names = tr.tape.names
    batch = BatchedBuilder(tr.builder, len(u), what="a batched backward pass")
    found = backward(tr.builder, tr.tape.equations, {names[o]: batch.dense(u)}, [names[w]], eager=True,
                     check=False, fold=VJP_FOLDS)
    r = found[names[w]]
    return None if r is None else batch.rows(r)


def _one_element_cotangents(tr: Traced, o: str, w: str, u: np.ndarray) -> tuple:
    """(J^T u, its rounding noise) of an output of one element, as _measured of _cotangents gives
    them, by grad's own pass (eager_backward), so that the dot-product test checks what grad and
    vjp compute (their inline scalar rules, their plain matrix products) as the full check does:
    J^T u_k is u_k J^T 1, from one pass seeded with 1, and the noise from one pass more for each
    of ROUNDING_SCALES, whatever the number of directions (a pass a direction and scale took 30
    passes over the tape for ten directions, 4.7 s where one batched pass took 1 s)."""
    names, xshape = tr.tape.names, tr.value(w).shape
    passes = [eager_backward(tr, {names[o]: np.full(tr.value(o).shape, c)}, [w], warn=False)[w]
              for c in (1.0,) + ROUNDING_SCALES]
    if passes[0] is None:
        return None, None
    g = [np.asarray(p, dtype=float).reshape(xshape) for p in passes]
    uk = u.reshape((len(u),) + (1,) * len(xshape))
    noise = np.max([np.abs(uk * (gc / c - g[0])) for gc, c in zip(g[1:], ROUNDING_SCALES)], axis=0)
    return uk * g[0], noise


def _direction_result(tr: Traced, name, p, o, w, v, jv: tuple, dd: Directional, kind, step, hs, plan: _Plan,
                      rng, again) -> CheckResult:
    """The check of d o / d w along the directions v: J v (jv: it and its rounding noise, see
    :func:`_measured`) against the directional differences dd (of this output alone), and the
    dot-product test with random cotangents u.
    As the full check does, a mismatch where the step is not small beside some |x_i| is
    compared again at steps relative to |x| (again(): that output's differences there, and
    the step), which stand if they agree."""
    flipped = dd.flipped
    k, x, yshape = len(v), tr.value(w), tr.value(o).shape
    j, j_noise = (np.zeros((k,) + yshape), 0.0) if jv[0] is None else jv
    u = rng.standard_normal((k,) + yshape)
    if tr.value(o).size == 1:
        jtu, jtu_noise = _one_element_cotangents(tr, o, w, u)
    else:
        (jtu,), (jtu_noise,) = _measured(lambda d: [_cotangents(tr, o, w, d)], u)
    jtu, jtu_noise = (np.zeros((k,) + x.shape), 0.0) if jtu is None else (jtu, jtu_noise)
    products = np.abs(jtu * v).reshape(k, -1).sum(axis=1)  # sum_i |(J^T u)_i v_i|
    unorm = np.sqrt(np.sum((u * u).reshape(k, -1), axis=1))
    spread = np.divide(products, unorm, out=np.zeros(k), where=unorm > 0)  # ~ sum_i |J_i v_i|

    def along(found: Directional, h: float):
        slack = directional_slack(kind, h, found.sizes, spread, x.size, found.noise)
        return (*compare(j, found.values, *plan.tol, slack=slack), found.values, slack)

    ok, mabs, mrel, worst, d, slack = along(dd, step)
    if kind != "complex" and _needs_noise(j, d, slack, directional_slack(kind, step, dd.sizes, spread, x.size),
                                          plan.tol):
        # (an element passes by the measured noise alone: measure it again without the truncation
        # it holds; an element that passes so keeps its allowance when others fail, see
        # _directions_halved, so that is asked of every element, whether the direction passes or not)
        noise = _rounding_noise(tr, w, o, v, step, dd, kind, plan.max_steps)
        dd = dd._replace(noise=np.zeros(k) if noise is None else noise)
        ok, mabs, mrel, worst, d, slack = along(dd, step)
    if not ok and kind != "complex" and dd.near is not None:
        # (one pair's disagreement can be far below their rounding by chance: a right sum of
        # 32,000 terms failed one direction in ten; measure it again on more steps)
        noise = _fitted_noise(tr, w, o, v, step, dd, kind, plan.max_steps)
        if noise is not None:
            dd = dd._replace(noise=noise)
            ok, mabs, mrel, worst, d, slack = along(dd, step)
    complex_note = []
    if not ok and kind == "complex" and not flipped and jv[0] is not None:
        # (the complex step's quotient rounds as the derivative does: see _complex_step_slack)
        noise = _complex_directions_noise(tr, o, w, v, j, dd.values, step, slack, plan.tol, plan.max_steps)
        if noise is not None:
            dd = dd._replace(noise=noise)  # (NOISE_MARGIN times each side's, see directional_slack)
            ok, mabs, mrel, worst, d, slack = along(dd, step)
            if not ok:  # (the forward pass's rounding too: see _input_rounding)
                inputs = _input_rounding(tr, o, w, (j, dd.values), _directions_at(o, w, v, step, plan.max_steps),
                                         plan.max_steps)
                if inputs is not None:
                    dd = dd._replace(noise=noise + np.max(inputs.reshape(k, -1), axis=1, initial=0.0))
                    ok, mabs, mrel, worst, d, slack = along(dd, step)
            complex_note.append(_complex_rounding_note(NOISE_MARGIN * dd.noise, ok))
    measured_once = []

    def measured():  # (forward differences' rounding measured at the default step (see _directions_halved),
        #             asked only by a search below)
        if not measured_once:
            found = None if dd.near is None or kind != "forward" else \
                _rounding_noise(tr, w, o, v, step, dd, kind, plan.max_steps)
            measured_once.append(found)
        return measured_once[0]

    def undecided_by(ok: bool, slack, d) -> bool:
        # (sum(x) + 1e17: eps |f| / h = 1.2e7 allowed per direction passed a gradient 50% wrong: an
        # allowance past the largest |J v| could hide an error of its sign, so the comparison says
        # nothing, unless it was not needed: J v and the differences agree without it (100 + 0*x:
        # both exactly 0, a right derivative that failed under the bare rule).  Past the smaller of
        # the largest |J v| and the largest difference: differences that are rounding alone can be
        # larger than J v (sum((x + 1e8) - 1e8) + 0.5*sum(stop_gradient(x)), forward: J v 33% wrong
        # passed 2 seeds of 31 within an allowance just under its differences)
        return ok and kind in stencil.ROUNDING and \
            float(np.max(slack, initial=0.0)) > plan.tol[1] + min(float(np.max(np.abs(d), initial=0.0)),
                                                                  float(np.max(np.abs(j), initial=0.0))) and \
            not compare(j, d, *plan.tol)[0]

    # (a step along a unit direction moves no element by more than step)
    kinks, extra = kinks_near(tr, tr.tape.names[w], np.array(step), tr.tape.names[o]), {}
    notes = kinks + path_notes(tr, flipped) + complex_note
    smallest = _smallest_nonzero(x)
    # (undecided too: a step past the edge of the domain of a function of |x| can make finite
    # differences of a huge |f|, whose rounding allowance decides nothing: Newton's square root of
    # a = 2e-7 at the step 7.6e-6)
    if (not ok or undecided_by(ok, slack, d)) and notes == kinks and smallest is not None \
            and _coarse_step(x, np.full(x.shape, step), smallest, kind) \
            and not (kinks and _kinks_at_relative_steps(tr, w, o, plan.method)):
        fine, fine_step = again()
        second, searched = None, None
        if fine is not None:
            *found, fine_slack = along(fine, fine_step)
            second = _Again(*found, np.array(fine_step))
            inner = gamma(x.size) * spread.reshape((-1,) + (1,) * (j.ndim - 1))
            if second.ok and not compare(j, fine.values, *plan.tol, slack=inner)[0]:
                # (they agree only within the rounding allowed at that step, which can hide a
                # wrong derivative: log(sum(exp(x))) 1e-4 wrong passed within 9.3e-6 beside an x_i
                # of 8e-5; the steps from the default one down to it decide, by their convergence)
                searched = _directions_halved(tr, o, w, v, j, d, slack, step, kind, dd.sizes, spread, plan,
                                              down_to=fine_step, measured=measured())
                second = None
            elif not second.ok and kind in stencil.ROUNDING and step <= fine_step * 2.0 ** REFINE_HALVINGS:
                # (they disagree there too: near |x| = 1 the relative step is hardly smaller, and
                # Richardson's 2^-10 is coarse from |x| < 0.98; sin(100 x) at 0.5 failed at both.
                # The halved steps decide where they converge, as in the full check, where the
                # relative step is within REFINE_HALVINGS halvings: an x_i of 7e-6 among 2e5 normal
                # draws set it to 6e-11 for cumsum(x), where rounding, not truncation, is the question)
                found = _directions_halved(tr, o, w, v, j, d, slack, step, kind, dd.sizes, spread, plan,
                                           down_to=fine_step, measured=measured())
                if found[0] is not None and found[0].converged:
                    searched, fine_slack = found, second
        if searched is not None:
            smaller, inner = searched
            notes.append(_coarse_search_note(x, step, smallest, fine_step, fine_slack, smaller))
            if smaller is not None:
                extra["default_step"], hs = hs, float(np.max(smaller.step))
                ok, mabs, mrel, worst, d, slack = (smaller.ok, smaller.max_abs, smaller.max_rel, smaller.worst,
                                                   smaller.fd, inner)
        else:
            notes += _coarse_step_note(x, np.full(x.shape, step), second, smallest, directions=True)
        if second is not None and second.ok:
            extra["default_step"], hs = hs, fine_step
            ok, mabs, mrel, worst, d, slack = along(fine, fine_step)
    elif not ok and not notes and kind in stencil.ROUNDING:  # (as the full check: see _at_smaller_steps)
        smaller, inner = _directions_halved(tr, o, w, v, j, d, slack, step, kind, dd.sizes, spread, plan,
                                            measured=measured())
        rounds = 0.0 if measured() is None else float(np.max(measured(), initial=0.0))
        if smaller is not None and not smaller.converged and \
                rounds > plan.tol[1] + plan.tol[0] * float(np.max(np.abs(d), initial=0.0)):
            # ((x + 1e8) - 1e8 forward: the differences round by ~1 at the default step, as f's
            # intermediates do, not f; smaller steps round more, and no step decides)
            notes.append(f"the directional differences round by about {rounds:.2g} at the default step "
                         f"{step:.3g} (measured: f's intermediates can be far larger than |f|), more than the "
                         "tolerance, and more at smaller steps: they cannot decide; the full check (without "
                         "--directions) searches larger steps")
        elif smaller is not None:
            notes.append(_smaller_steps_note(np.array(step), smaller))
            extra["default_step"], hs = hs, float(np.max(smaller.step))
            ok, mabs, mrel, worst, d, slack = (smaller.ok, smaller.max_abs, smaller.max_rel, smaller.worst,
                                               smaller.fd, inner)
    undecided = undecided_by(ok, slack, d)
    if undecided:
        ok = False
        hidden = float(np.max(slack, initial=0.0))
        notes.append(f"rounding of the directional differences could hide an error of {hidden:.2g} "
                     "(eps |f| / h), more than J v itself: they cannot decide; the full check (without "
                     "--directions) searches larger steps, --method complex takes no difference")
    elif not ok:
        extra.update(breach(j, d, worst, *plan.tol, slack=slack))
    # the dot-product test: <u, J v> = <J^T u, v>
    lhs = np.sum((u * j).reshape(k, -1), axis=1)
    rhs = np.sum((jtu * v).reshape(k, -1), axis=1)
    measured = NOISE_MARGIN * (np.sum(np.abs(u * j_noise).reshape(k, -1), axis=1) +
                                np.sum(np.abs(jtu_noise * v).reshape(k, -1), axis=1))
    dot_allowed = dot_slack(u, j, products, spread, x.size) + measured
    ok2, dabs, _, _ = compare(lhs, rhs, *AD_TOLERANCE, slack=dot_allowed)
    if not ok2 and jv[0] is not None and _within_reach(lhs, rhs, AD_TOLERANCE, dot_allowed):
        # (both modes round the forward pass's factorisations by cond x eps: see _input_rounding)
        inputs = _input_rounding(tr, o, w, (lhs, rhs), _products_at(o, w, u, v), plan.max_steps)
        if inputs is not None:
            ok2 = compare(lhs, rhs, *AD_TOLERANCE, slack=dot_allowed + NOISE_MARGIN * inputs)[0]
    extra["dot_product_abs_err"] = dabs
    extra["rounding_allowance"] = float(np.max(slack, initial=0.0))
    if not ok2:
        notes.append("<u, J v> != <J^T u, v>")
    if not (np.isfinite(j).all() and np.isfinite(jtu).all()):  # as the full check: a failure
        ok2 = False
        notes.append("non-finite derivative")
        mabs, mrel = unmeasured_errors(j, d, mabs, mrel)
    elif not np.isfinite(d).all():  # (as the full check says it: an input of inf, 1/x beside 0)
        notes.append(NOT_FINITE_DIFFERENCES)
    if not (ok and ok2):
        notes += stopped_notes(tr, w, o)
    return CheckResult(name, p, o, w, mabs, mrel, worst, directions_label(plan.method, k), hs,
                       ok and ok2, notes, extra, "directions")


#: A failure's note where the differences are nan or inf (the full check's and --directions').
NOT_FINITE_DIFFERENCES = "finite differences are not finite here (nan or inf near the point)"


#: How many times its estimate the rounding error of a difference quotient is allowed to be
#: (the estimate eps |f| / h takes f as rounded once; a sum of n terms rounds more, by a
#: factor that pairwise summation keeps near 1: measured 0.2 for sum(x^2) at n = 10^6).
ROUNDING_MARGIN = 4.0
#: How many times the largest disagreement of two directional differences (each rounding
#: error drawn anew) their own rounding error is allowed to be.
NOISE_MARGIN = 4.0


def directional_slack(kind: str, step: float, size: np.ndarray, spread: np.ndarray, n: int,
                      noise=None) -> np.ndarray:
    """The rounding allowance of J v against a directional difference, per direction and
    output element (size: the largest |f| at the points evaluated, shape (k,) + f.shape;
    spread: per direction, an estimate of sum_i |J_i v_i|; n: the input's size; noise: per
    direction, the rounding measured in the differences, see :func:`_directional_differences`).

    The difference quotient's rounding is ROUNDING[kind] eps |f| / h (none for the complex
    step), with ROUNDING_MARGIN; and J v itself is an inner product of n terms, whose
    rounding is at most gamma_n sum_i |J_i v_i| with gamma_n = n eps (Higham, Accuracy and
    Stability of Numerical Algorithms, 3.1).  Neither grows with |J v|, which is O(1) for a
    unit v: so at n = 10^6, sum(x^2) at ones has |f| = 10^6 and a rounding of 3e-5 in a
    directional difference of size 1, where the relative tolerance allows 1e-6.

    Where f's own rounding is larger than eps |f| (it accumulates, or larger intermediates
    cancel), the two differences of :func:`_directional_differences` disagree by about as
    much: NOISE_MARGIN times the largest disagreement over the output's elements is allowed
    as well (it is measured on the differences alone, so a wrong derivative cannot widen it).
    rounding_scale's estimate is not used here: along directions there is no search of
    larger steps to decide within it, and its allowance at the default step alone passed a
    sin rule 1% wrong in (sin(x) + 1e8) - 1e8 (eps 1e8 / h is 3e-3 there), which the measured
    noise fails.
    """
    fd = ROUNDING_MARGIN * stencil.ROUNDING.get(kind, 0.0) * stencil.EPS * size / step
    per_direction = (-1,) + (1,) * (size.ndim - 1)
    measured = 0.0 if noise is None else NOISE_MARGIN * np.asarray(noise).reshape(per_direction)
    return fd + gamma(n) * spread.reshape(per_direction) + measured


def dot_slack(u: np.ndarray, jv: np.ndarray, products: np.ndarray, spread: np.ndarray, n: int) -> np.ndarray:
    """The rounding allowance of <u, J v> against <J^T u, v>, per direction: each side is an
    inner product (of m = u's size terms, and of n), so within gamma_m sum |u_k (J v)_k| and
    gamma_n sum_i |(J^T u)_i v_i| (products); and J v's own rounding, gamma_n spread per
    element, enters the left side weighted by |u| (and J^T u's the right, alike)."""
    k = len(u)
    m = u[0].size
    left = np.abs(u * jv).reshape(k, -1).sum(axis=1)
    unorm1 = np.abs(u).reshape(k, -1).sum(axis=1)
    return gamma(m) * left + gamma(n) * (2 * products + unorm1 * spread)


def gamma(n: int) -> float:
    """gamma_n = n eps / (1 - n eps): the bound on the relative rounding error of an inner
    product of n terms, summed in any order (Higham, Lemma 3.1)."""
    ne = n * stencil.EPS
    return ne / (1 - ne) if ne < 0.5 else math.inf


class Directional(NamedTuple):
    """Directional differences (see :func:`_directional_differences`), per output."""

    values: list  # (k,) + o.shape: the derivative along each direction
    flipped: list  # the guards a step changed (Batch)
    sizes: list  # (k,) + o.shape: the largest |f| at the points evaluated
    noise: list  # (k,): the largest |D(h) - D(NEAR h)| over the output's elements (0: not measured)
    near: list  # (k,) + o.shape: D(NEAR h) (None: not taken)


#: The second step of a directional difference, in units of the first: near enough that the
#: two truncation errors almost agree (they differ by NEAR^p - 1 of one, p the method's order:
#: 0.06 forward, 0.13 central, 0.27 Richardson), far enough that f is rounded at other points,
#: so that the two quotients differ by their rounding.
NEAR = 17 / 16


def _directional_differences(tr: Traced, w: str, outs, v: np.ndarray, kind: str, step: float,
                             max_steps: int = DEFAULT_MAX_STEPS) -> Directional:
    """The derivative of each output along each of the k unit directions v (shape (k,) +
    w.shape), by a difference of the kind and step stencil.along_direction chose, all in one
    batch.  A real method's difference is also taken at the step NEAR h, and the two differ by
    their rounding errors: the rounding of f where a formula, not the program, cannot say
    how large it is (a cumulative sum rounds each partial sum: its error grows along it)."""
    k = len(v)
    multiples = (1.0,) if kind == "complex" else (1.0, NEAR)
    found, flipped = _differences_at(tr, w, outs, v, kind, [c * step for c in multiples], max_steps)
    values, sizes, noise, nears = [], [], [], []
    for (estimates, size), f in zip(found, flipped):
        d = estimates[0]
        values.append(d)
        sizes.append(size)
        if kind == "complex" or f or d[0].size == 0:  # (a change of path is noted, not allowed for)
            noise.append(np.zeros(k))
            nears.append(None)
            continue
        nears.append(estimates[1])
        with np.errstate(invalid="ignore"):
            noise.append(np.max(np.abs(d - estimates[1]).reshape(k, -1), axis=1))
    return Directional(values, flipped, sizes, noise, nears)


def _differences_at(tr: Traced, w: str, outs, v: np.ndarray, kind: str, steps: list, max_steps: int):
    """([([the kind's difference along each direction v at each of steps], the largest |f| at
    the points evaluated) per output], the guards a step changed per output): every point of
    every step in one batch (and f(x) once, which forward differences need)."""
    x, k = tr.value(w), len(v)
    own = stencil.offsets(kind)
    centre = stencil.needs_centre(kind)
    scales = [c * h for h in steps for c in own] + ([0.0] if centre else [])
    ys, flipped = evaluate_batch(tr, w, np.concatenate([x + c * v for c in scales]), outs, max_steps=max_steps)
    taken = [np.full(k, c) for c in scales]
    found = []
    for y in ys:
        part = [y[i * k:(i + 1) * k] for i in range(len(scales))]
        middle = part[-1] if centre else None
        m = len(own)
        estimates = [stencil.combine(kind, part[i * m:(i + 1) * m], taken[i * m:(i + 1) * m], middle)
                     for i in range(len(steps))]
        found.append((estimates, np.max([np.abs(q) for q in part], axis=0)))  # (complex: its modulus)
    return found, flipped


def _needs_noise(j, d, slack, bare, tol) -> bool:
    """Whether some element of J v (j) agrees with the directional differences d within the
    allowance slack but not within bare, the same without the measured noise."""
    rtol, atol = tol
    with np.errstate(all="ignore"):
        allowed = atol + rtol * np.abs(d)
        gap = np.abs(j - d)
        return bool(np.any((gap <= allowed + slack) & ~(gap <= allowed + bare)))


def far(kind: str) -> float:
    """The third step of a real method's directional difference, in units of the first, taken
    where the measured noise is needed (see _rounding_noise): FAR^p + NEAR^p = 2 (p the
    method's order), so that the h^p terms of the truncation errors at FAR h, h and NEAR h
    cancel in D(NEAR h) - 2 D(h) + D(FAR h) (0.93 for central differences)."""
    p = stencil.ORDER[kind]
    return (2.0 - NEAR ** p) ** (1.0 / p)


def _rounding_noise(tr: Traced, w: str, o: str, v: np.ndarray, step: float, found: "Directional", kind: str,
                    max_steps: int = DEFAULT_MAX_STEPS):
    """Per direction, the rounding of found's differences of o at step (found: that output's,
    with D(NEAR h)), with their truncation taken out: found.noise, |D(h) - D(NEAR h)|, also
    holds ((NEAR^2 - 1) = 0.13 of, central) the truncation error c h^2, and 4 times it passed
    an element whose truncation error was 7.5e-4 against a tolerance of 6.5e-6 (sinc(pinv(A))).
    D(NEAR h) - 2 D(h) + D(FAR h) cancels c h^p (see far) and keeps the three roundings, drawn
    anew at each step: divided by sqrt(3), it measures what |D(h) - D(NEAR h)| does where
    rounding alone makes it (sqrt(6) against sqrt(2) standard deviations).  None where a step
    at FAR h takes another path (then no noise is allowed)."""
    k = len(v)
    ((estimates, _),), flipped = _differences_at(tr, w, [o], v, kind, [far(kind) * step], max_steps)
    if flipped[0]:
        return None
    with np.errstate(invalid="ignore"):
        second = np.abs(found.near - 2.0 * found.values + estimates[0]) / math.sqrt(3.0)
    return np.max(second.reshape(k, -1), axis=1)


#: The steps, in units of the first, of the further differences that measure the rounding of a
#: direction's differences where one pair's disagreement did not allow for it (see _fitted_noise):
#: near the first (a central difference's truncation error changes by less than a half between
#: them), none a power of two, so that each rounds anew.
NOISE_STEPS = tuple(1.0 + j / 40 for j in range(-8, 9) if j)


def _fitted_noise(tr: Traced, w: str, o: str, v: np.ndarray, step: float, found: "Directional", kind: str,
                  max_steps: int = DEFAULT_MAX_STEPS):
    """The rounding of found's differences of o at step (found: that output's, with D(NEAR h)),
    measured on NOISE_STEPS more, in the units of found.noise (a disagreement of two differences,
    sqrt(2) standard deviations of one), for every direction alike; None where a step takes
    another path or a difference is not finite.

    found.noise is one draw of |D(h) - D(NEAR h)| per direction, and a draw far below its
    standard deviation is common (|a - b| < |a| / 4 for about one pair in twelve): then a right
    derivative failed by its rounding.  Here the 18 differences D(c h) of each direction and
    output element are fitted by the truncation error the method leaves, a + b c^p (p its
    order), and the residuals' scatter, on 16 degrees of freedom, estimates the rounding; a
    wrong derivative does not widen it (the differences alone are fitted).  The largest over
    the output's elements and the directions is taken: rounding is f's, the same along every
    unit direction at one step."""
    k = len(v)
    estimates = []
    at_once = _steps_that_fit(tr, w, k * len(stencil.offsets(kind)))
    for i in range(0, len(NOISE_STEPS), at_once):
        steps = [c * step for c in NOISE_STEPS[i:i + at_once]]
        ((found_here, _),), flipped = _differences_at(tr, w, [o], v, kind, steps, max_steps)
        if flipped[0]:
            return None
        estimates += found_here
    ds = np.stack([found.values, found.near] + estimates).reshape(len(NOISE_STEPS) + 2, -1)
    if not np.isfinite(ds).all():
        return None
    t = np.array((1.0, NEAR) + NOISE_STEPS) ** stencil.ORDER[kind]
    t = (t - t.mean())[:, None]
    centred = ds - ds.mean(axis=0)
    slope = np.sum(t * centred, axis=0) / np.sum(t * t)
    residuals = centred - t * slope
    sigma = np.sqrt(np.sum(residuals * residuals, axis=0) / (len(ds) - 2))
    return np.full(k, math.sqrt(2.0) * float(np.max(sigma, initial=0.0)))


#: The elements a batch of _fitted_noise's steps may hold in one value (more steps, fewer
#: passes over the tape: a pass over a 32,000-step loop costs 0.35 s with 8 rows and 0.4 s with 64).
NOISE_BATCH_ELEMENTS = 1 << 22


def _steps_that_fit(tr: Traced, w: str, rows_per_step: int) -> int:
    """How many steps of rows_per_step rows one batch of _fitted_noise takes: two, as the
    differences it follows took, or as many as NOISE_BATCH_ELEMENTS allows in its largest value."""
    var = tr.tape.names[w]
    largest = largest_batched(seeded(tr.tape.equations, [var]), [var], tr.builder.shapes)
    return max(2, NOISE_BATCH_ELEMENTS // max(1, largest * rows_per_step))


class TaylorOrder(NamedTuple):
    order: float
    flipped: tuple  # the guards a step changed (see Batch)
    reach: float = 0.0  # how far the largest step moves an element of wrt
    beside: float | None = None  # where the steps followed |x| (see taylor_order): the |x_i| they were coarse beside


#: The Taylor test's steps: TAYLOR_FIRST_STEP * max(1, |x|) halved TAYLOR_HALVINGS - 1 times,
#: down to ~2e-8 of it: small enough that the h^2 term outgrows the h^3 term even near an
#: inflection point (sin at 1e-4: they are equal at h = 3e-4), while steps whose remainder
#: is at rounding level (TAYLOR_ROUNDING) are left out of the estimate.
TAYLOR_FIRST_STEP = 1e-2
TAYLOR_HALVINGS = 20
#: The steps are evaluated this many at a time (a batch of as many copies of the input), from
#: the largest, and no further once a batch's remainders are all at rounding level.
TAYLOR_CHUNK = 5
#: ...except where every step fits in one batch of at most this many elements of the widest
#: value on the way: a pass then costs its Python overhead, whatever the rows (a scalar input
#: into a 10,000-step loop: three passes over the tape where one does), so all the steps take
#: one pass, and the chunks are cut from its rows as they would have come.
TAYLOR_ONE_PASS_ELEMENTS = 4096
#: A remainder counts only above this many times eps times the rounding scale of what it is
#: the difference of (rounding_scale's for f(x), which counts the intermediates that cancel,
#: |f(x + p)| and |J p|, per output element): below it, rounding would make its order noise
#: (the margin covers what the first-order estimate leaves out: a sum of n terms rounds
#: its partial sums, the estimate once).
TAYLOR_ROUNDING = 1e3
#: The order of a right derivative's remainder is 2 (or more); a wrong one's tends to 1.
TAYLOR_MIN_ORDER = 1.8
#: The observed order is the median over the last pairs of steps that count (at most this many).
TAYLOR_LAST_PAIRS = 3


def taylor_order(tr: Traced, of: str, wrt: str, rng, halvings: int = TAYLOR_HALVINGS, *,
                 max_steps: int = DEFAULT_MAX_STEPS, scale: np.ndarray | None = None,
                 along=None) -> TaylorOrder:
    """Observed order of the remainder f(x + p) - f(x) - J p as the step p = h v halves (2
    for a correct J; inf when the remainder is at rounding level at every step: f is linear
    along v, or the steps are too small to see its curvature).

    The order is taken at the smallest steps whose remainder is above rounding, where the
    leading term shows: a wrong J leaves c h, which the smallest steps see; a right one
    leaves a h^2 + b h^3, whose terms can cancel at larger steps (near an inflection point,
    a ~ 0).  The remainder with its h^3 term removed, 8 r(h/2) - r(h) = a h^2 + 3 c h + ..., is
    measured too where the remainder's own order is short of 2, and the larger of the two is
    reported: a wrong J shows c h in both.
    p is the step actually taken, (x + h v) - x, since x + h v rounds (by eps |x|, far more
    than the remainder at small h); J p is along(p) for the rows p (None: nothing reaches the
    output), by default forward mode's.
    A remainder counts only above the rounding of what it is the difference of (TAYLOR_ROUNDING
    eps times scale, rounding_scale's estimate for f, computed here when not given, or |f(x + p)|
    or |J p| where larger).
    Where the order falls short and the largest step passes some 0 < |x_i| < 1, the steps start
    again from TAYLOR_FIRST_STEP times the smallest such |x_i|; a finite order of a right
    derivative there stands (``beside``: that |x_i|).
    """
    x = tr.value(wrt)
    scale = rounding_scale(tr, of, wrt) if scale is None else scale
    v = rng.standard_normal(x.shape)
    if _symmetric_operand(tr, wrt, of) is not None:
        v = _symmetric_part(v)  # (as the full check's directions: see _symmetrised)
    h0 = TAYLOR_FIRST_STEP * max(1.0, float(np.max(np.abs(x))) if x.size else 1.0)
    found = _observed_order(tr, of, wrt, v, h0, halvings, max_steps, scale, along)
    beside = np.abs(x)[(np.abs(x) > 0) & (np.abs(x) < 1) & (h0 * np.abs(v) > np.abs(x))]
    if not found.order >= TAYLOR_MIN_ORDER and beside.size:
        # (steps that pass some |x_i| leave the scale a function of x changes on, log(x) at 1e-8,
        # or its domain: as the directional differences do, the steps start from 1e-2 of the
        # smallest such |x_i| instead, along the same direction (scaling each element by its own
        # |x_i| would shrink the small elements' share of a wrong slope), and decide where they
        # measure the order of a right derivative: a finite one, since a remainder at rounding
        # level at every step (inf) says nothing, and passed a slope 1% wrong at 1e-9)
        again = _observed_order(tr, of, wrt, v, TAYLOR_FIRST_STEP * float(beside.min()), halvings, max_steps,
                                scale, along)
        if math.isfinite(again.order) and again.order >= TAYLOR_MIN_ORDER:
            return again._replace(beside=float(beside.min()))
    return found


def _observed_order(tr: Traced, of: str, wrt: str, v: np.ndarray, h0: float, halvings: int, max_steps: int,
                    scale: np.ndarray, along) -> TaylorOrder:
    """taylor_order's order along v at the steps h0 / 2^k."""
    names = tr.tape.names
    widest = _pass_from(tr, names[wrt], (names[of],), None).widest
    batch = halvings if widest * halvings <= TAYLOR_ONE_PASS_ELEMENTS else TAYLOR_CHUNK
    rems, floors, flipped = [], [], ()
    for start in range(0, halvings, batch):
        hs = h0 / 2.0 ** np.arange(start, min(start + batch, halvings))
        rem, floor, seen = _taylor_remainders(tr, of, wrt, v, hs, max_steps, scale, along)
        flipped += tuple(g for g in seen if g not in flipped)
        end = _end_of_rounding_chunk(rem, floor)
        rems.append(rem[:end])
        floors.append(floor[:end])
        if end is not None:
            break  # at rounding level: the smaller steps would see rounding alone
    rem, floor = np.concatenate(rems), np.concatenate(floors)
    with np.errstate(all="ignore"):
        cubic_gone = 8 * rem[1:] - rem[:-1]  # (step i: h_i, with h_i / 2)
        order = _order_at_small_steps(rem, floor)
        if not order >= TAYLOR_MIN_ORDER:
            order = max(order, _order_at_small_steps(cubic_gone, 8 * floor[1:] + floor[:-1]))
    return TaylorOrder(order, flipped, h0 * float(np.max(np.abs(v), initial=0.0)))


def _end_of_rounding_chunk(rem: np.ndarray, floor: np.ndarray) -> int | None:
    """The end of the first TAYLOR_CHUNK of rows (steps) whose remainders are all at rounding
    level, where the steps stop; None if there is none."""
    quiet = (np.isfinite(rem) & (np.abs(rem) <= floor)).reshape(len(rem), -1).all(axis=1)
    for start in range(0, len(rem), TAYLOR_CHUNK):
        if quiet[start:start + TAYLOR_CHUNK].all():
            return start + TAYLOR_CHUNK
    return None


def _taylor_remainders(tr: Traced, of: str, wrt: str, v: np.ndarray, hs: np.ndarray, max_steps: int,
                       scale: np.ndarray, along=None):
    """(remainders, their rounding floors, the guards a step changed) of the output at the
    steps p = (x + h v) - x for h in hs, in one batch (one row per step); scale: f's rounding
    in units of eps (see rounding_scale), at least |f(x)|; along: see taylor_order."""
    x = tr.value(wrt)
    moved = x + hs.reshape((-1,) + (1,) * x.ndim) * v
    (ys,), (flipped,) = evaluate_batch(tr, wrt, moved, [of], max_steps=max_steps)
    y0 = tr.value(of)
    jp = (along or (lambda p: _tangents(tr, wrt, [of], p)[0]))(moved - x)
    jp = np.zeros(ys.shape) if jp is None else jp
    with np.errstate(all="ignore"):
        rem = ys - y0 - jp
        size = np.maximum(np.maximum(np.abs(ys), scale), np.abs(jp))
    return rem, TAYLOR_ROUNDING * stencil.EPS * size, flipped


def _order_at_small_steps(rem: np.ndarray, floor: np.ndarray) -> float:
    """The order of rem (one row per step, the steps halving) from the last TAYLOR_LAST_PAIRS pairs
    of consecutive steps whose largest remainder above its floor (rounding) is non-zero; else
    inf when the remainder is rounding alone at the smallest step (f is linear there, though a
    larger step may leave its domain: sqrt(x)^2 near 0), nan when it is not finite there."""
    k = len(rem)
    seen = np.where(np.abs(rem) > floor, np.abs(rem), 0.0).reshape(k, -1)
    seen[~np.isfinite(rem.reshape(k, -1))] = np.nan
    size = np.max(seen, axis=1, initial=0.0)
    pairs = [i for i in range(k - 1) if size[i] > 0 and size[i + 1] > 0]
    if not pairs:
        # (or above rounding at one step and below it at the next: it fell by the floor at once)
        return math.inf if size[-1] == 0 else math.nan
    last = pairs[-TAYLOR_LAST_PAIRS:]
    return float(np.median([np.log2(size[i] / size[i + 1]) for i in last]))


def _check_expect(tr: Traced, name, outs, wrts, expect: dict, tol, expect_name=None):
    """Compare reverse mode with a stored `grad` or `jacobian` JSON object."""
    results = []
    what = expect_words(expect_name)
    if "gradient" in expect:
        of = expect.get("of") or outs[0]
        stored = {of: expect["gradient"]}
    elif "jacobian" in expect:
        stored = expect["jacobian"]
    else:
        raise UsageError(f"{what}: the file holds neither a 'gradient' nor a 'jacobian'",
                         hint="store the output of gradcalc grad or jacobian with -f json", option="expect")
    kind = "gradient" if "gradient" in expect else "jacobian"
    if not isinstance(stored, dict) or not all(isinstance(row, dict) for row in stored.values()):
        command = "grad" if kind == "gradient" else "jacobian"
        raise UsageError(f"{what}: '{kind}' must map names to values, as gradcalc {command} "
                         "-f json writes it", hint="store the output of gradcalc grad or jacobian with -f json",
                         option="expect")
    for o, row in stored.items():
        if o not in tr.tape.names:
            raise UsageError(f"{what}: '{o}' is not a name in the program", name=o, option="expect")
        ws = [w for w in row if w in tr.tape.names]
        blocks = jacobian_blocks(tr, [o], ws, "rev")[o]
        for w in ws:
            shape = tr.value(o).shape + tr.value(w).shape
            got = np.zeros(shape) if blocks[w] is None else blocks[w]
            results.append(_expected_entry(name, o, w, got, row[w], kind, tol, what))
    if not results:  # ("gradient": {}, or only names the program does not have: it would pass unseen)
        raise UsageError(f"{what} records no derivative of the program: it compares nothing",
                         hint=f"refresh it with {option('update_expect')} (it records the derivative of every "
                              "input), or store the output of gradcalc grad or jacobian with -f json",
                         option="expect")
    return results


def _expected_entry(name, o, w, got: np.ndarray, entry, kind: str, tol, what: str) -> CheckResult:
    """One stored derivative compared with reverse mode's.  A null is a derivative with no
    path to the output (grad --unconnected none writes it): zero, in the computed shape."""
    try:
        want = np.zeros(got.shape) if entry is None else array_from_json(entry)
    except JSONNumberError:
        raise ValueError_(f"{what}: the stored {kind} of '{w}' is not a number or a "
                          "nested list of numbers", name=w, option="expect") from None
    if want.shape != got.shape:
        return CheckResult(name, 0, o, w, math.inf, math.inf, [], "expect", 0.0, False,
                           [f"stored shape {want.shape} != {got.shape}"], {}, "expect")
    ok, mabs, mrel, worst = compare(got, want, *tol)
    notes, facts = [], {}
    if not ok:
        idx = "".join(f"[{i}]" for i in worst)
        facts = breach(got, want, worst, *tol, ref_name="stored")
        stored = "null (no path to the output: 0)" if entry is None else _g(want[tuple(worst)])
        notes.append(f"entry {kind}['{w}']{idx}: stored {stored}, computed {_g(got[tuple(worst)])} "
                     f"(|computed - stored| = {abs(facts['ad'] - facts['stored']):.3g} > {facts['allowed']:.3g} "
                     f"allowed: {facts['bound']} bound)")
    if not np.isfinite(got).all():  # (compare lets a nan meet a stored nan; SPEC §7 fails it)
        ok, worst = fail_non_finite(got, want, ok, worst, tol, notes)
        mabs, mrel = unmeasured_errors(got, want, mabs, mrel)
    return CheckResult(name, 0, o, w, mabs, mrel, worst, "expect", 0.0, ok, notes, facts, "expect")


def _g(x) -> str:
    return repr(float(x))
