"""The pieces output is made of: a JSON document, plain numbers, rich tables.

views.py lays out each command's result with them (a result's JSON payload comes
from the result itself, SPEC §5).  They only format; they compute nothing.  rich is
imported only when a table is printed.
"""
from __future__ import annotations

import math
import os
import sys

import numpy as np

from gradcalc.codec import number_to_json, to_json
from gradcalc.errors import visible

SCHEMA = 1
#: Arrays with more elements than this are summarised in tables.
MAX_SHOWN = 64


# -- JSON -------------------------------------------------------------------

def dump_json(payload: dict, out=None) -> None:
    """One JSON object on stdout; floats keep full round-trip precision (repr), and
    non-finite ones are spelt as the codec spells them ("nan", "inf", "-inf").

    Written a piece at a time: objects a key at a time, lists an item at a time, and arrays
    STREAM_ELEMENTS numbers at a time, each converted as it is written: the same bytes as one
    json.dumps of the whole, which held every array as a Python list and the whole text at once
    (graph -f json of a loop filling 4,000 elements, 16 million numbers: 1.3 GB; the gradient
    of 10^8 elements: 6.5 GB)."""
    import json  # (here: table output, a one-liner's default, loads no json)
    out = out or sys.stdout
    _write_json({"schema": SCHEMA, **payload}, out.write, json.dumps)
    out.write("\n")


#: The most numbers of an array converted to text at once, by JSON and plain output alike.
STREAM_ELEMENTS = 1 << 16


def _write_json(value, write, dumps) -> None:
    """value as json.dumps(to_json(value), allow_nan=False) writes it, a piece at a time."""
    if isinstance(value, dict) and value:
        write("{")
        for i, (key, item) in enumerate(value.items()):
            write(f"{', ' if i else ''}{dumps(str(key))}: ")
            _write_json(item, write, dumps)
        write("}")
    elif isinstance(value, (list, tuple)) and value:
        write("[")
        for i, item in enumerate(value):
            if i:
                write(", ")
            _write_json(item, write, dumps)
        write("]")
    elif isinstance(value, np.ndarray) and value.ndim and value.size > STREAM_ELEMENTS:
        write("[")
        if value.ndim == 1:  # (the numbers of each chunk, as one list's, less its brackets)
            for i in range(0, value.size, STREAM_ELEMENTS):
                write((", " if i else "") + dumps(to_json(value[i:i + STREAM_ELEMENTS]), allow_nan=False)[1:-1])
        else:
            for i, row in enumerate(value):
                if i:
                    write(", ")
                _write_json(row, write, dumps)
        write("]")
    else:
        write(dumps(to_json(value), allow_nan=False))


# -- plain ------------------------------------------------------------------

def plain_number(x: float) -> str:
    """The shortest text that reads back as x: 12 for 12.0, 0.1 for 0.1, nan, inf."""
    if not math.isfinite(x):
        return number_to_json(x)
    if x == 0:
        return "-0" if math.copysign(1.0, x) < 0 else "0"
    if x.is_integer() and abs(x) < 1e16:
        return str(int(x))
    return repr(x)


def plain_line(a) -> str:
    return "".join(plain_pieces(a))


def plain_pieces(a):
    """plain_line's text, STREAM_ELEMENTS numbers at a time (an array of 10^8 numbers as one
    string took 8 GB)."""
    if a is None:
        yield "null"
        return
    flat = np.asarray(a, dtype=np.float64).ravel()
    for i in range(0, flat.size, STREAM_ELEMENTS):
        yield (" " if i else "") + " ".join(map(plain_number, flat[i:i + STREAM_ELEMENTS].tolist()))


# -- tables -----------------------------------------------------------------

def fmt(x: float, precision: int) -> str:
    if math.isnan(x) or math.isinf(x):
        return plain_number(x)
    if x == 0:
        return "0"
    return f"{x:.{precision}g}"


def shape_text(a) -> str:
    if a is None:
        return "-"
    shape = np.shape(a)
    return "scalar" if shape == () else "×".join(map(str, shape))


def value_text(a, precision: int) -> str:
    """A scalar, a vector on one line, a matrix as rows; big arrays summarised."""
    if a is None:
        return "null (unconnected)"
    a = np.asarray(a, dtype=np.float64)
    if a.ndim == 0:
        return fmt(float(a), precision)
    if a.size == 0:
        return "[] (empty)"
    if a.size > MAX_SHOWN:
        head = " ".join(fmt(float(v), precision) for v in a.ravel()[:4])
        known = a[~np.isnan(a)]  # infinities count: a summary must not hide them
        lo = hi = nrm = "nan"
        if known.size:
            big = float(np.max(np.abs(known)))
            # scaled, so that values past 1e154 do not overflow the sum of squares
            norm = big if big == 0 or math.isinf(big) else big * math.sqrt(float(np.sum((known / big) ** 2)))
            lo, hi, nrm = (fmt(float(v), precision) for v in (known.min(), known.max(), norm))
        nans = a.size - known.size
        return f"min {lo}  max {hi}  norm {nrm}{f'  ({nans} nan)' if nans else ''}\n[{head} …]"
    if a.ndim == 1:
        return "[" + "  ".join(fmt(float(v), precision) for v in a) + "]"
    rows = a.reshape(-1, a.shape[-1])
    cells = [[fmt(float(v), precision) for v in r] for r in rows]
    width = max(len(c) for r in cells for c in r)
    lines = ["[" + "  ".join(c.rjust(width) for c in r) + "]" for r in cells]
    if a.ndim > 2:  # a blank line between the 2-D slices of a stack
        per = a.shape[-2]
        lines = [ln + ("\n" if (i + 1) % per == 0 and i + 1 < len(lines) else "")
                 for i, ln in enumerate(lines)]
    return "\n".join(lines)


