"""SCALE-Sim 3.0.0's buffer discipline (``[memory] model = "scalesim"``), for the systolic array.

npusim's own memory model (``npusim.memory``) times blocks of data; SCALE-Sim times the
address trace of the array cycle by cycle. This module rebuilds that trace from the
layer (its operand matrices, the order its read buffers prefetch in and the demand
matrices the array issues, one row per stall-free cycle) and replays it through
SCALE-Sim's buffers, as its code (``memory/read_buffer.py``, ``write_buffer.py``,
``double_buffered_scratchpad_mem.py``) runs them:

- **Read buffers** (ifmap, filter): the prefetch order is cut into 100 sets of
  ``ceil(words / 100)`` addresses; half the buffer is active (a window of sets), the
  other half is the next prefetch. The buffer is full before cycle 0. A demanded address
  outside the window slides the window by the prefetch's sets; that prefetch is ready
  ``ceil(prefetch words / B) + 1`` cycles after the previous one, and if it is late
  SCALE-Sim adds the lateness twice (``offset += p`` in ``service_reads``).
- **Write buffer** (ofmap): writes fill lines of ``B`` words; when the free space drops
  below the active half, a drain of up to half a buffer of lines starts, one line a
  cycle; a write finding the buffer full while a drain runs waits for its end.
- **Stalls**: a demand row waits for its slowest operand; the next row starts that many
  cycles later. Total cycles = rows - 1 + stalls (SCALE-Sim's ``Total Cycles``).

Only the output-stationary array is rebuilt here (``stationary = "os"``); SCALE-Sim's
topology layers only (batch 1, one group, no dilation, no top/left padding: its
operand matrices have none). Words are 1 byte (SCALE-Sim fixes it), ``B`` is
``dram_bytes_per_cycle`` on each operand's own interface. The replay runs row by row
in Python, about as fast as SCALE-Sim's own: for checking npusim against SCALE-Sim,
not for whole networks. Units: cycles, words (= bytes).
"""

from __future__ import annotations

import math

import numpy as np

from .errors import ConfigError
from .memory import Timing, unlimited

SETS = 100          # read_buffer: a buffer is cut into 100 sets of addresses
ACTIVE = 0.5        # single_layer_sim: half of each SRAM active, half prefetching/draining


def check_layer(layer, stationary: str) -> None:
    """A ConfigError unless SCALE-Sim can describe ``layer`` on this array."""
    pad = layer.padding
    problems = [why for bad, why in (
        (layer.dtype != "int8", f"dtype {layer.dtype}: SCALE-Sim counts words, which its "
         "replay here takes as bytes (int8); float32 runs on the default memory model"),
        (layer.N != 1, f"batch {layer.N}"), (layer.groups != 1, f"groups = {layer.groups}"),
        (layer.dilation != (1, 1), f"dilation {layer.dilation}"),
        (pad[0] or pad[2], f"padding {pad} on the top or left"),
        (pad[1] >= layer.stride[0] or pad[3] >= layer.stride[1],
         f"padding {pad}: SCALE-Sim's overhang is less than a stride")) if bad]
    if problems:
        raise ConfigError(f"[memory] model = \"scalesim\": layer {layer.name!r} cannot be "
                          f"replayed as SCALE-Sim runs it: {', '.join(problems)}")


