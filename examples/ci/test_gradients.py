from gradcalc.testing import assert_gradients


def test_the_cube_file():
    assert_gradients("examples/ci/cube.grad")  # its "# check:" line and cube.expect.json count


def test_a_loss_written_inline():
    assert_gradients("sum(tanh(W @ x)^2)", at={"W": [[1.0, -2.0], [0.5, 3.0]], "x": [0.3, -0.1]},
                     method="richardson")
