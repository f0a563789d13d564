"""Contractions and stacked linear algebra (issue 16): einsum and the functions over it,
stacks of matrices, multi-result built-ins.  Expected values come from NumPy, closed forms
or finite differences computed here."""
from __future__ import annotations

import numpy as np
import pytest

from cli_run import ok, ok_json, user_error


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
    ("einsum('i.j', A)", "einsum: ellipsis ('...') is not supported, in 'i.j'"),
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
