"""The Python API: parse, evaluate, grad, jacobian, vjp, jvp, hessian.

Each function takes program text (or a parsed :class:`Program`) and keyword
arguments that match the CLI's options, and returns a :class:`Result`: a dict
of NumPy arrays keyed by name, with what else the command reports (``value``,
``unconnected``, ``warnings``...) as attributes.
"""
from __future__ import annotations

import numpy as np

from .batched import JVP_FOLDS, BatchedBuilder
from .errors import ShapeError, UsageError, option
from .graphs import graph  # (re-exported: gradcalc.api.graph and gradcalc.graph)
from .lower import DEFAULT_MAX_STEPS, Traced
from .results import Result, symbolic_part
from .session import (eager_backward, float_array, inputs_only, jacobian_blocks, own_arrays, parse,
                      quiet, select_names, select_output, trace_source)
from .tape import DEFAULT_MAX_ELEMENTS, Warning_, all_finite
from .transforms import backward, forward, jacobian_row, needed_and_frees

__all__ = ["parse", "evaluate", "grad", "vjp", "jvp", "jacobian", "hessian", "graph", "Result"]

UNCONNECTED = ("zero", "none", "error")
#: The parts of a closed form that results carry (symbolic.py keeps more for itself).
SYMBOLIC_PARTS = ("text", "latex", "value", "note")


def _warnings(tr: Traced) -> list[str]:
    return [w.message for w in tr.warnings]


def _point(tr: Traced) -> dict:
    """The point a run used: every input's value, {name: array}, defaults included."""
    return {n: tr.value(n) for n in tr.tape.inputs}


def _unconnected(tr, wrt, found: dict, mode: str, shape_of, of_desc: str):
    """Fill in unconnected derivatives as zero / None, or raise; returns (values, names)."""
    if not isinstance(mode, str) or mode not in UNCONNECTED:
        raise UsageError(f"{option('unconnected')} must be one of {', '.join(UNCONNECTED)}, not '{mode}'",
                         option="unconnected")
    values, missing = {}, []
    for name in wrt:
        v = found.get(name)
        if v is None:
            missing.append(name)
            if mode == "error":
                raise UsageError(f"'{name}' has no differentiable path to {of_desc}", name=name,
                                 option="unconnected", hint=f"remove it from {option('wrt')}, or use "
                                 f"{option('unconnected')} zero").located(tr.program.source)
            v = np.zeros(shape_of(name)) if mode == "zero" else None
        values[name] = None if v is None else np.asarray(v)
    return values, missing


# ==========================================================================


@quiet
def evaluate(source, at=None, of=None, all: bool = False, *, max_elements=DEFAULT_MAX_ELEMENTS,
        max_steps=DEFAULT_MAX_STEPS) -> Result:
    """The values of the output (or of every name with all=True, or of each name in of)."""
    if all and of is not None:  # (--of was ignored: which of the two was meant is not ours to guess)
        raise UsageError(f"{option('all')} shows every named value and {option('of')} some of them: "
                         "give one of the two", option="all",
                         hint=f"leave out {option('of')} for every value, or {option('all')} for those named")
    # No derivative is taken: a run that keeps no tape, in memory bounded on a long loop.
    tr = trace_source(source, at, max_elements, max_steps=max_steps, record=False)
    if all:
        names = list(tr.tape.names)
    elif of is None:
        names = [select_output(tr, None)]
    else:
        names = select_names(tr, of, "of", ())
    return Result({n: tr.value(n) for n in names}, command="eval", of=names, warnings=_warnings(tr))


