"""The ``[systolic]`` section of an arch file: ``Systolic``, the parameters
``dataflows.systolic`` reads."""

from __future__ import annotations

from dataclasses import dataclass

from ..spec import MAX_SIDE, MAX_UNITS, declare_section, spec


@dataclass(frozen=True)
class Systolic:
    """The ``[systolic]`` section of an arch file."""

    rows: int = spec(32, "PEs", min=1, max=MAX_SIDE)
    cols: int = spec(32, "PEs", min=1, max=MAX_SIDE)
    stationary: str = spec("ws", "operand held in the PEs", choices=("os", "ws", "is"))
    stream_tile: int = spec(0, "streamed vectors per fold in WS/IS (0: all, as SCALE-Sim)",
                            min=0, max=MAX_UNITS)
    reconfig_units = 1  # the array loads one mapping per layer (memory.reconfig_cycles)


declare_section("systolic", Systolic)
