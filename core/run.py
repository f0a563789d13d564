"""Syntax tree -> tape: the interpreter.

A program runs once, eagerly, on the concrete values of its inputs (SPEC §2.1),
as a tree-walk interpreter in the manner of Crafting Interpreters' jlox: one
method per statement kind, a scope per call, and ``break``/``continue``/``return``
as control signals (exceptions private to this module).  Every arithmetic
operation is a call of a primitive on tracers, which records it, so the tape is
the path that ran: an ``if`` records the branch taken, a loop each iteration, a
call its body.  Each decision is kept as a :class:`~.tape.Guard` on the builder.

What is known from the text before the run (inputs, names assigned at the top
level, functions, the default output) is worked out by :func:`analyse`.
"""
from __future__ import annotations

import inspect
import sys
from operator import itemgetter
from typing import NamedTuple

import numpy as np

from . import primitives as P
from .alloc import EQUATION_BYTES, MEMORY_LOOK_EVERY, MEMORY_RESERVE, memory
from .builtins import (CONSTANTS, FUNCTIONS, NotStatic, fold_literal, is_constructor, stack,
                       static_value, usage, whole)
from .errors import (GradcalcError, LimitError, NameError_, Pos, ShapeError, SyntaxError_,
                     UsageError, ValueError_, did_you_mean, listed, option, to_loc, to_pos)
from .syntax import (Apply, ArrayLit, Assign, AugAssign, Binary, Bool, Break, Call, CondExpr,
                     Continue, Def, Destructure, EllipsisLit, ExprStmt, For, If, Index,
                     IndexAssign, Inputs, Name, NoneLit, Num, Program, Return, Slice, Str,
                     TupleLit, Unary, While, parse_expression, walk_names)
from .tape import (DEFAULT_MAX_ELEMENTS, DEFAULT_MAX_STEPS, F64_SCALAR, MAX_NDIM, NO_PARAMS, Builder, Guard, Tape,
                   Tracer)
from .transforms import backward

#: Calls of the program's functions that may be active at once (SPEC §2.2).
MAX_CALL_DEPTH = 100
#: The Python frames a run may take: MAX_CALL_DEPTH calls, each through expressions nested up to
#: syntax.MAX_DEPTH levels, a few frames a level (Python's default 1,000 stopped a one-expression
#: recursion f(n - 1) inside a conditional expression at 97 calls).  Python 3.11 runs a call of
#: Python code without recursing in C, so the C stack holds it (100 calls through 90 nested
#: negations or conditional expressions ran within 8 MB).
RUN_FRAMES = 40_000

_BOOLEANS = frozenset(("true", "false", "True", "False"))
_DERIVATIVES = ("grad", "jacobian")  # grad(f)(x), jacobian(f)(x): SPEC §2.4

# ==========================================================================
# What the text says: inputs, assigned names, functions, the output
# ==========================================================================


class InputInfo(NamedTuple):
    name: str
    pos: Pos  # declaration, or first read
    shape: tuple | None  # declared shape
    default: object  # default expression, or None
    declared: bool


class Facts(NamedTuple):
    """A program as its text describes it, before it runs."""

    inputs: list  # of InputInfo, in order
    assigned: dict  # top-level name -> location of its first assignment (loop variables too)
    functions: dict  # name -> Def
    local_names: dict  # function name -> frozenset of its locals (parameters, names assigned)
    bare: dict  # location of a bare expression outside defs -> its name (_, _2, ...)
    output: str | None  # the default output's name (SPEC §2.2)
    output_loc: int | None  # the statement it comes from


_NO_FACTS = Facts([], {}, {}, {}, {}, None, None)

#: The targets of each assigning statement form.
_TARGETS = {Assign: lambda st: (st.name,), AugAssign: lambda st: (st.name,),
            IndexAssign: lambda st: (st.name,), Destructure: lambda st: st.names,
            For: lambda st: (st.var,)}


def _blocks(st) -> tuple:
    """The bodies nested directly in a statement (its branches' bodies, a loop's body)."""
    t = type(st)
    if t is If:
        return tuple(b.body for b in st.branches) + ((st.orelse,) if st.orelse else ())
    if t is For or t is While:
        return (st.body,)
    return ()


_COMPOUND = frozenset((If, For, While))  # the statements with blocks in them


def _walk_statements(body):
    """Every statement of a body, nested blocks included, in textual order (not into defs):
    the body itself when no block is nested in it (a long program mostly is flat; the test
    is a loop in C).  (Recursive only into blocks, whose nesting the parser caps.)"""
    if _COMPOUND.isdisjoint(map(type, body)):
        return body
    statements = []
    for st in body:
        statements.append(st)
        if type(st) in _COMPOUND:
            for inner in _blocks(st):
                statements.extend(_walk_statements(inner))
    return statements


def _declared_inputs(program: Program) -> dict:
    declared: dict[str, InputInfo] = {}
    for st in program.statements:
        if type(st) is Inputs:
            for d in st.decls:
                if d.name in declared:
                    raise NameError_(f"input '{d.name}' is declared twice", d.pos)
                if d.name in _BOOLEANS:
                    raise NameError_(f"'{d.name}' is a literal and cannot be an input", d.pos)
                declared[d.name] = InputInfo(d.name, d.pos, d.shape, d.default, True)
    return declared


def _def_name_loc(program: Program, st: Def) -> int:
    """Where a def's name is (the node keeps the 'def''s location): past 'def' and blanks."""
    pos = to_pos(st.loc)
    line = program.source.line(pos.line)
    col = pos.col - 1 + 3
    while col < len(line) and line[col] in " \t":
        col += 1
    return to_loc(pos.line, col + 1)


def _functions(program: Program) -> dict:
    """The program's defs by name; a def may not take a built-in's, a constant's or
    another def's name."""
    functions: dict[str, Def] = {}
    for st in program.statements:
        if type(st) is not Def:
            continue
        what = ("a built-in function" if st.name in FUNCTIONS or st.name in _DERIVATIVES
                else "a constant" if st.name in CONSTANTS or st.name in _BOOLEANS
                else f"already a function (line {to_pos(functions[st.name].loc).line})"
                if st.name in functions else None)
        if what is not None:
            raise NameError_(f"a function cannot be named '{st.name}': it is {what}",
                             _def_name_loc(program, st), hint="pick another name")
        functions[st.name] = st
    return functions


def _locals_of(fdef: Def) -> frozenset:
    names = {p.name for p in fdef.params}
    for st in _walk_statements(fdef.body):
        target = _TARGETS.get(type(st))
        if target is not None:
            names.update(target(st))
    return frozenset(names)


def _check_target(name: str, loc, declared: dict, functions: dict) -> None:
    """A top-level assignment's target must be a plain name of the program."""
    info = declared.get(name)
    if info is not None:
        raise NameError_(f"cannot assign to '{name}': it is an input (line {info.pos.line})", loc,
                         hint="an input always means the value the program was given; assign to a new name")
    if name in functions:
        raise NameError_(f"cannot assign to '{name}': it is a function of the program", loc,
                         hint="pick another name")
    if name in _BOOLEANS:
        raise NameError_(f"cannot assign to '{name}': it is a literal", loc)


def _outside_defs(program: Program, declared: dict, functions: dict):
    """(assigned names -> first location, bare expression locations -> names, the output
    statement), from the statements outside defs."""
    assigned: dict = {}
    bare: dict = {}
    output = last_input = None
    taken = {*declared, *functions, *_BOOLEANS}  # what no top-level assignment may take
    for st in _walk_statements(program.statements):
        t = type(st)
        if t is Assign:  # (the commonest statement, by a short way)
            name, _, loc = st  # (unpacked: cheaper than the fields' descriptors)
            if name in taken:
                _check_target(name, loc, declared, functions)
            if name not in assigned:
                assigned[name] = loc
            output = st
            continue
        if t is ExprStmt:
            bare[st.loc] = None  # named below, once every name the program assigns is known
            output = st
            continue
        if t is Inputs:  # (the output only of a program that assigns nothing: SPEC §2.2 names
            last_input = (st.decls[-1].name, st.loc)  # assignments and bare expressions)
            continue
        target = _TARGETS.get(t)
        if target is None:
            continue
        for name in target(st):
            if name in taken:
                _check_target(name, st.loc, declared, functions)
            if name not in assigned:
                assigned[name] = st.loc
        if t is not For:
            output = (target(st)[-1], st.loc)
    _name_bare(bare, assigned, declared)
    if type(output) is Assign:
        output = (output.name, output.loc)
    elif type(output) is ExprStmt:
        output = (bare[output.loc], output.loc)
    return assigned, bare, output or last_input


def _name_bare(bare: dict, assigned: dict, declared: dict) -> None:
    """Name the bare expressions _, _2, _3, ... in order (SPEC §2.2), skipping any name the
    program assigns itself (`_, V = eigh(S)`) or declares as an input (`input _`), so that the
    unnamed output's name never collides with one of the program's (a bare value named as an
    input would replace it)."""
    k = 0
    for loc in bare:
        k += 1
        name = "_" if k == 1 else f"_{k}"
        while name in assigned or name in declared:
            k += 1
            name = f"_{k}"
        bare[loc] = name
        assigned[name] = loc


def _function_read(n: Name, st) -> None:
    """A function's name read as a value: only grad(f) and jacobian(f) may do that."""
    if _derivative_taking(n, st) is None:
        raise NameError_(f"'{n.id}' is a function; call it as {n.id}(...)", n.pos)


def _derivative_taking(n: Name, st) -> Call | None:
    """The call grad(n) or jacobian(n) in statement st that takes the name n, if any."""
    stack_ = [st]
    while stack_:
        node = stack_.pop()
        if type(node) is Call and node.func in _DERIVATIVES and node.args and node.args[0] is n:
            return node
        if isinstance(node, tuple):
            stack_.extend(node)
    return None


