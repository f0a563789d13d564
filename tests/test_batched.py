"""Hessians and Jacobians from the eager batched passes (core/batched.py): every expected value
is a closed form written out here, never gradcalc's own output.  The programs put the identity
bands through slices, sums, broadcasting, stacks, fixed matrices and non-linear primitives,
with wrt sets of vectors, matrices and scalars together, in both modes of the Jacobian."""
from __future__ import annotations

import re

import numpy as np
import pytest

import gradcalc
from gradcalc.errors import LimitError

RNG = np.random.default_rng(18)


def close(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("n", [1, 2, 7, 40])
def test_random_quadratic_form(n):
    A, b, x = RNG.standard_normal((n, n)), RNG.standard_normal(n), RNG.standard_normal(n)
    r = gradcalc.hessian("0.5 * x @ A @ x + b @ x", at={"A": A, "b": b, "x": x}, wrt=["x"])
    close(r["x"]["x"], 0.5 * (A + A.T))


@pytest.mark.parametrize("n", [2, 5, 30])
def test_quartic_form_with_neighbour_products(n):
    # f = sum(c x^4) + s^2, s = sum(x[1:] x[:-1]): H = diag(12 c x^2) + 2 ds ds^T + 2 s N,
    # ds_i = x_(i-1) + x_(i+1), N the ones beside the diagonal
    c, x = RNG.standard_normal(n), RNG.standard_normal(n)
    r = gradcalc.hessian("sum(c * x^4) + sum(x[1:] * x[:-1])^2", at={"c": c, "x": x}, wrt=["x"])
    s = np.sum(x[1:] * x[:-1])
    ds = np.zeros(n)
    ds[1:] += x[:-1]
    ds[:-1] += x[1:]
    N = np.eye(n, k=1) + np.eye(n, k=-1)
    close(r["x"]["x"], np.diag(12 * c * x**2) + 2 * np.outer(ds, ds) + 2 * s * N)


def test_band_meets_a_nonlinear_primitive():
    # f = sum(sin(u)), u_i = x_i x_(i+1): each term's second derivatives by hand
    x = RNG.standard_normal(9)
    r = gradcalc.hessian("sum(sin(x[1:] * x[:-1]))", at={"x": x})
    H = np.zeros((9, 9))
    for i in range(8):
        a, b = x[i], x[i + 1]
        u = a * b
        H[i, i] += -np.sin(u) * b * b
        H[i + 1, i + 1] += -np.sin(u) * a * a
        H[i, i + 1] += np.cos(u) - np.sin(u) * a * b
        H[i + 1, i] += np.cos(u) - np.sin(u) * a * b
    close(r["x"]["x"], H)


def test_band_through_a_fixed_matrix_and_tanh():
    # f = sum_i x_i tanh(a_i . x): H_kl = s_k A_kl + s_l A_lk - 2 sum_i x_i t_i s_i A_ik A_il
    n = 6
    A, x = RNG.standard_normal((n, n)), RNG.standard_normal(n)
    r = gradcalc.hessian("sum(tanh(A @ x) * x)", at={"A": A, "x": x}, wrt=["x"])
    t = np.tanh(A @ x)
    s = 1 - t * t
    H = s[:, None] * A + (s[:, None] * A).T - 2 * np.einsum("i,ik,il->kl", x * t * s, A, A)
    close(r["x"]["x"], H)


def test_broadcasting_outer_and_a_scalar():
    # f = s * sum(outer(x, y)^2) = s X Y with X = sum(x^2), Y = sum(y^2)
    x, y, s = RNG.standard_normal(4), RNG.standard_normal(3), 1.7
    r = gradcalc.hessian("s * sum(outer(x, y)^2)", at={"x": x, "y": y, "s": s})
    X, Y = np.sum(x * x), np.sum(y * y)
    close(r["x"]["x"], 2 * s * Y * np.eye(4))
    close(r["y"]["y"], 2 * s * X * np.eye(3))
    close(r["x"]["y"], 4 * s * np.outer(x, y))
    close(r["y"]["x"], 4 * s * np.outer(y, x))
    close(r["s"]["s"], 0.0)
    close(r["s"]["x"], 2 * Y * x)
    close(r["x"]["s"], 2 * Y * x)
    assert r["s"]["x"].shape == (4,) and r["x"]["s"].shape == (4,) and r["s"]["s"].shape == ()


def test_stacks_and_sums():
    # stack([x, x^2]) squared and summed: sum(x^2) + sum(x^4)
    x = RNG.standard_normal(5)
    r = gradcalc.hessian("sum(stack([x, x^2])^2) + sum(x)^2", at={"x": x})
    close(r["x"]["x"], np.diag(2 + 12 * x**2) + 2 * np.ones((5, 5)))


def test_wide_and_tall_wrt_sets():
    # W (3, 4), v (4,), s scalar: f = sum(W^3) + s * sum(W @ v) + s^2 sum(v^2)
    W, v, s = RNG.standard_normal((3, 4)), RNG.standard_normal(4), 0.6
    r = gradcalc.hessian("sum(W^3) + s * sum(W @ v) + s^2 * sum(v^2)", at={"W": W, "v": v, "s": s})
    HWW = np.zeros((3, 4, 3, 4))
    for i in range(3):
        for j in range(4):
            HWW[i, j, i, j] = 6 * W[i, j]
    HWv = np.zeros((3, 4, 4))
    for i in range(3):
        HWv[i, :, :] = s * np.eye(4)
    close(r["W"]["W"], HWW)
    close(r["W"]["v"], HWv)
    close(r["v"]["W"], HWv.transpose(2, 0, 1))
    close(r["W"]["s"], np.broadcast_to(v, (3, 4)))
    close(r["s"]["W"], np.broadcast_to(v, (3, 4)))
    close(r["v"]["v"], 2 * s * s * np.eye(4))
    close(r["v"]["s"], W.sum(axis=0) + 4 * s * v)
    close(r["s"]["s"], 2 * np.sum(v * v))
    # a tall set (one vector) and a wide one (many scalars) of the same function
    a, b, c = 0.3, -1.2, 2.0
    r = gradcalc.hessian("a^2 * b + b^2 * c + sin(c * a)", at={"a": a, "b": b, "c": c})
    want = {("a", "a"): 2 * b - c * c * np.sin(c * a), ("a", "b"): 2 * a,
            ("a", "c"): np.cos(c * a) - c * a * np.sin(c * a), ("b", "b"): 2 * c, ("b", "c"): 2 * b,
            ("c", "c"): -a * a * np.sin(c * a)}
    for (i, j), w in want.items():
        close(r[i][j], w)
        close(r[j][i], w)


def test_entries_no_tangent_reaches_are_positive_zero():
    # README: off the bands, +0 (a dense pass could have written -0 in 0 - sum(x^2))
    H = gradcalc.hessian("0 - sum(x^2)", at={"x": [1.0, 2.0, 3.0]})["x"]["x"]
    close(H, -2 * np.eye(3))
    assert not np.signbit(H[~np.eye(3, dtype=bool)]).any()


def test_zero_tangent_contributes_zero_at_a_nan_trap():
    H = gradcalc.hessian("sum(where(x > 0, sqrt(x), 0))", at={"x": [0.0, 4.0]})["x"]["x"]
    close(H, np.diag([0.0, -0.25 * 4.0 ** -1.5]))


def test_batched_pass_over_the_element_budget_is_refused():
    # each tangent of outer(x, ones(50)) is 50 x 50, and the pass carries 50 of them at once
    with pytest.raises(LimitError, match="Hessian"):
        gradcalc.hessian("sum(outer(x, ones(50))^2)", at={"x": np.ones(50)}, max_elements=100_000)
    r = gradcalc.hessian("sum(outer(x, ones(50))^2)", at={"x": np.ones(50)}, max_elements=200_000)
    close(r["x"]["x"], 100 * np.eye(50))


MODES = ["rev", "fwd"]


@pytest.mark.parametrize("mode", MODES)
def test_jacobian_of_tanh_of_a_matrix_product(mode):
    A, x = RNG.standard_normal((6, 4)), RNG.standard_normal(4)
    r = gradcalc.jacobian("tanh(A @ x)", at={"A": A, "x": x}, mode=mode)
    h = np.tanh(A @ x)
    close(r["_"]["x"], (1 - h * h)[:, None] * A)
    JA = np.zeros((6, 6, 4))
    for i in range(6):
        JA[i, i, :] = (1 - h[i] ** 2) * x
    close(r["_"]["A"], JA)


@pytest.mark.parametrize("mode", MODES)
def test_jacobian_of_neighbour_differences_is_banded(mode):
    x = RNG.standard_normal(8)
    J = gradcalc.jacobian("x[1:] - x[:-1]^2", at={"x": x}, mode=mode)["_"]["x"]
    want = np.zeros((7, 8))
    for i in range(7):
        want[i, i + 1] = 1
        want[i, i] = -2 * x[i]
    close(J, want)
    assert not np.signbit(J[want == 0]).any()  # off the bands: +0


@pytest.mark.parametrize("mode", MODES)
def test_jacobian_of_an_outer_product_and_a_scalar(mode):
    x, y, s = RNG.standard_normal(3), RNG.standard_normal(2), -0.4
    r = gradcalc.jacobian("s * outer(x, y)", at={"x": x, "y": y, "s": s}, mode=mode)
    Jx, Jy = np.zeros((3, 2, 3)), np.zeros((3, 2, 2))
    for i in range(3):
        for j in range(2):
            Jx[i, j, i] = s * y[j]
            Jy[i, j, j] = s * x[i]
    close(r["_"]["x"], Jx)
    close(r["_"]["y"], Jy)
    close(r["_"]["s"], np.outer(x, y))


@pytest.mark.parametrize("mode", MODES)
def test_jacobian_of_a_matrix_input_and_a_scalar_output(mode):
    M, v = RNG.standard_normal((3, 3)), RNG.standard_normal(3)
    r = gradcalc.jacobian("v @ M @ v + sum(sin(v))", at={"M": M, "v": v}, mode=mode)
    close(r["_"]["M"], np.outer(v, v))
    close(r["_"]["v"], (M + M.T) @ v + np.cos(v))


def test_jacobian_batched_pass_over_the_element_budget_is_refused():
    with pytest.raises(LimitError, match="Jacobian"):
        gradcalc.jacobian("sum(outer(x, ones(50)), axis=1)", at={"x": np.ones(50)}, mode="fwd",
                          max_elements=100_000)


@pytest.mark.parametrize("call", ["jacobian fwd", "jacobian rev", "hessian"])
def test_a_batched_pass_holds_only_its_live_values(call):
    # 30 layers of a 200-wide map: each batched tangent is 200 x 200 (320 KB); a pass that kept
    # every one until it ended would peak above 25 MB, one that drops each after its last use
    # at a few of them
    import tracemalloc
    rng = np.random.default_rng(3)
    layers = "".join("h = tanh(W @ h) + h\n" for _ in range(30))
    src = "input x[200], W[200, 200]\nh = x\n" + layers + ("sum(h^2)" if call == "hessian" else "h")
    at = {"x": rng.standard_normal(200), "W": rng.standard_normal((200, 200)) / 20}
    tracemalloc.start()
    try:
        if call == "hessian":
            gradcalc.hessian(src, at=at, wrt=["x"])
        else:
            gradcalc.jacobian(src, at=at, wrt=["x"], mode=call.split()[1])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, peak / 2**20


# --------------------------------------------------------------------------
# The speed work of issue 18 on these passes (w6): each shortcut against an oracle outside it.

SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e308, -1e308, 5e-324, -2.5e-310, 3.0, -7.25])


