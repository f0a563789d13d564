"""Shell conventions, values and output (issue 17): --version, completion, colour, values
files and pipes, --save, --wrt a,b, and the rough edges a new user hits."""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cli_run import ok, ok_json, run as run_cli, user_error


#: The installed console script (its name is the one completion scripts use).
SCRIPT = str(Path(sys.executable).with_name("gradcalc"))


def shell(*args, env=None, input=None):
    """The command line in a subprocess (where the environment and terminals matter)."""
    full = {**os.environ, **(env or {})}
    full = {k: v for k, v in full.items() if v is not None}  # (None: unset it)
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, env=full, input=input, timeout=60)


# -- the point a grad/jacobian output was made at ---------------------------------

def test_grad_json_records_the_point_defaults_included():
    doc = ok_json("grad", "input a = 2; x^2*a", "--at", "x=3")
    assert doc["at"] == {"a": 2.0, "x": 3.0}
    assert doc["gradient"] == {"a": 9.0, "x": 12.0}  # d(a x^2)/da = x^2, d/dx = 2 a x


def test_jacobian_json_records_the_point():
    doc = ok_json("jacobian", "x*y", "--at", "x=[[1,2]],y=3")
    assert doc["at"] == {"x": [[1.0, 2.0]], "y": 3.0}


# -- the unnamed output: one name everywhere ----------------------------------------

def test_the_unnamed_output_is_underscore_in_tables_and_never_a_program_name():
    out = ok("grad", "g = x^2; f = 2*x; g", "--at", "x=3").stdout
    assert "d_/dx │ scalar │     6" in out and "df/dx" not in out  # the bare `g`: d(x^2)/dx = 6
    out = ok("grad", "f = 2*x; x^2", "--at", "x=3").stdout
    assert "gradient of _ = 9" in out and "d_/dx" in out and "df/dx" not in out


@pytest.mark.parametrize("args, text", [
    (("jacobian", "f = x; 2*x", "--at", "x=[1,2]"), "jacobian d_/dx"),
    (("hessian", "f = x; x^2*y", "--at", "x=1,y=2"), "hessian of _"),
    (("hessian", "f = x; sum(x^2)", "--at", "x=[1,2]"), "d²_/dxdx"),
    (("vjp", "f = x; 2*x", "--at", "x=[1,2]", "--cotangent", "1"), "v^T d_/dx"),
    (("jvp", "f = x; 2*x", "--at", "x=1", "--tangent", "x=1"), "│ _ "),
    (("graph", "f = x; 2*x", "--at", "x=1"), "output _"),
])
def test_the_unnamed_output_has_the_same_name_in_every_view(args, text):
    out = ok(*args).stdout
    assert text in out and "df/" not in out


def test_the_unnamed_output_is_underscore_in_json_and_errors():
    assert ok_json("grad", "x^2", "--at", "x=1")["of"] == "_"
    err = user_error("grad", "x*2", "--at", "x=[1,2]").stderr
    assert "'_' has shape (2,)" in err


def test_a_mistyped_command_is_suggested_once():
    err = user_error("gard", "x").stderr
    assert err.count("Did you mean 'grad'?") == 1
    r = shell("gard", "x")  # (through main, as a user sees it)
    assert (r.returncode, r.stderr) == (2, "error: No such command 'gard'. Did you mean 'grad'?\n"
                                           "hint: see 'gradcalc --help'\n")


# -- --version, completion ---------------------------------------------------------

def _pyproject_version() -> str:
    import re  # (tomllib is Python 3.11's; gradcalc runs on 3.10)
    text = (Path(__file__).parent.parent / "pyproject.toml").read_text()
    return re.search(r'^version = "([^"]+)"', text, re.M).group(1)


def test_version_flag_and_attribute_agree_with_pyproject():
    import gradcalc
    assert gradcalc.__version__ == _pyproject_version()
    r = shell("--version")
    assert (r.returncode, r.stdout, r.stderr) == (0, f"gradcalc {_pyproject_version()}\n", "")
    assert ok("--version").stdout == r.stdout


def test_show_completion_prints_a_script_for_the_shell_it_runs_in():
    # Typer finds the shell among the command's parent processes (shellingham): run it from bash,
    # which stays its parent ('; true': bash would replace itself with a last command).  Run
    # from a process whose parents are gone (a test run left in the background), it finds none
    # and says "Shell  not supported.": so it failed twice in full runs
    r = subprocess.run(["bash", "-c", f"'{SCRIPT}' --show-completion; true"], capture_output=True, text=True,
                       timeout=60)
    assert "_gradcalc_completion()" in r.stdout and "_GRADCALC_COMPLETE" in r.stdout, r.stderr


def test_completion_offers_commands_and_option_values():
    words = shell(env={"_GRADCALC_COMPLETE": "complete_bash", "COMP_WORDS": "gradcalc gr",
                          "COMP_CWORD": "1"})
    assert words.stdout.split() == ["grad", "graph"]
    words = shell(env={"_GRADCALC_COMPLETE": "complete_bash", "COMP_WORDS": "gradcalc grad --unc",
                          "COMP_CWORD": "2"})
    assert words.stdout.split() == ["--unconnected"]


# -- colour and terminals -------------------------------------------------------------

def in_terminal(*args, env=None) -> str:
    """What the command writes to a terminal (a pseudo-terminal of 100 columns)."""
    import fcntl
    import pty
    import struct
    import termios
    main_fd, child_fd = pty.openpty()
    fcntl.ioctl(child_fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
    full = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "COLUMNS")}
    full.update({"TERM": "xterm-256color", **(env or {})})
    proc = subprocess.Popen([SCRIPT, *args], stdout=child_fd, stderr=child_fd, env=full)
    os.close(child_fd)
    chunks = []
    while True:
        try:
            data = os.read(main_fd, 65536)
        except OSError:  # (Linux: EIO once the child has closed the terminal)
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(main_fd)
    return b"".join(chunks).decode()


GRAD = ("grad", "x^2*y", "--at", "x=1,y=2")


@pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")
@pytest.mark.parametrize("env, escapes", [
    ({}, True),
    ({"NO_COLOR": "1"}, False),
    ({"NO_COLOR": ""}, False),          # any value, SPEC §6
    ({"TERM": "dumb"}, False),
    ({"FORCE_COLOR": "1", "TERM": "dumb"}, True),
    ({"FORCE_COLOR": "1", "NO_COLOR": "1"}, False),
])
def test_escape_codes_on_a_terminal(env, escapes):
    out = in_terminal(*GRAD, env=env)
    assert "gradient of _ = 2" in out
    assert ("\x1b[" in out) is escapes, out


@pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")
@pytest.mark.parametrize("env, escapes", [
    ({}, True),
    ({"NO_COLOR": "1"}, False),
    ({"TERM": "dumb"}, False),
    ({"FORCE_COLOR": "1", "TERM": "dumb"}, True),
])
def test_help_follows_the_colour_rule_on_a_terminal(env, escapes):
    # Typer draws help with a console of its own: NO_COLOR must turn its bold and dim off too
    out = in_terminal("grad", "--help", env=env)
    assert "Usage: gradcalc grad" in re.sub(r"\x1b\[[0-9;]*m", "", out)
    assert ("\x1b[" in out) is escapes, out


@pytest.mark.parametrize("env, escapes", [({}, False), ({"FORCE_COLOR": "1"}, True),
                                          ({"FORCE_COLOR": "1", "NO_COLOR": "x"}, False)])
def test_escape_codes_into_a_pipe(env, escapes):
    clean = {"NO_COLOR": None, "FORCE_COLOR": None}
    r = shell(*GRAD, env={**clean, **env})
    assert r.returncode == 0 and ("\x1b[" in r.stdout) is escapes


@pytest.mark.parametrize("args, shown", [
    (("graph", "sin(x)*y", "--at", "x=1,y=2", "--backward"), "  equation  mul(v2, v1)"),
    (("jacobian", "x*y", "--at", "x=[1,2,3,4,5,6,7],y=2"), "  x[6]  2"),
    (("check", "sin(x)*y", "--at", "x=1,y=2"), "  derivative  d_/dy"),
    (("grad", "sum(x^2)*y", "--at", "x=[1,2,3,4,5,6],y=2"), "│ d_/dy │ scalar │"),
])
def test_tables_stay_readable_at_40_columns(args, shown):
    from cli_run import runner
    from gradcalc.cli.app import app
    r = runner.invoke(app, list(args), env={"COLUMNS": "40"})
    assert r.exit_code == 0, r.stdout
    lines = r.stdout.splitlines()
    assert shown in lines or any(line.startswith(shown) for line in lines), r.stdout
    assert "…" not in r.stdout  # nothing cut short
    assert max(len(line.rstrip()) for line in lines) <= 40, r.stdout


# -- a SOURCE that begins with '-' ---------------------------------------------------------

def test_a_source_beginning_with_a_minus_is_a_program():
    doc = ok_json("grad", "-log(p)", "--at", "p=0.5")
    assert doc["gradient"] == {"p": -2.0}  # d(-log p)/dp = -1/p
    assert ok("grad", "--at", "p=0.5", "-fplain", "-log(p)").stdout == "-2\n"
    assert ok("vjp", "-x*2", "--at", "x=1", "--cotangent", "-1.5", "-f", "plain").stdout == "3\n"
    assert ok("eval", "-q", "--at", "q=1", "-f", "plain").stdout == "-1\n"
    r = ok("check", "-x^2", "-sin(x)", "--at", "x=1", "-f", "plain").stdout
    assert "ok <expr 1>" in r and "ok <expr 2>" in r


def test_an_unknown_long_option_is_still_reported_as_one():
    assert "No such option '--bogus'" in user_error("grad", "-x", "--at", "x=1", "--bogus").stderr


# Each command that takes SOURCE, with a program that begins with '-f' (as -floor, -fabs, -fmax,
# -flip, -full and -flatten do) and the plain output expected of -fabs(x) at x = 1.5, from the
# closed form -|x|: value -1.5, derivative -1, second derivative of -|x|^3 = -6 x = -9.
DASH_F = [
    (("eval", "-fabs(x)", "--at", "x=1.5"), "-1.5\n"),
    (("grad", "-fabs(x)", "--at", "x=1.5"), "-1\n"),
    (("jacobian", "-fabs(x)", "--at", "x=1.5"), "-1\n"),
    (("vjp", "-fabs(x)", "--at", "x=1.5", "--cotangent", "2"), "-2\n"),
    (("jvp", "-fabs(x)", "--at", "x=1.5", "--tangent", "x=3"), "-3\n"),
    (("hessian", "-fabs(x)^3", "--at", "x=1.5"), "-9\n"),
]


@pytest.mark.parametrize("args, plain", DASH_F, ids=[a[0] for a, _ in DASH_F])
@pytest.mark.parametrize("fmt", [("-f", "plain"), ("-fplain",), ("--format=plain",)])
def test_a_program_beginning_with_dash_f_is_a_program(args, plain, fmt):
    # SPEC §5: a SOURCE that begins with '-' is a program when it is none of the command's
    # options; -f glued to 'abs(x)' is no format, so it is the program (it was -f 'abs(x)')
    assert ok(*args, *fmt).stdout == plain
    assert ok(args[0], *fmt, *args[1:]).stdout == plain


def test_plot_and_graph_read_a_program_beginning_with_dash_f():
    doc = ok_json("plot", "-fabs(x)", "--over", "x=1:2", "--samples", "3")
    assert json.dumps(doc).count("-1.5") >= 1  # -|x| at x = 1.5, the middle sample
    assert "abs" in ok("graph", "-fabs(x)", "--at", "x=1.5", "-fplain").stdout


@pytest.fixture
def dash_f_files(tmp_path, monkeypatch):
    """A file whose gradient is wrong (stop_gradient hides 2x: ad 1, fd 1 + 2x = 4 at 1.5)
    named like a glued -f option, and a right one."""
    monkeypatch.chdir(tmp_path)
    Path("-fwrong.grad").write_text("# check: --at x=1.5\nf = x + stop_gradient(x^2)\n")
    Path("ok.grad").write_text("# check: --at x=1.5\nf = x^2\n")


