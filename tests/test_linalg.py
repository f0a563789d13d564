"""Contractions and stacked linear algebra (issue 16): einsum and the functions over it,
stacks of matrices, multi-result built-ins, the factorisations (svd, qr, pinv), matrix_power,
cross, norm's orders, cumprod at zeros and --symbolic on matrices.  Expected values come from NumPy, closed forms
or finite differences computed here."""
from __future__ import annotations

import json

import numpy as np
import pytest

import gradcalc

from cli_run import ok, ok_json, run, user_error
from fdcheck import check_program


def _plain(*args) -> np.ndarray:
    return np.array(ok(*args, "-f", "plain").stdout.split(), dtype=float)


# ==========================================================================
# einsum
# ==========================================================================

def test_einsum_bilinear_gradient_is_a_plus_a_transpose_x():
    got = _plain("grad", "einsum('ij,j->i', A, x) @ x", "--at", "A=[[1,2],[3,4]],x=[1,-1]", "--wrt", "x")
    A, x = np.array([[1.0, 2], [3, 4]]), np.array([1.0, -1])
    np.testing.assert_allclose(got, (A + A.T) @ x)  # -3 -3
    assert list(got) == [-3.0, -3.0]


@pytest.mark.parametrize("src, ref", [
    ("einsum('ij,jk', A, B)", lambda A, B: np.einsum("ij,jk", A, B)),
    ("einsum('ji', A) + 0 * B", lambda A, B: np.einsum("ji", A)),
    ("einsum('ij,ij', A, B)", lambda A, B: np.einsum("ij,ij", A, B)),
    ("einsum('ii->i', A) + B[0]", lambda A, B: np.einsum("ii->i", A) + B[0]),
    ("kron(A, B)", np.kron),
    ("inner(A, B)", np.inner),
    ("vdot(A, B)", np.vdot),
    ("tensordot(A, B, axes=1)", lambda A, B: np.tensordot(A, B, 1)),
])
def test_contractions_match_numpy(src, ref):
    A, B = np.array([[1.0, 2], [3, 4]]), np.array([[1.0, 0], [2, 1]])
    got = _plain("eval", src, "--at", "A=[[1,2],[3,4]],B=[[1,0],[2,1]]")
    np.testing.assert_allclose(got, np.ravel(ref(A, B)))


@pytest.mark.parametrize("src, message", [
    ("einsum('ij,j', A)", "einsum: subscripts 'ij,j' name 2 operands, but 1 was given"),
    ("einsum('i.j', A)", "einsum: '.' may appear only as one '...' per term, in 'i.j'"),
    ("einsum('...i', A, A)", "einsum: subscripts '...i' name 1 operand, but 2 were given"),
    ("einsum('...ijk', A)", "einsum: operand 1 has shape (2, 2), but its subscripts '...ijk' name 3 axes "
     "besides '...'"),
    ("einsum('...i->i...i', A)", "einsum: output subscript 'i' is repeated in '...i->i...i'"),
    ("einsum('...i,...i', A, ones((3, 2)))", "einsum: the axes that '...' stands for do not broadcast in "
     "'...i,...i'"),
    ("einsum('...i->i', A)", "einsum: the output names no '...' for the 1 axis '...' stands for in "
     "'...i->i'"),
    ("einsum('ijk', A)", "einsum: operand 1 has shape (2, 2), but its subscripts 'ijk' name 3 axes"),
    ("einsum('ij,jk->m', A, A)", "einsum: output subscript 'm' is not among the operands' in 'ij,jk->m'"),
    ("einsum('ij->ii', A)", "einsum: output subscript 'i' is repeated in 'ij->ii'"),
    ("einsum('i1', A)", "einsum: subscripts 'i1' may hold only letters, ',' and one '->'"),
    ("einsum(A, A)", "einsum(): 'subscripts' must be a string such as 'ij,j->i'"),
    ("einsum('ij,ij', A, ones((3, 3)))", "einsum: 'i' has length 2 and 3 in 'ij,ij'"),
])
def test_einsum_subscripts_are_checked(src, message):
    r = user_error("eval", src, "--at", "A=[[1,2],[3,4]]")
    assert message in r.stderr, r.stderr


# SPEC §2.5: dot of N-D arrays is numpy.dot (a's last axis with b's second-to-last), not matmul
_DOT_SHAPES = [((3,), (3,)), ((), (2, 3)), ((2, 3), (3,)), ((3,), (3, 2)), ((2, 3), (3, 4)),
               ((2, 2, 3), (2, 3, 2)), ((2, 3), (4, 3, 2)), ((2, 2, 3), (3,)), ((3,), (2, 3, 2)),
               ((2, 1, 3), (3, 2)), ((1, 2, 3), (2, 2, 3, 1))]


@pytest.mark.parametrize("sa, sb", _DOT_SHAPES, ids=[f"{a}.{b}" for a, b in _DOT_SHAPES])
def test_dot_is_numpys_dot_with_derivatives_by_differences(sa, sb):
    rng = np.random.default_rng(len(sa) * 10 + len(sb))
    at = {"a": rng.standard_normal(sa), "b": rng.standard_normal(sb)}
    report = check_program("dot(a, b)", at, ref=np.dot)  # shape and value vs NumPy; rev, fwd vs FD
    assert report.ok, str(report)


def test_dot_of_n_d_arrays_has_numpys_shapes_and_says_which_axes_must_match():
    assert ok_json("eval", "dot(a, b)", "--at", "a=ones((2,2,3)),b=ones((2,3,2))")["values"]["_"] == \
        np.dot(np.ones((2, 2, 3)), np.ones((2, 3, 2))).tolist()  # shape (2, 2, 2, 2), all 3
    assert np.shape(ok_json("eval", "dot(a, b)", "--at", "a=ones((2,3)),b=ones((4,3,2))")["values"]["_"]) == (2, 4, 2)
    r = user_error("eval", "dot(a, b)", "--at", "a=ones((2,2,3)),b=ones((2,2,2))")
    assert "dot(): shapes (2, 2, 3) and (2, 2, 2) do not match: a's last axis has length 3, b's " \
           "second-to-last axis 2" in r.stderr, r.stderr


# ==========================================================================
# Stacks of matrices
# ==========================================================================

def test_jacobian_of_inv_of_a_stack_from_a_npy_file(tmp_path):
    rng = np.random.default_rng(16)
    A = rng.uniform(-0.5, 0.5, (2, 3, 3)) + 2 * np.eye(3)
    np.save(tmp_path / "stack.npy", A)
    doc = ok_json("jacobian", "inv(A)", "--at", f"A=@{tmp_path / 'stack.npy'}")
    J = np.array(doc["jacobian"]["_"]["A"], dtype=float)
    assert J.shape == (2, 3, 3, 2, 3, 3)
    # d inv(A_s)[a, b] / d A_t[c, d] = -inv(A_s)[a, c] inv(A_s)[d, b] when s == t, else 0
    inv = np.linalg.inv(A)
    want = np.zeros(J.shape)
    for s in range(2):
        want[s, :, :, s] = -np.einsum("ac,db->abcd", inv[s], inv[s])
    np.testing.assert_allclose(J, want, atol=1e-12)


