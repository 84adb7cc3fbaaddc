"""Attention and transformers through ONNX: the tensors torch's exporters write with the
batch axis moved (the heads merged into it, the sequence before it, q, k and v before it)
held as views (``onnx_held``). Every attention of test_attention exported by both exporters,
at a batch of two and of one, DETR (its published sequence-first form and batch first,
post- and pre-norm), a MobileViT block (the batch merged with its patches' pixels), two
Swin blocks (the batch merged with the windows), a ViT (its class token a constant of the
Concat), PVT's, SegFormer's and Swin V2's attentions (F.normalize's reduction, Clip and
Expand of held tensors) and the one image of a batch of one taken by index, each against
onnxruntime on the file; a transposed batch read where it is, as the file computes it; a
reader that would mix the samples of a batch, and an output whose first axis joins the
batch with others, refused by name."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

torch = pytest.importorskip("torch")
from strategies import export_onnx, onnxruntime_output, photo, rel_err  # noqa: E402
from test_attention import (  # noqa: E402
    NETS,
    DetrLike,
    MobileViT,
    PyramidBlocks,
    SequenceFirst,
    Swin,
    ViT,
)
from test_torch_import import FirstImage  # noqa: E402

from npusim import ops, simulate  # noqa: E402
from npusim.errors import ModelError  # noqa: E402
from npusim.frontends.onnx_import import from_onnx  # noqa: E402
from npusim.frontends.torch_import import from_torch  # noqa: E402

nn, F = torch.nn, torch.nn.functional


def assert_runs_as_onnxruntime(path, x, archs=("systolic-32x32-ws",)):
    graph = from_onnx(path)
    reference = onnxruntime_output(path, x)
    for arch in archs:
        assert rel_err(simulate(graph, x, arch).output, reference) < 1e-5
    return graph


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
@pytest.mark.parametrize("name", list(NETS))
def test_attention_exports_equal_onnxruntime(name, exporter, tmp_path):
    x = photo((2, 3, 12, 16))
    path = export_onnx(NETS[name]().eval(), x, tmp_path / "attention.onnx", exporter)
    graph = assert_runs_as_onnxruntime(path, x)
    assert any(isinstance(n.op, ops.MatMul) for n in graph.nodes)


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
@pytest.mark.parametrize("name", ["self-attention", "cross-attention", "sdpa causal",
                                  "timm unbind", "timm index, written out"])
def test_a_batch_of_one_whose_reshapes_drop_it_equals_onnxruntime(name, exporter, tmp_path):
    """At a batch of one an exporter's reshapes write the heads where the batch was
    ((1, h, L, d) to (h, L, d)): the batch is merged, not lost."""
    x = photo((1, 3, 12, 16))
    path = export_onnx(NETS[name]().eval(), x, tmp_path / "attention.onnx", exporter)
    assert_runs_as_onnxruntime(path, x, ("systolic-32x32-ws", "sparse-pairs-32x32",
                                         "input-reuse-1024"))


@pytest.mark.parametrize("name, exporter", [("self-attention", "torchscript"),
                                            ("timm unbind", "torchscript"), ("sdpa", "dynamo")])
def test_the_views_cost_no_more_data_moves_than_the_module_imported(name, exporter, tmp_path):
    """The exporters' chains of reshapes and transposes, followed as views, move data
    (``Transpose``, ``Slice``) no more often than ``from_torch``'s import of the module."""
    x, net = photo((2, 3, 12, 16)), NETS[name]().eval()
    path = export_onnx(net, x, tmp_path / "attention.onnx", exporter)

    def moves(graph):
        return sum(isinstance(n.op, (ops.Transpose, ops.Slice)) for n in graph.nodes)

    assert moves(from_onnx(path)) <= moves(from_torch(net, x))


