"""Figures of one run or a comparison (matplotlib, Agg backend, imported only when drawing).

Each figure has a data function (pure, of the stats; what the tests check) and a drawing one:

- ``cycle_breakdown``: per layer, cycles by compute and by stall cause (stacked bars);
- ``roofline``: per layer, useful MACs per cycle against MACs per DRAM byte, under the
  machine's compute ceiling (multipliers, MAC/cycle) and bandwidth ceiling (DRAM B/cycle x
  intensity); a layer that moves no DRAM byte has no intensity and is left out, and an
  unlimited DRAM bandwidth draws no bandwidth ceiling;
- ``utilisation``: per conv layer, useful MACs / (multipliers x cycles);
- ``densities``: per conv layer, the share of non-zero weights and of non-zero input
  activations (needs the run's kept outputs; a shape-only run has none);
- ``unit_busy``: for machines that deal work to units (their ``extra`` holds
  ``*_by_unit`` counts), the busy cycles of every unit in the worst layer: the one whose
  units idle longest waiting for the busiest (sum over units of max - own cycles).

``figures(results)`` draws them all, ``write_plots`` writes each as PNG and SVG.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import outfile
from ..errors import OutputError
from ..memory import unlimited
from .table import STALL_CAUSES, VECTOR_ROW, vector_row

CAUSES = (("compute", "compute_cycles"), *((f"{label} stall", f) for label, f in STALL_CAUSES))
FORMATS = ("png", "svg")
NAMES = ("cycles", "roofline", "utilisation", "density", "units")  # the figures' file stems


@dataclass
class Figure:
    """One drawn figure: its file stem, title, the matplotlib figure (or None when there is
    nothing to draw) and a note saying what is missing and why; ``rendered`` keeps its bytes
    in each format once made (``render``), for every file and page that shows it."""

    name: str
    title: str
    figure: object | None
    note: str = ""
    rendered: dict[str, bytes] = field(default_factory=dict, repr=False)


# ---- the data behind each figure ----------------------------------------------------------

def cycle_breakdown(result) -> tuple[list[str], dict[str, list[int]]]:
    """(row names, cycles per cause per row): conv layers, then the vector unit summed."""
    rows = list(result.conv_layers)
    vec = vector_row(result.layers)
    if vec is not None:
        rows.append(vec.renamed(VECTOR_ROW))
    return [s.name for s in rows], {label: [int(getattr(s, f)) for s in rows]
                                    for label, f in CAUSES}


def peak_macs_per_cycle(result) -> float:
    """The machine's multipliers (MAC/cycle): ``pe_cycles / cycles`` of any conv layer."""
    rates = {s.pe_cycles / s.cycles for s in result.conv_layers if s.cycles}
    return max(rates) if rates else 0.0


def roofline(result) -> dict:
    """Points (name, MAC per DRAM byte, MAC per cycle) of each conv layer with DRAM
    traffic, the compute ceiling (MAC/cycle) and the DRAM bandwidth (B/cycle, None if
    unlimited)."""
    bw = result.arch.memory.dram_bytes_per_cycle
    points = [(s.name, s.macs / s.dram_bytes, s.macs / s.cycles)
              for s in result.conv_layers if s.dram_bytes and s.cycles]
    return {"points": points, "peak": peak_macs_per_cycle(result),
            "bandwidth": None if unlimited(bw) else float(bw),
            "left_out": [s.name for s in result.conv_layers if not s.dram_bytes]}


def utilisation(result) -> tuple[list[str], list[float]]:
    """(conv layer names, utilisation 0..1 of each)."""
    return [s.name for s in result.conv_layers], [s.utilisation for s in result.conv_layers]