@pytest.mark.parametrize("src, ref", [
    ("sum(det(A))", lambda A: np.linalg.det(A)[:, None, None] * np.linalg.inv(A).transpose(0, 2, 1)),
    # d sum(inv(A) b) / dA = -inv(A)^T 1 x^T, x = solve(A, b), for each matrix of the stack
    ("sum(solve(A, [1, 2, 3]))", lambda A: -np.einsum("sa,sb->sab", np.linalg.inv(A).sum(axis=1),
                                                       np.linalg.solve(A, [1.0, 2, 3]))),
])
def test_gradients_through_stacks_match_closed_forms(tmp_path, src, ref):
    rng = np.random.default_rng(3)
    A = rng.uniform(-0.5, 0.5, (2, 3, 3)) + 2 * np.eye(3)
    np.save(tmp_path / "stack.npy", A)
    got = _plain("grad", src, "--at", f"A=@{tmp_path / 'stack.npy'}")
    np.testing.assert_allclose(got, ref(A).ravel(), rtol=1e-10)


# ==========================================================================
# Several results: slogdet, eigh; cholesky
# ==========================================================================

def test_eigh_gradient_of_sum_of_cubed_eigenvalues_is_three_s_squared():
    doc = ok_json("grad", "w, V = eigh(S); sum(w^3)", "--at", "S=[[2,1],[1,3]]")
    S = np.array([[2.0, 1], [1, 3]])
    np.testing.assert_allclose(doc["gradient"]["S"], 3 * S @ S, rtol=1e-12)  # [[15, 15], [15, 30]]
    assert doc["value"] == pytest.approx(np.sum(np.linalg.eigvalsh(S) ** 3))
    assert doc["warnings"] == []


def test_eigh_values_and_vectors_are_numpys():
    S = np.array([[4.0, 1, 0.5], [1, 3, 0], [0.5, 0, 1]])
    at = "S=[[4,1,0.5],[1,3,0],[0.5,0,1]]"
    w, V = np.linalg.eigh(S)
    np.testing.assert_allclose(_plain("eval", "w, V = eigh(S); w", "--at", at), w, rtol=1e-14)
    np.testing.assert_allclose(_plain("eval", "w, V = eigh(S); V", "--at", at), V.ravel(), rtol=1e-14)


def test_eigh_reads_the_lower_triangle_and_its_gradient_is_symmetric():
    # NumPy reads the lower triangle: S's upper entry 9 is ignored; the gradient of w[1] is
    # v v^T (v its eigenvector), symmetric, as JAX's
    w, V = np.linalg.eigh(np.array([[2.0, 1], [1, 3]]))
    doc = ok_json("grad", "w, V = eigh(S); w[1]", "--at", "S=[[2,9],[1,3]]")
    assert doc["value"] == pytest.approx(w[1])
    np.testing.assert_allclose(doc["gradient"]["S"], np.outer(V[:, 1], V[:, 1]), atol=1e-14)


def test_eigh_at_a_repeated_eigenvalue_warns():
    doc = ok_json("grad", "w, V = eigh(S); sum(V)", "--at", "S=[[2,0],[0,2]]")
    assert any("'eigh' at line 1, column 8 has repeated eigenvalues" in w for w in doc["warnings"]), doc


def test_a_multi_result_builtin_used_as_one_value_says_so():
    r = user_error("eval", "sum(eigh(S))", "--at", "S=[[2,1],[1,3]]")
    assert "'eigh' gives 2 values; take them apart with a, b = eigh(...)" in r.stderr


def test_slogdet_is_stable_where_det_overflows():
    # det(300 I) of size 200 = 300^200 overflows; log|det| = 200 log 300, its gradient inv(A)^T
    r = ok("grad", "s, l = slogdet(A); l", "--at", "A=300 * eye(200)", "-f", "json")
    import json
    doc = json.loads(r.stdout)
    assert doc["value"] == pytest.approx(200 * np.log(300.0), rel=1e-14)
    np.testing.assert_allclose(doc["gradient"]["A"], np.eye(200) / 300.0, atol=1e-15)


def test_slogdet_sign_and_its_zero_derivative():
    doc = ok_json("grad", "s, l = slogdet(A); s", "--at", "A=[[1,2],[3,4]]")
    assert doc["value"] == -1.0
    assert np.all(np.array(doc["gradient"]["A"]) == 0)


def test_cholesky_of_a_matrix_that_is_not_positive_definite_is_a_user_error():
    r = user_error("eval", "cholesky(A)", "--at", "A=[[1,2],[2,1]]")
    assert "cholesky: the matrix is not positive definite" in r.stderr


def test_cholesky_gradient_by_finite_differences_of_a_symmetric_perturbation():
    # f = sum(L); perturb S symmetrically (S + h (E_ij + E_ji)): the symmetric gradient's
    # g_ij + g_ji against central differences
    S = np.array([[4.0, 1, 0.5], [1, 3, 0.2], [0.5, 0.2, 2]])
    doc = ok_json("grad", "sum(cholesky(S))", "--at", "S=[[4,1,0.5],[1,3,0.2],[0.5,0.2,2]]")
    g = np.array(doc["gradient"]["S"])
    np.testing.assert_allclose(g, g.T, atol=1e-14)
    h = 1e-6
    for i in range(3):
        for j in range(3):
            E = np.zeros((3, 3))
            E[i, j] += h
            E[j, i] += h
            fd = (np.linalg.cholesky(S + E).sum() - np.linalg.cholesky(S - E).sum()) / (2 * h)
            assert g[i, j] + g[j, i] == pytest.approx(fd, rel=1e-7, abs=1e-9)


@pytest.mark.parametrize("src", [
    "w, V = eigh(A + transpose(A)); sum(sin(V)) + sum(w^3)",
    "s, l = slogdet(A + 3 * eye(3)); l",
    "sum(sin(cholesky(A @ transpose(A) + eye(3))))",
])
def test_second_derivatives_of_the_spectral_functions(src):
    from fdcheck import check_hessian
    A = np.array([[0.3, -0.2, 0.5], [0.1, 0.7, -0.4], [0.6, 0.2, -0.1]])
    report = check_hessian(src, {"A": A})
    assert report.ok, report


# ==========================================================================
# svd, qr, pinv, matrix_power, cross, norm
# ==========================================================================

