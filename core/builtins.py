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
from fractions import Fraction

import numpy as np

from . import primitives as P
from .errors import GradcalcError, LimitError, ShapeError, UsageError, ValueError_
from .tape import Guard, broadcast_shapes
from .syntax import ArrayLit, Bool, Name, Num, TupleLit, Unary

CONSTANTS = {"pi": math.pi, "e": math.e, "inf": math.inf, "nan": math.nan}

# ==========================================================================
# Built-in functions
# ==========================================================================


class Builtin:
    """A function of the language: a Python function over tracers, and which of its
    parameters take literals (axis, shape...) rather than arrays."""

    __slots__ = ("name", "fn", "static", "numbers", "_signature", "arity", "prim", "strings")

    def __init__(self, name, fn, static, numbers=(), prim=None, strings=()):
        self.name, self.fn, self.static, self._signature = name, fn, frozenset(static), None
        self.strings = dict(strings)  # parameters that take a string literal: an example of one
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


def _builtin(name, static=(), numbers=(), prim=None, strings=()):
    def register(fn):
        FUNCTIONS[name] = Builtin(name, fn, static, numbers, prim, strings)
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
    "floor": P.floor, "ceil": P.ceil, "stop_gradient": P.stop_gradient,
    "inv": P.inv, "det": P.det, "cholesky": P.cholesky, "trunc": P.trunc, "erf": P.erf, "erfc": P.erfc, "sinc": P.sinc,
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

@_builtin("round", static=("decimals",), prim=P.round_)
def _round(x, decimals=0):
    # numpy.round's own steps: x scaled by 10^decimals (divided for decimals < 0), rounded half
    # to even, scaled back; a step function, so the derivative is 0, as round(x)'s
    d = _int(decimals, "decimals")
    if d == 0:
        return P.round_(x)
    with np.errstate(over="ignore"):  # (as NumPy's C pow: 10^400 is inf, and the result nan)
        scale = float(np.power(10.0, abs(d)))
    return P.round_(x * scale) / scale if d > 0 else P.round_(x / scale) * scale


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


@_builtin("nan_to_num")
def _nan_to_num(x, nan=0.0, posinf=None, neginf=None):
    # numpy.nan_to_num: derivative 1 where x is finite, 0 where it was replaced, where the
    # replacement's is 1 (nan=, posinf=, neginf= are values: scalars, or arrays that fit x's
    # shape, as NumPy's copyto takes them).  x * 0 is 0 where x is finite, nan elsewhere: a
    # test with no kink at a finite x (x != x, nan's own test, compares x with itself: check
    # saw a kink of '!=' at every point)
    for what, v in (("nan", nan), ("posinf", posinf), ("neginf", neginf)):
        if v is not None and not isinstance(v, float) and not _fits(v.shape, x.shape):
            raise ShapeError(f"{what}= of shape {v.shape} does not fit x's shape {x.shape}")
    big = float(np.finfo(np.float64).max)
    fill = P.where(P.eq(x, -math.inf), -big if neginf is None else neginf, nan)
    fill = P.where(P.eq(x, math.inf), big if posinf is None else posinf, fill)
    return P.where(P.switch_lt(x * 0.0, 1.0), x, fill)


_SQRT_HALF = math.sqrt(0.5)


def _fits(shape: tuple, into: tuple) -> bool:
    """Whether an array of shape broadcasts to the shape into (NumPy's copyto's test)."""
    try:
        return broadcast_shapes(shape, into) == into
    except ValueError:
        return False


@_builtin("where")
def _where(cond, a, b):
    return P.where(cond, a, b)


@_builtin("clip")
def _clip(x, lo, hi):
    return P.minimum(P.maximum(x, lo), hi)


def _reduction(name, prim):
    @_builtin(name, static=("axis", "keepdims"))
    def fn(x, axis=None, keepdims=False):
        if name in ("max", "min"):
            _some_element(name, x, axis)
        return prim(x, axis=axis, keepdims=keepdims)


def _some_element(name: str, x, axis) -> None:
    """Refuse max, min, argmax, argmin over an axis of length 0 (NumPy's and JAX's 'zero-size
    array to reduction operation maximum which has no identity'): the extreme of no elements
    is no number.  Over no axes (axis=()), or an empty array along axes of some length, the
    result is as NumPy's (empty, or the array itself)."""
    axes = P.normalize_axes(axis, x.ndim)
    empty = [a + x.ndim for a in axes if x.shape[a] == 0]
    if not empty:
        return
    if len(axes) == x.ndim:
        what = f"{name} of an empty array (shape {x.shape})"
    else:
        what = f"{name} over axis {empty[0]}, of length 0 (shape {x.shape}),"
    raise ShapeError(f"{what} has no value: there is no element to take",
                     hint=f"{name.split()[0]} needs at least one element: check the array's size first "
                          "(size(x))")


for _name, _prim in {"sum": P.reduce_sum, "max": P.reduce_max, "min": P.reduce_min,
                     "prod": P.reduce_prod, "logsumexp": P.logsumexp}.items():
    _reduction(_name, _prim)


def _truth(name, reduce):
    # masks, no gradient: counts of non-zero elements through logical primitives, which cut the
    # graph and (unlike a comparison) flag no kink of their own, so check notes only the
    # comparisons a program wrote; nan counts as true, as in NumPy
    @_builtin(name, static=("axis", "keepdims"))
    def fn(x, axis=None, keepdims=False):
        return reduce(lambda m: P.reduce_sum(m, axis=axis, keepdims=keepdims), x)


_truth("any", lambda total, x: P.logical_or(total(P.logical_or(x, 0.0)), 0.0))  # some non-zero
_truth("all", lambda total, x: P.logical_not(total(P.logical_not(x))))  # no zero


def _count(x, axis) -> int:
    return math.prod(x.shape[a] for a in P.normalize_axes(axis, x.ndim))


@_builtin("mean", static=("axis", "keepdims"))
def _mean(x, axis=None, keepdims=False):
    return P.reduce_sum(x, axis=axis, keepdims=keepdims) / float(_count(x, axis))


@_builtin("var", static=("axis", "keepdims", "ddof"))
def _var(x, axis=None, keepdims=False, ddof=0):
    # The same operations, in the same order, as numpy.var.
    if isinstance(ddof, (str, tuple)) or ddof is None:
        raise ValueError_(f"ddof must be a number, got {ddof!r}")
    n = _count(x, axis)
    d = x - P.reduce_sum(x, axis=axis, keepdims=True) / float(n)
    return P.reduce_sum(d * d, axis=axis, keepdims=keepdims) / float(max(n - ddof, 0))


@_builtin("std", static=("axis", "keepdims", "ddof"))
def _std(x, axis=None, keepdims=False, ddof=0):
    axes = P.normalize_axes(axis, x.ndim)
    scale = _power_of_two_scale(x.value, axes)
    if scale is None:
        return P.sqrt(_var(x, axis, keepdims, ddof))
    # values whose squared deviations would underflow (or overflow): the std of x / 2^k times
    # 2^k, the same number (a power of two scales exactly), each slice with its own 2^k
    scale = x.builder.const(scale)
    sd = P.sqrt(_var(x / scale, axis, True, ddof)) * scale
    if keepdims:
        return sd
    return P.reshape(sd, shape=tuple(d for k, d in enumerate(x.shape) if k - x.ndim not in axes))


def _power_of_two_scale(values: np.ndarray, axes: tuple):
    """Per slice over axes (keepdims), a power of two within a factor 2 of its largest |value|,
    if some slice's largest is outside [2^-400, 2^400], where squares could underflow or
    overflow; None if every slice's is within (or 0, inf or nan: nothing to scale)."""
    with np.errstate(invalid="ignore"):
        big = np.max(np.abs(values), axis=axes, keepdims=True, initial=0.0)
        big = np.where(np.isfinite(big), big, 0.0)
        outside = (big > 0) & ((big < 2.0 ** -400) | (big > 2.0 ** 400))
    if not outside.any():
        return None
    return np.ldexp(1.0, np.frexp(np.where(outside, big, 1.0))[1] - 1)


