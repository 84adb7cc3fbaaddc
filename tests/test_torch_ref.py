"""The PyTorch mirror of a Graph: covers every op, agrees with npusim node by node, and is
traceable by torch.fx and exportable to ONNX (checked with onnxruntime)."""

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from strategies import conv_layers, tensors

import npusim
from npusim import ops, reference, torch_ref
from npusim.errors import LayerError, ModelError
from npusim.frontends import images
from npusim.ir import GraphBuilder
from npusim.torch_ref import to_torch, torch_outputs

torch = pytest.importorskip("torch")

# Fallback is the source framework's own computation (tests/test_fallback.py), not an op
# with a torch mirror of npusim's arithmetic
ALL_OPS = {c for c in vars(ops).values()
           if isinstance(c, type) and issubclass(c, ops.Op) and c not in (ops.Op, ops.Fallback)}


def every_op_graph():
    """A small network holding every op of ops.py, with the odd geometries torch lacks."""
    rng = np.random.default_rng(0)

    def w(*shape):
        return rng.standard_normal(shape).astype(np.float32) * 0.4

    g = GraphBuilder("every-op", (2, 3, 15, 13))
    x = g.conv(g.input, w(8, 3, 3, 3), w(8), stride=2, padding=(0, 1, 2, 1), name="conv_asym")
    x = g.batchnorm(x, w(8) + 1, w(8), w(8), np.abs(w(8)) + 0.5, name="bn")
    x = g.prelu(x, w(8), name="prelu")
    a = g.maxpool(x, 3, 2, (0, 1, 0, 1), ceil_mode=True, name="max_asym_ceil")
    b = g.avgpool(x, 3, 2, (1, 0, 1, 0), ceil_mode=True, count_include_pad=False,
                  name="avg_asym_ceil_excl")
    c = g.avgpool(x, 3, 2, (0, 2, 1, 1), ceil_mode=True, count_include_pad=True,
                  name="avg_asym_ceil_incl")
    d = g.avgpool(x, 2, 2, 1, count_include_pad=False, name="avg_native")
    e = g.maxpool(x, 2, 2, 1, ceil_mode=True, name="max_sym_ceil")
    g.maxpool(x, (2, 3), (1, 2), (1, 0, 0, 1), ceil_mode=True, dilation=(2, 1),
              name="max_dilated_asym_ceil")
    s = g.add(a, b, c, name="add3")
    s = g.concat(s, d, e, name="cat")
    s = g.conv(s, w(6, 12, 3, 3), None, padding=1, dilation=2, groups=2, name="conv_dil_g")
    s = g.relu6(g.leakyrelu(s, 0.1, name="leaky"), name="relu6")
    t = g.hardsigmoid(g.sigmoid(s, name="sigmoid"), alpha=0.2, beta=0.5, name="hsig")
    t = g.tanh(g.silu(g.hardswish(t, name="hswish"), name="silu"), name="tanh")
    t = g.elu(g.mish(g.softplus(t, 2.0, 1.5, name="softplus"), name="mish"), 0.7, name="elu")
    t = g.log(g.exp(g.abs(t, name="abs"), name="exp"), name="log")
    t = g.gelu(g.gelu(g.erf(t, name="erf"), name="gelu"), approximate="tanh", name="gelu_t")
    t = g.clip(t, -0.5, 0.3, name="clip")
    for fn in ("sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "atanh"):
        g.trig(t, fn=fn, name=f"trig_{fn}")  # in [-0.5, 0.3]: every inverse's domain
    g.cumsum(t, axis=2, name="cumsum_h")
    g.cumsum(t, axis=-1, exclusive=True, reverse=True, name="cumsum_w_exclusive_reversed")
    g.cumsum(t, axis=1, reverse=True, name="cumsum_c_reversed")
    g.cumextreme(t, kind="max", axis=2, name="cummax_h")
    flow = g.transpose(g.slice(t, axis=1, start=0, stop=2, name="flow_xy"), perm=(0, 2, 3, 1),
                       name="flow_nhwc")
    points = g.elementwise(flow, kind="mul", const=np.float32(2.5), name="points")
    g.gridsample(t, points, padding="reflection", align_corners=True, name="warp")
    g.gridsample(t, mode="nearest", padding="border",
                 grid=rng.uniform(-1.2, 1.2, (1, 4, 5, 2)).astype(np.float32), name="warp_fixed")
    g.cumextreme(t, kind="min", axis=-1, name="cummin_w")
    g.elu(t, 1.5, input_scale=1 / 1.5, name="celu")
    for mode in ("floor", "ceil", "nearest", "trunc"):
        g.round(g.elementwise(t, kind="mul", const=np.float32(5.0), name=f"times5_{mode}"),
                mode=mode, name=f"round_{mode}")
    g.localresponsenorm(t, size=4, alpha=0.05, beta=0.75, k=1.5, front=1, name="lrn")
    g.fakequant(t, scale=np.float32([0.01, 0.02, 0.005, 0.03, 0.01, 0.04]),
                zero_point=np.int8([0, 3, -7, 0, 1, 0]), name="fake_quant")
    t = g.elementwise(t, g.reduce(t, kind="mean", axes=(2, 3), name="mean_hw"), kind="mul",
                      name="se_mul")
    t = g.elementwise(t, g.broadcast(g.reduce(t, kind="sum", axes=(1,), name="sum_c"),
                                     (6, 2, 2), name="expand"), kind="add", name="plus_sum")
    t = g.elementwise(t, kind="sub", const=w(6, 1, 1), const_first=True, name="c_minus_x")
    g.elementwise(t, kind="floordiv", const=np.float32(0.1), name="floordiv")
    g.elementwise(t, kind="remainder", const=np.float32(-0.3), name="remainder")
    g.elementwise(t, g.elementwise(t, kind="add", const=np.float32(7), name="seven_more"),
                  kind="fmod", name="fmod")
    over = g.elementwise(t, kind="greater_equal", const=np.float32(0.1), name="at_least")
    t = g.where(over, g.sign(t, name="sign"), b=np.float32(-0.25), name="select")
    g.gathernd(t, indices=np.array([[[1, 0], [0, 2]], [[1, 1], [0, 0]]]), name="gather_nd")
    g.matmul(t, g.transpose(t, perm=(0, 1, 3, 2), name="t_hw"), name="gram")  # two computed
    q = g.transpose(t, perm=(0, 2, 3, 1), name="to_nhwc")
    q = g.transpose(g.layernorm(q, weight=w(6) + 1, bias=w(6), name="ln"), perm=(0, 3, 1, 2),
                    name="to_nchw")
    q = g.slice(g.groupnorm(q, groups=2, weight=w(6) + 1, bias=w(6), name="gn"), axis=1,
                start=1, stop=5, step=2, name="slice")
    g.slice(g.slice(q, axis=3, start=-1, stop=None, step=-1, name="flip_w"), axis=2, start=3,
            stop=0, step=-2, name="back_h")
    q = g.sqrt(g.elementwise(g.elementwise(q, kind="pow", const=np.float32(2), name="square"),
                             kind="add", const=np.float32(1), name="plus1"), name="sqrt")
    g.trig(q, fn="acosh", name="trig_acosh")  # sqrt(q^2 + 1) >= 1: acosh's domain
    q = g.pad(g.pad(q, padding=(1, 0, 1, 0), mode="reflect", name="pad_reflect"),
              padding=(0, 2, 1, 1), mode="replicate", name="pad_replicate")
    q = g.pad(q, padding=(1, 1, 0, 0), value=-2.0, name="pad_constant")
    g.pad(q, padding=(2, 0, 1, 3), mode="circular", name="pad_circular")
    q = g.zeroinsert(q, stride=(2, 3), name="zeros")
    g.reduce(q, kind="max", axes=(1,), keepdims=False, name="max_c")
    g.reduce(q, kind="min", axes=(2, 3), name="min_hw")
    g.reduce(t, kind="l1", axes=(1,), name="l1_c")
    g.reduce(t, kind="l2", axes=(2, 3), keepdims=False, name="l2_hw")
    u = g.upsample(s, 1.5, mode="bilinear", align_corners=False, name="up_bilinear")
    v = g.upsample(s, size=(5, 7), mode="bilinear", align_corners=True, name="up_aligned")
    n = g.upsample(v, 2.5, mode="nearest", name="up_nearest")
    g.upsample(v, size=(9, 4), mode="bicubic", name="up_bicubic")
    g.upsample(s, 1.5, mode="bicubic", align_corners=True, name="up_bicubic_aligned")
    m = g.conv(n, w(6, 6, 3, 3), w(6), stride=(2, 3), padding=(1, 0), name="conv_down")
    m = g.adaptiveavgpool(m, (3, 2), name="adaptive_avg")  # 6 x 5 -> 3 x 2: unequal windows
    m = g.adaptivemaxpool(m, (4, 3), name="adaptive_max")  # 3 x 2 -> 4 x 3: repeated ones
    y = g.relu(g.add(g.globalavgpool(u, name="gap_u"), g.globalavgpool(m, name="gap_m")))
    y = g.reshape(g.identity(g.flatten(y, name="flat")), (6,), name="reshape")
    y = g.linear(y, w(10, 6), w(10), name="fc")
    y = g.batchnorm(y, w(10) + 1, w(10), w(10), np.abs(w(10)) + 0.5, name="bn_fc")
    y = g.prelu(y, np.float32([0.3]), name="prelu_shared")
    g.softmax(y, log=True, name="log_prob")
    g.softmax(y, name="prob")
    return g.build()


def rel_err(a, b):
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


@pytest.fixture(scope="module")
def graph():
    return every_op_graph()


@pytest.fixture(scope="module")
def photo(graph):
    x = images.load_image("coffee", graph.input_shape[2:])
    return np.stack([x, x[:, ::-1]])


def test_the_graph_covers_every_op(graph):
    used = {type(n.op) for n in graph.nodes}
    assert ALL_OPS - used == set()


def test_every_node_agrees_with_npusim(graph, photo):
    ours = npusim.simulate(graph, photo, "systolic-32x32-ws", keep_outputs=True).outputs
    theirs = torch_outputs(graph, photo)
    assert set(theirs) == set(ours)
    for name in theirs:
        assert theirs[name].shape == ours[name].shape, name
        assert rel_err(ours[name], theirs[name]) < 1e-5, name


def test_fx_trace_gives_the_same_output(graph, photo):
    module = to_torch(graph)
    traced = torch.fx.symbolic_trace(module)
    x = torch.from_numpy(photo)
    with torch.no_grad():
        np.testing.assert_array_equal(traced(x).numpy(), module(x).numpy())
    assert any(n.op == "call_function" and n.target is torch.nn.functional.pad
               for n in traced.graph.nodes)


# torch's own group_norm checks its input's size as a Python bool, which the exporter's
# trace warns of (the size is fixed here: the export is right, onnxruntime says so below)
@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning",
                            "ignore::torch.jit.TracerWarning")
