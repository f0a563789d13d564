"""How each command's result looks: one function, :func:`show`, renders any result in any format.

The library's Result knows its own JSON payload (``to_json``); the rest is laid out
here, one :class:`View` per command: its tables, its plain text (the numbers alone,
unless the view says otherwise) and, for graph, Graphviz dot.  Nothing is computed
here: every number shown comes from the result.  rich is imported only when a
table is printed (see render.console).
"""
from __future__ import annotations

import sys
from enum import Enum
from typing import Callable, NamedTuple

import numpy as np

from . import render
from .errors import flag as _flag  # an option as the command line spells it: --update-expect


class Format(str, Enum):
    """--format: every command has table, json and plain; graph has dot too (see View.dot)."""

    table = "table"
    json = "json"
    plain = "plain"
    dot = "dot"


class Shown(NamedTuple):
    """A result with what the user gave that its table quotes besides: the point (``at``,
    in the caption), grad's ``sum`` and jvp's ``tangent``."""

    result: object
    at: dict | None = None
    sum: bool = False
    tangent: dict | None = None


def show(item, fmt: Format, precision: int) -> None:
    """Write a command's result (a Result, or a Shown) to stdout in the format asked for;
    its warnings go to stderr in every format."""
    shown = item if isinstance(item, Shown) else Shown(item)
    result = shown.result
    view = VIEWS[result.command]
    if fmt is Format.json:
        render.dump_json(view.json(result))
    elif fmt is Format.dot:
        sys.stdout.write(view.dot(result))
    elif fmt is Format.plain:
        text = view.plain(result, precision)
        for piece in [text] if isinstance(text, str) else text:  # (numbers come a chunk at a time)
            sys.stdout.write(piece)
    else:
        view.table(shown, precision)
    if view.warns:
        render.print_warnings(getattr(result, "warnings", None))
    if _nothing_differentiated(result):  # (as check says "nothing to check")
        sys.stderr.write("note: the program has no inputs: there is nothing to differentiate\n")
    if view.also is not None:
        view.also(result, fmt)
    sys.stdout.flush()  # (a reader that went away is noticed here, where the exit code is known)


def _nothing_differentiated(result) -> bool:
    """A derivative with respect to nothing: an empty gradient, VJP, Hessian or Jacobian
    (--symbolic without --at computes closed forms only: its numbers are empty by design)."""
    if getattr(result, "symbolic", None):
        return False
    if result.command in ("grad", "vjp", "hessian"):
        return not result
    return result.command == "jacobian" and all(not d for d in result.values())


def formats(command: str) -> list[Format]:
    """The formats a command has: dot only where its view draws one."""
    return [f for f in Format if f is not Format.dot or VIEWS[command].dot is not None]


# ==========================================================================
# Plain text
# ==========================================================================

def _numbers(result, precision: int):
    """The numbers alone, a piece at a time: one line per array of the result (blocks of a
    Jacobian or a Hessian in order), values in C order; an unconnected derivative reads null.
    A closed form with no point (--symbolic without --at) has no numbers: its text, a line each."""
    if getattr(result, "value", 0) is None and getattr(result, "symbolic", None):
        yield from (f"{text}\n" for text in _closed_texts(result.symbolic))
        return
    for a in _leaves(result):
        yield from render.plain_pieces(a)
        yield "\n"


def _closed_texts(entries: dict):
    for v in entries.values():
        if "text" in v:
            yield v["text"] if v["text"] is not None else "(too large to print)"
        else:
            yield from _closed_texts(v)


def _leaves(blocks: dict):
    for v in blocks.values():
        if isinstance(v, dict):
            yield from _leaves(v)
        else:
            yield v


# ==========================================================================
# eval, grad (and grad --exec)
# ==========================================================================

def _eval_table(s: Shown, precision: int) -> None:
    render.print_table("values", list(s.result.items()), precision=precision)


