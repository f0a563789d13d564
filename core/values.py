"""Values from the command line: ``--at``, cotangents and tangents, and the files they name.

A value is a constant expression of the language (``3``, ``[1, 2]``,
``pi/4``, ``ones(3)``) or ``@FILE``: ``.json`` (a number or nested list),
``.npy``, ``.csv``/``.txt`` (numpy.loadtxt; a header line is skipped).  ``--at @FILE``
reads a whole mapping name -> value from ``.json`` (an object, or gradcalc's own eval JSON
output) or ``.npz``.  A file without a known extension (a pipe, ``/dev/fd/N``) is read by
its content, and ``@-`` reads standard input (SPEC §3).
"""
from __future__ import annotations

import io
import os
import re

import numpy as np

from .codec import JSONNumberError, array_from_json
from .errors import FileError, GradcalcError, LimitError, Source, UsageError, ValueError_, option
from .lower import constant_value, find_inputs
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
    out = Point()
    for item in items or ():
        seen = set()
        if item.strip().startswith("@") and allow_files:
            path = item.strip()[1:]
            for k, v in load_mapping(path, what).items():
                out[k] = _within(v, f"{what} {k}", max_elements)
                out.from_files[k] = path
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
            out.from_files.pop(name, None)
    return out


class Point(dict):
    """name -> array, and ``from_files``: the names whose value came from an ``@FILE``
    mapping (-> its path), which a program may leave unused (one parameter file can serve
    several programs), unlike a name typed as NAME=VALUE."""

    def __init__(self, *args):
        super().__init__(*args)
        self.from_files: dict[str, str] = dict(getattr(args[0], "from_files", {})) if args else {}


    def merged(self, other: dict) -> "Point":
        """self with other's values on top (a later --at overrides an earlier one); a name
        keeps its file only when the value kept came from one (a plain dict is typed values)."""
        out = Point(self)
        files = getattr(other, "from_files", {})
        for k, v in other.items():
            out[k] = v
            if k in files:
                out.from_files[k] = files[k]
            else:
                out.from_files.pop(k, None)
        return out


def unused_names(point: Point, inputs) -> dict[str, str]:
    """The names of point that came from a file and are not among inputs (-> the file)."""
    return {k: path for k, path in point.from_files.items() if k in point and k not in inputs}


def drop_unused(point: dict, program) -> list[str]:
    """Remove from point the names of an ``--at @FILE`` mapping that the program does not
    take (SPEC §3: one parameter file serves several programs); the notes that say so, one
    per file: "--at @params.json: 'lr' is not an input of the program; ignored".  A name
    typed as NAME=VALUE stays (the run reports it as an error)."""
    if not getattr(point, "from_files", None):
        return []
    try:
        inputs = {i.name for i in find_inputs(program)}
    except GradcalcError:  # (the run reports it, located)
        return []
    unused: dict = {}
    for name, path in unused_names(point, inputs).items():
        del point[name]
        unused.setdefault(path, []).append(name)
    return [f"--at @{path}: {', '.join(map(repr, names))} "
            f"{'is not an input' if len(names) == 1 else 'are not inputs'} of the program; ignored"
            for path, names in unused.items()]


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
    """An array from .json, .npy, .csv or .txt, or by its content (a pipe, ``-``)."""
    if not path:
        raise UsageError(f"{label}: a file name must follow '@'", hint="for example x=@x.npy")
    try:
        kind, source = _content(path, label)
        if kind == "json":
            return _json_array(_read_json(source), path, label)
        if kind == "npy":
            try:
                return _as_float(np.load(source, allow_pickle=False), path, label)
            except ValueError as err:
                if "pickle" in str(err):
                    raise ValueError("not a .npy file of numbers") from None
                raise
        if kind in ("csv", "txt"):
            return _load_text(_read_text(source), "," if kind == "csv" else None)
    except RecursionError:
        raise ValueError_(f"{label}: '{path}' is nested too deeply") from None
    except (OSError, ValueError, EOFError, UserWarning, UnicodeDecodeError) as err:
        raise _read_error(path, label, err) from None
    raise UsageError(f"{label}: '{path}' holds an archive of several arrays (.npz)",
                     hint="an .npz file gives a whole point: --at @FILE")


