"""check under GitHub Actions: workflow-command annotations and the step summary (SPEC §5).

An annotation is one line on stdout, ``::error file=F,line=L,title=T::MESSAGE``, which
the runner turns into a mark on that line of the pull request.  Its properties and its
message are escaped as GitHub's toolkit escapes them (actions/toolkit, command.ts): in
the message % CR LF, in a property also : and ,.  The step summary is Markdown appended
to the file named by $GITHUB_STEP_SUMMARY.
"""
from __future__ import annotations

import os
import re

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


#: What Markdown would read as markup in a table cell: a pipe ends the cell, <expr> would be an
#: HTML tag GitHub drops, * _ ~ ` [ ] & emphasis, code, links and entities.  A backslash before
#: ASCII punctuation always stands for the character itself (CommonMark, "Backslash escapes").
_MARKDOWN = re.compile(r"([\\`*_~<>\[\]|&])")


def _cell(text) -> str:
    """Text for a Markdown table cell, read as written: one line, markup characters escaped."""
    return _MARKDOWN.sub(r"\\\1", str(text).replace("\r", " ").replace("\n", " "))


#: The most rows a step summary lists (GitHub takes at most 1 MiB of it per step): every failure
#: and error, then passing results up to this many rows in all.
SUMMARY_ROWS = 200


def summary_markdown(result, flag) -> str:
    """The results as a Markdown table, under the summary line."""
    from gradcalc.checks import breach_text
    from gradcalc.suite import comparison_text, derivative_text, error_location, summary_line
    rows = ["### gradcalc check", "", f"**{_cell(summary_line(result))}**", "",
            "| | source | point | derivative | compared | max abs err | max rel err | notes |",
            "|---|---|---|---|---|---|---|---|"]
    room = max(0, SUMMARY_ROWS - sum(not x.ok for x in result.results))
    passed = [x for x in result.results if x.ok]
    shown = [x for x in result.results if not x.ok or any(x is p for p in passed[:room])]
    for x in shown:
        if getattr(x, "comparison", None) == "error":
            cells = ["❗", error_location(x), "", "", f"{x.kind} error", "", "", x.error.worded(flag)[0]]
        else:
            notes = "; ".join(t for t in [breach_text(x)] + list(x.notes) if t)
            cells = ["✅" if x.ok else "❌", x.source, x.point, derivative_text(x), comparison_text(x),
                     f"{x.max_abs_err:.3g}", f"{x.max_rel_err:.3g}", notes]
        rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    if len(shown) < len(result.results):
        rows += ["", f"({len(result.results) - len(shown)} more passing results are in the log and the JUnit file)"]
    return "\n".join(rows) + "\n\n"


def append_summary(path: str, result, flag) -> None:
    """Append the summary; a file that cannot be written is a warning (the check's verdict, not
    the summary's fate, decides the exit code)."""
    import sys
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(summary_markdown(result, flag))
    except OSError as err:
        sys.stderr.write(f"warning: GITHUB_STEP_SUMMARY: cannot append to '{path}': {err.strerror}\n")
