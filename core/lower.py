"""Syntax tree -> tape: trace a program on concrete input values.

The program's statements run once, in order; every operation is a call of a
primitive on tracers, which records it.  Built-in functions that are not
primitives (``mean``, ``clip``, ``stack``, ``outer``...) are written here in
terms of primitives, so the tape holds only the registry's small closed set.
"""
from __future__ import annotations

import inspect
import math
from typing import NamedTuple

import numpy as np

from . import primitives as P
from .errors import (GradcalcError, NameError_, Pos, ShapeError, SyntaxError_,
                     UsageError, ValueError_, did_you_mean, option, to_loc, to_pos)
from .syntax import (ArrayLit, Assign, Binary, Bool, Call, ExprStmt, Index, Inputs, Name, Num,
                     Program, Slice, TupleLit, Unary, parse_expression)
from .tape import DEFAULT_MAX_ELEMENTS, MAX_NDIM, NO_PARAMS, Builder, Tape, Tracer

CONSTANTS = {"pi": math.pi, "e": math.e, "inf": math.inf, "nan": math.nan}

# ==========================================================================
# Built-in functions
# ==========================================================================


class Builtin:
    """A function of the language: a Python function over tracers, and which of its
    parameters take literals (axis, shape...) rather than arrays."""

    __slots__ = ("name", "fn", "static", "numbers", "_signature", "arity", "prim")

    def __init__(self, name, fn, static, numbers=(), prim=None):
        self.name, self.fn, self.static, self._signature = name, fn, frozenset(static), None
        self.prim = prim  # the primitive fn calls on its arguments as they are, if that is all it does
        self.numbers = frozenset(numbers)  # constant expressions taken as plain numbers
        # Fast path: a call with exactly the required arguments, all arrays (``sum(x)``, not
        # ``sum(x, axis=0)``), calls fn directly instead of binding a signature.
        code = fn.__code__
        required = code.co_varnames[:code.co_argcount - len(fn.__defaults__ or ())]
        kwonly_required = code.co_kwonlyargcount - len(fn.__kwdefaults__ or {})
        plain = (not code.co_flags & inspect.CO_VARARGS and "builder" not in required  # no *args, no constructor
                 and not kwonly_required and not (set(required) & (self.static | self.numbers)))
        self.arity = len(required) if plain else None

    @property
    def signature(self) -> inspect.Signature:
        if self._signature is None:  # computed on first use: start-up pays for none of them
            self._signature = inspect.signature(self.fn)
        return self._signature


FUNCTIONS: dict[str, Builtin] = {}


def _builtin(name, static=(), numbers=(), prim=None):
    def register(fn):
        FUNCTIONS[name] = Builtin(name, fn, static, numbers, prim)
        return fn
    return register


def _register_primitive(name, prim):
    _builtin(name, prim=prim)(lambda x: prim(x))


for _name, _prim in {
    "abs": P.abs_, "sign": P.sign, "sqrt": P.sqrt, "cbrt": P.cbrt, "exp": P.exp, "expm1": P.expm1,
    "exp2": P.exp2, "log": P.log, "log1p": P.log1p, "log2": P.log2, "log10": P.log10,
    "sin": P.sin, "cos": P.cos, "tan": P.tan, "asin": P.asin, "acos": P.acos, "atan": P.atan,
    "sinh": P.sinh, "cosh": P.cosh, "tanh": P.tanh, "asinh": P.asinh, "acosh": P.acosh,
    "atanh": P.atanh, "sigmoid": P.sigmoid, "relu": P.relu, "softplus": P.softplus,
    "floor": P.floor, "ceil": P.ceil, "round": P.round_, "stop_gradient": P.stop_gradient,
    "inv": P.inv, "det": P.det,
}.items():
    _register_primitive(_name, _prim)

for _name, _prim in {"atan2": P.atan2, "hypot": P.hypot, "maximum": P.maximum,
                     "minimum": P.minimum, "pow": P.pow_, "matmul": P.matmul,
                     "solve": P.solve}.items():
    _builtin(_name, prim=_prim)((lambda prim: lambda a, b: prim(a, b))(_prim))