def _grad_table(s: Shown, precision: int) -> None:
    r = s.result
    if getattr(r, "exec", None) is not None:
        _grad_exec_table(s, precision)
        return
    f = f"sum({r.of})" if s.sum else r.of
    if r.value is None:  # --symbolic without a point: the closed form alone (SPEC §5)
        _print_symbolic({f"d{f}/d{k}": v for k, v in r.symbolic.items()})
        return
    title = f"gradient of {f} = {render.value_text(r.value.sum() if s.sum else r.value, precision)}"
    rows = [(f"d{f}/d{k}" + (" (unconnected)" if k in r.unconnected else ""), v) for k, v in r.items()]
    render.print_table(title, rows, precision=precision, caption=_point_caption(s.at, precision))
    if r.symbolic is not None:
        _print_symbolic({f"d{f}/d{k}": v for k, v in r.symbolic.items()})


def _grad_exec_table(s: Shown, precision: int) -> None:
    r = s.result
    render.print_table(f"finite-difference gradient of '{r.exec}' ({r.method}, {r.requests} request"
                       f"{'s' if r.requests != 1 else ''})",
                       [(f"d/d{k}", v) for k, v in r.items()] +
                       [(f"error estimate d/d{k}", v) for k, v in r.error_estimate.items()],
                       precision=precision, caption=_point_caption(s.at, precision))


def _point_caption(at: dict | None, precision: int) -> str | None:
    if not at:
        return None

    def shown(v):  # a value of more than 8 numbers by its shape alone
        if getattr(v, "size", 1) <= 8:
            return render.inline_text(v, precision)
        return f"({render.shape_text(v)} values)"
    return "at " + ", ".join(f"{k}={shown(v)}" for k, v in at.items())


def _print_symbolic(entries: dict) -> None:
    out = render.console()
    out.print("closed form (sympy)", style="bold")
    for label, e in entries.items():
        text = e["text"] if e["text"] is not None else "(too large to print)"
        out.print(f"  {label} = {text}", markup=False)
        if e["note"]:
            out.print(f"    note: {e['note']}", markup=False)


# ==========================================================================
# jacobian, vjp, jvp, hessian
# ==========================================================================

def _jacobian_table(s: Shown, precision: int) -> None:
    r = s.result
    how = "a row per output element" if r.mode == "rev" else "a column per input element"
    for o, row in r.items():
        for w, v in row.items():
            title = f"jacobian d{o}/d{w}  ({r.mode} mode: {how})"
            if v is None:
                render.print_table(title, [(f"d{o}/d{w}", None)], precision=precision)
            else:
                render.print_matrix(title, v, o, w, r.value[o].shape, v.shape[r.value[o].ndim:], precision)
    if r.symbolic is not None:
        _print_symbolic({f"d{o}/d{w}": e for o, row in r.symbolic.items() for w, e in row.items()})


def _vjp_table(s: Shown, precision: int) -> None:
    r = s.result
    outs = [r.of] if isinstance(r.of, str) else r.of
    render.print_table("cotangent v", [(k, v) for k, v in r.cotangent.items()], precision=precision)
    render.print_table("vjp: v^T J, one backward pass (no Jacobian is formed)",
                       [(f"v^T d{'+'.join(outs)}/d{k}", v) for k, v in r.items()], precision=precision)


def _jvp_table(s: Shown, precision: int) -> None:
    r = s.result
    render.print_table("tangent v", list(s.tangent.items()), precision=precision)
    render.print_table("jvp: J v, one forward pass", [("J v", r.jvp), (r.of, r.value)],
                       precision=precision)


def _hessian_table(s: Shown, precision: int) -> None:
    r = s.result
    closed = getattr(r, "symbolic", None)
    if r.value is not None:  # (None: --symbolic without a point, the closed form alone: SPEC §5)
        _hessian_numbers(r, precision)
    if closed is not None:
        _print_symbolic({f"d²{r.of}/d{a}d{b}": e for a, row in closed.items() for b, e in row.items()})


def _hessian_numbers(r, precision: int) -> None:
    names = list(r)
    if all(np.shape(r[n][n]) == () for n in names):
        grid = np.array([[r[a][b] for b in names] for a in names])
        if len(names) > render.MATRIX_COLUMNS:  # (as print_matrix: summarised, not a table of n² cells)
            render.print_table(f"hessian of {r.of}: {len(names)} scalar inputs, rows and columns in the order "
                               f"{names[0]}, {names[1]}, …, {names[-1]} (-f json gives every entry)",
                               [(f"d²{r.of}/d(inputs)²", grid)], precision=precision)
            return
        _named_matrix(f"hessian of {r.of}", grid, names, precision)
        return
    for a, row in r.items():
        for b, v in row.items():
            render.print_table(f"d²{r.of}/d{a}d{b}", [(f"d²{r.of}/d{a}d{b}", v)], precision=precision)


