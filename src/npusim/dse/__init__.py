"""Design-space exploration: sweep specs, searches, a resumable results store, Pareto fronts.

``load_spec`` reads a sweep spec (docs/sweep.md); ``sweep`` runs it into a SQLite store on a
local process pool or a Dask cluster, resuming a store it finds; ``pareto`` and ``plot`` give a
store's non-dominated points on two quantities. The names are imported on first use
(``npusim.lazy``), so building the command line's parser imports none of them.
"""

from ..lazy import lazy_exports

__all__ = lazy_exports(__name__, {
    ".pareto": ("Front", "non_dominated", "pareto", "plot"),
    ".runner": ("sweep",),
    ".spec": ("SweepError", "SweepSpec", "load_spec", "spec_from_toml_text"),
    ".store": ("Store",),
})