@_builtin("where")
def _where(cond, a, b):
    return P.where(cond, a, b)


@_builtin("clip")
def _clip(x, lo, hi):
    return P.minimum(P.maximum(x, lo), hi)


def _reduction(name, prim):
    @_builtin(name, static=("axis", "keepdims"))
    def fn(x, axis=None, keepdims=False):
        return prim(x, axis=axis, keepdims=keepdims)


for _name, _prim in {"sum": P.reduce_sum, "max": P.reduce_max, "min": P.reduce_min,
                     "prod": P.reduce_prod, "norm": P.norm, "logsumexp": P.logsumexp}.items():
    _reduction(_name, _prim)


def _count(x, axis) -> int:
    return math.prod(x.shape[a] for a in P.normalize_axes(axis, x.ndim))


@_builtin("mean", static=("axis", "keepdims"))
def _mean(x, axis=None, keepdims=False):
    return P.reduce_sum(x, axis=axis, keepdims=keepdims) / float(_count(x, axis))


@_builtin("var", static=("axis", "keepdims", "ddof"))
def _var(x, axis=None, keepdims=False, ddof=0):
    # The same operations, in the same order, as numpy.var.
    n = _count(x, axis)
    d = x - P.reduce_sum(x, axis=axis, keepdims=True) / float(n)
    return P.reduce_sum(d * d, axis=axis, keepdims=keepdims) / float(max(n - ddof, 0))


@_builtin("std", static=("axis", "keepdims", "ddof"))
def _std(x, axis=None, keepdims=False, ddof=0):
    return P.sqrt(_var(x, axis, keepdims, ddof))


@_builtin("softmax", static=("axis",))
def _softmax(x, axis=-1):
    return P.softmax(x, axis=axis)


@_builtin("log_softmax", static=("axis",))
def _log_softmax(x, axis=-1):
    return P.log_softmax(x, axis=axis)


@_builtin("dot")
def _dot(a, b):
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    return P.matmul(a, b)


@_builtin("outer")
def _outer(a, b):
    return P.reshape(a, shape=(-1, 1)) * P.reshape(b, shape=(1, -1))


@_builtin("trace")
def _trace(x):
    return P.reduce_sum(P.diag(x))


@_builtin("diag", static=("k",))
def _diag(x, k=0):
    if isinstance(k, bool) or not isinstance(k, int):  # as NumPy: no float diagonal offsets
        raise ShapeError(f"k must be an integer, not {k!r}")
    if x.ndim == 1:
        n = x.shape[0] + abs(k)
        return P.diag_embed(x, k=k, shape=(n, n))
    if x.ndim != 2:
        raise ShapeError(f"diag needs a vector or a matrix, got shape {x.shape}")
    return P.diag(x, k=k)


@_builtin("transpose", static=("axes",))
def _transpose(x, axes=None):
    return P.transpose(x, axes=axes)


@_builtin("reshape", static=("shape",))
def _reshape(x, shape):
    return P.reshape(x, shape=_shape_arg(shape))


@_builtin("flatten")
def _flatten(x):
    return P.reshape(x, shape=(-1,))


@_builtin("concat", static=("axis",))
def _concat(*xs, axis=0):
    if not xs:
        raise UsageError("concat needs at least one array")
    return P.concat(*xs, axis=axis)


@_builtin("stack", static=("axis",))
def _stack(*xs, axis=0):
    if not xs:
        raise UsageError("stack needs at least one array")
    nd = xs[0].ndim
    for x in xs[1:]:
        if x.shape != xs[0].shape:
            raise ShapeError(f"stack needs arrays of equal shape, got {xs[0].shape} and {x.shape}")
    if not isinstance(axis, int) or not -(nd + 1) <= axis <= nd:
        raise ShapeError(f"axis {axis} is out of range for stacking arrays of dimension {nd}")
    axis %= nd + 1
    parts = [P.reshape(x, shape=x.shape[:axis] + (1,) + x.shape[axis:]) for x in xs]
    return parts[0] if len(parts) == 1 else P.concat(*parts, axis=axis)


