"""The gradcalc command line: one Typer command per subcommand, each declared once.

A command (``@command``) declares its own arguments and options and takes ``opts``;
the options every command shares (--format, --json, --precision, --debug,
--max-elements) are added to it by :func:`build_app`.  Its body reads SOURCE and
its options, calls the library (gradcalc.api...) and returns the library's Result:
:func:`views.show` renders any result in any format, and ``_run`` turns errors into
messages and exit codes in one place.  No math lives here, and no tolerances.
"""
from __future__ import annotations

import gc
import inspect
import sys
from enum import Enum
from typing import Annotated, Callable, List, NamedTuple, Optional

import typer
from typer.core import TyperGroup

from gradcalc.errors import GradcalcError, UsageError, out_of_memory, visible
from gradcalc.tape import DEFAULT_MAX_ELEMENTS, DEFAULT_MAX_STEPS

from . import views
from .errors import EXIT_CHECK_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USER, report_internal_error, report_user_error
from .views import Format, Shown

COMMANDS: dict = {}  # name -> (command function, its --precision default), in the order of the help text


def command(name: str, *, precision: int = 6):
    """Declare a command.  The function takes its own arguments and options, then ``opts``
    (the shared options, as :class:`Options`), and returns its Result (or a views.Shown);
    build_app() adds the shared options, --precision with this default."""
    def register(fn):
        COMMANDS[name] = (fn, precision)
        return fn
    return register


def build_app(names=None) -> typer.Typer:
    """The Typer app with the given commands (default: all of them)."""
    new = typer.Typer(
        name="gradcalc", cls=_Group, add_completion=True, no_args_is_help=True, suggest_commands=False,  # (click suggests)
        help="A gradient calculator: evaluate and differentiate numpy-like expressions.\n\n"
             "SOURCE is program text, a file, or - for standard input.",
        context_settings={"help_option_names": ["-h", "--help"]},
    )

    @new.callback()
    def _group(version: VersionOpt = False):  # a group even when it holds one command
        pass

    for name in names or COMMANDS:
        new.command(name)(_typer_function(name))
    return new


class _Group(TyperGroup):
    """The command group; it reads a SOURCE that begins with '-' as a program (SPEC §5)."""

    def resolve_command(self, ctx, args):
        name, cmd, rest = super().resolve_command(ctx, args)
        ctx.meta[AFTER_DASHES] = "--" in rest  # (the command's context shares meta)
        return name, cmd, programs_last(rest, cmd, ctx) if cmd is not None else rest


#: ctx.meta key: the arguments were given after '--', where every word is one on purpose.
AFTER_DASHES = "gradcalc.after_dashes"


def programs_last(args: list, cmd, ctx=None) -> list:
    """args with the command's arguments moved after '--', where click reads each as an
    argument, when one of them begins with '-' but is none of the command's options
    ('-log(p)', '-floor(x)', a file '-fwrong.grad'); the arguments keep their order.

    A word is one of the command's options only as click would accept it: an option's exact
    spelling (whose value, when it takes one, is the next word, whatever it looks like:
    --cotangent -1.5), --option=VALUE, or a short option glued to a value it accepts (-fjson,
    but not -floor(x)).  Every value given is checked, even one a later repeat replaces, so
    that '-f' cannot swallow the next word unnoticed.  Only where a command that takes one
    SOURCE would get more than one are the words that merely look like options (--bogus,
    -fjsno) handed back to click, which reports them as the misspelt options they are."""
    if "--" in args or not any(_dashed(a) for a in args):
        return args
    by_word = _option_words(cmd)
    options, arguments, i = [], [], 0
    while i < len(args):
        taken = _option_length(args, i, by_word, ctx)
        (options if taken else arguments).extend(args[i:i + (taken or 1)])
        i += taken or 1
    if len(arguments) > _capacity(cmd):
        misspelt = [_looks_like_option(a, by_word) for a in arguments]
        misspelt[0] = misspelt[0] and not all(misspelt)  # (one of them stays the program)
        options += [a for a, m in zip(arguments, misspelt) if m]
        arguments = [a for a, m in zip(arguments, misspelt) if not m]
    return options + ["--"] + arguments if any(_dashed(a) for a in arguments) else args


def _dashed(word: str) -> bool:
    return word.startswith("-") and word != "-"


