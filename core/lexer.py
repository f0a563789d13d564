"""Text -> tokens, in bulk, into three flat lists.

:func:`scan` is what the parser (core/syntax.py) reads; :func:`tokenize` gives
the same tokens as :class:`Token` tuples, for tests and tools.  A token's kind
is "name", "num", "str", "newline", "eof", a reserved word's own text (``if``,
``and``, ``None``...: the parser tells them from names by their kind), or, for
an operator or bracket, its own text.

To add an operator, add its text to the operator group of ``_PIECE`` (longer
spellings before their prefixes: ``**`` before ``*``; ``[-+*/<>=!]=`` holds the
two-character ones that end in ``=``) and to :data:`OPERATORS`, and drop it from
``_bad_character``'s hints if one names it.  To reserve a word, add it to
:data:`RESERVED`.  Newlines inside ``( )`` and ``[ ]`` are dropped (a bracket
continues the line); inside a ``{ }`` block, which holds statements, they are
kept: a newline is dropped only while the innermost open bracket is not a ``{``.

How it is fast (a 3,000-line program has 40,000 tokens): no Python code runs per
token.  ``findall`` cuts the text into *pieces*, a token and the blanks after it
(a comment is a piece of its own), and C-level ``map``/``accumulate`` passes turn
them into texts, kinds and locations (:func:`_pieces`, :func:`_tokens`).  Only the
newlines, the comments and the brackets not closed right away pass through a Python
loop (:func:`_nest`).  ``findall`` skips what no token starts with: when the pieces
do not cover the text, :func:`_diagnose` finds where a token-by-token walk stops
and words the error it meets first, as the per-token loop this replaced did
(tests/test_lexer_speed.py keeps that loop and compares the two).
"""
from __future__ import annotations

import re
from collections import deque
from itertools import accumulate, compress, repeat
from operator import itemgetter
from typing import NamedTuple

from .errors import LINE_SHIFT, Pos, SyntaxError_, to_pos

#: Words that cannot be names: the parser reads them as keywords and operators.
RESERVED = frozenset(("if", "elif", "else", "for", "in", "while", "break", "continue", "def", "return",
                      "and", "or", "not", "None"))
#: Every operator and bracket token; its kind is its text.
OPERATORS = frozenset(("==", "!=", "<=", ">=", "+=", "-=", "*=", "/=", "**", "//", "...",
                       "+", "-", "*", "/", "%", "@", "^", "<", ">", "=", ",", ":", ";",
                       "(", ")", "[", "]", "{", "}"))


class Token(NamedTuple):
    kind: str  # "num", "name", "str", "keyword", "op", "newline", "eof"
    text: str
    pos: Pos


_NUMBER = r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_BLANK_CHARS = " \t\r\f\v"
# A string holds printable ASCII but its own quote, on one line; no escapes (einsum's
# 'ij,jk->ik', norm's 'fro' and pad's modes need none).
_STRING = r"'[ -&(-~]*'|\"[ !#-~]*\""
# A piece: one token, or a comment (to its newline or the end of the text), then the
# blanks after it.  A number followed by a letter or '_' (`2x`) is no token: the
# atomic group keeps the number whole, so that the walk stops at its first digit.
# Possessive quantifiers: nothing is ever given back (the pieces are the same as a
# token-at-a-time walk's; see _diagnose).
_PIECE = re.compile(r"(?:[A-Za-z_][A-Za-z_0-9]*+|[-+*/<>=!]=|\*\*|//|\.\.\.|[-+*/%@^<>=,:;()\[\]{}]|\n"
                    rf"|(?>{_NUMBER})(?![A-Za-z_])|{_STRING}|\#[^\n]*+)[ \t\r\f\v]*+")
