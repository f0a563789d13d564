"""check under GitHub Actions: workflow-command annotations and the step summary (SPEC §5).

An annotation is one line on stdout, ``::error file=F,line=L,title=T::MESSAGE``, which
the runner turns into a mark on that line of the pull request.  Its properties and its
message are escaped as GitHub's toolkit escapes them (actions/toolkit, command.ts): in
the message % CR LF, in a property also : and ,.  The step summary is Markdown appended
to the file named by $GITHUB_STEP_SUMMARY.
"""
from __future__ import annotations

import os

_DATA = {"%": "%25", "\r": "%0D", "\n": "%0A"}
_PROPERTY = {**_DATA, ":": "%3A", ",": "%2C"}


def escape_data(text: str) -> str:
    """A workflow command's message: % first, so that the escapes themselves survive."""
    return "".join(_DATA.get(c, c) for c in text)


def escape_property(text: str) -> str:
    return "".join(_PROPERTY.get(c, c) for c in text)


def command(name: str, message: str, **properties) -> str:
    """``::name k=v,k=v::message``, properties left out when None."""
    props = ",".join(f"{k}={escape_property(str(v))}" for k, v in properties.items() if v is not None)
    return f"::{name}{' ' + props if props else ''}::{escape_data(message)}"


def _file(path: str) -> str | None:
    """A path the runner can place (a program given as text, or on stdin, has none)."""
    return path if path and os.path.isfile(path) else None


def annotation(x, flag) -> str:
    """The ::error annotation of a failed result or an error result (flag(option) words an
    option as the command line spells it)."""
    from gradcalc.checks import breach_text
    from gradcalc.suite import comparison_text, derivative_text
    if getattr(x, "comparison", None) == "error":
        message, hint = x.error.worded(flag)
        file = _file(x.file)
        return command("error", message + (f" (hint: {hint})" if hint else ""), file=file,
                       line=x.line if file else None, col=x.column if file else None,
                       title=f"gradcalc check: {x.kind} error")
    file = _file(x.source)
    message = "; ".join(t for t in [breach_text(x)] + list(x.notes) if t) or "derivative mismatch"
    return command("error", f"{derivative_text(x)} at point {x.point}: {message}", file=file,
                   line=x.line if file else None,
                   title=f"gradcalc check: {derivative_text(x)} ({comparison_text(x)}) failed")


def _cell(text) -> str:
    """Text for a Markdown table cell: no line breaks, pipes escaped."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def summary_markdown(result, flag) -> str:
    """The results as a Markdown table, under the summary line."""
    from gradcalc.checks import breach_text
    from gradcalc.suite import comparison_text, derivative_text, error_location, summary_line
    rows = ["### gradcalc check", "", f"**{_cell(summary_line(result))}**", "",
            "| | source | point | derivative | compared | max abs err | max rel err | notes |",
            "|---|---|---|---|---|---|---|---|"]
    for x in result.results:
        if getattr(x, "comparison", None) == "error":
            cells = ["❗", error_location(x), "", "", f"{x.kind} error", "", "", x.error.worded(flag)[0]]
        else:
            notes = "; ".join(t for t in [breach_text(x)] + list(x.notes) if t)
            cells = ["✅" if x.ok else "❌", x.source, x.point, derivative_text(x), comparison_text(x),
                     f"{x.max_abs_err:.3g}", f"{x.max_rel_err:.3g}", notes]
        rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(rows) + "\n\n"


def append_summary(path: str, result, flag) -> None:
    from gradcalc.errors import ValueError_
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(summary_markdown(result, flag))
    except OSError as err:
        raise ValueError_(f"GITHUB_STEP_SUMMARY: cannot append to '{path}': {err.strerror}") from None
