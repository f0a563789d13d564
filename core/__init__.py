"""gradcalc: a gradient calculator for a small numpy-like language.

    >>> import gradcalc
    >>> gradcalc.grad("x^2*y", at={"x": 3.0, "y": 2.0})
    Result({'x': array(12.), 'y': array(9.)}, ...)

The names below load on first use, so ``import gradcalc`` itself costs nothing;
``gradcalc.__version__`` is the installed package's version (pyproject.toml's).
"""

__all__ = ["parse", "evaluate", "grad", "jacobian", "vjp", "jvp", "hessian", "graph", "check",
           "Result", "GradcalcError"]

_HOMES = {"check": "numerics", "GradcalcError": "errors", "Result": "results"}


def __getattr__(name):
    if name == "__version__":  # read when asked for: importlib.metadata costs ~30 ms to import
        from importlib.metadata import version
        globals()[name] = value = version("gradcalc")
        return value
    if name not in __all__:
        raise AttributeError(f"module 'gradcalc' has no attribute {name!r}")
    import importlib
    module = importlib.import_module(f".{_HOMES.get(name, 'api')}", __name__)
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
