"""The lexer and parser of core/syntax.py, pinned: what they give for broken and valid programs.

core/syntax.py was rewritten for speed (one regex match per token, parallel
token lists, closures); these tests pin its observable behaviour: error
messages, positions and hints for broken programs (recorded from the previous,
straightforward implementation), node positions for valid ones, and the
nesting limit.  Issue 15 changed the language: strings, '%', '{ }' blocks and
`grad(f)(x)` are part of it now, and hints name 'and', 'or' and 'not'
(tests/test_syntax_blocks.py covers the new forms).
"""
from __future__ import annotations

import random

import pytest

from gradcalc.errors import Pos, Source, SyntaxError_
from gradcalc.errors import to_loc as At  # nodes keep their positions as locations
from gradcalc.syntax import (ArrayLit, Assign, Binary, Bool, Call, ExprStmt, Index, InputDecl, Inputs, Keyword,
                             Name, Num, Slice, TupleLit, Unary, parse, parse_expression, tokenize)

_HINT_DEEP = "split it into named intermediate statements"

_BROKEN = [  # (source, str(error), (line, col), hint), as the reference implementation gave them
    ('(', "prog.grad:1:1: '(' is never closed", (1, 1), "add ')'"),
    (')', "prog.grad:1:1: unmatched ')'", (1, 1), None),
    (']', "prog.grad:1:1: unmatched ']'", (1, 1), None),
    ('(]', "prog.grad:1:2: ']' does not match '(' at 1:1", (1, 2), None),
    ('[)', "prog.grad:1:2: ')' does not match '[' at 1:1", (1, 2), None),
    ('((x)', "prog.grad:1:1: '(' is never closed", (1, 1), "add ')'"),
    ('x)', "prog.grad:1:2: unmatched ')'", (1, 2), None),
    ('f(x', "prog.grad:1:2: '(' is never closed", (1, 2), "add ')'"),
    ('f(x]', "prog.grad:1:4: ']' does not match '(' at 1:2", (1, 4), None),
    ('[1, 2', "prog.grad:1:1: '[' is never closed", (1, 1), "add ']'"),
    ('a[0', "prog.grad:1:2: '[' is never closed", (1, 2), "add ']'"),
    ('x\n)', "prog.grad:2:1: unmatched ')'", (2, 1), None),
    ('(\n\n', "prog.grad:1:1: '(' is never closed", (1, 1), "add ')'"),
    ('$', "prog.grad:1:1: unexpected character '$'", (1, 1), None),
    ('x $ y', "prog.grad:1:3: unexpected character '$'", (1, 3), None),
    ("'a", 'prog.grad:1:1: string literal is never closed', (1, 1), "end it with ' on the same line"),
    ('x = "s\n"', 'prog.grad:1:5: string literal is never closed', (1, 5), 'end it with " on the same line'),
    ('!x', "prog.grad:1:1: unexpected character '!'", (1, 1), "use 'not' for negation, '!=' for 'not equal'"),
    ('a.b', "prog.grad:1:2: unexpected character '.'", (1, 2), 'attribute access is not part of the language'),
    ('a & b', "prog.grad:1:3: unexpected character '&'", (1, 3), "use 'and' (elementwise, on masks)"),
    ('a | b', "prog.grad:1:3: unexpected character '|'", (1, 3), "use 'or' (elementwise, on masks)"),
    ('a ? b', "prog.grad:1:3: unexpected character '?'", (1, 3), None),
    ('{1}', "prog.grad:1:1: expected an expression, found '{'", (1, 1), 'array literals use [ ]'),
    ('é', "prog.grad:1:1: unexpected character 'é' (U+00E9)", (1, 1), 'programs are written in ASCII'),
    ('x\x00', "prog.grad:1:2: unexpected character '\\x00' (U+0000)", (1, 2), 'programs are written in ASCII'),
    ('  #c\n @@', "prog.grad:2:2: expected an expression, found '@'", (2, 2), None),
    ('x $ # c', "prog.grad:1:3: unexpected character '$'", (1, 3), None),
    ('2x', "prog.grad:1:2: invalid number '2x'", (1, 2), 'put an operator between a number and a name, e.g. 2*x'),
    ('3.5e', "prog.grad:1:4: invalid number '3.5e'", (1, 4), 'put an operator between a number and a name, e.g. 2*x'),
    ('1e+', "prog.grad:1:2: invalid number '1e'", (1, 2), 'put an operator between a number and a name, e.g. 2*x'),
    ('x = 2y', "prog.grad:1:6: invalid number '2y'", (1, 6), 'put an operator between a number and a name, e.g. 2*x'),
    ('1.5.3', "prog.grad:1:4: expected end of statement, found '.3'", (1, 4), "separate statements with a newline or ';', or add an operator"),
    ('(2x', "prog.grad:1:3: invalid number '2x'", (1, 3), 'put an operator between a number and a name, e.g. 2*x'),
    ('2x)', "prog.grad:1:2: invalid number '2x'", (1, 2), 'put an operator between a number and a name, e.g. 2*x'),
    ('a < b < c', 'prog.grad:1:7: comparisons cannot be chained', (1, 7), "combine them with 'and': a < b and b < c"),
    ('a <= b == c', 'prog.grad:1:8: comparisons cannot be chained', (1, 8), "combine them with 'and': a < b and b < c"),
    ('a < b + c < d', 'prog.grad:1:11: comparisons cannot be chained', (1, 11), "combine them with 'and': a < b and b < c"),
    ('x[]', 'prog.grad:1:2: empty index', (1, 2), None),
    ('x[,]', "prog.grad:1:3: expected an expression, found ','", (1, 3), None),
    ('x[a:b:c:d]', "prog.grad:1:8: expected ',' between indices, found ':'", (1, 8), None),
    ('x[1 2]', "prog.grad:1:5: expected ',' between indices, found '2'", (1, 5), None),
    ('f(a=1, a=2)', "prog.grad:1:8: keyword argument 'a' given twice", (1, 8), None),
    ('f(a=1, 2)', 'prog.grad:1:8: positional argument after a keyword argument', (1, 8), None),
    ('f(1 2)', "prog.grad:1:5: expected ',' between arguments, found '2'", (1, 5), None),
    ('f(1,, 2)', "prog.grad:1:5: expected an expression, found ','", (1, 5), None),
    ('f(,)', "prog.grad:1:3: expected an expression, found ','", (1, 3), None),
    ('f(a=)', "prog.grad:1:5: expected an expression, found ')'", (1, 5), None),
    ('f(=1)', "prog.grad:1:3: expected an expression, found '='", (1, 3), None),
    ('[1 2]', "prog.grad:1:4: expected ',' between array elements, found '2'", (1, 4), None),
    ('[1,, 2]', "prog.grad:1:4: expected an expression, found ','", (1, 4), None),
    ('[,]', "prog.grad:1:2: expected an expression, found ','", (1, 2), None),
    ('(,)', "prog.grad:1:2: expected an expression, found ','", (1, 2), None),
    ('(1 2)', "prog.grad:1:4: expected ')' to close '(', found '2'", (1, 4), None),
    ('input x[2.5]', "prog.grad:1:9: expected an integer dimension, found '2.5'", (1, 9), 'shapes are integer literals: input W[3, 4]'),
    ('input x[1e3]', "prog.grad:1:9: expected an integer dimension, found '1e3'", (1, 9), 'shapes are integer literals: input W[3, 4]'),
    ('input x[a]', "prog.grad:1:9: expected an integer dimension, found 'a'", (1, 9), 'shapes are integer literals: input W[3, 4]'),
    ('input x[2 3]', "prog.grad:1:11: expected ',' between dimensions, found '3'", (1, 11), None),
    ('input x = ', 'prog.grad:1:11: expected an expression, found end of input', (1, 11), None),
    ('input x, ', 'prog.grad:1:10: expected an input name, found end of input', (1, 10), None),
    ('input x y', "prog.grad:1:9: expected end of statement, found 'y'", (1, 9), "separate statements with a newline or ';', or add an operator"),
    ('input 3', "prog.grad:1:7: expected end of statement, found '3'", (1, 7), "separate statements with a newline or ';', or add an operator"),
    ('input x[-1]', "prog.grad:1:9: expected an integer dimension, found '-'", (1, 9), 'shapes are integer literals: input W[3, 4]'),
    ('input x[3]]', "prog.grad:1:11: unmatched ']'", (1, 11), None),
    ('x = ', 'prog.grad:1:5: expected an expression, found end of input', (1, 5), None),
    ('x = = 1', "prog.grad:1:5: expected an expression, found '='", (1, 5), None),
    ('= 1', "prog.grad:1:1: expected an expression, found '='", (1, 1), None),
    ('x y', "prog.grad:1:3: expected end of statement, found 'y'", (1, 3), "separate statements with a newline or ';', or add an operator"),
    ('x 1', "prog.grad:1:3: expected end of statement, found '1'", (1, 3), "separate statements with a newline or ';', or add an operator"),
    ('1 x', "prog.grad:1:3: expected end of statement, found 'x'", (1, 3), "separate statements with a newline or ';', or add an operator"),
    ('x +', 'prog.grad:1:4: expected an expression, found end of input', (1, 4), None),
    ('1 +\n$', "prog.grad:2:1: unexpected character '$'", (2, 1), None),
    ('x = 1\ny = \n', 'prog.grad:2:5: expected an expression, found end of line', (2, 5), None),
    ('sin(x)(1)(2)', 'prog.grad:1:10: only named functions can be called', (1, 10), None),
    ('(x)(1)', 'prog.grad:1:4: only named functions can be called', (1, 4), None),
    ('2(3)', 'prog.grad:1:2: only named functions can be called', (1, 2), None),
    ('true(1)', 'prog.grad:1:5: only named functions can be called', (1, 5), None),
    ('x[0](1)', 'prog.grad:1:5: only named functions can be called', (1, 5), None),
    ('x = y = 1', "prog.grad:1:7: expected end of statement, found '='", (1, 7), None),
    ('f(x)=1', "prog.grad:1:5: expected end of statement, found '='", (1, 5), None),
    ('x == = y', "prog.grad:1:6: expected an expression, found '='", (1, 6), None),
    ('<', "prog.grad:1:1: expected an expression, found '<'", (1, 1), None),
    ('**', "prog.grad:1:1: expected an expression, found '**'", (1, 1), None),
    ('^2', "prog.grad:1:1: expected an expression, found '^'", (1, 1), None),
    ('@x', "prog.grad:1:1: expected an expression, found '@'", (1, 1), None),
    ('x,', "prog.grad:1:2: expected end of statement, found ','", (1, 2), None),
    (',', "prog.grad:1:1: expected an expression, found ','", (1, 1), None),
    (':', "prog.grad:1:1: expected an expression, found ':'", (1, 1), None),
    ('x:', "prog.grad:1:2: expected end of statement, found ':'", (1, 2), None),
]

