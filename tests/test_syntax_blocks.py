"""The syntax of issue 15 (SPEC §2.2-§2.3), at the parser: blocks, if/elif/else, for, while,
break and continue, def and return, reassignment and updates, destructuring, the
conditional expression, and/or/not, // and %, None, ..., strings and grad(f)(x).

Each form's tree is asserted node for node; every position is found in the text itself
(:func:`at`), never taken from the parser.  Every syntax error is asserted with its exact
message, line, column and hint.
"""
from __future__ import annotations

import gc
import sys

import pytest

from gradcalc.errors import Pos, SyntaxError_, to_loc
from gradcalc.lexer import RESERVED
from gradcalc.syntax import (MAX_DEPTH, Apply, Assign, AugAssign, Binary, Branch, Break, Call, CondExpr, Continue,
                             Def, Destructure, EllipsisLit, ExprStmt, For, If, Index, IndexAssign, Keyword,
                             Name, NoneLit, Num, Param, Return, Slice, Str, Unary, While, parse, tokenize, walk_names)


def _loc(text: str, i: int) -> int:
    """The location (errors.to_loc) of offset i."""
    return to_loc(text.count("\n", 0, i) + 1, i - text.rfind("\n", 0, i))


def at(text: str, piece: str, nth: int = 0) -> int:
    """The location of the nth occurrence of `piece` in `text`."""
    i = -1
    for _ in range(nth + 1):
        i = text.index(piece, i + 1)
    return _loc(text, i)


def name(text: str, ident: str, nth: int = 0) -> Name:
    """The Name node of the nth whole-word occurrence of ident."""
    i, seen = -1, -1
    while seen < nth:
        i = text.index(ident, i + 1)
        around = text[i - 1:i] + text[i + len(ident):i + len(ident) + 1]
        if not any(c.isalnum() or c == "_" for c in around):
            seen += 1
    return Name(ident, _loc(text, i))


def num(text: str, digits: str, nth: int = 0) -> Num:
    return Num(float(digits), digits, at(text, digits, nth))


def only(text: str):
    """The one statement of text."""
    (statement,) = parse(text).statements
    return statement


def error(text: str) -> SyntaxError_:
    with pytest.raises(SyntaxError_) as info:
        parse(text)
    return info.value


# ==========================================================================
# Tokens
# ==========================================================================


def test_new_operators_are_single_tokens():
    got = [(t.kind, t.text) for t in tokenize("a // b % c; d += 1; e -= 1; f *= 2; g /= 2; x[...]")][:-1]
    assert got == [
        ("name", "a"), ("op", "//"), ("name", "b"), ("op", "%"), ("name", "c"), ("op", ";"),
        ("name", "d"), ("op", "+="), ("num", "1"), ("op", ";"), ("name", "e"), ("op", "-="), ("num", "1"),
        ("op", ";"), ("name", "f"), ("op", "*="), ("num", "2"), ("op", ";"), ("name", "g"), ("op", "/="),
        ("num", "2"), ("op", ";"), ("name", "x"), ("op", "["), ("op", "..."), ("op", "]")]


def test_strings_are_single_tokens_with_their_quotes():
    text = "einsum('ij,jk->ik', a) + \"fro\" + ''"
    got = [(t.kind, t.text, t.pos) for t in tokenize(text) if t.kind == "str"]
    assert got == [("str", "'ij,jk->ik'", Pos(1, 8)), ("str", '"fro"', Pos(1, 26)), ("str", "''", Pos(1, 34))]


@pytest.mark.parametrize("word", sorted(RESERVED))
def test_reserved_words_are_keyword_tokens(word):
    assert [(t.kind, t.text) for t in tokenize(f"{word} {word}_ x{word}")][:-1] == [
        ("keyword", word), ("name", f"{word}_"), ("name", f"x{word}")]


def test_input_and_the_boolean_literals_stay_names():
    assert {t.kind for t in tokenize("input true false True False")[:-1]} == {"name"}


