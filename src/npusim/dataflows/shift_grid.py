"""Geometry of the dilated-grid machine (seed 002): serpentine transfer patterns, the
hierarchical shifter, and how a filter is cut into passes that fit the storage grids.

Coordinates follow the patent's Figs. 8-11 where they are printed 1-based as
(x, y) = (horizontal, vertical); inside the code taps and grid units are 0-based
(row, col) = (y, x). One step of the machine moves the coefficient window by one
unit vector and the pixel window by ``rate`` times that vector (Eqs. 8-11), so
after every step ``Dx - 1 = R (Cx - 1)`` and ``Dy - 1 = R (Cy - 1)``.

Direction codes (the patent names only code 0 = right, at step 2 of Fig. 10):
0 right, 1 down, 2 left, 3 up.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError

# direction code -> (d_row, d_col) of the window's move
DIRECTIONS = {0: (0, 1), 1: (1, 0), 2: (0, -1), 3: (-1, 0)}
NAMES = {0: "right", 1: "down", 2: "left", 3: "up"}


def serpentine(rows: int, cols: int) -> list[tuple[int, int]]:
    """Taps (row, col) of a rows x cols filter in one-stroke order: left to right on even
    rows, right to left on odd rows, moving down one row between them."""
    order = []
    for r in range(rows):
        cs = range(cols) if r % 2 == 0 else range(cols - 1, -1, -1)
        order += [(r, c) for c in cs]
    return order


def moves(rows: int, cols: int) -> list[int]:
    """Direction code of each step after the first (rows * cols - 1 moves)."""
    taps = serpentine(rows, cols)
    back = {v: k for k, v in DIRECTIONS.items()}
    return [back[(b[0] - a[0], b[1] - a[1])] for a, b in zip(taps[:-1], taps[1:], strict=True)]


@dataclass(frozen=True)
class Transfer:
    """One row of the Fig. 10 table: step m, pattern code P, the shift (Ix, Iy) or (Jx, Jy)
    and the position reached (Dx, Dy) or (Cx, Cy), all 1-based (x horizontal)."""

    m: int
    code: int | None
    shift: tuple[int, int]
    position: tuple[int, int]

    @property
    def direction(self) -> str:
        return NAMES[self.code] if self.code is not None else "start"


def transfer_table(rows: int, cols: int, rate: int) -> tuple[list[Transfer], list[Transfer]]:
    """(pixel transfers, coefficient transfers) for a rows x cols filter at dilation ``rate``:
    Eq. 8/10 move the pixel window by ``rate`` per step, Eq. 9/11 the coefficient window by 1;
    both start at (1, 1) without a shift (m = 1)."""
    pixels = [Transfer(1, None, (0, 0), (1, 1))]
    coefs = [Transfer(1, None, (0, 0), (1, 1))]
    for m, code in enumerate(moves(rows, cols), start=2):
        dy, dx = DIRECTIONS[code]
        (px, py), (cx, cy) = pixels[-1].position, coefs[-1].position
        pixels.append(Transfer(m, code, (rate * dx, rate * dy), (px + rate * dx, py + rate * dy)))
        coefs.append(Transfer(m, code, (dx, dy), (cx + dx, cy + dy)))
    return pixels, coefs


def level_shifts(distance: int, levels: int) -> list[int]:
    """The hierarchical shifter's active levels for a shift of ``distance`` (Eqs. 12-13):
    level k shifts by 2**k or passes through, so distance = sum of the active 2**k."""
    if not 1 <= distance <= 2 ** levels - 1:
        raise ConfigError(f"dilated-grid.levels={levels}: a shift of {distance} needs "
                          f"1 <= shift <= {2 ** levels - 1} (= 2**levels - 1)")
    return [1 << k for k in range(levels) if distance >> k & 1]


def shift_distances(shifter: str, levels: int) -> list[int]:
    """Shift distances one multiplexer input serves: the flat grid of Fig. 6 has links at
    distance 1 and 2; the hierarchical shifter of Fig. 16 one level per power of two."""
    return [1, 2] if shifter == "flat" else [1 << k for k in range(levels)]


def max_rate(shifter: str, levels: int) -> int:
    """Largest pixel step one cycle can make: 2 on the flat grid, 2**levels - 1 with levels."""
    return 2 if shifter == "flat" else 2 ** levels - 1


def shifter_links(rows: int, cols: int, shifter: str, levels: int) -> int:
    """Wires of the pixel grid's shift network (a cost proxy, links): every unit has one
    input per direction (4) and per distance it can shift; H levels cost H x the links of
    one level."""
    return rows * cols * 4 * len(shift_distances(shifter, levels))


def longest_run(taps: int, rate: int, grid: int, tile: int, coef: int, reach: int) -> int:
    """Taps of the longest run one pixel set holds on an axis: a run of t taps needs
    ``rate (t - 1) + tile`` grid units and t coefficient units; a rate beyond the
    shifter's ``reach`` cannot be stepped, so each tap is its own run."""
    if rate > reach:
        return 1
    return max(1, min(taps, coef, (grid - tile) // rate + 1))


def axis_chunks(taps: int, rate: int, grid: int, tile: int, coef: int, reach: int,
                longest: int | None = None) -> list[tuple[int, int]]:
    """Cut one filter axis of ``taps`` taps into runs (first tap, count) of the most taps
    one pixel set holds (``longest_run``), or of ``longest`` taps where that is fewer."""
    size = longest_run(taps, rate, grid, tile, coef, reach)
    size = size if longest is None else max(1, min(size, longest))
    return [(start, min(size, taps - start)) for start in range(0, taps, size)]


def run_lengths(taps: int, rate: int, grid: int, tile: int, coef: int,
                reach: int) -> tuple[int, ...]:
    """Run lengths a planner weighs on one axis, longest first: the longest that fits and,
    on a dilated axis (``rate`` > 1), each shorter one that cuts the taps into runs as even
    as their number allows (``ceil(taps / runs)``). A longer run steps more taps per pixel
    set but its set spans ``rate`` more rows or columns per tap, most of them never
    multiplied; at rate 1 the sets of consecutive taps overlap and the longest run loads
    the fewest pixels."""
    most = longest_run(taps, rate, grid, tile, coef, reach)
    if rate == 1:
        return (most,)
    even = {-(-taps // runs) for runs in range(1, taps + 1)}
    return (most, *sorted((n for n in even if n < most), reverse=True))
