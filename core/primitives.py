"""The primitive registry: one stanza per primitive, forward and derivative rules together.

Each :class:`Primitive` has
- ``impl(*arrays, **params)``: the NumPy forward function;
- ``vjp``: one rule per argument, ``rule(g, ans, *args, **params) -> cotangent``;
- ``jvp``: one rule per argument, ``rule(t, ans, *args, **params) -> tangent``,
  the contributions of all arguments being summed;
- ``normalize(shapes, builder, **params) -> params``: checks the arguments'
  logical shapes and rewrites parameters to address axes *from the end*, which
  is what lets every primitive accept extra leading batch axes;
- facts: ``differentiable`` (False cuts the graph: comparisons, stop_gradient),
  ``analytic`` (evaluates on complex input, for complex-step differences),
  ``kink(ans, *args, **params)`` (the signed distance of the arguments from where
  the function is not differentiable, so that ``check`` can flag points near a
  kink), ``branch(base, ans) -> bool per row`` (a factorisation's discrete choice:
  for a batch ``ans`` of its values at points a step away, whether each row chose
  otherwise than ``base``, the value at the point; ``check`` notes such a step, as it
  notes a change of path), ``keeps_finite`` (real finite arguments always give a finite value: tanh,
  sin, and what only rearranges its operand's elements: index, reshape, transpose,
  broadcast_to; the tracer then skips its look for nan and inf, which could only find what
  an operand already had); ``elementwise`` (each element of the value depends on the same
  element of each operand, broadcast, alone: a nan or inf where every operand's element is
  finite is new, and is warned of even when another element of an operand is not finite);
- ``reads``: the values its derivative rules, VJP and JVP, read, operands by position (0,
  1...) and its output as :data:`OUT`; None (the default) when they may read any.  Parameters
  and shapes are not values: ``sum``'s rule reads none.  The derivative commands free, while
  they record, every array that no rule reads once nothing refers to it
  (``Builder.release_unread``): of W8's six 32 KB arrays a step, the rules read one, and a loop
  writing ``z[i]`` writes into z's array instead of copying it;
- ``plain_vjp`` (matmul only): VJP rules whose matrix products skip the look for
  0 * inf terms, for a first-order eager pass that is re-run with the safe rules
  when a result is not finite (``transforms.backward(..., safe_products=False)``).
- ``eager`` (optional): ``impl`` and ``normalize`` in one, for a call on NumPy arrays, or on
  one NumPy scalar (an eager derivative pass runs its rules on them, and re-normalising
  their parameters cost more than the arithmetic of a small product or a broadcast view);
  it returns None where the operands need ``normalize``'s checks, and the general path runs.

Rules are traced like any program: they call primitives on tracers, so a
derivative pass is itself a tape and can be differentiated again.  The engine
(``transforms``) sums a cotangent over broadcast dimensions once, after the
rule; rules never deal with broadcasting.

A zero cotangent (or tangent) contributes exactly zero: rules multiply by a
derivative factor through ``safe_mul``/``safe_div``, which give 0 where the
incoming cotangent is 0 even if the factor is inf or nan.

A primitive's closed form for ``symbolic`` lives in :mod:`.symbolic` (``_rules``);
a test walks the registry, so a new primitive needs one there, or a reason in
``symbolic.NO_CLOSED_FORM``.  Primitives marked "(internal)" are recorded only by
derivative rules or by the lowering, never named by a program.
"""
from __future__ import annotations

import math
import operator
from itertools import accumulate
from types import MappingProxyType
from typing import Callable

import numpy as np

from .errors import ShapeError, UsageError, ValueError_
from .tape import F64, F64_SCALAR, MAX_NDIM, OUT, Tracer, all_finite, broadcast_shapes, by_row, has_nan

_ARRAY = np.ndarray


class Primitive:
    """One entry of the registry.  Calling it on tracers records an equation."""

    __slots__ = ("name", "impl", "vjp", "jvp", "normalize", "differentiable", "analytic", "kink",
                 "branch", "variadic", "trivial_params", "plain", "keeps_finite", "plain_vjp", "eager",
                 "reads", "elementwise", "symmetric_operand", "write_into")

    def __init__(self, name, impl, vjp=None, jvp=None, normalize=None, *, differentiable=True,
                 analytic=True, kink=None, branch=None, variadic=False, keeps_finite=False,
                 plain_vjp=None, eager=None, reads=None, elementwise=False, symmetric_operand=False):
        self.name = name
        self.impl = impl
        self.vjp = vjp
        # jvp[i]: operand i's rule; a variadic primitive's is one rule for all its operands,
        # jvp(ts, ans, *xs, **params), given every operand's tangent (None for one without):
        # rules one operand at a time would cost O(n) each (a concat's tangent is the concat of
        # its operands' tangents, not a sum of n arrays each the size of the result)
        self.jvp = jvp
        self.normalize = normalize or _no_params
        self.trivial_params = normalize is None  # no parameters to check or rewrite
        self.plain = None  # a broadcasting primitive's function, for operands of equal shape
        self.differentiable = differentiable
        self.analytic = analytic
        self.kink = kink
        self.branch = branch
        self.variadic = variadic
        self.keeps_finite = keeps_finite
        self.plain_vjp = plain_vjp
        self.eager = eager
        self.reads = None if reads is None else tuple(reads)
        self.elementwise = elementwise
        # reads one triangle of its square operand while its derivative treats the operand as
        # symmetric (SPEC §2.5): check compares such an input along symmetric directions
        self.symmetric_operand = symmetric_operand
        # impl's form that writes its result into its first operand's array (an index update: see
        # Builder.overwrite), or None
        self.write_into = None

    def vjp_rule(self, i: int) -> Callable | None:
        return _rule(self.vjp, i, self.variadic)

    def __call__(self, *args, **params):
        """On tracers: record an equation.  On arrays: compute eagerly (first-order passes)."""
        # Fast paths for the usual cases, with the results of the general code below: one or
        # two tracers (tracing), one or two NumPy scalars (an eager pass on a scalar program).
        # Arrays (an eager pass on an array program): equal shapes for a broadcasting primitive,
        # no parameters to normalise, or the primitive's own ``eager`` form of impl and normalize.
        n = len(args)
        if n == 2:
            x, y = args
            tx = type(x)
            if tx is F64_SCALAR or tx is _ARRAY:
                if type(y) is tx:
                    if self.plain is not None and not params and (tx is F64_SCALAR or x.shape == y.shape):
                        return self.plain(x, y)
                    if self.eager is not None and tx is _ARRAY:
                        value = self.eager(x, y, **params)
                        if value is not None:
                            return value
            elif tx is Tracer:
                # A tracer and a constant (a rule's factor, or a value an eager pass mixes with a
                # batch of tangents): the constant made a tracer, as the general code below does.
                builder = x.builder
                return builder.bind(self, args if type(y) is Tracer else (x, builder.const(y)), params)
            if type(y) is Tracer:  # a constant and a tracer
                builder = y.builder
                return builder.bind(self, (builder.const(x), y), params)
        elif n == 1:
            x = args[0]
            tx = type(x)
            if tx is F64_SCALAR or tx is _ARRAY:
                if self.normalize is _no_params:
                    try:
                        return self.impl(x, **params) if params else self.impl(x)
                    except np.linalg.LinAlgError as err:
                        raise ValueError_(f"'{self.name}': {str(err).lower()}") from None
                if self.eager is not None:  # (a NumPy scalar too: the cotangent of a sum)
                    value = self.eager(x, **params)
                    if value is not None:
                        return value
            elif tx is Tracer:
                return x.builder.bind(self, args, params)
        for a in args:
            if type(a) is Tracer:
                builder = a.builder
                for x in args:
                    if type(x) is not Tracer:
                        args = tuple(x if type(x) is Tracer else builder.const(x) for x in args)
                        break
                return builder.bind(self, args, params)
        xs = [a if isinstance(a, (np.ndarray, np.generic)) else np.asarray(a, dtype=np.float64)
              for a in args]
        if self.plain is not None and not params and len(xs) == 2 and xs[0].shape == xs[1].shape:
            return self.plain(*xs)
        if self.normalize is not _no_params:
            params = self.normalize([x.shape for x in xs], _UNLIMITED, **params)
        try:
            return self.impl(*xs, **params)
        except np.linalg.LinAlgError as err:
            raise ValueError_(f"'{self.name}': {str(err).lower()}") from None

    def __repr__(self):
        return f"<primitive {self.name}>"


def _rule(rules, i, variadic):
    if rules is None:
        return None
    if variadic:
        return lambda *a, **p: rules(i, *a, **p)
    return rules[i]


def _no_params(shapes, builder, **params):
    return params


class _Unlimited:
    """The size budget of eager evaluation: shapes were already checked when traced."""

    @staticmethod
    def check_size(shape):
        return None


_UNLIMITED = _Unlimited()


_REGISTRY: dict[str, Primitive] = {}


def _def(name, impl, vjp=None, jvp=None, normalize=None, **facts) -> Primitive:
    if name in _REGISTRY:
        raise RuntimeError(f"primitive {name!r} registered twice")
    if facts.get("kink") is not None and normalize is _broadcast_params:
        facts["kink"] = _aligned_kink(facts["kink"])
    prim = Primitive(name, impl, vjp, jvp, normalize, **facts)
    _REGISTRY[name] = prim
    return prim


# ==========================================================================
# Shapes and batch axes
# ==========================================================================

def _align(x, nd: int, ond: int):
    """Give a batched operand of logical rank nd the rank ond (size-1 axes after the batch)."""
    if nd == ond or x.ndim == nd:
        return x  # unbatched: NumPy already aligns from the right
    b = x.ndim - nd
    return x.reshape(x.shape[:b] + (1,) * (ond - nd) + x.shape[b:])


def _aligned_kink(kink):
    """A broadcasting primitive's kink distance on operands lined up as its impl lines them up:
    plot calls it on batched operands, (samples,) + each operand's shape, which NumPy aligns
    from the right only at equal ranks (s % ones(3): (200,) and (200, 3))."""
    def aligned(ans, *xs, nd=None, ond=None, **params):
        if nd is not None:
            xs = [_align(x, n, ond) for x, n in zip(xs, nd)]
        return kink(ans, *xs, **params)
    return aligned


def _batch(x, nd: int) -> tuple:
    return x.shape[:x.ndim - nd]


def _broadcast_params(shapes, builder, **params):
    if len(shapes) == 2:  # the usual case: the general code below, unrolled
        x, y = shapes
        if x == y:
            return params
        try:
            out = broadcast_shapes(x, y)
        except ValueError:
            raise ShapeError(f"shapes {tuple(x)} and {tuple(y)} do not broadcast") from None
        builder.check_size(out)
        if len(x) == len(y):
            return params  # equal ranks (then out has that rank too: nothing to align)
        return {"nd": (len(x), len(y)), "ond": len(out), **params}
    first = shapes[0]
    for s in shapes:
        if s != first:
            break
    else:
        return params  # equal shapes: nothing to align
    try:
        out = broadcast_shapes(*shapes)
    except ValueError:
        shown = " and ".join(str(tuple(s)) for s in shapes)
        raise ShapeError(f"shapes {shown} do not broadcast") from None
    builder.check_size(out)
    nd = tuple(len(s) for s in shapes)
    if all(n == len(out) for n in nd):
        return params  # equal ranks: NumPy lines batched operands up already
    return {"nd": nd, "ond": len(out), **params}


def _elementwise(fn):
    """Wrap an n-ary NumPy function so that batched operands of unequal rank line up."""
    def impl(*xs, nd=None, ond=None):
        if nd is None:
            return fn(*xs)
        if len(xs) == 2 and xs[0].ndim == nd[0] and xs[1].ndim == nd[1]:
            return fn(*xs)  # unbatched (a traced value): _align would return both as they are
        return fn(*[_align(x, n, ond) for x, n in zip(xs, nd)])
    return impl


def normalize_axes(axis, nd: int) -> tuple:
    """Normalise an axis argument (None, int or tuple) to sorted negative axes."""
    if axis is None:
        return tuple(range(-nd, 0))
    items = axis if isinstance(axis, (tuple, list)) else (axis,)
    out = []
    for a in items:
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)):
            raise ShapeError(f"axis must be an integer, not {a!r}")
        if not -nd <= a < nd:
            raise ShapeError(f"axis {a} is out of range for an array of dimension {nd}")
        a = int(a) - nd if a >= 0 else int(a)
        if a in out:
            raise ShapeError(f"axis {a + nd} is repeated")
        out.append(a)
    return tuple(sorted(out))


def _reduced_shape(shape, axes, keepdims) -> tuple:
    """shape reduced over axes (negative, as normalize_axes gives them)."""
    if keepdims:
        out = list(shape)
        for a in axes:
            out[a] = 1
        return tuple(out)
    nd = len(shape)
    pos = {a + nd for a in axes}
    return tuple(d for i, d in enumerate(shape) if i not in pos)


# ==========================================================================
# Elementwise, one argument
# ==========================================================================

def _at_zero(ans, x):
    return x


def _unary(name, fn, deriv, **facts):
    """An elementwise primitive: both rules multiply by deriv(ans, x)."""
    rule = (lambda g, ans, x, **_: _times(g, deriv(ans, x)),)
    return _def(name, fn, rule, rule, elementwise=True, **facts)


def _times(g, d, fresh: bool = False):
    """safe_mul(g, d) in a rule.  On two arrays of one shape (an eager pass) it is the function
    that call runs on them (the plain function of a broadcasting primitive), called directly:
    the call's dispatch cost a fifth of tanh's rule on a 128×32 array.  A cotangent that repeats
    one value (every stride 0: the cotangent of a sum, a read-only view of its seed) multiplies
    as that value, a NumPy scalar: the same products, and safe_multiply judges a scalar factor
    by itself instead of finding what the view repeats (1.7 us of 3.4 on 128×32).  ``fresh``: d
    is an array the rule has just made for this product alone, which a product by a nonzero
    finite scalar (no nan to mend, so no look at d) is written into: one temporary fewer; by
    one, it is d itself (d * 1.0 is d bit for bit: d, made by arithmetic, holds no signalling
    nan), one pass fewer (a loss's seed is 1, and a sum's cotangent repeats it)."""
    if g.__class__ is _ARRAY and d.__class__ is _ARRAY and g.shape == d.shape:
        if g.ndim and not any(g.strides) and g.size:
            g = g[(0,) * g.ndim]  # (its one value, a NumPy scalar)
            real = g.__class__ is F64_SCALAR  # (not a complex one: d could not take its products)
            if fresh and real and g != 0 and _isfinite(g):  # (safe_multiply returns g * d as it is then)
                return d if g == 1 else _multiply(d, g, d)
        return safe_multiply(g, d)
    return safe_mul(g, d)


_multiply, _isfinite = np.multiply, math.isfinite


def _one_minus_square(ans, x):
    """tanh's slope, 1 - ans * ans; on an array, the subtraction is written into the square it
    has just made (the same operations: one temporary instead of two)."""
    if ans.__class__ is _ARRAY and ans.ndim:  # (a 0-d array's square is a NumPy scalar)
        square = ans * ans
        return np.subtract(1, square, square)
    return 1 - ans * ans