def same_bits(got, want):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape
    assert np.array_equal(np.ascontiguousarray(got).view(np.uint64), np.ascontiguousarray(want).view(np.uint64))


# Special values the folds must treat as the rules do: zeros of each sign, inf, nan, the largest
# and a subnormal; and the inputs of a program among them, by the names it uses.
SPECIAL_C = np.array([0.0, 1.5, -np.inf, 2.0, np.nan, -0.0, 3.0, 1e300])
SPECIAL_X = np.array([0.5, -0.0, 2.0, -1.0, 0.0, 4.0, -3.0, 1e-310])


def inputs_of(src: str, **values) -> dict:
    """The values among x, c (the special values), C (a 2×8 matrix) and values that src names."""
    at = {"x": SPECIAL_X, "c": SPECIAL_C, "C": np.arange(16.0).reshape(2, 8) - 3, **values}
    return {k: v for k, v in at.items() if re.search(rf"\b{k}\b", src)}


@pytest.fixture
def writes(monkeypatch) -> list:
    """What batched._writable answers, call by call, while the test runs."""
    from gradcalc import batched
    answers = []
    real = batched._writable
    monkeypatch.setattr(batched, "_writable", lambda *a: answers.append(real(*a)) or answers[-1])
    return answers


def same_bits_but_a_nans_sign(got, want):
    """Bit for bit, but for the sign of a nan: which of two nans a sum keeps depends on the
    layout of its operands (NumPy's vector loops take contiguous rows, a strided view goes
    element by element), and a fold copies an element's rows where the rules keep a view."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    same_bits(np.where(np.isnan(got), np.nan, got), np.where(np.isnan(want), np.nan, want))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (inf and nan on purpose; gradcalc runs under np.errstate)
def test_square_derivative_is_twice_x_bit_for_bit():
    # x^2's rule computes 2x as x + x: NumPy's 2.0 * x is the oracle, overflow (1e308), -0,
    # subnormals, inf and nan included, eagerly (grad) and traced (the Hessian's backward pass)
    got = gradcalc.grad("sum(x^2)", at={"x": SPECIAL})["x"]
    same_bits(got, 2.0 * SPECIAL)
    from gradcalc import primitives as P
    same_bits(P._pow_const_rule(np.ones(SPECIAL.size), None, SPECIAL, 2.0), 2.0 * SPECIAL)
    x = RNG.standard_normal(6)
    # d2/dx2 sum(c x^2) = 2c (the rule's x + x differentiated again)
    c = RNG.standard_normal(6)
    same_bits(gradcalc.hessian("sum(c * x^2)", at={"c": c, "x": x}, wrt=["x"])["x"]["x"],
              np.diag(2.0 * c) + 0.0)


def _safe_product_oracle(g, d):
    r = np.multiply(g, d)
    return np.where(((np.asarray(g) == 0) | (np.asarray(d) == 0)) & np.isnan(r), 0.0, r)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (inf and nan on purpose; gradcalc runs under np.errstate)
@pytest.mark.parametrize("size", [1, 3, 199, 1024, 1025, 5000])
def test_safe_multiply_against_numpy(size):
    # safe_mul's product: g * d, with 0 where a zero met inf or nan; every order of its looks
    # (a scalar factor alone, a small product, the values a broadcast view repeats) against
    # the NumPy formula, on finite, zero, inf and nan entries
    from gradcalc import primitives as P
    rng = np.random.default_rng(size)
    base = np.concatenate([SPECIAL, rng.standard_normal(size)])[:size]
    g, d = rng.permutation(base), rng.permutation(base)
    cases = [(g, d), (g, np.float64(0.0)), (g, np.float64(np.inf)), (g, np.float64(2.5)),
             (np.float64(0.0), d), (np.float64(np.nan), d), (g, np.broadcast_to(np.float64(0.0), (size,))),
             (np.broadcast_to(np.array([3.0]), (size,)), d), (g, np.abs(d) + 1.0), (g[::-1], d[::-1])]
    for a, b in cases:
        same_bits(P.safe_multiply(a, b), _safe_product_oracle(a, b))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (inf and nan on purpose; gradcalc runs under np.errstate)
def test_all_finite_against_numpy():
    from gradcalc.tape import all_finite
    rng = np.random.default_rng(5)
    for n in [0, 1, 2, 199, 4096, 40000]:
        v = rng.standard_normal(n)
        for bad in [None, np.inf, -np.inf, np.nan, 1e200]:  # 1e200: finite, its square overflows
            w = v.copy()
            if bad is not None and n:
                w[rng.integers(n)] = bad
            for view in (w, w[::2], w[::-1], w.reshape(-1, 1)[:, 0]):
                assert all_finite(view) == bool(np.isfinite(view).all()), (n, bad)
    assert all_finite(np.float64(1.0)) and not all_finite(np.float64(np.nan))


def test_broadcast_of_a_traced_scalar_is_numpys_view():
    # a Hessian's seed (a NumPy scalar) broadcast by sum's rule: the view made directly
    from gradcalc import primitives as P
    from gradcalc.tape import Builder
    b = Builder()
    for v in (np.float64(-0.0), np.float64(2.5), np.array(np.nan), np.array([7.0])):
        t = P.broadcast_to(b.const(v), shape=(3, 4))
        want = np.broadcast_to(v, (3, 4))
        same_bits(t.value, want)
        assert not t.value.flags.writeable


@pytest.mark.parametrize("src, hess", [
    ("sum(x^3)", lambda x: np.diag(6 * x)),
    ("mean(x^3)", lambda x: np.diag(6 * x) / x.size),
    ("prod(x)", lambda x: np.array([[0.0 if i == j else np.prod(np.delete(x, [i, j])) for j in range(x.size)]
                                    for i in range(x.size)])),
    ("max(x^2)", lambda x: np.diag((np.arange(x.size) == np.argmax(x * x)) * 2.0)),
    ("sum(M^2 * x[0])", None),
])
def test_reductions_to_a_scalar(src, hess):
    # the VJP of a reduction over every axis broadcasts the cotangent with no reshape first:
    # Hessians against closed forms, and reverse-mode Jacobians (a batch of cotangents of no
    # axes) against forward mode's (which never run that VJP)
    x, M = RNG.standard_normal(5), RNG.standard_normal((2, 3))
    at = {"x": x, "M": M} if "M" in src else {"x": x}
    r = gradcalc.hessian(src, at=at, wrt=["x"])
    close(r["x"]["x"], np.zeros((5, 5)) if hess is None else hess(x))  # (sum(M^2 x0): linear in x)
    grad_src = f"g = {src}\ng * x"
    rev = gradcalc.jacobian(grad_src, at=at, wrt=list(at), mode="rev")
    fwd = gradcalc.jacobian(grad_src, at=at, wrt=list(at), mode="fwd")
    for w in at:
        close(rev["_"][w], fwd["_"][w])


def _tangent_rows(src, at, fold: bool):
    """The forward pass over the backward pass of a Hessian (as api.hessian runs it), its
    equations' tangents folded by JVP_FOLDS (fold=True) or all made by the rules."""
    from gradcalc.batched import JVP_FOLDS, BatchedBuilder
    from gradcalc.session import trace_source
    from gradcalc.transforms import backward, forward, needed
    with np.errstate(all="ignore"):
        tr = trace_source(src, at, 10**8)
        b, names = tr.builder, tr.tape.names
        wrt = list(tr.tape.inputs)
        grads = backward(b, tr.tape.equations, {names[tr.tape.output]: b.const(1.0)}, [names[w] for w in wrt],
                         check=False)
        keep = {g.var for g in grads.values() if g is not None}
        n = sum(tr.value(w).size for w in wrt)
        batch = BatchedBuilder(b, n, what="a test's pass")
        seeds = batch.seeds([tr.value(w).shape for w in wrt])
        tan = forward(b, tuple(needed(b.equations, keep)), {names[w]: s for w, s in zip(wrt, seeds)},
                      eager=True, check=False, keep=keep, fold=JVP_FOLDS if fold else None)
        return [None if grads[names[w]] is None or grads[names[w]].var not in tan
                else np.array(batch.rows(tan[grads[names[w]].var])) for w in wrt]


