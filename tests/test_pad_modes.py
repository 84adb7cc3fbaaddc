"""Circular padding (a panorama's wrap-around, ``padding_mode='circular'``) and negative pads
(crops: a U-Net's skip cropped to the upsampled map). The IR's ``Pad`` of mode ``circular``
against ``F.pad`` in float64; networks of each through ``from_torch`` (against the module in
float64) and through ONNX as both of torch's exporters write them (circular, TorchScript:
Slices and Concats, dynamo: ``Pad`` of mode ``wrap``; a crop: Slices, or a ``Pad`` of
negative pads), against onnxruntime."""

from collections import Counter

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from strategies import export_onnx, float64_output, onnxruntime_output, photo, rel_err  # noqa: E402

from npusim import ops, simulate  # noqa: E402
from npusim.frontends.onnx_import import from_onnx  # noqa: E402
from npusim.frontends.torch_import import from_torch  # noqa: E402
from npusim.report.check import check  # noqa: E402

nn, F = torch.nn, torch.nn.functional
X = photo((2, 3, 8, 9))
X[1] = X[1, :, ::-1]


@pytest.mark.parametrize("padding", [(1, 1, 1, 1), (0, 3, 2, 0), (8, 8, 9, 9), (2, 0, 0, 5)])
def test_circular_pad_is_torchs(padding):
    t, b, left, r = padding
    want = F.pad(torch.from_numpy(X).double(), (left, r, t, b), mode="circular").numpy()
    op = ops.Pad(padding, "circular")
    assert op.out_shape([X.shape], "p") == want.shape
    assert np.array_equal(op(X), want.astype(np.float32))
    assert op.vector_ops([X.shape], want.shape) == want.size  # a data move


def test_a_circular_pad_wider_than_the_map_is_refused():
    with pytest.raises(ops.LayerError, match=r"p: circular padding \(0, 0, 10, 0\) must be at "
                                             r"most the map 8x9"):
        ops.Pad((0, 0, 10, 0), "circular").out_shape([X.shape], "p")


class Wrapped(nn.Module):
    """A conv of circular padding, a CircularPad2d and an F.pad of mode circular."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=(1, 2), padding_mode="circular")
        self.pad = nn.CircularPad2d((2, 1, 0, 3))

    def forward(self, x):
        return F.pad(self.pad(self.conv(x)), (1, 1, 1, 1), mode="circular")


class Cropped(nn.Module):
    """Crops by negative pads: all four sides, some sides (a module), and a crop of a
    zero-padded map (the pad is placed as its own node first)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3)
        self.crop = nn.ZeroPad2d((-1, 0, -2, -1))

    def forward(self, x):
        t = self.conv(x)
        parts = [F.pad(t, (-1, -1, -1, -1)), self.crop(t), F.pad(F.pad(t, (2, 2, 2, 2)),
                                                                 (-1, 0, -3, -1))]
        return torch.cat([p.flatten(1) for p in parts], 1)


# each network, its IR op kinds and a machine it runs on
NETWORKS = [(Wrapped, {"Pad": 3, "Conv": 1}, "systolic-32x32-ws"),
            (Cropped, {"Conv": 1, "Slice": 6, "Pad": 1, "Flatten": 3, "Concat": 1},
             "sparse-pairs-32x32")]


@pytest.mark.parametrize("net, kinds, arch", NETWORKS, ids=["circular", "crops"])
def test_pads_through_from_torch_equal_the_module_in_float64(net, kinds, arch):
    net = net().eval()
    graph = from_torch(net, X)
    assert Counter(type(n.op).__name__ for n in graph.nodes) == kinds
    result = simulate(graph, X, arch, keep_outputs=True)
    assert rel_err(result.output, float64_output(net, X)) < 1e-6
    assert check(graph, X, result).passed


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
@pytest.mark.parametrize("net, kinds, arch", NETWORKS, ids=["circular", "crops"])
def test_pads_through_onnx_equal_onnxruntime(net, kinds, arch, exporter, tmp_path):
    path = export_onnx(net().eval(), X, tmp_path / "pads.onnx", exporter)
    want = onnxruntime_output(path, X)
    assert rel_err(simulate(from_onnx(path), X, arch).output, want) < 1e-6


def test_a_pad_that_crops_one_side_and_pads_another_is_refused():
    from npusim.errors import ModelError

    class Mixed(nn.Module):
        def forward(self, x):
            return F.pad(x, (-1, 2, 0, 0))

    with pytest.raises(ModelError, match=r"pad=\(-1, 2, 0, 0\), mode='constant': .*or a crop "
                                         r"\(no positive pad\)"):
        from_torch(Mixed(), X)