_DEEP = [  # (source, (line, col) of the error): 100 levels is one too many
    ("(" * 100 + "x" + ")" * 100, (1, 101)),
    ("(" * 150 + "x" + ")" * 150, (1, 101)),
    ("-" * 100 + "x", (1, 101)),
    ("x" + "[0]" * 100, (1, 299)),
    ("x" + "^x" * 100, (1, 201)),
    ("x" + "**x" * 100, (1, 301)),
    ("f(" * 100 + "x" + ")" * 100, (1, 201)),
    ("[" * 100 + "1" + "]" * 100, (1, 101)),
    ("(" * 98 + "x" + "[0]" * 3 + ")" * 98, (1, 103)),
]


def _error(text: str, fn=parse) -> SyntaxError_:
    with pytest.raises(SyntaxError_) as info:
        fn(text, "prog.grad")
    return info.value


@pytest.mark.parametrize("text, message, pos, hint", _BROKEN)
def test_broken_programs_report_as_before(text, message, pos, hint):
    err = _error(text)
    assert (str(err), err.pos, err.hint) == (message, pos, hint)
    assert isinstance(err.pos, Pos) and err.source == Source(text, "prog.grad")


@pytest.mark.parametrize("text, pos", _DEEP)
def test_nesting_limit_is_where_it_was(text, pos):
    err = _error(text)
    assert (err.message, err.pos, err.hint) == ("expression nested deeper than 100 levels", pos, _HINT_DEEP)
    assert _error(text, parse_expression).pos == pos


