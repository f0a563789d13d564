"""Closed-form derivatives with sympy: the ``--symbolic`` option of grad, jacobian, hessian and check.

A traced tape is replayed on NumPy *object* arrays whose elements are sympy
expressions: one scalar expression per array element, in terms of the inputs
only (intermediate values are substituted).  sympy then differentiates each
element, simplifies it and evaluates it at the traced point, which makes it a
third oracle next to automatic and finite differences.

sympy is imported inside the functions of this module only: ``import
gradcalc`` and the CLI pay nothing for it until ``--symbolic`` is asked for.

Naming.  A scalar input ``x`` is the symbol ``x``; an element of an array
input is a symbol named like NumPy indexing, ``x[0]``, ``W[0, 1]`` (printed so
by ``str``; in LaTeX ``x_{0}``, ``W_{0,1}``).  All input symbols are real.
Constants that are exactly integers, pi or e become ``Integer``, ``pi``, ``E``;
short decimals become rationals (``0.5`` is ``1/2``, ``1e-3`` is ``1/1000``);
other floats stay sympy ``Float``.

Conventions, matching gradcalc's automatic derivatives (SPEC §2):
- ``sign``, ``floor``, ``ceil`` and ``round`` have derivative 0 everywhere
  (no ``DiracDelta``); ``abs'(x) = sign(x)`` (0 at 0); ``relu`` is
  ``Piecewise((x, x > 0), (0, True))`` (derivative 0 at 0).
- ``maximum``/``minimum`` and the reductions ``max``/``min`` are ``Max``/``Min``,
  whose derivatives are ``Heaviside`` steps with ``Heaviside(0) = 1/2``: a tie
  of two shares the derivative equally, as in JAX.
- comparisons are ``Piecewise((1, a < b), (0, True))`` masks and ``where`` is
  a ``Piecewise``, so the unselected branch contributes nothing.  ``any`` and
  ``all`` (a sum of masks tested against 0) are one flat ``Or`` / ``And`` of
  the elements' conditions.
- ``copysign(a, b)`` is ``Piecewise((Abs(a), b >= 0), (-Abs(a), True))``; by a
  constant ``b`` (a number, an infinity or nan) it is ``Abs(a)`` or ``-Abs(a)``
  by ``b``'s sign bit, as NumPy's (``copysign(x, nan)`` is ``Abs(x)``,
  ``copysign(x, -0.0)`` is ``-Abs(x)``).
- ``stop_gradient(x)`` stays in the expression as a function whose
  derivative is 0; it evaluates to its argument.
- Points where the closed form is singular but gradcalc pins a value
  (``norm'(0) = 0``, ``hypot`` at the origin, ``pow`` with a zero exponent
  and base) evaluate to nan or inf here.

Limits (a clear :class:`UsageError`, never a hang): every value may have at
most ``SIZE_LIMIT`` elements and the whole tape ``TOTAL_LIMIT``; ``det``,
``inv``, ``solve``, ``slogdet``, ``cholesky`` and ``pinv`` take matrices up to
``LINALG_LIMIT`` × ``LINALG_LIMIT``, and a stack of them matrix by matrix
(``eigh``, ``svd`` and ``qr`` have no closed form: refused, saying why);
one element's expression may hold at most ``EXPR_LIMIT`` nodes (counted as a
tree: repeated subexpressions count each time), and one derivative's
``DERIVATIVE_LIMIT`` (a first derivative that a Hessian differentiates again,
``EXPR_LIMIT``, since a second derivative is about ten times larger); a condition over values that
are themselves piecewise (``sum(x > 0) > 3``, ``where(relu(x) > 1, ...)``),
which sympy writes out as every combination of their branches, at most
``FOLD_LIMIT`` cases.  Derivatives larger than
``SIMPLIFY_LIMIT`` nodes, entries whose simplification takes longer than
``SIMPLIFY_EACH_SECONDS`` and any left once ``SIMPLIFY_SECONDS`` have been
spent in one call are shown unsimplified, and the result's ``note`` says so;
a block of derivatives with more than ``PRINT_LIMIT`` nodes is not printed
(``text`` and ``latex`` are None) but still evaluated.  Programs nested more
deeply than sympy's recursion allows (about 150 nested calls) are refused.
"""
from __future__ import annotations

import contextlib
import functools
import math
import signal
import threading
import time

import numpy as np

from .errors import GradcalcError, ShapeError, UsageError, ValueError_, did_you_mean, listed, option

SIZE_LIMIT = 64
"""Most elements in any one value (input, constant or intermediate) for --symbolic."""
TOTAL_LIMIT = 4096
"""Most scalar elements across all the values of the tape for --symbolic."""
LINALG_LIMIT = 4
"""Largest n of an n×n matrix given to det, inv or solve for --symbolic."""
EXPR_LIMIT = 20_000
"""Most nodes in the expression tree of one element of one value."""
DERIVATIVE_LIMIT = 200_000
"""Most nodes in the expression tree of one derivative (a Hessian of 2.5 million nodes took 49 s)."""
SYMBOLIC_SECONDS = 30.0
"""Longest sympy may take over the derivatives of one closed form (_time_limit's timer interrupts
it, on the main thread, as it does simplification): its work is not proportional to the nodes (the product rule over a Mul of k factors costs k^2, so
the gradient of sum(cumprod(cumprod(x))) of 64 elements, 268,254 nodes, took 55 s)."""
ALL_DERIVATIVES_LIMIT = 300_000
"""Most nodes in the trees of all the derivatives of one closed form (a Jacobian, a Hessian) taken
together: sympy differentiates a product at about 60 µs a node, so that many entries each within
DERIVATIVE_LIMIT added up (the Hessian of sum(cumprod(x)) of 64 elements ran for minutes)."""
SIMPLIFY_LIMIT = 400
"""Derivatives with more nodes than this are not simplified."""
SIMPLIFY_MAX_EXPONENT = 100
"""Derivatives holding a power with a larger constant exponent are not simplified."""
SIMPLIFY_SECONDS = 5.0
"""Time budget for sympy.simplify in one symbolic_gradient / symbolic_jacobian / symbolic_hessian call."""
SIMPLIFY_EACH_SECONDS = 1.0
"""Time limit for simplifying one entry (enforced on POSIX, in the main thread)."""
PRINT_LIMIT = 5000
"""Blocks of derivatives with more nodes than this get no text or LaTeX (a note says so)."""

#: The note of a closed form of a program that branches or loops: it holds on the path the
#: traced point took, which another point need not take (SPEC §5).
PATH_NOTE = ("the closed form of the path taken (this program branches or loops; another point may take "
             "another path)")

#: Digits of the point at which closed forms are evaluated (see _derivatives).
POINT_DIGITS = 50

#: The decisions (tape.Guard.what) of control flow; the others are values a built-in or an index
#: took from the point (a sort order, an index array, a mask), with no branch in the program.
_BRANCHING = frozenset({"if", "while", "conditional", "range"})


