"""Reports of a simulated network: terminal tables (``table``), JSON and CSV (``export``),
and the comparison of its outputs with PyTorch's (``check``; running it needs torch).

The table, JSON and CSV are pure functions of a ``SimResult``: they read the stats, never rerun.
"""

from .export import to_csv, to_json
from .table import render, report

__all__ = ["render", "report", "to_csv", "to_json"]
