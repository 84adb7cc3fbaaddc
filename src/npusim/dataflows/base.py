"""The interface every dataflow shares, and the registry ``simulate`` dispatches through.

A dataflow joins a problem (``ConvLayer``) and a machine (``Arch``):

- ``supports(layer, arch)``: ``None``, or why this machine cannot run the layer;
- ``compute(layer, x, w, bias, arch)``: exact outputs by the machine's own arithmetic;
- ``estimate(layer, x_mask, w_mask, arch)``: the ``LayerStats`` of the layer from the
  non-zero masks of the real tensors (``None`` masks where ``reads_masks`` is False:
  that machine's costs follow the shapes alone);
- ``run(layer, x, w, bias, arch)``: both, (outputs, stats); shared by every dataflow
  (``Machine``), so a run's stats are the estimate's by construction;
- ``emulate(layer, x, w, bias, arch)``: (outputs, stats) from the machine's cycle emulator
  (``Machine``'s refuses: a machine without one says so);
- ``estimate_memo(layer, x_mask, w_mask, arch, memo)``: ``estimate``'s stats, keeping in
  ``memo`` (a ``Memo`` that belongs to this layer and these masks) what the machine derives
  from them that holds on other archs too, and taking it from there when it is already
  kept (a sweep prices the same masks on many archs: ``npusim.dse.reuse``); by default
  ``estimate`` itself, keeping nothing.

``x`` and ``w`` are float32 (outputs float32) or int8 (outputs int32 accumulators,
with ``bias`` already int32 in accumulator units). ``Params`` is the dataclass of
the dataflow's own hardware section in an arch TOML file, named after the dataflow:
``register`` declares it to the arch loader (``arch.spec.declare_section``), and machine
code reads it as ``arch.params(Params)``, typed. The arch package never imports this one.
"""

from __future__ import annotations

import importlib
from collections import OrderedDict
from collections.abc import Callable
from typing import ClassVar, Protocol

import numpy as np

from ..arch.sections import HYBRID
from ..arch.spec import declare_section
from ..derived import weight_mask
from ..errors import ConfigError, NpusimError
from ..ir import ConvLayer
from ..lazy import LazyRegistry
from ..stats import Counted, LayerStats


class Dataflow(Protocol):
    name: ClassVar[str]
    Params: ClassVar[type]
    reads_masks: ClassVar[bool]
    compute_on_every_core: ClassVar[bool]

    def supports(self, layer: ConvLayer, arch) -> str | None: ...

    def compute(self, layer: ConvLayer, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None,
                arch) -> np.ndarray: ...

    def estimate(self, layer: ConvLayer, x_mask: np.ndarray | None, w_mask: np.ndarray | None,
                 arch) -> LayerStats: ...

    def masks(self, x: np.ndarray, w: np.ndarray) -> tuple: ...

    def count(self, layer: ConvLayer, x_mask: np.ndarray | None, w_mask: np.ndarray | None,
              arch): ...

    def to_price(self, layer: ConvLayer, arch, counted) -> LayerStats | Counted: ...

    def estimate_memo(self, layer: ConvLayer, x_mask: np.ndarray | None,
                      w_mask: np.ndarray | None, arch, memo: Memo) -> LayerStats: ...

    def run(self, layer: ConvLayer, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None,
            arch) -> tuple[np.ndarray, LayerStats]: ...

    def emulate(self, layer: ConvLayer, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None,
                arch) -> tuple[np.ndarray, LayerStats]: ...

    def emulate_steps(self, layer: ConvLayer, arch) -> int: ...

    def diagnostics(self, total: LayerStats) -> list[tuple[str, str]]: ...


