"""Quantised ONNX models (QDQ: QuantizeLinear / DequantizeLinear pairs around float ops),
judged by onnxruntime, which runs the same file: the grid each pair rounds to
(``ops.FakeQuant``), a network whose every sum is exact in float32 (bit-identical), and
trained and zoo networks quantised by onnxruntime's own tool on real photos."""

import re
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnxruntime.quantization import (  # noqa: E402
    CalibrationDataReader,
    QuantFormat,
    quantize_static,
)
from strategies import photo  # noqa: E402

from npusim import ops, simulate  # noqa: E402
from npusim.errors import LayerError, ModelError  # noqa: E402
from npusim.frontends import zoo  # noqa: E402
from npusim.frontends.onnx_import import from_onnx  # noqa: E402
from npusim.report.check import check  # noqa: E402
from npusim.torch_ref import to_torch  # noqa: E402

rng = np.random.default_rng(0)


def run_onnxruntime(path, x, optimised: bool = True) -> np.ndarray:
    """onnxruntime's output: ``optimised``, its default (Q, op, DQ fused into integer
    kernels such as QLinearConv), else each node as written (float ops between the pairs)."""
    options = ort.SessionOptions()
    if not optimised:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


def save(tmp_path, nodes, inits, in_shape, name="q", opset=17):
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(in_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=8)
    path = tmp_path / f"{name}.onnx"
    onnx.save(onnx.shape_inference.infer_shapes(model), str(path))
    return path


def qdq(tensor: str, out: str, scale: str, zero: str | None, axis: int | None = None):
    """QuantizeLinear then DequantizeLinear of ``tensor`` into ``out``."""
    extra = {} if axis is None else {"axis": axis}
    inputs = [scale] + ([zero] if zero else [])
    return [helper.make_node("QuantizeLinear", [tensor, *inputs], [f"{out}_q"],
                             name=f"{out}_quantize", **extra),
            helper.make_node("DequantizeLinear", [f"{out}_q", *inputs], [out],
                             name=f"{out}_dequantize", **extra)]


# ---- the grid of one pair ---------------------------------------------------------------


@pytest.mark.parametrize("scale, zero, axis", [
    (np.float32(0.037), np.int8(3), None),
    (np.float32(0.25), np.uint8(128), None),
    (np.float32(0.011), None, None),  # no zero point: uint8, zero 0
    (np.float32([0.02, 0.5, 0.125, 0.07]), np.int8([0, -5, 7, 127]), 1),
    (np.float32([0.3, 0.01, 0.05, 0.2]), np.int16([0, -300, 1000, 5]), 1),
])
def test_a_pair_rounds_as_onnxruntime_does(tmp_path, scale, zero, axis):
    """Random values, values at exactly half a step (round half to even) and values past
    both ends: bit-identical to onnxruntime's QuantizeLinear then DequantizeLinear."""
    shape = (2, 4, 6, 5)
    inits = {"s": scale} | ({} if zero is None else {"z": zero})
    path = save(tmp_path, qdq("x", "y", "s", None if zero is None else "z", axis), inits, shape,
                opset=21 if zero is not None and zero.dtype == np.int16 else 17)
    s = scale.reshape(1, -1, 1, 1) if axis else scale
    halves = (np.arange(np.prod(shape)).reshape(shape) % 41 - 20 + 0.5).astype(np.float32) * s
    for x in (rng.standard_normal(shape).astype(np.float32) * 3,
              halves.astype(np.float32), rng.standard_normal(shape).astype(np.float32) * 300):
        graph = from_onnx(path)
        assert [type(n.op).__name__ for n in graph.nodes] == ["FakeQuant"]
        np.testing.assert_array_equal(simulate(graph, x).output, run_onnxruntime(path, x))


def test_the_pair_steps_its_grid_half_to_even():
    op = ops.FakeQuant(np.float32(0.5), np.int8(0), -128, 127)
    x = np.float32([0.25, 0.75, -0.25, 1.25, 64, -64.5, 100.0])
    np.testing.assert_array_equal(op(x), np.float32([0, 1, -0, 1, 63.5, -64, 63.5]))
    assert op.vector_ops([x.shape], x.shape) == 4 * x.size