def _path_note(guards) -> str:
    """What a closed form traced under these decisions holds for: the path taken, or (with no
    branch or loop) the sort order, indices or masks the point gave."""
    kinds = {g.what for g in guards}
    if kinds & _BRANCHING:
        return PATH_NOTE
    shown = " and ".join(sorted(kinds))
    return (f"the closed form for the {shown} found at this point (the program does not branch, but "
            f"another point may give another {shown})")


__all__ = ["SIZE_LIMIT", "TOTAL_LIMIT", "LINALG_LIMIT", "EXPR_LIMIT", "DERIVATIVE_LIMIT", "FOLD_LIMIT",
           "SIMPLIFY_LIMIT", "SIMPLIFY_SECONDS", "SIMPLIFY_EACH_SECONDS", "PRINT_LIMIT", "check_size", "to_sympy",
           "symbolic_gradient", "symbolic_jacobian", "symbolic_hessian", "NO_CLOSED_FORM", "converts"]


# ==========================================================================
# sympy, loaded on first use
# ==========================================================================


@functools.lru_cache(maxsize=None)
def _sympy():
    """sympy and the few functions gradcalc needs with its own derivative conventions."""
    import sympy as sp

    class Abs(sp.Abs):
        # sympy's own rule for a possibly complex argument is unreadable; ours is real.
        def _eval_derivative(self, s):
            a = self.args[0]
            return sp.sign(a) * a.diff(s)

    class sign(sp.sign):
        def _eval_derivative(self, s):
            return sp.S.Zero

    class floor(sp.floor):
        def fdiff(self, argindex=1):
            return sp.S.Zero

    class ceiling(sp.ceiling):
        def fdiff(self, argindex=1):
            return sp.S.Zero

    class round(sp.Function):  # noqa: A001 - printed as round(x)
        """Rounds half to even, as numpy.round; derivative 0."""

        @classmethod
        def eval(cls, a):
            if a.is_Integer:
                return a
            if a.is_Number and a.is_finite:
                return sp.Integer(_round_half_even(float(a)))
            return None

        def fdiff(self, argindex=1):
            return sp.S.Zero

    class stop_gradient(sp.Function):
        """The value of its argument, with derivative 0."""

        @classmethod
        def eval(cls, a):
            if a.is_Number:
                return a
            return None

        def fdiff(self, argindex=1):
            return sp.S.Zero

    def cbrt(a):
        return sign(a) * Abs(a) ** sp.Rational(1, 3)

    def relu(a):
        return sp.Piecewise((a, a > 0), (0, True))

    unary = {
        "abs": Abs, "sign": sign, "sqrt": sp.sqrt, "cbrt": cbrt, "exp": sp.exp,
        "expm1": lambda a: sp.exp(a) - 1, "exp2": lambda a: _power(sp.Integer(2), a),
        "log": sp.log, "log1p": lambda a: sp.log(1 + a), "log2": lambda a: sp.log(a, 2),
        "log10": lambda a: sp.log(a, 10),
        "sin": sp.sin, "cos": sp.cos, "tan": sp.tan, "asin": sp.asin, "acos": sp.acos,
        "atan": sp.atan, "sinh": sp.sinh, "cosh": sp.cosh, "tanh": sp.tanh, "asinh": sp.asinh,
        "acosh": sp.acosh, "atanh": sp.atanh,
        "sigmoid": lambda a: 1 / (1 + sp.exp(-a)), "relu": relu,
        "softplus": lambda a: sp.log(1 + sp.exp(a)),
        "floor": floor, "ceil": ceiling, "round": round, "stop_gradient": stop_gradient,
        "erf": sp.erf, "erfc": sp.erfc,
        # numpy.sinc is the normalised sinc (sympy's sinc is sin(x) / x), 1 at 0
        "sinc": lambda a: sp.Piecewise((1, sp.Eq(a, 0)), (sp.sin(sp.pi * a) / (sp.pi * a), True)),
        "trunc": lambda a: sp.Piecewise((floor(a), a >= 0), (ceiling(a), True)),
    }
    return sp, unary


_round_half_even = round  # the builtin (half to even, as numpy.round); _sympy() shadows the name


# ==========================================================================
# Sizes and limits
# ==========================================================================


def _var_names(tr) -> dict:
    names: dict = {}
    for n, v in tr.tape.names.items():
        names.setdefault(v, n)
    return names


def _where(tr, var, names, eq=None) -> str:
    if var in names:
        return f"'{names[var]}'"
    if eq is not None:
        at = f" at line {eq.pos.line}, column {eq.pos.col}" if eq.pos else ""
        return f"the result of '{tr.builder.op_name(eq.prim, eq.loc)}'{at}"
    return "a constant"


def _located(err: GradcalcError, tr) -> GradcalcError:
    source = getattr(getattr(tr, "program", None), "source", None)
    return err.located(source) if source is not None else err


#: The option these closed forms answer, as messages name it (errors.option).
_SYMBOLIC = option("symbolic")
_SMALLER = f"use smaller shapes for a closed form, or drop {_SYMBOLIC}"


def _too_deep(tr) -> GradcalcError:
    return _located(UsageError(f"{_SYMBOLIC}: the program nests too deeply for sympy", option="symbolic"), tr)


def check_size(tr) -> None:
    """Raise UsageError if the traced program is too large for --symbolic (see SIZE_LIMIT)."""
    shapes = tr.builder.shapes
    names = _var_names(tr)
    eqs = {eq.out: eq for eq in tr.tape.equations}
    total = 0
    for var in [*tr.tape.inputs.values(), *tr.tape.consts, *eqs]:
        shape = shapes[var]
        size = math.prod(shape)
        total += size
        if size > SIZE_LIMIT:
            raise _located(UsageError(
                f"{_SYMBOLIC} supports programs with at most {SIZE_LIMIT} elements per value; "
                f"{_where(tr, var, names, eqs.get(var))} has shape {tuple(shape)} ({size} elements)",
                eqs[var].pos if var in eqs else tr.tape.positions.get(names.get(var)),
                hint=_SMALLER, name=names.get(var), option="symbolic"), tr)
    if total > TOTAL_LIMIT:
        raise _located(UsageError(
            f"{_SYMBOLIC} supports programs with at most {TOTAL_LIMIT} scalar elements in all; "
            f"this one has {total}", hint=_SMALLER, option="symbolic"), tr)


def _tree_size(expr, memo: dict) -> int:
    """Nodes of expr counted as a tree, memoised over the shared DAG, without recursion."""
    if expr in memo:
        return memo[expr]
    stack = [expr]
    while stack:
        node = stack[-1]
        if node in memo:
            stack.pop()
            continue
        pending = [a for a in node.args if a not in memo]
        if pending:
            stack.extend(pending)
            continue
        memo[node] = 1 + sum(memo[a] for a in node.args)
        stack.pop()
    return memo[expr]


# ==========================================================================
# Tape -> sympy
# ==========================================================================


