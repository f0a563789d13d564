"""``check`` of several sources, as a CI job runs it (SPEC §5, "check for CI").

:func:`check_sources` expands directories into their ``*.grad`` files and checks each
source on its own (:func:`check_source`): its ``# check:`` lines give it options, the
caller's ``overrides`` win over them, a sibling ``NAME.expect.json`` is compared (or
written, ``update_expect``), and any user error becomes an error result for that source
(:class:`CheckError`) while the others are still checked.  The command line, the pytest
plugin and ``gradcalc.testing`` all run this one function; none of it prints.
"""
from __future__ import annotations

import gc
import json
import math
import os
import re
import shlex
from dataclasses import dataclass, field

from .checks import CheckResult
from .errors import (REPORT_URL, FileError, GradcalcError, InternalError, Pos, ShapeError, Source, UsageError,
                     ValueError_, internal_words, option, out_of_memory)
from .results import Result

#: The options a ``# check:`` line may give (SPEC §5), as the library's keywords: the
#: kind of value each takes ("list": repeatable, "flag": takes none).
FILE_OPTIONS = {"at": "list", "of": "list", "wrt": "list", "method": "str", "rtol": "float",
                "atol": "float", "points": "int", "seed": "int", "directions": "int", "taylor": "flag"}
#: The options of a ``# check:`` line that check SOURCE --exec (a ``checker``) applies: it
#: compares values and gradients at the point, so a file's others are ignored, with a note.
CHECKER_FILE_OPTIONS = ("at", "of", "wrt", "rtol", "atol")
#: The marker of an options line in a program's leading comment block.
CHECK_LINE = "# check:"
#: Exit codes of a suite (SPEC §7): all pass, a mismatch, a source that could not be checked.
EXIT_PASSED, EXIT_FAILED, EXIT_ERROR, EXIT_INTERNAL = 0, 1, 2, 3  # (SPEC §7; 3: a bug in gradcalc)


@dataclass
class CheckError:
    """A source that could not be checked: the error, in the fields a report needs.
    It stands among check's results (``ok`` False, ``error`` set) wherever they go."""

    source: str
    error: GradcalcError
    ok: bool = False
    point: int | None = None
    of: str | None = None
    wrt: str | None = None
    comparison: str = "error"
    notes: list = field(default_factory=list)

    @property
    def kind(self) -> str:
        return self.error.kind

    @property
    def message(self) -> str:
        return self.error.message

    @property
    def file(self) -> str:
        """The file the error is in (the source's label when the error names no other)."""
        return self.error.source.label if self.error.source is not None else self.source

    @property
    def line(self) -> int | None:
        return self.error.pos.line if self.error.pos else None

    @property
    def column(self) -> int | None:
        return self.error.pos.col if self.error.pos else None

    def as_dict(self) -> dict:
        """The result in JSON: its source, and the error as every user error's JSON has it
        (README, JSON: kind, message, line, column, source: the file the error is in, hint)."""
        point = {} if self.point is None else {"point": self.point}  # (an error at one random point)
        return {"source": self.source, **point, "ok": False,
                "error": {"kind": self.kind, "message": self.message, "line": self.line,
                          "column": self.column, "source": self.file, "hint": self.error.hint}}


@dataclass
class SourceCheck:
    """One source's check: its results, or the error that stopped it (``results`` is then
    ``[CheckError]``); the options applied, the expectation file compared or written."""

    source: str
    results: list
    options: dict = field(default_factory=dict)
    expect_file: str | None = None
    updated: bool = False
    notes: list = field(default_factory=list)  # warnings, e.g. nothing to check: no inputs
    #: what was left out, worded: "--at @params.json: 'lr' is not an input of the program; ignored"
    ignored: list = field(default_factory=list)

    @property
    def error(self) -> CheckError | None:
        return next((r for r in self.results if isinstance(r, CheckError)), None)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)


def suite_result(checks: list) -> Result:
    """The Result of a suite (command "check"): every result of every source in order,
    ``ok``, ``exit_code`` (0, 1 or 2), ``sources`` (the SourceChecks) and the tolerances
    (``rtol``/``atol``: those every source applied, None where they differ)."""
    results = [r for c in checks for r in c.results]
    # (a source with an error at one random point applied its tolerances to the others)
    tols = {(c.options.get("rtol"), c.options.get("atol")) for c in checks if "rtol" in c.options}
    rtol, atol = tols.pop() if len(tols) == 1 else (None, None)
    errors = [c.error for c in checks if c.error is not None]
    code = EXIT_INTERNAL if any(e.kind == "internal" for e in errors) else EXIT_ERROR if errors \
        else EXIT_PASSED if all(r.ok for r in results) else EXIT_FAILED
    return Result({}, command="check", ok=code == EXIT_PASSED, results=results, rtol=rtol, atol=atol,
                  sources=checks, exit_code=code)


