"""The pytest plugin (entry point ``pytest11``; SPEC §10): ``pytest DIR`` checks every
``*.grad`` file under DIR as ``gradcalc check`` would, one test item per result.

    $ pytest samples/
    samples/mlp.grad::dloss/dW1@point0 PASSED

A file's ``# check:`` lines and its ``NAME.expect.json`` are honoured;
``--gradcalc-update-expect`` writes or refreshes those files.  A failing item's report
is the check's row with its numbers; a file that cannot be checked (a syntax error, a
missing value) is one failing item whose report is gradcalc's error message.

pytest loads this module in every run of every project where gradcalc is installed, so
it imports nothing of gradcalc until it meets a ``.grad`` file: the checks run when a
file is collected (its results decide its items), and each item reports its result.
``pytest -p no:gradcalc`` turns the plugin off.
"""
from __future__ import annotations

import pytest


def pytest_addoption(parser) -> None:
    group = parser.getgroup("gradcalc", "gradcalc: gradient checks of *.grad files")
    group.addoption("--gradcalc-update-expect", action="store_true", default=False,
                    help="write or refresh NAME.expect.json beside each collected NAME.grad "
                         "(as gradcalc check --update-expect)")


def pytest_collect_file(parent, file_path):
    if file_path.suffix == ".grad":
        return GradFile.from_parent(parent, path=file_path)
    return None


class GradFile(pytest.File):
    """A .grad program: one item per check result, or one item for the error that stopped
    its check."""

    def collect(self):
        from .suite import CheckError, check_source, result_id
        # (with --gradcalc-update-expect, the file is written when one of its items runs: not
        # under --collect-only, nor when -k deselects them all)
        self.unwritten: list = []
        checked = check_source(_shown_path(self.path), update_expect=self.config.getoption("gradcalc_update_expect"),
                               unwritten=self.unwritten)
        if not checked.results and checked.notes:  # (no inputs: the CLI warns, the plugin skips, saying so)
            yield GradSkipped.from_parent(self, name="nothing-to-check", reason=checked.notes[0])
        for result in checked.results:
            name = result_id(result).split("::", 1)[1]
            if isinstance(result, CheckError):
                yield GradError.from_parent(self, name=name, error=result.error)
            else:
                yield GradResult.from_parent(self, name=name, result=result, tol=(checked.options.get("rtol"),
                                                                                  checked.options.get("atol")))


def _shown_path(path) -> str:
    """path as reports show it: relative to the working directory when it lies inside it."""
    import os
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative


def _headline(item) -> str:
    """The title of an item's report.  (Not its id, file::name: pytest reads a title that
    ends its id as a Python test's Class.method, and -v would print good::grad::...)"""
    return f"{item.name} in {item.path.name}"


def _write_expectations(item) -> None:
    """Write the expectation files of the item's .grad file that its check left unwritten."""
    from .suite import save_expect
    pending = item.parent.unwritten
    while pending:
        save_expect(*pending.pop())


class CheckFailed(Exception):
    """A result that did not pass (its report is the result's row: repr_failure)."""


class GradResult(pytest.Item):
    """One check result (source, point, of, wrt): passes when the check passed."""

    def __init__(self, *, result, tol, **kwargs):
        super().__init__(**kwargs)
        self.result, self.tol = result, tol

    def runtest(self) -> None:
        _write_expectations(self)
        if not self.result.ok:
            raise CheckFailed(self.result)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, CheckFailed):
            from .testing import failure_text
            return failure_text([self.result], tol=self.tol)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):  # (pytest's lines count from 0; the result's, the output's line, from 1)
        line = self.result.line
        return self.path, None if line is None else line - 1, _headline(self)


class GradSkipped(pytest.Item):
    """A program with nothing to check (no inputs): skipped, with the reason gradcalc check
    warns of, so that it does not vanish from the run."""

    def __init__(self, *, reason, **kwargs):
        super().__init__(**kwargs)
        self.reason = reason

    def runtest(self) -> None:
        _write_expectations(self)
        pytest.skip(self.reason)

    def reportinfo(self):
        return self.path, None, f"{self.path.name}: {self.reason}"


class GradError(pytest.Item):
    """A program that could not be checked: fails with gradcalc's error message."""

    def __init__(self, *, error, **kwargs):
        super().__init__(**kwargs)
        self.error = error

    def runtest(self) -> None:
        _write_expectations(self)
        raise self.error

    def repr_failure(self, excinfo, style=None):
        from .errors import GradcalcError
        if isinstance(excinfo.value, GradcalcError):
            from .testing import error_text
            return error_text(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        pos = self.error.pos
        return self.path, None if pos is None else pos.line - 1, f"{self.path.name} cannot be checked"