def _obj(value):
    """value (an object array, a NumPy array or one expression) as an object array of sympy."""
    sp, _ = _sympy()
    if isinstance(value, np.ndarray):
        src = value
    else:
        src = np.empty((), dtype=object)
        src[()] = value
    out = np.empty(src.shape, dtype=object)
    for i, e in enumerate(src.flat):
        out.flat[i] = e if isinstance(e, sp.Basic) else sp.sympify(e)
    return out


#: Bits beyond which a power of two exact numbers is taken in floating point.
EXACT_POWER_BITS = 4096


def _power(a, b):
    """a ** b; of two exact numbers whose exact power would pass EXACT_POWER_BITS, the
    floating-point power (SymPy computes 2**(10**15) digit by digit: 10**15 bits)."""
    sp, _ = _sympy()
    if isinstance(a, sp.Rational) and isinstance(b, sp.Rational) and not b.is_zero:
        if abs(b) * max(a.p.bit_length(), a.q.bit_length()) > EXACT_POWER_BITS:
            return sp.Float(a) ** sp.Float(b)
    return a ** b


def _const(v: float):
    """A float constant as an exact sympy number where it plainly is one."""
    sp, _ = _sympy()
    if math.isnan(v):
        return sp.nan
    if math.isinf(v):
        return sp.oo if v > 0 else -sp.oo
    if v == int(v) and abs(v) < 2 ** 53:
        return sp.Integer(int(v))
    if v == math.pi:
        return sp.pi
    if v == math.e:
        return sp.E
    text = repr(v)
    digits = text.lower().split("e")[0].replace("-", "").replace(".", "").strip("0")
    if len(digits) <= 6 and abs(v) < 2 ** 53:  # (1e300 exactly is a 301-digit integer: 2^1e300 would not end)
        return sp.Rational(text)
    return sp.Float(v)


def _symbols(name: str, shape: tuple):
    """The real symbols of an input: x, or x[0], x[1]..., or W[0, 0], W[0, 1]..."""
    sp, _ = _sympy()
    out = np.empty(shape, dtype=object)
    if not shape:
        out[()] = sp.Symbol(name, real=True)
        return out
    for idx in np.ndindex(*shape):
        out[idx] = sp.Symbol(f"{name}[{', '.join(map(str, idx))}]", real=True)
    return out


def _reduce(x, axes, keepdims, combine):
    """combine(list of elements) over axes (negative, from the end) of an object array."""
    nd, k = x.ndim, len(axes)
    pos = [a + nd for a in axes]
    moved = np.moveaxis(x, pos, list(range(nd - k, nd)))
    flat = moved.reshape(moved.shape[:nd - k] + (math.prod(moved.shape[nd - k:]),))  # (not -1: size 0)
    out = np.empty(flat.shape[:-1], dtype=object)
    for idx in np.ndindex(*out.shape):
        out[idx] = combine(list(flat[idx]))
    if keepdims:
        out = out.reshape(tuple(1 if i in pos else d for i, d in enumerate(x.shape)))
    return out


def _elementwise(fn, nargs):
    uf = np.frompyfunc(fn, nargs, 1)
    return lambda *xs, **_: uf(*xs)


#: Most cases a condition holding Piecewise operands may fold into (sympy lists every
#: combination of their branches: a count of n masks compared has 2^n).
FOLD_LIMIT = 64


class _TooManyCases(Exception):
    """A condition whose closed form would fold into more than FOLD_LIMIT cases."""

    def __init__(self, cases: int):
        super().__init__(cases)
        self.cases = cases


def _mask_cond(c):
    """The condition of a mask Piecewise((1, cond), (0, True)), or None if c is no mask."""
    sp, _ = _sympy()
    if isinstance(c, sp.Piecewise) and len(c.args) == 2 and c.args[0].expr == 1 \
            and c.args[1].expr == 0 and c.args[1].cond == sp.true:
        return c.args[0].cond
    return None


def _mask_terms(c, kind):
    """The conditions of the masks c adds (kind sp.Add) or multiplies (sp.Mul), each with a
    positive (Add) or nonzero (Mul) constant factor at most; None if c is not such."""
    sp, _ = _sympy()
    if not isinstance(c, kind):
        return None
    conds = []
    for term in c.args:
        factor, rest = term.as_coeff_Mul() if kind is sp.Add else (sp.S.One, term)
        if kind is sp.Mul and term.is_Number:
            if term.is_zero or term is sp.nan:
                return None
            continue
        cond = _mask_cond(rest)
        if cond is None or not (factor.is_Number and factor.is_positive):
            return None
        conds.append(cond)
    return conds


def _truth(c):
    """The condition 'c is nonzero', reading a comparison mask back as its relation, a sum of
    masks as one Or (any) and a product of masks as one And."""
    sp, _ = _sympy()
    cond = _mask_cond(c)
    if cond is not None:
        return cond
    terms = _mask_terms(c, sp.Add)
    if terms is not None:  # (masks are 0 or 1: a sum of them with positive weights is nonzero iff one is)
        return sp.Or(*terms)
    terms = _mask_terms(c, sp.Mul)
    if terms is not None:
        return sp.And(*terms)
    return sp.Ne(c, 0)


def _folded(cond):
    """cond, checked to fold into at most FOLD_LIMIT cases: sympy rewrites a condition over
    Piecewise operands as every combination of their branches, in time and memory."""
    sp, _ = _sympy()
    if isinstance(cond, sp.Basic) and cond.has(sp.Piecewise):
        cases = 1
        for p in cond.atoms(sp.Piecewise):
            cases *= len(p.args)
            if cases > FOLD_LIMIT:
                raise _TooManyCases(cases)
    return cond


def _mask_of(cond):
    """1 where cond holds, else 0: a mask, as comparisons give it."""
    sp, _ = _sympy()
    return sp.Piecewise((1, _folded(cond)), (0, True))


def _mask(relation):
    sp, _ = _sympy()

    def fn(a, b):
        try:
            cond = relation(a, b)
        except TypeError:  # nan compared: false, as in NumPy (and != is true)
            cond = sp.true if relation is sp.Ne else sp.false
        return _mask_of(cond)
    return fn


def _square(x, prim, tr, eq):
    """One matrix of an object array as a sympy Matrix (within LINALG_LIMIT)."""
    n = x.shape[-1]
    if n > LINALG_LIMIT or x.shape[-2] > LINALG_LIMIT:
        at = f" at line {eq.pos.line}, column {eq.pos.col}" if eq.pos else ""
        raise _located(UsageError(
            f"{_SYMBOLIC} supports {prim} of matrices up to {LINALG_LIMIT}×{LINALG_LIMIT}; "
            f"'{prim}'{at} has a {x.shape[-2]}×{n} matrix", eq.pos, option="symbolic"), tr)
    sp, _ = _sympy()
    return sp.Matrix(x.tolist()) if x.size else sp.zeros(*x.shape[-2:])


