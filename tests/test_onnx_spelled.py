"""Ops torch's exporters spell out as several ONNX nodes (``frontends.onnx_spelled``) and an
``If`` that static shapes decide (``onnx_model.inline_static_ifs``), imported as the one op
they compute. Exported files are judged by onnxruntime and by the exported module in
float64; decompositions written by hand that differ from the patterns stay refused, naming
their nodes."""


import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from strategies import export_onnx as export  # noqa: E402
from strategies import float64_output, onnxruntime_output, photo, rel_err  # noqa: E402

from npusim import simulate  # noqa: E402
from npusim.errors import ModelError  # noqa: E402
from npusim.frontends.onnx_import import from_onnx  # noqa: E402

nn = torch.nn
FLOAT = TensorProto.FLOAT


def conv_then(act: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), act).eval()


X = photo((2, 3, 10, 9)) * 40  # the conv's outputs pass every threshold below, and not all

SPELLED = [  # (module, exporter, the one op's type, its fields)
    (lambda: nn.Softplus(), "dynamo", "Softplus", dict(beta=1.0, threshold=20.0)),
    (lambda: nn.Softplus(beta=2.0, threshold=5.0), "dynamo", "Softplus",
     dict(beta=2.0, threshold=5.0)),
    *[(lambda: nn.LocalResponseNorm(5), exporter, "LocalResponseNorm",
       dict(size=5, alpha=1e-4, beta=0.75, k=1.0, before=2)) for exporter in
      ("dynamo", "torchscript")],
    *[(lambda: nn.LocalResponseNorm(4, alpha=0.05, beta=0.6, k=2.0), exporter,
       "LocalResponseNorm", dict(size=4, alpha=0.05, beta=0.6, k=2.0, before=2)) for exporter in
      ("dynamo", "torchscript")],
    # 10 x 9 into windows of 4 rows (starting 0, 3, 6) and 3 or 2 columns, overlapping
    (lambda: nn.AdaptiveAvgPool2d((3, 4)), "dynamo", "AdaptivePool", dict(size=(3, 4),
                                                                           kind="avg")),
    (lambda: nn.AdaptiveAvgPool2d((3, 8)), "dynamo", "AdaptivePool", dict(size=(3, 8),
                                                                           kind="avg")),
]


@pytest.mark.parametrize("make, exporter, kind, fields", SPELLED)
def test_a_spelled_out_op_imports_as_one_op(make, exporter, kind, fields, tmp_path):
    """Each decomposition torch writes is one IR op, costed as the op it is, whose outputs
    equal onnxruntime's run of the file and the module's in float64; an even LRN window
    starts size // 2 channels before its own, as PyTorch's does."""
    net = conv_then(make())
    path = export(net, X, tmp_path / "m.onnx", exporter)
    graph = from_onnx(path)
    assert [type(n.op).__name__ for n in graph.nodes] == ["Conv", kind]
    op = graph.nodes[-1].op
    for field, want in fields.items():
        assert getattr(op, field) == (want if isinstance(want, str) else
                                      pytest.approx(want, rel=1e-6)), field
    if kind == "Softplus":  # the threshold's select is taken both ways
        pre = net[0](torch.from_numpy(X)).detach().numpy() * op.beta
        assert (pre > op.threshold).any() and (pre < op.threshold).any()
    out = simulate(graph, X).output
    assert rel_err(out, onnxruntime_output(path, X)) < 1e-6
    assert rel_err(out, float64_output(net, X)) < 1e-6


# ---- written by hand: what is and is not the pattern -----------------------------------


def write(tmp_path, nodes, inits, in_shape=(2, 6, 5, 4), opset=17, name="m") -> str:
    graph = helper.make_graph(
        nodes, "m", [helper.make_tensor_value_info("x", FLOAT, list(in_shape))],
        [helper.make_tensor_value_info("y", FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = onnx.shape_inference.infer_shapes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8))
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return str(path)


def lrn_nodes(size: int, front: int, fill: float = 0.0, squared_read: bool = False):
    """PyTorch's local_response_norm on x (2 x 6 x 5 x 4) as ONNX nodes, by hand; with
    ``squared_read``, x squared is also added to the output."""
    n, c, h, w = 2, 6, 5, 4
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["sq"], name="square"),
        helper.make_node("Reshape", ["sq", "view_shape"], ["view"], name="view"),
        helper.make_node("Pad", ["view", "pads", "fill"], ["padded"], name="pad"),
        helper.make_node("AveragePool", ["padded"], ["mean"], name="pool",
                         kernel_shape=[size, 1, 1]),
        helper.make_node("Squeeze", ["mean", "one"], ["window"], name="squeeze"),
        helper.make_node("Mul", ["window", "alpha"], ["scaled"], name="scale"),
        helper.make_node("Add", ["scaled", "k"], ["base"], name="offset"),
        helper.make_node("Pow", ["base", "beta"], ["den"], name="power"),
        helper.make_node("Div", ["x", "den"], ["lrn" if squared_read else "y"], name="divide"),
    ]
    if squared_read:
        nodes.append(helper.make_node("Add", ["lrn", "sq"], ["y"], name="plus"))
    inits = {"view_shape": np.array([n, 1, c, h, w], np.int64),
             "pads": np.array([0, 0, front, 0, 0, 0, 0, size - 1 - front, 0, 0], np.int64),
             "fill": np.array(fill, np.float32), "one": np.array([1], np.int64),
             "alpha": np.array(0.3, np.float32), "k": np.array(1.5, np.float32),
             "beta": np.array(0.6, np.float32)}
    return nodes, inits