def _named_matrix(title, grid, names, precision):
    from rich.table import Table
    table = Table()
    table.add_column("")
    for n in names:
        table.add_column(n, justify="right")
    for n, row in zip(names, grid):
        table.add_row(n, *[render.fmt(float(v), precision) for v in row])
    out = render.console()
    out.print(title, style="bold")
    out.print(table)


# ==========================================================================
# check
# ==========================================================================

def _check_table(s: Shown, precision: int) -> None:
    """The verdict first, so that it survives a narrow terminal; then one table per source,
    one row per result (a source that could not be checked: one row, and its error in full
    on stderr)."""
    from gradcalc.suite import summary_line
    results = s.result.results
    if results and all(_is_error(x) for x in results):
        return  # nothing was checked: the errors on stderr say all, as any command's error does
    out = render.console()
    out.print(summary_line(s.result), style="bold", markup=False)
    taylor = any("taylor_order" in getattr(x, "extra", {}) for x in results)
    for source in dict.fromkeys(x.source for x in results):
        out.print(_source_table(source, [x for x in results if x.source == source], taylor, precision))
    _sweep_section(results, precision)


def _is_error(x) -> bool:
    return getattr(x, "comparison", None) == "error"


def _source_table(source: str, results: list, taylor: bool, precision: int):
    from rich.table import Table
    table = Table(title=source, title_justify="left", title_style="bold")
    table.add_column("", no_wrap=True, min_width=1)
    table.add_column("pt", justify="right", no_wrap=True)
    table.add_column("derivative", no_wrap=True)
    table.add_column("compared", no_wrap=True)
    table.add_column("abs err", justify="right", no_wrap=True, min_width=8)
    table.add_column("rel err", justify="right", no_wrap=True, min_width=8)
    table.add_column("worst", no_wrap=True)
    table.add_column("step", justify="right", no_wrap=True)
    if taylor:
        table.add_column("order", justify="right", no_wrap=True)
    table.add_column("notes", overflow="fold")
    for x in results:
        table.add_row(*(_error_cells(x, taylor) if _is_error(x) else _result_cells(x, taylor, precision)))
    return table


def _result_cells(x, taylor: bool, precision: int) -> list:
    from rich.text import Text

    from gradcalc.checks import breach_text
    from gradcalc.suite import comparison_text, derivative_text
    cells = [Text("✓", style="green") if x.ok else Text("✗", style="red"), str(x.point), derivative_text(x),
             comparison_text(x), render.fmt(x.max_abs_err, precision), render.fmt(x.max_rel_err, precision),
             "[" + ", ".join(map(str, x.worst_index)) + "]", render.fmt(x.step, precision)]
    if taylor:
        order = x.extra.get("taylor_order")
        cells.append("" if order is None else render.fmt(order, precision))
    return cells + ["; ".join(t for t in [breach_text(x)] + x.notes if t)]


def _error_cells(x, taylor: bool) -> list:
    from rich.text import Text

    from gradcalc.suite import error_location
    message, _ = x.error.worded(_flag)
    return ([Text("!", style="red"), "", "", f"{x.kind} error", "", "", "", ""] + [""] * taylor +
            [f"{error_location(x)}: {message}"])


def _check_lines(result, precision: int) -> str:
    """One line per check result (plain text: check's results are verdicts, not arrays):
    what was compared, the errors, a failure's numbers and the notes; with --sweep a line
    after it with the sweep's findings; then the summary."""
    from gradcalc.suite import row_text, summary_line
    return "".join(row_text(x, lambda err: err.worded(_flag)[0]) + "\n" + _sweep_line(x)
                   for x in result.results) + summary_line(result) + "\n"