def _per_matrix(x, prim, tr, eq, fn):
    """fn(sympy Matrix) for each matrix of the stack x (leading axes, as numpy.linalg takes
    them): an object array of the stack's shape followed by fn's result's shape."""
    batch = x.shape[:-2]
    results = [_obj(np.array(r.tolist(), dtype=object) if hasattr(r, "tolist") else r)
               for r in (fn(_square(x[idx], prim, tr, eq)) for idx in np.ndindex(*batch))]
    if not batch:
        return results[0]
    out = np.empty(batch + results[0].shape, dtype=object)
    for idx, r in zip(np.ndindex(*batch), results):
        out[idx + (Ellipsis,)] = r
    return out


@functools.lru_cache(maxsize=None)
def _rules():
    """prim name -> fn(*object arrays, tr=, eq=, **params) -> array or expression."""
    sp, unary = _sympy()
    rules = {name: _elementwise(fn, 1) for name, fn in unary.items()}

    def pow_const(x, p, **_):
        return _elementwise(lambda a: _power(a, _const(p)), 1)(x)

    def extremum(fn):
        # NumPy's maximum and max propagate nan; SymPy's Max refuses to compare with it
        return lambda *items: sp.nan if any(e is sp.nan for e in items) else fn(*items)

    def reduction(combine):
        return lambda x, axes, keepdims, xshape, **_: _reduce(x, axes, keepdims, combine)

    def logsumexp(items):
        return sp.log(sp.Add(*[sp.exp(e) for e in items]))

    def norm(items):
        return sp.sqrt(sp.Add(*[e ** 2 for e in items]))

    def softmax(x, axis, **_):
        ex = _elementwise(sp.exp, 1)(x)
        return ex / _reduce(ex, (axis,), True, lambda items: sp.Add(*items))

    def log_softmax(x, axis, **_):
        s = _reduce(_elementwise(sp.exp, 1)(x), (axis,), True, lambda items: sp.Add(*items))
        return x - _elementwise(sp.log, 1)(s)

    def det(a, tr, eq, **_):
        return _per_matrix(a, "det", tr, eq, lambda m: m.det())

    def inv(a, tr, eq, **_):
        return _per_matrix(a, "inv", tr, eq, _inverse)

    def solve(a, b, nda, ndb, tr, eq, **_):
        # inv(A) b: NumPy 2's stacking of b is matmul's (a vector: one right-hand side per matrix)
        return np.matmul(_per_matrix(a, "solve", tr, eq, _inverse), b)

    rules.update({
        "add": _elementwise(lambda a, b: a + b, 2),
        "mul": _elementwise(lambda a, b: a * b, 2),
        "safe_mul": _elementwise(lambda a, b: a * b, 2),
        "div": _elementwise(lambda a, b: a / b, 2),
        "safe_div": _elementwise(lambda a, b: a / b, 2),
        "neg": _elementwise(lambda a: -a, 1),
        "pow": _elementwise(_power, 2),
        "pow_const": pow_const,
        "maximum": _elementwise(extremum(sp.Max), 2),
        "minimum": _elementwise(extremum(sp.Min), 2),
        "atan2": _elementwise(sp.atan2, 2),
        "hypot": _elementwise(lambda a, b: sp.sqrt(a ** 2 + b ** 2), 2),
        "where": _elementwise(lambda c, a, b: sp.Piecewise((a, _folded(_truth(c))), (b, True)), 3),
        "lt": _elementwise(_mask(lambda a, b: a < b), 2),
        "switch_lt": _elementwise(_mask(lambda a, b: a < b), 2),
        "le": _elementwise(_mask(lambda a, b: a <= b), 2),
        "gt": _elementwise(_mask(lambda a, b: a > b), 2),
        "ge": _elementwise(_mask(lambda a, b: a >= b), 2),
        "eq": _elementwise(_mask(sp.Eq), 2),
        "ne": _elementwise(_mask(sp.Ne), 2),
        "zeros_like": lambda x, **_: np.full(x.shape, sp.S.Zero, dtype=object),
        "sum": reduction(lambda items: sp.Add(*items)),
        "prod": reduction(lambda items: sp.Mul(*items)),
        "max": reduction(lambda items: extremum(sp.Max)(*items)),
        "min": reduction(lambda items: extremum(sp.Min)(*items)),
        "logsumexp": reduction(logsumexp),
        "norm": reduction(norm),
        "softmax": softmax,
        "log_softmax": log_softmax,
        "det": det, "inv": inv, "solve": solve,
    })
    for more in (_integer_and_mask_rules(sp, unary["floor"]), _two_argument_rules(sp, extremum),
                 _scan_rules(), _spectral_rules(sp)):
        rules.update(more)
    rules["einsum"] = _einsum
    return rules


def _inverse(m):
    """inv of a sympy Matrix as adj(M) / det(M), entry by entry."""
    d = m.det()
    adj = m.adjugate()
    return np.array([[adj[i, j] / d for j in range(m.cols)] for i in range(m.rows)], dtype=object)


def _pseudo_inverse(m):
    """pinv at full rank (where NumPy's cutoff keeps every singular value): (A^T A)^-1 A^T for
    a tall matrix, A^T (A A^T)^-1 for a wide one; the derivative holds the rank fixed too."""
    if m.rows >= m.cols:
        return _inverse(m.T * m).dot(np.array(m.T.tolist(), dtype=object))
    return np.array(m.T.tolist(), dtype=object).dot(_inverse(m * m.T))


def _refused(name, reason):
    def rule(*_, tr, eq, **__):
        at = f" at line {eq.pos.line}, column {eq.pos.col}" if eq.pos else ""
        raise _located(UsageError(f"{_SYMBOLIC} cannot express '{name}'{at} in closed form: {reason}",
                                  eq.pos, hint=f"drop {_SYMBOLIC} for this program", option="symbolic"), tr)
    return rule


def _spectral_rules(sp) -> dict:
    """slogdet, cholesky and pinv in closed form, per matrix of a stack; eigh, svd and qr
    refused, with the reason."""
    def slogdet_sign(a, tr, eq, **_):
        return _per_matrix(a, "slogdet", tr, eq, lambda m: sp.sign(m.det()))

    def logabsdet(a, tr, eq, **_):
        return _per_matrix(a, "slogdet", tr, eq, lambda m: sp.log(sp.Abs(m.det())))

    def cholesky(a, tr, eq, **_):
        # of (A + A^T) / 2: equal to NumPy's (which reads the lower triangle) where A is
        # symmetric, and with the numeric rules' symmetric derivative
        return _per_matrix(a, "cholesky", tr, eq, lambda m: ((m + m.T) / 2).cholesky(hermitian=False))

    def pinv(a, tr, eq, **_):
        from .primitives import PINV_RCOND as rcond
        s = np.linalg.svd(np.asarray(tr.builder.values[eq.args[0]], dtype=np.float64), compute_uv=False)
        if np.any(s <= rcond * s[..., :1]):  # (pinv's own cutoff drops a singular value)
            _refused("pinv", "its closed form holds at full rank, and this matrix is "
                             "rank-deficient")(tr=tr, eq=eq)
        return _per_matrix(a, "pinv", tr, eq, _pseudo_inverse)

    roots = _refused("eigh", "eigenvalues are the roots of a polynomial")
    singular = _refused("svd", "singular values are the roots of a polynomial (the eigenvalues of A^T A)")
    qr = _refused("qr", "its factors hold square roots whose signs are LAPACK's choice")
    return {"slogdet_sign": slogdet_sign, "logabsdet": logabsdet, "cholesky": cholesky, "pinv": pinv,
            "eigh_values": roots, "eigh_vectors": roots, "svd_s": singular, "svd_u": singular,
            "svd_vt": singular, "qr_q": qr, "qr_r": qr}


