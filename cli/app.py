"""The gradcalc command line: one Typer command per subcommand.

Each command reads its SOURCE and options, calls the library (gradcalc.api),
and hands a payload to a renderer.  Errors become messages and exit codes in
one place (``_run``).  No math lives here.
"""
from __future__ import annotations

import sys
from enum import Enum
from typing import Annotated, Callable, List, Optional

import typer

from gradcalc.errors import GradcalcError, LimitError
from gradcalc.tape import DEFAULT_MAX_ELEMENTS

from . import render
from .errors import EXIT_INTERRUPTED, report_internal_error, report_user_error

COMMANDS: dict = {}  # name -> command function, in the order of the help text


def command(name: str):
    """Register a command function; build_app() turns the registry into a Typer app."""
    def register(fn):
        COMMANDS[name] = fn
        return fn
    return register


def build_app(names=None) -> typer.Typer:
    """The Typer app with the given commands (default: all of them)."""
    new = typer.Typer(
        name="gradcalc", add_completion=False, no_args_is_help=True,
        help="A gradient calculator: evaluate and differentiate numpy-like expressions.\n\n"
             "SOURCE is program text, a file, or - for standard input.",
        context_settings={"help_option_names": ["-h", "--help"]},
    )

    @new.callback()
    def _group():  # a group even when it holds one command
        pass

    for name in names or COMMANDS:
        new.command(name)(COMMANDS[name])
    return new


class Format(str, Enum):
    table = "table"
    json = "json"
    plain = "plain"


class Unconnected(str, Enum):
    zero = "zero"
    none = "none"
    error = "error"


class Method(str, Enum):
    central = "central"
    forward = "forward"
    richardson = "richardson"
    complex = "complex"


class Mode(str, Enum):
    auto = "auto"
    rev = "rev"
    fwd = "fwd"


# -- shared options ------------------------------------------------------------
SourceArg = Annotated[str, typer.Argument(help="program text, a path to a .grad file, or - for stdin",
                                          show_default=False)]
AtOpt = Annotated[Optional[List[str]], typer.Option(
    "--at", help="input values: NAME=VALUE[,NAME=VALUE...] or @FILE (.json/.npz); repeatable",
    show_default=False)]
OfOpt = Annotated[Optional[List[str]], typer.Option(
    "--of", help="the output (default: the last statement)", show_default=False)]
OfManyOpt = Annotated[Optional[List[str]], typer.Option(
    "--of", help="an output (repeatable; default: the last statement)", show_default=False)]
WrtOpt = Annotated[Optional[List[str]], typer.Option(
    "--wrt", help="differentiate with respect to NAME (repeatable; default: every input)",
    show_default=False)]
InputsWrtOpt = Annotated[Optional[List[str]], typer.Option(
    "--wrt", help="an input to differentiate with respect to (repeatable; default: every input)",
    show_default=False)]
FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="output format")]
JsonOpt = Annotated[bool, typer.Option("--json", help="same as --format json")]
PrecisionOpt = Annotated[int, typer.Option("--precision", min=1, max=17,
                                           help="significant digits in tables")]
DebugOpt = Annotated[bool, typer.Option("--debug", help="show a traceback on internal errors")]
MaxElementsOpt = Annotated[int, typer.Option("--max-elements", min=1,
                                             help="refuse arrays with more elements than this")]
SymbolicOpt = Annotated[bool, typer.Option("--symbolic", help="also print the closed-form derivative (sympy)")]
UnconnectedOpt = Annotated[Unconnected, typer.Option(
    "--unconnected", help="derivative of a name with no path to the output: zero, none (null) or error")]


class Options:
    """What every command shares: output format and error handling."""

    def __init__(self, fmt: Format, json_flag: bool, precision: int, debug: bool, max_elements: int):
        self.format = Format.json if json_flag else fmt
        self.precision = precision
        self.debug = debug
        self.max_elements = max_elements