def _option_words(cmd) -> dict:
    """The command's option spellings -> their click.Option (None for -h/--help)."""
    import click
    by_word = {"-h": None, "--help": None}
    for p in cmd.params:
        if isinstance(p, click.Option):
            by_word.update(dict.fromkeys(p.opts + p.secondary_opts, p))
    return by_word


def _takes_value(param) -> bool:
    return param is not None and not (param.is_flag or param.count)


def _option_length(args: list, i: int, by_word: dict, ctx) -> int:
    """How many words args[i] takes as one of the command's options: 0 when it is none."""
    word = args[i]
    if word in by_word:
        if not _takes_value(by_word[word]):
            return 1
        if i + 1 < len(args):
            _accepted(by_word[word], args[i + 1], ctx, raise_=True)
            return 2
        return 1  # (click says the value is missing)
    name, eq, value = word.partition("=")
    if word.startswith("--") and eq and name in by_word:
        if _takes_value(by_word[name]):
            _accepted(by_word[name], value, ctx, raise_=True)
        return 1
    short = by_word.get(word[:2]) if not word.startswith("--") else None
    return int(len(word) > 2 and _takes_value(short) and _accepted(short, word[2:], ctx))


def _accepted(param, value: str, ctx, raise_: bool = False) -> bool:
    """Whether the option accepts value (click's own conversion); raise_: click's error if not."""
    import click
    try:
        param.type.convert(value, param, ctx)
    except click.BadParameter:
        if raise_:
            raise
        return False
    return True


def _capacity(cmd) -> float:
    """How many arguments the command takes (inf: any number, as check's SOURCE...)."""
    import click
    counts = [p.nargs for p in cmd.params if isinstance(p, click.Argument)]
    return float("inf") if -1 in counts else sum(counts)


def note_option_like(words) -> None:
    """A SOURCE spelt like an option the command does not have (--rtool, -fjsno) is read as a
    program (SPEC §5); say so on stderr, with the option it resembles, unless it is a file or
    came after '--': its errors ('rtool' has no value) would not say it."""
    import click
    import os
    ctx = click.get_current_context(silent=True)
    if ctx is None or ctx.meta.get(AFTER_DASHES):
        return
    by_word = _option_words(ctx.command)
    for word in words:
        guess = _option_guess(word, by_word)
        if guess is not None and not os.path.exists(word):
            sys.stderr.write(visible(f"note: '{word}' is none of {ctx.command.name}'s options, so it is read as a "
                                     f"program{guess}") + "\n")


def _option_guess(word: str, by_word: dict) -> str | None:
    """'; did you mean --rtol?' for a word spelt like an option of by_word ('' when none is
    close); None for a word that is no such spelling (-log(p), -floor(x), -fdot)."""
    import difflib
    import re
    if re.fullmatch(r"--[A-Za-z][\w-]*", word):
        close = difflib.get_close_matches(word, [w for w in by_word if w.startswith("--")], 1)
        return f"; did you mean '{close[0]}'?" if close else ""
    short = by_word.get(word[:2]) if not word.startswith("--") else None
    if _takes_value(short) and word[2:].isalpha() and hasattr(short.type, "choices"):
        close = difflib.get_close_matches(word[2:], list(short.type.choices), 1)
        return f"; did you mean '{word[:2]}{close[0]}'?" if close else None
    return None


def _looks_like_option(word: str, by_word: dict) -> bool:
    """--word, or a short option that takes a value glued to one it refuses (-fjsno)."""
    import re
    return re.match(r"--[A-Za-z][\w-]*(=|$)", word) is not None or \
        (not word.startswith("--") and _takes_value(by_word.get(word[:2])))


def _print_version(value: bool) -> None:
    if value:
        from gradcalc import __version__
        sys.stdout.write(f"gradcalc {__version__}\n")
        raise typer.Exit(EXIT_OK)


VersionOpt = Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                          help="print the version and exit")]


# -- the options every command shares ------------------------------------------
JsonOpt = Annotated[bool, typer.Option("--json", help="same as --format json")]
PrecisionOpt = Annotated[int, typer.Option("--precision", min=1, max=17,
                                           help="significant digits in tables")]
DebugOpt = Annotated[bool, typer.Option("--debug", help="show a traceback on internal errors")]
MaxElementsOpt = Annotated[int, typer.Option("--max-elements", min=1,
                                             help="refuse arrays with more elements than this")]
MaxStepsOpt = Annotated[int, typer.Option("--max-steps", min=1,
                                          help="stop a run that records more operations plus loop iterations")]