def _two_argument_rules(sp, extremum) -> dict:
    """NumPy's two-argument functions beyond arithmetic."""
    return {
        # (fmax and fmin differ from maximum and minimum only at nan, which no symbol is)
        "fmax": _elementwise(extremum(sp.Max), 2),
        "fmin": _elementwise(extremum(sp.Min), 2),
        "logaddexp": _elementwise(lambda a, b: sp.log(sp.exp(a) + sp.exp(b)), 2),
        "logaddexp2": _elementwise(lambda a, b: sp.log(_power(sp.Integer(2), a)
                                                       + _power(sp.Integer(2), b), 2), 2),
        "copysign": _copysign,
    }


def _copysign(a, b, tr, eq, **_):
    """copysign(a, b): |a| where b >= 0, else -|a|.  A constant b (no symbols: a number, nan,
    an infinity) gives its sign bit, which sympy's numbers do not keep: NumPy's copysign(x, nan)
    is |x| and copysign(x, -0.0) is -|x| (and sympy cannot compare nan with 0 at all)."""
    sp, _ = _sympy()
    negative = np.signbit(np.asarray(tr.builder.values[eq.args[1]], dtype=np.float64))

    def one(a, b, neg):
        if not b.free_symbols:
            return -sp.Abs(a) if neg else sp.Abs(a)
        return sp.Piecewise((sp.Abs(a), b >= 0), (-sp.Abs(a), True))
    return np.frompyfunc(one, 3, 1)(a, b, np.broadcast_to(negative, b.shape).astype(object))


def _scan_rules() -> dict:
    """Cumulative products of the terms (cumsum is structural); the positions argsort,
    argmax and argmin choose are integers with no derivative: their traced values."""
    def traced(x, tr, eq, **_):
        value = np.asarray(tr.builder.values[eq.out], dtype=np.float64)
        out = np.empty(value.shape, dtype=object)
        for idx in np.ndindex(*value.shape):
            out[idx] = _const(float(value[idx]))
        return out

    return {
        "cumprod": lambda x, axis, **_: np.cumprod(x, axis=axis),
        "argsort": traced, "argmax": traced, "argmin": traced,
    }


def _negation(sp, cond):
    """Not cond; of an Or or And (any, all), the And or Or of the negated terms (De Morgan),
    printed flat rather than as ~(...)."""
    if isinstance(cond, (sp.Or, sp.And)):
        return (sp.And if isinstance(cond, sp.Or) else sp.Or)(*[sp.Not(c) for c in cond.args])
    return sp.Not(cond)


def _integer_and_mask_rules(sp, floor) -> dict:
    """// and % (a // b is floor(a / b) and a % b is a - b floor(a / b): floor's derivative is
    0, so d/da = 1 and d/db = -floor(a / b), as SPEC §2.5 states), and the logical masks."""
    return {
        "floor_divide": _elementwise(lambda a, b: floor(a / b), 2),
        "mod": _elementwise(lambda a, b: a - b * floor(a / b), 2),
        "logical_and": _elementwise(lambda a, b: _mask_of(sp.And(_truth(a), _truth(b))), 2),
        "logical_or": _elementwise(lambda a, b: _mask_of(sp.Or(_truth(a), _truth(b))), 2),
        "logical_not": _elementwise(lambda a: _mask_of(_negation(sp, _truth(a))), 1),
    }


# Primitives whose NumPy forward function works as it is on object arrays: pure data movement
# and linear maps (indexing, reshapes, matmul by dot products, zero-filled embeddings).
_STRUCTURAL = frozenset({"copy", "reshape", "transpose", "index", "index_put", "index_update", "index_add",
                         "concat", "broadcast_to", "sum_to", "diag", "diag_embed", "matmul",
                         "cumsum"})


def _einsum(*xs, tr, eq, subscripts, **_):
    """einsum's forward function on object arrays, with one more output axis of length 1 (a
    letter of its own on the first operand), taken away after: to a 0-d output, numpy.einsum
    of object arrays gives one expression, not an array, which the forward function's
    r.ndim does not take."""
    lhs, out = subscripts.split("->")
    ins = lhs.split(",")
    free = next(c for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in subscripts)
    ins[0] += free
    first = np.asarray(xs[0], dtype=object)[..., None]
    r = eq.prim.impl(first, *xs[1:], subscripts=",".join(ins) + "->" + out + free)
    return np.asarray(r, dtype=object)[..., 0]

#: The primitives with no sympy form, and why.  Every other primitive of the registry has one
#: (a rule in _rules, or a forward function that works on expressions): a test walks the
#: registry, so that a new primitive without a symbolic form fails it rather than a user.
NO_CLOSED_FORM = {
    "add_at": "internal: recorded by the traced backward pass of an index, never by a program",
    "adjugate": "internal: recorded by det's derivative rules, never by a program",
    "prod_others": "internal: recorded by prod's derivative rules, never by a program",
    "prod_others_jvp": "internal: the derivative of prod_others, recorded by its rules",
    "recurrence": "internal: recorded by cumprod's derivative rules, never by a program",
}


def converts(name: str) -> bool:
    """Whether the primitive called name has a sympy form (loads sympy)."""
    return name in _STRUCTURAL or name in _rules()


def _convert(tr, cut: dict | None = None) -> dict:
    """var -> object array for every var of the tape; vars in cut take the given arrays."""
    cut = cut or {}
    rules = _rules()
    names = _var_names(tr)
    env: dict = {}
    for name, var in tr.tape.inputs.items():
        env[var] = _symbols(name, tr.builder.shapes[var])
    for var, value in tr.tape.consts.items():
        value = np.asarray(value, dtype=np.float64)
        out = np.empty(value.shape, dtype=object)
        for idx in np.ndindex(*value.shape):
            out[idx] = _const(float(value[idx]))
        env[var] = out
    env.update(cut)
    memo: dict = {}
    for eq in tr.tape.equations:
        if eq.out in cut:
            continue
        name = eq.prim.name
        args = [env[a] for a in eq.args]
        if name in _STRUCTURAL:
            value = eq.prim.impl(*args, **eq.params)
        elif name in rules:
            try:
                value = rules[name](*args, tr=tr, eq=eq, **eq.params)
            except _TooManyCases as many:
                at = f" at line {eq.pos.line}, column {eq.pos.col}" if eq.pos else ""
                raise _located(UsageError(
                    f"{_SYMBOLIC}: the condition of {_where(tr, eq.out, names, eq)} compares values "
                    f"that are themselves piecewise; its closed form lists {many.cases} cases or more, "
                    f"past {FOLD_LIMIT}", eq.pos,
                    hint=f"use smaller shapes for a closed form, or drop {_SYMBOLIC}",
                    name=names.get(eq.out), option="symbolic"), tr) from None
        else:
            at = f" at line {eq.pos.line}, column {eq.pos.col}" if eq.pos else ""
            raise _located(UsageError(f"{_SYMBOLIC} cannot convert the primitive '{name}'{at} to sympy",
                                      eq.pos, hint=f"drop {_SYMBOLIC} for this program", option="symbolic"), tr)
        value = _obj(value)
        for e in value.flat:
            if _tree_size(e, memo) > EXPR_LIMIT:
                raise _located(UsageError(
                    f"{_SYMBOLIC}: the closed form of {_where(tr, eq.out, names, eq)} grows past "
                    f"{EXPR_LIMIT} terms", eq.pos,
                    hint=f"the program is too large for a closed form; drop {_SYMBOLIC}",
                    name=names.get(eq.out), option="symbolic"), tr)
        env[eq.out] = value
    return env