def operand_matrices(layer):
    """SCALE-Sim's address matrices: ifmap (P x K, -1 where the window overhangs the
    input), filter (K x F), ofmap (P x F); K ordered (filter row, filter col, channel)."""
    H, W, C, R, S = layer.H, layer.W, layer.C, layer.R, layer.S
    sh, sw = layer.stride
    p, k = np.meshgrid(np.arange(layer.P * layer.Q), np.arange(R * S * C), indexing="ij")
    y0, x0 = (p // layer.Q) * sh, (p % layer.Q) * sw
    r, rest = np.divmod(k, S * C)
    s, c = np.divmod(rest, C)
    inside = (y0 + r < H) & (x0 + s < W)
    ifmap = np.where(inside, ((y0 + r) * W + (x0 + s)) * C + c, -1)
    filt = np.arange(R * S * C)[:, None] + np.arange(layer.K)[None, :] * (R * S * C)
    ofmap = np.arange(layer.P * layer.Q)[:, None] * layer.K + np.arange(layer.K)[None, :]
    return ifmap, filt, ofmap


def _tiles(matrix: np.ndarray, size: int) -> list[np.ndarray]:
    """Column tiles of ``size`` (the last padded with -1)."""
    n = matrix.shape[1]
    out = []
    for start in range(0, n, size):
        tile = np.full((matrix.shape[0], size), -1, np.int64)
        tile[:, :min(size, n - start)] = matrix[:, start:start + size]
        out.append(tile)
    return out


def _diagonal_order(matrix: np.ndarray) -> np.ndarray:
    """Elements in anti-diagonal order, each diagonal from its bottom row up (SCALE-Sim's
    prefetch roll-out for skewed demand)."""
    rows, cols = matrix.shape
    i, j = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    order = np.lexsort((-i.ravel(), (i + j).ravel()))
    return matrix.ravel()[order]


def _skew(matrix: np.ndarray) -> np.ndarray:
    """Column c delayed by c rows (rows + cols - 1 rows, -1 elsewhere)."""
    rows, cols = matrix.shape
    out = np.full((rows + cols - 1, cols), -1, np.int64)
    for c in range(cols):
        out[c:c + rows, c] = matrix[:, c]
    return out


def os_trace(layer, rows: int, cols: int):
    """(ifmap prefetch order, filter prefetch order, ifmap, filter, ofmap demand rows) of
    the output-stationary array: pixels on rows, filters on columns, K streamed."""
    ifmap, filt, ofmap = operand_matrices(layer)
    T = ifmap.shape[1]
    pixel_tiles = _tiles(ifmap.T, rows)           # T x rows each
    filter_tiles = _tiles(filt, cols)             # T x cols each
    ifmap_fetch = _diagonal_order(np.concatenate(pixel_tiles))
    filter_fetch = _diagonal_order(np.concatenate(filter_tiles))
    gap_i, gap_f = np.full((cols - 1, rows), -1), np.full((rows - 1, cols), -1)
    gap_o = np.full((T - 1, cols), -1)
    demands = ([], [], [])
    for fc, ftile in enumerate(filter_tiles):
        for fr, ptile in enumerate(pixel_tiles):
            demands[0].append(_skew(np.concatenate([ptile, gap_i])))
            demands[1].append(_skew(np.concatenate([ftile, gap_f])))
            out = np.full((rows, cols), -1, np.int64)
            block = ofmap[fr * rows:(fr + 1) * rows, fc * cols:(fc + 1) * cols]
            out[:block.shape[0], :block.shape[1]] = block
            demands[2].append(_skew(np.concatenate([gap_o, out[::-1]])))
    return (ifmap_fetch, filter_fetch, *(np.concatenate(d) for d in demands))


def _pad(block: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """``block`` in the top-left of a rows x cols matrix of -1 (no request)."""
    out = np.full((rows, cols), -1, np.int64)
    out[:block.shape[0], :block.shape[1]] = block
    return out


def _gap(rows: int, cols: int) -> np.ndarray:
    """Rows of no request."""
    return np.full((rows, cols), -1, np.int64)


def ws_trace(layer, rows: int, cols: int):
    """The weight-stationary array's trace: reduction (K) on rows, filters on columns,
    the P pixels streamed; the filter tile enters bottom row first."""
    ifmap, filt, ofmap = operand_matrices(layer)
    T, K = ifmap.shape
    term_tiles = _tiles(ifmap, rows)              # T x rows each
    ifmap_fetch = _diagonal_order(np.concatenate(term_tiles))
    filter_fetch = np.concatenate(_tiles(filt, cols)).ravel()
    demands = ([], [], [])
    for fc in range(0, filt.shape[1], cols):
        for fr, tile in zip(range(0, K, rows), term_tiles, strict=True):
            demands[0].append(_skew(np.concatenate([_gap(rows, rows), tile,
                                                    _gap(cols - 1, rows)])))
            held = _pad(filt[fr:fr + rows, fc:fc + cols], rows, cols)[::-1]
            demands[1].append(np.concatenate([held, _gap(rows + cols + T - 2, cols)]))
            out = _pad(ofmap[:, fc:fc + cols], T, cols)
            demands[2].append(_skew(np.concatenate([_gap(2 * rows - 1, cols), out])))
    return (ifmap_fetch, filter_fetch, *(np.concatenate(d) for d in demands))


def is_trace(layer, rows: int, cols: int):
    """The input-stationary array's trace: reduction (K) on rows, pixels on columns, the
    filters streamed; the ifmap tile enters bottom row first."""
    ifmap, filt, ofmap = operand_matrices(layer)
    P, K = ifmap.shape
    T = filt.shape[1]
    terms = ifmap.T                                # K x P
    ifmap_fetch = np.concatenate(_tiles(terms, cols)).ravel()
    filter_tiles = [_pad(filt[k:k + rows].T, T, rows) for k in range(0, K, rows)]
    filter_fetch = _diagonal_order(np.concatenate(filter_tiles))
    demands = ([], [], [])
    for pc in range(0, P, cols):
        for fr, tile in zip(range(0, K, rows), filter_tiles, strict=True):
            held = _pad(terms[fr:fr + rows, pc:pc + cols], rows, cols)[::-1]
            demands[0].append(np.concatenate([held, _gap(rows + cols + T - 2, cols)]))
            demands[1].append(_skew(np.concatenate([_gap(rows, rows), tile,
                                                    _gap(cols - 1, rows)])))
            out = _pad(ofmap[pc:pc + cols].T, T, cols)
            demands[2].append(_skew(np.concatenate([_gap(2 * rows - 1, cols), out])))
    return (ifmap_fetch, filter_fetch, *(np.concatenate(d) for d in demands))


TRACES = {"os": os_trace, "ws": ws_trace, "is": is_trace}


class ReadBuffer:
    """An ifmap or filter SRAM as SCALE-Sim's read buffer: a ring of address sets with an
    active window, prefetched one after another at ``bandwidth`` words a cycle."""

    def __init__(self, fetch_order: np.ndarray, words: int, bandwidth: float):
        valid = fetch_order[fetch_order != -1]
        per_set = math.ceil(words / SETS)
        active = math.ceil(words * ACTIVE)
        prefetch = words - active
        self.sets = [set(valid[j:j + per_set].tolist()) for j in range(0, len(valid), per_set)]
        if len(valid) % per_set == 0:
            self.sets.append(set())  # SCALE-Sim always closes with the open (here empty) set
        self.window = min(len(self.sets), math.ceil(active / per_set))
        self.slide = min(len(self.sets) - self.window, math.ceil(prefetch / per_set))
        self.lines = math.ceil(prefetch / bandwidth)  # DRAM cycles per prefetch
        self.start, self.ready, self.prefetches = 0, -1, 0
        self.words_fetched = sum(len(self.sets[j]) for j in range(self.window))
        self._active = self._union()

    def _union(self) -> set:
        n = len(self.sets)
        return set().union(*(self.sets[(self.start + j) % n] for j in range(self.window)))

    def row(self, addresses, cycle: int) -> int:
        """Stall of one demand row issued at ``cycle`` (negative when a prefetch was early)."""
        offset = 1
        for address in addresses:
            if address == -1:
                continue
            while address not in self._active:
                n = len(self.sets)
                self.words_fetched += sum(len(self.sets[(self.start + self.window + j) % n])
                                          for j in range(self.slide))
                self.start = (self.start + self.slide) % n
                self._active = self._union()
                self.ready += self.lines + 1
                self.prefetches += 1
                late = self.ready - (cycle + offset)
                offset += late + max(late, 0)  # SCALE-Sim adds a late prefetch twice
        return offset - 1


class WriteBuffer:
    """The ofmap SRAM as SCALE-Sim's write buffer: lines of ``bandwidth`` words, drained
    half a buffer at a time, one line a cycle."""

    def __init__(self, words: int, bandwidth: int):
        self.active = math.ceil(words * ACTIVE)
        self.drain_lines = math.ceil((words - self.active) / bandwidth)
        self.bandwidth, self.free, self.drain_end = bandwidth, words, 0
        self.pending: list[int] = []  # undrained lines (their word counts)
        self.line = 0                 # words in the open line
        self.words_written = 0

    def _close_line(self) -> None:
        if self.line:
            self.pending.append(self.line)
            self.line = 0

    def _drain(self, cycle: int) -> None:
        """Start a drain at ``cycle``: its words are free at once (inner lines as full)."""
        self._close_line()
        n = min(self.drain_lines, len(self.pending))
        if n:
            self.free += (n - 1) * self.bandwidth + self.pending[n - 1]
        del self.pending[:n]
        self.drain_end = cycle + n - 1

    def row(self, addresses, cycle: int) -> int:
        """Stall of one demand row of writes issued at ``cycle``."""
        offset = 0
        for address in addresses:
            if address == -1:
                continue
            self.words_written += 1
            self.line += 1
            self.free -= 1
            if self.line == self.bandwidth:
                self._close_line()
            now = cycle + offset
            if now < self.drain_end:
                if self.free <= 0:
                    offset += self.drain_end - now
            elif self.free < self.active:
                self._drain(now)
        return offset


def replay(layer, rows: int, cols: int, stationary: str, memory) -> dict:
    """The layer on the array through SCALE-Sim's buffers: compute cycles (rows - 1),
    stall cycles per operand that set them, words each interface moved."""
    bandwidth = memory.dram_bytes_per_cycle
    if bandwidth != int(bandwidth):
        raise ConfigError(f"[memory] model = \"scalesim\": dram_bytes_per_cycle = {bandwidth}: "
                          "SCALE-Sim's Bandwidth is a whole number of words per cycle")
    bandwidth = int(bandwidth)
    ifmap_fetch, filter_fetch, ifmap, filt, ofmap = TRACES[stationary](layer, rows, cols)
    readers = (ReadBuffer(ifmap_fetch, memory.ifmap_sram_kb * 1024, bandwidth),
               ReadBuffer(filter_fetch, memory.filter_sram_kb * 1024, bandwidth))
    writer = WriteBuffer(memory.ofmap_sram_kb * 1024, bandwidth)
    stalls = [0, 0, 0]
    rows_i, rows_f, rows_o = ifmap.tolist(), filt.tolist(), ofmap.tolist()
    total_stall = 0
    for i in range(len(rows_i)):
        cycle = i + total_stall
        waits = (readers[0].row(rows_i[i], cycle), readers[1].row(rows_f[i], cycle),
                 writer.row(rows_o[i], cycle))
        worst = max(waits)
        if worst > 0:
            stalls[waits.index(worst)] += worst
            total_stall += worst
    return {"compute": len(rows_i) - 1, "stalls": stalls,
            "words": (readers[0].words_fetched, readers[1].words_fetched,
                      writer.words_written)}


def time_layer(layer, rows: int, cols: int, stationary: str, memory) -> Timing | None:
    """The layer's ``Timing`` through SCALE-Sim's buffers on a ``rows x cols`` array; None
    with unlimited bandwidth (SCALE-Sim's ``CALC`` mode: npusim's stall-free count is its
    count). Stalls are charged to the operand whose wait set each row's; DRAM bytes are
    the words the read buffers fetched (distinct addresses per set) and the writes."""
    if unlimited(memory.dram_bytes_per_cycle):
        return None
    check_layer(layer, stationary)
    out = replay(layer, rows, cols, stationary, memory)
    words, bandwidth = out["words"], memory.dram_bytes_per_cycle
    busy = {"compute": out["compute"], "dram": max(words) / bandwidth}
    return Timing(out["compute"], *out["stalls"], 0, max(busy, key=busy.get), *words)