def _run(opts: Options, body: Callable[[], Optional[int]]) -> None:
    """Run a command body; turn errors into messages and exit codes."""
    try:
        try:
            code = body() or 0
        except MemoryError:  # the machine's limit, not a bug: sizes within the element limit add up
            raise LimitError("out of memory: the arrays this command needs do not fit in this machine's "
                             "memory", hint="use smaller inputs: the element limit bounds each array, "
                             "not all of them together") from None
    except GradcalcError as err:
        if opts.debug:
            import traceback
            traceback.print_exception(err)
        code = _pipe_safe(lambda e=err: report_user_error(e, opts.format is Format.json), 2)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        code = EXIT_INTERRUPTED
    except BrokenPipeError:
        code = _reader_gone(0)
    except (typer.Exit, typer.Abort):
        raise
    except Exception as exc:  # noqa: BLE001 - anything else is a bug in gradcalc
        code = report_internal_error(exc, opts.debug)
    raise typer.Exit(code)


def _reader_gone(code: int) -> int:
    """stdout's reader went away (gradcalc ... | head -1): stop writing, quietly."""
    import os
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return code


def _pipe_safe(write: Callable[[], int], code: int) -> int:
    try:
        return write()
    except BrokenPipeError:
        return _reader_gone(code)


def _source(arg: str):
    import re

    from gradcalc.api import parse
    from gradcalc.errors import SyntaxError_
    from gradcalc.values import read_source

    src = read_source(arg)
    try:
        return parse(src.text, src.label)
    except SyntaxError_ as err:
        # "model.grad" or "dir/model": a path that does not exist, read as program text
        if src.label == "<expr>" and re.fullmatch(r"[\w./\\~-]+", arg) and (
                re.search(r"[/\\]", arg) or re.search(r"\.(grad|txt|json|npy|csv)$", arg)):
            err.hint = f"there is no file '{arg}'; SOURCE is a file, - for stdin, or program text"
        raise


def _at(items, opts: Options) -> dict:
    from gradcalc.values import parse_assignments
    return parse_assignments(items, "--at", opts.max_elements)


def _emit(opts: Options, payload: dict, plain_lines, show_table: Callable[[], None]) -> None:
    if opts.format is Format.json:
        render.dump_json(payload)
    elif opts.format is Format.plain:
        render.print_plain(plain_lines)
    else:
        show_table()
    render.print_warnings(payload.get("warnings"))


def _grad_exec(opts: Options, cmd: str, timeout: float, point: dict, wrt, method: str) -> None:
    from gradcalc.blackbox import BlackBox, fd_gradient
    from gradcalc.errors import UsageError
    if not point:
        raise UsageError("grad --exec needs the point: --at NAME=VALUE for every input of the program")
    box = BlackBox(cmd, timeout)
    result = fd_gradient(box, point, method=method, wrt=wrt, label=cmd)
    gradient, error, value = dict(result), result.error_estimate, result.value
    payload = {"command": "grad", "of": "value", "value": value, "gradient": gradient,
               "error_estimate": error, "method": method, "exec": cmd, "requests": box.requests,
               "unconnected": [], "warnings": []}

    def table():
        render.print_table(f"finite-difference gradient of '{cmd}' ({method}, {box.requests} request"
                           f"{'s' if box.requests != 1 else ''})",
                           [(f"d/d{k}", v) for k, v in gradient.items()] +
                           [(f"error estimate d/d{k}", v) for k, v in error.items()],
                           precision=opts.precision, caption=_point_caption(point, opts.precision))
    _emit(opts, payload, list(gradient.values()), table)


def _symbolic_payload(entries: dict) -> dict:
    return {k: {"text": v["text"], "latex": v["latex"], "note": v["note"]} for k, v in entries.items()}


def _print_symbolic(entries: dict) -> None:
    out = render.console()
    out.print("closed form (sympy)", style="bold")
    for label, e in entries.items():
        text = e["text"] if e["text"] is not None else "(too large to print)"
        out.print(f"  {label} = {text}", markup=False)
        if e["note"]:
            out.print(f"    note: {e['note']}", markup=False)


def _one(of, command: str):
    """The single --of of grad, jvp and hessian (repeated --of is for jacobian, vjp, check, eval)."""
    if of and len(of) > 1:
        from gradcalc.errors import UsageError
        raise UsageError(f"{command} takes one --of, got {len(of)}",
                         hint="jacobian, vjp and check take several outputs")
    return of[0] if of else None


def _of_label(name: str) -> str:
    """How an output is named in tables: bare expressions (_, _2) read as f, f2."""
    return "f" + name[1:] if name.startswith("_") else name


