"""The names the rest of gradcalc has imported from here, where the language used to be
lowered in one module: the built-in functions now live in core/builtins.py and the
interpreter in core/run.py."""
from .builtins import CONSTANTS, FUNCTIONS, Builtin
from .run import DEFAULT_MAX_STEPS, InputInfo, Traced, constant_value, find_inputs, trace
from .syntax import walk_names

__all__ = ["CONSTANTS", "DEFAULT_MAX_STEPS", "FUNCTIONS", "Builtin", "InputInfo", "Traced", "constant_value",
           "find_inputs", "trace", "walk_names"]