@_builtin("softmax", static=("axis",))
def _softmax(x, axis=-1):
    return _over_axes(P.softmax, x, axis)


@_builtin("log_softmax", static=("axis",))
def _log_softmax(x, axis=-1):
    return _over_axes(P.log_softmax, x, axis)


def _over_axes(prim, x, axis):
    """softmax or log_softmax over one axis, or, as JAX's, over a tuple of them: those axes
    moved last and taken as one (over no axes, axis=(), an axis of length 1: softmax is 1
    and log_softmax 0 at each element, nan at inf and nan, as jax.nn.softmax(x, axis=()))."""
    if not isinstance(axis, tuple):
        return prim(x, axis=axis)
    axes = _axis_list(axis, x.ndim)
    if len(axes) == 1:
        return prim(x, axis=axes[0])
    nd, k = x.ndim, len(axes)
    moved = _moveaxis(x, tuple(axes), tuple(range(nd - k, nd))) if k else x
    kept = moved.shape[:nd - k]
    y = prim(P.reshape(moved, shape=kept + (math.prod(moved.shape[nd - k:]),)), axis=-1)
    y = P.reshape(y, shape=moved.shape)
    return _moveaxis(y, tuple(range(nd - k, nd)), tuple(axes)) if k else y


@_builtin("dot")
def _dot(a, b):
    # numpy.dot: a product with a scalar, matmul of vectors and matrices, and otherwise the sum
    # over a's last axis and b's second-to-last (its only one if 1-D): a tensordot, whose axes
    # come out as a's remaining then b's, as numpy.dot orders them (matmul would batch them)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    if a.ndim <= 2 and b.ndim <= 2:
        return P.matmul(a, b)
    k = max(b.ndim - 2, 0)
    if a.shape[-1] != b.shape[k]:
        raise ShapeError(f"shapes {a.shape} and {b.shape} do not match: a's last axis has length "
                         f"{a.shape[-1]}, b's {'second-to-last' if k else 'only'} axis {b.shape[k]}")
    return _tensordot(a, b, axes=((a.ndim - 1,), (k,)))


@_builtin("outer")
def _outer(a, b):
    return P.reshape(a, shape=(-1, 1)) * P.reshape(b, shape=(1, -1))


# -- contractions, over einsum ------------------------------------------------------
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


@_builtin("einsum", static=("subscripts",), strings={"subscripts": "'ij,j->i'"})
def _einsum(subscripts, *operands):
    if not isinstance(subscripts, str):
        raise UsageError("the first argument must be the subscripts, a string such as 'ij,j->i'",
                         hint="einsum('ij,j->i', A, x)")
    if not operands:
        raise UsageError("einsum needs at least one operand after its subscripts")
    if "..." not in subscripts:
        return P.einsum(*operands, subscripts=subscripts)
    written, operands = _einsum_without_ellipsis(subscripts.replace(" ", ""), operands)
    try:
        return P.einsum(*operands, subscripts=written)
    except GradcalcError as err:  # (an error names the subscripts as the program wrote them)
        err.message = err._message.replace(repr(written), repr(subscripts))
        raise


def _einsum_without_ellipsis(spec: str, operands: tuple) -> tuple:
    """(subscripts, operands) with each '...' written out as letters no term uses, NumPy's way:
    the axes an operand's '...' stands for are right-aligned and broadcast against the other
    operands' (an operand is broadcast_to the common shape first, so that the letters name axes
    of equal length: differentiable, and its cotangent is summed back); without '->', the output
    is '...' followed by the letters used once, in alphabetical order."""
    lhs, arrow, out = spec.partition("->")
    ins = lhs.split(",")
    if any(s.count("...") > 1 or s.replace("...", "").count(".") for s in ins + [out]):
        return spec, operands  # (the primitive words what is wrong with them)
    if len(ins) != len(operands):
        return spec.replace("...", ""), operands  # (likewise)
    parts = []  # per operand: (where its '...' axes start, how many), or None
    for k, (s, x) in enumerate(zip(ins, operands), start=1):
        named = len(s.replace("...", ""))
        if "..." not in s:
            parts.append(None)
        elif x.ndim < named:
            raise ShapeError(f"einsum: operand {k} has shape {tuple(x.shape)}, but its subscripts "
                             f"'{s}' name {named} axes besides '...'")
        else:
            parts.append((s.index("..."), x.ndim - named))
    shapes = [x.shape[at:at + n] for x, p in zip(operands, parts) if p for at, n in [p]]
    try:
        common = broadcast_shapes(*shapes) if shapes else ()
    except ValueError:
        raise ShapeError(f"einsum: the axes that '...' stands for do not broadcast in {spec!r}") from None
    if common and arrow and "..." not in out:  # (NumPy refuses to sum them silently)
        raise UsageError(f"einsum: the output names no '...' for the {len(common)} ax"
                         f"{'es' if len(common) > 1 else 'is'} '...' stands for in {spec!r}",
                         hint="add '...' to the output, or sum them after, e.g. sum(einsum('...i->...', x))")
    used = set(spec)
    letters = "".join(c for c in _LETTERS + _LETTERS.upper() if c not in used)[:len(common)]
    if len(letters) < len(common):
        raise UsageError(f"einsum: too few letters are left to write out '...' in {spec!r}")
    operands = tuple(x if p is None else _ellipsis_broadcast(x, p, common) for x, p in zip(operands, parts))
    ins = [s.replace("...", letters) for s in ins]
    if arrow:
        out = out.replace("...", letters)
    else:
        once = sorted(c for c in set("".join(ins)) - set(letters) if "".join(ins).count(c) == 1)
        out = letters + "".join(once)
    return ",".join(ins) + "->" + out, operands


def _ellipsis_broadcast(x, part: tuple, common: tuple):
    """x with the n axes at `at` that '...' stands for made the common shape (right-aligned)."""
    at, n = part
    target = x.shape[:at] + common + x.shape[at + n:]
    if x.shape == target:
        return x
    if n < len(common):  # (missing axes first, of length 1, as NumPy aligns them)
        x = P.reshape(x, shape=x.shape[:at] + (1,) * (len(common) - n) + x.shape[at:])
    return P.broadcast_to(x, shape=target)


def _tensordot_axes(axes, na: int, nb: int) -> tuple:
    if isinstance(axes, int) and not isinstance(axes, bool):
        if axes < 0:  # (NumPy's range(-axes, 0) reads it as 0: an outer product)
            raise ShapeError(f"axes={axes} is a negative number of axes: an integer axes is how many "
                             f"axes are summed (a's last with b's first)",
                             hint="axes=0 is the outer product; to name the axes summed, give two "
                                  "tuples: axes=((-1,), (0,))")
        if axes > min(na, nb):
            raise ShapeError(f"axes={axes} needs both arrays to have at least {axes} axes")
        return tuple(range(na - axes, na)), tuple(range(axes))
    if isinstance(axes, tuple) and len(axes) == 2:
        xa, xb = (p if isinstance(p, tuple) else (p,) for p in axes)
        if len(xa) == len(xb) and all(isinstance(v, int) for v in xa + xb):
            return (tuple(_one_axis(v, na) for v in xa), tuple(_one_axis(v, nb) for v in xb))
    raise ShapeError(f"axes must be an integer or two tuples of axes of equal length, got {axes!r}")