def _point_caption(at: dict, precision: int) -> str | None:
    if not at:
        return None
    def shown(v):  # a value of more than 8 numbers by its shape alone
        if getattr(v, "size", 1) <= 8:
            return render.value_text(v, precision)
        return f"({render.shape_text(v)} values)"
    return "at " + ", ".join(f"{k}={shown(v)}" for k, v in at.items())


# ==========================================================================
# eval
# ==========================================================================

@command("eval")
def eval_cmd(
    source: SourceArg,
    at: AtOpt = None,
    of: OfManyOpt = None,
    all_: Annotated[bool, typer.Option("--all", help="show every named value")] = False,
    format: FormatOpt = Format.table,
    json_: JsonOpt = False,
    precision: PrecisionOpt = 6,
    debug: DebugOpt = False,
    max_elements: MaxElementsOpt = DEFAULT_MAX_ELEMENTS,
):
    """Evaluate a program: the value of its output (or of every name with --all)."""
    opts = Options(format, json_, precision, debug, max_elements)

    def body():
        from gradcalc.api import evaluate
        r = evaluate(_source(source), _at(at, opts), of=of, all=all_, max_elements=max_elements)
        payload = {"command": "eval", "values": dict(r), "warnings": r.warnings}
        _emit(opts, payload, list(r.values()),
              lambda: render.print_table("values", list(r.items()), precision=precision))
    _run(opts, body)


# ==========================================================================
# grad
# ==========================================================================

ExecOpt = Annotated[Optional[str], typer.Option(
    "--exec", help="a black-box program speaking the JSON protocol (README: Black boxes)",
    show_default=False)]
ExecTimeoutOpt = Annotated[float, typer.Option("--exec-timeout", min=0.001,
                                               help="seconds the --exec program may run per request")]
OptionalSourceArg = Annotated[Optional[str], typer.Argument(
    help="program text, a path to a .grad file, or - for stdin (omit with --exec)", show_default=False)]


@command("grad")
def grad_cmd(
    source: OptionalSourceArg = None,
    at: AtOpt = None,
    of: OfOpt = None,
    wrt: WrtOpt = None,
    sum_: Annotated[bool, typer.Option("--sum", help="differentiate the sum of a non-scalar output")] = False,
    unconnected: UnconnectedOpt = Unconnected.zero,
    symbolic: SymbolicOpt = False,
    exec_: ExecOpt = None,
    exec_timeout: ExecTimeoutOpt = 60.0,
    method: Annotated[Optional[Method], typer.Option(
        "--method", help="with --exec: central, forward or richardson (default)", show_default=False)] = None,
    format: FormatOpt = Format.table,
    json_: JsonOpt = False,
    precision: PrecisionOpt = 6,
    debug: DebugOpt = False,
    max_elements: MaxElementsOpt = DEFAULT_MAX_ELEMENTS,
):
    """The gradient of a scalar output with respect to inputs or intermediate values.

    With --exec CMD (and no SOURCE): the finite-difference gradient of a black box.
    """
    opts = Options(format, json_, precision, debug, max_elements)

    def body():
        from gradcalc.api import grad
        from gradcalc.errors import UsageError
        point = _at(at, opts)
        if exec_ is not None:
            if source is not None:
                raise UsageError("grad --exec differentiates the black box alone; give no SOURCE",
                                 hint="to compare a program with a black box, use check SOURCE --exec CMD")
            return _grad_exec(opts, exec_, exec_timeout, point, wrt, method.value if method else "richardson")
        if method is not None:
            raise UsageError("--method applies to grad --exec only")
        if source is None:
            raise UsageError("missing SOURCE", hint="gradcalc grad 'sin(x)*y' --at x=1,y=2")
        r = grad(_source(source), point, of=_one(of, "grad"), wrt=wrt, sum=sum_, unconnected=unconnected.value,
                 symbolic=symbolic, max_elements=max_elements)
        payload = {"command": "grad", "of": r.of, "value": r.value, "gradient": dict(r),
                   "unconnected": r.unconnected, "warnings": r.warnings}
        if r.symbolic is not None:
            payload["symbolic"] = _symbolic_payload(r.symbolic)
        f = _of_label(r.of)
        f = f"sum({f})" if sum_ else f
        title = f"gradient of {f} = {render.value_text(r.value.sum() if sum_ else r.value, precision)}"

        def table():
            rows = [(f"d{f}/d{k}" + (" (unconnected)" if k in r.unconnected else ""), v)
                    for k, v in r.items()]
            render.print_table(title, rows, precision=precision, caption=_point_caption(point, precision))
            if r.symbolic is not None:
                _print_symbolic({f"d{f}/d{k}": v for k, v in r.symbolic.items()})
        _emit(opts, payload, list(r.values()), table)
    _run(opts, body)


