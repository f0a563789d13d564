"""The tape as a list of nodes, for ``graph``: its equations, and the backward pass grad runs.

Inputs without a value get stand-in values of their declared shape, or of a guessed small
shape, so that the structure of any program can be shown.  Each node is a dict of SPEC §5's
graph keys (``id``, ``op``, ``args``, ``shape``, ``phase``...); an equation's right-hand side
is printed by :func:`tape.equation_rhs`, as the tape prints itself.

(The module is ``graphs``, not ``graph``: importing a submodule ``gradcalc.graph`` would set
the package's attribute ``graph`` to the module, in place of this function.)
"""
from __future__ import annotations

import bisect
import math

import numpy as np

from .errors import GradcalcError, ShapeError, ValueError_, option, to_loc, to_pos
from .lower import DEFAULT_MAX_STEPS, Traced, trace, walk_names
from .results import Result
from .session import as_arrays, check_limits, parse, quiet
from .syntax import Binary, Call, Def, Index, Name, Program
from .tape import DEFAULT_MAX_ELEMENTS, ENGINE_PARAMS, slice_text
from .transforms import backward


def _guess_shape(program: Program) -> dict:
    """Shapes for inputs that have no value when only the tape's structure is wanted:
    2×2 for matrix operands, 2 for vectors, 4 for indexed names, else scalars."""
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


def _trace_with_stand_ins(program: Program, values: dict, max_elements, max_steps) -> tuple:
    """(traced program, inputs given stand-ins, inputs whose shape was guessed).

    If the guessed shapes do not fit together, every guessed axis is made 4 long and the
    trace is tried again; if that fails too, the first attempt's error is raised."""
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
        return trace(program, values, max_elements=max_elements, max_steps=max_steps, sample=sample)

    try:
        tr = attempt(False)
    except (ShapeError, ValueError_) as err:
        if not guessed:
            raise
        shapes = ", ".join(f"{name} {guesses.get(name, ())}" for name in guessed)
        try:
            tr = attempt(True)
        except GradcalcError:
            if err.hint is None:  # (the shapes in the message are guesses: say so)
                err.hint = (f"without values, the shapes were guessed ({shapes}): give {option('at')} "
                            f"values, or declare the inputs' shapes (input x[5])")
            raise err from None
    return tr, filled, guessed


def _first_loc(node) -> int | None:
    """The first location in a statement's text: the smallest of its nodes' locations (a
    node's own location can lie further in: a binary operation's is its operator's)."""
    found = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, tuple):
            fields = getattr(n, "_fields", ())
            if fields and fields[-1] == "loc" and isinstance(n[-1], int):
                found.append(n[-1])
            stack.extend(x for x in n if isinstance(x, tuple))
    return min(found, default=None)


class _Functions:
    """Which function of the program a location lies in: a def's text runs from its 'def'
    to the start of the next top-level statement (defs are top-level statements)."""

    def __init__(self, program: Program):
        statements = program.statements
        self.starts, self.ends, self.names = [], [], []
        for k, st in enumerate(statements):
            if type(st) is Def:
                after = [loc for loc in map(_first_loc, statements[k + 1:k + 2]) if loc is not None]
                self.starts.append(st.loc)
                self.ends.append(after[0] if after else None)
                self.names.append(st.name)

    def at(self, pos) -> str | None:
        """The name of the function whose text holds pos (a Pos), or None."""
        if pos is None or not self.starts:
            return None
        loc = to_loc(pos.line, pos.col)
        k = bisect.bisect_right(self.starts, loc) - 1
        if k >= 0 and (self.ends[k] is None or loc < self.ends[k]):
            return self.names[k]
        return None


class _Nodes:
    """The nodes of one graph, in order, made from a traced program's builder."""

    def __init__(self, tr: Traced, show_values: bool):
        self.builder = tr.builder
        self.functions = _Functions(tr.program)
        self.names_of: dict = {}  # var -> the first name given to it
        for n, v in tr.tape.names.items():
            self.names_of.setdefault(v, n)
        self.show_values = show_values
        self.list: list = []
        self.ids: set = set()  # the ids of the nodes added (see backward)

    def add(self, var, op, args=(), params=None, pos=None, phase="forward", extra=None) -> None:
        b = self.builder
        d = {"id": f"v{var}", "op": op, "args": [f"v{a}" for a in args],
             "shape": list(b.shapes[var]), "phase": phase}
        if var in self.names_of and phase == "forward":
            d["name"] = self.names_of[var]
        pos = to_pos(pos)  # (tape.positions holds locations)
        if pos is not None:
            d["line"], d["column"] = pos.line, pos.col
            function = self.functions.at(pos)
            if function is not None:  # recorded by a call of a function of the program
                d["function"] = function
        if params:
            d["params"] = {k: _param_text(v) for k, v in params.items() if k not in ENGINE_PARAMS}
        if self.show_values or op == "const":
            d["value"] = b.values[var]
        if extra:
            d.update(extra)
        self.list.append(d)
        self.ids.add(d["id"])

    def forward(self, tape, guessed: list) -> None:
        """The inputs, the constants the program reads or names, and the equations."""
        used = {a for eq in tape.equations for a in eq.args}
        guessed = set(guessed)  # (a list's look-up made 32,000 inputs without values take 6 s)
        for name, var in tape.inputs.items():
            self.add(var, "input", pos=tape.positions.get(name), extra={"guessed_shape": name in guessed})
        for var in tape.consts:
            if var in used or var in self.names_of:
                self.add(var, "const")
        for eq in tape.equations:
            self.add(eq.out, eq.prim.name, eq.args, eq.params, eq.pos)

    def backward(self, tape) -> None:
        """The backward pass grad runs, traced from a seed of ones: the equations each VJP
        rule records (and their new constants), then one gradient node per input."""
        b, output = self.builder, tape.output
        out_var = tape.names[output]
        rec_start = len(b.equations)
        log: list = []
        shape = b.shapes[out_var]
        seed = b.const(np.ones(shape))
        role = f"seed: d{output}/d{output} = 1" if math.prod(shape) == 1 else \
            f"seed: ones{tuple(shape)}, the gradient of sum({output})"
        self.add(seed.var, "const", phase="backward", extra={"role": role})
        found = backward(b, tape.equations, {out_var: seed}, list(set(tape.inputs.values())), log=log)
        for eq, first, end in log:
            for k in range(first, end):
                e = b.equations[k]
                for a in e.args:
                    if a in b.consts and a >= rec_start and f"v{a}" not in self.ids:
                        self.add(a, "const", phase="backward")
                self.add(e.out, e.prim.name, e.args, e.params, e.pos, phase="backward",
                         extra={"vjp_of": f"v{eq.out}"})
        for name, var in tape.inputs.items():
            g = found.get(var)
            grad_node = {"id": f"d{output}/d{name}", "op": "gradient", "args": [f"v{g.var}"] if g else [],
                         "shape": list(b.shapes[g.var if g else var]), "phase": "backward",
                         "name": f"d{output}/d{name}"}
            if g is None:  # no differentiable path: no variable to point at
                grad_node["unconnected"] = True
            self.list.append(grad_node)


