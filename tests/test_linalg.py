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