# ==========================================================================
# jacobian, vjp, jvp, hessian
# ==========================================================================

@command("jacobian")
def jacobian_cmd(
    source: SourceArg,
    at: AtOpt = None,
    of: OfManyOpt = None,
    wrt: WrtOpt = None,
    mode: Annotated[Mode, typer.Option("--mode", help="rev: a row per output element; fwd: a "
                                                      "column per input element; auto: fewer passes")] = Mode.auto,
    unconnected: UnconnectedOpt = Unconnected.zero,
    symbolic: SymbolicOpt = False,
    format: FormatOpt = Format.table,
    json_: JsonOpt = False,
    precision: PrecisionOpt = 6,
    debug: DebugOpt = False,
    max_elements: MaxElementsOpt = DEFAULT_MAX_ELEMENTS,
):
    """The Jacobian d(of)/d(wrt), of shape of.shape + wrt.shape (JAX's convention)."""
    opts = Options(format, json_, precision, debug, max_elements)

    def body():
        from gradcalc.api import jacobian
        r = jacobian(_source(source), _at(at, opts), of=of, wrt=wrt, mode=mode.value,
                     unconnected=unconnected.value, symbolic=symbolic, max_elements=max_elements)
        payload = {"command": "jacobian", "of": r.of, "value": r.value, "jacobian": dict(r),
                   "unconnected": r.unconnected, "warnings": r.warnings}
        if r.symbolic is not None:
            payload["symbolic"] = {o: _symbolic_payload(row) for o, row in r.symbolic.items()}
        blocks = [(o, w, v) for o, row in r.items() for w, v in row.items()]

        def table():
            for o, w, v in blocks:
                f = _of_label(o)
                title = f"jacobian d{f}/d{w}  ({r.mode} mode: {'a row per output element' if r.mode == 'rev' else 'a column per input element'})"
                if v is None:
                    render.print_table(title, [(f"d{f}/d{w}", None)], precision=precision)
                else:
                    render.print_matrix(title, v, f, w, r.value[o].shape,
                                        v.shape[r.value[o].ndim:], precision)
            if r.symbolic is not None:
                _print_symbolic({f"d{_of_label(o)}/d{w}": e for o, row in r.symbolic.items()
                                 for w, e in row.items()})
        _emit(opts, payload, [v for _, _, v in blocks], table)
    _run(opts, body)


@command("vjp")
def vjp_cmd(
    source: SourceArg,
    cotangent: Annotated[List[str], typer.Option(
        "--cotangent", help="the vector v of v^T J: VALUE (the output's shape, or a scalar), @FILE, "
                            "or NAME=VALUE per output", show_default=False)],
    at: AtOpt = None,
    of: OfManyOpt = None,
    wrt: WrtOpt = None,
    unconnected: UnconnectedOpt = Unconnected.zero,
    format: FormatOpt = Format.table,
    json_: JsonOpt = False,
    precision: PrecisionOpt = 6,
    debug: DebugOpt = False,
    max_elements: MaxElementsOpt = DEFAULT_MAX_ELEMENTS,
):
    """The vector-Jacobian product v^T J (TensorFlow's output_gradients / grad_ys)."""
    opts = Options(format, json_, precision, debug, max_elements)

    def body():
        from gradcalc.api import vjp
        from gradcalc.values import parse_assignments, parse_value
        if len(cotangent) == 1 and not _is_assignment(cotangent[0]):
            ct = parse_value(cotangent[0], "--cotangent", max_elements)
        else:
            ct = parse_assignments(cotangent, "--cotangent", max_elements, allow_files=False)
        r = vjp(_source(source), ct, _at(at, opts), of=of, wrt=wrt, unconnected=unconnected.value,
                max_elements=max_elements)
        single = isinstance(r.of, str)
        payload = {"command": "vjp", "of": r.of, "value": r.value,
                   "cotangent": r.cotangent[r.of] if single else r.cotangent, "vjp": dict(r),
                   "unconnected": r.unconnected, "warnings": r.warnings}
        outs = [_of_label(o) for o in (r.of if not single else [r.of])]
        title = "vjp: v^T J, one backward pass (no Jacobian is formed)"

        def table():
            render.print_table("cotangent v", [(_of_label(k), v) for k, v in r.cotangent.items()],
                               precision=precision)
            render.print_table(title, [(f"v^T d{'+'.join(outs)}/d{k}", v) for k, v in r.items()],
                               precision=precision)
        _emit(opts, payload, list(r.values()), table)
    _run(opts, body)