@pytest.mark.parametrize("src", [
    "sum(100*(x[1:] - x[:-1]^2)^2 + (1 - x[:-1])^2)",
    "sum(sin(x[1:] * x[:-1])) + sum(x * c)^2",
    "sum(c * x * x) - sum(x[2:] * x[:-2] * c[1:-1])",
    "sum((x[1:] * c[:-1] - x[:-1]) * (x * c)[1:])",
    "y = x; z = -y[1:] + y[:-1]; sum(z * z * c[1:]) + sum(y * 0 * c)",
    "sum(x[::2] * x[1::2]) + sum(x * inf * 0)",
    "sum(x * x * s) + s * sum(x)",
    "sum((C + x)^2 * C) + sum((s + x) * x)",
    "sum(x^3 * c) + sum(x^0.5) + sum(x^1 * c) + sum((x * c)^0) + sum(x^-2) + s^3",
])
def test_folded_tangents_are_the_rules_tangents(src):
    # JVP_FOLDS makes, for neg, copy, add, index, index_put, mul, safe_mul and pow_const on bands,
    # the tangents the registry's JVP rules make: compared bit for bit with the pass that runs the
    # rules on every equation (factors with zeros, inf and nan among them; x[::2] is no band fold)
    at = inputs_of(src, s=1.25)  # (C + x: a tangent broadcast)
    folded, ruled = _tangent_rows(src, at, True), _tangent_rows(src, at, False)
    assert len(folded) == len(ruled)
    for f, r in zip(folded, ruled):
        assert (f is None) == (r is None)
        if f is not None:
            same_bits(f, r)


