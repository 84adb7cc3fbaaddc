"""Machine-readable reports: JSON (schema in docs/json-schema.md) and CSV, one row per layer.

Both are pure functions of a ``SimResult`` (plus the run's description, which the
result does not hold: model name, input); ``npusim.outfile`` puts them on disk.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from typing import Any

from ..area import describe_buffers
from ..stats import LayerStats

SCHEMA_VERSION = 1


def layer_record(stats: LayerStats) -> dict[str, Any]:
    """One layer as a JSON object: every ``LayerStats`` field, the derived ratios and byte
    totals, and the dataflow's own additive counts under ``extra``."""
    record = stats.as_dict(extras=False)  # every field, whatever keys ``extra`` also holds
    record["extra"] = dict(stats.extra)
    return record


def arch_record(arch, dataflow: str) -> dict[str, Any]:
    """The arch's every parameter, and the section of the dataflow that ran (``params``)."""
    record = dataclasses.asdict(arch)
    record["params"] = dataclasses.asdict(arch.params(dataflow))
    return record


def totals_record(result) -> dict[str, Any]:
    """Network totals (the sum of every layer) plus the time at the arch clock (s, stalls
    included), the stall-free time (s), the memory the cycles were timed on (text) and the
    arch's area (mm^2, in all and by part: ``area.Area``)."""
    record = layer_record(result.total)
    record["time_s"] = result.arch.seconds(result.total.cycles)
    record["compute_time_s"] = result.arch.seconds(result.total.compute_cycles)
    record["memory"] = describe_buffers(result.arch, result.dataflow)
    record.update(result.area.as_dict())
    return record


def to_json(result, *, model: str, version: str, run: dict[str, Any] | None = None) -> str:
    """The JSON report of ``result`` (a ``SimResult``); ``run`` adds free run facts
    (input, batch, density, check outcome...) under their own keys."""
    doc = {
        "schema_version": SCHEMA_VERSION,
        "npusim_version": version,
        "model": model,
        "arch": arch_record(result.arch, result.dataflow),
        "mode": result.mode,
        "dtype": result.dtype,
        "dataflow": result.dataflow,
        "wall_seconds": result.seconds,
        **(run or {}),
        "layers": [layer_record(s) for s in result.layers],
        "totals": totals_record(result),
    }
    if result.placements:
        doc["placements"] = [placement_record(p) for p in result.placements]
    return json.dumps(doc, indent=2) + "\n"


def placement_record(placement) -> dict[str, Any]:
    """A hybrid's choice for one conv: the machine, where the input was, the objective, and
    every member's figures on the layer alone (its stats and the move it would need)."""
    return {
        "layer": placement.layer,
        "machine": placement.machine.name,
        "source": placement.source,
        "objective": placement.objective,
        "options": [{"machine": o.machine, "score": o.score, "why_not": o.why_not,
                     "cycles": None if o.stats is None else o.stats.cycles,
                     "energy_pj": None if o.stats is None else o.stats.energy_pj,
                     "transfer_cycles": o.transfer.cycles if o.transfer else 0,
                     "transfer_energy_pj": o.transfer.energy_pj if o.transfer else 0.0}
                    for o in placement.options],
    }


def csv_columns(layers: list[LayerStats]) -> list[str]:
    """Header: the flat ``LayerStats.as_dict`` keys, then every extra count any layer has."""
    base = [k for k in LayerStats("", "").as_dict()]
    extras = sorted({k for s in layers for k in s.extra} - set(base))
    return base + extras


def _cell(value):
    """A CSV cell: a per-unit tuple as its counts separated by spaces."""
    return " ".join(str(v) for v in value) if isinstance(value, tuple) else value


def to_csv(result) -> str:
    """One row per layer (every op, in network order) and a last row named ``total``."""
    rows = list(result.layers) + [result.total]
    columns = csv_columns(rows)
    out = io.StringIO()
    writer = csv.DictWriter(out, columns, restval=0, lineterminator="\n")
    writer.writeheader()
    for stats in rows:
        writer.writerow({k: _cell(v) for k, v in stats.as_dict().items()})
    return out.getvalue()