def _zero_rule(g, ans, *args, **_):
    return zeros_like(g)


def _zero_derivative(name, fn, kink):
    return _def(name, fn, (_zero_rule,), (_zero_rule,), analytic=False, kink=kink, keeps_finite=True,
                reads=(), elementwise=True)


def _sigmoid(x):
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _softplus(x):
    return np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0)


_LN2, _LN10 = math.log(2.0), math.log(10.0)

# (operator.neg is np.negative on arrays, and on a NumPy scalar the same sign flip at a ninth of
# the ufunc's cost: -x on np.float64)
neg = _def("neg", operator.neg, (lambda g, ans, x: neg(g),), (lambda g, ans, x: neg(g),),
           keeps_finite=True, reads=())
# the value of x with zero derivative (a complex value passes whole: the complex step
# differences the program's values, which stop_gradient does not change)
stop_gradient = _def("stop_gradient", lambda x: x, differentiable=False)
zeros_like = _def("zeros_like", np.zeros_like, differentiable=False)  # (internal: rules' zeros)
# (internal) x, as a value of its own: `a = x` names a copy, so that derivatives with respect
# to a hold x fixed
copy = _def("copy", lambda x: x, (lambda g, ans, x: g,), (lambda t, ans, x: t,), keeps_finite=True,
            reads=())

abs_ = _unary("abs", np.abs, lambda ans, x: sign(x), analytic=False, kink=_at_zero, keeps_finite=True,
              reads=(0,))
sqrt = _unary("sqrt", np.sqrt, lambda ans, x: 0.5 / ans, reads=(OUT,))
cbrt = _unary("cbrt", np.cbrt, lambda ans, x: 1 / (3 * ans * ans), analytic=False, reads=(OUT,))
exp = _unary("exp", np.exp, lambda ans, x: ans, reads=(OUT,))
expm1 = _unary("expm1", np.expm1, lambda ans, x: ans + 1, reads=(OUT,))
exp2 = _unary("exp2", np.exp2, lambda ans, x: ans * _LN2, reads=(OUT,))
log = _unary("log", np.log, lambda ans, x: 1 / x, reads=(0,))
log1p = _unary("log1p", np.log1p, lambda ans, x: 1 / (1 + x), reads=(0,))
log2 = _unary("log2", np.log2, lambda ans, x: 1 / (x * _LN2), reads=(0,))
log10 = _unary("log10", np.log10, lambda ans, x: 1 / (x * _LN10), reads=(0,))
sin = _unary("sin", np.sin, lambda ans, x: cos(x), keeps_finite=True, reads=(0,))
cos = _unary("cos", np.cos, lambda ans, x: -sin(x), keeps_finite=True, reads=(0,))
tan = _unary("tan", np.tan, lambda ans, x: 1 + ans * ans, reads=(OUT,))
asin = _unary("asin", np.arcsin, lambda ans, x: 1 / sqrt(1 - x * x), reads=(0,))
acos = _unary("acos", np.arccos, lambda ans, x: -1 / sqrt(1 - x * x), reads=(0,))
atan = _unary("atan", np.arctan, lambda ans, x: 1 / (1 + x * x), keeps_finite=True, reads=(0,))
sinh = _unary("sinh", np.sinh, lambda ans, x: cosh(x), reads=(0,))
cosh = _unary("cosh", np.cosh, lambda ans, x: sinh(x), reads=(0,))
tanh = _unary("tanh", np.tanh, _one_minus_square, keeps_finite=True, reads=(OUT,))
asinh = _unary("asinh", np.arcsinh, lambda ans, x: 1 / sqrt(x * x + 1), reads=(0,))
acosh = _unary("acosh", np.arccosh, lambda ans, x: 1 / (sqrt(x - 1) * sqrt(x + 1)), reads=(0,))
atanh = _unary("atanh", np.arctanh, lambda ans, x: 1 / (1 - x * x), reads=(0,))
sigmoid = _unary("sigmoid", _sigmoid, lambda ans, x: ans * (1 - ans), analytic=False, keeps_finite=True,
                 reads=(OUT,))
relu = _unary("relu", lambda x: np.maximum(x, 0.0), lambda ans, x: gt(x, 0.0), analytic=False,
              kink=_at_zero, keeps_finite=True, reads=(0,))
softplus = _unary("softplus", _softplus, lambda ans, x: sigmoid(x), analytic=False, reads=(0,))

sign = _zero_derivative("sign", np.sign, kink=_at_zero)
floor = _zero_derivative("floor", np.floor, kink=lambda ans, x: x - np.round(x))
ceil = _zero_derivative("ceil", np.ceil, kink=lambda ans, x: x - np.round(x))
round_ = _zero_derivative("round", np.round, kink=lambda ans, x: x - np.floor(x) - 0.5)  # half to even
trunc = _zero_derivative("trunc", np.trunc, kink=lambda ans, x: x - np.round(x))


def _pointwise(fn):
    """A float function of the math module, elementwise.  NumPy has no erf; math.erf is
    correctly rounded to within an ulp.  np.frompyfunc is the fastest plain loop (4 us on 10
    values, 0.2 us a value on 10^5; np.vectorize is 1.8 times slower on small arrays)."""
    loop = np.frompyfunc(fn, 1, 1)

    def impl(x):
        if type(x) is F64_SCALAR:
            return F64_SCALAR(fn(x))
        return np.asarray(loop(x), dtype=np.float64)
    return impl


def _gauss(x):
    # d/dx erf(x) = 2/sqrt(pi) exp(-x^2)
    return _TWO_OVER_SQRT_PI * exp(-(x * x))


# d/dy sin(y)/y = sum over k >= 1 of (-1)^k 2k y^(2k-1) / (2k+1)!: the first nine terms, in
# y^2, are exact to an ulp for |y| < 1 (the tenth is below 4e-19 there)
_SINC_SERIES = tuple((-1) ** k * 2 * k / math.factorial(2 * k + 1) for k in range(9, 0, -1))


def _sinc_slope(ans, x):
    """d/dx sinc(x) = (cos(pi x) - sinc(x)) / x, which cancels near 0 (relative error about
    eps / (pi x)^2: 1.7e-5 at x = 1e-6, and 0 instead of -pi^2 x / 3 at 1e-9).  For |pi x| < 1
    it is pi y P(y^2) with y = pi x, a polynomial: exact at 0 and, being traced like any rule,
    differentiated again into the second derivative's series (-pi^2/3 at 0).  Each branch
    sees a harmless argument where it is not chosen (the series would overflow far out)."""
    y = math.pi * x
    near = switch_lt(abs_(y), 1.0)
    ys = where(near, y, 0.0)
    t = ys * ys
    poly = _SINC_SERIES[0]
    for c in _SINC_SERIES[1:]:
        poly = poly * t + c
    xs = where(near, 1.0, x)
    # (+ 0.0: the slope at 0 is +0, not -0)
    return where(near, math.pi * ys * poly + 0.0, (cos(math.pi * xs) - ans) / xs)


_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
erf = _unary("erf", _pointwise(math.erf), lambda ans, x: _gauss(x), analytic=False, keeps_finite=True,
             reads=(0,))
erfc = _unary("erfc", _pointwise(math.erfc), lambda ans, x: -_gauss(x), analytic=False, keeps_finite=True,
              reads=(0,))
sinc = _unary("sinc", np.sinc, _sinc_slope, analytic=False, reads=(OUT, 0))  # (pi x overflows at 1e308)


# ==========================================================================
# Elementwise, several arguments (broadcasting)
# ==========================================================================

def _binary(name, fn, rules, plain=None, **facts):
    """A broadcasting primitive; elementwise rules serve as both VJP and JVP.  ``plain``
    (default fn) is called on operands of equal shape: Python's operator for arithmetic,
    which on the NumPy scalars of a scalar program is ten times faster than the ufunc, and
    on arrays calls the same ufunc."""
    prim = _def(name, _elementwise(fn), rules, rules, _broadcast_params, elementwise=True, **facts)
    prim.plain = plain or fn
    return prim


def safe_multiply(g, d):
    """g * d on arrays (safe_mul's forward function): 0 where g or d is 0 and the product is nan."""
    r = g * d
    if type(r) is F64_SCALAR and r == r:  # a scalar that is not nan: _zero_nans returns it
        return r
    return _zero_nans(r, g, d, _either_zero)


def safe_divide(g, d):
    """g / d on arrays (safe_div's forward function): 0 where g is 0 and the quotient is nan."""
    r = g / d
    if type(r) is F64_SCALAR and r == r:  # as in safe_multiply
        return r
    return _zero_nans(r, g, d, _first_zero)


def _either_zero(g, d):
    return (g == 0) | (d == 0)


def _first_zero(g, d):
    return g == 0


def _zero_nans(r, g, d, zero_operand):
    """r with 0 for each nan that a zero operand met (``zero_operand(g, d)``); the rest as is.

    Such a nan needs a zero, inf or nan on the other side (0 * inf, 0 / 0, 0 / nan).  In a
    batched pass one operand is often a small unbatched factor, and a broadcast view repeats
    few values: when those are finite and have no zeros, no operand is zero where the other
    is, so r needs no look (a pass over the few values, not over r).
    """
    if r.__class__ is np.float64:  # scalars
        return _ZERO if r != r and zero_operand(g, d) else r
    if r.dtype.kind != "f":
        return r
    if g.__class__ is F64_SCALAR or d.__class__ is F64_SCALAR:  # a scalar factor: its one value
        s = g if g.__class__ is F64_SCALAR else d
        if s != 0 and math.isfinite(s):
            return r
    elif r.size > _SMALL and (g.size < r.size or d.size < r.size or 0 in g.strides or 0 in d.strides):
        # (a look at a small r costs less than finding what the operands repeat; two operands
        # of r's size that repeat nothing are looked at through r at once)
        gv, dv = _repeated(g), _repeated(d)
        small = gv if gv.size < dv.size else dv
        if small.size * 4 <= r.size and _finite_nonzero(small):
            return r
    if not all_finite(r):
        r = np.where(zero_operand(g, d) & np.isnan(r), 0.0, r)
    return r


_ZERO = np.float64(0.0)
_SMALL = 1024  # elements of a product that _zero_nans looks at before its operands


def _repeated(x):
    """The values a broadcast view repeats (its axes of stride 0 cut to length 1), or x.
    The cotangent of a sum is its seed broadcast to the summed shape: one value to look
    at, not a million."""
    strides = x.strides
    if 0 in strides and x.size:
        return x[tuple([slice(0, 1) if s == 0 else slice(None) for s in strides])]
    return x


def _finite_nonzero(x) -> bool:
    if type(x) is F64_SCALAR:  # x.all() on a NumPy scalar costs 30 times this
        return x != 0 and math.isfinite(x)
    if x.dtype.kind != "f":
        return False
    if x.size == 1:  # (a broadcast scalar, the cotangent of a sum: a third of the looks below)
        v = x.item()
        return v != 0 and math.isfinite(v)
    return all_finite(x) and bool(x.all())


add = _binary("add", np.add, (lambda g, ans, x, y, **_: g, lambda g, ans, x, y, **_: g), operator.add,
              reads=())
mul = _binary("mul", np.multiply, (lambda g, ans, x, y, **_: _times(g, y),
                                   lambda g, ans, x, y, **_: _times(g, x)), operator.mul, reads=(0, 1))
div = _binary("div", np.divide, (lambda g, ans, x, y, **_: safe_div(g, y),
                                 lambda g, ans, x, y, **_: -safe_mul(g, ans / y)), operator.truediv,
              reads=(OUT, 1))
def _multiple_gap(ans, a, b, **_):
    # how far a is from a multiple of b, where a // b and a % b jump
    return a - b * np.round(a / b)


# a // b: piecewise constant (zero derivative), but connected, as floor is
floor_divide = _binary("floor_divide", np.floor_divide, (_zero_rule, _zero_rule), operator.floordiv,
                       analytic=False, kink=_multiple_gap)
# a % b, NumPy's mod (the sign of the divisor): a - b (a // b), so d/da = 1, d/db = -(a // b)
mod = _binary("mod", np.mod, (lambda g, ans, a, b, **_: g,
                              lambda g, ans, a, b, **_: -safe_mul(g, floor_divide(a, b))), operator.mod,
              analytic=False, kink=_multiple_gap)
# (internal) g * d, and exactly 0 where g or d is 0 and the product is nan
safe_mul = _binary("safe_mul", safe_multiply, (lambda gg, ans, g, d, **_: safe_mul(gg, d),
                                           lambda gg, ans, g, d, **_: safe_mul(gg, g)))
# (internal) g / d, and exactly 0 where g is 0 and the quotient is nan.
# d/dd (g / d) = -(g / d) / d = -ans / d, and exactly 0 where g is 0 (ans is then 0, and 0/0
# must not make nan of it: the Hessian of where(x > 0, y/x, 0) at x = 0 is 0)
safe_div = _binary("safe_div", safe_divide, (lambda gg, ans, g, d, **_: safe_div(gg, d),
                                           lambda gg, ans, g, d, **_: -safe_mul(gg, safe_div(ans, d))))


def _pow_dx(x, y):
    # y * x^(y-1), and 0 where y == 0 (0 * 0^-1 would be nan).  At y == 0 and x != 0 that 0 is a
    # product of y, +0.0, so that its own derivative in y, x^(y-1), stays: the mixed second
    # derivative there is 1/x, as d/dx of d/dy x^y is (a 0 pinned by a where made it 0).  At
    # x == y == 0, where x^y has no derivative, it stays pinned, both mixed derivatives 0.
    p = x ** (y - 1)
    at_zero = where(eq(x, 0.0), 0.0, safe_mul(y, p) + 0.0)  # (+ 0.0: a -0.0 product, y = -0.0 or p < 0,
    #                                                          is +0.0, as the pinned 0 was)
    return where(eq(y, 0.0), at_zero, y * p)


def _pow_dy(ans, x):
    # ans * log(x), with log(0) replaced by 0: d/dy 0^y = 0 for y > 0 (as JAX)
    return ans * log(where(eq(x, 0.0), 1.0, x))


pow_ = _binary("pow", np.power, (lambda g, ans, x, y, **_: safe_mul(g, _pow_dx(x, y)),
                                 lambda g, ans, x, y, **_: safe_mul(g, _pow_dy(ans, x))))


def _pow_const_rule(g, ans, x, p):
    # d/dx x^p = p x^(p-1), with p = 0 pinned to 0 and p = 1, 2 written without a power; 2 x as
    # x + x, the same value bit for bit (both exact, overflowing alike) without a constant 2 that
    # a traced pass would record and broadcast
    if p == 0:
        return zeros_like(g)
    if p == 1:
        return g
    return _times(g, x + x if p == 2 else p * pow_const(x, p=p - 1), fresh=True)


def _pow_const(x, p):
    # x^2 is np.square: NumPy's own ``x ** 2``, at about a third of np.power's cost; the same
    # values as np.power(x, 2.0) (compared bit for bit on 8e7 values, random bit patterns included)
    return np.square(x) if p == 2.0 else np.power(x, p)


