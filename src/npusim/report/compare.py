"""``npusim compare``: one network, its weights and input, on several archs side by side.

A ``Comparison`` holds one ``SimResult`` per arch, in the order given; the first is the
baseline. Per layer (conv layers by name, every non-conv op summed into one vector-unit row,
then the total): cycles, bound, utilisation and energy of each arch, and against the baseline
its speed-up (baseline cycles / its cycles: above 1 is faster) and energy ratio (its energy /
baseline energy: below 1 spends less). Where the archs' memories (buffers, bandwidths) or
clocks differ, ``notes`` says so: the cycles then compare memories too, not machines alone.

Pure functions of the results, like the rest of ``report``; ``compare`` runs them.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass

from rich.console import Group
from rich.table import Table
from rich.text import Text

from ..arch.spec import same_memory
from ..area import describe_buffers, own_buffers
from ..errors import NpusimError
from ..stats import TRANSFER, LayerStats, total
from .export import SCHEMA_VERSION, arch_record, totals_record
from .table import (
    STALL_CAUSES,
    VECTOR_ROW,
    console,
    fmt_energy,
    fmt_percent,
    fmt_utilisation,
    vector_row,
)

MOVES_ROW = "moves between machines"  # a hybrid's transfers of layer inputs, summed


def _network_ops(result) -> list[str]:
    """The names of the network's ops a result ran (a hybrid's moves between its machines,
    which depend on the arch, left out)."""
    return [s.name for s in result.layers if s.dataflow != TRANSFER]


@dataclass(frozen=True)
class Comparison:
    """The same network on several archs: ``results[0]`` is the baseline."""

    model: str
    results: list

    def __post_init__(self):
        if len(self.results) < 2:
            raise NpusimError("a comparison needs at least two archs")
        names = _network_ops(self.results[0])
        for r in self.results[1:]:
            if _network_ops(r) != names:
                raise NpusimError(f"{r.arch.name}: its layers differ from "
                                  f"{self.results[0].arch.name}'s; compare runs one network")

    @property
    def labels(self) -> list[str]:
        """Each arch's name, with ``#i`` added where two share one."""
        names = [r.arch.name for r in self.results]
        return [n if names.count(n) == 1 else f"{n}#{i + 1}" for i, n in enumerate(names)]

    def labelled(self) -> list[tuple[str, object]]:
        """(label, SimResult) of each arch, baseline first."""
        return list(zip(self.labels, self.results, strict=True))

    def rows(self) -> list[tuple[str, list[LayerStats]]]:
        """(row name, one LayerStats per arch): conv layers, the vector unit, the total."""
        rows = [(s.name, [r.conv_layers[i] for r in self.results])
                for i, s in enumerate(self.results[0].conv_layers)]
        vectors = [vector_row(r.layers) for r in self.results]
        if vectors[0] is not None:
            rows.append((VECTOR_ROW, vectors))
        moves = [[s for s in r.layers if s.dataflow == TRANSFER] for r in self.results]
        if any(moves):
            rows.append((MOVES_ROW, [total(m, MOVES_ROW) for m in moves]))
        rows.append(("total", [r.total for r in self.results]))
        return rows

    def _same_own_buffers(self) -> bool:
        """Whether the archs that run one machine hold the same buffers of their own (those
        of different machines differ by design, not by a memory choice)."""
        own: dict[str, set[str]] = {}
        for r in self.results:
            own.setdefault(r.dataflow, set()).add(own_buffers(r.hardware))
        return all(len(texts) == 1 for texts in own.values())

    def notes(self) -> list[str]:
        """What differs besides the machines: memories (the shared one, or the buffers of
        two archs of one machine), clocks (empty if nothing)."""
        archs = [r.arch for r in self.results]
        named = list(zip(self.labels, archs, strict=True))
        out = []
        if not same_memory(archs) or not self._same_own_buffers():
            out.append("the archs' memories differ, so the cycles compare memories as well as "
                       "machines: " + "; ".join(f"{label}: {describe_buffers(r.arch, r.dataflow)}"
                                                for label, r in zip(self.labels, self.results,
                                                                    strict=True)))
        if len({a.clock_mhz for a in archs}) > 1:
            out.append("the clocks differ (" + ", ".join(
                f"{label} {a.clock_mhz:g} MHz" for label, a in named)
                + "): speed-ups are in cycles; the totals give the time too")
        return out