@pytest.mark.parametrize("text", ["(" * 99 + "x" + ")" * 99, "-" * 99 + "x", "x" + "[0]" * 99, "x" + "^x" * 99,
                                  "f(" * 99 + "x" + ")" * 99, "[" * 99 + "1" + "]" * 99])
def test_99_levels_are_fine(text):
    assert len(parse(text).statements) == 1


def test_parse_expression_errors():
    assert str(_error("1 2", parse_expression)) == "prog.grad:1:3: expected end of value, found '2'"
    assert str(_error("\n\n", parse_expression)) == "prog.grad:3:1: expected an expression, found end of input"
    assert str(_error("x; y", parse_expression)) == "prog.grad:1:2: expected end of value, found ';'"
    assert parse_expression("\n [1, 2]\n") == ArrayLit((Num(1.0, "1", At(2, 3)), Num(2.0, "2", At(2, 6))), At(2, 2))


def test_comments_blanks_and_the_end_of_the_text():
    x = Name("x", At(1, 1))
    for text in ["x", "x # a comment", "x   ", "x\t# c  ", "x # c\n", "x #"]:
        assert parse(text).statements == (ExprStmt(x, At(1, 1)),), text
    assert tokenize("x # abc")[-1] == ("eof", "", Pos(1, 8))
    assert tokenize("")[-1] == ("eof", "", Pos(1, 1))
    assert tokenize(" # c\n\t")[-1] == ("eof", "", Pos(2, 2))
    assert parse("  # only a comment").statements == ()


