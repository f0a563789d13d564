"""gradcalc: a gradient calculator for a small numpy-like language.

    >>> import gradcalc
    >>> gradcalc.grad("x^2*y", at={"x": 3.0, "y": 2.0})
    Result({'x': array(12.), 'y': array(9.)}, ...)
"""
from .api import Result, evaluate, grad, hessian, jacobian, jvp, parse, vjp
from .errors import GradcalcError

__all__ = ["parse", "evaluate", "grad", "jacobian", "vjp", "jvp", "hessian", "check",
           "Result", "GradcalcError"]


def __getattr__(name):
    if name == "check":  # finite differences load only when asked for
        from .numerics import check
        return check
    raise AttributeError(f"module 'gradcalc' has no attribute {name!r}")