@pytest.mark.usefixtures("dash_f_files")
def test_check_checks_a_file_named_like_a_glued_option():
    # it passed with exit 0: -fwrong.grad was read as -f wrong.grad, and the later -f plain won
    r = run_cli("check", "-fwrong.grad", "ok.grad", "-f", "plain")
    assert r.exit_code == 1, r.stdout
    assert r.stdout.splitlines()[0].startswith("FAIL -fwrong.grad point=0 df/dx")
    assert "check: 1 passed, 1 failed, 0 errors" in r.stdout
    r = run_cli("check", "-fabs(x) + stop_gradient(x^2)", "x^2", "--at", "x=1.5", "-f", "plain")
    assert r.exit_code == 1 and "check: 1 passed, 1 failed" in r.stdout
    assert ok("eval", "-fwrong.grad", "--at", "x=2", "-f", "plain").stdout == "6\n"  # 2 + 2^2


def test_a_long_word_that_is_no_option_is_a_program():
    assert ok("eval", "--x", "--at", "x=2", "-f", "plain").stdout == "2\n"  # -(-x)
    assert ok("eval", "-fdot", "--at", "fdot=2", "-f", "plain").stdout == "-2\n"  # (dot: graph's format only)


@pytest.mark.parametrize("args, message", [
    (("eval", "x", "--at", "x=1", "-fjsno"), "Invalid value for '--format' / '-f': 'jsno'"),
    (("eval", "x", "--at", "x=1", "--bogus"), "No such option '--bogus'"),
    # '-f' alone is the option: it may not take the next word and let a later -f win unnoticed
    (("grad", "-f", "--at", "f=1", "-f", "json"), "Invalid value for '--format' / '-f': '--at'"),
])
def test_what_looks_like_a_misspelt_option_is_reported_as_one(args, message):
    assert message in user_error(*args).stderr


@pytest.mark.parametrize("args, note", [
    (("check", "x^2", "--at", "x=1", "--rtool", "1e-3"),
     "note: '--rtool' is none of check's options, so it is read as a program; did you mean '--rtol'?\n"),
    (("grad", "--at", "x=1", "--bogus"), "note: '--bogus' is none of grad's options, so it is read as a program\n"),
    (("eval", "-fjsno", "--at", "fjsno=1"),
     "note: '-fjsno' is none of eval's options, so it is read as a program; did you mean '-fjson'?\n"),
])
def test_a_program_spelt_like_an_option_gets_a_note(args, note):
    # (read as programs, as SPEC §5 says, their errors alone did not say why: 'rtool' has no value)
    assert run_cli(*args).stderr.startswith(note)


@pytest.mark.parametrize("args", [("eval", "-floor(x)", "--at", "x=1.5"), ("eval", "--at", "x=1", "--", "--x"),
                                  ("eval", "-fdot", "--at", "fdot=1")])
def test_programs_that_are_no_misspelt_option_get_no_note(args):
    assert "note:" not in ok(*args).stderr


def test_programs_last_moves_only_what_is_no_option():
    from gradcalc.cli.app import build_app, programs_last
    from typer.main import get_command
    cmd = get_command(build_app(["vjp"])).commands["vjp"]
    assert programs_last(["-x", "--cotangent", "-1", "-fjson", "--at=x=-2"], cmd) == \
        ["--cotangent", "-1", "-fjson", "--at=x=-2", "--", "-x"]
    assert programs_last(["x", "--at", "x=1"], cmd) == ["x", "--at", "x=1"]
    check = get_command(build_app(["check"])).commands["check"]
    assert programs_last(["-y", "x", "-", "--at", "x=1"], check) == ["--at", "x=1", "--", "-y", "x", "-"]
    assert programs_last(["-floor(x)", "--at", "x=1", "-fjson"], cmd) == \
        ["--at", "x=1", "-fjson", "--", "-floor(x)"]
    assert programs_last(["-fwrong.grad", "ok.grad", "-fplain", "--json"], check) == \
        ["-fplain", "--json", "--", "-fwrong.grad", "ok.grad"]


# -- values: stdin, pipes, headers, shared parameter files ------------------------------

def test_a_value_from_standard_input():
    # d/dx sum(x^2) = 2 x
    assert ok("grad", "sum(x^2)", "--at", "x=@-", "-f", "plain", input="[1, 2]").stdout == "2 4\n"
    assert ok("grad", "x*y", "--at", "@-", "-f", "plain", input='{"x": 3, "y": 5}').stdout == "5\n3\n"


@pytest.mark.parametrize("command", ["grad", "check"])
def test_standard_input_gives_one_thing(command):
    # check reads its --at values before its sources: the value took the program text, and the
    # error was "cannot read '-': loadtxt: input contained no data"
    r = user_error(command, "-", "--at", "x=@-", input="x^2")
    assert r.stderr.splitlines()[0] == "error: --at x=@-: standard input is read already, by SOURCE -"
    assert ok("check", "-", "--at", "x=2", "-f", "plain", input="x^2").stdout.startswith("ok <stdin> ")


@pytest.mark.skipif(sys.platform == "win32", reason="process substitution is POSIX")
def test_a_pipe_is_read_by_its_content():
    npy = "python3 -c 'import numpy, sys; numpy.save(sys.stdout.buffer, numpy.array([1., 2.]))'"
    for producer in ("echo '[1,2]'", "printf '1 2\\n'", "printf 'a b\\n1 2\\n'", npy):
        r = subprocess.run(["bash", "-c", f'"{SCRIPT}" grad "sum(x^2)" --at x=@<({producer}) -f plain'],
                           capture_output=True, text=True, timeout=60)
        assert (r.returncode, r.stdout) == (0, "2 4\n"), (producer, r.stderr)


