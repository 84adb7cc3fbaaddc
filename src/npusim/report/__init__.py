"""Reports of a simulated network: terminal tables (``table``), JSON and CSV (``export``),
and the comparison of its outputs with PyTorch's (``check``; running it needs torch).

The table, JSON and CSV are pure functions of a ``SimResult``: they read the stats, never rerun.
Each name is imported on first use (``npusim.lazy``): a run that prints its table loads no
JSON or CSV writer.
"""

from ..lazy import lazy_exports

__all__ = lazy_exports(__name__, {".export": ("to_csv", "to_json"),
                                  ".table": ("render", "report")})
