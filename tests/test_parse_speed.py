"""The parser's fast paths (issue 18) against the straightforward rules they replace.

core/syntax.py's ``expr`` makes a lone number or name on the right of a binary
operator in place (no recursive call), reads a call's arguments without a
``call`` rule (a single lone argument, ``f(x)``, without ``arguments`` either),
``arguments`` makes a lone argument in place and hands keyword arguments to a rule
of their own, and ``block`` reads ``NAME = e`` without the ``assignment`` rule.
The reference below is the parser as it was before (a recursive call for every
operand, one rule per step): both must give the same trees, the same reads, the
same errors at the same positions, on programs built to hit every binding power,
the nesting cap and broken input.
"""
from __future__ import annotations

import random
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from gradcalc import syntax
from gradcalc.errors import Source, SyntaxError_
from gradcalc.syntax import (_AFTER_OPERAND, _ASSIGNMENTS, _BOOLS, _COMPARISON_BP, _COMPARISON_SET, _PREFIX, MAX_DEPTH, Binary,
                             Bool, Call, Keyword, Name, Num, Program, _Parser)


class _Reference(_Parser):
    """The rules as they were: every operand through expr, calls through call(), statements through their rules."""

    def expr(self, pos: int, min_bp: int, depth: int):
        if depth > MAX_DEPTH:
            self.too_deep(pos)
        kinds = self.kinds
        k = kinds[pos]
        if k == "num":
            left = Num(float(self.texts[pos]), self.texts[pos], self.lcs[pos])
            pos += 1
        elif k == "name" and self.texts[pos] in _BOOLS:
            left = Bool(_BOOLS[self.texts[pos]], self.lcs[pos])
            pos += 1
        elif k == "name" and kinds[pos + 1] == "(":
            end, args, kwargs = self.reference_arguments(pos + 2, depth)
            pos, left = end, Call(self.texts[pos], args, kwargs, self.lcs[pos])
        elif k == "name":
            left = Name(self.texts[pos], self.lcs[pos])
            self.note_read(left)
            pos += 1
        else:
            if k not in _PREFIX:
                self.not_an_operand(pos)
            pos, left = _PREFIX[k](self, pos, depth)
        chained = 0
        while True:
            at = pos
            bp = _AFTER_OPERAND.get(kinds[at])
            if bp is None or bp[0] <= min_bp:
                return pos, left
            lbp, rbp, op = bp
            if rbp is None:
                chained += 1
                if depth + chained > MAX_DEPTH:
                    self.too_deep(at)
                pos, left = op(self, at, left, depth)
                continue
            pos, right = self.expr(at + 1, rbp, depth + 1)
            left = Binary(op, left, right, self.lcs[at])
            if lbp == _COMPARISON_BP and kinds[pos] in _COMPARISON_SET:
                raise SyntaxError_("comparisons cannot be chained", self.lcs[pos],
                                   hint="combine them with 'and': a < b and b < c")

    def reference_arguments(self, pos: int, depth: int):
        kinds, texts, lcs = self.kinds, self.texts, self.lcs
        args, kwargs = [], []
        end = pos
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
        return end + 1, tuple(args), tuple(kwargs)

    def arguments(self, pos: int, depth: int):  # (call_on_value's: grad(f)(x))
        return self.reference_arguments(pos, depth)

    def block(self, pos: int, closer: str, ctx):  # every statement through its rule (assignment's too)
        kinds, names = self.kinds, self.names
        statements, marks = [], []
        while True:
            k = kinds[pos]
            if k == "newline" or k == ";":
                pos += 1
                continue
            if k == closer:
                return pos, tuple(statements), tuple(marks)
            marks.append(len(names))
            rule = _ASSIGNMENTS.get(kinds[pos + 1]) if k == "name" else None
            if rule is None:
                rule = self.statement_rule(pos)
            pos, node = rule(self, pos, ctx)
            statements.append(node)
            k = kinds[pos]
            if k == "newline" or k == ";":
                pos += 1
            elif k != closer:
                self.statement_not_ended(pos)