def densities(graph, x: np.ndarray, outputs: dict, dtype: str = "float32"
              ) -> tuple[list[str], list[float], list[float]]:
    """(conv layer names, non-zero share of each one's weights, non-zero share of its input
    activations), from the graph, its input ``x`` and every node's output (a run with
    ``keep_outputs``), as the machines met them in ``dtype``: an int8 run's float weights
    and inputs quantised as its convs quantise them (``quant``: per output channel, per
    tensor), whose small values round to zero."""
    from .. import quant
    from ..derived import int8_weights

    int8 = dtype == "int8"
    names, weights, acts = [], [], []
    for node in graph.conv_nodes:
        source = node.inputs[0]
        act = x if source not in outputs else outputs[source]
        w = node.op.weight
        if int8 and w.dtype != np.int8:
            w = int8_weights(w)[0]
        if int8 and act.dtype != np.int8:
            act = quant.quantize_activations(np.asarray(act, np.float32))[0]
        names.append(node.name)
        weights.append(float(np.count_nonzero(w)) / w.size)
        acts.append(float(np.count_nonzero(act)) / act.size)
    return names, weights, acts


def unit_busy(result) -> dict | None:
    """The per-unit busy cycles of the worst layer: {'layer', 'key', 'cycles' (one per
    unit), 'idle' (unit-cycles waiting on the busiest)}, taking the first ``*_by_unit``
    key the machine records; None if its layers record none."""
    best = None
    for s in result.conv_layers:
        keys = sorted(k for k in s.extra if k.endswith("_by_unit") and len(s.extra[k]))
        if not keys:
            continue
        counts = np.asarray(s.extra[keys[0]], np.int64)
        idle = int(counts.max() * counts.size - counts.sum())
        if best is None or idle > best["idle"]:
            best = {"layer": s.name, "key": keys[0], "cycles": counts.tolist(), "idle": idle}
    return best


# ---- drawing ------------------------------------------------------------------------------

def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _width(n_layers: int) -> float:
    return min(24.0, max(6.4, 0.28 * n_layers + 2.0))


def _label(results) -> list[str]:
    names = [r.arch.name for r in results]
    return [n if names.count(n) == 1 else f"{n}#{i + 1}" for i, n in enumerate(names)]


def draw_cycles(results) -> Figure:
    """Stacked bars of cycles by cause, one panel per arch (one y scale)."""
    plt = _pyplot()
    names, _ = cycle_breakdown(results[0])
    fig, axes = plt.subplots(len(results), 1, sharex=True, sharey=True, squeeze=False,
                             figsize=(_width(len(names)) + 1.9, 2.2 + 2.6 * len(results)))
    for ax, label, result in zip(axes[:, 0], _label(results), results, strict=True):
        names, parts = cycle_breakdown(result)
        bottom = np.zeros(len(names))
        for i, (cause, values) in enumerate(parts.items()):
            ax.bar(range(len(names)), values, bottom=bottom, label=cause, color=f"C{i}")
            bottom += values
        ax.set_title(label, fontsize=10)
        ax.set_ylabel("cycles")
        ax.grid(axis="y", alpha=0.3)
    _layer_ticks(axes[-1, 0], names)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.suptitle("Cycles per layer: compute and memory stalls")
    right = 1 - 1.9 / fig.get_figwidth()  # room for the legend beside the panels
    fig.tight_layout(rect=(0, 0, right, 0.97))
    fig.legend(handles, labels, fontsize=8, loc="center left", bbox_to_anchor=(right, 0.5))
    return Figure("cycles", "Cycles per layer by compute and stall cause", fig)


def _layer_ticks(ax, names: list[str]) -> None:
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=90, fontsize=7)
    ax.set_xlabel("layer")


def _percent_axes(fig, ax, names: list[str], ylabel: str, title: str) -> None:
    """Layer ticks, a 0..100 % y axis, title, grid and legend of a per-layer bar chart."""
    _layer_ticks(ax, names)
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 105)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()


