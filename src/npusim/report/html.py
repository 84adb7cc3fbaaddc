"""``--html FILE``: a run or a comparison as one self-contained HTML page.

The page holds the summary, the tables (a click on a column head sorts by it, again to
reverse: a few lines of inline JavaScript), every figure of ``plots`` as an embedded PNG
(``data:`` URI), the arch(s) with their dataflow parameters and memory, and the npusim
version. It loads nothing else: no network, no file beside it.
"""

from __future__ import annotations

import base64
import html
from contextlib import contextmanager
from datetime import UTC, datetime

from ..area import describe_buffers
from . import plots
from .table import (
    bound_text,
    diagnostics,
    fmt_bytes,
    fmt_count,
    fmt_energy,
    fmt_percent,
    fmt_seconds,
    shown_utilisation,
    stall_text,
    utilisation_text,
)

STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222;max-width:1500px}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}
th,td{padding:.2em .6em;border-bottom:1px solid #ddd;text-align:right;white-space:nowrap}
th{background:#f2f2f2}th.sortable{cursor:pointer}th.sortable:hover{background:#e2e2ff}
td:first-child,th:first-child{text-align:left}tr.total td{font-weight:bold}
dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1em}dt{font-weight:bold}
.scroll{overflow-x:auto}img{max-width:100%;border:1px solid #ddd;margin:.4em 0}
.note{color:#666;font-style:italic}
"""

# Sorts a table's body rows by the clicked column: numbers by their data-v value, text
# otherwise; the row with class "total" stays last. A second click reverses.
SCRIPT = """
document.querySelectorAll('table.sortable').forEach(function (table) {
  table.querySelectorAll('th').forEach(function (th, col) {
    th.classList.add('sortable');
    th.addEventListener('click', function () {
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      var fixed = rows.filter(function (r) { return r.classList.contains('total'); });
      rows = rows.filter(function (r) { return !r.classList.contains('total'); });
      var dir = th.dataset.dir === 'asc' ? -1 : 1;
      table.querySelectorAll('th').forEach(function (h) { delete h.dataset.dir; });
      th.dataset.dir = dir === 1 ? 'asc' : 'desc';
      function key(r) {
        var c = r.cells[col];
        return c.dataset.v !== undefined ? parseFloat(c.dataset.v) : c.textContent;
      }
      rows.sort(function (a, b) {  // cells without a number ('-') after the numbers
        var x = key(a), y = key(b), nx = typeof x === 'number', ny = typeof y === 'number';
        if (nx !== ny) return nx ? -1 : 1;
        return (x < y ? -1 : x > y ? 1 : 0) * dir;
      });
      rows.concat(fixed).forEach(function (r) { body.appendChild(r); });
    });
  });
});
"""


def _e(text) -> str:
    return html.escape(str(text))


def _cell(text, value=None) -> str:
    """A table cell showing ``text``, sorted by the number ``value`` if given."""
    sort = "" if value is None or value != value else f' data-v="{float(value)!r}"'
    return f"<td{sort}>{_e(text)}</td>"


def table(heads: list[str], rows: list[tuple[list[str], str]], table_id: str) -> str:
    """A sortable table; ``rows`` are (cells made by ``_cell``, row class)."""
    head = "".join(f"<th>{_e(h)}</th>" for h in heads)
    body = "".join(f'<tr class="{cls}">{"".join(cells)}</tr>' for cells, cls in rows)
    return (f'<div class="scroll"><table class="sortable" id="{table_id}"><thead><tr>{head}'
            f"</tr></thead><tbody>{body}</tbody></table></div>")


LAYER_HEADS = ["layer", "shape", "dense MACs", "MACs", "compute cycles", "stall cycles",
               "cycles", "bound", "util %", "SRAM", "DRAM", "energy"]


def _util_cell(s, lanes: int) -> str:
    """The util % cell of a row (``shown_utilisation``: the vector unit's by its lanes)."""
    ratio = shown_utilisation(s, lanes)
    return _cell("-") if ratio is None else _cell(fmt_percent(ratio), ratio)


def _layer_cells(s, lanes: int) -> list[str]:
    return [_cell(s.name), _cell(s.shape), _cell(fmt_count(s.dense_macs), s.dense_macs),
            _cell(fmt_count(s.macs), s.macs), _cell(f"{s.compute_cycles:,}", s.compute_cycles),
            _cell(f"{s.stall_cycles:,}", s.stall_cycles), _cell(f"{s.cycles:,}", s.cycles),
            _cell(s.bound or "-"), _util_cell(s, lanes),
            _cell(fmt_bytes(s.sram_bytes), s.sram_bytes),
            _cell(fmt_bytes(s.dram_bytes), s.dram_bytes),
            _cell(fmt_energy(s.energy_pj), s.energy_pj)]


def layer_table(result, table_id: str) -> str:
    """Every op of the run (conv layers and vector ops), then the total."""
    lanes = result.arch.vector.lanes
    rows = [(_layer_cells(s, lanes), "") for s in result.layers]
    rows.append((_layer_cells(result.total.renamed("total"), lanes), "total"))
    return table(LAYER_HEADS, rows, table_id)


def _dl(items: list[tuple[str, str]]) -> str:
    return "<dl>" + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in items) + "</dl>"


def run_summary(result) -> list[tuple[str, str]]:
    """The totals of one run, as (label, text)."""
    tot, arch = result.total, result.arch
    return [("cycles", f"{tot.cycles:,}"), ("of which", stall_text(tot)),
            ("layers bound by", bound_text(result.conv_layers)),
            (f"time at {arch.clock_mhz:g} MHz", fmt_seconds(arch.seconds(tot.cycles))),
            ("utilisation", utilisation_text(result)),
            ("MACs", f"{fmt_count(tot.macs)} performed of {fmt_count(tot.dense_macs)} dense"),
            ("energy", fmt_energy(tot.energy_pj)), ("DRAM traffic", fmt_bytes(tot.dram_bytes)),
            ("SRAM traffic", fmt_bytes(tot.sram_bytes)), *diagnostics(result)]


def arch_items(result) -> list[tuple[str, str]]:
    from ..cli import dataflow_summary

    arch = result.arch
    return [("arch", f"{arch.name}: {arch.description}" if arch.description else arch.name),
            ("dataflow", dataflow_summary(arch, result.dataflow)),
            ("clock", f"{arch.clock_mhz:g} MHz"),
            ("memory", describe_buffers(arch, result.dataflow))]


def figures_html(figs: list) -> str:
    """Each figure as an embedded PNG under its title; a figure not drawn as its note."""
    parts = []
    for fig in figs:
        parts.append(f"<h3>{_e(fig.title)}</h3>")
        if fig.figure is not None:
            data = base64.b64encode(plots.render(fig, "png")).decode("ascii")
            parts.append(f'<img class="plot" alt="{_e(fig.title)}" '
                         f'src="data:image/png;base64,{data}">')
        if fig.note:
            parts.append(f'<p class="note">{_e(fig.note)}</p>')
    return "\n".join(parts)


def page(title: str, body: str, version: str) -> str:
    made = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="generator" content="npusim {_e(version)}">'
            f"<title>{_e(title)}</title><style>{STYLE}</style></head><body>"
            f"<h1>{_e(title)}</h1>{body}<p class=\"note\">npusim {_e(version)}, {made}</p>"
            f"<script>{SCRIPT}</script></body></html>\n")


def run_report(result, *, model: str, version: str, facts: list[tuple[str, str]] = (),
               density=None, figs: list | None = None) -> str:
    """The page of one run: its facts (input, mode...), arch, totals, layer table, figures
    (``figs``: ``plots.figures`` of ``result`` drawn already, which the caller closes; by
    default drawn here, with ``density``)."""
    with _drawn(figs, result, density) as figs:
        body = (_dl([("npusim version", version), ("mode", result.mode),
                     ("dtype", result.dtype), *facts, *arch_items(result)])
                + "<h2>Summary</h2>" + _dl(run_summary(result))
                + "<h2>Layers</h2>" + layer_table(result, "layers")
                + "<h2>Figures</h2>" + figures_html(figs))
    return page(f"{model} on {result.arch.name}", body, version)


@contextmanager
def _drawn(figs: list | None, results, density):
    """``figs`` as given (their drawer closes them), or ``plots.figures(results, density)``
    drawn for the page and closed after it."""
    if figs is not None:
        yield figs
        return
    figs = plots.figures(results, density)
    try:
        yield figs
    finally:
        plots.close(figs)


def comparison_table(cmp) -> str:
    """The side-by-side table of ``compare``, sortable."""
    from .compare import energy_ratio, fmt_ratio, speedup

    heads = ["layer"]
    for i, label in enumerate(cmp.labels):
        heads += [f"{label} cycles", f"{label} bound", f"{label} util %", f"{label} energy"]
        heads += [f"{label} speed-up", f"{label} energy ratio"] if i else []
    rows = []
    for name, stats in cmp.rows():
        cells = [_cell(name)]
        for i, (s, r) in enumerate(zip(stats, cmp.results, strict=True)):
            cells += [_cell(f"{s.cycles:,}", s.cycles), _cell(s.bound or "-"),
                      _util_cell(s, r.arch.vector.lanes),
                      _cell(fmt_energy(s.energy_pj), s.energy_pj)]
            if i:
                up, er = speedup(stats[0], s), energy_ratio(stats[0], s)
                cells += [_cell(fmt_ratio(up), up), _cell(fmt_ratio(er), er)]
        rows.append((cells, "total" if name == "total" else ""))
    return table(heads, rows, "comparison")


def compare_report(cmp, *, version: str, facts: list[tuple[str, str]] = (),
                   density=None, figs: list | None = None) -> str:
    """The page of a comparison: facts, each arch, the summary lines, the side-by-side
    table, each arch's layer table, the figures (``figs`` as ``run_report``'s, of
    ``cmp.results``)."""
    from .compare import summary_lines

    with _drawn(figs, cmp.results, density) as figs:
        archs = "".join(f"<h3>{_e(label)}</h3>" + _dl(arch_items(r))
                        for label, r in cmp.labelled())
        per_arch = "".join(f"<h3>{_e(label)}</h3>" + layer_table(r, f"layers-{i}")
                           for i, (label, r) in enumerate(cmp.labelled()))
        body = (_dl([("npusim version", version), ("mode", cmp.results[0].mode),
                     ("dtype", cmp.results[0].dtype), ("baseline", cmp.labels[0]), *facts])
                + "<h2>Archs</h2>" + archs
                + "<h2>Summary</h2><ul>" + "".join(f"<li>{_e(line)}</li>"
                                                   for line in summary_lines(cmp)) + "</ul>"
                + "<h2>Side by side</h2>" + comparison_table(cmp)
                + "<h2>Figures</h2>" + figures_html(figs)
                + "<h2>Layers of each arch</h2>" + per_arch)
    return page(f"{cmp.model}: {' vs '.join(cmp.labels)}", body, version)
