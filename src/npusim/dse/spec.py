"""A sweep spec: what to vary, on which models, what to minimise, what to refuse (docs/sweep.md).

A spec is a TOML file, validated once like an arch file: an unknown key or a bad value is one
``SweepError`` naming the file and the key. A point of the sweep is one value per parameter plus
one model and one density; its arch is the base arch's TOML with the point's values set, read
back through the arch loader (``arch_from_toml_text``), so a point the arch format refuses is
infeasible with the loader's reason, not a crash.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..arch.spec import PARTS, PRESET_DIR, Arch, arch_from_toml_text, declared_sections, presets
from ..choices import DTYPES, MAX_DIM
from ..errors import NpusimError
from ..stats import LayerStats

MODES = ("estimate", "run")
STRATEGIES = ("grid", "random", "nsga2")
MAX_VALUES = 1_000_000  # values of one parameter
MAX_POINTS = 1_000_000  # points one sweep runs: a grid's, or a search's budget
# Named objectives: (key of the point's totals, sense). Any other numeric field of the totals
# (LayerStats.as_dict(), plus latency_s and edp) is a quantity too, minimised.
OBJECTIVES = {"cycles": ("cycles", "min"), "energy": ("energy_pj", "min"),
              "edp": ("edp", "min"), "utilisation": ("utilisation", "max"),
              "area": ("area_mm2", "min")}
DERIVED = {"latency_s": "cycles / clock, s", "edp": "energy x latency, pJ s",
           "area_mm2": "the arch's area, mm^2", "area_macs_mm2": "its MACs, mm^2",
           "area_registers_mm2": "its registers, mm^2", "area_sram_mm2": "its SRAM, mm^2",
           "area_interconnect_mm2": "its multiplexers, mm^2"}
MAXIMISED = {"utilisation", "mapping_efficiency"}


class SweepError(NpusimError):
    """A bad sweep spec, store or search request (names the file and key)."""


@dataclass(frozen=True)
class Search:
    """How points are chosen: the whole grid, ``budget`` random grid points, or ``budget``
    trials of NSGA-II (``population`` per generation); ``seed`` makes both reproducible."""

    strategy: str = "grid"
    budget: int = 0
    seed: int = 0
    population: int = 8


@dataclass(frozen=True)
class Constraint:
    """``quantity`` must lie in [min, max] (None: unbounded)."""

    quantity: str
    min: float | None = None
    max: float | None = None

    def violation(self, value: float) -> str | None:
        """None if ``value`` meets the constraint, else why not."""
        if self.min is not None and not value >= self.min:
            return f"constraint {self.quantity} >= {self.min:g}: got {value:g}"
        if self.max is not None and not value <= self.max:
            return f"constraint {self.quantity} <= {self.max:g}: got {value:g}"
        return None


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep spec. ``parameters`` maps a dotted arch key to its values."""

    where: str
    base: str
    base_text: str
    parameters: dict[str, tuple]
    models: tuple[str, ...]
    densities: tuple
    dtype: str = "float32"
    batch: int = 1
    mode: str = "estimate"
    seed: int = 0
    objectives: tuple[str, ...] = ("cycles", "energy")
    constraints: tuple[Constraint, ...] = ()
    search: Search = Search()
    model_digests: tuple[str, ...] = ()

    @property
    def grid_size(self) -> int:
        """Points of the full grid: parameters x models x densities."""
        return math.prod(len(v) for v in self.dims().values())

    @property
    def points_planned(self) -> int:
        """Distinct points the search runs: the grid, or its budget if the grid is larger."""
        grid = self.grid_size
        return grid if self.search.strategy == "grid" else min(grid, self.search.budget)

    def dims(self) -> dict[str, tuple]:
        """Every dimension of the space: the parameters, then ``model`` and ``density``."""
        return {**self.parameters, "model": self.models, "density": self.densities}

    def facts(self) -> dict:
        """Everything that decides a point's result, as JSON values (not [search]: a store can
        grow from a grid to a random or NSGA-II search of the same space)."""
        facts = {"base_text": self.base_text, "parameters": self.parameters,
                 "models": self.models, "model_digests": self.model_digests,
                 "densities": self.densities, "dtype": self.dtype, "batch": self.batch,
                 "mode": self.mode, "seed": self.seed, "objectives": self.objectives,
                 "constraints": [dataclasses.astuple(c) for c in self.constraints]}
        return json.loads(json.dumps(facts, sort_keys=True))

    def digest(self) -> str:
        """SHA-256 of ``facts``."""
        return hashlib.sha256(json.dumps(self.facts(), sort_keys=True).encode()).hexdigest()

    def arch_text(self, params: Mapping[str, Any]) -> str:
        """The base arch's TOML with ``params`` (dotted keys) set."""
        table = tomllib.loads(self.base_text)
        for key, value in params.items():
            *sections, name = key.split(".")
            target = table
            for s in sections:
                target = target.setdefault(s, {})
            target[name] = value
        return to_toml(table)

    def arch(self, params: Mapping[str, Any]) -> Arch:
        """The point's arch through the validated loader (``ConfigError`` if it is invalid)."""
        shown = ", ".join(f"{k}={v!r}" for k, v in params.items())
        return arch_from_toml_text(self.arch_text(params), f"point ({shown})")


