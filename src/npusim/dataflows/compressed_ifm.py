"""The compressed feature-map format the input-reuse device streams (seed 000, Fig. 10, claim 7).

The patent compresses the IFM "per region unit, e.g. 4x4" into "pixels having
non-zero values" and streams it; it leaves the encoding open. npusim's format:

- the N x C x H x W map is cut, per image and channel, into blocks of ``bh x bw``
  pixels (the region shape); edge blocks are padded with zeros to full size;
- the stream holds the blocks in order (n, c, block row, block column);
- each block is a bitmap of ``bh*bw`` bits (bit ``i`` = pixel ``(i // bw, i % bw)``,
  1 if non-zero), packed little-endian into ``ceil(bh*bw / 8)`` bytes, followed by
  its non-zero values in bit order, ``elem`` bytes each (1 int8, 4 float32).

So a map costs ``blocks * ceil(bh*bw/8) + nnz * elem`` bytes exactly, an all-zero
block costs only its bitmap, and the position of every value is recovered from the
bitmap (no coordinates stored). The dispatcher decodes one block per region.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def blocked(mask: np.ndarray, block: tuple[int, int]) -> np.ndarray:
    """``mask`` (N x C x H x W) zero-padded and viewed as N x C x Th x bh x Tw x bw."""
    n, c, h, w = mask.shape
    bh, bw = block
    th, tw = math.ceil(h / bh), math.ceil(w / bw)
    if (th * bh, tw * bw) != (h, w):
        full = np.zeros((n, c, th * bh, tw * bw), mask.dtype)
        full[:, :, :h, :w] = mask
        mask = full
    return mask.reshape(n, c, th, bh, tw, bw)


def bitmap_bytes(block: tuple[int, int]) -> int:
    """Bytes of one block's bitmap."""
    return math.ceil(block[0] * block[1] / 8)


def stream_bytes(shape: tuple[int, int, int, int], nonzeros: int, block: tuple[int, int],
                 elem: int) -> int:
    """Exact bytes of the compressed stream of an N x C x H x W map with ``nonzeros``
    non-zero values: every block's bitmap plus the values."""
    n, c, h, w = shape
    blocks = n * c * math.ceil(h / block[0]) * math.ceil(w / block[1])
    return blocks * bitmap_bytes(block) + nonzeros * elem


@dataclass(frozen=True)
class Compressed:
    """An encoded map: packed bitmaps (N x C x Th x Tw x bytes), the non-zero values, shape."""

    bitmaps: np.ndarray
    values: np.ndarray
    offsets: np.ndarray
    shape: tuple[int, int, int, int]
    block: tuple[int, int]

    @property
    def nbytes(self) -> int:
        """Bytes of the stream: bitmaps plus values."""
        return self.bitmaps.size + self.values.size * self.values.itemsize

    def block_at(self, n: int, c: int, i: int, j: int) -> np.ndarray:
        """Decode one block (bh x bw) from its bitmap and its run of values."""
        bits = np.unpackbits(self.bitmaps[n, c, i, j], bitorder="little")
        bits = bits[: self.block[0] * self.block[1]].astype(bool)
        out = np.zeros(bits.size, self.values.dtype)
        start = self.offsets[n, c, i, j]
        out[bits] = self.values[start:start + int(bits.sum())]
        return out.reshape(self.block)


def encode(x: np.ndarray, block: tuple[int, int]) -> Compressed:
    """Encode ``x`` (N x C x H x W) in blocks of ``block`` pixels."""
    b = blocked(x, block).transpose(0, 1, 2, 4, 3, 5)  # N C Th Tw bh bw
    flat = b.reshape(*b.shape[:4], -1)
    nz = flat != 0
    bitmaps = np.packbits(nz, axis=-1, bitorder="little")
    counts = nz.sum(axis=-1)
    offsets = (np.cumsum(counts.ravel()) - counts.ravel()).reshape(counts.shape)
    return Compressed(bitmaps, flat[nz], offsets, tuple(x.shape), tuple(block))


def decode(c: Compressed) -> np.ndarray:
    """The dense map back from its encoding."""
    n, ch, h, w = c.shape
    th, tw = c.bitmaps.shape[2:4]
    out = np.zeros((n, ch, th, tw, c.block[0] * c.block[1]), c.values.dtype)
    bits = np.unpackbits(c.bitmaps, axis=-1, bitorder="little")[..., : out.shape[-1]]
    out[bits.astype(bool)] = c.values
    out = out.reshape(n, ch, th, tw, *c.block).transpose(0, 1, 2, 4, 3, 5)
    return out.reshape(n, ch, th * c.block[0], tw * c.block[1])[:, :, :h, :w]
