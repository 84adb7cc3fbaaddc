"""The group-tile machine: full, grouped and depthwise convolution on tiles of MAC cells
fed by a broadcast input bus.

Source: seed 003 (JP7834166B2), Fig. 6 (compute tile: MAC cells each with a sum
register, 8-bit narrow memory for activations, 32-bit-word wide memory for weights,
input bus, output bus, activation unit), Figs. 7A/7B (channel partitions S = Zin / g
mapped to MAC subsets; one input broadcast to a subset per cycle, or up to
``bus_inputs`` inputs a cycle, one per subset), Fig. 8 (a broadcast input is reused by
every output of its partition: reuse factor = outputs per group, the group size when
Zin = Zout), claims 1-8 (g read per layer at run time; partition size from the
tile's hardware description). See ``docs/group-tile.md``.

Group-convolution control (``control``): a layer's g partitions each hold S = C/g input
and Kg = K/g output channels. A work unit is one output pixel of one partition and one
block of up to ``macs`` of its outputs; its MAC subset holds those outputs in its sum
registers. ``bus_inputs`` subsets run at once (one bus lane each), at most
``macs // subset`` of them. Loop order (outer to inner)::

    for tile t (parallel): units [t*U/tiles, (t+1)*U/tiles) of (n, p, q, group, k-block)
        for step = next ``subsets`` units:                       # subsets in parallel
            for c in partition, r, s:                            # one tap
                wide memory -> weight registers: ceil(sum(m_u) * bytes / 4) words
                bus lane u broadcasts x[n, c, p*sh + r*dh - pt, q*sw + s*dw - pl]
                MAC j of subset u: sum[j] += weight[j] * lane[u]
            sum registers -> shift registers -> output bus (+ bias in the activation unit)

    tap cycles  = max(1, ceil(weight words of the step / wide_words_per_cycle))
    step cycles c_i = S*R*S_k * tap cycles;  drain d_i = ceil(outputs_i / output_bus_values)
    tile cycles = c_0 + sum_{i>0} max(c_i, d_{i-1}) + d_last;  cycles = max over tiles

so a layer is bound by the MACs (one tap a cycle) or by the wide memory's parameter
bandwidth, whichever is slower, and the drain of one step overlaps the next step.
Padding taps broadcast a zero (a cycle, no narrow-memory read). The emulator
(``npusim.emulate.group_tile``) runs the same machine cycle by cycle.

Memory (``memory_steps``, priced by ``stats.price``): each tile has its own narrow memory
(activations: the ifmap buffer) and wide memory (weights: the filter buffer), sized by
``narrow_kb`` and ``wide_kb`` (``tile_buffers``). Each machine step reads the weights of
its partitions and output blocks from the wide memory (from DRAM when not resident), the
input band of its output row from the narrow memory, and writes its outputs; each tile
fetches its own copy of what its share needs. When the layer's weights do not fit a
tile's wide memory, the units are ordered chunk outer (``unit_order``): chunks of
(partition, output block)s whose weights fit, every pixel of a chunk before the next, so
each weight is fetched once per tile. An output block whose weights alone exceed the wide
memory's active half is fetched again for every step; the compiler (``compiled``) runs the
layer in narrower blocks that fit instead where that takes fewer cycles on the arch's
memory.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from .. import engine, memory, simd, stats
from ..arch.sections.group_tile import GroupTile as Params  # the arch file section
from ..arch.spec import unlimited
from ..derived import kernel_blocks, laid_out
from ..ir import ConvLayer
from ..jit import njit
from ..parallel import in_parallel
from ..reference import pad_input
from .base import Machine, Memo, element_bytes, percent, register

NAME = "group-tile"
WORD_BYTES = 4  # the wide memory's word: 32 bits


@dataclass(frozen=True)
class Control:
    """The group-convolution control's mapping of one layer onto a tile (Fig. 7A).

    ``partition`` = S = C / g input channels; ``reuse`` = Kg outputs each broadcast
    input serves; ``subset`` = MACs per subset; ``subsets`` = subsets fed at once.
    """

    groups: int
    partition: int
    reuse: int
    subset: int
    k_blocks: int
    subsets: int
    taps: int
    pixels: int

    @property
    def units(self) -> int:
        """Work units of the layer: pixel x partition x output block."""
        return self.pixels * self.groups * self.k_blocks

    @property
    def last_block(self) -> int:
        """Outputs in a partition's last output block (the others hold ``subset``)."""
        return self.reuse - (self.k_blocks - 1) * self.subset