@pytest.mark.parametrize("name, content", [
    ("v", b"[[1, 2], [3, 4]]"),              # JSON
    ("v.dat", b"x y\n1 2\n3 4\n"),           # text with a header
    ("v.csv", b"x,y\n1,2\n3,4\n"),           # CSV with a header
    ("v.txt", b"# a comment\n1 2\n3 4\n"),   # comments were always skipped
])
def test_files_without_extension_and_headers(tmp_path, name, content):
    p = tmp_path / name
    p.write_bytes(content)
    assert ok_json("eval", "x", "--at", f"x=@{p}")["values"]["_"] == [[1.0, 2.0], [3.0, 4.0]]


@pytest.mark.parametrize("name, content, field", [
    ("v.csv", b"1.5e,2\n3,4\n", "1.5e"),  # a typo in the first row: it was dropped as a header ([3, 4])
    ("v.txt", b"1.5e\n3\n", "1.5e"),
    ("v.csv", b"x,2\n3,4\n", "x"),         # half a header, half a number: not names alone
])
def test_a_first_row_with_a_number_in_it_is_data_not_a_header(tmp_path, name, content, field):
    p = tmp_path / name
    p.write_bytes(content)
    r = user_error("eval", "x", "--at", f"x=@{p}")
    assert f"cannot read '{p}': '{field}' at line 1, column 1 is not a number" in r.stderr


@pytest.mark.parametrize("name, content, words", [
    # the file's words, with its lines as an editor numbers them (NumPy's "to float64 at row 0",
    # "use `usecols`" and the codec's "can't decode byte 0xff" before: fuzz hunt)
    ("v.csv", b"a,b\n1,2\n3,zz\n", "cannot read '{p}': 'zz' at line 3, column 2 is not a number"),
    ("v.txt", b"# c\n1 2\n3 q\n", "cannot read '{p}': 'q' at line 3, column 2 is not a number"),
    ("v.txt", b"1 2\n\n3 4 5\n", "cannot read '{p}': its rows hold different numbers of entries (2 on line 1, 3 on "
                                   "line 3)"),
    ("v.txt", b"\xff\xfe\x00", "cannot read '{p}': it is not UTF-8 text (byte 0)"),
])
def test_a_values_file_that_holds_no_array_is_worded_in_the_files_terms(tmp_path, name, content, words):
    p = tmp_path / name
    p.write_bytes(content)
    assert words.format(p=p) in user_error("eval", "x", "--at", f"x=@{p}").stderr


def test_a_header_of_names_is_still_skipped_and_nan_inf_are_data(tmp_path):
    for content in (b"x1, y_2\n3,4\n", b'"x","y"\n3,4\n'):
        (tmp_path / "h.csv").write_bytes(content)
        assert ok("eval", "x", "--at", f"x=@{tmp_path / 'h.csv'}", "-f", "plain").stdout == "3 4\n"
    (tmp_path / "n.csv").write_bytes(b"nan,inf\n3,4\n")  # numpy.loadtxt reads nan and inf as numbers
    assert ok("eval", "x", "--at", f"x=@{tmp_path / 'n.csv'}", "-f", "plain").stdout == "nan inf 3 4\n"


def test_a_npy_file_without_extension(tmp_path):
    import io
    buf = io.BytesIO()
    np.save(buf, np.array([1.0, 2.0]))
    (tmp_path / "v").write_bytes(buf.getvalue())
    assert ok_json("eval", "x", "--at", f"x=@{tmp_path / 'v'}")["values"]["_"] == [1.0, 2.0]


def test_unused_names_of_a_parameter_file_are_ignored_with_a_note(tmp_path):
    p = tmp_path / "params.json"
    p.write_text(json.dumps({"x": 2, "lr": 0.1, "momentum": 0.9}))
    r = ok("grad", "x^2", "--at", f"@{p}", "-f", "json")
    assert json.loads(r.stdout)["gradient"] == {"x": 4.0}
    assert r.stderr == f"note: --at @{p}: 'lr', 'momentum' are not inputs of the program; ignored\n"
    r = user_error("grad", "x^2", "--at", f"@{p}", "--at", "lr=1")  # typed: still an error
    assert "'lr' is not an input of the program" in r.stderr


def test_gradcalc_s_own_json_output_as_a_values_file(tmp_path):
    ev = tmp_path / "eval.json"
    ev.write_text(ok("eval", "input x = 3; y = 2*x", "--all", "-f", "json").stdout)
    r = ok("grad", "x^3", "--at", f"@{ev}", "-f", "plain")
    assert r.stdout == "27\n"  # 3 x^2 at x = 3, from the eval output's values
    assert "'y' is not an input" in r.stderr
    g = tmp_path / "grad.json"
    g.write_text(ok("grad", "x*y", "--at", "x=2,y=5", "-f", "json").stdout)
    assert ok("eval", "x*y", "--at", f"@{g}", "-f", "plain").stdout == "10\n"  # its point, "at"
    c = tmp_path / "check.json"
    c.write_text(json.dumps({"schema": 1, "command": "check", "ok": True, "results": []}))
    r = user_error("eval", "x", "--at", f"@{c}")
    assert "is gradcalc's JSON output of check, not a values file" in r.stderr
    assert "a values file holds a JSON object {name: value}" in r.stderr


def test_gradcalc_s_own_save_archive_as_a_values_file(tmp_path):
    # --save writes JSON paths as keys (at/x, values/y): read back as its JSON would be
    g = tmp_path / "g.npz"
    ok("grad", "x^2*y", "--at", "x=3,y=2", "--save", str(g), "-f", "json")
    r = ok("grad", "x^2*y", "--at", f"@{g}", "-f", "plain")
    assert r.stdout == "12\n9\n" and "not inputs" not in r.stderr  # d/dx = 2xy, d/dy = x^2
    e = tmp_path / "e.npz"
    ok("eval", "y = x*2", "--at", "x=3", "--save", str(e), "-f", "json")
    assert ok("eval", "z = y + 1", "--at", f"@{e}", "-f", "plain").stdout == "7\n"
    bare = tmp_path / "bare.npz"
    np.savez(bare, **{"gradient/x": np.ones(2)})
    r = user_error("eval", "x", "--at", f"@{bare}")
    assert "an archive gradcalc's --save wrote without a point or values" in r.stderr


