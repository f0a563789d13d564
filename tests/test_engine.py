"""The engine gives the same bits whichever specialisation runs.

A scalar program runs on NumPy scalars, with the commonest rules written out for them (see
transforms._SCALAR_OPS); the same program on 1-element arrays takes the registry's rules on
arrays.  Values, gradients, warnings and errors must not depend on which ran: random programs
(hypothesis) are run both ways and compared bit for bit (every nan counts as equal to every
other nan; -0.0 and 0.0 differ).  Expected values come from the other specialisation, not from
a formula: what is tested is that the two agree exactly.  Closed forms of W7's kind are checked
beside (a loop's gradient against a reverse sweep written by hand).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gradcalc
from gradcalc.errors import GradcalcError
from gradcalc.lower import trace
from gradcalc.transforms import backward

_UNARY = ("sin", "cos", "exp", "log", "sqrt", "tanh", "abs", "sigmoid")
_BINARY = ("+", "-", "*", "/")
# values that reach every branch of the rules: ordinary ones, more often, and zeros (the
# zero-cotangent rule), negatives (log, sqrt: nan), huge and tiny ones (overflow: inf, then inf * 0)
_VALUES = (0.3, -1.5, 2.0, 7.25, 1.1, -0.6, 0.0, -0.0, 1e-300, 1e300, -1e308)
_ORDINARY = _VALUES[:6]
# node kinds, the commoner more often: a name, a number, f(e), -e, e^p, e op e
_KINDS = ("name",) * 4 + ("num", "unary", "unary", "neg", "pow") + ("binary",) * 4


def _expr(draw, names, depth):
    kind = draw(st.sampled_from(_KINDS if depth < 3 else _KINDS[:5]))
    if kind == "name":
        return draw(st.sampled_from(names))
    if kind == "num":
        return draw(st.sampled_from(("0", "1", "0.5", "2", "1e308", "3.25")))
    if kind == "unary":
        return f"{draw(st.sampled_from(_UNARY))}({_expr(draw, names, depth + 1)})"
    if kind == "neg":
        return f"-{_expr(draw, names, depth + 1)}"
    if kind == "pow":
        return f"({_expr(draw, names, depth + 1)})^{draw(st.sampled_from(('2', '3', '0.5', '1', '0')))}"
    op = draw(st.sampled_from(_BINARY))
    return f"({_expr(draw, names, depth + 1)} {op} {_expr(draw, names, depth + 1)})"


@st.composite
def scalar_programs(draw):
    """(source, point): inputs x, y, z, straight-line statements and perhaps a loop; the output
    reads every name, so that every statement's derivative counts."""
    names = ["x", "y", "z"]
    lines = ["input x, y, z"]
    for k in range(draw(st.integers(1, 6))):
        if draw(st.integers(0, 4)) == 0:  # a loop that updates an existing name
            target = draw(st.sampled_from(names))
            body = _expr(draw, names + ["i"], 1)
            lines.append(f"for i in range({draw(st.integers(0, 4))}) {{ {target} = {body} }}")
            continue
        name = f"v{k}"
        lines.append(f"{name} = {_expr(draw, names, 0)}")
        names.append(name)
    lines.append(f"out = {_expr(draw, names, 1)} * {' + '.join(names)}")
    edges = draw(st.booleans())
    point = {n: draw(st.sampled_from(_VALUES if edges else _ORDINARY)) for n in ("x", "y", "z")}
    return "\n".join(lines), point


def _run(fn, src, at, **options):
    """(result, None) or (None, the error's text): a program may fail, the same way both ways."""
    try:
        return fn(src, at=at, **options), None
    except GradcalcError as err:
        return None, str(err)


def _same_bits(a, b) -> bool:
    a = np.asarray(a, dtype=np.float64).reshape(-1)
    b = np.asarray(b, dtype=np.float64).reshape(-1)
    nan = np.isnan(a)
    return a.shape == b.shape and bool(np.array_equal(nan, np.isnan(b))) and \
        bool(np.array_equal(a[~nan].view(np.int64), b[~nan].view(np.int64)))


def _first_pass(src, at):
    """The eager pass grad runs first (no warnings, plain products), whose results a second
    pass with the registry's rules replaces when one is not finite: compared on its own, so
    that the second pass cannot hide a difference."""
    with np.errstate(all="ignore"):
        tr = trace(gradcalc.parse(src), {k: np.asarray(v, dtype=np.float64) for k, v in at.items()})
        out = tr.tape.names[tr.tape.output]
        found = backward(tr.builder, tr.tape.equations, {out: np.ones(tr.builder.shapes[out])},
                         list(tr.tape.inputs.values()), eager=True, check=False, safe_products=False)
    return [found[v] for v in tr.tape.inputs.values()]


def _compare(fn, src, point, **options):
    scalar, err_s = _run(fn, src, point, **options)
    arrays, err_a = _run(fn, src, {k: [v] for k, v in point.items()}, **options)
    assert err_s == err_a, src
    if scalar is None:
        return
    assert scalar.warnings == arrays.warnings, src
    if fn is gradcalc.grad:
        assert _same_bits(scalar.value, arrays.value), src
        first_s, first_a = _first_pass(src, point), _first_pass(src, {k: [v] for k, v in point.items()})
        for s, a in zip(first_s, first_a):
            assert (s is None) == (a is None) and (s is None or _same_bits(s, a)), (src, s, a)
    got_s, got_a = _leaves(scalar), _leaves(arrays)
    assert [path for path, _ in got_s] == [path for path, _ in got_a], src
    for (path, s), (_, a) in zip(got_s, got_a):
        assert (s is None) == (a is None) and (s is None or _same_bits(s, a)), (src, path, s, a)


