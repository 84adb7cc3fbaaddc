"""Run a network, or one conv, on an accelerator: real outputs plus what the hardware spends.

Three modes, one result type:

- ``run``: every conv through its dataflow's own arithmetic (``Dataflow.run``);
- ``estimate``: activations from the dense engine, costs from ``Dataflow.estimate``
  on the non-zero masks of the real tensors (the mode for big networks and sweeps);
- ``emulate``: every conv through the dataflow's cycle emulator (small inputs).

``simulate``, ``simulate_shapes`` and ``conv2d`` share one pipeline: a ``RunConfig``
validated once, each conv placed on its machine (``_place``: the one machine, or the
hybrid's choice, ``npusim.hybrid``), then run by its mode (``MODE_TABLE``).

Non-conv ops run in numpy on the vector unit: ``ceil(vector_ops / lanes)`` cycles,
where ``vector_ops`` is the op's element work (``ops.Op.vector_ops``), and each
input and output element is one SRAM access; their operands stay on chip (no DRAM
traffic). Every layer, conv or not, is priced by ``stats.price`` (time through the
memory model, energy through the energy table).
"""

from __future__ import annotations

import dataclasses
import math
import operator
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from . import engine, quant, tensors
from .arch import Arch, load_arch
from .arch.sections import HYBRID
from .choices import DTYPES, MODES
from .dataflows import REGISTRY, Dataflow, machines
from .derived import derived, int8_weights
from .errors import InputError, NpusimError
from .geometry import is_int, padding4, pair, same_padding
from .ir import ConvLayer, Graph
from .memory import on_chip_timing
from .parallel import threads
from .stats import TRANSFER, Counts, LayerStats, Op, price, price_all, total

if TYPE_CHECKING:
    from .hybrid import Placement

# Emulator steps (about 1 us each on a 2-core x86 machine, docs/cli.md) one layer may take in
# mode emulate: about 40 s here. simulate(emulate_limit=...) or --emulate-limit raise it.
EMULATE_LIMIT = 40_000_000
# Bytes of masks the layers' costs may hold while they wait to be counted together
# (``_Costs``): a small network's whole walk, a big batch's in parts.
BATCH_BYTES = 32 * 2**20


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
    placements: list[Placement] = field(default_factory=list)  # a hybrid's, per conv

    def __repr__(self) -> str:
        """One line: the arch, machine, mode and dtype, the total cycles and layers, the
        output's shape (the arrays themselves are ``output`` and ``outputs``)."""
        cycles = sum(s.cycles for s in self.layers)
        out = "no output" if self.output is None else f"output {np.shape(self.output)}"
        return (f"SimResult({self.arch.name} ({self.dataflow}), {self.mode}, {self.dtype}: "
                f"{cycles:,} cycles, {len(self.layers)} layer{'s' * (len(self.layers) != 1)}, "
                f"{out})")

    @property
    def area(self):
        """The arch's area built as this run's dataflow for its data type (``area.Area``)."""
        from .area import area_of

        return area_of(self.arch, self.dataflow, self.dtype)

    @property
    def hardware(self):
        """What the arch built as this run's dataflow holds (``area.Hardware``: its MACs,
        registers, SRAMs; a hybrid's members together)."""
        from .area import hardware_of

        return hardware_of(self.arch, self.dataflow, self.dtype)

    @property
    def total(self) -> LayerStats:
        return total(self.layers)

    @property
    def conv_layers(self) -> list[LayerStats]:
        return [s for s in self.layers if s.dataflow not in ("vector", TRANSFER)]