# -- --save FILE.npz -------------------------------------------------------------------

@pytest.mark.parametrize("args, expected", [
    (("eval", "y = 2*x", "--at", "x=[1,2]"), {"values/y": [2.0, 4.0]}),
    (("grad", "x*y", "--at", "x=3,y=5"), {"at/x": 3.0, "at/y": 5.0, "value": 15.0,
                                          "gradient/x": 5.0, "gradient/y": 3.0}),
    (("jacobian", "f = x*y", "--at", "x=[1,2],y=3"),
     {"at/x": [1.0, 2.0], "at/y": 3.0, "value/f": [3.0, 6.0], "jacobian/f/x": [[3.0, 0.0], [0.0, 3.0]],
      "jacobian/f/y": [1.0, 2.0]}),
    (("vjp", "x*x", "--at", "x=[1,2]", "--cotangent", "[1,10]"),
     {"value": [1.0, 4.0], "cotangent": [1.0, 10.0], "vjp/x": [2.0, 40.0]}),  # v * 2x
    (("jvp", "x*x", "--at", "x=[1,2]", "--tangent", "x=[1,10]"),
     {"value": [1.0, 4.0], "jvp": [2.0, 40.0]}),                              # 2x * v
    (("hessian", "x^2*y", "--at", "x=1,y=2"),
     {"value": 2.0, "hessian/x/x": 4.0, "hessian/x/y": 2.0, "hessian/y/x": 2.0, "hessian/y/y": 0.0}),
])
def test_save_writes_every_array_keyed_by_its_json_path(tmp_path, args, expected):
    path = tmp_path / "out.npz"
    ok(*args, "--save", path)
    with np.load(path) as z:
        assert {k: z[k].tolist() for k in z.files} == expected


def test_save_writes_plot_samples(tmp_path):
    path = tmp_path / "plot.npz"
    ok("plot", "x^2", "--over", "x=0:1", "--samples", "3", "--save", path, "-f", "json")
    with np.load(path) as z:
        assert z["samples/abscissae"].tolist() == [0.0, 0.5, 1.0]
        assert z["samples/values"].tolist() == [0.0, 0.25, 1.0]
        assert z["samples/derivatives"].tolist() == [0.0, 1.0, 2.0]  # 2x


def test_save_skips_unconnected_nulls_and_reports_unwritable_files(tmp_path):
    path = tmp_path / "g"  # no .npz added to the name given
    ok("grad", "x + stop_gradient(z)", "--at", "x=1,z=2", "--unconnected", "none", "--save", path)
    with np.load(path) as z:
        assert sorted(z.files) == ["at/x", "at/z", "gradient/x", "value"]
    r = user_error("grad", "x", "--at", "x=1", "--save", tmp_path / "no" / "such" / "dir.npz", "-f", "json")
    assert json.loads(r.stdout)["error"]["kind"] == "file"


# -- --wrt a,b; jvp --wrt; cotangents name outputs ------------------------------------------

def test_wrt_a_comma_b_is_two_wrt_options():
    assert ok("grad", "x*y*z", "--at", "x=1,y=2,z=3", "--wrt", "x,z", "-f", "plain").stdout == "6\n2\n"
    assert ok_json("hessian", "x*y*z", "--at", "x=1,y=2,z=3", "--wrt", "x, y")["hessian"] == {
        "x": {"x": 0.0, "y": 3.0}, "y": {"x": 3.0, "y": 0.0}}  # d2(xyz)/dxdy = z
    assert "d_/dz" in ok("check", "x*y*z", "--at", "x=1,y=2,z=3", "--wrt", "x,z", "-f", "plain").stdout


def test_jvp_wrt_restricts_the_inputs_that_carry_a_tangent():
    # J v for x*y along (x: 1): y = 2
    assert ok("jvp", "x*y", "--at", "x=1,y=2", "--tangent", "x=1", "--wrt", "x", "-f", "plain").stdout == "2\n"
    r = user_error("jvp", "x*y", "--at", "x=1,y=2", "--tangent", "x=1", "--tangent", "y=1", "--wrt", "x")
    assert "--tangent 'y' is for an input outside --wrt (x)" in r.stderr
    r = user_error("jvp", "h = x*y; h", "--at", "x=1,y=2", "--tangent", "x=1", "--wrt", "h")
    assert "inputs only" in r.stderr


def test_a_cotangent_for_a_non_output_is_an_error():
    r = user_error("vjp", "x*x", "--at", "x=[1,2]", "--cotangent", "x=[1,2]")
    assert "--cotangent 'x' names an input, not an output" in r.stderr
    assert "the output is '_'" in r.stderr
    r = user_error("vjp", "a = x^2; b = sum(x)", "--of", "a", "--at", "x=[1,2]", "--cotangent", "a=[1,1]",
                   "--cotangent", "b=1")
    assert "--cotangent 'b' is not one of the outputs (a)" in r.stderr
    # named outputs are those of --of: v^T J = [1,1]*2x + 1 = [3, 5]
    assert ok("vjp", "a = x^2; b = sum(x)", "--of", "a", "--of", "b", "--at", "x=[1,2]", "--cotangent",
              "a=[1,1]", "--cotangent", "b=1", "-f", "plain").stdout == "3 5\n"


@pytest.mark.parametrize("cotangents", [["h=1"], ["h=1", "z=1"]])
def test_a_cotangent_for_an_intermediate_value_is_no_change_of_the_output(cotangents):
    # SPEC §5: a NAME that is not an output is an error, never a silent change of --of; the
    # output is z (the last statement), and h took its place (vjp 4 = dh/dx, "of": "h")
    args = [a for ct in cotangents for a in ("--cotangent", ct)]
    r = user_error("vjp", "h = x^2; z = h*3", "--at", "x=2", *args)
    assert r.stderr == ("error: <expr>: --cotangent 'h' is not an output: the output is 'z'\n"
                        "hint: for the output, give --cotangent VALUE (or z=VALUE); to take 'h' as an "
                        "output, add --of h\n")
    # dz/dx = 6x = 12 and dh/dx = 2x = 4 at x = 2
    assert ok("vjp", "h = x^2; z = h*3", "--at", "x=2", "--cotangent", "z=1", "-f", "plain").stdout == "12\n"
    assert ok("vjp", "h = x^2; z = h*3", "--at", "x=2", "--of", "h", "--cotangent", "h=1",
              "-f", "plain").stdout == "4\n"


