"""Text -> tokens: one regex match per token, into three flat lists.

:func:`scan` is what the parser (core/syntax.py) reads; :func:`tokenize` gives
the same tokens as :class:`Token` tuples, for tests and tools.  A token's kind
is "name", "num", "str", "newline", "eof", a reserved word's own text (``if``,
``and``, ``None``...: the parser tells them from names by their kind), or, for
an operator or bracket, its own text.

To add an operator, add its text to the operator group of ``_TOKEN`` (longer
spellings before their prefixes: ``**`` before ``*``; ``[-+*/<>=!]=`` holds the
two-character ones that end in ``=``) and drop it from ``_bad_character``'s
hints if one names it.  To reserve a word, add it to :data:`RESERVED`.
Newlines inside ``( )`` and ``[ ]`` are dropped (a bracket continues the line);
inside a ``{ }`` block, which holds statements, they are kept: a newline is
dropped only while the innermost open bracket is not a ``{``.
"""
from __future__ import annotations

import re
from itertools import repeat
from typing import NamedTuple

from .errors import LINE_SHIFT, Pos, SyntaxError_, to_pos

#: Words that cannot be names: the parser reads them as keywords and operators.
RESERVED = frozenset(("if", "elif", "else", "for", "in", "while", "break", "continue", "def", "return",
                      "and", "or", "not", "None"))


class Token(NamedTuple):
    kind: str  # "num", "name", "str", "keyword", "op", "newline", "eof"
    text: str
    pos: Pos


_NUMBER = r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_BLANK = r"[ \t\r\f\v]*(?:\#[^\n]*(?![^\n]))?"  # blanks, then perhaps a comment (to the newline)
# A string holds printable ASCII but its own quote, on one line; no escapes (einsum's
# 'ij,jk->ik', norm's 'fro' and pad's modes need none).
_STRING = r"'[ -&(-~]*'|\"[ !#-~]*\""
# One match per token, the blanks and comment before it included: they cost no
# iteration of the lexer loop.  A comment matches only whole, up to its newline
# or the end of the text (the lookahead): a match that fails after a comment
# must not backtrack into it and read its tail as tokens (`x # ab` at the end of
# the text).  Backtracking into the blanks is harmless: no token starts with a
# blank or '#'.  (Possessive quantifiers would say the same, from Python 3.11.)
# The groups are numbered for m.lastindex (an int compare, cheaper than m.lastgroup).
_TOKEN = re.compile(
    _BLANK + r"(?:([A-Za-z_][A-Za-z_0-9]*)|([-+*/<>=!]=|\*\*|//|\.\.\.|[-+*/%@^<>=,:;])|([(\[{])|([)\]}])"
    rf"|({_NUMBER})([A-Za-z_])?|(\n)|({_STRING}))")
_NAME, _OP, _OPEN, _CLOSE, _NUM, _GLUED, _NEWLINE, _STR = range(1, 9)
_TRAILING = re.compile(_BLANK)  # what may follow the last token
_OPENERS = {"(": ")", "[": "]", "{": "}"}
_KINDS = {"name": "name", "num": "num", "str": "str", "newline": "newline", "eof": "eof",
          **dict.fromkeys(RESERVED, "keyword")}  # other kinds are "op"


_new = tuple.__new__  # Token(...) without its Python-level __new__: a hot path


