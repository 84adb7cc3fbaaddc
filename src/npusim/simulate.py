"""Run a network, or one conv, on an accelerator: real outputs plus what the hardware spends.

Three modes, one result type:

- ``run``: every conv through its dataflow's own arithmetic (``Dataflow.run``);
- ``estimate``: activations from the dense engine, costs from ``Dataflow.estimate``
  on the non-zero masks of the real tensors (the mode for big networks and sweeps);
- ``emulate``: every conv through the dataflow's cycle emulator (small inputs).

Non-conv ops run in numpy on the vector unit: ``ceil(vector_ops / lanes)`` cycles,
where ``vector_ops`` is the op's element work (``ops.Op.vector_ops``), and each
input and output element is one SRAM access; their operands stay on chip (no DRAM
traffic). Every layer, conv or not, is priced by ``stats.price`` (time through the
memory model, energy through the energy table).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from . import engine, ops, quant, tensors
from .arch import Arch, load_arch
from .dataflows import get as get_dataflow
from .errors import InputError, NpusimError
from .ir import DTYPES, ConvLayer, Graph, _padding4, _pair
from .memory import Steps
from .parallel import cores
from .stats import Counts, LayerStats, Op, price, total

MODES = ("run", "estimate", "emulate")
# Emulator steps (about 1 us each on a 2-core x86 machine, docs/cli.md) one layer may take in
# mode emulate: about 40 s here. simulate(emulate_limit=...) or --emulate-limit raise it.
EMULATE_LIMIT = 40_000_000


@dataclass
class SimResult:
    """Outputs and costs of one simulated network."""

    output: np.ndarray
    layers: list[LayerStats]
    arch: Arch
    mode: str
    dtype: str
    dataflow: str
    seconds: float
    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    named_outputs: dict[str, np.ndarray] = field(default_factory=dict)  # label -> output

    @property
    def area(self):
        """The arch's area built as this run's dataflow for its data type (``area.Area``)."""
        from .area import area_of

        return area_of(self.arch, self.dataflow, self.dtype)

    @property
    def total(self) -> LayerStats:
        return total(self.layers)

    @property
    def conv_layers(self) -> list[LayerStats]:
        return [s for s in self.layers if s.dataflow != "vector"]


def _conv_step(layer: ConvLayer, x, conv: ops.Conv, df, arch, mode: str, costs: _Costs):
    """One conv layer in ``mode``: (float32 output for the next op, its LayerStats or the
    handle ``costs`` returns for them). run and estimate differ only in who computes the
    outputs: the machine's arithmetic or the dense engine."""
    w, b = conv.weight, conv.bias
    if layer.dtype == "int8":
        xq, sx = quant.quantize_activations(x)
        wq, sw = quant.quantize_weights(w)
        x_in, w_in, b_in = xq, wq, quant.quantize_bias(b, sx, sw)
    else:
        x_in, w_in, b_in = x, w, b
    if mode == "emulate":
        if not hasattr(df, "emulate"):
            raise NpusimError(f"dataflow {df.name!r} has no cycle emulator; use mode 'run'")
        out, st = df.emulate(layer, x_in, w_in, b_in, arch)
    else:
        st = costs.submit(df.estimate, layer, *df.masks(x_in, w_in), arch)
        if mode == "run":
            out = df.compute(layer, x_in, w_in, b_in, arch)
        else:
            out = engine.conv2d(x_in, w_in, b_in, layer)
    if layer.dtype == "int8":
        out = quant.requantize(out, sx, sw).dequantize()
    return out, st


def check_emulate_size(layers: list[ConvLayer], df, arch: Arch, limit: int | None) -> None:
    """Refuse, before any work, to emulate a layer whose estimated emulator steps
    (``df.emulate_steps``) pass ``limit``; names the first such layer, its steps and the
    way out. ``None`` is no limit."""
    if limit is None or not hasattr(df, "emulate_steps"):
        return
    over = [(layer.name, df.emulate_steps(layer, arch)) for layer in layers
            if df.supports(layer, arch) is None]
    over = [(name, steps) for name, steps in over if steps > limit]
    if over:
        name, steps = over[0]
        more = f" (and {len(over) - 1} more layers)" if len(over) > 1 else ""
        raise NpusimError(f"{name}: the {df.name} emulator would take about {steps:.3g} steps "
                          f"(~{steps / 1e6:.0f} s at about 1 us a step), above the limit of "
                          f"{limit:.3g} steps per layer{more}; use --mode run (the same costs "
                          "from the fast model), or raise the limit with --emulate-limit N "
                          "(emulate_limit=N)")


