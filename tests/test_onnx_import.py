"""from_onnx judged by onnxruntime (and, where onnxruntime cannot run a file, by onnx's
own reference evaluator and the PyTorch module that was exported), on real photographs.

Files are exported by torch.onnx (TorchScript exporter, ``dynamo=False``: the default
dynamo exporter needs onnxscript, which npusim does not depend on) or written op by op
with ``onnx.helper`` to reach attributes exporters never emit. Each imported graph runs
through ``npusim.simulate``; outputs must match to 1e-4 of max |reference|.
"""

import importlib.util
import warnings
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from strategies import export_onnx, photo, rel_err  # noqa: E402

from npusim import ops, simulate  # noqa: E402
from npusim.errors import ModelError  # noqa: E402
from npusim.frontends import images, load_model, onnx_import, zoo  # noqa: E402
from npusim.frontends.onnx_import import from_onnx  # noqa: E402

NETS = Path(__file__).parent / "data" / "import" / "nets.py"
HEAVY = {"vgg16", "resnet50", "alexnet"}
FLOAT = TensorProto.FLOAT
rng = np.random.default_rng(0)


def onnxruntime_output(path, x) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


def reference_output(path, x) -> np.ndarray:
    session = ReferenceEvaluator(str(path))
    return session.run(None, {session.input_names[0]: x})[0]


def check(path, x, judge=onnxruntime_output, **kwargs):
    """Import, simulate, compare with ``judge``; returns the graph."""
    graph = from_onnx(path, **kwargs)
    out = simulate(graph, x).output
    ref = judge(path, x)
    assert out.shape == ref.shape
    assert rel_err(out, ref) < 1e-4
    return graph


def export(module, x, path) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), (torch.from_numpy(x),), str(path), dynamo=False)
    return path


def weights(*shape) -> np.ndarray:
    return (rng.standard_normal(shape) * 0.3).astype(np.float32)


