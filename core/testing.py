"""Gradient checks inside a project's own tests.

    >>> from gradcalc.testing import assert_gradients
    >>> assert_gradients("sum(x^2)", at={"x": [1.0, 2.0]})   # passes: returns the check
    >>> assert_gradients("relu(x)", at={"x": 0.0})  # a kink: the differences disagree
    AssertionError: gradcalc check: 1 of 1 failed (rtol 1e-06, atol 1e-08) ...

``assert_gradients`` checks a source as ``gradcalc check`` does (the one function
:func:`gradcalc.suite.check_source` that the command line and the pytest plugin run) and
raises ``AssertionError`` whose message is the table of the failing results with their
numbers (errors, the automatic and reference values at the worst element, the bound
broken), so that a failing test says what is wrong without a rerun.  A program that
cannot be checked at all (a syntax error, a missing value) raises its
:class:`gradcalc.GradcalcError`, as any other library call does.
"""
from __future__ import annotations

__all__ = ["assert_gradients", "failure_text", "results_table", "error_text"]


def assert_gradients(source, **options):
    """Check source as ``gradcalc check`` does (program text or a .grad file, whose
    ``# check:`` lines and NAME.expect.json count; options as :func:`gradcalc.check`'s
    keywords win over them).  Returns the check (a suite.SourceCheck: ``results``,
    ``options``) when every result passes; raises AssertionError carrying the failing rows
    otherwise, and the GradcalcError of a source that cannot be checked."""
    from .suite import check_source
    no_expect, update_expect = options.pop("no_expect", False), options.pop("update_expect", False)
    if not isinstance(source, str):  # a parsed program: its text (anything else: parse's UsageError)
        from .session import parse
        source = parse(source).source.text
    checked = check_source(source, overrides=options, no_expect=no_expect, update_expect=update_expect)
    if checked.error is not None:
        raise checked.error.error
    failed = [r for r in checked.results if not r.ok]
    if failed:
        tol = (checked.options.get("rtol"), checked.options.get("atol"))
        raise AssertionError(failure_text(failed, len(checked.results), tol))
    return checked


def failure_text(failed: list, total: int | None = None, tol: tuple | None = None) -> str:
    """What a failure says: which failed (a first line that stands alone in a summary, with
    the tolerances tol = (rtol, atol) when known), then the failing rows (:func:`results_table`)."""
    from .suite import comparison_text, derivative_text
    if len(failed) == 1 and total is None:
        r = failed[0]
        head = (f"{derivative_text(r)} at point {r.point} ({comparison_text(r)}) failed: "
                f"abs err {r.max_abs_err:.3g}, rel err {r.max_rel_err:.3g}")
    else:
        head = f"gradcalc check: {len(failed)}{'' if total is None else f' of {total}'} failed"
    if tol and None not in tol:
        head += f" (rtol {tol[0]:g}, atol {tol[1]:g})"
    return head + "\n" + results_table(failed)


def _columns() -> tuple:
    """The columns of a results table: (heading, how a CheckResult shows in it), in the
    words of the command line's (suite's)."""
    from .suite import comparison_text, derivative_text
    return (
        ("source", lambda r: str(r.source)),
        ("pt", lambda r: str(r.point)),
        ("derivative", derivative_text),
        ("compared", comparison_text),
        ("abs err", lambda r: f"{r.max_abs_err:.3g}"),
        ("rel err", lambda r: f"{r.max_rel_err:.3g}"),
        ("worst", lambda r: "[" + ", ".join(map(str, r.worst_index)) + "]"),
        ("step", lambda r: f"{r.step:.3g}"),
    )


def results_table(results) -> str:
    """Check results as a plain-text table, one row each, with lines below a row for its
    numbers at the worst element (ad, fd or the stored value, the bound it broke) and its
    notes."""
    from .checks import breach_text
    columns = [(head, [show(r) for r in results]) for head, show in _columns()]
    widths = [max(len(head), *map(len, cells)) for head, cells in columns]
    lines = ["  ".join(head.ljust(w) for (head, _), w in zip(columns, widths)).rstrip()]
    for i, r in enumerate(results):
        lines.append("  ".join(cells[i].ljust(w) for (_, cells), w in zip(columns, widths)).rstrip())
        breach = breach_text(r)
        lines += [f"    {note}" for note in ([breach] if breach else []) + list(r.notes)]
    return "\n".join(lines)


def error_text(err) -> str:
    """A GradcalcError as the command line words it (without its 'error: ' prefix)."""
    from .errors import located_text
    return located_text(err)