"""The built-in functions of the language, written over primitives.

Built-in functions that are not primitives (``mean``, ``clip``, ``stack``,
``outer``...) are written here in terms of primitives, so the tape holds only
the registry's small closed set.  :data:`FUNCTIONS` is the table the
interpreter (core/run.py) looks calls up in; it is built once, as the module
loads, and read-only afterwards.
"""
from __future__ import annotations

import inspect
import math

import numpy as np

from . import primitives as P
from .errors import ShapeError, UsageError, ValueError_
from .tape import Guard
from .syntax import ArrayLit, Bool, Name, Num, TupleLit, Unary

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
    "inv": P.inv, "det": P.det, "trunc": P.trunc, "erf": P.erf, "erfc": P.erfc, "sinc": P.sinc,
}.items():
    _register_primitive(_name, _prim)

for _name, _prim in {"atan2": P.atan2, "hypot": P.hypot, "maximum": P.maximum,
                     "minimum": P.minimum, "pow": P.pow_, "matmul": P.matmul,
                     "solve": P.solve, "fmax": P.fmax, "fmin": P.fmin, "mod": P.mod,
                     "logaddexp": P.logaddexp, "logaddexp2": P.logaddexp2,
                     "copysign": P.copysign, "add": P.add, "multiply": P.mul,
                     "divide": P.div}.items():
    _builtin(_name, prim=_prim)((lambda prim: lambda a, b: prim(a, b))(_prim))


# -- elementwise, over primitives ----------------------------------------------

@_builtin("square")
def _square(x):
    return P.pow_const(x, p=2)  # (np.square: NumPy's own x ** 2)


@_builtin("reciprocal")
def _reciprocal(x):
    return 1.0 / x


@_builtin("log_sigmoid")
def _log_sigmoid(x):
    # log(1 / (1 + exp(-x))) = -softplus(-x): softplus is stable, so this is at +-1000
    return -P.softplus(-x)


@_builtin("gelu")
def _gelu(x):
    # the exact form x Phi(x) = x erf(x / sqrt 2) / 2 + x / 2, written with erfc, which keeps
    # its relative accuracy where Phi is tiny (x << 0)
    return x * (0.5 * P.erfc(x * -_SQRT_HALF))


@_builtin("silu")
def _silu(x):
    return x * P.sigmoid(x)


@_builtin("deg2rad")
def _deg2rad(x):
    return x * (math.pi / 180.0)  # (numpy.deg2rad's own constant)


@_builtin("rad2deg")
def _rad2deg(x):
    return x * (180.0 / math.pi)


@_builtin("nan_to_num", numbers=("nan", "posinf", "neginf"))
def _nan_to_num(x, nan=0.0, posinf=None, neginf=None):
    # numpy.nan_to_num: derivative 1 where x is finite, 0 where it was replaced
    big = float(np.finfo(np.float64).max)
    x = P.where(P.eq(x, math.inf), big if posinf is None else posinf, x)
    x = P.where(P.eq(x, -math.inf), -big if neginf is None else neginf, x)
    return P.where(P.ne(x, x), nan, x)


_SQRT_HALF = math.sqrt(0.5)


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


def _moveaxis(x, source, destination):
    nd = x.ndim
    src, dst = P.normalize_axes(source, nd)[0] + nd, P.normalize_axes(destination, nd)[0] + nd
    order = [k for k in range(nd) if k != src]
    order.insert(dst, src)
    return P.transpose(x, axes=tuple(order))


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


# -- scans and order -------------------------------------------------------------

def _along(x, axis):
    """(x, axis) with NumPy's axis=None meaning the flattened array."""
    if axis is None:
        return P.reshape(x, shape=(-1,)), -1
    if x.ndim == 0:
        raise ShapeError("needs an array of at least one dimension (or axis=None)")
    return x, axis




def _scan(name, prim, default=None):
    @_builtin(name, static=("axis",))
    def fn(x, axis=default):
        x, axis = _along(x, axis)
        return prim(x, axis=axis)


_scan("cumsum", P.cumsum)
_scan("cumprod", P.cumprod)
_scan("argsort", P.argsort, -1)  # (integer values, no gradient)
_scan("argmax", P.argmax)
_scan("argmin", P.argmin)


def _axis_slice(nd, axis, part) -> tuple:
    return (slice(None),) * (P.normalize_axes(axis, nd)[0] + nd) + (part,)


@_builtin("diff", static=("n", "axis"))
def _diff(x, n=1, axis=-1):
    n = _int_arg("n", n)
    if x.ndim == 0:
        raise ShapeError("diff needs an array of at least one dimension")
    for _ in range(n):  # (as numpy.diff: the difference of two slices, n times)
        x = P.index(x, idx=_axis_slice(x.ndim, axis, slice(1, None))) - \
            P.index(x, idx=_axis_slice(x.ndim, axis, slice(None, -1)))
    return x