SaveOpt = Annotated[Optional[str], typer.Option(
    "--save", help="also write every array of the result to a NumPy .npz archive, keyed by its JSON path "
                   "(gradient/x, value)", show_default=False)]
#: The commands whose results are arrays, which --save writes.
SAVES = ("eval", "grad", "jacobian", "vjp", "jvp", "hessian", "plot")


def _format_option(name: str):
    """--format, offering the formats the command's view has (graph's dot among them)."""
    import click
    choices = click.Choice([f.value for f in views.formats(name)])
    return Annotated[Format, typer.Option("--format", "-f", help="output format", click_type=choices)]


def _shared_parameters(name: str, precision: int) -> list:
    option = inspect.Parameter.KEYWORD_ONLY
    return [inspect.Parameter("format", option, annotation=_format_option(name), default=Format.table),
            inspect.Parameter("json_", option, annotation=JsonOpt, default=False),
            inspect.Parameter("precision", option, annotation=PrecisionOpt, default=precision),
            inspect.Parameter("debug", option, annotation=DebugOpt, default=False),
            inspect.Parameter("max_elements", option, annotation=MaxElementsOpt, default=DEFAULT_MAX_ELEMENTS),
            inspect.Parameter("max_steps", option, annotation=MaxStepsOpt, default=DEFAULT_MAX_STEPS)] + \
        [inspect.Parameter("save", option, annotation=SaveOpt, default=None)] * (name in SAVES)


class Options(NamedTuple):
    """What every command shares: output format and digits, error handling, the element limit."""

    format: Format
    precision: int
    debug: bool
    max_elements: int
    max_steps: int = DEFAULT_MAX_STEPS
    save: str | None = None

    @classmethod
    def taken_from(cls, kwargs: dict) -> "Options":
        """The shared options, removed from a command's keyword arguments."""
        fmt, json_flag = kwargs.pop("format"), kwargs.pop("json_")
        return cls(Format.json if json_flag else fmt, kwargs.pop("precision"), kwargs.pop("debug"),
                   kwargs.pop("max_elements"), kwargs.pop("max_steps"), kwargs.pop("save", None))


def _format_clash(fmt: Format, json_flag: bool) -> UsageError | None:
    """--json with a --format other than json asks for two formats (it printed JSON, and the
    other went unsaid); SPEC §6 makes --json the same as -f json, and sets no precedence."""
    import click
    from click.core import ParameterSource
    ctx = click.get_current_context(silent=True)
    given = ctx is None or ctx.get_parameter_source("format") is not ParameterSource.DEFAULT
    if json_flag and given and fmt is not Format.json:
        return UsageError(f"--json and --format {fmt.value} ask for two formats",
                          hint="--json is --format json: give one of them")
    return None


def _typer_function(name: str) -> Callable:
    """The command as Typer sees it: the function's own parameters, then the shared options.
    Called, it runs the command and shows its result."""
    fn, precision = COMMANDS[name]
    own = inspect.signature(fn, eval_str=True)

    def run(**kwargs):
        clash = _format_clash(kwargs["format"], kwargs["json_"])
        opts = Options.taken_from(kwargs)

        def body():
            if clash is not None:
                raise clash
            return fn(**kwargs, opts=opts)
        _run(opts, body)

    run.__signature__ = own.replace(parameters=[p for p in own.parameters.values() if p.name != "opts"] +
                                    _shared_parameters(name, precision))
    run.__name__, run.__doc__ = fn.__name__, fn.__doc__
    return run


# -- running a command: its result shown, its errors reported -------------------

def _run(opts: Options, body: Callable[[], object]) -> None:
    """Run a command body and show its result; turn errors into messages and exit codes."""
    try:
        code = _shown_within_memory(opts, body)
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
        code = report_internal_error(exc, opts.debug, opts.format is Format.json)
    raise typer.Exit(code)


def _shown_within_memory(opts: Options, body: Callable[[], object]) -> int:
    """Run body and show its result; its exit code.  Out of memory (the machine's limit, not a
    bug: sizes within the element limit add up), the error is raised once the MemoryError has
    gone, and with it the frames its traceback holds and the tape in them: then there is memory
    to write the error (with -f json, 1.4 GB of a tape had left none to import json)."""
    try:
        if opts.save is not None:
            views.check_writable("--save", opts.save)
        return _show(body(), opts)
    except MemoryError:
        pass
    gc.collect()  # (the collector is off for the command: the tape's cycles wait for it)
    raise out_of_memory()


