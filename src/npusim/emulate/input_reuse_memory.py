"""The input-reuse emulator's memory steps, from its own log of the jobs it ran.

Seed 000, Figs. 10-13: each operation unit's dispatcher reads its region from memory (the
compressed IFM stream, claim 7) and its processing units' kernels; the output units (on
a chain, the operation units) accumulate the partial OFMs in their second buffers and
the output handler writes the OFM back to memory. The machine logs every job it hands
off (``Ran``: the slice of the IFM its dispatcher read, its kernel set, the cycle it ended, its
weight cycles, the pixels of the partial OFMs it handed to the output side) and counts
what memory holds (``Stored``); ``memory_steps`` turns the two into the layer's
``memory.Steps`` by the rules below, which ``stats.price`` prices. ``dram_bytes`` is what
the memory model's residency rules (``memory.traffic``) move for such steps: the
emulator plans both loop orders' steps and runs the one that moves fewer.

A **step** is a row of ``U`` consecutive jobs of the run (the jobs the ``U`` operation
units work on side by side); it lasts from the last job end of the rows before to its
own last job end (the last also carries the transfers' tail). Per step:

- the input's item is a *slice*: a region's channels of the job's conv group, its part
  of the compressed stream (by the non-zeros the dispatcher read, and an even part of
  the bitmaps);
- the operand the loop order **holds** over consecutive jobs (the slice, region-major;
  the kernel set, kernel-major): its block is the item the row's last job uses (it
  stays for the next row); the row fetches the items it begins, or, beginning none, the
  one it continues again (the memory model decides whether it stayed);
- the operand it **cycles** (a new item every job: the kernel sets of a region,
  region-major; the slices of a conv group's regions, kernel-major): when a cycle has
  no more items than units, rows read whole cycles, held like the other operand (one
  block of all the kernel sets; one of a conv group's slices); else a row reads a
  window of items, one per job. With one cycle (every kernel set, region-major; every
  region's one slice, kernel-major on an ungrouped layer) the windows are parts of one
  block, the whole cycle (``Steps.*_size``), held whole when it fits the buffer and else
  streamed a window a row; a grouped layer's slices, kernel-major, a window per row,
  named by its first slice (a shorter last window from the same item is part of the
  window before);
- the **output**: the band of the row's last job (its image and region row), whose
  accumulators the second buffers hold while the row adds into it: 4 B for every OFM
  pixel the band's partial OFMs reach and every kernel run over it (region-major: all of
  them; kernel-major: the set's, one band per set); a row that must spill spills its own
  partial OFMs' pixels; the band is written back once, its rows' part of the compressed
  OFM (the OFM's bytes spread evenly over the jobs);
- the bytes at the SRAM ports: the layer's, spread by the rows' weight cycles.

Units: cycles, bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..memory import Steps, traffic
from .apportion import apportion

ACC_BYTES = 4  # one output accumulator: int32 or float32
ORDERS = ("region-major", "kernel-major")


@dataclass(frozen=True)
class Ran:
    """One job as the machine ran it (or, planning, would run it)."""

    ifmap: int  # the slice its dispatcher read: region (image, row, column) * G + conv group
    kernel_set: int  # its kernel set, in a region's job order (conv group, set)
    kernels: int  # kernels in that set
    band: int  # the region row (image, region row) its partial OFMs add into
    end: int = 0  # cycle it handed its partial OFMs off (0: planned)
    weight_cycles: int = 0  # its processing units' weight cycles, summed
    pofm_pixels: int = 0  # pixels of the partial OFMs it handed off


@dataclass(frozen=True)
class Stored:
    """What memory and the second buffers hold for a layer, as the emulator counted it."""

    slice_bytes: list[int]  # DRAM bytes of each slice of the compressed IFM (``Ran.ifmap``)
    set_bytes: list[int]  # DRAM bytes of each kernel set, compressed
    band_pixels: list[int]  # OFM pixels (one kernel) each region row's partial OFMs reach
    kernels: int  # kernels of the layer
    second_buffers: int  # bytes of output accumulators on the device
    ofm_bytes: int = 0  # the compressed OFM written back (0 when planning: no output yet)
    sram_bytes: int = 0  # bytes at the SRAM ports, whole layer
    groups: int = 1  # conv groups: the slices of a region


def slice_blocks(stream: int, values: int, slice_nonzeros, elem: int) -> list[int]:
    """Each slice's block of the compressed IFM stream as stored (``stream`` bytes, of
    which ``values`` are non-zero values): the stream cut in proportion to the non-zero
    values the dispatcher read of the slice plus an even part of the bitmaps."""
    bitmaps, slices = stream - values, len(slice_nonzeros)
    return apportion(stream, [slices * elem * int(nz) + bitmaps for nz in slice_nonzeros])


def held_blocks(rows: list[list[Ran]], item, nbytes: list[int]) -> list[tuple[int, int]]:
    """(block, DRAM bytes) per row of the operand the loop order holds (``item``: the
    job's item, ``nbytes`` each item's bytes): the item the row ends on; the items it
    begins, or the one it continues."""
    out, kept = [], None
    for row in rows:
        used = list(dict.fromkeys(item(job) for job in row))
        begun = [i for i in used if i != kept]
        out.append((used[-1], sum(nbytes[i] for i in begun) if begun else nbytes[used[-1]]))
        kept = used[-1]
    return out


def cycled_blocks(rows: list[list[Ran]], item, nbytes: list[int], units: int,
                  cycles: int = 1) -> list[tuple[int, int, int]]:
    """(block, DRAM bytes, the block's whole bytes) per row of the operand the loop order
    cycles, whose items fall into ``cycles`` cycles (item ``i`` in cycle ``i mod
    cycles``): whole cycles, held, when a row runs through a cycle's every item; else the
    window of the row's jobs' items: of one block, the whole operand, when there is one
    cycle; named by its first item when there is a cycle per conv group."""
    if len(nbytes) // cycles <= units:
        whole = [sum(nbytes[c::cycles]) for c in range(cycles)]
        return [(b, n, n) for b, n in held_blocks(rows, lambda job: item(job) % cycles, whole)]
    windows = [sum(nbytes[item(job)] for job in row) for row in rows]
    if cycles == 1:
        return [(0, n, sum(nbytes)) for n in windows]
    return [(item(row[0]), n, n) for row, n in zip(rows, windows, strict=True)]


def band_blocks(rows: list[list[Ran]], stored: Stored, order: str):
    """(band, its accumulators' bytes, the bytes the row spills if it must) per row: the
    band of the row's last job."""
    out, bands = [], len(stored.band_pixels)
    for row in rows:
        last = row[-1]
        if order == "region-major":  # every kernel runs over a band before the next band
            band, kernels = last.band, stored.kernels
        else:  # a kernel set runs over every band before the next set: a band per set
            band, kernels = last.kernel_set * bands + last.band, last.kernels
        out.append((band, ACC_BYTES * kernels * stored.band_pixels[last.band],
                    ACC_BYTES * sum(job.pofm_pixels for job in row)))
    return out


def written_bytes(rows: list[list[Ran]], bands: list[int], ofm_bytes: int) -> list[int]:
    """Per row, the bytes its band writes back after its last row: the compressed OFM
    spread evenly over the jobs, summed over the band's rows."""
    per_row = apportion(ofm_bytes, [len(row) for row in rows])
    per_band: dict = {}
    for band, nbytes in zip(bands, per_row, strict=True):
        per_band[band] = per_band.get(band, 0) + nbytes
    return [per_band[band] for band in bands]


def row_cycles(rows: list[list[Ran]], cycles: int) -> list[int]:
    """Per row, the cycles from the last job end of the rows before to its own; the last
    row also carries the tail to ``cycles``."""
    out, edge = [], 0
    for row in rows:
        end = max(edge, max(job.end for job in row))
        out.append(end - edge)
        edge = end
    out[-1] += cycles - edge
    return out


def memory_steps(log: list[Ran], stored: Stored, order: str, units: int, cycles: int = 0,
                 bus_bound: bool = False) -> Steps:
    """The layer's steps: the jobs of ``log`` (in run order) in rows of ``units``; ``cycles``
    the layer's stall-free cycles, ``bus_bound`` whether its interconnect sets them."""
    rows = [log[i:i + units] for i in range(0, len(log), units)]
    ifmap, kernel_set = (lambda job: job.ifmap), (lambda job: job.kernel_set)
    if order == "region-major":
        slices = [(b, n, n) for b, n in held_blocks(rows, ifmap, stored.slice_bytes)]
        sets = cycled_blocks(rows, kernel_set, stored.set_bytes, units)
    else:
        slices = cycled_blocks(rows, ifmap, stored.slice_bytes, units, stored.groups)
        sets = [(b, n, n) for b, n in held_blocks(rows, kernel_set, stored.set_bytes)]
    band, held, spill = zip(*band_blocks(rows, stored, order), strict=True)
    (ifmap_ids, ifmap_bytes, ifmap_size), (set_ids, set_bytes, set_size) = (
        zip(*slices, strict=True), zip(*sets, strict=True))
    return Steps(compute=row_cycles(rows, cycles), ifmap=list(ifmap_ids),
                 ifmap_bytes=list(ifmap_bytes), ifmap_size=list(ifmap_size),
                 filter=list(set_ids), filter_bytes=list(set_bytes),
                 filter_size=list(set_size), ofmap=list(band),
                 ofmap_bytes=written_bytes(rows, list(band), stored.ofm_bytes),
                 psum_bytes=list(spill), psum_size=list(held),
                 ofmap_capacity=stored.second_buffers,
                 sram_bytes=apportion(stored.sram_bytes,
                                      [sum(job.weight_cycles for job in row) for row in rows]),
                 compute_bound="bus" if bus_bound else "compute")


def dram_bytes(steps: Steps, memory) -> int:
    """DRAM bytes the memory model's residency rules move for ``steps`` on ``memory``."""
    return int(sum(int(v.sum()) for v in traffic(steps, memory).values()))
