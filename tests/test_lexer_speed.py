"""The bulk lexer (core/lexer.py: one findall, C-level passes) against the lexer it replaced.

``reference_scan`` below is the previous implementation, one regex match per token in a Python
loop, copied here unchanged as the oracle.  For every text, ``scan`` must give the same three
lists, or raise the same error: class, message, position (and its type: an int location or a
Pos) and hint.  The texts: every program in samples/ and examples/, the programs of README.md,
long generated programs, and hypothesis-generated soups of tokens, blanks, comments, strings,
brackets across lines, glued numbers, characters the language does not have, unclosed
brackets and strings, CRLF and tabs.  (Speed is make bench's to measure, not a test's.)
"""
from __future__ import annotations

import glob
import os
import re
import shlex

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gradcalc.errors import LINE_SHIFT, GradcalcError, Pos, SyntaxError_, to_pos
from gradcalc.lexer import OPERATORS, RESERVED, scan, tokenize

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# --- the oracle: the per-token lexer that core/lexer.py had before (copied, unchanged) ------------------

_NUMBER = r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_BLANK = r"[ \t\r\f\v]*(?:\#[^\n]*(?![^\n]))?"
_STRING = r"'[ -&(-~]*'|\"[ !#-~]*\""
_TOKEN = re.compile(
    _BLANK + r"(?:([A-Za-z_][A-Za-z_0-9]*)|([-+*/<>=!]=|\*\*|//|\.\.\.|[-+*/%@^<>=,:;])|([(\[{])|([)\]}])"
    rf"|({_NUMBER})([A-Za-z_])?|(\n)|({_STRING}))")
_NAME, _OP, _OPEN, _CLOSE, _NUM, _GLUED, _NEWLINE, _STR = range(1, 9)
_TRAILING = re.compile(_BLANK)
_OPENERS = {"(": ")", "[": "]", "{": "}"}


def reference_scan(text: str) -> tuple[list, list, list]:  # noqa: C901 (the oracle, as it was)
    kinds: list[str] = []
    texts: list[str] = []
    lcs: list[int] = []
    kind, txt, lc = kinds.append, texts.append, lcs.append
    reserved = RESERVED
    brackets: list[tuple[str, int]] = []
    line, before = 1, -1
    base = (line << LINE_SHIFT) - before
    m = None
    for m in iter(_TOKEN.scanner(text).match, None):
        k = m.lastindex
        if k == _NAME:
            word = m[k]
            kind(word if word in reserved else "name")
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
            if not brackets or brackets[-1][0] == "{":
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
        else:
            raise SyntaxError_(f"invalid number '{m[_NUM]}{m[_GLUED]}'", Pos(line, m.start(_GLUED) - before),
                               hint="put an operator between a number and a name, e.g. 2*x")
    i = _TRAILING.match(text, 0 if m is None else m.end()).end()
    if i < len(text):
        message, where, hint = _bad_character(text, i, line, before)
        raise SyntaxError_(message, where, hint=hint)
    if brackets:
        opener, opened = brackets[-1]
        raise SyntaxError_(f"'{opener}' is never closed", opened, hint=f"add '{_OPENERS[opener]}'")
    kind("eof")
    txt("")
    lc(base + len(text))
    return kinds, texts, lcs


_HINTS = {".": "attribute access is not part of the language", "!": "use 'not' for negation, '!=' for 'not equal'",
          "&": "use 'and' (elementwise, on masks)", "|": "use 'or' (elementwise, on masks)"}


def _bad_character(text: str, i: int, line: int, before: int):
    c = text[i]
    if c in "'\"":
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

# --- comparing -------------------------------------------------------------------------------------------


def outcome(lex, text: str):
    """What lex does with text: its lists, or its error's class, words, position (and type) and hint."""
    try:
        return "tokens", lex(text)
    except GradcalcError as e:
        return "error", type(e), e.message, type(e.pos), to_pos(e.pos), e.hint


