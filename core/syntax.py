"""Tokens -> syntax tree, every node with its source position.

The lexer (core/lexer.py) turns the text into three flat token lists; the
parser below reads them.  It is a recursive-descent parser with one method of
:class:`_Parser` per grammar rule, in the manner of tomli: a rule takes the
index of its first token and returns ``(pos, node)``, ``pos`` being the index
just past what it read.  Expressions are parsed Pratt-style, the binding powers
being data (``_INFIX``).  Left-associative chains (``x + x + ...``) are built in
a loop, so their length never touches Python's recursion limit; only real
nesting (brackets, prefix operators, ``^`` chains, blocks) recurses, and it is
capped at :data:`MAX_DEPTH` levels with a clear error.

Grammar (a newline or ``;`` ends a statement; rule names are method names)::

    program      = block up to the end of input
    block        = { statement (newline | ';') }
    body         = '{' block '}'                    (newlines may come before the '{')
    statement    = assignment | aug_assignment | destructuring | input_statement
                 | if_statement | for_statement | while_statement | def_statement
                 | return_statement | 'break' | 'continue' | expression_statement
    assignment   = NAME '=' expr
    aug_assignment = NAME ('+=' | '-=' | '*=' | '/=') expr
    destructuring = NAME ',' [NAME {',' NAME} [',']] '=' expr
    expression_statement = expr                     (or NAME[INDEX] ('=' | '+=') expr)
    input_statement = 'input' input_decl {',' input_decl}      ('input' then a name)
    input_decl   = NAME ['[' dimension {',' dimension} ']'] ['=' expr]
    if_statement = 'if' branch {'elif' branch} ['else' body]   (newlines may come before
    branch       = expr body                                    'elif' and 'else')
    for_statement = 'for' NAME 'in' expr body
    while_statement = 'while' expr body
    def_statement = 'def' NAME '(' [parameter {',' parameter} [',']] ')' ('=' expr | body)
    parameter    = NAME ['=' expr]
    return_statement = 'return' [expr {',' expr}]
    expr         = operand { INFIX expr | postfix }
    operand      = NUM | NAME | STRING | 'None' | call | unary | parenthesized | array
    postfix      = index | '(' arguments ')' | 'if' expr 'else' expr

Where a statement may stand is checked as it is parsed, from a :class:`_Context`
passed down the blocks: ``def`` and ``input`` at the top level only, ``return``
inside a ``def``, ``break`` and ``continue`` inside a loop.

To add a statement form: write a method ``rule(self, pos, ctx) -> (pos, node)``
and key it by its leading keyword in ``_STATEMENTS`` (reserve the keyword in
lexer.RESERVED, so that it gets a token kind of its own).  A ``{ ... }`` body is
``self.body(pos, ctx, where)``.  A form that starts with a name and an operator
(``x += e``) is keyed by that operator in ``_ASSIGNMENTS`` instead.  Node classes
are below.

To add an operator: give it a token in the lexer, then one entry in a table.
A binary operator is an entry in ``_INFIX`` (its binding powers and the Binary
op it builds); a prefix one a method in ``_PREFIX``; one that builds more than
a Binary (``x[i]``, ``f(a)(b)``, ``a if c else b``) a method ``rule(self, pos,
left, depth)`` in ``_POSTFIX``, with its left binding power.  Words used as
operators (``and``, ``not``, ``if``) are reserved words: their token kind is their
text, as an operator's is.
"""
# (No `from __future__ import annotations` here: typing.NamedTuple would compile each node
# field's annotation from its string, 5 M instructions of every start-up.)
import math
from typing import NamedTuple

from .errors import Source, SyntaxError_, to_pos
from .lexer import RESERVED, Token, scan, tokenize

__all__ = ["Apply", "ArrayLit", "Assign", "AugAssign", "Binary", "Bool", "Branch", "Break", "Call", "COMPARISONS",
           "CondExpr", "Continue", "Def", "Destructure", "EllipsisLit", "ExprStmt", "For", "If", "Index",
           "IndexAssign", "InputDecl", "Inputs", "Keyword", "MAX_DEPTH", "Name", "NoneLit", "Num", "Param",
           "Program", "RESERVED", "Return", "Slice", "Str", "Token", "TupleLit", "Unary", "While", "parse",
           "parse_expression", "tokenize", "walk_names"]

#: Deepest nesting of brackets, prefix operators and ``^`` the parser accepts in an
#: expression, and of ``{ }`` blocks in a program.
MAX_DEPTH = 100

_new = tuple.__new__  # the nodes without their Python-level __new__: hot paths

# --------------------------------------------------------------------------
# Syntax tree
# --------------------------------------------------------------------------

#: Every node's last field is its location (see errors.to_loc): an int, which the
#: lexer makes cheaply for every token; ``node.pos`` is its Pos.  A *body* is a
#: tuple of statements.
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


class Str(NamedTuple):
    value: str  # without its quotes
    loc: int
    pos = _POS


class NoneLit(NamedTuple):
    loc: int
    pos = _POS


class EllipsisLit(NamedTuple):  # `...`, in an index only
    loc: int
    pos = _POS