def check_model_finite(model: Graph, x: np.ndarray) -> None:
    """Refuse, before any layer runs, a network input or a conv/linear weight or bias with
    a NaN or inf (``tensors.check_finite``; each conv's input is checked again when it runs,
    for a non-finite value an earlier op produced)."""
    tensors.check_finite(x, "input", model.name)
    for node in model.conv_nodes:
        tensors.check_finite(node.op.weight, "weight", node.name)
        if node.op.bias is not None:
            tensors.check_finite(node.op.bias, "bias", node.name)


def _vector_stats(name: str, op, in_shapes, out_shape, arch: Arch, dtype: str) -> LayerStats:
    """A non-conv op on the vector unit: its element work on ``lanes`` lanes, each input
    and output element one SRAM access (counted as ofmap-buffer bytes), no DRAM."""
    work = op.vector_ops(in_shapes, out_shape)
    elem = 1 if dtype == "int8" else 4
    elements = sum(int(np.prod(s)) for s in in_shapes) + int(np.prod(out_shape))
    moved = elements * elem if work else 0
    cycles = math.ceil(work / arch.vector.lanes)
    counts = Counts("vector", macs=0, dense_macs=0, multipliers=0, sram_ofmap_bytes=moved,
                    vector_ops=work)
    return price(Op(name, type(op).__name__, dtype), counts,
                 Steps(compute=[cycles], sram_bytes=moved), arch)


def simulate(model: Graph, input: np.ndarray, arch: Arch | str | None = None, *,
             mode: str = "run", dtype: str = "float32", dataflow: str | None = None,
             keep_outputs: bool = False,
             progress: Callable[[int, int, str], None] | None = None,
             emulate_limit: int | None = EMULATE_LIMIT) -> SimResult:
    """Run ``model`` on ``input`` (N x C x H x W float) on ``arch``.

    Returns the output, one ``LayerStats`` per op (convs by their dataflow, the
    rest by the vector unit) and, with ``keep_outputs``, every node's output.
    ``progress(i, n, name)`` is called before each op. In mode emulate, a conv whose
    estimated emulator steps pass ``emulate_limit`` (None: no limit) is refused before
    any layer runs (``check_emulate_size``).
    """
    if mode not in MODES:
        raise NpusimError(f"mode={mode!r}: must be one of {', '.join(MODES)}")
    if dtype not in DTYPES:
        raise NpusimError(f"dtype={dtype!r}: must be one of {', '.join(DTYPES)}")
    arch = load_arch(arch)
    df = get_dataflow(dataflow or arch.dataflow)
    x = np.asarray(input, np.float32)
    if x.shape != model.input_shape:
        if x.shape[1:] != model.input_shape[1:] or x.ndim != len(model.input_shape):
            raise InputError(f"input shape {x.shape} does not fit {model.name}, which takes "
                             f"{model.input_shape} (N may differ)")
        model = model.with_batch(x.shape[0])
    check_model_finite(model, x)
    if mode == "emulate":
        check_emulate_size([model.layers[n.name].with_dtype(dtype) for n in model.conv_nodes],
                           df, arch, emulate_limit)
    start = time.perf_counter()
    with _Costs(background=mode != "emulate" and df.reads_masks) as costs:
        values, stats = _run_nodes(model, x, df, arch, mode, dtype, keep_outputs, progress,
                                   costs)
        stats = [costs.result(st) for st in stats]
    return SimResult(values[model.output_name], stats, arch, mode, dtype, df.name,
                     time.perf_counter() - start, values if keep_outputs else {},
                     {label: values[out] for label, out in model.outputs.items()})