def check_sources(sources, *, overrides: dict | None = None, update_expect: bool = False,
                  no_expect: bool = False, checker=None) -> Result:
    """Check each source (program text, a file, '-', or a directory: every *.grad inside)
    as :func:`check_source` does; one Result for all (:func:`suite_result`).

    An explicit expectation (``overrides["expect"]``) belongs to one source: with several,
    it is a usage error (raised: nothing is checked)."""
    overrides = dict(overrides or {})
    if update_expect and no_expect:
        raise UsageError(f"{option('update_expect')} writes the expectation files that {option('no_expect')} "
                         "skips: give one of them", option="no_expect")
    if overrides.get("expect") is not None and no_expect:
        raise UsageError(f"{option('expect')} names the expectation file that {option('no_expect')} skips: "
                         "give one of them", option="no_expect")
    found = expand(sources)
    if overrides.get("expect") is not None and len(found) > 1:
        raise UsageError(f"{option('expect')} compares one source with a stored result, and "
                         f"{len(found)} sources are given",
                         hint="check each source with its own --expect, or store NAME.expect.json "
                              "beside NAME.grad (compared automatically)", option="expect")
    labels = text_labels(found)
    checks = [c if isinstance(c, SourceCheck) else
              check_source(c, overrides=overrides, update_expect=update_expect, no_expect=no_expect,
                           checker=checker, label=labels.get(i))
              for i, c in enumerate(found)]
    return suite_result(checks)


def text_labels(sources: list) -> dict:
    """{position: label} for the program texts among sources when there are several:
    <expr 1>, <expr 2>... in the order given, so that their results and errors can be told
    apart; none when there is one (it stays <expr>, as every command labels it)."""
    texts = [i for i, s in enumerate(sources) if isinstance(s, str) and s != "-" and
             not ("\n" not in s and len(s) < 4096 and os.path.exists(s))]  # (what read_source reads as text)
    return {i: f"<expr {n}>" for n, i in enumerate(texts, 1)} if len(texts) > 1 else {}


def check_alone(label: str, run) -> Result:
    """A suite of one check that reads no source (check --exec CMD: a black box alone): run()'s
    Result, or the user error it raises as an error result under label, so that it is
    reported as a source's would be (JUnit <error>, annotation, exit 2)."""
    try:
        return suite_result([_checked(label, run(), {})])
    except GradcalcError as err:
        return suite_result([_failed(label, err)])


def expand(sources) -> list:
    """Sources with each directory replaced by its *.grad files (sorted); a directory
    without any is a SourceCheck holding that error."""
    if list(sources).count("-") > 1:  # the second read would find standard input empty
        raise UsageError("'-' (standard input) is given more than once", hint="give '-' once")
    out = []
    for s in sources:
        if isinstance(s, str) and "\n" not in s and len(s) < 4096 and os.path.isdir(s):
            found = sorted(os.path.normpath(os.path.join(d, f))  # (check . names good.grad, not ./good.grad)
                           for d, fs in _visible_files(s) for f in fs if f.endswith(".grad"))
            if not found:
                found = [_failed(s, ValueError_(f"no .grad files in directory '{s}'"))]
            out.extend(map(_regular, found))
        else:
            out.append(s)
    return out


def _regular(path: str):
    """A file found in a directory, or, where it is no regular file (a pipe, a device, a broken
    link), an error result for it: reading a pipe would wait for a writer, and the directory's
    other files would never be checked."""
    if not isinstance(path, str) or os.path.isfile(path):
        return path
    return _failed(path, FileError(f"'{path}' is not a regular file (a pipe, a device or a broken link)"))


def _visible_files(top: str):
    """(folder, file names) under top, skipping hidden folders (.git, .venv, .tox: what pytest's
    collection skips too), as os.walk gives them."""
    for d, dirs, files in os.walk(top):
        dirs[:] = [x for x in dirs if not x.startswith(".")]
        yield d, files


def _failed(source: str, err: GradcalcError) -> SourceCheck:
    return SourceCheck(source, [CheckError(source, err)])


