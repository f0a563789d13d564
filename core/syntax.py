"""Text -> tokens -> syntax tree, every node with its source position.

The lexer is a single loop over the text; the parser is a Pratt parser whose
precedence table is the data below.  Left-associative chains (``x + x + ...``)
are built in a loop, so their length never touches Python's recursion limit;
only real nesting (brackets, prefix operators, ``^`` chains) recurses, and it
is capped at :data:`MAX_DEPTH` levels with a clear error.
"""
from __future__ import annotations

import re
from itertools import repeat
from typing import NamedTuple

from .errors import LINE_SHIFT, Pos, Source, SyntaxError_, to_pos

#: Deepest nesting of brackets, prefix operators and ``^`` the parser accepts.
MAX_DEPTH = 100

# --------------------------------------------------------------------------
# Tokens
# --------------------------------------------------------------------------


class Token(NamedTuple):
    kind: str  # "num", "name", "op", "newline", "eof"
    text: str
    pos: Pos


_NUMBER = r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_BLANK = r"[ \t\r\f\v]*(?:\#[^\n]*(?![^\n]))?"  # blanks, then perhaps a comment (to the newline)
# One match per token, the blanks and comment before it included: they cost no
# iteration of the lexer loop.  A comment matches only whole, up to its newline
# or the end of the text (the lookahead): a match that fails after a comment
# must not backtrack into it and read its tail as tokens (`x # ab` at the end of
# the text).  Backtracking into the blanks is harmless: no token starts with a
# blank or '#'.  (Possessive quantifiers would say the same, from Python 3.11.)
# The groups are numbered for m.lastindex (an int compare, cheaper than m.lastgroup).
_TOKEN = re.compile(
    _BLANK + r"(?:([A-Za-z_][A-Za-z_0-9]*)|(\*\*|<=|>=|==|!=|[-+*/@^<>=,:;])|([(\[])|([)\]])"
    rf"|({_NUMBER})([A-Za-z_])?|(\n))")
_NAME, _OP, _OPEN, _CLOSE, _NUM, _GLUED, _NEWLINE = range(1, 8)
_TRAILING = re.compile(_BLANK)  # what may follow the last token
_OPENERS = {"(": ")", "[": "]"}
_KINDS = {"name": "name", "num": "num", "newline": "newline", "eof": "eof"}  # other kinds are "op"


_new = tuple.__new__  # Token(...) and the nodes without their Python-level __new__: hot paths


def _scan(text: str) -> tuple[list, list, list]:
    """The lexer: three parallel lists, one entry per token.

    kinds[i] is "name", "num", "newline", "eof" or, for an operator, its text
    (so the parser tests ``kinds[i] == "("`` in one compare); texts[i] is the
    text; lcs[i] its location (line and column as one int, see
    :func:`errors.to_loc`), which the node made from the token takes.  Three
    lists rather than Token NamedTuples: fewer objects per token.
    """
    kinds: list[str] = []
    texts: list[str] = []
    lcs: list[int] = []
    kind, txt, lc = kinds.append, texts.append, lcs.append
    brackets: list[tuple[str, int]] = []  # the open brackets: (text, location)
    line, before = 1, -1  # `before`: offset of the newline that ends the previous line, col = offset - before
    base = (line << LINE_SHIFT) - before  # the location of offset k on this line is base + k
    m = None
    for m in iter(_TOKEN.scanner(text).match, None):  # stops at the first place no token starts
        k = m.lastindex
        if k == _NAME:
            kind("name")
            txt(m[k])
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
            if not brackets:
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
        else:  # _GLUED: a number glued to a name
            raise SyntaxError_(f"invalid number '{m[_NUM]}{m[_GLUED]}'", Pos(line, m.start(_GLUED) - before),
                               hint="put an operator between a number and a name, e.g. 2*x")
    i = _TRAILING.match(text, 0 if m is None else m.end()).end()
    if i < len(text):  # a character no token starts with
        message, where, hint = _bad_character(text[i], Pos(line, i - before))
        raise SyntaxError_(message, where, hint=hint)
    if brackets:
        opener, opened = brackets[-1]
        raise SyntaxError_(f"'{opener}' is never closed", opened, hint=f"add '{_OPENERS[opener]}'")
    kind("eof")
    txt("")
    lc(base + len(text))
    return kinds, texts, lcs


def tokenize(text: str) -> list[Token]:
    """Split program text into tokens.  Newlines inside brackets are dropped."""
    kinds, texts, lcs = _scan(text)
    # Token(kind, text, pos) for every token, in C-level loops (map/zip, no Python frame per token)
    kinds = map(_KINDS.get, kinds, repeat("op"))
    return list(map(_new, repeat(Token), zip(kinds, texts, map(to_pos, lcs))))