def write(tmp_path, nodes, inits=None, in_shape=(1, 3, 12, 11), opset=17, name="m",
          in_type=FLOAT, inputs=None, outputs=None) -> Path:
    """An ONNX file of ``nodes`` reading ``x`` and writing ``y``."""
    inputs = inputs or [helper.make_tensor_value_info("x", in_type, list(in_shape))]
    graph = helper.make_graph(
        nodes, name, inputs, outputs or [helper.make_tensor_value_info("y", FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=8)
    try:  # the checker wants the output's shape: let onnx infer it
        model = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - a deliberately broken graph keeps its unknown shape
        pass
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return path


def node(op, inputs, output="y", **attrs):
    return helper.make_node(op, inputs, [output], name=f"{op.lower()}_{output}", **attrs)


def op_kinds(graph) -> list[str]:
    return [type(n.op).__name__ for n in graph.nodes]


# ---- convolution ------------------------------------------------------------------------


def test_grouped_dilated_strided_conv_with_asymmetric_pads(tmp_path):
    path = write(tmp_path, [node("Conv", ["x", "w", "b"], pads=[1, 0, 2, 3], strides=[2, 1],
                                 dilations=[2, 3], group=3)],
                 {"w": weights(9, 2, 3, 3), "b": weights(9)}, in_shape=(1, 6, 17, 16))
    graph = check(path, photo((1, 6, 17, 16)))
    layer = graph.layers["conv_y"]
    assert (layer.padding, layer.stride, layer.dilation, layer.groups) == \
        ((1, 2, 0, 3), (2, 1), (2, 3), 3)


def test_weights_in_an_external_data_file_and_that_file_missing(tmp_path):
    path = write(tmp_path, [node("Conv", ["x", "w", "b"], pads=[1, 1, 1, 1])],
                 {"w": weights(8, 3, 3, 3), "b": weights(8)})
    model = onnx.load(str(path))
    onnx.save(model, str(path), save_as_external_data=True, location="m.weights",
              size_threshold=0)
    assert (tmp_path / "m.weights").stat().st_size == (8 * 3 * 3 * 3 + 8) * 4
    check(path, photo((1, 3, 12, 11)))  # read from the data file beside the model
    (tmp_path / "m.weights").unlink()
    with pytest.raises(ModelError, match=r"m\.onnx: cannot read its external weight data: "
                                         r".*m\.weights.*") as e:
        from_onnx(path)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
@pytest.mark.parametrize("kernel, strides", [((4, 3), (2, 3)), ((2, 2), (1, 1)),
                                             ((1, 1), (2, 2))])
def test_conv_auto_pad(tmp_path, auto_pad, kernel, strides):
    path = write(tmp_path, [node("Conv", ["x", "w"], auto_pad=auto_pad, strides=list(strides))],
                 {"w": weights(4, 3, *kernel)}, in_shape=(1, 3, 13, 10))
    check(path, photo((1, 3, 13, 10)))


def test_same_padding_with_dilation_judged_by_the_onnx_reference(tmp_path):
    # onnxruntime refuses SAME with dilation; onnx's own evaluator runs it
    path = write(tmp_path, [node("Conv", ["x", "w"], auto_pad="SAME_LOWER", dilations=[2, 3])],
                 {"w": weights(4, 3, 2, 4)}, in_shape=(1, 3, 13, 10))
    graph = check(path, photo((1, 3, 13, 10)), judge=reference_output)
    assert graph.layers["conv_y"].padding == (1, 1, 5, 4)


def test_depthwise_and_pointwise_stride_2(tmp_path):
    path = write(tmp_path, [node("Conv", ["x", "dw"], "d", group=3, pads=[1, 1, 1, 1]),
                            node("Conv", ["d", "pw", "b"], strides=[2, 2])],
                 {"dw": weights(3, 1, 3, 3), "pw": weights(8, 3, 1, 1), "b": weights(8)})
    graph = check(path, photo((1, 3, 12, 11)))
    assert graph.layers["conv_d"].is_depthwise and graph.layers["conv_y"].stride == (2, 2)


# ---- fully connected --------------------------------------------------------------------


@pytest.mark.parametrize("trans_b, alpha, beta, bias_shape", [
    (0, 1.0, 1.0, (5,)), (1, 0.5, 2.0, (1, 5)), (1, 1.0, 1.0, None), (0, 2.0, 0.5, (1,))])
def test_gemm_attributes(tmp_path, trans_b, alpha, beta, bias_shape):
    b = weights(5, 36) if trans_b else weights(36, 5)
    inits = {"b": b} | ({"c": weights(*bias_shape)} if bias_shape else {})
    path = write(tmp_path, [node("Flatten", ["x"], "f"),
                            node("Gemm", ["f", "b"] + (["c"] if bias_shape else []),
                                 transB=trans_b, alpha=alpha, beta=beta)],
                 inits, in_shape=(2, 4, 3, 3))
    graph = check(path, photo((2, 4, 3, 3)))
    assert op_kinds(graph) == ["Flatten", "Conv"]


def test_matmul_plus_bias_becomes_one_fully_connected_layer(tmp_path):
    path = write(tmp_path, [node("Flatten", ["x"], "f"), node("MatMul", ["f", "w"], "m"),
                            node("Add", ["m", "b"])],
                 {"w": weights(36, 7), "b": weights(7)}, in_shape=(1, 4, 3, 3))
    graph = check(path, photo((1, 4, 3, 3)))
    assert op_kinds(graph) == ["Flatten", "Conv"] and graph.nodes[1].op.bias is not None


# ---- weights in other types -------------------------------------------------------------


def test_float16_weights(tmp_path):
    path = write(tmp_path, [node("Cast", ["w16"], "w", to=FLOAT), node("Conv", ["x", "w"])],
                 {"w16": weights(4, 3, 3, 3).astype(np.float16)})
    check(path, photo((1, 3, 12, 11)))


def test_int8_weights_cast_and_dequantised_per_channel(tmp_path):
    q = rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    path = write(tmp_path, [node("Cast", ["q"], "w1", to=FLOAT), node("Conv", ["x", "w1"], "a"),
                            node("DequantizeLinear", ["q", "scale", "zero"], "w2", axis=0),
                            node("Conv", ["x", "w2"], "b"), node("Concat", ["a", "b"], axis=1)],
                 {"q": q, "scale": np.array([0.01, 0.02, 0.005, 0.03], np.float32),
                  "zero": np.array([0, 3, -2, 1], np.int8)})
    graph = check(path, photo((1, 3, 12, 11)))
    np.testing.assert_array_equal(graph.layers["conv_a"].K, 4)
    np.testing.assert_array_equal(graph.node("conv_a").op.weight, q.astype(np.float32))


# ---- batch norm, activations, shape ops -------------------------------------------------


def test_batchnorm_folds_after_a_conv_and_stays_elsewhere(tmp_path):
    stats = {f"{p}{i}": v for i in (1, 2) for p, v in
             (("g", 1 + weights(4)), ("be", weights(4)), ("mu", weights(4)),
              ("var", 0.5 + rng.random(4).astype(np.float32)))}
    path = write(tmp_path, [
        node("Conv", ["x", "w"], "c"),
        node("BatchNormalization", ["c", "g1", "be1", "mu1", "var1"], "n", epsilon=1e-3),
        node("Relu", ["n"], "r"),
        node("BatchNormalization", ["r", "g2", "be2", "mu2", "var2"])],
        {"w": weights(4, 3, 3, 3)} | stats)
    graph = check(path, photo((1, 3, 12, 11)))
    assert op_kinds(graph) == ["Conv", "Relu", "BatchNorm"]


@pytest.mark.parametrize("opset, make, kind", [
    (11, lambda: node("Clip", ["x", "lo", "hi"]), "Relu6"),
    (11, lambda: node("Clip", ["x", "lo"]), "Relu"),
    (6, lambda: node("Clip", ["x"], min=0.0, max=6.0), "Relu6"),
    (17, lambda: node("LeakyRelu", ["x"], alpha=0.2), "LeakyRelu"),
    (17, lambda: node("PRelu", ["x", "slope"]), "PRelu"),
    (17, lambda: node("Softmax", ["x"], axis=1), "Softmax"),
    (17, lambda: node("LogSoftmax", ["x"], axis=1), "Softmax"),
    (17, lambda: node("LRN", ["x"], size=5, alpha=0.02, beta=0.75, bias=1.5),
     "LocalResponseNorm"),
    (13, lambda: node("LRN", ["x"], size=3), "LocalResponseNorm"),
    (11, lambda: node("LogSoftmax", ["x"], axis=3), "Softmax"),
    (11, lambda: node("Softmax", ["x"], axis=3), "Softmax"),
    (17, lambda: node("GlobalAveragePool", ["x"]), "GlobalAvgPool"),
    (17, lambda: node("GlobalMaxPool", ["x"]), "Reduce"),
    (17, lambda: node("Elu", ["x"], alpha=0.5), "Elu"),
    (17, lambda: node("Softplus", ["x"]), "Softplus"),
    (18, lambda: node("Mish", ["x"]), "Mish"),
    (17, lambda: node("Abs", ["x"]), "Abs"),
    (17, lambda: node("Exp", ["x"]), "Exp"),
    (17, lambda: node("Add", ["x", "slope"]), "BatchNorm"),
])
def test_activations_and_channel_ops(tmp_path, opset, make, kind):
    inits = {"lo": np.array(0, np.float32), "hi": np.array(6, np.float32),
             "slope": rng.random((3, 1, 1)).astype(np.float32)}
    path = write(tmp_path, [make()], inits, opset=opset)
    x = photo((1, 3, 12, 11)) * 4  # values past 6 for the clips
    assert op_kinds(check(path, x)) == [kind]


def _spelled_hardswish(div_first: bool, three: float = 3.0, read_add: bool = False):
    """A conv, then ``c * relu6(c + three) / 6`` written out as Add, Clip, Mul and Div (the
    Div before the Mul when ``div_first``), then a conv; ``read_add``: the second conv
    also reads the Add's value (an extra Add of the two)."""
    nodes = [node("Conv", ["x", "w1"], "c", pads=[1, 1, 1, 1]),
             node("Add", ["c", "three"], "a"),
             node("Clip", ["a", "lo", "hi"], "r")]
    if div_first:
        nodes += [node("Div", ["r", "six"], "d"), node("Mul", ["c", "d"], "h")]
    else:
        nodes += [node("Mul", ["r", "c"], "m"), node("Div", ["m", "six"], "h")]
    tail = "h"
    if read_add:
        nodes.append(node("Add", ["h", "a"], "ha"))
        tail = "ha"
    nodes.append(node("Conv", [tail, "w2"]))
    inits = {"w1": weights(4, 3, 3, 3), "w2": weights(5, 4, 1, 1),
             "three": np.array(three, np.float32), "lo": np.array(0, np.float32),
             "hi": np.array(6, np.float32), "six": np.array(6, np.float32)}
    return nodes, inits


@pytest.mark.parametrize("div_first", [False, True])
def test_a_written_out_hardswish_becomes_one_node(tmp_path, div_first):
    """``x * relu6(x + 3) / 6`` in either order is one HardSwish (counted as one op on the
    vector unit, as a network that names it); with 4 for 3, or an intermediate value read
    outside the pattern, the ops stay as they are. Outputs judged by onnxruntime."""
    x = photo((1, 3, 12, 11)) * 4  # values past 3 and below -3
    graph = check(write(tmp_path, *_spelled_hardswish(div_first)), x)
    assert op_kinds(graph) == ["Conv", "HardSwish", "Conv"]
    assert graph.nodes[1].inputs == (graph.nodes[0].name,)
    kept = op_kinds(check(write(tmp_path, *_spelled_hardswish(div_first, 4.0), name="f"), x))
    assert "HardSwish" not in kept and len(kept) == 6
    read = op_kinds(check(write(tmp_path, *_spelled_hardswish(div_first, read_add=True),
                                name="r"), x))
    assert "HardSwish" not in read and len(read) == 7


@pytest.mark.parametrize("make, inits, kinds", [
    (lambda x: node("Selu", [x]), {}, ["Elu", "BatchNorm"]),
    (lambda x: node("Selu", [x], alpha=1.2, gamma=0.8), {}, ["Elu", "BatchNorm"]),
    (lambda x: node("Tile", [x, "r"]), {"r": np.array([1, 2, 1, 3], np.int64)},
     ["Reshape", "Broadcast", "Reshape"]),
    (lambda x: node("Tile", [x, "r"]), {"r": np.array([1, 1, 1, 1], np.int64)}, []),
])
def test_selu_and_tile(tmp_path, make, inits, kinds):
    """SELU (its default and given alpha and gamma) and Tile (PyTorch's ``repeat``) of a
    conv's output: the whole map repeated along channels and columns, or not at all."""
    path = write(tmp_path, [node("Conv", ["x", "w"], "c"), make("c")],
                 {"w": weights(4, 3, 3, 3)} | inits)
    assert op_kinds(check(path, photo((1, 3, 12, 11)) * 4)) == ["Conv", *kinds]


@pytest.mark.parametrize("index, axis, kinds", [
    (np.array(2, np.int64), 2, ["Slice", "Reshape"]),          # x[:, :, 2]: the axis dropped
    (np.array(-1, np.int64), 1, ["Slice", "Reshape"]),         # x[:, -1]
    (np.array([1, 3, 5], np.int64), 3, ["Slice"]),             # every other column from 1
    (np.array([4], np.int64), 3, ["Slice"]),                   # one column, the axis kept
])
def test_gather_by_constant_indices_is_indexing(tmp_path, index, axis, kinds):
    """Gather as exporters write ``x[:, i]`` and ``select`` (a scalar index: the axis
    dropped) and a run of indices in equal steps (a strided slice): ``rules.index``;
    equal to onnxruntime."""
    path = write(tmp_path, [node("Conv", ["x", "w"], "c"),
                            node("Gather", ["c", "i"], "y", axis=axis)],
                 {"w": weights(4, 3, 3, 3), "i": index})
    assert op_kinds(check(path, photo((1, 3, 12, 11)))) == ["Conv", *kinds]


@pytest.mark.parametrize("dynamo", [False, True])
def test_exported_integer_indexing_imports(tmp_path, dynamo):
    """PyTorch's ``x[:, 0]``, ``x[:, :, -1]`` and ``select`` as both exporters write them
    (Gather by a scalar, or Slice and Squeeze): equal to onnxruntime."""
    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)

        def forward(self, x):
            y = self.conv(x)
            tokens = y.flatten(2).transpose(1, 2)
            return tokens[:, 0] + y[:, :, -1].mean(2) * y.select(3, 1).amax(2)

    x = photo((1, 3, 7, 6))
    path = tmp_path / "head.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Head().eval(), (torch.from_numpy(x),), str(path), dynamo=dynamo)
    kinds = op_kinds(check(path, x))
    assert "Fallback" not in kinds and kinds.count("Slice") >= 3


def test_a_gather_of_the_batch_axis_takes_the_one_image_of_a_batch_of_one(tmp_path):
    """``x[0]`` exported at a batch of one: the image without its batch axis (held), given as
    the graph's output, equal to onnxruntime; at a batch of two it takes one image of two:
    refused."""
    nodes = [node("Conv", ["x", "w"], "c"), node("Gather", ["c", "i"], "y", axis=0)]
    inits = {"w": weights(4, 3, 3, 3), "i": np.array(0, np.int64)}
    check(write(tmp_path, nodes, inits), photo((1, 3, 12, 11)))
    with pytest.raises(ModelError, match=r"Gather x1 \(node 'gather_y': takes entries of "
                                         r"axis 0 of \(2, 4, 10, 9\), which holds the batch"):
        from_onnx(write(tmp_path, nodes, inits, in_shape=(2, 3, 12, 11), name="two"))


@pytest.mark.parametrize("index, axis, message", [
    (np.array([2, 0], np.int64), 1, r"indices \[2, 0\] on axis 1: the IR gathers a run"),
    (np.array([0, 1, 3], np.int64), 1, r"indices \[0, 1, 3\] on axis 1"),
    (np.array([[[0, 1]]], np.int64), 1, r"indices of shape \(1, 1, 2\)"),
    (np.array([[0, 1], [3, 2]], np.int64), 1, r"indices \[3, 2\] on axis 1: the IR gathers"),
    (np.array(4, np.int64), 1, r"indices 4 on axis 1 of \(1, 4, 10, 9\): out of range"),
])
def test_gather_the_ir_cannot_index_is_refused(tmp_path, index, axis, message):
    path = write(tmp_path, [node("Conv", ["x", "w"], "c"),
                            node("Gather", ["c", "i"], "y", axis=axis)],
                 {"w": weights(4, 3, 3, 3), "i": index})
    with pytest.raises(ModelError, match=message):
        from_onnx(path)


@pytest.mark.parametrize("to, kinds", [(TensorProto.FLOAT, ["Conv", "Relu"]),
                                       (TensorProto.DOUBLE, ["Conv", "Relu"]),
                                       (TensorProto.FLOAT16, None), (TensorProto.INT32, None)])
def test_a_cast_of_a_computed_tensor_to_a_float_type_passes_its_values_on(tmp_path, to, kinds):
    """x.float() exported: a Cast to FLOAT (or DOUBLE) holds the float32 values unchanged;
    a cast that rounds them (FLOAT16) or truncates them (INT32) is refused, naming it."""
    path = write(tmp_path, [node("Conv", ["x", "w"], "c"), node("Cast", ["c"], "d", to=to),
                            node("Cast", ["d"], "e", to=TensorProto.FLOAT),
                            node("Relu", ["e"], "y")], {"w": weights(4, 3, 3, 3)})
    if kinds is None:
        name = TensorProto.DataType.Name(to)
        with pytest.raises(ModelError, match=rf"Cast x1 \(node 'cast_d': to={name}: the IR "
                                             r"computes in float32"):
            from_onnx(path)
        return
    graph = from_onnx(path)
    assert op_kinds(graph) == kinds
    x = np.random.default_rng(0).standard_normal((1, 3, 12, 11)).astype(np.float32)
    assert rel_err(simulate(graph, x).output, onnxruntime_output(path, x)) < 1e-6


def test_a_standard_op_name_in_another_domain_is_refused_naming_the_domain(tmp_path):
    """onnxruntime's contrib QuantizeLinear (com.microsoft) was refused as an unsupported op
    while the same message listed QuantizeLinear as supported."""
    graph = helper.make_graph(
        [node("Conv", ["x", "w"], "c"), helper.make_node("Relu", ["c"], ["y"], name="relu_y",
                                                         domain="com.microsoft")],
        "m", [helper.make_tensor_value_info("x", FLOAT, [1, 3, 12, 11])],
        [helper.make_tensor_value_info("y", FLOAT, [1, 4, 10, 9])],
        [numpy_helper.from_array(weights(4, 3, 3, 3), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)],
                              ir_version=8)
    path = tmp_path / "contrib.onnx"
    onnx.save(model, str(path))
    with pytest.raises(ModelError, match=r"Relu x1 \(node 'relu_y': its domain is "
                                         r"com\.microsoft; npusim reads the ONNX standard"):
        from_onnx(path)


def test_matmul_of_two_computed_tensors_and_by_a_constant_over_tokens(tmp_path):
    """Attention as exporters write it: a MatMul by a constant over N x T x C tokens (a
    linear layer: a 1x1 conv between reshapes and transposes, its bias Add after it), and
    the MatMul of two computed tensors (scores by values), the IR's MatMul."""
    path = write(tmp_path, [
        node("Reshape", ["x", "tok_shape"], "t"),                # N x T x C: 1 x 12 x 6
        node("MatMul", ["t", "wq"], "q0"), node("Add", ["q0", "bq"], "q"),
        node("Transpose", ["t"], "tt", perm=[0, 2, 1]),          # N x C x T
        node("MatMul", ["q", "tt"], "s"),                          # N x T x T scores
        node("Softmax", ["s"], "p", axis=-1),
        node("MatMul", ["p", "t"], "y")],                          # N x T x C
        {"tok_shape": np.array([1, 12, 6], np.int64), "wq": weights(6, 6), "bq": weights(6)},
        in_shape=(1, 6, 3, 4))
    graph = check(path, photo((1, 6, 3, 4)))
    kinds = op_kinds(graph)
    assert kinds.count("MatMul") == 2 and kinds.count("Conv") == 1 and "Fallback" not in kinds


def test_branches_concat_add_reshape_flatten_identity_whole_slice_dropout(tmp_path):
    path = write(tmp_path, [
        node("Conv", ["x", "w1"], "a", pads=[1, 1, 1, 1]), node("Relu", ["x"], "r"),
        node("Conv", ["r", "w2"], "b", pads=[0, 1, 2, 1]), node("Add", ["a", "b"], "s"),
        node("Identity", ["s"], "i0"), node("Slice", ["i0", "lo", "hi"], "i"),
        node("Dropout", ["i"], "d"),
        node("Concat", ["d", "a"], "c", axis=1),
        node("Reshape", ["c", "shape"], "rs"), node("Flatten", ["rs"], "f"),
        node("Softmax", ["f"])],
        {"w1": weights(4, 3, 3, 3), "w2": weights(4, 3, 3, 3),
         "shape": np.array([0, 8, -1, 11], np.int64), "lo": np.array([0, 0], np.int64),
         "hi": np.array([100, 100], np.int64)})
    graph = check(path, photo((1, 3, 12, 11)))
    assert op_kinds(graph) == ["Conv", "Relu", "Conv", "Add", "Concat", "Reshape", "Flatten",
                               "Softmax"]


@pytest.mark.parametrize("op, broadcast, count, kinds", [
    ("Sum", False, 3, ["Relu", "Sigmoid", "Add"]),
    ("Sum", True, 2, ["Relu", "Sigmoid", "Reduce", "Elementwise"]),
    ("Sum", False, 1, ["Identity"]),  # the input itself: the graph's output names it
    ("Mean", False, 3, ["Relu", "Sigmoid", "Add", "BatchNorm"]),
])
def test_variadic_sum_and_mean(tmp_path, op, broadcast, count, kinds):
    """Sum of any number of inputs (the ONNX model zoo's Caffe2 ResNet-50 adds its residuals
    so), Mean likewise: judged by onnxruntime."""
    parts = [node("Relu", ["x"], "r"), node("Sigmoid", ["x"], "s"),
             node("ReduceMean", ["s"], "m", axes=[2, 3], keepdims=1)]
    inputs = (["r", "m"] if broadcast else ["x", "r", "s"])[:count]
    path = write(tmp_path, [*parts, node(op, inputs)], {})
    x = photo((1, 3, 12, 11)) - 0.5
    graph = check(path, x)
    assert op_kinds(graph) == kinds


def test_a_sum_of_three_that_broadcast_is_refused(tmp_path):
    path = write(tmp_path, [node("ReduceMean", ["x"], "m", axes=[2, 3], keepdims=1),
                            node("Relu", ["x"], "r"), node("Sum", ["x", "r", "m"])], {})
    with pytest.raises(ModelError, match=r"Sum x1 \(node 'sum_y': 3 inputs of shapes "
                                         r"\[\(1, 3, 12, 11\), \(1, 3, 12, 11\), \(1, 3, 1, 1\)\]"):
        from_onnx(path)


@pytest.mark.parametrize("name", ["light_resnet50", "light_shufflenet"])
def test_the_onnx_model_zoos_caffe2_networks_import(name):
    """The onnx package's small copies of the model zoo's ResNet-50 and ShuffleNet (their
    layers as the zoo has them, weights made constant): residual Sums, ShuffleNet's
    channel shuffle, Gemm and Softmax, judged by onnxruntime."""
    path = Path(onnx.__file__).parent / "backend/test/data/light" / f"{name}.onnx"
    if not path.exists():
        pytest.skip(f"{path} is not in this onnx wheel")
    graph = from_onnx(path, batch=1)
    assert "Add" in op_kinds(graph)
    check(path, photo(graph.input_shape))


# ---- pooling ----------------------------------------------------------------------------


@pytest.mark.parametrize("op, attrs", [
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("MaxPool", dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1], ceil_mode=1)),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                         count_include_pad=0, ceil_mode=1)),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                         count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[2, 2], strides=[2, 2], pads=[0, 1, 1, 0],
                         count_include_pad=0)),
    ("MaxPool", dict(kernel_shape=[3, 2], strides=[2, 1], pads=[2, 0, 1, 1], dilations=[2, 3])),
    ("MaxPool", dict(kernel_shape=[2, 2], strides=[2, 2], dilations=[2, 2], ceil_mode=1)),
])
def test_pools(tmp_path, op, attrs):
    check(write(tmp_path, [node(op, ["x"], **attrs)], in_shape=(1, 3, 12, 11)),
          photo((1, 3, 12, 11)))


