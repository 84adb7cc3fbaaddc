"""Masks kept from a model's first point and priced on later arch points give exactly the stats
of a fresh ``simulate`` of each point."""

import dataclasses

import pytest

from npusim.arch import load_arch
from npusim.dse import reuse
from npusim.dse.runner import prepared
from npusim.simulate import simulate


@pytest.mark.parametrize(("preset", "changes", "dtype"), [
    ("sparse-pairs-32x32", [{}, {"memory": {"ifmap_sram_kb": 8}}, {"clock_mhz": 500.0}], "int8"),
    ("input-reuse-1024", [{}, {"vector": {"lanes": 4}}, {"energy": {"sram_byte_pj": 9.0}}],
     "float32"),
])
def test_reused_masks_price_like_a_fresh_simulate(preset, changes, dtype):
    _, graph, x = prepared("mtcnn-pnet", 0.5, 1, 0)
    base = load_arch(preset)
    reuse._masks.clear()
    for change in changes:
        arch = dataclasses.replace(base, **{k: (dataclasses.replace(getattr(base, k), **v)
                                                if isinstance(v, dict) else v)
                                            for k, v in change.items()})
        got = reuse.estimate(("mtcnn-pnet", 0.5, 1, 0), graph, x, arch, dtype)
        want = simulate(graph, x, arch, mode="estimate", dtype=dtype)
        assert got.layers == want.layers
        assert got.total == want.total
    assert len(reuse._masks) == 1  # one recording, reused by the later points