_LEAD = re.compile(r"[ \t\r\f\v]*+")  # the blanks before the first piece
_GLUED = rf"(?>{_NUMBER})[A-Za-z_]"  # compiled when needed: by an error
_OPENERS = {"(": ")", "[": "]", "{": "}"}
#: A piece's kind by its text (an operator, a reserved word, a newline) or else by its first character.
_KIND_OF_TEXT = {**{op: op for op in OPERATORS}, **{word: word for word in RESERVED}, "\n": "newline"}
_KIND_OF_FIRST = {**dict.fromkeys("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_", "name"),
                  **dict.fromkeys("0123456789.", "num"), "'": "str", '"': "str"}
# Delete every character but the first characters of the pieces _nest walks, or of the
# brackets (a piece starts with an ASCII character).
_ONLY_NESTING = str.maketrans("", "", "".join(c for c in map(chr, range(128)) if c not in "\n#()[]{}"))
_ONLY_BRACKETS = str.maketrans("", "", "".join(c for c in map(chr, range(128)) if c not in "()[]{}"))
_PAIR_LEVELS = 8  # see _nest: bounded, so that the removal stays linear in the text
_FIRST_LOC = (1 << LINE_SHIFT) + 1  # the location of offset 0 (line 1, column 1)
_NEXT_LINE = (1 << LINE_SHIFT) - 1  # a newline's location jump, plus the length of the line it ends
_KINDS = {"name": "name", "num": "num", "str": "str", "newline": "newline", "eof": "eof",
          **dict.fromkeys(RESERVED, "keyword")}  # other kinds are "op"
_first = itemgetter(0)
_PART = 4096  # see _pieces


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
    lead = _LEAD.match(text).end()
    pieces = _pieces(text, lead)
    if pieces is None:
        _diagnose(text, lead)
    kinds, texts, lcs, unclosed = _tokens(text, lead, *pieces)
    if unclosed:
        opener, opened = unclosed
        raise SyntaxError_(f"'{opener}' is never closed", opened, hint=f"add '{_OPENERS[opener]}'")
    return kinds, texts, lcs


def _pieces(text: str, lead: int):
    """The kinds, texts, lengths and first characters (one string) of the pieces of text
    from offset lead on; None where they do not cover it (findall skipped a character
    that no token starts with).  Read a few thousand characters at a time, each part
    ending before a newline: the passes over a part's pieces find them in the cache.
    (After the test suite had fragmented the memory, W3's source took 24 ms in one
    part and 21 ms in parts; in a fresh process both took 20 ms.)"""
    kinds: list = []
    texts: list = []
    lens: list = []
    firsts = []
    start, end = lead, len(text)
    while start < end:
        stop = text.find("\n", start + _PART)
        stop = end if stop < 0 else stop
        pieces = _PIECE.findall(text, start, stop)
        lens += map(len, pieces)
        words = list(map(str.rstrip, pieces, repeat(_BLANK_CHARS)))
        first = "".join(map(_first, pieces))
        kinds += map(_KIND_OF_TEXT.get, words, map(_KIND_OF_FIRST.get, first))
        texts += words
        firsts.append(first)
        start = stop
    if sum(lens) != end - lead:
        return None
    return kinds, texts, lens, "".join(firsts)


def _tokens(text: str, lead: int, kinds: list, texts: list, lens: list, firsts: str):
    """The token lists, the eof token included, of the pieces (see _pieces) that cover
    text from offset lead on; and the innermost bracket left open (its text and
    location) or None.  Raises on a closing bracket that matches no open one."""
    first_loc = _FIRST_LOC + lead
    dropped, matched = _nest(firsts, lens, text)
    if not matched:
        closer, opener = _first_unmatched(firsts)
        if closer is not None:  # (the lengths before it have their jumps: see _nest)
            c, where = firsts[closer], first_loc + sum(lens[:closer])
            if opener is None:
                raise SyntaxError_(f"unmatched '{c}'", where)
            raise SyntaxError_(f"'{c}' does not match '{firsts[opener]}' at {to_pos(first_loc + sum(lens[:opener]))}",
                               where)
    # A piece's location is the first one's plus the lengths before it (each newline's
    # with the jump to the next line): the last one is the end of the text, eof's.
    lcs = list(accumulate(lens, initial=first_loc))
    unclosed = None if matched else (firsts[opener], lcs[opener])
    if dropped:
        keep = [True] * len(lcs)
        for i in dropped:
            keep[i] = False
        kinds, texts, lcs = list(compress(kinds, keep)), list(compress(texts, keep)), list(compress(lcs, keep))
    kinds.append("eof")
    texts.append("")
    return kinds, texts, lcs, unclosed


