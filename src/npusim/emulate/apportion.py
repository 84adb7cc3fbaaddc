"""Cutting a counted total into the integer parts of an emulator's memory steps."""

from __future__ import annotations


def apportion(total: int, weights: list[int]) -> list[int]:
    """``total`` cut into integers in proportion to ``weights`` (evenly if all are 0): part
    i ends at floor(total x running weight / all weight)."""
    if not any(weights):
        weights = [1] * len(weights)
    whole, run, cut, parts = sum(weights), 0, 0, []
    for wt in weights:
        run += wt
        parts.append(total * run // whole - cut)
        cut += parts[-1]
    return parts
