"""Hypothesis strategies shared by the tests: random valid ConvLayers and their tensors; and
the tests' shared inputs and exports (a photo, an ONNX file as torch's exporters write it)."""

import numpy as np
from hypothesis import strategies as st

from npusim.ir import ConvLayer


@st.composite
def conv_layers(draw, max_hw=9, max_c=6, max_k=6, max_rs=4, max_n=2):
    """Any valid ConvLayer: strides, asymmetric pads, dilations, groups, odd sizes, 1x1 maps."""
    groups = draw(st.integers(1, 3))
    cg = draw(st.integers(1, max(1, max_c // groups)))
    kg = draw(st.integers(1, max(1, max_k // groups)))
    if draw(st.booleans()) and groups > 1:
        cg = kg = 1  # depthwise
    r, s = draw(st.integers(1, max_rs)), draw(st.integers(1, max_rs))
    dh, dw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    pad = tuple(draw(st.integers(0, 2)) for _ in range(4))
    h_min = max(1, dh * (r - 1) + 1 - pad[0] - pad[1])
    w_min = max(1, dw * (s - 1) + 1 - pad[2] - pad[3])
    h = draw(st.integers(h_min, max(h_min, max_hw)))
    w = draw(st.integers(w_min, max(w_min, max_hw)))
    return ConvLayer(draw(st.integers(1, max_n)), cg * groups, h, w, kg * groups, r, s,
                     (draw(st.integers(1, 3)), draw(st.integers(1, 3))), pad, (dh, dw), groups,
                     draw(st.booleans()))


def tensors(layer: ConvLayer, seed: int, dtype: str = "float32", density: float = 1.0):
    """Input, weight and bias for ``layer``; a fraction 1 - density of each set to zero."""
    rng = np.random.default_rng(seed)
    if dtype == "int8":
        x = rng.integers(-127, 128, layer.input_shape).astype(np.int8)
        w = rng.integers(-127, 128, layer.weight_shape).astype(np.int8)
        b = rng.integers(-1000, 1000, layer.K).astype(np.int32) if layer.bias else None
    else:
        x = rng.standard_normal(layer.input_shape).astype(np.float32)
        w = rng.standard_normal(layer.weight_shape).astype(np.float32)
        b = rng.standard_normal(layer.K).astype(np.float32) if layer.bias else None
    if density < 1.0:
        x = x * (rng.random(x.shape) < density).astype(x.dtype)
        w = w * (rng.random(w.shape) < density).astype(w.dtype)
    return x, w, b


def torch_conv(layer: ConvLayer, x, w, b):
    """torch.nn.functional.conv2d of the layer in float64 (independent reference)."""
    import torch
    import torch.nn.functional as F

    t, bo, le, ri = layer.padding
    xt = F.pad(torch.from_numpy(np.asarray(x, np.float64)), (le, ri, t, bo))
    bt = None if b is None else torch.from_numpy(np.asarray(b, np.float64))
    return F.conv2d(xt, torch.from_numpy(np.asarray(w, np.float64)), bt, layer.stride, 0,
                    layer.dilation, layer.groups).numpy()


def rel_err(a, ref) -> float:
    """max |a - ref| / max |ref| (0 when both are zero)."""
    scale = float(np.abs(ref).max()) or 1.0
    return float(np.abs(np.asarray(a, np.float64) - ref).max()) / scale


def photo(shape) -> np.ndarray:
    """A real photograph as N x C x H x W float32 (channels beyond RGB repeat them mirrored)."""
    from npusim.frontends import images

    n, c, h, w = shape
    rgb = images.load_image("chelsea", (h, w))
    channels = [rgb[i % 3] if (i // 3) % 2 == 0 else rgb[i % 3, :, ::-1] for i in range(c)]
    return np.repeat(np.stack(channels)[None], n, axis=0).astype(np.float32)


def export_onnx(net, x: np.ndarray, path, exporter: str = "dynamo"):
    """``net`` on ``x`` as ONNX at ``path`` by torch's dynamo exporter (its default) or its
    TorchScript one (opset 17), the exporters' warnings and prints kept out of the output."""
    import io
    import warnings
    from contextlib import redirect_stderr, redirect_stdout

    import torch

    with warnings.catch_warnings(), redirect_stdout(io.StringIO()), \
            redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (torch.from_numpy(x),), str(path), dynamo=exporter == "dynamo",
                          **({} if exporter == "dynamo" else {"opset_version": 17}))
    return path


def onnxruntime_output(path, x: np.ndarray) -> np.ndarray:
    """The first output of the ONNX file at ``path`` on ``x``, by onnxruntime (CPU)."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


def float64_output(net, x: np.ndarray) -> np.ndarray:
    """``net`` (a torch module, made float64 in place) on ``x`` in float64: the reference an
    import is judged by."""
    import torch

    with torch.no_grad():
        return net.double()(torch.from_numpy(np.asarray(x, np.float64))).numpy()


def assert_runs_as_module(graph, net, x: np.ndarray, arch: str, tolerance: float):
    """``graph`` (``net`` imported) simulated on ``x`` on ``arch`` equals ``net`` run in
    float64 within ``tolerance`` (relative, ``rel_err``), and npusim's own check of the run
    against torch passes."""
    from npusim import simulate
    from npusim.report.check import check

    result = simulate(graph, x, arch, keep_outputs=True)
    assert rel_err(result.output, float64_output(net, x)) < tolerance
    assert check(graph, x, result).passed
