"""Magnitude pruning per layer and the deep-compression preset (Han et al. 2015)."""

import numpy as np
import pytest

import npusim
from npusim.errors import ModelError
from npusim.frontends import prune, zoo


@pytest.fixture(scope="module")
def alexnet():
    return zoo.build("alexnet", size=96)


def kept(graph, name):
    return float((graph.node(name).op.weight != 0).mean())


def test_magnitude_prune_keeps_exactly_the_largest():
    w = np.random.default_rng(0).standard_normal((8, 3, 3, 3)).astype(np.float32)
    p = prune.magnitude_prune(w, 0.25)
    keep = round(0.25 * w.size)
    assert (p != 0).sum() == keep
    survivors = np.sort(np.abs(w).ravel())[-keep:]  # the `keep` largest magnitudes, by sorting
    np.testing.assert_array_equal(np.sort(np.abs(p[p != 0])), survivors)
    np.testing.assert_array_equal(p[p != 0], w[p != 0])  # survivors keep their exact values
    ties = np.repeat(np.float32([-3, 1, 2, -2, 5]), 20)  # 40 weights tie at |w| = 2
    assert (prune.magnitude_prune(ties, 0.5) != 0).sum() == 50
    assert prune.magnitude_prune(w, 1.0) is not w
    np.testing.assert_array_equal(prune.magnitude_prune(w, 1.0), w)


@pytest.mark.parametrize("density", [0.5, 0.1, "0.3"])
def test_uniform_density_per_layer(alexnet, density):
    p = prune.prune(alexnet, density)
    for name, layer in p.layers.items():
        n = int(np.prod(layer.weight_shape))
        assert (p.node(name).op.weight != 0).sum() == round(float(density) * n), name
        np.testing.assert_array_equal(p.node(name).op.bias, alexnet.node(name).op.bias)
    assert kept(alexnet, "conv1") == 1.0  # the original graph is untouched


def test_deep_compression_alexnet_table(alexnet):
    p = prune.prune(alexnet, "deep-compression")
    table = {"conv1": .84, "conv2": .38, "conv3": .35, "conv4": .37, "conv5": .37, "fc6": .09,
             "fc7": .09, "fc8": .25}
    assert set(p.layers) == set(table)
    for name, d in table.items():
        assert kept(p, name) == pytest.approx(d, abs=1e-3), name


def test_deep_compression_vgg16_covers_every_layer():
    g = zoo.build("vgg16", size=32)
    p = prune.prune(g, "deep-compression")
    assert kept(p, "conv1_1") == pytest.approx(0.58, abs=0.01)
    assert kept(p, "conv4_2") == pytest.approx(0.27, abs=1e-3)
    assert kept(p, "fc6") == pytest.approx(0.04, abs=1e-3)
    total = sum(int(np.prod(l.weight_shape)) for l in p.layers.values())
    nonzero = sum(int((p.node(n).op.weight != 0).sum()) for n in p.layers)
    assert 0.02 < nonzero / total < 0.2


def test_pruned_zeros_reach_the_simulator(alexnet):
    """The zeros are in the tensors: the int8 weights a dataflow sees have them too."""
    p = prune.prune(alexnet, 0.2)
    x = zoo.input_for("alexnet", size=96)
    res = npusim.simulate(p, x, "systolic-32x32-ws", mode="estimate")
    assert np.isfinite(res.output).all()
    w = p.node("conv3").op.weight
    assert (npusim.quant.quantize_weights(w)[0] == 0).mean() >= 0.8


@pytest.mark.parametrize("density,match", [
    (0.0, r"alexnet: density=0\.0: must be a number in \(0, 1\]"),
    (1.5, r"density=1\.5: must be a number in \(0, 1\] \(fraction of weights kept\) "
          r"or one of deep-compression"),
    ("dense", r"density='dense': must be a number"),
    (True, r"density=True"),
])
def test_bad_density(alexnet, density, match):
    with pytest.raises(ModelError, match=match):
        prune.prune(alexnet, density)


def test_preset_only_for_the_papers_networks():
    g = zoo.build("mtcnn-rnet")
    with pytest.raises(ModelError, match=r"mtcnn-rnet: the deep-compression preset has per-layer "
                                         r"densities only for alexnet, vgg16"):
        prune.prune(g, "deep-compression")


def test_a_density_that_empties_a_layer_is_refused_naming_it(capsys):
    from npusim import cli

    g = zoo.build("mtcnn-pnet")  # conv1: 10 x 3 x 3 x 3 = 270 weights; conv4-2: 2 x 32 = 64
    sizes = {n.name: n.op.weight.size for n in g.conv_nodes}
    assert sizes["conv1"] == 270 and min(sizes.values()) == sizes["conv4-2"] == 64
    with pytest.raises(ModelError, match=r"conv1: density=1e-09 keeps round\(1e-09 x 270\) = 0 "
                                         r"of its 270 weights; .* >= 0\.0037 \(1/270\)"):
        prune.prune(g, 1e-9)
    # 0.005 keeps round(1.35) = 1 weight of conv1 and round(0.32) = 0 of conv4-2
    with pytest.raises(ModelError, match=r"conv4-2: density=0\.005 keeps .* = 0 of its 64 "):
        prune.prune(g, 0.005)
    pruned = prune.prune(g, 1 / 64)  # leaves every layer at least one weight
    assert min(int((n.op.weight != 0).sum()) for n in pruned.conv_nodes) == 1
    assert cli.main(["run", "mtcnn-pnet", "--density", "1e-9", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("npusim: error: conv1: density=1e-09 keeps") and err.count("\n") == 1
