"""The Python API: parse, evaluate, grad, jacobian, vjp, jvp, hessian.

Each function takes program text (or a parsed :class:`Program`) and keyword
arguments that match the CLI's options, and returns a :class:`Result`: a dict
of NumPy arrays keyed by name, with what else the command reports (``value``,
``unconnected``, ``warnings``...) as attributes.
"""
from __future__ import annotations

import numpy as np

from .errors import GradcalcError, ShapeError, UsageError, ValueError_, to_pos
from .lower import Traced, trace
from .results import Result
from .session import (as_arrays, eager_backward, identity_seed, inputs_only, jacobian_blocks, parse,
                      quiet, select_names, select_output, trace_source)
from .syntax import Program
from .tape import DEFAULT_MAX_ELEMENTS, Warning_, all_finite
from .transforms import Recording, backward, basis, forward, needed, rows_to_jacobian

UNCONNECTED = ("zero", "none", "error")


def _warnings(tr: Traced) -> list[str]:
    return [w.message for w in tr.warnings]


def _unconnected(tr, wrt, found: dict, mode: str, shape_of, of_desc: str):
    """Fill in unconnected derivatives as zero / None, or raise; returns (values, names)."""
    if mode not in UNCONNECTED:
        raise UsageError(f"--unconnected must be one of {', '.join(UNCONNECTED)}, not '{mode}'")
    values, missing = {}, []
    for name in wrt:
        v = found.get(name)
        if v is None:
            missing.append(name)
            if mode == "error":
                raise UsageError(f"'{name}' has no differentiable path to {of_desc}",
                                 hint="remove it from --wrt, or use --unconnected zero").located(tr.program.source)
            v = np.zeros(shape_of(name)) if mode == "zero" else None
        values[name] = None if v is None else np.asarray(v)
    return values, missing


# ==========================================================================


@quiet
def evaluate(source, at=None, of=None, all: bool = False, *, max_elements=DEFAULT_MAX_ELEMENTS) -> Result:
    """The values of the output (or of every name with all=True, or of each name in of)."""
    tr = trace_source(source, at, max_elements)
    if all:
        names = list(tr.tape.names)
    elif of is None:
        names = [select_output(tr, None)]
    else:
        names = select_names(tr, of, "--of", ())
    return Result({n: tr.value(n) for n in names}, of=names, warnings=_warnings(tr))


@quiet
def grad(source, at=None, of=None, wrt=None, sum: bool = False, unconnected: str = "zero", *,
         symbolic: bool = False, max_elements=DEFAULT_MAX_ELEMENTS) -> Result:
    """The gradient of a scalar output (of its sum with sum=True) with respect to wrt.

    With symbolic=True, ``Result.symbolic`` also holds sympy's closed forms
    {wrt: {"text", "latex", "value", "note"}}.
    """
    tr = trace_source(source, at, max_elements)
    out = select_output(tr, of)
    wrt = select_names(tr, wrt, "--wrt", tr.tape.inputs)
    y = tr.value(out)
    if y.size != 1 and not sum:
        raise ShapeError(f"grad needs a scalar output, but '{out}' has shape {y.shape}",
                         tr.tape.positions.get(out), hint="use 'gradcalc jacobian', 'gradcalc vjp --cotangent ...', or "
                              "'grad --sum' for the gradient of its sum").located(tr.program.source)
    values = eager_backward(tr, {tr.tape.names[out]: np.ones(y.shape)}, wrt)
    gradient, missing = _unconnected(tr, wrt, values, unconnected,
                                     lambda n: tr.value(n).shape, f"'{out}'")
    closed = None
    if symbolic:
        if sum:
            raise UsageError("--symbolic differentiates a scalar output; with --sum, write sum(...) "
                             "in the program instead")
        from .symbolic import symbolic_gradient
        closed = _public(symbolic_gradient(tr, out, wrt))
    return Result(gradient, of=out, value=np.sum(y) if sum else y, unconnected=missing,
                  warnings=_warnings(tr), symbolic=closed)


def _public(entries: dict) -> dict:
    """The printable part of symbolic results: text, LaTeX, value, note."""
    return {k: ({"text": v["text"], "latex": v["latex"], "value": v["value"], "note": v["note"]}
                if "text" in v else _public(v)) for k, v in entries.items()}