def test_a_recurrence_parses_to_its_tree():
    text = "input x0 = 0.5\n" + "\n".join(f"x{i + 1} = sin(x{i})*1.01 + 0.1*x{i}" for i in range(3))
    program = parse(text)
    assert program.statements[0] == Inputs((InputDecl("x0", None, Num(0.5, "0.5", At(1, 12)), At(1, 7)),), At(1, 1))
    for i, stmt in enumerate(program.statements[1:]):
        line, w = i + 2, len(str(i))  # "x{i+1} = sin(x{i})*1.01 + 0.1*x{i}"
        c = len(f"x{i + 1} = ") + 1  # column of "sin"
        sin = Call("sin", (Name(f"x{i}", At(line, c + 4)),), (), At(line, c))
        times = Binary("*", sin, Num(1.01, "1.01", At(line, c + 7 + w)), At(line, c + 6 + w))
        right = Binary("*", Num(0.1, "0.1", At(line, c + 14 + w)), Name(f"x{i}", At(line, c + 18 + w)),
                       At(line, c + 17 + w))
        assert stmt == Assign(f"x{i + 1}", Binary("+", times, right, At(line, c + 12 + w)), At(line, 1))


def test_every_construct_with_its_positions():
    text = "input a, W[2, 3] = ones((2, 3)), t = true\ny = W[0, ::-1] @ -a^2\nf(y, axis=0, keepdims=False) <= (1, 2,)"
    (inputs, assign, expr) = parse(text).statements
    assert inputs == Inputs((
        InputDecl("a", None, None, At(1, 7)),
        InputDecl("W", (2, 3), Call("ones", (TupleLit((Num(2.0, "2", At(1, 26)), Num(3.0, "3", At(1, 29))), At(1, 25)),),
                                    (), At(1, 20)), At(1, 10)),
        InputDecl("t", None, Bool(True, At(1, 38)), At(1, 34))), At(1, 1))
    index = Index(Name("W", At(2, 5)), (Num(0.0, "0", At(2, 7)),
                                         Slice(None, None, Unary("-", Num(1.0, "1", At(2, 13)), At(2, 12)), At(2, 10))),
                  At(2, 6))
    power = Unary("-", Binary("^", Name("a", At(2, 19)), Num(2.0, "2", At(2, 21)), At(2, 20)), At(2, 18))
    assert assign == Assign("y", Binary("@", index, power, At(2, 16)), At(2, 1))
    call = Call("f", (Name("y", At(3, 3)),), (Keyword("axis", Num(0.0, "0", At(3, 11)), At(3, 6)),
                                               Keyword("keepdims", Bool(False, At(3, 23)), At(3, 14))), At(3, 1))
    pair = TupleLit((Num(1.0, "1", At(3, 34)), Num(2.0, "2", At(3, 37))), At(3, 33))
    assert expr == ExprStmt(Binary("<=", call, pair, At(3, 30)), At(3, 1))


