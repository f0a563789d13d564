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
import math
import os
import re
from functools import partial

import numpy as np

from .codec import JSONNumberError, array_from_json
from .errors import FileError, GradcalcError, LimitError, Source, UsageError, ValueError_, option
from .lower import constant_value, find_inputs
from .tape import DEFAULT_MAX_ELEMENTS, elements_spanned

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
    twice in one option is a mistake, and an error, and so is an empty item (x=1,,y=2, a comma
    at either end, an empty option): "$A,$B" with $A empty lost a value silently, and an input
    with a default took the default.  Without files (--tangent, --cotangent: no defaults to
    override), a name given in two options is an error too: the first value was lost silently."""
    out = Point()
    earlier: set = set()  # (the names of the options before, without files)
    for item in items or ():
        seen = set()
        if item.strip().startswith("@") and allow_files:
            path = item.strip()[1:]
            for k, v in load_mapping(path, what, max_elements).items():
                out[k] = _within(v, f"{what} {k}", max_elements)
                out.from_files[k] = path
            continue
        parts = split_top_level(item)
        if "" in parts:
            raise _empty_item(what, item, parts)
        for part in parts:
            name, eq, value = part.partition("=")
            name = name.strip()
            if not eq or not _NAME.match(name):
                raise UsageError(f"{what} expects NAME=VALUE, got '{part}'",
                                 hint=f"for example: {what} x=1.5,y=[1, 2]")
            if name in seen:
                raise UsageError(f"{what} gives '{name}' twice in '{item}'",
                                 hint=f"give each name once (a later {what} option overrides an earlier one)")
            if name in earlier:
                raise UsageError(f"{what} gives '{name}' twice, in two options", name=name,
                                 hint=f"give each name once: {what} {name}=VALUE")
            seen.add(name)
            out[name] = parse_value(value, f"{what} {name}", max_elements)
            out.from_files.pop(name, None)
        if not allow_files:
            earlier |= seen
    return out


def _empty_item(what: str, item: str, parts: list) -> UsageError:
    """The error for an option holding an empty NAME=VALUE item (SPEC §3: NAME=VALUE[,NAME=VALUE...])."""
    example = f"{what} x=1.5,y=[1, 2]"
    if not item.strip():
        return UsageError(f"{what} '{item}' gives no NAME=VALUE", hint=f"give one ({example}), or leave {what} out")
    where = ("at its start" if parts[0] == "" else "at its end" if parts.index("") == len(parts) - 1
             else "between two commas")
    return UsageError(f"{what} '{item}' has an empty item {where}",
                      hint=f"separate NAME=VALUE items by one comma, with none at either end: {example}")


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
        raise UsageError(f"{label}: empty value", hint="give a number, an array or @FILE, e.g. 1.5 or [1, 2]")
    if text.startswith("@"):
        return _within(load_array(text[1:], label, max_elements), label, max_elements)
    return constant_value(text, label, max_elements)


def _within(value: np.ndarray, label: str, max_elements: int) -> np.ndarray:
    """value, unless it has more than max_elements elements (a file's values count too)."""
    _check_shape(value.shape, label, max_elements)
    return value


def _check_shape(shape: tuple, label: str, max_elements: int) -> None:
    """Refuse a shape spanning more than max_elements elements (tape.elements_spanned, as
    Builder.check_size counts them)."""
    size = elements_spanned(shape)
    if size > max_elements:
        verb = "spans" if 0 in shape else "has"
        raise LimitError(f"{label}: a value of shape {tuple(shape)} {verb} {size} elements, "
                         f"more than {option('max_elements')}={max_elements}", option="max_elements")


def _read_error(path, label, err):
    """A file that cannot be read: missing or unreadable (a file error), or not what it
    should hold (a value error)."""
    if isinstance(err, FileNotFoundError):
        return FileError(f"{label}: cannot read '{path}': the file does not exist")
    if isinstance(err, OSError):
        return FileError(f"{label}: cannot read '{path}': {err.strerror or err}")
    if isinstance(err, JSONNumberError):  # (from the JSON reader's number hooks)
        return ValueError_(f"{label}: '{path}' {_JSON_PROBLEMS[err.reason]} ({err})",
                           hint="the largest float is about 1.8e308; an infinity is written "
                                "Infinity in JSON, inf in a .csv or .txt file")
    if isinstance(err, UnicodeDecodeError):
        return ValueError_(f"{label}: cannot read '{path}': it is not UTF-8 text (byte {err.start})",
                           hint="a value file is .json, .csv or .txt (text) or .npy, .npz (NumPy's binary)")
    import json
    if isinstance(err, json.JSONDecodeError):  # (its own words, "Expecting value: line 1 column 1 (char 0)", reworded)
        what = "it is empty" if not err.doc.strip() else f"it is not JSON ({err.msg} at line {err.lineno}, " \
                                                           f"column {err.colno})"
        return ValueError_(f"{label}: cannot read '{path}': {what}", hint=_VALUE_FILES)
    return ValueError_(f"{label}: cannot read '{path}': {err}", hint=_VALUE_FILES)


_VALUE_FILES = ("a value file holds one array: JSON ([1, 2] or 1.5), CSV or whitespace-separated text, or "
                "NumPy's .npy or .npz")


def load_array(path: str, label: str = "value", max_elements: int = DEFAULT_MAX_ELEMENTS) -> np.ndarray:
    """An array from .json, .npy, .csv or .txt, or by its content (a pipe, ``-``).  Nothing
    larger than max_elements is read: an .npy header's shape is checked before its data, and
    a text is read up to _value_bytes(max_elements)."""
    if not path:
        raise UsageError(f"{label}: a file name must follow '@'", hint="for example x=@x.npy")
    try:
        kind, source = _content(path, label, max_elements)
        if kind == "json":
            return _json_array(_read_json(source), path, label)
        if kind == "npy":
            return _load_npy(source, path, label, max_elements)
        if kind in ("csv", "txt"):
            return _finite_text(_load_text(source, "," if kind == "csv" else None), source)
    except RecursionError:
        raise ValueError_(f"{label}: '{path}' is nested too deeply") from None
    except (OSError, ValueError, EOFError, UserWarning) as err:
        raise _read_error(path, label, err) from None
    raise UsageError(f"{label}: '{path}' holds an archive of several arrays (.npz)",
                     hint="an .npz file gives a whole point: --at @FILE")


def load_mapping(path: str, label: str = "--at", max_elements: int = DEFAULT_MAX_ELEMENTS) -> dict[str, np.ndarray]:
    """name -> array from a .json object (or gradcalc's own JSON output of eval) or an .npz
    archive, or by its content (a pipe, ``-``); read within max_elements as load_array is."""
    if not path:
        raise UsageError(f"{label}: a file name must follow '@'", hint=f"for example {option('at')} @point.json")
    try:
        kind, source = _content(path, label, max_elements)
        if kind == "json":
            data = _mapping_of(_read_json(source), path, label)
            return {str(k): _json_array(v, path, label) for k, v in data.items()}
        if kind == "npz":
            return _saved_point(_load_npz(source, path, label, max_elements), path, label)
    except RecursionError:
        raise ValueError_(f"{label}: '{path}' is nested too deeply") from None
    except (OSError, ValueError, EOFError) as err:
        raise _read_error(path, label, err) from None
    ext = os.path.splitext(path)[1].lower()
    if path != "-" and ext in _EXTENSIONS:
        raise UsageError(f"{label} @FILE: unsupported file type '{ext}'", hint="use .json (an object) or .npz")
    raise ValueError_(f"{label}: '{path}' holds neither a JSON object nor an .npz archive",
                      hint="a values file holds a JSON object {name: value} or an .npz archive")


_EXTENSIONS = {".json": "json", ".npy": "npy", ".npz": "npz", ".csv": "csv", ".txt": "txt"}
_MAGIC = ((b"\x93NUMPY", "npy"), (b"PK\x03\x04", "npz"), (b"PK\x05\x06", "npz"))


def _content(path: str, label: str, max_elements: int):
    """(kind, what to read it from): an .npy or .npz path that is a file, for NumPy to read
    (its headers are checked before its data); else the bytes, read up to
    _value_bytes(max_elements) (a pipe can be read once) of the kind their extension or
    their content says: NPY or NPZ by their magic numbers, else JSON if they parse as JSON,
    else text (csv when it has commas).  A text is given decoded, a byte-order mark left out."""
    kind = None if path == "-" else _EXTENSIONS.get(os.path.splitext(path)[1].lower())
    if kind in ("npy", "npz") and os.path.isfile(path):
        return kind, path
    refuse = partial(_too_many_bytes, path, label, max_elements)
    check_start = None if kind in ("npy", "npz") else _refuse_binary
    if path == "-":
        data = read_stdin(f"{label}=@-" if " " in label else f"{label} @-",  # --at x=@-, --at @-
                          _value_bytes(max_elements), refuse, check_start)
    else:
        with open(path, "rb") as f:
            data = read_capped(f, _value_bytes(max_elements), refuse, check_start)
    binary = next((k for magic, k in _MAGIC if data.startswith(magic)), None)
    if kind in ("npy", "npz") or (kind is None and binary is not None):  # (a pipe named x.npy)
        return kind or binary, io.BytesIO(data)
    text = data.decode("utf-8-sig")  # (a byte-order mark, as Excel's "CSV UTF-8" writes, is no data)
    if kind is not None:
        return kind, text
    import json  # (here: a one-liner's --at x=1 reads no file and loads no json)
    try:  # (numbers left as text: a 5,000-digit integer is JSON, refused later in words)
        json.loads(text, parse_int=str, parse_float=str)
        return "json", text
    except ValueError:
        return ("csv" if "," in text else "txt"), text


#: A value's file or stream is read up to this many bytes an element of --max-elements, and
#: _SLACK_BYTES more: JSON at full precision, indented, takes some 40 bytes an element, .npy
#: 8 (16 for long doubles).  /dev/zero or a stream that never ends was read until memory ran out.
_BYTES_PER_ELEMENT = 64
_SLACK_BYTES = 1 << 20
#: A program file (or SOURCE -) is read up to this many bytes: a 2 MB expression takes 3 s and
#: 340 MB to parse, so 16 MiB of program is ~3 GB; more is no program anyone writes.
MAX_PROGRAM_BYTES = 16 << 20
_CHUNK = 1 << 20


def _value_bytes(max_elements: int) -> int:
    return _BYTES_PER_ELEMENT * max_elements + _SLACK_BYTES


def _too_many_bytes(path: str, label: str, max_elements: int) -> LimitError:
    return LimitError(f"{label}: '{path}' holds more than {_value_bytes(max_elements):,} bytes, the most read "
                      f"for a value under {option('max_elements')}={max_elements}", option="max_elements",
                      hint=f"a value is read up to {_BYTES_PER_ELEMENT} bytes an element of {option('max_elements')}, "
                           f"plus 1 MiB: raise {option('max_elements')} to read more")


def _refuse_binary(start: bytes) -> None:
    """Refuse, at its first chunk, a value that is neither NPY/NPZ nor UTF-8 text without NUL
    bytes (/dev/zero, /dev/urandom), rather than reading up to the limit first."""
    if any(start.startswith(magic) for magic, _ in _MAGIC):
        return
    import codecs
    codecs.getincrementaldecoder("utf-8")().decode(start, final=False)  # (UnicodeDecodeError: a ValueError)
    nul = start.find(b"\0")
    if nul >= 0:
        raise ValueError(f"it holds binary data (a NUL byte at byte {nul}), not numbers as text")


def read_capped(stream, cap: int, refuse, check_start=None) -> bytes:
    """All of a binary stream, a chunk at a time, up to cap bytes: refuse() gives the error
    raised past it; check_start(first chunk) may refuse what cannot be the data wanted."""
    data = bytearray()
    while chunk := stream.read(min(_CHUNK, cap + 1 - len(data))):
        if not data and check_start is not None:
            check_start(chunk)
        data += chunk
        if len(data) > cap:
            raise refuse()
    return bytes(data)


def _load_npy(source, path: str, label: str, max_elements: int) -> np.ndarray:
    """An .npy file's array, its header checked before any data is read (_check_npy_header)."""
    from contextlib import nullcontext
    with open(source, "rb") if isinstance(source, str) else nullcontext(source) as f:
        _check_npy_header(f, path, label, max_elements)
        f.seek(0)
        return _as_float(np.lib.format.read_array(f, allow_pickle=False), path, label)


def _load_npz(source, path: str, label: str, max_elements: int) -> dict:
    """An .npz archive's arrays by name, each member's header checked before its data."""
    import zipfile
    import zlib
    arrays = {}
    try:
        with zipfile.ZipFile(source) as z:
            for member in z.infolist():
                if not member.filename.endswith(".npy"):
                    raise ValueError(f"not a .npz file of numbers: '{member.filename}' is not an array (.npy)")
                name = member.filename[:-len(".npy")]
                with z.open(member) as f:
                    _check_npy_header(f, path, f"{label} {name}", max_elements, member=name)
                with z.open(member) as f:
                    arrays[name] = _as_float(np.lib.format.read_array(f, allow_pickle=False), path, label)
    except RecursionError:
        raise
    except (zipfile.BadZipFile, zlib.error, NotImplementedError, RuntimeError):  # (encrypted: RuntimeError)
        raise ValueError("not a .npz file of numbers") from None
    return arrays


def _check_npy_header(f, path: str, label: str, max_elements: int, member: str | None = None) -> None:
    """Read an .npy header and refuse, before NumPy reads any data, what is not an array of
    numbers within max_elements: a 128-byte file claiming 10^10 elements was allocated (out of
    memory), and one claiming 10^30 overflowed NumPy's int64 count (an internal error)."""
    import warnings
    fmt = np.lib.format
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (a Python 2 header: NumPy reads it again, and warns then)
            version = fmt.read_magic(f)
            read = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}.get(version)
            if read is None:
                raise ValueError
            shape, _, dtype = read(f)
    except (ValueError, SyntaxError, TypeError, EOFError):
        raise _not_numbers("its header cannot be read", member) from None
    if dtype.hasobject:
        raise _not_numbers("it holds Python objects", member)
    _numbers_only(dtype, path, label)
    if any(d < 0 for d in shape):
        raise _not_numbers(f"its header gives the shape {shape}", member)
    _check_shape(shape, label, max_elements)
    _check_npy_length(f, shape, dtype, member)