@_builtin("tensordot", static=("axes",))
def _tensordot(a, b, axes=2):
    xa, xb = _tensordot_axes(axes, a.ndim, b.ndim)
    sa = list(_LETTERS[:a.ndim])
    sb = list(_LETTERS[a.ndim:a.ndim + b.ndim])
    for i, j in zip(xa, xb):
        sb[j] = sa[i]
    out = [c for k, c in enumerate(sa) if k not in xa] + [c for k, c in enumerate(sb) if k not in xb]
    return P.einsum(a, b, subscripts="".join(sa) + "," + "".join(sb) + "->" + "".join(out))


@_builtin("inner")
def _inner(a, b):
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    if a.shape[-1] != b.shape[-1]:
        raise ShapeError(f"inner sums over the last axes, which must have one length: shapes "
                         f"{a.shape} and {b.shape} end in {a.shape[-1]} and {b.shape[-1]}")
    sa = _LETTERS[:a.ndim - 1] + "z"
    sb = _LETTERS[a.ndim - 1:a.ndim + b.ndim - 2] + "z"
    return P.einsum(a, b, subscripts=f"{sa},{sb}->{sa[:-1]}{sb[:-1]}")


@_builtin("vdot")
def _vdot(a, b):
    if math.prod(a.shape) != math.prod(b.shape):
        raise ShapeError(f"vdot needs arrays of equal size, got shapes {a.shape} and {b.shape}")
    return P.matmul(_flat(a), _flat(b))


@_builtin("kron")
def _kron(a, b):
    n = max(a.ndim, b.ndim)
    a = P.reshape(a, shape=(1,) * (n - a.ndim) + a.shape)
    b = P.reshape(b, shape=(1,) * (n - b.ndim) + b.shape)
    shape = tuple(p * q for p, q in zip(a.shape, b.shape))
    a.builder.check_size(shape)  # (the product's shape, not that of the outer product made first)
    sa, sb = _LETTERS[:n], _LETTERS[n:2 * n]
    pairs = "".join(x + y for x, y in zip(sa, sb))  # each axis of a with b's beside it
    outer = P.einsum(a, b, subscripts=f"{sa},{sb}->{pairs}")
    return P.reshape(outer, shape=shape)


# -- several results: slogdet, eigh ---------------------------------------------------
@_builtin("slogdet")
def _slogdet(a):
    return P.slogdet_sign(a), P.logabsdet(a)


# A gap between eigenvalues below this share of the spectrum's scale counts as repeated: there
# the eigenvectors' derivative (1 / gap) is not defined
_EIGH_GAP = 1e-8


def _note_repeated_eigenvalues(w) -> None:
    values = w.value
    if values.shape[-1] < 2:
        return
    scale = np.max(np.abs(values), axis=-1, keepdims=True)
    if np.any(np.diff(values, axis=-1) <= _EIGH_GAP * scale):
        w.builder.note_warning("'eigh'", "has repeated eigenvalues: its derivatives are not defined "
                                         "there (they divide by the gaps between eigenvalues)")


@_builtin("eigh")
def _eigh(a):
    w = P.eigh_values(a)
    _note_repeated_eigenvalues(w)
    return w, P.eigh_vectors(a)


# -- svd, qr, pinv, matrix_power, cross --------------------------------------------------

def _matrix_arg(name, x, square=False) -> None:
    if x.ndim < 2 or (square and x.shape[-1] != x.shape[-2]):
        kind = "a square matrix" if square else "a matrix"
        raise ShapeError(f"{name} needs {kind} (or a stack of them), got shape {x.shape}")


def _singular_gaps(values):
    """Per matrix: the gaps between neighbouring singular values (descending) and a gap that
    counts as zero (_EIGH_GAP of the largest, as eigh's)."""
    return -np.diff(values, axis=-1), _EIGH_GAP * values[..., :1]


def _note_singular_values(s, square: bool, vectors: bool) -> None:
    values = s.value
    gaps, tiny = _singular_gaps(values)
    if np.any(gaps <= tiny):
        s.builder.note_warning("'svd'", "has repeated singular values: derivatives through them are not "
                                        "defined there (U's and Vt's divide by the gaps between them)")
    if vectors and not square and np.any(values[..., -1:] <= tiny):
        s.builder.note_warning("'svd'", "has a zero singular value: the derivative of a non-square "
                                        "matrix's U or Vt is not defined there (it divides by it)")


@_builtin("svd", static=("full_matrices", "compute_uv"))
def _svd(a, full_matrices=False, compute_uv=True):
    _matrix_arg("svd", a)
    if full_matrices is not False:
        raise UsageError("svd: only the reduced SVD is supported (full_matrices=false)",
                         hint="U, s, Vt = svd(A) gives U with min(m, n) columns")
    if not isinstance(compute_uv, bool):
        raise UsageError(f"svd: compute_uv must be true or false, not {compute_uv!r}")
    s = P.svd_s(a)
    _note_singular_values(s, a.shape[-1] == a.shape[-2], compute_uv)
    return (P.svd_u(a), s, P.svd_vt(a)) if compute_uv else s


@_builtin("qr", static=("mode",), strings={"mode": "'reduced'"})
def _qr(a, mode="reduced"):
    _matrix_arg("qr", a)
    if mode not in ("reduced", "r"):
        raise UsageError(f"qr: mode {mode!r} is not supported; use 'reduced' (Q, R) or 'r' (R alone)")
    r = P.qr_r(a)
    diagonal = np.abs(np.diagonal(r.value, axis1=-2, axis2=-1))
    if diagonal.size and np.any(diagonal <= _EIGH_GAP * np.max(diagonal, axis=-1, keepdims=True)):
        r.builder.note_warning("'qr'", "has a matrix whose columns are (nearly) dependent: its "
                                       "derivatives are not defined there (they divide by R)")
    return r if mode == "r" else (P.qr_q(a), r)


@_builtin("pinv")
def _pinv(a):
    # (NumPy's default cutoff only: with a cutoff that drops a nonzero singular value, the
    # derivative would need the gaps to the dropped ones, which Golub and Pereyra's has not)
    _matrix_arg("pinv", a)
    return P.pinv(a)


@_builtin("matrix_power", static=("n",))
def _matrix_power(a, n):
    # NumPy's algorithm (the same products in the same order): inv for n < 0, the identity
    # for 0, then repeated squaring over the bits of n
    _matrix_arg("matrix_power", a, square=True)
    n = _int(n, "n")
    if n == 0:
        return a.builder.const(np.broadcast_to(np.eye(a.shape[-1]), a.shape).copy())
    if n < 0:
        a, n = P.inv(a), -n
    elif n == 1:
        return P.copy(a)
    if n <= 3:
        return a if n == 1 else (a @ a if n == 2 else (a @ a) @ a)
    z = result = None
    while n > 0:
        z = a if z is None else z @ z
        n, bit = divmod(n, 2)
        if bit:
            result = z if result is None else result @ z
    return result


@_builtin("cross", static=("axisa", "axisb", "axisc", "axis"))
def _cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    if axis is not None:
        axisa = axisb = axisc = axis
    for what, v in (("axisa", axisa), ("axisb", axisb), ("axisc", axisc)):  # (one axis each, as NumPy)
        _integer_axis(v, "axis" if axis is not None else what)
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError("cross needs vectors, not scalars")
    a, b = _moveaxis(a, axisa, -1), _moveaxis(b, axisb, -1)
    if a.shape[-1] != 3 or b.shape[-1] != 3:
        hint = ("NumPy 2 deprecates 2-vectors; append a zero component: the result's last is "
                "the 2-D cross product") if 2 in (a.shape[-1], b.shape[-1]) else None
        raise ShapeError(f"cross needs vectors of length 3, got {a.shape[-1]} and {b.shape[-1]}",
                         hint=hint)
    x, y = ([P.index(v, idx=(Ellipsis, i)) for i in range(3)] for v in (a, b))
    c = _stack(x[1] * y[2] - x[2] * y[1], x[2] * y[0] - x[0] * y[2], x[0] * y[1] - x[1] * y[0],
               axis=-1)
    return _moveaxis(c, -1, axisc)