@dataclass(frozen=True)
class RunConfig:
    """One run's settings, validated once (``RunConfig.of``): the arch, the machines a conv may
    go to (one, or a hybrid's members in their order), the objective that picks among several
    (``stats.OBJECTIVES``), the mode, the dtype, and the emulator's step limit per layer
    (``None``: no limit)."""

    arch: Arch
    machines: tuple[Dataflow, ...]
    mode: str = "run"
    dtype: str = "float32"
    objective: str = "cycles"
    emulate_limit: int | None = EMULATE_LIMIT

    @classmethod
    def of(cls, arch: Arch | str | None = None, dataflow: str | None = None, *,
           mode: str = "run", dtype: str = "float32",
           emulate_limit: int | None = EMULATE_LIMIT) -> RunConfig:
        """The checked configuration: a known mode and dtype, the arch loaded, ``dataflow``
        (default: the arch's) one machine or ``hybrid`` (the arch's ``[hybrid]`` members)."""
        if mode not in MODE_TABLE:
            raise NpusimError(f"mode={mode!r}: must be one of {', '.join(MODES)}")
        if dtype not in DTYPES:
            raise NpusimError(f"dtype={dtype!r}: must be one of {', '.join(DTYPES)}")
        if emulate_limit is not None and not (is_int(emulate_limit) and emulate_limit >= 1):
            raise NpusimError(f"emulate_limit={emulate_limit!r}: must be a whole number of "
                              "emulator steps >= 1, or None for no limit")
        arch = load_arch(arch)
        members, objective = machines(arch, dataflow or arch.dataflow)
        return cls(arch, members, mode, dtype, objective, emulate_limit)

    @property
    def name(self) -> str:
        """The dataflow's name, or ``hybrid`` for several machines."""
        return self.machines[0].name if len(self.machines) == 1 else HYBRID

    @property
    def background(self) -> bool:
        """Whether the costs may be counted on the worker thread (``_Costs``): mode run on one
        machine whose costs read the masks and whose arithmetic leaves a core free (a hybrid
        needs its members' costs at once, to choose). Elsewhere counting beside the outputs
        measured no faster than inline (docs/architecture.md): in mode estimate, and beside
        arithmetic that runs on every core already."""
        df = self.machines[0]
        return (self.mode == "run" and len(self.machines) == 1 and df.reads_masks
                and not getattr(df, "compute_on_every_core", False))


def _run_mode(df, layer, x, w, b, arch, count):
    """Mode run: the outputs by the machine's own arithmetic, the costs by ``count()``."""
    return df.compute(layer, x, w, b, arch), count()


def _estimate_mode(df, layer, x, w, b, arch, count):
    """Mode estimate: the outputs by the dense engine, the costs by ``count()``."""
    return engine.conv2d(x, w, b, layer), count()


def _emulate_mode(df, layer, x, w, b, arch, count):
    """Mode emulate: outputs and costs from the machine's cycle emulator."""
    return df.emulate(layer, x, w, b, arch)


MODE_TABLE = dict(zip(MODES, (_run_mode, _estimate_mode, _emulate_mode), strict=True))


def check_supports(df: Dataflow, layer: ConvLayer, arch: Arch) -> None:
    """Refuse a layer ``df`` cannot run on ``arch``, naming the layer and why."""
    why = df.supports(layer, arch)
    if why:
        raise NpusimError(f"{layer.name}: dataflow {df.name!r} cannot run it: {why}")


def _place(cfg: RunConfig, layer: ConvLayer, masks, source: str | None, costs: _Costs):
    """The machine that runs ``layer``: (the machine, ``count`` giving its stats or their
    handle, the hybrid's ``Placement`` or None). ``masks(df)`` gives ``df.estimate``'s
    masks; ``source`` names the machine whose buffers hold the layer's input (None: DRAM).
    A hybrid in mode estimate, whose costs may wait (``_Costs.batch_bytes``), chooses after
    the walk: no machine yet, and an ``Undecided`` for the rest (``decide``)."""
    if len(cfg.machines) == 1:
        df = cfg.machines[0]
        check_supports(df, layer, cfg.arch)
        if _shape_costed(df):
            return df, lambda: shape_costs(df, layer, cfg.arch), None
        return df, lambda: costs.submit(df, layer, *masks(df), cfg.arch), None
    if cfg.mode == "estimate" and costs.batch_bytes:  # outputs by the engine: choose later
        undecided = Undecided(layer, {
            df.name: _member_costs(df, layer, masks, cfg.arch, costs.submit)
            for df in cfg.machines if df.supports(layer, cfg.arch) is None})
        return None, lambda: undecided, undecided
    from .hybrid import place  # several machines: the hybrid's compiler chooses

    def cost(df: Dataflow) -> LayerStats:  # a member's stats of the layer, needed at once
        return _member_costs(df, layer, masks, cfg.arch,
                             lambda df, *args: df.estimate(*args))

    placed = place(layer, cfg.machines, cost, source, cfg.arch, cfg.objective)
    return placed.machine, lambda: placed.stats, placed


def _member_costs(df: Dataflow, layer: ConvLayer, masks, arch: Arch, count):
    """A hybrid member's stats of ``layer``, or a handle to them: those kept per geometry
    for a machine whose costs follow the shapes (``shape_costs``), else
    ``count(df, layer, x_mask, w_mask, arch)`` on ``masks(df)`` (the member's estimate at
    once, or ``_Costs.submit``'s handle)."""
    if _shape_costed(df):
        return shape_costs(df, layer, arch)
    return count(df, layer, *masks(df), arch)


