"""Pictures in the terminal: plot's curves and check --sweep's log-log V, drawn with plotille.

plotille (MIT, no dependencies, about 6 ms to import) is imported here only, and this
module only by plot and check --sweep, so no other command pays for it at start-up.
The library computed every number; this module only lays them out.  Colour follows the
tables' decision (rich's: a terminal, NO_COLOR, TERM=dumb, FORCE_COLOR); without it, no
escape code is written and the curves differ by their marks (braille line, dots, rings).
"""
from __future__ import annotations

import math
import os
import re
import sys

import numpy as np

#: Rows of the drawing area (the axes add four lines, the legend one per curve and mark).
PLOT_HEIGHT = 20
SWEEP_HEIGHT = 12
#: Columns the y axis's labels take ("   -1.5e+03 | "), and the widest picture drawn.
_Y_AXIS = 13
MAX_COLUMNS = 120
#: Each curve: its marker (None: plotille's braille line), its colour, its legend symbol.
_CURVES = ((None, "blue", "⠤⠤"), ("·", "red", "··"), ("∘", "green", "∘∘"))
_MARK = "┊"
#: Marks drawn and listed (floor over a wide interval has a kink at every integer).
MARKS_DRAWN = 9


def colour() -> bool:
    """Whether stdout takes escape codes: the same decision as the tables' (rich's console)."""
    from .render import console
    out = console()
    return out.color_system is not None and not out.no_color


def columns() -> int:
    """The width to draw in: COLUMNS, else the terminal's, else 80; at most MAX_COLUMNS."""
    try:
        given = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        given = 0
    if given <= 0:
        given = os.get_terminal_size(sys.stdout.fileno()).columns if sys.stdout.isatty() else 80
    return max(40, min(given, MAX_COLUMNS))


def _figure(x_label: str, y_label: str, width: int, height: int, with_colour: bool):
    import plotille
    fig = plotille.Figure()
    fig.width, fig.height = width, height
    fig.with_colors = with_colour
    fig.origin = False  # (a braille axis at 0 would read as one more curve without colour)
    fig.x_label, fig.y_label = x_label, y_label
    return fig


def _legend(symbol: str, text: str, lc: str | None, with_colour: bool, width: int | None = None) -> str:
    """A legend line: the symbol, then the text, wrapped within width (if given) under itself."""
    import plotille
    lead = "  " + plotille.color(symbol, fg=lc, no_color=not with_colour) + " "
    indent = 3 + len(symbol)  # (the lead's cells: its colour codes take none)
    if width is None or len(text) + indent <= width:
        return lead + text
    import textwrap
    lines = textwrap.wrap(text, max(20, width - indent), break_on_hyphens=False) or [""]
    return lead + ("\n" + " " * indent).join(lines)


def _limits(curves) -> tuple[float, float, float]:
    """(lo, hi, scale): the y range of the finite samples times scale, padded by a twentieth.
    scale is 1, or 1/4 where that range's width is beyond float64 (0 to 1.8e308, -1e308 to
    1e308): plotille places a dot by (y - lo) / ((hi - lo) / rows), which overflowed to nan
    and crashed; the tick labels divide by scale again."""
    finite = np.concatenate([c[np.isfinite(c)] for c in curves]) if curves else np.zeros(0)
    if not finite.size:
        return -1.0, 1.0, 1.0
    for scale in (1.0, 0.25):  # (a power of two: scaling is exact; 1/4 fits -max..max padded)
        lo, hi = float(finite.min()) * scale, float(finite.max()) * scale
        pad = (hi / 20 - lo / 20) or max(abs(lo), 1.0) / 20
        if math.isfinite((hi + pad) - (lo - pad)):
            break
    edge = _MAX_FLOAT * scale  # (an axis beyond float64 would be labelled inf)
    return max(lo - pad, -edge), min(hi + pad, edge), scale


_MAX_FLOAT = float(np.finfo(np.float64).max)


