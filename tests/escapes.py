"""The sweeps' one question: does a program give a result or a user error, and nothing else?"""
from __future__ import annotations

import gradcalc


def escaped(program: str, point: dict) -> str | None:
    """None when grad (of the output's sum) gives a result or a GradcalcError; otherwise what
    escaped, as "program: ExceptionType: message"."""
    try:
        gradcalc.grad(program, at=point, sum=True)
    except gradcalc.GradcalcError:
        pass
    except Exception as err:  # noqa: BLE001 - any other exception is the failure
        return f"{program}: {type(err).__name__}: {err}"
    return None