def control(layer: ConvLayer, p: Params, width: int | None = None) -> Control:
    """Map ``layer``'s g partitions onto ``p``'s MAC subsets (claims 2-5): read at run time
    from the layer (g) and the tile's hardware description (MACs, bus lanes), in output
    blocks of ``width`` outputs (None: as many as the MACs hold; ``block_widths``)."""
    subset = min(layer.Kg, p.macs, width or p.macs)
    return Control(groups=layer.groups, partition=layer.Cg, reuse=layer.Kg, subset=subset,
                   k_blocks=math.ceil(layer.Kg / subset),
                   subsets=min(p.bus_inputs, p.macs // subset),
                   taps=layer.Cg * layer.R * layer.S, pixels=layer.N * layer.P * layer.Q)


def block_widths(layer: ConvLayer, p: Params, mem) -> tuple[int, ...]:
    """Output-block widths (outputs a MAC subset holds) the compiler weighs for ``layer`` on
    a tile with memories ``mem`` (``tile_buffers``), the full one first: as many as the MACs
    hold (``min(Kg, macs)``) and, where that block's weights exceed the wide memory's active
    half, the most outputs whose weights fit it, and that many rounded down to whole
    deliveries of the wide memory (the weights it reads a cycle for a step's subsets: a tap
    of 21 float32 outputs waits 2 cycles for its words where 16 take 1). A block that does
    not fit is fetched again for every step; a narrower one leaves MACs idle but is fetched
    once per chunk (``unit_order``). Which is fastest depends on the DRAM: ``compiled``
    times them."""
    full = min(layer.Kg, p.macs)
    elem = element_bytes(layer.dtype)
    fits = int(min(full, wide_capacity(mem) // (layer.Cg * layer.R * layer.S * elem)))
    if full <= fits or fits < 1:
        return (full,)
    subsets = min(p.bus_inputs, p.macs // fits)
    per_cycle = max(1, p.wide_words_per_cycle * WORD_BYTES // elem // subsets)  # weights
    whole = fits // per_cycle * per_cycle
    return (full, fits) if whole in (0, fits) else (full, fits, whole)


def unit_widths(ctl: Control, units: np.ndarray) -> np.ndarray:
    """Outputs (MACs used) of work units ``units``: full blocks, a partial last one."""
    last = (units % ctl.k_blocks) == ctl.k_blocks - 1
    return np.where(last, ctl.last_block, ctl.subset).astype(np.int64)


def chunk_starts(block_bytes: np.ndarray, capacity: float) -> list[int]:
    """First block of each chunk, and the end: consecutive blocks (partitions x output
    blocks) as many as fit ``capacity`` bytes; a block larger than it alone."""
    starts, held = [0], 0
    for i, b in enumerate(block_bytes.tolist()):
        if held and held + b > capacity:
            starts.append(i)
            held = 0
        held += b
    return [*starts, len(block_bytes)]


def unit_order(ctl: Control, elem: int, capacity: float = math.inf) -> np.ndarray:
    """Work units (pixel x blocks per pixel + block) in the controller's order. Pixels
    outer, every partition and output block inner (Fig. 7B: the lanes feed different
    partitions) while the layer's weights fit the filter buffer's ``capacity`` bytes;
    otherwise the blocks are cut into chunks that fit, chunk outer: each chunk's weights
    stay while every pixel runs, instead of every pixel fetching every weight."""
    per_pixel = ctl.groups * ctl.k_blocks
    weights = unit_widths(ctl, np.arange(per_pixel)) * ctl.taps * elem
    if weights.sum() <= capacity:
        return np.arange(ctl.units)
    starts, pix = chunk_starts(weights, capacity), np.arange(ctl.pixels)[:, None]
    return np.concatenate([(pix * per_pixel + np.arange(a, b)).ravel()
                           for a, b in zip(starts[:-1], starts[1:], strict=True)])


def tile_ranges(units: int, tiles: int) -> list[tuple[int, int]]:
    """Contiguous share of work units per tile (the loop nest split across tiles)."""
    return [(t * units // tiles, (t + 1) * units // tiles) for t in range(tiles)]


@dataclass(frozen=True)
class TileSteps:
    """Per step of one tile: outputs held (MACs used), wide-memory words per tap, units."""

    outputs: np.ndarray
    words: np.ndarray
    units: np.ndarray


def tile_steps(ctl: Control, units: np.ndarray, elem: int) -> TileSteps:
    """Group a tile's ``units`` into steps of ``ctl.subsets`` units. The compiler lays each
    step's weights for a tap side by side, so a tap reads them packed in words."""
    m = unit_widths(ctl, units)
    pad = (-len(m)) % ctl.subsets
    m = np.concatenate([m, np.zeros(pad, np.int64)]).reshape(-1, ctl.subsets)
    outputs = m.sum(axis=1)
    return TileSteps(outputs, -(-(outputs * elem) // WORD_BYTES), np.count_nonzero(m, axis=1))


def step_timeline(compute: np.ndarray, drain: np.ndarray) -> tuple[int, int]:
    """(tile cycles, cycles spent waiting for the output bus) for steps of ``compute``
    cycles whose outputs drain in ``drain`` cycles, overlapped with the next step."""
    if not len(compute):
        return 0, 0
    overlap = np.maximum(compute[1:], drain[:-1])
    cycles = int(compute[0] + overlap.sum() + drain[-1])
    return cycles, int((overlap - compute[1:]).sum() + drain[-1])


@dataclass(frozen=True)
class Schedule:
    """What a layer did on the tiles (fast model or emulator fill the same counts)."""

    tile_cycles: tuple[int, ...]
    mapped_mac_cycles: int
    broadcasts: int
    weight_words: int
    weight_stall_cycles: int
    drain_stall_cycles: int

    @property
    def cycles(self) -> int:
        """Layer cycles: the last tile to finish."""
        return max(self.tile_cycles)


def schedule(layer: ConvLayer, p: Params, capacity: float = math.inf,
             width: int | None = None) -> Schedule:
    """The fast model: every count of the machine from the layer's shape, by array ops;
    ``capacity``: bytes of weights the filter buffer keeps (``unit_order``); ``width``:
    outputs of an output block (``control``)."""
    ctl, elem = control(layer, p, width), element_bytes(layer.dtype)
    order = unit_order(ctl, elem, capacity)
    cycles, mapped, casts, words, wstall, dstall = [], 0, 0, 0, 0, 0
    for lo, hi in tile_ranges(ctl.units, p.tiles):
        st = tile_steps(ctl, order[lo:hi], elem)
        per_tap = np.maximum(1, -(-st.words // p.wide_words_per_cycle))
        compute = ctl.taps * per_tap
        tc, ds = step_timeline(compute, -(-st.outputs // p.output_bus_values))
        cycles.append(tc)
        mapped += int((st.outputs * compute).sum())
        casts += int(st.units.sum()) * ctl.taps
        words += int(st.words.sum()) * ctl.taps
        wstall += int((compute - ctl.taps).sum())
        dstall += ds
    return Schedule(tuple(cycles), mapped, casts, words, wstall, dstall)


def valid_taps(size: int, pad: int, k: int, dil: int, stride: int, out: int) -> np.ndarray:
    """Per output position along one axis: kernel taps that land inside the input."""
    return (tap_positions(size, pad, k, dil, stride, out) >= 0).sum(axis=1)


def tap_positions(size: int, pad: int, k: int, dil: int, stride: int, out: int) -> np.ndarray:
    """(out, k) the input position each tap of each output position reads along one axis,
    -1 where it reads padding (memory of out x k: an out x size map of them took 32 GiB on
    a 65,536-pixel row)."""
    pos = np.arange(out)[:, None] * stride + np.arange(k)[None, :] * dil - pad
    return np.where((pos >= 0) & (pos < size), pos, -1)


def used_positions(size: int, pad: int, k: int, dil: int, stride: int, out: int) -> int:
    """Input positions along one axis that some tap of some output reads."""
    pos = tap_positions(size, pad, k, dil, stride, out)
    return int(np.unique(pos[pos >= 0]).size)


def narrow_reads(layer: ConvLayer, ctl: Control) -> int:
    """Activations read from narrow memory: every non-padding tap of every work unit."""
    rows, cols = axis_taps(layer)
    return int(rows.sum() * cols.sum()) * layer.N * layer.C * ctl.k_blocks


def axis_taps(layer: ConvLayer) -> tuple[np.ndarray, np.ndarray]:
    """Non-padding kernel taps per output row and per output column."""
    return (valid_taps(layer.H, layer.padding[0], layer.R, layer.dilation[0], layer.stride[0],
                       layer.P),
            valid_taps(layer.W, layer.padding[2], layer.S, layer.dilation[1], layer.stride[1],
                       layer.Q))


def band_rows(layer: ConvLayer, rows: np.ndarray) -> np.ndarray:
    """(N x P,) input rows each output row's band brings for a tile that runs the global
    output rows (image x P + row) ``rows``: the rows of its window that no earlier row
    of the same image, from the tile's first row there, had read."""
    taps = tap_positions(layer.H, layer.padding[0], layer.R, layer.dilation[0],
                         layer.stride[0], layer.P)
    out = np.zeros(layer.N * layer.P, np.int64)
    for n in np.unique(rows // layer.P).tolist():
        s = int(rows[rows // layer.P == n].min()) - n * layer.P
        read = taps[s:].ravel()  # row-major: an input row's first index is its first reader
        found, at = np.unique(read, return_index=True)
        first = at[found >= 0] // layer.R
        out[n * layer.P + s:(n + 1) * layer.P] = np.bincount(first, minlength=layer.P - s)
    return out


def tile_memory(layer: ConvLayer, ctl: Control, p: Params, order: np.ndarray) -> dict:
    """One tile's steps as the memory model sees them (see ``memory_steps``): the tile
    runs the work units ``order``."""
    elem = element_bytes(layer.dtype)
    st = tile_steps(ctl, order, elem)
    per_tap = np.maximum(1, -(-st.words // p.wide_words_per_cycle))
    compute, drain = ctl.taps * per_tap, -(-st.outputs // p.output_bus_values)
    own = np.concatenate([compute[:1], np.maximum(compute[1:], drain[:-1])])
    own[-1] += drain[-1]
    units = np.concatenate([order, np.full((-len(order)) % ctl.subsets, -1)]).reshape(
        -1, ctl.subsets)
    count = (units >= 0).sum(axis=1)
    per_pixel = ctl.groups * ctl.k_blocks
    last_row = units[np.arange(len(units)), count - 1] // per_pixel // layer.Q
    cols = used_positions(layer.W, layer.padding[2], layer.S, layer.dilation[1],
                          layer.stride[1], layer.Q)
    band = band_rows(layer, order // per_pixel // layer.Q)[last_row] * cols * layer.C * elem
    rows_t, cols_t = axis_taps(layer)
    pix = np.where(units >= 0, units // per_pixel, 0)
    taps = rows_t[pix // layer.Q % layer.P] * cols_t[pix % layer.Q] * layer.Cg
    reads = np.where(units >= 0, taps, 0).sum(axis=1)
    ids, fetched, added = weight_blocks(ctl, np.where(units >= 0, units % per_pixel, -1), elem)
    return {"compute": own, "ifmap": last_row, "ifmap_bytes": reads * elem, "ifmap_size": band,
            "filter": ids, "filter_bytes": fetched, "filter_held": added,
            "ofmap_bytes": st.outputs * elem,
            "sram_bytes": reads * elem + st.words * ctl.taps * WORD_BYTES + st.outputs * elem}


def weight_blocks(ctl: Control, blocks: np.ndarray, elem: int):
    """Per step of a tile, from the (partition, output block) of each unit it runs
    (``blocks``, steps x subsets, -1 for an idle lane): (an id per set of weight blocks;
    the bytes of the set, each block once, what a step fetches when it is not resident;
    the bytes of its blocks no earlier step read, what it adds to the wide memory held).
    Lanes that pair the partitions differently from step to step read the same weights,
    and two units of one block in a step read them once: counted per combination, weights
    that fit were fetched again and again."""
    bytes_of = np.where(blocks >= 0, unit_widths(ctl, np.maximum(blocks, 0)) * ctl.taps * elem,
                        0)
    repeat = np.zeros(blocks.shape, bool)  # a block an earlier lane of the step has
    for j in range(1, blocks.shape[1]):
        repeat[:, j] = (blocks[:, :j] == blocks[:, j:j + 1]).any(axis=1)
    sets = np.sort(np.where(repeat, -1, blocks), axis=1)
    ids = sets[:, 0] if sets.shape[1] == 1 else np.unique(
        sets, axis=0, return_inverse=True)[1].reshape(-1)
    flat = blocks.ravel()
    first = np.zeros(flat.shape, bool)
    first[np.unique(flat, return_index=True)[1]] = True  # each block's first use
    added = np.where(first & (flat >= 0), bytes_of.ravel(), 0).reshape(blocks.shape)
    return ids, np.where(repeat, 0, bytes_of).sum(axis=1), added.sum(axis=1)


def tile_buffers(arch):
    """The memory one tile sees (Fig. 6: each tile has its own): a narrow memory
    (activations, the ifmap buffer) of ``narrow_kb`` and a wide memory (weights, the filter
    buffer) of ``wide_kb`` KiB, or where those are 0 an even share of the arch's ifmap and
    filter SRAM; DRAM, ofmap buffer and double buffering are the arch's."""
    p, mem = arch.params(Params), arch.memory
    return dataclasses.replace(mem, ifmap_sram_kb=p.narrow_kb or mem.ifmap_sram_kb / p.tiles,
                               filter_sram_kb=p.wide_kb or mem.filter_sram_kb / p.tiles)


def tile_fetches(q: dict, mem) -> dict:
    """DRAM bytes one tile's steps ``q`` (``tile_memory``) fetch into its own narrow and
    wide memory ``mem``, by the memory model's residency rules (``memory.traffic``): an
    input band that fits the narrow memory's active half comes whole, a larger one as the
    step's own taps; a weight block is kept while the tile's blocks fit the wide memory.
    The bands are held only where that moves fewer bytes than every step fetching its own
    taps (a 1x1 conv's taps are its band's pixels, once each): a band fetched whole at its
    row's first step waits on DRAM where the same bytes, step by step, overlap the steps,
    and a larger narrow memory made such a layer slower."""
    whole = q["ifmap_size"] <= memory.usable_bytes(mem.ifmap_sram_kb, mem)
    st = memory.Steps(compute=q["compute"], ifmap=q["ifmap"], ifmap_size=q["ifmap_size"],
                      ifmap_bytes=np.where(whole, q["ifmap_size"], q["ifmap_bytes"]),
                      filter=q["filter"], filter_bytes=q["filter_bytes"],
                      filter_held=q["filter_held"])
    t = memory.traffic(st, mem)
    held = t["ifmap"].sum() < q["ifmap_bytes"].sum()
    return {**q, "ifmap_fetch": t["ifmap"] if held else q["ifmap_bytes"],
            "filter_fetch": t["filter"]}


def combine(parts: list[dict]) -> memory.Steps:
    """The tiles' steps side by side for the memory model: step i is every tile's i-th
    step, as long as the critical (last to finish) tile's; what the tiles fetch into their
    own memories (``tile_fetches``) adds up and is one block of its own (each tile's
    residency is already decided: the shared model times the transfers and the overlap);
    outputs and SRAM bytes add."""
    n = max(len(q["compute"]) for q in parts)

    def padded(q, key):
        return np.concatenate([q[key], np.zeros(n - len(q[key]), np.int64)])

    total = {k: sum(padded(q, k) for q in parts)
             for k in ("ifmap_fetch", "filter_fetch", "ofmap_bytes", "sram_bytes")}
    critical = max(parts, key=lambda q: q["compute"].sum())

    def blocks(key):
        return np.where(total[key] > 0, np.arange(n), -1)

    return memory.Steps(compute=padded(critical, "compute"), ifmap=blocks("ifmap_fetch"),
                        ifmap_bytes=total["ifmap_fetch"], filter=blocks("filter_fetch"),
                        filter_bytes=total["filter_fetch"], ofmap=np.arange(n),
                        ofmap_bytes=total["ofmap_bytes"], sram_bytes=total["sram_bytes"])


def memory_steps(layer: ConvLayer, p: Params, mem, width: int | None = None) -> memory.Steps:
    """The fast model's steps for the memory model, in the controller's order
    (``unit_order``, chunks sized to one tile's wide memory) on tiles with memories
    ``mem`` each (``tile_buffers``): step i runs the i-th group of ``subsets`` work units
    on every tile. Its cycles are its taps plus its wait on the output bus (the last step
    adds the final drain): they sum to the tile's cycles. Per tile, blocks: the step's
    weights (the set of its partitions and output blocks, ``weight_blocks``: bytes = the
    set's weights, every tap; held = those no earlier step read); the input band of its
    last unit's output row (size: the input rows no earlier row of the tile read, every
    used column, all channels; a step that finds it gone fetches its own taps'
    activations); its outputs, written once. Each
    tile fetches its own copy of the weights and input rows it needs: distributing a
    layer over tiles costs DRAM bytes."""
    ctl = control(layer, p, width)
    order = unit_order(ctl, element_bytes(layer.dtype), wide_capacity(mem))
    return combine([tile_fetches(tile_memory(layer, ctl, p, order[lo:hi]), mem)
                    for lo, hi in tile_ranges(ctl.units, p.tiles) if hi > lo])


def compiled(layer: ConvLayer, arch, memo: Memo | None = None) -> tuple[int, stats.LayerStats]:
    """The output-block width the compiler keeps for ``layer`` on ``arch`` and the layer's
    stats at it: of ``block_widths``, the one of the least ``objective`` (``[group-tile]``;
    default the fewest cycles with the memory's stalls), the wider on a tie. For cycles,
    widths are timed in order of their ``cycles_floor``, and one whose floor is above the
    fewest cycles so far is not; for energy or energy-delay every width is priced.
    ``memo`` (the layer's) keeps each width's schedule and steps for later archs
    (``at_width``)."""
    p, mem = arch.params(Params), tile_buffers(arch)
    widths = block_widths(layer, p, mem)
    if len(widths) == 1:
        return widths[0], at_width(layer, arch, widths[0], memo)
    if p.objective != "cycles":
        score = stats.OBJECTIVES[p.objective]
        priced = [(width, at_width(layer, arch, width, memo)) for width in widths]
        return min(priced, key=lambda ws: (score(ws[1].cycles, ws[1].energy_pj), -ws[0]))
    floors = {width: cycles_floor(layer, p, mem, width) for width in widths}
    best = None
    for width in sorted(widths, key=floors.get):  # the wider first on equal floors
        if best is not None and floors[width] > best[1].cycles:
            break
        st = at_width(layer, arch, width, memo)
        if best is None or (st.cycles, -width) < (best[1].cycles, -best[0]):
            best = width, st
    return best


def cycles_floor(layer: ConvLayer, p: Params, mem, width: int) -> float:
    """Cycles of ``layer`` in output blocks of ``width`` outputs at the least, without the
    memory model: every tile runs its share of the work units in steps of ``subsets``, each
    tap at least the cycles the wide memory takes to deliver the smallest block's words;
    and where a block's weights exceed the wide memory's active half, every step fetches
    at least the smallest block's weights from DRAM."""
    ctl, elem = control(layer, p, width), element_bytes(layer.dtype)
    smallest = min(ctl.subset, ctl.last_block)
    words = -(-smallest * elem // WORD_BYTES)
    tap = max(1, -(-words // p.wide_words_per_cycle))
    steps = ctl.units / ctl.subsets
    compute = steps / p.tiles * ctl.taps * tap
    if ctl.subset * ctl.taps * elem <= wide_capacity(mem) or unlimited(
            mem.dram_bytes_per_cycle):
        return compute
    return max(compute, steps * smallest * ctl.taps * elem / mem.dram_bytes_per_cycle)


def at_width(layer: ConvLayer, arch, width: int, memo: Memo | None = None) -> stats.LayerStats:
    """The layer's stats in output blocks of ``width`` outputs. Its schedule, reads and
    memory steps follow the machine and the tiles' buffer sizes alone (not the DRAM, clock
    or energy: ``memory.residency``), and ``memo`` (the layer's) keeps them by those."""
    p, mem = arch.params(Params), tile_buffers(arch)
    memo = Memo() if memo is None else memo
    s, reads, st = memo.get(("widths", p, memory.residency(mem), width), lambda: (
        schedule(layer, p, wide_capacity(mem), width),
        narrow_reads(layer, control(layer, p, width)), memory_steps(layer, p, mem, width)))
    return layer_stats(layer, arch, s, reads, st, width)


def wide_capacity(mem) -> float:
    """Bytes of weights a tile's wide memory keeps (its active half when double buffered)."""
    return memory.usable_bytes(mem.filter_sram_kb, mem)


def layer_stats(layer: ConvLayer, arch, s: Schedule, reads: int,
                st: memory.Steps, width: int) -> stats.LayerStats:
    """LayerStats of a schedule with ``reads`` narrow-memory activation reads and memory
    steps ``st``, in output blocks of ``width`` outputs, priced by ``stats.price``. SRAM:
    those reads, the wide-memory words, one output per pixel and kernel. DRAM and stalls:
    the memory model (the parameter fetch from DRAM into the wide memory overlaps the steps
    when double buffered). Cycles, bytes, pJ; ``bus_slots`` counts the lanes over the
    stall-free cycles; ``narrowed_block_layers`` is 1 where the blocks are narrower than
    the MACs could hold."""
    p = arch.params(Params)
    elem = element_bytes(layer.dtype)
    counts = stats.Counts(
        NAME, macs=layer.macs, dense_macs=layer.macs, multipliers=p.macs * p.tiles,
        mapped_pe_cycles=s.mapped_mac_cycles, sram_ifmap_bytes=reads * elem,
        sram_filter_bytes=s.weight_words * WORD_BYTES,
        sram_ofmap_bytes=layer.N * layer.K * layer.P * layer.Q * elem,
        extra={"broadcasts": s.broadcasts, "bus_slots": s.cycles * p.bus_inputs * p.tiles,
               "weight_words": s.weight_words, "weight_stall_cycles": s.weight_stall_cycles,
               "drain_stall_cycles": s.drain_stall_cycles,
               "narrowed_block_layers": int(width < min(layer.Kg, p.macs))})
    return stats.price(layer, counts, st, arch)


def broadcast_conv(layer: ConvLayer, x: np.ndarray, w: np.ndarray, bias) -> np.ndarray:
    """Outputs by the tile's arithmetic: for each tap (c, r, s) in the MACs' order, every
    output adds weight x broadcast input (float32 products and sums; int8 products summed
    exactly in float64, int32 out); the activation unit adds the bias last. A partition of
    at least ``CHANNEL_LOOP`` outputs runs its output channels side by side: in vector
    registers, ``COLUMNS`` output columns at a time (``_channel_macs``), or in memory for
    rows narrower than that (``_channel_sums``); a narrower partition runs its output
    columns in the innermost loop (``_column_macs``). Each output's products are added in
    the same order whichever runs it, so the result does not depend on which."""
    integer = np.issubdtype(x.dtype, np.integer)
    acc = np.float64 if integer else np.float32  # int8 x int8 sums: exact below 2**53
    G, Cg, Kg, R, S = layer.groups, layer.Cg, layer.Kg, layer.R, layer.S
    steps, shape = (*layer.stride, *layer.dilation), (G, Kg, Cg, R, S)
    rows = layer.N * G * layer.P
    if Kg >= CHANNEL_LOOP and layer.Q >= COLUMNS:
        xg = _grouped(pad_input(x.astype(acc, copy=False), layer, wider=_wider(layer)), layer)
        blocks = kernel_blocks(w, acc, G, 2 * simd.width(acc))  # two registers wide
        out = np.empty(layer.output_shape, acc)
        in_parallel(_channel_macs, (xg, blocks, Kg, *steps, out), rows)
    elif Kg >= CHANNEL_LOOP:
        xg = _grouped(pad_input(x.astype(acc, copy=False), layer), layer)
        out = np.empty(layer.output_shape, acc)
        in_parallel(_channel_sums, (xg, laid_out(w, acc, shape, (0, 2, 3, 4, 1)), *steps, out),
                    rows)
    else:
        xg = _grouped(pad_input(x.astype(acc, copy=False), layer), layer)
        out = np.zeros((layer.N, G, Kg, layer.P, layer.Q), acc)
        in_parallel(_column_macs, (xg, laid_out(w, acc, shape, (0, 1, 2, 3, 4)), *steps, out),
                    layer.N * G * Kg)
    return engine.finish(out.reshape(layer.output_shape), bias, layer, integer)


def _grouped(xp: np.ndarray, layer: ConvLayer) -> np.ndarray:
    """The padded input N x C x Hp x Wp as N x G x Cg x Hp x Wp, contiguous."""
    return np.ascontiguousarray(xp).reshape(layer.N, layer.groups, layer.Cg, *xp.shape[2:])


def _wider(layer: ConvLayer) -> int:
    """Columns of zeros past the padded input that ``_channel_macs``' last block of
    ``COLUMNS`` output columns reads (its columns past Q are thrown away)."""
    columns = -(-layer.Q // COLUMNS) * COLUMNS
    reach = (columns - 1) * layer.stride[1] + (layer.S - 1) * layer.dilation[1] + 1
    return max(0, reach - (layer.W + layer.padding[2] + layer.padding[3]))


CHANNEL_LOOP = 8  # outputs per partition from which the channel loop is the faster one


@njit(cache=True, nogil=True)
def _channel_macs(xg, blocks, Kg, sh, sw, dh, dw, out, first, stop):  # pragma: no cover
    """out[n, g Kg + k, p, q] = the sum from 0 of w[g Kg + k, c, r, s] x window(c, r, s) for
    the output rows ``first <= (n G + g) P + p < stop``, taps in (c, r, s) order: each
    output's products are added one at a time in the order the MAC adds them (a product
    rounded, then the sum rounded: no fused multiply-add), so float32 sums match the
    emulator's bit for bit. The outputs of a partition share the broadcast input (the MACs
    of a subset), so they are taken side by side: ``COLUMNS`` output columns x a block of
    kernels in two vector registers (``blocks``: ``derived.kernel_blocks``, the width of
    two registers) keep their sums in registers over all the taps (``simd``). ``xg`` has
    the columns that the last block of columns reads past the output's (zeros), and the
    sums of those columns and of a last block's missing kernels are thrown away. A row's
    sums are kept pixel-major (``sums``), then written to the output's rows."""
    G, n_blocks, Cg, R, S, width = blocks.shape
    P, Q = out.shape[2:]
    sums = np.empty((-(-Q // COLUMNS) * COLUMNS, n_blocks * width), out.dtype)
    weights, flat = blocks.reshape(-1), sums.reshape(-1)
    lanes, row_sums = simd.lanes(flat), sums.shape[1]
    if 2 * lanes != width:
        raise ValueError("kernel blocks are not two vector registers wide")
    for task in range(first, stop):
        n, g, p = task // (G * P), task // P % G, task % P
        for b in range(n_blocks):  # the block's weights, one run, are read again from the
            for q in range(0, Q, COLUMNS):  # cache for each block of columns
                a0, a1 = simd.zeros(flat), simd.zeros(flat)  # column q's sums
                b0, b1 = simd.zeros(flat), simd.zeros(flat)  # q + 1
                c0, c1 = simd.zeros(flat), simd.zeros(flat)  # q + 2
                d0, d1 = simd.zeros(flat), simd.zeros(flat)  # q + 3
                at = (g * n_blocks + b) * Cg * R * S * width
                live = min(COLUMNS, Q - q)  # columns of the block inside the output
                for c in range(Cg):
                    plane = xg[n, g, c]
                    for r in range(R):
                        row = plane[p * sh + r * dh]
                        for s in range(S):
                            x0, x1 = row[q * sw + s * dw], row[(q + 1) * sw + s * dw]
                            x2, x3 = row[(q + 2) * sw + s * dw], row[(q + 3) * sw + s * dw]
                            simd.madd(a0, weights, at, x0)
                            simd.madd(a1, weights, at + lanes, x0)
                            if live > 1:
                                simd.madd(b0, weights, at, x1)
                                simd.madd(b1, weights, at + lanes, x1)
                            if live > 2:
                                simd.madd(c0, weights, at, x2)
                                simd.madd(c1, weights, at + lanes, x2)
                            if live > 3:
                                simd.madd(d0, weights, at, x3)
                                simd.madd(d1, weights, at + lanes, x3)
                            at += width
                at = q * row_sums + b * width
                simd.store(a0, flat, at)
                simd.store(a1, flat, at + lanes)
                simd.store(b0, flat, at + row_sums)
                simd.store(b1, flat, at + row_sums + lanes)
                simd.store(c0, flat, at + 2 * row_sums)
                simd.store(c1, flat, at + 2 * row_sums + lanes)
                simd.store(d0, flat, at + 3 * row_sums)
                simd.store(d1, flat, at + 3 * row_sums + lanes)
        engine.store_row(sums[:Q, :Kg], out, n, g * Kg, p)


COLUMNS = 4  # output columns whose sums stay in registers together (two registers each)


@njit(cache=True, nogil=True)
def _channel_sums(xg, wg, sh, sw, dh, dw, out, first, stop):  # pragma: no cover
    """out[n, g Kg + k, p, q] = the sum from 0 of wg[g, c, r, s, k] x window(c, r, s) for the
    output rows ``first <= (n G + g) P + p < stop``, taps in (c, r, s) order: each output's
    products are added one at a time in the order the MAC adds them (a product rounded, then
    the sum rounded: no fused multiply-add), so float32 sums match the emulator's bit for
    bit. For output rows narrower than ``COLUMNS`` (a fully connected layer's one pixel),
    whose few sums ``_channel_macs`` would take a whole block of columns to hold: the
    innermost loop runs over the partition's outputs, which share the broadcast input, the
    sums kept in memory (``sums``, pixel-major), two output columns together sharing each
    weight vector's loads (a row of odd width sums its last column's products a second time
    into ``spare``, which is thrown away). Reading each weight once per column, it runs at
    the speed memory streams them (VGG-16's fc6: 411 MB)."""
    G, Cg, R, S, Kg = wg.shape
    P, Q = out.shape[2:]
    sums = np.empty((Q, Kg), out.dtype)
    spare = np.zeros(Kg, out.dtype)
    for task in range(first, stop):
        n, g, p = task // (G * P), task // P % G, task % P
        sums[:] = 0
        for q in range(0, Q, 2):
            pair = q + 1 < Q
            acc0 = sums[q]
            acc1 = sums[q + 1] if pair else spare
            for c in range(Cg):
                plane = xg[n, g, c]
                for r in range(R):
                    row = plane[p * sh + r * dh]
                    for s in range(S):
                        v0 = row[q * sw + s * dw]
                        v1 = row[(q + 1) * sw + s * dw] if pair else v0
                        weights = wg[g, c, r, s]
                        for k in range(Kg):
                            weight = weights[k]
                            acc0[k] += weight * v0
                            acc1[k] += weight * v1
        engine.store_row(sums, out, n, g * Kg, p)


@njit(cache=True, nogil=True)
def _column_macs(xg, wg, sh, sw, dh, dw, out, first, stop):  # pragma: no cover
    """out[n, g, k] += wg[g, k, c, r, s] x window(c, r, s) for the output maps
    ``first <= (n G + g) Kg + k < stop``, taps in (c, r, s) order, each output's products
    added one at a time as in ``_channel_macs``; the innermost loop runs over an output
    row's columns (for partitions too narrow to fill a vector with their outputs)."""
    _, G, Kg, P, Q = out.shape
    Cg, R, S = wg.shape[2:]
    for task in range(first, stop):
        n, g, k = task // (G * Kg), task // Kg % G, task % Kg
        acc = out[n, g, k]
        for c in range(Cg):
            plane = xg[n, g, c]
            for r in range(R):
                for s in range(S):
                    weight = wg[g, k, c, r, s]
                    for p in range(P):
                        row = plane[p * sh + r * dh]
                        for q in range(Q):
                            acc[p, q] += weight * row[q * sw + s * dw]


@register
class GroupTile(Machine):
    name = NAME
    Params = Params
    reads_masks = False  # the costs follow the shapes alone
    compute_on_every_core = True  # its MAC kernels run rows on the thread pool

    def supports(self, layer: ConvLayer, arch) -> str | None:
        return None

    def compute(self, layer, x, w, bias, arch):
        """Outputs by the broadcast arithmetic (float32, or exact int32 for int8)."""
        return broadcast_conv(layer, x, w, bias)

    def estimate(self, layer, x_mask, w_mask, arch):
        """The costs; the tile multiplies zeros like any value, so they follow the shapes."""
        return compiled(layer, arch)[1]

    def estimate_memo(self, layer, x_mask, w_mask, arch, memo: Memo):
        """``estimate``, each block width's schedule and steps kept in ``memo`` (``at_width``)."""
        return compiled(layer, arch, memo)[1]

    def mapping(self, layer, arch) -> tuple[int]:
        """The output-block width the compiler chose (``compiled``)."""
        return (compiled(layer, arch)[0],)

    def emulate(self, layer, x, w, bias, arch):
        """Outputs and costs from the cycle-by-cycle tiles (``npusim.emulate.group_tile``),
        in the output blocks the compiler chose."""
        from ..emulate.group_tile import emulate

        return emulate(layer, x, w, bias, arch, *self.mapping(layer, arch))

    def hardware(self, arch, dtype):
        """Per tile: its MAC cells with a weight register, a sum register and a shift
        register (624: one step's sums, drained while the next step runs) each, the input
        bus lanes, and the output bus that drains output_bus_values sum registers per cycle
        (a multiplexer of macs / output_bus_values inputs per bit); each tile's narrow and
        wide memory, and the ofmap SRAM."""
        from ..area import Hardware, element_bits

        p, bits, mem = arch.params(Params), element_bits(dtype), tile_buffers(arch)
        cells = p.macs * p.tiles
        drain = max(1, -(-p.macs // p.output_bus_values)) - 1
        # the tiles' memories replace the arch's ifmap and filter SRAMs; where not sized
        # (narrow_kb, wide_kb = 0) they are those SRAMs split, named so (a hybrid counts the
        # shared ones once)
        sram = {"ifmap" if not p.narrow_kb else "narrow memories": mem.ifmap_sram_kb * p.tiles,
                "filter" if not p.wide_kb else "wide memories": mem.filter_sram_kb * p.tiles,
                "ofmap": mem.ofmap_sram_kb}
        return Hardware(macs=cells,
                        register_bits=cells * (bits + 2 * 32) + p.tiles * p.bus_inputs * bits,
                        sram_kib=sram, mux_bits=p.tiles * p.output_bus_values * 32 * drain)

    def diagnostics(self, total: stats.LayerStats) -> list[tuple[str, str]]:
        """Bus and MAC utilisation, the cycles the tiles wait on weights (the wide memory's
        words per cycle) and on draining outputs, and the layers the compiler ran in
        narrower output blocks (``compiled``)."""
        e = total.extra
        narrowed = int(e.get("narrowed_block_layers", 0))
        return [("bus utilisation", f"{percent(e.get('broadcasts', 0), e.get('bus_slots', 0))} "
                                    "of the input bus's lane slots (stall-free cycles)"),
                ("MAC utilisation", f"{percent(total.macs, total.pe_cycles)} of MAC cycles"),
                ("weight stalls", f"{int(e.get('weight_stall_cycles', 0)):,} cycles"),
                ("drain stalls", f"{int(e.get('drain_stall_cycles', 0)):,} cycles"),
                ("narrowed output blocks",
                 f"{narrowed:,} layer{'s' if narrowed != 1 else ''}: fewer outputs a block "
                 "than MACs, so that its weights stay in the wide memory")]
