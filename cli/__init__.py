"""The gradcalc command line: Typer commands and renderers (no math here)."""
import gc
import sys


def main() -> None:
    """Console entry point: Ctrl-C is exit 130 even while the modules are still loading."""
    # The cycle collector stays off for the whole command.  Its passes would scan the objects
    # start-up makes (some 25,000 of numpy's, Typer's, rich's and ours, loaded before and
    # during the command), which live until the process ends; the library pauses it during
    # its computations anyway (session.quiet), which leaves little cyclic garbage to find.
    gc.disable()
    _open_closed_streams()
    try:
        from .app import main as run
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    try:
        run()
    except SystemExit as stop:
        _exit(stop)


def _open_closed_streams() -> None:
    """A standard stream the shell closed (``>&-``, ``2>&-``) is None in Python: what gradcalc
    writes there goes nowhere instead, as to a reader that went away, and the exit code is the
    command's own (a closed standard input is refused where it is read)."""
    import os
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w"))


def _exit(stop: SystemExit) -> None:
    """End the process with stop's code once the output is written, skipping the interpreter's
    teardown: freeing every module's objects and stopping OpenBLAS's threads cost a one-liner
    a seventh of its time, and nothing is left to do (gradcalc closes its files as it writes
    them; the exit handlers still run).  Under a tracer or profiler (coverage, cProfile, pdb)
    or with python -i, the ordinary exit, so that they can report."""
    import atexit
    import os
    code = 0 if stop.code is None else stop.code
    if not isinstance(code, int) or sys.flags.inspect or sys.gettrace() or sys.getprofile():
        gc.enable()  # (python -i goes on to a prompt)
        raise stop
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that went away (app.main has said what it needs)
            pass
    os._exit(code)