_TALL = np.array([[1.0, 2], [3, 4], [5, 7]])
_SQUARE = np.array([[4.0, 1, 0.5], [1, 3, 0], [0.5, 0, 1]]) + np.array([[0, 0.3, 0], [0, 0, 0], [0.2, 0, 0]])


def _central_differences(f, A, h=1e-6) -> np.ndarray:
    """The gradient of the scalar function f at A by central differences, entry by entry."""
    fd = np.zeros(A.shape)
    for i in np.ndindex(*A.shape):
        E = np.zeros(A.shape)
        E[i] = h
        fd[i] = (f(A + E) - f(A - E)) / (2 * h)
    return fd


def _lit(a) -> str:
    return np.array2string(np.asarray(a), separator=",", precision=17).replace("\n", "")


@pytest.mark.parametrize("A", [_TALL, _TALL.T, _SQUARE, np.stack([_SQUARE, _SQUARE.T ** 2])], ids=["tall", "wide", "square", "stack"])
def test_svd_is_numpys_reduced_svd(A):
    U, s, Vt = np.linalg.svd(A, full_matrices=False)
    at = f"A={_lit(A)}"
    for name, want in [("U", U), ("s", s), ("Vt", Vt)]:
        np.testing.assert_allclose(_plain("eval", f"U, s, Vt = svd(A); {name}", "--at", at), want.ravel(),
                                   rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(_plain("eval", "svd(A, compute_uv=false)", "--at", at), s.ravel(), rtol=1e-14)


@pytest.mark.parametrize("A", [_TALL, _TALL.T, _SQUARE], ids=["tall", "wide", "square"])
def test_gradient_of_the_sum_of_singular_values_is_u_vt(A):
    # d sum(s) = tr(U^T dA V): the gradient is U V^T (distinct, nonzero singular values)
    U, s, Vt = np.linalg.svd(A, full_matrices=False)
    doc = ok_json("grad", "U, s, Vt = svd(A); sum(s)", "--at", f"A={_lit(A)}")
    np.testing.assert_allclose(doc["gradient"]["A"], U @ Vt, rtol=1e-12, atol=1e-14)
    assert doc["warnings"] == []


def test_log_det_through_singular_values_has_gradient_inv_transpose():
    # log|det A| = sum(log(s)): its gradient is inv(A)^T, through U and Vt's rules not at all
    doc = ok_json("grad", "sum(log(svd(A, compute_uv=false)))", "--at", f"A={_lit(_SQUARE)}")
    np.testing.assert_allclose(doc["gradient"]["A"], np.linalg.inv(_SQUARE).T, rtol=1e-12)


@pytest.mark.parametrize("out", ["sum(sin(U))", "sum(Vt^3)", "sum(U[0] * s)"])
@pytest.mark.parametrize("A", [_TALL, _TALL.T], ids=["tall", "wide"])
def test_svd_vectors_gradients_against_central_differences(out, A):
    def f(M):
        U, s, Vt = np.linalg.svd(M, full_matrices=False)
        return {"sum(sin(U))": np.sum(np.sin(U)), "sum(Vt^3)": np.sum(Vt ** 3), "sum(U[0] * s)": np.sum(U[0] * s)}[out]
    doc = ok_json("grad", f"U, s, Vt = svd(A); {out}", "--at", f"A={_lit(A)}")
    np.testing.assert_allclose(doc["gradient"]["A"], _central_differences(f, A), rtol=1e-6, atol=1e-8)


def test_svd_at_repeated_singular_values_warns():
    doc = ok_json("grad", "U, s, Vt = svd(A); sum(s)", "--at", "A=eye(3)")
    assert any("'svd' at line 1, column 12 has repeated singular values" in w for w in doc["warnings"]), doc
    np.testing.assert_allclose(doc["gradient"]["A"], np.eye(3))  # sum(s)'s own gradient U V^T is right


def test_svd_of_a_non_square_matrix_with_a_zero_singular_value_warns():
    doc = ok_json("grad", "U, s, Vt = svd(A); sum(U)", "--at", "A=[[1,0],[0,0],[0,0]]")
    assert any("has a zero singular value" in w for w in doc["warnings"]), doc


@pytest.mark.parametrize("src, message", [
    ("svd(x)", "svd needs a matrix (or a stack of them), got shape (3,)"),
    ("svd(A, full_matrices=true)", "svd: only the reduced SVD is supported"),
    ("qr(x)", "qr needs a matrix (or a stack of them), got shape (3,)"),
    ("qr(A, mode='raw')", "qr: mode 'raw' is not supported"),
    ("pinv(x)", "pinv needs a matrix"),
    ("pinv(A, rtol=0.1)", "pinv(): got an unexpected keyword argument 'rtol'"),
    ("matrix_power(B, 2)", "matrix_power needs a square matrix (or a stack of them), got shape (2, 3)"),
    ("matrix_power(A, 1.5)", "n must be an integer"),
    ("cross(x, x[:2])", "cross needs vectors of length 3, got 3 and 2"),
    ("norm(A, ord='fr')", "norm: ord='fr' is not a matrix norm; use one of 'fro', 'nuc', 1, -1, 2, -2, inf, -inf"),
    ("norm(x, ord='nuc')", "norm: ord='nuc' is a matrix norm; give a matrix or axis=(a, b)"),
    ("norm(x, ord=-1)", "norm: ord=-1 is not supported for vectors"),
    ("norm(A, ord=3)", "norm: ord=3 is not a matrix norm"),
    ("norm(ones((2, 2, 2)), ord=2)", "norm: ord=2 needs a vector or a matrix, or axis=, got shape (2, 2, 2)"),
    ("norm(A, ord=2, axis=(0, 0))", "norm: the two axes are the same axis"),
    ("norm(A, ord=true)", "norm: ord must be a number, inf, -inf, 'fro' or 'nuc'"),
    ("norm(x, ord=nan)", "norm: ord must be a number, inf, -inf, 'fro' or 'nuc', not nan"),
    ("norm(zeros((0, 3)), ord=2)", "norm: ord=2 of an empty matrix is not defined, got shape (0, 3)"),
])
def test_linear_algebra_errors_are_user_errors(src, message):
    r = user_error("eval", f"A = [[1, 2], [3, 4]]; B = [[1, 2, 3], [4, 5, 6]]; x = [1, 2, 3]; {src}")
    assert message in r.stderr, r.stderr


def test_qr_of_dependent_columns_warns():
    doc = ok_json("grad", "Q, R = qr(A); sum(Q)", "--at", "A=[[1,2],[2,4],[0,0]]")
    assert any("'qr' at line 1, column 8 has a matrix whose columns are (nearly) dependent" in w
               for w in doc["warnings"]), doc
    assert ok_json("grad", "Q, R = qr(A); sum(Q)", "--at", "A=[[1,2],[2,5],[0,1]]")["warnings"] == []


def test_qr_derivative_of_a_wide_matrix_is_a_user_error():
    r = user_error("grad", "Q, R = qr(A); sum(R)", "--at", "A=[[1,2,3],[4,5,6]]")
    assert "qr: derivatives need a matrix with at least as many rows as columns; this one is 2×3" in r.stderr


@pytest.mark.parametrize("A", [_TALL, _SQUARE, np.stack([_TALL, _TALL ** 2])], ids=["tall", "square", "stack"])
def test_qr_factors_are_numpys_orthonormal_and_upper(A):
    Q, R = np.linalg.qr(A)
    at = f"A={_lit(A)}"
    q = _plain("eval", "Q, R = qr(A); Q", "--at", at).reshape(Q.shape)
    r = _plain("eval", "Q, R = qr(A); R", "--at", at).reshape(R.shape)
    np.testing.assert_allclose(q, Q, atol=1e-14)
    np.testing.assert_allclose(r, R, atol=1e-14)
    np.testing.assert_allclose(np.swapaxes(q, -1, -2) @ q, np.broadcast_to(np.eye(A.shape[-1]), R.shape), atol=1e-14)
    assert np.all(np.tril(r, -1) == 0)
    np.testing.assert_allclose(q @ r, A, atol=1e-13)


@pytest.mark.parametrize("src, at, where", [
    ("Q, R = qr(A); sum(R)", "A=eye(2)", "'qr' (line 1, column 8)"),
    ("U, s, Vt = svd(A); sum(U)", "A=[[3,1],[0,1]]", "'svd' (line 1, column 12)")])
def test_check_flags_a_jump_of_the_sign_convention(src, at, where):
    # NumPy's signs jump here (Householder skips a zero subcolumn: R = I at eye(2), R[0,0] = -1
    # a step below the diagonal), so the differences compare two branches and check says so
    r = run("check", src, "--at", at, "-f", "json")
    assert r.exit_code == 1, (r.stdout, r.stderr)
    (res,) = json.loads(r.stdout)["results"]
    assert not res["ok"] and any(n.startswith(f"near a change of sign convention: {where}") and
                                 "finite differences compare two branches" in n for n in res["notes"])


def test_check_of_qr_and_svd_at_a_general_matrix_has_no_sign_note():
    at = f"A={_lit(_TALL)}"
    for src in ("Q, R = qr(A); sum(Q) + sum(R)", "U, s, Vt = svd(A); sum(U) + sum(Vt) + sum(s)"):
        (res,) = ok_json("check", src, "--at", at)["results"]
        assert res["ok"] and res["notes"] == [], res


@pytest.mark.parametrize("out", ["sum(sin(Q))", "sum(R^2)", "Q[2, 0] * R[0, 1]"])
def test_qr_gradients_against_central_differences(out):
    def f(M):
        Q, R = np.linalg.qr(M)
        return {"sum(sin(Q))": np.sum(np.sin(Q)), "sum(R^2)": np.sum(R ** 2), "Q[2, 0] * R[0, 1]": Q[2, 0] * R[0, 1]}[out]
    doc = ok_json("grad", f"Q, R = qr(A); {out}", "--at", f"A={_lit(_TALL)}")
    np.testing.assert_allclose(doc["gradient"]["A"], _central_differences(f, _TALL), rtol=1e-6, atol=1e-8)


def test_pinv_is_numpys_and_a_generalised_inverse():
    A = np.array([[1.0, 2, 3], [2, 4, 6.5], [0, 1, 1], [1, 0, 1]])
    at = f"A={_lit(A)}"
    P_ = _plain("eval", "pinv(A)", "--at", at).reshape(3, 4)
    np.testing.assert_allclose(P_, np.linalg.pinv(A), rtol=1e-12)
    np.testing.assert_allclose(P_ @ A @ P_, P_, atol=1e-13)
    np.testing.assert_allclose(A @ P_ @ A, A, atol=1e-13)
    # a singular matrix: NumPy's cutoff drops its zero singular value
    np.testing.assert_allclose(_plain("eval", "pinv(A)", "--at", "A=[[1,2],[2,4]]"),
                               np.linalg.pinv(np.array([[1.0, 2], [2, 4]])).ravel(), rtol=1e-12)


def test_pinv_of_a_tall_matrix_has_the_gradient_of_its_normal_equations_form():
    # at full column rank pinv(A) = inv(A^T A) A^T: the gradient of sum(pinv(A) * W) by central
    # differences of that closed form
    W = np.array([[1.0, -2, 0.5], [0.3, 1, -1]])
    doc = ok_json("grad", f"sum(pinv(A) * {_lit(W)})", "--at", f"A={_lit(_TALL)}")
    def f(M):
        return np.sum(np.linalg.inv(M.T @ M) @ M.T * W)
    np.testing.assert_allclose(doc["gradient"]["A"], _central_differences(f, _TALL), rtol=1e-6)


@pytest.mark.parametrize("n", [-3, -1, 0, 1, 2, 3, 4, 7])
def test_matrix_power_is_numpys(n):
    A = np.array([[[1.0, 2], [3, 4]], [[0.5, 1], [-1, 2]]])
    got = _plain("eval", f"matrix_power(A, {n})", "--at", f"A={_lit(A)}")
    np.testing.assert_allclose(got, np.linalg.matrix_power(A, n).ravel(), rtol=1e-13)


def test_matrix_power_gradient_of_the_trace_of_a_cube_is_three_a_squared_transposed():
    A = np.array([[1.0, 2], [3, 4]])
    doc = ok_json("grad", "trace(matrix_power(A, 3))", "--at", "A=[[1,2],[3,4]]")
    np.testing.assert_allclose(doc["gradient"]["A"], 3 * (A @ A).T)


def test_matrix_power_zero_is_the_identity_and_leaves_a_unconnected():
    doc = ok_json("grad", "sum(matrix_power(A, 0))", "--at", "A=[[1,2],[3,4]]")
    assert doc["value"] == 2.0 and doc["unconnected"] == ["A"]


@pytest.mark.parametrize("src, ref", [
    ("cross(a, b)", lambda a, b: np.cross(a, b)),
    ("cross(a[0], b)", lambda a, b: np.cross(a[0], b)),
    ("cross(transpose(a), transpose(b), axisa=0, axisb=0)", lambda a, b: np.cross(a.T, b.T, axisa=0, axisb=0)),
    ("cross(transpose(a), b, axisa=0, axisc=0)", lambda a, b: np.cross(a.T, b, axisa=0, axisc=0)),
    ("cross(transpose(a), transpose(b), axis=0)", lambda a, b: np.cross(a.T, b.T, axis=0)),
])
def test_cross_is_numpys(src, ref):
    a, b = np.array([[1.0, 2, 3], [-1, 0.5, 2]]), np.array([[0.0, 1, -2], [3, 1, 1]])
    got = _plain("eval", src, "--at", f"a={_lit(a)},b={_lit(b)}")
    np.testing.assert_allclose(got, np.ravel(ref(a, b)))


def test_cross_gradient_is_the_triple_product_rule():
    # d (a x b) . c / da = b x c
    doc = ok_json("grad", "cross(a, b) @ c", "--at", "a=[1,2,3],b=[0,1,-2],c=[2,-1,1]", "--wrt", "a")
    np.testing.assert_allclose(doc["gradient"]["a"], np.cross([0, 1, -2], [2, -1, 1]))


_NORM_X = np.array([[1.0, -2, 0.5], [0.3, 4, -1]])


@pytest.mark.parametrize("src, ref", [
    ("norm(x)", lambda x: np.linalg.norm(x)),
    ("norm(x, ord='fro')", lambda x: np.linalg.norm(x, "fro")),
    ("norm(x, ord='nuc')", lambda x: np.linalg.norm(x, "nuc")),
    ("norm(x, ord=1)", lambda x: np.linalg.norm(x, 1)),
    ("norm(x, ord=-1)", lambda x: np.linalg.norm(x, -1)),
    ("norm(x, ord=2)", lambda x: np.linalg.norm(x, 2)),
    ("norm(x, ord=-2)", lambda x: np.linalg.norm(x, -2)),
    ("norm(x, ord=inf)", lambda x: np.linalg.norm(x, np.inf)),
    ("norm(x, ord=-inf)", lambda x: np.linalg.norm(x, -np.inf)),
    ("norm(x, ord=1, axis=(1, 0))", lambda x: np.linalg.norm(x, 1, axis=(1, 0))),
    ("norm(x, ord=inf, axis=(0, 1), keepdims=true)", lambda x: np.linalg.norm(x, np.inf, (0, 1), True)),
    ("norm(x, axis=1)", lambda x: np.linalg.norm(x, axis=1)),
    ("norm(x, ord=1, axis=0)", lambda x: np.linalg.norm(x, 1, axis=0)),
    ("norm(x, ord=3, axis=1, keepdims=true)", lambda x: np.linalg.norm(x, 3, axis=1, keepdims=True)),
    ("norm(x, ord=0.5, axis=-1)", lambda x: np.linalg.norm(x, 0.5, axis=-1)),
    ("norm(x, ord=0, axis=1)", lambda x: np.linalg.norm(x, 0, axis=1)),
    ("norm(x, ord=inf, axis=0)", lambda x: np.linalg.norm(x, np.inf, axis=0)),
    ("norm(x[0], ord=-inf)", lambda x: np.linalg.norm(x[0], -np.inf)),
])
def test_norm_orders_are_numpys(src, ref):
    got = _plain("eval", src, "--at", f"x={_lit(_NORM_X)}")
    np.testing.assert_allclose(got, np.ravel(ref(_NORM_X)), rtol=1e-13)


def test_norm_gradients_match_closed_forms():
    x, at = _NORM_X, f"x={_lit(_NORM_X)}"
    U, s, Vt = np.linalg.svd(x, full_matrices=False)
    for src, want in [
        ("norm(x, ord='nuc')", U @ Vt),  # d sum(s) = U V^T
        ("norm(x, ord=2)", np.outer(U[:, 0], Vt[0])),  # d s_max = u_1 v_1^T
        ("norm(x, ord=-2)", np.outer(U[:, -1], Vt[-1])),
        ("norm(x, ord='fro')", x / np.linalg.norm(x)),
        ("norm(x[1], ord=3)", np.vstack([0 * x[0], np.sign(x[1]) * np.abs(x[1]) ** 2 / np.linalg.norm(x[1], 3) ** 2])),
        ("norm(x, ord=1)", np.array([[0, 1.0, 0], [0, 1, 0]]) * np.sign(x)),  # column 1 has the largest sum
        ("norm(x, ord=inf)", np.array([[0, 0, 0], [1.0, 1, 1]]) * np.sign(x)),  # row 1
    ]:
        doc = ok_json("grad", src, "--at", at)
        np.testing.assert_allclose(doc["gradient"]["x"], want, rtol=1e-12, atol=1e-15, err_msg=src)


@pytest.mark.parametrize("order", ["'fro'", "'nuc'", "1", "-1", "2", "-2", "inf", "-inf"])
def test_matrix_norms_at_zero_have_zero_gradient(order):
    doc = ok_json("grad", f"norm(A, ord={order})", "--at", "A=zeros((2, 3))")
    assert doc["value"] == 0 and np.all(np.array(doc["gradient"]["A"]) == 0), doc


@pytest.mark.parametrize("order", ["1", "2", "3", "0.5", "inf", "-inf"])
def test_vector_norms_at_zero_have_zero_gradient(order):
    doc = ok_json("grad", f"norm(x, ord={order})", "--at", "x=[0, 0, 0]")
    assert doc["value"] == 0 and np.all(np.array(doc["gradient"]["x"]) == 0), doc


# Tiny and huge values: the squares of 1e-200 underflow (norm 0, gradient 0 by norm'(0) = 0;
# std's gradient nan or inf) and those of 1e200 overflow; scaled by a power of two, as LAPACK's
# nrm2 scales, they do not.  Closed forms: norm(c v) = c |v|, d/dx = x / |x|; std(c v) = c std(v),
# d/dx = (x - mean) / (n std), the same at every scale c.
_STD_V = np.array([1.0, 2.0, 4.0])
_STD_V_SD = np.sqrt(42 / 27)  # sqrt(((1 - 7/3)^2 + (2 - 7/3)^2 + (4 - 7/3)^2) / 3)


@pytest.mark.parametrize("scale", [1e-200, 1e200, 2.0 ** -1000, 2.0 ** 1020])
def test_norm_and_std_of_tiny_and_huge_values(scale):
    x = np.array([1.0, 3.0]) * scale
    want_norm = np.sqrt(10) * scale
    x3 = _STD_V * scale
    for mode in ("rev", "fwd"):
        jac = gradcalc.jacobian("norm(x)", at={"x": x}, mode=mode)
        assert float(jac.value["_"]) == pytest.approx(want_norm, rel=1e-15)
        np.testing.assert_allclose(jac["_"]["x"], [1 / np.sqrt(10), 3 / np.sqrt(10)], rtol=1e-15)
        jac = gradcalc.jacobian("std(x)", at={"x": x3}, mode=mode)
        assert float(jac.value["_"]) == pytest.approx(_STD_V_SD * scale, rel=1e-15)
        np.testing.assert_allclose(jac["_"]["x"], (_STD_V - 7 / 3) / (3 * _STD_V_SD), rtol=1e-14)


def test_norm_and_std_scale_each_slice_of_an_axis():
    x = np.array([[1e-200, 3e-200], [3.0, 4.0], [0.0, 0.0]])
    assert gradcalc.evaluate("norm(x, axis=1)", at={"x": x})["_"].tolist() == \
        pytest.approx([np.sqrt(10) * 1e-200, 5.0, 0.0], rel=1e-15)
    g = gradcalc.grad("sum(norm(x, axis=1))", at={"x": x})["x"]
    np.testing.assert_allclose(g, [[1 / np.sqrt(10), 3 / np.sqrt(10)], [0.6, 0.8], [0.0, 0.0]], rtol=1e-15)
    y = np.vstack([_STD_V * 1e-200, _STD_V, _STD_V * 1e200])
    got = gradcalc.evaluate("std(y, axis=1, keepdims=true)", at={"y": y})["_"]
    assert got.shape == (3, 1)
    np.testing.assert_allclose(got[:, 0], _STD_V_SD * np.array([1e-200, 1.0, 1e200]), rtol=1e-15)
    assert float(gradcalc.evaluate("norm(x, ord='fro')", at={"x": np.eye(2) * 1e-200})["_"]) == \
        pytest.approx(np.sqrt(2) * 1e-200, rel=1e-15)


def test_norm_and_std_of_ordinary_values_are_unchanged_to_the_bit():
    rng = np.random.default_rng(11)
    for _ in range(20):
        x = rng.standard_normal((4, 7)) * 10.0 ** rng.integers(-100, 100)
        for axis in (None, 0, 1):
            got = gradcalc.evaluate(f"norm(x, axis={axis})", at={"x": x})["_"]
            assert np.asarray(got).tobytes() == np.sqrt(np.sum(x * x, axis=axis)).tobytes()
            got = gradcalc.evaluate(f"std(x, axis={axis}, ddof=1)", at={"x": x})["_"]
            assert np.asarray(got).tobytes() == np.asarray(np.std(x, axis=axis, ddof=1)).tobytes()


@pytest.mark.parametrize("src, at, warned", [
    ("norm(A, ord=2)", "A=eye(2)", "'norm' at line 1, column 1 with ord=2 has its largest singular value repeated"),
    ("norm(A, ord=-2)", "A=eye(2)", "with ord=-2 has its smallest singular value repeated"),
    ("norm(A, ord='nuc')", "A=[[1,0],[0,0]]", "with ord='nuc' has a zero singular value"),
])
def test_spectral_norms_warn_where_their_derivative_is_not_defined(src, at, warned):
    doc = ok_json("grad", src, "--at", at)
    assert any(warned in w for w in doc["warnings"]), doc


@pytest.mark.parametrize("order", [2, -2])
@pytest.mark.parametrize("A", [np.eye(2), np.array([[0.6, -0.8], [0.8, 0.6]]), 3 * np.eye(3)])
def test_tied_extreme_singular_values_share_the_spectral_norms_derivative(order, A):
    # every singular value tied: the derivative is (1/k) sum u_i v_i^T = U V^T / k (independent of
    # the basis LAPACK picks for the tied ones), as max's and min's ties share (README conventions)
    # and as max(svd(A)) gives; the first pair alone (u1 v1^T) before
    U, _, Vt = np.linalg.svd(A)
    want = U @ Vt / len(A)
    for mode in ("rev", "fwd"):
        got = gradcalc.jacobian(f"norm(A, ord={order})", at={"A": A}, mode=mode)["_"]["A"]
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)
    other = "max" if order == 2 else "min"
    np.testing.assert_array_equal(gradcalc.grad(f"norm(A, ord={order})", at={"A": A})["A"],
                                  gradcalc.grad(f"{other}(svd(A, compute_uv=false))", at={"A": A})["A"])
    # check flags the kink (a tie of k values shares 1/k; central differences see 1/2: they agree
    # for a pair, as max's ties do)
    (r,) = gradcalc.check(f"norm(A, ord={order})", at={"A": A}).results
    assert "near the kink of 'norm' (line 1, column 1)" in r.notes and r.ok == (len(A) == 2)