def to_toml(table: Mapping[str, Any]) -> str:
    """``table`` (scalars, then one level of sub-tables) as TOML text."""
    lines = [f"{k} = {_toml_value(v)}" for k, v in table.items() if not isinstance(v, Mapping)]
    for name, sub in table.items():
        if isinstance(sub, Mapping):
            lines.append(f"[{_toml_value(name)}]")
            lines += [f"{_toml_value(k)} = {_toml_value(v)}" for k, v in sub.items()]
    return "\n".join(lines) + "\n"


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, int | float | str):  # any character as itself: TOML takes no \ud83d
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):  # a hybrid's machines
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise SweepError(f"{value!r}: an arch value must be a string, number, boolean or list")


# ---- reading and validating -------------------------------------------------------------------

TOP_KEYS = {"base", "models", "densities", "dtype", "batch", "mode", "seed", "objectives",
            "parameters", "constraints", "search"}


def load_spec(path: str | Path) -> SweepSpec:
    """Read and validate the sweep spec at ``path``."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # UTF-8, a leading BOM dropped
    except (OSError, UnicodeDecodeError) as e:
        raise SweepError(f"{path}: cannot read the sweep spec: {e}") from None
    return spec_from_toml_text(text, str(path), path.parent)


def spec_from_toml_text(text: str, where: str, root: Path = Path(".")) -> SweepSpec:
    """Parse and validate a sweep spec; relative file names are taken from ``root``."""
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SweepError(f"{where}: not valid TOML: {e}") from None
    _unknown(table, TOP_KEYS, where)
    for key in ("base", "models", "parameters"):
        if key not in table:
            raise SweepError(f"{where}: missing key {key!r} (see docs/sweep.md)")
    base, base_text = _base(table["base"], where, root)
    models = _models(table["models"], where, root)
    densities = _densities(table.get("densities", [1.0]), models, where)
    objectives = _objectives(table.get("objectives", ["cycles", "energy"]), where)
    search = _search(table.get("search", {}), where)
    spec = SweepSpec(
        where=where, base=base, base_text=base_text,
        parameters=_parameters(table["parameters"], where), models=models,
        densities=densities, dtype=_choice(table, "dtype", DTYPES, "float32", f"{where}:"),
        batch=_int(table, "batch", 1, f"{where}:", high=MAX_DIM),  # as --batch
        mode=_choice(table, "mode", MODES, "estimate", f"{where}:"),
        seed=_int(table, "seed", 0, f"{where}:", low=0), objectives=objectives,
        constraints=_constraints(table.get("constraints", {}), where), search=search,
        model_digests=tuple(_file_digest(m, root) for m in models))
    if search.strategy == "nsga2" and len(objectives) < 2:
        raise SweepError(f"{where}: search.strategy='nsga2' needs two or more objectives")
    if search.strategy == "nsga2" and len(models) * len(densities) > 1:
        raise SweepError(f"{where}: search.strategy='nsga2' searches the arch parameters for one "
                         f"workload; these models x densities are {len(models) * len(densities)}"
                         " (a small network beats a large one on every objective, so the search "
                         "would breed the network, not the design): one model and one density "
                         "per nsga2 spec, or strategy grid / random")
    arch_from_toml_text(base_text, f"{where}: base {base!r}:")  # the base itself must be valid
    _check_points(spec)
    return spec


def _check_points(spec: SweepSpec) -> None:
    """Refuse a sweep of more than ``MAX_POINTS`` points (a grid is listed before it runs)."""
    if spec.points_planned <= MAX_POINTS:
        return
    if spec.search.strategy == "grid":
        sizes = " x ".join(str(len(v)) for v in spec.dims().values())
        raise SweepError(f"{spec.where}: the grid has {spec.grid_size:,} points ({sizes}: the "
                         f"parameters, models, densities); at most {MAX_POINTS:,}: narrow it, or "
                         "search it with [search] strategy = \"random\" or \"nsga2\" and a "
                         "budget")
    raise SweepError(f"{spec.where}: search.budget={spec.search.budget:,}: at most "
                     f"{MAX_POINTS:,} points")


def _unknown(table: Mapping, valid, where: str) -> None:
    unknown = sorted(set(table) - set(valid))
    if unknown:
        raise SweepError(f"{where}: unknown key(s) {', '.join(unknown)}; valid keys: "
                         f"{', '.join(sorted(valid))}")


def _k(where: str, key: str) -> str:
    """``spec.toml: batch`` at the top of the spec, ``spec.toml: search.seed`` in a table."""
    return f"{where} {key}" if where.endswith(":") else f"{where}.{key}"


def _choice(table, key, choices, default, where):
    value = table.get(key, default)
    if value not in choices:
        raise SweepError(f"{_k(where, key)}={value!r}: must be one of {', '.join(choices)}")
    return value


def _int(table, key, default, where, low=1, high=None):
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise SweepError(f"{_k(where, key)}={value!r}: must be an integer >= {low}")
    if high is not None and value > high:
        raise SweepError(f"{_k(where, key)}={value:,}: must be an integer from {low} to "
                         f"{high:,}")
    return value


def _base(value, where: str, root: Path) -> tuple[str, str]:
    """(the base arch as named, its TOML text): a preset name or a TOML file."""
    if not isinstance(value, str):
        raise SweepError(f"{where}: base={value!r}: must be an arch preset name or a TOML file")
    path = PRESET_DIR / f"{value}.toml" if value in presets() else root / value
    if not path.is_file():
        raise SweepError(f"{where}: base={value!r}: not a preset ({', '.join(presets())}) "
                         f"nor a TOML file")
    try:
        return value, path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        raise SweepError(f"{where}: base={value!r}: cannot read {path}: {e}") from None


def _models(value, where: str, root: Path) -> tuple[str, ...]:
    """Zoo names, SCALE-Sim topology CSVs, ONNX files, ``file.py:factory``; files are taken
    relative to the spec and stored as absolute paths."""
    from ..frontends import kind, model_path, zoo

    if not isinstance(value, list) or not value or not all(isinstance(m, str) for m in value):
        raise SweepError(f"{where}: models={value!r}: must be a non-empty list of model names "
                         "(zoo names, FILE.csv, FILE.onnx, FILE.py:factory)")
    out = []
    for m in value:
        if m in zoo.names():
            out.append(m)
            continue
        file, _, factory = m.partition(":") if ".py:" in m else (m, "", "")
        local = root / file
        name = str(local.resolve()) if local.is_file() else file
        try:
            model_path(name + (f":{factory}" if factory else ""))
        except NpusimError as e:
            raise SweepError(f"{where}: models: {m!r}: not a zoo model nor a model file "
                             f"({e})") from None
        if kind(file) not in (".csv", ".onnx", ".py"):
            raise SweepError(f"{where}: models: {m!r}: not a zoo model ({', '.join(zoo.names())})"
                             " nor a model file (FILE.csv, FILE.onnx, FILE.py:factory)")
        out.append(name + (f":{factory}" if factory else ""))
    if len(set(out)) != len(out):
        raise SweepError(f"{where}: models: {value!r} names a model twice")
    return tuple(out)


def _file_digest(model: str, root: Path) -> str:
    """SHA-256 of a model file's bytes ('' for a zoo model), so an edited file is another spec."""
    from ..frontends import model_path

    path = model_path(model)
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""


