"""The IBN block family (seed 003 Fig. 4) and network builders (Fig. 5): parameter and MAC
counts of the built layers against closed forms written out by hand, shapes, residuals,
group sizes, and errors naming the block and field."""

import numpy as np
import pytest

import npusim
from npusim import blocks
from npusim.blocks import BlockSpec
from npusim.errors import LayerError

H = W = 8


def built_counts(spec: BlockSpec, h=H, w=W):
    """(params, MACs) summed over the block's conv layers in a built Graph."""
    graph = blocks.build_network("one", (1, spec.c_in, h, w), [spec], classes=2)
    convs = [lay for name, lay in graph.layers.items() if name.startswith("block1")]
    return (sum(c.K * c.Cg * c.R * c.S + c.K for c in convs), sum(c.macs for c in convs), graph)


def closed_form(kind, c1, c2, c3, co, k, g, s, h=H, w=W):
    """Parameters and MACs of each Fig. 4 variant, from the text (weights + biases)."""
    hw, ohw = h * w, -(-h // s) * -(-w // s)
    pw = lambda a, b: (a * b + b, a * b)  # noqa: E731  1x1 conv a -> b: (params, MACs/pixel)
    kx = lambda a, b, grp: (k * k * a // grp * b + b, k * k * a // grp * b)  # noqa: E731
    table = {
        "ibn": [(pw(c1, c2), hw), (kx(c2, c2, c2), ohw), (pw(c2, co), ohw)],
        "fused-ibn": [(kx(c1, c2, 1), ohw), (pw(c2, co), ohw)],
        "grouped-ibn-proj": [(pw(c1, c2), hw), (kx(c2, c3, g), ohw), (pw(c3, co), ohw)],
        "grouped-ibn-expand": [(pw(c1, c2), hw), (kx(c2, c3, g), ohw), (pw(c3, co), ohw)],
        "fused-grouped-ibn": [(kx(c1, c2, g), ohw), (pw(c2, co), ohw)],
        "grouped-ibn": [(pw(c1, c2), hw), (kx(c2, c2, g), ohw), (pw(c2, co), ohw)],
        "fused-proj-grouped-ibn": [(pw(c1, c2), hw), (kx(c2, co, g), ohw), (pw(co, co), ohw)],
    }[kind]
    return sum(p for (p, _), _ in table), sum(m * pix for (_, m), pix in table)


CASES = [  # kind, c1, c2, c3, c_out, K, g, stride
    ("ibn", 16, 64, 64, 24, 3, 1, 1),
    ("ibn", 16, 96, 96, 16, 5, 1, 2),
    ("fused-ibn", 16, 64, 64, 16, 3, 1, 1),
    ("grouped-ibn-proj", 16, 64, 32, 24, 3, 4, 2),
    ("grouped-ibn-expand", 16, 32, 96, 16, 3, 8, 1),
    ("fused-grouped-ibn", 16, 64, 64, 16, 3, 2, 1),
    ("grouped-ibn", 24, 48, 48, 24, 5, 3, 1),
    ("fused-proj-grouped-ibn", 16, 64, 32, 32, 3, 4, 2),
]


@pytest.mark.parametrize("kind,c1,c2,c3,co,k,g,s", CASES)
def test_counts_of_built_layers_match_closed_forms(kind, c1, c2, c3, co, k, g, s):
    spec = BlockSpec(kind, c1, co, k=k, groups=g, stride=s, c2=c2, c3=c3)
    params, macs, graph = built_counts(spec)
    assert (params, macs) == closed_form(kind, c1, c2, c3, co, k, g, s)
    assert (blocks.params(spec), blocks.macs(spec, H, W)) == (params, macs)
    assert graph.shapes[[n for n in graph.shapes if n.startswith("block1")][-1]] == \
        (1, co, -(-H // s), -(-W // s))


def test_residual_add_only_where_shapes_allow():
    same = blocks.build_network("r", (1, 16, 8, 8), [BlockSpec("ibn", 16, 16)], classes=2)
    assert "block1_add" in same.shapes
    down = blocks.build_network("r", (1, 16, 8, 8), [BlockSpec("ibn", 16, 16, stride=2)],
                                classes=2)
    assert "block1_add" not in down.shapes
    off = blocks.build_network("r", (1, 16, 8, 8), [BlockSpec("ibn", 16, 16, residual=False)],
                               classes=2)
    assert "block1_add" not in off.shapes


def test_block_output_matches_torch():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    spec = BlockSpec("grouped-ibn-expand", 8, 8, k=3, groups=4, c2=16, c3=32)
    graph = blocks.build_network("t", (1, 8, 6, 6), [spec], classes=3, seed=4)
    x = np.random.default_rng(0).standard_normal((1, 8, 6, 6)).astype(np.float32)
    ours = npusim.simulate(graph, x, "group-tile-32mac", keep_outputs=True).outputs["block1_add"]
    t = torch.from_numpy(x.astype(np.float64))
    y = t
    for c in blocks.plan(spec, "block1"):
        op = graph.node(c.name).op
        y = F.conv2d(y, torch.from_numpy(op.weight.astype(np.float64)),
                     torch.from_numpy(op.bias.astype(np.float64)), c.stride, c.k // 2, 1,
                     c.groups)
        y = F.relu(y) if c.relu else y
    np.testing.assert_allclose(ours, (y + t).numpy(), rtol=1e-4, atol=1e-5)


def test_fig3_params_and_macs_fall_as_g_rises():
    """zin = zout = 256, 3x3 on 14 x 14: parameters and MACs fall as 1/g, from full
    convolution (g = 1) to depthwise (g = 256)."""
    gs = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    convs = [blocks.ConvPlan("c", 256, 256, 3, groups=g) for g in gs]
    weights = [c.params - 256 for c in convs]
    assert weights == [9 * 256 * 256 // g for g in gs]
    assert [c.macs(14, 14) for c in convs] == [w * 196 for w in weights]


def test_interleave_and_group_sizes_per_kind_and_rule():
    stage = blocks.interleave(["fused-ibn", "fused-grouped-ibn"], 32, 64, 4, stride=2)
    assert [b.kind for b in stage] == ["fused-ibn", "fused-grouped-ibn"] * 2
    assert [b.stride for b in stage] == [2, 1, 1, 1] and stage[1].c_in == 64
    per_kind = blocks.apply_group_sizes(stage, {"fused-grouped-ibn": 32})
    assert [b.groups for b in per_kind] == [1, 256 // 32, 1, 256 // 32]
    by_rule = blocks.apply_group_sizes(stage, lambda spec: spec.mid // 2)
    assert by_rule[1].groups == 2


def test_classifier_builds_and_counts():
    graph = blocks.build(size=64, classes=10)
    specs = blocks.apply_group_sizes(blocks.edgetpu_v2_blocks(), 64)
    assert len(specs) == 20 and graph.output_shape == (1, 10)
    assert graph.layers["block3_fused_group"].groups == 192 // 64
    block_params = sum(c.K * c.Cg * c.R * c.S + c.K for n, c in graph.layers.items()
                       if n.startswith("block"))
    assert block_params == sum(blocks.params(s) for s in specs)


@pytest.mark.parametrize("spec,match", [
    (BlockSpec("ibn-x", 8, 8), r"block\.kind='ibn-x': must be one of ibn, fused-ibn"),
    (BlockSpec("grouped-ibn", 8, 8, groups=3),
     r"block\.groups=3: must divide the grouped conv's 32 inputs and 32 outputs"),
    (BlockSpec("grouped-ibn-proj", 8, 8, c3=64),
     r"block\.c3=64: must be < c2=32 \(an initial channel reduction\)"),
    (BlockSpec("grouped-ibn-expand", 8, 8, c3=16), r"block\.c3=16: must be > c2=32"),
    (BlockSpec("ibn", 8, 16, residual=True), r"block\.residual=True: needs stride 1"),
    (BlockSpec("ibn", 8, 8, k=0), r"block\.k=0: must be >= 1"),
])
def test_bad_blocks_raise_naming_the_field(spec, match):
    with pytest.raises(LayerError, match=match):
        blocks.plan(spec)


def test_bad_group_size_and_channel_chain_raise():
    with pytest.raises(LayerError, match=r"block2\.group_size=5: must divide the grouped "
                                          r"conv's 64 outputs"):
        blocks.apply_group_sizes([BlockSpec("ibn", 8, 8), BlockSpec("grouped-ibn", 8, 8,
                                                                    expand=8)], 5)
    with pytest.raises(LayerError, match=r"n\.block2\.c_in=9: the previous layer gives 8"):
        blocks.build_network("n", (1, 8, 4, 4), [BlockSpec("ibn", 8, 8), BlockSpec("ibn", 9, 8)])


@pytest.mark.parametrize("preset", ["group-tile-32mac", "group-tile-64mac"])
@pytest.mark.parametrize("model", ["edgetpu_v2_like", "mobilenet_v2"])
def test_bandwidth_sweep_on_grouped_networks(model, preset):
    """The classifier built from these blocks and MobileNetV2 (its IBN blocks), int8, on the
    tiles: monotone in bandwidth and above the compute and DRAM floors, layer by layer (the
    compiler narrows output blocks where that is faster: compute at or above the
    stall-free tile's)."""
    from test_segnet import check_bandwidth_sweep

    from npusim.frontends import load_model

    graph = load_model(model, input_shape=(1, 3, 64, 64))
    layers = [graph.layers[n.name].with_dtype("int8") for n in graph.conv_nodes]
    check_bandwidth_sweep(layers, npusim.load_arch(preset), "group-tile",
                          mapped_by_bandwidth=True)