def _nest(firsts: str, lens: list, text: str) -> tuple[list, bool]:
    """Walk the newline, comment and bracket pieces in order (firsts: the first character
    of each piece), keeping the open brackets: add to each newline's length the jump of
    the location to the next line, and list the pieces to drop (comments, newlines inside
    ( ) and [ ]).  Returns them, and whether every bracket is matched; the walk stops at
    the first that is not (every newline before it has its jump).

    A bracket pair with nothing between them (``sin(x)``'s: most pairs) changes nothing
    but the nesting, so such pairs are removed first, a few levels deep, and only what
    remains is walked; without their indices, _first_unmatched words a bracket error."""
    walked = firsts.translate(_ONLY_NESTING)
    for _ in range(_PAIR_LEVELS):
        inner = walked.replace("()", "").replace("[]", "").replace("{}", "")
        if len(inner) == len(walked):
            break
        walked = inner
    if not walked:
        return [], True
    lines = iter(text.split("\n"))  # the line each newline ends, in order
    find = firsts.find
    dropped: list[int] = []
    nest: list[str] = []  # the open brackets
    newline = comment = -1  # the indices of the last newline and comment walked
    for c in walked:
        if c == "\n":
            newline = find(c, newline + 1)
            lens[newline] += _NEXT_LINE - len(next(lines))
            if nest and nest[-1] != "{":  # a block's newlines end its statements
                dropped.append(newline)
        elif c == "#":
            comment = find(c, comment + 1)
            dropped.append(comment)
        elif c in _OPENERS:
            nest.append(c)
        elif not nest or _OPENERS[nest.pop()] != c:
            return dropped, False
    return dropped, not nest


def _first_unmatched(firsts: str) -> tuple[int | None, int | None]:
    """The first closing bracket that closes nothing or a bracket of another kind, as
    (its index, the index of the bracket it closes or None); else (None, the index of
    the innermost bracket left open, or None)."""
    find = firsts.find
    nest: list[int] = []
    i = -1
    for c in firsts.translate(_ONLY_BRACKETS):
        i = find(c, i + 1)  # the piece this is: the next one that starts with c
        if c in _OPENERS:
            nest.append(i)
        elif not nest:
            return i, None
        else:
            opener = nest.pop()
            if _OPENERS[firsts[opener]] != c:
                return i, opener
    return None, nest[-1] if nest else None


def _diagnose(text: str, lead: int):
    """Raise the error that a token-at-a-time walk of text meets first, where some
    character starts no token: a bracket mismatch before that character, or the
    character itself (a number glued to a name, a string never closed, a character
    the language does not have)."""
    walk = deque(iter(_PIECE.scanner(text, lead).match, None), maxlen=1)  # the last piece it reads
    stop = walk[0].end() if walk else lead
    _tokens(text, lead, *_pieces(text[:stop], lead))  # the same pieces, up to stop: raises their mismatch
    line, before = text.count("\n", 0, stop) + 1, text.rfind("\n", 0, stop)
    glued = re.compile(_GLUED).match(text, stop)
    if glued:
        raise SyntaxError_(f"invalid number '{glued[0]}'", Pos(line, glued.end() - 1 - before),
                           hint="put an operator between a number and a name, e.g. 2*x")
    message, where, hint = _bad_character(text, stop, line, before)
    raise SyntaxError_(message, where, hint=hint)


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
