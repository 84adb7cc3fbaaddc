"""The sections of an arch file that belong to one machine, one module each: ``[systolic]``,
``[input-reuse]``, ``[sparse-pairs]``, ``[dilated-grid]``, ``[group-tile]`` and ``[hybrid]``.

Each is the frozen dataclass its machine reads (``dataflows.systolic.Params`` is
``systolic.Systolic``), declared to the loader by its module (``spec.declare_section``) when the
loader first reads that section (``spec.SECTIONS``); none imports a machine or numpy, so reading
an arch file, or listing the presets (``npusim archs``), needs only these. The few properties
that compute with a machine's own code import it when read.
"""

from __future__ import annotations

from ..spec import SECTIONS

HYBRID = "hybrid"


def machine_names() -> list[str]:
    """The declared machines' names, sorted: every section's but the hybrid's (none imported)."""
    return sorted(name for name in SECTIONS if name != HYBRID)