class Unary(NamedTuple):
    op: str  # "-", "+" or "not"
    operand: object
    loc: int
    pos = _POS


class Binary(NamedTuple):
    op: str  # + - * / // % @ ^, comparisons, "and", "or"
    left: object
    right: object
    loc: int  # the operator's location
    pos = _POS


class CondExpr(NamedTuple):
    """``then if cond else orelse``."""

    then: object
    cond: object
    orelse: object
    cond_loc: int  # the condition's first token (what a path-change flag names)
    loc: int  # the 'if'
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


class Apply(NamedTuple):
    """A call of the value of a call: ``grad(f)(a, b)``."""

    callee: object  # the Call, `grad(f)`
    args: tuple
    kwargs: tuple  # of Keyword
    loc: int  # the second '('
    pos = _POS


class Slice(NamedTuple):
    start: object  # expression or None
    stop: object
    step: object
    loc: int
    pos = _POS


class Index(NamedTuple):
    value: object
    items: tuple  # expressions, Slices, NoneLit and EllipsisLit
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


class AugAssign(NamedTuple):
    """``name op= value``."""

    name: str
    op: str  # "+", "-", "*" or "/"
    value: object
    loc: int  # the name's
    pos = _POS


class IndexAssign(NamedTuple):
    """``name[items] = value`` and ``name[items] += value``: a functional update."""

    name: str
    items: tuple  # as Index.items
    op: str  # "=" or "+="
    value: object
    loc: int  # the name's
    pos = _POS


class Destructure(NamedTuple):
    """``a, b = value`` (``a, = value``: names is ("a",))."""

    names: tuple  # of str
    value: object
    loc: int  # the first name's
    pos = _POS


class ExprStmt(NamedTuple):
    value: object
    loc: int
    pos = _POS


class Branch(NamedTuple):
    """``cond { body }``: the if's or an elif's."""

    cond: object
    body: tuple
    loc: int  # the condition's first token (what a path-change flag names)
    pos = _POS


class If(NamedTuple):
    branches: tuple  # of Branch: the if's, then each elif's
    orelse: tuple | None  # the else body, or None
    loc: int  # the 'if'
    pos = _POS


class For(NamedTuple):
    var: str
    iterable: object  # a Call of `range` (integers), or any expression (its first axis)
    body: tuple
    loc: int  # the 'for'
    pos = _POS


class While(NamedTuple):
    cond: object
    body: tuple
    cond_loc: int  # the condition's first token
    loc: int  # the 'while'
    pos = _POS


class Break(NamedTuple):
    loc: int
    pos = _POS


class Continue(NamedTuple):
    loc: int
    pos = _POS


class Param(NamedTuple):
    name: str
    default: object  # expression or None
    loc: int
    pos = _POS


class Def(NamedTuple):
    name: str
    params: tuple  # of Param
    body: tuple  # `def f(x) = e` has the body (Return((e,), e's location),)
    loc: int  # the 'def'
    pos = _POS


class Return(NamedTuple):
    values: tuple  # expressions; empty for a bare `return`
    loc: int
    pos = _POS


class Program(NamedTuple):
    """A parsed program: its statements and the source they came from."""

    statements: tuple
    source: Source = Source("")
    #: The Name nodes the program's text reads, in textual order (what ``find_inputs`` needs;
    #: the parser notes them as it makes them, and :func:`walk_names` finds the same): for a
    #: compound statement (if, for, while, def), every Name read anywhere in it, whatever the
    #: scope; ``a += e`` and ``a[i] = e`` read their target first.  Parameters, loop variables
    #: and function names are not reads.  One flat tuple: a long program makes no tuple per
    #: statement, and "is every name read known?" is one pass in C.
    names: tuple = ()
    #: Per statement, the index in ``names`` of its first read (see :attr:`reads`).  Empty
    #: when not known.
    marks: tuple = ()
    #: (text, location) of each number literal too large for a float64 (``1e400``), which reads
    #: as inf: a run warns of each (a typo, most likely; the constant ``inf`` says it on purpose).
    too_large: tuple = ()

    @property
    def reads(self) -> tuple:
        """Per statement, the Name nodes it reads (a slice of ``names``); empty when not known."""
        names, ends = self.names, (*self.marks[1:], len(self.names))
        return tuple(names[start:end] for start, end in zip(self.marks, ends))


COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")