def _exact(node):
    """A node as nested plain data with its classes' names (a Num and a Name of equal
    fields differ) and floats by their bits."""
    if isinstance(node, tuple):
        return type(node).__name__, tuple(_exact(item) for item in node)
    return ("float", node.hex()) if type(node) is float else node


def _outcome(parser_class, text: str):
    source = Source(text, "prog.grad")
    try:
        statements, names, marks = parser_class(text).program()
        return "ok", _exact(statements), _exact(Program(statements, source, names, marks).reads)
    except SyntaxError_ as err:
        err = err.located(source)
        return "error", str(err), err.pos, err.hint


def _agree(text: str) -> None:
    assert _outcome(_Parser, text) == _outcome(_Reference, text), text


def test_the_reference_is_what_parse_gives_and_sees_a_difference():
    text = "y = sin(x)*1.01 + 0.1*x\nz = f(a, k=2)[0] if y < 2 else -y^2^c"
    program = syntax.parse(text)
    assert _outcome(_Reference, text) == ("ok", _exact(program.statements), _exact(program.reads))
    assert type(program) is Program and type(program.statements[0].value.right.left) is Num
    assert _outcome(_Parser, "y = 2*x") != _outcome(_Parser, "y = 2*z")  # (the comparison can fail)


ATOMS = ["x", "y1", "2", "0.5", "1e3", "007", "true", "False", "None", "'s'"]
OPERATORS = ["+", "-", "*", "/", "//", "%", "@", "^", "**", "<", "<=", "==", "!=", ">", ">=", "and", "or"]


def _expressions():
    def extend(inner):
        return st.one_of(
            st.tuples(inner, st.sampled_from(OPERATORS), inner).map(" ".join),
            st.tuples(st.sampled_from(["-", "+", "not "]), inner).map("".join),
            st.tuples(st.sampled_from(["sin", "f", "sum"]), st.lists(inner, max_size=3),
                      st.sampled_from(["", "axis=1", "k=x, axis=0", "k=1, 2", "k=1, k=2"])).map(
                lambda t: f"{t[0]}({', '.join(t[1] + ([t[2]] if t[2] else []))})"),
            inner.map(lambda e: f"({e})"),
            st.tuples(inner, st.sampled_from(["[0]", "[1:x]", "[::2, ...]", "(y)", "[]"])).map("".join),
            st.tuples(inner, inner, inner).map(lambda t: f"{t[0]} if {t[1]} else {t[2]}"),
            st.tuples(inner, inner).map(lambda t: f"[{t[0]}, {t[1]}]"),
        )
    return st.recursive(st.sampled_from(ATOMS), extend, max_leaves=12)


@st.composite
def _programs(draw):
    forms = ["v = {}", "v += {}", "{}", "a, b = {}", "v[0] = {}", "for i in range(3) {{ w = {} }}",
             "if {} {{ w = 1 }} else {{ w = 2 }}", "def h(p, q=1) = {}", "input x, y = {}", "return {}"]
    lines = [draw(st.sampled_from(forms)).format(draw(_expressions())) for _ in range(draw(st.integers(1, 4)))]
    text = draw(st.sampled_from(["\n", "; ", "\n\n"])).join(lines)
    if draw(st.booleans()):  # broken: a piece cut out, or one put in
        i = draw(st.integers(0, len(text)))
        cut = draw(st.integers(0, 3))
        text = text[:i] + draw(st.sampled_from(["", "(", ")", ",", "=", "*", "x", "1", "\n", "if", "]"])) + text[i + cut:]
    return text


@settings(max_examples=60, deadline=None)
@given(_programs())
def test_programs_parse_as_the_reference_parses_them(text):
    _agree(text)