def test_a_block_keeps_its_newlines_and_brackets_inside_it_drop_theirs():
    text = "if c {\n  a = f(1,\n    2)\n  b = [3,\n 4]\n}\n"
    got = [(t.kind, t.text, t.pos.line) for t in tokenize(text)]
    assert got == [
        ("keyword", "if", 1), ("name", "c", 1), ("op", "{", 1), ("newline", "\n", 1),
        ("name", "a", 2), ("op", "=", 2), ("name", "f", 2), ("op", "(", 2), ("num", "1", 2), ("op", ",", 2),
        ("num", "2", 3), ("op", ")", 3), ("newline", "\n", 3),
        ("name", "b", 4), ("op", "=", 4), ("op", "[", 4), ("num", "3", 4), ("op", ",", 4),
        ("num", "4", 5), ("op", "]", 5), ("newline", "\n", 5),
        ("op", "}", 6), ("newline", "\n", 6), ("eof", "", 7)]


def test_a_block_inside_brackets_keeps_its_newlines_too():
    # (no statement takes a block inside brackets, but the lexer's rule is the innermost bracket)
    got = [(t.kind, t.text) for t in tokenize("f(\n{\nx\n}\n)")]
    assert got == [("name", "f"), ("op", "("), ("op", "{"), ("newline", "\n"), ("name", "x"), ("newline", "\n"),
                   ("op", "}"), ("op", ")"), ("eof", "")]


# ==========================================================================
# if / elif / else
# ==========================================================================


def test_if_elif_else_tree():
    text = "if x > 0 { y = 1 } elif x < -1 { y = 2 } else { y = 3 }"
    x0, x1 = name(text, "x"), name(text, "x", 1)
    first = Branch(Binary(">", x0, num(text, "0"), at(text, ">")),
                   (Assign("y", num(text, "1"), at(text, "y")),), x0.loc)
    second = Branch(Binary("<", x1, Unary("-", num(text, "1", 1), at(text, "-")), at(text, "<")),
                    (Assign("y", num(text, "2"), at(text, "y", 1)),), x1.loc)
    orelse = (Assign("y", num(text, "3"), at(text, "y", 2)),)
    assert only(text) == If((first, second), orelse, at(text, "if"))


def test_if_without_else_and_empty_blocks():
    text = "if c { }"
    assert only(text) == If((Branch(name(text, "c"), (), at(text, "c")),), None, at(text, "if"))
    text = "if c {} else {}"
    assert only(text) == If((Branch(name(text, "c"), (), at(text, "c")),), (), at(text, "if"))


def test_a_condition_is_located_at_its_first_token():
    text = "if (x + 1) * 2 > y { z = 1 } elif  -w { z = 2 }"
    branches = only(text).branches
    assert [b.loc for b in branches] == [at(text, "("), at(text, "-w")]
    assert branches[1].cond == Unary("-", name(text, "w"), at(text, "-w"))


def test_close_brace_and_the_next_keyword_on_different_lines():
    text = ("if x > 0 {\n    r = x\n}\n# a comment\n\nelif x < 0\n{\n    r = -x\n}\nelse\n{\n    r = 0\n}\n"
            "r")
    statement, last = parse(text).statements
    assert type(statement) is If and last == ExprStmt(name(text, "r", 3), at(text, "r", 3))
    assert [b.pos for b in statement.branches] == [Pos(1, 4), Pos(6, 6)]
    assert statement.orelse == (Assign("r", num(text, "0", 2), at(text, "r", 2)),)


def test_block_statements_are_separated_by_newlines_and_semicolons():
    text = "if c {\n  a = f(1,\n        2); b = 3\n\n  ;\n  d = [1,\n 2]\n}"
    body = only(text).branches[0].body
    assert [type(s) for s in body] == [Assign, Assign, Assign]
    assert [s.name for s in body] == ["a", "b", "d"]
    assert body[1].pos == Pos(3, 13)


def test_nested_ifs():
    text = "if a {\n  if b { y = 1 } else { y = 2 }\n} else { y = 3 }"
    outer = only(text)
    inner = outer.branches[0].body[0]
    assert type(inner) is If and inner.pos == Pos(2, 3) and inner.branches[0].cond == name(text, "b")
    assert outer.orelse == (Assign("y", num(text, "3"), at(text, "y", 2)),)


# ==========================================================================
# for, while, break, continue
# ==========================================================================


def test_for_over_a_range():
    text = "for i in range(2, n) { s += i }"
    rng = Call("range", (num(text, "2"), name(text, "n")), (), at(text, "range"))
    body = (AugAssign("s", "+", name(text, "i", 1), at(text, "s")),)
    assert only(text) == For("i", rng, body, at(text, "for"))