def function_picture(samples: dict, marks: list, labels: list[str], x_label: str, *,
                     width: int | None = None, with_colour: bool | None = None) -> str:
    """The curves of plot (value, derivative, second derivative: samples' arrays in that
    order after the abscissae), the marks as dotted columns numbered at the top, and a
    legend: one line per curve and per mark.  A curve is broken where a sample is not finite."""
    with_colour = colour() if with_colour is None else with_colour
    total = width or columns()
    t = np.asarray(samples["abscissae"], dtype=float)
    curves = [np.asarray(v, dtype=float) for k, v in samples.items() if k != "abscissae"]
    drawn = _drawing_width(total, x_label, _tick(float(t[-1]), float(t[-1] - t[0])))
    fig = _figure(x_label, labels[0], drawn, PLOT_HEIGHT, with_colour)
    ylo, yhi, scale = _limits(curves)
    curves = [y * scale for y in curves] if scale != 1 else curves
    fig.set_x_limits(float(t[0]), float(t[-1]))
    fig.set_y_limits(ylo, yhi)
    fig.y_ticks_fkt = lambda lo, hi: _tick(min(max(lo / scale, -_MAX_FLOAT), _MAX_FLOAT),  # (the axis's
                                            (hi - lo) / scale, 10)  # arithmetic may round past)
    fig.x_ticks_fkt = lambda lo, hi: _tick(lo, hi - lo)
    columns_ = _dot_columns(t, drawn)
    legend = []
    for y, (marker, lc, symbol), label in zip(curves, _CURVES, labels):
        if marker is None:
            for k in _runs(y, _line_samples(columns_, y)):
                fig.plot(t[k], y[k], lc=lc, interp="linear")
        else:
            k = _marker_samples(columns_, _dot_rows(y, ylo, yhi))
            fig.plot(t[k], y[k], lc=lc, marker=marker, interp=None)
        if not np.isfinite(y).any():
            label += " (no finite value: nothing to draw)"
        legend.append(_legend(symbol, label, lc, with_colour))
    rows = ylo + (np.arange(PLOT_HEIGHT) + 0.5) * (yhi / PLOT_HEIGHT - ylo / PLOT_HEIGHT)  # (no overflow)
    for k, m in enumerate(marks[:MARKS_DRAWN], 1):
        fig.text([m["x"]] * PLOT_HEIGHT, rows, [_MARK] * (PLOT_HEIGHT - 1) + [str(k % 10)], lc="yellow")
        legend.append(_legend(f"{_MARK}{k}", f"{x_label} = {m['x']:.4g}: {m['note']}", "yellow", with_colour,
                              total))
    if len(marks) > MARKS_DRAWN:
        legend.append(f"  ... and {len(marks) - MARKS_DRAWN} more marks (-f json lists them all)")
    return _fitted(fig.show(), total) + "\n".join(legend) + "\n"


def _tick(value: float, step: float, chars: int = 9) -> str:
    """A tick label of at most chars characters (plotille cuts a longer one to that many,
    -6.67e-101 to -6.67e-10: another number): 3 significant digits, fewer where they do not
    fit.  A tick within a billionth of a step of 0 is 0 (the axis's arithmetic leaves
    -1.27e-117 where 0 is meant)."""
    if abs(value) <= abs(step) * 1e-9:
        value = 0.0
    for digits in (3, 2, 1):
        text = f"{value:.{digits}g}"
        if len(text) <= chars:
            break
    return text