def load_mapping(path: str, label: str = "--at") -> dict[str, np.ndarray]:
    """name -> array from a .json object (or gradcalc's own JSON output of eval) or an .npz
    archive, or by its content (a pipe, ``-``)."""
    if not path:
        raise UsageError(f"{label}: a file name must follow '@'", hint=f"for example {option('at')} @point.json")
    try:
        kind, source = _content(path, label)
        if kind == "json":
            data = _mapping_of(_read_json(source), path, label)
            return {str(k): _json_array(v, path, label) for k, v in data.items()}
        if kind == "npz":
            try:
                with np.load(source, allow_pickle=False) as z:
                    return _saved_point({k: _as_float(z[k], path, label) for k in z.files}, path, label)
            except ValueError as err:  # (NumPy calls any file it cannot read "pickled data")
                if "pickle" in str(err):
                    raise ValueError("not a .npz file of numbers") from None
                raise
    except RecursionError:
        raise ValueError_(f"{label}: '{path}' is nested too deeply") from None
    except (OSError, ValueError, EOFError, UnicodeDecodeError) as err:
        raise _read_error(path, label, err) from None
    ext = os.path.splitext(path)[1].lower()
    if path != "-" and ext in _EXTENSIONS:
        raise UsageError(f"{label} @FILE: unsupported file type '{ext}'", hint="use .json (an object) or .npz")
    raise ValueError_(f"{label}: '{path}' holds neither a JSON object nor an .npz archive",
                      hint="a values file holds a JSON object {name: value} or an .npz archive")


_EXTENSIONS = {".json": "json", ".npy": "npy", ".npz": "npz", ".csv": "csv", ".txt": "txt"}
_MAGIC = ((b"\x93NUMPY", "npy"), (b"PK\x03\x04", "npz"), (b"PK\x05\x06", "npz"))


def _content(path: str, label: str):
    """(kind, what to read it from): the path, for a known extension; else the bytes, read
    whole (a pipe can be read once), of the kind their content says: NPY or NPZ by their
    magic numbers, else JSON if they parse as JSON, else text (csv when it has commas)."""
    kind = None if path == "-" else _EXTENSIONS.get(os.path.splitext(path)[1].lower())
    if kind is not None:
        return kind, path
    if path == "-":
        data = read_stdin(f"{label}=@-" if " " in label else f"{label} @-")  # --at x=@-, --at @-
    else:
        with open(path, "rb") as f:
            data = f.read()
    for magic, kind in _MAGIC:
        if data.startswith(magic):
            return kind, io.BytesIO(data)
    import json  # (here: a one-liner's --at x=1 reads no file and loads no json)
    try:
        json.loads(data.decode("utf-8-sig"))
        return "json", io.BytesIO(data)
    except (ValueError, UnicodeDecodeError):
        return ("csv" if b"," in data else "txt"), io.BytesIO(data)


def _read_json(source):
    import json
    if isinstance(source, str):
        with open(source, encoding="utf-8") as f:
            return json.load(f, object_pairs_hook=_unique_keys)
    return json.loads(source.getvalue().decode("utf-8-sig"), object_pairs_hook=_unique_keys)


def _unique_keys(pairs: list) -> dict:
    """A JSON object whose names are all different: a value named twice is an error, as
    --at x=1,x=2 is (json would keep the last silently)."""
    out = dict(pairs)
    if len(out) < len(pairs):
        seen: set = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"the name '{twice}' appears twice")
    return out


def _read_text(source) -> str:
    if isinstance(source, str):
        with open(source, encoding="utf-8") as f:
            return f.read()
    return source.getvalue().decode("utf-8-sig")


def _load_text(text: str, delimiter) -> np.ndarray:
    """numpy.loadtxt of the text; a first line of names (a header: x,y) is skipped."""
    import warnings
    lines = text.splitlines()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "input contained no data" is an error here
        try:
            return np.loadtxt(lines, delimiter=delimiter, dtype=np.float64, ndmin=0)
        except ValueError:
            first = next((i for i, ln in enumerate(lines) if ln.strip() and not ln.lstrip().startswith("#")), None)
            if first is None or not _header(lines[first], delimiter):
                raise
            return np.loadtxt(lines[first + 1:], delimiter=delimiter, dtype=np.float64, ndmin=0)


def _header(line: str, delimiter) -> bool:
    """Whether a first line is a header: no field of it is a number or begins as one.  A data
    row with a typo ('1.5e,2') is no header: skipped, it silently lost a row of the value."""
    import re
    fields = [t.strip() for t in line.split(delimiter) if t.strip()]
    return not any(_is_float(t) or re.match(r"[+-]?\.?\d", t) for t in fields)