class _Costs:
    """Where a layer's costs are counted from its masks: on one worker thread, while the
    main thread computes this and the next layers' outputs (the two share no data; the
    counts release the GIL in their large array operations). At most ``depth`` layers
    wait, so their masks do not pile up in memory. Without ``background`` (machines whose
    costs follow the shapes, and the emulator), counted at once.

    While the worker exists, BLAS gets one core fewer: OpenBLAS threads busy-wait
    between calls and would take the worker's core (on 2 cores, ResNet-50's estimate
    ran 1.5x slower with both)."""

    def __init__(self, background: bool, depth: int = 2):
        self.pool = ThreadPoolExecutor(1, "npusim-costs") if background else None
        self.pending: list[Future] = []
        self.depth = depth
        self.limits = None

    def __enter__(self) -> _Costs:
        if self.pool:
            blas = [lib["num_threads"] for lib in threadpool_info()
                    if lib["user_api"] == "blas"]
            threads = max(1, min(max(blas, default=1), cores() - 1))
            self.limits = threadpool_limits(threads, user_api="blas")
        return self

    def __exit__(self, *exc) -> None:
        if self.pool:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.limits.restore_original_limits()

    def submit(self, fn, *args):
        if self.pool is None:
            return fn(*args)
        self.pending = [f for f in self.pending if not f.done()]
        if len(self.pending) >= self.depth:
            self.pending[0].result()
        future = self.pool.submit(fn, *args)
        self.pending.append(future)
        return future

    @staticmethod
    def result(st):
        return st.result() if isinstance(st, Future) else st


def _run_nodes(model: Graph, x, df, arch, mode, dtype, keep_outputs, progress, costs):
    """Every node in order: (values still live, one LayerStats or handle per node)."""
    values = {model.input_name: x}
    stats: list = []
    for i, node in enumerate(model.nodes):
        if progress:
            progress(i, len(model.nodes), node.name)
        args = [values[n] for n in node.inputs]
        if isinstance(node.op, ops.Conv):
            layer = model.layers[node.name].with_dtype(dtype)
            why = df.supports(layer, arch)
            if why:
                raise NpusimError(f"{node.name}: dataflow {df.name!r} cannot run it: {why}")
            x_in = args[0].reshape(layer.input_shape)
            tensors.check_finite(x_in, "input (the output of the op before it)", node.name)
            out, st = _conv_step(layer, x_in, node.op, df, arch, mode, costs)
            out = out.astype(np.float32, copy=False).reshape(model.shapes[node.name])
        else:
            out = node.op(*args)
            st = _vector_stats(node.name, node.op, [model.shapes[n] for n in node.inputs],
                               model.shapes[node.name], arch, dtype)
        values[node.name] = out
        stats.append(st)
        if not keep_outputs:
            _release(values, model, i)
    return values, stats


def simulate_shapes(layers: list[ConvLayer], arch: Arch | str | None = None,
                    dataflow: str | None = None, dtype: str = "float32") -> SimResult:
    """Costs of conv ``layers`` given as shapes only (a SCALE-Sim topology): no tensors,
    dense (``Dataflow.estimate`` on all-ones masks); ``output`` is None, mode 'estimate'."""
    if dtype not in DTYPES:
        raise NpusimError(f"dtype={dtype!r}: must be one of {', '.join(DTYPES)}")
    arch = load_arch(arch)
    df = get_dataflow(dataflow or arch.dataflow)
    start = time.perf_counter()
    stats = []
    for layer in layers:
        layer = layer.with_dtype(dtype)
        why = df.supports(layer, arch)
        if why:
            raise NpusimError(f"{layer.name}: dataflow {df.name!r} cannot run it: {why}")
        ones_x = np.broadcast_to(np.True_, layer.input_shape)  # all-ones, no memory
        ones_w = np.broadcast_to(np.True_, layer.weight_shape)
        stats.append(df.estimate(layer, ones_x, ones_w, arch))
    return SimResult(None, stats, arch, "estimate", dtype, df.name,
                     time.perf_counter() - start)


def _release(values: dict, model: Graph, i: int) -> None:
    """Drop tensors no later node reads (keeps peak memory to the live set)."""
    later = {n for node in model.nodes[i + 1:] for n in node.inputs} | model.output_nodes
    for name in [n for n in values if n not in later]:
        del values[name]


