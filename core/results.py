"""Results of the library's commands: arrays keyed by name, with what else the command reports."""
from __future__ import annotations


class Result(dict):
    """Arrays keyed by name; other facts of the result as attributes."""

    def __init__(self, data=(), **info):
        super().__init__(data)
        self.__dict__.update(info)

    def __repr__(self):
        extra = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items())
        return f"Result({dict.__repr__(self)}, {extra})"