def _is_float(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _saved_point(arrays: dict, path: str, label: str) -> dict:
    """An .npz values file's mapping; gradcalc's own --save archive (keys are JSON paths,
    values/y, at/x) gives what its JSON output would: eval's values, grad's point (at)."""
    if not any("/" in k for k in arrays):
        return arrays
    for prefix in ("values/", "at/"):
        found = {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}
        if found:
            return found
    raise ValueError_(f"{label}: '{path}' is an archive gradcalc's --save wrote without a point or values",
                      hint="an .npz values file holds one array per name; --save of eval gives values, "
                           "of grad and jacobian their point (at)")


def _mapping_of(data, path: str, label: str) -> dict:
    """A JSON values file's mapping; gradcalc's own JSON output of eval gives its values, of
    grad and jacobian their point (at)."""
    if isinstance(data, dict) and "schema" in data and ("command" in data or "error" in data):
        for key in ("values", "at"):
            if isinstance(data.get(key), dict):
                return data[key]
        raise ValueError_(f"{label}: '{path}' is gradcalc's JSON output of "
                          f"{data.get('command', 'an error')}, not a values file",
                          hint="a values file holds a JSON object {name: value}; the JSON output of "
                               "eval is read for its values, of grad and jacobian for their point (at)")
    if not isinstance(data, dict):
        raise ValueError_(f"{label}: '{path}' must hold a JSON object of name: value")
    return data


#: Standard input, once read or promised: (the stream, its reader, whether it is only promised),
#: so that a second reader is told.
_stdin_read: list = []


def read_stdin(what: str) -> bytes:
    """All of standard input, for what (SOURCE -, --at x=@-); it can be read only once."""
    import sys
    stream = sys.stdin
    if stream is None:  # (the shell closed it: <&-)
        raise UsageError(f"{what}: standard input is closed", hint="give it in a file, or pipe it in")
    if _stdin_read and _stdin_read[0][0] is stream and not (_stdin_read[0][2] and _stdin_read[0][1] == what):
        raise UsageError(f"{what}: standard input is read already, by {_stdin_read[0][1]}",
                         hint="standard input gives one thing: put the other in a file")
    _stdin_read[:] = [(stream, what, False)]
    return stream.buffer.read() if hasattr(stream, "buffer") else stream.read().encode()


def promise_stdin(what: str) -> None:
    """Keep standard input for what, which reads it later (check's SOURCE -, read after the
    --at values): another reader is told it is taken, as if what had read it first."""
    import sys
    stream = sys.stdin
    if stream is not None and not (_stdin_read and _stdin_read[0][0] is stream):
        _stdin_read[:] = [(stream, what, True)]


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
    """SOURCE: '-' is standard input, an existing path is a file (or a pipe: <(...)), anything
    else is program text."""
    if arg == "-":
        return Source(_decode(read_stdin("SOURCE -"), "<stdin>"), "<stdin>")
    if "\n" not in arg and len(arg) < 4096 and os.path.isdir(arg):
        raise ValueError_(f"'{arg}' is a directory", hint="give a .grad file (check also takes a directory)")
    if "\n" not in arg and len(arg) < 4096 and os.path.exists(arg):
        try:
            with open(arg, "rb") as f:
                return Source(_decode(f.read(), arg), arg)
        except OSError as err:
            raise FileError(f"cannot read '{arg}': {err.strerror}") from None
    return Source(arg, "<expr>")


def parse_source(src: Source, given: str | None = None):
    """The Program of a SOURCE read (see read_source).  Program text that does not parse but
    reads as a path (model.grad, dir/model.grad) is a file that does not exist: a FileError,
    not a syntax error about its '.'."""
    from .errors import SyntaxError_
    from .syntax import parse
    try:
        return parse(src.text, src.label)
    except SyntaxError_:
        if src.label == "<expr>" and given is not None and _looks_like_a_path(given):
            raise FileError(f"the file '{given}' does not exist",
                            hint="SOURCE is a file, - for stdin, or program text") from None
        raise


def _looks_like_a_path(text: str) -> bool:
    return re.fullmatch(r"[\w./\\~-]+", text) is not None and (
        re.search(r"[/\\]", text) is not None or re.search(r"\.(grad|txt|json|npy|csv)$", text) is not None)


def _decode(data: bytes, label: str) -> str:
    try:
        text = data.decode("utf-8-sig")  # a byte-order mark, if any, is not part of the program
    except UnicodeDecodeError as err:
        raise ValueError_(f"{label} is not UTF-8 text (byte {err.start})",
                          hint="programs are plain text") from None
    # a lone carriage return (classic Mac line endings) ends a line, as \r\n and \n do
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text