@pytest.mark.parametrize("src", [
    "s = 0\nfor i in range(8) {\n  s = s + x[i] * x[i] * c[i]\n}\ns",
    "s = 0\nfor i in range(6) {\n  s = s + x[i] * x[i] * c[i]\n}\ns",
    # (-0.0 factors: sums of -0.0 on the selection, which the next read's sum makes +0.0)
    "s = 0\nfor i in range(8) {\n  s = s + x[i] * x[i] * -0.0 * c[i]\n}\ns",
    "s = 0\nfor i in range(8) {\n  s = s + exp(x[i] * c[i]) * x[i] * -0.0\n}\ns",
    "s = 0\nfor i in range(7) {\n  s = s + x[i] * x[i + 1] * c[i + 1]\n}\ns",
    "s = 0\nfor i in range(6) {\n  s = s + sum(x[i:i + 3] * x[i:i + 3]) * c[i]\n}\ns",
    "s = x[0] * 0\nfor i in range(8) {\n  s = s - x[i] * x[(i * 3) % 8] * -0.0\n}\ns + sum(x * x)",
    "s = 0\nfor i in range(2) {\n  for j in range(8) {\n    s = s + C[i, j] * x[j] * C[i, 7 - j]\n  }\n}\ns",
    "s = 0\nfor i in range(8) {\n  s = s + x[i] * x[i] * c[i]\n}\ns * x[3]",
    # index updates: z[i] = e (the rules' index_update(t_z, 0.0) + index_update(zeros, t_e)) and,
    # backward, g with the selection zeroed; a scalar written to a slice, a row of a matrix
    "z = x * 0\nfor i in range(8) {\n  z[i] = x[i] * x[i] * c[i]\n}\nsum(z * z)",
    "z = x * 0\nfor i in range(8) {\n  z[i] = x[7 - i] * -0.0 * c[i]\n}\nsum(z * x)",
    "z = x * 0\nfor i in range(8) {\n  z[i] = x[i] * -0.0\n}\nsum(z * c)",  # (0.0 + -0.0 on the selection)
    "z = x * 0\nfor i in range(4) {\n  z[2*i:2*i + 2] = x[i] * c[i]\n}\nsum(z * z * x)",
    # (rows of a matrix: a row of the tangent is a view whose copy could change the order of a
    # later sum, so it is left a view, and the rows it reads are not written into)
    "M = C * 0\nfor i in range(2) {\n  M[i, :] = C[i, :] * x * c\n}\nsum(M * M)",
    # (a row multiplied as a matrix: the bits of a product depend on its operands' layout)
    "M = C * 0\nfor i in range(2) {\n  M[i, :] = C[i, :] * x\n  s = M[i, :] @ M[1 - i, :]\n}\ns + sum(M)",
    # (zeros left for later, backward: each element written twice, so that the first write's
    # cotangent is read where a zero covers it; a slice among the elements; one cotangent zeroed
    # by two updates, z's and w's, through the sum's rule that hands both the same tangent)
    "z = x * 0\nfor k in range(2) {\n  for i in range(8) {\n    z[i] = x[i] * x[i] * c[i] * (k + 1)\n  }\n}\nsum(z * z)",
    "z = x * 0\nfor i in range(8) {\n  z[i] = x[i] * c[i]\n}\nz[2:5] = x[0:3] * x[5]\nz[6] = z[6] * x[6]\nsum(z * z * c)",
    "z = x * 1\nw = x * 2\nfor i in range(4) {\n  z[i] = x[i] * c[i]\n  w[i + 4] = x[i]^2\n}\nsum((z + w)^2)",
    "u = x * 1\nv = x * 2\nu[0] = x[1] * c[1]\nv[1] = x[2]^2\nz = u + v\nfor i in range(3) {\n  z[i + 3] = x[i]^2\n}\n"
    "sum(z * z * c)",
    # (the sum's rule hands one cotangent, its zeros left for later, to u and to v: u's update
    # zeroes element 3 of it, and v's product reads it in full after; neither writes the other's)
    "v = x * c\nu = x * 1\nu[3] = x[0] * x[6]\ns = u + v\ns[2] = x[3] * c[3]\nsum(s * s * c)",
    # (rows written, Z[i] = [...]: the cotangent's row read as a view of rows whose zeros wait;
    # each row written twice; a recurrence over rows)
    "Z = zeros((8, 2))\nfor i in range(8) {\n  Z[i] = [x[i] * c[i], x[i]^2]\n}\nsum(Z * Z)",
    "Z = zeros((8, 2))\nfor k in range(2) {\n  for i in range(8) {\n    Z[i] = [x[i] * (k + 1), x[7 - i] * c[i]]\n  }\n}\n"
    "sum(Z * Z)",
    "Z = zeros((8, 2))\nZ[0] = [x[0], 1]\nfor i in range(7) {\n  Z[i + 1, :] = Z[i] * x[i] + [c[i], x[i]]\n}\nsum(Z * Z)",
    # (columns, Z[:, i] = [...], written once and twice, and unit slices, z[i:i + 1]: recorded
    # by their keys as elements and rows are; a column and a row zeroed in one record)
    "Z = zeros((2, 8))\nfor i in range(8) {\n  Z[:, i] = [x[i] * c[i], x[i]^2]\n}\nsum(Z * Z)",
    "Z = zeros((2, 8))\nfor k in range(2) {\n  for i in range(8) {\n    Z[:, i] = [x[i] * (k + 1), x[7 - i] * c[i]]\n  }\n}\n"
    "sum(Z * Z)",
    "z = x * 0\nfor i in range(7) {\n  z[i + 1:i + 2] = z[i:i + 1] * x[i] + c[i]\n}\nsum(z * z)",
    "Z = zeros((2, 8))\nfor i in range(8) {\n  Z[:, i] = [x[i], c[i] * x[i]]\n  Z[i % 2] = Z[i % 2] * x[i]\n}\nsum(Z * Z)",
    "Z = zeros((2, 8))\nfor i in range(8) {\n  Z[:, i] = [x[i] * c[i], x[i]^2]\n}\nZ[0] = x * 2\nsum(Z * Z)",
    # (slices wider than one element on one lattice, z[2*i:2*i + 2]: recorded by their starts and
    # width, written twice, read back as a recurrence, in two axes at once, beside a whole axis;
    # starts one apart, z[i:i + 2], overlap and leave the record's pattern; a read of another
    # width covers zeros)
    "z = zeros(16)\nfor k in range(2) {\n  for i in range(8) {\n    z[2*i:2*i + 2] = [x[i] * (k + 1), x[7 - i] * c[i]]\n"
    "  }\n}\nsum(z * z)",
    "z = zeros(16)\nz[0:2] = x[0:2]\nfor i in range(7) {\n  z[2*i + 2:2*i + 4] = z[2*i:2*i + 2] * x[i] + c[i]\n}\nsum(z * z)",
    "Z = zeros((4, 6))\nfor i in range(2) {\n  for j in range(3) {\n    Z[2*i:2*i + 2, 2*j:2*j + 2] = x[i + j] * C[:, 0:2] * c[j]\n"
    "  }\n}\nsum(Z * Z * x[5])",
    "Z = zeros((8, 3))\nfor i in range(4) {\n  Z[2*i:2*i + 2, 1] = x[i] * c[2*i:2*i + 2]\n  Z[2*i + 1, :] = Z[2*i + 1, :] * x[i]\n}\n"
    "sum(Z * Z)",
    "z = zeros(9)\nfor i in range(8) {\n  z[i:i + 2] = [x[i] * c[i], x[i]^2]\n}\nsum(z * z)",
    "z = zeros(12)\nfor i in range(4) {\n  z[3*i:3*i + 3] = x[i] * x[4:7] * c[i]\n  s = sum(z[0:6] * x[i])\n}\nsum(z * z) + s * s",
    # (gathers of distinct elements, x[[i, j]] and take(x, i), whose cotangents add_at adds in place;
    # one that reads an element twice, x[[i, i]], runs the rules; an update of a gathered pair)
    "s = 0\nfor i in range(7) {\n  s = s + sum(x[[i, i + 1]] * x[[i + 1, i]] * c[[i, 7 - i]])\n}\ns",
    "y = cumsum(x)\ns = 0\nfor i in range(7) {\n  s = s + sum(y[[i, i + 1]] * y[[i + 1, i]] * c[[i, 7 - i]])\n}\ns",
    "s = 0\nfor i in range(8) {\n  s = s + take(x, i) * x[i] * c[(i + 5) % 8]\n}\ns + sum(x * x)",
    "s = 0\nfor i in range(2) {\n  s = s + sum(C[i, [0, 3, 5]] * x[[1, 4, 6]] * x[[i, 7, 2]])\n}\ns",
    "z = x * 0\nfor i in range(4) {\n  z[[2*i + 1, 2*i]] = [x[i] * c[i], x[i]^2]\n}\nsum(z * z * c)",
    # (z[i] += e: the rules' t_z + index_add(zeros, t_e), 0.0 + t_e on the selection; a scalar
    # added to a slice; -0.0 on both sides; nan and inf among the factors)
    "z = x * 1\nfor i in range(8) {\n  z[i] += x[i] * x[i] * c[i]\n}\nsum(z * z)",
    "z = x * -0.0\nfor i in range(8) {\n  z[i] += x[7 - i] * -0.0 * c[i]\n}\nsum(z * x)",
    "z = zeros(16)\nfor i in range(8) {\n  z[2*i:2*i + 2] += x[i] * c[i]\n  z[i] += z[i + 1] * x[i]\n}\nsum(z * z)",
    # (a recurrence: each step reads the element the step before wrote)
    "y = x * 0\nfor i in range(7) {\n  y[i + 1] = y[i] + c[i] * sin(y[i]) * x[i]\n}\nsum(y * y * c)",
    # (the copy made at last keeps the -0.0s of the rows it copied, which a read's sum then makes +0.0)
    "z = x * c\na = z[5] * x[6]\nfor i in range(4) {\n  z[i] = x[i] * x[i]\n}\nsum(z * z * c * -0.0) + a * a",
])
def test_a_loops_reads_add_in_place_what_the_rules_add(src, writes):
    # The traced backward pass adds each read's cotangent with add_at, and the Hessian's batched
    # pass writes it into the rows it made (O(selection), not O(size), a read: a loop over n
    # elements cost O(n^3)); the tangents are the rules' (t_acc + index_put(t_v)) bit for bit:
    # -0.0 (made +0.0 off the selection by the rules' sum), nan and inf among the factors, two
    # nans meeting (the rules run), reads of a 2-D input, a result read again (s * x[3])
    from gradcalc.tape import COUNTS_REFERENCES
    at = inputs_of(src)
    folded = _tangent_rows(src, at, True)
    if "M[i, :]" not in src and "x[[i, i + 1]]" not in src:  # (rows were written into, not copied,
        assert any(writes) == COUNTS_REFERENCES  # where that is safe; x's gathers stay bands: _fold_gather)
    ruled = _tangent_rows(src, at, False)
    assert len(folded) == len(ruled)
    for f, r in zip(folded, ruled):
        assert (f is None) == (r is None)
        if f is not None:
            same_bits(f, r)


