"""Running maxima and minima (``ops.CumExtreme``, ``torch.cummax`` / ``torch.cummin``):
against PyTorch's values bit for bit, and CornerNet's corner pooling (top and left pools: a
flip, a cummax along H or W, a flip back) through ``from_torch`` against the module in
float64 on every machine. Neither of torch's exporters writes cummax (ONNX has no such op),
so PyTorch is the way in; what the IR does not compute (the indices) is refused by name."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from strategies import assert_runs_as_module, photo  # noqa: E402

from npusim import ops  # noqa: E402
from npusim.errors import LayerError, ModelError  # noqa: E402
from npusim.frontends.torch_import import from_torch  # noqa: E402

nn, F = torch.nn, torch.nn.functional
X = photo((2, 3, 12, 16))
RUNNING = {"max": torch.cummax, "min": torch.cummin}


@pytest.mark.parametrize("kind", list(RUNNING))
@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -2])
def test_running_extremes_are_pytorchs_values(kind, axis):
    x = np.round(X * 4) / 4  # steps of a quarter: runs of equal values, ties
    got = ops.CumExtreme(kind, axis)(x)
    want = RUNNING[kind](torch.from_numpy(x), axis).values.numpy()
    assert got.dtype == np.float32 and np.array_equal(got, want)
    assert ops.CumExtreme(kind, axis).vector_ops([x.shape], x.shape) == x.size


def test_a_kind_or_axis_it_does_not_know_is_refused_naming_the_node():
    with pytest.raises(LayerError, match="pool: CumExtreme kind 'sum': one of max, min"):
        ops.CumExtreme("sum", 2).out_shape([X.shape], "pool")
    with pytest.raises(LayerError, match=r"pool: CumExtreme axes \(4,\) out of range for a "
                                         r"4-D input"):
        ops.CumExtreme("max", 4).out_shape([X.shape], "pool")


class CornerPool(nn.Module):
    """CornerNet's top-left corner pooling: each pixel the largest of the top branch's
    values at or below it plus the largest of the left branch's at or right of it."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(2)
        self.top, self.left = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(3, 8, 3, padding=1)
        self.out = nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x):
        top = torch.cummax(self.top(x).flip(2), dim=2)[0].flip(2)
        left = self.left(x).flip(3).cummax(3).values.flip(3)
        floor = torch.cummin(top, 1).values  # a running minimum too, over channels
        return self.out(F.relu(top + left - floor))


@pytest.mark.parametrize("arch", ["systolic-32x32-ws", "input-reuse-1024", "sparse-pairs-32x32",
                                  "group-tile-32mac", "dilated-grid-2x2"])
def test_corner_pooling_through_from_torch_equals_the_module_in_float64(arch):
    net = CornerPool().eval()
    graph = from_torch(net, X)
    assert sorted(n.op.kind for n in graph.nodes if isinstance(n.op, ops.CumExtreme)) == \
        ["max", "max", "min"]
    assert_runs_as_module(graph, net, X, arch, 1e-5)


class Indices(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)

    def forward(self, x):
        return self.conv(x) * torch.cummax(x, 3)[1].float().mean()


def test_the_indices_of_a_running_maximum_are_refused_naming_why():
    with pytest.raises(ModelError, match=r"node 'getitem': reads the indices of a max or min "
                                         r"along an axis: the IR computes its values only"):
        from_torch(Indices().eval(), X)
