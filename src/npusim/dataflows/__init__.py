"""The dataflows: one module per machine, all behind the one ``Dataflow`` interface.

``REGISTRY`` maps a dataflow's name to its instance; ``simulate`` and the arch
loader dispatch only through it.
"""

from .base import REGISTRY, Dataflow, get, names, register
from . import systolic  # noqa: F401  (registers itself)
from . import input_reuse  # noqa: F401  (registers itself)
from . import sparse_pairs  # noqa: F401  (registers itself)
from . import dilated_grid  # noqa: F401  (registers itself)
from . import group_tile  # noqa: F401  (registers itself)

__all__ = ["REGISTRY", "Dataflow", "get", "names", "register"]
