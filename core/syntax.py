"""Tokens -> syntax tree, every node with its source position.

The lexer (core/lexer.py) turns the text into three flat token lists; the
parser below reads them.  It is a recursive-descent parser with one method of
:class:`_Parser` per grammar rule, in the manner of tomli: a rule takes the
index of its first token and returns ``(pos, node)``, ``pos`` being the index
just past what it read.  Expressions are parsed Pratt-style, the binding powers
being data (``_INFIX``).  Left-associative chains (``x + x + ...``) are built in
a loop, so their length never touches Python's recursion limit; only real
nesting (brackets, prefix operators, ``^`` chains) recurses, and it is capped
at :data:`MAX_DEPTH` levels with a clear error.

Grammar (a newline or ``;`` ends a statement; rule names are method names)::

    program      = block up to the end of input
    block        = { statement (newline | ';') }
    statement    = assignment | input_statement | expression_statement
    assignment   = NAME '=' expr
    input_statement = 'input' input_decl {',' input_decl}      ('input' then a name)
    input_decl   = NAME ['[' dimension {',' dimension} ']'] ['=' expr]
    expr         = operand { INFIX expr | index }
    operand      = NUM | NAME | call | unary | parenthesized | array

To add a statement form: write a method ``rule(self, pos) -> (pos, node)`` and
key it by its leading keyword in ``_STATEMENTS`` (``if``, ``for``, ``while``,
``def``, ``return``, ``break``...).  A ``{ ... }`` body is ``self.block(pos,
"}")``: the statements up to the closing token, as the program is ``block(0,
"eof")``.  A form that starts with a name and an operator (``x += e``) is
keyed by that operator in ``_ASSIGNMENTS`` instead.  Node classes are below.

To add an operator: give it a token in the lexer, then one entry in a table.
A binary operator is an entry in ``_INFIX`` (its binding powers and the Binary
op it builds); a prefix one a method in ``_PREFIX``; one that builds more than
a Binary (``x[i]``, and ``a if c else b`` to come) a method ``rule(self, pos,
left, depth)`` in ``_POSTFIX``, with its left binding power.  Words used as
operators (``and``, ``not``, ``if``) need a token kind of their own from the
lexer (their text, as operators have), or they read as names.
"""
from __future__ import annotations

from typing import NamedTuple

from .errors import Source, SyntaxError_, to_pos
from .lexer import Token, scan, tokenize

__all__ = ["ArrayLit", "Assign", "Binary", "Bool", "Call", "COMPARISONS", "ExprStmt", "Index", "InputDecl",
           "Inputs", "Keyword", "MAX_DEPTH", "Name", "Num", "Program", "Slice", "Token", "TupleLit", "Unary",
           "parse", "parse_expression", "tokenize"]

#: Deepest nesting of brackets, prefix operators and ``^`` the parser accepts.
MAX_DEPTH = 100

_new = tuple.__new__  # the nodes without their Python-level __new__: hot paths

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
_COMPARISON_BP = 10  # no operator chains after a comparison: `a < b < c` is an error
_INFIX = {  # operator: (lbp, rbp, the Binary op it builds)
    **{op: (_COMPARISON_BP, 11, op) for op in COMPARISONS},        # non-associative
    "+": (20, 21, "+"), "-": (20, 21, "-"),                          # additive, left
    "*": (30, 31, "*"), "/": (30, 31, "/"), "@": (30, 31, "@"),      # multiplicative, left
    "^": (50, 49, "^"), "**": (50, 49, "^"),                         # power, right
}
_PREFIX_BP = 40  # unary - and +
_POSTFIX_BP = 60  # calls and indexing
_COMPARISON_SET = frozenset(COMPARISONS)
_BOOLS = {"true": True, "True": True, "false": False, "False": False}
_FOUND = {"eof": "end of input", "newline": "end of line"}
_NO_STOP = (":", ",", "]")  # after a slice's first ':', the stop is left out
_NO_STEP = (",", "]")  # after its second ':', the step is