# -- norm: NumPy's vector and matrix norms ---------------------------------------------

_MATRIX_ORDS = "'fro', 'nuc', 1, -1, 2, -2, inf, -inf"


def _ord_name(order) -> str:
    return repr(order) if isinstance(order, str) else {math.inf: "inf", -math.inf: "-inf"}.get(order, str(order))


@_builtin("norm", static=("ord", "axis", "keepdims"))
def _norm(x, ord=None, axis=None, keepdims=False):
    if isinstance(ord, bool) or not (ord is None or isinstance(ord, (int, float, str))) or ord != ord:
        raise UsageError(f"norm: ord must be a number, inf, -inf, 'fro' or 'nuc', not {ord!r}")
    axes = axis if isinstance(axis, tuple) else (None if axis is None else (axis,))
    if ord is None and (axes is None or len(axes) != 2):
        return P.norm(x, axis=axis, keepdims=keepdims)  # the 2-norm of the elements over axes
    if axes is None:  # ord given: a vector or a matrix, as NumPy takes them
        if x.ndim not in (1, 2):
            raise ShapeError(f"norm: ord={_ord_name(ord)} needs a vector or a matrix, or axis=, "
                             f"got shape {x.shape}")
        axes = tuple(range(x.ndim))
    if len(axes) == 1:
        return _vector_norm(x, ord, _one_axis(axes[0], x.ndim), keepdims)
    if len(axes) != 2:
        raise ShapeError(f"norm: ord={_ord_name(ord)} takes one axis (a vector norm) or two (a "
                         f"matrix norm), got axis={axis!r}")
    row, col = (_one_axis(a, x.ndim) for a in axes)
    if row == col:
        raise ShapeError(f"norm: the two axes are the same axis, in axis={axis!r}")
    y = _matrix_norm(_moveaxis(x, (row, col), (-2, -1)), "fro" if ord is None else ord)
    if keepdims:
        return P.reshape(y, shape=tuple(1 if k in (row, col) else d for k, d in enumerate(x.shape)))
    return y


def _vector_norm(x, order, axis, keepdims):
    if isinstance(order, str):
        raise UsageError(f"norm: ord={order!r} is a matrix norm; give a matrix or axis=(a, b)",
                         hint="vector norms: ord = a number > 0, inf, -inf, or 0 (the count of nonzeros)")
    if order == 2:
        return P.norm(x, axis=axis, keepdims=keepdims)
    if order == 0:  # NumPy's count of nonzero entries: no derivative
        return P.reduce_sum(P.ne(x, 0.0), axis=axis, keepdims=keepdims)
    if order < 0 and order != -math.inf:
        raise UsageError(f"norm: ord={_ord_name(order)} is not supported for vectors; use a number > 0, "
                         "inf, -inf or 0")
    a = P.abs_(x)
    if math.isinf(order):
        _some_element(f"norm with ord={_ord_name(order)}", x, axis)
        return (P.reduce_max if order > 0 else P.reduce_min)(a, axis=axis, keepdims=keepdims)
    if order == 1:
        return P.reduce_sum(a, axis=axis, keepdims=keepdims)
    total = P.reduce_sum(P.pow_const(a, p=order), axis=axis, keepdims=keepdims)
    zero = P.eq(total, 0.0)  # norm'(0) = 0: no cotangent reaches the power's infinite slope
    return P.where(zero, 0.0, P.pow_const(P.where(zero, 1.0, total), p=1.0 / order))


def _matrix_norm(y, order):
    """A matrix norm of each matrix of y (the last two axes, rows then columns)."""
    if order == "fro":
        return P.norm(y, axis=(-2, -1))
    if order in (1, -1, math.inf, -math.inf):
        extreme = P.reduce_max if order > 0 else P.reduce_min
        sums = P.reduce_sum(P.abs_(y), axis=-2 if abs(order) == 1 else -1)  # columns or rows
        _some_element(f"norm with ord={_ord_name(order)}", sums, -1)
        return extreme(sums, axis=-1)
    if order in ("nuc", 2, -2):
        return _spectral_norm(y, order)
    raise UsageError(f"norm: ord={_ord_name(order)} is not a matrix norm; use one of {_MATRIX_ORDS}")


def _spectral_norm(y, order):
    """'nuc' (the sum of the singular values), 2 (the largest), -2 (the smallest), with
    norm'(0) = 0 and a warning where the derivative is not defined."""
    if 0 in y.shape[-2:] and order != "nuc":
        raise ShapeError(f"norm: ord={_ord_name(order)} of an empty matrix is not defined, got shape {y.shape}")
    s = P.svd_s(y)
    values = s.value
    gaps, tiny = _singular_gaps(values)
    nonzero = values[..., :1] > 0
    if order == "nuc":
        # a zero singular value adds nothing to the derivative (abs'(0) = 0: nuc(diag(1, h)) is
        # 1 + |h|; svd_s's rule gave it the +1 of whatever singular vectors LAPACK chose)
        n = P.reduce_sum(P.where(P.eq(s, 0.0), 0.0, s), axis=-1)
        bad = nonzero & (values[..., -1:] <= tiny)
        why = "a zero singular value (the matrix is not of full rank)"
    else:
        # the largest (smallest) singular value as max's (min's) reduction: tied values share the
        # derivative equally, as max(svd(A)) does (indexing the first gave u1 v1^T alone, which
        # depends on the basis LAPACK chose for the tied ones)
        n = (P.reduce_max if order == 2 else P.reduce_min)(s, axis=-1)
        if order == 2:
            bad = nonzero & (gaps[..., :1] <= tiny)
        else:  # (at a smallest singular value of 0 the derivative is 0, as abs'(0))
            bad = (values[..., -1:] > 0) & (gaps[..., -1:] <= tiny)
        why = "its " + ("largest" if order == 2 else "smallest") + " singular value repeated"
    if np.any(bad):
        s.builder.note_warning("'norm'", f"with ord={_ord_name(order)} has {why}: its derivative is "
                                         "not defined there")
    return P.where(P.eq(n, 0.0), 0.0, n)  # norm'(0) = 0 (and, for -2, at a singular matrix)


@_builtin("diag", static=("k",))
def _diag(x, k=0):
    if isinstance(k, bool) or not isinstance(k, int):  # as NumPy: no float diagonal offsets
        raise ShapeError(f"k must be an integer, not {k!r}")
    if x.ndim == 1:
        n = x.shape[0] + abs(k)
        return P.diag_embed(x, k=k, shape=(n, n))
    if x.ndim != 2:
        raise ShapeError(f"diag needs a vector or a matrix, got shape {x.shape}")
    return P.diag(x, k=_offset(k, x.shape))


@_builtin("transpose", static=("axes",))
def _transpose(x, axes=None):
    return P.transpose(x, axes=axes)


@_builtin("moveaxis", static=("start", "end"))
def _moveaxis(x, start, end):
    # (NumPy calls them source and destination; words the language keeps away from, see
    # test_no_builtin_function_takes_a_path_or_a_command)
    nd = x.ndim
    src, dst = _axis_list(start, nd), _axis_list(end, nd)
    if len(src) != len(dst):
        raise ShapeError("moveaxis: source and destination must have the same number of axes")
    order = [k for k in range(nd) if k not in src]
    for d, a in sorted(zip(dst, src)):
        order.insert(d, a)
    return P.transpose(x, axes=tuple(order))


def _one_axis(axis, nd, what: str = "axis") -> int:
    """One axis (an int: not a tuple, empty or not, nor None) as a non-negative axis, where
    NumPy takes one integer axis (diff, take_along_axis, concat...)."""
    if axis is None or isinstance(axis, (tuple, list)):
        raise ShapeError(f"{what} must be an integer, not {axis!r}")
    return P.normalize_axes(axis, nd)[0] + nd