# A random program (the loops hunt's generator, seed 510914, reduced) whose Hessian's folded pass
# differed from the rules' in the last bit when a fold's rows were copied out of a view (so that
# the rows could be written into while the view lived): the copy of a transpose, contiguous
# where the view was not, changed a later matrix product's order of summation.  A view is kept
# now, and keeps its rows from being written into (see batched._writable).
_LAYOUT_CASE = """def f0(a, vb) {
    acc = 0.2
    if (sum(tanh(M)) > 0.603) { acc = acc }
    return (acc + dot(vb, vb))
}
s = (x / (1.5 + (x ^ 2)))
w = (0.5 * v)
M = (0.1 * A)
t1 = sum(A, axis=0)
w[0] = tanh((1.593524 - sum(M)))
s = tanh((s + (-0.02)))
s /= (1.1 + sin(x))
for row2 in outer(t1, t1) {
    w = tanh((w + ((v + x) * grad(f0, argnum=1)((-1.681), A[2, :]))))
}
for i3 in range(3, 16, 1) {
    w = ((0.7 * w) + (0.3 * tanh(v)))
}
for row4 in outer(w, M[(-3), :]) {
    M[3, :] = sin(where(((A @ w) > (-0.95)), (M @ w), (v + row4)))
}
for i6 in range(41) {
    if (y <= 1.99) {
        w[((i6 + 2) % 4)] += tanh((-(s - (-0.3))))
    }
    if (grad(f0)(f0(A[(3 - (i6 % 4)), 1], t1), t1) > (-0.242033)) {
        w[(i6 % 4)] = tanh(where((minimum(A[2, (i6 % 4)], (-1.627)) > 1.22), ((-1.131114) if (y > 0.29) else v[1]), (0.498 if ((i6 % 2) <= 4.5) else x)))
    }
}
vo = (w + sum(M, axis=0))
out = (s + sum((vo * vo)))
out"""


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("src, v0, v8, compare", [
    # (an adversarial review's: a transposed view of a row-written matrix in a product, whose
    # copy would change the product's order of summation: a view stays a view; a nan of each
    # sign meeting in a sum of an element's rows, which a fold copies: only the nan's sign moves)
    ("M = A * 1\nM[0, 0] = A[0, 1] * v[0]\nM[1, 0] = A[1, 1] * v[1]\nsum((transpose(M) @ v)^2)", None, None,
     same_bits),
    ("z = v * 1\nfor i in range(9) {\n  z[i] = z[i] * v[i]\n}\nsum(z * z[::-1])", np.nan, -np.nan,
     same_bits_but_a_nans_sign),
])
def test_a_fold_keeps_views_of_matrix_rows_and_copies_an_elements_rows(src, v0, v8, compare):
    rng = np.random.default_rng(1)
    at = {"A": rng.normal(size=(20, 20)), "v": rng.normal(size=20)} if "A" in src else {"v": rng.normal(size=9)}
    if v0 is not None:
        at["v"][0], at["v"][8] = v0, -np.abs(v8)  # (-nan: the sign bit set)
    with np.errstate(all="ignore"):
        folded, ruled = _tangent_rows(src, at, True), _tangent_rows(src, at, False)
    for f, r in zip(folded, ruled):
        if f is not None:
            compare(f, r)


def test_a_random_loop_programs_folded_hessian_is_the_rules_bit_for_bit():
    rng = np.random.default_rng(510914 + 10**6)  # (the generator's own draws)
    at = {"x": rng.uniform(-1.5, 1.5), "y": rng.uniform(-1.5, 1.5), "v": rng.normal(size=4),
          "A": rng.normal(size=(4, 4)) * 0.5}
    with np.errstate(all="ignore"):
        folded, ruled = _tangent_rows(_LAYOUT_CASE, at, True), _tangent_rows(_LAYOUT_CASE, at, False)
    for f, r in zip(folded, ruled):
        assert (f is None) == (r is None)
        if f is not None:
            same_bits(f, r)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("idx", [(3,), (slice(2, 7),), (slice(9, 1, -3),), (-1,),
                                 # (distinct integer arrays: gathers, x[[i, i + 1]], a mask's nonzero)
                                 (np.array([4, 1, 6]),), (np.array([[0], [5]]),), (np.array(2),)])
def test_add_at_is_the_sum_with_index_put_bit_for_bit(idx):
    # the traced backward pass's add_at(acc, v) stands for acc + index_put(v): the same bits with
    # -0.0, nans of both signs, infinities and subnormals in either operand, batched or not
    from gradcalc import primitives as P
    neg_nan = -np.abs(np.float64(np.nan))
    acc = np.concatenate([SPECIAL, [neg_nan]])
    for _ in range(20):
        a = RNG.permutation(acc)
        v = RNG.choice(acc, np.shape(a[idx]))
        same_bits(P._add_at(a, v, idx, a.shape, v.ndim), a + P._index_put(v, idx, a.shape, v.ndim))
        rows = np.stack([RNG.permutation(acc) for _ in range(3)])  # (a batch axis on both, then on v alone)
        vs = RNG.choice(acc, (3,) + np.shape(a[idx]))
        same_bits(P._add_at(rows, vs, idx, a.shape, v.ndim), rows + P._index_put(vs, idx, a.shape, v.ndim))
        same_bits(P._add_at(a, vs, idx, a.shape, v.ndim), a + P._index_put(vs, idx, a.shape, v.ndim))


@pytest.mark.parametrize("idx, distinct", [
    ((3, slice(None)), True), ((np.array([2, 0, 1]),), True), ((np.array([2, 0, 2]),), False),
    ((1, np.array([0, 2])), True), ((np.array([[0], [1]]), np.array([0, 2])), True),
    ((np.array([[0], [1]]), np.array([1, 1])), False),
    ((np.array([0, 1]), np.array([1, 1])), True), ((np.array([0, 0]), np.array([1, 1])), False),
    ((np.array([0, 1]), slice(None), np.array([0, 1])), False),  # (apart: NumPy moves their axes first)
    ((slice(None), np.array([0, 1]), 2), True), ((None, 1), False), ((np.array([0.0]),), False),
    # (in order, as a mask's nonzero arrays are: decided without sorting; out of order and tied)
    ((np.array([0, 0, 1, 1]), np.array([0, 2, 0, 1])), True), ((np.array([0, 0, 1]), np.array([2, 2, 0])), False),
    ((np.array([1, 0, 1]), np.array([0, 2, 0])), False), ((np.array([1, 0, 1]), np.array([0, 2, 1])), True),
])
def test_distinct_index_tells_which_gathers_select_each_element_once(idx, distinct):
    from gradcalc.tape import distinct_index
    assert distinct_index(idx) == distinct


def test_the_hessian_of_a_loop_of_gathers_is_its_closed_form():
    # s = sum_i sum(x[[i, i + 1]]^3) (and take(x, i)^3 + x[[i + 1]]^3): element j is read twice
    # (once at either end), so the Hessian is diag(6 x_j c_j), c the reads: 1, 2, ..., 2, 1
    n = 60
    x = np.linspace(-1, 2, n + 1)
    reads = np.full(n + 1, 2.0)
    reads[[0, -1]] = 1
    for body in ("s = s + sum(x[[i, i + 1]]^3)", "s = s + take(x, i)^3 + sum(x[[i + 1]]^3)"):
        src = f"s = 0\nfor i in range({n}) {{\n  {body}\n}}\ns"
        H = np.asarray(gradcalc.hessian(src, at={"x": x})["x"]["x"])
        np.testing.assert_allclose(H, np.diag(6 * x * reads), rtol=1e-14, atol=0)
    # and y_i = sum(x[[i, i + 1]]^2) in reverse mode: 2 x_i and 2 x_(i+1) on its row
    src = f"y = zeros({n})\nfor i in range({n}) {{\n  y[i] = sum(x[[i, i + 1]]^2)\n}}\ny"
    J = np.asarray(gradcalc.jacobian(src, at={"x": x}, mode="rev")["_"]["x"])
    want = np.zeros((n, n + 1))
    want[np.arange(n), np.arange(n)] = 2 * x[:-1]
    want[np.arange(n), np.arange(n) + 1] = 2 * x[1:]
    np.testing.assert_array_equal(J, want)


def test_the_hessian_of_a_loop_that_writes_elements_is_its_closed_form():
    # z[i] = x[i]^2 a step, then sum(z^2) = sum(x^4): the Hessian is diag(12 x^2); and z[i] = x*i
    # for a scalar x, sum(sin(z)): d2/dx2 = -sum(i^2 sin(x i))
    n = 50
    x = RNG.standard_normal(n)
    src = f"input x[{n}]\nz = zeros({n})\nfor i in range({n}) {{\n  z[i] = x[i]^2\n}}\nsum(z * z)"
    np.testing.assert_allclose(np.asarray(gradcalc.hessian(src, at={"x": x})["x"]["x"]), np.diag(12 * x * x),
                               rtol=1e-13, atol=0)
    src = f"input x\nz = zeros({n})\nfor i in range({n}) {{\n  z[i] = x*i\n}}\nsum(sin(z))"
    i = np.arange(n)
    np.testing.assert_allclose(float(gradcalc.hessian(src, at={"x": 0.3})["x"]["x"]),
                               -np.sum(i * i * np.sin(0.3 * i)), rtol=1e-12)