def _bad_character(c: str, pos: Pos):
    if c in "'\"":
        return "string literals are not part of the language", pos, None
    if c == "!":
        return "unexpected character '!'", pos, "use '!=' for 'not equal'"
    if not c.isascii() or not c.isprintable():
        return f"unexpected character {c!r} (U+{ord(c):04X})", pos, "programs are written in ASCII"
    hints = {".": "attribute access is not part of the language",
             "&": "use where(...) or multiplication of masks", "|": "use maximum(...) of masks",
             "%": "there is no modulo operator", "{": "array literals use [ ]"}
    return f"unexpected character '{c}'", pos, hints.get(c)


# --------------------------------------------------------------------------
# Syntax tree
# --------------------------------------------------------------------------

#: Every node's last field is its location (see errors.to_loc): an int, which the
#: lexer makes cheaply for every token; ``node.pos`` is its Pos.
_POS = property(lambda node: to_pos(node[-1]), doc="the node's position, a Pos")


class Num(NamedTuple):
    value: float
    text: str
    loc: int
    pos = _POS

    @property
    def is_int(self) -> bool:
        return not any(ch in self.text for ch in ".eE")


class Name(NamedTuple):
    id: str
    loc: int
    pos = _POS


class Bool(NamedTuple):
    value: bool
    loc: int
    pos = _POS


class Unary(NamedTuple):
    op: str  # "-" or "+"
    operand: object
    loc: int
    pos = _POS


class Binary(NamedTuple):
    op: str  # + - * / @ ^ and comparisons
    left: object
    right: object
    loc: int  # the operator's location
    pos = _POS


class Keyword(NamedTuple):
    name: str
    value: object
    loc: int
    pos = _POS


class Call(NamedTuple):
    func: str
    args: tuple
    kwargs: tuple  # of Keyword
    loc: int  # the function name's location
    pos = _POS


class Slice(NamedTuple):
    start: object  # expression or None
    stop: object
    step: object
    loc: int
    pos = _POS


class Index(NamedTuple):
    value: object
    items: tuple  # expressions and Slices
    loc: int  # the '[' location
    pos = _POS


class ArrayLit(NamedTuple):
    items: tuple
    loc: int
    pos = _POS


class TupleLit(NamedTuple):
    items: tuple
    loc: int
    pos = _POS


class InputDecl(NamedTuple):
    name: str
    shape: tuple | None  # declared shape, or None
    default: object  # expression or None
    loc: int
    pos = _POS


class Inputs(NamedTuple):
    decls: tuple
    loc: int
    pos = _POS


class Assign(NamedTuple):
    name: str
    value: object
    loc: int
    pos = _POS


class ExprStmt(NamedTuple):
    value: object
    loc: int
    pos = _POS


class Program(NamedTuple):
    """A parsed program: its statements and the source they came from."""

    statements: tuple
    source: Source = Source("")
    #: Per statement, the Name nodes it reads, in textual order (what ``find_inputs``
    #: needs; the parser notes them as it makes them).  Empty when not known.
    reads: tuple = ()


COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")

# --------------------------------------------------------------------------
# Parser
# --------------------------------------------------------------------------

# Binding powers, lowest first.  An infix operator with left binding power
# `lbp` continues the expression while lbp > min_bp; its right operand is
# parsed with min_bp = rbp.  Worked example, `-x^2*y`:
#   prefix '-' parses its operand with min_bp 40; '^' (lbp 50 > 40) joins x^2,
#   '*' (lbp 30 < 40) does not, so '-' closes over x^2, and the outer loop
#   (min_bp 0) then takes '*': (-(x^2))*y.  '^' has rbp 49 < lbp 50, so
#   a^b^c nests to the right; its operand may start with a prefix '-' (2^-1).
_INFIX = {  # operator: (lbp, rbp, the Binary op it builds)
    **{op: (10, 11, op) for op in COMPARISONS},                     # non-associative
    "+": (20, 21, "+"), "-": (20, 21, "-"),                          # additive, left
    "*": (30, 31, "*"), "/": (30, 31, "/"), "@": (30, 31, "@"),      # multiplicative, left
    "^": (50, 49, "^"), "**": (50, 49, "^"),                         # power, right
}
_PREFIX_BP = 40  # unary - and +
_POSTFIX_BP = 60  # calls and indexing
_COMPARISON_SET = frozenset(COMPARISONS)
_BOOLS = {"true": True, "True": True, "false": False, "False": False}
_FOUND = {"eof": "end of input", "newline": "end of line"}


class _Parser:
    """Parses the tokens of one text: ``_Parser(text).program()`` or ``.expression()``."""

    def __init__(self, text: str):
        self.tokens = _scan(text)
        self.reads: list = []  # filled by program(): see Program.reads

    def program(self) -> tuple:
        return _parse_tokens(*self.tokens, single_expression=False, reads=self.reads)

    def expression(self):
        return _parse_tokens(*self.tokens, single_expression=True)