def _show(item, opts: Options) -> int:
    """Show a result; the exit code: 0, or 1 when check found a mismatch (kept even if the
    reader of stdout goes away)."""
    result = item.result if isinstance(item, Shown) else item
    verdict = EXIT_OK if getattr(result, "ok", True) else EXIT_CHECK_FAILED
    verdict = getattr(result, "exit_code", verdict)  # check of several sources: 2 when one could not be
    if opts.save:
        _save(result, opts.save)
    try:
        views.show(item, opts.format, opts.precision)
    except BrokenPipeError:
        return _reader_gone(verdict)
    except OSError as err:
        return _unwritable_output(err)
    return verdict


def _save(result, path: str) -> None:
    """--save FILE.npz: every array of the result, keyed by its JSON path."""
    import numpy as np

    from gradcalc.codec import arrays_by_path
    try:
        with open(path, "wb") as f:  # (a file, so that NumPy adds no .npz to the name given)
            np.savez(f, **arrays_by_path(result.to_json()))
    except OSError as err:
        raise views.unwritable("--save", path, err.strerror or err) from None


def _reader_gone(code: int) -> int:
    """stdout's reader went away (gradcalc ... | head -1): stop writing, quietly."""
    import os
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return code


def _unwritable_output(err: OSError) -> int:
    """stdout (or stderr) refused what was written (a full disk: ``> /dev/full``): say so on
    stderr and exit 2, as an unwritable --save or --junit-xml file does; what is still buffered
    goes nowhere, and where stderr refuses the words too, the exit code says it alone."""
    _reader_gone(0)
    try:
        return report_user_error(UsageError(f"cannot write the output: {err.strerror or err}",
                                            hint="free some space, or write the output elsewhere"), False)
    except OSError:
        return EXIT_USER


def _pipe_safe(write: Callable[[], int], code: int) -> int:
    """write() (an error's words), kept to its exit code whatever the streams do: a reader gone
    (quiet), a stream that refuses them (said where it can, exit 2; a traceback before)."""
    try:
        return write()
    except BrokenPipeError:
        return _reader_gone(code)
    except OSError as err:
        return _unwritable_output(err)


# -- reading what the commands share --------------------------------------------

def _source(arg: str):
    from gradcalc.values import parse_source, read_source
    note_option_like([arg])
    return parse_source(read_source(arg), arg)


def _at(items, opts: Options, program=None) -> dict:
    """The --at values.  Names from an @FILE mapping that the program does not take are
    dropped, with a note on stderr (one parameter file may serve several programs); a name
    typed as NAME=VALUE that is not an input stays an error (the run reports it)."""
    from gradcalc.values import drop_unused, parse_assignments
    point = parse_assignments(items, "--at", opts.max_elements)
    for note in drop_unused(point, program) if program is not None else ():
        sys.stderr.write(f"note: {visible(note)}\n")
    return point


def _one(of, command: str):
    """The single --of of grad, jvp and hessian (repeated --of is for jacobian, vjp, check, eval)."""
    if of and len(of) > 1:
        raise UsageError(f"{command} takes one --of, got {len(of)}",
                         hint="jacobian, vjp and check take several outputs")
    return of[0] if of else None


class Unconnected(str, Enum):
    zero = "zero"
    none = "none"
    error = "error"


class Method(str, Enum):
    central = "central"
    forward = "forward"
    richardson = "richardson"
    complex = "complex"


class ExecMethod(str, Enum):
    """grad --exec's methods: a black box cannot take the complex step."""

    central = "central"
    forward = "forward"
    richardson = "richardson"


class Mode(str, Enum):
    auto = "auto"
    rev = "rev"
    fwd = "fwd"


SourceArg = Annotated[str, typer.Argument(help="program text, a path to a .grad file, or - for stdin",
                                          show_default=False)]
AtOpt = Annotated[Optional[List[str]], typer.Option(
    "--at", help="input values: NAME=VALUE[,NAME=VALUE...] or @FILE (.json/.npz); repeatable",
    show_default=False)]
OfOpt = Annotated[Optional[List[str]], typer.Option(
    "--of", help="the output (default: the last statement)", show_default=False)]
OfManyOpt = Annotated[Optional[List[str]], typer.Option(
    "--of", help="an output (repeatable; default: the last statement)", show_default=False)]
