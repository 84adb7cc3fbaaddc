"""Sliding windows: ``F.unfold`` / ``nn.Unfold`` (im2col, the windows of an involution or a
CARAFE upsampler) and ``x.unfold`` (windows along one axis). Both of torch's exporters write
``F.unfold`` as a ``Pad`` and two ``Gather``s of 2-D indices, the rows of taps over every
position; the IR takes each row as a ``Slice`` and concatenates them. Through ``from_torch``
against the module in float64, through both exporters' files against onnxruntime; the
rule's refusals by name."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from strategies import (  # noqa: E402
    assert_runs_as_module,
    export_onnx,
    float64_output,
    onnxruntime_output,
    photo,
    rel_err,
)

from npusim import ops, simulate  # noqa: E402
from npusim.errors import ModelError  # noqa: E402
from npusim.frontends.lowering import Refusal, gather  # noqa: E402
from npusim.frontends.onnx_import import from_onnx  # noqa: E402
from npusim.frontends.torch_import import from_torch  # noqa: E402

nn, F = torch.nn, torch.nn.functional
# (kernel, dilation, padding, stride) of F.unfold
GEOMETRIES = [((3, 3), 1, 1, 1), ((3, 2), (1, 2), 1, (2, 1)), (2, 1, 0, 2),
              ((1, 3), 1, (0, 2), (1, 3))]


def test_rows_of_runs_gather_as_a_slice_each_with_the_row_axis_inserted():
    x = photo((2, 3, 7, 9))
    taps = np.array([[0, 2, 4], [1, 3, 5], [-3, -2, -1]])  # negatives count from the end
    rows = gather(x.shape, 3, taps)
    assert [[type(op).__name__ for op in row] for row in rows] == [["Slice", "Reshape"]] * 3
    taken = [x] * 3
    for i, row in enumerate(rows):
        for op in row:
            taken[i] = op(taken[i])
    assert np.array_equal(np.concatenate(taken, 3), x[:, :, :, taps % 9])


@pytest.mark.parametrize("indices, why", [
    ([[0, 2, 3]], r"indices \[0, 2, 3\] on axis 2: the IR gathers a run of indices in equal "
                  r"steps >= 1"),
    ([[[0, 1]]], r"indices of shape \(1, 1, 2\): the IR gathers one index, a run of them, or "
                 r"rows of runs"),
    ([[0, 7]], r"indices \[\[0, 7\]\] on axis 2 of \(1, 3, 7, 9\): out of range")])
def test_indices_the_ir_cannot_take_are_refused_saying_why(indices, why):
    with pytest.raises(Refusal, match=why):
        gather((1, 3, 7, 9), 2, indices)


class Windows(nn.Module):
    """A conv, then ``F.unfold`` of each geometry, ``nn.Unfold``, windows along W by
    ``x.unfold``, and an involution (Li et al., 2021): a kernel per pixel, made by a conv
    of the map, applied to the map's 3x3 windows (unfolded) and summed over them."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.unfold = nn.Unfold(2, stride=2)
        self.kernels = nn.Conv2d(4, 9, 1)

    def forward(self, x):
        t = self.conv(x)
        n, c, h, w = t.shape
        parts = [F.unfold(t, k, dilation=d, padding=p, stride=s).flatten(1)
                 for k, d, p, s in GEOMETRIES]
        parts += [self.unfold(t).flatten(1), t.unfold(3, 3, 2).sum(-1).flatten(1)]
        windows = F.unfold(t, 3, padding=1).view(n, c, 9, h, w)
        involved = (windows * self.kernels(t).softmax(1).unsqueeze(1)).sum(2)
        return torch.cat(parts + [involved.flatten(1)], 1)


def test_unfolds_through_from_torch_equal_the_module_in_float64():
    x = photo((2, 3, 12, 11))
    net = Windows().eval()
    graph = from_torch(net, x)
    kinds = {type(n.op).__name__ for n in graph.nodes}
    assert {"Pad", "Slice", "Concat", "Transpose"} <= kinds
    assert_runs_as_module(graph, net, x, "input-reuse-1024", 1e-6)


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_unfolds_through_onnx_equal_onnxruntime(exporter, tmp_path):
    x = photo((2, 3, 12, 11))
    path = export_onnx(Windows().eval(), x, tmp_path / "windows.onnx", exporter)
    gathers = [n for n in onnx.load(str(path)).graph.node if n.op_type == "Gather"]
    assert gathers  # the windows' rows of taps, as 2-D indices
    graph = from_onnx(path)
    assert rel_err(simulate(graph, x, "systolic-32x32-ws").output,
                   onnxruntime_output(path, x)) < 1e-6


def test_an_onnx_gather_of_rows_that_are_not_runs_is_refused_naming_the_node(tmp_path):
    idx = helper.make_tensor("idx", TensorProto.INT64, [2, 2], [0, 1, 3, 0])
    graph = helper.make_graph(
        [helper.make_node("Gather", ["x", "idx"], ["y"], name="taps", axis=3)], "m",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 2, 2])], [idx])
    path = tmp_path / "taps.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(path))
    with pytest.raises(ModelError, match=r"Gather x1 \(node 'taps': indices \[3, 0\] on axis "
                                         r"3: the IR gathers a run of indices in equal steps"):
        from_onnx(path)


def test_windows_along_an_axis_are_torchs_unfold_of_a_tensor():
    x = photo((2, 3, 7, 10))

    class Along(nn.Module):
        def forward(self, x):
            return torch.cat([x.unfold(3, 4, 3).flatten(1), x.unfold(1, 2, 1).flatten(1),
                              x.unfold(-2, 7, 1).flatten(1)], 1)

    graph = from_torch(Along(), x)
    assert sum(isinstance(n.op, ops.Transpose) for n in graph.nodes) == 3
    assert rel_err(simulate(graph, x).output, float64_output(Along(), x)) == 0
