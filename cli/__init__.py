"""The gradcalc command line: Typer commands and renderers (no math here)."""