def test_for_over_an_array():
    text = "for row in X[1:] { t = row }"
    iterable = Index(name(text, "X"), (Slice(num(text, "1"), None, None, at(text, "1")),), at(text, "["))
    assert only(text) == For("row", iterable, (Assign("t", name(text, "row", 1), at(text, "t")),), at(text, "for"))


def test_while_keeps_the_location_of_its_condition():
    text = "while abs(y) > 1e-3 { y = y / 2 }"
    cond = Binary(">", Call("abs", (name(text, "y"),), (), at(text, "abs")), num(text, "1e-3"), at(text, ">"))
    body = (Assign("y", Binary("/", name(text, "y", 2), num(text, "2"), at(text, "/")), at(text, "y =")),)
    assert only(text) == While(cond, body, at(text, "abs"), at(text, "while"))


def test_break_and_continue_inside_loops_and_their_ifs():
    text = "for i in range(3) {\n  if i == 1 { continue }\n  while true { break }\n  break\n}"
    body = only(text).body
    assert body[0].branches[0].body == (Continue(at(text, "continue")),)
    assert body[1].body == (Break(at(text, "break")),)
    assert body[2] == Break(at(text, "break", 1))


# ==========================================================================
# def and return
# ==========================================================================


def test_def_of_one_expression():
    text = "def f(t, k=2) = k * t^3"
    params = (Param("t", None, at(text, "t")), Param("k", num(text, "2"), at(text, "k")))
    value = Binary("*", name(text, "k", 1), Binary("^", name(text, "t", 1), num(text, "3"), at(text, "^")),
                   at(text, "*"))
    assert only(text) == Def("f", params, (Return((value,), at(text, "k *")),), at(text, "def"))


def test_def_with_a_body_returns_several_values_or_none():
    text = "def g(a, b) {\n    s = a + b\n    if s > 0 { return s, -s }\n    return\n}"
    d = only(text)
    assert (d.name, [p.name for p in d.params], d.pos) == ("g", ["a", "b"], Pos(1, 1))
    assign, branch, bare = d.body
    assert assign == Assign("s", Binary("+", name(text, "a", 1), name(text, "b", 1), at(text, "+")), at(text, "s ="))
    values = (name(text, "s", 2), Unary("-", name(text, "s", 3), at(text, "-s")))
    assert branch.branches[0].body == (Return(values, at(text, "return")),)
    assert bare == Return((), at(text, "return", 1))


def test_def_without_parameters_and_a_trailing_comma():
    assert only("def one() = 1").params == ()
    assert [p.name for p in only("def f(a, b,) = a").params] == ["a", "b"]


def test_calls_of_functions_take_keyword_arguments():
    text = "y = f(x, k=3)"
    call = Call("f", (name(text, "x"),), (Keyword("k", num(text, "3"), at(text, "k")),), at(text, "f"))
    assert only(text) == Assign("y", call, at(text, "y"))


def test_functions_and_their_use_in_any_order():
    statements = parse("y = f(2)\ndef f(t) = g(t) + 1\ndef g(t) = t").statements
    assert [type(s) for s in statements] == [Assign, Def, Def]


# ==========================================================================
# Reassignment, updates, destructuring
# ==========================================================================


def test_augmented_assignments():
    text = "a += x\nb -= 1\nc *= 2\nd /= y"
    assert parse(text).statements == (
        AugAssign("a", "+", name(text, "x"), at(text, "a")),
        AugAssign("b", "-", num(text, "1"), at(text, "b")),
        AugAssign("c", "*", num(text, "2"), at(text, "c")),
        AugAssign("d", "/", name(text, "y"), at(text, "d")))


def test_index_updates():
    text = "y[0] = x\ny[1:, i] += 2*x"
    first, second = parse(text).statements
    assert first == IndexAssign("y", (num(text, "0"),), "=", name(text, "x"), at(text, "y"))
    items = (Slice(num(text, "1"), None, None, at(text, "1")), name(text, "i"))
    value = Binary("*", num(text, "2"), name(text, "x", 1), at(text, "*"))
    assert second == IndexAssign("y", items, "+=", value, at(text, "y", 1))


def test_reassignment_is_an_ordinary_assignment():
    text = "y = 1\ny = y - 0.1 * y^3"
    assert [type(s) for s in parse(text).statements] == [Assign, Assign]


