"""Files a program's `# check:` lines read: beside the program, never anywhere on the machine.

A `# check: --at @FILE` (or `NAME=@FILE`) is read relative to the program's folder, so the
settings travel with the file; a path that leads out of both that folder and the working
directory (absolute, `~`, `../..`, a symbolic link) or standard input is an error of that source,
so that a program under review cannot have `check` read, and quote in its errors, a file of the
machine that runs it (a CI runner's).
"""
from __future__ import annotations

import json
import os

import pytest

from cli_run import run

SECRET = "root:x:0:0:secret line"


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """tmp/work/sub/ holding programs and their files; tmp/outside.txt beside the work folder;
    check runs in tmp/work."""
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (tmp_path / "outside.txt").write_text(SECRET + "\n")
    (work / "sub" / "x.txt").write_text("1.5\n")
    (work / "sub" / "p.json").write_text(json.dumps({"x": 1.5}))
    (work / "shared.json").write_text(json.dumps({"x": 2.0}))
    monkeypatch.chdir(work)
    return tmp_path


def _check(tree, line: str):
    (tree / "work" / "sub" / "f.grad").write_text(f"# check: --at {line}\nf = x^3\n")
    r = run("check", "sub/f.grad", "-f", "json")
    return r, json.loads(r.stdout)


@pytest.mark.parametrize("line", ["x=@x.txt", "@p.json", "@../shared.json", "x=@./x.txt"])
def test_a_check_line_reads_files_beside_the_program(tree, line):
    r, doc = _check(tree, line)
    assert r.exit_code == 0, r.stdout
    (res,) = doc["results"]
    assert res["ok"] and "error" not in res  # (x had no value otherwise: an error of the source)


@pytest.mark.parametrize("line", ["x=@{outside}", "@{outside}", "x=@../../outside.txt", "x=@-", "x=@~/outside.txt"])
def test_a_check_line_cannot_read_a_file_elsewhere(tree, line):
    line = line.format(outside=tree / "outside.txt")
    r, doc = _check(tree, line)
    assert r.exit_code == 2
    assert SECRET not in r.stdout + r.stderr  # (its content is never read, nor quoted)
    (res,) = doc["results"]
    assert "error" in res and ("outside the program's folder" in res["error"]["message"]
                               or "standard input" in res["error"]["message"])


def test_a_link_out_of_the_folder_is_refused(tree):
    os.symlink(tree / "outside.txt", tree / "work" / "sub" / "link.txt")
    r, _ = _check(tree, "x=@link.txt")
    assert r.exit_code == 2 and SECRET not in r.stdout + r.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_a_pipe_in_a_checked_folder_is_an_error_and_the_others_are_checked(tmp_path):
    """check DIR read every *.grad it found: a named pipe waited for a writer forever, and the
    folder's other files were never reported (SPEC §5: the others are still checked)."""
    (tmp_path / "a.grad").write_text("# check: --at x=1\nf = x^2\n")
    os.mkfifo(tmp_path / "p.grad")
    r = run("check", tmp_path, "-f", "json")
    assert r.exit_code == 2
    results = json.loads(r.stdout)["results"]
    assert [res["ok"] for res in results if "error" not in res] == [True]
    (err,) = [res for res in results if "error" in res]
    assert err["source"].endswith("p.grad") and "not a regular file" in err["error"]["message"]


def test_check_points_keeps_one_points_tape_at_a_time(monkeypatch):
    """check --points traced every point before checking any, so that all their tapes were alive
    at once (a tape of a 20,000-step loop holds ~55 MB: 200 points wanted 11 GB; limits hunt).
    Now at most the tape checked and the next one are (and the trace that finds the shapes)."""
    import weakref

    import gradcalc
    from gradcalc import numerics
    alive, most = weakref.WeakSet(), []
    real = numerics.trace

    def counted(*args, **kwargs):
        tr = real(*args, **kwargs)
        alive.add(tr.builder)
        most.append(len(alive))
        return tr
    monkeypatch.setattr(numerics, "trace", counted)
    r = gradcalc.check("input w[3]\nsum(sin(w) * w)", points=8)
    assert r.ok and len(r.results) == 8 and len(most) == 9
    assert max(most) <= 3


def test_check_points_beyond_the_element_limit_is_refused():
    import gradcalc
    with pytest.raises(gradcalc.errors.LimitError, match="points 1000000000000 would draw 1,000,000,000,000"):
        gradcalc.check("x^2", points=10**12)