@quiet
def grad(source, at=None, of=None, wrt=None, sum: bool = False, unconnected: str = "zero", *,
         symbolic: bool = False, max_elements=DEFAULT_MAX_ELEMENTS,
        max_steps=DEFAULT_MAX_STEPS) -> Result:
    """The gradient of a scalar output (of its sum with sum=True) with respect to wrt.

    With symbolic=True, ``Result.symbolic`` also holds sympy's closed forms
    {wrt: {"text", "latex", "value", "note"}}.  Without a value for some input, symbolic=True
    gives the closed forms alone (no value, no gradient; SPEC §5).
    """
    if symbolic and not sum:
        from .symbolic import closed_form_alone, lacks_a_point
        if lacks_a_point(source, at):
            return closed_form_alone("grad", source, at, of, wrt, max_elements=max_elements,
                                     max_steps=max_steps)
    # (symbolic reads the tape's values after the pass: nothing is freed then)
    tr = trace_source(source, at, max_elements, max_steps=max_steps, release=not symbolic)
    out = select_output(tr, of)
    wrt = select_names(tr, wrt, "wrt", tr.tape.inputs)
    y = tr.value(out)
    if y.size != 1 and not sum:
        raise ShapeError(f"grad needs a scalar output, but '{out}' has shape {y.shape}",
                         tr.tape.positions.get(out), name=out,
                         hint=f"use 'gradcalc jacobian', 'gradcalc vjp {option('cotangent')} ...', or "
                              f"'grad {option('sum')}' for the gradient of its sum").located(tr.program.source)
    values = eager_backward(tr, {tr.tape.names[out]: np.ones(y.shape)}, wrt)
    gradient, missing = _unconnected(tr, wrt, values, unconnected,
                                     lambda n: tr.value(n).shape, f"'{out}'")
    closed = None
    if symbolic:
        if sum:
            raise UsageError(f"{option('symbolic')} differentiates a scalar output; with {option('sum')}, "
                             "write sum(...) in the program instead", option="symbolic")
        from .symbolic import symbolic_gradient
        closed = symbolic_part(symbolic_gradient(tr, out, wrt), SYMBOLIC_PARTS)
    return Result(gradient, command="grad", of=out, at=_point(tr), value=np.sum(y) if sum else y,
                  unconnected=missing, warnings=_warnings(tr), symbolic=closed)


@quiet
def vjp(source, cotangent, at=None, of=None, wrt=None, unconnected: str = "zero", *,
        max_elements=DEFAULT_MAX_ELEMENTS,
        max_steps=DEFAULT_MAX_STEPS) -> Result:
    """v^T J: the cotangent pulled back to wrt.

    ``cotangent`` is an array for one output, or {output name: array} for
    several (the result is then the sum of their VJPs).  A scalar broadcasts.
    """
    tr = trace_source(source, at, max_elements, max_steps=max_steps, release=True)
    if isinstance(cotangent, dict):
        if not cotangent:
            raise UsageError(f"{option('cotangent')} names no output", option="cotangent",
                             hint="give {output name: value}, or one value for the output")
        names = select_names(tr, list(cotangent), "cotangent", ())
        _no_cotangent_for_an_input(tr, names, of)
        outs = [select_output(tr, None)] if of is None else select_names(tr, of, "of", ())
        _cotangents_name_outputs(names, outs, of)
        missing_ct = [o for o in outs if o not in cotangent]
        if missing_ct:
            raise UsageError(f"no cotangent for output '{missing_ct[0]}'", name=missing_ct[0],
                             option="cotangent", hint=f"give {option('cotangent')} {missing_ct[0]}=...")
        cts = {o: cotangent[o] for o in outs}
    else:
        if of is not None and not isinstance(of, str):  # (a list of names: one of them)
            of = select_names(tr, of, "of", ())
            if len(of) != 1:
                raise UsageError(f"with several {option('of')}, give one {option('cotangent')} NAME=VALUE for each"
                                 if of else f"{option('of')} names no output", option="cotangent")
            of = of[0]
        outs = [select_output(tr, of)]
        cts = {outs[0]: cotangent}
    wrt = select_names(tr, wrt, "wrt", tr.tape.inputs)
    seeds = {}
    for o, v in cts.items():
        shape = tr.value(o).shape
        v = float_array(v, f"the cotangent for '{o}'")
        if v.shape != shape:
            if v.ndim != 0:
                raise ShapeError(f"the cotangent for '{o}' has shape {v.shape}, but '{o}' has "
                                 f"shape {shape}", hint="a cotangent has the output's shape (or is a scalar)")
            v = np.broadcast_to(v, shape)
        seeds[tr.tape.names[o]] = v
    values = eager_backward(tr, seeds, wrt)
    result, missing = _unconnected(tr, wrt, values, unconnected, lambda n: tr.value(n).shape,
                                   "the outputs")
    value = tr.value(outs[0]) if len(outs) == 1 else {o: tr.value(o) for o in outs}
    return Result(result, command="vjp", of=outs if len(outs) > 1 else outs[0], value=value,
                  cotangent={o: np.broadcast_to(np.asarray(v, dtype=np.float64), tr.value(o).shape)
                             for o, v in cts.items()},
                  unconnected=missing, warnings=_warnings(tr))


def _no_cotangent_for_an_input(tr: Traced, names: list, of) -> None:
    """Without --of, a --cotangent NAME=V for an input is its own error: vjp 'x*x' --cotangent
    x=... would differentiate x with respect to itself."""
    default = tr.tape.output
    for n in names:
        if of is None and n in tr.tape.inputs:
            hint = (f"the output is '{default}': give {option('cotangent')} VALUE (or {default}=VALUE)"
                    if default is not None else f"name an output with {option('of')}")
            raise UsageError(f"{option('cotangent')} '{n}' names an input, not an output", name=n,
                             option="cotangent", hint=hint)