# ---- resampling -------------------------------------------------------------------------


RESIZES = [  # mode, coordinate transformation, nearest mode, scales or None, sizes or None
    ("nearest", "asymmetric", "floor", [1, 1, 2, 2], None),
    ("nearest", "half_pixel", "round_prefer_floor", [1, 1, 3, 2], None),
    ("nearest", "asymmetric", "floor", None, [1, 3, 15, 9]),
    ("linear", "half_pixel", "round_prefer_floor", [1, 1, 2, 2], None),
    ("linear", "pytorch_half_pixel", "floor", None, [1, 3, 13, 7]),
    ("linear", "align_corners", "floor", None, [1, 3, 9, 11]),
]


@pytest.mark.parametrize("mode, transform, rounding, scales, sizes", RESIZES)
def test_resize_modes_that_the_ir_samples_alike(tmp_path, mode, transform, rounding, scales,
                                                sizes):
    inputs = ["x", "", "scales"] if scales else ["x", "", "", "sizes"]
    inits = {"scales": np.array(scales, np.float32)} if scales else \
        {"sizes": np.array(sizes, np.int64)}
    path = write(tmp_path, [node("Resize", inputs, mode=mode, nearest_mode=rounding,
                                 coordinate_transformation_mode=transform)],
                 inits, in_shape=(1, 3, 5, 4))
    graph = check(path, photo((1, 3, 5, 4)))
    assert op_kinds(graph) == ["Upsample"]
    assert graph.nodes[0].op.align_corners == (transform == "align_corners")