# -- the table's footer: the point, nested as given ----------------------------------------

@pytest.mark.parametrize("at, footer", [
    ("x=[[1,2,3]]", "at x=[[1  2  3]]"),
    ("x=[[1,2],[3,4]]", "at x=[[1  2]  [3  4]]"),
    ("x=[[[1],[2]]]", "at x=[[[1]  [2]]]"),
    ("x=[]", "at x=[]"),
])
def test_the_footer_keeps_nested_arrays_nested_on_one_line(at, footer):
    out = ok("grad", "sum(x) + 1", "--at", at).stdout
    assert out.splitlines()[-1].rstrip() == footer


# -- warnings name what the program wrote ---------------------------------------------------

@pytest.mark.parametrize("args, warning", [
    (("grad", "x^-1", "--at", "x=0"), "warning: '^' at line 1, column 2 produced inf"),
    (("grad", "x^-1", "--at", "x=0"), "warning: the derivative of '^' at line 1, column 2 produced -inf"),
    (("grad", "x**2", "--at", "x=1e200"), "warning: '**' at line 1, column 2 produced inf"),
    (("grad", "x/y", "--at", "x=1,y=0"), "warning: the derivative of '/' at line 1, column 2 produced inf"),
    (("grad", "x*y", "--at", "x=1e200,y=1e200"), "warning: '*' at line 1, column 2 produced inf"),
    (("eval", "y = 1e300; y *= x", "--at", "x=1e300"), "warning: '*=' at line 1, column 12 produced inf"),
    (("hessian", "x^-1", "--at", "x=0"), "warning: the second derivative of '^' at line 1, column 2 produced"),
    (("grad", "mean(x)/0", "--at", "x=[1,2]"), "warning: '/' at line 1, column 8 produced inf"),
    (("grad", "log(x)", "--at", "x=0"), "warning: 'log' at line 1, column 1 produced -inf"),
])
def test_warnings_name_the_operator_or_builtin_written(args, warning):
    r = ok(*args)
    assert warning in r.stderr, r.stderr
    assert not any(p in r.stderr for p in ("pow_const", "'mul'", "'div'", "'pow'"))


def test_graph_backward_of_a_vector_output_says_it_seeds_with_ones():
    r = ok("graph", "x*2", "--at", "x=[1,2]", "--backward")
    assert "seed: ones(2,), the gradient of sum(_)" in r.stdout
    assert ("note: the output is not a scalar: the backward pass is seeded with ones(2,) and computes the "
            "gradient of sum(_)") in r.stdout
    plain = ok("graph", "x*2", "--at", "x=[1,2]", "--backward", "-f", "plain").stdout
    assert "# note: the output is not a scalar:" in plain
    doc = ok_json("graph", "x*2", "--at", "x=[1,2]", "--backward")
    assert any("seeded with ones" in w for w in doc["warnings"])
    scalar = ok("graph", "x*2", "--at", "x=1", "--backward")
    assert "seed: d_/d_ = 1" in scalar.stdout and "note:" not in scalar.stdout


def test_grad_help_offers_only_the_methods_grad_takes():
    from cli_run import runner
    from gradcalc.cli.app import app
    text = runner.invoke(app, ["grad", "--help"], env={"COLUMNS": "200"}).stdout
    assert "[central|forward|richardson]" in text and "complex" not in text
    r = shell("grad", "--exec", "true", "--at", "x=1", "--method", "complex")  # (main's usage errors)
    assert r.returncode == 2
    assert "error: Invalid value for '--method': 'complex' is not one of 'central', 'forward', 'richardson'" \
        in r.stderr


@pytest.mark.parametrize("text", ["a = x +\n  2*x\na", "a =\n  x", "y = -\n  x", "y += x *\n 2"])
def test_a_statement_continued_on_the_next_line_gets_a_hint_to_use_parentheses(text):
    r = user_error("eval", text, "--at", "x=1")
    assert "expected an expression, found end of line" in r.stderr
    assert "hint: a statement ends with its line: to continue it on the next line, wrap the expression in " \
           "parentheses" in r.stderr



def test_parentheses_continue_a_statement_and_no_hint_elsewhere():
    assert ok("eval", "a = (x +\n  2*x)\na", "--at", "x=1", "-f", "plain").stdout == "3\n"
    assert "parentheses" not in user_error("eval", "x -", "--at", "x=1").stderr  # (the end of the program)
    assert "parentheses" not in user_error("eval", "x = 1\ny = \n").stderr


def test_samples_cite_the_readme_not_a_spec_outside_the_repository():
    root = Path(__file__).parent.parent / "samples"
    citing = [str(p) for p in root.rglob("*") if p.is_file() and p.suffix in (".md", ".grad", ".py")
              and "SPEC" in p.read_text(encoding="utf-8")]
    assert citing == []


def test_bare_expression_names_skip_the_program_s_own():
    assert ok_json("eval", "_ = 3; x + _", "--at", "x=1", "--all")["values"] == {"x": 1.0, "_": 3.0, "_2": 4.0}
    doc = ok_json("grad", "_2 = x; x^2; 2*x", "--at", "x=1")
    assert (doc["of"], doc["value"]) == ("_3", 2.0)  # the bares are _ and _3: the program has its own _2
    assert ok_json("eval", "_, b = split(x, 2); b*2", "--at", "x=[1,2]")["values"] == {"_2": [4.0]}