def test_a_zero_singular_value_adds_nothing_to_the_nuclear_norms_derivative():
    # nuc(diag(1, h)) = 1 + |h|: abs'(0) = 0 gives diag(1, 0) (svd_s's rule gave the zero its +1)
    A = np.array([[1.0, 0.0], [0.0, 0.0]])
    assert gradcalc.grad("norm(A, ord='nuc')", at={"A": A})["A"].tolist() == [[1.0, 0.0], [0.0, 0.0]]
    (r,) = gradcalc.check("norm(A, ord='nuc')", at={"A": A}).results
    assert r.ok and "near the kink of 'norm' (line 1, column 1)" in r.notes
    # and away from it, the closed form U V^T
    B = np.array([[3.0, 1.0], [0.0, 2.0]])
    U, _, Vt = np.linalg.svd(B)
    np.testing.assert_allclose(gradcalc.grad("norm(A, ord='nuc')", at={"A": B})["A"], U @ Vt, rtol=1e-14)


def test_spectral_norms_away_from_degenerate_points_do_not_warn():
    doc = ok_json("grad", "norm(A, ord=2) + norm(A, ord=-2) + norm(A, ord='nuc')", "--at", "A=[[2,0],[0,1]]")
    assert doc["warnings"] == []


# ==========================================================================
# cumprod at zeros: exact derivatives (no division by x)
# ==========================================================================