def test_a_loops_zeroed_cotangents_are_copied_once(monkeypatch):
    # The backward pass zeroes the cotangent's element i at each step while g[i], a view of its
    # rows, is alive: the Hessian's tangent pass leaves the zeros for later, reads the other
    # elements as views, and copies the rows once, where they are read in full (none here)
    from gradcalc import batched
    made = []
    real = batched._zeroed_now
    monkeypatch.setattr(batched, "_zeroed_now", lambda slot: made.append(1) or real(slot))
    n = 40
    x = np.linspace(-1, 2, n)
    h = gradcalc.hessian(f"z = zeros({n})\nfor i in range({n}) {{\n  z[i] = x[i]^2\n}}\nsum(z * z)", at={"x": x})
    close(h["x"]["x"], np.diag(12 * x * x))
    assert len(made) <= 1


def test_the_hessian_of_a_recurrence_stored_in_an_array_is_its_closed_form(monkeypatch):
    # y[i + 1] = y[i] + x[i]^2: y_k = 0.5 + sum_{j<k} x_j^2, f = sum_k y_k^2, so
    # d2f/dx_j dx_l = 8 x_j x_l #{k > max(j, l)} + [j == l] 4 sum_{k > j} y_k.  Backward, each step
    # reads the cotangent's element i + 1, zeroes it and adds y[i]'s into element i: the rows are
    # written in place (the element's rows are a copy), not copied a step
    from gradcalc import batched
    from gradcalc.tape import COUNTS_REFERENCES
    in_place = []
    real = batched._zeroed_now

    def zeroed_now(slot):  # (the rows' id, not the rows: a reference would keep them from being written)
        rows = id(slot.zeroed[0].rows)
        made = real(slot)
        in_place.append(id(made) == rows)  # (a copy is made while the rows are alive: another id)
        return made
    monkeypatch.setattr(batched, "_zeroed_now", zeroed_now)
    n = 30
    x = np.linspace(-1, 1.5, n)
    src = f"y = zeros({n + 1})\ny[0] = 0.5\nfor i in range({n}) {{\n  y[i + 1] = y[i] + x[i]^2\n}}\nsum(y^2)"
    h = gradcalc.hessian(src, at={"x": x})["x"]["x"]
    y = 0.5 + np.concatenate([[0.0], np.cumsum(x * x)])
    later = n - np.maximum.outer(np.arange(n), np.arange(n))  # #{k in 1..n: k > max(j, l)}
    tail = np.array([y[j + 1:].sum() for j in range(n)])
    close(h, 8 * np.outer(x, x) * later + np.diag(4 * tail))
    assert in_place and all(in_place) == COUNTS_REFERENCES


def test_the_hessian_of_a_loop_that_reads_elements_is_its_closed_form():
    # Rosenbrock written as a loop over x[i], x[i + 1]: its Hessian, tridiagonal, by hand:
    # d2/dx_i^2 = 1200 x_i^2 - 400 x_(i+1) + 2 (i < n-1) + 200 (i > 0); d2/dx_i dx_(i+1) = -400 x_i
    n = 60
    x = RNG.standard_normal(n)
    src = f"input x[{n}]\nf = 0\nfor i in range({n - 1}) {{\n  f += 100*(x[i+1] - x[i]^2)^2 + (1 - x[i])^2\n}}\nf"
    want = np.zeros((n, n))
    for i in range(n - 1):
        want[i, i] += 1200 * x[i] ** 2 - 400 * x[i + 1] + 2
        want[i + 1, i + 1] += 200
        want[i, i + 1] = want[i + 1, i] = -400 * x[i]
    got = np.asarray(gradcalc.hessian(src, at={"x": x})["x"]["x"])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("src", [
    "sum(100*(x[1:] - x[:-1]^2)^2 + (1 - x[:-1])^2)",
    "sum(sin(x[1:] * x[:-1])) + sum(x * c)^2",
    "y = x; z = -y[1:] + y[:-1]; sum(z * z * c[1:]) + sum(y * 0 * c)",
    "sum(x * x * s) + s * sum(x)",
    "s * s * s",
])
def test_needed_and_frees_against_a_walk_over_every_use(src):
    # transforms.needed_and_frees (the Hessian's tangent pass: which equations, and which tangents
    # each one is the last to read): its equations are needed()'s, and each variable read or made
    # is freed once, by the equation that uses it last, counted here over every use; the outputs
    # never.  Then forward(free=...) gives the tangents forward(keep=...) gives, bit for bit.
    from gradcalc.batched import JVP_FOLDS, BatchedBuilder
    from gradcalc.session import trace_source
    from gradcalc.transforms import backward, forward, needed, needed_and_frees
    at = {"x": RNG.standard_normal(8), "c": RNG.standard_normal(8), "s": 1.25}
    at = {k: v for k, v in at.items() if re.search(rf"\b{k}\b", src)}
    with np.errstate(all="ignore"):
        tr = trace_source(src, at, 10**8)
        b, names = tr.builder, tr.tape.names
        wrt = list(tr.tape.inputs)
        grads = backward(b, tr.tape.equations, {names[tr.tape.output]: b.const(1.0)},
                         [names[w] for w in wrt], check=False)
        keep = {g.var for g in grads.values() if g is not None}
        kept, free = needed_and_frees(b.equations, keep)
        assert kept == list(needed(b.equations, keep)) and len(free) == len(kept)
        last = {}
        for i, eq in enumerate(kept):
            for v in (eq.out, *eq.args):
                last[v] = i
        freed = [(v, i) for i, vs in enumerate(free) for v in vs]
        assert sorted(freed) == sorted((v, i) for v, i in last.items() if v not in keep)
        passes = []
        for how in ({"free": free}, {"keep": keep}):
            batch = BatchedBuilder(b, sum(tr.value(w).size for w in wrt), what="a test's pass")
            seeds = batch.seeds([tr.value(w).shape for w in wrt])
            tan = forward(b, kept, {names[w]: s for w, s in zip(wrt, seeds)}, eager=True, check=False,
                          fold=JVP_FOLDS, **how)
            passes.append({v: np.array(batch.rows(tan[v])) for v in keep if v in tan})
    assert passes[0].keys() == passes[1].keys() and passes[0]
    for v in passes[0]:
        same_bits(passes[0][v], passes[1][v])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (inf and nan on purpose; gradcalc runs under np.errstate)
def test_finite_band_against_the_written_out_rows():
    # BatchedBuilder.finite_band (a Hessian's rows known finite without a look at them): True
    # exactly when np.isfinite holds on every diagonal, and then the band written out is finite;
    # diagonals with inf, nan, values whose squares overflow (1e200, finite), subnormals; one
    # diagonal, several, offsets past either end (entries that fall outside the rows count too)
    from gradcalc.batched import BatchedBuilder, _Slot
    from gradcalc.tape import Builder, Tracer
    rng = np.random.default_rng(11)
    batch = BatchedBuilder(Builder(), 9, what="a test's pass")
    for offsets in ([0], [-1, 0, 1], [3, -8], [5]):
        for bad in [None, np.inf, -np.inf, np.nan, 1e200, 5e-324]:
            for where in range(len(offsets)):
                band = {k: rng.standard_normal(7) for k in offsets}
                if bad is not None:
                    band[offsets[where]][rng.integers(7)] = bad
                t = Tracer(batch, _Slot(None, (7,), band))
                got = batch.finite_band(Tracer(batch, _Slot(None, (7,), band)))
                assert got == all(np.isfinite(d).all() for d in band.values()), (offsets, bad)
                assert not got or np.isfinite(batch.rows(t)).all()
    assert not batch.finite_band(batch.const(np.ones(3)))  # (no band: the rows must be looked at)


def _hessian_warnings_as_before(src, at):
    """The warnings of a non-finite Hessian as api._hessian_at named them before it recorded
    the backward pass a second time for them: one recording, logged (the old code, kept as
    the oracle)."""
    from gradcalc.api import _second_derivative_of
    from gradcalc.session import trace_source
    from gradcalc.transforms import backward, forward, needed
    with np.errstate(all="ignore"):
        tr = trace_source(src, at, 10**8)
        b, names = tr.builder, tr.tape.names
        wrt = list(tr.tape.inputs)
        log = []
        grads = backward(b, tr.tape.equations, {names[tr.tape.output]: b.const(1.0)}, [names[w] for w in wrt],
                         log=log, check=False)
        eqs = needed(b.equations, {g.var for g in grads.values() if g is not None})
        origin = {b.equations[k].out: b.op_name(eq.prim, eq.loc) for eq, first, end in log for k in range(first, end)}
        forward(b, eqs, {names[w]: np.ones(tr.value(w).shape) for w in wrt}, eager=True, check=True,
                describe=lambda e: _second_derivative_of(b, e, origin))
    return [w.message for w in tr.warnings]