# x^p for a constant exponent p (x^2 in a program)
pow_const = _def("pow_const", _pow_const, (_pow_const_rule,), (_pow_const_rule,),
                 lambda shapes, builder, p: {"p": float(p)}, reads=(0,))


def _extremum(name, fn, wins):
    # Ties share the gradient equally, as in JAX.
    def share(a, b):
        return wins(a, b) + 0.5 * eq(a, b)
    return _binary(name, fn, (lambda g, ans, x, y, **_: safe_mul(g, share(x, y)),
                              lambda g, ans, x, y, **_: safe_mul(g, share(y, x))),
                   analytic=False, kink=lambda ans, x, y, **_: x - y)


def _hypot_part(a, ans):
    return where(eq(ans, 0.0), 0.0, a / ans)


atan2 = _binary("atan2", np.arctan2, (lambda g, ans, y, x, **_: safe_mul(g, x / (x * x + y * y)),
                                      lambda g, ans, y, x, **_: safe_mul(g, -y / (x * x + y * y))),
                analytic=False, kink=lambda ans, y, x, **_: np.hypot(x, y))
hypot = _binary("hypot", np.hypot, (lambda g, ans, x, y, **_: safe_mul(g, _hypot_part(x, ans)),
                                    lambda g, ans, x, y, **_: safe_mul(g, _hypot_part(y, ans))),
                analytic=False, kink=lambda ans, x, y, **_: ans)


def _mask(fn):
    # On complex input (complex-step differences) compare real parts.
    return lambda x, y: fn(np.real(x), np.real(y)).astype(np.float64)


def _comparison(name, fn, scalar_op):
    # No derivative, but a jump where x = y: check flags points near it.
    prim = _def(name, _elementwise(_mask(fn)), None, None, _broadcast_params,
                differentiable=False, analytic=True, kink=lambda ans, x, y, **_: x - y, elementwise=True)
    prim.plain = _compare_plain(_mask(fn), scalar_op)
    return prim


_TRUE, _FALSE = F64_SCALAR(1.0), F64_SCALAR(0.0)


def _compare_plain(mask, scalar_op):
    """A comparison's plain function (operands of equal shape): on two NumPy scalars (a while
    loop's condition) Python's operator, the same IEEE comparison as the ufunc's, nan included,
    at a tenth of the ufunc's cost on a scalar."""
    def plain(x, y):
        if x.__class__ is F64_SCALAR and y.__class__ is F64_SCALAR:
            return _TRUE if scalar_op(x, y) else _FALSE
        return mask(x, y)
    return plain


lt = _comparison("lt", np.less, operator.lt)
le = _comparison("le", np.less_equal, operator.le)
gt = _comparison("gt", np.greater, operator.gt)
ge = _comparison("ge", np.greater_equal, operator.ge)
eq = _comparison("eq", np.equal, operator.eq)
ne = _comparison("ne", np.not_equal, operator.ne)
# (internal) x < y for a switch that is no kink of the value, so check flags none: between
# two formulas of one smooth function (sinc's slope: a series near 0, the closed form
# beyond), or at a boundary no finite value reaches (nan_to_num's test for finite values)
switch_lt = _def("switch_lt", _elementwise(_mask(np.less)), None, None, _broadcast_params,
                 differentiable=False, analytic=True)

def _logical(name, fn):
    # Masks of masks: nonzero is true, as in where and in conditions; no derivative and, on
    # masks, no jump to flag
    return _def(name, _elementwise(_mask(fn)), None, None, _broadcast_params, differentiable=False,
                elementwise=True)


logical_and = _logical("logical_and", np.logical_and)
logical_or = _logical("logical_or", np.logical_or)
logical_not = _def("logical_not", lambda x: (np.real(x) == 0).astype(np.float64), differentiable=False)

maximum = _extremum("maximum", np.maximum, gt)
minimum = _extremum("minimum", np.minimum, lt)
# fmax and fmin pass over a nan: the other operand wins (and takes the whole derivative)
fmax = _extremum("fmax", np.fmax, lambda x, y: logical_or(gt(x, y), ne(y, y)))
fmin = _extremum("fmin", np.fmin, lambda x, y: logical_or(lt(x, y), ne(y, y)))


def _share_of(x, y, scale=1.0):
    """d/dx log_b(b^x + b^y) = b^x / (b^x + b^y) = sigmoid((x - y) ln b): at most 1, stable at
    +-1000, and exactly 0.5 for equal terms (b^(x - ans) lost the last bits of ans, whose ulp
    at 1000 is 1e-13: 0.5000000000000275)."""
    d = x - y
    return sigmoid(d if scale == 1.0 else d * scale)


logaddexp = _binary("logaddexp", np.logaddexp,
                    (lambda g, ans, x, y, **_: safe_mul(g, _share_of(x, y)),
                     lambda g, ans, x, y, **_: safe_mul(g, _share_of(y, x))), analytic=False)
logaddexp2 = _binary("logaddexp2", np.logaddexp2,
                     (lambda g, ans, x, y, **_: safe_mul(g, _share_of(x, y, _LN2)),
                      lambda g, ans, x, y, **_: safe_mul(g, _share_of(y, x, _LN2))), analytic=False)
# |x| with the sign of y: d/dx is sign(x) times y's sign (0 at x = 0, as abs), d/dy is 0
copysign = _binary("copysign", np.copysign,
                   (lambda g, ans, x, y, **_: safe_mul(g, sign(x) * copysign(1.0, y)), _zero_rule),
                   analytic=False, kink=lambda ans, x, y, **_: np.minimum(np.abs(x), np.abs(y)))

# where(cond, a, b): a where cond is nonzero, else b
where = _binary("where", lambda c, a, b: np.where(c != 0, a, b),
                (None,
                 lambda g, ans, c, a, b, **_: where(c, g, 0.0),
                 lambda g, ans, c, a, b, **_: where(c, 0.0, g)))


def sub(a, b):
    """a - b, desugared to add(a, neg(b)) (exact: negation does not round)."""
    return add(a, -b)


# ==========================================================================
# Reductions
# ==========================================================================

def _reduce_params(shapes, builder, axis=None, keepdims=False):
    xshape = tuple(shapes[0])
    return {"axes": normalize_axes(axis, len(xshape)), "keepdims": bool(keepdims), "xshape": xshape}


def _unreduce(g, xshape, axes, keepdims):
    """Broadcast a reduced value back to the reduced operand's shape."""
    nd = len(xshape)
    if g.__class__ is F64_SCALAR and len(axes) == nd and not keepdims:
        # The cotangent of a sum over every axis (the usual loss) in an eager pass: the view the
        # two eager forms below make of it (g as an array of ones' shape, every stride 0, read
        # only), made directly: their checks hold for any such g and shape.
        # (its one element from np.array(g, ndmin=nd): g.reshape on a NumPy scalar costs 1 us more)
        view = np.ndarray(xshape, F64, np.array(g, ndmin=nd), 0, (0,) * nd)
        view.flags.writeable = False
        return view
    if g.__class__ is _ARRAY or g.__class__ is F64_SCALAR:
        # An eager pass: reshape's and broadcast_to's eager forms, as their calls below would
        # run them, without two dispatches (W8's sum: 2 of its rule's 5 us); None from either:
        # the calls below.
        r = g if keepdims else _reshape_eager(g, _reduced_shape(xshape, axes, True))
        view = None if r is None else _broadcast_to_eager(r, xshape)
        if view is not None:
            return view
    if not keepdims and len(axes) < nd:  # (reduced over every axis: g has none, and
        g = reshape(g, shape=_reduced_shape(xshape, axes, True))  # broadcasts as it is)
    return broadcast_to(g, shape=xshape)


def _reduction(name, fn, vjp, jvp, **facts):
    return _def(name, lambda x, axes, keepdims, xshape: fn(x, axis=axes, keepdims=keepdims),
                (vjp,), (jvp,), _reduce_params, **facts)


def _sum_vjp(g, ans, x, axes, keepdims, xshape):
    return _unreduce(g, xshape, axes, keepdims)


def _sum_jvp(t, ans, x, axes, keepdims, xshape):
    return reduce_sum(t, axis=axes, keepdims=keepdims)


reduce_sum = _reduction("sum", np.add.reduce, _sum_vjp, _sum_jvp, reads=())  # (np.sum calls it, after 1 us of wrapper)


def _extreme_reduction(name, fn):
    # The gradient is shared equally between tied extremes, as in JAX.
    def share(ans, x, axes, keepdims, xshape):
        hit = eq(x, _unreduce(ans, xshape, axes, keepdims))
        return hit / reduce_sum(hit, axis=axes, keepdims=True)

    def vjp(g, ans, x, axes, keepdims, xshape):
        return safe_mul(_unreduce(g, xshape, axes, keepdims), share(ans, x, axes, keepdims, xshape))

    def jvp(t, ans, x, axes, keepdims, xshape):
        return reduce_sum(safe_mul(t, share(ans, x, axes, keepdims, xshape)), axis=axes,
                          keepdims=keepdims)

    def kink(ans, x, axes, keepdims, xshape):
        # The gap between the extreme and the runner-up: 0 at a tie.
        k = len(axes)
        moved = np.moveaxis(x, axes, tuple(range(-k, 0)))
        kept = x.ndim - k  # (the reduced axes' length spelt out: -1 is ambiguous on an empty array)
        flat = moved.reshape(moved.shape[:kept] + (math.prod(moved.shape[kept:]),))
        if flat.shape[-1] < 2:
            return np.full(flat.shape[:-1], np.inf)
        top = np.sort(flat, axis=-1)
        return (top[..., -1] - top[..., -2]) if name == "max" else (top[..., 1] - top[..., 0])

    return _reduction(name, fn, vjp, jvp, analytic=False, kink=kink)


reduce_max = _extreme_reduction("max", np.max)
reduce_min = _extreme_reduction("min", np.min)


def _prod_others(x, axes, xshape):
    """For each element, the product of all the others along axes (exact with zeros)."""
    if x.size == 0:  # nothing to multiply (and no length to lay the products along)
        return np.zeros_like(x)
    k = len(axes)
    moved = np.moveaxis(x, axes, tuple(range(-k, 0)))
    flat = moved.reshape(moved.shape[:moved.ndim - k] + (-1,))
    ones = np.ones(flat.shape[:-1] + (1,), dtype=flat.dtype)
    left = np.concatenate([ones, np.cumprod(flat[..., :-1], axis=-1)], axis=-1)
    right = np.concatenate([np.cumprod(flat[..., :0:-1], axis=-1)[..., ::-1], ones], axis=-1)
    return np.moveaxis((left * right).reshape(moved.shape), tuple(range(-k, 0)), axes)


def _move_flat(a, axes):
    k = len(axes)
    moved = np.moveaxis(a, axes, tuple(range(-k, 0)))
    return moved, moved.reshape(moved.shape[:moved.ndim - k] + (-1,))


def _prod_others_jvp(x, t, axes, xshape):
    """(J t)_j = sum_{i != j} t_i prod_{k != i, j} x_k, exact with zeros: forward mode through
    the exclusive cumulative products, one step per element along the reduced axes."""
    x, t = np.broadcast_arrays(x, t)
    if x.size == 0:
        return np.zeros(x.shape)
    moved, X = _move_flat(x, axes)
    _, T = _move_flat(t, axes)
    n = X.shape[-1]
    L, dL = np.ones_like(X), np.zeros_like(X)
    R, dR = np.ones_like(X), np.zeros_like(X)
    for j in range(1, n):
        L[..., j] = L[..., j - 1] * X[..., j - 1]
        dL[..., j] = dL[..., j - 1] * X[..., j - 1] + L[..., j - 1] * T[..., j - 1]
        r = n - 1 - j
        R[..., r] = R[..., r + 1] * X[..., r + 1]
        dR[..., r] = dR[..., r + 1] * X[..., r + 1] + R[..., r + 1] * T[..., r + 1]
    k = len(axes)
    return np.moveaxis((dL * R + L * dR).reshape(moved.shape), tuple(range(-k, 0)), axes)


def _prod_others_rule(t, ans, x, axes, xshape):
    # The Jacobian of prod_others is symmetric, so one rule serves both modes.
    return prod_others_jvp(x, t, axes=axes, xshape=xshape)


def _pojvp_x_jvp(u, ans, x, t, axes, xshape):
    # d/dx of F = P (S - t/x), P = prod_others(x), S = sum(t/x): exact away from zeros
    s = reduce_sum(t / x, axis=axes, keepdims=True)
    tu = t * u / (x * x)
    return (prod_others_jvp(x, u, axes=axes, xshape=xshape) * (s - t / x)
            + prod_others(x, axes=axes, xshape=xshape) * (tu - reduce_sum(tu, axis=axes, keepdims=True)))


def _pojvp_x_vjp(g, ans, x, t, axes, xshape):
    s = reduce_sum(t / x, axis=axes, keepdims=True)
    p = prod_others(x, axes=axes, xshape=xshape)
    w = t / (x * x)
    return (prod_others_jvp(x, g * (s - t / x), axes=axes, xshape=xshape)
            + w * (g * p - reduce_sum(g * p, axis=axes, keepdims=True)))


# (internal) the Jacobian of prod_others times t (exact; its own derivative in x is exact
# away from zeros)
prod_others_jvp = _def("prod_others_jvp", _prod_others_jvp,
                       (_pojvp_x_vjp, lambda g, ans, x, t, axes, xshape: prod_others_jvp(x, g, axes=axes, xshape=xshape)),
                       (_pojvp_x_jvp, lambda u, ans, x, t, axes, xshape: prod_others_jvp(x, u, axes=axes, xshape=xshape)),
                       lambda shapes, builder, axes, xshape: {"axes": axes, "xshape": xshape})
# (internal) the product of the other elements along axes
prod_others = _def("prod_others", _prod_others, (_prod_others_rule,), (_prod_others_rule,),
                   lambda shapes, builder, axes, xshape: {"axes": axes, "xshape": xshape})


def _prod_vjp(g, ans, x, axes, keepdims, xshape):
    return safe_mul(_unreduce(g, xshape, axes, keepdims), prod_others(x, axes=axes, xshape=xshape))


def _prod_jvp(t, ans, x, axes, keepdims, xshape):
    return reduce_sum(safe_mul(t, prod_others(x, axes=axes, xshape=xshape)), axis=axes,
                      keepdims=keepdims)


reduce_prod = _reduction("prod", np.prod, _prod_vjp, _prod_jvp)


def _logsumexp(x, axis, keepdims):
    # (initial=-inf: a sum of no terms is 0 and its log -inf, as SciPy's and JAX's)
    m = np.max(x, axis=axis, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0.0)
    r = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return r if keepdims else np.squeeze(r, axis=axis)


def _lse_weights(ans, x, axes, keepdims, xshape):
    """softmax over the reduced axes, e / sum(e) with e = exp(x - max x): exact for equal
    terms (exp(x - ans) lost the last bits of ans, as logaddexp's share did).  The shift
    changes no value, so it carries no derivative (stop_gradient)."""
    if 0 in xshape:  # (no terms, no weights: and no maximum to shift by)
        return stop_gradient(x)
    e = exp(x - stop_gradient(reduce_max(x, axis=axes, keepdims=True)))
    return e / reduce_sum(e, axis=axes, keepdims=True)