def _densities(value, models, where: str) -> tuple:
    if not isinstance(value, list) or not value:
        raise SweepError(f"{where}: densities={value!r}: must be a non-empty list of numbers in "
                         "(0, 1] or 'deep-compression'")
    for d in value:
        number = isinstance(d, int | float) and not isinstance(d, bool)
        if not (d == "deep-compression" or (number and 0.0 < d <= 1.0)):
            raise SweepError(f"{where}: densities: {d!r}: must be a number in (0, 1] or "
                             "'deep-compression'")
    shapes = [m for m in models if m.endswith(".csv")]
    if shapes and any(d != 1.0 for d in value):
        raise SweepError(f"{where}: densities={value!r}: {shapes[0]} is a topology CSV (shapes "
                         "only, dense); it needs densities = [1.0]")
    out = tuple(float(d) if d != "deep-compression" else d for d in value)
    if len(set(out)) != len(out):
        raise SweepError(f"{where}: densities={value!r} names a density twice")
    return out


def quantities() -> set[str]:
    """Every quantity an objective or constraint may name."""
    numeric = {k for k, v in LayerStats("x", "").as_dict().items()
               if isinstance(v, int | float) and not isinstance(v, bool)}
    return numeric | set(OBJECTIVES) | set(DERIVED)


def total_key(quantity: str) -> str:
    """The key of a point's totals that holds ``quantity`` ('energy' -> 'energy_pj')."""
    return OBJECTIVES[quantity][0] if quantity in OBJECTIVES else quantity