@pytest.mark.parametrize("src, at", [
    ("sum(100*(x[1:] - x[:-1]^2)^2 + (1 - x[:-1])^2)", {"x": np.array([1.0, np.inf, 2.0, -1.0])}),
    ("sum(x^0.5 * c)", {"x": np.array([0.0, 4.0, 1.0]), "c": np.array([1.0, 2.0, 3.0])}),
    ("sum(log(x) * x) + s^3", {"x": np.array([0.0, 2.0]), "s": 1.5}),
    ("sum(x[1:] / x[:-1])", {"x": np.array([1.0, 0.0, 3.0, 2.0])}),
])
def test_nonfinite_hessian_names_the_second_derivative_as_before(src, at):
    # A Hessian with non-finite entries names the rule behind them from a second recording of the
    # backward pass (the usual, finite, call keeps no log): the same warnings, in the same order,
    # as the single logged recording made them
    got = gradcalc.hessian(src, at=at).warnings
    assert any("second derivative" in w for w in got)
    assert got == _hessian_warnings_as_before(src, at)


# -- jvp: the batched pass on one row -------------------------------------------------------
# gradcalc.jvp runs the forward pass on a batch of one tangent, so that a loop's index updates
# are written into the tangent the pass made (O(selection) a step, not a copy of the array),
# and records its trace freeing what no rule reads (so that the program's own z[i] = e writes
# into z's array).  Its tangent is the rules' tangent on the plain arrays, bit for bit, where no
# product sums (with one, within an ulp or two: see below).
_JVP_PROGRAMS = [
    "z = zeros(8)\nfor i in range(8) {\n  z[i] = x[i]^2 + x[i] * c[i]\n}\nsum(z * z)",
    "z = x * 0\nfor i in range(8) {\n  z[i] = x[7 - i] * -0.0 * c[i]\n}\nz",
    "z = zeros(8)\nfor i in range(8) {\n  z[i] = x[i] * -0.0\n}\nz * c",
    "z = zeros(8)\nfor i in range(4) {\n  z[2*i:2*i + 2] = x[i] * c[i]\n}\nsum(z * z * x)",
    "M = zeros((2, 8))\nfor i in range(2) {\n  M[i, :] = C[i, :] * x * c\n  s = M[i, :] @ M[1 - i, :]\n}\ns + sum(M)",
    "s = 0\nfor i in range(8) {\n  s = s + x[i] * x[i] * c[i]\n}\ns",
    "z = x * 1\nfor i in range(8) {\n  z[i] += z[(i + 3) % 8] * c[i]\n}\nsum(z @ transpose(C)) + mean(z)",
    "z = zeros(8)\nfor i in range(8) {\n  z[i] += x[i]^2 * c[i]\n  z[(i + 1) % 8] += -0.0 * x[i]\n}\nz",
    # (0.0 + t_e: a -0.0 added into zeros, and into -0.0, is +0.0)
    "z = zeros(8)\nfor i in range(8) {\n  z[i] += -0.0 * x[i]\n}\nz",
    "z = x * -0.0\nfor i in range(8) {\n  z[i] += -0.0 * x[i]\n}\nz",
    "[x[0] * c[1], -0.0 * x[1], 2, sum(x * c), x[3]] @ [1, 2, 3, 4, 5]",
    "concat([x * c, C[0, :], x[2:4]]) * 3",
    "einsum('ij,j,j->i', C, x, x * c)",
]


def _plain_jvp(src, at, tangent):
    """The forward pass of the registry's rules on plain arrays over a tape that keeps every value."""
    from gradcalc.session import trace_source
    from gradcalc.transforms import forward
    tr = trace_source(src, at, 10**8)
    names = tr.tape.names
    tan = forward(tr.builder, tr.tape.equations, {tr.tape.inputs[k]: v for k, v in tangent.items()},
                  eager=True, check=False)
    return np.asarray(tan[names[tr.tape.output]])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("src", _JVP_PROGRAMS)
def test_jvp_is_the_rules_tangent_on_plain_arrays_bit_for_bit(src, writes):
    from gradcalc.tape import COUNTS_REFERENCES
    at = inputs_of(src)
    tangent = {"x": np.array([1.0, -0.0, 0.5, 2.0, -1.0, 0.0, 3.0, 1e-300])}
    with np.errstate(all="ignore"):
        got = gradcalc.jvp(src, at=at, tangent=tangent)
        want = _plain_jvp(src, at, tangent)
    same_bits_but_a_nans_sign(got[got.of], want)  # (batched or not, NumPy's loops differ too)
    if "z[i] =" in src or "z[i] +=" in src:  # (the loop's updates were written into the tangent the pass made)
        assert any(writes) == COUNTS_REFERENCES


def test_jvp_of_a_loop_that_writes_elements_is_its_closed_form():
    n = 300
    x = np.linspace(-1, 2, n)
    src = f"z = zeros({n})\nfor i in range({n}) {{\n  z[i] = x[i]^2 * c + x[i]\n}}\nsum(z * z)"
    v = np.cos(np.arange(n))
    r = gradcalc.jvp(src, at={"x": x, "c": 1.5}, tangent={"x": v, "c": 0.25})
    z = 1.5 * x * x + x
    close(r[r.of], np.sum(2 * z * ((3 * x + 1) * v + x * x * 0.25)))



# -- the batched backward pass: a Jacobian in reverse mode -------------------------------------
# A read's cotangent is added into the rows a fold made, an update's zeros wait, an element's rows
# are a copy (batched.VJP_FOLDS): the rows the rules make, bit for bit but a nan's sign, and
# written in place where the loop reads.
def _reverse_rows(src, at, fold: bool):
    """The batched backward pass of a Jacobian in reverse mode (as session.jacobian_blocks runs
    it), with VJP_FOLDS or by the rules alone: each input's rows."""
    from gradcalc.batched import VJP_FOLDS, BatchedBuilder
    from gradcalc.session import trace_source
    from gradcalc.transforms import backward
    with np.errstate(all="ignore"):
        tr = trace_source(src, at, 10**8)
        b, names = tr.builder, tr.tape.names
        wrt = list(tr.tape.inputs)
        shape = tr.value(tr.tape.output).shape
        batch = BatchedBuilder(b, max(1, int(np.prod(shape))), what="a test's pass")
        (seed,) = batch.seeds([shape])
        found = backward(b, tr.tape.equations, {names[tr.tape.output]: seed}, [names[w] for w in wrt], eager=True,
                         check=False, fold=VJP_FOLDS if fold else None)
        return [None if found[names[w]] is None else np.array(batch.rows(found[names[w]])) for w in wrt]


