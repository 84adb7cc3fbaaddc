"""dilated-segnet and its 2x2 cascades (seed 002, Figs. 2, 17-20): the built network
against torch, the Fig. 18 coefficient counts from built weights, the cascade against the
3x3 dilated conv it approximates, and run / estimate / emulate on a real photo."""

import numpy as np
import pytest
import torch
from strategies import rel_err

import npusim
from npusim import reference
from npusim.errors import LayerError, ModelError
from npusim.frontends import segnet
from npusim.ir import ConvLayer
from npusim.torch_ref import to_torch


def test_rates_follow_fig2_and_the_atrous_pyramid():
    g = segnet.build(size=32, width=8)
    rates = {n: layer.dilation[0] for n, layer in g.layers.items()}
    assert [rates[f"ctx_r{r}"] for r in (1, 2, 4)] == [1, 2, 4]
    assert [rates[f"aspp_r{r}"] for r in (6, 12, 18)] == [6, 12, 18]
    assert g.output_shape == (1, 8, 32, 32)


def test_output_on_a_real_photo_matches_torch():
    g = segnet.build(size=64, width=8)
    x = segnet.input_for("astronaut", size=64)
    out = npusim.simulate(g, x, "dilated-grid-2x2-h3").output
    with torch.inference_mode():
        ref = to_torch(g).double()(torch.from_numpy(x).double()).numpy()
    assert rel_err(out, ref) < 1e-4
    assert x.std() > 0.3  # a real photo, not a constant


def test_run_estimate_and_emulate_give_the_same_stats():
    g = segnet.build(size=16, width=4, classes=3, cascade="full-wide")
    x = segnet.input_for("coffee", size=16)
    res = {m: npusim.simulate(g, x, "dilated-grid-2x2-h3", mode=m, dtype="int8")
           for m in ("run", "estimate", "emulate")}
    assert res["run"].layers == res["estimate"].layers == res["emulate"].layers
    np.testing.assert_array_equal(res["run"].output, res["emulate"].output)


@pytest.mark.parametrize("c1, c2", [(4, 4), (8, 12), (64, 64), (12, 5)])
@pytest.mark.parametrize("variant", list(segnet.FIG18))
def test_fig18_counts_from_built_cascades(variant, c1, c2):
    if variant == "dw-dw":
        c2 = c1
    g = segnet.cascade_graph(c1, c2, 2, variant, size=8)
    expected = {"dw-dw": 8 * c1, "dw-full": 4 * c1 * (c2 + 1), "full-dw": 4 * (c1 + 1) * c2,
                "full-wide": 4 * (c1 + c2) * c2, "full-narrow": 4 * (c1 + c2) * c1}[variant]
    assert segnet.cascade_coefficients(g, "cascade") == expected == \
        segnet.fig18_count(variant, c1, c2)
    single = segnet.cascade_graph(c1, c2, 2, "single", size=8)
    assert segnet.cascade_coefficients(single, "cascade") == 9 * c1 * c2
    assert g.output_shape == single.output_shape


def test_cascade_has_fewer_coefficients_at_64_maps():
    assert segnet.fig18_count("full-wide", 64, 64) == 32768 < 36864 == \
        segnet.fig18_count("single", 64, 64)


