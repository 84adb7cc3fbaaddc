"""The dataflows: one module per machine, all behind the one ``Dataflow`` interface.

``REGISTRY`` maps a dataflow's name to its instance, importing a machine's module the first
time its entry is read (a run loads the machine it runs); ``simulate`` and the arch loader
dispatch only through it.
"""

from .base import REGISTRY, Dataflow, get, machines, names, register

__all__ = ["REGISTRY", "Dataflow", "get", "machines", "names", "register"]