class _Parser:
    """The grammar rules, over the tokens of one text: ``_Parser(text).program()``.

    A rule ``rule(self, pos, ...)`` reads from token ``pos`` on and returns
    ``(pos, node)``, pos now just past what it read; the expression rules also take
    ``depth``, the number of ``expr`` calls active (the nesting cap).  The object
    holds the token lists and the Name nodes made so far, and no bound method of
    itself: it forms no reference cycle, and is freed as soon as parsing ends.
    ``kinds[pos] == "("`` tests for an operator: its kind is its text.
    """

    def __init__(self, text: str):
        self.kinds, self.texts, self.lcs = scan(text)
        self.names: list = []  # every Name node made, in textual order: see Program.reads
        self.note_read = self.names.append  # a method of the list, not of self: no cycle

    # -- the two entry points ------------------------------------------------------
    def program(self) -> tuple[tuple, tuple]:
        """The statements of the text, and per statement the Name nodes it reads."""
        _, statements, reads = self.block(0, "eof")
        return statements, reads

    def expression(self):
        """The text as one expression (blank lines around it allowed)."""
        kinds = self.kinds
        pos = 0
        while kinds[pos] == "newline":
            pos += 1
        pos, node = self.expr(pos, 0, 1)
        while kinds[pos] == "newline":
            pos += 1
        if kinds[pos] != "eof":
            self.fail(pos, "expected end of value")
        return node

    # -- errors ------------------------------------------------------------------
    def fail(self, pos: int, message: str, hint: str | None = None):
        found = _FOUND.get(self.kinds[pos]) or f"'{self.texts[pos]}'"
        raise SyntaxError_(f"{message}, found {found}", self.lcs[pos], hint=hint)

    def expect(self, pos: int, text: str, what: str | None = None) -> int:
        """The index past token `text`, which must be at pos."""
        if self.kinds[pos] != text:
            self.fail(pos, f"expected '{text}'" + (f" {what}" if what else ""))
        return pos + 1

    def too_deep(self, pos: int):
        raise SyntaxError_(f"expression nested deeper than {MAX_DEPTH} levels", self.lcs[pos],
                           hint="split it into named intermediate statements")

    # -- statements ----------------------------------------------------------------
    def block(self, pos: int, closer: str) -> tuple[int, tuple, tuple]:
        """The statements up to the token `closer` (not read): (pos, statements, reads),
        reads being per statement the Name nodes it reads, in textual order (those of a
        nested block among them: they are read off ``self.names`` as they are made)."""
        kinds, names, statement = self.kinds, self.names, self.statement
        statements, reads = [], []
        while True:
            k = kinds[pos]
            if k == "newline" or k == ";":
                pos += 1
            elif k == closer:
                return pos, tuple(statements), tuple(reads)
            else:
                mark = len(names)
                pos, node = statement(pos)
                statements.append(node)
                reads.append(tuple(names[mark:]))
                k = kinds[pos]
                if not (k == "newline" or k == closer or k == ";"):
                    self.statement_not_ended(pos)

    def statement_not_ended(self, pos: int):
        hint = None
        if self.kinds[pos] in ("name", "num"):
            hint = "separate statements with a newline or ';', or add an operator"
        self.fail(pos, "expected end of statement", hint)

    def statement(self, pos: int):
        """One statement, chosen by its first token or two."""
        if self.kinds[pos] == "name":
            assignment = _ASSIGNMENTS.get(self.kinds[pos + 1])
            if assignment is not None:  # NAME = ..., most statements
                return assignment(self, pos)
        rule = _STATEMENTS.get(self.texts[pos])
        if rule is not None:
            return rule(self, pos)
        return self.expression_statement(pos)

    def assignment(self, pos: int):
        end, value = self.expr(pos + 2, 0, 1)
        return end, _new(Assign, (self.texts[pos], value, self.lcs[pos]))

    def expression_statement(self, pos: int):
        end, value = self.expr(pos, 0, 1)
        return end, _new(ExprStmt, (value, self.lcs[pos]))

    def input_statement(self, pos: int):
        """``input`` and its declarations; ``input`` not followed by a name is a variable."""
        if self.kinds[pos + 1] != "name":
            return self.expression_statement(pos)
        decls = []
        end = pos
        while True:
            end, decl = self.input_decl(end + 1)
            decls.append(decl)
            if self.kinds[end] != ",":
                return end, Inputs(tuple(decls), self.lcs[pos])

    def input_decl(self, pos: int):
        """``NAME``, then perhaps a shape ``[3, 4]``, then perhaps ``= default``."""
        kinds = self.kinds
        if kinds[pos] != "name":
            self.fail(pos, "expected an input name")
        end, shape, default = pos + 1, None, None
        if kinds[end] == "[":
            end, shape = self.comma_list(end + 1, "]", _Parser.dimension, "between dimensions", 0)
        if kinds[end] == "=":
            end, default = self.expr(end + 1, 0, 1)
        return end, InputDecl(self.texts[pos], shape, default, self.lcs[pos])

    def dimension(self, pos: int, depth: int):
        """One dimension of an input's shape: an integer literal."""
        text = self.texts[pos]
        if self.kinds[pos] != "num" or not Num(0, text, None).is_int:
            self.fail(pos, "expected an integer dimension", "shapes are integer literals: input W[3, 4]")
        return pos + 1, int(text)

    # -- expressions -----------------------------------------------------------------
    def expr(self, pos: int, min_bp: int, depth: int):
        """An expression whose infix operators all bind tighter than min_bp: an operand,
        then the operators after it, in a loop.  Numbers and names, most operands, are
        read here (a call saved on each); _PREFIX has the rules of the other operands."""
        if depth > MAX_DEPTH:
            self.too_deep(pos)
        kinds = self.kinds
        k = kinds[pos]
        if k == "num":
            text = self.texts[pos]
            left = _new(Num, (float(text), text, self.lcs[pos]))
            pos += 1
        elif k == "name":
            text = self.texts[pos]
            if text in _BOOLS:
                left = _new(Bool, (_BOOLS[text], self.lcs[pos]))
                pos += 1
            elif kinds[pos + 1] == "(":
                pos, left = self.call(pos, depth)
            else:
                left = _new(Name, (text, self.lcs[pos]))
                self.note_read(left)
                pos += 1
        else:
            prefix = _PREFIX.get(k)
            if prefix is None:
                self.fail(pos, "expected an expression")
            pos, left = prefix(self, pos, depth)
        chained = 0
        while True:
            at = pos
            bp = _AFTER_OPERAND.get(kinds[at])  # None for names, numbers, newlines, ')' ...
            if bp is None:
                return pos, left
            lbp, rbp, op = bp
            if lbp <= min_bp:
                return pos, left
            if rbp is None:  # not a binary operator: op is the rule (x[i], ...)
                chained += 1  # x[..][..]... nests like brackets do
                if depth + chained > MAX_DEPTH:
                    self.too_deep(at)
                pos, left = op(self, at, left, depth)
                continue
            pos, right = self.expr(at + 1, rbp, depth + 1)
            left = _new(Binary, (op, left, right, self.lcs[at]))
            if lbp == _COMPARISON_BP and kinds[pos] in _COMPARISON_SET:
                raise SyntaxError_("comparisons cannot be chained", self.lcs[pos],
                                   hint="combine masks with '*', e.g. (a < b) * (b < c)")

    def element(self, pos: int, depth: int):
        """An expression inside brackets, one level deeper."""
        return self.expr(pos, 0, depth + 1)

    def comma_list(self, pos: int, closer: str, item, between: str, depth: int) -> tuple[int, tuple]:
        """``item, item, ...`` up to `closer` (a trailing comma allowed): (pos past the closer, items)."""
        kinds = self.kinds
        items = []
        while kinds[pos] != closer:
            pos, node = item(self, pos, depth)
            items.append(node)
            if kinds[pos] != closer:
                pos = self.expect(pos, ",", between)
        return pos + 1, tuple(items)

    # -- operands other than numbers and names (the table _PREFIX) --------------------
    def unary(self, pos: int, depth: int):
        end, operand = self.expr(pos + 1, _PREFIX_BP, depth + 1)
        return end, _new(Unary, (self.kinds[pos], operand, self.lcs[pos]))

    def parenthesized(self, pos: int, depth: int):
        """``( )``, ``(expr)``, or a tuple ``(a, b, ...)`` (a trailing comma allowed)."""
        kinds = self.kinds
        if kinds[pos + 1] == ")":
            return pos + 2, TupleLit((), self.lcs[pos])
        end, first = self.expr(pos + 1, 0, depth + 1)
        if kinds[end] == ")":
            return end + 1, first
        items = [first]
        while kinds[end] == ",":
            end += 1
            if kinds[end] == ")":
                break
            end, item = self.expr(end, 0, depth + 1)
            items.append(item)
        end = self.expect(end, ")", "to close '('")
        return end, TupleLit(tuple(items), self.lcs[pos])

    def array(self, pos: int, depth: int):
        end, items = self.comma_list(pos + 1, "]", _Parser.element, "between array elements", depth)
        return end, ArrayLit(items, self.lcs[pos])

    def call(self, pos: int, depth: int):
        """``NAME(arg, ..., key=value, ...)``: pos is the name's token, a '(' follows it."""
        kinds, texts, lcs = self.kinds, self.texts, self.lcs
        args, kwargs = [], []
        end = pos + 2
        while kinds[end] != ")":
            at = end
            if kinds[at] == "name" and kinds[at + 1] == "=":
                key = texts[at]
                if any(kw.name == key for kw in kwargs):
                    raise SyntaxError_(f"keyword argument '{key}' given twice", lcs[at])
                end, value = self.expr(at + 2, 0, depth + 1)
                kwargs.append(Keyword(key, value, lcs[at]))
            else:
                if kwargs:
                    raise SyntaxError_("positional argument after a keyword argument", lcs[at])
                end, value = self.expr(at, 0, depth + 1)
                args.append(value)
            if kinds[end] != ")":
                end = self.expect(end, ",", "between arguments")
        return end + 1, _new(Call, (texts[pos], tuple(args), tuple(kwargs), lcs[pos]))

    # -- after an operand (the table _POSTFIX) ---------------------------------------
    def index(self, pos: int, left, depth: int):
        """``left[i, a:b:c, ...]``: pos is the '['."""
        end, items = self.comma_list(pos + 1, "]", _Parser.index_item, "between indices", depth)
        if not items:
            raise SyntaxError_("empty index", self.lcs[pos])
        return end, Index(left, items, self.lcs[pos])

    def index_item(self, pos: int, depth: int):
        """An index, or a slice ``start:stop:step`` with each part optional."""
        kinds = self.kinds
        start = stop = step = None
        end = pos
        if kinds[pos] != ":":
            end, start = self.expr(pos, 0, depth + 1)
            if kinds[end] != ":":
                return end, start
        end += 1
        if kinds[end] not in _NO_STOP:
            end, stop = self.expr(end, 0, depth + 1)
        if kinds[end] == ":":
            end += 1
            if kinds[end] not in _NO_STEP:
                end, step = self.expr(end, 0, depth + 1)
        return end, Slice(start, stop, step, self.lcs[pos])

    def call_on_value(self, pos: int, left, depth: int):
        raise SyntaxError_("only named functions can be called", self.lcs[pos])