def _shape_costed(df: Dataflow) -> bool:
    """Whether ``df``'s costs follow the shapes alone, so ``shape_costs`` keeps them per
    geometry: a registered machine that reads no masks (not a wrapper of one: dse.reuse)."""
    return not df.reads_masks and REGISTRY.get(df.name) is df


SHAPE_COSTS_KEPT = 4096  # costs each arch keeps, by layer geometry (networks repeat theirs)
_shape_costs: dict[int, OrderedDict] = {}


def kept_costs(arch: Arch, key, count: Callable[[], LayerStats]) -> LayerStats:
    """``count()``, counted once per ``key`` on ``arch`` (the same ``Arch`` object: presets
    are shared, ``load_arch``) and kept for the arch's ``SHAPE_COSTS_KEPT`` most recent
    keys: repeated blocks and later calls on the same arch (a sweep, a bench) do not count
    them again."""
    store = _shape_costs.get(id(arch))
    if store is None:
        store = _shape_costs[id(arch)] = OrderedDict()
        weakref.finalize(arch, _shape_costs.pop, id(arch), None)
    st = store.get(key)
    if st is None:
        st = store[key] = count()
        if len(store) > SHAPE_COSTS_KEPT:
            store.popitem(last=False)
    else:
        store.move_to_end(key)
    return st


# every field of a conv but its name: what its costs on a shape-costed machine follow
layer_geometry = operator.attrgetter(*[f.name for f in dataclasses.fields(ConvLayer)
                                       if f.name != "name"])


def shape_costs(df: Dataflow, layer: ConvLayer, arch: Arch) -> LayerStats:
    """``df.estimate`` of ``layer`` for a machine whose costs follow the shapes alone
    (``reads_masks`` False), counted once per geometry and dtype on ``arch``
    (``kept_costs``) and renamed for each layer."""
    key = (df.name, type(layer), layer_geometry(layer))
    st = kept_costs(arch, key, lambda: df.estimate(layer, None, None, arch))
    return st.renamed(layer.name)


def _tensor_masks(x: np.ndarray, w: np.ndarray):
    """``masks(df)`` for ``_place``: ``df.masks(x, w)``, the non-zero masks made once."""
    made: list = []

    def masks(df):
        if not df.reads_masks:
            return None, None
        if not made:
            made.extend(df.masks(x, w))
        return tuple(made)
    return masks


def _conv(cfg: RunConfig, layer: ConvLayer, x, w, b, source: str | None, costs: _Costs):
    """One conv through the pipeline: (outputs, stats or their handle, ``Placement`` or None).
    A float conv in int8 quantises its input (per tensor) and weights (per output channel),
    runs in int32 and requantises its output to int8, returned dequantised (float32); int8
    operands return the int32 accumulators."""
    quantised = layer.dtype == "int8" and x.dtype != np.int8
    if quantised:
        x, sx = quant.quantize_activations(x)
        w8, sw = int8_weights(w)
        fitted = quant.bias_fitted_scales(sw, b, sx)
        if fitted is not sw:  # a bias too large for its kernel's scale (a dead kernel)
            w8, sw = quant.quantize_weights(w, fitted)
        w, b = w8, quant.quantize_bias(b, sx, sw)
    df, count, placed = _place(cfg, layer, _tensor_masks(x, w), source, costs)
    if cfg.mode == "emulate" and placed is not None:
        check_chosen_emulator(cfg, layer, df)
    out, st = MODE_TABLE[cfg.mode](df, layer, x, w, b, cfg.arch, count)
    if quantised:
        out = quant.requantize(out, sx, sw).dequantize()
    return out, st, placed


def check_emulate_size(layers: list[ConvLayer], cfg: RunConfig) -> None:
    """Refuse, before any work, to emulate a layer whose estimated emulator steps
    (``df.emulate_steps``) pass ``cfg.emulate_limit`` on every machine of ``cfg`` that can
    run it (a hybrid's choice, made on the layer's real masks, is checked when it is made:
    ``check_chosen_emulator``); names the first such layer, its steps and the way out."""
    limit = cfg.emulate_limit
    if limit is None:
        return
    over = []
    for layer in layers:
        fewest = min(((df.emulate_steps(layer, cfg.arch), i, df)
                      for i, df in enumerate(cfg.machines)
                      if df.supports(layer, cfg.arch) is None), default=None)
        if fewest is not None and fewest[0] > limit:
            over.append((layer.name, fewest[2], fewest[0]))
    if over:
        name, df, steps = over[0]
        more = f" (and {len(over) - 1} more layers)" if len(over) > 1 else ""
        raise NpusimError(_over_limit(name, f"the {df.name} emulator", steps, limit, more))


