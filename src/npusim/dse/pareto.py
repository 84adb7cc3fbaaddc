"""Pareto fronts of a results store: the points no other point beats on every objective.

``non_dominated`` works on any number of objectives; ``pareto(store, x, y)`` takes two
quantities of the stored totals (cycles, energy, edp, utilisation, or any other total field),
each minimised or, for utilisation, maximised; ``plot`` draws every point and the front.
A store of several workloads (models x densities) has one front per workload: a design is
compared with designs running the same network at the same density, never a small network's
point with a large one's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import outfile
from .spec import SweepError, quantities, sense, total_key, unit


def non_dominated(values, senses: list[str]) -> list[int]:
    """Indices of the rows of ``values`` (points x objectives) that no other row dominates:
    at least as good on every objective and better on one. ``senses`` is 'min' or 'max' per
    objective. Equal rows do not dominate each other (both are kept)."""
    v = np.asarray(values, dtype=float).reshape(len(values), len(senses))
    v = v * np.array([1.0 if s == "min" else -1.0 for s in senses])  # all minimised
    keep = []
    for i in range(len(v)):
        better_eq = np.all(v <= v[i], axis=1)
        strictly = np.any(v < v[i], axis=1)
        if not np.any(better_eq & strictly):
            keep.append(i)
    return keep


@dataclass
class Front:
    """The ok points of a store on two quantities and which of them form the front."""

    x: str
    y: str
    points: list[dict]     # stored rows with status ok
    values: np.ndarray     # points x 2: (x, y)
    front: list[int]       # indices into points: each workload's front, sorted by x
    workloads: list[tuple[str, str]]  # (model, density as stored), in the store's order

    def rows(self) -> list[dict]:
        """The front's points: their parameters, model, density and the two values."""
        return [{**self.points[i]["params"], "model": self.points[i]["model"],
                 "density": self.points[i]["density"], self.x: self.values[i, 0],
                 self.y: self.values[i, 1]} for i in self.front]


def check_pair(x: str, y: str) -> None:
    """Refuse quantities that are not two different ones of ``quantities()``."""
    for q in (x, y):
        if q not in quantities():
            raise SweepError(f"{q!r}: not a quantity; valid: {', '.join(sorted(quantities()))}")
    if x == y:
        raise SweepError(f"--x and --y are both {x!r}: a front weighs two different quantities")


def pareto(store, x: str, y: str) -> Front:
    """The front of ``store`` (a ``Store`` or a path to one) on quantities ``x`` and ``y``."""
    from .store import Store

    check_pair(x, y)
    store = store if isinstance(store, Store) else Store.read(store)
    points = [r for r in store.rows() if r["status"] == "ok"]
    if not points:
        raise SweepError(f"{store.path}: no point finished ok; nothing to compare")
    values = np.array([[float(r["totals"][total_key(q)]) for q in (x, y)] for r in points])
    members: dict[tuple[str, str], list[int]] = {}
    for i, r in enumerate(points):
        members.setdefault(workload(r), []).append(i)
    front = []
    for rows in members.values():
        keep = non_dominated(values[rows], [sense(x), sense(y)])
        front += sorted((rows[k] for k in keep), key=lambda i: (values[i, 0], values[i, 1]))
    return Front(x, y, points, values, front, list(members))


def workload(row: dict) -> tuple[str, str]:
    """(model, density) of a stored point: what it ran, apart from the arch."""
    return row["model"], str(row["density"])


def axis_label(quantity: str) -> str:
    """'area (mm^2; minimise)': the quantity, its unit and which way is better."""
    u = unit(quantity)
    return f"{quantity} ({u + '; ' if u else ''}{sense(quantity)}imise)"


def plot(front: Front, path: str | Path, what: str = "plot") -> None:
    """A PNG of every point (grey) and the front (a line through its points), written
    atomically to ``path`` (``what`` names it in errors)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..report.plots import save

    fig, ax = plt.subplots(figsize=(6.4, 4.8), dpi=100)
    several = len(front.workloads) > 1
    for k, work in enumerate(front.workloads):
        mine = [i for i, r in enumerate(front.points) if workload(r) == work]
        on = [i for i in front.front if workload(front.points[i]) == work]
        colour = f"C{k % 10}" if several else "C3"
        name = f"{Path(work[0]).name} at density {work[1]}: " if several else ""
        ax.scatter(front.values[mine, 0], front.values[mine, 1], s=12,
                   c=colour if several else "0.6", alpha=0.35 if several else 1.0,
                   label=None if several else "points")
        f = front.values[on]
        ax.plot(f[:, 0], f[:, 1], c=colour, lw=1.2)
        ax.scatter(f[:, 0], f[:, 1], s=24, c=colour, zorder=3,
                   label=f"{name}front ({len(f)} point{'s' * (len(f) != 1)})")
    ax.set_xlabel(axis_label(front.x))
    ax.set_ylabel(axis_label(front.y))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        data = save(fig, "png")
    finally:
        plt.close(fig)
    outfile.write_bytes(path, data, what, "figure")