def _check_npy_length(f, shape: tuple, dtype, member: str | None) -> None:
    """Refuse an .npy file whose data is shorter than its header says (a file cut short: NumPy's
    own words were 'Failed to read all data for array ... (file seems not fully written?)'),
    where the stream can be measured (a pipe cannot: it is left to NumPy)."""
    try:
        here = f.tell()
        end = f.seek(0, 2)
        f.seek(here)
    except (OSError, ValueError, AttributeError):
        return
    needed = math.prod(shape) * dtype.itemsize
    if end - here < needed:
        raise _not_numbers(f"it is cut short: its header gives shape {tuple(shape)}, {needed:,} bytes of data, "
                           f"and {end - here:,} follow", member)


def _not_numbers(why: str, member: str | None) -> ValueError:
    """An .npy file, or an .npz archive's array member, that is no array of numbers."""
    if member is None:
        return ValueError(f"not a .npy file of numbers: {why}")
    return ValueError(f"not a .npz file of numbers: its array '{member}': {why}")


def _read_json(text: str):
    import json
    return json.loads(text, object_pairs_hook=_unique_keys, parse_int=_json_int, parse_float=_json_float)


#: A JSON integer of more digits than this is beyond float64 (about 1.8e308): refused before
#: int() of it, which past 4,300 digits says to call sys.set_int_max_str_digits().
_FLOAT_DIGITS = 309


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > _FLOAT_DIGITS:
        raise JSONNumberError(f"{text[:20]}… has {len(text.lstrip('-')):,} digits", "too large")
    return int(text)