def check_chosen_emulator(cfg: RunConfig, layer: ConvLayer, df: Dataflow) -> None:
    """Refuse to emulate ``layer`` on the machine a hybrid chose for it, ``df``, when its
    estimated emulator steps pass ``cfg.emulate_limit`` (another member, not chosen, may
    have let the layer through ``check_emulate_size``)."""
    steps = df.emulate_steps(layer, cfg.arch)
    if cfg.emulate_limit is not None and steps > cfg.emulate_limit:
        raise NpusimError(_over_limit(layer.name, f"the hybrid chose {df.name} for it; its "
                                      "emulator", steps, cfg.emulate_limit, ""))


def _over_limit(name: str, who: str, steps: int, limit: int, more: str) -> str:
    """The refusal of a layer ``who`` would emulate in ``steps``, above ``limit``."""
    return (f"{name}: {who} would take about {steps:.3g} steps (~{steps / 1e6:.3g} s at "
            f"about 1 us a step), above the limit of {limit:.3g} steps per layer{more}; use "
            "--mode run (the same costs from the fast model), or raise the limit with "
            "--emulate-limit N (emulate_limit=N)")


def check_model_finite(model: Graph) -> None:
    """Refuse, before any layer runs, a conv/linear weight or bias with a NaN or inf
    (``tensors.check_finite``; the network's input is checked as it is read, each conv's
    input again when it runs, for a non-finite value an earlier op produced; a read-only
    weight or bias passed once is not checked again)."""
    for node in model.conv_nodes:
        for name in ("weight", "bias"):
            a = getattr(node.op, name)
            if a is not None:  # checked once per read-only array (``derived``)
                derived(a, "finite", lambda a=a, name=name, at=node.name:
                        tensors.check_finite(a, name, at) or True)


def _vector_stats(name: str, op, in_shapes, out_shape, arch: Arch, dtype: str) -> LayerStats:
    """A non-conv op on the vector unit: its element work on ``lanes`` lanes, each input
    and output element one SRAM access (counted as ofmap-buffer bytes), no DRAM."""
    return vector_priced(vector_work(name, op, in_shapes, out_shape, dtype), arch)


def vector_work(name: str, op, in_shapes, out_shape, dtype: str) -> tuple[Op, int, int]:
    """What ``_vector_stats`` counts before the arch: (the op, its element work, the bytes it
    moves through SRAM)."""
    work = op.vector_ops(in_shapes, out_shape)
    elem = 1 if dtype == "int8" else 4
    elements = int(sum(map(math.prod, in_shapes)) + math.prod(out_shape))
    return Op(name, type(op).__name__, dtype), work, elements * elem if work else 0


def vector_priced(counted: tuple[Op, int, int], arch: Arch) -> LayerStats:
    """``vector_work``'s counts priced on ``arch``: once per kind, dtype and counts
    (``kept_costs``: ops alike in these have the same stats), renamed for each op."""
    op = counted[0]
    key = ("vector", op.shape, op.dtype, *counted[1:])
    return kept_costs(arch, key, lambda: _vector_price(counted, arch)).renamed(op.name)


def _vector_price(counted: tuple[Op, int, int], arch: Arch) -> LayerStats:
    """``vector_priced`` counted afresh."""
    op, work, moved = counted
    cycles = math.ceil(work / arch.vector.lanes)
    counts = Counts("vector", macs=0, dense_macs=0, multipliers=0, sram_ofmap_bytes=moved,
                    vector_ops=work)
    return price(op, counts, None, arch, on_chip_timing(cycles, moved, arch.memory))