def _cotangents_name_outputs(names: list, outs: list, of) -> None:
    """A --cotangent NAME=V names an output: one of --of when it is given, else the program's
    output (SPEC §5: never a silent change of --of)."""
    for n in names:
        if n in outs:
            continue
        if of is not None:
            raise UsageError(f"{option('cotangent')} '{n}' is not one of the outputs ({', '.join(outs)})",
                             name=n, option="cotangent", hint=f"add {option('of')} {n}, or drop its cotangent")
        raise UsageError(f"{option('cotangent')} '{n}' is not an output: the output is '{outs[0]}'", name=n,
                         option="cotangent", hint=f"for the output, give {option('cotangent')} VALUE (or "
                         f"{outs[0]}=VALUE); to take '{n}' as an output, add {option('of')} {n}")


@quiet
def jvp(source, tangent: dict, at=None, of=None, wrt=None, *, max_elements=DEFAULT_MAX_ELEMENTS,
        max_steps=DEFAULT_MAX_STEPS) -> Result:
    """J v: forward mode along tangent {input name: array}; missing inputs have zero tangent.
    ``wrt`` (default: every input) restricts the inputs that may carry a tangent."""
    tr = trace_source(source, at, max_elements, max_steps=max_steps, release=True)
    out = select_output(tr, of)
    if not isinstance(tangent, dict):
        raise UsageError(f"{option('tangent')} is a dict of input name -> value, not {tangent!r:.60}",
                         option="tangent")
    names = select_names(tr, list(tangent), "tangent", (), among=tr.tape.inputs)  # (jvp: inputs only)
    inputs_only(tr, names, "jvp")
    if wrt is not None:
        allowed = select_names(tr, wrt, "wrt", (), among=tr.tape.inputs)
        inputs_only(tr, allowed, "jvp")
        for n in names:
            if n not in allowed:
                raise UsageError(f"{option('tangent')} '{n}' is for an input outside {option('wrt')} "
                                 f"({', '.join(allowed)})", name=n, option="tangent",
                                 hint=f"add it to {option('wrt')}, or drop its tangent")
    b = tr.builder
    tangents = {}
    for n in names:
        shape = tr.value(n).shape
        v = float_array(tangent[n], f"the tangent for '{n}'")
        if v.shape != shape:
            if v.ndim != 0:
                raise ShapeError(f"the tangent for '{n}' has shape {v.shape}, but '{n}' has shape {shape}")
            v = np.broadcast_to(v, shape)
        tangents[tr.tape.inputs[n]] = v
    var = tr.tape.names[out]
    # The batched pass of the Jacobian, on one row: its folds write a loop's updates into
    # the tangent it made, where the rules would copy it at each update.
    batch = BatchedBuilder(b, 1, what="the forward pass")
    seeds = {v: batch.dense(t[None]) for v, t in tangents.items()}
    t = forward(b, tr.tape.equations, seeds, eager=True, check=False, keep={var}, fold=JVP_FOLDS).get(var)
    if t is not None:
        t = batch.rows(t)[0]
        if not all_finite(t):  # name the rule behind it
            forward(b, tr.tape.equations, tangents, eager=True, check=True)
    y = tr.value(out)
    value = np.zeros(y.shape) if t is None else own_arrays({out: t}, tangents)[out]
    return Result({out: value}, command="jvp", of=out, value=y, jvp=value, warnings=_warnings(tr))


def _choose_mode(mode, out_size, wrt_size, intermediate):
    if not isinstance(mode, str) or mode not in ("auto", "rev", "fwd"):
        raise UsageError(f"{option('mode')} must be auto, rev or fwd, not '{mode}'", option="mode")
    if mode == "auto":
        return "rev" if intermediate or out_size <= wrt_size or wrt_size == 0 else "fwd"
    return mode