def test_upsample_opset_9(tmp_path):
    path = write(tmp_path, [node("Upsample", ["x", "scales"], mode="nearest")],
                 {"scales": np.array([1, 1, 2, 3], np.float32)}, opset=9)
    check(path, photo((1, 3, 12, 11)))


@pytest.mark.parametrize("mode, transform, message", [
    ("linear", "asymmetric", r"mode='linear' with coordinate_transformation_mode='asymmetric' "
                             r"and nearest_mode='round_prefer_floor' from \(5, 4\) to \(10, 8\) "
                             r"samples differently from the IR's Upsample"),
    ("cubic", "asymmetric", r"mode='cubic' with coordinate_transformation_mode='asymmetric' "
                            r"and cubic_coeff_a=-0.75 from \(5, 4\) to \(10, 8\)"),
    ("nearest", "tf_crop_and_resize", r"coordinate_transformation_mode='tf_crop_and_resize'"),
])
def test_resize_modes_the_ir_lacks_are_refused(tmp_path, mode, transform, message):
    path = write(tmp_path, [node("Resize", ["x", "", "scales"], mode=mode,
                                 coordinate_transformation_mode=transform)],
                 {"scales": np.array([1, 1, 2, 2], np.float32)}, in_shape=(1, 3, 5, 4))
    with pytest.raises(ModelError, match=message):
        from_onnx(path)