def simulate(model: Graph, input: np.ndarray, arch: Arch | str | None = None, *,
             mode: str = "run", dtype: str = "float32", dataflow: str | None = None,
             keep_outputs: bool = False,
             progress: Callable[[int, int, str], None] | None = None,
             emulate_limit: int | None = EMULATE_LIMIT) -> SimResult:
    """Run ``model`` on ``input`` (N x C x H x W float) on ``arch``.

    Returns the output, one ``LayerStats`` per op (convs by their dataflow, the
    rest by the vector unit; on a hybrid, one more per conv whose input moves between
    machines) and, with ``keep_outputs``, every node's output.
    ``progress(i, n, name)`` is called before each op. In mode emulate, a conv whose
    estimated emulator steps pass ``emulate_limit`` (None: no limit) is refused before
    any layer runs (``check_emulate_size``).
    """
    if not isinstance(model, Graph):
        raise InputError(f"simulate: model is a {type(model).__module__}.{type(model).__name__}, "
                         "not a network npusim has read: give npusim.from_torch(module, "
                         "example_input) for a PyTorch module, npusim.from_onnx(path) for an "
                         "ONNX file, or zoo.build(name)")
    cfg = RunConfig.of(arch, dataflow, mode=mode, dtype=dtype, emulate_limit=emulate_limit)
    x = tensors.finite_float32(input, "input", model.name)
    if x.shape != model.input_shape:
        if x.shape[1:] != model.input_shape[1:] or x.ndim != len(model.input_shape):
            raise InputError(f"input shape {x.shape} does not fit {model.name}, which takes "
                             f"{model.input_shape} (N may differ for a network of npusim's own)")
        model = model.with_batch(x.shape[0])
    check_model_finite(model)
    if mode == "emulate":
        check_emulate_size([model.layers[n.name].with_dtype(dtype) for n in model.conv_nodes],
                           cfg)
    start = time.perf_counter()
    walk = _Walk(progress) if progress else None
    with _Costs(background=cfg.background, batch_bytes=BATCH_BYTES,
                counting=walk.counted if walk else None) as costs:
        values, stats, placements = _run_nodes(model, x, cfg, costs, keep_outputs, walk)
        if any(isinstance(st, Undecided) for st in stats):
            stats, placements = decide(model, stats, cfg, costs.result)
        stats = [costs.result(st) for st in stats]
    return SimResult(values[model.output_name], stats, cfg.arch, mode, dtype, cfg.name,
                     time.perf_counter() - start, values if keep_outputs else {},
                     {label: values[out] for label, out in model.outputs.items()}, placements)


class _Walk:
    """A walk's ``progress(i, n, name)``, also told of each conv whose costs ``_Costs``
    counts later (``counted``): shown at the node the walk has reached, named for the conv."""

    def __init__(self, progress: Callable[[int, int, str], None]):
        self.progress, self.at = progress, (0, 1)

    def __call__(self, i: int, n: int, name: str) -> None:
        self.at = (i, n)
        self.progress(i, n, name)

    def counted(self, layer: ConvLayer) -> None:
        self.progress(*self.at, f"{layer.name} (costs)")


class _Costs:
    """Where a layer's costs are counted from its masks: on one worker thread, while the
    main thread computes this and the next layers' outputs (the two share no data; the
    counts release the GIL in their large array operations). At most ``depth`` layers
    wait, so their masks do not pile up in memory. Without ``background`` (machines whose
    costs follow the shapes, and the emulator), counted at once; or, given
    ``batch_bytes``, in the calling thread after the walk (``result``), or as soon as the
    masks waiting hold more than ``batch_bytes``: one layer after another the counting code
    and its data stay in the caches that the outputs' computation between two layers would
    take (ppocr-cls's sparse-pairs estimate about 11 % quicker, MobileNetV2's 8 %).
    ``counting(layer)``, if given, is told of each layer counted so (``args[0]`` of its
    ``submit``).

    The worker exists only when npusim may keep two threads busy (``parallel.threads``:
    the CPU affinity, and a user's ``OMP_NUM_THREADS``/``OPENBLAS_NUM_THREADS``); on one
    core it would only take turns with the main thread. While it exists, BLAS gets one
    thread fewer: OpenBLAS threads busy-wait between calls and would take the worker's core
    (on 2 cores, ResNet-50's estimate ran 1.5x slower with both). docs/input-reuse.md has
    the measured gain (``bench/bench_costs_thread.py``)."""

    def __init__(self, background: bool, depth: int = 2, batch_bytes: int = 0,
                 counting: Callable[[ConvLayer], None] | None = None):
        self.pool = _worker() if background and threads() >= 2 else None
        self.pending: list = []  # Futures
        self.depth = depth
        self.limits = None
        self.batch_bytes = batch_bytes
        self.waiting: list[_Waiting] = []  # counts not yet run, in order
        self.held = 0  # bytes of the masks they hold
        self.counting = counting

    def __enter__(self) -> _Costs:
        if self.pool:
            from threadpoolctl import threadpool_info, threadpool_limits

            blas = [lib["num_threads"] for lib in threadpool_info()
                    if lib["user_api"] == "blas"]
            self.limits = threadpool_limits(max(1, min(max(blas, default=1), threads() - 1)),
                                            user_api="blas")
        return self

    def __exit__(self, *exc) -> None:
        if self.pool:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.limits.restore_original_limits()

    def submit(self, df: Dataflow, layer: ConvLayer, x_mask, w_mask, arch: Arch):
        """``df.estimate`` of the layer: the stats, or a handle to them (``result``)."""
        args = (layer, x_mask, w_mask, arch)
        if self.pool is None:
            return self._wait(df, args) if self.batch_bytes else df.estimate(*args)
        self.pending = [f for f in self.pending if not f.done()]
        if len(self.pending) >= self.depth:
            self.pending[0].result()
        future = self.pool.submit(df.estimate, *args)
        self.pending.append(future)
        return future

    def _wait(self, df: Dataflow, args: tuple) -> _Waiting:
        """``df.estimate(*args)`` to be counted with the others (``run_waiting``); the masks
        it keeps alive are the writeable arrays (a network's weights' masks are read-only
        and kept anyway)."""
        job = _Waiting(df, args)
        self.waiting.append(job)
        self.held += sum(a.nbytes for a in args
                         if isinstance(a, np.ndarray) and a.flags.writeable)
        if self.held > self.batch_bytes:
            self.run_waiting()
        return job

    def run_waiting(self) -> None:
        """Count every waiting layer, in order (``Dataflow.count``), then take each to its
        counts and steps (``Dataflow.to_price``), then price them together
        (``stats.price_all``, per arch)."""
        for job in self.waiting:
            if self.counting:
                self.counting(job.args[0])
            layer, arch = job.args[0], job.args[-1]
            job.counted = job.df.count(*job.args)
            job.args = (layer, arch)  # the masks are done with
        for job in self.waiting:
            job.counted = job.df.to_price(*job.args, job.counted)
        for arch in {id(job.args[1]): job.args[1] for job in self.waiting}.values():
            jobs = [job for job in self.waiting if job.args[1] is arch]
            priced = price_all([job.args[0] for job in jobs], [job.counted for job in jobs],
                               arch)
            for job, st in zip(jobs, priced, strict=True):
                job.stats, job.args, job.counted = st, (), None
        self.waiting.clear()
        self.held = 0

    def result(self, st):
        """``st`` itself, or the stats its Future or ``_Waiting`` (from ``submit``) holds,
        once counted."""
        if isinstance(st, _Waiting):
            if st.stats is None:
                self.run_waiting()
            return st.stats
        if self.pool is None:  # no worker: ``submit`` counted at once
            return st
        from concurrent.futures import Future

        return st.result() if isinstance(st, Future) else st


