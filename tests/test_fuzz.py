"""Fuzzing (issue 6): whatever the input, gradcalc answers or refuses -- it never crashes.

Generators: random streams of the language's tokens, programs from a small
grammar of the language, random mutations of samples/*.grad, random text and
bytes, and random option values.  Each input goes through ``gradcalc.parse``,
the API (``evaluate`` and a few derivative commands, with small random
``at`` values for the inputs ``find_inputs`` discovers) and the CLI.

The only allowed outcomes (SPEC §7): a result, a ``GradcalcError`` (exit 2),
or exit 1 from ``check``.  Any other exception, exit 3, a traceback, a leaked
Python warning, broken JSON, or a run longer than EXAMPLE_SECONDS is a
failure.  The same machinery runs for many more examples in
tests/fuzz_long.py (``make fuzz``).

Hypothesis runs derandomized (a fixed seed), so CI sees the same examples
every time.
"""
from __future__ import annotations

import json
import os
import re
import signal
import traceback
import warnings
from dataclasses import dataclass, field

import numpy as np
import typer.main
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gradcalc
from gradcalc.cli.app import app
from gradcalc.errors import GradcalcError
from gradcalc.lower import FUNCTIONS, find_inputs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_ELEMENTS = 10**5          # keeps every example small and fast
MAX_STEPS = 10**5             # and ends a loop that never stops (newton_sqrt at a < 0) quickly
EXAMPLE_SECONDS = 20          # one example running longer than this is a failure
MAX_INPUT_SIZE = 1000         # larger declared shapes get no --at value (a clean error)

# typer builds its click command on every CliRunner.invoke (~15 ms); build it once.
COMMAND = typer.main.get_command(app)
runner = CliRunner()


# ==========================================================================
# Outcomes
# ==========================================================================


class Unexpected(Exception):
    """An outcome SPEC §7 does not allow."""

    def __init__(self, where: str, text, detail: str):
        super().__init__(f"{where}: {detail}")
        self.where, self.text, self.detail = where, text, detail


class FuzzTimeout(BaseException):
    """Raised by the alarm; a BaseException so that no `except Exception` swallows it."""


def _alarm(signum, frame):
    raise FuzzTimeout()


#: Failures that match a bug already known (and pinned by a strict xfail test in
#: test_hostile.py).  The pytest fuzz tests tolerate these, and only these, so that they
#: keep guarding against new failures; tests/fuzz_long.py counts them as unexpected.
#: Empty: every bug the fuzzers found so far is fixed.
KNOWN_BUGS: dict = {}


def known_bug(detail: str) -> str | None:
    for name, pattern in KNOWN_BUGS.items():
        if pattern.search(detail):
            return name
    return None


@dataclass
class Tally:
    """What a run of examples found (used by fuzz_long.py; the tests raise instead)."""

    examples: int = 0
    failures: list = field(default_factory=list)  # (generator, Unexpected)

    @property
    def unknown(self):
        return [f for f in self.failures if known_bug(f[1].detail) is None]


# ==========================================================================
# Points: small random values for the inputs a program reads
# ==========================================================================

FREE_SHAPES = [(), (), (2,), (3,), (2, 2), (2, 3)]


def make_point(program, rng) -> dict:
    """name -> array for the program's inputs (declared shape if any); defaults kept half the time."""
    try:
        inputs = find_inputs(program)
    except GradcalcError:
        return {}
    at = {}
    for info in inputs:
        if info.default is not None and rng.random() < 0.5:
            continue
        shape = info.shape if info.shape is not None else FREE_SHAPES[rng.integers(len(FREE_SHAPES))]
        if int(np.prod(shape, dtype=np.int64)) > MAX_INPUT_SIZE:
            continue
        value = np.round(rng.standard_normal(shape), 3)
        r = rng.random()
        if r < 0.1:
            value = np.zeros(shape)
        elif r < 0.15:
            value = -np.ones(shape)
        at[info.name] = value
    return at


def at_text(at: dict) -> list[str]:
    """--at options for a point; values written as the language's literals."""
    return [f"{k}={json.dumps(np.asarray(v).tolist())}" for k, v in at.items()]


# ==========================================================================
# The API
# ==========================================================================