class Memo:
    """What a machine derived from one layer and its masks, by what else it depends on (its
    key: the arch parameters it reads), for ``estimate_memo``. Each kind of entry (a key's
    first item) keeps its ``limit`` latest (``limits``, else ``LIMIT``): a ``Work`` of a big
    layer is megabytes, and a sweep may try many unit counts."""

    LIMIT = 64

    def __init__(self, limits: dict[str, int] | None = None):
        self.limits = limits or {}
        self.kinds: dict[str, OrderedDict] = {}

    def get(self, key: tuple, make: Callable[[], object]):
        """The value kept for ``key``, else ``make()``, kept."""
        kind = self.kinds.setdefault(key[0], OrderedDict())
        if key in kind:
            kind.move_to_end(key)
            return kind[key]
        value = kind[key] = make()
        while len(kind) > self.limits.get(key[0], self.LIMIT):
            kind.popitem(last=False)
        return value


class Machine:
    """The part of the interface every dataflow class inherits."""

    reads_masks: ClassVar[bool] = True
    # whether ``compute`` keeps every core busy (``parallel.in_parallel``): then counting the
    # costs on a worker thread beside it gains nothing (``simulate.RunConfig.background``)
    compute_on_every_core: ClassVar[bool] = False

    def estimate_memo(self, layer: ConvLayer, x_mask: np.ndarray | None,
                      w_mask: np.ndarray | None, arch, memo: Memo) -> LayerStats:
        """``estimate``; a machine that can reuse its counts across archs overrides it."""
        return self.estimate(layer, x_mask, w_mask, arch)

    def count(self, layer: ConvLayer, x_mask: np.ndarray | None, w_mask: np.ndarray | None,
              arch):
        """``estimate`` in parts: what the masks give (a machine's compiled counting over
        them), then ``to_price`` of that (its per-layer Python: the counts and the steps),
        then ``stats.price``. ``simulate`` counts the layers waiting for their costs one
        after another, then takes each to its counts and steps, then prices them all at once
        (``stats.price_all``: the memory model over all their steps in one pass), so the
        kernels' data and the Python's code each stay in the caches (``_Costs``). By
        default the whole estimate is the count."""
        return self.estimate(layer, x_mask, w_mask, arch)

    def to_price(self, layer: ConvLayer, arch, counted) -> LayerStats | Counted:
        """The counts and steps (``stats.Counted``) of what ``count`` gave, or the stats; by
        default what ``count`` gave, as it is (the stats, or a ``Counted`` already)."""
        return counted

    def masks(self, x: np.ndarray, w: np.ndarray) -> tuple:
        """(x != 0, w != 0) for ``estimate``; (None, None) if the costs ignore the values.
        The weights' mask is made once per read-only weight array (``derived.weight_mask``)."""
        return (x != 0, weight_mask(w)) if self.reads_masks else (None, None)

    def run(self, layer: ConvLayer, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None,
            arch) -> tuple[np.ndarray, LayerStats]:
        """Outputs by the machine's arithmetic and the layer's stats."""
        out = self.compute(layer, x, w, bias, arch)
        return out, self.estimate(layer, *self.masks(x, w), arch)

    def emulate(self, layer: ConvLayer, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None,
                arch) -> tuple[np.ndarray, LayerStats]:
        """Outputs and stats from the cycle emulator; a machine without one refuses."""
        raise NpusimError(f"dataflow {self.name!r} has no cycle emulator; use mode 'run'")

    def mapping(self, layer: ConvLayer, arch) -> tuple:
        """The compiler's choices for ``layer`` on ``arch`` that the cycle emulator takes
        with the layer, as hardware takes a program: none by default (group-tile's output
        block width, dilated-grid's tap-run lengths)."""
        return ()

    def emulate_steps(self, layer: ConvLayer, arch) -> int:
        """The cycle emulator's estimated work on ``layer``, in emulator steps of about 1 us
        (docs/cli.md): ``work_estimate`` of ``npusim.emulate.<this machine's module>``, in
        the layer's ``mapping``."""
        module = type(self).__module__.rsplit(".", 1)[1]
        emulator = importlib.import_module(f"{__package__.rsplit('.', 1)[0]}.emulate.{module}")
        return emulator.work_estimate(layer, arch.params(self.Params), *self.mapping(layer, arch))

    def hardware(self, arch, dtype: str):
        """What the machine is built of on ``arch`` for ``dtype`` (``area.Hardware``), for
        the area model; each machine lists its own parts."""
        raise NotImplementedError(f"{self.name}: no hardware inventory")

    def diagnostics(self, total: LayerStats) -> list[tuple[str, str]]:
        """(label, text) lines of the machine's own counters that explain its time, from
        the sum of its conv layers' stats (``total.extra``); shown below the run's report."""
        return []