def _integer_axis(axis, what: str = "axis") -> None:
    """Refuse anything but one integer axis (a tuple, empty or not, None, true, 1.5)."""
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise ShapeError(f"{what} must be an integer, not {axis!r}")


def _axis_list(axis, nd) -> list:
    """An int or a tuple of axes as non-negative axes, in the order given (checked)."""
    items = axis if isinstance(axis, tuple) else (axis,)
    out = [_one_axis(a, nd) for a in items]
    if len(set(out)) != len(out):
        raise ShapeError(f"repeated axis in {axis}")
    return out


@_builtin("reshape", static=("shape",))
def _reshape(x, shape):
    return P.reshape(x, shape=_shape_arg(shape))


@_builtin("flatten")
def _flatten(x):
    return _flat(x)


@_builtin("concat", static=("axis",))
def _concat(*xs, axis=0):
    if not xs:
        raise UsageError("concat needs at least one array")
    if axis is None:  # NumPy's: the arrays flattened, then joined
        xs = tuple(_flat(x) for x in xs)
        axis = 0
    _integer_axis(axis)
    return P.concat(*xs, axis=axis)


@_builtin("stack", static=("axis",))
def _stack(*xs, axis=0):
    if not xs:
        raise UsageError("stack needs at least one array")
    nd = xs[0].ndim
    for x in xs[1:]:
        if x.shape != xs[0].shape:
            raise ShapeError(f"stack needs arrays of equal shape, got {xs[0].shape} and {x.shape}")
    _integer_axis(axis)
    if not -(nd + 1) <= axis <= nd:
        raise ShapeError(f"axis {axis} is out of range for stacking arrays of dimension {nd}")
    axis %= nd + 1
    parts = [P.reshape(x, shape=x.shape[:axis] + (1,) + x.shape[axis:]) for x in xs]
    return parts[0] if len(parts) == 1 else P.concat(*parts, axis=axis)


# -- shape: reshapes, transposes and gathers ------------------------------------

@_builtin("squeeze", static=("axis",))
def _squeeze(x, axis=None):
    nd = x.ndim
    axes = [k for k, d in enumerate(x.shape) if d == 1] if axis is None else _axis_list(axis, nd)
    for a in axes:
        if x.shape[a] != 1:
            raise ShapeError(f"cannot squeeze axis {a} of length {x.shape[a]} (shape {x.shape})")
    return P.reshape(x, shape=tuple(d for k, d in enumerate(x.shape) if k not in axes))


@_builtin("expand_dims", static=("axis",))
def _expand_dims(x, axis):
    nd = x.ndim + (len(axis) if isinstance(axis, tuple) else 1)
    axes = _axis_list(axis, nd)
    dims = iter(x.shape)
    return P.reshape(x, shape=tuple(1 if k in axes else next(dims) for k in range(nd)))


@_builtin("swapaxes", static=("axis1", "axis2"))
def _swapaxes(x, axis1, axis2):
    order = list(range(x.ndim))
    a, b = _one_axis(axis1, x.ndim), _one_axis(axis2, x.ndim)
    order[a], order[b] = b, a
    return P.transpose(x, axes=tuple(order))


@_builtin("flip", static=("axis",))
def _flip(x, axis=None):
    axes = range(x.ndim) if axis is None else _axis_list(axis, x.ndim)
    return P.index(x, idx=tuple(slice(None, None, -1) if k in axes else slice(None) for k in range(x.ndim)))


@_builtin("fliplr")
def _fliplr(x):
    if x.ndim < 2:
        raise ShapeError(f"fliplr needs an array of at least two dimensions, got shape {x.shape}")
    return _flip(x, 1)


@_builtin("flipud")
def _flipud(x):
    if x.ndim < 1:
        raise ShapeError("flipud needs an array of at least one dimension")
    return _flip(x, 0)


@_builtin("rot90", static=("k", "axes"))
def _rot90(x, k=1, axes=(0, 1)):
    # numpy.rot90's own steps: flips and one transpose
    if not isinstance(axes, tuple) or len(axes) != 2 or x.ndim < 2:
        raise ShapeError("rot90 needs two axes of an array of at least two dimensions")
    a, b = _axis_list(axes, x.ndim)
    k = _int(k, "k") % 4
    if k == 0:
        return x
    if k == 2:
        return _flip(_flip(x, a), b)
    order = list(range(x.ndim))
    order[a], order[b] = order[b], order[a]
    if k == 1:
        return P.transpose(_flip(x, b), axes=tuple(order))
    return _flip(P.transpose(x, axes=tuple(order)), b)


@_builtin("roll", static=("shift", "axis"))
def _roll(x, shift, axis=None):
    if axis is None:
        rolled = _roll(_flat(x), shift, 0)
        return rolled if x.ndim == 1 else P.reshape(rolled, shape=x.shape)
    axes = _axis_list(axis, x.ndim)
    shifts = shift if isinstance(shift, tuple) else (shift,) * len(axes)
    if len(shifts) != len(axes):
        raise ShapeError(f"roll: {len(shifts)} shifts for {len(axes)} axes")
    for a, n in zip(axes, shifts):  # (as NumPy: a shift along a repeated axis adds up)
        length = max(x.shape[a], 1)  # (the shift reduced first: 10^30 fits no index array)
        x = _gather_axis(x, (np.arange(x.shape[a]) - _int(n, "shift") % length) % length, a)
    return x


def _gather_axis(x, positions: np.ndarray, axis: int):
    """x with axis replaced by x's entries at the given integer positions (one gather)."""
    return P.index(x, idx=(slice(None),) * axis + (positions.astype(np.intp),))


@_builtin("repeat", static=("repeats", "axis"))
def _repeat(x, repeats, axis=None):
    if axis is None:
        x, axis = _flat(x), 0
    a = _one_axis(axis, x.ndim)
    # the counts as Python integers (2**63 is no int64, 10**30 no NumPy integer at all)
    counts = whole(repeats)
    each = counts if isinstance(counts, tuple) else (counts,)
    if any(isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in each):
        raise ShapeError(f"repeats must be a non-negative integer or a tuple of them, got {repeats!r}")
    if isinstance(counts, tuple) and len(counts) != x.shape[a]:
        raise ShapeError(f"repeat: {len(counts)} repeats for an axis of length {x.shape[a]}")
    # the new length in Python integers (int64 sums overflow), checked before np.repeat allocates
    length = sum(counts) if isinstance(counts, tuple) else counts * x.shape[a]
    x.builder.check_size(x.shape[:a] + (length,) + x.shape[a + 1:], "repeat()'s result")
    if x.shape[a] == 0:  # (any count of nothing is nothing: repeat(zeros(0), 2**63))
        return _gather_axis(x, np.zeros(0, dtype=np.intp), a)
    return _gather_axis(x, np.repeat(np.arange(x.shape[a]), np.asarray(counts, dtype=np.intp)), a)


@_builtin("tile", static=("reps",))
def _tile(x, reps):
    reps = tuple(_int_arg("reps", r) for r in (reps if isinstance(reps, tuple) else (reps,)))
    nd = max(x.ndim, len(reps))
    x = P.reshape(x, shape=(1,) * (nd - x.ndim) + x.shape)
    reps = (1,) * (nd - len(reps)) + reps
    x.builder.check_size(tuple(d * r for d, r in zip(x.shape, reps)), "tile()'s result")
    for a, r in enumerate(reps):
        if r != 1:
            x = _gather_axis(x, np.tile(np.arange(x.shape[a]), r), a)
    return x


_PAD_MODES = ("constant", "edge", "wrap", "reflect", "symmetric")