DETRS = {"sequence first": SequenceFirst, "sequence first, pre-norm": lambda: SequenceFirst(
    norm_first=True), "batch first": DetrLike, "batch first, pre-norm": lambda: DetrLike(
    norm_first=True, activation="gelu")}


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("name", list(DETRS))
def test_detr_exports_equal_onnxruntime(name, batch, tmp_path):
    """torch's dynamo exporter (TorchScript's cannot write the queries' pooling)."""
    x = photo((batch, 3, 12, 16))
    path = export_onnx(DETRS[name]().eval(), x, tmp_path / "detr.onnx", "dynamo")
    graph = assert_runs_as_onnxruntime(path, x, ("systolic-32x32-ws", "sparse-pairs-32x32"))
    assert sum(isinstance(n.op, ops.LayerNorm) for n in graph.nodes) >= 10


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_a_mobilevit_block_equals_onnxruntime(exporter, batch, tmp_path):
    """``from_torch`` refuses its reshapes (the batch merged with the patches' pixels); its
    ONNX file imports."""
    x = photo((batch, 16, 16, 12))
    path = export_onnx(MobileViT().eval(), x, tmp_path / "mobilevit.onnx", exporter)
    assert_runs_as_onnxruntime(path, x, ("systolic-32x32-ws", "sparse-pairs-32x32",
                                         "input-reuse-1024"))


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_swin_blocks_equal_onnxruntime(exporter, batch, tmp_path):
    """The batch merged with the windows, a bias added along the heads, a mask along the
    windows once the batch is apart again."""
    x = photo((batch, 3, 32, 32))
    path = export_onnx(Swin().eval(), x, tmp_path / "swin.onnx", exporter)
    assert_runs_as_onnxruntime(path, x, ("systolic-32x32-ws", "sparse-pairs-32x32"))


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_a_vision_transformer_equals_onnxruntime(exporter, batch, tmp_path):
    """Its class token an initialiser expanded to the batch (folded: a constant of the
    Concat), the patches' tokens, timm's attention, the head on the class token."""
    x = photo((batch, 3, 16, 16))
    path = export_onnx(ViT().eval(), x, tmp_path / "vit.onnx", exporter)
    graph = assert_runs_as_onnxruntime(path, x, ("systolic-32x32-ws", "sparse-pairs-32x32"))
    assert sum(isinstance(n.op, ops.Concat) and bool(n.op.constants) for n in graph.nodes) == 1


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_pvt_segformer_and_swin_v2_attentions_equal_onnxruntime(exporter, batch, tmp_path):
    """F.normalize exported as ReduceL2 (its axes kept), Clip, Expand and Div, each of a held
    tensor, run on its canonical form."""
    x = photo((batch, 3, 32, 32))
    path = export_onnx(PyramidBlocks().eval(), x, tmp_path / "pyramid.onnx", exporter)
    assert_runs_as_onnxruntime(path, x, ("systolic-32x32-ws", "sparse-pairs-32x32"))


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_the_one_image_of_a_batch_of_one_taken_by_index_equals_onnxruntime(exporter, tmp_path):
    """``x[0]``, ``select`` and ``unbind`` of a batch of one, exported as Gathers of the batch
    axis: the image without its batch axis, held; at a batch of two, one image of two is
    refused naming the Gather."""
    x = photo((1, 3, 6, 7))
    assert_runs_as_onnxruntime(export_onnx(FirstImage(), x, tmp_path / "one.onnx", exporter), x)
    two = export_onnx(FirstImage(), photo((2, 3, 6, 7)), tmp_path / "two.onnx", exporter)
    with pytest.raises(ModelError, match=r"Gather x3 \(node '[^']+': takes entries of axis 0 "
                                         r"of \(2, 8, 6, 7\), which holds the batch"):
        from_onnx(two)


def onnx_file(tmp_path, nodes, inits=None, out_shape=None, in_shape=(2, 3, 4, 5)):
    """An ONNX file reading ``x`` (of ``in_shape``) and writing ``y``."""
    graph = helper.make_graph(
        nodes, "held", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=8)
    path = tmp_path / "held.onnx"
    onnx.save(onnx.shape_inference.infer_shapes(model), str(path))
    return path


def node(op, inputs, output, **attrs):
    return helper.make_node(op, inputs, [output], name=output, **attrs)


HEADS = [node("Reshape", ["x", "s"], "t", allowzero=0)]  # (2, 3, 20) to (6, 20): heads merged
SHAPE = {"s": np.array([6, 20], np.int64)}


@pytest.mark.parametrize("nodes, inits, in_shape, why", [
    (HEADS + [node("Softmax", ["t"], "y", axis=0)], SHAPE, (2, 3, 4, 5),
     r"Softmax x1 \(node 'y': reads 't' \(shape \(6, 20\), the batch in axis 0 with other "
     r"axes\) and works across axis 0, which holds the batch: that would mix the samples of a "
     r"batch"),
    (HEADS + [node("ReduceMean", ["t"], "y", axes=[1], keepdims=0)], SHAPE, (2, 3, 4, 5),
     r"ReduceMean x1 \(node 'y': reads 't' \(shape \(6, 20\), the batch in axis 0 with other "
     r"axes\) and drops the axes it reduces; the IR follows a reduction of such a tensor that "
     r"keeps them \(keepdims=1\)"),
    (HEADS + [node("ReduceL2", ["t"], "y", axes=[0])], SHAPE, (2, 3, 4, 5),
     r"ReduceL2 x1 \(node 'y': reads 't' \(shape \(6, 20\), the batch in axis 0 with other "
     r"axes\) and works across axis 0, which holds the batch"),
    (HEADS + [node("Expand", ["t", "e"], "y")], SHAPE | {"e": np.array([2, 6, 20], np.int64)},
     (2, 3, 4, 5), r"Expand x1 \(node 'y': reads 't' \(shape \(6, 20\), the batch in axis 0 "
     r"with other axes\) and expands \(6, 20\) to \(2, 6, 20\); the IR follows an Expand of "
     r"such a tensor that keeps its axes"),
    (HEADS + [node("Add", ["t", "c"], "y")], SHAPE | {"c": np.ones((6, 1), np.float32)},
     (2, 3, 4, 5), r"Add x1 \(node 'y': a constant of shape \(6, 1\) varies along axis 0, "
     r"which holds the batch"),
    ([node("Transpose", ["x"], "t", perm=[1, 0, 2, 3]),
      node("Reshape", ["t", "s"], "y", allowzero=0)], {"s": np.array([6, 2, 4, 5], np.int64)},
     (4, 3, 4, 5), r"Reshape x1 \(node 'y': reshapes \(3, 4, 4, 5\) to \(6, 2, 4, 5\), which "
     r"cuts the batch axis where the IR cannot follow it"),
])
def test_what_would_mix_a_batch_is_refused_naming_the_axis(nodes, inits, in_shape, why,
                                                           tmp_path):
    with pytest.raises(ModelError, match=why):
        from_onnx(onnx_file(tmp_path, nodes, inits, in_shape=in_shape))