def _sweep_line(x) -> str:
    """check --sweep in plain text: the best step, its error, the fitted slope, the check's
    step and the verdict (last: it has spaces), then the notes; "" for a result without one."""
    w = getattr(x, "extra", {}).get("sweep")
    if w is None:
        return ""
    slope = "-" if w["slope"] is None else f"{w['slope']:.3g}"
    return (f"sweep {x.source} point={x.point} {_swept_label(x)} best_step={w['best_step']:.2g} "
            f"best_error={w['best_error']:.3g} slope={slope} expected_slope={w['expected_slope']} "
            f"check_step={w['default_step']:.2g} verdict={w['verdict']}"
            + "".join(f" | {note}" for note in w["notes"]) + "\n")


def result_label(x) -> str:
    """A check result's derivative: dy/dx, or y (value) for a comparison of values."""
    from gradcalc.suite import derivative_text
    return derivative_text(x)


_NOT_XML = "[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]"  # what XML 1.0 cannot hold


def _xml_text(text: str) -> str:
    """text with each character XML cannot hold (a control character in a file name or an
    --exec command, say) written as its escape, \\x01."""
    import re
    return re.sub(_NOT_XML, lambda m: repr(m.group())[1:-1], text)


def write_junit(path: str, results) -> None:
    """check --junit-xml: one testcase per result, a failure for each that failed, an error
    for each source that could not be checked."""
    import xml.etree.ElementTree as ET

    from gradcalc.suite import counts
    _, failures, errors = counts(results)
    suite = ET.Element("testsuite", name="gradcalc.check", tests=str(len(results)),
                       failures=str(failures), errors=str(errors))
    classes = _junit_classes([x.source for x in results])
    for x in results:
        case = ET.SubElement(suite, "testcase", classname=_xml_text(classes[x.source]),
                             name=_xml_text(_junit_name(x)), file=_xml_text(x.source))
        if _is_error(x):
            _junit_error(case, x)
        else:
            _junit_result(case, x)
    try:
        ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)
    except OSError as err:
        raise unwritable("--junit-xml", path, err.strerror) from None


def unwritable(flag: str, path: str, why: str):
    """The error for a report file that cannot be written (--junit-xml, --save)."""
    from gradcalc.errors import FileError
    return FileError(f"{flag}: cannot write '{path}': {why}")


def check_writable(flag: str, path: str) -> None:
    """Refuse, before any work, a report file that could not be written: its folder is missing
    or read-only, or the path is a folder (the work would be done, then lost)."""
    import os
    if not path:
        raise unwritable(flag, path, "an empty path names no file")
    target = os.path.realpath(path)  # (a dangling link is written through to its target)
    folder = os.path.dirname(target) or "."
    if os.path.isdir(target):
        raise unwritable(flag, path, "Is a directory")
    if not os.path.isdir(folder):
        raise unwritable(flag, path, "No such file or directory")
    if not os.access(target if os.path.exists(target) else folder, os.W_OK):
        raise unwritable(flag, path, "Permission denied")


def check_not_checked(flag: str, path: str, sources, expect: str | None = None) -> None:
    """Refuse a report file that is one of the files checked: a source, a .grad file inside a
    source folder, or the --expect file (the report would overwrite the program it checks)."""
    import os
    target = os.path.realpath(path)
    if not os.path.isfile(target):
        return
    for s in list(sources or ()) + ([expect] if expect else []):
        if not isinstance(s, str) or s == "-" or "\n" in s or not os.path.exists(s):
            continue
        folder = os.path.realpath(s)
        inside = os.path.isdir(folder) and target.endswith(".grad") and target.startswith(folder + os.sep)
        if inside or os.path.samefile(s, target):
            what = f"a .grad file in the source folder '{s}'" if inside else \
                f"the expectation file '{s}'" if s == expect else f"the source '{s}'"
            raise unwritable(flag, path, f"it is {what}, which the report would overwrite")


def _junit_class(source: str) -> str:
    """A testcase's classname, as pytest makes one from a test file's path: gradcalc.check,
    then the folders and the name without .grad, joined by dots (examples/ci/cube.grad ->
    gradcalc.check.examples.ci.cube).  Jenkins splits a classname at its last dot into package
    and class, and GitLab shows it as the suite, so a dot inside a name becomes '_' (my.model.grad
    -> my_model, not package my, class model).  Only this system's separators part folders: on
    Linux a backslash is a character of the name.  The path as written is the testcase's file."""
    import os
    stem = source[:-len(".grad")] if source.endswith(".grad") else source
    if os.altsep:
        stem = stem.replace(os.altsep, os.sep)
    parts = [p.replace(".", "_") for p in stem.split(os.sep) if p not in ("", ".")]
    return ".".join(["gradcalc.check", *parts])