@dataclass(eq=False)
class _Waiting:
    """A layer's costs waiting to be counted (``_Costs``): ``df.estimate(*args)`` as
    ``df.count(*args)``, then ``df.to_price`` of that (each kept in ``counted``), then
    ``stats``."""

    df: Dataflow
    args: tuple
    counted: object = None
    stats: LayerStats | None = None


def _worker():
    """The one worker thread of ``_Costs`` (concurrent.futures, imported only by runs that
    count costs in the background)."""
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(1, "npusim-costs")


def walk_stats(model: Graph, x, cfg: RunConfig) -> list:
    """Every node of ``model`` on ``x`` by ``cfg``, each conv's costs counted at once in this
    thread: the stats (or a hybrid's ``Undecided``), one per node and per move. For a
    caller that keeps what ``cfg``'s machines are given (``dse.reuse``'s masks)."""
    with _Costs(background=False) as costs:
        return _run_nodes(model, x, cfg, costs)[1]


def _run_nodes(model: Graph, x, cfg: RunConfig, costs: _Costs, keep_outputs: bool = False,
               progress: Callable[[int, int, str], None] | None = None):
    """Every node in order: (values still live, one LayerStats or handle per node and per
    transfer, the hybrid's ``Placement`` per conv; a hybrid's conv not yet placed is its
    ``Undecided``, and its move and placement come from ``decide``). A vector op's output
    stays with the machine that holds its first input (``holder``: node -> machine name,
    None for DRAM)."""
    from . import ops  # a network's (a run of bare shapes defines no op: see ``ir``)

    values = {model.input_name: x}
    holder: dict[str, str | None] = {model.input_name: None}
    stats: list = []
    placements: list = []
    dead_after = {} if keep_outputs else _dead_after(model)
    overwrites = _overwrites(model, dead_after)
    for i, node in enumerate(model.nodes):
        if progress:
            progress(i, len(model.nodes), node.name)
        args = [values[n] for n in node.inputs]
        if isinstance(node.op, ops.Conv):
            layer = model.layers[node.name].with_dtype(cfg.dtype)
            x_in = args[0].reshape(layer.input_shape)
            tensors.check_finite(x_in, "input (the output of the op before it)", node.name)
            out, st, placed = _conv(cfg, layer, x_in, node.op.weight, node.op.bias,
                                    holder[node.inputs[0]], costs)
            out = out.astype(np.float32, copy=False).reshape(model.shapes[node.name])
            holder[node.name] = _record(stats, placements, placed, cfg)
        else:
            if i in overwrites and args[0].flags.writeable:
                out = node.op.in_place(args[0])
            else:
                out = node.op(*args)
            st = _vector_stats(node.name, node.op, [model.shapes[n] for n in node.inputs],
                               model.shapes[node.name], cfg.arch, cfg.dtype)
            holder[node.name] = _held(holder, node)
        values[node.name] = out
        stats.append(st)
        for name in dead_after.get(i, ()):
            del values[name]
    return values, stats, placements


