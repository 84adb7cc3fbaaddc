"""The exception a lowering rule raises for parameters the IR cannot express."""

from __future__ import annotations


class Refusal(Exception):
    """A supported op called with parameters the IR cannot express (the text says which)."""
