"""ConvLayer shape rules and validation, Graph shape inference, batch-norm folding."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from strategies import conv_layers

from npusim.errors import LayerError
from npusim.ir import ConvLayer, GraphBuilder, fold_batchnorm


@given(conv_layers())
def test_output_shape_and_macs_match_torch(layer):
    t, b, le, r = layer.padding
    x = F.pad(torch.zeros(layer.input_shape), (le, r, t, b))
    out = F.conv2d(x, torch.zeros(layer.weight_shape), None, layer.stride, 0, layer.dilation,
                   layer.groups)
    assert tuple(out.shape) == layer.output_shape
    assert layer.macs == out.numel() * layer.Cg * layer.R * layer.S


@pytest.mark.parametrize("kwargs, message", [
    (dict(C=-3), r"conv1\.C=-3: must be an integer >= 1"),
    (dict(C=6, K=4, groups=4), r"conv1\.groups=4: must divide both C=6 and K=4"),
    (dict(stride=(0, 1)), r"conv1\.stride=\(0, 1\): must be >= 1"),
    (dict(dilation=(1, 0)), r"conv1\.dilation=\(1, 0\): must be >= 1"),
    (dict(padding=(1, -1, 0, 0)), r"conv1\.padding=\(1, -1, 0, 0\): must be >= 0"),
    (dict(R=9), r"conv1: kernel 9x3 .* does not fit the padded input 5x5"),
    (dict(dtype="fp16"), r"conv1\.dtype='fp16': must be one of float32, int8"),
    (dict(padding=(1, 2, 3)), r"conv1\.padding=\(1, 2, 3\): must be an int, \(h, w\) or"),
])
def test_invalid_layers_name_layer_and_field(kwargs, message):
    base = dict(N=1, C=4, H=5, W=5, K=4, R=3, S=3, name="conv1")
    with pytest.raises(LayerError, match=message):
        ConvLayer(**{**base, **kwargs})


def test_graph_infers_shapes_and_names_bad_node():
    rng = np.random.default_rng(0)
    g = GraphBuilder("net", (1, 3, 16, 16))
    x = g.conv(g.input, rng.standard_normal((8, 3, 3, 3)), stride=2, padding=1, name="stem")
    x = g.relu(x)
    x = g.maxpool(x, 3, 2, 1)
    graph = g.build()
    assert graph.shapes["stem"] == (1, 8, 8, 8)
    assert graph.output_shape == (1, 8, 4, 4)
    assert graph.with_batch(3).output_shape == (3, 8, 4, 4)
    g.conv(x, rng.standard_normal((4, 5, 1, 1)), name="head")
    with pytest.raises(LayerError, match="head: weight has 5 input channels per group x groups=1, "
                                         "but the input has C=8"):
        g.build()


def test_fold_batchnorm_keeps_the_function_and_drops_the_op():
    rng = np.random.default_rng(1)
    g = GraphBuilder("net", (2, 3, 9, 9))
    w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    gamma, beta = rng.random(5) + 0.5, rng.standard_normal(5)
    mean, var = rng.standard_normal(5), rng.random(5) + 0.1
    x = g.conv(g.input, w, padding=1, name="c")
    x = g.batchnorm(x, gamma, beta, mean, var, name="bn")
    g.relu(x, name="act")
    graph = g.build()
    folded = fold_batchnorm(graph)
    assert [n.name for n in folded.nodes] == ["c", "act"]
    xin = rng.standard_normal((2, 3, 9, 9)).astype(np.float32)
    t = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    ref = F.relu(F.batch_norm(F.conv2d(t(xin), t(w), padding=1), t(mean), t(var), t(gamma),
                              t(beta), eps=1e-5)).numpy()
    from npusim import simulate
    out = simulate(folded, xin).output
    assert np.abs(out - ref).max() / np.abs(ref).max() < 1e-5


def test_a_graph_prints_as_one_line_of_shapes_and_counts_not_its_weights():
    """The repr names the network, its input and output shapes and counts its nodes, convs
    and conv parameters (weights and biases, counted here from the arrays themselves)."""
    rng = np.random.default_rng(0)
    g = GraphBuilder("two", (1, 3, 8, 8))
    w1, w2 = rng.standard_normal((4, 3, 3, 3)), rng.standard_normal((2, 4, 1, 1))
    x = g.relu(g.conv(g.input, w1.astype(np.float32), bias=np.zeros(4, np.float32)))
    g.conv(x, w2.astype(np.float32))
    text = repr(g.build())
    assert text == ("Graph('two': input (1, 3, 8, 8) -> conv2 (1, 2, 6, 6); 3 nodes, 2 convs, "
                    f"{w1.size + 4 + w2.size} conv parameters)")
    assert "\n" not in text and "array" not in text


@pytest.mark.parametrize("stride, dilation, text", [
    ((2, 2), (1, 1), "8x24x96->8x12x48 3x3 s2"),
    ((2, 1), (1, 1), "8x24x96->8x12x96 3x3 s(2, 1)"),
    ((1, 1), (2, 2), "8x24x96->8x24x96 3x3 d2"),
    ((1, 1), (2, 1), "8x24x96->8x24x96 3x3 d(2, 1)"),  # read 'd2', as if both axes were 2
])
def test_the_shape_text_gives_both_axes_where_they_differ(stride, dilation, text):
    layer = ConvLayer(name="c", N=1, C=8, H=24, W=96, K=8, R=3, S=3, stride=stride,
                      padding=dilation, dilation=dilation)
    assert layer.describe() == text