def _drawing_width(total: int, x_label: str, last_tick: str = "") -> int:
    """The drawing's columns in a picture total wide: a multiple of 10 (a tick label every
    10 columns) that leaves room for the y axis's labels, the x axis's arrow and name, and
    the last tick label, which starts at the drawing's right edge."""
    right = max(len(x_label) + 6, len(last_tick))  # ("-> (x)" after the edge's "|")
    return 10 * ((total - _Y_AXIS - right) // 10)


# -- thinning: a picture W columns wide shows 2 W braille dots a row, whatever the samples' number.
# Handing plotille a million samples took 98 s; what it draws depends only on the samples
# below, so the picture is the same (a gap within one dot column excepted).

def _dot_columns(t: np.ndarray, width: int) -> np.ndarray:
    """The braille dot column each abscissa falls in, as plotille's canvas places it
    (round half to even of the distance from the left edge in dots)."""
    span = float(t[-1] - t[0])
    return np.rint((t - t[0]) / (span / (2 * width))).astype(np.int64)


def _dot_rows(y: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """The braille dot row of each finite value (-1 where the value is not finite)."""
    step = hi / (4 * PLOT_HEIGHT) - lo / (4 * PLOT_HEIGHT)  # (no overflow)
    with np.errstate(invalid="ignore"):
        rows = np.rint(y / step - lo / step)
    return np.where(np.isfinite(rows), rows, -1).astype(np.int64)


def _firsts(keys: np.ndarray, picked: np.ndarray, last: bool = False) -> np.ndarray:
    """Of the sample numbers picked (ascending), the first (or last) for each value of keys
    (non-decreasing along the samples) among them."""
    if not picked.size:
        return picked
    k = keys[picked]
    if last:
        return picked[np.append(k[1:] != k[:-1], True)]
    return picked[np.insert(k[1:] != k[:-1], 0, True)]


def _line_samples(columns: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The samples a line through all of them needs, in order: in each dot column, the
    first and the last (they join the neighbouring columns), the smallest and the largest
    value (a spike stays), and the first and last sample that is not finite (a gap stays)."""
    finite = np.isfinite(y)
    changed = columns[1:] != columns[:-1]
    starts = np.insert(np.flatnonzero(changed) + 1, 0, 0)
    ends = np.append(starts[1:] - 1, len(y) - 1)
    kept = [starts, ends]
    if finite.any():
        column = np.insert(np.cumsum(changed), 0, 0)  # each sample's column, counted from 0
        low, high = np.where(finite, y, np.inf), np.where(finite, y, -np.inf)
        lowest = np.minimum.reduceat(low, starts)[column]
        highest = np.maximum.reduceat(high, starts)[column]
        kept += [_firsts(columns, np.flatnonzero(finite & (low == lowest))),
                 _firsts(columns, np.flatnonzero(finite & (high == highest)))]
    gaps = np.flatnonzero(~finite)
    kept += [_firsts(columns, gaps), _firsts(columns, gaps, last=True)]
    return np.unique(np.concatenate(kept))


def _runs(y: np.ndarray, kept: np.ndarray) -> list:
    """The kept samples split into runs of finite values (a sample that is not finite ends
    one): each run is drawn as its own line, so the line breaks there."""
    finite = np.isfinite(y[kept])
    runs = np.split(kept, np.flatnonzero(~finite))
    return [r[np.isfinite(y[r])] for r in runs if np.isfinite(y[r]).any()]


def _marker_samples(columns: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The first finite sample in each braille dot a marker curve reaches: a marker
    (plotille draws one a character cell) is the same whichever sample put it there."""
    finite = np.flatnonzero(rows >= 0)
    if not finite.size:  # (no sample is finite: the run test below would index nothing)
        return finite
    key = columns[finite] * (4 * PLOT_HEIGHT + 1) + rows[finite]
    changed = np.insert(key[1:] != key[:-1], 0, True)  # (runs of one dot first: few are left)
    finite, key = finite[changed], key[changed]
    _, first = np.unique(key, return_index=True)
    return np.sort(finite[first])


#: One escape sequence (CSI: colour, reset), which takes no column on a terminal.
_ESCAPE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


def _fitted(picture: str, total: int) -> str:
    """The picture's lines without trailing blanks, each cut at total visible columns.
    Columns are counted on what a terminal shows: escape sequences take none, and every one
    is kept whole (cutting the text, not the codes, so a colour started is still reset).
    The last line holds the x axis's tick labels: a label that does not fit is dropped
    whole, never cut into another number (1.23e+06 into 1.23e+0)."""
    *rows, ticks = [line.rstrip() for line in picture.split("\n")]
    if len(ticks) > total:  # (tick labels carry no escape codes)
        ticks = ticks[:ticks.rfind(" ", 0, total + 1)].rstrip()
    return "".join(_cut(line, total) + "\n" for line in rows) + ticks + "\n"


def _cut(line: str, total: int) -> str:
    kept, shown, at = [], 0, 0
    for code in _ESCAPE.finditer(line):
        text = line[at:code.start()][:max(total - shown, 0)]
        kept += [text, code.group()]
        shown, at = shown + len(text), code.end()
    kept.append(line[at:][:max(total - shown, 0)])
    return "".join(kept)


def sweep_picture(sweep: dict, *, width: int | None = None, with_colour: bool | None = None) -> str:
    """check --sweep's curve on log-log axes: the error at each step h (as taken), with the best
    step and the check's own step marked (B, C)."""
    with_colour = colour() if with_colour is None else with_colour
    total = width or columns()
    # 12 decades: 60 columns put a tick label (every 10 columns) on every other decade
    width = 60 if _drawing_width(total, "h") >= 60 else 30
    steps = np.asarray(sweep["steps"], dtype=float)
    errors = np.asarray(sweep["errors"], dtype=float)
    ok = np.isfinite(errors) & (errors > 0)
    fig = _figure("h", "error", width, SWEEP_HEIGHT, with_colour)
    x, y = np.log10(steps[ok]), np.log10(errors[ok])
    xlo, xhi = float(np.log10(steps.min())), float(np.log10(steps.max()))
    ylo, yhi = (float(y.min()) - 0.5, float(y.max()) + 0.5) if y.size else (-17.0, 0.0)
    fig.set_x_limits(xlo, xhi)
    fig.set_y_limits(ylo, yhi)
    fig.x_ticks_fkt = lambda lo, hi: f"{10 ** lo:.0e}"
    fig.y_ticks_fkt = lambda lo, hi: f"{10 ** lo:.1e}"
    fig.plot(x, y, lc="blue", marker="•", interp="linear")
    lines = []
    for letter, step, what in (("B", sweep["best_step"], "best step"), ("C", sweep["default_step"], "check's step")):
        if step and math.isfinite(step) and xlo <= math.log10(step) <= xhi:
            fig.text([math.log10(step)], [yhi - (yhi - ylo) / SWEEP_HEIGHT], [letter], lc="yellow")
            lines.append(_legend(letter, f"{what} {step:.2g}", "yellow", with_colour))
    return _fitted(fig.show(), total) + "\n".join(lines) + "\n"