def test_destructuring():
    text = "w, V = eigh(S)\na, = split(x, 1)\np, q, = f(x)"
    first, second, third = parse(text).statements
    assert first == Destructure(("w", "V"), Call("eigh", (name(text, "S"),), (), at(text, "eigh")), at(text, "w"))
    assert second.names == ("a",) and second.pos == Pos(2, 1) and second.value.func == "split"
    assert third.names == ("p", "q") and third.pos == Pos(3, 1)


def test_an_expression_statement_still_starts_with_a_name_and_an_index():
    text = "x[0] + 1"
    assert only(text) == ExprStmt(Binary("+", Index(name(text, "x"), (num(text, "0"),), at(text, "[")),
                                         num(text, "1"), at(text, "+")), at(text, "x"))


# ==========================================================================
# Expressions
# ==========================================================================


def test_conditional_expression_is_lowest_and_right_associative():
    text = "y = a + 1 if c > 0 else b if d else -e"
    inner = CondExpr(name(text, "b"), name(text, "d"), Unary("-", name(text, "e"), at(text, "-")),
                     at(text, "d"), at(text, "if", 1))
    outer = CondExpr(Binary("+", name(text, "a"), num(text, "1"), at(text, "+")),
                     Binary(">", name(text, "c"), num(text, "0"), at(text, ">")), inner,
                     at(text, "c"), at(text, "if"))
    assert only(text) == Assign("y", outer, at(text, "y"))


def test_conditional_expression_in_brackets_and_arguments():
    text = "f((a if c else b) * 2, k=x if c else y)"
    call = only(text).value
    assert type(call.args[0]) is Binary and type(call.args[0].left) is CondExpr
    assert type(call.kwargs[0].value) is CondExpr and call.kwargs[0].value.cond_loc == at(text, "c", 1)


@pytest.mark.parametrize("text, shape", [
    ("not a < b and c or d", ("or", ("and", ("not", ("<", "a", "b")), "c"), "d")),
    ("a or b and c", ("or", "a", ("and", "b", "c"))),
    ("a and b and c", ("and", ("and", "a", "b"), "c")),
    ("not not a", ("not", ("not", "a"))),
    ("a == b and not c", ("and", ("==", "a", "b"), ("not", "c"))),
    ("a + b // c % d * e", ("+", "a", ("*", ("%", ("//", "b", "c"), "d"), "e"))),
    ("-a % b", ("%", ("-", "a"), "b")),
    ("a // b ^ c", ("//", "a", ("^", "b", "c"))),
    ("a or b if c and d else e", ("if", ("or", "a", "b"), ("and", "c", "d"), "e")),
    ("not a if b else c", ("if", ("not", "a"), "b", "c")),
])
def test_precedence_of_the_new_operators(text, shape):
    def form(node):
        if type(node) is Name:
            return node.id
        if type(node) is Unary:
            return node.op, form(node.operand)
        if type(node) is CondExpr:
            return "if", form(node.then), form(node.cond), form(node.orelse)
        return node.op, form(node.left), form(node.right)
    assert form(only(text).value) == shape


def test_none_ellipsis_and_strings():
    text = "x[None, ..., ::2]"
    items = (NoneLit(at(text, "None")), EllipsisLit(at(text, "...")),
             Slice(None, None, num(text, "2"), at(text, ":")))
    assert only(text).value == Index(name(text, "x"), items, at(text, "["))
    text = "norm(einsum('ij,jk->ik', A, B), ord=\"fro\", axis=None)"
    call = only(text).value
    assert call.args[0].args[0] == Str("ij,jk->ik", at(text, "'"))
    assert call.kwargs == (Keyword("ord", Str("fro", at(text, '"')), at(text, "ord")),
                           Keyword("axis", NoneLit(at(text, "None")), at(text, "axis")))


def test_grad_of_a_function_applied():
    text = "F = -grad(energy)(q, 2)[0]"
    callee = Call("grad", (name(text, "energy"),), (), at(text, "grad"))
    apply = Apply(callee, (name(text, "q"), num(text, "2")), (), at(text, "(", 1))
    assert only(text) == Assign("F", Unary("-", Index(apply, (num(text, "0"),), at(text, "[")), at(text, "-")),
                                at(text, "F"))
    text = "jacobian(f, argnum=1)(a, b=c)"
    value = only(text).value
    assert type(value) is Apply and value.kwargs == (Keyword("b", name(text, "c"), at(text, "b=")),)
    assert value.callee.kwargs == (Keyword("argnum", num(text, "1"), at(text, "argnum")),)