@_builtin("pad", static=("pad_width", "mode"))
def _pad(x, pad_width, mode="constant", constant_values=0.0):
    if mode not in _PAD_MODES:
        raise UsageError(f"pad: mode {mode!r} is not supported; use one of "
                         f"{', '.join(repr(m) for m in _PAD_MODES)}")
    try:
        widths = np.broadcast_to(np.asarray(whole(pad_width)), (x.ndim, 2))
    except ValueError:
        raise ShapeError(f"pad: pad_width {pad_width!r} does not fit an array of dimension {x.ndim}") from None
    if widths.dtype.kind not in "iu" or (widths < 0).any():
        raise ShapeError(f"pad: pad_width holds non-negative integers, got {pad_width!r}")
    if mode == "constant":
        return _pad_constant(x, widths, constant_values)
    if not isinstance(constant_values, float):  # (as NumPy: a value no mode but 'constant' reads)
        raise UsageError(f"pad: mode {mode!r} takes no constant_values")
    x.builder.check_size(tuple(d + b + a for d, (b, a) in zip(x.shape, widths.tolist())), "pad()'s result")
    for a, (before, after) in enumerate(widths.tolist()):
        if x.shape[a] == 0 and before + after:
            raise ShapeError(f"pad: mode {mode!r} cannot pad the empty axis {a}")
        x = _gather_axis(x, np.pad(np.arange(x.shape[a]), (before, after), mode=mode), a)
    return x


def _pad_constant(x, widths, value):
    shape = tuple(d + b + a for d, (b, a) in zip(x.shape, widths.tolist()))
    x.builder.check_size(shape)
    inside = tuple(slice(b, b + d) for d, (b, _) in zip(x.shape, widths.tolist()))
    out = P.index_put(x, idx=inside, shape=shape)
    if isinstance(value, float):  # (the default, 0)
        return out
    if math.prod(value.shape) == 1:  # one value for the whole border
        border = np.ones(shape)
        border[inside] = 0.0
        return P.where(border, P.reshape(value, shape=()), out)
    # numpy.pad's (before, after) pairs, axis by axis: the later axes' values fill the corners
    pairs = _pad_pairs(value, x.ndim)
    for a, (before, after) in enumerate(widths.tolist()):
        for k, part in ((0, slice(0, before)), (1, slice(before + x.shape[a], None))):
            side = np.zeros(shape)
            side[(slice(None),) * a + (part,)] = 1.0
            out = P.where(side, P.index(pairs, idx=(a, k)), out)
    return out


def _pad_pairs(value, nd: int):
    """constant_values as numpy.pad reads it: an (nd, 2) array of (before, after) per axis."""
    if value.shape in ((2,), (1, 2)):  # (before, after) for every axis
        value = P.reshape(value, shape=(1, 2))
    if not _fits(value.shape, (nd, 2)):
        raise ShapeError(f"constant_values of shape {value.shape} give no (before, after) pair for "
                         f"each of the {nd} axes", hint="a number, [before, after], or one pair per axis "
                         "as [[b0, a0], [b1, a1]]")
    return P.broadcast_to(value, shape=(nd, 2))


@_builtin("broadcast_to", static=("shape",))
def _broadcast_to(x, shape):
    return P.broadcast_to(x, shape=_new_shape(shape))


def _atleast(nd, x):
    """numpy.atleast_{nd}d: a vector becomes a row (2-D) or (1, n, 1) (3-D)."""
    if x.ndim >= nd:
        return x
    if nd < 3:
        return P.reshape(x, shape=(1,) * (nd - x.ndim) + x.shape)
    return P.reshape(x, shape={0: (1, 1, 1), 1: (1,) + x.shape + (1,), 2: x.shape + (1,)}[x.ndim])


for _nd in (1, 2, 3):
    _builtin(f"atleast_{_nd}d")((lambda nd: lambda x: _atleast(nd, x))(_nd))


def _arrays(name, xs):
    if not xs:
        raise UsageError(f"{name} needs at least one array")
    return xs


@_builtin("vstack")
def _vstack(*xs):
    return P.concat(*[_atleast(2, x) for x in _arrays("vstack", xs)], axis=0)


@_builtin("hstack")
def _hstack(*xs):
    xs = [_atleast(1, x) for x in _arrays("hstack", xs)]
    return P.concat(*xs, axis=0 if xs[0].ndim == 1 else 1)


@_builtin("column_stack")
def _column_stack(*xs):
    cols = [P.reshape(x, shape=(-1, 1)) if x.ndim < 2 else x for x in _arrays("column_stack", xs)]
    return P.concat(*cols, axis=1)


@_builtin("append", static=("axis",))
def _append(x, values, axis=None):
    if axis is None:
        return P.concat(_flat(x), _flat(values), axis=0)
    _integer_axis(axis)
    return P.concat(x, values, axis=axis)


_MAX_PARTS = 10_000  # results of one split: a program names each part it takes apart


def _split_bounds(n_or_indices, length: int, even: bool) -> list:
    """numpy.split's (start, stop) of each part along an axis of the given length."""
    if isinstance(n_or_indices, tuple):  # split points, taken as slice bounds (as NumPy does)
        cuts = [_int(i, "a split index") for i in n_or_indices]
        return list(zip([0] + cuts, cuts + [length]))
    n = _int(n_or_indices, "the number of sections")
    if n <= 0:
        raise ShapeError(f"the number of sections must be positive, got {n}")
    if n > _MAX_PARTS:  # (each part is a value of its own, taken apart by name)
        raise LimitError(f"{n} sections are more than the {_MAX_PARTS} a split gives",
                         hint="to cut an axis into many equal pieces, reshape it: reshape(x, (n, -1))")
    if even and length % n:
        raise ShapeError(f"an axis of length {length} does not split into {n} equal sections",
                         hint="array_split allows unequal ones; or give the split indices, e.g. (2, 5)")
    q, r = divmod(length, n)  # (numpy.array_split: the first r parts have one more)
    stops = np.cumsum([q + 1] * r + [q] * (n - r)).tolist()
    return list(zip([0] + stops[:-1], stops))


def _splitter(name, even):
    @_builtin(name, static=("n_or_indices", "axis"))
    def fn(x, n_or_indices, axis=0):
        # several results (a, b = split(x, 2)): one slice of x each
        a = _one_axis(axis, x.ndim)
        return tuple(P.index(x, idx=(slice(None),) * a + (slice(start, stop),))
                     for start, stop in _split_bounds(n_or_indices, x.shape[a], even))


_splitter("split", even=True)
_splitter("array_split", even=False)


@_builtin("take", static=("axis",))
def _take(x, indices, axis=None):
    if axis is None:
        x, axis = _flat(x), 0
    a = _one_axis(axis, x.ndim)
    return P.index(x, idx=(slice(None),) * a + (_index_values(indices),))


@_builtin("take_along_axis", static=("axis",))
def _take_along_axis(x, indices, axis):
    if axis is None:
        x, axis = _flat(x), 0
    idx = _index_values(indices)
    if idx.ndim != x.ndim:
        raise ShapeError(f"take_along_axis: indices of dimension {idx.ndim} for an array of dimension {x.ndim}")
    return _take_along(x, idx, axis)


def _flat(x):
    """x flattened (NumPy's axis=None, ravel): x itself where it is a vector already, so that a
    loop's take(x, i) or append(z, v) records no reshape a step, whose cotangent, reshaped
    back, would be added to x's in full (O(n) a step under hessian, not O(1))."""
    return x if x.ndim == 1 else P.reshape(x, shape=(-1,))


