"""Stride/dilation phases: every tap in exactly one phase, at the right offset."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from strategies import conv_layers

from npusim.dataflows.phases import plan
from npusim.ir import ConvLayer


@given(conv_layers(), st.sampled_from([0, 16, 25, 36]), st.sampled_from([0, 4, 9]))
def test_each_tap_once_at_its_phase_offset(layer, accumulators, fan_in):
    (sh, sw), (dh, dw) = layer.stride, layer.dilation
    layout = plan(layer, (4, 4), accumulators, fan_in)
    part_rows, part_cols = layout.part_shape
    seen = []
    for part in layout.parts:
        a = np.array([layout.phases[i].a for i in part.phase])
        b = np.array([layout.phases[i].b for i in part.phase])
        assert (part.u * sh + a == part.r * dh).all()
        assert (part.v * sw + b == part.s * dw).all()
        assert len(set((part.r // part_rows).tolist())) == 1
        assert len(set((part.s // part_cols).tolist())) == 1
        rows, cols = part.pofm_shape((4, 4))
        assert not accumulators or rows * cols <= accumulators
        assert not fan_in or part.fan_in((4, 4)) <= fan_in
        seen += list(zip(part.r.tolist(), part.s.tolist(), strict=True))
    assert sorted(seen) == [(r, s) for r in range(layer.R) for s in range(layer.S)]
    for i, ph in enumerate(layout.phases):
        u = np.concatenate([p.u[p.of_phase(i)] for p in layout.parts])
        assert ph.rows == layer.P + u.max()


def test_stride_4_11x11_has_16_phases_and_one_6x6_partial_ofm():
    layout = plan(ConvLayer(1, 3, 227, 227, 96, 11, 11, stride=4), (4, 4), 36, 9)
    assert len(layout.phases) == 16 and len(layout.parts) == 1
    assert layout.parts[0].fan_in((4, 4)) == 9  # 121 taps, 9 distinct offsets (wires)
    assert layout.parts[0].pofm_shape((4, 4)) == (6, 6)


def test_1x1_stride_2_reads_one_phase():
    assert len(plan(ConvLayer(1, 8, 14, 14, 8, 1, 1, stride=2)).phases) == 1