# ==========================================================================
# What each statement reads (Program.reads, for find_inputs)
# ==========================================================================

PROGRAMS = [
    "input a = b, c[2] = [d, 1]\ny = a + c",
    "def f(x, k=n) {\n if x > 0 { return x if c else -x, k }\n}\ny = f(u, k=v)",
    "for i in range(m) { s += i * y[j] }",
    "z[q] += w\nz[0] = 1\nt *= 2",
    "v = grad(f)(u)[0]; a, b = g(v)",
    "while y > tol { y = y / 2 } ; if p { q = 1 } elif r { q = 2 } else { q = s }",
    "x[None, ...] + 'ij' + (1 if z else 2)",
]


@pytest.mark.parametrize("text", PROGRAMS)
def test_reads_are_the_names_of_each_statement_in_textual_order(text):
    program = parse(text)
    assert len(program.reads) == len(program.statements)
    for statement, reads in zip(program.statements, program.reads):
        assert reads == tuple(walk_names(statement))
        assert [n.loc for n in reads] == sorted(n.loc for n in reads)  # textual order


def test_reads_of_compound_statements():
    program = parse(PROGRAMS[1] + "\n" + PROGRAMS[2] + "\n" + PROGRAMS[3])
    assert [[n.id for n in r] for r in program.reads] == [
        ["n", "x", "x", "c", "x", "k"],  # not the function's name, not its parameters
        ["u", "v"],  # not the function's name: a call names it, it does not read it
        ["m", "s", "i", "y", "j"],  # `s += e` reads s; the loop variable is not a read
        ["z", "q", "w"], ["z"], ["t"]]
    assert parse("grad(f)(x)").reads == ((Name("f", to_loc(1, 6)), Name("x", to_loc(1, 9))),)


# ==========================================================================
# Errors: exact text, position and hint
# ==========================================================================

SEPARATE = "separate statements with a newline or ';', or add an operator"
BLOCK = "a block is written { ... }"
COLON = "blocks are written in { }, not after ':'"
BARE = "a block { ... } follows if, elif, else, for, while or def"
DEF_FORMS = "def f(x) = x^2, or def f(x) { ...; return ... }"
DEF_TOP = "move it out of the block: a function is visible everywhere in the program"
RETURN = "'return' goes inside a def's body: def f(x) { ...; return ... }"
BREAK = "'break' goes inside the body of a for or while loop"
CONTINUE = "'continue' goes inside the body of a for or while loop"
COND = "a conditional expression is A if COND else B"
RESERVED_HINT = "pick another name"

