"""Results of the library's commands: arrays keyed by name, with what else the command reports.

A result knows the command that made it, and so its JSON payload (SPEC §5):
``result.to_json()``.  The command line only writes that payload out; an API user
gets the same object and the same payload.
"""
from __future__ import annotations

#: Each command's JSON keys (SPEC §5), in order, and where each value comes from:
#:   ``key``       the result's attribute of that name
#:   ``key=``      the result's own arrays (the dict itself)
#:   ``key=attr``  the result's attribute ``attr``
#:   ``key?``      a fact that only some results have, left out when absent or None
#:                 (closed forms without symbolic=True; the black box's facts of
#:                 grad --exec)
#: ``at`` (grad, jacobian) is the point used: every input's value, defaults included, so
#: that a stored output (an expectation file of check) says where it was made.
PAYLOADS = {
    "eval": "values= warnings",
    "grad": "of at value gradient= error_estimate? method? exec? requests? unconnected warnings symbolic?",
    "jacobian": "of at value jacobian= unconnected warnings symbolic?",
    "vjp": "of value cotangent vjp= unconnected warnings",
    "jvp": "of value jvp warnings",
    "hessian": "of value hessian= warnings symbolic?",
    "check": "ok rtol atol results",
    "graph": "output nodes guessed_shapes=guessed warnings",
    "plot": "of over wrt direction? at samples= marks warnings",
}

#: The parts of a closed form (see symbolic_part) that JSON output carries: its value is
#: the result's own array already.
SYMBOLIC_JSON = ("text", "latex", "note")


class Result(dict):
    """Arrays keyed by name; other facts of the result as attributes, among them
    ``command``, the command that made it (a key of PAYLOADS)."""

    command: str | None = None

    def __init__(self, data=(), **info):
        super().__init__(data)
        self.__dict__.update(info)

    def __repr__(self):
        extra = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items())
        return f"Result({dict.__repr__(self)}, {extra})"

    def to_json(self) -> dict:
        """The SPEC §5 payload: ``{"command": ..., <the command's keys>}``.  Arrays stay NumPy
        arrays; a JSON writer (:func:`gradcalc.codec.to_json`) spells them."""
        if self.command not in PAYLOADS:
            raise ValueError(f"a result of command {self.command!r} has no JSON form")
        payload = {"command": self.command}
        for field in PAYLOADS[self.command].split():
            key, own, source = field.rstrip("?").partition("=")
            if own and not source:
                value = dict(self)
            elif field.endswith("?"):
                value = getattr(self, source or key, None)
                if value is None:
                    continue
            else:
                value = getattr(self, source or key)
            payload[key] = self._json_form(key, value)
        return payload

    def _json_form(self, key: str, value):
        """A fact as JSON carries it: check's results as dicts, closed forms without their
        values, and a single output's cotangent as the array itself."""
        if key == "results":
            return [r.as_dict() for r in value]
        if key == "symbolic":
            return symbolic_part(value, SYMBOLIC_JSON)
        if key == "cotangent" and isinstance(self.of, str):
            return value[self.of]
        return value


def symbolic_part(entries: dict, parts) -> dict:
    """Closed forms {name: form} (or {output: {name: form}} for a Jacobian), each form
    keeping only the given parts ("text", "latex", "value", "note")."""
    return {k: ({p: v[p] for p in parts} if "text" in v else symbolic_part(v, parts))
            for k, v in entries.items()}