@pytest.mark.parametrize("size, front", [(3, 1), (4, 1), (4, 2), (2, 0)])
def test_a_window_written_by_hand_is_the_pad_it_reads(tmp_path, size, front):
    """The window starts where the Pad says (an ONNX-style even window too), judged by
    onnxruntime running the decomposition itself."""
    x = photo((2, 6, 5, 4)) * 3
    path = write(tmp_path, *lrn_nodes(size, front))
    graph = from_onnx(path)
    assert [type(n.op).__name__ for n in graph.nodes] == ["LocalResponseNorm"]
    assert (graph.nodes[0].op.size, graph.nodes[0].op.before) == (size, front)
    assert rel_err(simulate(graph, x).output, onnxruntime_output(path, x)) < 1e-6


@pytest.mark.parametrize("change, refused", [
    (dict(squared_read=True), "Pad x1 (node 'pad'"),  # x squared read outside the pattern
    (dict(fill=1.0), "Pad x1 (node 'pad'"),  # a window padded with ones is not LRN's
])
def test_what_is_not_the_lrn_pattern_stays_refused(tmp_path, change, refused):
    path = write(tmp_path, *lrn_nodes(4, 2, **change))
    with pytest.raises(ModelError) as e:
        from_onnx(path)
    assert refused in str(e.value) and "AveragePool x1 (node 'pool'" in str(e.value)
    assert "\n" not in str(e.value)


def test_softplus_whose_select_is_the_other_way_round_is_its_own_nodes(tmp_path):
    """x where x <= 2, softplus past it: not PyTorch's rule, so not a Softplus: imported
    node by node (the comparison, the softplus, the select)."""
    path = write(tmp_path, [
        helper.make_node("Softplus", ["x"], ["soft"], name="soft"),
        helper.make_node("Greater", ["x", "limit"], ["past"], name="greater"),
        helper.make_node("Where", ["past", "soft", "x"], ["y"], name="where")],
        {"limit": np.array(2.0, np.float32)})
    graph = from_onnx(path)
    assert [type(n.op).__name__ for n in graph.nodes] == ["Softplus", "Elementwise", "Where"]
    x = photo((2, 6, 5, 4)) * 8 - 2
    assert rel_err(simulate(graph, x).output, onnxruntime_output(path, x)) < 1e-6


@pytest.mark.parametrize("size, out", [((7, 7), (5, 5)), ((32, 32), (7, 7)), ((10, 9), (4, 5))])
def test_adaptive_windows_of_unequal_lengths_import_as_their_nodes(size, out, tmp_path):
    """7 rows into 5 windows (2, 2, 3, 2, 2 long), VGG's 7 x 7 pool on a 32 x 32 map: the
    dynamo exporter gathers the longest window (GatherND), masks the short ones (Where) and
    adds the taps one by one; not the pattern, it imports node by node, judged by
    onnxruntime and by the module in float64."""
    net = conv_then(nn.AdaptiveAvgPool2d(out))
    x = photo((2, 3, *size)) * 4 - 2
    path = export(net, x, tmp_path / "m.onnx", "dynamo")
    graph = from_onnx(path)
    kinds = {type(n.op).__name__ for n in graph.nodes}
    assert {"GatherND", "Where"} <= kinds and "AdaptivePool" not in kinds
    out_ = simulate(graph, x).output
    assert rel_err(out_, onnxruntime_output(path, x)) < 1e-6
    assert rel_err(out_, float64_output(net, x)) < 1e-6