def test_an_output_whose_axes_join_the_batch_with_others_is_refused(tmp_path):
    path = onnx_file(tmp_path, HEADS[:1] + [node("Identity", ["t"], "y")], SHAPE)
    with pytest.raises(ModelError, match=r"output 'y' \(shape \(6, 20\), the batch in axis 0 "
                                         r"with other axes\): an output's first axis must be "
                                         r"the batch or one other axis, not several joined"):
        from_onnx(path)


@pytest.mark.parametrize("nodes, transposes", [
    ([node("Transpose", ["x"], "t", perm=[1, 0, 2, 3]), node("Add", ["t", "x"], "y")], 1),
    ([node("Transpose", ["x"], "y", perm=[1, 0, 2, 3])], 1),
    ([node("Transpose", ["x"], "t", perm=[2, 1, 0, 3]),
      node("ReduceMax", ["t"], "y", axes=[1], keepdims=0)], 1),
    ([node("Transpose", ["x"], "t", perm=[2, 1, 0, 3]), node("ReduceMax", ["t"], "y", axes=[1])],
     2),
])
def test_a_transposed_batch_read_where_it_is_is_what_the_file_computes(nodes, transposes,
                                                                       tmp_path):
    """A tensor whose batch a transpose moved, read by an op that takes it where it is (a
    sum with the tensor before it, a reduction that drops its axes, the graph's output), is
    that transpose; a reduction that keeps its axes runs on the canonical form (one
    transpose there), its result given back as the file has it (one more)."""
    path = onnx_file(tmp_path, nodes, in_shape=(2, 2, 4, 5))
    graph = assert_runs_as_onnxruntime(path, photo((2, 2, 4, 5)))
    assert sum(isinstance(n.op, ops.Transpose) for n in graph.nodes) == transposes


def test_a_sequence_first_layer_norm_and_product_equal_onnxruntime(tmp_path):
    """Ops on tensors whose batch is not first, written by hand: a layer norm over the last
    axis and a product by a matrix of an L x N x C tensor, back to N x C x L."""
    nodes = [node("Reshape", ["x", "s"], "t", allowzero=0),
             node("Transpose", ["t"], "l", perm=[2, 0, 1]),  # L x N x C
             node("LayerNormalization", ["l", "g", "b"], "n", axis=-1, epsilon=1e-5),
             node("MatMul", ["n", "w"], "p"), node("Relu", ["p"], "r"),
             node("Transpose", ["r"], "y", perm=[1, 2, 0])]
    rng = np.random.default_rng(3)
    inits = {"s": np.array([2, 3, 20], np.int64), "g": rng.standard_normal(3, np.float32),
             "b": rng.standard_normal(3, np.float32), "w": rng.standard_normal((3, 7), np.float32)}
    path = onnx_file(tmp_path, nodes, inits)
    x = photo((2, 3, 4, 5))
    assert_runs_as_onnxruntime(path, x, ("systolic-32x32-ws", "input-reuse-1024"))


def test_isnan_marks_exactly_the_nans_onnxruntime_marks(tmp_path):
    """IsNaN as a mask of 1.0 and 0.0, then a Where zeroing them, as torch writes attention
    under a boolean mask; the NaNs here are logarithms of negative values."""
    nodes = [node("Sub", ["x", "c"], "d"), node("Log", ["d"], "l"), node("IsNaN", ["l"], "m"),
             node("Where", ["m", "z", "l"], "y")]
    path = onnx_file(tmp_path, nodes, {"c": np.float32(0.5), "z": np.float32(0.0)})
    x = photo((2, 3, 4, 5))
    assert 0 < np.count_nonzero(x < 0.5) < x.size
    graph = from_onnx(path)
    np.testing.assert_array_equal(simulate(graph, x, "systolic-32x32-ws").output,
                                  onnxruntime_output(path, x))