def _junit_classes(sources) -> dict:
    """Each source's classname, one per source: where two files would share one (a.b.grad and
    a_b.grad are both gradcalc.check.a_b), the later in the report gets _2, _3..., so that a CI
    system never merges two files' testcases into one."""
    classes, taken = {}, set()
    for source in dict.fromkeys(sources):
        base = name = _junit_class(source)
        copy = 1
        while name in taken:
            copy += 1
            name = f"{base}_{copy}"
        classes[source] = name
        taken.add(name)
    return classes


def _junit_name(x) -> str:
    from gradcalc.suite import comparison_text
    if _is_error(x):
        return "could not be checked"
    return f"point {x.point}: {result_label(x)} ({comparison_text(x)})"


def _junit_result(case, x) -> None:
    import xml.etree.ElementTree as ET

    from gradcalc.checks import breach_text
    detail = (f"max_abs_err={x.max_abs_err!r} max_rel_err={x.max_rel_err!r} "
              f"worst_index={x.worst_index} step={x.step!r}")
    notes = [_xml_text(n) for n in [breach_text(x)] + x.notes if n]
    if not x.ok:
        fail = ET.SubElement(case, "failure", message="; ".join(notes) or "derivative mismatch")
        fail.text = detail + ("\n" + "\n".join(notes) if notes else "")
    else:
        ET.SubElement(case, "system-out").text = detail + (("\n" + "; ".join(notes)) if notes else "")


def _junit_error(case, x) -> None:
    import xml.etree.ElementTree as ET

    from .errors import error_text
    message, _ = x.error.worded(_flag)
    error = ET.SubElement(case, "error", type=x.kind, message=_xml_text(message))
    error.text = _xml_text(error_text(x.error))


# ==========================================================================
# check under GitHub Actions: annotations and the step summary
# ==========================================================================

def _check_json(result) -> dict:
    """check's payload, an error result's message and hint worded as the command line words
    options (--update-expect, not update_expect), as every other error's JSON is.  When a
    source could not be checked (exit 2), the first such error is also the document's
    "error", as SPEC §7 has every user error's JSON carry it (the same object: its source is
    the file the error is in, or the source checked where the error names none)."""
    payload = result.to_json()
    for entry, x in zip(payload["results"], result.results):
        if _is_error(x):
            entry["error"]["message"], entry["error"]["hint"] = x.error.worded(_flag)
            payload.setdefault("error", dict(entry["error"]))
    return payload


def _check_also(result, fmt: Format) -> None:
    """What check writes besides its results, in every format: on stderr, each source that
    could not be checked as every user error reads (message, line, caret, hint), the names of
    an --at @FILE a source does not take (a note, as every command gives), each source with
    nothing to check and each expectation file written; under GitHub Actions, its
    annotations and step summary."""
    from .errors import error_text
    for x in result.results:
        if _is_error(x):
            sys.stderr.write(error_text(x.error) + "\n")
    for checked in getattr(result, "sources", ()):
        for note in checked.ignored:
            sys.stderr.write(f"note: {checked.source}: {note}\n")
        for note in checked.notes:
            sys.stderr.write(f"warning: {checked.source}: {note}\n")
        if checked.updated and checked.expect_file:
            sys.stderr.write(f"wrote {checked.expect_file}\n")
    _github_actions(result, fmt)


def _github_actions(result, fmt: Format) -> None:
    """Under GitHub Actions (GITHUB_ACTIONS=true), each failure and error as an ::error
    annotation (on stdout, where the runner reads workflow commands; on stderr with -f json,
    whose stdout is one JSON object), and a Markdown table appended to $GITHUB_STEP_SUMMARY."""
    import os
    if os.environ.get("GITHUB_ACTIONS") != "true":
        return
    from . import github
    lines = [github.annotation(x, _flag) for x in result.results if not x.ok]
    (sys.stderr if fmt is Format.json else sys.stdout).write("".join(line + "\n" for line in lines))
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        github.append_summary(summary, result, _flag)