@quiet
def jacobian(source, at=None, of=None, wrt=None, mode: str = "auto", unconnected: str = "zero", *,
             symbolic: bool = False, max_elements=DEFAULT_MAX_ELEMENTS,
        max_steps=DEFAULT_MAX_STEPS) -> Result:
    """d of / d wrt for each output and wrt, of shape of.shape + wrt.shape (JAX's convention).

    Reverse mode runs one batched backward pass per output (a row per output
    element); forward mode one batched tangent pass (a column per input
    element).  ``mode="auto"`` picks the one with fewer rows.  With symbolic=True and no value
    for some input: the closed forms alone, as grad.
    """
    if symbolic:
        from .symbolic import closed_form_alone, lacks_a_point
        if lacks_a_point(source, at):
            return closed_form_alone("jacobian", source, at, of, wrt, max_elements=max_elements,
                                     max_steps=max_steps)
    tr = trace_source(source, at, max_elements, max_steps=max_steps, release=not symbolic)
    outs = [select_output(tr, None)] if of is None else select_names(tr, of, "of", ())
    wrt = select_names(tr, wrt, "wrt", tr.tape.inputs)
    out_size = sum(tr.value(o).size for o in outs)
    wrt_size = sum(tr.value(w).size for w in wrt)
    intermediate = any(w not in tr.tape.inputs for w in wrt)
    mode = _choose_mode(mode, out_size, wrt_size, intermediate)
    if mode == "fwd":
        inputs_only(tr, wrt, f"jacobian {option('mode')} fwd")
    blocks = jacobian_blocks(tr, outs, wrt, mode)
    jac, missing = {}, []
    for o in outs:
        jac[o], miss = _unconnected(tr, wrt, blocks[o], unconnected,
                                    lambda w, o=o: tr.value(o).shape + tr.value(w).shape, f"'{o}'")
        missing += [m for m in miss if m not in missing]
    # (the caller's own writable arrays: a block can be a broadcast view, sum(x)'s rows of ones)
    owned = own_arrays({(o, w): block for o in outs for w, block in jac[o].items()}, {})
    jac = {o: {w: owned[o, w] for w in jac[o]} for o in outs}
    _nonfinite(jac, "jacobian", tr)
    closed = None
    if symbolic:
        from .symbolic import symbolic_jacobian
        closed = symbolic_part(symbolic_jacobian(tr, outs, wrt), SYMBOLIC_PARTS)
    return Result(jac, command="jacobian", of=outs, at=_point(tr), value={o: tr.value(o) for o in outs},
                  mode=mode, unconnected=missing, warnings=_warnings(tr), symbolic=closed)


@quiet
def hessian(source, at=None, of=None, wrt=None, *, symbolic: bool = False, max_elements=DEFAULT_MAX_ELEMENTS,
        max_steps=DEFAULT_MAX_STEPS) -> Result:
    """Second derivatives of a scalar output: forward mode over the traced backward pass.

    The block for (wrt_i, wrt_j) has shape wrt_i.shape + wrt_j.shape.  With symbolic=True,
    ``Result.symbolic`` also holds sympy's closed forms {wrt_i: {wrt_j: {"text", "latex",
    "value", "note"}}}; without a value for some input, the closed forms alone, as grad.
    """
    if symbolic:
        from .symbolic import closed_form_alone, lacks_a_point
        if lacks_a_point(source, at):
            return closed_form_alone("hessian", source, at, of, wrt, max_elements=max_elements,
                                     max_steps=max_steps)
    tr = trace_source(source, at, max_elements, max_steps=max_steps, release=not symbolic)
    result = _hessian_at(tr, of, wrt, release=not symbolic)
    result.symbolic = None
    if symbolic:
        from .symbolic import symbolic_hessian
        result.symbolic = symbolic_part(symbolic_hessian(tr, result.of, list(result)), SYMBOLIC_PARTS)
    return result