def _leaves(result, path=()) -> list:
    """(path, value) for every value in a result, a Hessian's and a Jacobian's blocks (dicts of
    dicts) included."""
    if not isinstance(result, dict):
        return [(path, result)]
    return [leaf for name in result for leaf in _leaves(result[name], path + (name,))]


@settings(max_examples=250, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(scalar_programs())
def test_scalar_programs_agree_with_one_element_arrays(case):
    src, point = case
    _compare(gradcalc.grad, src, point)


@settings(max_examples=40, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(scalar_programs())
def test_scalar_values_agree_with_one_element_arrays(case):
    src, point = case
    _compare(gradcalc.evaluate, src, point)


@settings(max_examples=80, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(scalar_programs())
def test_scalar_hessians_agree_with_one_element_arrays(case):
    """The forward pass over the backward pass: a scalar's seed is a band as a vector's is, so
    that an entry no tangent reaches is +0 both ways (a dense seed made -0 of -sin(y) * 0)."""
    src, point = case
    _compare(gradcalc.hessian, src, point)


@pytest.mark.parametrize("mode", ["fwd", "rev"])
@settings(max_examples=40, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(scalar_programs())
def test_scalar_jacobians_agree_with_one_element_arrays(mode, case):
    """Forward mode seeds the inputs; reverse mode each output: every assigned name is one."""
    src, point = case
    outputs = [line.split(" = ")[0] for line in src.splitlines()[1:] if not line.startswith("for ")]
    _compare(gradcalc.jacobian, src, point, of=outputs, mode=mode)


@pytest.mark.parametrize(("src", "point"), [
    ("sin(y) + cos(z)", {"y": 0.7, "z": -0.4}),  # the off-diagonal zeros: +0, not -0
    ("x * y^2 - exp(-z) * x", {"x": -1.5, "y": 0.0, "z": 2.0}),
    ("a = sin(y) * z\nb = cos(z)\nc = y / z", {"y": 0.7, "z": -0.4}),
])
def test_hessian_and_jacobian_zero_signs_agree(src, point):
    if "\n" not in src:
        _compare(gradcalc.hessian, src, point)
    for mode in ("fwd", "rev"):
        _compare(gradcalc.jacobian, src, point, of=["a", "b", "c"] if "\n" in src else None, mode=mode)


@pytest.mark.parametrize("src", [
    "y = x * 0 + log(x)",  # 0 * (1/x) at x = 0: the zero cotangent rule
    "y = exp(x)^2 * 0",  # inf * 0 in the backward pass
    "y = exp(x) * x * 0 + x * exp(x) * 0 + exp(x) / exp(x) * 0 + x / exp(-x) * 0",  # a zero cotangent times an infinite factor
    "y = -(sin(exp(x)) + cos(exp(x))) * 0 + tanh(exp(x)) * 0 + log(x) * 0",
    "y = sqrt(x) + x / x",  # 0.5 / 0 and 0/0
    "y = tanh(x) * cos(x) - sin(x) / 3",
])
@pytest.mark.parametrize("x", [0.0, -0.0, 800.0, -2.0, 0.75])
def test_edge_points_agree(src, x):
    _compare(gradcalc.grad, src, {"x": x})


def test_a_loop_agrees_with_a_reverse_sweep_by_hand():
    """The pendulum of the benchmark (W7), 500 steps, against its adjoint written out."""
    src = ("input th0, om0, g, c\nth = th0\nom = om0\n"
           "for i in range(500) {\n  a = -g * sin(th) - c * om\n  th = th + 0.001 * om\n"
           "  om = om + 0.001 * a\n}\nE = 0.5 * om^2 + g * (1 - cos(th))")
    th0, om0, g, c, h = 1.0, 0.5, 9.81, 0.3, 0.001
    ths, oms = [th0], [om0]
    for _ in range(500):
        th, om = ths[-1], oms[-1]
        ths.append(th + h * om)
        oms.append(om + h * (-g * math.sin(th) - c * om))
    dth, dom, dg, dc = g * math.sin(ths[-1]), oms[-1], 1 - math.cos(ths[-1]), 0.0
    for i in range(499, -1, -1):
        da = h * dom
        dg -= da * math.sin(ths[i])
        dc -= da * oms[i]
        dth, dom = dth - da * g * math.cos(ths[i]), dom + h * dth - da * c
    r = gradcalc.grad(src, at={"th0": th0, "om0": om0, "g": g, "c": c})
    np.testing.assert_allclose([r["th0"], r["om0"], r["g"], r["c"]], [dth, dom, dg, dc], rtol=1e-12, atol=1e-15)
    _compare(gradcalc.grad, src, {"th0": th0, "om0": om0, "g": g, "c": c})


def _tape_and_values(src, at):
    """Everything a trace records: each equation with its position, the values, the warnings."""
    with np.errstate(all="ignore"):
        try:
            tr = trace(gradcalc.parse(src), {k: np.asarray(v, dtype=np.float64) for k, v in at.items()})
        except GradcalcError as err:
            return str(err)
    b = tr.builder
    return (str(tr.tape), [eq.loc for eq in tr.tape.equations], list(b.warnings),
            {n: b.values[v].tobytes() for n, v in tr.tape.names.items()})


@settings(max_examples=120, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(scalar_programs())
def test_compiled_loop_bodies_record_what_the_interpreter_records(case):
    """A loop's assignments run compiled (Interpreter.compiled): the same equations, in the same
    order, at the same positions, with the same values and warnings as expr() records."""
    src, point = case
    src += "\nfor k in range(3) { w = -(sin(x) - cos(y)) * sin(z)^2 / (1 + exp(-x)) - tanh(k * y); q = maximum(w, 0.5) + (w > 0) + w^3 }"
    assert _tape_and_values(src, point) == _interpreted(src, point), src


def _interpreted(src, point):
    """_tape_and_values of src with no loop body compiled: every value made by expr()."""
    from gradcalc.run import Interpreter
    plain = Interpreter.compiled
    try:
        Interpreter.compiled = lambda self, node, depth: (lambda: self.expr(node))
        return _tape_and_values(src, point)
    finally:
        Interpreter.compiled = plain


@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 4), (5, 1)])
def test_mT_of_an_eager_array_is_the_view_transpose_returns(shape):
    # matmul's VJPs call mT on arrays in an eager pass; it skips the transpose primitive there,
    # and must hand back exactly what the primitive would (same shape, strides and memory).
    from gradcalc import primitives as P
    x = np.arange(math.prod(shape), dtype=float).reshape(shape)
    for a in (x, x[..., ::-1, :]):
        nd = a.ndim
        want = P.transpose(a, axes=tuple(range(nd - 2)) + (nd - 1, nd - 2))
        got = P.mT(a)
        assert got.shape == want.shape and got.strides == want.strides
        assert got.__array_interface__["data"] == want.__array_interface__["data"]
        assert np.array_equal(got, np.swapaxes(a, -1, -2))


# Loop bodies run from a list of their statements, each assignment's value compiled once per loop
# (Interpreter.iteration): control flow inside them must record what the interpreter records.
_LOOP_PROGRAMS = [
    "input x, y\ns = x\nfor i in range(6) {\n  if i == 2 { continue }\n  s = s * y + sin(s)\n  if s > 40 { break }\n}\nout = s",
    "input x, y\ns = x\nk = 0\nwhile k < 5 {\n  k = k + 1\n  t = -s * y - cos(k)\n  s = s + 0.25 * t\n}\nout = s + k",
    "input x, y\ndef f(a) {\n  b = a\n  for j in range(3) { b = b * 0.5 + tanh(b) }\n  return b\n}\ns = x\n"
    "for i in range(4) { s = f(s) + y; for j in range(2) { s = s - exp(-s) } }\nout = s",
    "input x, y\ns = x\nfor r in [1, 2, 3] {\n  s = s^2 * r - y / (1 + s^2)\n  s = sqrt(abs(s)) + sigmoid(s)\n}\nout = s",
    "input x, y\ns = x\nfor i in range(3) { s = s + grad(g)(s) }\ndef g(t) = t^3 * y\nout = s",
]


@pytest.mark.parametrize("src", _LOOP_PROGRAMS)
@pytest.mark.parametrize("point", [{"x": 0.7, "y": -1.3}, {"x": 2.0, "y": 0.5}])
def test_loop_bodies_run_compiled_record_what_the_interpreter_records(src, point):
    assert _tape_and_values(src, point) == _interpreted(src, point), src
    _compare(gradcalc.grad, src, point)


@pytest.mark.parametrize("call", ["det(x)", "inv(x)", "trace(x)", "sin(q)"])
def test_an_error_in_a_loop_body_is_the_error_outside_it(call):
    """A built-in's error raised in a compiled loop body is worded and placed as expr() words it."""
    def message(src):
        with pytest.raises(GradcalcError) as err:
            gradcalc.grad(src, at={"x": [1.0, 2.0]})
        return str(err.value)
    head = "for i in range(2) { "
    inside = message(f"input x\n{head}y = {call} }}")
    outside = message(f"input x\ny = {call}")
    (line_in, col_in, text_in), (line_out, col_out, text_out) = (m.split(":", 3)[1:] for m in (inside, outside))
    assert (line_in, int(col_in) - len(head), text_in.split("\n")[0]) == (line_out, int(col_out), text_out.split("\n")[0])


@pytest.mark.parametrize("v", _VALUES + (float("inf"), -float("inf"), float("nan"), 5e-324))
def test_neg_of_a_scalar_is_numpys_negative(v):
    """neg's function is operator.neg: on a NumPy scalar, the bytes np.negative gives."""
    from gradcalc import primitives as P
    for x in (np.float64(v), -np.float64(v)):
        got = P.neg.impl(x)
        assert type(got) is np.float64 and got.tobytes() == np.negative(x).tobytes()
    arr = np.array([v, -v, 1.5])
    assert P.neg.impl(arr).tobytes() == np.negative(arr).tobytes()


@settings(max_examples=80, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(scalar_programs())
def test_a_gradient_with_respect_to_some_inputs_agrees_with_one_element_arrays(case):
    """The inline scalar rules skip the look at which operands lead to a wanted input (their
    contributions to y and z, and to the constants, are made and never read); the rules on
    arrays look first.  With respect to x alone, both give the same bits."""
    src, point = case
    grad_x = lambda s, at: gradcalc.grad(s, at=at, wrt=["x"])  # noqa: E731
    scalar, err_s = _run(grad_x, src, point)
    arrays, err_a = _run(grad_x, src, {k: [v] for k, v in point.items()})
    assert err_s == err_a, src
    if scalar is not None:
        assert list(scalar) == ["x"] and _same_bits(scalar["x"], arrays["x"]), src
        assert scalar.warnings == arrays.warnings, src


def test_contributions_that_lead_nowhere_change_nothing():
    """y's path and the constants' get cotangents in the scalar pass, and an array rule midway
    makes the pass work out which operands lead to x: d/dx = k + k, exactly."""
    src = ("input x, y\nc = 2 * pi\nk = sin(c) * 3 + sqrt(c)\n"
           "z = x * k + y * y * k + sum([x, y] * k) + exp(y) / c")
    k = np.sin(2 * np.pi) * 3 + np.sqrt(2 * np.pi)
    r = gradcalc.grad(src, at={"x": 0.3, "y": -1.2}, wrt=["x"])
    assert list(r) == ["x"] and _same_bits(r["x"], k + k)


# -- The interpreter's shortcuts against the code they replaced ---------------------------------
# Interpreter.call records a unary built-in's primitive directly, and Interpreter.binary makes
# a right operand of two leaves (0.1 * x) without a call of itself.  The methods as they were
# before those shortcuts are kept here as the oracle: every equation, position, value,
# warning and error must be the same.

def _binary_before(self, node):
    from gradcalc.run import _ADD, _BINARY, _MASK_OPS, _NEG, _PLAIN, _PRIMITIVE, P, _literal_exponent, _operator
    from gradcalc.syntax import Binary, Call, Name, Num
    from gradcalc.tape import NO_PARAMS, Tracer
    spine = []
    while type(node) is Binary:
        spine.append(node)
        node = node.left
    b, env, numbers = self.b, self.env, self.numbers
    bind2 = b.bind2
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
        if o == "^":
            p = _literal_exponent(op)
            if p is not None:
                b.pos = loc
                acc = b.bind(P.pow_const, (acc,), {"p": p})
                continue
        rt = type(r)
        right = numbers.get(r.value) if rt is Num else env.get(r.id) if rt is Name else None
        if right is None:
            right = self.binary(r) if rt is Binary else self.expr(r)
        b.pos = loc
        if o == "-":
            acc = bind2(_ADD, acc, b.bind1(_NEG, right))
            continue
        prim = _PLAIN.get(o)
        if prim is not None:
            acc = bind2(prim, acc, right)
            continue
        prim = _BINARY.get(o) or _operator(o)
        acc = b.bind(prim, (acc, right), NO_PARAMS) if prim.__class__ is _PRIMITIVE else prim(acc, right)
        if o in _MASK_OPS:
            self.masks.add(int(acc.var))
    return acc


def _call_before(self, node):
    """call() and builtin()'s branch for one argument, as they were; the rest is builtin()."""
    from gradcalc.errors import NameError_, UsageError, did_you_mean
    from gradcalc.run import _DERIVATIVES, _MASK_BUILTINS, FUNCTIONS, _word
    from gradcalc.syntax import Name
    fdef = self.facts.functions.get(node.func)
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
    prim = fn.prim
    if fn.arity == len(node.args) == 1 and not node.kwargs and prim is not None and prim.trivial_params:
        arg = node.args[0]
        x = self.env.get(arg.id) if type(arg) is Name else None
        if x is None:
            x = self.expr(arg)
        b = self.b
        b.pos = node.loc
        try:
            return b.bind1(prim, x)
        except GradcalcError as err:
            _word(err, node)
            raise
    return self.builtin(node, fn)


def _walked_before(src, point):
    """_tape_and_values of src with binary() and call() as they were before their shortcuts."""
    from gradcalc.run import Interpreter
    saved = Interpreter.binary, Interpreter.call
    try:
        Interpreter.binary, Interpreter.call = _binary_before, _call_before
        return _tape_and_values(src, point)
    finally:
        Interpreter.binary, Interpreter.call = saved


_CALLS = ("sin", "cos", "exp", "log", "sqrt", "tanh", "abs", "sigmoid", "relu", "floor", "sign",
          "erf", "softplus", "sum", "any", "mean", "maximum", "det", "nosuch", "grad")


@st.composite
def call_programs(draw):
    """Straight-line statements of calls (of every kind: unary primitives, others, unknown
    names, a wrong number of arguments) and operators with nested operands on both sides."""
    names = ["x", "y"]
    lines = ["input x, y"]
    for k in range(draw(st.integers(1, 5))):
        leaf = lambda: draw(st.sampled_from(names + ["0.1", "2", "1.01"]))  # noqa: E731
        f = draw(st.sampled_from(_CALLS))
        args = ", ".join(leaf() for _ in range(draw(st.sampled_from((1, 1, 1, 2, 0)))))
        op1, op2, op3 = (draw(st.sampled_from(("+", "-", "*", "/", "^", "<", "%"))) for _ in range(3))
        lines.append(f"v{k} = {f}({args}) {op1} {leaf()} {op2} ({leaf()} {op3} {leaf()})")
        names.append(f"v{k}")
    return "\n".join(lines)


@settings(max_examples=150, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(call_programs(), st.sampled_from(([0.5, -2.0], [[1.5, 0.25]], [0.0, 3.0], [[1.0, 2.0], [3.0, 4.0]])))
def test_call_and_operator_shortcuts_record_what_the_code_before_them_recorded(src, xy):
    """Scalars, 1-element arrays and 2x2 matrices (det's shape error, sum's array), with the
    equations, values, warnings and errors of the interpreter before its shortcuts."""
    x, y = xy if len(xy) == 2 else (xy[0], xy[0])
    for point in ({"x": x, "y": y}, {"x": [x], "y": [y]} if np.ndim(x) == 0 else {"x": x, "y": y}):
        assert _tape_and_values(src, point) == _walked_before(src, point), src


@settings(max_examples=100, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(scalar_programs())
def test_random_scalar_programs_record_what_the_code_before_the_shortcuts_recorded(case):
    src, point = case
    assert _tape_and_values(src, point) == _walked_before(src, point), src


def test_python_float_arithmetic_is_numpys_scalar_arithmetic_bit_for_bit():
    """The inline backward rules compute on Python floats (transforms._reverse): +, -, *, / and
    unary minus must give the bits NumPy's float64 scalars give, on mixed operands too, for
    zeros of both signs, infinities, subnormals and nans of distinct payloads and signs (which
    of two nans survives is the hardware's choice of operand order: it must be the same)."""
    import itertools
    import operator
    import struct
    nan_a = struct.unpack("<d", bytes.fromhex("010000000000f87f"))[0]
    nan_b = struct.unpack("<d", bytes.fromhex("020000000000f8ff"))[0]
    specials = (nan_a, nan_b, float("nan"), -float("nan"), 0.0, -0.0, 1.5, -2.75, float("inf"),
                -float("inf"), 5e-324, -1e308, 1e308, 0.1, 3.0)
    bits = lambda v: struct.pack("<d", float(v))  # noqa: E731
    with np.errstate(all="ignore"):
        for op in (operator.add, operator.sub, operator.mul, operator.truediv):
            for a, b in itertools.product(specials, specials):
                if op is operator.truediv and b == 0:
                    continue  # (Python refuses it: the rule divides NumPy's scalars there)
                want = bits(op(np.float64(a), np.float64(b)))
                assert bits(op(a, b)) == want and bits(op(a, np.float64(b))) == want, (op, a, b)
                assert bits(op(np.float64(a), b)) == want, (op, a, b)
        for a in specials:
            assert bits(-a) == bits(-np.float64(a))


@pytest.mark.parametrize("src", [
    "y = x / 0 * x + x / x",  # the division rule at y == 0, on NumPy's scalars
    "y = (x * 0) / (x - x) + x * x * x",
    "y = sin(x) * cos(x) / x - exp(x)^3 + x^2 * 0",  # a registry rule (x^3) amid inline ones
    "y = -x * (x / 3) - x / -0.0",
])
@pytest.mark.parametrize("x", [0.0, -0.0, 2.5, -1e308, float("inf"), float("nan")])
def test_inline_rules_on_floats_agree_with_one_element_arrays(src, x):
    _compare(gradcalc.grad, src, {"x": x})


@pytest.mark.parametrize("src", ["input x\na = 2\nb = x * 2\nout = a * b", "input x\nb = x * 2\na = 2\nout = a * b",
                                 "input x\na = x\nb = x * 2\nout = a * b"])
def test_a_name_assigned_a_literal_or_a_name_has_a_variable_of_its_own(src):
    """Interpreter.bind: `a = 2` (whether or not 2 was written before) and `a = x` give a its own
    variable, so that the derivative with respect to a holds every other 2 (or x) fixed:
    d(a * b)/da = b = 2x, whatever else reads the same literal or name (x's derivative is total:
    2a, plus b through a when a = x)."""
    r = gradcalc.grad(src, at={"x": 3.0}, wrt=["a", "x"])
    assert float(r["a"]) == 6.0
    assert float(r["x"]) == (2.0 * 2.0 if "a = 2" in src else 2.0 * 3.0 + 6.0)


def test_math_cos_is_numpys_cos_bit_for_bit():
    """The inline rule of sin (transforms._cos_float) takes cos(x) from math.cos: on this build
    NumPy's float64 cos loop calls the C library's cos, the function math.cos calls (gdb:
    DOUBLE_cos_X86_V4 and math_1 both reach glibc's __cos_fma).  Checked here on values of
    every range (math refuses an infinity: the rule gives NumPy's nan there)."""
    import struct
    rng = np.random.default_rng(18)
    xs = np.concatenate([rng.uniform(-10, 10, 20000), rng.uniform(-1e9, 1e9, 5000),
                         rng.standard_normal(5000) * 1e-8, 10.0 ** rng.uniform(-320, 308, 5000),
                         np.array([0.0, -0.0, 5e-324, 1e308, -1e308, np.pi / 2, np.pi, 1e22, float("nan")])])
    from gradcalc.transforms import _cos_float
    for x in xs:
        want = struct.pack("<d", np.cos(np.float64(x)))
        assert struct.pack("<d", _cos_float(np.float64(x))) == want, x
    with np.errstate(all="ignore"):
        for x in (float("inf"), -float("inf")):
            got = _cos_float(np.float64(x))
            assert type(got) is float and np.isnan(got) and np.isnan(np.cos(np.float64(x)))


# Statements other than plain assignments also run compiled in a loop (Interpreter.value_of): a
# while loop's condition, an if's, the value of x += v and of x[i] = v. Each program below is
# compared with the same program unrolled by hand (no loop: every value made by expr()).
_UNROLLED = [
    ("input x\nn = 0\ns = x\nwhile n < 3 {\n  n = n + 1\n  s = s * x + n\n}\nout = s",
     "input x\nn = 0\ns = x\nn = n + 1\ns = s * x + n\nn = n + 1\ns = s * x + n\nn = n + 1\ns = s * x + n\nout = s"),
    ("input x\ns = x\nfor i in range(3) {\n  if s > 1.5 { s = s - x } else { s = s + x^2 }\n}\nout = s",
     None),  # (unrolled per point below: the branches taken depend on x)
    ("input x\nloss = 0\nh = x\nfor t in range(3) {\n  h = tanh(h * 2)\n  loss += sum(h^2)\n}\nout = loss",
     "input x\nloss = 0\nh = x\nh = tanh(h * 2)\nloss += sum(h^2)\nh = tanh(h * 2)\nloss += sum(h^2)\n"
     "h = tanh(h * 2)\nloss += sum(h^2)\nout = loss"),
    ("input x\nv = [0, 0, 0]\nfor i in range(3) {\n  v[i] = x * (i + 1) - sin(x)\n}\nout = sum(v^2)",
     "input x\nv = [0, 0, 0]\nv[0] = x * (0 + 1) - sin(x)\nv[1] = x * (1 + 1) - sin(x)\n"
     "v[2] = x * (2 + 1) - sin(x)\nout = sum(v^2)"),
    ("input x\nm = x > 0\nfor i in range(2) {\n  m = x > i\n}\nout = sum(x[m]^2)",
     "input x\nm = x > 0\nm = x > 0\nm = x > 1\nout = sum(x[m]^2)"),
]


def _unrolled_if(x: float) -> str:
    lines, s = ["input x", "s = x"], x
    for _ in range(3):
        if s > 1.5:
            lines.append("s = s - x")
            s = s - x
        else:
            lines.append("s = s + x^2")
            s = s + x * x
    return "\n".join(lines + ["out = s"])


@pytest.mark.parametrize("k", range(len(_UNROLLED)))
@pytest.mark.parametrize("x", [0.7, -1.3, 1.6])
def test_statements_compiled_in_a_loop_give_what_the_program_unrolled_gives(k, x):
    src, unrolled = _UNROLLED[k]
    point = {"x": [x, -0.5 * x, 2.0]} if "x[m]" in src or "loss" in src else {"x": x}
    unrolled = unrolled or _unrolled_if(x)
    assert _same_bits(gradcalc.evaluate(src, at=point)["out"], gradcalc.evaluate(unrolled, at=point)["out"]), src
    got, want = gradcalc.grad(src, at=point), gradcalc.grad(unrolled, at=point)
    assert _same_bits(got.value, want.value) and _same_bits(got["x"], want["x"]), src
    assert _tape_and_values(src, point)[2:] == _interpreted(src, point)[2:], src


def test_masks_made_in_a_long_loop_select_after_the_loop():
    """A comparison compiled in a loop notes its mask in the set forget_masks renews as the loop
    runs (past 256 masks): the last one, x > 1, still selects (a 0/1 array would gather x[0], x[1])."""
    src = "input x\nm = x > 0\nfor i in range(600) {\n  m = x > (i - 598)\n}\nout = sum(x[m])"
    x = [-3.0, 0.5, 2.0, 4.0]
    assert float(gradcalc.evaluate(src, at={"x": x})["out"]) == 6.0
    assert gradcalc.grad(src, at={"x": x})["x"].tolist() == [0.0, 0.0, 1.0, 1.0]


@pytest.mark.parametrize("op, ufunc", [("lt", np.less), ("le", np.less_equal), ("gt", np.greater),
                                       ("ge", np.greater_equal), ("eq", np.equal), ("ne", np.not_equal)])
def test_a_comparison_of_scalars_is_the_ufuncs(op, ufunc):
    """A comparison's plain function compares two NumPy scalars with Python's operator: the same
    0.0 or 1.0 (as np.float64) as the ufunc on every pair, nan, infinities and signed zeros included."""
    from gradcalc import primitives as P
    values = _VALUES + (float("inf"), -float("inf"), float("nan"))
    for a in values:
        for b in values:
            x, y = np.float64(a), np.float64(b)
            got = getattr(P, op).plain(x, y)
            want = ufunc(x, y).astype(np.float64)
            assert type(got) is np.float64 and got.tobytes() == want.tobytes(), (op, a, b)


@pytest.mark.parametrize("src", ["s = v[1] * 2 + v[2]", "s = sum(v, axis=0) * v[-1]", "s = max(v) - v[..., 0]"])
def test_a_value_with_no_axes_is_kept_as_a_numpy_scalar(src):
    """x[..., i] of a vector (how an index is normalised) is a 0-d array in NumPy; the tape keeps
    every value with no axes as np.float64, on which the scalar code runs (both passes)."""
    from gradcalc.session import trace_source
    v = np.array([0.5, -1.25, 3.0])
    tr = trace_source(src, {"v": v}, 10**8)
    values = tr.builder.values
    assert all(type(values[eq.out]) is np.float64 for eq in tr.tape.equations if tr.builder.shapes[eq.out] == ())
    want = {"s = v[1] * 2 + v[2]": [0.0, 2.0, 1.0], "s = sum(v, axis=0) * v[-1]": [3.0, 3.0, 3.0 + 2.25],
            "s = max(v) - v[..., 0]": [-1.0, 0.0, 1.0]}[src]
    assert gradcalc.grad(src, at={"v": v})["v"].tolist() == want


@pytest.mark.parametrize("src, call", [
    ("sum(x + y)", lambda s, at: gradcalc.grad(s, at=at)),  # x's and y's cotangents: one array
    ("sum(concat([x, y]) * 2)", lambda s, at: gradcalc.grad(s, at=at)),  # two views of one cotangent
    ("b = concat([x, y]); b", lambda s, at: gradcalc.vjp(s, np.arange(6.0), at=at)),  # views of the seed
    ("x + y", lambda s, at: gradcalc.vjp(s, np.arange(3.0), at=at)),  # the caller's seed itself
])
def test_every_result_is_an_array_of_its_own(src, call):
    """Writing into one result changes no other result and not the caller's seed (own_arrays)."""
    at = {"x": np.array([1.0, 2.0, 3.0]), "y": np.array([4.0, 5.0, 6.0])}
    r = call(src, at)
    before = {k: v.copy() for k, v in r.items()}
    r["x"][...] = -7.0
    assert np.array_equal(r["y"], before["y"])
    assert r["x"].tolist() == [-7.0] * 3


def test_forward_jacobian_names_unconnected_inputs_among_many():
    """One sweep finds which inputs reach which outputs (transforms.reaching): 300 scalar
    inputs, every third read through stop_gradient only."""
    n = 300
    src = " + ".join(f"a{i}*a{i}" if i % 3 else f"stop_gradient(a{i})" for i in range(n))
    at = {f"a{i}": float(i) for i in range(n)}
    for mode in ("fwd", "rev"):
        r = gradcalc.jacobian(src, at=at, mode=mode, unconnected="none")["_"]
        assert [k for k, v in r.items() if v is None] == [f"a{i}" for i in range(0, n, 3)]
        assert all(float(v) == 2.0 * i for i, v in ((int(k[1:]), v) for k, v in r.items() if v is not None))


def _many_outputs(n: int) -> str:
    """n scalar outputs y_i = sin(x_i) x_(i+1) (cyclic) + i a (a through stop_gradient for odd i),
    a 3-element u and an empty e among them, at x = linspace(0.5, 1, n), a = 2."""
    lines = [f"input x = linspace(0.5, 1, {n})", "input a = 2"]
    for i in range(n):
        lines.append(f"y{i} = sin(x[{i}]) * x[{(i + 1) % n}] + {i} * " + ("a" if i % 2 == 0 else "stop_gradient(a)"))
        if i == 100:
            lines += ["u = x[0:3] * a", "e = x[0:0] * a"]
    return "\n".join(lines)


@pytest.mark.parametrize("mode", ["rev", "fwd"])
def test_a_jacobian_of_many_outputs_is_each_outputs_own(mode):
    """Reverse mode stacks the rows of up to GROUP_ROWS outputs in one backward pass (a pass per
    output walked the tape once per output: 2,000 scalar outputs of a 2,000-line program took
    4.5 s), and which input reaches which output is found in one sweep for all (transforms.reaching):
    each block is the closed form's, an input that one output does not reach is unconnected for
    that output alone, and the blocks are those of each output's Jacobian taken alone."""
    from gradcalc.session import GROUP_ROWS
    n = 300
    assert n > GROUP_ROWS  # (two groups at least)
    src = _many_outputs(n)
    of = [f"y{i}" for i in range(n)]
    of[101:101] = ["u", "e"]
    r = gradcalc.jacobian(src, of=of, mode=mode, unconnected="none")
    x = np.linspace(0.5, 1, n)
    for i in range(n):
        want = np.zeros(n)
        want[i] = np.cos(x[i]) * x[(i + 1) % n]
        want[(i + 1) % n] += np.sin(x[i])
        assert np.array_equal(r[f"y{i}"]["x"], want), i
        assert (float(r[f"y{i}"]["a"]) == i) if i % 2 == 0 else r[f"y{i}"]["a"] is None
    assert np.array_equal(r["u"]["x"], np.eye(3, n) * 2) and np.array_equal(r["u"]["a"], x[0:3])
    assert r["e"]["x"].shape == (0, n) and r["e"]["a"].shape == (0,)
    for o in ("y0", "y1", "u", "y299"):
        alone = gradcalc.jacobian(src, of=[o], mode=mode, unconnected="none")[o]
        assert all(np.array_equal(alone[w], r[o][w]) if alone[w] is not None else r[o][w] is None for w in ("x", "a"))


@pytest.mark.parametrize("mode", ["rev", "fwd"])
def test_an_output_that_an_input_reaches_only_through_a_where_condition_is_unconnected(mode):
    # where's condition has no derivative rule: a's pass alone gave x no cotangent; with b, which
    # x does reach, stacked in the same pass, a's block must still be None, not zeros
    r = gradcalc.jacobian("a = where(x, 1, 2); b = x*3", at={"x": 0.5}, of=["a", "b"], mode=mode,
                          unconnected="none")
    assert r["a"]["x"] is None and float(r["b"]["x"]) == 3.0


def test_outputs_stacked_in_one_pass_are_held_to_max_elements_each_on_its_own():
    # each row has 90 elements (nine inputs of ten): one output's Jacobian is within 160, two
    # stacked are not, so they take a pass each
    src = "o0 = sum(p0)\no1 = sum(p1) + sum(" + " + ".join(f"p{i}" for i in range(2, 9)) + ")"
    at = {f"p{i}": np.ones(10) for i in range(9)}
    r = gradcalc.jacobian(src, at=at, of=["o0", "o1"], mode="rev", max_elements=160)
    assert all(np.array_equal(r["o0"][f"p{i}"], np.ones(10) * (i == 0)) for i in range(9))
    assert all(np.array_equal(r["o1"][f"p{i}"], np.ones(10) * (i > 0)) for i in range(9))


def test_a_long_array_literal_differentiates_to_its_closed_form():
    """An array literal of n elements is a concat of n operands, whose rules read none of them:
    each rule gets none (transforms._vjp_step), in the eager pass (grad) and the traced one
    (hessian). sum((k * x)^2 for k < n) has derivative 2 x S and second derivative 2 S, S = sum k^2."""
    for n in (3, 300, 3000):
        src = "v = [" + ", ".join(f"x * {k}" for k in range(n)) + "]\nsum(v^2)"
        squares = sum(k * k for k in range(n))
        assert float(gradcalc.grad(src, at={"x": 1.5})["x"]) == 3.0 * squares
        if n <= 300:
            assert float(gradcalc.hessian(src, at={"x": 1.5})["x"]["x"]) == 2.0 * squares


# x[i] = v and x[i] += v write into x's array where nothing else refers to it or reads it again
# (Builder.update): values, gradients and warnings must be those of the copy each update made
# before, whatever aliases the program makes (another name, a caller's argument, a loop over its
# rows, a view of another array, an in-program derivative, a nan already there, an overflow).
_N = 1100  # (grad frees, so may write into, arrays of 1,024 elements or more)
_ALIASED = [
    "w = zeros(N)\nu = w\nw[0] = x\nw[1] += x\nout = sum(u) * 3 + sum(w)",
    "def f(a) {\n  a[0] = x\n  a[2] += x\n  return a\n}\nw = ones(N) * x\ny = f(w)\nout = sum(w) + sum(y * 2)",
    "w = ones(N) * x\ns = 0\nfor r in w[0:3] { w[0] = r + 1; s = s + r }\nout = s + sum(w)",
    "v = ones(N) * x\nw = v[0:N-10]\nw[0] = 5\nw[1] += x\nout = sum(v) + sum(w)",
    "v = ones(N) * x\nw = reshape(v, (10, 110))\nw[0, 0] = 7 * x\nout = sum(v) + sum(w)",
    "def g(a) {\n  b = a\n  b[0] = x\n  return a\n}\nw = ones(N) * x\nout = sum(g(w)) + sum(w)",
    "w = ones(N) * x\nu = w if x > 0 else w\nw[3] = 2\nout = sum(u) + sum(w)",
    "def h(t) {\n  a = ones(N) * t\n  for i in range(3) { a[i] = t * i }\n  return sum(a^2)\n}\n"
    "w = ones(N) * x\nfor i in range(3) { w[i] = grad(h)(x) }\nout = sum(w)",
    "w = ones(N) * x\nfor i in range(5) { w[i] = w[i + 1] * 2; w[0:3] += w[3:6] }\nout = sum(w^2)",
    "w = ones(N) * x\nm = w > 0\nw[m] = 3\nout = sum(w)",
    "w = ones(N) * x\nq = w * 2\nw[0] = 9\nout = sum(q * w)",
    "w = ones(N) * x\nfor i in range(3) { k = w; w[i] = 5; w = k * 2 }\nout = sum(w)",
    "w = ones(N) * x\nw[0] = nan\nw[1] = 1\nout = sum(w)",
    "w = ones(N) * x\nw[0] = log(-x)\nw[1] = 1\nout = sum(w)",
    "w = ones(N) * (x * 1e308)\nw[[1, 1]] += 1e308\nw[2] = 0\nout = sum(w)",
    "w = ones(N)\nfor i in range(N) { w[i] = x * i }\nw[0:N] += w[::-1]\nout = sum(w * w)",
    # an array in F order (a transpose's sine owns its memory): the copy was in C order, and
    # sums add in memory order, so writing into it changed their last bits (differential review)
    "T = sin(transpose(reshape(arange(N) * x, (11, 100))))\nT[0, 0] = 0\nT[1] += x\nout = sum(T) + norm(T) + sum(T, axis=0)[3]",
]


def _runs(src: str, x: float):
    with np.errstate(all="ignore"):
        e = gradcalc.evaluate(src, at={"x": x}, all=True)
        g = gradcalc.grad(src, at={"x": x})
    return ({k: np.asarray(v).tobytes() for k, v in e.items()}, e.warnings,
            np.asarray(g["x"]).tobytes(), np.asarray(g.value).tobytes(), g.warnings)


@pytest.mark.parametrize("src", _ALIASED)
@pytest.mark.parametrize("x", [1.5, -0.5])
def test_an_update_written_in_place_gives_what_a_copy_gives(monkeypatch, src, x):
    from gradcalc import run
    src = src.replace("N", str(_N))
    written = _runs(src, x)
    monkeypatch.setattr(run, "_HELD_BY_ITS_NAME_ALONE", -1)  # (never in place)
    assert written == _runs(src, x)


def test_a_loop_of_updates_writes_in_place(monkeypatch):
    """Every update of the loop but the first (which meets zeros' array, free, and writes into it
    too in eval) writes into its array: the mechanism the test above compares is in use."""
    from gradcalc.tape import Builder
    seen = []
    overwritable = Builder.overwritable
    monkeypatch.setattr(Builder, "overwritable", lambda self, var: seen.append(overwritable(self, var)) or seen[-1])
    src = f"w = zeros({_N})\nfor i in range(50) {{ w[i] = x * i; w[i + 1] += x }}\nout = sum(w)"
    # (each w[i + 1] += x is overwritten by the next step's w[i + 1] = x * (i + 1), but the last)
    assert float(gradcalc.evaluate(src, at={"x": 2.0})["out"]) == 2.0 * (sum(range(50)) + 1)
    assert seen == [True] * 100
    seen.clear()
    assert float(gradcalc.grad(src, at={"x": 2.0})["x"]) == sum(range(50)) + 1
    assert seen.count(True) >= 99


@pytest.mark.parametrize("yshape, xshapes", [((), [(), (3,), (2, 2)]), ((2,), [(3,), ()]), ((2, 3), [(1,), (2, 1, 2)]),
                                             ((), [(), (), ()]), ((3,), [(), (), (2,)])])
def test_a_jacobian_row_is_each_inputs_block(yshape, xshapes):
    """jacobian_row cuts the rows of a batched pass (one per element of the inputs, in order) into
    blocks of shape yshape + xshape: block[y][x] is the row of x's element at y; every block an
    array, a scalar's and a scalar input's of a scalar output 0-d (not a NumPy scalar)."""
    from gradcalc.transforms import jacobian_row
    n = sum(math.prod(s) for s in xshapes)
    rows = np.arange(n * math.prod(yshape), dtype=float).reshape((n,) + yshape) * 1.5
    start = 0
    for block, xshape in zip(jacobian_row(rows, yshape, xshapes), xshapes):
        assert type(block) is np.ndarray and block.shape == yshape + xshape
        for k, x in enumerate(np.ndindex(*xshape)):
            for y in np.ndindex(*yshape):
                assert block[y + x] == rows[(start + k,) + y]
        start += math.prod(xshape)


def test_a_hessian_of_many_scalar_inputs_is_the_closed_form():
    """sum of a_i a_(i+1) around a ring of 200 scalar inputs: the Hessian is the ring's adjacency
    matrix (1 where |i - j| = 1 mod 200), plus sin(a0) a3^3's second derivatives."""
    n = 200
    src = " + ".join(f"a{i}*a{(i + 1) % n}" for i in range(n)) + " + sin(a0)*a3^3"
    at = {f"a{i}": 0.01 * i for i in range(n)}
    h = gradcalc.hessian(src, at=at)
    want = np.zeros((n, n))
    for i in range(n):
        want[i, (i + 1) % n] = want[(i + 1) % n, i] = 1.0
    a0, a3 = at["a0"], at["a3"]
    want[0, 0] += -math.sin(a0) * a3 ** 3
    want[0, 3] += math.cos(a0) * 3 * a3 ** 2
    want[3, 0] += math.cos(a0) * 3 * a3 ** 2
    want[3, 3] += math.sin(a0) * 6 * a3
    got = np.array([[float(h[f"a{i}"][f"a{j}"]) for j in range(n)] for i in range(n)])
    np.testing.assert_allclose(got, want, rtol=1e-15, atol=1e-15)
    assert all(type(h[f"a{i}"][f"a{j}"]) is np.ndarray for i in (0, 7) for j in (3, 9))