def walk_names(node):
    """The Name nodes that `node` reads (any node, or a tuple of them such as a body), in
    textual order, without recursion: what Program.reads notes for a statement.

    A node's fields are in textual order (``then if cond else orelse`` included), so a
    plain walk of them is one; ``a += e`` and ``a[i] = e`` read their target first, a
    Name of the target's text and location."""
    stack = [node]
    push, pop = stack.extend, stack.pop
    while stack:
        n = pop()
        cls = n.__class__
        if cls is Name:
            yield n
        elif isinstance(n, tuple):  # a node (its fields) or a tuple of nodes
            if cls is AugAssign or cls is IndexAssign:
                yield Name(n.name, n.loc)
            push(reversed(n))

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
# And `not a < b and c`: prefix 'not' parses its operand with min_bp 8, which
#   '<' (lbp 10) joins and 'and' (lbp 6) does not: (not (a < b)) and c.
_COND_BP = 2  # `a if c else b`: a postfix rule (see conditional), right-associative
_NOT_BP = 8  # the operand of a prefix `not`: tighter than and/or, looser than comparisons
_COMPARISON_BP = 10  # no operator chains after a comparison: `a < b < c` is an error
_INFIX = {  # operator: (lbp, rbp, the Binary op it builds)
    "or": (4, 5, "or"), "and": (6, 7, "and"),                         # logical, left
    **{op: (_COMPARISON_BP, 11, op) for op in COMPARISONS},          # non-associative
    "+": (20, 21, "+"), "-": (20, 21, "-"),                          # additive, left
    **{op: (30, 31, op) for op in ("*", "/", "//", "%", "@")},       # multiplicative, left
    "^": (50, 49, "^"), "**": (50, 49, "^"),                         # power, right
}
_PREFIX_BP = 40  # unary - and +
_POSTFIX_BP = 60  # calls and indexing
_COMPARISON_SET = frozenset(COMPARISONS)
_BOOLS = {"true": True, "True": True, "false": False, "False": False}
_FOUND = {"eof": "end of input", "newline": "end of line"}
_NO_STOP = (":", ",", "]")  # after a slice's first ':', the stop is left out
_NO_STEP = (",", "]")  # after its second ':', the step is
_STATEMENT_ENDS = frozenset(("newline", ";", "}", "eof"))
_AUGMENTED = ("+=", "-=", "*=", "/=")
_UPDATES = frozenset(("=", *_AUGMENTED))  # what may follow NAME[INDEX] in a statement
_TARGET_NEXT = frozenset(("=", *_AUGMENTED, ","))  # after a reserved word, these say it is a target
_RESERVED_HINT = "pick another name"
_BLOCK_HINT = "a block is written { ... }"


class _Context(NamedTuple):
    """Where the statements of a block stand: what they may be."""

    in_def: bool  # inside a def's body: `return` allowed
    in_loop: bool  # inside a loop's body (not across a def): `break` and `continue` allowed
    depth: int  # the blocks open around them (0: the top level)


_TOP = _Context(False, False, 0)


class _Floats(dict):
    """Number texts and their values: ``float(text)`` costs as much as making a node,
    and a long program repeats its constants."""

    def __init__(self):
        super().__init__()
        self.too_large: list[str] = []  # the texts that read as inf (1e400): a warning names them

    def __missing__(self, text: str) -> float:
        value = self[text] = float(text)
        if value == math.inf:
            self.too_large.append(text)
        return value


