"""The one error hierarchy of gradcalc.

Every user-facing failure is a :class:`GradcalcError`.  It carries a message,
an optional source position (1-based line and column, a :class:`Pos`), the source it refers
to, and an optional hint.  The CLI turns it into ``error: SRC:L:C: message``,
the source line, a caret and the hint, in exactly one place.
"""
from __future__ import annotations

import re
from typing import NamedTuple


class Source(NamedTuple):
    """Program text and the label it is reported under (a path, ``<expr>``...)."""

    text: str
    label: str = "<expr>"

    def line(self, lineno: int) -> str:
        """Line lineno as the lexer counts lines: ended by '\n' alone (a '\r', '\f' or '\v'
        within it is a blank, and str.splitlines would end the line there)."""
        lines = self.text.split("\n")
        return lines[lineno - 1] if 0 < lineno <= len(lines) else ""

    def operator_at(self, loc) -> str | None:
        """The operator written at a location ('^', '**', '-=', '@'...), or None where the
        text there is no operator (a call's name, a bracket): what warnings name, rather
        than the primitive it records (pow_const, mul, div)."""
        pos = to_pos(loc)
        if pos is None:
            return None
        line = self.line(pos.line)
        match = _OPERATOR.match(line, pos.col - 1) or _AUGMENTED.match(line, pos.col - 1)
        return match.group("op") if match else None


#: The language's operators, longest spellings first (see lexer.py); and an augmented
#: assignment, whose location is its target's (y *= x, y[0] += x).
_OPERATOR = re.compile(r"(?P<op>\*\*=?|//=?|[-+*/^@%]=?|[<>]=?|==|!=|(?:and|or|not)\b)")
_AUGMENTED = re.compile(r"[A-Za-z_]\w*\s*(?:\[[^\]]*\]\s*)?(?P<op>[-+*/]=)")


class Pos(NamedTuple):
    """A position in a source: 1-based line and column."""

    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.line}:{self.col}"


#: Inside the parser and on the tape a position travels as one int, its *location*
#: ``line << LINE_SHIFT | col``: the lexer makes one for every token, and an int costs a
#: third of a Pos to make and to free (a 3,000-line program has 40,000 tokens).  Syntax
#: nodes and equations turn theirs into a Pos on demand (their ``pos``), errors on creation.
LINE_SHIFT = 32
_COL_MASK = (1 << LINE_SHIFT) - 1


def to_loc(line: int, col: int) -> int:
    """The location of line and col (1-based)."""
    return line << LINE_SHIFT | col


def to_pos(loc) -> Pos | None:
    """The Pos of a location; a Pos or None is returned as it is."""
    if loc is None or loc.__class__ is Pos:
        return loc
    return Pos(loc >> LINE_SHIFT, loc & _COL_MASK)


#: Marks an option's name inside a message (see :func:`option`): a character that program
#: text, names and numbers never hold.
_OPTION_MARK = "\x1f"
_OPTION = re.compile(_OPTION_MARK + r"([a-z_]+)" + _OPTION_MARK)


def option(name: str) -> str:
    """An option of a command, as a message names it: ``option("wrt")``.

    The library words it as its keyword argument (``wrt``); the command line, which
    knows its own flags, as ``--wrt`` (see :meth:`GradcalcError.worded`).
    """
    return f"{_OPTION_MARK}{name}{_OPTION_MARK}"


def _keyword(name: str) -> str:
    return name


def _worded(text: str | None, name_option) -> str | None:
    """text with each option in it named by ``name_option(option)``."""
    return text if text is None else _OPTION.sub(lambda m: name_option(m[1]), text)


class GradcalcError(Exception):
    """A user error: bad syntax, unknown name, wrong shape, bad value or usage.

    Besides its words, an error carries structured fields: ``kind`` (its class's),
    ``pos``, ``source``, ``hint``, ``name`` (the program name it is about, if any)
    and ``option`` (the option it is about, if any).  Messages and hints name
    options through :func:`option`, so that each front end words them its own way.
    """

    kind = "error"

    def __init__(self, message: str, pos: Pos | int | None = None, *,
                 source: Source | None = None, hint: str | None = None,
                 name: str | None = None, option: str | None = None):
        super().__init__(message)
        self.message, self.hint, self.pos, self.source = message, hint, pos, source
        self.name, self.option = name, option

    @property
    def message(self) -> str:
        """The message in the library's words (options named as keyword arguments)."""
        return self.worded()[0]

    @property
    def hint(self) -> str | None:
        return self.worded()[1]

    @hint.setter
    def hint(self, text: str | None) -> None:
        self._hint = text

    @message.setter
    def message(self, text: str) -> None:
        self._message = text
        self.args = (text,)

    def worded(self, name_option=_keyword) -> tuple[str, str | None]:
        """(message, hint), each option named by ``name_option(option)``."""
        return _worded(self._message, name_option), _worded(self._hint, name_option)

    def label(self, name_option=_keyword) -> str | None:
        """The source's label, or None, an option in it named by ``name_option(option)`` (a
        value given to an option is labelled by it: ``--over x``)."""
        return None if self.source is None else _worded(self.source.label, name_option)

    @property
    def pos(self) -> Pos | None:
        return self._pos

    @pos.setter
    def pos(self, pos: Pos | int | None) -> None:  # a Pos, or a location (see to_loc)
        self._pos = to_pos(pos)

    def located(self, source: Source) -> "GradcalcError":
        """Attach the source if none is attached yet; returns self."""
        if self.source is None:
            self.source = source
        return self

    def __str__(self) -> str:
        where = ""
        if self.source is not None:
            where = self.label() + ":"
        if self.pos is not None:
            where += f"{self.pos.line}:{self.pos.col}:"
        return f"{where} {self.message}" if where else self.message