def to_sympy(tr) -> dict:
    """Every var of a traced tape as a NumPy object array of sympy expressions in the inputs.

    Scalars are 0-d object arrays.  Raises UsageError for programs beyond the
    documented limits or holding a primitive with no sympy counterpart.
    """
    check_size(tr)
    try:
        return _convert(tr)
    except RecursionError:
        raise _too_deep(tr) from None


# ==========================================================================
# Derivatives
# ==========================================================================


def _names_in(tr, names, which: str) -> list:
    """names, each checked against the program's names; which: the option that gave them."""
    out = []
    for n in ([names] if isinstance(names, str) else names):
        if n not in tr.tape.names:
            hint = did_you_mean(n, tr.tape.names) or f"the named values are: {listed(tr.tape.names)}"
            raise _located(UsageError(f"{option(which)} '{n}' is not a name in the program", hint=hint,
                                      name=n, option=which), tr)
        if n not in out:
            out.append(n)
    return out


class _Timeout(BaseException):
    """Raised by SIGALRM inside sympy; a BaseException so that no `except Exception` eats it."""


@contextlib.contextmanager
def _time_limit(seconds: float):
    """Interrupt the body after seconds (POSIX main thread only; elsewhere no limit).

    Yields whether the limit is armed.  A timer already running (a test
    harness's, say) is put back afterwards, less the time spent here.
    """
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield False
        return

    def expire(signum, frame):
        raise _Timeout

    start = time.monotonic()
    old_handler = signal.signal(signal.SIGALRM, expire)
    old_delay, old_interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield True
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL if old_handler is None else old_handler)
        if old_delay:
            left = max(old_delay - (time.monotonic() - start), 1e-3)
            signal.setitimer(signal.ITIMER_REAL, left, old_interval)


class _Simplifier:
    """sympy.simplify within the node and time budgets; remembers what it skipped.

    A simplification is kept only if it has no more operations than the input
    (sympy's default accepts 1.7 times as many, and skips the check for
    Piecewise results, turning ``sign(u)`` into long Piecewise forms).
    """

    def __init__(self, sp):
        self.sp = sp
        self.deadline = time.monotonic() + SIMPLIFY_SECONDS
        self.memo: dict = {}

    def __call__(self, e):
        """(expression, None) or (expression unsimplified, reason)."""
        if e.is_Atom:
            return e, None
        if _tree_size(e, self.memo) > SIMPLIFY_LIMIT:
            return e, f"larger than {SIMPLIFY_LIMIT} nodes"
        if any(p.exp.is_Number and abs(p.exp) > SIMPLIFY_MAX_EXPONENT for p in e.atoms(self.sp.Pow)):
            # sympy's trigonometric rules expand sin(x)^n into n terms, in memory and time
            return e, f"a power past {SIMPLIFY_MAX_EXPONENT} is not simplified"
        left = self.deadline - time.monotonic()
        if left <= 0:
            return e, f"the {SIMPLIFY_SECONDS:g} s simplification budget was spent"
        try:
            with _time_limit(min(left, SIMPLIFY_EACH_SECONDS)):
                s = self.sp.simplify(e, ratio=1)
                # simplify returns Piecewise forms before its own length check: check here
                return (s if self.sp.count_ops(s) <= self.sp.count_ops(e) else e), None
        except _Timeout:
            return e, f"simplifying took more than {SIMPLIFY_EACH_SECONDS:g} s"
        except MemoryError:  # (some of sympy's rules expand before they look at sizes)
            return e, "simplifying ran out of memory"


def _clean(d, sp):
    """Drop the Dirac deltas of step functions: their derivative is 0 by convention."""
    if d.has(sp.DiracDelta):
        d = d.replace(sp.DiracDelta, lambda *a: sp.S.Zero)
    return d


def _number(e, point: dict, sp) -> float:
    try:  # (substituting evaluates too: Max(0, sqrt(-1)) fails as soon as it is built)
        v = e.xreplace(point).evalf()
    except (TypeError, ValueError, ZeroDivisionError):
        return math.nan
    if v is sp.zoo:  # (complex infinity has no sign: log(0) + 1 is -inf, 1/x at 0 is either)
        return math.nan
    if v is sp.oo:
        return math.inf
    if v is -sp.oo or v == -sp.oo:
        return -math.inf
    if v is sp.nan or not v.is_number:
        return math.nan
    re, im = v.as_real_imag()
    try:
        re, im = float(re), float(im)
    except TypeError:
        return math.nan
    if im != 0 and abs(im) > 1e-14 * max(1.0, abs(re)):
        return math.nan  # complex: NumPy gives nan for a real function outside its domain
    return re


def _text(arr) -> str:
    if arr.ndim == 0:
        return str(arr[()])
    return "[" + ", ".join(_text(arr[i, ...]) for i in range(len(arr))) + "]"


def _latex_names(exprs, sp) -> dict:
    names = {}
    for e in exprs:
        for s in e.free_symbols:
            if s in names or "[" not in s.name:
                continue
            base, idx = s.name[:-1].split("[", 1)
            tex = sp.latex(sp.Symbol(base))
            if "_" in tex or "^" in tex:
                tex = "{" + tex + "}"
            names[s] = f"{tex}_{{{idx.replace(' ', '')}}}"
    return names


def _latex(arr, sp) -> str:
    names = _latex_names(arr.flat, sp)
    if arr.ndim == 0:
        return sp.latex(arr[()], symbol_names=names)
    if arr.size == 0:
        return r"\left[\right]"
    if arr.ndim == 2:
        return sp.latex(sp.Matrix(arr.tolist()), symbol_names=names)
    return sp.latex(sp.Array(arr.tolist()), symbol_names=names)


