"""Numbers in JSON, both ways: the one place that spells them (SPEC §6, §9).

JSON has no non-finite numbers, so gradcalc writes them as the strings
``"nan"``, ``"inf"`` and ``"-inf"``; arrays are nested lists, scalars plain
numbers.  Reading takes numbers (never booleans or null) and the non-finite
strings, in any letter case, with an optional sign and ``infinity`` spelt out
(``"NaN"``, ``"+inf"``, ``"-Infinity"``): what other languages' JSON writers
produce.  Anything else is a :class:`JSONNumberError` that says why.

This module sits below everything that reads or writes JSON (the command line's
output, black boxes, ``--at @FILE.json``, ``check --expect``), and imports only NumPy.
"""
from __future__ import annotations

import math

import numpy as np

#: The non-finite spellings read (after stripping blanks and lowering the case).
NONFINITE = {"nan": math.nan, "inf": math.inf, "+inf": math.inf, "-inf": -math.inf,
             "infinity": math.inf, "+infinity": math.inf, "-infinity": -math.inf}


# ==========================================================================
# Writing
# ==========================================================================

def number_to_json(x: float):
    """A float as JSON data: itself when finite (json writes repr(x), the shortest text that
    reads back as x), else "nan", "inf" or "-inf"."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def array_to_json(value):
    """An array (or anything NumPy makes a float64 array of) as JSON data: nested lists of
    numbers, a plain number for a scalar."""
    a = np.asarray(value, dtype=np.float64)
    if not a.ndim:  # (one number: a Hessian of n scalar inputs has n² of them)
        return number_to_json(float(a))
    if np.isfinite(a).all():
        return a.tolist()  # (made in C: the common case of a large array stays fast)
    return _spelled(a.tolist())


def _spelled(x):
    if isinstance(x, list):
        return [_spelled(i) for i in x]
    return number_to_json(x)


def to_json(obj):
    """obj as JSON data: NumPy arrays and scalars as :func:`array_to_json`, floats as
    :func:`number_to_json`, dicts (keys made strings), lists and tuples recursively;
    anything else (str, int, bool, None) as it is."""
    if isinstance(obj, (np.ndarray, np.generic)):
        return array_to_json(obj)
    if isinstance(obj, dict):
        return {str(k): to_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_json(v) for v in obj]
    if isinstance(obj, float):
        return number_to_json(obj)
    return obj


def arrays_by_path(payload: dict, prefix: str = "") -> dict:
    """The arrays of a JSON payload, keyed by their JSON path ("gradient/x", "jacobian/f/x",
    "value"): what ``--save FILE.npz`` writes.  Float numbers count (as arrays of shape ());
    names, messages, counts, flags and null entries (an unconnected derivative) do not."""
    out = {}
    for key, value in payload.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(arrays_by_path(value, path + "/"))
        elif isinstance(value, (np.ndarray, np.floating, float)):
            out[path] = np.asarray(value, dtype=np.float64)
    return out


# ==========================================================================
# Reading
# ==========================================================================

class JSONNumberError(ValueError):
    """JSON data that is not a number or a nested list of numbers.

    ``reason`` says which way: "not a number" (an element is a string other than
    the non-finite spellings, a boolean, null, an object), "ragged" (rows of
    different lengths) or "too large" (an integer beyond float64); the message
    says it in words, quoting the offending element when there is one.
    """

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


def array_from_json(data) -> np.ndarray:
    """JSON data (a number, a non-finite string, or a nested list of them) as a float64 array.

    Raises JSONNumberError for anything else.
    """
    try:
        return np.array(_numbers(data), dtype=np.float64)
    except OverflowError:
        raise JSONNumberError("a number is too large for float64", "too large") from None
    except JSONNumberError:
        raise
    except ValueError:  # NumPy's "inhomogeneous shape"
        raise JSONNumberError("a ragged nested list (rows of different lengths)", "ragged") from None


def _numbers(x):
    """x with every element checked and made a float (OverflowError for a huge integer)."""
    if isinstance(x, list):
        return [_numbers(i) for i in x]
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return float(x)
    if isinstance(x, str) and x.strip().lower() in NONFINITE:
        return NONFINITE[x.strip().lower()]
    import json  # (here only: a one-liner's table output loads no json)
    text = json.dumps(x)
    raise JSONNumberError(f"{text if len(text) <= 40 else text[:40] + '…'} is not a number", "not a number")