# The kinds of user error (the "kind" of the JSON error object).
class SyntaxError_(GradcalcError): kind = "syntax"   # noqa: E701
class NameError_(GradcalcError): kind = "name"       # noqa: E701
class ShapeError(GradcalcError): kind = "shape"      # noqa: E701
class ValueError_(GradcalcError): kind = "value"     # noqa: E701
class UsageError(GradcalcError): kind = "usage"      # noqa: E701
class LimitError(GradcalcError): kind = "limit"      # noqa: E701
class FileError(ValueError_): kind = "file"          # noqa: E701  (missing or unreadable)


def out_of_memory() -> LimitError:
    """The error of a command (or a checked source) that ran out of memory: the machine's limit,
    not a bug, since sizes within the element limit can add up."""
    return LimitError("out of memory: the arrays this command needs do not fit in this machine's memory",
                      hint="use smaller inputs: the element limit bounds each array, not all of them together")


#: Where bugs are reported (an internal error's words).
REPORT_URL = "https://github.com/gradcalc/gradcalc/issues"


def internal_words(exc: BaseException, where: str = "") -> str:
    """A bug's exception (and where it arose) as the CLI and check's error results name it."""
    return f"internal error ({type(exc).__name__}: {exc}{where})"


class InternalError(GradcalcError):
    """A bug in gradcalc met while one source was checked: that source's error result (check
    goes on with the others, and exits 3), never raised."""

    kind = "internal"


def did_you_mean(name: str, candidates) -> str | None:
    """A 'did you mean' hint for a misspelt name, or None."""
    import difflib

    match = difflib.get_close_matches(name, sorted(set(candidates)), n=1, cutoff=0.6)
    return f"did you mean '{match[0]}'?" if match else None


def listed(names, most: int = 12) -> str:
    """Names as a hint lists them: all, or the first ``most`` and how many more (a hint that
    listed the 2,001 names of a long program ran to 20 KB)."""
    names = list(names)
    if len(names) <= most:
        return ", ".join(names)
    return ", ".join(names[:most]) + f", ... ({len(names) - most} more)"


def flag(option_name: str) -> str:
    """The command-line flag of a library option: exec_timeout -> --exec-timeout."""
    return "--" + option_name.replace("_", "-")


def visible(text: str) -> str:
    """text with each control character but the newline written as its escape (ESC as \\x1b),
    so that a name or path typed on the command line cannot move a terminal's cursor or colour
    it when an error or a note repeats it (the program's own text shows its characters so)."""
    if text.isprintable() or all(c.isprintable() or c == "\n" for c in text):
        return text
    return "".join(c if c.isprintable() or c == "\n" else repr(c)[1:-1] for c in text)


def located_text(err: GradcalcError, word=flag) -> str:
    """SOURCE:LINE:COL: message, the source line with a caret under the column (a window of a
    long line), and the hint: an error as the command line and test reports show it, its
    options worded by ``word`` (as flags by default)."""
    message, hint = err.worded(word)
    where = (f"{err.label(word)}:" if err.source is not None else "") + \
        (f"{err.pos.line}:{err.pos.col}:" if err.pos is not None else "")
    message, hint, where = visible(message), hint and visible(hint), visible(where)
    lines = [f"{where} {message}" if where else message]
    line = err.source.line(err.pos.line) if err.source is not None and err.pos is not None else ""
    if line:
        # one column a character, as the lexer counts them: a tab or a control character
        # ('\r' of a CRLF file...) shows as a blank, so that the caret stays under its column
        shown, col = _window("".join(c if c.isprintable() else " " for c in line).rstrip(), err.pos.col)
        lines += [f"  {shown}", "  " + " " * (col - 1) + "^"]
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