def test_grad_exec_json_records_its_point_too():
    model = Path(__file__).parent.parent / "samples" / "blackbox" / "model.py"
    doc = ok_json("grad", "--exec", f"{sys.executable} {model}", "--at", "x=[0.5,-1,2],y=1.5")
    assert doc["at"] == {"x": [0.5, -1.0, 2.0], "y": 1.5}
    assert list(doc)[:5] == ["schema", "command", "of", "at", "value"]


@pytest.mark.parametrize("args", [("grad", "3"), ("jacobian", "f = 2"), ("hessian", "2 + 3"),
                                  ("vjp", "2", "--cotangent", "1")])
def test_a_program_without_inputs_says_there_is_nothing_to_differentiate(args):
    # (an empty table or an empty line exits 0, as an empty gradient is one; the note says why)
    r = ok(*args, "-f", "plain")
    assert "note: the program has no inputs: there is nothing to differentiate" in r.stderr


def test_a_program_with_inputs_has_no_such_note():
    assert "nothing to differentiate" not in ok("grad", "x^2", "--at", "x=1").stderr


def test_symbolic_without_a_point_has_no_nothing_to_differentiate_note():
    r = ok("grad", "x^2*y", "--symbolic")
    assert "2*x*y" in r.stdout and "nothing to differentiate" not in r.stderr


def test_options_after_a_double_dash_are_arguments_and_the_hint_says_so():
    r = shell("grad", "--", "-f", "--at", "f=0.5")  # (through main, as a user sees it)
    assert (r.returncode, r.stderr) == (2, "error: Got unexpected extra arguments (--at f=0.5)\n"
                                           "hint: options go before '--': after it, every word is read as "
                                           "an argument\n")
    assert "options go before" not in shell("grad", "x", "y").stderr  # (no '--': the usual hint)
    assert ok("grad", "--at", "f=0.5", "-f", "plain", "--", "-f").stdout == "-1\n"  # d(-f)/df


def test_table_titles_carry_no_trailing_blanks(tmp_path):
    path = tmp_path / "c.grad"
    path.write_text("# check: --at x=2\nx^3\n")
    for args in (("check", str(path)), ("check", "x^3", "--at", "x=2", "--sweep")):
        lines = shell(*args).stdout.splitlines()
        assert lines and all(line == line.rstrip() for line in lines), [l for l in lines if l != l.rstrip()]


# -- standard streams the shell closed, or a full disk ----------------------------

def _with_streams(args, stdin=None, stdout=subprocess.PIPE, stderr=subprocess.PIPE, close=()):
    """The command line with some standard streams closed (as the shell's >&-, 2>&-, <&-)."""
    def close_fds():
        for fd in close:
            os.close(fd)
    return subprocess.run([SCRIPT, *args], stdin=stdin, stdout=stdout, stderr=stderr, text=True,
                          preexec_fn=close_fds, timeout=60)


@pytest.mark.parametrize("args, close, code", [
    (["eval", "1"], (1,), 0),                          # stdout closed: the output goes nowhere
    (["eval", "1", "-f", "json"], (2,), 0),            # stderr closed: the command's own code
    (["eval", "sine(1)"], (2,), 2),
    (["check", "x^2", "--at", "x=1"], (1,), 0),
])
def test_closed_output_streams_keep_the_exit_code(args, close, code):
    # (exit 1 and 'internal error' before: writing to None, or flushing it at exit)
    r = _with_streams(args, stdout=None if 1 in close else subprocess.PIPE,
                      stderr=None if 2 in close else subprocess.PIPE, close=close)
    assert r.returncode == code, (r.stdout, r.stderr)
    assert "Traceback" not in (r.stderr or "") and "internal error" not in (r.stderr or "")


@pytest.mark.parametrize("args", [["grad", "-"], ["grad", "x^2", "--at", "x=@-"]])
def test_a_closed_standard_input_is_a_usage_error(args):
    r = _with_streams(args, stdin=None, close=(0,))
    assert r.returncode == 2 and "standard input is closed" in r.stderr, r.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("args", [["eval", "1"], ["grad", "x^2", "--at", "x=1", "-f", "json"],
                                  ["eval", "ones(100000)", "-f", "json"]])
def test_output_to_a_full_disk_is_an_error(args):
    with open("/dev/full", "w") as full:
        r = _with_streams(args, stdout=full)
    assert r.returncode == 2 and r.stderr.startswith("error: cannot write the output: No space left"), r.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("args, where", [
    (["grad", "sine(x)", "--at", "x=1", "-f", "json"], "stdout"),  # (an error's JSON: a traceback, exit 1)
    (["--version"], "stdout"), (["--help"], "stdout"), (["grad", "--help"], "stdout"), ([], "stdout"),
    (["grad", "sine(x)", "--at", "x=1"], "stderr"), (["check", "sine(x)"], "stderr"),  # (exit 1: "mismatch")
    (["grad", "x^2", "--at", "x=1"], "both"),
])
def test_streams_that_refuse_writes_are_exit_2_without_a_traceback(args, where):
    with open("/dev/full", "w") as full:
        r = _with_streams(args, stdout=full if where in ("stdout", "both") else subprocess.PIPE,
                          stderr=full if where in ("stderr", "both") else subprocess.PIPE)
    assert r.returncode == 2, (r.stdout, r.stderr)
    if where == "stdout":
        assert "Traceback" not in r.stderr and "cannot write the output: No space left" in r.stderr, r.stderr


def test_a_tables_widest_lines_bound_its_width_from_above():
    # a table whose longest lines fit is printed as fitting (joined, see _join_rows) without rich's measure of every
    # cell (which the print takes again): that is sound only if _widest is never below rich's
    # own widths, minimum and maximum, for tables like gradcalc's (wrapped and unwrapped
    # columns, least widths, cells of several lines, empty tables)
    import random

    from rich.console import Console
    from rich.measure import Measurement
    from rich.table import Table

    from gradcalc.cli.render import _widest
    rng = random.Random(0)
    console = Console(width=10 ** 6)
    for _ in range(500):
        table = Table()
        columns = rng.randint(1, 5)
        for _ in range(columns):
            table.add_column("h" * rng.randint(0, 12), no_wrap=rng.random() < 0.5,
                             min_width=rng.choice([None, 1, 8, 15]), overflow=rng.choice(["fold", "ellipsis"]))
        for _ in range(rng.randint(0, 4)):
            table.add_row(*[" ".join("w" * rng.randint(1, 15) for _ in range(rng.randint(1, 4)))
                            + ("\nzz" if rng.random() < 0.2 else "") for _ in range(columns)])
        measured = Measurement.get(console, console.options, table)
        assert measured.minimum <= measured.maximum <= _widest(table)


