"""The gradcalc command line: Typer commands and renderers (no math here)."""
import gc
import sys


def main() -> None:
    """Console entry point: Ctrl-C is exit 130 even while the modules are still loading."""
    # Start-up makes some 25,000 objects the collector tracks (numpy's, Typer's, ours) that all live until the
    # process ends, so the cycle collector's passes over them while the modules load are wasted
    # (8 ms of a one-liner); frozen afterwards, later passes skip them too.
    gc.disable()
    try:
        from .app import main as run
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    gc.freeze()
    gc.enable()
    run()
