"""Reading an ONNX file for the importer: parse, check, fix the input shape, infer shapes.

Errors name the file and say what is wrong (not ONNX, truncated, invalid, a dynamic
shape without ``input_shape``); the onnx package is imported only here and only when
a file is read (it is an optional extra).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..errors import ModelError, one_line

SMALL_CONSTANT = 1 << 16  # elements: pads, shapes and scales, never weights
FLOAT_TYPES = (1, 10, 11)  # onnx.TensorProto FLOAT, FLOAT16, DOUBLE: what an input can be


def load(path: Path):
    """The ModelProto of ``path`` with external weight data loaded."""
    try:
        import onnx
        from google.protobuf.message import DecodeError
    except ImportError as e:  # onnx is an optional extra
        raise ModelError(f"{path}: reading ONNX needs the onnx package: "
                         "pip install 'npusim[onnx]'") from e

    try:
        data = path.read_bytes()
    except OSError as e:
        raise ModelError(f"{path}: cannot read: {e.strerror}") from None
    if not data:
        raise ModelError(f"{path}: empty file, not an ONNX model")
    try:
        model = onnx.load_from_string(data)
    except DecodeError:
        what = "truncated or corrupt ONNX file" if data[:1] == b"\x08" else "not an ONNX model"
        raise ModelError(f"{path}: {what}: it does not parse as an ONNX ModelProto") from None
    if model.ir_version == 0 or not model.HasField("graph"):
        raise ModelError(f"{path}: not an ONNX model (no IR version or graph)")
    load_external(model, path)
    return model


def skeleton(model):
    """The model with its large initialisers turned into typed graph inputs: all that the
    checker and shape inference read, without serialising every weight (seconds for VGG)."""
    from onnx import helper

    g = model.graph
    inputs = {i.name for i in g.input}
    big = [t for t in g.initializer if math.prod(t.dims) > SMALL_CONSTANT]
    graph = helper.make_graph(
        list(g.node), g.name,
        [*g.input, *(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                     for t in big if t.name not in inputs)],
        [_unknown_dims_unset(o) for o in g.output],
        [t for t in g.initializer if math.prod(t.dims) <= SMALL_CONSTANT],
        value_info=[_unknown_dims_unset(v) for v in g.value_info])
    return helper.make_model(graph, opset_imports=list(model.opset_import),
                             ir_version=model.ir_version, functions=list(model.functions))


def _unknown_dims_unset(value_info):
    """A copy of ``value_info`` whose dimensions written as -1 or 0 (some exporters' mark of
    an unknown size, e.g. PaddlePaddle's) are unknown, as ONNX spells it: a dimension left
    unset, so that shape inference fills it instead of refusing the disagreement."""
    copy = type(value_info)()
    copy.CopyFrom(value_info)
    if copy.type.HasField("tensor_type"):
        for d in copy.type.tensor_type.shape.dim:
            if d.HasField("dim_value") and d.dim_value <= 0:
                d.Clear()
    return copy


def check(skeleton_model, path: Path) -> None:
    """onnx.checker on the skeleton; its complaint, on one line, names the problem (the
    checker spreads one over several: 'input 'w' of node:', then the node, then why)."""
    import onnx

    try:
        onnx.checker.check_model(skeleton_model)
    except onnx.checker.ValidationError as e:
        raise ModelError(f"{path}: invalid ONNX model: {one_line(e)}") from None


def load_external(model, path: Path) -> None:
    """Load weights kept in files beside ``path`` (ONNX external data), if any."""
    from onnx.checker import ValidationError  # a data file missing, or outside the folder
    from onnx.external_data_helper import load_external_data_for_model, uses_external_data

    if any(uses_external_data(t) for t in model.graph.initializer):
        try:
            load_external_data_for_model(model, str(path.parent))
        except (OSError, ValueError, ValidationError) as e:
            raise ModelError(f"{path}: cannot read its external weight data: "
                             f"{str(e).strip()}") from None


def graph_input(model, path: Path):
    """The one graph input that is not an initialiser (a float tensor); the graph must
    have at least one output."""
    inits = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    if len(inputs) != 1 or not model.graph.output:
        outputs = [o.name for o in model.graph.output]
        raise ModelError(f"{path}: the graph has inputs {[i.name for i in inputs]} and outputs "
                         f"{outputs}; npusim networks have one input and one or more outputs")
    elem = inputs[0].type.tensor_type.elem_type
    if elem not in FLOAT_TYPES:
        raise ModelError(f"{path}: input {inputs[0].name!r} has element type "
                         f"{element_type(elem)}; npusim feeds float tensors "
                         f"({', '.join(map(element_type, FLOAT_TYPES))})")
    return inputs[0]


# ops that compute on quantised integers (QOperator format, and the integer kernels it is
# built from): ONNX's own and onnxruntime's com.microsoft ones
INTEGER_OPS = ("QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger", "QGemm",
               "QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu",
               "QLinearGlobalAveragePool", "QLinearAveragePool", "QLinearConcat",
               "QLinearSoftmax", "QLinearReduceMean", "QLinearConvTranspose",
               "DynamicQuantizeLinear")


def check_float_ops(model, path: Path) -> None:
    """Refuse a model whose ops compute on quantised integers (onnxruntime's QOperator
    format: QLinearConv, QGemm, ...), naming them and what imports instead: the IR
    carries float tensors, which a QDQ model keeps between its rounding steps."""
    found: dict[str, int] = {}
    for node in model.graph.node:
        if node.op_type in INTEGER_OPS:
            found[node.op_type] = found.get(node.op_type, 0) + 1
    if found:
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(found.items(), key=lambda i: -i[1]))
        raise ModelError(f"{path}: a model quantised in QOperator format ({ops}): its ops "
                         "compute on int8 tensors, and npusim's graphs carry float ones. "
                         "npusim imports the float model (then --dtype int8 runs it on the "
                         "machines' int8 datapaths) or one quantised in QDQ format "
                         "(QuantizeLinear/DequantizeLinear around float ops: "
                         "onnxruntime's quantize_static(..., quant_format=QuantFormat.QDQ))")


def element_type(elem: int) -> str:
    """The onnx.TensorProto name of an element type number: 7 -> 'INT64'."""
    from onnx import TensorProto

    try:
        return TensorProto.DataType.Name(elem)
    except ValueError:
        return f"unknown element type {elem}"


def static_dims(value_info) -> tuple | None:
    """The tensor's dimensions, None for each dynamic one (None if it has no shape)."""
    t = value_info.type.tensor_type
    if not t.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                 for d in t.shape.dim)