@_builtin("trapezoid", static=("axis",), numbers=("dx",))
def _trapezoid(y, x=None, dx=1.0, axis=-1):
    if y.ndim == 0:
        raise ShapeError("trapezoid needs an array of at least one dimension")
    if x is None:
        d = dx
    elif x.ndim == 1:  # spacings along axis, as numpy.trapezoid lays a 1-D x out
        d = _diff(x)
        shape = [1] * y.ndim
        shape[P.normalize_axes(axis, y.ndim)[0]] = d.shape[0]
        d = P.reshape(d, shape=tuple(shape))
    else:
        d = _diff(x, axis=axis)
    pair = P.index(y, idx=_axis_slice(y.ndim, axis, slice(1, None))) + \
        P.index(y, idx=_axis_slice(y.ndim, axis, slice(None, -1)))
    return P.reduce_sum(d * pair / 2.0, axis=axis)


def _decided(t, what: str) -> np.ndarray:
    """The integer values of t, a decision the tape is recorded under (a guard, as an index)."""
    ints = t.value.astype(np.intp)
    b = t.builder
    if t.var not in b.consts:
        b.guards.append(Guard(t.var, ints, b.pos, what))
    return ints


def _take_along(x, idx: np.ndarray, axis: int):
    """numpy.take_along_axis(x, idx, axis) for a constant integer idx, by one gather."""
    nd = x.ndim
    ax = P.normalize_axes(axis, nd)[0] + nd
    grid = [np.arange(d).reshape([-1 if k == i else 1 for k in range(nd)])
            for i, d in enumerate(idx.shape)]
    grid[ax] = idx
    return P.index(x, idx=tuple(grid))


@_builtin("sort", static=("axis",))
def _sort(x, axis=-1):
    # A permutation: the stable sort order, as a guarded index.  Tied values share their
    # gradient equally, as in max (each tied output is also the mean of its group).
    x, axis = _along(x, axis)
    y = _take_along(x, _decided(P.argsort(x, axis=axis), "sort order"), axis)
    return _share_ties(y, axis)


def _share_ties(y, axis):
    """y (sorted along axis) with the derivative of each run of equal finite values averaged:
    y + (mean - mean), whose value is y exactly and whose derivative is the mean's."""
    v = np.moveaxis(y.value, axis, -1)
    tied = (v[..., 1:] == v[..., :-1]) & np.isfinite(v[..., 1:])
    if not tied.any():
        return y
    group = np.concatenate([np.zeros(v.shape[:-1] + (1,)), np.cumsum(~tied, axis=-1)], axis=-1)
    same = (group[..., :, None] == group[..., None, :]).astype(np.float64)
    weights = same / same.sum(axis=-1, keepdims=True)
    moved = _moveaxis(y, axis, -1)
    mean = P.reduce_sum(weights * P.reshape(moved, shape=moved.shape[:-1] + (1, moved.shape[-1])), axis=-1)
    shared = P.stop_gradient(moved) + (mean - P.stop_gradient(mean))
    return _moveaxis(shared, -1, axis)


# -- NumPy's spellings ---------------------------------------------------------

@_builtin("subtract")
def _subtract(a, b):
    return a - b


@_builtin("negative")
def _negative(x):
    return -x


def _alias(spelling, name):
    """NumPy's name for a built-in: the same function, its messages under the name used."""
    fn = FUNCTIONS[name]
    FUNCTIONS[spelling] = Builtin(spelling, fn.fn, fn.static, fn.numbers, fn.prim)


for _spelling, _name in {
    "arcsin": "asin", "arccos": "acos", "arctan": "atan", "arcsinh": "asinh", "arccosh": "acosh",
    "arctanh": "atanh", "arctan2": "atan2", "absolute": "abs", "fabs": "abs", "power": "pow",
    "radians": "deg2rad", "degrees": "rad2deg", "amax": "max", "amin": "min", "ravel": "flatten",
    "concatenate": "concat", "true_divide": "divide",
}.items():
    _alias(_spelling, _name)


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



def stack(*xs, axis=0):
    """NumPy's stack over tracers (what an array literal of expressions is)."""
    return _stack(*xs, axis=axis)


def is_constructor(name: str) -> bool:
    """Whether the builtin called name takes the builder first (a constant constructor)."""
    return name in _CONSTRUCTORS


# ==========================================================================
# Literal arguments
# ==========================================================================


class NotStatic(Exception):
    """An argument that is not a literal (it must be evaluated)."""


def static_value(node, shadowed=()):
    """The Python value of a literal argument: int, float, bool or tuple.  A constant
    name (pi) counts unless the program has shadowed it."""
    t = type(node)
    if t is Num:
        return int(node.text) if node.is_int else node.value
    if t is Bool:
        return node.value
    if t is Unary and type(node.operand) is Num:
        v = static_value(node.operand)
        return -v if node.op == "-" else v
    if t is Name and node.id in CONSTANTS and node.id not in shadowed:
        return CONSTANTS[node.id]
    if t in (TupleLit, ArrayLit):
        return tuple(static_value(i, shadowed) for i in node.items)
    raise NotStatic


def fold_literal(node: ArrayLit, shadowed=()):
    """A literal made only of numbers, as an array; None if it holds expressions."""
    try:
        value = static_value(node, shadowed)
    except NotStatic:
        return None
    try:
        return np.array(value, dtype=np.float64)
    except ValueError:
        raise ShapeError("ragged array literal: rows have different lengths", node.pos) from None


def usage(fn: Builtin) -> str:
    """A builtin's parameters as its usage hint shows them."""
    params = [p for p in fn.signature.parameters.values() if p.name != "builder"]
    return str(fn.signature.replace(parameters=params))