def test_gather_nd_by_constant_indices_is_onnxruntimes(tmp_path):
    """Negative indices count from the end; index tuples of one axis keep the rest."""
    x = photo((2, 6, 5, 4))
    for k, idx in ((2, np.array([[[0, -1], [1, 2]], [[-2, 0], [1, 1]]])),
                   (1, np.array([[1], [0], [-1]]))):
        path = write(tmp_path, [helper.make_node("GatherND", ["x", "idx"], ["y"], name="g")],
                     {"idx": idx.astype(np.int64)}, in_shape=x.shape, name=f"k{k}")
        graph = from_onnx(path)
        assert [type(n.op).__name__ for n in graph.nodes] == ["GatherND"]
        assert np.array_equal(simulate(graph, x).output, onnxruntime_output(path, x))
    out_of_range = write(tmp_path, [helper.make_node("GatherND", ["x", "idx"], ["y"],
                                                     name="g")],
                         {"idx": np.array([[2, 0]], np.int64)}, in_shape=x.shape, name="bad")
    with pytest.raises(ModelError, match=r"GatherND x1 \(node 'g': indices out of range for "
                                         r"the axes \(2, 6\)\)"):
        from_onnx(out_of_range)


def gathered_mean(tmp_path, idx: np.ndarray, name: str) -> str:
    """The adaptive-mean pattern's nodes by hand, gathering the windows ``idx``."""
    return write(tmp_path, [
        helper.make_node("Transpose", ["x"], ["hwnc"], name="there", perm=[2, 3, 0, 1]),
        helper.make_node("GatherND", ["hwnc", "idx"], ["taps"], name="gather"),
        helper.make_node("Transpose", ["taps"], ["nc"], name="back", perm=[4, 5, 0, 1, 2, 3]),
        helper.make_node("ReduceMean", ["nc", "axes"], ["y"], name="mean", keepdims=0)],
        {"idx": idx.astype(np.int64), "axes": np.array([-3, -1], np.int64)},
        in_shape=(1, 2, 10, 9), opset=18, name=name)


def test_gathered_windows_other_than_adaptive_ones_are_not_an_adaptive_pool(tmp_path):
    """PyTorch's windows are one AdaptivePool; windows one row lower are the gather and the
    mean they are. Both judged by onnxruntime."""
    rows = np.array([[0, 1, 2, 3], [3, 4, 5, 6], [6, 7, 8, 9]])  # 10 rows into 3 of 4
    cols = np.array([[0, 1, 2], [2, 3, 4], [4, 5, 6], [6, 7, 8]])  # 9 columns into 4 of 3
    idx = np.stack(np.broadcast_arrays(rows[:, :, None, None], cols[None, None]), axis=-1)
    x = photo((1, 2, 10, 9))
    for windows, kinds in ((idx, ["AdaptivePool"]),
                           (np.minimum(idx + [1, 0], [9, 8]),
                            ["Transpose", "GatherND", "Transpose", "Reduce"])):
        path = gathered_mean(tmp_path, windows, kinds[0])
        graph = from_onnx(path)
        assert [type(n.op).__name__ for n in graph.nodes] == kinds
        assert rel_err(simulate(graph, x).output, onnxruntime_output(path, x)) < 1e-6


# ---- If ------------------------------------------------------------------------------


def branch(op: str, name: str):
    return helper.make_graph([helper.make_node(op, ["x"], [f"{name}_out"], name=name)], name,
                             [], [helper.make_tensor_value_info(f"{name}_out", FLOAT, None)])


def if_on(cond_nodes, inits, tmp_path) -> str:
    return write(tmp_path, [*cond_nodes, helper.make_node(
        "If", ["cond"], ["y"], name="choose", then_branch=branch("Relu", "then"),
        else_branch=branch("Sigmoid", "other"))], inits, in_shape=(1, 3, 4, 5))


def test_an_if_that_the_shapes_decide_is_the_branch_it_takes(tmp_path):
    """TorchScript's squeeze is such an If; here: Relu when x has 3 channels, else Sigmoid,
    whose branches read x from the graph around them."""
    x = photo((1, 3, 4, 5)) - 0.5
    path = if_on([helper.make_node("Shape", ["x"], ["shape"], name="shape"),
                  helper.make_node("Gather", ["shape", "axis"], ["channels"], name="gather"),
                  helper.make_node("Equal", ["channels", "three"], ["cond"], name="equal")],
                 {"axis": np.array(1, np.int64), "three": np.array(3, np.int64)}, tmp_path)
    graph = from_onnx(path)
    assert [type(n.op).__name__ for n in graph.nodes] == ["Relu"]
    assert rel_err(simulate(graph, x).output, onnxruntime_output(path, x)) == 0


def test_an_if_on_the_values_is_refused_by_name(tmp_path):
    """Its condition comes from x's values: one line naming the If (not an evaluator's
    error on a tensor it could not find)."""
    path = if_on([helper.make_node("ReduceMax", ["x"], ["top"], name="top", keepdims=0),
                  helper.make_node("Greater", ["top", "zero"], ["cond"], name="positive")],
                 {"zero": np.array(0.0, np.float32)}, tmp_path)
    with pytest.raises(ModelError) as e:
        from_onnx(path)
    message = str(e.value)
    assert "If x1 ('choose')" in message and "\n" not in message
    assert "known results" not in message