class _Parser:
    """The grammar rules, over the tokens of one text: ``_Parser(text).program()``.

    A rule ``rule(self, pos, ...)`` reads from token ``pos`` on and returns
    ``(pos, node)``, pos now just past what it read; the statement rules also take
    ``ctx``, the :class:`_Context` of their block, and the expression rules
    ``depth``, the number of ``expr`` calls active (the nesting cap).  The object
    holds the token lists and the Name nodes made so far, and no bound method of
    itself: it forms no reference cycle, and is freed as soon as parsing ends.
    ``kinds[pos] == "("`` tests for an operator or a reserved word: its kind is its text.
    """

    def __init__(self, text: str):
        self.kinds, self.texts, self.lcs = scan(text)
        self.names: list = []  # every Name node made, in textual order: see Program.names
        self.note_read = self.names.append  # a method of the list, not of self: no cycle
        self.floats = _Floats()  # a number's text -> its value: each text converted once a parse

    # -- the two entry points ------------------------------------------------------
    def program(self) -> tuple[tuple, tuple, tuple]:
        """The statements of the text, the Name nodes it reads, and per statement the index
        of its first read among them (see Program.names and Program.marks)."""
        _, statements, marks = self.block(0, "eof", _TOP)
        return statements, tuple(self.names), marks

    def too_large(self) -> tuple:
        """(text, location) of each number token that reads as inf, in textual order."""
        texts = self.floats.too_large
        if not texts:
            return ()
        return tuple((text, loc) for kind, text, loc in zip(self.kinds, self.texts, self.lcs)
                     if kind == "num" and text in texts)

    def expression(self):
        """The text as one expression (blank lines around it allowed)."""
        kinds = self.kinds
        pos = self.skip_newlines(0)
        pos, node = self.expr(pos, 0, 1)
        pos = self.skip_newlines(pos)
        if kinds[pos] != "eof":
            self.fail(pos, "expected end of value")
        return node

    # -- errors ------------------------------------------------------------------
    def fail(self, pos: int, message: str, hint: str | None = None):
        kind, text = self.kinds[pos], self.texts[pos]
        found = _FOUND.get(kind) or (f"the string {text}" if kind == "str" else f"'{text}'")
        raise SyntaxError_(f"{message}, found {found}", self.lcs[pos], hint=hint)

    def expect(self, pos: int, text: str, what: str | None = None) -> int:
        """The index past token `text`, which must be at pos."""
        if self.kinds[pos] != text:
            self.fail(pos, f"expected '{text}'" + (f" {what}" if what else ""))
        return pos + 1

    def too_deep(self, pos: int):
        raise SyntaxError_(f"expression nested deeper than {MAX_DEPTH} levels", self.lcs[pos],
                           hint="split it into named intermediate statements")

    def reserved(self, pos: int, hint: str = _RESERVED_HINT):
        """The word at pos is reserved, and was written where a name goes."""
        raise SyntaxError_(f"'{self.texts[pos]}' is a reserved word", self.lcs[pos], hint=hint)

    def misplaced(self, pos: int, message: str, hint: str):
        """The statement at pos may not stand where it is."""
        raise SyntaxError_(message, self.lcs[pos], hint=hint)

    def skip_newlines(self, pos: int) -> int:
        kinds = self.kinds
        while kinds[pos] == "newline":
            pos += 1
        return pos

    # -- statements ----------------------------------------------------------------
    def block(self, pos: int, closer: str, ctx: _Context) -> tuple[int, tuple, tuple]:
        """The statements up to the token `closer` (not read): (pos, statements, marks),
        marks being per statement the index in ``self.names`` of the first Name it reads
        (the Name nodes are noted there as they are made, a nested block's among them)."""
        kinds, names, assignments = self.kinds, self.names, _ASSIGNMENTS
        statements, marks = [], []
        while True:
            k = kinds[pos]
            if k == "newline" or k == ";":
                pos += 1
                continue
            if k == closer:
                return pos, tuple(statements), tuple(marks)
            marks.append(len(names))
            after = kinds[pos + 1]
            if k == "name" and after == "=":  # NAME = e, most statements: the rule assignment, read here
                at = pos
                pos, value = self.expr(pos + 2, 0, 1)
                node = _new(Assign, (self.texts[at], value, self.lcs[at]))
            else:
                rule = assignments.get(after) if k == "name" else None  # NAME += e, a, b = e
                if rule is None:
                    rule = self.statement_rule(pos)
                pos, node = rule(self, pos, ctx)  # (a call of the rule from here: one frame less per block)
            statements.append(node)
            k = kinds[pos]
            if k == "newline" or k == ";":  # (the statement's end, read here: a turn of the loop less)
                pos += 1
            elif k != closer:
                self.statement_not_ended(pos)

    def statement_not_ended(self, pos: int):
        hint = None
        if self.kinds[pos] in ("name", "num"):
            hint = "separate statements with a newline or ';', or add an operator"
        self.fail(pos, "expected end of statement", hint)

    def statement_rule(self, pos: int):
        """The rule of the statement at pos, chosen by its first token (block() has
        chosen the assignments already, by their second)."""
        k = self.kinds[pos]
        if k in RESERVED and self.kinds[pos + 1] in _TARGET_NEXT:  # `for = 1`, `in += 1`
            self.reserved(pos)
        return _STATEMENTS.get(self.texts[pos], _Parser.expression_statement)  # a keyword, or `input`

    def body(self, pos: int, ctx: _Context, where: str, hint: str = _BLOCK_HINT) -> tuple[int, tuple]:
        """``{ statements }`` (newlines may come before the '{'), one block deeper than
        ctx: (pos past the '}', the statements).  `where` completes "expected '{' ..."."""
        kinds = self.kinds
        at = self.skip_newlines(pos)
        if kinds[at] != "{":  # (named where it was due: at the end of the line, if it ends there)
            if kinds[pos] == ":" and hint is _BLOCK_HINT:
                hint = "blocks are written in { }, not after ':'"
            self.fail(pos, f"expected '{{' {where}", hint)
        if ctx.depth >= MAX_DEPTH:
            raise SyntaxError_(f"blocks nested deeper than {MAX_DEPTH} levels", self.lcs[at],
                               hint="move the inner part into a function (def)")
        end, statements, _ = self.block(at + 1, "}", _Context(ctx.in_def, ctx.in_loop, ctx.depth + 1))
        return end + 1, statements

    # -- assignments (the table _ASSIGNMENTS: NAME, then the token each is keyed by) ----------
    def assignment(self, pos: int, ctx: _Context):
        end, value = self.expr(pos + 2, 0, 1)
        return end, _new(Assign, (self.texts[pos], value, self.lcs[pos]))

    def aug_assignment(self, pos: int, ctx: _Context):
        """``NAME += e`` (and -=, *=, /=): it reads NAME too."""
        self.note_read(_new(Name, (self.texts[pos], self.lcs[pos])))
        end, value = self.expr(pos + 2, 0, 1)
        return end, AugAssign(self.texts[pos], self.kinds[pos + 1][0], value, self.lcs[pos])

    def destructuring(self, pos: int, ctx: _Context):
        """``a, b = e``, ``a, = e``; pos is the first name, a ',' follows it.  Anything
        else that starts so is an expression statement (whose error names the ',')."""
        kinds = self.kinds
        at = pos + 1
        while kinds[at] == ",":  # look ahead: names and commas up to an '='
            at += 1
            if kinds[at] == "=":
                break
            if kinds[at] != "name" and kinds[at] not in RESERVED:
                return self.expression_statement(pos, ctx)
            at += 1
        if kinds[at] != "=":
            return self.expression_statement(pos, ctx)
        names = tuple(self.new_name(k, "a name") for k in range(pos, at, 2))
        end, value = self.expr(at + 1, 0, 1)
        return end, Destructure(names, value, self.lcs[pos])

    def expression_statement(self, pos: int, ctx: _Context):
        """A bare expression, or, when an '=' or '+=' follows it, ``NAME[INDEX] = e``."""
        end, value = self.expr(pos, 0, 1)
        if self.kinds[end] in _UPDATES and type(value) is Index:
            return self.index_assignment(pos, end, value)
        return end, _new(ExprStmt, (value, self.lcs[pos]))  # (`f(x) = 1`: the block names the '=')

    def index_assignment(self, pos: int, at: int, target: Index):
        """``NAME[INDEX] = e`` or ``+= e``: target is NAME[INDEX], at its operator."""
        if type(target.value) is not Name:
            hint = "index once: x[i, j] = ..." if type(target.value) is Index else "assign to NAME[INDEX]"
            raise SyntaxError_("only a name's elements can be assigned", self.lcs[pos], hint=hint)
        op, name = self.kinds[at], target.value.id
        if op not in ("=", "+="):
            raise SyntaxError_(f"'{op}' cannot update elements: only '=' and '+=' can", self.lcs[at],
                               hint=f"write {name}[...] = {name}[...] {op[0]} (...)")
        end, value = self.expr(at + 1, 0, 1)
        return end, IndexAssign(name, target.items, op, value, self.lcs[pos])

    def new_name(self, pos: int, what: str) -> str:
        """The name that a statement binds at pos (a parameter, a loop variable...)."""
        kind, text = self.kinds[pos], self.texts[pos]
        if kind in RESERVED:
            self.reserved(pos)
        if kind != "name":
            self.fail(pos, f"expected {what}")
        if text in _BOOLS:
            raise SyntaxError_(f"'{text}' is a literal, not a name", self.lcs[pos], hint=_RESERVED_HINT)
        return text

    # -- statements that start with a keyword (the table _STATEMENTS) -----------------
    def input_statement(self, pos: int, ctx: _Context):
        """``input`` and its declarations; ``input`` not followed by a name is a variable."""
        k = self.kinds[pos + 1]
        if k != "name":
            if k in RESERVED and k not in _AFTER_OPERAND:  # `input def`, not `input if c else 0`
                self.reserved(pos + 1)
            return self.expression_statement(pos, ctx)
        if ctx.depth:
            self.misplaced(pos, "'input' is allowed only at the top level",
                           "declare inputs at the top level, before the blocks that use them")
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
            if kinds[pos] in RESERVED:
                self.reserved(pos)
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

    def if_statement(self, pos: int, ctx: _Context):
        """``if COND { } elif COND { } else { }``: pos is the 'if'."""
        kinds, branches, orelse = self.kinds, [], None
        end = pos
        while True:  # end is at the 'if' or an 'elif'
            end, branch = self.branch(end + 1, ctx)
            branches.append(branch)
            after = self.skip_newlines(end)  # `}` and the next keyword may be on different lines
            if kinds[after] != "elif":
                break
            end = after
        if kinds[after] == "else":
            hint = "write 'elif COND { ... }'" if kinds[after + 1] == "if" else _BLOCK_HINT
            end, orelse = self.body(after + 1, ctx, "after 'else'", hint)
            after = self.skip_newlines(end)
            if kinds[after] in ("elif", "else"):
                self.misplaced(after, f"'{kinds[after]}' after 'else'", "'else' comes last in an if")
        return end, If(tuple(branches), orelse, self.lcs[pos])

    def branch(self, pos: int, ctx: _Context):
        """``COND { body }``: pos is the condition's first token."""
        end, cond = self.condition(pos)
        end, body = self.body(end, ctx, "after the condition")
        return end, Branch(cond, body, self.lcs[pos])

    def condition(self, pos: int):
        if self.kinds[pos] == "{":
            self.fail(pos, "expected a condition")
        return self.expr(pos, 0, 1)

    def bare_block(self, pos: int, ctx: _Context):
        """``{`` where a statement starts: a block out of place if statements follow it,
        else a literal of another language (``{1}``), which the expression rules name."""
        kinds = self.kinds
        k = kinds[pos + 1]
        if k in ("newline", "}") or k in _STATEMENTS or kinds[pos + 2] in _ASSIGNMENTS:
            self.fail(pos, "expected a statement", "a block { ... } follows if, elif, else, for, while or def")
        return self.expression_statement(pos, ctx)

    def stray_branch(self, pos: int, ctx: _Context):
        """``elif`` or ``else`` where a statement starts: no if before it."""
        word = self.texts[pos]
        self.misplaced(pos, f"'{word}' without an 'if'", f"'{word}' follows the '}}' of an if's block")

    def for_statement(self, pos: int, ctx: _Context):
        """``for NAME in EXPR { body }``: pos is the 'for'."""
        var = self.new_name(pos + 1, "a loop variable")
        end = self.expect(pos + 2, "in", "after the loop variable")
        end, iterable = self.expr(end, 0, 1)
        end, body = self.body(end, ctx._replace(in_loop=True), "after the loop's range")
        return end, For(var, iterable, body, self.lcs[pos])

    def while_statement(self, pos: int, ctx: _Context):
        """``while COND { body }``: pos is the 'while'."""
        end, cond = self.condition(pos + 1)
        end, body = self.body(end, ctx._replace(in_loop=True), "after the condition")
        return end, While(cond, body, self.lcs[pos + 1], self.lcs[pos])

    def loop_jump(self, pos: int, ctx: _Context):
        """``break`` or ``continue``, inside a loop."""
        word = self.texts[pos]
        if not ctx.in_loop:
            self.misplaced(pos, f"'{word}' outside a loop", f"'{word}' goes inside the body of a for or while loop")
        return pos + 1, (Break if word == "break" else Continue)(self.lcs[pos])

    def return_statement(self, pos: int, ctx: _Context):
        """``return``, ``return e`` or ``return e1, e2, ...``, inside a def's body."""
        if not ctx.in_def:
            self.misplaced(pos, "'return' outside a function", "'return' goes inside a def's body: "
                                                                 "def f(x) { ...; return ... }")
        values = []
        end = pos + 1
        if self.kinds[end] not in _STATEMENT_ENDS:
            end, value = self.expr(end, 0, 1)
            values.append(value)
            while self.kinds[end] == ",":
                end, value = self.expr(end + 1, 0, 1)
                values.append(value)
        return end, Return(tuple(values), self.lcs[pos])

    def def_statement(self, pos: int, ctx: _Context):
        """``def NAME(params) = e`` or ``def NAME(params) { body }``, at the top level."""
        if ctx.depth:
            self.misplaced(pos, "'def' is allowed only at the top level",
                           "move it out of the block: a function is visible everywhere in the program")
        name = self.new_name(pos + 1, "a function name")
        end = self.expect(pos + 2, "(", "after the function name")
        end, params = self.comma_list(end, ")", _Parser.parameter, "between parameters", 0)
        self.check_parameters(params)
        if self.kinds[end] == "=":
            at = end + 1
            end, value = self.expr(at, 0, 1)
            body = (Return((value,), self.lcs[at]),)
        else:
            end, body = self.body(end, _Context(True, False, 0), "or '=' after the parameters",
                                  "def f(x) = x^2, or def f(x) { ...; return ... }")
        return end, Def(name, params, body, self.lcs[pos])

    def parameter(self, pos: int, depth: int):
        """``NAME`` or ``NAME = default``."""
        name = self.new_name(pos, "a parameter name")
        if self.kinds[pos + 1] != "=":
            return pos + 1, Param(name, None, self.lcs[pos])
        end, default = self.expr(pos + 2, 0, depth + 1)
        return end, Param(name, default, self.lcs[pos])

    @staticmethod
    def check_parameters(params: tuple):
        """Each name once, and the parameters with defaults last (as Python has them)."""
        seen, defaulted = set(), None
        for p in params:
            if p.name in seen:
                raise SyntaxError_(f"parameter '{p.name}' appears twice", p.loc,
                                   hint="give each parameter its own name")
            seen.add(p.name)
            if p.default is not None:
                defaulted = p
            elif defaulted is not None:
                raise SyntaxError_(f"parameter '{p.name}' has no default but follows '{defaulted.name}', which has one",
                                   p.loc, hint="put the parameters with defaults last")

    # -- expressions -----------------------------------------------------------------
    def expr(self, pos: int, min_bp: int, depth: int):
        """An expression whose infix operators all bind tighter than min_bp: an operand, then the
        operators after it, in a loop.  Numbers, names, calls, and a lone number or name right of an
        operator are read here (no frame each); _PREFIX has the rules of the other operands."""
        if depth > MAX_DEPTH:
            self.too_deep(pos)
        kinds, lcs, after_operand = self.kinds, self.lcs, _AFTER_OPERAND
        k = kinds[pos]
        if k == "num":
            text = self.texts[pos]
            left = _new(Num, (self.floats[text], text, lcs[pos]))
            pos += 1
        elif k == "name":
            text = self.texts[pos]
            if text in _BOOLS:
                left = _new(Bool, (_BOOLS[text], lcs[pos]))
                pos += 1
            elif kinds[pos + 1] == "(":  # a call: NAME(arg, ..., key=value, ...)
                k = kinds[pos + 2]
                if (k == "name" or k == "num") and kinds[pos + 3] == ")" and depth < MAX_DEPTH:
                    # f(x), f(2): one lone argument, made here (the lexer matched the brackets)
                    arg = self.texts[pos + 2]
                    if k == "num":
                        arg = _new(Num, (self.floats[arg], arg, lcs[pos + 2]))
                    elif arg in _BOOLS:
                        arg = _new(Bool, (_BOOLS[arg], lcs[pos + 2]))
                    else:
                        arg = _new(Name, (arg, lcs[pos + 2]))
                        self.note_read(arg)
                    left = _new(Call, (text, (arg,), (), lcs[pos]))
                    pos += 4
                else:
                    end, args, kwargs = self.arguments(pos + 2, depth)
                    left = _new(Call, (text, args, kwargs, lcs[pos]))
                    pos = end
            else:
                left = _new(Name, (text, lcs[pos]))
                self.note_read(left)
                pos += 1
        else:
            prefix = _PREFIX.get(k)
            if prefix is None:
                self.not_an_operand(pos)
            pos, left = prefix(self, pos, depth)
        # bp: the binding powers of the token at pos; a lone right operand's lookahead is the next turn's
        chained = 0
        bp = after_operand.get(kinds[pos])  # None for names, numbers, newlines, ')' ...
        while bp is not None:
            lbp, rbp, op = bp
            if lbp <= min_bp:
                break
            at = pos
            if rbp is None:  # not a binary operator: op is the rule (x[i], ...)
                chained += 1  # x[..][..]... nests like brackets do
                if depth + chained > MAX_DEPTH:
                    self.too_deep(at)
                pos, left = op(self, at, left, depth)
                bp = after_operand.get(kinds[pos])
                continue
            pos = at + 1
            k = kinds[pos]
            if (k == "name" or k == "num") and depth < MAX_DEPTH and \
                    ((bp := after_operand.get(kinds[pos + 1])) is None or bp[0] <= rbp):
                # a lone number or name (what follows binds no tighter than op), made as expr would
                text = self.texts[pos]
                if k == "num":
                    right = _new(Num, (self.floats[text], text, lcs[pos]))
                elif text in _BOOLS:
                    right = _new(Bool, (_BOOLS[text], lcs[pos]))
                else:
                    right = _new(Name, (text, lcs[pos]))
                    self.note_read(right)
                pos += 1
            else:
                pos, right = self.expr(pos, rbp, depth + 1)
                bp = after_operand.get(kinds[pos])
            left = _new(Binary, (op, left, right, lcs[at]))
            if lbp == _COMPARISON_BP and kinds[pos] in _COMPARISON_SET:
                self.chained_comparison(pos)
        return pos, left

    def chained_comparison(self, pos: int):
        raise SyntaxError_("comparisons cannot be chained", self.lcs[pos],
                           hint="combine them with 'and': a < b and b < c")

    def not_an_operand(self, pos: int):
        """The error for a token that cannot start an expression."""
        k = self.kinds[pos]
        if k in RESERVED and k not in _INFIX:  # (`and`, `or` there are operators out of place)
            self.reserved(pos, _RESERVED_HINT + (" (a conditional expression is A if COND else B)"
                                                 if k == "if" else ""))
        if k == "...":
            raise SyntaxError_("'...' is allowed only in an index", self.lcs[pos], hint="e.g. x[..., 0]")
        hint = "array literals use [ ]" if k == "{" else None
        if k == "newline" and (self.kinds[pos - 1] in _INFIX or self.kinds[pos - 1] in _ASSIGNMENTS) and \
                self.kinds[self.skip_newlines(pos)] != "eof":  # (an operator, then more on the next line)
            hint = ("a statement ends with its line: to continue it on the next line, wrap the expression "
                    "in parentheses (a line break inside ( ) or [ ] does not end it)")
        self.fail(pos, "expected an expression", hint)

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

    def logical_not(self, pos: int, depth: int):
        end, operand = self.expr(pos + 1, _NOT_BP, depth + 1)
        return end, Unary("not", operand, self.lcs[pos])

    def string(self, pos: int, depth: int):
        return pos + 1, Str(self.texts[pos][1:-1], self.lcs[pos])

    def none(self, pos: int, depth: int):
        return pos + 1, NoneLit(self.lcs[pos])

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

    def arguments(self, pos: int, depth: int) -> tuple[int, tuple, tuple]:
        """``arg, ..., key=value, ...)`` from pos (past the '('): (pos past the ')', args, kwargs)."""
        kinds = self.kinds
        args = []
        while kinds[pos] != ")":
            k, after = kinds[pos], kinds[pos + 1]
            if after == "=" and k == "name":
                return self.keyword_arguments(pos, depth, tuple(args))
            if (after == ")" or after == ",") and (k == "num" or k == "name") and depth < MAX_DEPTH:
                # A lone number or name, the commonest argument: made here, as expr would make it.
                text = self.texts[pos]
                if k == "num":
                    value = _new(Num, (self.floats[text], text, self.lcs[pos]))
                elif text in _BOOLS:
                    value = _new(Bool, (_BOOLS[text], self.lcs[pos]))
                else:
                    value = _new(Name, (text, self.lcs[pos]))
                    self.note_read(value)
                pos += 1
            else:
                pos, value = self.expr(pos, 0, depth + 1)
            args.append(value)
            if kinds[pos] != ")":
                pos = self.expect(pos, ",", "between arguments")
        return pos + 1, tuple(args), ()

    def keyword_arguments(self, pos: int, depth: int, args: tuple) -> tuple[int, tuple, tuple]:
        """The arguments from the first keyword one, at pos, on: keyword ones only."""
        kinds, texts, lcs = self.kinds, self.texts, self.lcs
        kwargs = []
        while kinds[pos] != ")":
            if not (kinds[pos] == "name" and kinds[pos + 1] == "="):
                raise SyntaxError_("positional argument after a keyword argument", lcs[pos])
            key = texts[pos]
            if any(kw.name == key for kw in kwargs):
                raise SyntaxError_(f"keyword argument '{key}' given twice", lcs[pos])
            end, value = self.expr(pos + 2, 0, depth + 1)
            kwargs.append(Keyword(key, value, lcs[pos]))
            pos = end if kinds[end] == ")" else self.expect(end, ",", "between arguments")
        return pos + 1, args, tuple(kwargs)

    # -- after an operand (the table _POSTFIX) ---------------------------------------
    def index(self, pos: int, left, depth: int):
        """``left[i, a:b:c, ...]``: pos is the '['."""
        end, items = self.comma_list(pos + 1, "]", _Parser.index_item, "between indices", depth)
        if not items:
            raise SyntaxError_("empty index", self.lcs[pos])
        return end, Index(left, items, self.lcs[pos])

    def index_item(self, pos: int, depth: int):
        """An index, ``...``, or a slice ``start:stop:step`` with each part optional."""
        kinds = self.kinds
        start = stop = step = None
        end = pos
        if kinds[pos] == "...":
            return pos + 1, EllipsisLit(self.lcs[pos])
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
        """``grad(f)(x)``: a call of the value of a call; pos is the second '('."""
        if type(left) is not Call:
            raise SyntaxError_("only named functions can be called", self.lcs[pos])
        end, args, kwargs = self.arguments(pos + 1, depth)
        return end, Apply(left, args, kwargs, self.lcs[pos])

    def conditional(self, pos: int, then, depth: int):
        """``then if cond else orelse``: pos is the 'if'.  The condition binds tighter than
        a conditional (`a if b if c else d else e` is an error), the else side as loose
        (`a if c else b if d else e` nests to the right)."""
        end, cond = self.expr(pos + 1, _COND_BP, depth + 1)
        if self.kinds[end] != "else":
            hint = "an if statement starts its line: if COND { ... }" if self.kinds[end] == "{" else \
                "a conditional expression is A if COND else B"
            self.fail(end, "expected 'else' in a conditional expression", hint)
        end, orelse = self.expr(end + 1, _COND_BP - 1, depth + 1)
        return end, CondExpr(then, cond, orelse, self.lcs[pos + 1], self.lcs[pos])