def _api_calls(program, at, rng):
    inputs = [n for n in at]
    first = inputs[0] if inputs else "x"
    calls = {
        "evaluate": lambda: gradcalc.evaluate(program, at, all=True, max_elements=MAX_ELEMENTS, max_steps=MAX_STEPS),
        "grad": lambda: gradcalc.grad(program, at, sum=True, max_elements=MAX_ELEMENTS, max_steps=MAX_STEPS),
        "jacobian": lambda: gradcalc.jacobian(program, at, mode=["auto", "rev", "fwd"][rng.integers(3)],
                                              max_elements=MAX_ELEMENTS, max_steps=MAX_STEPS),
        "hessian": lambda: gradcalc.hessian(program, at, max_elements=MAX_ELEMENTS, max_steps=MAX_STEPS),
        "vjp": lambda: gradcalc.vjp(program, 1.0, at, max_elements=MAX_ELEMENTS, max_steps=MAX_STEPS),
        "jvp": lambda: gradcalc.jvp(program, {first: 1.0}, at, max_elements=MAX_ELEMENTS, max_steps=MAX_STEPS),
        "check": lambda: gradcalc.check(program, at, method=["central", "forward", "complex"][rng.integers(3)],
                                        points=int(rng.integers(2)), max_elements=MAX_ELEMENTS, max_steps=MAX_STEPS),
        "graph": lambda: gradcalc.api.graph(program, at, backward_pass=True, max_elements=MAX_ELEMENTS, max_steps=MAX_STEPS),
    }
    names = list(calls)[1:]
    chosen = ["evaluate"] + [names[i] for i in rng.choice(len(names), size=2, replace=False)]
    return [(name, calls[name]) for name in chosen]


def exercise_api(text: str, rng) -> None:
    """parse, then evaluate and two random derivative commands; only GradcalcError may escape."""
    try:
        program = gradcalc.parse(text)
    except GradcalcError:
        return
    except Exception as exc:  # noqa: BLE001
        raise Unexpected("parse", text, _describe(exc)) from exc
    at = make_point(program, rng)
    for name, call in _api_calls(program, at, rng):
        try:
            call()
        except GradcalcError:
            pass
        except Exception as exc:  # noqa: BLE001
            raise Unexpected(f"api {name} at={_point_repr(at)}", text, _describe(exc)) from exc