def draw_roofline(results) -> Figure:
    """One roofline panel per arch, log-log."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(results), figsize=(5.2 * len(results), 4.6), squeeze=False)
    notes = []
    for ax, label, result in zip(axes[0], _label(results), results, strict=True):
        data = roofline(result)
        xs = np.array([p[1] for p in data["points"]] or [1.0])
        lo, hi = xs.min() / 4, xs.max() * 4
        grid = np.geomspace(lo, hi, 200)
        ax.plot(grid, np.full_like(grid, data["peak"]), "k-", lw=1.2,
                label=f"compute ceiling {data['peak']:g} MAC/cycle")
        if data["bandwidth"] is not None:
            slope = grid[grid * data["bandwidth"] <= data["peak"]]
            ax.plot(slope, slope * data["bandwidth"], "k--", lw=1.2,
                    label=f"DRAM ceiling {data['bandwidth']:g} B/cycle x intensity")
        else:
            notes.append(f"{label}: unlimited DRAM bandwidth, no bandwidth ceiling")
        if data["points"]:
            ax.scatter(xs, [p[2] for p in data["points"]], s=18, c="C3", zorder=3,
                       label=f"layers ({len(data['points'])})")
        if data["left_out"]:
            notes.append(f"{label}: {len(data['left_out'])} layers move no DRAM byte, not drawn")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(top=data["peak"] * 2 if data["peak"] else None)
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("arithmetic intensity (MAC per DRAM byte)")
        ax.set_ylabel("attainable MAC per cycle")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle("Roofline: each conv layer against the machine's ceilings")
    fig.tight_layout()
    return Figure("roofline", "Roofline per machine", fig, "; ".join(notes))


def draw_utilisation(results) -> Figure:
    """Grouped bars: each conv layer's utilisation on each arch."""
    plt = _pyplot()
    names, _ = utilisation(results[0])
    fig, ax = plt.subplots(figsize=(_width(len(names) * len(results) / 1.5), 4.4))
    width = 0.8 / len(results)
    for i, (label, result) in enumerate(zip(_label(results), results, strict=True)):
        _, values = utilisation(result)
        ax.bar(np.arange(len(names)) + (i - (len(results) - 1) / 2) * width,
               100 * np.asarray(values), width, label=label, color=f"C{i}")
    _percent_axes(fig, ax, names, "utilisation (% of multiplier-cycles doing useful MACs)",
                  "Utilisation per conv layer")
    return Figure("utilisation", "Utilisation per conv layer", fig)


def draw_densities(data) -> Figure:
    """Weight and activation density per conv layer; ``data`` from ``densities`` or None."""
    if data is None:
        return Figure("density", "Weight and activation density", None,
                      "no tensors (a shape-only run): every layer counted dense")
    plt = _pyplot()
    names, weights, acts = data
    fig, ax = plt.subplots(figsize=(_width(len(names)), 4.2))
    pos = np.arange(len(names))
    ax.bar(pos - 0.2, 100 * np.asarray(weights), 0.4, label="weights", color="C0")
    ax.bar(pos + 0.2, 100 * np.asarray(acts), 0.4, label="input activations", color="C1")
    _percent_axes(fig, ax, names, "non-zero share (%)",
                  "Weight and activation density per conv layer")
    return Figure("density", "Weight and activation density per conv layer", fig)


def draw_unit_busy(results) -> Figure:
    """Per-unit busy cycles of each arch's worst layer, for the archs that record them."""
    found = [(label, r, unit_busy(r)) for label, r in zip(_label(results), results, strict=True)]
    have = [(label, r, d) for label, r, d in found if d is not None]
    missing = [f"{label} ({r.dataflow})" for label, r, d in found if d is None]
    note = (f"no per-unit counts on {', '.join(missing)}: the machine does not deal work to "
            "units it counts separately" if missing else "")
    if not have:
        return Figure("units", "Per-unit busy cycles", None, note)
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(have), figsize=(6.0 * len(have), 4.2), squeeze=False)
    for ax, (label, _, d) in zip(axes[0], have, strict=True):
        cycles = np.asarray(d["cycles"])
        ax.bar(range(len(cycles)), cycles, color="C2", label="busy cycles")
        ax.axhline(cycles.max(), color="k", lw=1, ls="--", label=f"busiest {cycles.max():,}")
        ax.axhline(cycles.mean(), color="C3", lw=1, label=f"mean {cycles.mean():,.0f}")
        ax.set_title(f"{label}: {d['layer']} ({d['key']})", fontsize=9)
        ax.set_xlabel("unit")
        ax.set_ylabel("busy cycles")
        ax.legend(fontsize=8, loc="best", framealpha=0.9)
    fig.suptitle("Work per unit in the layer with the most idle unit-cycles")
    fig.tight_layout()
    return Figure("units", "Per-unit busy cycles of the worst layer", fig, note)