def _entry(block, value, simplify: bool, reasons: list, sp) -> dict:
    """The result for one block: expression, text and LaTeX (if small enough), value, notes."""
    notes = []
    if reasons:
        notes.append(f"{len(reasons)} of {block.size} entries shown unsimplified "
                     f"({'; '.join(sorted(set(reasons)))})")
    memo: dict = {}
    size = sum(_tree_size(e, memo) for e in block.flat)
    text = latex = None
    if size <= PRINT_LIMIT:
        text, latex = _text(block), _latex(block, sp)
    else:
        notes.append(f"the closed form has {size} nodes, more than {PRINT_LIMIT}: not printed")
    return {
        "expr": block[()] if block.ndim == 0 else block,
        "text": text,
        "latex": latex,
        "value": value,
        "simplified": simplify and not reasons,
        "note": "; ".join(notes) or None,
    }


def _exact_point(tr, full, sp) -> dict:
    """{input symbol: its value at the traced point}, exactly (a float's binary value) to
    POINT_DIGITS digits: sympy evaluates each part at its operands' precision, and at 15 a
    difference of close parts loses them all (sinc's cos(pi x)/x - sin(pi x)/(pi x^2) at
    x = 1e-9 gave -5.7e-8, not -3.3e-9)."""
    point = {}
    for var in tr.tape.inputs.values():
        for sym, val in zip(full[var].flat, np.asarray(tr.builder.values[var], dtype=np.float64).flat):
            point[sym] = sp.Float(float(val), POINT_DIGITS)
    return point


def _simplifier_for(simplify: bool, sp):
    """The simplifier of one call (a shared time budget), or one that leaves all as it is."""
    return _Simplifier(sp) if simplify else (lambda e: (e, None))


def _diff_block(y, syms, sp, simplify=None, back=None, *, tr=None, what="", limit=None):
    """dy/dsyms as an object array of shape y.shape + syms.shape, and the reasons entries
    were left unsimplified; back (if given) replaces stand-in symbols once differentiated.
    A derivative of more than limit nodes is refused (what: the derivative's name in the
    error; DERIVATIVE_LIMIT unless given), before sympy values or simplifies it, where most of
    the time would go; so are derivatives past ALL_DERIVATIVES_LIMIT nodes, or SYMBOLIC_SECONDS,
    all told (tr.derived keeps the count and the deadline from one block to the next)."""
    limit = DERIVATIVE_LIMIT if limit is None else limit
    block = np.empty(y.shape + syms.shape, dtype=object)
    reasons: list = []
    spent = [tr.derived.get(ALL_DERIVATIVES_LIMIT, 0) if tr is not None else 0]  # (this closed form's so far)
    now = time.monotonic()
    deadline = tr.derived.setdefault(SYMBOLIC_SECONDS, now + SYMBOLIC_SECONDS) if tr is not None else \
        now + SYMBOLIC_SECONDS

    def refused(grows: str) -> GradcalcError:
        return _located(UsageError(f"{_SYMBOLIC}: {grows}", option="symbolic",
                                   hint=f"the program is too large for a closed form; drop {_SYMBOLIC}"), tr)

    try:
        with _time_limit(max(deadline - now, 1e-3)):
            _fill_block(block, y, syms, sp, simplify, back, reasons, spent, limit, what, refused)
    except _Timeout:
        raise refused(f"sympy takes more than {SYMBOLIC_SECONDS:g} s over the closed forms of the "
                      "derivatives") from None
    if tr is not None:
        tr.derived[ALL_DERIVATIVES_LIMIT] = spent[0]
    return block, reasons


def _fill_block(block, y, syms, sp, simplify, back, reasons: list, spent: list, limit: int, what: str, refused):
    """_diff_block's entries, each differentiated, measured, given back its stand-ins and
    simplified (spent[0]: the nodes of the derivatives so far)."""
    memo: dict = {}
    for yi in np.ndindex(*y.shape):
        e = y[yi]
        free = e.free_symbols
        for xi in np.ndindex(*syms.shape):
            s = syms[xi]
            d = _clean(sp.diff(e, s), sp) if s in free else sp.S.Zero
            size = _tree_size(d, memo)
            spent[0] += size
            if size > limit:
                raise refused(f"the closed form of {what} grows past {limit} terms")
            if spent[0] > ALL_DERIVATIVES_LIMIT:
                raise refused(f"the closed forms of the derivatives grow past {ALL_DERIVATIVES_LIMIT} terms in all")
            if back is not None and d.free_symbols:
                d = d.xreplace(back)
            if simplify is not None:
                d, why = simplify(d)
                if why:
                    reasons.append(why)
            block[yi + xi] = d


def _finished(tr, block, point, simplify: bool, reasons: list, sp) -> dict:
    """The entry (see _entry) of a block of derivatives, valued at the point; with control
    flow, noting that it is the closed form of the path taken (SPEC §5)."""
    value = np.empty(block.shape)
    for idx in np.ndindex(*block.shape):
        value[idx] = _number(block[idx], point, sp)
    entry = _entry(block, value, simplify, reasons, sp)
    if tr.tape.guards:
        entry["note"] = "; ".join(n for n in (_path_note(tr.tape.guards), entry["note"]) if n)
    return entry


def _derivatives(tr, outs: list, wrt: list, simplify: bool, drop: int = 0) -> dict:
    """{of: {wrt: entry}} (see _entry); drop removes that many leading (size-1) axes."""
    import sympy as sp

    check_size(tr)
    names = tr.tape.names
    input_vars = set(tr.tape.inputs.values())
    full = _convert(tr)
    point = _exact_point(tr, full, sp)
    simplifier = _simplifier_for(simplify, sp)
    result: dict = {o: {} for o in outs}
    for w in wrt:
        wvar = names[w]
        if wvar in input_vars:
            env, syms, back = full, full[wvar], None
        else:
            # d/dh holding what is upstream of h fixed: h becomes symbols of its own, which
            # are replaced by h's closed form once differentiated.
            syms = _symbols(w, tr.builder.shapes[wvar])
            env = _convert(tr, {wvar: syms})
            back = dict(zip(syms.flat, full[wvar].flat))
        for o in outs:
            block, reasons = _diff_block(env[names[o]], syms, sp, simplifier, back, tr=tr,
                                         what=f"the derivative of '{o}' with respect to '{w}'")
            result[o][w] = _finished(tr, block.reshape(block.shape[drop:]), point, simplify, reasons, sp)
    return result


def _second_derivatives(tr, of: str, wrt: list, simplify: bool) -> dict:
    """{wrt_i: {wrt_j: entry}} of the scalar output of (inputs only): each first derivative
    (unsimplified) differentiated again, then simplified."""
    import sympy as sp

    check_size(tr)
    names = tr.tape.names
    full = _convert(tr)
    point = _exact_point(tr, full, sp)
    simplifier = _simplifier_for(simplify, sp)
    y = full[names[of]].reshape(())
    first = {w: _diff_block(y, full[names[w]], sp, tr=tr, limit=EXPR_LIMIT,  # (differentiated again)
                            what=f"the derivative of '{of}' with respect to '{w}', which a Hessian differentiates "
                                 f"again,")[0] for w in wrt}
    result: dict = {}
    for wi in wrt:
        result[wi] = {}
        for wj in wrt:
            block, reasons = _diff_block(first[wi], full[names[wj]], sp, simplifier, tr=tr,
                                         what=f"the second derivative of '{of}' with respect to '{wi}' and '{wj}'")
            result[wi][wj] = _finished(tr, block, point, simplify, reasons, sp)
    return result


