"""The ``[group-tile]`` section of an arch file: ``GroupTile``, the parameters
``dataflows.group_tile`` reads."""

from __future__ import annotations

from dataclasses import dataclass

from ..spec import MAX_KIB, MAX_SIDE, MAX_UNITS, OBJECTIVES, declare_section, spec


@dataclass(frozen=True)
class GroupTile:
    """The ``[group-tile]`` section of an arch file."""
    reconfig_units = property(lambda p: p.tiles)  # each loads its parameters

    macs: int = spec(64, "MAC cells per tile (compute unit), e.g. 32 or 64", min=1,
                     max=MAX_SIDE)
    tiles: int = spec(1, "compute tiles the loop nest is split across", min=1,
                      max=MAX_SIDE)
    bus_inputs: int = spec(1, "distinct activations the input bus carries per cycle "
                           "(1 = broadcast to one MAC subset)", min=1, max=MAX_SIDE)
    wide_words_per_cycle: int = spec(16, "32-bit words the wide (weight) memory reads per cycle",
                                     min=1, max=MAX_UNITS)
    output_bus_values: int = spec(16, "sum-register values the output bus drains per cycle",
                                  min=1, max=MAX_UNITS)
    narrow_kb: int = spec(0, "KiB of narrow memory (activations) per tile; 0 = an even "
                          "share of the [memory] ifmap SRAM", min=0, max=MAX_KIB)
    wide_kb: int = spec(0, "KiB of wide memory (weights) per tile; 0 = an even share of "
                        "the [memory] filter SRAM", min=0, max=MAX_KIB)
    objective: str = spec("cycles", "what the compiler's choice of output-block width "
                          "minimises per layer (energy: pJ)", choices=OBJECTIVES)


declare_section("group-tile", GroupTile)