# -- random programs: every node's position points at its own text -----------------------------------

def _random_expr(rng: random.Random, depth: int = 0) -> str:
    r = rng.random()
    if depth > 5 or r < 0.3:
        return rng.choice(["x", "y2", "1.5", "3", ".5e-1", "true", "t_"])
    if r < 0.5:
        op = rng.choice(["+", " - ", "*", "/", "^", "**", " @ ", " < ", "=="])
        pair = _random_expr(rng, depth + 1) + op + _random_expr(rng, depth + 1)
        return f"({pair})" if op in (" < ", "==") else pair  # comparisons do not chain
    if r < 0.6:
        return rng.choice(["-", "+", "- "]) + _random_expr(rng, depth + 1)
    if r < 0.7:
        return "(" + _random_expr(rng, depth + 1) + rng.choice([")", "\n)"])
    if r < 0.8:
        args = [_random_expr(rng, depth + 1) for _ in range(rng.randint(0, 2))]
        return rng.choice(["sin", "f"]) + "(" + ", ".join(args + rng.choice([[], ["axis=0"]])) + ")"
    if r < 0.9:
        return _random_expr(rng, depth + 1) + rng.choice(["[0]", "[1:]", "[::2, -1]", "[:, x]"])
    return "[" + ",\n ".join(_random_expr(rng, depth + 1) for _ in range(rng.randint(0, 3))) + "]"


def _nodes(node):
    if isinstance(node, tuple):
        if hasattr(node, "_fields"):
            yield node
        for child in node:
            yield from _nodes(child)


def _text_at(lines: list[str], pos: Pos, length: int) -> str:
    return lines[pos.line - 1][pos.col - 1:pos.col - 1 + length]


@pytest.mark.parametrize("seed", range(20))
def test_node_positions_point_at_their_text(seed):
    rng = random.Random(seed)
    text = "\n".join(rng.choice(["", "v = ", "input q = "]) + _random_expr(rng) for _ in range(8))
    lines = text.split("\n")
    token_at = {t.pos: t.text for t in tokenize(text)}
    for node in _nodes(parse(text).statements):
        if isinstance(node, Name):
            assert _text_at(lines, node.pos, len(node.id)) == node.id == token_at[node.pos]
        elif isinstance(node, Num):
            assert _text_at(lines, node.pos, len(node.text)) == node.text == token_at[node.pos]
            assert node.value == float(node.text)
        elif isinstance(node, Call):
            assert _text_at(lines, node.pos, len(node.func) + 1) == node.func + "("
        elif isinstance(node, Binary):
            assert token_at[node.pos] == ("**" if node.op == "^" and _text_at(lines, node.pos, 2) == "**" else node.op)
        elif isinstance(node, Unary):
            assert _text_at(lines, node.pos, 1) == token_at[node.pos] == node.op
        elif isinstance(node, Keyword):
            assert _text_at(lines, node.pos, len(node.name) + 1) == node.name + "="
        elif isinstance(node, (Index, ArrayLit)):
            assert _text_at(lines, node.pos, 1) == "["
        elif isinstance(node, Bool):
            assert _text_at(lines, node.pos, 4) == "true"