# -- constructors: constants, no gradient ----------------------------------

def _shape_arg(shape) -> tuple:
    shape = shape if isinstance(shape, tuple) else (shape,)
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, int):
            raise ShapeError(f"a shape holds integers, got {d!r}")
    return shape


def _new_shape(shape) -> tuple:
    shape = _shape_arg(shape)
    if any(d < 0 for d in shape):
        raise ShapeError(f"negative dimension in shape {shape}")
    return shape


_CONSTRUCTORS = {}


def _constructor(name, numbers=()):
    def register(fn):
        _CONSTRUCTORS[name] = fn
        params = fn.__code__.co_varnames[:fn.__code__.co_argcount]
        _builtin(name, static=tuple(p for p in params if p != "builder" and p not in numbers),
                 numbers=numbers)(fn)
        return fn
    return register


@_constructor("zeros")
def _zeros(builder, shape):
    shape = _new_shape(shape)
    builder.check_size(shape)
    return builder.const(np.zeros(shape))


@_constructor("ones")
def _ones(builder, shape):
    shape = _new_shape(shape)
    builder.check_size(shape)
    return builder.const(np.ones(shape))


@_constructor("eye")
def _eye(builder, n, m=None):
    n, m = _int_arg("n", n), _int_arg("m", n if m is None else m)
    builder.check_size((n, m))
    return builder.const(np.eye(n, m))


@_constructor("arange", numbers=("start", "stop", "step"))
def _arange(builder, start, stop=None, step=1):
    if stop is None:
        start, stop = 0, start
    for what, v in (("start", start), ("stop", stop), ("step", step)):
        if not math.isfinite(_number_arg(v)):  # (NumPy fails on them when it sizes the result)
            raise ValueError_(f"arange: {what} must be finite, not {v}")
    if step == 0:
        raise ValueError_("arange: step must not be zero")
    size = max(0, math.ceil((stop - start) / step))
    builder.check_size((size,))
    if size == 0:  # (NumPy refuses even an empty range between numbers as large as 1e300)
        return builder.const(np.zeros(0))
    return builder.const(np.arange(start, stop, step, dtype=np.float64))


@_constructor("linspace", numbers=("a", "b"))
def _linspace(builder, a, b, n=50):
    _number_arg(a), _number_arg(b)
    n = _int_arg("n", n)
    builder.check_size((n,))
    return builder.const(np.linspace(a, b, n))