# ==========================================================================
# graph
# ==========================================================================

def _graph_nodes(result) -> list:
    """The nodes a table or listing shows: a long tape summarised, unless graph --full."""
    from gradcalc.graphs import summarised
    return result.nodes if getattr(result, "full", True) else summarised(result.nodes)


def _graph_table(s: Shown, precision: int) -> None:
    from . import graphs
    r = s.result
    graphs.tables(_graph_nodes(r), r.output, r.guessed, precision)


def _graph_listing(result, precision: int) -> str:
    from . import graphs
    return graphs.listing(_graph_nodes(result), precision, result.guessed)


def _graph_dot(result) -> str:
    from . import graphs
    return graphs.dot(result.nodes, result.output, result.guessed)


# ==========================================================================
# check --sweep, plot
# ==========================================================================

#: check --sweep draws the curves of this many results, the worst first; the others get a row.
SWEEPS_DRAWN = 3
_SWEEP_RANK = {"wrong derivative": 0, "finite differences are not finite here": 1,
               "step too small or too large": 2, "a kink within every step": 3, "steps not small beside x": 3}


def _sweep_section(results, precision: int) -> None:
    """check --sweep: a row per result (verdict, best step, slope); then, for the worst few,
    the error at each step and its log-log V."""
    from rich.table import Table
    swept = [x for x in results if "sweep" in getattr(x, "extra", {})]
    if not swept:
        return
    table = Table(title="step sweep: finite differences against the automatic derivative",
                  title_justify="left", title_style="bold")
    sources = len({x.source for x in swept}) > 1
    for c in ("source",) * sources + ("pt", "derivative", "verdict", "best step", "error there", "slope",
                                      "check's step"):
        table.add_column(c, no_wrap=True, justify="right" if c in ("pt", "best step", "error there", "slope",
                                                                     "check's step") else "left")
    for x in swept:
        w = x.extra["sweep"]
        table.add_row(*(x.source,) * sources, str(x.point), _swept_label(x), w["verdict"],
                      render.fmt(w["best_step"], 2), render.fmt(w["best_error"], precision), _slope_text(w),
                      render.fmt(w["default_step"], 2))
    out = render.console()
    out.print(table)
    for x in sorted(swept, key=lambda x: (_SWEEP_RANK.get(x.extra["sweep"]["verdict"], 3), x.point))[:SWEEPS_DRAWN]:
        _one_sweep(x, precision)


def _swept_label(x) -> str:
    element = x.extra["sweep"]["element"]
    return result_label(x) + (f"[{', '.join(map(str, element))}]" if element else "")


def _slope_text(w: dict) -> str:
    """The fitted slope and the method's order; '-' where the error is rounding alone."""
    if w["slope"] is None:
        return "-"
    return f"{w['slope']:.2f} (expected {w['expected_slope']})" if w["expected_slope"] else f"{w['slope']:.2f}"


def _one_sweep(x, precision: int) -> None:
    """One result's sweep: the error at each step, the V drawn, and what it says."""
    from . import pictures
    w = x.extra["sweep"]
    out = render.console()
    out.print(f"\n{x.source}: {_swept_label(x)} at point {x.point} ({x.method} differences)", style="bold")
    rows = [(render.fmt(float(h), 2), render.fmt(float(e), precision)) for h, e in zip(w["steps"], w["errors"])]
    pair = "  {:>8}  {:>10}"
    if out.width >= 2 * len(pair.format("", "")) + 4:  # two columns of pairs: the table half as long
        half = (len(rows) + 1) // 2
        lines = zip([("step", "error")] + rows[:half], [("step", "error")] + rows[half:] + [("", "")])
        text = [(pair + "    " + pair).format(*left, *right) for left, right in lines]
    else:  # (a narrow terminal: one pair a line, not pairs wrapped onto lines of their own)
        text = [pair.format(*row) for row in [("step", "error")] + rows]
    for line in text:
        out.print(line.rstrip(), markup=False)
    sys.stdout.flush()
    sys.stdout.write(pictures.sweep_picture(w))
    out.print(_sweep_verdict(w), markup=False)
    for note in w["notes"]:
        out.print(f"  note: {note}", markup=False)