def test_onnx_export_runs_in_onnxruntime(graph, photo, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    path = tmp_path / "every-op.onnx"
    torch.onnx.export(to_torch(graph), (torch.from_numpy(photo),), str(path), dynamo=False)
    session = ort.InferenceSession(str(path))
    out = session.run(None, {session.get_inputs()[0].name: photo})[0]
    ref = npusim.simulate(graph, photo, "systolic-32x32-ws").output
    assert rel_err(out, ref) < 1e-5


def test_training_the_mirror_leaves_the_read_only_conv_weights(graph):
    """A conv's weights are read-only (what machines derive from them is kept): the mirror
    copies them, so changing its parameters cannot make the kept data stale."""
    module = to_torch(graph)
    conv = graph.node("conv_asym").op
    before = conv.weight.copy()
    param = module.layers[0].weight
    assert not np.shares_memory(param.detach().numpy(), conv.weight)
    with torch.no_grad():
        param.add_(1.0)
    np.testing.assert_array_equal(conv.weight, before)


@dataclass(frozen=True)
class Square(ops.Op):
    def __call__(self, x):
        return x * x


def test_an_op_without_a_mirror_is_named():
    g = GraphBuilder("odd", (1, 2, 3, 3))
    g.append(Square(), g.input, name="sq")
    with pytest.raises(ModelError, match=r"op Square: no PyTorch mirror; ops with one: .*Add"):
        to_torch(g.build())


def test_missing_torch_is_a_clear_error(graph, monkeypatch):
    monkeypatch.setattr(torch_ref, "torch", None)
    with pytest.raises(ModelError, match=r"PyTorch is not installed: pip install 'npusim\["):
        torch_outputs(graph, np.zeros(graph.input_shape, np.float32))


@st.composite
def pool_graphs(draw):
    """A random max or average pool: any kernel, stride, (asymmetric) padding, ceil mode, and
    for max pooling any dilation."""
    kind = draw(st.sampled_from(["max", "avg"]))
    k = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    s = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    d = (draw(st.integers(1, 3)), draw(st.integers(1, 3))) if kind == "max" else (1, 1)
    span = [(k[i] - 1) * d[i] + 1 for i in range(2)]
    pad = tuple(draw(st.integers(0, span[i // 2] - 1)) for i in range(4))  # below the span
    h = draw(st.integers(max(1, span[0] - pad[0] - pad[1]), 12))
    w = draw(st.integers(max(1, span[1] - pad[2] - pad[3]), 12))
    op = ops.Pool(k, s, pad, draw(st.booleans()), kind, draw(st.booleans()), d)
    g = GraphBuilder("pool", (1, 2, h, w))
    g.append(op, g.input, name="pool")
    try:
        return g.build()
    except LayerError:
        assume(False)


@given(graph=pool_graphs(), seed=st.integers(0, 2**16))
def test_random_pool_geometries_agree(graph, seed):
    x = np.random.default_rng(seed).standard_normal(graph.input_shape).astype(np.float32)
    ours = graph.nodes[0].op(x)
    theirs = torch_outputs(graph, x)["pool"]
    assert ours.shape == theirs.shape
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


@given(layer=conv_layers(), seed=st.integers(0, 2**16))
def test_random_convs_agree_with_the_float64_reference(layer, seed):
    x, w, b = tensors(layer, seed)
    g = GraphBuilder("conv", layer.input_shape)
    g.conv(g.input, w, b, stride=layer.stride, padding=layer.padding, dilation=layer.dilation,
           groups=layer.groups, name="conv")
    ours = torch_outputs(g.build(), x)["conv"]
    ref = reference.conv2d(x, w, b, layer)
    assert rel_err(ours, ref) < 1e-5
