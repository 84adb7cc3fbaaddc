"""The dataflows: one module per machine, all behind the one ``Dataflow`` interface.

``REGISTRY`` maps a dataflow's name to its instance; ``simulate`` and the arch
loader dispatch only through it.
"""

# each module registers its dataflow when imported
from . import dilated_grid, group_tile, input_reuse, sparse_pairs, systolic  # noqa: F401
from .base import REGISTRY, Dataflow, get, names, register

__all__ = ["REGISTRY", "Dataflow", "get", "names", "register"]