logsumexp = _reduction(
    "logsumexp", _logsumexp,
    lambda g, ans, x, axes, keepdims, xshape: safe_mul(_unreduce(g, xshape, axes, keepdims),
                                                      _lse_weights(ans, x, axes, keepdims, xshape)),
    lambda t, ans, x, axes, keepdims, xshape: reduce_sum(
        safe_mul(t, _lse_weights(ans, x, axes, keepdims, xshape)), axis=axes, keepdims=keepdims))


# Norms in [2^-460, 2^460] summed squares that neither underflow nor overflow (to below a
# last bit); outside, the slices are scaled by a power of two first, as LAPACK's nrm2 scales.
_NORM_RANGE = (2.0 ** -460, 2.0 ** 460)


def _norm(x, axis, keepdims):
    r = np.sqrt(np.sum(x * x, axis=axis, keepdims=keepdims))
    lo, hi = _NORM_RANGE
    size = np.abs(r)
    if ((size >= lo) & (size <= hi)).all():
        return r
    r = np.where((size >= lo) & (size <= hi), r, _scaled_norm(x, axis, keepdims))
    return r[()] if r.ndim == 0 else r  # (a number as a NumPy scalar, as the tape keeps it)


def _scaled_norm(x, axis, keepdims):
    """sqrt(sum(x^2)) of x / 2^k times 2^k, with 2^k within a factor 2 of each slice's largest
    |x|: a power of two scales exactly, so only the squares' under- and overflow change."""
    big = np.max(np.abs(x), axis=axis, keepdims=True, initial=0.0)
    scale = np.ldexp(1.0, np.frexp(np.where(np.isfinite(big), big, 0.0))[1] - 1)
    y = x / scale
    r = np.sqrt(np.sum(y * y, axis=axis, keepdims=True)) * scale
    return r if keepdims else np.squeeze(r, axis=axis)


def _norm_direction(ans, x, axes, keepdims, xshape):
    n = _unreduce(ans, xshape, axes, keepdims)
    return where(eq(n, 0.0), 0.0, x / n)  # norm'(0) = 0


norm = _reduction(
    "norm", _norm,
    lambda g, ans, x, axes, keepdims, xshape: safe_mul(_unreduce(g, xshape, axes, keepdims),
                                                      _norm_direction(ans, x, axes, keepdims, xshape)),
    lambda t, ans, x, axes, keepdims, xshape: reduce_sum(
        safe_mul(t, _norm_direction(ans, x, axes, keepdims, xshape)), axis=axes, keepdims=keepdims),
    kink=lambda ans, x, axes, keepdims, xshape: ans)


# ==========================================================================
# Scans and order
# ==========================================================================

def _cumsum(x, axis, reverse=False):
    if reverse:
        return np.flip(np.cumsum(np.flip(x, axis), axis), axis)
    return np.cumsum(x, axis)


def _scan_params(shapes, builder, axis=-1, reverse=False):
    params = _axis_params(shapes, builder, axis)
    return {**params, "reverse": True} if reverse else params


def _recurrence(x, r, axis, reverse):
    """z_i = x_i z_(i-1) + r_i along axis, from z_(-1) = 0; reverse: z_i = x_(i+1) z_(i+1) + r_i
    from the end, the transpose.  By recursive doubling (log2(n) vectorised steps: z_i gathers
    the terms of the 2d places before it from the d before, the products of the x between
    them alike), with no division; a term with a zero r contributes 0 (never 0 * inf)."""
    x, r = np.broadcast_arrays(x, r)
    a, b = np.moveaxis(x, axis, -1), np.moveaxis(r, axis, -1)
    dtype = np.result_type(a, b)
    if reverse:  # the forward recurrence of the reversed sequence, x_(i+1) its factors
        a = np.concatenate([a[..., 1:], np.ones(a.shape[:-1] + (1,), dtype)], axis=-1)[..., ::-1]
        b = b[..., ::-1]
    a, b = a.astype(dtype, copy=True), b.astype(dtype, copy=True)
    d, n = 1, b.shape[-1]
    with np.errstate(invalid="ignore", over="ignore"):
        while d < n:
            earlier = b[..., :-d]
            b[..., d:] = b[..., d:] + np.where(earlier == 0, 0.0, a[..., d:] * earlier)
            a[..., d:] = a[..., d:] * a[..., :-d]
            d *= 2
    return np.moveaxis(b[..., ::-1] if reverse else b, -1, axis)


def _shifted(z, axis, later):
    """z moved one place along axis, a zero coming in: later, z_(i-1) at i; else z_(i+1)."""
    nd = len(z.shape)
    front = (slice(None),) * (axis + nd)
    keep = index(z, idx=front + ((slice(None, -1),) if later else (slice(1, None),)))
    zero = zeros_like(index(z, idx=front + (slice(0, 1),)))
    return concat(zero, keep, axis=axis) if later else concat(keep, zero, axis=axis)


def _recurrence_x_jvp(u, ans, x, r, axis, reverse):
    # forward: dz_i = u_i z_(i-1) + x_i dz_(i-1); reverse: dz_i = u_(i+1) z_(i+1) + x_(i+1) dz_(i+1)
    if reverse:
        return recurrence(x, _shifted(safe_mul(u, ans), axis, later=False), axis=axis, reverse=True)
    return recurrence(x, safe_mul(u, _shifted(ans, axis, later=True)), axis=axis, reverse=False)


def _recurrence_x_vjp(g, ans, x, r, axis, reverse):
    h = recurrence(x, g, axis=axis, reverse=not reverse)
    if reverse:
        return safe_mul(_shifted(h, axis, later=True), ans)
    return safe_mul(h, _shifted(ans, axis, later=True))


# (internal) the first-order linear recurrence of cumprod's derivatives: exact (no division)
# in every order, also where x holds zeros
recurrence = _def("recurrence", _recurrence,
                  (_recurrence_x_vjp,
                   lambda g, ans, x, r, axis, reverse: recurrence(x, g, axis=axis, reverse=not reverse)),
                  (_recurrence_x_jvp,
                   lambda u, ans, x, r, axis, reverse: recurrence(x, u, axis=axis, reverse=reverse)),
                  lambda shapes, builder, axis, reverse: {"axis": axis, "reverse": bool(reverse)})


def _exclusive_products(ans, axis):
    """E_i = x_0 ... x_(i-1) (1 at i = 0): cumprod's value one place later."""
    nd = len(ans.shape)
    one = zeros_like(index(ans, idx=(slice(None),) * (axis + nd) + (slice(0, 1),))) + 1.0
    return concat(one, index(ans, idx=(slice(None),) * (axis + nd) + (slice(None, -1),)), axis=axis)


def _cumprod_jvp(t, ans, x, axis):
    # dy_i = x_i dy_(i-1) + y_(i-1) t_i
    return recurrence(x, safe_mul(t, _exclusive_products(ans, axis)), axis=axis, reverse=False)


def _cumprod_vjp(g, ans, x, axis):
    # d/dx_k sum_i g_i y_i = E_k S_k, S_k = g_k + x_(k+1) S_(k+1) (the transposed recurrence)
    return safe_mul(recurrence(x, g, axis=axis, reverse=True), _exclusive_products(ans, axis))


# cumulative sums (reverse: from the end, the transpose) and products along an axis
cumsum = _def("cumsum", _cumsum,
              (lambda g, ans, x, axis, reverse=False: cumsum(g, axis=axis, reverse=not reverse),),
              (lambda t, ans, x, axis, reverse=False: cumsum(t, axis=axis, reverse=reverse),),
              _scan_params, reads=())
cumprod = _def("cumprod", lambda x, axis: np.cumprod(x, axis), (_cumprod_vjp,), (_cumprod_jvp,),
               lambda shapes, builder, axis=-1: _axis_params(shapes, builder, axis))


def _order(fn):
    # integer positions as float64 values (the tape's dtype); on complex input, of the real part
    return lambda x, axis: fn(np.real(x), axis=axis, **({"kind": "stable"} if fn is np.argsort else {})
                              ).astype(np.float64)


def _positions(name, fn):
    # integer values with no derivative; the decisions they make are guarded by the caller
    return _def(name, _order(fn), normalize=lambda shapes, builder, axis=-1: _axis_params(shapes, builder, axis),
                differentiable=False)


argsort = _positions("argsort", np.argsort)  # stable: ties keep their order, as sorted() does
argmax = _positions("argmax", np.argmax)
argmin = _positions("argmin", np.argmin)


# ==========================================================================
# Softmax family (numerically stable forms)
# ==========================================================================

def _axis_params(shapes, builder, axis=-1):
    nd = len(shapes[0])
    if nd == 0:
        raise ShapeError("needs an array of at least one dimension")
    return {"axis": single_axis(axis, nd)}


def single_axis(axis, nd: int) -> int:
    """One axis, as normalize_axes gives it (negative), where one integer is meant: a tuple,
    empty or not, or None is refused, not read as its first axis."""
    if axis is None or isinstance(axis, (tuple, list)):
        raise ShapeError(f"axis must be an integer, not {axis!r}")
    return normalize_axes(axis, nd)[0]


# (initial=-inf: over an axis of length 0 no maximum to shift by and nothing to compute, an
# empty result as JAX's; any other slice's maximum is its own, -inf and nan included)
def _softmax(x, axis):
    z = x - np.max(x, axis=axis, keepdims=True, initial=-np.inf)
    e = np.exp(z)
    return e / np.sum(e, axis=axis, keepdims=True)


def _log_softmax(x, axis):
    z = x - np.max(x, axis=axis, keepdims=True, initial=-np.inf)
    return z - np.log(np.sum(np.exp(z), axis=axis, keepdims=True))


def _softmax_rule(g, ans, x, axis):
    return ans * (g - reduce_sum(g * ans, axis=axis, keepdims=True))


def _log_softmax_vjp(g, ans, x, axis):
    return g - exp(ans) * reduce_sum(g, axis=axis, keepdims=True)


def _log_softmax_jvp(t, ans, x, axis):
    return t - reduce_sum(exp(ans) * t, axis=axis, keepdims=True)


softmax = _def("softmax", _softmax, (_softmax_rule,), (_softmax_rule,), _axis_params)
log_softmax = _def("log_softmax", _log_softmax, (_log_softmax_vjp,), (_log_softmax_jvp,),
                   _axis_params)


# ==========================================================================
# Shape primitives
# ==========================================================================

def _reshape_params(shapes, builder, shape):
    xshape = tuple(shapes[0])
    size = math.prod(xshape)
    shape = tuple(int(d) for d in shape)
    if shape.count(-1) > 1:
        raise ShapeError("reshape: only one dimension may be -1")
    if any(d < -1 for d in shape):
        raise ShapeError(f"reshape: invalid shape {shape}")
    if -1 in shape:
        rest = math.prod(d for d in shape if d != -1)
        if rest == 0 or size % rest:
            raise ShapeError(f"cannot reshape an array of shape {xshape} into {shape}")
        shape = tuple(size // rest if d == -1 else d for d in shape)
    if math.prod(shape) != size:
        raise ShapeError(f"cannot reshape an array of shape {xshape} ({size} elements) into "
                         f"{shape} ({math.prod(shape)} elements)")
    builder.check_size(shape)
    return {"shape": shape, "xshape": xshape}


def _sizes(shape: tuple) -> bool:
    """Whether shape holds only non-negative ints (a loop: all() of a generator costs more)."""
    for d in shape:
        if type(d) is not int or d < 0:
            return False
    return True


def _reshape_eager(x, shape):
    """reshape of an array to a shape of non-negative ints with as many elements (what
    _reshape_params would accept as it is), or None."""
    if type(shape) is tuple and _sizes(shape) and math.prod(shape) == x.size:
        return x.reshape(shape)
    return None


reshape = _def("reshape", lambda x, shape, xshape: x.reshape(_batch(x, len(xshape)) + shape),
               (lambda g, ans, x, shape, xshape: reshape(g, shape=xshape),),
               (lambda t, ans, x, shape, xshape: reshape(t, shape=shape),),
               _reshape_params, eager=_reshape_eager, reads=(), keeps_finite=True)


def _broadcast_to_params(shapes, builder, shape):
    shape = tuple(shape)
    try:
        if broadcast_shapes(shapes[0], shape) != shape:
            raise ValueError
    except ValueError:
        raise ShapeError(f"cannot broadcast shape {shapes[0]} to {shape}") from None
    builder.check_size(shape)
    return {"shape": shape, "xshape": tuple(shapes[0])}


def _broadcast_to(x, shape, xshape):
    if x.ndim == len(xshape):  # unbatched (a traced value): the view made directly, where it can be
        view = _broadcast_to_eager(x if x.__class__ is _ARRAY else np.asarray(x), shape)
        if view is not None:
            return view
    batch = _batch(x, len(xshape))
    return np.broadcast_to(_align(x, len(xshape), len(shape)), batch + shape)


def _broadcast_to_eager(x, shape):
    """np.broadcast_to(x, shape) for a C-contiguous array x (the cotangent of a sum, a bias):
    the same read-only view (stride 0 along the new leading axes and x's axes of length 1),
    made directly (np.broadcast_to builds an iterator to find the strides: 1-2 us more); None
    for any other operand, or a shape x does not broadcast to."""
    if type(shape) is not tuple or x.__class__ is not _ARRAY or not x.flags.c_contiguous or not x.size:
        return None
    lead = len(shape) - x.ndim
    if lead < 0 or not _sizes(shape):
        return None
    strides = [0] * lead
    for d, n, stride in zip(x.shape, shape[lead:], x.strides):
        if d == 1:
            strides.append(0)
        elif d == n:
            strides.append(stride)
        else:
            return None
    view = np.ndarray(shape, x.dtype, x, 0, tuple(strides))
    view.flags.writeable = False
    return view


def _sum_to_axes(xshape: tuple, shape: tuple) -> tuple | None:
    """The axes sum_to sums over (from the end): those that xshape has before shape's (drop),
    and those of length 1 in shape but not in xshape (keep); None when shape is longer."""
    nd, lead = len(xshape), len(xshape) - len(shape)
    if lead < 0:
        return None
    drop = tuple(i - nd for i in range(lead))
    keep = tuple(lead + j - nd for j, d in enumerate(shape) if d == 1 and xshape[lead + j] != 1)
    return drop, keep


def _sum_to_params(shapes, builder, shape):
    xshape, shape = tuple(shapes[0]), tuple(shape)
    axes = _sum_to_axes(xshape, shape)
    if axes is None:
        raise ShapeError(f"cannot sum shape {xshape} to {shape}")
    drop, keep = axes
    return {"drop": drop, "keep": keep, "shape": shape, "xshape": xshape}


def _sum_to(x, drop, keep, shape, xshape):
    # (np.add.reduce is what np.sum calls on an array, without its wrapper: 1 us less)
    if keep:
        x = np.add.reduce(x, axis=keep, keepdims=True)
    if drop:
        x = np.add.reduce(x, axis=drop)
    return x


def _summed_axes(xshape: tuple, shape: tuple) -> tuple | None:
    """_sum_to_axes where summing takes xshape to shape (shape no longer, each of its axes 1 or
    xshape's own); None where it does not (a value that must be broadcast up to shape)."""
    nd = len(xshape)
    lead = nd - len(shape)
    if lead < 0:
        return None
    keep = []
    for j, d in enumerate(shape):
        if d != xshape[lead + j]:
            if d != 1:
                return None
            keep.append(lead + j - nd)
    return tuple(range(-nd, lead - nd)), tuple(keep)


def _sum_to_eager(x, shape):
    """sum_to of an array to a tuple shape: its parameters as _sum_to_params makes them."""
    axes = _sum_to_axes(x.shape, shape) if type(shape) is tuple else None
    return None if axes is None else _sum_to(x, *axes, shape, x.shape)


# (internal, both) a value broadcast to a shape, and a broadcast value summed back to an
# operand's shape
broadcast_to = _def("broadcast_to", _broadcast_to,
                    (lambda g, ans, x, shape, xshape: sum_to(g, shape=xshape),),
                    (lambda t, ans, x, shape, xshape: broadcast_to(t, shape=shape),),
                    _broadcast_to_params, eager=_broadcast_to_eager, reads=(), keeps_finite=True)
sum_to = _def("sum_to", _sum_to,
              (lambda g, ans, x, drop, keep, shape, xshape: broadcast_to(g, shape=xshape),),
              (lambda t, ans, x, drop, keep, shape, xshape: sum_to(t, shape=shape),),
              _sum_to_params, eager=_sum_to_eager, reads=())


# ==========================================================================
# Indexing: NumPy's basic and advanced indexing, gathers and functional updates
# ==========================================================================
# An index, once normalised (normalize_index), addresses every axis of the operand in
# order: ints (non-negative), slices, None (a new axis) and read-only intp arrays (a mask
# becomes its np.nonzero arrays; `...` becomes slices).  The operand may carry leading batch
# axes: the index is applied as x[(..., *idx)].  One NumPy rule needs care there: advanced
# indices (arrays, and the ints among them) that are not adjacent put their block of axes
# first, in front of the batch axes too; _batch_first and _numpy_order move the batch axes
# back and forth around that block.

def _is_int(item) -> bool:
    return isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_))