# ---- whole networks exported by torch.onnx ----------------------------------------------


def load_nets():
    spec = importlib.util.spec_from_file_location("import_nets", NETS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("factory", ["awkward", "functional"])
def test_exported_awkward_networks(tmp_path, factory):
    """Judged by onnx's reference evaluator and PyTorch: both nets hold a dilated 'same'
    conv, which torch exports as auto_pad SAME_UPPER and onnxruntime refuses to run."""
    nets = load_nets()
    module, x = getattr(nets, factory)(), photo(nets.INPUT_SHAPE)
    path = export(module, x, tmp_path / f"{factory}.onnx")
    graph = check(path, x, judge=reference_output)
    with torch.no_grad():
        assert rel_err(simulate(graph, x).output,
                              module(torch.from_numpy(x)).numpy()) < 1e-4


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.slow) if n in HEAVY else n for n in zoo.built_names()])
def test_zoo_model_exported_by_torch_equals_onnxruntime(tmp_path, name):
    from npusim.torch_ref import to_torch

    graph = zoo.build(name)
    x = zoo.input_for(name)
    path = export(to_torch(graph), x, tmp_path / f"{name}.onnx")
    imported = check(path, x)
    assert [layer.describe() for layer in imported.layers.values()] == \
        [layer.describe() for layer in graph.layers.values()]


def test_top_level_name_is_the_importer():
    import npusim

    assert npusim.from_onnx is from_onnx


def test_load_model_dispatches_onnx_with_input_shape_and_batch(tmp_path):
    inputs = [helper.make_tensor_value_info("x", FLOAT, ["N", 3, "H", "W"])]
    path = write(tmp_path, [node("Conv", ["x", "w"], strides=[2, 2])],
                 {"w": weights(4, 3, 3, 3)}, inputs=inputs)
    graph = load_model(str(path), input_shape=(3, 3, 12, 11), batch=3)
    assert graph.input_shape == (3, 3, 12, 11) and graph.output_shape == (3, 4, 5, 5)
    check(path, photo((1, 3, 12, 11)), input_shape=(1, 3, 12, 11))
    with pytest.raises(ModelError, match=r"batch=2 contradicts input_shape N=3"):
        load_model(str(path), input_shape=(3, 3, 12, 11), batch=2)


def export_batch(tmp_path, dynamic: bool) -> Path:
    """A small classifier exported at batch 1, its batch axis dynamic or fixed."""
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3, stride=2), torch.nn.ReLU(),
                              torch.nn.Flatten(), torch.nn.Linear(6 * 7 * 7, 5))
    path = tmp_path / ("dynamic.onnx" if dynamic else "fixed.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net.eval(), (torch.from_numpy(photo((1, 3, 16, 16))),), str(path),
                          input_names=["x"], dynamo=False,
                          dynamic_axes={"x": {0: "N"}} if dynamic else None)
    return path


def test_batch_fixes_a_dynamic_onnx_batch(tmp_path):
    path = export_batch(tmp_path, dynamic=True)
    x = np.stack([images.load_image(name, (16, 16)) for name in ("chelsea", "coffee",
                                                                 "astronaut")])
    graph = load_model(str(path), batch=3)
    assert graph.input_shape == (3, 3, 16, 16) and graph.output_shape == (3, 5)
    ref = onnxruntime_output(path, x)
    out = simulate(graph, x).output
    assert rel_err(out, ref) < 1e-4 and not np.allclose(ref[0], ref[1])
    assert load_model(str(path)).input_shape == (1, 3, 16, 16)  # dynamic, no batch: 1


