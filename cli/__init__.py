"""The gradcalc command line: Typer commands and renderers (no math here)."""
import sys


def main() -> None:
    """Console entry point: Ctrl-C is exit 130 even while the modules are still loading."""
    try:
        from .app import main as run
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    run()