def _builtin_read(n: Name, st) -> NameError_:
    """The error for a built-in's name read as a value (sin, not sin(x))."""
    call = _derivative_taking(n, st)
    if call is not None:  # grad(sin): derivatives are taken of the program's own functions
        return NameError_(f"{call.func} takes a function defined with def; '{n.id}' is a built-in", n.pos,
                          hint=f"define one: def f(t) = {n.id}(t), then {call.func}(f)(x)")
    return NameError_(f"'{n.id}' is a function; call it as {n.id}(...)", n.pos,
                      hint=f"to use '{n.id}' as a value, declare it (input {n.id}) or assign it")


def analyse(program: Program) -> Facts:
    """What the text says (SPEC §2.2): inputs, top-level names, functions, the output."""
    declared = _declared_inputs(program)
    functions = _functions(program)
    assigned, bare, output = _outside_defs(program, declared, functions)
    local_names = {name: _locals_of(f) for name, f in functions.items()}
    known = {**dict.fromkeys(CONSTANTS), **dict.fromkeys(_BOOLEANS), **declared, **assigned}  # never inputs
    reads_known = len(program.marks) == len(program.statements)
    if reads_known and _all_known(program.names, known):
        free = {}  # (what the loop of _free_inputs would find)
    else:
        reads = program.reads if reads_known else None
        text = program.source.text if program.source is not None else None
        derivatives = text is None or any(d in text for d in _DERIVATIVES)
        free = _free_inputs(program.statements, reads, known, functions, local_names, derivatives)
    name, loc = output if output is not None else (None, None)
    return Facts([*declared.values(), *free.values()], assigned, functions, local_names, bare, name, loc)


_NAME_ID = itemgetter(0)  # a Name node's id


def _all_known(names: tuple, known: dict) -> bool:
    """Whether every name the program reads (Program.names) is in `known`: a test in C,
    which spares a long program the loop over each name read."""
    return not set(map(_NAME_ID, names)).difference(known)


def _free_inputs(statements: tuple, reads, known: dict, functions: dict, local_names: dict,
                 derivatives: bool = True) -> dict:
    """The names read before any assignment and known nowhere, by first read: the
    undeclared inputs (`known` gets them too).  Reading a function's name is an error but
    in grad(f) and jacobian(f), where a name that is not a function is an error (with
    derivatives=False, the text has no grad or jacobian to look for).  `reads` is
    Program.reads, or None (then each statement's names are walked)."""
    free: dict[str, InputInfo] = {}
    for k, st in enumerate(statements):
        t = type(st)
        if t is Inputs:
            continue
        names = reads[k] if reads is not None else walk_names(st)
        local = local_names[st.name] if t is Def else ()
        for n in names:
            nid = n.id
            if nid in known or nid in local:
                continue
            if nid in functions:
                _function_read(n, st)
                continue
            if nid in FUNCTIONS:
                raise _builtin_read(n, st)
            if derivatives:
                call = _derivative_taking(n, st)
                if call is not None:  # grad(grad), grad(g) with no def g: never an input
                    raise _not_a_function(n, call, functions)
            free[nid] = known[nid] = InputInfo(nid, n.pos, None, None, False)
    return free


def _not_a_function(n: Name, call: Call, functions: dict) -> NameError_:
    """The error for grad(n) or jacobian(n) where n names no function of the program (it would
    otherwise read as an input, and the error be that it has no value)."""
    if n.id in _DERIVATIVES:
        f = next(iter(functions), "f")
        return NameError_(f"{call.func} takes a function defined with def, not '{n.id}' itself", n.pos,
                          hint=f"for a second derivative, define the first: def d{f}(t) = {n.id}({f})(t), "
                               f"then {call.func}(d{f})(x)")
    hint = did_you_mean(n.id, functions) or "define it with def, e.g. def f(t) = t^2"
    return NameError_(f"{call.func} takes a function defined with def; '{n.id}' is not a function of the "
                      f"program", n.pos, hint=hint)


def find_inputs(program: Program) -> list[InputInfo]:
    """Inputs in order: declared ones, then names read and assigned nowhere at the top level.
    An error in what the text declares (a def named pi, an assignment to an input) carries
    the program's source, as trace's does: its message has the label, line and caret."""
    try:
        return analyse(program).inputs
    except GradcalcError as err:
        raise err.located(program.source)


# ==========================================================================
# The interpreter
# ==========================================================================


# Built-ins that take their arrays as separate arguments or, as NumPy's do, as one sequence:
# concatenate((a, b), axis=0) and stack([a, b]) are concatenate(a, b, axis=0) and stack(a, b).
# (NumPy's spellings are Builtins of their own over the same function.)
_SEQUENCE_BUILTINS = frozenset(FUNCTIONS[n].fn for n in ("concat", "stack", "vstack", "hstack", "column_stack"))


def _sequence(fn, args: tuple, kwargs: dict) -> tuple:
    """A call's arguments as the built-in takes them: for one that takes a sequence of arrays,
    a tuple literal first, or a list literal alone, stands for its items, and a positional
    argument after the tuple is the axis, as in NumPy's concatenate((a, b), 0).  (A list
    literal followed by more arrays is an array of its own: concat([0], x, [1]).)"""
    if fn.fn not in _SEQUENCE_BUILTINS or not args:
        return args, kwargs
    first = type(args[0])
    if not (first is TupleLit or first is ArrayLit and len(args) == 1):
        return args, kwargs
    if len(args) == 2 and "axis" in fn.signature.parameters and "axis" not in kwargs:
        kwargs = {**kwargs, "axis": args[1]}
    elif len(args) > 1:
        raise UsageError(f"{fn.name}() takes its arrays as one tuple or as separate arguments, not both",
                         args[1].pos, hint=f"usage: {fn.name}((a, b), axis=0)")
    return args[0].items, kwargs


class Traced:
    """A program traced at one point: its tape and the builder holding its values."""

    __slots__ = ("program", "tape", "builder", "inputs", "output_error", "derived")

    def __init__(self, program: Program, tape: Tape, builder: Builder, inputs: list, output_error=None):
        self.program, self.tape, self.builder = program, tape, builder
        self.inputs = inputs  # of InputInfo
        # Why tape.output is None when the text has an output statement (it never ran).
        self.output_error = output_error
        # What callers work out from the tape and ask for again and again (check's searches over
        # steps: the equations downstream of an input, at every step), by their own keys.
        self.derived: dict = {}

    def value(self, name: str) -> np.ndarray:
        return self.builder.values[self.tape.names[name]]

    @property
    def warnings(self):
        return self.builder.warnings


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class _Return(Exception):
    def __init__(self, values: tuple):
        self.values = values


_NO_VALUE = ()  # what a call that ended without `return` gives
_MASKS_BOUND = 256  # masks held before the dead among them are forgotten (see forget_masks)


def _primitive(name: str):
    """A primitive by name, None while core/primitives.py lacks it."""
    return getattr(P, name, None)


_BINARY = {"+": P.add, "-": P.sub, "*": P.mul, "/": P.div, "@": P.matmul, "^": P.pow_,
           "<": P.lt, "<=": P.le, ">": P.gt, ">=": P.ge, "==": P.eq, "!=": P.ne,
           "//": _primitive("floor_divide"), "%": _primitive("mod"),
           "and": _primitive("logical_and"), "or": _primitive("logical_or")}
_MASK_OPS = frozenset(("<", "<=", ">", ">=", "==", "!=", "and", "or"))
_MASK_BUILTINS = frozenset(("any", "all"))
_EXACT_INTS = 2 ** 53  # floats up to this are read as ints where an argument is an integer (see whole)
#: The built-ins that move or pick elements without arithmetic, and the parameters holding the
#: elements: a result made of masks is a mask, as NumPy keeps a boolean array boolean
#: (`x[flip(x > 0)]` selects).  Keyed by function, so that NumPy's spellings (ravel) count.
_MASK_KEEPING = {FUNCTIONS[name].fn: params for names, params in (
    ("reshape flatten squeeze expand_dims moveaxis swapaxes flip fliplr flipud rot90 roll repeat tile "
     "broadcast_to atleast_1d atleast_2d atleast_3d split take take_along_axis transpose diagonal diag "
     "tril triu sort stop_gradient", ("x",)),
    ("concat stack vstack hstack column_stack", ("xs",)),
    ("append", ("x", "values")),
    ("where", ("a", "b"))) for name in names.split()}
_AUGMENTED = {"+": P.add, "-": P.sub, "*": P.mul, "/": P.div}
_ADD, _NEG, _INDEX = P.add, P.neg, P.index
#: sys.getrefcount of a tracer in index_assign that only its name refers to: the scope's dict,
#: the local variable and getrefcount's argument (a caller's scope holding it, a loop over its
#: rows, another local name: more; then its array is never written into).
_HELD_BY_ITS_NAME_ALONE = 3
_COMPILE_DEPTH = 32  # levels of an expression compiled (see Interpreter.compiled); deeper: expr()
_PRIMITIVE = P.Primitive  # (sub is a function: add(a, neg(b)))
#: The arithmetic operators whose primitive broadcasts (Builder.bind2 records them; the comparisons,
#: which do too, make masks: see binary).
_PLAIN = {op: p for op, p in _BINARY.items()
          if p.__class__ is _PRIMITIVE and p.plain is not None and op not in _MASK_OPS}
_ARITHMETIC = {op: p for op, p in _PLAIN.items() if op != "^"}  # (x^2's exponent may be a parameter)
#: The built-ins whose call on one argument records their primitive on it and nothing else
#: (sin, exp...: Builder.bind1 records them directly; see Interpreter.call).
_UNARY_PRIMS = {name: fn.prim for name, fn in FUNCTIONS.items()
                if fn.arity == 1 and fn.prim is not None and fn.prim.trivial_params and name not in _MASK_BUILTINS
                and fn.fn not in _MASK_KEEPING}


