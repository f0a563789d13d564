"""Values files (SPEC §3) against hostile contents (SPEC §7: a clear error, exit 2, never a
traceback, an internal error or a read that runs until memory runs out): .npy headers that
lie about their shape, streams that never end, byte-order marks, numbers beyond float64 and
NUL bytes.  Expected values come from the files' own contents (what NumPy or json read from
them without the mark), never from gradcalc."""
from __future__ import annotations

import io
import json
import resource
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from cli_run import ok_json, user_error

SCRIPT = str(Path(sys.executable).with_name("gradcalc"))
LIMIT = "more than --max-elements=100000000"
HUGE = 10**30  # beyond int64: NumPy's count of it overflowed (exit 3)


def npy_bytes(header: str, data: bytes = bytes(24)) -> bytes:
    """An .npy file (version 1.0) with the header text given, padded as NumPy pads it."""
    text = header.encode("latin1")
    text += b" " * (-(10 + len(text) + 1) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + data


def claiming(shape, descr="<f8") -> bytes:
    """An .npy file whose header claims shape (its data: 3 float64 zeros)."""
    return npy_bytes(repr({"descr": descr, "fortran_order": False, "shape": shape}))


def npz_of(**members: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in members.items():
            z.writestr(f"{name}.npy", data)
    return buf.getvalue()


def first(r) -> str:
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    return r.stderr.splitlines()[0]


# -- .npy headers are checked before any data is read -------------------------------------

@pytest.mark.parametrize("args, label", [
    (["eval", "x*1", "--at", "x=@{npy}"], "--at x"),
    (["eval", "x*1", "--at", "@{npz}"], "--at x"),
    (["vjp", "x*2", "--at", "x=1", "--cotangent", "@{npy}"], "--cotangent"),
    (["jvp", "x*2", "--at", "x=1", "--tangent", "x=@{npy}"], "--tangent x"),
], ids=["at-npy", "at-npz", "cotangent", "tangent"])
def test_a_header_shape_beyond_int64_is_the_element_limit(tmp_path, args, label):
    # exit 3 before: OverflowError from NumPy's reader
    (tmp_path / "f.npy").write_bytes(claiming((HUGE,)))
    (tmp_path / "f.npz").write_bytes(npz_of(x=claiming((HUGE,))))
    r = user_error(*[a.format(npy=tmp_path / "f.npy", npz=tmp_path / "f.npz") for a in args])
    assert first(r) == f"error: {label}: a value of shape ({HUGE},) has {HUGE} elements, {LIMIT}"


@pytest.mark.parametrize("mapping", [False, True])
def test_a_header_shape_beyond_int64_on_standard_input(mapping):
    data = npz_of(x=claiming((HUGE,))) if mapping else claiming((HUGE,))
    r = user_error("eval", "x*1", "--at", "@-" if mapping else "x=@-", input=data)
    assert first(r) == f"error: --at x: a value of shape ({HUGE},) has {HUGE} elements, {LIMIT}"


@pytest.mark.parametrize("shape", [(10**10,), (5 * 10**8,), (20, 10**7)])
def test_a_header_claiming_more_elements_than_the_limit_is_refused_unread(tmp_path, shape):
    # a 128-byte file claiming 10^10 elements said "out of memory"; one claiming 5 * 10^8
    # allocated 4 GB before "Failed to read all data"
    p = tmp_path / "liar.npy"
    p.write_bytes(claiming(shape))
    count = int(np.prod(shape, dtype=object))
    r = user_error("eval", "x*1", "--at", f"x=@{p}")
    assert first(r) == f"error: --at x: a value of shape {shape} has {count} elements, {LIMIT}"


def test_the_header_limit_follows_max_elements(tmp_path):
    p = tmp_path / "liar.npy"
    p.write_bytes(claiming((20,)))  # 128 bytes of header, 3 elements of data
    r = user_error("eval", "x*1", "--at", f"x=@{p}", "--max-elements", "10")
    assert first(r) == "error: --at x: a value of shape (20,) has 20 elements, more than --max-elements=10"


def test_a_header_dtype_that_is_not_numbers_is_refused_before_its_data(tmp_path):
    # 10^7 strings of 10^6 characters: NumPy allocated 4 * 10^13 bytes before our dtype check
    p = tmp_path / "strings.npy"
    p.write_bytes(claiming((10**7,), "<U1000000"))
    assert first(user_error("eval", "x*1", "--at", f"x=@{p}")) == \
        f"error: --at x: '{p}' holds <U1000000 data, not numbers"


@pytest.mark.parametrize("header, why", [
    ("{'descr': '<f8', 'fortran_order': False, 'shape': (f(),)}", "its header cannot be read"),
    ("{'descr': '<f8', 'fortran_order': False, 'shape': (-5,)}", "its header gives the shape (-5,)"),
])
def test_a_bad_header_is_worded_for_users(tmp_path, header, why):
    # before: "malformed node or string on line 1: <ast.Call object at 0x7f...>", and
    # "Failed to read all data for array. Expected (-5,) = -5 elements"
    p = tmp_path / "bad.npy"
    p.write_bytes(npy_bytes(header))
    r = user_error("eval", "x*1", "--at", f"x=@{p}")
    assert first(r) == f"error: --at x: cannot read '{p}': not a .npy file of numbers: {why}"


def test_honest_npy_and_npz_files_still_read(tmp_path):
    x = np.arange(6.0).reshape(2, 3)
    np.save(tmp_path / "x.npy", x)
    np.savez_compressed(tmp_path / "p.npz", x=x, y=np.array(2.5))
    assert ok_json("eval", "x*1", "--at", f"x=@{tmp_path / 'x.npy'}")["values"]["_"] == x.tolist()
    assert ok_json("eval", "x*y", "--at", f"@{tmp_path / 'p.npz'}")["values"]["_"] == (x * 2.5).tolist()


# -- what is read is bounded by the limits -------------------------------------------------

def _limited(args, stdin=None):
    """The command line in a process that may not map more than 2 GB: before the bound, each
    of these read until that ran out ("out of memory")."""
    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    return subprocess.run([SCRIPT, *args], stdin=stdin, capture_output=True, text=True,
                          preexec_fn=cap, timeout=120)


@pytest.mark.parametrize("args, stdin, message", [
    (["eval", "x", "--at", "x=@/dev/zero"], None,
     "error: --at x: cannot read '/dev/zero': it holds binary data (a NUL byte at byte 0), not numbers as text"),
    (["eval", "x", "--at", "x=@-"], "/dev/zero",
     "error: --at x: cannot read '-': it holds binary data (a NUL byte at byte 0), not numbers as text"),
    (["grad", "/dev/zero"], None,
     "error: '/dev/zero' holds more than 16 MiB, more than gradcalc reads as a program"),
    (["grad", "-"], "/dev/zero",
     "error: SOURCE - holds more than 16 MiB, more than gradcalc reads as a program"),
])
def test_endless_inputs_end_with_an_error(args, stdin, message):
    with open(stdin or "/dev/null", "rb") as f:
        r = _limited(args, stdin=f)
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines()[0] == message


def test_a_value_larger_than_its_limit_allows_is_refused_naming_the_option(tmp_path):
    # one number and 2 MiB of blanks: read whole before (exit 0); now refused past
    # 64 bytes an element of --max-elements plus 1 MiB (1,049,216 bytes for 10)
    text = "[1" + " " * (2 << 20) + "]"
    (tmp_path / "v.json").write_text(text)
    for at, stdin in ((f"x=@{tmp_path / 'v.json'}", None), ("x=@-", text)):
        r = user_error("eval", "x", "--at", at, "--max-elements", "10", input=stdin)
        where = at[len("x=@"):]
        assert r.stderr.splitlines() == [
            f"error: --at x: '{where}' holds more than 1,049,216 bytes, the most read for a value under "
            "--max-elements=10",
            "hint: a value is read up to 64 bytes an element of --max-elements, plus 1 MiB: raise "
            "--max-elements to read more"]
    assert ok_json("eval", "x", "--at", f"x=@{tmp_path / 'v.json'}")["values"]["_"] == [1.0]


def test_large_honest_values_are_still_read(tmp_path):
    # full-precision JSON, indented, at the limit of its elements; an .npy through a pipe
    rng = np.random.default_rng(0)
    x = -rng.random((250, 400)) * 1e-300
    (tmp_path / "x.json").write_text(json.dumps(x.tolist(), indent=4))
    assert (tmp_path / "x.json").stat().st_size > 64 * x.size / 2  # (the bound is not far off)
    doc = ok_json("eval", "sum(x)", "--at", f"x=@{tmp_path / 'x.json'}", "--max-elements", str(x.size))
    assert doc["values"]["_"] == pytest.approx(x.sum(), rel=1e-12)
    buf = io.BytesIO()
    np.save(buf, np.arange(10.0**6))
    doc = ok_json("eval", "sum(x)", "--at", "x=@-", "--max-elements", str(10**6), input=buf.getvalue())
    assert doc["values"]["_"] == (10**6 - 1) * 10**6 / 2


# -- a byte-order mark is no data (README: it is skipped at the start of a file) -------------

@pytest.mark.parametrize("name, content, at, expected", [
    ("f.json", "[1, 2]", "x=@{p}", [1.0, 2.0]),
    ("m.json", '{"x": [1, 2]}', "@{p}", [1.0, 2.0]),
    ("f.csv", "1,2\n3,4\n", "x=@{p}", [[1.0, 2.0], [3.0, 4.0]]),
    ("h.csv", "x,y\n1,2\n", "x=@{p}", [1.0, 2.0]),
    ("f.txt", "1 2\n", "x=@{p}", [1.0, 2.0]),
])
def test_a_byte_order_mark_is_skipped_in_values_files(tmp_path, name, content, at, expected):
    # Excel's "CSV UTF-8" writes one; .json and .csv read '\ufeff' as data before
    p = tmp_path / name
    p.write_bytes(b"\xef\xbb\xbf" + content.encode())
    assert ok_json("eval", "x*1", "--at", at.format(p=p))["values"]["_"] == expected


# -- numbers beyond float64 ----------------------------------------------------------------

HINT = "hint: the largest float is about 1.8e308; an infinity is written Infinity in JSON, inf in a .csv or .txt file"


@pytest.mark.parametrize("name, content, at, number", [
    ("f.json", "[1e400, 2]", "x=@{p}", "1e400"),
    ("m.json", '{"x": -1e400}', "@{p}", "-1e400"),  # (a mapping is read whole: --at)
    ("f.csv", "2,1e400\n", "x=@{p}", "1e400"),
    ("f.txt", "1\n-1E+400\n", "x=@{p}", "-1E+400"),
])
def test_a_number_beyond_float64_is_an_error_not_inf(tmp_path, name, content, at, number):
    # it became inf silently (Python's float() and NumPy read it so), while an integer beyond
    # float64 is an error
    assert np.isinf(float(number))
    p = tmp_path / name
    p.write_text(content)
    r = user_error("eval", "x*1", "--at", at.format(p=p))
    label = "--at" if at.startswith("@") else "--at x"
    assert r.stderr.splitlines() == [f"error: {label}: '{p}' holds a number too large for a float ({number})", HINT]


@pytest.mark.parametrize("name, content", [("f.json", '[Infinity, "-inf", 1e308]'), ("f.csv", "inf,-inf,1e308\n")])
def test_an_infinity_spelt_out_is_still_read(tmp_path, name, content):
    p = tmp_path / name
    p.write_text(content)
    assert ok_json("eval", "x*1", "--at", f"x=@{p}")["values"]["_"] == ["inf", "-inf", 1e308]


def test_a_huge_json_integer_is_worded_for_users(tmp_path):
    # before: "Exceeds the limit (4300 digits) ... use sys.set_int_max_str_digits() to increase the limit"
    p = tmp_path / "big.json"
    p.write_text("9" * 5000)
    r = user_error("eval", "x*1", "--at", f"x=@{p}")
    assert r.stderr.splitlines() == [
        f"error: --at x: '{p}' holds an integer too large for a float (99999999999999999999… has 5,000 digits)", HINT]


# -- NUL bytes ---------------------------------------------------------------------------

@pytest.mark.parametrize("content, at", [
    (b"1,2\x00\n3,4\n", 3),   # a stray NUL in the first row (an error since 9f554a0)
    (b"x\x00,y\n3,4\n", 1),   # a "header" with a NUL in it was skipped: x = [3, 4]
])
def test_a_nul_byte_in_a_text_value_is_an_error_not_a_header(tmp_path, content, at):
    p = tmp_path / "v.csv"
    p.write_bytes(content)
    r = user_error("eval", "x*1", "--at", f"x=@{p}")
    assert first(r) == f"error: --at x: cannot read '{p}': it holds binary data (a NUL byte at byte {at}), " \
                       "not numbers as text"


def test_a_program_of_up_to_16_mib_is_read(tmp_path):
    p = tmp_path / "long.grad"
    p.write_bytes(b"# " + b"c" * ((16 << 20) - 10) + b"\nx^2\n")
    assert p.stat().st_size <= 16 << 20
    assert ok_json("grad", str(p), "--at", "x=3")["gradient"]["x"] == 6.0
    with open(p, "ab") as f:
        f.write(b"#" * 20)
    assert first(user_error("grad", str(p), "--at", "x=3")) == \
        f"error: '{p}' holds more than 16 MiB, more than gradcalc reads as a program"


def test_an_empty_or_broken_json_value_file_says_so_and_what_a_value_file_holds(tmp_path):
    # (json's own words before: "Expecting value: line 1 column 1 (char 0)", no hint)
    empty, broken = tmp_path / "e.json", tmp_path / "b.json"
    empty.write_text("")
    broken.write_text("[1, 2")
    for path, words in ((empty, "it is empty"), (broken, "it is not JSON (Expecting ',' delimiter at line 1, column 6)")):
        r = user_error("eval", "x*1", "--at", f"x=@{path}")
        lines = r.stderr.splitlines()
        assert lines[0] == f"error: --at x: cannot read '{path}': {words}"
        assert lines[1].startswith("hint: a value file holds one array")


def test_a_value_file_cut_short_or_holding_nothing_says_so(tmp_path):
    # (NumPy's "Failed to read all data for array ... (file seems not fully written?)", and
    # loadtxt's 'input contained no data: "[]"')
    whole = tmp_path / "w.npy"
    np.save(whole, np.ones(5))
    cut = tmp_path / "c.npy"
    cut.write_bytes(whole.read_bytes()[:-8])
    r = user_error("eval", "x*1", "--at", f"x=@{cut}")
    assert r.stderr.splitlines()[0] == (f"error: --at x: cannot read '{cut}': not a .npy file of numbers: it is cut "
                                        "short: its header gives shape (5,), 40 bytes of data, and 32 follow")
    comments = tmp_path / "c.txt"
    comments.write_text("# x\n\n")
    r = user_error("eval", "x*1", "--at", f"x=@{comments}")
    assert r.stderr.splitlines()[0] == f"error: --at x: cannot read '{comments}': it holds no value (it is empty, or only comments)"