def _describe(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" ({os.path.relpath(tb[-1].filename, ROOT)}:{tb[-1].lineno})" if tb else ""
    return f"{type(exc).__name__}: {str(exc)[:300]}{where}"


def _point_repr(at) -> str:
    return "{" + ", ".join(f"{k}: {np.asarray(v).tolist()}" for k, v in at.items()) + "}"


# ==========================================================================
# The CLI
# ==========================================================================

FORMATS = ["table", "json", "plain"]


def cli_args(text: str, at: dict, rng) -> list[str]:
    """A random command line for program text (after '--', so text may start with '-')."""
    cmd = ["eval", "grad", "jacobian", "hessian", "vjp", "jvp", "check", "graph"][rng.integers(8)]
    fmt = FORMATS[rng.integers(3)]
    args = [cmd, "--max-elements", str(MAX_ELEMENTS), "--max-steps", str(MAX_STEPS)]
    if cmd == "graph":
        args += ["-f", ["table", "json", "plain", "dot"][rng.integers(4)]] + (["--backward"] if rng.random() < .5 else [])
    else:
        args += ["-f", fmt]
    for a in at_text(at):
        args += ["--at", a]
    first = next(iter(at), "x")
    extra = {"grad": ["--sum"] if rng.random() < 0.5 else [],
             "eval": ["--all"] if rng.random() < 0.5 else [],
             "vjp": ["--cotangent", "1"],
             "jvp": ["--tangent", f"{first}=1"],
             "jacobian": ["--mode", ["auto", "rev", "fwd"][rng.integers(3)]],
             "check": ["--method", ["central", "forward", "richardson", "complex"][rng.integers(4)]]
             + (["--points", "1"] if rng.random() < 0.3 else [])}.get(cmd, [])
    return args + extra + ["--", text]


def run_cli(args: list[str], input=None) -> None:
    """Invoke the CLI; raise Unexpected unless the outcome is one SPEC §7 allows."""
    r = runner.invoke(COMMAND, args, input=input, prog_name="gradcalc")
    label = "cli " + " ".join(a if len(a) < 60 else a[:57] + "..." for a in args[:-1])
    text = args[-1] if input is None else input
    out, err = r.stdout, r.stderr

    def fail(detail):
        raise Unexpected(label, text, detail)
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        fail(_describe(r.exception))
    if "Traceback" in out + err:
        fail("traceback in output: " + err[-300:])
    allowed = (0, 1, 2) if args[0] == "check" else (0, 2)
    if r.exit_code not in allowed:
        fail(f"exit {r.exit_code}: {err.strip()[-300:]}")
    if r.exit_code == 2 and not err.startswith(("error: ", "Usage: ")):
        fail(f"exit 2 without an error message: {err[:200]!r}")
    json_out = "json" in args[args.index("-f") + 1] if "-f" in args else False
    if json_out and (r.exit_code != 2 or err.startswith("error: ")):
        try:
            doc = json.loads(out)
        except ValueError:
            fail(f"-f json printed no JSON object: {out[:200]!r}")
        if doc.get("schema") != 1 or (r.exit_code == 2) != ("error" in doc):
            fail(f"bad JSON document: {out[:200]!r}")


# ==========================================================================
# One example
# ==========================================================================


def exercise(text, seed: int, *, api: bool = True, cli: bool = True, stdin: bool = False) -> None:
    """Run one input through the API and/or the CLI; raise Unexpected on a forbidden outcome.

    text is program text (str) or, with stdin=True, bytes fed to `gradcalc eval -`.
    Leaked Python warnings and runs longer than EXAMPLE_SECONDS are forbidden too.
    """
    rng = np.random.default_rng(seed)
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, EXAMPLE_SECONDS)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if stdin:
                run_cli(["eval", "--max-elements", str(MAX_ELEMENTS), "--max-steps", str(MAX_STEPS), "-f", FORMATS[rng.integers(3)], "-"],
                        input=text)
            else:
                if api:
                    exercise_api(text, rng)
                if cli:
                    try:
                        at = make_point(gradcalc.parse(text), rng)
                    except GradcalcError:
                        at = {}
                    except Exception as exc:  # noqa: BLE001
                        raise Unexpected("parse", text, _describe(exc)) from exc
                    run_cli(cli_args(text, at, rng))
        leaked = [w for w in caught if not issubclass(w.category, (DeprecationWarning, PendingDeprecationWarning))]
        if leaked:
            w = leaked[0]
            raise Unexpected("warnings", text, f"{w.category.__name__}: {w.message} "
                                               f"({os.path.relpath(w.filename, ROOT)}:{w.lineno})")
    except FuzzTimeout:
        raise Unexpected("timeout", text, f"longer than {EXAMPLE_SECONDS} s") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def exercise_value(option: str, value: str, seed: int) -> None:
    """A random option value (--at, --cotangent, --tangent) for a fixed valid program."""
    rng = np.random.default_rng(seed)
    base = {"--at": ["eval", "x + 1"], "--cotangent": ["vjp", "x * [1, 2]", "--at", "x=1"],
            "--tangent": ["jvp", "x * [1, 2]", "--at", "x=1"]}[option]
    fmt = FORMATS[rng.integers(3)]
    args = [base[0], "--max-elements", str(MAX_ELEMENTS), "--max-steps", str(MAX_STEPS), "-f", fmt, *base[2:], f"{option}={value}", "--", base[1]]
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, EXAMPLE_SECONDS)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run_cli(args)
        leaked = [w for w in caught if not issubclass(w.category, (DeprecationWarning, PendingDeprecationWarning))]
        if leaked:
            raise Unexpected("warnings", value, f"{leaked[0].category.__name__}: {leaked[0].message}")
    except FuzzTimeout:
        raise Unexpected("timeout", value, f"longer than {EXAMPLE_SECONDS} s") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# ==========================================================================
# Generators
# ==========================================================================

NUMBERS = ["0", "1", "2", "3", "0.5", ".5", "1.", "1e-3", "2E+1", "10", "1e309", "0.0", "007"]
NAMES = ["x", "y", "z", "w", "A", "b", "_", "a1", "input", "true", "false", "True", "pi", "e", "inf", "nan",
         "axis", "keepdims", "ddof", "k", "axes"]
FUNCS = sorted(FUNCTIONS)
OPS = ["+", "-", "*", "/", "@", "^", "**", "<", "<=", ">", ">=", "==", "!=", "=", "(", ")", "[", "]", ",",
       ":", ";", "\n", "# c\n"]
JUNK = ["!", ".", "'", '"', "{", "}", "%", "&", "|", "$", "~", "\\", "\t", "π", "²", "\x00", "\ufeff", "@/etc/passwd"]

