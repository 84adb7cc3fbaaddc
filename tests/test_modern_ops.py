"""The ops of post-2018 mobile networks: each op against torch in float64, its vector cost
against the rule written by hand, both importers on each op, and the blocks themselves (SE,
MobileNetV3 inverted residual, EfficientNet MBConv, ShuffleNetV2 unit, MnasNet head, ConvNeXt
block) through from_torch and through ONNX, run on a dense and a sparse machine and judged
by torch, onnxruntime and the ``--check`` comparison."""

import copy
import importlib.util
import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
import torch.nn.functional as F  # noqa: E402
from strategies import photo, rel_err  # noqa: E402
from torch import nn  # noqa: E402

from npusim import ops, simulate  # noqa: E402
from npusim.arch import load_arch  # noqa: E402
from npusim.frontends.onnx_import import from_onnx  # noqa: E402
from npusim.frontends.torch_import import from_factory, from_torch  # noqa: E402
from npusim.report.check import check  # noqa: E402

BLOCKS_FILE = Path(__file__).parent / "data" / "import" / "modern_blocks.py"
ARCHS = ["systolic-32x32-ws", "sparse-pairs-32x32"]
SHAPE = (1, 3, 32, 32)


def blocks():
    spec = importlib.util.spec_from_file_location("modern_blocks", BLOCKS_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def torch64(net: nn.Module, x: np.ndarray) -> np.ndarray:
    """The module's output in float64 (a copy, so the float32 module stays as it is)."""
    with torch.no_grad():
        return copy.deepcopy(net).double()(torch.from_numpy(x.astype(np.float64))).numpy()


def export(net: nn.Module, x: np.ndarray, path: Path, opset: int = 17,
           exporter: str = "torchscript") -> Path:
    """``net`` as an ONNX file: by the TorchScript exporter at ``opset``, or (``exporter``
    "dynamo") as ``torch.onnx.export`` writes it by default since torch 2.9, at the opset
    and with the op patterns of its own choosing."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            torch.onnx.export(net, (torch.from_numpy(x),), str(path), dynamo=True,
                              verbose=False)
        else:
            torch.onnx.export(net, (torch.from_numpy(x),), str(path), dynamo=False,
                              opset_version=opset)
    return path


def onnxruntime_output(path: Path, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


# ---- each op against torch in float64 --------------------------------------------------

X = np.random.default_rng(0).standard_normal((2, 4, 5, 6)).astype(np.float32) * 4
X[0, 0, 0, :3] = [-90.0, 90.0, 0.0]  # sigmoid's tails must not overflow

ACTIVATIONS = [
    (ops.Sigmoid(), torch.sigmoid, 3),
    (ops.HardSigmoid(), F.hardsigmoid, 4),
    (ops.HardSigmoid(0.2, 0.5), lambda t: torch.clamp(0.2 * t + 0.5, 0, 1), 4),
    (ops.HardSwish(), F.hardswish, 5),
    (ops.Silu(), F.silu, 4),
    (ops.Softplus(), F.softplus, 4),
    (ops.Softplus(2.0, 5.0), lambda t: F.softplus(t, 2.0, 5.0), 6),
    (ops.Mish(), F.mish, 6),
    (ops.Elu(), F.elu, 4),
    (ops.Elu(0.3), lambda t: F.elu(t, 0.3), 4),
    (ops.Tanh(), torch.tanh, 1),
    (ops.Erf(), torch.erf, 1),
    (ops.Sqrt(), lambda t: torch.sqrt(t.abs()), 1),
    (ops.Exp(), torch.exp, 1),
    (ops.Log(), torch.log, 1),
    (ops.Abs(), torch.abs, 1),
    (ops.Gelu(), F.gelu, 5),
    (ops.Gelu("tanh"), lambda t: F.gelu(t, approximate="tanh"), 9),
    (ops.Clip(-1.5, 2.25), lambda t: torch.clamp(t, -1.5, 2.25), 2),
    (ops.Clip(None, 0.5), lambda t: torch.clamp(t, max=0.5), 1),
]


@pytest.mark.parametrize("op, reference, per_element", ACTIVATIONS,
                         ids=lambda v: repr(v) if isinstance(v, ops.Op) else "")
def test_activation_equals_torch_float64_and_costs_its_rule(op, reference, per_element):
    x = np.abs(X) if isinstance(op, (ops.Sqrt, ops.Log)) else X / 8 if isinstance(op, ops.Exp) \
        else X
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        ours = op(x)
    want = reference(torch.from_numpy(x.astype(np.float64))).numpy()
    assert ours.dtype == np.float32 and ours.shape == x.shape
    np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-6)
    assert op.vector_ops([x.shape], x.shape) == x.size * per_element


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_hardswish_is_torchs_bit_for_bit_in_place_or_not(dtype, layout):
    """PyTorch's kernel computes ``x * min(max(x + 3, 0), 6) / 6`` in the tensor's type, each
    step rounded once: npusim's values are its own, on a new array and written over the
    input (a transposed one takes numpy's passes), through the infinities and the clip's
    edges."""
    x = (np.random.default_rng(3).standard_normal((2, 24, 9, 13)) * 5).astype(dtype)
    x[0, 0, 0, :7] = [np.inf, -np.inf, -3.0, 3.0, -0.0, 1e-30, -2.9999998]
    if layout == "transposed":
        x = x.transpose(0, 2, 1, 3)
    want = F.hardswish(torch.from_numpy(np.ascontiguousarray(x))).numpy()
    op, over = ops.HardSwish(), x.copy(order="K")
    with np.errstate(invalid="ignore"):  # -inf x 0 is NaN, as in PyTorch
        fresh = op(x)
        assert op.in_place(over) is over
    assert fresh.dtype == dtype and np.array_equal(fresh, want, equal_nan=True)
    assert np.array_equal(over, want, equal_nan=True)


BROADCASTS = [((2, 4, 5, 6), (2, 4, 1, 1)), ((2, 4, 5, 6), (6,)), ((2, 1, 5, 1), (1, 4, 1, 6)),
              ((2, 4, 5, 6), ())]


@pytest.mark.parametrize("kind", ["add", "sub", "mul", "div", "max", "min"])
@pytest.mark.parametrize("a_shape, b_shape", BROADCASTS)
def test_elementwise_broadcasts_as_numpy_and_torch(kind, a_shape, b_shape):
    rng = np.random.default_rng(1)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = np.asarray(rng.random(b_shape) + 0.5, np.float32)
    fn = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
          "max": torch.maximum, "min": torch.minimum}[kind]
    want = fn(torch.from_numpy(a).double(), torch.from_numpy(b).double()).numpy()
    two = ops.Elementwise(kind)
    assert two.out_shape([a_shape, b_shape], "e") == want.shape
    np.testing.assert_allclose(two(a, b), want, rtol=1e-6)
    const = ops.Elementwise(kind, b)  # the same with b as a constant, on either side
    np.testing.assert_allclose(const(a), want, rtol=1e-6)
    flipped = fn(torch.from_numpy(b).double(), torch.from_numpy(a).double()).numpy()
    np.testing.assert_allclose(ops.Elementwise(kind, b, True)(a), flipped, rtol=1e-6)
    assert two.vector_ops([a_shape, b_shape], want.shape) == want.size


def test_elementwise_refuses_shapes_that_do_not_broadcast():
    with pytest.raises(ops.LayerError, match=r"m: mul of shapes \[\(1, 4, 5, 6\), \(5,\)\] that "
                                             r"do not broadcast"):
        ops.Elementwise("mul").out_shape([(1, 4, 5, 6), (5,)], "m")


REDUCE_REFERENCES = {  # float64 PyTorch
    "mean": torch.mean, "max": torch.amax, "min": torch.amin, "sum": torch.sum,
    "l1": lambda t, dim, keepdim: torch.linalg.vector_norm(t, 1, dim=dim, keepdim=keepdim),
    "l2": lambda t, dim, keepdim: torch.linalg.vector_norm(t, 2, dim=dim, keepdim=keepdim),
}


@pytest.mark.parametrize("kind", list(REDUCE_REFERENCES))
@pytest.mark.parametrize("axes", [(2, 3), (1,), (-1,), (1, 2, 3), (0, 2)])
@pytest.mark.parametrize("keepdims", [True, False])
def test_reduce_equals_torch(kind, axes, keepdims):
    op = ops.Reduce(kind, axes, keepdims)
    t = torch.from_numpy(X.astype(np.float64))
    want = REDUCE_REFERENCES[kind](t, dim=axes, keepdim=keepdims).numpy()
    assert op.out_shape([X.shape], "r") == want.shape
    got = op(X)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6)
    # one op per input element; a norm's magnitude or square and add, and L2's square root
    per_input = 2 if kind in ("l1", "l2") else 1
    assert op.vector_ops([X.shape], want.shape) == \
        per_input * X.size + (want.size if kind == "l2" else 0)


def test_an_unknown_reduce_kind_is_refused_with_the_kinds():
    with pytest.raises(ops.LayerError, match=r"r: Reduce kind 'prod': must be one of 'mean', "
                                             r"'sum', 'max', 'min', 'l1', 'l2'"):
        ops.Reduce("prod", (1,)).out_shape([X.shape], "r")


def test_a_mean_over_h_and_w_is_the_global_average_pool():
    pooled = ops.GlobalAvgPool()(X)
    np.testing.assert_array_equal(ops.Reduce("mean", (2, 3), True)(X), pooled)
    assert ops.Reduce("mean", (2, 3), False).vector_ops([X.shape], (2, 4)) == \
        ops.GlobalAvgPool().vector_ops([X.shape], pooled.shape)


def test_transpose_slice_and_channel_shuffle_move_data_exactly():
    perm = (0, 2, 3, 1)
    assert np.array_equal(ops.Transpose(perm)(X), X.transpose(perm))
    assert ops.Transpose(perm).vector_ops([X.shape], (2, 5, 6, 4)) == X.size
    cut = ops.Slice(3, 1, None, 2)
    assert np.array_equal(cut(X), X[:, :, :, 1::2])
    assert cut.out_shape([X.shape], "s") == (2, 4, 5, 3)
    assert cut.vector_ops([X.shape], (2, 4, 5, 3)) == 2 * 4 * 5 * 3
    shuffled = ops.Reshape((4, 5, 6))(ops.Transpose((0, 2, 1, 3, 4))(
        ops.Reshape((2, 2, 5, 6))(X)))
    want = X[:, [0, 2, 1, 3]]  # two groups of two channels, interleaved
    assert np.array_equal(shuffled, want)
    with pytest.raises(ops.LayerError, match=r"s: Slice 7:None:1 of axis 1 \(size 4\) is empty"):
        ops.Slice(1, 7).out_shape([X.shape], "s")


def test_layer_and_group_norm_equal_torch_float64():
    rng = np.random.default_rng(2)
    w, b = rng.random(6).astype(np.float32) + 0.5, rng.standard_normal(6).astype(np.float32)
    t = torch.from_numpy(X.astype(np.float64))
    want = F.layer_norm(t, (6,), torch.from_numpy(w).double(), torch.from_numpy(b).double(),
                        1e-6).numpy()
    np.testing.assert_allclose(ops.LayerNorm(w, b, 1e-6)(X), want, rtol=1e-5, atol=1e-6)
    gw, gb = w[:4], b[:4]
    want = F.group_norm(t, 2, torch.from_numpy(gw).double(), torch.from_numpy(gb).double(),
                        1e-5).numpy()
    np.testing.assert_allclose(ops.GroupNorm(2, gw, gb)(X), want, rtol=1e-5, atol=1e-6)
    assert ops.LayerNorm(w, b).vector_ops([X.shape], X.shape) == 6 * X.size


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate"])
def test_pad_equals_torch(mode):
    op = ops.Pad((1, 2, 3, 0), mode, 0.5)
    kwargs = {"value": 0.5} if mode == "constant" else {}
    want = F.pad(torch.from_numpy(X), (3, 0, 1, 2), mode=mode, **kwargs).numpy()
    assert op.out_shape([X.shape], "p") == want.shape
    assert np.array_equal(op(X), want)
    assert op.vector_ops([X.shape], want.shape) == want.size
    with pytest.raises(ops.LayerError, match=r"p: reflect padding \(5, 0, 0, 0\) must be "
                                             r"smaller than the map 5x6"):
        ops.Pad((5, 0, 0, 0), "reflect").out_shape([X.shape], "p")


def test_vector_cycles_are_ops_over_lanes():
    """A hardswish on 1 x 24 x 7 x 7: 5 ops per element, ceil(5880 / lanes) cycles."""
    graph = from_torch(nn.Hardswish(), torch.zeros(1, 24, 7, 7))
    arch = load_arch(ARCHS[0])
    (st,) = simulate(graph, photo((1, 24, 7, 7)), arch).layers
    assert st.vector_ops == 5 * 24 * 49
    assert st.cycles == math.ceil(5 * 24 * 49 / arch.vector.lanes)


# ---- each op through both importers ----------------------------------------------------


class OnConv(nn.Module):
    """A conv, then ``fn`` of its output (so every op reads a computed tensor)."""

    def __init__(self, fn, c_out=8):
        super().__init__()
        self.conv, self.fn = nn.Conv2d(3, c_out, 3, padding=1), fn

    def forward(self, x):
        return self.fn(self.conv(x))


SCALE = torch.linspace(0.5, 1.5, 8).reshape(1, 8, 1, 1)
FUNCTIONS = {
    "sigmoid": torch.sigmoid, "hardsigmoid": F.hardsigmoid, "hardswish": F.hardswish,
    "silu": F.silu, "tanh": torch.tanh, "gelu": F.gelu,
    "gelu_tanh": lambda y: F.gelu(y, approximate="tanh"),
    "clip": lambda y: torch.clamp(y, -0.3, 0.4), "clip_min": lambda y: y.clamp(min=-0.2),
    "se_scale": lambda y: y * torch.sigmoid(y.mean((2, 3), keepdim=True)),
    "div": lambda y: y / (1 + torch.sigmoid(y)), "sub": lambda y: y - y.amax(1, keepdim=True),
    "max_min": lambda y: torch.minimum(torch.maximum(y, y[:, :1]), 2 - y),
    "const_ops": lambda y: (3 - y) * SCALE / 2 + torch.arange(10.0)[None, None, None],
    "mean_hw": lambda y: y.mean([2, 3]), "mean_c": lambda y: y.mean(1),
    "max_hw": lambda y: y.amax((2, 3), keepdim=True),
    "permute": lambda y: y.permute(0, 2, 3, 1).reshape(1, 16, 5, 8),
    "transpose": lambda y: torch.transpose(y, 2, 3),
    "view": lambda y: y.view(1, 4, 2, 8, 10).flatten(1), "flatten": lambda y: y.flatten(2),
    "squeeze": lambda y: y[:, :1].squeeze(1), "unsqueeze": lambda y: y.unsqueeze(2),
    "chunk": lambda y: (lambda p: torch.cat([p[2], p[0], p[1]], 1))(y.chunk(3, dim=1)),
    "split": lambda y: (lambda p: torch.cat([p[1], p[0]], 1))(torch.split(y, [2, 6], 1)),
    "slice": lambda y: y[:, 1:7:2, 2:], "shuffle": lambda y: y.view(1, 2, 4, 8, 10)
    .transpose(1, 2).reshape(1, 8, 8, 10),
    "cat_h": lambda y: torch.cat([y, F.relu(y)], 2), "cat_batch": lambda y: torch.cat([y, y]),
    "dropout": lambda y: F.dropout(y, 0.5, training=False),
    "layer_norm": lambda y: F.layer_norm(y, (10,)),
    "layer_norm_hw": nn.LayerNorm((8, 10)), "group_norm": nn.GroupNorm(4, 8),
    "linear_last_axis": nn.Linear(10, 5),
    "pad_reflect": lambda y: F.pad(y, (1, 2, 3, 0), mode="reflect"),
    "pad_replicate": nn.ReplicationPad2d((2, 0, 1, 1)),
    "conv_reflect": nn.Conv2d(8, 4, 3, padding=(1, 2), padding_mode="reflect"),
    "conv_replicate": nn.Conv2d(8, 4, 3, padding=1, padding_mode="replicate"),
    # a UNet's up block: the upsampled map padded to its skip's size, then joined to it (the
    # pad is a Pad of its own: a concat cannot absorb it); at equal sizes the export's pad
    # is all zeros
    "pad_cat": lambda y: torch.cat([y, F.pad(y[:, :, :7, :9], (0, 1, 1, 0))], 1),
    "pad_cat_both": lambda y: torch.cat([F.pad(y, (1, 0, 0, 1)), F.pad(y, (0, 1, 1, 0))], 1),
    "pad_zero_cat": lambda y: torch.cat([y, F.pad(y, (0, y.shape[3] - 10, 0, 0))], 1),
    "float_cast": lambda y: F.relu(y.float()) + y.to(torch.float32),  # an export's Cast
}


@pytest.fixture(scope="module")
def photo_8x10():
    return photo((1, 3, 8, 10))


@pytest.mark.parametrize("name", FUNCTIONS)
def test_op_through_from_torch_equals_torch(name, photo_8x10):
    torch.manual_seed(0)
    net = OnConv(FUNCTIONS[name]).eval()
    graph = from_torch(net, photo_8x10)
    result = simulate(graph, photo_8x10, keep_outputs=True)
    assert rel_err(result.output, torch64(net, photo_8x10)) < 1e-5
    assert check(graph, photo_8x10, result).worst < 1e-5


@pytest.mark.parametrize("opset", [13, 17])
@pytest.mark.parametrize("name", FUNCTIONS)
def test_op_through_onnx_equals_onnxruntime(name, opset, photo_8x10, tmp_path):
    torch.manual_seed(0)
    path = export(OnConv(FUNCTIONS[name]).eval(), photo_8x10, tmp_path / "m.onnx", opset)
    graph = from_onnx(path)
    want = onnxruntime_output(path, photo_8x10)
    assert rel_err(simulate(graph, photo_8x10).output, want) < 1e-5


def test_onnx_erf_gelu_becomes_one_gelu_node(photo_8x10, tmp_path):
    path = export(OnConv(F.gelu).eval(), photo_8x10, tmp_path / "g.onnx", 17)
    kinds = [type(n.op).__name__ for n in from_onnx(path).nodes]
    assert kinds == ["Conv", "Gelu"]
    assert "Erf" in {n.op_type for n in onnx.load(str(path)).graph.node}


def test_refusals_name_the_node_and_what_is_valid(photo_8x10):
    from npusim.errors import ModelError

    with pytest.raises(ModelError, match=r"operator.getitem x1 \(node 'getitem': indexing "
                                         r"\(1, 8, 8, 10\) with \(slice\(None, None, None\), "
                                         r"\[0, 3\]\)"):
        from_torch(OnConv(lambda y: y[:, [0, 3]]), photo_8x10)
    with pytest.raises(ModelError, match=r"node 'getitem': indexes the parts of chunk / split "
                                         r"with slice\(1, None, None\); take each part"):
        from_torch(OnConv(lambda y: torch.cat(y.chunk(2, 1)[1:], 1)), photo_8x10)
    with pytest.raises(ModelError, match=r"torch.add x1 \(node 'add': alpha=2: only a plain "
                                         r"sum or difference"):
        from_torch(OnConv(lambda y: torch.add(y, y, alpha=2)), photo_8x10)


# ---- the blocks ------------------------------------------------------------------------

BLOCKS = {  # factory -> op types the imported graph must hold (the block's own ops)
    "se_block": {"Sigmoid", "Elementwise", "GlobalAvgPool"},
    "mobilenet_v3_block": {"HardSwish", "HardSigmoid", "Elementwise", "Add"},
    "mbconv": {"Silu", "Sigmoid", "Elementwise", "Add"},
    "shufflenet_unit": {"Slice", "Concat", "Reshape", "Transpose"},
    "mnasnet_head": {"Reduce"},
    "convnext_block": {"Transpose", "LayerNorm", "Gelu", "Add"},
    "deconv_decoder": {"ZeroInsert", "Conv"},
    "detect_head": {"Sigmoid", "Slice", "Elementwise", "Concat", "Transpose"},
}


@pytest.fixture(scope="module")
def block_input():
    return photo(SHAPE)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("block", BLOCKS)
def test_block_through_from_torch(block, arch, block_input):
    net = getattr(blocks(), block)()
    graph = from_torch(net, block_input)
    assert BLOCKS[block] <= {type(n.op).__name__ for n in graph.nodes}
    result = simulate(graph, block_input, arch, keep_outputs=True)
    assert rel_err(result.output, torch64(net, block_input)) < 1e-4
    outcome = check(graph, block_input, result)
    assert outcome.passed and outcome.worst < 1e-4, outcome.line()


@pytest.mark.parametrize("arch, exporter", [(arch, "torchscript") for arch in ARCHS]
                         + [(ARCHS[0], "dynamo")])
@pytest.mark.parametrize("block", BLOCKS)
def test_block_through_onnx(block, arch, exporter, block_input, tmp_path):
    net = getattr(blocks(), block)()
    path = export(net, block_input, tmp_path / f"{block}.onnx", exporter=exporter)
    opset = {o.domain: o.version for o in onnx.load(str(path)).opset_import}[""]
    assert opset == 17 if exporter == "torchscript" else opset >= 18  # the exporter named
    graph = from_onnx(path)
    result = simulate(graph, block_input, arch, keep_outputs=True)
    assert rel_err(result.output, onnxruntime_output(path, block_input)) < 1e-4
    assert rel_err(result.output, torch64(net, block_input)) < 1e-4
    assert check(graph, block_input, result).passed


def test_block_in_int8_follows_the_existing_scheme(block_input):
    """int8: convs in the int8 scheme, the new vector ops in float32 on their dequantized
    inputs, as the existing vector ops; --check judges each conv against its rounding."""
    graph = from_torch(blocks().mbconv(), block_input)
    result = simulate(graph, block_input, ARCHS[0], dtype="int8", keep_outputs=True)
    outcome = check(graph, block_input, result)
    assert outcome.passed, outcome.line()
    silu = next(s for s in result.layers if s.shape == "Silu")
    assert silu.sram_ofmap_bytes == 2 * math.prod(graph.shapes[silu.name])  # 1 byte in + out


def test_cli_check_on_a_block_factory(tmp_path, capsys):
    from npusim import cli

    report = tmp_path / "r.json"
    code = cli.main(["run", f"{BLOCKS_FILE}:mobilenet_v3_block", "--input-shape", "1,3,32,32",
                     "--arch", "sparse-pairs-32x32", "--check", "--quiet", "--json",
                     str(report)])
    assert code == 0, capsys.readouterr().err
    outcome = json.loads(report.read_text())["check"]
    assert outcome["passed"] and outcome["worst_relative_error"] < 1e-4
    assert from_factory(f"{BLOCKS_FILE}:convnext_block", (1, 3, 32, 32)).output_shape == \
        (1, 16, 8, 8)


def test_transposes_that_undo_each_other_are_dropped(photo_8x10):
    """ConvNeXt's second linear layer goes back to channels-last and the block permutes
    straight to channels-first: neither data move is made."""
    net = blocks().convnext_block()
    x = photo(SHAPE)
    kinds = [type(n.op).__name__ for n in from_torch(net, x).nodes]
    assert kinds == ["Conv", "Conv", "Transpose", "LayerNorm", "Transpose", "Conv", "Transpose",
                     "Gelu", "Transpose", "Conv", "Add"]
    net = OnConv(lambda y: torch.tanh(F.relu(y.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
                                      .permute(0, 2, 3, 1))).eval()
    graph = from_torch(net, photo_8x10)
    assert [type(n.op).__name__ for n in graph.nodes] == ["Conv", "Transpose", "Relu", "Tanh"]
    assert rel_err(simulate(graph, photo_8x10).output, torch64(net, photo_8x10)) < 1e-5


def test_pairs_of_transposes_in_a_row_are_all_dropped(photo_8x10):
    """Two channels-last linear layers, each permuted there and back (a linear layer on
    N x H x W x C is a conv between two transposes): each pair reads the one before, dropped
    too, and no data move is left."""
    class TwoLinear(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.first, self.second = (nn.Conv2d(3, 8, 3, padding=1),
                                                  nn.Linear(8, 6), nn.Linear(6, 5))

        def forward(self, x):
            y = self.first(self.conv(x).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
            return F.relu(self.second(y.permute(0, 2, 3, 1)).permute(0, 3, 1, 2))

    torch.manual_seed(0)
    net = TwoLinear().eval()
    graph = from_torch(net, photo_8x10)
    assert [type(n.op).__name__ for n in graph.nodes] == ["Conv", "Conv", "Conv", "Relu"]
    assert rel_err(simulate(graph, photo_8x10).output, torch64(net, photo_8x10)) < 1e-5
    bare = OnConv(lambda y: F.relu(y.permute(0, 2, 3, 1).permute(0, 3, 1, 2)
                                   .permute(0, 2, 3, 1).permute(0, 3, 1, 2))).eval()
    graph = from_torch(bare, photo_8x10)
    assert [type(n.op).__name__ for n in graph.nodes] == ["Conv", "Relu"]
    assert rel_err(simulate(graph, photo_8x10).output, torch64(bare, photo_8x10)) < 1e-5


CONV_TRANSPOSES = [dict(stride=2, padding=1, output_padding=1), dict(stride=(2, 3), padding=(0, 1)),
                   dict(stride=1, padding=2, groups=2), dict(stride=3, padding=1, groups=4,
                                                             output_padding=(1, 2))]


@pytest.mark.parametrize("arch", ["systolic-32x32-ws", "systolic-32x32-os", "group-tile-32mac",
                                  "input-reuse-1024", "sparse-pairs-32x32",
                                  "dilated-grid-2x2-h3"])
@pytest.mark.parametrize("kwargs", CONV_TRANSPOSES, ids=str)
def test_conv_transpose_is_the_conv_of_the_zero_inserted_input(kwargs, arch, tmp_path):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1),
                        nn.ConvTranspose2d(8, 4, 3 if "groups" not in kwargs else 5,
                                           **kwargs)).eval()
    x = photo((1, 3, 5, 6))
    graph = from_torch(net, x)
    zeros = [n for n in graph.nodes if isinstance(n.op, ops.ZeroInsert)]
    assert len(zeros) == (kwargs["stride"] != 1)
    result = simulate(graph, x, arch, keep_outputs=True)
    assert rel_err(result.output, torch64(net, x)) < 1e-5
    assert check(graph, x, result).passed
    path = export(net, x, tmp_path / "t.onnx")
    assert rel_err(simulate(from_onnx(path), x, arch).output, onnxruntime_output(path, x)) < 1e-5