@pytest.mark.parametrize("make, why", [
    (lambda: ops.FakeQuant(np.float32(0), np.int8(0)), r"scale \[0.0\]: must be finite and > 0"),
    (lambda: ops.FakeQuant(np.float32(1), np.float32(0.5)), r"zero point \[0.5\]: must be "
                                                            r"integers in \[-128, 127\]"),
    (lambda: ops.FakeQuant(np.float32(1), np.int32(200)), r"zero point \[200.0\]"),
    (lambda: ops.FakeQuant(np.float32([1, 2]), np.int8([0, 0, 0])),
     r"3 zero points for 2 scales"),
    (lambda: ops.FakeQuant(np.float32(1), np.int8(0), 5, 4), r"range \[5, 4\] is empty"),
    (lambda: ops.FakeQuant(np.float32([1, 2, 3]), np.int8(0)).out_shape([(1, 4, 2, 2)], "q"),
     r"q: FakeQuant has 3 scales along axis 1 but the input has shape \(1, 4, 2, 2\)"),
])
def test_a_pair_with_no_grid_is_refused(make, why):
    with pytest.raises(LayerError, match=why):
        make()


# ---- a network whose every sum is exact: bit-identical ----------------------------------


def exact_network(tmp_path):
    """Conv, ReLU, conv, residual add, max pool, global average pool (64 pixels), Gemm,
    each between QDQ pairs, with int8 weights (per channel for the convs), int32 biases and
    power-of-two scales: every product and sum is exact in float32 whatever the order, so a
    correct import computes onnxruntime's output bit for bit."""
    w1 = rng.integers(-127, 128, (8, 3, 3, 3), dtype=np.int8)
    w2 = rng.integers(-127, 128, (8, 8, 3, 3), dtype=np.int8)
    w3 = rng.integers(-127, 128, (5, 8), dtype=np.int8)
    ws1 = np.float32(2.0 ** -rng.integers(6, 9, 8))
    ws2 = np.float32(2.0 ** -rng.integers(7, 10, 8))
    s_x, s_a, s_b = np.float32(2 ** -5), np.float32(2 ** -3), np.float32(2 ** -4)
    inits = {
        "w1": w1, "ws1": ws1, "wz1": np.zeros(8, np.int8),
        "b1": rng.integers(-2000, 2000, 8, dtype=np.int32), "bs1": s_x * ws1,
        "w2": w2, "ws2": ws2, "wz2": np.zeros(8, np.int8),
        "w3": w3, "ws3": np.float32(2 ** -7), "wz3": np.int8(0),
        "sx": s_x, "sa": s_a, "sb": s_b, "z0": np.int8(0), "su": np.float32(2 ** -2),
        "zu": np.uint8(128)}
    node = helper.make_node
    nodes = [
        node("DequantizeLinear", ["w1", "ws1", "wz1"], ["W1"], axis=0),
        node("DequantizeLinear", ["b1", "bs1"], ["B1"], axis=0),
        node("DequantizeLinear", ["w2", "ws2", "wz2"], ["W2"], axis=0),
        node("DequantizeLinear", ["w3", "ws3", "wz3"], ["W3"]),
        *qdq("x", "xq", "sx", "z0"),
        node("Conv", ["xq", "W1", "B1"], ["c1"], pads=[1, 1, 1, 1]),
        node("Relu", ["c1"], ["r1"]), *qdq("r1", "a", "sa", "z0"),
        node("Conv", ["a", "W2"], ["c2"], pads=[1, 1, 1, 1]), *qdq("c2", "b", "sa", "z0"),
        node("Add", ["a", "b"], ["s"]), *qdq("s", "sq", "sb", "z0"),
        node("MaxPool", ["sq"], ["m"], kernel_shape=[2, 2], strides=[2, 2]),
        *qdq("m", "mq", "sb", "z0"),
        node("GlobalAveragePool", ["mq"], ["g"]), *qdq("g", "gq", "sb", "z0"),
        node("Flatten", ["gq"], ["f"]), node("Gemm", ["f", "W3"], ["e"], transB=1),
        *qdq("e", "y", "su", "zu")]
    return save(tmp_path, nodes, inits, (2, 3, 16, 16), name="exact")