def test_a_table_whose_lines_fit_is_drawn_as_its_rows_joined():
    # _join_rows draws a table whose every line fits as one row of many-line cells (rich lays
    # out each cell: 0.5 ms a row): the same characters and escape codes as row by row, for
    # tables like gradcalc's (justified and wrapped columns, least widths, cells of several
    # lines and none, styled text, titles and captions); and a table it cannot join is left
    import random

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from gradcalc.cli.render import _join_rows, _widest
    rng = random.Random(1)

    def cell():
        words = " ".join("w" * rng.randint(1, 9) for _ in range(rng.randint(0, 3)))
        lines = words + "\nzz" * rng.choice([0, 0, 0, 1, 2])
        if rng.random() < 0.3:  # (styled spans; a cell styled as a whole, or justified, is not joined)
            text = Text(lines, style="bold" if rng.random() < 0.1 else "",
                        justify="right" if rng.random() < 0.1 else None)
            text.stylize("red", 0, rng.randint(0, len(lines)))
            return text
        return lines

    def drawn(table, join: bool) -> str:
        console = Console(width=120, force_terminal=True, color_system="standard", record=False,
                          highlight=False, markup=False, emoji=False)
        if join:
            _join_rows(table)
        with console.capture() as captured:
            console.print(table)
        return captured.get()

    joined = 0
    for _ in range(400):
        def make():
            r = random.Random(seed)
            table = Table(title="t" if r.random() < 0.3 else None, caption="c" if r.random() < 0.3 else None)
            for k in range(columns):
                table.add_column("h" * r.randint(0, 8), justify=r.choice(["left", "right", "center"]),
                                 no_wrap=r.random() < 0.5, min_width=r.choice([None, 1, 12]))
            for row in cells:
                table.add_row(*row)
            return table
        seed, columns = rng.random(), rng.randint(1, 5)
        cells = [[cell() for _ in range(columns)] for _ in range(rng.randint(0, 6))]
        if _widest(make()) > 120:
            continue
        table = make()
        assert drawn(table, True) == drawn(make(), False)
        joined += table.row_count == 1 and len(cells) > 1
    assert joined > 100
    lines = Table(show_lines=True)
    lines.add_column("a")
    lines.add_row("1")
    lines.add_row("2")
    _join_rows(lines)
    assert lines.row_count == 2


def test_json_is_written_piece_by_piece_as_one_dumps_writes_it():
    # dump_json writes a key, and a list's item, at a time (graph -f json of 16 million numbers
    # held 1.3 GB as one text): the same bytes as json.dumps of the whole converted document,
    # for payloads of nested dicts and lists, arrays and scalars (nan, inf, -0.0), empty lists
    import io
    import random

    from gradcalc.cli.render import SCHEMA, dump_json
    from gradcalc.codec import to_json
    rng = random.Random(2)

    def value(depth: int):
        kind = rng.choice(["array", "float", "list", "dict", "str", "int", "none"] if depth < 3 else ["float", "str"])
        if kind == "array":
            return np.array(rng.choice([[1.5, np.nan], [[0.0, -0.0], [np.inf, -np.inf]], 2.0, []]))
        if kind == "float":
            return rng.choice([0.1, -0.0, float("nan"), float("inf"), 1e300, 3])
        if kind == "list":
            return [value(depth + 1) for _ in range(rng.randint(0, 3))]
        if kind == "dict":
            return {f"k{i}": value(depth + 1) for i in range(rng.randint(0, 3))}
        return {"str": "a \"b\" é", "int": 7, "none": None}[kind]

    for _ in range(300):
        payload = {f"key {i}": value(0) for i in range(rng.randint(0, 5))}
        out = io.StringIO()
        dump_json(payload, out=out)
        assert out.getvalue() == json.dumps({"schema": SCHEMA, **to_json(payload)}, allow_nan=False) + "\n"


@pytest.mark.parametrize("x", [1.5, -0.0, 0.0, float("nan"), float("inf"), -float("inf"), 1e-310, 3, True, 2**60])
def test_a_single_number_is_written_as_one_element_of_an_array_is(x):
    # array_to_json takes a 0-d array as one number (a Hessian of n scalar inputs writes n² of
    # them): as SPEC §6 spells it, the same as the element of a 1-element array, sign of 0 kept
    from gradcalc.codec import array_to_json
    one, listed = array_to_json(np.array(x)), array_to_json(np.array([x]))[0]
    assert type(one) is type(listed) and (one == listed or one != one and listed != listed)
    if isinstance(one, float):
        assert math.copysign(1.0, one) == math.copysign(1.0, float(x))
    else:
        assert one == {math.inf: "inf", -math.inf: "-inf"}.get(float(x), "nan")


@pytest.mark.parametrize("columns", ["0", "1", "19", "abc", "-5"])
def test_a_columns_too_narrow_to_draw_in_is_not_taken(columns):
    # (COLUMNS=0 printed nothing at all, exit 0; COLUMNS=1 a character a line)
    env = {**os.environ, "COLUMNS": columns, "NO_COLOR": "1"}
    r = subprocess.run([SCRIPT, "grad", "x^2*y", "--at", "x=1,y=2"], capture_output=True, text=True, env=env,
                       timeout=60)
    plain = subprocess.run([SCRIPT, "grad", "x^2*y", "--at", "x=1,y=2"], capture_output=True, text=True,
                           env={k: v for k, v in env.items() if k != "COLUMNS"}, timeout=60)
    assert r.returncode == 0 and r.stdout == plain.stdout and "d_/dx" in r.stdout