token = st.one_of(st.sampled_from(NUMBERS), st.sampled_from(NAMES), st.sampled_from(FUNCS),
                  st.sampled_from(OPS), st.sampled_from(OPS), st.sampled_from(JUNK))
token_programs = st.lists(st.tuples(token, st.sampled_from([" ", " ", "", "\n"])), min_size=1, max_size=30).map(
    lambda parts: "".join(t + sep for t, sep in parts))

# -- a small grammar of the language: mostly well-formed, often ill-shaped ---------

ATOMS = ["x", "y", "z", "A", "1", "2", "0.5", "-1", "0", "pi", "inf", "nan", "[1, 2]", "[[1, 2], [3, 4]]",
         "[x, y]", "ones(2)", "zeros((2, 2))", "eye(2)", "arange(3)", "linspace(0, 1, 3)", "true", "[]", "[[]]",
         "ones((2, 0))", "zeros(0)", "eye(2, 3)", "eye(0)", "arange(3, 0)", "arange(0, 1, 0.25)", "linspace(0, 1, 0)",
         "zeros(x)", "ones((x, 2))", "eye(y)", "arange(x)", "1e308", "-0.0", "[x, 2 * y]", "[[x, 1], [2, y]]"]
UNARY = ["abs", "sign", "sqrt", "cbrt", "exp", "expm1", "exp2", "log", "log1p", "log2", "log10", "sin", "cos",
         "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "sigmoid", "relu",
         "softplus", "floor", "ceil", "round", "stop_gradient", "inv", "det", "flatten", "trace", "transpose"]
BINARY_FUNCS = ["atan2", "hypot", "maximum", "minimum", "pow", "matmul", "dot", "outer", "solve"]
BINOPS = ["+", "-", "*", "/", "@", "^", "**", "<", ">=", "==", "!="]
REDUCTIONS = ["sum", "mean", "prod", "max", "min", "norm", "var", "std", "logsumexp", "softmax", "log_softmax"]
REDUCE_ARGS = ["", ", axis=0", ", axis=-1", ", axis=1", ", axis=(0, 1)", ", keepdims=true", ", axis=0, keepdims=true",
               ", ddof=1", ", axis=5", ", axis=x", ", axis=(0, 0)", ", axis=()", ", keepdims=2", ", ddof=-1",
               ", foo=1", ", 0", ", axis=1.5", ", axis=[0]"]
INDEXES = ["[0]", "[-1]", "[1:]", "[::-1]", "[0, 1]", "[:, 0]", "[5]", "[0:1, ::2]", "[y]", "[0:y]", "[1 + 1]",
           "[::0]", "[0][0]", "[-5:5]", "[2:1]", "[0.5]", "[true]", "[:, :, :]", "[1:2:3]"]
SHAPES = ["(2, -1)", "(-1,)", "(4,)", "(1, 2)", "(2, 2)", "(3, 0)", "(-1, -1)", "x", "(2.5, 2)", "((2))", "()",
          "(0, -1)", "-1", "(1, 1, 1, -1)"]
ODD_CALLS = ["sin(x, y)", "sum()", "zeros()", "eye(2, 3, 4)", "stack()", "concat()", "where(x)", "clip(x)",
             "transpose(x, axes=(1, 0))", "transpose(x, axes=(0, 5))", "diag(x, k=x)", "reshape(x)",
             "softmax(x, axis=x)", "var(x, ddof=x)", "linspace(x, 1, 3)", "arange(0, x)", "norm(x, axis=(0, 1))",
             "solve(x, y)", "inv(zeros((2, 2)))", "det(zeros((0, 0)))", "max(zeros(0))", "mean(zeros((2, 0)), axis=0)"]