@quiet
def graph(source, at=None, backward_pass: bool = False, *, full: bool = False,
          max_elements=DEFAULT_MAX_ELEMENTS, max_steps=DEFAULT_MAX_STEPS) -> Result:
    """The tape as a list of nodes (and, with backward_pass, the backward tape grad runs).

    Inputs without a value get stand-in values (see _stand_in) of their declared shape, or
    of a guessed small shape (the output says which) so that the structure can be shown.  If
    the guessed shapes do not fit together, every guessed axis is made 4 long and the trace is
    tried again.  An equation recorded by a call of a function of the program names it
    (``"function"``).  ``nodes`` holds every node; ``full`` says whether tables and listings
    show a long tape whole too, or :func:`summarised`.
    """
    check_limits(max_elements, max_steps)
    tr, filled, guessed = _trace_with_stand_ins(parse(source), as_arrays(at), max_elements, max_steps)
    nodes = _Nodes(tr, show_values=bool(at) or not filled)
    nodes.forward(tr.tape, guessed)
    warnings = [w.message for w in tr.warnings]
    if backward_pass and tr.tape.output is not None:
        nodes.backward(tr.tape)
        shape = tr.value(tr.tape.output).shape
        if math.prod(shape) != 1:  # what grad refuses: say what the pass shown computes
            warnings.append(f"the output '{tr.tape.output}' has shape {shape}: the backward pass shown is "
                            f"seeded with ones, so it computes the gradient of sum({tr.tape.output}) (as grad "
                            f"--sum; grad refuses a non-scalar output)")
    return Result({}, command="graph", nodes=nodes.list, output=tr.tape.output, guessed=guessed,
                  warnings=warnings, full=full)


#: A phase of the graph (forward or backward) with more equations than SUMMARY_LIMIT is shown
#: summarised: its first and last SUMMARY_KEEP equations, and how many are left out between.
SUMMARY_LIMIT = 200
SUMMARY_KEEP = 20


def summarised(nodes: list, limit: int = SUMMARY_LIMIT, keep: int = SUMMARY_KEEP) -> list:
    """The nodes a table or listing shows of a long tape.

    Each phase with more than ``limit`` equations keeps its inputs, gradients, first and
    last ``keep`` equations and the constants those read (or the program names); the
    equations between become one node ``{"op": "omitted", "count": n, "first": id,
    "last": id}``.  Other phases, and every phase of a shorter tape, are kept whole."""
    out = []
    for phase in ("forward", "backward"):
        out += _summarised_phase([n for n in nodes if n["phase"] == phase], phase, limit, keep)
    return out


def _summarised_phase(part: list, phase: str, limit: int, keep: int) -> list:
    equations = [i for i, n in enumerate(part) if n["op"] not in ("input", "const", "gradient")]
    if len(equations) <= limit:
        return part
    hidden = equations[keep:len(equations) - keep]
    left_out = set(hidden)
    read = {a for i, n in enumerate(part) if i not in left_out for a in n["args"]}
    out = []
    for i, n in enumerate(part):
        if i == hidden[0]:
            out.append({"id": "…", "op": "omitted", "args": [], "shape": [], "phase": phase,
                        "count": len(hidden), "first": part[i]["id"], "last": part[hidden[-1]]["id"]})
        if i in left_out or (n["op"] == "const" and n["id"] not in read and "name" not in n
                             and "role" not in n):
            continue
        out.append(n)
    return out


def _param_text(v):
    """A parameter as a graph node's JSON holds it: tuples as lists, slices as their text."""
    if isinstance(v, tuple):
        return [_param_text(i) for i in v]
    if isinstance(v, slice):
        return slice_text(v)
    if isinstance(v, (np.integer,)):
        return int(v)
    return v
