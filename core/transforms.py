"""Reverse and forward mode over a tape.

:func:`backward` runs one VJP rule per equation, newest first; :func:`forward`
runs one JVP rule per equation, oldest first.  Traced, they record their rules
into the same builder, so what they return are tracers: their values are the
answer at the traced point, and the equations they appended are a derivative
program that can be differentiated again (a Hessian is the forward mode of the
backward pass).  Eager, they run the rules on arrays, or on the tracers of a
:class:`.batched.BatchedBuilder` whose seeds are a whole batch (every row of a
Jacobian in one pass).  No Jacobian of a primitive is ever built.
"""
from __future__ import annotations

import math

import numpy as np

from . import primitives as P
from .errors import GradcalcError
from .tape import (F64, F64_SCALAR, Builder, Tracer, _frees, all_finite, broadcast_shapes, distinct_index, has_nan,
                   squared_norm)


def fit_to_shape(c, shape: tuple):
    """Sum a broadcast cotangent down to shape, or broadcast a tangent up to it."""
    if c.shape == shape:
        return c
    if c.__class__ is np.ndarray:
        # An eager pass: a cotangent that sums down to shape is summed as sum_to's eager form
        # does (it cannot also broadcast up to it: that would need c.shape == shape).
        axes = _summed_axes(c.shape, shape)
        if axes is not None:
            return _sum_to(c, *axes, shape, c.shape)
    try:
        if broadcast_shapes(c.shape, shape) == shape:
            return P.broadcast_to(c, shape=shape)
    except ValueError:
        pass
    return P.sum_to(c, shape=shape)


_summed_axes, _sum_to = P._summed_axes, P._sum_to


def depends(equations, sources) -> set:
    """Variables with a differentiable path from any of sources (the sources included)."""
    live = set(sources)
    isdisjoint, add = live.isdisjoint, live.add  # "no argument is live", in C (live grows in place)
    for eq in equations:  # (fields by index, the arguments first: an Equation's unpacking takes
        if not isdisjoint(eq[2]):  # its iterator's path, and the fields' properties cost more)
            prim = eq[1]
            if prim.differentiable and prim.vjp is not None:
                add(eq[0])
    return live


def reaching(equations, sources) -> dict:
    """{variable: bits}: bit i set where a differentiable path leads from sources[i] to the
    variable (a source reaches itself), through the operands that derivative rules follow (not
    a where's condition: a reverse pass gives it no cotangent); variables no source reaches are
    absent.  One sweep for every source at once, so that which of many outputs depends on
    which of many inputs costs one pass over the tape, not one per output."""
    bits = {v: 1 << i for i, v in enumerate(sources)}
    get = bits.get
    for eq in equations:
        prim = eq[1]
        if not prim.differentiable or prim.vjp is None:
            continue
        reached = 0
        for i, a in enumerate(eq[2]):
            found = get(a)
            if found and prim.vjp_rule(i) is not None:
                reached |= found
        if reached:
            bits[eq[0]] = get(eq[0], 0) | reached
    return bits