def _hessian_at(tr: Traced, of, wrt, release: bool = False) -> Result:
    """hessian's numbers: forward mode over the traced backward pass (``release``: see
    _gradient_equations)."""
    out = select_output(tr, of)
    wrt = select_names(tr, wrt, "wrt", tr.tape.inputs)
    inputs_only(tr, wrt, "hessian")
    names, b = tr.tape.names, tr.builder
    y = tr.value(out)
    if y.size != 1:
        raise ShapeError(f"hessian needs a scalar output, but '{out}' has shape {y.shape}",
                         tr.tape.positions.get(out), name=out, option="of",
                         hint=f"select a scalar with {option('of')}, or reduce it, e.g. sum(...)").located(tr.program.source)
    size = sum(tr.value(w).size for w in wrt)
    if size == 0:  # nothing to differentiate with respect to: empty blocks
        return Result({wi: {wj: np.zeros(tr.value(wi).shape + tr.value(wj).shape) for wj in wrt} for wi in wrt},
                      command="hessian", of=out, value=y, warnings=_warnings(tr))
    n = size
    b.check_size((n, n), what="the Hessian")
    # (check=False: the passes look for non-finite values once, at the end; see below)
    grads, grad_eqns, free = _gradient_equations(tr, out, wrt, release=release)
    # The tangent pass runs once, eagerly, on every column of the identity at once.
    batch = BatchedBuilder(b, n, what="the forward pass over the backward pass for the Hessian")
    seeds = batch.seeds([tr.value(w).shape for w in wrt])
    tan = forward(b, grad_eqns, {names[w]: s for w, s in zip(wrt, seeds)}, eager=True, check=False,
                  free=free, fold=JVP_FOLDS)
    outs = [None if grads[names[w]] is None else tan.get(grads[names[w]].var) for w in wrt]
    cols = [None if t is None else batch.rows(t) for t in outs]
    hess = {}
    shapes = [tr.value(w).shape for w in wrt]
    finite = True  # (a row known finite, a band of finite diagonals, is not looked at)
    for wi, c, t, ishape in zip(wrt, cols, outs, shapes):
        if c is None:
            hess[wi] = {wj: np.zeros(ishape + jshape) for wj, jshape in zip(wrt, shapes)}
            continue
        hess[wi] = dict(zip(wrt, jacobian_row(c, ishape, shapes)))
        finite = finite and (batch.finite_band(t) or bool(np.isfinite(c).all()))
    if not finite:
        # Name the culprit: the first rule whose derivative is not finite, forward over backward:
        # the backward pass recorded again, the same equations (on new variables), with a log
        # of which operation's rule made each (which the usual, finite, case never reads).
        log: list = []
        _, grad_eqns, _ = _gradient_equations(tr, out, wrt, log)
        origin = {b.equations[k].out: b.op_name(eq.prim, eq.loc) for eq, first, end in log
                  for k in range(first, end)}
        before = len(b.warnings)
        forward(b, grad_eqns, {names[w]: np.ones(tr.value(w).shape) for w in wrt}, eager=True,
                check=True, describe=lambda e: _second_derivative_of(b, e, origin))
        if len(b.warnings) == before:
            _nonfinite(hess, "hessian", tr, of=out)
    return Result(hess, command="hessian", of=out, value=y, warnings=_warnings(tr))


def _gradient_equations(tr: Traced, out: str, wrt: list, log: list | None = None,
                        release: bool = False) -> tuple:
    """The traced backward pass of a Hessian: (its cotangents {wrt var: tracer or None}, the
    equations they depend on, and what each of those is the last to read; see
    transforms.needed_and_frees).  Only what the gradient depends on (not the output's own sum,
    say) gets a tangent rule.  ``log``: see backward.  With ``release``, the arrays it records
    that no rule reads go once nothing refers to them (Builder.release_unread: the tangent pass
    reads what the rules read): a loop of index updates records a cotangent with one element
    zeroed a step, n arrays of n elements, of which two are alive at a time."""
    names, b = tr.tape.names, tr.builder
    shape = tr.value(out).shape
    one = b.const(np.ones(shape) if shape else 1.0)  # (1.0: the NumPy scalar a seed of no axes becomes)
    if release:
        b.release_unread()
    try:
        grads = backward(b, tr.tape.equations, {names[out]: one}, [names[w] for w in wrt], log=log, check=False)
    finally:
        b.stop_freeing()
    eqns, free = needed_and_frees(b.equations, {g.var for g in grads.values() if g is not None})
    return grads, eqns, free


def _second_derivative_of(b, eq, origin: dict) -> str:
    """How a Hessian's non-finite warning names equation eq of the forward pass over the
    backward pass: a rule's equation by the operation whose derivative it is (origin), one
    of the program's own by that operation, named as written ('/', not div)."""
    if eq.out in origin:
        return f"the second derivative of '{origin[eq.out]}'"
    return f"the derivative of '{b.op_name(eq.prim, eq.loc)}'"


def _nonfinite(blocks: dict, what: str, tr: Traced, of: str | None = None):
    """Warn about non-finite blocks {row: {column: array}}, and name the rule that
    produced them: one eager backward pass of the output (``of``, or each row's
    name), watching for the first non-finite derivative."""
    names = tr.tape.names
    for o, row in blocks.items():
        bad = [w for w, v in row.items() if v is not None and not np.isfinite(v).all()]
        if not bad:
            continue
        out = of or o
        before = len(tr.builder.warnings)
        backward(tr.builder, tr.tape.equations, {names[out]: np.ones(tr.value(out).shape)},
                 [names[w] for w in tr.tape.inputs], eager=True, check=True)
        if len(tr.builder.warnings) == before:  # no rule to blame: say which block
            for w in bad:
                tr.builder.warnings.append(Warning_(f"the {what} block d{o}/d{w} has non-finite entries", None))

