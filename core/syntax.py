"""Text -> tokens -> syntax tree, every node with its source position.

The lexer is a single loop over the text; the parser is a Pratt parser whose
precedence table is the data below.  Left-associative chains (``x + x + ...``)
are built in a loop, so their length never touches Python's recursion limit;
only real nesting (brackets, prefix operators, ``^`` chains) recurses, and it
is capped at :data:`MAX_DEPTH` levels with a clear error.
"""
from __future__ import annotations

import re
from typing import NamedTuple

from .errors import Pos, Source, SyntaxError_

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
_TOKEN = re.compile(
    r"(?P<space>[ \t\r\f\v]+)|(?P<comment>\#[^\n]*)|(?P<newline>\n)"
    rf"|(?P<num>{_NUMBER})(?P<glued>[A-Za-z_])?"
    r"|(?P<name>[A-Za-z_][A-Za-z_0-9]*)"
    r"|(?P<op>\*\*|<=|>=|==|!=|[-+*/@^<>=()\[\],:;])")
_OPENERS = {"(": ")", "[": "]"}


_new = tuple.__new__  # Token(...) and Pos(...) without the Python-level __new__: hot loop


def tokenize(text: str) -> list[Token]:
    """Split program text into tokens.  Newlines inside brackets are dropped."""
    tokens: list[Token] = []
    append = tokens.append
    brackets: list[Token] = []
    i, line, line_start = 0, 1, 0
    for m in _TOKEN.finditer(text):
        start = m.start()
        if start != i:  # finditer skipped a character no token starts with
            break
        i = m.end()
        kind = m.lastgroup
        if kind == "space" or kind == "comment":
            continue
        pos = _new(Pos, (line, start - line_start + 1))
        if kind == "name":
            append(_new(Token, ("name", m.group(), pos)))
        elif kind == "op":
            op = m.group()
            if op in _OPENERS:
                brackets.append(Token("op", op, pos))
            elif op == ")" or op == "]":
                if not brackets:
                    raise SyntaxError_(f"unmatched '{op}'", pos)
                opener = brackets.pop()
                if _OPENERS[opener.text] != op:
                    raise SyntaxError_(f"'{op}' does not match '{opener.text}' at {opener.pos}", pos)
            append(_new(Token, ("op", op, pos)))
        elif kind == "newline":
            if not brackets:
                append(Token("newline", "\n", pos))
            line, line_start = line + 1, i
        else:  # a number, perhaps glued to a name
            if kind == "glued":
                raise SyntaxError_(f"invalid number '{m.group()}'",
                                   Pos(line, m.start("glued") - line_start + 1),
                                   hint="put an operator between a number and a name, e.g. 2*x")
            append(_new(Token, ("num", m.group("num"), pos)))
    if i < len(text):
        message, where, hint = _bad_character(text[i], Pos(line, i - line_start + 1))
        raise SyntaxError_(message, where, hint=hint)
    if brackets:
        opener = brackets[-1]
        raise SyntaxError_(f"'{opener.text}' is never closed", opener.pos,
                           hint=f"add '{_OPENERS[opener.text]}'")
    tokens.append(Token("eof", "", Pos(line, len(text) - line_start + 1)))
    return tokens


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


class Num(NamedTuple):
    value: float
    text: str
    pos: Pos

    @property
    def is_int(self) -> bool:
        return not any(ch in self.text for ch in ".eE")


class Name(NamedTuple):
    id: str
    pos: Pos


class Bool(NamedTuple):
    value: bool
    pos: Pos


class Unary(NamedTuple):
    op: str  # "-" or "+"
    operand: object
    pos: Pos


class Binary(NamedTuple):
    op: str  # + - * / @ ^ and comparisons
    left: object
    right: object
    pos: Pos  # the operator's position


class Keyword(NamedTuple):
    name: str
    value: object
    pos: Pos


class Call(NamedTuple):
    func: str
    args: tuple
    kwargs: tuple  # of Keyword
    pos: Pos  # the function name's position


class Slice(NamedTuple):
    start: object  # expression or None
    stop: object
    step: object
    pos: Pos


class Index(NamedTuple):
    value: object
    items: tuple  # expressions and Slices
    pos: Pos  # the '[' position


class ArrayLit(NamedTuple):
    items: tuple
    pos: Pos


class TupleLit(NamedTuple):
    items: tuple
    pos: Pos