def _held(holder: dict[str, str | None], node) -> str | None:
    """The machine that holds a vector op's output: the one holding its first input (None:
    DRAM)."""
    return holder[node.inputs[0]] if node.inputs else None


def _record(stats: list, placements: list, placed, cfg: RunConfig) -> str | None:
    """Keep a hybrid's placement of a conv and, before the conv's own stats, the stats of
    its input's move; the name of the machine that now holds the conv's output (None for a
    conv not yet placed: ``decide`` follows the holders again once it is)."""
    if placed is None:
        return cfg.machines[0].name
    if isinstance(placed, Undecided):
        return None
    placements.append(placed)
    if placed.transfer is not None:
        stats.append(placed.transfer)
    return placed.machine.name


@dataclass(eq=False)
class Undecided:
    """A hybrid's conv in mode estimate, walked before its member is chosen (its outputs are
    the dense engine's whichever runs it): its layer and each member that can run it, by
    name, with its stats or their handle (``_member_costs``), counted with the other layers'
    after the walk, as on one machine (``_Costs``); ``decide`` then chooses."""

    layer: ConvLayer
    members: dict[str, object]


def decide(model: Graph, stats: list, cfg: RunConfig,
           result: Callable[[object], LayerStats] = lambda st: st) -> tuple[list, list]:
    """A hybrid's choices in mode estimate, made after the walk (``Undecided``), in network
    order as the walk makes them in the other modes, the holders followed as it follows
    them: the walk's stats (one per node) with each conv's replaced by the move of its
    input, if any, and its chosen member's stats; and the placements. ``result`` turns a
    member's entry into its stats (``_Costs.result`` of a handle; default: the stats)."""
    from .hybrid import place

    holder: dict[str, str | None] = {model.input_name: None}
    decided: list = []
    placements: list = []
    for node, st in zip(model.nodes, stats, strict=True):
        if not isinstance(st, Undecided):
            holder[node.name] = _held(holder, node)
            decided.append(st)
            continue
        placed = place(st.layer, cfg.machines, lambda df, st=st: result(st.members[df.name]),
                       holder[node.inputs[0]], cfg.arch, cfg.objective)
        holder[node.name] = _record(decided, placements, placed, cfg)
        decided.append(placed.stats)
    return decided, placements


def simulate_shapes(layers: list[ConvLayer], arch: Arch | str | None = None,
                    dataflow: str | None = None, dtype: str = "float32") -> SimResult:
    """Costs of conv ``layers`` given as shapes only (a SCALE-Sim topology): no tensors,
    dense (``Dataflow.estimate`` on all-ones masks); ``output`` is None, mode 'estimate'.
    On a hybrid, each layer's input comes from the layer before it."""
    layers = _checked_layers(layers)
    cfg = RunConfig.of(arch, dataflow, mode="estimate", dtype=dtype)
    start = time.perf_counter()
    stats: list = []
    placements: list = []
    source = None
    for layer in layers:
        layer = layer.with_dtype(dtype)
        ones = (np.broadcast_to(np.True_, layer.input_shape),  # all-ones, no memory
                np.broadcast_to(np.True_, layer.weight_shape))
        _, count, placed = _place(cfg, layer, lambda df, ones=ones: ones, source,
                                  _Costs(background=False))
        source = _record(stats, placements, placed, cfg)
        stats.append(count())
    return SimResult(None, stats, cfg.arch, "estimate", dtype, cfg.name,
                     time.perf_counter() - start, placements=placements)

def _checked_layers(layers) -> list[ConvLayer]:
    """``simulate_shapes``'s ``layers`` as a list, refused unless they are a non-empty
    sequence of ``ConvLayer`` (naming the first that is not one)."""
    if isinstance(layers, ConvLayer):
        raise InputError("simulate_shapes: layers must be a list of ConvLayer, got one "
                         "ConvLayer (wrap it in a list)")
    try:
        layers = list(layers)
    except TypeError:
        raise InputError(f"simulate_shapes: layers must be a list of ConvLayer, got "
                         f"{type(layers).__name__}") from None
    if not layers:
        raise InputError("simulate_shapes: no layers to run (an empty list)")
    for i, layer in enumerate(layers):
        if not isinstance(layer, ConvLayer):
            raise InputError(f"simulate_shapes: layers[{i}] is a {type(layer).__name__}, not "
                             "a ConvLayer")
    return layers