def _split_names(values):
    """--wrt a,b is --wrt a --wrt b (SPEC §4); --wrt '' names nothing, which is an error (it
    meant every input), and so is an empty item (a,,b: as in --at, an empty shell variable)."""
    if not values:
        return values
    names = [name.strip() for v in values for name in v.split(",")]
    if not any(names):
        raise typer.BadParameter(f"{values[0]!r} names no value; leave --wrt out for every input")
    if not all(names):
        empty = next(v for v in values if not all(name.strip() for name in v.split(",")))
        raise typer.BadParameter(f"{empty!r} has an empty item; separate names by one comma, with none "
                                 "at either end: --wrt x,y")
    return names


WrtOpt = Annotated[Optional[List[str]], typer.Option(
    "--wrt", help="differentiate with respect to NAME (repeatable, or NAME,NAME; default: every input)",
    show_default=False, callback=_split_names)]
InputsWrtOpt = Annotated[Optional[List[str]], typer.Option(
    "--wrt", help="an input to differentiate with respect to (repeatable, or NAME,NAME; default: every "
                  "input)", show_default=False, callback=_split_names)]
TangentWrtOpt = Annotated[Optional[List[str]], typer.Option(
    "--wrt", help="the inputs that may carry a tangent (repeatable, or NAME,NAME; default: every input)",
    show_default=False, callback=_split_names)]
SymbolicOpt = Annotated[bool, typer.Option("--symbolic", help="also print the closed-form derivative (sympy)")]
UnconnectedOpt = Annotated[Unconnected, typer.Option(
    "--unconnected", help="derivative of a name with no path to the output: zero, none (null) or error")]
ExecOpt = Annotated[Optional[str], typer.Option(
    "--exec", help="a black-box program speaking the JSON protocol (README: Black boxes)",
    show_default=False)]
ExecTimeoutOpt = Annotated[float, typer.Option("--exec-timeout", min=0.001,
                                               help="seconds the --exec program may run per request")]
OptionalSourceArg = Annotated[Optional[str], typer.Argument(
    help="program text, a path to a .grad file, or - for stdin (omit with --exec)", show_default=False)]


# ==========================================================================
# eval, grad
# ==========================================================================

@command("eval")
def eval_cmd(
    source: SourceArg,
    at: AtOpt = None,
    of: OfManyOpt = None,
    all_: Annotated[bool, typer.Option("--all", help="show every named value")] = False,
    *, opts: Options,
):
    """Evaluate a program: the value of its output (or of every name with --all)."""
    from gradcalc.api import evaluate
    program = _source(source)
    return evaluate(program, _at(at, opts, program), of=of, all=all_, max_elements=opts.max_elements,
                    max_steps=opts.max_steps)


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
    method: Annotated[Optional[ExecMethod], typer.Option(
        "--method", help="with --exec: central, forward or richardson (default)", show_default=False)] = None,
    *, opts: Options,
):
    """The gradient of a scalar output with respect to inputs or intermediate values.

    With --exec CMD (and no SOURCE): the finite-difference gradient of a black box.
    """
    from gradcalc.api import grad
    if exec_ is not None:
        if source is not None:
            raise UsageError("grad --exec differentiates the black box alone; give no SOURCE",
                             hint="to compare a program with a black box, use check SOURCE --exec CMD")
        _one_output(of, "grad")
        return _grad_exec(exec_, exec_timeout, _at(at, opts), wrt, method.value if method else "richardson",
                          opts.max_elements)
    if method is not None:
        raise UsageError("--method applies to grad --exec only")
    if source is None:
        raise UsageError("missing SOURCE", hint="gradcalc grad 'sin(x)*y' --at x=1,y=2")
    program = _source(source)
    point = _at(at, opts, program)
    r = grad(program, point, of=_one(of, "grad"), wrt=wrt, sum=sum_, unconnected=unconnected.value,
             symbolic=symbolic, max_elements=opts.max_elements, max_steps=opts.max_steps)
    return Shown(r, at=point, sum=sum_)


def _one_output(of, command: str) -> None:
    """Refuse --of for a black box alone: it has one output, its value (--of was ignored)."""
    if of:
        raise UsageError(f"--of does not apply to {command} --exec: a black box has one output, its value",
                         hint="to compare an output of a program with the black box, give the program: "
                              "gradcalc check SOURCE --exec CMD --of NAME")