class InputDecl(NamedTuple):
    name: str
    shape: tuple | None  # declared shape, or None
    default: object  # expression or None
    pos: Pos


class Inputs(NamedTuple):
    decls: tuple
    pos: Pos


class Assign(NamedTuple):
    name: str
    value: object
    pos: Pos


class ExprStmt(NamedTuple):
    value: object
    pos: Pos


class Program(NamedTuple):
    """A parsed program: its statements and the source they came from."""

    statements: tuple
    source: Source = Source("")


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
_INFIX = {  # operator: (lbp, rbp)
    **{op: (10, 11) for op in COMPARISONS},          # non-associative
    "+": (20, 21), "-": (20, 21),                     # additive, left
    "*": (30, 31), "/": (30, 31), "@": (30, 31),      # multiplicative, left
    "^": (50, 49), "**": (50, 49),                    # power, right
}
_PREFIX_BP = 40  # unary - and +
_POSTFIX_BP = 60  # calls and indexing


class _Parser:
    def __init__(self, text: str):
        self.tokens = tokenize(text)
        self.i = 0
        self.depth = 0
        self.tok = self.tokens[0]  # the current token (kept as an attribute: the parser's hot path)

    # -- token helpers ------------------------------------------------------
    def peek(self, k: int = 1) -> Token:
        return self.tokens[min(self.i + k, len(self.tokens) - 1)]

    def advance(self) -> Token:
        t = self.tok
        self.i += 1
        if self.i < len(self.tokens):
            self.tok = self.tokens[self.i]
        return t

    def at(self, text: str) -> bool:
        t = self.tok
        return t.text == text and t.kind == "op"

    def expect(self, text: str, what: str | None = None) -> Token:
        if not self.at(text):
            self.fail_here(f"expected '{text}'" + (f" {what}" if what else ""))
        return self.advance()

    def fail_here(self, message: str, hint: str | None = None):
        t = self.tok
        found = {"eof": "end of input", "newline": "end of line"}.get(t.kind, f"'{t.text}'")
        raise SyntaxError_(f"{message}, found {found}", t.pos, hint=hint)

    # -- statements ---------------------------------------------------------
    def program(self) -> tuple:
        statements = []
        while self.tok.kind != "eof":
            if self.tok.kind == "newline" or self.at(";"):
                self.advance()
                continue
            statements.append(self.statement())
            if not (self.tok.kind in ("newline", "eof") or self.at(";")):
                hint = None
                if self.tok.kind in ("name", "num"):
                    hint = "separate statements with a newline or ';', or add an operator"
                self.fail_here("expected end of statement", hint)
        return tuple(statements)

    def statement(self):
        t = self.tok
        if t.kind == "name" and t.text == "input" and self.peek().kind == "name":
            self.advance()
            return Inputs(self.input_decls(), t.pos)
        if t.kind == "name" and self.peek().kind == "op" and self.peek().text == "=":
            self.advance()
            self.advance()
            return Assign(t.text, self.expr(0), t.pos)
        return ExprStmt(self.expr(0), t.pos)

    def input_decls(self) -> tuple:
        decls = []
        while True:
            if self.tok.kind != "name":
                self.fail_here("expected an input name")
            name = self.advance()
            shape = None
            if self.at("["):
                self.advance()
                dims = []
                while not self.at("]"):
                    if self.tok.kind != "num" or not Num(0, self.tok.text, self.tok.pos).is_int:
                        self.fail_here("expected an integer dimension", "shapes are integer literals: input W[3, 4]")
                    dims.append(int(self.advance().text))
                    if not self.at("]"):
                        self.expect(",", "between dimensions")
                self.advance()
                shape = tuple(dims)
            default = None
            if self.at("="):
                self.advance()
                default = self.expr(0)
            decls.append(InputDecl(name.text, shape, default, name.pos))
            if not self.at(","):
                return tuple(decls)
            self.advance()

    # -- expressions ----------------------------------------------------------
    def expr(self, min_bp: int):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise SyntaxError_(f"expression nested deeper than {MAX_DEPTH} levels", self.tok.pos,
                               hint="split it into named intermediate statements")
        try:
            left = self.prefix()
            chained = 0
            while True:
                t = self.tok
                if t.kind != "op":
                    break
                if t.text in ("(", "[") and _POSTFIX_BP > min_bp:
                    chained += 1  # x[..][..]... nests like brackets do
                    if self.depth + chained > MAX_DEPTH:
                        raise SyntaxError_(f"expression nested deeper than {MAX_DEPTH} levels", t.pos,
                                           hint="split it into named intermediate statements")
                    left = self.postfix(left)
                    continue
                bp = _INFIX.get(t.text)
                if bp is None or bp[0] <= min_bp:
                    break
                self.advance()
                right = self.expr(bp[1])
                op = "^" if t.text == "**" else t.text
                left = Binary(op, left, right, t.pos)
                if op in COMPARISONS and self.tok.kind == "op" and self.tok.text in COMPARISONS:
                    raise SyntaxError_("comparisons cannot be chained", self.tok.pos,
                                       hint="combine masks with '*', e.g. (a < b) * (b < c)")
            return left
        finally:
            self.depth -= 1

    def prefix(self):
        t = self.tok
        if t.kind == "num":
            self.advance()
            return Num(float(t.text), t.text, t.pos)
        if t.kind == "name":
            self.advance()
            if t.text in ("true", "True", "false", "False"):
                return Bool(t.text in ("true", "True"), t.pos)
            if self.at("("):
                return self.call(t)
            return Name(t.text, t.pos)
        if t.kind == "op":
            if t.text in ("-", "+"):
                self.advance()
                return Unary(t.text, self.expr(_PREFIX_BP), t.pos)
            if t.text == "(":
                self.advance()
                if self.at(")"):
                    self.advance()
                    return TupleLit((), t.pos)
                first = self.expr(0)
                if self.at(")"):
                    self.advance()
                    return first
                items = [first]
                while self.at(","):
                    self.advance()
                    if self.at(")"):
                        break
                    items.append(self.expr(0))
                self.expect(")", "to close '('")
                return TupleLit(tuple(items), t.pos)
            if t.text == "[":
                self.advance()
                items = []
                while not self.at("]"):
                    items.append(self.expr(0))
                    if not self.at("]"):
                        self.expect(",", "between array elements")
                self.advance()
                return ArrayLit(tuple(items), t.pos)
        self.fail_here("expected an expression")

    def call(self, name: Token) -> Call:
        self.expect("(")
        args, kwargs = [], []
        while not self.at(")"):
            if self.tok.kind == "name" and self.peek().kind == "op" and self.peek().text == "=":
                key = self.advance()
                self.advance()
                if any(k.name == key.text for k in kwargs):
                    raise SyntaxError_(f"keyword argument '{key.text}' given twice", key.pos)
                kwargs.append(Keyword(key.text, self.expr(0), key.pos))
            else:
                if kwargs:
                    raise SyntaxError_("positional argument after a keyword argument", self.tok.pos)
                args.append(self.expr(0))
            if not self.at(")"):
                self.expect(",", "between arguments")
        self.advance()
        return Call(name.text, tuple(args), tuple(kwargs), name.pos)

    def postfix(self, left):
        t = self.advance()
        if t.text == "(":
            raise SyntaxError_("only named functions can be called", t.pos)
        items = []
        while not self.at("]"):
            items.append(self.index_item())
            if not self.at("]"):
                self.expect(",", "between indices")
        self.advance()
        if not items:
            raise SyntaxError_("empty index", t.pos)
        return Index(left, tuple(items), t.pos)

    def index_item(self):
        start_tok = self.tok
        start = None if self.at(":") else self.expr(0)
        if not self.at(":"):
            return start
        self.advance()
        stop = step = None
        if not (self.at(":") or self.at(",") or self.at("]")):
            stop = self.expr(0)
        if self.at(":"):
            self.advance()
            if not (self.at(",") or self.at("]")):
                step = self.expr(0)
        return Slice(start, stop, step, start_tok.pos)


def parse(text: str, label: str = "<expr>") -> Program:
    """Parse program text into a :class:`Program`; raises SyntaxError_ with a position."""
    source = Source(text, label)
    try:
        return Program(_Parser(text).program(), source)
    except SyntaxError_ as err:
        raise err.located(source)


def parse_expression(text: str, label: str = "<expr>"):
    """Parse a single expression (used for --at values, cotangents, tangents)."""
    source = Source(text, label)
    try:
        p = _Parser(text)
        while p.tok.kind == "newline":
            p.advance()
        node = p.expr(0)
        while p.tok.kind == "newline":
            p.advance()
        if p.tok.kind != "eof":
            p.fail_here("expected end of value")
        return node
    except SyntaxError_ as err:
        raise err.located(source)