def _index_array(item, axis: int, size: int):
    """An integer index array, checked against the axis and wrapped to non-negative values."""
    arr = np.asarray(item)
    if arr.dtype.kind == "f" and np.all(arr == np.round(arr)):
        arr = arr.astype(np.intp)
    if arr.dtype.kind not in "iu":
        raise ShapeError(f"index arrays must hold integers, not {arr.dtype} values (axis {axis})")
    if arr.ndim == 0:
        return _index_int(int(arr), axis, size)
    if arr.size:
        low, high = int(arr.min()), int(arr.max())
        if low < -size or high >= size:
            raise ShapeError(f"index {low if low < -size else high} is out of range for axis {axis} "
                             f"with size {size}", hint=_indices_of(size))
    arr = np.where(arr < 0, arr + size, arr).astype(np.intp)  # (a fresh array: safe to freeze)
    arr.setflags(write=False)
    return arr


def _index_int(item, axis: int, size: int) -> int:
    if not -size <= item < size:
        shown = item if abs(item) < 10**16 else f"{float(item):g}"  # (1e300 written as such, not in 301 digits)
        raise ShapeError(f"index {shown} is out of range for axis {axis} with size {size}", hint=_indices_of(size))
    return int(item) % size


def _indices_of(size: int) -> str:
    """The hint of an index out of range: the indices an axis of that size has."""
    if size == 0:
        return "the axis is empty: it has no index"
    return f"its indices are 0 to {size - 1} (or -{size} to -1 from the end)"


def _index_mask(item, axis: int, xshape: tuple) -> tuple:
    """A boolean mask over the axes from axis on: its np.nonzero integer arrays."""
    covered = xshape[axis:axis + item.ndim]
    if item.ndim == 0 or item.shape != covered:
        raise ShapeError(f"a mask of shape {item.shape} does not match the indexed axes {covered} "
                         f"(from axis {axis})", hint="a mask selects from an array of its own shape: compare "
                                                     "the array indexed itself, e.g. x[x > 0]")
    return tuple(_index_array(a, axis + k, xshape[axis + k]) for k, a in enumerate(np.nonzero(item)))


def _axes_taken(item) -> int:
    if item is None or item is Ellipsis:
        return 0
    return item.ndim if isinstance(item, np.ndarray) and item.dtype.kind == "b" else 1


def _basic_index(idx, xshape: tuple) -> tuple | None:
    """normalize_index of ints and slices alone (x[i], x[i, a:b]: the usual case), or None."""
    nd = len(xshape)
    if len(idx) > nd:
        return None
    out = []
    for axis, item in enumerate(idx):
        if type(item) is slice:
            out.append(item)
        elif type(item) is int:
            out.append(_index_int(item, axis, xshape[axis]))
        else:
            return None
    return tuple(out) + (slice(None),) * (nd - len(idx))


def _separates_advanced(idx: tuple, at: int) -> bool:
    """Whether idx[at] (a '...') stands between advanced indices (an index array or mask on one
    side, an array or an integer on the other: integers are advanced beside arrays) whose axes
    NumPy would therefore move to the front, past a slice or None before them.  Covering no
    axes, the '...' vanishes from the normalised index, and the separation with it."""
    def advanced(items, arrays_only):
        return any(isinstance(i, np.ndarray) or (not arrays_only and _is_int(i)) for i in items)
    before, after = idx[:at], idx[at + 1:]
    if not (advanced(before, True) and advanced(after, False) or advanced(before, False) and advanced(after, True)):
        return False
    # (the order of the axes differs only where a slice or None comes before the first of them)
    first = next(k for k, i in enumerate(idx) if isinstance(i, np.ndarray) or _is_int(i))
    return any(i is None or type(i) is slice for i in idx[:first])


def normalize_index(idx, xshape: tuple) -> tuple:
    """NumPy's index idx (ints, slices, None, ..., integer arrays, masks) for an operand of
    logical shape xshape, in the form the index primitives keep (see the banner above)."""
    basic = _basic_index(idx, xshape)
    if basic is not None:
        return basic
    nd = len(xshape)
    idx = tuple(np.asarray(i) if isinstance(i, (list, tuple)) else i for i in idx)
    taken = sum(_axes_taken(i) for i in idx)
    if taken > nd:
        raise ShapeError(f"too many indices ({taken}) for an array of dimension {nd}")
    dots = [k for k, i in enumerate(idx) if i is Ellipsis]
    if len(dots) > 1:
        raise ShapeError("an index can have only one '...'")
    at = dots[0] if dots else len(idx)
    if dots and taken == nd and _separates_advanced(idx, at):
        raise ShapeError("this '...' covers no axes but stands between index arrays (or an index array and "
                         "an integer): NumPy would move their axes to the front; gradcalc does not",
                         hint="write the index without '...' (it covers no axes here)")
    idx = idx[:at] + (slice(None),) * (nd - taken) + idx[at + 1:]
    out, axis = [], 0
    for item in idx:
        if item is None or type(item) is slice:
            out.append(item)  # NumPy clips a slice's bounds, whatever the step's sign
        elif isinstance(item, np.ndarray) and item.dtype.kind == "b":
            masks = _index_mask(item, axis, xshape)
            out += masks
            axis += len(masks)
            continue
        elif _is_int(item):
            out.append(_index_int(item, axis, xshape[axis]))
        elif isinstance(item, np.ndarray):
            out.append(_index_array(item, axis, xshape[axis]))
        else:
            raise ShapeError(f"an index must be an integer, a slice, None, '...', an integer array "
                             f"or a mask, not {item!r}")
        axis += item is not None
    return tuple(out)


def _advanced(idx) -> tuple:
    """(positions in idx, broadcast shape) of the advanced indices; ints count only beside
    an array, as in NumPy.  ((), None) for a basic index."""
    if not any(isinstance(i, np.ndarray) for i in idx):
        return (), None
    pos = tuple(k for k, i in enumerate(idx) if isinstance(i, np.ndarray) or _is_int(i))
    try:
        block = broadcast_shapes(*[np.shape(idx[k]) for k in pos])
    except ValueError:
        shown = " and ".join(str(np.shape(idx[k])) for k in pos if isinstance(idx[k], np.ndarray))
        raise ShapeError(f"index arrays of shapes {shown} do not broadcast") from None
    return pos, block


def _front(idx) -> int:
    """The rank of the block of axes NumPy puts first (advanced indices not adjacent), or 0."""
    pos, block = _advanced(idx)
    return len(block) if pos and pos[-1] - pos[0] != len(pos) - 1 else 0


def _indexed_shape(idx, xshape: tuple) -> tuple:
    """The logical shape of x[idx], for a normalised idx (NumPy's rules, without an array)."""
    pos, block = _advanced(idx)
    shape, at, axis = [], None, 0
    for k, item in enumerate(idx):
        if item is None:
            shape.append(1)
            continue
        if type(item) is slice:
            shape.append(len(range(*item.indices(xshape[axis]))))
        elif pos and at is None:
            at = len(shape)  # where an adjacent block goes: at its first index
        axis += 1
    if not pos:
        return tuple(shape)
    at = 0 if _front(idx) else at
    return tuple(shape[:at]) + tuple(block) + tuple(shape[at:])


def _batch_first(r, idx, b: int):
    """x[(..., *idx)] with b batch axes, its batch axes moved back in front of NumPy's block."""
    k = _front(idx) if b else 0
    return np.moveaxis(r, range(k, k + b), range(b)) if k else r


def _numpy_order(v, idx, b: int):
    """A batched value (batch axes first) in the order NumPy's x[(..., *idx)] has."""
    k = _front(idx) if b else 0
    return np.moveaxis(v, range(b), range(k, k + b)) if k else v


def _has_arrays(idx) -> bool:
    return any(isinstance(i, np.ndarray) for i in idx)


_NUMPY_MAX_DIMS = 64


def _refuse_many_new_axes(idx: tuple, limit: int) -> None:
    """Each None of an index adds an axis to the selection: past MAX_NDIM of them no value can
    hold a gather's result, and NumPy takes no selection past 64 (failing with a message about
    scalar variables)."""
    if len(idx) <= limit:  # (the usual index: too short to hold that many)
        return
    added = sum(i is None for i in idx)  # (not idx.count(None): an index array compares elementwise)
    if added > limit:
        raise ShapeError(f"an index with {added} None would select a value with at least {added} dimensions; "
                         f"at most {limit} are supported")


def _index_params(shapes, builder, idx):
    xshape = tuple(shapes[0])
    idx = tuple(idx)
    _refuse_many_new_axes(idx, MAX_NDIM)
    basic = _basic_index(idx, xshape)
    if basic is not None:
        return {"idx": basic, "xshape": xshape}
    idx = normalize_index(idx, xshape)
    builder.check_size(_indexed_shape(idx, xshape))  # (index arrays may broadcast to a large block)
    return {"idx": idx, "xshape": xshape}


def _gather(x, idx, xshape):
    r = x[(Ellipsis,) + idx]
    b = x.ndim - len(xshape)
    return _batch_first(r, idx, b) if b and _has_arrays(idx) else r


def _index_put(g, idx, shape, nd):
    """Zeros of shape with g added at idx: repeated indices accumulate (np.add.at)."""
    b = g.ndim - nd
    out = np.zeros(g.shape[:b] + shape, dtype=g.dtype)
    if _has_arrays(idx):
        np.add.at(out, (Ellipsis,) + idx, _numpy_order(g, idx, b))
    else:
        out[(Ellipsis,) + idx] = g
    return out


def _index_put_params(shapes, builder, idx, shape, nd=None):
    return {"idx": tuple(idx), "shape": tuple(shape), "nd": len(shapes[0])}


index = _def("index", _gather,
             (lambda g, ans, x, idx, xshape: index_put(g, idx=idx, shape=xshape),),
             (lambda t, ans, x, idx, xshape: index(t, idx=idx),),
             _index_params, reads=(), keeps_finite=True)
# (internal) zeros of shape with x added at idx (nd: x's logical rank)
index_put = _def("index_put", _index_put,
                 (lambda g, ans, x, idx, shape, nd: index(g, idx=idx),),
                 (lambda t, ans, x, idx, shape, nd: index_put(t, idx=idx, shape=shape),),
                 _index_put_params, reads=())


def put_value(v, idx):
    """What index_put places at idx: v itself where idx holds integers and slices alone, 0.0 + v
    where it holds integer arrays (numpy.add.at into zeros: a -0.0 becomes +0.0, as JAX's
    scatter-add of a gather's cotangent makes it)."""
    return np.add(0.0, v) if _has_arrays(idx) else v


def _add_at(acc, v, idx, shape, nd):
    """acc + index_put(v, idx, shape), bit for bit, without v's array of zeros: idx selects no
    element twice (tape.distinct_index), so that sum adds +0.0 off the selection (a -0.0 there
    becomes +0.0; anything else, a nan's bits included, stays) and acc's element plus what
    index_put places on it (put_value; where nans meet there, the sum itself: see below).  Batch
    axes lead, in either operand (nd: v's logical rank)."""
    v = put_value(v, idx)
    ba, bv = acc.ndim - len(shape), v.ndim - nd
    batch = broadcast_shapes(acc.shape[:ba], v.shape[:bv]) if ba or bv else ()
    full = acc if acc.shape == batch + shape else np.broadcast_to(acc, batch + shape)
    site = (Ellipsis,) + idx
    region = full[site]
    if full.dtype == object:  # (sympy's expressions: no signed zeros to keep)
        out = full.copy()
    elif has_nan(region) and has_nan(v):
        # (of two nans, a sum keeps one by where NumPy's vector loop meets them: its body keeps
        # the first operand's sign bit, its tail the second's; so the sum itself)
        return full + _index_put(v, idx, shape, nd)
    else:
        out = np.add(full, 0.0, dtype=np.result_type(acc, v))
    out[site] = region + v
    return out


def _add_at_params(shapes, builder, idx, shape, nd=None):
    return {"idx": tuple(idx), "shape": tuple(shape), "nd": len(shapes[1])}


# (internal) acc with v added at idx, as acc + index_put(v): the traced backward pass adds the
# cotangent of a read x[i] into x's cotangent so far with it (one equation, not an array of
# zeros and a sum), so that a batched pass over it can add in place (batched.JVP_FOLDS): a
# Hessian of a loop that reads v[i] a step costs O(n) a step, not O(n^2) (see transforms._vjp_step)
add_at = _def("add_at", _add_at,
              (lambda g, ans, acc, v, idx, shape, nd: g, lambda g, ans, acc, v, idx, shape, nd: index(g, idx=idx)),
              (lambda t, ans, acc, v, idx, shape, nd: t,
               lambda t, ans, acc, v, idx, shape, nd: index_put(t, idx=idx, shape=shape)),
              _add_at_params, reads=())