def _cumprod_jacobian(x):
    """d cumprod(x)_i / d x_k = prod_{j <= i, j != k} x_j for k <= i, by brute force."""
    n = len(x)
    return np.array([[np.prod([x[j] for j in range(i + 1) if j != k]) if k <= i else 0.0
                      for k in range(n)] for i in range(n)])


@pytest.mark.parametrize("x", [[2.0, 0, 3, 4], [2.0, 0, 3, 0, 5], [0.0, 0, 1.5, 2], [1.5, -2, 0.5, 0]])
def test_cumprod_jacobian_at_zeros_is_exact_in_both_modes(x):
    want = _cumprod_jacobian(x)
    for mode in ("rev", "fwd"):
        doc = ok_json("jacobian", "cumprod(x)", "--at", f"x={_lit(x)}", "--mode", mode)
        np.testing.assert_array_equal(doc["jacobian"]["_"]["x"], want)
        assert doc["warnings"] == []


def test_cumprod_hessian_at_two_zeros_is_exact():
    # f = sum(cumprod(x)): H[k, l] = sum_{i >= max(k, l)} prod_{j <= i, j not k, l} x_j
    x = np.array([2.0, 0, 3, 0])
    want = np.zeros((4, 4))
    for k in range(4):
        for m in range(4):
            if k != m:
                want[k, m] = sum(np.prod([x[j] for j in range(i + 1) if j not in (k, m)])
                                 for i in range(max(k, m), 4))
    doc = ok_json("hessian", "sum(cumprod(x))", "--at", f"x={_lit(x)}")
    np.testing.assert_array_equal(doc["hessian"]["x"]["x"], want)