def _is_assignment(text: str) -> bool:
    import re
    return re.match(r"\s*[A-Za-z_][A-Za-z_0-9]*\s*=(?!=)", text) is not None


@command("jvp")
def jvp_cmd(
    source: SourceArg,
    tangent: Annotated[List[str], typer.Option(
        "--tangent", help="NAME=VALUE: the tangent of an input (repeatable; others are zero)",
        show_default=False)],
    at: AtOpt = None,
    of: OfOpt = None,
    format: FormatOpt = Format.table,
    json_: JsonOpt = False,
    precision: PrecisionOpt = 6,
    debug: DebugOpt = False,
    max_elements: MaxElementsOpt = DEFAULT_MAX_ELEMENTS,
):
    """The Jacobian-vector product J v, by forward mode."""
    opts = Options(format, json_, precision, debug, max_elements)

    def body():
        from gradcalc.api import jvp
        from gradcalc.values import parse_assignments
        tangents = parse_assignments(tangent, "--tangent", max_elements, allow_files=False)
        r = jvp(_source(source), tangents, _at(at, opts), of=_one(of, "jvp"), max_elements=max_elements)
        payload = {"command": "jvp", "of": r.of, "value": r.value, "jvp": r.jvp, "warnings": r.warnings}

        def table():
            render.print_table("tangent v", list(tangents.items()), precision=precision)
            render.print_table("jvp: J v, one forward pass", [("J v", r.jvp), (_of_label(r.of), r.value)],
                               precision=precision)
        _emit(opts, payload, [r.jvp], table)
    _run(opts, body)


@command("hessian")
def hessian_cmd(
    source: SourceArg,
    at: AtOpt = None,
    of: OfOpt = None,
    wrt: InputsWrtOpt = None,
    format: FormatOpt = Format.table,
    json_: JsonOpt = False,
    precision: PrecisionOpt = 6,
    debug: DebugOpt = False,
    max_elements: MaxElementsOpt = DEFAULT_MAX_ELEMENTS,
):
    """Second derivatives of a scalar output: forward mode over the backward pass."""
    opts = Options(format, json_, precision, debug, max_elements)

    def body():
        from gradcalc.api import hessian
        import numpy as np
        r = hessian(_source(source), _at(at, opts), of=_one(of, "hessian"), wrt=wrt, max_elements=max_elements)
        payload = {"command": "hessian", "of": r.of, "value": r.value, "hessian": dict(r),
                   "warnings": r.warnings}
        blocks = [(a, b, v) for a, row in r.items() for b, v in row.items()]

        def table():
            names = list(r)
            if all(np.shape(r[n][n]) == () for n in names):
                grid = np.array([[r[a][b] for b in names] for a in names])
                _named_matrix(f"hessian of {_of_label(r.of)}", grid, names, precision)
                return
            for a, b, v in blocks:
                render.print_table(f"d²{r.of}/d{a}d{b}", [(f"d²{r.of}/d{a}d{b}", v)], precision=precision)
        _emit(opts, payload, [v for _, _, v in blocks], table)
    _run(opts, body)


