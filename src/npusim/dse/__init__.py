"""Design-space exploration: sweep specs, searches, a resumable results store, Pareto fronts.

``load_spec`` reads a sweep spec (docs/sweep.md); ``sweep`` runs it into a SQLite store on a
local process pool or a Dask cluster, resuming a store it finds; ``pareto`` and ``plot`` give a
store's non-dominated points on two quantities.
"""

from .pareto import Front, non_dominated, pareto, plot
from .runner import sweep
from .spec import SweepError, SweepSpec, load_spec, spec_from_toml_text
from .store import Store

__all__ = ["Front", "Store", "SweepError", "SweepSpec", "load_spec", "non_dominated", "pareto",
           "plot", "spec_from_toml_text", "sweep"]