def backward(builder: Builder, equations, cotangents: dict, wrt, *, eager: bool = False,
             log: list | None = None, check: bool | None = None, finite: set | None = None,
             safe_products: bool = True, fold=None) -> dict:
    """Reverse mode: cotangents {var: value} of outputs -> {wrt var: value or None}.

    A wrt variable defined by an equation receives the cotangent it has when
    the pass reaches that equation (everything upstream held fixed), and the
    pass goes on through it, so inputs upstream still get total derivatives.
    None means no differentiable path.

    Traced (default): cotangents are tracers and the rules are recorded into
    builder, so the pass can be re-run batched or differentiated again.
    Eager: cotangents are arrays and the rules run directly on the traced
    values, which is all a first-order gradient needs.  ``log`` receives
    (forward equation, first, end) spans of the equations each VJP recorded.
    ``check`` (default: the builder's setting) warns about the first rule that
    turns finite values into a non-finite derivative.  ``finite`` (eager passes), a set,
    receives the variables whose cotangent is known finite without a look at it: a
    single large matrix product whose factors' norms certify it (see
    :func:`_finite_product`).  ``safe_products=False`` (eager passes) uses the rules whose
    matrix products skip the look for 0 * inf terms (a primitive's ``plain_vjp``): for a
    pass that is re-run with safe products when any result is not finite.  Values that no
    rule reads may have been freed while the program was traced (``Builder.release_unread``).
    ``fold`` (an eager batched pass without warnings: ``batched.VJP_FOLDS``), {prim: fold(ct, g,
    eq, live, shapes)}, adds an equation's operands' cotangents into ct as its rules would,
    returning True, or False and the rules run.
    """
    wanted = set(wrt)
    ct = dict(cotangents)
    if eager:
        for v, c in ct.items():
            if c.__class__ is np.ndarray and c.ndim == 0 and c.dtype is F64:
                # a seed with no axes as the tape keeps such a value: a NumPy scalar (the same
                # bits), so that the inline scalar rules take the pass from its first equation
                ct[v] = c[()]
    saved = builder.check_finite
    check = saved if check is None else check
    builder.check_finite = False
    fold = fold if eager and not check and log is None else None
    found = _reverse(builder, equations, ct, wanted, eager, log, check, finite, safe_products, fold)
    builder.pos = None
    builder.check_finite = saved
    for v in wanted:
        if v not in found:
            found[v] = ct.get(v)
        if found[v].__class__ is float:  # (a sum the inline rules made: the NumPy scalar of its bits)
            found[v] = F64_SCALAR(found[v])
    return found


def _reverse(builder: Builder, equations, ct: dict, wanted: set, eager: bool, log, check: bool,
             finite, safe_products: bool, fold=None) -> dict:
    """The loop of :func:`backward`: runs the VJP rules newest first, summing cotangents into
    ct (consumed as it goes); returns {wanted var: its cotangent} for each one an equation defines.

    An eager pass without warnings (the usual first pass) runs the commonest scalar rules inline
    (see _SCALAR_OPS): on a scalar program the call of a rule, and the dispatch of the primitives
    it calls, cost ten times their arithmetic.  They skip the look at which operands lead to a
    wanted variable (live): a contribution to one that does not is never read, and costs less
    than depends()'s pass over the tape, run only when a registry rule is first needed."""
    found = {}
    values = builder.values
    traced = not eager or check  # what reads builder.pos: recorded equations, warnings
    inline = _SCALAR_OPS if eager and not check else {}
    live = None if inline else depends(equations, wanted)
    pop, get = ct.pop, ct.get
    owned = {} if eager else None  # see _accumulate
    for eq in reversed(equations):
        out, prim, ea, params, loc = eq
        g = pop(out, None)
        if out in wanted:
            found[out] = g
        if g is None:
            continue
        kind = g.__class__
        op = inline.get(prim) if kind is float or kind is F64_SCALAR else None
        if op is not None:
            # The registry's rule, written out: the same operations in the same order (safe_mul's
            # "0 where g or d is 0 and g * d is nan" as an if) on Python floats, whose + - * / are
            # NumPy's scalars' IEEE operations (tests/test_engine.py compares the bits).
            x = values[ea[0]]
            if x.__class__ is F64_SCALAR:
                if kind is not float:
                    g = _float(g)
                if op <= _DIV:  # two operands
                    y = values[ea[1]]
                    if y.__class__ is F64_SCALAR:
                        a, b = ea
                        if op == _ADD:
                            ca = cb = g
                        elif op == _MUL:
                            x, y = _float(x), _float(y)
                            ca, cb = g * y, g * x
                            if ca != ca and (g == 0 or y == 0):
                                ca = 0.0
                            if cb != cb and (g == 0 or x == 0):
                                cb = 0.0
                        else:
                            ca, cb = _div_rule(g, values[out], y)
                        prev = get(a)  # (a first, then b: x * x sums in the registry's order)
                        ct[a] = ca if prev is None else prev + ca
                        prev = get(b)
                        ct[b] = cb if prev is None else prev + cb
                        if finite:
                            finite.difference_update(ea)
                        continue
                elif op <= _COPY or not params or params["p"] == 2.0:  # one operand
                    a = ea[0]
                    if op == _NEG:
                        c = -g
                    elif op == _COPY:
                        c = g
                    else:  # (sin's cos(x) here: the commonest, without a call)
                        d = _cos_float(x) if op == _SIN else _float(_scalar_derivative(op, values[out], x, params))
                        c = g * d
                        if c != c and (g == 0 or d == 0):
                            c = 0.0
                    prev = get(a)
                    ct[a] = c if prev is None else prev + c
                    if finite:
                        finite.discard(a)
                    continue
        if g.__class__ is float:
            g = F64_SCALAR(g)  # (the registry's rules take NumPy's scalar)
        if live is None:
            live = depends(equations, wanted)
        if traced:
            builder.pos = loc  # for the equations the rules record, and for warnings
        if fold is not None:
            made = fold.get(prim)
            if made is not None and made(ct, g, eq, live, builder.shapes):
                if finite:
                    finite.difference_update(ea)  # (a sum of contributions is not certified)
                continue
        _vjp_step(builder, eq, g, ct, live, eager, log, check, finite, safe_products, owned)
    return found