def selection_shape(idx, xshape: tuple) -> tuple:
    """The shape of x[idx] for an operand of logical shape xshape (NumPy's index idx)."""
    return _indexed_shape(normalize_index(idx, xshape), xshape)


def _scatter_params(verb: str):
    def params(shapes, builder, idx):
        _refuse_many_new_axes(tuple(idx), _NUMPY_MAX_DIMS)
        xshape, vshape = tuple(shapes[0]), tuple(shapes[1])
        idx = normalize_index(idx, xshape)
        ishape = _indexed_shape(idx, xshape)
        try:
            fits = broadcast_shapes(vshape, ishape) == ishape
        except ValueError:
            fits = False
        if not fits:
            raise ShapeError(f"cannot {verb} a value of shape {vshape} to a selection of shape {ishape}")
        return {"idx": idx, "xshape": xshape, "nd": len(vshape)}
    return params


def _scatter(accumulate: bool):
    """x with v written (or, accumulating, added) at idx; nd: v's logical rank."""
    def impl(x, v, idx, xshape, nd):
        batch, v = lined_up(x, v, idx, xshape, nd)
        out = np.empty(batch + xshape, dtype=np.result_type(x, v))
        out[...] = x
        return _scatter_into(out, v, idx, accumulate)
    return impl


def lined_up(x, v, idx, xshape, nd) -> tuple:
    """An index update's batch axes (x's and v's, broadcast), and v lined up with
    out[(..., *idx)] as NumPy orders it: what _scatter_into writes (nd: v's logical rank)."""
    bx, bv = x.ndim - len(xshape), v.ndim - nd
    batch = broadcast_shapes(x.shape[:bx], v.shape[:bv]) if bx or bv else ()
    if bv or (bx and _front(idx)):
        ishape = _indexed_shape(idx, xshape)
        v = _numpy_order(np.broadcast_to(_align(v, nd, len(ishape)), batch + ishape), idx, len(batch))
    return batch, v


def _scatter_into(out, v, idx, accumulate: bool):
    """out with v written (or added) at idx, in place: what impl does to its copy of x."""
    site = (Ellipsis,) + idx
    if not accumulate:
        out[site] = v
    elif _has_arrays(idx):
        np.add.at(out, site, v)
    else:
        out[site] += v  # (no index repeats: the same sum, without add.at's cost)
    return out


def _written_into(accumulate: bool):
    """write_into of an index update: x, an unbatched float64 array nothing else will read (see
    Builder.overwrite), with v written (or added) at idx: impl's writes without its copy."""
    def write_into(x, v, idx, xshape, nd):
        return _scatter_into(x, v, idx, accumulate)
    return write_into


def _last_writes(idx, xshape):
    """1.0 where an element of x[idx] = v is the write that stays (NumPy keeps the last of a
    repeated index), 0.0 where a later one overwrites it; None if nothing is overwritten.
    Found by NumPy's own assignment, so the winners are the ones it picks."""
    pos, block = _advanced(idx)
    if not pos or _distinct_places(idx, pos, block, xshape):
        return None
    ishape = _indexed_shape(idx, xshape)
    order = np.arange(math.prod(ishape), dtype=np.intp).reshape(ishape)
    stamp = np.zeros(xshape, dtype=np.intp)
    stamp[idx] = order
    won = stamp[idx] == order
    return None if won.all() else won.astype(np.float64)


def _distinct_places(idx, pos, block, xshape) -> bool:
    """Whether the advanced indices at positions pos of idx name each place once (only they
    can repeat one: slices and ints never do)."""
    axes = [k - sum(i is None for i in idx[:k]) for k in pos]  # (None takes no axis of x)
    places = np.ravel_multi_index([np.broadcast_to(idx[k], block) for k in pos],
                                  [xshape[a] for a in axes])
    return np.unique(places).size == places.size


def _update_vjp_v(g, ans, x, v, idx, xshape, nd):
    # the cotangent at each written place goes to the write that stayed there
    picked = index(g, idx=idx)
    won = _last_writes(idx, xshape)
    return picked if won is None else safe_mul(picked, won)


# x with x[idx] = v (v broadcast to x[idx]'s shape): `x[i] = e` in a program
index_update = _def("index_update", _scatter(accumulate=False),
                    (lambda g, ans, x, v, idx, xshape, nd: index_update(g, 0.0, idx=idx), _update_vjp_v),
                    (lambda t, ans, x, v, idx, xshape, nd: index_update(t, 0.0, idx=idx),
                     lambda t, ans, x, v, idx, xshape, nd: index_update(np.zeros(xshape), t, idx=idx)),
                    _scatter_params("assign"), reads=())
index_update.write_into = _written_into(accumulate=False)
# x with v added at idx, repeated indices accumulating (numpy.add.at): `x[i] += e`
index_add = _def("index_add", _scatter(accumulate=True),
                 (lambda g, ans, x, v, idx, xshape, nd: g,
                  lambda g, ans, x, v, idx, xshape, nd: index(g, idx=idx)),
                 (lambda t, ans, x, v, idx, xshape, nd: t,
                  lambda t, ans, x, v, idx, xshape, nd: index_add(np.zeros(xshape), t, idx=idx)),
                 _scatter_params("add"), reads=())
index_add.write_into = _written_into(accumulate=True)


def _concat_params(shapes, builder, axis=0):
    first = shapes[0]
    nd = len(first)
    if nd == 0:
        raise ShapeError("cannot concatenate scalars; use stack")
    ax = single_axis(axis, nd)
    for s in shapes[1:]:
        if len(s) != nd or any(a != b for i, (a, b) in enumerate(zip(s, first)) if i != ax + nd):
            raise ShapeError(f"cannot concatenate shapes {tuple(first)} and {tuple(s)} along axis {ax + nd}")
    sizes = tuple(s[ax] for s in shapes)
    # (the result before it is made: a loop doubling s = concat(s, s) reached 1.6 GB unchecked)
    builder.check_size(tuple(first[:ax + nd]) + (sum(sizes),) + tuple(first[ax + nd + 1:]))
    return {"axis": ax, "sizes": sizes, "nd": nd}


def _concat(*xs, axis, sizes, nd):
    batches = [_batch(x, nd) for x in xs]
    if any(b != batches[0] for b in batches):
        common = broadcast_shapes(*batches)
        xs = [np.broadcast_to(x, common + x.shape[x.ndim - nd:]) for x in xs]
    return np.concatenate(xs, axis=axis)


def _concat_slot(i, axis, sizes, nd):
    start = _starts(sizes)[i]
    return (slice(None),) * (axis + nd) + (slice(start, start + sizes[i]),)


_STARTS = [(), ()]  # the last sizes seen (the tuple itself) and their starts


def _starts(sizes: tuple) -> tuple:
    """Where each operand of a concat starts along its axis.  A pass calls the rule once per
    operand with the one params dict: its sizes are summed once, not once an operand (an array
    literal of 16,000 elements is a concat of 16,000 operands)."""
    if _STARTS[0] is not sizes:
        _STARTS[:] = sizes, tuple(accumulate(sizes, initial=0))
    return _STARTS[1]


def _concat_vjp(i, g, ans, *xs, axis, sizes, nd):
    return index(g, idx=_concat_slot(i, axis, sizes, nd))


def _concat_jvp(ts, ans, *xs, axis, sizes, nd):
    """The tangents concatenated (concat is linear), zeros for an operand without one."""
    shape = list(next(t for t in ts if t is not None).shape)  # (an operand's: no value is read)
    parts = []
    for t, size in zip(ts, sizes):
        if t is None:
            shape[axis] = size
            t = np.zeros(tuple(shape))
        parts.append(t)
    return concat(*parts, axis=axis)


concat = _def("concat", _concat, _concat_vjp, _concat_jvp, _concat_params, variadic=True, reads=())


def _transpose_params(shapes, builder, axes=None):
    nd = len(shapes[0])
    if axes is None:
        perm = tuple(range(nd))[::-1]
    else:
        perm = tuple(axes) if isinstance(axes, (tuple, list)) else (axes,)  # one axis, as NumPy takes it
    if any(isinstance(p, bool) or not isinstance(p, (int, np.integer)) or not -nd <= p < nd
           for p in perm) or sorted(p % nd for p in perm) != list(range(nd)):
        raise ShapeError(f"axes {perm} are not a permutation of the {nd} axes")
    return {"axes": tuple(int(p) % nd for p in perm)}


def _transpose(x, axes):
    b = x.ndim - len(axes)
    return x.transpose(tuple(range(b)) + tuple(b + p for p in axes))


transpose = _def("transpose", _transpose,
                 (lambda g, ans, x, axes: transpose(g, axes=tuple(np.argsort(axes))),),
                 (lambda t, ans, x, axes: transpose(t, axes=axes),),
                 _transpose_params, reads=(), keeps_finite=True)


def mT(x):
    """Swap the last two axes."""
    nd = x.ndim
    if type(x) is np.ndarray and nd >= 2:
        # An eager rule's operand (matmul's VJPs): the view transpose would return, without the
        # dispatch and the check of its axes (5 us, as much as a 128×32 product).
        return x.swapaxes(-1, -2)
    return transpose(x, axes=tuple(range(nd - 2)) + (nd - 1, nd - 2))


# ==========================================================================
# Linear algebra
# ==========================================================================

def _matmul_params(shapes, builder, safe=False):
    a, b = shapes
    nda, ndb = len(a), len(b)  # (once: read five times below)
    if nda == 0 or ndb == 0:
        raise ShapeError("matmul needs arrays of at least one dimension; use * for scalars")
    ka = a[-1]
    kb = b[-2] if ndb >= 2 else b[-1]
    if ka != kb:
        raise ShapeError(f"matmul shapes {tuple(a)} and {tuple(b)} do not match: {ka} != {kb}")
    if nda > 2 or ndb > 2:
        try:
            stack = broadcast_shapes(a[:-2], b[:-2])
        except ValueError:
            raise ShapeError(f"matmul stacks {tuple(a)} and {tuple(b)} do not broadcast") from None
        builder.check_size(stack + a[-2:-1] + b[-1:])
    return {"nda": nda, "ndb": ndb, "safe": bool(safe)} if safe else {"nda": nda, "ndb": ndb}


def _matmul(a, b, nda, ndb, safe=False):
    r = _product(a, b, nda, ndb)
    if safe and r.dtype.kind == "f" and not _finite_terms(a, b, r):
        r = _safe_product(a, b, nda, ndb, r)
    return r


def _finite_terms(a, b, r) -> bool:
    """True when no term of the product r = a @ b can be nan or inf (or r shows it has none):
    finite factors, or a finite r, whichever is the smaller look."""
    if r.size <= a.size + b.size:
        return all_finite(r)
    return all_finite(a) and all_finite(b)


def _safe_product(a, b, nda, ndb, r):
    """a @ b in which a term with a zero factor is exactly 0 (never 0 * inf = nan), as
    safe_mul does elementwise: a derivative rule's matrix product, where one factor is a
    cotangent or tangent and a zero one contributes zero.  The finite terms are the matrix
    product of the factors with their non-finite entries zeroed; the rest are counted by
    matrix products of indicators (exact: counts are integers) and decide nan, inf or -inf."""
    def ind(mask):
        return mask.astype(np.float64)

    fa, fb = np.isfinite(a), np.isfinite(b)
    out = _product(np.where(fa, a, 0.0), np.where(fb, b, 0.0), nda, ndb)
    pa, na, pb, nb = ind(a > 0), ind(a < 0), ind(b > 0), ind(b < 0)
    ia, ib, ja, jb = ind(a == np.inf), ind(b == np.inf), ind(a == -np.inf), ind(b == -np.inf)
    nan = (_product(ind(np.isnan(a)), ind(b != 0), nda, ndb)
           + _product(ind(a != 0), ind(np.isnan(b)), nda, ndb))
    pos = (_product(ia, pb, nda, ndb) + _product(ja, nb, nda, ndb)
           + _product(pa, ib, nda, ndb) + _product(na, jb, nda, ndb))
    neg = (_product(ia, nb, nda, ndb) + _product(ja, pb, nda, ndb)
           + _product(pa, jb, nda, ndb) + _product(na, ib, nda, ndb))
    out = np.where(pos > 0, np.inf, out)
    out = np.where(neg > 0, -np.inf, out)
    out = np.where((nan > 0) | ((pos > 0) & (neg > 0)), np.nan, out)
    return out[()] if out.ndim == 0 else out  # (a number as a NumPy scalar, as the tape keeps it)


def _product(a, b, nda, ndb):
    if a.ndim == nda == 2 and b.ndim == ndb == 2:
        return np.matmul(a, b)  # two matrices (the commonest case: the end of this function)
    # Batched vector against a plain matrix: one matrix product for the whole batch.
    if ndb == 1 and nda == 2 and a.ndim == 2 and b.ndim > 1:
        return np.matmul(b, a.T)
    if nda == 1 and ndb == 2 and b.ndim == 2:
        return np.matmul(a, b)
    if nda == 1 and ndb == 1:
        return np.sum(a * b, axis=-1) if (a.ndim > 1 or b.ndim > 1) else np.dot(a, b)
    if nda == 1:  # (a batched vector is aligned with a stack of matrices: its batch axes lead)
        return np.matmul(_align(a[..., None, :], 2, ndb), b)[..., 0, :]
    if ndb == 1:
        return np.matmul(a, _align(b[..., None], 2, nda))[..., 0]
    if nda != ndb:
        n = max(nda, ndb)
        a, b = _align(a, nda, n), _align(b, ndb, n)
    return np.matmul(a, b)


def _matmul_vjps(safe_products: bool) -> tuple:
    """matmul's VJP rules, one per operand.  With ``safe_products`` their matrix products are
    safe: a zero cotangent contributes zero even where the other factor holds inf or nan, as
    through safe_mul.  Without, they are plain, with no look for 0 * inf terms: for a
    first-order eager backward pass that is re-run with the safe rules when any result is
    not finite (a plain product differs from a safe one only by nans, and a nan that a
    later zero operand removes would have been removed from the safe value too; W2's
    gradient: about 0.5 ms of looks saved, at the floor of its target)."""
    def product(a, b):
        """matmul(a, b, safe=safe_products); on two arrays (an eager pass), its eager form as that
        call would run it, without the call's dispatch (1 us of a 128×32 product's 5)."""
        if a.__class__ is _ARRAY and b.__class__ is _ARRAY:
            r = _matmul_eager(a, b, safe_products)
            if r is not None:
                return r
        return matmul(a, b, safe=safe_products)

    def vjp_a(g, ans, a, b, nda, ndb, safe=False):  # (safe: the forward product's own)
        if g.__class__ is _ARRAY and b.__class__ is _ARRAY and g.ndim == 2 == b.ndim == nda == ndb:
            # two matrices in an eager pass: product(g, mT(b)) with b's transposed view made by
            # hand (mT's swapaxes(-1, -2) on a matrix), without the two calls
            return _matmul(g, b.T, 2, 2, True) if safe_products else _np_matmul(g, b.T)
        if ndb == 1:
            return safe_mul(g, b) if nda == 1 else safe_mul(reshape(g, shape=g.shape + (1,)), b)
        if nda == 1:  # g has b's stack axes; the engine sums them away
            return _drop_last(matmul(b, reshape(g, shape=g.shape + (1,)), safe=safe_products))
        return product(g, mT(b))

    def vjp_b(g, ans, a, b, nda, ndb, safe=False):
        if g.__class__ is _ARRAY and a.__class__ is _ARRAY and g.ndim == 2 == a.ndim == nda == ndb:
            return _matmul(a.T, g, 2, 2, True) if safe_products else _np_matmul(a.T, g)  # (as in vjp_a)
        if nda == 1:
            if ndb == 1:
                return safe_mul(g, a)
            # the outer product of a with each row of the stack g: shape (..., k, n), b's own
            return safe_mul(reshape(a, shape=a.shape + (1,)), reshape(g, shape=g.shape[:-1] + (1,) + g.shape[-1:]))
        if ndb == 1 and nda > 2:  # as for a above: a column per stack entry, summed by the engine
            return _drop_last(matmul(mT(a), reshape(g, shape=g.shape + (1,)), safe=safe_products))
        return product(mT(a), g)

    return vjp_a, vjp_b