def test_a_network_of_exact_sums_is_bit_identical_to_onnxruntime(tmp_path):
    path = exact_network(tmp_path)
    graph = from_onnx(path)
    kinds = [type(n.op).__name__ for n in graph.nodes]
    assert kinds.count("FakeQuant") == 7 and kinds.count("Conv") == 3
    x = photo((2, 3, 16, 16)) * 2
    for preset in ("systolic-32x32-ws", "input-reuse-1024", "sparse-pairs-32x32"):
        out = simulate(graph, x, preset).output
        np.testing.assert_array_equal(out, run_onnxruntime(path, x, optimised=False))
        np.testing.assert_array_equal(out, run_onnxruntime(path, x))  # QLinearConv, QGemm


def test_check_of_a_quantised_file_compares_node_by_node(tmp_path):
    """``npusim run FILE --check`` on a QDQ file: every node against torch on npusim's
    inputs to it, judged; the end-to-end errors shown, not judged; the JSON says which."""
    import json

    from cli_helpers import run_cli

    report = tmp_path / "r.json"
    code, out, _ = run_cli("run", exact_network(tmp_path), "--check", "--json", report)
    assert code == 0
    assert re.search(r"check against torch, 15 nodes each on npusim's inputs to it \(a "
                     r"quantised graph\): worst relative error 0 at \S+ \(tolerance 0.0001\): "
                     r"ok; not judged, as a last float32 bit can move a value a rounding "
                     r"step: network output vs torch end to end: 0; outputs against "
                     r"onnxruntime: 0\n", out), out
    check_json = json.loads(report.read_text())["check"]
    assert check_json["passed"] and check_json["compared"].startswith("every node against "
                                                                      "torch on npusim's")


# ---- networks quantised by onnxruntime's tool -------------------------------------------


class Photos(CalibrationDataReader):
    """onnxruntime's calibration data: ``x`` and each of the real photos through the
    network's preprocessing."""

    def __init__(self, name: str, x: np.ndarray):
        feeds = [x] + [zoo.input_for(name, image=p) for p in ("coffee", "astronaut")
                       if name != "ppocr-cls"]
        self.feeds = iter({"x": f} for f in feeds)

    def get_next(self):
        return next(self.feeds, None)


def quantised(tmp_path, name: str, quant_format=QuantFormat.QDQ):
    """Zoo network ``name`` exported to ONNX and quantised by onnxruntime (int8, weights
    per channel), calibrated on real photos; (the file, the network's own input)."""
    x = zoo.input_for(name)
    plain, path = tmp_path / f"{name}.onnx", tmp_path / f"{name}-int8.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(to_torch(zoo.build(name)), (torch.from_numpy(x),), str(plain),
                          input_names=["x"], dynamo=False)
        quantize_static(str(plain), str(path), Photos(name, x), quant_format=quant_format,
                        per_channel=True)
    return path, x


def data_path_quantizers(model) -> int:
    """How many QuantizeLinear nodes read a tensor computed from the graph's input (the
    others quantise weights and constants, which the importer folds)."""
    computed = {model.graph.input[0].name}
    for n in model.graph.node:
        if computed.intersection(n.input):
            computed.update(n.output)
    return sum(n.op_type == "QuantizeLinear" and n.input[0] in computed
               for n in model.graph.node)