@quiet
def vjp(source, cotangent, at=None, of=None, wrt=None, unconnected: str = "zero", *,
        max_elements=DEFAULT_MAX_ELEMENTS) -> Result:
    """v^T J: the cotangent pulled back to wrt.

    ``cotangent`` is an array for one output, or {output name: array} for
    several (the result is then the sum of their VJPs).  A scalar broadcasts.
    """
    tr = trace_source(source, at, max_elements)
    if isinstance(cotangent, dict):
        outs = select_names(tr, list(cotangent) if of is None else of, "--of", ())
        missing_ct = [o for o in outs if o not in cotangent]
        if missing_ct:
            raise UsageError(f"no cotangent for output '{missing_ct[0]}'",
                             hint=f"give --cotangent {missing_ct[0]}=...")
        cts = {o: cotangent[o] for o in outs}
    else:
        outs = [select_output(tr, of)] if of is None or isinstance(of, str) or len(of) == 1 else None
        if outs is None:
            raise UsageError("with several --of, give one --cotangent NAME=VALUE for each")
        cts = {outs[0]: cotangent}
    wrt = select_names(tr, wrt, "--wrt", tr.tape.inputs)
    seeds = {}
    for o, v in cts.items():
        shape = tr.value(o).shape
        v = np.asarray(v, dtype=np.float64)
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
    return Result(result, of=outs if len(outs) > 1 else outs[0], value=value,
                  cotangent={o: np.broadcast_to(np.asarray(v, dtype=np.float64), tr.value(o).shape)
                             for o, v in cts.items()},
                  unconnected=missing, warnings=_warnings(tr))


@quiet
def jvp(source, tangent: dict, at=None, of=None, *, max_elements=DEFAULT_MAX_ELEMENTS) -> Result:
    """J v: forward mode along tangent {input name: array}; missing inputs have zero tangent."""
    tr = trace_source(source, at, max_elements)
    out = select_output(tr, of)
    names = select_names(tr, list(tangent), "--tangent", (), among=tr.tape.inputs)  # (jvp: inputs only)
    inputs_only(tr, names, "jvp")
    b = tr.builder
    tangents = {}
    for n in names:
        shape = tr.value(n).shape
        v = np.asarray(tangent[n], dtype=np.float64)
        if v.shape != shape:
            if v.ndim != 0:
                raise ShapeError(f"the tangent for '{n}' has shape {v.shape}, but '{n}' has shape {shape}")
            v = np.broadcast_to(v, shape)
        tangents[tr.tape.inputs[n]] = v
    tan = forward(b, tr.tape.equations, tangents, eager=True, check=False)
    t_out = tan.get(tr.tape.names[out])
    if t_out is not None and not all_finite(np.asarray(t_out)):  # name the rule behind it
        forward(b, tr.tape.equations, tangents, eager=True, check=True)
    y = tr.value(out)
    t = tan.get(tr.tape.names[out])
    value = np.zeros(y.shape) if t is None else np.asarray(t)
    return Result({out: value}, of=out, value=y, jvp=value, warnings=_warnings(tr))


def _choose_mode(mode, out_size, wrt_size, intermediate):
    if mode not in ("auto", "rev", "fwd"):
        raise UsageError(f"--mode must be auto, rev or fwd, not '{mode}'")
    if mode == "auto":
        return "rev" if intermediate or out_size <= wrt_size or wrt_size == 0 else "fwd"
    return mode


@quiet
def jacobian(source, at=None, of=None, wrt=None, mode: str = "auto", unconnected: str = "zero", *,
             symbolic: bool = False, max_elements=DEFAULT_MAX_ELEMENTS) -> Result:
    """d of / d wrt for each output and wrt, of shape of.shape + wrt.shape (JAX's convention).

    Reverse mode runs one batched backward pass per output (a row per output
    element); forward mode one batched tangent pass (a column per input
    element).  ``mode="auto"`` picks the one with fewer rows.
    """
    tr = trace_source(source, at, max_elements)
    outs = [select_output(tr, None)] if of is None else select_names(tr, of, "--of", ())
    wrt = select_names(tr, wrt, "--wrt", tr.tape.inputs)
    out_size = sum(tr.value(o).size for o in outs)
    wrt_size = sum(tr.value(w).size for w in wrt)
    intermediate = any(w not in tr.tape.inputs for w in wrt)
    mode = _choose_mode(mode, out_size, wrt_size, intermediate)
    if mode == "fwd":
        inputs_only(tr, wrt, "jacobian --mode fwd")
    blocks = jacobian_blocks(tr, outs, wrt, mode)
    jac, missing = {}, []
    for o in outs:
        jac[o], miss = _unconnected(tr, wrt, blocks[o], unconnected,
                                    lambda w, o=o: tr.value(o).shape + tr.value(w).shape, f"'{o}'")
        missing += [m for m in miss if m not in missing]
    _nonfinite(jac, "jacobian", tr)
    closed = None
    if symbolic:
        from .symbolic import symbolic_jacobian
        closed = _public(symbolic_jacobian(tr, outs, wrt))
    return Result(jac, of=outs, value={o: tr.value(o) for o in outs}, mode=mode,
                  unconnected=missing, warnings=_warnings(tr), symbolic=closed)