# The primitives _reverse runs inline on scalars: two operands first (op <= _DIV), then the
# two whose rule needs no derivative, then those whose rule is safe_mul(g, derivative).
_ADD, _MUL, _DIV, _NEG, _COPY, _SIN, _COS, _EXP, _LOG, _SQRT, _TANH, _POW2 = range(12)
_SCALAR_OPS = {P.add: _ADD, P.mul: _MUL, P.div: _DIV, P.neg: _NEG, P.copy: _COPY, P.sin: _SIN,
               P.cos: _COS, P.exp: _EXP, P.log: _LOG, P.sqrt: _SQRT, P.tanh: _TANH, P.pow_const: _POW2}
_float = float
_cos = np.cos


def _cos_float(x) -> float:
    """cos(x) for sin's inline rule, as a Python float with NumPy's bits: on this build NumPy's
    float64 cos loop calls the C library's cos, which math.cos calls too (gdb: DOUBLE_cos_X86_V4
    and math_1 reach glibc's __cos_fma; tests/test_engine.py compares them), at a sixth of the
    cost on a scalar.  math refuses an infinity, where NumPy gives nan."""
    try:
        return _math_cos(x)
    except ValueError:
        return _float(_cos(x))


_math_cos = math.cos


def _div_rule(g: float, ans, y) -> tuple:
    """The inline rule of x / y (see _reverse): safe_div(g, y) and -safe_mul(g, ans / y), as
    Python floats.  A division by zero, which Python refuses, is done on NumPy's scalars."""
    if y == 0:
        d = ans / y
        ca, cb = F64_SCALAR(g) / y, g * d
    else:
        y = _float(y)
        d = _float(ans) / y
        ca, cb = g / y, g * d
    if ca != ca and g == 0:
        ca = 0.0
    if cb != cb and (g == 0 or d == 0):
        cb = 0.0
    return _float(ca), -_float(cb)


def _scalar_derivative(op: int, ans, x, params):
    """The derivative a unary primitive's rule multiplies g by, as the registry computes it on
    a NumPy scalar (cos(x) is np.cos(x) there; x^2's is 2.0 * x)."""
    if op == _SIN:
        return np.cos(x)
    if op == _COS:
        return -np.sin(x)
    if op == _EXP:
        return ans
    if op == _LOG:
        return 1 / x
    if op == _SQRT:
        return 0.5 / ans
    if op == _TANH:
        return 1 - ans * ans
    return params["p"] * x  # _POW2: x^p with p == 2


