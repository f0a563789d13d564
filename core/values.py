"""Values from the command line: ``--at``, cotangents and tangents, and the files they name.

A value is a constant expression of the language (``3``, ``[1, 2]``,
``pi/4``, ``ones(3)``) or ``@FILE``: ``.json`` (a number or nested list),
``.npy``, ``.csv``/``.txt`` (numpy.loadtxt).  ``--at @FILE`` reads a whole
mapping name -> value from ``.json`` (an object) or ``.npz``.
"""
from __future__ import annotations

import json
import os
import re

import numpy as np

from .codec import JSONNumberError, array_from_json
from .errors import FileError, LimitError, Source, UsageError, ValueError_, option
from .lower import constant_value
from .tape import DEFAULT_MAX_ELEMENTS

_NAME = re.compile(r"[A-Za-z_][A-Za-z_0-9]*$")


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split on sep where it is not inside brackets or parentheses."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def parse_assignments(items, what: str = "--at", max_elements: int = DEFAULT_MAX_ELEMENTS,
                      allow_files: bool = True) -> dict[str, np.ndarray]:
    """Parse repeated NAME=VALUE[,NAME=VALUE...] (or @FILE) options into name -> array.

    A later option overrides an earlier one (--at @defaults.json --at lr=0.1); a name given
    twice in one option is a mistake, and an error."""
    out: dict[str, np.ndarray] = {}
    for item in items or ():
        seen = set()
        if item.strip().startswith("@") and allow_files:
            for k, v in load_mapping(item.strip()[1:], what).items():
                out[k] = _within(v, f"{what} {k}", max_elements)
            continue
        for part in split_top_level(item):
            if not part:
                continue
            name, eq, value = part.partition("=")
            name = name.strip()
            if not eq or not _NAME.match(name):
                raise UsageError(f"{what} expects NAME=VALUE, got '{part}'",
                                 hint=f"for example: {what} x=1.5,y=[1, 2]")
            if name in seen:
                raise UsageError(f"{what} gives '{name}' twice in '{item}'",
                                 hint=f"give each name once (a later {what} option overrides an earlier one)")
            seen.add(name)
            out[name] = parse_value(value, f"{what} {name}", max_elements)
    return out


def parse_value(text: str, label: str, max_elements: int = DEFAULT_MAX_ELEMENTS) -> np.ndarray:
    """A single value: a constant expression, or @FILE."""
    text = text.strip()
    if not text:
        raise UsageError(f"{label}: empty value")
    if text.startswith("@"):
        return _within(load_array(text[1:], label), label, max_elements)
    return constant_value(text, label, max_elements)


def _within(value: np.ndarray, label: str, max_elements: int) -> np.ndarray:
    """value, unless it has more than max_elements elements (a file's values count too)."""
    if value.size > max_elements:
        raise LimitError(f"{label}: a value of shape {value.shape} has {value.size} elements, "
                         f"more than {option('max_elements')}={max_elements}", option="max_elements")
    return value


def _read_error(path, label, err):
    """A file that cannot be read: missing or unreadable (a file error), or not what it
    should hold (a value error)."""
    if isinstance(err, FileNotFoundError):
        return FileError(f"{label}: cannot read '{path}': the file does not exist")
    if isinstance(err, OSError):
        return FileError(f"{label}: cannot read '{path}': {err.strerror or err}")
    return ValueError_(f"{label}: cannot read '{path}': {err}")