def _dead_after(model: Graph) -> dict[int, list[str]]:
    """Node index -> the tensors no node after it reads (dropped there, which keeps peak
    memory to the live set); graph outputs are never dropped."""
    last_read = {model.input_name: -1}
    for i, node in enumerate(model.nodes):
        last_read[node.name] = i
        for name in node.inputs:
            last_read[name] = i
    dead: dict[int, list[str]] = {}
    outputs = model.output_nodes
    for name, i in last_read.items():
        if name not in outputs:
            dead.setdefault(max(i, 0), []).append(name)
    return dead


def _overwrites(model: Graph, dead_after: dict[int, list[str]]) -> set[int]:
    """The nodes that write their values over their input (``Op.in_place``): an op that
    can, whose one input is a conv's output that no later node reads (``dead_after``). A
    conv's output is an array of its own (no view of another value; no cache and no costs
    hold it: the costs read masks of the conv's input), so nothing else sees it change, and
    the walk makes no new array the size of the activation: ReLU6 in place took
    MobileNetV2's systolic estimate 12 % and its sparse-pairs estimate 7 % quicker, one
    core (ReLU's ``np.maximum`` gains less: ResNets within the spread; hard swish in place,
    ppocr-cls's systolic estimate 2 %)."""
    convs = {node.name for node in model.conv_nodes}
    return {i for i, node in enumerate(model.nodes)
            if hasattr(node.op, "in_place") and len(node.inputs) == 1
            and node.inputs[0] in convs and node.inputs[0] in dead_after.get(i, ())}


def conv2d(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1,
           dataflow: str | None = None, arch: Arch | str | None = None,
           dtype: str = "float32", emulate: bool = False,
           emulate_limit: int | None = EMULATE_LIMIT) -> tuple[np.ndarray, LayerStats]:
    """One convolution on one dataflow (default: ``arch``'s own, as ``simulate``'s), with
    torch's argument conventions.

    ``x`` is N x C x H x W, ``w`` K x C/groups x R x S; ``padding`` an int, (h, w),
    (top, bottom, left, right), 'same' (stride 1, as PyTorch's) or 'valid'. Float inputs
    with ``dtype='int8'`` are quantised and the output requantised to int8 (``quant``), as
    ``simulate`` does, and returned dequantised (float32); int8 inputs return the int32
    accumulators.
    With ``emulate``, a layer above ``emulate_limit`` emulator steps is refused first.
    """
    x, w = tensors.real_array(x, "x", "conv2d"), tensors.real_array(w, "w", "conv2d")
    bias = None if bias is None else tensors.real_array(bias, "bias", "conv2d")
    if x.ndim != 4 or w.ndim != 4:
        raise InputError(f"conv2d: x and w must be 4-D (NCHW, KCRS), got {x.shape} and {w.shape}")
    dil = pair(dilation, "dilation", "conv2d")
    if isinstance(padding, str):
        if padding not in ("same", "valid"):
            raise InputError(f"conv2d.padding={padding!r}: must be 'same', 'valid' or integers")
        if padding == "same" and pair(stride, "stride", "conv2d") != (1, 1):
            raise InputError(f"conv2d.padding='same' with stride={stride!r}: 'same' is for "
                             "stride 1, as in PyTorch (a strided layer's 'same' differs "
                             "between frameworks); give the padding as integers, "
                             "(top, bottom, left, right)")
        padding = same_padding(w.shape[2:], dil) if padding == "same" else 0
    cfg = RunConfig.of(arch, dataflow, mode="emulate" if emulate else "run", dtype=dtype,
                       emulate_limit=emulate_limit)
    layer = ConvLayer(x.shape[0], x.shape[1], x.shape[2], x.shape[3], w.shape[0], w.shape[2],
                      w.shape[3], stride, padding4(padding, "conv2d"), dil, groups,
                      bias is not None, "conv2d", dtype)
    if w.shape[1] * groups != x.shape[1]:
        raise InputError(f"conv2d: w has {w.shape[1]} channels per group x groups={groups}, "
                         f"x has C={x.shape[1]}")
    x, w, bias = _operands(x, w, bias)
    if x.dtype == np.int8:
        layer = layer.with_dtype("int8")
    if emulate:
        check_emulate_size([layer], cfg)
    out, st, _ = _conv(cfg, layer, x, w, bias, None, _Costs(background=False))
    return out, st

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