def _random_expression(rng: random.Random, depth: int = 0) -> str:
    r = rng.random()
    if depth > 5 or r < 0.3:
        return rng.choice(ATOMS)
    inner = [_random_expression(rng, depth + 1) for _ in range(3)]
    if r < 0.6:
        return f"{inner[0]} {rng.choice(OPERATORS)} {inner[1]}"
    if r < 0.7:
        return rng.choice(["-", "+", "not "]) + inner[0]
    if r < 0.8:
        arguments = inner[:rng.randint(0, 3)] + rng.choice([[], ["axis=1"], ["k=x", "axis=0"], ["k=1", "2"]])
        return f"{rng.choice(['sin', 'f', 'sum'])}({', '.join(arguments)})"
    if r < 0.85:
        return f"({inner[0]})"
    if r < 0.9:
        return inner[0] + rng.choice(["[0]", "[1:x]", "[::2, ...]", "(y)"])
    return f"{inner[0]} if {inner[1]} else {inner[2]}" if r < 0.95 else f"[{inner[0]}, {inner[1]}]"


def test_random_token_soups_and_expressions_parse_as_the_reference_parses_them():
    rng = random.Random(18)
    words = ATOMS + OPERATORS + ["not", "if", "else", "(", ")", "[", "]", ",", ":", "...", "=", "+=", "\n", ";",
                                 "{", "}", "f(", "sin(x)", "k=", "x[1]"]
    for _ in range(1500):
        _agree(" ".join(rng.choice(words) for _ in range(rng.randint(1, 20))).replace("\\n", "\n"))
        _agree(f"v = {_random_expression(rng)}\n{_random_expression(rng)}")


def test_at_the_nesting_cap_the_same_trees_and_errors():
    for n in range(MAX_DEPTH - 4, MAX_DEPTH + 3):
        for text in ["(" * n + "x" + ")" * n, "-" * n + "x", "x" + "^x" * n, "x" + "^-y" * n, "x" + "[1]" * n,
                     "(" * n + "a + b" + ")" * n, "(" * n + "a * b + c" + ")" * n, "(" * n + "f(b)" + ")" * n,
                     "(" * n + "f(k=b)" + ")" * n, "f(" * n + "x" + ")" * n, "(" * n + "a if b else c" + ")" * n,
                     "1" + "^2" * n + " * 3", "x = " + " + ".join(["y"] * n)]:
            _agree(text)


def test_the_samples_parse_as_the_reference_parses_them():
    samples = sorted(Path(__file__).resolve().parents[1].glob("samples/**/*.grad"))
    assert samples
    for path in samples:
        _agree(path.read_text(encoding="utf-8"))


def test_calls_of_one_lone_argument_and_plain_assignments_parse_as_the_reference_parses_them():
    # expr's f(x) path (a number, a name, a literal true/False, then what may follow the ')'),
    # arguments' lone arguments, and block's NAME = e, each beside what must not take them
    calls = ["f(x)", "f(2)", "f(1e3)", "f(true)", "f(False)", "f(None)", "f(x)[0]", "f(x)(y)", "f(x)^2", "f(x) if c else d",
             "f(x, y)", "f(x,)", "f(x + 1)", "f(x[0])", "f(g(x))", "f(x)(k=1)", "f(k=x)", "f(x, k=2)", "f(2x)", "f(x y)",
             "f(x", "f()", "f(-x)", "f(x)*g(y) + h(2)", "true(x)", "f(x) < g(y) < 1"]
    for call in calls:
        for text in [call, f"v = {call}", f"v = 1 + {call}", f"v += {call}", f"v = {call}\nw = v", f"v == {call}",
                     f"v = ; {call}", f"v = {call} w = 1", f"for i in range(2) {{ v = {call} }}"]:
            _agree(text)


def test_a_long_recurrence_parses_as_the_reference_parses_it():
    text = "\n".join(["input x0 = 0.5"] + [f"x{i + 1} = sin(x{i})*1.01 + 0.1*x{i}" for i in range(300)])
    _agree(text)
    program = syntax.parse(text)
    assert [n.id for n in program.reads[7]] == ["x6", "x6"]
    assert program.statements[7].value.left.right.value == 1.01