def _extend(children):
    return st.one_of(
        st.tuples(children, st.sampled_from(BINOPS), children).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(st.sampled_from(UNARY), children).map(lambda t: f"{t[0]}({t[1]})"),
        st.tuples(st.sampled_from(BINARY_FUNCS), children, children).map(lambda t: f"{t[0]}({t[1]}, {t[2]})"),
        st.tuples(st.sampled_from(REDUCTIONS), children, st.sampled_from(REDUCE_ARGS)).map(
            lambda t: f"{t[0]}({t[1]}{t[2]})"),
        st.tuples(children, st.sampled_from(INDEXES)).map(lambda t: f"{t[0]}{t[1]}"),
        st.tuples(children, st.sampled_from(SHAPES)).map(lambda t: f"reshape({t[0]}, {t[1]})"),
        st.tuples(children, children).map(lambda t: f"[{t[0]}, {t[1]}]"),
        st.tuples(children, children).map(lambda t: f"where({t[0]} > 0, {t[0]}, {t[1]})"),
        st.tuples(children, children, st.sampled_from(["", ", axis=1", ", axis=-1"])).map(
            lambda t: f"concat({t[0]}, {t[1]}{t[2]})"),
        st.tuples(children, children, st.sampled_from(["", ", axis=1"])).map(lambda t: f"stack({t[0]}, {t[1]}{t[2]})"),
        st.tuples(children, st.sampled_from(["", ", k=1", ", k=-1"])).map(lambda t: f"diag({t[0]}{t[1]})"),
        st.tuples(children, children, children).map(lambda t: f"clip({t[0]}, {t[1]}, {t[2]})"),
        children.map(lambda c: f"-{c}"),
        children.map(lambda c: f"{c}^2"),
    )


expressions = st.recursive(st.one_of(st.sampled_from(ATOMS), st.sampled_from(ODD_CALLS)), _extend,
                           max_leaves=10)


@st.composite
def grammar_programs(draw):
    lines = []
    if draw(st.booleans()):
        lines.append(draw(st.sampled_from(["input x", "input x[2]", "input x = 0.5", "input A[2, 2]",
                                           "input x, y[2] = [1, 2]", "input z[3] = [1, 2, 3]", "input x[0]",
                                           "input x[2, 0]", "input x[]", "input x = y", "input x[2] = x",
                                           "input x[2] = [1, 2, 3]", "input A[2, 2] = eye(2)", "input x, x",
                                           "input e = 1", "input pi[2]", "input x[100000, 100000]"])))
    n = draw(st.integers(1, 3))
    for i in range(n):
        e = draw(expressions)
        lines.append(f"v{i} = {e}" if i < n - 1 or draw(st.booleans()) else e)
        if i and draw(st.booleans()):
            lines[-1] += f" + v{i - 1}"
    return draw(st.sampled_from(["\n", "; "])).join(lines)


# -- mutations of the samples ---------------------------------------------------------


def _code_only(text: str) -> str:
    return "\n".join(line.split("#")[0].rstrip() for line in text.splitlines() if line.split("#")[0].strip())


SAMPLE_DIR = os.path.join(ROOT, "samples")
SAMPLES = sorted(
    open(os.path.join(SAMPLE_DIR, f), encoding="utf-8").read() for f in os.listdir(SAMPLE_DIR) if f.endswith(".grad"))
SAMPLE_CODE = [_code_only(s) for s in SAMPLES]
_TOKEN_RE = re.compile(r"[0-9]+\.?[0-9]*(?:[eE][+-]?[0-9]+)?|\w+|\*\*|<=|>=|==|!=|\s+|.", re.S)
INSERTS = NUMBERS + NAMES + FUNCS + OPS + JUNK + ["[", "]", "(", ")", ",", "0", "-"]


@st.composite
def mutated_samples(draw):
    text = draw(st.sampled_from(SAMPLE_CODE + SAMPLE_CODE + SAMPLES))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["delete", "insert", "swap", "del_token", "dup_token", "replace_token",
                                   "insert_token"]))
        if op in ("delete", "insert", "swap"):
            i = draw(st.integers(0, max(len(text) - 1, 0)))
            if op == "delete":
                text = text[:i] + text[i + draw(st.integers(1, 6)):]
            elif op == "insert":
                text = text[:i] + draw(st.sampled_from(INSERTS + ["\n", " "])) + text[i:]
            elif len(text) > 1:
                j = draw(st.integers(0, len(text) - 1))
                chars = list(text)
                chars[i], chars[j] = chars[j], chars[i]
                text = "".join(chars)
        else:
            toks = _TOKEN_RE.findall(text) or [""]
            i = draw(st.integers(0, len(toks) - 1))
            if op == "del_token":
                del toks[i]
            elif op == "dup_token":
                toks.insert(i, toks[i])
            elif op == "replace_token":
                toks[i] = draw(st.sampled_from(INSERTS))
            else:
                toks.insert(i, draw(st.sampled_from(INSERTS)) + " ")
            text = "".join(toks)
    return text


# -- text, bytes, option values -----------------------------------------------------------