def _vjp_step(builder: Builder, eq, g, ct: dict, live: set, eager: bool, log, check: bool,
              finite, safe_products: bool, owned: dict | None = None) -> None:
    """One equation of :func:`_reverse`, by the registry's rules: adds the cotangents of its
    live operands into ct (``owned``: see :func:`_accumulate`)."""
    out, prim, ea, params, _ = eq
    if not prim.differentiable:
        return
    if prim is _INDEX and ea[0] in live:
        if owned is not None:
            if log is None and _scatter(ct.get(ea[0]), g, params["idx"], ea[0], owned):
                # (no warning is lost: x[idx]'s cotangent is finite wherever g is)
                if finite:
                    finite.discard(ea[0])  # (a sum of contributions is not certified)
                return
        elif _added_at(builder, ct, g, params["idx"], ea[0], log, eq):
            if finite:
                finite.discard(ea[0])
            return
    values = builder.values
    # The rules' positional arguments (g, ans, *args) as one tuple, passed on as it is.
    if prim.variadic and prim.reads == ():  # (rules of any number of operands that read
        # none: without them, each of n calls costs O(1), not O(n): a concat of 16,000 scalars)
        head = (g, values[out] if eager else Tracer(builder, out))
    elif eager:  # _operands, inlined, and unrolled for one or two arguments
        n = len(ea)
        if n == 2:
            head = (g, values[out], values[ea[0]], values[ea[1]])
        elif n == 1:
            head = (g, values[out], values[ea[0]])
        else:
            head = (g, values[out], *map(values.__getitem__, ea))
    else:
        head = (g, *_operands(builder, eq, eager))
    first = len(builder.equations) if log is not None else 0
    rules = None if prim.variadic else prim.vjp  # rules[i] is prim.vjp_rule(i), without a call
    if not safe_products and prim.plain_vjp is not None:
        rules = prim.plain_vjp
    shapes = builder.shapes
    for i, a in enumerate(ea):
        if a not in live:
            continue
        rule = prim.vjp_rule(i) if rules is None else rules[i]
        if rule is None:
            continue
        try:
            c = rule(*head, **params) if params else rule(*head)
            shape = shapes[a]
            if c.shape != shape:  # fit_to_shape returns c as it is otherwise
                c = fit_to_shape(c, shape)
        except GradcalcError as err:
            err.pos = err.pos or eq.pos
            raise
        if check and not (type(c) is np.float64 and math.isfinite(c)):  # (a finite scalar: no note)
            _note_nonfinite(builder, eq, g, c)
        prev = ct.get(a)
        if finite is not None:
            if prim is _MATMUL and prev is None and _finite_product(c, g, head[3 - i]):
                finite.add(a)
            elif finite:
                finite.discard(a)  # a sum of contributions is not certified
        ct[a] = c if prev is None else _accumulate(prev, c, a, owned)
    if log is not None:
        log.append((eq, first, len(builder.equations)))


_MATMUL = P.matmul
_INDEX = P.index
_add = np.add


def _accumulate(prev, c, a, owned: dict | None):
    """prev + c: a variable's cotangent so far plus one more contribution.

    On an eager pass (``owned``, a dict), a sum the pass made is written into on the next
    contribution: ``owned[a]`` is (the id of the last sum made for a, which only ct holds
    until the variable's equation takes it; see _scatter for the second item).  A rule may
    hand its cotangent on as it is, so a contribution itself, or a seed, is never written
    into.  The same additions in the same order (np.add(prev, c, out=prev) is prev + c, bit
    for bit, on two elements or more), without an array made for each: a weight matrix
    shared by the steps of a loop gets one contribution a step.  An id, not the array:
    holding the array would keep every sum alive until the pass ends (W8: 32 KB a step);
    the id is compared only while ct holds that array (a's equation takes it last), so it
    cannot name another one."""
    if owned is None:
        return prev + c
    mark = owned.get(a)
    if mark is not None and mark[0] == id(prev) and c.dtype is F64 and c.shape == prev.shape and prev.size > 1:
        # (not one element: there NumPy's in-place add keeps c's nan, sign bit included, where
        # prev + c keeps prev's; from two elements on, and for strided or broadcast c, both
        # keep prev's: checked up to 4,096 elements)
        if mark[1] is not None:
            owned[a] = (mark[0], None)  # (c may hold -0.0 anywhere: see _scatter)
        return _add(prev, c, prev)  # (out given by position: the keyword costs a third of a small add)
    total = prev + c
    if total.__class__ is np.ndarray and total.dtype is F64:
        owned[a] = (id(total), None)
    else:
        owned.pop(a, None)
    return total