def _grad_exec(cmd: str, timeout: float, point: dict, wrt, method: str, max_elements: int) -> Shown:
    from gradcalc.blackbox import BlackBox, fd_gradient
    if not point:
        raise UsageError("grad --exec needs the point: --at NAME=VALUE for every input of the program")
    box = BlackBox(cmd, timeout)
    return Shown(fd_gradient(box, point, method=method, wrt=wrt, label=cmd, max_elements=max_elements), at=point)


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
    *, opts: Options,
):
    """The Jacobian d(of)/d(wrt), of shape of.shape + wrt.shape (JAX's convention)."""
    from gradcalc.api import jacobian
    program = _source(source)
    return jacobian(program, _at(at, opts, program), of=of, wrt=wrt, mode=mode.value,
                    unconnected=unconnected.value, symbolic=symbolic, max_elements=opts.max_elements,
                    max_steps=opts.max_steps)


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
    *, opts: Options,
):
    """The vector-Jacobian product v^T J (TensorFlow's output_gradients / grad_ys)."""
    from gradcalc.api import vjp
    from gradcalc.values import parse_assignments, parse_value
    if len(cotangent) == 1 and not _is_assignment(cotangent[0]):
        ct = parse_value(cotangent[0], "--cotangent", opts.max_elements)
    else:
        ct = parse_assignments(cotangent, "--cotangent", opts.max_elements, allow_files=False)
    program = _source(source)
    return vjp(program, ct, _at(at, opts, program), of=of, wrt=wrt, unconnected=unconnected.value,
               max_elements=opts.max_elements, max_steps=opts.max_steps)


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
    wrt: TangentWrtOpt = None,
    *, opts: Options,
):
    """The Jacobian-vector product J v, by forward mode."""
    from gradcalc.api import jvp
    from gradcalc.values import parse_assignments
    tangents = parse_assignments(tangent, "--tangent", opts.max_elements, allow_files=False)
    program = _source(source)
    r = jvp(program, tangents, _at(at, opts, program), of=_one(of, "jvp"), wrt=wrt, max_elements=opts.max_elements,
            max_steps=opts.max_steps)
    return Shown(r, tangent=tangents)


@command("hessian")
def hessian_cmd(
    source: SourceArg,
    at: AtOpt = None,
    of: OfOpt = None,
    wrt: InputsWrtOpt = None,
    symbolic: SymbolicOpt = False,
    *, opts: Options,
):
    """Second derivatives of a scalar output: forward mode over the backward pass."""
    from gradcalc.api import hessian
    program = _source(source)
    return hessian(program, _at(at, opts, program), of=_one(of, "hessian"), wrt=wrt, symbolic=symbolic,
                   max_elements=opts.max_elements, max_steps=opts.max_steps)


# ==========================================================================
# check
# ==========================================================================

@command("check", precision=3)
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
    points: Annotated[Optional[int], typer.Option("--points", min=0, help="also check N random points "
                                                  "(inputs without --at values ~ N(0, 1)) [default: 0]",
                                                  show_default=False)] = None,
    seed: Annotated[Optional[int], typer.Option("--seed", help="random seed for --points and --directions "
                                                "[default: 0]", show_default=False)] = None,
    directions: Annotated[Optional[int], typer.Option("--directions", min=0, help="check K random "
                                                      "directions instead of the full Jacobian",
                                                      show_default=False)] = None,
    taylor: Annotated[bool, typer.Option("--taylor", help="also measure the Taylor remainder's order")] = False,
    sweep: Annotated[bool, typer.Option("--sweep", help="also the error over steps 1e-1..1e-13, the best "
                                        "step and the slope (drawn on log-log axes in tables)")] = False,
    symbolic: Annotated[bool, typer.Option("--symbolic", help="add sympy's closed form as a third oracle")] = False,
    expect: Annotated[Optional[str], typer.Option("--expect", help="stored JSON output of grad or jacobian "
                                                  "to compare one source with (default: NAME.expect.json "
                                                  "beside NAME.grad)", show_default=False)] = None,
    update_expect: Annotated[bool, typer.Option("--update-expect", help="write or refresh each "
                                                "NAME.expect.json (or the --expect file)")] = False,
    no_expect: Annotated[bool, typer.Option("--no-expect", help="skip the NAME.expect.json files")] = False,
    junit_xml: Annotated[Optional[str], typer.Option("--junit-xml", help="write a JUnit XML report",
                                                     show_default=False)] = None,
    exec_: ExecOpt = None,
    exec_timeout: ExecTimeoutOpt = 60.0,
    *, opts: Options,
):
    """Check automatic derivatives against finite differences (and reverse against forward mode).

    Options on the command line win over a file's '# check:' lines.  Exit status 0 when every
    result passes, 1 when any fails, 2 when a source could not be checked (after the others).
    """
    from gradcalc.suite import check_sources
    from gradcalc.values import promise_stdin
    if junit_xml is not None:
        views.check_writable("--junit-xml", junit_xml)
        views.check_not_checked("--junit-xml", junit_xml, sources, expect)
    note_option_like(sources or ())
    if sources and "-" in sources:  # (read after the --at values, which must not take it first)
        promise_stdin("SOURCE -")
    point = _at(at, opts) if at else None
    given = dict(at=point, of=of, wrt=wrt, rtol=rtol, atol=atol, max_elements=opts.max_elements,
                 max_steps=opts.max_steps)
    if exec_ is not None:
        _refuse_with_exec(sources, method, (("--points", points), ("--directions", directions),
                                            ("--taylor", taylor), ("--expect", expect), ("--symbolic", symbolic),
                                            ("--update-expect", update_expect), ("--sweep", sweep)))
        checked = _check_exec(exec_, exec_timeout, sources, given, method)
    elif not sources:
        raise UsageError("missing SOURCE", hint="gradcalc check samples/ (or --exec CMD)")
    else:
        given.update(points=points, seed=seed, method=method.value if method else None, directions=directions,
                     taylor=taylor or None, symbolic=symbolic or None, expect=expect, sweep=sweep or None)
        checked = check_sources(sources, overrides=given, update_expect=update_expect, no_expect=no_expect)
    if junit_xml:
        views.write_junit(junit_xml, checked.results)
    return checked