def symbolic_gradient(tr, of: str, wrt: list, *, simplify: bool = True) -> dict:
    """Closed-form gradient of the scalar output ``of`` with respect to each of ``wrt``.

    Returns ``{wrt_name: {"expr", "text", "latex", "value", "simplified", "note"}}``:
    ``expr`` is a sympy expression (scalar wrt) or an object array of wrt's shape,
    ``text`` sympy's ``str`` (nested lists for arrays), ``latex`` sympy's LaTeX
    (both None when the closed form has more than PRINT_LIMIT nodes), ``value``
    the float64 array at the traced point, ``simplified`` whether every entry
    went through sympy.simplify, ``note`` what was skipped and why (or None).
    ``wrt`` may name intermediate values (SPEC §4).  ``value`` is computed from
    the expression shown; ``simplify=False`` skips sympy.simplify (faster, for
    ``check --symbolic``, which needs values only).
    """
    (of,) = _names_in(tr, [of], "of")
    wrt = _names_in(tr, wrt, "wrt")
    shape = tr.builder.shapes[tr.tape.names[of]]
    if math.prod(shape) != 1:
        raise _located(ShapeError(f"grad needs a scalar output, but '{of}' has shape {tuple(shape)}",
                                  tr.tape.positions.get(of), hint=f"use jacobian {_SYMBOLIC}", name=of), tr)
    try:
        # A size-1 output of shape (1,) or (1, 1) loses its axes, as in grad.
        return _derivatives(tr, [of], wrt, simplify, drop=len(shape))[of]
    except RecursionError:
        raise _too_deep(tr) from None


def symbolic_jacobian(tr, of: list, wrt: list, *, simplify: bool = True) -> dict:
    """Closed-form Jacobian blocks ``{of: {wrt: entry}}``, each of shape of.shape + wrt.shape.

    Entries are those of :func:`symbolic_gradient`.
    """
    outs = _names_in(tr, of, "of")
    wrt = _names_in(tr, wrt, "wrt")
    try:
        return _derivatives(tr, outs, wrt, simplify)
    except RecursionError:
        raise _too_deep(tr) from None


def symbolic_hessian(tr, of: str, wrt: list, *, simplify: bool = True) -> dict:
    """Closed-form Hessian blocks ``{wrt_i: {wrt_j: entry}}`` of the scalar output ``of``,
    each of shape wrt_i.shape + wrt_j.shape; ``wrt`` names inputs only (as hessian's).

    Entries are those of :func:`symbolic_gradient`.
    """
    (of,) = _names_in(tr, [of], "of")
    wrt = _names_in(tr, wrt, "wrt")
    shape = tr.builder.shapes[tr.tape.names[of]]
    if math.prod(shape) != 1:
        raise _located(ShapeError(f"hessian needs a scalar output, but '{of}' has shape {tuple(shape)}",
                                  tr.tape.positions.get(of), name=of, option="of",
                                  hint=f"select a scalar with {option('of')}, or reduce it, e.g. sum(...)"), tr)
    for w in wrt:
        if w not in tr.tape.inputs:
            raise _located(UsageError(f"hessian {_SYMBOLIC} differentiates with respect to inputs; "
                                      f"'{w}' is not one", name=w, option="wrt"), tr)
    try:
        return _second_derivatives(tr, of, wrt, simplify)
    except RecursionError:
        raise _too_deep(tr) from None


# ==========================================================================
# Without a point: the closed form alone (SPEC §5)
# ==========================================================================

def lacks_a_point(source, at) -> bool:
    """True when some input has neither a value in at nor a default: --symbolic then gives
    the closed form alone, as SPEC §5 has it for a command without --at."""
    from .run import find_inputs
    from .session import parse
    given = at or {}
    return any(i.name not in given and i.default is None for i in find_inputs(parse(source)))


def closed_form_alone(command: str, source, at, of, wrt, *, max_elements, max_steps):
    """grad's, jacobian's or hessian's Result of the closed forms only (no values: no gradient, no
    value, an empty at).  The program is traced at stand-in values (0.5, shapes guessed as
    graph does) for its structure; a program whose path depends on them is refused."""
    from .graphs import _trace_with_stand_ins
    from .results import Result
    from .run import find_inputs
    from .session import as_arrays, parse, select_names, select_output
    program = parse(source)
    try:
        tr, filled, guessed = _trace_with_stand_ins(program, as_arrays(at), max_elements, max_steps)
    except (ShapeError, ValueError_) as err:  # (the stand-ins, 0.5, are no index, count or shape)
        stood_in = [i.name for i in find_inputs(program) if i.name not in (at or {}) and i.default is None]
        if not stood_in:
            raise
        raise UsageError(f"{_SYMBOLIC} without a value for {', '.join(repr(n) for n in stood_in)}: the program "
                         f"does not run on stand-in values ({err.message})",
                         hint=f"give the point with {option('at')}", option="at") from None
    if tr.tape.guards:
        what = sorted({g.what for g in tr.tape.guards})
        raise UsageError(f"{_SYMBOLIC} without a value for {', '.join(repr(n) for n in filled)}: the path "
                         f"the program takes ({', '.join(what)}) depends on the values, and the closed "
                         "form with it",
                         hint=f"give the point with {option('at')}", option="at")
    wrt = select_names(tr, wrt, "wrt", tr.tape.inputs)
    shapes = [f"'{n}' taken as shape {tr.value(n).shape}" for n in guessed if tr.value(n).ndim]
    note = "; ".join(shapes) + " (give its value for another shape)" if shapes else None
    parts = ("text", "latex", "note")
    if command == "grad":
        out = select_output(tr, of)
        closed = {w: _with_note(e, note, parts) for w, e in symbolic_gradient(tr, out, wrt).items()}
        return Result({}, command="grad", of=out, at={}, value=None, unconnected=[], warnings=[],
                      symbolic=closed)
    if command == "hessian":
        out = select_output(tr, of)
        closed = {wi: {wj: _with_note(e, note, parts) for wj, e in row.items()}
                  for wi, row in symbolic_hessian(tr, out, wrt).items()}
        return Result({}, command="hessian", of=out, value=None, warnings=[], symbolic=closed)
    outs = [select_output(tr, None)] if of is None else select_names(tr, of, "of", ())
    closed = {o: {w: _with_note(e, note, parts) for w, e in row.items()}
              for o, row in symbolic_jacobian(tr, outs, wrt).items()}
    return Result({}, command="jacobian", of=outs, at={}, value=None, mode=None, unconnected=[],
                  warnings=[], symbolic=closed)


def _with_note(entry: dict, note: str | None, parts) -> dict:
    out = {p: entry[p] for p in parts}
    out["note"] = "; ".join(n for n in (note, entry["note"]) if n) or None
    return out