def speedup(base: LayerStats, other: LayerStats) -> float:
    """Baseline cycles / other cycles (>1: other is faster); nan where either took no cycles
    (a row only one arch has, such as a hybrid's moves)."""
    return base.cycles / other.cycles if other.cycles and base.cycles else float("nan")


def energy_ratio(base: LayerStats, other: LayerStats) -> float:
    """Other energy / baseline energy (<1: other spends less); nan where either spent none
    (a row only one arch has, such as a hybrid's moves, or a layer that costs nothing)."""
    return other.energy_pj / base.energy_pj if base.energy_pj and other.energy_pj \
        else float("nan")


def time_split(stats: LayerStats) -> dict[str, float]:
    """Share (0..1) of ``stats.cycles`` spent computing and stalled on each cause."""
    if not stats.cycles:
        return {}
    split = {"compute": stats.compute_cycles / stats.cycles}
    split.update({label: getattr(stats, field) / stats.cycles for label, field in STALL_CAUSES})
    return split


def where_time_goes(label: str, stats: LayerStats) -> str:
    """'A: 62.0 % compute, stalled 30.1 % on DRAM ifmap, 7.9 % on DRAM ofmap'."""
    split = time_split(stats)
    stalls = [f"{fmt_percent(v)} % on {k}" for k, v in split.items() if k != "compute" and v]
    text = f"{label}: {fmt_percent(split.get('compute', 0.0))} % compute"
    return text + (", stalled " + ", ".join(stalls) if stalls else ", no stalls")


def fmt_ratio(value: float) -> str:
    """'1.23x', or '-' for a ratio that does not exist (nan)."""
    return "-" if value != value else f"{value:.2f}x"


def layer_table(cmp: Comparison) -> Table:
    """One row per layer; per arch cycles, bound, util %, energy, then (not for the
    baseline) speed-up and energy ratio against it."""
    table = Table(box=None, header_style="bold", padding=(0, 1))
    table.add_column("layer", no_wrap=True)
    for i, label in enumerate(cmp.labels):
        heads = ("cycles", "bound", "util %", "energy") + (("speed-up", "energy x") if i else ())
        for j, head in enumerate(heads):  # the arch named once, over its first column
            table.add_column(f"{label if j == 0 else ''}\n{head}", no_wrap=True,
                             justify="left" if head == "bound" else "right")
    for name, stats in cmp.rows():
        cells = [name]
        for i, (s, r) in enumerate(zip(stats, cmp.results, strict=True)):
            cells += [f"{s.cycles:,}", s.bound or "-", fmt_utilisation(s, r.arch.vector.lanes),
                      fmt_energy(s.energy_pj)]
            if i:
                cells += [fmt_ratio(speedup(stats[0], s)),
                          fmt_ratio(energy_ratio(stats[0], s))]
        table.add_row(*cells, style="bold" if name == "total" else "")
    return table


def summary_lines(cmp: Comparison) -> list[str]:
    """Totals per arch (cycles, time, energy, against the baseline), where its time goes,
    and the notes."""
    base = cmp.results[0].total
    lines = []
    for label, r in cmp.labelled():
        t = r.total
        ratio = ("baseline" if r is cmp.results[0] else
                 f"speed-up {fmt_ratio(speedup(base, t))}, "
                 f"energy {fmt_ratio(energy_ratio(base, t))}")
        lines.append(f"{label}: {t.cycles:,} cycles ({r.arch.seconds(t.cycles) * 1e3:.3g} ms "
                     f"at {r.arch.clock_mhz:g} MHz), {fmt_energy(t.energy_pj)}; {ratio}")
    lines += [where_time_goes(label, r.total) for label, r in cmp.labelled()]
    return lines + [f"note: {n}" for n in cmp.notes()]


def long_table(cmp: Comparison) -> Table:
    """The same cells as ``layer_table``, one row per layer and arch (for narrow screens)."""
    table = Table(box=None, header_style="bold", padding=(0, 1))
    for head in ("layer", "arch", "cycles", "bound", "util %", "energy", "speed-up",
                 "energy x"):
        table.add_column(head, no_wrap=True,
                         justify="left" if head in ("layer", "arch", "bound") else "right")
    for name, stats in cmp.rows():
        for i, (label, s, r) in enumerate(zip(cmp.labels, stats, cmp.results, strict=True)):
            table.add_row(name if i == 0 else "", label, f"{s.cycles:,}", s.bound or "-",
                          fmt_utilisation(s, r.arch.vector.lanes), fmt_energy(s.energy_pj),
                          fmt_ratio(speedup(stats[0], s)), fmt_ratio(energy_ratio(stats[0], s)),
                          style="bold" if name == "total" else "",
                          end_section=i == len(stats) - 1)
    return table