def _index_values(t, what="an index array", guard="index", below=None) -> np.ndarray:
    """An index array's integers (guarded: the tape holds while they stay the same); with
    below=n, each in [0, n) (a user error otherwise: no wrapping, no dropping)."""
    value = np.asarray(t.value)
    if not (np.isfinite(value) & (value == np.round(value))).all():
        raise ShapeError(f"{what} must hold integers")
    if below is not None and value.size and (value.min() < 0 or value.max() >= below):
        bad = value.min() if value.min() < 0 else value.max()  # (as a float: 1e300 is no intp)
        shown = int(bad) if abs(bad) < 2 ** 53 else float(bad)
        raise ShapeError(f"{what} holds {shown}, out of range for n={below} (ids go from 0 to n - 1)")
    if value.size and float(np.max(np.abs(value))) >= 2.0 ** 62:  # (an intp would wrap it)
        raise ShapeError(f"{what} holds {float(value.flat[np.argmax(np.abs(value))]):g}, out of range "
                         "for any axis")
    return _decided(t, guard)


# -- gather and scatter ----------------------------------------------------------

@_builtin("one_hot", static=("n",))
def _one_hot(labels, n):
    # a constant: labels.shape + (n,), 1 at each label (no gradient flows to the labels)
    n = _int_arg("n", n)
    ids = _index_values(labels, "labels", "labels", below=n)
    labels.builder.check_size(ids.shape + (n,))
    return labels.builder.const((ids[..., None] == np.arange(n)).astype(np.float64))


@_builtin("segment_sum", static=("n",))
def _segment_sum(data, segment_ids, n):
    """TensorFlow's unsorted_segment_sum: out[k] sums the rows data[i] with segment_ids[i] = k
    (segment_ids' shape a prefix of data's; a segment with no row is 0)."""
    n = _int_arg("n", n)
    k = segment_ids.ndim
    if k == 0 or data.shape[:k] != segment_ids.shape:
        raise ShapeError(f"segment_ids of shape {segment_ids.shape} must have the shape of data's "
                         f"leading axes {data.shape[:max(k, 1)]}: one id per row of data")
    shape = (n,) + data.shape[k:]
    ids = _index_values(segment_ids, "segment_ids", "segment_ids", below=n)
    data.builder.check_size(shape)
    # the scatter that adds repeated indices (numpy.add.at): its VJP is the gather
    # g[segment_ids], its JVP the segment_sum of the tangent
    return P.index_put(data, idx=P.normalize_index((ids,), shape), shape=shape)


@_builtin("diagonal", static=("offset", "axis1", "axis2"))
def _diagonal(x, offset=0, axis1=0, axis2=1):
    if x.ndim < 2:
        raise ShapeError(f"needs a matrix, got shape {x.shape}")
    a, b = _one_axis(axis1, x.ndim), _one_axis(axis2, x.ndim)
    if a == b:
        raise ShapeError("axis1 and axis2 cannot be the same")
    k = _offset(_int(offset, "offset"), (x.shape[a], x.shape[b]))
    if (a, b) == (x.ndim - 2, x.ndim - 1) and x.ndim == 2:
        return P.diag(x, k=k)
    rest = [d for d in range(x.ndim) if d not in (a, b)]
    moved = P.transpose(x, axes=tuple(rest) + (a, b))
    n, m = x.shape[a], x.shape[b]
    rows = np.arange(max(0, -k), max(0, min(n, m - k)))
    return P.index(moved, idx=(slice(None),) * len(rest) + (rows, rows + k))


@_builtin("trace", static=("offset", "axis1", "axis2"))
def _trace(x, offset=0, axis1=0, axis2=1):
    return P.reduce_sum(_diagonal(x, offset, axis1, axis2), axis=-1)


def _triangle(name, keep):
    @_builtin(name, static=("k",))
    def fn(x, k=0):
        if x.ndim < 1:
            raise ShapeError(f"{name} needs an array of at least one dimension, got shape {x.shape}")
        # (numpy's mask of a 1-D x is square: x broadcast as the rows of a matrix)
        square = x.shape[-2:] if x.ndim > 1 else x.shape * 2
        mask = keep(np.ones(square), _offset(_int(k, "k"), square))
        return P.where(mask, x, 0.0)  # (where, not a product: an inf above the diagonal gives 0)


_triangle("tril", np.tril)
_triangle("triu", np.triu)


# -- sizes: integer values ---------------------------------------------------------

@_builtin("len")
def _len(x):
    if x.ndim == 0:
        raise ShapeError("len() of a scalar")
    return x.builder.const(np.float64(x.shape[0]))


@_builtin("size", static=("axis",))
def _size(x, axis=None):
    n = math.prod(x.shape) if axis is None else x.shape[_one_axis(axis, x.ndim)]
    return x.builder.const(np.float64(n))


@_builtin("ndim")
def _ndim(x):
    return x.builder.const(np.float64(x.ndim))


def _offset(k: int, shape) -> int:
    """A diagonal offset k of an (n, m) matrix, clamped to [-n, m]: every k beyond selects
    no entry (or all of a triangle) as those edges do, and fits in NumPy's C long."""
    n, m = shape
    return max(-n, min(m, k))


def _int(v, what) -> int:
    n = whole(v)
    if isinstance(n, bool) or not isinstance(n, int):
        raise ShapeError(f"{what} must be an integer, not {v!r}")
    return n


def whole(v, largest: float = math.inf):
    """An integral float as the int it is, in tuples too, up to largest in size (SPEC §2.3: a
    value that is an integer is one).  The interpreter reads integer arguments so up to 2^53,
    past which a float stays a float for the messages of built-ins that do not read it again
    (reshape's 'got 1e+300'); the built-ins that read counts read them so without a bound
    (2**62 arrives as 4.6e18, and is a count all the same).  Messages show v as given."""
    if type(v) is float and v.is_integer() and abs(v) <= largest:
        return int(v)
    if type(v) is tuple:
        return tuple(whole(x, largest) for x in v)
    return v


# -- scans and order -------------------------------------------------------------

def _along(x, axis):
    """(x, axis) with NumPy's axis=None meaning the flattened array."""
    if axis is None:
        return _flat(x), -1
    if x.ndim == 0:
        raise ShapeError("needs an array of at least one dimension (or axis=None)")
    _one_axis(axis, x.ndim)  # (checked: one axis in range, not a tuple)
    return x, axis




def _scan(name, prim, default=None):
    @_builtin(name, static=("axis",))
    def fn(x, axis=default):
        x, axis = _along(x, axis)
        return prim(x, axis=axis)


_scan("cumsum", P.cumsum)
_scan("cumprod", P.cumprod)


@_builtin("argsort", static=("axis",))
def _argsort(x, axis=-1):
    # (integer values, no gradient); numpy.argsort sorts a 0-d array as a 1-D one: [0]
    x, axis = _along(P.reshape(x, shape=(1,)) if x.ndim == 0 else x, axis)
    return _chosen(P.argsort(x, axis=axis), "argsort")


def _arg_extreme(name, prim):
    @_builtin(name, static=("axis", "keepdims"))
    def fn(x, axis=None, keepdims=False):
        # integer values, no gradient; keepdims leaves the reduced axis (or every axis) as 1
        if keepdims not in (True, False):
            raise UsageError(f"keepdims must be true or false, not {keepdims!r}")
        x_axis = _along(x, axis)
        _some_element(name, x, axis)
        i = _chosen(prim(*x_axis), name)
        if not keepdims:
            return i
        a = None if axis is None else _one_axis(axis, x.ndim)
        return P.reshape(i, shape=tuple(1 if a is None or k == a else d for k, d in enumerate(x.shape)))


_arg_extreme("argmax", lambda x, axis: P.argmax(x, axis=axis))
_arg_extreme("argmin", lambda x, axis: P.argmin(x, axis=axis))


def _axis_slice(nd, axis, part) -> tuple:
    return (slice(None),) * _one_axis(axis, nd) + (part,)