@pytest.mark.parametrize("name", ["ppocr-cls", "resnet18"])
def test_a_network_quantised_by_onnxruntime_imports_and_runs_as_it_does(tmp_path, name):
    """The trained PP-OCR direction classifier and ResNet-18 on real images, quantised by
    onnxruntime: one FakeQuant per QuantizeLinear on the data path; npusim's output equals
    onnxruntime's run of the file as written up to the rounding steps a float32 sum one ulp
    apart can move (the same class, within 2 % of the largest output), each node equals
    torch on npusim's own inputs to it (``--check`` on a quantised graph), and in mode run
    every machine's arithmetic agrees. (onnxruntime's default run fuses the pairs into its
    own integer kernels, which round otherwise: on ppocr-cls its two class scores read
    0.486 / 0.510 where the file as written gives 0.529 / 0.471, npusim's exactly.)"""
    path, x = quantised(tmp_path, name)
    graph = from_onnx(path)
    fake = [n for n in graph.nodes if isinstance(n.op, ops.FakeQuant)]
    assert len(fake) == data_path_quantizers(onnx.load(str(path))) > 20
    result = simulate(graph, x, keep_outputs=True)
    reference = run_onnxruntime(path, x, optimised=False)
    assert (result.output.argmax(1) == reference.argmax(1)).all()
    assert np.abs(result.output - reference).max() <= 0.02 * np.abs(reference).max()
    outcome = check(graph, x, result, path)
    assert outcome.node_by_node and outcome.passed and outcome.worst < 1e-5
    assert outcome.as_dict()["compared"].startswith("every node against torch on npusim's")
    for preset in ("input-reuse-1024", "sparse-pairs-32x32"):
        run = simulate(graph, x, preset, mode="run").output
        assert np.abs(run - result.output).max() <= 0.02 * np.abs(result.output).max()


def test_a_check_end_to_end_would_fail_a_correct_quantised_run(tmp_path):
    """Why a quantised graph is checked node by node: end to end, ResNet-18's output is
    rounding steps from torch's though every node agrees to float32's rounding."""
    path, x = quantised(tmp_path, "resnet18")
    graph = from_onnx(path)
    result = simulate(graph, x, keep_outputs=True)
    outcome = check(graph, x, result)
    assert outcome.output_error > 1e-3 > outcome.worst


def test_a_quantoperator_model_is_refused_naming_its_integer_ops(tmp_path):
    """QOperator format (QLinearConv on int8 tensors) is not a float network: refused in
    one sentence, with or without the fallback, naming the integer ops and what imports."""
    path, _ = quantised(tmp_path, "ppocr-cls", QuantFormat.QOperator)
    for fallback in (False, True):
        with pytest.raises(ModelError, match=r"a model quantised in QOperator format "
                                             r"\(.*QLinearConv x53.*\): its ops compute on "
                                             r"int8 tensors") as e:
            from_onnx(path, fallback=fallback)
        assert "QuantFormat.QDQ" in str(e.value) and "unknown" not in str(e.value)
    from cli_helpers import run_cli

    code, _, err = run_cli("run", path, "--fallback")
    assert code == 2 and err.count("\n") == 1 and "QOperator format" in err


def test_a_pair_of_two_grids_and_a_dequantised_cast_are_refused(tmp_path):
    inits = {"s": np.float32(0.1), "t": np.float32(0.2), "z": np.int8(0)}
    node = helper.make_node
    nodes = [node("QuantizeLinear", ["x", "s", "z"], ["q"], name="quant"),
             node("DequantizeLinear", ["q", "t", "z"], ["y"], name="dequant")]
    path = save(tmp_path, nodes, inits, (1, 3, 4, 4))
    with pytest.raises(ModelError, match=r"DequantizeLinear x1 \(node 'dequant': its scale, "
                                         r"zero point or axis differ from the QuantizeLinear"):
        from_onnx(path)
    # the fallback reads the IR's float tensors; a dequantiser reads integers: refused at
    # import, not a traceback when the run reaches it
    with pytest.raises(ModelError, match=r"ops neither npusim nor its fallback can run: "
                                         r"DequantizeLinear x1 .*the fallback cannot run it: "
                                         r"onnxruntime will not run it on float32 tensors"):
        from_onnx(path, fallback=True)
    nodes = [node("Cast", ["x"], ["i"], name="cast", to=TensorProto.INT8),
             node("DequantizeLinear", ["i", "s", "z"], ["y"], name="dequant")]
    with pytest.raises(ModelError, match=r"DequantizeLinear x1 \(node 'dequant': dequantises "
                                         r"a Cast's output, not a QuantizeLinear's"):
        from_onnx(save(tmp_path, nodes, inits, (1, 3, 4, 4)))