def scan(text: str) -> tuple[list, list, list]:
    """The lexer: three parallel lists, one entry per token.

    kinds[i] is "name", "num", "str", "newline", "eof" or, for a reserved word or
    an operator, its text (so the parser tests ``kinds[i] == "("`` in one compare);
    texts[i] is the text (a string's with its quotes); lcs[i] its location (line
    and column as one int, see :func:`errors.to_loc`), which the node made from the
    token takes.  Three lists rather than Token NamedTuples: fewer objects per
    token.  Newlines inside ``( )`` and ``[ ]`` are dropped; brackets are matched here.
    """
    kinds: list[str] = []
    texts: list[str] = []
    lcs: list[int] = []
    kind, txt, lc = kinds.append, texts.append, lcs.append
    reserved = RESERVED
    brackets: list[tuple[str, int]] = []  # the open brackets: (text, location)
    line, before = 1, -1  # `before`: offset of the newline that ends the previous line, col = offset - before
    base = (line << LINE_SHIFT) - before  # the location of offset k on this line is base + k
    m = None
    for m in iter(_TOKEN.scanner(text).match, None):  # stops at the first place no token starts
        k = m.lastindex
        if k == _NAME:
            word = m[k]
            kind(word if word in reserved else "name")  # a reserved word's kind is its text
            txt(word)
            lc(base + m.start(k))
        elif k == _OP:
            op = m[k]
            kind(op)
            txt(op)
            lc(base + m.start(k))
        elif k == _NUM:
            kind("num")
            txt(m[k])
            lc(base + m.start(k))
        elif k == _NEWLINE:
            start = m.start(k)
            if not brackets or brackets[-1][0] == "{":  # a block's newlines end its statements
                kind("newline")
                txt("\n")
                lc(base + start)
            line, before = line + 1, start
            base = (line << LINE_SHIFT) - before
        elif k == _OPEN:
            op = m[k]
            where = base + m.start(k)
            brackets.append((op, where))
            kind(op)
            txt(op)
            lc(where)
        elif k == _CLOSE:
            op = m[k]
            where = base + m.start(k)
            if not brackets:
                raise SyntaxError_(f"unmatched '{op}'", where)
            opener, opened = brackets.pop()
            if _OPENERS[opener] != op:
                raise SyntaxError_(f"'{op}' does not match '{opener}' at {to_pos(opened)}", where)
            kind(op)
            txt(op)
            lc(where)
        elif k == _STR:
            kind("str")
            txt(m[k])
            lc(base + m.start(k))
        else:  # _GLUED: a number glued to a name
            raise SyntaxError_(f"invalid number '{m[_NUM]}{m[_GLUED]}'", Pos(line, m.start(_GLUED) - before),
                               hint="put an operator between a number and a name, e.g. 2*x")
    i = _TRAILING.match(text, 0 if m is None else m.end()).end()
    if i < len(text):  # a character no token starts with
        message, where, hint = _bad_character(text, i, line, before)
        raise SyntaxError_(message, where, hint=hint)
    if brackets:
        opener, opened = brackets[-1]
        raise SyntaxError_(f"'{opener}' is never closed", opened, hint=f"add '{_OPENERS[opener]}'")
    kind("eof")
    txt("")
    lc(base + len(text))
    return kinds, texts, lcs


def tokenize(text: str) -> list[Token]:
    """Split program text into tokens.  Newlines inside ( ) and [ ] are dropped."""
    kinds, texts, lcs = scan(text)
    # Token(kind, text, pos) for every token, in C-level loops (map/zip, no Python frame per token)
    kinds = map(_KINDS.get, kinds, repeat("op"))
    return list(map(_new, repeat(Token), zip(kinds, texts, map(to_pos, lcs))))


_HINTS = {".": "attribute access is not part of the language", "!": "use 'not' for negation, '!=' for 'not equal'",
          "&": "use 'and' (elementwise, on masks)", "|": "use 'or' (elementwise, on masks)"}


def _bad_character(text: str, i: int, line: int, before: int):
    """(message, position, hint) for text[i], where no token starts (on `line`, whose
    first character is at offset before + 1)."""
    c = text[i]
    if c in "'\"":  # a string that does not end on its line, or holds a character it may not
        end = text.find(c, i + 1, _line_end(text, i))
        if end < 0:
            return "string literal is never closed", Pos(line, i - before), f"end it with {c} on the same line"
        i = next(k for k in range(i + 1, end) if not (" " <= text[k] <= "~"))
        c = text[i]
        return f"unexpected character {c!r} (U+{ord(c):04X})", Pos(line, i - before), \
            "a string holds printable ASCII characters only"
    if not c.isascii() or not c.isprintable():
        return f"unexpected character {c!r} (U+{ord(c):04X})", Pos(line, i - before), "programs are written in ASCII"
    return f"unexpected character '{c}'", Pos(line, i - before), _HINTS.get(c)


def _line_end(text: str, i: int) -> int:
    end = text.find("\n", i)
    return len(text) if end < 0 else end