def figures(results, density=None) -> list[Figure]:
    """Every figure of ``results`` (one SimResult or a list, the same network on each);
    ``density``: ``densities(...)`` of that network, or None."""
    results = results if isinstance(results, list) else [results]
    return [draw_cycles(results), draw_roofline(results), draw_utilisation(results),
            draw_densities(density), draw_unit_busy(results)]


def render(fig: Figure, fmt: str) -> bytes:
    """The figure as PNG or SVG bytes, made once per format (``Figure.rendered``)."""
    if fmt not in fig.rendered:
        fig.rendered[fmt] = save(fig.figure, fmt)
    return fig.rendered[fmt]


def render_all(figs: list[Figure]) -> None:
    """Render every drawn figure in every format (``FORMATS``), so that writing them
    (``write_plots``) takes no more than the writes: a failure or an interrupt while
    matplotlib renders, the slow part, comes before any file is written."""
    for fig in figs:
        if fig.figure is not None:
            for fmt in FORMATS:
                render(fig, fmt)


def save(figure, fmt: str) -> bytes:
    """A matplotlib figure as PNG or SVG bytes at 100 dpi, signed as npusim's (the PNG's
    'Software' text, the SVG's creator: ``outfile`` replaces only files so marked)."""
    from .. import __version__

    key = "Software" if fmt == "png" else "Creator"
    data = io.BytesIO()
    figure.savefig(data, format=fmt, dpi=100, metadata={key: f"npusim {__version__}"})
    return data.getvalue()


def close(figs: list[Figure]) -> None:
    plt = _pyplot()
    for f in figs:
        if f.figure is not None:
            plt.close(f.figure)


def write_plots(figs: list[Figure], folder: str | Path, what: str = "--plots") -> list[Path]:
    """Write every drawn figure as ``NAME.png`` and ``NAME.svg`` into ``folder`` (created if
    missing), each atomically, all rendered before the first is written; returns the
    paths."""
    render_all(figs)
    folder = Path(folder)
    made = [p for p in (folder, *folder.parents) if not p.exists()]  # deepest first
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{what} {folder}: cannot make the folder: "
                                  f"{e.strerror or e}") from None
    drawn = [fig for fig in figs if fig.figure is not None]
    paths = []
    try:
        check_targets(folder, what, [fig.name for fig in drawn])  # all, before the first
        for fig in drawn:
            for fmt in FORMATS:
                path = folder / f"{fig.name}.{fmt}"
                outfile.write_bytes(path, render(fig, fmt), what, "figure")
                paths.append(path)
    except BaseException:
        _remove_empty(made)
        raise
    return paths


def _remove_empty(folders: list[Path]) -> None:
    """Remove the folders ``write_plots`` made (deepest first) that a failure left empty: a
    full disk once left an empty figures folder behind."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:  # not empty (a figure was written), or gone
            return


def check_folder(folder: Path, what: str = "--plots") -> None:
    """Refuse, before any run, a folder the figures could not go into: a path that is not
    a folder, a folder whose figures' files ``check_targets`` refuses, or a missing one whose
    nearest existing parent is not a writable folder (``write_plots`` makes it)."""
    folder = Path(folder)
    if folder.exists():
        if not folder.is_dir():
            raise OutputError(f"{what} {folder}: is no folder; give a folder for the figures")
        check_targets(folder, what)
        return
    parent = next(p for p in folder.absolute().parents if p.exists())
    if not parent.is_dir():
        raise OutputError(f"{what} {folder}: cannot make the folder: {parent} is a file")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{what} {folder}: cannot make the folder: {parent} is not "
                          "writable")


def check_targets(folder: Path, what: str = "--plots", names=NAMES) -> None:
    """Refuse, by ``outfile``'s rules, a folder where a figure's file (``names``, each as
    PNG and SVG) could not be written or is not npusim's: before any run, and before any
    figure is written (none is then)."""
    for name in names:
        for fmt in FORMATS:
            outfile.check_target(folder / f"{name}.{fmt}", what, "figure")


def plot(results, folder: str | Path, density=None) -> list[Path]:
    """Python API: draw every figure of ``results`` and write them into ``folder``."""
    figs = figures(results, density)
    try:
        return write_plots(figs, folder)
    finally:
        close(figs)
