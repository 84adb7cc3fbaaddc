"""SCALE-Sim topology CSVs: conv layers as shapes only (no tensors), read and written.

A row is ``name, IFMAP height, IFMAP width, filter height, filter width, channels,
num filters, stride,`` (a trailing comma); each an integer from 1 to 2**20, and the
layer at most 2**53 MACs. SCALE-Sim takes the IFMAP as given (no
padding), one stride for both axes, batch 1, and sizes the output
``ceil((H - R) / stride) + 1``: a last window that overhangs the bottom or right edge
still counts. ``read_topology`` keeps that size by giving such a layer the missing
rows/columns of zero padding at the bottom/right (under one stride), so its
``ConvLayer`` has SCALE-Sim's output shape, MACs and cycles.

Accepted variants: a UTF-8 byte-order mark, tab-separated files, blank lines, rows
with every field empty, padded fields, a ``#comment`` after the last comma, and extra
columns after the stride (ignored, except SCALE-Sim's ``N:M`` sparsity ratio in the
ninth, which must be dense). A name containing ``DP`` is SCALE-Sim's depthwise
mark: its ``num filters`` are per channel, so the layer is read as ``groups = channels``.

``write_topology`` writes the same format: for each conv an IFMAP size that SCALE-Sim
maps to the layer's output size (the layer's own, or padded, or else the smallest), a
grouped conv as one row per group (``name_g0``, ``name_g1``...), except a depthwise
layer whose name holds ``DP``, written as SCALE-Sim's one depthwise row. Dilation,
unequal strides, a batch other than 1, and names with separators have no SCALE-Sim
form and are refused.
"""

from __future__ import annotations

from pathlib import Path

from .. import outfile
from ..choices import MAX_DIM
from ..errors import LayerError, ModelError
from ..ir import ConvLayer, Graph

FIELDS = ("IFMAP Height", "IFMAP Width", "Filter Height", "Filter Width", "Channels",
          "Num Filter", "Strides")
HEADER = "Layer name, " + ", ".join(FIELDS) + ","
MAX_MACS = 2**53  # per layer: every count stays exact in float64 (JSON readers) and int64