def _int_arg(what, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ShapeError(f"{what} must be a non-negative integer, got {v!r}")
    return v


def _number_arg(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ShapeError(f"expected a number, got {v!r}")
    return v


# ==========================================================================
# Inputs
# ==========================================================================


class InputInfo(NamedTuple):
    name: str
    pos: Pos  # declaration, or first read
    shape: tuple | None  # declared shape
    default: object  # default expression, or None
    declared: bool


def walk_names(node):
    """Yield Name nodes in textual order, without recursion."""
    stack = [node]
    push, pop = stack.append, stack.pop
    while stack:
        n = pop()
        t = type(n)
        while t is Binary:  # down a left spine without the stack (a + b + c nests on the left)
            push(n.right)
            n = n.left
            t = type(n)
        if t is Name:
            yield n
        elif t is Num:  # no names in a number (nor in None, an absent slice bound)
            continue
        elif t is Call:
            if n.kwargs:
                stack.extend(reversed([k.value for k in n.kwargs]))
            stack.extend(reversed(n.args))
        elif t is Unary:
            push(n.operand)
        elif t is Index:
            stack.extend(reversed(n.items))
            push(n.value)
        elif t is Slice:
            stack.extend((n.step, n.stop, n.start))
        elif t is ArrayLit or t is TupleLit:
            stack.extend(reversed(n.items))


def _output_names(program: Program) -> list:
    """The name each statement defines: assignments, and _, _2, ... for bare expressions
    (None for input declarations)."""
    names, k = [], 0
    add = names.append
    for st in program.statements:
        t = type(st)
        if t is Assign:
            add(st.name)
        elif t is ExprStmt:
            k += 1
            add("_" if k == 1 else f"_{k}")
        else:
            add(None)
    return names


_BOOLEANS = frozenset(("true", "false", "True", "False"))


def find_inputs(program: Program, defines: list | None = None) -> list[InputInfo]:
    """Inputs in order: declared ones, then names read before they are assigned.
    ``defines``: the program's _output_names, if the caller has them."""
    declared: dict[str, InputInfo] = {}
    for st in program.statements:
        if isinstance(st, Inputs):
            for d in st.decls:
                if d.name in declared:
                    raise NameError_(f"input '{d.name}' is declared twice", d.pos)
                if d.name in FUNCTIONS:
                    raise NameError_(f"'{d.name}' is a built-in function and cannot be an input", d.pos)
                if d.name in _BOOLEANS:
                    raise NameError_(f"'{d.name}' is a literal and cannot be an input", d.pos)
                declared[d.name] = InputInfo(d.name, d.pos, d.shape, d.default, True)
    free: dict[str, InputInfo] = {}
    # Every name met so far: an input (its InputInfo) or an assigned name (its location).
    seen: dict = dict(declared)
    statements = program.statements
    reads = program.reads if len(program.reads) == len(statements) else None
    if defines is None:
        defines = _output_names(program)
    for k, name in enumerate(defines):
        st = statements[k]
        if type(st) is Inputs:
            continue
        for n in (reads[k] if reads is not None else walk_names(st.value)):  # the same names
            nid = n.id
            if nid in seen or nid in CONSTANTS:
                continue
            if nid in FUNCTIONS:
                raise NameError_(f"'{nid}' is a function; call it as {nid}(...)", n.pos)
            seen[nid] = free[nid] = InputInfo(nid, n.pos, None, None, False)
        if name is not None:
            where = seen.get(name)
            if where.__class__ is InputInfo:
                raise NameError_(f"cannot assign to '{name}': it is an input (line {where.pos.line})",
                                 st.pos, hint="names are assigned once; pick a new name")
            if where is not None:
                raise NameError_(f"'{name}' is already assigned at line {to_pos(where).line}",
                                 st.pos, hint="names are assigned once; pick a new name")
            if name in FUNCTIONS:
                raise NameError_(f"cannot assign to '{name}': it is a built-in function", st.pos)
            if name in _BOOLEANS:
                raise NameError_(f"cannot assign to '{name}': it is a literal", st.pos)
            seen[name] = st.loc
    return [*declared.values(), *free.values()]


# ==========================================================================
# Tracing
# ==========================================================================


class Traced:
    """A program traced at one point: its tape and the builder holding its values."""

    __slots__ = ("program", "tape", "builder", "inputs")

    def __init__(self, program: Program, tape: Tape, builder: Builder, inputs: list):
        self.program, self.tape, self.builder = program, tape, builder
        self.inputs = inputs  # of InputInfo

    def value(self, name: str) -> np.ndarray:
        return self.builder.values[self.tape.names[name]]

    @property
    def warnings(self):
        return self.builder.warnings


_BINARY = {"+": P.add, "-": P.sub, "*": P.mul, "/": P.div, "@": P.matmul, "^": P.pow_,
           "<": P.lt, "<=": P.le, ">": P.gt, ">=": P.ge, "==": P.eq, "!=": P.ne}
_PRIMITIVE = P.Primitive  # (sub is a function: add(a, neg(b)))


class _Lowering:
    def __init__(self, builder: Builder, env: dict[str, Tracer], constants_only: bool = False):
        self.b = builder
        self.env = env
        self.constants_only = constants_only
        self.numbers: dict[float, Tracer] = {}  # the program's number literals, one constant each
        self.literal_vars: set[int] = set()  # their variables

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

    # -- statements -----------------------------------------------------------
    def statements(self, program: Program, defines: list):
        """Trace every statement; ``defines`` are the names they define (_output_names)."""
        names, positions, last = {}, {}, None
        env, expr = self.env, self.expr
        for st, name in zip(program.statements, defines):
            if name is None:  # input declarations
                last = st.decls[-1].name
                continue
            before = self.b._next
            value = expr(st.value)
            if value.var in self.literal_vars:  # `a = 2`: a name of its own, not every 2's constant
                value = self.b.const(self.b.values[value.var])
            elif value.var < before:  # `a = x` made nothing new: a's own copy, so that --wrt a is
                self.b.pos = st.loc    # the derivative through a alone, x held fixed
                value = P.copy(value)
            env[name] = value
            names[name] = value.var
            positions[name] = st.loc
            last = name
        return names, positions, last

    # -- expressions ----------------------------------------------------------
    def expr(self, node) -> Tracer:
        t = type(node)
        if t is Name:  # the commonest nodes first
            v = self.env.get(node.id)
            return v if v is not None else self.name(node)
        if t is Num:
            return self.number(node.value)
        if t is Binary:
            # Walk the left spine in a loop: a 20,000-term sum is 20,000 deep on the left.
            spine = []
            while type(node) is Binary:
                spine.append(node)
                node = node.left
            b, env, number = self.b, self.env, self.number
            bind = b.bind  # operands are tracers: record the primitive directly (what P.add(...) does)
            # Leaves (a number, an assigned name) are made here as expr would make them.
            t = type(node)
            acc = number(node.value) if t is Num else env.get(node.id) if t is Name else None
            if acc is None:
                acc = self.expr(node)
            for op in reversed(spine):
                if op.op == "^":
                    p = _literal_exponent(op)
                    if p is not None:
                        b.pos = op.loc
                        acc = P.pow_const(acc, p=p)
                        continue
                r = op.right
                rt = type(r)
                right = number(r.value) if rt is Num else env.get(r.id) if rt is Name else None
                if right is None:
                    right = self.expr(r)
                b.pos = op.loc
                prim = _BINARY[op.op]
                acc = bind(prim, (acc, right), NO_PARAMS) if prim.__class__ is _PRIMITIVE else prim(acc, right)
            return acc
        if t is Call:
            return self.call(node)
        if t is Unary:
            x = self.expr(node.operand)
            self.b.pos = node.loc
            return P.neg(x) if node.op == "-" else x
        if t is Index:
            x = self.expr(node.value)
            idx = tuple(self.index_item(i) for i in node.items)
            self.b.pos = node.loc
            return P.index(x, idx=idx)
        if t is ArrayLit:
            return self.array(node)
        if t is Bool:
            return self.b.const(1.0 if node.value else 0.0)
        if t is TupleLit:
            raise SyntaxError_("a tuple is only allowed as a shape or axis argument", node.pos)
        raise SyntaxError_(f"unexpected {t.__name__}", getattr(node, "pos", None))

    def name(self, node: Name) -> Tracer:
        v = self.env.get(node.id)
        if v is not None:
            return v
        if node.id in CONSTANTS:
            return self.b.const(CONSTANTS[node.id])
        if self.constants_only:
            hint = did_you_mean(node.id, CONSTANTS) or "values are constant expressions: numbers, lists, pi, ones(3)..."
            raise NameError_(f"unknown name '{node.id}'", node.pos, hint=hint)
        raise NameError_(f"'{node.id}' is used before it is assigned", node.pos)

    def array(self, node: ArrayLit) -> Tracer:
        folded = _fold_literal(node, self.env)
        if folded is not None:
            self.b.pos = node.loc
            self.b.check_size(folded.shape)  # (small in memory: it is as long as its text)
            return self.b.const(folded)
        if not node.items:
            return self.b.const(np.zeros((0,)))
        items = [self.expr(i) for i in node.items]
        for k, (item, it) in enumerate(zip(node.items[1:], items[1:]), start=2):
            if it.shape != items[0].shape:
                raise ShapeError(f"ragged array literal: element {k} has shape {it.shape}, "
                                 f"element 1 has shape {items[0].shape}", _pos(item))
        self.b.pos = node.loc
        self.b.labels[node.loc] = "array literal"  # (what messages call its stacking primitives)
        return _stack(*items, axis=0)

    def index_item(self, item):
        if isinstance(item, Slice):
            parts = [None if p is None else self.static_int(p, "slice bound") for p in
                     (item.start, item.stop, item.step)]
            if parts[2] == 0:
                raise ShapeError("slice step cannot be zero", item.pos)
            return slice(*parts)
        return self.static_int(item, "index")

    def static_int(self, node, what) -> int:
        try:
            v = _static(node, self.env)
        except _NotStatic:
            v = None
        if isinstance(v, bool) or not isinstance(v, int):
            raise ShapeError(f"{what} must be an integer literal", _pos(node),
                             hint="indices and slice bounds are written as numbers, e.g. x[0], x[1:-1]")
        return v

    def call(self, node: Call) -> Tracer:
        fn = FUNCTIONS.get(node.func)
        if fn is None:
            hint = did_you_mean(node.func, FUNCTIONS)
            if node.func in self.env:
                hint = f"'{node.func}' is a value, not a function; use '*' to multiply"
            raise NameError_(f"unknown function '{node.func}'", node.pos, hint=hint)
        if fn.prim is None:  # several primitives (mean: sum, div): messages name the builtin
            self.b.labels[node.loc] = node.func
        if fn.arity == len(node.args) and not node.kwargs:
            # (one argument, the usual case, without a comprehension: it costs more)
            args = [self.expr(node.args[0])] if fn.arity == 1 else [self.expr(a) for a in node.args]
            b = self.b
            b.pos = node.loc
            if fn.prim is not None:  # sin(x): record the primitive directly (what fn.fn does)
                return self.invoke(node, b.bind, (fn.prim, tuple(args), NO_PARAMS))
            return self.invoke(node, fn.fn, args)
        is_constructor = node.func in _CONSTRUCTORS
        try:
            if is_constructor:
                bound = fn.signature.bind(None, *node.args, **{k.name: k.value for k in node.kwargs})
            else:
                bound = fn.signature.bind(*node.args, **{k.name: k.value for k in node.kwargs})
        except TypeError as err:
            raise UsageError(f"{node.func}(): {err}", node.pos,
                             hint=f"usage: {node.func}{_usage(fn)}") from None
        for pname, arg in list(bound.arguments.items()):
            if is_constructor and pname == "builder":
                bound.arguments[pname] = self.b
            elif pname in fn.static:
                bound.arguments[pname] = self.static_arg(node.func, pname, arg)
            elif pname in fn.numbers:
                bound.arguments[pname] = self.number_arg(node.func, pname, arg)
            elif fn.signature.parameters[pname].kind is inspect.Parameter.VAR_POSITIONAL:
                bound.arguments[pname] = tuple(self.expr(a) for a in arg)
            else:
                bound.arguments[pname] = self.expr(arg)
        self.b.pos = node.loc
        return self.invoke(node, fn.fn, bound.args, bound.kwargs)

    @staticmethod
    def invoke(node: Call, fn, args, kwargs=None) -> Tracer:
        try:
            return fn(*args, **kwargs) if kwargs else fn(*args)
        except GradcalcError as err:
            if err.pos is None:
                err.pos = node.pos
            if not err.message.startswith((node.func, f"'{node.func}'")):
                template, _ = err.worded(option)  # (the message with its options still marked)
                err.message = f"{node.func}(): {template}"
                err.args = (err.message,)
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
        try:
            return _static(node, self.env)
        except _NotStatic:
            raise ShapeError(f"{func}(): '{pname}' must be a literal (a number, a tuple such as "
                             f"(2, -1), or true/false)", _pos(node)) from None


def _literal_exponent(op: Binary):
    """The exponent of x^2, x^-1, x^0.5 written as a number, else None."""
    if op.op != "^":
        return None
    r = op.right
    if type(r) is Num:
        return r.value
    if type(r) is Unary and type(r.operand) is Num:
        return -r.operand.value if r.op == "-" else r.operand.value
    return None


class _NotStatic(Exception):
    pass


def _static(node, shadowed=()):
    """The Python value of a literal argument: int, float, bool or tuple.  A constant
    name (pi) counts unless the program has shadowed it."""
    t = type(node)
    if t is Num:
        return int(node.text) if node.is_int else node.value
    if t is Bool:
        return node.value
    if t is Unary and type(node.operand) is Num:
        v = _static(node.operand)
        return -v if node.op == "-" else v
    if t is Name and node.id in CONSTANTS and node.id not in shadowed:
        return CONSTANTS[node.id]
    if t in (TupleLit, ArrayLit):
        return tuple(_static(i, shadowed) for i in node.items)
    raise _NotStatic


def _fold_literal(node: ArrayLit, shadowed=()):
    """A literal made only of numbers, as an array; None if it holds expressions."""
    try:
        value = _static(node, shadowed)
    except _NotStatic:
        return None
    try:
        return np.array(value, dtype=np.float64)
    except ValueError:
        raise ShapeError("ragged array literal: rows have different lengths", node.pos) from None


def _pos(node):
    return getattr(node, "pos", None)


def _usage(fn: Builtin) -> str:
    params = [p for p in fn.signature.parameters.values() if p.name != "builder"]
    return str(fn.signature.replace(parameters=params))


# ==========================================================================
# Entry points
# ==========================================================================


def constant_value(text: str, label: str = "<value>", max_elements: int = DEFAULT_MAX_ELEMENTS):
    """Evaluate a constant expression (an --at value, a cotangent) to a float64 array."""
    from .errors import Source

    node = parse_expression(text, label)
    b = Builder(max_elements, check_finite=False)
    try:
        with np.errstate(all="ignore"):
            return np.asarray(_Lowering(b, {}, constants_only=True).expr(node).value, dtype=np.float64)
    except GradcalcError as err:
        raise err.located(Source(text, label))


def trace(program: Program, at: dict | None = None, *, max_elements: int = DEFAULT_MAX_ELEMENTS,
          sample=None, check_finite: bool = True) -> Traced:
    """Trace program at the point ``at`` (name -> array).

    Inputs not in ``at`` take their declared default; without one, ``sample``
    (name, shape) -> array supplies a value if given, else it is an error.
    """
    at = dict(at or {})
    try:
        if not program.statements:
            raise SyntaxError_("empty program", Pos(1, 1), hint="write an expression, e.g. sin(x)*y")
        defines = _output_names(program)
        inputs = find_inputs(program, defines)
        known = {i.name: i for i in inputs}
        for name in at:
            if name not in known:
                listing = ", ".join(known) or "none"
                hint = did_you_mean(name, known) or f"the inputs are: {listing}"
                raise UsageError(f"'{name}' is not an input of the program", hint=hint)
        b = Builder(max_elements, check_finite)
        env: dict[str, Tracer] = {}
        with np.errstate(all="ignore"):
            for info in inputs:
                _check_declared(info, max_elements)
                value = _input_value(info, at, sample, max_elements, known)
                env[info.name] = b.input(value)
            input_vars = {i.name: env[i.name].var for i in inputs}
            names, positions, last = _Lowering(b, env).statements(program, defines)
        names = {**input_vars, **names}
        positions = {**{i.name: to_loc(*i.pos) for i in inputs}, **positions}
        tape = b.tape(input_vars, names, last, positions)
        b.pos = None
        return Traced(program, tape, b, inputs)
    except GradcalcError as err:
        raise err.located(program.source)


def _check_declared(info: InputInfo, max_elements: int) -> None:
    if info.shape is not None:
        b = Builder(max_elements, check_finite=False)
        b.pos = info.pos
        b.check_size(info.shape)


def _input_value(info: InputInfo, at, sample, max_elements, known):
    if info.name in at:
        value = np.asarray(at[info.name], dtype=np.float64)
        if value.ndim > MAX_NDIM:
            raise ShapeError(f"the value given for '{info.name}' has {value.ndim} dimensions; "
                             f"at most {MAX_NDIM} are supported")
        if info.shape is not None and value.shape != info.shape:
            raise ShapeError(f"the value given for '{info.name}' has shape {value.shape}, but "
                             f"it is declared as {info.name}{list(info.shape)}")
        return value
    if info.default is not None:
        b = Builder(max_elements, check_finite=False)
        value = np.asarray(_Lowering(b, {}, constants_only=True).expr(info.default).value)
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