def _scatter(prev, g, idx: tuple, a, owned: dict) -> bool:
    """Add the cotangent g of x[idx] into prev, x's cotangent so far, where prev is a sum this
    pass made (see _accumulate) and idx takes integers and slices alone; False, doing nothing,
    otherwise (the rule then makes its array of zeros and _accumulate adds it).

    The same bits as prev + index_put(g, idx) in O(g.size), not O(prev.size): a loop reading
    v[i] once a step would otherwise add an array of v's size a step.  Outside idx that sum
    adds +0.0, which changes only -0.0 (to +0.0; x + y is -0.0 only where both are).  So
    ``owned[a][1]`` records where prev may still hold a -0.0 that those additions would have
    made +0.0: None (anywhere, after a dense sum), else the previous scatter's idx; those
    places get their +0.0 added here, and an add of +0.0 keeps what any other value is
    (a nan's sign and payload included)."""
    mark = owned.get(a)
    if mark is None or mark[0] != id(prev) or g.dtype is not F64 or prev.dtype is not F64 or prev.size <= 1:
        return False
    if not distinct_index(idx):
        return False
    region = prev[idx]
    if has_nan(g) and has_nan(region):
        # (of two nans, a sum keeps one by where the dense sum's SIMD loop meets them: its
        # body keeps the first operand's sign bit, its tail the second's)
        return False
    total = _add(region, P.put_value(g, idx))  # (before the +0.0 below: at idx the sum adds g alone)
    loose = mark[1]
    if loose is None:
        _add(prev, 0.0, prev)
    else:
        prev[loose] += 0.0
    prev[idx] = total
    owned[a] = (mark[0], idx)
    return True


def _added_at(builder: Builder, ct: dict, g, idx: tuple, a, log, eq) -> bool:
    """A traced pass: record x's cotangent so far plus that of x[idx] as one add_at equation (the
    same value as the rule's index_put and the sum of the two), where idx takes integers and
    slices alone and x has a cotangent already; False, recording nothing, otherwise.  A pass
    over the recorded equations (a Hessian's, batched) can then add in place, where a sum of
    arrays of zeros cost O(n) a read of a loop over n elements (batched.JVP_FOLDS)."""
    prev = ct.get(a)
    if prev.__class__ is not Tracer or g.__class__ is not Tracer or not distinct_index(idx):
        return False
    first = len(builder.equations)
    ct[a] = P.add_at(prev, g, idx=idx, shape=builder.shapes[a])
    if log is not None:
        log.append((eq, first, len(builder.equations)))
    return True


def _finite_product(c, g, other) -> bool:
    """True when c, a matrix product of g and other (a matmul VJP), is certainly finite: every
    entry is a dot product of a row of one with a column of the other, bounded by the
    product of their Frobenius norms (Cauchy-Schwarz; rounding adds a factor of 1 + k*eps,
    and no product of entries overflows below that bound).  Finite squared norms mean
    finite factors, so no nan can arise.  Used only where c is larger than g and other
    together, so that the two norms cost less than a look at c (the 2000×2000 gradient of
    a weight matrix: 0.1 ms instead of 0.85 ms)."""
    if c.size <= g.size + other.size or c.dtype is not F64 or g.dtype is not F64 or other.dtype is not F64:
        return False
    g2, o2 = squared_norm(g), squared_norm(other)
    return math.isfinite(g2) and math.isfinite(o2) and math.sqrt(g2) * math.sqrt(o2) < 1e300


def forward(builder: Builder, equations, tangents: dict, *, eager: bool = False,
            check: bool | None = None, describe=None, keep=None, fold=None, free=None) -> dict:
    """Forward mode: tangents {var: value} of inputs -> tangents of every reached variable.

    Traced or eager, as for :func:`backward`; ``describe(eq)`` names an equation
    in non-finite warnings (default: "the derivative of 'prim'").  With ``keep`` (the
    variables wanted afterwards), each other tangent is dropped after its last use, so that
    an eager pass on a batch of tangents holds only what is live (see :mod:`.batched`);
    ``free``, those variables equation by equation, as :func:`needed_and_frees` gives them
    with the equations (then keep is not needed).
    ``fold`` (an eager batched pass: ``batched.JVP_FOLDS``), {prim: fold(tangents, params,
    args, values, dying)}, gives an equation's tangent where it makes, without running the rules,
    what they would make; None where it does not, and the rules run (dying: the variables whose
    tangents no later equation reads, when known: a fold may write into theirs).  Without one, a
    traced pass records with _recording_folds; ``fold={}`` runs the rules alone.
    """
    tan = dict(tangents)
    get = tan.get
    shapes = builder.shapes
    values = builder.values
    saved = builder.check_finite
    check = saved if check is None else check
    builder.check_finite = False
    if free is None and keep is not None:
        free = _frees(equations, keep)
    folds = fold if fold is not None else _NO_FOLDS if eager else _recording_folds()
    for i, eq in enumerate(equations):
        if free is not None and i:
            for v in free[i - 1]:  # (those of the equation before: this loop goes on early)
                tan.pop(v, None)
        out, prim, ea, params, loc = eq  # (unpacked: cheaper than the fields' properties)
        if not prim.differentiable:
            continue
        # The arguments' tangents, unrolled for one or two arguments (as in backward).
        n = len(ea)
        if n == 1:
            ts = (get(ea[0]),)
            if ts[0] is None:
                continue
        elif n == 2:
            ts = (get(ea[0]), get(ea[1]))
            if ts[0] is None and ts[1] is None:
                continue
        else:
            ts = [get(a) for a in ea]
            if all(t is None for t in ts):
                continue
        builder.pos = loc
        total = None
        made = folds.get(prim)
        if made is not None:
            try:
                total = made(ts, params, ea, values, free[i] if free is not None else ())
            except GradcalcError as err:
                err.pos = err.pos or eq.pos
                raise
        if total is None:
            total = _jvp_rules(builder, eq, ts, eager)
        if total is not None:
            shape = shapes[out]
            if total.shape != shape:  # fit_to_shape returns total as it is otherwise
                total = fit_to_shape(total, shape)
            tan[out] = total
            if check:
                _note_nonfinite(builder, eq, None, total, describe)
    builder.pos = None
    builder.check_finite = saved
    return tan