ERRORS = [  # (text, message, (line, col), hint)
    # blocks
    ("if x {\n  y = 1\n", "'{' is never closed", (1, 6), "add '}'"),
    ("def f(t) {\n  if t { return t\n}", "'{' is never closed", (1, 10), "add '}'"),
    ("x = 1\n}", "unmatched '}'", (2, 1), None),
    ("if x { f(x }", "'}' does not match '(' at 1:9", (1, 12), None),
    ("if x { y = [1, 2) }", "')' does not match '[' at 1:12", (1, 17), None),
    ("if x { y = 1 } z = 2", "expected end of statement, found 'z'", (1, 16), SEPARATE),
    ("{ x = 1 }", "expected a statement, found '{'", (1, 1), BARE),
    ("x = 1\n{\n  y = 2\n}", "expected a statement, found '{'", (2, 1), BARE),
    ("{ if x { } }", "expected a statement, found '{'", (1, 1), BARE),
    ("{}", "expected a statement, found '{'", (1, 1), BARE),
    ("{1}", "expected an expression, found '{'", (1, 1), "array literals use [ ]"),
    ("{'a': 1}", "expected an expression, found '{'", (1, 1), "array literals use [ ]"),
    ("x = {1}", "expected an expression, found '{'", (1, 5), "array literals use [ ]"),
    # if
    ("if x > 0: y = 1", "expected '{' after the condition, found ':'", (1, 9), COLON),
    ("if x > 0 y = 1", "expected '{' after the condition, found 'y'", (1, 10), BLOCK),
    ("if x > 0\ny = 1", "expected '{' after the condition, found end of line", (1, 9), BLOCK),
    ("if x > 0", "expected '{' after the condition, found end of input", (1, 9), BLOCK),
    ("if { y = 1 }", "expected a condition, found '{'", (1, 4), None),
    ("if x { } else if y { }", "expected '{' after 'else', found 'if'", (1, 15), "write 'elif COND { ... }'"),
    ("if x { } else: y = 1", "expected '{' after 'else', found ':'", (1, 14), COLON),
    ("if x { } else { } else { }", "'else' after 'else'", (1, 19), "'else' comes last in an if"),
    ("if x { } else { }\nelif y { }", "'elif' after 'else'", (2, 1), "'else' comes last in an if"),
    ("else { y = 1 }", "'else' without an 'if'", (1, 1), "'else' follows the '}' of an if's block"),
    ("x = 1\nelif x { }", "'elif' without an 'if'", (2, 1), "'elif' follows the '}' of an if's block"),
    ("if x { y = 1 };\nelse { y = 2 }", "'else' without an 'if'", (2, 1), "'else' follows the '}' of an if's block"),
    # loops
    ("for i in range(3): s = i", "expected '{' after the loop's range, found ':'", (1, 18), COLON),
    ("for i range(3) { }", "expected 'in' after the loop variable, found 'range'", (1, 7), None),
    ("for 2 in x { }", "expected a loop variable, found '2'", (1, 5), None),
    ("for (i, j) in x { }", "expected a loop variable, found '('", (1, 5), None),
    ("for true in x { }", "'true' is a literal, not a name", (1, 5), RESERVED_HINT),
    ("for i in { }", "expected an expression, found '{'", (1, 10), "array literals use [ ]"),
    ("while x > 0 y = 1", "expected '{' after the condition, found 'y'", (1, 13), BLOCK),
    ("while { }", "expected a condition, found '{'", (1, 7), None),
    ("break", "'break' outside a loop", (1, 1), BREAK),
    ("continue", "'continue' outside a loop", (1, 1), CONTINUE),
    ("x = 1\nif x > 0 { break }", "'break' outside a loop", (2, 12), BREAK),
    ("for i in x { }\ncontinue", "'continue' outside a loop", (2, 1), CONTINUE),
    ("def f(t) {\n  for i in t { y = i }\n  break\n}", "'break' outside a loop", (3, 3), BREAK),
    # def and return
    ("return x", "'return' outside a function", (1, 1), RETURN),
    ("return", "'return' outside a function", (1, 1), RETURN),
    ("if x > 0 { return 1 }", "'return' outside a function", (1, 12), RETURN),
    ("for i in x { return i }", "'return' outside a function", (1, 14), RETURN),
    ("if x > 0 { def f(t) = t }\nx", "'def' is allowed only at the top level", (1, 12), DEF_TOP),
    ("while x { def f(t) = t }", "'def' is allowed only at the top level", (1, 11), DEF_TOP),
    ("def f(t) {\n  def g(u) = u\n  return g(t)\n}", "'def' is allowed only at the top level", (2, 3), DEF_TOP),
    ("def f(t): return t", "expected '{' or '=' after the parameters, found ':'", (1, 9), DEF_FORMS),
    ("def f(t)", "expected '{' or '=' after the parameters, found end of input", (1, 9), DEF_FORMS),
    ("def f = 2", "expected '(' after the function name, found '='", (1, 7), None),
    ("def (t) = t", "expected a function name, found '('", (1, 5), None),
    ("def f(t u) = t", "expected ',' between parameters, found 'u'", (1, 9), None),
    ("def f(2) = 1", "expected a parameter name, found '2'", (1, 7), None),
    ("def f(t, t) = t", "parameter 't' appears twice", (1, 10), "give each parameter its own name"),
    ("def f(t, k=2, n) = t", "parameter 'n' has no default but follows 'k', which has one", (1, 15),
     "put the parameters with defaults last"),
    ("def true(t) = t", "'true' is a literal, not a name", (1, 5), RESERVED_HINT),
    ("def f(False) = 1", "'False' is a literal, not a name", (1, 7), RESERVED_HINT),
    ("def f(t) { return t, }", "expected an expression, found '}'", (1, 22), None),
    ("def f(t) = t, 2", "expected end of statement, found ','", (1, 13), None),
    # assignments
    ("x[0] -= 1", "'-=' cannot update elements: only '=' and '+=' can", (1, 6), "write x[...] = x[...] - (...)"),
    ("x[0] /= 2", "'/=' cannot update elements: only '=' and '+=' can", (1, 6), "write x[...] = x[...] / (...)"),
    ("x[0][1] = 2", "only a name's elements can be assigned", (1, 1), "index once: x[i, j] = ..."),
    ("f(x)[0] = 2", "only a name's elements can be assigned", (1, 1), "assign to NAME[INDEX]"),
    ("f(x) = 1", "expected end of statement, found '='", (1, 6), None),
    ("x += ", "expected an expression, found end of input", (1, 6), None),
    ("x += y = 2", "expected end of statement, found '='", (1, 8), None),
    ("a, b", "expected end of statement, found ','", (1, 2), None),
    ("a, 2 = f(x)", "expected end of statement, found ','", (1, 2), None),
    ("a, b = ", "expected an expression, found end of input", (1, 8), None),
    ("a, true = f(x)", "'true' is a literal, not a name", (1, 4), RESERVED_HINT),
    ("if x { input y }", "'input' is allowed only at the top level", (1, 8),
     "declare inputs at the top level, before the blocks that use them"),
    # expressions
    ("y = x if c", "expected 'else' in a conditional expression, found end of input", (1, 11), COND),
    ("x if c { y = 1 }", "expected 'else' in a conditional expression, found '{'", (1, 8),
     "an if statement starts its line: if COND { ... }"),
    ("a if b if c else d else e", "expected 'else' in a conditional expression, found 'if'", (1, 8), COND),
    ("y = 1 if c else", "expected an expression, found end of input", (1, 16), None),
    ("y = not", "expected an expression, found end of input", (1, 8), None),
    ("y = a and", "expected an expression, found end of input", (1, 10), None),
    ("y = or b", "expected an expression, found 'or'", (1, 5), None),
    ("x = ...", "'...' is allowed only in an index", (1, 5), "e.g. x[..., 0]"),
    ("x[...:2]", "expected ',' between indices, found ':'", (1, 6), None),
    ("a // / b", "expected an expression, found '/'", (1, 6), None),
    ("a %% b", "expected an expression, found '%'", (1, 4), None),
    ("not a == b == c", "comparisons cannot be chained", (1, 12), "combine them with 'and': a < b and b < c"),
    ("(x)(2)", "only named functions can be called", (1, 4), None),
    ("grad(f)(x)(y)", "only named functions can be called", (1, 11), None),
    ("true(1)", "only named functions can be called", (1, 5), None),
    # strings
    ("'abc", "string literal is never closed", (1, 1), "end it with ' on the same line"),
    ('x = "ab\ncd"', "string literal is never closed", (1, 5), 'end it with " on the same line'),
    ("f('a\tb')", "unexpected character '\\t' (U+0009)", (1, 5), "a string holds printable ASCII characters only"),
    ("f('a→b')", "unexpected character '→' (U+2192)", (1, 5), "a string holds printable ASCII characters only"),
    ("f(\"\x00\")", "unexpected character '\\x00' (U+0000)", (1, 4), "a string holds printable ASCII characters only"),
    ("f('a') → 1", "unexpected character '→' (U+2192)", (1, 8), "programs are written in ASCII"),
    ("x = 'a' 'b'", "expected end of statement, found the string 'b'", (1, 9), None),
    # reserved words as names
    ("def f(if) = 1\nf(2)", "'if' is a reserved word", (1, 7), RESERVED_HINT),
    ("def while(t) = t\nwhile(2)", "'while' is a reserved word", (1, 5), RESERVED_HINT),
    ("for return in range(3) { }", "'return' is a reserved word", (1, 5), RESERVED_HINT),
    ("input def", "'def' is a reserved word", (1, 7), RESERVED_HINT),
    ("input a, None", "'None' is a reserved word", (1, 10), RESERVED_HINT),
    ("a, or = f(1)\ndef f(t) {\n    return t, t\n}", "'or' is a reserved word", (1, 4), RESERVED_HINT),
    ("None, a = f(x)", "'None' is a reserved word", (1, 1), RESERVED_HINT),
    ("in += 1", "'in' is a reserved word", (1, 1), RESERVED_HINT),
    ("x = in + 1", "'in' is a reserved word", (1, 5), RESERVED_HINT),
    ("y = f(else)", "'else' is a reserved word", (1, 7), RESERVED_HINT),
    ("y = if", "'if' is a reserved word", (1, 5), RESERVED_HINT + " (a conditional expression is A if COND else B)"),
    ("f(for=1)", "'for' is a reserved word", (1, 3), RESERVED_HINT),
    ("x = 1\nif x > 0 { elif = 2 }", "'elif' is a reserved word", (2, 12), RESERVED_HINT),
    *[(f"{word} = 3", f"'{word}' is a reserved word", (1, 1), RESERVED_HINT) for word in sorted(RESERVED)],
]


