"""One command's run on one program: what every command (grad, check, --exec...) asks of it.

Tracing a source quietly, reading ``at=`` values, selecting the names a command
works on (``of``, ``wrt``), one eager backward pass and the Jacobian blocks.
It sits below :mod:`.api`, :mod:`.numerics` and :mod:`.blackbox`, which all use it.
"""
from __future__ import annotations

import functools
import gc
import math

import numpy as np

from .batched import JVP_FOLDS, VJP_FOLDS, BatchedBuilder
from .errors import (GradcalcError, LimitError, Source, UsageError, ValueError_, did_you_mean, listed, option,
                     to_pos)
from .lower import DEFAULT_MAX_STEPS, Traced, trace
from .syntax import Program
from .syntax import parse as parse_text
from .tape import all_finite
from .transforms import backward, forward, jacobian_row, reaching


def quiet(fn):
    """Run with NumPy's floating-point warnings off (gradcalc reports non-finite values
    itself) and Python's cycle collector paused: tracing makes many small objects and no
    cycles, and the collector's passes over them cost a fifth of a long program's time."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        paused = gc.isenabled()
        gc.disable()
        try:
            with np.errstate(all="ignore"):
                return fn(*args, **kwargs)
        except GradcalcError as err:  # say which program, wherever the error arose
            source = args[0] if args else kwargs.get("source")
            if isinstance(source, Program):
                err.located(source.source)
            elif isinstance(source, str):
                err.located(Source(source))
            raise
        finally:
            if paused:
                gc.enable()
    return wrapper


def parse(source: str | Program, label: str = "<expr>") -> Program:
    """Parse program text into a Program (a Program is returned as it is)."""
    if isinstance(source, Program):
        return source
    if not isinstance(source, str):
        raise UsageError(f"a program is text (a str) or a parsed Program, not {type(source).__name__}")
    return parse_text(source, label)


def trace_source(source, at, max_elements, sample=None, max_steps=DEFAULT_MAX_STEPS, record=True,
                 release=False) -> Traced:
    """Parse and trace source at at; with record=False, keeping no tape (values only: eval); with
    release=True, freeing the arrays no derivative rule reads (for passes that read only what the
    rules read: grad, vjp, jvp, jacobian, hessian; check restores what else it reads)."""
    program = parse(source)
    check_limits(max_elements, max_steps)
    return trace(program, as_arrays(at, max_elements), max_elements=max_elements, sample=sample,
                 max_steps=max_steps, record=record, release=release)


def check_limits(max_elements, max_steps) -> None:
    """Refuse a max_elements or max_steps that is not a positive whole number (the command
    line's option types say so; the API's keywords are checked here)."""
    for name, v in (("max_elements", max_elements), ("max_steps", max_steps)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise UsageError(f"{option(name)} must be a positive integer, not {v!r:.60}", option=name)


def as_arrays(at, max_elements=None) -> dict:
    """at= of the API: numbers, nested lists or arrays of numbers, as float64 arrays (each
    within max_elements, where given, as the command line's --at values are)."""
    if at is not None and not isinstance(at, dict) or any(not isinstance(k, str) for k in at or ()):
        raise UsageError(f"at= is a dict of input name -> value, not {at!r:.60}", option="at")
    out = {k: float_array(v, f"the value given for '{k}'") for k, v in (at or {}).items()}
    for k, v in out.items():
        if max_elements is not None and v.size > max_elements:
            raise LimitError(f"the value given for '{k}' has shape {v.shape}, {v.size} elements, more than "
                             f"{option('max_elements')}={max_elements}", name=k, option="max_elements")
    return out


def float_array(v, what: str) -> np.ndarray:
    """A value the API was given (a number, nested lists or an array of numbers) as a float64
    array; ``what`` names it in the error for anything else (a string, a complex number, ragged
    lists)."""
    try:
        given = np.asarray(v)
        if given.dtype.kind in "biuf":  # numbers (not text, nor complex numbers, which NumPy would convert)
            return given.astype(np.float64, copy=False)
        if given.dtype.kind == "O" and all(isinstance(e, (int, float)) for e in given.flat):
            return np.asarray(v, dtype=np.float64)  # (Python ints past int64's range, within float64's)
    except (ValueError, TypeError, OverflowError):
        pass
    raise ValueError_(f"{what} is not a number or a (rectangular) array of numbers: {_short_repr(v)}")


def _short_repr(v) -> str:
    """v's repr cut short, made without the whole of it: a list nested thousands deep, or of
    ten million elements, is shown by its first levels and elements (reprlib)."""
    import reprlib  # (an error path only)
    brief = reprlib.Repr()
    brief.maxlevel, brief.maxlist, brief.maxtuple, brief.maxother = 3, 4, 4, 60
    return brief.repr(v)[:60]


def select_names(tr: Traced, names, what: str, default, among=None) -> list[str]:
    """names, each checked against the program's names (or among them: jvp's inputs).

    ``what`` is the option they were given as: its keyword ("wrt"), which errors word
    through :func:`errors.option`, or a text already worded so (``option("wrt")``)."""
    key = what if what.isidentifier() else None
    if names is None:
        return list(default)
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise UsageError(f"{option(key) if key else what} takes a name or a list of names, not {names!r:.60}",
                         option=key)
    out = []
    known = tr.tape.names if among is None else among
    kind = "named values" if among is None else "inputs"
    for n in names:
        if n not in tr.tape.names:
            raise _no_such_name(tr, n, option(key) if key else what, known, kind, key)
        if n not in out:
            out.append(n)
    return out


def _no_such_name(tr: Traced, n: str, what: str, known, kind: str, key) -> UsageError:
    """The error for a name selected that the run has no value for: one the program assigns
    only on a path not taken says where (SPEC §2.2), any other is not a name of the program."""
    from .run import analyse
    loc = analyse(tr.program).assigned.get(n)
    if loc is not None:
        p = to_pos(loc)
        return UsageError(f"{what} '{n}' has no value: it is assigned at line {p.line}, column {p.col}, which did "
                          "not run at this point", name=n, option=key,
                          hint="its branch or loop did not run here").located(tr.program.source)
    hint = did_you_mean(n, known) or (f"the {kind} are: {listed(known)}" if known else f"the program has no {kind}")
    return UsageError(f"{what} '{n}' is not a name in the program", hint=hint, name=n,
                      option=key).located(tr.program.source)


def select_output(tr: Traced, of) -> str:
    if of is None:
        if tr.tape.output is None:
            raise tr.output_error or UsageError("the program has no output")
        return tr.tape.output
    names = select_names(tr, [of] if isinstance(of, str) else of, "of", ())
    if len(names) != 1:  # (grad, jvp, hessian: one output; the CLI words it with the command)
        raise UsageError(f"{option('of')} names one output here, got {len(names)}", option="of",
                         hint="jacobian, vjp and check take several outputs")
    return names[0]


def inputs_only(tr: Traced, names, command: str):
    """Refuse an intermediate value among names: command (jvp, hessian, forward-mode
    jacobian) differentiates with respect to inputs only."""
    for n in names:
        if n not in tr.tape.inputs:
            hint = (f"use {option('mode')} rev for intermediate values" if command.startswith("jacobian")
                    else "use grad, jacobian or vjp for intermediate values")
            raise UsageError(f"{command} differentiates with respect to inputs only; '{n}' is "
                             "an intermediate value", hint=hint, name=n)


def eager_backward(tr: Traced, seeds: dict, wrt: list, *, warn: bool = True) -> dict:
    """One eager backward pass -> {wrt name: array or None}, with plain matrix products (see
    transforms.backward's safe_products).  Only when a result is not finite does a second
    pass look for the rule that made it so, to name it in a warning (unless not warn), with
    safe matrix products; its results are returned.  (grad and vjp trace with ``release=True``:
    the arrays no rule reads may be gone already; both passes read none of them.)"""
    args = (tr.builder, tr.tape.equations, seeds, [tr.tape.names[n] for n in wrt])
    finite: set = set()  # results certified finite by backward: no need to look at them
    found = backward(*args, eager=True, check=False, finite=finite, safe_products=False)
    if any(v is not None and var not in finite and not all_finite(np.asarray(v)) for var, v in found.items()):
        found = backward(*args, eager=True, check=warn)  # with safe matrix products, and warnings
    return own_arrays({n: found[tr.tape.names[n]] for n in wrt}, seeds)


def own_arrays(results: dict, seeds: dict) -> dict:
    """Each result an array of its own that may be written into: a rule may hand a cotangent
    on as it is, so that a result can be the caller's own seed (vjp of ``b = x; b``), the
    same array as another result (``sum(x + y)``: x's and y's), or a read-only broadcast
    view (``sum(x)``'s seed of ones).  Such a result is copied; the others are returned.
    Results are told apart by the object that holds their memory (the end of their chain of
    bases), not pairwise: a Jacobian with respect to 10,000 scalar inputs has 10,000 results."""
    seeds = [s for s in seeds.values() if isinstance(s, np.ndarray)]
    holders: set = set()  # ids of the objects holding the results' memory so far
    out = {}
    for name, v in results.items():
        if isinstance(v, np.ndarray):
            if not v.flags.writeable or id(_memory_holder(v)) in holders \
                    or any(np.may_share_memory(v, s) for s in seeds):
                v = v.copy()
            holders.add(id(_memory_holder(v)))
        out[name] = v
    return out


def _memory_holder(v: np.ndarray):
    """The object at the end of v's chain of bases: the array (or buffer) that owns its memory,
    the same for every view of it."""
    while v.base is not None:
        v = v.base
    return v


def jacobian_blocks(tr: Traced, outs: list, wrt: list, mode: str) -> dict:
    """{of: {wrt: block or None}} for a traced program, by batched passes over groups of outputs
    (mode "rev", see _output_groups) or one batched tangent pass (mode "fwd"); None means
    unconnected: no differentiable path leads from that input to that output."""
    names, b, eqs = tr.tape.names, tr.builder, tr.tape.equations
    reach = reaching(eqs, [names[w] for w in wrt])
    connected = {o: [reach.get(names[o], 0) >> i & 1 for i in range(len(wrt))] for o in outs}
    blocks: dict = {o: {} for o in outs}
    if mode == "rev":
        for group in _output_groups(tr, outs, wrt):
            for o, row in zip(group, _reverse_rows(tr, group, wrt)):
                blocks[o] = {w: block if linked else None for w, block, linked in zip(wrt, row, connected[o])}
        return blocks
    out_size = sum(tr.value(o).size for o in outs)
    n = sum(tr.value(w).size for w in wrt)
    if n == 0:  # nothing to differentiate with respect to: empty blocks
        return {o: {w: np.zeros(tr.value(o).shape + tr.value(w).shape) for w in wrt} for o in outs}
    b.check_size((n, max(out_size, 1)), what="the Jacobian")
    # One eager tangent pass on every column of the identity at once (see batched.py).
    batch = BatchedBuilder(b, n, what="the forward pass for the Jacobian")
    seeds = batch.seeds([tr.value(w).shape for w in wrt])
    tan = forward(b, eqs, {names[w]: s for w, s in zip(wrt, seeds)}, eager=True, check=False,
                  keep={names[o] for o in outs}, fold=JVP_FOLDS)
    shapes = [tr.value(w).shape for w in wrt]
    for o in outs:
        t = tan.get(names[o])
        row = [None] * len(wrt) if t is None else jacobian_row(batch.rows(t), tr.value(o).shape, shapes)
        blocks[o] = {w: block if linked else None for w, block, linked in zip(wrt, row, connected[o])}
    return blocks


#: Rows a reverse pass of several outputs stacks at most (see _output_groups).
GROUP_ROWS = 256


def _output_groups(tr: Traced, outs: list, wrt: list) -> list:
    """The outputs of a reverse-mode Jacobian in groups, each group one batched backward pass
    (a row for each of its outputs' elements): a pass walks the whole tape, so that a pass per
    output would make a thousand scalar outputs of a long program cost a thousand walks.  A
    group holds up to GROUP_ROWS rows, fewer where the tape's widest value times the rows would
    pass an eighth of the element budget (a pass's values are rows × their size) or the rows of
    the Jacobian the budget (a group is refused only where one of its outputs alone would be),
    and never two outputs of one variable (their seeds would land on one).  An output larger
    than that, or an empty one, is a group of its own."""
    if len(outs) == 1:
        return [outs]
    names, budget = tr.tape.names, tr.builder.max_elements
    widest = widest_value(tr)
    width = sum(tr.value(w).size for w in wrt)  # (a row of the Jacobian)
    cap = max(1, min(GROUP_ROWS, budget // 8 // max(widest, 1), budget // max(width, 1)))
    groups: list = []
    rows, taken = cap, set()  # the last group's rows (a full group: start one) and variables
    for o in outs:
        m = tr.value(o).size
        if rows + m > cap or m == 0 or names[o] in taken:
            groups.append([])
            rows, taken = 0, set()
        groups[-1].append(o)
        taken.add(names[o])
        rows += m or cap  # (an empty output: a group of its own)
    return groups


def widest_value(tr: Traced) -> int:
    """The most elements of any value on tr's tape: what a batched pass's rows each hold at most."""
    return max(map(math.prod, tr.builder.shapes.values()), default=1)


def _reverse_rows(tr: Traced, group: list, wrt: list) -> list:
    """[[block of (output, input) for each input] for each output of group]: one eager backward
    pass on every row of the identity over the group's outputs at once (see batched.py).  A
    row reads only its own output's seed, so its numbers are those of a pass of that output
    alone (the other outputs' rows add zeros to it: a -0.0 there may come out +0.0)."""
    names, b = tr.tape.names, tr.builder
    shapes = [tr.value(o).shape for o in group]
    m = sum(map(math.prod, shapes))
    if m == 0:  # an empty output has an empty Jacobian (a group of its own)
        return [[np.zeros(shapes[0] + tr.value(w).shape) for w in wrt]]
    width = max(sum(tr.value(w).size for w in wrt), 1)
    for o, shape in zip(group, shapes):  # (each output's own: a group stays within the budget, see _output_groups)
        b.check_size((math.prod(shape), width), what=f"the Jacobian of '{o}'")
    if m == 1:
        return [_one_row(tr, group[0], wrt)]
    batch = BatchedBuilder(b, m, what=f"the reverse pass for the Jacobian of {_outputs_named(group)}")
    seeds = batch.seeds(shapes)
    found = backward(b, tr.tape.equations, {names[o]: s for o, s in zip(group, seeds)}, [names[w] for w in wrt],
                     eager=True, check=False, fold=VJP_FOLDS)
    found = [None if found[names[w]] is None else batch.rows(found[names[w]]) for w in wrt]
    rows, start = [], 0
    for shape in shapes:
        size = math.prod(shape)
        rows.append([None if r is None else r[start:start + size].reshape(shape + tr.value(w).shape)
                     for w, r in zip(wrt, found)])
        start += size
    return rows


def _one_row(tr: Traced, o: str, wrt: list) -> list:
    """[block of (o, input) for each input] of an output with one element, by grad's own pass
    (eager_backward): a batch of one row would pay a batched pass's cost for each equation
    (about ten times the plain pass's over a long scalar program) to stack nothing, and check,
    comparing this, compares what grad computes (its inline scalar rules, its plain matrix
    products), not a batched twin of it."""
    shape = tr.value(o).shape
    found = eager_backward(tr, {tr.tape.names[o]: np.ones(shape)}, wrt, warn=False)  # (jacobian warns itself)
    return [None if found[w] is None else np.asarray(found[w]).reshape(shape + tr.value(w).shape) for w in wrt]


def _outputs_named(names: list) -> str:
    """'a', or 'a' and 2 other outputs."""
    rest = len(names) - 1
    return f"'{names[0]}'" + (f" and {rest} other output{'s' * (rest > 1)}" if rest else "")