class ViewHead(torch.nn.Module):
    """``x.view(x.size(0), -1)`` before a linear layer, and a squeeze-excite gate reshaped
    with ``view(b, c, 1, 1)``: exported at a dynamic batch, the shape is a Shape -> Gather
    -> Unsqueeze -> Concat chain, Unsqueeze's axes an attribute before opset 13."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.gate = torch.nn.Conv2d(3, 6, 3, stride=2), torch.nn.Linear(6, 6)
        self.fc = torch.nn.Linear(6 * 7 * 7, 5)

    def forward(self, x):
        y = self.conv(x)
        b, c = y.size(0), y.size(1)
        y = y * torch.sigmoid(self.gate(y.mean((2, 3)))).view(b, c, 1, 1)
        return self.fc(y.view(y.size(0), -1))


@pytest.mark.parametrize("opset", [9, 11, 12, 13, 17])
def test_shape_arithmetic_of_a_dynamic_batch_is_evaluated_at_the_files_opset(tmp_path, opset):
    path = tmp_path / f"view{opset}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(ViewHead().eval(), (torch.from_numpy(photo((1, 3, 16, 16))),),
                          str(path), input_names=["x"], dynamo=False, opset_version=opset,
                          dynamic_axes={"x": {0: "N"}})
    x = np.stack([images.load_image(name, (16, 16)) for name in ("chelsea", "coffee")])
    graph = check(path, x, batch=2)
    assert graph.input_shape == (2, 3, 16, 16) and graph.output_shape == (2, 5)


def test_batch_is_refused_where_the_file_fixes_another(tmp_path):
    from npusim import cli

    path = export_batch(tmp_path, dynamic=False)
    with pytest.raises(ModelError, match=r"fixed.onnx: input 'x' has a fixed batch of 1, so "
                                         r"batch \(--batch\) 3 cannot be run; export the model "
                                         r"with a dynamic batch axis"):
        load_model(str(path), batch=3)
    assert load_model(str(path), batch=1).input_shape == (1, 3, 16, 16)
    assert cli.main(["run", str(path), "--batch", "3", "--quiet"]) == 2


# ---- refusals ---------------------------------------------------------------------------


def test_every_unsupported_op_is_listed_with_its_node_and_the_supported_ones(tmp_path):
    path = write(tmp_path, [node("Conv", ["x", "w"], "c"), node("Trilu", ["c"], "s"),
                            node("Mul", ["c", "s"], "m"), node("Relu", ["m"], "r"),
                            node("Hardmax", ["r"])], {"w": weights(4, 3, 3, 3)})
    with pytest.raises(ModelError) as err:
        from_onnx(path)
    assert str(err.value) == (
        f"{path}: cannot import: unsupported ops: Trilu x1 ('trilu_s'), Hardmax x1 ('hardmax_y') "
        f"(fallback=True, --fallback: compute them in the source framework). Supported: "
        f"{', '.join(sorted(onnx_import.supported_ops()))}")


def test_unsupported_ops_and_parameters_share_one_message(tmp_path):
    path = write(tmp_path, [node("Softmax", ["x"], "c", axis=0), node("Trilu", ["c"], "e"),
                            node("AveragePool", ["e"], kernel_shape=[2, 2], dilations=[2, 2])],
                 {}, opset=19)
    with pytest.raises(ModelError, match=r"unsupported ops: Trilu x1 \('trilu_e'\); unsupported "
                                         r"parameters: Softmax x1 \(node 'softmax_c': softmax "
                                         r"over the batch axis\), AveragePool x1 \(node "
                                         r"'averagepool_y': dilations=\[2, 2\]: the IR dilates "
                                         r"max pooling only"):
        from_onnx(path)


def refusal_cases():
    w = {"w": weights(4, 3, 3, 3)}
    return [
        ([node("Pad", ["x", "pads"], "p", mode="reflect"), node("Conv", ["p", "w"])],
         w | {"pads": np.array([0, 1, 0, 0, 0, 1, 0, 0], np.int64)},
         r"pads=\[0, 1, 0, 0, 0, 1, 0, 0\], mode='reflect': only constant, reflect, edge or "
         r"wrap, non-negative padding of H and W"),
        ([node("Flatten", ["x"], "f"), node("Gemm", ["f", "b"], transA=1)],
         {"b": weights(1, 5)}, r"transA=1: the IR keeps the batch on axis 0"),
        ([node("Conv", ["x", "x"])], {}, r"input 'x' is computed from the graph input"),
        ([node("Concat", ["x", "c"], axis=0)], {"c": weights(1, 3, 12, 11)},
         r"concatenates a constant along the batch axis; the IR joins constants to each "
         r"sample"),
        ([node("Transpose", ["x"], "t", perm=[2, 1, 0, 3]), node("Reshape", ["t", "s"])],
         {"s": np.array([36, 11], np.int64)},
         r"output 'y' \(shape \(36, 11\), a batch of one\): an output's "
         r"first axis must be the batch or one other axis, not several joined"),
        ([node("Dropout", ["x", "ratio", "train"])],
         {"ratio": np.array(0.5, np.float32), "train": np.array(True)},
         r"training_mode=True drops at random"),
    ]


@pytest.mark.parametrize("nodes, inits, message", refusal_cases(), ids=lambda v: "")
def test_unsupported_parameters_are_refused_by_name(tmp_path, nodes, inits, message):
    with pytest.raises(ModelError, match=message):
        from_onnx(write(tmp_path, nodes, inits))


def test_one_dimensional_conv_is_refused(tmp_path):
    path = write(tmp_path, [node("Conv", ["x", "w"])], {"w": weights(4, 3, 3)},
                 in_shape=(1, 3, 12))
    with pytest.raises(ModelError, match=r"Conv x1 \(node 'conv_y': needs a 4-D input, got "
                                         r"shape \(1, 3, 12\)"):
        from_onnx(path)


def test_file_that_is_not_onnx(tmp_path):
    text = tmp_path / "notes.onnx"
    text.write_text("this is a text file, not a network\n")
    with pytest.raises(ModelError, match=r"notes.onnx: not an ONNX model: it does not parse"):
        from_onnx(text)
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(ModelError, match=r"empty.onnx: empty file, not an ONNX model"):
        from_onnx(empty)


def test_truncated_file(tmp_path):
    path = export(torch.nn.Conv2d(3, 8, 3), photo((1, 3, 8, 8)), tmp_path / "whole.onnx")
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size * 2 // 3])
    with pytest.raises(ModelError, match=r"cut.onnx: truncated or corrupt ONNX file"):
        from_onnx(cut)


def test_invalid_graph_is_refused_by_the_checker(tmp_path):
    outputs = [helper.make_tensor_value_info("y", FLOAT, [1, 3, 12, 11])]
    path = write(tmp_path, [node("Relu", ["nowhere"])], outputs=outputs)
    with pytest.raises(ModelError, match=r"m.onnx: invalid ONNX model: .*nowhere") as e:
        from_onnx(path)
    # the checker's complaint, spread over lines, kept whole on one: the node and why
    assert str(e.value).endswith("input 'nowhere' of node: name: relu_y OpType: Relu is not "
                                 "output of any previous nodes.")


def test_dynamic_input_shape_needs_input_shape(tmp_path):
    inputs = [helper.make_tensor_value_info("x", FLOAT, ["N", 3, 12, "W"])]
    path = write(tmp_path, [node("Relu", ["x"])], inputs=inputs)
    with pytest.raises(ModelError, match=r"m.onnx: input 'x' has a dynamic shape \(\?x3x12x\?\); "
                                         r"pass input_shape \(--input-shape N,C,H,W\)"):
        from_onnx(path)
    with pytest.raises(ModelError, match=r"input_shape=\(1, 4, 12, 11\) does not fit input 'x' "
                                         r"of shape \('\?', 3, 12, '\?'\)"):
        from_onnx(path, input_shape=(1, 4, 12, 11))
    assert from_onnx(path, input_shape=(2, 3, 12, 11)).input_shape == (2, 3, 12, 11)


def test_graph_with_two_inputs_or_an_integer_input(tmp_path):
    two = [helper.make_tensor_value_info(n, FLOAT, [1, 3, 4, 4]) for n in ("x", "z")]
    with pytest.raises(ModelError, match=r"inputs \['x', 'z'\] and outputs \['y'\]; npusim "
                                         r"networks have one input and one or more outputs"):
        from_onnx(write(tmp_path, [node("Add", ["x", "z"])], inputs=two))
    with pytest.raises(ModelError, match=r"input 'x' has element type UINT8; npusim feeds "
                                         r"float tensors \(FLOAT, FLOAT16, DOUBLE\)"):
        from_onnx(write(tmp_path, [node("Identity", ["x"])], in_type=TensorProto.UINT8))


def test_refusal_groups_by_op_type_with_counts_and_three_names(tmp_path):
    """A network with many unsupported nodes is refused in one short, readable line."""
    nodes, x = [], "x"
    for i in range(40):  # hardmax(trilu(x)), forty times
        nodes += [node("Trilu", [x], f"s{i}"), node("Hardmax", [f"s{i}"], f"m{i}")]
        x = f"m{i}"
    nodes += [node("Softmax", [x], "y", axis=0)]
    path = write(tmp_path, nodes, {})
    with pytest.raises(ModelError) as err:
        from_onnx(path)
    text = str(err.value)
    assert text.startswith(
        f"{path}: cannot import: unsupported ops: Trilu x40 ('trilu_s0', 'trilu_s1', "
        "'trilu_s2', ...), Hardmax x40 ('hardmax_m0', 'hardmax_m1', 'hardmax_m2', ...); "
        "unsupported "
        "parameters: Softmax x1 (node 'softmax_y': softmax over the batch axis) "
        "(fallback=True, --fallback: compute them in the source framework). Supported: Abs, "
        "Acos, Acosh, Add, ")
    supported = ", ".join(sorted(onnx_import.supported_ops()))
    assert text.endswith(f"Supported: {supported}")  # the 80 nodes named in 6, then the types
    assert "\n" not in text and len(text) - len(supported) < 400


def test_element_types_are_named(tmp_path):
    with pytest.raises(ModelError, match=r"input 'x' has element type INT64; npusim feeds float "
                                         r"tensors \(FLOAT, FLOAT16, DOUBLE\)"):
        from_onnx(write(tmp_path, [node("Identity", ["x"])], in_type=TensorProto.INT64))


def test_check_on_an_imported_model_prints_no_torch_warning(tmp_path):
    """onnx hands weights over as read-only views of the file's bytes; torch warns when
    given one, so ``--check`` must not (the run is a fresh process: torch warns once)."""
    import os
    import subprocess
    import sys

    path = export(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()),
                  photo((1, 3, 16, 16)), tmp_path / "small.onnx")
    import npusim

    src = Path(npusim.__file__).parents[1]  # the npusim this test imported
    run = subprocess.run([sys.executable, "-W", "default", "-c",
                          "import sys; from npusim.cli import main; sys.exit(main(sys.argv[1:]))",
                          "run", str(path), "--check", "--quiet"],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(
                             [str(src), os.environ.get("PYTHONPATH", "")])})
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("check against torch, 2 nodes") and run.stderr == ""


@pytest.mark.parametrize("make, in_shape", [
    (lambda: node("DepthToSpace", ["c"], blocksize=2), (1, 3, 6, 5)),  # DCR, the default
    (lambda: node("DepthToSpace", ["c"], blocksize=2, mode="CRD"), (1, 3, 6, 5)),
    (lambda: node("DepthToSpace", ["c"], blocksize=3, mode="DCR"), (2, 3, 4, 4)),
    (lambda: node("SpaceToDepth", ["c"], blocksize=2), (1, 3, 6, 8)),
])
def test_depth_to_space_and_back_in_either_order(tmp_path, make, in_shape):
    """A conv to 36 channels, then DepthToSpace (DCR or CRD) or SpaceToDepth: a reshape, a
    transpose and a reshape, equal to onnxruntime."""
    path = write(tmp_path, [node("Conv", ["x", "w"], "c", pads=[1, 1, 1, 1]), make()],
                 {"w": weights(36, 3, 3, 3)}, in_shape=in_shape)
    graph = check(path, photo(in_shape))
    assert op_kinds(graph) == ["Conv", "Reshape", "Transpose", "Reshape"]


@pytest.mark.parametrize("opset, make, inits, kind", [
    (13, lambda: node("ReduceSum", ["c", "axes"], keepdims=1), {"axes": np.array([2, 3])},
     "Reduce"),
    (11, lambda: node("ReduceSum", ["c"], axes=[1], keepdims=0), {}, "Reduce"),
    (17, lambda: node("Expand", ["p", "shape"]), {"shape": np.array([1, 6, 12, 11])},
     "Broadcast"),
])
def test_reduce_sum_and_expand(tmp_path, opset, make, inits, kind):
    """ReduceSum, axes as input (opset 13 on) or attribute, and Expand of a pooled map back
    to the map's size: equal to onnxruntime."""
    nodes = [node("Conv", ["x", "w"], "c", pads=[1, 1, 1, 1]),
             node("GlobalAveragePool", ["c"], "p"), make()]
    path = write(tmp_path, nodes, {"w": weights(6, 3, 3, 3), **inits}, opset=opset)
    graph = check(path, photo((1, 3, 12, 11)))
    assert op_kinds(graph)[-1] == kind