def test_cumprod_gradient_along_an_axis_with_zeros():
    x = np.array([[2.0, 0, 3], [0, 1.5, 2]])
    doc = ok_json("grad", "sum(cumprod(x, axis=0) * [[1, 2, 3], [4, 5, 6]])", "--at", f"x={_lit(x)}")
    w = np.array([[1.0, 2, 3], [4, 5, 6]])
    # column j: y0 = x0, y1 = x0 x1: d/dx0 = w0 + w1 x1, d/dx1 = w1 x0
    want = np.vstack([w[0] + w[1] * x[1], w[1] * x[0]])
    np.testing.assert_array_equal(doc["gradient"]["x"], want)


# ==========================================================================
# --symbolic: stacks of matrices and the functions with no closed form
# ==========================================================================

def test_symbolic_det_of_a_stack_is_per_matrix():
    A = np.array([[[1.0, 2], [3, 4]], [[2, 0], [1, 3]]])
    doc = ok_json("grad", "sum(det(A))", "--at", f"A={_lit(A)}", "--symbolic")
    want = np.linalg.det(A)[:, None, None] * np.swapaxes(np.linalg.inv(A), -1, -2)
    np.testing.assert_allclose(doc["gradient"]["A"], want, rtol=1e-12)
    # each matrix's adjugate transposed, in its own entries
    assert doc["symbolic"]["A"]["text"] == ("[[[A[0, 1, 1], -A[0, 1, 0]], [-A[0, 0, 1], A[0, 0, 0]]], "
                                            "[[A[1, 1, 1], -A[1, 1, 0]], [-A[1, 0, 1], A[1, 0, 0]]]]")