def set_input_shape(value_info, input_shape, path: Path, batch: int | None = None
                    ) -> tuple[int, ...]:
    """Fix the graph input's shape: the file's, or ``input_shape`` where it fits it. ``batch``
    fixes a dynamic batch (first) dimension (default 1), and is refused where the file
    fixes another."""
    dims = static_dims(value_info) or ()
    name = value_info.name
    _check_batch(dims, batch, name, path)
    if input_shape is None:
        if not dims or None in dims[1:]:
            shown = "x".join("?" if d is None else str(d) for d in dims) or "unknown"
            raise ModelError(f"{path}: input {name!r} has a dynamic shape ({shown}); pass "
                             "input_shape (--input-shape N,C,H,W) to fix it")
        shape = (dims[0] or batch or 1,) + dims[1:]  # a dynamic batch alone: batch, else 1
    else:
        shape = tuple(int(d) for d in input_shape)
        if (dims and len(shape) != len(dims)) or min(shape, default=0) < 1 or any(
                d is not None and d != s for d, s in zip(dims, shape, strict=False)):
            raise ModelError(f"{path}: input_shape={shape} does not fit input {name!r} of shape "
                             f"{tuple('?' if d is None else d for d in dims)}")
        if batch is not None and shape[0] != batch:
            raise ModelError(f"{path}: batch={batch} contradicts input_shape={shape}")
    t = value_info.type.tensor_type
    t.shape.ClearField("dim")
    for s in shape:
        t.shape.dim.add().dim_value = s
    return shape


def _check_batch(dims: tuple, batch: int | None, name: str, path: Path) -> None:
    """A batch the file fixes to another value cannot be changed: its graph may rely on it."""
    if batch is not None and dims and dims[0] is not None and dims[0] != batch:
        raise ModelError(f"{path}: input {name!r} has a fixed batch of {dims[0]}, so batch "
                         f"(--batch) {batch} cannot be run; export the model with a dynamic "
                         f"batch axis (torch.onnx.export(..., dynamic_axes={{{name!r}: "
                         "{0: 'N'}}))")


def infer(model, path: Path):
    """onnx shape inference, strict, with data propagation."""
    import onnx

    try:
        return onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True,
                                                 data_prop=True)
    except Exception as e:  # onnx raises InferenceError and, for bad graphs, RuntimeError
        raise ModelError(f"{path}: onnx shape inference failed: "
                         f"{str(e).strip().splitlines()[0]}") from None


def opset(model) -> int:
    """The default-domain opset version the model declares."""
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=1)


class NodeSession:
    """A one-node ONNX model run by onnxruntime (an ``ops.Fallback``'s computation):
    float32 numpy inputs (in ``inputs`` order) in, float32 numpy output out. The session
    is made on first use and not pickled (the model bytes are)."""

    def __init__(self, model_bytes: bytes, inputs: tuple[str, ...]):
        self.model_bytes, self.inputs, self._session = model_bytes, inputs, None

    def __getstate__(self) -> dict:
        return {"model_bytes": self.model_bytes, "inputs": self.inputs, "_session": None}

    def session(self):
        """The onnxruntime session (made on first use)."""
        if self._session is None:
            try:
                import onnxruntime
            except ImportError as e:
                raise ModelError("a fallback ONNX op needs onnxruntime: pip install "
                                 "'npusim[onnx]'") from e
            self._session = onnxruntime.InferenceSession(
                self.model_bytes, providers=["CPUExecutionProvider"])
        return self._session

    def refusal(self) -> str | None:
        """Why onnxruntime will not run the node on float32 tensors in and out (a
        DequantizeLinear reads integers, a QuantizeLinear writes them), or None: the
        session made at import, so the refusal comes then, not as a run's traceback."""
        try:
            self.session()
        except ModelError:
            raise
        except Exception as e:  # noqa: BLE001 - onnxruntime raises its own error types
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            return f"onnxruntime will not run it on float32 tensors ({first[:200]})"
        return None

    def __call__(self, *arrays):
        feeds = {name: np.ascontiguousarray(a, np.float32)
                 for name, a in zip(self.inputs, arrays, strict=True)}
        return self.session().run(None, feeds)[0]
