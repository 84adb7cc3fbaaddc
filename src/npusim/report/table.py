"""Terminal report: a per-layer table and the network totals, as rich renderables.

One row per conv layer (the dataflow's work): its compute cycles (stall-free), the
cycles it stalls on memory, their sum, and what bounds it (compute, bus, dram, sram);
every non-conv op is summed into a single "vector unit" row. The totals state the
memory the cycles were timed on; below them, the machine's own diagnostics (the few
counters of its ``extra`` that explain its time, each machine's ``diagnostics``).
Numbers are scaled for reading (k, M, G; KiB, MiB; pJ to J); the JSON and CSV reports
keep the exact counts.
"""

from __future__ import annotations

from io import StringIO

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from ..area import describe_buffers
from ..stats import TENSORS, LayerStats, total

VECTOR_ROW = "vector unit"


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """Leave a closed standard output to the command line (``cli.main``: a quiet exit
        141), not rich's exit 1, which reads as a failed ``--check``."""
        self.quiet = True
        raise BrokenPipeError


def console(**options) -> Console:
    """A rich console (``options`` as rich's) that prints npusim's text as given: the names in
    a report (layers, models, files) are data, so it reads no rich markup (``[b]``) and no
    emoji code (``:name:``) in them (a layer named ``x[/b]`` made rich raise; the emoji codes
    also cost a run the import of rich's emoji table)."""
    return _Console(markup=False, emoji=False, **options)


def _scaled(value: float, base: int, units: list[str]) -> str:
    """``value`` in the largest unit that keeps it >= 1, three significant digits; a value
    that rounds up to ``base`` of its unit is shown in the next (999,960 is 1.00 M, not
    1000 k)."""
    i = 0
    while abs(value) >= base and i < len(units) - 1:
        value, i = value / base, i + 1
    if i == 0 and float(value).is_integer():
        return f"{value:.0f} {units[0]}".rstrip()
    text = _three_digits(value)
    if abs(float(text)) >= base and i < len(units) - 1:
        value, i = value / base, i + 1
        text = _three_digits(value)
    return f"{text} {units[i]}".rstrip()


def _three_digits(value: float) -> str:
    """``value`` (below 1000 in magnitude, or the largest unit's) to three significant
    digits, as rounded: 9.996 is 10.0, 99.96 is 100."""
    for digits in (2, 1):
        text = f"{value:.{digits}f}"
        if abs(float(text)) < 10 ** (3 - digits):
            return text
    return f"{value:.0f}"


def fmt_count(n: float) -> str:
    """A count (MACs, ops) with an SI suffix: 512, 4.10 k, 118.0 M, 1.82 G."""
    return _scaled(n, 1000, ["", "k", "M", "G", "T", "P"])


def fmt_bytes(n: float) -> str:
    """Bytes in binary units: 512 B, 64.0 KiB, 1.20 MiB."""
    return _scaled(n, 1024, ["B", "KiB", "MiB", "GiB", "TiB"])


def fmt_energy(pj: float) -> str:
    """Energy given in pJ, shown in pJ, nJ, uJ, mJ or J."""
    return _scaled(pj, 1000, ["pJ", "nJ", "uJ", "mJ", "J"])


def fmt_seconds(s: float) -> str:
    """A duration in s, shown in ns, us, ms or s to three significant digits (whole seconds
    from 1,000 s); one that rounds up to 1000 of its unit in the next (0.9996 s is 1 s, not
    1e+03 ms)."""
    units = (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9))
    i = next((i for i, (_, scale) in enumerate(units) if s >= scale), len(units) - 1)
    if i and float(f"{s / units[i][1]:.3g}") >= 1000:
        i -= 1
    unit, scale = units[i]
    return f"{s:,.0f} s" if s >= 999.5 else f"{s / scale:.3g} {unit}"


def fmt_percent(ratio: float) -> str:
    return f"{100 * ratio:.1f}"


def shown_utilisation(s: LayerStats, lanes: int) -> float | None:
    """A table's util % of one row (0..1): MACs / (multipliers x cycles), or for the vector
    unit (one vector op, or ``vector_row``'s sum of them) element ops / (``lanes`` x cycles);
    None for a vector row of no cycles. The JSON and CSV keep ``LayerStats.utilisation``, the
    MACs' share, which is 0 for the vector unit (docs/json-schema.md)."""
    if s.dataflow != "vector":
        return s.utilisation
    return s.vector_ops / (lanes * s.cycles) if s.cycles else None


def fmt_utilisation(s: LayerStats, lanes: int) -> str:
    """``shown_utilisation`` as a table cell: a percentage, or '-' where there is none."""
    ratio = shown_utilisation(s, lanes)
    return "-" if ratio is None else fmt_percent(ratio)