def _parse_tokens(kinds: list, texts: list, lcs: list, single_expression: bool, reads: list | None = None):
    """Recursive descent over the parallel token lists of :func:`_scan`.

    The grammar functions are closures over the token lists and the index `i`
    of the current token: a cell variable is cheaper to read and write than an
    attribute of a parser object, and these are the parser's hot paths.
    Nesting depth is passed down as an argument (``depth`` = how many ``expr``
    calls are active, counting this one) instead of a counter kept with
    try/finally.  ``kinds[i] == "("`` tests for an operator: its kind is its text.
    Name nodes are made in textual order; ``names`` collects them, and program()
    appends each statement's share to ``reads``.
    """
    i = 0
    names: list = []
    name_read = names.append

    def fail_here(message: str, hint: str | None = None):
        found = _FOUND.get(kinds[i]) or f"'{texts[i]}'"
        raise SyntaxError_(f"{message}, found {found}", lcs[i], hint=hint)

    def expect(text: str, what: str | None = None):
        nonlocal i
        if kinds[i] != text:
            fail_here(f"expected '{text}'" + (f" {what}" if what else ""))
        i += 1

    def too_deep(at: int):
        raise SyntaxError_(f"expression nested deeper than {MAX_DEPTH} levels", lcs[at],
                           hint="split it into named intermediate statements")

    # -- statements ---------------------------------------------------------
    def program() -> tuple:
        nonlocal i
        statements = []
        while True:
            k = kinds[i]
            if k == "newline" or k == ";":
                i += 1
                continue
            if k == "eof":
                return tuple(statements)
            mark = len(names)
            if k == "name" and kinds[i + 1] == "=":  # NAME = EXPR (here, not in statement(): the common case)
                first = i
                i += 2
                statements.append(_new(Assign, (texts[first], expr(0, 1), lcs[first])))
            else:
                statements.append(statement())
            reads.append(tuple(names[mark:]))
            k = kinds[i]
            if not (k == "newline" or k == "eof" or k == ";"):
                hint = None
                if k == "name" or k == "num":
                    hint = "separate statements with a newline or ';', or add an operator"
                fail_here("expected end of statement", hint)

    def statement():
        """An input declaration or a bare expression (program() parses assignments)."""
        nonlocal i
        first = i
        if kinds[first] == "name" and kinds[first + 1] == "name" and texts[first] == "input":
            i = first + 1
            return Inputs(input_decls(), lcs[first])
        return _new(ExprStmt, (expr(0, 1), lcs[first]))

    def input_decls() -> tuple:
        nonlocal i
        decls = []
        while True:
            if kinds[i] != "name":
                fail_here("expected an input name")
            name, name_pos = texts[i], lcs[i]
            i += 1
            shape = None
            if kinds[i] == "[":
                i += 1
                dims = []
                while kinds[i] != "]":
                    if kinds[i] != "num" or not Num(0, texts[i], None).is_int:
                        fail_here("expected an integer dimension", "shapes are integer literals: input W[3, 4]")
                    dims.append(int(texts[i]))
                    i += 1
                    if kinds[i] != "]":
                        expect(",", "between dimensions")
                i += 1
                shape = tuple(dims)
            default = None
            if kinds[i] == "=":
                i += 1
                default = expr(0, 1)
            decls.append(InputDecl(name, shape, default, name_pos))
            if kinds[i] != ",":
                return tuple(decls)
            i += 1

    # -- expressions ----------------------------------------------------------
    def expr(min_bp: int, depth: int):
        """An expression whose infix operators all bind tighter than min_bp."""
        nonlocal i
        if depth > MAX_DEPTH:
            too_deep(i)
        # The operand.  Numbers, names and calls (most operands) are parsed here
        # as prefix() would, saving a call; prefix() does the rest.
        at = i
        k = kinds[at]
        if k == "num":
            i = at + 1
            text = texts[at]
            left = _new(Num, (float(text), text, lcs[at]))
        elif k == "name" and texts[at] not in _BOOLS:
            i = at + 1
            if kinds[i] == "(":
                left = call(at, depth)
            else:
                left = _new(Name, (texts[at], lcs[at]))
                name_read(left)
        else:
            left = prefix(depth)
        chained = 0
        while True:
            at = i
            k = kinds[at]
            bp = _INFIX.get(k)  # None for names, numbers, newlines, ')' ...
            if bp is None:
                if (k == "(" or k == "[") and _POSTFIX_BP > min_bp:
                    chained += 1  # x[..][..]... nests like brackets do
                    if depth + chained > MAX_DEPTH:
                        too_deep(at)
                    left = postfix(left, depth)
                    continue
                return left
            lbp, rbp, op = bp
            if lbp <= min_bp:
                return left
            i = at + 1
            left = _new(Binary, (op, left, expr(rbp, depth + 1), lcs[at]))
            if lbp == 10 and kinds[i] in _COMPARISON_SET:  # after a comparison (lbp 10)
                raise SyntaxError_("comparisons cannot be chained", lcs[i],
                                   hint="combine masks with '*', e.g. (a < b) * (b < c)")

    def prefix(depth: int):
        nonlocal i
        at = i
        k = kinds[at]
        if k == "num":
            i = at + 1
            text = texts[at]
            return _new(Num, (float(text), text, lcs[at]))
        if k == "name":
            i = at + 1
            text = texts[at]
            if text in _BOOLS:
                return _new(Bool, (_BOOLS[text], lcs[at]))
            if kinds[i] == "(":
                return call(at, depth)
            node = _new(Name, (text, lcs[at]))
            name_read(node)
            return node
        if k == "-" or k == "+":
            i = at + 1
            return _new(Unary, (k, expr(_PREFIX_BP, depth + 1), lcs[at]))
        if k == "(":
            i = at + 1
            if kinds[i] == ")":
                i += 1
                return TupleLit((), lcs[at])
            first = expr(0, depth + 1)
            if kinds[i] == ")":
                i += 1
                return first
            items = [first]
            while kinds[i] == ",":
                i += 1
                if kinds[i] == ")":
                    break
                items.append(expr(0, depth + 1))
            expect(")", "to close '('")
            return TupleLit(tuple(items), lcs[at])
        if k == "[":
            i = at + 1
            items = []
            while kinds[i] != "]":
                items.append(expr(0, depth + 1))
                if kinds[i] != "]":
                    expect(",", "between array elements")
            i += 1
            return ArrayLit(tuple(items), lcs[at])
        fail_here("expected an expression")

    def call(name: int, depth: int) -> Call:
        """The call whose function name is token `name`; the current token is its '('."""
        nonlocal i
        i += 1
        args, kwargs = [], []
        while kinds[i] != ")":
            at = i
            if kinds[at] == "name" and kinds[at + 1] == "=":
                key = texts[at]
                i = at + 2
                if any(kw.name == key for kw in kwargs):
                    raise SyntaxError_(f"keyword argument '{key}' given twice", lcs[at])
                kwargs.append(Keyword(key, expr(0, depth + 1), lcs[at]))
            else:
                if kwargs:
                    raise SyntaxError_("positional argument after a keyword argument", lcs[at])
                args.append(expr(0, depth + 1))
            if kinds[i] != ")":
                expect(",", "between arguments")
        i += 1
        return _new(Call, (texts[name], tuple(args), tuple(kwargs), lcs[name]))

    def postfix(left, depth: int):
        nonlocal i
        at = i
        i = at + 1
        if kinds[at] == "(":
            raise SyntaxError_("only named functions can be called", lcs[at])
        items = []
        while kinds[i] != "]":
            items.append(index_item(depth))
            if kinds[i] != "]":
                expect(",", "between indices")
        i += 1
        if not items:
            raise SyntaxError_("empty index", lcs[at])
        return Index(left, tuple(items), lcs[at])

    def index_item(depth: int):
        nonlocal i
        start_pos = lcs[i]
        start = None if kinds[i] == ":" else expr(0, depth + 1)
        if kinds[i] != ":":
            return start
        i += 1
        stop = step = None
        if kinds[i] not in (":", ",", "]"):
            stop = expr(0, depth + 1)
        if kinds[i] == ":":
            i += 1
            if kinds[i] not in (",", "]"):
                step = expr(0, depth + 1)
        return Slice(start, stop, step, start_pos)

    try:
        if not single_expression:
            return program()
        while kinds[i] == "newline":
            i += 1
        node = expr(0, 1)
        while kinds[i] == "newline":
            i += 1
        if kinds[i] != "eof":
            fail_here("expected end of value")
        return node
    finally:
        # The grammar functions call each other through their closure cells: a reference
        # cycle, which would keep them and the token lists alive until the cycle collector
        # found them (11 ms after a 3,000-line program).  Emptying the cells breaks it.
        del fail_here, expect, too_deep, program, statement, input_decls, expr, prefix, call
        del postfix, index_item


def parse(text: str, label: str = "<expr>") -> Program:
    """Parse program text into a :class:`Program`; raises SyntaxError_ with a position."""
    source = Source(text, label)
    try:
        parser = _Parser(text)
        statements = parser.program()
        return Program(statements, source, tuple(parser.reads))
    except SyntaxError_ as err:
        raise err.located(source)


def parse_expression(text: str, label: str = "<expr>"):
    """Parse a single expression (used for --at values, cotangents, tangents)."""
    source = Source(text, label)
    try:
        return _Parser(text).expression()
    except SyntaxError_ as err:
        raise err.located(source)