def _without_leading_ones(value: Tracer, shape: tuple) -> Tracer:
    """value, less the leading axes of length 1 it has beyond shape's rank: NumPy assigns a
    value of shape (1, 2) to a selection of shape (2,) (broadcasting never adds them)."""
    extra = value.ndim - len(shape)
    if extra > 0 and all(d == 1 for d in value.shape[:extra]):
        return P.reshape(value, shape=value.shape[extra:])
    return value


def _as_array_literal(node):
    """node, with tuple literals in it as array literals (`pad(x, 1, constant_values=(1, 2))`)."""
    t = type(node)
    if t is TupleLit or t is ArrayLit:
        return ArrayLit(tuple(map(_as_array_literal, node.items)), node.loc)
    return node


def _elements(params: tuple, arguments: dict) -> list:
    """The values of a built-in's arguments that hold the elements of its result (see
    _MASK_KEEPING): those named, a star-argument's one by one."""
    out = []
    for name in params:
        value = arguments.get(name)
        if type(value) is tuple:
            out.extend(value)
        elif value is not None:
            out.append(value)
    return out


def _operator(op: str):
    prim = _BINARY.get(op)
    if prim is None:
        raise UsageError(f"the operator '{op}' is not available yet")
    return prim


class Interpreter:
    """Runs statements and evaluates expressions, recording on a builder.

    ``env`` is the current scope: the top-level names, or a call's locals (then
    ``local_names`` are the call's local names and ``top`` the top-level scope,
    which the call reads as it is at the time of the call: nothing can assign it
    while the call runs).
    """

    def __init__(self, builder: Builder, env: dict, facts: Facts = _NO_FACTS, *,
                 max_steps: int = DEFAULT_MAX_STEPS, constants_only: bool = False, replace=None):
        self.b = builder
        self.replace = replace  # (var, value): see trace
        self.env = self.top = env
        self.facts = facts
        self.local_names = None  # the current call's locals (None at the top level)
        self.calling = None  # the name of the function whose body runs
        self.depth = 0  # calls active
        self.max_steps = max_steps
        self.iterations = 0  # loop iterations and calls so far (steps beside the equations)
        self.next_look = MEMORY_LOOK_EVERY  # bytes made by then: look at the memory left (see step)
        self.constants_only = constants_only
        self.numbers: dict[float, Tracer] = {}  # the program's number literals, one constant each
        self.literal_vars: set[int] = set()  # their variables
        # array literals holding true or false ([true, false]): refused as an index wherever they
        # are read, as written in one (see _boolean_index)
        self.boolean_literals: set[int] = set()
        self.booleans: dict[bool, Tracer] = {}  # true's and false's constants (see boolean)
        # variables holding masks (comparisons, and, or, not), as plain ints: a builder that keeps
        # no tape frees a value when its variable goes (see forget_masks)
        self.masks: set[int] = set()
        self.masks_bound = _MASKS_BOUND
        self.names: dict[str, int] = {}  # top-level name -> var of its last value
        self.positions: dict[str, int] = {}  # top-level name -> where last assigned
        self.loops = 0  # loops running (their bodies' assignments run compiled: see compiled())
        self.compiled_values: dict[int, tuple] = {}  # id of an Assign -> (it, its value compiled), and
        # id of a loop's body -> (it, its statements each with its value compiled or None)
        self.several: dict[int, tuple] = {}  # bare statements that gave several values: loc -> (call, count)

    def number(self, value: float) -> Tracer:
        """The constant of a number literal: equal literals are one constant on the tape, which
        saves a variable for every `2` of a long program.  A statement whose value is a literal
        (`a = 2`) gets a constant of its own: derivatives with respect to `a` must not collect
        every other 2 of the program."""
        t = self.numbers.get(value)
        if t is None:
            t = self.numbers[value] = self.b.const(value)
            self.literal_vars.add(t.var)
        return t

    # -- statements (one method each; _STATEMENTS below maps node types to them) ------
    def block(self, body) -> None:
        statements = _STATEMENTS
        for st in body:
            statements[type(st)](self, st)

    def bind(self, name: str, value: Tracer, loc, before: int) -> None:
        """Bind name to value in the current scope; a top-level name becomes a name of the
        tape.  ``before``: the first variable the statement made (see below)."""
        if self.local_names is not None:
            if value.var < before and value.var not in self.literal_vars:
                # (`c = y` in a body: a copy, as at the top level, so that a call's derivatives sum
                # their terms in the order the same statements written out inline sum them, bit
                # for bit; a literal stays the shared constant: no derivative reaches it)
                self.b.pos = loc
                value = P.copy(value)
            self.env[name] = value
            return
        var = value.var
        if var in self.literal_vars:  # `a = 2`: a name of its own, not every 2's constant
            value = self.b.const(self.b.values[var])
            if var in self.boolean_literals:  # (`m = true`: still refused as an index)
                self.boolean_literals.add(int(value.var))
            var = value.var
        elif var < before:  # `a = x` made nothing new: a's own copy, so that --wrt a is
            self.b.pos = loc  # the derivative through a alone, x held fixed
            value = P.copy(value)
            if var in self.masks:  # (`n = m`: n is the mask m is)
                self.masks.add(int(value.var))
            if var in self.boolean_literals:  # (and the booleans m is)
                self.boolean_literals.add(int(value.var))
            var = value.var
        if self.replace is not None and var == self.replace[0]:
            value = self.b.const(self.replace[1])
            var = value.var
        self.env[name] = value
        self.names[name] = var
        self.positions[name] = loc

    def assign(self, st: Assign) -> None:
        name, node, loc = st  # (unpacked: cheaper than the fields' descriptors)
        before = self.b._next
        if self.loops:
            value = self.value_of(node)
        else:  # (value_of's own line, without its call: a long straight-line program's hot path)
            value = self.binary(node) if type(node) is Binary else self.expr(node)
        self.bind(name, value, loc, before)

    def value_of(self, node) -> Tracer:
        """expr(node) for an expression a statement evaluates (an assigned value, a condition):
        in a loop, which runs it again and again, compiled once (see compiled, end_loop)."""
        if self.loops:
            done = self.compiled_values.get(id(node))
            if done is None:
                done = self.compiled_values[id(node)] = (node, self.compiled(node, _COMPILE_DEPTH))
            return done[1]()
        return self.binary(node) if type(node) is Binary else self.expr(node)

    def aug_assign(self, st: AugAssign) -> None:
        before = self.b._next
        old = self.env.get(st.name)  # (expr(Name(st.name, st.loc)), without making the node first)
        if old is None:
            old = self.name(Name(st.name, st.loc))
        right = self.value_of(st.value)
        self.b.pos = st.loc
        self.bind(st.name, _AUGMENTED[st.op](old, right), st.loc, before)

    def index_assign(self, st: IndexAssign) -> None:
        before = self.b._next
        old = self.expr(Name(st.name, st.loc))
        idx = self.index_items(st.items)
        value = self.value_of(st.value)
        self.b.pos = st.loc
        mask = st.op == "=" and old.var in self.masks
        if mask and value.var not in self.masks:  # NumPy's m[i] = v on a boolean array stores v != 0
            value = P.ne(value, self.number(0.0))
        if st.op == "=" and value.shape[:1] == (1,):  # (as NumPy's x[i] = v; its += broadcasts v without them;
            # the selection's shape, which normalises the index once more, only for a v that may need it)
            try:
                value = _without_leading_ones(value, P.selection_shape(idx, old.shape))
            except GradcalcError:
                pass  # (an index that does not fit: the update below says so, at its position)
        update = P.index_add if st.op == "+=" else P.index_update
        if sys.getrefcount(old) == _HELD_BY_ITS_NAME_ALONE:  # (see Builder.update)
            new = self.b.update(update, old, value, {"idx": idx})
        else:
            new = update(old, value, idx=idx)
        if mask:
            self.masks.add(int(new.var))
        self.bind(st.name, new, st.loc, before)

    def destructure(self, st: Destructure) -> None:
        before = self.b._next
        values = self.values(st.value)
        if len(values) != len(st.names):
            what = f"'{st.value.func}'" if type(st.value) is Call else "the value"
            raise ValueError_(f"{what} gives {len(values)} value{'s' * (len(values) != 1)}, but "
                              f"{len(st.names)} names are assigned", st.loc)
        for name, value in zip(st.names, values):
            self.bind(name, value, st.loc, before)

    def expr_stmt(self, st: ExprStmt) -> None:
        before = self.b._next
        values = self.values(st.value, used=False)
        name = self.facts.bare.get(st.loc) if self.local_names is None else None
        if name is None:
            return
        if len(values) == 1:
            self.bind(name, values[0], st.loc, before)
        else:  # (no name: if it is the output statement, the output error says why)
            self.several[st.loc] = (st.value.func, len(values))

    def if_(self, st: If) -> None:
        for branch in st.branches:
            if self.condition(branch.cond, branch.loc, "if"):
                self.block(branch.body)
                return
        if st.orelse:
            self.block(st.orelse)

    def while_(self, st: While) -> None:
        self.loops += 1
        try:
            while True:
                self.step(st.loc, "loop")
                if not self.condition(st.cond, st.cond_loc, "while") or not self.iteration(st.body):
                    return
        finally:
            self.end_loop()

    def for_(self, st: For) -> None:
        it = st.iterable
        if type(it) is Call and it.func == "range" and "range" not in self.facts.functions:
            values = (self.b.const(float(i)) for i in self.range_of(it))
        else:
            values = self.rows(self.expr(it), st.loc)
        self.loops += 1
        try:
            for value in values:
                self.step(st.loc, "loop")
                self.bind(st.var, value, st.loc, value.var)
                if not self.iteration(st.body):
                    return
        finally:
            self.end_loop()

    def end_loop(self) -> None:
        """After a loop: past the outermost, the compiled assignments go (their functions refer
        to this interpreter: kept, they would keep it, and every value it holds, in a cycle)."""
        self.loops -= 1
        if not self.loops:
            self.compiled_values.clear()

    def iteration(self, body) -> bool:
        """Run a loop's body once; False when it ends the loop (break).  The body's own
        assignments run as assign() runs them in a loop, with the dispatch on statement types
        and the lookup of their compiled values done once per loop (see end_loop)."""
        done = self.compiled_values.get(id(body))
        if done is None:
            steps = tuple((st, self.compiled(st.value, _COMPILE_DEPTH), st.name, st.loc) if type(st) is Assign
                          else (st, None, None, None) for st in body)
            done = self.compiled_values[id(body)] = (body, steps)
        b = self.b
        try:
            for st, value, name, loc in done[1]:
                if value is None:
                    _STATEMENTS[type(st)](self, st)
                else:
                    before = b._next
                    self.bind(name, value(), loc, before)
        except _Break:
            return False
        except _Continue:
            pass
        return True

    def range_of(self, node: Call) -> range:
        if node.kwargs or not 1 <= len(node.args) <= 3:
            raise UsageError("range takes 1 to 3 integer arguments: range(stop), range(start, stop) "
                             "or range(start, stop, step)", node.pos)
        bounds = [self.int_value(a, "a range argument", "range") for a in node.args]
        if len(bounds) == 3 and bounds[2] == 0:
            raise ValueError_("range's step must not be zero", node.args[2].pos)
        return range(*bounds)

    def rows(self, x: Tracer, loc):
        """x[0], x[1], ...: a loop over the first axis (differentiable slices)."""
        if x.ndim == 0:
            raise ShapeError("a for loop runs over an array's first axis; this value is a scalar", loc,
                             hint="loop over indices with range(n)")
        mask = x.var in self.masks
        for k in range(x.shape[0]):
            self.b.pos = loc
            row = P.index(x, idx=(k,))
            if mask:
                self.masks.add(int(row.var))
            yield row

    def jump(self, st) -> None:
        raise _Break() if type(st) is Break else _Continue()

    def return_(self, st: Return) -> None:
        if len(st.values) == 1:  # (return r(...) passes on every value r gives, as Python's and JAX's do)
            raise _Return(self.values(st.values[0]))
        raise _Return(tuple(self.expr(v) for v in st.values))

    def nothing(self, st) -> None:
        """Statements with nothing to run: input declarations (bound before the run) and defs
        (hoisted: known from the text)."""

    # -- decisions -------------------------------------------------------------
    def step(self, loc, what: str) -> None:
        """Count a loop iteration or a call, and stop a run past max_steps (SPEC §7), or one
        about to take the last of the machine's memory (see look_at_memory)."""
        self.iterations += 1
        if len(self.masks) > self.masks_bound:
            self.forget_masks()
        self.watch(loc, what)

    def watch(self, loc, what: str) -> None:
        """Stop a run past max_steps, or about to take the last of the memory (see step): after
        each step, and after each derivative pass of grad(f) or jacobian(f), which records
        operations with no step between them (grad(f) nested in f 16 deep recorded 2^16 times
        f's operations, 1.3 GB, past --max-steps=100000 before a call looked)."""
        operations = self.b.operations()
        if self.iterations + operations > self.max_steps:
            self.too_many_steps(loc, what)
        if operations * EQUATION_BYTES + self.b.made > self.next_look:
            self.look_at_memory(loc, what)

    def passes_within(self, passes: int, operations: int, loc, what: str) -> None:
        """Refuse, before they run, backward passes (a Jacobian's, one per row) that would go over
        more operations than max_steps allows: each recorded little (jacobian(f) nested in f 12
        deep ran 10,000 passes over 3,600 operations, 24 s, within --max-steps=100000)."""
        work = passes * operations
        if self.iterations + self.b.operations() + work > self.max_steps:
            raise LimitError(f"the {what} would run {passes:,} backward passes over {operations:,} operations "
                             f"({work:,} steps), more than {option('max_steps')}={self.max_steps}", loc,
                             hint=f"raise {option('max_steps')} if it is meant to run that long",
                             option="max_steps")

    def too_many_steps(self, loc=None, what: str = "") -> None:
        """The error of a run past max_steps, in the loop, call or top-level statement at loc."""
        raise LimitError(f"the program ran more than {option('max_steps')}={self.max_steps} steps "
                         f"(operations recorded plus loop iterations){_in_the(loc, what)}", loc,
                         hint=f"raise {option('max_steps')} if it is meant to run that long",
                         option="max_steps")

    def look_at_memory(self, loc, what: str) -> None:
        """Stop a run that has made another MEMORY_LOOK_EVERY bytes (its equations and arrays, freed
        or not) where the machine has less than MEMORY_RESERVE left (both in proportion where it,
        or the process's control group, has little memory in all: see alloc): with an error, before the
        kernel's out-of-memory killer ends the process with no message.  --max-steps bounds the
        steps, not what they keep: 10^7 steps of a loop over 1000-element values would keep 80 GB."""
        found = memory()
        every, reserve = MEMORY_LOOK_EVERY, MEMORY_RESERVE
        if found is not None:  # (a small machine or container: looks and reserve in proportion)
            every, reserve = max(1 << 20, min(every, found.total // 16)), min(reserve, found.total // 8)
        self.next_look += every
        if found is not None and found.left < reserve:
            raise LimitError(f"out of memory{_in_the(loc, what)}: {found.left >> 20} MB of this machine's memory "
                             f"is left", loc,
                             hint="a loop that never ends? (--max-steps bounds the steps, not the memory "
                                  "their values take); else use smaller inputs or fewer steps")

    def forget_masks(self) -> None:
        """Forget the masks whose values are gone (a builder that keeps no tape frees them),
        so that a loop's comparisons do not pile up; looked at again when the set has doubled."""
        values = self.b.values
        self.masks = {var for var in self.masks if var in values}
        self.masks_bound = 2 * len(self.masks) + _MASKS_BOUND

    def guard(self, t: Tracer, expected, loc, what: str) -> None:
        """Record a decision taken from t's value (constants decide nothing: skipped)."""
        b = self.b
        if b.record and t.var not in b.consts:  # (a builder that keeps no tape keeps no guard)
            b.guards.append(Guard(t.var, expected, loc, what))

    def condition(self, node, loc, what: str) -> bool:
        """A condition's truth: it has one element, not nan, and is true when non-zero."""
        t = self.value_of(node)
        value = t.value
        if value.__class__ is F64_SCALAR:  # (the usual condition: its number, without a reshape)
            f = float(value)
        else:
            if t.shape != () and value.size != 1:
                raise ValueError_(f"a condition must have exactly one element; this one has shape {t.shape}",
                                  loc, hint="reduce it with any(...) or all(...), or choose elementwise "
                                            "with where(cond, a, b)")
            f = float(np.reshape(value, ()))
        if f != f:
            raise ValueError_("the condition is nan", loc)
        truth = f != 0.0
        self.guard(t, truth, loc, what)
        return truth

    def int_value(self, node, what: str, kind: str = "index") -> int:
        """An integer-valued expression (an index, a bound, a range argument): evaluated,
        integral, one element; no derivative flows through it (SPEC §2.3)."""
        t = type(node)
        if t is Num and node.is_int:
            return int(node.text)
        if t is Unary and type(node.operand) is Num and node.operand.is_int and node.op == "-":
            return -int(node.operand.text)
        return self.int_of(self.expr(node), node, what, kind)

    def int_of(self, t: Tracer, node, what: str, kind: str) -> int:
        value = t.value
        if t.shape != ():
            raise ShapeError(f"{what} must be one integer, got an array of shape {t.shape}", node.pos)
        f = float(value)
        if not f.is_integer():
            raise ShapeError(f"{what} must be an integer, got {f!r}", node.pos,
                             hint="round it with round(...), floor(...) or //")
        i = int(f)
        self.guard(t, i, node.loc, kind)
        return i

    # -- indexing ----------------------------------------------------------------
    def index_items(self, items) -> tuple:
        """An index's items as NumPy takes them: ints, slices, None, Ellipsis, integer arrays
        (a mask becomes the integer arrays of its non-zero elements)."""
        out = []
        for item in items:
            t = type(item)
            if t is Slice:
                parts = [None if p is None else self.int_value(p, "a slice bound")
                         for p in (item.start, item.stop, item.step)]
                if parts[2] == 0:
                    raise ShapeError("slice step cannot be zero", item.pos)
                out.append(slice(*parts))
            elif t is NoneLit:
                out.append(None)
            elif t is EllipsisLit:
                out.append(Ellipsis)
            elif t is Num and item.is_int:
                out.append(int(item.text))
            elif t is Bool or t is ArrayLit and _holds_a_boolean(item):
                raise _boolean_index(item)
            else:
                out.extend(self.index_value(item))
        return tuple(out)

    def index_value(self, node) -> tuple:
        t = self.expr(node)
        value = t.value
        if t.var in self.masks:
            if t.shape == ():  # (NumPy would add an axis of length 0 or 1: not a selection of elements)
                raise ShapeError("a mask index needs at least one axis, but this condition is a scalar",
                                 node.pos, hint="choose between values with where(cond, a, b)")
            mask = np.asarray(value) != 0
            self.guard(t, mask, node.loc, "mask")
            return (mask,)  # (the primitive checks its shape against the axes it indexes: _index_mask)
        if t.var in self.boolean_literals:  # (m = [true, false]; x[m], and m = true)
            raise _boolean_index(node)
        if t.shape == ():
            return (self.int_of(t, node, "an index", "index"),)
        if not np.all(np.isfinite(value)) or not np.all(np.mod(value, 1) == 0):
            bad = value[~(np.isfinite(value) & (np.mod(value, 1) == 0))].flat[0]
            raise ShapeError(f"an index array must hold integers, got {float(bad)!r}", node.pos)
        if value.size and np.abs(value).max() >= 2.0 ** 62:  # (no axis is that long; the cast would wrap)
            bad = value[np.abs(value) >= 2.0 ** 62].flat[0]
            raise ShapeError(f"index {float(bad):g} is out of range", node.pos)
        ints = value.astype(np.intp)
        self.guard(t, ints, node.loc, "index")
        return (ints,)

    # -- expressions ----------------------------------------------------------
    def expr(self, node) -> Tracer:
        t = type(node)
        if t is Name:  # the commonest nodes first
            v = self.env.get(node.id)
            return v if v is not None else self.name(node)
        if t is Num:
            return self.number(node.value)
        if t is Binary:
            return self.binary(node)
        if t is Call:
            out = self.call(node)
            return out if out.__class__ is Tracer else self.single(out, node)
        method = _EXPRESSIONS.get(t)
        if method is None:
            raise SyntaxError_(f"unexpected {t.__name__}", getattr(node, "pos", None))
        return method(self, node)

    def binary(self, node: Binary) -> Tracer:
        # Walk the left spine in a loop: a 20,000-term sum is 20,000 deep on the left.
        spine = []
        while type(node) is Binary:
            spine.append(node)
            node = node.left
        b, env, numbers = self.b, self.env, self.numbers
        bind2 = b.bind2  # operands are tracers: record the primitive directly (what P.add(...) does)
        # Leaves (a number whose constant exists, an assigned name, a call) are made here as
        # expr would make them; anything else (a first number, an unknown name) by expr.
        t = type(node)
        acc = numbers.get(node.value) if t is Num else env.get(node.id) if t is Name else None
        if acc is None:
            if t is Call:
                acc = self.call(node)
                if acc.__class__ is not Tracer:
                    acc = self.single(acc, node)
            else:
                acc = self.expr(node)
        for op in reversed(spine):
            o, _, r, loc = op
            prim = _ARITHMETIC.get(o)
            if prim is None and o == "^":
                p = _literal_exponent(op)
                if p is not None:
                    b.pos = loc
                    acc = b.bind(P.pow_const, (acc,), {"p": p})  # (what P.pow_const(acc, p=p) does)
                    continue
            rt = type(r)
            right = numbers.get(r.value) if rt is Num else env.get(r.id) if rt is Name else None
            if right is None and rt is Binary:
                # 0.1 * x on the right, two leaves: made here, as binary(r) would make it
                inner = _ARITHMETIC.get(r.op)
                x, y = r.left, r.right
                xt, yt = type(x), type(y)
                x = numbers.get(x.value) if xt is Num else env.get(x.id) if xt is Name else None
                y = numbers.get(y.value) if yt is Num else env.get(y.id) if yt is Name else None
                if inner is not None and x is not None and y is not None:
                    b.pos = r.loc
                    right = bind2(inner, x, y)
                else:
                    right = self.binary(r)
            elif right is None:
                right = self.expr(r)
            b.pos = loc
            if prim is not None:  # + * / // %
                acc = bind2(prim, acc, right)
                continue
            if o == "-":  # a - b is add(a, neg(b)) (P.sub), recorded here directly
                acc = bind2(_ADD, acc, b.bind1(_NEG, right))
                continue
            prim = _PLAIN.get(o)
            if prim is not None:  # x^y
                acc = bind2(prim, acc, right)
                continue
            prim = _BINARY.get(o) or _operator(o)
            acc = b.bind(prim, (acc, right), NO_PARAMS) if prim.__class__ is _PRIMITIVE else prim(acc, right)
            if o in _MASK_OPS:
                self.masks.add(int(acc.var))
        return acc

    def compiled(self, node, depth: int):
        """node's value as a function of no arguments, for an expression that a loop evaluates
        again and again: what expr(node) does, with the dispatch on node types, the walk of the
        operator spine and the lookups of primitives done once.  Names, numbers, arithmetic
        operators, negation, x^p and one-primitive built-ins of one argument are compiled
        (depth levels of them); anything else is expr(node) itself.  The same equations, in
        the same order, at the same positions."""
        t, b = type(node), self.b
        if t is Name:
            nid = node.id

            def name():
                v = self.env.get(nid)
                return v if v is not None else self.name(node)
            return name
        if t is Num:  # number(value), with its lookup inline
            numbers, number, value = self.numbers, self.number, node.value

            def literal():
                t = numbers.get(value)
                return t if t is not None else number(value)
            return literal
        loc = node.loc if depth > 0 else None
        if t is Binary and loc is not None:
            compiled = self.compiled_binary(node, depth, loc)
            if compiled is not None:
                return compiled
        elif t is Unary and node.op == "-" and loc is not None:
            operand, operand_name = self.compiled(node.operand, depth - 1), _name_id(node.operand)

            def negate():
                x = self.env.get(operand_name)  # (as in apply_names)
                if x is None:
                    x = operand()
                b.pos = loc
                return b.bind1(_NEG, x)
            return negate
        elif t is Call and loc is not None and len(node.args) == 1 and not node.kwargs:
            fn = None if node.func in self.facts.functions else FUNCTIONS.get(node.func)
            if fn is not None and fn.prim is not None and fn.arity == 1 and node.func not in _MASK_BUILTINS \
                    and fn.fn not in _MASK_KEEPING:
                arg, prim, trivial = self.compiled(node.args[0], depth - 1), fn.prim, fn.prim.trivial_params
                arg_name = _name_id(node.args[0])

                def builtin():
                    x = self.env.get(arg_name)  # (as in apply_names)
                    if x is None:
                        x = arg()
                    b.pos = loc
                    try:
                        return b.bind1(prim, x) if trivial else b.bind(prim, (x,), NO_PARAMS)
                    except GradcalcError as err:
                        _word(err, node)
                        raise
                return builtin
        return lambda: self.expr(node)

    def compiled_binary(self, node: Binary, depth: int, loc):
        """compiled() of an operator (x op y, x - y, x^2), or None where expr() must run it."""
        b = self.b
        left, p = self.compiled(node.left, depth - 1), _literal_exponent(node)
        if p is not None:  # x^2: the exponent is a parameter (never evaluated as a value)
            params = {"p": p}

            def power():
                x = left()
                b.pos = loc
                return b.bind(P.pow_const, (x,), params)
            return power
        right, op = self.compiled(node.right, depth - 1), node.op
        if op == "-":
            def subtract():
                x, y = left(), right()
                b.pos = loc
                return b.bind2(_ADD, x, b.bind1(_NEG, y))
            return subtract
        prim = _PLAIN.get(op)
        names = _name_id(node.left), _name_id(node.right)
        if prim is not None and names == (None, None):
            def apply():
                x, y = left(), right()
                b.pos = loc
                return b.bind2(prim, x, y)
            return apply
        if prim is not None:  # c * om: a name's value read here (left() or right(): when it has none)
            lname, rname = names

            def apply_names():
                x = self.env.get(lname)  # (None where that side is no name: no name is None)
                if x is None:
                    x = left()
                y = self.env.get(rname)
                if y is None:
                    y = right()
                b.pos = loc
                return b.bind2(prim, x, y)
            return apply_names
        prim = _BINARY.get(op)
        if prim is None or prim.__class__ is not _PRIMITIVE:
            return None
        if op in _MASK_OPS:  # x < y: a mask (as binary() notes it; forget_masks renews the set)
            def compare():
                x, y = left(), right()
                b.pos = loc
                t = b.bind(prim, (x, y), NO_PARAMS)
                self.masks.add(int(t.var))
                return t
            return compare

        def apply_params():
            x, y = left(), right()
            b.pos = loc
            return b.bind(prim, (x, y), NO_PARAMS)
        return apply_params

    def unary(self, node: Unary) -> Tracer:
        x = self.expr(node.operand)
        self.b.pos = node.loc
        if node.op == "not":
            out = _operator("not") if _primitive("logical_not") is None else P.logical_not(x)
            self.masks.add(int(out.var))
            return out
        return self.b.bind1(_NEG, x) if node.op == "-" else x  # (what P.neg(x) does)

    def index(self, node: Index) -> Tracer:
        x = self.expr(node.value)
        idx = self.index_items(node.items)
        self.b.pos = node.loc
        out = x.builder.bind(_INDEX, (x,), {"idx": idx})  # (what P.index(x, idx=idx) does on a tracer)
        if x.var in self.masks:  # (elements of a mask: a mask)
            self.masks.add(int(out.var))
        return out

    def conditional(self, node: CondExpr) -> Tracer:
        """``a if c else b``: only the chosen side runs."""
        truth = self.condition(node.cond, node.cond_loc, "conditional")
        return self.expr(node.then if truth else node.orelse)

    def boolean(self, node: Bool) -> Tracer:
        """true and false: 1 and 0, each a constant of its own, not the number literals' (a dict
        would take True for 1.0), so that an index can tell them from numbers through a name."""
        t = self.booleans.get(node.value)
        if t is None:
            t = self.booleans[node.value] = self.b.const(1.0 if node.value else 0.0)
            self.literal_vars.add(t.var)
            self.boolean_literals.add(t.var)
        return t

    def misplaced(self, node) -> Tracer:
        """A node that is not a value: a tuple, a string, None or `...` out of place."""
        t = type(node)
        if t is TupleLit:
            raise SyntaxError_("a tuple is only allowed as an argument of a built-in (a shape, an axis, an "
                               "array)", node.pos)
        if t is Str:
            raise SyntaxError_("a string is allowed only as the argument of a built-in that takes one "
                               "(einsum's subscripts, norm's ord=, pad's mode=)", node.pos)
        what = "None" if t is NoneLit else "'...'"
        raise SyntaxError_(f"{what} is allowed only in an index", node.pos, hint="e.g. x[None, :], x[..., 0]")

    def name(self, node: Name) -> Tracer:
        """A name the current scope has no value for."""
        nid = node.id
        if self.local_names is not None:
            if nid in self.local_names:
                raise NameError_(f"'{nid}' is used before it is assigned in '{self.calling}'", node.pos)
            v = self.top.get(nid)
            if v is not None:
                return v
        where = self.facts.assigned.get(nid)
        if nid in CONSTANTS and where is None:  # (an assignment of the name hides the constant: SPEC 2.2)
            return self.b.const(CONSTANTS[nid])
        if self.constants_only:
            hint = did_you_mean(nid, CONSTANTS) or "values are constant expressions: numbers, lists, pi, ones(3)..."
            raise NameError_(f"unknown name '{nid}'", node.pos, hint=hint)
        if nid in self.facts.functions:
            raise NameError_(f"'{nid}' is a function; call it as {nid}(...)", node.pos)
        if where is not None:
            p = to_pos(where)
            hint = f"give '{nid}' a value before this on every path"
            if nid in CONSTANTS:
                hint = f"the program assigns '{nid}', which hides the constant {nid}: rename the variable, or {hint}"
            raise NameError_(f"'{nid}' has no value yet: it is assigned at line {p.line}, column {p.col}, "
                             "which has not run", node.pos, hint=hint, name=nid)
        raise NameError_(f"'{nid}' is used before it is assigned", node.pos)

    def array(self, node: ArrayLit) -> Tracer:
        folded = fold_literal(node, self.env)
        if folded is not None:
            self.b.pos = node.loc
            self.b.check_size(folded.shape)  # (small in memory: it is as long as its text)
            t = self.b.const(folded)
            if _holds_a_boolean(node):
                self.boolean_literals.add(int(t.var))
            return t
        if not node.items:
            return self.b.const(np.zeros((0,)))
        items = [self.expr(i) for i in node.items]
        for k, (item, it) in enumerate(zip(node.items[1:], items[1:]), start=2):
            if it.shape != items[0].shape:
                raise ShapeError(f"ragged array literal: element {k} has shape {it.shape}, "
                                 f"element 1 has shape {items[0].shape}", _pos(item))
        self.b.pos = node.loc
        self.b.labels[node.loc] = "array literal"  # (what messages call its stacking primitives)
        return self.kept_mask(stack(*items, axis=0), items)

    # -- calls -------------------------------------------------------------------
    def values(self, node, used: bool = True) -> tuple:
        """The values of an expression that may give several (a call): a tuple."""
        if type(node) is not Call:
            return (self.expr(node),)
        out = self.call(node)
        if out is _NO_VALUE and used:
            self.single(out, node)
        return out if type(out) is tuple else (out,)

    def single(self, out, node) -> Tracer:
        """A call's result where one value is needed."""
        if out.__class__ is Tracer:
            return out
        name = node.func if type(node) is Call else node.id  # (a call, or the f of grad(f)(x))
        if out is _NO_VALUE:
            raise UsageError(f"'{name}' ended without 'return', but its value is used here", node.pos,
                             hint="end its body with return ...")
        raise UsageError(f"'{name}' gives {len(out)} values; take them apart with "
                         f"{', '.join('abcdefgh'[:min(len(out), 8)])} = {name}(...)", node.pos)

    def call(self, node: Call):
        """A call: of a function of the program (a Tracer, a tuple of them, or _NO_VALUE),
        or of a built-in."""
        func, args, kwargs, loc = node
        prim = _UNARY_PRIMS.get(func)
        if prim is not None and len(args) == 1 and not kwargs and func not in self.facts.functions:
            # sin(x), the usual call: record the primitive directly (what the built-in's fn does)
            arg = args[0]
            x = self.env.get(arg.id) if type(arg) is Name else None
            if x is None:
                x = self.expr(arg)
            b = self.b
            b.pos = loc
            try:
                return b.bind1(prim, x)
            except GradcalcError as err:
                _word(err, node)
                raise
        fdef = self.facts.functions.get(func)
        if fdef is not None:
            args = [self.expr(a) for a in node.args]
            kwargs = {k.name: self.expr(k.value) for k in node.kwargs}
            return self.call_function(node, fdef, args, kwargs)
        fn = FUNCTIONS.get(node.func)
        if fn is None:
            if node.func in _DERIVATIVES:
                raise UsageError(f"{node.func}(f) is a function: call it on the arguments, "
                                 f"{node.func}(f)(x)", node.pos)
            hint = did_you_mean(node.func, [*FUNCTIONS, *self.facts.functions])
            if node.func in self.env:
                hint = f"'{node.func}' is a value, not a function; use '*' to multiply"
            raise NameError_(f"unknown function '{node.func}'", node.pos, hint=hint)
        if node.func in _MASK_BUILTINS:
            out = self.builtin(node, fn)
            self.masks.add(int(out.var))
            return out
        return self.builtin(node, fn)

    def builtin(self, node: Call, fn) -> Tracer:
        if fn.prim is None:  # several primitives (mean: sum, div): messages name the builtin
            self.b.labels[node.loc] = node.func
        if fn.arity == len(node.args) and not node.kwargs:  # (sin(x) went by call's shortcut)
            prim = fn.prim
            args = [self.expr(a if type(a) is not TupleLit else _as_array_literal(a)) for a in node.args]
            self.b.pos = node.loc
            if prim is not None:
                out = self.invoke(node, self.b.bind, (prim, tuple(args), NO_PARAMS))
            else:
                out = self.invoke(node, fn.fn, args)
            return self.masks_kept(fn, out, args)
        constructor = is_constructor(node.func)
        _refuse_unknown_keywords(node, fn)
        args, kwargs = _sequence(fn, node.args, {k.name: k.value for k in node.kwargs})
        try:
            if constructor:
                bound = fn.signature.bind(None, *args, **kwargs)
            else:
                bound = fn.signature.bind(*args, **kwargs)
        except TypeError as err:
            raise UsageError(f"{node.func}(): {err}", node.pos,
                             hint=f"usage: {node.func}{usage(fn)}") from None
        for pname, arg in list(bound.arguments.items()):
            if constructor and pname == "builder":
                bound.arguments[pname] = self.b
            elif pname in fn.strings and type(arg) is not Str:
                raise UsageError(f"{node.func}(): '{pname}' must be a string such as {fn.strings[pname]}",
                                 _pos(arg), hint=f"usage: {node.func}{usage(fn)}")
            elif pname in fn.static:
                bound.arguments[pname] = self.static_arg(node.func, pname, arg)
            elif pname in fn.numbers:
                bound.arguments[pname] = self.number_arg(node.func, pname, arg)
            elif fn.signature.parameters[pname].kind is inspect.Parameter.VAR_POSITIONAL:
                bound.arguments[pname] = tuple(self.expr(a) for a in arg)
            else:  # (an array argument: a tuple is array-like there too, as in NumPy)
                bound.arguments[pname] = self.expr(_as_array_literal(arg))
        self.b.pos = node.loc
        return self.masks_kept(fn, self.invoke(node, fn.fn, bound.args, bound.kwargs), bound.arguments)

    def masks_kept(self, fn, out, arguments):
        """out, the result of the built-in fn on arguments (a dict by parameter, or a list in
        their order), noted as a mask where fn only moves elements and those are masks."""
        params = _MASK_KEEPING.get(fn.fn)
        if params is None or not self.masks:
            return out
        if type(arguments) is list:
            arguments = dict(zip(fn.signature.parameters, arguments))
        return self.kept_mask(out, _elements(params, arguments))

    def kept_mask(self, out, elements: list):
        """out, noted as a mask (or each of several results) when the elements it is made of are
        all masks (see _MASK_KEEPING)."""
        masks = self.masks
        if elements and all(e.var in masks for e in elements):
            for t in out if type(out) is tuple else (out,):
                masks.add(int(t.var))
        return out

    @staticmethod
    def invoke(node: Call, fn, args, kwargs=None) -> Tracer:
        try:
            return fn(*args, **kwargs) if kwargs else fn(*args)
        except GradcalcError as err:
            _word(err, node)
            raise

    def number_arg(self, func, pname, node):
        """A constant expression taken as a plain number (no derivative flows through it)."""
        v = self.expr(node).value
        if v.shape != ():
            raise ShapeError(f"{func}(): '{pname}' must be a number, got an array of shape {v.shape}",
                             _pos(node))
        v = float(v)
        # an int where it is exact (counts), else the float: 1e300 as a 301-digit int would
        # reach NumPy as an object
        return int(v) if v.is_integer() and abs(v) <= 2 ** 53 else v

    def static_arg(self, func, pname, node):
        """An argument taken as a Python value (axis, shape, keepdims, a string): a literal, or
        an integer-valued expression, evaluated (SPEC §2.3 "Integer arguments")."""
        try:
            return whole(static_value(node, self.env), _EXACT_INTS)
        except NotStatic:
            pass
        t = type(node)
        if t is Str:
            return node.value
        if t is TupleLit or t is ArrayLit:
            return tuple(self.static_arg(func, pname, i) for i in node.items)
        if t is NoneLit:
            return None
        value = self.expr(node)
        if value.shape != ():
            raise ShapeError(f"{func}(): '{pname}' must be a number or a tuple such as (2, -1), got an "
                             f"array of shape {value.shape}", _pos(node))
        f = float(value.value)
        if not f.is_integer() or abs(f) > _EXACT_INTS:
            return f
        return self.int_of(value, node, f"{func}(): '{pname}'", pname)

    def call_function(self, node, fdef: Def, args: list, kwargs: dict):
        """Run a function of the program on argument values, in a scope of its own."""
        self.depth += 1
        try:
            if self.depth > MAX_CALL_DEPTH:
                raise LimitError(f"the call of '{fdef.name}' nests more than {MAX_CALL_DEPTH} calls deep",
                                 node.loc, hint=f"a call depth of {MAX_CALL_DEPTH} is allowed; "
                                                "does the recursion reach its end?")
            self.step(node.loc, f"call of '{fdef.name}'")
            saved = self.env, self.local_names, self.calling
            self.env, self.local_names, self.calling = {}, self.facts.local_names[fdef.name], fdef.name
            try:
                self.bind_parameters(node, fdef, args, kwargs)
                self.block(fdef.body)
                return _NO_VALUE
            except _Return as signal:
                values = signal.values
                return values[0] if len(values) == 1 else values
            finally:
                self.env, self.local_names, self.calling = saved
        finally:
            self.depth -= 1

    def bind_parameters(self, node, fdef: Def, args: list, kwargs: dict) -> None:
        """Parameters from positional and keyword arguments, then defaults (evaluated in
        the call's scope, so that a default may use the parameters before it)."""
        params, env, name = fdef.params, self.env, fdef.name
        signature = f"{name}({', '.join(p.name for p in params)})"
        if len(args) > len(params):
            raise UsageError(f"'{name}' takes {len(params)} argument{'s' * (len(params) != 1)} but "
                             f"{len(args)} were given", node.pos, hint=f"usage: {signature}")
        for p, a in zip(params, args):
            env[p.name] = a
        known = {p.name for p in params}
        for key, value in kwargs.items():
            if key not in known:
                raise UsageError(f"'{name}' has no parameter '{key}'", node.pos, hint=f"usage: {signature}")
            if key in env:
                raise UsageError(f"'{name}' got two values for '{key}'", node.pos, hint=f"usage: {signature}")
            env[key] = value
        for p in params:
            if p.name not in env:
                if p.default is None:
                    raise UsageError(f"'{name}' is missing its argument '{p.name}'", node.pos,
                                     hint=f"usage: {signature}")
                env[p.name] = self.expr(p.default)

    def derivative(self, node: Apply) -> Tracer:
        """``grad(f)(a, ...)`` and ``jacobian(f)(a, ...)`` (SPEC §2.4): f runs on a copy of
        the varied argument, and a traced backward pass over the equations the call recorded
        gives the derivative, an ordinary tracer on this tape (differentiable again)."""
        callee = node.callee
        if callee.func not in _DERIVATIVES:
            raise SyntaxError_("only grad(f) and jacobian(f) give functions to call", node.pos)
        fdef, argnum = self.derivative_of(callee)
        args = [self.expr(a) for a in node.args]
        kwargs = {k.name: self.expr(k.value) for k in node.kwargs}
        if not 0 <= argnum < len(args):
            raise UsageError(f"{callee.func}({fdef.name}, argnum={argnum}) needs at least {argnum + 1} "
                             f"positional argument{'s' * (argnum > 0)}", node.pos)
        b = self.b
        b.pos = node.loc
        leaf = args[argnum] = P.copy(args[argnum])  # a variable of its own: only it is varied
        # On a builder that keeps no tape, the call's equations are recorded for the pass, and
        # its values kept until the pass is done.
        with b.recording():
            start = len(b.equations)
            out = self.single(self.call_function(node, fdef, args, kwargs), callee.args[0])
            if callee.func == "grad" and out.shape != () and out.value.size != 1:
                raise ShapeError(f"grad({fdef.name}) needs '{fdef.name}' to give one element; it gives shape "
                                 f"{out.shape}", node.pos, hint=f"use jacobian({fdef.name}) for several")
            result = self.derivative_value(callee.func, b.equations[start:], out, leaf, node.loc, fdef.name)
            return result if b.owns(result) else P.copy(result)

    def derivative_value(self, kind: str, equations: list, out: Tracer, leaf: Tracer, loc, name: str) -> Tracer:
        """The derivative (kind "grad" or "jacobian") of out with respect to leaf, by traced
        backward passes over the equations that lead from one to the other (one per element of
        out for a Jacobian: each a step for every operation it goes over, see passes_within)."""
        b = self.b
        rows = []
        what = f"derivative of {kind}({name})"
        if kind == "jacobian":
            self.passes_within(out.value.size, len(equations), loc, what)
        for k in np.ndindex(*out.shape) if kind == "jacobian" else [None]:
            seed = np.ones(out.shape) if k is None else np.zeros(out.shape)
            if k is not None:
                seed[k] = 1.0
            found = backward(b, equations, {out.var: b.const(seed)}, [leaf.var])
            self.watch(loc, what)
            g = found[leaf.var]
            rows.append(g if g is not None else b.const(np.zeros(leaf.shape)))
        b.pos = loc
        if kind == "grad":
            return rows[0]
        if not rows:  # (an empty output: an empty Jacobian, of its shape and the input's)
            return b.const(np.zeros(out.shape + leaf.shape))
        return P.reshape(stack(*rows), shape=out.shape + leaf.shape)

    def derivative_of(self, callee: Call):
        """The function and argnum of ``grad(f, argnum=k)``."""
        if len(callee.args) != 1 or type(callee.args[0]) is not Name:
            raise UsageError(f"{callee.func} takes one function of the program: {callee.func}(f)", callee.pos)
        fname = callee.args[0].id
        fdef = self.facts.functions.get(fname)
        if fdef is None:
            hint = did_you_mean(fname, self.facts.functions) or "define it with def, e.g. def f(t) = t^2"
            raise NameError_(f"'{fname}' is not a function of the program", callee.args[0].pos, hint=hint)
        argnum = 0
        for k in callee.kwargs:
            if k.name != "argnum":
                raise UsageError(f"{callee.func} has no parameter '{k.name}'", k.pos,
                                 hint=f"{callee.func}(f) or {callee.func}(f, argnum=1)")
            argnum = self.int_value(k.value, "argnum")
            if argnum < 0:
                raise UsageError(f"{callee.func}'s argnum must not be negative, not {argnum}", k.value.pos,
                                 hint=f"argnum=0 is {fname}'s first parameter")
        return fdef, argnum


def _holds_a_boolean(node: ArrayLit) -> bool:
    """Whether an array literal holds true or false among its elements (at any depth)."""
    stack_ = list(node.items)
    while stack_:
        n = stack_.pop()
        t = type(n)
        if t is Bool:
            return True
        if t is ArrayLit:
            stack_.extend(n.items)
    return False


def _boolean_index(node) -> ShapeError:
    """x[true], x[[true, false]]: NumPy reads booleans in an index as a mask (x[[True, False]] is
    x[:1]), gradcalc's true and false are 1 and 0 (SPEC §2.3: they serve keyword arguments), so
    either reading would surprise someone: refused."""
    return ShapeError("true and false are not indices: they serve keyword arguments (keepdims=true)",
                      node.pos, hint="select with a mask made by a comparison (x[x > 0], x[arange(len(x)) < 1]), "
                                     "or choose between values with where(cond, a, b)")


#: How a step limit's error names a top-level statement that went past it (see trace).
_STATEMENT_KINDS = {For: "loop", While: "loop"}

_STATEMENTS = {
    Assign: Interpreter.assign, AugAssign: Interpreter.aug_assign, IndexAssign: Interpreter.index_assign,
    Destructure: Interpreter.destructure, ExprStmt: Interpreter.expr_stmt, If: Interpreter.if_,
    While: Interpreter.while_, For: Interpreter.for_, Break: Interpreter.jump, Continue: Interpreter.jump,
    Return: Interpreter.return_, Def: Interpreter.nothing, Inputs: Interpreter.nothing,
}
_EXPRESSIONS = {  # beside Name, Num, Binary and Call, which expr() tests for first
    Unary: Interpreter.unary, Index: Interpreter.index, ArrayLit: Interpreter.array,
    Bool: Interpreter.boolean, CondExpr: Interpreter.conditional, Apply: Interpreter.derivative,
    TupleLit: Interpreter.misplaced, Str: Interpreter.misplaced, NoneLit: Interpreter.misplaced,
    EllipsisLit: Interpreter.misplaced,
}


def _refuse_unknown_keywords(node: Call, fn) -> None:
    """A keyword the built-in has no parameter for, named at its own position before binding:
    Signature.bind would report a positional argument missing first (``full(3, fill_value=2)``
    is a wrong name, not a missing 'v')."""
    params = fn.signature.parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    for k in node.kwargs:
        if k.name not in params or k.name == "builder":  # (a constructor's builder: not the language's)
            hint = did_you_mean(k.name, [n for n in params if n != "builder"])
            usage_hint = f"usage: {node.func}{usage(fn)}"
            raise UsageError(f"{node.func}(): got an unexpected keyword argument '{k.name}'", k.pos,
                             hint=f"{hint} ({usage_hint})" if hint else usage_hint)


def _word(err: GradcalcError, node: Call) -> None:
    """Place an error raised in a call of a built-in at the call (when it has no position),
    and word it as the call's: ``f(): message``."""
    if err.pos is None:
        err.pos = node.pos
    if not _names_call(err.message, node.func):
        template, _ = err.worded(option)  # (the message with its options still marked)
        err.message = f"{node.func}(): {template}"
        err.args = (err.message,)


def _names_call(message: str, func: str) -> bool:
    """Whether message already begins with the built-in's name as a word (``repeat: ...``,
    ``'norm' ...``, ``sum(): ...``), not as a prefix of another (``repeats must be ...``)."""
    if message.startswith(f"'{func}'"):
        return True
    after = message[len(func):len(func) + 1]
    return message.startswith(func) and not (after.isalnum() or after == "_")


def _in_the(loc, what: str) -> str:
    """Where a run stopped, for its error: " in the loop at line 3, column 1" ("" where loc is None)."""
    if loc is None:
        return ""
    p = to_pos(loc)
    return f" in the {what} at line {p.line}, column {p.col}"


def _name_id(node) -> str | None:
    """A Name node's name, else None."""
    return node.id if type(node) is Name else None


def _literal_exponent(op: Binary):
    """The exponent of x^2, x^-1, x^0.5 written as a number, else None."""
    if op.op != "^":
        return None
    r = op.right
    if type(r) is Num:
        return r.value
    if type(r) is Unary and type(r.operand) is Num:
        return -r.operand.value if r.op == "-" else (r.operand.value if r.op == "+" else None)
    return None


def _pos(node):
    return getattr(node, "pos", None)


# ==========================================================================
# Entry points
# ==========================================================================


class _ValueBuilder(Builder):
    """The builder of a value given on the command line: an operation in it that makes nan or
    inf (log(-1), 1/0) is an error, where a program's would be a warning."""

    def note_nonfinite(self, op: str, value) -> None:
        what = "nan" if np.isnan(value).any() else ("inf" if (value == np.inf).any() else "-inf")
        raise ValueError_(f"{op} produced {what} in this value", self.pos, hint=_WRITE_IT)


_WRITE_IT = ("write nan or inf if that is meant: a value given on the command line holds them only "
             "as written, as a values file does")


def constant_value(text: str, label: str = "<value>", max_elements: int = DEFAULT_MAX_ELEMENTS):
    """Evaluate a constant expression (an --at value, a cotangent) to a float64 array.

    Non-finite values come only as written (inf, nan): a number past float64's range (1e400)
    or an operation that makes nan or inf from finite operands (log(-1), 1/0) is an error, as
    in a values file (a program warns of them instead: it has a line to point at and may
    meet them on purpose in an intermediate)."""
    from .errors import Source

    node = parse_expression(text, label)
    source = Source(text, label)
    b = _ValueBuilder(max_elements, check_finite=True)
    b.source = source  # (operators named as written: '/', not div)
    try:
        big = _too_large_number(node)
        if big is not None:
            raise ValueError_(f"the number {big.text} is beyond float64's range (about 1.8e308)", big.pos,
                              hint="write inf if that is meant: a value given on the command line holds it only as "
                                   "written, as a values file does")
        with np.errstate(all="ignore"):
            return np.asarray(Interpreter(b, {}, constants_only=True).expr(node).value, dtype=np.float64)
    except GradcalcError as err:
        raise err.located(source)


def _too_large_number(node) -> Num | None:
    """The first number written in node whose value is inf (1e400), if any."""
    found, stack_ = [], [node]
    while stack_:
        n = stack_.pop()
        if type(n) is Num:
            if n.value == np.inf:
                found.append(n)
        elif isinstance(n, tuple):
            stack_.extend(n)
    return min(found, key=lambda n: n.loc) if found else None


def _not_an_input(name: str, known: dict, assigned: dict, bare: dict) -> UsageError:
    """A value given for a name that is not an input.  A name the program assigns is never an
    input (the pitfall of PyTorch's "replaced a variable"): say where, and what to do; nor is
    the name of a bare expression's value (bare: location -> name)."""
    for loc, named in bare.items():
        if named == name:
            p = to_pos(loc)
            return UsageError(f"'{name}' is not an input of the program: it names the value of the expression at "
                              f"line {p.line}, column {p.col}", name=name,
                              hint=f"the inputs are: {listed(known) or 'none'}")
    if name in assigned:
        p = to_pos(assigned[name])
        return UsageError(f"'{name}' is not an input of the program: it is assigned at line {p.line}, "
                          f"column {p.col}", name=name,
                          hint=f"an input is a name the program reads and never assigns; read the "
                               f"given value under a name of its own (e.g. {name}0) and assign "
                               f"{name} = {name}0 first")
    listing = listed(known) or "none"
    hint = did_you_mean(name, known) or f"the inputs are: {listing}"
    return UsageError(f"'{name}' is not an input of the program", hint=hint, name=name)


def trace(program: Program, at: dict | None = None, *, max_elements: int = DEFAULT_MAX_ELEMENTS,
          sample=None, check_finite: bool = True, max_steps: int = DEFAULT_MAX_STEPS,
          record: bool = True, release: bool = False, replace: tuple | None = None) -> Traced:
    """Run program at the point ``at`` (name -> array), recording the path it takes.

    Inputs not in ``at`` take their declared default; without one, ``sample``
    (name, shape) -> array supplies a value if given, else it is an error.  With
    ``record=False`` no tape is kept (see :class:`~.tape.Builder`): the values of the
    program's names (their last values) and its warnings are all the result holds.
    With ``release=True``, arrays that no derivative rule reads are freed as the run drops
    them (see ``Builder.release_unread``): for a tape read by a first-order eager
    pass alone, backward or forward.
    ``replace=(var, value)``: the top-level name bound to variable number var takes value
    instead: check's finite differences of an intermediate re-run the program as written with
    that value (a run at the same point numbers its variables alike up to there).
    """
    at = dict(at or {})
    frames = sys.getrecursionlimit()
    sys.setrecursionlimit(max(frames, RUN_FRAMES))
    try:
        if not program.statements:
            raise SyntaxError_("empty program", Pos(1, 1), hint="write an expression, e.g. sin(x)*y")
        facts = analyse(program)
        inputs = facts.inputs
        known = {i.name: i for i in inputs}
        for name in at:
            if name not in known:
                raise _not_an_input(name, known, facts.assigned, facts.bare)
        b = Builder(max_elements, check_finite, record=record)
        b.source = program.source  # (warnings name operators as written)
        for text, loc in program.too_large:
            b.pos = loc
            b.note_warning(f"the number {text}", "is beyond float64's range (about 1.8e308) and reads as inf; "
                                                 "write inf if that is meant")
        env: dict[str, Tracer] = {}
        with np.errstate(all="ignore"):
            for info in inputs:
                _check_declared(info, max_elements)
                env[info.name] = b.input(_input_value(info, at, sample, max_elements, known, b))
            input_vars = {i.name: env[i.name].var for i in inputs}
            run = Interpreter(b, env, facts, max_steps=max_steps, replace=replace)
            if release:
                b.release_unread()
            # run.block's loop, counting the steps after each statement as a loop or a call counts
            # them after each step, so that the error names the statement that went past
            # (b.operations() inlined: a call a statement cost W3 1%; a loop's last steps are
            # found here, and named as the loop)
            statements = _STATEMENTS
            for st in program.statements:
                statements[type(st)](run, st)
                if len(b.equations) + b.dropped + run.iterations > max_steps:
                    run.too_many_steps(st.loc, _STATEMENT_KINDS.get(type(st), "statement"))
        names = {**input_vars, **run.names}
        b.stop_freeing(names.values())  # (before the names' tracers go with env)
        positions = {**{i.name: to_loc(*i.pos) for i in inputs}, **run.positions}
        output = facts.output if facts.output in names else None
        tape = b.tape(input_vars, names, output, positions)
        b.pos = None
        return Traced(program, tape, b, inputs, _output_error(program, facts, output, run.several))
    except GradcalcError as err:
        raise err.located(program.source)
    except RecursionError:  # (100 calls deep, each in expressions nested deep: past RUN_FRAMES)
        raise LimitError(f"the program nests calls inside deeply nested expressions past what can run "
                         f"(calls are limited to {MAX_CALL_DEPTH} deep)").located(program.source) from None
    finally:
        sys.setrecursionlimit(frames)


def _output_error(program: Program, facts: Facts, output, several: dict):
    """The error for a program whose output statement never ran (SPEC §2.2), or gave several
    values (a bare ``eigh(S)``), or None."""
    if output is not None or facts.output is None:
        return None
    line = to_pos(facts.output_loc).line
    if facts.output_loc in several:
        func, count = several[facts.output_loc]
        if count == 0:  # (a function that ended without return gives no value)
            return UsageError(f"the output statement (line {line}) calls '{func}', which ended without 'return', "
                              f"so the program has no output", facts.output_loc,
                              hint=f"end its body with return ..., or name the value to show with {option('of')} "
                                   f"NAME", option="of").located(program.source)
        names = ", ".join("abcdefgh"[:min(count, 8)])
        return UsageError(f"the output statement (line {line}) gives {count} values ('{func}' returns "
                          f"several), so the program has no single output", facts.output_loc,
                          hint=f"take them apart, {names} = {func}(...), and end with the value to use, "
                               f"or name one with {option('of')} NAME", option="of").located(program.source)
    return UsageError(f"the output statement (line {line}) never ran, so the program has no output; "
                      f"{option('of')} is required", facts.output_loc,
                      hint=f"name the value to show with {option('of')} NAME", option="of").located(program.source)


def _check_declared(info: InputInfo, max_elements: int) -> None:
    if info.shape is not None:
        b = Builder(max_elements, check_finite=False)
        b.pos = info.pos
        b.check_size(info.shape)


def _input_value(info: InputInfo, at, sample, max_elements, known, b: Builder):
    """The value of an input: given in at, its default (written in the program: evaluated with
    the program's warnings, which b, the run's builder, collects), sampled, or an error."""
    if info.name in at:
        value = np.asarray(at[info.name], dtype=np.float64)
        if value.ndim > MAX_NDIM:
            raise ShapeError(f"the value given for '{info.name}' has {value.ndim} dimensions; "
                             f"at most {MAX_NDIM} are supported", name=info.name)
        if info.shape is not None and value.shape != info.shape:
            raise ShapeError(f"the value given for '{info.name}' has shape {value.shape}, but "
                             f"it is declared as {info.name}{list(info.shape)}", name=info.name)
        return value
    if info.default is not None:
        constants = Builder(max_elements, check_finite=b.check_finite)
        constants.source = b.source
        value = np.asarray(Interpreter(constants, {}, constants_only=True).expr(info.default).value)
        b.warnings += constants.warnings  # (input x = log(-1): 'log' produced nan, as anywhere in the program)
        if info.shape is not None and value.shape != info.shape:
            raise ShapeError(f"the default of '{info.name}' has shape {value.shape}, but it is "
                             f"declared as {info.name}{list(info.shape)}", info.pos)
        return value
    if sample is not None:
        return np.asarray(sample(info.name, info.shape or ()), dtype=np.float64)
    others = [n for n in known if n != info.name]
    hint = f"give it with {option('at')} {info.name}=..."
    close = did_you_mean(info.name, others)
    if close and not info.declared:
        hint = close.replace("?", "") + f" (then '{info.name}' is a typo), or " + hint
    raise UsageError(f"input '{info.name}' has no value", info.pos, hint=hint, name=info.name, option="at")