def check_source(source, *, overrides: dict | None = None, update_expect: bool = False,
                 no_expect: bool = False, checker=None, unwritten: list | None = None,
                 label: str | None = None) -> SourceCheck:
    """Check one source (program text, a path, or '-'), never raising a user error.

    ``overrides`` holds check()'s keyword arguments as the caller gives them (the command
    line: at as {name: array}, of, wrt, method, rtol, atol, points, seed, directions,
    taylor, symbolic, max_elements, max_steps) and ``expect`` (a path); a None value is
    not given.  They win over the source's ``# check:`` lines (``at`` name by name).
    The expectation compared: ``expect``, else NAME.expect.json beside NAME.grad unless
    ``no_expect``; ``update_expect`` writes it first from this source's derivatives.
    ``checker(program, options) -> Result`` replaces numerics.check (check SOURCE --exec
    compares a black box with the program), with no expectation.  Given a list
    ``unwritten``, update_expect writes nothing: the file is compared as it would be written,
    and (path, text) goes to the list for the caller to write (:func:`save_expect`) when the
    results are used (the pytest plugin checks as it collects, and -k or --collect-only
    would otherwise write files for tests that never run).  ``label`` names program text
    in place of <expr> (check_sources numbers several: <expr 1>, <expr 2>)."""
    from .values import drop_unused, read_source
    text_label = label
    label = source if isinstance(source, str) and "\n" not in source else "<expr>"
    where: dict = {}  # the position of each option of a # check: line
    misspelt: list = []  # notes on leading comments that look like # check: lines
    try:
        src = read_source(source)
        if text_label is not None and src.label == "<expr>":
            src = src._replace(label=text_label)
        label = src.label
        misspelt = misspelt_check_lines(src)
        try:
            program = _parsed(src, source if isinstance(source, str) else None, label != text_label)
        except FileError:  # (text that reads as a path that does not exist: under its own name)
            label = source
            raise
        from_file = file_options(src, where)
        options = merged(from_file, overrides or {})
        ignored = misspelt + drop_unused(options.get("at", {}), program)  # (as every command does: SPEC §3)
        ignored += _one_point_only(program, from_file, overrides or {}, options)
        if checker is not None:
            ignored += _not_for_the_checker(from_file, options)
            checked = _checked(src.label, checker(program, options), options)
        else:
            checked = _check_read(src, program, options, update_expect, no_expect, unwritten)
        checked.ignored = ignored
        return checked
    except GradcalcError as err:
        if where:
            _at_check_line(err, src, where, overrides or {})
        if misspelt:  # (its options would have given the missing value, say)
            err.hint = misspelt[0] + (f"; {err._hint}" if err._hint else "")
        return _failed(label, err)
    except MemoryError:
        pass  # (said below, once the error's frames, and the tape they hold, are gone)
    except Exception as exc:  # noqa: BLE001 - a bug: this source's error, and the others still checked
        return _failed(label, _internal(exc))
    gc.collect()  # (the collector is off for the command: the tape's cycles wait for it)
    return _failed(label, out_of_memory())


def _parsed(src: Source, given: str | None, as_read: bool):
    """The program of src (values.parse_source); src is program text relabelled (<expr 2>)
    unless ``as_read``: text that does not parse and reads as a path is still a missing file."""
    from .errors import SyntaxError_
    from .values import parse_source
    try:
        return parse_source(src, given)
    except SyntaxError_ as err:
        if not as_read:
            try:
                parse_source(src._replace(label="<expr>"), given)  # (a FileError, for a path)
            except SyntaxError_:
                pass
        raise err


def _internal(exc: Exception) -> InternalError:
    """A bug met while checking a source, in a report's words: the exception and where it arose."""
    import traceback
    frames = traceback.extract_tb(exc.__traceback__)
    at = f" at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""
    return InternalError(f"{internal_words(exc, at)}: a bug in gradcalc, not in this source; the other "
                         "sources were checked",
                         hint=f"please report it with this source at {REPORT_URL}")


def _not_for_the_checker(from_file: dict, options: dict) -> list[str]:
    """Drop from options what a file's # check: lines give that check SOURCE --exec does not
    apply (on the command line those are refused): the note that says so, or none."""
    dropped = [k for k in FILE_OPTIONS if k in from_file and k not in CHECKER_FILE_OPTIONS]
    if not dropped:
        return []
    for k in dropped:
        options.pop(k, None)
    flags = ", ".join(f"--{k}" if FILE_OPTIONS[k] == "flag" else f"--{k} {from_file[k]}" for k in dropped)
    return [f"# check: {flags} {'does' if len(dropped) == 1 else 'do'} not apply to check SOURCE --exec; ignored"]


def _one_point_only(program, from_file: dict, overrides: dict, options: dict) -> list[str]:
    """A caller's --points (``check dir/ --points 3``) draws values for the inputs --at leaves
    free; a file whose own ``# check: --at`` leaves none free is checked at that one point,
    with a note, rather than failing: its author fixed the point on purpose.  (--points with
    an --at that fixes every input, both from the caller or both from the file, stays an
    error: one of the two was given in vain.)"""
    from .lower import find_inputs
    n = overrides.get("points")
    if not n or "points" in from_file or not from_file.get("at"):
        return []
    try:
        inputs = [i.name for i in find_inputs(program)]
    except GradcalcError:  # (the run reports it, located)
        return []
    at = options.get("at", {})
    if not inputs or not all(i in at for i in inputs) or all(i in (overrides.get("at") or {}) for i in inputs):
        return []
    options["points"] = 0
    return [f"--points {n} draws the inputs --at leaves free, and the file's # check: --at fixes every "
            "input: checked at that point only"]


def _at_check_line(err: GradcalcError, src: Source, where: dict, overrides: dict) -> None:
    """Place an error about an option's value at the # check: line that gave it, when the
    caller did not override it: --of nosuch, --wrt zz, a value of --at that is no input or
    has the wrong shape.  (An error already placed, in the program, stays there.)"""
    if err.pos is not None:
        return
    key = err.option or "at"  # (an error about a value names the value, not its option)
    given = overrides.get(key)
    if given is not None and (key != "at" or err.name in given):
        return  # the caller's value, not the file's
    pos = where.get((key, err.name)) or where.get((key, None))
    if pos is not None:
        err.pos, err.source = pos, src