@pytest.mark.parametrize("rate", [2, 4, 6])
def test_two_2x2_at_rate_compose_to_the_3x3_at_rate(rate):
    """Eq. 14 taps at -R/2, +R/2 twice give {-R, 0, R}: away from the borders the cascade
    is the 3x3 dilated conv with the composed kernel (Fig. 19)."""
    rng = np.random.default_rng(rate)
    c1, cm, c2, h = 3, 4, 2, 6 * rate + 3
    x = rng.standard_normal((1, c1, h, h))
    w1, w2 = rng.standard_normal((cm, c1, 2, 2)), rng.standard_normal((c2, cm, 2, 2))
    l1 = ConvLayer(1, c1, h, h, cm, 2, 2, padding=rate // 2, dilation=rate)
    l2 = ConvLayer(1, cm, h, h, c2, 2, 2, padding=rate // 2, dilation=rate)
    y = reference.conv2d(reference.conv2d(x, w1, None, l1), w2, None, l2)
    w3 = np.zeros((c2, c1, 3, 3))
    for a1, b1, a2, b2 in np.ndindex(2, 2, 2, 2):
        w3[:, :, a1 + a2, b1 + b2] += w2[:, :, a2, b2] @ w1[:, :, a1, b1]
    l3 = ConvLayer(1, c1, h, h, c2, 3, 3, padding=rate, dilation=rate)
    z = reference.conv2d(x, w3, None, l3)
    inner = slice(rate, h - rate)
    np.testing.assert_allclose(y[..., inner, inner], z[..., inner, inner], rtol=1e-10, atol=1e-10)
    assert not np.allclose(y, z)  # the borders differ: an approximation, not an identity


def test_errors_name_the_layer_and_the_rule():
    b = segnet.Builder("t", (1, 4, 8, 8), 0)
    with pytest.raises(LayerError, match=r"c: a 2x2 pre-dilation filter needs an even rate "
                                         r"\(Eq. 14\), got R=3"):
        b.pre_dilated2(b.g.input, 4, 4, 3, "c", dw=False, relu=False)
    with pytest.raises(LayerError, match="c: depthwise needs as many output maps as inputs, "
                                         "got 4 -> 6"):
        b.pre_dilated2(b.g.input, 4, 6, 2, "c", dw=True, relu=False)
    with pytest.raises(ModelError, match="cascade='tree': must be one of dw-dw, dw-full"):
        segnet.build(cascade="tree")
    with pytest.raises(ModelError, match="size=30: must be a multiple of 4"):
        segnet.build(size=30)
    with pytest.raises(ModelError, match="no conv or cascade named 'nope'"):
        segnet.cascade_coefficients(segnet.build(size=16, width=4), "nope")


BANDWIDTHS = (0.5, 2.0, 17.064, 100.0, 1000.0)  # bytes/cycle, low to high


def check_bandwidth_sweep(layers, arch, dataflow, mapped_by_bandwidth=False):
    """Per layer: cycles fall (never rise) as the DRAM bandwidth grows, compute cycles stay
    (or, on a machine whose compiler maps a layer by the DRAM's bandwidth,
    ``mapped_by_bandwidth``, are never below the stall-free machine's), and cycles are never
    below max(compute, DRAM bytes / bandwidth)."""
    df = npusim.dataflows.get(dataflow)
    for layer in layers:
        runs = [df.estimate(layer, None, None, arch.with_memory(dram_bytes_per_cycle=bw))
                for bw in BANDWIDTHS]
        cycles, compute = [s.cycles for s in runs], [s.compute_cycles for s in runs]
        assert cycles == sorted(cycles, reverse=True), layer.name
        if mapped_by_bandwidth:
            free = df.estimate(layer, None, None,
                               arch.with_memory(dram_bytes_per_cycle="unlimited"))
            assert min(compute) >= free.compute_cycles == free.cycles, layer.name
        else:
            assert len(set(compute)) == 1, layer.name
        for s, bw in zip(runs, BANDWIDTHS, strict=True):
            assert s.cycles >= max(s.compute_cycles, s.dram_bytes / bw) - 1e-6, (layer.name, bw)
            assert s.cycles == s.compute_cycles + s.stall_cycles


@pytest.mark.parametrize("preset", ["dilated-grid-2x2", "dilated-grid-2x2-h3"])
def test_bandwidth_sweep_on_dilated_segnet(preset):
    g = segnet.build(size=96)
    check_bandwidth_sweep([g.layers[n.name] for n in g.conv_nodes], npusim.load_arch(preset),
                          "dilated-grid", mapped_by_bandwidth=True)