def _jvp_rules(builder: Builder, eq, ts, eager: bool):
    """The sum of the JVP rules' tangents for equation eq, its operands' tangents ts (None for
    an operand without one); None when no rule gives one."""
    out, prim, ea, params, _ = eq
    # The rules' arguments after the tangent (_operands, inlined for an eager pass).
    if eager:
        values = builder.values
        n = len(ea)
        if n == 1:
            rest = (values[out], values[ea[0]])
        elif n == 2:
            rest = (values[out], values[ea[0]], values[ea[1]])
        else:
            rest = (values[out], *map(values.__getitem__, ea))
    else:
        rest = _operands(builder, eq, eager)
    if prim.variadic:  # (one rule for every operand: see Primitive.jvp)
        try:
            return prim.jvp(ts, *rest, **params)
        except GradcalcError as err:
            err.pos = err.pos or eq.pos
            raise
    rules = prim.jvp
    if rules is None:
        return None
    total = None
    for k, t in enumerate(ts):  # (k: the operand)
        if t is None:
            continue
        rule = rules[k]
        if rule is None:
            continue
        try:
            c = rule(t, *rest, **params) if params else rule(t, *rest)
        except GradcalcError as err:
            err.pos = err.pos or eq.pos
            raise
        total = c if total is None else total + c
    return total


_NO_FOLDS: dict = {}  # (forward without folds: never mutated)


def _recording_folds() -> dict:
    """forward's folds for a recorded pass (plot's), made for each pass.  An index update's
    tangent is recorded as one update of x's tangent, index_update(t_x, 0.0 + t_v), where the
    rules record index_update(t_x, 0.0) + index_update(zeros, t_v): two arrays of x's size and
    their sum a step, so that a plot of a loop filling n elements, z[i] = sin(a*i), was O(n^2);
    an update of a tangent the pass made is written in place (tape.eval_equations).  The same
    bits: the rules' sum adds 0.0 + t_v on the selection and +0.0 off it, which turns a -0.0 of
    t_x into +0.0; that sum, t_x + 0.0, is recorded before the first update of a chain only (what
    an update records holds no -0.0)."""
    clean: set = set()  # the tangents this pass's updates made

    def update(ts, params, args, values, dying=()):
        t_x, t_v = ts
        if t_x.__class__ is not Tracer or t_v.__class__ is not Tracer:
            return None  # (one tangent: the rules record no sum)
        if t_x.var not in clean:
            t_x = t_x + 0.0
        made = P.index_update(t_x, 0.0 + t_v, idx=params["idx"])
        clean.add(made.var)
        return made
    return {P.index_update: update}