def _refuse_with_exec(sources, method, given) -> None:
    """check --exec compares a black box's gradient with its own differences at one point, and
    check SOURCE --exec compares values: the options given that do not apply are refused."""
    unused = [flag for flag, value in given if value]
    if unused or (sources and method is not None):
        flag = (unused or ["--method"])[0]
        hint = ("check SOURCE --exec compares values, so it takes no --method" if flag == "--method"
                else "check --exec compares the black box's gradient with its own finite "
                     "differences at the --at point")
        raise UsageError(f"{flag} does not apply to check --exec", hint=hint)


def _check_exec(cmd, timeout, sources, given: dict, method):
    """check --exec CMD (the program's gradient against differences of its values), or
    check SOURCE --exec CMD (the program against gradcalc's own derivatives of SOURCE)."""
    from gradcalc.blackbox import BlackBox, check_against_source, check_blackbox
    from gradcalc.lower import trace
    from gradcalc.suite import check_alone, check_sources
    box = BlackBox(cmd, timeout)
    if not sources:
        if not given["at"]:
            raise UsageError("check --exec needs the point: --at NAME=VALUE for every input")
        _one_output(given["of"], "check")
        # (a black box that fails is an error result, reported as a source's: JUnit, annotations)
        return check_alone(cmd, lambda: check_blackbox(box, given["at"], method=method.value if method else "richardson",
                                                       rtol=given["rtol"], atol=given["atol"], label=cmd,
                                                       wrt=given["wrt"], max_elements=given["max_elements"]))

    def against(program, o):
        tr = trace(program, o.get("at") or {}, max_elements=o["max_elements"], max_steps=o["max_steps"])
        return check_against_source(box, tr, rtol=o.get("rtol"), atol=o.get("atol"), label=program.source.label,
                                    of=o.get("of"), wrt=o.get("wrt"))
    return check_sources(sources, overrides=given, no_expect=True, checker=against)


# ==========================================================================
# plot
# ==========================================================================

@command("plot")
def plot_cmd(
    source: SourceArg,
    over: Annotated[str, typer.Option("--over", help="the input to vary and its interval: NAME=LO:HI "
                                                     "(constant expressions: x=-pi:pi)", show_default=False)],
    samples: Annotated[int, typer.Option("--samples", help="points, evenly spaced from LO to HI")] = 200,
    direction: Annotated[Optional[str], typer.Option(
        "--direction", help="for an array input: V of its shape, the line NAME + t V through its --at "
                            "value (t from LO to HI)", show_default=False)] = None,
    hessian: Annotated[bool, typer.Option("--hessian", help="also the second derivative")] = False,
    at: AtOpt = None,
    of: OfOpt = None,
    wrt: Annotated[Optional[str], typer.Option(
        "--wrt", help="a scalar value to differentiate with respect to (default: along the line)",
        show_default=False)] = None,
    *, opts: Options,
):
    """The output and its derivative along one input over an interval, drawn in the terminal.

    Kinks and changes of the program's path are marked; -f json gives the samples.
    """
    from gradcalc.plots import parse_over, plot
    from gradcalc.values import parse_value
    name, lo, hi = parse_over(over)
    v = None if direction is None else parse_value(direction, "--direction", opts.max_elements)
    program = _source(source)
    return plot(program, name, lo, hi, samples=samples, direction=v, hessian=hessian,
                at=_at(at, opts, program), of=_one(of, "plot"), wrt=wrt, max_elements=opts.max_elements,
                max_steps=opts.max_steps)


