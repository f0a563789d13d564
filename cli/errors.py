"""Library errors -> message, source line, caret, hint and exit code; in one place."""
from __future__ import annotations

import sys

from gradcalc.errors import REPORT_URL, GradcalcError, flag, internal_words, located_text

EXIT_OK, EXIT_CHECK_FAILED, EXIT_USER, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def error_text(err: GradcalcError) -> str:
    """error: SOURCE:LINE:COL: message, then the source line, a caret and a hint."""
    return "error: " + located_text(err, flag)


def error_json(err: GradcalcError) -> dict:
    message, hint = err.worded(flag)
    return {"error": {"kind": err.kind, "message": message,
                      "line": err.pos.line if err.pos else None,
                      "column": err.pos.col if err.pos else None,
                      "source": err.label(flag),
                      "hint": hint}}


def report_user_error(err: GradcalcError, json_out: bool) -> int:
    sys.stderr.write(error_text(err) + "\n")
    if json_out:
        from .render import dump_json
        dump_json(error_json(err))
    return EXIT_USER


def report_internal_error(exc: BaseException, debug: bool, json_out: bool = False) -> int:
    if debug:
        import traceback
        traceback.print_exception(exc)
    message = internal_words(exc)
    sys.stderr.write(f"gradcalc: {message}. Sorry: this is a bug in gradcalc. Please report it at {REPORT_URL} "
                     f"with the command you ran{'' if debug else ' (add --debug for a traceback)'}.\n")
    if json_out:  # (-f json: one object on stdout, whatever happened)
        from .render import dump_json
        dump_json({"error": {"kind": "internal", "message": message, "line": None, "column": None,
                             "source": None, "hint": f"a bug in gradcalc: please report it at {REPORT_URL}"}})
    return EXIT_INTERNAL