def _checked(label: str, checked: Result, options: dict, expect_file=None, updated=False) -> SourceCheck:
    """A source's check from check()'s Result, with the tolerances it applied."""
    options.update(rtol=checked.rtol, atol=checked.atol)
    for r in checked.results:  # (results added after check(): an expectation's stale entries)
        if isinstance(r, CheckResult):
            r.extra.setdefault("rtol", checked.rtol)
            r.extra.setdefault("atol", checked.atol)
    notes = [] if checked.results else ["nothing to check: the program has no inputs"]
    return SourceCheck(label, checked.results, options, expect_file, updated, notes)


def _check_read(src: Source, program, options: dict, update_expect: bool, no_expect: bool,
                unwritten: list | None = None) -> SourceCheck:
    from .numerics import check, expect_point
    given = options.pop("expect", None)  # (a file named by the caller must exist; a sibling need not)
    path = given or (None if no_expect else expect_path(src.label))
    if update_expect:
        if path is None:
            raise UsageError(f"{option('update_expect')} writes NAME.expect.json beside a file NAME.grad, "
                             "and this source is not a file", hint=f"give the file with {option('expect')} FILE",
                             option="update_expect")
    text = expect_text(program, options) if update_expect else None
    written = text is not None
    if written and unwritten is None:
        save_expect(path, text)
    elif written:
        unwritten.append((path, text))
    if written:
        stored = json.loads(text)  # (what the file holds once written)
    else:
        stored = read_expect(path) if path and (given and not update_expect or os.path.isfile(path)) else None
    stale: list = []
    if stored is not None:
        stored, stale = _current(program, stored, path, src.label, options.get("of"))
    if stored is not None and not written and records_derivatives(stored):
        _fits(program, stored, path, options)
    if stored is not None and not options.get("points"):
        # the point the expectation was made at gives the values not given (with points, the
        # values not given are drawn; the expectation is compared at its own point anyway)
        options["at"] = {**expect_point(stored, path), **options.get("at", {})}
    # (an expectation whose every entry is stale has failed already: nothing is left to compare)
    compared = None if stale and not records_derivatives(stored) else stored
    at_points: list = []  # (a random point that cannot be checked: an error result, the others checked)
    checked = check(program, expect=compared, expect_name=path, point_errors=at_points, **options)
    checked.results.extend(stale)
    checked.results.extend(CheckError(src.label, err, point=p) for p, err in at_points)
    return _checked(src.label, checked, options, path if stored is not None else None, written)


def _current(program, stored: dict, path: str, label: str, of=None) -> tuple[dict, list]:
    """The expectation without its entries that name what the program no longer has (an
    output, an input, a name of its recorded point), and a failing result for each such
    entry: an edit that removed a name is a change to review, as a changed value is (exit 1,
    naming the entry; --update-expect refreshes the file), not a source that cannot be
    checked.  So is an entry of an output that check no longer compares (of, else the
    program's output): the output statement changed (y2 then out = y2 + x), and y2, still a
    name, would pass unchanged.  A malformed file is left as it is, for check() to report."""
    from .run import analyse
    facts = analyse(program)
    inputs = {i.name for i in facts.inputs}
    names = inputs | set(facts.assigned) | set(facts.bare.values())
    compared = [of] if isinstance(of, str) else of or ([facts.output] if facts.output else None)
    at = stored.get("at", {})
    gone = {k for k in at if k not in inputs} if isinstance(at, dict) else set()
    kind = "gradient" if "gradient" in stored else "jacobian"
    table = {stored.get("of"): stored["gradient"]} if kind == "gradient" else stored.get(kind)
    if not isinstance(table, dict) or not all(isinstance(row, dict) for row in table.values()):
        return stored, []
    stale, kept = [], {}
    for o, row in table.items():
        for w, value in row.items():
            lost = o if o is not None and o not in names else w if w in gone or w not in names else None
            moved = lost is None and o is not None and compared is not None and o not in compared
            if lost is None and not moved:
                kept.setdefault(o, {})[w] = value
                continue
            if moved:
                now = f"'{compared[0]}' is" if len(compared) == 1 else "'" + "', '".join(compared) + "' are"
                what = f"'{o}' is no longer the output check compares ({now})"
            else:
                what = f"'{lost}' is no longer {'an input' if lost in gone else 'a name'} of the program"
            note = (f"{path} records d{o or '_'}/d{w}, and {what}: "
                    "review the change, then refresh the file with --update-expect")
            stale.append(CheckResult(label, 0, o, w, math.inf, math.inf, [], "expect", 0.0, False, [note], {},
                                     "expect"))
    pruned = dict(stored)
    if gone:
        pruned["at"] = {k: v for k, v in at.items() if k not in gone}
    if stale and kind == "gradient" and stored.get("of") is None:
        pruned["gradient"] = kept.get(None, {})
    elif stale:  # (a scalar's gradient is its one-row Jacobian: the same arrays)
        pruned.pop("gradient", None)
        pruned["jacobian"] = kept
    return pruned, stale