def read_topology(path: str | Path) -> list[ConvLayer]:
    """The conv layers of a SCALE-Sim topology CSV, batch 1, float32."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as e:
        raise ModelError(f"{path}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ModelError(f"{path}: not a text CSV file ({e.reason})") from None
    lines = text.splitlines()
    if not lines or "layer" not in lines[0].lower():
        raise ModelError(f"{path}: line 1 must be the header 'Layer name, IFMAP Height, ...'")
    sep = "\t" if "\t" in lines[0] and "," not in lines[0] else ","
    layers = [_row_layer(fields, path, n) for n, fields in _rows(lines, sep)]
    if not layers:
        raise ModelError(f"{path}: no layer rows after the header")
    return layers


def _rows(lines: list[str], sep: str):
    """(line number, stripped fields) of every non-empty row after the header."""
    for n, line in enumerate(lines[1:], start=2):
        fields = [f.strip() for f in line.split(sep)]
        if any(f and not f.startswith("#") for f in fields):
            yield n, fields


def _row_layer(fields: list[str], path: Path, line: int) -> ConvLayer:
    name = fields[0]
    where = f"{path}: line {line} ({name or 'unnamed'})"
    if not name:
        raise ModelError(f"{where}: field 'Layer name' is empty; every row needs a name")
    if len(fields) < 8 or not all(fields[1:8]):
        raise ModelError(f"{where}: needs 8 fields (name, {', '.join(FIELDS)}), "
                         f"got {len([f for f in fields if f])}")
    h, w, r, s, c, k, stride = (_int(v, f, where) for v, f in zip(fields[1:8], FIELDS, strict=True))
    _check_dense(fields[8:9], where)
    if r > h or s > w:
        raise ModelError(f"{where}: filter {r}x{s} is larger than the IFMAP {h}x{w}")
    groups = c if "DP" in name else 1
    pad = (0, (-(h - r)) % stride, 0, (-(w - s)) % stride)
    try:
        layer = ConvLayer(1, c, h, w, k * groups, r, s, stride, pad, 1, groups, False, name)
    except LayerError as e:
        raise ModelError(f"{where}: {e}") from None
    if layer.macs > MAX_MACS:
        raise ModelError(f"{where}: {layer.macs:.3g} MACs; a layer may have at most 2**53 "
                         "(counts must stay exact in float64)")
    return layer


def _check_dense(ninth: list[str], where: str) -> None:
    """SCALE-Sim reads a ninth field 'N:M' as a structured-sparsity ratio; only 1:1
    (dense) has the same meaning in a shape-only dense run."""
    if ninth and ":" in ninth[0]:
        n, _, m = ninth[0].partition(":")
        if n.strip() != m.strip():
            raise ModelError(f"{where}: field 'Sparsity'={ninth[0]!r}: an N:M sparsity ratio; "
                             f"topology runs are dense, so only equal N and M are accepted")


def _int(value: str, field: str, where: str) -> int:
    try:
        v = int(value)
    except ValueError:
        v = 0
    if not 1 <= v <= MAX_DIM:
        raise ModelError(f"{where}: field '{field}'={value!r}: must be an integer from 1 to "
                         f"2**20 = {MAX_DIM}")
    return v


def write_topology(layers: Graph | list[ConvLayer], path: str | Path) -> int:
    """Write ``layers`` (or a Graph's convs, in order) as a SCALE-Sim topology CSV to
    ``path`` (``-``: standard output), by ``npusim.outfile``'s rules: atomically, and
    never over anything but a regular file. Returns the rows written (past the header)."""
    name = layers.name if isinstance(layers, Graph) else "the network"
    if isinstance(layers, Graph):
        layers = [layers.layers[n.name] for n in layers.conv_nodes]
    outfile.check_target(path, "topology", "topology")
    if not layers:  # a header alone, which no reader of topologies (npusim's) takes
        raise ModelError(f"{name}: no conv layer, so no row to write: a SCALE-Sim topology "
                         "of it would be empty")
    rows = [row for layer in layers for row in topology_rows(layer)]
    outfile.write_text(path, "\n".join([HEADER, *rows]) + "\n", "topology", "topology")
    return len(rows)


def topology_rows(layer: ConvLayer) -> list[str]:
    """The CSV row(s) of one conv: one per group."""
    _check_writable(layer)
    t, b, left, right = layer.padding
    h = _extent(layer.P, layer.R, layer.stride[0], (layer.H, layer.H + t + b))
    w = _extent(layer.Q, layer.S, layer.stride[1], (layer.W, layer.W + left + right))
    if layer.groups == 1 or "DP" in layer.name:  # DP: SCALE-Sim's own depthwise row
        k = layer.K if layer.groups == 1 else layer.Kg
        return [f"{layer.name},{h},{w},{layer.R},{layer.S},{layer.C},{k},{layer.stride[0]},"]
    return [f"{layer.name}_g{g},{h},{w},{layer.R},{layer.S},{layer.Cg},{layer.Kg},"
            f"{layer.stride[0]}," for g in range(layer.groups)]


def _extent(out: int, k: int, stride: int, candidates) -> int:
    """The IFMAP size to write: the layer's own (unpadded, then padded) if SCALE-Sim maps
    it to ``out`` outputs, else the smallest that it does (pixels)."""
    for size in candidates:
        if size >= k and -(-(size - k) // stride) + 1 == out:
            return size
    return scalesim_extent(out, k, stride)


def scalesim_extent(out: int, k: int, stride: int) -> int:
    """The smallest IFMAP size that SCALE-Sim maps to ``out`` outputs (pixels)."""
    return k if out == 1 else (out - 2) * stride + k + 1


def _check_writable(layer: ConvLayer) -> None:
    why = None
    if layer.dilation != (1, 1):
        why = f"dilation={layer.dilation}: SCALE-Sim has no dilation; only (1, 1) can be written"
    elif layer.stride[0] != layer.stride[1]:
        why = f"stride={layer.stride}: SCALE-Sim has one stride for both axes"
    elif layer.N != 1:
        why = f"N={layer.N}: SCALE-Sim topologies are batch 1; export the network at batch 1"
    elif any(ch in layer.name for ch in ",\t\n\r#") or not layer.name.strip():
        why = f"name {layer.name!r}: must be non-empty, without a comma, tab, newline or '#'"
    elif "DP" in layer.name and layer.groups != layer.C:
        why = (f"name {layer.name!r} has SCALE-Sim's depthwise mark 'DP' but groups="
               f"{layer.groups} != C={layer.C}")
    if why:
        raise ModelError(f"{layer.name}: cannot be written as a SCALE-Sim topology row: {why}")