def vector_row(stats: list[LayerStats]) -> LayerStats | None:
    """All non-conv ops of the network as one row, or None if there are none."""
    vector = [s for s in stats if s.dataflow == "vector"]
    return total(vector, VECTOR_ROW) if vector else None


COLUMNS = (("layer", "left"), ("machine", "left"), ("shape", "left"), ("dense MACs", "right"),
           ("MACs", "right"),
           ("compute", "right"), ("stall", "right"), ("cycles", "right"), ("bound", "left"),
           ("util %", "right"), ("SRAM", "right"), ("DRAM", "right"), ("energy", "right"))


def _cells(s: LayerStats, util: str) -> list[str]:
    """One row: compute cycles (stall-free), stall cycles, cycles (both), what bounds it."""
    return [s.name, s.dataflow, s.shape, fmt_count(s.dense_macs), fmt_count(s.macs),
            f"{s.compute_cycles:,}", f"{s.stall_cycles:,}", f"{s.cycles:,}", s.bound or "-",
            util, fmt_bytes(s.sram_bytes), fmt_bytes(s.dram_bytes), fmt_energy(s.energy_pj)]


def layer_rows(result) -> list[tuple[list[str], str]]:
    """(cells, style) of each row: the conv layers, the vector unit, the total."""
    convs = [s for s in result.layers if s.dataflow != "vector"]  # a hybrid's moves included
    rows = [(_cells(s, fmt_percent(s.utilisation)), "") for s in convs]
    vec = vector_row(result.layers)
    if vec is not None:
        cells = _cells(vec, fmt_utilisation(vec, result.arch.vector.lanes))
        ops = sum(s.dataflow == "vector" for s in result.layers)
        cells[1] = "vector"
        cells[2:5] = [f"{ops} ops ({fmt_count(vec.vector_ops)} elem.)", "-", "-"]
        rows.append((cells, "dim"))
    tot = result.total
    cells = _cells(tot.renamed("total"), fmt_percent(tot.utilisation))
    cells[1] = ""
    cells[8] = ""  # a network has no single bound
    rows.append((cells, "bold"))
    return rows


OPTIONAL = ("shape", "compute", "stall", "bound")  # dropped first, in this order, if too wide


def _table(rows, compact: bool, drop: tuple[str, ...]) -> Table:
    """The layer table without the columns ``drop``; ``compact``: no rules, one space
    between columns."""
    table = Table(box=box.SIMPLE_HEAD if compact else box.MINIMAL_HEAVY_HEAD,
                  padding=(0, 0 if compact else 1), show_edge=not compact)
    keep = [i for i, (name, _) in enumerate(COLUMNS) if name not in drop]
    for i in keep:
        name, justify = COLUMNS[i]
        number = justify == "right"
        widest = max(len(cells[i]) for cells, _ in rows)
        table.add_column(name, justify=justify, no_wrap=number, overflow="fold",
                         min_width=widest if number else None)
    for cells, style in rows:
        if style == "bold":
            table.add_section()
        table.add_row(*[cells[i] for i in keep], style=style or None)
    return table


def layer_table(result, width: int | None = None) -> Table:
    """Per-layer table of a ``SimResult``: conv layers, the vector-unit row, the total row.

    Numbers are never cut: if the table is wider than ``width`` columns it drops its
    rules, then its shape column, then the compute, stall and bound columns (the cycles
    column keeps the total; the JSON and CSV reports keep everything)."""
    rows = layer_rows(result)
    measure = console(width=10_000)
    tries = [(False, ()), (True, ())] + [(True, OPTIONAL[:n]) for n in (1, len(OPTIONAL))]
    one_machine = () if result.placements else ("machine",)  # the column a hybrid shows
    for compact, drop in tries:
        table = _table(rows, compact, one_machine + drop)
        if width is None or measure.measure(table).maximum <= width:
            break
    return table


def _by_tensor(stats: LayerStats, memory: str) -> str:
    """'86.6 MiB (ifmap 32.5 MiB, filter 44.6 MiB, ofmap 9.48 MiB)' for memory 'dram'."""
    parts = [f"{t} {fmt_bytes(getattr(stats, f'{memory}_{t}_bytes'))}" for t in TENSORS]
    return f"{fmt_bytes(getattr(stats, f'{memory}_bytes'))} ({', '.join(parts)})"


# each cause of stall cycles, as reports name it, and its LayerStats field
STALL_CAUSES = (("DRAM ifmap", "stall_dram_ifmap_cycles"),
                ("DRAM filter", "stall_dram_filter_cycles"),
                ("DRAM ofmap", "stall_dram_ofmap_cycles"), ("SRAM ports", "stall_sram_cycles"),
                ("reconfiguration", "stall_reconfig_cycles"))