_np_matmul = np.matmul


def _drop_last(x):
    """x without its last axis, of length 1."""
    return reshape(x, shape=x.shape[:-1])


def _matmul_eager(a, b, safe=False):
    """matmul of two matrices whose inner lengths agree (an eager VJP's product: the
    parameters _matmul_params gives them, without its checks), or None."""
    if a.ndim == 2 and b.ndim == 2 and a.shape[1] == b.shape[0]:
        return _matmul(a, b, 2, 2, safe) if safe else np.matmul(a, b)  # (_matmul's plain product)
    return None


matmul = _def("matmul", _matmul, _matmul_vjps(safe_products=True),
              (lambda t, ans, a, b, **_: matmul(t, b, safe=True),
               lambda t, ans, a, b, **_: matmul(a, t, safe=True)),
              _matmul_params, plain_vjp=_matmul_vjps(safe_products=False), eager=_matmul_eager,
              reads=(0, 1))


def _square_params(shapes, builder):
    a = shapes[0]
    if len(a) < 2 or a[-1] != a[-2]:
        raise ShapeError(f"needs a square matrix, got shape {tuple(a)}")
    return {}


def _adjugate(a):
    """adj(A) = det(A) inv(A), also where A is singular: with A = U diag(s) V^T,
    adj(A) = det(U) det(V) V diag(c) U^T, c_i the product of the other singular values."""
    r = None
    try:  # LU where A is invertible: as exact as det(A) * inv(A) gets
        with np.errstate(all="ignore"):
            r = np.linalg.det(a)[..., None, None] * np.linalg.inv(a)
        if np.isfinite(r).all():
            return r
    except np.linalg.LinAlgError:
        r = None
    if not np.isfinite(a).all():  # (no SVD of inf: it would not return, see _finite_svd)
        return np.full(a.shape, np.nan) if r is None else r
    u, s, vh = np.linalg.svd(a)
    c = _prod_others(s, (-1,), None)
    sign = np.linalg.det(u) * np.linalg.det(vh)
    return sign[..., None, None] * np.matmul(np.swapaxes(vh, -1, -2) * c[..., None, :],
                                             np.swapaxes(u, -1, -2))


def _invertible(a):
    try:
        return inv(a)
    except ValueError_:
        raise ValueError_("second derivatives of 'det' need an invertible matrix") from None


def _per_matrix(s):
    """A number per matrix of a stack, shaped to scale each matrix: (..., 1, 1)."""
    return reshape(s, shape=s.shape + (1, 1))


def _adjugate_jvp(t, ans, a):
    # d(det A inv A) = det A (tr(inv A t) inv A - inv A t inv A): needs A invertible
    ia = _invertible(a)
    return _per_matrix(det(a)) * (_per_matrix(reduce_sum(mT(ia) * t, axis=(-2, -1))) * ia - ia @ t @ ia)


def _adjugate_vjp(g, ans, a):
    ia = _invertible(a)
    it = mT(ia)
    return _per_matrix(det(a)) * (_per_matrix(reduce_sum(g * ia, axis=(-2, -1))) * it - it @ g @ it)


# (internal) det(A) inv(A), defined for singular A too (det's derivative); its own derivative
# needs A invertible
adjugate = _def("adjugate", _adjugate, (_adjugate_vjp,), (_adjugate_jvp,), _square_params)
det = _def("det", np.linalg.det,
           (lambda g, ans, a: _per_matrix(g) * mT(adjugate(a)),),
           (lambda t, ans, a: reduce_sum(mT(adjugate(a)) * t, axis=(-2, -1)),),
           _square_params)
inv = _def("inv", np.linalg.inv,
           (lambda g, ans, a: -(mT(ans) @ g @ mT(ans)),),
           (lambda t, ans, a: -(ans @ t @ ans),),
           _square_params)


def _solve_params(shapes, builder):
    """NumPy's (2.x) rule: a 1-D b is one right-hand side for every matrix of the stack a;
    otherwise b is a (stack of) matrices of columns, its stack broadcast against a's."""
    a, b = shapes
    _square_params([a], builder)
    rows = b[-1] if len(b) == 1 else (b[-2] if len(b) >= 2 else None)
    if rows != a[-1]:
        raise ShapeError(f"solve: right-hand side of shape {tuple(b)} does not match matrix {tuple(a)}")
    if len(b) > 1:
        try:
            stack = broadcast_shapes(a[:-2], b[:-2])
        except ValueError:
            raise ShapeError(f"solve: stacks {tuple(a)} and {tuple(b)} do not broadcast") from None
        builder.check_size(stack + b[-2:])
    return {"nda": len(a), "ndb": len(b)}


def _solve(a, b, nda, ndb):
    if a.ndim == 2 and b.ndim > 2 - (ndb == 1):
        return _solve_shared(a, b, ndb)
    if ndb == 1:  # one column, lined up with a's stack (b's batch axes lead)
        return np.linalg.solve(a, _align(b[..., None], 2, nda))[..., 0]
    n = max(nda, ndb)
    return np.linalg.solve(_align(a, nda, n), _align(b, ndb, n))


def _solve_shared(a, b, ndb):
    """solve(a, b) for one matrix a and a stack of right-hand sides b (a batched pass's rows: a
    Hessian's tangents, check's perturbed points) as one system with every column side by side:
    NumPy's solve broadcasts a and factors it once per right-hand side, O(batch n^3) where one
    factorization and batch n^2 of substitution suffice (a Hessian of solve(A, x) at n = 800:
    18 s).  The columns' bits are those of a solve of several columns, which can differ in the
    last place from one column's."""
    n = a.shape[-1]
    if ndb == 1:  # (..., n): one column per row
        rows = b.reshape(math.prod(b.shape[:-1]), n)  # (sizes spelled out: n may be 0)
        return np.ascontiguousarray(np.linalg.solve(a, rows.T).T).reshape(b.shape)
    columns = np.moveaxis(b, -2, 0)  # (..., n, k) -> (n, ..., k)
    x = np.linalg.solve(a, columns.reshape(n, math.prod(columns.shape[1:]))).reshape(columns.shape)
    return np.ascontiguousarray(np.moveaxis(x, 0, -2))


def _solve_columns(a, v):
    """solve(a, v) for v one right-hand side per matrix of the stack a, shape (..., n)."""
    if len(v.shape) == 1:
        return solve(a, v)
    return reshape(solve(a, reshape(v, shape=v.shape + (1,))), shape=v.shape)


def _matvec(m, v):
    """m @ v for v one vector per matrix of the stack m, shape (..., n)."""
    if len(v.shape) == 1:
        return m @ v
    return reshape(m @ reshape(v, shape=v.shape + (1,)), shape=v.shape)


def _solve_vjp_a(g, ans, a, b, nda, ndb):
    if ndb == 1:  # -(inv(A)^T g) ans^T, one outer product per matrix
        gb = _solve_columns(mT(a), g)
        return -(reshape(gb, shape=gb.shape + (1,)) * reshape(ans, shape=ans.shape[:-1] + (1,) + ans.shape[-1:]))
    return -(solve(mT(a), g) @ mT(ans))


def _solve_vjp_b(g, ans, a, b, nda, ndb):
    return _solve_columns(mT(a), g) if ndb == 1 else solve(mT(a), g)


def _solve_jvp_a(t, ans, a, b, nda, ndb):
    return -(_solve_columns(a, _matvec(t, ans)) if ndb == 1 else solve(a, t @ ans))


solve = _def("solve", _solve, (_solve_vjp_a, _solve_vjp_b),
             (_solve_jvp_a, lambda t, ans, a, b, nda, ndb: solve(a, t)),
             _solve_params)


# -- slogdet, cholesky, eigh ----------------------------------------------------------
# NumPy's functions of several results are one primitive per result (the tape's equations
# have one output each); the built-ins of core/builtins.py put them together.

def _logabsdet_jvp(t, ans, a):
    return reduce_sum(mT(inv(a)) * t, axis=(-2, -1))


# sign and log|det A| of slogdet: log|det| has derivative inv(A)^T (no det, so no overflow)
slogdet_sign = _def("slogdet_sign", lambda a: np.linalg.slogdet(a)[0],
                    (lambda g, ans, a: zeros_like(a),), (lambda t, ans, a: zeros_like(ans),),
                    _square_params, analytic=False)
logabsdet = _def("logabsdet", lambda a: np.linalg.slogdet(a)[1],
                 (lambda g, ans, a: _per_matrix(g) * mT(inv(a)),), (_logabsdet_jvp,), _square_params,
                 analytic=False)


def _symmetric(x):
    return (x + mT(x)) * 0.5


def _cholesky(a):
    try:
        return np.linalg.cholesky(a)
    except np.linalg.LinAlgError:
        raise ValueError_("cholesky: the matrix is not positive definite",
                          hint="cholesky reads the lower triangle of a symmetric positive definite "
                               "matrix") from None


def _lower_half_diagonal(n: int):
    """The mask of Phi, Cholesky's derivative: the lower triangle, with the diagonal halved."""
    return np.tril(np.ones((n, n))) - 0.5 * np.eye(n)


def _cholesky_jvp(t, ans, a):
    # dL = L Phi(L^-1 sym(dA) L^-T)
    li = inv(ans)
    return ans @ (li @ _symmetric(t) @ mT(li) * _lower_half_diagonal(ans.shape[-1]))


def _cholesky_vjp(g, ans, a):
    # the adjoint of the JVP: sym(L^-T Phi(L^T g) L^-1)
    li = inv(ans)
    return _symmetric(mT(li) @ (mT(ans) @ g * _lower_half_diagonal(ans.shape[-1])) @ li)


# the lower Cholesky factor (NumPy's: reads the lower triangle); derivatives treat A as symmetric
cholesky = _def("cholesky", _cholesky, (_cholesky_vjp,), (_cholesky_jvp,), _square_params,
                analytic=False, symmetric_operand=True)


class _Factorisations:
    """The last few factorisations, found by their input's bytes: svd's three results (eigh's
    and qr's two) are one LAPACK call, not one per primitive and per derivative rule.  (By
    content, not identity: a caller may write into an array between two runs.  Each call hands
    out copies, O(n^2) beside LAPACK's O(n^3): a caller may write into a result it was given.)"""

    def __init__(self, fn, size=4):
        self.fn, self.size, self.entries = fn, size, []

    def __call__(self, a):
        key = (a.shape, a.dtype.str, a.tobytes())
        for k, result in self.entries:
            if k == key:
                break
        else:
            result = tuple(self.fn(a))
            self.entries = [(key, result)] + self.entries[:self.size - 1]
        return tuple(r.copy() for r in result)


_eigh = _Factorisations(np.linalg.eigh)


def _eigh_gaps(w):
    """F[i, j] = 1 / (w[j] - w[i]) off the diagonal, 0 on it (eigenvectors' derivative)."""
    n = w.shape[-1]
    wi = reshape(w, shape=w.shape[:-1] + (n, 1))
    wj = reshape(w, shape=w.shape[:-1] + (1, n))
    eye = np.eye(n)
    return (1.0 - eye) / (wj - wi + eye)


def _eigh_vectors_jvp(t, ans, a):
    v = ans
    return v @ (_eigh_gaps(eigh_values(a)) * (mT(v) @ _symmetric(t) @ v))


def _eigh_vectors_vjp(g, ans, a):
    v = ans
    return _symmetric(v @ (_eigh_gaps(eigh_values(a)) * (mT(v) @ g)) @ mT(v))


def _eigh_values_vjp(g, ans, a):
    v = eigh_vectors(a)  # V diag(g) V^T: symmetric already
    return (v * reshape(g, shape=g.shape[:-1] + (1,) + g.shape[-1:])) @ mT(v)


def _eigh_values_jvp(t, ans, a):
    v = eigh_vectors(a)
    return reduce_sum(v * (t @ v), axis=-2)  # diag(V^T t V)


# eigh's w (ascending) and V (NumPy's signs); NumPy reads the lower triangle, the derivatives
# treat A as symmetric (their gradients are symmetric, as JAX's)
eigh_values = _def("eigh_values", lambda a: _eigh(a)[0], (_eigh_values_vjp,), (_eigh_values_jvp,),
                   _square_params, analytic=False, symmetric_operand=True)
eigh_vectors = _def("eigh_vectors", lambda a: _eigh(a)[1], (_eigh_vectors_vjp,),
                    (_eigh_vectors_jvp,), _square_params, analytic=False, symmetric_operand=True)


# -- svd, qr, pinv -------------------------------------------------------------------

def _matrix_params(shapes, builder):
    a = shapes[0]
    if len(a) < 2:
        raise ShapeError(f"needs a matrix (or a stack of them), got shape {tuple(a)}")
    return {}


def _row(s):
    """A vector per matrix as a row, (..., 1, k): multiplying by it scales columns."""
    return reshape(s, shape=s.shape[:-1] + (1, s.shape[-1]))


def _column(s):
    """A vector per matrix as a column, (..., k, 1): multiplying by it scales rows."""
    return reshape(s, shape=s.shape + (1,))


def _svd_gaps(s):
    """F[i, j] = 1 / (s_j^2 - s_i^2) off the diagonal, 0 on it (singular vectors' derivative)."""
    return _eigh_gaps(s * s)


# The rules of the reduced SVD A = U diag(s) V^T are JAX's (lax.linalg's svd JVP, real case),
# with dS = U^T dA V: ds = diag(dS); dU = U (F o (dS S + S dS^T)) plus, for m > n, the part of
# dA V outside U's columns, over s; dV alike with m < n.  Each VJP is its JVP's adjoint.

def _svd_s_vjp(g, ans, a):
    return (svd_u(a) * _row(g)) @ svd_vt(a)  # U diag(g) V^T


def _svd_s_jvp(t, ans, a):
    return reduce_sum(svd_u(a) * (t @ mT(svd_vt(a))), axis=-2)  # diag(U^T t V)


