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
    try:
        from .app import main as run
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    try:
        run()
    except SystemExit as stop:
        _exit(stop)


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