@quiet
def hessian(source, at=None, of=None, wrt=None, *, max_elements=DEFAULT_MAX_ELEMENTS) -> Result:
    """Second derivatives of a scalar output: forward mode over the traced backward pass.

    The block for (wrt_i, wrt_j) has shape wrt_i.shape + wrt_j.shape.
    """
    tr = trace_source(source, at, max_elements)
    out = select_output(tr, of)
    wrt = select_names(tr, wrt, "--wrt", tr.tape.inputs)
    inputs_only(tr, wrt, "hessian")
    names, b = tr.tape.names, tr.builder
    y = tr.value(out)
    if y.size != 1:
        raise ShapeError(f"hessian needs a scalar output, but '{out}' has shape {y.shape}",
                         tr.tape.positions.get(out), hint="select a scalar with --of, or reduce it, e.g. sum(...)").located(tr.program.source)
    size = sum(tr.value(w).size for w in wrt)
    if size == 0:  # nothing to differentiate with respect to: empty blocks
        return Result({wi: {wj: np.zeros(tr.value(wi).shape + tr.value(wj).shape) for wj in wrt} for wi in wrt},
                      of=out, value=y, warnings=_warnings(tr))
    n = size
    b.check_size((n, n), what="the Hessian")
    rec = Recording(b)
    log: list = []
    one = b.const(np.ones(y.shape))
    grads = backward(b, tr.tape.equations, {names[out]: one}, [names[w] for w in wrt], log=log)
    # Only what the gradient depends on (not the output's own sum, say) gets a tangent rule.
    grad_eqns = tuple(needed(b.equations, {g.var for g in grads.values() if g is not None}))
    seeds = {w: rec.seed(tr.value(w).shape) for w in wrt}
    tan = forward(b, grad_eqns, {names[w]: s for w, s in seeds.items()})
    outs = [None if grads[names[w]] is None else tan.get(grads[names[w]].var) for w in wrt]
    identity = identity_seed(seeds)
    if len(identity) == len(seeds):
        given = {}  # vectors only: the pass writes out (only) the identity blocks it reads whole
    else:
        given = {s.var: e for s, e in zip(seeds.values(), basis([tr.value(w).shape for w in wrt]))}
    finite: set = set()
    cols = rec.run(given, outs, n, what="the forward pass over the backward pass for the Hessian",
                   identity=identity, finite=finite)
    hess = {}
    checked = set()  # rows known to be finite
    for wi, c, t in zip(wrt, cols, outs):
        ishape = tr.value(wi).shape
        hess[wi], start = {}, 0
        if c is None or t.var in finite:
            checked.add(wi)
        for wj in wrt:
            jshape, k = tr.value(wj).shape, tr.value(wj).size
            if c is None:
                hess[wi][wj] = np.zeros(ishape + jshape)
            else:
                hess[wi][wj] = rows_to_jacobian(c[start:start + k], ishape, jshape)
            start += k
    if any(not np.isfinite(v).all() for wi, row in hess.items() if wi not in checked for v in row.values()):
        # Name the culprit: the first rule whose derivative is not finite, forward over backward.
        origin = {b.equations[k].out: b.op_name(eq.prim, eq.loc) for eq, first, end in log
                  for k in range(first, end)}
        before = len(b.warnings)
        forward(b, grad_eqns, {names[w]: np.ones(tr.value(w).shape) for w in wrt}, eager=True,
                check=True, describe=lambda e: f"the second derivative of '{origin.get(e.out, e.prim.name)}'")
        if len(b.warnings) == before:
            _nonfinite(hess, "hessian", tr, of=out)
    return Result(hess, of=out, value=y, warnings=_warnings(tr))


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


# ==========================================================================
# graph
# ==========================================================================

def _guess_shape(program: Program) -> dict:
    """Shapes for inputs that have no value when only the tape's structure is wanted:
    2×2 for matrix operands, 2 for vectors, 4 for indexed names, else scalars."""
    from .lower import walk_names
    from .syntax import Binary, Call, Index, Name

    guesses: dict = {}

    def mark(node, shape):
        if type(node) is Name and len(shape) >= len(guesses.get(node.id, ())):
            guesses[node.id] = shape

    stack = [st.value for st in program.statements if hasattr(st, "value")]
    while stack:
        node = stack.pop()
        t = type(node)
        if t is Binary:
            if node.op == "@":
                mark(node.left, (2, 2))
                mark(node.right, (2,))
            stack += [node.left, node.right]
        elif t is Call:
            if node.func in ("matmul", "dot", "solve") and len(node.args) == 2:
                mark(node.args[0], (2, 2))
                mark(node.args[1], (2,))
            elif node.func in ("det", "inv", "trace") and node.args:
                mark(node.args[0], (2, 2))
            stack += list(node.args) + [k.value for k in node.kwargs]
        elif t is Index:
            mark(node.value, (4,) * max(1, len(node.items)))
            stack.append(node.value)
        else:
            stack += [n for n in walk_names(node) if n is not node]
    return guesses