def report(cmp: Comparison, title: str | None = None, width: int | None = None) -> Group:
    """The terminal report: title, the side-by-side table (one row per layer and arch if
    that is wider than ``width`` columns), the summary lines."""
    head = [Text(title, style="bold")] if title else []
    table = layer_table(cmp)
    if width is not None and console(width=100_000).measure(table).maximum > width:
        table = long_table(cmp)
    return Group(*head, table, "", *[Text(line) for line in summary_lines(cmp)])


def to_json(cmp: Comparison, *, version: str, run: dict | None = None) -> str:
    """The comparison as JSON: every arch with its totals, per layer each arch's cycles,
    bound, utilisation, energy and its speed-up and energy ratio against the baseline."""
    base = cmp.results[0]
    layers = []
    for name, stats in cmp.rows()[:-1]:
        layers.append({"name": name, "archs": [
            {"arch": label, "cycles": s.cycles, "compute_cycles": s.compute_cycles,
             "stall_cycles": s.stall_cycles, "bound": s.bound, "utilisation": s.utilisation,
             "energy_pj": s.energy_pj, "speedup": _number(speedup(stats[0], s)),
             "energy_ratio": _number(energy_ratio(stats[0], s))}
            for label, s in zip(cmp.labels, stats, strict=True)]})
    doc = {"schema_version": SCHEMA_VERSION, "npusim_version": version, "model": cmp.model,
           "mode": base.mode, "dtype": base.dtype, **(run or {}),
           "baseline": cmp.labels[0],
           "archs": [{"label": label, "arch": arch_record(r.arch, r.dataflow),
                      "dataflow": r.dataflow, "totals": totals_record(r),
                      "speedup": _number(speedup(base.total, r.total)),
                      "energy_ratio": _number(energy_ratio(base.total, r.total)),
                      "time_split": time_split(r.total)}
                     for label, r in cmp.labelled()],
           "notes": cmp.notes(), "layers": layers}
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"


def _number(value: float) -> float | None:
    """``value``, or None (JSON null) for a ratio that does not exist (nan)."""
    return None if value != value else value


CSV_FIELDS = ("cycles", "compute_cycles", "stall_cycles", "bound", "utilisation", "energy_pj",
              "speedup", "energy_ratio")


def to_csv(cmp: Comparison) -> str:
    """One row per layer and arch (long format: ``layer, arch, ...``), the total last; a
    ratio that does not exist is an empty cell."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(("layer", "arch") + CSV_FIELDS)
    for name, stats in cmp.rows():
        for label, s in zip(cmp.labels, stats, strict=True):
            writer.writerow((name, label, s.cycles, s.compute_cycles, s.stall_cycles, s.bound,
                             s.utilisation, s.energy_pj, _number(speedup(stats[0], s)),
                             _number(energy_ratio(stats[0], s))))
    return out.getvalue()


def compare(model, x, archs, *, model_name: str = "", mode: str = "run",
            dtype: str = "float32", keep_outputs: bool = False, progress=None,
            **simulate_kwargs) -> Comparison:
    """Run the Graph ``model`` on input ``x`` on each of ``archs`` (Arch or preset name),
    each with its own dataflow; or, for a list of ConvLayers, shape-only
    (``simulate_shapes``). ``keep_outputs``: the baseline's run keeps every node's output
    (for ``plots.densities``; the others do not, the network being the same).
    ``progress(i, n, arch_name)`` before each arch."""
    from ..arch import load_arch
    from ..ir import Graph
    from ..simulate import simulate, simulate_shapes

    results = []
    archs = [load_arch(a) for a in archs]
    for i, arch in enumerate(archs):
        if progress:
            progress(i, len(archs), arch.name)
        try:
            if isinstance(model, Graph):
                results.append(simulate(model, x, arch, mode=mode, dtype=dtype,
                                        keep_outputs=keep_outputs and i == 0, **simulate_kwargs))
            else:
                results.append(simulate_shapes(model, arch, dtype=dtype))
        except NpusimError as e:  # which of the archs could not run it
            e.args = (f"arch {arch.name} ({i + 1} of {len(archs)}): {e}", *e.args[1:])
            raise
    name = model_name or (model.name if isinstance(model, Graph) else "topology")
    return Comparison(name, results)