# The dispatch tables of the grammar (after the class: they name its rules).
_STATEMENTS = {"input": _Parser.input_statement}  # a leading keyword: rule(self, pos)
_ASSIGNMENTS = {"=": _Parser.assignment}  # the token after a leading name: rule(self, pos)
_PREFIX = {  # an operand's first token (but numbers and names): rule(self, pos, depth)
    "-": _Parser.unary, "+": _Parser.unary, "(": _Parser.parenthesized, "[": _Parser.array,
}
_POSTFIX = {  # a token after an operand, not a binary operator: (lbp, None, rule(self, pos, left, depth))
    "[": (_POSTFIX_BP, None, _Parser.index), "(": (_POSTFIX_BP, None, _Parser.call_on_value),
}
_AFTER_OPERAND = {**_INFIX, **_POSTFIX}  # what expr() looks up after each operand: one lookup


def parse(text: str, label: str = "<expr>") -> Program:
    """Parse program text into a :class:`Program`; raises SyntaxError_ with a position."""
    source = Source(text, label)
    try:
        statements, reads = _Parser(text).program()
        return Program(statements, source, reads)
    except SyntaxError_ as err:
        raise err.located(source)


def parse_expression(text: str, label: str = "<expr>"):
    """Parse a single expression (used for --at values, cotangents, tangents)."""
    source = Source(text, label)
    try:
        return _Parser(text).expression()
    except SyntaxError_ as err:
        raise err.located(source)