@_builtin("diff", static=("n", "axis"))
def _diff(x, n=1, axis=-1, prepend=None, append=None):
    n = _int_arg("n", n)
    if x.ndim == 0:
        raise ShapeError("diff needs an array of at least one dimension")
    _one_axis(axis, x.ndim)  # (one axis, as numpy.diff: not (), (0, 1) or none)
    if prepend is not None or append is not None:  # numpy.diff: joined to x along axis first
        parts = [_diff_end(prepend, x, axis)] if prepend is not None else []
        parts += [x] + ([_diff_end(append, x, axis)] if append is not None else [])
        x = P.concat(*parts, axis=axis)
    # as numpy.diff: the difference of two slices, n times; after `length` of them the axis
    # is empty and stays so (a user's n = 10^6 must not run 10^6 Python steps)
    length = x.shape[_one_axis(axis, x.ndim)]
    for _ in range(min(n, length)):
        x = P.index(x, idx=_axis_slice(x.ndim, axis, slice(1, None))) - \
            P.index(x, idx=_axis_slice(x.ndim, axis, slice(None, -1)))
    return x


def _diff_end(v, x, axis):
    """diff's prepend or append as numpy.diff joins it: a scalar broadcast to one slice of x."""
    if v.ndim:
        return v
    shape = list(x.shape)
    shape[_one_axis(axis, x.ndim)] = 1
    return P.broadcast_to(v, shape=tuple(shape))


@_builtin("trapezoid", static=("axis",))
def _trapezoid(y, x=None, dx=1.0, axis=-1):
    if y.ndim == 0:
        raise ShapeError("trapezoid needs an array of at least one dimension")
    _one_axis(axis, y.ndim)  # (one axis, as numpy.trapezoid)
    if x is None:
        d = dx
    elif x.ndim == 1:  # spacings along axis, as numpy.trapezoid lays a 1-D x out
        d = _diff(x)
        shape = [1] * y.ndim
        shape[_one_axis(axis, y.ndim)] = d.shape[0]
        d = P.reshape(d, shape=tuple(shape))
    else:
        d = _diff(x, axis=axis)
    pair = P.index(y, idx=_axis_slice(y.ndim, axis, slice(1, None))) + \
        P.index(y, idx=_axis_slice(y.ndim, axis, slice(None, -1)))
    return P.reduce_sum(d * pair / 2.0, axis=axis)


def _chosen(t, what: str):
    """t, positions the point chose (argsort, argmax, argmin: integer values, no derivative),
    recorded as a decision as a sort order is: another point may choose others, which check and
    plot treat as another path, and a closed form (--symbolic) holds for this choice only."""
    _decided(t, what)
    return t


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
    ax = _one_axis(axis, nd)
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
    # each run's number, counted on over the rows of the leading axes: one id per element
    runs = np.concatenate([np.zeros(v.shape[:-1] + (1,), dtype=np.intp), np.cumsum(~tied, axis=-1)], axis=-1)
    per_row = runs[..., -1].reshape(-1) + 1
    ids = (runs.reshape(per_row.size, -1) + (np.cumsum(per_row) - per_row)[:, None]).reshape(-1)
    total = int(per_row.sum())
    idx = P.normalize_index((ids,), (total,))
    # each run's mean, by a segment sum and a gather (linear in the length: a matrix of which
    # elements share a run was n^2, and refused sort(x) of 12,000 values half of them tied)
    moved = _moveaxis(y, axis, -1)
    sums = P.index_put(P.reshape(moved, shape=(-1,)), idx=idx, shape=(total,))
    mean = P.reshape(P.index(sums / np.bincount(ids, minlength=total).astype(np.float64), idx=idx),
                     shape=moved.shape)
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
    # (a length past 2^53 arrives as a float and is an integer all the same (SPEC §2.3): the
    # size check words it as too large, zeros((0, 2**63 - 1)), not as a non-integer)
    shape = _shape_arg(whole(shape))
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
def _eye(builder, n, m=None, k=0):
    n, m = _int_arg("n", n), _int_arg("m", n if m is None else m)
    builder.check_size((n, m))
    return builder.const(np.eye(n, m, k=_offset(_int(k, "k"), (n, m))))


@_constructor("arange", numbers=("start", "stop", "step"))
def _arange(builder, start, stop=None, step=1):
    if stop is None:
        start, stop = 0, start
    for what, v in (("start", start), ("stop", stop), ("step", step)):
        if not math.isfinite(_number_arg(v)):  # (NumPy fails on them when it sizes the result)
            raise ValueError_(f"arange: {what} must be finite, not {v}")
    if step == 0:
        raise ValueError_("arange: step must not be zero")
    quotient = (stop - start) / step
    if math.isfinite(quotient):
        size = max(0, math.ceil(quotient))
    else:  # (stop - start overflowed, or the step is a denormal: the length counted exactly)
        size = max(0, math.ceil((Fraction(stop) - Fraction(start)) / Fraction(step)))
    builder.check_size((size,))  # (arange(0, 1, 1e-320): 1e320 elements, refused here)
    if size == 0:  # (NumPy refuses even an empty range between numbers as large as 1e300)
        return builder.const(np.zeros(0))
    if not math.isfinite(quotient):
        # arange(1e308, -1e308, -1e307): 21 numbers, whose length NumPy cannot compute; each
        # start + i step, halved and doubled (exactly) so that i step does not overflow
        half = float(start) / 2 + np.arange(size, dtype=np.float64) * (float(step) / 2)
        return builder.const(half * 2)
    return builder.const(np.arange(start, stop, step, dtype=np.float64))


@_constructor("full", numbers=("v",))
def _full(builder, shape, v):
    shape = _new_shape(shape)
    builder.check_size(shape)
    return builder.const(np.full(shape, v, dtype=np.float64))


def _like(name, fill):
    _builtin(name)(lambda x: x.builder.const(np.full(x.shape, fill)))


_like("zeros_like", 0.0)
_like("ones_like", 1.0)


@_builtin("full_like", numbers=("v",))
def _full_like(x, v):
    return x.builder.const(np.full(x.shape, v, dtype=np.float64))


@_builtin("linspace", static=("n", "endpoint", "axis"))
def _linspace(a, b, n=50, endpoint=True, axis=0):
    """numpy.linspace's own steps, differentiable in a and b: a + i (b - a) / (n - 1), the
    last exactly b; arrays a and b give shape (n,) + their broadcast shape (the new axis
    moved to axis)."""
    n = _int_arg("n", n)
    if endpoint not in (True, False):  # (1 and 0 count, as in NumPy; 2 is a slip)
        raise UsageError(f"endpoint must be true or false, not {endpoint!r}")
    builder = a.builder
    try:
        shape = broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ShapeError(f"shapes {a.shape} and {b.shape} do not broadcast") from None
    builder.check_size((n,) + shape)
    axis = _one_axis(axis, 1 + len(shape))
    if a.var in builder.consts and b.var in builder.consts:  # linspace(0, 1, 5): one constant
        return builder.const(np.linspace(a.value, b.value, n, endpoint=endpoint, axis=axis))
    delta = b - a
    ramp = builder.const(np.arange(n, dtype=np.float64).reshape((-1,) + (1,) * delta.ndim))
    div = n - 1 if endpoint else n
    y = (ramp * (delta / float(div)) if div > 0 else ramp * delta) + a
    # (NumPy's one other branch, for a step that underflows to 0 from a denormal b - a, is
    # not followed: the derivatives are the same and only such values differ)
    if endpoint and n > 1:
        y = P.index_update(y, b, idx=(-1,))
    return y if axis == 0 else _moveaxis(y, 0, axis)


def _int_arg(what, v) -> int:
    n = whole(v)
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ShapeError(f"{what} must be a non-negative integer, got {v!r}")
    return n


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
