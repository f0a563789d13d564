"""Eager array calls: the registry's shortcuts give what the general path gives.

An eager derivative pass runs its rules on NumPy arrays.  Primitive.__call__ then skips the
general path for two arrays of equal shape (a broadcasting primitive's plain function), one
array (a primitive without parameters), or a primitive's own ``eager`` form (matmul of two
matrices, reshape, broadcast_to, sum_to).  The reference here is the general path itself
(``normalize`` then ``impl``) and NumPy's own functions: the values must agree bit for bit,
views must be views with NumPy's strides, and bad shapes must give the general path's errors.

The eager backward pass also sums a variable's cotangent contributions in place once it made
the sum itself (transforms._accumulate), and adds the cotangent of a read x[idx] into that sum
at idx alone (transforms._scatter); nothing it handed on, or was handed, may change.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import gradcalc
from gradcalc import primitives as P
from gradcalc import session
from gradcalc.errors import ShapeError
from gradcalc.transforms import depends

_RNG = np.random.default_rng(18)
# The operands hold inf and nan on purpose (the safe products' cases); NumPy's warnings about
# them are noise here (gradcalc's own passes run under np.errstate(all="ignore")).
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _general(prim, *arrays, **params):
    """prim on arrays by the general path: normalize, then impl."""
    params = prim.normalize([a.shape for a in arrays], P._UNLIMITED, **params)
    return prim.impl(*arrays, **params)


def _same(got, want):
    assert type(got) is type(want)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("a_shape, b_shape", [((4, 3), (3, 5)), ((1, 7), (7, 1)), ((6, 1), (1, 2)), ((3, 0), (0, 2))])
@pytest.mark.parametrize("safe", [False, True])
def test_matmul_of_two_matrices_as_the_general_path(a_shape, b_shape, safe):
    a, b = _RNG.standard_normal(a_shape), _RNG.standard_normal(b_shape)
    if a.size:
        a[0, 0] = np.inf  # a safe product sees it (a zero factor would make 0 of its term)
        b[-1, -1] = 0.0
    params = {"safe": True} if safe else {}
    _same(P.matmul(a, b, **params), _general(P.matmul, a, b, **params))


@pytest.mark.parametrize("x_shape, shape", [((), (1, 1)), ((6,), (2, 3)), ((2, 3), (3, 2)), ((2, 3), (6,)),
                                            ((4, 0), (0, 2)), ((1, 1), ())])
def test_reshape_as_the_general_path(x_shape, shape):
    x = _RNG.standard_normal(x_shape)
    _same(P.reshape(x, shape=shape), _general(P.reshape, x, shape=shape))


@pytest.mark.parametrize("shape", [(1, 1), (), (1,)])
def test_reshape_of_a_numpy_scalar_as_the_general_path(shape):
    # (the cotangent of a sum on a scalar program's loss: a NumPy scalar, not an array)
    x = np.float64(-2.75)
    got, want = P.reshape(x, shape=shape), _general(P.reshape, x, shape=shape)
    assert type(got) is type(want) and np.shape(got) == shape and np.array_equal(got, want)
    assert type(P.broadcast_to(x, shape=(2, 3))) is np.ndarray


@pytest.mark.parametrize("x_shape, shape", [((), (3, 4)), ((1, 1), (128, 32)), ((5, 1), (5, 3)), ((4,), (3, 4)),
                                            ((2, 1, 3), (5, 2, 4, 3)), ((1,), (0,)), ((3,), (3,)), ((1, 1), (1, 1))])
def test_broadcast_to_is_numpys_view(x_shape, shape):
    x = _RNG.standard_normal(x_shape)
    got, want = P.broadcast_to(x, shape=shape), np.broadcast_to(x, shape)
    assert got.shape == want.shape and got.strides == want.strides
    assert np.array_equal(got, want) and (got.size == 0 or np.shares_memory(got, x))  # a view
    assert not got.flags.writeable  # as np.broadcast_to's: a rule must not write into it
    _same(np.ascontiguousarray(got), np.ascontiguousarray(_general(P.broadcast_to, x, shape=shape)))


def test_broadcast_to_of_a_view_that_is_not_contiguous():
    x = _RNG.standard_normal((3, 4)).T[:, :1]  # (4, 1), strided: the general path takes it
    got = P.broadcast_to(x, shape=(4, 5))
    assert np.array_equal(got, np.broadcast_to(x, (4, 5))) and np.shares_memory(got, x)


@pytest.mark.parametrize("x_shape, shape", [((128, 32), (128, 1)), ((4, 3), (3,)), ((5, 4, 3), (4, 1)),
                                            ((2, 3), (2, 3)), ((2, 3), ()), ((3, 1), (1, 1))])
def test_sum_to_as_the_general_path(x_shape, shape):
    x = _RNG.standard_normal(x_shape)
    got, want = P.sum_to(x, shape=shape), _general(P.sum_to, x, shape=shape)
    assert np.shape(got) == np.shape(want) and np.asarray(got).tobytes() == np.asarray(want).tobytes()


@pytest.mark.parametrize("x_shape, shape", [((128, 32), (128, 1)), ((4, 3), (3,)), ((5, 4, 3), (4, 1)),
                                            ((2, 3), ()), ((3, 1), (1, 1)), ((0, 3), (1, 3))])
def test_a_cotangent_fitted_to_its_operand_is_sum_tos_general_path(x_shape, shape):
    # (transforms.fit_to_shape, on an eager pass's array: sum_to's eager form, without the primitive's call)
    from gradcalc.transforms import fit_to_shape
    x = _RNG.standard_normal(x_shape)
    got, want = fit_to_shape(x, shape), _general(P.sum_to, x, shape=shape)
    assert type(got) is type(want) and np.shape(got) == np.shape(want)
    assert np.asarray(got).tobytes() == np.asarray(want).tobytes()


@pytest.mark.parametrize("call", [
    lambda: P.broadcast_to(np.ones(3), shape=(4,)),
    lambda: P.broadcast_to(np.ones((2, 3)), shape=(3,)),
    lambda: P.reshape(np.ones(6), shape=(4,)),
    lambda: P.reshape(np.ones(6), shape=(-1, -1)),
    lambda: P.matmul(np.ones((2, 3)), np.ones((2, 3))),
    lambda: P.sum_to(np.ones(3), shape=(1, 3)),
])
def test_bad_shapes_give_the_general_paths_error(call):
    with pytest.raises(ShapeError):
        call()


def test_equal_shapes_and_no_parameters_go_straight_to_numpy():
    x, y = _RNG.standard_normal((3, 4)), _RNG.standard_normal((3, 4))
    _same(P.mul(x, y), np.multiply(x, y))
    _same(P.tanh(x), np.tanh(x))
    # a zero cotangent still contributes exactly zero through safe_mul on arrays
    g, d = np.zeros((2, 2)), np.array([[np.inf, 1.0], [np.nan, 2.0]])
    _same(P.safe_mul(g, d), np.zeros((2, 2)))


# x is used by three additions, so the eager pass sums three contributions into one array
_THREE_WAY = "y = x * 1.5\nz = y + y + y\nout = sum(z * z)"


def test_sums_in_place_give_exact_gradients_and_touch_nothing_handed_on():
    x = np.array([1.0, 2.0, 3.0])
    r = gradcalc.grad(_THREE_WAY, at={"x": x}, wrt=["x", "y", "z"])
    # z = 4.5 x, d out/dz = 2 z = 9 x; y reaches z three times: 27 x; x: 1.5 * 27 x (all exact)
    assert np.array_equal(r["z"], 9 * x)  # z's cotangent is handed on to y as it is: never written into
    assert np.array_equal(r["y"], 27 * x)
    assert np.array_equal(r["x"], 40.5 * x)
    assert np.array_equal(x, [1.0, 2.0, 3.0])


def test_a_cotangent_given_is_not_written_into():
    seed = np.array([1.0, -2.0, 0.5])
    r = gradcalc.vjp("y = x + x + x + x", seed, at={"x": [1.0, 2.0, 3.0]}, wrt=["x"])
    assert np.array_equal(r["x"], 4 * seed)
    assert np.array_equal(seed, [1.0, -2.0, 0.5])


def test_a_weight_shared_by_a_loop_gets_every_steps_contribution():
    # the gradient of sum(W @ v) over n steps is n times the outer product of ones and v
    w, v = _RNG.standard_normal((3, 4)), np.array([0.5, 1.0, -2.0, 4.0])
    src = "s = 0\nfor i in range(6) {\n  s = s + sum(W @ v)\n}\ns"
    r = gradcalc.grad(src, at={"W": w, "v": v}, wrt=["W"])
    assert np.array_equal(r["W"], np.tile(6 * v, (3, 1)))


@pytest.mark.parametrize("shape", [(1,), (1, 1), (2,), (3, 1), (16,)])
@pytest.mark.parametrize("signs", [(1, 1, -1), (-1, -1, 1), (1, -1, -1)])
def test_sums_of_nan_keep_the_sign_bits_of_sums_made_anew(shape, signs):
    # A variable with three contributions, each a nan of its own sign: its cotangent must carry
    # the bits of (c1 + c2) + c3, the sums NumPy makes anew (on one element NumPy's in-place
    # add keeps the other operand's nan, whose sign bit differs).
    from gradcalc.transforms import _accumulate
    c1, c2, c3 = (np.copysign(np.full(shape, np.nan), s) for s in signs)
    owned: dict = {}
    total = _accumulate(_accumulate(c1, c2, 7, owned), c3, 7, owned)
    assert total.tobytes() == ((c1 + c2) + c3).tobytes()


# -- reads of elements: their cotangents added where they read (transforms._scatter) -------------
# The oracle is the dense sum written out here: each read v[idx] contributes zeros of v's shape
# holding its coefficient at idx, and the backward pass sums them newest first, (c_K + c_K-1) + ...
# Coefficients of both zero signs and nan of both signs, where the dense sum's +0.0 outside idx
# decides the sign bits.
_NEG_NAN = float(np.copysign(np.nan, -1.0))
_READS = [  # (v's shape, the reads' indices, each as text and as NumPy's index)
    ((6,), [("3", 3), ("1", 1), ("3", 3), ("-1", 5), ("3", 3), ("0:2", slice(0, 2)), ("1", 1)]),
    ((6,), [("2", 2)] * 5),
    ((6,), [("4:1:-1", slice(4, 1, -1)), ("2", 2), ("::2", slice(None, None, 2)), ("2", 2), ("5", 5)]),
    ((3, 4), [("1, 2", (1, 2)), ("1", 1), ("1, 2", (1, 2)), (":, 3", (slice(None), 3)), ("0, 0", (0, 0)),
              ("2, 1:", (2, slice(1, None)))]),
]


# Where each place of the sum's sign bits is decided (reads listed in program order; the pass
# meets them last first): -0.0 made by reads at one place, then a read elsewhere (+0.0 added
# there, once the pass owns the sum, and again after a read in place); two nans at one place.
_SIGNED_READS = [
    ((6,), [("4", 4), ("2", 2), ("2", 2)], [1.0, -0.0, -0.0]),
    ((6,), [("4", 4)] + [("2", 2)] * 4, [1.0] + [-0.0] * 4),
    ((6,), [("0:3", slice(0, 3)), ("1", 1), ("1", 1), ("1", 1)], [2.0, -0.0, -0.0, -0.0]),
    ((6,), [("2", 2), ("2", 2), ("2", 2)], [_NEG_NAN, np.nan, np.nan]),
    ((6,), [("2", 2), ("2", 2), ("2", 2)], [np.nan, _NEG_NAN, _NEG_NAN]),
    ((6,), [("2:4", slice(2, 4))] * 3, [_NEG_NAN, np.nan, np.nan]),
    ((2, 3), [("1", 1), ("1, 0", (1, 0)), ("1, 0", (1, 0)), ("1, 0", (1, 0))], [_NEG_NAN, -0.0, -0.0, np.nan]),
]


def _reads_program(shape, reads) -> str:
    """s = s + v[idx] * w[k] for each read (summed where it selects more than one element)."""
    def read(text, idx):
        idx = idx if type(idx) is tuple else (idx,)
        one = len(idx) == len(shape) and all(type(i) is int for i in idx)
        return f"v[{text}]" if one else f"sum(v[{text}])"
    return "s = 0\n" + "\n".join(f"s = s + {read(*r)} * w[{k}]" for k, r in enumerate(reads))


def _dense_reads_gradient(shape, idxs, coefs):
    total = None
    for idx, c in reversed(list(zip(idxs, coefs))):
        part = np.zeros(shape)
        part[idx] = c
        total = part if total is None else total + part
    return total


@pytest.mark.parametrize("shape, reads", _READS)
@pytest.mark.parametrize("signs", ["zeros", "nans", "mixed"])
def test_reads_of_elements_sum_their_cotangents_as_zeros_of_the_whole_would(shape, reads, signs):
    rng = np.random.default_rng(len(reads) + len(signs))
    pool = {"zeros": [0.0, -0.0], "nans": [np.nan, _NEG_NAN, -0.0],
            "mixed": [0.0, -0.0, 1.5, -2.0, np.nan, _NEG_NAN, np.inf]}[signs]
    w = rng.choice(pool, size=len(reads))
    src = _reads_program(shape, reads)
    v = rng.standard_normal(shape)
    g = gradcalc.grad(src, at={"v": v, "w": w}, wrt=["v"])["v"]
    assert g.tobytes() == _dense_reads_gradient(shape, [idx for _, idx in reads], w).tobytes()


@pytest.mark.parametrize("shape, reads, w", _SIGNED_READS)
def test_reads_of_elements_keep_the_dense_sums_sign_bits(shape, reads, w):
    w = np.array(w)
    src = _reads_program(shape, reads)
    g = gradcalc.grad(src, at={"v": np.ones(shape), "w": w}, wrt=["v"])["v"]
    assert g.tobytes() == _dense_reads_gradient(shape, [idx for _, idx in reads], w).tobytes()


@pytest.mark.parametrize("idx", [(2,), (slice(2, 3),), (slice(1, 4),), (slice(None, None, -2),)])
@pytest.mark.parametrize("nans", [(1, 0), (0, -1), (-1, 0), (1, -1), (-1, 1)])
def test_a_read_added_in_place_keeps_the_dense_sums_nan(idx, nans):
    # (through grad, a nan that reaches the result makes the pass run again, with warnings, and
    # the nan's bits of that pass are returned: each pass's are seen here).  Of two nans, the
    # dense sum keeps the one its SIMD loop's body or tail keeps, by where they stand in the
    # array: that read is left to the dense sum.
    from gradcalc.transforms import _accumulate, _scatter
    prev_nan, g_nan = (float(np.copysign(np.nan, s)) if s else 1.5 for s in nans)
    c1, c2 = np.zeros(6), np.zeros(6)
    c1[idx], c2[2] = prev_nan, -0.0
    owned: dict = {}
    dense = c1 + c2
    prev = _accumulate(c1, c2, 7, owned)
    g = np.full(np.zeros(6)[idx].shape, g_nan)[()]
    part = np.zeros(6)
    part[idx] = g
    dense = dense + part
    if all(nans):
        before = prev.tobytes()
        assert not _scatter(prev, g, idx, 7, owned) and prev.tobytes() == before
    else:
        assert _scatter(prev, g, idx, 7, owned)
        assert prev.tobytes() == dense.tobytes()


def test_a_loop_reading_each_element_adds_each_read_where_it_reads(monkeypatch):
    """The mechanism the test above compares is in use: every read but the first two (the first
    contribution, and the sum the pass then makes and owns) is added in place."""
    from gradcalc import transforms
    calls = []
    scatter = transforms._scatter
    monkeypatch.setattr(transforms, "_scatter", lambda *a: calls.append(scatter(*a)) or calls[-1])
    n = 2000
    w = np.where(np.arange(n) % 3 == 0, -0.0, np.arange(n) * 0.5)
    src = f"s = 0\nfor i in range({n}) {{ s = s + v[i] * w[{n - 1} - i] }}"
    g = gradcalc.grad(src, at={"v": np.ones(n), "w": w}, wrt=["v", "w"])
    assert g["v"].tobytes() == _dense_reads_gradient((n,), range(n), w[::-1]).tobytes()
    assert g["w"].tobytes() == _dense_reads_gradient((n,), range(n - 1, -1, -1), np.ones(n)).tobytes()
    assert calls.count(True) == 2 * (n - 2)


# -- reads: the values a primitive's VJP and JVP rules read ------------------------------------
# Each declaration is held to its rules: every rule, called on arrays with the values it does
# not declare replaced by None, gives the bits it gives with all of them.  (prim, operands'
# shapes, parameters as a program passes them, (low, high) of the operands' values.)
_R = (0.1, 0.9)
_DECLARED = [
    (P.neg, [(3, 4)], {}, _R), (P.copy, [(3, 4)], {}, _R), (P.sign, [(5,)], {}, (-1, 1)),
    (P.floor, [(5,)], {}, _R), (P.ceil, [(5,)], {}, _R), (P.round_, [(5,)], {}, _R), (P.trunc, [(5,)], {}, _R),
    (P.abs_, [(5,)], {}, (-1, 1)), (P.sqrt, [(5,)], {}, _R), (P.cbrt, [(5,)], {}, _R), (P.exp, [(5,)], {}, _R),
    (P.expm1, [(5,)], {}, _R), (P.exp2, [(5,)], {}, _R), (P.log, [(5,)], {}, _R), (P.log1p, [(5,)], {}, _R),
    (P.log2, [(5,)], {}, _R), (P.log10, [(5,)], {}, _R), (P.sin, [(5,)], {}, _R), (P.cos, [(5,)], {}, _R),
    (P.tan, [(5,)], {}, _R), (P.asin, [(5,)], {}, _R), (P.acos, [(5,)], {}, _R), (P.atan, [(5,)], {}, _R),
    (P.sinh, [(5,)], {}, _R), (P.cosh, [(5,)], {}, _R), (P.tanh, [(5,)], {}, _R), (P.asinh, [(5,)], {}, _R),
    (P.acosh, [(5,)], {}, (1.1, 2.0)), (P.atanh, [(5,)], {}, _R), (P.sigmoid, [(5,)], {}, (-2, 2)),
    (P.relu, [(5,)], {}, (-1, 1)), (P.softplus, [(5,)], {}, (-2, 2)), (P.erf, [(5,)], {}, (-2, 2)),
    (P.erfc, [(5,)], {}, (-2, 2)), (P.sinc, [(5,)], {}, (-2, 2)),
    (P.add, [(3, 4), (3, 1)], {}, _R), (P.mul, [(3, 4), (4,)], {}, _R), (P.div, [(3, 4), (3, 4)], {}, _R),
    (P.pow_const, [(3, 4)], {"p": 3.0}, _R), (P.pow_const, [(3, 4)], {"p": 2.0}, _R),
    (P.reduce_sum, [(3, 4)], {"axis": 0}, _R), (P.reshape, [(3, 4)], {"shape": (2, 6)}, _R),
    (P.broadcast_to, [(3, 1)], {"shape": (2, 3, 4)}, _R), (P.sum_to, [(2, 3, 4)], {"shape": (3, 1)}, _R),
    (P.index, [(4, 5)], {"idx": (1, slice(1, 4))}, _R), (P.transpose, [(2, 3, 4)], {"axes": (2, 0, 1)}, _R),
    (P.matmul, [(3, 4), (4, 2)], {}, _R), (P.matmul, [(4,), (4, 2)], {}, _R), (P.matmul, [(3, 4), (4,)], {}, _R),
    (P.cumsum, [(3, 4)], {"axis": 0}, _R), (P.diag, [(4, 4)], {"k": 1}, _R), (P.diag_embed, [(3,)], {"k": -1, "shape": (4, 4)}, _R),
    (P.index_update, [(4, 5), (2, 5)], {"idx": (np.array([3, 0]),)}, _R),
    (P.index_update, [(4, 5), ()], {"idx": (1, slice(None, None, 2))}, _R),
    (P.index_add, [(4, 5), (3, 5)], {"idx": (np.array([1, 1, 2]),)}, _R),
    (P.index_put, [(3,)], {"idx": (np.array([2, 0, 2]),), "shape": (4,)}, _R),
    (P.add_at, [(4, 5), (5,)], {"idx": (1, slice(None)), "shape": (4, 5)}, _R),
    (P.concat, [(2, 3), (4, 3), (1, 3)], {"axis": 0}, _R), (P.concat, [(2, 1), (2, 3)], {"axis": -1}, _R),
]


def test_every_declared_primitive_is_checked_here():
    declared = {p.name for p in P._REGISTRY.values() if p.reads is not None}
    assert declared == {case[0].name for case in _DECLARED}


@pytest.mark.parametrize("prim, shapes, params, span", _DECLARED, ids=lambda c: getattr(c, "name", ""))
def test_a_rule_reads_only_the_values_its_primitive_declares(prim, shapes, params, span):
    args = [_RNG.uniform(*span, s) for s in shapes]
    params = prim.normalize([a.shape for a in args], P._UNLIMITED, **params)
    ans = np.asarray(prim.impl(*args, **params))
    g = _RNG.standard_normal(ans.shape)
    full = (ans, *args)
    # (position i - 1 in full: the output is P.OUT, -1, and operand k is k)
    masked = tuple(v if i - 1 in prim.reads else None for i, v in enumerate(full))
    for rule in map(prim.vjp_rule, range(len(args))):
        want = rule(g, *full, **params)
        got = rule(g, *masked, **params)
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes()
    ts = [_RNG.standard_normal(a.shape) for a in args]
    if prim.variadic:  # (one rule for every operand's tangent; some without one)
        calls = [(prim.jvp, (ts,)), (prim.jvp, ([None] + ts[1:],)), (prim.jvp, (ts[:-1] + [None],))]
    else:
        calls = [(rule, (t,)) for rule, t in zip(prim.jvp, ts)]
    for rule, t in calls:
        want = rule(*t, *full, **params)
        got = rule(*t, *masked, **params)
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes()


# grad, vjp, jvp, jacobian and hessian free, while they record, the arrays no rule reads once
# nothing refers to them (Builder.release_unread): the same derivatives, values and warnings, bit
# for bit, as a run that frees nothing, and a rule reading a freed value would fail.
_RELEASED = {
    "an RNN": ("h = h0; loss = 0\nfor t in range(4) {\n  h = tanh(W @ h + U @ X[t] + b)\n  loss += sum(h^2)\n}\nloss",
               {"W": _RNG.standard_normal((5, 5)), "U": _RNG.standard_normal((5, 3)), "b": _RNG.standard_normal((5, 1)),
                "X": _RNG.standard_normal((4, 3, 2)), "h0": np.zeros((5, 2))}),
    "every declared primitive": (
        "a = exp(x) * sin(x) / cosh(x) + sqrt(x) - log(x)^3\nm = reshape(transpose(M), (2, 3)) @ M\n"
        "sum(a * sigmoid(-a)) + sum(relu(m) + abs(m) * floor(m)) + sum(sinc(x) * erf(x))",
        {"x": _RNG.uniform(0.5, 2.0, 3), "M": _RNG.standard_normal((3, 2))}),
    "index updates in a loop": ("w = x\nfor i in range(3) {\n  w[i] = w[i + 1] * x[i]\n  w[0:2] += cumsum(w)[1:3]\n}\n"
                                "sum(w[0:3] @ diag(diag(A, k=1), k=-1)[1:, 0:3])",
                                {"x": _RNG.uniform(0.5, 2.0, 4), "A": _RNG.standard_normal((4, 4))}),
    "a growing array": ("z = x[0:1]\nfor i in range(3) { z = append(z, x[i] * z[-1]) }\nsum(concat([z, x]) ^ 2)",
                        {"x": _RNG.uniform(0.5, 2.0, 4)}),
    "a warning: log of 0": ("y = log(x) * w + 1\nz = y @ A\nsum(tanh(z))",
                            {"x": np.array([0.0, 1.0]), "w": np.array([1.0, 2.0]), "A": np.ones((2, 2))}),
    "a nan a zero cotangent removes": ("s = sqrt(x - 1)\nsum(s * 0)", {"x": np.array([0.5, 2.0, 3.0])}),
    # (an infinite gradient: eager_backward runs its pass again, with warnings, on the freed tape)
    "a gradient of inf": ("s = sqrt(x * 2 + 1)\nsum(exp(s) * 3)", {"x": np.array([-0.5, 1.0])}),
}


def _flat(result) -> dict:
    """A result's arrays by name, a Hessian's or a Jacobian's blocks {row: {column: array}} by (row, column)
    (the result keeps its attributes: value, warnings)."""
    flat = type(result)({}, **{k: getattr(result, k, None) for k in ("value", "warnings")})
    for k, v in result.items():
        if isinstance(v, dict):
            flat.update({(k, c): np.asarray(b) for c, b in v.items()})
        else:
            flat[k] = v
    return flat


@pytest.fixture
def watch_every_array(monkeypatch):
    from gradcalc import tape
    monkeypatch.setattr(tape, "WATCHED_ELEMENTS", 1)  # (these small arrays are watched here)


@pytest.mark.parametrize("source, at", _RELEASED.values(), ids=_RELEASED.keys())
def test_a_released_tape_gives_the_gradients_and_warnings_of_the_full_one(monkeypatch, watch_every_array,
                                                                          source, at):
    from gradcalc.session import quiet, trace_source
    from gradcalc.tape import Builder
    assert any(v is None for v in quiet(trace_source)(source, at, 10**8, release=True).builder.values.values())
    released = gradcalc.grad(source, at=at)
    seed = np.float64(1.5)
    vjp_released = gradcalc.vjp(source, seed, at=at)
    tangent = {k: _RNG.standard_normal(np.shape(v)) for k, v in at.items()}
    jvp_released = gradcalc.jvp(source, at=at, tangent=tangent)
    second = [gradcalc.hessian(source, at=at), gradcalc.jacobian(source, at=at, mode="rev"),
              gradcalc.jacobian(source, at=at, mode="fwd")]
    monkeypatch.setattr(Builder, "release_unread", lambda self: None)
    full = gradcalc.grad(source, at=at)
    vjp_full = gradcalc.vjp(source, seed, at=at)
    jvp_full = gradcalc.jvp(source, at=at, tangent=tangent)
    second_full = [gradcalc.hessian(source, at=at), gradcalc.jacobian(source, at=at, mode="rev"),
                   gradcalc.jacobian(source, at=at, mode="fwd")]
    for a, b in ((released, full), (vjp_released, vjp_full), (jvp_released, jvp_full), *zip(second, second_full)):
        a, b = _flat(a), _flat(b)
        assert a.keys() == b.keys() and all(a[k].tobytes() == b[k].tobytes() for k in a)
        values = a.value if isinstance(a.value, dict) else {"": a.value}  # (a Jacobian's: by output)
        want = b.value if isinstance(b.value, dict) else {"": b.value}
        assert {k: np.asarray(v).tobytes() for k, v in values.items()} == \
            {k: np.asarray(v).tobytes() for k, v in want.items()}
        assert a.warnings == b.warnings


@pytest.mark.parametrize("release", [True, False])
def test_a_hessians_trace_and_backward_pass_hold_what_a_rule_reads(release):
    # z[i] = x*i: the trace writes each update into z's array, and the traced backward pass
    # records each step's cotangent with one element zeroed, which no rule reads: with release,
    # a handful of n-element arrays stay on the tape, where 2n did (n forward, n backward)
    from gradcalc.api import _hessian_at
    from gradcalc.session import quiet, trace_source
    from gradcalc.tape import WATCHED_ELEMENTS
    n = WATCHED_ELEMENTS  # (smaller arrays are never freed: see tape.WATCHED_ELEMENTS)
    src = f"z = zeros({n})\nfor i in range({n}) {{\n  z[i] = x*i\n}}\nsum(sin(z))"
    tr = quiet(trace_source)(src, {"x": 0.01}, 10**8, release=release)
    h = _hessian_at(tr, None, None, release=release)
    i = np.arange(n)
    np.testing.assert_allclose(h["x"]["x"], -np.sum(i * i * np.sin(0.01 * i)), rtol=1e-12)
    held = sum(np.size(v) == n for v in tr.builder.values.values() if v is not None)
    assert held < 10 if release else held > 2 * n - 10


def test_release_frees_what_no_rule_reads_and_keeps_the_names(watch_every_array):
    from gradcalc.session import quiet, trace_source
    from gradcalc.transforms import backward
    source, at = _RELEASED["an RNN"]
    tr = quiet(trace_source)(source, at, 10**8, release=True)
    values = tr.builder.values
    # a step records W @ h, X[t], U @ X[t], their sum, + b, tanh, ^2 and sum: the rules read
    # X[t] (U @ X[t]'s) and tanh's value (tanh's, ^2's and the next step's W @ h's)
    freed = [eq.prim.name for eq in tr.tape.equations if values[eq.out] is None]
    assert len(freed) == 4 * 5
    kept = [eq.prim.name for eq in tr.tape.equations if values[eq.out] is not None and eq.prim.name != "sum"]
    assert kept.count("tanh") == 4 and kept.count("index") == 4
    assert all(values[v] is not None for v in tr.tape.names.values())
    names = {n: tr.tape.names[n] for n in ("W", "U", "b")}
    found = quiet(backward)(tr.builder, tr.tape.equations, {tr.tape.names["loss"]: np.float64(1.0)},
                            list(names.values()), eager=True)
    r = gradcalc.grad(source, at=at, wrt=list(names))
    assert all(found[v].tobytes() == r[n].tobytes() for n, v in names.items())


@pytest.mark.parametrize("g_shape, xshape, axis, keepdims", [
    ((), (128, 32), None, False), ((3,), (3, 4), 1, False), ((1, 4), (3, 4), 0, True), ((2, 1, 4), (2, 5, 4), 1, True),
    ((), (), None, False), ((4,), (3, 4), 0, False),
    # a NumPy scalar summed over every axis: the view _unreduce makes directly (empty axes too)
    ((), (0, 3), None, False), ((), (2, 3, 4), None, False), ((), (7,), 0, False), ((), (2, 3), (0, 1), False)])
def test_a_sums_cotangent_is_numpys_broadcast_view(g_shape, xshape, axis, keepdims):
    # (the eager pass's view, made by reshape's and broadcast_to's eager forms without their calls)
    g = np.float64(1.25) if not g_shape else _RNG.standard_normal(g_shape)
    params = P.reduce_sum.normalize([xshape], P._UNLIMITED, axis=axis, keepdims=keepdims)
    got = P.reduce_sum.vjp[0](g, None, None, **params)
    kept = tuple(1 if i - len(xshape) in params["axes"] else d for i, d in enumerate(xshape))
    want = np.broadcast_to(np.reshape(g, kept), xshape)
    assert np.shape(got) == want.shape and np.array_equal(got, want)
    assert np.asarray(got).tobytes() == want.tobytes()  # (bit for bit)
    if want.ndim:
        assert got.strides == want.strides and not got.flags.writeable


@pytest.mark.parametrize("safe", [True, False])
def test_matmuls_rules_on_arrays_are_the_products_numpy_makes(safe):
    a, b, g = _RNG.standard_normal((5, 3)), _RNG.standard_normal((3, 4)), _RNG.standard_normal((5, 4))
    rules = P.matmul.vjp if safe else P.matmul.plain_vjp
    da, db = rules[0](g, a @ b, a, b, nda=2, ndb=2), rules[1](g, a @ b, a, b, nda=2, ndb=2)
    _same(da, _general(P.matmul, g, b.T, safe=True) if safe else np.matmul(g, b.T))
    _same(db, _general(P.matmul, a.T, g, safe=True) if safe else np.matmul(a.T, g))
    g[0, 0] = 0.0
    b[0, 0] = np.inf  # a safe product's zero cotangent meets an inf: its term is 0
    assert np.isfinite(P.matmul.vjp[0](g, None, a, b, nda=2, ndb=2)[0, 0])


@pytest.mark.parametrize("call", [lambda x: P.index(x, idx=(1,)), lambda x: P.reshape(x, shape=(3, 2)),
                                  lambda x: P.transpose(x, axes=(1, 0)), lambda x: P.broadcast_to(x, shape=(4, 2, 3))])
def test_what_rearranges_finite_elements_is_finite_and_warns_only_where_a_value_is_made(call):
    # keeps_finite: the tracer skips its look after index, reshape, transpose and broadcast_to
    x = np.array([[1.7e308, -1.7e308, 5e-324], [0.0, -0.0, 1.0]])
    assert np.isfinite(call(x)).all()
    assert all(p.keeps_finite for p in (P.index, P.reshape, P.transpose, P.broadcast_to))
    # a -inf made by log is noted there, once, not again where it is rearranged
    r = gradcalc.grad("y = log(x)\nz = transpose(reshape(y, (3, 2)))\nsum(z[0] * 2)", at={"x": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]})
    assert r.warnings == ["'log' at line 1, column 5 produced -inf",
                          "the derivative of 'log' at line 1, column 5 produced inf"]


def _safe_mul_in_numpy(g, d):
    """safe_mul written out: g * d, and 0 where g or d is 0 and the product is nan."""
    r = np.multiply(g, d)
    fix = ((np.asarray(g) == 0) | (np.asarray(d) == 0)) & np.isnan(r)
    return np.where(fix, 0.0, r) if fix.any() else r


def _awkward(shape):
    """Normal values with zeros, infinities and nans strewn in (an elementwise rule's hard cases)."""
    x = _RNG.standard_normal(shape)
    flat = x.reshape(-1)
    flat[::7] = 0.0
    flat[3::11] = np.inf
    flat[5::13] = -np.inf
    flat[2::17] = np.nan
    return x


# (derivative written out, primitive): the factor each rule multiplies its cotangent by
_DERIVATIVES = [(lambda ans, x: 1 - ans * ans, P.tanh), (lambda ans, x: ans, P.exp), (lambda ans, x: np.cos(x), P.sin),
                (lambda ans, x: 0.5 / ans, P.sqrt), (lambda ans, x: 1 / x, P.log), (lambda ans, x: ans * (1 - ans), P.sigmoid)]


def _seed(kind, shape):
    """A cotangent of shape: an array of awkward values, the cotangent of a sum (a read-only view
    of one value: 'view 0.0', 'view inf'...), or a NumPy scalar."""
    if kind == "array":
        return _awkward(shape)
    if kind.startswith("view"):
        return P.reduce_sum.vjp[0](np.float64(kind[5:]), None, None, axes=tuple(range(-len(shape), 0)),
                                   keepdims=False, xshape=shape)
    return np.float64(2.5)


_SEEDS = ["array", "view 0.0", "view -2.5", "view 1.0", "view inf", "view nan", "scalar"]


@pytest.mark.parametrize("deriv, prim", _DERIVATIVES)
@pytest.mark.parametrize("shape", [(6,), (64, 32), (3, 0)])
@pytest.mark.parametrize("seed", _SEEDS)
def test_an_elementwise_rule_on_arrays_is_safe_mul_written_out(deriv, prim, shape, seed):
    # (_unary's rule calls safe_mul's function directly on two arrays of one shape, a view of
    # one value as that value: the products, the zeros where a zero met inf or nan, and the
    # nans elsewhere are NumPy's own)
    x = np.abs(_awkward(shape))  # (log and sqrt of 0 and inf: their factors are inf and 0)
    ans = prim.impl(x)
    g = _seed(seed, shape)
    want = _safe_mul_in_numpy(g, deriv(ans, x))
    _same(prim.vjp[0](g, ans, x), want)
    _same(prim.jvp[0](g, ans, x), want)


@pytest.mark.parametrize("shape", [(5,), (40, 30)])
@pytest.mark.parametrize("seed", _SEEDS)
def test_x_squared_rule_on_arrays_is_safe_mul_of_twice_x(shape, seed):
    x, g = _awkward(shape), _seed(seed, shape)
    _same(P.pow_const.vjp[0](g, x * x, x, p=2.0), _safe_mul_in_numpy(g, x + x))


@pytest.mark.parametrize("p", [2.0, 3.0, 0.5])
def test_x_to_the_p_rule_under_a_seed_of_one_is_its_derivative_in_an_array_of_its_own(p):
    # (the cotangent of sum(x^p) repeats the loss's seed, 1: the derivative made for the product
    # is returned as it is, with the bits 1.0 * p x^(p-1) has in NumPy, and nothing it was given
    # is written into or handed back)
    x = _awkward((40, 30))
    kept = x.copy()
    g = _seed("view 1.0", x.shape)
    got = P.pow_const.vjp[0](g, x ** p, x, p=p)
    with np.errstate(all="ignore"):
        want = np.multiply(1.0, 2.0 * x if p == 2 else p * np.power(x, p - 1))
    _same(got, want)
    assert got.flags.writeable and not np.may_share_memory(got, x) and not np.may_share_memory(got, g)
    assert x.tobytes() == kept.tobytes()
    # an operand's own array is not such a derivative: x * y's rule makes a new array of y
    assert not np.may_share_memory(P.mul.vjp[0](g, x * x, kept, x), x)


def test_x_squared_rule_on_complex_values_is_safe_mul_of_twice_x():
    # (a complex view's value is no real scalar to multiply 2x by in place)
    x = _awkward((40, 30)) * (1 + 0.5j)
    for g in (np.broadcast_to(np.array([[2.5 - 1j]]), x.shape), np.broadcast_to(np.array([[2.5]]), x.shape)):
        _same(P.pow_const.vjp[0](g, x * x, x, p=2.0), _safe_mul_in_numpy(g, x + x))


@pytest.mark.parametrize("x_shape, y_shape", [((40, 30), (40, 30)), ((40, 30), (30,)), ((1, 30), (40, 30)), ((6,), (6,))])
@pytest.mark.parametrize("seed", _SEEDS)
def test_mul_rules_on_arrays_are_safe_mul_written_out(x_shape, y_shape, seed):
    # (the cotangent has the product's shape; where an operand is smaller, the engine sums it)
    x, y = _awkward(x_shape), _awkward(y_shape)
    g = _seed(seed, np.broadcast_shapes(x_shape, y_shape))
    _same(P.mul.vjp[0](g, x * y, x, y), _safe_mul_in_numpy(g, y))
    _same(P.mul.vjp[1](g, x * y, x, y), _safe_mul_in_numpy(g, x))


@pytest.mark.parametrize("g_shape, d_shape", [((40, 30), (40, 30)), ((40, 30), (30,)), ((1, 30), (40, 30)), ((), (40, 30)),
                                              ((1025,), (1025,)), ((40, 1), (1, 30)), ((3,), (3,))])
@pytest.mark.parametrize("view", [False, True])
def test_safe_multiply_on_arrays_is_safe_mul_written_out(g_shape, d_shape, view):
    # (_zero_nans looks at r, or at what an operand repeats where that is smaller: either way the
    # same values; here operands of their own, broadcast views, a smaller operand, a 0-d array)
    g, d = _awkward(g_shape), _awkward(d_shape)
    if view:
        g = np.broadcast_to(g, np.broadcast_shapes(g_shape, d_shape))
    for a, b in ((g, d), (d, g), (np.abs(g) + 1, d), (g, np.abs(d) + 1)):
        _same(P.safe_multiply(a, b), _safe_mul_in_numpy(a, b))
        _same(P.safe_mul(a, b), _safe_mul_in_numpy(a, b))


def _rnn_by_hand(W, U, b, X, h0):
    """The gradient of sum over t of sum(h_t^2), h_t = tanh(W h_{t-1} + U X_t + b), by
    backpropagation through time written out in NumPy, in the order of gradcalc's rules."""
    hs = [h0]
    for x in X:
        hs.append(np.tanh(W @ hs[-1] + U @ x + b))
    dW = dU = db = dh = None
    for t in range(len(X) - 1, -1, -1):
        h = hs[t + 1]
        dh = 2 * h if dh is None else dh + 2 * h
        dz = dh * (1 - h * h)
        parts = (dz @ hs[t].T, dz @ X[t].T, dz.sum(axis=1, keepdims=True))
        dW, dU, db = parts if dW is None else (dW + parts[0], dU + parts[1], db + parts[2])
        dh = W.T @ dz
    return dW, dU, db


_RNN = "h = h0\nloss = 0\nfor t in range(6) {\n  h = tanh(W @ h + U @ X[t] + b)\n  loss += sum(h^2)\n}\nloss"


def test_an_rnns_gradient_is_backpropagation_through_time_by_hand_bit_for_bit():
    # 40×30 arrays: more than the 1,024 elements below which safe_mul looks at products at once
    at = {"W": _RNG.standard_normal((40, 40)) / 6, "U": _RNG.standard_normal((40, 5)), "b": _RNG.standard_normal((40, 1)),
          "X": _RNG.standard_normal((6, 5, 30)), "h0": _RNG.standard_normal((40, 30))}
    r = gradcalc.grad(_RNN, at=at, wrt=["W", "U", "b"])
    for name, want in zip(("W", "U", "b"), _rnn_by_hand(**at)):
        _same(r[name], want)
    assert r.warnings == []


@pytest.mark.parametrize("seed", _SEEDS)
def test_rules_that_reuse_their_own_temporaries_write_into_nothing_they_were_given(seed):
    # (tanh's slope is subtracted in the square it made; x^2's product by a nonzero finite scalar
    # is written into the 2x it made: the operands, the value and the cotangent stay as they were)
    x = _awkward((40, 30))
    ans = np.tanh(x)
    g = _seed(seed, x.shape)
    kept = [a.copy() for a in (x, ans, np.asarray(g))]
    _same(P.tanh.vjp[0](g, ans, x), _safe_mul_in_numpy(g, 1 - ans * ans))
    _same(P.pow_const.vjp[0](g, x * x, x, p=2.0), _safe_mul_in_numpy(g, x + x))
    for before, now in zip(kept, (x, ans, np.asarray(g))):
        _same(now.copy(), before)


def _depends_before(equations, sources) -> set:
    """transforms.depends as it was (the oracle): each equation unpacked."""
    live = set(sources)
    for out, prim, args, _, _ in equations:
        if not live.isdisjoint(args) and prim.differentiable and prim.vjp is not None:
            live.add(out)
    return live


_SAMPLES = sorted(str(p) for p in Path(__file__).parents[1].glob("samples/*.grad"))


@pytest.mark.parametrize("path", _SAMPLES + ["rnn"])
def test_the_passes_over_the_tape_find_what_they_found_before(path):
    # (depends reads an equation's fields by index)
    if path == "rnn":
        at = {"W": np.eye(3) / 2, "U": np.ones((3, 2)), "b": np.ones((3, 1)), "X": np.ones((6, 2, 4)),
              "h0": np.zeros((3, 4))}
        tr = session.trace_source(_RNN, at, 10**6)
    else:
        tr = session.trace_source(Path(path).read_text(), {}, 10**6)
    eqs, names = tr.tape.equations, tr.tape.names
    for name, var in names.items():
        assert depends(eqs, [var]) == _depends_before(eqs, [var]), name


@pytest.mark.parametrize("shape", [(), (1,), (3,), (2, 3)])
def test_tanh_slope_in_place_is_one_minus_the_square_on_any_rank(shape):
    ans = np.tanh(np.linspace(-2, 2, int(np.prod(shape))).reshape(shape))
    got = P._one_minus_square(ans, None)  # (a 0-d array too: its square is a NumPy scalar)
    assert np.asarray(got).tobytes() == np.asarray(1 - ans * ans).tobytes()


# ==========================================================================
# Looks for nan and inf on arrays: the first operation to make one is warned, in order
# ==========================================================================

# (program, point, its warnings, worked out by hand: the first operation to make nan or inf at
# each place, in the order they ran.  Where a look is saved (one at a sum, a product or x^2
# would show its operands' nan and inf too), a value that does not carry them (x^0, x^-1,
# 1 / x, a comparison, an empty sum or product, tanh) must not hide an operand's.)
_NONFINITE_PROGRAMS = [
    # inf made by a product, -inf by log, both found by sums; then a scalar division's inf
    ("a = x * 1e300\nb = a * a\nc = log(x - x)\nd = sum(c) + sum(b)\ns = 1 / (sum(x) - 3)\nd + s", {"x": [1.0, 2.0]},
     ["'*' at line 2, column 7 produced inf", "'log' at line 3, column 5 produced -inf",
      "'/' at line 5, column 7 produced inf"]),
    # the sum's overflow in a loop's second step, the matrix product before it finite (then inf
    # goes round: no more warnings)
    ("h = x\nfor i in range(4) {\n  h = W @ h + h\n}\nsum(tanh(h))", {"W": [[0.5, 0], [0, 0.5]], "x": [1e308, 1e308]},
     ["'+' at line 3, column 13 produced inf"]),
    # values that do not carry an operand's inf: x^0, x^-1, 1 / x, a comparison, an empty sum or
    # product (a bias (1, 2) against a (0, 2) array; a matrix product with no columns), tanh
    ("a = x * 1e300 * 1e10\nsum(a^0)", {"x": [1.0, 2.0]}, ["'*' at line 1, column 15 produced inf"]),
    ("a = x * 1e300 * 1e10\nsum(a^-1) + sum(a < 0)", {"x": [1.0, 2.0]}, ["'*' at line 1, column 15 produced inf"]),
    ("a = x * 1e300 * 1e10\nsum(1 / a)", {"x": [1.0, 2.0]}, ["'*' at line 1, column 15 produced inf"]),
    ("a = x * 1e300 * 1e10\nsum(a + z)", {"x": [[1.0, 2.0]], "z": np.zeros((0, 2))},
     ["'*' at line 1, column 15 produced inf"]),
    ("a = x * 1e300 * 1e10\nsum(a @ z)", {"x": [[1.0], [2.0]], "z": np.zeros((1, 0))},
     ["'*' at line 1, column 15 produced inf"]),
    ("a = x * 1e300 * 1e10\nsum(tanh(a))", {"x": [1.0, 2.0]}, ["'*' at line 1, column 15 produced inf"]),
    # two places in one statement: a product's inf and exp's beside it, summed
    ("a = (x * 1e300) * (x * 1e300) + exp(x * 1000)\nsum(a)", {"x": [1.0, 2.0]},
     ["'*' at line 1, column 17 produced inf", "'exp' at line 1, column 33 produced inf"]),
]


@pytest.mark.parametrize("src, at, warned", _NONFINITE_PROGRAMS)
def test_the_first_operation_to_make_nan_or_inf_is_warned_in_order(src, at, warned):
    source = f"input {', '.join(at)}\n{src}"
    assert gradcalc.evaluate(source, at=at).warnings == [_shifted(w) for w in warned]
    assert gradcalc.grad(source, at=at, wrt=["x"]).warnings[:len(warned)] == [_shifted(w) for w in warned]


def _shifted(warning: str) -> str:
    """A warning of a program written without its input line, for the program with it."""
    head, _, rest = warning.partition(" at line ")
    line, _, tail = rest.partition(",")
    return f"{head} at line {int(line) + 1},{tail}"