def _fits(program, stored: dict, path: str, options: dict) -> None:
    """Refuse an expectation whose entry has another shape than the derivative it names, at
    the point the expectation records: a file that does not fit the program (a stored grad
    --sum output, a hand-edited file) is the user's error, named with the shapes, not a
    mismatch of derivatives.  What else is malformed is left for check() to report."""
    from .codec import JSONNumberError, array_from_json
    from .lower import trace
    from .numerics import expect_point
    from .session import as_arrays
    kind = "gradient" if "gradient" in stored else "jacobian"
    table = {stored.get("of"): stored["gradient"]} if kind == "gradient" else stored.get(kind)
    if not isinstance(table, dict) or not all(isinstance(row, dict) for row in table.values()):
        return
    tr = trace(program, {**as_arrays(options.get("at", {})), **expect_point(stored, path)}, record=False,
               **_limits(options))
    for o, row in table.items():
        o = o if o is not None else (options.get("of") or [tr.tape.output])[0]
        if o not in tr.tape.names:
            continue
        out = tr.value(o).shape
        for w, entry in row.items():
            if w not in tr.tape.names or entry is None:
                continue
            try:
                got = array_from_json(entry).shape
            except JSONNumberError:
                continue
            inp = tr.value(w).shape
            if got == out + inp:
                continue
            if kind == "gradient" and out != () and got == inp:
                raise ValueError_(f"expectation file '{path}' records the gradient of the sum of '{o}' (as grad "
                                  f"--sum writes it: gradient['{w}'] of shape {got}), and '{o}' has shape {out}: "
                                  f"check compares the Jacobian d{o}/d{w}, of shape {out + inp}",
                                  hint=f"store gradcalc jacobian -f json in its place, or rewrite it with "
                                       f"{option('update_expect')} (if '{o}' was a scalar when the file was "
                                       "written, the program changed: review that first)", option="expect")
            where = f"gradient['{w}']" if kind == "gradient" else f"jacobian['{o}']['{w}']"
            raise ValueError_(f"expectation file '{path}': the stored {where} has shape {got}, and d{o}/d{w} "
                              f"has shape {out + inp} ('{o}' {out} by '{w}' {inp}, at the point the file records)",
                              hint=f"if the program changed, review it and refresh the file with "
                                   f"{option('update_expect')}; else store gradcalc grad or jacobian -f json "
                                   "of this program", option="expect")


def _limits(options: dict) -> dict:
    """max_elements and max_steps as check() applies them."""
    from .lower import DEFAULT_MAX_STEPS
    from .tape import DEFAULT_MAX_ELEMENTS
    return {"max_elements": options.get("max_elements") or DEFAULT_MAX_ELEMENTS,
            "max_steps": options.get("max_steps") or DEFAULT_MAX_STEPS}


def merged(from_file: dict, overrides: dict) -> dict:
    """The file's options with the caller's given ones (not None) on top; ``at`` merges
    name by name, the caller's values winning (each name remembering whether its value came
    from an @FILE mapping: values.Point)."""
    from .values import Point
    out = dict(from_file)
    for k, v in overrides.items():
        if v is None:
            continue
        out[k] = Point(out.get("at", {})).merged(v) if k == "at" else v
    return out


# ==========================================================================
# # check: lines
# ==========================================================================

def file_options(src: Source, where: dict | None = None) -> dict:
    """The options of the ``# check:`` lines of a program's leading comment block (the lines
    before its first statement), as check()'s keyword arguments; ``at`` parsed (an @FILE
    relative to the program's folder), ``--wrt a,b`` split as on the command line.  A bad
    line is a UsageError at its line.  ``where`` gets the position of each option given:
    (keyword, name) -> Pos, name being the value of of/wrt, each name of at, else None."""
    found: dict = {}
    for number, line in enumerate(src.text.splitlines(), 1):
        text = line.strip()
        if text and not text.startswith("#"):
            break  # the first statement ends the leading comment block
        if text.startswith(CHECK_LINE):
            _read_line(src, number, line, found, {} if where is None else where)
    return found


#: A leading comment that looks like a ``# check:`` line but is not one ('#check:', '# Check:',
#: '# check --at ...', '#  check:'): read as a comment, its options would be lost unsaid.
_NEAR_CHECK_LINE = re.compile(r"#+\s*check\s*(:|--)", re.IGNORECASE)