@command("check")
def check_cmd(
    sources: Annotated[Optional[List[str]], typer.Argument(
        help="programs, .grad files or directories (every *.grad inside); none with --exec alone",
        show_default=False)] = None,
    at: AtOpt = None,
    of: OfManyOpt = None,
    wrt: WrtOpt = None,
    method: Annotated[Optional[Method], typer.Option(
        "--method", help="finite-difference method: central (default), forward, richardson (default "
                         "with --exec alone) or complex", show_default=False)] = None,
    rtol: Annotated[Optional[float], typer.Option("--rtol", help="relative tolerance (default per "
                                                  "method: central 1e-6, forward 1e-4, richardson 1e-8, complex 1e-12)",
                                                  show_default=False)] = None,
    atol: Annotated[Optional[float], typer.Option("--atol", help="absolute tolerance (default per "
                                                  "method: central 1e-8, forward 1e-5, richardson 1e-10, complex 1e-14)",
                                                  show_default=False)] = None,
    points: Annotated[int, typer.Option("--points", min=0, help="also check N random points "
                                        "(inputs without --at values ~ N(0, 1))")] = 0,
    seed: Annotated[int, typer.Option("--seed", help="random seed for --points and --directions")] = 0,
    directions: Annotated[int, typer.Option("--directions", min=0, help="check K random directions "
                                            "instead of the full Jacobian")] = 0,
    taylor: Annotated[bool, typer.Option("--taylor", help="also measure the Taylor remainder's order")] = False,
    symbolic: Annotated[bool, typer.Option("--symbolic", help="add sympy's closed form as a third oracle")] = False,
    expect: Annotated[Optional[str], typer.Option("--expect", help="stored JSON output of grad or "
                                                  "jacobian to compare with", show_default=False)] = None,
    junit_xml: Annotated[Optional[str], typer.Option("--junit-xml", help="write a JUnit XML report",
                                                     show_default=False)] = None,
    exec_: ExecOpt = None,
    exec_timeout: ExecTimeoutOpt = 60.0,
    format: FormatOpt = Format.table,
    json_: JsonOpt = False,
    precision: Annotated[int, typer.Option("--precision", min=1, max=17,
                                           help="significant digits in tables")] = 3,
    debug: DebugOpt = False,
    max_elements: MaxElementsOpt = DEFAULT_MAX_ELEMENTS,
):
    """Check automatic derivatives against finite differences (and reverse against forward mode).

    Exit status 1 if any result fails.
    """
    opts = Options(format, json_, precision, debug, max_elements)

    def body():
        from gradcalc.numerics import check, expand_sources
        point = _at(at, opts)
        stored = _load_expect(expect) if expect else None
        results, tol = [], None
        if exec_ is not None:
            unused = [flag for flag, given in (("--points", points), ("--directions", directions),
                                               ("--taylor", taylor), ("--expect", expect),
                                               ("--symbolic", symbolic)) if given]
            if unused or (sources and method is not None):
                from gradcalc.errors import UsageError
                flag = (unused or ["--method"])[0]
                hint = ("check SOURCE --exec compares values, so it takes no --method" if flag == "--method"
                        else "check --exec compares the black box's gradient with its own finite "
                             "differences at the --at point")
                raise UsageError(f"{flag} does not apply to check --exec", hint=hint)
            results, tol = _check_exec(exec_, exec_timeout, sources or [], point, of, wrt,
                                       method.value if method else "richardson", rtol, atol, max_elements)
        elif not sources:
            from gradcalc.errors import UsageError
            raise UsageError("missing SOURCE", hint="gradcalc check samples/ (or --exec CMD)")
        for s in expand_sources(sources or []) if exec_ is None else ():
            program = _source(s)
            r = check(program, point, of=of, wrt=wrt, points=points, seed=seed,
                      method=method.value if method else "central", rtol=rtol, atol=atol, directions=directions,
                      taylor=taylor, expect=stored, symbolic=symbolic, max_elements=max_elements)
            results += r.results
            tol = (r.rtol, r.atol)
            if not r.results:  # (passing, but a CI job should hear that nothing was compared)
                sys.stderr.write(f"warning: {program.source.label}: nothing to check: the program has no "
                                 "inputs\n")
        ok = all(x.ok for x in results)
        if junit_xml:
            _write_junit(junit_xml, results)
        payload = {"command": "check", "ok": ok, "rtol": tol[0], "atol": tol[1],
                   "results": [x.as_dict() for x in results]}
        verdict = 0 if ok else 1  # kept even if the reader of stdout goes away
        try:
            _emit(opts, payload, [], lambda: _check_table(results, ok, precision, tol))
            if opts.format is Format.plain:
                for x in results:
                    sys.stdout.write(f"{'ok' if x.ok else 'FAIL'} {x.source} point={x.point} "
                                     f"{_result_label(x)} max_abs_err={x.max_abs_err:.3g} "
                                     f"max_rel_err={x.max_rel_err:.3g}\n")
                sys.stdout.flush()
        except BrokenPipeError:
            return _reader_gone(verdict)
        return verdict
    _run(opts, body)


