"""Reports of a simulated network: terminal tables (``table``), JSON and CSV (``export``),
and the comparison of its outputs with PyTorch's (``check``, imported on demand: it needs torch).

Every report is a pure function of a ``SimResult``: it reads the stats, never reruns.
"""

from .export import to_csv, to_json, write_atomic
from .table import render, report

__all__ = ["render", "report", "to_csv", "to_json", "write_atomic"]