@pytest.mark.parametrize("src, name, at", [
    ("U, s, Vt = svd(A); sum(s)", "svd", "A=[[2,1],[1,3]]"), ("Q, R = qr(A); sum(R)", "qr", "A=[[2,1],[1,3]]"),
    ("norm(A, ord=2)", "svd", "A=[[2,1],[1,3]]"), ("sum(pinv(A))", "pinv", "A=[[1,2],[2,4]]"),
])
def test_symbolic_names_the_builtin_with_no_closed_form(src, name, at):
    r = user_error("grad", src, "--at", at, "--symbolic")
    assert f"--symbolic cannot express '{name}' at line 1" in r.stderr and "in closed form:" in r.stderr, r.stderr


def test_symbolic_pinv_and_stacked_linear_algebra_match_the_numbers():
    stack = "A=[[[1,2],[3,4]],[[2,0],[1,3]]]"
    for src, at in [("sum(pinv(A))", "A=[[1,2],[3,4],[5,7]]"), ("sum(pinv(A))", "A=[[1,2,3],[3,4,4]]"),
                    ("sum(inv(A))", stack), ("s, l = slogdet(A); sum(l)", stack),
                    ("sum(solve(A, [1, 2]))", stack), ("sum(solve(A, [[1], [2]]))", stack),
                    ("sum(cholesky(A @ swapaxes(A, -1, -2) + eye(2)))", stack)]:
        sym = ok_json("grad", src, "--at", at, "--symbolic")
        num = ok_json("grad", src, "--at", at)
        np.testing.assert_allclose(sym["gradient"]["A"], num["gradient"]["A"], rtol=1e-10, err_msg=src)


@pytest.mark.parametrize("src, name", [
    ("U, s, Vt = svd(A); sum(s)", "svd"), ("Q, R = qr(A); sum(R)", "qr"), ("sum(pinv(A))", "pinv"),
    ("sum(cholesky(A @ transpose(A) + eye(2)))", "cholesky"), ("w, V = eigh(A); sum(w)", "eigh"),
    ("s, l = slogdet(A); l", "slogdet"),
])
def test_complex_step_refuses_the_factorisations_that_conjugate(src, name):
    # on complex input LAPACK conjugates (A^H): complex-step differences of these would be wrong
    r = user_error("check", src, "--at", "A=[[1,2],[0.5,3]]", "--method", "complex")
    assert f"--method complex needs analytic operations, but '{name}' at line 1" in r.stderr, r.stderr


@pytest.mark.parametrize("src, ref", [
    ("U, s, Vt = svd(A); sum(s)", lambda A: np.linalg.svd(A)[1].sum()),
    ("Q, R = qr(A); sum(R)", lambda A: np.linalg.qr(A)[1].sum()),
    ("w, V = eigh(A); sum(w^3)", lambda A: np.sum(np.linalg.eigvalsh(A) ** 3)),
])
def test_factorisations_follow_an_array_written_into_between_runs(src, ref):
    # one LAPACK call serves a factorisation's results and rules: found by the input's
    # content, so a caller's array changed in place is factorised again
    import gradcalc
    A = np.array([[2.0, 1], [1, 3]])
    first = gradcalc.grad(src, at={"A": A}).value
    A[0, 0] = 7.0
    assert first == pytest.approx(ref(np.array([[2.0, 1], [1, 3]])))
    assert gradcalc.grad(src, at={"A": A}).value == pytest.approx(ref(A), rel=1e-14)


@pytest.mark.parametrize("src, results", [
    ("U, s, Vt = svd(A)", ("U", "s", "Vt")),
    ("Q, R = qr(A)", ("Q", "R")),
    ("w, V = eigh(A)", ("w", "V")),
])
def test_factorisations_follow_a_result_written_into_between_runs(src, results):
    # the factorisation of an input seen before is served again: the arrays handed out are
    # the caller's own, so writing into them cannot change the next run's values
    import gradcalc
    A = np.array([[2.0, 1], [1, 3]])
    first = gradcalc.evaluate(src, at={"A": A}, of=list(results))
    want = {k: v.copy() for k, v in first.items()}
    for v in first.values():
        v[...] = 0.0
    again = gradcalc.evaluate(src, at={"A": A}, of=list(results))
    for k in results:
        assert np.array_equal(again[k], want[k]), k