_REVERSE_PROGRAMS = [
    "z = zeros(8)\nfor i in range(8) {\n  z[i] = x[i]^2 * c[i]\n}\nz",
    "z = x * 0\nfor i in range(8) {\n  z[i] = x[7 - i] * -0.0 * c[i]\n}\nz * x",
    "y = x * 0\nfor i in range(7) {\n  y[i + 1] = y[i] + c[i] * sin(y[i]) * x[i]\n}\ny",
    "z = x * 0\nfor k in range(2) {\n  for i in range(8) {\n    z[i] = x[i] * c[i] * (k + 1)\n  }\n}\nz",
    "z = x * 0\nfor i in range(4) {\n  z[2*i:2*i + 2] = x[i] * c[i]\n}\nz * x",
    "s = 0\nfor i in range(8) {\n  s = s + x[i] * x[i] * c[i]\n}\n[s, s * x[2]]",
    "Z = zeros((8, 2))\nfor i in range(8) {\n  Z[i] = [x[i] * c[i], x[i]^2]\n}\nZ",
    "Z = zeros((8, 2))\nZ[0] = [x[0], 1]\nfor i in range(7) {\n  Z[i + 1, :] = Z[i] * x[i] + [c[i], x[i]]\n}\nZ",
    "z = x * 1\nfor i in range(8) {\n  z[i] = z[i] * x[i]\n}\nz * z[::-1]",
    "v = x * c\nu = x * 1\nu[3] = x[0] * x[6]\ns = u + v\ns[2] = x[3] * c[3]\ns * c",
    "Z = zeros((2, 8))\nfor i in range(8) {\n  Z[:, i] = [x[i] * c[i], x[i]^2]\n}\nZ",
    "z = x * 0\nfor i in range(7) {\n  z[i + 1:i + 2] = z[i:i + 1] * x[i] + c[i]\n}\nz",
    # (slices wider than one element: on one lattice, written twice, in two axes; overlapping)
    "z = zeros(16)\nfor k in range(2) {\n  for i in range(8) {\n    z[2*i:2*i + 2] = [x[i] * (k + 1), x[7 - i] * c[i]]\n"
    "  }\n}\nz",
    "Z = zeros((4, 6))\nfor i in range(2) {\n  for j in range(3) {\n    Z[2*i:2*i + 2, 2*j:2*j + 2] = x[i + j] * C[:, 0:2] * c[j]\n"
    "  }\n}\nZ",
    "z = zeros(9)\nfor i in range(8) {\n  z[i:i + 2] = [x[i] * c[i], x[i]^2]\n}\nz",
    # (gathers: of distinct elements, folded; of one element twice, by the rules)
    "z = zeros(8)\nfor i in range(8) {\n  z[i] = sum(x[[i, (i + 3) % 8]]^2 * c[[i, 0]])\n}\nz",
    "z = zeros(8)\nfor i in range(8) {\n  z[i] = sum(x[[i, i]] * take(x, (i + 1) % 8))\n}\nz",
    # (an input written at every step: its cotangent sums a contribution a step)
    "z = x * 0\nfor i in range(8) {\n  z[i] = q\n  z[(i + 3) % 8] = q * x[i]\n}\nz * c",
]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("src", _REVERSE_PROGRAMS)
def test_a_reverse_jacobians_folded_rows_are_the_rules(src, writes):
    from gradcalc.tape import COUNTS_REFERENCES
    at = inputs_of(src, q=-1.25)
    folded = _reverse_rows(src, at, True)
    if "x[i] * x[i]" in src:  # (a loop that reads an element twice a step adds in place)
        assert any(writes) == COUNTS_REFERENCES
    ruled = _reverse_rows(src, at, False)
    assert len(folded) == len(ruled)
    for f, r in zip(folded, ruled):
        assert (f is None) == (r is None)
        if f is not None:
            same_bits_but_a_nans_sign(f, r)


def test_the_hessian_of_a_loop_that_writes_pairs_is_its_closed_form():
    # z[2i:2i + 2] = [x_i^2, x_i x_{i+1}]: f = sum x_i^4 + x_i^2 x_{i+1}^2 (indices mod n), whose
    # Hessian is 12 x_i^2 + 2 x_{i+1}^2 + 2 x_{i-1}^2 on the diagonal and 4 x_i x_{i+1} beside it
    n = 300
    x = np.linspace(-1, 2, n)
    src = (f"z = zeros({2 * n})\nfor i in range({n}) {{\n  z[2*i:2*i + 2] = [x[i]^2, x[i] * x[(i + 1) % {n}]]\n}}\n"
           "sum(z * z)")
    H = gradcalc.hessian(src, at={"x": x})["x"]["x"]
    after, before = np.roll(x, -1), np.roll(x, 1)
    want = np.diag(12 * x**2 + 2 * after**2 + 2 * before**2)
    i = np.arange(n)
    want[i, (i + 1) % n] += 4 * x * after
    want[(i + 1) % n, i] += 4 * x * after
    close(H, want)


def test_a_reverse_jacobian_of_a_loop_that_writes_elements_is_its_closed_form():
    n = 300
    x = np.linspace(-1, 2, n)
    src = f"z = zeros({n})\nfor i in range({n}) {{\n  z[i] = x[i]^2 * x[(i + 1) % {n}]\n}}\nz"
    J = gradcalc.jacobian(src, at={"x": x}, mode="rev")["_"]["x"]
    want = np.diag(2 * x * np.roll(x, -1))
    want[np.arange(n), (np.arange(n) + 1) % n] += x * x
    close(J, want)


@pytest.mark.parametrize("src", ["dot(x, x)", "x @ x", "z = x * 0\nfor i in range(8) {\n  z[i] = dot(x, x) + x[i]\n}\nz",
                                 "C @ (x * x)"])
def test_jvp_of_a_product_is_the_rules_tangent_within_an_ulp_or_two(src):
    # A batch of one row sums a product as a (1, n) @ (n,) product, in another order than the
    # plain pass's (n,) @ (n,) (an adversarial review: 1 ulp on dot(x, x)); the rules' tangent on
    # plain arrays, within a few ulp
    at = inputs_of(src, x=np.array([1, -2, 3, -0.5, 0.25, 1.5, -1, 2]))
    v = np.random.default_rng(0).normal(size=8)
    r = gradcalc.jvp(src, at=at, tangent={"x": v})
    np.testing.assert_allclose(r[r.of], _plain_jvp(src, at, {"x": v}), rtol=4 * np.finfo(float).eps, atol=0)


def test_the_hessian_of_a_ring_and_a_shifted_take_are_their_closed_forms(monkeypatch):
    # E = sum_i x_i x_(i-1) x_(i-2) (indices mod n, by roll): each pair of a term's three
    # variables has the third as its second derivative; and sum_j x_(j+1)^2 x_j by take; both
    # kept as bands of diagonals through the gathers and their adjoints (no dense rows)
    from gradcalc import batched
    folded = []
    real = batched._fold_gather
    monkeypatch.setattr(batched, "_fold_gather", lambda *a: folded.append(1) or real(*a))
    n = 40
    x = np.linspace(-1.5, 2, n)
    want = np.zeros((n, n))
    for i in range(n):
        term = (i, (i - 1) % n, (i - 2) % n)
        for a in term:
            for b in term:
                if a != b:
                    want[a, b] += x[[t for t in term if t not in (a, b)][0]]
    close(gradcalc.hessian("sum(x*roll(x,1)*roll(x,2))", at={"x": x})["x"]["x"], want)
    assert folded
    want = np.zeros((n, n))
    j = np.arange(n - 1)
    want[j + 1, j + 1] += 2 * x[j]
    want[j + 1, j] += 2 * x[j + 1]
    want[j, j + 1] += 2 * x[j + 1]
    close(gradcalc.hessian(f"sum(take(x, arange(1, {n}))^2 * x[:-1])", at={"x": x})["x"]["x"], want)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("src", [
    "sum(x*roll(x,1)*roll(x,2))", "sum(x * roll(x, -3)^2 * c)", "sum(take(x, [1, 2, 3, 4, 5, 6, 7, 0])^2 * c)",
    "sum(roll(x * c, 4) * x)", "sum(x[[7, 0, 1, 2, 3, 4, 5, 6]] * x * -0.0)", "sum(take(x, [3, 3, 4]) * x[0:3])",
    "y = roll(x, 2)\nsum(y[1:] * y[:-1]) + sum(roll(y, -1)^3 * c)", "sum(take(x, [7, 6, 5, 4, 3, 2, 1, 0]) * x)",
    "sum(roll(x, 1) * roll(x, 2) * roll(x, 5) * c)", "sum(x[[0, 2, 4, 6]] * x[[1, 3, 5, 7]])",
])
def test_gathers_of_bands_are_the_dense_passes_values(src, monkeypatch):
    # a gather or its adjoint that moves each element by one of a few offsets (roll's two, a
    # shifted take's one) keeps a band a band: the Hessian and both Jacobians hold the values of
    # the passes without that fold (dense rows), nan and inf where they are; a zero's sign may
    # differ (a band adds no +0.0 of other terms, see batched.py); eight moves stay dense
    from gradcalc import batched
    at = inputs_of(src)
    vector = src.replace("sum(", "(", 1) if src.startswith("sum(") else src

    def passes():
        return [gradcalc.hessian(src, at=at)["x"]["x"], gradcalc.jacobian(vector, at=at, mode="fwd")["_"]["x"],
                gradcalc.jacobian(vector, at=at, mode="rev")["_"]["x"]]
    with np.errstate(all="ignore"):
        folded = passes()
        monkeypatch.setattr(batched, "_moves", lambda *a: None)
        dense = passes()
    for f, d in zip(folded, dense):
        np.testing.assert_array_equal(f, d)