random_text = st.one_of(st.text(max_size=60),
                        st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=60),
                        st.text(alphabet="()[]0123456789xy+-*/^,.;:=<>!@ \n#", max_size=60))
random_bytes = st.binary(max_size=80)
value_text = st.one_of(
    token_programs,
    st.text(alphabet="()[]0123456789.e+-*/^,;:= @x", max_size=40),
    st.sampled_from(["@", "@/", "@/dev/null", "@/etc/passwd", "@nonexistent.json", "@.", "@..", "@/proc/self/mem",
                     "[" * 200 + "1" + "]" * 200, "1" * 400, "1e999999", "-" * 50 + "1", "ones(100001)",
                     "zeros((100000, 100000))", "eye(400)", "[]", "[[]]", "[[], []]", "nan", "-inf", "()"]),
)
seeds = st.integers(0, 2**32 - 1)

GENERATORS = {
    "tokens": token_programs,
    "grammar": grammar_programs(),
    "mutations": mutated_samples(),
    "text": random_text,
}


# ==========================================================================
# The tests
# ==========================================================================

FUZZ = settings(deadline=None, derandomize=True, database=None, print_blob=True,
                suppress_health_check=list(HealthCheck))


def fuzz(examples: int) -> settings:
    return settings(FUZZ, max_examples=examples)