MACHINES = ("dilated-grid", "group-tile", "input-reuse", "sparse-pairs", "systolic")
"""The built-in dataflows, each registered by this package's module of its name."""
REGISTRY = LazyRegistry({name: f"{__package__}.{name.replace('-', '_')}" for name in MACHINES})
"""Dataflow name -> its instance; a built-in machine's module is imported when its entry is
first read, so a run loads the machine it runs, not every one."""


def register(dataflow_cls):
    """Class decorator: add one instance of the dataflow to ``REGISTRY`` under its ``name``,
    and declare its ``Params`` to the arch loader as the section ``[name]``."""
    REGISTRY[dataflow_cls.name] = dataflow_cls()
    declare_section(dataflow_cls.name, dataflow_cls.Params)
    return dataflow_cls


def get(name: str) -> Dataflow:
    """The registered dataflow called ``name``; the error lists the valid names."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ConfigError(f"dataflow {name!r}: must be one of {', '.join(names())}") from None


def names() -> list[str]:
    return sorted(REGISTRY)


def machines(arch, name: str) -> tuple[tuple[Dataflow, ...], str]:
    """(the machines ``name`` runs convs on, the objective that picks among them): one
    registered dataflow, or for ``hybrid`` the arch's ``[hybrid]`` members (``npusim.hybrid``
    places each conv on one of them; a run on one machine so imports neither it nor its
    section)."""
    if name != HYBRID:
        return (get(name),), "cycles"
    p = arch.params(HYBRID)
    p.validate(f"{arch.name}: hybrid")
    return tuple(get(m) for m in p.machines), p.objective


def percent(part: float, whole: float) -> str:
    """'12.3 %': ``part`` as a share of ``whole`` ('-' if ``whole`` is 0)."""
    return f"{100 * part / whole:.1f} %" if whole else "-"


def element_bytes(dtype: str) -> int:
    """Bytes per stored element: 1 for int8, 4 for float32."""
    return 1 if dtype == "int8" else 4


def share(total, weights: np.ndarray) -> np.ndarray:
    """``total`` (an integer, or an array of them: a row each) cut into integers in
    proportion to ``weights`` (equal parts if they are all zero), each row summing to its
    total exactly: part i is ``floor(total x running weight to i / all)`` less the same to
    i - 1 (``floor_products``: exact however large the products)."""
    if np.size(weights) == 1:  # one part: the whole total (a layer of one step, mostly)
        return np.array(total, np.int64)[..., None]
    cum = np.cumsum(np.asarray(weights, np.int64))
    if cum[-1] == 0:
        cum = np.arange(1, cum.size + 1, dtype=np.int64)
    total = np.asarray(total, np.int64)
    most = abs(int(total)) if total.ndim == 0 else int(np.abs(total).max(initial=0))
    out = floor_products(total[..., None], cum, int(cum[-1]), most * int(cum[-1]))
    out[..., 1:] -= out[..., :-1]  # running sums to steps (numpy reads overlaps as copied)
    return out


def floor_products(a, b, whole: int, most: int | None = None) -> np.ndarray:
    """``floor(a x b / whole)`` of integers ``a`` and ``b`` (arrays that broadcast), exactly,
    as int64 (a new array): in int64 where every product fits, else in Python's integers (a
    layer's millions of bytes times a running count of billions: wrapped round in int64,
    they once came out negative). ``most``: the largest |a x b|, if the caller knows it."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    if most is None:
        most = int(np.abs(a).max(initial=0)) * int(np.abs(b).max(initial=0))
    if most < 1 << 63:
        return a * b // whole
    return (a.astype(object) * b.astype(object) // whole).astype(np.int64)