def _check_exec(cmd, timeout, sources, point, of, wrt, method, rtol, atol, max_elements):
    """check --exec CMD (the program's gradient against differences of its values), or
    check SOURCE --exec CMD (the program against gradcalc's own derivatives of SOURCE)."""
    from gradcalc.blackbox import BlackBox, check_against_source, check_blackbox
    from gradcalc.lower import trace
    from gradcalc.numerics import expand_sources
    box = BlackBox(cmd, timeout)
    if not sources:
        if not point:
            from gradcalc.errors import UsageError
            raise UsageError("check --exec needs the point: --at NAME=VALUE for every input")
        r = check_blackbox(box, point, method=method, rtol=rtol, atol=atol, label=cmd, wrt=wrt)
        return r.results, (r.rtol, r.atol)
    results = []
    for s in expand_sources(sources):
        program = _source(s)
        tr = trace(program, point, max_elements=max_elements)
        r = check_against_source(box, tr, rtol=rtol, atol=atol, label=program.source.label, of=of, wrt=wrt)
        results += r.results
    return results, (r.rtol, r.atol)  # (expand_sources gives at least one source)


def _load_expect(path: str) -> dict:
    import json
    from gradcalc.errors import ValueError_
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as err:
        raise ValueError_(f"--expect: cannot read '{path}': {err}") from None
    if not isinstance(data, dict):
        raise ValueError_(f"--expect: '{path}' must hold a JSON object from grad or jacobian -f json")
    return data


def _check_table(results, ok, precision, tol=None):
    """One table per source, one row per result; the verdict first, so that it survives a
    narrow terminal."""
    from rich.table import Table
    from rich.text import Text
    methods = sorted({x.method for x in results})
    one_method = len(methods) == 1
    taylor = any("taylor_order" in x.extra for x in results)
    out = render.console()
    failed = sum(not x.ok for x in results)
    how = f"; {methods[0]}" if one_method and results else ""
    if tol and tol[0] is not None:
        how += f", rtol {tol[0]:g}, atol {tol[1]:g}"
    out.print(f"check: {len(results) - failed} passed, {failed} failed{how}", style="bold")
    for source in dict.fromkeys(x.source for x in results):
        table = Table(title=source, title_justify="left", title_style="bold")
        table.add_column("", no_wrap=True, min_width=1)
        table.add_column("pt", justify="right", no_wrap=True)
        table.add_column("derivative", no_wrap=True)
        table.add_column("abs err", justify="right", no_wrap=True, min_width=8)
        table.add_column("rel err", justify="right", no_wrap=True, min_width=8)
        table.add_column("worst", no_wrap=True)
        if not one_method:
            table.add_column("method", no_wrap=True)
        table.add_column("step", justify="right", no_wrap=True)
        if taylor:
            table.add_column("order", justify="right", no_wrap=True)
        table.add_column("notes", overflow="fold")
        for x in results:
            if x.source != source:
                continue
            cells = [Text("✓", style="green") if x.ok else Text("✗", style="red"), str(x.point), _result_label(x),
                     render.fmt(x.max_abs_err, precision), render.fmt(x.max_rel_err, precision),
                     "[" + ", ".join(map(str, x.worst_index)) + "]"]
            if not one_method:
                cells.append(x.method)
            cells.append(render.fmt(x.step, precision))
            if taylor:
                order = x.extra.get("taylor_order")
                cells.append("" if order is None else render.fmt(order, precision))
            cells.append("; ".join(x.notes))
            table.add_row(*cells)
        out.print(table)


def _result_label(x) -> str:
    of = _of_label(x.of)
    return f"{of} (value)" if not x.wrt else f"d{of}/d{x.wrt}"


_NOT_XML = "[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]"  # what XML 1.0 cannot hold


def _xml_text(text: str) -> str:
    """text with each character XML cannot hold (a control character in a file name or an
    --exec command, say) written as its escape, \\x01."""
    import re
    return re.sub(_NOT_XML, lambda m: repr(m.group())[1:-1], text)


