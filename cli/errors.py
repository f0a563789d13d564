"""Library errors -> message, source line, caret, hint and exit code; in one place."""
from __future__ import annotations

import sys

from gradcalc.errors import GradcalcError

EXIT_OK, EXIT_CHECK_FAILED, EXIT_USER, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
REPORT_URL = "https://github.com/gradcalc/gradcalc/issues"


def flag(option: str) -> str:
    """The command-line flag of a library option: exec_timeout -> --exec-timeout."""
    return "--" + option.replace("_", "-")


def error_text(err: GradcalcError) -> str:
    """error: SOURCE:LINE:COL: message, then the source line, a caret and a hint."""
    message, hint = err.worded(flag)
    where = ""
    if err.source is not None:
        where = f"{err.source.label}:"
    if err.pos is not None:
        where += f"{err.pos.line}:{err.pos.col}:"
    lines = [f"error: {where} {message}" if where else f"error: {message}"]
    if err.source is not None and err.pos is not None:
        line = err.source.line(err.pos.line)
        if line:
            shown, col = _window(line.expandtabs(1), err.pos.col)
            lines.append(f"  {shown}")
            lines.append("  " + " " * (col - 1) + "^")
    if hint:
        lines.append(f"hint: {hint}")
    return "\n".join(lines)


def _window(line: str, col: int, width: int = 100):
    """At most width characters of a long line around the column, and the column in them."""
    if len(line) <= width:
        return line, col
    start = max(0, min(col - 1 - width // 2, len(line) - width))
    shown = line[start:start + width]
    prefix = "…" if start > 0 else ""
    suffix = "…" if start + width < len(line) else ""
    return prefix + shown + suffix, col - start + len(prefix)


def error_json(err: GradcalcError) -> dict:
    message, hint = err.worded(flag)
    return {"error": {"kind": err.kind, "message": message,
                      "line": err.pos.line if err.pos else None,
                      "column": err.pos.col if err.pos else None,
                      "source": err.source.label if err.source else None,
                      "hint": hint}}


def report_user_error(err: GradcalcError, json_out: bool) -> int:
    sys.stderr.write(error_text(err) + "\n")
    if json_out:
        from .render import dump_json
        dump_json(error_json(err))
    return EXIT_USER


def report_internal_error(exc: BaseException, debug: bool) -> int:
    if debug:
        import traceback
        traceback.print_exception(exc)
    sys.stderr.write(f"gradcalc: internal error ({type(exc).__name__}: {exc}). Sorry: this is a bug "
                     f"in gradcalc. Please report it at {REPORT_URL} with the command you ran"
                     f"{'' if debug else ' (add --debug for a traceback)'}.\n")
    return EXIT_INTERNAL