def _json_float(text: str) -> float:
    """A JSON number as a float; 1e400 is an error, as an integer beyond float64 is, not inf
    (an infinity is written Infinity, which json reads as one)."""
    value = float(text)
    if math.isinf(value):
        raise JSONNumberError(text if len(text) <= 40 else text[:40] + "…", "overflows")
    return value


def _unique_keys(pairs: list) -> dict:
    """A JSON object whose names are all different: a value named twice is an error, as
    --at x=1,x=2 is (json would keep the last silently)."""
    out = dict(pairs)
    if len(out) < len(pairs):
        seen: set = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"the name '{twice}' appears twice")
    return out


def _load_text(text: str, delimiter) -> np.ndarray:
    """numpy.loadtxt of the text; a first line of names (a header: x,y) is skipped."""
    import warnings
    lines = text.splitlines()
    if not any(ln.strip() and not ln.lstrip().startswith("#") for ln in lines):
        raise ValueError("it holds no value (it is empty, or only comments)")  # (loadtxt: 'input contained no data: "[]"')
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "input contained no data" is an error here
        try:
            return _loadtxt(lines, delimiter, 0)
        except ValueError:
            first = next((i for i, ln in enumerate(lines) if ln.strip() and not ln.lstrip().startswith("#")), None)
            if first is None or not _header(lines[first], delimiter):
                raise
            return _loadtxt(lines[first + 1:], delimiter, first + 1)