def _sweep_verdict(w: dict) -> str:
    verdict, scale = w["verdict"], w["scale"]
    if verdict == "wrong derivative":
        return (f"verdict: wrong derivative: the error never falls below {w['best_error']:.2g}, at any "
                f"step, for a derivative of size {scale:.3g}")
    if verdict == "a kink within every step":
        return (f"verdict: a kink within every step: a kink or branch lies within even the smallest step, "
                f"so no step can tell (best error {w['best_error']:.2g}); see the notes")
    if verdict == "steps not small beside x":
        return (f"verdict: steps not small beside x: the steps the sweep could use are not small beside "
                f"the element |x| (they follow max(1, |x|)), so none can tell (best step {w['best_step']:.2g}, "
                f"error {w['best_error']:.2g}); the check compares at steps relative to |x| there")
    if verdict == "step too small or too large":
        return (f"verdict: step too small or too large: the check's step {w['default_step']:.2g} is on "
                f"the {w['side'] or 'wrong'} side of the V; the best step is {w['best_step']:.2g}")
    return f"verdict: {verdict}: best step {w['best_step']:.2g}, error {w['best_error']:.2g}"


def _line_names(r) -> tuple[str, str]:
    """The names of a --direction plot's parameter and direction (t and v, unless the program
    has a value of that name: then another, so that the title does not read as its value)."""
    taken = {r.of, r.over, r.wrt, *(r.at or {})}
    t = next(n for n in ("t", "s", "tau", "t_") if n not in taken)
    v = next(n for n in ("v", "u", "d", "v_") if n not in taken)
    return t, v


def _plot_labels(r) -> list[str]:
    f = r.of
    along = _line_names(r)[0] if r.direction is not None and r.wrt == r.over else r.wrt
    return [f, f"d{f}/d{along}", f"d²{f}/d{along}²"]


def _plot_table(s: Shown, precision: int) -> None:
    """plot: the curves, with axes, the marks and a legend."""
    from . import pictures
    r = s.result
    t = r["abscissae"]
    t_name, v_name = _line_names(r) if r.direction is not None else (None, None)
    x_label = t_name if r.direction is not None else r.over
    line = (f"{r.over} + {t_name} {v_name}, {v_name} = {render.value_text(r.direction, precision)}"
            if r.direction is not None else r.over)
    out = render.console()
    out.print(f"{r.of} along {line}, {x_label} from {t[0]:g} to {t[-1]:g} ({len(t)} samples)",
              style="bold", markup=False)
    sys.stdout.flush()
    sys.stdout.write(pictures.function_picture(dict(r), r.marks, _plot_labels(r), x_label))


def _plot_lines(result, precision: int) -> str:
    """plot's plain text: a line per sample, abscissa then each curve's value."""
    columns = list(result.values())
    return "".join(" ".join(render.plain_number(float(c[i])) for c in columns) + "\n"
                   for i in range(len(columns[0])))


# ==========================================================================

class View(NamedTuple):
    """How one command's result looks, format by format (JSON: the result's own to_json).
    (NamedTuples, not dataclasses, here and in app.py: a frozen dataclass costs a one-liner
    a millisecond to create.)"""

    table: Callable  # (Shown, precision) -> None: prints rich tables
    plain: Callable = _numbers  # (result, precision) -> the text to write, or its pieces
    dot: Callable | None = None  # (result) -> Graphviz dot text; None: no -f dot
    json: Callable = lambda result: result.to_json()  # (result) -> the JSON payload
    warns: bool = True  # also write the result's warnings to stderr (graph's stay in its JSON)
    also: Callable | None = None  # (result, format) -> None: what else it writes (check's errors, CI)


VIEWS = {
    "eval": View(_eval_table),
    "grad": View(_grad_table),
    "jacobian": View(_jacobian_table),
    "vjp": View(_vjp_table),
    "jvp": View(_jvp_table),
    "hessian": View(_hessian_table),
    "check": View(_check_table, plain=_check_lines, also=_check_also, json=_check_json),
    "graph": View(_graph_table, plain=_graph_listing, dot=_graph_dot, warns=False),
    "plot": View(_plot_table, plain=_plot_lines),
}