# The dispatch tables of the grammar (after the class: they name its rules).
_STATEMENTS = {  # a leading keyword (or `input`): rule(self, pos, ctx)
    "input": _Parser.input_statement, "if": _Parser.if_statement, "for": _Parser.for_statement,
    "while": _Parser.while_statement, "def": _Parser.def_statement, "return": _Parser.return_statement,
    "break": _Parser.loop_jump, "continue": _Parser.loop_jump,
    "elif": _Parser.stray_branch, "else": _Parser.stray_branch, "{": _Parser.bare_block,
}
_ASSIGNMENTS = {  # the token after a leading name: rule(self, pos, ctx)
    "=": _Parser.assignment, **dict.fromkeys(_AUGMENTED, _Parser.aug_assignment), ",": _Parser.destructuring,
}
_PREFIX = {  # an operand's first token (but numbers and names): rule(self, pos, depth)
    "-": _Parser.unary, "+": _Parser.unary, "not": _Parser.logical_not, "(": _Parser.parenthesized,
    "[": _Parser.array, "str": _Parser.string, "None": _Parser.none,
}
_POSTFIX = {  # a token after an operand, not a binary operator: (lbp, None, rule(self, pos, left, depth))
    "[": (_POSTFIX_BP, None, _Parser.index), "(": (_POSTFIX_BP, None, _Parser.call_on_value),
    "if": (_COND_BP, None, _Parser.conditional),
}
_AFTER_OPERAND = {**_INFIX, **_POSTFIX}  # what expr() looks up after each operand: one lookup
_LBP = {kind: bp[0] for kind, bp in _AFTER_OPERAND.items()}  # (0, the least, for any other token)


def parse(text: str, label: str = "<expr>") -> Program:
    """Parse program text into a :class:`Program`; raises SyntaxError_ with a position."""
    source = Source(text, label)
    try:
        parser = _Parser(text)
        statements, names, marks = parser.program()
        return Program(statements, source, names, marks, parser.too_large())
    except SyntaxError_ as err:
        raise err.located(source)


def parse_expression(text: str, label: str = "<expr>"):
    """Parse a single expression (used for --at values, cotangents, tangents)."""
    source = Source(text, label)
    try:
        return _Parser(text).expression()
    except SyntaxError_ as err:
        raise err.located(source)