def _stand_in(shape: tuple) -> np.ndarray:
    """A value for an input that has none, when only the structure is wanted: 0.5 everywhere,
    and 0.25 + 0.5 I for square matrices, so that log, sqrt, 1/x, asin and inv are defined
    (zeros made log -inf and inv singular)."""
    value = np.full(shape, 0.5)
    if len(shape) >= 2 and shape[-1] == shape[-2]:
        value = value * 0.5 + 0.5 * np.eye(shape[-1])
    return value


@quiet
def graph(source, at=None, backward_pass: bool = False, *, max_elements=DEFAULT_MAX_ELEMENTS) -> Result:
    """The tape as a list of nodes (and, with backward_pass, the backward tape grad runs).

    Inputs without a value get stand-in values (see _stand_in) of their declared shape, or
    of a guessed small shape (the output says which) so that the structure can be shown.  If
    the guessed shapes do not fit together, every guessed axis is made 4 long and the trace is
    tried again.
    """
    program = parse(source)
    values = as_arrays(at)
    guesses = _guess_shape(program)
    filled: list = []
    guessed: list = []

    def attempt(uniform: bool) -> Traced:
        filled.clear()
        guessed.clear()

        def sample(name, shape):
            filled.append(name)
            if not shape:  # no declared shape: a guess
                guessed.append(name)
                shape = guesses.get(name, ())
                if uniform:
                    shape = (4,) * len(shape)
            return _stand_in(shape)
        return trace(program, values, max_elements=max_elements, sample=sample)

    try:
        tr = attempt(False)
    except (ShapeError, ValueError_) as err:
        if not guessed:
            raise
        try:
            tr = attempt(True)
        except GradcalcError:
            raise err from None
    b, tape = tr.builder, tr.tape
    names_of = {}
    for n, v in tape.names.items():
        names_of.setdefault(v, n)
    show_values = bool(at) or not filled
    nodes = []

    def node(var, op, args=(), params=None, pos=None, phase="forward", extra=None):
        d = {"id": f"v{var}", "op": op, "args": [f"v{a}" for a in args],
             "shape": list(b.shapes[var]), "phase": phase}
        if var in names_of and phase == "forward":
            d["name"] = names_of[var]
        pos = to_pos(pos)  # (tape.positions holds locations)
        if pos is not None:
            d["line"], d["column"] = pos.line, pos.col
        if params:
            d["params"] = {k: _param_text(v) for k, v in params.items() if k not in ("xshape", "nd", "ond")}
        if show_values or op == "const":
            d["value"] = b.values[var]
        if extra:
            d.update(extra)
        nodes.append(d)

    input_vars = set(tape.inputs.values())
    used = {a for eq in tape.equations for a in eq.args}
    for name, var in tape.inputs.items():
        node(var, "input", pos=tape.positions.get(name), extra={"guessed_shape": name in guessed})
    for var in tape.consts:
        if var in used or var in names_of:
            node(var, "const")
    for eq in tape.equations:
        node(eq.out, eq.prim.name, eq.args, eq.params, eq.pos)
    output = tape.output
    if backward_pass and output is not None:
        out_var = tape.names[output]
        rec_start = len(b.equations)
        log: list = []
        seed = b.const(np.ones(b.shapes[out_var]))
        node(seed.var, "const", phase="backward", extra={"role": f"seed: d{output}/d{output} = 1"})
        found = backward(b, tape.equations, {out_var: seed}, list(input_vars), log=log)
        for eq, first, end in log:
            for k in range(first, end):
                e = b.equations[k]
                for a in e.args:
                    if a in b.consts and a >= rec_start and not any(n["id"] == f"v{a}" for n in nodes):
                        node(a, "const", phase="backward")
                node(e.out, e.prim.name, e.args, e.params, e.pos, phase="backward",
                     extra={"vjp_of": f"v{eq.out}"})
        for name, var in tape.inputs.items():
            g = found.get(var)
            grad_node = {"id": f"d{output}/d{name}", "op": "gradient", "args": [f"v{g.var}"] if g else [],
                         "shape": list(b.shapes[g.var if g else var]), "phase": "backward",
                         "name": f"d{output}/d{name}"}
            if g is None:  # no differentiable path: no variable to point at
                grad_node["unconnected"] = True
            nodes.append(grad_node)
    return Result({}, nodes=nodes, output=output, guessed=guessed, warnings=_warnings(tr))


def _param_text(v):
    if isinstance(v, tuple):
        return [_param_text(i) for i in v]
    if isinstance(v, slice):
        return f"{'' if v.start is None else v.start}:{'' if v.stop is None else v.stop}" + \
               ("" if v.step in (None, 1) else f":{v.step}")
    if isinstance(v, (np.integer,)):
        return int(v)
    return v