@pytest.mark.parametrize("text, message, pos, hint", ERRORS, ids=[e[0] for e in ERRORS])
def test_syntax_errors(text, message, pos, hint):
    err = error(text)
    assert (err.message, err.pos, err.hint) == (message, pos, hint)
    assert err.kind == "syntax" and err.source.text == text


@pytest.mark.parametrize("text", ["input if c else 0", "input and x", "y = None", "def f(x, k=None) = x",
                                  "x[..., 0]", "not_ = 1; in_ = 2; None_ = 3; iffy = 4"])
def test_words_near_the_reserved_ones_are_fine(text):
    assert parse(text).statements


# ==========================================================================
# Nesting: blocks are capped as expressions are
# ==========================================================================


def _nested_ifs(n: int, inner: str = "y = 1") -> str:
    return "x = 1\n" + "".join("  " * k + "if x {\n" for k in range(n)) + inner + "\n" + "}\n" * n


def test_100_nested_blocks_parse():
    statement = parse(_nested_ifs(MAX_DEPTH)).statements[1]
    depth = 0
    while type(statement) is If:
        depth += 1
        statement = statement.branches[0].body[0]
    assert depth == MAX_DEPTH


@pytest.mark.parametrize("n", [MAX_DEPTH + 1, 3 * MAX_DEPTH])
def test_deeper_blocks_are_a_clean_error_at_the_first_brace_too_deep(n):
    err = error(_nested_ifs(n))
    line = 1 + MAX_DEPTH + 1  # x = 1, then one `if x {` a line: the 101st is on line 102
    assert (err.message, err.pos, err.hint) == (
        f"blocks nested deeper than {MAX_DEPTH} levels", Pos(line, 2 * MAX_DEPTH + 6),
        "move the inner part into a function (def)")