_RAGGED = re.compile(r"the number of columns changed from \d+ to \d+ at row \d+")
_NOT_A_NUMBER = re.compile(r"could not convert string '(.*)' to float64 at row \d+, column \d+\.?$")


def _loadtxt(lines: list, delimiter, skipped: int) -> np.ndarray:
    """numpy.loadtxt of lines (the text's from line skipped + 1 on), its errors in the file's
    words: an entry that is no number, or rows of different lengths, with their lines and
    columns as an editor counts them (NumPy counts rows from 0, past comments and a header)."""
    try:
        return np.loadtxt(lines, delimiter=delimiter, dtype=np.float64, ndmin=0)
    except ValueError as err:
        raise _worded(err, lines, delimiter, skipped) from None


def _worded(err: ValueError, lines: list, delimiter, skipped: int) -> ValueError:
    rows = [(i + 1 + skipped, line.split(delimiter)) for i, line in enumerate(lines)
            if line.strip() and not line.lstrip().startswith("#")]
    if _RAGGED.match(str(err)):
        (first, entries), *rest = rows
        at = next((f" ({len(entries)} on line {first}, {len(e)} on line {n})"
                   for n, e in rest if len(e) != len(entries)), "")
        return ValueError(f"its rows hold different numbers of entries{at}")
    bad = _NOT_A_NUMBER.match(str(err))
    if bad is None:
        return err
    where = next((f" at line {n}, column {k + 1}" for n, entries in rows
                  for k, entry in enumerate(entries) if entry.strip() == bad[1]), "")
    return ValueError(f"'{bad[1]}'{where} is not a number")