@pytest.mark.parametrize("op_type", ["ReduceMin", "ReduceL1", "ReduceL2"])
@pytest.mark.parametrize("opset, axes, keepdims", [(17, [1], 1), (17, [2, 3], 0),
                                                   (18, [1], 1), (18, [-1], 0)])
def test_reduce_min_and_the_norms(tmp_path, op_type, opset, axes, keepdims):
    """ReduceMin, ReduceL1 and ReduceL2 of a conv's signed map, axes as attribute (before
    opset 18) or input: equal to onnxruntime."""
    reduce = (node(op_type, ["c", "axes"], keepdims=keepdims) if opset >= 18
              else node(op_type, ["c"], axes=axes, keepdims=keepdims))
    path = write(tmp_path, [node("Conv", ["x", "w"], "c", pads=[1, 1, 1, 1]), reduce],
                 {"w": weights(6, 3, 3, 3), "axes": np.array(axes)}, opset=opset)
    graph = check(path, photo((1, 3, 12, 11)))
    assert op_kinds(graph) == ["Conv", "Reduce"]


def test_normalize_as_torch_exports_it(tmp_path):
    """``F.normalize`` exports as ReduceL2, Clip from eps, Expand to the input's shape (from
    its Shape) and Div: equal to onnxruntime and to PyTorch."""
    torch.manual_seed(0)

    class Embed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 6, 3, padding=1)

        def forward(self, x):
            return torch.nn.functional.normalize(self.conv(x), dim=1)

    x = photo((2, 3, 9, 8))
    net = Embed().eval()
    path = export(net, x, tmp_path / "normalize.onnx")
    graph = check(path, x)
    assert op_kinds(graph) == ["Conv", "Reduce", "Clip", "Broadcast", "Elementwise"]
    check(path, x, judge=lambda path, x: net(torch.from_numpy(x)).detach().numpy())


@pytest.mark.parametrize("exponent", [np.array(3, np.int64), np.array([2], np.int32)])
def test_a_pow_of_an_integer_exponent_imports(tmp_path, exponent):
    """Pow's exponent has its own element type: the dynamo exporter writes a norm of order 3
    as Pow by an INT64 3 (then ReduceSum, Pow by 1/3)."""
    path = write(tmp_path, [node("Conv", ["x", "w"], "c"), node("Pow", ["c", "e"])],
                 {"w": weights(4, 3, 3, 3), "e": exponent})
    graph = check(path, photo((1, 3, 12, 11)))
    (power,) = [n.op.const for n in graph.nodes if isinstance(n.op, ops.Elementwise)]
    assert power.dtype == np.float32 and np.all(power == exponent)