def misspelt_check_lines(src: Source) -> list[str]:
    """A note for each line of the leading comment block that looks like a ``# check:`` line
    and is not one (see _NEAR_CHECK_LINE), saying so."""
    notes = []
    for number, line in enumerate(src.text.splitlines(), 1):
        text = line.strip()
        if text and not text.startswith("#"):
            break
        if _NEAR_CHECK_LINE.match(text) and not text.startswith(CHECK_LINE):
            notes.append(f"line {number}, '{text[:40]}', is read as a comment: a settings line begins "
                         f"'{CHECK_LINE}' exactly")
    return notes


def _read_line(src: Source, number: int, line: str, found: dict, where: dict) -> None:
    start = cursor = line.index(CHECK_LINE) + len(CHECK_LINE)

    def fail(message, word=None, hint=None, kind=UsageError):
        col = line.find(word, start) + 1 if word and word in line[start:] else \
            len(line) - len(line[start:].lstrip()) + 1
        return kind(f"# check: {message}", Pos(number, col), source=src, hint=hint)

    try:
        words = shlex.split(line[start:])
    except ValueError as err:
        raise fail(f"cannot split the line: {err}") from None
    i = 0
    while i < len(words):
        word = words[i]
        col = line.find(word, cursor)  # (-1 for a word shlex unquoted: then the line's start)
        cursor = col + len(word) if col >= 0 else cursor
        here = Pos(number, (col if col >= 0 else len(line) - len(line[start:].lstrip())) + 1)
        name, eq, value = word[2:].partition("=") if word.startswith("--") else (None, "", "")
        key = name.replace("-", "_") if name else None
        if key not in FILE_OPTIONS:
            raise fail(f"unknown option '{word}'", word, hint="a # check: line takes " +
                       ", ".join("--" + k for k in FILE_OPTIONS))
        kind = FILE_OPTIONS[key]
        if kind == "flag":
            if eq:
                raise fail(f"--{name} takes no value", word)
            found[key] = True
            where[(key, None)] = here
            i += 1
            continue
        if not eq:
            if i + 1 >= len(words):
                raise fail(f"--{name} needs a value", word)
            value, i = words[i + 1], i + 1
        i += 1
        if key == "at":
            from .values import Point
            point = _file_values(src, value, fail)
            found["at"] = Point(found.get("at", {})).merged(point)
            where.update(dict.fromkeys((("at", n) for n in point), here))
        elif kind == "list":
            from .values import split_top_level
            names = [n for n in split_top_level(value) if n] if key == "wrt" else [value]
            found[key] = found.get(key, []) + names
            where.update(dict.fromkeys(((key, n) for n in names), here))
        else:
            found[key] = _convert(kind, value, fail, word)
            where[(key, None)] = here


def _convert(kind: str, value: str, fail, word: str):
    from .stencil import METHODS
    try:
        x = {"int": int, "float": float, "str": str}[kind](value)
    except ValueError:
        raise fail(f"'{value}' is not {'an integer' if kind == 'int' else 'a number'}", word) from None
    if kind == "str" and x not in METHODS:
        raise fail(f"unknown method '{value}'", word, hint="one of " + ", ".join(METHODS))
    return x


def _file_values(src: Source, item: str, fail) -> dict:
    """An --at item of a # check: line (each @FILE, as ``@FILE`` or ``NAME=@FILE``, read relative
    to the program's folder); a bad value is an error at that line."""
    from .values import parse_assignments
    folder = os.path.dirname(src.label) if os.path.isfile(src.label) else ""
    try:
        return parse_assignments([_files_in(item, folder)], "--at")
    except GradcalcError as err:
        words = err.message if err.message.startswith("--at") else f"--at: {err.message}"
        raise fail(words, item, hint=err.hint, kind=type(err)) from None


def _files_in(item: str, folder: str) -> str:
    """item with each @FILE made relative to folder.  A program's settings read files beside it,
    not anywhere: a path that leads out of both the program's folder and the working directory
    (absolute, ~, ../..) or standard input is refused, so that a program file under review
    cannot have check read, and quote in its errors, a file of the machine that runs it."""
    from .values import split_top_level
    if item.strip().startswith("@"):
        return "@" + _file_beside(item.strip()[1:], folder)
    parts = []
    for part in split_top_level(item):
        name, eq, value = part.partition("=")
        if eq and value.strip().startswith("@"):
            part = f"{name}=@{_file_beside(value.strip()[1:], folder)}"
        parts.append(part)
    return ",".join(parts)


def _file_beside(path: str, folder: str) -> str:
    """folder/path, where it lies under folder or the working directory (see _files_in)."""
    if path == "-":
        raise UsageError("a # check: line cannot read standard input", hint="name a file beside the program")
    joined = os.path.join(folder, os.path.expanduser(path))
    real = os.path.realpath(joined)
    if not any(real == base or real.startswith(base + os.sep) for base in
               {os.path.realpath(folder or os.curdir), os.path.realpath(os.curdir)}):
        raise UsageError(f"'{path}' lies outside the program's folder and the working directory",
                         hint="a # check: line reads files beside the program (or under the folder check "
                              "runs in); give such a file with --at on the command line")
    return joined


# ==========================================================================
# Expectation files
# ==========================================================================