#: A number in a text value as loadtxt reads it, for finding one that overflowed to inf.
_DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def _finite_text(value: np.ndarray, text: str) -> np.ndarray:
    """value, read from text, unless a number written in digits overflowed to inf in it (1e400):
    an error, as in a JSON file; inf spelt out stays inf."""
    if np.isinf(value).any():
        big = next((m.group() for m in _DECIMAL.finditer(text) if math.isinf(float(m.group()))), None)
        if big is not None:
            raise JSONNumberError(big if len(big) <= 40 else big[:40] + "…", "overflows")
    return value


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


def read_stdin(what: str, cap: int, refuse, check_start=None) -> bytes:
    """All of standard input, for what (SOURCE -, --at x=@-), up to cap bytes (see
    read_capped); it can be read only once."""
    import sys
    stream = sys.stdin
    if stream is None:  # (the shell closed it: <&-)
        raise UsageError(f"{what}: standard input is closed", hint="give it in a file, or pipe it in")
    if _stdin_read and _stdin_read[0][0] is stream and not (_stdin_read[0][2] and _stdin_read[0][1] == what):
        raise UsageError(f"{what}: standard input is read already, by {_stdin_read[0][1]}",
                         hint="standard input gives one thing: put the other in a file")
    _stdin_read[:] = [(stream, what, False)]
    if hasattr(stream, "buffer"):
        return read_capped(stream.buffer, cap, refuse, check_start)
    return read_capped(io.BytesIO(stream.read(cap + 1).encode()), cap, refuse, check_start)


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
                  "too large": "holds an integer too large for a float",
                  "overflows": "holds a number too large for a float"}


def _as_float(a, path, label) -> np.ndarray:
    _numbers_only(a.dtype, path, label)
    return a.astype(np.float64)


def _numbers_only(dtype, path, label) -> None:
    if dtype.kind not in "biuf":
        raise ValueError_(f"{label}: '{path}' holds {dtype} data, not numbers")


def read_source(arg: str) -> Source:
    """SOURCE: '-' is standard input, an existing path is a file (or a pipe: <(...)), anything
    else is program text."""
    if arg == "-":
        return Source(_decode(read_stdin("SOURCE -", MAX_PROGRAM_BYTES, partial(_program_too_large, "SOURCE -")),
                              "<stdin>"), "<stdin>")
    if "\n" not in arg and len(arg) < 4096 and os.path.isdir(arg):
        raise ValueError_(f"'{arg}' is a directory", hint="give a .grad file (check also takes a directory)")
    if "\n" not in arg and len(arg) < 4096 and os.path.exists(arg):
        try:
            with open(arg, "rb") as f:
                return Source(_decode(read_capped(f, MAX_PROGRAM_BYTES, partial(_program_too_large, f"'{arg}'")), arg), arg)
        except OSError as err:
            raise FileError(f"cannot read '{arg}': {err.strerror}") from None
    return Source(arg, "<expr>")


def _program_too_large(what: str) -> LimitError:
    return LimitError(f"{what} holds more than {MAX_PROGRAM_BYTES >> 20} MiB, more than gradcalc reads as a program",
                      hint="a program is text: give large data as a values file (--at x=@FILE)")


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