def test_a_norm_of_order_three_as_the_dynamo_exporter_writes_it(tmp_path):
    class Norms(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.conv = torch.nn.Conv2d(3, 6, 3, padding=1)

        def forward(self, x):
            t = self.conv(x)
            return t / torch.norm(t, p=3, dim=1, keepdim=True)

    x = photo((2, 3, 9, 8))
    path = export_onnx(Norms(), x, tmp_path / "norms.onnx", "dynamo")
    assert "Pow" in {n.op_type for n in onnx.load(str(path)).graph.node}
    check(path, x)


def lrn_as_the_spec_reads(x, size, alpha, beta, bias):
    """The ONNX LRN as its operator text defines it, channel by channel in float64: the
    squares of channels max(0, c - floor((size - 1) / 2)) .. min(C - 1, c + ceil((size -
    1) / 2)). (onnx's own reference evaluator loops over the batch axis instead of the
    channels, and onnxruntime takes odd sizes only: neither judges an even window.)"""
    x = x.astype(np.float64)
    out = np.empty_like(x)
    for c in range(x.shape[1]):
        lo, hi = max(0, c - (size - 1) // 2), min(x.shape[1] - 1, c + size // 2)
        square_sum = (x[:, lo:hi + 1] ** 2).sum(axis=1)
        out[:, c] = x[:, c] / (bias + alpha / size * square_sum) ** beta
    return out


@pytest.mark.parametrize("size", [2, 4])
def test_lrn_of_an_even_size_places_its_window_as_the_spec_does(tmp_path, size):
    """An even LRN window starts (size - 1) // 2 channels before its own (PyTorch's, size //
    2): equal to the operator text's formula (``lrn_as_the_spec_reads``)."""
    x = photo((2, 6, 12, 11)) * 3
    path = write(tmp_path, [node("LRN", ["x"], size=size, alpha=0.05, bias=1.5)],
                 in_shape=x.shape)
    graph = from_onnx(path)
    assert graph.nodes[-1].op.before == (size - 1) // 2
    want = lrn_as_the_spec_reads(x, size, 0.05, 0.75, 1.5)
    assert rel_err(simulate(graph, x).output, want) < 1e-6


def test_check_takes_the_specs_arithmetic_where_onnxruntime_rounds_a_resize_otherwise(tmp_path):
    """A nearest Resize of 14 pixels to 4: the spec (floor(2 x 14 / 4) = 7), PyTorch and
    npusim take row 7, onnxruntime's float32 arithmetic row 6. --check judges npusim by the
    nearer of onnxruntime and onnx's reference evaluator, and shows both."""
    import json

    from npusim import cli

    class Down(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.interpolate(x, size=(4, 4), mode="nearest")

    path = export(Down(), photo((1, 3, 14, 14)), tmp_path / "down.onnx")
    x = photo((1, 3, 14, 14))
    assert rel_err(simulate(from_onnx(path), x).output, reference_output(path, x)) == 0
    assert rel_err(simulate(from_onnx(path), x).output, onnxruntime_output(path, x)) > 0.01
    report = tmp_path / "r.json"
    assert cli.main(["run", str(path), "--check", "--quiet", "--json", str(report)]) == 0
    check = json.loads(report.read_text())["check"]
    assert check["passed"] and check["onnxruntime_relative_error"] > 0.01
    assert check["onnx_reference_relative_error"] == 0


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


@pytest.mark.parametrize("case", ["bilinear x1.5", "bilinear x0.5", "nearest x1.5", "2 / x", "-x"])
def test_torch_exports_of_resizes_by_scale_and_of_reciprocals_import(tmp_path, case):
    """A resize by a scale that is no whole factor samples at 1/scale input pixels a step (not
    at in/out, as to a size); ``c / x`` exports as Reciprocal, ``-x`` as Neg."""
    fn = {"bilinear x1.5": lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear"),
          "bilinear x0.5": lambda x: F.interpolate(x, scale_factor=0.5, mode="bilinear"),
          "nearest x1.5": lambda x: F.interpolate(x, scale_factor=1.5, mode="nearest"),
          "2 / x": lambda x: 2.0 / (x.abs() + 1), "-x": lambda x: -x * 3}[case]
    x = photo((2, 3, 11, 13))
    path = export(Fn(fn), x, tmp_path / "m.onnx")
    check(path, x)
    with torch.no_grad():
        assert rel_err(simulate(from_onnx(path), x).output, fn(torch.from_numpy(x)).numpy()) < 1e-5


def test_a_ceil_mode_pool_onnx_infers_otherwise_is_refused_saying_so(tmp_path):
    x = photo((2, 3, 11, 13))
    path = export(Fn(lambda x: F.max_pool2d(x, (3, 2), (2, 3), (1, 1), ceil_mode=True)), x,
                  tmp_path / "m.onnx")
    assert onnxruntime_output(path, x).shape == (2, 3, 6, 5)
    with pytest.raises(ModelError, match=r"ceil_mode=1: onnx's shape inference gives \(6, 6\) "
                                         r"where PyTorch and onnxruntime compute \(6, 5\)"):
        from_onnx(path)


@pytest.mark.parametrize("case", ["zero pad, max pool (YOLOv3-tiny)", "pad, relu"])
def test_a_pad_its_reader_cannot_absorb_is_a_node_of_its_own(tmp_path, case):
    """A constant pad is held for the conv or pool reading it; one its reader cannot absorb
    (zeros before a max pool, which pads with -inf; a pad before an activation) becomes an
    IR Pad node of its own, from PyTorch and from ONNX alike."""
    from npusim.frontends.torch_import import from_torch

    torch.manual_seed(0)
    body = {"zero pad, max pool (YOLOv3-tiny)": [torch.nn.ZeroPad2d((0, 1, 0, 1)),
                                                 torch.nn.MaxPool2d(2, 1)],
            "pad, relu": [torch.nn.ConstantPad2d((1, 2, 0, 1), -0.5), torch.nn.ReLU()]}[case]
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1),
                              torch.nn.LeakyReLU(0.1, inplace=True), *body,
                              torch.nn.Conv2d(8, 4, 3, padding=1)).eval()
    x = photo((1, 3, 12, 11))
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()
    path = export(net, x, tmp_path / "pad.onnx")
    for graph in (from_torch(net, x), from_onnx(path)):
        assert "Pad" in [type(n.op).__name__ for n in graph.nodes]
        assert rel_err(simulate(graph, x).output, want) < 1e-5
    check(path, x)


def test_a_channels_last_input_is_fed_photos_channels_last(tmp_path):
    """A TensorFlow network through tf2onnx reads N x H x W x C and transposes it: its photo
    input is each photo of the same network's N x C x H x W twin transposed, not seeded
    values (no --input) nor a refusal (--input: "its input has 16 channels"), and the run
    equals onnxruntime on it."""
    from npusim.frontends import input_tensor

    conv = [node("Conv", ["t", "w"], "c", pads=[1, 1, 1, 1], strides=[2, 2]), node("Relu", ["c"])]
    inits = {"w": weights(6, 3, 3, 3)}
    nhwc = write(tmp_path, [node("Transpose", ["x"], "t", perm=[0, 3, 1, 2]), *conv], inits,
                 in_shape=(2, 16, 20, 3), name="nhwc")
    nchw = write(tmp_path, [node("Identity", ["x"], "t"), *conv], inits,
                 in_shape=(2, 3, 16, 20), name="nchw")
    for image in (None, "coffee"):
        x, shown = input_tensor(str(nhwc), from_onnx(nhwc), image=image)
        twin, twin_shown = input_tensor(str(nchw), from_onnx(nchw), image=image)
        assert np.array_equal(x, twin.transpose(0, 2, 3, 1))
        assert shown == f"{twin_shown} (channels last)"
        check(nhwc, x)