def inline_text(a, precision: int) -> str:
    """A value on one line, its nesting kept: 2, [1  2], [[1  2  3]], [[1  2]  [3  4]]."""
    a = np.asarray(a, dtype=np.float64)
    if a.ndim == 0:
        return fmt(float(a), precision)
    return "[" + "  ".join(inline_text(row, precision) for row in a) + "]"


def console(stderr: bool = False):
    from rich.console import Console
    from rich.table import Table

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            # rich would exit 1, which means "check found a mismatch": let the CLI decide
            self.quiet = True
            raise BrokenPipeError

        def print(self, *objects, **kwargs) -> None:
            """A table too wide for the terminal (COLUMNS=40) is printed a row at a time,
            one field per line, rather than squeezed into ellipses (x…, inp…)."""
            if len(objects) == 1 and isinstance(objects[0], Table):
                table = objects[0]
                if _widest(table) <= self.width:  # (its longest lines fit: so do its words)
                    _join_rows(table)
                elif not _fits(self, table):
                    _print_stacked(self, table)
                    return
                if table.title and table.title_justify == "left":
                    # rich pads a title to the table's width: a line of trailing blanks
                    super().print(table.title, style=table.title_style)
                    table.title = None
            super().print(*objects, **kwargs)

    stream = sys.stderr if stderr else sys.stdout
    width = table_width(stream)
    colours = colour_system(stream)
    # markup and emoji off: values and names are printed as text ("[nan  1]" would read as a
    # style tag, and a file named "a:x:.grad" as "a❌.grad"); nor is rich's emoji table loaded
    return _Console(stderr=stderr, highlight=False, soft_wrap=False, width=width, markup=False, emoji=False,
                    color_system=colours, force_terminal=colours is not None, no_color=colours is None)


#: The narrowest COLUMNS taken: rich drew nothing at all at COLUMNS=0, a character a line at 1.
MIN_COLUMNS = 20


def table_width(stream) -> int:
    """The width tables fit: COLUMNS where it is a width (MIN_COLUMNS or more), else the
    terminal's; piped output (CI logs, files) has no terminal width to fit: 160, for wide tables."""
    given = os.environ.get("COLUMNS", "").strip()
    if given:
        try:
            if int(given) >= MIN_COLUMNS:
                return int(given)
        except ValueError:
            pass
    if not stream.isatty():
        return 160
    try:
        return max(MIN_COLUMNS, os.get_terminal_size(stream.fileno()).columns)
    except (OSError, ValueError):
        return 80


def _fits(out, table) -> bool:
    """Whether every column of the table gets at least its longest word (asked where its longest
    lines do not fit, see _widest: else rich's measure of every cell, which the print takes
    again, cost half a second of `graph --full`'s 8,000 rows)."""
    from rich.measure import Measurement
    unclamped = out.options.update(width=10 ** 6)  # (a measure is clamped to the width it is given)
    return Measurement.get(out, unclamped, table).minimum <= out.width


def _widest(table) -> int:
    """The table's width were every column as wide as its longest line (header or cell) or its
    own least width, its padding and rules included: at least its minimum width (a column's
    is its longest word, or line where it does not wrap)."""
    from rich.cells import cell_len

    def longest(cell) -> int:
        text = cell.plain if hasattr(cell, "plain") else str(cell)
        return max(map(cell_len, text.split("\n")), default=0)

    columns = [max(longest(c.header), max(map(longest, c.cells), default=0), c.min_width or 0, c.width or 0)
               for c in table.columns]
    _, right, _, left = table.padding
    return sum(columns) + len(columns) * (left + right + 1) + 1  # (a rule before each column, one after)