def load_array(path: str, label: str = "value") -> np.ndarray:
    """An array from .json, .npy, .csv or .txt."""
    if not path:
        raise UsageError(f"{label}: a file name must follow '@'", hint="for example x=@x.npy")
    ext = os.path.splitext(path)[1].lower()
    try:
        if ext == ".json":
            with open(path, encoding="utf-8") as f:
                return _json_array(json.load(f), path, label)
        if ext == ".npy":
            try:
                return _as_float(np.load(path, allow_pickle=False), path, label)
            except ValueError as err:
                if "pickle" in str(err):
                    raise ValueError("not a .npy file of numbers") from None
                raise
        if ext in (".csv", ".txt"):
            import warnings
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # "input contained no data" is an error here
                return np.loadtxt(path, delimiter="," if ext == ".csv" else None, dtype=np.float64, ndmin=0)
    except RecursionError:
        raise ValueError_(f"{label}: '{path}' is nested too deeply") from None
    except (OSError, ValueError, EOFError, UserWarning, UnicodeDecodeError) as err:
        raise _read_error(path, label, err) from None
    raise UsageError(f"{label}: unsupported file type '{ext or path}'",
                     hint="use .json, .npy, .csv or .txt")


def load_mapping(path: str, label: str = "--at") -> dict[str, np.ndarray]:
    """name -> array from a .json object or an .npz archive."""
    if not path:
        raise UsageError(f"{label}: a file name must follow '@'", hint=f"for example {option('at')} @point.json")
    ext = os.path.splitext(path)[1].lower()
    try:
        if ext == ".json":
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            if not isinstance(data, dict):
                raise ValueError_(f"{label}: '{path}' must hold a JSON object of name: value")
            return {str(k): _json_array(v, path, label) for k, v in data.items()}
        if ext == ".npz":
            try:
                with np.load(path, allow_pickle=False) as z:
                    return {k: _as_float(z[k], path, label) for k in z.files}
            except ValueError as err:  # (NumPy calls any file it cannot read "pickled data")
                if "pickle" in str(err):
                    raise ValueError("not a .npz file of numbers") from None
                raise
    except RecursionError:
        raise ValueError_(f"{label}: '{path}' is nested too deeply") from None
    except (OSError, ValueError, EOFError, UnicodeDecodeError) as err:
        raise _read_error(path, label, err) from None
    raise UsageError(f"{label} @FILE: unsupported file type '{ext or path}'",
                     hint="use .json (an object) or .npz")


def _json_array(data, path, label) -> np.ndarray:
    try:
        return array_from_json(data)
    except JSONNumberError as err:
        raise ValueError_(f"{label}: '{path}' " + _JSON_PROBLEMS[err.reason]) from None


#: What a .json value file holds instead of numbers, by JSONNumberError.reason.
_JSON_PROBLEMS = {"not a number": "must hold a number or a nested list of numbers",
                  "ragged": "holds a ragged list",
                  "too large": "holds an integer too large for a float"}


def _as_float(a, path, label) -> np.ndarray:
    if a.dtype.kind not in "biuf":
        raise ValueError_(f"{label}: '{path}' holds {a.dtype} data, not numbers")
    return a.astype(np.float64)


def read_source(arg: str) -> Source:
    """SOURCE: '-' is standard input, an existing path is a file, anything else is program text."""
    import sys

    if arg == "-":
        data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode()
        return Source(_decode(data, "<stdin>"), "<stdin>")
    if "\n" not in arg and len(arg) < 4096 and os.path.isdir(arg):
        raise ValueError_(f"'{arg}' is a directory", hint="give a .grad file (check also takes a directory)")
    if "\n" not in arg and len(arg) < 4096 and os.path.isfile(arg):
        try:
            with open(arg, "rb") as f:
                return Source(_decode(f.read(), arg), arg)
        except OSError as err:
            raise FileError(f"cannot read '{arg}': {err.strerror}") from None
    return Source(arg, "<expr>")


def _decode(data: bytes, label: str) -> str:
    try:
        text = data.decode("utf-8-sig")  # a byte-order mark, if any, is not part of the program
    except UnicodeDecodeError as err:
        raise ValueError_(f"{label} is not UTF-8 text (byte {err.start})",
                          hint="programs are plain text") from None
    # a lone carriage return (classic Mac line endings) ends a line, as \r\n and \n do
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text