#: The suffix of an expectation file: NAME.grad is compared with NAME.expect.json.
EXPECT_SUFFIX = ".expect.json"


def expect_path(label: str) -> str | None:
    """NAME.expect.json for a file NAME.grad; None for anything else."""
    if label.endswith(".grad") and os.path.isfile(label):
        return label[:-len(".grad")] + EXPECT_SUFFIX
    return None


def read_expect(path: str) -> dict:
    """A stored grad/jacobian JSON object."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f, parse_float=_finite_float)
        _through_codec(data)
    except FileNotFoundError:  # (a missing file is a file error, worded as values words one)
        raise FileError(f"expectation file '{path}' cannot be read: the file does not exist",
                        hint=f"make it with {option('update_expect')}", option="expect") from None
    except OSError as err:
        raise FileError(f"expectation file '{path}' cannot be read: {err.strerror or err}", option="expect") from None
    except RecursionError:  # (json's decoder or the codec's, past Python's limit: as --at @FILE words it)
        raise ValueError_(f"expectation file '{path}' is nested too deeply", option="expect") from None
    except ValueError as err:
        raise ValueError_(f"expectation file '{path}' cannot be read: {err}", option="expect") from None
    if not isinstance(data, dict):
        raise ValueError_(f"expectation file '{path}' must hold a JSON object from grad or jacobian -f json",
                          option="expect")
    schema = data.get("schema", JSON_SCHEMA)  # (a file written by hand may leave it out)
    if isinstance(schema, bool) or schema != JSON_SCHEMA:
        raise ValueError_(f"expectation file '{path}' has schema {json.dumps(schema)}, and this gradcalc reads "
                          f"schema {JSON_SCHEMA}", hint=f"refresh it with {option('update_expect')}, or store "
                          "this gradcalc's grad or jacobian -f json", option="expect")
    return data


def _finite_float(text: str) -> float:
    """A JSON number as a float, refused where it overflows (1e400 read as inf, and checked the
    point at x = inf; a values file refuses it so)."""
    x = float(text)
    if math.isinf(x):
        raise ValueError(f"it holds a number too large for a float: {text[:40]}")
    return x


def _through_codec(data) -> None:
    """Read every array of a stored object (a list under its objects) as check will, so that
    one nested within json's reach but past the codec's (900 deep: json decodes it, and
    array_from_json, called from further down the stack, runs out) is refused here, as
    --at @FILE refuses it.  What is no array of numbers is left for check to word."""
    from .codec import JSONNumberError, array_from_json
    objects = [data] if isinstance(data, dict) else []
    while objects:
        for value in objects.pop().values():
            if isinstance(value, dict):
                objects.append(value)
            elif isinstance(value, list):
                try:
                    array_from_json(value)
                except JSONNumberError:
                    pass


def expect_document(program, options: dict) -> dict:
    """What `gradcalc grad -f json` (a scalar output) or `gradcalc jacobian -f json` (any
    other) writes for the program at the options' point, of and wrt: the expectation.
    With ``points`` (check draws the inputs ``at`` leaves free), at the first random point
    check draws (``seed``'s) where the program runs; "at" records its values."""
    if not options.get("points"):
        return _document(program, options.get("at", {}), options)
    first = None
    for point in _drawn(program, options):
        try:
            return _document(program, point, options)
        except UsageError:  # (no point's: --of nosuch)
            raise
        except GradcalcError as err:  # (this point's: check reports it there, and the next may do)
            first = first or err
    raise first


def _drawn(program, options: dict) -> list[dict]:
    """The random points check(points=, seed=) draws (numerics._random_points, from a fresh
    generator of the seed, as check() does first), each with the values ``at`` gives."""
    import numpy as np

    from .numerics import _random_points
    from .session import as_arrays
    rng = np.random.default_rng(options.get("seed") or 0)
    return _random_points(program, as_arrays(options.get("at", {})), options["points"], rng, _limits(options))


def _document(program, at: dict, options: dict) -> dict:
    from . import api
    from .codec import to_json
    kw = {k: options[k] for k in ("of", "wrt", "max_elements", "max_steps") if options.get(k) is not None}
    of = kw.pop("of", None)
    result = None
    if of is None or len(of) == 1:
        try:
            result = api.grad(program, at, of=of[0] if of else None, **kw)
        except ShapeError as err:  # a non-scalar output: its Jacobian
            if "grad needs a scalar output" not in err.message:
                raise
    if result is None:
        result = api.jacobian(program, at, of=of, **kw)
    return {"schema": JSON_SCHEMA, **to_json(result.to_json())}


#: The "schema" of every JSON document gradcalc writes (SPEC §6).
JSON_SCHEMA = 1


def records_derivatives(doc: dict) -> bool:
    """Whether a grad/jacobian document records any derivative (an expectation that records
    none compares nothing)."""
    return bool(doc.get("gradient")) or any(doc.get("jacobian", {}).values())


def write_expect(program, options: dict, path: str) -> bool:
    """Write (or refresh) the expectation file at path; not when it would record no
    derivative (a program without inputs: nothing to compare, ever).  Whether it wrote."""
    text = expect_text(program, options)
    if text is not None:
        save_expect(path, text)
    return text is not None


def expect_text(program, options: dict) -> str | None:
    """The text of the expectation file of the program (:func:`expect_document`), or None
    when it would record no derivative."""
    doc = expect_document(program, options)
    return json.dumps(doc, allow_nan=False) + "\n" if records_derivatives(doc) else None


def save_expect(path: str, text: str) -> None:
    """Write an expectation file's text (:func:`expect_text`) at path."""
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as err:
        raise ValueError_(f"cannot write expectation file '{path}': {err.strerror}") from None


# ==========================================================================
# Names of results
# ==========================================================================

def result_id(r) -> str:
    """A result's test id: ``mlp.grad::dloss/dW1@point0`` (``@expect`` for a comparison with
    the expectation file, ``@point0[directions]`` along random directions, ``::error`` for a
    source that could not be checked, ``::error@point3`` for a random point that could not)."""
    name = os.path.basename(r.source) if os.path.isfile(r.source) else r.source
    if isinstance(r, CheckError):  # (an error at one random point: that point's, one id each)
        return f"{name}::error" + ("" if r.point is None else f"@point{r.point}")
    what = f"d{r.of}/d{r.wrt}" if r.wrt else f"{r.of}(value)"
    comparison = getattr(r, "comparison", "jacobian")
    where = "expect" if comparison == "expect" else f"point{r.point}"
    if comparison not in ("jacobian", "expect"):
        where += f"[{comparison}]"
    return f"{name}::{what}@{where}"


# ==========================================================================
# Results in words (the library prints nothing: front ends write these)
# ==========================================================================

def derivative_text(r) -> str:
    """A result's derivative: d_/dx, or y (value) for a comparison of values."""
    return f"{r.of} (value)" if not r.wrt else f"d{r.of}/d{r.wrt}"


def comparison_text(r) -> str:
    """What a result compared: "full Jacobian, central", "central (4 directions)",
    "expectation file", "black box, richardson"; "error" for a source not checked."""
    kind = getattr(r, "comparison", "jacobian")
    if kind == "jacobian":
        return f"full Jacobian, {r.method}"
    if kind == "expect":
        return "expectation file"
    if kind == "exec":
        return f"black box, {r.method}"
    return "error" if kind == "error" else r.method


def error_location(r: CheckError) -> str:
    """FILE:LINE:COL (as much of it as is known) of an error result."""
    return ":".join([r.file] + [str(n) for n in (r.line, r.column) if n is not None])


def row_text(r, message=None) -> str:
    """One line per result: the verdict, where, what was compared, the errors, and for a
    failure its numbers at the worst element, then the notes.  ``message(err)`` words an
    error result's message (the command line names its flags; default: the library's)."""
    from .checks import breach_text
    if isinstance(r, CheckError):
        text = message(r.error) if message else r.message
        return f"ERROR {error_location(r)}: {r.kind} error: {text}"
    facts = [t for t in [breach_text(r)] + list(r.notes) if t]
    order = getattr(r, "extra", {}).get("taylor_order")  # (--taylor)
    return (f"{'ok' if r.ok else 'FAIL'} {r.source} point={r.point} {derivative_text(r)} "
            f"[{comparison_text(r)}] max_abs_err={r.max_abs_err:.3g} max_rel_err={r.max_rel_err:.3g}"
            + ("" if order is None else f" taylor_order={order:.3g}") + "".join(f" | {t}" for t in facts))


def counts(results) -> tuple[int, int, int]:
    """(passed, failed, errors) among results."""
    errors = sum(isinstance(r, CheckError) for r in results)
    failed = sum(not r.ok for r in results) - errors
    return len(results) - failed - errors, failed, errors


def summary_line(result) -> str:
    """The verdict of a check, worded the same whatever was compared:
    ``check: 3 passed, 1 failed, 0 errors; full Jacobian, central; rtol 1e-06, atol 1e-08``."""
    passed, failed, errors = counts(result.results)
    kinds = list(dict.fromkeys(comparison_text(r) for r in result.results if not isinstance(r, CheckError)))
    rtol, atol = getattr(result, "rtol", None), getattr(result, "atol", None)
    tol = f"rtol {rtol:g}, atol {atol:g}" if rtol is not None else "tolerances per source"
    return (f"check: {passed} passed, {failed} failed, {errors} error{'' if errors == 1 else 's'}; "
            f"{' + '.join(kinds) or 'nothing compared'}; {tol}")


__all__ = ["check_sources", "check_source", "CheckError", "SourceCheck", "CheckResult", "result_id",
           "row_text", "summary_line", "comparison_text", "derivative_text", "counts",
           "file_options", "expect_path", "write_expect", "read_expect", "EXIT_PASSED", "EXIT_FAILED",
           "EXIT_ERROR"]
