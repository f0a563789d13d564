"""Eager array calls: the registry's shortcuts give what the general path gives.

An eager derivative pass runs its rules on NumPy arrays.  Primitive.__call__ then skips the
general path for two arrays of equal shape (a broadcasting primitive's plain function), one
array (a primitive without parameters), or a primitive's own ``eager`` form (matmul of two
matrices, reshape, broadcast_to, sum_to).  The reference here is the general path itself
(``normalize`` then ``impl``) and NumPy's own functions: the values must agree bit for bit,
views must be views with NumPy's strides, and bad shapes must give the general path's errors.

The eager backward pass also sums a variable's cotangent contributions in place once it made
the sum itself (transforms._accumulate); nothing it handed on, or was handed, may change.
"""
from __future__ import annotations

import numpy as np
import pytest

import gradcalc
from gradcalc import primitives as P
from gradcalc.errors import ShapeError

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
