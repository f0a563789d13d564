"""The one error hierarchy of gradcalc.

Every user-facing failure is a :class:`GradcalcError`.  It carries a message,
an optional source position (1-based line and column), the source it refers
to, and an optional hint.  The CLI turns it into ``error: SRC:L:C: message``,
the source line, a caret and the hint, in exactly one place.
"""
from __future__ import annotations

from typing import NamedTuple


class Source(NamedTuple):
    """Program text and the label it is reported under (a path, ``<expr>``...)."""

    text: str
    label: str = "<expr>"

    def line(self, lineno: int) -> str:
        lines = self.text.splitlines()
        return lines[lineno - 1] if 0 < lineno <= len(lines) else ""


class Pos(NamedTuple):
    """A position in a source: 1-based line and column."""

    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.line}:{self.col}"


class GradcalcError(Exception):
    """A user error: bad syntax, unknown name, wrong shape, bad value or usage."""

    kind = "error"

    def __init__(self, message: str, pos: Pos | None = None, *,
                 source: Source | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.pos = pos
        self.source = source
        self.hint = hint

    def located(self, source: Source) -> "GradcalcError":
        """Attach the source if none is attached yet; returns self."""
        if self.source is None:
            self.source = source
        return self

    def __str__(self) -> str:
        where = ""
        if self.source is not None:
            where = self.source.label + ":"
        if self.pos is not None:
            where += f"{self.pos.line}:{self.pos.col}:"
        return f"{where} {self.message}" if where else self.message


class SyntaxError_(GradcalcError):
    kind = "syntax"


class NameError_(GradcalcError):
    kind = "name"


class ShapeError(GradcalcError):
    kind = "shape"


class ValueError_(GradcalcError):
    kind = "value"


class UsageError(GradcalcError):
    kind = "usage"


class LimitError(GradcalcError):
    kind = "limit"


def did_you_mean(name: str, candidates) -> str | None:
    """A 'did you mean' hint for a misspelt name, or None."""
    import difflib

    match = difflib.get_close_matches(name, sorted(set(candidates)), n=1, cutoff=0.6)
    return f"did you mean '{match[0]}'?" if match else None