_ELLIPSES = [("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 6)]), ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 6)]),
             ("i...->...", [(3, 2)]), ("...ii->...i", [(2, 3, 3)]), ("...i,...i", [(2, 2), (2,)]),
             ("i...j,j->i...", [(2, 3, 4, 5), (5,)]), ("...,...", [(3,), (2, 1)]),
             ("ij...,j...->i...", [(2, 3, 4), (3, 1)]), ("ij->...ij", [(2, 3)]), ("i,i->...", [(3,), (3,)]),
             ("...i->i", [(4,)])]


@pytest.mark.parametrize("subscripts, shapes", _ELLIPSES)
def test_einsum_ellipsis_as_numpy_and_its_gradient_by_differences(subscripts, shapes):
    # '...' broadcasts the axes it stands for, right-aligned, as NumPy's einsum does; the
    # gradient of sum(einsum(...) * w) against central differences of NumPy's own einsum
    rng = np.random.default_rng(len(subscripts))
    ops = [rng.standard_normal(s) for s in shapes]
    names = "abc"[:len(ops)]
    want = np.einsum(subscripts, *ops)
    w = rng.standard_normal(want.shape)
    at = {**dict(zip(names, ops)), "w": w}
    call = f"einsum('{subscripts}', {', '.join(names)})"
    got = gradcalc.evaluate(call, at=dict(zip(names, ops)))["_"]
    assert got.shape == want.shape and np.allclose(got, want, rtol=1e-13, atol=1e-13)
    grads = gradcalc.grad(f"sum({call} * w)", at=at, wrt=list(names))
    for k, n in enumerate(names):
        fd = np.zeros(shapes[k])
        for idx in np.ndindex(*shapes[k]):
            step = np.zeros(shapes[k])
            step[idx] = 1e-6
            fd[idx] = (_einsum_sum(subscripts, ops, k, step, w) - _einsum_sum(subscripts, ops, k, -step, w)) / 2e-6
        np.testing.assert_allclose(grads[n], fd, atol=1e-7)


def _einsum_sum(subscripts, ops, k, step, w) -> float:
    """sum(einsum(subscripts, *ops) * w) by NumPy, operand k moved by step."""
    return float(np.sum(np.einsum(subscripts, *[o + step if j == k else o for j, o in enumerate(ops)]) * w))


# ==========================================================================
# A matrix holding inf or nan: LAPACK's SVD would not return on inf
# ==========================================================================

_INF_MATRIX = "B=[[0,2,7],[inf,1,0],[2,1,0]]"


def _gradcalc_within(seconds: float, *args):
    """The CLI run in a process of its own, which must end within seconds (a hang fails the test
    instead of stopping the suite)."""
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "gradcalc", *args], capture_output=True, text=True,
                          timeout=seconds)


def test_det_gradient_at_a_matrix_holding_inf_answers_with_nan_and_a_warning():
    # det's derivative is adj(B); the LU route gives det(B) inv(B) = inf * (...), not finite, and
    # the SVD route it fell back on never returned on inf (found by review)
    r = _gradcalc_within(60, "grad", "det(B)", "--at", _INF_MATRIX, "-f", "json")
    assert r.returncode == 0, r.stderr
    got = np.array(json.loads(r.stdout)["gradient"]["B"], dtype=object)
    assert got.shape == (3, 3) and any(v in ("nan", "inf", "-inf") for v in got.ravel())
    assert "the derivative of 'det'" in r.stderr and "produced nan" in r.stderr


@pytest.mark.parametrize("src, name", [("sum(svd(B)[1])", "svd"), ("sum(pinv(B))", "pinv"),
                                       ("sum(svd(B, compute_uv=false))", "svd")])
@pytest.mark.parametrize("bad", ["inf", "nan"])
def test_factorisations_by_svd_refuse_a_matrix_holding_inf_or_nan(src, name, bad):
    # NumPy raises 'SVD did not converge' on nan, and never returns on inf: both are refused
    r = _gradcalc_within(60, "eval", src, "--at", _INF_MATRIX.replace("inf", bad))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert f"'{name}': svd did not converge: the matrix holds inf or nan" in r.stderr
    assert "^" in r.stderr and "Traceback" not in r.stderr


def test_det_gradient_at_a_finite_singular_matrix_still_takes_the_svd_route():
    # adj(B) of a rank-2 matrix by the SVD (LU's inv fails): against the cofactors written out
    B = np.array([[1.0, 2, 3], [2, 4, 6], [1, 0, 1]])
    got = gradcalc.grad("det(B)", at={"B": B})["B"]
    cof = np.array([[np.linalg.det(np.delete(np.delete(B, i, 0), j, 1)) * (-1) ** (i + j) for j in range(3)]
                    for i in range(3)])
    np.testing.assert_allclose(got, cof, atol=1e-12)


@pytest.mark.parametrize("x", [[], [1e-200, 3e-200], [float("nan"), 1.0], [1e200, 1e200]])
def test_a_scaled_norm_is_a_numpy_scalar_as_every_number_is(x):
    # np.where's 0-d array came back where a slice was scaled (the review's find)
    v = gradcalc.evaluate("norm(x)", at={"x": np.array(x)})["_"]
    assert type(v) is np.float64


# ==========================================================================
# solve with one matrix and many right-hand sides (a batched pass's rows)
# ==========================================================================

def test_a_hessian_through_solve_factors_its_fixed_matrix_once(monkeypatch):
    # A Hessian's tangent rows met NumPy's solve as a broadcast stack: a (n, n) matrix against
    # (n, n, 1) right-hand sides, factored once per row, O(n^4) (n = 800: 18 s, JAX 0.15 s).
    # Now every row is a column of one system; the closed form is 2 A^-T A^-1.
    import gradcalc.primitives as P
    rng = np.random.default_rng(5)
    n = 40
    A = rng.standard_normal((n, n)) + 7 * np.eye(n)
    x = rng.standard_normal(n)
    calls = []
    real = np.linalg.solve

    def spy(a, b):
        calls.append((a.shape, b.shape))
        return real(a, b)
    monkeypatch.setattr(P.np.linalg, "solve", spy)
    H = gradcalc.hessian("sum(solve(A, x)^2)", at={"A": A, "x": x}, wrt=["x"])["x"]["x"]
    Ai = real(A, np.eye(n))
    np.testing.assert_allclose(H, 2 * Ai.T @ Ai, rtol=1e-12, atol=1e-15)
    assert calls and all(len(a) == 2 and len(b) == 2 for a, b in calls), calls


@pytest.mark.parametrize("bshape, ndb", [((7, 4), 1), ((2, 3, 4), 1), ((5, 4, 3), 2), ((2, 5, 4, 3), 2),
                                         ((0, 4), 1), ((3, 4, 0), 2)])
def test_solve_of_one_matrix_and_a_stack_is_numpys(bshape, ndb):
    from gradcalc.primitives import _solve
    rng = np.random.default_rng(6)
    a = rng.standard_normal((4, 4)) + 3 * np.eye(4)
    b = rng.standard_normal(bshape)
    got = _solve(a, b, 2, ndb)
    want = np.linalg.solve(a, b[..., None])[..., 0] if ndb == 1 else np.linalg.solve(a, b)
    assert got.shape == want.shape and got.flags.c_contiguous
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-15)


def test_solve_of_a_singular_matrix_against_a_stack_is_still_an_error():
    r = user_error("eval", "solve(A, B)", "--at", "A=[[1,2],[2,4]],B=ones((3,2,2))")
    assert "singular" in r.stderr.lower(), r.stderr