def same_padding(kernel: tuple[int, int], dilation: tuple[int, int]) -> tuple[int, int, int, int]:
    """'same' padding for stride 1: total d*(k-1) per axis, the odd pixel at the end."""
    out = []
    for k, d in zip(kernel, dilation, strict=True):
        tot = d * (k - 1)
        out += [tot // 2, tot - tot // 2]
    return tuple(out)  # type: ignore[return-value]


def conv2d(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1,
           dataflow: str = "systolic", arch: Arch | str | None = None,
           dtype: str = "float32", emulate: bool = False,
           emulate_limit: int | None = EMULATE_LIMIT) -> tuple[np.ndarray, LayerStats]:
    """One convolution on one dataflow, with torch's argument conventions.

    ``x`` is N x C x H x W, ``w`` K x C/groups x R x S; ``padding`` an int, (h, w),
    (top, bottom, left, right), 'same' or 'valid'. Float inputs with
    ``dtype='int8'`` are quantised (see ``quant``) and the float32 product
    ``acc * s_x * s_w`` is returned; int8 inputs return the int32 accumulators.
    With ``emulate``, a layer above ``emulate_limit`` emulator steps is refused first.
    """
    x, w = np.asarray(x), np.asarray(w)
    if x.ndim != 4 or w.ndim != 4:
        raise InputError(f"conv2d: x and w must be 4-D (NCHW, KCRS), got {x.shape} and {w.shape}")
    dil = _pair(dilation, "dilation", "conv2d")
    if isinstance(padding, str):
        if padding not in ("same", "valid"):
            raise InputError(f"conv2d.padding={padding!r}: must be 'same', 'valid' or integers")
        padding = same_padding(w.shape[2:], dil) if padding == "same" else 0
    layer = ConvLayer(x.shape[0], x.shape[1], x.shape[2], x.shape[3], w.shape[0], w.shape[2],
                      w.shape[3], stride, _padding4(padding, "conv2d"), dil, groups,
                      bias is not None, "conv2d", dtype)
    if w.shape[1] * groups != x.shape[1]:
        raise InputError(f"conv2d: w has {w.shape[1]} channels per group x groups={groups}, "
                         f"x has C={x.shape[1]}")
    arch = load_arch(arch)
    df = get_dataflow(dataflow)
    why = df.supports(layer, arch)
    if why:
        raise NpusimError(f"conv2d: dataflow {dataflow!r} cannot run it: {why}")
    if emulate:
        check_emulate_size([layer], df, arch, emulate_limit)
    x, w, bias = _operands(x, w, bias)
    if dtype == "int8" and x.dtype != np.int8:
        xq, sx = quant.quantize_activations(x)
        wq, sw = quant.quantize_weights(w)
        bq = quant.quantize_bias(bias, sx, sw)
        acc, st = _run_one(df, layer, xq, wq, bq, arch, emulate)
        return (acc * (sx * sw).reshape(1, -1, 1, 1)).astype(np.float32), st
    if x.dtype == np.int8:
        layer = layer.with_dtype("int8")
    return _run_one(df, layer, x, w, bias, arch, emulate)


def _operands(x: np.ndarray, w: np.ndarray, bias):
    """``conv2d``'s operands checked (``tensors``: a (K,) bias, finite values, integers
    within int8 and an int32 bias) and cast: int8 x and w and an int32 bias when ``x`` is
    an integer array, float32 otherwise."""
    tensors.check_bias(bias, w.shape[0], "conv2d")
    if np.issubdtype(x.dtype, np.integer):
        tensors.check_whole(x, "x", "conv2d", tensors.INT8)
        tensors.check_whole(w, "w", "conv2d", tensors.INT8)
        if bias is not None:
            tensors.check_whole(bias, "bias", "conv2d", tensors.INT32)
            bias = np.asarray(bias).astype(np.int32)
        return x.astype(np.int8), w.astype(np.int8), bias
    x, w = tensors.finite_float32(x, "x", "conv2d"), tensors.finite_float32(w, "w", "conv2d")
    return x, w, None if bias is None else tensors.finite_float32(bias, "bias", "conv2d")


def _run_one(df, layer, x, w, bias, arch, emulate: bool):
    if not emulate:
        return df.run(layer, x, w, bias, arch)
    if not hasattr(df, "emulate"):
        raise NpusimError(f"dataflow {df.name!r} has no cycle emulator")
    return df.emulate(layer, x, w, bias, arch)