def _tolerate_known(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except Unexpected as u:
        if known_bug(u.detail) is None:
            raise


@fuzz(300)
@given(text=token_programs, seed=seeds)
def test_token_streams(text, seed):
    _tolerate_known(exercise, text, seed)


@fuzz(400)
@given(text=grammar_programs(), seed=seeds)
def test_grammar_programs(text, seed):
    _tolerate_known(exercise, text, seed)


@fuzz(300)
@given(text=mutated_samples(), seed=seeds)
def test_mutated_samples(text, seed):
    _tolerate_known(exercise, text, seed)


@fuzz(300)
@given(text=random_text, seed=seeds)
def test_random_text(text, seed):
    _tolerate_known(exercise, text, seed)


@fuzz(200)
@given(data=random_bytes, seed=seeds)
def test_random_bytes_on_stdin(data, seed):
    _tolerate_known(exercise, data, seed, stdin=True)


@fuzz(200)
@given(option=st.sampled_from(["--at", "--cotangent", "--tangent"]), value=value_text, seed=seeds)
def test_random_option_values(option, value, seed):
    if option == "--at":
        value = "x=" + value
    elif option == "--tangent":
        value = "x=" + value
    _tolerate_known(exercise_value, option, value, seed)


def test_samples_unmutated_are_fine():
    """The oracle itself: every sample passes through every API call and CLI command cleanly."""
    for text in SAMPLES:
        for seed in range(4):
            exercise(text, seed)


def test_oracle_catches_crashes(monkeypatch):
    """The oracle itself: internal errors are caught from the API and from every CLI command."""
    from gradcalc.syntax import _Parser
    from gradcalc.tape import Builder

    def boom(*args, **kwargs):
        raise RuntimeError("kaboom")
    with monkeypatch.context() as m:
        m.setattr(_Parser, "program", boom)
        for api, cli in ((True, False), (False, True)):
            try:
                exercise("x + 1", 0, api=api, cli=cli)
            except Unexpected as u:
                assert "kaboom" in u.detail
            else:
                raise AssertionError("the oracle missed an internal error")
    with monkeypatch.context() as m:  # after parsing: every command's CLI path
        m.setattr(Builder, "input", boom)
        caught = 0
        for seed in range(16):
            try:
                exercise("x + 1", seed, api=False)
            except Unexpected as u:
                assert "exit 3" in u.detail and "kaboom" in u.detail
                caught += 1
        # a few random option sets are refused before any tracing (a clean exit 2)
        assert caught >= 12, caught


@fuzz(300)
@given(text=st.one_of(grammar_programs(), mutated_samples()))
def test_parser_notes_the_names_each_statement_reads(text):
    # find_inputs reads Program.reads instead of walking each tree: the two must agree,
    # name for name (positions included), on every program that parses.
    from gradcalc.syntax import parse, walk_names
    try:
        program = parse(text)
    except GradcalcError:
        return
    assert len(program.reads) == len(program.statements)
    for st_, reads in zip(program.statements, program.reads):
        assert reads == tuple(walk_names(st_))


def _same_values(a, b) -> bool:
    """nan where nan, the same infinities, and the finite entries equal to about the last bit:
    a matrix product of the same operands can round differently in BLAS with the operands at
    other addresses (one ulp), and +0 and -0 count as equal (the band fold writes +0 off its
    diagonals where a dense product can make -0: see the derivative conventions)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or not np.array_equal(np.isnan(a), np.isnan(b)):
        return False
    finite = np.isfinite(a) & np.isfinite(b)
    if not np.array_equal(a[~finite & ~np.isnan(a)], b[~finite & ~np.isnan(b)]):
        return False  # the same infinities, in the same places
    scale = np.max(np.abs(a[finite]), initial=0.0)
    return bool(np.allclose(a[finite], b[finite], rtol=1e-12, atol=1e-12 * scale))


# Vector expressions of length 4 over x (length 5), c (4), A (4×5), B (5×4): the steps the band
# fold runs (unit-step slices, scalings, negation, sums, products with a fixed matrix) mixed
# with steps it leaves to the dense pass (step-2 slices, products of two tangents, sin, /).
_VEC4_ATOMS = ["x[1:]", "x[:-1]", "x[:4]", "x[-4:]", "x[0:4]", "A @ x", "x @ B", "c", "x[::-1][1:]",
               "concat(x[:2], x[3:])", "x[1:] * x[:-1]", "(x[1:] + y)", "(y - x[:-1])", "(x[:4] - x[0:1])",
               "(x[2:3] + c)", "(x[-4:] * y)"]  # y and x[0:1], x[2:3] have length 1: they broadcast


def _vec4(children):
    return st.one_of(
        st.tuples(children, st.sampled_from(["+", "-", "*"]), children).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        children.map(lambda e: f"-{e}"),
        children.map(lambda e: f"(c * {e})"),
        children.map(lambda e: f"({e} * 2.5)"),
        children.map(lambda e: f"({e} / c)"),
        children.map(lambda e: f"sin({e})"),
        children.map(lambda e: f"{e}^2"),
        children.map(lambda e: f"(A @ concat({e}, x[:1]))"),
        children.map(lambda e: f"({e} @ B.T)".replace("B.T", "transpose(B)")),
    )


vec4_expressions = st.recursive(st.sampled_from(_VEC4_ATOMS), _vec4, max_leaves=6)


@fuzz(150)
@given(e=vec4_expressions, form=st.sampled_from(["{e}", "sum({e} * {e}) + sum(sin({e}))", "sum(c * {e}^2)"]),
       seed=seeds, special=st.sampled_from(["none", "zero", "inf"]))
def test_band_fold_agrees_with_the_dense_pass(e, form, seed, special):
    # Jacobians (both modes) and Hessians run with identity seeds as bands, and again with
    # the fold turned off (no equation folds; every seed is a dense identity block): the same
    # numbers.
    import gradcalc.batched as batched_module
    rng = np.random.default_rng(seed)
    text = "input x[5], c[4], y[1], A[4, 5], B[5, 4]\n" + form.format(e=e)
    at = {"x": rng.standard_normal(5), "c": rng.standard_normal(4), "y": rng.standard_normal(1),
          "A": rng.standard_normal((4, 5)), "B": rng.standard_normal((5, 4))}
    if special != "none":  # a zero or an infinity in a fixed factor: zero tangents must stay zero
        at["c"][rng.integers(4)] = 0.0 if special == "zero" else np.inf
    real = batched_module._FOLDS
    calls = [("jacobian", lambda: gradcalc.jacobian(text, at, wrt=["x", "c", "y"], mode="rev")),
             ("jacobian", lambda: gradcalc.jacobian(text, at, wrt=["x", "c", "y"], mode="fwd")),
             ("hessian", lambda: gradcalc.hessian(text, at))]
    for name, call in calls:
        results = []
        for folds in (real, {}):
            batched_module._FOLDS = folds
            try:
                results.append(call())
            except GradcalcError as err:
                results.append(type(err))
            finally:
                batched_module._FOLDS = real
        folded, dense = results
        if isinstance(folded, type) or isinstance(dense, type):
            assert folded == dense, (name, text)
            continue
        for row in folded:
            for col in folded[row]:
                f, d = folded[row][col], dense[row][col]
                assert (f is None) == (d is None), (name, text, row, col)
                if f is not None:
                    assert _same_values(f, d), (name, text, row, col, f, d)
