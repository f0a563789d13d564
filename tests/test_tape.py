"""The engine's own house rules: the tape prints itself, every primitive has a symbolic
form (or a stated reason), products are safe or plain by argument, errors in the library's
words."""
from __future__ import annotations

import numpy as np
import pytest

import gradcalc
from gradcalc import primitives as P
from gradcalc import symbolic as S
from gradcalc.cli.errors import flag
from gradcalc.cli.graphs import listing
from gradcalc.errors import LimitError, UsageError
from gradcalc.lower import FUNCTIONS, trace
from gradcalc.tape import Builder, equation_rhs
from gradcalc.transforms import backward


def traced(src, **at):
    return trace(gradcalc.parse(src), {k: np.asarray(v, dtype=np.float64) for k, v in at.items()})


# ==========================================================================
# The tape prints itself
# ==========================================================================


def test_tape_prints_one_line_per_equation():
    tr = traced("input x[3]\nh = tanh(x * 2)\nf = sum(h[1:]) + x[0]", x=[0.1, 0.2, 0.3])
    assert str(tr.tape) == "\n".join([
        "v0 = input x",
        "v1 = const 2",
        "v2 = mul(v0, v1)",
        "v3 = tanh(v2)",
        "v4 = index(v3, idx=(1:,))",
        "v5 = sum(v4, axes=(-1,), keepdims=False)",
        "v6 = index(v0, idx=(0,))",
        "v7 = add(v5, v6)",
        "output f = v7",
    ])


def test_tape_prints_constants_on_one_line():
    tape = traced("input x[2]; x @ [[1, 0.5], [1e-7, 2]]", x=[1, 2]).tape
    assert "v1 = const [[1, 0.5], [1e-07, 2]]" in str(tape).splitlines()


def test_graph_listing_prints_equations_as_the_tape_does():
    src = "input A[2, 2]; input v[2]; y = tanh(A @ v); sum(y * y, axis=0)"
    at = {"A": [[1, 2], [3, 4]], "v": [0.5, -0.5]}
    tape = traced(src, **at).tape
    r = gradcalc.graph(src, at=at)
    listed = [line.split("  #")[0].rstrip() for line in listing(r.nodes, 6).splitlines()]
    printed = str(tape).splitlines()[:-1]  # (less the output line, which the listing has not)
    assert sorted(listed) == sorted(printed)


def test_equation_rhs_leaves_out_the_engines_parameters():
    assert equation_rhs("add", ["v1", "v2"], {"nd": (1, 2), "ond": 2}) == "add(v1, v2)"
    assert equation_rhs("sum", ["v3"], {"axes": (-2, -1), "keepdims": True, "xshape": (2, 2)}) == \
        "sum(v3, axes=(-2, -1), keepdims=True)"
    assert equation_rhs("index", ["v0"], {"idx": (slice(None, None, 2), 1)}) == "index(v0, idx=(::2, 1))"
    assert equation_rhs("const", operand="[1, 2]\n [3, 4]") == "const [1, 2]  [3, 4]"
    assert equation_rhs("input", operand="x") == "input x"


# ==========================================================================
# One stanza per primitive: a symbolic form for each, or a stated reason
# ==========================================================================


def test_every_primitive_has_a_symbolic_form_or_a_reason():
    missing = [name for name in P.REGISTRY if not S.converts(name) and name not in S.NO_CLOSED_FORM]
    assert not missing, (f"primitives with no sympy form in gradcalc.symbolic: {missing}; give each a "
                         "rule in symbolic._rules (or, for an internal helper, a reason in NO_CLOSED_FORM)")


def test_primitives_without_a_symbolic_form_are_internal_and_listed_with_a_reason():
    for name, reason in S.NO_CLOSED_FORM.items():
        assert name in P.REGISTRY and not S.converts(name) and reason.startswith("internal")
        assert all(fn.prim is not P.REGISTRY[name] for fn in FUNCTIONS.values())


# ==========================================================================
# Safe or plain matrix products: an argument, not a mode
# ==========================================================================


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (inf and nan on purpose; gradcalc runs under np.errstate)
def test_plain_products_are_asked_for_by_argument():
    # d/da of sum(a @ w) with w = [[inf], [1]] and a cotangent of 0 on the product: a safe
    # product keeps the zero contribution zero, a plain one makes 0 * inf = nan of it
    b = Builder()
    a = b.input(np.array([[1.0, 2.0]]))
    w = b.input(np.array([[np.inf], [1.0]]))
    y = P.matmul(a, w)
    seed = {y.var: np.zeros((1, 1))}
    safe = backward(b, b.equations, seed, [a.var], eager=True)[a.var]
    plain = backward(b, b.equations, seed, [a.var], eager=True, safe_products=False)[a.var]
    assert safe.tolist() == [[0.0, 0.0]]
    assert np.isnan(plain[0, 0]) and plain[0, 1] == 0.0
    assert not hasattr(P, "plain_products")


def test_tracer_operators_record_their_primitives():
    b = Builder()
    x, y = b.input(2.0), b.input(np.array([1.0, 3.0]))
    for op, prim, value in [(lambda: x + y, "add", [3.0, 5.0]), (lambda: 1 - x, "add", -1.0),
                            (lambda: x * y, "mul", [2.0, 6.0]), (lambda: y / x, "div", [0.5, 1.5]),
                            (lambda: 3 / x, "div", 1.5), (lambda: x ** 2, "pow_const", 4.0),
                            (lambda: 2 ** x, "pow", 4.0), (lambda: x ** x, "pow", 4.0),
                            (lambda: -x, "neg", -2.0), (lambda: y @ y, "matmul", 10.0)]:
        assert op().value.tolist() == value and b.equations[-1].prim.name == prim
    assert +x is x


def test_the_graph_function_is_not_shadowed_by_its_module():
    import gradcalc.api  # noqa: F401  (imports the module graph lives in)
    assert callable(gradcalc.graph) and gradcalc.graph is gradcalc.api.graph


# ==========================================================================
# Errors in the library's own words; the command line words them with its flags
# ==========================================================================


def test_a_missing_input_is_given_with_at():
    with pytest.raises(UsageError) as err:
        traced("x * y", x=1.0)
    assert err.value.hint == "give it with at y=..."
    assert err.value.worded(flag)[1] == "give it with --at y=..."
    assert (err.value.name, err.value.option) == ("y", "at")


@pytest.mark.parametrize("src", ["ones((100, 100))", "sum(ones((100, 100)))"])
def test_the_element_budget_is_named_as_an_option(src):
    with pytest.raises(LimitError) as err:
        trace(gradcalc.parse(src), {}, max_elements=1000)
    assert err.value.message.endswith("has 10000 elements, more than max_elements=1000")
    assert err.value.worded(flag)[0].endswith("more than --max-elements=1000")
    assert err.value.option == "max_elements"