def _join_rows(table) -> None:
    """Make a table whose every line fits its column (see _widest) one row of cells of many lines,
    each column's cells joined, each padded with blank lines to its row's height: rich draws it
    line for line as it draws the rows (no line wraps; each line is justified on its own), and
    lays out one cell a column instead of one a row and column (`graph --full`'s 8,000 rows:
    4.2 s, most of it rich's drawing of each cell).  Left as it is where rows differ in more
    than their cells (lines or styles between them) or a cell is not text, or text with a style
    or layout of its own (styled spans are kept)."""
    from rich.table import Row
    from rich.text import Text

    rows = table.rows
    if len(rows) < 2 or table.show_lines or table.leading or table.row_styles or \
            any(r.style is not None or r.end_section for r in rows):
        return
    columns = [c._cells for c in table.columns]
    plain = True
    for cells in columns:
        for cell in cells:
            if cell.__class__ is not str:
                if cell.__class__ is not Text or cell.style or cell.justify or cell.overflow or cell.no_wrap:
                    return  # (a style or layout of the cell's own: its padding and justification)
                plain = False
    texts = [[cell if cell.__class__ is str else cell.plain for cell in cells] for cells in columns]
    heights = [max(t.count("\n") for t in row) + 1 for row in zip(*texts)]
    for column, cells, lines in zip(table.columns, columns, texts):
        pads = ["\n" * (h - 1 - t.count("\n")) for t, h in zip(lines, heights)]
        if plain:
            joined = "\n".join(map("".join, zip(cells, pads)))
        else:
            joined = Text("\n").join(Text(c) + p if c.__class__ is str else c + p for c, p in zip(cells, pads))
        column._cells = [joined]
    table.rows = [Row()]


def _print_stacked(out, table) -> None:
    """The table's rows one after another: the first cell heads its row, then each other
    column's header and cell on a line of its own (cells of several lines stay aligned)."""
    def text(cell) -> str:
        return cell.plain if hasattr(cell, "plain") else str(cell)

    headers = [text(c.header) for c in table.columns]
    cells = [[text(x) for x in c.cells] for c in table.columns]
    pad = max((len(h) for h in headers[1:]), default=0)
    if table.title:
        out.print(text(table.title), style="bold")
    for i in range(table.row_count):
        head = cells[0][i] if cells else ""
        out.print(f"{headers[0]} {head}" if headers[0] and head else head or f"row {i + 1}", style="bold")
        for header, column in zip(headers[1:], cells[1:]):
            lines = column[i].split("\n") if column[i] else []
            for k, line in enumerate(lines):
                out.print(f"  {(header if k == 0 else '').ljust(pad)}  {line}".rstrip())
    if table.caption:
        out.print(text(table.caption))


def colour_system(stream) -> str | None:
    """Escape codes (bold, colours) or none (SPEC §6): NO_COLOR (any value) turns every one of
    them off, bold included; else FORCE_COLOR (non-empty) turns them on, even into a pipe or
    on a dumb terminal; else a terminal that is not TERM=dumb gets them."""
    env = os.environ
    dumb = env.get("TERM", "").lower() in ("dumb", "unknown")
    if "NO_COLOR" in env:
        return None
    if env.get("FORCE_COLOR"):
        return "standard" if dumb else "auto"
    try:
        terminal = stream.isatty()
    except (AttributeError, ValueError):  # a closed or odd stream
        terminal = False
    return "auto" if terminal and not dumb else None


def print_table(title: str, rows: list[tuple], columns=("name", "shape", "value"),
                precision: int = 6, caption: str | None = None) -> None:
    """rows: (name, array) pairs; prints name, shape and value columns."""
    from rich.table import Table

    table = Table(caption=caption, caption_justify="left")
    for c in columns:
        table.add_column(c, justify="right" if c == "value" else "left", no_wrap=(c != "value"))
    for name, a in rows:
        table.add_row(name, shape_text(a), value_text(a, precision))
    out = console()
    out.print(title, style="bold")
    out.print(table)


MATRIX_COLUMNS = 12  # the most columns a matrix is drawn with; wider ones are summarised


def print_matrix(title: str, block, row_name: str, col_name: str, row_shape, col_shape,
                 precision: int = 6) -> None:
    """A derivative block as a labelled matrix: rows row_name[i], columns col_name[j]."""
    from rich.table import Table

    a = np.asarray(block, dtype=np.float64)
    m, n = int(np.prod(row_shape, dtype=np.int64)), int(np.prod(col_shape, dtype=np.int64))
    if m * n > MAX_SHOWN * 4 or n > MATRIX_COLUMNS or m * n == 0:
        print_table(title, [(f"d{row_name}/d{col_name}", a)], precision=precision)
        return
    grid = a.reshape(m, n)
    table = Table()
    table.add_column("")
    for j in range(n):
        table.add_column(_label(col_name, col_shape, j), justify="right")
    for i in range(m):
        table.add_row(_label(row_name, row_shape, i), *[fmt(float(v), precision) for v in grid[i]])
    out = console()
    out.print(title, style="bold")
    out.print(table)


def _label(name: str, shape, flat: int) -> str:
    if tuple(shape) == ():
        return name
    idx = np.unravel_index(flat, shape)
    return f"{name}[{', '.join(str(int(i)) for i in idx)}]"


def print_warnings(warnings) -> None:
    """Warnings go to stderr in every format (JSON output also carries them)."""
    for w in warnings or ():
        sys.stderr.write(f"warning: {visible(str(w))}\n")