def _quantity(name, where: str) -> str:
    if not isinstance(name, str) or name not in quantities():
        raise SweepError(f"{where}: {name!r}: not a quantity; valid: "
                         f"{', '.join(sorted(quantities()))}")
    return name


def _objectives(value, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise SweepError(f"{where}: objectives={value!r}: must be a non-empty list of "
                         f"quantities, e.g. {list(OBJECTIVES)}")
    out = tuple(_quantity(v, f"{where}: objectives") for v in value)
    if len(set(out)) != len(out):
        raise SweepError(f"{where}: objectives={value!r} names a quantity twice")
    return out


UNITS = {"cycles": "cycles", "energy": "pJ", "edp": "pJ s", "area": "mm^2",
         "utilisation": "0..1", "mapping_efficiency": "0..1", "stalled_share": "0..1",
         "latency_s": "s", "vector_ops": "ops"}
SUFFIX_UNITS = (("_cycles", "cycles"), ("_bytes", "bytes"), ("_pj", "pJ"), ("_mm2", "mm^2"),
                ("_s", "s"), ("macs", "MACs"))


def unit(quantity: str) -> str:
    """The unit ``quantity`` is counted in ('area' -> 'mm^2'), '' for a plain count."""
    if quantity in UNITS:
        return UNITS[quantity]
    return next((u for suffix, u in SUFFIX_UNITS if quantity.endswith(suffix)), "")


def sense(quantity: str) -> str:
    """'max' for quantities where more is better (utilisation), else 'min'."""
    if quantity in OBJECTIVES:
        return OBJECTIVES[quantity][1]
    return "max" if quantity in MAXIMISED else "min"


def _constraints(value, where: str) -> tuple[Constraint, ...]:
    if not isinstance(value, Mapping):
        raise SweepError(f"{where}: constraints: must be a table, e.g. "
                         "[constraints] cycles = {max = 1e6}")
    out = []
    for name, bounds in value.items():
        key = f"{where}: constraints.{name}"
        _quantity(name, f"{where}: constraints")
        if not isinstance(bounds, Mapping) or not bounds:
            raise SweepError(f"{key}: must be a table with min and/or max, e.g. {{max = 1e6}}")
        _unknown(bounds, {"min", "max"}, key)
        for b, v in bounds.items():
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise SweepError(f"{key}.{b}={v!r}: must be a finite number")
        if bounds.keys() == {"min", "max"} and bounds["min"] > bounds["max"]:
            raise SweepError(f"{key}: min={bounds['min']!r} is above max={bounds['max']!r}: no "
                             "point could be feasible")
        out.append(Constraint(name, bounds.get("min"), bounds.get("max")))
    return tuple(out)


def _search(value, where: str) -> Search:
    if not isinstance(value, Mapping):
        raise SweepError(f"{where}: search: must be a table ([search] strategy = ...)")
    _unknown(value, {f.name for f in dataclasses.fields(Search)}, f"{where}: search")
    at = f"{where}: search"
    strategy = _choice(value, "strategy", STRATEGIES, "grid", at)
    if strategy != "grid" and "budget" not in value:
        raise SweepError(f"{at}.budget: search.strategy={strategy!r} needs a budget (points)")
    budget = _int(value, "budget", 0, at, low=0 if strategy == "grid" else 1)
    return Search(strategy, budget, _int(value, "seed", 0, at, low=0),
                  _int(value, "population", 8, at, low=2))


# ---- parameters -------------------------------------------------------------------------------

def _arch_keys() -> dict[str, set[str]]:
    """Valid dotted arch keys: '' -> top-level scalars, section -> its fields."""
    return {section: set(types) for section, types in _arch_types().items()}


def _arch_types() -> dict[str, dict[str, str]]:
    """Each arch key's declared type as written ('int', 'float', 'str'...): '' -> the
    top-level scalars', section -> its fields' (the parts', the machines', the hybrid's)."""
    top = {f.name: str(f.type) for f in dataclasses.fields(Arch)
           if f.name not in {*PARTS, "sections"}}
    return {"": top, **{k: {f.name: str(f.type) for f in dataclasses.fields(c)}
                        for k, c in {**PARTS, **declared_sections()}.items()}}


def _check_path(path: str, where: str) -> None:
    keys = _arch_keys()
    section, _, name = path.rpartition(".")
    if section not in keys:
        raise SweepError(f"{where}: parameters: {path!r}: no arch section [{section}]; valid: "
                         f"{', '.join(sorted(k for k in keys if k))}")
    if name not in keys[section]:
        inside = f"[{section}]" if section else "the top level"
        raise SweepError(f"{where}: parameters: {path!r}: {inside} has no key {name!r}; valid: "
                         f"{', '.join(sorted(keys[section]))}")


def _parameters(value, where: str) -> dict[str, tuple]:
    if not isinstance(value, Mapping) or not value:
        raise SweepError(f"{where}: parameters: must be a non-empty table of dotted arch keys, "
                         "e.g. \"systolic.rows\" = [16, 32]")
    out = {}
    for path, values in value.items():
        if isinstance(values, Mapping) and not set(values) & {"start", "stop", "step", "factor"}:
            inner = next(iter(values), "key")
            raise SweepError(f"{where}: parameters: {path}.{inner} reads as TOML's table "
                             f"[{path}]: quote the dotted key, \"{path}.{inner}\" = [...]")
        _check_path(path, where)
        key = f"{where}: parameters.{json.dumps(path)}"
        out[path] = _typed(path, parameter_values(values, key), key)
    return out


SCALAR_TYPES = {"int": "an integer", "float": "a number", "bool": "true or false",
                "str": "a string"}


def _fits(value, declared: str) -> bool:
    """Whether ``value`` is of the arch key's ``declared`` scalar type (a bool is no
    number)."""
    if declared == "bool" or isinstance(value, bool):
        return declared == "bool" and isinstance(value, bool)
    if declared == "int":
        return isinstance(value, int)
    return isinstance(value, int | float) if declared == "float" else isinstance(value, str)


def _typed(path: str, values: tuple, key: str) -> tuple:
    """``values`` of a scalar arch key, each of the key's type (a string for a number would
    make every point infeasible, where a value out of range makes its own), those of an
    integer key as integers (a geometric range by 1.5 from 8 gives 12.0, 18.0: 12, 18),
    refused where one is not whole."""
    section, _, name = path.rpartition(".")
    declared = _arch_types().get(section, {}).get(name)
    wrong = [v for v in values if declared in SCALAR_TYPES and not _fits(v, declared)
             and not (declared == "int" and isinstance(v, float))]  # a fraction: below
    if wrong:
        raise SweepError(f"{key}: {path} is {SCALAR_TYPES[declared]}; {wrong[0]!r} is not")
    if declared != "int":
        return values
    bad = [v for v in values if isinstance(v, float) and not v.is_integer()]
    if bad:
        raise SweepError(f"{key}: {path} is an integer; {bad[0]!r} is not (give a list, or a "
                         "range whose values are whole)")
    return tuple(int(v) if isinstance(v, float) else v for v in values)


def parameter_values(value, key: str) -> tuple:
    """A parameter's values from a list, ``{start, stop, step}`` (stop included) or
    ``{start, stop, factor}`` (geometric, stop included)."""
    if isinstance(value, list):
        if not value or not all(isinstance(v, str | int | float | bool) for v in value):
            raise SweepError(f"{key}={value!r}: must be a non-empty list of values")
        if len({(type(v) is bool, v) for v in value}) != len(value):  # 32 and 32.0 alike
            raise SweepError(f"{key}={value!r}: names a value twice")
        return tuple(value)
    if not isinstance(value, Mapping):
        raise SweepError(f"{key}={value!r}: must be a list of values, {{start, stop, step}} or "
                         "{start, stop, factor}")
    _unknown(value, {"start", "stop", "step", "factor"}, key)
    kind = [k for k in ("step", "factor") if k in value]
    if len(kind) != 1 or "start" not in value or "stop" not in value:
        raise SweepError(f"{key}: a range needs start, stop and one of step (linear) or factor "
                         "(geometric)")
    nums = {k: value[k] for k in ("start", "stop", kind[0])}
    for k, v in nums.items():
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise SweepError(f"{key}.{k}={v!r}: must be a finite number")
    return _range(nums["start"], nums["stop"], kind[0], nums[kind[0]], key)


def _range(start, stop, kind: str, by, key: str) -> tuple:
    if stop < start:
        raise SweepError(f"{key}: stop={stop!r} is below start={start!r}")
    if kind == "step" and by <= 0:
        raise SweepError(f"{key}.step={by!r}: must be > 0")
    if kind == "factor" and (by <= 1 or start <= 0):
        raise SweepError(f"{key}: a geometric range needs factor > 1 and start > 0")
    count = (math.floor((stop - start) / by * (1 + 1e-12)) + 1 if kind == "step"
             else math.floor(math.log(stop / start) / math.log(by) * (1 + 1e-12)) + 1)
    if count > MAX_VALUES:
        raise SweepError(f"{key}: {count} values; at most {MAX_VALUES} per parameter")
    whole = all(isinstance(v, int) for v in (start, by))
    values = [start + i * by if kind == "step" else start * by**i for i in range(count)]
    return tuple(int(v) if whole else float(v) for v in values)


def point_key(point: Mapping[str, Any]) -> str:
    """The canonical text of a point (its dimensions' values), its identity in the store."""
    return json.dumps(point, sort_keys=True)