# ==========================================================================
# graph
# ==========================================================================

@command("graph")
def graph_cmd(
    source: SourceArg,
    at: AtOpt = None,
    backward: Annotated[bool, typer.Option("--backward", help="also show the backward tape that grad runs")] = False,
    full: Annotated[bool, typer.Option("--full", help="show every equation of a long tape (tables and plain "
                                                      "show its first and last 20 otherwise)")] = False,
    *, opts: Options,
):
    """The tape: one primitive equation per row (and with --backward, one VJP rule per equation)."""
    from gradcalc.api import graph
    program = _source(source)
    return graph(program, _at(at, opts, program), backward_pass=backward, full=full,
                 max_elements=opts.max_elements, max_steps=opts.max_steps)


# ==========================================================================
# the console entry point
# ==========================================================================

def main() -> None:
    """Console entry point.  Only the command asked for is built: building every command's
    options costs more than a one-liner's whole computation.  Usage errors that click finds
    (an unknown option, a bad choice) are reported like every other error (SPEC §7)."""
    import click

    args = sys.argv[1:]
    name = args[0] if args else None
    if not args or "--help" in args or "-h" in args:
        _help_colours()
    command_app = build_app([name] if name in COMMANDS else None)
    try:
        code = command_app(standalone_mode=False) if args else command_app()  # (no arguments: help)
    except click.exceptions.UsageError as err:
        code = _pipe_safe(lambda e=err: _usage_error(e, name, args), 2)
    except click.exceptions.Abort:
        sys.stderr.write("interrupted\n")
        code = EXIT_INTERRUPTED
    except BrokenPipeError:
        code = _reader_gone(0)
    except OSError as err:  # (click writing help or the version to a stream that refuses it)
        code = _unwritable_output(err)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        code = EXIT_INTERRUPTED
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _reader_gone(0)
    except OSError as err:
        code = _unwritable_output(err)
    sys.exit(code if isinstance(code, int) else 0)


def _help_colours() -> None:
    """Help follows the colour rule of every other output (NO_COLOR: no escape code at all,
    bold included; FORCE_COLOR; TERM=dumb): Typer draws it with a console of its own."""
    import typer.rich_utils as help_console

    from .render import colour_system
    system = colour_system(sys.stdout)
    help_console.COLOR_SYSTEM = system
    help_console.FORCE_TERMINAL = True if system is not None else None
    make = help_console._get_rich_console

    def quiet_when_the_reader_goes(stderr: bool = False):
        """Typer's console, which would exit 1 (check's "mismatch") when stdout's reader goes
        away (gradcalc --help | head -1): main stops quietly, with help's own exit code."""
        drawn = make(stderr)
        drawn.on_broken_pipe = _broken_pipe
        return drawn
    help_console._get_rich_console = quiet_when_the_reader_goes


def _broken_pipe() -> None:
    raise BrokenPipeError


def _usage_error(err, name: str, args: list) -> int:
    """A command-line usage error: error: message, a hint, exit 2 (and JSON with -f json)."""
    command = name if name in COMMANDS else None
    hint = f"see 'gradcalc {command} --help'" if command else "see 'gradcalc --help'"
    if "--" in args and "extra argument" in err.format_message():
        # (everything after '--' is an argument, options too: `grad -- '-f' --at f=0.5`)
        hint = "options go before '--': after it, every word is read as an argument"
    wants_json = "--json" in args or any(a in ("json", "-fjson", "--format=json") and
                                         (a != "json" or i and args[i - 1] in ("-f", "--format"))
                                         for i, a in enumerate(args))
    return report_user_error(UsageError(err.format_message(), hint=hint), wants_json)


def __getattr__(name: str):
    """``app``: the Typer app with every command (for tests and embedding), built when asked
    for; main() builds only the command it runs."""
    if name == "app":
        return build_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    main()
