"""Giving a primitive a deliberately wrong derivative rule, as a bug in it would."""
from __future__ import annotations

from gradcalc import transforms


def replace_rule(monkeypatch, prim, kind: str, rule) -> None:
    """Set prim's rule kind ("vjp" or "jvp") to rule for this test.  The reverse pass runs
    some scalar rules inline (transforms._SCALAR_OPS, the registry's rules written out: the
    same bits); a replaced vjp takes prim out of them, so that every pass reads the replacement."""
    monkeypatch.setattr(prim, kind, rule)
    if kind == "vjp":
        monkeypatch.delitem(transforms._SCALAR_OPS, prim, raising=False)