def _operands(builder: Builder, eq, eager: bool) -> tuple:
    """(result, *arguments) of an equation, as arrays (eager) or as tracers (traced): the
    arguments its rules take after the cotangent or tangent."""
    if eager:
        values = builder.values
        return (values[eq.out], *map(values.__getitem__, eq.args))
    args = eq.args
    n = len(args)  # unrolled for one or two arguments (a comprehension costs more)
    if n == 2:
        return Tracer(builder, eq.out), Tracer(builder, args[0]), Tracer(builder, args[1])
    if n == 1:
        return Tracer(builder, eq.out), Tracer(builder, args[0])
    return (Tracer(builder, eq.out), *[Tracer(builder, a) for a in args])


def value_of(x):
    """The array of a tracer, or the array itself."""
    return x.value if type(x) is Tracer else x


def _note_nonfinite(builder: Builder, eq, g, c, describe=None):
    """Warn when a rule turns finite input into a non-finite derivative."""
    if all_finite(value_of(c)) or (g is not None and not all_finite(value_of(g))):
        return
    what = describe(eq) if describe else f"the derivative of '{builder.op_name(eq.prim, eq.loc)}'"
    builder.note_nonfinite(what, value_of(c))


def needed(equations, outputs) -> list:
    """The equations that outputs depend on, in order: a recorded pass also computes
    values nobody reads (the tangent of the forward output, in a Hessian), which a
    batched re-run would pay for many times over."""
    live = set(outputs)
    kept = []
    for eq in reversed(equations):
        if eq.out in live:
            kept.append(eq)
            live.update(eq.args)
    kept.reverse()
    return kept


def needed_and_frees(equations, outputs) -> tuple:
    """(kept, free): the equations outputs depend on, in order (:func:`needed`), and for each
    of them the variables whose last use among them it is, outputs excepted (forward's
    ``free``: what ``keep=outputs`` frees), found in one walk back instead of two passes.
    (Every kept equation's result is read by a later one or is an output: none is dropped
    where it is made.)"""
    live = set(outputs)  # also: the variables read after the equation at hand
    kept, free = [], []
    for eq in reversed(equations):
        if eq[0] in live:  # (eq.out: eq[0] costs less than the field's property)
            kept.append(eq)
            last = []
            for a in eq[2]:  # (eq.args)
                if a not in live:
                    live.add(a)
                    last.append(a)
            free.append(last)
    kept.reverse()
    free.reverse()
    return kept, free


def seeded(equations, seeds) -> list:
    """The equations that depend on the seeds, in order.  The others need not run again in
    a batched pass: their values, computed when they were traced, are already the answer."""
    live = set(seeds)
    out = []
    for eq in equations:
        if not live.isdisjoint(eq.args):
            live.add(eq.out)
            out.append(eq)
    return out


def largest_batched(equations, seeds, shapes) -> int:
    """The largest logical size among the seeds and the values the equations compute (for
    equations that all depend on the seeds, as :func:`seeded` returns them: the values that
    carry the batch axis)."""
    sizes = [math.prod(shapes[v]) for v in seeds]
    sizes += [math.prod(shapes[eq.out]) for eq in equations]
    return max(sizes, default=1)


def jacobian_row(rows, yshape: tuple, xshapes: list) -> list:
    """rows_to_jacobian of several inputs side by side (rows: one per element of each input, in
    order) -> a block of shape yshape + xshape for each, made by one transpose of all the rows: a
    Hessian of n scalar inputs has n² blocks, one slice each."""
    sizes = [math.prod(xshape) if xshape else 1 for xshape in xshapes]
    rows = np.asarray(rows).reshape((sum(sizes),) + tuple(yshape))
    columns = rows.transpose((*range(1, rows.ndim), 0))
    blocks, start = [], 0
    for xshape, k in zip(xshapes, sizes):
        if xshape:
            blocks.append(columns[..., start:start + k].reshape(tuple(yshape) + tuple(xshape)))
        else:  # (a scalar input's column, one index where a slice and a reshape cost twice as much,
            # n² times for n scalar inputs; [start, ...] of a vector is a 0-d array, not a scalar)
            blocks.append(columns[..., start] if yshape else columns[start, ...])
        start += k
    return blocks


def rows_to_jacobian(rows, yshape: tuple, xshape: tuple) -> np.ndarray:
    """Rows of a batched pass, one per element of x (x.size rows of y.shape), as the Jacobian
    block of shape y.shape + x.shape (the layout the seeds of batched.BatchedBuilder.seeds make)."""
    return jacobian_row(rows, yshape, [xshape])[0]