def test_a_def_body_counts_as_a_block():
    text = "def f(t) {\n" + "while t {\n" * (MAX_DEPTH - 1) + "t = 0\n" + "}\n" * MAX_DEPTH
    assert type(only(text)) is Def
    err = error(text.replace("def f(t) {\n", "def f(t) {\nif t {\n", 1) + "}")
    assert err.message == f"blocks nested deeper than {MAX_DEPTH} levels"


@pytest.mark.parametrize("inner", ["y = " + "(" * 99 + "x" + ")" * 99, "y = " + "f(" * 99 + "x" + ")" * 99,
                                   "y = x" + "[0]" * 99, "y = x" + "^x" * 99, "y = " + "not " * 99 + "x",
                                   "y = " + "a if b else " * 99 + "c"])
def test_deepest_expressions_in_the_deepest_blocks_parse(inner):
    # 100 blocks and 99 levels of expression inside, well within Python's recursion limit
    limit = sys.getrecursionlimit()
    assert parse(_nested_ifs(MAX_DEPTH, inner)).statements
    assert sys.getrecursionlimit() == limit


def test_parsing_blocks_leaves_no_cyclic_garbage():
    text = "\n".join(PROGRAMS)
    gc.collect()
    parse(text)
    for broken in ("if x { break }", "def f(t) { def g(u) = u }", "if x {"):
        with pytest.raises(SyntaxError_):
            parse(broken)
    assert gc.collect() == 0


def test_a_long_loop_body_parses_as_fast_as_straight_line_text():
    # The statements of a block are read by the same loop as the top level's.
    body = "\n".join(f"    x{i + 1} = sin(x{i})*1.01 + 0.1*x{i}" for i in range(2000))
    program = parse(f"for k in range(3) {{\n{body}\n}}")
    (loop,) = program.statements
    assert len(loop.body) == 2000 and type(loop.body[-1]) is Assign
    assert len(program.reads[0]) == 2 * 2000  # x{i}, twice a line
