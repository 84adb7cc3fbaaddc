"""Stride/dilation phases: every tap in exactly one phase, at the right offset."""

from hypothesis import given
from hypothesis import strategies as st
from strategies import conv_layers

from npusim.dataflows.phases import phases


@given(conv_layers(), st.integers(0, 3))
def test_each_tap_once_at_its_phase_offset(layer, part_rows):
    (sh, sw), (dh, dw) = layer.stride, layer.dilation
    seen = []
    for ph in phases(layer, part_rows):
        assert ph.rows == layer.P + max(p.u.max() for p in ph.parts)
        for part in ph.parts:
            assert (part.u * sh + ph.a == part.r * dh).all()
            assert (part.v * sw + ph.b == part.s * dw).all()
            if part_rows:
                assert len(set(part.r // part_rows)) == 1
            seen += list(zip(part.r.tolist(), part.s.tolist(), strict=True))
    assert sorted(seen) == [(r, s) for r in range(layer.R) for s in range(layer.S)]