def assert_same(text: str):
    assert outcome(scan, text) == outcome(reference_scan, text), repr(text)


# --- the programs of the repository and its README -------------------------------------------------------

def _repository_programs() -> list[tuple[str, str]]:
    paths = sorted(glob.glob(os.path.join(ROOT, "samples", "**", "*.grad"), recursive=True)
                   + glob.glob(os.path.join(ROOT, "examples", "**", "*.grad"), recursive=True))
    programs = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            programs.append((os.path.relpath(path, ROOT), f.read()))
    return programs


def _readme_programs() -> list[str]:
    """Program texts of README.md: plain ``` blocks, the SOURCE of each `$ gradcalc CMD SOURCE`
    that is not a file, and what `echo '...' |` pipes into one."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    programs = re.findall(r"^```\n(.*?)^```", readme, re.S | re.M)
    for line in re.findall(r"^\s*\$ (.*)$", readme, re.M):
        piped = re.match(r"echo '([^']*)' \| (.*)", line)
        if piped:
            programs.append(piped.group(1) + "\n")
            line = piped.group(2)
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        if len(words) >= 3 and words[0] == "gradcalc" and not os.path.exists(os.path.join(ROOT, words[2])):
            programs.append(words[2])
    return programs


REPOSITORY = _repository_programs()
README = _readme_programs()


def test_the_corpus_is_there():
    assert len(REPOSITORY) >= 20 and len(README) >= 30


@pytest.mark.parametrize("path, text", REPOSITORY, ids=[p for p, _ in REPOSITORY])
def test_repository_programs_lex_as_before(path, text):
    assert_same(text)
    assert_same(text.replace("\n", "\r\n"))
    assert_same(text.replace("    ", "\t"))


def test_readme_programs_lex_as_before():
    for text in README:
        assert_same(text)


def test_long_programs_lex_as_before():
    recurrence = "\n".join(["input x0 = 0.5"] + [f"x{i + 1} = sin(x{i})*1.01 + 0.1*x{i}" for i in range(3000)])
    assert_same(recurrence)
    matrix = "A = [\n" + ",\n".join(f"  [{i}, {i + 1}.5e-3, -{i}]  # row {i}" for i in range(500)) + "\n]\nsum(A)"
    assert_same(matrix)
    blocks = "".join(f"for i{k} in range({k}) {{\n  y = y + f(i{k},\n    2)\n}}\n" for k in range(300))
    assert_same(blocks)
    # errors far into a long text, and a bracket mismatch before a bad character
    assert_same(recurrence + "\ny = 2x")
    assert_same(recurrence + "\ny = (a]\n$")
    assert_same(recurrence + "\ny = (a\n$")
    assert_same(recurrence[:5000] + "(" + recurrence[5000:])


# --- what the oracle's own tests pinned, and edges ------------------------------------------------------

EDGES = [
    "", " ", "\n", "\t\n", "# only a comment", "x # comment at the end", "x # ab", " # c\n\t", "x\n# c",
    "sin(x)*y", "x**2 <= .5 # a comment\n(a\n+b)", "1e-3+1E+3-.5*1.", "1.e5", "1..5", "1.5.3", "x...y", "...",
    "2x", "12x", "1.5x", "1e5x", "1ex", "1e+x", ".5_", "x2 = 3y", "2_", "(2x", ")2x", "'a' 2x", "a[1,\n2x]",
    "$", "x $ y", "x.y", "a ! b", "a & b", "a | b", "a\x00b", "caf\u00e9", "x = \u00a0 1", "`", "?", "\\",
    "'a", '"a', "'a\nb'", "'ab\u00e9'", "'a\tb'", "x = 'it''s'", "'#' # '", "\"'\" + '\"'", "'(' + \")\"",
    "(", ")", "]", "(]", "[)", "((x)", "x)", "f(x", "f(x]", "[1, 2", "a[0", "x\n)", "(\n\n", "{", "}", "{]",
    "f(\n{\nx\n}\n)", "{\n(\n)\n}", "{\n[a,\nb]\n}", "([{\n}])", "(\n# c (\n)", "x = (1 +\n 2) # c\n{\n a\n}\n",
    "a\r\nb\r\n", "a\rb", "\r\n\r\n", "x = 1\f+\v2", "if x { y } elif z { w } else { v }", "None and not x or y",
    "a // b % c; d += 1; e -= 1; f *= 2; g /= 2; x[...]", "a == b != c >= d <= e > f < g", "x = y ^ 2 @ z",
    "(a]\n$", "(a\n$", "$\n(a]", ")$", "(\n2x", "'a\n)", "# c\n  'x", "x = ) # )",
]


@pytest.mark.parametrize("text", EDGES, ids=repr)
def test_edges_lex_as_before(text):
    assert_same(text)


def test_every_operator_and_reserved_word_is_its_own_kind():
    for op in sorted(OPERATORS):
        kinds, texts, _ = scan("([{}])" if op in "()[]{}" else f"a {op} b")
        assert op in kinds and op in texts, op
    for word in sorted(RESERVED):
        assert scan(word)[0] == [word, "eof"]
    # and no other spelling lexes as one token of its own text: two punctuation characters
    for a in "-+*/%@^<>=!,:;.":
        for b in "-+*/%@^<>=!,:;.":
            assert_same(a + b)
            assert_same(a + b + b)


def test_tokenize_gives_the_same_tokens():
    text = "input x = 0.5  # start\ny = f(x,\n  'fro')\nif y > 1 { z = -y }\n"
    kinds, texts, lcs = reference_scan(text)
    assert [(t.text, t.pos) for t in tokenize(text)] == [(t, to_pos(lc)) for t, lc in zip(texts, lcs)]
    assert [t.kind for t in tokenize(text)][:4] == ["name", "name", "op", "num"]


# --- generated texts -------------------------------------------------------------------------------------

_FRAGMENTS = st.sampled_from([
    "x", "y1", "_a", "sin", "if", "else", "for", "in", "None", "and", "not", "ifx", "0", "12", "1.", ".5", "1.5",
    "1e-3", "2E+4", "1.e5", "2x", "3_", ".5e", "1e", "+", "-", "*", "**", "/", "//", "%", "@", "^", "=", "==",
    "!=", "<", "<=", ">", ">=", "+=", "-=", "*=", "/=", ",", ":", ";", "...", ".", "!", "&", "|", "$", "?", "\\",
    "(", ")", "[", "]", "{", "}", "\n", "\r\n", "\n\n", " ", "  ", "\t", "\f", "\v", "\r", "# c", "#(", "# 'x",
    "#", "'ab c'", '"q r"', "'#'", "'('", "'", '"', "'\u00e9'", "\u00e9", "\u00a0", "\x00", "'a\tb'",
])


@settings(max_examples=1500, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_FRAGMENTS, max_size=40), st.lists(st.sampled_from(["", " ", "\t"]), max_size=40))
def test_token_soups_lex_as_before(fragments, blanks):
    """Fragments glued together or apart, so that they also form tokens across their seams."""
    text = "".join(f + (blanks[i] if i < len(blanks) else "") for i, f in enumerate(fragments))
    assert_same(text)


@settings(max_examples=800, deadline=None, database=None, derandomize=True)
@given(st.text(alphabet="ab1._ +*=!(){}[]\n\r\t#'\"\u00e9$", max_size=30))
def test_random_characters_lex_as_before(text):
    assert_same(text)


@settings(max_examples=300, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(["a = f(b,\n c)", "[1,\n2]", "{\nx\n}", "y = 2 # (\n", "'s' + 't'", "z[0]",
                                 "(", ")", "]", "}", "2x", "$", "'u"]), max_size=60))
def test_long_bracketed_programs_lex_as_before(lines):
    assert_same("\n".join(lines))