def _write_junit(path: str, results) -> None:
    import xml.etree.ElementTree as ET
    failures = sum(not x.ok for x in results)
    suite = ET.Element("testsuite", name="gradcalc.check", tests=str(len(results)),
                       failures=str(failures), errors="0")
    for x in results:
        case = ET.SubElement(suite, "testcase", classname=_xml_text(f"gradcalc.check.{x.source}"),
                             name=_xml_text(f"point {x.point}: {_result_label(x)} ({x.method})"))
        detail = (f"max_abs_err={x.max_abs_err!r} max_rel_err={x.max_rel_err!r} "
                  f"worst_index={x.worst_index} step={x.step!r}")
        notes = [_xml_text(n) for n in x.notes]
        if not x.ok:
            fail = ET.SubElement(case, "failure", message="; ".join(notes) or "derivative mismatch")
            fail.text = detail + ("\n" + "\n".join(notes) if notes else "")
        else:
            ET.SubElement(case, "system-out").text = detail + (("\n" + "; ".join(notes)) if notes else "")
    try:
        ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)
    except OSError as err:
        from gradcalc.errors import ValueError_
        raise ValueError_(f"--junit-xml: cannot write '{path}': {err.strerror}") from None


class GraphFormat(str, Enum):
    table = "table"
    json = "json"
    plain = "plain"
    dot = "dot"


@command("graph")
def graph_cmd(
    source: SourceArg,
    at: AtOpt = None,
    backward: Annotated[bool, typer.Option("--backward", help="also show the backward tape that grad runs")] = False,
    format: Annotated[GraphFormat, typer.Option("--format", "-f", help="output format")] = GraphFormat.table,
    json_: JsonOpt = False,
    precision: PrecisionOpt = 6,
    debug: DebugOpt = False,
    max_elements: MaxElementsOpt = DEFAULT_MAX_ELEMENTS,
):
    """The tape: one primitive equation per row (and with --backward, one VJP rule per equation)."""
    fmt = GraphFormat.json if json_ else format
    opts = Options(Format.json if fmt is GraphFormat.json else Format.table, False, precision, debug,
                   max_elements)

    def body():
        from gradcalc.api import graph
        from . import graphs
        r = graph(_source(source), _at(at, opts), backward_pass=backward, max_elements=max_elements)
        if fmt is GraphFormat.json:
            render.dump_json({"command": "graph", "output": r.output, "nodes": r.nodes,
                              "guessed_shapes": r.guessed, "warnings": r.warnings})
        elif fmt is GraphFormat.dot:
            sys.stdout.write(graphs.dot(r.nodes, r.output, r.guessed))
        elif fmt is GraphFormat.plain:
            sys.stdout.write(graphs.listing(r.nodes, precision, r.guessed))
        else:
            graphs.tables(r.nodes, r.output, r.guessed, precision)
    _run(opts, body)


def _named_matrix(title, grid, names, precision):
    from rich.table import Table
    table = Table()
    table.add_column("")
    for n in names:
        table.add_column(n, justify="right")
    for n, row in zip(names, grid):
        table.add_row(n, *[render.fmt(float(v), precision) for v in row])
    out = render.console()
    out.print(title, style="bold")
    out.print(table)


app = build_app()


def main() -> None:
    """Console entry point.  Only the command asked for is built: building every command's
    options costs more than a one-liner's whole computation.  Usage errors that click finds
    (an unknown option, a bad choice) are reported like every other error (SPEC §7)."""
    import click

    args = sys.argv[1:]
    name = args[0] if args else None
    command_app = build_app([name]) if name in COMMANDS else app
    if not args:
        command_app()  # help
        return
    try:
        code = command_app(standalone_mode=False)
    except click.exceptions.UsageError as err:
        code = _pipe_safe(lambda e=err: _usage_error(e, name, args), 2)
    except click.exceptions.Abort:
        sys.stderr.write("interrupted\n")
        code = EXIT_INTERRUPTED
    except BrokenPipeError:
        code = _reader_gone(0)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        code = EXIT_INTERRUPTED
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _reader_gone(0)
    sys.exit(code if isinstance(code, int) else 0)


def _usage_error(err, name: str, args: list) -> int:
    """A command-line usage error: error: message, a hint, exit 2 (and JSON with -f json)."""
    from gradcalc.errors import UsageError
    command = name if name in COMMANDS else None
    hint = f"see 'gradcalc {command} --help'" if command else "see 'gradcalc --help'"
    wants_json = "--json" in args or any(a in ("json", "-fjson", "--format=json") and
                                         (a != "json" or i and args[i - 1] in ("-f", "--format"))
                                         for i, a in enumerate(args))
    return report_user_error(UsageError(err.format_message(), hint=hint), wants_json)


if __name__ == "__main__":
    main()