def _svd_u_jvp(t, ans, a):
    u, s, v = ans, svd_s(a), mT(svd_vt(a))
    dss = (mT(u) @ t @ v) * _row(s)
    du = u @ (_svd_gaps(s) * (dss + mT(dss)))
    if a.shape[-2] > a.shape[-1]:
        dav = t @ v
        du = du + (dav - u @ (mT(u) @ dav)) / _row(s)
    return du


def _svd_u_vjp(g, ans, a):
    u, s, vt = ans, svd_s(a), svd_vt(a)
    y = _svd_gaps(s) * (mT(u) @ g)
    ga = u @ ((y + mT(y)) * _row(s)) @ vt
    if a.shape[-2] > a.shape[-1]:
        gs = g / _row(s)
        ga = ga + (gs - u @ (mT(u) @ gs)) @ vt
    return ga


def _svd_vt_jvp(t, ans, a):
    vt, u, s = ans, svd_u(a), svd_s(a)
    v = mT(vt)
    sds = _column(s) * (mT(u) @ t @ v)
    dv = v @ (_svd_gaps(s) * (sds + mT(sds)))
    if a.shape[-1] > a.shape[-2]:
        dahu = mT(t) @ u
        dv = dv + (dahu - v @ (vt @ dahu)) / _row(s)
    return mT(dv)


def _svd_vt_vjp(g, ans, a):
    vt, u, s = ans, svd_u(a), svd_s(a)
    y = _svd_gaps(s) * (vt @ mT(g))
    ga = u @ (_column(s) * (y + mT(y))) @ vt
    if a.shape[-1] > a.shape[-2]:
        ga = ga + (u / _row(s)) @ (g - (g @ mT(vt)) @ vt)
    return ga


def _finite_svd(a):
    """LAPACK's SVD refuses what it cannot factor: its iteration on a matrix holding inf never
    returns (NumPy's svd and pinv hang on one), and on nan NumPy raises 'SVD did not converge';
    both are refused here, with that error, before LAPACK is called."""
    if not np.isfinite(a).all():
        raise np.linalg.LinAlgError("SVD did not converge: the matrix holds inf or nan")


def _reduced_svd(a):
    _finite_svd(a)
    return np.linalg.svd(a, full_matrices=False)


_svd = _Factorisations(_reduced_svd)
_qr = _Factorisations(np.linalg.qr)


def _signs_flipped(axis: int):
    """A factor's branch (Primitive.branch): LAPACK fixes each column (axis -2: U, Q) or row
    (axis -1: V^T, R) of a factor only up to its sign, and its choice jumps (qr(eye(2))
    against a matrix a step away).  A row of the batch ans flipped one where that column
    points against base's (a negative dot product; a step moves a kept one only slightly)."""
    def flipped(base, ans):
        ans = np.asarray(ans)
        dots = np.sum(np.real(np.conj(base) * ans), axis=axis)
        return by_row(dots < 0).any(axis=1)  # (no rows for an input with no elements)
    return flipped

# svd's s (descending), U and V^T (NumPy's reduced SVD, its signs); derivatives need distinct
# singular values (and nonzero ones for the extra columns of a non-square U or V) (complex-step
# differences do not apply to these: on complex input LAPACK conjugates, so none is analytic)
svd_s = _def("svd_s", lambda a: _svd(a)[1], (_svd_s_vjp,), (_svd_s_jvp,), _matrix_params, analytic=False)
svd_u = _def("svd_u", lambda a: _svd(a)[0], (_svd_u_vjp,), (_svd_u_jvp,), _matrix_params, analytic=False,
             branch=_signs_flipped(-2))
svd_vt = _def("svd_vt", lambda a: _svd(a)[2], (_svd_vt_vjp,), (_svd_vt_jvp,), _matrix_params,
              analytic=False, branch=_signs_flipped(-1))


# The reduced QR A = Q R (m >= n, R invertible): with X = dA R^-1, C = Q^T X and
# K = triu(C) + tril(C, -1)^T, dQ = X - Q K and dR = K R (JAX's qr_jvp_rule, rewritten: its
# do - C is -K).  K's map and its adjoint, for the VJPs:

def _qr_k(c):
    n = c.shape[-1]
    return c * np.triu(np.ones((n, n))) + mT(c * np.tril(np.ones((n, n)), -1))


def _qr_k_adjoint(h):
    n = h.shape[-1]
    return h * np.triu(np.ones((n, n))) + mT(h) * np.tril(np.ones((n, n)), -1)


def _qr_tall(a):
    m, n = a.shape[-2:]
    if m < n:
        raise UsageError(f"qr: derivatives need a matrix with at least as many rows as columns; "
                         f"this one is {m}×{n}",
                         hint="its value is defined for any shape; its derivative (as JAX's) for m >= n")


def _qr_q_jvp(t, ans, a):
    _qr_tall(a)
    x = t @ inv(qr_r(a))
    return x - ans @ _qr_k(mT(ans) @ x)


def _qr_r_jvp(t, ans, a):
    _qr_tall(a)
    return _qr_k(mT(qr_q(a)) @ (t @ inv(ans))) @ ans


def _qr_q_vjp(g, ans, a):
    _qr_tall(a)
    return (g - ans @ _qr_k_adjoint(mT(ans) @ g)) @ mT(inv(qr_r(a)))


def _qr_r_vjp(g, ans, a):
    _qr_tall(a)
    return qr_q(a) @ _qr_k_adjoint(g @ mT(ans)) @ mT(inv(ans))


# qr's Q and R (NumPy's reduced QR, LAPACK's signs); derivatives for m >= n and R invertible
qr_q = _def("qr_q", lambda a: _qr(a)[0], (_qr_q_vjp,), (_qr_q_jvp,), _matrix_params, analytic=False,
            branch=_signs_flipped(-2))
qr_r = _def("qr_r", lambda a: _qr(a)[1], (_qr_r_vjp,), (_qr_r_jvp,), _matrix_params, analytic=False,
            branch=_signs_flipped(-1))


def _minus_from_eye(x):
    """I - x for a (stack of) square matrices."""
    return -x + np.eye(x.shape[-1])


def _pinv_jvp(t, ans, a):
    # Golub and Pereyra: dP = -P dA P + P P^T dA^T (I - A P) + (I - P A) dA^T P^T P
    p, tt = ans, mT(t)
    return (-(p @ t @ p) + p @ (mT(p) @ tt) @ _minus_from_eye(a @ p)
            + _minus_from_eye(p @ a) @ (tt @ (mT(p) @ p)))


def _pinv_vjp(g, ans, a):
    p, gt = ans, mT(g)
    return (-(mT(p) @ g @ mT(p)) + _minus_from_eye(a @ p) @ (gt @ (p @ mT(p)))
            + (mT(p) @ p) @ gt @ _minus_from_eye(p @ a))


PINV_RCOND = 1e-15  # NumPy's default cutoff: singular values below it times the largest count as 0


def _pinv(a):
    _finite_svd(a)
    return np.linalg.pinv(a, rcond=PINV_RCOND)


# the pseudo-inverse with NumPy's default cutoff; its derivative holds the rank fixed (Golub and
# Pereyra)
pinv = _def("pinv", _pinv, (_pinv_vjp,), (_pinv_jvp,),
            _matrix_params, analytic=False)


# -- einsum: one contraction over subscripts ---------------------------------------
# Parameters: ins (one subscript string per operand) and out, explicit, with letters only;
# an operand with more axes than its subscripts carries leading batch axes (`...`).

def _einsum_split(subscripts: str, n: int) -> tuple:
    spec = subscripts.replace(" ", "")
    if "." in spec:  # (the built-in writes a well-formed '...' out as letters before this)
        raise UsageError(f"einsum: '.' may appear only as one '...' per term, in {subscripts!r}")
    lhs, arrow, out = spec.partition("->")
    ins = tuple(lhs.split(","))
    bad = sorted({c for c in lhs + out if not (c.isalpha() and c.isascii()) and c != ","})
    if bad or "-" in out or ">" in out:
        raise UsageError(f"einsum: subscripts {subscripts!r} may hold only letters, ',' and one '->'")
    if len(ins) != n:
        raise UsageError(f"einsum: subscripts {subscripts!r} name {len(ins)} operand"
                         f"{'s' * (len(ins) != 1)}, but {n} {'were' if n != 1 else 'was'} given")
    if not arrow:  # implicit output: the letters seen once, in alphabetical order (NumPy's rule)
        out = "".join(sorted(c for c in set(lhs) - {","} if lhs.count(c) == 1))
    return ins, out


def _einsum_sizes(ins, shapes, subscripts) -> dict:
    sizes: dict = {}
    for k, (sub, shape) in enumerate(zip(ins, shapes), start=1):
        if len(sub) != len(shape):
            raise ShapeError(f"einsum: operand {k} has shape {tuple(shape)}, but its subscripts "
                             f"'{sub}' name {len(sub)} ax{'es' if len(sub) != 1 else 'is'}")
        for c, d in zip(sub, shape):
            if sizes.setdefault(c, d) != d:
                raise ShapeError(f"einsum: '{c}' has length {sizes[c]} and {d} in {subscripts!r}")
    return sizes


def _einsum_params(shapes, builder, subscripts):
    if not isinstance(subscripts, str):
        raise UsageError(f"einsum: the subscripts must be a string such as 'ij,j->i', got {subscripts!r}")
    ins, out = _einsum_split(subscripts, len(shapes))
    sizes = _einsum_sizes(ins, shapes, subscripts)
    for c in out:
        if c not in sizes:
            raise UsageError(f"einsum: output subscript '{c}' is not among the operands' in {subscripts!r}")
        if out.count(c) > 1:
            raise UsageError(f"einsum: output subscript '{c}' is repeated in {subscripts!r}")
    builder.check_size(tuple(sizes[c] for c in out))
    return {"subscripts": ",".join(ins) + "->" + out}


def _einsum(*xs, subscripts):
    lhs, out = subscripts.split("->")
    ins = lhs.split(",")
    batched = [x.ndim > len(s) for x, s in zip(xs, ins)]
    if any(batched):  # leading batch axes: NumPy's ellipsis lines them up (and broadcasts them)
        ins = ["..." + s if b else s for s, b in zip(ins, batched)]
        out = "..." + out
    # (a path search pays off from three operands; sympy's object arrays take the plain loop)
    fast = len(xs) > 2 and all(x.dtype.kind == "f" for x in xs)
    r = np.einsum(",".join(ins) + "->" + out, *xs, optimize=fast)
    return r[()] if r.ndim == 0 else r


def _einsum_vjp(i, g, ans, *xs, subscripts):
    """An einsum of the cotangent with the other operands, giving operand i's subscripts.  A
    letter of operand i that no other factor has is brought by a vector of ones; a letter
    repeated in it (a diagonal, 'ii') is renamed and tied to its first use by an identity."""
    lhs, out = subscripts.split("->")
    ins = lhs.split(",")
    target, others = ins[i], [s for k, s in enumerate(ins) if k != i]
    free = iter(c for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in lhs)
    subs, ops = [out] + others, [g] + [x for k, x in enumerate(xs) if k != i]
    seen, result = set(), ""
    for c, d in zip(target, xs[i].shape[len(xs[i].shape) - len(target):]):
        if c in seen:  # a repeated letter: a fresh one, equal to c on the identity's diagonal
            fresh = next(free)
            subs.append(c + fresh)
            ops.append(np.eye(d))
            result += fresh
            continue
        seen.add(c)
        if not any(c in s for s in subs):
            subs.append(c)
            ops.append(np.ones(d))
        result += c
    return einsum(*ops, subscripts=",".join(subs) + "->" + result)


def _einsum_jvp(ts, ans, *xs, subscripts):
    """The sum over the operands with a tangent of the einsum with that operand's tangent."""
    total = None
    for i, t in enumerate(ts):
        if t is not None:
            c = einsum(*[t if k == i else x for k, x in enumerate(xs)], subscripts=subscripts)
            total = c if total is None else total + c
    return total


# einsum(operands..., subscripts='ij,j->i'): NumPy's einsum (the built-in writes '...' out as letters)
einsum = _def("einsum", _einsum, _einsum_vjp, _einsum_jvp, _einsum_params, variadic=True)


def _diag_params(shapes, builder, k=0):
    xshape = tuple(shapes[0])
    if len(xshape) != 2:
        raise ShapeError(f"needs a matrix, got shape {xshape}")
    return {"k": int(k), "xshape": xshape}


def _diag_embed_params(shapes, builder, k, shape):
    builder.check_size(shape)
    return {"k": int(k), "shape": tuple(shape)}


def _diag_coords(n, k):
    i = np.arange(n)
    return (i, i + k) if k >= 0 else (i - k, i)


def _diag_embed(x, k, shape):
    out = np.zeros(x.shape[:-1] + shape, dtype=x.dtype)
    rows, cols = _diag_coords(x.shape[-1], k)
    out[..., rows, cols] = x
    return out


# the k-th diagonal of a matrix, and a matrix of shape with x on its k-th diagonal
diag = _def("diag", lambda x, k, xshape: np.diagonal(x, offset=k, axis1=-2, axis2=-1).copy(),
            (lambda g, ans, x, k, xshape: diag_embed(g, k=k, shape=xshape),),
            (lambda t, ans, x, k, xshape: diag(t, k=k),),
            _diag_params, reads=())
diag_embed = _def("diag_embed", _diag_embed,
                  (lambda g, ans, x, k, shape: diag(g, k=k),),
                  (lambda t, ans, x, k, shape: diag_embed(t, k=k, shape=shape),),
                  _diag_embed_params, reads=())


# ==========================================================================
# Arithmetic on tracers
# ==========================================================================

def _power(x, p):
    """x ** p: a number p is a constant exponent (pow_const, whose rule needs no log of x)."""
    return pow_const(x, p=p) if isinstance(p, (int, float)) else pow_(x, p)


def _tracer_arithmetic() -> None:
    """Give Tracer (tape.py) its operators, so that rules read like the math they implement.
    tape.py sits below this module and cannot import it; the operators are set on the class
    here, once, as this module loads.  Plain functions, one call each: Tracer arithmetic runs
    in every traced derivative rule."""
    operators = {
        "__add__": lambda x, y: add(x, y), "__radd__": lambda x, y: add(y, x),
        "__sub__": lambda x, y: sub(x, y), "__rsub__": lambda x, y: sub(y, x),
        "__mul__": lambda x, y: mul(x, y), "__rmul__": lambda x, y: mul(y, x),
        "__truediv__": lambda x, y: div(x, y), "__rtruediv__": lambda x, y: div(y, x),
        "__pow__": _power, "__rpow__": lambda x, y: pow_(y, x),
        "__matmul__": lambda x, y: matmul(x, y), "__rmatmul__": lambda x, y: matmul(y, x),
        "__neg__": lambda x: neg(x), "__pos__": lambda x: x,
    }
    for name, fn in operators.items():
        setattr(Tracer, name, fn)


_tracer_arithmetic()

REGISTRY = MappingProxyType(_REGISTRY)
"""Every primitive by name; read-only once this module has loaded."""