def stall_text(stats: LayerStats) -> str:
    """'1,000 compute + 234 stalled (19.0 % of the time: DRAM ifmap 200, DRAM filter 34)'."""
    causes = [(k, getattr(stats, f)) for k, f in STALL_CAUSES]
    parts = ", ".join(f"{k} {v:,}" for k, v in causes if v)
    text = (f"{stats.compute_cycles:,} compute + {stats.stall_cycles:,} stalled "
            f"({fmt_percent(stats.stalled_share)} % of the time")
    return text + (f": {parts})" if parts else ")")


def bound_text(stats: list[LayerStats]) -> str:
    """How many layers each resource bounds: 'compute 12, dram 9'."""
    counts: dict[str, int] = {}
    for s in stats:
        if s.bound:
            counts[s.bound] = counts.get(s.bound, 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "-"


def area_text(area, dtype: str) -> str:
    """'1.74 mm^2 with int8 MACs (MACs 0.43, registers 0.22, SRAM 1.09, interconnect
    0.00), 45 nm'."""
    node = area.node.rsplit(";", 1)[-1].strip()
    return (f"{area.total_mm2:.3g} mm^2 with {dtype} MACs (MACs {area.macs_mm2:.2f}, registers "
            f"{area.registers_mm2:.2f}, SRAM {area.sram_mm2:.2f}, interconnect "
            f"{area.interconnect_mm2:.2f}), {node}")


def utilisation_text(result) -> str:
    """The network's utilisation: '5.9 % of the multipliers' cycles in conv layers'. On a
    hybrid, whose layers each run on one member while the others idle, that is of the
    running member's multipliers, and the share of all the hybrid's follows."""
    tot = result.total
    text = f"{fmt_percent(tot.utilisation)} % of the multipliers' cycles in conv layers"
    if not result.placements:
        return text
    macs = result.hardware.macs
    slots = macs * sum(s.cycles for s in result.conv_layers)
    share = tot.macs / slots if slots else 0.0
    return (f"{fmt_percent(tot.utilisation)} % of the running member's multipliers' cycles in "
            f"conv layers; {fmt_percent(share)} % of all {macs:,} of the hybrid's")


def totals_table(result) -> Table:
    """The network totals: cycles (compute and stalls), time at the arch clock (stalls
    included), the memory, utilisation, energy, traffic."""
    tot, arch = result.total, result.arch
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    rows = [
        ("cycles", f"{tot.cycles:,}"),
        ("of which", stall_text(tot)),
        ("layers bound by", bound_text(result.conv_layers)),
        (f"time at {arch.clock_mhz:g} MHz",
         f"{fmt_seconds(arch.seconds(tot.cycles))} (stalls included)"),
        ("memory", describe_buffers(arch, result.dataflow)),
        ("utilisation", utilisation_text(result)),
        ("MACs", f"{fmt_count(tot.macs)} performed of {fmt_count(tot.dense_macs)} dense"),
        ("energy", fmt_energy(tot.energy_pj)),
        ("area", area_text(result.area, result.dtype)),
        ("DRAM traffic", _by_tensor(tot, "dram")),
        ("SRAM traffic", _by_tensor(tot, "sram")),
        ("simulated in", f"{result.seconds:.2f} s wall time"),
    ]
    for key, value in rows:
        grid.add_row(key, value)
    return grid


def diagnostics(result) -> list[tuple[str, str]]:
    """The machine's own lines on its conv layers (``Dataflow.diagnostics``), or []; on a
    hybrid, each member's on the layers it ran, then each conv's placement and why."""
    from ..dataflows import get

    convs = result.conv_layers
    machines = list(dict.fromkeys(s.dataflow for s in convs))
    lines = [(label if len(machines) == 1 else f"{m}: {label}", text) for m in machines
             for label, text in get(m).diagnostics(total([s for s in convs if s.dataflow == m]))]
    return lines + [(p.layer, f"{p.machine.name}, {p.why()}") for p in result.placements]


def diagnostics_table(result) -> Group | None:
    """'systolic' and its diagnostic lines, label and text, or None if it has none."""
    lines = diagnostics(result)
    if not lines:
        return None
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    for label, text in lines:
        grid.add_row(label, text)
    return Group(Text(f"{result.dataflow} machine", style="bold underline"), grid)


def report(result, title: str | None = None, width: int | None = None) -> Group:
    """The whole terminal report, to fit ``width`` columns: ``title`` (its first line bold,
    the others dim), the layer table, the totals, then the machine's own diagnostics."""
    lines = title.splitlines() if title else []
    head = [Text(line, style="dim" if i else "bold") for i, line in enumerate(lines)]
    machine = diagnostics_table(result)
    tail = [] if machine is None else ["", machine]
    return Group(*head, layer_table(result, width), "", totals_table(result), *tail)


def render(result, title: str | None = None, width: int = 120) -> str:
    """The terminal report as plain text (no colour), ``width`` columns wide."""
    plain = console(file=StringIO(), width=width, color_system=None, force_terminal=False)
    plain.print(report(result, title, width))
    return plain.file.getvalue()
